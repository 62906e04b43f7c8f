/* ALiBi's slopes against the reference get_slopes() values (the test vectors of
 * plugins/alibi/README.md) and, for head counts not listed there, against the recursion written out
 * independently here. */
#include "test_util.h"

#include "../plugins/alibi/alibi_math.h"

#include <math.h>

static void expect_slopes(int32_t n, const double *want)
{
    double got[64];
    bk_alibi_slopes(n, got);
    for (int32_t h = 0; h < n; h++)
        if (fabs(got[h] - want[h]) > 1e-8 * want[h])
            fail_msg("n=%d head %d: got %.10g, want %.10g", (int)n, (int)h, got[h], want[h]);
}

static void eight_heads(void **state)
{
    (void)state;
    const double want[8] = {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625};
    expect_slopes(8, want);
}

static void twelve_heads(void **state)
{
    (void)state;
    const double want[12] = {0.5,       0.25,       0.125,     0.0625,     0.03125,   0.015625,
                             0.0078125, 0.00390625, 0.70710678, 0.35355339, 0.1767767, 0.08838835};
    double got[12];
    bk_alibi_slopes(12, got);
    for (int h = 0; h < 12; h++) /* the test vectors have 8 significant digits */
        if (fabs(got[h] - want[h]) > 5e-9)
            fail_msg("n=12 head %d: got %.10g, want %.10g", h, got[h], want[h]);
}

static void sixteen_heads(void **state)
{
    (void)state;
    double want[16];
    for (int h = 0; h < 16; h++) /* 0.70710678, 0.5, 0.35355339, 0.25, ..., 0.00390625 */
        want[h] = pow(2.0, -0.5 * (h + 1));
    expect_slopes(16, want);
    double got[16];
    bk_alibi_slopes(16, got);
    assert_true(fabs(got[0] - 0.70710678) < 5e-9);
    assert_true(fabs(got[2] - 0.35355339) < 5e-9);
    assert_true(fabs(got[15] - 0.00390625) < 1e-15);
}

/* get_slopes(n) written out again, without sharing code with the plugin. */
static void reference(int32_t n, double *out)
{
    int32_t c = 1;
    while (2 * c <= n)
        c *= 2;
    for (int32_t i = 0; i < c; i++)
        out[i] = pow(2.0, -8.0 * (i + 1) / c);
    for (int32_t k = 0; c + k < n; k++)
        out[c + k] = pow(2.0, -8.0 * (2 * k + 1) / (2 * c));
}

static void other_head_counts(void **state)
{
    (void)state;
    const int32_t counts[] = {1, 2, 3, 5, 6, 7, 24, 40, 64};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        double want[64];
        reference(counts[i], want);
        expect_slopes(counts[i], want);
    }
    double one;
    bk_alibi_slopes(1, &one);
    assert_true(one == 1.0 / 256); /* 2^(-8/1) */
}

static void bias_is_minus_slope_times_distance(void **state)
{
    (void)state;
    assert_true(bk_alibi_bias(0.5f, 0) == 0.0f);
    assert_true(bk_alibi_bias(0.5f, 3) == -1.5f);
    assert_true(bk_alibi_bias(0.25f, 65535) == -16383.75f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(eight_heads),
        cmocka_unit_test(twelve_heads),
        cmocka_unit_test(sixteen_heads),
        cmocka_unit_test(other_head_counts),
        cmocka_unit_test(bias_is_minus_slope_times_distance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
