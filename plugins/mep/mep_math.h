/* MEP's formula, written once and shared by the host code (mep.c), the CUDA kernels (mep.cu) and
 * the tests.
 *
 * Gao, "MEP: Multiple Kernel Learning Enhancing Relative Positional Encoding Length Extrapolation",
 * arXiv 2403.17698 (2024). Each positional bias B_k is read as a kernel K_k(d) = exp(B_k(d)) on the
 * post-softmax side; MEP averages kernels with weights alpha_k >= 0 (sum 1) and takes the log:
 *
 *     B(d) = log( sum_k alpha_k K_k(d) )
 *          = m + log( sum_k exp(z_k - m) ),   z_k = ln alpha_k + B_k(d),   m = max_k z_k
 *
 * (the max-subtracted log-sum-exp: a Gaussian kernel underflows exp() long before an exponential one
 * does, this form never divides by or takes the log of 0). The kernels, with s_h the head's ALiBi
 * slope and c_k the kernel's slope scale:
 *
 *     exp         B_k(d) = -c_k s_h d                (ALiBi, bk_alibi_bias)
 *     gauss       B_k(d) = -c_k s_h d^2
 *     kerple-log  B_k(d) = -r1_h ln(1 + r2_h d)      (bk_kerple_log_bias; r1, r2 learnable)
 *
 * Gradient: dB/dtheta = sum_k w_k(d) dB_k/dtheta with w_k(d) = alpha_k K_k(d) / sum_m alpha_m K_m(d)
 * = exp(z_k - m) / sum_m exp(z_m - m) (the kernel-space softmax weights, computed stably). */
#ifndef BIASKIT_MEP_MATH_H
#define BIASKIT_MEP_MATH_H

#include "../alibi/alibi_math.h"
#include "../kerple/kerple_math.h"

#include <biaskit/plugin.h>

#include <math.h>
#include <stdint.h>

/* The most kernels one MEP term mixes. */
#define BK_MEP_MAX_KERNELS 8

/* Kernel types, in the order of the names "exp", "gauss", "kerple-log". */
#define BK_MEP_EXP 0
#define BK_MEP_GAUSS 1
#define BK_MEP_KERPLE_LOG 2

/* The mixture of one term: the kernels with a positive weight (a kernel of weight 0 contributes
 * nothing and is left out), passed by value to the CUDA kernels. */
typedef struct bk_mep_spec {
    int32_t n;                                /* 1 .. BK_MEP_MAX_KERNELS */
    int32_t type[BK_MEP_MAX_KERNELS];         /* BK_MEP_* */
    float scale[BK_MEP_MAX_KERNELS];          /* c_k: multiplies the head's slope (exp, gauss) */
    float log_weight[BK_MEP_MAX_KERNELS];     /* ln alpha_k, alpha on the simplex */
} bk_mep_spec;

/* The Gaussian kernel's bias -rate * d^2. */
static inline BIASKIT_HD float bk_mep_gauss_bias(float rate, int32_t d)
{
    float x = (float)d;
    return -rate * x * x;
}

/* B_k(d) of one kernel: `slope` is the head's ALiBi slope, r1 and r2 the head's KERPLE-log
 * parameters (used by kerple-log only). */
static inline BIASKIT_HD float bk_mep_kernel_bias(int32_t type, float scale, float slope, float r1, float r2,
                                                   int32_t d)
{
    switch (type) {
    case BK_MEP_GAUSS: return bk_mep_gauss_bias(scale * slope, d);
    case BK_MEP_KERPLE_LOG: return bk_kerple_log_bias(r1, r2, d);
    default: return bk_alibi_bias(scale * slope, d);
    }
}

/* B(d) of the mixture for one head; when dr1 and dr2 are not NULL, also dB/dr1 and dB/dr2 of the
 * KERPLE-log kernel's parameters (0 when the mixture has none). */
static inline BIASKIT_HD float bk_mep_bias_grad(const bk_mep_spec *spec, float slope, float r1, float r2, int32_t d,
                                                 float *dr1, float *dr2)
{
    float z[BK_MEP_MAX_KERNELS];
    float m = 0.0f;
    for (int32_t k = 0; k < spec->n; k++) {
        z[k] = spec->log_weight[k] + bk_mep_kernel_bias(spec->type[k], spec->scale[k], slope, r1, r2, d);
        m = k == 0 ? z[k] : fmaxf(m, z[k]);
    }
    float sum = 0.0f;
    for (int32_t k = 0; k < spec->n; k++)
        sum += expf(z[k] - m);
    if (dr1 && dr2) {
        float g1 = 0.0f, g2 = 0.0f;
        for (int32_t k = 0; k < spec->n; k++)
            if (spec->type[k] == BK_MEP_KERPLE_LOG) {
                float w = expf(z[k] - m) / sum;
                g1 += w * bk_kerple_log_dr1(r2, d);
                g2 += w * bk_kerple_log_dr2(r1, r2, d);
            }
        *dr1 = g1;
        *dr2 = g2;
    }
    return m + logf(sum);
}

static inline BIASKIT_HD float bk_mep_bias(const bk_mep_spec *spec, float slope, float r1, float r2, int32_t d)
{
    return bk_mep_bias_grad(spec, slope, r1, r2, d, (float *)0, (float *)0);
}

#endif
