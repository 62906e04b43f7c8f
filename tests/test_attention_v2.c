/* The CPU attention's ABI 2 terms (cpu/attention.h: coordinate table, window/sink mask, logit scale)
 * against the double-precision reference of tests/attention_ref.h: forward (out, probs) and backward
 * (dqkv, dtable, dgrid, dphi, drscale, dscale, each accumulated into a nonzero start), every term alone
 * and all together; the mask's edge cases (window 1, a window that hides nothing, sinks beyond the
 * window, blocks of 64 rows cut by the window); bit-for-bit properties (forward-only = probs-saving
 * forward, thread-count independence, the vector copies = the baseline build, masked probabilities exactly
 * 0, the same outputs whichever width of the engine's kernels runs the per-head products); terms of
 * masked keys never read; argument errors; and the reference's own ABI 2 gradients by central
 * differences.
 *
 * Tolerances: each comparison takes the largest |cpu - ref| over an array relative to the largest
 * |ref| of that array (ref including the start value for the accumulated gradients). Measured on
 * 2026-11-25 (x86-64 AMD EPYC, OpenBLAS, 1-3 threads) over the cases below, at most: out 1.5e-6,
 * probs 9.1e-7, dqkv 1.4e-6, dtable 5.2e-7, dgrid 9.3e-7, dphi 6.9e-7, drscale 7.6e-7, dscale 1.1e-6
 * (float scores, sums and u against double; the largest where the logit scale reaches 7); TOL gives
 * them 10x. Central differences (step 1e-5 relative, the float-rounded step used, in double) of the
 * reference's loss: the reference's dphi, drscale, dscale agree to 9e-10 (TOL_FD_REF 1e-8), the CPU's
 * to 4.3e-7 (TOL_FD_CPU 5e-6), relative to the largest entry. */
#define _POSIX_C_SOURCE 200809L /* setenv, fork, execl */
#include "test_util.h"
#include "test_random.h"

#include "attention_problem.h"
#include "attention_ref.h"
#include "host_clones.h"
#include "cpu/attention.h"
#include "cpu/gemm.h"
#include "cpu/tile_gemm.h"
#include "model/bias_math.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* cpu/attention.c built for baseline x86-64 (host_clones_base_attention.c) and for AVX2 alone
 * (host_clones_avx2_attention.c) */
BK_HOST_CLONES_DECLARE(base_)
BK_HOST_CLONES_DECLARE(avx2_)

#define TOL 1.5e-5
#define TOL_FD_REF 1e-8
#define TOL_FD_CPU 5e-6

/* ---- one CPU run: forward with probs, forward only, backward into random start values ---- */

enum { O_OUT, O_OUT_FWD_ONLY, O_PROBS, O_DQKV, O_DTOK, O_DSEG, O_DGRID, O_DPHI, O_DRSCALE, O_DSCALE, O_COUNT };
static const char *const o_names[O_COUNT] = {"out",    "out (forward only)", "probs", "dqkv",    "dtable[token]",
                                             "dtable[segment]", "dgrid",     "dphi",  "drscale", "dscale"};

typedef struct run {
    float *x[O_COUNT];     /* NULL where the problem has no such output */
    float *start[O_COUNT]; /* the accumulated outputs' values before the backward */
    size_t n[O_COUNT];
} run;

static void run_free(run *r)
{
    for (int k = 0; k < O_COUNT; k++)
        free(r->x[k]), free(r->start[k]);
    memset(r, 0, sizeof *r);
}

static float *alloc_out(run *r, int k, size_t n, int accumulated)
{
    r->n[k] = n;
    r->x[k] = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(r->x[k]);
    if (accumulated) {
        r->start[k] = random_floats(n, 0.5);
        memcpy(r->x[k], r->start[k], n * sizeof(float));
    }
    return r->x[k];
}

typedef int (*forward_fn)(float *, float *, const float *, const bk_attention_bias *, int, int, int, int,
                          bk_error *);
typedef int (*backward_fn)(float *, float *const[BK_STREAM_COUNT], const float *, const float *, const float *,
                           const bk_attention_bias *, int, int, int, int, bk_error *);

static run cpu_run_with(problem *pb, forward_fn forward, backward_fn backward)
{
    const int B = pb->sp.B, T = pb->sp.T, C = pb->sp.C, H = pb->sp.H;
    run r;
    memset(&r, 0, sizeof r);
    uint64_t saved = rng_state;
    rng_state = 0x5eedULL + (uint64_t)T; /* the start values do not depend on what ran before */
    float *out = alloc_out(&r, O_OUT, (size_t)B * T * C, 0);
    float *out1 = alloc_out(&r, O_OUT_FWD_ONLY, (size_t)B * T * C, 0);
    float *probs = alloc_out(&r, O_PROBS, (size_t)B * H * T * T, 0);
    float *dqkv = alloc_out(&r, O_DQKV, (size_t)B * T * 3 * C, 1);
    float *dtable[BK_STREAM_COUNT] = {NULL, NULL};
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (pb->table[s])
            dtable[s] = alloc_out(&r, O_DTOK + s, (size_t)H * pb->D, 1);
    bk_attention_bias bias = pb->bias;
    if (pb->grid) {
        bias.dgrid = alloc_out(&r, O_DGRID, (size_t)H * pb->points, 1);
        bias.dphi = alloc_out(&r, O_DPHI, (size_t)pb->D, 1);
        bias.drscale = alloc_out(&r, O_DRSCALE, (size_t)T, 1);
    }
    if (pb->scale)
        bias.dscale = alloc_out(&r, O_DSCALE, (size_t)H * T, 1);
    rng_state = saved;

    bk_error err;
    bk_error_clear(&err);
    assert_int_equal(forward(out, probs, pb->qkv, &bias, B, T, C, H, &err), BK_OK);
    assert_int_equal(forward(out1, NULL, pb->qkv, &bias, B, T, C, H, &err), BK_OK);
    assert_int_equal(backward(dqkv, dtable, pb->dout, pb->qkv, probs, &bias, B, T, C, H, &err), BK_OK);
    return r;
}

static run cpu_run(problem *pb)
{
    return cpu_run_with(pb, bk_attention_forward, bk_attention_backward);
}

/* ---- comparisons ---- */

/* Every output of `r` against the reference. */
static void check_against_reference(const char *what, problem *pb, const run *r)
{
    const int B = pb->sp.B, T = pb->sp.T, C = pb->sp.C, H = pb->sp.H;
    ref_grads g;
    ref_grads_alloc(&g, &pb->bias, B, T, C, H);
    ref_attention(&g, pb->qkv, pb->dout, &pb->bias, B, T, C, H);
    const double *ref[O_COUNT] = {g.out,        g.out,     g.probs,   g.dqkv,    g.dtable[0],
                                  g.dtable[1],  g.dgrid,   g.dphi,    g.drscale, g.dscale};
    for (int k = 0; k < O_COUNT; k++) {
        if (!r->x[k])
            continue;
        assert_non_null(ref[k]);
        expect_close(what, o_names[k], r->x[k], r->start[k], ref[k], r->n[k], TOL);
    }
    ref_grads_free(&g);
}

static void expect_same_bits(const char *what, const run *a, const run *b)
{
    for (int k = 0; k < O_COUNT; k++) {
        assert_true((a->x[k] == NULL) == (b->x[k] == NULL));
        if (a->x[k] && memcmp(a->x[k], b->x[k], a->n[k] * sizeof(float)))
            fail_msg("%s: %s differs in its bits", what, o_names[k]);
    }
}

/* The probabilities of keys the mask hides are +0.0 exactly, and each row sums to 1. */
static void expect_masked_zero(const char *what, const problem *pb, const run *r)
{
    const int B = pb->sp.B, T = pb->sp.T, H = pb->sp.H;
    for (int bh = 0; bh < B * H; bh++)
        for (int i = 0; i < T; i++) {
            const float *row = r->x[O_PROBS] + ((size_t)bh * T + i) * T;
            double sum = 0.0;
            for (int j = 0; j < T; j++) {
                if (!bk_mask_keeps(i, j, pb->sp.window, pb->sp.sinks) && (row[j] != 0.0f || signbit(row[j])))
                    fail_msg("%s: probability (bh %d, i %d, j %d) = %g of a masked key, expected +0", what, bh, i, j,
                             (double)row[j]);
                sum += row[j];
            }
            if (fabs(sum - 1.0) > 1e-5)
                fail_msg("%s: probabilities of row (bh %d, i %d) sum to %.9g", what, bh, i, sum);
        }
}

/* One case, all the checks that need only one run. */
static void check_case(const char *what, spec sp, uint64_t seed)
{
    problem pb = make_problem(sp, seed);
    run r = cpu_run(&pb);
    check_against_reference(what, &pb, &r);
    if (memcmp(r.x[O_OUT], r.x[O_OUT_FWD_ONLY], r.n[O_OUT] * sizeof(float)))
        fail_msg("%s: the forward-only output differs in its bits from the probs-saving forward's", what);
    expect_masked_zero(what, &pb, &r);
    run_free(&r);
    free_problem(&pb);
}

/* ---- tests ---- */

/* B = 2, T = 150 (three blocks of 64 rows, the last one cut), hd = 8 */
static spec base_spec(void)
{
    spec sp = {.B = 2, .T = 150, .C = 32, .H = 4};
    return sp;
}

static void each_term_alone(void **state)
{
    (void)state;
    spec sp = base_spec();
    sp.grid = 1;
    check_case("coordinate table alone", sp, 11);
    sp = base_spec();
    sp.scale = 1;
    check_case("logit scale alone", sp, 12);
    sp = base_spec();
    sp.window = 20;
    check_case("window 20 alone", sp, 13);
    sp.sinks = 3;
    check_case("window 20 with 3 sinks", sp, 14);
}

static void all_terms_together(void **state)
{
    (void)state;
    spec sp = base_spec();
    sp.grid = sp.scale = 1;
    sp.window = 37;
    sp.sinks = 3;
    sp.tables = TOKEN_TABLE;
    check_case("all terms, token table", sp, 21);
    sp.tables = TOKEN_AND_SEGMENT;
    check_case("all terms, token and segment tables", sp, 22);
    sp.window = 0;
    sp.sinks = 0;
    check_case("coordinate table, scale and both tables, no mask", sp, 23);
    /* a window wider than a block, and one batch row more */
    sp.window = 100;
    sp.sinks = 1;
    sp.B = 3;
    sp.T = 200;
    check_case("all terms, window 100, T 200", sp, 24);
}

static void window_and_sinks(void **state)
{
    (void)state;
    const int cases[][2] = {{20, 0}, {20, 1}, {20, 3}, {5, 12}, {64, 3}, {65, 0}, {149, 0}, {140, 9}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        spec sp = base_spec();
        sp.tables = TOKEN_AND_SEGMENT;
        sp.grid = 1;
        sp.window = cases[c][0];
        sp.sinks = cases[c][1];
        char what[64];
        snprintf(what, sizeof what, "window %d, sinks %d", sp.window, sp.sinks);
        check_case(what, sp, 30 + c);
    }
}

/* Window 1: each query sees itself alone (P = 1 on the diagonal, out_i = v_i, dS = 0); with 2 sinks,
 * also keys 0 and 1. */
static void window_one(void **state)
{
    (void)state;
    spec sp = base_spec();
    sp.tables = TOKEN_TABLE;
    sp.grid = sp.scale = 1;
    sp.window = 1;
    problem pb = make_problem(sp, 41);
    run r = cpu_run(&pb);
    check_against_reference("window 1", &pb, &r);
    expect_masked_zero("window 1", &pb, &r);
    const int T = sp.T;
    for (int bh = 0; bh < sp.B * sp.H; bh++)
        for (int i = 0; i < T; i++)
            assert_true(r.x[O_PROBS][((size_t)bh * T + i) * T + i] == 1.0f);
    run_free(&r);
    free_problem(&pb);
    sp.sinks = 2;
    check_case("window 1, sinks 2", sp, 42);
}

/* A mask that hides nothing (window >= T, or window + sinks >= T) gives the bits of the unmasked run. */
static void mask_hiding_nothing(void **state)
{
    (void)state;
    spec sp = base_spec();
    sp.tables = TOKEN_AND_SEGMENT;
    sp.grid = sp.scale = 1;
    problem pb = make_problem(sp, 51);
    run plain = cpu_run(&pb);
    check_against_reference("no mask", &pb, &plain);
    const int masks[][2] = {{150, 0}, {151, 0}, {1000, 7}, {140, 10}, {1, 149}};
    for (size_t c = 0; c < sizeof masks / sizeof *masks; c++) {
        pb.bias.window = masks[c][0];
        pb.bias.sinks = masks[c][1];
        run r = cpu_run(&pb);
        char what[64];
        snprintf(what, sizeof what, "window %d, sinks %d (hides nothing)", masks[c][0], masks[c][1]);
        expect_same_bits(what, &r, &plain);
        run_free(&r);
    }
    /* one key less than T hides the pair (T - 1, 0) */
    pb.bias.window = 149;
    pb.bias.sinks = 0;
    run r = cpu_run(&pb);
    assert_true(r.x[O_PROBS][(size_t)(sp.T - 1) * sp.T] == 0.0f);
    assert_true(plain.x[O_PROBS][(size_t)(sp.T - 1) * sp.T] > 0.0f);
    run_free(&r);
    run_free(&plain);
    free_problem(&pb);
}

static void independent_of_thread_count(void **state)
{
    (void)state;
    const int saved = omp_get_max_threads();
    spec sp = base_spec();
    sp.B = 3;
    sp.tables = TOKEN_AND_SEGMENT;
    sp.grid = sp.scale = 1;
    sp.window = 30;
    sp.sinks = 4;
    for (int masked = 0; masked < 2; masked++) {
        if (!masked)
            sp.window = sp.sinks = 0;
        problem pb = make_problem(sp, 61);
        omp_set_num_threads(1);
        run one = cpu_run(&pb);
        omp_set_num_threads(2);
        run two = cpu_run(&pb);
        omp_set_num_threads(3);
        run three = cpu_run(&pb);
        expect_same_bits("1 and 2 threads", &one, &two);
        expect_same_bits("1 and 3 threads", &one, &three);
        run_free(&one), run_free(&two), run_free(&three);
        free_problem(&pb);
    }
    omp_set_num_threads(saved);
}

/* Both tables, the coordinate table and the logit scale; masked: window 30 with 4 sinks. */
static spec every_term(int masked)
{
    spec sp = base_spec();
    sp.tables = TOKEN_AND_SEGMENT;
    sp.grid = sp.scale = 1;
    sp.window = masked ? 30 : 0;
    sp.sinks = masked ? 4 : 0;
    return sp;
}

/* The vector copy of the attention the CPU picks (model/host_simd.h: AVX-512F, AVX2 or baseline), an
 * AVX2-only build (where the CPU has AVX2) and the baseline x86-64 build compute the same bits with every
 * term, masked and not. */
static void vector_copies_and_baseline_same_bits(void **state)
{
    (void)state;
    for (int masked = 1; masked >= 0; masked--) {
        problem pb = make_problem(every_term(masked), 65);
        run fast = cpu_run(&pb);
        run base = cpu_run_with(&pb, base_attention_forward, base_attention_backward);
        expect_same_bits(masked ? "the CPU's copy and baseline, masked" : "the CPU's copy and baseline", &fast, &base);
#if defined(__x86_64__) && defined(__GNUC__)
        if (__builtin_cpu_supports("avx2")) {
            run avx2 = cpu_run_with(&pb, avx2_attention_forward, avx2_attention_backward);
            expect_same_bits(masked ? "AVX2 and baseline, masked" : "AVX2 and baseline", &avx2, &base);
            run_free(&avx2);
        }
#endif
        run_free(&fast), run_free(&base);
        free_problem(&pb);
    }
}

/* The terms of keys no query sees are never read: with a window alone (no sinks), table entries and
 * phi at distances >= window are NaN, and a table of exactly `window` distances is enough. */
static void masked_terms_never_read(void **state)
{
    (void)state;
    spec sp = base_spec();
    sp.tables = TOKEN_TABLE;
    sp.grid = sp.scale = 1;
    sp.window = 24;
    problem pb = make_problem(sp, 71);
    for (int h = 0; h < sp.H; h++)
        for (int d = sp.window; d < pb.D; d++)
            pb.table[0][(size_t)h * pb.D + d] = NAN;
    for (int d = sp.window; d < pb.D; d++)
        pb.phi[d] = NAN;
    run r = cpu_run(&pb);
    check_against_reference("NaN beyond the window", &pb, &r);
    run_free(&r);
    free_problem(&pb);

    sp.distances = sp.window;
    check_case("tables of window distances", sp, 72);
}

static void argument_errors(void **state)
{
    (void)state;
    spec sp = {.B = 1, .T = 20, .C = 8, .H = 2, .tables = TOKEN_TABLE, .grid = 1, .scale = 1, .window = 4, .sinks = 1};
    problem pb = make_problem(sp, 81);
    const int B = sp.B, T = sp.T, C = sp.C, H = sp.H;
    float *out = malloc((size_t)B * T * C * sizeof *out), *probs = malloc((size_t)B * H * T * T * sizeof *probs);
    float *dqkv = calloc((size_t)B * T * 3 * C, sizeof *dqkv);
    assert_true(out && probs && dqkv);
    float *const dtable[BK_STREAM_COUNT] = {NULL, NULL};
    bk_error err;
    assert_int_equal(bk_attention_forward(out, probs, pb.qkv, &pb.bias, B, T, C, H, &err), BK_OK);

    static const struct {
        const char *what, *message;
    } bad[] = {
        {"points 1", "points = 1: expected at least 2"},
        {"grid without phi", "the grid is set but phi is NULL"},
        {"grid without rscale", "the grid is set but rscale is NULL"},
        {"window -1", "mask window = -1: expected"},
        {"sinks -2", "mask sinks = -2: expected"},
        /* with a sink, query T - 1 sees key 0: phi needs T distances */
        {"phi too short", "phi holds 19 distances, but visible keys lie up to d = 19"},
        /* the same for a table */
        {"table too short", "stream 'token', batch row 0: distance p(i=19) - p(j=0) = 19"},
        /* without sinks, the window's farthest key is what counts */
        {"table shorter than the window", "distance p(i=3) - p(j=0) = 3 is outside"},
    };
    const int n = (int)(sizeof bad / sizeof *bad);
    for (int k = 0; k < n; k++) {
        bk_attention_bias bias = pb.bias;
        switch (k) {
        case 0: bias.points = 1; break;
        case 1: bias.phi = NULL; break;
        case 2: bias.rscale = NULL; break;
        case 3: bias.window = -1; break;
        case 4: bias.sinks = -2; break;
        case 5: bias.distances = T - 1, bias.table[0] = NULL; break;
        case 6: bias.distances = T - 1, bias.grid = NULL; break;
        default: bias.distances = 3, bias.sinks = 0, bias.grid = NULL; break;
        }
        bk_error_clear(&err);
        if (bk_attention_forward(out, probs, pb.qkv, &bias, B, T, C, H, &err) != BK_ERR_INVALID)
            fail_msg("%s: the forward pass did not refuse it", bad[k].what);
        assert_message_has(err.message, bad[k].message);
        assert_message_has(err.message, "attention");
        bk_error_clear(&err);
        if (bk_attention_backward(dqkv, dtable, pb.dout, pb.qkv, probs, &bias, B, T, C, H, &err) !=
            BK_ERR_INVALID)
            fail_msg("%s: the backward pass did not refuse it", bad[k].what);
        assert_message_has(err.message, bad[k].message);
    }
    /* window 4 without sinks needs distances 0 .. 3 only */
    bk_attention_bias ok = pb.bias;
    ok.sinks = 0;
    ok.distances = 4;
    assert_int_equal(bk_attention_forward(out, probs, pb.qkv, &ok, B, T, C, H, &err), BK_OK);
    assert_int_equal(bk_attention_backward(dqkv, dtable, pb.dout, pb.qkv, probs, &ok, B, T, C, H, &err), BK_OK);
    /* gradients of terms that are absent are left alone */
    float dgrid[2] = {7.0f, 7.0f};
    ok.grid = NULL;
    ok.scale = NULL;
    ok.dgrid = ok.dphi = ok.drscale = ok.dscale = dgrid;
    assert_int_equal(bk_attention_forward(out, probs, pb.qkv, &ok, B, T, C, H, &err), BK_OK);
    assert_int_equal(bk_attention_backward(dqkv, dtable, pb.dout, pb.qkv, probs, &ok, B, T, C, H, &err), BK_OK);
    assert_true(dgrid[0] == 7.0f && dgrid[1] == 7.0f);
    free(out), free(probs), free(dqkv);
    free_problem(&pb);
}

/* L = sum out . dout in double by the reference. */
static double ref_loss(problem *pb)
{
    const int B = pb->sp.B, T = pb->sp.T, C = pb->sp.C, H = pb->sp.H;
    ref_grads g;
    ref_grads_alloc(&g, &pb->bias, B, T, C, H);
    ref_attention(&g, pb->qkv, NULL, &pb->bias, B, T, C, H);
    double L = 0.0;
    for (size_t k = 0; k < (size_t)B * T * C; k++)
        L += g.out[k] * pb->dout[k];
    ref_grads_free(&g);
    return L;
}

/* dL/dx by central differences, x a float input of the problem (perturbed by about e relative, the
 * step being the float difference actually made). */
static double central_difference(problem *pb, float *x)
{
    const float x0 = *x, e = 1e-5f * (fabsf(x0) > 0.1f ? fabsf(x0) : 0.1f);
    *x = x0 + e;
    const float up = *x;
    const double Lp = ref_loss(pb);
    *x = x0 - e;
    const float down = *x;
    const double Lm = ref_loss(pb);
    *x = x0;
    return (Lp - Lm) / ((double)up - (double)down);
}

/* The reference's dphi, drscale, dscale (and the CPU's) against central differences of the reference's
 * loss, on a tiny masked case. */
static void finite_differences(void **state)
{
    (void)state;
    spec sp = {.B = 1, .T = 9, .C = 8, .H = 2, .tables = TOKEN_TABLE, .grid = 1, .scale = 1, .window = 4, .sinks = 1};
    problem pb = make_problem(sp, 91);
    const int B = sp.B, T = sp.T, C = sp.C, H = sp.H;
    /* u strictly inside (0, 1), where it moves the score both ways (at u = 0 or 1 the clamp makes the
     * derivative one-sided) */
    for (int d = 0; d < pb.D; d++)
        pb.phi[d] += 0.05f;
    for (int i = 0; i < T; i++)
        pb.rscale[i] *= 0.9f;
    ref_grads g;
    ref_grads_alloc(&g, &pb.bias, B, T, C, H);
    ref_attention(&g, pb.qkv, pb.dout, &pb.bias, B, T, C, H);
    run r = cpu_run(&pb);
    struct {
        const char *name;
        float *x;
        const double *ref;
        const float *cpu, *start;
        int n;
    } inputs[3] = {
        {"dphi", pb.phi, g.dphi, r.x[O_DPHI], r.start[O_DPHI], T},
        {"drscale", pb.rscale, g.drscale, r.x[O_DRSCALE], r.start[O_DRSCALE], T},
        {"dscale", pb.scale, g.dscale, r.x[O_DSCALE], r.start[O_DSCALE], H * T},
    };
    for (int k = 0; k < 3; k++) {
        double big = 0.0;
        for (int m = 0; m < inputs[k].n; m++)
            big = fabs(inputs[k].ref[m]) > big ? fabs(inputs[k].ref[m]) : big;
        assert_true(big > 0.0);
        for (int m = 0; m < inputs[k].n; m++) {
            const double fd = central_difference(&pb, &inputs[k].x[m]);
            if (fabs(fd - inputs[k].ref[m]) > TOL_FD_REF * big)
                fail_msg("%s[%d]: reference %.9g, central difference %.9g", inputs[k].name, m, inputs[k].ref[m], fd);
            const double cpu = (double)inputs[k].cpu[m] - inputs[k].start[m];
            if (fabs(cpu - fd) > TOL_FD_CPU * big)
                fail_msg("%s[%d]: cpu %.9g, central difference %.9g", inputs[k].name, m, cpu, fd);
        }
    }
    run_free(&r);
    ref_grads_free(&g);
    free_problem(&pb);
}

/* ---- the products' kernels (cpu/gemm.h, bk_gemm_attention_kernels) ---- */

#define CHILD_OUT "BK_TEST_ATTENTION_PRODUCTS_OUT"

/* Where this process runs as a child of same_bits_every_kernel_width: the kernels it chose (from
 * BIASKIT_GEMM, read once per process), then every output of two runs, masked and not, with every term. */
static int products_child(const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return 1;
    const int kernels = bk_gemm_attention_kernels();
    fwrite(&kernels, sizeof kernels, 1, f);
    for (int masked = 1; masked >= 0; masked--) {
        problem pb = make_problem(every_term(masked), 67);
        run r = cpu_run(&pb);
        for (int k = 0; k < O_COUNT; k++)
            if (r.x[k])
                fwrite(r.x[k], sizeof(float), r.n[k], f);
        run_free(&r);
        free_problem(&pb);
    }
    return fclose(f) ? 1 : 0;
}

/* Runs this test program again with BIASKIT_GEMM=name; returns what products_child wrote (*bytes long). */
static char *run_child(const char *name, size_t *bytes)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/bk_test_products_%ld_%s", (long)getpid(), name);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* a fresh process: OpenMP's threads and the cached choice are not inherited by exec */
        setenv("BIASKIT_GEMM", name, 1);
        setenv(CHILD_OUT, path, 1);
        execl("/proc/self/exe", "test_attention_v2", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("BIASKIT_GEMM=%s: the child run failed (status %d)", name, status);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *bytes = (size_t)ftell(f);
    rewind(f);
    char *data = malloc(*bytes + 1);
    assert_non_null(data);
    assert_int_equal(fread(data, 1, *bytes, f), *bytes);
    fclose(f);
    remove(path);
    return data;
}

/* Auto picks the engine's widest kernels where the CPU has vector ones; each width BIASKIT_GEMM names (plain
 * C, AVX2, AVX-512: those this CPU runs) gives the attention's outputs the same bits, masked and not; "blas"
 * picks the BLAS (its outputs are checked against the reference by the _blas registration of the tests). */
static void same_bits_every_kernel_width(void **state)
{
    (void)state;
    const int best = bk_tile_gemm_best();
    const char *env = getenv("BIASKIT_GEMM");
    if (!env || !*env || strcmp(env, "auto") == 0)
        assert_int_equal(bk_gemm_attention_kernels(), best > BK_TILE_GEMM_PLAIN ? best : BK_GEMM_BLAS);
    size_t n0 = 0;
    char *first = NULL;
    for (int v = BK_TILE_GEMM_PLAIN; v <= best; v++) {
        size_t n = 0;
        char *data = run_child(bk_gemm_kernels_label(v), &n);
        int kernels;
        memcpy(&kernels, data, sizeof kernels);
        assert_int_equal(kernels, v);
        if (!first) {
            first = data, n0 = n;
            continue;
        }
        assert_int_equal(n, n0);
        if (memcmp(data + sizeof kernels, first + sizeof kernels, n - sizeof kernels))
            fail_msg("the attention's outputs with the %s kernels differ in their bits from the plain C ones",
                     bk_gemm_kernels_label(v));
        free(data);
    }
    size_t n = 0;
    char *data = run_child("blas", &n);
    int kernels;
    memcpy(&kernels, data, sizeof kernels);
    assert_int_equal(kernels, BK_GEMM_BLAS);
    assert_int_equal(n, n0);
    free(data);
    free(first);
}

int main(void)
{
    const char *child = getenv(CHILD_OUT);
    if (child)
        return products_child(child);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(each_term_alone),
        cmocka_unit_test(all_terms_together),
        cmocka_unit_test(window_and_sinks),
        cmocka_unit_test(window_one),
        cmocka_unit_test(mask_hiding_nothing),
        cmocka_unit_test(independent_of_thread_count),
        cmocka_unit_test(vector_copies_and_baseline_same_bits),
        cmocka_unit_test(masked_terms_never_read),
        cmocka_unit_test(argument_errors),
        cmocka_unit_test(finite_differences),
        cmocka_unit_test(same_bits_every_kernel_width),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
