/* Length-aware RoPE (plugins/rope: scaling = none | pi | ntk | yarn, static or dynamic) and the engine's
 * side of it (model/positions.c: rotary_ctx asked per length, the amplitude in the rotation tables).
 *
 *  - digest_vectors: rope_math.h against the published/derived test vectors of YaRN (k(32), k(1), low,
 *    high, mscale, the logit factor mscale^2, NTK bases, dynamic NTK bases, dynamic-YaRN mscale); 1e-6
 *    relative (the vectors have 6-7 significant digits; bases 1e-9).
 *  - plugin_vectors: the same values through the rope plugin loaded by the engine, calling its
 *    rotary_ctx(): per-pair ratios theta'_k / theta_k, the amplitude, NTK's base recovered from the last
 *    pair, dynamic scaling at several lengths (s never below 1); 2e-6 relative (float frequencies).
 *  - factor_one_is_plain: scaling pi / ntk / yarn with factor = 1 and dynamic scaling at lengths <= the
 *    training length give rotation tables bit-identical to scaling = "none" (and amplitude exactly 1).
 *  - positions_follow_the_length: bk_positions asks rotary_ctx again when T or the training flag changes,
 *    remakes the tables only when what it returns changes, and its tables are amplitude x cos / sin.
 *  - device_copy_follows: on the emulated device backend the uploaded tables equal the host's bit for bit
 *    after every change of length (dynamic scaling up and down, a static factor growing).
 *  - backward_is_the_transpose: a loss through the engine's rotation (CPU backend) with YaRN's amplitude
 *    (s = 4): its gradient by the backward rotation (sign -1) against central finite differences.
 *  - engine_checks_the_plugin: a rotary_ctx-only plugin (tests/plugins/rotctx.c) with a bad amplitude or
 *    a NaN frequency is refused naming the term and the plugin.
 *  - refusals: bad options name the key with file:line:column and say what was expected.
 *  - torch_reference: tests/reference/yarn_reference.py recomputes, in float64 from the formulas, the
 *    frequencies and amplitude of every scaling and the logits q'.k' after the engine's rotation at
 *    positions up to 8x the training length; skipped when /usr/bin/python3 (or BIASKIT_PYTHON) cannot
 *    import torch. Tolerances: frequencies and amplitude 2^-23 relative (one float rounding); logits
 *    amp^2 sum_k |q_k||k_k| (i + j + 16) 2^-23 (the float frequency's rounding grows with the position). */
#define _POSIX_C_SOURCE 200809L /* popen, mkstemp */
#include "term_fixture.h"

#include "bias/terms.h"
#include "model/backend.h"
#include "model/positions.h"
#include "model/rotary_math.h"

#include "../plugins/rope/rope_math.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

/* |got - want| <= rel * |want| */
static void expect_rel(double got, double want, double rel, const char *what)
{
    if (!(fabs(got - want) <= rel * fabs(want)))
        fail_msg("%s: got %.10g, want %.10g (relative %.3g > %.3g)", what, got, want,
                 fabs(got - want) / fmax(fabs(want), 1e-300), rel);
}

/* "[model] ... [train] length = L, [[term]] rope" with the given extra term lines; heads = 1, dim = d. */
static void rope_text(char *buf, size_t size, int d_head, int L, const char *options)
{
    snprintf(buf, size, "[model]\nlayers = 1\nheads = 1\ndim = %d\nvocab = 256\n[train]\nlength = %d\n[[term]]\nplugin = "
                        "\"rope\"\n%s",
             d_head, L, options);
}

/* The rope term's rotary_ctx() at `length`: inv_freq (d_head/2) and the amplitude. */
static void ask(const fixture *f, int32_t length, float *inv_freq, float *amplitude)
{
    const bk_term *t = &f->set.terms[0];
    assert_non_null(t->plugin->desc->rotary_ctx);
    biaskit_context ctx = bk_term_context(&f->set, -1, length, 0);
    biaskit_error pe = {0, ""};
    if (t->plugin->desc->rotary_ctx(t->instance, &ctx, inv_freq, amplitude, &pe) != BIASKIT_OK)
        fail_msg("rotary_ctx: %s", pe.message);
}

/* ---- the digest's vectors through rope_math.h ---------------------------------------------------------- */

static void digest_vectors(void **state)
{
    (void)state;
    const struct {
        int d;
        double L, s, k32, k1, low, high, mscale, logit;
    } rows[] = {
        {128, 4096, 16, 20.9445, 45.0269, 20, 46, 1.277259, 1.631390},
        {128, 4096, 32, 20.9445, 45.0269, 20, 46, 1.346574, 1.813260},
        {64, 2048, 4, 8.0640, 20.1052, 8, 21, 1.138629, 1.296477},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "row %zu k(32)", i);
        expect_rel(bk_yarn_correction_dim(32, rows[i].d, 10000, rows[i].L), rows[i].k32, 5e-6, what);
        snprintf(what, sizeof what, "row %zu k(1)", i);
        expect_rel(bk_yarn_correction_dim(1, rows[i].d, 10000, rows[i].L), rows[i].k1, 5e-6, what);
        double low, high;
        bk_yarn_range(32, 1, rows[i].d, 10000, rows[i].L, &low, &high);
        assert_true(low == rows[i].low && high == rows[i].high);
        snprintf(what, sizeof what, "row %zu mscale", i);
        expect_rel(bk_yarn_mscale(rows[i].s), rows[i].mscale, 1e-6, what);
        snprintf(what, sizeof what, "row %zu logit factor", i);
        expect_rel(bk_yarn_mscale(rows[i].s) * bk_yarn_mscale(rows[i].s), rows[i].logit, 1e-6, what);
    }
    assert_true(bk_yarn_mscale(1.0) == 1.0 && bk_yarn_mscale(0.5) == 1.0); /* no temperature at s <= 1 */
    expect_rel(bk_yarn_mscale(8), 1.2079442, 1e-7, "mscale(8) (Eq. 25: about 1.208)");
    expect_rel(bk_ntk_base(10000, 16, 128), 167198.7392, 1e-9, "NTK base D=128 s=16");
    expect_rel(bk_ntk_base(10000, 4, 64), 41829.3659, 1e-9, "NTK base D=64 s=4");
    /* dynamic NTK (alpha = 1): b' = b (l'/L)^(D/(D-2)) */
    expect_rel(bk_ntk_base(10000, bk_rope_dynamic_factor(4096, 4096), 128), 10000, 1e-12, "dynamic NTK l'=4096");
    expect_rel(bk_ntk_base(10000, bk_rope_dynamic_factor(8192, 4096), 128), 20221.262, 1e-7, "dynamic NTK l'=8192");
    expect_rel(bk_ntk_base(10000, bk_rope_dynamic_factor(16384, 4096), 128), 40889.942, 1e-7, "dynamic NTK l'=16384");
    expect_rel(bk_yarn_mscale(bk_rope_dynamic_factor(8192, 4096)), 1.069315, 1e-6, "dynamic YaRN mscale l'=8192");
    expect_rel(bk_yarn_mscale(bk_rope_dynamic_factor(16384, 4096)), 1.138629, 1e-6, "dynamic YaRN mscale l'=16384");
    assert_true(bk_rope_dynamic_factor(1000, 4096) == 1.0); /* never below 1 */
    /* the ramp: 0 up to low (kept), 1 from high (interpolated) */
    assert_true(bk_yarn_ramp(20, 20, 46) == 0.0 && bk_yarn_ramp(46, 20, 46) == 1.0 && bk_yarn_ramp(63, 20, 46) == 1.0);
    double lo, hi; /* equal bounds (both 0 at L = 6 < 2 pi): high += 0.001 */
    bk_yarn_range(32, 1, 64, 10000, 6, &lo, &hi);
    assert_true(lo == 0.0 && hi == 0.001);
    bk_yarn_range(32, 1, 8, 10000, 1e9, &lo, &hi); /* high clamped to d - 1 */
    assert_true(hi == 7.0);
}

/* ---- the same through the plugin --------------------------------------------------------------------- */

static void plugin_vectors(void **state)
{
    (void)state;
    char text[512];
    float plain[64], got[64], amp;
    struct {
        int d, L;
        const char *options;
        double amplitude;
        int pair[5];
        double ratio[5];
    } cases[] = {
        {128, 4096, "scaling = \"yarn\"\nfactor = 16\n", 1.277259, {0, 20, 33, 46, 63}, {1, 1, 0.53125, 0.0625, 0.0625}},
        {128, 4096, "scaling = \"yarn\"\nfactor = 32\n", 1.346574, {0, 20, 33, 46, 63}, {1, 1, 0.515625, 1.0 / 32, 1.0 / 32}},
        {64, 2048, "scaling = \"yarn\"\nfactor = 4\n", 1.138629, {0, 8, 14, 21, 31}, {1, 1, 0.653846, 0.25, 0.25}},
        {64, 2048, "scaling = \"yarn\"\nfactor = 4\nattn_factor = 0.5\n", 0.5 * 1.138629, {0, 8, 14, 21, 31},
         {1, 1, 0.653846, 0.25, 0.25}},
        {64, 2048, "scaling = \"pi\"\nfactor = 4\n", 1, {0, 8, 14, 21, 31}, {0.25, 0.25, 0.25, 0.25, 0.25}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fixture f;
        rope_text(text, sizeof text, cases[c].d, cases[c].L, cases[c].options);
        open_ok(&f, text);
        for (int k = 0; k < cases[c].d / 2; k++)
            plain[k] = bk_rope_inv_freq(10000, k, cases[c].d);
        ask(&f, cases[c].L, got, &amp);
        char what[96];
        snprintf(what, sizeof what, "case %zu amplitude", c);
        expect_rel(amp, cases[c].amplitude, 1e-6, what);
        for (int i = 0; i < 5; i++) {
            snprintf(what, sizeof what, "case %zu pair %d ratio", c, cases[c].pair[i]);
            expect_rel((double)got[cases[c].pair[i]] / plain[cases[c].pair[i]], cases[c].ratio[i], 2e-6, what);
        }
        if (c == 2) /* the digest: theta_14 1.778279e-2 -> 1.162721e-2 */
            expect_rel(got[14], 1.162721e-2, 1e-6, "D=64 s=4 theta'_14");
        /* static: the same at every length */
        float again[64], amp2;
        ask(&f, 8 * cases[c].L, again, &amp2);
        assert_memory_equal(got, again, sizeof(float) * (size_t)(cases[c].d / 2));
        assert_true(amp == amp2);
        close_terms(&f);
    }
    fixture f;
    /* NTK: the base recovered from the last pair, theta_63 = b'^(-126/128) */
    rope_text(text, sizeof text, 128, 4096, "scaling = \"ntk\"\nfactor = 16\n");
    open_ok(&f, text);
    ask(&f, 4096, got, &amp);
    assert_true(amp == 1.0f);
    expect_rel(pow(got[63], -128.0 / 126.0), 167198.7392, 3e-7, "NTK base from the last pair");
    expect_rel((double)got[63] / bk_rope_inv_freq(10000, 63, 128), 1.0 / 16, 2e-6, "NTK last pair: exactly 1/s");
    assert_true(got[0] == 1.0f); /* the first pair is unchanged */
    close_terms(&f);
    /* dynamic NTK: s = max(1, length / 4096) */
    rope_text(text, sizeof text, 128, 4096, "scaling = \"ntk\"\nfactor = 0\n");
    open_ok(&f, text);
    const struct {
        int32_t length;
        double base;
    } dyn[] = {{4096, 10000}, {8192, 20221.262}, {16384, 40889.942}, {100, 10000}};
    for (size_t i = 0; i < sizeof dyn / sizeof dyn[0]; i++) {
        ask(&f, dyn[i].length, got, &amp);
        char what[64];
        snprintf(what, sizeof what, "dynamic NTK base at %d", (int)dyn[i].length);
        expect_rel(pow(got[63], -128.0 / 126.0), dyn[i].base, 3e-7, what);
        assert_true(amp == 1.0f);
    }
    close_terms(&f);
    /* dynamic YaRN: mscale at 8192 and 16384; 1 and plain RoPE at or below the original length */
    rope_text(text, sizeof text, 128, 1024, "scaling = \"yarn\"\nfactor = 0\noriginal_length = 4096\n");
    open_ok(&f, text);
    ask(&f, 8192, got, &amp);
    expect_rel(amp, 1.069315, 1e-6, "dynamic YaRN amplitude at 8192");
    ask(&f, 16384, got, &amp);
    expect_rel(amp, 1.138629, 1e-6, "dynamic YaRN amplitude at 16384");
    expect_rel((double)got[63] / bk_rope_inv_freq(10000, 63, 128), 0.25, 2e-6, "dynamic YaRN at 16384: last pair / 4");
    ask(&f, 2048, got, &amp);
    assert_true(amp == 1.0f);
    for (int k = 0; k < 64; k++)
        assert_true(got[k] == bk_rope_inv_freq(10000, k, 128));
    close_terms(&f);
    /* rotary_frequencies(), the ABI 1 path: plain RoPE whatever the scaling */
    rope_text(text, sizeof text, 64, 2048, "scaling = \"pi\"\nfactor = 8\n");
    open_ok(&f, text);
    biaskit_error pe = {0, ""};
    assert_int_equal(f.set.terms[0].plugin->desc->rotary_frequencies(f.set.terms[0].instance, got, &pe), BIASKIT_OK);
    for (int k = 0; k < 32; k++)
        assert_true(got[k] == bk_rope_inv_freq(10000, k, 64));
    close_terms(&f);
}

/* ---- the engine's tables --------------------------------------------------------------------------- */

/* bk_positions of the rope term of `options` (d_head 16, L = 32) prepared at T tokens; the caller frees. */
static void positions_at(fixture *f, bk_positions *ps, const char *options, int T, int training)
{
    char text[512];
    rope_text(text, sizeof text, 16, 32, options);
    open_ok(f, text);
    bk_error err;
    int32_t *tokens = calloc((size_t)T, sizeof *tokens);
    assert_int_equal(bk_positions_init(ps, &f->set, &err), BK_OK);
    bk_positions_set_training(ps, training);
    if (bk_positions_prepare(ps, tokens, 1, T, &err))
        fail_msg("%s", err.message);
    free(tokens);
}

static void expect_same_tables(const bk_positions *a, const bk_positions *b, const char *what)
{
    assert_int_equal(a->rot_rows, b->rot_rows);
    assert_int_equal(a->pairs, b->pairs);
    size_t n = (size_t)a->rot_rows * (size_t)a->pairs * sizeof(float);
    if (memcmp(a->rot_cos, b->rot_cos, n) || memcmp(a->rot_sin, b->rot_sin, n) ||
        memcmp(a->inv_freq, b->inv_freq, sizeof(float) * (size_t)a->pairs))
        fail_msg("%s: the rotation tables differ from scaling = \"none\"", what);
    if (a->amplitude != 1.0f || b->amplitude != 1.0f)
        fail_msg("%s: amplitude %g, expected 1", what, (double)b->amplitude);
}

static void factor_one_is_plain(void **state)
{
    (void)state;
    const struct {
        const char *options;
        int T;
    } cases[] = {
        {"scaling = \"pi\"\nfactor = 1\n", 256},  {"scaling = \"ntk\"\nfactor = 1\n", 256},
        {"scaling = \"yarn\"\nfactor = 1\n", 256}, {"scaling = \"yarn\"\nfactor = 0\n", 32},
        {"scaling = \"pi\"\nfactor = 0\n", 20},    {"scaling = \"ntk\"\nfactor = 0\noriginal_length = 64\n", 64},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fixture fa, fb;
        bk_positions a, b;
        positions_at(&fa, &a, "", cases[c].T, 0);
        positions_at(&fb, &b, cases[c].options, cases[c].T, 0);
        expect_same_tables(&a, &b, cases[c].options);
        bk_positions_free(&a), bk_positions_free(&b);
        close_terms(&fa), close_terms(&fb);
    }
    /* and scaling = "none" through rotary_ctx is what rotary_frequencies gave before ABI 2 */
    fixture f;
    bk_positions ps;
    positions_at(&f, &ps, "", 40, 1);
    for (int p = 0; p < 40; p++)
        for (int k = 0; k < 8; k++) {
            double angle = (double)p * (double)bk_rope_inv_freq(10000, k, 16);
            assert_true(ps.rot_cos[p * 8 + k] == (float)cos(angle) && ps.rot_sin[p * 8 + k] == (float)sin(angle));
        }
    bk_positions_free(&ps);
    close_terms(&f);
}

static void positions_follow_the_length(void **state)
{
    (void)state;
    fixture f;
    bk_positions ps;
    bk_error err;
    int32_t tokens[256] = {0};
    positions_at(&f, &ps, "scaling = \"yarn\"\nfactor = 0\n", 32, 0); /* L = 32: s = 1 */
    assert_true(ps.amplitude == 1.0f);
    uint64_t v = ps.rot_version;
    /* 4L: s = 4, the tables are amplitude x cos, sin of p theta'_k */
    assert_int_equal(bk_positions_prepare(&ps, tokens, 2, 128, &err), BK_OK);
    assert_true(ps.rot_version == v + 1);
    expect_rel(ps.amplitude, bk_yarn_mscale(4), 1e-7, "amplitude at 4L");
    double low, high;
    bk_yarn_range(32, 1, 16, 10000, 32, &low, &high);
    for (int p = 0; p < 128; p++)
        for (int k = 0; k < 8; k++) {
            float th = bk_rope_scaled_inv_freq(BK_ROPE_YARN, 10000, k, 16, 4.0, low, high);
            assert_true(ps.inv_freq[k] == th);
            double a = (double)ps.amplitude, angle = (double)p * (double)th;
            assert_true(ps.rot_cos[p * 8 + k] == (float)(a * cos(angle)));
            assert_true(ps.rot_sin[p * 8 + k] == (float)(a * sin(angle)));
        }
    bk_rotary_view view;
    assert_int_equal(bk_positions_rotary(&ps, &view), 1);
    assert_int_equal(view.rows, 128);
    /* back to L: the current length's s (1), not the largest seen */
    assert_int_equal(bk_positions_prepare(&ps, tokens, 1, 32, &err), BK_OK);
    assert_true(ps.amplitude == 1.0f);
    assert_true(ps.inv_freq[7] == bk_rope_inv_freq(10000, 7, 16));
    assert_int_equal(ps.rot_rows, 32);
    bk_positions_free(&ps);
    close_terms(&f);

    /* static scaling: asked again for a new length, but the same answer keeps the tables */
    positions_at(&f, &ps, "scaling = \"pi\"\nfactor = 2\n", 64, 0);
    v = ps.rot_version;
    assert_int_equal(bk_positions_prepare(&ps, tokens, 1, 16, &err), BK_OK);
    assert_true(ps.rot_version == v && ps.rot_rows == 64 && ps.freq_length == 16);
    assert_int_equal(bk_positions_prepare(&ps, tokens, 1, 128, &err), BK_OK);
    assert_true(ps.rot_version == v + 1 && ps.rot_rows == 128); /* grown */
    bk_positions_free(&ps);
    close_terms(&f);

    /* rotctx echoes the context: 1 / length and the training flag */
    open_ok(&f, "[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 8\n[[term]]\nplugin = \"rotctx\"\n");
    const int32_t *calls = (const int32_t *)f.set.terms[0].instance;
    assert_int_equal(bk_positions_init(&ps, &f.set, &err), BK_OK);
    assert_int_equal(*calls, 1); /* at init: the training length, training (the default) */
    assert_true(ps.inv_freq[0] == 1.0f / 8 && ps.inv_freq[1] == 0.5f);
    assert_int_equal(bk_positions_prepare(&ps, tokens, 1, 8, &err), BK_OK);
    assert_int_equal(*calls, 1); /* same length, same flag: not asked */
    bk_positions_set_training(&ps, 0);
    assert_int_equal(bk_positions_prepare(&ps, tokens, 1, 8, &err), BK_OK);
    assert_int_equal(*calls, 2);
    assert_true(ps.inv_freq[1] == 0.25f);
    assert_int_equal(bk_positions_prepare(&ps, tokens, 1, 16, &err), BK_OK);
    assert_int_equal(*calls, 3);
    assert_true(ps.inv_freq[0] == 1.0f / 16);
    assert_true(ps.rot_cos[15 * 4 + 0] == (float)cos(15.0 / 16)); /* row 15, pair 0 */
    bk_positions_free(&ps);
    close_terms(&f);
}

/* On a device backend (the emulated one: device memory reached through upload/download) the tables the
 * rotation reads follow every change: lengths that change the dynamic factor up and down, and a static
 * factor whose tables only grow. Each time the device copy equals the host tables bit for bit. */
static void device_copy_follows(void **state)
{
    (void)state;
    bk_backend *emu = NULL;
    bk_error err;
    if (bk_backend_emulated_create(&emu, BK_MATMUL_FP32, &err))
        fail_msg("%s", err.message);
    const char *options[] = {"scaling = \"yarn\"\nfactor = 0\n", "scaling = \"pi\"\nfactor = 2\n"};
    const int lengths[] = {32, 128, 32, 64, 200, 16};
    static int32_t tokens[200];
    static float c[200 * 8], sn[200 * 8];
    for (size_t o = 0; o < 2; o++) {
        char text[512];
        rope_text(text, sizeof text, 16, 32, options[o]);
        fixture f;
        open_ok(&f, text);
        bk_positions ps;
        if (bk_positions_init(&ps, &f.set, &err) || bk_positions_set_backend(&ps, emu, &err))
            fail_msg("%s", err.message);
        for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
            if (bk_positions_prepare(&ps, tokens, 1, lengths[i], &err))
                fail_msg("%s", err.message);
            bk_rotary_view view;
            assert_int_equal(bk_positions_rotary(&ps, &view), 1);
            assert_int_equal(view.rows, ps.rot_rows);
            assert_true(view.rows >= lengths[i]);
            size_t bytes = (size_t)view.rows * 8 * sizeof(float);
            if (emu->download(emu, c, view.cos, bytes, &err) || emu->download(emu, sn, view.sin, bytes, &err))
                fail_msg("%s", err.message);
            if (memcmp(c, ps.rot_cos, bytes) || memcmp(sn, ps.rot_sin, bytes))
                fail_msg("%s at length %d: the device tables differ from the host's", options[o], lengths[i]);
            if (o == 0) /* dynamic: s = max(1, T / 32) */
                expect_rel(ps.amplitude, bk_yarn_mscale(bk_rope_dynamic_factor(lengths[i], 32)), 1e-7, "amplitude");
        }
        bk_positions_free(&ps);
        close_terms(&f);
    }
    bk_backend_destroy(emu);
}

/* L(x) = sum_c w_c y_c^2 / 2 with y = rotary(x) (q and k of every position): dL/dx = rotary^T(w * y),
 * the backward rotation (sign -1) of the engine, against central differences of L in double. */
static double rotated_loss(bk_backend *cpu, const bk_rotary_view *view, const float *x, const float *w, float *y, int T,
                           int C, int H)
{
    bk_error err;
    memcpy(y, x, sizeof(float) * (size_t)T * 3 * (size_t)C);
    if (cpu->rotary(cpu, y, view, 1, T, C, H, 1.0f, &err))
        fail_msg("%s", err.message);
    double loss = 0;
    for (int i = 0; i < T * 3 * C; i++)
        loss += 0.5 * (double)w[i] * (double)y[i] * (double)y[i];
    return loss;
}

static void backward_is_the_transpose(void **state)
{
    (void)state;
    enum { T = 24, C = 32, H = 2, N = T * 3 * C };
    fixture f;
    bk_positions ps;
    /* d_head 16, L = 8: yarn s = 4 (amplitude 1.139); positions up to 3L */
    char text[512];
    snprintf(text, sizeof text, "[model]\nlayers = 1\nheads = %d\ndim = %d\n[train]\nlength = 8\n[[term]]\nplugin = "
                                "\"rope\"\nscaling = \"yarn\"\nfactor = 4\nbase = 100\n", H, C);
    open_ok(&f, text);
    bk_error err;
    int32_t tokens[T] = {0};
    assert_int_equal(bk_positions_init(&ps, &f.set, &err), BK_OK);
    assert_int_equal(bk_positions_prepare(&ps, tokens, 1, T, &err), BK_OK);
    expect_rel(ps.amplitude, bk_yarn_mscale(4), 1e-7, "amplitude");
    bk_rotary_view view;
    assert_int_equal(bk_positions_rotary(&ps, &view), 1);
    bk_backend *cpu = bk_backend_cpu();
    static float x[N], w[N], y[N], g[N];
    biaskit_rng rng = biaskit_rng_seeded(11);
    for (int i = 0; i < N; i++)
        x[i] = (float)biaskit_rng_normal(&rng), w[i] = (float)(0.5 + biaskit_rng_uniform(&rng));
    rotated_loss(cpu, &view, x, w, y, T, C, H);
    for (int i = 0; i < N; i++)
        g[i] = w[i] * y[i];
    if (cpu->rotary(cpu, g, &view, 1, T, C, H, -1.0f, &err)) /* the backward: dL/dx */
        fail_msg("%s", err.message);
    const float h = 1.0f / 64; /* exact in float; L is quadratic, so the central difference is exact but for rounding */
    double worst = 0;
    for (int i = 0; i < N; i++) {
        if (i % (3 * C) >= 2 * C) /* v is not rotated: its gradient is w x */
            continue;
        float keep = x[i];
        x[i] = keep + h;
        double up = rotated_loss(cpu, &view, x, w, y, T, C, H);
        x[i] = keep - h;
        double down = rotated_loss(cpu, &view, x, w, y, T, C, H);
        x[i] = keep;
        double fd = (up - down) / (2.0 * h), err_i = fabs(fd - g[i]) / (1.0 + fabs(fd));
        worst = err_i > worst ? err_i : worst;
        if (err_i > 1e-3)
            fail_msg("dL/dx[%d] (position %d, channel %d): backward %.7g, finite difference %.7g", i, i / (3 * C),
                     i % (3 * C), (double)g[i], fd);
    }
    /* the amplitude is in the gradient: without it (a^2 = 1.297 away) the check above could not pass */
    assert_true(fabs(ps.amplitude * ps.amplitude - 1.0) > 0.2);
    print_message("rope yarn s=4: backward vs finite differences, worst relative error %.3g\n", worst);
    bk_positions_free(&ps);
    close_terms(&f);
}

static void engine_checks_the_plugin(void **state)
{
    (void)state;
    const struct {
        const char *options, *needle;
    } cases[] = {
        {"amplitude = 0.0\n", "gave the amplitude 0, expected a finite number > 0"},
        {"amplitude = -1.0\n", "gave the amplitude -1, expected a finite number > 0"},
        {"inf_amplitude = true\n", "gave the amplitude inf, expected a finite number > 0"},
        {"nan_pair = 2\n", "gave inverse frequency 2 = nan, expected a finite number"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char text[512];
        snprintf(text, sizeof text, "[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 8\n[[term]]\nplugin = "
                                    "\"rotctx\"\n%s", cases[c].options);
        fixture f;
        open_ok(&f, text);
        bk_positions ps;
        bk_error err;
        assert_int_equal(bk_positions_init(&ps, &f.set, &err), BK_ERR_PLUGIN);
        assert_message_has(err.message, "term 'rotctx' (plugin rotctx): rotary_ctx() for length 8");
        assert_message_has(err.message, cases[c].needle);
        bk_positions_free(&ps);
        close_terms(&f);
    }
}

static void refusals(void **state)
{
    (void)state;
    const struct {
        const char *options, *needle1, *needle2;
    } cases[] = {
        {"scaling = \"pi\"\nfactor = 0.5\n", "exp.toml:11:", "expected a scale factor s >= 1, or 0 for dynamic"},
        {"scaling = \"yarn\"\nfactor = -2\n", "'factor'", "got -2"},
        {"scaling = \"ntk\"\nfactor = nan\n", "'factor'", "got nan"},
        {"scaling = \"yarn\"\nbeta_fast = 1\nbeta_slow = 2\n", "'beta_fast'", "expected beta_fast > beta_slow"},
        {"scaling = \"yarn\"\nbeta_slow = 40\n", "'beta_slow'", "expected beta_fast > beta_slow"},
        {"scaling = \"yarn\"\nbeta_slow = 0\n", "'beta_slow'", "rotations > 0"},
        {"scaling = \"yarn\"\nattn_factor = 0\n", "'attn_factor'", "expected a finite factor > 0"},
        {"scaling = \"pi\"\noriginal_length = -1\n", "'original_length'", "got -1"},
        {"factor = 4\n", "'factor'",
         "'factor' applies with scaling = pi, ntk, yarn or longrope only; scaling is \"none\""},
        {"original_length = 64\n", "'original_length'", "applies with scaling = pi, ntk, yarn or longrope only"},
        {"scaling = \"pi\"\nbeta_fast = 16\n", "'beta_fast'", "applies with scaling = \"yarn\" only; scaling is \"pi\""},
        {"scaling = \"ntk\"\nattn_factor = 2\n", "'attn_factor'", "applies with scaling = yarn or longrope only"},
        {"scaling = \"linear\"\n", "'scaling'", "none, pi, ntk, yarn, longrope"},
        /* longrope's factor sets (a head of 16: 8 pairs) */
        {"scaling = \"longrope\"\nlong_factor = [1, 1, 1, 1, 1, 1, 1, 1]\n", "exp.toml:", "needs 'short_factor': 8 factors"},
        {"scaling = \"longrope\"\nshort_factor = [1, 1, 1, 1, 1, 1, 1, 1]\n", "'long_factor'", "needs 'long_factor'"},
        {"scaling = \"longrope\"\nshort_factor = [1, 1, 1]\nlong_factor = [1, 1, 1, 1, 1, 1, 1, 1]\n", "'short_factor'",
         "expected 8 factors (one per pair of a head of 16), got 3"},
        {"scaling = \"longrope\"\nshort_factor = [1, 1, 1, 1, 1, 1, 1, 1]\nlong_factor = [1, 1, 1, 1, 1, 1, 1, 1, 1]\n",
         "long_factor", "9"},
        {"scaling = \"longrope\"\nshort_factor = [1, 1, 1, 1, 1, 1, 1, 1]\nlong_factor = [1, 2, 3, nan, 1, 1, 1, 1]\n",
         "'long_factor'", "value 3: expected a finite float, got nan"},
        {"scaling = \"longrope\"\nshort_factor = [1, 1, 1, 1, 1, 1, 1, 1]\nlong_factor = [1, 2, 3, -4, 1, 1, 1, 1]\n",
         "'long_factor'", "factor 3: expected a finite value > 0, got -4"},
        {"scaling = \"longrope\"\nshort_factor = [1, 1, 1, 1, 1, 1, 1, 0]\nlong_factor = [1, 1, 1, 1, 1, 1, 1, 1]\n",
         "'short_factor'", "factor 7: expected a finite value > 0, got 0"},
        {"scaling = \"yarn\"\nshort_factor = [1, 1, 1, 1, 1, 1, 1, 1]\n", "'short_factor'",
         "applies with scaling = \"longrope\" only"},
        {"partial = 1.5\n", "'partial'", "in [0, 1] (1: every pair), got 1.5"},
        {"partial = -0.1\n", "'partial'", "got -0.1"},
        /* the training-free extensions ([train] length 32) */
        {"extend = \"self-extend\"\ngroup = 4\n", "exp.toml:", "extend = \"self-extend\" needs 'window'"},
        {"extend = \"self-extend\"\nwindow = 8\n", "exp.toml:", "needs 'group'"},
        {"extend = \"self-extend\"\nwindow = 0\ngroup = 4\n", "exp.toml:11:", "expected the neighbour window in tokens >= 1, got 0"},
        {"extend = \"self-extend\"\nwindow = -3\ngroup = 4\n", "'window'", "got -3"},
        {"extend = \"self-extend\"\nwindow = 32\ngroup = 4\n", "'window'",
         "shorter than the training length 32 (the positions it keeps are those the model was trained on), got 32"},
        {"extend = \"self-extend\"\nwindow = 8\ngroup = 0\n", "'group'", "expected the group size >= 1, got 0"},
        {"extend = \"rerope\"\nwindow = 8\nleaky = 1\n", "'leaky'", "expected 0 (ReRoPE: min(d, window)) or a finite k > 1"},
        {"extend = \"rerope\"\nwindow = 8\nleaky = nan\n", "'leaky'", "got nan"},
        {"extend = \"rerope\"\nwindow = 8\ngroup = 2\n", "'group'",
         "'group' applies with extend = \"self-extend\" only; extend is \"rerope\""},
        {"extend = \"string\"\nwindow = 4\n", "exp.toml:", "extend = \"string\" needs 'shift'"},
        {"extend = \"string\"\nshift = 1\nwindow = 4\n", "'shift'", "expected the shift in tokens >= 2, got 1"},
        {"extend = \"string\"\nshift = 4\nwindow = 4\n", "'window'", "expected a local window below the shift 4"},
        {"window = 4\n", "'window'", "'window' applies with extend = self-extend, rerope or string only; extend is \"none\""},
        {"shift = 4\n", "'shift'", "applies with extend = \"string\" only"},
        {"extend = \"yarn\"\n", "'extend'", "none, self-extend, rerope, string"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char text[512];
        rope_text(text, sizeof text, 16, 32, cases[c].options);
        expect_term_error(text, cases[c].needle1, cases[c].needle2);
    }
    expect_term_error("[model]\nlayers = 1\nheads = 2\ndim = 4\n[train]\nlength = 8\n[[term]]\nplugin = \"rope\"\n"
                      "scaling = \"ntk\"\nfactor = 2\n",
                      "'scaling'", "needs a head width >= 4, got 2");
}

/* ---- PyTorch --------------------------------------------------------------------------------------- */

static const char *python(void)
{
    const char *p = getenv("BIASKIT_PYTHON");
    return p && *p ? p : "/usr/bin/python3";
}
#define YARN_REFERENCE BK_TEST_SOURCE_DIR "/tests/reference/yarn_reference.py"

static void json_floats(FILE *o, const char *key, const float *v, int n)
{
    fprintf(o, ", \"%s\": [", key);
    for (int i = 0; i < n; i++)
        fprintf(o, "%s%.9g", i ? ", " : "", (double)v[i]);
    fprintf(o, "]");
}

/* One case of the reference: the options of the rope term (every one written out, defaults included). */
typedef struct ref_case {
    const char *name;
    int d, L;           /* d_head, [train] length */
    double base;
    const char *scaling;
    double factor;      /* 0: dynamic */
    int original_length;
    double beta_fast, beta_slow, attn_factor;
    int length;         /* the length evaluated: T of the forward */
} ref_case;

/* The plugin's rotary_ctx() at c->length, and through the engine (bk_positions at T = length, the CPU
 * backend's rotation of the same q and k at every position) the logits q'_i . k'_j, written as JSON. */
static void write_case(FILE *o, int first, const ref_case *c)
{
    char text[1024], term[512];
    if (strcmp(c->scaling, "none") == 0)
        snprintf(term, sizeof term, "base = %.17g\n", c->base);
    else if (strcmp(c->scaling, "yarn") == 0)
        snprintf(term, sizeof term,
                 "base = %.17g\nscaling = \"yarn\"\nfactor = %.17g\noriginal_length = %d\nbeta_fast = %.17g\n"
                 "beta_slow = %.17g\nattn_factor = %.17g\n",
                 c->base, c->factor, c->original_length, c->beta_fast, c->beta_slow, c->attn_factor);
    else
        snprintf(term, sizeof term, "base = %.17g\nscaling = \"%s\"\nfactor = %.17g\noriginal_length = %d\n", c->base,
                 c->scaling, c->factor, c->original_length);
    const int d = c->d, L = c->L, length = c->length, half = d / 2;
    rope_text(text, sizeof text, d, L, term);
    fixture f;
    open_ok(&f, text);
    float inv_freq[128], amp;
    ask(&f, length, inv_freq, &amp);
    bk_positions ps;
    bk_error err;
    int32_t *tokens = calloc((size_t)length, sizeof *tokens);
    float *qkv = malloc(sizeof(float) * (size_t)length * 3 * (size_t)d);
    assert_int_equal(bk_positions_init(&ps, &f.set, &err), BK_OK);
    if (bk_positions_prepare(&ps, tokens, 1, length, &err))
        fail_msg("%s", err.message);
    assert_memory_equal(ps.inv_freq, inv_freq, sizeof(float) * (size_t)half); /* the engine asked for the same */
    assert_true(ps.amplitude == amp);
    biaskit_rng rng = biaskit_rng_seeded(7 + (uint64_t)length);
    float q[128], k[128];
    for (int ch = 0; ch < d; ch++)
        q[ch] = (float)biaskit_rng_normal(&rng), k[ch] = (float)biaskit_rng_normal(&rng);
    for (int t = 0; t < length; t++)
        for (int ch = 0; ch < d; ch++) {
            float *row = qkv + (size_t)t * 3 * d;
            row[ch] = q[ch], row[d + ch] = k[ch], row[2 * d + ch] = 0.0f;
        }
    bk_rotary_view view;
    assert_int_equal(bk_positions_rotary(&ps, &view), 1);
    bk_backend *cpu = bk_backend_cpu();
    if (cpu->rotary(cpu, qkv, &view, 1, length, d, 1, 1.0f, &err))
        fail_msg("%s", err.message);
    fprintf(o,
            "%s\n  {\"name\": \"%s\", \"d_head\": %d, \"train_length\": %d, \"base\": %.17g, \"length\": %d, "
            "\"scaling\": \"%s\", \"factor\": %.17g, \"original_length\": %d, \"beta_fast\": %.17g, "
            "\"beta_slow\": %.17g, \"attn_factor\": %.17g",
            first ? "" : ",", c->name, d, L, c->base, length, c->scaling, c->factor, c->original_length, c->beta_fast,
            c->beta_slow, c->attn_factor);
    json_floats(o, "inv_freq", inv_freq, half);
    fprintf(o, ", \"amplitude\": %.9g", (double)amp);
    json_floats(o, "q", q, d);
    json_floats(o, "k", k, d);
    /* query positions up to the last one; keys at a few distances behind, and key 0 */
    const int is[] = {0, 1, 5, L - 1, L, 2 * L + 3, 4 * L - 1, 8 * L - 1, length - 1};
    const int back[] = {0, 1, 7, L / 2, L + 1, -1}; /* -1: key 0 */
    fprintf(o, ", \"pairs\": [");
    int n = 0, last = -1;
    for (size_t a = 0; a < sizeof is / sizeof is[0]; a++) {
        if (is[a] <= last || is[a] >= length)
            continue;
        last = is[a];
        for (size_t b = 0; b < sizeof back / sizeof back[0]; b++) {
            int i = is[a], j = back[b] < 0 ? 0 : i - back[b];
            if (j < 0)
                continue;
            double dot = 0;
            for (int ch = 0; ch < d; ch++)
                dot += (double)qkv[(size_t)i * 3 * d + ch] * (double)qkv[(size_t)j * 3 * d + d + ch];
            fprintf(o, "%s[%d, %d, %.17g]", n++ ? ", " : "", i, j, dot);
        }
    }
    fprintf(o, "]}");
    bk_positions_free(&ps);
    close_terms(&f);
    free(tokens), free(qkv);
}

static void torch_reference(void **state)
{
    (void)state;
    char probe[512];
    snprintf(probe, sizeof probe, "'%s' -c 'import torch' >/dev/null 2>&1", python());
    if (system(probe) != 0) {
        print_message("torch_reference: skipped: %s cannot import torch (install python3-torch, or set "
                      "BIASKIT_PYTHON)\n", python());
        skip();
    }
    char path[] = "/tmp/bk_yarn_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *o = fdopen(fd, "w");
    assert_non_null(o);
    fprintf(o, "{\"cases\": [");
    const int L = 2048;
    const ref_case cases[] = {
        {"none", 64, L, 10000, "none", 1, 0, 32, 1, 1, 8 * L},
        {"pi s=4", 64, L, 10000, "pi", 4, 0, 32, 1, 1, 8 * L},
        {"ntk s=8", 64, L, 10000, "ntk", 8, 0, 32, 1, 1, 8 * L},
        {"yarn s=4", 64, L, 10000, "yarn", 4, 0, 32, 1, 1, 8 * L},
        {"yarn s=8, original_length 1024, beta 16/2, attn_factor 0.8, base 500", 64, L, 500, "yarn", 8, 1024, 16, 2,
         0.8, 8 * L},
        {"yarn s=1", 64, L, 10000, "yarn", 1, 0, 32, 1, 1, 8 * L},
        {"pi s=1", 64, L, 10000, "pi", 1, 0, 32, 1, 1, 8 * L},
        {"dynamic yarn at 3L", 64, L, 10000, "yarn", 0, 0, 32, 1, 1, 3 * L},
        {"dynamic yarn at 8L", 64, L, 10000, "yarn", 0, 0, 32, 1, 1, 8 * L},
        {"dynamic ntk at 8L", 64, L, 10000, "ntk", 0, 0, 32, 1, 1, 8 * L},
        {"dynamic pi at 5L", 64, L, 10000, "pi", 0, 0, 32, 1, 1, 5 * L},
        {"dynamic pi at L/2", 64, L, 10000, "pi", 0, 0, 32, 1, 1, L / 2},
        {"yarn d=16 L=64 s=8", 16, 64, 10000, "yarn", 8, 0, 32, 1, 1, 8 * 64},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        write_case(o, c == 0, &cases[c]);
    fprintf(o, "\n]}\n");
    assert_int_equal(fclose(o), 0);
    char cmd[1024], out[16384] = "";
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' 2>&1", python(), YARN_REFERENCE, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t used = 0, got;
    while (used + 1 < sizeof out && (got = fread(out + used, 1, sizeof out - 1 - used, p)) > 0)
        used += got;
    out[used] = '\0';
    int status = pclose(p);
    if (status != 0)
        fail_msg("yarn_reference.py disagrees (input kept: %s):\n%s", path, out);
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) /* print_message truncates long text */
        print_message("%s\n", line);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(digest_vectors),
        cmocka_unit_test(plugin_vectors),
        cmocka_unit_test(factor_one_is_plain),
        cmocka_unit_test(positions_follow_the_length),
        cmocka_unit_test(device_copy_follows),
        cmocka_unit_test(backward_is_the_transpose),
        cmocka_unit_test(engine_checks_the_plugin),
        cmocka_unit_test(refusals),
        cmocka_unit_test(torch_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
