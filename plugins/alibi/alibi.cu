/* ALiBi's table on the device: one thread per (head, distance), the same inline formula as the host. */
#include "alibi_cuda.h"
#include "alibi_math.h"

#include <cuda_runtime.h>

static __global__ void alibi_table_kernel(const float *slopes, int32_t heads, int32_t distances, float *table)
{
    int32_t h = (int32_t)blockIdx.y;
    for (int32_t d = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x); d < distances;
         d += (int32_t)(gridDim.x * blockDim.x))
        table[(size_t)h * (size_t)distances + (size_t)d] = bk_alibi_bias(slopes[h], d);
    (void)heads;
}

extern "C" int bk_alibi_table_cuda(const biaskit_services *svc, const float *slopes, int32_t heads,
                                   float **device_slopes, int32_t distances, float *table, void *stream,
                                   biaskit_error *err)
{
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t ce;
    if (!*device_slopes) {
        float *dev = NULL;
        if ((ce = cudaMalloc((void **)&dev, sizeof(float) * (size_t)heads)) != cudaSuccess)
            return svc->error(err, BIASKIT_ERR_DEVICE, "cudaMalloc of %d slopes: %s", (int)heads,
                              cudaGetErrorString(ce));
        if ((ce = cudaMemcpyAsync(dev, slopes, sizeof(float) * (size_t)heads, cudaMemcpyHostToDevice, s)) !=
            cudaSuccess) {
            cudaFree(dev);
            return svc->error(err, BIASKIT_ERR_DEVICE, "copying the slopes to the device: %s",
                              cudaGetErrorString(ce));
        }
        *device_slopes = dev;
    }
    const int threads = 256;
    int blocks = (distances + threads - 1) / threads;
    if (blocks > 1024)
        blocks = 1024;
    alibi_table_kernel<<<dim3((unsigned)blocks, (unsigned)heads), threads, 0, s>>>(*device_slopes, heads, distances,
                                                                                 table);
    if ((ce = cudaGetLastError()) != cudaSuccess)
        return svc->error(err, BIASKIT_ERR_DEVICE, "launching the table kernel: %s", cudaGetErrorString(ce));
    return BIASKIT_OK;
}

extern "C" void bk_alibi_cuda_release(float *device_slopes)
{
    if (device_slopes)
        cudaFree(device_slopes);
}
