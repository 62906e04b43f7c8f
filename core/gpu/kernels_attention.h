/* Kernel bodies of the device attention (ops_attention.h), valid C11 and CUDA C++ (gpu/dev.h).
 *
 * Layouts. The model's qkv is (B, T, 3C) with row t = [q | k | v] and head h in columns h*hd ..
 * h*hd+hd-1 of each third (cpu/attention.h). The GEMMs want each (b, h) as one contiguous T x hd
 * matrix so that a single strided-batched call covers all B*H of them, so q, k and v are first
 * permuted to (B, H, T, hd) ("bh-major") and results are permuted back.
 *
 * Score blocks. For a query block [q0, q1) the scores of (b, h) form a rows x q1 row-major matrix
 * (rows = q1 - q0, only the causal key prefix [0, q1)) with leading dimension `ld` and bh-stride
 * `bh_stride`: either inside the saved probabilities (ld = T, stride T*T, offset q0*T) or in a
 * scratch buffer (ld = q1, stride rows*q1).
 *
 * Every body writes only what belongs to its own index (dev.h): no atomics, and every sum below runs
 * in a fixed order, the CPU's order wherever the CPU has one (cpu/attention.c). */
#ifndef BK_GPU_KERNELS_ATTENTION_H
#define BK_GPU_KERNELS_ATTENTION_H

#include "config/experiment.h"
#include "gpu/dev.h"
#include "gpu/rows.h"
#include "model/cope_math.h"
#include "model/score_terms.h"
#include "model/softmax_math.h"

#include <math.h>
#include <stdint.h>

/* ---- permutations ---------------------------------------------------------------------------- */

/* qkv (B, T, 3C) -> q, k, v (B, H, T, hd). Index over 3 * B*H*T*hd in the order
 * (part, b, h, t, d): consecutive indices read and write consecutive addresses within a head. */
typedef struct k_att_split_args {
    const float *qkv;
    float *part[3]; /* q, k, v */
    int B, T, C, H;
} k_att_split_args;

static inline BK_DEV_HD void k_att_split(int64_t i, const void *args)
{
    const k_att_split_args *a = (const k_att_split_args *)args;
    const int hd = a->C / a->H;
    const int64_t per = (int64_t)a->B * a->H * a->T * hd; /* elements of one part */
    const int which = (int)(i / per);
    const int64_t e = i % per;
    const int d = (int)(e % hd);
    const int t = (int)((e / hd) % a->T);
    const int64_t bh = e / ((int64_t)hd * a->T);
    const int h = (int)(bh % a->H);
    const int64_t b = bh / a->H;
    a->part[which][e] = a->qkv[(b * a->T + t) * 3 * (int64_t)a->C + (int64_t)which * a->C + (int64_t)h * hd + d];
}

/* x (B, T, C) <-> y (B, H, T, hd), index over B*H*T*hd in y's order. to_bh = 1: dst = y = the
 * permutation of src = x (dout into dO); to_bh = 0: dst = x = the inverse permutation of src = y (the
 * output). Assignment, not accumulation: the forward output is overwritten as on the CPU. */
typedef struct k_att_heads_args {
    const float *src;
    float *dst;
    int B, T, C, H;
    int to_bh;
} k_att_heads_args;

static inline BK_DEV_HD void k_att_heads(int64_t i, const void *args)
{
    const k_att_heads_args *a = (const k_att_heads_args *)args;
    const int hd = a->C / a->H;
    const int d = (int)(i % hd);
    const int t = (int)((i / hd) % a->T);
    const int64_t bh = i / ((int64_t)hd * a->T);
    const int h = (int)(bh % a->H);
    const int64_t b = bh / a->H;
    const int64_t xi = (b * a->T + t) * (int64_t)a->C + (int64_t)h * hd + d;
    if (a->to_bh)
        a->dst[i] = a->src[xi];
    else
        a->dst[xi] = a->src[i];
}

/* dqkv (B, T, 3C) += dq, dk, dv (B, H, T, hd): the CPU's backward accumulates into dqkv. Index over
 * B*T*3C in dqkv's order (each element of dqkv has exactly one source). */
typedef struct k_att_merge_grad_args {
    float *dqkv;
    const float *part[3]; /* dq, dk, dv */
    int B, T, C, H;
} k_att_merge_grad_args;

static inline BK_DEV_HD void k_att_merge_grad(int64_t i, const void *args)
{
    const k_att_merge_grad_args *a = (const k_att_merge_grad_args *)args;
    const int hd = a->C / a->H;
    const int64_t C3 = 3 * (int64_t)a->C;
    const int64_t col = i % C3;
    const int64_t bt = i / C3;
    const int t = (int)(bt % a->T);
    const int64_t b = bt / a->T;
    const int which = (int)(col / a->C);
    const int h = (int)((col % a->C) / hd);
    const int d = (int)(col % hd);
    a->dqkv[i] += a->part[which][((b * a->H + h) * a->T + t) * hd + d];
}

/* ---- softmax ----------------------------------------------------------------------------------- */

/* The softmax rows of one query block, B*H*rows of them in (bh, r) order, are row programs (gpu/rows.h): a
 * thread per lane of the CPU's row function (model/softmax_math.h), K_ROWS_PER_CTA rows per block. */
#define K_ATT_ROWS_SMEM_BYTES (BK_CTA_THREADS * sizeof(double))

/* Forward: row r of the block (query i = q0 + r) holds scale * q_i . k_j for j < q1 (the GEMM applied the
 * scale, as the CPU's sgemm does). Adds the bias of the streams in stream order, then softmax over
 * j <= i in float exactly as cpu/attention.c's row (bk_causal_softmax_row: max by lanes, exps, their sum
 * by lanes, one reciprocal), and writes 0 to columns i+1 .. zero_to-1 (zero_to = T in the saved
 * probabilities, so that no entry past the diagonal is left stale; q1 in scratch). Shared memory: the
 * lanes' maxima, then their sums (floats). */
typedef struct k_att_softmax_args {
    float *S;
    int64_t bh_stride;
    int ld, rows, q0, zero_to, T, H;
    int64_t n; /* B*H*rows */
    bk_score_terms terms; /* the tables only: the other per-score terms are the fused programs' */
} k_att_softmax_args;

static inline BK_DEV_HD float *k_att_softmax_row(const k_att_softmax_args *a, int64_t idx, int *i)
{
    const int r = (int)(idx % a->rows);
    *i = a->q0 + r;
    return a->S + (idx / a->rows) * a->bh_stride + (int64_t)r * a->ld;
}

static inline BK_DEV_HD void k_att_softmax(int64_t cta, const void *args, float *smem)
{
    const k_att_softmax_args *a = (const k_att_softmax_args *)args;
    const int64_t first = cta * K_ROWS_PER_CTA;
    const int n = k_rows_of(cta, a->n);
    float *lmax = smem, *lsum = smem + BK_CTA_THREADS;
    BK_CTA_PHASE(t) /* the bias, elementwise */
    {
        for (int rr = 0; rr < n; rr++) {
            const int64_t idx = first + rr, bh = idx / a->rows;
            int i;
            float *row = k_att_softmax_row(a, idx, &i);
            const bk_score_head hv = bk_score_head_of(&a->terms, bh / a->H, (int)(bh % a->H), a->H, a->T);
            for (int j = t; j <= i; j += BK_CTA_THREADS)
                row[j] = bk_score_one(&hv, i, j, row[j]);
        }
    }
    BK_CTA_PHASE(t) /* the lanes' maxima */
    {
        const int rr = t / BK_SUM_LANES;
        if (rr >= n)
            continue;
        int i;
        const float *row = k_att_softmax_row(a, first + rr, &i);
        float m = -INFINITY;
        for (int j = t % BK_SUM_LANES; j <= i; j += BK_SUM_LANES)
            m = bk_lane_max(m, row[j]);
        lmax[t] = m;
    }
    BK_CTA_PHASE(t) /* the exps, elementwise */
    {
        for (int rr = 0; rr < n; rr++) {
            int i;
            float *row = k_att_softmax_row(a, first + rr, &i);
            const float max = bk_max_of_lanes(lmax + rr * BK_SUM_LANES);
            for (int j = t; j <= i; j += BK_CTA_THREADS)
                row[j] = bk_softmax_exp(row[j], max);
        }
    }
    BK_CTA_PHASE(t) /* the lanes' sums */
    {
        const int rr = t / BK_SUM_LANES;
        if (rr >= n)
            continue;
        int i;
        const float *row = k_att_softmax_row(a, first + rr, &i);
        float acc = 0.0f;
        for (int j = t % BK_SUM_LANES; j <= i; j += BK_SUM_LANES)
            acc += row[j];
        lsum[t] = acc;
    }
    BK_CTA_PHASE(t) /* one reciprocal per row; zeros past the diagonal */
    {
        for (int rr = 0; rr < n; rr++) {
            int i;
            float *row = k_att_softmax_row(a, first + rr, &i);
            const float inv = 1.0f / BK_LANES_TOTAL(lsum + rr * BK_SUM_LANES);
            for (int j = t; j <= i; j += BK_CTA_THREADS)
                row[j] *= inv;
            for (int j = i + 1 + t; j < a->zero_to; j += BK_CTA_THREADS)
                row[j] = 0.0f;
        }
    }
}

/* Softmax backward, the same rows: dS holds dP = dO V^T for the block (rows x q1, leading dimension
 * ld_ds); P the block's probabilities (leading dimension ld_p). In place: dS_ij = P_ij (dP_ij - sum_{k<=i}
 * P_ik dP_ik) for j <= i, 0 for i < j < q1, the dot product by lanes in double (bk_dot_lanes' grouping),
 * rounded to float once, as the CPU does. The 1/sqrt(hd) of the scores is applied by the dQ and dK GEMMs
 * (alpha); the bias enters unscaled, so dS itself is the table's score gradient. Shared memory: the
 * lanes' dot products (doubles). */
typedef struct k_att_softmax_bwd_args {
    float *dS;
    const float *P;
    int64_t ds_bh_stride, p_bh_stride;
    int ld_ds, ld_p, rows, q0, q1;
    int64_t n; /* B*H*rows */
} k_att_softmax_bwd_args;

static inline BK_DEV_HD void k_att_softmax_bwd_rows(const k_att_softmax_bwd_args *a, int64_t idx, float **row,
                                                    const float **P, int *i)
{
    const int r = (int)(idx % a->rows);
    const int64_t bh = idx / a->rows;
    *i = a->q0 + r;
    *row = a->dS + bh * a->ds_bh_stride + (int64_t)r * a->ld_ds;
    *P = a->P + bh * a->p_bh_stride + (int64_t)r * a->ld_p;
}

static inline BK_DEV_HD void k_att_softmax_bwd(int64_t cta, const void *args, float *smem)
{
    const k_att_softmax_bwd_args *a = (const k_att_softmax_bwd_args *)args;
    const int64_t first = cta * K_ROWS_PER_CTA;
    const int n = k_rows_of(cta, a->n);
    double *ldot = (double *)smem;
    BK_CTA_PHASE(t)
    {
        const int rr = t / BK_SUM_LANES;
        if (rr >= n)
            continue;
        float *row;
        const float *P;
        int i;
        k_att_softmax_bwd_rows(a, first + rr, &row, &P, &i);
        double acc = 0.0;
        for (int j = t % BK_SUM_LANES; j <= i; j += BK_SUM_LANES)
            acc += bk_dot_term(P[j], row[j]);
        ldot[t] = acc;
    }
    BK_CTA_PHASE(t)
    {
        for (int rr = 0; rr < n; rr++) {
            float *row;
            const float *P;
            int i;
            k_att_softmax_bwd_rows(a, first + rr, &row, &P, &i);
            const float fdot = (float)BK_LANES_TOTAL(ldot + rr * BK_SUM_LANES);
            for (int j = t; j <= i; j += BK_CTA_THREADS)
                row[j] = P[j] * (row[j] - fdot);
            for (int j = i + 1 + t; j < a->q1; j += BK_CTA_THREADS)
                row[j] = 0.0f;
        }
    }
}

/* ---- table gradient ---------------------------------------------------------------------------- */

/* Table-gradient partials of one stream for one query block, index per (bh, delta) over
 * B*H*width (width = the stream's span): G[bh * width + delta] += sum of dS[b,h,i,j] over the
 * block's queries i and keys j <= i with p(i) - p(j) = delta, in double.
 *
 * Order: the running value G[...] is loaded, every term added to it in ascending (i, j), and
 * stored: across query blocks (launched in ascending order) that is the CPU's order exactly, which
 * adds dS[i][j] into its per-(b, h) double slice for i ascending and, within a row, j ascending.
 *  - token stream (positions NULL): the one key is j = i - delta (when >= 0);
 *  - a stream with positions: p is non-decreasing along the row, so the keys j <= i with
 *    p(j) = p(i) - delta form one contiguous range [lo, hi), found by two binary searches over
 *    [0, i]. */
typedef struct k_att_table_partial_args {
    double *G;
    const float *dS;
    const int32_t *positions; /* B x T, or NULL */
    int64_t ds_bh_stride;
    int ld_ds, rows, q0, T, H, width;
} k_att_table_partial_args;

/* The first j in [lo, hi) with p[j] >= target (hi when none); p non-decreasing. */
static inline BK_DEV_HD int k_att_lower_bound(const int32_t *p, int lo, int hi, int64_t target)
{
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if ((int64_t)p[mid] < target)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static inline BK_DEV_HD void k_att_table_partial(int64_t idx, const void *args)
{
    const k_att_table_partial_args *a = (const k_att_table_partial_args *)args;
    const int delta = (int)(idx % a->width);
    const int64_t bh = idx / a->width;
    const int64_t b = bh / a->H;
    const float *dS = a->dS + bh * a->ds_bh_stride;
    double acc = a->G[idx];
    if (!a->positions) {
        for (int r = 0; r < a->rows; r++) {
            const int j = a->q0 + r - delta;
            if (j >= 0)
                acc += (double)dS[(int64_t)r * a->ld_ds + j];
        }
    } else {
        const int32_t *p = a->positions + b * a->T;
        for (int r = 0; r < a->rows; r++) {
            const int i = a->q0 + r;
            const int64_t target = (int64_t)p[i] - delta;
            const int lo = k_att_lower_bound(p, 0, i + 1, target);
            const int hi = k_att_lower_bound(p, lo, i + 1, target + 1);
            const float *row = dS + (int64_t)r * a->ld_ds;
            for (int j = lo; j < hi; j++)
                acc += (double)row[j];
        }
    }
    a->G[idx] = acc;
}

/* dtable[h * distances + delta] += (float)(sum over b = 0, 1, ..., B-1 of G[(b*H + h) * width + delta]),
 * summed in double in ascending b, index per (h, delta) over H*width: the CPU's final reduction. */
typedef struct k_att_table_reduce_args {
    float *dtable;
    const double *G;
    int B, H, width, distances;
} k_att_table_reduce_args;

static inline BK_DEV_HD void k_att_table_reduce(int64_t idx, const void *args)
{
    const k_att_table_reduce_args *a = (const k_att_table_reduce_args *)args;
    const int delta = (int)(idx % a->width);
    const int h = (int)(idx / a->width);
    double sum = 0.0;
    for (int b = 0; b < a->B; b++)
        sum += a->G[((int64_t)b * a->H + h) * a->width + delta];
    a->dtable[(int64_t)h * a->distances + delta] += (float)sum;
}

/* ---- counted positions (CoPE, model/cope_math.h) --------------------------------------------------- */

/* Forward, one thread per row of a query block (index over B*H*rows in (bh, r) order), before the
 * softmax (which then adds no bias): row r (query i = q0 + r) of S holds a_ij = scale * q_i . k_j (the
 * GEMM's), L's row the points logits l = q_i . E^T. The count is scanned from the diagonal down in double
 * (cpu/attention.c, counted_row); each visible column becomes
 *     the streams' bias added to a_ij (bk_score_one, stream order), then + cope_scale * lerp(l, p_ij),
 * the CPU's order (its terms first, then the counted term). */
typedef struct k_att_cope_args {
    float *S;
    int64_t bh_stride;
    const float *L; /* (bh, r) rows of `points` floats */
    int ld, rows, q0, T, H, points;
    float cope_scale;
    bk_score_terms terms; /* the tables only: the other per-score terms are the fused programs' */
} k_att_cope_args;

static inline BK_DEV_HD void k_att_cope(int64_t idx, const void *args)
{
    const k_att_cope_args *a = (const k_att_cope_args *)args;
    const int r = (int)(idx % a->rows), i = a->q0 + r;
    const int64_t bh = idx / a->rows;
    float *row = a->S + bh * a->bh_stride + (int64_t)r * a->ld;
    const float *l = a->L + idx * a->points;
    const bk_score_head hv = bk_score_head_of(&a->terms, bh / a->H, (int)(bh % a->H), a->H, a->T);
    double sum = 0.0;
    for (int j = i; j >= 0; j--) { /* bk_cope_row's scan, each score replaced once its gate is read */
        float w = 0.0f;
        int clamped = 0;
        const int32_t k = bk_cope_step(&sum, row, j, 0, 0, a->points, &w, &clamped);
        const float counted = a->cope_scale * bk_cope_lerp(l, k, w);
        row[j] = bk_score_one(&hv, i, j, row[j]) + counted;
    }
}

/* Backward, one thread per row of a query block, after k_att_softmax_bwd and the table partials (which
 * take dS as the score gradient): dS, A (a = scale * q.k as the forward had it) and Dp (scratch) share the
 * layout rows x q1 (leading dimension ld, bh-stride bh_stride); L, dL are (bh, r) rows of `points`.
 * bk_cope_row_backward (the CPU's too), with dl zeroed first (written, not accumulated) and Dp its out,
 * then dS_it += Dp_it = dg_it g_it (1 - g_it),
 * so that the dQ / dK GEMMs (alpha = 1/sqrt(hd)) carry the gates' gradient too. */
typedef struct k_att_cope_bwd_args {
    float *dS, *Dp, *dL;
    const float *A, *L;
    int64_t bh_stride;
    int ld, rows, q0, points;
    float cope_scale;
} k_att_cope_bwd_args;

static inline BK_DEV_HD void k_att_cope_bwd(int64_t idx, const void *args)
{
    const k_att_cope_bwd_args *a = (const k_att_cope_bwd_args *)args;
    const int r = (int)(idx % a->rows), i = a->q0 + r;
    const int64_t off = (idx / a->rows) * a->bh_stride + (int64_t)r * a->ld;
    float *row = a->dS + off, *dp = a->Dp + off, *dl = a->dL + idx * a->points;
    const float *ar = a->A + off, *l = a->L + idx * a->points;
    for (int k = 0; k < a->points; k++)
        dl[k] = 0.0f;
    bk_cope_row_backward(row, ar, i + 1, 0, 0, l, a->points, a->cope_scale, dl, dp);
    for (int j = 0; j <= i; j++)
        row[j] += dp[j];
}

/* dcope[e] += (float)(sum over bh = 0, 1, ..., B*H-1 of part[bh * n + e]) in double, index per e over
 * n = points * hd: the CPU's final reduction of its per-(b, h) dE. */
typedef struct k_att_cope_reduce_args {
    float *dcope;
    const float *part;
    int64_t n;
    int BH;
} k_att_cope_reduce_args;

static inline BK_DEV_HD void k_att_cope_reduce(int64_t idx, const void *args)
{
    const k_att_cope_reduce_args *a = (const k_att_cope_reduce_args *)args;
    double sum = 0.0;
    for (int bh = 0; bh < a->BH; bh++)
        sum += a->part[(int64_t)bh * a->n + idx];
    a->dcope[idx] += (float)sum;
}

#endif
