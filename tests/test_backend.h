/* Shared by the cmocka tests that run the same cases on several backends of model/backend.h
 * (test_backend_layers, test_headnorm); include after test_util.h. A group's state is a fixture whose backend
 * is NULL when it is missing (the CUDA one without a GPU: each case then prints why and is skipped);
 * OK(expr) fails the test with the error's message; put/get move buffers to and from a backend; expect_same
 * compares bit for bit. */
#ifndef BK_TEST_BACKEND_H
#define BK_TEST_BACKEND_H

#include "cuda/device.h"
#include "model/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fixture {
    int kind; /* bk_backend_kind */
    bk_backend *be;
    char why[512]; /* why the backend is missing */
} fixture;

#define OK(expr)                                                                                                \
    do {                                                                                                        \
        bk_error err_;                                                                                          \
        bk_error_clear(&err_);                                                                                  \
        int rc_ = (expr);                                                                                       \
        if (rc_ != BK_OK)                                                                                       \
            fail_msg("%s returned %d: %s", #expr, rc_, err_.message);                                          \
    } while (0)

/* the backend of the case, or skip with the reason */
static inline bk_backend *backend_of(void **state)
{
    fixture *f = (fixture *)*state;
    if (!f->be) {
        printf("skipped: %s\n", f->why);
        skip();
    }
    return f->be;
}

/* a backend buffer holding `bytes` of host data (zeroed when host is NULL) */
static inline void *put(bk_backend *be, const void *host, size_t bytes)
{
    void *p = NULL;
    OK(be->alloc(be, &p, bytes, &err_));
    assert_non_null(p);
    if (host)
        OK(be->upload(be, p, host, bytes, &err_));
    return p;
}

/* a new host array with `count` floats of backend buffer p */
static inline float *get(bk_backend *be, const float *p, size_t count)
{
    float *h = malloc((count ? count : 1) * sizeof *h);
    assert_non_null(h);
    OK(be->download(be, h, p, count * sizeof *h, &err_));
    return h;
}

/* equal bit for bit (what the device must reproduce exactly) */
static inline void expect_same(const char *what, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            fail_msg("%s: element %zu is %.9g (bits differ), expected exactly %.9g (of %zu)", what, i, got[i],
                     want[i], n);
}

/* --- the groups' setups ---------------------------------------------------------------------------- */

static inline int emulated_setup(void **state)
{
    static fixture f;
    bk_error err;
    f.kind = BK_BACKEND_EMULATED;
    if (bk_backend_emulated_create(&f.be, BK_MATMUL_FP32, &err) != BK_OK) {
        printf("bk_backend_emulated_create failed: %s\n", err.message);
        return -1;
    }
    if (strcmp(f.be->name, "emulated") != 0 || !f.be->on_device || f.be->stream(f.be) != NULL) {
        printf("emulated backend: name '%s', on_device %d; expected 'emulated', 1 and a NULL stream\n", f.be->name,
               f.be->on_device);
        return -1;
    }
    *state = &f;
    return 0;
}

static inline int cuda_setup(void **state)
{
    static fixture f;
    char desc[256];
    bk_error err;
    f.kind = BK_BACKEND_CUDA;
    *state = &f;
    if (!bk_device_probe(desc, sizeof desc)) {
        snprintf(f.why, sizeof f.why, "the CUDA cases need a GPU: %s", desc);
        bk_backend *be = NULL;
        if (bk_backend_cuda_create(&be, BK_MATMUL_FP32, &err) == BK_OK || be) {
            printf("bk_backend_cuda_create succeeded where no GPU answers\n");
            return -1;
        }
        return 0;
    }
    if (bk_backend_cuda_create(&f.be, BK_MATMUL_FP32, &err) != BK_OK) {
        printf("a GPU answers (%s) but bk_backend_cuda_create failed: %s\n", desc, err.message);
        return -1;
    }
    printf("CUDA backend: %s\n", f.be->description);
    return 0;
}

static inline int teardown(void **state)
{
    fixture *f = (fixture *)*state;
    bk_backend_destroy(f->be);
    f->be = NULL;
    return 0;
}

#endif
