/* The host layers' vector copies compute the same bits as their baseline x86-64 copies
 * (model/host_simd.h). Three builds of the same sources: the library's functions (whichever copy the
 * loader picked for this CPU: AVX-512F, AVX2 or baseline), the base_* functions (built again without
 * BK_HOST_CLONES, host_clones_base*.c) and the avx2_* functions (built for AVX2 alone,
 * host_clones_avx2*.c, run where the CPU has AVX2), so that the AVX2 copy is checked also on a CPU
 * whose loader picks the AVX-512 one. The library's copy and the AVX2 build are each compared with the
 * baseline bit for bit on pseudo-random inputs of sizes that leave tails after the 8 lanes and both
 * vector widths: LayerNorm, matmul bias and bias gradient, GELU, residual, cross-entropy, attention
 * with one and two streams, AdamW and scale. */
#include "test_util.h"
#include "test_floats.h"
#include "host_clones.h"

#include "cpu/attention.h"
#include "model/backend.h"
#include "model/layers.h"
#include "util/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

BK_HOST_CLONES_DECLARE(base_)
BK_HOST_CLONES_DECLARE(avx2_)

/* One build of the functions compared with the baseline (base_*): the library's (bk_*), AVX2 alone (avx2_*). */
typedef struct {
    const char *name;
    void (*layernorm_forward)(float *, float *, float *, const float *, const float *, const float *, int, int);
    void (*layernorm_backward)(float *, float *, float *, const float *, const float *, const float *, const float *,
                               const float *, int, int);
    void (*matmul_forward)(float *, const float *, const float *, const float *, int, int, int);
    void (*matmul_backward)(float *, float *, float *, const float *, const float *, const float *, int, int, int);
    void (*gelu_forward)(float *, const float *, size_t);
    void (*gelu_backward)(float *, const float *, const float *, size_t);
    void (*residual_forward)(float *, const float *, const float *, size_t);
    void (*residual_backward)(float *, float *, const float *, size_t);
    void (*crossentropy_forward)(float *, float *, const float *, const int32_t *, int, int);
    void (*crossentropy_backward)(float *, const float *, const int32_t *, float, int, int);
    int (*attention_forward)(float *, float *, const float *, const bk_attention_bias *, int, int, int, int,
                             bk_error *);
    int (*attention_backward)(float *, float *const[BK_STREAM_COUNT], const float *, const float *, const float *,
                              const bk_attention_bias *, int, int, int, int, bk_error *);
    bk_backend *(*backend)(void);
    void (*rmsnorm_forward)(float *, float *, const float *, const float *, int, int, float);
    void (*rmsnorm_backward)(float *, float *, const float *, const float *, const float *, const float *, int, int);
    void (*swiglu_forward)(float *, const float *, int, int);
    void (*swiglu_backward)(float *, const float *, const float *, int, int);
} build;

#define BUILD(prefix, label)                                                                                         \
    {                                                                                                                \
        label, prefix##layernorm_forward, prefix##layernorm_backward, prefix##matmul_forward,                        \
            prefix##matmul_backward, prefix##gelu_forward, prefix##gelu_backward, prefix##residual_forward,          \
            prefix##residual_backward, prefix##crossentropy_forward, prefix##crossentropy_backward,                  \
            prefix##attention_forward, prefix##attention_backward, prefix##backend_cpu, prefix##rmsnorm_forward,     \
            prefix##rmsnorm_backward, prefix##swiglu_forward, prefix##swiglu_backward                                \
    }
static const build LIBRARY = BUILD(bk_, "the library's copy"), AVX2 = BUILD(avx2_, "the AVX2 build");

/* The builds compared with the baseline on this CPU: the library's, and the AVX2 one where the CPU has AVX2. */
static int compared(const build *out[2])
{
    int n = 0;
    out[n++] = &LIBRARY;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("avx2"))
        out[n++] = &AVX2;
#endif
    return n;
}

/* the build being compared with the baseline (in failure messages) */
static const build *current;

/* The cmocka test `name`: name##_in(build) for each build compared on this CPU. */
#define COMPARED_WITH_BASELINE(name)                                                                                 \
    static void name(void **state)                                                                                   \
    {                                                                                                                \
        (void)state;                                                                                                 \
        const build *builds[2];                                                                                      \
        for (int k = compared(builds); k-- > 0;) {                                                                   \
            current = builds[k];                                                                                     \
            name##_in(current);                                                                                      \
        }                                                                                                            \
    }

static void expect_same_bits(const char *what, int size, const float *a, const float *b, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (memcmp(&a[k], &b[k], sizeof *a))
            fail_msg("%s (size %d): element %zu differs between %s and the baseline: %.9g vs %.9g", what, size, k,
                     current->name, (double)a[k], (double)b[k]);
}

static int setup(void **state)
{
    (void)state;
#if defined(__x86_64__) && defined(__GNUC__)
    const char *picked = __builtin_cpu_supports("avx512f") ? "AVX-512F"
                         : __builtin_cpu_supports("avx2")  ? "AVX2"
                                                           : "baseline";
    print_message("the library runs its %s copies on this CPU; the AVX2 build is %s\n", picked,
                  __builtin_cpu_supports("avx2") ? "compared too" : "not run (no AVX2)");
#endif
    return 0;
}

static void layernorm_same_bits_in(const build *it)
{
    const int sizes[] = {1, 7, 8, 64, 130, 256};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int C = sizes[s], N = 37;
        const size_t n = (size_t)N * C;
        bk_rng r = {11u + (uint64_t)C};
        float *x = normal_floats(&r, n, 3.0), *w = normal_floats(&r, (size_t)C, 1.0);
        float *b = normal_floats(&r, (size_t)C, 1.0), *dy = normal_floats(&r, n, 1.0);
        float *y1 = calloc(n, sizeof(float)), *y2 = calloc(n, sizeof(float));
        float *m1 = calloc((size_t)N, sizeof(float)), *m2 = calloc((size_t)N, sizeof(float));
        float *s1 = calloc((size_t)N, sizeof(float)), *s2 = calloc((size_t)N, sizeof(float));
        float *dx1 = normal_floats(&r, n, 1.0), *dx2 = copy_floats(dx1, n);
        float *dw1 = calloc((size_t)C, sizeof(float)), *dw2 = calloc((size_t)C, sizeof(float));
        float *db1 = calloc((size_t)C, sizeof(float)), *db2 = calloc((size_t)C, sizeof(float));
        it->layernorm_forward(y1, m1, s1, x, w, b, N, C);
        base_layernorm_forward(y2, m2, s2, x, w, b, N, C);
        expect_same_bits("layernorm forward out", C, y1, y2, n);
        expect_same_bits("layernorm forward mean", C, m1, m2, (size_t)N);
        expect_same_bits("layernorm forward rstd", C, s1, s2, (size_t)N);
        it->layernorm_backward(dx1, dw1, db1, dy, x, w, m1, s1, N, C);
        base_layernorm_backward(dx2, dw2, db2, dy, x, w, m1, s1, N, C);
        expect_same_bits("layernorm backward dinp", C, dx1, dx2, n);
        expect_same_bits("layernorm backward dweight", C, dw1, dw2, (size_t)C);
        expect_same_bits("layernorm backward dbias", C, db1, db2, (size_t)C);
        free(x), free(w), free(b), free(dy), free(y1), free(y2), free(m1), free(m2), free(s1), free(s2);
        free(dx1), free(dx2), free(dw1), free(dw2), free(db1), free(db2);
    }
}

COMPARED_WITH_BASELINE(layernorm_same_bits)

static void matmul_same_bits_in(const build *it)
{
    const int N = 45, C = 19, OCs[] = {1, 13, 70};
    for (size_t s = 0; s < sizeof OCs / sizeof OCs[0]; s++) {
        const int OC = OCs[s];
        bk_rng r = {21u + (uint64_t)OC};
        float *x = normal_floats(&r, (size_t)N * C, 1.0), *w = normal_floats(&r, (size_t)OC * C, 1.0);
        float *bias = normal_floats(&r, (size_t)OC, 1.0), *dout = normal_floats(&r, (size_t)N * OC, 1.0);
        float *o1 = calloc((size_t)N * OC, sizeof(float)), *o2 = calloc((size_t)N * OC, sizeof(float));
        float *dx1 = calloc((size_t)N * C, sizeof(float)), *dx2 = calloc((size_t)N * C, sizeof(float));
        float *dw1 = calloc((size_t)OC * C, sizeof(float)), *dw2 = calloc((size_t)OC * C, sizeof(float));
        float *db1 = normal_floats(&r, (size_t)OC, 1.0), *db2 = copy_floats(db1, (size_t)OC);
        it->matmul_forward(o1, x, w, bias, N, C, OC);
        base_matmul_forward(o2, x, w, bias, N, C, OC);
        expect_same_bits("matmul forward", OC, o1, o2, (size_t)N * OC);
        it->matmul_backward(dx1, dw1, db1, dout, x, w, N, C, OC);
        base_matmul_backward(dx2, dw2, db2, dout, x, w, N, C, OC);
        expect_same_bits("matmul backward dinp", OC, dx1, dx2, (size_t)N * C);
        expect_same_bits("matmul backward dweight", OC, dw1, dw2, (size_t)OC * C);
        expect_same_bits("matmul backward dbias", OC, db1, db2, (size_t)OC);
        free(x), free(w), free(bias), free(dout), free(o1), free(o2), free(dx1), free(dx2), free(dw1), free(dw2);
        free(db1), free(db2);
    }
}

COMPARED_WITH_BASELINE(matmul_same_bits)

/* The llama family's layers: RMSNorm (forward, backward, its weight gradient) at widths off the 8 lanes, and
 * SwiGLU with saturated gates. */
static void llama_layers_same_bits_in(const build *it)
{
    const int N = 17, Cs[] = {1, 13, 64, 579};
    for (size_t s = 0; s < sizeof Cs / sizeof Cs[0]; s++) {
        const int C = Cs[s];
        const size_t n = (size_t)N * C;
        bk_rng r = {51u + (uint64_t)C};
        float *x = normal_floats(&r, n, 2.0), *w = normal_floats(&r, (size_t)C, 1.0), *dy = normal_floats(&r, n, 1.0);
        float *y1 = calloc(n, sizeof(float)), *y2 = calloc(n, sizeof(float));
        float *s1 = calloc((size_t)N, sizeof(float)), *s2 = calloc((size_t)N, sizeof(float));
        float *dx1 = normal_floats(&r, n, 1.0), *dx2 = copy_floats(dx1, n);
        float *dw1 = normal_floats(&r, (size_t)C, 1.0), *dw2 = copy_floats(dw1, (size_t)C);
        it->rmsnorm_forward(y1, s1, x, w, N, C, 1e-5f);
        base_rmsnorm_forward(y2, s2, x, w, N, C, 1e-5f);
        expect_same_bits("rmsnorm forward out", C, y1, y2, n);
        expect_same_bits("rmsnorm forward rstd", C, s1, s2, (size_t)N);
        it->rmsnorm_backward(dx1, dw1, dy, x, w, s1, N, C);
        base_rmsnorm_backward(dx2, dw2, dy, x, w, s1, N, C);
        expect_same_bits("rmsnorm backward dinp", C, dx1, dx2, n);
        expect_same_bits("rmsnorm backward dweight", C, dw1, dw2, (size_t)C);
        free(x), free(w), free(dy), free(y1), free(y2), free(s1), free(s2), free(dx1), free(dx2), free(dw1), free(dw2);
    }
    const int F = 37;
    bk_rng r = {61u};
    float *gu = normal_floats(&r, (size_t)N * 2 * F, 5.0), *dh = normal_floats(&r, (size_t)N * F, 1.0);
    gu[0] = 100.0f, gu[1] = -100.0f, gu[2] = 0.0f, gu[3] = -0.0f; /* saturated and signed-zero gates */
    float *h1 = calloc((size_t)N * F, sizeof(float)), *h2 = calloc((size_t)N * F, sizeof(float));
    float *d1 = normal_floats(&r, (size_t)N * 2 * F, 1.0), *d2 = copy_floats(d1, (size_t)N * 2 * F);
    it->swiglu_forward(h1, gu, N, F);
    base_swiglu_forward(h2, gu, N, F);
    expect_same_bits("swiglu forward", F, h1, h2, (size_t)N * F);
    it->swiglu_backward(d1, gu, dh, N, F);
    base_swiglu_backward(d2, gu, dh, N, F);
    expect_same_bits("swiglu backward", F, d1, d2, (size_t)N * 2 * F);
    free(gu), free(dh), free(h1), free(h2), free(d1), free(d2);
}

COMPARED_WITH_BASELINE(llama_layers_same_bits)

static void elementwise_same_bits_in(const build *it)
{
    const size_t n = 4099;
    bk_rng r = {31u};
    float *x = normal_floats(&r, n, 6.0), *y = normal_floats(&r, n, 1.0), *dout = normal_floats(&r, n, 1.0);
    x[0] = 100.0f, x[1] = -100.0f, x[2] = 0.0f, x[3] = -0.0f; /* saturated and signed-zero arguments */
    float *a1 = calloc(n, sizeof(float)), *a2 = calloc(n, sizeof(float));
    float *b1 = normal_floats(&r, n, 1.0), *b2 = copy_floats(b1, n);
    it->gelu_forward(a1, x, n);
    base_gelu_forward(a2, x, n);
    expect_same_bits("gelu forward", (int)n, a1, a2, n);
    it->gelu_backward(b1, x, dout, n);
    base_gelu_backward(b2, x, dout, n);
    expect_same_bits("gelu backward", (int)n, b1, b2, n);
    it->residual_forward(a1, x, y, n);
    base_residual_forward(a2, x, y, n);
    expect_same_bits("residual forward", (int)n, a1, a2, n);
    memcpy(a2, a1, n * sizeof(float));
    memcpy(b2, b1, n * sizeof(float));
    it->residual_backward(a1, b1, dout, n);
    base_residual_backward(a2, b2, dout, n);
    expect_same_bits("residual backward da", (int)n, a1, a2, n);
    expect_same_bits("residual backward db", (int)n, b1, b2, n);
    free(x), free(y), free(dout), free(a1), free(a2), free(b1), free(b2);
}

COMPARED_WITH_BASELINE(elementwise_same_bits)

static void crossentropy_same_bits_in(const build *it)
{
    const int Vs[] = {1, 5, 256, 259}, N = 23;
    for (size_t s = 0; s < sizeof Vs / sizeof Vs[0]; s++) {
        const int V = Vs[s];
        bk_rng r = {41u + (uint64_t)V};
        float *z = normal_floats(&r, (size_t)N * V, 4.0);
        int32_t targets[23];
        for (int i = 0; i < N; i++)
            targets[i] = (int32_t)(bk_rng_u64(&r) % (uint64_t)V);
        float *l1 = calloc((size_t)N, sizeof(float)), *l2 = calloc((size_t)N, sizeof(float));
        float *p1 = calloc((size_t)N * V, sizeof(float)), *p2 = calloc((size_t)N * V, sizeof(float));
        float *d1 = calloc((size_t)N * V, sizeof(float)), *d2 = calloc((size_t)N * V, sizeof(float));
        it->crossentropy_forward(l1, p1, z, targets, N, V);
        base_crossentropy_forward(l2, p2, z, targets, N, V);
        expect_same_bits("crossentropy loss", V, l1, l2, (size_t)N);
        expect_same_bits("crossentropy probabilities", V, p1, p2, (size_t)N * V);
        it->crossentropy_forward(l1, NULL, z, targets, N, V);
        expect_same_bits("crossentropy loss without probabilities", V, l1, l2, (size_t)N);
        it->crossentropy_backward(d1, p1, targets, 1.0f / N, N, V);
        base_crossentropy_backward(d2, p1, targets, 1.0f / N, N, V);
        expect_same_bits("crossentropy backward", V, d1, d2, (size_t)N * V);
        free(z), free(l1), free(l2), free(p1), free(p2), free(d1), free(d2);
    }
}

COMPARED_WITH_BASELINE(crossentropy_same_bits)

static void attention_same_bits_in(const build *it)
{
    const int Ts[] = {1, 37, 130}, B = 2, C = 24, H = 3;
    for (size_t s = 0; s < sizeof Ts / sizeof Ts[0]; s++) {
        const int T = Ts[s];
        const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, np = (size_t)B * H * T * T;
        bk_rng r = {51u + (uint64_t)T};
        float *qkv = normal_floats(&r, nqkv, 1.0), *dout = normal_floats(&r, nout, 1.0);
        float *tables[2] = {normal_floats(&r, (size_t)H * T, 1.0), normal_floats(&r, (size_t)H * T, 1.0)};
        int32_t *seg = malloc((size_t)B * T * sizeof *seg);
        assert_non_null(seg);
        for (int i = 0; i < B * T; i++)
            seg[i] = (i % T) / 3;
        for (int streams = 1; streams <= 2; streams++) {
            bk_attention_bias bias;
            memset(&bias, 0, sizeof bias);
            bias.distances = T;
            bias.table[0] = tables[0];
            bias.table[1] = streams == 2 ? tables[1] : NULL;
            bias.positions[1] = streams == 2 ? seg : NULL;
            float *o1 = calloc(nout, sizeof(float)), *o2 = calloc(nout, sizeof(float));
            float *p1 = calloc(np, sizeof(float)), *p2 = calloc(np, sizeof(float));
            float *dq1 = calloc(nqkv, sizeof(float)), *dq2 = calloc(nqkv, sizeof(float));
            float *g1[BK_STREAM_COUNT] = {calloc((size_t)H * T, sizeof(float)), calloc((size_t)H * T, sizeof(float))};
            float *g2[BK_STREAM_COUNT] = {calloc((size_t)H * T, sizeof(float)), calloc((size_t)H * T, sizeof(float))};
            bk_error err;
            assert_int_equal(it->attention_forward(o1, p1, qkv, &bias, B, T, C, H, &err), BK_OK);
            assert_int_equal(base_attention_forward(o2, p2, qkv, &bias, B, T, C, H, &err), BK_OK);
            expect_same_bits("attention forward out", T, o1, o2, nout);
            expect_same_bits("attention forward probabilities", T, p1, p2, np);
            assert_int_equal(it->attention_backward(dq1, g1, dout, qkv, p1, &bias, B, T, C, H, &err), BK_OK);
            assert_int_equal(base_attention_backward(dq2, g2, dout, qkv, p1, &bias, B, T, C, H, &err), BK_OK);
            expect_same_bits("attention backward dqkv", T, dq1, dq2, nqkv);
            expect_same_bits("attention backward dtable[token]", T, g1[0], g2[0], (size_t)H * T);
            expect_same_bits("attention backward dtable[segment]", T, g1[1], g2[1], (size_t)H * T);
            free(o1), free(o2), free(p1), free(p2), free(dq1), free(dq2);
            for (int k = 0; k < BK_STREAM_COUNT; k++)
                free(g1[k]), free(g2[k]);
        }
        free(qkv), free(dout), free(tables[0]), free(tables[1]), free(seg);
    }
}

COMPARED_WITH_BASELINE(attention_same_bits)

static void adamw_and_scale_same_bits_in(const build *it)
{
    bk_backend *lib = it->backend(), *base = base_backend_cpu();
    const size_t n = 1029;
    bk_rng r = {61u};
    float *p1 = normal_floats(&r, n, 1.0), *g = normal_floats(&r, n, 1.0), *m1 = normal_floats(&r, n, 0.1);
    float *v1 = normal_floats(&r, n, 0.1);
    for (size_t k = 0; k < n; k++)
        v1[k] *= v1[k];
    float *p2 = copy_floats(p1, n), *m2 = copy_floats(m1, n), *v2 = copy_floats(v1, n);
    bk_error err;
    for (int step = 1; step <= 3; step++) {
        const float bc1 = 1.0f - powf(0.9f, (float)step), bc2 = 1.0f - powf(0.95f, (float)step);
        assert_int_equal(lib->adamw(lib, p1, g, m1, v1, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, bc1, bc2, &err), BK_OK);
        assert_int_equal(base->adamw(base, p2, g, m2, v2, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, bc1, bc2, &err), BK_OK);
    }
    expect_same_bits("adamw parameters", (int)n, p1, p2, n);
    expect_same_bits("adamw first moments", (int)n, m1, m2, n);
    expect_same_bits("adamw second moments", (int)n, v1, v2, n);
    assert_int_equal(lib->scale(lib, p1, n, 0.37f, &err), BK_OK);
    assert_int_equal(base->scale(base, p2, n, 0.37f, &err), BK_OK);
    expect_same_bits("scale", (int)n, p1, p2, n);
    free(p1), free(g), free(m1), free(v1), free(p2), free(m2), free(v2);
}

COMPARED_WITH_BASELINE(adamw_and_scale_same_bits)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(layernorm_same_bits),     cmocka_unit_test(matmul_same_bits),
        cmocka_unit_test(llama_layers_same_bits),
        cmocka_unit_test(elementwise_same_bits),   cmocka_unit_test(crossentropy_same_bits),
        cmocka_unit_test(attention_same_bits),     cmocka_unit_test(adamw_and_scale_same_bits),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
