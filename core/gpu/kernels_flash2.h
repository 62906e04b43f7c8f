/* The fused attention's second generation, forward only (issue 26 §2): the FlashAttention-2 structure for
 * the fp32 programs, valid C11 and CUDA C++ (gpu/dev.h), with the semantics, the ABI 1 and ABI 2 terms and
 * the reduction orders of the first generation (kernels_flash.h, whose header is the spec). It is not the
 * default: ops_flash2.h runs it only when bk_dev.flash_gen is 2, for the head sizes and key tiles it is
 * built for, and the first generation otherwise.
 *
 * Structure (FlashAttention-2, Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and
 * Work Partitioning", §3.1-3.2: the forward's loop over key blocks inside one query block, warps splitting
 * the queries rather than the keys):
 *  - a block owns BR = 4 warps x 16 MF query rows (MF = 2 up to head size 64, 1 at 128) and warp w owns
 *    its 16 MF rows alone: the running max m, sum l and the output accumulator O of a row live in the
 *    registers of the four lanes that hold the row (the per-lane arrays k_flash2_lane), never in shared
 *    memory; softmax needs no barrier of the block, only the lanes' shuffles (in C: reads of the other
 *    lanes' arrays, each stage into a fresh array so that no lane reads what another writes in it);
 *  - register layout: PTX's mma.m16n8 accumulator layout (the one mma.sync / wgmma give their C
 *    fragments), lane = 4 g + q: c[0], c[1] at row g, columns 2q, 2q + 1 of each 8-column block, c[2],
 *    c[3] at row g + 8. The score tile S (16 MF x BC) and O (16 MF x head size) are both held this way;
 *  - K and V tiles double-buffered in shared memory: the copy of tile n + 1 is issued (cp.async on sm_80
 *    and later, 4-byte copies; plain loads before sm_80 and in C) before tile n is computed on, so the
 *    load overlaps the arithmetic; the values are the same either way;
 *  - Q stays in shared memory: an fp32 score is a dot product on the CUDA cores that every lane needs
 *    whole rows of q for (tensor-core fragments of Q in registers are the bf16 program's business).
 *
 * Bits. The forward of a row is the same sequence of float operations as in the first generation, so
 * the two give the same bits (tests/test_backend_flash2.c), as they must for "the benchmark chooses":
 *  - key tiles of the first generation's width BC (the plan's tile, ops_flash.h) in ascending order,
 *    exactly those the first generation's query tile of the row walks (k_flash_key_tiles /
 *    k_flash_kt_next): the online softmax's rescaling points are where they were. (FlashAttention-2 walks
 *    the key blocks from the diagonal down; that would change every rescaling, hence every bit.) The
 *    query block BR may be larger than BC: a warp's 16 MF rows lie in one first-generation query tile
 *    (16 MF divides BC), and each warp steps only over the tiles of that tile's sequence;
 *  - a score is k_flash_biased(scale, the dot product over d ascending): the same per-element helpers
 *    (bias tables, positions, logit scale, coordinate table, mask predicate), the dot product's chain of
 *    d ascending kept per element (the loop order d-outer only changes which element is advanced next);
 *  - the row max and the sum of exps are bk_max_lanes / bk_sum_lanes of the tile row: their lane l holds
 *    the columns c with c % 8 = l, which in the m16n8 layout are exactly element e of lane q with l =
 *    2 q + e. So lane q accumulates sum-lanes 2q and 2q + 1 in the order bk_sum_lanes does, adds its two,
 *    and two xor-shuffles (1, then 2) add the quad in BK_LANES_TOTAL's tree ((l0 + l1) + (l2 + l3)) +
 *    ((l4 + l5) + (l6 + l7)), operands kept in that order; the max likewise, with bk_lane_max's "the
 *    earlier lane wins a tie" kept by the operand order, which makes that tree equal to bk_max_of_lanes'
 *    chain (the leftmost largest lane, whatever the grouping);
 *  - O = alpha O, then + p_c v_c for the keys c ascending, per element, as the first generation's PV;
 *    p goes through a per-warp shared-memory tile (the quad's lanes each hold a quarter of the row);
 *  - out = O (1 / l), lse = m + log l.
 *
 * Not here (next steps; docs/design.md §6): the backward (dK/dV and dQ with 5 GEMMs, the deterministic
 * bias-gradient partials), the bf16 tensor-core forward (mma fragments of Q, P in registers), 16-byte
 * cp.async with a swizzled layout, TMA/wgmma on sm_90, and the stores of O staged through shared memory. */
#ifndef BK_GPU_KERNELS_FLASH2_H
#define BK_GPU_KERNELS_FLASH2_H

#include "gpu/dev.h"
#include "gpu/kernels_flash.h"
#include "model/bias_math.h"
#include "model/softmax_math.h"

#include <math.h>
#include <stdint.h>

/* The largest fragment counts any instantiation uses (the per-lane arrays are sized by them; on the
 * GPU an instantiation's constant indices keep only what it uses, in registers). */
#define K_FLASH2_MF_MAX 2 /* m16 fragments (16 rows each) per warp */
#define K_FLASH2_NB_MAX 8 /* 8-column blocks of a key tile: BC <= 64 */
#define K_FLASH2_OB_MAX 16 /* 8-column blocks of the head: head size <= 128 */

/* One lane's registers. */
typedef struct k_flash2_lane {
    float s[K_FLASH2_MF_MAX * K_FLASH2_NB_MAX * 4]; /* scores, then their exps: [(mf NB + nb) 4 + 2 half + e] */
    float o[K_FLASH2_MF_MAX * K_FLASH2_OB_MAX * 4]; /* the output accumulator: [(mf OB + ob) 4 + 2 half + e] */
    float m[2 * K_FLASH2_MF_MAX], l[2 * K_FLASH2_MF_MAX], alpha[2 * K_FLASH2_MF_MAX]; /* per row [2 mf + half] */
    float x[2 * K_FLASH2_MF_MAX], y[2 * K_FLASH2_MF_MAX]; /* a quad reduction's stages */
    float mx[2 * K_FLASH2_MF_MAX];                        /* the row's new max in a step */
} k_flash2_lane;

/* A warp's lanes. On the GPU each thread runs the body once with its own lane and keeps one
 * k_flash2_lane (K_FLASH2_LANES = 1, K_FLASH2_ME = 0); in C the body runs for the 32 lanes in turn
 * (in the order bk_emulated_thread_order says, so that a lane reading what another writes in the same
 * loop shows) over an array of the block's 128. K_FLASH2_PEER reads `member` of lane lane ^ mask: a
 * shuffle on the GPU, every lane of the warp taking part. */
#if defined(__CUDA_ARCH__)
#define K_FLASH2_LANES 1
#define K_FLASH2_ME(w, lane) (0 * (w) + 0 * (lane)) /* one lane a thread (w, lane read: no unused warnings) */
#define K_FLASH2_FOR_LANES(lane) for (int lane = (int)(threadIdx.x & 31u), k_flash2_once_ = 1; k_flash2_once_; k_flash2_once_ = 0)
#define K_FLASH2_SYNCWARP() __syncwarp()
#define K_FLASH2_PEER(R, w, lane, mask, member) __shfl_xor_sync(0xffffffffu, (R)[0].member, (mask))
#define K_FLASH2_UNROLL _Pragma("unroll")
#else
#define K_FLASH2_LANES BK_CTA_THREADS
#define K_FLASH2_ME(w, lane) ((w) * 32 + (lane))
#define K_FLASH2_FOR_LANES(lane)                                                                               \
    for (int k_flash2_i_ = 0; k_flash2_i_ < 32; k_flash2_i_++)                                                 \
        for (int lane = bk_emulated_thread_order ? 31 - k_flash2_i_ : k_flash2_i_, k_flash2_once_ = 1; k_flash2_once_; \
             k_flash2_once_ = 0)
#define K_FLASH2_SYNCWARP() ((void)0)
#define K_FLASH2_PEER(R, w, lane, mask, member) ((R)[K_FLASH2_ME((w), (lane) ^ (mask))].member)
#define K_FLASH2_UNROLL
#endif

/* ---- the double-buffered copies ------------------------------------------------------------------ */

/* *dst (shared memory) = *src (global): cp.async on sm_80 and later (completed by k_flash2_copy_wait),
 * a plain copy before sm_80 and in C. */
static inline BK_DEV_HD void k_flash2_copy(float *dst, const float *src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned at = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(at), "l"(src) : "memory");
#else
    *dst = *src;
#endif
}

/* The copies issued since the last commit form one group. */
static inline BK_DEV_HD void k_flash2_copy_commit(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/* Wait until at most `pending` (0 or 1) groups of this thread are in flight. */
static inline BK_DEV_HD void k_flash2_copy_wait(int pending)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (pending)
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    else
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#else
    (void)pending;
#endif
}

/* Thread t's share of loading `rows` rows of a tile of `tile` rows (hd floats each, from src with row
 * stride `stride`) into dst with row stride ld: the rows past the sequence are zeros (plain stores). */
static inline BK_DEV_HD void k_flash2_load(float *dst, int ld, const float *src, int64_t stride, int rows, int tile,
                                           int hd, int t)
{
    for (int e = t; e < tile * hd; e += BK_CTA_THREADS) {
        const int r = e / hd, d = e % hd;
        if (r < rows)
            k_flash2_copy(dst + r * ld + d, src + (int64_t)r * stride + d);
        else
            dst[r * ld + d] = 0.0f;
    }
}

/* ---- shared memory, blocks, the key tiles -------------------------------------------------------- */

/* The shared memory of one instantiation (floats): Q (BR rows), two K and two V buffers (BC rows), all
 * with the odd row stride hd + 1 (a warp's 8 rows g, or 4 columns q, hit distinct banks), and per warp
 * a tile of p, 16 MF rows of BC + 1. */
typedef struct k_flash2_smem {
    int ld, ldp, br;
    int64_t q, k, v, p, total; /* k and v: buffer 0; buffer 1 follows at + kv */
    int64_t kv;
} k_flash2_smem;

static inline BK_DEV_HD k_flash2_smem k_flash2_layout(int hd, int bc, int mf)
{
    k_flash2_smem L;
    L.ld = hd + 1, L.ldp = bc + 1, L.br = BK_CTA_WARPS * 16 * mf;
    L.kv = k_flash_floats((int64_t)bc * L.ld, 4);
    int64_t at = 0;
    L.q = at, at += k_flash_floats((int64_t)L.br * L.ld, 4);
    L.k = at, at += 2 * L.kv;
    L.v = at, at += 2 * L.kv;
    L.p = at, at += BK_CTA_WARPS * k_flash_floats((int64_t)16 * mf * L.ldp, 4);
    L.total = at;
    return L;
}

/* The key tiles a warp walks: those of the first generation's query tile qt1 (of bc rows) that holds
 * the warp's rows, in ascending order (k_flash_key_tiles): kt < sink_end, or first <= kt <= qt1. */
typedef struct k_flash2_seq {
    int sink_end, first, last; /* last < 0: the warp has no rows */
} k_flash2_seq;

/* The first tile of the sequence after kt (kt = -1: its first), or INT32_MAX past its end. */
static inline BK_DEV_HD int k_flash2_seq_after(const k_flash2_seq *s, int kt)
{
    int c = kt + 1;
    if (c >= s->sink_end && c < s->first)
        c = s->first;
    return c <= s->last ? c : INT32_MAX;
}

static inline BK_DEV_HD int k_flash2_seq_has(const k_flash2_seq *s, int kt)
{
    return kt <= s->last && (kt < s->sink_end || kt >= s->first);
}

/* ---- the program ----------------------------------------------------------------------------------- */

/* Block `cta`: (b, h) and query block qb, the last (longest) first; HD the head size, BC the key tile
 * (the first generation's tile), MF the m16 fragments per warp. Constants in every instantiation. */
static inline BK_DEV_HD void k_flash2_fwd_impl(int64_t cta, const void *args, float *smem, const int HD, const int BC,
                                               const int MF)
{
    const k_flash_args *a = (const k_flash_args *)args;
    const int NB = BC / 8, OB = HD / 8, RW = 16 * MF;
    const k_flash2_smem L = k_flash2_layout(HD, BC, MF);
    const int ld = L.ld, ldp = L.ldp, BR = L.br;
    const int nqb = (a->T + BR - 1) / BR;
    const int64_t bh = cta / nqb, b = bh / a->H, C3 = 3 * (int64_t)a->C;
    const int h = (int)(bh % a->H), qb = nqb - 1 - (int)(cta % nqb), row0 = qb * BR;
    const bk_score_head hv = k_flash_head(a, b, h);
    const int brows = a->T - row0 < BR ? a->T - row0 : BR;
    float *Qs = smem + L.q;

    /* the warps' sequences (uniform over the block) and the block's walk: their union, ascending */
    k_flash2_seq seq[BK_CTA_WARPS];
    int kt = INT32_MAX;
    for (int w = 0; w < BK_CTA_WARPS; w++) {
        const int wr0 = row0 + w * RW;
        if (wr0 >= a->T) {
            seq[w].sink_end = 0, seq[w].first = 0, seq[w].last = -1;
            continue;
        }
        const int qt1 = wr0 / BC;
        k_flash_key_tiles(qt1, BC, a->terms.window, a->terms.sinks, &seq[w].sink_end, &seq[w].first);
        seq[w].last = qt1;
        const int f = k_flash2_seq_after(&seq[w], -1);
        kt = f < kt ? f : kt;
    }

    k_flash2_lane R[K_FLASH2_LANES];
    BK_CTA_PHASE(t) /* Q, and the first key tile into buffer 0 */
    {
        k_flash2_load(Qs, ld, a->qkv + k_flash_qkv_at(a, 0, b, h, row0), C3, brows, BR, HD, t);
        const int cols = k_flash_rows(a, kt * BC);
        k_flash2_load(smem + L.k, ld, a->qkv + k_flash_qkv_at(a, 1, b, h, kt * BC), C3, cols, BC, HD, t);
        k_flash2_load(smem + L.v, ld, a->qkv + k_flash_qkv_at(a, 2, b, h, kt * BC), C3, cols, BC, HD, t);
        k_flash2_copy_commit();
    }
    BK_CTA_WARP_PHASE(w) /* the registers: O = 0, m = -inf, l = 0 */
    {
        K_FLASH2_FOR_LANES(lane)
        {
            k_flash2_lane *r = &R[K_FLASH2_ME(w, lane)];
            K_FLASH2_UNROLL
            for (int k = 0; k < MF * OB * 4; k++)
                r->o[k] = 0.0f;
            K_FLASH2_UNROLL
            for (int k = 0; k < 2 * MF; k++)
                r->m[k] = -INFINITY, r->l[k] = 0.0f, r->alpha[k] = 0.0f;
        }
    }
    for (int step = 0; kt != INT32_MAX; step++) {
        int next = INT32_MAX;
        for (int w = 0; w < BK_CTA_WARPS; w++) {
            const int f = k_flash2_seq_after(&seq[w], kt);
            next = f < next ? f : next;
        }
        const int j0 = kt * BC, cols = k_flash_rows(a, j0);
        const int64_t buf = (int64_t)(step & 1) * L.kv, nbuf = (int64_t)((step + 1) & 1) * L.kv;
        const float *Ks = smem + L.k + buf, *Vs = smem + L.v + buf;
        BK_CTA_PHASE(t) /* the next tile's copies issued into the other buffer; this tile's completed */
        {
            if (next != INT32_MAX) {
                const int ncols = k_flash_rows(a, next * BC);
                k_flash2_load(smem + L.k + nbuf, ld, a->qkv + k_flash_qkv_at(a, 1, b, h, next * BC), C3, ncols, BC,
                              HD, t);
                k_flash2_load(smem + L.v + nbuf, ld, a->qkv + k_flash_qkv_at(a, 2, b, h, next * BC), C3, ncols, BC,
                              HD, t);
                k_flash2_copy_commit();
            }
            k_flash2_copy_wait(next != INT32_MAX);
        }
        BK_CTA_WARP_PHASE(w) /* the warp's step on this tile, if its sequence has it */
        {
            if (!k_flash2_seq_has(&seq[w], kt))
                continue;
            const int wr0 = row0 + w * RW, wrows = a->T - wr0 < RW ? a->T - wr0 : RW;
            const int cls = bk_score_tile(&a->terms, wr0, wr0 + wrows, j0, j0 + cols);
            float *Pw = smem + L.p + w * k_flash_floats((int64_t)RW * ldp, 4);
            K_FLASH2_FOR_LANES(lane) /* S: the lane's elements, each a dot product over d ascending */
            {
                k_flash2_lane *r = &R[K_FLASH2_ME(w, lane)];
                const int g = lane >> 2, q = lane & 3;
                K_FLASH2_UNROLL
                for (int k = 0; k < MF * NB * 4; k++)
                    r->s[k] = 0.0f;
                for (int d = 0; d < HD; d++) {
                    K_FLASH2_UNROLL
                    for (int mf = 0; mf < MF; mf++) {
                        const float q0 = Qs[(w * RW + mf * 16 + g) * ld + d];
                        const float q1 = Qs[(w * RW + mf * 16 + g + 8) * ld + d];
                        K_FLASH2_UNROLL
                        for (int nb = 0; nb < NB; nb++) {
                            const float k0 = Ks[(nb * 8 + 2 * q) * ld + d], k1 = Ks[(nb * 8 + 2 * q + 1) * ld + d];
                            float *s = r->s + (mf * NB + nb) * 4;
                            s[0] += q0 * k0, s[1] += q0 * k1, s[2] += q1 * k0, s[3] += q1 * k1;
                        }
                    }
                }
                /* biased, or -inf: masked, past the diagonal, outside the sequence (as k_flash_fwd) */
                K_FLASH2_UNROLL
                for (int mf = 0; mf < MF; mf++)
                    K_FLASH2_UNROLL
                    for (int nb = 0; nb < NB; nb++)
                        K_FLASH2_UNROLL
                        for (int k = 0; k < 4; k++) {
                            const int rr = mf * 16 + g + 8 * (k >> 1), c = nb * 8 + 2 * q + (k & 1);
                            const int i = wr0 + rr, j = j0 + c;
                            float *s = &r->s[(mf * NB + nb) * 4 + k];
                            *s = rr < wrows && c < cols && k_flash_keeps(a, cls, i, j)
                                     ? k_flash_biased(a, &hv, i, j, *s)
                                     : -INFINITY;
                        }
            }
            K_FLASH2_FOR_LANES(lane) /* row max: lanes 2q, 2q + 1 (bk_max_lanes), then their pair */
            {
                k_flash2_lane *r = &R[K_FLASH2_ME(w, lane)];
                K_FLASH2_UNROLL
                for (int k = 0; k < 2 * MF; k++) {
                    const int mf = k >> 1, half = k & 1;
                    float l0 = -INFINITY, l1 = -INFINITY;
                    K_FLASH2_UNROLL
                    for (int nb = 0; nb < NB; nb++) {
                        l0 = bk_lane_max(l0, r->s[(mf * NB + nb) * 4 + 2 * half]);
                        l1 = bk_lane_max(l1, r->s[(mf * NB + nb) * 4 + 2 * half + 1]);
                    }
                    r->x[k] = bk_lane_max(l0, l1);
                }
            }
            K_FLASH2_FOR_LANES(lane) /* ... with the neighbour pair (xor 1), the earlier operand first */
            {
                k_flash2_lane *r = &R[K_FLASH2_ME(w, lane)];
                K_FLASH2_UNROLL
                for (int k = 0; k < 2 * MF; k++) {
                    const float p = K_FLASH2_PEER(R, w, lane, 1, x[k]);
                    r->y[k] = lane & 1 ? bk_lane_max(p, r->x[k]) : bk_lane_max(r->x[k], p);
                }
            }
            K_FLASH2_FOR_LANES(lane) /* ... with the other half of the quad (xor 2): the row's max; the
                                      * exps, the rescale factor and the lane sums */
            {
                k_flash2_lane *r = &R[K_FLASH2_ME(w, lane)];
                K_FLASH2_UNROLL
                for (int k = 0; k < 2 * MF; k++) {
                    const int mf = k >> 1, half = k & 1;
                    const float p = K_FLASH2_PEER(R, w, lane, 2, y[k]);
                    const float lanes_max = lane & 2 ? bk_lane_max(p, r->y[k]) : bk_lane_max(r->y[k], p);
                    const float mx = fmaxf(r->m[k], lanes_max);
                    float l0 = 0.0f, l1 = 0.0f;
                    K_FLASH2_UNROLL
                    for (int nb = 0; nb < NB; nb++) {
                        float *s = r->s + (mf * NB + nb) * 4 + 2 * half;
                        if (mx == -INFINITY) { /* no visible key yet (bk_online_softmax_row) */
                            s[0] = 0.0f, s[1] = 0.0f;
                        } else {
                            s[0] = bk_expf_nonpositive(s[0] - mx), s[1] = bk_expf_nonpositive(s[1] - mx);
                        }
                        l0 += s[0], l1 += s[1];
                    }
                    r->x[k] = l0 + l1;
                    r->alpha[k] = mx == -INFINITY ? 1.0f : bk_expf_nonpositive(r->m[k] - mx);
                    r->mx[k] = mx;
                }
            }
            K_FLASH2_FOR_LANES(lane) /* the sum's pair stage (xor 1), operands in BK_LANES_TOTAL's order */
            {
                k_flash2_lane *r = &R[K_FLASH2_ME(w, lane)];
                K_FLASH2_UNROLL
                for (int k = 0; k < 2 * MF; k++) {
                    const float p = K_FLASH2_PEER(R, w, lane, 1, x[k]);
                    r->y[k] = lane & 1 ? p + r->x[k] : r->x[k] + p;
                }
            }
            K_FLASH2_FOR_LANES(lane) /* the quad stage (xor 2): l = l alpha + the tile's sum, m = the new max
                                      * (bk_online_softmax_row); the exps into the warp's p tile */
            {
                k_flash2_lane *r = &R[K_FLASH2_ME(w, lane)];
                const int g = lane >> 2, q = lane & 3;
                K_FLASH2_UNROLL
                for (int k = 0; k < 2 * MF; k++) {
                    const int mf = k >> 1, half = k & 1;
                    const float p = K_FLASH2_PEER(R, w, lane, 2, y[k]);
                    const float sum = lane & 2 ? p + r->y[k] : r->y[k] + p;
                    if (r->mx[k] != -INFINITY) {
                        r->l[k] = r->l[k] * r->alpha[k] + sum;
                        r->m[k] = r->mx[k];
                    }
                    float *prow = Pw + (mf * 16 + g + 8 * half) * ldp + 2 * q;
                    K_FLASH2_UNROLL
                    for (int nb = 0; nb < NB; nb++) {
                        prow[nb * 8] = r->s[(mf * NB + nb) * 4 + 2 * half];
                        prow[nb * 8 + 1] = r->s[(mf * NB + nb) * 4 + 2 * half + 1];
                    }
                }
            }
            K_FLASH2_SYNCWARP();
            K_FLASH2_FOR_LANES(lane) /* O = alpha O + P V: per element, keys ascending (k_flash_fwd's PV) */
            {
                k_flash2_lane *r = &R[K_FLASH2_ME(w, lane)];
                const int g = lane >> 2, q = lane & 3;
                K_FLASH2_UNROLL
                for (int mf = 0; mf < MF; mf++)
                    K_FLASH2_UNROLL
                    for (int ob = 0; ob < OB; ob++)
                        K_FLASH2_UNROLL
                        for (int k = 0; k < 4; k++)
                            r->o[(mf * OB + ob) * 4 + k] *= r->alpha[2 * mf + (k >> 1)];
                for (int c = 0; c < cols; c++) {
                    K_FLASH2_UNROLL
                    for (int mf = 0; mf < MF; mf++) {
                        const float p0 = Pw[(mf * 16 + g) * ldp + c], p1 = Pw[(mf * 16 + g + 8) * ldp + c];
                        K_FLASH2_UNROLL
                        for (int ob = 0; ob < OB; ob++) {
                            const float v0 = Vs[c * ld + ob * 8 + 2 * q], v1 = Vs[c * ld + ob * 8 + 2 * q + 1];
                            float *o = r->o + (mf * OB + ob) * 4;
                            o[0] += p0 * v0, o[1] += p0 * v1, o[2] += p1 * v0, o[3] += p1 * v1;
                        }
                    }
                }
            }
            K_FLASH2_SYNCWARP(); /* the p tile is rewritten at the warp's next step */
        }
        kt = next;
    }
    BK_CTA_WARP_PHASE(w) /* out = O (1 / l); lse = m + log l (k_flash_fwd_finish) */
    {
        const int wr0 = row0 + w * RW, wrows = a->T - wr0 < RW ? a->T - wr0 : RW;
        if (wrows <= 0)
            continue;
        const int64_t at = k_flash_bt_at(a, b, h, wr0);
        K_FLASH2_FOR_LANES(lane)
        {
            const k_flash2_lane *r = &R[K_FLASH2_ME(w, lane)];
            const int g = lane >> 2, q = lane & 3;
            K_FLASH2_UNROLL
            for (int k = 0; k < 2 * MF; k++) {
                const int rr = (k >> 1) * 16 + g + 8 * (k & 1);
                if (rr >= wrows)
                    continue;
                const float inv = 1.0f / r->l[k];
                K_FLASH2_UNROLL
                for (int ob = 0; ob < OB; ob++) {
                    const float *o = r->o + ((k >> 1) * OB + ob) * 4 + 2 * (k & 1);
                    a->out[at + (int64_t)rr * a->C + ob * 8 + 2 * q] = o[0] * inv;
                    a->out[at + (int64_t)rr * a->C + ob * 8 + 2 * q + 1] = o[1] * inv;
                }
                if (a->lse && q == 0)
                    a->lse[bh * a->T + wr0 + rr] = r->m[k] + logf(r->l[k]);
            }
        }
    }
}

/* The instantiations: head size x the first generation's key tile (ops_flash2.h picks one; another
 * shape runs the first generation). MF = 2 (blocks of 128 query rows) where 32 rows divide the key
 * tile and the head is at most 64 (64 registers of O a lane); MF = 1 (64 rows) otherwise. */
#define K_FLASH2_FWD(HD, BC, MF)                                                                              \
    static inline BK_DEV_HD void k_flash2_fwd_##HD##_##BC(int64_t cta, const void *args, float *smem)       \
    {                                                                                                          \
        k_flash2_fwd_impl(cta, args, smem, HD, BC, MF);                                                        \
    }
K_FLASH2_FWD(16, 64, 2)
K_FLASH2_FWD(32, 64, 2)
K_FLASH2_FWD(64, 64, 2)
K_FLASH2_FWD(64, 32, 2)
K_FLASH2_FWD(128, 32, 1)
K_FLASH2_FWD(128, 16, 1)

#endif
