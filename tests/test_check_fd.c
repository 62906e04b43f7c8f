/* biaskit check's finite differences per table entry (core/check/gradient.c), --tolerance and --params,
 * on the test plugins of tests/plugins/checkfd.c: a term that mixes scales (a large constant, a slope,
 * a tiny curvature through its exponent) passes with right gradients although L = sum w T alone fails
 * it through the float rounding of the outputs; a 2% wrong curvature gradient fails, naming the worst
 * entries; --tolerance loosens the check; --params checks at given parameters. */
#define _POSIX_C_SOURCE 200809L /* popen */
#include "check_report.h"

#include <math.h>
#include <sys/wait.h>

#define HEADS 12 /* the default geometry of bk_check_options_default */

/* The check of test plugin `file` with the default options but `tolerance` (0: the default) and
 * `params` (n values, may be NULL); the code, the report in a new *out. */
static int run_check(const char *file, double tolerance, const float *params, int64_t n, report **out, bk_error *err)
{
    bk_check_options opt;
    bk_check_options_default(&opt);
    if (tolerance != 0.0)
        opt.tolerance = tolerance;
    opt.params = params;
    opt.n_params = n;
    report *r = malloc(sizeof *r);
    assert_non_null(r);
    *out = r;
    return check_report_run(file, &opt, r, err);
}

static report *checked(const char *file, double tolerance, const float *params, int64_t n)
{
    report *r;
    bk_error err;
    if (run_check(file, tolerance, params, n, &r, &err) != BK_OK)
        fail_msg("bk_check_plugin(%s): %s", file, err.message);
    return r;
}

static const char *const no_failures[] = {NULL};
static const char *const gradient_fails[] = {"table-gradient", NULL};

/* (a) Right gradients, mixed scales: L fails one parameter through rounding (log_b[8] of the third
 * random set: exp(log_b) ~ 1e-9 moves entries of size ~1000 by less than their ulp over the first
 * 64 distances); per table entry it passes, and the item says so. The plain -a d - b d^2 passes too. */
static void mixed_scales_pass(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkfd_mixed.so", 0.0, NULL, 0);
    expect_only_failures(r, no_failures);
    static const char *const pass[] = {"tolerance 0.001", "failed L = sum w*out only through the float rounding",
                                       "matched per table entry", NULL};
    expect_item_has(r, "table-gradient", BK_CHECK_PASS, pass);
    free(r);
    r = checked("biaskit_checkfd_plain.so", 0.0, NULL, 0);
    expect_only_failures(r, no_failures);
    expect_item(r, "table-gradient", BK_CHECK_PASS, NULL);
    free(r);
}

/* (b) The curvature's gradient 2% off: the item fails and lists the worst entries (parameter, its
 * value, head, distance, analytic, numeric, rel. error, tolerance) and the parameter set. */
static void wrong_curvature_gradient_fails_with_its_entries(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkfd_mixedbad.so", 0.0, NULL, 0);
    expect_only_failures(r, gradient_fails);
    static const char *const fail[] = {"per table entry", "the worst: log_b[", ", head ", ", distance ", ": analytic ",
                                       " vs numeric ", "rel. error 1.9", "> tolerance 1.",
                                       "parameters (random parameter set ", "a[0] = ", "... (24 values)", NULL};
    expect_item_has(r, "table-gradient", BK_CHECK_FAIL, fail);
    /* the worst entries are the curvature's only: the slope's gradient is right */
    int k = find(r, "table-gradient");
    assert_true(k >= 0);
    const char *from = strstr(r->items[k].text, "the worst:"), *to = from ? strstr(from, "; parameters (") : NULL;
    assert_non_null(to);
    for (const char *a = strstr(from, " a["); a; a = strstr(a + 1, " a["))
        assert_true(a > to);
    free(r);
}

/* (c) --tolerance 0.05 lets the 2% error pass; 0, -1, NaN and infinity are usage errors. */
static void tolerance_option(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkfd_mixedbad.so", 0.05, NULL, 0);
    expect_only_failures(r, no_failures);
    static const char *const pass[] = {"tolerance 0.05", NULL};
    expect_item_has(r, "table-gradient", BK_CHECK_PASS, pass);
    free(r);
    const double bad[] = {0.0, -1.0, NAN, INFINITY};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        bk_error err;
        bk_check_options opt;
        bk_check_options_default(&opt);
        opt.tolerance = bad[k];
        report *q = malloc(sizeof *q);
        assert_non_null(q);
        assert_int_equal(check_report_run("alibi", &opt, q, &err), BK_ERR_USAGE);
        assert_message_has(err.message, "--tolerance must be a finite number > 0");
        assert_int_equal(q->n, 0);
        free(q);
    }
}

/* (d) A gradient wrong only where a_h > 2: the random sets never get there (pass); --params with
 * a_h = 4 checks there (fail, naming the given parameters); the wrong count is a usage error naming the
 * expected one; values param_project moves are said. */
static void params_option(void **state)
{
    (void)state;
    float p[2 * HEADS];
    for (int h = 0; h < HEADS; h++)
        p[h] = 4.0f, p[HEADS + h] = -9.5f;
    report *r = checked("biaskit_checkfd_farbad.so", 0.0, NULL, 0);
    expect_only_failures(r, no_failures);
    free(r);
    r = checked("biaskit_checkfd_farbad.so", 0.0, p, 2 * HEADS);
    expect_only_failures(r, gradient_fails);
    static const char *const fail[] = {"(the given parameters (--params))", "the worst: log_b[", "a[0] = 4, ", NULL};
    expect_item_has(r, "table-gradient", BK_CHECK_FAIL, fail);
    static const char *const finite[] = {"table finite at the given parameters (--params), 65536 distances", NULL};
    expect_item_has(r, "params", BK_CHECK_PASS, finite);
    free(r);
    /* right gradients at a_h = 9, beyond a_h <= 8: projected (and said), then checked */
    for (int h = 0; h < HEADS; h++)
        p[h] = 9.0f;
    r = checked("biaskit_checkfd_mixed.so", 0.0, p, 2 * HEADS);
    expect_only_failures(r, no_failures);
    static const char *const moved[] = {"the given parameters + 3 random parameter sets", NULL};
    expect_item_has(r, "table-gradient", BK_CHECK_PASS, moved);
    static const char *const moved_note[] = {"param_project moved 12 of 24, the first a[0] 9 -> 8", NULL};
    expect_item_has(r, "params", BK_CHECK_PASS, moved_note);
    free(r);
    bk_error err;
    assert_int_equal(run_check("biaskit_checkfd_farbad.so", 0.0, p, 2 * HEADS - 1, &r, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "--params: 23 values given");
    assert_message_has(err.message, "checkfd_farbad has 24 parameters");
    assert_message_has(err.message, "expected 24 comma-separated numbers");
    assert_int_equal(r->n, 0); /* before any item */
    free(r);
    p[3] = NAN;
    assert_int_equal(run_check("biaskit_checkfd_farbad.so", 0.0, p, 2 * HEADS, &r, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "--params: value 4 is nan");
    free(r);
}

/* The command line: --tolerance and --params parsed, their errors usage errors (exit status 2). */
static void command_line(void **state)
{
    (void)state;
    static const struct {
        const char *args, *needle;
        int status;
    } cases[] = {
        {"alibi --tolerance 0", "--tolerance: expected a finite number > 0", 2},
        {"alibi --tolerance -1", "--tolerance: expected a finite number > 0", 2},
        {"alibi --tolerance nan", "--tolerance: expected a finite number > 0", 2},
        {"alibi --tolerance 1e-3x", "--tolerance: expected a finite number > 0", 2},
        {"PLUGINS/biaskit_checkfd_farbad.so --params 1,2", "expected 24 comma-separated numbers", 2},
        {"PLUGINS/biaskit_checkfd_farbad.so --params 1,,2", "--params: value 2 ('') is not a finite number", 2},
        {"PLUGINS/biaskit_checkfd_farbad.so --params 1,inf", "--params: value 2 ('inf') is not a finite number", 2},
        {"PLUGINS/biaskit_checkfd_mixedbad.so --tolerance 0.05", "tolerance 0.05;", 0},
        {"alibi --params 1", "alibi has no parameters with this configuration (param_count() is 0)", 2},
        {"alibi --help", "--params V1,V2,...", 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char args[512], cmd[2048], out[1 << 16];
        const char *at = strstr(cases[k].args, "PLUGINS/");
        if (at)
            snprintf(args, sizeof args, "%s/%s", BK_TEST_PLUGINS_DIR, at + 8);
        else
            snprintf(args, sizeof args, "%s", cases[k].args);
        snprintf(cmd, sizeof cmd, "env -u BIASKIT_PLUGIN_PATH '%s/biaskit' check %s 2>&1", BK_TEST_BINARY_DIR, args);
        FILE *f = popen(cmd, "r");
        assert_non_null(f);
        size_t n = fread(out, 1, sizeof out - 1, f);
        out[n] = '\0';
        int status = pclose(f);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != cases[k].status)
            fail_msg("%s: exit status %d, expected %d:\n%s", cmd, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                     cases[k].status, out);
        assert_message_has(out, cases[k].needle);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mixed_scales_pass),
        cmocka_unit_test(wrong_curvature_gradient_fails_with_its_entries),
        cmocka_unit_test(tolerance_option),
        cmocka_unit_test(params_option),
        cmocka_unit_test(command_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
