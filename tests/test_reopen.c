/* Reopening a stored run (core/train/reopen.h): the overrides each purpose applies, and the requests
 * refused before any file is read (a resume without its optimizer or with --no-verify; an optimizer to
 * only read; more overrides than a request holds). Loading itself is test_checkpoint's. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "train/reopen.h"

#include <string.h>

static void overrides_per_purpose(void **state)
{
    (void)state;
    const char *user[2] = {"data.max_bytes=10", "run.threads=1"};
    const char *out[4];
    bk_reopen_request r = {BK_REOPEN_INSPECT, user, 2, 0, 0};
    assert_int_equal(bk_reopen_overrides(&r, out, 4), 3);
    assert_string_equal(out[0], "run.device=cpu"); /* first: the user's --set may say otherwise */
    assert_string_equal(out[2], "run.threads=1");
    r.purpose = BK_REOPEN_EVALUATE;
    assert_int_equal(bk_reopen_overrides(&r, out, 4), 2);
    assert_string_equal(out[0], "data.max_bytes=10");
    r.purpose = BK_REOPEN_RESUME;
    assert_int_equal(bk_reopen_overrides(&r, out, 1), 1); /* never past cap */
}

static void refused_before_reading(void **state)
{
    (void)state;
    bk_lm lm;
    bk_adamw opt;
    bk_error err;
    memset(&opt, 0, sizeof opt);
    bk_reopen_request r = {BK_REOPEN_RESUME, NULL, 0, 0, 1};
    assert_int_equal(bk_reopen("/nonexistent/ck.safetensors", &r, &lm, &opt, NULL, &err), BK_ERR_INTERNAL);
    assert_non_null(strstr(err.message, "verifies every tensor"));
    r.no_verify = 0;
    assert_int_equal(bk_reopen("/nonexistent/ck.safetensors", &r, &lm, NULL, NULL, &err), BK_ERR_INTERNAL);
    r.purpose = BK_REOPEN_EVALUATE;
    assert_int_equal(bk_reopen("/nonexistent/ck.safetensors", &r, &lm, &opt, NULL, &err), BK_ERR_INTERNAL);
    assert_non_null(strstr(err.message, "the optimizer state is only for resuming"));
    r.n_sets = BK_REOPEN_MAX_SETS + 1;
    assert_int_equal(bk_reopen("/nonexistent/ck.safetensors", &r, &lm, NULL, NULL, &err), BK_ERR_USAGE);
    /* a request that is fine reaches the file, and the reader names it */
    r.n_sets = 0;
    assert_int_not_equal(bk_reopen("/nonexistent/ck.safetensors", &r, &lm, NULL, NULL, &err), BK_OK);
    assert_non_null(strstr(err.message, "/nonexistent/ck.safetensors"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(overrides_per_purpose),
        cmocka_unit_test(refused_before_reading),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
