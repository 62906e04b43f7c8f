/* KERPLE's formulas, written once and shared by the host code (kerple.c), the CUDA kernels
 * (kerple.cu), the MEP plugin (its KERPLE-log kernel) and the tests.
 *
 * Chi, Fan, Ramadge & Rudnicky, "KERPLE: Kernelized Relative Positional Embedding for Length
 * Extrapolation", NeurIPS 2022 (reference code chijames/KERPLE). Per head, at causal distance d >= 0,
 * the bias added to the attention logit after the 1/sqrt(d_head) scale (the code's parameterisation):
 *
 *   log        T(d) = -r1 * ln(1 + r2 * d)            r1, r2 > 0
 *   power      T(d) = -r1 * d^r2                      r1 > 0, 0 < r2 <= 2
 *   3para-log  T(d) = -r1 * ln(1 + r2 * d^r3)         r1, r2 > 0, 0 < r3 <= 2
 *
 * and their partial derivatives (README.md, Formulas). The terms d^p * ln(d) tend to 0 as d -> 0 for
 * p > 0; they are written as exactly 0 at d = 0 (never 0 * -inf = NaN). All functions take fp32
 * parameters and an integer distance and return fp32; callers accumulate gradients in double. */
#ifndef BIASKIT_KERPLE_MATH_H
#define BIASKIT_KERPLE_MATH_H

#include <biaskit/plugin.h>

#include <math.h>
#include <stdint.h>

/* The official code's hard clamps (`.data.clamp(min=0.01)`, power exponent also `max=2`). */
#define BK_KERPLE_MIN 0.01f
#define BK_KERPLE_MAX_EXPONENT 2.0f

/* The variants, in the order of the plugin's `variant` choice list. */
#define BK_KERPLE_LOG 0
#define BK_KERPLE_POWER 1
#define BK_KERPLE_3PARA_LOG 2

/* The most parameters per head any variant has (r1, r2, r3). */
#define BK_KERPLE_MAX_TENSORS 3

/* ---- log: -r1 ln(1 + r2 d) ------------------------------------------------------------------ */

static inline BIASKIT_HD float bk_kerple_log_bias(float r1, float r2, int32_t d)
{
    return -r1 * log1pf(r2 * (float)d);
}

static inline BIASKIT_HD float bk_kerple_log_dr1(float r2, int32_t d)
{
    return -log1pf(r2 * (float)d);
}

static inline BIASKIT_HD float bk_kerple_log_dr2(float r1, float r2, int32_t d)
{
    float x = (float)d;
    return -r1 * x / (1.0f + r2 * x);
}

/* ---- power: -r1 d^r2 ------------------------------------------------------------------------- */

/* d^p for d >= 0 and p > 0 (0 at d = 0). */
static inline BIASKIT_HD float bk_kerple_pow(int32_t d, float p)
{
    return d == 0 ? 0.0f : powf((float)d, p);
}

/* d^p ln d for d >= 0 and p > 0: its limit 0 at d = 0 (and exactly 0 at d = 1). */
static inline BIASKIT_HD float bk_kerple_pow_log(int32_t d, float p)
{
    return d <= 1 ? 0.0f : powf((float)d, p) * logf((float)d);
}

static inline BIASKIT_HD float bk_kerple_power_bias(float r1, float r2, int32_t d)
{
    return -r1 * bk_kerple_pow(d, r2);
}

static inline BIASKIT_HD float bk_kerple_power_dr1(float r2, int32_t d)
{
    return -bk_kerple_pow(d, r2);
}

static inline BIASKIT_HD float bk_kerple_power_dr2(float r1, float r2, int32_t d)
{
    return -r1 * bk_kerple_pow_log(d, r2);
}

/* ---- 3para-log: -r1 ln(1 + r2 d^r3) ---------------------------------------------------------- */

static inline BIASKIT_HD float bk_kerple_3para_bias(float r1, float r2, float r3, int32_t d)
{
    return -r1 * log1pf(r2 * bk_kerple_pow(d, r3));
}

static inline BIASKIT_HD float bk_kerple_3para_dr1(float r2, float r3, int32_t d)
{
    return -log1pf(r2 * bk_kerple_pow(d, r3));
}

static inline BIASKIT_HD float bk_kerple_3para_dr2(float r1, float r2, float r3, int32_t d)
{
    float x = bk_kerple_pow(d, r3);
    return -r1 * x / (1.0f + r2 * x);
}

static inline BIASKIT_HD float bk_kerple_3para_dr3(float r1, float r2, float r3, int32_t d)
{
    float x = bk_kerple_pow(d, r3);
    return -r1 * r2 * bk_kerple_pow_log(d, r3) / (1.0f + r2 * x);
}

/* ---- by variant ------------------------------------------------------------------------------- */

/* Parameters per head of a variant: 2, or 3 for 3para-log. */
static inline BIASKIT_HD int bk_kerple_tensor_count(int variant)
{
    return variant == BK_KERPLE_3PARA_LOG ? 3 : 2;
}

/* The bias T(d) of a variant (r3 is ignored unless the variant is 3para-log). */
static inline BIASKIT_HD float bk_kerple_bias(int variant, float r1, float r2, float r3, int32_t d)
{
    switch (variant) {
    case BK_KERPLE_POWER: return bk_kerple_power_bias(r1, r2, d);
    case BK_KERPLE_3PARA_LOG: return bk_kerple_3para_bias(r1, r2, r3, d);
    default: return bk_kerple_log_bias(r1, r2, d);
    }
}

/* g[k] = dT(d)/dr_{k+1} for k < bk_kerple_tensor_count(variant). */
static inline BIASKIT_HD void bk_kerple_grad(int variant, float r1, float r2, float r3, int32_t d, float *g)
{
    switch (variant) {
    case BK_KERPLE_POWER:
        g[0] = bk_kerple_power_dr1(r2, d);
        g[1] = bk_kerple_power_dr2(r1, r2, d);
        break;
    case BK_KERPLE_3PARA_LOG:
        g[0] = bk_kerple_3para_dr1(r2, r3, d);
        g[1] = bk_kerple_3para_dr2(r1, r2, r3, d);
        g[2] = bk_kerple_3para_dr3(r1, r2, r3, d);
        break;
    default:
        g[0] = bk_kerple_log_dr1(r2, d);
        g[1] = bk_kerple_log_dr2(r1, r2, d);
        break;
    }
}

/* The projection of one parameter onto its constraint: >= BK_KERPLE_MIN, and <= BK_KERPLE_MAX_EXPONENT
 * for an exponent. Idempotent. A NaN stays NaN (as torch.clamp leaves it), so a diverged run shows
 * up in the engine's finiteness check instead of being silently reset. */
static inline BIASKIT_HD float bk_kerple_project(float v, int is_exponent)
{
    if (v < BK_KERPLE_MIN)
        v = BK_KERPLE_MIN;
    if (is_exponent && v > BK_KERPLE_MAX_EXPONENT)
        v = BK_KERPLE_MAX_EXPONENT;
    return v;
}

#endif
