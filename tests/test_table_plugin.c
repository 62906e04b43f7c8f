/* Formula-first plugins (<biaskit/table_plugin.h>): KERPLE-log written with the header
 * (tests/plugins/kerple_tp.c) against the built-in kerple plugin's variant "log" -- tables, gradients,
 * projection, initialisation and tensors bit for bit -- its frozen form and its option errors; and
 * tp_scalar (tests/plugins/tp_scalar.c) for a scalar parameter, the ALiBi and constant init rules and a
 * constant. The built-in alibi, qin and kerple plugins, written with the header, against loops over
 * their math headers that do what their hand-written descriptors did (the same expressions, rounding,
 * draws and accumulation order): bit for bit. The CUDA variants against the host ones when a GPU
 * answers. */
#include "term_fixture.h"

#include "bias/terms.h"
#include "cuda/device.h"

#include "../plugins/alibi/alibi_math.h"
#include "../plugins/kerple/kerple_math.h"
#include "../plugins/qin/qin_math.h"

#include <biaskit/random.h>
#include <biaskit/table_plugin.h>

#include <math.h>
#include <stdlib.h>

/* "[model] heads = H [[term]] plugin = ..." plus option lines. */
static void experiment(char *buf, size_t size, int heads, const char *plugin, const char *extra)
{
    snprintf(buf, size, "[model]\nlayers = 2\nheads = %d\ndim = %d\n[[term]]\nplugin = \"%s\"\n%s", heads, heads * 8,
             plugin, extra ? extra : "");
}

/* The built-in kerple (variant "log") and kerple_tp with the same extra option lines. */
static void open_pair(fixture *builtin, fixture *tp, int heads, const char *extra)
{
    char text[1024], lines[768];
    snprintf(lines, sizeof lines, "variant = \"log\"\n%s", extra ? extra : "");
    experiment(text, sizeof text, heads, "kerple", lines);
    open_ok(builtin, text);
    experiment(text, sizeof text, heads, "kerple_tp", extra);
    open_ok(tp, text);
}

static void fill_random(float *x, size_t n, uint64_t seed, double scale)
{
    biaskit_rng rng = biaskit_rng_seeded(seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * biaskit_rng_normal(&rng));
}

/* Tables and gradients of the two terms at D distances, for parameters theta: memcmp. dtheta starts
 * non-zero in both, so "adds" is compared too. */
static void expect_same_table_and_gradient(const bk_term *a, const bk_term *b, const float *theta, int32_t D)
{
    const biaskit_plugin *da = a->plugin->desc, *db = b->plugin->desc;
    size_t n = (size_t)a->n_heads * (size_t)D, P = (size_t)a->n_params;
    float *ta = malloc(sizeof *ta * n), *tb = malloc(sizeof *tb * n), *g = malloc(sizeof *g * n);
    biaskit_error pe = {0, ""};
    assert_int_equal(da->table(a->instance, theta, D, ta, &pe), BIASKIT_OK);
    assert_int_equal(db->table(b->instance, theta, D, tb, &pe), BIASKIT_OK);
    for (size_t i = 0; i < n; i++)
        if (memcmp(&ta[i], &tb[i], sizeof(float)) != 0)
            fail_msg("D = %d, head %zu, d = %zu: kerple %.9g, kerple_tp %.9g", (int)D, i / (size_t)D, i % (size_t)D,
                     (double)ta[i], (double)tb[i]);
    if (P) {
        fill_random(g, n, 11u + (uint64_t)D, 1.0);
        float *ga = malloc(sizeof *ga * P), *gb = malloc(sizeof *gb * P);
        fill_random(ga, P, 5, 0.1);
        memcpy(gb, ga, sizeof *ga * P);
        assert_int_equal(da->table_backward(a->instance, theta, D, g, ga, &pe), BIASKIT_OK);
        assert_int_equal(db->table_backward(b->instance, theta, D, g, gb, &pe), BIASKIT_OK);
        for (size_t i = 0; i < P; i++)
            if (memcmp(&ga[i], &gb[i], sizeof(float)) != 0)
                fail_msg("D = %d, gradient %zu: kerple %.9g, kerple_tp %.9g", (int)D, i, (double)ga[i], (double)gb[i]);
        free(ga), free(gb);
    }
    free(ta), free(tb), free(g);
}

static const int32_t lengths[] = {1, 2, 7, 128, 1000, 16384, 70000};

/* Given parameters (per head), several lengths; then random projected parameters. */
static void kerple_tables_and_gradients_bit_for_bit(void **state)
{
    (void)state;
    fixture a, b;
    open_pair(&a, &b, 5, "r1 = [0.1, 0.7, 1.5, 2.0, 0.01]\nr2 = [0.05, 0.5, 3.0, 0.01, 1.0]\n");
    const bk_term *ta = &a.set.terms[0], *tb = &b.set.terms[0];
    assert_int_equal(ta->n_params, 10);
    assert_int_equal(tb->n_params, 10);
    /* the engine's initial theta: the given values, projected (the same for both) */
    assert_memory_equal(bk_term_theta(ta, 0), bk_term_theta(tb, 0), sizeof(float) * 10);
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++)
        expect_same_table_and_gradient(ta, tb, bk_term_theta(ta, 0), lengths[i]);
    /* random parameters, projected by the built-in plugin (the projection is compared below) */
    float theta[10];
    for (uint64_t s = 1; s <= 4; s++) {
        fill_random(theta, 10, s, 2.0);
        ta->plugin->desc->param_project(ta->instance, theta);
        expect_same_table_and_gradient(ta, tb, theta, 300 + (int32_t)s);
    }
    close_terms(&a);
    close_terms(&b);
}

/* The same rules (U(0,2), U(0,1), one draw per element in parameter-then-head order, then >= 0.01):
 * the same theta for the same seed; a given r1 leaves the draws of r2 alone in both. */
static void kerple_init_projection_and_tensors(void **state)
{
    (void)state;
    const char *extras[] = {NULL, "r1 = [0.75]\n"};
    for (int e = 0; e < 2; e++) {
        for (int heads = 1; heads <= 64; heads *= 4) {
            fixture a, b;
            open_pair(&a, &b, heads, extras[e]);
            const bk_term *ta = &a.set.terms[0], *tb = &b.set.terms[0];
            const biaskit_plugin *da = ta->plugin->desc, *db = tb->plugin->desc;
            size_t P = (size_t)(2 * heads);
            assert_int_equal(da->param_count(ta->instance), (int64_t)P);
            assert_int_equal(db->param_count(tb->instance), (int64_t)P);
            assert_memory_equal(bk_term_theta(ta, 0), bk_term_theta(tb, 0), sizeof(float) * P);
            float x[128], y[128];
            biaskit_error pe = {0, ""};
            for (uint64_t seed = 0; seed < 5; seed++) {
                assert_int_equal(da->param_init(ta->instance, x, seed * 977 + 1, &pe), BIASKIT_OK);
                assert_int_equal(db->param_init(tb->instance, y, seed * 977 + 1, &pe), BIASKIT_OK);
                assert_memory_equal(x, y, sizeof(float) * P);
            }
            /* projection: wild values, NaN kept, idempotent */
            fill_random(x, P, 9, 3.0);
            x[0] = NAN;
            memcpy(y, x, sizeof(float) * P);
            da->param_project(ta->instance, x);
            db->param_project(tb->instance, y);
            assert_memory_equal(x, y, sizeof(float) * P);
            assert_true(isnan(y[0]));
            db->param_project(tb->instance, y);
            assert_memory_equal(x, y, sizeof(float) * P);
            biaskit_tensor_info ia[3], ib[3];
            assert_int_equal(da->param_tensors(ta->instance, ia, 3), 2);
            assert_int_equal(db->param_tensors(tb->instance, ib, 3), 2);
            for (int k = 0; k < 2; k++) {
                assert_string_equal(ia[k].name, ib[k].name);
                assert_int_equal(ia[k].offset, ib[k].offset);
                assert_int_equal(ia[k].rows, ib[k].rows);
                assert_int_equal(ia[k].cols, ib[k].cols);
            }
            close_terms(&a);
            close_terms(&b);
        }
    }
}

/* learnable = false: no parameters, theta NULL, the given values' table -- the built-in's bit for bit;
 * backward adds nothing. */
static void kerple_frozen(void **state)
{
    (void)state;
    const char *extras[] = {"learnable = false\nr1 = [2.0]\nr2 = [1.0]\n",
                            "learnable = false\nr1 = [0.5, 2.0, 1.0]\nr2 = [1.0, 0.25, 0.01]\n"};
    for (int e = 0; e < 2; e++) {
        fixture a, b;
        open_pair(&a, &b, 3, extras[e]);
        const bk_term *ta = &a.set.terms[0], *tb = &b.set.terms[0];
        assert_int_equal(tb->n_params, 0);
        assert_null(bk_term_theta(tb, 0));
        biaskit_tensor_info info[2];
        assert_int_equal(tb->plugin->desc->param_tensors(tb->instance, info, 2), 0);
        for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++)
            expect_same_table_and_gradient(ta, tb, NULL, lengths[i]);
        float dtheta[1] = {3.0f}, g[3 * 10];
        fill_random(g, 30, 1, 1.0);
        biaskit_error pe = {0, ""};
        assert_int_equal(tb->plugin->desc->table_backward(tb->instance, NULL, 10, g, dtheta, &pe), BIASKIT_OK);
        assert_true(dtheta[0] == 3.0f);
        close_terms(&a);
        close_terms(&b);
    }
}

static void expect_tp_error(int heads, const char *plugin, const char *extra, const char *needle1, const char *needle2)
{
    char text[1024];
    experiment(text, sizeof text, heads, plugin, extra);
    expect_term_error(text, needle1, needle2);
}

static void options_are_checked(void **state)
{
    (void)state;
    /* a random init rule cannot make a frozen value */
    expect_tp_error(4, "kerple_tp", "learnable = false\nr1 = [1.0]\n", "r2", "learnable = false needs a fixed value");
    /* frozen values must lie within the bounds */
    expect_tp_error(4, "kerple_tp", "learnable = false\nr1 = [1.0]\nr2 = [0.001]\n", "r2", "[0.01, inf]");
    /* 1 value or one per head */
    expect_tp_error(4, "kerple_tp", "r1 = [1.0, 2.0]\n", "r1", "expected 1 value (every head) or 4 values");
    expect_tp_error(4, "kerple_tp", "r1 = [1.0, 2.0, 3.0, 4.0, 5.0]\n", "r1", NULL);
    expect_tp_error(4, "kerple_tp", "r2 = [1e39]\n", "r2", "expected a finite float");
    /* a scalar parameter takes exactly one value; constants are range-checked */
    expect_tp_error(3, "tp_scalar", "amp = [1.0, 2.0]\n", "amp", "expected 1 value (a scalar parameter)");
    expect_tp_error(3, "tp_scalar", "offset = 11\n", "offset", "expected a finite value in [-10, 10]");
    expect_tp_error(3, "kerple_tp", "r3 = [1.0]\n", "r3", NULL); /* not declared: the host refuses it */
    /* initial values must lie within the bounds too */
    expect_tp_error(2, "kerple_tp", "r1 = [0.001]\n", "r1", "value 0: expected a value in [0.01, inf] (the bounds of parameter 'r1'), got 0.001");
}

/* ---- the built-in plugins written with the header, against their formulas ----------------------- */

static const int32_t ported_lengths[] = {1, 7, 1000, 70000};

/* The term's table at D distances (theta may be NULL) equals want[] bit for bit. */
static void expect_table_bits(const bk_term *t, const float *theta, int32_t D, const float *want, const char *what)
{
    size_t n = (size_t)t->n_heads * (size_t)D;
    float *got = malloc(sizeof *got * n);
    assert_non_null(got);
    biaskit_error pe = {0, ""};
    assert_int_equal(t->plugin->desc->table(t->instance, theta, D, got, &pe), BIASKIT_OK);
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            fail_msg("%s, D = %d, head %zu, d = %zu: plugin %.9g, formula %.9g", what, (int)D, i / (size_t)D,
                     i % (size_t)D, (double)got[i], (double)want[i]);
    free(got);
}

/* Opens `plugin` with `options` at `heads` heads; returns its term, which has no parameters. */
static const bk_term *open_parameterless(fixture *f, int heads, const char *plugin, const char *options)
{
    char text[1024];
    experiment(text, sizeof text, heads, plugin, options);
    open_ok(f, text);
    assert_int_equal(f->set.terms[0].n_params, 0);
    return &f->set.terms[0];
}

/* alibi: no parameters, no `learnable` option; the table is bk_alibi_bias((float)(scale * m_h), d) with
 * m_h the series (12 heads: not a power of two), a uniform slope, one given slope or one per head. */
static void alibi_is_its_formula(void **state)
{
    (void)state;
    enum { H = 12 };
    double series[H], list[H];
    bk_alibi_slopes(H, series);
    char list_text[512] = "slopes = [", *at = list_text + strlen(list_text);
    for (int h = 0; h < H; h++) {
        list[h] = 0.1 + 0.0137 * h;
        at += snprintf(at, sizeof list_text - (size_t)(at - list_text), "%.17g%s", list[h], h + 1 < H ? ", " : "]\n");
    }
    char with_scale[600];
    snprintf(with_scale, sizeof with_scale, "%sslope_scale = 0.3\n", list_text);
    const struct {
        const char *options;
        double scale;
        int source; /* 0: the series, 1: one value, 2: list[] */
        double value;
    } cases[] = {
        {"", 1.0, 0, 0.0},
        {"slope_scale = 96.0\n", 96.0, 0, 0.0},
        {"slope_scale = 0.3\n", 0.3, 0, 0.0},
        {"uniform_slope = 0.1\nslope_scale = 3.0\n", 3.0, 1, 0.1},
        {"uniform_slope = 0.0\n", 1.0, 1, 0.0},
        {"slopes = [0.7]\nslope_scale = 0.3\n", 0.3, 1, 0.7},
        {list_text, 1.0, 2, 0.0},
        {with_scale, 0.3, 2, 0.0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fixture f;
        const bk_term *t = open_parameterless(&f, H, "alibi", cases[c].options);
        const biaskit_plugin *desc = t->plugin->desc;
        for (size_t o = 0; o < (size_t)desc->n_options; o++)
            assert_string_not_equal(desc->options[o].name, "learnable");
        for (size_t l = 0; l < sizeof ported_lengths / sizeof ported_lengths[0]; l++) {
            int32_t D = ported_lengths[l];
            float *want = malloc(sizeof *want * (size_t)H * (size_t)D);
            assert_non_null(want);
            for (int h = 0; h < H; h++) {
                double m = cases[c].source == 0 ? series[h] : cases[c].source == 1 ? cases[c].value : list[h];
                float slope = (float)(cases[c].scale * m);
                for (int32_t d = 0; d < D; d++)
                    want[(size_t)h * (size_t)D + (size_t)d] = bk_alibi_bias(slope, d);
            }
            expect_table_bits(t, NULL, D, want, cases[c].options[0] ? cases[c].options : "alibi defaults");
            free(want);
        }
        close_terms(&f);
    }
}

/* qin: no parameters; every head's row is bk_qin_bias(form, offset, d). */
static void qin_is_its_formula(void **state)
{
    (void)state;
    enum { H = 3 };
    const struct {
        const char *options;
        int form;
        int32_t offset;
    } cases[] = {
        {"", BK_QIN_TYPE1, 2},
        {"form = \"type2\"\n", BK_QIN_TYPE2, 2},
        {"form = \"harmonic\"\n", BK_QIN_HARMONIC, 2},
        {"form = \"nlogn\"\n", BK_QIN_NLOGN, 2},
        {"form = \"nlogn\"\noffset = 5\n", BK_QIN_NLOGN, 5},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fixture f;
        const bk_term *t = open_parameterless(&f, H, "qin", cases[c].options);
        for (size_t l = 0; l < sizeof ported_lengths / sizeof ported_lengths[0]; l++) {
            int32_t D = ported_lengths[l];
            float *want = malloc(sizeof *want * (size_t)H * (size_t)D);
            assert_non_null(want);
            for (int h = 0; h < H; h++)
                for (int32_t d = 0; d < D; d++)
                    want[(size_t)h * (size_t)D + (size_t)d] = bk_qin_bias(cases[c].form, cases[c].offset, d);
            expect_table_bits(t, NULL, D, want, cases[c].options[0] ? cases[c].options : "qin defaults");
            free(want);
        }
        close_terms(&f);
    }
}

/* kerple: per variant, r_k of head h at theta[k H + h]; r2 (power) and r3 are exponents <= 2. */
static int kerple_exponent(int variant, int k)
{
    return (variant == BK_KERPLE_POWER && k == 1) || (variant == BK_KERPLE_3PARA_LOG && k == 2);
}

/* The official code's init: r_k ~ high_k * U(0,1), parameter by parameter, head by head, projected. */
static double kerple_high(int variant, int k)
{
    if (variant == BK_KERPLE_POWER)
        return k == 0 ? 1.0 : 2.0;
    return k == 1 ? 1.0 : 2.0;
}

/* kerple, each variant: init (one draw per element, r1 then r2 then r3), projection, tables and the
 * gradient (per head, d ascending, (double)dtable * (double)dT/dr_k in double, added as a float) against
 * loops over kerple_math.h. */
static void kerple_variants_are_their_formulas(void **state)
{
    (void)state;
    enum { H = 5 };
    const char *names[3] = {"log", "power", "3para-log"};
    for (int v = 0; v < 3; v++) {
        char text[512], line[64];
        snprintf(line, sizeof line, "variant = \"%s\"\n", names[v]);
        experiment(text, sizeof text, H, "kerple", line);
        fixture f;
        open_ok(&f, text);
        const bk_term *t = &f.set.terms[0];
        const biaskit_plugin *desc = t->plugin->desc;
        int n = bk_kerple_tensor_count(v);
        size_t P = (size_t)n * H;
        assert_int_equal(t->n_params, (int64_t)P);
        float theta[3 * H], want_theta[3 * H];
        biaskit_error pe = {0, ""};
        for (uint64_t seed = 1; seed < 4; seed++) {
            assert_int_equal(desc->param_init(t->instance, theta, seed, &pe), BIASKIT_OK);
            biaskit_rng rng = biaskit_rng_seeded(seed);
            for (int k = 0; k < n; k++)
                for (int h = 0; h < H; h++)
                    want_theta[k * H + h] =
                        bk_kerple_project((float)(kerple_high(v, k) * biaskit_rng_uniform(&rng)), kerple_exponent(v, k));
            assert_memory_equal(theta, want_theta, sizeof(float) * P);
        }
        for (uint64_t s = 1; s <= 3; s++) {
            fill_random(theta, P, 40 + s, 1.5);
            theta[0] = -1.0f;      /* below the clamp */
            theta[P - 1] = 7.0f;   /* above an exponent's bound (power r2, 3para-log r3); log: r2 stays */
            memcpy(want_theta, theta, sizeof(float) * P);
            desc->param_project(t->instance, theta);
            for (int k = 0; k < n; k++)
                for (int h = 0; h < H; h++)
                    want_theta[k * H + h] = bk_kerple_project(want_theta[k * H + h], kerple_exponent(v, k));
            assert_memory_equal(theta, want_theta, sizeof(float) * P);
            for (size_t l = 0; l < sizeof ported_lengths / sizeof ported_lengths[0]; l++) {
                int32_t D = ported_lengths[l];
                size_t N = (size_t)H * (size_t)D;
                float *want = malloc(sizeof *want * N), *g = malloc(sizeof *g * N);
                assert_non_null(want);
                assert_non_null(g);
                float dtheta[3 * H], want_dtheta[3 * H];
                fill_random(g, N, 70 + s, 1.0);
                fill_random(dtheta, P, 80 + s, 0.1);
                memcpy(want_dtheta, dtheta, sizeof(float) * P);
                for (int h = 0; h < H; h++) {
                    float r1 = theta[h], r2 = theta[H + h], r3 = n > 2 ? theta[2 * H + h] : 0.0f;
                    double acc[3] = {0.0, 0.0, 0.0};
                    for (int32_t d = 0; d < D; d++) {
                        float dr[3] = {0.0f, 0.0f, 0.0f};
                        want[(size_t)h * (size_t)D + (size_t)d] = bk_kerple_bias(v, r1, r2, r3, d);
                        bk_kerple_grad(v, r1, r2, r3, d, dr);
                        for (int k = 0; k < n; k++)
                            acc[k] += (double)g[(size_t)h * (size_t)D + (size_t)d] * (double)dr[k];
                    }
                    for (int k = 0; k < n; k++)
                        want_dtheta[k * H + h] += (float)acc[k];
                }
                expect_table_bits(t, theta, D, want, names[v]);
                assert_int_equal(desc->table_backward(t->instance, theta, D, g, dtheta, &pe), BIASKIT_OK);
                for (size_t i = 0; i < P; i++)
                    if (memcmp(&dtheta[i], &want_dtheta[i], sizeof(float)) != 0)
                        fail_msg("%s, D = %d, gradient %zu: plugin %.9g, formula %.9g", names[v], (int)D, i,
                                 (double)dtheta[i], (double)want_dtheta[i]);
                free(want);
                free(g);
            }
        }
        close_terms(&f);
    }
}

/* tp_scalar: theta = [amp, slope_0 .. slope_H-1]; amp starts at 1, the slopes at ALiBi's (12 heads: not
 * a power of two), equal to the built-in alibi plugin's; the constant reaches the formula; the scalar's
 * gradient is summed over heads in the documented order. */
static void scalar_parameter_alibi_rule_and_constant(void **state)
{
    (void)state;
    enum { H = 12, D = 50 };
    char text[512];
    fixture f, al;
    experiment(text, sizeof text, H, "tp_scalar", "offset = 0.5\n");
    open_ok(&f, text);
    experiment(text, sizeof text, H, "alibi", NULL);
    open_ok(&al, text);
    const bk_term *t = &f.set.terms[0];
    const biaskit_plugin *desc = t->plugin->desc;
    assert_int_equal(t->n_params, 1 + H);
    biaskit_tensor_info info[2];
    assert_int_equal(desc->param_tensors(t->instance, info, 2), 2);
    assert_string_equal(info[0].name, "amp");
    assert_int_equal(info[0].rows, 1);
    assert_string_equal(info[1].name, "slope");
    assert_int_equal(info[1].offset, 1);
    assert_int_equal(info[1].rows, H);
    const float *theta = bk_term_theta(t, 0);
    assert_true(theta[0] == 1.0f);
    float alibi[H * D], tab[H * D];
    bk_error err;
    assert_int_equal(bk_term_table(&al.set.terms[0], 0, D, alibi, &err), BK_OK);
    assert_int_equal(bk_term_table(t, 0, D, tab, &err), BK_OK);
    for (int h = 0; h < H; h++) {
        if (theta[1 + h] != -alibi[h * D + 1])
            fail_msg("head %d: slope %.9g, alibi's %.9g", h, (double)theta[1 + h], (double)-alibi[h * D + 1]);
        assert_true(theta[1 + h] == (float)biaskit_tp_alibi_slope(H, h));
        for (int d = 0; d < D; d++)
            assert_true(tab[h * D + d] == 0.5f - theta[0] * theta[1 + h] * (float)d);
    }
    /* gradient: per head, d ascending, in double; the scalar's head sums added in double, heads ascending */
    float g[H * D], dtheta[1 + H];
    fill_random(g, H * D, 4, 1.0);
    memset(dtheta, 0, sizeof dtheta);
    float p[1 + H], initial[1 + H];
    memcpy(p, theta, sizeof p);
    memcpy(initial, theta, sizeof initial);
    p[0] = 1.5f;
    biaskit_error pe = {0, ""};
    assert_int_equal(desc->table_backward(t->instance, p, D, g, dtheta, &pe), BIASKIT_OK);
    double amp_total = 0.0;
    for (int h = 0; h < H; h++) {
        double a = 0.0, s = 0.0;
        for (int d = 0; d < D; d++) {
            a += (double)g[h * D + d] * (double)(-p[1 + h] * (float)d);
            s += (double)g[h * D + d] * (double)(-p[0] * (float)d);
        }
        amp_total += a;
        assert_true(dtheta[1 + h] == (float)s);
    }
    assert_true(dtheta[0] == (float)amp_total);
    close_terms(&f);
    close_terms(&al);

    /* frozen without values: the non-random rules (amp = 1, ALiBi slopes): the same table, no parameters */
    experiment(text, sizeof text, H, "tp_scalar", "learnable = false\n");
    open_ok(&f, text);
    assert_int_equal(f.set.terms[0].n_params, 0);
    float frozen[H * D];
    assert_int_equal(bk_term_table(&f.set.terms[0], 0, D, frozen, &err), BK_OK);
    for (int h = 0; h < H; h++)
        for (int d = 0; d < D; d++)
            assert_true(frozen[h * D + d] == 0.0f - initial[0] * initial[1 + h] * (float)d);
    close_terms(&f);
}

/* The generated CUDA variants against the host ones (needs a GPU): tables, gradients, determinism. */
static void cuda_matches_host(void **state)
{
    (void)state;
    char device[256];
    if (!bk_device_probe(device, sizeof device)) {
        printf("skipped: no GPU answers here: %s\n", device);
        skip();
    }
    const char *cases[][2] = {
        {"kerple_tp", ""},
        {"kerple_tp", "r1 = [0.5, 1, 2, 0.01, 3, 0.2, 7, 1]\nr2 = [0.01, 0.5, 1, 1.5, 2, 2, 0.7, 1]\n"},
        {"kerple_tp", "learnable = false\nr1 = [2.0]\nr2 = [1.0]\n"},
        {"tp_scalar", "offset = -1.0\n"},
        {"tp_scalar", "learnable = false\n"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char text[512];
        experiment(text, sizeof text, 8, cases[c][0], cases[c][1]);
        fixture f;
        open_ok(&f, text);
        compare_cuda(&f.set.terms[0], 1);
        compare_cuda(&f.set.terms[0], 4097);
        compare_cuda(&f.set.terms[0], 300000); /* more than one grid-stride sweep, 147 gradient blocks */
        close_terms(&f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kerple_tables_and_gradients_bit_for_bit),
        cmocka_unit_test(kerple_init_projection_and_tensors),
        cmocka_unit_test(kerple_frozen),
        cmocka_unit_test(options_are_checked),
        cmocka_unit_test(scalar_parameter_alibi_rule_and_constant),
        cmocka_unit_test(alibi_is_its_formula),
        cmocka_unit_test(qin_is_its_formula),
        cmocka_unit_test(kerple_variants_are_their_formulas),
        cmocka_unit_test(cuda_matches_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
