/* ALiBi's table on the device: one thread per (head, distance), the same inline formula as the host. */
#include "alibi_cuda.h"
#include "alibi_math.h"

#include <biaskit/plugin_cuda.h>
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
    int rc = biaskit_cuda_upload_once(svc, slopes, (size_t)heads, device_slopes, stream, "slopes", err);
    if (rc)
        return rc;
    const int threads = 256;
    alibi_table_kernel<<<dim3(biaskit_cuda_blocks(distances, threads), (unsigned)heads), threads, 0,
                         (cudaStream_t)stream>>>(*device_slopes, heads, distances, table);
    return biaskit_cuda_launched(svc, "the table kernel", err);
}

extern "C" void bk_alibi_cuda_release(float *device_slopes)
{
    biaskit_cuda_free(device_slopes);
}
