/* KERPLE on the device: the same inline formulas as the host (kerple_math.h). The table is one
 * thread per (head, distance); the gradient is one block per head that accumulates in double and
 * reduces in a fixed-order tree (no atomics), so it is bit-identical from run to run. */
#include "kerple_cuda.h"
#include "kerple_math.h"

#include <biaskit/plugin_cuda.h>
#include <cuda_runtime.h>

#define KERPLE_THREADS 256

static __global__ void kerple_table_kernel(int variant, const float *params, int32_t heads, int32_t distances,
                                           float *table)
{
    int32_t h = (int32_t)blockIdx.y;
    float r1 = params[h], r2 = params[heads + h];
    float r3 = bk_kerple_tensor_count(variant) > 2 ? params[2 * heads + h] : 0.0f;
    for (int32_t d = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x); d < distances;
         d += (int32_t)(gridDim.x * blockDim.x))
        table[(size_t)h * (size_t)distances + (size_t)d] = bk_kerple_bias(variant, r1, r2, r3, d);
}

static __global__ void kerple_backward_kernel(int variant, const float *params, int32_t heads, int32_t distances,
                                              const float *dtable, float *dtheta)
{
    __shared__ double partial[BK_KERPLE_MAX_TENSORS][KERPLE_THREADS];
    int32_t h = (int32_t)blockIdx.x;
    int n = bk_kerple_tensor_count(variant);
    float r1 = params[h], r2 = params[heads + h], r3 = n > 2 ? params[2 * heads + h] : 0.0f;
    double acc[BK_KERPLE_MAX_TENSORS] = {0.0, 0.0, 0.0};
    const float *g = dtable + (size_t)h * (size_t)distances;
    for (int32_t d = (int32_t)threadIdx.x; d < distances; d += KERPLE_THREADS) {
        float dr[BK_KERPLE_MAX_TENSORS] = {0.0f, 0.0f, 0.0f};
        bk_kerple_grad(variant, r1, r2, r3, d, dr);
        for (int t = 0; t < BK_KERPLE_MAX_TENSORS; t++)
            acc[t] += (double)g[d] * (double)dr[t];
    }
    for (int t = 0; t < BK_KERPLE_MAX_TENSORS; t++)
        partial[t][threadIdx.x] = acc[t];
    __syncthreads();
    for (int stride = KERPLE_THREADS / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride)
            for (int t = 0; t < BK_KERPLE_MAX_TENSORS; t++)
                partial[t][threadIdx.x] += partial[t][threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        for (int t = 0; t < n; t++)
            dtheta[(size_t)t * (size_t)heads + (size_t)h] += (float)partial[t][0];
}

extern "C" int bk_kerple_table_cuda(const biaskit_services *svc, int variant, int32_t heads, const float *params,
                                    int32_t distances, float *table, void *stream, biaskit_error *err)
{
    unsigned blocks = biaskit_cuda_blocks(distances, KERPLE_THREADS);
    kerple_table_kernel<<<dim3(blocks, (unsigned)heads), KERPLE_THREADS, 0, (cudaStream_t)stream>>>(
        variant, params, heads, distances, table);
    return biaskit_cuda_launched(svc, "the KERPLE table kernel", err);
}

extern "C" int bk_kerple_table_backward_cuda(const biaskit_services *svc, int variant, int32_t heads,
                                             const float *params, int32_t distances, const float *dtable,
                                             float *dtheta, void *stream, biaskit_error *err)
{
    kerple_backward_kernel<<<(unsigned)heads, KERPLE_THREADS, 0, (cudaStream_t)stream>>>(variant, params, heads,
                                                                                         distances, dtable, dtheta);
    return biaskit_cuda_launched(svc, "the KERPLE gradient kernel", err);
}

extern "C" int bk_kerple_upload(const biaskit_services *svc, const float *host, size_t count, float **device,
                             void *stream, biaskit_error *err)
{
    return biaskit_cuda_upload_once(svc, host, count, device, stream, "fixed KERPLE parameters", err);
}

extern "C" void bk_kerple_cuda_release(float *device)
{
    biaskit_cuda_free(device);
}
