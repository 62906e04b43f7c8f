/* The per-element pieces of the ABI 2 bias terms (sdk/include/biaskit/plugin.h, "Beyond distance
 * tables"), written once for the CPU attention and the device kernels (core/gpu/):
 *
 *   coordinate tables   F_h(u) given at `points` grid values u_g = g / (points - 1), read by linear
 *                       interpolation at u(i, d) = phi[d] * rscale[i] in [0, 1];
 *   masks               key j is visible to query i when j <= i and (i - j < window or j < sinks);
 *                       window <= 0 means no window; a masked score is exactly -inf;
 *   tile classes        whether a block of (query, key) pairs is masked entirely (skipped: never
 *                       loaded or multiplied), visible entirely, or partly (masked per element).
 *
 * The logit scale needs no helper: score = scale[h][i] * (q.k / sqrt(hd)) + bias. */
#ifndef BK_BIAS_MATH_H
#define BK_BIAS_MATH_H

#include "model/host_simd.h" /* BK_HOST_INLINE */

#include <biaskit/plugin.h> /* BIASKIT_HD */

#include <stdint.h>

/* How far above 1 the engine lets u(i, i) = phi[i] * rscale[i] go: float rounding of the product (the
 * attention clamps u into [0, 1]). bias/query.c checks the plugins' coordinates with it, and so does
 * biaskit check. */
#define BK_COORD_SLACK 1e-5f

/* u(i, d) from its two factors. */
static inline BK_HOST_INLINE BIASKIT_HD float bk_coord_u(float phi_d, float rscale_i)
{
    return phi_d * rscale_i;
}

/* The grid cell of u: x = u (points - 1), g = floor(x) kept inside [0, points - 2] (so u = 1 falls in
 * the last cell, at t = 1), t = x - g in [0, 1]. Returns g; *t receives t. u outside [0, 1] is clamped
 * to it (the engine checks u before it calls the attention; this keeps the reads inside the table). */
static inline BK_HOST_INLINE BIASKIT_HD int32_t bk_coord_cell(float u, int32_t points, float *t)
{
    float x = u * (float)(points - 1);
    x = x > 0.0f ? x : 0.0f;
    x = x < (float)(points - 1) ? x : (float)(points - 1);
    int32_t g = (int32_t)x;
    g = g < points - 2 ? g : points - 2;
    *t = x - (float)g;
    return g;
}

/* F(u) by linear interpolation inside cell g at t (grid: one head's `points` values). */
static inline BK_HOST_INLINE BIASKIT_HD float bk_coord_lerp(const float *grid, int32_t g, float t)
{
    return grid[g] + t * (grid[g + 1] - grid[g]);
}

/* What a coordinate table adds to the score of (i, d): F_h interpolated at u = phi[d] * rscale[i] on
 * the grid of head h (points values). */
static inline BK_HOST_INLINE BIASKIT_HD float bk_coord_score(const float *grid_h, int32_t points, float phi_d,
                                                             float rscale_i)
{
    float t;
    const int32_t g = bk_coord_cell(bk_coord_u(phi_d, rscale_i), points, &t);
    return bk_coord_lerp(grid_h, g, t);
}

/* dF/du inside cell g: the cell's slope. */
static inline BK_HOST_INLINE BIASKIT_HD float bk_coord_slope(const float *grid, int32_t g, int32_t points)
{
    return (grid[g + 1] - grid[g]) * (float)(points - 1);
}

/* 1 when query i sees key j (both 0-based token indices). */
static inline BK_HOST_INLINE BIASKIT_HD int bk_mask_keeps(int32_t i, int32_t j, int32_t window, int32_t sinks)
{
    return j <= i && (window <= 0 || i - j < window || j < sinks);
}

/* The first key of the window of query rows starting at i0: keys [first, ...) are the window part,
 * keys [0, min(sinks, first)) the sinks. 0 without a window. */
static inline BK_HOST_INLINE BIASKIT_HD int32_t bk_mask_first_key(int32_t i0, int32_t window)
{
    return window > 0 && i0 - window + 1 > 0 ? i0 - window + 1 : 0;
}

enum { BK_TILE_SKIP = 0, BK_TILE_FULL = 1, BK_TILE_PARTIAL = 2 };

/* Class of the block of query rows [q0, q1) against keys [k0, k1) (both non-empty), causal mask
 * included: SKIP when every pair is masked, FULL when every pair is visible, else PARTIAL. */
static inline BK_HOST_INLINE BIASKIT_HD int bk_mask_tile(int32_t q0, int32_t q1, int32_t k0, int32_t k1, int32_t window,
                                                         int32_t sinks)
{
    if (k0 > q1 - 1)
        return BK_TILE_SKIP; /* every key after every query */
    if (window > 0 && q0 - (k1 - 1) >= window && k0 >= sinks)
        return BK_TILE_SKIP; /* even the nearest pair is outside the window, and no key is a sink */
    int causal_full = k1 - 1 <= q0;
    int window_full = window <= 0 || (q1 - 1) - k0 < window || k1 <= sinks;
    return causal_full && window_full ? BK_TILE_FULL : BK_TILE_PARTIAL;
}

/* ---- content position (BIASKIT_CAP_CONTENT; cpu/attention.h's cpos) ----------------------------------
 * The score of query i, key j gets -(P(i) - P(j)) = P(j) - P(i), P the content position of the (batch row,
 * head), added after the logit scale like the other additive terms; its gradient for token t is the sum of
 * the score gradients of t's pairs as a key (column t) minus the sum of those as a query (row t). */

/* The term of the pair (i, j) from P(i) = p_i and P(j) = p_j. */
static inline BK_HOST_INLINE BIASKIT_HD float bk_content_term(float p_i, float p_j)
{
    return p_j - p_i;
}

/* dL/dP(t) from the sum of dS over t's column (as a key) and over its row (as a query), both in double. */
static inline BK_HOST_INLINE BIASKIT_HD double bk_content_grad(double key_sum, double query_sum)
{
    return key_sum - query_sum;
}

#endif
