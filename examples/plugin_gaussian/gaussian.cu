/* The example plugin's device code: the same inline formula as the host (gaussian_math.h), launched
 * with the SDK's helpers (<biaskit/plugin_cuda.h>). The gradient is a per-head reduction in a fixed
 * order (no atomics), so it is bit-identical run to run. */
#include "gaussian_cuda.h"
#include "gaussian_math.h"

#include <biaskit/plugin_cuda.h>

#define GAUSSIAN_THREADS 256

/* One row of heads per blockIdx.y; a grid-stride loop over the distances. */
static __global__ void table_kernel(const float *width, int32_t distances, float *table)
{
    int32_t h = (int32_t)blockIdx.y;
    float w = width[h];
    for (int32_t d = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x); d < distances;
         d += (int32_t)(gridDim.x * blockDim.x))
        table[(size_t)h * (size_t)distances + (size_t)d] = gaussian_bias(w, d);
}

/* One block per head: per-thread partial sums over a fixed set of distances, then a tree in shared
 * memory; the order never changes, so neither do the bits. */
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
        dwidth[h] += (float)partial[0]; /* backward adds */
}

extern "C" int gaussian_table_cuda(const biaskit_services *svc, int32_t heads, const float *theta, const float *frozen,
                                   float **device_frozen, int32_t distances, float *table, void *stream,
                                   biaskit_error *err)
{
    const float *width = theta;
    if (!width) { /* frozen: the engine has no theta to hand us, so the plugin keeps its own device copy */
        int rc = biaskit_cuda_upload_once(svc, frozen, (size_t)heads, device_frozen, stream, "fixed widths", err);
        if (rc)
            return rc;
        width = *device_frozen;
    }
    table_kernel<<<dim3(biaskit_cuda_blocks(distances, GAUSSIAN_THREADS), (unsigned)heads), GAUSSIAN_THREADS, 0,
                   (cudaStream_t)stream>>>(width, distances, table);
    return biaskit_cuda_launched(svc, "the table kernel", err);
}

extern "C" int gaussian_table_backward_cuda(const biaskit_services *svc, int32_t heads, int32_t distances,
                                            const float *dtable, float *dwidth, void *stream, biaskit_error *err)
{
    backward_kernel<<<(unsigned)heads, GAUSSIAN_THREADS, 0, (cudaStream_t)stream>>>(distances, dtable, dwidth);
    return biaskit_cuda_launched(svc, "the gradient kernel", err);
}

extern "C" void gaussian_cuda_release(float *device_frozen)
{
    biaskit_cuda_free(device_frozen);
}
