/* The materialized device attention ([run] attention = "materialized"; ops_flash.h chooses between it
 * and the fused one), written once for the CUDA backend and its C emulation (gpu/dev.h). Semantics and
 * layouts are those of the CPU reference (cpu/attention.h):
 *     s[i][j] = (q_i . k_j) / sqrt(hd) + sum over streams s of table_s[h][p_s(i) - p_s(j)],  j <= i
 *     P = softmax_j(s);  out_i = sum_j P[i][j] v_j
 *
 * This is the first, plainly correct version of the interface the fused kernel (kernels_flash.h)
 * implements too; it is built from strided-batched GEMMs and simple per-row kernels:
 *
 *   1. q, k, v are permuted from qkv (B, T, 3C) to (B, H, T, hd) so that every (b, h) is one
 *      contiguous T x hd matrix and one strided-batched GEMM covers all B*H of them.
 *   2. Queries are walked in blocks [q0, q1) of DEV_ATT_QBLOCK rows. A block only sees the causal key
 *      prefix [0, q1), so its scores are a rows x q1 matrix per (b, h):
 *          S_blk = scale * Q[q0:q1] K[0:q1]^T      (one GEMM over B*H)
 *          P_blk = softmax(S_blk + bias, j <= i)    (k_att_softmax, 16 rows per block, a thread per lane)
 *          O[q0:q1] = P_blk V[0:q1]                 (one GEMM over B*H)
 *      Training (saved != NULL): P_blk is computed in place inside `saved` (B, H, T, T), whose
 *      entries j > i the softmax kernel writes as zeros. Forward-only (saved == NULL): S_blk lives in
 *      a scratch block of at most B*H*QBLOCK*T floats, so evaluation at long lengths never needs a
 *      T x T buffer.
 *   3. Backward, per query block in ascending order, with P from `saved` and dO the permuted dout:
 *          dP_blk = dO[q0:q1] V[0:q1]^T;  dS_blk = P (dP - rowsum(P dP))          (k_att_softmax_bwd)
 *          dV[0:q1] += P_blk^T dO[q0:q1]
 *          dQ[q0:q1] = scale * dS_blk K[0:q1]
 *          dK[0:q1] += scale * dS_blk^T Q[q0:q1]
 *          G_s[b, h, delta] += sum of dS_blk along the diagonals p_s(i) - p_s(j) = delta
 *      dV and dK accumulate with beta = 1 in block order and G in block order, so results are
 *      deterministic; then dq, dk, dv are added into dqkv (+=, as the CPU) and G is summed over b in
 *      ascending b into dtable[s] (+=).
 *
 * Counted positions (CoPE, bias->cope; model/cope_math.h). Forward: after the score GEMM, L_blk = Q_blk E^T
 * (one GEMM, E shared: batch stride 0) and k_att_cope, a thread per row, scan the gates from the diagonal
 * down and add the streams' bias and then cope_scale * lerp(l, p) to the scores (the CPU's order); the
 * softmax adds nothing more. Backward, after the softmax backward and the table partials: A = scale Q K^T
 * and L again (GEMMs), k_att_cope_bwd (a thread per row) writes dL and adds the gates' gradient to dS;
 * then dQ += dL E and dE_bh += dL^T Q_blk (GEMMs, blocks in order) and dcope += dE summed over (b, h)
 * in ascending order in double (k_att_cope_reduce). No atomics: deterministic.
 *
 * cuBLAS is column-major: a row-major r x c matrix X with leading dimension ld is, to it, the
 * column-major c x r matrix X^T with the same ld. Each GEMM below is written for the transposed
 * (column-major) products; the comment above each call gives the row-major product it computes.
 *
 * Positions. The positions and tables are in backend memory, which the host does not read here.
 * The model checks the positions on the host when it builds them (non-decreasing rows, every distance
 * inside the tables) and passes bias->span[s] = 1 + the largest distance of stream s; the device
 * trusts both. What the host can check without reading device memory is checked: shapes, span <=
 * distances, and for the token stream (positions NULL) that the distance T - 1 fits the table. A
 * distance outside the table that slips through makes the score NaN (kernels_attention.h) rather
 * than reading outside the table. */
#ifndef BK_GPU_OPS_ATTENTION_H
#define BK_GPU_OPS_ATTENTION_H

#include "gpu/dev.h"
#include "gpu/kernels_attention.h"
#include "model/backend.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* Query rows per block: the forward-only score scratch is B*H*QBLOCK*T floats at most, and each GEMM
 * of a block is large enough (QBLOCK x prefix x hd per (b, h)) to keep the GPU busy. The masked upper
 * triangle computed in vain is QBLOCK / (2T) of the score work. */
#define DEV_ATT_QBLOCK 128

static const char *const dev_att_stream_names[BK_STREAM_COUNT] = {"token", "segment"};

static size_t dev_att_materialized_saved(int B, int T, int H)
{
    return (size_t)B * (size_t)H * (size_t)T * (size_t)T;
}

/* Shapes and what of the bias the host can check; width[s] receives the number of distances whose
 * table gradient can be nonzero (0 for a stream without a table): span[s], or the table's row when
 * span is unknown, and never more than T for the token stream without positions. */
static int dev_att_check(const char *what, const bk_attention_bias *bias, int B, int T, int C, int H,
                         int32_t width[BK_STREAM_COUNT], bk_error *err)
{
    if (B <= 0 || T <= 0 || C <= 0 || H <= 0 || C % H)
        return bk_fail(err, BK_ERR_INVALID,
                       "%s: need B, T, C, H > 0 and C divisible by H, got B=%d T=%d C=%d H=%d", what, B, T, C, H);
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        width[s] = 0;
        if (!bias || !bias->table[s])
            continue;
        const int32_t D = bias->distances, span = bias->span[s];
        if (D <= 0)
            return bk_fail(err, BK_ERR_INVALID,
                           "%s: stream '%s' has a table but the tables hold %d distances (need >= 1)", what,
                           dev_att_stream_names[s], (int)D);
        if (span < 0 || span > D)
            return bk_fail(err, BK_ERR_INVALID,
                           "%s: stream '%s': span %d (1 + the largest distance in the batch) is outside the bias "
                           "table, which holds distances 0 .. %d",
                           what, dev_att_stream_names[s], (int)span, (int)D - 1);
        if (!bias->positions[s] && T > D)
            return bk_fail(err, BK_ERR_INVALID,
                           "%s: stream '%s', batch row 0: distance p(i=%d) - p(j=0) = %d is outside the bias table, "
                           "which holds distances 0 .. %d",
                           what, dev_att_stream_names[s], (int)D, (int)D, (int)D - 1);
        width[s] = span > 0 ? span : D;
        if (!bias->positions[s] && width[s] > T)
            width[s] = T;
    }
    return BK_OK;
}

/* The materialized attention computes the ABI 2 terms (the coordinate table, the window mask, the logit
 * scale, the content position) nowhere: a call that has one is refused, naming it, rather than computed
 * without it (the fused attention, ops_flash.h, has them all). It computes counted positions (CoPE,
 * bias->cope), alone: CoPE together with another ABI 2 term is refused too. */
static int dev_att_refuse_v2(const char *what, const bk_attention_bias *bias, bk_error *err)
{
    if (!bias)
        return BK_OK;
    const char *term = bias->grid ? "a coordinate table (grid)"
                       : bias->window > 0 ? "a window mask"
                       : bias->scale      ? "a logit scale"
                       : bias->cpos       ? "a content position"
                                          : (const char *)0;
    if (bias->cope && (bias->cope_points < 2 || !isfinite(bias->cope_scale)))
        return bk_fail(err, BK_ERR_INVALID,
                       "%s: counted positions (CoPE): %d position vectors and scale %g; expected at least 2 vectors "
                       "and a finite scale",
                       what, (int)bias->cope_points, (double)bias->cope_scale);
    if (!term)
        return BK_OK;
    if (bias->cope)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: the materialized device attention computes counted positions (CoPE) only without the "
                       "other ABI 2 bias terms, but this call has %s too; use [run] device = \"cpu\"",
                       what, term);
    return bk_fail(err, BK_ERR_UNSUPPORTED,
                   "%s: the materialized device attention does not implement %s (an ABI 2 bias term); use [run] "
                   "attention = \"fused\"",
                   what, term);
}

/* q, k, v of qkv into the scratch slots BK_DEV_SCRATCH_ATT_Q/K/V, (B, H, T, hd) each. */
static int dev_att_split(bk_dev *d, const float *qkv, int B, int T, int C, int H, float *part[3], bk_error *err)
{
    const size_t n = (size_t)B * T * C;
    static const int slots[3] = {BK_DEV_SCRATCH_ATT_Q, BK_DEV_SCRATCH_ATT_K, BK_DEV_SCRATCH_ATT_V};
    for (int p = 0; p < 3; p++) {
        void *buf = NULL;
        int rc = dev_scratch(d, slots[p], n * sizeof(float), &buf, err);
        if (rc != BK_OK)
            return rc;
        part[p] = (float *)buf;
    }
    k_att_split_args a;
    a.qkv = qkv;
    for (int p = 0; p < 3; p++)
        a.part[p] = part[p];
    a.B = B, a.T = T, a.C = C, a.H = H;
    return BK_LAUNCH(d, k_att_split, k_att_split_args, 3 * (int64_t)n, a, err);
}

static int dev_att_heads(bk_dev *d, const float *src, float *dst, int to_bh, int B, int T, int C, int H,
                         bk_error *err)
{
    k_att_heads_args a;
    a.src = src, a.dst = dst;
    a.B = B, a.T = T, a.C = C, a.H = H;
    a.to_bh = to_bh;
    return BK_LAUNCH(d, k_att_heads, k_att_heads_args, (int64_t)B * T * C, a, err);
}

static int dev_att_materialized_forward(bk_backend *be, float *out, float *saved, const float *qkv,
                                        const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err)
{
    bk_dev *d = (bk_dev *)be->impl;
    int32_t width[BK_STREAM_COUNT];
    int rc = dev_att_check("attention forward", bias, B, T, C, H, width, err);
    if (rc != BK_OK || (rc = dev_att_refuse_v2("attention forward", bias, err)) != BK_OK)
        return rc;
    const int hd = C / H, BH = B * H;
    const int64_t head = (int64_t)T * hd; /* bh-stride of q, k, v, o */
    const float scale = 1.0f / sqrtf((float)hd);
    const int qb = T < DEV_ATT_QBLOCK ? T : DEV_ATT_QBLOCK;

    float *part[3];
    if ((rc = dev_att_split(d, qkv, B, T, C, H, part, err)) != BK_OK)
        return rc;
    const float *Q = part[0], *K = part[1], *V = part[2];
    void *buf = NULL;
    if ((rc = dev_scratch(d, BK_DEV_SCRATCH_ATT_O, (size_t)B * T * C * sizeof(float), &buf, err)) != BK_OK)
        return rc;
    float *O = (float *)buf;
    float *scores = NULL;
    if (!saved) {
        if ((rc = dev_scratch(d, BK_DEV_SCRATCH_ATT_S, (size_t)BH * qb * T * sizeof(float), &buf, err)) != BK_OK)
            return rc;
        scores = (float *)buf;
    }

    /* counted positions: the block's logits against the position vectors, B*H*rows x points (the
     * score-gradient slot, which the forward does not use) */
    const int np = bias && bias->cope ? bias->cope_points : 0;
    float *Lc = NULL;
    if (np) {
        if ((rc = dev_scratch(d, BK_DEV_SCRATCH_ATT_DS, (size_t)BH * qb * np * sizeof(float), &buf, err)) != BK_OK)
            return rc;
        Lc = (float *)buf;
    }

    k_att_softmax_args sm;
    /* with counted positions k_att_cope adds the streams' bias (before its own term, the CPU's order) */
    sm.terms = bk_attention_score_terms(np ? (const bk_attention_bias *)0 : bias, T);
    sm.T = T, sm.H = H;
    for (int q0 = 0; q0 < T; q0 += DEV_ATT_QBLOCK) {
        const int q1 = q0 + DEV_ATT_QBLOCK < T ? q0 + DEV_ATT_QBLOCK : T, rows = q1 - q0;
        /* the block's scores: rows of `saved` (whole rows of T, zeros past the diagonal) or compact
         * rows x q1 scratch */
        float *S = saved ? saved + (int64_t)q0 * T : scores;
        const int ld = saved ? T : q1;
        const int64_t stride = saved ? (int64_t)T * T : (int64_t)rows * q1;

        /* row-major S (rows x q1) = scale * Q[q0:q1] (rows x hd) K[0:q1]^T; column-major:
         * S^T (q1 x rows) = K (q1 x hd, stored as K^T: transa) Q_blk^T (hd x rows, as stored) */
        rc = dev_gemm(d, 1, 0, q1, rows, hd, scale, K, hd, head, Q + (int64_t)q0 * hd, hd, head, 0.0f, S, ld, stride,
                      BH, err);
        if (rc != BK_OK)
            return rc;

        if (np) {
            /* row-major L (rows x np) = Q[q0:q1] (rows x hd) E^T, E (np x hd) shared by every (b, h);
             * column-major: L^T (np x rows) = E (np x hd, stored as E^T: transa) Q_blk^T (hd x rows) */
            rc = dev_gemm(d, 1, 0, np, rows, hd, 1.0f, bias->cope, hd, 0, Q + (int64_t)q0 * hd, hd, head, 0.0f, Lc,
                          np, (int64_t)rows * np, BH, err);
            if (rc != BK_OK)
                return rc;
            k_att_cope_args ca;
            ca.S = S, ca.bh_stride = stride, ca.L = Lc, ca.ld = ld, ca.rows = rows, ca.q0 = q0, ca.T = T, ca.H = H;
            ca.points = np, ca.cope_scale = bias->cope_scale, ca.terms = bk_attention_score_terms(bias, T);
            if ((rc = BK_LAUNCH(d, k_att_cope, k_att_cope_args, (int64_t)BH * rows, ca, err)) != BK_OK)
                return rc;
        }

        sm.S = S, sm.bh_stride = stride, sm.ld = ld, sm.rows = rows, sm.q0 = q0, sm.zero_to = saved ? T : q1;
        sm.n = (int64_t)BH * rows;
        if ((rc = BK_LAUNCH_CTA(d, k_att_softmax, k_att_softmax_args, k_row_blocks(sm.n),
                                K_ATT_ROWS_SMEM_BYTES, sm, err)) != BK_OK)
            return rc;

        /* row-major O[q0:q1] (rows x hd) = P (rows x q1) V[0:q1] (q1 x hd); column-major:
         * O^T (hd x rows) = V^T (hd x q1, as stored) P^T (q1 x rows, as stored) */
        rc = dev_gemm(d, 0, 0, hd, rows, q1, 1.0f, V, hd, head, S, ld, stride, 0.0f, O + (int64_t)q0 * hd, hd, head,
                      BH, err);
        if (rc != BK_OK)
            return rc;
    }
    return dev_att_heads(d, O, out, 0, B, T, C, H, err);
}

static int dev_att_materialized_backward(bk_backend *be, float *dqkv, float *const dtable[BK_STREAM_COUNT],
                                         const float *dout, const float *qkv, const float *saved,
                                         const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err)
{
    bk_dev *d = (bk_dev *)be->impl;
    if (!saved)
        return bk_fail(err, BK_ERR_INVALID,
                       "attention backward: needs the probabilities saved by the forward pass (saved is NULL)");
    int32_t width[BK_STREAM_COUNT];
    int rc = dev_att_check("attention backward", bias, B, T, C, H, width, err);
    if (rc != BK_OK || (rc = dev_att_refuse_v2("attention backward", bias, err)) != BK_OK)
        return rc;
    const int hd = C / H, BH = B * H;
    const int64_t head = (int64_t)T * hd;
    const size_t n = (size_t)B * T * C;
    const float scale = 1.0f / sqrtf((float)hd);
    const int qb = T < DEV_ATT_QBLOCK ? T : DEV_ATT_QBLOCK;

    /* the streams whose table gradient is wanted, and their slices of the partials G: stream s owns
     * B*H*width[s] doubles at offset goff[s] */
    int grad[BK_STREAM_COUNT], n_grad = 0;
    size_t goff[BK_STREAM_COUNT], g_total = 0;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        goff[s] = 0;
        if (dtable && dtable[s] && width[s] > 0) {
            grad[n_grad++] = s;
            goff[s] = g_total;
            g_total += (size_t)BH * (size_t)width[s];
        }
    }

    /* q, k, v permuted again: the scratch slots of the forward pass have served other layers since */
    float *part[3];
    if ((rc = dev_att_split(d, qkv, B, T, C, H, part, err)) != BK_OK)
        return rc;
    const float *Q = part[0], *K = part[1], *V = part[2];
    static const int slots[5] = {BK_DEV_SCRATCH_ATT_O, BK_DEV_SCRATCH_ATT_DQ, BK_DEV_SCRATCH_ATT_DK,
                                 BK_DEV_SCRATCH_ATT_DV, BK_DEV_SCRATCH_ATT_DS};
    float *bufs[5];
    for (int k = 0; k < 5; k++) {
        const size_t bytes = (k < 4 ? n : (size_t)BH * qb * T) * sizeof(float);
        void *buf = NULL;
        if ((rc = dev_scratch(d, slots[k], bytes, &buf, err)) != BK_OK)
            return rc;
        bufs[k] = (float *)buf;
    }
    float *dO = bufs[0], *dQ = bufs[1], *dK = bufs[2], *dV = bufs[3], *dS = bufs[4];
    /* dQ is written block by block (beta = 0: each query row belongs to one block); dK and dV
     * accumulate over the blocks from zero */
    if ((rc = dev_zero(d, dK, n * sizeof(float), err)) != BK_OK ||
        (rc = dev_zero(d, dV, n * sizeof(float), err)) != BK_OK)
        return rc;
    double *G = NULL;
    if (n_grad) {
        void *buf = NULL;
        if ((rc = dev_scratch(d, BK_DEV_SCRATCH_ATT_G, g_total * sizeof(double), &buf, err)) != BK_OK)
            return rc;
        G = (double *)buf;
        if ((rc = dev_zero(d, G, g_total * sizeof(double), err)) != BK_OK)
            return rc;
    }
    /* counted positions: one buffer (the forward-only score slot) holding, per query block, a = scale q.k
     * (A) and dL/dp (Dp), rows x q1 per (b, h); the logits L and their gradient dL, rows x np per (b, h);
     * and, over all blocks, dE per (b, h) (np x hd each, summed over (b, h) in order at the end) */
    const int np = bias && bias->cope ? bias->cope_points : 0;
    const int want_dcope = np && bias->dcope;
    float *cA = NULL, *cDp = NULL, *cL = NULL, *cdL = NULL, *cdE = NULL;
    if (np) {
        const size_t sq = (size_t)BH * qb * T, sl = (size_t)BH * qb * np, se = want_dcope ? (size_t)BH * np * hd : 0;
        void *buf = NULL;
        if ((rc = dev_scratch(d, BK_DEV_SCRATCH_ATT_S, (2 * sq + 2 * sl + se) * sizeof(float), &buf, err)) != BK_OK)
            return rc;
        cA = (float *)buf, cDp = cA + sq, cL = cDp + sq, cdL = cL + sl, cdE = want_dcope ? cdL + sl : NULL;
        if (cdE && (rc = dev_zero(d, cdE, se * sizeof(float), err)) != BK_OK)
            return rc;
    }
    if ((rc = dev_att_heads(d, dout, dO, 1, B, T, C, H, err)) != BK_OK)
        return rc;

    for (int q0 = 0; q0 < T; q0 += DEV_ATT_QBLOCK) {
        const int q1 = q0 + DEV_ATT_QBLOCK < T ? q0 + DEV_ATT_QBLOCK : T, rows = q1 - q0;
        const float *P = saved + (int64_t)q0 * T; /* ld T, bh-stride T*T */
        const int64_t p_stride = (int64_t)T * T, ds_stride = (int64_t)rows * q1;
        const float *dOb = dO + (int64_t)q0 * hd, *Qb = Q + (int64_t)q0 * hd;

        /* row-major dP (rows x q1) = dO_blk (rows x hd) V[0:q1]^T; column-major:
         * dP^T (q1 x rows) = V (q1 x hd, stored as V^T: transa) dO_blk^T (hd x rows, as stored) */
        rc = dev_gemm(d, 1, 0, q1, rows, hd, 1.0f, V, hd, head, dOb, hd, head, 0.0f, dS, q1, ds_stride, BH, err);
        if (rc != BK_OK)
            return rc;

        k_att_softmax_bwd_args sb;
        sb.dS = dS, sb.P = P, sb.ds_bh_stride = ds_stride, sb.p_bh_stride = p_stride;
        sb.ld_ds = q1, sb.ld_p = T, sb.rows = rows, sb.q0 = q0, sb.q1 = q1, sb.n = (int64_t)BH * rows;
        if ((rc = BK_LAUNCH_CTA(d, k_att_softmax_bwd, k_att_softmax_bwd_args, k_row_blocks(sb.n),
                                K_ATT_ROWS_SMEM_BYTES, sb, err)) != BK_OK)
            return rc;

        for (int g = 0; g < n_grad; g++) {
            const int s = grad[g];
            k_att_table_partial_args tp;
            tp.G = G + goff[s], tp.dS = dS, tp.positions = bias->positions[s], tp.ds_bh_stride = ds_stride;
            tp.ld_ds = q1, tp.rows = rows, tp.q0 = q0, tp.T = T, tp.H = H, tp.width = width[s];
            rc = BK_LAUNCH(d, k_att_table_partial, k_att_table_partial_args, (int64_t)BH * width[s], tp, err);
            if (rc != BK_OK)
                return rc;
        }

        if (np) {
            /* A = scale * Q_blk K[0:q1]^T and L = Q_blk E^T as the forward had them (its GEMMs) */
            rc = dev_gemm(d, 1, 0, q1, rows, hd, scale, K, hd, head, Qb, hd, head, 0.0f, cA, q1, ds_stride, BH, err);
            if (rc != BK_OK ||
                (rc = dev_gemm(d, 1, 0, np, rows, hd, 1.0f, bias->cope, hd, 0, Qb, hd, head, 0.0f, cL, np,
                               (int64_t)rows * np, BH, err)) != BK_OK)
                return rc;
            k_att_cope_bwd_args cb;
            cb.dS = dS, cb.Dp = cDp, cb.dL = cdL, cb.A = cA, cb.L = cL, cb.bh_stride = ds_stride;
            cb.ld = q1, cb.rows = rows, cb.q0 = q0, cb.points = np, cb.cope_scale = bias->cope_scale;
            if ((rc = BK_LAUNCH(d, k_att_cope_bwd, k_att_cope_bwd_args, (int64_t)BH * rows, cb, err)) != BK_OK)
                return rc;
        }

        /* row-major dV[0:q1] (q1 x hd) += P_blk^T (q1 x rows) dO_blk (rows x hd); column-major:
         * dV^T (hd x q1) += dO_blk^T (hd x rows, as stored) P_blk (rows x q1, stored as P^T: transb) */
        rc = dev_gemm(d, 0, 1, hd, q1, rows, 1.0f, dOb, hd, head, P, T, p_stride, 1.0f, dV, hd, head, BH, err);
        if (rc != BK_OK)
            return rc;
        /* row-major dQ[q0:q1] (rows x hd) = scale * dS_blk (rows x q1) K[0:q1] (q1 x hd); column-major:
         * dQ^T (hd x rows) = K^T (hd x q1, as stored) dS^T (q1 x rows, as stored) */
        rc = dev_gemm(d, 0, 0, hd, rows, q1, scale, K, hd, head, dS, q1, ds_stride, 0.0f, dQ + (int64_t)q0 * hd, hd,
                      head, BH, err);
        if (rc != BK_OK)
            return rc;
        /* row-major dK[0:q1] (q1 x hd) += scale * dS_blk^T (q1 x rows) Q_blk (rows x hd); column-major:
         * dK^T (hd x q1) += Q_blk^T (hd x rows, as stored) dS (rows x q1, stored as dS^T: transb) */
        rc = dev_gemm(d, 0, 1, hd, q1, rows, scale, Qb, hd, head, dS, q1, ds_stride, 1.0f, dK, hd, head, BH, err);
        if (rc != BK_OK)
            return rc;
        if (np) {
            /* through L = Q E^T. Row-major dQ[q0:q1] (rows x hd) += dL (rows x np) E (np x hd); column-major:
             * dQ^T (hd x rows) += E^T (hd x np, as stored) dL^T (np x rows, as stored) */
            rc = dev_gemm(d, 0, 0, hd, rows, np, 1.0f, bias->cope, hd, 0, cdL, np, (int64_t)rows * np, 1.0f,
                          dQ + (int64_t)q0 * hd, hd, head, BH, err);
            if (rc != BK_OK)
                return rc;
            /* row-major dE_bh (np x hd) += dL^T (np x rows) Q_blk (rows x hd); column-major:
             * dE^T (hd x np) += Q_blk^T (hd x rows, as stored) dL (rows x np, stored as dL^T: transb) */
            if (cdE && (rc = dev_gemm(d, 0, 1, hd, np, rows, 1.0f, Qb, hd, head, cdL, np, (int64_t)rows * np, 1.0f,
                                      cdE, hd, (int64_t)np * hd, BH, err)) != BK_OK)
                return rc;
        }
    }

    k_att_merge_grad_args mg;
    mg.dqkv = dqkv, mg.part[0] = dQ, mg.part[1] = dK, mg.part[2] = dV;
    mg.B = B, mg.T = T, mg.C = C, mg.H = H;
    if ((rc = BK_LAUNCH(d, k_att_merge_grad, k_att_merge_grad_args, 3 * (int64_t)n, mg, err)) != BK_OK)
        return rc;

    for (int g = 0; g < n_grad; g++) {
        const int s = grad[g];
        k_att_table_reduce_args tr;
        tr.dtable = dtable[s], tr.G = G + goff[s];
        tr.B = B, tr.H = H, tr.width = width[s], tr.distances = bias->distances;
        if ((rc = BK_LAUNCH(d, k_att_table_reduce, k_att_table_reduce_args, (int64_t)H * width[s], tr, err)) != BK_OK)
            return rc;
    }
    if (cdE) {
        k_att_cope_reduce_args cr;
        cr.dcope = bias->dcope, cr.part = cdE, cr.n = (int64_t)np * hd, cr.BH = BH;
        if ((rc = BK_LAUNCH(d, k_att_cope_reduce, k_att_cope_reduce_args, cr.n, cr, err)) != BK_OK)
            return rc;
    }
    return BK_OK;
}

#endif
