/* The fixed biases of Qin, Zhong & Deng, "Exploring Transformer Extrapolation" (AAAI 2024,
 * arXiv 2307.10156), written once and shared by the host code (qin.c), the CUDA kernel (qin.cu) and
 * the tests.
 *
 * The paper states each bias through b_n = exp(r), the series whose convergence guarantees length
 * extrapolation; the additive logit bias at distance t = i - j >= 0 is r_t = ln b_n:
 *
 *     type1     b_n = 1/n^2,           n = t + 1       r_t = -2 ln(t + 1)
 *     type2     b_n = exp(-ln^2 n),    n = t + 1       r_t = -ln(t + 1)^2
 *     harmonic  b_n = 1/n,             n = t + 1       r_t = -ln(t + 1)          (diverges: necessity probe)
 *     nlogn     b_n = 1/(n ln n),      n = t + offset  r_t = -ln(n ln n)         (diverges: necessity probe)
 *
 * n = t + 1 follows the paper's TRF sum for type 1 (b_0 = 1 on the diagonal). The paper does not give
 * the offset of 1/(n ln n); it must be >= 2 because ln 1 = 0 (the plugin's default is 2).
 * Computed in double and rounded once to float, so the host and the device agree. */
#ifndef BIASKIT_QIN_MATH_H
#define BIASKIT_QIN_MATH_H

#include <biaskit/plugin.h>

#include <math.h>
#include <stdint.h>

typedef enum bk_qin_form {
    BK_QIN_TYPE1 = 0,
    BK_QIN_TYPE2 = 1,
    BK_QIN_HARMONIC = 2,
    BK_QIN_NLOGN = 3
} bk_qin_form;

/* The bias of `form` at distance t >= 0; `offset` (>= 2) is used by nlogn only. The results are
 * written as 0.0 - x so that T(0) is +0, not -0. */
static inline BIASKIT_HD float bk_qin_bias(int form, int32_t offset, int32_t t)
{
    double l = log((double)t + 1.0); /* ln(t + 1), exact argument for every int32 t */
    switch (form) {
    case BK_QIN_TYPE1:
        return (float)(0.0 - 2.0 * l);
    case BK_QIN_TYPE2:
        return (float)(0.0 - l * l);
    case BK_QIN_HARMONIC:
        return (float)(0.0 - l);
    default: { /* BK_QIN_NLOGN: -ln(n ln n) = -(ln n + ln ln n) */
        double ln_n = log((double)t + (double)offset);
        return (float)(0.0 - (ln_n + log(ln_n)));
    }
    }
}

#endif
