/* The qin plugin (Qin et al., "Exploring Transformer Extrapolation"): each form's values at chosen
 * distances, the same table in every head, no parameters, long tables, the series the paper reasons
 * about, and bad options. The plugin is loaded through the engine. */
#include "term_fixture.h"

#include "bias/terms.h"

#include "../plugins/qin/qin_math.h"

#include <math.h>
#include <stdlib.h>

/* The table of the term in `options` (3 heads) for distances 0 .. D-1, checked identical across heads;
 * returns head 0's row in `row`. */
static void table_of(const char *options, int32_t D, float *row)
{
    char text[512];
    snprintf(text, sizeof text, "[model]\nheads = 3\ndim = 24\n[[term]]\nplugin = \"qin\"\n%s", options);
    fixture f;
    bk_error err;
    if (open_terms(&f, text, &err) != BK_OK)
        fail_msg("%s", err.message);
    const bk_term *t = &f.set.terms[0];
    assert_int_equal(t->n_params, 0); /* parameter-free */
    assert_null(bk_term_theta(t, 0));
    float *table = malloc(sizeof *table * 3 * (size_t)D);
    assert_non_null(table);
    if (bk_term_table(t, 0, D, table, &err) != BK_OK) /* the engine checks that every value is finite */
        fail_msg("%s: %s", options, err.message);
    for (int h = 1; h < 3; h++) /* the same bias in every head */
        assert_memory_equal(table + (size_t)h * (size_t)D, table, sizeof *table * (size_t)D);
    memcpy(row, table, sizeof *row * (size_t)D);
    free(table);
    close_terms(&f);
}

static void expect_values(const char *options, const int32_t *t, const double *want, size_t n)
{
    float row[1001];
    table_of(options, 1001, row);
    for (size_t i = 0; i < n; i++)
        if (fabs((double)row[t[i]] - want[i]) > 2e-7 * (1.0 + fabs(want[i])))
            fail_msg("%s t = %d: %.9g, want %.9g", options[0] ? options : "(defaults)", t[i], (double)row[t[i]],
                     want[i]);
}

static void type1(void **state)
{
    (void)state;
    const int32_t t[] = {0, 1, 2, 9, 999};
    const double want[] = {0.0, -2 * log(2.0), -2 * log(3.0), -2 * log(10.0), -2 * log(1000.0)};
    expect_values("", t, want, 5); /* type1 is the default form */
    expect_values("form = \"type1\"\n", t, want, 5);
    /* exp(T) = 1/(t+1)^2: b_0 = 1 on the diagonal, b_1 = 1/4 */
    float row[4];
    table_of("", 4, row);
    assert_true(row[0] == 0.0f && !signbit(row[0]));
    assert_float_equal(exp(row[1]), 0.25, 1e-7);
    assert_float_equal(exp(row[3]), 1.0 / 16, 1e-8);
}

static void type2(void **state)
{
    (void)state;
    const int32_t t[] = {0, 1, 2, 99, 1000};
    const double l2 = log(2.0), l3 = log(3.0), l100 = log(100.0), l1001 = log(1001.0);
    const double want[] = {0.0, -l2 * l2, -l3 * l3, -l100 * l100, -l1001 * l1001};
    expect_values("form = \"type2\"\n", t, want, 5);
}

static void harmonic(void **state)
{
    (void)state;
    const int32_t t[] = {0, 1, 3, 999};
    const double want[] = {0.0, -log(2.0), -log(4.0), -log(1000.0)};
    expect_values("form = \"harmonic\"\n", t, want, 4);
    /* the offset is ignored by the other forms */
    expect_values("form = \"harmonic\"\noffset = 7\n", t, want, 4);
}

static void nlogn(void **state)
{
    (void)state;
    const int32_t t[] = {0, 1, 8, 998};
    /* default offset 2: n = t + 2 */
    const double want[] = {-log(2 * log(2.0)), -log(3 * log(3.0)), -log(10 * log(10.0)), -log(1000 * log(1000.0))};
    expect_values("form = \"nlogn\"\n", t, want, 4);
    expect_values("form = \"nlogn\"\noffset = 2\n", t, want, 4);
    const double want5[] = {-log(5 * log(5.0)), -log(6 * log(6.0)), -log(13 * log(13.0)), -log(1003 * log(1003.0))};
    expect_values("form = \"nlogn\"\noffset = 5\n", t, want5, 4);
    /* -ln(2 ln 2) = -0.3266...: the one form whose diagonal bias is not 0 */
    assert_float_equal(bk_qin_bias(BK_QIN_NLOGN, 2, 0), -0.32663425997828094, 1e-7);
}

/* Every form decreases with distance, and the series sum exp(T_t) behaves as the paper says:
 * type1 converges to pi^2/6 (n = t + 1), harmonic grows like ln D (diverges). */
static void series(void **state)
{
    (void)state;
    enum { D = 65536 };
    float *row = malloc(sizeof *row * D);
    assert_non_null(row);
    const char *forms[] = {"form = \"type1\"\n", "form = \"type2\"\n", "form = \"harmonic\"\n", "form = \"nlogn\"\n"};
    double sums[4];
    for (int k = 0; k < 4; k++) {
        table_of(forms[k], D, row); /* 65536 distances: finite (checked by the engine) */
        double s = 0;
        for (int32_t t = 0; t < D; t++) {
            if (t > 0 && !(row[t] < row[t - 1]))
                fail_msg("%s: T(%d) = %g is not below T(%d) = %g", forms[k], t, (double)row[t], t - 1,
                         (double)row[t - 1]);
            s += exp((double)row[t]);
        }
        sums[k] = s;
    }
    const double pi = 3.14159265358979323846;
    assert_float_equal(sums[0], pi * pi / 6 - 1.0 / (D + 0.5), 1e-5);     /* sum 1/(t+1)^2 */
    assert_float_equal(sums[1], 2.2382, 1e-3);                          /* sum exp(-ln^2(t+1)), plugins/qin/README.md */
    assert_float_equal(sums[2], log((double)D) + 0.5772156649, 1e-4);   /* harmonic number H_D */
    assert_true(sums[3] > log(log(D + 1.0)) - log(log(3.0)));           /* sum 1/(n ln n) > ln ln(D+1) - ln ln 3 */
    free(row);
    /* the header at the far end of int32 stays finite */
    for (int form = 0; form < 4; form++)
        assert_true(isfinite(bk_qin_bias(form, INT32_MAX, INT32_MAX)));
}

static void bad_options(void **state)
{
    (void)state;
    expect_term_error("[[term]]\nplugin = \"qin\"\nform = \"nlogn\"\noffset = 1\n", "exp.toml:4:10: ",
                 "option 'offset': expected an integer in [2, 2147483647], got 1");
    expect_term_error("[[term]]\nplugin = \"qin\"\nform = \"nlogn\"\noffset = 0\n", "option 'offset'", "got 0");
    expect_term_error("[[term]]\nplugin = \"qin\"\noffset = -3\n", "option 'offset'", "got -3");
    expect_term_error("[[term]]\nplugin = \"qin\"\nform = \"type3\"\n", "exp.toml:3:8: ",
                 "option 'form': expected one of type1, type2, harmonic, nlogn, got 'type3'");
    expect_term_error("[[term]]\nplugin = \"qin\"\nform = 1\n", "option 'form'", "expected a string");
    expect_term_error("[[term]]\nplugin = \"qin\"\noffset = 2.5\n", "option 'offset'", "expected an integer");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(type1), cmocka_unit_test(type2),  cmocka_unit_test(harmonic),
        cmocka_unit_test(nlogn), cmocka_unit_test(series), cmocka_unit_test(bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
