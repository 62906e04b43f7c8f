/*
 * biaskit plugin SDK: the launch boilerplate of a plugin's CUDA code, written once. Include it from
 * .cu files only (it needs the CUDA runtime); the formulas stay in the plugin's BIASKIT_HD functions.
 *
 *     unsigned blocks = biaskit_cuda_blocks(distances, 256);
 *     my_kernel<<<dim3(blocks, heads), 256, 0, (cudaStream_t)stream>>>(...);
 *     return biaskit_cuda_launched(svc, "the table kernel", err);
 */
#ifndef BIASKIT_PLUGIN_CUDA_H
#define BIASKIT_PLUGIN_CUDA_H

#include <biaskit/plugin.h>

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

/* Most blocks a grid-stride loop over one table row gets: enough to fill a GPU, few enough that each
 * thread does several elements at long lengths. */
#define BIASKIT_CUDA_MAX_BLOCKS 1024

/* Blocks of `threads` threads for a grid-stride loop over n elements. */
static inline unsigned biaskit_cuda_blocks(int64_t n, int threads)
{
    int64_t blocks = (n + threads - 1) / threads;
    return (unsigned)(blocks < 1 ? 1 : blocks > BIASKIT_CUDA_MAX_BLOCKS ? BIASKIT_CUDA_MAX_BLOCKS : blocks);
}

/* After a kernel launch: BIASKIT_OK, or BIASKIT_ERR_DEVICE with "launching WHAT: <CUDA's reason>". */
static inline int biaskit_cuda_launched(const biaskit_services *svc, const char *what, biaskit_error *err)
{
    cudaError_t ce = cudaGetLastError();
    if (ce != cudaSuccess)
        return svc->error(err, BIASKIT_ERR_DEVICE, "launching %s: %s", what, cudaGetErrorString(ce));
    return BIASKIT_OK;
}

/* A device copy of `count` host floats (fixed values such as slopes), made on the first call when
 * *device is NULL and kept after that; free it with biaskit_cuda_free() in destroy(). `what` names
 * the values. This is how a plugin without parameters (theta = NULL) gets its fixed values to its
 * kernels: keep the host array in the instance (the copy is enqueued on `stream`, asynchronously)
 * and *device in the instance too; see the SDK guide (<prefix>/share/doc/biaskit/SDK.md, installed
 * with these headers), "Fixed values on the device". */
static inline int biaskit_cuda_upload_once(const biaskit_services *svc, const float *host, size_t count,
                                           float **device, void *stream, const char *what, biaskit_error *err)
{
    if (*device)
        return BIASKIT_OK;
    float *dev = NULL;
    /* a failed call is reported here and cleared (cudaGetLastError), so the next launch's check does not
     * report it as its own */
    cudaError_t ce = cudaMalloc((void **)&dev, sizeof(float) * count);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        return svc->error(err, BIASKIT_ERR_DEVICE, "cudaMalloc of %zu %s: %s", count, what, cudaGetErrorString(ce));
    }
    ce = cudaMemcpyAsync(dev, host, sizeof(float) * count, cudaMemcpyHostToDevice, (cudaStream_t)stream);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError();
        cudaFree(dev);
        return svc->error(err, BIASKIT_ERR_DEVICE, "copying the %s to the device: %s", what, cudaGetErrorString(ce));
    }
    *device = dev;
    return BIASKIT_OK;
}

static inline void biaskit_cuda_free(void *device)
{
    if (device)
        cudaFree(device);
}

#endif /* BIASKIT_PLUGIN_CUDA_H */
