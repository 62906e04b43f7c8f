/* MEP on the device: the same inline formula as the host (mep_math.h). The table is one thread per
 * (head, distance); the gradient is one block per head that accumulates in double and reduces in a
 * fixed-order tree (no atomics), so it is bit-identical from run to run. */
#include "mep_cuda.h"
#include "mep_math.h"

#include <biaskit/plugin_cuda.h>
#include <cuda_runtime.h>

#define MEP_THREADS 256

static __global__ void mep_table_kernel(bk_mep_spec spec, const float *slopes, const float *theta, int32_t heads,
                                        int32_t distances, float *table)
{
    int32_t h = (int32_t)blockIdx.y;
    float slope = slopes[h];
    float r1 = theta ? theta[h] : 0.0f, r2 = theta ? theta[heads + h] : 0.0f;
    for (int32_t d = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x); d < distances;
         d += (int32_t)(gridDim.x * blockDim.x))
        table[(size_t)h * (size_t)distances + (size_t)d] = bk_mep_bias(&spec, slope, r1, r2, d);
}

static __global__ void mep_backward_kernel(bk_mep_spec spec, const float *slopes, const float *theta, int32_t heads,
                                           int32_t distances, const float *dtable, float *dtheta)
{
    __shared__ double partial[2][MEP_THREADS];
    int32_t h = (int32_t)blockIdx.x;
    float slope = slopes[h], r1 = theta[h], r2 = theta[heads + h];
    const float *g = dtable + (size_t)h * (size_t)distances;
    double acc1 = 0.0, acc2 = 0.0;
    for (int32_t d = (int32_t)threadIdx.x; d < distances; d += MEP_THREADS) {
        float dr1 = 0.0f, dr2 = 0.0f;
        bk_mep_bias_grad(&spec, slope, r1, r2, d, &dr1, &dr2);
        acc1 += (double)g[d] * (double)dr1;
        acc2 += (double)g[d] * (double)dr2;
    }
    partial[0][threadIdx.x] = acc1;
    partial[1][threadIdx.x] = acc2;
    __syncthreads();
    for (int stride = MEP_THREADS / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) {
            partial[0][threadIdx.x] += partial[0][threadIdx.x + stride];
            partial[1][threadIdx.x] += partial[1][threadIdx.x + stride];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        dtheta[h] += (float)partial[0][0];
        dtheta[heads + h] += (float)partial[1][0];
    }
}

extern "C" int bk_mep_table_cuda(const biaskit_services *svc, const bk_mep_spec *spec, int32_t heads,
                                 const float *slopes, const float *theta, int32_t distances, float *table,
                                 void *stream, biaskit_error *err)
{
    unsigned blocks = biaskit_cuda_blocks(distances, MEP_THREADS);
    mep_table_kernel<<<dim3(blocks, (unsigned)heads), MEP_THREADS, 0, (cudaStream_t)stream>>>(
        *spec, slopes, theta, heads, distances, table);
    return biaskit_cuda_launched(svc, "the MEP table kernel", err);
}

extern "C" int bk_mep_table_backward_cuda(const biaskit_services *svc, const bk_mep_spec *spec, int32_t heads,
                                          const float *slopes, const float *theta, int32_t distances,
                                          const float *dtable, float *dtheta, void *stream, biaskit_error *err)
{
    mep_backward_kernel<<<(unsigned)heads, MEP_THREADS, 0, (cudaStream_t)stream>>>(*spec, slopes, theta, heads,
                                                                                   distances, dtable, dtheta);
    return biaskit_cuda_launched(svc, "the MEP gradient kernel", err);
}

extern "C" int bk_mep_upload(const biaskit_services *svc, const float *host, size_t count, float **device,
                             void *stream, biaskit_error *err)
{
    return biaskit_cuda_upload_once(svc, host, count, device, stream, "MEP slopes", err);
}

extern "C" void bk_mep_cuda_release(float *device)
{
    biaskit_cuda_free(device);
}
