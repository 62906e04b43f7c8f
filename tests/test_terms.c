/* Terms: plugins created from [[term]] tables, option checking through the services table,
 * parameters, per-layer copies, tables, finiteness, and mixing across plugins. */
#include "term_fixture.h"

#include "bias/mix.h"
#include "bias/terms.h"

#include <math.h>
#include <stdlib.h>

static void alibi_table_through_the_host(void **state)
{
    (void)state;
    fixture f;
    bk_error err;
    assert_int_equal(open_terms(&f, "[model]\nheads = 8\n[[term]]\nplugin = \"alibi\"\n", &err), BK_OK);
    assert_int_equal(f.set.n, 1);
    const bk_term *t = &f.set.terms[0];
    assert_string_equal(t->label, "alibi");
    assert_int_equal(t->n_params, 0);
    assert_null(bk_term_theta(t, 0));
    assert_true(t->weight == 1.0);
    float table[8 * 5];
    assert_int_equal(bk_term_table(t, 0, 5, table, &err), BK_OK);
    for (int h = 0; h < 8; h++)
        for (int d = 0; d < 5; d++)
            assert_float_equal(table[h * 5 + d], -ldexp(1.0, -(h + 1)) * d, 1e-7);
    close_terms(&f);
}

/* The variants the papers use: a scale (BiPE: 96x), one uniform slope, an explicit list. */
static void alibi_variants(void **state)
{
    (void)state;
    const struct {
        const char *options;
        double slope[3];
    } cases[] = {
        {"", {0, 0, 0}},                      /* the reference series: ref3 below */
        {"slope_scale = 96.0\n", {0, 0, 0}}, /* 96 x ref3 */
        {"uniform_slope = 0.125\n", {0.125, 0.125, 0.125}},
        {"slopes = [0.5, 0.1, 0.01]\n", {0.5, 0.1, 0.01}},
        {"slopes = [0.5, 0.1, 0.01]\nslope_scale = 2\n", {1.0, 0.2, 0.02}},
    };
    /* reference get_slopes(3): the 2 slopes of n=2 (2^-4, 2^-8), then the 1st of n=4 (2^-2) */
    const double ref3[3] = {1.0 / 16, 1.0 / 256, 0.25};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char text[256];
        snprintf(text, sizeof text, "[model]\nheads = 3\ndim = 48\n[[term]]\nplugin = \"alibi\"\n%s",
                 cases[c].options);
        fixture f;
        bk_error err;
        if (open_terms(&f, text, &err) != BK_OK)
            fail_msg("case %zu: %s", c, err.message);
        float table[3 * 4];
        assert_int_equal(bk_term_table(&f.set.terms[0], 0, 4, table, &err), BK_OK);
        for (int h = 0; h < 3; h++) {
            double slope = c == 0 ? ref3[h] : c == 1 ? 96.0 * ref3[h] : cases[c].slope[h];
            for (int d = 0; d < 4; d++)
                assert_float_equal(table[h * 4 + d], -(float)slope * d, 1e-5);
        }
        close_terms(&f);
    }
}

static void alibi_bad_options(void **state)
{
    (void)state;
    expect_term_error("[model]\nheads = 3\ndim = 48\n[[term]]\nplugin = \"alibi\"\nslopes = [0.5, 0.1]\n",
                      "exp.toml:6:10: ", "expected 1 value (every head) or 3 values (one per head), got 2");
    expect_term_error("[model]\nheads = 2\n[[term]]\nplugin = \"alibi\"\nslopes = [0.5, 0.1, 0.2]\n",
                      "exp.toml:5:10: ", "slopes");
    expect_term_error("[model]\nheads = 2\n[[term]]\nplugin = \"alibi\"\nslopes = [0.5, -0.1]\n",
                      "exp.toml:5:10: ", "value 1: expected a value in [0, inf] (the bounds of parameter 'slopes'), got -0.1");
    expect_term_error("[[term]]\nplugin = \"alibi\"\nuniform_slope = 0.1\nslopes = [1.0]\n",
                      "exp.toml:4:10: ", "'slopes' and 'uniform_slope' exclude each other");
    expect_term_error("[[term]]\nplugin = \"alibi\"\nslope_scale = -2\n", "exp.toml:3:15: ",
                      "option 'slope_scale': expected a finite value in [0, inf], got -2");
    expect_term_error("[[term]]\nplugin = \"alibi\"\nuniform_slope = nan\n", "exp.toml:3:17: ",
                      "option 'uniform_slope': expected a finite number, got nan");
}

/* The host refuses a number option beyond +-1e15 (or not finite), array elements too, with the position
 * of the value, before create() sees it: alibi alone would take slope_scale = 1e30 and overflow. */
static void option_numbers_have_a_sensible_range(void **state)
{
    (void)state;
    expect_term_error("[[term]]\nplugin = \"alibi\"\nslope_scale = 1e30\n",
                      "exp.toml:3:15: [[term]] #1 (alibi) option 'slope_scale': ",
                      "expected a finite number of magnitude at most 1e+15, got 1e+30");
    expect_term_error("[[term]]\nplugin = \"alibi\"\nuniform_slope = -1e16\n", "exp.toml:3:17: ",
                      "option 'uniform_slope': expected a finite number of magnitude at most 1e+15, got -1e+16");
    expect_term_error("[model]\nheads = 2\n[[term]]\nplugin = \"alibi\"\nslopes = [0.5, -inf]\n",
                      "exp.toml:5:16: [[term]] #1 (alibi) option 'slopes': ",
                      "value 1: expected a finite float, got -inf");
    expect_term_error("[model]\nheads = 2\n[[term]]\nplugin = \"alibi\"\nslopes = [2e15, 0.5]\n", "exp.toml:5:11: ",
                      "option 'slopes': value 0: expected a finite float of magnitude at most 1e+15, got 2e+15");
    /* the limit itself is a value */
    fixture f;
    bk_error err;
    if (open_terms(&f, "[model]\nheads = 2\n[[term]]\nplugin = \"alibi\"\nslopes = [1e15, -0.0]\n", &err) != BK_OK)
        fail_msg("%s", err.message);
    close_terms(&f);
}

static void plugin_option_errors_have_positions(void **state)
{
    (void)state;
    expect_term_error("[[term]]\nplugin = \"alibi\"\nslope_scal = 2.0\n",
                      "exp.toml:3:1: [[term]] #1 (alibi): unknown key 'slope_scal' (did you mean 'slope_scale'?)",
                      "plugin 'alibi' takes: ");
    expect_term_error("[[term]]\nplugin = \"alibi\"\nslope_scale = \"big\"\n",
                      "exp.toml:3:15: [[term]] #1 (alibi) option 'slope_scale': expected a number, got string", NULL);
    expect_term_error("[[term]]\nplugin = \"testlin\"\nflavour = \"odd\"\n",
                      "exp.toml:3:11: [[term]] #1 (testlin) option 'flavour': expected one of plain, fancy, got 'odd'",
                      NULL);
    expect_term_error("[[term]]\nplugin = \"testlin\"\ntags = [\"a\", 2]\n",
                      "[[term]] #1 (testlin) option 'tags': element 1: expected a string, got integer", "exp.toml:3:");
    expect_term_error("[[term]]\nplugin = \"testlin\"\nnan_at = 1.5\n",
                      "exp.toml:3:10: [[term]] #1 (testlin) option 'nan_at': expected an integer, got float", NULL);
}

static void create_failure_is_reported(void **state)
{
    (void)state;
    expect_term_error("[[term]]\nplugin = \"testlin\"\nfail_create = true\n",
                      "term 'testlin' (plugin testlin, ", "create() failed: exp.toml:3:15: [[term]] #1 (testlin) option "
                                                          "'fail_create': asked to fail, as a test");
}

static void unknown_plugin_names_the_term(void **state)
{
    (void)state;
    expect_term_error("[model]\nheads = 2\n\n[[term]]\nplugin = \"nosuch\"\n", "exp.toml:4:1: [[term]] #1: ",
                      "plugin 'nosuch' not found; searched: ");
}

/* [[term]] layers: refused for the terms that act once at the input (an embedding, the segmenter); kept
 * as on/off per layer for the others. */
static void layers_of_terms(void **state)
{
    (void)state;
    expect_term_error("[model]\nlayers = 3\n[[term]]\nplugin = \"ape\"\nlayers = [1]\n",
                      "exp.toml:5:10: [[term]] #1 (ape): 'layers' chooses the layers a term acts in; plugin 'ape' embeds "
                      "once, at the model's input",
                      "expected no 'layers' key");
    expect_term_error("[model]\nlayers = 3\n[[term]]\nplugin = \"bipe\"\nlayers = \"first 1\"\n",
                      "[[term]] #1 (bipe): 'layers' chooses the layers a term acts in; plugin 'bipe' segments the tokens",
                      NULL);
    fixture f;
    bk_error err;
    if (open_terms(&f, "[model]\nlayers = 3\nheads = 2\n[[term]]\nplugin = \"alibi\"\nlayers = \"last 2\"\n"
                       "[[term]]\nplugin = \"rope\"\n",
                   &err) != BK_OK)
        fail_msg("%s", err.message);
    const bk_term *a = &f.set.terms[0], *r = &f.set.terms[1];
    assert_non_null(a->layers_on);
    assert_false(bk_term_on_layer(a, 0));
    assert_true(bk_term_on_layer(a, 1) && bk_term_on_layer(a, 2));
    assert_true(bk_term_on_layer(a, -1)); /* a call for no one layer */
    assert_null(r->layers_on);
    assert_true(bk_term_on_layer(r, 0) && bk_term_on_layer(r, 2));
    close_terms(&f);
}

static void non_finite_table_is_rejected(void **state)
{
    (void)state;
    fixture f;
    bk_error err;
    assert_int_equal(open_terms(&f, "[model]\nheads = 2\n[[term]]\nplugin = \"testlin\"\nnan_at = 3\n", &err), BK_OK);
    float table[2 * 8];
    assert_int_equal(bk_term_table(&f.set.terms[0], 0, 8, table, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "term 'testlin' (plugin testlin, ");
    assert_message_has(err.message, "host table has a non-finite value nan at head 0, distance 3");
    /* shorter tables never reach the NaN */
    assert_int_equal(bk_term_table(&f.set.terms[0], 0, 3, table, &err), BK_OK);
    close_terms(&f);
}

static void parameters_shared_and_per_layer(void **state)
{
    (void)state;
    fixture f;
    bk_error err;
    const char *text = "[model]\nlayers = 3\nheads = 4\ndim = 32\n"
                       "[[term]]\nplugin = \"testlin\"\ninit = 0.5\n"
                       "[[term]]\nplugin = \"testlin\"\nper_layer = true\n";
    assert_int_equal(open_terms(&f, text, &err), BK_OK);
    const bk_term *shared = &f.set.terms[0], *layered = &f.set.terms[1];
    assert_string_equal(shared->label, "testlin");
    assert_string_equal(layered->label, "testlin#2"); /* repeated plugin names get the term's index */
    assert_int_equal(shared->n_params, 4);
    assert_int_equal(shared->n_copies, 1);
    assert_int_equal(layered->n_copies, 3);
    assert_ptr_equal(bk_term_theta(shared, 0), bk_term_theta(shared, 2));
    assert_ptr_equal(bk_term_theta(layered, 2), bk_term_theta(layered, 0) + 8);
    assert_float_equal(bk_term_theta(shared, 0)[3], 2.0f, 0); /* init * (h + 1) */
    assert_float_equal(bk_term_theta(layered, 1)[1], 0.5f, 0);
    /* the engine's table uses the layer's copy */
    bk_term_theta(layered, 1)[0] = 3.0f;
    float table[4 * 3];
    assert_int_equal(bk_term_table(layered, 1, 3, table, &err), BK_OK);
    assert_float_equal(table[2], -6.0f, 0);
    assert_int_equal(bk_term_table(layered, 0, 3, table, &err), BK_OK);
    assert_float_equal(table[2], -0.5f, 0);
    close_terms(&f);
}

static void sum_mixing_across_plugins(void **state)
{
    (void)state;
    fixture f;
    bk_error err;
    const char *text = "[model]\nheads = 2\ndim = 16\n"
                       "[[term]]\nplugin = \"alibi\"\n"
                       "[[term]]\nplugin = \"testlin\"\nweight = 0.5\n"
                       "[[term]]\nplugin = \"alibi\"\nstream = \"segment\"\nslope_scale = 96.0\n"
                       "[[term]]\nplugin = \"bipe\"\n"; /* the segmenter; not a table */
    if (open_terms(&f, text, &err))
        fail_msg("%s", err.message);
    float token[2 * 4], segment[2 * 4];
    int n;
    assert_int_equal(bk_terms_mixed_table(&f.set, 0, BK_STREAM_TOKEN, 4, token, &n, &err), BK_OK);
    assert_int_equal(n, 2);
    /* 2 heads: slopes 1/16, 1/256 (ALiBi); testlin 0.25, 0.5 */
    const double alibi[2] = {1.0 / 16, 1.0 / 256}, lin[2] = {0.25, 0.5};
    for (int h = 0; h < 2; h++)
        for (int d = 0; d < 4; d++)
            assert_float_equal(token[h * 4 + d], -(alibi[h] + 0.5 * lin[h]) * d, 1e-6);
    assert_int_equal(bk_terms_mixed_table(&f.set, 0, BK_STREAM_SEGMENT, 4, segment, &n, &err), BK_OK);
    assert_int_equal(n, 1);
    for (int h = 0; h < 2; h++)
        for (int d = 0; d < 4; d++)
            assert_float_equal(segment[h * 4 + d], -96.0 * alibi[h] * d, 1e-5);
    close_terms(&f);
}

static void kernel_mixing_across_plugins(void **state)
{
    (void)state;
    fixture f;
    bk_error err;
    const char *text = "[model]\nheads = 2\ndim = 16\n[attention]\nmixing = \"kernel\"\n"
                       "[[term]]\nplugin = \"alibi\"\nweight = 3\n"
                       "[[term]]\nplugin = \"testlin\"\nweight = 1\n";
    assert_int_equal(open_terms(&f, text, &err), BK_OK);
    assert_true(f.set.terms[0].weight == 0.75); /* normalised onto the simplex */
    assert_true(f.set.terms[1].weight == 0.25);
    float mixed[2 * 6];
    int n;
    assert_int_equal(bk_terms_mixed_table(&f.set, 0, BK_STREAM_TOKEN, 6, mixed, &n, &err), BK_OK);
    const double alibi[2] = {1.0 / 16, 1.0 / 256}, lin[2] = {0.25, 0.5};
    for (int h = 0; h < 2; h++)
        for (int d = 0; d < 6; d++) {
            double want = log(0.75 * exp(-alibi[h] * d) + 0.25 * exp(-lin[h] * d));
            assert_float_equal(mixed[h * 6 + d], want, 1e-6);
        }
    close_terms(&f);
    /* weight errors name the file, line and column of the weight, like every other config error */
    expect_term_error("[attention]\nmixing = \"kernel\"\n[[term]]\nplugin = \"alibi\"\nweight = -1\n",
                      "exp.toml:5:10: [[term]] #1 (alibi) weight: -1 is negative; kernel mixing needs weights >= 0",
                      NULL);
    expect_term_error("[attention]\nmixing = \"kernel\"\n[[term]]\nplugin = \"alibi\"\nweight = 0\n"
                      "[[term]]\nplugin = \"testlin\"\nweight = 0.0\n",
                      "exp.toml:5:10: [[term]] #1 (alibi) weight: ",
                      "kernel mixing needs a positive total weight on the token stream, its terms' weights sum to 0");
    /* sum mode takes any finite weight, negative included */
    expect_term_error("[[term]]\nplugin = \"alibi\"\nweight = -1\n[[term]]\nplugin = \"nosuch\"\n", "exp.toml:4:1: ",
                      "plugin 'nosuch' not found");
}

static void no_terms_is_nope(void **state)
{
    (void)state;
    fixture f;
    bk_error err;
    assert_int_equal(open_terms(&f, "[model]\nheads = 2\ndim = 8\n", &err), BK_OK);
    float table[2 * 3] = {1, 1, 1, 1, 1, 1};
    int n = -1;
    assert_int_equal(bk_terms_mixed_table(&f.set, 0, BK_STREAM_TOKEN, 3, table, &n, &err), BK_OK);
    assert_int_equal(n, 0);
    for (int i = 0; i < 6; i++)
        assert_float_equal(table[i], 0.0f, 0);
    close_terms(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(alibi_table_through_the_host),
        cmocka_unit_test(alibi_variants),
        cmocka_unit_test(alibi_bad_options),
        cmocka_unit_test(option_numbers_have_a_sensible_range),
        cmocka_unit_test(plugin_option_errors_have_positions),
        cmocka_unit_test(create_failure_is_reported),
        cmocka_unit_test(unknown_plugin_names_the_term),
        cmocka_unit_test(layers_of_terms),
        cmocka_unit_test(non_finite_table_is_rejected),
        cmocka_unit_test(parameters_shared_and_per_layer),
        cmocka_unit_test(sum_mixing_across_plugins),
        cmocka_unit_test(kernel_mixing_across_plugins),
        cmocka_unit_test(no_terms_is_nope),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
