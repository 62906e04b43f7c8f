/* The two row softmaxes of the model, written once for the CPU layers and the device kernels (the
 * device code calls these from its kernels, core/gpu/kernels_*.h), so that every backend computes
 * them in the same order:
 *
 *   bk_crossentropy_row   one row of V logits: the loss -log softmax(z)[target] = log(sum) - (z_t - max),
 *                         the exps exp(z - max) in float by bk_expf_nonpositive (as the attention's),
 *                         their sum in double by lanes and the log in double; the probabilities
 *                         exp(z - max) / sum when `probs` is not NULL;
 *   bk_causal_softmax_row one attention row whose scores (bias already added) are row[0 .. live-1]:
 *                         softmax in place in float, max subtracted so exp cannot overflow (exp by
 *                         bk_expf_nonpositive: model/expf_math.h, vectorised on the host; expf on the
 *                         device), the sum by bk_sum_lanes, then columns live .. width-1 set to 0
 *                         (the keys after the query);
 *   bk_sum_lanes,         a row's sum, largest value and dot product in BK_SUM_LANES interleaved
 *   bk_max_lanes,         partial results combined in a fixed order at the end: the host vectorises
 *   bk_dot_lanes          them (a plain left-to-right sum is one dependent add after another), and
 *                         the grouping depends on neither the vector width nor the thread count, so
 *                         every backend and every CPU gets the same bits from the same inputs. */
#ifndef BK_SOFTMAX_MATH_H
#define BK_SOFTMAX_MATH_H

#include "model/expf_math.h"

#include <biaskit/plugin.h> /* BIASKIT_HD */

#include <math.h>
#include <stdint.h>

/* Partial results kept apart: 8 floats are one AVX register (two SSE ones). */
#define BK_SUM_LANES 8

/* The lanes combined: ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). */
#define BK_LANES_TOTAL(lane)                                                                                    \
    ((((lane)[0] + (lane)[1]) + ((lane)[2] + (lane)[3])) + (((lane)[4] + (lane)[5]) + ((lane)[6] + (lane)[7])))

/* The pieces of the row functions below that the device's lane-parallel row programs (gpu/kernels_layers.h:
 * one thread per lane) share with them, so that both compute the same operations in the same order. */

/* lane maximum: x replaces the lane's value when larger (a NaN never does) */
static inline BK_HOST_INLINE BIASKIT_HD float bk_lane_max(float lane, float x)
{
    return x > lane ? x : lane;
}

/* the lanes of a maximum combined: lane 0, then each larger lane in order */
static inline BK_HOST_INLINE BIASKIT_HD float bk_max_of_lanes(const float *lane)
{
    float m = lane[0];
    for (int l = 1; l < BK_SUM_LANES; l++)
        m = bk_lane_max(m, lane[l]);
    return m;
}

/* a softmax row's exp of one score against the row's max; a dot product's term in double (exact) */
static inline BK_HOST_INLINE BIASKIT_HD float bk_softmax_exp(float s, float max)
{
    return bk_expf_nonpositive(s - max);
}

static inline BK_HOST_INLINE BIASKIT_HD double bk_dot_term(float a, float b)
{
    return (double)a * (double)b;
}

/* cross-entropy: one logit's term of the sum, exp(z - max) in double; the loss log(total) - (z_t - max);
 * the factor of the probabilities, 1 / total in float, and one probability */
static inline BK_HOST_INLINE BIASKIT_HD double bk_ce_term(float z, float max)
{
    return (double)bk_softmax_exp(z, max);
}

static inline BK_HOST_INLINE BIASKIT_HD float bk_ce_loss(double total, float z_target, float max)
{
    return (float)(log(total) - (double)(z_target - max));
}

static inline BK_HOST_INLINE BIASKIT_HD float bk_ce_inv(double total)
{
    return (float)(1.0 / total);
}

static inline BK_HOST_INLINE BIASKIT_HD float bk_ce_prob(float z, float max, float inv)
{
    return bk_softmax_exp(z, max) * inv;
}

/* Lane l sums x[l], x[l + 8], x[l + 16], ...; then BK_LANES_TOTAL. */
static inline BK_HOST_INLINE BIASKIT_HD float bk_sum_lanes(const float *x, int64_t n)
{
    float lane[BK_SUM_LANES] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int64_t j = 0;
    for (; j + BK_SUM_LANES <= n; j += BK_SUM_LANES) {
        BK_OMP_SIMD
        for (int l = 0; l < BK_SUM_LANES; l++)
            lane[l] += x[j + l];
    }
    for (int l = 0; j + l < n; l++)
        lane[l] += x[j + l];
    return BK_LANES_TOTAL(lane);
}

/* The largest of x[0 .. n-1] (-inf when n = 0; NaNs are passed over: a NaN score makes its row NaN
 * through the exps anyway), in 4 x BK_SUM_LANES lanes so that it vectorises without waiting on one
 * register's latency (a max is exact: how the lanes are grouped changes no value; only a +0 / -0 tie
 * could go either way, and both give the same values downstream). */
static inline BK_HOST_INLINE BIASKIT_HD float bk_max_lanes(const float *x, int64_t n)
{
    float lane[4 * BK_SUM_LANES];
    for (int l = 0; l < 4 * BK_SUM_LANES; l++)
        lane[l] = -INFINITY;
    int64_t j = 0;
    for (; j + 4 * BK_SUM_LANES <= n; j += 4 * BK_SUM_LANES) {
        BK_OMP_SIMD
        for (int l = 0; l < 4 * BK_SUM_LANES; l++)
            lane[l] = bk_lane_max(lane[l], x[j + l]);
    }
    for (int l = 0; j + l < n; l++)
        lane[l] = bk_lane_max(lane[l], x[j + l]);
    for (int l = 0; l < BK_SUM_LANES; l++)
        lane[l] = bk_lane_max(bk_lane_max(lane[l], lane[l + BK_SUM_LANES]),
                              bk_lane_max(lane[l + 2 * BK_SUM_LANES], lane[l + 3 * BK_SUM_LANES]));
    return bk_max_of_lanes(lane);
}

/* sum_j a[j] b[j] in double (each product exact), grouped as bk_sum_lanes groups its sum. */
static inline BK_HOST_INLINE BIASKIT_HD double bk_dot_lanes(const float *a, const float *b, int64_t n)
{
    double lane[BK_SUM_LANES] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    int64_t j = 0;
    for (; j + BK_SUM_LANES <= n; j += BK_SUM_LANES) {
        BK_OMP_SIMD
        for (int l = 0; l < BK_SUM_LANES; l++)
            lane[l] += bk_dot_term(a[j + l], b[j + l]);
    }
    for (int l = 0; j + l < n; l++)
        lane[l] += bk_dot_term(a[j + l], b[j + l]);
    return BK_LANES_TOTAL(lane);
}

static inline BK_HOST_INLINE BIASKIT_HD void bk_crossentropy_row(const float *z, int64_t V, int32_t target,
                                                                 float *loss, float *probs)
{
    const float m = bk_max_lanes(z, V);
    double lane[BK_SUM_LANES] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    int64_t v = 0;
    for (; v + BK_SUM_LANES <= V; v += BK_SUM_LANES) {
        BK_OMP_SIMD
        for (int l = 0; l < BK_SUM_LANES; l++)
            lane[l] += bk_ce_term(z[v + l], m);
    }
    for (int l = 0; v + l < V; l++)
        lane[l] += bk_ce_term(z[v + l], m);
    const double total = BK_LANES_TOTAL(lane);
    *loss = bk_ce_loss(total, z[target], m);
    if (probs) {
        const float inv = bk_ce_inv(total);
        BK_OMP_SIMD
        for (int64_t k = 0; k < V; k++)
            probs[k] = bk_ce_prob(z[k], m, inv);
    }
}

static inline BK_HOST_INLINE BIASKIT_HD void bk_causal_softmax_row(float *row, int64_t live, int64_t width)
{
    const float max = bk_max_lanes(row, live);
    /* the exps first (a loop that vectorises on the host), then their sum by lanes */
    BK_OMP_SIMD
    for (int64_t j = 0; j < live; j++)
        row[j] = bk_softmax_exp(row[j], max);
    const float inv = 1.0f / bk_sum_lanes(row, live);
    BK_OMP_SIMD
    for (int64_t j = 0; j < live; j++)
        row[j] *= inv;
    BK_OMP_SIMD
    for (int64_t j = live; j < width; j++)
        row[j] = 0.0f;
}

/* The online softmax of flash-style attention (the CPU's fused kernel and the device's), one row and one
 * key tile: row[0 .. n-1] holds the tile's biased scores (-inf where masked) and becomes their exps
 * against the new running max; m, l are the row's running max and sum, alpha receives the factor that
 * rescales what was accumulated before. A row that has seen no visible key yet (a window mask: all -inf
 * so far) stays at m = -inf, l = 0, its exps 0 (exp(-inf - -inf) would be NaN); without a mask the first
 * tile always holds key 0, so this never happens. */
static inline BK_HOST_INLINE BIASKIT_HD void bk_online_softmax_row(float *row, int n, float *m, float *l, float *alpha)
{
    const float mx = fmaxf(*m, bk_max_lanes(row, n));
    if (mx == -INFINITY) {
        for (int c = 0; c < n; c++)
            row[c] = 0.0f;
        *alpha = 1.0f;
        return;
    }
    BK_OMP_SIMD
    for (int c = 0; c < n; c++)
        row[c] = bk_expf_nonpositive(row[c] - mx);
    const float al = bk_expf_nonpositive(*m - mx);
    *l = *l * al + bk_sum_lanes(row, n);
    *m = mx, *alpha = al;
}

/* Flash-style backward, one score: P = exp(s - lse) from the forward's row log-sum-exp (never above 1:
 * lse >= the row's max; s - lse is clamped to <= 0, a NaN to 0, as fminf(s - lse, 0) would: a select,
 * which the host vectorises, where fminf is a call). */
static inline BK_HOST_INLINE BIASKIT_HD float bk_flash_prob(float s, float lse)
{
    const float x = s - lse;
    return bk_expf_nonpositive(x < 0.0f ? x : 0.0f);
}

/* Two passes of one softmax over disjoint sets of keys, each normalised with its own log-sum-exp la and
 * lb (-inf: the pass saw no key): the whole's log-sum-exp, and in *wa, *wb each pass's share, so that the
 * output is wa o_a + wb o_b exactly as one softmax over both sets (the log-sum-exp merge of flash
 * attention's split passes). Both -inf: weights 0 and -inf. */
static inline BK_HOST_INLINE BIASKIT_HD float bk_lse_merge(float la, float lb, float *wa, float *wb)
{
    const float m = la > lb ? la : lb;
    if (m == -INFINITY) {
        *wa = *wb = 0.0f;
        return -INFINITY;
    }
    const float ea = bk_expf_nonpositive(la - m), eb = bk_expf_nonpositive(lb - m), sum = ea + eb;
    *wa = ea / sum, *wb = eb / sum;
    return m + logf(sum);
}

#endif
