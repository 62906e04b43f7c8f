/* The CUDA half of the Qin et al. plugin (qin.cu), called from qin.c when built with CUDA. */
#ifndef BIASKIT_QIN_CUDA_H
#define BIASKIT_QIN_CUDA_H

#include <biaskit/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* table[h * distances + d] = bk_qin_bias(form, offset, d) for every head on the device, enqueued on
 * `stream`. */
int bk_qin_table_cuda(const biaskit_services *svc, int form, int32_t offset, int32_t heads, int32_t distances,
                      float *table, void *stream, biaskit_error *err);

#ifdef __cplusplus
}
#endif

#endif
