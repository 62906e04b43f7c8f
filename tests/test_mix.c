/* Mixing rules on plain arrays: sum, stable kernel (log-sum-exp), weight completion, weights per head
 * against the plain formula, and learned weights' gradients against finite differences. */
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

/* ---- weights per head and learned weights (bias/mix.h) ---- */

#define NT 3 /* terms */
#define NH 3 /* heads */
#define ND 5 /* distances */

/* Tables with values of both signs, far apart between terms, and one far below the others (the kernel
 * mixture's max-shift matters). */
static void make_tables(float t[NT][NH * ND])
{
    for (int k = 0; k < NT; k++)
        for (int i = 0; i < NH * ND; i++)
            t[k][i] = (float)(0.7 * sin(1.3 * k + 0.37 * i) - 0.4 * k * (i % ND) -
                              (k == 2 && i % ND == 4 ? 30.0 : 0.0));
}

/* The plain reference of docs/design.md §2.1 in double: head h of M from the weights w[h][t]. */
static double plain_mix(bk_mixing mode, const float t[NT][NH * ND], const double *w, int i)
{
    const int h = i / ND;
    double acc = 0.0;
    for (int k = 0; k < NT; k++)
        acc += mode == BK_MIX_SUM ? w[h * NT + k] * t[k][i] : w[h * NT + k] * exp((double)t[k][i]);
    return mode == BK_MIX_SUM ? acc : log(acc);
}

/* Each head's table row mixed with its own weights, against the plain formula; a weight of 0 in one head
 * only; and one row of weights is bk_mix_tables bit for bit. */
static void per_head_mixing_matches_the_formula(void **state)
{
    (void)state;
    float t[NT][NH * ND], out[NH * ND], one[NH * ND];
    make_tables(t);
    const float *tables[NT] = {t[0], t[1], t[2]};
    const double sum_w[NH * NT] = {1.0, 0.5, -0.25, 0.2, 2.0, 1.0, -1.0, 0.0, 3.0};
    const double kernel_w[NH * NT] = {0.2, 0.3, 0.5, 0.0, 0.9, 0.1, 0.6, 0.2, 0.2};
    for (int mode = 0; mode < 2; mode++) {
        const double *w = mode == BK_MIX_SUM ? sum_w : kernel_w;
        bk_mix_tables_grouped((bk_mixing)mode, tables, w, NH, NT, NH * ND, out);
        for (int i = 0; i < NH * ND; i++)
            if (fabs(out[i] - plain_mix((bk_mixing)mode, t, w, i)) > 2e-6 * (1.0 + fabs(out[i])))
                fail_msg("mode %d, head %d, distance %d: %.9g, expected %.9g", mode, i / ND, i % ND, (double)out[i],
                         plain_mix((bk_mixing)mode, t, w, i));
        bk_mix_tables_grouped((bk_mixing)mode, tables, w, 1, NT, NH * ND, out);
        bk_mix_tables((bk_mixing)mode, tables, w, NT, NH * ND, one);
        assert_memory_equal(out, one, sizeof out);
    }
}

/* L = sum_i c_i M_i in double, M from the plain formula, weights from the packed parameters. */
static double packed_loss(bk_mixing mode, const unsigned char *kind, const float *params, const double *logits0,
                          const float t[NT][NH * ND], const double *c)
{
    double logits[NH * NT], w[NH * NT];
    memcpy(logits, logits0, sizeof logits);
    bk_mix_weights_from_packed(mode, kind, NT, NH, params, logits, w);
    double loss = 0.0;
    for (int i = 0; i < NH * ND; i++)
        loss += c[i] * plain_mix(mode, t, w, i);
    return loss;
}

/* The gradients of mixing per head with learned weights, against central finite differences of the plain
 * formula: the tables' (bk_mix_backward_grouped) and the packed parameters' (bk_mix_packed_backward) for a
 * fixed term, a term with one learned weight and a term with one per head, in both modes. */
static void learned_weights_gradients_match_finite_differences(void **state)
{
    (void)state;
    float t[NT][NH * ND];
    make_tables(t);
    const float *tables[NT] = {t[0], t[1], t[2]};
    double c[NH * ND];
    for (int i = 0; i < NH * ND; i++)
        c[i] = 0.3 + 0.5 * cos(0.9 * i);
    const unsigned char kind[NT] = {BK_MIX_FIXED, BK_MIX_LEARNED, BK_MIX_LEARNED_PER_HEAD};
    assert_int_equal(bk_mix_param_count(kind, NT, NH), 1 + NH);
    for (int mode = 0; mode < 2; mode++) {
        const double given[NT] = {mode == BK_MIX_SUM ? 0.7 : 0.2, mode == BK_MIX_SUM ? -0.4 : 0.3, 0.5};
        float params[1 + NH];
        double logits0[NH * NT], w[NH * NT];
        bk_mix_params_init((bk_mixing)mode, kind, NT, NH, given, params, logits0);
        params[0] += 0.15f, params[1] -= 0.2f, params[3] += 0.3f; /* heads and terms apart */
        double logits[NH * NT];
        memcpy(logits, logits0, sizeof logits);
        bk_mix_weights_from_packed((bk_mixing)mode, kind, NT, NH, params, logits, w);
        if (mode == BK_MIX_SUM)
            for (int h = 0; h < NH; h++)
                assert_true(w[h * NT] == 0.7); /* a fixed sum weight stays as given, exactly */
        float mixed[NH * ND], dout[NH * ND], dt[NT][NH * ND];
        memset(dt, 0, sizeof dt);
        float *dtables[NT] = {dt[0], dt[1], dt[2]};
        for (int i = 0; i < NH * ND; i++)
            dout[i] = (float)c[i];
        bk_mix_tables_grouped((bk_mixing)mode, tables, w, NH, NT, NH * ND, mixed);
        double dw[NH * NT] = {0};
        bk_mix_backward_grouped((bk_mixing)mode, tables, w, NH, NT, NH * ND, mixed, dout, dtables, dw);
        float dparams[1 + NH] = {0};
        bk_mix_packed_backward((bk_mixing)mode, kind, NT, NH, w, dw, dparams);
        for (int p = 0; p < 1 + NH; p++) {
            float up[1 + NH], down[1 + NH];
            memcpy(up, params, sizeof up), memcpy(down, params, sizeof down);
            up[p] += 1e-3f, down[p] -= 1e-3f;
            double fd = (packed_loss((bk_mixing)mode, kind, up, logits0, t, c) -
                         packed_loss((bk_mixing)mode, kind, down, logits0, t, c)) / ((double)up[p] - down[p]);
            if (fabs(dparams[p] - fd) > 1e-4 * (1.0 + fabs(fd)))
                fail_msg("mode %d: d loss / d param %d = %.9g, finite differences %.9g", mode, p, (double)dparams[p],
                         fd);
        }
        /* the tables' gradient: dM_i/dT_t[i] from the formula, one head's weights */
        for (int k = 0; k < NT; k++)
            for (int i = 0; i < NH * ND; i++) {
                const int h = i / ND;
                double want = mode == BK_MIX_SUM ? c[i] * w[h * NT + k]
                                                 : c[i] * w[h * NT + k] * exp((double)t[k][i] - mixed[i]);
                if (fabs(dt[k][i] - want) > 1e-5 * (1.0 + fabs(want)))
                    fail_msg("mode %d: dT_%d[%d] = %.9g, expected %.9g", mode, k, i, (double)dt[k][i], want);
            }
    }
}

/* Every term learned with one weight and one row of weights: the packed functions are the plain ones bit
 * for bit (what keeps [attention] learn_weights = true where it was). */
static void packed_is_the_plain_path_when_every_weight_is_learned(void **state)
{
    (void)state;
    const unsigned char kind[NT] = {BK_MIX_LEARNED, BK_MIX_LEARNED, BK_MIX_LEARNED};
    const double given[NT] = {0.125, 0.5, 0.375};
    for (int mode = 0; mode < 2; mode++) {
        float packed[NT], plain[NT];
        double logits[NT], wp[NT], wq[NT];
        bk_mix_params_init((bk_mixing)mode, kind, NT, 1, given, packed, logits);
        bk_mix_params_from_weights((bk_mixing)mode, given, NT, plain);
        assert_memory_equal(packed, plain, sizeof packed);
        packed[1] += 0.3f, plain[1] += 0.3f;
        bk_mix_weights_from_packed((bk_mixing)mode, kind, NT, 1, packed, logits, wp);
        bk_mix_weights_from_params((bk_mixing)mode, plain, NT, wq);
        assert_memory_equal(wp, wq, sizeof wp);
        const double dw[NT] = {0.3, -1.7, 0.01};
        float gp[NT] = {0.5f, 0, 0}, gq[NT] = {0.5f, 0, 0};
        bk_mix_packed_backward((bk_mixing)mode, kind, NT, 1, wp, dw, gp);
        bk_mix_params_backward((bk_mixing)mode, wq, dw, NT, gq);
        assert_memory_equal(gp, gq, sizeof gp);
    }
}

/* Kernel mode with fixed terms beside a learned one: the fixed weights' ratio stays as given (the softmax
 * renormalises the row), a fixed weight of 0 stays 0, and the learned one moves. */
static void kernel_fixed_weights_keep_their_ratio(void **state)
{
    (void)state;
    const unsigned char kind[4] = {BK_MIX_FIXED, BK_MIX_LEARNED, BK_MIX_FIXED, BK_MIX_FIXED};
    const double given[4] = {0.2, 0.3, 0.5, 0.0};
    float params[1];
    double logits[4], w[4];
    bk_mix_params_init(BK_MIX_KERNEL, kind, 4, 1, given, params, logits);
    params[0] += 1.0f;
    bk_mix_weights_from_packed(BK_MIX_KERNEL, kind, 4, 1, params, logits, w);
    assert_float_equal(w[2] / w[0], 2.5, 1e-12);
    assert_true(w[3] == 0.0);
    assert_true(w[1] > 0.3);
    assert_float_equal(w[0] + w[1] + w[2], 1.0, 1e-12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sum_mode),
        cmocka_unit_test(kernel_mode_is_stable),
        cmocka_unit_test(kernel_mode_skips_zero_weights),
        cmocka_unit_test(weight_completion),
        cmocka_unit_test(kernel_backward_with_zero_weight_is_finite),
        cmocka_unit_test(per_head_mixing_matches_the_formula),
        cmocka_unit_test(learned_weights_gradients_match_finite_differences),
        cmocka_unit_test(packed_is_the_plain_path_when_every_weight_is_learned),
        cmocka_unit_test(kernel_fixed_weights_keep_their_ratio),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
