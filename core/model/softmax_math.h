/* The two row softmaxes of the model, written once for the CPU layers and the device kernels (the
 * device code calls these from its kernels, core/gpu/kernels_*.h), so that every backend computes
 * them in the same order:
 *
 *   bk_crossentropy_row   one row of V logits: the loss -log softmax(z)[target], with the max in
 *                         float, the sum of exp in double in vocabulary order, and the
 *                         probabilities when `probs` is not NULL;
 *   bk_causal_softmax_row one attention row whose scores (bias already added) are row[0 .. live-1]:
 *                         softmax in place in float, max subtracted so exp cannot overflow (exp by
 *                         bk_expf_nonpositive: model/expf_math.h, vectorised on the host; expf on the
 *                         device), the sum in column order, then columns live .. width-1 set to 0
 *                         (the keys after the query). */
#ifndef BK_SOFTMAX_MATH_H
#define BK_SOFTMAX_MATH_H

#include "model/expf_math.h"

#include <biaskit/plugin.h> /* BIASKIT_HD */

#include <math.h>
#include <stdint.h>

static inline BIASKIT_HD void bk_crossentropy_row(const float *z, int64_t V, int32_t target, float *loss, float *probs)
{
    float m = -INFINITY;
    for (int64_t v = 0; v < V; v++)
        m = z[v] > m ? z[v] : m;
    double total = 0.0;
    for (int64_t v = 0; v < V; v++)
        total += exp((double)(z[v] - m));
    double log_total = log(total);
    *loss = (float)(log_total - (double)(z[target] - m));
    if (probs)
        for (int64_t v = 0; v < V; v++)
            probs[v] = (float)exp((double)(z[v] - m) - log_total);
}

static inline BIASKIT_HD void bk_causal_softmax_row(float *row, int64_t live, int64_t width)
{
    float max = -INFINITY;
    for (int64_t j = 0; j < live; j++)
        max = row[j] > max ? row[j] : max;
    /* the exps first (a loop that vectorises on the host), then their sum in column order */
    BK_OMP_SIMD
    for (int64_t j = 0; j < live; j++)
        row[j] = bk_expf_nonpositive(row[j] - max);
    float sum = 0.0f;
    for (int64_t j = 0; j < live; j++)
        sum += row[j];
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < live; j++)
        row[j] *= inv;
    for (int64_t j = live; j < width; j++)
        row[j] = 0.0f;
}

#endif
