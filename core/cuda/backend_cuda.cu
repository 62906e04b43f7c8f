// The CUDA backend (model/backend.h), built into the module biaskit_cuda_backend.so (cuda/module.h) that
// cuda/loader.c loads when a cuda backend is asked for: the device code of core/gpu/ (gpu/dev.h)
// compiled as CUDA C++, every kernel and copy queued on the backend's own stream, the GEMMs on a cuBLAS
// handle bound to it.
// Work is asynchronous: a failure of queued work is reported by the next call that waits (download,
// sync), or, with BIASKIT_CUDA_SYNC=1 in the environment (a debug mode, slow), by a synchronisation
// after every kernel and GEMM that names the one that failed. Every error names the CUDA or cuBLAS call
// that failed and the runtime's own explanation.
//
// The runtime's "last error" (cudaGetLastError) is per thread and shared with every other CUDA call of
// the process, plugins' included: an error that a call returned stays there until read. So each place
// that reports or ignores an error also clears it (clear_last_error), and the check after a launch
// (dev_launched) then reads that launch's error, not an earlier one's. What the check says is decided by
// cuda/policy.c (bk_cuda_launch_report), which tests/test_cuda_policy.c checks without a GPU.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/module.h"
#include "cuda/policy.h"
#include "gpu/dev.h"
#include "model/backend.h"

namespace {

struct bk_cuda {
    bk_dev dev; // first: the ops cast be->impl to bk_dev *, and dev_launched casts it back
    int sync;   // BIASKIT_CUDA_SYNC=1: synchronise the stream after every kernel and GEMM, and check
    // The first error of a call that can report none (cuda_release's cudaFreeAsync), reported by the
    // next call that waits (sync, download) instead of being left for a launch check to misattribute.
    cudaError_t deferred;
};

struct bk_cuda_backend {
    bk_backend be;
    bk_cuda impl;
};

// Reads (and so resets) the runtime's last error once it has been reported or deliberately ignored,
// so that the next launch check does not take it for its own. A sticky error (a kernel that faulted)
// cannot be reset: every later call returns it, and bk_cuda_launch_report says so.
void clear_last_error(void)
{
    (void)cudaGetLastError();
}

int cuda_fail(bk_error *err, const char *what, cudaError_t e)
{
    int rc = bk_fail(err, BK_ERR_DEVICE, "CUDA backend: %s failed: %s (%s)", what, cudaGetErrorString(e),
                     cudaGetErrorName(e));
    clear_last_error();
    return rc;
}

int cublas_fail(bk_error *err, const char *what, cublasStatus_t s)
{
    int rc = bk_fail(err, BK_ERR_DEVICE, "CUDA backend: %s failed: %s (%s)", what, cublasGetStatusString(s),
                     cublasGetStatusName(s));
    clear_last_error(); // a kernel cuBLAS failed to launch may have left the runtime's error set
    return rc;
}

bk_cuda_status status_of(cudaError_t e)
{
    bk_cuda_status st;
    st.code = (int)e;
    st.name = e == cudaSuccess ? "cudaSuccess" : cudaGetErrorName(e);
    st.text = e == cudaSuccess ? "no error" : cudaGetErrorString(e);
    return st;
}

// After queuing `what` (a kernel or a GEMM): the launch's own error, and with BIASKIT_CUDA_SYNC=1 the
// outcome of synchronising the stream right after it. `launch` is cudaSuccess for a GEMM (cuBLAS
// returned its status already).
int checked(bk_cuda *c, const char *what, cudaError_t launch, bk_error *err)
{
    bk_cuda_status none = status_of(cudaSuccess), sync = none;
    if (launch == cudaSuccess && c->sync) {
        cudaError_t e = cudaStreamSynchronize((cudaStream_t)c->dev.stream);
        sync = status_of(e);
    }
    int rc = bk_cuda_launch_report(what, status_of(launch), c->sync, sync, err);
    if (rc)
        clear_last_error();
    return rc;
}

cudaStream_t stream_of(bk_dev *d)
{
    return (cudaStream_t)d->stream;
}

} // namespace

// --- the primitives of gpu/dev.h -------------------------------------------------------------------

static int dev_gemm(bk_dev *d, int transa, int transb, int m, int n, int k, float alpha, const float *A, int lda,
                    int64_t strideA, const float *B, int ldb, int64_t strideB, float beta, float *C, int ldc,
                    int64_t strideC, int batch, bk_error *err)
{
    if (batch == 0 || m == 0 || n == 0)
        return BK_OK;
    if (d->bf16) { // fp32 in and out, inputs rounded to bf16 on the tensor cores, fp32 accumulation
        cublasStatus_t s = cublasGemmStridedBatchedEx(
            (cublasHandle_t)d->blas, transa ? CUBLAS_OP_T : CUBLAS_OP_N, transb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
            &alpha, A, CUDA_R_32F, lda, (long long)strideA, B, CUDA_R_32F, ldb, (long long)strideB, &beta, C,
            CUDA_R_32F, ldc, (long long)strideC, batch, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) {
            char what[160];
            snprintf(what, sizeof what, "cublasGemmStridedBatchedEx, bf16 (m = %d, n = %d, k = %d, batch = %d)", m, n,
                     k, batch);
            return cublas_fail(err, what, s);
        }
        return ((bk_cuda *)d)->sync ? checked((bk_cuda *)d, "cuBLAS GEMM (bf16 tensor cores)", cudaSuccess, err)
                                    : BK_OK;
    }
    cublasStatus_t s = cublasSgemmStridedBatched((cublasHandle_t)d->blas, transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                 transb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, lda,
                                                 (long long)strideA, B, ldb, (long long)strideB, &beta, C, ldc,
                                                 (long long)strideC, batch);
    if (s != CUBLAS_STATUS_SUCCESS) {
        char what[160];
        snprintf(what, sizeof what, "cublasSgemmStridedBatched (m = %d, n = %d, k = %d, batch = %d)", m, n, k, batch);
        return cublas_fail(err, what, s);
    }
    return ((bk_cuda *)d)->sync ? checked((bk_cuda *)d, "cuBLAS GEMM (cublasSgemmStridedBatched)", cudaSuccess, err)
                                : BK_OK;
}

// Operands stored in bf16 (their bits), fp32 output and accumulation on the tensor cores.
static int dev_gemm_bf16(bk_dev *d, int transa, int transb, int m, int n, int k, float alpha, const uint16_t *A,
                         int lda, int64_t strideA, const uint16_t *B, int ldb, int64_t strideB, float beta, float *C,
                         int ldc, int64_t strideC, int batch, bk_error *err)
{
    if (batch == 0 || m == 0 || n == 0)
        return BK_OK;
    cublasStatus_t s = cublasGemmStridedBatchedEx(
        (cublasHandle_t)d->blas, transa ? CUBLAS_OP_T : CUBLAS_OP_N, transb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k,
        &alpha, A, CUDA_R_16BF, lda, (long long)strideA, B, CUDA_R_16BF, ldb, (long long)strideB, &beta, C, CUDA_R_32F,
        ldc, (long long)strideC, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) {
        char what[160];
        snprintf(what, sizeof what, "cublasGemmStridedBatchedEx, bf16 storage (m = %d, n = %d, k = %d, batch = %d)", m,
                 n, k, batch);
        return cublas_fail(err, what, s);
    }
    return ((bk_cuda *)d)->sync ? checked((bk_cuda *)d, "cuBLAS GEMM (bf16 storage)", cudaSuccess, err) : BK_OK;
}

// Right after a launch (BK_LAUNCH, BK_LAUNCH_CTA): cudaGetLastError is this launch's error, since every
// earlier one was cleared where it was reported (clear_last_error).
static int dev_launched(bk_dev *d, const char *what, bk_error *err)
{
    char kernel[160];
    snprintf(kernel, sizeof kernel, "kernel %s", what);
    return checked((bk_cuda *)d, kernel, cudaGetLastError(), err);
}

// The error cuda_release could not report, once, at the next call that waits.
static int deferred_error(bk_cuda *c, bk_error *err)
{
    cudaError_t e = c->deferred;
    if (e == cudaSuccess)
        return BK_OK;
    c->deferred = cudaSuccess;
    return cuda_fail(err, "an earlier cudaFreeAsync (releasing memory)", e);
}

// Grown on demand, stream-ordered: the old buffer is freed after the work queued before it.
static int dev_scratch(bk_dev *d, int slot, size_t bytes, void **out, bk_error *err)
{
    if (slot < 0 || slot >= BK_DEV_SCRATCH_COUNT)
        return bk_fail(err, BK_ERR_INTERNAL, "CUDA backend scratch: slot %d; expected 0..%d", slot,
                       BK_DEV_SCRATCH_COUNT - 1);
    if (bytes > d->scratch_bytes[slot] || !d->scratch[slot]) {
        cudaError_t e;
        if (d->scratch[slot] && (e = cudaFreeAsync(d->scratch[slot], stream_of(d))) != cudaSuccess)
            return cuda_fail(err, "cudaFreeAsync (scratch)", e);
        d->scratch[slot] = NULL, d->scratch_bytes[slot] = 0;
        void *p = NULL;
        if ((e = cudaMallocAsync(&p, bytes ? bytes : 1, stream_of(d))) != cudaSuccess) {
            char what[120];
            snprintf(what, sizeof what, "cudaMallocAsync of %zu bytes of scratch (slot %d)", bytes, slot);
            return cuda_fail(err, what, e);
        }
        d->scratch[slot] = p, d->scratch_bytes[slot] = bytes;
    }
    *out = d->scratch[slot];
    return BK_OK;
}

// From pageable host memory cudaMemcpyAsync has copied the source before it returns, so the caller
// may reuse it at once.
static int dev_upload(bk_dev *d, void *dst, const void *src_host, size_t bytes, bk_error *err)
{
    if (!bytes)
        return BK_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src_host, bytes, cudaMemcpyHostToDevice, stream_of(d));
    return e == cudaSuccess ? BK_OK : cuda_fail(err, "upload (cudaMemcpyAsync host to device)", e);
}

static int dev_download(bk_dev *d, void *dst_host, const void *src, size_t bytes, bk_error *err)
{
    if (deferred_error((bk_cuda *)d, err))
        return err->code;
    cudaError_t e;
    if (bytes && (e = cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, stream_of(d))) != cudaSuccess)
        return cuda_fail(err, "download (cudaMemcpyAsync device to host)", e);
    if ((e = cudaStreamSynchronize(stream_of(d))) != cudaSuccess)
        return cuda_fail(err, "download (cudaStreamSynchronize: queued work failed)", e);
    return BK_OK;
}

static int dev_zero(bk_dev *d, void *ptr, size_t bytes, bk_error *err)
{
    if (!bytes)
        return BK_OK;
    cudaError_t e = cudaMemsetAsync(ptr, 0, bytes, stream_of(d));
    return e == cudaSuccess ? BK_OK : cuda_fail(err, "cudaMemsetAsync", e);
}

#include "gpu/ops.h"

// --- memory of the table -----------------------------------------------------------------------------

static bk_dev *cuda_dev(bk_backend *be)
{
    return (bk_dev *)be->impl;
}

static int cuda_alloc(bk_backend *be, void **ptr, size_t bytes, bk_error *err)
{
    bk_dev *d = cuda_dev(be);
    *ptr = NULL;
    cudaError_t e = cudaMallocAsync(ptr, bytes ? bytes : 1, stream_of(d)); // a unique pointer for 0 bytes too
    if (e != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "cudaMallocAsync of %zu bytes (%.1f MiB)", bytes,
                 (double)bytes / (1024.0 * 1024.0));
        *ptr = NULL;
        return cuda_fail(err, what, e);
    }
    if ((e = cudaMemsetAsync(*ptr, 0, bytes ? bytes : 1, stream_of(d))) != cudaSuccess) {
        cudaFreeAsync(*ptr, stream_of(d));
        *ptr = NULL;
        return cuda_fail(err, "cudaMemsetAsync (zeroing a new allocation)", e);
    }
    return BK_OK;
}

static void cuda_release(bk_backend *be, void *ptr)
{
    if (!ptr)
        return;
    cudaError_t e = cudaFreeAsync(ptr, stream_of(cuda_dev(be)));
    if (e != cudaSuccess) { // reported by the next sync or download, not by the next launch check
        bk_cuda *c = (bk_cuda *)cuda_dev(be);
        if (c->deferred == cudaSuccess)
            c->deferred = e;
        clear_last_error();
    }
}

static int cuda_copy(bk_backend *be, void *dst, const void *src, size_t bytes, bk_error *err)
{
    if (!bytes)
        return BK_OK;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(cuda_dev(be)));
    return e == cudaSuccess ? BK_OK : cuda_fail(err, "copy (cudaMemcpyAsync device to device)", e);
}

static int cuda_sync(bk_backend *be, bk_error *err)
{
    if (deferred_error((bk_cuda *)cuda_dev(be), err))
        return err->code;
    cudaError_t e = cudaStreamSynchronize(stream_of(cuda_dev(be)));
    return e == cudaSuccess ? BK_OK : cuda_fail(err, "cudaStreamSynchronize (queued work failed)", e);
}

static void cuda_destroy(bk_backend *be)
{
    bk_cuda_backend *c = (bk_cuda_backend *)be;
    bk_dev *d = &c->impl.dev;
    for (int s = 0; s < BK_DEV_SCRATCH_COUNT; s++)
        if (d->scratch[s])
            cudaFreeAsync(d->scratch[s], stream_of(d));
    if (d->stream)
        cudaStreamSynchronize(stream_of(d));
    if (d->blas)
        cublasDestroy((cublasHandle_t)d->blas);
    if (d->stream)
        cudaStreamDestroy(stream_of(d));
    clear_last_error(); // nothing reports these calls' errors: leave none for a later check
    free(c);
}

static void append(char *dst, size_t size, const char *text)
{
    size_t len = strlen(dst);
    if (len + 1 < size)
        bk_copy_text(dst + len, size - len, text);
}

// The device's memory pool, which cudaMallocAsync draws from, keeps up to BIASKIT_CUDA_POOL_KEEP bytes
// (default: all, UINT64_MAX) reserved at a synchronisation. The pool's default release threshold is 0:
// at every stream, event or device synchronisation (each step's loss download, the gradient norm) the
// runtime returns the pool's free memory to the driver, so whatever was freed since (cuda_release of
// the model's and plugins' buffers, dev_scratch growing a slot) is mapped again by the next
// cudaMallocAsync, a driver call instead of a pool hit. The cost of keeping all: the process holds its
// peak until it exits, which other processes on the same GPU (two ranks sharing it) cannot use; a size
// in BIASKIT_CUDA_POOL_KEEP caps that (cuda/policy.h: bk_cuda_pool_keep). Set each time a backend is
// created, on the pool of the device it uses; the pool is the process's (plugins' cudaMallocAsync
// share it).
static int keep_pool(int device, bk_error *err)
{
    uint64_t keep = 0;
    if (bk_cuda_pool_keep(getenv("BIASKIT_CUDA_POOL_KEEP"), &keep, err))
        return err->code;
    cudaMemPool_t pool;
    cudaError_t e = cudaDeviceGetMemPool(&pool, device);
    if (e == cudaSuccess)
        e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    if (e != cudaSuccess) {
        char what[160];
        snprintf(what, sizeof what, "setting the memory pool's release threshold of GPU %d (cudaMemPoolSetAttribute)",
                 device);
        return cuda_fail(err, what, e);
    }
    return BK_OK;
}

static int backend_create(bk_backend **out, bk_matmul_mode matmul, int64_t gpu, const char *gpu_where,
                          bk_error *err)
{
    *out = NULL;
    int sync = 0;
    if (bk_cuda_sync_mode(getenv("BIASKIT_CUDA_SYNC"), &sync, err))
        return err->code;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError(); // not sticky: leave the runtime clean for the caller's fallback
        return bk_fail(err, BK_ERR_DEVICE, "CUDA backend: no GPU answers: cudaGetDeviceCount failed: %s (%s)",
                       cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (count < 1)
        return bk_fail(err, BK_ERR_DEVICE, "CUDA backend: no GPU answers: cudaGetDeviceCount found 0 devices");
    bk_cuda_gpu_choice choice;
    if (bk_cuda_choose_gpu(gpu, gpu_where, count, bk_cuda_getenv, NULL, &choice, err))
        return err->code;
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(choice.device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, choice.device)) != cudaSuccess) {
        char what[240];
        snprintf(what, sizeof what, "selecting %s (cudaSetDevice, cudaGetDeviceProperties)", choice.why);
        return cuda_fail(err, what, e);
    }
    if (keep_pool(choice.device, err))
        return err->code;

    bk_cuda_backend *c = (bk_cuda_backend *)calloc(1, sizeof *c);
    if (!c)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory creating the CUDA backend");
    bk_dev *d = &c->impl.dev;
    c->impl.sync = sync;
    cudaStream_t stream = NULL;
    if ((e = cudaStreamCreate(&stream)) != cudaSuccess) {
        free(c);
        return cuda_fail(err, "cudaStreamCreate", e);
    }
    d->stream = stream;
    cublasHandle_t blas = NULL;
    cublasStatus_t s = cublasCreate(&blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cuda_destroy(&c->be);
        return cublas_fail(err, "cublasCreate", s);
    }
    d->blas = blas;
    d->smem_optin = prop.sharedMemPerBlockOptin; // the fused attention's plan fits its tiles under it
    d->tf32 = matmul == BK_MATMUL_TF32;
    d->bf16 = matmul == BK_MATMUL_BF16;
    // fp32: CUBLAS_DEFAULT_MATH computes fp32 GEMMs in IEEE fp32 (no tensor-core down-conversion);
    // tf32: tensor cores round the inputs to TF32 and accumulate in fp32.
    if ((s = cublasSetStream(blas, stream)) != CUBLAS_STATUS_SUCCESS ||
        (s = cublasSetMathMode(blas, d->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH)) !=
            CUBLAS_STATUS_SUCCESS) {
        cuda_destroy(&c->be);
        return cublas_fail(err, "binding cuBLAS to the stream and setting its math mode", s);
    }

    bk_backend *be = &c->be;
    be->kind = BK_BACKEND_CUDA;
    be->name = "cuda";
    // "cuda:1 NVIDIA H100 80GB HBM3 (sm_90), fp32 matmuls; GPU 1 (local rank 1 of Open MPI)"
    // (a too long line is cut, not an error: appended piece by piece)
    snprintf(be->description, sizeof be->description, "cuda:%d %.60s (sm_%d%d), %s matmuls; ", choice.device,
             prop.name, prop.major, prop.minor, d->bf16 ? "bf16" : d->tf32 ? "tf32" : "fp32");
    append(be->description, sizeof be->description, choice.why);
    if (sync)
        append(be->description, sizeof be->description, "; BIASKIT_CUDA_SYNC=1");
    be->on_device = 1;
    be->matmul = matmul;
    be->impl = &c->impl;

    be->alloc = cuda_alloc;
    be->release = cuda_release;
    be->copy = cuda_copy;
    be->sync = cuda_sync;

    dev_set_ops(be);
    be->destroy = cuda_destroy;
    *out = be;
    return BK_OK;
}

extern "C" __attribute__((visibility("default"))) const bk_cuda_backend_api *bk_cuda_backend_module(void)
{
    static const bk_cuda_backend_api api = {BK_CUDA_MODULE_ABI, (unsigned)sizeof(bk_error),
                                            (unsigned)sizeof(bk_backend), backend_create};
    return &api;
}
