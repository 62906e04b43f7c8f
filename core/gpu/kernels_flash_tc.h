/* The fused attention on tensor cores ([run] matmul = "bf16"): the block programs of kernels_flash.h
 * with their matrix products on bf16 tensor cores (gpu/mma.h: inputs rounded to bf16, fp32
 * accumulation), valid C11 and CUDA C++. Same tiles, same walk over them, same saved row statistics,
 * same table-gradient partials and order as the fp32 programs; what differs:
 *
 *  - q, k, v and dO are rounded to bf16 as their tiles are loaded (the model's activations stay fp32),
 *    and so are P and dS before the products they enter; the score tiles, the softmax, the running
 *    sums, the accumulators of O, dQ, dK, dV and the table-gradient partials (from dS in fp32) stay
 *    fp32;
 *  - each product is a warp phase (BK_CTA_WARP_PHASE): the four warps share out its 16 x 16 blocks;
 *    S = Q K^T and dP = dO V^T are written to shared memory as fp32 tiles, and the elementwise work
 *    (bias, online softmax, P and dS) runs as thread phases between them;
 *  - head sizes are padded to a multiple of 16 with zeros; rows of bf16 arrays are padded by 8
 *    elements and fp32 ones by 4, which keeps wmma's alignment rules (gpu/mma.h) and spreads a
 *    column's elements over the banks.
 *
 * Shared memory of each program (k_flash_tc_layout), in floats, each array starting on 32 bytes. */
#ifndef BK_GPU_KERNELS_FLASH_TC_H
#define BK_GPU_KERNELS_FLASH_TC_H

#include "gpu/dev.h"
#include "gpu/kernels_flash.h"
#include "gpu/mma.h"

#include <math.h>
#include <stdint.h>

enum { K_FLASH_FWD = 0, K_FLASH_DKDV = 1, K_FLASH_DQ = 2 };

/* Offsets (in floats) of a program's arrays in its shared memory; 0 for arrays it does not use. */
typedef struct k_flash_tc_smem {
    int hdp, ldh, ldf, lds, ldp; /* padded head size; row strides of bf16 head rows, fp32 head rows,
                                    fp32 score tiles, bf16 score tiles */
    int64_t q, k, v, dout, acc, acc2, s, dp, p, ds, m, l, alpha, total;
} k_flash_tc_smem;

/* floats that hold n bf16 values, or n floats, rounded up to 32 bytes */
static inline BK_DEV_HD int64_t k_flash_tc_bf16s(int64_t n)
{
    return ((n + 1) / 2 + 7) / 8 * 8;
}

static inline BK_DEV_HD int64_t k_flash_tc_floats(int64_t n)
{
    return (n + 7) / 8 * 8;
}

static inline BK_DEV_HD k_flash_tc_smem k_flash_tc_layout(int which, int tile, int hd)
{
    k_flash_tc_smem L;
    memset(&L, 0, sizeof L);
    L.hdp = (hd + 15) / 16 * 16;
    L.ldh = L.hdp + 8, L.ldf = L.hdp + 4, L.lds = tile + 4, L.ldp = tile + 8;
    const int64_t head_h = k_flash_tc_bf16s((int64_t)tile * L.ldh), head_f = k_flash_tc_floats((int64_t)tile * L.ldf);
    const int64_t score_f = k_flash_tc_floats((int64_t)tile * L.lds), score_h = k_flash_tc_bf16s((int64_t)tile * L.ldp);
    const int64_t row = k_flash_tc_floats(tile);
    int64_t at = 0;
    L.q = at, at += head_h;
    L.k = at, at += head_h;
    L.v = at, at += head_h;
    if (which != K_FLASH_FWD)
        L.dout = at, at += head_h;
    L.acc = at, at += head_f; /* O, dQ or dK */
    if (which == K_FLASH_DKDV)
        L.acc2 = at, at += head_f; /* dV */
    L.s = at, at += score_f;
    if (which != K_FLASH_FWD)
        L.dp = at, at += score_f;
    if (which != K_FLASH_DQ)
        L.p = at, at += score_h;
    if (which != K_FLASH_FWD)
        L.ds = at, at += score_h;
    L.m = at, at += row; /* m, or lse in backward */
    L.l = at, at += row; /* l, or D in backward */
    if (which == K_FLASH_FWD)
        L.alpha = at, at += row;
    L.total = at;
    return L;
}

/* dst[r * ldh + d] = bf16(src[r * stride + d]) for the tile's rows r < rows and d < hd; zeros in the
 * rows past the sequence and the padding columns hd .. hdp-1. Thread t's share. */
static inline BK_DEV_HD void k_flash_tc_load(uint16_t *dst, const k_flash_tc_smem *L, const float *src,
                                             int64_t stride, int hd, int rows, int tile, int t)
{
    for (int e = t; e < tile * L->hdp; e += BK_CTA_THREADS) {
        const int r = e / L->hdp, d = e % L->hdp;
        dst[r * L->ldh + d] = r < rows && d < hd ? bk_bf16_round(src[(int64_t)r * stride + d]) : (uint16_t)0;
    }
}

/* Row t0 of part `part` (0 q, 1 k, 2 v) of head h of batch row b in qkv, and of the same head in a
 * (B, T, C) tensor. */
static inline BK_DEV_HD const float *k_flash_qkv_row(const k_flash_args *a, int part, int64_t b, int h, int t0)
{
    return a->qkv + (b * a->T + t0) * 3 * (int64_t)a->C + (int64_t)part * a->C + (int64_t)h * (a->C / a->H);
}

static inline BK_DEV_HD const float *k_flash_bt_row(const k_flash_args *a, const float *x, int64_t b, int h, int t0)
{
    return x + (b * a->T + t0) * (int64_t)a->C + (int64_t)h * (a->C / a->H);
}

/* ---- forward --------------------------------------------------------------------------------------- */

static inline BK_DEV_HD void k_flash_tc_fwd(int64_t cta, const void *args, float *smem)
{
    const k_flash_args *a = (const k_flash_args *)args;
    const int hd = a->C / a->H, tile = a->tile, T = a->T;
    const k_flash_tc_smem L = k_flash_tc_layout(K_FLASH_FWD, tile, hd);
    const k_flash_block blk = k_flash_block_of(a, cta, 1);
    const int64_t bh = blk.bh, b = blk.b, C3 = 3 * (int64_t)a->C;
    const int h = blk.h, qt = blk.tile, i0 = blk.t0, rows = blk.n;
    uint16_t *Qb = (uint16_t *)(smem + L.q), *Kb = (uint16_t *)(smem + L.k), *Vb = (uint16_t *)(smem + L.v);
    uint16_t *Pb = (uint16_t *)(smem + L.p);
    float *Os = smem + L.acc, *Ss = smem + L.s, *m = smem + L.m, *l = smem + L.l, *alpha = smem + L.alpha;

    BK_CTA_PHASE(t)
    {
        k_flash_tc_load(Qb, &L, k_flash_qkv_row(a, 0, b, h, i0), C3, hd, rows, tile, t);
        k_flash_fwd_start(Os, (int64_t)tile * L.ldf, m, l, alpha, tile, t);
    }
    for (int kt = 0; kt <= qt; kt++) {
        const int j0 = kt * tile, cols = k_flash_rows(a, j0);
        BK_CTA_PHASE(t)
        {
            k_flash_tc_load(Kb, &L, k_flash_qkv_row(a, 1, b, h, j0), C3, hd, cols, tile, t);
            k_flash_tc_load(Vb, &L, k_flash_qkv_row(a, 2, b, h, j0), C3, hd, cols, tile, t);
        }
        BK_CTA_WARP_PHASE(w) /* S = Q K^T */
        {
            bk_mma_tile(Ss, L.lds, Qb, L.ldh, 0, Kb, L.ldh, 1, tile, tile, L.hdp, 0, w);
        }
        BK_CTA_PHASE(t) /* per row: bias and mask, the online softmax step, P in bf16, O rescaled */
        {
            for (int r = t; r < tile; r += BK_CTA_THREADS) {
                float *row = Ss + r * L.lds;
                uint16_t *prow = Pb + r * L.ldp;
                if (r >= rows) {
                    for (int c = 0; c < tile; c++)
                        prow[c] = 0;
                    continue;
                }
                const int i = i0 + r;
                for (int c = 0; c < tile; c++)
                    row[c] = c < cols && j0 + c <= i ? k_flash_biased(a, b, h, i, j0 + c, row[c]) : -INFINITY;
                k_flash_online_row(row, tile, &m[r], &l[r], &alpha[r]);
                for (int c = 0; c < tile; c++)
                    prow[c] = bk_bf16_round(row[c]);
                for (int d = 0; d < L.hdp; d++)
                    Os[r * L.ldf + d] *= alpha[r];
            }
        }
        BK_CTA_WARP_PHASE(w) /* O += P V */
        {
            bk_mma_tile(Os, L.ldf, Pb, L.ldp, 0, Vb, L.ldh, 0, tile, L.hdp, tile, 1, w);
        }
    }
    BK_CTA_PHASE(t)
    {
        for (int e = t; e < rows * hd; e += BK_CTA_THREADS) {
            const int r = e / hd, d = e % hd;
            a->out[(b * T + i0 + r) * (int64_t)a->C + (int64_t)h * hd + d] = Os[r * L.ldf + d] * (1.0f / l[r]);
        }
        if (a->lse)
            for (int r = t; r < rows; r += BK_CTA_THREADS)
                a->lse[bh * T + i0 + r] = m[r] + logf(l[r]);
    }
}

/* ---- backward -------------------------------------------------------------------------------------- */

/* P and dS of one tile pair from the fp32 tiles S = Q K^T and dP = dO V^T in shared memory, thread t's
 * share: Pb (when not NULL) and dSb get them in bf16, dSf (when not NULL, may be S itself) dS in fp32;
 * 0 past the diagonal and outside the sequence. */
static inline BK_DEV_HD void k_flash_tc_ds(const k_flash_args *a, const k_flash_tc_smem *L, int64_t b, int h, int i0,
                                           int rows, int j0, int cols, float *S, const float *dP, const float *lse,
                                           const float *dsum, uint16_t *Pb, uint16_t *dSb, float *dSf, int t)
{
    const int tile = a->tile;
    for (int e = t; e < tile * tile; e += BK_CTA_THREADS) {
        const int r = e / tile, c = e % tile, i = i0 + r, j = j0 + c;
        float p = 0.0f, ds = 0.0f;
        if (r < rows && c < cols && j <= i) {
            p = k_flash_prob(k_flash_biased(a, b, h, i, j, S[r * L->lds + c]), lse[r]);
            ds = p * (dP[r * L->lds + c] - dsum[r]);
        }
        if (Pb)
            Pb[r * L->ldp + c] = bk_bf16_round(p);
        dSb[r * L->ldp + c] = bk_bf16_round(ds);
        if (dSf)
            dSf[r * L->lds + c] = ds;
    }
}

static inline BK_DEV_HD void k_flash_tc_dkdv(int64_t cta, const void *args, float *smem)
{
    const k_flash_args *a = (const k_flash_args *)args;
    const int hd = a->C / a->H, tile = a->tile, T = a->T, nq = k_flash_tiles(a);
    const k_flash_tc_smem L = k_flash_tc_layout(K_FLASH_DKDV, tile, hd);
    const k_flash_block blk = k_flash_block_of(a, cta, 0);
    const int64_t bh = blk.bh, b = blk.b, C3 = 3 * (int64_t)a->C;
    const int h = blk.h, kt = blk.tile, j0 = blk.t0, cols = blk.n;
    uint16_t *Qb = (uint16_t *)(smem + L.q), *Kb = (uint16_t *)(smem + L.k), *Vb = (uint16_t *)(smem + L.v);
    uint16_t *dOb = (uint16_t *)(smem + L.dout), *Pb = (uint16_t *)(smem + L.p), *dSb = (uint16_t *)(smem + L.ds);
    float *dKs = smem + L.acc, *dVs = smem + L.acc2, *Ss = smem + L.s, *dPs = smem + L.dp;
    float *lse = smem + L.m, *dsum = smem + L.l;

    BK_CTA_PHASE(t)
    {
        k_flash_tc_load(Kb, &L, k_flash_qkv_row(a, 1, b, h, j0), C3, hd, cols, tile, t);
        k_flash_tc_load(Vb, &L, k_flash_qkv_row(a, 2, b, h, j0), C3, hd, cols, tile, t);
        for (int e = t; e < tile * L.ldf; e += BK_CTA_THREADS)
            dKs[e] = 0.0f, dVs[e] = 0.0f;
    }
    for (int qt = kt; qt < nq; qt++) {
        const int i0 = qt * tile, rows = k_flash_rows(a, i0);
        BK_CTA_PHASE(t)
        {
            k_flash_tc_load(Qb, &L, k_flash_qkv_row(a, 0, b, h, i0), C3, hd, rows, tile, t);
            k_flash_tc_load(dOb, &L, k_flash_bt_row(a, a->dout, b, h, i0), a->C, hd, rows, tile, t);
            k_flash_load_stats(lse, dsum, a, bh, i0, rows, t);
        }
        BK_CTA_WARP_PHASE(w) /* S = Q K^T, dP = dO V^T */
        {
            bk_mma_tile(Ss, L.lds, Qb, L.ldh, 0, Kb, L.ldh, 1, tile, tile, L.hdp, 0, w);
            bk_mma_tile(dPs, L.lds, dOb, L.ldh, 0, Vb, L.ldh, 1, tile, tile, L.hdp, 0, w);
        }
        BK_CTA_PHASE(t)
        {
            k_flash_tc_ds(a, &L, b, h, i0, rows, j0, cols, Ss, dPs, lse, dsum, Pb, dSb, (float *)0, t);
        }
        BK_CTA_WARP_PHASE(w) /* dV += P^T dO, dK += dS^T Q (P^T, dS^T: the bf16 tiles read column-major) */
        {
            bk_mma_tile(dVs, L.ldf, Pb, L.ldp, 1, dOb, L.ldh, 0, tile, L.hdp, tile, 1, w);
            bk_mma_tile(dKs, L.ldf, dSb, L.ldp, 1, Qb, L.ldh, 0, tile, L.hdp, tile, 1, w);
        }
    }
    BK_CTA_PHASE(t)
    {
        for (int e = t; e < cols * hd; e += BK_CTA_THREADS) {
            const int c = e / hd, d = e % hd;
            float *row = a->dqkv + (b * T + j0 + c) * C3 + (int64_t)h * hd + d;
            row[a->C] += a->scale * dKs[c * L.ldf + d];
            row[2 * (int64_t)a->C] += dVs[c * L.ldf + d];
        }
    }
}

static inline BK_DEV_HD void k_flash_tc_dq(int64_t cta, const void *args, float *smem)
{
    const k_flash_args *a = (const k_flash_args *)args;
    const int hd = a->C / a->H, tile = a->tile, T = a->T;
    const k_flash_tc_smem L = k_flash_tc_layout(K_FLASH_DQ, tile, hd);
    const k_flash_block blk = k_flash_block_of(a, cta, 1);
    const int64_t bh = blk.bh, b = blk.b, C3 = 3 * (int64_t)a->C;
    const int h = blk.h, qt = blk.tile, i0 = blk.t0, rows = blk.n;
    uint16_t *Qb = (uint16_t *)(smem + L.q), *Kb = (uint16_t *)(smem + L.k), *Vb = (uint16_t *)(smem + L.v);
    uint16_t *dOb = (uint16_t *)(smem + L.dout), *dSb = (uint16_t *)(smem + L.ds);
    float *dQs = smem + L.acc, *Ss = smem + L.s, *dPs = smem + L.dp, *lse = smem + L.m, *dsum = smem + L.l;

    BK_CTA_PHASE(t)
    {
        k_flash_tc_load(Qb, &L, k_flash_qkv_row(a, 0, b, h, i0), C3, hd, rows, tile, t);
        k_flash_tc_load(dOb, &L, k_flash_bt_row(a, a->dout, b, h, i0), a->C, hd, rows, tile, t);
        for (int e = t; e < tile * L.ldf; e += BK_CTA_THREADS)
            dQs[e] = 0.0f;
        k_flash_load_stats(lse, dsum, a, bh, i0, rows, t);
    }
    for (int kt = 0; kt <= qt; kt++) {
        const int j0 = kt * tile, cols = k_flash_rows(a, j0);
        BK_CTA_PHASE(t)
        {
            k_flash_tc_load(Kb, &L, k_flash_qkv_row(a, 1, b, h, j0), C3, hd, cols, tile, t);
            k_flash_tc_load(Vb, &L, k_flash_qkv_row(a, 2, b, h, j0), C3, hd, cols, tile, t);
        }
        BK_CTA_WARP_PHASE(w) /* S = Q K^T, dP = dO V^T */
        {
            bk_mma_tile(Ss, L.lds, Qb, L.ldh, 0, Kb, L.ldh, 1, tile, tile, L.hdp, 0, w);
            bk_mma_tile(dPs, L.lds, dOb, L.ldh, 0, Vb, L.ldh, 1, tile, tile, L.hdp, 0, w);
        }
        BK_CTA_PHASE(t) /* dS: bf16 for the product, fp32 (over S) for the table gradient */
        {
            k_flash_tc_ds(a, &L, b, h, i0, rows, j0, cols, Ss, dPs, lse, dsum, (uint16_t *)0, dSb, Ss, t);
        }
        BK_CTA_WARP_PHASE(w) /* dQ += dS K */
        {
            bk_mma_tile(dQs, L.ldf, dSb, L.ldp, 0, Kb, L.ldh, 0, tile, L.hdp, tile, 1, w);
        }
        BK_CTA_PHASE(t) /* the tile's table-gradient partials, from dS in fp32 */
        {
            for (int s = 0; s < BK_STREAM_COUNT; s++)
                if (a->G[s])
                    k_flash_table_partial(a, s, b, h, qt, i0, rows, j0, cols, Ss, L.lds, t);
        }
    }
    BK_CTA_PHASE(t)
    {
        for (int e = t; e < rows * hd; e += BK_CTA_THREADS) {
            const int r = e / hd, d = e % hd;
            a->dqkv[(b * T + i0 + r) * C3 + (int64_t)h * hd + d] += a->scale * dQs[r * L.ldf + d];
        }
    }
}

#endif
