/* The fused attention's second-generation backward (issue 26 §2), valid C11 and CUDA C++ (gpu/dev.h): one
 * pass over the key tiles with five products per tile pair instead of the first generation's seven, and
 * every gradient still summed by one owner in a fixed order, so that two runs give the same bits and the
 * bits are the first generation's (kernels_flash.h, whose header is the spec of the semantics, the ABI 2
 * terms and the reduction orders). Not the default: ops_flash2.h runs it when bk_dev.flash_gen is 2, for
 * fp32 storage on the fp32 programs, when its shared memory fits the GPU; the first generation otherwise.
 *
 * Structure (FlashAttention-2, Dao 2023, §3.2: the backward's loop over query blocks inside one key
 * block). Block (b, h, key tile kt) keeps K, V and its dK, dV accumulators in shared memory and walks
 * the query tiles qt = kt .. k_flash_qt_end - 1 (the first generation's k_flash_dkdv walk, so the tiles a
 * mask skips are never visited). For each pair it forms
 *     S = Q K^T (1),  dP = dO V^T (2)   -> P = exp(S + bias - lse), dS = P (dP - D), dS a
 *     dV += P^T dO (3),  dK += scale (dS lscale)^T Q (4),  dQ += scale lscale dS K (5)
 * where the first generation's k_flash_dkdv and k_flash_dq each formed S and dP again (7 products).
 * Q, dO and the row statistics of the next query tile are copied (cp.async on sm_80 and later) into a
 * second buffer while the current pair is computed on.
 *
 * Determinism without atomics on the values. dK and dV have one owner (the block); dQ, the table-gradient
 * partial rows and the ABI 2 partials of (b, qt, h) receive one term per key tile, and FlashAttention-2
 * adds those with atomics in whatever order the blocks arrive. Here they are added in the order of the
 * first generation's k_flash_dq (the key tiles of qt's walk, k_flash_key_tiles / k_flash_kt_next,
 * ascending) by handing the turn from block to block: turn[b, h, qt] names the key tile whose turn it is;
 * block kt waits for its turn (one thread spins on it, then a barrier), adds its pair's terms into dQ's
 * fp32 accumulator rows, the partial rows and the ABI 2 partials in global memory, and passes the turn to
 * the next tile of the walk (a fence, then the store). Blocks take their (b, h, kt) from a ticket drawn
 * when they start, in (b, h, kt) order, so a block only ever waits for blocks that started before it
 * (resident, running): no deadlock whatever order the hardware starts blocks in. The wait is a pipeline,
 * not a serialisation: block kt + 1 starts on query tile kt + 1 as soon as block kt has passed it.
 *   Each such term is the first generation's: per element the same chain (a tile's dQ terms summed from
 * 0.0f over the keys ascending, then scale (acc lscale) added to the accumulator; the table partials'
 * per-distance doubles; the rows' running dscale / drscale doubles, kept in global memory between key
 * tiles instead of shared memory), so the accumulator ends with the bits k_flash_dq's shared memory had,
 * and k_flash2_dq_add adds it into dqkv as k_flash_add_rows did. The content position's sums: the key
 * sums by the block itself (k_flash_cpos_keys, query tiles ascending: k_flash_dkdv's chain), the query
 * sums in qt's turn (k_flash_cpos_queries: k_flash_dq's chain).
 *
 * D = dO . O (k_flash2_dsum): a block stages 32 rows of dO and O through shared memory with consecutive
 * threads reading consecutive addresses (the first generation's k_flash_dsum reads one row per thread,
 * rows C floats apart), then one thread per row takes the same bk_dot_lanes: the same bits.
 *
 * Not here (docs/design.md §6): the per-warp register structure of the forward (kernels_flash2.h) for
 * these products, bf16 tensor cores, 16-byte cp.async with swizzling, TMA/wgmma. */
#ifndef BK_GPU_KERNELS_FLASH2_BWD_H
#define BK_GPU_KERNELS_FLASH2_BWD_H

#include "gpu/dev.h"
#include "gpu/kernels_flash.h"
#include "gpu/kernels_flash2.h"
#include "model/softmax_math.h"

#include <stdint.h>
#include <string.h>

/* What the second-generation backward adds to k_flash_args (pointers in backend memory). */
typedef struct k_flash2_bwd_args {
    k_flash_args fa;  /* G, v2's partials (all zeroed: dscale's and drscale's too) and dsum set */
    float *dq;        /* (B, T, C): dQ's accumulator rows, zeroed */
    int32_t *turn;    /* (B, H, query tiles): the key tile whose turn it is (k_flash2_turn_init) */
    uint32_t *ticket; /* one counter, zeroed by k_flash2_turn_init */
} k_flash2_bwd_args;

/* Rows of dO and O a k_flash2_dsum block stages. */
#define K_FLASH2_DSUM_ROWS 32

/* The shared memory of the backward block (floats): the first generation's layout fields for what its
 * helpers read (k_flash_ds_tile: ldh, ldp; k_flash_v2_partial / _cells: racc, rng), plus the second
 * buffers of Q, dO, lse and D and the block's ticket. */
typedef struct k_flash2_bwd_smem {
    k_flash_smem f; /* q, dout, m (lse), l (D): buffer 0; k, v, acc (dK), acc2 (dV), p, ds, sa, racc, rng */
    int64_t qbuf, sbuf; /* what buffer 1 of q / dout and of lse / D lies past buffer 0 */
    int64_t ticket;
} k_flash2_bwd_smem;

static inline BK_DEV_HD k_flash2_bwd_smem k_flash2_bwd_layout(int tile, int hd, int v2)
{
    k_flash2_bwd_smem L;
    memset(&L, 0, sizeof L);
    L.f.hdp = hd, L.f.ldh = hd + 1, L.f.ldf = hd + 1, L.f.lds = tile + 1, L.f.ldp = tile + 1;
    const int64_t head = k_flash_floats((int64_t)tile * L.f.ldh, 4), prob = k_flash_floats((int64_t)tile * L.f.ldp, 4);
    const int64_t row = k_flash_floats(tile, 4);
    int64_t at = 0;
    L.qbuf = 2 * head, L.sbuf = 2 * row;
    L.f.q = at, at += 4 * head; /* buffer 0: Q at q, dO at q + head; buffer 1 qbuf further */
    L.f.dout = L.f.q + head;
    L.f.k = at, at += head;
    L.f.v = at, at += head;
    L.f.acc = at, at += head;  /* dK */
    L.f.acc2 = at, at += head; /* dV */
    L.f.p = at, at += prob;
    L.f.ds = at, at += prob;
    L.f.m = at, at += 4 * row; /* buffer 0: lse at m, D at m + row; buffer 1 sbuf further */
    L.f.l = L.f.m + row;
    if (v2 & K_FLASH_V2_SA)
        L.f.sa = at, at += prob;
    if (v2 & K_FLASH_V2_ROWS)
        L.f.racc = at, at += k_flash_floats(2 * (int64_t)tile, 8);
    if (v2 & K_FLASH_V2_CELLS)
        L.f.rng = at, at += k_flash_floats(2 * (int64_t)tile, 4);
    L.ticket = at, at += 8;
    L.f.total = at;
    return L;
}

/* ---- the turns ------------------------------------------------------------------------------------- */

/* index (b, h, qt) over B*H*query tiles: the first key tile of qt's walk has the turn; index 0 also
 * zeroes the ticket counter. */
static inline BK_DEV_HD void k_flash2_turn_init(int64_t idx, const void *args)
{
    const k_flash2_bwd_args *g = (const k_flash2_bwd_args *)args;
    const k_flash_args *a = &g->fa;
    const int qt = (int)(idx % k_flash_tiles(a));
    int sink_end, first;
    g->turn[idx] = k_flash_key_tiles(qt, a->tile, a->terms.window, a->terms.sinks, &sink_end, &first);
    if (idx == 0)
        *g->ticket = 0;
}

/* ---- D = dO . O -------------------------------------------------------------------------------------- */

/* Block (b, h, chunk of K_FLASH2_DSUM_ROWS rows): the rows staged in shared memory (row stride hd + 1),
 * then thread r's D of row r, as k_flash_dsum computes it. */
static inline BK_DEV_HD void k_flash2_dsum(int64_t cta, const void *args, float *smem)
{
    const k_flash_args *a = (const k_flash_args *)args;
    const int hd = a->C / a->H, ld = hd + 1, nc = (a->T + K_FLASH2_DSUM_ROWS - 1) / K_FLASH2_DSUM_ROWS;
    const int64_t bh = cta / nc, b = bh / a->H;
    const int h = (int)(bh % a->H), i0 = (int)(cta % nc) * K_FLASH2_DSUM_ROWS;
    const int rows = a->T - i0 < K_FLASH2_DSUM_ROWS ? a->T - i0 : K_FLASH2_DSUM_ROWS;
    float *dOs = smem, *Os = smem + K_FLASH2_DSUM_ROWS * ld;
    const int64_t at = k_flash_bt_at(a, b, h, i0);
    BK_CTA_PHASE(t)
    {
        for (int e = t; e < rows * hd; e += BK_CTA_THREADS) {
            const int r = e / hd, d = e % hd;
            dOs[r * ld + d] = a->dout[at + (int64_t)r * a->C + d];
            Os[r * ld + d] = a->o[at + (int64_t)r * a->C + d];
        }
    }
    BK_CTA_PHASE(t)
    {
        if (t < rows)
            a->dsum[bh * a->T + i0 + t] = (float)bk_dot_lanes(dOs + t * ld, Os + t * ld, hd);
    }
}

/* ---- the block ------------------------------------------------------------------------------------- */

/* Issue the copies of query tile qt's Q and dO rows (cp.async where there is one) and its lse and D into
 * buffer `buf`, thread t's share. */
static inline BK_DEV_HD void k_flash2_bwd_load_q(const k_flash_args *a, const k_flash2_bwd_smem *L, float *smem,
                                                 int64_t bh, int64_t b, int h, int qt, int buf, int t)
{
    const int hd = a->C / a->H, i0 = qt * a->tile, rows = k_flash_rows(a, i0);
    float *Qs = smem + L->f.q + buf * L->qbuf, *dOs = smem + L->f.dout + buf * L->qbuf;
    k_flash2_load(Qs, L->f.ldh, a->qkv + k_flash_qkv_at(a, 0, b, h, i0), 3 * (int64_t)a->C, rows, a->tile, hd, t);
    k_flash2_load(dOs, L->f.ldh, a->dout + k_flash_bt_at(a, b, h, i0), a->C, rows, a->tile, hd, t);
    k_flash_load_stats(smem + L->f.m + buf * L->sbuf, smem + L->f.l + buf * L->sbuf, a, bh, i0, rows, t);
    k_flash2_copy_commit();
}

static inline BK_DEV_HD void k_flash2_bwd(int64_t cta, const void *args, float *smem)
{
    const k_flash2_bwd_args *g = (const k_flash2_bwd_args *)args;
    const k_flash_args *a = &g->fa;
    const int hd = a->C / a->H, tile = a->tile, nq = k_flash_tiles(a);
    const k_flash2_bwd_smem L = k_flash2_bwd_layout(tile, hd, k_flash_v2_needs(&a->v2));
    const int ld = L.f.ldh, lds = L.f.ldp;
    int32_t *ticket = (int32_t *)(smem + L.ticket);
    (void)cta; /* the block's work comes from its ticket, not from its index */

    BK_CTA_PHASE(t)
    {
        if (t == 0)
            ticket[0] = (int32_t)bk_dev_ticket(g->ticket);
    }
    const k_flash_block blk = k_flash_block_of(a, ticket[0], 0);
    const int64_t bh = blk.bh, b = blk.b, C3 = 3 * (int64_t)a->C;
    const int h = blk.h, kt = blk.tile, j0 = blk.t0, cols = blk.n;
    const int qt_end = k_flash_qt_end(kt, cols, tile, nq, a->terms.window, a->terms.sinks);
    float *Ks = smem + L.f.k, *Vs = smem + L.f.v, *dKs = smem + L.f.acc, *dVs = smem + L.f.acc2;
    float *Ps = smem + L.f.p, *dSs = smem + L.f.ds, *Sa = L.f.sa ? smem + L.f.sa : (float *)0;
    const float *lscale = a->terms.lscale ? a->terms.lscale + (int64_t)h * a->T : (const float *)0;

    BK_CTA_PHASE(t) /* K, V; dK = dV = 0; the first query tile's copies issued */
    {
        k_flash_load(Ks, &L.f, a->qkv + k_flash_qkv_at(a, 1, b, h, j0), C3, cols, tile, t);
        k_flash_load(Vs, &L.f, a->qkv + k_flash_qkv_at(a, 2, b, h, j0), C3, cols, tile, t);
        for (int e = t; e < tile * ld; e += BK_CTA_THREADS)
            dKs[e] = 0.0f, dVs[e] = 0.0f;
        k_flash2_bwd_load_q(a, &L, smem, bh, b, h, kt, 0, t);
    }
    for (int qt = kt, step = 0; qt < qt_end; qt++, step++) {
        const int i0 = qt * tile, rows = k_flash_rows(a, i0), cls = k_flash_tile_class(a, i0, rows, j0, cols);
        const int buf = step & 1, more = qt + 1 < qt_end;
        const float *Qs = smem + L.f.q + buf * L.qbuf, *dOs = smem + L.f.dout + buf * L.qbuf;
        const float *lse = smem + L.f.m + buf * L.sbuf, *dsum = smem + L.f.l + buf * L.sbuf;
        BK_DEV_COUNT_TILE(K_FLASH_DKDV);
        BK_CTA_PHASE(t) /* the next query tile's copies into the other buffer; this one's completed */
        {
            if (more)
                k_flash2_bwd_load_q(a, &L, smem, bh, b, h, qt + 1, buf ^ 1, t);
            k_flash2_copy_wait(more);
        }
        BK_CTA_PHASE(t) /* products 1 and 2: P, dS (raw) and dS a; the grid cells of the rows */
        {
            k_flash_ds_tile(a, &L.f, b, h, i0, rows, j0, cols, cls, 0, Qs, dOs, Ks, Vs, lse, dsum, Ps, dSs, Sa, t);
            k_flash_v2_cells(a, &L.f, smem, i0, rows, j0, cols, t);
        }
        BK_CTA_PHASE(t) /* products 3 and 4 (k_flash_dkdv's chains); then thread 0 waits for qt's turn */
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
            if (t == 0)
                bk_dev_wait_turn(g->turn + bh * nq + qt, kt);
        }
        BK_CTA_PHASE(t) /* qt's turn: product 5 into dQ's rows, the gradient partials (k_flash_dq's chains) */
        {
            float *dQ = g->dq + k_flash_bt_at(a, b, h, i0);
            for (int e = t; e < rows * hd; e += BK_CTA_THREADS) {
                const int r = e / hd, d = e % hd;
                float acc = 0.0f;
                for (int c = 0; c < cols; c++)
                    acc += dSs[r * lds + c] * Ks[c * ld + d];
                dQ[(int64_t)r * a->C + d] += lscale ? a->scale * (acc * lscale[i0 + r]) : a->scale * acc;
            }
            for (int s = 0; s < BK_STREAM_COUNT; s++)
                if (a->G[s])
                    k_flash_table_partial(a, s, b, h, qt, i0, rows, j0, cols, dSs, lds, t);
            if (L.f.racc) { /* the rows' running sums from where the previous key tile left them */
                double *racc = (double *)(smem + L.f.racc);
                for (int r = t; r < rows; r += BK_CTA_THREADS) {
                    racc[2 * r] = a->v2.dscale_part ? a->v2.dscale_part[bh * a->T + i0 + r] : 0.0;
                    racc[2 * r + 1] = a->v2.drscale_part ? a->v2.drscale_part[bh * a->T + i0 + r] : 0.0;
                }
            }
            k_flash_v2_partial(a, &L.f, smem, b, h, qt, i0, rows, j0, cols, dSs, lds, Sa, lds, t);
            k_flash_v2_finish(a, &L.f, smem, bh, i0, rows, t);
            k_flash_cpos_queries(a, bh, i0, rows, cols, dSs, lds, t);
        }
        BK_CTA_PHASE(t) /* the turn to the next key tile of qt's walk */
        {
            if (t == 0) {
                int sink_end, first;
                k_flash_key_tiles(qt, tile, a->terms.window, a->terms.sinks, &sink_end, &first);
                bk_dev_pass_turn(g->turn + bh * nq + qt, k_flash_kt_next(kt, sink_end, first));
            }
        }
    }
    BK_CTA_PHASE(t)
    {
        k_flash_add_rows(a->dqkv + k_flash_qkv_at(a, 1, b, h, j0), C3, dKs, ld, 1.0f, cols, hd, t);
        k_flash_add_rows(a->dqkv + k_flash_qkv_at(a, 2, b, h, j0), C3, dVs, ld, 1.0f, cols, hd, t);
    }
}

/* index over B*T*C: dQ's accumulator added into dqkv's q part (k_flash_add_rows' operation). */
static inline BK_DEV_HD void k_flash2_dq_add(int64_t idx, const void *args)
{
    const k_flash2_bwd_args *g = (const k_flash2_bwd_args *)args;
    const int64_t C = g->fa.C, bt = idx / C, c = idx % C;
    g->fa.dqkv[bt * 3 * C + c] += 1.0f * g->dq[idx];
}

#endif
