/* The device attention (model/backend.h's attention_saved / attention_forward / attention_backward):
 * the fused block programs of kernels_flash.h ([run] attention = "fused", the default) or the
 * materialized GEMM version of ops_attention.h ("materialized"), chosen by be->attention. Written once
 * for the CUDA backend and its C emulation (gpu/dev.h).
 *
 * Fused: `saved` is the row log-sum-exp, B*H*T floats (a T x T matrix is never stored, in training
 * or evaluation); backward reads it with the forward's output. Scratch: D = dO . O (B*H*T floats)
 * and, per stream whose table gradient is wanted, partial sums in double: B * ceil(T / tile) * H rows
 * of width (1 + the largest distance; at most T) with positions, and on the token stream rows cut at
 * the query tile's end (kernels_flash.h, k_flash_g_len): about B * H * T * T / (2 tile).
 *
 * bf16 storage (attention_forward_bf16 / attention_backward_bf16): the same programs reading q, k, v,
 * dO and O as bf16 and writing the output in bf16 (k_flash_args.qkv16), on the tensor-core programs
 * only; the row statistics, dqkv and the table gradient stay fp32.
 *
 * ABI 2 terms (cpu/attention.h: the coordinate table, the window mask with sinks, the logit scale, the
 * content position) on every fused program, fp32 and tensor cores, fp32 and bf16 storage (kernels_flash.h).
 * Their gradients take one more scratch buffer of doubles (BK_DEV_SCRATCH_ATT_V2): dscale and drscale
 * B*H*T each, dgrid B * ceil(T / tile) * H * points, dphi as a token-stream table partial of
 * min(distances, T) distances, dcpos 2 B*H*T (its key sums and its query sums). */
#ifndef BK_GPU_OPS_FLASH_H
#define BK_GPU_OPS_FLASH_H

#include "gpu/dev.h"
#include "gpu/kernels_flash.h"
#include "gpu/kernels_flash_tc.h"
#include "gpu/ops_flash2.h"
#include "gpu/ops_attention.h"
#include "model/backend.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Most shared memory one block program may use (less where the GPU allows less: bk_dev.smem_optin, e.g.
 * 99 KiB on sm_86 and sm_89). The plan takes the largest tile whose three programs fit; at 128 KiB,
 * fp32: 64 rows up to head size 62, 32 rows up to 158, 16 rows up to 334; bf16 tensor cores ([run]
 * matmul = "bf16"): 64 rows up to 64, 32 up to 208, 16 up to 480. An H100 gives a block up to 227 KiB
 * and an A100 163 KiB. */
#define DEV_FLASH_SMEM_MAX (128 * 1024)

static const int dev_flash_tiles[] = {64, 32, 16};

typedef struct dev_flash_plan {
    int tile, tensor; /* tensor: the bf16 tensor-core programs (kernels_flash_tc.h) */
    size_t smem_fwd, smem_dkdv, smem_dq; /* bytes */
} dev_flash_plan;

/* `storage16`: the call has bf16 storage, which the materialized attention does not take (the refusal
 * then advises fp32 storage as well). `v2`: what k_flash_dq's ABI 2 partials add to its shared memory
 * (k_flash_v2_needs; 0 without them, which leaves every plan as it was). */
static int dev_flash_plan_for(const bk_dev *d, const char *what, int hd, int tensor, int storage16, int v2,
                              dev_flash_plan *plan, bk_error *err)
{
    const int n = (int)(sizeof dev_flash_tiles / sizeof dev_flash_tiles[0]);
    const size_t most = d->smem_optin && d->smem_optin < DEV_FLASH_SMEM_MAX ? d->smem_optin : DEV_FLASH_SMEM_MAX;
    plan->tensor = tensor;
    for (int k = 0; k < n; k++) {
        const int tile = dev_flash_tiles[k];
        plan->tile = tile;
        plan->smem_fwd = (size_t)k_flash_layout(K_FLASH_FWD, tensor, tile, hd, 0).total * sizeof(float);
        plan->smem_dkdv = (size_t)k_flash_layout(K_FLASH_DKDV, tensor, tile, hd, 0).total * sizeof(float);
        plan->smem_dq = (size_t)k_flash_layout(K_FLASH_DQ, tensor, tile, hd, v2).total * sizeof(float);
        if (plan->smem_fwd <= most && plan->smem_dkdv <= most && plan->smem_dq <= most)
            return BK_OK;
    }
    const size_t need = plan->smem_dkdv > plan->smem_dq ? plan->smem_dkdv : plan->smem_dq;
    return bk_fail(err, BK_ERR_UNSUPPORTED,
                   "%s: head size %d is too large for the fused attention (with tiles of %d rows its backward "
                   "needs %zu bytes of shared memory per block, at most %zu allowed%s); use [run] attention = "
                   "\"materialized\"%s",
                   what, hd, plan->tile, need, most, most < DEV_FLASH_SMEM_MAX ? " on this GPU" : "",
                   storage16 ? " with precision = \"fp32\" (bf16 storage needs the fused attention)" : "");
}

/* The arguments of one call: the storage pointers of `io` (qkv, out, o, dout, dqkv and their bf16
 * forms, lse) with the shape, the per-score terms and the tile. */
static void dev_flash_args_of(k_flash_args *a, const k_flash_args *io, const bk_attention_bias *bias, int B, int T,
                              int C, int H, int tile)
{
    *a = *io;
    a->terms = bk_attention_score_terms(bias, T);
    a->B = B, a->T = T, a->C = C, a->H = H, a->tile = tile;
    a->scale = 1.0f / sqrtf((float)(C / H));
    memset(&a->v2, 0, sizeof a->v2); /* the ABI 2 gradients' partials: set by the backward */
}

/* What of the ABI 2 terms the host can check (the values in backend memory are the engine's to check:
 * phi >= 0 and non-decreasing, u <= 1). */
static int dev_flash_check_v2(const char *what, const bk_attention_bias *bias, int T, bk_error *err)
{
    if (!bias)
        return BK_OK;
    if (bias->cope)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: the fused device attention does not compute counted positions (CoPE, plugin capability "
                       "BIASKIT_CAP_COUNT: a gate scan per query row across the key tiles); use [run] attention = "
                       "\"materialized\" (or device = \"cpu\")",
                       what);
    if (bias->window < 0 || bias->sinks < 0)
        return bk_fail(err, BK_ERR_INVALID,
                       "%s: mask window %d, sinks %d; expected window >= 0 (0: no mask) and sinks >= 0", what,
                       (int)bias->window, (int)bias->sinks);
    if (!bias->grid)
        return BK_OK;
    if (!bias->phi || !bias->rscale)
        return bk_fail(err, BK_ERR_INVALID, "%s: the coordinate table (grid) needs phi and rscale (%s is NULL)", what,
                       !bias->phi ? "phi" : "rscale");
    if (bias->points < 2)
        return bk_fail(err, BK_ERR_INVALID, "%s: the coordinate table has %d grid points; expected >= 2", what,
                       (int)bias->points);
    if (bias->distances < T)
        return bk_fail(err, BK_ERR_INVALID,
                       "%s: the coordinate table reads phi at distances 0 .. %d (T = %d) but phi holds %d (distances)",
                       what, T - 1, T, (int)bias->distances);
    return BK_OK;
}

/* k_flash_v2_needs of a backward with this bias (0 in a forward). */
static int dev_flash_v2_needs(const bk_attention_bias *bias, int backward)
{
    if (!backward || !bias)
        return 0;
    return k_flash_v2_needs_of(bias->scale && bias->dscale, bias->grid && bias->drscale, bias->grid && bias->dgrid);
}

/* The checks and plan of a call; bf16 storage (io->qkv16) runs on the tensor-core programs only. */
static int dev_flash_prepare(bk_backend *be, const char *what, const k_flash_args *io, const bk_attention_bias *bias,
                             int B, int T, int C, int H, int backward, int32_t width[BK_STREAM_COUNT],
                             dev_flash_plan *plan, bk_error *err)
{
    int rc;
    if ((rc = dev_att_check(what, bias, B, T, C, H, width, err)) != BK_OK ||
        (rc = dev_flash_check_v2(what, bias, T, err)) != BK_OK)
        return rc;
    if (io->qkv16 && (be->matmul != BK_MATMUL_BF16 || be->attention != BK_ATTENTION_FUSED))
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: bf16 storage needs the fused attention on bf16 tensor cores ([run] attention = "
                       "\"fused\" and matmul = \"bf16\"); this backend has attention = \"%s\", matmul = \"%s\"",
                       what, be->attention == BK_ATTENTION_FUSED ? "fused" : "materialized",
                       be->matmul == BK_MATMUL_BF16 ? "bf16" : be->matmul == BK_MATMUL_TF32 ? "tf32" : "fp32");
    return dev_flash_plan_for((const bk_dev *)be->impl, what, C / H, be->matmul == BK_MATMUL_BF16, io->qkv16 != NULL,
                              dev_flash_v2_needs(bias, backward), plan, err);
}

/* The backward's partials of the ABI 2 gradients the bias wants (a's tile and shape set): one scratch
 * buffer of doubles, dgrid's, dphi's and the content position's parts zeroed (k_flash_dq, and for dcpos's
 * key sums k_flash_dkdv, add into them), dscale's and drscale's written whole by k_flash_dq. */
static int dev_flash_v2_partials(bk_dev *d, k_flash_args *a, const bk_attention_bias *bias, bk_error *err)
{
    if (!bias)
        return BK_OK;
    const int want_scale = bias->scale && bias->dscale, want_grid = bias->grid && bias->dgrid;
    const int want_phi = bias->grid && bias->dphi, want_rs = bias->grid && bias->drscale;
    const int want_cpos = bias->cpos && bias->dcpos;
    if (!want_scale && !want_grid && !want_phi && !want_rs && !want_cpos)
        return BK_OK;
    a->v2.wphi = bias->distances < a->T ? bias->distances : a->T;
    const size_t rows = (size_t)a->B * a->H * a->T;
    const size_t n_grid = want_grid ? (size_t)a->B * k_flash_tiles(a) * a->H * a->terms.points : 0;
    const size_t n_phi = want_phi ? (size_t)k_flash_phi_at(a, a->B, 0) : 0; /* past the last (b, qt) */
    const size_t n_scale = want_scale ? rows : 0, n_rs = want_rs ? rows : 0, n_cpos = want_cpos ? rows : 0;
    const size_t zeroed = n_grid + n_phi + 2 * n_cpos;
    void *buf = NULL;
    int rc;
    if ((rc = dev_scratch(d, BK_DEV_SCRATCH_ATT_V2, (zeroed + n_scale + n_rs) * sizeof(double), &buf, err)) != BK_OK ||
        (rc = dev_zero(d, buf, zeroed * sizeof(double), err)) != BK_OK)
        return rc;
    double *at = (double *)buf;
    a->v2.dgrid_part = want_grid ? at : (double *)0;
    at += n_grid;
    a->v2.dphi_part = want_phi ? at : (double *)0;
    at += n_phi;
    a->v2.dcpos_key = want_cpos ? at : (double *)0;
    at += n_cpos;
    a->v2.dcpos_query = want_cpos ? at : (double *)0;
    at += n_cpos;
    a->v2.dscale_part = want_scale ? at : (double *)0;
    at += n_scale;
    a->v2.drscale_part = want_rs ? at : (double *)0;
    return BK_OK;
}

/* The partials summed into the gradients (k_flash_v2_reduce). */
static int dev_flash_v2_reduce(bk_dev *d, const k_flash_args *a, const bk_attention_bias *bias, bk_error *err)
{
    k_flash_v2_reduce_args r;
    r.fa = *a;
    int rc;
    if (a->v2.dscale_part) {
        r.out = bias->dscale, r.which = K_FLASH_R_DSCALE;
        if ((rc = BK_LAUNCH(d, k_flash_v2_reduce, k_flash_v2_reduce_args, (int64_t)a->H * a->T, r, err)) != BK_OK)
            return rc;
    }
    if (a->v2.drscale_part) {
        r.out = bias->drscale, r.which = K_FLASH_R_DRSCALE;
        if ((rc = BK_LAUNCH(d, k_flash_v2_reduce, k_flash_v2_reduce_args, (int64_t)a->T, r, err)) != BK_OK)
            return rc;
    }
    if (a->v2.dphi_part) {
        r.out = bias->dphi, r.which = K_FLASH_R_DPHI;
        if ((rc = BK_LAUNCH(d, k_flash_v2_reduce, k_flash_v2_reduce_args, (int64_t)a->v2.wphi, r, err)) != BK_OK)
            return rc;
    }
    if (a->v2.dgrid_part) {
        r.out = bias->dgrid, r.which = K_FLASH_R_DGRID;
        if ((rc = BK_LAUNCH(d, k_flash_v2_reduce, k_flash_v2_reduce_args, (int64_t)a->H * a->terms.points, r, err)) !=
            BK_OK)
            return rc;
    }
    if (a->v2.dcpos_key) {
        r.out = bias->dcpos, r.which = K_FLASH_R_DCPOS;
        if ((rc = BK_LAUNCH(d, k_flash_v2_reduce, k_flash_v2_reduce_args, (int64_t)a->B * a->H * a->T, r, err)) !=
            BK_OK)
            return rc;
    }
    return BK_OK;
}

/* Forward of io's storage: qkv (or qkv16) in, out (or out16) and, when not NULL, lse out. */
static int dev_flash_forward_io(bk_backend *be, const k_flash_args *io, const bk_attention_bias *bias, int B, int T,
                                int C, int H, bk_error *err)
{
    bk_dev *d = (bk_dev *)be->impl;
    int32_t width[BK_STREAM_COUNT];
    dev_flash_plan plan;
    int rc;
    if ((rc = dev_flash_prepare(be, "attention forward", io, bias, B, T, C, H, 0, width, &plan, err)) != BK_OK)
        return rc;
    k_flash_args a;
    dev_flash_args_of(&a, io, bias, B, T, C, H, plan.tile);
    const int64_t blocks = (int64_t)B * H * k_flash_tiles(&a);
    if (d->flash_gen == 2 && !plan.tensor) { /* the second generation, where it has a program (ops_flash2.h) */
        int ran = 0;
        if ((rc = dev_flash2_forward(d, &a, &ran, err)) != BK_OK || ran)
            return rc;
    }
    if (plan.tensor)
        return BK_LAUNCH_CTA(d, k_flash_tc_fwd, k_flash_args, blocks, plan.smem_fwd, a, err);
    return BK_LAUNCH_CTA(d, k_flash_fwd, k_flash_args, blocks, plan.smem_fwd, a, err);
}

/* Backward of io's storage: qkv, o, dout (or their bf16 forms) and lse in; dqkv += and dtable[s] += . */
static int dev_flash_backward_io(bk_backend *be, const k_flash_args *io, float *const dtable[BK_STREAM_COUNT],
                                 const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err)
{
    bk_dev *d = (bk_dev *)be->impl;
    if (!io->lse || (!io->o && !io->o16))
        return bk_fail(err, BK_ERR_INVALID,
                       "attention backward: the fused attention needs the forward's output and the row statistics "
                       "it saved (%s is NULL)",
                       !io->lse ? "saved" : "out");
    int32_t width[BK_STREAM_COUNT];
    dev_flash_plan plan;
    int rc;
    if ((rc = dev_flash_prepare(be, "attention backward", io, bias, B, T, C, H, 1, width, &plan, err)) != BK_OK)
        return rc;
    k_flash_args a;
    dev_flash_args_of(&a, io, bias, B, T, C, H, plan.tile);
    const int nq = k_flash_tiles(&a);
    const int64_t rows = (int64_t)B * H * T, blocks = (int64_t)B * H * nq;

    void *buf = NULL;
    if ((rc = dev_scratch(d, BK_DEV_SCRATCH_ATT_O, (size_t)rows * sizeof(float), &buf, err)) != BK_OK)
        return rc;
    a.dsum = (float *)buf;

    /* the partial rows of the streams whose table gradient is wanted: stream s owns k_flash_g_at(s, B, 0)
     * doubles at offset goff[s] */
    size_t goff[BK_STREAM_COUNT], g_total = 0;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        goff[s] = g_total;
        if (dtable && dtable[s] && width[s] > 0) {
            a.width[s] = width[s];
            g_total += (size_t)k_flash_g_at(&a, s, B, 0); /* past the last (b, qt) */
        }
    }
    if (g_total) {
        if ((rc = dev_scratch(d, BK_DEV_SCRATCH_ATT_G, g_total * sizeof(double), &buf, err)) != BK_OK ||
            (rc = dev_zero(d, buf, g_total * sizeof(double), err)) != BK_OK)
            return rc;
        for (int s = 0; s < BK_STREAM_COUNT; s++)
            if (a.width[s] > 0)
                a.G[s] = (double *)buf + goff[s];
    }

    if ((rc = dev_flash_v2_partials(d, &a, bias, err)) != BK_OK)
        return rc;

    int ran = 0; /* the second generation, where it has a program (ops_flash2.h) */
    if (d->flash_gen == 2 && !plan.tensor && (rc = dev_flash2_backward(d, &a, &ran, err)) != BK_OK)
        return rc;
    if (ran) {
        /* D, dQ, dK, dV and the partials are done: the reductions below as after the first generation */
    } else if ((rc = BK_LAUNCH(d, k_flash_dsum, k_flash_args, rows, a, err)) != BK_OK) {
        return rc;
    } else if (plan.tensor) {
        if ((rc = BK_LAUNCH_CTA(d, k_flash_tc_dkdv, k_flash_args, blocks, plan.smem_dkdv, a, err)) != BK_OK ||
            (rc = BK_LAUNCH_CTA(d, k_flash_tc_dq, k_flash_args, blocks, plan.smem_dq, a, err)) != BK_OK)
            return rc;
    } else if ((rc = BK_LAUNCH_CTA(d, k_flash_dkdv, k_flash_args, blocks, plan.smem_dkdv, a, err)) != BK_OK ||
               (rc = BK_LAUNCH_CTA(d, k_flash_dq, k_flash_args, blocks, plan.smem_dq, a, err)) != BK_OK) {
        return rc;
    }
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (!a.G[s])
            continue;
        k_flash_table_reduce_args tr;
        tr.dtable = dtable[s], tr.fa = a, tr.s = s, tr.distances = bias->distances;
        if ((rc = BK_LAUNCH(d, k_flash_table_reduce, k_flash_table_reduce_args, (int64_t)H * width[s], tr, err)) !=
            BK_OK)
            return rc;
    }
    return dev_flash_v2_reduce(d, &a, bias, err);
}

static int dev_flash_forward(bk_backend *be, float *out, float *saved, const float *qkv, const bk_attention_bias *bias,
                             int B, int T, int C, int H, bk_error *err)
{
    k_flash_args io;
    memset(&io, 0, sizeof io);
    io.qkv = qkv, io.out = out, io.lse = saved;
    return dev_flash_forward_io(be, &io, bias, B, T, C, H, err);
}

static int dev_flash_backward(bk_backend *be, float *dqkv, float *const dtable[BK_STREAM_COUNT], const float *dout,
                              const float *qkv, const float *out, const float *saved, const bk_attention_bias *bias,
                              int B, int T, int C, int H, bk_error *err)
{
    k_flash_args io;
    memset(&io, 0, sizeof io);
    io.qkv = qkv, io.o = out, io.dout = dout, io.dqkv = dqkv, io.lse = (float *)saved;
    return dev_flash_backward_io(be, &io, dtable, bias, B, T, C, H, err);
}

/* --- the backend functions: fused or materialized ------------------------------------------------- */

static size_t dev_attention_saved(bk_backend *be, int B, int T, int H)
{
    if (be->attention == BK_ATTENTION_MATERIALIZED)
        return dev_att_materialized_saved(B, T, H);
    return (size_t)B * (size_t)H * (size_t)T;
}

static int dev_attention_forward(bk_backend *be, float *out, float *saved, const float *qkv,
                                 const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err)
{
    if (be->attention == BK_ATTENTION_MATERIALIZED)
        return dev_att_materialized_forward(be, out, saved, qkv, bias, B, T, C, H, err);
    return dev_flash_forward(be, out, saved, qkv, bias, B, T, C, H, err);
}

static int dev_attention_backward(bk_backend *be, float *dqkv, float *const dtable[BK_STREAM_COUNT],
                                  const float *dout, const float *qkv, const float *out, const float *saved,
                                  const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err)
{
    if (be->attention == BK_ATTENTION_MATERIALIZED)
        return dev_att_materialized_backward(be, dqkv, dtable, dout, qkv, saved, bias, B, T, C, H, err);
    return dev_flash_backward(be, dqkv, dtable, dout, qkv, out, saved, bias, B, T, C, H, err);
}

/* bf16 storage (backend.h): the fused tensor-core programs on bf16 q, k, v, dO and O. */
static int dev_attention_forward_bf16(bk_backend *be, uint16_t *out, float *saved, const uint16_t *qkv,
                                      const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err)
{
    k_flash_args io;
    memset(&io, 0, sizeof io);
    io.qkv16 = qkv, io.out16 = out, io.lse = saved;
    if (!qkv || !out)
        return bk_fail(err, BK_ERR_INVALID, "attention forward (bf16 storage): %s is NULL", !qkv ? "qkv" : "out");
    return dev_flash_forward_io(be, &io, bias, B, T, C, H, err);
}

static int dev_attention_backward_bf16(bk_backend *be, float *dqkv, float *const dtable[BK_STREAM_COUNT],
                                       const uint16_t *dout, const uint16_t *qkv, const uint16_t *out,
                                       const float *saved, const bk_attention_bias *bias, int B, int T, int C, int H,
                                       bk_error *err)
{
    k_flash_args io;
    memset(&io, 0, sizeof io);
    io.qkv16 = qkv, io.o16 = out, io.dout16 = dout, io.dqkv = dqkv, io.lse = (float *)saved;
    if (!qkv || !dout)
        return bk_fail(err, BK_ERR_INVALID, "attention backward (bf16 storage): %s is NULL", !qkv ? "qkv" : "dout");
    return dev_flash_backward_io(be, &io, dtable, bias, B, T, C, H, err);
}

#endif
