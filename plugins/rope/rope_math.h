/* RoPE's frequencies and their length-aware scalings, written once (the plugin and the tests).
 *
 * Plain RoPE: Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding" (2021), Eq. 15:
 * theta_k = base^(-2k/d), k = 0 .. d/2 - 1, for a head of width d; pair k of q and k at position p is
 * rotated by p * theta_k. The engine applies the rotation (rotate-half layout of GPT-NeoX / Llama: the
 * pair is (x[k], x[k + d/2])).
 *
 * Scalings by s = L' / L (L: the length the model was trained at; L': the length evaluated), from Peng,
 * Quesnelle, Fan, Shippole, "YaRN: Efficient Context Window Extension of Large Language Models" (arXiv
 * 2309.00071, ICLR 2024) and its code (github.com/jquesnelle/yarn, scaled_rope/):
 *   pi    position interpolation (Chen et al. 2023, YaRN Eq. 10): theta_k / s for every k;
 *   ntk   NTK-aware (YaRN Sec. 3.1, Eq. 16): base' = base * s^(d / (d - 2)), theta_k = base'^(-2k/d);
 *   yarn  NTK-by-parts (Sec. 3.2) as the code computes it, a ramp linear in the pair index k between
 *         low = max(floor(k(beta_fast)), 0) and high = min(ceil(k(beta_slow)), d - 1) (high += 0.001
 *         when equal), k(n) = d ln(L / (2 pi n)) / (2 ln base) the pair whose wavelength fits n times into
 *         L; ramp_k = clamp((k - low) / (high - low), 0, 1), mask_k = 1 - ramp_k,
 *         theta'_k = (theta_k / s)(1 - mask_k) + theta_k mask_k; plus the temperature (Sec. 3.4, Eq. 22):
 *         q and k are each multiplied by mscale = 0.1 ln s + 1 (1 when s <= 1), so the logits by mscale^2.
 * Computed in double, rounded to float once. */
#ifndef BIASKIT_ROPE_MATH_H
#define BIASKIT_ROPE_MATH_H

#include <biaskit/plugin.h>

#include <math.h>
#include <stdint.h>

/* The `scaling` option, in the order of its choices. */
#define BK_ROPE_SCALINGS "none|pi|ntk|yarn"
enum { BK_ROPE_NONE = 0, BK_ROPE_PI = 1, BK_ROPE_NTK = 2, BK_ROPE_YARN = 3 };

static inline BIASKIT_HD float bk_rope_inv_freq(double base, int32_t k, int32_t d_head)
{
    return (float)pow(base, -2.0 * (double)k / (double)d_head);
}

/* YaRN's k(n_rot): the (fractional) pair index whose wavelength 2 pi base^(2k/d) fits n_rot times into
 * the length L (code: _yarn_find_correction_dim). */
static inline BIASKIT_HD double bk_yarn_correction_dim(double n_rot, int32_t d_head, double base, double L)
{
    return (double)d_head * log(L / (n_rot * 2.0 * 3.14159265358979323846)) / (2.0 * log(base));
}

/* YaRN's ramp bounds (code: _yarn_find_correction_range, then the singularity guard of
 * _yarn_linear_ramp_mask): low from beta_fast (the paper's beta = 32), high from beta_slow (alpha = 1).
 * The clamp is to d - 1, not d/2 - 1, as in the code (harmless: the ramp is clamped to [0, 1]). */
static inline BIASKIT_HD void bk_yarn_range(double beta_fast, double beta_slow, int32_t d_head, double base, double L,
                                            double *low, double *high)
{
    double lo = floor(bk_yarn_correction_dim(beta_fast, d_head, base, L));
    double hi = ceil(bk_yarn_correction_dim(beta_slow, d_head, base, L));
    lo = lo < 0.0 ? 0.0 : lo;
    hi = hi > (double)(d_head - 1) ? (double)(d_head - 1) : hi;
    if (lo == hi)
        hi += 0.001;
    *low = lo, *high = hi;
}

/* ramp_k = clamp((k - low) / (high - low), 0, 1): 0 for the fast pairs (kept), 1 for the slow ones
 * (interpolated). */
static inline BIASKIT_HD double bk_yarn_ramp(int32_t k, double low, double high)
{
    double r = ((double)k - low) / (high - low);
    return r < 0.0 ? 0.0 : r > 1.0 ? 1.0 : r;
}

/* YaRN's sqrt(1/t) = 0.1 ln s + 1, 1 when s <= 1 (code: _yarn_get_mscale). */
static inline BIASKIT_HD double bk_yarn_mscale(double s)
{
    return s <= 1.0 ? 1.0 : 0.1 * log(s) + 1.0;
}

/* NTK-aware base b' = b s^(d / (d - 2)): the last pair (exponent (d - 2)/d) turns exactly s times slower,
 * the first is unchanged. Needs d >= 4. */
static inline BIASKIT_HD double bk_ntk_base(double base, double s, int32_t d_head)
{
    return base * pow(s, (double)d_head / (double)(d_head - 2));
}

/* The inverse frequency of pair k under `scaling` with factor s >= 1 (low, high: bk_yarn_range; read
 * by yarn only). s = 1 is plain RoPE under every scaling, bit for bit (the formulas reduce to it; the
 * blend of yarn would not round back exactly, so s = 1 returns the plain value). */
static inline BIASKIT_HD float bk_rope_scaled_inv_freq(int scaling, double base, int32_t k, int32_t d_head, double s,
                                                       double low, double high)
{
    if (scaling == BK_ROPE_NONE || s == 1.0)
        return bk_rope_inv_freq(base, k, d_head);
    const double e = -2.0 * (double)k / (double)d_head;
    switch (scaling) {
    case BK_ROPE_PI: return (float)(pow(base, e) / s);
    case BK_ROPE_NTK: return (float)pow(bk_ntk_base(base, s, d_head), e);
    default: {
        const double theta = pow(base, e), mask = 1.0 - bk_yarn_ramp(k, low, high);
        return (float)((theta / s) * (1.0 - mask) + theta * mask);
    }
    }
}

/* What multiplies q and k after the rotation: YaRN's mscale(s) x attn_factor; 1 for the others. */
static inline BIASKIT_HD double bk_rope_amplitude(int scaling, double s, double attn_factor)
{
    return scaling == BK_ROPE_YARN ? bk_yarn_mscale(s) * attn_factor : 1.0;
}

/* The dynamic factor (YaRN Sec. 3.3): s = max(1, length / L) for a sequence of `length` tokens. */
static inline BIASKIT_HD double bk_rope_dynamic_factor(int32_t length, double L)
{
    double s = (double)length / L;
    return s > 1.0 ? s : 1.0;
}

#endif
