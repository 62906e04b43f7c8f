/* biaskit params: every plugin parameter and learnable mixing weight of a checkpoint, element by element,
 * under the names the checkpoint stores them (train/checkpoint.h), beside its initial value: what the
 * plugins' param_init gave with the checkpoint's seed (the model rebuilt from the stored experiment, as
 * training began) and how far training moved it. */
#include "bias/mix.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "eval/eval.h"
#include "plugin/param_info.h"
#include "train/checkpoint.h"
#include "util/output.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: biaskit params <checkpoint.safetensors> [--csv FILE] [--json FILE] [--strict] [--no-verify]\n\n"
    "Prints every plugin parameter and every learnable mixing weight of a checkpoint (a .safetensors\n"
    "file written by 'biaskit train'), one element a line: its term, its tensor under the name the\n"
    "checkpoint stores it, the layer (per-layer parameters), the element (row and column; a tensor with\n"
    "one row per head shows the row as hN), its value, its initial value and the change.\n\n"
    "Names, as stored in the checkpoint:\n"
    "  term.<label>.<tensor>  a tensor the term's plugin names through param_tensors() (term.kerple.r1)\n"
    "  term.<label>.theta     the whole parameter vector of a plugin that names no tensors\n"
    "  mix.<stream>           the learnable mixing weights of a stream ([attention] learn_weights or a\n"
    "                         term's learn_weight): one per learned term, or one per head and term\n"
    "The transformer's own tensors (model.<tensor>) are not listed.\n\n"
    "The initial value is the one the plugin's param_init gave with the checkpoint's [train] seed (the\n"
    "model rebuilt from the experiment stored in the checkpoint, before any step); for a mixing weight,\n"
    "the parameter its configured weight gives. Values are printed with 9 significant digits (%.9g):\n"
    "they read back as the stored float32 exactly. Under the table, each tensor of a plugin that declares\n"
    "param_info() with its bounds and its initialisation rule in words.\n\n"
    "  --csv FILE    write every element as CSV: name,term,tensor,layer,row,col,value,initial (layer,\n"
    "                row and col empty where they do not apply: a parameter shared by every layer, a\n"
    "                mixing weight shared by every head)\n"
    "  --json FILE   write them as JSON: {\"checkpoint\", \"step\", \"params\": [{name, term, tensor, layer,\n"
    "                row, col, value, initial}, ...]} (null where the CSV is empty, or for a value that\n"
    "                is not finite)\n"
    "                FILE '-' is standard output (then no table is printed); a file is written\n"
    "                atomically (a temporary file renamed over it once complete) and refused when it\n"
    "                names an input (the checkpoint, a plugin)\n"
    "  --strict      refuse the checkpoint when its plugins differ from the ones it was trained with,\n"
    "                or a plugin file or directory writable by other users (by default a warning)\n"
    "  --no-verify   skip the checksums of the tensors' data (the metadata's is verified)\n";

/* One element. layer, row and col are -1 where they do not apply. */
typedef struct param_entry {
    char name[192];
    const char *term, *tensor;
    int layer, row, col;
    int head;   /* the row is a head */
    int matrix; /* the tensor has columns: the index is row,col */
    float value, initial;
} param_entry;

typedef struct entry_list {
    param_entry *items;
    size_t n, cap;
} entry_list;

static param_entry *entry_add(entry_list *l, bk_error *err)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        param_entry *bigger = realloc(l->items, cap * sizeof *bigger);
        if (!bigger) {
            bk_fail(err, BK_ERR_NOMEM, "out of memory listing the parameters");
            return NULL;
        }
        l->items = bigger;
        l->cap = cap;
    }
    param_entry *e = &l->items[l->n++];
    memset(e, 0, sizeof *e);
    return e;
}

/* The elements of one term, in the order the checkpoint stores them: each named tensor (copies, rows,
 * cols), or the whole theta (copies, n_params) as train/checkpoint.c's build_slots lays it out. */
static int list_term(const bk_term *t, const bk_term *t0, biaskit_tensor_info *info, entry_list *l, bk_error *err)
{
    int32_t named = bk_term_tensors(t, info);
    if (named <= 0) {
        named = 1;
        info[0].name = "theta";
        info[0].offset = 0;
        info[0].rows = (int32_t)t->n_params;
        info[0].cols = 1;
    }
    for (int32_t k = 0; k < named; k++) {
        int head = info[k].rows == t->n_heads && info[k].rows > 1 && strcmp(info[k].name, "theta") != 0;
        for (int c = 0; c < t->n_copies; c++)
            for (int32_t r = 0; r < info[k].rows; r++)
                for (int32_t q = 0; q < info[k].cols; q++) {
                    param_entry *e = entry_add(l, err);
                    if (!e)
                        return BK_ERR_NOMEM;
                    snprintf(e->name, sizeof e->name, "term.%s.%s", t->label, info[k].name);
                    e->term = t->label;
                    e->tensor = info[k].name;
                    e->layer = t->per_layer ? c : -1;
                    e->row = r;
                    e->col = q;
                    e->head = head;
                    e->matrix = info[k].cols > 1;
                    size_t at = (size_t)c * (size_t)t->n_params + (size_t)info[k].offset +
                                (size_t)r * (size_t)info[k].cols + (size_t)q;
                    e->value = t->theta[at];
                    e->initial = t0->theta[at];
                }
    }
    return BK_OK;
}

/* The mixing parameters of every stream with a learned weight, packed as bias/mix.h says: term after term,
 * none for a fixed weight, one for a shared learned one, `groups` (one per head) for a per-head one. */
static int list_mix(const bk_lm *lm, const bk_lm *lm0, entry_list *l, bk_error *err)
{
    const bk_bias *b = &lm->bias, *b0 = &lm0->bias;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (!b->n_mix[s])
            continue;
        char stream[16];
        bk_choice_name(BK_STREAM_CHOICES, s, stream, sizeof stream);
        int at = 0;
        for (int k = 0; k < b->n_on[s]; k++) {
            int n = b->kind[s][k] == BK_MIX_LEARNED ? 1 : b->kind[s][k] == BK_MIX_LEARNED_PER_HEAD ? b->groups[s] : 0;
            for (int g = 0; g < n; g++, at++) {
                if (at >= b->n_mix[s])
                    return bk_fail(err, BK_ERR_INTERNAL, "mix.%s: more learned weights than its %d parameters",
                                   stream, b->n_mix[s]);
                param_entry *e = entry_add(l, err);
                if (!e)
                    return BK_ERR_NOMEM;
                snprintf(e->name, sizeof e->name, "mix.%s", stream);
                e->term = lm->terms.terms[b->on[s][k]].label;
                e->tensor = "weight";
                e->layer = -1;
                e->row = b->kind[s][k] == BK_MIX_LEARNED_PER_HEAD ? g : -1;
                e->col = -1;
                e->head = e->row >= 0;
                e->value = b->mix_params[s][at];
                e->initial = b0->mix_params[s][at];
            }
        }
    }
    return BK_OK;
}

static void field(char *out, size_t size, int v)
{
    if (v < 0)
        out[0] = '\0';
    else
        snprintf(out, size, "%d", v);
}

static void print_table(const char *path, int64_t step, const entry_list *l)
{
    printf("checkpoint: %s (step %lld)\n", path, (long long)step);
    if (l->n == 0) {
        printf("no plugin parameters and no learnable mixing weights\n");
        return;
    }
    printf("%zu parameter%s; initial: the plugins' param_init with the checkpoint's seed\n\n", l->n,
           l->n == 1 ? "" : "s");
    printf("%-28s %-12s %-10s %5s %9s %16s %16s %16s\n", "name", "term", "tensor", "layer", "index", "value",
           "initial", "change");
    for (size_t i = 0; i < l->n; i++) {
        const param_entry *e = &l->items[i];
        char layer[16], index[32] = "";
        field(layer, sizeof layer, e->layer);
        if (e->row >= 0 && e->matrix)
            snprintf(index, sizeof index, "%s%d,%d", e->head ? "h" : "", e->row, e->col);
        else if (e->row >= 0)
            snprintf(index, sizeof index, "%s%d", e->head ? "h" : "", e->row);
        printf("%-28s %-12s %-10s %5s %9s %16.9g %16.9g %+16.9g\n", e->name, e->term, e->tensor,
               layer[0] ? layer : "-", index[0] ? index : "-", (double)e->value, (double)e->initial,
               (double)e->value - (double)e->initial);
    }
}

/* Under the table, each named tensor of a plugin that declares param_info(): the bounds param_project()
 * keeps it in and its initialisation in words. Nothing for plugins without the hook. */
static void print_bounds(const bk_term_set *terms)
{
    biaskit_tensor_info info[BK_TERM_MAX_TENSORS];
    int header = 0;
    for (int i = 0; i < terms->n; i++) {
        const bk_term *t = &terms->terms[i];
        int32_t n = BK_DESCRIPTOR_FN(t->plugin->desc, param_info) ? bk_term_tensors(t, info) : 0;
        for (int32_t k = 0; k < n; k++) {
            biaskit_param_info pi;
            biaskit_error pe;
            char name[192], bounds[64];
            if (!header++)
                printf("\nbounds and initialisation, as the plugins declare them (param_info):\n");
            snprintf(name, sizeof name, "term.%s.%s", t->label, info[k].name);
            if (bk_param_info_read(t->plugin->desc, t->instance, k, &pi, &pe, NULL) == BK_PARAM_INFO_FAILED) {
                printf("  %-28s (param_info() failed: %s)\n", name, pe.message[0] ? pe.message : "no message given");
                continue;
            }
            bk_param_info_bounds(&pi, bounds, sizeof bounds);
            printf("  %-28s bounds %-22s init %s\n", name, bounds, pi.init[0] ? pi.init : "not declared");
        }
    }
}

static void write_csv(bk_output *o, const entry_list *l)
{
    bk_output_printf(o, "name,term,tensor,layer,row,col,value,initial\n");
    for (size_t i = 0; i < l->n; i++) {
        const param_entry *e = &l->items[i];
        char layer[16], row[16], col[16];
        field(layer, sizeof layer, e->layer);
        field(row, sizeof row, e->row);
        field(col, sizeof col, e->col);
        const char *text[3] = {e->name, e->term, e->tensor};
        for (int k = 0; k < 3; k++) {
            bk_csv_field(o->f, text[k]);
            fputc(',', o->f);
        }
        if (bk_output_printf(o, "%s,%s,%s,%.9g,%.9g\n", layer, row, col, (double)e->value, (double)e->initial))
            return; /* the error is kept and reported when the file is closed */
    }
}

static void json_int(bk_output *o, int v)
{
    if (v < 0)
        bk_output_printf(o, "null");
    else
        bk_output_printf(o, "%d", v);
}

static void json_float(bk_output *o, float v)
{
    if (isfinite(v))
        bk_output_printf(o, "%.9g", (double)v);
    else
        bk_output_printf(o, "null");
}

static void write_json(bk_output *o, const char *path, int64_t step, const entry_list *l)
{
    bk_output_printf(o, "{\"checkpoint\": ");
    bk_output_json_string(o, path);
    bk_output_printf(o, ", \"step\": %lld, \"params\": [", (long long)step);
    for (size_t i = 0; i < l->n; i++) {
        const param_entry *e = &l->items[i];
        bk_output_printf(o, "%s\n  {\"name\": ", i ? "," : "");
        bk_output_json_string(o, e->name);
        bk_output_printf(o, ", \"term\": ");
        bk_output_json_string(o, e->term);
        bk_output_printf(o, ", \"tensor\": ");
        bk_output_json_string(o, e->tensor);
        bk_output_printf(o, ", \"layer\": ");
        json_int(o, e->layer);
        bk_output_printf(o, ", \"row\": ");
        json_int(o, e->row);
        bk_output_printf(o, ", \"col\": ");
        json_int(o, e->col);
        bk_output_printf(o, ", \"value\": ");
        json_float(o, e->value);
        bk_output_printf(o, ", \"initial\": ");
        json_float(o, e->initial);
        bk_output_printf(o, "}");
    }
    bk_output_printf(o, "\n]}\n");
}

int bk_cmd_params(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0}, {"csv", 1, 0}, {"json", 1, 0}, {"strict", 0, 0},
                                        {"no-verify", 0, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit params", &args, &err))
        return bk_report(&err);
    bk_cli_plugin_strictness(bk_args_get(&args, "strict") != NULL);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    if (args.n_positional != 1) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit params: expected one checkpoint; see 'biaskit params --help'");
        return bk_report(&err);
    }
    const char *path = args.positional[0];
    static const char *const flags[2] = {"--csv", "--json"};
    const char *outputs[2] = {bk_args_get(&args, "csv"), bk_args_get(&args, "json")};
    const bk_output_input ckpt_input = {"checkpoint", path, NULL, 0};
    int rc = bk_output_check_distinct(flags, outputs, 2, &err);
    for (int k = 0; k < 2 && !rc; k++)
        if (outputs[k])
            rc = bk_output_check(flags[k], outputs[k], &ckpt_input, 1, &err);
    if (rc)
        return bk_report(&err);
    if (!bk_checkpoint_is_file(path)) {
        FILE *f = fopen(path, "rb");
        if (!f)
            bk_fail(&err, BK_ERR_IO, "checkpoint '%s': cannot open it: no such file, or not readable", path);
        else {
            fclose(f);
            bk_fail(&err, BK_ERR_PARSE,
                    "'%s' is not a checkpoint: expected a .safetensors file written by 'biaskit train'", path);
        }
        return bk_report(&err);
    }
    /* Only the terms are read: the model is rebuilt on the CPU, whatever device trained it. */
    const char *sets[BK_ARGS_MAX];
    const bk_reopen_request reopen = bk_cli_reopen_request(&args, BK_REOPEN_INSPECT, sets, BK_ARGS_MAX);
    bk_lm lm, lm0;
    bk_train_state st;
    if (bk_reopen(path, &reopen, &lm, NULL, &st, &err))
        return bk_report(&err);
    /* The initial values: the same stored experiment and overrides built again, as training began (terms
     * created and initialised with its seed, mixing weights from the configured weights), nothing loaded. */
    char name[4096];
    snprintf(name, sizeof name, "%s (experiment saved in %s)", lm.config_source, path);
    if ((rc = bk_lm_open_text(&lm0, lm.config_text, name, lm.config_dir, (const char *const *)lm.overrides,
                              lm.n_overrides, &err))) {
        bk_lm_close(&lm);
        return bk_report(&err);
    }
    entry_list list = {0};
    biaskit_tensor_info *info = calloc(BK_TERM_MAX_TENSORS, sizeof *info);
    if (!info)
        rc = bk_fail(&err, BK_ERR_NOMEM, "out of memory listing the parameters of '%s'", path);
    if (!rc && lm0.terms.n != lm.terms.n)
        rc = bk_fail(&err, BK_ERR_INTERNAL, "%s: the rebuilt experiment has %d terms, the checkpoint's %d", path,
                     lm0.terms.n, lm.terms.n);
    for (int i = 0; i < lm.terms.n && !rc; i++) {
        const bk_term *t = &lm.terms.terms[i], *t0 = &lm0.terms.terms[i];
        if (t->n_params <= 0)
            continue;
        if (t0->n_params != t->n_params || t0->n_copies != t->n_copies)
            rc = bk_fail(&err, BK_ERR_INTERNAL, "%s: term '%s' rebuilt with another parameter count", path, t->label);
        else
            rc = list_term(t, t0, info, &list, &err);
    }
    if (!rc)
        rc = list_mix(&lm, &lm0, &list, &err);
    free(info);

    bk_eval_inputs inputs = {0};
    if (!rc)
        rc = bk_eval_inputs_checkpoint(&inputs, path, &lm, NULL, 0, &err);
    int on_stdout = 0;
    for (int k = 0; k < 2; k++)
        on_stdout |= outputs[k] && strcmp(outputs[k], "-") == 0;
    if (!rc && !on_stdout) {
        print_table(path, st.step, &list);
        print_bounds(&lm.terms);
    }
    for (int k = 0; k < 2 && !rc; k++) {
        bk_output out;
        if (outputs[k] && !(rc = bk_output_open(&out, flags[k], outputs[k], inputs.items, inputs.n, &err))) {
            if (k == 0)
                write_csv(&out, &list);
            else
                write_json(&out, path, st.step, &list);
            rc = bk_output_close(&out, &err);
            if (!rc && !on_stdout)
                printf("\nwrote %s\n", outputs[k]);
        }
    }
    if (!rc)
        rc = bk_output_stdout_check(&err);
    bk_eval_inputs_free(&inputs);
    free(list.items);
    bk_lm_close(&lm0);
    bk_lm_close(&lm);
    return rc ? bk_report(&err) : 0;
}
