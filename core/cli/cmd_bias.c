/* biaskit bias: each head's distance table for one layer of an experiment, or of a trained checkpoint
 * (with its learned parameters): the first thing a plugin author looks at. Prints the tables (a
 * readable subset of distances, or all of them) and can write every value as CSV. */
#include "bias/bias.h"
#include "bias/mix.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cuda/device.h"
#include "eval/eval.h"
#include "model/bias_math.h"
#include "train/checkpoint.h"
#include "util/output.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: biaskit bias <experiment.toml | checkpoint.safetensors> [--layer N] [--length L] [--all]\n"
    "                    [--terms] [--csv FILE] [--device auto|cpu|cuda|emulated] [--set section.key=value]...\n"
    "                    [--strict] [--no-verify]\n\n"
    "Computes the distance table T[h][d] of every [[term]] of the experiment for one layer and\n"
    "prints, per position stream, the mixed table the attention adds to its scores (after the\n"
    "1/sqrt(d_head) scale): one column per head, one row per distance d = i - j. Given a checkpoint\n"
    "(a .safetensors file written by 'biaskit train'), the tables come from its learned plugin\n"
    "parameters and mixing weights, as 'biaskit eval' uses them; an experiment file gives the\n"
    "initial ones.\n\n"
    "With a masking term (window) or a coordinate table (FIRE) the score's bias is not a function\n"
    "of d alone; an attention view follows, per head: what the scores of query i get at distance d\n"
    "= i - j, on the token index (the token stream's mixed table, read at min(d, distance_cap), plus\n"
    "FIRE's F_h(u(i, d))), 'masked' where the mask hides key j. What depends on the text (the segment\n"
    "stream, content and counted positions) or multiplies q.k (a logit scale) is named, not shown.\n\n"
    "  --layer N     layer to show (default 0; matters for per-layer parameters)\n"
    "  --length L    sequence length: distances 0 .. L-1 (default [train] length)\n"
    "  --all         print every distance (default: 0..16, then powers of two, then L-1; the\n"
    "                attention view's columns: 0..4, then powers of two, then L-1)\n"
    "  --terms       also print each term's own table before the mix\n"
    "  --csv FILE    write every value as CSV: layer,stream,table,head,distance,value\n"
    "                (table is a term's name, or \"mixed\"); with the attention view a seventh column,\n"
    "                query: empty on those rows, i on the view's rows (table \"attention\", every d <= i\n"
    "                of the query rows shown, every row with --all; -inf where masked). FILE '-' is\n"
    "                standard output. FILE is\n"
    "                written atomically (a temporary file renamed over it once complete; a failed write\n"
    "                is an error and leaves the old file as it was) and refused when it names an input\n"
    "                (the experiment file or checkpoint, a plugin; through a link too). A device or a\n"
    "                pipe is written directly, every write checked\n"
    "  --device D    compute the tables with the plugins' CUDA code (cuda), on the host (cpu, and\n"
    "                emulated, whose device code never runs plugins' CUDA code), or as [run] device\n"
    "                says (auto: CUDA when a GPU answers); for a checkpoint, auto unless given (its model\n"
    "                is rebuilt on the CPU, whatever device trained it: only its terms are used)\n"
    "  --set K=V     override a value of the experiment file (repeatable)\n"
    "  --strict      checkpoint: refuse it when its plugins differ from the ones it was trained with,\n"
    "                a plugin option changed by --set, or a format 2 checkpoint (no metadata checksum);\n"
    "                any source: a plugin file or directory writable by other users (else a warning)\n"
    "  --no-verify   checkpoint: skip the checksums of the tensors' data (the metadata's is verified)\n";

/* The rows shown without --all: every distance up to 16, then powers of two, then the last. */
static int shown(int32_t d, int32_t distances, int all)
{
    return all || d <= 16 || d == distances - 1 || (d & (d - 1)) == 0;
}

/* A value as printed: -m_h * d at d = 0 is -0 in IEEE arithmetic; printing "-0" reads as a sign error, so
 * both zeros print as 0 (in the table and the CSV). */
static double printed(float v)
{
    return v == 0.0f ? 0.0 : (double)v;
}

static void print_table(FILE *out, const char *title, const float *table, int32_t heads, int32_t distances,
                        int all)
{
    if (!out)
        return;
    fprintf(out, "\n%s\n%8s", title, "d");
    for (int32_t h = 0; h < heads; h++) {
        char name[16];
        snprintf(name, sizeof name, "h%d", h);
        fprintf(out, " %11s", name);
    }
    fprintf(out, "\n");
    for (int32_t d = 0; d < distances; d++) {
        if (!shown(d, distances, all))
            continue;
        if (!all && d > 16 && !shown(d - 1, distances, all))
            fprintf(out, "%8s\n", "...");
        fprintf(out, "%8d", d);
        for (int32_t h = 0; h < heads; h++)
            fprintf(out, " %11.6g", printed(table[(size_t)h * (size_t)distances + (size_t)d]));
        fprintf(out, "\n");
    }
}

typedef struct bias_options {
    long layer, length;
    int all, terms, use_cuda;
    int view; /* the attention view follows the tables (a coordinate-table or masking term) */
    const char *csv;
} bias_options;

/* The CSV's columns; with the attention view a seventh, the query index of its rows (empty on the
 * distance tables' rows, which hold for every query). */
static const char *csv_header(const bias_options *o)
{
    return o->view ? "layer,stream,table,head,distance,value,query\n" : "layer,stream,table,head,distance,value\n";
}

static void write_csv(bk_output *f, const bias_options *o, const char *stream, const char *name, const float *table,
                      int32_t heads, int32_t distances)
{
    for (int32_t h = 0; h < heads; h++)
        for (int32_t d = 0; d < distances; d++)
            if (bk_output_printf(f, "%d,%s,%s,%d,%d,%.9g%s\n", (int)o->layer, stream, name, h, d,
                                 printed(table[(size_t)h * (size_t)distances + (size_t)d]), o->view ? "," : ""))
                return; /* the error is kept and reported when the file is closed */
}

/* `out` gets the readable tables (NULL: none), `csv` the values (NULL: none). */
static int run(const bk_term_set *set, const bias_options *o, FILE *out, bk_output *csv, bk_error *err)
{
    int32_t heads = set->geometry.n_heads, D = (int32_t)o->length;
    size_t n = (size_t)heads * (size_t)D;
    float *mixed = malloc(n * sizeof *mixed);
    float **tables = calloc(set->n ? (size_t)set->n : 1, sizeof *tables);
    /* weights[h * k_stream + k]: term k's weight for head h (the same for every head unless the stream's
     * weights are per head) */
    double *weights = calloc((size_t)(set->n ? set->n : 1) * (size_t)heads, sizeof *weights);
    if (!mixed || !tables || !weights) {
        free(mixed), free(tables), free(weights);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for %d heads x %d distances", heads, D);
    }
    int rc = BK_OK;
    char mixing[16];
    bk_choice_name(BK_MIXING_CHOICES, set->mixing, mixing, sizeof mixing);
    if (set->n == 0 && out)
        fprintf(out, "\nno [[term]] tables: every bias is 0 (NoPE)\n");
    for (int stream = 0; stream < BK_STREAM_COUNT && !rc; stream++) {
        char stream_name[16];
        bk_choice_name(BK_STREAM_CHOICES, stream, stream_name, sizeof stream_name);
        int k = 0, k_stream = 0, per_head = 0;
        char members[512] = "";
        size_t used = 0;
        int elsewhere = 0; /* the stream's table terms that act in other layers only ([[term]] layers) */
        for (int i = 0; i < set->n; i++)
            if ((int)set->terms[i].stream == stream && bk_term_has_table(&set->terms[i])) {
                if (!bk_term_on_layer(&set->terms[i], (int)o->layer)) {
                    elsewhere++;
                    continue;
                }
                k_stream++;
                per_head |= set->terms[i].head_weights != NULL;
            }
        if (!k_stream && elsewhere && out)
            fprintf(out, "\nlayer %ld, stream %s: no table (its %d table term%s act%s in other layers: [[term]] "
                    "layers)\n", o->layer, stream_name, elsewhere, elsewhere > 1 ? "s" : "", elsewhere > 1 ? "" : "s");
        for (int i = 0; i < set->n && !rc; i++) {
            const bk_term *t = &set->terms[i];
            if ((int)t->stream != stream || !bk_term_has_table(t) || !bk_term_on_layer(t, (int)o->layer))
                continue;
            if (!(tables[k] = malloc(n * sizeof **tables))) {
                rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the table of term '%s'", t->label);
                break;
            }
            rc = o->use_cuda ? bk_term_table_cuda(t, (int)o->layer, D, tables[k], err)
                             : bk_term_table(t, (int)o->layer, D, tables[k], err);
            for (int32_t h = 0; h < heads; h++)
                weights[(size_t)h * (size_t)k_stream + (size_t)k] = bk_term_weight_at(t, h);
            if (used < sizeof members && per_head)
                used += (size_t)snprintf(members + used, sizeof members - used, "%s(per-head weights, mean %g) x %s",
                                         k ? " + " : "", t->weight, t->label);
            else if (used < sizeof members)
                used += (size_t)snprintf(members + used, sizeof members - used, "%s%g x %s", k ? " + " : "",
                                         t->weight, t->label);
            if (!rc && o->terms) {
                char title[160];
                snprintf(title, sizeof title, "term %s (plugin %s), layer %ld, stream %s", t->label,
                         t->plugin->desc->name, o->layer, stream_name);
                print_table(out, title, tables[k], heads, D, o->all);
            }
            if (!rc && csv)
                write_csv(csv, o, stream_name, t->label, tables[k], heads, D);
            k++;
        }
        if (!rc && k > 0) {
            bk_mix_tables_grouped(set->mixing, (const float *const *)tables, weights, per_head ? heads : 1, k, n,
                                  mixed);
            char title[700];
            snprintf(title, sizeof title, "layer %ld, stream %s: %s mixing of %s", o->layer, stream_name, mixing,
                     members);
            print_table(out, title, mixed, heads, D, o->all);
            if (csv)
                write_csv(csv, o, stream_name, "mixed", mixed, heads, D);
        }
        for (int i = 0; i < k; i++) {
            free(tables[i]);
            tables[i] = NULL;
        }
    }
    free(mixed), free(tables), free(weights);
    return rc;
}

/* The columns of the attention view without --all: d up to 4, powers of two, the last. */
static int view_column(int32_t d, int32_t distances, int all)
{
    return all || d <= 4 || d == distances - 1 || (d & (d - 1)) == 0;
}

/* The attention view's entry (h, i, d): 0 when key j = i - d is masked, else 1 with *v what the score
 * gets (tab: the token stream's mixed table, NULL when none). */
static int view_at(const bk_attention_bias *ab, const float *tab, int32_t D, int32_t h, int32_t i, int32_t d, float *v)
{
    if (!bk_mask_keeps(i, i - d, ab->window, ab->sinks))
        return 0;
    *v = tab ? tab[(size_t)h * (size_t)D + (size_t)d] : 0.0f;
    if (ab->grid)
        *v += bk_coord_score(ab->grid + (size_t)h * (size_t)ab->points, ab->points, ab->phi[d], ab->rscale[i]);
    return 1;
}

/* What the scores of query i get at distance d = i - j (key j) on the token index, as the attention reads
 * it: the token stream's mixed table (capped at the mask's distance cap) plus the coordinate table's
 * F_h(u(i, d)), or "masked" (-inf in the CSV) where the mask hides key j. What depends on the text (the
 * segment stream, content and counted positions) or multiplies q . k (a logit scale) is named, not
 * shown. The model's bias is computed on the host, as the CPU attention reads it. */
static int attention_view(bk_term_set *set, int n_layers, const bias_options *o, FILE *out, bk_output *csv,
                          bk_error *err)
{
    bk_bias b;
    int rc = bk_bias_init(&b, set, n_layers, 0, err);
    if (rc)
        return rc;
    const int32_t D = (int32_t)o->length, H = set->geometry.n_heads;
    if ((rc = bk_bias_forward(&b, D, err))) {
        bk_bias_free(&b);
        return rc;
    }
    bk_attention_bias ab;
    memset(&ab, 0, sizeof ab);
    bk_bias_attention(&b, (int)o->layer, &ab);
    const float *tab = bk_bias_table(&b, (int)o->layer, BK_STREAM_TOKEN);
    char notes[512] = "";
    size_t used = 0;
    for (int i = 0; i < set->n && used < sizeof notes; i++) {
        const bk_term *t = &set->terms[i];
        const char *why = bk_term_has_table(t) && t->stream == BK_STREAM_SEGMENT ? "its segment positions come from the text"
                          : i == set->scale                                     ? "a logit scale multiplies q.k"
                          : i == set->content || i == set->count                ? "its positions come from the tokens"
                                                                                : NULL;
        if (why)
            used += (size_t)snprintf(notes + used, sizeof notes - used, "; not shown: term %s (%s)", t->label, why);
    }
    if (out)
        fprintf(out,
                "\nattention view, layer %ld: what the scores of query i get at distance d = i - j (masked: key j "
                "hidden)%s\n",
                o->layer, notes);
    for (int32_t h = 0; h < H && out; h++) {
        fprintf(out, "head %d\n%8s", (int)h, "i \\ d");
        for (int32_t d = 0; d < D; d++)
            if (view_column(d, D, o->all))
                fprintf(out, " %11d", (int)d);
        fprintf(out, "\n");
        for (int32_t i = 0; i < D; i++) {
            if (!shown(i, D, o->all))
                continue;
            if (!o->all && i > 16 && !shown(i - 1, D, o->all))
                fprintf(out, "%8s\n", "...");
            fprintf(out, "%8d", (int)i);
            for (int32_t d = 0; d < D; d++) {
                if (!view_column(d, D, o->all))
                    continue;
                float v;
                if (d > i)
                    fprintf(out, " %11s", "");
                else if (view_at(&ab, tab, D, h, i, d, &v))
                    fprintf(out, " %11.6g", printed(v));
                else
                    fprintf(out, " %11s", "masked");
            }
            fprintf(out, "\n");
        }
    }
    /* the CSV: every distance of the query rows shown (every row with --all) */
    for (int32_t h = 0; h < H && csv; h++)
        for (int32_t i = 0; i < D; i++) {
            if (!shown(i, D, o->all))
                continue;
            for (int32_t d = 0; d <= i; d++) {
                float v;
                char value[32] = "-inf";
                if (view_at(&ab, tab, D, h, i, d, &v))
                    snprintf(value, sizeof value, "%.9g", printed(v));
                if (bk_output_printf(csv, "%ld,token,attention,%d,%d,%s,%d\n", o->layer, (int)h, (int)d, value, (int)i))
                    h = H, i = D, d = D; /* the error is kept and reported when the file is closed */
            }
        }
    bk_bias_free(&b);
    return BK_OK;
}

int bk_cmd_bias(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0},   {"layer", 1, 0}, {"length", 1, 0}, {"all", 0, 0},
                                        {"terms", 0, 0},  {"csv", 1, 0},   {"device", 1, 0}, {"set", 1, 1},
                                        {"strict", 0, 0}, {"no-verify", 0, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit bias", &args, &err))
        return bk_report(&err);
    bk_cli_plugin_strictness(bk_args_get(&args, "strict") != NULL);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    if (args.n_positional != 1) {
        bk_fail(&err, BK_ERR_USAGE,
                "biaskit bias: expected one experiment file or checkpoint; see 'biaskit bias --help'");
        return bk_report(&err);
    }
    /* a checkpoint (by extension or content) brings its learned parameters; else an experiment file */
    const char *source = args.positional[0];
    int from_checkpoint = bk_checkpoint_is_file(source);
    /* A checkpoint's model is rebuilt but never run here: on the CPU, whatever device trained it (a
     * checkpoint of a GPU run then reads on a machine without one); --set can still say otherwise. */
    const char *sets[BK_ARGS_MAX];
    const bk_reopen_request reopen = bk_cli_reopen_request(&args, BK_REOPEN_INSPECT, sets, BK_ARGS_MAX);
    bk_session s = {0};
    bk_lm lm = {0};
    bk_train_state ckpt_state = {0};
    if (from_checkpoint) {
        if (bk_reopen(source, &reopen, &lm, NULL, &ckpt_state, &err))
            return bk_report(&err);
    } else if (bk_session_open(&s, source, reopen.sets, (size_t)reopen.n_sets, &err))
        return bk_report(&err);
    const bk_experiment *exp = from_checkpoint ? &lm.exp : &s.exp;
    bk_term_set *terms = from_checkpoint ? &lm.terms : &s.terms;

    bias_options o = {0};
    o.all = bk_args_get(&args, "all") != NULL;
    o.terms = bk_args_get(&args, "terms") != NULL;
    o.length = exp->train.length;
    o.csv = bk_args_get(&args, "csv");
    o.view = terms->coordinate >= 0 || terms->mask >= 0;
    const char *v;
    int rc = BK_OK;
    if ((v = bk_args_get(&args, "layer")))
        rc = bk_args_int("layer", v, 0, (long)exp->model.layers - 1, &o.layer, &err);
    if (!rc && (v = bk_args_get(&args, "length")))
        rc = bk_args_int("length", v, 1, 1L << 24, &o.length, &err);
    int64_t device = from_checkpoint ? BK_DEVICE_AUTO : exp->run.device;
    if (!rc && (v = bk_args_get(&args, "device"))) {
        device = bk_choice_index(BK_DEVICE_CHOICES, v);
        if (device < 0) {
            char list[64];
            bk_choices_text(BK_DEVICE_CHOICES, list, sizeof list);
            rc = bk_fail(&err, BK_ERR_USAGE, "--device: expected one of %s, got '%s'", list, v);
        }
    }
    char device_desc[256];
    int have_gpu = bk_device_probe(device_desc, sizeof device_desc);
    if (!rc && device == BK_DEVICE_CUDA && !have_gpu)
        rc = bk_fail(&err, BK_ERR_DEVICE, "device cuda was asked for, but no GPU answers: %s", device_desc);
    /* emulated: the plugins' CUDA code is not run there (model/backend.h); their host tables are */
    o.use_cuda = !rc && (device == BK_DEVICE_AUTO || device == BK_DEVICE_CUDA) && have_gpu;

    bk_eval_inputs inputs = {0};
    bk_output csv = {0};
    if (!rc && o.csv &&
        !(rc = from_checkpoint ? bk_eval_inputs_checkpoint(&inputs, source, &lm, NULL, 0, &err)
                               : bk_eval_inputs_collect(&inputs, "experiment file", source, terms, exp, s.dir, NULL,
                                                        NULL, 0, &err)) &&
        !(rc = bk_output_open(&csv, "--csv", o.csv, inputs.items, inputs.n, &err)))
        bk_output_printf(&csv, "%s", csv_header(&o));
    const int csv_on_stdout = csv.kind == BK_OUTPUT_STDOUT; /* then nothing else goes there */
    if (!rc) {
        if (!csv_on_stdout) {
            char mixing[16];
            if (from_checkpoint)
                printf("checkpoint: %s (step %lld: learned parameters)\n", source, (long long)ckpt_state.step);
            printf("experiment: %s\ndevice: %s\nmodel: %lld layers, %lld heads, d_head %lld; %d term%s, %s mixing; "
                   "distances 0..%ld\n",
                   exp->path, o.use_cuda ? device_desc : "cpu", (long long)exp->model.layers,
                   (long long)exp->model.heads, (long long)bk_experiment_head_dim(exp), terms->n,
                   terms->n == 1 ? "" : "s", bk_choice_name(BK_MIXING_CHOICES, terms->mixing, mixing, sizeof mixing),
                   o.length - 1);
        }
        rc = run(terms, &o, csv_on_stdout ? NULL : stdout, o.csv ? &csv : NULL, &err);
        if (!rc && o.view)
            rc = attention_view(terms, (int)exp->model.layers, &o, csv_on_stdout ? NULL : stdout, o.csv ? &csv : NULL,
                                &err);
    }
    if (!rc)
        rc = bk_output_close(&csv, &err);
    else
        bk_output_discard(&csv);
    if (!rc && o.csv && !csv_on_stdout)
        printf("\nwrote %s\n", o.csv);
    if (!rc)
        rc = bk_output_stdout_check(&err);
    bk_eval_inputs_free(&inputs);
    if (from_checkpoint)
        bk_lm_close(&lm);
    else
        bk_session_close(&s);
    return rc ? bk_report(&err) : 0;
}
