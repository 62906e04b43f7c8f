/* The empirical receptive field (analysis/erf.h, `biaskit erf`) on tiny models trained here: ALiBi
 * with a steep slope (4 per token: attention stays on the nearest keys, so the ERF is a few tokens)
 * and with slope 0 (no positional bias: attention spreads, the ERF is a large part of the window).
 * Also the model's attention-probability accessor and the distance re-indexing, by hand. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include "analysis/erf.h"
#include "analysis/trf.h"
#include "report/plot.h"
#include "train/checkpoint.h"
#include "train/train.h"
#include "util/rng.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define LENGTH 32

static char dir[128], steep[4096], flat[4096];

static void write_corpus(const char *path, int bytes)
{
    static const char *const words[] = {"alpha ", "beta ", "gamma ", "delta\n", "int x = 0;\n", "return y;\n"};
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    bk_rng rng = {11};
    for (int n = 0; n < bytes;) {
        const char *w = words[bk_rng_u64(&rng) % 6];
        fputs(w, f);
        n += (int)strlen(w);
    }
    fclose(f);
}

/* Train the experiment with ALiBi of one slope for every head into dir/NAME; *ckpt gets the checkpoint. */
static int train(const char *name, double slope, char *ckpt, size_t size)
{
    char config[256], out[256];
    snprintf(config, sizeof config, "%s/%s.toml", dir, name);
    FILE *f = fopen(config, "w");
    if (!f)
        return -1;
    fprintf(f, "[model]\nlayers = 2\nheads = 2\ndim = 16\n"
               "[train]\nlength = %d\nbatch = 4\nsteps = 6\nlr = 3e-3\nwarmup = 1\neval_every = 6\neval_batches = 1\n"
               "log_every = 100\n"
               "[data]\npaths = [\"corpus.txt\"]\nval_fraction = 0.1\n"
               "[run]\ndevice = \"cpu\"\n"
               "[[term]]\nplugin = \"alibi\"\nuniform_slope = %g\n",
            LENGTH, slope);
    fclose(f);
    snprintf(out, sizeof out, "%s/run_%s", dir, name);
    bk_train_options o = {0};
    o.config = config;
    o.out_dir = out;
    o.out = fopen("/dev/null", "w");
    bk_train_summary sum;
    bk_error err;
    int rc = bk_train(&o, &sum, &err);
    fclose(o.out);
    if (rc) {
        fprintf(stderr, "training %s: %s\n", name, err.message);
        return -1;
    }
    bk_copy_text(ckpt, size, sum.checkpoint);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/bk_test_erf_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    char path[256];
    snprintf(path, sizeof path, "%s/corpus.txt", dir);
    write_corpus(path, 30000);
    setenv("BIASKIT_PLUGIN_PATH", BK_TEST_PLUGIN_DIR, 1);
    omp_set_num_threads(2);
    if (train("steep", 4.0, steep, sizeof steep) || train("flat", 0.0, flat, sizeof flat))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Rows i = 1, 2 of a hand-made 3 x 3 attention: distance t collects P[i][i - t]. */
static void test_accumulate(void **state)
{
    (void)state;
    const float probs[9] = {1.0f, 0, 0, 0.25f, 0.75f, 0, 0.125f, 0.25f, 0.625f};
    double p[3] = {0, 0, 0};
    bk_erf_accumulate(probs, 1, 1, 3, 2, p);
    assert_true(p[0] == 0.75 + 0.625 && p[1] == 0.25 + 0.25 && p[2] == 0.125);
    bk_erf_accumulate(probs, 1, 1, 3, 3, p); /* adds the three rows */
    assert_true(p[0] == 2 * (0.75 + 0.625) + 1.0);
}

static void open_checkpoint(const char *path, bk_lm *lm, const char *set)
{
    const char *sets[2] = {"run.device=cpu", set};
    bk_error err;
    if (bk_checkpoint_load(path, sets, set ? 2 : 1, lm, NULL, NULL, &err))
        fail_msg("%s", err.message);
}

/* bk_gpt_attention_probs: kept by a training forward only; rows are distributions over j <= i. */
static void test_attention_probs(void **state)
{
    (void)state;
    bk_lm lm;
    open_checkpoint(steep, &lm, NULL);
    bk_error err;
    assert_int_equal(bk_bias_forward(&lm.bias, LENGTH, &err), BK_OK);
    assert_null(bk_gpt_attention_probs(&lm.gpt, 0));
    int32_t in[LENGTH];
    for (int t = 0; t < LENGTH; t++)
        in[t] = 97 + t % 7;
    assert_int_equal(bk_gpt_forward(&lm.gpt, in, NULL, 1, LENGTH, 0, &err), BK_OK);
    assert_null(bk_gpt_attention_probs(&lm.gpt, 0)); /* evaluation keeps no T x T buffer */
    assert_int_equal(bk_gpt_forward(&lm.gpt, in, NULL, 1, LENGTH, 1, &err), BK_OK);
    assert_null(bk_gpt_attention_probs(&lm.gpt, 2));
    assert_null(bk_gpt_attention_probs(&lm.gpt, -1));
    for (int l = 0; l < 2; l++) {
        const float *p = bk_gpt_attention_probs(&lm.gpt, l);
        assert_non_null(p);
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < LENGTH; i++) {
                const float *row = p + ((size_t)h * LENGTH + i) * LENGTH;
                double s = 0.0;
                for (int j = 0; j < LENGTH; j++) {
                    if (j > i)
                        assert_true(row[j] == 0.0f);
                    s += row[j];
                }
                assert_true(fabs(s - 1.0) < 1e-5);
            }
    }
    bk_lm_close(&lm);
}

/* ERF of every layer and head, and of their average, at eps = 0.1 and 0.01. */
static void measure(const char *ckpt, int64_t erf[5][2], int sequences, int *used)
{
    bk_lm lm;
    open_checkpoint(ckpt, &lm, NULL);
    bk_tokens tokens = {0};
    tokens.count = 4 * LENGTH;
    tokens.tokens = malloc((size_t)tokens.count * sizeof *tokens.tokens);
    snprintf(tokens.name, sizeof tokens.name, "generated");
    bk_rng rng = {5};
    for (int64_t n = 0; n < tokens.count; n++)
        tokens.tokens[n] = (uint16_t)(97 + bk_rng_u64(&rng) % 26);
    double profile[2 * 2 * LENGTH], mean[LENGTH] = {0}, prefix[LENGTH + 1];
    bk_error err;
    if (bk_erf_measure(&lm, &tokens, LENGTH, sequences, LENGTH / 4, profile, used, &err))
        fail_msg("%s", err.message);
    const double eps[2] = {0.1, 0.01};
    for (int k = 0; k < 4; k++) {
        const double *p = profile + (size_t)k * LENGTH;
        bk_rf_prefix(p, LENGTH, prefix);
        assert_true(fabs(prefix[LENGTH] - 1.0) < 1e-5); /* each averaged row is a distribution */
        for (int e = 0; e < 2; e++) {
            erf[k][e] = bk_rf_field(prefix, LENGTH, eps[e]);
            assert_true(erf[k][e] >= 1 && erf[k][e] <= LENGTH);
        }
        for (int t = 0; t < LENGTH; t++)
            mean[t] += p[t] / 4.0;
    }
    bk_rf_prefix(mean, LENGTH, prefix);
    for (int e = 0; e < 2; e++)
        erf[4][e] = bk_rf_field(prefix, LENGTH, eps[e]);
    free(tokens.tokens);
    bk_lm_close(&lm);
}

static void test_erf_steep_and_flat(void **state)
{
    (void)state;
    int64_t s[5][2], f[5][2];
    int used;
    measure(steep, s, 100, &used);
    assert_int_equal(used, 4); /* 4 x LENGTH tokens: four sequences, not 100 */
    for (int k = 0; k < 5; k++)
        if (s[k][0] > 2 || s[k][1] > 4)
            fail_msg("slope 4, row %d: ERF(0.1) = %lld, ERF(0.01) = %lld: expected at most 2 and 4", k,
                     (long long)s[k][0], (long long)s[k][1]);
    measure(flat, f, 2, &used);
    assert_int_equal(used, 2);
    if (f[4][0] < 4 * s[4][0] || f[4][0] < 8)
        fail_msg("slope 0: ERF(0.1) = %lld, expected at least 8 and 4x the steep model's %lld", (long long)f[4][0],
                 (long long)s[4][0]);
}

static void test_erf_refuses_device(void **state)
{
    (void)state;
    bk_lm lm;
    open_checkpoint(steep, &lm, "run.device=emulated");
    bk_tokens tokens = {0};
    uint16_t data[LENGTH] = {0};
    tokens.tokens = data, tokens.count = LENGTH;
    double profile[2 * 2 * LENGTH];
    int used;
    bk_error err;
    assert_int_equal(bk_erf_measure(&lm, &tokens, LENGTH, 1, 1, profile, &used, &err), BK_ERR_UNSUPPORTED);
    assert_message_has(err.message, "the model is on emulated: set run.device=cpu");
    bk_lm_close(&lm);
    open_checkpoint(steep, &lm, NULL);
    tokens.count = LENGTH - 1;
    assert_int_equal(bk_erf_measure(&lm, &tokens, LENGTH, 1, 1, profile, &used, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "ERF at length 32: the data (");
    assert_message_has(err.message, "has 31 tokens, fewer than one sequence");
    bk_lm_close(&lm);
}

/* ---- the command line ---------------------------------------------------------------------- */

static int run_cli(const char *args, char *out, size_t size)
{
    static char cmd[10000];
    snprintf(cmd, sizeof cmd, "'%s/biaskit' %s 2>&1", BK_TEST_BINARY_DIR, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_cli(void **state)
{
    (void)state;
    static char out[1 << 16], args[9000];
    /* CSV: every layer, head and the averages; every ERF and TRF in [1, L] */
    snprintf(args, sizeof args, "erf '%s' --sequences 4 --csv -", steep);
    assert_int_equal(run_cli(args, out, sizeof out), 0);
    assert_message_has(out, "layer,head,eps,erf,trf\n");
    assert_message_has(out, "\nall,all,0.01,");
    int rows = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char layer[8], head[8];
        double eps;
        long long erf, trf;
        if (sscanf(line, "%7[^,],%7[^,],%lf,%lld,%lld", layer, head, &eps, &erf, &trf) != 5)
            continue;
        assert_true(erf >= 1 && erf <= LENGTH && trf >= 1 && trf <= LENGTH);
        if (eps == 0.1)
            assert_int_equal(trf, 1); /* b_1 / b_0 = e^-4: the bias alone keeps 98% on the query itself */
        rows++;
    }
    assert_int_equal(rows, (2 * 2 + 2 + 1) * 2);

    /* the readable table beyond the training length, and the plot */
    char png[300];
    snprintf(png, sizeof png, "%s/erf.png", dir);
    snprintf(args, sizeof args, "erf '%s' --length 64 --sequences 2 --queries 8 --eps 0.1 --plot '%s'", flat, png);
    int rc = run_cli(args, out, sizeof out);
    assert_message_has(out, "2 sequences of 64 tokens, the last 8 queries of each (16 attention rows per head)");
    assert_message_has(out, "ERF(0.1)   TRF(0.1)");
    if (bk_plot_available()) {
        if (rc != 0)
            fail_msg("%s", out);
        struct stat st;
        assert_int_equal(stat(png, &st), 0);
        assert_true(st.st_size > 1000);
    }

    const struct {
        const char *args, *message;
        int code;
    } bad[] = {
        {"", "biaskit erf: expected one checkpoint", 2},
        {"--queries 0", "--queries: expected an integer in [1, 65536], got '0'", 2},
        {"--queries 40", "--queries: expected at most the length 32, got 40", 2},
        {"--length 0", "--length: expected an integer in [1, 65536], got '0'", 2},
        {"--eps 1", "--eps: expected numbers in (0, 1) separated by commas, got '1'", 2},
        {"--plot x.pdf", "--plot: expected a file name ending in .png, got 'x.pdf'", 2},
        {"--sequence 3", "unknown option '--sequence' (did you mean '--sequences'?)", 2},
        {"--set run.device=emulated", "the model is on emulated: set run.device=cpu", 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bad[i].args[0])
            snprintf(args, sizeof args, "erf '%s' %s", steep, bad[i].args);
        else
            snprintf(args, sizeof args, "erf");
        rc = run_cli(args, out, sizeof out);
        if (rc != bad[i].code)
            fail_msg("biaskit %s: exit %d, expected %d:\n%s", args, rc, bad[i].code, out);
        assert_message_has(out, bad[i].message);
    }
    /* an experiment file is not a checkpoint */
    snprintf(args, sizeof args, "erf '%s/steep.toml'", dir);
    assert_int_equal(run_cli(args, out, sizeof out), 2);
    assert_message_has(out, "steep.toml' is not a checkpoint: expected a .safetensors file written by 'biaskit train'");
    assert_int_equal(run_cli("erf --help", out, sizeof out), 0);
    assert_message_has(out, "usage: biaskit erf <checkpoint.safetensors>");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accumulate),
        cmocka_unit_test(test_attention_probs),
        cmocka_unit_test(test_erf_steep_and_flat),
        cmocka_unit_test(test_erf_refuses_device),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
