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

/* One row of counted positions. Columns [0, live) hold the keys the row reaches, in ascending order, the
 * last one the query itself; those in [m0, m1) are masked (no gate; m0 = m1 for none). a: the row's
 * a = q . k / sqrt(d_head); l: its points logits q . e. */

/* The scan from the diagonal down, one column: c's gate added to the running count, its cell (k, *w,
 * *clamped); -1 for a masked column. */
static inline BK_HOST_INLINE BIASKIT_HD int32_t bk_cope_step(double *sum, const float *a, int32_t c, int32_t m0,
                                                            int32_t m1, int32_t points, float *w, int *clamped)
{
    if (c >= m0 && c < m1)
        return -1;
    *sum += bk_cope_gate(a[c]);
    return bk_cope_cell(*sum, points, w, clamped);
}

/* Forward: out[c] = scale x the row's logits interpolated at the count from key c to the diagonal (0 on a
 * masked column). */
static inline BK_HOST_INLINE BIASKIT_HD void bk_cope_row(const float *a, int32_t live, int32_t m0, int32_t m1,
                                                        const float *l, int32_t points, float scale, float *out)
{
    double sum = 0.0;
    for (int32_t c = live - 1; c >= 0; c--) {
        float w = 0.0f;
        int clamped = 0;
        const int32_t k = bk_cope_step(&sum, a, c, m0, m1, points, &w, &clamped);
        out[c] = k < 0 ? 0.0f : scale * bk_cope_lerp(l, k, w);
    }
}

/* Backward, from the row's score gradient ds: dl (points floats) += dL/dl, and out[c] = dL/da_c through the
 * gates (0 on masked columns), for the caller to add to the gradient of a (after any logit scale's factor:
 * the gates do not see it). out holds dL/dp between the two scans. */
static inline BK_HOST_INLINE BIASKIT_HD void bk_cope_row_backward(const float *ds, const float *a, int32_t live,
                                                                 int32_t m0, int32_t m1, const float *l,
                                                                 int32_t points, float scale, float *dl, float *out)
{
    double sum = 0.0;
    for (int32_t c = live - 1; c >= 0; c--) { /* dL/dp and dL/dl, in the forward's order */
        float w = 0.0f;
        int clamped = 0;
        const int32_t k = bk_cope_step(&sum, a, c, m0, m1, points, &w, &clamped);
        if (k < 0) {
            out[c] = 0.0f;
            continue;
        }
        const float g = ds[c] * scale;
        dl[k] += g * (1.0f - w);
        if (w > 0.0f)
            dl[k + 1] += g * w;
        out[c] = bk_cope_dp(l, k, w, clamped, g);
    }
    double run = 0.0; /* dL/dg_t = sum over the visible j <= t of dL/dp_j */
    for (int32_t c = 0; c < live; c++) {
        if (c >= m0 && c < m1)
            continue;
        run += out[c];
        const float g = bk_cope_gate(a[c]);
        out[c] = (float)run * g * (1.0f - g);
    }
}

#endif
