/* The CUDA half of the KERPLE plugin (kerple.cu), called from kerple.c when built with CUDA. */
#ifndef BIASKIT_KERPLE_CUDA_H
#define BIASKIT_KERPLE_CUDA_H

#include <biaskit/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* table[h * distances + d] = bk_kerple_bias(variant, r1[h], r2[h], r3[h], d) on the device, enqueued on
 * `stream`. `params` is a device array laid out as theta: r1 (heads), r2 (heads)[, r3 (heads)]. */
int bk_kerple_table_cuda(const biaskit_services *svc, int variant, int32_t heads, const float *params,
                         int32_t distances, float *table, void *stream, biaskit_error *err);

/* dtheta[k * heads + h] += sum_d dtable[h * distances + d] * dT_h(d)/dr_{k+1} (device pointers): one
 * block per head, double accumulation and a fixed-order tree reduction, so the result is the same
 * bit for bit on every run. */
int bk_kerple_table_backward_cuda(const biaskit_services *svc, int variant, int32_t heads, const float *params,
                                  int32_t distances, const float *dtable, float *dtheta, void *stream,
                                  biaskit_error *err);

/* *device gets a device copy of host[0 .. count-1] (made once, on first use; enqueued on `stream`). */
int bk_kerple_upload(const biaskit_services *svc, const float *host, size_t count, float **device, void *stream,
                     biaskit_error *err);
/* Free a device copy made by bk_kerple_upload (NULL is fine). */
void bk_kerple_cuda_release(float *device);

#ifdef __cplusplus
}
#endif

#endif
