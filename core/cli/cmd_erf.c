/* biaskit erf: the empirical receptive field of a trained checkpoint (Qin, Zhong & Deng, "Exploring
 * Transformer Extrapolation", AAAI 2024, arXiv 2307.10156), per layer and head and aggregated, next to
 * the theoretical one of the same heads' learned tables. analysis/erf.h states the aggregation;
 * docs/receptive-field.md explains it. */
#include "analysis/erf.h"
#include "analysis/trf.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "eval/eval.h"
#include "report/plot.h"
#include "train/checkpoint.h"
#include "util/path.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: biaskit erf <checkpoint.safetensors> [--length L] [--eps E1,E2,...] [--sequences N]\n"
    "                   [--queries Q] [--csv FILE] [--plot FILE.png] [--set section.key=value]... [--strict]\n"
    "                   [--no-verify]\n\n"
    "The empirical receptive field (ERF) of Qin, Zhong & Deng, \"Exploring Transformer Extrapolation\"\n"
    "(AAAI 2024, arXiv 2307.10156): how many of the nearest keys carry the attention of a trained model.\n"
    "The model stored in the checkpoint runs a training-mode forward on the CPU over N sequences of L\n"
    "tokens (the first non-overlapping windows of its experiment's validation data). For each layer\n"
    "and head, the post-softmax attention rows of the last Q queries of every sequence are re-indexed\n"
    "by distance t = i - s (t = 0: the query itself) and averaged over those N x Q rows into p_t\n"
    "(sum_t p_t = 1). Then\n\n"
    "  ERF(eps) = the smallest j with sum_{t<j} p_t >= (1 - eps) sum_t p_t\n\n"
    "per layer and head; per layer, p averaged over its heads; overall, p averaged over every layer\n"
    "and head. Next to each ERF is the TRF of the same head on the same window: the same rule applied\n"
    "to b_t = exp(T_h(t)) of the head's learned token-stream mixed table (see 'biaskit trf'); the TRF\n"
    "aggregates average b_t / sum_{t<L} b_t the same way. ERF and TRF are in [1, L] tokens.\n\n"
    "  --length L       sequence length (default: the training length)\n"
    "  --eps E,...      epsilons in (0, 1) (default 0.1,0.01)\n"
    "  --sequences N    sequences to average over (default 16; fewer when the data is shorter)\n"
    "  --queries Q      last queries of each sequence used (default L/4, at least 1)\n"
    "  --csv FILE       write layer,head,eps,erf,trf (layer and head 'all' for the averages;\n"
    "                   '-' = standard output)\n"
    "  --plot FILE.png  normalised receptive field (field / L) against eps, 50 eps from 1 to 0 (the\n"
    "                   paper's `draw`): ERF and TRF over every layer and head, and the ERF of each\n"
    "                   layer; FILE.pdf, FILE.gp and FILE.dat are written beside it (needs gnuplot for\n"
    "                   the PNG and PDF) and none of the four may name an input\n"
    "  --set K=V        override a value of the stored experiment (repeatable); run.device=cpu is set\n"
    "                   first, as the attention probabilities are read from the CPU backend\n"
    "  --strict         refuse a checkpoint whose plugins differ from the ones it was trained with,\n"
    "                   a plugin option changed by --set, or a format 2 checkpoint (no metadata checksum);\n"
    "                   a plugin file or directory writable by other users (by default a warning)\n"
    "  --no-verify      skip the checksums of the tensors' data (the metadata's is still verified)\n\n"
    "The CSV file is written atomically (a temporary file renamed over it once complete: a failed\n"
    "write is an error and leaves the old file as it was) and refused when it names an input (the\n"
    "checkpoint, a plugin, a data file; through a link too); a device or a pipe is written directly,\n"
    "every write checked.\n";

#define MAX_PLOT_LAYERS 8

/* rows[k * T ..] for k < n averaged into out (T values). */
static void average_rows(const double *rows, int n, int T, double *out)
{
    for (int t = 0; t < T; t++) {
        double s = 0.0;
        for (int k = 0; k < n; k++)
            s += rows[(size_t)k * T + t];
        out[t] = s / n;
    }
}

typedef struct erf_run {
    int L, H, T, n_eps;
    double eps[BK_RF_MAX_EPS];
    double *erf_p;  /* L x H x T mean attention by distance */
    double *trf_p;  /* L x H x T normalised kernel b / S_T */
    double *mean_e, *mean_t, *prefix; /* T, T, T + 1 scratch */
    FILE *out;       /* the readable table (NULL: none) */
    bk_output *csv;  /* NULL: none */
} erf_run;

static void row_out(const erf_run *r, const char *layer, const char *head, const double *pe, const double *pt)
{
    int64_t erf[BK_RF_MAX_EPS], trf[BK_RF_MAX_EPS];
    bk_rf_prefix(pe, r->T, r->prefix);
    for (int e = 0; e < r->n_eps; e++)
        erf[e] = bk_rf_field(r->prefix, r->T, r->eps[e]);
    bk_rf_prefix(pt, r->T, r->prefix);
    for (int e = 0; e < r->n_eps; e++)
        trf[e] = bk_rf_field(r->prefix, r->T, r->eps[e]);
    if (r->out) {
        fprintf(r->out, "%6s %6s", layer, head);
        for (int e = 0; e < r->n_eps; e++)
            fprintf(r->out, " %10lld %10lld", (long long)erf[e], (long long)trf[e]);
        fprintf(r->out, "\n");
    }
    if (r->csv)
        for (int e = 0; e < r->n_eps; e++)
            bk_output_printf(r->csv, "%s,%s,%g,%lld,%lld\n", layer, head, r->eps[e], (long long)erf[e],
                             (long long)trf[e]);
}

/* The normalised TRF kernel of every layer and head: the token stream's mixed table on T distances. */
static int trf_kernels(erf_run *r, const bk_term_set *set, bk_error *err)
{
    const int H = r->H, T = r->T;
    float *table = malloc((size_t)H * T * sizeof *table);
    if (!table)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for %d heads x %d distances", H, T);
    int rc = BK_OK;
    for (int l = 0; l < r->L && !rc; l++) {
        int n_terms;
        if ((rc = bk_terms_mixed_table(set, l, BK_STREAM_TOKEN, T, table, &n_terms, err)))
            break;
        for (int h = 0; h < H; h++) {
            double *b = r->trf_p + ((size_t)l * H + h) * T;
            bk_rf_kernel(table + (size_t)h * T, T, b);
            bk_rf_prefix(b, T, r->prefix);
            for (int t = 0; t < T; t++)
                b[t] /= r->prefix[T];
        }
    }
    free(table);
    return rc;
}

static void report(erf_run *r)
{
    const int L = r->L, H = r->H, T = r->T;
    if (r->out) {
        fprintf(r->out, "\n%6s %6s", "layer", "head");
        for (int e = 0; e < r->n_eps; e++) {
            char a[32], b[32];
            snprintf(a, sizeof a, "ERF(%g)", r->eps[e]);
            snprintf(b, sizeof b, "TRF(%g)", r->eps[e]);
            fprintf(r->out, " %10s %10s", a, b);
        }
        fprintf(r->out, "\n");
    }
    char ltext[16], htext[16];
    for (int l = 0; l < L; l++) {
        snprintf(ltext, sizeof ltext, "%d", l);
        for (int h = 0; h < H; h++) {
            snprintf(htext, sizeof htext, "%d", h);
            size_t o = ((size_t)l * H + h) * T;
            row_out(r, ltext, htext, r->erf_p + o, r->trf_p + o);
        }
        average_rows(r->erf_p + (size_t)l * H * T, H, T, r->mean_e);
        average_rows(r->trf_p + (size_t)l * H * T, H, T, r->mean_t);
        row_out(r, ltext, "all", r->mean_e, r->mean_t);
    }
    average_rows(r->erf_p, L * H, T, r->mean_e);
    average_rows(r->trf_p, L * H, T, r->mean_t);
    row_out(r, "all", "all", r->mean_e, r->mean_t);
}

static int write_plot(erf_run *r, const char *path, const char *source, int sequences, bk_error *err)
{
    enum { N = BK_RF_CURVE_POINTS };
    static double x[2 + MAX_PLOT_LAYERS][N], y[2 + MAX_PLOT_LAYERS][N];
    char titles[2 + MAX_PLOT_LAYERS][48];
    bk_plot_series series[2 + MAX_PLOT_LAYERS];
    int n = 0, layers = r->L <= MAX_PLOT_LAYERS ? r->L : 0;
    for (int k = -2; k < layers; k++, n++) {
        const double *w;
        if (k == -2) {
            average_rows(r->erf_p, r->L * r->H, r->T, r->mean_e);
            w = r->mean_e;
            snprintf(titles[n], sizeof titles[n], "ERF, all layers and heads");
        } else if (k == -1) {
            average_rows(r->trf_p, r->L * r->H, r->T, r->mean_t);
            w = r->mean_t;
            snprintf(titles[n], sizeof titles[n], "TRF, all layers and heads");
        } else {
            average_rows(r->erf_p + (size_t)k * r->H * r->T, r->H, r->T, r->mean_e);
            w = r->mean_e;
            snprintf(titles[n], sizeof titles[n], "ERF, layer %d", k);
        }
        bk_rf_prefix(w, r->T, r->prefix);
        bk_rf_curve(r->prefix, r->T, N, x[n], y[n]);
        for (int i = 0; i < N; i++)
            if (y[n][i] <= 0.0) /* eps = 1: field 0, a gap on the logarithmic axis */
                y[n][i] = NAN;
        series[n] = (bk_plot_series){titles[n], x[n], y[n], N};
    }
    char title[512], name[256];
    bk_path_title(source, name, sizeof name);
    snprintf(title, sizeof title, "receptive fields of %s (length %d, %d sequences)", name, r->T, sequences);
    bk_plot p = {path, title, "epsilon", "receptive field / length", 0, 1, series, n, 0};
    return bk_plot_write(&p, err);
}

int bk_cmd_erf(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0}, {"length", 1, 0}, {"eps", 1, 0}, {"sequences", 1, 0},
                                        {"queries", 1, 0}, {"csv", 1, 0}, {"plot", 1, 0}, {"set", 1, 1},
                                        {"strict", 0, 0}, {"no-verify", 0, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit erf", &args, &err))
        return bk_report(&err);
    bk_cli_plugin_strictness(bk_args_get(&args, "strict") != NULL);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    if (args.n_positional != 1) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit erf: expected one checkpoint; see 'biaskit erf --help'");
        return bk_report(&err);
    }
    const char *source = args.positional[0], *v;
    erf_run r = {0};
    long length = 0, sequences = 16, queries = 0;
    int rc = bk_rf_parse_eps((v = bk_args_get(&args, "eps")) ? v : "0.1,0.01", "eps", r.eps, &r.n_eps, &err);
    if (!rc && (v = bk_args_get(&args, "length")))
        rc = bk_args_int("length", v, 1, 1L << 16, &length, &err);
    if (!rc && (v = bk_args_get(&args, "sequences")))
        rc = bk_args_int("sequences", v, 1, 1L << 20, &sequences, &err);
    if (!rc && (v = bk_args_get(&args, "queries")))
        rc = bk_args_int("queries", v, 1, 1L << 16, &queries, &err);
    const char *plot = bk_args_get(&args, "plot");
    if (!rc && plot && (strlen(plot) < 5 || strcmp(plot + strlen(plot) - 4, ".png") != 0))
        rc = bk_fail(&err, BK_ERR_USAGE, "--plot: expected a file name ending in .png, got '%s'", plot);
    if (!rc && !bk_checkpoint_is_file(source))
        rc = bk_fail(&err, BK_ERR_USAGE, "biaskit erf: '%s' is not a checkpoint: expected a .safetensors file written "
                     "by 'biaskit train' (the ERF needs trained weights)", source);
    const char *csv_path = bk_args_get(&args, "csv");
    const bk_output_input ckpt_input = {"checkpoint", source, NULL, 0};
    if (!rc) /* before any work; again against every input once they are known */
        rc = bk_eval_check_outputs(csv_path, plot, &ckpt_input, 1, &err);
    if (rc)
        return bk_report(&err);

    const char *sets[BK_ARGS_MAX];
    const bk_reopen_request reopen = bk_cli_reopen_request(&args, BK_REOPEN_INSPECT, sets, BK_ARGS_MAX);
    bk_lm lm;
    bk_train_state st;
    if (bk_reopen(source, &reopen, &lm, NULL, &st, &err))
        return bk_report(&err);
    const bk_experiment *e = &lm.exp;
    if (e->run.threads > 0)
        omp_set_num_threads((int)e->run.threads);
    r.L = lm.gpt.L, r.H = lm.gpt.H;
    r.T = length ? (int)length : (int)e->train.length;
    if (queries > r.T)
        rc = bk_fail(&err, BK_ERR_USAGE, "--queries: expected at most the length %d, got %ld", r.T, queries);
    if (!queries)
        queries = r.T / 4 > 0 ? r.T / 4 : 1;
    const size_t cells = (size_t)r.L * r.H * r.T;
    r.erf_p = malloc(cells * sizeof *r.erf_p);
    r.trf_p = malloc(cells * sizeof *r.trf_p);
    r.mean_e = malloc((size_t)r.T * sizeof *r.mean_e);
    r.mean_t = malloc((size_t)r.T * sizeof *r.mean_t);
    r.prefix = malloc(((size_t)r.T + 1) * sizeof *r.prefix);
    if (!rc && (!r.erf_p || !r.trf_p || !r.mean_e || !r.mean_t || !r.prefix))
        rc = bk_fail(&err, BK_ERR_NOMEM, "out of memory for %d layers x %d heads x %d distances", r.L, r.H, r.T);
    bk_tokens train = {0}, val = {0};
    int used = 0;
    if (!rc)
        rc = bk_lm_load_data(&lm, NULL, 0, 2, NULL, &train, &val, &err);
    if (!rc)
        rc = bk_erf_measure(&lm, &val, r.T, (int)sequences, (int)queries, r.erf_p, &used, &err);
    if (!rc)
        rc = trf_kernels(&r, &lm.terms, &err);
    bk_eval_inputs inputs = {0};
    if (!rc && !(rc = bk_eval_inputs_checkpoint(&inputs, source, &lm, NULL, 0, &err)))
        rc = bk_eval_check_outputs(csv_path, plot, inputs.items, inputs.n, &err);
    bk_output csv = {0};
    if (!rc && csv_path && !(rc = bk_output_open(&csv, "--csv", csv_path, inputs.items, inputs.n, &err))) {
        r.csv = &csv;
        bk_output_printf(&csv, "layer,head,eps,erf,trf\n");
    }
    r.out = csv.kind == BK_OUTPUT_STDOUT ? NULL : stdout; /* CSV on stdout: nothing else there */
    if (!rc && r.out) {
        printf("checkpoint: %s (step %lld, trained at length %lld)\n", source, (long long)st.step,
               (long long)e->train.length);
        printf("data: %s; %d sequence%s of %d tokens, the last %ld queries of each (%lld attention rows per head)\n",
               val.name, used, used == 1 ? "" : "s", r.T, queries, (long long)used * queries);
        printf("ERF(eps) = smallest j with sum_{t<j} p_t >= (1 - eps) sum_t p_t, p_t = mean attention at distance t;\n"
               "TRF(eps): the same on b_t = exp(T_h(t)) of the token stream's mixed table, window %d\n", r.T);
    }
    if (!rc)
        report(&r);
    if (!rc)
        rc = bk_output_close(&csv, &err);
    else
        bk_output_discard(&csv);
    if (!rc && csv_path && r.out)
        printf("wrote %s\n", csv_path);
    if (!rc && plot && !(rc = write_plot(&r, plot, source, used, &err)) && r.out)
        printf("wrote %s (and its .pdf, .gp and .dat)\n", plot);
    if (!rc)
        rc = bk_output_stdout_check(&err);
    bk_eval_inputs_free(&inputs);
    free(r.erf_p), free(r.trf_p), free(r.mean_e), free(r.mean_t), free(r.prefix);
    bk_tokens_free(&train), bk_tokens_free(&val);
    bk_lm_close(&lm);
    return rc ? bk_report(&err) : 0;
}
