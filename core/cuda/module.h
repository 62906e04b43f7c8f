/* The CUDA backend's module. In a CUDA build the cuda backend (cuda/backend_cuda.cu) and cuBLAS, which
 * it needs, are not linked into biaskit: they are the shared module biaskit_cuda_backend.so, which
 * cuda/loader.c dlopen()s when a cuda backend is created or a GPU answers the probe (cuda/device.h). So a
 * start of biaskit does not map cuBLAS (cuBLAS and cuBLASLt alone are close to 600 MB of address space;
 * under `ulimit -v 700000` even `biaskit --version` failed at start-up). The CUDA runtime itself (under
 * 1 MB) stays linked into the engine: the plugins' CUDA code shares it, as the SDK promises.
 *
 * The module exports one symbol, BK_CUDA_BACKEND_ENTRY, which returns a table of functions stamped
 * with BK_CUDA_MODULE_ABI and the sizes of the structures that cross the boundary, so that a module
 * from another build is refused by name instead of called. Where the module is: loader.c. */
#ifndef BK_CUDA_MODULE_H
#define BK_CUDA_MODULE_H

#include "model/backend.h"
#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Raised whenever the table below or a structure it passes changes its layout or meaning. */
#define BK_CUDA_MODULE_ABI 2u /* 2: create takes the GPU to use (bk_backend_cuda_create_on, cuda/device.h) */

#define BK_CUDA_BACKEND_MODULE "biaskit_cuda_backend.so"
#define BK_CUDA_BACKEND_ENTRY "bk_cuda_backend_module"

typedef struct bk_cuda_backend_api {
    unsigned abi;          /* BK_CUDA_MODULE_ABI */
    unsigned error_size;   /* sizeof(bk_error) */
    unsigned backend_size; /* sizeof(bk_backend) */
    /* bk_backend_cuda_create_on of device.h */
    int (*create)(bk_backend **out, bk_matmul_mode matmul, int64_t gpu, const char *gpu_where, bk_error *err);
} bk_cuda_backend_api;

typedef const bk_cuda_backend_api *(*bk_cuda_backend_entry)(void);

/* loader.c: NULL when the module loads and is this build's, else why not, naming its path (the same
 * text on every call; the module is loaded once). */
const char *bk_cuda_backend_module_error(void);

#ifdef __cplusplus
}
#endif

#endif
