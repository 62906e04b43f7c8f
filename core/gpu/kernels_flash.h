/* The fused ("flash") attention's block programs, valid C11 and CUDA C++ (gpu/dev.h): causal attention
 * with the distance tables of both streams added to the scores, computed tile by tile with an online
 * softmax, so that no T x T matrix is ever stored. Semantics are those of cpu/attention.h:
 *     s[i][j] = scale * (q_i . k_j) + sum over streams of table_s[h][p_s(i) - p_s(j)],   j <= i
 *     P = softmax_j(s);  out_i = sum_j P[i][j] v_j
 * RoPE is not applied here: the model rotates q and k of qkv in place before attention (be->rotary).
 *
 * Tiles. Queries and keys are cut into tiles of `tile` rows (the plan in ops_flash.h picks 16, 32 or
 * 64 by head size so that a block's shared memory fits: k_flash_layout). q, k and v are read straight
 * from qkv (B, T, 3C) and results written straight into (B, T, C) / (B, T, 3C): no permutation passes.
 *
 * Forward (k_flash_fwd), one block per (b, h, query tile), the longest rows first: for every key tile
 * on or below the diagonal, in ascending order, the scores of the tile, then per row the running max
 * m, the running sum l (exps by bk_expf_nonpositive, the tile's sum by bk_sum_lanes) and the
 * rescaling of the output accumulator; at the end out = O / l and, for backward, the row's
 * log-sum-exp lse = m + log l (the `saved` of model/backend.h: B*H*T floats instead of B*H*T*T).
 *
 * Backward (FlashAttention-2's recomputation, made deterministic): P = exp(s - lse) is recomputed
 * from q, k and the tables, with D_i = dO_i . O_i (k_flash_dsum):
 *     dP = dO V^T;  dS = P (dP - D);  dV = P^T dO;  dK = scale dS^T Q;  dQ = scale dS K
 * - k_flash_dkdv: one block per (b, h, key tile) walks the query tiles from the diagonal down and owns
 *   its rows of dK and dV;
 * - k_flash_dq: one block per (b, h, query tile) walks the key tiles up to the diagonal and owns its
 *   rows of dQ and the table-gradient partial row of (b, query tile, h).
 * Every output element has one owner that sums its terms in a fixed order, so there are no atomics and
 * two runs give the same bits. dqkv is accumulated into (+=), as on the CPU.
 *
 * Table gradient. dS is the score gradient of the tables too (the bias enters unscaled). For stream s
 * the partial row of (b, qt, h) at delta, delta < width_s, is the sum, in double, of dS over
 * the query tile qt's rows and keys j <= i with p(i) - p(j) = delta; k_flash_dq adds one key tile
 * at a time (ascending), and within a tile each delta is one thread's: rows in ascending order, and in
 * a row the keys of that distance (one key on the token stream; a contiguous run when positions are
 * given, as p is non-decreasing) in ascending order. The partials are then summed over (b, qt) in
 * ascending order by k_flash_table_reduce into dtable. On the token stream without positions a row
 * holds only the distances its query tile can meet (k_flash_g_len). */
#ifndef BK_GPU_KERNELS_FLASH_H
#define BK_GPU_KERNELS_FLASH_H

#include "gpu/dev.h"
#include "gpu/kernels_attention.h"
#include "gpu/mma.h"
#include "model/softmax_math.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct k_flash_args {
    const float *qkv;                /* (B, T, 3C) */
    float *out;                      /* forward: (B, T, C) */
    float *lse;                      /* (B, H, T): written by forward (NULL: forward-only), read by backward */
    const float *o, *dout;           /* backward: the forward's output and its gradient, (B, T, C) */
    float *dsum;                     /* backward: (B, H, T), D_i = dO_i . O_i */
    float *dqkv;                     /* backward: (B, T, 3C), += */
    double *G[BK_STREAM_COUNT];      /* backward: partial rows (k_flash_g_at), or NULL */
    /* bf16 storage (the tensor-core programs of kernels_flash_tc.h only): when qkv16 is set, q, k and v
     * are read from it instead of qkv, dO and O from dout16 and o16 instead of dout and o, and the
     * forward's output is written, rounded, to out16 instead of out; lse, dsum, dqkv and the partials
     * stay fp32 (double). The same (B, T, 3C) and (B, T, C) layouts. */
    const uint16_t *qkv16, *dout16, *o16;
    uint16_t *out16;
    int32_t width[BK_STREAM_COUNT];  /* distances with a partial: 1 + the largest distance of stream s */
    k_att_bias bias;
    int B, T, C, H, tile;
    float scale;
} k_flash_args;

enum { K_FLASH_FWD = 0, K_FLASH_DKDV = 1, K_FLASH_DQ = 2 };

/* A program's shared memory: the offsets (in floats) of its arrays, 0 for arrays it does not use, each
 * starting on 32 bytes, and their row strides. The plan (ops_flash.h) sizes blocks by `total`, and the
 * programs carve their arrays by the offsets: one layout for both.
 *   fp32 (tensor = 0): q, k, v, dout and the accumulators are rows of hd floats padded to hd + 1, score
 *        tiles rows of tile + 1 floats (odd strides: a warp walking a column hits distinct banks); the
 *        forward's exps overwrite its scores in s, backward computes P and dS without s and dP;
 *   bf16 tensor cores (tensor = 1, kernels_flash_tc.h): q, k, v, dout, p and ds in bf16 (two to a
 *        float), the head size padded to hdp, a multiple of 16, rows padded by 8 bf16 or 4 floats
 *        (wmma's alignment rules, gpu/mma.h); s and dp hold the fp32 products. */
typedef struct k_flash_smem {
    int hdp, ldh, ldf, lds, ldp; /* head size as stored; row strides of the q, k, v, dout rows, of the
                                    accumulator rows, of s and dp, of p and ds */
    int64_t q, k, v, dout, acc, acc2, s, dp, p, ds, m, l, alpha, total;
} k_flash_smem;

/* floats that hold n values of `bytes` bytes (4 or 2), rounded up to 32 bytes */
static inline BK_DEV_HD int64_t k_flash_floats(int64_t n, int bytes)
{
    return ((n * bytes + 3) / 4 + 7) / 8 * 8;
}

static inline BK_DEV_HD k_flash_smem k_flash_layout(int which, int tensor, int tile, int hd)
{
    k_flash_smem L;
    memset(&L, 0, sizeof L);
    const int half = tensor ? 2 : 4; /* bytes of a q, k, v, dout, p or ds value */
    L.hdp = tensor ? (hd + 15) / 16 * 16 : hd;
    L.ldh = tensor ? L.hdp + 8 : hd + 1, L.ldf = tensor ? L.hdp + 4 : hd + 1;
    L.lds = tensor ? tile + 4 : tile + 1, L.ldp = tensor ? tile + 8 : tile + 1;
    const int64_t head = k_flash_floats((int64_t)tile * L.ldh, half), acc = k_flash_floats((int64_t)tile * L.ldf, 4);
    const int64_t score = k_flash_floats((int64_t)tile * L.lds, 4), prob = k_flash_floats((int64_t)tile * L.ldp, half);
    const int64_t row = k_flash_floats(tile, 4);
    int64_t at = 0;
    L.q = at, at += head;
    L.k = at, at += head;
    L.v = at, at += head;
    if (which != K_FLASH_FWD)
        L.dout = at, at += head;
    L.acc = at, at += acc; /* O, dQ or dK */
    if (which == K_FLASH_DKDV)
        L.acc2 = at, at += acc; /* dV */
    if (tensor || which == K_FLASH_FWD)
        L.s = at, at += score;
    if (tensor && which != K_FLASH_FWD)
        L.dp = at, at += score;
    if (which == K_FLASH_DKDV || (tensor && which == K_FLASH_FWD))
        L.p = at, at += prob;
    if (which != K_FLASH_FWD)
        L.ds = at, at += prob;
    L.m = at, at += row; /* m, or lse in backward */
    L.l = at, at += row; /* l, or D in backward */
    if (which == K_FLASH_FWD)
        L.alpha = at, at += row;
    L.total = at;
    return L;
}

static inline BK_DEV_HD int k_flash_tiles(const k_flash_args *a)
{
    return (a->T + a->tile - 1) / a->tile;
}

/* Rows of the tile starting at row t0 (the last tile may be short). */
static inline BK_DEV_HD int k_flash_rows(const k_flash_args *a, int t0)
{
    return a->T - t0 < a->tile ? a->T - t0 : a->tile;
}

/* Where row t0 of head h of batch row b starts: in qkv (B, T, 3C), part `part` (0 q, 1 k, 2 v), and
 * in a (B, T, C) tensor (out, dout, o). */
static inline BK_DEV_HD int64_t k_flash_qkv_at(const k_flash_args *a, int part, int64_t b, int h, int t0)
{
    return (b * a->T + t0) * 3 * (int64_t)a->C + (int64_t)part * a->C + (int64_t)h * (a->C / a->H);
}

static inline BK_DEV_HD int64_t k_flash_bt_at(const k_flash_args *a, int64_t b, int h, int t0)
{
    return (b * a->T + t0) * (int64_t)a->C + (int64_t)h * (a->C / a->H);
}

/* What block `cta` of a program works on: (b, h) and one tile of rows t0 .. t0 + n - 1. The tile index
 * runs backwards over the blocks of one (b, h) when `longest_first` (query tiles: the last has the most
 * keys to walk), forwards otherwise (key tiles: the first has the most queries). */
typedef struct k_flash_block {
    int64_t bh, b;
    int h, tile, t0, n;
} k_flash_block;

static inline BK_DEV_HD k_flash_block k_flash_block_of(const k_flash_args *a, int64_t cta, int longest_first)
{
    const int nq = k_flash_tiles(a);
    k_flash_block k;
    k.bh = cta / nq, k.b = k.bh / a->H, k.h = (int)(k.bh % a->H);
    k.tile = longest_first ? nq - 1 - (int)(cta % nq) : (int)(cta % nq);
    k.t0 = k.tile * a->tile;
    k.n = k_flash_rows(a, k.t0);
    return k;
}

/* The forward's start, thread t's share: the output accumulator (n floats) zeroed, the running max and
 * sum of each of the tile's rows at -inf and 0. */
static inline BK_DEV_HD void k_flash_fwd_start(float *acc, int64_t n, float *m, float *l, float *alpha, int tile,
                                               int t)
{
    for (int64_t e = t; e < n; e += BK_CTA_THREADS)
        acc[e] = 0.0f;
    for (int r = t; r < tile; r += BK_CTA_THREADS)
        m[r] = -INFINITY, l[r] = 0.0f, alpha[r] = 0.0f;
}

/* dst[r * ldh + d] = src[r * stride + d] for the tile's rows r < rows, 0 in the rows past the sequence;
 * thread t's share (consecutive threads read consecutive addresses). */
static inline BK_DEV_HD void k_flash_load(float *dst, const k_flash_smem *L, const float *src, int64_t stride, int rows,
                                          int tile, int t)
{
    for (int e = t; e < tile * L->hdp; e += BK_CTA_THREADS) {
        const int r = e / L->hdp, d = e % L->hdp;
        dst[r * L->ldh + d] = r < rows ? src[(int64_t)r * stride + d] : 0.0f;
    }
}

/* dst[r * stride + d] += scale * src[r * ldf + d] for r < rows, d < hd: a block's rows of dQ, dK or dV
 * added into dqkv. Thread t's share. */
static inline BK_DEV_HD void k_flash_add_rows(float *dst, int64_t stride, const float *src, int ldf, float scale,
                                              int rows, int hd, int t)
{
    for (int e = t; e < rows * hd; e += BK_CTA_THREADS) {
        const int r = e / hd, d = e % hd;
        dst[(int64_t)r * stride + d] += scale * src[r * ldf + d];
    }
}

static inline BK_DEV_HD float k_flash_dot(const float *x, const float *y, int n)
{
    float acc = 0.0f;
    for (int d = 0; d < n; d++)
        acc += x[d] * y[d];
    return acc;
}

/* The biased score of (i, j), j <= i, from the dot product q_i . k_j. */
static inline BK_DEV_HD float k_flash_biased(const k_flash_args *a, int64_t b, int h, int i, int j, float dot)
{
    return k_att_add_bias(&a->bias, b, h, a->T, i, j, a->scale * dot);
}

/* ... from rows of q and k in shared memory. */
static inline BK_DEV_HD float k_flash_score(const k_flash_args *a, int64_t b, int h, int i, int j, const float *q,
                                            const float *k)
{
    return k_flash_biased(a, b, h, i, j, k_flash_dot(q, k, a->C / a->H));
}

/* The online softmax's step for one row and one key tile: row[0 .. n-1] holds the tile's biased scores
 * (-inf where masked) and becomes their exps against the new running max; m, l are the row's running
 * max and sum, alpha receives the factor that rescales what was accumulated before. */
static inline BK_DEV_HD void k_flash_online_row(float *row, int n, float *m, float *l, float *alpha)
{
    const float mx = fmaxf(*m, bk_max_lanes(row, n));
    for (int c = 0; c < n; c++)
        row[c] = bk_expf_nonpositive(row[c] - mx);
    const float al = bk_expf_nonpositive(*m - mx);
    *l = *l * al + bk_sum_lanes(row, n);
    *m = mx, *alpha = al;
}

/* Backward, one score: P = exp(s - lse) (never above 1: lse >= the row's max) and dS = P (dP - D). */
static inline BK_DEV_HD float k_flash_prob(float s, float lse)
{
    return bk_expf_nonpositive(fminf(s - lse, 0.0f));
}

/* The forward's end, thread t's share: out = O / l for the tile's rows (O's row stride ld), and the row
 * log-sum-exp lse = m + log l when backward will want it. */
static inline BK_DEV_HD void k_flash_fwd_finish(const k_flash_args *a, int64_t bh, int h, int i0, int rows,
                                                const float *Os, int ld, const float *m, const float *l, int t)
{
    const int hd = a->C / a->H;
    const int64_t at = k_flash_bt_at(a, bh / a->H, h, i0);
    for (int e = t; e < rows * hd; e += BK_CTA_THREADS) {
        const int r = e / hd, d = e % hd;
        const float o = Os[r * ld + d] * (1.0f / l[r]);
        if (a->out16)
            a->out16[at + (int64_t)r * a->C + d] = bk_bf16_round(o);
        else
            a->out[at + (int64_t)r * a->C + d] = o;
    }
    if (a->lse)
        for (int r = t; r < rows; r += BK_CTA_THREADS)
            a->lse[bh * a->T + i0 + r] = m[r] + logf(l[r]);
}

/* ---- forward --------------------------------------------------------------------------------------- */

static inline BK_DEV_HD void k_flash_fwd(int64_t cta, const void *args, float *smem)
{
    const k_flash_args *a = (const k_flash_args *)args;
    const int hd = a->C / a->H, tile = a->tile;
    const k_flash_smem L = k_flash_layout(K_FLASH_FWD, 0, tile, hd);
    const int ld = L.ldh, lds = L.lds;
    const k_flash_block blk = k_flash_block_of(a, cta, 1);
    const int64_t bh = blk.bh, b = blk.b, C3 = 3 * (int64_t)a->C;
    const int h = blk.h, qt = blk.tile, i0 = blk.t0, rows = blk.n;
    float *Qs = smem + L.q, *Ks = smem + L.k, *Vs = smem + L.v, *Os = smem + L.acc, *Ss = smem + L.s;
    float *m = smem + L.m, *l = smem + L.l, *alpha = smem + L.alpha;

    BK_CTA_PHASE(t)
    {
        k_flash_load(Qs, &L, a->qkv + k_flash_qkv_at(a, 0, b, h, i0), C3, rows, tile, t);
        k_flash_fwd_start(Os, (int64_t)tile * ld, m, l, alpha, tile, t);
    }
    for (int kt = 0; kt <= qt; kt++) {
        const int j0 = kt * tile, cols = k_flash_rows(a, j0);
        BK_CTA_PHASE(t)
        {
            k_flash_load(Ks, &L, a->qkv + k_flash_qkv_at(a, 1, b, h, j0), C3, cols, tile, t);
            k_flash_load(Vs, &L, a->qkv + k_flash_qkv_at(a, 2, b, h, j0), C3, cols, tile, t);
        }
        BK_CTA_PHASE(t) /* scores; -inf past the diagonal and outside the sequence */
        {
            for (int e = t; e < tile * tile; e += BK_CTA_THREADS) {
                const int r = e / tile, c = e % tile, i = i0 + r, j = j0 + c;
                Ss[r * lds + c] =
                    r < rows && c < cols && j <= i ? k_flash_score(a, b, h, i, j, Qs + r * ld, Ks + c * ld) : -INFINITY;
            }
        }
        BK_CTA_PHASE(t) /* per row: the new max, the exps in place, the running sum, the rescale factor */
        {
            for (int r = t; r < rows; r += BK_CTA_THREADS)
                k_flash_online_row(Ss + r * lds, tile, &m[r], &l[r], &alpha[r]);
        }
        BK_CTA_PHASE(t) /* O = alpha O + P V */
        {
            for (int e = t; e < rows * hd; e += BK_CTA_THREADS) {
                const int r = e / hd, d = e % hd;
                const float *p = Ss + r * lds;
                float acc = Os[r * ld + d] * alpha[r];
                for (int c = 0; c < cols; c++)
                    acc += p[c] * Vs[c * ld + d];
                Os[r * ld + d] = acc;
            }
        }
    }
    BK_CTA_PHASE(t)
    {
        k_flash_fwd_finish(a, bh, h, i0, rows, Os, ld, m, l, t);
    }
}

/* ---- backward -------------------------------------------------------------------------------------- */

/* sum_j a[j] b[j] of bf16 rows, grouped in lanes as bk_dot_lanes groups its sum (j in lane j % 8): the
 * bits of bk_dot_lanes over the same values widened to float. */
static inline BK_DEV_HD double k_flash_dot16(const uint16_t *a, const uint16_t *b, int n)
{
    double lane[BK_SUM_LANES] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (int j = 0; j < n; j++)
        lane[j % BK_SUM_LANES] += bk_dot_term(bk_bf16_value(a[j]), bk_bf16_value(b[j]));
    return BK_LANES_TOTAL(lane);
}

/* D_i = dO_i . O_i for every (b, h, i), index over B*H*T in (b, h, i) order: the dot product by
 * bk_dot_lanes in double, rounded once (the CPU's rowsum of P dP is the same quantity); of the bf16
 * rows by k_flash_dot16 with bf16 storage. */
static inline BK_DEV_HD void k_flash_dsum(int64_t idx, const void *args)
{
    const k_flash_args *a = (const k_flash_args *)args;
    const int hd = a->C / a->H;
    const int i = (int)(idx % a->T);
    const int64_t bh = idx / a->T, b = bh / a->H;
    const int h = (int)(bh % a->H);
    const int64_t at = k_flash_bt_at(a, b, h, i);
    a->dsum[idx] = (float)(a->o16 ? k_flash_dot16(a->dout16 + at, a->o16 + at, hd)
                                  : bk_dot_lanes(a->dout + at, a->o + at, hd));
}

/* Row r of the query tile starting at i0: lse and D into smem (0 for rows past the sequence). */
static inline BK_DEV_HD void k_flash_load_stats(float *lse, float *dsum, const k_flash_args *a, int64_t bh, int i0,
                                                int rows, int t)
{
    for (int r = t; r < a->tile; r += BK_CTA_THREADS) {
        lse[r] = r < rows ? a->lse[bh * a->T + i0 + r] : 0.0f;
        dsum[r] = r < rows ? a->dsum[bh * a->T + i0 + r] : 0.0f;
    }
}

/* P and dS of one (query tile, key tile) pair, thread t's share: P[r][c] = exp(s - lse_r) and
 * dS[r][c] = P (dO_r . v_c - D_r) for j <= i inside the sequence, 0 elsewhere. P may be NULL. */
static inline BK_DEV_HD void k_flash_ds_tile(const k_flash_args *a, const k_flash_smem *L, int64_t b, int h, int i0,
                                             int rows, int j0, int cols, const float *Qs, const float *dOs,
                                             const float *Ks, const float *Vs, const float *lse, const float *dsum,
                                             float *Ps, float *dSs, int t)
{
    const int hd = a->C / a->H, ld = L->ldh, tile = a->tile, lds = L->ldp;
    for (int e = t; e < tile * tile; e += BK_CTA_THREADS) {
        const int r = e / tile, c = e % tile, i = i0 + r, j = j0 + c;
        float p = 0.0f, ds = 0.0f;
        if (r < rows && c < cols && j <= i) {
            p = k_flash_prob(k_flash_score(a, b, h, i, j, Qs + r * ld, Ks + c * ld), lse[r]);
            ds = p * (k_flash_dot(dOs + r * ld, Vs + c * ld, hd) - dsum[r]);
        }
        if (Ps)
            Ps[r * lds + c] = p;
        dSs[r * lds + c] = ds;
    }
}

static inline BK_DEV_HD void k_flash_dkdv(int64_t cta, const void *args, float *smem)
{
    const k_flash_args *a = (const k_flash_args *)args;
    const int hd = a->C / a->H, tile = a->tile, nq = k_flash_tiles(a);
    const k_flash_smem L = k_flash_layout(K_FLASH_DKDV, 0, tile, hd);
    const int ld = L.ldh, lds = L.ldp;
    const k_flash_block blk = k_flash_block_of(a, cta, 0);
    const int64_t bh = blk.bh, b = blk.b, C3 = 3 * (int64_t)a->C;
    const int h = blk.h, kt = blk.tile, j0 = blk.t0, cols = blk.n;
    float *Ks = smem + L.k, *Vs = smem + L.v, *dKs = smem + L.acc, *dVs = smem + L.acc2, *Qs = smem + L.q;
    float *dOs = smem + L.dout, *Ps = smem + L.p, *dSs = smem + L.ds, *lse = smem + L.m, *dsum = smem + L.l;

    BK_CTA_PHASE(t)
    {
        k_flash_load(Ks, &L, a->qkv + k_flash_qkv_at(a, 1, b, h, j0), C3, cols, tile, t);
        k_flash_load(Vs, &L, a->qkv + k_flash_qkv_at(a, 2, b, h, j0), C3, cols, tile, t);
        for (int e = t; e < tile * ld; e += BK_CTA_THREADS)
            dKs[e] = 0.0f, dVs[e] = 0.0f;
    }
    for (int qt = kt; qt < nq; qt++) {
        const int i0 = qt * tile, rows = k_flash_rows(a, i0);
        BK_CTA_PHASE(t)
        {
            k_flash_load(Qs, &L, a->qkv + k_flash_qkv_at(a, 0, b, h, i0), C3, rows, tile, t);
            k_flash_load(dOs, &L, a->dout + k_flash_bt_at(a, b, h, i0), a->C, rows, tile, t);
            k_flash_load_stats(lse, dsum, a, bh, i0, rows, t);
        }
        BK_CTA_PHASE(t)
        {
            k_flash_ds_tile(a, &L, b, h, i0, rows, j0, cols, Qs, dOs, Ks, Vs, lse, dsum, Ps, dSs, t);
        }
        BK_CTA_PHASE(t) /* dV += P^T dO, dK += scale dS^T Q, rows in ascending order */
        {
            for (int e = t; e < cols * hd; e += BK_CTA_THREADS) {
                const int c = e / hd, d = e % hd;
                float dv = dVs[c * ld + d], dk = 0.0f;
                for (int r = 0; r < rows; r++) {
                    dv += Ps[r * lds + c] * dOs[r * ld + d];
                    dk += dSs[r * lds + c] * Qs[r * ld + d];
                }
                dVs[c * ld + d] = dv;
                dKs[c * ld + d] += a->scale * dk;
            }
        }
    }
    BK_CTA_PHASE(t)
    {
        k_flash_add_rows(a->dqkv + k_flash_qkv_at(a, 1, b, h, j0), C3, dKs, ld, 1.0f, cols, hd, t);
        k_flash_add_rows(a->dqkv + k_flash_qkv_at(a, 2, b, h, j0), C3, dVs, ld, 1.0f, cols, hd, t);
    }
}

/* The table-gradient partial rows of stream s. The row of (b, query tile qt, h) holds k_flash_g_len
 * distances: all `width` with positions, and on the token stream without positions only those below the
 * tile's end, min(width, (qt + 1) tile), the largest a query tile can meet, so that the rows of the early
 * tiles are short (about half the memory of full rows at long lengths). (b, qt)'s H rows follow those of
 * every earlier (b, qt) in (b, qt) order; k_flash_g_at is where they start. */
static inline BK_DEV_HD int64_t k_flash_g_len(const k_flash_args *a, int s, int qt)
{
    const int64_t w = a->width[s], end = (int64_t)(qt + 1) * a->tile;
    return a->bias.positions[s] || end >= w ? w : end;
}

/* the sum of k_flash_g_len over query tiles 0 .. q-1: the short tiles, whose end is below width, are
 * the first (width - 1) / tile ones */
static inline BK_DEV_HD int64_t k_flash_g_prefix(const k_flash_args *a, int s, int64_t q)
{
    const int64_t w = a->width[s], tile = a->tile;
    if (a->bias.positions[s] || w < 1)
        return q * w;
    const int64_t short_tiles = (w - 1) / tile, k = q < short_tiles ? q : short_tiles;
    return tile * k * (k + 1) / 2 + (q - k) * w;
}

static inline BK_DEV_HD int64_t k_flash_g_at(const k_flash_args *a, int s, int64_t b, int qt)
{
    return (int64_t)a->H * (b * k_flash_g_prefix(a, s, k_flash_tiles(a)) + k_flash_g_prefix(a, s, qt));
}

/* index (h, delta) of (H, width[s]): dtable[h][delta] += the sum of the partials of delta over (b, qt) in
 * ascending order, in double (the rows too short to hold delta hold no partial of it) */
typedef struct k_flash_table_reduce_args {
    float *dtable;
    k_flash_args fa;
    int s;
    int64_t distances;
} k_flash_table_reduce_args;

static inline BK_DEV_HD void k_flash_table_reduce(int64_t idx, const void *args)
{
    const k_flash_table_reduce_args *r = (const k_flash_table_reduce_args *)args;
    const k_flash_args *a = &r->fa;
    const int s = r->s, nq = k_flash_tiles(a);
    const int64_t w = a->width[s], delta = idx % w, h = idx / w;
    double sum = 0.0;
    int64_t rows = 0; /* k_flash_g_len summed over the (b, qt) before this one: k_flash_g_at is H times it */
    for (int64_t b = 0; b < a->B; b++)
        for (int qt = 0; qt < nq; qt++) {
            const int64_t len = k_flash_g_len(a, s, qt);
            if (delta < len)
                sum += a->G[s][(int64_t)a->H * rows + h * len + delta];
            rows += len;
        }
    r->dtable[h * r->distances + delta] += (float)sum;
}

/* Thread t's distances of the table-gradient partial of stream s for one (query tile, key tile) pair
 * (see the header), from dS in shared memory with row stride lds: the distances the tile can hold are
 * [lo, hi], from the corner positions. */
static inline BK_DEV_HD void k_flash_table_partial(const k_flash_args *a, int s, int64_t b, int h, int qt, int i0,
                                                   int rows, int j0, int cols, const float *dSs, int lds, int t)
{
    const int32_t *p = a->bias.positions[s] ? a->bias.positions[s] + b * a->T : (const int32_t *)0;
    const int64_t first_i = p ? p[i0] : i0, last_i = p ? p[i0 + rows - 1] : i0 + rows - 1;
    const int64_t first_j = p ? p[j0] : j0, last_j = p ? p[j0 + cols - 1] : j0 + cols - 1;
    const int64_t len = k_flash_g_len(a, s, qt);
    const int64_t lo = first_i - last_j > 0 ? first_i - last_j : 0;
    const int64_t hi = last_i - first_j < len - 1 ? last_i - first_j : len - 1;
    double *G = a->G[s] + k_flash_g_at(a, s, b, qt) + h * len;
    for (int64_t delta = lo + t; delta <= hi; delta += BK_CTA_THREADS) {
        double acc = 0.0;
        for (int r = 0; r < rows; r++) {
            const int i = i0 + r, end = j0 + cols < i + 1 ? j0 + cols : i + 1; /* keys j0 .. end-1 */
            if (!p) {
                const int64_t j = i - delta;
                if (j >= j0 && j < end)
                    acc += (double)dSs[r * lds + (int)(j - j0)];
            } else if (end > j0) {
                const int64_t target = (int64_t)p[i] - delta;
                const int first = k_att_lower_bound(p, j0, end, target);
                const int past = k_att_lower_bound(p, first, end, target + 1);
                for (int j = first; j < past; j++)
                    acc += (double)dSs[r * lds + (j - j0)];
            }
        }
        G[delta] += acc;
    }
}

static inline BK_DEV_HD void k_flash_dq(int64_t cta, const void *args, float *smem)
{
    const k_flash_args *a = (const k_flash_args *)args;
    const int hd = a->C / a->H, tile = a->tile;
    const k_flash_smem L = k_flash_layout(K_FLASH_DQ, 0, tile, hd);
    const int ld = L.ldh, lds = L.ldp;
    const k_flash_block blk = k_flash_block_of(a, cta, 1);
    const int64_t bh = blk.bh, b = blk.b, C3 = 3 * (int64_t)a->C;
    const int h = blk.h, qt = blk.tile, i0 = blk.t0, rows = blk.n;
    float *Qs = smem + L.q, *dOs = smem + L.dout, *dQs = smem + L.acc, *Ks = smem + L.k, *Vs = smem + L.v;
    float *dSs = smem + L.ds, *lse = smem + L.m, *dsum = smem + L.l;

    BK_CTA_PHASE(t)
    {
        k_flash_load(Qs, &L, a->qkv + k_flash_qkv_at(a, 0, b, h, i0), C3, rows, tile, t);
        k_flash_load(dOs, &L, a->dout + k_flash_bt_at(a, b, h, i0), a->C, rows, tile, t);
        for (int e = t; e < tile * ld; e += BK_CTA_THREADS)
            dQs[e] = 0.0f;
        k_flash_load_stats(lse, dsum, a, bh, i0, rows, t);
    }
    for (int kt = 0; kt <= qt; kt++) {
        const int j0 = kt * tile, cols = k_flash_rows(a, j0);
        BK_CTA_PHASE(t)
        {
            k_flash_load(Ks, &L, a->qkv + k_flash_qkv_at(a, 1, b, h, j0), C3, cols, tile, t);
            k_flash_load(Vs, &L, a->qkv + k_flash_qkv_at(a, 2, b, h, j0), C3, cols, tile, t);
        }
        BK_CTA_PHASE(t)
        {
            k_flash_ds_tile(a, &L, b, h, i0, rows, j0, cols, Qs, dOs, Ks, Vs, lse, dsum, (float *)0, dSs, t);
        }
        BK_CTA_PHASE(t) /* dQ += scale dS K, keys in ascending order; the tile's table-gradient partials */
        {
            for (int e = t; e < rows * hd; e += BK_CTA_THREADS) {
                const int r = e / hd, d = e % hd;
                float acc = 0.0f;
                for (int c = 0; c < cols; c++)
                    acc += dSs[r * lds + c] * Ks[c * ld + d];
                dQs[r * ld + d] += a->scale * acc;
            }
            for (int s = 0; s < BK_STREAM_COUNT; s++)
                if (a->G[s])
                    k_flash_table_partial(a, s, b, h, qt, i0, rows, j0, cols, dSs, lds, t);
        }
    }
    BK_CTA_PHASE(t)
    {
        k_flash_add_rows(a->dqkv + k_flash_qkv_at(a, 0, b, h, i0), C3, dQs, ld, 1.0f, rows, hd, t);
    }
}

#endif
