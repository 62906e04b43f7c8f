/* The per-row pieces of the LLaMA family's blocks ([model] family = "llama"), written once for the host
 * layers (model/layers.c) and the device kernels (gpu/kernels_layers.h):
 *
 *   bk_rmsnorm_row           y = x * rstd * w,  rstd = 1 / sqrt(mean(x^2) + eps): the mean of squares in
 *                            double, in BK_SUM_LANES interleaved lanes, rstd in float;
 *   bk_rmsnorm_row_backward  dx += rstd (w dy) - x rstd^3 mean(w dy x), the mean in double;
 *   bk_swiglu / _grad        h = silu(g) u = g sigmoid(g) u (Shazeer, "GLU Variants Improve Transformer",
 *                            2020), and its two partial derivatives;
 *   GQA                      query head h reads key and value head h / (H / KV) (Ainslie et al., 2023).
 *
 * The row functions are built of the pieces below, which the device's lane-parallel row programs
 * (gpu/kernels_layers.h: one thread per lane) call too, so that both compute the same operations in the
 * same order; the weight gradient's per-row term is here as well. The sums over rows are the callers'. */
#ifndef BK_LLAMA_MATH_H
#define BK_LLAMA_MATH_H

#include "model/host_simd.h"
#include "model/softmax_math.h" /* BK_SUM_LANES, BK_LANES_TOTAL */

#include <biaskit/plugin.h> /* BIASKIT_HD */

#include <math.h>
#include <stdint.h>

/* The key/value head that query head h of H reads when there are KV of them (KV divides H). */
static inline BK_HOST_INLINE BIASKIT_HD int bk_gqa_kv_head(int h, int H, int KV)
{
    return h / (H / KV);
}

static inline BK_HOST_INLINE BIASKIT_HD float bk_rmsnorm_rstd(double mean_square, float eps)
{
    return 1.0f / sqrtf((float)mean_square + eps);
}

/* forward: one channel's term of the sum of squares, in double (exact) */
static inline BK_HOST_INLINE BIASKIT_HD double bk_rmsnorm_square(float x)
{
    return (double)x * (double)x;
}

/* rstd from the BK_SUM_LANES lane sums of the squares of a row of C channels */
static inline BK_HOST_INLINE BIASKIT_HD float bk_rmsnorm_lanes_rstd(const double *lane, int64_t C, float eps)
{
    return bk_rmsnorm_rstd(BK_LANES_TOTAL(lane) / (double)C, eps);
}

static inline BK_HOST_INLINE BIASKIT_HD float bk_rmsnorm_y(float x, float rstd, float w)
{
    return x * rstd * w;
}

/* backward: one channel's term of the sum of (w dy) x, in double (exact) */
static inline BK_HOST_INLINE BIASKIT_HD double bk_rmsnorm_dterm(float x, float dy, float w)
{
    return (double)(w * dy) * (double)x;
}

/* k = mean((w dy) x) rstd^3 from the lane sums of bk_rmsnorm_dterm */
static inline BK_HOST_INLINE BIASKIT_HD float bk_rmsnorm_lanes_k(const double *lane, int64_t C, float rstd)
{
    return (float)(BK_LANES_TOTAL(lane) / (double)C) * rstd * rstd * rstd;
}

static inline BK_HOST_INLINE BIASKIT_HD float bk_rmsnorm_dx(float x, float dy, float w, float rstd, float k)
{
    return rstd * (w * dy) - x * k;
}

/* one row's term of dw_c = sum over rows of (x rstd) dy, in double */
static inline BK_HOST_INLINE BIASKIT_HD double bk_rmsnorm_dweight_term(float x, float rstd, float dy)
{
    return (double)(x * rstd) * dy;
}

static inline BK_HOST_INLINE BIASKIT_HD void bk_rmsnorm_row(float *y, float *rstd_out, const float *x, const float *w,
                                                            int64_t C, float eps)
{
    double lane[BK_SUM_LANES] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    int64_t j = 0;
    for (; j + BK_SUM_LANES <= C; j += BK_SUM_LANES) {
        BK_OMP_SIMD
        for (int l = 0; l < BK_SUM_LANES; l++)
            lane[l] += bk_rmsnorm_square(x[j + l]);
    }
    for (int l = 0; j + l < C; l++)
        lane[l] += bk_rmsnorm_square(x[j + l]);
    const float r = bk_rmsnorm_lanes_rstd(lane, C, eps);
    BK_OMP_SIMD
    for (int64_t c = 0; c < C; c++)
        y[c] = bk_rmsnorm_y(x[c], r, w[c]);
    *rstd_out = r;
}

static inline BK_HOST_INLINE BIASKIT_HD void bk_rmsnorm_row_backward(float *dx, const float *dy, const float *x,
                                                                     const float *w, float rstd, int64_t C)
{
    double lane[BK_SUM_LANES] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    int64_t j = 0;
    for (; j + BK_SUM_LANES <= C; j += BK_SUM_LANES) {
        BK_OMP_SIMD
        for (int l = 0; l < BK_SUM_LANES; l++)
            lane[l] += bk_rmsnorm_dterm(x[j + l], dy[j + l], w[j + l]);
    }
    for (int l = 0; j + l < C; l++)
        lane[l] += bk_rmsnorm_dterm(x[j + l], dy[j + l], w[j + l]);
    const float k = bk_rmsnorm_lanes_k(lane, C, rstd);
    BK_OMP_SIMD
    for (int64_t c = 0; c < C; c++)
        dx[c] += bk_rmsnorm_dx(x[c], dy[c], w[c], rstd, k);
}

/* sigmoid(g) */
static inline BK_HOST_INLINE BIASKIT_HD float bk_silu_sigmoid(float g)
{
    return 1.0f / (1.0f + expf(-g));
}

/* h = silu(g) u */
static inline BK_HOST_INLINE BIASKIT_HD float bk_swiglu(float g, float u)
{
    return g * bk_silu_sigmoid(g) * u;
}

/* dL/dg and dL/du from dL/dh: d silu(g)/dg = s (1 + g (1 - s)), s = sigmoid(g). */
static inline BK_HOST_INLINE BIASKIT_HD void bk_swiglu_grad(float g, float u, float dh, float *dg, float *du)
{
    const float s = bk_silu_sigmoid(g);
    *dg = dh * u * (s * (1.0f + g * (1.0f - s)));
    *du = dh * (g * s);
}

#endif
