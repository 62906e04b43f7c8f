/* Mixing rules on plain arrays: sum, stable kernel (log-sum-exp), and weight completion. */
#include "test_util.h"

#include "bias/mix.h"

#include <math.h>

static void sum_mode(void **state)
{
    (void)state;
    const float a[3] = {0, -1, -2}, b[3] = {0, -10, -20};
    const float *tables[2] = {a, b};
    const double w[2] = {1.0, 0.1};
    float out[3];
    bk_mix_tables(BK_MIX_SUM, tables, w, 2, 3, out);
    assert_float_equal(out[0], 0.0f, 0);
    assert_float_equal(out[1], -2.0f, 1e-6);
    assert_float_equal(out[2], -4.0f, 1e-6);
}

static void kernel_mode_is_stable(void **state)
{
    (void)state;
    /* values whose exp() underflows in float and double: the max-subtracted form must still work */
    const float a[2] = {-1000.0f, -5.0f}, b[2] = {-1001.0f, -7.0f};
    const float *tables[2] = {a, b};
    const double w[2] = {0.5, 0.5};
    float out[2];
    bk_mix_tables(BK_MIX_KERNEL, tables, w, 2, 2, out);
    assert_float_equal(out[0], -1000.0 + log(0.5 + 0.5 * exp(-1.0)), 1e-3);
    assert_float_equal(out[1], log(0.5 * exp(-5.0) + 0.5 * exp(-7.0)), 1e-6);
    assert_true(isfinite(out[0]));
}

static void kernel_mode_skips_zero_weights(void **state)
{
    (void)state;
    const float a[1] = {-3.0f}, b[1] = {0.0f};
    const float *tables[2] = {a, b};
    const double w[2] = {1.0, 0.0};
    float out[1];
    bk_mix_tables(BK_MIX_KERNEL, tables, w, 2, 1, out);
    assert_float_equal(out[0], -3.0f, 1e-6); /* the larger table with weight 0 must not set the max */
}

static void weight_completion(void **state)
{
    (void)state;
    const char *labels[3] = {"a", "b", "c"};
    bk_error err;
    double sum_w[2] = {NAN, 0.5};
    assert_int_equal(bk_mix_weights(BK_MIX_SUM, sum_w, labels, 2, &err), BK_OK);
    assert_true(sum_w[0] == 1.0 && sum_w[1] == 0.5);
    double kernel_w[3] = {NAN, NAN, NAN};
    assert_int_equal(bk_mix_weights(BK_MIX_KERNEL, kernel_w, labels, 3, &err), BK_OK);
    for (int i = 0; i < 3; i++)
        assert_float_equal(kernel_w[i], 1.0 / 3, 1e-15);
    double given[2] = {2.0, 6.0};
    assert_int_equal(bk_mix_weights(BK_MIX_KERNEL, given, labels, 2, &err), BK_OK);
    assert_true(given[0] == 0.25 && given[1] == 0.75);
    double zero[2] = {0.0, 0.0};
    assert_int_equal(bk_mix_weights(BK_MIX_KERNEL, zero, labels, 2, &err), BK_ERR_CONFIG);
    assert_message_has(err.message, "kernel mixing needs a positive total weight");
    double negative[2] = {1.0, -0.5};
    assert_int_equal(bk_mix_weights(BK_MIX_KERNEL, negative, labels, 2, &err), BK_ERR_CONFIG);
    assert_message_has(err.message, "term 'b': weight -0.5 is negative");
}

/* A term of weight 0 whose table is far above the mixture (exp(T - M) overflows): forward leaves it
 * out, and backward must too, instead of forming 0 * inf = NaN in its table gradient, and through the
 * softmax backward in every learnable mixing parameter. */
static void kernel_backward_with_zero_weight_is_finite(void **state)
{
    (void)state;
    const float a[2] = {-1000.0f, -2.0f}, b[2] = {0.0f, 0.0f};
    const float *tables[2] = {a, b};
    const double w[2] = {1.0, 0.0};
    float mixed[2], da[2] = {0, 0}, db[2] = {0, 0};
    float *dtables[2] = {da, db};
    const float dout[2] = {0.5f, -0.25f};
    double dw[2] = {0, 0};
    bk_mix_tables(BK_MIX_KERNEL, tables, w, 2, 2, mixed);
    bk_mix_backward(BK_MIX_KERNEL, tables, w, 2, 2, mixed, dout, dtables, dw);
    for (int k = 0; k < 2; k++) {
        assert_float_equal(da[k], dout[k], 1e-6); /* M = T_a, so dM/dT_a = 1 */
        assert_true(db[k] == 0.0f);
    }
    assert_true(isfinite(dw[0]) && isfinite(dw[1]));
    assert_float_equal(dw[0], 0.5 - 0.25, 1e-6);
    float dparams[2] = {0, 0};
    bk_mix_params_backward(BK_MIX_KERNEL, w, dw, 2, dparams);
    assert_true(isfinite(dparams[0]) && isfinite(dparams[1]));
    assert_true(dparams[1] == 0.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sum_mode),
        cmocka_unit_test(kernel_mode_is_stable),
        cmocka_unit_test(kernel_mode_skips_zero_weights),
        cmocka_unit_test(weight_completion),
        cmocka_unit_test(kernel_backward_with_zero_weight_is_finite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
