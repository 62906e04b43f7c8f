/* The host layers built again under other names (model/host_simd.h): base_* for baseline x86-64
 * (host_clones_base*.c), avx2_* for AVX2 alone (host_clones_avx2*.c). BK_HOST_CLONES_DECLARE(prefix)
 * declares one such build's functions, with the signatures of model/layers.h, cpu/attention.h and
 * model/backend.h; test_host_clones and bench/bench_layers.c compare or time them against the
 * library's bk_* copies. */
#ifndef BK_TEST_HOST_CLONES_H
#define BK_TEST_HOST_CLONES_H

#include "cpu/attention.h"
#include "model/backend.h"

#include <stddef.h>
#include <stdint.h>

#define BK_HOST_CLONES_DECLARE(p)                                                                                    \
    void p##layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,           \
                              const float *bias, int N, int C);                                                      \
    void p##layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,       \
                               const float *weight, const float *mean, const float *rstd, int N, int C);             \
    void p##matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C,       \
                           int OC);                                                                                  \
    void p##matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,           \
                            const float *weight, int N, int C, int OC);                                              \
    void p##gelu_forward(float *out, const float *inp, size_t n);                                                    \
    void p##gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);                               \
    void p##residual_forward(float *out, const float *a, const float *b, size_t n);                                  \
    void p##residual_backward(float *da, float *db, const float *dout, size_t n);                                    \
    void p##crossentropy_forward(float *losses, float *probs, const float *logits, const int32_t *targets, int N,    \
                                 int V);                                                                             \
    void p##crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets, float dloss, int N,    \
                                  int V);                                                                            \
    int p##attention_forward(float *out, float *probs, const float *qkv, const bk_attention_bias *bias, int B, int T, \
                             int C, int H, bk_error *err);                                                           \
    int p##attention_backward(float *dqkv, float *const dtable[BK_STREAM_COUNT], const float *dout, const float *qkv, \
                              const float *probs, const bk_attention_bias *bias, int B, int T, int C, int H,         \
                              bk_error *err);                                                                        \
    void p##rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C, float eps); \
    void p##rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,  \
                             const float *rstd, int N, int C);                                                       \
    void p##swiglu_forward(float *out, const float *inp, int N, int F);                                              \
    void p##swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F);                         \
    bk_backend *p##backend_cpu(void);

#endif
