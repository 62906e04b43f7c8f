/* Which device computes, and the few CUDA memory operations the host side of the engine needs.
 * Compiled to stubs that report "built without CUDA" when BK_HAVE_CUDA is not defined (device_none.c),
 * so the engine links and runs the same way on a machine with no GPU, no driver, or no toolkit. */
#ifndef BK_DEVICE_H
#define BK_DEVICE_H

#include "model/backend.h"
#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

/* 1 when a CUDA device answers and the cuda backend can drive it (in a CUDA build its module, loaded
 * here when a device answers: cuda/module.h). `desc` gets one line either way: "cuda:0 NVIDIA H100 ...
 * (sm_90)" or "cpu (CUDA: <why not>)", naming the module and the loader's reason when it cannot be
 * loaded. */
int bk_device_probe(char *desc, size_t size);

/* The cuda backend (model/backend.h) on a chosen GPU: `gpu` >= 0 that device among the visible ones
 * ([run] gpu; an error naming `gpu_where` when there is no such device), -1 (BK_CUDA_GPU_AUTO) the one
 * of this process's local rank (cuda/policy.h: bk_cuda_choose_gpu). `gpu_where` names where [run] gpu
 * was set, "FILE:LINE:COL: [run] gpu" (NULL: "[run] gpu"). The backend's description, which the banner
 * prints, says which GPU and why ("cuda:1 ... ; GPU 1 (local rank 1 of Open MPI)").
 * bk_backend_cuda_create is this with -1. A build without CUDA fails as bk_backend_cuda_create does. */
int bk_backend_cuda_create_on(bk_backend **out, bk_matmul_mode matmul, int64_t gpu, const char *gpu_where,
                              bk_error *err);

int bk_device_alloc(void **ptr, size_t bytes, bk_error *err);
void bk_device_free(void *ptr);
int bk_device_upload(void *dst, const void *src, size_t bytes, bk_error *err);
/* Waits for all queued work, then copies. */
int bk_device_download(void *dst, const void *src, size_t bytes, bk_error *err);

#endif
