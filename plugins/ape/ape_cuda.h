/* The CUDA half of the `ape` and `bipe` embeddings (ape.cu), called from ape.c and bipe.c when built
 * with CUDA. Device pointers throughout; work is enqueued on `stream` only. */
#ifndef BIASKIT_APE_CUDA_H
#define BIASKIT_APE_CUDA_H

#include <biaskit/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[n * C + c] += A[positions[n]][c] for n < count: the learned table `table` (rows x C, positions
 * past the last row read it) when `table` is not NULL, else the sinusoidal embedding of `base` and
 * amplitude `scale`. One thread per output element (no two write one address). */
int bk_ape_embed_cuda(const biaskit_services *svc, const float *table, int32_t rows, double base, double scale, int32_t C,
                      const int32_t *positions, int64_t count, float *out, void *stream, biaskit_error *err);

/* dtable[row(p_n)][c] += dout[n * C + c] for n < count, deterministically and in the host's order:
 * the positions are cut into maximal runs in which their rows do not decrease (every sequence is one
 * or more of them); one thread per (row, channel) finds its tokens in each run by binary search and
 * adds them in ascending n into its own accumulator, so the result equals the host loop's bit for
 * bit, with no atomics. `*runs` / `*runs_capacity` are the caller's scratch (count + 2 int64s, grown on
 * demand, freed with bk_ape_cuda_release). */
int bk_ape_embed_backward_cuda(const biaskit_services *svc, int32_t rows, int32_t C, const int32_t *positions,
                               int64_t count, const float *dout, float *dtable, int64_t **runs,
                               int64_t *runs_capacity, void *stream, biaskit_error *err);

/* Free scratch made by bk_ape_embed_backward_cuda (NULL is fine). */
void bk_ape_cuda_release(void *device);

#ifdef __cplusplus
}
#endif

#endif
