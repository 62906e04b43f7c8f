// CUDA side of device.h. Every function returns the CUDA error as an engine error with the call named.
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "device.h"
}

static int cuda_fail(bk_error *err, const char *what, cudaError_t e)
{
    return bk_fail(err, BK_ERR_DEVICE, "CUDA %s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
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
        return 0;
    }
    snprintf(desc, size, "cuda:0 %s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
             (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
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
