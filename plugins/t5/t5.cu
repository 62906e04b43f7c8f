/* T5's table and its gradient on the device, with the same inline bucket function as the host
 * (t5_math.h). The gradient is deterministic: each (head, bucket) is one block that sums the
 * contiguous distance range of its bucket in a fixed order (strided per thread, then a tree), with
 * no atomics. */
#include "t5_cuda.h"

#include <biaskit/plugin_cuda.h>
#include <cuda_runtime.h>

#define T5_THREADS 256

static __global__ void t5_table_kernel(bk_t5_shape s, const float *theta, int32_t distances, float *table)
{
    int32_t h = (int32_t)blockIdx.y;
    float scale = (float)s.scale;
    for (int32_t d = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x); d < distances;
         d += (int32_t)(gridDim.x * blockDim.x))
        table[(size_t)h * (size_t)distances + (size_t)d] =
            scale * theta[(size_t)h * (size_t)s.buckets + (size_t)bk_t5_bucket(&s, d)];
}

/* Block (b, h): the distances of bucket b are [first(b), first(b + 1)) because buckets never decrease
 * with distance. */
static __global__ void t5_backward_kernel(bk_t5_shape s, int32_t distances, const float *dtable, float *dtheta)
{
    __shared__ double partial[T5_THREADS];
    __shared__ int32_t range[2];
    int32_t b = (int32_t)blockIdx.x, h = (int32_t)blockIdx.y;
    if (threadIdx.x == 0) {
        range[0] = bk_t5_first_distance(&s, b, distances);
        range[1] = bk_t5_first_distance(&s, b + 1, distances);
    }
    __syncthreads();
    const float *row = dtable + (size_t)h * (size_t)distances;
    double acc = 0.0;
    for (int32_t d = range[0] + (int32_t)threadIdx.x; d < range[1]; d += T5_THREADS)
        acc += (double)row[d];
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = T5_THREADS / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride)
            partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        dtheta[(size_t)h * (size_t)s.buckets + (size_t)b] += (float)(s.scale * partial[0]);
}

extern "C" int bk_t5_table_cuda(const biaskit_services *svc, bk_t5_shape shape, const float *theta,
                                int32_t distances, float *table, void *stream, biaskit_error *err)
{
    unsigned blocks = biaskit_cuda_blocks(distances, T5_THREADS);
    t5_table_kernel<<<dim3(blocks, (unsigned)shape.heads), T5_THREADS, 0, (cudaStream_t)stream>>>(
        shape, theta, distances, table);
    return biaskit_cuda_launched(svc, "the T5 table kernel", err);
}

extern "C" int bk_t5_table_backward_cuda(const biaskit_services *svc, bk_t5_shape shape, int32_t distances,
                                         const float *dtable, float *dtheta, void *stream, biaskit_error *err)
{
    t5_backward_kernel<<<dim3((unsigned)shape.buckets, (unsigned)shape.heads), T5_THREADS, 0,
                         (cudaStream_t)stream>>>(shape, distances, dtable, dtheta);
    return biaskit_cuda_launched(svc, "the T5 gradient kernel", err);
}
