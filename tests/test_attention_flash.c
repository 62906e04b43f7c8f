/* The flash-style CPU attention (cpu/attention.h: bk_attention_flash_forward / backward) against the
 * double-precision reference of tests/attention_ref.h — out, dqkv, dtable on both streams, dgrid, dphi,
 * drscale, dscale, each gradient accumulated into a nonzero start — with every term alone and together,
 * masks whose parts (sinks, window) cut the key tiles anywhere, and lengths of several tiles (T = 600,
 * 1100), where the online softmax rescales; against the blocked kernel (attention.c) for the content
 * position (not in the reference) and at a longer length; bit-for-bit properties (forward only = the
 * lse-saving forward, the same bits for 1, 2 and 3 threads, the copy the CPU picks (AVX-512F, AVX2) = an
 * AVX2-only build = the baseline build); terms
 * of masked keys never read; refusals (counted positions, a backward without lse, bad shapes); and which
 * kernel the CPU backend of each [run] attention mode runs.
 *
 * Tolerance: as test_attention_v2 (largest error over an array relative to its largest reference value,
 * TOL = 1.5e-5). Seen on 2026-11-28 (x86-64 Xeon, the AVX-512 tile products, 2 threads): at most 1.26e-5,
 * dtable[segment] at T 600 with a window of 2 (dS there is mostly rounding noise, as with a window of 1,
 * summed over 600 rows); everywhere else at most 7.4e-6 (dqkv with large scores). */
#include "attention_problem.h"
#include "attention_ref.h"

#include "cpu/attention.h"
#include "model/backend.h"
#include "model/bias_math.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* cpu/attention_flash.c built for baseline x86-64 (host_clones_base_attention.c) */
int base_attention_flash_forward(float *out, float *lse, const float *qkv, const bk_attention_bias *bias, int B,
                                 int T, int C, int H, bk_error *err);
int base_attention_flash_backward(float *dqkv, float *const dtable[BK_STREAM_COUNT], const float *dout,
                                  const float *qkv, const float *out, const float *lse,
                                  const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err);

/* ... and built for AVX2 alone (host_clones_avx2_attention.c) */
int avx2_attention_flash_forward(float *out, float *lse, const float *qkv, const bk_attention_bias *bias, int B,
                                 int T, int C, int H, bk_error *err);
int avx2_attention_flash_backward(float *dqkv, float *const dtable[BK_STREAM_COUNT], const float *dout,
                                  const float *qkv, const float *out, const float *lse,
                                  const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err);

#define TOL 1.5e-5

enum { O_OUT, O_OUT_FWD_ONLY, O_LSE, O_DQKV, O_DTOK, O_DSEG, O_DGRID, O_DPHI, O_DRSCALE, O_DSCALE, O_DCPOS, O_COUNT };
static const char *const o_names[O_COUNT] = {"out",   "out (forward only)", "lse",     "dqkv",   "dtable[token]",
                                             "dtable[segment]", "dgrid", "dphi", "drscale", "dscale", "dcpos"};

typedef struct run {
    float *x[O_COUNT];
    float *start[O_COUNT];
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

typedef int (*flash_fwd)(float *, float *, const float *, const bk_attention_bias *, int, int, int, int, bk_error *);
typedef int (*flash_bwd)(float *, float *const[BK_STREAM_COUNT], const float *, const float *, const float *,
                         const float *, const bk_attention_bias *, int, int, int, int, bk_error *);

/* The blocked kernel run as a flash one (lse = the saved probabilities, B H T T floats), for comparisons. */
static float *blocked_probs;
static int blocked_forward(float *out, float *lse, const float *qkv, const bk_attention_bias *bias, int B, int T, int C,
                           int H, bk_error *err)
{
    return bk_attention_forward(out, lse ? blocked_probs : NULL, qkv, bias, B, T, C, H, err);
}
static int blocked_backward(float *dqkv, float *const dtable[BK_STREAM_COUNT], const float *dout, const float *qkv,
                            const float *out, const float *lse, const bk_attention_bias *bias, int B, int T, int C,
                            int H, bk_error *err)
{
    (void)out, (void)lse;
    return bk_attention_backward(dqkv, dtable, dout, qkv, blocked_probs, bias, B, T, C, H, err);
}

/* Forward saving lse, forward only, backward into random start values; cpos: a content position or NULL. */
static run run_with(problem *pb, const float *cpos, flash_fwd forward, flash_bwd backward)
{
    const int B = pb->sp.B, T = pb->sp.T, C = pb->sp.C, H = pb->sp.H;
    run r;
    memset(&r, 0, sizeof r);
    uint64_t saved = rng_state;
    rng_state = 0x5eedULL + (uint64_t)T;
    float *out = alloc_out(&r, O_OUT, (size_t)B * T * C, 0);
    float *out1 = alloc_out(&r, O_OUT_FWD_ONLY, (size_t)B * T * C, 0);
    float *lse = alloc_out(&r, O_LSE, (size_t)B * H * T, 0);
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
    if (cpos) {
        bias.cpos = cpos;
        bias.dcpos = alloc_out(&r, O_DCPOS, (size_t)B * H * T, 1);
    }
    rng_state = saved;
    if (forward == blocked_forward) {
        blocked_probs = malloc((size_t)B * H * T * T * sizeof(float));
        assert_non_null(blocked_probs);
    }

    bk_error err;
    bk_error_clear(&err);
    assert_int_equal(forward(out, lse, pb->qkv, &bias, B, T, C, H, &err), BK_OK);
    assert_int_equal(forward(out1, NULL, pb->qkv, &bias, B, T, C, H, &err), BK_OK);
    assert_int_equal(backward(dqkv, dtable, pb->dout, pb->qkv, out, lse, &bias, B, T, C, H, &err), BK_OK);
    if (forward == blocked_forward) {
        free(blocked_probs);
        blocked_probs = NULL;
        free(r.x[O_LSE]);
        r.x[O_LSE] = NULL; /* the blocked kernel keeps probabilities, not lse */
    }
    return r;
}

static run flash_run(problem *pb)
{
    return run_with(pb, NULL, bk_attention_flash_forward, bk_attention_flash_backward);
}

static void check_against_reference(const char *what, problem *pb, const run *r)
{
    const int B = pb->sp.B, T = pb->sp.T, C = pb->sp.C, H = pb->sp.H;
    ref_grads g;
    ref_grads_alloc(&g, &pb->bias, B, T, C, H);
    ref_attention(&g, pb->qkv, pb->dout, &pb->bias, B, T, C, H);
    const double *ref[O_COUNT] = {g.out,      g.out,   NULL,   g.dqkv,    g.dtable[0], g.dtable[1],
                                  g.dgrid,    g.dphi,  g.drscale, g.dscale, NULL};
    for (int k = 0; k < O_COUNT; k++)
        if (r->x[k] && ref[k])
            expect_close(what, o_names[k], r->x[k], r->start[k], ref[k], r->n[k], TOL);
    ref_grads_free(&g);
}

/* Two runs close: every output of `a` against `b`'s as the reference (start values subtracted alike). */
static void expect_runs_close(const char *what, const run *a, const run *b, double tol)
{
    for (int k = 0; k < O_COUNT; k++) {
        if (!a->x[k] || !b->x[k])
            continue;
        double *ref = malloc(b->n[k] * sizeof *ref);
        assert_non_null(ref);
        for (size_t e = 0; e < b->n[k]; e++)
            ref[e] = (double)b->x[k][e] - (b->start[k] ? (double)b->start[k][e] : 0.0);
        expect_close(what, o_names[k], a->x[k], a->start[k], ref, a->n[k], tol);
        free(ref);
    }
}

static void expect_same_bits(const char *what, const run *a, const run *b)
{
    for (int k = 0; k < O_COUNT; k++) {
        assert_true((a->x[k] == NULL) == (b->x[k] == NULL));
        if (a->x[k] && memcmp(a->x[k], b->x[k], a->n[k] * sizeof(float)))
            fail_msg("%s: %s differs in its bits", what, o_names[k]);
    }
}

static void check_case(const char *what, spec sp, uint64_t seed)
{
    problem pb = make_problem(sp, seed);
    run r = flash_run(&pb);
    check_against_reference(what, &pb, &r);
    if (memcmp(r.x[O_OUT], r.x[O_OUT_FWD_ONLY], r.n[O_OUT] * sizeof(float)))
        fail_msg("%s: the forward-only output differs in its bits from the lse-saving forward's", what);
    for (size_t e = 0; e < r.n[O_LSE]; e++)
        if (!isfinite(r.x[O_LSE][e]))
            fail_msg("%s: lse[%zu] = %g", what, e, (double)r.x[O_LSE][e]);
    run_free(&r);
    free_problem(&pb);
}

/* B = 2, T = 150 (one tile of keys: three blocks of 64 rows, the last one cut), hd = 8 */
static spec base_spec(void)
{
    spec sp = {.B = 2, .T = 150, .C = 32, .H = 4};
    return sp;
}

/* T = 600: blocks whose keys span three tiles (the online softmax rescales), hd = 16 */
static spec long_spec(void)
{
    spec sp = {.B = 1, .T = 600, .C = 32, .H = 2};
    return sp;
}

static void each_term_alone(void **state)
{
    (void)state;
    spec sp = base_spec();
    check_case("no term", sp, 10);
    sp.tables = TOKEN_TABLE;
    check_case("token table alone", sp, 11);
    sp = base_spec();
    sp.grid = 1;
    check_case("coordinate table alone", sp, 12);
    sp = base_spec();
    sp.scale = 1;
    check_case("logit scale alone", sp, 13);
    sp = base_spec();
    sp.window = 20;
    check_case("window 20 alone", sp, 14);
    sp.sinks = 3;
    check_case("window 20 with 3 sinks", sp, 15);
    /* window 1: each query sees itself (P = 1, dS = dP - D: rounding noise, which the gradients of the
     * coordinate table sum over the rows; at T = 600 that sum reached the tolerance, so T = 150 here) */
    sp.window = 1;
    sp.sinks = 0;
    sp.grid = sp.scale = 1;
    sp.tables = TOKEN_TABLE;
    check_case("window 1", sp, 16);
}

static void all_terms_together(void **state)
{
    (void)state;
    spec sp = base_spec();
    sp.grid = sp.scale = 1;
    sp.window = 37;
    sp.sinks = 3;
    sp.tables = TOKEN_AND_SEGMENT;
    check_case("all terms, both tables", sp, 21);
    sp.window = sp.sinks = 0;
    check_case("all terms, both tables, no mask", sp, 22);
}

/* Several tiles of keys per block: the rescaling of the online softmax, tiles cut by the diagonal, the
 * sinks part and the window part each cut into tiles at offsets that are not multiples of a tile. */
static void long_rows(void **state)
{
    (void)state;
    spec sp = long_spec();
    sp.tables = TOKEN_AND_SEGMENT;
    check_case("T 600, both tables", sp, 31);
    sp.grid = sp.scale = 1;
    check_case("T 600, all terms, no mask", sp, 32);
    const int masks[][2] = {{300, 0}, {300, 5}, {257, 300}, {100, 0}, {400, 1}, {2, 0}};
    for (size_t c = 0; c < sizeof masks / sizeof *masks; c++) {
        sp.window = masks[c][0];
        sp.sinks = masks[c][1];
        char what[64];
        snprintf(what, sizeof what, "T 600, all terms, window %d, sinks %d", sp.window, sp.sinks);
        check_case(what, sp, 33 + c);
    }
}

/* Large scores (q, k scaled by 6: logits of +-100 and more) across tiles: the running max changes from
 * tile to tile and the rescaling must not overflow or lose the row. */
static void large_scores(void **state)
{
    (void)state;
    spec sp = long_spec();
    sp.tables = TOKEN_TABLE;
    problem pb = make_problem(sp, 41);
    for (size_t e = 0; e < (size_t)sp.B * sp.T * 3 * sp.C; e++)
        pb.qkv[e] *= 6.0f;
    run r = flash_run(&pb);
    check_against_reference("large scores", &pb, &r);
    run_free(&r);
    free_problem(&pb);
}

/* Against the blocked kernel: the content position (not in the reference) with a mask, and a length of
 * five tiles. */
static void matches_blocked_kernel(void **state)
{
    (void)state;
    spec sp = long_spec();
    sp.tables = TOKEN_TABLE;
    sp.scale = 1;
    sp.window = 350;
    sp.sinks = 2;
    problem pb = make_problem(sp, 51);
    const int BH = sp.B * sp.H, T = sp.T;
    float *cpos = malloc((size_t)BH * T * sizeof *cpos);
    assert_non_null(cpos);
    for (int bh = 0; bh < BH; bh++)
        for (int t = 0; t < T; t++) /* non-decreasing: a sum of steps >= 0 */
            cpos[(size_t)bh * T + t] = t == 0 ? 0.0f : cpos[(size_t)bh * T + t - 1] + (float)(0.02 * uniform());
    run flash = run_with(&pb, cpos, bk_attention_flash_forward, bk_attention_flash_backward);
    run blocked = run_with(&pb, cpos, blocked_forward, blocked_backward);
    expect_runs_close("content position, window 350, sinks 2", &flash, &blocked, TOL);
    run_free(&flash), run_free(&blocked);
    free(cpos);
    free_problem(&pb);

    spec big = {.B = 1, .T = 1100, .C = 64, .H = 2, .tables = TOKEN_AND_SEGMENT, .grid = 1};
    pb = make_problem(big, 52);
    flash = flash_run(&pb);
    blocked = run_with(&pb, NULL, blocked_forward, blocked_backward);
    expect_runs_close("T 1100, hd 32, both tables and the coordinate table", &flash, &blocked, TOL);
    run_free(&flash), run_free(&blocked);
    free_problem(&pb);
}

static void independent_of_thread_count(void **state)
{
    (void)state;
    const int saved = omp_get_max_threads();
    spec sp = long_spec();
    sp.B = 2;
    sp.tables = TOKEN_AND_SEGMENT;
    sp.grid = sp.scale = 1;
    for (int masked = 0; masked < 2; masked++) {
        sp.window = masked ? 300 : 0;
        sp.sinks = masked ? 4 : 0;
        problem pb = make_problem(sp, 61);
        omp_set_num_threads(1);
        run one = flash_run(&pb);
        omp_set_num_threads(2);
        run two = flash_run(&pb);
        omp_set_num_threads(3);
        run three = flash_run(&pb);
        expect_same_bits("1 and 2 threads", &one, &two);
        expect_same_bits("1 and 3 threads", &one, &three);
        run_free(&one), run_free(&two), run_free(&three);
        free_problem(&pb);
    }
    omp_set_num_threads(saved);
}

static void avx2_and_baseline_same_bits(void **state)
{
    (void)state;
    spec sp = long_spec();
    sp.tables = TOKEN_AND_SEGMENT;
    sp.grid = sp.scale = 1;
    for (int masked = 1; masked >= 0; masked--) {
        sp.window = masked ? 300 : 0;
        sp.sinks = masked ? 4 : 0;
        problem pb = make_problem(sp, 65);
        run fast = flash_run(&pb);
        run base = run_with(&pb, NULL, base_attention_flash_forward, base_attention_flash_backward);
        expect_same_bits(masked ? "the CPU's copy and baseline, masked" : "the CPU's copy and baseline", &fast, &base);
#if defined(__x86_64__) && defined(__GNUC__)
        if (__builtin_cpu_supports("avx2")) {
            run avx2 = run_with(&pb, NULL, avx2_attention_flash_forward, avx2_attention_flash_backward);
            expect_same_bits(masked ? "AVX2 and baseline, masked" : "AVX2 and baseline", &avx2, &base);
            run_free(&avx2);
        }
#endif
        run_free(&fast), run_free(&base);
        free_problem(&pb);
    }
}

/* With a window alone, table entries and phi at distances >= window are NaN: never read. */
static void masked_terms_never_read(void **state)
{
    (void)state;
    spec sp = long_spec();
    sp.tables = TOKEN_TABLE;
    sp.grid = sp.scale = 1;
    sp.window = 280;
    problem pb = make_problem(sp, 71);
    for (int h = 0; h < sp.H; h++)
        for (int d = sp.window; d < pb.D; d++)
            pb.table[0][(size_t)h * pb.D + d] = NAN;
    for (int d = sp.window; d < pb.D; d++)
        pb.phi[d] = NAN;
    run r = flash_run(&pb);
    check_against_reference("NaN beyond the window", &pb, &r);
    run_free(&r);
    free_problem(&pb);
}

static void refusals(void **state)
{
    (void)state;
    spec sp = {.B = 1, .T = 20, .C = 8, .H = 2, .tables = TOKEN_TABLE};
    problem pb = make_problem(sp, 81);
    const int B = sp.B, T = sp.T, C = sp.C, H = sp.H;
    float *out = malloc((size_t)B * T * C * sizeof *out), *lse = malloc((size_t)B * H * T * sizeof *lse);
    float *dqkv = calloc((size_t)B * T * 3 * C, sizeof *dqkv);
    assert_true(out && lse && dqkv);
    float *const dtable[BK_STREAM_COUNT] = {NULL, NULL};
    bk_error err;
    bk_error_clear(&err);
    assert_int_equal(bk_attention_flash_forward(out, lse, pb.qkv, &pb.bias, B, T, C, H, &err), BK_OK);

    float vectors[2 * 4] = {0};
    bk_attention_bias counted = pb.bias;
    counted.cope = vectors;
    counted.cope_points = 2;
    counted.cope_scale = 1.0f;
    assert_int_equal(bk_attention_flash_forward(out, lse, pb.qkv, &counted, B, T, C, H, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "counted positions");
    assert_message_has(err.message, "attention = \"materialized\"");
    bk_error_clear(&err);
    assert_int_equal(
        bk_attention_flash_backward(dqkv, dtable, pb.dout, pb.qkv, out, lse, &counted, B, T, C, H, &err),
        BK_ERR_INVALID);
    assert_message_has(err.message, "counted positions");

    bk_error_clear(&err);
    assert_int_equal(bk_attention_flash_backward(dqkv, dtable, pb.dout, pb.qkv, out, NULL, &pb.bias, B, T, C, H, &err),
                     BK_ERR_INVALID);
    assert_message_has(err.message, "log-sum-exps");
    bk_error_clear(&err);
    assert_int_equal(bk_attention_flash_forward(out, lse, pb.qkv, &pb.bias, B, T, 9, H, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "C divisible by H");
    bk_attention_bias short_table = pb.bias;
    short_table.distances = T - 1;
    bk_error_clear(&err);
    assert_int_equal(bk_attention_flash_forward(out, lse, pb.qkv, &short_table, B, T, C, H, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "outside the bias table");
    free(out), free(lse), free(dqkv);
    free_problem(&pb);
}

/* The CPU backends of the three modes (model/backend.h): what they save, and which kernel each runs,
 * told apart by bits (the two kernels round differently). auto: the blocked kernel for training and for
 * forward-only passes up to BK_CPU_FLASH_EVAL_FROM - 1 tokens, the flash kernel from there on. */
static void backend_modes(void **state)
{
    (void)state;
    bk_backend *autob = bk_backend_cpu(), *fused = bk_backend_cpu_attention(BK_ATTENTION_FUSED),
               *mat = bk_backend_cpu_attention(BK_ATTENTION_MATERIALIZED);
    assert_ptr_equal(bk_backend_cpu_attention(BK_ATTENTION_AUTO), autob);
    assert_int_equal(autob->attention, BK_ATTENTION_AUTO);
    assert_int_equal(fused->attention, BK_ATTENTION_FUSED);
    assert_int_equal(mat->attention, BK_ATTENTION_MATERIALIZED);
    assert_int_equal(fused->attention_saved(fused, 2, 100, 3), (size_t)2 * 3 * 100);
    assert_int_equal(mat->attention_saved(mat, 2, 100, 3), (size_t)2 * 3 * 100 * 100);
    assert_int_equal(autob->attention_saved(autob, 2, 100, 3), (size_t)2 * 3 * 100 * 100);

    for (int T = BK_CPU_FLASH_EVAL_FROM - 1; T <= BK_CPU_FLASH_EVAL_FROM; T++) {
        spec sp = {.B = 1, .T = T, .C = 16, .H = 2, .tables = TOKEN_TABLE};
        problem pb = make_problem(sp, 90 + (uint64_t)T);
        const size_t n = (size_t)T * sp.C;
        float *blocked = malloc(n * sizeof(float)), *flash = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
        assert_true(blocked && flash && got);
        bk_error err;
        bk_error_clear(&err);
        assert_int_equal(bk_attention_forward(blocked, NULL, pb.qkv, &pb.bias, 1, T, sp.C, sp.H, &err), BK_OK);
        assert_int_equal(bk_attention_flash_forward(flash, NULL, pb.qkv, &pb.bias, 1, T, sp.C, sp.H, &err), BK_OK);
        if (!memcmp(blocked, flash, n * sizeof(float)))
            fail_msg("T %d: the two kernels gave the same bits; this test cannot tell them apart", T);
        const int want_flash = T >= BK_CPU_FLASH_EVAL_FROM;
        assert_int_equal(autob->attention_forward(autob, BK_STORAGE_FP32, got, NULL, pb.qkv, &pb.bias, 1, T, sp.C, sp.H, &err), BK_OK);
        if (memcmp(got, want_flash ? flash : blocked, n * sizeof(float)))
            fail_msg("T %d: auto's forward-only pass did not run the %s kernel", T, want_flash ? "flash" : "blocked");
        assert_int_equal(fused->attention_forward(fused, BK_STORAGE_FP32, got, NULL, pb.qkv, &pb.bias, 1, T, sp.C, sp.H, &err), BK_OK);
        assert_memory_equal(got, flash, n * sizeof(float));
        assert_int_equal(mat->attention_forward(mat, BK_STORAGE_FP32, got, NULL, pb.qkv, &pb.bias, 1, T, sp.C, sp.H, &err), BK_OK);
        assert_memory_equal(got, blocked, n * sizeof(float));
        free(blocked), free(flash), free(got);
        free_problem(&pb);
    }
    /* auto with counted positions stays with the blocked kernel (the flash one refuses them) */
    spec sp = {.B = 1, .T = BK_CPU_FLASH_EVAL_FROM, .C = 8, .H = 2};
    problem pb = make_problem(sp, 99);
    float vectors[2 * 4] = {0.1f, -0.2f, 0.3f, 0.0f, 0.5f, 0.25f, -0.1f, 0.2f};
    pb.bias.cope = vectors;
    pb.bias.cope_points = 2;
    pb.bias.cope_scale = 1.0f;
    float *out = malloc((size_t)sp.T * sp.C * sizeof(float));
    assert_non_null(out);
    bk_error err;
    bk_error_clear(&err);
    assert_int_equal(autob->attention_forward(autob, BK_STORAGE_FP32, out, NULL, pb.qkv, &pb.bias, 1, sp.T, sp.C, sp.H, &err), BK_OK);
    assert_int_equal(fused->attention_forward(fused, BK_STORAGE_FP32, out, NULL, pb.qkv, &pb.bias, 1, sp.T, sp.C, sp.H, &err),
                     BK_ERR_INVALID);
    free(out);
    free_problem(&pb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(each_term_alone),
        cmocka_unit_test(all_terms_together),
        cmocka_unit_test(long_rows),
        cmocka_unit_test(large_scores),
        cmocka_unit_test(matches_blocked_kernel),
        cmocka_unit_test(independent_of_thread_count),
        cmocka_unit_test(avx2_and_baseline_same_bits),
        cmocka_unit_test(masked_terms_never_read),
        cmocka_unit_test(refusals),
        cmocka_unit_test(backend_modes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
