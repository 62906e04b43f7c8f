/* The CUDA half of the MEP plugin (mep.cu), called from mep.c when built with CUDA. */
#ifndef BIASKIT_MEP_CUDA_H
#define BIASKIT_MEP_CUDA_H

#include "mep_math.h"

#include <biaskit/plugin.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* table[h * distances + d] = bk_mep_bias(spec, slopes[h], r1[h], r2[h], d) on the device, enqueued on
 * `stream`. `slopes` is a device array of heads ALiBi slopes; `theta` the device parameters r1 (heads),
 * r2 (heads), or NULL when the mixture has no KERPLE-log kernel. */
int bk_mep_table_cuda(const biaskit_services *svc, const bk_mep_spec *spec, int32_t heads, const float *slopes,
                      const float *theta, int32_t distances, float *table, void *stream, biaskit_error *err);

/* dtheta[h] += sum_d dtable[h][d] dB_h(d)/dr1_h and dtheta[heads + h] += ... dB_h(d)/dr2_h (device
 * pointers): one block per head, double accumulation and a fixed-order tree reduction (no atomics),
 * so the result is the same bit for bit on every run. */
int bk_mep_table_backward_cuda(const biaskit_services *svc, const bk_mep_spec *spec, int32_t heads,
                               const float *slopes, const float *theta, int32_t distances, const float *dtable,
                               float *dtheta, void *stream, biaskit_error *err);

/* *device gets a device copy of host[0 .. count-1] (made once, on first use; enqueued on `stream`). */
int bk_mep_upload(const biaskit_services *svc, const float *host, size_t count, float **device, void *stream,
                  biaskit_error *err);
/* Free a device copy made by bk_mep_upload (NULL is fine). */
void bk_mep_cuda_release(float *device);

#ifdef __cplusplus
}
#endif

#endif
