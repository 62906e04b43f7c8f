/* The ABI 2 mask and scale plugins, called directly through their descriptors (tests/plugin_direct.h):
 *   window  the mask it hands the engine, read through the engine's predicate (bk_mask_keeps) against the
 *           8 x 8 mask of plugins/window/README.md; the default window, the distance cap, a smaller
 *           biaskit_mask, refused options;
 *   logn    ln(i + 1) and Qwen's form against the check values of plugins/logn/README.md, training vs
 *           evaluation, every head the same, refused options;
 *   ssmax   s_h ln(i + 1) against the same values, initialisation, tensors, scale_backward against
 *           central differences (of the formula in double and of the plugin's own float scale),
 *           accumulation and determinism, refused options. */
#include "plugin_direct.h"

#include "model/bias_math.h"

#include "../plugins/logn/logn_math.h"
#include "../plugins/ssmax/ssmax_math.h"

#include <biaskit/random.h>

#include <math.h>
#include <stdlib.h>

static void expect_near(double got, double want, double rel, double abs_tol, const char *what)
{
    if (!(fabs(got - want) <= rel * fabs(want) + abs_tol))
        fail_msg("%s: got %.9g, want %.9g", what, got, want);
}

/* "[model] ... [train] length = L [[term]] plugin = NAME" + option lines */
static void experiment(char *buf, size_t size, int heads, int train_length, const char *plugin, const char *options)
{
    snprintf(buf, size, "[model]\nlayers = 2\nheads = %d\ndim = %d\n[train]\nlength = %d\n[[term]]\nplugin = \"%s\"\n%s",
             heads, heads * 8, train_length, plugin, options ? options : "");
}

/* ---- window ------------------------------------------------------------------------------------- */

static biaskit_mask get_mask(const direct_plugin *p)
{
    biaskit_mask m;
    memset(&m, 0x5a, sizeof m); /* every field written by the plugin, none left at this pattern */
    m.struct_size = sizeof m;
    biaskit_error pe = {0, ""};
    biaskit_context ctx = direct_context(p, 8, 1);
    if (p->desc->mask(p->inst, &ctx, &m, &pe) != BIASKIT_OK)
        fail_msg("mask(): %s", pe.message);
    return m;
}

/* window = 4 (keys i - j < 4), sinks = 2, T = 8 (1 = visible) */
static void window_mask_vector(void **state)
{
    (void)state;
    static const char *const want[8] = {"1.......", "11......", "111.....", "1111....",
                                        "11111...", "111111..", "11.1111.", "11..1111"};
    char text[512];
    experiment(text, sizeof text, 2, 64, "window", "window = 4\nsinks = 2\n");
    direct_plugin p;
    direct_open_ok(&p, "window", text);
    assert_int_equal(p.desc->capabilities, BIASKIT_CAP_MASK);
    assert_null(p.desc->param_count);
    biaskit_mask m = get_mask(&p);
    assert_int_equal(m.window, 4);
    assert_int_equal(m.sinks, 2);
    assert_int_equal(m.distance_cap, 0);
    for (int32_t i = 0; i < 8; i++)
        for (int32_t j = 0; j < 8; j++) {
            int keep = bk_mask_keeps(i, j, m.window, m.sinks);
            if (keep != (want[i][j] == '1'))
                fail_msg("query %d, key %d: visible = %d, the README's mask says %c", i, j, keep, want[i][j]);
        }
    /* the same mask in evaluation, at another length */
    biaskit_mask m2;
    m2.struct_size = sizeof m2;
    biaskit_context ctx = direct_context(&p, 4096, 0);
    biaskit_error pe = {0, ""};
    assert_int_equal(p.desc->mask(p.inst, &ctx, &m2, &pe), BIASKIT_OK);
    assert_int_equal(m2.window, 4);
    assert_int_equal(m2.sinks, 2);
    direct_close(&p);
}

/* window = 1: only the diagonal (and the sinks); window not set = the training length; the cap is
 * passed through */
static void window_defaults_and_cap(void **state)
{
    (void)state;
    char text[512];
    direct_plugin p;
    experiment(text, sizeof text, 2, 96, "window", NULL);
    direct_open_ok(&p, "window", text);
    biaskit_mask m = get_mask(&p);
    assert_int_equal(m.window, 96);
    assert_int_equal(m.sinks, 0);
    assert_int_equal(m.distance_cap, 0);
    direct_close(&p);

    experiment(text, sizeof text, 2, 96, "window", "window = 1\nsinks = 1\ndistance_cap = 50\n");
    direct_open_ok(&p, "window", text);
    m = get_mask(&p);
    assert_int_equal(m.window, 1);
    assert_int_equal(m.sinks, 1);
    assert_int_equal(m.distance_cap, 50);
    for (int32_t i = 0; i < 6; i++)
        for (int32_t j = 0; j < 6; j++)
            assert_int_equal(bk_mask_keeps(i, j, m.window, m.sinks), j <= i && (j == i || j == 0));
    direct_close(&p);
}

/* An engine whose biaskit_mask ends before distance_cap: window and sinks are written, nothing beyond
 * struct_size; a cap it cannot carry is an error rather than silently dropped. */
static void window_smaller_mask_struct(void **state)
{
    (void)state;
    char text[512];
    direct_plugin p;
    experiment(text, sizeof text, 2, 64, "window", "window = 8\nsinks = 4\n");
    direct_open_ok(&p, "window", text);
    biaskit_mask m;
    memset(&m, 0x5a, sizeof m);
    m.struct_size = (uint32_t)offsetof(biaskit_mask, distance_cap);
    int32_t untouched = m.distance_cap;
    biaskit_error pe = {0, ""};
    biaskit_context ctx = direct_context(&p, 64, 1);
    assert_int_equal(p.desc->mask(p.inst, &ctx, &m, &pe), BIASKIT_OK);
    assert_int_equal(m.window, 8);
    assert_int_equal(m.sinks, 4);
    assert_int_equal(m.distance_cap, untouched);
    direct_close(&p);

    experiment(text, sizeof text, 2, 64, "window", "window = 8\ndistance_cap = 16\n");
    direct_open_ok(&p, "window", text);
    m.struct_size = (uint32_t)offsetof(biaskit_mask, distance_cap);
    assert_int_equal(p.desc->mask(p.inst, &ctx, &m, &pe), BIASKIT_ERR_UNSUPPORTED);
    assert_message_has(pe.message, "distance_cap = 16");
    m.struct_size = 4; /* not even window */
    assert_int_equal(p.desc->mask(p.inst, &ctx, &m, &pe), BIASKIT_ERR_INVALID);
    assert_message_has(pe.message, "too small");
    direct_close(&p);
}

static void window_bad_options(void **state)
{
    (void)state;
    const struct {
        const char *options, *needle1, *needle2;
    } cases[] = {
        {"window = -1\n", "exp.toml:9:10: [[term]] #1 (window) option 'window': ",
         "expected an integer in 1 .. 2147483647 (keys i - j < window are visible: the query and the window - 1 keys "
         "before it; leave it out for the training length), got -1"},
        {"window = 0\n", "exp.toml:9:10: [[term]] #1 (window) option 'window': ", "got 0"},
        {"window = 4\nsinks = -1\n", "option 'sinks'", "expected an integer in 0 .. 2147483647 (keys visible to every query), got -1"},
        {"window = 4\ndistance_cap = -3\n", "option 'distance_cap'", "(0 = distances not capped), got -3"},
        {"window = 4294967296\n", "option 'window'", "got 4294967296"},
        {"window = 2.5\n", "option 'window'", NULL},
        {"windw = 4\n", "unknown key 'windw'", NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char text[512];
        experiment(text, sizeof text, 2, 64, "window", cases[k].options);
        direct_expect_error("window", text, cases[k].needle1, cases[k].needle2);
    }
}

/* ---- logn ---------------------------------------------------------------------------------------- */

/* n = i + 1, ln n, s ln n at s = 0.43, Qwen at L_train = 512 (plugins/logn/README.md) */
static const struct {
    int32_t n;
    double ln_n, ssmax, qwen;
} check_rows[] = {
    {1, 0.0, 0.0, 1.0},
    {2, 0.693147, 0.298053, 1.0},
    {512, 6.238325, 2.682480, 1.0},
    {513, 6.240276, 2.683319, 1.000313},
    {1024, 6.931472, 2.980533, 1.111111},
    {4096, 8.317766, 3.576639, 1.333333},
    {16384, 9.704061, 4.172746, 1.555556},
};
enum { CHECK_ROWS = 16384 };

static float *scale_of(const direct_plugin *p, const float *theta, int32_t rows, int training)
{
    float *s = malloc(sizeof *s * (size_t)p->geo.n_heads * (size_t)rows);
    assert_non_null(s);
    biaskit_context ctx = direct_context(p, rows, training);
    biaskit_error pe = {0, ""};
    if (p->desc->scale(p->inst, theta, &ctx, rows, s, &pe) != BIASKIT_OK)
        fail_msg("scale(): %s", pe.message);
    return s;
}

static void logn_check_values(void **state)
{
    (void)state;
    char text[512];
    direct_plugin p;
    experiment(text, sizeof text, 3, 512, "logn", NULL);
    direct_open_ok(&p, "logn", text);
    assert_int_equal(p.desc->capabilities, BIASKIT_CAP_SCALE);
    assert_int_equal(p.desc->flags, 0);
    assert_null(p.desc->param_count);
    for (int training = 0; training < 2; training++) { /* the log form: the same in training */
        float *s = scale_of(&p, NULL, CHECK_ROWS, training);
        for (size_t k = 0; k < sizeof check_rows / sizeof check_rows[0]; k++)
            for (int h = 0; h < 3; h++)
                expect_near(s[(size_t)h * CHECK_ROWS + (size_t)check_rows[k].n - 1], check_rows[k].ln_n, 1e-6, 1e-7,
                            "ln n");
        for (int32_t i = 0; i < CHECK_ROWS; i++) /* every head the same, the math header's value */
            for (int h = 0; h < 3; h++)
                assert_true(s[(size_t)h * CHECK_ROWS + (size_t)i] == (float)log((double)i + 1.0));
        free(s);
    }
    direct_close(&p);
}

static void logn_qwen(void **state)
{
    (void)state;
    char text[512];
    direct_plugin p;
    experiment(text, sizeof text, 2, 512, "logn", "form = \"qwen\"\n");
    direct_open_ok(&p, "logn", text);
    float *s = scale_of(&p, NULL, CHECK_ROWS, 0);
    for (size_t k = 0; k < sizeof check_rows / sizeof check_rows[0]; k++)
        for (int h = 0; h < 2; h++)
            expect_near(s[(size_t)h * CHECK_ROWS + (size_t)check_rows[k].n - 1], check_rows[k].qwen, 1e-6, 1e-7,
                        "qwen, evaluation");
    for (int32_t i = 0; i < 512; i++) /* exactly 1 up to n = L_train */
        assert_true(s[i] == 1.0f && s[CHECK_ROWS + i] == 1.0f);
    assert_true(s[512] > 1.0f);
    free(s);
    s = scale_of(&p, NULL, CHECK_ROWS, 1); /* training: 1 everywhere */
    for (size_t i = 0; i < 2 * (size_t)CHECK_ROWS; i++)
        assert_true(s[i] == 1.0f);
    free(s);
    /* the context's train length is the one used (1024 here: 1 up to n = 1024, then log_1024 n) */
    biaskit_context ctx = direct_context(&p, 2048, 0);
    ctx.train_length = 1024;
    float s2[2 * 2048];
    biaskit_error pe = {0, ""};
    assert_int_equal(p.desc->scale(p.inst, NULL, &ctx, 2048, s2, &pe), BIASKIT_OK);
    assert_true(s2[1023] == 1.0f);
    expect_near(s2[2047], 11.0 / 10.0, 1e-6, 0, "log_1024(2048)");
    ctx.train_length = 1;
    assert_int_equal(p.desc->scale(p.inst, NULL, &ctx, 2048, s2, &pe), BIASKIT_ERR_INVALID);
    assert_message_has(pe.message, "expected ctx->train_length >= 2, got 1");
    direct_close(&p);
}

static void logn_bad_options(void **state)
{
    (void)state;
    char text[512];
    experiment(text, sizeof text, 2, 512, "logn", "form = \"linear\"\n");
    direct_expect_error("logn", text, "exp.toml:9:8: [[term]] #1 (logn) option 'form'", "expected one of log, qwen, got 'linear'");
    experiment(text, sizeof text, 2, 1, "logn", "form = \"qwen\"\n");
    direct_expect_error("logn", text, "option 'form'", "form \"qwen\" divides by ln(train length), which needs a train length >= 2, got 1");
    experiment(text, sizeof text, 2, 1, "logn", "form = \"log\"\n"); /* the log form needs no train length */
    direct_plugin p;
    direct_open_ok(&p, "logn", text);
    direct_close(&p);
}

/* ---- ssmax --------------------------------------------------------------------------------------- */

static void ssmax_check_values(void **state)
{
    (void)state;
    char text[512];
    direct_plugin p;
    experiment(text, sizeof text, 4, 512, "ssmax", NULL);
    direct_open_ok(&p, "ssmax", text);
    assert_int_equal(p.desc->capabilities, BIASKIT_CAP_SCALE);
    assert_int_equal(p.desc->flags, BIASKIT_FLAG_PER_LAYER);
    assert_int_equal(p.desc->param_count(p.inst), 4);
    biaskit_tensor_info info[2];
    assert_int_equal(p.desc->param_tensors(p.inst, info, 2), 1);
    assert_string_equal(info[0].name, "s");
    assert_int_equal(info[0].offset, 0);
    assert_int_equal(info[0].rows, 4);
    assert_int_equal(info[0].cols, 1);
    float theta[4], again[4];
    biaskit_error pe = {0, ""};
    assert_int_equal(p.desc->param_init(p.inst, theta, 1, &pe), BIASKIT_OK);
    assert_int_equal(p.desc->param_init(p.inst, again, 99, &pe), BIASKIT_OK);
    for (int h = 0; h < 4; h++)
        assert_true(theta[h] == 0.43f && again[h] == 0.43f);
    assert_null(p.desc->param_project); /* s is not constrained */
    for (int training = 0; training < 2; training++) {
        float *s = scale_of(&p, theta, CHECK_ROWS, training);
        for (size_t k = 0; k < sizeof check_rows / sizeof check_rows[0]; k++)
            for (int h = 0; h < 4; h++)
                expect_near(s[(size_t)h * CHECK_ROWS + (size_t)check_rows[k].n - 1], check_rows[k].ssmax, 1e-6, 1e-7,
                            "0.43 ln n");
        free(s);
    }
    /* one s per head, of either sign */
    const float per_head[4] = {0.3f, -0.7f, 1.2f, 0.0f};
    float *s = scale_of(&p, per_head, 300, 1);
    for (int h = 0; h < 4; h++)
        for (int32_t i = 0; i < 300; i++)
            expect_near(s[h * 300 + i], per_head[h] * log(i + 1.0), 1e-6, 1e-7, "s_h ln n");
    free(s);
    direct_close(&p);

    experiment(text, sizeof text, 2, 512, "ssmax", "s_init = 1.5\n");
    direct_open_ok(&p, "ssmax", text);
    assert_int_equal(p.desc->param_init(p.inst, theta, 1, &pe), BIASKIT_OK);
    assert_true(theta[0] == 1.5f && theta[1] == 1.5f);
    direct_close(&p);
}

/* scale_backward: ds_h += sum_i dscale[h][i] ln(i + 1), against central differences of the double formula
 * and of the plugin's float scale; it adds, and gives the same bits every call. */
static void ssmax_gradient(void **state)
{
    (void)state;
    enum { H = 3, R = 700 };
    char text[512];
    direct_plugin p;
    experiment(text, sizeof text, H, 512, "ssmax", NULL);
    direct_open_ok(&p, "ssmax", text);
    float theta[H] = {0.43f, -0.2f, 2.5f};
    float *g = malloc(sizeof *g * H * R);
    biaskit_rng rng = biaskit_rng_seeded(5);
    for (int k = 0; k < H * R; k++)
        g[k] = (float)biaskit_rng_normal(&rng);
    float grad[H] = {0.25f, 0.25f, 0.25f};
    biaskit_context ctx = direct_context(&p, R, 1);
    biaskit_error pe = {0, ""};
    assert_int_equal(p.desc->scale_backward(p.inst, theta, &ctx, R, g, grad, &pe), BIASKIT_OK);
    for (int h = 0; h < H; h++) {
        double analytic = (double)grad[h] - 0.25, fd = 0.0, mag = 0.0, eps = 1e-4;
        for (int32_t i = 0; i < R; i++) {
            double term = (bk_ssmax_scale(theta[h] + eps, i) - bk_ssmax_scale(theta[h] - eps, i)) / (2 * eps);
            fd += g[h * R + i] * term;
            mag += fabs(g[h * R + i] * term);
        }
        if (!(fabs(analytic - fd) <= 1e-6 * mag + 1e-6))
            fail_msg("head %d: scale_backward %.9g, central differences (double) %.9g", h, analytic, fd);
        /* the plugin's float scale at theta_h +- 1% */
        float tp[H], tm[H];
        memcpy(tp, theta, sizeof tp);
        memcpy(tm, theta, sizeof tm);
        float step = 0.01f * fabsf(theta[h]);
        tp[h] += step;
        tm[h] -= step;
        float *sp = scale_of(&p, tp, R, 1), *sm = scale_of(&p, tm, R, 1);
        double lp = 0.0, lm = 0.0, noise = 0.0;
        for (int32_t i = 0; i < R; i++) {
            lp += (double)g[h * R + i] * sp[h * R + i];
            lm += (double)g[h * R + i] * sm[h * R + i];
            noise += fabs((double)g[h * R + i] * sp[h * R + i]) * 0x1.0p-23;
        }
        double width = (double)tp[h] - (double)tm[h], fd32 = (lp - lm) / width;
        if (!(fabs(analytic - fd32) <= 1e-5 * mag + 2 * noise / width))
            fail_msg("head %d: scale_backward %.9g, central differences (plugin scale) %.9g", h, analytic, fd32);
        free(sp), free(sm);
    }
    float once[H] = {0}, again[H] = {0}, twice[H];
    assert_int_equal(p.desc->scale_backward(p.inst, theta, &ctx, R, g, once, &pe), BIASKIT_OK);
    assert_int_equal(p.desc->scale_backward(p.inst, theta, &ctx, R, g, again, &pe), BIASKIT_OK);
    assert_memory_equal(once, again, sizeof once);
    memcpy(twice, once, sizeof twice);
    assert_int_equal(p.desc->scale_backward(p.inst, theta, &ctx, R, g, twice, &pe), BIASKIT_OK);
    for (int h = 0; h < H; h++)
        assert_true(twice[h] == 2.0f * once[h]);
    /* row 0 (n = 1, ln n = 0) contributes nothing */
    float only0[H * R];
    memset(only0, 0, sizeof only0);
    only0[0] = only0[R] = only0[2 * R] = 1.0f;
    float zero[H] = {0};
    assert_int_equal(p.desc->scale_backward(p.inst, theta, &ctx, R, only0, zero, &pe), BIASKIT_OK);
    for (int h = 0; h < H; h++)
        assert_true(zero[h] == 0.0f);
    /* errors: no theta, no rows */
    assert_int_equal(p.desc->scale_backward(p.inst, NULL, &ctx, R, g, zero, &pe), BIASKIT_ERR_INVALID);
    assert_message_has(pe.message, "theta is NULL");
    assert_int_equal(p.desc->scale(p.inst, theta, &ctx, 0, g, &pe), BIASKIT_ERR_INVALID);
    assert_message_has(pe.message, "expected rows >= 1, got 0");
    free(g);
    direct_close(&p);
}

static void ssmax_bad_options(void **state)
{
    (void)state;
    char text[512];
    experiment(text, sizeof text, 2, 512, "ssmax", "s_init = inf\n");
    direct_expect_error("ssmax", text, "exp.toml:9:10: [[term]] #1 (ssmax) option 's_init'", "expected a finite number, got inf");
    experiment(text, sizeof text, 2, 512, "ssmax", "s_init = nan\n");
    direct_expect_error("ssmax", text, "option 's_init'", "expected a finite number, got nan");
    experiment(text, sizeof text, 2, 512, "ssmax", "s_init = \"big\"\n");
    direct_expect_error("ssmax", text, "option 's_init'", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(window_mask_vector),
        cmocka_unit_test(window_defaults_and_cap),
        cmocka_unit_test(window_smaller_mask_struct),
        cmocka_unit_test(window_bad_options),
        cmocka_unit_test(logn_check_values),
        cmocka_unit_test(logn_qwen),
        cmocka_unit_test(logn_bad_options),
        cmocka_unit_test(ssmax_check_values),
        cmocka_unit_test(ssmax_gradient),
        cmocka_unit_test(ssmax_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
