/* The Qin et al. table on the device: one thread per (head, distance), the same inline formula as the
 * host (qin_math.h). */
#include "qin_cuda.h"
#include "qin_math.h"

#include <biaskit/plugin_cuda.h>
#include <cuda_runtime.h>

#define QIN_THREADS 256

static __global__ void qin_table_kernel(int form, int32_t offset, int32_t distances, float *table)
{
    int32_t h = (int32_t)blockIdx.y;
    for (int32_t d = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x); d < distances;
         d += (int32_t)(gridDim.x * blockDim.x))
        table[(size_t)h * (size_t)distances + (size_t)d] = bk_qin_bias(form, offset, d);
}

extern "C" int bk_qin_table_cuda(const biaskit_services *svc, int form, int32_t offset, int32_t heads,
                                 int32_t distances, float *table, void *stream, biaskit_error *err)
{
    unsigned blocks = biaskit_cuda_blocks(distances, QIN_THREADS);
    qin_table_kernel<<<dim3(blocks, (unsigned)heads), QIN_THREADS, 0, (cudaStream_t)stream>>>(
        form, offset, distances, table);
    return biaskit_cuda_launched(svc, "the qin table kernel", err);
}
