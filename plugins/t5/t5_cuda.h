/* The CUDA half of the T5 plugin (t5.cu), called from t5.c when built with CUDA. */
#ifndef BIASKIT_T5_CUDA_H
#define BIASKIT_T5_CUDA_H

#include "t5_math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* table[h * distances + d] = scale * theta[h * buckets + bucket(d)] on the device (device pointers),
 * enqueued on `stream`. */
int bk_t5_table_cuda(const biaskit_services *svc, bk_t5_shape shape, const float *theta, int32_t distances,
                     float *table, void *stream, biaskit_error *err);
/* dtheta[h * buckets + b] += scale * sum of dtable[h * distances + d] over the distances d of bucket b
 * (device pointers): one block per (bucket, head), a fixed-order reduction, no atomics, so two runs
 * give bit-identical gradients. */
int bk_t5_table_backward_cuda(const biaskit_services *svc, bk_t5_shape shape, int32_t distances,
                              const float *dtable, float *dtheta, void *stream, biaskit_error *err);

#ifdef __cplusplus
}
#endif

#endif
