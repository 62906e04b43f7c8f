/* The CUDA half of the ALiBi plugin (alibi.cu), called from alibi.c when built with CUDA. */
#ifndef BIASKIT_ALIBI_CUDA_H
#define BIASKIT_ALIBI_CUDA_H

#include <biaskit/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* table[h * distances + d] = bk_alibi_bias(slopes[h], d) on the device, enqueued on `stream`.
 * *device_slopes caches a device copy of the host `slopes`, made on first use. */
int bk_alibi_table_cuda(const biaskit_services *svc, const float *slopes, int32_t heads, float **device_slopes,
                        int32_t distances, float *table, void *stream, biaskit_error *err);
/* Free the cached device copy (NULL is fine). */
void bk_alibi_cuda_release(float *device_slopes);

#ifdef __cplusplus
}
#endif

#endif
