/* Paths and run directories (util/path.h, train/rundir.h): the path rule's helpers, the default run
 * directory, the run-directory lock, the metrics log cut back to a checkpoint on resume, and a run
 * directory named through a symbolic link to another run. */
#define _DEFAULT_SOURCE /* realpath, symlink */
#include "test_util.h"

#include "train/rundir.h"
#include "util/path.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/bk_test_rundir_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void clean(const char *in, const char *want)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", in);
    bk_path_clean(buf);
    assert_string_equal(buf, want);
}

static void title(const char *in, const char *want)
{
    char buf[256];
    bk_path_title(in, buf, sizeof buf);
    assert_string_equal(buf, want);
}

/* The names figure titles give experiments and runs (trf, erf). */
static void test_title(void **state)
{
    (void)state;
    title("examples/demo_alibi.toml", "demo_alibi");
    title("runs/demo_alibi/checkpoint.safetensors", "demo_alibi");
    title("./runs/x//checkpoint-100.safetensors", "x");
    title("checkpoint.safetensors", "checkpoint");
    title("model.safetensors", "model");
    title("/abs/plain", "plain");
}

static void test_clean(void **state)
{
    (void)state;
    clean("examples/../runs/demo", "examples/../runs/demo"); /* ".." stays: "examples" may be a link */
    clean("a//b/./c/", "a/b/c");
    clean("./x", "x");
    clean("/", "/");
    clean("//a/./", "/a");
    clean(".", ".");
    clean("./", ".");
    clean("", ".");
}

static void test_resolve(void **state)
{
    (void)state;
    char out[64];
    bk_error err;
    assert_int_equal(bk_path_resolve("/exp/dir", "corpus", out, sizeof out, &err), BK_OK);
    assert_string_equal(out, "/exp/dir/corpus");
    assert_int_equal(bk_path_resolve("/exp/dir", "./plugins/x.so", out, sizeof out, &err), BK_OK);
    assert_string_equal(out, "/exp/dir/plugins/x.so");
    assert_int_equal(bk_path_resolve("/exp/dir", "/abs/data", out, sizeof out, &err), BK_OK);
    assert_string_equal(out, "/abs/data");
    assert_int_equal(bk_path_resolve(NULL, "rel/./d", out, sizeof out, &err), BK_OK); /* the working directory */
    assert_string_equal(out, "rel/d");
    char tiny[8];
    assert_int_equal(bk_path_resolve("/exp/dir", "corpus", tiny, sizeof tiny, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "path 'corpus' read from '/exp/dir' is longer than 7 bytes");
}

static void test_dir_of(void **state)
{
    (void)state;
    char out[4096], cwd[4096];
    bk_error err;
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(bk_path_dir_of("exp.toml", out, sizeof out, &err), BK_OK);
    assert_string_equal(out, cwd); /* absolute: a checkpoint stores it */
    assert_int_equal(bk_path_dir_of("/no/such/dir/exp.toml", out, sizeof out, &err), BK_OK);
    assert_string_equal(out, "/no/such/dir");
    assert_int_equal(bk_path_dir_of("/exp.toml", out, sizeof out, &err), BK_OK);
    assert_string_equal(out, "/");
}

static void test_lock(void **state)
{
    (void)state;
    char run[512];
    snprintf(run, sizeof run, "%s/deep/run", dir);
    bk_run_dir a, b;
    bk_error err;
    assert_int_equal(bk_run_dir_open(&a, run, &err), BK_OK);
    assert_true(a.lock_fd >= 0);
    /* a second trainer (here: a second open file description) is refused at once, naming the holder */
    assert_int_equal(bk_run_dir_open(&b, run, &err), BK_ERR_IO);
    char want[9000];
    snprintf(want, sizeof want, "the run directory '%s' is in use by another training (pid %ld, lock %s/%s)", a.path,
             (long)getpid(), a.path, BK_RUN_LOCK_FILE);
    assert_message_has(err.message, want);
    bk_run_dir_close(&a);
    char lock[4200];
    snprintf(lock, sizeof lock, "%s/%s", a.path, BK_RUN_LOCK_FILE);
    struct stat sb;
    assert_int_not_equal(stat(lock, &sb), 0); /* the lock file goes with the training */
    assert_int_equal(bk_run_dir_open(&b, run, &err), BK_OK); /* released */
    assert_int_equal(stat(lock, &sb), 0);
    bk_run_dir_close(&b);
    assert_int_not_equal(stat(lock, &sb), 0);
    /* a crash leaves the file (with a dead pid): harmless, the flock died with the process; the next
     * training takes it and removes it when it ends */
    FILE *f = fopen(lock, "w");
    assert_non_null(f);
    fputs("999999999\n", f);
    fclose(f);
    assert_int_equal(bk_run_dir_open(&a, run, &err), BK_OK);
    bk_run_dir_close(&a);
    assert_int_not_equal(stat(lock, &sb), 0);
    /* a holder whose file was removed and replaced under it (the race bk_run_dir_open guards against)
     * does not remove the new file */
    assert_int_equal(bk_run_dir_open(&a, run, &err), BK_OK);
    assert_int_equal(unlink(lock), 0);
    f = fopen(lock, "w");
    assert_non_null(f);
    fclose(f);
    bk_run_dir_close(&a);
    assert_int_equal(stat(lock, &sb), 0);
}

static void test_stale_temporaries_go(void **state)
{
    (void)state;
    char run[512], tmp[4200], keep[4200];
    snprintf(run, sizeof run, "%s/stale", dir);
    bk_run_dir rd;
    bk_error err;
    assert_int_equal(bk_run_dir_open(&rd, run, &err), BK_OK);
    bk_run_dir_close(&rd);
    snprintf(tmp, sizeof tmp, "%s/%s.tmp.123.abc", rd.path, BK_RUN_CHECKPOINT_FILE);
    snprintf(keep, sizeof keep, "%s/notes.tmp", rd.path);
    fclose(fopen(tmp, "w"));
    fclose(fopen(keep, "w"));
    assert_int_equal(bk_run_dir_open(&rd, run, &err), BK_OK);
    assert_int_not_equal(access(tmp, F_OK), 0); /* a killed checkpoint write's leftover */
    assert_int_equal(access(keep, F_OK), 0);    /* someone else's file stays */
    bk_run_dir_close(&rd);
}

static void test_metrics_cut_on_resume(void **state)
{
    (void)state;
    char run[512], path[4200];
    snprintf(run, sizeof run, "%s/metrics", dir);
    bk_run_dir rd;
    bk_error err;
    assert_int_equal(bk_run_dir_open(&rd, run, &err), BK_OK);
    snprintf(path, sizeof path, "%s/%s", rd.path, BK_RUN_METRICS_FILE);
    FILE *f = fopen(path, "w");
    fputs("{\"step\": 1, \"loss\": 5.0}\n{\"step\": 2, \"loss\": 4.0}\n{\"step\": 2, \"val_loss\": 4.5}\n"
          "{\"step\": 3, \"loss\": 3.0}\n{\"step\": 4, \"lo",
          f);
    fclose(f);
    FILE *m = NULL;
    assert_int_equal(bk_run_dir_metrics(&rd, 1, 2, &m, &err), BK_OK); /* resumed at step 2 */
    fputs("{\"step\": 3, \"loss\": 3.5}\n", m);
    fclose(m);
    char text[512] = "";
    f = fopen(path, "r");
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    assert_string_equal(text, "{\"step\": 1, \"loss\": 5.0}\n{\"step\": 2, \"loss\": 4.0}\n{\"step\": 2, \"val_loss\": 4.5}\n"
                              "{\"step\": 3, \"loss\": 3.5}\n");
    /* a new run starts the log empty */
    assert_int_equal(bk_run_dir_metrics(&rd, 0, 0, &m, &err), BK_OK);
    fclose(m);
    f = fopen(path, "r");
    assert_int_equal(fgetc(f), EOF);
    fclose(f);
    bk_run_dir_close(&rd);
}

/* A run directory named through a symbolic link: refused when the link's target holds another run (a
 * checkpoint or a metrics log) that the training does not resume; allowed to an empty directory and
 * when resuming the run the link names; --out '' is a usage error, not the working directory. */
static void test_choose_refuses_a_link_to_another_run(void **state)
{
    (void)state;
    char a[512], link_a[512], empty[512], link_e[512], ckpt[600], out[4096], want[9000], real_a[4096];
    snprintf(a, sizeof a, "%s/A", dir);
    snprintf(link_a, sizeof link_a, "%s/B", dir);
    snprintf(empty, sizeof empty, "%s/empty", dir);
    snprintf(link_e, sizeof link_e, "%s/E", dir);
    assert_int_equal(mkdir(a, 0777), 0);
    assert_int_equal(mkdir(empty, 0777), 0);
    assert_int_equal(symlink("A", link_a), 0);
    assert_int_equal(symlink("empty", link_e), 0);
    assert_non_null(realpath(a, real_a));
    bk_lm lm;
    memset(&lm, 0, sizeof lm);
    char exp_path[] = "exp.toml";
    lm.exp.path = exp_path;
    bk_error err;
    assert_int_equal(bk_run_dir_choose(&lm, "", NULL, out, sizeof out, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "--out: expected a directory, got an empty string");
    assert_int_equal(bk_run_dir_choose(&lm, link_a, NULL, out, sizeof out, &err), BK_OK); /* A holds no run yet */
    assert_int_equal(bk_run_dir_choose(&lm, link_e, NULL, out, sizeof out, &err), BK_OK);
    const char *files[] = {BK_RUN_METRICS_FILE, BK_RUN_CHECKPOINT_FILE};
    for (int k = 0; k < 2; k++) {
        snprintf(ckpt, sizeof ckpt, "%s/%s", a, files[k]);
        fclose(fopen(ckpt, "w"));
        assert_int_equal(bk_run_dir_choose(&lm, link_a, NULL, out, sizeof out, &err), BK_ERR_IO);
        const char *named = k == 0 ? BK_RUN_METRICS_FILE : BK_RUN_CHECKPOINT_FILE; /* the checkpoint first */
        snprintf(want, sizeof want, "--out '%s' is a symbolic link to '%s', which holds another run (%s)", link_a,
                 real_a, named);
        assert_message_has(err.message, want);
    }
    /* resuming the run the link names is fine, through either name; another checkpoint is not */
    assert_int_equal(bk_run_dir_choose(&lm, link_a, ckpt, out, sizeof out, &err), BK_OK);
    char via_link[700], other[700];
    snprintf(via_link, sizeof via_link, "%s/%s", link_a, BK_RUN_CHECKPOINT_FILE);
    assert_int_equal(bk_run_dir_choose(&lm, link_a, via_link, out, sizeof out, &err), BK_OK);
    assert_int_equal(bk_run_dir_choose(&lm, NULL, via_link, out, sizeof out, &err), BK_OK); /* its own directory */
    snprintf(other, sizeof other, "%s/%s", empty, BK_RUN_CHECKPOINT_FILE);
    fclose(fopen(other, "w"));
    assert_int_equal(bk_run_dir_choose(&lm, link_a, other, out, sizeof out, &err), BK_ERR_IO);
    /* naming the directory itself replaces the run, as it always has */
    assert_int_equal(bk_run_dir_choose(&lm, a, NULL, out, sizeof out, &err), BK_OK);
    /* [run] out_dir is held to the same rule */
    lm.exp.run.out_dir = "B";
    lm.config_dir = dir;
    assert_int_equal(bk_run_dir_choose(&lm, NULL, NULL, out, sizeof out, &err), BK_ERR_IO);
    assert_message_has(err.message, "[run] out_dir '");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean),
        cmocka_unit_test(test_title),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_dir_of),
        cmocka_unit_test_setup_teardown(test_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_temporaries_go, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_cut_on_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_choose_refuses_a_link_to_another_run, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
