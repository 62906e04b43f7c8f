// CUDA side of device.h, in the engine (the CUDA runtime is linked into biaskit: plugins' CUDA code
// shares it). Every function returns the CUDA error as an engine error with the call named, and then
// resets the runtime's last error (cudaGetLastError), which would otherwise stay set for the next
// kernel launch check of the backend or of a plugin to report as its own (backend_cuda.cu).
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "cuda/module.h"
#include "cuda/device.h"
}

static int cuda_fail(bk_error *err, const char *what, cudaError_t e)
{
    int rc = bk_fail(err, BK_ERR_DEVICE, "CUDA %s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    (void)cudaGetLastError(); // reported: not an error of whatever comes next
    return rc;
}

extern "C" int bk_device_probe(char *desc, size_t size)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(desc, size, "cpu (CUDA build, no usable GPU: %s)", cudaGetErrorString(e));
        cudaGetLastError(); // clear the sticky-free error so later calls start clean
        return 0;
    }
    if (count == 0) {
        snprintf(desc, size, "cpu (CUDA build, no GPU found)");
        return 0;
    }
    cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess) {
        snprintf(desc, size, "cpu (CUDA build, device 0 unreadable: %s)", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return 0;
    }
    char found[256];
    snprintf(found, sizeof found, "cuda:0 %.120s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
             (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    // a GPU that the cuda backend could not drive would make "auto" fail instead of using the CPU
    const char *why = bk_cuda_backend_module_error();
    if (why) {
        snprintf(desc, size, "cpu (CUDA build; %s answers, but %s)", found, why);
        return 0;
    }
    snprintf(desc, size, "%s", found);
    return 1;
}

extern "C" int bk_device_alloc(void **ptr, size_t bytes, bk_error *err)
{
    cudaError_t e = cudaMalloc(ptr, bytes);
    return e == cudaSuccess ? BK_OK : cuda_fail(err, "cudaMalloc", e);
}

extern "C" void bk_device_free(void *ptr)
{
    if (ptr)
        cudaFree(ptr);
}

extern "C" int bk_device_upload(void *dst, const void *src, size_t bytes, bk_error *err)
{
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? BK_OK : cuda_fail(err, "upload (cudaMemcpy)", e);
}

extern "C" int bk_device_download(void *dst, const void *src, size_t bytes, bk_error *err)
{
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        return cuda_fail(err, "cudaDeviceSynchronize", e);
    e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
    return e == cudaSuccess ? BK_OK : cuda_fail(err, "download (cudaMemcpy)", e);
}
