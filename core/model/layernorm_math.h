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
    const double m = BK_LANES_TOTAL(lane) / (double)C;
    for (int l = 0; l < BK_SUM_LANES; l++)
        lane[l] = 0.0;
    for (j = 0; j + BK_SUM_LANES <= C; j += BK_SUM_LANES) {
        BK_OMP_SIMD
        for (int l = 0; l < BK_SUM_LANES; l++)
            lane[l] += (x[j + l] - m) * (x[j + l] - m);
    }
    for (int l = 0; j + l < C; l++)
        lane[l] += (x[j + l] - m) * (x[j + l] - m);
    const double v = BK_LANES_TOTAL(lane) / (double)C;
    const float s = 1.0f / sqrtf((float)v + BK_LAYERNORM_EPS);
    BK_OMP_SIMD
    for (int64_t c = 0; c < C; c++)
        y[c] = (float)(x[c] - m) * s * w[c] + b[c];
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
            const float norm = (x[j + l] - mean) * rstd, dnorm = w[j + l] * dy[j + l];
            mean_lane[l] += dnorm;
            dot_lane[l] += dnorm * norm;
        }
    }
    for (int l = 0; j + l < C; l++) {
        const float norm = (x[j + l] - mean) * rstd, dnorm = w[j + l] * dy[j + l];
        mean_lane[l] += dnorm;
        dot_lane[l] += dnorm * norm;
    }
    const float dnorm_mean = (float)(BK_LANES_TOTAL(mean_lane) / (double)C);
    const float dnorm_norm_mean = (float)(BK_LANES_TOTAL(dot_lane) / (double)C);
    BK_OMP_SIMD
    for (int64_t c = 0; c < C; c++) {
        const float norm = (x[c] - mean) * rstd, dnorm = w[c] * dy[c];
        dx[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd;
    }
}

#endif
