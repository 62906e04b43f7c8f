/* Which device computes, and the few CUDA memory operations the host side of the engine needs.
 * Compiled to stubs that report "built without CUDA" when BK_HAVE_CUDA is not defined (device_none.c),
 * so the engine links and runs the same way on a machine with no GPU, no driver, or no toolkit. */
#ifndef BK_DEVICE_H
#define BK_DEVICE_H

#include "util/error.h"

#include <stddef.h>

/* 1 when a CUDA device answers and the cuda backend can drive it (in a CUDA build its module, loaded
 * here when a device answers: cuda/module.h). `desc` gets one line either way: "cuda:0 NVIDIA H100 ...
 * (sm_90)" or "cpu (CUDA: <why not>)", naming the module and the loader's reason when it cannot be
 * loaded. */
int bk_device_probe(char *desc, size_t size);

int bk_device_alloc(void **ptr, size_t bytes, bk_error *err);
void bk_device_free(void *ptr);
int bk_device_upload(void *dst, const void *src, size_t bytes, bk_error *err);
/* Waits for all queued work, then copies. */
int bk_device_download(void *dst, const void *src, size_t bytes, bk_error *err);

#endif
