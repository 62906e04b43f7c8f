/* The seam between the model and the hardware that computes it (docs/design.md §6.1).
 *
 * The model (gpt.c), the bias runtime (bias.c, positions.c) and the optimizer (adamw.c) hold their
 * tensors in a backend's memory and run every layer through one table of functions, one
 * forward/backward pair per layer (llm.c's shape). Three backends implement the table:
 *
 *   cpu       the reference: OpenBLAS + OpenMP on host memory (core/cpu/backend_cpu.c); its memory
 *             is ordinary host memory, so nothing is copied;
 *   cuda      fp32 kernels and cuBLAS on one CUDA stream (core/cuda/backend_cuda.cu); memory is
 *             device memory: only upload/download cross the bus;
 *   emulated  the cuda backend's own code (core/gpu/) compiled as C: every kernel body runs as a
 *             loop over its thread indices and the cuBLAS calls as column-major sgemms on the host.
 *             Slow; it exists so that the device algorithms — their tiling, the fixed order of
 *             every reduction, the GEMM arguments — are tested on machines without a GPU.
 *
 * Conventions:
 *  - Pointers passed to the functions below are in the backend's memory unless named *_host.
 *  - Shapes and semantics are those of the CPU layers (model/layers.h, cpu/attention.h): backward
 *    functions accumulate (+=) into parameter gradients exactly as documented there.
 *  - Every function returns BK_OK or an error code with `err` filled. Device backends may report a
 *    failure of queued work at the next call that waits (download, sync).
 *  - Results never depend on thread counts or scheduling: every reduction runs in a fixed order. */
#ifndef BK_BACKEND_H
#define BK_BACKEND_H

#include "config/experiment.h"
#include "cpu/attention.h"
#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bk_backend_kind {
    BK_BACKEND_CPU = 0,
    BK_BACKEND_CUDA = 1,
    BK_BACKEND_EMULATED = 2
} bk_backend_kind;

/* Matmul precision of the device backends ([run] matmul): "fp32" keeps IEEE fp32 products, "tf32"
 * lets cuBLAS use TF32 tensor cores (10-bit mantissa inputs, fp32 accumulation), "bf16" bf16 tensor
 * cores (inputs rounded to bf16, fp32 accumulation) for cuBLAS's products and the fused attention's.
 * Storage is bk_precision's (below). The CPU ignores it; the emulated backend rounds the inputs of its
 * products as the GPU does: to bf16, or to TF32 (gpu/mma.h, bk_tf32_round). */
typedef enum bk_matmul_mode {
    BK_MATMUL_FP32 = 0,
    BK_MATMUL_TF32 = 1,
    BK_MATMUL_BF16 = 2
} bk_matmul_mode;

/* Storage of the model on the device backends ([run] precision): "fp32" keeps every activation in fp32
 * (the parity mode); "bf16" keeps the inputs of the GEMMs and of the attention (LayerNorm and GELU
 * outputs, q, k, v, the attention output) and bf16 copies of the weights in bf16, with fp32 master
 * weights, gradients and optimizer state (model/gpt.h); it needs matmul BK_MATMUL_BF16 and the fused
 * attention. Set before the model is built. The CPU computes fp32 and ignores it. */
typedef enum bk_precision {
    BK_PRECISION_FP32 = 0,
    BK_PRECISION_BF16 = 1
} bk_precision;

/* Attention ([run] attention). On a device: "fused" runs the flash-style block programs
 * (gpu/kernels_flash.h), which keep B*H*T row statistics for backward and never store a T x T matrix;
 * "materialized" runs GEMMs and row kernels over the saved B*H*T*T probabilities (gpu/ops_attention.h);
 * "auto" is "fused". On the CPU (one backend per mode: bk_backend_cpu_attention): "fused" runs the
 * flash-style kernel of cpu/attention_flash.c for training and evaluation; "materialized" the blocked
 * kernel of cpu/attention.c, which saves the probabilities for backward (and for the receptive-field
 * analysis); "auto" the blocked kernel for training and for evaluations of up to
 * BK_CPU_FLASH_EVAL_FROM - 1 tokens, the flash kernel for longer evaluations (without counted positions,
 * which only the blocked kernel computes). Set before the model is built (attention_saved depends on
 * it). */
typedef enum bk_attention_mode {
    BK_ATTENTION_FUSED = 0,
    BK_ATTENTION_MATERIALIZED = 1,
    BK_ATTENTION_AUTO = 2
} bk_attention_mode;

/* The shortest forward-only pass the CPU's "auto" attention runs flash-style: evaluations up to 1024
 * tokens keep the blocked kernel's bits (its 64 x T block of scores, 256 KiB at T = 1024, still fits the
 * L2 cache); beyond, the blocked kernel's rows of T scores leave the cache and the flash kernel is faster
 * (docs/performance.md, "Long context on the CPU"). */
#define BK_CPU_FLASH_EVAL_FROM 1025

/* Rotary embedding of q and k (positions.h): pair k of a head is (x[k], x[k + pairs]), rotated by
 * the angle whose cosine and sine are cos[p * pairs + k], sin[p * pairs + k], p = positions[n] (or
 * the token index n % T when positions is NULL). */
typedef struct bk_rotary_view {
    const float *cos, *sin; /* (rows, pairs) */
    const float *kcos, *ksin; /* k's own tables (rows, pairs) when they differ from q's (a decay), else NULL */
    const int32_t *positions;
    int32_t pairs, rows;
} bk_rotary_view;

/* The token ids of a batch, encoder backward's bucketing of them (computed on the host when the
 * batch is loaded, so that the device sums every embedding row's contributions in a fixed order with
 * no atomics), all in backend memory except *_host. */
typedef struct bk_batch_view {
    const int32_t *inputs, *targets;       /* (B, T); targets may be NULL */
    const int32_t *inputs_host;            /* the same ids on the host */
    /* Buckets: the distinct input ids (n_buckets of them, ascending), and for bucket u the token
     * indices bucket_tokens[bucket_start[u] .. bucket_start[u + 1]) in ascending order. */
    const int32_t *bucket_ids, *bucket_start, *bucket_tokens;
    int32_t n_buckets;
} bk_batch_view;

typedef struct bk_backend bk_backend;

/* How an operation's storage-typed tensors hold their values: fp32, or bf16 bits (uint16_t, rounded to
 * nearest even; [run] precision = "bf16", device backends only: the CPU refuses it with
 * BK_ERR_UNSUPPORTED). One entry per operation takes the tag; which tensors it types is said at each. */
typedef enum bk_storage { BK_STORAGE_FP32 = 0, BK_STORAGE_BF16 = 1 } bk_storage;

/* Bytes per value of storage `s`. */
static inline size_t bk_storage_bytes(bk_storage s)
{
    return s == BK_STORAGE_BF16 ? 2 : 4;
}

struct bk_backend {
    bk_backend_kind kind;
    const char *name;    /* "cpu", "cuda", "emulated" */
    char description[192]; /* one line for the banner: "cuda:0 NVIDIA H100 80GB HBM3 (sm_90), fp32 matmuls" */
    int on_device;       /* 1: memory is not host memory; go through upload/download */
    bk_matmul_mode matmul;
    bk_attention_mode attention; /* see above */
    bk_precision precision;      /* device backends only (see above) */
    void *impl;          /* the backend's own state */

    /* --- memory ------------------------------------------------------------------------------ */
    /* Zeroed allocation of `bytes` (0 gives a valid, unique pointer). */
    int (*alloc)(bk_backend *be, void **ptr, size_t bytes, bk_error *err);
    void (*release)(bk_backend *be, void *ptr);
    int (*upload)(bk_backend *be, void *dst, const void *src_host, size_t bytes, bk_error *err);
    /* Waits for queued work, then copies. */
    int (*download)(bk_backend *be, void *dst_host, const void *src, size_t bytes, bk_error *err);
    int (*copy)(bk_backend *be, void *dst, const void *src, size_t bytes, bk_error *err);
    int (*zero)(bk_backend *be, void *ptr, size_t bytes, bk_error *err);
    /* Waits for queued work and reports its failure. */
    int (*sync)(bk_backend *be, bk_error *err);
    /* The cudaStream_t plugins' CUDA variants enqueue on; NULL on the CPU and when emulated (plugins'
     * CUDA code is not called there: the host variant and a copy stand in). */
    void *(*stream)(bk_backend *be);

    /* --- layers (model/layers.h) --------------------------------------------------------------- */
    int (*encoder_forward)(bk_backend *be, float *out, const bk_batch_view *batch, const float *wte, int B, int T,
                           int C, bk_error *err);
    int (*encoder_backward)(bk_backend *be, float *dwte, const float *dout, const bk_batch_view *batch, int B, int T,
                            int C, bk_error *err);
    /* out in storage s (mean, rstd, inp, weight, bias fp32) */
    int (*layernorm_forward)(bk_backend *be, bk_storage s, void *out, float *mean, float *rstd, const float *inp,
                             const float *weight, const float *bias, int N, int C, bk_error *err);
    int (*layernorm_backward)(bk_backend *be, float *dinp, float *dweight, float *dbias, const float *dout,
                              const float *inp, const float *weight, const float *mean, const float *rstd, int N,
                              int C, bk_error *err);
    /* inp and weight in storage s, fp32 accumulation; out, dinp, dweight, dbias and dout fp32 (with bf16
     * storage the backward rounds dout to bf16 for its products; dbias sums the fp32 dout). Backward
     * accumulates into dinp, dweight and dbias; dweight or dbias NULL: not computed (a frozen weight). */
    int (*matmul_forward)(bk_backend *be, bk_storage s, float *out, const void *inp, const void *weight,
                          const float *bias, int N, int C, int OC, bk_error *err);
    int (*matmul_backward)(bk_backend *be, bk_storage s, float *dinp, float *dweight, float *dbias, const float *dout,
                           const void *inp, const void *weight, int N, int C, int OC, bk_error *err);
    /* out = GELU(inp) in storage s (inp fp32) */
    int (*gelu_forward)(bk_backend *be, bk_storage s, void *out, const float *inp, size_t n, bk_error *err);
    /* out = bf16(x) (device backends; NULL on the CPU) */
    int (*cast_bf16)(bk_backend *be, uint16_t *out, const float *x, size_t n, bk_error *err);
    int (*gelu_backward)(bk_backend *be, float *dinp, const float *inp, const float *dout, size_t n, bk_error *err);
    /* The LLaMA family's layers (model/layers.h: RMSNorm, SwiGLU, grouped-query heads), fp32 only: every
     * backend has them (the device ones: gpu/kernels_layers.h, over model/llama_math.h's formulas); the model
     * refuses [model] family = "llama" with bf16 storage (bk_gpt_set_backend). */
    int (*rmsnorm_forward)(bk_backend *be, float *out, float *rstd, const float *inp, const float *weight, int N,
                           int C, float eps, bk_error *err);
    int (*rmsnorm_backward)(bk_backend *be, float *dinp, float *dweight, const float *dout, const float *inp,
                            const float *weight, const float *rstd, int N, int C, bk_error *err);
    /* RMSNorm of N x G rows of hd channels at offset (r / G) * stride + (r % G) * hd (r < N G; QK-norm: the
     * query or key heads of a q/k/v product row), one weight of hd shared by the G rows of a token;
     * rstd (N G) per row; out has inp's layout (only the rows are written) and must not alias inp (the
     * model keeps the un-normalised input for the backward). Backward: dinp's rows are written (= 0 + their
     * gradient, the same layout; the rest of dinp is untouched), dweight (hd) += the sum over all N G rows.
     * rmsnorm_forward's bits at G = 1, stride = C, and rmsnorm_backward's on a zero dinp; sizes checked by
     * bk_headnorm_check. */
    int (*headnorm_forward)(bk_backend *be, float *out, float *rstd, const float *inp, const float *weight, int N,
                            int G, int hd, int stride, float eps, bk_error *err);
    int (*headnorm_backward)(bk_backend *be, float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int G, int hd, int stride, bk_error *err);
    int (*swiglu_forward)(bk_backend *be, float *out, const float *inp, int N, int F, bk_error *err);
    int (*swiglu_backward)(bk_backend *be, float *dinp, const float *inp, const float *dout, int N, int F,
                           bk_error *err);
    int (*gqa_expand)(bk_backend *be, float *qkv, const float *qkvr, int N, int H, int KV, int hd, bk_error *err);
    int (*gqa_reduce)(bk_backend *be, float *dqkvr, const float *dqkv, int N, int H, int KV, int hd, bk_error *err);
    int (*residual_forward)(bk_backend *be, float *out, const float *a, const float *b, size_t n, bk_error *err);
    int (*residual_backward)(bk_backend *be, float *da, float *db, const float *dout, size_t n, bk_error *err);
    /* Fused softmax + cross-entropy over N rows of V logits: losses[n]; probs kept when not NULL. */
    int (*crossentropy_forward)(bk_backend *be, float *losses, float *probs, const float *logits,
                                const int32_t *targets, int N, int V, bk_error *err);
    int (*crossentropy_backward)(bk_backend *be, float *dlogits, const float *probs, const int32_t *targets,
                                 float dloss, int N, int V, bk_error *err);
    /* sign +1: rotate q and k of qkv (N, 3C) forward; -1: the inverse rotation (backward). */
    int (*rotary)(bk_backend *be, float *qkv, const bk_rotary_view *rot, int B, int T, int C, int H, float sign,
                  bk_error *err);

    /* --- attention (cpu/attention.h) ------------------------------------------------------------
     * The interface the fused kernel of a later backend implements too: forward keeps, in `saved`,
     * whatever its backward needs (attention_saved floats: the probabilities here, row statistics
     * for a flash-style kernel); with saved == NULL it is forward-only and needs no T x T buffer.
     * The bias's tables and positions are in backend memory. */
    size_t (*attention_saved)(bk_backend *be, int B, int T, int H);
    /* q, k, v (qkv), dO (dout) and the output (out) in storage s (bf16: the output written rounded to
     * nearest even; device backends with the fused attention and matmul BK_MATMUL_BF16 only, another
     * configuration refused with BK_ERR_UNSUPPORTED naming what it needs); saved, dqkv and dtable fp32. */
    int (*attention_forward)(bk_backend *be, bk_storage s, void *out, float *saved, const void *qkv,
                             const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err);
    /* dtable[s] (H x distances), when not NULL, += the diagonal-reduced score gradient. `out` is the
     * forward's output (the fused kernel's backward reads it; the CPU's does not). */
    int (*attention_backward)(bk_backend *be, bk_storage s, float *dqkv, float *const dtable[BK_STREAM_COUNT],
                              const void *dout, const void *qkv, const void *out, const float *saved,
                              const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err);

    /* --- position views (model/views.h): one flash pass per view, merged by log-sum-exp, fp32 --------
     * dst row r (width floats from dst + r * dst_ld) = src row r (from src + r * src_ld), r < rows; with
     * accumulate, dst += src. */
    int (*copy_rows)(bk_backend *be, float *dst, size_t dst_ld, const float *src, size_t src_ld, size_t rows,
                     size_t width, int accumulate, bk_error *err);
    /* The flash-style attention whatever [run] attention says: out (B, T, C) and every row's log-sum-exp
     * of its scores, lse (B, H, T); backward from them (dqkv +=; the bias's terms get no gradients). */
    int (*attention_lse_forward)(bk_backend *be, float *out, float *lse, const float *qkv,
                                 const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err);
    int (*attention_lse_backward)(bk_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
                                  const float *lse, const bk_attention_bias *bias, int B, int T, int C, int H,
                                  bk_error *err);
    /* Rows i >= lo of out (B, T, C) and lse (B, H, T), one pass's, merged with another pass over other keys
     * of the same rows, part (B, T - lo, C) and part_lse (B, H, T - lo) for rows lo .. T - 1
     * (bk_lse_merge, model/softmax_math.h). */
    int (*attention_merge)(bk_backend *be, float *out, float *lse, const float *part, const float *part_lse, int B,
                           int T, int lo, int C, int H, bk_error *err);

    /* --- bias tables (bias/mix.h) ---------------------------------------------------------------- */
    /* out[k] = mix of tables[t][k], k < n (tables: n_terms pointers in backend memory, the array itself
     * on the host; weights on the host). */
    int (*mix_forward)(bk_backend *be, bk_mixing mode, const float *const *tables, const double *weights,
                       int n_terms, size_t n, float *out, bk_error *err);
    /* dtables[t] (NULL: skip) += ..., and dweights_host[t] (NULL: skip) += sum_k ..., as bk_mix_backward. */
    int (*mix_backward)(bk_backend *be, bk_mixing mode, const float *const *tables, const double *weights,
                        int n_terms, size_t n, const float *mixed, const float *dout, float *const *dtables,
                        double *dweights_host, bk_error *err);
    /* *index_host = the first k < n with x[k] not finite, or -1. */
    int (*first_nonfinite)(bk_backend *be, const float *x, size_t n, int64_t *index_host, bk_error *err);

    /* --- optimizer (train/adamw.h) ------------------------------------------------------------- */
    /* *out_host = sum of grad[k]^2 in double, summed in chunks of BK_NORM_CHUNK values in index order,
     * then the chunk sums in index order: the CPU's order, so equal gradients give equal bits. */
    int (*sumsq)(bk_backend *be, const float *x, size_t n, double *out_host, bk_error *err);
    int (*scale)(bk_backend *be, float *x, size_t n, float s, bk_error *err);
    /* One AdamW step of n values (adamw.h), bias corrections bc1 = 1 - beta1^t, bc2 = 1 - beta2^t. */
    int (*adamw)(bk_backend *be, float *param, const float *grad, float *m, float *v, size_t n, float lr,
                 float beta1, float beta2, float eps, float weight_decay, float bc1, float bc2, bk_error *err);

    void (*destroy)(bk_backend *be);
};

/* BK_OK, or BK_ERR_INVALID naming backend `be`, operation `op` ("headnorm_forward", "headnorm_backward") and
 * the sizes, unless N >= 0, G >= 1, hd >= 1 and stride >= G hd (G heads of hd channels fit in a row of stride
 * floats): what every backend's headnorm_forward and headnorm_backward check first. Inline: the CUDA module
 * links no engine function but bk_fail. */
static inline int bk_headnorm_check(const bk_backend *be, const char *op, int N, int G, int hd, int stride,
                                    bk_error *err)
{
    if (N < 0 || G < 1 || hd < 1 || (int64_t)stride < (int64_t)G * hd)
        return bk_fail(err, BK_ERR_INVALID,
                       "%s %s: %d tokens of %d heads of %d channels in rows of %d floats; expected at least 0 "
                       "tokens, 1 head and 1 channel, and rows of at least heads x channels floats",
                       be->name, op, N, G, hd, stride);
    return BK_OK;
}

/* Values per chunk of the gradient norm's first summation level (adamw.c and every backend). */
#define BK_NORM_CHUNK 4096

/* The CPU backend (a static object: destroy is a no-op). */
bk_backend *bk_backend_cpu(void);
/* The CPU backend whose attention is `mode` (bk_backend_cpu() is the BK_ATTENTION_AUTO one). */
bk_backend *bk_backend_cpu_attention(bk_attention_mode mode);

/* A CUDA backend on device 0 with its own stream and cuBLAS handle; BK_ERR_DEVICE naming what failed
 * when no GPU answers, BK_ERR_UNSUPPORTED in a build without CUDA. */
int bk_backend_cuda_create(bk_backend **out, bk_matmul_mode matmul, bk_error *err);

/* The emulated device backend (core/gpu/backend_emulated.c); matmul BK_MATMUL_BF16 rounds the inputs of
 * every GEMM and of the fused attention's products to bf16 as the GPU does, the other modes compute fp32. */
int bk_backend_emulated_create(bk_backend **out, bk_matmul_mode matmul, bk_error *err);

void bk_backend_destroy(bk_backend *be);

/* Build the encoder-backward buckets of a batch on the host: ids (n_buckets), start (n_buckets + 1),
 * tokens (n) from inputs (n); scratch arrays of n + 1 entries each. Returns n_buckets. */
int32_t bk_batch_buckets(const int32_t *inputs, int64_t n, int32_t *ids, int32_t *start, int32_t *tokens);

#ifdef __cplusplus
}
#endif

#endif
