/* The CPU backend (model/backend.h): the reference every other backend is tested against. Its
 * memory is host memory and its layers are the functions of model/layers.h, cpu/attention.h and
 * bias/mix.h; this file only adapts them to the table. */
#include "model/backend.h"

#include "bias/mix.h"
#include "model/host_simd.h"
#include "model/layers.h"
#include "model/rotary_math.h"
#include "train/adamw_math.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static int cpu_alloc(bk_backend *be, void **ptr, size_t bytes, bk_error *err)
{
    (void)be;
    *ptr = calloc(1, bytes ? bytes : 1);
    if (*ptr)
        return BK_OK;
    return bk_fail(err, BK_ERR_NOMEM, "cpu backend: out of memory for %zu bytes (%.1f MiB) of host memory", bytes,
                   (double)bytes / (1024.0 * 1024.0));
}

static void cpu_release(bk_backend *be, void *ptr)
{
    (void)be;
    free(ptr);
}

static int cpu_copy(bk_backend *be, void *dst, const void *src, size_t bytes, bk_error *err)
{
    (void)be, (void)err;
    if (bytes && dst != src)
        memmove(dst, src, bytes);
    return BK_OK;
}

/* Pieces of a large zeroing shared out over the threads: a step's activation gradients (hundreds of MiB)
 * are zeroed faster by every core than by one; below CPU_ZERO_SHARED_FROM pieces one memset. */
#define CPU_ZERO_PIECE ((size_t)1 << 20)
#define CPU_ZERO_SHARED_FROM 4

static int cpu_zero(bk_backend *be, void *ptr, size_t bytes, bk_error *err)
{
    (void)be, (void)err;
    const size_t pieces = (bytes + CPU_ZERO_PIECE - 1) / CPU_ZERO_PIECE;
    if (pieces < CPU_ZERO_SHARED_FROM || omp_in_parallel()) {
        if (bytes)
            memset(ptr, 0, bytes);
        return BK_OK;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < pieces; i++) {
        const size_t at = i * CPU_ZERO_PIECE;
        memset((char *)ptr + at, 0, bytes - at < CPU_ZERO_PIECE ? bytes - at : CPU_ZERO_PIECE);
    }
    return BK_OK;
}

static int cpu_sync(bk_backend *be, bk_error *err)
{
    (void)be, (void)err;
    return BK_OK;
}

static void *cpu_stream(bk_backend *be)
{
    (void)be;
    return NULL;
}

static int cpu_encoder_forward(bk_backend *be, float *out, const bk_batch_view *batch, const float *wte, int B, int T,
                               int C, bk_error *err)
{
    (void)be, (void)err;
    bk_encoder_forward(out, batch->inputs, wte, B, T, C);
    return BK_OK;
}

static int cpu_encoder_backward(bk_backend *be, float *dwte, const float *dout, const bk_batch_view *batch, int B,
                                int T, int C, bk_error *err)
{
    (void)be, (void)err;
    bk_encoder_backward(dwte, dout, batch->inputs, B, T, C);
    return BK_OK;
}

/* The CPU computes and stores fp32 only: bf16 storage is the device backends' ([run] precision). */
static int cpu_fp32_only(bk_storage s, const char *op, bk_error *err)
{
    if (s == BK_STORAGE_FP32)
        return BK_OK;
    return bk_fail(err, BK_ERR_UNSUPPORTED,
                   "the CPU backend's %s stores fp32 only; bf16 storage ([run] precision = \"bf16\") is for a GPU",
                   op);
}

static int cpu_layernorm_forward(bk_backend *be, bk_storage s, void *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int N, int C, bk_error *err)
{
    (void)be;
    int rc = cpu_fp32_only(s, "layernorm_forward", err);
    if (!rc)
        bk_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
    return rc;
}

static int cpu_layernorm_backward(bk_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean, const float *rstd, int N,
                                  int C, bk_error *err)
{
    (void)be, (void)err;
    bk_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    return BK_OK;
}

static int cpu_rmsnorm_forward(bk_backend *be, float *out, float *rstd, const float *inp, const float *weight, int N,
                               int C, float eps, bk_error *err)
{
    (void)be, (void)err;
    bk_rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
    return BK_OK;
}

static int cpu_rmsnorm_backward(bk_backend *be, float *dinp, float *dweight, const float *dout, const float *inp,
                                const float *weight, const float *rstd, int N, int C, bk_error *err)
{
    (void)be, (void)err;
    bk_rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
    return BK_OK;
}

static int cpu_headnorm_forward(bk_backend *be, float *out, float *rstd, const float *inp, const float *weight, int N,
                                int G, int hd, int stride, float eps, bk_error *err)
{
    int rc = bk_headnorm_check(be, "headnorm_forward", N, G, hd, stride, err);
    if (!rc)
        bk_headnorm_forward(out, rstd, inp, weight, N, G, hd, stride, eps);
    return rc;
}

static int cpu_headnorm_backward(bk_backend *be, float *dinp, float *dweight, const float *dout, const float *inp,
                                 const float *weight, const float *rstd, int N, int G, int hd, int stride,
                                 bk_error *err)
{
    int rc = bk_headnorm_check(be, "headnorm_backward", N, G, hd, stride, err);
    if (!rc)
        bk_headnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, G, hd, stride, 0);
    return rc;
}

static int cpu_swiglu_forward(bk_backend *be, float *out, const float *inp, int N, int F, bk_error *err)
{
    (void)be, (void)err;
    bk_swiglu_forward(out, inp, N, F);
    return BK_OK;
}

static int cpu_swiglu_backward(bk_backend *be, float *dinp, const float *inp, const float *dout, int N, int F,
                               bk_error *err)
{
    (void)be, (void)err;
    bk_swiglu_backward(dinp, inp, dout, N, F);
    return BK_OK;
}

static int cpu_gqa_expand(bk_backend *be, float *qkv, const float *qkvr, int N, int H, int KV, int hd, bk_error *err)
{
    (void)be, (void)err;
    bk_gqa_expand(qkv, qkvr, N, H, KV, hd);
    return BK_OK;
}

static int cpu_gqa_reduce(bk_backend *be, float *dqkvr, const float *dqkv, int N, int H, int KV, int hd,
                          bk_error *err)
{
    (void)be, (void)err;
    bk_gqa_reduce(dqkvr, dqkv, N, H, KV, hd);
    return BK_OK;
}

static int cpu_matmul_forward(bk_backend *be, bk_storage s, float *out, const void *inp, const void *weight,
                              const float *bias, int N, int C, int OC, bk_error *err)
{
    (void)be;
    int rc = cpu_fp32_only(s, "matmul_forward", err);
    if (!rc)
        bk_matmul_forward(out, inp, weight, bias, N, C, OC);
    return rc;
}

static int cpu_matmul_backward(bk_backend *be, bk_storage s, float *dinp, float *dweight, float *dbias,
                               const float *dout, const void *inp, const void *weight, int N, int C, int OC,
                               bk_error *err)
{
    (void)be;
    int rc = cpu_fp32_only(s, "matmul_backward", err);
    if (!rc)
        bk_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
    return rc;
}

static int cpu_gelu_forward(bk_backend *be, bk_storage s, void *out, const float *inp, size_t n, bk_error *err)
{
    (void)be;
    int rc = cpu_fp32_only(s, "gelu_forward", err);
    if (!rc)
        bk_gelu_forward(out, inp, n);
    return rc;
}

static int cpu_gelu_backward(bk_backend *be, float *dinp, const float *inp, const float *dout, size_t n, bk_error *err)
{
    (void)be, (void)err;
    bk_gelu_backward(dinp, inp, dout, n);
    return BK_OK;
}

static int cpu_residual_forward(bk_backend *be, float *out, const float *a, const float *b, size_t n, bk_error *err)
{
    (void)be, (void)err;
    bk_residual_forward(out, a, b, n);
    return BK_OK;
}

static int cpu_residual_backward(bk_backend *be, float *da, float *db, const float *dout, size_t n, bk_error *err)
{
    (void)be, (void)err;
    bk_residual_backward(da, db, dout, n);
    return BK_OK;
}

static int cpu_crossentropy_forward(bk_backend *be, float *losses, float *probs, const float *logits,
                                    const int32_t *targets, int N, int V, bk_error *err)
{
    (void)be, (void)err;
    bk_crossentropy_forward(losses, probs, logits, targets, N, V);
    return BK_OK;
}

static int cpu_crossentropy_backward(bk_backend *be, float *dlogits, const float *probs, const int32_t *targets,
                                     float dloss, int N, int V, bk_error *err)
{
    (void)be, (void)err;
    bk_crossentropy_backward(dlogits, probs, targets, dloss, N, V);
    return BK_OK;
}

/* sign = +1 rotates by +theta (forward), -1 by -theta (the transpose: backward). */
static int cpu_rotary(bk_backend *be, float *qkv, const bk_rotary_view *rot, int B, int T, int C, int H, float sign,
                      bk_error *err)
{
    (void)be, (void)err;
    const int hd = C / H, half = rot->pairs;
    const int64_t n = (int64_t)B * T;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const int32_t p = rot->positions ? rot->positions[i] : (int32_t)(i % T);
        for (int part = 0; part < 2; part++) { /* q, then k (its own tables when it has them) */
            const float *ct = part && rot->kcos ? rot->kcos : rot->cos, *st = part && rot->ksin ? rot->ksin : rot->sin;
            const float *c = ct + (size_t)p * half, *s = st + (size_t)p * half;
            for (int h = 0; h < H; h++) {
                float *x = qkv + (size_t)i * 3 * C + (size_t)part * C + (size_t)h * hd;
                for (int k = 0; k < half; k++)
                    bk_rotate_pair(&x[k], &x[k + half], c[k], sign * s[k]);
            }
        }
    }
    return BK_OK;
}

/* The attention of each mode (model/backend.h): the blocked kernel saves B*H*T*T probabilities, the
 * flash one B*H*T row log-sum-exps. */
static int cpu_flash_saves(const bk_backend *be)
{
    return be->attention == BK_ATTENTION_FUSED;
}

static size_t cpu_attention_saved(bk_backend *be, int B, int T, int H)
{
    return cpu_flash_saves(be) ? (size_t)B * H * T : (size_t)B * H * T * T;
}

static int cpu_attention_forward(bk_backend *be, bk_storage s, void *out, float *saved, const void *qkv,
                                 const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err)
{
    int rc = cpu_fp32_only(s, "attention_forward", err);
    if (rc)
        return rc;
    const int flash = cpu_flash_saves(be) || (be->attention == BK_ATTENTION_AUTO && !saved &&
                                              T >= BK_CPU_FLASH_EVAL_FROM && !(bias && bias->cope));
    if (flash)
        return bk_attention_flash_forward(out, saved, qkv, bias, B, T, C, H, err);
    return bk_attention_forward(out, saved, qkv, bias, B, T, C, H, err);
}

static int cpu_copy_rows(bk_backend *be, float *dst, size_t dst_ld, const float *src, size_t src_ld, size_t rows,
                         size_t width, int accumulate, bk_error *err)
{
    (void)be, (void)err;
    bk_copy_rows(dst, dst_ld, src, src_ld, rows, width, accumulate);
    return BK_OK;
}

static int cpu_attention_lse_forward(bk_backend *be, float *out, float *lse, const float *qkv,
                                     const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err)
{
    (void)be;
    return bk_attention_flash_forward(out, lse, qkv, bias, B, T, C, H, err);
}

static int cpu_attention_lse_backward(bk_backend *be, float *dqkv, const float *dout, const float *qkv,
                                      const float *out, const float *lse, const bk_attention_bias *bias, int B, int T,
                                      int C, int H, bk_error *err)
{
    (void)be;
    float *const none[BK_STREAM_COUNT] = {NULL, NULL};
    return bk_attention_flash_backward(dqkv, none, dout, qkv, out, lse, bias, B, T, C, H, err);
}

static int cpu_attention_merge(bk_backend *be, float *out, float *lse, const float *part, const float *part_lse, int B,
                               int T, int lo, int C, int H, bk_error *err)
{
    (void)be, (void)err;
    bk_attention_merge(out, lse, part, part_lse, B, T, lo, C, H);
    return BK_OK;
}

static int cpu_attention_backward(bk_backend *be, bk_storage s, float *dqkv, float *const dtable[BK_STREAM_COUNT],
                                  const void *dout, const void *qkv, const void *out, const float *saved,
                                  const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err)
{
    int rc = cpu_fp32_only(s, "attention_backward", err);
    if (rc)
        return rc;
    if (cpu_flash_saves(be))
        return bk_attention_flash_backward(dqkv, dtable, dout, qkv, out, saved, bias, B, T, C, H, err);
    return bk_attention_backward(dqkv, dtable, dout, qkv, saved, bias, B, T, C, H, err);
}

static int cpu_mix_forward(bk_backend *be, bk_mixing mode, const float *const *tables, const double *weights,
                           int n_terms, size_t n, float *out, bk_error *err)
{
    (void)be, (void)err;
    bk_mix_tables(mode, tables, weights, n_terms, n, out);
    return BK_OK;
}

static int cpu_mix_backward(bk_backend *be, bk_mixing mode, const float *const *tables, const double *weights,
                            int n_terms, size_t n, const float *mixed, const float *dout, float *const *dtables,
                            double *dweights_host, bk_error *err)
{
    (void)be, (void)err;
    bk_mix_backward(mode, tables, weights, n_terms, n, mixed, dout, dtables, dweights_host);
    return BK_OK;
}

static int cpu_first_nonfinite(bk_backend *be, const float *x, size_t n, int64_t *index_host, bk_error *err)
{
    (void)be, (void)err;
    *index_host = -1;
    for (size_t k = 0; k < n; k++)
        if (!isfinite(x[k])) {
            *index_host = (int64_t)k;
            break;
        }
    return BK_OK;
}

/* Chunk sums of BK_NORM_CHUNK values, a round of them in parallel, then the chunk sums in index order:
 * the grouping of the additions depends on neither the thread count nor the order threads finish in
 * (an OpenMP reduction(+) depends on both), so gradient clipping — and with it every weight — is
 * bit-identical however many threads run, and the device backends reproduce it exactly. */
enum { NORM_ROUND = 256 };

static int cpu_sumsq(bk_backend *be, const float *x, size_t n, double *out_host, bk_error *err)
{
    (void)be, (void)err;
    const size_t n_chunks = (n + BK_NORM_CHUNK - 1) / BK_NORM_CHUNK;
    double total = 0.0;
    for (size_t first = 0; first < n_chunks; first += NORM_ROUND) {
        double part[NORM_ROUND];
        const int count = (int)(n_chunks - first < NORM_ROUND ? n_chunks - first : NORM_ROUND);
#pragma omp parallel for schedule(static) if (count > 1)
        for (int c = 0; c < count; c++) {
            size_t lo = (first + (size_t)c) * BK_NORM_CHUNK, hi = lo + BK_NORM_CHUNK < n ? lo + BK_NORM_CHUNK : n;
            double sum = 0.0;
            for (size_t k = lo; k < hi; k++)
                sum += (double)x[k] * x[k];
            part[c] = sum;
        }
        for (int c = 0; c < count; c++)
            total += part[c];
    }
    *out_host = total;
    return BK_OK;
}

BK_HOST_CLONES
static int cpu_scale(bk_backend *be, float *x, size_t n, float s, bk_error *err)
{
    (void)be, (void)err;
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < n; k++)
        x[k] *= s;
    return BK_OK;
}

BK_HOST_CLONES
static int cpu_adamw(bk_backend *be, float *param, const float *grad, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2, bk_error *err)
{
    (void)be, (void)err;
#pragma omp parallel for schedule(static)
    for (size_t k = 0; k < n; k++)
        bk_adamw_update(&param[k], grad[k], &m[k], &v[k], lr, beta1, beta2, eps, weight_decay, bc1, bc2);
    return BK_OK;
}

static void cpu_destroy(bk_backend *be)
{
    (void)be; /* static */
}

/* One CPU backend per attention mode: the same functions; `what` ends the description. */
#define CPU_BACKEND(mode, what)                               \
    {                                                         \
    .kind = BK_BACKEND_CPU,                                   \
    .name = "cpu",                                            \
    .description = "cpu (OpenBLAS + OpenMP, fp32" what ")",   \
    .attention = (mode),                                      \
    .on_device = 0,                                           \
    .matmul = BK_MATMUL_FP32,                                 \
    .impl = NULL,                                             \
    .alloc = cpu_alloc,                                       \
    .release = cpu_release,                                   \
    .upload = cpu_copy,                                       \
    .download = cpu_copy,                                     \
    .copy = cpu_copy,                                         \
    .zero = cpu_zero,                                         \
    .sync = cpu_sync,                                         \
    .stream = cpu_stream,                                     \
    .encoder_forward = cpu_encoder_forward,                   \
    .encoder_backward = cpu_encoder_backward,                 \
    .layernorm_forward = cpu_layernorm_forward,               \
    .layernorm_backward = cpu_layernorm_backward,             \
    .matmul_forward = cpu_matmul_forward,                     \
    .matmul_backward = cpu_matmul_backward,                   \
    .gelu_forward = cpu_gelu_forward,                         \
    .gelu_backward = cpu_gelu_backward,                       \
    .rmsnorm_forward = cpu_rmsnorm_forward,                   \
    .rmsnorm_backward = cpu_rmsnorm_backward,                 \
    .headnorm_forward = cpu_headnorm_forward,                 \
    .headnorm_backward = cpu_headnorm_backward,               \
    .swiglu_forward = cpu_swiglu_forward,                     \
    .swiglu_backward = cpu_swiglu_backward,                   \
    .gqa_expand = cpu_gqa_expand,                             \
    .gqa_reduce = cpu_gqa_reduce,                             \
    .residual_forward = cpu_residual_forward,                 \
    .residual_backward = cpu_residual_backward,               \
    .crossentropy_forward = cpu_crossentropy_forward,         \
    .crossentropy_backward = cpu_crossentropy_backward,       \
    .rotary = cpu_rotary,                                     \
    .attention_saved = cpu_attention_saved,                   \
    .attention_forward = cpu_attention_forward,               \
    .attention_backward = cpu_attention_backward,             \
    .copy_rows = cpu_copy_rows,                               \
    .attention_lse_forward = cpu_attention_lse_forward,       \
    .attention_lse_backward = cpu_attention_lse_backward,     \
    .attention_merge = cpu_attention_merge,                   \
    .mix_forward = cpu_mix_forward,                           \
    .mix_backward = cpu_mix_backward,                         \
    .first_nonfinite = cpu_first_nonfinite,                   \
    .sumsq = cpu_sumsq,                                       \
    .scale = cpu_scale,                                       \
    .adamw = cpu_adamw,                                       \
    .destroy = cpu_destroy,                                   \
    }

static bk_backend cpu_backends[3] = {
    [BK_ATTENTION_FUSED] = CPU_BACKEND(BK_ATTENTION_FUSED, ", fused attention"),
    [BK_ATTENTION_MATERIALIZED] = CPU_BACKEND(BK_ATTENTION_MATERIALIZED, ", materialized attention"),
    [BK_ATTENTION_AUTO] = CPU_BACKEND(BK_ATTENTION_AUTO, ""),
};

bk_backend *bk_backend_cpu_attention(bk_attention_mode mode)
{
    return &cpu_backends[mode == BK_ATTENTION_FUSED || mode == BK_ATTENTION_MATERIALIZED ? mode : BK_ATTENTION_AUTO];
}

bk_backend *bk_backend_cpu(void)
{
    return &cpu_backends[BK_ATTENTION_AUTO];
}
