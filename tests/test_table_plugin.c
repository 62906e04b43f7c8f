/* Formula-first plugins (<biaskit/table_plugin.h>): KERPLE-log written with the header
 * (tests/plugins/kerple_tp.c) against the built-in kerple plugin's variant "log" -- tables, gradients,
 * projection, initialisation and tensors bit for bit -- its frozen form and its option errors; and
 * tp_scalar (tests/plugins/tp_scalar.c) for a scalar parameter, the ALiBi and constant init rules and a
 * constant. The CUDA variants against the host ones when a GPU answers. */
#include "term_fixture.h"

#include "bias/terms.h"
#include "device.h"

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
    /* learnable: a given value outside the bounds is clamped (with a warning), not refused */
    fixture f;
    char text[512];
    experiment(text, sizeof text, 2, "kerple_tp", "r1 = [0.001]\n");
    open_ok(&f, text);
    assert_true(bk_term_theta(&f.set.terms[0], 0)[0] == 0.01f);
    close_terms(&f);
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
        cmocka_unit_test(cuda_matches_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
