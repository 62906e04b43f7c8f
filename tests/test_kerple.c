/* The KERPLE plugin: the formulas and derivatives of kerple_math.h against the check values of
 * plugins/kerple/README.md, and the plugin loaded through the engine: tables against an independent double
 * implementation, table_backward against central finite differences, initialisation, clamps,
 * frozen values (Qin et al.'s Type 1), rejected options and long tables. */
#include "term_fixture.h"

#include "bias/terms.h"
#include "cuda/device.h"

#include "../plugins/kerple/kerple_math.h"

#include <biaskit/random.h>

#include <math.h>
#include <stdlib.h>

/* |got - want| <= rel * |want| + abs */
static void expect_near(double got, double want, double rel, double abs_tol, const char *what)
{
    if (!(fabs(got - want) <= rel * fabs(want) + abs_tol))
        fail_msg("%s: got %.9g, want %.9g (rel %.3g)", what, got, want, fabs(got - want) / fmax(fabs(want), 1e-300));
}

/* ---- an independent double implementation (plugins/kerple/README.md), for references ------------- */

static double ref_bias(int variant, const double *r, double d)
{
    switch (variant) {
    case BK_KERPLE_POWER: return d == 0.0 ? 0.0 : -r[0] * pow(d, r[1]);
    case BK_KERPLE_3PARA_LOG: return -r[0] * log1p(r[1] * (d == 0.0 ? 0.0 : pow(d, r[2])));
    default: return -r[0] * log1p(r[1] * d);
    }
}

/* ---- the math header against the check values of plugins/kerple/README.md -------------------------- */

static void log_check_values(void **state)
{
    (void)state;
    const struct {
        int32_t d;
        double b, dr1, dr2;
    } rows[] = {
        {1, -0.405465, -0.405465, -0.666667},
        {10, -1.791759, -1.791759, -1.666667},
        {511, -5.547129, -5.547129, -1.992203},
        {16383, -9.010974, -9.010974, -1.999756},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int32_t d = rows[i].d;
        expect_near(bk_kerple_log_bias(1.0f, 0.5f, d), rows[i].b, 1e-5, 0, "log B");
        expect_near(bk_kerple_log_dr1(0.5f, d), rows[i].dr1, 1e-5, 0, "log dB/dr1");
        expect_near(bk_kerple_log_dr2(1.0f, 0.5f, d), rows[i].dr2, 1e-5, 0, "log dB/dr2");
        float g[3] = {0, 0, 0};
        bk_kerple_grad(BK_KERPLE_LOG, 1.0f, 0.5f, 0.0f, d, g);
        expect_near(bk_kerple_bias(BK_KERPLE_LOG, 1.0f, 0.5f, 0.0f, d), rows[i].b, 1e-5, 0, "log B (dispatch)");
        expect_near(g[0], rows[i].dr1, 1e-5, 0, "log dB/dr1 (dispatch)");
        expect_near(g[1], rows[i].dr2, 1e-5, 0, "log dB/dr2 (dispatch)");
    }
}

static void power_check_values(void **state)
{
    (void)state;
    const struct {
        int32_t d;
        double b, dr1, dr2;
    } rows[] = {
        {2, -1.414214, -2.828427, -0.980258},
        {10, -15.811388, -31.622777, -36.407067},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int32_t d = rows[i].d;
        expect_near(bk_kerple_power_bias(0.5f, 1.5f, d), rows[i].b, 1e-5, 0, "power B");
        expect_near(bk_kerple_power_dr1(1.5f, d), rows[i].dr1, 1e-5, 0, "power dB/dr1");
        expect_near(bk_kerple_power_dr2(0.5f, 1.5f, d), rows[i].dr2, 1e-5, 0, "power dB/dr2");
        float g[3] = {0, 0, 0};
        bk_kerple_grad(BK_KERPLE_POWER, 0.5f, 1.5f, 0.0f, d, g);
        expect_near(bk_kerple_bias(BK_KERPLE_POWER, 0.5f, 1.5f, 0.0f, d), rows[i].b, 1e-5, 0, "power B (dispatch)");
        expect_near(g[0], rows[i].dr1, 1e-5, 0, "power dB/dr1 (dispatch)");
        expect_near(g[1], rows[i].dr2, 1e-5, 0, "power dB/dr2 (dispatch)");
    }
}

static void three_para_log_check_values(void **state)
{
    (void)state;
    const double b = -1.424261, dr1 = -1.424261, dr2 = -1.518628, dr3 = -1.748385;
    expect_near(bk_kerple_3para_bias(1.0f, 0.5f, 0.8f, 10), b, 1e-5, 0, "3para B");
    expect_near(bk_kerple_3para_dr1(0.5f, 0.8f, 10), dr1, 1e-5, 0, "3para dB/dr1");
    expect_near(bk_kerple_3para_dr2(1.0f, 0.5f, 0.8f, 10), dr2, 1e-5, 0, "3para dB/dr2");
    expect_near(bk_kerple_3para_dr3(1.0f, 0.5f, 0.8f, 10), dr3, 1e-5, 0, "3para dB/dr3");
    float g[3] = {0, 0, 0};
    bk_kerple_grad(BK_KERPLE_3PARA_LOG, 1.0f, 0.5f, 0.8f, 10, g);
    expect_near(bk_kerple_bias(BK_KERPLE_3PARA_LOG, 1.0f, 0.5f, 0.8f, 10), b, 1e-5, 0, "3para B (dispatch)");
    expect_near(g[0], dr1, 1e-5, 0, "3para dB/dr1 (dispatch)");
    expect_near(g[1], dr2, 1e-5, 0, "3para dB/dr2 (dispatch)");
    expect_near(g[2], dr3, 1e-5, 0, "3para dB/dr3 (dispatch)");
}

/* At d = 0 every bias is 0 and every derivative finite: the d^p ln d terms are their limit 0. */
static void zero_distance_is_finite(void **state)
{
    (void)state;
    const float r[3][3] = {{1.0f, 0.5f, 0.0f}, {0.5f, 1.5f, 0.0f}, {1.0f, 0.5f, 0.8f}};
    const float small[3][3] = {{0.01f, 0.01f, 0.0f}, {0.01f, 0.01f, 0.0f}, {0.01f, 0.01f, 0.01f}};
    for (int v = 0; v < 3; v++)
        for (int s = 0; s < 2; s++) {
            const float *p = s ? small[v] : r[v];
            float g[3] = {NAN, NAN, NAN};
            assert_true(bk_kerple_bias(v, p[0], p[1], p[2], 0) == 0.0f);
            bk_kerple_grad(v, p[0], p[1], p[2], 0, g);
            for (int k = 0; k < bk_kerple_tensor_count(v); k++)
                if (!isfinite(g[k]) || g[k] != 0.0f)
                    fail_msg("variant %d, parameter %d: dB/dr at d = 0 is %g, expected 0", v, k + 1, (double)g[k]);
        }
    /* d = 1: ln d = 0 exactly */
    float g[3];
    bk_kerple_grad(BK_KERPLE_POWER, 0.5f, 1.5f, 0.0f, 1, g);
    assert_true(g[1] == 0.0f);
    assert_true(g[0] == -1.0f);
}

/* Special cases (plugins/kerple/README.md): 3para-log with r3 = 1 is log; power with r2 = 1 is linear (ALiBi). */
static void special_cases(void **state)
{
    (void)state;
    for (int32_t d = 0; d < 5000; d += 37) {
        expect_near(bk_kerple_3para_bias(1.3f, 0.2f, 1.0f, d), bk_kerple_log_bias(1.3f, 0.2f, d), 1e-6, 1e-7,
                    "3para-log with r3 = 1");
        expect_near(bk_kerple_power_bias(0.125f, 1.0f, d), -0.125 * d, 1e-6, 0, "power with r2 = 1");
    }
}

static void projection_bounds(void **state)
{
    (void)state;
    assert_true(bk_kerple_project(-3.0f, 0) == BK_KERPLE_MIN);
    assert_true(bk_kerple_project(0.0f, 1) == BK_KERPLE_MIN);
    assert_true(bk_kerple_project(0.5f, 0) == 0.5f);
    assert_true(bk_kerple_project(7.0f, 0) == 7.0f);
    assert_true(bk_kerple_project(7.0f, 1) == BK_KERPLE_MAX_EXPONENT);
    assert_true(bk_kerple_project(2.0f, 1) == 2.0f);
    assert_true(isnan(bk_kerple_project(NAN, 1))); /* left for the engine's finiteness check */
    assert_true(BK_KERPLE_MIN == 0.01f && BK_KERPLE_MAX_EXPONENT == 2.0f);
}

/* ---- the plugin through the engine --------------------------------------------------------------- */

static const char *const variant_names[3] = {"log", "power", "3para-log"};

/* "[model]...[[term]] plugin = kerple, variant = ..." plus `extra` option lines. */
static void experiment(char *buf, size_t size, int heads, int variant, const char *extra)
{
    snprintf(buf, size, "[model]\nlayers = 2\nheads = %d\ndim = %d\n[[term]]\nplugin = \"kerple\"\nvariant = \"%s\"\n%s",
             heads, heads * 8, variant_names[variant], extra ? extra : "");
}

static void table_through_the_engine(void **state)
{
    (void)state;
    char text[512];
    /* the check-value parameters on every head, as initial values of a learnable term */
    experiment(text, sizeof text, 4, BK_KERPLE_LOG, "r1 = [1.0]\nr2 = [0.5]\n");
    fixture f;
    open_ok(&f, text);
    const bk_term *t = &f.set.terms[0];
    assert_int_equal(t->n_params, 8);
    assert_int_equal(t->n_copies, 1); /* shared across layers by default */
    const float *theta = bk_term_theta(t, 0);
    for (int h = 0; h < 4; h++) {
        assert_true(theta[h] == 1.0f);
        assert_true(theta[4 + h] == 0.5f);
    }
    enum { D = 16384 };
    float *table = malloc(sizeof *table * 4 * D);
    bk_error err;
    assert_int_equal(bk_term_table(t, 1, D, table, &err), BK_OK);
    const int32_t ds[] = {1, 10, 511, 16383};
    const double want[] = {-0.405465, -1.791759, -5.547129, -9.010974};
    for (int h = 0; h < 4; h++) {
        assert_true(table[h * D] == 0.0f);
        for (int i = 0; i < 4; i++)
            expect_near(table[h * D + ds[i]], want[i], 1e-5, 0, "log table");
    }
    free(table);
    close_terms(&f);

    /* one value per head, every variant, against the double implementation */
    const char *per_head[3] = {"r1 = [0.1, 0.7, 1.5]\nr2 = [0.05, 0.5, 3.0]\n",
                               "r1 = [0.1, 0.7, 1.5]\nr2 = [0.3, 1.0, 2.0]\n",
                               "r1 = [0.1, 0.7, 1.5]\nr2 = [0.05, 0.5, 3.0]\nr3 = [0.3, 1.0, 2.0]\n"};
    const double p[3][3][3] = {{{0.1, 0.05, 0}, {0.7, 0.5, 0}, {1.5, 3.0, 0}},
                               {{0.1, 0.3, 0}, {0.7, 1.0, 0}, {1.5, 2.0, 0}},
                               {{0.1, 0.05, 0.3}, {0.7, 0.5, 1.0}, {1.5, 3.0, 2.0}}};
    for (int v = 0; v < 3; v++) {
        experiment(text, sizeof text, 3, v, per_head[v]);
        open_ok(&f, text);
        t = &f.set.terms[0];
        assert_int_equal(t->n_params, 3 * bk_kerple_tensor_count(v));
        float tab[3 * 3000];
        assert_int_equal(bk_term_table(t, 0, 3000, tab, &err), BK_OK);
        for (int h = 0; h < 3; h++)
            for (int d = 0; d < 3000; d++)
                expect_near(tab[h * 3000 + d], ref_bias(v, p[v][h], d), 2e-6, 1e-7, variant_names[v]);
        close_terms(&f);
    }
}

static void parameter_tensors(void **state)
{
    (void)state;
    for (int v = 0; v < 3; v++) {
        char text[512];
        experiment(text, sizeof text, 5, v, NULL);
        fixture f;
        open_ok(&f, text);
        const bk_term *t = &f.set.terms[0];
        biaskit_tensor_info info[4];
        int32_t n = t->plugin->desc->param_tensors(t->instance, info, 4);
        assert_int_equal(n, bk_kerple_tensor_count(v));
        const char *names[3] = {"r1", "r2", "r3"};
        for (int k = 0; k < n; k++) {
            assert_string_equal(info[k].name, names[k]);
            assert_int_equal(info[k].offset, 5 * k);
            assert_int_equal(info[k].rows, 5);
            assert_int_equal(info[k].cols, 1);
        }
        assert_int_equal(t->n_params, 5 * n);
        close_terms(&f);
    }
}

/* Random init in the official code's ranges, projected, deterministic for a seed; given values
 * replace the draws of their tensor only. */
static void initialisation(void **state)
{
    (void)state;
    const double high[3][3] = {{2, 1, 0}, {1, 2, 0}, {2, 1, 2}};
    enum { H = 64 };
    for (int v = 0; v < 3; v++) {
        char text[512];
        experiment(text, sizeof text, H, v, NULL);
        fixture f;
        open_ok(&f, text);
        const bk_term *t = &f.set.terms[0];
        const biaskit_plugin *desc = t->plugin->desc;
        int n = bk_kerple_tensor_count(v);
        const float *engine_theta = bk_term_theta(t, 0);
        float a[3 * H], b[3 * H], c[3 * H];
        biaskit_error pe = {0, ""};
        assert_int_equal(desc->param_init(t->instance, a, 42, &pe), BIASKIT_OK);
        assert_int_equal(desc->param_init(t->instance, b, 42, &pe), BIASKIT_OK);
        assert_int_equal(desc->param_init(t->instance, c, 43, &pe), BIASKIT_OK);
        assert_memory_equal(a, b, sizeof(float) * (size_t)(n * H));
        assert_memory_not_equal(a, c, sizeof(float) * (size_t)(n * H));
        /* the documented order: the SDK's uniform draws, r1 of every head, then r2 (then r3) */
        biaskit_rng rng = biaskit_rng_seeded(42);
        for (int i = 0; i < n * H; i++) {
            float want = (float)(high[v][i / H] * biaskit_rng_uniform(&rng));
            want = want < 0.01f ? 0.01f : want;
            if (a[i] != want)
                fail_msg("%s element %d: init %.9g, want %.9g (the SDK's draws in order)", variant_names[v], i,
                         (double)a[i], (double)want);
        }
        for (int k = 0; k < n; k++) {
            double lo = 1e9, hi = -1e9;
            for (int h = 0; h < H; h++) {
                double x = a[k * H + h], e = engine_theta[k * H + h];
                if (!(x >= BK_KERPLE_MIN && x <= high[v][k]) || !(e >= BK_KERPLE_MIN && e <= high[v][k]))
                    fail_msg("%s r%d head %d: %g / %g outside [0.01, %g]", variant_names[v], k + 1, h, x, e, high[v][k]);
                lo = fmin(lo, x);
                hi = fmax(hi, x);
            }
            /* 64 uniform draws cover their range: the wide ones reach above 1, all spread out */
            if (!(hi - lo > 0.5 * high[v][k]) || (high[v][k] == 2 && !(hi > 1.0)))
                fail_msg("%s r%d: draws span only [%g, %g] of (0, %g]", variant_names[v], k + 1, lo, hi, high[v][k]);
        }
        close_terms(&f);

        /* r1 given: theta's r1 is the value, the other tensors are the same draws as before */
        experiment(text, sizeof text, H, v, "r1 = [0.75]\n");
        open_ok(&f, text);
        t = &f.set.terms[0];
        float g[3 * H];
        assert_int_equal(t->plugin->desc->param_init(t->instance, g, 42, &pe), BIASKIT_OK);
        for (int h = 0; h < H; h++)
            assert_true(g[h] == 0.75f && bk_term_theta(t, 0)[h] == 0.75f);
        assert_memory_equal(g + H, a + H, sizeof(float) * (size_t)((n - 1) * H));
        close_terms(&f);
    }
}

static void projection_through_the_plugin(void **state)
{
    (void)state;
    const float in[3][9] = {{-1.0f, 0.0f, 0.005f, 5.0f, 1e-4f, 100.0f},
                            {-1.0f, 0.005f, 50.0f, 2.5f, 1.5f, -0.2f},
                            {0.005f, 1.0f, 9.0f, 7.0f, 0.001f, 0.3f, 2.0001f, 0.0f, 1.25f}};
    const float want[3][9] = {{0.01f, 0.01f, 0.01f, 5.0f, 0.01f, 100.0f},
                              {0.01f, 0.01f, 50.0f, 2.0f, 1.5f, 0.01f},
                              {0.01f, 1.0f, 9.0f, 7.0f, 0.01f, 0.3f, 2.0f, 0.01f, 1.25f}};
    for (int v = 0; v < 3; v++) {
        char text[512];
        experiment(text, sizeof text, 3, v, NULL);
        fixture f;
        open_ok(&f, text);
        const bk_term *t = &f.set.terms[0];
        int n = 3 * bk_kerple_tensor_count(v);
        float theta[9], again[9];
        memcpy(theta, in[v], sizeof theta);
        t->plugin->desc->param_project(t->instance, theta);
        for (int i = 0; i < n; i++)
            if (theta[i] != want[v][i])
                fail_msg("%s element %d: projected %g to %g, want %g", variant_names[v], i, (double)in[v][i],
                         (double)theta[i], (double)want[v][i]);
        memcpy(again, theta, sizeof again);
        t->plugin->desc->param_project(t->instance, again);
        assert_memory_equal(again, theta, sizeof(float) * (size_t)n); /* idempotent */
        close_terms(&f);
    }
}

/* table_backward against central differences: of the independent double formula (tight) and of the
 * plugin's own fp32 table (looser: a step of 1% and a tolerance for fp32 rounding). d = 0 is included. */
static void gradient_matches_finite_differences(void **state)
{
    (void)state;
    enum { H = 3, D = 400 };
    const char *values[3] = {"r1 = [0.3, 1.1, 1.9]\nr2 = [0.02, 0.4, 2.5]\n",
                             "r1 = [0.3, 0.05, 0.9]\nr2 = [0.2, 1.0, 1.7]\n",
                             "r1 = [0.3, 1.1, 1.9]\nr2 = [0.02, 0.4, 2.5]\nr3 = [0.1, 0.8, 1.9]\n"};
    float g[H * D];
    biaskit_rng rng = biaskit_rng_seeded(7);
    for (int i = 0; i < H * D; i++)
        g[i] = (float)biaskit_rng_normal(&rng);
    for (int v = 0; v < 3; v++) {
        char text[512];
        experiment(text, sizeof text, H, v, values[v]);
        fixture f;
        open_ok(&f, text);
        const bk_term *t = &f.set.terms[0];
        const biaskit_plugin *desc = t->plugin->desc;
        int n = bk_kerple_tensor_count(v);
        float theta[3 * H];
        memcpy(theta, bk_term_theta(t, 0), sizeof(float) * (size_t)(n * H));
        float dtheta[3 * H];
        for (int i = 0; i < n * H; i++)
            dtheta[i] = 0.25f; /* backward adds */
        biaskit_error pe = {0, ""};
        assert_int_equal(desc->table_backward(t->instance, theta, D, g, dtheta, &pe), BIASKIT_OK);
        for (int k = 0; k < n; k++)
            for (int h = 0; h < H; h++) {
                int i = k * H + h;
                double analytic = (double)dtheta[i] - 0.25;
                /* double formula */
                double r[3];
                for (int j = 0; j < n; j++)
                    r[j] = theta[j * H + h];
                double eps = 1e-6 * fmax(1.0, fabs(r[k])), fd = 0.0, scale = 0.0;
                for (int d = 0; d < D; d++) {
                    double rp[3] = {r[0], r[1], r[2]}, rm[3] = {r[0], r[1], r[2]};
                    rp[k] += eps;
                    rm[k] -= eps;
                    double term = (ref_bias(v, rp, d) - ref_bias(v, rm, d)) / (2.0 * eps);
                    fd += g[h * D + d] * term;
                    scale += fabs(g[h * D + d] * term);
                }
                if (!(fabs(analytic - fd) <= 1e-5 * scale + 1e-6))
                    fail_msg("%s r%d head %d: table_backward %.9g, finite differences (double) %.9g", variant_names[v],
                             k + 1, h, analytic, fd);
                /* the plugin's own table */
                float tp[3 * H], tm[3 * H];
                memcpy(tp, theta, sizeof tp);
                memcpy(tm, theta, sizeof tm);
                float step = 1e-2f * theta[i];
                tp[i] += step;
                tm[i] -= step;
                double mag_p, mag_m, width = (double)tp[i] - (double)tm[i];
                double fd32 = (plugin_loss(t, tp, D, g, h, &mag_p) - plugin_loss(t, tm, D, g, h, &mag_m)) / width;
                /* fp32 rounding: at most about one ulp (2^-23 relative) per table entry, each evaluation */
                double noise = (mag_p + mag_m) * 0x1.0p-23 / width;
                if (!(fabs(analytic - fd32) <= 1e-3 * scale + noise + 1e-6))
                    fail_msg("%s r%d head %d: table_backward %.9g, finite differences (plugin table) %.9g",
                             variant_names[v], k + 1, h, analytic, fd32);
            }
        /* deterministic and accumulating: the same bits every call, a second call adds exactly as much */
        float once[3 * H], again[3 * H], twice[3 * H];
        memset(once, 0, sizeof once);
        memset(again, 0, sizeof again);
        assert_int_equal(desc->table_backward(t->instance, theta, D, g, once, &pe), BIASKIT_OK);
        assert_int_equal(desc->table_backward(t->instance, theta, D, g, again, &pe), BIASKIT_OK);
        assert_memory_equal(once, again, sizeof(float) * (size_t)(n * H));
        memcpy(twice, once, sizeof twice);
        assert_int_equal(desc->table_backward(t->instance, theta, D, g, twice, &pe), BIASKIT_OK);
        for (int i = 0; i < n * H; i++)
            assert_true(twice[i] == 2.0f * once[i]);
        close_terms(&f);
    }
}

/* At d = 0 alone (dtable 1 there, 0 elsewhere) the gradient is exactly 0 and finite. */
static void gradient_at_zero_distance(void **state)
{
    (void)state;
    for (int v = 0; v < 3; v++) {
        char text[512];
        experiment(text, sizeof text, 2, v, NULL);
        fixture f;
        open_ok(&f, text);
        const bk_term *t = &f.set.terms[0];
        float g[2 * 4] = {1, 0, 0, 0, 1, 0, 0, 0};
        float dtheta[6] = {0};
        biaskit_error pe = {0, ""};
        assert_int_equal(t->plugin->desc->table_backward(t->instance, bk_term_theta(t, 0), 4, g, dtheta, &pe),
                         BIASKIT_OK);
        for (int i = 0; i < 2 * bk_kerple_tensor_count(v); i++)
            if (dtheta[i] != 0.0f)
                fail_msg("%s: gradient from d = 0 alone is %g at %d, expected 0", variant_names[v], (double)dtheta[i], i);
        close_terms(&f);
    }
}

/* learnable = false: no parameters, the table is the given values (Qin et al.'s Type 1: -2 ln(1+d)). */
static void frozen_values(void **state)
{
    (void)state;
    fixture f;
    bk_error err;
    open_ok(&f, "[model]\nheads = 4\ndim = 32\n[[term]]\nplugin = \"kerple\"\nvariant = \"log\"\nlearnable = false\n"
                "r1 = [2.0]\nr2 = [1.0]\n");
    const bk_term *t = &f.set.terms[0];
    assert_int_equal(t->n_params, 0);
    assert_null(bk_term_theta(t, 0));
    biaskit_tensor_info info[3];
    assert_int_equal(t->plugin->desc->param_tensors(t->instance, info, 3), 0);
    enum { D = 70000 };
    float *table = malloc(sizeof *table * 4 * D);
    assert_int_equal(bk_term_table(t, 0, D, table, &err), BK_OK);
    for (int h = 0; h < 4; h++)
        for (int d = 0; d < D; d += (d < 100 ? 1 : 997))
            expect_near(table[h * D + d], -2.0 * log1p((double)d), 1e-6, 1e-7, "Type 1");
    /* backward of a frozen term adds nothing */
    float dtheta[1] = {3.0f};
    biaskit_error pe = {0, ""};
    assert_int_equal(t->plugin->desc->table_backward(t->instance, NULL, D, table, dtheta, &pe), BIASKIT_OK);
    assert_true(dtheta[0] == 3.0f);
    free(table);
    close_terms(&f);

    /* per-head fixed values of every variant */
    const char *values[3] = {"r1 = [0.5, 2.0]\nr2 = [1.0, 0.25]\n", "r1 = [0.5, 2.0]\nr2 = [1.0, 2.0]\n",
                             "r1 = [0.5, 2.0]\nr2 = [1.0, 0.25]\nr3 = [1.5, 0.5]\n"};
    const double p[3][2][3] = {{{0.5, 1.0, 0}, {2.0, 0.25, 0}},
                               {{0.5, 1.0, 0}, {2.0, 2.0, 0}},
                               {{0.5, 1.0, 1.5}, {2.0, 0.25, 0.5}}};
    for (int v = 0; v < 3; v++) {
        char text[512], extra[256];
        snprintf(extra, sizeof extra, "learnable = false\n%s", values[v]);
        experiment(text, sizeof text, 2, v, extra);
        open_ok(&f, text);
        t = &f.set.terms[0];
        assert_int_equal(t->n_params, 0);
        float tab[2 * 500];
        assert_int_equal(bk_term_table(t, 0, 500, tab, &err), BK_OK);
        for (int h = 0; h < 2; h++)
            for (int d = 0; d < 500; d++)
                expect_near(tab[h * 500 + d], ref_bias(v, p[v][h], d), 2e-6, 1e-7, variant_names[v]);
        close_terms(&f);
    }
}

static void bad_options_are_rejected(void **state)
{
    (void)state;
    const char *head = "[model]\nheads = 4\ndim = 32\n[[term]]\nplugin = \"kerple\"\n";
    const struct {
        const char *options, *needle1, *needle2;
    } cases[] = {
        {"r1 = [1.0, 2.0]\n", "exp.toml:6:6: [[term]] #1 (kerple) option 'r1': ",
         "expected 1 value (every head) or 4 values (one per head), got 2"},
        {"r2 = [1.0, 2.0, 3.0, 4.0, 5.0]\n", "option 'r2'", "expected 1 value (every head) or 4 values (one per head), got 5"},
        {"r1 = []\n", "option 'r1'", "or 4 values (one per head), got 0"},
        {"r2 = [0.5, -0.5, 1, 1]\n", "option 'r2'", "value 1: expected a value in [0.01, inf] (the bounds of parameter 'r2'), got -0.5"},
        {"r1 = [0.0]\n", "option 'r1'", "value 0: expected a value in [0.01, inf] (the bounds of parameter 'r1'), got 0"},
        {"r1 = [0.005]\n", "option 'r1'", "value 0: expected a value in [0.01, inf]"},
        {"r1 = [nan]\n", "option 'r1'", "value 0: expected a finite float, got nan"},
        {"r1 = [inf]\n", "option 'r1'", "value 0: expected a finite float, got inf"},
        {"variant = \"power\"\nr2 = [2.5]\n", "option 'r2'", "value 0: expected a value in [0.01, 2] (the bounds of parameter 'r2'), got 2.5"},
        {"variant = \"power\"\nr2 = [-1]\n", "option 'r2'", "expected a value in [0.01, 2]"},
        {"variant = \"3para-log\"\nr3 = [1, 1, 1, 3]\n", "option 'r3'", "value 3: expected a value in [0.01, 2]"},
        {"learnable = false\nr2 = [1.0]\n", "option 'r1'", "learnable = false needs a fixed value of 'r1' (its init rule is random): expected r1 = [value] (every head) or one value per head"},
        {"learnable = false\nr1 = [1.0]\n", "option 'r2'", "learnable = false needs a fixed value of 'r2'"},
        {"variant = \"3para-log\"\nlearnable = false\nr1 = [1.0]\nr2 = [1.0]\n", "option 'r3'",
         "learnable = false needs a fixed value of 'r3'"},
        {"r3 = [1.0]\n", "option 'r3'", "'r3' is used only with variant \"3para-log\""},
        {"variant = \"power\"\nr3 = [1.0]\n", "option 'r3'", "'r3' is used only with variant \"3para-log\""},
        {"variant = \"linear\"\n", "option 'variant'", "expected one of log, power, 3para-log, got 'linear'"},
        {"r1 = 2.0\n", "option 'r1'", "expected an array of numbers"},
        {"r_1 = [2.0]\n", "unknown key 'r_1'", NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char text[512];
        snprintf(text, sizeof text, "%s%s", head, cases[c].options);
        expect_term_error(text, cases[c].needle1, cases[c].needle2);
    }
}

/* 65536 distances: finite tables (the engine checks every value) and finite gradients, at the
 * largest parameters the clamps allow and at random init. */
static void long_tables_are_finite(void **state)
{
    (void)state;
    enum { H = 4, D = 65536 };
    const char *extremes[3] = {"r1 = [0.01, 50, 1, 1000]\nr2 = [0.01, 1000, 1, 0.01]\n",
                               "r1 = [0.01, 50, 1, 1000]\nr2 = [0.01, 2, 1, 2]\n",
                               "r1 = [0.01, 50, 1, 1000]\nr2 = [0.01, 1000, 1, 0.01]\nr3 = [0.01, 2, 1, 2]\n"};
    float *table = malloc(sizeof *table * H * D), *g = malloc(sizeof *g * H * D);
    for (size_t i = 0; i < (size_t)H * D; i++)
        g[i] = 1.0f;
    for (int v = 0; v < 3; v++)
        for (int which = 0; which < 2; which++) {
            char text[512];
            experiment(text, sizeof text, H, v, which ? extremes[v] : NULL);
            fixture f;
            bk_error err;
            open_ok(&f, text);
            const bk_term *t = &f.set.terms[0];
            if (bk_term_table(t, 0, D, table, &err) != BK_OK)
                fail_msg("%s", err.message);
            for (int h = 0; h < H; h++)
                assert_true(table[h * D + D - 1] < 0.0f);
            float dtheta[3 * H] = {0};
            biaskit_error pe = {0, ""};
            assert_int_equal(t->plugin->desc->table_backward(t->instance, bk_term_theta(t, 0), D, g, dtheta, &pe),
                             BIASKIT_OK);
            for (int i = 0; i < bk_kerple_tensor_count(v) * H; i++)
                if (!isfinite(dtheta[i]))
                    fail_msg("%s: gradient %d is %g at 65536 distances", variant_names[v], i, (double)dtheta[i]);
            close_terms(&f);
        }
    free(table);
    free(g);
}

/* ---- CUDA (a CUDA build on a machine with a GPU; skipped otherwise) ------------------------------ */

static void cuda_matches_host(void **state)
{
    (void)state;
    char device[256];
    if (!bk_device_probe(device, sizeof device)) {
        printf("skipped: no GPU answers here: %s\n", device);
        skip();
    }
    const char *options[] = {
        "variant = \"log\"\n",
        "variant = \"power\"\n",
        "variant = \"3para-log\"\n",
        "variant = \"power\"\nr1 = [0.5, 1, 2, 0.01, 3, 0.2, 7, 1]\nr2 = [0.01, 0.5, 1, 1.5, 2, 2, 0.7, 1]\n",
        "variant = \"log\"\nlearnable = false\nr1 = [2.0]\nr2 = [1.0]\n",
        "variant = \"3para-log\"\nlearnable = false\nr1 = [1.0]\nr2 = [0.5]\nr3 = [0.8]\n",
    };
    for (size_t c = 0; c < sizeof options / sizeof options[0]; c++) {
        char text[512];
        snprintf(text, sizeof text, "[model]\nheads = 8\ndim = 64\n[[term]]\nplugin = \"kerple\"\n%s", options[c]);
        fixture f;
        open_ok(&f, text);
        compare_cuda(&f.set.terms[0], c == 0 ? 300000 : 4097); /* 300000: more than one grid-stride sweep */
        close_terms(&f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(log_check_values),
        cmocka_unit_test(power_check_values),
        cmocka_unit_test(three_para_log_check_values),
        cmocka_unit_test(zero_distance_is_finite),
        cmocka_unit_test(special_cases),
        cmocka_unit_test(projection_bounds),
        cmocka_unit_test(table_through_the_engine),
        cmocka_unit_test(parameter_tensors),
        cmocka_unit_test(initialisation),
        cmocka_unit_test(projection_through_the_plugin),
        cmocka_unit_test(gradient_matches_finite_differences),
        cmocka_unit_test(gradient_at_zero_distance),
        cmocka_unit_test(frozen_values),
        cmocka_unit_test(bad_options_are_rejected),
        cmocka_unit_test(long_tables_are_finite),
        cmocka_unit_test(cuda_matches_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
