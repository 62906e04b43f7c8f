/* The example plugin's device code: the same inline formula as the host (gaussian_math.h). The
 * gradient is a per-head reduction in a fixed order (no atomics), so it is bit-identical run to run. */
#include "gaussian_cuda.h"
#include "gaussian_math.h"

#include <cuda_runtime.h>

#define GAUSSIAN_THREADS 256

static __global__ void table_kernel(const float *width, float fixed_width, int32_t distances, float *table)
{
    int32_t h = (int32_t)blockIdx.y;
    float w = width ? width[h] : fixed_width;
    for (int32_t d = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x); d < distances;
         d += (int32_t)(gridDim.x * blockDim.x))
        table[(size_t)h * (size_t)distances + (size_t)d] = gaussian_bias(w, d);
}

static __global__ void backward_kernel(int32_t distances, const float *dtable, float *dwidth)
{
    __shared__ double partial[GAUSSIAN_THREADS];
    int32_t h = (int32_t)blockIdx.x;
    double acc = 0.0;
    for (int32_t d = (int32_t)threadIdx.x; d < distances; d += GAUSSIAN_THREADS)
        acc += (double)dtable[(size_t)h * (size_t)distances + (size_t)d] * (double)gaussian_bias_dwidth(d);
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = GAUSSIAN_THREADS / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride)
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        dwidth[h] += (float)partial[0];
}

extern "C" int gaussian_table_cuda(const biaskit_services *svc, int32_t heads, const float *width, float fixed_width,
                                   int32_t distances, float *table, void *stream, biaskit_error *err)
{
    int blocks = (distances + GAUSSIAN_THREADS - 1) / GAUSSIAN_THREADS;
    if (blocks > 1024)
        blocks = 1024;
    table_kernel<<<dim3((unsigned)blocks, (unsigned)heads), GAUSSIAN_THREADS, 0, (cudaStream_t)stream>>>(
        width, fixed_width, distances, table);
    cudaError_t ce = cudaGetLastError();
    if (ce != cudaSuccess)
        return svc->error(err, BIASKIT_ERR_DEVICE, "launching the table kernel: %s", cudaGetErrorString(ce));
    return BIASKIT_OK;
}

extern "C" int gaussian_table_backward_cuda(const biaskit_services *svc, int32_t heads, int32_t distances,
                                            const float *dtable, float *dwidth, void *stream, biaskit_error *err)
{
    backward_kernel<<<(unsigned)heads, GAUSSIAN_THREADS, 0, (cudaStream_t)stream>>>(distances, dtable, dwidth);
    cudaError_t ce = cudaGetLastError();
    if (ce != cudaSuccess)
        return svc->error(err, BIASKIT_ERR_DEVICE, "launching the gradient kernel: %s", cudaGetErrorString(ce));
    return BIASKIT_OK;
}
