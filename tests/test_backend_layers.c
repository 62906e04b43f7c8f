/* The device backend's layers, optimizer and mixing (core/gpu/ops_layers.h) against the CPU reference
 * functions (model/layers.h, train/adamw.c, bias/mix.h), run twice: on the emulated backend (the
 * device code compiled as C, always) and on the CUDA backend when a GPU answers (otherwise every
 * CUDA case prints why and is skipped). Shapes are awkward on purpose: B = 3, T = 37 or 130, C = 96,
 * H = 12, V = 67, so that no row count is a multiple of a chunk, block or tile.
 *
 * Tolerances. Where the device does exactly the CPU's float operations in the CPU's order (copies,
 * single additions or products, the encoder's per-id sums, the grouped-query heads' copies and sums, the
 * gradient norm) the results must be equal bit for bit on both backends; so must, when emulated, the
 * LayerNorm and RMSNorm rows (forward, backward dinp), the cross-entropy rows (one thread per lane of the
 * CPU's sums) and SwiGLU (the same expf; a GPU's expf and fused multiply-adds differ), the block programs
 * checked in both thread orders. Elsewhere the error of element i is measured relative to its
 * magnitude, |got - want| / (|want| + rms(want)) (the rms term is a floor for entries that cancel to
 * near 0); the bounds, stated at each check, allow what a GPU may legitimately change: fused
 * multiply-adds (one rounding instead of two, ~6e-8), device expf (2 ulp), cuBLAS's summation order
 * (~sqrt(k) ulp of the largest partial sums) and a different grouping of double sums (~1e-16). */
#include "test_util.h"
#include "test_backend.h"
#include "test_floats.h"

#include "bias/mix.h"
#include "gpu/dev.h" /* bk_emulated_thread_order */
#include "gpu/mma.h" /* bk_bf16_round, bk_bf16_value, bk_tf32_round */
#include "model/backend.h"
#include "model/layers.h"
#include "model/rotary_math.h"
#include "train/adamw.h"
#include "util/rng.h"

#include <math.h>
#include <stdlib.h>

enum { B = 3, T_SHORT = 37, T_LONG = 130, C = 96, H = 12, V = 67 };

/* --- helpers ------------------------------------------------------------------------------------- */

/* max_i |got - want| / (|want| + rms(want)), and its i in *at (NaN counts as the worst) */
static double max_rel_error(const float *got, const float *want, size_t n, size_t *at)
{
    double ss = 0.0;
    for (size_t i = 0; i < n; i++)
        ss += (double)want[i] * want[i];
    const double rms = n ? sqrt(ss / (double)n) : 0.0;
    double worst = 0.0;
    *at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (fabs(want[i]) + rms + 1e-30);
        if (!(e <= worst)) {
            worst = e, *at = i;
            if (isnan(e))
                break;
        }
    }
    return worst;
}

/* max_i |got - want| / (|want| + rms(want)) <= tol */
static void expect_close(const char *what, const float *got, const float *want, size_t n, double tol)
{
    size_t at;
    const double worst = max_rel_error(got, want, n, &at);
    if (!(worst <= tol))
        fail_msg("%s: element %zu is %.9g, expected %.9g: relative error %.3g exceeds %.3g (of %zu values)", what,
                 at, got[at], want[at], worst, tol, n);
}

/* a device buffer with the same content as host array x, checked against it after the call */
typedef struct pair {
    float *host, *dev;
    size_t n;
} pair;

/* bits when tol is 0, else expect_close */
static void check_floats(const char *what, const float *got, const float *want, size_t n, double tol)
{
    if (tol == 0.0)
        expect_same(what, got, want, n);
    else
        expect_close(what, got, want, n, tol);
}

/* the emulated block programs' thread order within a phase (gpu/dev.h): 0 ascending, 1 descending */
static void set_thread_order(int order)
{
    bk_emulated_thread_order = order;
}

static pair pair_of(bk_backend *be, const float *x, size_t n)
{
    pair p;
    p.n = n;
    p.host = copy_floats(x, n);
    p.dev = (float *)put(be, x, n * sizeof(float));
    return p;
}

static void pair_check(bk_backend *be, const char *what, const pair *p, double tol)
{
    float *got = get(be, p->dev, p->n);
    check_floats(what, got, p->host, p->n, tol);
    free(got);
}

static void pair_free(bk_backend *be, pair *p)
{
    be->release(be, p->dev);
    free(p->host);
    p->host = p->dev = NULL;
}

/* --- memory ------------------------------------------------------------------------------------ */

static void memory_functions(void **state)
{
    bk_backend *be = backend_of(state);
    enum { N = 1000 };
    bk_rng r = biaskit_rng_seeded(1);
    float *x = normal_floats(&r, N, 1.0), zeros[N];
    memset(zeros, 0, sizeof zeros);

    float *a = (float *)put(be, NULL, N * sizeof(float)); /* alloc zeroes */
    float *h = get(be, a, N);
    expect_same("a new allocation", h, zeros, N);
    free(h);

    OK(be->upload(be, a, x, N * sizeof(float), &err_));
    h = get(be, a, N);
    expect_same("upload then download", h, x, N);
    free(h);

    float *b = (float *)put(be, NULL, N * sizeof(float));
    OK(be->copy(be, b, a, N * sizeof(float), &err_));
    OK(be->zero(be, b + 100, 200 * sizeof(float), &err_));
    OK(be->sync(be, &err_));
    h = get(be, b, N);
    memset(x + 100, 0, 200 * sizeof(float));
    expect_same("copy, then zero of [100, 300)", h, x, N);
    free(h);

    void *e1 = NULL, *e2 = NULL;
    OK(be->alloc(be, &e1, 0, &err_));
    OK(be->alloc(be, &e2, 0, &err_));
    if (!e1 || !e2 || e1 == e2)
        fail_msg("alloc of 0 bytes gave %p and %p; expected two distinct valid pointers", e1, e2);
    be->release(be, e1), be->release(be, e2), be->release(be, a), be->release(be, b);
    free(x);
}

/* --- encoder ------------------------------------------------------------------------------------- */

/* the batch's ids: many repeats (ids 0..9 mostly, a few 66), so dwte rows sum several tokens */
static void batch_ids(bk_rng *r, int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        ids[i] = bk_rng_uniform(r) < 0.1 ? V - 1 : (int32_t)(bk_rng_u64(r) % 10);
}

static void batch_buckets_are_sorted(void **state)
{
    (void)state;
    enum { N = B * T_LONG };
    bk_rng r = biaskit_rng_seeded(2);
    int32_t in[N], ids[N + 1], start[N + 1], tokens[N + 1];
    batch_ids(&r, in, N);
    int32_t u = bk_batch_buckets(in, N, ids, start, tokens);
    int distinct = 0;
    for (int v = 0; v < V; v++)
        for (int i = 0; i < N; i++)
            if (in[i] == v) {
                distinct++;
                break;
            }
    if (u != distinct)
        fail_msg("bk_batch_buckets: %d buckets for %d distinct ids", (int)u, distinct);
    if (start[0] != 0 || start[u] != N)
        fail_msg("bk_batch_buckets: buckets span [%d, %d), expected [0, %d)", (int)start[0], (int)start[u], N);
    for (int32_t k = 0; k < u; k++) {
        if (k > 0 && ids[k] <= ids[k - 1])
            fail_msg("bk_batch_buckets: ids %d then %d, expected strictly ascending", (int)ids[k - 1], (int)ids[k]);
        for (int32_t j = start[k]; j < start[k + 1]; j++) {
            if (in[tokens[j]] != ids[k])
                fail_msg("bk_batch_buckets: token %d (id %d) in the bucket of id %d", (int)tokens[j],
                         (int)in[tokens[j]], (int)ids[k]);
            if (j > start[k] && tokens[j] <= tokens[j - 1])
                fail_msg("bk_batch_buckets: tokens %d then %d in the bucket of id %d, expected ascending",
                         (int)tokens[j - 1], (int)tokens[j], (int)ids[k]);
        }
    }
    assert_int_equal(bk_batch_buckets(in, 0, ids, start, tokens), 0);
    assert_int_equal(start[0], 0);
}

/* forward and backward are copies and float additions in the CPU's order: equal bits */
static void encoder_matches_cpu(void **state)
{
    bk_backend *be = backend_of(state);
    enum { N = B * T_SHORT };
    bk_rng r = biaskit_rng_seeded(3);
    int32_t in[N], ids[N + 1], start[N + 1], tokens[N + 1];
    batch_ids(&r, in, N);
    int32_t u = bk_batch_buckets(in, N, ids, start, tokens);
    float *wte = normal_floats(&r, (size_t)V * C, 1.0), *dout = normal_floats(&r, (size_t)N * C, 1.0);
    float *dwte0 = normal_floats(&r, (size_t)V * C, 0.5), out_cpu[N * C];

    bk_batch_view view;
    memset(&view, 0, sizeof view);
    view.inputs = (const int32_t *)put(be, in, sizeof in);
    view.inputs_host = in;
    view.bucket_ids = (const int32_t *)put(be, ids, (size_t)u * sizeof(int32_t));
    view.bucket_start = (const int32_t *)put(be, start, (size_t)(u + 1) * sizeof(int32_t));
    view.bucket_tokens = (const int32_t *)put(be, tokens, (size_t)N * sizeof(int32_t));
    view.n_buckets = u;
    float *wte_d = (float *)put(be, wte, (size_t)V * C * sizeof(float));
    float *out_d = (float *)put(be, NULL, (size_t)N * C * sizeof(float));
    float *dout_d = (float *)put(be, dout, (size_t)N * C * sizeof(float));

    bk_encoder_forward(out_cpu, in, wte, B, T_SHORT, C);
    OK(be->encoder_forward(be, out_d, &view, wte_d, B, T_SHORT, C, &err_));
    float *h = get(be, out_d, (size_t)N * C);
    expect_same("encoder forward", h, out_cpu, (size_t)N * C);
    free(h);

    pair dwte = pair_of(be, dwte0, (size_t)V * C);
    bk_encoder_backward(dwte.host, dout, in, B, T_SHORT, C);
    OK(be->encoder_backward(be, dwte.dev, dout_d, &view, B, T_SHORT, C, &err_));
    pair_check(be, "encoder backward (dwte, repeated ids)", &dwte, 0.0);

    pair_free(be, &dwte);
    be->release(be, (void *)view.inputs), be->release(be, (void *)view.bucket_ids);
    be->release(be, (void *)view.bucket_start), be->release(be, (void *)view.bucket_tokens);
    be->release(be, wte_d), be->release(be, out_d), be->release(be, dout_d);
    free(wte), free(dout), free(dwte0);
}

/* --- layernorm ----------------------------------------------------------------------------------- */

static void layernorm_matches_cpu(void **state)
{
    bk_backend *be = backend_of(state);
    enum { N = B * T_LONG }; /* 390 rows: 12 full chunks of 32 and one of 6 */
    bk_rng r = biaskit_rng_seeded(4);
    float *x = normal_floats(&r, (size_t)N * C, 2.0), *w = normal_floats(&r, C, 1.0), *b = normal_floats(&r, C, 0.3);
    for (int i = 0; i < N * C; i++)
        x[i] += 0.5f; /* a mean that is not 0 */
    float *dy = normal_floats(&r, (size_t)N * C, 1.0), *dx0 = normal_floats(&r, (size_t)N * C, 0.5);
    float *dw0 = normal_floats(&r, C, 0.5), *db0 = normal_floats(&r, C, 0.5);
    float *out = malloc((size_t)N * C * sizeof *out), mean[N], rstd[N];
    assert_non_null(out);
    bk_layernorm_forward(out, mean, rstd, x, w, b, N, C);

    float *x_d = (float *)put(be, x, (size_t)N * C * sizeof(float)), *w_d = (float *)put(be, w, C * sizeof(float));
    float *b_d = (float *)put(be, b, C * sizeof(float)), *dy_d = (float *)put(be, dy, (size_t)N * C * sizeof(float));
    float *out_d = (float *)put(be, NULL, (size_t)N * C * sizeof(float));
    float *mean_d = (float *)put(be, NULL, N * sizeof(float)), *rstd_d = (float *)put(be, NULL, N * sizeof(float));
    /* forward: double statistics as the CPU, one thread per lane of the CPU's sums: the CPU's bits when
     * emulated (in either thread order); a GPU may fuse (x - m) s w + b: 1e-6 */
    const double fwd_tol = be->kind == BK_BACKEND_EMULATED ? 0.0 : 1e-6;
    for (int order = 0; order < (be->kind == BK_BACKEND_EMULATED ? 2 : 1); order++) {
        set_thread_order(order);
        OK(be->layernorm_forward(be, BK_STORAGE_FP32, out_d, mean_d, rstd_d, x_d, w_d, b_d, N, C, &err_));
        float *h = get(be, out_d, (size_t)N * C);
        check_floats("layernorm forward out", h, out, (size_t)N * C, fwd_tol);
        free(h);
        h = get(be, mean_d, N);
        check_floats("layernorm forward mean", h, mean, N, fwd_tol);
        free(h);
        h = get(be, rstd_d, N);
        check_floats("layernorm forward rstd", h, rstd, N, fwd_tol);
        free(h);
    }
    set_thread_order(0);

    /* backward from the CPU's statistics, so that only the backward is compared */
    OK(be->upload(be, mean_d, mean, sizeof mean, &err_));
    OK(be->upload(be, rstd_d, rstd, sizeof rstd, &err_));
    pair dx = pair_of(be, dx0, (size_t)N * C), dw = pair_of(be, dw0, C), db = pair_of(be, db0, C);
    bk_layernorm_backward(dx.host, dw.host, db.host, dy, x, w, mean, rstd, N, C);
    OK(be->layernorm_backward(be, dx.dev, dw.dev, db.dev, dy_d, x_d, w_d, mean_d, rstd_d, N, C, &err_));
    /* dinp: the CPU's per-row double means by lanes (its bits when emulated), float products a GPU may
     * fuse: 1e-5 */
    pair_check(be, "layernorm backward dinp", &dx, be->kind == BK_BACKEND_EMULATED ? 0.0 : 1e-5);
    /* dweight, dbias: double sums over 390 rows grouped by chunks of 32 instead of in one run: 1e-6 */
    pair_check(be, "layernorm backward dweight", &dw, 1e-6);
    pair_check(be, "layernorm backward dbias", &db, 1e-6);

    pair_free(be, &dx), pair_free(be, &dw), pair_free(be, &db);
    be->release(be, x_d), be->release(be, w_d), be->release(be, b_d), be->release(be, dy_d);
    be->release(be, out_d), be->release(be, mean_d), be->release(be, rstd_d);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0), free(out);
}

/* --- the llama family: RMSNorm, SwiGLU, grouped-query heads -------------------------------------- */

/* N rows of Cn channels (x with a mean that is not 0, as a residual stream has) */
static void rmsnorm_case(bk_backend *be, int N, int Cn, uint64_t seed)
{
    const float eps = 1e-6f;
    const size_t NC = (size_t)N * Cn;
    bk_rng r = biaskit_rng_seeded(seed);
    float *x = normal_floats(&r, NC, 2.0), *w = normal_floats(&r, Cn, 1.0), *dy = normal_floats(&r, NC, 1.0);
    float *dx0 = normal_floats(&r, NC, 0.5), *dw0 = normal_floats(&r, Cn, 0.5), *garbage = normal_floats(&r, NC, 1.0);
    for (size_t i = 0; i < NC; i++)
        x[i] += 0.5f;
    x[0] = 0.0f, x[1] = -0.0f; /* row 0 keeps a few exact zeros */
    float *out = malloc(NC * sizeof *out), *rstd = malloc((size_t)N * sizeof *rstd);
    assert_non_null(out);
    assert_non_null(rstd);
    bk_rmsnorm_forward(out, rstd, x, w, N, Cn, eps);

    float *x_d = (float *)put(be, x, NC * sizeof(float)), *w_d = (float *)put(be, w, (size_t)Cn * sizeof(float));
    float *dy_d = (float *)put(be, dy, NC * sizeof(float)), *out_d = (float *)put(be, garbage, NC * sizeof(float));
    float *rstd_d = (float *)put(be, garbage, (size_t)N * sizeof(float));
    /* forward: the CPU's lane sums of squares in double, one thread per lane, then x rstd w (two products,
     * nothing to fuse): the CPU's bits when emulated (in either thread order); on a GPU: 1e-6 */
    const double fwd_tol = be->kind == BK_BACKEND_EMULATED ? 0.0 : 1e-6;
    for (int order = 0; order < (be->kind == BK_BACKEND_EMULATED ? 2 : 1); order++) {
        set_thread_order(order);
        OK(be->rmsnorm_forward(be, out_d, rstd_d, x_d, w_d, N, Cn, eps, &err_));
        float *h = get(be, out_d, NC);
        check_floats("rmsnorm forward out", h, out, NC, fwd_tol);
        free(h);
        h = get(be, rstd_d, (size_t)N);
        check_floats("rmsnorm forward rstd", h, rstd, (size_t)N, fwd_tol);
        free(h);
    }

    /* backward from the CPU's rstd, so that only the backward is compared; accumulating into dinp and
     * dweight (the pairs start from non-zero values) */
    OK(be->upload(be, rstd_d, rstd, (size_t)N * sizeof(float), &err_));
    pair dx = pair_of(be, dx0, NC), dw = pair_of(be, dw0, (size_t)Cn);
    bk_rmsnorm_backward(dx.host, dw.host, dy, x, w, rstd, N, Cn);
    for (int order = 0; order < (be->kind == BK_BACKEND_EMULATED ? 2 : 1); order++) {
        set_thread_order(order);
        OK(be->upload(be, dx.dev, dx0, NC * sizeof(float), &err_));
        OK(be->upload(be, dw.dev, dw0, (size_t)Cn * sizeof(float), &err_));
        OK(be->rmsnorm_backward(be, dx.dev, dw.dev, dy_d, x_d, w_d, rstd_d, N, Cn, &err_));
        /* dinp: the CPU's per-row double mean by lanes (its bits when emulated); rstd (w dy) - x k, which a
         * GPU may fuse: 1e-5 */
        pair_check(be, "rmsnorm backward dinp", &dx, be->kind == BK_BACKEND_EMULATED ? 0.0 : 1e-5);
        /* dweight: double sums over the rows grouped by chunks of 32 instead of in one run: 1e-6 */
        pair_check(be, "rmsnorm backward dweight", &dw, 1e-6);
    }
    float *h = get(be, dw.dev, (size_t)Cn);
    size_t at;
    print_message("rmsnorm %d x %d: dweight's largest relative error %.3g\n", N, Cn,
                  max_rel_error(h, dw.host, (size_t)Cn, &at));
    free(h);
    set_thread_order(0);

    pair_free(be, &dx), pair_free(be, &dw);
    be->release(be, x_d), be->release(be, w_d), be->release(be, dy_d), be->release(be, out_d);
    be->release(be, rstd_d);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(garbage), free(out), free(rstd);
}

static void rmsnorm_matches_cpu(void **state)
{
    bk_backend *be = backend_of(state);
    rmsnorm_case(be, B * T_LONG, C, 19);    /* 390 rows: 12 full chunks of 32 and one of 6 */
    rmsnorm_case(be, B * T_SHORT, 300, 20); /* 111 rows of 300 channels: lanes with a tail, rows wider than a block */
    rmsnorm_case(be, 5, 3, 21);             /* fewer channels than lanes */
}

static void swiglu_matches_cpu(void **state)
{
    bk_backend *be = backend_of(state);
    enum { N = B * T_SHORT, F = 100 };
    const size_t n2 = (size_t)N * 2 * F, n1 = (size_t)N * F;
    bk_rng r = biaskit_rng_seeded(22);
    float *inp = normal_floats(&r, n2, 3.0), *dh = normal_floats(&r, n1, 1.0), *d0 = normal_floats(&r, n2, 0.5);
    float *garbage = normal_floats(&r, n1, 1.0);
    const float extremes[] = {0.0f, -0.0f, 20.0f, -20.0f, 100.0f, -100.0f, 1e-20f, -1.2784645f, -90.0f};
    memcpy(inp, extremes, sizeof extremes); /* gates of row 0 (silu' is 0 near -1.278) */
    float *inp_d = (float *)put(be, inp, n2 * sizeof(float)), *dh_d = (float *)put(be, dh, n1 * sizeof(float));

    /* the formulas of model/llama_math.h: the CPU's bits when emulated (the same expf); a GPU's expf is
     * within 2 ulp of glibc's and it may fuse 1 + g (1 - s): 1e-6 */
    const double tol = be->kind == BK_BACKEND_EMULATED ? 0.0 : 1e-6;
    pair out = pair_of(be, garbage, n1);
    bk_swiglu_forward(out.host, inp, N, F);
    OK(be->swiglu_forward(be, out.dev, inp_d, N, F, &err_));
    pair_check(be, "swiglu forward", &out, tol);
    pair dinp = pair_of(be, d0, n2); /* accumulates */
    bk_swiglu_backward(dinp.host, inp, dh, N, F);
    OK(be->swiglu_backward(be, dinp.dev, inp_d, dh_d, N, F, &err_));
    pair_check(be, "swiglu backward", &dinp, tol);

    pair_free(be, &out), pair_free(be, &dinp);
    be->release(be, inp_d), be->release(be, dh_d);
    free(inp), free(dh), free(d0), free(garbage);
}

/* copies and single float additions in the CPU's order (the query heads of a group ascending): equal bits
 * on both backends */
static void gqa_case(bk_backend *be, int N, int Hq, int KV, int hd, uint64_t seed)
{
    const size_t A = (size_t)Hq * hd, R = (size_t)(Hq + 2 * KV) * hd;
    bk_rng r = biaskit_rng_seeded(seed);
    float *qkvr = normal_floats(&r, (size_t)N * R, 1.0), *dqkv = normal_floats(&r, (size_t)N * 3 * A, 1.0);
    float *garbage = normal_floats(&r, (size_t)N * 3 * A, 1.0), *d0 = normal_floats(&r, (size_t)N * R, 0.5);
    float *qkvr_d = (float *)put(be, qkvr, (size_t)N * R * sizeof(float));
    float *dqkv_d = (float *)put(be, dqkv, (size_t)N * 3 * A * sizeof(float));
    pair qkv = pair_of(be, garbage, (size_t)N * 3 * A);
    bk_gqa_expand(qkv.host, qkvr, N, Hq, KV, hd);
    OK(be->gqa_expand(be, qkv.dev, qkvr_d, N, Hq, KV, hd, &err_));
    pair_check(be, "gqa expand", &qkv, 0.0);
    pair dqkvr = pair_of(be, d0, (size_t)N * R); /* accumulates */
    bk_gqa_reduce(dqkvr.host, dqkv, N, Hq, KV, hd);
    OK(be->gqa_reduce(be, dqkvr.dev, dqkv_d, N, Hq, KV, hd, &err_));
    pair_check(be, "gqa reduce", &dqkvr, 0.0);
    pair_free(be, &qkv), pair_free(be, &dqkvr);
    be->release(be, qkvr_d), be->release(be, dqkv_d);
    free(qkvr), free(dqkv), free(garbage), free(d0);
}

static void gqa_matches_cpu(void **state)
{
    bk_backend *be = backend_of(state);
    gqa_case(be, B * T_SHORT, H, 4, 8, 23);  /* groups of 3 query heads */
    gqa_case(be, B * T_SHORT, H, H, 8, 24);  /* one key/value head per query head */
    gqa_case(be, B * T_SHORT, H, 1, 6, 25);  /* one key/value head for all */
    gqa_case(be, 7, 6, 2, 24, 26);           /* heads wider than the others */
    /* key/value heads that do not divide the query heads: refused, naming the sizes */
    float *buf = (float *)put(be, NULL, 64 * sizeof(float));
    bk_error err;
    bk_error_clear(&err);
    assert_int_equal(be->gqa_expand(be, buf, buf, 1, 6, 4, 2, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "6 query heads on 4 key/value heads");
    be->release(be, buf);
}

/* --- matmul -------------------------------------------------------------------------------------- */

static void matmul_case(bk_backend *be, int N, int Cin, int OC, int with_bias, uint64_t seed)
{
    bk_rng r = biaskit_rng_seeded(seed);
    float *x = normal_floats(&r, (size_t)N * Cin, 1.0), *w = normal_floats(&r, (size_t)OC * Cin, 0.2);
    float *bias = normal_floats(&r, OC, 1.0), *dy = normal_floats(&r, (size_t)N * OC, 1.0);
    float *dx0 = normal_floats(&r, (size_t)N * Cin, 1.0), *dw0 = normal_floats(&r, (size_t)OC * Cin, 1.0);
    float *db0 = normal_floats(&r, OC, 1.0);
    float *x_d = (float *)put(be, x, (size_t)N * Cin * sizeof(float));
    float *w_d = (float *)put(be, w, (size_t)OC * Cin * sizeof(float));
    float *bias_d = (float *)put(be, bias, OC * sizeof(float));
    float *dy_d = (float *)put(be, dy, (size_t)N * OC * sizeof(float));
    char what[128];

    /* forward: sums of Cin products in cuBLAS's order instead of OpenBLAS's: 1e-5 */
    pair out = pair_of(be, dy, (size_t)N * OC); /* garbage in out: the forward overwrites */
    bk_matmul_forward(out.host, x, w, with_bias ? bias : NULL, N, Cin, OC);
    OK(be->matmul_forward(be, BK_STORAGE_FP32, out.dev, x_d, w_d, with_bias ? bias_d : NULL, N, Cin, OC, &err_));
    snprintf(what, sizeof what, "matmul forward (N %d, C %d, OC %d, bias %d)", N, Cin, OC, with_bias);
    pair_check(be, what, &out, 1e-5);

    /* backward, accumulating onto nonzero gradients: GEMM sums over OC (dinp) and N (dweight): 1e-5;
     * dbias: double column sums in chunks of 32 rows: 1e-6 */
    pair dx = pair_of(be, dx0, (size_t)N * Cin), dw = pair_of(be, dw0, (size_t)OC * Cin), db = pair_of(be, db0, OC);
    bk_matmul_backward(dx.host, dw.host, with_bias ? db.host : NULL, dy, x, w, N, Cin, OC);
    OK(be->matmul_backward(be, BK_STORAGE_FP32, dx.dev, dw.dev, with_bias ? db.dev : NULL, dy_d, x_d, w_d, N, Cin, OC, &err_));
    snprintf(what, sizeof what, "matmul backward dinp (N %d, C %d, OC %d)", N, Cin, OC);
    pair_check(be, what, &dx, 1e-5);
    snprintf(what, sizeof what, "matmul backward dweight (N %d, C %d, OC %d)", N, Cin, OC);
    pair_check(be, what, &dw, 1e-5);
    snprintf(what, sizeof what, "matmul backward dbias (N %d, C %d, OC %d, bias %d)", N, Cin, OC, with_bias);
    pair_check(be, what, &db, with_bias ? 1e-6 : 0.0); /* no bias: untouched */

    pair_free(be, &out), pair_free(be, &dx), pair_free(be, &dw), pair_free(be, &db);
    be->release(be, x_d), be->release(be, w_d), be->release(be, bias_d), be->release(be, dy_d);
    free(x), free(w), free(bias), free(dy), free(dx0), free(dw0), free(db0);
}

static void matmul_matches_cpu(void **state)
{
    bk_backend *be = backend_of(state);
    matmul_case(be, B * T_LONG, C, V, 1, 5);     /* odd output width */
    matmul_case(be, B * T_SHORT, C, 3 * C, 1, 6); /* the qkv projection's shape */
    matmul_case(be, B * T_SHORT, 4 * C, C, 0, 7); /* no bias */
}

/* --- TF32 products ([run] matmul = "tf32") ------------------------------------------------------- */

static float f32_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* bk_tf32_round (gpu/mma.h) on chosen values: 10 explicit mantissa bits kept, the 13 below rounded to
 * nearest with ties away from zero (PTX's cvt.rna.tf32.f32), carries into the exponent, inf, NaN. */
static void tf32_round_on_chosen_values(void **state)
{
    (void)state;
    static const struct {
        uint32_t in, out;
        const char *what;
    } cases[] = {
        {0x3f800000u, 0x3f800000u, "1 (exact)"},
        {0x3f802000u, 0x3f802000u, "1 + 2^-10 (exact)"},
        {0x3f800fffu, 0x3f800000u, "just below half a TF32 unit: down"},
        {0x3f801000u, 0x3f802000u, "a tie with an even last bit: away from zero (to even would stay)"},
        {0x3f803000u, 0x3f804000u, "a tie with an odd last bit: up"},
        {0x3f801001u, 0x3f802000u, "just above half: up"},
        {0xbf801000u, 0xbf802000u, "a negative tie: away from zero"},
        {0xbf800fffu, 0xbf800000u, "negative, below half: toward zero"},
        {0x3fffffffu, 0x40000000u, "just below 2: the carry reaches the exponent"},
        {0x3ffff000u, 0x40000000u, "the last tie below 2: 2"},
        {0x7f7fefffu, 0x7f7fe000u, "below the largest TF32 value's half unit: the largest TF32"},
        {0x7f7fffffu, 0x7f800000u, "the largest float: inf"},
        {0xff7ff000u, 0xff800000u, "the last negative tie: -inf"},
        {0x00001000u, 0x00002000u, "a subnormal tie: up"},
        {0x00000fffu, 0x00000000u, "the smallest subnormals: 0"},
        {0x80000fffu, 0x80000000u, "negative ones: -0"},
        {0x007ff000u, 0x00800000u, "the largest subnormal tie: the smallest normal"},
        {0x00000000u, 0x00000000u, "0"},
        {0x80000000u, 0x80000000u, "-0"},
        {0x7f800000u, 0x7f800000u, "inf"},
        {0xff800000u, 0xff800000u, "-inf"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const uint32_t got = bits_of(bk_tf32_round(f32_of(cases[k].in)));
        if (got != cases[k].out)
            fail_msg("bk_tf32_round(0x%08x): 0x%08x, expected 0x%08x (%s)", (unsigned)cases[k].in, (unsigned)got,
                     (unsigned)cases[k].out, cases[k].what);
    }
    /* NaN stays NaN, also one whose payload sits only in the 13 bits that are rounded away */
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7f801000u, 0xff800fffu};
    for (size_t k = 0; k < sizeof nans / sizeof nans[0]; k++)
        if (!isnan(bk_tf32_round(f32_of(nans[k]))))
            fail_msg("bk_tf32_round(0x%08x) is 0x%08x, expected a NaN", (unsigned)nans[k],
                     (unsigned)bits_of(bk_tf32_round(f32_of(nans[k]))));
    /* every result has its 13 low bits 0 and is within half a TF32 unit (2^-11 relative) */
    bk_rng r = biaskit_rng_seeded(31);
    for (int k = 0; k < 100000; k++) {
        const float x = (float)(bk_rng_normal(&r) * 100.0), y = bk_tf32_round(x);
        if ((bits_of(y) & 0x1fffu) || fabs((double)y - x) > ldexp(fabs((double)x), -11))
            fail_msg("bk_tf32_round(%.9g) = %.9g: not a TF32 value within half a unit", (double)x, (double)y);
    }
}

static float *tf32_rounded(const float *x, size_t n)
{
    float *y = copy_floats(x, n);
    for (size_t i = 0; i < n; i++)
        y[i] = bk_tf32_round(y[i]);
    return y;
}

/* [run] matmul = "tf32": a backend created with BK_MATMUL_TF32 multiplies its operands rounded to TF32
 * and sums in fp32. Its matmul forward and backward (dinp, dweight) against the same backend kind in
 * fp32 given the operands already rounded: the same bits when emulated (the same sgemm on the same
 * values); on a GPU within cuBLAS's summation order (1e-5), which also checks that cuBLAS's TF32 kernels
 * round as bk_tf32_round does (a truncating conversion would be off by ~1e-4). And not the plain fp32
 * product: at least 1e-5 away from it, so that a backend that dropped the rounding fails here, and at
 * most 3e-3 (seen emulated: 0.7e-3 to 1.0e-3; bf16's rounding, 8 times coarser, would exceed it). */
static void tf32_matmul_rounds_its_inputs(void **state)
{
    bk_backend *be = backend_of(state);
    const int emu = be->kind == BK_BACKEND_EMULATED;
    bk_backend *t = NULL;
    bk_error err;
    if ((emu ? bk_backend_emulated_create(&t, BK_MATMUL_TF32, &err) : bk_backend_cuda_create(&t, BK_MATMUL_TF32, &err)))
        fail_msg("creating the %s backend with tf32 matmuls: %s", be->name, err.message);
    assert_int_equal(t->matmul, BK_MATMUL_TF32);
    if (!strstr(t->description, "tf32"))
        fail_msg("a tf32 backend's description does not say tf32: '%s'", t->description);
    enum { N = B * T_SHORT, OC = V };
    const size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    bk_rng r = biaskit_rng_seeded(32);
    float *x = normal_floats(&r, nx, 1.0), *w = normal_floats(&r, nw, 0.2), *bias = normal_floats(&r, OC, 1.0);
    float *dy = normal_floats(&r, ny, 1.0);
    float *rx = tf32_rounded(x, nx), *rw = tf32_rounded(w, nw), *rdy = tf32_rounded(dy, ny);
    /* three runs: tf32 on the plain operands, fp32 on the rounded ones, fp32 on the plain ones */
    bk_backend *runs[3] = {t, be, be};
    const float *ins[3][3] = {{x, w, dy}, {rx, rw, rdy}, {x, w, dy}};
    const size_t counts[3] = {ny, nx, nw};
    float *outs[3][3];
    for (int k = 0; k < 3; k++) {
        bk_backend *b = runs[k];
        float *x_d = (float *)put(b, ins[k][0], nx * sizeof(float)), *w_d = (float *)put(b, ins[k][1], nw * sizeof(float));
        float *dy_d = (float *)put(b, ins[k][2], ny * sizeof(float)), *b_d = (float *)put(b, bias, OC * sizeof(float));
        float *o_d = (float *)put(b, NULL, ny * sizeof(float)), *dx_d = (float *)put(b, NULL, nx * sizeof(float));
        float *dw_d = (float *)put(b, NULL, nw * sizeof(float));
        OK(b->matmul_forward(b, BK_STORAGE_FP32, o_d, x_d, w_d, b_d, N, C, OC, &err_));
        OK(b->matmul_backward(b, BK_STORAGE_FP32, dx_d, dw_d, NULL, dy_d, x_d, w_d, N, C, OC, &err_));
        outs[k][0] = get(b, o_d, ny), outs[k][1] = get(b, dx_d, nx), outs[k][2] = get(b, dw_d, nw);
        void *bufs[] = {x_d, w_d, dy_d, b_d, o_d, dx_d, dw_d};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            b->release(b, bufs[i]);
    }
    const char *names[3] = {"tf32 matmul forward", "tf32 matmul backward dinp", "tf32 matmul backward dweight"};
    for (int j = 0; j < 3; j++) {
        char what[160];
        snprintf(what, sizeof what, "%s against fp32 on operands rounded to tf32", names[j]);
        check_floats(what, outs[0][j], outs[1][j], counts[j], emu ? 0.0 : 1e-5);
        size_t at;
        const double off = max_rel_error(outs[0][j], outs[2][j], counts[j], &at);
        if (!(off >= 1e-5 && off <= 3e-3))
            fail_msg("%s: %.3g from the plain fp32 product (element %zu: %.9g vs %.9g); expected TF32's rounding, "
                     "between 1e-5 and 3e-3", names[j], off, at, (double)outs[0][j][at], (double)outs[2][j][at]);
        printf("%s: %s the fp32 product of rounded operands; %.2g from the plain fp32 product\n", names[j],
               emu ? "the bits of" : "within 1e-5 of", off);
    }
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 3; j++)
            free(outs[k][j]);
    free(x), free(w), free(bias), free(dy), free(rx), free(rw), free(rdy);
    bk_backend_destroy(t);
}

/* --- bf16 storage ([run] precision = "bf16") ------------------------------------------------------ */

/* n bf16 values of device buffer p, widened to float on the host */
static float *get_bf16(bk_backend *be, const uint16_t *p, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    float *f = malloc((n ? n : 1) * sizeof *f);
    assert_non_null(h);
    assert_non_null(f);
    OK(be->download(be, h, p, n * sizeof *h, &err_));
    for (size_t i = 0; i < n; i++)
        f[i] = bk_bf16_value(h[i]);
    free(h);
    return f;
}

/* x rounded to bf16 and widened back, in place */
static void round_bf16(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = bk_bf16_value(bk_bf16_round(x[i]));
}

/* The layers' bf16-storage variants against the fp32 ones on the same backend: cast, GELU and LayerNorm
 * forward write the fp32 results rounded to bf16; the matmuls on bf16 inputs and weights give what the
 * fp32-storage matmuls give with bf16 products ([run] matmul = "bf16", which rounds the same inputs).
 * Emulated, all of it bit for bit; on a GPU the rounding is the same but the bf16-output kernels may
 * contract differently (one bf16 step, 2^-8 relative) and cuBLAS picks other GEMM kernels for bf16
 * storage (1e-5). */
static void bf16_storage_matches_fp32(void **state)
{
    bk_backend *be = backend_of(state);
    const int emu = be->kind == BK_BACKEND_EMULATED;
    enum { N = B * T_LONG, OC = 3 * C };
    const size_t nx = (size_t)N * C, ny = (size_t)N * OC, nw = (size_t)OC * C;
    bk_rng r = biaskit_rng_seeded(21);
    float *x = normal_floats(&r, nx, 2.0), *w = normal_floats(&r, C, 1.0), *b = normal_floats(&r, C, 0.3);
    float *mw = normal_floats(&r, nw, 0.2), *mb = normal_floats(&r, OC, 1.0), *dy = normal_floats(&r, ny, 1.0);
    float *x_d = (float *)put(be, x, nx * sizeof(float)), *w_d = (float *)put(be, w, C * sizeof(float));
    float *b_d = (float *)put(be, b, C * sizeof(float)), *y_d = (float *)put(be, NULL, nx * sizeof(float));
    uint16_t *y16_d = (uint16_t *)put(be, NULL, nx * sizeof(uint16_t));
    float *mean_d = (float *)put(be, NULL, N * sizeof(float)), *rstd_d = (float *)put(be, NULL, N * sizeof(float));

    /* cast: round to nearest even, the same function on both */
    OK(be->cast_bf16(be, y16_d, x_d, nx, &err_));
    float *got = get_bf16(be, y16_d, nx), *want = copy_floats(x, nx);
    round_bf16(want, nx);
    expect_same("cast_bf16", got, want, nx);
    free(got), free(want);
    /* GELU */
    OK(be->gelu_forward(be, BK_STORAGE_FP32, y_d, x_d, nx, &err_));
    OK(be->gelu_forward(be, BK_STORAGE_BF16, y16_d, x_d, nx, &err_));
    got = get_bf16(be, y16_d, nx), want = get(be, y_d, nx);
    round_bf16(want, nx);
    check_floats("gelu_forward (bf16 storage)", got, want, nx, emu ? 0.0 : 1.0 / 256);
    free(got), free(want);
    /* LayerNorm forward (the statistics are the fp32 call's) */
    OK(be->layernorm_forward(be, BK_STORAGE_FP32, y_d, mean_d, rstd_d, x_d, w_d, b_d, N, C, &err_));
    float *mean = get(be, mean_d, N), *rstd = get(be, rstd_d, N);
    OK(be->layernorm_forward(be, BK_STORAGE_BF16, y16_d, mean_d, rstd_d, x_d, w_d, b_d, N, C, &err_));
    got = get_bf16(be, y16_d, nx), want = get(be, y_d, nx);
    round_bf16(want, nx);
    check_floats("layernorm_forward (bf16 storage)", got, want, nx, emu ? 0.0 : 1.0 / 256);
    float *mean2 = get(be, mean_d, N), *rstd2 = get(be, rstd_d, N);
    expect_same("layernorm_forward (bf16 storage) mean", mean2, mean, N);
    expect_same("layernorm_forward (bf16 storage) rstd", rstd2, rstd, N);
    free(got), free(want), free(mean), free(rstd), free(mean2), free(rstd2);

    /* matmuls: the inputs (the LayerNorm's bf16 output) and the weights in bf16, against fp32 storage of
     * the same values with bf16 products; backward accumulates onto zero */
    float *xin = get_bf16(be, y16_d, nx); /* the bf16 input, widened */
    float *xin_d = (float *)put(be, xin, nx * sizeof(float)), *mw_d = (float *)put(be, mw, nw * sizeof(float));
    float *mb_d = (float *)put(be, mb, OC * sizeof(float)), *dy_d = (float *)put(be, dy, ny * sizeof(float));
    uint16_t *mw16_d = (uint16_t *)put(be, NULL, nw * sizeof(uint16_t));
    OK(be->cast_bf16(be, mw16_d, mw_d, nw, &err_));
    float *o32 = (float *)put(be, NULL, ny * sizeof(float)), *o16 = (float *)put(be, NULL, ny * sizeof(float));
    float *g32[3], *g16[3];
    const size_t gn[3] = {nx, nw, OC};
    for (int k = 0; k < 3; k++)
        g32[k] = (float *)put(be, NULL, gn[k] * sizeof(float)), g16[k] = (float *)put(be, NULL, gn[k] * sizeof(float));
    bk_dev *d = (bk_dev *)be->impl;
    const int was = d->bf16;
    d->bf16 = 1; /* the fp32-storage GEMMs with bf16 products */
    OK(be->matmul_forward(be, BK_STORAGE_FP32, o32, xin_d, mw_d, mb_d, N, C, OC, &err_));
    OK(be->matmul_backward(be, BK_STORAGE_FP32, g32[0], g32[1], g32[2], dy_d, xin_d, mw_d, N, C, OC, &err_));
    d->bf16 = was;
    OK(be->matmul_forward(be, BK_STORAGE_BF16, o16, y16_d, mw16_d, mb_d, N, C, OC, &err_));
    OK(be->matmul_backward(be, BK_STORAGE_BF16, g16[0], g16[1], g16[2], dy_d, y16_d, mw16_d, N, C, OC, &err_));
    const char *names[4] = {"matmul_forward (bf16)", "matmul_backward (bf16) dinp", "matmul_backward (bf16) dweight",
                            "matmul_backward (bf16) dbias"};
    float *outs32[4] = {o32, g32[0], g32[1], g32[2]}, *outs16[4] = {o16, g16[0], g16[1], g16[2]};
    const size_t counts[4] = {ny, nx, nw, OC};
    for (int k = 0; k < 4; k++) {
        float *a = get(be, outs16[k], counts[k]), *e = get(be, outs32[k], counts[k]);
        check_floats(names[k], a, e, counts[k], emu || k == 3 ? 0.0 : 1e-5); /* dbias: the same fp32 sums */
        free(a), free(e);
    }
    for (int k = 0; k < 3; k++)
        be->release(be, g32[k]), be->release(be, g16[k]);
    void *bufs[] = {x_d, w_d, b_d, y_d, y16_d, mean_d, rstd_d, xin_d, mw_d, mb_d, dy_d, mw16_d, o32, o16};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->release(be, bufs[k]);
    free(x), free(w), free(b), free(mw), free(mb), free(dy), free(xin);
}

/* --- elementwise --------------------------------------------------------------------------------- */

static void gelu_residual_scale_match_cpu(void **state)
{
    bk_backend *be = backend_of(state);
    const size_t n = (size_t)B * T_SHORT * 4 * C + 3;
    bk_rng r = biaskit_rng_seeded(8);
    float *x = normal_floats(&r, n, 3.0), *dy = normal_floats(&r, n, 1.0), *d0 = normal_floats(&r, n, 0.5);
    float *d1 = normal_floats(&r, n, 0.5);
    const float extremes[] = {0.0f, -0.0f, 12.0f, -12.0f, 100.0f, -100.0f, 1e-20f, -60.0f};
    memcpy(x, extremes, sizeof extremes);
    float *x_d = (float *)put(be, x, n * sizeof(float)), *dy_d = (float *)put(be, dy, n * sizeof(float));

    /* GELU: the same formula (model/gelu_math.h); device expf is within 2 ulp of glibc's: 1e-6 */
    pair out = pair_of(be, dy, n);
    bk_gelu_forward(out.host, x, n);
    OK(be->gelu_forward(be, BK_STORAGE_FP32, out.dev, x_d, n, &err_));
    pair_check(be, "gelu forward", &out, 1e-6);
    pair dx = pair_of(be, d0, n);
    bk_gelu_backward(dx.host, x, dy, n);
    OK(be->gelu_backward(be, dx.dev, x_d, dy_d, n, &err_));
    pair_check(be, "gelu backward", &dx, 1e-6);
    pair_free(be, &out), pair_free(be, &dx);

    /* residual and scale: one IEEE addition or product per element: equal bits */
    out = pair_of(be, d0, n);
    bk_residual_forward(out.host, x, dy, n);
    OK(be->residual_forward(be, out.dev, x_d, dy_d, n, &err_));
    pair_check(be, "residual forward", &out, 0.0);
    pair da = pair_of(be, d0, n), db = pair_of(be, d1, n);
    bk_residual_backward(da.host, db.host, dy, n);
    OK(be->residual_backward(be, da.dev, db.dev, dy_d, n, &err_));
    pair_check(be, "residual backward da", &da, 0.0);
    pair_check(be, "residual backward db", &db, 0.0);
    pair s = pair_of(be, x, n);
    for (size_t i = 0; i < n; i++)
        s.host[i] *= 0.37f;
    OK(be->scale(be, s.dev, n, 0.37f, &err_));
    pair_check(be, "scale", &s, 0.0);

    pair_free(be, &out), pair_free(be, &da), pair_free(be, &db), pair_free(be, &s);
    be->release(be, x_d), be->release(be, dy_d);
    free(x), free(dy), free(d0), free(d1);
}

/* --- cross-entropy ------------------------------------------------------------------------------- */

static void crossentropy_matches_cpu(void **state)
{
    bk_backend *be = backend_of(state);
    enum { N = B * T_SHORT };
    bk_rng r = biaskit_rng_seeded(9);
    float *z = normal_floats(&r, (size_t)N * V, 4.0), *garbage = normal_floats(&r, (size_t)N * V, 1.0);
    z[5] = 80.0f, z[V + 3] = -80.0f; /* far from the others: exp underflows to 0 in float */
    int32_t targets[N];
    for (int i = 0; i < N; i++)
        targets[i] = (int32_t)(bk_rng_u64(&r) % V);
    targets[1] = 3; /* row 1's target is its -80 logit */
    float *z_d = (float *)put(be, z, (size_t)N * V * sizeof(float));
    int32_t *t_d = (int32_t *)put(be, targets, sizeof targets);

    /* forward: the CPU's lanes, one thread each, exp and log in double: the CPU's bits when emulated (in
     * either thread order); on a GPU the float results agree to rounding (its expf): 1e-6 */
    const double fwd_tol = be->kind == BK_BACKEND_EMULATED ? 0.0 : 1e-6;
    pair losses = pair_of(be, garbage, N), probs = pair_of(be, garbage, (size_t)N * V);
    pair losses2 = pair_of(be, garbage, N);
    bk_crossentropy_forward(losses.host, probs.host, z, targets, N, V);
    bk_crossentropy_forward(losses2.host, NULL, z, targets, N, V);
    for (int order = 0; order < (be->kind == BK_BACKEND_EMULATED ? 2 : 1); order++) {
        set_thread_order(order);
        OK(be->crossentropy_forward(be, losses.dev, probs.dev, z_d, t_d, N, V, &err_));
        pair_check(be, "crossentropy forward losses", &losses, fwd_tol);
        pair_check(be, "crossentropy forward probs", &probs, fwd_tol);
        OK(be->crossentropy_forward(be, losses2.dev, NULL, z_d, t_d, N, V, &err_));
        pair_check(be, "crossentropy forward losses without probs", &losses2, fwd_tol);
    }
    set_thread_order(0);

    /* backward from the CPU's probabilities: one subtraction and one product: equal bits */
    OK(be->upload(be, probs.dev, probs.host, (size_t)N * V * sizeof(float), &err_));
    pair dz = pair_of(be, garbage, (size_t)N * V);
    bk_crossentropy_backward(dz.host, probs.host, targets, 1.0f / N, N, V);
    OK(be->crossentropy_backward(be, dz.dev, probs.dev, t_d, 1.0f / N, N, V, &err_));
    pair_check(be, "crossentropy backward", &dz, 0.0);

    pair_free(be, &losses), pair_free(be, &probs), pair_free(be, &losses2), pair_free(be, &dz);
    be->release(be, z_d), be->release(be, t_d);
    free(z), free(garbage);
}

/* --- rotary -------------------------------------------------------------------------------------- */

/* model/positions.c's rotate() on the host */
/* kcs, ksn: k's own tables (a decay), or NULL: q's */
static void rotate_ref(float *qkv, const float *cs, const float *sn, const float *kcs, const float *ksn,
                       const int32_t *pos, int pairs, int Tt, int sign)
{
    const int hd = C / H;
    for (int n = 0; n < B * Tt; n++) {
        const int p = pos ? pos[n] : n % Tt;
        for (int part = 0; part < 2; part++) {
            const float *c = part && kcs ? kcs : cs, *sv = part && ksn ? ksn : sn;
            for (int h = 0; h < H; h++) {
                float *x = qkv + (size_t)n * 3 * C + (size_t)part * C + (size_t)h * hd;
                for (int k = 0; k < pairs; k++)
                    bk_rotate_pair(&x[k], &x[k + pairs], c[p * pairs + k], (float)sign * sv[p * pairs + k]);
            }
        }
    }
}

static void rotary_matches_cpu(void **state)
{
    bk_backend *be = backend_of(state);
    enum { N = B * T_SHORT, ROWS = 50, PAIRS = C / H / 2 };
    bk_rng r = biaskit_rng_seeded(10);
    float cs[ROWS * PAIRS], sn[ROWS * PAIRS], kcs[ROWS * PAIRS], ksn[ROWS * PAIRS];
    for (int p = 0; p < ROWS; p++)
        for (int k = 0; k < PAIRS; k++) {
            double theta = p * pow(10000.0, -2.0 * k / (C / H)), decay = pow(0.5 + 0.1 * k, p / 16.0);
            cs[p * PAIRS + k] = (float)cos(theta), sn[p * PAIRS + k] = (float)sin(theta);
            /* k's own tables, as a decay makes them (xPos: zeta^(-p/scale)) */
            kcs[p * PAIRS + k] = (float)(cos(theta) / decay), ksn[p * PAIRS + k] = (float)(sin(theta) / decay);
        }
    int32_t pos[N];
    for (int i = 0; i < N; i++)
        pos[i] = (int32_t)(bk_rng_u64(&r) % ROWS);
    float *qkv = normal_floats(&r, (size_t)N * 3 * C, 1.0);
    bk_rotary_view view;
    memset(&view, 0, sizeof view);
    view.cos = (const float *)put(be, cs, sizeof cs);
    view.sin = (const float *)put(be, sn, sizeof sn);
    const float *kcs_d = (const float *)put(be, kcs, sizeof kcs), *ksn_d = (const float *)put(be, ksn, sizeof ksn);
    int32_t *pos_d = (int32_t *)put(be, pos, sizeof pos);
    view.pairs = PAIRS, view.rows = ROWS;

    /* products and a difference per value (bk_rotate_pair), one pair per thread: the CPU's bits when
     * emulated; a GPU may fuse them: 1e-6 */
    for (int own_k = 0; own_k < 2; own_k++)
    for (int with_positions = 0; with_positions < 2; with_positions++)
        for (int sign = 1; sign >= -1; sign -= 2) {
            view.positions = with_positions ? pos_d : NULL;
            view.kcos = own_k ? kcs_d : NULL, view.ksin = own_k ? ksn_d : NULL;
            pair x = pair_of(be, qkv, (size_t)N * 3 * C);
            rotate_ref(x.host, cs, sn, own_k ? kcs : NULL, own_k ? ksn : NULL, with_positions ? pos : NULL, PAIRS,
                       T_SHORT, sign);
            OK(be->rotary(be, x.dev, &view, B, T_SHORT, C, H, (float)sign, &err_));
            char what[96];
            snprintf(what, sizeof what, "rotary (sign %+d, %s%s)", sign, with_positions ? "positions" : "token index",
                     own_k ? ", k's own tables" : "");
            pair_check(be, what, &x, be->kind == BK_BACKEND_EMULATED ? 0.0 : 1e-6);
            pair_free(be, &x);
        }
    be->release(be, (void *)view.cos), be->release(be, (void *)view.sin), be->release(be, pos_d);
    be->release(be, (void *)kcs_d), be->release(be, (void *)ksn_d);
    free(qkv);
}

/* --- gradient norm, AdamW, first non-finite --------------------------------------------------------- */

/* adamw.c's grouping written out: chunk sums of BK_NORM_CHUNK squares, then the chunk sums in order */
static double sumsq_ref(const float *x, size_t n)
{
    double total = 0.0;
    for (size_t lo = 0; lo < n; lo += BK_NORM_CHUNK) {
        double sum = 0.0;
        for (size_t k = lo; k < n && k < lo + BK_NORM_CHUNK; k++)
            sum += (double)x[k] * x[k];
        total += sum;
    }
    return total;
}

/* the squared norm must equal the CPU's bit for bit, on every backend */
static void sumsq_equals_cpu_bits(void **state)
{
    bk_backend *be = backend_of(state);
    const size_t sizes[] = {3 * BK_NORM_CHUNK + 1234, 2 * BK_NORM_CHUNK, 100, 1, 0};
    bk_rng r = biaskit_rng_seeded(11);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const size_t n = sizes[s];
        float *x = normal_floats(&r, n, 1.0);
        for (size_t i = 0; i < n; i++) /* exponents over 12 decades: every addition rounds */
            x[i] *= (float)pow(10.0, 6.0 * bk_rng_uniform(&r) - 3.0);
        float *x_d = (float *)put(be, x, n * sizeof(float));
        double got = -1.0;
        OK(be->sumsq(be, x_d, n, &got, &err_));
        const double want = sumsq_ref(x, n);
        if (memcmp(&got, &want, sizeof got) != 0)
            fail_msg("sumsq of %zu values: %.17g, expected exactly %.17g (the CPU's chunked sum)", n, got, want);
        /* and the optimizer's own norm of one group of these gradients */
        bk_adamw opt;
        memset(&opt, 0, sizeof opt);
        OK(bk_adamw_add(&opt, "x", x, x, n, 1, &err_));
        double norm = -1.0;
        OK(bk_adamw_grad_norm(&opt, &norm, &err_));
        const double root = sqrt(got);
        if (memcmp(&norm, &root, sizeof norm) != 0)
            fail_msg("sqrt(sumsq) of %zu values: %.17g, expected exactly bk_adamw_grad_norm's %.17g", n, root, norm);
        bk_adamw_free(&opt);
        be->release(be, x_d);
        free(x);
    }
}

/* three steps against bk_adamw_step: the same float formula; a GPU may fuse its products: 1e-6 */
static void adamw_matches_cpu(void **state)
{
    bk_backend *be = backend_of(state);
    enum { N = 5003 };
    const double lr = 3e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, wd = 0.1;
    bk_rng r = biaskit_rng_seeded(12);
    float *param = normal_floats(&r, N, 1.0), *grad = normal_floats(&r, N, 1.0);
    bk_adamw opt;
    memset(&opt, 0, sizeof opt);
    OK(bk_adamw_add(&opt, "p", param, grad, N, 1, &err_));
    float *p_d = (float *)put(be, param, N * sizeof(float)), *g_d = (float *)put(be, NULL, N * sizeof(float));
    float *m_d = (float *)put(be, NULL, N * sizeof(float)), *v_d = (float *)put(be, NULL, N * sizeof(float));
    for (int step = 1; step <= 3; step++) {
        for (int i = 0; i < N; i++)
            grad[i] = (float)bk_rng_normal(&r) * (step == 2 ? 1e-3f : 1.0f);
        OK(be->upload(be, g_d, grad, N * sizeof(float), &err_));
        OK(bk_adamw_step(&opt, lr, beta1, beta2, eps, wd, &err_));
        const float bc1 = (float)(1.0 - pow(beta1, step)), bc2 = (float)(1.0 - pow(beta2, step));
        OK(be->adamw(be, p_d, g_d, m_d, v_d, N, (float)lr, (float)beta1, (float)beta2, (float)eps, (float)wd, bc1, bc2,
                     &err_));
        char what[64];
        float *h = get(be, p_d, N);
        snprintf(what, sizeof what, "adamw step %d: param", step);
        expect_close(what, h, opt.groups[0].param, N, 1e-6);
        free(h);
        h = get(be, m_d, N);
        snprintf(what, sizeof what, "adamw step %d: m", step);
        expect_close(what, h, opt.groups[0].m, N, 1e-6);
        free(h);
        h = get(be, v_d, N);
        snprintf(what, sizeof what, "adamw step %d: v", step);
        expect_close(what, h, opt.groups[0].v, N, 1e-6);
        free(h);
    }
    bk_adamw_free(&opt);
    be->release(be, p_d), be->release(be, g_d), be->release(be, m_d), be->release(be, v_d);
    free(param), free(grad);
}

static void first_nonfinite_finds_the_first(void **state)
{
    bk_backend *be = backend_of(state);
    enum { N = 5000 };
    bk_rng r = biaskit_rng_seeded(13);
    float *x = normal_floats(&r, N, 1e30); /* large but finite */
    float *x_d = (float *)put(be, x, N * sizeof(float));
    struct {
        int at[2];
        float value[2];
        int64_t want;
        size_t n;
    } cases[] = {
        {{-1, -1}, {0, 0}, -1, N},
        {{3000, 4500}, {NAN, INFINITY}, 3000, N},
        {{2060, 2050}, {NAN, INFINITY}, 2050, N}, /* two in one chunk */
        {{4500, 3000}, {NAN, INFINITY}, 3000, N},
        {{0, 2000}, {-INFINITY, NAN}, 0, N},
        {{N - 1, -1}, {INFINITY, 0}, N - 1, N},
        {{1024, 1023}, {NAN, -INFINITY}, 1023, N},
        {{1024, -1}, {NAN, 0}, 1024, N},
        {{1024, -1}, {NAN, 0}, -1, 1024}, /* past n: not seen */
        {{0, -1}, {NAN, 0}, -1, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        OK(be->upload(be, x_d, x, N * sizeof(float), &err_));
        for (int j = 0; j < 2; j++)
            if (cases[c].at[j] >= 0)
                OK(be->upload(be, x_d + cases[c].at[j], &cases[c].value[j], sizeof(float), &err_));
        int64_t got = -2;
        OK(be->first_nonfinite(be, x_d, cases[c].n, &got, &err_));
        if (got != cases[c].want)
            fail_msg("first_nonfinite case %zu (n %zu): %lld, expected %lld", c, cases[c].n, (long long)got,
                     (long long)cases[c].want);
    }
    be->release(be, x_d);
    free(x);
}

/* --- mixing -------------------------------------------------------------------------------------- */

static void mix_case(bk_backend *be, bk_mixing mode, const double *weights, int with_dtable1, uint64_t seed)
{
    enum { NT = 3, N = H * 257 };
    bk_rng r = biaskit_rng_seeded(seed);
    float *tab[NT], *tab_d[NT], *dt0[NT];
    for (int t = 0; t < NT; t++) {
        tab[t] = normal_floats(&r, N, 2.0);
        tab_d[t] = (float *)put(be, tab[t], N * sizeof(float));
        dt0[t] = normal_floats(&r, N, 0.5);
    }
    float *dout = normal_floats(&r, N, 1.0), *garbage = normal_floats(&r, N, 1.0);
    float *dout_d = (float *)put(be, dout, N * sizeof(float));
    const char *mode_name = mode == BK_MIX_SUM ? "sum" : "kernel";
    char what[96];

    /* forward: double sums over the terms in order, exp and log in double: 1e-6 */
    pair mixed = pair_of(be, garbage, N);
    bk_mix_tables(mode, (const float *const *)tab, weights, NT, N, mixed.host);
    OK(be->mix_forward(be, mode, (const float *const *)tab_d, weights, NT, N, mixed.dev, &err_));
    snprintf(what, sizeof what, "mix forward (%s)", mode_name);
    pair_check(be, what, &mixed, 1e-6);

    /* backward from the CPU's mixed table */
    OK(be->upload(be, mixed.dev, mixed.host, N * sizeof(float), &err_));
    pair dt[NT];
    float *dt_host[NT], *dt_dev[NT];
    for (int t = 0; t < NT; t++) {
        dt[t] = pair_of(be, dt0[t], N);
        dt_host[t] = t == 1 && !with_dtable1 ? NULL : dt[t].host;
        dt_dev[t] = t == 1 && !with_dtable1 ? NULL : dt[t].dev;
    }
    double dw_cpu[NT] = {0.25, -1.0, 3.0}, dw_dev[NT] = {0.25, -1.0, 3.0};
    bk_mix_backward(mode, (const float *const *)tab, weights, NT, N, mixed.host, dout, dt_host, dw_cpu);
    OK(be->mix_backward(be, mode, (const float *const *)tab_d, weights, NT, N, mixed.dev, dout_d, dt_dev, dw_dev,
                        &err_));
    for (int t = 0; t < NT; t++) {
        /* one product per element, exp in double: 1e-6; a missing gradient table stays as it was */
        snprintf(what, sizeof what, "mix backward (%s) dtable %d", mode_name, t);
        pair_check(be, what, &dt[t], 1e-6);
        /* double sums of 3084 products, grouped in chunks of 1024 instead of one run: 1e-12 */
        if (!(fabs(dw_dev[t] - dw_cpu[t]) <= 1e-12 * (fabs(dw_cpu[t]) + 1.0)))
            fail_msg("mix backward (%s) dweight %d: %.17g, expected %.17g (relative 1e-12)", mode_name, t, dw_dev[t],
                     dw_cpu[t]);
    }
    /* dweights NULL and dtables NULL: nothing happens, nothing fails */
    OK(be->mix_backward(be, mode, (const float *const *)tab_d, weights, NT, N, mixed.dev, dout_d, NULL, NULL, &err_));
    pair_check(be, "mix backward with nothing to write: dtable 0 unchanged", &dt[0], 1e-6);

    for (int t = 0; t < NT; t++) {
        pair_free(be, &dt[t]);
        be->release(be, tab_d[t]);
        free(tab[t]), free(dt0[t]);
    }
    pair_free(be, &mixed);
    be->release(be, dout_d);
    free(dout), free(garbage);
}

static void mix_matches_cpu(void **state)
{
    bk_backend *be = backend_of(state);
    const double sum_weights[3] = {0.7, -0.3, 1.2}, kernel_weights[3] = {0.5, 0.0, 0.5};
    mix_case(be, BK_MIX_SUM, sum_weights, 1, 14);
    mix_case(be, BK_MIX_SUM, sum_weights, 0, 15);
    mix_case(be, BK_MIX_KERNEL, kernel_weights, 1, 16); /* term 1 (weight 0) takes no part */
    mix_case(be, BK_MIX_KERNEL, sum_weights + 0, 0, 17); /* a negative weight in kernel mode: skipped too */
}

/* --- determinism --------------------------------------------------------------------------------- */

/* The reductions of one sequence of calls, run twice from the same inputs: equal bits. */
static void run_sequence(bk_backend *be, float **out_host, size_t *n_out, double *sq)
{
    enum { N = B * T_LONG };
    const size_t n = (size_t)N * C + (size_t)C * C + 3 * C + 2 * N;
    bk_rng r = biaskit_rng_seeded(18);
    float *x = normal_floats(&r, (size_t)N * C, 1.0), *w = normal_floats(&r, (size_t)C * C, 0.3);
    float *dy = normal_floats(&r, (size_t)N * C, 1.0);
    float *x_d = (float *)put(be, x, (size_t)N * C * sizeof(float));
    float *w_d = (float *)put(be, w, (size_t)C * C * sizeof(float));
    float *dy_d = (float *)put(be, dy, (size_t)N * C * sizeof(float));
    float *g_d = (float *)put(be, NULL, n * sizeof(float));
    /* g_d: dx (N, C), dw (C, C), db, dlnw, dlnb (C each), mean, rstd (N each) */
    float *dx = g_d, *dw = dx + (size_t)N * C, *db = dw + C * C, *dlnw = db + C, *dlnb = dlnw + C;
    float *mean = dlnb + C, *rstd = mean + N;
    OK(be->matmul_backward(be, BK_STORAGE_FP32, dx, dw, db, dy_d, x_d, w_d, N, C, C, &err_));
    OK(be->layernorm_forward(be, BK_STORAGE_FP32, dy_d, mean, rstd, x_d, w_d, w_d + C, N, C, &err_));
    OK(be->layernorm_backward(be, dx, dlnw, dlnb, dy_d, x_d, w_d, mean, rstd, N, C, &err_));
    /* RMSNorm's weight gradient, another chunked column sum, into the same dx and dlnw (rstd rewritten) */
    OK(be->rmsnorm_forward(be, dy_d, rstd, x_d, w_d, N, C, 1e-5f, &err_));
    OK(be->rmsnorm_backward(be, dx, dlnw, dy_d, x_d, w_d, rstd, N, C, &err_));
    OK(be->sumsq(be, g_d, n, sq, &err_));
    *out_host = get(be, g_d, n);
    *n_out = n;
    be->release(be, x_d), be->release(be, w_d), be->release(be, dy_d), be->release(be, g_d);
    free(x), free(w), free(dy);
}

static void two_runs_are_identical(void **state)
{
    bk_backend *be = backend_of(state);
    float *a, *b;
    size_t na, nb;
    double sa, sb;
    run_sequence(be, &a, &na, &sa);
    run_sequence(be, &b, &nb, &sb);
    assert_int_equal(na, nb);
    expect_same("the gradients and statistics of a second identical run", b, a, na);
    if (memcmp(&sa, &sb, sizeof sa) != 0)
        fail_msg("sumsq of a second identical run: %.17g, first %.17g", sb, sa);
    free(a), free(b);
}

/* --- groups -------------------------------------------------------------------------------------- */

#define CASES                                                                                                  \
    cmocka_unit_test(memory_functions), cmocka_unit_test(encoder_matches_cpu),                                 \
        cmocka_unit_test(layernorm_matches_cpu), cmocka_unit_test(matmul_matches_cpu),                         \
        cmocka_unit_test(gelu_residual_scale_match_cpu), cmocka_unit_test(crossentropy_matches_cpu),           \
        cmocka_unit_test(rotary_matches_cpu), cmocka_unit_test(sumsq_equals_cpu_bits),                         \
        cmocka_unit_test(adamw_matches_cpu), cmocka_unit_test(first_nonfinite_finds_the_first),                \
        cmocka_unit_test(mix_matches_cpu), cmocka_unit_test(two_runs_are_identical),                           \
        cmocka_unit_test(bf16_storage_matches_fp32), cmocka_unit_test(tf32_matmul_rounds_its_inputs),          \
        cmocka_unit_test(rmsnorm_matches_cpu), cmocka_unit_test(swiglu_matches_cpu),                           \
        cmocka_unit_test(gqa_matches_cpu)

int main(void)
{
    const struct CMUnitTest host[] = {cmocka_unit_test(batch_buckets_are_sorted),
                                      cmocka_unit_test(tf32_round_on_chosen_values)};
    const struct CMUnitTest emulated[] = {CASES};
    const struct CMUnitTest cuda[] = {CASES};
    int failed = cmocka_run_group_tests_name("host", host, NULL, NULL);
    failed += cmocka_run_group_tests_name("emulated", emulated, emulated_setup, teardown);
    failed += cmocka_run_group_tests_name("cuda", cuda, cuda_setup, teardown);
    return failed ? 1 : 0;
}
