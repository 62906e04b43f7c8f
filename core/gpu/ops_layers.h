/* The device backend's layers, optimizer and mixing (backend.h's table, attention aside), written
 * once over the primitives of gpu/dev.h and included by both instantiations (backend_cuda.cu,
 * backend_emulated.c), each of which defines dev_gemm, dev_launched, dev_scratch, dev_upload,
 * dev_download and dev_zero first. be->impl points to the instantiation's state, whose first member
 * is a bk_dev. */
#ifndef BK_GPU_OPS_LAYERS_H
#define BK_GPU_OPS_LAYERS_H

#include "gpu/dev.h"
#include "gpu/kernels_layers.h"
#include "model/backend.h"

#include <string.h>

static inline bk_dev *layers_dev(bk_backend *be)
{
    return (bk_dev *)be->impl;
}

/* chunks of `per` values covering n */
static inline int64_t layers_chunks(int64_t n, int64_t per)
{
    return (n + per - 1) / per;
}

/* --- encoder ----------------------------------------------------------------------------------- */

static int dev_encoder_forward(bk_backend *be, float *out, const bk_batch_view *batch, const float *wte, int B, int T,
                               int C, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    k_encoder_forward_args a;
    a.out = out, a.inp = batch->inputs, a.wte = wte, a.C = C;
    return BK_LAUNCH(d, k_encoder_forward, k_encoder_forward_args, (int64_t)B * T * C, a, err);
}

/* The buckets of the batch view (bk_batch_buckets, built on the host) give every distinct id its
 * tokens in ascending order: one thread per (id, channel) adds them to dwte in that order. */
static int dev_encoder_backward(bk_backend *be, float *dwte, const float *dout, const bk_batch_view *batch, int B,
                                int T, int C, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    (void)B, (void)T;
    if (batch->n_buckets > 0 && (!batch->bucket_ids || !batch->bucket_start || !batch->bucket_tokens))
        return bk_fail(err, BK_ERR_INVALID,
                       "device encoder backward: the batch has %d token buckets but no bucket arrays; "
                       "build them with bk_batch_buckets when the batch is loaded",
                       (int)batch->n_buckets);
    k_encoder_backward_args a;
    a.dwte = dwte, a.dout = dout, a.ids = batch->bucket_ids, a.start = batch->bucket_start;
    a.tokens = batch->bucket_tokens, a.C = C;
    return BK_LAUNCH(d, k_encoder_backward, k_encoder_backward_args, (int64_t)batch->n_buckets * C, a, err);
}

/* --- layernorm --------------------------------------------------------------------------------- */

/* The output in fp32 (out) or, with bf16 storage, in bf16 (out16). */
static int dev_layernorm_forward_to(bk_backend *be, float *out, uint16_t *out16, float *mean, float *rstd,
                                    const float *inp, const float *weight, const float *bias, int N, int C,
                                    bk_error *err)
{
    bk_dev *d = layers_dev(be);
    if (N == 0)
        return BK_OK;
    k_layernorm_forward_args a;
    a.out = out, a.out16 = out16, a.mean = mean, a.rstd = rstd, a.inp = inp, a.weight = weight, a.bias = bias;
    a.N = N, a.C = C;
    return BK_LAUNCH_CTA(d, k_layernorm_forward, k_layernorm_forward_args, k_row_blocks(N),
                         K_LAYERNORM_SMEM_BYTES, a, err);
}

static int dev_layernorm_forward(bk_backend *be, float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int N, int C, bk_error *err)
{
    return dev_layernorm_forward_to(be, out, NULL, mean, rstd, inp, weight, bias, N, C, err);
}

static int dev_layernorm_forward_bf16(bk_backend *be, uint16_t *out, float *mean, float *rstd, const float *inp,
                                      const float *weight, const float *bias, int N, int C, bk_error *err)
{
    return dev_layernorm_forward_to(be, NULL, out, mean, rstd, inp, weight, bias, N, C, err);
}

/* out[c] += column sums of the (chunks, C) partials, chunk by chunk in order */
static int dev_column_sum(bk_dev *d, float *out, const double *part, int64_t chunks, int64_t C, bk_error *err)
{
    k_column_sum_args s;
    s.out = out, s.part = part, s.chunks = chunks, s.C = C;
    return BK_LAUNCH(d, k_column_sum, k_column_sum_args, C, s, err);
}

static int dev_layernorm_backward(bk_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean, const float *rstd, int N,
                                  int C, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    if (N == 0)
        return BK_OK;
    const int64_t chunks = layers_chunks(N, BK_DEV_ROW_CHUNK);
    const size_t bytes = (size_t)(chunks * C) * sizeof(double);
    void *pw = NULL, *pb = NULL;
    int rc;
    if ((rc = dev_scratch(d, BK_DEV_SCRATCH_PARTIAL, bytes, &pw, err)) != BK_OK ||
        (rc = dev_scratch(d, BK_DEV_SCRATCH_PARTIAL2, bytes, &pb, err)) != BK_OK)
        return rc;
    k_layernorm_backward_args a;
    a.dinp = dinp, a.part_w = (double *)pw, a.part_b = (double *)pb, a.dout = dout, a.inp = inp;
    a.weight = weight, a.mean = mean, a.rstd = rstd, a.N = N, a.C = C;
    if ((rc = BK_LAUNCH_CTA(d, k_layernorm_backward_dinp, k_layernorm_backward_args,
                            k_row_blocks(N), K_LAYERNORM_SMEM_BYTES, a, err)) != BK_OK ||
        (rc = BK_LAUNCH(d, k_layernorm_backward_params, k_layernorm_backward_args, chunks * C, a, err)) != BK_OK ||
        (rc = dev_column_sum(d, dweight, a.part_w, chunks, C, err)) != BK_OK)
        return rc;
    return dev_column_sum(d, dbias, a.part_b, chunks, C, err);
}

/* --- the llama family: RMSNorm, SwiGLU, grouped-query heads (fp32) ------------------------------- */

/* RMSNorm of N x G rows of hd channels, row r at (r / G) stride + (r % G) hd (k_rmsnorm_args); plain RMSNorm is
 * G = 1, stride = C */
static int dev_rows_rmsnorm_forward(bk_backend *be, float *out, float *rstd, const float *inp, const float *weight,
                                    int N, int G, int hd, int stride, float eps, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    const int64_t rows = (int64_t)N * G;
    if (rows == 0)
        return BK_OK;
    k_rmsnorm_args a;
    memset(&a, 0, sizeof a);
    a.out = out, a.rstd = rstd, a.inp = inp, a.weight = weight, a.eps = eps, a.N = rows, a.C = hd;
    a.G = G, a.stride = stride;
    return BK_LAUNCH_CTA(d, k_rmsnorm_forward, k_rmsnorm_args, k_row_blocks(rows), K_RMSNORM_SMEM_BYTES, a, err);
}

/* dinp += the rows' gradients; dweight += the column sums of x rstd dy in chunks of BK_DEV_ROW_CHUNK rows,
 * then over chunks in order (as LayerNorm's) */
static int dev_rows_rmsnorm_backward(bk_backend *be, float *dinp, float *dweight, const float *dout,
                                     const float *inp, const float *weight, const float *rstd, int N, int G, int hd,
                                     int stride, int accumulate, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    const int64_t rows = (int64_t)N * G;
    if (rows == 0)
        return BK_OK;
    const int64_t chunks = layers_chunks(rows, BK_DEV_ROW_CHUNK);
    void *pw = NULL;
    int rc;
    if ((rc = dev_scratch(d, BK_DEV_SCRATCH_PARTIAL, (size_t)(chunks * hd) * sizeof(double), &pw, err)) != BK_OK)
        return rc;
    k_rmsnorm_args a;
    memset(&a, 0, sizeof a);
    a.dinp = dinp, a.part_w = (double *)pw, a.inp = inp, a.weight = weight, a.dout = dout, a.rstd_in = rstd;
    a.N = rows, a.C = hd, a.G = G, a.stride = stride, a.accumulate = accumulate;
    if ((rc = BK_LAUNCH_CTA(d, k_rmsnorm_backward_dinp, k_rmsnorm_args, k_row_blocks(rows), K_RMSNORM_SMEM_BYTES, a,
                            err)) != BK_OK ||
        (rc = BK_LAUNCH(d, k_rmsnorm_backward_params, k_rmsnorm_args, chunks * hd, a, err)) != BK_OK)
        return rc;
    return dev_column_sum(d, dweight, a.part_w, chunks, hd, err);
}

static int dev_rmsnorm_forward(bk_backend *be, float *out, float *rstd, const float *inp, const float *weight, int N,
                               int C, float eps, bk_error *err)
{
    return dev_rows_rmsnorm_forward(be, out, rstd, inp, weight, N, 1, C, C, eps, err);
}

static int dev_rmsnorm_backward(bk_backend *be, float *dinp, float *dweight, const float *dout, const float *inp,
                                const float *weight, const float *rstd, int N, int C, bk_error *err)
{
    return dev_rows_rmsnorm_backward(be, dinp, dweight, dout, inp, weight, rstd, N, 1, C, C, 1, err);
}

/* QK-norm (model/backend.h): the rows above after bk_headnorm_check */
static int dev_headnorm_forward(bk_backend *be, float *out, float *rstd, const float *inp, const float *weight, int N,
                                int G, int hd, int stride, float eps, bk_error *err)
{
    int rc = bk_headnorm_check(be, "headnorm_forward", N, G, hd, stride, err);
    if (rc != BK_OK)
        return rc;
    return dev_rows_rmsnorm_forward(be, out, rstd, inp, weight, N, G, hd, stride, eps, err);
}

static int dev_headnorm_backward(bk_backend *be, float *dinp, float *dweight, const float *dout, const float *inp,
                                 const float *weight, const float *rstd, int N, int G, int hd, int stride,
                                 bk_error *err)
{
    int rc = bk_headnorm_check(be, "headnorm_backward", N, G, hd, stride, err);
    if (rc != BK_OK)
        return rc;
    return dev_rows_rmsnorm_backward(be, dinp, dweight, dout, inp, weight, rstd, N, G, hd, stride, 0, err);
}

static int dev_swiglu_forward(bk_backend *be, float *out, const float *inp, int N, int F, bk_error *err)
{
    k_swiglu_args a;
    a.out = out, a.inp = inp, a.dout = NULL, a.F = F;
    return BK_LAUNCH(layers_dev(be), k_swiglu_forward, k_swiglu_args, (int64_t)N * F, a, err);
}

static int dev_swiglu_backward(bk_backend *be, float *dinp, const float *inp, const float *dout, int N, int F,
                               bk_error *err)
{
    k_swiglu_args a;
    a.out = dinp, a.inp = inp, a.dout = dout, a.F = F;
    return BK_LAUNCH(layers_dev(be), k_swiglu_backward, k_swiglu_args, (int64_t)N * F, a, err);
}

static int dev_copy_rows(bk_backend *be, float *dst, size_t dst_ld, const float *src, size_t src_ld, size_t rows,
                         size_t width, int accumulate, bk_error *err)
{
    if (!rows || !width)
        return BK_OK;
    k_copy_rows_args a;
    a.dst = dst, a.src = src, a.dst_ld = (int64_t)dst_ld, a.src_ld = (int64_t)src_ld, a.width = (int64_t)width;
    a.accumulate = accumulate;
    return BK_LAUNCH(layers_dev(be), k_copy_rows, k_copy_rows_args, (int64_t)(rows * width), a, err);
}

static int dev_attention_merge(bk_backend *be, float *out, float *lse, const float *part, const float *part_lse, int B,
                               int T, int lo, int C, int H, bk_error *err)
{
    if (T <= lo)
        return BK_OK;
    k_merge_args a;
    a.out = out, a.lse = lse, a.part = part, a.part_lse = part_lse, a.T = T, a.lo = lo, a.C = C, a.H = H;
    int rc = BK_LAUNCH(layers_dev(be), k_merge_out, k_merge_args, (int64_t)B * (T - lo) * C, a, err);
    return rc ? rc : BK_LAUNCH(layers_dev(be), k_merge_lse, k_merge_args, (int64_t)B * H * (T - lo), a, err);
}

static int dev_gqa_check(const char *what, int H, int KV, int hd, bk_error *err)
{
    if (H < 1 || KV < 1 || hd < 1 || H % KV != 0)
        return bk_fail(err, BK_ERR_INVALID,
                       "device %s: %d query heads on %d key/value heads of %d channels; expected positive sizes "
                       "and key/value heads that divide the query heads",
                       what, H, KV, hd);
    return BK_OK;
}

static int dev_gqa_expand(bk_backend *be, float *qkv, const float *qkvr, int N, int H, int KV, int hd, bk_error *err)
{
    int rc = dev_gqa_check("grouped-query expand", H, KV, hd, err);
    if (rc != BK_OK)
        return rc;
    k_gqa_args a;
    a.out = qkv, a.inp = qkvr, a.H = H, a.KV = KV, a.hd = hd;
    return BK_LAUNCH(layers_dev(be), k_gqa_expand, k_gqa_args, (int64_t)N * 3 * H * hd, a, err);
}

static int dev_gqa_reduce(bk_backend *be, float *dqkvr, const float *dqkv, int N, int H, int KV, int hd,
                          bk_error *err)
{
    int rc = dev_gqa_check("grouped-query reduce", H, KV, hd, err);
    if (rc != BK_OK)
        return rc;
    k_gqa_args a;
    a.out = dqkvr, a.inp = dqkv, a.H = H, a.KV = KV, a.hd = hd;
    return BK_LAUNCH(layers_dev(be), k_gqa_reduce, k_gqa_args, (int64_t)N * (H + 2 * KV) * hd, a, err);
}

/* --- matmul -------------------------------------------------------------------------------------
 * Row-major X (r, c) is column-major X^T (c, r) with leading dimension c, so each row-major product
 * is the column-major product of the transposes, in the opposite order:
 *   forward   out (N, OC) = inp (N, C) weight^T      ->  out^T (OC, N) = weight (OC, C) inp^T (C, N):
 *             A = weight seen as (C, OC), transposed; B = inp seen as (C, N); m = OC, n = N, k = C
 *   dinp      dinp (N, C) += dout (N, OC) weight     ->  dinp^T (C, N) += weight^T (C, OC) dout^T (OC, N):
 *             A = weight seen as (C, OC); B = dout seen as (OC, N); m = C, n = N, k = OC
 *   dweight   dweight (OC, C) += dout^T inp (N, C)   ->  dweight^T (C, OC) += inp^T (C, N) dout (N, OC):
 *             A = inp seen as (C, N); B = dout seen as (OC, N), transposed; m = C, n = OC, k = N */

/* out[n][oc] += bias[oc] */
static int dev_bias_add(bk_dev *d, float *out, const float *bias, int N, int OC, bk_error *err)
{
    k_bias_add_args a;
    a.out = out, a.bias = bias, a.OC = OC;
    return BK_LAUNCH(d, k_bias_add, k_bias_add_args, (int64_t)N * OC, a, err);
}

/* dbias[oc] += the column sums of dout (N, OC), in chunks of rows summed in order */
static int dev_bias_backward(bk_dev *d, float *dbias, const float *dout, int N, int OC, bk_error *err)
{
    const int64_t chunks = layers_chunks(N, BK_DEV_ROW_CHUNK);
    void *part = NULL;
    int rc;
    if ((rc = dev_scratch(d, BK_DEV_SCRATCH_PARTIAL, (size_t)(chunks * OC) * sizeof(double), &part, err)) != BK_OK)
        return rc;
    k_column_partials_args a;
    a.part = (double *)part, a.x = dout, a.N = N, a.C = OC;
    if ((rc = BK_LAUNCH(d, k_column_partials, k_column_partials_args, chunks * OC, a, err)) != BK_OK)
        return rc;
    return dev_column_sum(d, dbias, a.part, chunks, OC, err);
}

static int dev_matmul_forward(bk_backend *be, float *out, const float *inp, const float *weight, const float *bias,
                              int N, int C, int OC, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    int rc = dev_gemm(d, 1, 0, OC, N, C, 1.0f, weight, C, 0, inp, C, 0, 0.0f, out, OC, 0, 1, err);
    if (rc != BK_OK || !bias)
        return rc;
    return dev_bias_add(d, out, bias, N, OC, err);
}

/* Accumulates (beta = 1) into dinp and dweight (when not NULL: a frozen weight's is skipped), and dbias
 * (when not NULL) += the column sums of dout (model/layers.h). */
static int dev_matmul_backward(bk_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, int N, int C, int OC, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    int rc;
    if ((rc = dev_gemm(d, 0, 0, C, N, OC, 1.0f, weight, C, 0, dout, OC, 0, 1.0f, dinp, C, 0, 1, err)) != BK_OK ||
        (dweight &&
         (rc = dev_gemm(d, 0, 1, C, OC, N, 1.0f, inp, C, 0, dout, OC, 0, 1.0f, dweight, C, 0, 1, err)) != BK_OK))
        return rc;
    return dbias ? dev_bias_backward(d, dbias, dout, N, OC, err) : BK_OK;
}

/* --- bf16 storage ([run] precision = "bf16"; backend.h) ----------------------------------------- */

static int dev_cast_bf16(bk_backend *be, uint16_t *out, const float *x, size_t n, bk_error *err)
{
    k_bf16_args a;
    a.out = out, a.x = x;
    return BK_LAUNCH(layers_dev(be), k_cast_bf16, k_bf16_args, n, a, err);
}

static int dev_gelu_forward_bf16(bk_backend *be, uint16_t *out, const float *inp, size_t n, bk_error *err)
{
    k_bf16_args a;
    a.out = out, a.x = inp;
    return BK_LAUNCH(layers_dev(be), k_gelu_forward_bf16, k_bf16_args, n, a, err);
}

/* The GEMMs of dev_matmul_forward / backward on bf16 inputs and weights (fp32 outputs); backward rounds
 * dout to bf16 into scratch first, the bias gradient is summed from the fp32 dout. */
static int dev_matmul_forward_bf16(bk_backend *be, float *out, const uint16_t *inp, const uint16_t *weight,
                                   const float *bias, int N, int C, int OC, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    int rc = dev_gemm_bf16(d, 1, 0, OC, N, C, 1.0f, weight, C, 0, inp, C, 0, 0.0f, out, OC, 0, 1, err);
    if (rc != BK_OK || !bias)
        return rc;
    return dev_bias_add(d, out, bias, N, OC, err);
}

static int dev_matmul_backward_bf16(bk_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                                    const uint16_t *inp, const uint16_t *weight, int N, int C, int OC, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    void *buf = NULL;
    int rc;
    if ((rc = dev_scratch(d, BK_DEV_SCRATCH_BF16, (size_t)N * OC * sizeof(uint16_t), &buf, err)) != BK_OK ||
        (rc = dev_cast_bf16(be, (uint16_t *)buf, dout, (size_t)N * OC, err)) != BK_OK)
        return rc;
    const uint16_t *dout16 = (const uint16_t *)buf;
    if ((rc = dev_gemm_bf16(d, 0, 0, C, N, OC, 1.0f, weight, C, 0, dout16, OC, 0, 1.0f, dinp, C, 0, 1, err)) !=
            BK_OK ||
        (dweight &&
         (rc = dev_gemm_bf16(d, 0, 1, C, OC, N, 1.0f, inp, C, 0, dout16, OC, 0, 1.0f, dweight, C, 0, 1, err)) != BK_OK))
        return rc;
    return dbias ? dev_bias_backward(d, dbias, dout, N, OC, err) : BK_OK;
}

/* --- elementwise ------------------------------------------------------------------------------- */

static int dev_gelu_forward(bk_backend *be, float *out, const float *inp, size_t n, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    k_unary_args a;
    a.out = out, a.x = inp, a.dout = NULL, a.s = 0.0f;
    return BK_LAUNCH(d, k_gelu_forward, k_unary_args, n, a, err);
}

static int dev_gelu_backward(bk_backend *be, float *dinp, const float *inp, const float *dout, size_t n, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    k_unary_args a;
    a.out = dinp, a.x = inp, a.dout = dout, a.s = 0.0f;
    return BK_LAUNCH(d, k_gelu_backward, k_unary_args, n, a, err);
}

static int dev_residual_forward(bk_backend *be, float *out, const float *a, const float *b, size_t n, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    k_residual_args r;
    r.out = out, r.out2 = NULL, r.a = a, r.b = b;
    return BK_LAUNCH(d, k_residual_forward, k_residual_args, n, r, err);
}

static int dev_residual_backward(bk_backend *be, float *da, float *db, const float *dout, size_t n, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    k_residual_args r;
    r.out = da, r.out2 = db, r.a = dout, r.b = NULL;
    return BK_LAUNCH(d, k_residual_backward, k_residual_args, n, r, err);
}

/* --- softmax + cross-entropy ------------------------------------------------------------------- */

static int dev_crossentropy_forward(bk_backend *be, float *losses, float *probs, const float *logits,
                                    const int32_t *targets, int N, int V, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    k_crossentropy_args a;
    a.losses = losses, a.probs = probs, a.dlogits = NULL, a.logits = logits, a.probs_in = NULL;
    a.targets = targets, a.dloss = 0.0f, a.N = N, a.V = V;
    if (N == 0)
        return BK_OK;
    return BK_LAUNCH_CTA(d, k_crossentropy_forward, k_crossentropy_args, k_row_blocks(N),
                         K_CROSSENTROPY_SMEM_BYTES, a, err);
}

static int dev_crossentropy_backward(bk_backend *be, float *dlogits, const float *probs, const int32_t *targets,
                                     float dloss, int N, int V, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    k_crossentropy_args a;
    a.losses = NULL, a.probs = NULL, a.dlogits = dlogits, a.logits = NULL, a.probs_in = probs;
    a.targets = targets, a.dloss = dloss, a.N = N, a.V = V;
    return BK_LAUNCH(d, k_crossentropy_backward, k_crossentropy_args, (int64_t)N * V, a, err);
}

/* --- rotary ------------------------------------------------------------------------------------ */

static int dev_rotary(bk_backend *be, float *qkv, const bk_rotary_view *rot, int B, int T, int C, int H, float sign,
                      bk_error *err)
{
    bk_dev *d = layers_dev(be);
    if (!rot || !rot->pairs)
        return BK_OK;
    if (H <= 0 || C % H != 0 || 2 * rot->pairs > C / H)
        return bk_fail(err, BK_ERR_INVALID,
                       "device rotary: %d pairs do not fit heads of %d channels (C = %d, H = %d); "
                       "expected at most head_dim / 2 pairs",
                       (int)rot->pairs, H > 0 ? C / H : 0, C, H);
    k_rotary_args a;
    a.qkv = qkv, a.cos = rot->cos, a.sin = rot->sin, a.kcos = rot->kcos, a.ksin = rot->ksin;
    a.positions = rot->positions;
    a.T = T, a.C = C, a.H = H, a.pairs = rot->pairs, a.sign = sign;
    return BK_LAUNCH(d, k_rotary, k_rotary_args, (int64_t)B * T * 2 * H * rot->pairs, a, err);
}

/* --- reductions read back on the host ------------------------------------------------------------ */

/* The gradient norm's squared sum with adamw.c's grouping: chunk sums of BK_NORM_CHUNK squares in
 * index order (one thread each), then the chunk sums in chunk order (one thread), starting from 0.0. */
static int dev_sumsq(bk_backend *be, const float *x, size_t n, double *out_host, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    const int64_t chunks = layers_chunks((int64_t)n, BK_NORM_CHUNK);
    void *part = NULL, *total = NULL;
    int rc;
    if ((rc = dev_scratch(d, BK_DEV_SCRATCH_PARTIAL, (size_t)(chunks ? chunks : 1) * sizeof(double), &part, err)) !=
            BK_OK ||
        (rc = dev_scratch(d, BK_DEV_SCRATCH_PARTIAL2, sizeof(double), &total, err)) != BK_OK)
        return rc;
    k_sumsq_args a;
    a.part = (double *)part, a.x = x, a.n = (int64_t)n, a.chunk = BK_NORM_CHUNK;
    k_sum_rows_args s;
    s.out = (double *)total, s.part = a.part, s.count = chunks;
    if ((rc = BK_LAUNCH(d, k_sumsq_partials, k_sumsq_args, chunks, a, err)) != BK_OK ||
        (rc = BK_LAUNCH(d, k_sum_rows, k_sum_rows_args, 1, s, err)) != BK_OK)
        return rc;
    return dev_download(d, out_host, total, sizeof(double), err);
}

static int dev_first_nonfinite(bk_backend *be, const float *x, size_t n, int64_t *index_host, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    const int64_t chunks = layers_chunks((int64_t)n, BK_DEV_SCAN_CHUNK);
    void *part = NULL, *out = NULL;
    int rc;
    if ((rc = dev_scratch(d, BK_DEV_SCRATCH_PARTIAL, (size_t)(chunks ? chunks : 1) * sizeof(int64_t), &part, err)) !=
            BK_OK ||
        (rc = dev_scratch(d, BK_DEV_SCRATCH_PARTIAL2, sizeof(int64_t), &out, err)) != BK_OK)
        return rc;
    k_nonfinite_args a;
    a.part = (int64_t *)part, a.out = (int64_t *)out, a.x = x, a.n = (int64_t)n, a.chunks = chunks;
    if ((rc = BK_LAUNCH(d, k_nonfinite_partials, k_nonfinite_args, chunks, a, err)) != BK_OK ||
        (rc = BK_LAUNCH(d, k_first_index, k_nonfinite_args, 1, a, err)) != BK_OK)
        return rc;
    return dev_download(d, index_host, out, sizeof(int64_t), err);
}

/* --- optimizer --------------------------------------------------------------------------------- */

static int dev_scale(bk_backend *be, float *x, size_t n, float s, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    k_unary_args a;
    a.out = x, a.x = NULL, a.dout = NULL, a.s = s;
    return BK_LAUNCH(d, k_scale, k_unary_args, n, a, err);
}

static int dev_adamw(bk_backend *be, float *param, const float *grad, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    k_adamw_args a;
    a.param = param, a.m = m, a.v = v, a.grad = grad, a.lr = lr, a.beta1 = beta1, a.beta2 = beta2, a.eps = eps;
    a.weight_decay = weight_decay, a.bc1 = bc1, a.bc2 = bc2;
    return BK_LAUNCH(d, k_adamw, k_adamw_args, n, a, err);
}

/* --- mixing of bias tables ------------------------------------------------------------------------
 * The host arrays of the call (weights, table pointers, gradient-table pointers) are uploaded into
 * the argument scratch, laid out as [weights: n_terms doubles][tables: n_terms][dtables: n_terms];
 * the upload is queued on the stream, so a later call's upload cannot overwrite them before the
 * kernels of this one have read them. */
static int dev_mix_args(bk_dev *d, k_mix_args *a, const float *const *tables, const double *weights,
                        float *const *dtables, int n_terms, size_t n, bk_error *err)
{
    const size_t nt = (size_t)(n_terms > 0 ? n_terms : 0);
    const size_t wbytes = nt * sizeof(double), pbytes = nt * sizeof(float *);
    void *buf = NULL;
    int rc;
    if (n_terms < 0)
        return bk_fail(err, BK_ERR_INVALID, "device mixing: %d terms; expected a count >= 0", n_terms);
    if ((rc = dev_scratch(d, BK_DEV_SCRATCH_HOST_ARGS, wbytes + 2 * pbytes + 1, &buf, err)) != BK_OK)
        return rc;
    char *base = (char *)buf;
    if (nt && ((rc = dev_upload(d, base, weights, wbytes, err)) != BK_OK ||
               (rc = dev_upload(d, base + wbytes, tables, pbytes, err)) != BK_OK ||
               (dtables && (rc = dev_upload(d, base + wbytes + pbytes, dtables, pbytes, err)) != BK_OK)))
        return rc;
    a->weights = (const double *)(void *)base;
    a->tables = (const float *const *)(void *)(base + wbytes);
    a->dtables = dtables ? (float *const *)(void *)(base + wbytes + pbytes) : NULL;
    a->mixed = NULL, a->dout = NULL, a->out = NULL, a->part = NULL;
    a->n = (int64_t)n, a->chunks = layers_chunks((int64_t)n, BK_DEV_SCAN_CHUNK);
    a->n_terms = n_terms;
    return BK_OK;
}

static int dev_mix_forward(bk_backend *be, bk_mixing mode, const float *const *tables, const double *weights,
                           int n_terms, size_t n, float *out, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    k_mix_args a;
    int rc = dev_mix_args(d, &a, tables, weights, NULL, n_terms, n, err);
    if (rc != BK_OK)
        return rc;
    a.mode = (int)mode, a.out = out;
    return BK_LAUNCH(d, k_mix_forward, k_mix_args, n, a, err);
}

/* dtables per element; dweights as per-(term, chunk) partials in double, summed per term in chunk
 * order on the device, downloaded, and added to dweights_host[t] for the terms that take part. */
static int dev_mix_backward(bk_backend *be, bk_mixing mode, const float *const *tables, const double *weights,
                            int n_terms, size_t n, const float *mixed, const float *dout, float *const *dtables,
                            double *dweights_host, bk_error *err)
{
    bk_dev *d = layers_dev(be);
    k_mix_args a;
    int rc = dev_mix_args(d, &a, tables, weights, dtables, n_terms, n, err);
    if (rc != BK_OK)
        return rc;
    a.mode = (int)mode, a.mixed = mixed, a.dout = dout;
    if (dtables && (rc = BK_LAUNCH(d, k_mix_backward_tables, k_mix_args, n, a, err)) != BK_OK)
        return rc;
    if (!dweights_host || n_terms == 0)
        return BK_OK;
    void *part = NULL, *sums = NULL;
    if ((rc = dev_scratch(d, BK_DEV_SCRATCH_PARTIAL, (size_t)(n_terms * (a.chunks ? a.chunks : 1)) * sizeof(double),
                          &part, err)) != BK_OK ||
        (rc = dev_scratch(d, BK_DEV_SCRATCH_PARTIAL2, (size_t)n_terms * sizeof(double), &sums, err)) != BK_OK)
        return rc;
    a.part = (double *)part;
    k_sum_rows_args s;
    s.out = (double *)sums, s.part = a.part, s.count = a.chunks;
    if ((rc = BK_LAUNCH(d, k_mix_backward_weights, k_mix_args, (int64_t)n_terms * a.chunks, a, err)) != BK_OK ||
        (rc = BK_LAUNCH(d, k_sum_rows, k_sum_rows_args, n_terms, s, err)) != BK_OK)
        return rc;
    /* n_terms is small (the terms on one stream): the sums come back through a stack buffer in rounds */
    enum { ROUND = 32 };
    double host[ROUND];
    for (int t0 = 0; t0 < n_terms; t0 += ROUND) {
        const int count = n_terms - t0 < ROUND ? n_terms - t0 : ROUND;
        if ((rc = dev_download(d, host, (const double *)sums + t0, (size_t)count * sizeof(double), err)) != BK_OK)
            return rc;
        for (int t = 0; t < count; t++)
            if (mode == BK_MIX_SUM || weights[t0 + t] > 0.0)
                dweights_host[t0 + t] += host[t];
    }
    return BK_OK;
}

#endif
