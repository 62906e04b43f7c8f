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
 *         q and k are each multiplied by mscale = 0.1 ln s + 1 (1 when s <= 1), so the logits by mscale^2;
 *   longrope  LongRoPE (Ding et al. 2024, "LongRoPE: Extending LLM Context Window Beyond 2 Million
 *         Tokens"; the form of HF transformers' rope_type "longrope", Phi-3): theta'_k = theta_k / lambda_k,
 *         one factor per pair, from the long set when the sequence is longer than L, else the short set;
 *         q and k each multiplied by sqrt(1 + ln s / ln L) (1 when s <= 1). (The paper's n-hat, a first
 *         stretch of positions left unscaled, is a rule on positions, not frequencies: not here.)
 * Then, on any scaling:
 *   resonance  Resonance RoPE (Wang et al. 2024, "Resonance RoPE: Improving Context Length Generalization
 *         of Large Language Models"): each wavelength 2 pi / theta'_k rounded to the nearest integer
 *         (at least 1), theta''_k = 2 pi / round(2 pi / theta'_k);
 *   partial  p-RoPE (Barbero et al. 2024, "Round and Round We Go! What makes Rotary Positional Encodings
 *         useful?"): only the first round(p d/2) pairs (the highest frequencies) turn; the others get
 *         theta = 0 (not rotated).
 * Computed in double, rounded to float once.
 *
 * Training-free extension (`extend`, evaluation time; rotary_views): the relative position of query i
 * and key j, d = i - j, is remapped for the far pairs, as two views (bk_rope_view_positions): the near
 * pairs d < W (STRING: d < S) keep RoPE at positions i and j; the far ones get other positions:
 *   self-extend  Jin et al. 2024, "LLM Maybe LongLM: Self-Extend LLM Context Window Without Tuning": with
 *         neighbour window W and group size G, the far pairs attend at grouped positions, the query at
 *         floor(i / G) + W - floor(W / G), the key at floor(j / G): relative position
 *         floor(i / G) - floor(j / G) + W - floor(W / G), meeting the neighbours' at d = W;
 *   rerope  Su 2023, "ReRoPE" (Rectified RoPE): relative position min(d, W), the query at W and the key
 *         at 0; leaky ReRoPE with k > 1: W + (d - W) / k, the query at i / k + W (1 - 1 / k), the key at j / k;
 *   string  An et al. 2024, "Why Does the Effective Context Length of LLMs Fall Short?" (STRING): the pairs
 *         d >= S (the shift) attend at d - S + W (W the local window restored on the shifted diagonals):
 *         the query at i - S + W, the key at j.
 * The passes over the two views are merged exactly by their log-sum-exps (one softmax over all keys). */
#ifndef BIASKIT_ROPE_MATH_H
#define BIASKIT_ROPE_MATH_H

#include <biaskit/plugin.h>

#include <math.h>
#include <stdint.h>

/* The `scaling` option, in the order of its choices. */
#define BK_ROPE_SCALINGS "none|pi|ntk|yarn|longrope"
enum { BK_ROPE_NONE = 0, BK_ROPE_PI = 1, BK_ROPE_NTK = 2, BK_ROPE_YARN = 3, BK_ROPE_LONGROPE = 4 };

/* The `extend` option, in the order of its choices. */
#define BK_ROPE_EXTENDS "none|self-extend|rerope|string"
enum { BK_EXTEND_NONE = 0, BK_EXTEND_SELF = 1, BK_EXTEND_REROPE = 2, BK_EXTEND_STRING = 3 };

/* The far view's positions of query i (*q) and key j (*k) under `extend` with window W, group G (self-extend),
 * leaky factor lk (rerope: 0 = plain ReRoPE, else k > 1) and shift S (string); the near view keeps i and j.
 * The far view owns the distances from bk_rope_far_from(extend, W, S) on. */
static inline void bk_rope_far_positions(int extend, int64_t i, int64_t j, int64_t W, int64_t G, double lk, int64_t S,
                                         double *q, double *k)
{
    switch (extend) {
    case BK_EXTEND_SELF:
        *q = (double)(i / G + W - W / G), *k = (double)(j / G);
        return;
    case BK_EXTEND_REROPE:
        if (lk > 0.0)
            *q = (double)i / lk + (double)W * (1.0 - 1.0 / lk), *k = (double)j / lk;
        else
            *q = (double)W, *k = 0.0;
        return;
    case BK_EXTEND_STRING:
        *q = (double)(i - S + W), *k = (double)j;
        return;
    default:
        *q = (double)i, *k = (double)j;
    }
}

static inline int64_t bk_rope_far_from(int extend, int64_t W, int64_t S)
{
    return extend == BK_EXTEND_STRING ? S : W;
}

/* A frequency base RoPE can use (theta_k = base^(-2k/d) decreasing with k), and the words of the rule. */
#define BK_ROPE_BASE_RULE "expected a finite base > 1"
static inline int bk_rope_base_ok(double base)
{
    return isfinite(base) && base > 1.0;
}

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
 * by yarn only; lambda: longrope's factor of the pair, from the set the length chooses), in double. s = 1
 * is plain RoPE under pi, ntk and yarn, bit for bit (the formulas reduce to it; the blend of yarn would
 * not round back exactly, so s = 1 returns the plain value). */
static inline BIASKIT_HD double bk_rope_scaled_theta(int scaling, double base, int32_t k, int32_t d_head, double s,
                                                     double low, double high, double lambda)
{
    const double e = -2.0 * (double)k / (double)d_head;
    if (scaling == BK_ROPE_LONGROPE)
        return pow(base, e) / lambda;
    if (scaling == BK_ROPE_NONE || s == 1.0)
        return pow(base, e);
    switch (scaling) {
    case BK_ROPE_PI: return pow(base, e) / s;
    case BK_ROPE_NTK: return pow(bk_ntk_base(base, s, d_head), e);
    default: {
        const double theta = pow(base, e), mask = 1.0 - bk_yarn_ramp(k, low, high);
        return (theta / s) * (1.0 - mask) + theta * mask;
    }
    }
}

/* Resonance RoPE: the wavelength 2 pi / theta rounded to the nearest integer, at least 1 (theta 0 stays 0). */
static inline BIASKIT_HD double bk_rope_resonance(double theta)
{
    if (theta == 0.0)
        return 0.0;
    const double two_pi = 2.0 * 3.14159265358979323846, wave = floor(two_pi / theta + 0.5);
    return two_pi / (wave < 1.0 ? 1.0 : wave);
}

/* p-RoPE: the number of pairs that turn, round(p pairs), for 0 <= p <= 1. */
static inline BIASKIT_HD int32_t bk_rope_turning_pairs(double p, int32_t pairs)
{
    return (int32_t)floor(p * (double)pairs + 0.5);
}

/* The inverse frequency of pair k as the plugin gives it: scaled, then rounded to a resonant wavelength
 * (resonance), 0 beyond the turning pairs (turning, bk_rope_turning_pairs); rounded to float once. */
static inline BIASKIT_HD float bk_rope_pair_inv_freq(int scaling, double base, int32_t k, int32_t d_head, double s,
                                                     double low, double high, double lambda, int resonance,
                                                     int32_t turning)
{
    if (k >= turning)
        return 0.0f;
    const double theta = bk_rope_scaled_theta(scaling, base, k, d_head, s, low, high, lambda);
    return (float)(resonance ? bk_rope_resonance(theta) : theta);
}

/* Plain or scaled, without resonance or partial rotation (the tests' name for it). */
static inline BIASKIT_HD float bk_rope_scaled_inv_freq(int scaling, double base, int32_t k, int32_t d_head, double s,
                                                       double low, double high)
{
    return bk_rope_pair_inv_freq(scaling, base, k, d_head, s, low, high, 1.0, 0, d_head / 2);
}

/* LongRoPE's sqrt(1 + ln s / ln L), 1 when s <= 1 (HF transformers' longrope attention_factor). */
static inline BIASKIT_HD double bk_longrope_mscale(double s, double L)
{
    return s <= 1.0 ? 1.0 : sqrt(1.0 + log(s) / log(L));
}

/* What multiplies q and k after the rotation: YaRN's or LongRoPE's mscale(s) x attn_factor; 1 for the
 * others. */
static inline BIASKIT_HD double bk_rope_amplitude(int scaling, double s, double attn_factor, double L)
{
    return scaling == BK_ROPE_YARN       ? bk_yarn_mscale(s) * attn_factor
           : scaling == BK_ROPE_LONGROPE ? bk_longrope_mscale(s, L) * attn_factor
                                         : 1.0;
}

/* The dynamic factor (YaRN Sec. 3.3): s = max(1, length / L) for a sequence of `length` tokens. */
static inline BIASKIT_HD double bk_rope_dynamic_factor(int32_t length, double L)
{
    double s = (double)length / L;
    return s > 1.0 ? s : 1.0;
}

#endif
