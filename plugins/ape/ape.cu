/* Absolute position embeddings on the device (`ape`, and `bipe`'s intra-segment table): the same inline
 * formulas as the host (ape_math.h). Forward is one thread per output element. The gradient is
 * deterministic without atomics and equal to the host loop bit for bit (ape_cuda.h says how). */
#include "ape_cuda.h"
#include "ape_math.h"

#include <biaskit/plugin_cuda.h>
#include <cuda_runtime.h>

#define APE_THREADS 256

static __global__ void ape_embed_kernel(const float *table, int32_t rows, double base, double scale, int32_t C,
                                        const int32_t *positions, int64_t count, float *out)
{
    const int64_t total = count * (int64_t)C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int32_t p = positions[i / C], c = (int32_t)(i % C);
        out[i] += table ? bk_ape_learned(table, rows, C, p, c) : bk_ape_sinusoidal(base, scale, p, c, C);
    }
}

/* The runs: runs[0] = the number K of maximal stretches in which row(p) does not decrease, runs[1 + k]
 * the first token of run k, runs[1 + K] = count. One block: each thread counts the breaks of its chunk
 * of tokens, thread 0 turns the counts into offsets, then each thread writes its breaks in order. */
static __global__ void ape_runs_kernel(const int32_t *positions, int64_t count, int32_t rows, int64_t *runs)
{
    __shared__ int64_t offset[APE_THREADS + 1];
    const int64_t chunk = (count + APE_THREADS - 1) / APE_THREADS;
    const int64_t lo = (int64_t)threadIdx.x * chunk, hi = lo + chunk < count ? lo + chunk : count;
    int64_t breaks = 0;
    for (int64_t n = lo > 1 ? lo : 1; n < hi; n++)
        breaks += bk_ape_row(positions[n], rows) < bk_ape_row(positions[n - 1], rows);
    offset[threadIdx.x + 1] = breaks;
    __syncthreads();
    if (threadIdx.x == 0) {
        offset[0] = 0;
        for (int t = 1; t <= APE_THREADS; t++)
            offset[t] += offset[t - 1];
        runs[0] = offset[APE_THREADS] + 1;
        runs[1] = 0;
        runs[2 + offset[APE_THREADS]] = count;
    }
    __syncthreads();
    int64_t k = offset[threadIdx.x];
    for (int64_t n = lo > 1 ? lo : 1; n < hi; n++)
        if (bk_ape_row(positions[n], rows) < bk_ape_row(positions[n - 1], rows))
            runs[2 + k++] = n;
}

/* One thread per (row r, channel c): its tokens, run after run, in ascending order. */
static __global__ void ape_backward_kernel(int32_t rows, int32_t C, const int32_t *positions, const int64_t *runs,
                                           const float *dout, float *dtable)
{
    const int64_t total = (int64_t)rows * C, n_runs = runs[0];
    const int64_t *start = runs + 1;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int32_t r = (int32_t)(i / C), c = (int32_t)(i % C);
        float acc = dtable[i];
        for (int64_t k = 0; k < n_runs; k++) {
            int64_t lo = start[k], hi = start[k + 1];
            if (bk_ape_row(positions[lo], rows) > r || bk_ape_row(positions[hi - 1], rows) < r)
                continue;
            while (lo < hi) { /* the first token of the run whose row is >= r */
                int64_t mid = lo + (hi - lo) / 2;
                if (bk_ape_row(positions[mid], rows) < r)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            for (int64_t n = lo; n < start[k + 1] && bk_ape_row(positions[n], rows) == r; n++)
                acc += dout[n * C + c];
        }
        dtable[i] = acc;
    }
}

extern "C" int bk_ape_embed_cuda(const biaskit_services *svc, const float *table, int32_t rows, double base,
                                 double scale, int32_t C, const int32_t *positions, int64_t count, float *out, void *stream,
                                 biaskit_error *err)
{
    if (count <= 0)
        return BIASKIT_OK;
    unsigned blocks = biaskit_cuda_blocks(count * (int64_t)C, APE_THREADS);
    ape_embed_kernel<<<blocks, APE_THREADS, 0, (cudaStream_t)stream>>>(table, rows, base, scale, C, positions, count, out);
    return biaskit_cuda_launched(svc, "the position-embedding kernel", err);
}

extern "C" int bk_ape_embed_backward_cuda(const biaskit_services *svc, int32_t rows, int32_t C,
                                          const int32_t *positions, int64_t count, const float *dout, float *dtable,
                                          int64_t **runs, int64_t *runs_capacity, void *stream, biaskit_error *err)
{
    if (count <= 0)
        return BIASKIT_OK;
    if (count + 2 > *runs_capacity) { /* grown rarely; the old buffer may still be read by queued work */
        cudaError_t ce = cudaStreamSynchronize((cudaStream_t)stream);
        if (ce == cudaSuccess) {
            cudaFree(*runs);
            *runs = NULL;
            *runs_capacity = 0;
            ce = cudaMalloc((void **)runs, sizeof(int64_t) * (size_t)(count + 2));
        }
        if (ce != cudaSuccess)
            return svc->error(err, BIASKIT_ERR_DEVICE, "scratch for the runs of %lld positions: %s", (long long)count,
                              cudaGetErrorString(ce));
        *runs_capacity = count + 2;
    }
    ape_runs_kernel<<<1, APE_THREADS, 0, (cudaStream_t)stream>>>(positions, count, rows, *runs);
    int rc = biaskit_cuda_launched(svc, "the position-runs kernel", err);
    if (rc)
        return rc;
    unsigned blocks = biaskit_cuda_blocks((int64_t)rows * C, APE_THREADS);
    ape_backward_kernel<<<blocks, APE_THREADS, 0, (cudaStream_t)stream>>>(rows, C, positions, *runs, dout, dtable);
    return biaskit_cuda_launched(svc, "the position-embedding gradient kernel", err);
}

extern "C" void bk_ape_cuda_release(void *device)
{
    biaskit_cuda_free(device);
}
