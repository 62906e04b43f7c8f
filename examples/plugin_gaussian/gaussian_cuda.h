/* The CUDA half of the example plugin (gaussian.cu). */
#ifndef GAUSSIAN_CUDA_H
#define GAUSSIAN_CUDA_H

#include <biaskit/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* width: device pointer to one width per head, or NULL for `fixed_width` on every head. */
int gaussian_table_cuda(const biaskit_services *svc, int32_t heads, const float *width, float fixed_width,
                        int32_t distances, float *table, void *stream, biaskit_error *err);
/* dwidth[h] += sum_d dtable[h][d] * dT/dw (device pointers), one deterministic block per head. */
int gaussian_table_backward_cuda(const biaskit_services *svc, int32_t heads, int32_t distances,
                                 const float *dtable, float *dwidth, void *stream, biaskit_error *err);

#ifdef __cplusplus
}
#endif

#endif
