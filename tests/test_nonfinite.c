/* The bias runtime facing a misbehaving plugin (tests/plugins/misbehave.c), in process: a non-finite
 * table fails with the term, plugin, layer and step; check_finite = 0 lets it through (benchmarks
 * only); a non-finite parameter gradient is recorded for the training loop when the plugin was given a
 * finite dL/dT, and not when dL/dT itself was not finite; a table_backward() error carries the plugin's
 * message; and the record of the plugin call in progress, which the crash report prints
 * (core/train/train.c), names the call and stays within its buffer. tests/test_misbehave.sh runs the
 * same failures through `biaskit train`. */
#include "test_util.h"

#include "train/lm.h"

#include <math.h>
#include <stdlib.h>

enum { LAYERS = 3, HEADS = 2, T = 8 };

/* A model whose only term is the misbehave plugin with `options` (TOML lines of the [[term]]). */
static void open_model(bk_lm *lm, const char *options)
{
    char text[1024];
    snprintf(text, sizeof text,
             "[model]\nlayers = %d\nheads = %d\ndim = 8\n[train]\nlength = %d\n"
             "[[term]]\nplugin = \"%s/biaskit_misbehave.so\"\n%s\n",
             LAYERS, HEADS, T, BK_TEST_PLUGINS_DIR, options);
    bk_error err = {0};
    if (bk_lm_open_text(lm, text, "test.toml", ".", NULL, 0, &err))
        fail_msg("%s", err.message);
}

/* One step's bias backward: every layer, last first, with dL/dM = `value` everywhere. */
static int backward(bk_lm *lm, float value, bk_error *err)
{
    float dmixed[HEADS * T];
    for (int i = 0; i < HEADS * T; i++)
        dmixed[i] = value;
    const float *d[BK_STREAM_COUNT] = {dmixed, NULL};
    bk_bias_zero_grad(&lm->bias);
    int rc = BK_OK;
    for (int l = LAYERS - 1; l >= 0 && !rc; l--)
        rc = bk_bias_backward(&lm->bias, l, d, err);
    return rc;
}

static void test_nonfinite_table_names_layer_and_step(void **state)
{
    (void)state;
    bk_lm lm;
    bk_error err = {0};
    open_model(&lm, "failure = \"inf_table\"\nat_step = 2\nper_layer = true\nlayer = 1");
    lm.bias.step = 1;
    assert_int_equal(bk_bias_forward(&lm.bias, T, &err), BK_OK);
    lm.bias.step = 2;
    assert_int_equal(bk_bias_forward(&lm.bias, T, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "term 'misbehave' (plugin misbehave, ");
    assert_message_has(err.message, ") at layer 1, step 2: host table has a non-finite value -inf at head 1, distance 7");
    bk_lm_close(&lm);

    /* a shared table names no layer */
    open_model(&lm, "failure = \"nan_table\"\nat_step = 1");
    lm.bias.step = 5;
    assert_int_equal(bk_bias_forward(&lm.bias, T, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, ") at step 5: host table has a non-finite value nan at head 0, distance 1");
    bk_lm_close(&lm);
}

static void test_checks_can_be_turned_off(void **state)
{
    (void)state;
    bk_lm lm;
    bk_error err = {0};
    open_model(&lm, "failure = \"nan_table\"\nat_step = 1");
    lm.bias.check_finite = 0;
    assert_int_equal(bk_bias_forward(&lm.bias, T, &err), BK_OK);
    assert_true(isnan(bk_bias_table(&lm.bias, 0, BK_STREAM_TOKEN)[1]));
    bk_lm_close(&lm);
}

static void test_nonfinite_gradient_is_blamed_on_the_plugin(void **state)
{
    (void)state;
    bk_lm lm;
    bk_error err = {0};
    open_model(&lm, "failure = \"nan_grad\"\nat_step = 1\nlayer = 1");
    lm.bias.step = 4;
    assert_int_equal(bk_bias_forward(&lm.bias, T, &err), BK_OK);
    assert_int_equal(backward(&lm, 0.25f, &err), BK_OK); /* recorded, not an error: the loop decides */
    assert_message_has(lm.bias.nonfinite, "term 'misbehave' (plugin misbehave, ");
    assert_message_has(lm.bias.nonfinite, ") at layer 1, step 4: table_backward() gave a non-finite gradient nan "
                                          "for parameter 0 of 2 from a finite dL/dT");
    assert_true(isnan(lm.bias.dtheta[0][0]));
    bk_bias_zero_grad(&lm.bias);
    assert_string_equal(lm.bias.nonfinite, "");
    bk_lm_close(&lm);
}

static void test_nonfinite_input_is_not_blamed_on_the_plugin(void **state)
{
    (void)state;
    bk_lm lm;
    bk_error err = {0};
    open_model(&lm, "failure = \"none\"");
    assert_int_equal(bk_bias_forward(&lm.bias, T, &err), BK_OK);
    assert_int_equal(backward(&lm, NAN, &err), BK_OK);
    assert_true(isnan(lm.bias.dtheta[0][0])); /* NaN in, NaN out: the plugin did nothing wrong */
    assert_string_equal(lm.bias.nonfinite, "");
    bk_lm_close(&lm);
}

static void test_backward_error_carries_the_plugin_message(void **state)
{
    (void)state;
    bk_lm lm;
    bk_error err = {0};
    open_model(&lm, "failure = \"backward_error\"\nat_step = 1\nlayer = 0");
    lm.bias.step = 3;
    assert_int_equal(bk_bias_forward(&lm.bias, T, &err), BK_OK);
    assert_int_equal(backward(&lm, 0.25f, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, ") at layer 0, step 3: table_backward() failed: misbehaving on purpose: "
                                    "table_backward() fails at step 1, layer 0");
    bk_lm_close(&lm);
}

static void test_plugin_call_record(void **state)
{
    (void)state;
    bk_lm lm;
    open_model(&lm, "");
    char buf[128];
    assert_int_equal(bk_plugin_call_describe(buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    bk_plugin_call_enter(&lm.terms.terms[0], "table_backward()", 2, 1234567890123LL);
    size_t n = bk_plugin_call_describe(buf, sizeof buf);
    assert_string_equal(buf, "plugin misbehave (term 'misbehave', table_backward(), layer 2, step 1234567890123)");
    assert_int_equal(n, strlen(buf));
    char small[12];
    assert_int_equal(bk_plugin_call_describe(small, sizeof small), sizeof small - 1);
    assert_string_equal(small, "plugin misb");
    bk_plugin_call_enter(&lm.terms.terms[0], "table()", -1, 0); /* no layer, no step */
    bk_plugin_call_describe(buf, sizeof buf);
    assert_string_equal(buf, "plugin misbehave (term 'misbehave', table())");
    bk_plugin_call_leave();
    assert_int_equal(bk_plugin_call_describe(buf, sizeof buf), 0);
    bk_lm_close(&lm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nonfinite_table_names_layer_and_step),
        cmocka_unit_test(test_checks_can_be_turned_off),
        cmocka_unit_test(test_nonfinite_gradient_is_blamed_on_the_plugin),
        cmocka_unit_test(test_nonfinite_input_is_not_blamed_on_the_plugin),
        cmocka_unit_test(test_backward_error_carries_the_plugin_message),
        cmocka_unit_test(test_plugin_call_record),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
