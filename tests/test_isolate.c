/* Untrusted code in a child process (util/isolate.h): an answer and its text come back; a crash, an
 * abort, an exit() and a hang each become an error naming what ran and what happened, quickly; a
 * grandchild that keeps the pipe open does not hold the parent. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include "util/isolate.h"

#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int answers(void *ctx, FILE *out, bk_error *err)
{
    (void)err;
    fprintf(out, "listing of %s\n", (const char *)ctx);
    for (int i = 0; i < 20000; i++) /* more than a pipe holds */
        fputs("0123456789", out);
    return BK_OK;
}

static int refuses(void *ctx, FILE *out, bk_error *err)
{
    (void)ctx;
    fputs("partial", out);
    return bk_fail(err, BK_ERR_CONFIG, "option 'x': expected a number");
}

static int crashes(void *ctx, FILE *out, bk_error *err)
{
    (void)ctx, (void)out, (void)err;
    raise(SIGSEGV);
    return BK_OK;
}

static int aborts(void *ctx, FILE *out, bk_error *err)
{
    (void)ctx, (void)out, (void)err;
    abort();
}

static int exits(void *ctx, FILE *out, bk_error *err)
{
    (void)out, (void)err;
    exit(*(int *)ctx);
    return BK_OK;
}

static int hangs(void *ctx, FILE *out, bk_error *err)
{
    (void)ctx, (void)out, (void)err;
    for (int forever = 1; forever;)
        pause();
    return BK_OK;
}

static int leaves_a_grandchild(void *ctx, FILE *out, bk_error *err)
{
    (void)ctx, (void)err;
    pid_t pid = fork();
    if (pid == 0) { /* holds the pipe's write end for a minute (and ctest's output: killed below) */
        sleep(60);
        _exit(0);
    }
    fprintf(out, "%d", (int)pid);
    return BK_OK;
}

static void test_answer_and_text(void **state)
{
    (void)state;
    bk_isolated res;
    bk_error err;
    bk_error_clear(&err);
    assert_int_equal(bk_isolate(answers, "alibi", 10, "plugin 'alibi'", &res, &err), BK_OK);
    assert_true(res.finished);
    assert_int_equal(res.output_len, strlen("listing of alibi\n") + 200000);
    assert_memory_equal(res.output, "listing of alibi\n", 17);
    free(res.output);
}

static void test_refusal_keeps_code_and_message(void **state)
{
    (void)state;
    bk_isolated res;
    bk_error err;
    assert_int_equal(bk_isolate(refuses, NULL, 10, "plugin 'x'", &res, &err), BK_ERR_CONFIG);
    assert_string_equal(err.message, "option 'x': expected a number");
    assert_true(res.finished);
    assert_string_equal(res.output, "partial");
    free(res.output);
}

static void test_crash(void **state)
{
    (void)state;
    bk_isolated res;
    bk_error err;
    assert_int_equal(bk_isolate(crashes, NULL, 10, "plugin 'bad' create()", &res, &err), BK_ERR_PLUGIN);
    assert_string_equal(err.message, "plugin 'bad' create() crashed with signal 11 (SIGSEGV, segmentation fault)");
    assert_false(res.finished);
    assert_int_equal(res.signal, SIGSEGV);
    assert_null(res.output);
}

static void test_abort(void **state)
{
    (void)state;
    bk_error err;
    assert_int_equal(bk_isolate(aborts, NULL, 10, "plugin 'bad'", NULL, &err), BK_ERR_PLUGIN);
    assert_string_equal(err.message, "plugin 'bad' crashed with signal 6 (SIGABRT, aborted)");
}

static void test_exit_is_not_success(void **state)
{
    (void)state;
    int codes[] = {0, 3};
    for (int i = 0; i < 2; i++) {
        bk_isolated res;
        bk_error err;
        assert_int_equal(bk_isolate(exits, &codes[i], 10, "plugin 'bad'", &res, &err), BK_ERR_PLUGIN);
        char want[200];
        snprintf(want, sizeof want, "plugin 'bad' ended the process (exit status %d) before finishing", codes[i]);
        assert_message_has(err.message, want);
        assert_false(res.finished);
        assert_int_equal(res.exit_status, codes[i]);
    }
}

static void test_hang_is_killed_at_the_limit(void **state)
{
    (void)state;
    bk_isolated res;
    bk_error err;
    double t0 = now_s();
    assert_int_equal(bk_isolate(hangs, NULL, 1, "plugin 'slow'", &res, &err), BK_ERR_PLUGIN);
    double took = now_s() - t0;
    assert_string_equal(err.message, "plugin 'slow' did not finish within 1 s (killed)");
    assert_true(res.timed_out);
    assert_true(took >= 0.9 && took < 5.0);
}

static void test_grandchild_does_not_hold_the_parent(void **state)
{
    (void)state;
    bk_isolated res;
    bk_error err;
    double t0 = now_s();
    assert_int_equal(bk_isolate(leaves_a_grandchild, NULL, 30, "plugin 'forks'", &res, &err), BK_OK);
    assert_true(now_s() - t0 < 5.0);
    int grandchild = atoi(res.output);
    assert_true(grandchild > 0);
    kill(grandchild, SIGKILL);
    free(res.output);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_answer_and_text),
        cmocka_unit_test(test_refusal_keeps_code_and_message),
        cmocka_unit_test(test_crash),
        cmocka_unit_test(test_abort),
        cmocka_unit_test(test_exit_is_not_success),
        cmocka_unit_test(test_hang_is_killed_at_the_limit),
        cmocka_unit_test(test_grandchild_does_not_hold_the_parent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
