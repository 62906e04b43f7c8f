/* LayerNorm of one row of C channels, written once for the host layer (model/layers.c) and the device
 * kernels (gpu/kernels_layers.h), so that both compute the same bits:
 *
 *   bk_layernorm_row           y = (x - mean) * rstd * w + b, mean and variance in double,
 *                              rstd = 1 / sqrt(var + BK_LAYERNORM_EPS) in float;
 *   bk_layernorm_row_backward  dx += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)),
 *                              dnorm = w * dy, norm = (x - mean) * rstd, the two means in double.
 *
 * Every sum over the channels runs in BK_SUM_LANES interleaved partial sums combined in a fixed order
 * at the end (as bk_sum_lanes in model/softmax_math.h): the host vectorises it, and the grouping does
 * not depend on the vector width. The parameter gradients (sums over rows) are the callers'. */
#ifndef BK_LAYERNORM_MATH_H
#define BK_LAYERNORM_MATH_H

#include "model/host_simd.h"
#include "model/softmax_math.h" /* BK_SUM_LANES, BK_LANES_TOTAL */

#include <biaskit/plugin.h> /* BIASKIT_HD */

#include <math.h>
#include <stdint.h>

#define BK_LAYERNORM_EPS 1e-5f

/* The pieces the row functions below share with the device's lane-parallel row programs
 * (gpu/kernels_layers.h: one thread per lane), so that both compute the same operations in order. */

/* a lane total divided by the channel count (the mean, the variance, the backward's two means) */
static inline BK_HOST_INLINE BIASKIT_HD double bk_layernorm_lanes_mean(const double *lane, int64_t C)
{
    return BK_LANES_TOTAL(lane) / (double)C;
}

static inline BK_HOST_INLINE BIASKIT_HD double bk_layernorm_square(float x, double mean)
{
    return (x - mean) * (x - mean);
}

static inline BK_HOST_INLINE BIASKIT_HD float bk_layernorm_rstd(double var)
{
    return 1.0f / sqrtf((float)var + BK_LAYERNORM_EPS);
}

static inline BK_HOST_INLINE BIASKIT_HD float bk_layernorm_y(float x, double mean, float rstd, float w, float b)
{
    return (float)(x - mean) * rstd * w + b;
}

/* backward: norm = (x - mean) rstd and dnorm = w dy of one channel */
static inline BK_HOST_INLINE BIASKIT_HD void bk_layernorm_dterms(float x, float dy, float w, float mean, float rstd,
                                                                 float *norm, float *dnorm)
{
    *norm = (x - mean) * rstd;
    *dnorm = w * dy;
}

static inline BK_HOST_INLINE BIASKIT_HD float bk_layernorm_dx(float norm, float dnorm, float dnorm_mean,
                                                              float dnorm_norm_mean, float rstd)
{
    return (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd;
}

static inline BK_HOST_INLINE BIASKIT_HD void bk_layernorm_row(float *y, float *mean_out, float *rstd_out,
                                                              const float *x, const float *w, const float *b,
                                                              int64_t C)
{
    double lane[BK_SUM_LANES] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    int64_t j = 0;
    for (; j + BK_SUM_LANES <= C; j += BK_SUM_LANES) {
        BK_OMP_SIMD
        for (int l = 0; l < BK_SUM_LANES; l++)
            lane[l] += x[j + l];
    }
    for (int l = 0; j + l < C; l++)
        lane[l] += x[j + l];
    const double m = bk_layernorm_lanes_mean(lane, C);
    for (int l = 0; l < BK_SUM_LANES; l++)
        lane[l] = 0.0;
    for (j = 0; j + BK_SUM_LANES <= C; j += BK_SUM_LANES) {
        BK_OMP_SIMD
        for (int l = 0; l < BK_SUM_LANES; l++)
            lane[l] += bk_layernorm_square(x[j + l], m);
    }
    for (int l = 0; j + l < C; l++)
        lane[l] += bk_layernorm_square(x[j + l], m);
    const float s = bk_layernorm_rstd(bk_layernorm_lanes_mean(lane, C));
    BK_OMP_SIMD
    for (int64_t c = 0; c < C; c++)
        y[c] = bk_layernorm_y(x[c], m, s, w[c], b[c]);
    *mean_out = (float)m;
    *rstd_out = s;
}

static inline BK_HOST_INLINE BIASKIT_HD void bk_layernorm_row_backward(float *dx, const float *dy, const float *x,
                                                                       const float *w, float mean, float rstd,
                                                                       int64_t C)
{
    double mean_lane[BK_SUM_LANES] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    double dot_lane[BK_SUM_LANES] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    int64_t j = 0;
    for (; j + BK_SUM_LANES <= C; j += BK_SUM_LANES) {
        BK_OMP_SIMD
        for (int l = 0; l < BK_SUM_LANES; l++) {
            float norm, dnorm;
            bk_layernorm_dterms(x[j + l], dy[j + l], w[j + l], mean, rstd, &norm, &dnorm);
            mean_lane[l] += dnorm;
            dot_lane[l] += dnorm * norm;
        }
    }
    for (int l = 0; j + l < C; l++) {
        float norm, dnorm;
        bk_layernorm_dterms(x[j + l], dy[j + l], w[j + l], mean, rstd, &norm, &dnorm);
        mean_lane[l] += dnorm;
        dot_lane[l] += dnorm * norm;
    }
    const float dnorm_mean = (float)bk_layernorm_lanes_mean(mean_lane, C);
    const float dnorm_norm_mean = (float)bk_layernorm_lanes_mean(dot_lane, C);
    BK_OMP_SIMD
    for (int64_t c = 0; c < C; c++) {
        float norm, dnorm;
        bk_layernorm_dterms(x[c], dy[c], w[c], mean, rstd, &norm, &dnorm);
        dx[c] += bk_layernorm_dx(norm, dnorm, dnorm_mean, dnorm_norm_mean, rstd);
    }
}

#endif
