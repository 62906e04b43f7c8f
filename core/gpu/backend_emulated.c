/* The emulated device backend (model/backend.h): the CUDA backend's own code (gpu/ops_*.h and the
 * kernel bodies of gpu/kernels_*.h) compiled as C11. Each kernel launch runs its body over every
 * thread index (OpenMP-parallel: the bodies write disjoint outputs, so the order is irrelevant) and
 * each GEMM is a column-major sgemm (util/blas.h) per batch entry, with cublasSgemmStridedBatched's
 * arguments unchanged. Memory is host memory, but the model goes through upload/download as it
 * would for a GPU (on_device = 1), so that a missing transfer shows up here too. */
#define _POSIX_C_SOURCE 200809L /* sched_yield */
#include "gpu/dev.h"
#include "gpu/mma.h" /* bk_bf16_round, bk_tf32_round */
#include "model/backend.h"

#include "util/blas.h"
#include <sched.h>
#include <stdlib.h>
#include <string.h>

typedef struct bk_emulated {
    bk_dev dev; /* first: the ops cast be->impl to bk_dev * */
} bk_emulated;

/* Below this many indices a launch runs on the calling thread: starting the team costs more. */
#define EMULATED_PARALLEL_MIN 256

int bk_emulated_launch(int64_t n, bk_dev_kernel f, const void *args)
{
#pragma omp parallel for schedule(static) if (n >= EMULATED_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        f(i, args);
    return BK_OK;
}

int bk_emulated_thread_order = 0;

long long bk_emulated_tile_visits[3] = {0, 0, 0};

int bk_emulated_launch_cta(int64_t n, bk_dev_cta_program f, const void *args, size_t smem_bytes, bk_error *err)
{
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        float *smem = malloc(smem_bytes ? smem_bytes : 1);
        if (!smem)
            failed = 1;
        /* every host thread takes part in the loop (its iterations are shared out) even without memory:
         * it then only skips its blocks, and the launch reports the failure */
#pragma omp for schedule(dynamic, 1)
        for (int64_t cta = 0; cta < n; cta++)
            if (smem)
                f(cta, args, smem);
        free(smem);
    }
    if (failed)
        return bk_fail(err, BK_ERR_NOMEM, "emulated device: out of memory for %zu bytes of a block's shared memory",
                       smem_bytes);
    return BK_OK;
}

/* Turns between blocks (gpu/dev.h): blocks run on the host threads of bk_emulated_launch_cta, which
 * hands them out in ascending order, and take tickets when they start; a turn is waited for by an acquire
 * load (yielding the processor, since the block that passes it may share this core) and passed by a
 * release store after all of the block's writes (one block runs on one host thread). */
uint32_t bk_dev_ticket(uint32_t *counter)
{
    return __atomic_fetch_add(counter, 1u, __ATOMIC_ACQ_REL);
}

void bk_dev_wait_turn(int32_t *turn, int32_t me)
{
    while (__atomic_load_n(turn, __ATOMIC_ACQUIRE) != me)
        sched_yield();
}

void bk_dev_pass_turn(int32_t *turn, int32_t next)
{
    __atomic_store_n(turn, next, __ATOMIC_RELEASE);
}

/* --- the primitives of gpu/dev.h ------------------------------------------------------------------ */

/* The span of a column-major operand of `rows` x `cols` (as stored) with leading dimension ld, rounded
 * to bf16 (tf32 = 0) or to TF32 (tf32 = 1) into a new buffer: what the GPU's bf16 or TF32 tensor cores
 * multiply (NULL when out of memory). */
static float *rounded_copy(const float *x, int rows, int cols, int ld, int tf32)
{
    const size_t span = rows > 0 && cols > 0 ? (size_t)ld * (size_t)(cols - 1) + (size_t)rows : 0;
    float *y = malloc(span ? span * sizeof *y : 1);
    if (y)
        for (size_t i = 0; i < span; i++)
            y[i] = tf32 ? bk_tf32_round(x[i]) : bk_bf16_value(bk_bf16_round(x[i]));
    return y;
}

/* The same span of a bf16 operand widened to float (exact; NULL when out of memory). */
static float *bf16_widened(const uint16_t *x, int rows, int cols, int ld)
{
    const size_t span = rows > 0 && cols > 0 ? (size_t)ld * (size_t)(cols - 1) + (size_t)rows : 0;
    float *y = malloc(span ? span * sizeof *y : 1);
    if (y)
        for (size_t i = 0; i < span; i++)
            y[i] = bk_bf16_value(x[i]);
    return y;
}

static int dev_gemm(bk_dev *d, int transa, int transb, int m, int n, int k, float alpha, const float *A, int lda,
                    int64_t strideA, const float *B, int ldb, int64_t strideB, float beta, float *C, int ldc,
                    int64_t strideC, int batch, bk_error *err)
{
    if (m < 0 || n < 0 || k < 0 || batch < 0)
        return bk_fail(err, BK_ERR_INVALID, "emulated GEMM: sizes m = %d, n = %d, k = %d, batch = %d; expected >= 0",
                       m, n, k, batch);
    for (int b = 0; b < batch; b++) {
        const float *a = A + (int64_t)b * strideA, *bb = B + (int64_t)b * strideB;
        float *ra = NULL, *rb = NULL;
        /* [run] matmul = "bf16": cuBLAS's CUBLAS_COMPUTE_32F_FAST_16BF rounds both inputs to bf16;
         * "tf32": CUBLAS_TF32_TENSOR_OP_MATH rounds them to TF32 (gpu/mma.h, bk_tf32_round); both sum in fp32 */
        if (d->bf16 || d->tf32) {
            ra = rounded_copy(a, transa ? k : m, transa ? m : k, lda, !d->bf16);
            rb = rounded_copy(bb, transb ? n : k, transb ? k : n, ldb, !d->bf16);
            if (!ra || !rb) {
                free(ra), free(rb);
                return bk_fail(err, BK_ERR_NOMEM, "emulated GEMM: out of memory for the %s copies of its inputs",
                               d->bf16 ? "bf16" : "tf32");
            }
            a = ra, bb = rb;
        }
        bk_sgemm_colmajor(transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans, m, n, k, alpha, a,
                          lda, bb, ldb, beta, C + (int64_t)b * strideC, ldc);
        free(ra), free(rb);
    }
    return BK_OK;
}

/* The same GEMM on operands stored in bf16 (their bits): each batch entry's span widened to float, which
 * is exact (nothing to round again), then multiplied by the same sgemm, so the product has the bits of
 * dev_gemm with [run] matmul = "bf16" on the same values. */
static int dev_gemm_bf16(bk_dev *d, int transa, int transb, int m, int n, int k, float alpha, const uint16_t *A,
                         int lda, int64_t strideA, const uint16_t *B, int ldb, int64_t strideB, float beta, float *C,
                         int ldc, int64_t strideC, int batch, bk_error *err)
{
    (void)d; /* the inputs are bf16 already: no rounding mode applies */
    if (m < 0 || n < 0 || k < 0 || batch < 0)
        return bk_fail(err, BK_ERR_INVALID,
                       "emulated bf16 GEMM: sizes m = %d, n = %d, k = %d, batch = %d; expected >= 0", m, n, k, batch);
    for (int b = 0; b < batch; b++) {
        float *wa = bf16_widened(A + (int64_t)b * strideA, transa ? k : m, transa ? m : k, lda);
        float *wb = bf16_widened(B + (int64_t)b * strideB, transb ? n : k, transb ? k : n, ldb);
        if (wa && wb)
            bk_sgemm_colmajor(transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                              wa, lda, wb, ldb, beta, C + (int64_t)b * strideC, ldc);
        const int ok = wa && wb;
        free(wa), free(wb);
        if (!ok)
            return bk_fail(err, BK_ERR_NOMEM, "emulated bf16 GEMM: out of memory for its widened inputs");
    }
    return BK_OK;
}

/* Nothing is queued, so nothing can fail after the fact (the emulated BK_LAUNCH does not call it; the
 * ops may). */
__attribute__((unused)) static int dev_launched(bk_dev *d, const char *what, bk_error *err)
{
    (void)d, (void)what, (void)err;
    return BK_OK;
}

static int dev_scratch(bk_dev *d, int slot, size_t bytes, void **out, bk_error *err)
{
    if (slot < 0 || slot >= BK_DEV_SCRATCH_COUNT)
        return bk_fail(err, BK_ERR_INTERNAL, "emulated scratch: slot %d; expected 0..%d", slot,
                       BK_DEV_SCRATCH_COUNT - 1);
    if (bytes > d->scratch_bytes[slot] || !d->scratch[slot]) {
        /* contents need not survive: free and allocate instead of realloc's copy */
        free(d->scratch[slot]);
        d->scratch[slot] = malloc(bytes ? bytes : 1);
        d->scratch_bytes[slot] = d->scratch[slot] ? bytes : 0;
        if (!d->scratch[slot])
            return bk_fail(err, BK_ERR_NOMEM, "emulated device: out of memory for %zu bytes of scratch (slot %d)",
                           bytes, slot);
    }
    *out = d->scratch[slot];
    return BK_OK;
}

static int dev_upload(bk_dev *d, void *dst, const void *src_host, size_t bytes, bk_error *err)
{
    (void)d, (void)err;
    if (bytes)
        memcpy(dst, src_host, bytes);
    return BK_OK;
}

static int dev_download(bk_dev *d, void *dst_host, const void *src, size_t bytes, bk_error *err)
{
    (void)d, (void)err;
    if (bytes)
        memcpy(dst_host, src, bytes);
    return BK_OK;
}

static int dev_zero(bk_dev *d, void *ptr, size_t bytes, bk_error *err)
{
    (void)d, (void)err;
    if (bytes)
        memset(ptr, 0, bytes);
    return BK_OK;
}

#include "gpu/ops.h"

/* --- memory of the table ------------------------------------------------------------------------- */

static int emu_alloc(bk_backend *be, void **ptr, size_t bytes, bk_error *err)
{
    (void)be;
    *ptr = calloc(bytes ? bytes : 1, 1); /* a unique pointer for 0 bytes too */
    if (!*ptr)
        return bk_fail(err, BK_ERR_NOMEM, "emulated device: out of memory for %zu bytes (%.1f MiB) of device memory",
                       bytes, (double)bytes / (1024.0 * 1024.0));
    return BK_OK;
}

static void emu_release(bk_backend *be, void *ptr)
{
    (void)be;
    free(ptr);
}

static int emu_copy(bk_backend *be, void *dst, const void *src, size_t bytes, bk_error *err)
{
    (void)be, (void)err;
    if (bytes)
        memmove(dst, src, bytes);
    return BK_OK;
}

static int emu_sync(bk_backend *be, bk_error *err)
{
    (void)be, (void)err;
    return BK_OK;
}

typedef struct bk_emulated_backend {
    bk_backend be;
    bk_emulated impl;
} bk_emulated_backend;

static void emu_destroy(bk_backend *be)
{
    bk_emulated_backend *e = (bk_emulated_backend *)be;
    for (int s = 0; s < BK_DEV_SCRATCH_COUNT; s++)
        free(e->impl.dev.scratch[s]);
    free(e);
}

int bk_backend_emulated_create(bk_backend **out, bk_matmul_mode matmul, bk_error *err)
{
    *out = NULL;
    bk_emulated_backend *e = calloc(1, sizeof *e);
    if (!e)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory creating the emulated device backend");
    bk_backend *be = &e->be;
    be->kind = BK_BACKEND_EMULATED;
    be->name = "emulated";
    /* bf16 is emulated in the GEMMs and the fused attention; tf32 in the GEMMs (cuBLAS's TF32 math mode
     * touches nothing else on the GPU either: the fused attention's fp32 programs stay fp32) */
    const int bf16 = matmul == BK_MATMUL_BF16, tf32 = matmul == BK_MATMUL_TF32;
    bk_copy_text(be->description, sizeof be->description,
                 bf16   ? "emulated device (CUDA code run as C on the host), bf16 matmuls"
                 : tf32 ? "emulated device (CUDA code run as C on the host), tf32 matmuls"
                        : "emulated device (CUDA code run as C on the host), fp32 matmuls");
    be->on_device = 1;
    be->matmul = bf16 ? BK_MATMUL_BF16 : tf32 ? BK_MATMUL_TF32 : BK_MATMUL_FP32;
    e->impl.dev.bf16 = bf16;
    e->impl.dev.tf32 = tf32;
    be->impl = &e->impl;

    be->alloc = emu_alloc;
    be->release = emu_release;
    be->copy = emu_copy;
    be->sync = emu_sync;

    dev_set_ops(be);
    be->destroy = emu_destroy;
    *out = be;
    return BK_OK;
}
