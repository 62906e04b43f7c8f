/* biaskit eval: perplexity of a trained checkpoint at many lengths (the extrapolation curve). */
#define _POSIX_C_SOURCE 200809L
#include "cli/args.h"
#include "cli/commands.h"
#include "dist/dist.h"
#include "eval/eval.h"
#include "io/safetensors.h" /* bk_xxh64 */
#include "train/checkpoint.h"
#include "util/number.h"
#include "util/output.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define BK_EVAL_TEXT_(x) #x
#define BK_EVAL_TEXT(x) BK_EVAL_TEXT_(x)
#define BK_EVAL_BATCH_TEXT BK_EVAL_TEXT(BK_EVAL_TOKENS_PER_BATCH)

static const char help[] =
    "usage: biaskit eval <checkpoint.safetensors> [--lengths L1,L2,...] [--sliding STRIDE]\n"
    "                    [--data PATH]... [--tokens N] [--bos] [--csv FILE] [--json FILE]\n"
    "                    [--positions FILE] [--predictions FILE]\n\n"
    "Rebuilds the model stored in the checkpoint and measures its perplexity on the validation\n"
    "data of its experiment (or --data) at each length. Without --sliding the text is cut into\n"
    "non-overlapping chunks of each length and every token is scored (the ALiBi / KERPLE protocol);\n"
    "with --sliding S, windows of each length advance by S tokens and only their last S tokens are\n"
    "scored. Lengths beyond the training length just work: memory holds one layer of activations\n"
    "for the chunks of one forward (up to " BK_EVAL_BATCH_TEXT " tokens, or one chunk of a longer length) and grows\n"
    "linearly with the length. Below the table, a line says how much the largest forward needed,\n"
    "one line per length its speed (tokens through the model per second of wall time), and the\n"
    "last the process's peak resident memory.\n\n"
    "  --lengths L,...   lengths to evaluate (default: 1x, 2x, 4x, 8x the training length)\n"
    "  --sliding S       sliding-window evaluation with stride S\n"
    "  --data PATH       evaluate these files or directories instead (repeatable; same format). A\n"
    "                    checkpoint that carries a tokenizer (an imported model) with [data] format =\n"
    "                    \"text\" reads them through it; else text is read as bytes\n"
    "  --tokens N        use at most the first N tokens of the data (default 65536; 0 = all)\n"
    "  --bos             a checkpoint with a tokenizer: its BOS token before the text's tokens (by\n"
    "                    default no special token is added: the text is encoded as HF tokenizers does\n"
    "                    with add_special_tokens=False)\n"
    "  --csv FILE        write length,train_length,chunks,tokens,loss,ppl,overrides as CSV ('-' =\n"
    "                    stdout); overrides: the --set strings joined by ';'\n"
    "  --json FILE       write the same as JSON, with the position-wise loss, chunks per forward\n"
    "                    (batch), activation memory in bytes, seconds and tokens_per_second, the\n"
    "                    --set overrides and peak_rss_bytes ('-' = stdout)\n"
    "  --positions FILE  write length,position,loss (loss at each position, averaged over chunks)\n"
    "                    ('-' = stdout)\n"
    "  --predictions FILE  write length,chunk,position,target,predicted: the most likely next token at\n"
    "                    every position of every chunk (the lowest id on a tie), e.g. to compare top-1\n"
    "                    agreement with another engine ('-' = stdout; non-overlapping chunks, one\n"
    "                    process, on the CPU)\n"
    "  --set K=V         override a value of the stored experiment (repeatable): [data] and [run] keys,\n"
    "                    a plugin's option (a warning); not the model's shape nor how it was trained\n"
    "  --strict          refuse a checkpoint whose plugins differ from the ones it was trained with\n"
    "                    (version, declarations or file bytes; by default a warning names the change),\n"
    "                    a plugin option changed by --set, or a format 2 checkpoint (no metadata checksum);\n"
    "                    a plugin file or directory writable by other users (by default a warning)\n"
    "  --no-verify       skip the checksums of the tensors' data (faster on a large checkpoint); the\n"
    "                    checksum of the metadata (experiment, step, plugin records) is still verified\n\n"
    "With an MPI launcher (mpirun -np N biaskit eval ...; a biaskit built with MPI) the batches of\n"
    "chunks are shared out among the processes and their sums added in order: the same numbers,\n"
    "to the bit, as one process. Rank 0 prints and writes the files.\n\n"
    "Each FILE is written atomically (into a temporary file beside it, renamed over it once complete:\n"
    "a failed write is an error and leaves the old file as it was) and refused when it names an input\n"
    "(the checkpoint, a plugin, a data file, or a file the data reader would take in a data directory;\n"
    "through a symbolic or hard link too) or another output. A symbolic link is followed; a device or a\n"
    "pipe (/dev/null, a process substitution) is written directly, every write checked. A FILE '-'\n"
    "has standard output to itself: the table is not printed (and only one FILE may be '-').\n";

static int parse_lengths(const char *text, int32_t *out, int cap, int *n, bk_error *err)
{
    *n = 0;
    for (const char *p = text; *p;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > (1L << 24) || (*end && *end != ','))
            return bk_fail(err, BK_ERR_USAGE, "--lengths: expected positive integers separated by commas, got '%s'",
                           text);
        if (*n == cap)
            return bk_fail(err, BK_ERR_USAGE, "--lengths: at most %d lengths", cap);
        out[(*n)++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (!*n)
        return bk_fail(err, BK_ERR_USAGE, "--lengths: no length given");
    return BK_OK;
}

/* What the output files say. */
typedef struct eval_report {
    const bk_eval_result *results;
    int n;
    int64_t train_length, step;
    const char *checkpoint;
    int32_t stride;
    const char *const *sets; /* the --set strings, in order (e.g. a RoPE scaling chosen at evaluation) */
    int n_sets;
    const bk_tokens *data;   /* what was evaluated (the targets of --predictions) */
} eval_report;

/* A JSON number, or null for a value JSON cannot hold (a diverged model's infinite perplexity). */
/* Tokens run through the model per second of a length's forwards (0 when it took no measurable time). */
static double eval_tokens_per_second(const bk_eval_result *r)
{
    return r->seconds > 0 ? (double)r->forwarded / r->seconds : 0.0;
}

/* The process's resident high-water mark in bytes (getrusage: Linux counts ru_maxrss in KiB). */
static uint64_t peak_rss_bytes(void)
{
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? (uint64_t)u.ru_maxrss * 1024u : 0;
}

static void json_number(bk_output *o, const char *format, double v)
{
    if (isfinite(v))
        bk_output_printf(o, format, v);
    else
        bk_output_printf(o, "null");
}

/* The --set strings joined by ';' as one CSV field (bk_csv_field); empty without --set. */
static void csv_overrides(bk_output *o, const eval_report *r)
{
    size_t n = 1;
    for (int i = 0; i < r->n_sets; i++)
        n += strlen(r->sets[i]) + 1;
    char *joined = malloc(n);
    if (!joined) {
        bk_output_printf(o, "(out of memory)");
        return;
    }
    joined[0] = '\0';
    for (int i = 0; i < r->n_sets; i++)
        strcat(strcat(joined, i ? ";" : ""), r->sets[i]);
    bk_csv_field(o->f, joined);
    free(joined);
}

/* The overrides are the last column, so that a reader by position (length, ..., ppl) is unchanged. */
static void write_csv(bk_output *o, const eval_report *r)
{
    bk_output_printf(o, "length,train_length,chunks,tokens,loss,ppl,overrides\n");
    for (int i = 0; i < r->n; i++) {
        bk_output_printf(o, "%d,%lld,%lld,%lld,%.6f,%.6f,", (int)r->results[i].length, (long long)r->train_length,
                         (long long)r->results[i].chunks, (long long)r->results[i].tokens, r->results[i].loss,
                         r->results[i].ppl);
        csv_overrides(o, r);
        bk_output_printf(o, "\n");
    }
}

static void write_json(bk_output *o, const eval_report *r)
{
    bk_output_printf(o, "{\"checkpoint\": ");
    bk_output_json_string(o, r->checkpoint);
    bk_output_printf(o, ", \"step\": %lld, \"train_length\": %lld, \"protocol\": \"%s\", \"overrides\": [",
                     (long long)r->step, (long long)r->train_length, r->stride ? "sliding" : "non-overlapping");
    for (int i = 0; i < r->n_sets; i++) {
        bk_output_printf(o, "%s", i ? ", " : "");
        bk_output_json_string(o, r->sets[i]);
    }
    bk_output_printf(o, "], \"results\": [");
    for (int i = 0; i < r->n; i++) {
        const bk_eval_result *x = &r->results[i];
        bk_output_printf(o, "%s\n  {\"length\": %d, \"chunks\": %lld, \"tokens\": %lld, \"loss\": ", i ? "," : "",
                         (int)x->length, (long long)x->chunks, (long long)x->tokens);
        json_number(o, "%.6f", x->loss);
        bk_output_printf(o, ", \"ppl\": ");
        json_number(o, "%.6f", x->ppl);
        bk_output_printf(o, ", \"batch\": %d, \"activation_bytes\": %zu", (int)x->batch, x->activation_bytes);
        bk_output_printf(o, ", \"seconds\": %.3f, \"tokens_per_second\": %.1f", x->seconds,
                         eval_tokens_per_second(x));
        if (x->position_loss) {
            bk_output_printf(o, ", \"position_loss\": [");
            for (int32_t t = 0; t < x->length; t++) {
                bk_output_printf(o, "%s", t ? ", " : "");
                json_number(o, "%.5f", x->position_loss[t]);
            }
            bk_output_printf(o, "]");
        }
        bk_output_printf(o, "}");
    }
    bk_output_printf(o, "\n], \"peak_rss_bytes\": %llu}\n", (unsigned long long)peak_rss_bytes());
}

static void write_positions(bk_output *o, const eval_report *r)
{
    bk_output_printf(o, "length,position,loss\n");
    for (int i = 0; i < r->n; i++)
        for (int32_t t = 0; r->results[i].position_loss && t < r->results[i].length; t++)
            bk_output_printf(o, "%d,%d,%.6f\n", (int)r->results[i].length, (int)t, r->results[i].position_loss[t]);
}

static void write_predictions(bk_output *o, const eval_report *r)
{
    bk_output_printf(o, "length,chunk,position,target,predicted\n");
    for (int i = 0; i < r->n; i++) {
        const bk_eval_result *x = &r->results[i];
        for (int64_t c = 0; x->predictions && c < x->chunks; c++)
            for (int32_t t = 0; t < x->length; t++)
                bk_output_printf(o, "%d,%lld,%d,%d,%d\n", (int)x->length, (long long)c, (int)t,
                                 (int)r->data->tokens[c * x->length + t + 1],
                                 (int)x->predictions[c * x->length + t]);
    }
}

/* The output files: --csv, --json, --positions, --predictions. */
#define N_OUTPUTS 4
static const char *const output_flags[N_OUTPUTS] = {"--csv", "--json", "--positions", "--predictions"};
static void (*const output_writers[N_OUTPUTS])(bk_output *, const eval_report *) = {
    write_csv, write_json, write_positions, write_predictions};

/* Each output given: refused when it names an input or another output (util/output.h). */
static int check_outputs(const char *const *paths, const bk_output_input *inputs, int n_inputs, bk_error *err)
{
    int rc = bk_output_check_distinct(output_flags, paths, N_OUTPUTS, err);
    for (int k = 0; k < N_OUTPUTS && !rc; k++)
        if (paths[k])
            rc = bk_output_check(output_flags[k], paths[k], inputs, n_inputs, err);
    return rc;
}

#define MAX_LENGTHS 64

int bk_cmd_eval(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0},  {"lengths", 1, 0}, {"sliding", 1, 0}, {"data", 1, 1},
                                        {"tokens", 1, 0}, {"csv", 1, 0},     {"json", 1, 0},    {"positions", 1, 0},
                                        {"set", 1, 1},   {"strict", 0, 0}, {"no-verify", 0, 0}, {"bos", 0, 0}, {"predictions", 1, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit eval", &args, &err))
        return bk_report(&err);
    bk_cli_plugin_strictness(bk_args_get(&args, "strict") != NULL);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    if (args.n_positional != 1) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit eval: expected one checkpoint; see 'biaskit eval --help'");
        return bk_report(&err);
    }
    long stride = 0, max_tokens = 65536;
    const char *v;
    if ((v = bk_args_get(&args, "sliding")) && bk_args_int("sliding", v, 1, 1L << 24, &stride, &err))
        return bk_report(&err);
    if ((v = bk_args_get(&args, "tokens")) && bk_args_int("tokens", v, 0, 9007199254740991L, &max_tokens, &err))
        return bk_report(&err);
    const char *sets[BK_ARGS_MAX], *data[BK_ARGS_MAX];
    const bk_reopen_request reopen = bk_cli_reopen_request(&args, BK_REOPEN_EVALUATE, sets, BK_ARGS_MAX);
    size_t n_sets = (size_t)reopen.n_sets;
    size_t n_data = bk_args_all(&args, "data", data, BK_ARGS_MAX);
    const char *outputs[N_OUTPUTS] = {bk_args_get(&args, "csv"), bk_args_get(&args, "json"),
                                      bk_args_get(&args, "positions"), bk_args_get(&args, "predictions")};
    /* the outputs against the checkpoint now, before it loads; against every input once they are known */
    const bk_output_input ckpt_input = {"checkpoint", args.positional[0], NULL, 0};
    if (check_outputs(outputs, &ckpt_input, 1, &err))
        return bk_report(&err);

    bk_dist dist; /* one process, or one of `mpirun -np N`: the chunks are shared out */
    if (bk_dist_init(&dist, &err))
        return bk_report(&err);
    const int lead = dist.rank == 0; /* rank 0 prints and writes; every rank computes */
    bk_lm lm;
    bk_train_state st;
    /* every rank loads, then they agree: one that failed (or runs another experiment, another command line)
     * stops them all, rather than leaving the others waiting in a collective */
    const int loaded = bk_reopen(args.positional[0], &reopen, &lm, NULL, &st, &err) == BK_OK;
    int start_rc = bk_dist_agree(&dist, loaded ? BK_OK : BK_ERR_IO, &err);
    if (!start_rc && dist.size > 1) {
        char *mine = bk_lm_agreement_text(&lm, st.step), *text = NULL;
        size_t n = 32 + (mine ? strlen(mine) : 0);
        for (int i = 0; i < argc; i++)
            n += strlen(argv[i]) + 1;
        if (mine && (text = malloc(n))) {
            strcpy(text, "[command line]");
            for (int i = 0; i < argc; i++)
                strcat(strcat(text, " "), argv[i]);
            strcat(strcat(text, "\n"), mine);
        }
        start_rc = bk_dist_same(&dist, "experiment or command line", text ? text : "(out of memory)", &err);
        free(mine), free(text);
    }
    if (start_rc) {
        int status = lead ? bk_report(&err) : 1;
        if (loaded)
            bk_lm_close(&lm);
        bk_dist_finalize(&dist);
        return status;
    }
    const bk_experiment *e = &lm.exp;
    if (e->run.threads > 0)
        omp_set_num_threads((int)e->run.threads);
    else if (dist.size > 1)
        omp_set_num_threads(bk_dist_threads(&dist));
    int32_t lengths[MAX_LENGTHS];
    int n_lengths = 0;
    int rc = BK_OK;
    if ((v = bk_args_get(&args, "lengths")))
        rc = parse_lengths(v, lengths, MAX_LENGTHS, &n_lengths, &err);
    else
        for (int k = 1; k <= 8; k *= 2)
            lengths[n_lengths++] = (int32_t)(k * e->train.length);

    bk_eval_inputs inputs = {0};
    if (!rc && !(rc = bk_eval_inputs_checkpoint(&inputs, args.positional[0], &lm, data, (int)n_data, &err)))
        rc = check_outputs(outputs, inputs.items, inputs.n, &err);
    rc = bk_dist_agree(&dist, rc, &err); /* every process checked the same files */
    bk_tokens train = {0}, val = {0};
    lm.add_bos = bk_args_get(&args, "bos") != NULL;
    if (!rc && lm.add_bos && !lm.tokenizer)
        rc = bk_fail(&err, BK_ERR_USAGE, "--bos: the checkpoint carries no tokenizer (a BOS token is its tokenizer's)");
    else if (!rc) /* the data: the experiment's validation split, or --data (paths from the working directory) */
        rc = bk_lm_load_data(&lm, data, (int)n_data, 2, "; or give --data PATH", &train, &val, &err);
    rc = bk_dist_agree(&dist, rc, &err); /* a rank without its data stops them all */
    if (!rc && dist.size > 1) { /* and the same data on every rank */
        char text[160];
        snprintf(text, sizeof text, "[data] %lld evaluation tokens (xxh64 %016llx)\n", (long long)val.count,
                 (unsigned long long)bk_xxh64(val.tokens, (size_t)val.count * sizeof *val.tokens, 0));
        rc = bk_dist_same(&dist, "evaluation data", text, &err);
    }
    bk_eval_result results[MAX_LENGTHS];
    if (!rc)
        rc = bk_eval_ex(&lm, &val, lengths, n_lengths, (int32_t)stride, max_tokens, outputs[3] != NULL, &dist,
                        results, &err);
    if (rc || !lead) {
        if (!rc)
            bk_eval_results_free(results, n_lengths);
        bk_tokens_free(&train), bk_tokens_free(&val);
        bk_eval_inputs_free(&inputs);
        bk_lm_close(&lm);
        int status = rc && lead ? bk_report(&err) : rc ? 1 : 0;
        bk_dist_finalize(&dist);
        return status;
    }

    int on_stdout = 0; /* an output on standard output has it to itself: no table there */
    for (int k = 0; k < N_OUTPUTS; k++)
        on_stdout |= outputs[k] && strcmp(outputs[k], "-") == 0;
    double base = NAN;
    for (int i = 0; i < n_lengths; i++)
        if (results[i].length == e->train.length)
            base = results[i].ppl;
    if (!on_stdout) {
        printf("checkpoint: %s (step %lld, trained at length %lld)\n", args.positional[0], (long long)st.step,
               (long long)e->train.length);
        printf("device: %s%s%s\n", lm.be ? lm.be->description : "cpu", lm.device_note[0] ? "; " : "",
               lm.device_note);
        if (n_sets) { /* what this evaluation changed, beside its numbers (the JSON's "overrides") */
            printf("overrides: ");
            for (size_t i = 0; i < (size_t)n_sets; i++)
                printf("%s%s", i ? ", " : "", sets[i]);
            printf("\n");
        }
        printf("data: %s, %lld tokens used; %s\n\n", val.name,
               (long long)(max_tokens > 0 && max_tokens < val.count ? max_tokens : val.count),
               stride ? "sliding window" : "non-overlapping chunks");
        printf("%8s %7s %7s %9s %9s %10s %9s\n", "length", "x train", "chunks", "tokens", "loss", "perplexity",
               "vs train");
        for (int i = 0; i < n_lengths; i++) {
            const bk_eval_result *r = &results[i];
            char change[32] = "";
            if (isfinite(base))
                snprintf(change, sizeof change, "%+.1f%%", 100.0 * (r->ppl / base - 1.0));
            char ppl[32];
            printf("%8d %7.2f %7lld %9lld %9.4f %10s %9s\n", (int)r->length,
                   (double)r->length / (double)e->train.length, (long long)r->chunks, (long long)r->tokens, r->loss,
                   bk_number_text(r->ppl, 3, ppl, sizeof ppl), change);
        }

        int most = 0; /* the length whose forward needed the most memory */
        for (int i = 1; i < n_lengths; i++)
            if (results[i].activation_bytes > results[most].activation_bytes)
                most = i;
        printf("\nmemory: %.1f MiB of activations at most (length %d, %d chunk%s per forward), on %s\n",
               (double)results[most].activation_bytes / (1024.0 * 1024.0), (int)results[most].length,
               (int)results[most].batch, results[most].batch == 1 ? "" : "s", lm.be ? lm.be->name : "cpu");
        for (int i = 0; i < n_lengths; i++) /* wall times vary from run to run: lines of their own */
            printf("speed: length %d: %lld tokens through the model in %.2f s, %.0f tokens/s\n", (int)results[i].length,
                   (long long)results[i].forwarded, results[i].seconds, eval_tokens_per_second(&results[i]));
        printf("peak memory: %.1f MiB resident (the process's high-water mark, weights and data included)\n",
               (double)peak_rss_bytes() / (1024.0 * 1024.0));
    }

    const eval_report report = {results, n_lengths, e->train.length, st.step, args.positional[0],
                                (int32_t)stride, sets, (int)n_sets, &val};
    for (int k = 0; k < N_OUTPUTS && !rc; k++) {
        bk_output out;
        if (outputs[k] && !(rc = bk_output_open(&out, output_flags[k], outputs[k], inputs.items, inputs.n, &err))) {
            output_writers[k](&out, &report);
            rc = bk_output_close(&out, &err);
        }
    }
    if (!rc)
        rc = bk_output_stdout_check(&err);
    bk_eval_results_free(results, n_lengths);
    bk_tokens_free(&train), bk_tokens_free(&val);
    bk_eval_inputs_free(&inputs);
    bk_lm_close(&lm);
    int status = rc ? bk_report(&err) : 0;
    bk_dist_finalize(&dist);
    return status;
}
