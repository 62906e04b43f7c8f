/* The CUDA half of the example plugin (gaussian.cu), called by gaussian.c in CUDA builds. */
#ifndef GAUSSIAN_CUDA_H
#define GAUSSIAN_CUDA_H

#include <biaskit/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* table[h][d] = -w_h d^2 on the device. The widths are `theta` (device, learnable) when not NULL;
 * otherwise the fixed host widths `frozen` (one per head), copied to *device_frozen on the first call
 * and read from there after. */
int gaussian_table_cuda(const biaskit_services *svc, int32_t heads, const float *theta, const float *frozen,
                        float **device_frozen, int32_t distances, float *table, void *stream, biaskit_error *err);
/* dwidth[h] += sum_d dtable[h][d] * dT/dw (device pointers), one deterministic block per head. */
int gaussian_table_backward_cuda(const biaskit_services *svc, int32_t heads, int32_t distances,
                                 const float *dtable, float *dwidth, void *stream, biaskit_error *err);
/* Frees the device copy of the fixed widths (NULL is fine). */
void gaussian_cuda_release(float *device_frozen);

#ifdef __cplusplus
}
#endif

#endif
