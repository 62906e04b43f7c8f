/* biaskit passkey: retrieval of a key hidden in filler text, per length and depth (eval/passkey.h). */
#include "cli/args.h"
#include "cli/commands.h"
#include "eval/eval.h"
#include "eval/generate.h"
#include "eval/passkey.h"
#include "report/plot.h"
#include "train/checkpoint.h"
#include "util/output.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char help[] =
    "usage: biaskit passkey <checkpoint.safetensors> [--lengths L1,L2,...] [--depths D1,D2,...]\n"
    "                       [--trials N] [--seed S] [--csv FILE] [--json FILE] [--plot FILE.png]\n"
    "       biaskit passkey --write-samples FILE --length T --samples N [--seed S] [--force]\n\n"
    "Passkey retrieval (Landmark Attention; Position Interpolation; YaRN): a random 5-digit key K is\n"
    "hidden at a relative depth in filler text (\"The grass is green. The sky is blue. The sun is yellow.\n"
    "Here we go. There and back again.\" repeated), as \"The pass key is K. Remember it. K is the pass\n"
    "key.\", and asked for at the end: \"What is the pass key? The pass key is \". Each sequence is exactly\n"
    "the length given (tokens the model reads); the key starts a sentence at the depth (0: first, 1: just\n"
    "before the question).\n\n"
    "Scoring: teacher-forced exact match. One forward reads the sequence with the key appended; a trial\n"
    "is correct when, at each of the 5 positions before a digit, the most likely token of the whole\n"
    "vocabulary is that digit (the same as greedy decoding of the 5 digits). The digit accuracy (right\n"
    "digits / 5) is reported too. Keys come from --seed, the length, the depth and the trial alone.\n"
    "Byte-level models only (vocab 256): a BPE model is refused, as the engine has no tokenizer for it.\n"
    "The forward keeps the logits as a training forward does: on the CPU its memory grows with the\n"
    "square of the length (layers x heads x length^2 floats per sequence).\n\n"
    "  --lengths L,...   sequence lengths, each at least 101 tokens (the needle, the question and the\n"
    "                    key with no filler); default: 1x, 2x, 4x, 8x, 16x the training length, those of\n"
    "                    at least 101 tokens\n"
    "  --depths D,...    relative depths of the key, in [0, 1] (default 0,0.25,0.5,0.75,1)\n"
    "  --trials N        keys per (length, depth) cell, N >= 1 (default 20)\n"
    "  --seed S          seed of the keys (default 0)\n"
    "  --csv FILE        write length,depth,trials,correct,accuracy,digit_accuracy,train_length ('-' =\n"
    "                    stdout)\n"
    "  --json FILE       the same as JSON with the checkpoint, step, scoring, seed and grid ('-' = stdout)\n"
    "  --plot FILE.png   a heat map of the accuracy: length on x, depth on y, each cell labelled (gnuplot;\n"
    "                    FILE.pdf, FILE.gp and FILE.dat beside it)\n"
    "  --set K=V         override a value of the stored experiment (as biaskit eval), e.g. a RoPE scaling\n"
    "  --no-verify       skip the checksums of the tensors' data\n"
    "  --strict          refuse a checkpoint whose plugins differ from the ones it was trained with, or a\n"
    "                    plugin file or directory writable by other users (by default warnings)\n\n"
    "Standard output shows the accuracy grid (depth by length) and the digit accuracy grid.\n\n"
    "  --write-samples FILE  instead: training text for fine-tuning on the task, N samples of exactly T\n"
    "                    bytes (--length T >= 102, --samples N), each the task's sequence with its key at\n"
    "                    a depth uniform in [0, 1], keys and depths from --seed (not the evaluation's\n"
    "                    keys); trained at [train] length = T each training window is one whole sample:\n"
    "                    the sequence of --lengths T-1 (T-1 tokens read, the last digit predicted); an\n"
    "                    existing FILE is refused (the samples carry no mark to know it by)\n"
    "  --force           replace an existing FILE (never a checkpoint or a shared object)\n";

#define MAX_GRID 64

static int parse_list(const char *flag, const char *text, double *out, int *n, int integers, bk_error *err)
{
    *n = 0;
    for (const char *p = text; *p;) {
        char *end;
        errno = 0;
        double v = integers ? (double)strtol(p, &end, 10) : strtod(p, &end);
        if (end == p || errno || !isfinite(v) || (*end && *end != ',') || (integers && (v < 1 || v > (1L << 24))))
            return bk_fail(err, BK_ERR_USAGE, "%s: expected %s separated by commas, got '%s'", flag,
                           integers ? "positive integers" : "numbers", text);
        if (*n == MAX_GRID)
            return bk_fail(err, BK_ERR_USAGE, "%s: at most %d values", flag, MAX_GRID);
        out[(*n)++] = v;
        p = *end ? end + 1 : end;
    }
    return *n ? BK_OK : bk_fail(err, BK_ERR_USAGE, "%s: no value given", flag);
}

typedef struct passkey_report {
    const char *checkpoint;
    long long step, train_length;
    long seed;
    int32_t trials;
    const int32_t *lengths;
    int n_lengths;
    const double *depths;
    int n_depths;
    const bk_passkey_cell *cells;
    const char *const *sets;
    int n_sets;
} passkey_report;

static const char scoring[] = "teacher-forced exact match: the argmax at each of the 5 positions before a digit is "
                              "that digit";

static void write_csv(bk_output *o, const passkey_report *r)
{
    bk_output_printf(o, "length,depth,trials,correct,accuracy,digit_accuracy,train_length\n");
    for (int i = 0; i < r->n_lengths * r->n_depths; i++) {
        const bk_passkey_cell *c = &r->cells[i];
        bk_output_printf(o, "%d,%g,%d,%d,%.6f,%.6f,%lld\n", (int)c->length, c->depth, (int)c->trials, (int)c->correct,
                         c->accuracy, c->digit_accuracy, r->train_length);
    }
}

static void write_json(bk_output *o, const passkey_report *r)
{
    bk_output_printf(o, "{\"checkpoint\": ");
    bk_output_json_string(o, r->checkpoint);
    bk_output_printf(o, ", \"step\": %lld, \"train_length\": %lld, \"scoring\": ", r->step, r->train_length);
    bk_output_json_string(o, scoring);
    bk_output_printf(o, ", \"seed\": %ld, \"trials\": %d, \"overrides\": [", r->seed, (int)r->trials);
    for (int i = 0; i < r->n_sets; i++) {
        bk_output_printf(o, "%s", i ? ", " : "");
        bk_output_json_string(o, r->sets[i]);
    }
    bk_output_printf(o, "], \"lengths\": [");
    for (int i = 0; i < r->n_lengths; i++)
        bk_output_printf(o, "%s%d", i ? ", " : "", (int)r->lengths[i]);
    bk_output_printf(o, "], \"depths\": [");
    for (int j = 0; j < r->n_depths; j++)
        bk_output_printf(o, "%s%g", j ? ", " : "", r->depths[j]);
    bk_output_printf(o, "], \"results\": [");
    for (int i = 0; i < r->n_lengths * r->n_depths; i++) {
        const bk_passkey_cell *c = &r->cells[i];
        bk_output_printf(o,
                         "%s\n  {\"length\": %d, \"depth\": %g, \"trials\": %d, \"correct\": %d, \"accuracy\": %.6f, "
                         "\"digit_accuracy\": %.6f, \"needle_at\": %d}",
                         i ? "," : "", (int)c->length, c->depth, (int)c->trials, (int)c->correct, c->accuracy,
                         c->digit_accuracy, (int)c->needle_at_first);
    }
    bk_output_printf(o, "\n]}\n");
}

static void print_grid(const passkey_report *r, const char *title, int digits)
{
    printf("\n%s\n%-14s", title, "depth \\ length");
    for (int i = 0; i < r->n_lengths; i++)
        printf(" %7d", (int)r->lengths[i]);
    printf("\n");
    for (int j = 0; j < r->n_depths; j++) {
        printf("%-14g", r->depths[j]);
        for (int i = 0; i < r->n_lengths; i++) {
            const bk_passkey_cell *c = &r->cells[(size_t)i * r->n_depths + j];
            printf(" %7.3f", digits ? c->digit_accuracy : c->accuracy);
        }
        printf("\n");
    }
}

/* The heat map of the accuracy: length on x (one column per length), depth on y. */
static int write_plot(const char *png, const passkey_report *r, bk_error *err)
{
    double *x = malloc((size_t)r->n_lengths * sizeof *x), *z = malloc((size_t)r->n_lengths * r->n_depths * sizeof *z);
    if (!x || !z) {
        free(x), free(z);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for --plot '%s'", png);
    }
    for (int i = 0; i < r->n_lengths; i++)
        x[i] = r->lengths[i];
    for (int j = 0; j < r->n_depths; j++)
        for (int i = 0; i < r->n_lengths; i++)
            z[(size_t)j * r->n_lengths + i] = r->cells[(size_t)i * r->n_depths + j].accuracy;
    char title[512];
    snprintf(title, sizeof title, "passkey retrieval, %d trials per cell (trained at length %lld)", (int)r->trials,
             r->train_length);
    bk_heatmap h = {png, title, "length (tokens)", "depth of the key (0: start, 1: end)",
                    "accuracy (exact match of the 5 digits)", x, r->depths, z, r->n_lengths, r->n_depths, 0.0, 1.0};
    int rc = bk_heatmap_write(&h, err);
    free(x), free(z);
    return rc;
}

/* The samples are plain training text with no mark of their own, so an existing regular file (through a
 * symbolic link too) is never taken for one: replaced only under --force, and a checkpoint or a shared object
 * (a plugin) not even then. */
static int samples_target_check(const char *path, int force, bk_error *err)
{
    struct stat st;
    if (!strcmp(path, "-") || stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return BK_OK; /* standard output, a new file, a device or a FIFO (bk_output_open judges the rest) */
    if (!force)
        return bk_fail(err, BK_ERR_USAGE, "--write-samples '%s': the file exists; samples are written to a new "
                       "file (give --force to replace it)", path);
    unsigned char head[4] = {0};
    FILE *f = fopen(path, "rb");
    const size_t got = f ? fread(head, 1, sizeof head, f) : 0;
    if (f)
        fclose(f);
    const int elf = got == 4 && !memcmp(head, "\x7f" "ELF", 4);
    if (elf || bk_checkpoint_is_file(path))
        return bk_fail(err, BK_ERR_USAGE, "--write-samples '%s': the file is a %s; not replaced, even under --force",
                       path, elf ? "shared object (a plugin?)" : "checkpoint");
    return BK_OK;
}

/* --write-samples FILE --length T --samples N [--seed S] [--force]: training text for fine-tuning on the task. */
static int write_samples(const bk_args *args)
{
    bk_error err;
    const char *path = bk_args_get(args, "write-samples"), *v;
    long length = 0, n = 0, seed = 0;
    if (args->n_positional) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit passkey --write-samples: takes no checkpoint ('%s')", args->positional[0]);
        return bk_report(&err);
    }
    if (!(v = bk_args_get(args, "length")) || !bk_args_get(args, "samples")) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit passkey --write-samples: give --length T (the training length) and "
                "--samples N");
        return bk_report(&err);
    }
    if (bk_args_int("length", v, bk_passkey_min_length() + 1, 1L << 20, &length, &err) ||
        bk_args_int("samples", bk_args_get(args, "samples"), 1, (1L << 30) / length, &n, &err) ||
        ((v = bk_args_get(args, "seed")) && bk_args_int("seed", v, 0, 9007199254740991L, &seed, &err)))
        return bk_report(&err);
    if (samples_target_check(path, bk_args_get(args, "force") != NULL, &err))
        return bk_report(&err);
    bk_output o;
    if (bk_output_open(&o, "--write-samples", path, NULL, 0, &err))
        return bk_report(&err);
    if (bk_passkey_write_samples(o.f, path, (int32_t)length, n, (uint64_t)seed, &err)) {
        bk_output_discard(&o);
        return bk_report(&err);
    }
    if (bk_output_close(&o, &err))
        return bk_report(&err);
    if (strcmp(path, "-"))
        printf("wrote %ld passkey samples of %ld bytes to %s: train on them with [train] length = %ld\n", n, length,
               path, length);
    return 0;
}

int bk_cmd_passkey(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0}, {"lengths", 1, 0}, {"depths", 1, 0},  {"trials", 1, 0},
                                        {"seed", 1, 0}, {"csv", 1, 0},     {"json", 1, 0},    {"plot", 1, 0},
                                        {"set", 1, 1},  {"no-verify", 0, 0}, {"write-samples", 1, 0},
                                        {"samples", 1, 0}, {"length", 1, 0}, {"force", 0, 0}, {"strict", 0, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit passkey", &args, &err))
        return bk_report(&err);
    bk_cli_plugin_strictness(bk_args_get(&args, "strict") != NULL);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    if (bk_args_get(&args, "write-samples"))
        return write_samples(&args);
    if (bk_args_get(&args, "samples") || bk_args_get(&args, "length") || bk_args_get(&args, "force")) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit passkey: --samples, --length and --force go with --write-samples FILE");
        return bk_report(&err);
    }
    if (args.n_positional != 1) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit passkey: expected one checkpoint; see 'biaskit passkey --help'");
        return bk_report(&err);
    }
    long trials = 20, seed = 0;
    const char *v;
    if ((v = bk_args_get(&args, "trials")) && bk_args_int("trials", v, -(1L << 30), 1L << 20, &trials, &err))
        return bk_report(&err);
    if ((v = bk_args_get(&args, "seed")) && bk_args_int("seed", v, 0, 9007199254740991L, &seed, &err))
        return bk_report(&err);
    double lengths_d[MAX_GRID], depths[MAX_GRID] = {0.0, 0.25, 0.5, 0.75, 1.0};
    int n_lengths = 0, n_depths = 5;
    if ((v = bk_args_get(&args, "lengths")) && parse_list("--lengths", v, lengths_d, &n_lengths, 1, &err))
        return bk_report(&err);
    if ((v = bk_args_get(&args, "depths")) && parse_list("--depths", v, depths, &n_depths, 0, &err))
        return bk_report(&err);
    int32_t lengths[MAX_GRID];
    for (int i = 0; i < n_lengths; i++)
        lengths[i] = (int32_t)lengths_d[i];
    /* the grid's own errors before the checkpoint loads (the default lengths need the training length) */
    if (bk_passkey_check(lengths, n_lengths, depths, n_depths, (int32_t)trials, 1 << 24, &err))
        return bk_report(&err);
    const char *csv = bk_args_get(&args, "csv"), *json = bk_args_get(&args, "json"), *plot = bk_args_get(&args, "plot");
    if (plot && (strlen(plot) < 5 || strcmp(plot + strlen(plot) - 4, ".png") != 0)) {
        bk_fail(&err, BK_ERR_USAGE, "--plot: expected a file name ending in .png, got '%s'", plot);
        return bk_report(&err);
    }
    const char *flags[3] = {"--csv", "--json", "--plot"}, *paths[3] = {csv, json, plot};
    if (bk_output_check_distinct(flags, paths, 3, &err))
        return bk_report(&err);

    const char *sets[BK_ARGS_MAX];
    const bk_reopen_request reopen = bk_cli_reopen_request(&args, BK_REOPEN_EVALUATE, sets, BK_ARGS_MAX);
    size_t n_sets = (size_t)reopen.n_sets;
    bk_lm lm;
    bk_train_state st;
    if (bk_reopen(args.positional[0], &reopen, &lm, NULL, &st, &err))
        return bk_report(&err);
    if (lm.exp.run.threads > 0)
        omp_set_num_threads((int)lm.exp.run.threads);
    int rc = bk_text_model_check(&lm, "passkey", 0, &err);
    if (!rc && !n_lengths) {
        for (int64_t k = 1; k <= 16; k *= 2)
            if (k * lm.exp.train.length >= bk_passkey_min_length() && k * lm.exp.train.length <= (1 << 24))
                lengths[n_lengths++] = (int32_t)(k * lm.exp.train.length);
        if (!n_lengths)
            rc = bk_fail(&err, BK_ERR_USAGE, "--lengths: 16x the training length (%lld) is below the shortest "
                         "passkey length, %d tokens; give --lengths",
                         (long long)lm.exp.train.length, (int)bk_passkey_min_length());
    }
    bk_eval_inputs inputs = {0};
    if (!rc && !(rc = bk_eval_inputs_checkpoint(&inputs, args.positional[0], &lm, NULL, 0, &err)))
        if (!(rc = bk_eval_check_outputs(csv, plot, inputs.items, inputs.n, &err)) && json)
            rc = bk_output_check("--json", json, inputs.items, inputs.n, &err);
    bk_passkey_cell *cells = rc ? NULL : calloc((size_t)n_lengths * n_depths, sizeof *cells);
    if (!rc && !cells)
        rc = bk_fail(&err, BK_ERR_NOMEM, "out of memory for the passkey grid");
    if (!rc)
        rc = bk_passkey_run(&lm, lengths, n_lengths, depths, n_depths, (int32_t)trials, (uint64_t)seed, cells, NULL,
                            NULL, &err);
    const passkey_report r = {args.positional[0], (long long)st.step, (long long)lm.exp.train.length, seed,
                              (int32_t)trials, lengths, n_lengths, depths, n_depths, cells, sets, (int)n_sets};
    const int on_stdout = (csv && !strcmp(csv, "-")) || (json && !strcmp(json, "-"));
    if (!rc && !on_stdout) {
        printf("checkpoint: %s (step %lld, trained at length %lld)\n", r.checkpoint, r.step, r.train_length);
        printf("device: %s\n", lm.be ? lm.be->description : "cpu");
        if (n_sets) {
            printf("overrides: ");
            for (size_t i = 0; i < n_sets; i++)
                printf("%s%s", i ? ", " : "", sets[i]);
            printf("\n");
        }
        printf("passkey: %d trials per cell, seed %ld; scoring: %s\n", (int)trials, seed, scoring);
        print_grid(&r, "accuracy (exact match of the 5 digits)", 0);
        print_grid(&r, "digit accuracy (right digits / 5)", 1);
    }
    for (int k = 0; k < 2 && !rc; k++) {
        bk_output out;
        const char *path = k ? json : csv;
        if (path && !(rc = bk_output_open(&out, flags[k], path, inputs.items, inputs.n, &err))) {
            (k ? write_json : write_csv)(&out, &r);
            rc = bk_output_close(&out, &err);
        }
    }
    if (!rc && plot)
        rc = write_plot(plot, &r, &err);
    if (!rc)
        rc = bk_output_stdout_check(&err);
    free(cells);
    bk_eval_inputs_free(&inputs);
    bk_lm_close(&lm);
    return rc ? bk_report(&err) : 0;
}
