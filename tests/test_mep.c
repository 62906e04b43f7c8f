/* The MEP plugin through the engine: its tables against the paper's formulas written out in double
 * (parameter-free for 8 and 12 heads, parameterised), the long-range limits of plugins/mep/README.md, custom
 * mixtures, table_backward against central finite differences, init / clamps / tensors, rejected
 * options and tables at 65536 distances. */
#include "term_fixture.h"

#include "bias/terms.h"
#include "cuda/device.h"

#include "../plugins/mep/mep_math.h"

#include <biaskit/random.h>

#include <math.h>
#include <stdlib.h>

static void expect_near(double got, double want, double rel, double abs_tol, const char *what, int h, int d)
{
    if (!(fabs(got - want) <= rel * fabs(want) + abs_tol))
        fail_msg("%s, head %d, d = %d: got %.9g, want %.9g", what, h, d, got, want);
}

/* "[model] ... [[term]] plugin = mep" plus option lines. */
static void experiment(char *buf, size_t size, int heads, const char *options)
{
    snprintf(buf, size, "[model]\nlayers = 3\nheads = %d\ndim = %d\n[[term]]\nplugin = \"mep\"\n%s", heads, heads * 8,
             options ? options : "");
}

/* ALiBi's slopes written out here (get_slopes; plugins/alibi/README.md), not taken from the plugin. */
static double slope_of(int heads, int h)
{
    if (heads == 8)
        return ldexp(1.0, -(h + 1));
    if (heads == 12)
        return h < 8 ? ldexp(1.0, -(h + 1)) : pow(2.0, -0.5 - (h - 8));
    fail_msg("no reference slopes for %d heads", heads);
    return 0.0;
}

/* log(sum_k alpha_k K_k(d)) in double, max-subtracted: type 0 exp, 1 gauss, 2 kerple-log. */
static double ref_mix(int n, const int *type, const double *scale, const double *alpha, double s, double r1,
                      double r2, double d)
{
    double z[8], m = -INFINITY, sum = 0.0;
    for (int k = 0; k < n; k++) {
        double b = type[k] == 0 ? -scale[k] * s * d : type[k] == 1 ? -scale[k] * s * d * d : -r1 * log1p(r2 * d);
        z[k] = log(alpha[k]) + b;
        m = fmax(m, z[k]);
    }
    for (int k = 0; k < n; k++)
        sum += exp(z[k] - m);
    return m + log(sum);
}

static float *term_table(const bk_term *t, int32_t D)
{
    float *tab = malloc(sizeof *tab * (size_t)t->n_heads * (size_t)D);
    bk_error err;
    if (bk_term_table(t, 0, D, tab, &err) != BK_OK)
        fail_msg("%s", err.message);
    return tab;
}

/* ---- the paper's two variants ------------------------------------------------------------------- */

static void parameter_free_matches_the_formula(void **state)
{
    (void)state;
    const int head_counts[2] = {8, 12};
    const int32_t ds[] = {0, 1, 2, 3, 5, 10, 37, 100, 511, 1000};
    enum { D = 1001 };
    for (int c = 0; c < 2; c++) {
        int H = head_counts[c];
        char text[512];
        experiment(text, sizeof text, H, NULL); /* variant = "free" is the default */
        fixture f;
        open_ok(&f, text);
        const bk_term *t = &f.set.terms[0];
        assert_int_equal(t->n_params, 0);
        assert_null(bk_term_theta(t, 0));
        float *tab = term_table(t, D);
        for (int h = 0; h < H; h++) {
            double s = slope_of(H, h);
            for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
                double d = ds[i];
                double want = log((exp(-s * d) + exp(-s * d / 2) + exp(-s * d * d)) / 3.0);
                expect_near(tab[h * D + ds[i]], want, 2e-6, 2e-7, "parameter-free", h, ds[i]);
            }
        }
        free(tab);
        close_terms(&f);
    }
}

static void parameterised_matches_the_formula(void **state)
{
    (void)state;
    enum { H = 12, D = 1001 };
    char text[512];
    experiment(text, sizeof text, H, "variant = \"param\"\n");
    fixture f;
    open_ok(&f, text);
    const bk_term *t = &f.set.terms[0];
    assert_int_equal(t->n_params, 2 * H);
    assert_int_equal(t->n_copies, 1); /* shared across layers */
    float *theta = bk_term_theta(t, 0);
    for (int h = 0; h < H; h++) {
        theta[h] = 0.05f + 0.15f * (float)h;       /* r1 */
        theta[H + h] = 0.02f + 0.3f * (float)h;    /* r2 */
    }
    float *tab = term_table(t, D);
    for (int h = 0; h < H; h++) {
        double s = slope_of(H, h), r1 = theta[h], r2 = theta[H + h];
        for (int d = 0; d < D; d += (d < 20 ? 1 : 49)) {
            double want = log(0.5 * pow(1.0 + r2 * d, -r1) + 0.5 * exp(-s * (double)d * d));
            expect_near(tab[h * D + d], want, 2e-6, 2e-7, "parameterised", h, d);
        }
    }
    free(tab);
    close_terms(&f);
}

/* plugins/mep/README.md: far away the parameter-free bias is ln(1/3) - s d / 2 (ALiBi at half slope), the
 * parameterised one KERPLE-log - ln 2. */
static void long_range_limits(void **state)
{
    (void)state;
    enum { D = 65536 };
    const int head_counts[2] = {8, 12};
    for (int c = 0; c < 2; c++) {
        int H = head_counts[c];
        char text[512];
        experiment(text, sizeof text, H, "variant = \"free\"\n");
        fixture f;
        open_ok(&f, text);
        float *tab = term_table(&f.set.terms[0], D);
        for (int h = 0; h < H; h++) {
            double s = slope_of(H, h);
            /* exp(-s d / 2) below 1e-17 relative to the limit's terms from d = 80 / s on */
            for (int d = (int)ceil(80.0 / s); d < D; d += 1777) {
                double limit = log(1.0 / 3.0) - 0.5 * s * d;
                expect_near(tab[h * D + d], limit, 1e-6, 4e-6, "free, long range", h, d);
            }
            double limit = log(1.0 / 3.0) - 0.5 * s * (D - 1);
            expect_near(tab[h * D + D - 1], limit, 1e-6, 4e-6, "free, d = 65535", h, D - 1);
            /* and short of the limit it is above it (two more kernels add mass) */
            assert_true(tab[h * D + 1] > log(1.0 / 3.0) - 0.5 * s);
        }
        free(tab);
        close_terms(&f);
    }

    enum { H = 12 };
    char text[512];
    experiment(text, sizeof text, H, "variant = \"param\"\n");
    fixture f;
    open_ok(&f, text);
    const bk_term *t = &f.set.terms[0];
    const float *theta = bk_term_theta(t, 0); /* the random init */
    float *tab = term_table(t, D);
    for (int h = 0; h < H; h++)
        for (int d = 2000; d < D; d += 2111) {
            double klog = -(double)theta[h] * log1p((double)theta[H + h] * d);
            expect_near(tab[h * D + d], klog - log(2.0), 1e-6, 2e-6, "param, long range", h, d);
        }
    free(tab);
    close_terms(&f);
}

/* Every kernel is 1 at d = 0 and the weights sum to 1: B(0) = 0, whatever the mixture. */
static void zero_distance_is_zero(void **state)
{
    (void)state;
    const char *options[] = {
        "",
        "variant = \"param\"\n",
        "kernels = [\"exp\", \"gauss\"]\nweights = [5, 0.1]\n",
        "variant = \"param\"\nkernels = [\"gauss\", \"kerple-log\", \"exp\"]\nweights = [1, 7, 0.5]\n",
    };
    for (size_t c = 0; c < sizeof options / sizeof options[0]; c++) {
        char text[512];
        experiment(text, sizeof text, 5, options[c]);
        fixture f;
        open_ok(&f, text);
        float *tab = term_table(&f.set.terms[0], 3);
        for (int h = 0; h < 5; h++)
            expect_near(tab[h * 3], 0.0, 0, 3e-7, options[c], h, 0);
        free(tab);
        close_terms(&f);
    }
}

static void custom_mixtures(void **state)
{
    (void)state;
    enum { H = 8, D = 600 };
    /* kernels, weights (rescaled) and slope scales */
    {
        char text[512];
        experiment(text, sizeof text, H, "kernels = [\"exp\", \"gauss\"]\nweights = [3, 1]\nslope_scales = [2, 0.5]\n");
        fixture f;
        open_ok(&f, text);
        float *tab = term_table(&f.set.terms[0], D);
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d += 7) {
                double s = slope_of(H, h);
                double want = log(0.75 * exp(-2.0 * s * d) + 0.25 * exp(-0.5 * s * (double)d * d));
                expect_near(tab[h * D + d], want, 2e-6, 2e-7, "exp + gauss, weights 3:1", h, d);
            }
        free(tab);
        close_terms(&f);
    }
    /* one kernel, or a kernel of weight 0: plain ALiBi, no -inf from log 0 */
    const char *alibi_like[] = {"kernels = [\"exp\"]\n", "kernels = [\"exp\", \"gauss\"]\nweights = [1, 0]\n",
                                "kernels = [\"gauss\", \"exp\"]\nweights = [0, 2]\nslope_scales = [1, 1]\n"};
    for (size_t c = 0; c < 3; c++) {
        char text[512];
        experiment(text, sizeof text, H, alibi_like[c]);
        fixture f;
        open_ok(&f, text);
        float *tab = term_table(&f.set.terms[0], D);
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++)
                expect_near(tab[h * D + d], -slope_of(H, h) * d, 1e-6, 1e-7, alibi_like[c], h, d);
        free(tab);
        close_terms(&f);
    }
    /* explicit kernels take slope scale 1 each unless given */
    {
        char text[512];
        experiment(text, sizeof text, H, "kernels = [\"exp\", \"exp\", \"gauss\"]\n");
        fixture f;
        open_ok(&f, text);
        float *tab = term_table(&f.set.terms[0], D);
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d += 11) {
                double s = slope_of(H, h);
                double want = log((2.0 * exp(-s * d) + exp(-s * (double)d * d)) / 3.0);
                expect_near(tab[h * D + d], want, 2e-6, 2e-7, "exp, exp, gauss at scale 1", h, d);
            }
        free(tab);
        close_terms(&f);
    }
    /* a lone kerple-log kernel is the kerple plugin's log variant */
    {
        fixture f;
        open_ok(&f, "[model]\nheads = 8\ndim = 64\n"
                    "[[term]]\nplugin = \"mep\"\nvariant = \"param\"\nkernels = [\"kerple-log\"]\n"
                    "[[term]]\nplugin = \"kerple\"\nr1 = [0.1, 0.3, 0.5, 0.7, 0.9, 1.1, 1.3, 1.5]\n"
                    "r2 = [0.01, 0.2, 0.4, 0.6, 0.8, 1.0, 5.0, 50.0]\n");
        memcpy(bk_term_theta(&f.set.terms[0], 0), bk_term_theta(&f.set.terms[1], 0), sizeof(float) * 2 * H);
        float *a = term_table(&f.set.terms[0], D), *b = term_table(&f.set.terms[1], D);
        for (int i = 0; i < H * D; i++)
            expect_near(a[i], b[i], 1e-6, 1e-7, "lone kerple-log vs kerple", i / D, i % D);
        free(a);
        free(b);
        close_terms(&f);
    }
}

/* ---- gradients ---------------------------------------------------------------------------------- */

/* table_backward against central differences of the double formula and of the plugin's own table,
 * for the paper's parameterised variant and a custom three-kernel mixture (12 heads: the interleaved
 * slopes). */
static void gradient_matches_finite_differences(void **state)
{
    (void)state;
    enum { H = 12, D = 300 };
    const struct {
        const char *options;
        int n, type[3];
        double scale[3], alpha[3];
    } cases[] = {
        {"variant = \"param\"\n", 2, {2, 1, 0}, {1, 1, 0}, {0.5, 0.5, 0}},
        {"variant = \"param\"\nkernels = [\"exp\", \"kerple-log\", \"gauss\"]\nweights = [1, 2, 1]\n"
         "slope_scales = [0.5, 7, 0.01]\n",
         3, {0, 2, 1}, {0.5, 0, 0.01}, {0.25, 0.5, 0.25}},
    };
    float *g = malloc(sizeof *g * H * D);
    biaskit_rng rng = biaskit_rng_seeded(11);
    for (int i = 0; i < H * D; i++)
        g[i] = (float)biaskit_rng_normal(&rng);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char text[512];
        experiment(text, sizeof text, H, cases[c].options);
        fixture f;
        open_ok(&f, text);
        const bk_term *t = &f.set.terms[0];
        const biaskit_plugin *desc = t->plugin->desc;
        float *theta = bk_term_theta(t, 0);
        for (int h = 0; h < H; h++) { /* spread: some heads where the kernels cross at short range */
            theta[h] = 0.1f + 0.25f * (float)h;
            theta[H + h] = 0.05f + 0.4f * (float)(H - h);
        }
        float dtheta[2 * H];
        for (int i = 0; i < 2 * H; i++)
            dtheta[i] = -0.5f; /* backward adds */
        biaskit_error pe = {0, ""};
        assert_int_equal(desc->table_backward(t->instance, theta, D, g, dtheta, &pe), BIASKIT_OK);
        for (int k = 0; k < 2; k++)
            for (int h = 0; h < H; h++) {
                int i = k * H + h;
                double analytic = (double)dtheta[i] + 0.5;
                double s = slope_of(H, h), r[2] = {theta[h], theta[H + h]};
                double eps = 1e-6 * fmax(1.0, r[k]), fd = 0.0, scale = 0.0;
                for (int d = 0; d < D; d++) {
                    double rp[2] = {r[0], r[1]}, rm[2] = {r[0], r[1]};
                    rp[k] += eps;
                    rm[k] -= eps;
                    double term = (ref_mix(cases[c].n, cases[c].type, cases[c].scale, cases[c].alpha, s, rp[0], rp[1], d) -
                                   ref_mix(cases[c].n, cases[c].type, cases[c].scale, cases[c].alpha, s, rm[0], rm[1], d)) /
                                  (2.0 * eps);
                    fd += g[h * D + d] * term;
                    scale += fabs(g[h * D + d] * term);
                }
                if (!(fabs(analytic - fd) <= 1e-5 * scale + 1e-6))
                    fail_msg("case %zu r%d head %d: table_backward %.9g, finite differences (double) %.9g", c, k + 1, h,
                             analytic, fd);
                float tp[2 * H], tm[2 * H];
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
                    fail_msg("case %zu r%d head %d: table_backward %.9g, finite differences (plugin table) %.9g", c,
                             k + 1, h, analytic, fd32);
            }
        /* the same bits every call; a second call adds exactly as much */
        float once[2 * H] = {0}, again[2 * H] = {0}, twice[2 * H];
        assert_int_equal(desc->table_backward(t->instance, theta, D, g, once, &pe), BIASKIT_OK);
        assert_int_equal(desc->table_backward(t->instance, theta, D, g, again, &pe), BIASKIT_OK);
        assert_memory_equal(once, again, sizeof once);
        memcpy(twice, once, sizeof twice);
        assert_int_equal(desc->table_backward(t->instance, theta, D, g, twice, &pe), BIASKIT_OK);
        for (int i = 0; i < 2 * H; i++)
            assert_true(twice[i] == 2.0f * once[i]);
        close_terms(&f);
    }
    free(g);
}

/* A kerple-log kernel of weight 0 keeps its parameters but gets no gradient; the free variant has
 * nothing to differentiate; d = 0 alone gives gradient 0. */
static void gradient_edge_cases(void **state)
{
    (void)state;
    enum { H = 4, D = 50 };
    float g[H * D];
    for (int i = 0; i < H * D; i++)
        g[i] = 1.0f;
    char text[512];
    experiment(text, sizeof text, H, "variant = \"param\"\nkernels = [\"kerple-log\", \"gauss\"]\nweights = [0, 1]\n");
    fixture f;
    open_ok(&f, text);
    const bk_term *t = &f.set.terms[0];
    assert_int_equal(t->n_params, 2 * H);
    float dtheta[2 * H] = {0};
    biaskit_error pe = {0, ""};
    assert_int_equal(t->plugin->desc->table_backward(t->instance, bk_term_theta(t, 0), D, g, dtheta, &pe), BIASKIT_OK);
    for (int i = 0; i < 2 * H; i++)
        assert_true(dtheta[i] == 0.0f);
    float *tab = term_table(t, D);
    for (int h = 0; h < H; h++)
        for (int d = 0; d < D; d++) /* gauss alone: get_slopes(4) = 1/4, 1/16, 1/64, 1/256 */
            expect_near(tab[h * D + d], -ldexp(1.0, -2 * (h + 1)) * d * d, 1e-6, 1e-7, "gauss alone", h, d);
    free(tab);
    close_terms(&f);

    experiment(text, sizeof text, H, "variant = \"param\"\n");
    open_ok(&f, text);
    t = &f.set.terms[0];
    float at_zero[H * D] = {0};
    for (int h = 0; h < H; h++)
        at_zero[h * D] = 1.0f;
    memset(dtheta, 0, sizeof dtheta);
    assert_int_equal(t->plugin->desc->table_backward(t->instance, bk_term_theta(t, 0), D, at_zero, dtheta, &pe),
                     BIASKIT_OK);
    for (int i = 0; i < 2 * H; i++)
        assert_true(dtheta[i] == 0.0f);
    close_terms(&f);

    experiment(text, sizeof text, H, NULL);
    open_ok(&f, text);
    t = &f.set.terms[0];
    float untouched[1] = {4.0f};
    assert_int_equal(t->plugin->desc->table_backward(t->instance, NULL, D, g, untouched, &pe), BIASKIT_OK);
    assert_true(untouched[0] == 4.0f);
    close_terms(&f);
}

/* ---- parameters ----------------------------------------------------------------------------------- */

static void parameters_init_project_tensors(void **state)
{
    (void)state;
    enum { H = 64 };
    char text[512];
    experiment(text, sizeof text, H, "variant = \"param\"\n");
    fixture f;
    open_ok(&f, text);
    const bk_term *t = &f.set.terms[0];
    const biaskit_plugin *desc = t->plugin->desc;
    biaskit_tensor_info info[3];
    assert_int_equal(desc->param_tensors(t->instance, info, 3), 2);
    assert_string_equal(info[0].name, "r1");
    assert_string_equal(info[1].name, "r2");
    assert_int_equal(info[0].offset, 0);
    assert_int_equal(info[1].offset, H);
    assert_int_equal(info[1].rows, H);

    /* KERPLE-log's init: r1 ~ U(0,2), r2 ~ U(0,1), projected; deterministic for a seed */
    float a[2 * H], b[2 * H], c[2 * H];
    biaskit_error pe = {0, ""};
    assert_int_equal(desc->param_init(t->instance, a, 5, &pe), BIASKIT_OK);
    assert_int_equal(desc->param_init(t->instance, b, 5, &pe), BIASKIT_OK);
    assert_int_equal(desc->param_init(t->instance, c, 6, &pe), BIASKIT_OK);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    biaskit_rng rng = biaskit_rng_seeded(5); /* the SDK's draws: r1 of every head, then r2 */
    for (int i = 0; i < 2 * H; i++) {
        float want = (float)((i < H ? 2.0 : 1.0) * biaskit_rng_uniform(&rng));
        assert_true(a[i] == (want < 0.01f ? 0.01f : want));
    }
    double max1 = 0, max2 = 0;
    for (int h = 0; h < H; h++) {
        assert_true(a[h] >= 0.01f && a[h] <= 2.0f);
        assert_true(a[H + h] >= 0.01f && a[H + h] <= 1.0f);
        max1 = fmax(max1, a[h]);
        max2 = fmax(max2, a[H + h]);
    }
    assert_true(max1 > 1.0 && max2 > 0.5); /* 64 draws reach the upper halves */

    /* clamps: >= 0.01 for both, no upper bound (the log kernel's); idempotent */
    float theta[2 * H];
    for (int i = 0; i < 2 * H; i++)
        theta[i] = (float)(i % 4 == 0 ? -1.0 : i % 4 == 1 ? 0.001 : i % 4 == 2 ? 5.0 : 0.01);
    desc->param_project(t->instance, theta);
    for (int i = 0; i < 2 * H; i++)
        assert_true(theta[i] == (i % 4 == 2 ? 5.0f : 0.01f));
    float again[2 * H];
    memcpy(again, theta, sizeof again);
    desc->param_project(t->instance, again);
    assert_memory_equal(again, theta, sizeof theta);
    close_terms(&f);

    experiment(text, sizeof text, H, "variant = \"free\"\n");
    open_ok(&f, text);
    t = &f.set.terms[0];
    assert_int_equal(t->n_params, 0);
    assert_int_equal(t->plugin->desc->param_tensors(t->instance, info, 3), 0);
    close_terms(&f);
}

/* ---- options ---------------------------------------------------------------------------------- */

static void bad_options_are_rejected(void **state)
{
    (void)state;
    const char *head = "[model]\nheads = 4\ndim = 32\n[[term]]\nplugin = \"mep\"\n";
    const struct {
        const char *options, *needle1, *needle2;
    } cases[] = {
        {"weights = [1, 2]\n", "exp.toml:6:11: [[term]] #1 (mep) option 'weights': ",
         "expected 3 values (one per kernel of [exp, exp, gauss]), got 2"},
        {"variant = \"param\"\nweights = [1, 2, 3]\n", "option 'weights'",
         "expected 2 values (one per kernel of [kerple-log, gauss]), got 3"},
        {"weights = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n", "option 'weights'", "expected 3 values (one per kernel"},
        {"weights = [1, -0.5, 1]\n", "option 'weights'", "value 1 (exp kernel): expected a finite weight >= 0, got -0.5"},
        {"weights = [0, 0, 0]\n", "option 'weights'", "expected at least one weight > 0"},
        {"weights = [1, nan, 1]\n", "option 'weights'", "value 1: expected a finite float, got nan"}, /* the host's check */
        {"slope_scales = [1, 0.5]\n", "option 'slope_scales'", "expected 3 values (one per kernel of [exp, exp, gauss]), got 2"},
        {"slope_scales = [1, 0.5, -1]\n", "option 'slope_scales'", "value 2 (gauss kernel): expected a finite scale >= 0, got -1"},
        {"slope_scales = [1, inf, 1]\n", "option 'slope_scales'", "value 1: expected a finite float, got inf"},
        {"kernels = [\"exp\", \"cosine\"]\n", "option 'kernels'", "kernel 1: expected one of exp, gauss, kerple-log, got 'cosine'"},
        {"kernels = []\n", "option 'kernels'", "expected 1 to 8 kernels, got 0"},
        {"kernels = [\"exp\", \"exp\", \"exp\", \"exp\", \"exp\", \"exp\", \"exp\", \"exp\", \"exp\"]\n", "option 'kernels'",
         "expected 1 to 8 kernels, got 9"},
        {"variant = \"param\"\nkernels = [\"kerple-log\", \"gauss\", \"kerple-log\"]\n", "option 'kernels'",
         "expected at most one kerple-log kernel"},
        {"kernels = [\"kerple-log\", \"gauss\"]\n", "option 'kernels'",
         "variant \"free\" is parameter-free: expected exp and gauss kernels only"},
        {"variant = \"param\"\nkernels = [\"exp\", \"gauss\"]\n", "option 'kernels'",
         "variant \"param\" expects one kerple-log kernel"},
        {"variant = \"mixed\"\n", "option 'variant'", "expected one of free, param, got 'mixed'"},
        {"weights = 1\n", "option 'weights'", "expected an array of numbers"},
        {"kernels = [\"exp\", 2]\n", "option 'kernels'", "element 1: expected a string"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char text[512];
        snprintf(text, sizeof text, "%s%s", head, cases[c].options);
        expect_term_error(text, cases[c].needle1, cases[c].needle2);
    }
}

/* 65536 distances: every value finite (checked by the engine) and decreasing far out; gradients finite. */
static void long_tables_are_finite(void **state)
{
    (void)state;
    enum { H = 12, D = 65536 };
    const char *options[] = {"", "variant = \"param\"\n",
                             "variant = \"param\"\nkernels = [\"exp\", \"kerple-log\", \"gauss\"]\nslope_scales = [100, 1, 100]\n"};
    float *g = malloc(sizeof *g * H * D);
    for (size_t i = 0; i < (size_t)H * D; i++)
        g[i] = 1.0f;
    for (size_t c = 0; c < sizeof options / sizeof options[0]; c++)
        for (int extreme = 0; extreme < 2; extreme++) {
            char text[512];
            experiment(text, sizeof text, H, options[c]);
            fixture f;
            open_ok(&f, text);
            const bk_term *t = &f.set.terms[0];
            float *theta = bk_term_theta(t, 0);
            if (extreme && theta)
                for (int h = 0; h < H; h++) {
                    theta[h] = h % 2 ? 1000.0f : 0.01f;
                    theta[H + h] = h % 3 ? 1000.0f : 0.01f;
                }
            float *tab = term_table(t, D);
            for (int h = 0; h < H; h++)
                assert_true(tab[h * D + D - 1] < tab[h * D + D / 2]);
            if (theta) {
                float dtheta[2 * H] = {0};
                biaskit_error pe = {0, ""};
                assert_int_equal(t->plugin->desc->table_backward(t->instance, theta, D, g, dtheta, &pe), BIASKIT_OK);
                for (int i = 0; i < 2 * H; i++)
                    if (!isfinite(dtheta[i]))
                        fail_msg("case %zu: gradient %d is %g", c, i, (double)dtheta[i]);
            }
            free(tab);
            close_terms(&f);
        }
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
        "variant = \"free\"\n",
        "variant = \"param\"\n",
        "variant = \"param\"\nkernels = [\"exp\", \"kerple-log\", \"gauss\"]\nweights = [1, 2, 0.5]\n"
        "slope_scales = [0.5, 1, 0.01]\n",
        "kernels = [\"gauss\", \"exp\"]\nweights = [0, 1]\n",
    };
    for (size_t c = 0; c < sizeof options / sizeof options[0]; c++) {
        char text[512];
        snprintf(text, sizeof text, "[model]\nheads = 12\ndim = 96\n[[term]]\nplugin = \"mep\"\n%s", options[c]);
        fixture f;
        open_ok(&f, text);
        compare_cuda(&f.set.terms[0], c == 1 ? 300000 : 4097); /* 300000: more than one grid-stride sweep */
        close_terms(&f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parameter_free_matches_the_formula),
        cmocka_unit_test(parameterised_matches_the_formula),
        cmocka_unit_test(long_range_limits),
        cmocka_unit_test(zero_distance_is_zero),
        cmocka_unit_test(custom_mixtures),
        cmocka_unit_test(gradient_matches_finite_differences),
        cmocka_unit_test(gradient_edge_cases),
        cmocka_unit_test(parameters_init_project_tensors),
        cmocka_unit_test(bad_options_are_rejected),
        cmocka_unit_test(long_tables_are_finite),
        cmocka_unit_test(cuda_matches_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
