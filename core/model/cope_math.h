/* The per-element pieces of counted positions (CoPE; plugin.h, BIASKIT_CAP_COUNT), written once for
 * the attention:
 *
 *   gate        g_it = sigmoid(a_it), a = q_i . k_t / sqrt(d_head) (before any logit scale)
 *   count       p_ij = min(g_ij + ... + g_ii over the visible keys, points - 1)
 *   position    the row's logits against the position vectors, l_k = q_i . e_k, read at p:
 *               (1 - w) l_floor(p) + w l_floor(p)+1,  w = p - floor(p)   (l_{points} is never read: w = 0 there)
 *   gradient    dL/dp = dL/dpos (l_ceil(p) - l_floor(p)): 0 where p was clamped or is a whole number;
 *               dL/dg_it = sum over the visible j <= t of dL/dp_ij; dL/da_it += dL/dg_it g (1 - g) */
#ifndef BK_COPE_MATH_H
#define BK_COPE_MATH_H

#include "model/host_simd.h" /* BK_HOST_INLINE */

#include <biaskit/plugin.h> /* BIASKIT_HD */

#include <math.h>
#include <stdint.h>

static inline BK_HOST_INLINE BIASKIT_HD float bk_cope_gate(float a)
{
    return 1.0f / (1.0f + expf(-a));
}

/* The cell of a running count `sum`: the clamped p's floor k (0 .. points - 1), its weight *w toward k + 1
 * (0 when p sits on k, always 0 at points - 1, so k + 1 is read only when it exists) and *clamped (1 when
 * sum > points - 1: p does not move with the gates there). */
static inline BK_HOST_INLINE BIASKIT_HD int32_t bk_cope_cell(double sum, int32_t points, float *w, int *clamped)
{
    const double top = (double)(points - 1);
    *clamped = sum > top;
    const double p = *clamped ? top : sum;
    int32_t k = (int32_t)p;
    k = k < points - 1 ? k : points - 1;
    *w = (float)(p - (double)k);
    return k;
}

/* The interpolated logit at cell k, weight w (l: the row's points logits q . e). */
static inline BK_HOST_INLINE BIASKIT_HD float bk_cope_lerp(const float *l, int32_t k, float w)
{
    return w > 0.0f ? (1.0f - w) * l[k] + w * l[k + 1] : l[k];
}

/* dL/dp from dL/dpos at cell k, weight w: the cell's slope l_ceil(p) - l_floor(p), which is 0 where p sits on
 * a grid point (ceil = floor, as in the reference code) and where p was clamped. */
static inline BK_HOST_INLINE BIASKIT_HD float bk_cope_dp(const float *l, int32_t k, float w, int clamped, float dpos)
{
    return clamped || w <= 0.0f ? 0.0f : dpos * (l[k + 1] - l[k]);
}

#endif
