/* device.h for a build without CUDA (-DBIASKIT_CUDA=OFF or no nvcc). */
#include "cuda/device.h"
#include "model/backend.h"

#include <stdio.h>

int bk_device_probe(char *desc, size_t size)
{
    snprintf(desc, size, "cpu (built without CUDA)");
    return 0;
}

static int no_cuda(bk_error *err)
{
    return bk_fail(err, BK_ERR_UNSUPPORTED, "this biaskit was built without CUDA (rebuild with nvcc available)");
}

int bk_device_alloc(void **ptr, size_t bytes, bk_error *err)
{
    (void)bytes;
    *ptr = NULL;
    return no_cuda(err);
}

void bk_device_free(void *ptr)
{
    (void)ptr;
}

int bk_device_upload(void *dst, const void *src, size_t bytes, bk_error *err)
{
    (void)dst, (void)src, (void)bytes;
    return no_cuda(err);
}

int bk_device_download(void *dst, const void *src, size_t bytes, bk_error *err)
{
    (void)dst, (void)src, (void)bytes;
    return no_cuda(err);
}

/* model/backend.h: the CUDA backend of a build without CUDA. */
int bk_backend_cuda_create(bk_backend **out, bk_matmul_mode matmul, bk_error *err)
{
    (void)matmul;
    *out = NULL;
    return bk_fail(err, BK_ERR_UNSUPPORTED,
                   "this biaskit was built without CUDA: no cuda backend (rebuild with nvcc available, "
                   "or use the cpu backend)");
}

int bk_backend_cuda_create_on(bk_backend **out, bk_matmul_mode matmul, int64_t gpu, const char *gpu_where,
                              bk_error *err)
{
    (void)gpu, (void)gpu_where;
    return bk_backend_cuda_create(out, matmul, err);
}
