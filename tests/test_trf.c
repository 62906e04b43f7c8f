/* The theoretical receptive field (analysis/trf.h) of Qin, Zhong & Deng, "Exploring Transformer
 * Extrapolation" (arXiv 2307.10156):
 *   - the window table: TRF_L(eps) of seven bias series at L = 512, 9216, 200000 and eps = 0.1, 0.01
 *     (42 numbers), from the closed forms in double, and again end to end through the built-in plugins'
 *     fp32 tables (alibi, qin, kerple) with the convergence verdicts;
 *   - ALiBi's closed form TRF(eps) = floor(ln(1/eps) / k) + 1 for the 8- and 12-head slopes;
 *   - the field's edge cases, the `draw` curve, the parsers;
 *   - `biaskit trf` on the command line: its CSV, per-layer terms, and bad arguments (exit 2). */
#define _POSIX_C_SOURCE 200809L
#include "term_fixture.h"

#include "analysis/trf.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#define N_FORMS 7
#define LONGEST 200000

static const int64_t windows[3] = {512, 9216, 200000};
static const double epsilons[2] = {0.1, 0.01};

/* The seven series of the table, as the logit bias r_t = ln b_t. */
static double closed_form(int form, double t)
{
    switch (form) {
    case 0: return -t;                                   /* ALiBi, slope 1: e^-t */
    case 1: return -2.0 * log(t + 1.0);                  /* Type 1: (t+1)^-2 */
    case 2: return -log(t + 1.0) * log(t + 1.0);         /* Type 2: e^{-ln^2(t+1)} */
    case 3: return -sqrt(t);                             /* KERPLE-power k=1, r=0.5: e^-sqrt(t) */
    case 4: return -1.5 * log1p(t);                      /* KERPLE-log k=1, r=1.5: (1+t)^-1.5 */
    case 5: return -log(t + 1.0);                        /* Example 1: 1/(t+1) */
    default: return -(log(t + 2.0) + log(log(t + 2.0))); /* Example 2: 1/((t+2) ln(t+2)) */
    }
}

/* The table, (eps = 0.1, eps = 0.01) at each window. */
static const int64_t expected[N_FORMS][3][2] = {
    {{3, 5}, {3, 5}, {3, 5}},
    {{6, 54}, {6, 60}, {6, 61}},
    {{4, 9}, {4, 9}, {4, 9}},
    {{13, 41}, {13, 41}, {13, 41}},
    {{34, 310}, {51, 1830}, {57, 4286}},
    {{259, 479}, {3492, 8364}, {55701, 176001}},
    {{120, 436}, {861, 7033}, {6490, 134625}},
};
/* TRF stops moving between 9216 and 200000 for the first four only */
static const int settled[N_FORMS] = {1, 1, 1, 1, 0, 0, 0};
/* ... and the verdict: KERPLE-log's TRF(0.01) moves (1830 -> 4286) but its tail beyond 9216 holds
 * 0.6% of the mass, below the smallest eps (1%): saturated, not growing (it converges); the two
 * divergent examples hold 9% and 25% there */
static const bk_trf_verdict verdicts[N_FORMS] = {BK_TRF_SETTLED,   BK_TRF_SETTLED, BK_TRF_SETTLED, BK_TRF_SETTLED,
                                                 BK_TRF_SATURATED, BK_TRF_GROWING, BK_TRF_GROWING};
static const char *const names[N_FORMS] = {"alibi k=1", "type 1",   "type 2",   "kerple-power",
                                           "kerple-log", "example 1", "example 2"};

/* The same series as experiments of the built-in plugins. */
static const char *const experiments[N_FORMS] = {
    "[model]\nheads = 2\n[[term]]\nplugin = \"alibi\"\nuniform_slope = 1.0\n",
    "[model]\nheads = 2\n[[term]]\nplugin = \"qin\"\nform = \"type1\"\n",
    "[model]\nheads = 2\n[[term]]\nplugin = \"qin\"\nform = \"type2\"\n",
    "[model]\nheads = 2\n[[term]]\nplugin = \"kerple\"\nvariant = \"power\"\nlearnable = false\nr1 = [1.0]\nr2 = [0.5]\n",
    "[model]\nheads = 2\n[[term]]\nplugin = \"kerple\"\nvariant = \"log\"\nlearnable = false\nr1 = [1.5]\nr2 = [1.0]\n",
    "[model]\nheads = 2\n[[term]]\nplugin = \"qin\"\nform = \"harmonic\"\n",
    "[model]\nheads = 2\n[[term]]\nplugin = \"qin\"\nform = \"nlogn\"\noffset = 2\n",
};

static double *b, *prefix;
static float *table;

static int setup(void **state)
{
    (void)state;
    b = malloc(LONGEST * sizeof *b);
    prefix = malloc((LONGEST + 1) * sizeof *prefix);
    table = malloc((size_t)12 * LONGEST * sizeof *table);
    return b && prefix && table ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    free(b), free(prefix), free(table);
    return 0;
}

static void check_result(const bk_trf_result *r, int form, const char *where)
{
    for (int w = 0; w < 3; w++)
        for (int e = 0; e < 2; e++)
            if (r->field[w][e] != expected[form][w][e])
                fail_msg("%s (%s): TRF_%lld(%g) = %lld, expected %lld", names[form], where, (long long)windows[w],
                         epsilons[e], (long long)r->field[w][e], (long long)expected[form][w][e]);
    if (r->settled != settled[form])
        fail_msg("%s (%s): verdict %d, expected %d (tail %g)", names[form], where, r->settled, settled[form], r->tail);
    if (r->verdict != verdicts[form])
        fail_msg("%s (%s): %s, expected %s (tail %g)", names[form], where, bk_trf_verdict_name(r->verdict),
                 bk_trf_verdict_name(verdicts[form]), r->tail);
}

/* The 42 numbers from the closed forms in double; ">" instead of ">=" gives the same ones. */
static void test_window_table_closed_forms(void **state)
{
    (void)state;
    for (int f = 0; f < N_FORMS; f++) {
        for (int64_t t = 0; t < LONGEST; t++)
            b[t] = exp(closed_form(f, (double)t));
        bk_trf_result r;
        bk_error err;
        if (bk_trf_analyse(b, 0.0, windows, 3, epsilons, 2, prefix, &r, &err))
            fail_msg("%s", err.message);
        check_result(&r, f, "closed form");
        for (int w = 0; w < 3; w++)
            for (int e = 0; e < 2; e++) {
                double threshold = (1.0 - epsilons[e]) * prefix[windows[w]];
                int64_t j = 0;
                while (j < windows[w] && !(prefix[j] > threshold))
                    j++;
                assert_int_equal(j, expected[f][w][e]);
            }
        /* the partial sums: Type 1 tends to pi^2/6, ALiBi to 1/(1 - 1/e) */
        if (f == 0)
            assert_true(fabs(r.sum[2] - 1.0 / (1.0 - exp(-1.0))) < 1e-14);
        if (f == 1)
            assert_true(fabs(r.sum[2] - 1.6449340668482264) < 1e-5);
        assert_true(r.tail >= 0.0 && r.tail < 1.0);
    }
}

/* The same table through the plugins: their fp32 tables, each term's and the mixed one. */
static void test_window_table_plugins(void **state)
{
    (void)state;
    for (int f = 0; f < N_FORMS; f++) {
        fixture fx;
        open_ok(&fx, experiments[f]);
        assert_int_equal(fx.set.n, 1);
        bk_error err;
        for (int mixed = 0; mixed < 2; mixed++) {
            int n_terms = 1;
            int rc = mixed ? bk_terms_mixed_table(&fx.set, 0, BK_STREAM_TOKEN, LONGEST, table, &n_terms, &err)
                           : bk_term_table(&fx.set.terms[0], 0, LONGEST, table, &err);
            if (rc)
                fail_msg("%s: %s", names[f], err.message);
            assert_int_equal(n_terms, 1);
            for (int h = 0; h < fx.set.geometry.n_heads; h++) {
                double m = bk_rf_kernel(table + (size_t)h * LONGEST, LONGEST, b);
                bk_trf_result r;
                if (bk_trf_analyse(b, m, windows, 3, epsilons, 2, prefix, &r, &err))
                    fail_msg("%s", err.message);
                check_result(&r, f, mixed ? "plugin, mixed table" : "plugin table");
            }
        }
        close_terms(&fx);
    }
}

/* ALiBi: TRF(eps) = floor(ln(1/eps) / k) + 1 for every head of the standard 8- and 12-head slopes,
 * through the plugin; e.g. 10 tokens for k = 1/2 and 1179 for k = 1/256 at eps = 0.01 (1769 at 0.001). */
static void test_alibi_closed_form(void **state)
{
    (void)state;
    const double eps[3] = {0.1, 0.01, 0.001};
    const int64_t window[1] = {LONGEST};
    for (int heads = 8; heads <= 12; heads += 4) {
        char text[128];
        snprintf(text, sizeof text, "[model]\nheads = %d\ndim = %d\n[[term]]\nplugin = \"alibi\"\n", heads, heads * 8);
        fixture fx;
        open_ok(&fx, text);
        bk_error err;
        if (bk_term_table(&fx.set.terms[0], 0, LONGEST, table, &err))
            fail_msg("%s", err.message);
        for (int h = 0; h < heads; h++) {
            const float *row = table + (size_t)h * LONGEST;
            double k = -(double)row[1]; /* T(1) = -k */
            double m = bk_rf_kernel(row, LONGEST, b);
            bk_trf_result r;
            if (bk_trf_analyse(b, m, window, 1, eps, 3, prefix, &r, &err))
                fail_msg("%s", err.message);
            assert_int_equal(r.settled, -1); /* one window: no verdict */
            for (int e = 0; e < 3; e++) {
                int64_t want = (int64_t)floor(log(1.0 / eps[e]) / k) + 1;
                if (r.field[0][e] != want)
                    fail_msg("%d heads, head %d (slope %g): TRF(%g) = %lld, expected floor(ln(1/eps)/k)+1 = %lld", heads,
                             h, k, eps[e], (long long)r.field[0][e], (long long)want);
            }
            if (heads == 8 && h == 0)
                assert_int_equal(r.field[0][1], 10);
            if (heads == 8 && h == 7) {
                assert_int_equal(r.field[0][1], 1179);
                assert_int_equal(r.field[0][2], 1769);
            }
            if (heads == 12 && h == 8) /* slope 2^-0.5 */
                assert_int_equal(r.field[0][1], 7);
        }
        close_terms(&fx);
    }
}

static void test_field_edges(void **state)
{
    (void)state;
    const double w[5] = {1.0, 0.0, 2.0, 1.0, 0.0};
    double p[6];
    bk_rf_prefix(w, 5, p);
    assert_true(p[5] == 4.0 && p[1] == 1.0 && p[3] == 3.0);
    assert_int_equal(bk_rf_field(p, 5, 1.0), 0);   /* threshold 0 */
    assert_int_equal(bk_rf_field(p, 5, 0.75), 1);  /* S_1 = 1 >= 1: ">=" */
    assert_int_equal(bk_rf_field(p, 5, 0.5), 3);   /* S_2 = 1 < 2, S_3 = 3 */
    assert_int_equal(bk_rf_field(p, 5, 0.25), 3);  /* S_3 = 3 >= 3 */
    assert_int_equal(bk_rf_field(p, 5, 0.0), 4);   /* one past the last non-zero weight */
    assert_int_equal(bk_rf_field(p, 2, 0.5), 1);   /* a shorter window */
    double eps[BK_RF_CURVE_POINTS], field[BK_RF_CURVE_POINTS];
    bk_rf_curve(p, 5, BK_RF_CURVE_POINTS, eps, field);
    assert_true(eps[0] == 1.0 && eps[BK_RF_CURVE_POINTS - 1] == 0.0);
    assert_true(field[0] == 0.0 && field[BK_RF_CURVE_POINTS - 1] == 4.0 / 5.0);
    for (int k = 1; k < BK_RF_CURVE_POINTS; k++)
        assert_true(field[k] >= field[k - 1]);
    /* compensated sums: a million 0.1s are 100000 to the last bits */
    double *ones = malloc(1000000 * sizeof *ones), *pp = malloc(1000001 * sizeof *pp);
    for (int i = 0; i < 1000000; i++)
        ones[i] = 0.1;
    bk_rf_prefix(ones, 1000000, pp);
    assert_true(fabs(pp[1000000] - 100000.0) <= 1e-10);
    free(ones), free(pp);
    /* the kernel's scale: b's largest value is 1, m is returned */
    const float tab[3] = {800.0f, 799.0f, 700.0f};
    double bb[3];
    assert_true(bk_rf_kernel(tab, 3, bb) == 800.0);
    assert_true(bb[0] == 1.0 && fabs(bb[1] - exp(-1.0)) < 1e-15);
}

static void test_analyse_rejects(void **state)
{
    (void)state;
    double w[4] = {1, 1, 1, 1}, p[5];
    bk_trf_result r;
    bk_error err;
    const int64_t bad_windows[2] = {4, 2};
    const double eps[1] = {0.1}, bad_eps[1] = {1.0};
    assert_int_equal(bk_trf_analyse(w, 0.0, bad_windows, 2, eps, 1, p, &r, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "windows must be increasing");
    const int64_t ok_windows[2] = {2, 4};
    assert_int_equal(bk_trf_analyse(w, 0.0, ok_windows, 2, bad_eps, 1, p, &r, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "expected a value in (0, 1)");
    const double zeros[4] = {0, 0, 0, 0};
    assert_int_equal(bk_trf_analyse(zeros, 0.0, ok_windows, 2, eps, 1, p, &r, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "expected a positive finite sum");
    /* NoPE (b = 1): TRF grows with the window: (1 - eps) L rounded up */
    assert_int_equal(bk_trf_analyse(w, 0.0, ok_windows, 2, eps, 1, p, &r, &err), BK_OK);
    assert_int_equal(r.field[0][0], 2);
    assert_int_equal(r.field[1][0], 4);
    assert_int_equal(r.settled, 0);
    assert_int_equal(r.verdict, BK_TRF_GROWING);
    assert_true(fabs(r.tail - 0.5) < 1e-15);
}

/* The researcher's case (issue 27): a head whose TRF(0.01) moves between 9216 and 200000 while less
 * than half a percent of its mass lies beyond 9216 was called "growing". (1+t)^-p with p = 1.56 has a
 * tail of 0.37% (the researcher's head had 0.45%): saturated at eps 0.1, 0.01 (every TRF within 9216,
 * as tail < eps implies), and growing when 0.001 is asked (the tail is then above that precision). */
static void test_verdict_threshold(void **state)
{
    (void)state;
    for (int64_t t = 0; t < LONGEST; t++)
        b[t] = exp(-1.56 * log1p((double)t));
    bk_trf_result r;
    bk_error err;
    if (bk_trf_analyse(b, 0.0, windows, 3, epsilons, 2, prefix, &r, &err))
        fail_msg("%s", err.message);
    if (!(r.tail > 0.003 && r.tail < 0.005))
        fail_msg("tail %g, expected 0.3%% to 0.5%%", r.tail);
    assert_int_equal(r.settled, 0); /* TRF(0.01) moves more than 5% */
    assert_true(r.field[2][1] > r.field[1][1] * 105 / 100);
    assert_int_equal(r.verdict, BK_TRF_SATURATED);
    assert_true(r.tail_threshold == 0.01);
    for (int e = 0; e < 2; e++) /* tail < eps: every field within the smaller window */
        assert_true(r.field[2][e] <= windows[1]);
    assert_string_equal(bk_trf_verdict_name(r.verdict), "saturated");
    const double fine[3] = {0.1, 0.01, 0.001};
    assert_int_equal(bk_trf_analyse(b, 0.0, windows, 3, fine, 3, prefix, &r, &err), BK_OK);
    assert_true(r.tail_threshold == 0.001);
    assert_int_equal(r.verdict, BK_TRF_GROWING);
    assert_string_equal(bk_trf_verdict_name(r.verdict), "growing");
    /* NoPE on 2 -> 4: TRF(0.1) 2 -> 4, tail 0.5 >= 0.1: growing */
    const double w[4] = {1, 1, 1, 1}, half[1] = {0.1};
    const int64_t w2[2] = {2, 4};
    assert_int_equal(bk_trf_analyse(w, 0.0, w2, 2, half, 1, prefix, &r, &err), BK_OK);
    assert_int_equal(r.verdict, BK_TRF_GROWING);
    /* one window: no verdict */
    assert_int_equal(bk_trf_analyse(w, 0.0, w2, 1, half, 1, prefix, &r, &err), BK_OK);
    assert_int_equal(r.verdict, BK_TRF_NONE);
    assert_string_equal(bk_trf_verdict_name(r.verdict), "-");
}

static void test_parsers(void **state)
{
    (void)state;
    int64_t w[BK_RF_MAX_WINDOWS];
    double e[BK_RF_MAX_EPS];
    int n;
    bk_error err;
    assert_int_equal(bk_rf_parse_windows("9216,512,9216,200000", "windows", 1 << 24, w, &n, &err), BK_OK);
    assert_int_equal(n, 3);
    assert_true(w[0] == 512 && w[1] == 9216 && w[2] == 200000);
    assert_int_equal(bk_rf_parse_windows("512,0", "windows", 1 << 24, w, &n, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "--windows: expected integers in [1, 16777216] separated by commas, got '512,0'");
    assert_int_equal(bk_rf_parse_windows("12x", "windows", 1 << 24, w, &n, &err), BK_ERR_USAGE);
    assert_int_equal(bk_rf_parse_windows("", "windows", 1 << 24, w, &n, &err), BK_ERR_USAGE);
    assert_int_equal(bk_rf_parse_eps("0.1,0.01", "eps", e, &n, &err), BK_OK);
    assert_true(n == 2 && e[0] == 0.1 && e[1] == 0.01);
    assert_int_equal(bk_rf_parse_eps("0.1,1", "eps", e, &n, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "--eps: expected numbers in (0, 1) separated by commas, got '0.1,1'");
    assert_int_equal(bk_rf_parse_eps("nan", "eps", e, &n, &err), BK_ERR_USAGE);
}

/* ---- the command line ---------------------------------------------------------------------- */

static char dir[128];

/* Runs `biaskit ARGS` (stderr into stdout), returns the exit code; the output into out. */
static int run_cli(const char *args, char *out, size_t size)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "BIASKIT_PLUGIN_PATH='%s' '%s/biaskit' %s 2>&1", BK_TEST_PLUGIN_DIR, BK_TEST_BINARY_DIR,
             args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_cli(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/bk_test_trf_XXXXXX");
    assert_non_null(mkdtemp(dir));
    static char out[1 << 16];
    char path[256], args[1024];

    /* Type 1 through the CLI: every CSV row of the mixed table's heads is the table's */
    snprintf(path, sizeof path, "%s/type1.toml", dir);
    write_file(path, experiments[1]);
    snprintf(args, sizeof args, "trf '%s' --csv -", path);
    assert_int_equal(run_cli(args, out, sizeof out), 0);
    assert_message_has(out, "table,plugin,stream,layer,head,window,eps,partial_sum,trf,tail,series\n");
    assert_message_has(out, "\nmixed,-,token,all,1,512,0.01,");
    int rows = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char name[64], plugin[64], stream[16], layer[8], verdict[16];
        int head;
        long long window, trf;
        double eps, sum, tail;
        if (sscanf(line, "%63[^,],%63[^,],%15[^,],%7[^,],%d,%lld,%lf,%lf,%lld,%lf,%15s", name, plugin, stream, layer,
                   &head, &window, &eps, &sum, &trf, &tail, verdict) != 11)
            continue;
        int w = window == 512 ? 0 : window == 9216 ? 1 : 2, e = eps > 0.05 ? 0 : 1;
        assert_int_equal(trf, expected[1][w][e]);
        assert_string_equal(verdict, "settled");
        assert_string_equal(layer, "all");
        rows++;
    }
    assert_int_equal(rows, 2 /* term, mixed */ * 2 /* heads */ * 3 * 2);

    /* the readable table, with other windows and epsilons */
    snprintf(args, sizeof args, "trf '%s' --windows 9216,512 --eps 0.5", path);
    assert_int_equal(run_cli(args, out, sizeof out), 0);
    assert_message_has(out, "windows: 512, 9216 distances; eps: 0.5");
    assert_message_has(out, "term qin (plugin qin), stream token, shared by every layer");
    assert_message_has(out, "mixed table of stream token (1 term; what attention adds), every layer");
    assert_message_has(out, "4 head rows settled, 0 saturated, 0 growing");
    assert_message_has(out, "else saturated when the tail < 0.5 (the smallest eps: every TRF is within 512)");
    assert_true(strstr(out, "RoPE") == NULL); /* no rotary term: no RoPE note */

    /* KERPLE-log (r = 1.5) is saturated in the CSV's series column */
    snprintf(path, sizeof path, "%s/kerplelog.toml", dir);
    write_file(path, experiments[4]);
    snprintf(args, sizeof args, "trf '%s' --csv -", path);
    assert_int_equal(run_cli(args, out, sizeof out), 0);
    assert_message_has(out, "\nmixed,-,token,all,1,200000,0.01,");
    assert_message_has(out, ",saturated\n");
    assert_true(strstr(out, "growing") == NULL);

    /* a RoPE model: the token stream's row is b_t = 1, and the output says RoPE is not in it */
    snprintf(path, sizeof path, "%s/rope.toml", dir);
    write_file(path, "[model]\nheads = 2\n[[term]]\nplugin = \"rope\"\n");
    snprintf(args, sizeof args, "trf '%s' --windows 512,9216", path);
    assert_int_equal(run_cli(args, out, sizeof out), 0);
    assert_message_has(out, "term rope (plugin rope): rotary (RoPE), no distance table: its decay with distance "
                            "depends on the queries and keys and is NOT in the TRF below");
    assert_message_has(out, "stream token: no table term, the bias is 0 (b_t = 1, as NoPE); the rotary term rope "
                            "(RoPE) is not in this table");
    assert_message_has(out, "note: this model has a rotary term (rope, RoPE): its content-dependent decay is not in "
                            "any table above; the TRF is computed from the bias tables only");
    assert_message_has(out, "0 head rows settled, 0 saturated, 2 growing");

    /* a per-layer term: one block per layer, and the mixed table per layer; a divergent series grows */
    snprintf(path, sizeof path, "%s/perlayer.toml", dir);
    write_file(path, "[model]\nlayers = 2\nheads = 2\n[[term]]\nplugin = \"kerple\"\nper_layer = true\n"
                     "[[term]]\nplugin = \"qin\"\nform = \"harmonic\"\n");
    snprintf(args, sizeof args, "trf '%s' --windows 64,4096", path);
    assert_int_equal(run_cli(args, out, sizeof out), 0);
    assert_message_has(out, "term kerple (plugin kerple), stream token, layer 1");
    assert_message_has(out, "mixed table of stream token (2 terms; what attention adds), layer 1");
    assert_message_has(out, "growing");

    /* bad arguments: usage errors, exit 2 */
    const struct {
        const char *args, *message;
    } bad[] = {
        {"trf", "biaskit trf: expected one experiment file or checkpoint"},
        {"trf a.toml b.toml", "biaskit trf: expected one experiment file or checkpoint"},
        {"trf x.toml --windows 0,512", "--windows: expected integers in [1, 16777216] separated by commas, got '0,512'"},
        {"trf x.toml --windows abc", "--windows: expected integers"},
        {"trf x.toml --eps 0", "--eps: expected numbers in (0, 1) separated by commas, got '0'"},
        {"trf x.toml --eps 0.1,2", "--eps: expected numbers in (0, 1)"},
        {"trf x.toml --plot out.svg", "--plot: expected a file name ending in .png, got 'out.svg'"},
        {"trf x.toml --window 5", "unknown option '--window' (did you mean '--windows'?)"},
        {"trf x.toml --eps", "option '--eps' needs a value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = run_cli(bad[i].args, out, sizeof out);
        if (rc != 2)
            fail_msg("biaskit %s: exit %d, expected 2:\n%s", bad[i].args, rc, out);
        assert_message_has(out, bad[i].message);
    }
    /* a file that is not there: exit 1, naming it */
    snprintf(args, sizeof args, "trf '%s/missing.toml'", dir);
    assert_int_equal(run_cli(args, out, sizeof out), 1);
    assert_message_has(out, "missing.toml");
    assert_int_equal(run_cli("trf --help", out, sizeof out), 0);
    assert_message_has(out, "usage: biaskit trf <experiment.toml | checkpoint.safetensors>");

    snprintf(args, sizeof args, "rm -rf '%s'", dir);
    assert_int_equal(system(args), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_table_closed_forms),
        cmocka_unit_test(test_window_table_plugins),
        cmocka_unit_test(test_alibi_closed_form),
        cmocka_unit_test(test_field_edges),
        cmocka_unit_test(test_analyse_rejects),
        cmocka_unit_test(test_verdict_threshold),
        cmocka_unit_test(test_parsers),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
