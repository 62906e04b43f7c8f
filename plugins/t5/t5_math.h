/* T5's relative-position buckets, written once and shared by the host code (t5.c), the CUDA kernels
 * (t5.cu) and the tests.
 *
 * Raffel et al., "Exploring the Limits of Transfer Learning with a Unified Text-to-Text Transformer",
 * JMLR 2020; the bucketing is HuggingFace transformers' T5Attention._relative_position_bucket, which
 * GPT-NeoX / KERPLE and x-transformers use with the same arithmetic:
 *
 *     relative_position = key - query            (<= 0 for the keys a causal model sees)
 *     bidirectional:  nb = num_buckets / 2;  ret = (relative_position > 0) * nb;  n = |relative_position|
 *     causal:         nb = num_buckets;      ret = 0;                            n = max(-relative_position, 0)
 *     max_exact = nb / 2
 *     n < max_exact:  bucket = ret + n
 *     else:           bucket = ret + min(nb - 1, max_exact + trunc(ln(n / max_exact) / ln(max_distance / max_exact)
 *                                                                 * (nb - max_exact)))
 *
 * The large-distance branch is evaluated in float32 exactly as HF does it with float32 tensors:
 * (float)n / max_exact in float, logf of that, divided by ln(max_distance / max_exact) computed in
 * double (Python's math.log) and rounded to float, times (nb - max_exact) in float, truncated toward
 * zero. The log is only reached for n >= max_exact >= 1, so it never sees 0 (HF computes log(0) and
 * throws it away in torch.where). */
#ifndef BIASKIT_T5_MATH_H
#define BIASKIT_T5_MATH_H

#include <biaskit/plugin.h>

#include <math.h>
#include <stdint.h>

/* What the bucket function needs, passed by value to the CUDA kernels. */
typedef struct bk_t5_shape {
    int32_t heads;
    int32_t buckets;      /* columns of the parameter table (all buckets, both halves when bidirectional) */
    int32_t max_distance;
    int32_t bidirectional;
    double scale;         /* T[h][d] = scale * w[h][bucket(d)] */
} bk_t5_shape;

/* HF's _relative_position_bucket for one relative position (key - query). create() guarantees
 * num_buckets >= 2 (>= 4 and even when bidirectional) and max_distance > max_exact; for anything else
 * this returns the last bucket instead of dividing by zero. */
static inline BIASKIT_HD int32_t bk_t5_relative_position_bucket(int32_t relative_position, int bidirectional,
                                                                int32_t num_buckets, int32_t max_distance)
{
    int32_t ret = 0;
    int64_t n;
    if (bidirectional) {
        num_buckets /= 2;
        if (relative_position > 0)
            ret = num_buckets;
        n = relative_position < 0 ? -(int64_t)relative_position : (int64_t)relative_position;
    } else {
        n = relative_position < 0 ? -(int64_t)relative_position : 0; /* future keys -> bucket 0 */
    }
    int32_t max_exact = num_buckets / 2;
    if (n < max_exact)
        return ret + (int32_t)n;
    int32_t last = ret + num_buckets - 1;
    if (max_exact < 1 || max_distance <= max_exact)
        return last;
    /* Exact shortcut, no log: for n >= 2 max_distance the quotient below is at least
     * 1 + ln 2 / ln(max_distance / max_exact) > 1 with a margin far above float rounding, so HF's
     * result is the last bucket. */
    if (n >= 2 * (int64_t)max_distance)
        return last;
    int32_t span = num_buckets - max_exact;
    float ratio = (float)n / (float)max_exact;
    float v = logf(ratio) / (float)log((double)max_distance / (double)max_exact) * (float)span;
    /* min(max_exact + trunc(v), nb - 1), written so that a large v is never converted to an int */
    if (!(v < (float)(span - 1)))
        return last;
    return ret + max_exact + (int32_t)v;
}

/* The bucket of causal distance d = query - key >= 0 (relative position -d). */
static inline BIASKIT_HD int32_t bk_t5_bucket(const bk_t5_shape *s, int32_t d)
{
    return bk_t5_relative_position_bucket(-d, s->bidirectional, s->buckets, s->max_distance);
}

/* The smallest distance d in [0, distances) whose bucket is >= b, or `distances` when there is none.
 * The bucket never decreases with d (every step of the formula is monotone), so the distances of
 * bucket b are exactly [first(b), first(b + 1)): a binary search, used by the CUDA gradient. */
static inline BIASKIT_HD int32_t bk_t5_first_distance(const bk_t5_shape *s, int32_t b, int32_t distances)
{
    int32_t lo = 0, hi = distances;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (bk_t5_bucket(s, mid) >= b)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

#endif
