/* The fused attention on tensor cores ([run] matmul = "bf16"): the block programs of kernels_flash.h
 * with their matrix products on bf16 tensor cores (gpu/mma.h: inputs rounded to bf16, fp32
 * accumulation), valid C11 and CUDA C++. Same tiles, same walk over them, same saved row statistics,
 * same table-gradient partials and order as the fp32 programs; what differs:
 *
 *  - q, k, v and dO are rounded to bf16 as their tiles are loaded, or read as they are with bf16 storage
 *    (k_flash_args.qkv16: the forward's output is then stored in bf16 too), and P and dS are rounded
 *    before the products they enter; the score tiles, the softmax, the running
 *    sums, the accumulators of O, dQ, dK, dV and the table-gradient partials (from dS in fp32) stay
 *    fp32;
 *  - each product is a warp phase (BK_CTA_WARP_PHASE): the four warps share out its 16 x 16 blocks;
 *    S = Q K^T and dP = dO V^T are written to shared memory as fp32 tiles, and the elementwise work
 *    (bias, online softmax, P and dS) runs as thread phases between them;
 *  - head sizes are padded to a multiple of 16 with zeros; rows of bf16 arrays are padded by 8
 *    elements and fp32 ones by 4, which keeps wmma's alignment rules (gpu/mma.h) and spreads a
 *    column's elements over the banks.
 *
 * The ABI 2 terms (kernels_flash.h's header) the same way too: the same tiles visited, the same mask, the
 * same partials; dS enters the bf16 products times the row's logit scale, dS a (dscale) is written over
 * dp once read. The content position's sums (k_flash_cpos_keys / _queries) read dS in fp32 written over S
 * (in k_flash_tc_dkdv only when they are wanted).
 *
 * Shared memory of each program: k_flash_layout(which, 1, tile, hd, v2) (kernels_flash.h). */
#ifndef BK_GPU_KERNELS_FLASH_TC_H
#define BK_GPU_KERNELS_FLASH_TC_H

#include "gpu/dev.h"
#include "gpu/kernels_flash.h"
#include "gpu/mma.h"

#include <math.h>
#include <stdint.h>

/* dst[r * ldh + d] = bf16(src[r * stride + d]) for the tile's rows r < rows and d < hd, or with bf16
 * storage (src16 set, src NULL) src16's bits; zeros in the rows past the sequence and the padding
 * columns hd .. hdp-1. Thread t's share. */
static inline BK_DEV_HD void k_flash_tc_load(uint16_t *dst, const k_flash_smem *L, const float *src,
                                             const uint16_t *src16, int64_t stride, int hd, int rows, int tile, int t)
{
    for (int e = t; e < tile * L->hdp; e += BK_CTA_THREADS) {
        const int r = e / L->hdp, d = e % L->hdp;
        const int64_t at = (int64_t)r * stride + d;
        dst[r * L->ldh + d] = r >= rows || d >= hd ? (uint16_t)0 : src16 ? src16[at] : bk_bf16_round(src[at]);
    }
}

/* The tile of `rows` rows from t0 of q (part 0), k (1) or v (2) of head h in sequence b, from whichever
 * storage the arguments have. */
static inline BK_DEV_HD void k_flash_tc_load_qkv(uint16_t *dst, const k_flash_args *a, const k_flash_smem *L,
                                                 int part, int64_t b, int h, int t0, int rows, int t)
{
    const int64_t at = k_flash_qkv_at(a, part, b, h, t0);
    const float *src = a->qkv16 ? (const float *)0 : a->qkv + at;
    const uint16_t *src16 = a->qkv16 ? a->qkv16 + at : (const uint16_t *)0;
    k_flash_tc_load(dst, L, src, src16, 3 * (int64_t)a->C, a->C / a->H, rows, a->tile, t);
}

/* The same for dO. */
static inline BK_DEV_HD void k_flash_tc_load_dout(uint16_t *dst, const k_flash_args *a, const k_flash_smem *L,
                                                  int64_t b, int h, int t0, int rows, int t)
{
    const int64_t at = k_flash_bt_at(a, b, h, t0);
    const float *src = a->dout16 ? (const float *)0 : a->dout + at;
    const uint16_t *src16 = a->dout16 ? a->dout16 + at : (const uint16_t *)0;
    k_flash_tc_load(dst, L, src, src16, a->C, a->C / a->H, rows, a->tile, t);
}

/* ---- forward --------------------------------------------------------------------------------------- */

static inline BK_DEV_HD void k_flash_tc_fwd(int64_t cta, const void *args, float *smem)
{
    const k_flash_args *a = (const k_flash_args *)args;
    const int hd = a->C / a->H, tile = a->tile;
    const k_flash_smem L = k_flash_layout(K_FLASH_FWD, 1, tile, hd, 0);
    const k_flash_block blk = k_flash_block_of(a, cta, 1);
    const int64_t bh = blk.bh, b = blk.b;
    const int h = blk.h, qt = blk.tile, i0 = blk.t0, rows = blk.n;
    const bk_score_head hv = k_flash_head(a, b, h);
    uint16_t *Qb = (uint16_t *)(smem + L.q), *Kb = (uint16_t *)(smem + L.k), *Vb = (uint16_t *)(smem + L.v);
    uint16_t *Pb = (uint16_t *)(smem + L.p);
    float *Os = smem + L.acc, *Ss = smem + L.s, *m = smem + L.m, *l = smem + L.l, *alpha = smem + L.alpha;

    BK_CTA_PHASE(t)
    {
        k_flash_tc_load_qkv(Qb, a, &L, 0, b, h, i0, rows, t);
        k_flash_fwd_start(Os, (int64_t)tile * L.ldf, m, l, alpha, tile, t);
    }
    int sink_end, first;
    for (int kt = k_flash_key_tiles(qt, tile, a->terms.window, a->terms.sinks, &sink_end, &first); kt <= qt;
         kt = k_flash_kt_next(kt, sink_end, first)) {
        const int j0 = kt * tile, cols = k_flash_rows(a, j0), cls = k_flash_tile_class(a, i0, rows, j0, cols);
        BK_DEV_COUNT_TILE(K_FLASH_FWD);
        BK_CTA_PHASE(t)
        {
            k_flash_tc_load_qkv(Kb, a, &L, 1, b, h, j0, cols, t);
            k_flash_tc_load_qkv(Vb, a, &L, 2, b, h, j0, cols, t);
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
                    row[c] = c < cols && k_flash_keeps(a, cls, i, j0 + c) ? k_flash_biased(a, &hv, i, j0 + c, row[c])
                                                                           : -INFINITY;
                bk_online_softmax_row(row, tile, &m[r], &l[r], &alpha[r]);
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
        k_flash_fwd_finish(a, bh, h, i0, rows, Os, L.ldf, m, l, t);
    }
}

/* ---- backward -------------------------------------------------------------------------------------- */

/* P and dS of one tile pair of class cls from the fp32 tiles S = Q K^T and dP = dO V^T in shared memory,
 * thread t's share: Pb (when not NULL) gets P in bf16, dSb dS times the row's logit scale in bf16 (what the
 * products take), dSf (when not NULL, may be S itself) dS in fp32 as it is (the additive terms' score
 * gradient), Sa (when not NULL, may be dP itself) dS a, a = scale q.k (dscale's terms); 0 where masked and
 * outside the sequence. Each element is read before it is overwritten, by the one thread that owns it. */
static inline BK_DEV_HD void k_flash_tc_ds(const k_flash_args *a, const k_flash_smem *L, int64_t b, int h, int i0,
                                           int rows, int j0, int cols, int cls, float *S, float *dP, const float *lse,
                                           const float *dsum, uint16_t *Pb, uint16_t *dSb, float *dSf, float *Sa, int t)
{
    const int tile = a->tile;
    const float *lscale = a->terms.lscale;
    const bk_score_head hv = k_flash_head(a, b, h);
    for (int e = t; e < tile * tile; e += BK_CTA_THREADS) {
        const int r = e / tile, c = e % tile, i = i0 + r, j = j0 + c;
        float p = 0.0f, ds = 0.0f, sa = 0.0f, dsl = 0.0f;
        if (r < rows && c < cols && k_flash_keeps(a, cls, i, j)) {
            const float x = a->scale * S[r * L->lds + c];
            p = bk_flash_prob(bk_score_one(&hv, i, j, x), lse[r]);
            ds = p * (dP[r * L->lds + c] - dsum[r]);
            sa = ds * x;
            dsl = lscale ? ds * lscale[(int64_t)h * a->T + i] : ds;
        }
        if (Pb)
            Pb[r * L->ldp + c] = bk_bf16_round(p);
        dSb[r * L->ldp + c] = bk_bf16_round(dsl);
        if (dSf)
            dSf[r * L->lds + c] = ds;
        if (Sa)
            Sa[r * L->lds + c] = sa;
    }
}

static inline BK_DEV_HD void k_flash_tc_dkdv(int64_t cta, const void *args, float *smem)
{
    const k_flash_args *a = (const k_flash_args *)args;
    const int hd = a->C / a->H, tile = a->tile, nq = k_flash_tiles(a);
    const k_flash_smem L = k_flash_layout(K_FLASH_DKDV, 1, tile, hd, 0);
    const k_flash_block blk = k_flash_block_of(a, cta, 0);
    const int64_t bh = blk.bh, b = blk.b, C3 = 3 * (int64_t)a->C;
    const int h = blk.h, kt = blk.tile, j0 = blk.t0, cols = blk.n;
    uint16_t *Qb = (uint16_t *)(smem + L.q), *Kb = (uint16_t *)(smem + L.k), *Vb = (uint16_t *)(smem + L.v);
    uint16_t *dOb = (uint16_t *)(smem + L.dout), *Pb = (uint16_t *)(smem + L.p), *dSb = (uint16_t *)(smem + L.ds);
    float *dKs = smem + L.acc, *dVs = smem + L.acc2, *Ss = smem + L.s, *dPs = smem + L.dp;
    float *lse = smem + L.m, *dsum = smem + L.l;

    BK_CTA_PHASE(t)
    {
        k_flash_tc_load_qkv(Kb, a, &L, 1, b, h, j0, cols, t);
        k_flash_tc_load_qkv(Vb, a, &L, 2, b, h, j0, cols, t);
        for (int e = t; e < tile * L.ldf; e += BK_CTA_THREADS)
            dKs[e] = 0.0f, dVs[e] = 0.0f;
    }
    const int qt_end = k_flash_qt_end(kt, cols, tile, nq, a->terms.window, a->terms.sinks);
    for (int qt = kt; qt < qt_end; qt++) {
        const int i0 = qt * tile, rows = k_flash_rows(a, i0), cls = k_flash_tile_class(a, i0, rows, j0, cols);
        BK_DEV_COUNT_TILE(K_FLASH_DKDV);
        BK_CTA_PHASE(t)
        {
            k_flash_tc_load_qkv(Qb, a, &L, 0, b, h, i0, rows, t);
            k_flash_tc_load_dout(dOb, a, &L, b, h, i0, rows, t);
            k_flash_load_stats(lse, dsum, a, bh, i0, rows, t);
        }
        BK_CTA_WARP_PHASE(w) /* S = Q K^T, dP = dO V^T */
        {
            bk_mma_tile(Ss, L.lds, Qb, L.ldh, 0, Kb, L.ldh, 1, tile, tile, L.hdp, 0, w);
            bk_mma_tile(dPs, L.lds, dOb, L.ldh, 0, Vb, L.ldh, 1, tile, tile, L.hdp, 0, w);
        }
        BK_CTA_PHASE(t) /* P and dS in bf16; dS in fp32 over S for the content position's key sums */
        {
            k_flash_tc_ds(a, &L, b, h, i0, rows, j0, cols, cls, Ss, dPs, lse, dsum, Pb, dSb,
                          a->v2.dcpos_key ? Ss : (float *)0, (float *)0, t);
        }
        BK_CTA_WARP_PHASE(w) /* dV += P^T dO, dK += dS^T Q (P^T, dS^T: the bf16 tiles read column-major) */
        {
            bk_mma_tile(dVs, L.ldf, Pb, L.ldp, 1, dOb, L.ldh, 0, tile, L.hdp, tile, 1, w);
            bk_mma_tile(dKs, L.ldf, dSb, L.ldp, 1, Qb, L.ldh, 0, tile, L.hdp, tile, 1, w);
        }
        if (a->v2.dcpos_key) {
            BK_CTA_PHASE(t)
            {
                k_flash_cpos_keys(a, bh, rows, j0, cols, Ss, L.lds, t);
            }
        }
    }
    BK_CTA_PHASE(t)
    {
        k_flash_add_rows(a->dqkv + k_flash_qkv_at(a, 1, b, h, j0), C3, dKs, L.ldf, a->scale, cols, hd, t);
        k_flash_add_rows(a->dqkv + k_flash_qkv_at(a, 2, b, h, j0), C3, dVs, L.ldf, 1.0f, cols, hd, t);
    }
}

static inline BK_DEV_HD void k_flash_tc_dq(int64_t cta, const void *args, float *smem)
{
    const k_flash_args *a = (const k_flash_args *)args;
    const int hd = a->C / a->H, tile = a->tile;
    const k_flash_smem L = k_flash_layout(K_FLASH_DQ, 1, tile, hd, k_flash_v2_needs(&a->v2));
    const k_flash_block blk = k_flash_block_of(a, cta, 1);
    const int64_t bh = blk.bh, b = blk.b, C3 = 3 * (int64_t)a->C;
    const int h = blk.h, qt = blk.tile, i0 = blk.t0, rows = blk.n;
    uint16_t *Qb = (uint16_t *)(smem + L.q), *Kb = (uint16_t *)(smem + L.k), *Vb = (uint16_t *)(smem + L.v);
    uint16_t *dOb = (uint16_t *)(smem + L.dout), *dSb = (uint16_t *)(smem + L.ds);
    float *dQs = smem + L.acc, *Ss = smem + L.s, *dPs = smem + L.dp, *lse = smem + L.m, *dsum = smem + L.l;

    BK_CTA_PHASE(t)
    {
        k_flash_tc_load_qkv(Qb, a, &L, 0, b, h, i0, rows, t);
        k_flash_tc_load_dout(dOb, a, &L, b, h, i0, rows, t);
        for (int e = t; e < tile * L.ldf; e += BK_CTA_THREADS)
            dQs[e] = 0.0f;
        k_flash_load_stats(lse, dsum, a, bh, i0, rows, t);
        k_flash_v2_start(&L, smem, tile, t);
    }
    int partials = a->v2.dscale_part || a->v2.drscale_part || a->v2.dphi_part || a->v2.dgrid_part || a->v2.dcpos_query;
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        partials |= a->G[s] != 0;
    float *Sa = a->v2.dscale_part ? dPs : (float *)0;
    int sink_end, first;
    for (int kt = k_flash_key_tiles(qt, tile, a->terms.window, a->terms.sinks, &sink_end, &first); kt <= qt;
         kt = k_flash_kt_next(kt, sink_end, first)) {
        const int j0 = kt * tile, cols = k_flash_rows(a, j0), cls = k_flash_tile_class(a, i0, rows, j0, cols);
        BK_DEV_COUNT_TILE(K_FLASH_DQ);
        BK_CTA_PHASE(t)
        {
            k_flash_tc_load_qkv(Kb, a, &L, 1, b, h, j0, cols, t);
            k_flash_tc_load_qkv(Vb, a, &L, 2, b, h, j0, cols, t);
        }
        BK_CTA_WARP_PHASE(w) /* S = Q K^T, dP = dO V^T */
        {
            bk_mma_tile(Ss, L.lds, Qb, L.ldh, 0, Kb, L.ldh, 1, tile, tile, L.hdp, 0, w);
            bk_mma_tile(dPs, L.lds, dOb, L.ldh, 0, Vb, L.ldh, 1, tile, tile, L.hdp, 0, w);
        }
        BK_CTA_PHASE(t) /* dS: bf16 for the product, fp32 (over S) for the gradient partials, dS a over dP */
        {
            k_flash_tc_ds(a, &L, b, h, i0, rows, j0, cols, cls, Ss, dPs, lse, dsum, (uint16_t *)0, dSb, Ss, Sa, t);
            k_flash_v2_cells(a, &L, smem, i0, rows, j0, cols, t);
        }
        BK_CTA_WARP_PHASE(w) /* dQ += dS K */
        {
            bk_mma_tile(dQs, L.ldf, dSb, L.ldp, 0, Kb, L.ldh, 0, tile, L.hdp, tile, 1, w);
        }
        if (partials) {
            BK_CTA_PHASE(t) /* the tile's gradient partials, from dS in fp32 */
            {
                for (int s = 0; s < BK_STREAM_COUNT; s++)
                    if (a->G[s])
                        k_flash_table_partial(a, s, b, h, qt, i0, rows, j0, cols, Ss, L.lds, t);
                k_flash_v2_partial(a, &L, smem, b, h, qt, i0, rows, j0, cols, Ss, L.lds, Sa, L.lds, t);
                k_flash_cpos_queries(a, bh, i0, rows, cols, Ss, L.lds, t);
            }
        }
    }
    BK_CTA_PHASE(t)
    {
        k_flash_add_rows(a->dqkv + k_flash_qkv_at(a, 0, b, h, i0), C3, dQs, L.ldf, a->scale, rows, hd, t);
        k_flash_v2_finish(a, &L, smem, bh, i0, rows, t);
    }
}

#endif
