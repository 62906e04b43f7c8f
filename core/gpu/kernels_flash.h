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
 * holds only the distances its query tile can meet (k_flash_g_len).
 *
 * ABI 2 terms (k_flash_v2; cpu/attention.h, model/bias_math.h), each absent in an ABI 1 call, which then
 * runs exactly the operations it ran before (the same bits):
 *     s[i][j] = lscale[h][i] * scale (q_i . k_j) + tables + F_h(u),  u = phi[i - j] rscale[i]
 *   (F_h: the coordinate grid read by bk_coord_cell / bk_coord_lerp), and -inf where bk_mask_keeps says
 *   the window and sinks hide (i, j).
 * - Tile skipping: a query tile walks only the key tiles that bk_mask_tile does not classify SKIP: the
 *   sink tiles, then from the tile of bk_mask_first_key (k_flash_key_tiles, k_flash_kt_next), and a key
 *   tile only the query tiles up to k_flash_qt_end; the mask is applied per element on PARTIAL tiles
 *   only. So with a window the work per query grows with the window, not with T. A row may have no
 *   visible key in one tile (bk_online_softmax_row keeps it at -inf / 0), never in all of them: every query
 *   sees itself.
 * - Backward: dK and dQ take dS lscale[h][i]; the gradients of the ABI 2 terms are reduced like the table
 *   gradient, deterministically and without atomics: k_flash_dq, which owns (b, h, query tile), adds per
 *   key tile (ascending) into partials it alone writes: per row (dscale: sum_j dS a with a = scale q.k;
 *   drscale: sum_j dS slope phi[i - j]), per distance like a token-stream table partial (dphi: dS slope
 *   rscale[i]), per grid point (dgrid: dS (1 - t) at cell g, dS t at g + 1; one thread per point, which
 *   finds the keys of its cell in each row by binary search: the cell is monotone along a row since phi
 *   is non-decreasing). k_flash_v2_reduce then sums the partials over (b, query tile) and, for dphi and
 *   drscale, the heads, in ascending order, in double.
 * - Content position (cpos, B x H x T): s[i][j] += bk_content_term(P(i), P(j)) = P(j) - P(i) after the other
 *   terms (bk_score_one). dcpos(t) = (sum of dS over t's column) - (sum over its row),
 *   bk_content_grad: the column sums by the program that owns the key tile (k_flash_dkdv, which then keeps
 *   dS raw and applies the logit scale in dK's chain), the row sums by the one that owns the query tile
 *   (k_flash_dq), each a chain of doubles in a (B, H, T) partial only its owner writes (k_flash_cpos_keys,
 *   k_flash_cpos_queries), combined per token by k_flash_v2_reduce. */
#ifndef BK_GPU_KERNELS_FLASH_H
#define BK_GPU_KERNELS_FLASH_H

#include "gpu/dev.h"
#include "gpu/kernels_attention.h"
#include "gpu/mma.h"
#include "model/bias_math.h"
#include "model/score_terms.h"
#include "model/softmax_math.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* The gradient partials of the ABI 2 terms of a call (see the header; the terms themselves are the args'
 * bk_score_terms), pointers in backend memory; all NULL / 0 in an ABI 1 call. */
typedef struct k_flash_v2 {
    int32_t wphi; /* distances with a dphi partial: min(distances, T) */
    /* backward partials, each NULL when its gradient is not wanted */
    double *dscale_part;  /* (B, H, T): sum_j dS a of the row (written) */
    double *drscale_part; /* (B, H, T): sum_j dS slope phi[i - j] of the row (written) */
    double *dphi_part;    /* per (b, query tile, h), k_flash_phi_at (+=) */
    double *dgrid_part;   /* (B, query tile, H, points) (+=) */
    double *dcpos_key;    /* (B, H, T): sum_i dS_ij of key j, i ascending (+=, by the key tile's owner) */
    double *dcpos_query;  /* (B, H, T): sum_j dS_ij of query i, j ascending (+=, by the query tile's owner) */
} k_flash_v2;

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
    bk_score_terms terms; /* the per-score terms (model/score_terms.h), in backend memory */
    k_flash_v2 v2;
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
    int64_t q, k, v, dout, acc, acc2, s, dp, p, ds, m, l, alpha;
    int64_t sa, racc, rng; /* k_flash_dq's ABI 2 arrays (K_FLASH_V2_*), 0 when absent */
    int64_t total;
} k_flash_smem;

/* What of k_flash_dq's shared memory the ABI 2 backward partials add (the `v2` of k_flash_layout):
 *   K_FLASH_V2_SA     fp32: a tile of dS a (row stride ldp) for dscale (the tensor-core program writes it
 *                     over dp, which it has read by then);
 *   K_FLASH_V2_ROWS   two doubles per row: the running sums of dscale and drscale over the key tiles;
 *   K_FLASH_V2_CELLS  two ints per row: the grid cells a row meets in the current tile (dgrid). */
enum { K_FLASH_V2_SA = 1, K_FLASH_V2_ROWS = 2, K_FLASH_V2_CELLS = 4 };

/* ... for the gradients wanted (each 0 or 1); k_flash_v2_needs from the partials a call has. */
static inline BK_DEV_HD int k_flash_v2_needs_of(int dscale, int drscale, int dgrid)
{
    return (dscale ? K_FLASH_V2_SA : 0) | (dscale || drscale ? K_FLASH_V2_ROWS : 0) | (dgrid ? K_FLASH_V2_CELLS : 0);
}

static inline BK_DEV_HD int k_flash_v2_needs(const k_flash_v2 *v)
{
    return k_flash_v2_needs_of(v->dscale_part != 0, v->drscale_part != 0, v->dgrid_part != 0);
}

/* floats that hold n values of `bytes` bytes (4 or 2), rounded up to 32 bytes */
static inline BK_DEV_HD int64_t k_flash_floats(int64_t n, int bytes)
{
    return ((n * bytes + 3) / 4 + 7) / 8 * 8;
}

static inline BK_DEV_HD k_flash_smem k_flash_layout(int which, int tensor, int tile, int hd, int v2)
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
    if (which == K_FLASH_DQ && (v2 & K_FLASH_V2_SA) && !tensor)
        L.sa = at, at += k_flash_floats((int64_t)tile * L.ldp, 4);
    if (which == K_FLASH_DQ && (v2 & K_FLASH_V2_ROWS))
        L.racc = at, at += k_flash_floats(2 * (int64_t)tile, 8);
    if (which == K_FLASH_DQ && (v2 & K_FLASH_V2_CELLS))
        L.rng = at, at += k_flash_floats(2 * (int64_t)tile, 4);
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

/* ---- ABI 2: the tiles a mask lets through, the scores ----------------------------------------------- */

/* The key tiles that query tile qt (of `tile` rows) walks, in ascending order: the sink tiles
 * 0 .. *sink_end - 1 (those that hold a key j < sinks), then *first .. qt (from the tile of the window's
 * first key for the tile's first row, bk_mask_first_key): exactly the tiles that bk_mask_tile does not
 * classify BK_TILE_SKIP (tests/test_backend_attention_v2.c checks it). Without a window, 0 .. qt.
 * Returns the first tile; k_flash_kt_next gives the next. */
static inline BK_DEV_HD int k_flash_key_tiles(int qt, int tile, int window, int sinks, int *sink_end, int *first)
{
    const int f = bk_mask_first_key(qt * tile, window) / tile;
    const int s = window > 0 && sinks > 0 ? (sinks + tile - 1) / tile : 0;
    *first = f;
    *sink_end = s < f ? s : f;
    return *sink_end > 0 ? 0 : f;
}

static inline BK_DEV_HD int k_flash_kt_next(int kt, int sink_end, int first)
{
    return kt + 1 < sink_end || kt + 1 >= first ? kt + 1 : first;
}

/* One past the last query tile that key tile kt (keys kt * tile .. kt * tile + cols - 1) walks to from kt
 * (of nq): every tile when the key tile holds a sink or there is no window, else up to the tile of the
 * last query that sees its last key, j = kt * tile + cols - 1, i = j + window - 1. The tiles kt ..
 * k_flash_qt_end - 1 are the ones bk_mask_tile does not classify BK_TILE_SKIP. */
static inline BK_DEV_HD int k_flash_qt_end(int kt, int cols, int tile, int nq, int window, int sinks)
{
    const int64_t j0 = (int64_t)kt * tile;
    if (window <= 0 || j0 < sinks)
        return nq;
    const int64_t end = (j0 + cols - 1 + window - 1) / tile + 1;
    return end < nq ? (int)end : nq;
}

/* The class of the tile pair (query rows i0 .. i0 + rows - 1, keys j0 .. j0 + cols - 1): bk_mask_tile,
 * the causal mask included. */
static inline BK_DEV_HD int k_flash_tile_class(const k_flash_args *a, int i0, int rows, int j0, int cols)
{
    return bk_score_tile(&a->terms, i0, i0 + rows, j0, j0 + cols);
}

/* Whether (i, j) of a tile of class cls has a score: every pair of a full tile, per element in a
 * partial one. */
static inline BK_DEV_HD int k_flash_keeps(const k_flash_args *a, int cls, int i, int j)
{
    return bk_score_tile_keeps(&a->terms, cls, i, j);
}

/* The visible keys of row i inside the tile from j0 with j <= i: columns 0 .. k_flash_causal_cols - 1
 * (none when <= 0). */
static inline BK_DEV_HD int k_flash_causal_cols(int i, int j0, int cols)
{
    const int n = i - j0 + 1;
    return n < cols ? n : cols;
}

/* The per-score terms of (b, h) (model/score_terms.h): a program builds them once per block. */
static inline BK_DEV_HD bk_score_head k_flash_head(const k_flash_args *a, int64_t b, int h)
{
    return bk_score_head_of(&a->terms, b, h, a->H, a->T);
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

/* The biased score of (i, j), j <= i visible, from the dot product q_i . k_j, with (b, h)'s terms hv. */
static inline BK_DEV_HD float k_flash_biased(const k_flash_args *a, const bk_score_head *hv, int i, int j, float dot)
{
    return bk_score_one(hv, i, j, a->scale * dot);
}

/* ... from rows of q and k in shared memory. */
static inline BK_DEV_HD float k_flash_score(const k_flash_args *a, int64_t b, int h, int i, int j, const float *q,
                                            const float *k)
{
    const bk_score_head hv = k_flash_head(a, b, h);
    return k_flash_biased(a, &hv, i, j, k_flash_dot(q, k, a->C / a->H));
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
    const k_flash_smem L = k_flash_layout(K_FLASH_FWD, 0, tile, hd, 0);
    const int ld = L.ldh, lds = L.lds;
    const k_flash_block blk = k_flash_block_of(a, cta, 1);
    const int64_t bh = blk.bh, b = blk.b, C3 = 3 * (int64_t)a->C;
    const int h = blk.h, qt = blk.tile, i0 = blk.t0, rows = blk.n;
    float *Qs = smem + L.q, *Ks = smem + L.k, *Vs = smem + L.v, *Os = smem + L.acc, *Ss = smem + L.s;
    float *m = smem + L.m, *l = smem + L.l, *alpha = smem + L.alpha;
    const bk_score_head hv = k_flash_head(a, b, h);

    BK_CTA_PHASE(t)
    {
        k_flash_load(Qs, &L, a->qkv + k_flash_qkv_at(a, 0, b, h, i0), C3, rows, tile, t);
        k_flash_fwd_start(Os, (int64_t)tile * ld, m, l, alpha, tile, t);
    }
    int sink_end, first;
    for (int kt = k_flash_key_tiles(qt, tile, a->terms.window, a->terms.sinks, &sink_end, &first); kt <= qt;
         kt = k_flash_kt_next(kt, sink_end, first)) {
        const int j0 = kt * tile, cols = k_flash_rows(a, j0), cls = k_flash_tile_class(a, i0, rows, j0, cols);
        BK_DEV_COUNT_TILE(K_FLASH_FWD);
        BK_CTA_PHASE(t)
        {
            k_flash_load(Ks, &L, a->qkv + k_flash_qkv_at(a, 1, b, h, j0), C3, cols, tile, t);
            k_flash_load(Vs, &L, a->qkv + k_flash_qkv_at(a, 2, b, h, j0), C3, cols, tile, t);
        }
        BK_CTA_PHASE(t) /* scores; -inf where masked (past the diagonal, a window) and outside the sequence */
        {
            for (int e = t; e < tile * tile; e += BK_CTA_THREADS) {
                const int r = e / tile, c = e % tile, i = i0 + r, j = j0 + c;
                Ss[r * lds + c] = r < rows && c < cols && k_flash_keeps(a, cls, i, j)
                                      ? k_flash_biased(a, &hv, i, j, k_flash_dot(Qs + r * ld, Ks + c * ld, hd))
                                      : -INFINITY;
            }
        }
        BK_CTA_PHASE(t) /* per row: the new max, the exps in place, the running sum, the rescale factor */
        {
            for (int r = t; r < rows; r += BK_CTA_THREADS)
                bk_online_softmax_row(Ss + r * lds, tile, &m[r], &l[r], &alpha[r]);
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

/* P and dS of one (query tile, key tile) pair of class cls, thread t's share: P[r][c] = exp(s - lse_r) and
 * dS[r][c] = P (dO_r . v_c - D_r) for the visible (i, j) inside the sequence, 0 elsewhere. P may be NULL.
 * for_dk: dS is stored times the logit scale of its row (what dK = scale (dS lscale)^T Q takes); else as
 * it is (the score gradient of every additive term; dQ applies the scale per row). Sa, when not NULL,
 * receives dS a (a = scale q.k: dscale's terms). */
static inline BK_DEV_HD void k_flash_ds_tile(const k_flash_args *a, const k_flash_smem *L, int64_t b, int h, int i0,
                                             int rows, int j0, int cols, int cls, int for_dk, const float *Qs,
                                             const float *dOs, const float *Ks, const float *Vs, const float *lse,
                                             const float *dsum, float *Ps, float *dSs, float *Sa, int t)
{
    const int hd = a->C / a->H, ld = L->ldh, tile = a->tile, lds = L->ldp;
    const float *lscale = for_dk ? a->terms.lscale : (const float *)0;
    const bk_score_head hv = k_flash_head(a, b, h);
    for (int e = t; e < tile * tile; e += BK_CTA_THREADS) {
        const int r = e / tile, c = e % tile, i = i0 + r, j = j0 + c;
        float p = 0.0f, ds = 0.0f, sa = 0.0f;
        if (r < rows && c < cols && k_flash_keeps(a, cls, i, j)) {
            const float x = a->scale * k_flash_dot(Qs + r * ld, Ks + c * ld, hd);
            p = bk_flash_prob(bk_score_one(&hv, i, j, x), lse[r]);
            ds = p * (k_flash_dot(dOs + r * ld, Vs + c * ld, hd) - dsum[r]);
            sa = ds * x;
            if (lscale)
                ds *= lscale[(int64_t)h * a->T + i];
        }
        if (Ps)
            Ps[r * lds + c] = p;
        dSs[r * lds + c] = ds;
        if (Sa)
            Sa[r * lds + c] = sa;
    }
}

/* The content position's gradient partials of one tile pair, from dS (fp32, raw: not times the logit scale;
 * 0 where masked and outside the sequence) with row stride ld, thread t's share; each element of a partial
 * has one owner that adds the tile pairs in the order it walks them, so no two blocks write one element:
 *  - k_flash_cpos_keys, by the owner of the key tile (k_flash_dkdv; the second generation's block): for
 *    each key c (thread c), dcpos_key += dS[r][c] over the tile's rows r ascending (the query tiles walked
 *    ascending: each key's sum runs over i ascending);
 *  - k_flash_cpos_queries, by the owner of the query tile (k_flash_dq; the second generation in qt's turn):
 *    for each row r (thread r), dcpos_query += dS[r][c] over the keys c ascending (the key tiles of the
 *    walk ascending).
 * Each running sum is a chain of doubles read from and written back to the partial in global memory. */
static inline BK_DEV_HD void k_flash_cpos_keys(const k_flash_args *a, int64_t bh, int rows, int j0, int cols,
                                               const float *dS, int ld, int t)
{
    double *part = a->v2.dcpos_key;
    if (!part)
        return;
    for (int c = t; c < cols; c += BK_CTA_THREADS) {
        double acc = part[bh * a->T + j0 + c];
        for (int r = 0; r < rows; r++)
            acc += (double)dS[r * ld + c];
        part[bh * a->T + j0 + c] = acc;
    }
}

static inline BK_DEV_HD void k_flash_cpos_queries(const k_flash_args *a, int64_t bh, int i0, int rows, int cols,
                                                  const float *dS, int ld, int t)
{
    double *part = a->v2.dcpos_query;
    if (!part)
        return;
    for (int r = t; r < rows; r += BK_CTA_THREADS) {
        double acc = part[bh * a->T + i0 + r];
        for (int c = 0; c < cols; c++)
            acc += (double)dS[r * ld + c];
        part[bh * a->T + i0 + r] = acc;
    }
}

static inline BK_DEV_HD void k_flash_dkdv(int64_t cta, const void *args, float *smem)
{
    const k_flash_args *a = (const k_flash_args *)args;
    const int hd = a->C / a->H, tile = a->tile, nq = k_flash_tiles(a);
    const k_flash_smem L = k_flash_layout(K_FLASH_DKDV, 0, tile, hd, 0);
    const int ld = L.ldh, lds = L.ldp;
    const k_flash_block blk = k_flash_block_of(a, cta, 0);
    const int64_t bh = blk.bh, b = blk.b, C3 = 3 * (int64_t)a->C;
    const int h = blk.h, kt = blk.tile, j0 = blk.t0, cols = blk.n;
    float *Ks = smem + L.k, *Vs = smem + L.v, *dKs = smem + L.acc, *dVs = smem + L.acc2, *Qs = smem + L.q;
    float *dOs = smem + L.dout, *Ps = smem + L.p, *dSs = smem + L.ds, *lse = smem + L.m, *dsum = smem + L.l;
    /* the content position's key sums take dS raw: then dS is kept so and the dK chain applies the row's
     * logit scale (the same float product ds lscale as k_flash_ds_tile's for_dk) */
    const int raw = a->v2.dcpos_key != 0;
    const float *lscale = raw && a->terms.lscale ? a->terms.lscale + (int64_t)h * a->T : (const float *)0;

    BK_CTA_PHASE(t)
    {
        k_flash_load(Ks, &L, a->qkv + k_flash_qkv_at(a, 1, b, h, j0), C3, cols, tile, t);
        k_flash_load(Vs, &L, a->qkv + k_flash_qkv_at(a, 2, b, h, j0), C3, cols, tile, t);
        for (int e = t; e < tile * ld; e += BK_CTA_THREADS)
            dKs[e] = 0.0f, dVs[e] = 0.0f;
    }
    const int qt_end = k_flash_qt_end(kt, cols, tile, nq, a->terms.window, a->terms.sinks);
    for (int qt = kt; qt < qt_end; qt++) {
        const int i0 = qt * tile, rows = k_flash_rows(a, i0), cls = k_flash_tile_class(a, i0, rows, j0, cols);
        BK_DEV_COUNT_TILE(K_FLASH_DKDV);
        BK_CTA_PHASE(t)
        {
            k_flash_load(Qs, &L, a->qkv + k_flash_qkv_at(a, 0, b, h, i0), C3, rows, tile, t);
            k_flash_load(dOs, &L, a->dout + k_flash_bt_at(a, b, h, i0), a->C, rows, tile, t);
            k_flash_load_stats(lse, dsum, a, bh, i0, rows, t);
        }
        BK_CTA_PHASE(t)
        {
            k_flash_ds_tile(a, &L, b, h, i0, rows, j0, cols, cls, !raw, Qs, dOs, Ks, Vs, lse, dsum, Ps, dSs,
                            (float *)0, t);
        }
        BK_CTA_PHASE(t) /* dV += P^T dO, dK += scale dS^T Q, rows in ascending order; the key sums of dS */
        {
            for (int e = t; e < cols * hd; e += BK_CTA_THREADS) {
                const int c = e / hd, d = e % hd;
                float dv = dVs[c * ld + d], dk = 0.0f;
                for (int r = 0; r < rows; r++) {
                    const float ds = lscale ? dSs[r * lds + c] * lscale[i0 + r] : dSs[r * lds + c];
                    dv += Ps[r * lds + c] * dOs[r * ld + d];
                    dk += ds * Qs[r * ld + d];
                }
                dVs[c * ld + d] = dv;
                dKs[c * ld + d] += a->scale * dk;
            }
            k_flash_cpos_keys(a, bh, rows, j0, cols, dSs, lds, t);
        }
    }
    BK_CTA_PHASE(t)
    {
        k_flash_add_rows(a->dqkv + k_flash_qkv_at(a, 1, b, h, j0), C3, dKs, ld, 1.0f, cols, hd, t);
        k_flash_add_rows(a->dqkv + k_flash_qkv_at(a, 2, b, h, j0), C3, dVs, ld, 1.0f, cols, hd, t);
    }
}

/* Partial rows over distances (the table gradients' and dphi's): the row of query tile qt holds
 * k_flash_row_len(w, positioned, tile, qt) of w distances: all w with positions, and on the token index
 * only those below the tile's end, min(w, (qt + 1) tile), the largest a query tile can meet, so that
 * the rows of the early tiles are short (about half the memory of full rows at long lengths);
 * k_flash_row_prefix is the sum of the lengths of query tiles 0 .. q-1 (the short tiles, whose end is
 * below w, are the first (w - 1) / tile ones). */
static inline BK_DEV_HD int64_t k_flash_row_len(int64_t w, int positioned, int tile, int qt)
{
    const int64_t end = (int64_t)(qt + 1) * tile;
    return positioned || end >= w ? w : end;
}

static inline BK_DEV_HD int64_t k_flash_row_prefix(int64_t w, int positioned, int tile, int64_t q)
{
    if (positioned || w < 1)
        return q * w;
    const int64_t short_tiles = (w - 1) / tile, k = q < short_tiles ? q : short_tiles;
    return (int64_t)tile * k * (k + 1) / 2 + (q - k) * w;
}

/* The table-gradient partial rows of stream s: the row of (b, query tile qt, h) holds k_flash_g_len
 * distances of width[s] (k_flash_row_len). (b, qt)'s H rows follow those of every earlier (b, qt) in
 * (b, qt) order; k_flash_g_at is where they start. */
static inline BK_DEV_HD int64_t k_flash_g_len(const k_flash_args *a, int s, int qt)
{
    return k_flash_row_len(a->width[s], a->terms.positions[s] != 0, a->tile, qt);
}

/* the sum of k_flash_g_len over query tiles 0 .. q-1 */
static inline BK_DEV_HD int64_t k_flash_g_prefix(const k_flash_args *a, int s, int64_t q)
{
    return k_flash_row_prefix(a->width[s], a->terms.positions[s] != 0, a->tile, q);
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
    const int32_t *p = a->terms.positions[s] ? a->terms.positions[s] + b * a->T : (const int32_t *)0;
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

/* ---- ABI 2 gradients: the partials of k_flash_dq and their reduction --------------------------------- */

/* dphi's partial rows: like a token-stream table partial of width wphi (k_flash_row_len), (b, qt)'s H
 * rows after those of every earlier (b, qt). */
static inline BK_DEV_HD int64_t k_flash_phi_len(const k_flash_args *a, int qt)
{
    return k_flash_row_len(a->v2.wphi, 0, a->tile, qt);
}

static inline BK_DEV_HD int64_t k_flash_phi_at(const k_flash_args *a, int64_t b, int qt)
{
    return (int64_t)a->H * (b * k_flash_row_prefix(a->v2.wphi, 0, a->tile, k_flash_tiles(a)) +
                            k_flash_row_prefix(a->v2.wphi, 0, a->tile, qt));
}

/* dgrid's partial row of (b, qt, h): `points` doubles. */
static inline BK_DEV_HD int64_t k_flash_grid_at(const k_flash_args *a, int64_t b, int qt, int h)
{
    return ((b * k_flash_tiles(a) + qt) * a->H + h) * (int64_t)a->terms.points;
}

/* The first column c in [lo, hi) of row i (keys from j0, all j <= i) whose grid cell is <= target (hi when
 * none): cells do not increase with c (u grows with the distance i - j, phi being non-decreasing). */
static inline BK_DEV_HD int k_flash_cell_search(const bk_score_terms *st, int i, int j0, int lo, int hi, int32_t target)
{
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        float t;
        if (bk_score_cell(st, i, j0 + mid, &t) <= target)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* k_flash_dq's start, thread t's share: the rows' running sums of dscale and drscale at 0. */
static inline BK_DEV_HD void k_flash_v2_start(const k_flash_smem *L, float *smem, int tile, int t)
{
    if (!L->racc)
        return;
    double *racc = (double *)(smem + L->racc);
    for (int e = t; e < 2 * tile; e += BK_CTA_THREADS)
        racc[e] = 0.0;
}

/* For dgrid, thread t's rows of the tile pair: the grid points row r adds to, rng[2r] .. rng[2r + 1] (the
 * cell of its nearest key to 1 + the cell of its farthest; empty, points .. -1, without keys). */
static inline BK_DEV_HD void k_flash_v2_cells(const k_flash_args *a, const k_flash_smem *L, float *smem, int i0,
                                              int rows, int j0, int cols, int t)
{
    if (!L->rng)
        return;
    int32_t *rng = (int32_t *)(smem + L->rng);
    for (int r = t; r < a->tile; r += BK_CTA_THREADS) {
        const int i = i0 + r, n = r < rows ? k_flash_causal_cols(i, j0, cols) : 0;
        float tt;
        rng[2 * r] = n > 0 ? bk_score_cell(&a->terms, i, j0 + n - 1, &tt) : a->terms.points;
        rng[2 * r + 1] = n > 0 ? bk_score_cell(&a->terms, i, j0, &tt) + 1 : -1;
    }
}

/* Thread t's share of the ABI 2 partials of one tile pair, from dS (fp32, raw: not times the logit scale)
 * with row stride ld_ds and, for dscale, Sa = dS a with row stride ld_sa (masked pairs hold 0 in both):
 *  - per row r (thread r): dscale += sum_c Sa, drscale += sum_c (dS slope) phi[i - j], keys ascending,
 *    into the running sums in shared memory (k_flash_v2_finish writes them);
 *  - per distance delta (threads in turn, as k_flash_table_partial): dphi's partial row += sum over rows
 *    ascending of (dS slope) rscale[i] at j = i - delta;
 *  - per grid point g of the tile's range (threads in turn): dgrid's partial row += sum over rows
 *    ascending, keys ascending, of dS (1 - t) over the keys of cell g and dS t over those of cell g - 1
 *    (two binary searches per row find them).
 * The slope of cell g is bk_coord_slope; dS slope is du of the header, in float. */
static inline BK_DEV_HD void k_flash_v2_partial(const k_flash_args *a, const k_flash_smem *L, float *smem, int64_t b,
                                                int h, int qt, int i0, int rows, int j0, int cols, const float *dS,
                                                int ld_ds, const float *Sa, int ld_sa, int t)
{
    const k_flash_v2 *v = &a->v2;
    const bk_score_terms *st = &a->terms;
    const float *F = bk_score_head_of(st, b, h, a->H, a->T).F;
    if (L->racc) {
        double *racc = (double *)(smem + L->racc);
        for (int r = t; r < rows; r += BK_CTA_THREADS) {
            const int i = i0 + r, n = k_flash_causal_cols(i, j0, cols);
            double as = racc[2 * r], ar = racc[2 * r + 1];
            for (int c = 0; c < n; c++) {
                if (v->dscale_part)
                    as += (double)Sa[r * ld_sa + c];
                if (v->drscale_part) {
                    float tt;
                    const int32_t g = bk_score_cell(st, i, j0 + c, &tt);
                    const float du = dS[r * ld_ds + c] * bk_coord_slope(F, g, st->points);
                    ar += (double)du * (double)st->phi[i - j0 - c];
                }
            }
            racc[2 * r] = as, racc[2 * r + 1] = ar;
        }
    }
    if (v->dphi_part) {
        const int64_t len = k_flash_phi_len(a, qt);
        const int64_t lo = (int64_t)i0 - (j0 + cols - 1) > 0 ? (int64_t)i0 - (j0 + cols - 1) : 0;
        const int64_t hi = (int64_t)i0 + rows - 1 - j0 < len - 1 ? (int64_t)i0 + rows - 1 - j0 : len - 1;
        double *G = v->dphi_part + k_flash_phi_at(a, b, qt) + h * len;
        for (int64_t delta = lo + t; delta <= hi; delta += BK_CTA_THREADS) {
            double acc = 0.0;
            for (int r = 0; r < rows; r++) {
                const int i = i0 + r;
                const int64_t j = i - delta;
                if (j < j0 || j >= j0 + cols)
                    continue;
                float tt;
                const int32_t g = bk_score_cell(st, i, (int)j, &tt);
                const float du = dS[r * ld_ds + (int)(j - j0)] * bk_coord_slope(F, g, st->points);
                acc += (double)du * (double)st->rscale[i];
            }
            G[delta] += acc;
        }
    }
    if (v->dgrid_part) {
        const int32_t *rng = (const int32_t *)(smem + L->rng);
        int32_t glo = st->points, ghi = -1;
        for (int r = 0; r < rows; r++) {
            glo = rng[2 * r] < glo ? rng[2 * r] : glo;
            ghi = rng[2 * r + 1] > ghi ? rng[2 * r + 1] : ghi;
        }
        double *G = v->dgrid_part + k_flash_grid_at(a, b, qt, h);
        for (int32_t g = glo + t; g <= ghi; g += BK_CTA_THREADS) {
            double acc = 0.0;
            for (int r = 0; r < rows; r++) {
                if (g < rng[2 * r] || g > rng[2 * r + 1])
                    continue;
                const int i = i0 + r, n = k_flash_causal_cols(i, j0, cols);
                const int ca = k_flash_cell_search(st, i, j0, 0, n, g);      /* cells <= g from here */
                const int cb = k_flash_cell_search(st, i, j0, ca, n, g - 2); /* cells <= g - 2 from here */
                for (int c = ca; c < cb; c++) {
                    float tt;
                    const int32_t gc = bk_score_cell(st, i, j0 + c, &tt);
                    const double ds = (double)dS[r * ld_ds + c];
                    acc += gc == g ? ds * (1.0 - (double)tt) : ds * (double)tt;
                }
            }
            G[g] += acc;
        }
    }
}

/* k_flash_dq's end, thread t's share: the rows' sums into the (B, H, T) partials of dscale and drscale. */
static inline BK_DEV_HD void k_flash_v2_finish(const k_flash_args *a, const k_flash_smem *L, const float *smem,
                                               int64_t bh, int i0, int rows, int t)
{
    if (!L->racc)
        return;
    const double *racc = (const double *)(smem + L->racc);
    for (int r = t; r < rows; r += BK_CTA_THREADS) {
        if (a->v2.dscale_part)
            a->v2.dscale_part[bh * a->T + i0 + r] = racc[2 * r];
        if (a->v2.drscale_part)
            a->v2.drscale_part[bh * a->T + i0 + r] = racc[2 * r + 1];
    }
}

/* The reduction of the ABI 2 partials into the gradients (+=, each summed in double, rounded once):
 *   K_FLASH_R_DSCALE  index (h, i) over H*T: dscale[h T + i] += sum over b ascending;
 *   K_FLASH_R_DRSCALE index i over T: drscale[i] += sum over b, then h, ascending;
 *   K_FLASH_R_DPHI    index d over wphi: dphi[d] += sum over (b, qt), then h, ascending (rows too short to
 *                     hold d hold no partial of it);
 *   K_FLASH_R_DGRID   index (h, g) over H*points: dgrid[h points + g] += sum over (b, qt) ascending;
 *   K_FLASH_R_DCPOS   index (b, h, t) over B*H*T: dcpos += bk_content_grad(key sum, query sum) (one of each:
 *                     no sum over b or h). */
enum { K_FLASH_R_DSCALE = 0, K_FLASH_R_DRSCALE = 1, K_FLASH_R_DPHI = 2, K_FLASH_R_DGRID = 3, K_FLASH_R_DCPOS = 4 };

typedef struct k_flash_v2_reduce_args {
    float *out;
    k_flash_args fa;
    int which;
} k_flash_v2_reduce_args;

static inline BK_DEV_HD void k_flash_v2_reduce(int64_t idx, const void *args)
{
    const k_flash_v2_reduce_args *r = (const k_flash_v2_reduce_args *)args;
    const k_flash_args *a = &r->fa;
    const k_flash_v2 *v = &a->v2;
    const int64_t T = a->T, H = a->H;
    const int nq = k_flash_tiles(a);
    double sum = 0.0;
    if (r->which == K_FLASH_R_DSCALE) {
        const int64_t h = idx / T, i = idx % T;
        for (int64_t b = 0; b < a->B; b++)
            sum += v->dscale_part[(b * H + h) * T + i];
    } else if (r->which == K_FLASH_R_DRSCALE) {
        for (int64_t bh = 0; bh < a->B * H; bh++)
            sum += v->drscale_part[bh * T + idx];
    } else if (r->which == K_FLASH_R_DPHI) {
        int64_t rows = 0; /* k_flash_phi_len summed over the (b, qt) before this one */
        for (int64_t b = 0; b < a->B; b++)
            for (int qt = 0; qt < nq; qt++) {
                const int64_t len = k_flash_phi_len(a, qt);
                if (idx < len)
                    for (int64_t h = 0; h < H; h++)
                        sum += v->dphi_part[H * rows + h * len + idx];
                rows += len;
            }
    } else if (r->which == K_FLASH_R_DCPOS) {
        sum = bk_content_grad(v->dcpos_key[idx], v->dcpos_query[idx]);
    } else {
        const int64_t h = idx / a->terms.points, g = idx % a->terms.points;
        for (int64_t b = 0; b < a->B; b++)
            for (int qt = 0; qt < nq; qt++)
                sum += v->dgrid_part[k_flash_grid_at(a, b, qt, (int)h) + g];
    }
    r->out[idx] += (float)sum;
}

static inline BK_DEV_HD void k_flash_dq(int64_t cta, const void *args, float *smem)
{
    const k_flash_args *a = (const k_flash_args *)args;
    const int hd = a->C / a->H, tile = a->tile;
    const k_flash_smem L = k_flash_layout(K_FLASH_DQ, 0, tile, hd, k_flash_v2_needs(&a->v2));
    const int ld = L.ldh, lds = L.ldp;
    const k_flash_block blk = k_flash_block_of(a, cta, 1);
    const int64_t bh = blk.bh, b = blk.b, C3 = 3 * (int64_t)a->C;
    const int h = blk.h, qt = blk.tile, i0 = blk.t0, rows = blk.n;
    float *Qs = smem + L.q, *dOs = smem + L.dout, *dQs = smem + L.acc, *Ks = smem + L.k, *Vs = smem + L.v;
    float *dSs = smem + L.ds, *lse = smem + L.m, *dsum = smem + L.l;
    float *Sa = L.sa ? smem + L.sa : (float *)0;
    const float *lscale = a->terms.lscale ? a->terms.lscale + (int64_t)h * a->T + i0 : (const float *)0;

    BK_CTA_PHASE(t)
    {
        k_flash_load(Qs, &L, a->qkv + k_flash_qkv_at(a, 0, b, h, i0), C3, rows, tile, t);
        k_flash_load(dOs, &L, a->dout + k_flash_bt_at(a, b, h, i0), a->C, rows, tile, t);
        for (int e = t; e < tile * ld; e += BK_CTA_THREADS)
            dQs[e] = 0.0f;
        k_flash_load_stats(lse, dsum, a, bh, i0, rows, t);
        k_flash_v2_start(&L, smem, tile, t);
    }
    int sink_end, first;
    for (int kt = k_flash_key_tiles(qt, tile, a->terms.window, a->terms.sinks, &sink_end, &first); kt <= qt;
         kt = k_flash_kt_next(kt, sink_end, first)) {
        const int j0 = kt * tile, cols = k_flash_rows(a, j0), cls = k_flash_tile_class(a, i0, rows, j0, cols);
        BK_DEV_COUNT_TILE(K_FLASH_DQ);
        BK_CTA_PHASE(t)
        {
            k_flash_load(Ks, &L, a->qkv + k_flash_qkv_at(a, 1, b, h, j0), C3, cols, tile, t);
            k_flash_load(Vs, &L, a->qkv + k_flash_qkv_at(a, 2, b, h, j0), C3, cols, tile, t);
        }
        BK_CTA_PHASE(t)
        {
            k_flash_ds_tile(a, &L, b, h, i0, rows, j0, cols, cls, 0, Qs, dOs, Ks, Vs, lse, dsum, (float *)0, dSs, Sa,
                            t);
            k_flash_v2_cells(a, &L, smem, i0, rows, j0, cols, t);
        }
        BK_CTA_PHASE(t) /* dQ += scale lscale dS K, keys in ascending order; the tile's gradient partials */
        {
            for (int e = t; e < rows * hd; e += BK_CTA_THREADS) {
                const int r = e / hd, d = e % hd;
                float acc = 0.0f;
                for (int c = 0; c < cols; c++)
                    acc += dSs[r * lds + c] * Ks[c * ld + d];
                dQs[r * ld + d] += lscale ? a->scale * (acc * lscale[r]) : a->scale * acc;
            }
            for (int s = 0; s < BK_STREAM_COUNT; s++)
                if (a->G[s])
                    k_flash_table_partial(a, s, b, h, qt, i0, rows, j0, cols, dSs, lds, t);
            k_flash_v2_partial(a, &L, smem, b, h, qt, i0, rows, j0, cols, dSs, lds, Sa, lds, t);
            k_flash_cpos_queries(a, bh, i0, rows, cols, dSs, lds, t);
        }
    }
    BK_CTA_PHASE(t)
    {
        k_flash_add_rows(a->dqkv + k_flash_qkv_at(a, 0, b, h, i0), C3, dQs, ld, 1.0f, rows, hd, t);
        k_flash_v2_finish(a, &L, smem, bh, i0, rows, t);
    }
}

#endif
