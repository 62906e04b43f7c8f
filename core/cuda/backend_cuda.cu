// The CUDA backend (model/backend.h), built into the module biaskit_cuda_backend.so (cuda/module.h) that
// cuda/loader.c loads when a cuda backend is asked for: the device code of core/gpu/ (gpu/dev.h)
// compiled as CUDA C++, every kernel and copy queued on the backend's own stream, the GEMMs on a cuBLAS
// handle bound to it.
// Work is asynchronous: a failure of queued work is reported by the next call that waits (download,
// sync). Every error names the CUDA or cuBLAS call that failed and the runtime's own explanation.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/module.h"
#include "gpu/dev.h"
#include "model/backend.h"

namespace {

struct bk_cuda {
    bk_dev dev; // first: the ops cast be->impl to bk_dev *
};

struct bk_cuda_backend {
    bk_backend be;
    bk_cuda impl;
};

int cuda_fail(bk_error *err, const char *what, cudaError_t e)
{
    return bk_fail(err, BK_ERR_DEVICE, "CUDA backend: %s failed: %s (%s)", what, cudaGetErrorString(e),
                   cudaGetErrorName(e));
}

int cublas_fail(bk_error *err, const char *what, cublasStatus_t s)
{
    return bk_fail(err, BK_ERR_DEVICE, "CUDA backend: %s failed: %s (%s)", what, cublasGetStatusString(s),
                   cublasGetStatusName(s));
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
        return BK_OK;
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
    return BK_OK;
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
    return BK_OK;
}

static int dev_launched(bk_dev *d, const char *what, bk_error *err)
{
    (void)d;
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        return BK_OK;
    char call[160];
    snprintf(call, sizeof call, "launching kernel %s", what);
    return cuda_fail(err, call, e);
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
    if (ptr)
        cudaFreeAsync(ptr, stream_of(cuda_dev(be))); // a failure here resurfaces at the next sync
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
    free(c);
}

static int backend_create(bk_backend **out, bk_matmul_mode matmul, bk_error *err)
{
    *out = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError(); // not sticky: leave the runtime clean for the caller's fallback
        return bk_fail(err, BK_ERR_DEVICE, "CUDA backend: no GPU answers: cudaGetDeviceCount failed: %s (%s)",
                       cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (count < 1)
        return bk_fail(err, BK_ERR_DEVICE, "CUDA backend: no GPU answers: cudaGetDeviceCount found 0 devices");
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, 0)) != cudaSuccess)
        return cuda_fail(err, "selecting device 0 (cudaSetDevice, cudaGetDeviceProperties)", e);

    bk_cuda_backend *c = (bk_cuda_backend *)calloc(1, sizeof *c);
    if (!c)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory creating the CUDA backend");
    bk_dev *d = &c->impl.dev;
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
    snprintf(be->description, sizeof be->description, "cuda:0 %.120s (sm_%d%d), %s matmuls", prop.name, prop.major,
             prop.minor, d->bf16 ? "bf16" : d->tf32 ? "tf32" : "fp32");
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
