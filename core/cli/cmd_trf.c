/* biaskit trf: the theoretical receptive field (Qin, Zhong & Deng, "Exploring Transformer
 * Extrapolation", AAAI 2024, arXiv 2307.10156) of every distance table of an experiment or a trained
 * checkpoint: per term, per layer copy and per head, and of the mixed table each stream's attention
 * adds. The arithmetic is analysis/trf.h; docs/receptive-field.md explains it. */
#include "analysis/trf.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "eval/eval.h"
#include "report/plot.h"
#include "train/checkpoint.h"
#include "util/path.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: biaskit trf <experiment.toml | checkpoint.safetensors> [--windows L1,L2,...] [--eps E1,E2,...]\n"
    "                   [--csv FILE] [--plot FILE.png] [--set section.key=value]... [--strict]\n"
    "                   [--no-verify]\n\n"
    "The theoretical receptive field (TRF) of Qin, Zhong & Deng, \"Exploring Transformer\n"
    "Extrapolation\" (AAAI 2024, arXiv 2307.10156), computed from the distance tables alone (no data,\n"
    "no training). For every [[term]] with a table, every layer copy (per_layer terms) and every head,\n"
    "and for the mixed table of each stream (what attention adds to its scores; the token stream\n"
    "always: with no table term there its bias is 0, b_t = 1, NoPE), with\n"
    "b_t = exp(T_h(t)) at distance t = i - j:\n\n"
    "  S_L          = sum_{t<L} b_t, the partial sum on a window of L distances\n"
    "  TRF_L(eps)   = the smallest j with S_j >= (1 - eps) S_L (the paper's code; its Eq. 22 writes >)\n"
    "  tail         = (S_L - S_L') / S_L for the two largest windows L' < L\n"
    "  series       settled: for every eps, TRF_L(eps) is within 5% (or one token) of TRF_L'(eps):\n"
    "               the series looks convergent, the paper's extrapolation condition sum_t b_t < inf;\n"
    "               saturated: some TRF moves more, but the tail is below the smallest eps asked\n"
    "               (less than that share of the head's mass lies beyond L', so every TRF_L(eps) is\n"
    "               within L'): the sums have stopped growing at these precisions;\n"
    "               growing: some TRF moves more and the tail holds at least the smallest eps of the\n"
    "               mass (a divergent series, or one converging too slowly for these windows; use\n"
    "               windows far apart, 10x or more)\n\n"
    "Only distance tables enter the TRF. A rotary term (RoPE) has none: its decay with distance\n"
    "depends on the queries and keys, so a RoPE model's token stream shows b_t = 1 (NoPE) here; use\n"
    "'biaskit erf' on its checkpoint for the attention it learned. Masks, coordinate tables and\n"
    "logit scales (ABI 2 terms) and absolute embeddings are not in the tables either.\n\n"
    "Given a checkpoint (a .safetensors file written by 'biaskit train'), the tables come from its\n"
    "learned plugin parameters and mixing weights; an experiment file gives the initial ones. A term\n"
    "shared by every layer is shown once (layer 'all'). Tables are computed on the host.\n\n"
    "  --windows L,...  window lengths, in distances (default 512,9216,200000: the paper's training\n"
    "                   length and longest test length, and a long one)\n"
    "  --eps E,...      epsilons in (0, 1) (default 0.1,0.01)\n"
    "  --csv FILE       write table,plugin,stream,layer,head,window,eps,partial_sum,trf,tail,series\n"
    "                   (one row per head, window and eps; '-' = standard output)\n"
    "  --plot FILE.png  the normalised TRF curve TRF_L(eps) / L against eps (50 eps from 1 to 0, the\n"
    "                   paper's `draw`) on the largest window, for every head of each stream's mixed\n"
    "                   table (layer 0 when it differs per layer); FILE.pdf, FILE.gp and FILE.dat are\n"
    "                   written beside it (needs gnuplot for the PNG and PDF)\n"
    "  --set K=V        override a value of the experiment (repeatable)\n"
    "  --strict         checkpoint: refuse it when its plugins differ from the ones it was trained with,\n"
    "                   a plugin option changed by --set, or a format 2 checkpoint (no metadata checksum);\n"
    "                   any source: a plugin file or directory writable by other users (else a warning)\n"
    "  --no-verify      checkpoint: skip the checksums of the tensors' data (the metadata's is verified)\n\n"
    "The CSV file is written atomically (a temporary file renamed over it once complete: a failed\n"
    "write is an error and leaves the old file as it was) and refused when it names an input (the\n"
    "experiment file or checkpoint, a plugin; through a link too); so are the plot's three files. A\n"
    "device or a pipe is written directly, every write checked.\n";

#define MAX_PLOT_SERIES 64

typedef struct trf_run {
    int64_t windows[BK_RF_MAX_WINDOWS];
    double eps[BK_RF_MAX_EPS];
    int n_windows, n_eps;
    FILE *out;             /* readable tables (NULL: none) */
    bk_output *csv;        /* CSV (NULL: none) */
    double *b, *prefix;    /* scratch: longest window */
    /* the plot's curves */
    int n_series;
    char titles[MAX_PLOT_SERIES][64];
    double curve_eps[MAX_PLOT_SERIES][BK_RF_CURVE_POINTS], curve[MAX_PLOT_SERIES][BK_RF_CURVE_POINTS];
    int settled, saturated, growing; /* rows of each verdict */
} trf_run;


static void print_header(const trf_run *r, const char *title)
{
    if (!r->out)
        return;
    fprintf(r->out, "\n%s\n%5s", title, "head");
    char name[48];
    for (int w = 0; w < r->n_windows; w++) {
        snprintf(name, sizeof name, "S_%lld", (long long)r->windows[w]);
        fprintf(r->out, " %12s", name);
    }
    for (int e = 0; e < r->n_eps; e++) {
        snprintf(name, sizeof name, "TRF(%g)", r->eps[e]);
        fprintf(r->out, "  %-22s", name);
    }
    fprintf(r->out, " %9s  %s\n", "tail", "series");
}

/* Analyse every head of `table` (heads x D, D = the longest window). `plot` adds each head's curve. */
static int analyse_table(trf_run *r, const char *title, const char *name, const char *plugin, const char *stream,
                         int layer, const float *table, int32_t heads, int plot, bk_error *err)
{
    const int64_t D = r->windows[r->n_windows - 1];
    char layer_text[16];
    if (layer < 0)
        snprintf(layer_text, sizeof layer_text, "all");
    else
        snprintf(layer_text, sizeof layer_text, "%d", layer);
    print_header(r, title);
    for (int32_t h = 0; h < heads; h++) {
        bk_trf_result res;
        double m = bk_rf_kernel(table + (size_t)h * (size_t)D, D, r->b);
        int rc = bk_trf_analyse(r->b, m, r->windows, r->n_windows, r->eps, r->n_eps, r->prefix, &res, err);
        if (rc)
            return bk_error_prefix(err, "%s, head %d: ", title, (int)h);
        r->settled += res.verdict == BK_TRF_SETTLED, r->saturated += res.verdict == BK_TRF_SATURATED;
        r->growing += res.verdict == BK_TRF_GROWING;
        if (r->out) {
            fprintf(r->out, "%5d", (int)h);
            for (int w = 0; w < r->n_windows; w++)
                fprintf(r->out, " %12.6g", res.sum[w]);
            for (int e = 0; e < r->n_eps; e++) {
                char cell[BK_RF_MAX_WINDOWS * 12] = "";
                size_t used = 0;
                for (int w = 0; w < r->n_windows && used < sizeof cell; w++)
                    used += (size_t)snprintf(cell + used, sizeof cell - used, "%s%lld", w ? "/" : "",
                                             (long long)res.field[w][e]);
                fprintf(r->out, "  %-22s", cell);
            }
            fprintf(r->out, " %9.3g  %s\n", res.tail, bk_trf_verdict_name(res.verdict));
        }
        if (r->csv)
            for (int w = 0; w < r->n_windows; w++)
                for (int e = 0; e < r->n_eps; e++)
                    bk_output_printf(r->csv, "%s,%s,%s,%s,%d,%lld,%g,%.17g,%lld,%.17g,%s\n", name, plugin, stream,
                                     layer_text, (int)h, (long long)r->windows[w], r->eps[e], res.sum[w],
                                     (long long)res.field[w][e], res.tail, bk_trf_verdict_name(res.verdict));
        if (plot && r->n_series < MAX_PLOT_SERIES) {
            int k = r->n_series++;
            snprintf(r->titles[k], sizeof r->titles[k], "%s head %d", stream, (int)h);
            /* r->prefix holds the sums of the longest window (bk_trf_analyse) */
            bk_rf_curve(r->prefix, D, BK_RF_CURVE_POINTS, r->curve_eps[k], r->curve[k]);
            for (int i = 0; i < BK_RF_CURVE_POINTS; i++)
                if (r->curve[k][i] <= 0.0) /* eps = 1: field 0, a gap on the logarithmic axis */
                    r->curve[k][i] = NAN;
        }
    }
    return BK_OK;
}

static int run(trf_run *r, const bk_term_set *set, int layers, bk_error *err)
{
    const int32_t heads = set->geometry.n_heads, D = (int32_t)r->windows[r->n_windows - 1];
    float *table = malloc((size_t)heads * (size_t)D * sizeof *table);
    if (!table)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for %d heads x %d distances", (int)heads, (int)D);
    int rc = BK_OK;
    for (int stream = 0; stream < BK_STREAM_COUNT && !rc; stream++) {
        char stream_name[16];
        bk_choice_name(BK_STREAM_CHOICES, stream, stream_name, sizeof stream_name);
        int per_layer = 0, on_stream = 0;
        for (int i = 0; i < set->n && !rc; i++) {
            const bk_term *t = &set->terms[i];
            if ((int)t->stream != stream)
                continue;
            if (!bk_term_has_table(t)) {
                if (r->out && (t->caps & BIASKIT_CAP_ROTARY))
                    fprintf(r->out, "\nterm %s (plugin %s): rotary (RoPE), no distance table: its decay with distance "
                            "depends on the queries and keys and is NOT in the TRF below, which is of the bias "
                            "tables only ('biaskit erf' measures the attention a checkpoint learned)\n",
                            t->label, t->plugin->desc->name);
                else if (r->out)
                    fprintf(r->out, "\nterm %s (plugin %s): no distance table: not in the TRF below, nothing to "
                            "analyse\n", t->label, t->plugin->desc->name);
                continue;
            }
            on_stream++;
            per_layer |= t->per_layer;
            int copies = t->per_layer ? layers : 1;
            for (int l = 0; l < copies && !rc; l++) {
                char title[256];
                int used = snprintf(title, sizeof title, "term %s (plugin %s), stream %s, ", t->label,
                                    t->plugin->desc->name, stream_name);
                if (t->per_layer)
                    snprintf(title + used, sizeof title - (size_t)used, "layer %d", l);
                else
                    snprintf(title + used, sizeof title - (size_t)used, "shared by every layer");
                if (!(rc = bk_term_table(t, l, D, table, err)))
                    rc = analyse_table(r, title, t->label, t->plugin->desc->name, stream_name, t->per_layer ? l : -1,
                                       table, heads, 0, err);
            }
        }
        if (on_stream == 0 && stream != BK_STREAM_TOKEN)
            continue;
        /* the token stream always: with no table term its bias is 0 (b_t = 1, NoPE) */
        int copies = per_layer ? layers : 1;
        for (int l = 0; l < copies && !rc; l++) {
            int n_terms;
            char title[256];
            if (on_stream)
                snprintf(title, sizeof title, "mixed table of stream %s (%d term%s; what attention adds), %s",
                         stream_name, on_stream, on_stream == 1 ? "" : "s", per_layer ? "layer " : "every layer");
            else if (set->rotary >= 0 && (int)set->terms[set->rotary].stream == stream)
                snprintf(title, sizeof title, "stream %s: no table term, the bias is 0 (b_t = 1, as NoPE); the "
                         "rotary term %s (RoPE) is not in this table", stream_name, set->terms[set->rotary].label);
            else
                snprintf(title, sizeof title, "stream %s: no table term, the bias is 0 (NoPE: b_t = 1)", stream_name);
            if (per_layer)
                snprintf(title + strlen(title), sizeof title - strlen(title), "%d", l);
            if (!(rc = bk_terms_mixed_table(set, l, (bk_stream)stream, D, table, &n_terms, err)))
                rc = analyse_table(r, title, "mixed", "-", stream_name, per_layer ? l : -1, table, heads, l == 0, err);
        }
    }
    free(table);
    return rc;
}

static int write_plot(const trf_run *r, const char *path, const char *source, bk_error *err)
{
    bk_plot_series series[MAX_PLOT_SERIES];
    for (int k = 0; k < r->n_series; k++)
        series[k] = (bk_plot_series){r->titles[k], r->curve_eps[k], r->curve[k], BK_RF_CURVE_POINTS};
    char title[512], name[256];
    bk_path_title(source, name, sizeof name);
    snprintf(title, sizeof title, "TRF of %s (window %lld)", name, (long long)r->windows[r->n_windows - 1]);
    bk_plot p = {path, title, "epsilon", "TRF(epsilon) / window", 0, 1, series, r->n_series, 0};
    return bk_plot_write(&p, err);
}

int bk_cmd_trf(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0}, {"windows", 1, 0}, {"eps", 1, 0},  {"csv", 1, 0},
                                        {"plot", 1, 0}, {"set", 1, 1},     {"strict", 0, 0},
                                        {"no-verify", 0, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit trf", &args, &err))
        return bk_report(&err);
    bk_cli_plugin_strictness(bk_args_get(&args, "strict") != NULL);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    if (args.n_positional != 1) {
        bk_fail(&err, BK_ERR_USAGE,
                "biaskit trf: expected one experiment file or checkpoint; see 'biaskit trf --help'");
        return bk_report(&err);
    }
    trf_run *r = calloc(1, sizeof *r);
    if (!r) {
        bk_fail(&err, BK_ERR_NOMEM, "out of memory");
        return bk_report(&err);
    }
    const char *v;
    int rc = bk_rf_parse_windows((v = bk_args_get(&args, "windows")) ? v : "512,9216,200000", "windows", 1L << 24,
                                 r->windows, &r->n_windows, &err);
    if (!rc)
        rc = bk_rf_parse_eps((v = bk_args_get(&args, "eps")) ? v : "0.1,0.01", "eps", r->eps, &r->n_eps, &err);
    const char *plot = bk_args_get(&args, "plot");
    if (!rc && plot && (strlen(plot) < 5 || strcmp(plot + strlen(plot) - 4, ".png") != 0))
        rc = bk_fail(&err, BK_ERR_USAGE, "--plot: expected a file name ending in .png, got '%s'", plot);
    const char *source = args.positional[0];
    int from_checkpoint = bk_checkpoint_is_file(source);
    const char *csv_path = bk_args_get(&args, "csv");
    const bk_output_input source_input = {from_checkpoint ? "checkpoint" : "experiment file", source, NULL, 0};
    if (!rc) /* before any work; again against every input once they are known */
        rc = bk_eval_check_outputs(csv_path, plot, &source_input, 1, &err);
    if (rc) {
        free(r);
        return bk_report(&err);
    }

    /* the tables are host computations: the model's device is never used (a later --set wins) */
    const char *user_sets[BK_ARGS_MAX], *sets[BK_ARGS_MAX + 1];
    const bk_reopen_request reopen = bk_cli_reopen_request(&args, BK_REOPEN_INSPECT, user_sets, BK_ARGS_MAX);
    /* an experiment file's model is rebuilt on the CPU too */
    const size_t n_sets = (size_t)bk_reopen_overrides(&reopen, sets, BK_ARGS_MAX + 1);
    bk_session s = {0};
    bk_lm lm = {0};
    bk_train_state st = {0};
    if (from_checkpoint) {
        rc = bk_reopen(source, &reopen, &lm, NULL, &st, &err);
    } else {
        rc = bk_session_open(&s, source, sets, n_sets, &err);
    }
    if (rc) {
        free(r);
        return bk_report(&err);
    }
    const bk_experiment *exp = from_checkpoint ? &lm.exp : &s.exp;
    const bk_term_set *terms = from_checkpoint ? &lm.terms : &s.terms;

    const int64_t D = r->windows[r->n_windows - 1];
    r->b = malloc((size_t)D * sizeof *r->b);
    r->prefix = malloc((size_t)(D + 1) * sizeof *r->prefix);
    if (!r->b || !r->prefix)
        rc = bk_fail(&err, BK_ERR_NOMEM, "out of memory for %lld distances", (long long)D);
    bk_eval_inputs inputs = {0};
    if (!rc && !(rc = from_checkpoint ? bk_eval_inputs_checkpoint(&inputs, source, &lm, NULL, 0, &err)
                                      : bk_eval_inputs_collect(&inputs, "experiment file", source, terms, exp, s.dir,
                                                               NULL, NULL, 0, &err)))
        rc = bk_eval_check_outputs(csv_path, plot, inputs.items, inputs.n, &err);
    bk_output csv = {0};
    if (!rc && csv_path && !(rc = bk_output_open(&csv, "--csv", csv_path, inputs.items, inputs.n, &err))) {
        r->csv = &csv;
        bk_output_printf(&csv, "table,plugin,stream,layer,head,window,eps,partial_sum,trf,tail,series\n");
    }
    r->out = csv.kind == BK_OUTPUT_STDOUT ? NULL : stdout; /* CSV on stdout: nothing else there */
    if (!rc && r->out) {
        if (from_checkpoint)
            printf("checkpoint: %s (step %lld: learned parameters)\n", source, (long long)st.step);
        printf("experiment: %s\nmodel: %lld layers, %lld heads; %d term%s\nwindows:", exp->path,
               (long long)exp->model.layers, (long long)exp->model.heads, terms->n, terms->n == 1 ? "" : "s");
        for (int w = 0; w < r->n_windows; w++)
            printf("%s %lld", w ? "," : "", (long long)r->windows[w]);
        printf(" distances; eps:");
        for (int e = 0; e < r->n_eps; e++)
            printf("%s %g", e ? "," : "", r->eps[e]);
        printf("\nb_t = exp(T_h(t)), S_L = sum_{t<L} b_t, TRF_L(eps) = smallest j with S_j >= (1 - eps) S_L, shown "
               "as L1/L2/...\n");
        if (r->n_windows > 1)
        {
            double min_eps = r->eps[0];
            for (int e = 1; e < r->n_eps; e++)
                min_eps = r->eps[e] < min_eps ? r->eps[e] : min_eps;
            printf("tail = (S_%lld - S_%lld) / S_%lld, the share of the head's mass beyond %lld; series: settled when "
                   "every TRF moves by at most 5%% (or one token) between these two windows, else saturated when the "
                   "tail < %g (the smallest eps: every TRF is within %lld), else growing\n",
                   (long long)D, (long long)r->windows[r->n_windows - 2], (long long)D,
                   (long long)r->windows[r->n_windows - 2], min_eps, (long long)r->windows[r->n_windows - 2]);
        }
    }
    if (!rc)
        rc = run(r, terms, (int)exp->model.layers, &err);
    if (!rc && r->out)
        printf("\n%d head row%s settled, %d saturated, %d growing\n", r->settled, r->settled == 1 ? "" : "s",
               r->saturated, r->growing);
    if (!rc && r->out && terms->rotary >= 0)
        printf("note: this model has a rotary term (%s, RoPE): its content-dependent decay is not in any table above; "
               "the TRF is computed from the bias tables only (the token stream's row is b_t = 1, as NoPE)\n",
               terms->terms[terms->rotary].label);
    if (!rc)
        rc = bk_output_close(&csv, &err);
    else
        bk_output_discard(&csv);
    if (!rc && csv_path && r->out)
        printf("wrote %s\n", csv_path);
    if (!rc && plot) {
        if (r->n_series == 0)
            rc = bk_fail(&err, BK_ERR_INVALID, "--plot: the experiment has no distance table to plot");
        else if (!(rc = write_plot(r, plot, source, &err)) && r->out)
            printf("wrote %s (and its .pdf, .gp and .dat)\n", plot);
    }
    if (!rc)
        rc = bk_output_stdout_check(&err);
    bk_eval_inputs_free(&inputs);
    free(r->b), free(r->prefix), free(r);
    if (from_checkpoint)
        bk_lm_close(&lm);
    else
        bk_session_close(&s);
    return rc ? bk_report(&err) : 0;
}
