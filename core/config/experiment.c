#define _POSIX_C_SOURCE 200809L /* strdup */
#include "config/experiment.h"
#include "model/backend.h" /* the enums of [run] matmul, attention, precision */
#include "util/name.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------------
 * The schema: every engine key, written once.
 * ---------------------------------------------------------------------------------------------- */

/* KEY_BOOL_OR_CHOICE: a boolean or one of the choices, stored as an int: false 0, true 1, choice c
 * (0-based) c + 1 (so the first choice means the same as true). */
typedef enum key_type {
    KEY_INT,
    KEY_FLOAT,
    KEY_BOOL,
    KEY_CHOICE,
    KEY_STRING,
    KEY_STRINGS,
    KEY_BOOL_OR_CHOICE
} key_type;

typedef struct key_spec {
    const char *section;
    const char *key;
    key_type type;
    double def;          /* default (KEY_CHOICE: index into choices; KEY_STRING: see choices) */
    double min, max;     /* inclusive range for KEY_INT / KEY_FLOAT */
    const char *choices; /* KEY_CHOICE: "a|b|c", stored as the index; KEY_STRING: the default text */
    const char *doc;
    size_t offset;       /* where the value lives in bk_experiment */
} key_spec;

#define FIELD(f) offsetof(bk_experiment, f)
static const key_spec schema[] = {
    {"model", "layers", KEY_INT, 4, 1, 1024, NULL, "number of transformer blocks", FIELD(model.layers)},
    {"model", "heads", KEY_INT, 8, 1, 1024, NULL, "attention heads per block", FIELD(model.heads)},
    {"model", "dim", KEY_INT, 256, 1, 65536, NULL, "model width (a multiple of heads)", FIELD(model.dim)},
    {"model", "vocab", KEY_INT, 256, 2, 1 << 20, NULL, "vocabulary size (256 for byte-level text)", FIELD(model.vocab)},
    {"model", "family", KEY_CHOICE, BK_FAMILY_GPT2, 0, 0, BK_MODEL_FAMILY_CHOICES,
     "the block: gpt2 = LayerNorm, GELU MLP of 4 dim, biases, tied output; llama = RMSNorm, SwiGLU MLP of "
     "ffn_dim, no biases, grouped-query attention (kv_heads), head_dim, tied or untied output",
     FIELD(model.family)},
    {"model", "kv_heads", KEY_INT, 0, 0, 1024, NULL,
     "llama: key/value heads, dividing heads (grouped-query attention; 0 = heads)", FIELD(model.kv_heads)},
    {"model", "head_dim", KEY_INT, 0, 0, 4096, NULL, "llama: width of a head (0 = dim / heads)", FIELD(model.head_dim)},
    {"model", "ffn_dim", KEY_INT, 0, 0, 1 << 20, NULL, "llama: the SwiGLU MLP's hidden width (required)",
     FIELD(model.ffn_dim)},
    {"model", "norm_eps", KEY_FLOAT, 1e-5, 1e-12, 1, NULL, "llama: RMSNorm's epsilon", FIELD(model.norm_eps)},
    {"model", "tied", KEY_BOOL, 1, 0, 1, NULL, "llama: the output head is the token embedding (false: its own matrix)",
     FIELD(model.tied)},
    {"model", "qk_norm", KEY_BOOL, 0, 0, 1, NULL,
     "llama: QK-norm, an RMSNorm (norm_eps) of each query head and of each key head before the rotation, with "
     "a learned weight of head_dim per layer for the queries and another for the keys (Qwen3's q_norm, k_norm)",
     FIELD(model.qk_norm)},
    {"attention", "mixing", KEY_CHOICE, BK_MIX_SUM, 0, 0, BK_MIXING_CHOICES,
     "how terms on one stream combine: sum = sum_t w_t T_t; kernel = log sum_t w_t exp(T_t)", FIELD(attention.mixing)},
    {"attention", "learn_weights", KEY_BOOL_OR_CHOICE, 0, 0, 2, BK_LEARN_WEIGHTS_CHOICES,
     "train the table terms' mixing weights (kernel: softmax-parametrised): true = \"per_term\" (one weight per "
     "term), \"per_head\" (one per term and head); a term's learn_weight / weight_per_head overrides it",
     FIELD(attention.learn_weights)},
    {"train", "length", KEY_INT, 256, 1, 1 << 24, NULL, "training context length in tokens", FIELD(train.length)},
    {"train", "seed", KEY_INT, 1234, 0, 9007199254740991.0, NULL, "seed of parameter init and data order", FIELD(train.seed)},
    {"train", "batch", KEY_INT, 8, 1, 1 << 16, NULL, "sequences per micro-batch", FIELD(train.batch)},
    {"train", "accumulate", KEY_INT, 1, 1, 1 << 16, NULL, "micro-batches per optimizer step (gradient accumulation)",
     FIELD(train.accumulate)},
    {"train", "steps", KEY_INT, 1000, 1, 1e12, NULL, "optimizer steps", FIELD(train.steps)},
    {"train", "lr", KEY_FLOAT, 1e-3, 0, 10, NULL, "peak learning rate (after warm-up)", FIELD(train.lr)},
    {"train", "final_lr", KEY_FLOAT, 0.1, 0, 1, NULL, "learning rate at the last step, as a fraction of lr (cosine decay)",
     FIELD(train.final_lr)},
    {"train", "warmup", KEY_INT, 100, 0, 1e12, NULL, "linear warm-up steps", FIELD(train.warmup)},
    {"train", "weight_decay", KEY_FLOAT, 0.1, 0, BK_WEIGHT_DECAY_MAX, NULL, "AdamW decoupled weight decay (matrices and embeddings)",
     FIELD(train.weight_decay)},
    {"train", "beta1", KEY_FLOAT, 0.9, 0, 0.999999, NULL, "AdamW first-moment decay", FIELD(train.beta1)},
    {"train", "beta2", KEY_FLOAT, 0.95, 0, 0.999999, NULL, "AdamW second-moment decay", FIELD(train.beta2)},
    {"train", "eps", KEY_FLOAT, 1e-8, 0, 1, NULL, "AdamW epsilon", FIELD(train.eps)},
    {"train", "grad_clip", KEY_FLOAT, 1.0, 0, 1e9, NULL, "clip the global gradient L2 norm to this (0 = off)",
     FIELD(train.grad_clip)},
    {"train", "decay_all", KEY_BOOL, 0, 0, 1, NULL,
     "also decay norms, biases, plugin parameters and mixing weights", FIELD(train.decay_all)},
    {"train", "eval_every", KEY_INT, 100, 0, 1e12, NULL, "steps between validations (0 = at the end only)",
     FIELD(train.eval_every)},
    {"train", "eval_batches", KEY_INT, 16, 1, 1e9, NULL, "validation micro-batches per validation",
     FIELD(train.eval_batches)},
    {"train", "checkpoint_every", KEY_INT, 0, 0, 1e12, NULL, "steps between checkpoints (0 = at the end only)",
     FIELD(train.checkpoint_every)},
    {"train", "log_every", KEY_INT, 10, 1, 1e12, NULL, "steps between log lines", FIELD(train.log_every)},
    {"train", "nonfinite", KEY_CHOICE, BK_NONFINITE_STOP, 0, 0, BK_NONFINITE_CHOICES,
     "a step whose loss or gradient norm is NaN/inf: stop (the last checkpoint stays), or skip its update "
     "(logged; stops after " BK_NONFINITE_MAX_SKIPS_TEXT " skips in a row)", FIELD(train.nonfinite)},
    {"train", "init", KEY_STRING, 0, 0, 0, "",
     "a checkpoint whose weights start this training, relative to the experiment file (\"\" = a fresh "
     "initialisation from seed); train --init overrides it. Every model tensor must be there with its shape; a "
     "term's tensors carry over when the term of the same name uses the same plugin, else they start fresh",
     FIELD(train.init)},
    {"train", "trainable", KEY_STRINGS, 0, 0, 0, NULL,
     "shell globs (fnmatch) over the checkpoint's tensor names that train, e.g. [\"term.*\", \"model.rms*\"]; "
     "every other tensor stays frozen (none given: every tensor trains); each pattern must match a tensor",
     FIELD(train.trainable)},
    {"data", "format", KEY_CHOICE, 0, 0, 0, BK_DATA_FORMAT_CHOICES,
     "text = bytes of text files (vocab 256); shards = llm.c uint16 .bin token shards", FIELD(data.format)},
    {"data", "paths", KEY_STRINGS, 0, 0, 0, NULL, "training files or directories (relative to the experiment file)",
     FIELD(data.paths)},
    {"data", "val_paths", KEY_STRINGS, 0, 0, 0, NULL, "validation files or directories (none: split by val_fraction)",
     FIELD(data.val_paths)},
    {"data", "val_fraction", KEY_FLOAT, 0.05, 1e-6, 0.9, NULL,
     "validation's share of the corpus when no val_paths are given (of its bytes, or tokens for shards)",
     FIELD(data.val_fraction)},
    {"data", "split", KEY_CHOICE, 0, 0, 0, BK_DATA_SPLIT_CHOICES,
     "without val_paths: documents = whole files, shuffled by split_seed, until validation holds val_fraction "
     "(a single file: its tail); tail = the last val_fraction of the stream of files in sorted order",
     FIELD(data.split)},
    {"data", "split_seed", KEY_INT, 0, 0, 9007199254740991.0, NULL,
     "the shuffle of the documents (not the run's seed: every seed of a sweep validates on the same documents)",
     FIELD(data.split_seed)},
    {"data", "extensions", KEY_STRINGS, 0, 0, 0, NULL, "text: only files ending with one of these, e.g. [\".h\"]",
     FIELD(data.extensions)},
    {"data", "max_bytes", KEY_INT, 0, 0, 9007199254740991.0, NULL, "text: read at most this many bytes (0 = all)",
     FIELD(data.max_bytes)},
    {"run", "device", KEY_CHOICE, BK_DEVICE_AUTO, 0, 0, BK_DEVICE_CHOICES,
     "what trains and evaluates: auto = cuda when a GPU answers, else cpu; cpu = OpenBLAS + OpenMP; cuda = the "
     "GPU (an error when none answers); emulated = the CUDA engine's code run on the CPU, very slow, for "
     "testing without a GPU",
     FIELD(run.device)},
    {"run", "matmul", KEY_CHOICE, 0, 0, 0, BK_MATMUL_CHOICES,
     "matmul precision on a GPU: fp32 = IEEE fp32 products (the parity mode); tf32 = TF32 tensor cores, fp32 "
     "accumulation, for cuBLAS's products (inputs rounded to 10 mantissa bits; emulated, gradients within ~1e-3 "
     "of the CPU's, relative to each tensor's largest; speed not yet measured on a GPU); bf16 = bf16 tensor cores, fp32 accumulation, for cuBLAS's "
     "products and the fused attention's (~1e-2 relative error; storage: [run] precision); the CPU always computes "
     "fp32. The default is provisional: it is to be re-chosen by measurement on a GPU",
     FIELD(run.matmul)},
    {"run", "attention", KEY_CHOICE, BK_ATTENTION_AUTO, 0, 0, BK_ATTENTION_CHOICES,
     "fused = flash-style kernels that keep only row statistics (B x heads x T floats per layer) and never a "
     "T x T matrix (on the CPU and on a GPU; not with counted positions); materialized = the probabilities "
     "saved for backward (B x heads x T x T floats per layer; the receptive-field analysis reads them); auto = "
     "fused on a GPU, and on the CPU materialized for training and for evaluations of up to 1024 tokens, fused "
     "for longer evaluations",
     FIELD(run.attention)},
    {"run", "precision", KEY_CHOICE, 0, 0, 0, BK_PRECISION_CHOICES,
     "storage on a GPU: fp32 = every activation fp32 (the parity mode); bf16 = the inputs of the matmuls and of "
     "the attention (LayerNorm and GELU outputs, or llama's RMSNorm and SwiGLU outputs; q, k, v; the attention "
     "output) and copies of the weights in "
     "bf16, fp32 master weights, gradients and AdamW state; needs matmul = bf16 (its default then) and the "
     "fused attention; the CPU always computes fp32",
     FIELD(run.precision)},
    {"run", "out_dir", KEY_STRING, 0, 0, 0, "",
     "checkpoints and logs, relative to the experiment file (\"\" = runs/<experiment name> in the working directory)",
     FIELD(run.out_dir)},
    {"run", "recompute", KEY_BOOL, 0, 0, 1, NULL,
     "training keeps each layer's input and attention output (and one layer's other activations) and "
     "recomputes the rest of a layer's forward (not its attention) before its backward: far less activation "
     "memory (the banner's memory line says how much), the layers' products once more per step; the gradients "
     "are the same bits",
     FIELD(run.recompute)},
    {"run", "threads", KEY_INT, 0, 0, 4096, NULL, "CPU threads (0 = every core)", FIELD(run.threads)},
    {"run", "gpu", KEY_INT, -1, -1, 1023, NULL,
     "which GPU a cuda backend uses, counted among the visible ones (CUDA_VISIBLE_DEVICES renumbers them); -1 = "
     "from the process's local rank (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, else MPICH's MPI_LOCALRANKID, else "
     "Slurm's SLURM_LOCALID) modulo the visible GPUs, GPU 0 for one process; the banner says which and why",
     FIELD(run.gpu)},
};
#undef FIELD
#define N_SCHEMA (sizeof schema / sizeof schema[0])

/* [[term]] keys owned by the engine (BK_TERM_KEYS_TEXT lists the same names for messages). */
static const char *const term_keys[] = {"plugin",          "name",     "stream",      "weight",      "per_layer",
                                        "learn_weight",    "weight_per_head", "lr_scale", "weight_decay", "layers"};
#define N_TERM_KEYS (sizeof term_keys / sizeof term_keys[0])

int bk_term_key_is_reserved(const char *key)
{
    for (size_t i = 0; i < N_TERM_KEYS; i++)
        if (strcmp(term_keys[i], key) == 0)
            return 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * Messages
 * ---------------------------------------------------------------------------------------------- */

int bk_fail_at(bk_error *err, int code, bk_toml_pos pos, const char *fmt, ...)
{
    char body[BK_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    if (pos.source && pos.line)
        return bk_fail(err, code, "%s:%u:%u: %s", pos.source, pos.line, pos.column, body);
    if (pos.source)
        return bk_fail(err, code, "%s: %s", pos.source, body);
    return bk_fail(err, code, "%s", body);
}

static size_t edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63)
        return (size_t)-1;
    size_t row[64];
    for (size_t j = 0; j <= m; j++)
        row[j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[m];
}

const char *bk_closest_word(const char *word, const char *const *candidates, size_t n)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(word, candidates[i]);
        if (d < best_d) {
            best_d = d;
            best = candidates[i];
        }
    }
    /* a typo: at most 2 edits, and fewer than half the word */
    return best && best_d <= 2 && 2 * best_d < strlen(word) + 1 ? best : NULL;
}

/* "a, b, c" of the keys of `section`, or of the section names when section is NULL. */
static void list_keys(const char *section, char *buf, size_t size, const char **names, size_t *n_names)
{
    size_t used = 0, n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_SCHEMA; i++) {
        const char *name = section ? schema[i].key : schema[i].section;
        if (section && strcmp(schema[i].section, section) != 0)
            continue;
        int seen = 0;
        for (size_t k = 0; k < n; k++)
            seen |= strcmp(names[k], name) == 0;
        if (seen)
            continue;
        names[n++] = name;
        if (used < size)
            used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", name);
    }
    *n_names = n;
}

static int unknown_name(bk_error *err, bk_toml_pos pos, const char *what, const char *word,
                        const char *section)
{
    const char *names[N_SCHEMA + 1];
    size_t n;
    char list[512];
    list_keys(section, list, sizeof list, names, &n);
    if (!section && n < N_SCHEMA + 1)
        names[n++] = "term";
    const char *hint = bk_closest_word(word, names, n);
    char hint_text[96] = "";
    if (hint)
        snprintf(hint_text, sizeof hint_text, " (did you mean '%s'?)", hint);
    if (section)
        return bk_fail_at(err, BK_ERR_CONFIG, pos, "unknown %s '%s' in [%s]%s; expected one of: %s", what,
                          word, section, hint_text, list);
    return bk_fail_at(err, BK_ERR_CONFIG, pos, "unknown %s '%s'%s; expected one of: %s, term", what, word,
                      hint_text, list);
}

static int wrong_type(bk_error *err, const bk_toml_node *node, const char *where, const char *expected)
{
    return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(node), "%s: expected %s, got %s", where, expected,
                      bk_toml_type_name(bk_toml_type_of(node)));
}

int bk_choice_index(const char *choices, const char *value)
{
    size_t len = strlen(value);
    int index = 0;
    for (const char *p = choices; *p; index++) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && strncmp(p, value, n) == 0)
            return index;
        if (!bar)
            break;
        p = bar + 1;
    }
    return -1;
}

const char *bk_choice_name(const char *choices, int64_t index, char *buf, size_t size)
{
    const char *p = choices;
    for (int64_t i = 0; i < index && p; i++)
        p = strchr(p, '|') ? strchr(p, '|') + 1 : NULL;
    if (!p || index < 0)
        snprintf(buf, size, "?");
    else
        snprintf(buf, size, "%.*s", (int)strcspn(p, "|"), p);
    return buf;
}

void bk_choices_text(const char *choices, char *buf, size_t size)
{
    size_t used = 0;
    for (const char *p = choices; *p && used < size; p++)
        used += (size_t)snprintf(buf + used, size - used, *p == '|' ? ", " : "%c", *p);
}

/* ------------------------------------------------------------------------------------------------
 * Reading values
 * ---------------------------------------------------------------------------------------------- */

static void set_default(bk_experiment *exp, const key_spec *k)
{
    char *field = (char *)exp + k->offset;
    switch (k->type) {
    case KEY_INT:
    case KEY_CHOICE: *(int64_t *)field = (int64_t)k->def; break;
    case KEY_FLOAT: *(double *)field = k->def; break;
    case KEY_BOOL: *(int *)field = k->def != 0; break;
    case KEY_BOOL_OR_CHOICE: *(int *)field = (int)k->def; break;
    case KEY_STRING: *(const char **)field = k->choices; break;
    case KEY_STRINGS: *(bk_string_list *)field = (bk_string_list){NULL, 0}; break;
    }
}

static int read_key(bk_experiment *exp, const key_spec *k, const bk_toml_node *node, bk_error *err)
{
    char where[96];
    snprintf(where, sizeof where, "[%s] %s", k->section, k->key);
    char *field = (char *)exp + k->offset;
    bk_toml_type t = bk_toml_type_of(node);
    bk_toml_pos pos = bk_toml_position(node);
    switch (k->type) {
    case KEY_INT: {
        if (t != BK_TOML_INT)
            return wrong_type(err, node, where, "an integer");
        int64_t v = bk_toml_int(node);
        if ((double)v < k->min || (double)v > k->max)
            return bk_fail_at(err, BK_ERR_CONFIG, pos, "%s: expected an integer in [%.0f, %.0f], got %lld", where,
                              k->min, k->max, (long long)v);
        *(int64_t *)field = v;
        return BK_OK;
    }
    case KEY_FLOAT: {
        if (t != BK_TOML_FLOAT && t != BK_TOML_INT)
            return wrong_type(err, node, where, "a number");
        double v = bk_toml_float(node);
        if (!isfinite(v) || v < k->min || v > k->max)
            return bk_fail_at(err, BK_ERR_CONFIG, pos, "%s: expected a number in [%g, %g], got %g", where, k->min,
                              k->max, v);
        *(double *)field = v;
        return BK_OK;
    }
    case KEY_BOOL:
        if (t != BK_TOML_BOOL)
            return wrong_type(err, node, where, "a boolean (true or false)");
        *(int *)field = bk_toml_bool(node);
        return BK_OK;
    case KEY_BOOL_OR_CHOICE: {
        char list[256];
        bk_choices_text(k->choices, list, sizeof list);
        if (t == BK_TOML_BOOL) {
            *(int *)field = bk_toml_bool(node);
            return BK_OK;
        }
        if (t != BK_TOML_STRING)
            return bk_fail_at(err, BK_ERR_CONFIG, pos, "%s: expected a boolean (true or false), got %s; or a string, "
                              "one of %s", where, bk_toml_type_name(t), list);
        int index = bk_choice_index(k->choices, bk_toml_string(node));
        if (index < 0)
            return bk_fail_at(err, BK_ERR_CONFIG, pos, "%s: expected true, false or one of %s, got '%s'", where, list,
                              bk_toml_string(node));
        *(int *)field = index + 1;
        return BK_OK;
    }
    case KEY_CHOICE: {
        char list[256];
        bk_choices_text(k->choices, list, sizeof list);
        if (t != BK_TOML_STRING)
            return wrong_type(err, node, where, "a string");
        int index = bk_choice_index(k->choices, bk_toml_string(node));
        if (index < 0)
            return bk_fail_at(err, BK_ERR_CONFIG, pos, "%s: expected one of %s, got '%s'", where, list,
                              bk_toml_string(node));
        *(int64_t *)field = index;
        return BK_OK;
    }
    case KEY_STRING:
        if (t != BK_TOML_STRING)
            return wrong_type(err, node, where, "a string");
        *(const char **)field = bk_toml_string(node);
        return BK_OK;
    case KEY_STRINGS: {
        bk_string_list *list = (bk_string_list *)field;
        size_t n = t == BK_TOML_ARRAY ? bk_toml_count(node) : 1;
        if (t != BK_TOML_ARRAY && t != BK_TOML_STRING)
            return wrong_type(err, node, where, "a string or an array of strings");
        for (size_t i = 0; t == BK_TOML_ARRAY && i < n; i++)
            if (bk_toml_type_of(bk_toml_at(node, i)) != BK_TOML_STRING) {
                char item[128];
                snprintf(item, sizeof item, "%s element %zu", where, i);
                return wrong_type(err, bk_toml_at(node, i), item, "a string");
            }
        free(list->items); /* a key given twice (file, then --set) keeps the last */
        list->items = calloc(n ? n : 1, sizeof *list->items);
        if (!list->items)
            return bk_fail(err, BK_ERR_NOMEM, "out of memory reading %s", where);
        for (size_t i = 0; i < n; i++)
            list->items[i] = bk_toml_string(t == BK_TOML_ARRAY ? bk_toml_at(node, i) : node);
        list->n = (int)n;
        return BK_OK;
    }
    }
    return bk_fail(err, BK_ERR_INTERNAL, "schema key %s has no type", where);
}

static const key_spec *find_key(const char *section, const char *key)
{
    for (size_t i = 0; i < N_SCHEMA; i++)
        if (strcmp(schema[i].section, section) == 0 && strcmp(schema[i].key, key) == 0)
            return &schema[i];
    return NULL;
}

static int section_exists(const char *section)
{
    for (size_t i = 0; i < N_SCHEMA; i++)
        if (strcmp(schema[i].section, section) == 0)
            return 1;
    return 0;
}

static int read_section(bk_experiment *exp, const bk_toml_node *root, const char *section,
                        const bk_toml_node *table, bk_error *err)
{
    if (bk_toml_type_of(table) != BK_TOML_TABLE) {
        char where[64];
        snprintf(where, sizeof where, "'%s'", section);
        return wrong_type(err, table, where, "a table ([section])");
    }
    (void)root;
    bk_toml_entry e;
    for (size_t i = 0; bk_toml_entry_at(table, i, &e) == 0; i++) {
        const key_spec *k = find_key(section, e.key);
        if (!k)
            return unknown_name(err, e.key_pos, "key", e.key, section);
        int rc = read_key(exp, k, e.value, err);
        if (rc)
            return rc;
    }
    return BK_OK;
}

/* One value of a term's lr_scale or weight_decay: a number in [0, max] (`what` names it in messages). */
static int group_number(const bk_toml_node *v, const char *where, const char *what, double max, bk_error *err)
{
    bk_toml_type t = bk_toml_type_of(v);
    if (t != BK_TOML_FLOAT && t != BK_TOML_INT)
        return wrong_type(err, v, where, what);
    double x = bk_toml_float(v);
    if (!isfinite(x) || x < 0.0 || x > max)
        return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v), "%s: expected %s, a number in [0, %g], got %g",
                          where, what, max, x);
    return BK_OK;
}

/* [[term]] lr_scale / weight_decay: a number for every tensor of the term, or a table of numbers, one per
 * tensor named (lr_scale.slope = 0.5); the names are checked against the plugin's tensors when it loads. */
static int read_group_key(const bk_toml_node *table, const char *key, const char *where, const bk_toml_node **out,
                          bk_error *err)
{
    const bk_toml_node *v = bk_toml_get(table, key);
    const double max = strcmp(key, "lr_scale") == 0 ? BK_LR_SCALE_MAX : BK_WEIGHT_DECAY_MAX;
    *out = v;
    if (!v)
        return BK_OK;
    char what[96];
    if (bk_toml_type_of(v) != BK_TOML_TABLE) {
        snprintf(what, sizeof what, "a number for '%s' (or a table of numbers, one per tensor)", key);
        return group_number(v, where, what, max, err);
    }
    bk_toml_entry e;
    for (size_t i = 0; bk_toml_entry_at(v, i, &e) == 0; i++) {
        snprintf(what, sizeof what, "a number for '%s.%s'", key, e.key);
        int rc = group_number(e.value, where, what, max, err);
        if (rc)
            return rc;
    }
    return BK_OK;
}

static int read_term(bk_term_config *term, const bk_toml_node *table, int index, bk_error *err)
{
    char where[64];
    snprintf(where, sizeof where, "[[term]] #%d", index);
    if (bk_toml_type_of(table) != BK_TOML_TABLE)
        return wrong_type(err, table, where, "a table");
    term->table = table;
    term->pos = bk_toml_position(table);
    term->index = index;
    term->stream = BK_STREAM_TOKEN;
    term->weight = NAN;
    term->per_layer = -1;
    term->learn_weight = -1;
    term->weight_per_head = -1;
    term->lr_scale = term->weight_decay = NULL;
    term->layers = bk_toml_get(table, "layers");

    const bk_toml_node *plugin = bk_toml_get(table, "plugin");
    if (!plugin)
        return bk_fail_at(err, BK_ERR_CONFIG, term->pos,
                          "%s has no 'plugin' key (name a plugin, e.g. plugin = \"alibi\", or a path to its .so)", where);
    if (bk_toml_type_of(plugin) != BK_TOML_STRING || !*bk_toml_string(plugin))
        return wrong_type(err, plugin, where, "a plugin name or path string for 'plugin'");
    term->plugin = bk_toml_string(plugin);
    term->name = NULL;

    const bk_toml_node *v;
    if ((v = bk_toml_get(table, "name"))) {
        if (bk_toml_type_of(v) != BK_TOML_STRING || !*bk_toml_string(v))
            return wrong_type(err, v, where, "a non-empty string for 'name'");
        term->name = bk_toml_string(v);
        /* the name is a checkpoint key (term.NAME.tensor), a CSV cell, a table cell and a figure's file name */
        if (!bk_name_valid(term->name, BK_TERM_NAME_MAX))
            return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v),
                              "%s name '%s': expected 1-%d characters of " BK_NAME_CHARS " (" BK_NAME_FIRST "): "
                              "it names the term's tensors in checkpoints and its rows in tables",
                              where, term->name, BK_TERM_NAME_MAX);
    }
    if ((v = bk_toml_get(table, "stream"))) {
        if (bk_toml_type_of(v) != BK_TOML_STRING)
            return wrong_type(err, v, where, "a string for 'stream'");
        int s = bk_choice_index(BK_STREAM_CHOICES, bk_toml_string(v));
        if (s < 0) {
            char list[64];
            bk_choices_text(BK_STREAM_CHOICES, list, sizeof list);
            return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v), "%s stream: expected one of %s, got '%s'",
                              where, list, bk_toml_string(v));
        }
        term->stream = (bk_stream)s;
        term->stream_set = 1;
    }
    if ((v = bk_toml_get(table, "weight"))) {
        bk_toml_type t = bk_toml_type_of(v);
        if (t != BK_TOML_FLOAT && t != BK_TOML_INT)
            return wrong_type(err, v, where, "a number for 'weight'");
        term->weight = bk_toml_float(v);
        if (!isfinite(term->weight))
            return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v), "%s weight: expected a finite number, got %g",
                              where, term->weight);
    }
    if ((v = bk_toml_get(table, "per_layer"))) {
        if (bk_toml_type_of(v) != BK_TOML_BOOL)
            return wrong_type(err, v, where, "a boolean for 'per_layer'");
        term->per_layer = bk_toml_bool(v);
    }
    if ((v = bk_toml_get(table, "learn_weight"))) {
        if (bk_toml_type_of(v) != BK_TOML_BOOL)
            return wrong_type(err, v, where, "a boolean for 'learn_weight'");
        term->learn_weight = bk_toml_bool(v);
    }
    if ((v = bk_toml_get(table, "weight_per_head"))) {
        if (bk_toml_type_of(v) != BK_TOML_BOOL)
            return wrong_type(err, v, where, "a boolean for 'weight_per_head'");
        term->weight_per_head = bk_toml_bool(v);
    }
    int rc;
    if ((rc = read_group_key(table, "lr_scale", where, &term->lr_scale, err)) ||
        (rc = read_group_key(table, "weight_decay", where, &term->weight_decay, err)))
        return rc;
    return BK_OK;
}

/* "every N from K", "except every N from K", "first N", "last N" or "all" into on[] (n layers); 0, or -1
 * when the text is none of them. */
static int layer_pattern(const char *text, int64_t n, unsigned char *on)
{
    long long a = 0, b = 0;
    int used = 0, except = 0;
    if (!strncmp(text, "except ", 7))
        except = 1, text += 7;
    if (sscanf(text, "every %lld from %lld%n", &a, &b, &used) == 2 && !text[used] && a >= 1 && b >= 0) {
        for (int64_t l = 0; l < n; l++)
            on[l] = (unsigned char)((l >= b && (l - b) % a == 0) != except);
        return 0;
    }
    if (except)
        return -1;
    if (!strcmp(text, "all")) {
        memset(on, 1, (size_t)n);
        return 0;
    }
    used = 0;
    if (sscanf(text, "first %lld%n", &a, &used) == 1 && !text[used] && a >= 1) {
        for (int64_t l = 0; l < n; l++)
            on[l] = l < a;
        return 0;
    }
    used = 0;
    if (sscanf(text, "last %lld%n", &a, &used) == 1 && !text[used] && a >= 1) {
        for (int64_t l = 0; l < n; l++)
            on[l] = l >= n - a;
        return 0;
    }
    return -1;
}

int bk_term_layers(const bk_term_config *t, int64_t n_layers, unsigned char *on, bk_error *err)
{
    unsigned char *sel = calloc(n_layers > 0 ? (size_t)n_layers : 1, 1);
    if (!sel)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the layers of [[term]] #%d", t->index);
    int rc = BK_OK;
    char where[48];
    snprintf(where, sizeof where, "[[term]] #%d layers", t->index);
    const bk_toml_node *v = t->layers;
    const bk_toml_type type = v ? bk_toml_type_of(v) : BK_TOML_TABLE;
    if (!v)
        memset(sel, 1, (size_t)n_layers);
    else if (type == BK_TOML_STRING) {
        if (layer_pattern(bk_toml_string(v), n_layers, sel))
            rc = bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v),
                            "[[term]] #%d layers: expected a list of layer indices or one of \"all\", \"every N from "
                            "K\", \"except every N from K\", \"first N\", \"last N\" (N >= 1, K >= 0), got '%s'",
                            t->index, bk_toml_string(v));
    } else if (type == BK_TOML_ARRAY) {
        for (size_t k = 0; k < bk_toml_count(v) && !rc; k++) {
            const bk_toml_node *x = bk_toml_at(v, k);
            if (bk_toml_type_of(x) != BK_TOML_INT)
                rc = wrong_type(err, x, where, "a layer index (an integer)");
            else if (bk_toml_int(x) < 0 || bk_toml_int(x) >= n_layers)
                rc = bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(x),
                                "[[term]] #%d layers: layer %lld does not exist; the model has %lld (0 .. %lld)",
                                t->index, (long long)bk_toml_int(x), (long long)n_layers, (long long)n_layers - 1);
            else if (sel[bk_toml_int(x)])
                rc = bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(x),
                                "[[term]] #%d layers: layer %lld is listed twice", t->index, (long long)bk_toml_int(x));
            else
                sel[bk_toml_int(x)] = 1;
        }
    } else
        rc = wrong_type(err, v, where, "a list of layer indices or a pattern string");
    int any = 0;
    for (int64_t l = 0; l < n_layers && !rc; l++)
        any |= sel[l];
    if (!rc && !any)
        rc = bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v),
                        "[[term]] #%d layers: selects none of the model's %lld layers; expected at least one (a term "
                        "in no layer is no term: remove it)",
                        t->index, (long long)n_layers);
    if (!rc && on)
        memcpy(on, sel, (size_t)n_layers);
    free(sel);
    return rc;
}

/* Give every term a unique label: its `name`, else the plugin's name, suffixed #k when repeated. */
static int label_terms(bk_experiment *exp, bk_error *err)
{
    for (int i = 0; i < exp->n_terms; i++) {
        bk_term_config *t = &exp->terms[i];
        for (int j = 0; j < i; j++)
            if (t->name && exp->terms[j].name && strcmp(t->name, exp->terms[j].name) == 0)
                return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(bk_toml_get(t->table, "name")),
                                  "[[term]] #%d: name '%s' is already used by [[term]] #%d", t->index, t->name,
                                  exp->terms[j].index);
    }
    return BK_OK;
}

/* The family's keys: llama needs ffn_dim, and kv_heads dividing heads; gpt2 has its fixed block, so a key
 * only llama reads is an error at that key when it is set. */
static int check_family(const bk_experiment *exp, const bk_toml_node *root, bk_error *err)
{
    const bk_toml_node *model = bk_toml_get(root, "model");
    if (exp->model.family == BK_FAMILY_GPT2) {
        static const char *const llama_only[] = {"kv_heads", "head_dim", "ffn_dim", "norm_eps", "tied", "qk_norm"};
        for (size_t i = 0; i < sizeof llama_only / sizeof llama_only[0]; i++) {
            const bk_toml_node *v = bk_toml_get(model, llama_only[i]);
            if (v)
                return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v),
                                  "[model] %s: read by family = \"llama\" only; the gpt2 block has LayerNorm, a GELU "
                                  "MLP of 4 dim, dim / heads per head, no QK-norm and a tied output (expected no "
                                  "%s, or family = \"llama\")",
                                  llama_only[i], llama_only[i]);
        }
        return BK_OK;
    }
    const bk_toml_node *at = bk_toml_get(model, "family");
    bk_toml_pos pos = at ? bk_toml_position(at) : (bk_toml_pos){exp->path, 0, 0};
    if (!exp->model.ffn_dim)
        return bk_fail_at(err, BK_ERR_CONFIG, pos,
                          "[model] family = \"llama\" needs ffn_dim, the SwiGLU MLP's hidden width (e.g. %lld for "
                          "dim = %lld)",
                          (long long)((exp->model.dim * 8 / 3 + 63) / 64 * 64), (long long)exp->model.dim);
    const int64_t kv = bk_experiment_kv_heads(exp);
    if (exp->model.heads % kv != 0) {
        const bk_toml_node *k = bk_toml_get(model, "kv_heads");
        return bk_fail_at(err, BK_ERR_CONFIG, k ? bk_toml_position(k) : pos,
                          "[model] kv_heads: %lld does not divide heads = %lld (each key/value head serves a whole "
                          "group of query heads)",
                          (long long)kv, (long long)exp->model.heads);
    }
    if (bk_experiment_head_dim(exp) % 2 != 0) {
        const bk_toml_node *k = bk_toml_get(model, "head_dim");
        return bk_fail_at(err, BK_ERR_CONFIG, k ? bk_toml_position(k) : pos,
                          "[model] head_dim: %lld is odd; expected an even width (rotary pairs)",
                          (long long)bk_experiment_head_dim(exp));
    }
    return BK_OK;
}

/* [run] precision = "bf16" multiplies on bf16 tensor cores and reads q, k, v through the fused attention:
 * matmul becomes "bf16" unless set, and another matmul or attention is an error at that key. */
static int check_precision(bk_experiment *exp, const bk_toml_node *root, bk_error *err)
{
    if (exp->run.precision != BK_PRECISION_BF16)
        return BK_OK;
    const bk_toml_node *run = bk_toml_get(root, "run");
    const bk_toml_node *matmul = bk_toml_get(run, "matmul"), *attention = bk_toml_get(run, "attention");
    if (!matmul)
        exp->run.matmul = BK_MATMUL_BF16;
    else if (exp->run.matmul != BK_MATMUL_BF16) {
        char name[16];
        return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(matmul),
                          "[run] matmul = \"%s\" with precision = \"bf16\": bf16 storage multiplies on bf16 "
                          "tensor cores; expected matmul = \"bf16\" (or no matmul key)",
                          bk_choice_name(BK_MATMUL_CHOICES, exp->run.matmul, name, sizeof name));
    }
    if (attention && exp->run.attention == BK_ATTENTION_MATERIALIZED)
        return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(attention),
                          "[run] attention = \"materialized\" with precision = \"bf16\": bf16 storage needs the "
                          "fused attention; expected attention = \"fused\" (or no attention key)");
    return BK_OK;
}

static int validate(bk_experiment *exp, bk_error *err)
{
    const bk_toml_node *root = bk_toml_root(exp->doc);
    for (size_t i = 0; i < N_SCHEMA; i++)
        set_default(exp, &schema[i]);

    bk_toml_entry e;
    for (size_t i = 0; bk_toml_entry_at(root, i, &e) == 0; i++) {
        int rc;
        if (strcmp(e.key, "term") == 0) {
            if (bk_toml_type_of(e.value) != BK_TOML_ARRAY)
                return wrong_type(err, e.value, "'term'", "an array of tables ([[term]])");
            size_t n = bk_toml_count(e.value);
            exp->terms = calloc(n ? n : 1, sizeof *exp->terms);
            if (!exp->terms)
                return bk_fail(err, BK_ERR_NOMEM, "out of memory reading [[term]] tables");
            for (size_t k = 0; k < n; k++) {
                if ((rc = read_term(&exp->terms[k], bk_toml_at(e.value, k), (int)k + 1, err)))
                    return rc;
                exp->n_terms++;
            }
            continue;
        }
        if (!section_exists(e.key))
            return unknown_name(err, e.key_pos, "section", e.key, NULL);
        if ((rc = read_section(exp, root, e.key, e.value, err)))
            return rc;
    }
    if (!exp->model.head_dim && exp->model.dim % exp->model.heads != 0) {
        const bk_toml_node *dim = bk_toml_get(bk_toml_get(root, "model"), "dim");
        bk_toml_pos pos = dim ? bk_toml_position(dim) : (bk_toml_pos){exp->path, 0, 0};
        return bk_fail_at(err, BK_ERR_CONFIG, pos, "[model] dim: %lld is not a multiple of heads = %lld",
                          (long long)exp->model.dim, (long long)exp->model.heads);
    }
    int rc = check_family(exp, root, err);
    if (rc)
        return rc;
    for (int k = 0; k < exp->n_terms; k++)
        if ((rc = bk_term_layers(&exp->terms[k], exp->model.layers, NULL, err)))
            return rc;
    rc = check_precision(exp, root, err);
    return rc ? rc : label_terms(exp, err);
}

static int finish_load(bk_experiment *out, const char *const *overrides, size_t n_overrides, bk_error *err)
{
    int rc = BK_OK;
    for (size_t i = 0; i < n_overrides && !rc; i++)
        rc = bk_toml_override(out->doc, overrides[i], err);
    if (!rc)
        rc = validate(out, err);
    if (rc)
        bk_experiment_free(out);
    return rc;
}

int bk_experiment_load(const char *path, const char *const *overrides, size_t n_overrides, bk_experiment *out,
                       bk_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = bk_toml_parse_file(path, &out->doc, err);
    if (rc)
        return rc;
    if (!(out->path = strdup(path))) {
        bk_experiment_free(out);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory loading '%s'", path);
    }
    return finish_load(out, overrides, n_overrides, err);
}

int bk_experiment_parse(const char *text, const char *source_name, const char *const *overrides,
                        size_t n_overrides, bk_experiment *out, bk_error *err)
{
    memset(out, 0, sizeof *out);
    int rc = bk_toml_parse_string(text, source_name, &out->doc, err);
    if (rc)
        return rc;
    if (!(out->path = strdup(source_name))) {
        bk_experiment_free(out);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory loading '%s'", source_name);
    }
    return finish_load(out, overrides, n_overrides, err);
}

void bk_experiment_free(bk_experiment *exp)
{
    if (!exp)
        return;
    for (size_t i = 0; i < N_SCHEMA; i++)
        if (schema[i].type == KEY_STRINGS)
            free(((bk_string_list *)((char *)exp + schema[i].offset))->items);
    bk_toml_free(exp->doc);
    free(exp->path);
    free(exp->terms);
    memset(exp, 0, sizeof *exp);
}

/* A KEY_BOOL_OR_CHOICE value as TOML writes it: false, true (also the first choice), "choice". */
static const char *bool_or_choice_text(const key_spec *k, int v, char *buf, size_t size)
{
    char name[48];
    if (v <= 1)
        snprintf(buf, size, "%s", v ? "true" : "false");
    else
        snprintf(buf, size, "\"%s\"", bk_choice_name(k->choices, v - 1, name, sizeof name));
    return buf;
}

void bk_experiment_print_keys(void *fp)
{
    FILE *f = fp;
    const char *section = "";
    for (size_t i = 0; i < N_SCHEMA; i++) {
        const key_spec *k = &schema[i];
        if (strcmp(section, k->section) != 0) {
            fprintf(f, "%s[%s]\n", i ? "\n" : "", k->section);
            section = k->section;
        }
        char def[64], type[160];
        switch (k->type) {
        case KEY_INT:
            snprintf(def, sizeof def, "%.0f", k->def);
            snprintf(type, sizeof type, "integer in [%.0f, %.0f]", k->min, k->max);
            break;
        case KEY_FLOAT:
            snprintf(def, sizeof def, "%g", k->def);
            snprintf(type, sizeof type, "number in [%g, %g]", k->min, k->max);
            break;
        case KEY_BOOL:
            snprintf(def, sizeof def, "%s", k->def ? "true" : "false");
            snprintf(type, sizeof type, "boolean");
            break;
        case KEY_BOOL_OR_CHOICE: {
            bool_or_choice_text(k, (int)k->def, def, sizeof def);
            char list[128];
            bk_choices_text(k->choices, list, sizeof list);
            snprintf(type, sizeof type, "boolean or one of %s", list);
            break;
        }
        case KEY_CHOICE: {
            char name[48];
            snprintf(def, sizeof def, "\"%s\"", bk_choice_name(k->choices, (int64_t)k->def, name, sizeof name));
            char list[128];
            bk_choices_text(k->choices, list, sizeof list);
            snprintf(type, sizeof type, "one of %s", list);
            break;
        }
        case KEY_STRING:
            snprintf(def, sizeof def, "\"%s\"", k->choices);
            snprintf(type, sizeof type, "string");
            break;
        case KEY_STRINGS:
            snprintf(def, sizeof def, "[]");
            snprintf(type, sizeof type, "array of strings");
            break;
        }
        fprintf(f, "  %-14s = %-10s  %s; %s\n", k->key, def, type, k->doc);
    }
    fprintf(f, "\n[[term]]  (one table per positional term; repeat for a mixture)\n");
    fprintf(f, "  %-14s   %-10s  %s\n", "plugin", "(required)", "plugin name (\"alibi\") or path to its .so");
    fprintf(f, "  %-14s = %-10s  %s\n", "name", "<plugin>", "label of the term in output and checkpoints");
    char streams[64];
    bk_choices_text(BK_STREAM_CHOICES, streams, sizeof streams);
    fprintf(f, "  %-14s = %-10s  one of %s; the position stream p(i) the term reads (a segmenting\n"
            "  %-14s   %-10s  plugin's own term defaults to segment: its embedding reads in-segment positions)\n",
            "stream", "\"token\"", streams, "", "");
    fprintf(f, "  %-14s = %-10s  %s\n", "weight", "1 | 1/n",
            "mixing weight of a table term (sum: 1.0; kernel: 1/n per stream, must be >= 0)");
    fprintf(f, "  %-14s = %-10s  %s\n", "per_layer", "<plugin>",
            "table terms: one parameter copy per layer (true) or shared (false); default from the plugin");
    fprintf(f, "  %-14s = %-10s  %s\n", "learn_weight", "<attention>",
            "table terms: train this term's mixing weight (default: [attention] learn_weights)");
    fprintf(f, "  %-14s = %-10s  %s\n", "weight_per_head", "<attention>",
            "table terms with a learned weight: one weight per head (default: learn_weights = \"per_head\")");
    fprintf(f, "  %-14s = %-10s  %s%g]\n", "lr_scale", "<plugin>",
            "terms with parameters: [train] lr x this; a number, or per tensor (lr_scale.NAME = ...); in [0, ",
            BK_LR_SCALE_MAX);
    fprintf(f, "  %-14s = %-10s  %s\n", "weight_decay", "<plugin>",
            "terms with parameters: AdamW weight decay of their tensors (default: none, or [train] weight_decay");
    fprintf(f, "  %-14s   %-10s  %s", "", "",
            "with decay_all; a plugin may declare its own); a number, or per tensor; in [0, ");
    fprintf(f, "%g]\n", BK_WEIGHT_DECAY_MAX);
    fprintf(f, "  %-14s = %-10s  %s\n", "layers", "\"all\"",
            "the layers the term acts in: a list ([0, 2]) or \"every N from K\", \"except every N from K\",");
    fprintf(f, "  %-14s   %-10s  %s\n", "", "",
            "\"first N\", \"last N\"; not for an embedding or the segmenter");
    fprintf(f, "  ...                          the plugin's own options: see `biaskit plugins`\n");
}

static void print_string(FILE *f, const char *text)
{
    fputc('"', f);
    for (const char *c = text; *c; c++) {
        if (*c == '"' || *c == '\\')
            fputc('\\', f);
        fputc(*c, f);
    }
    fputc('"', f);
}

/* The shortest text that reads back as the same double (6 to 17 significant digits), with ".0" added
 * to a whole number so that TOML reads it as a float. */
static void shortest_double(double v, char *text, size_t size)
{
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(text, size, "%.*g", digits, v);
        if (strtod(text, NULL) == v)
            break;
    }
    if (!strpbrk(text, ".en"))
        strncat(text, ".0", size - strlen(text) - 1);
}

void bk_experiment_print_values(const bk_experiment *exp, void *fp)
{
    FILE *f = fp;
    const char *section = "";
    for (size_t i = 0; i < N_SCHEMA; i++) {
        const key_spec *k = &schema[i];
        const char *field = (const char *)exp + k->offset;
        if (strcmp(section, k->section) != 0) {
            fprintf(f, "%s[%s]\n", i ? "\n" : "", k->section);
            section = k->section;
        }
        fprintf(f, "%s = ", k->key);
        switch (k->type) {
        case KEY_INT: fprintf(f, "%lld", (long long)*(const int64_t *)field); break;
        case KEY_FLOAT: {
            char text[40];
            shortest_double(*(const double *)field, text, sizeof text);
            fputs(text, f);
            break;
        }
        case KEY_BOOL: fprintf(f, "%s", *(const int *)field ? "true" : "false"); break;
        case KEY_BOOL_OR_CHOICE: {
            char text[64];
            fputs(bool_or_choice_text(k, *(const int *)field, text, sizeof text), f);
            break;
        }
        case KEY_CHOICE: {
            char name[48];
            print_string(f, bk_choice_name(k->choices, *(const int64_t *)field, name, sizeof name));
            break;
        }
        case KEY_STRING: print_string(f, *(const char *const *)field); break;
        case KEY_STRINGS: {
            const bk_string_list *list = (const bk_string_list *)field;
            fputc('[', f);
            for (int j = 0; j < list->n; j++) {
                fputs(j ? ", " : "", f);
                print_string(f, list->items[j]);
            }
            fputc(']', f);
            break;
        }
        }
        fputc('\n', f);
    }
}

/* ------------------------------------------------------------------------------------------------
 * Roles and differences: what --set may change on a model already trained (experiment.h)
 * ---------------------------------------------------------------------------------------------- */

bk_key_role bk_experiment_key_role(const char *section, const char *key)
{
    static const char *const facts[] = {"length", "batch", "accumulate", "seed", "init"};
    if (strcmp(section, "model") == 0 || strcmp(section, "attention") == 0 || strcmp(section, "term") == 0)
        return BK_KEY_MODEL;
    if (strcmp(section, "train") == 0) {
        for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++)
            if (strcmp(key, facts[i]) == 0)
                return BK_KEY_FACT;
        return find_key(section, key) ? BK_KEY_SCHEDULE : BK_KEY_RUN;
    }
    return BK_KEY_RUN;
}

/* Appends to buf[size] at *used (stops when full). */
static void text_add(char *buf, size_t size, size_t *used, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void text_add(char *buf, size_t size, size_t *used, const char *fmt, ...)
{
    if (*used + 1 >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *used, size - *used, fmt, ap);
    va_end(ap);
    *used += k > 0 ? (size_t)k : 0;
    if (*used >= size)
        *used = size - 1;
}

static void quoted_text(char *buf, size_t size, size_t *used, const char *s)
{
    text_add(buf, size, used, "\"");
    for (const char *c = s; *c && *used + 1 < size; c++)
        text_add(buf, size, used, *c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
    text_add(buf, size, used, "\"");
}

/* A TOML node as messages show it (truncated to the buffer). */
static void node_text(const bk_toml_node *node, char *buf, size_t size, size_t *used, int depth)
{
    switch (bk_toml_type_of(node)) {
    case BK_TOML_STRING: quoted_text(buf, size, used, bk_toml_string(node)); break;
    case BK_TOML_INT: text_add(buf, size, used, "%lld", (long long)bk_toml_int(node)); break;
    case BK_TOML_FLOAT: {
        char text[32];
        shortest_double(bk_toml_float(node), text, sizeof text);
        text_add(buf, size, used, "%s", text);
        break;
    }
    case BK_TOML_BOOL: text_add(buf, size, used, "%s", bk_toml_bool(node) ? "true" : "false"); break;
    case BK_TOML_ARRAY:
        text_add(buf, size, used, "[");
        for (size_t i = 0; i < bk_toml_count(node) && depth < 4; i++) {
            text_add(buf, size, used, i ? ", " : "");
            node_text(bk_toml_at(node, i), buf, size, used, depth + 1);
        }
        text_add(buf, size, used, "]");
        break;
    case BK_TOML_TABLE: {
        bk_toml_entry e;
        text_add(buf, size, used, "{");
        for (size_t i = 0; depth < 4 && bk_toml_entry_at(node, i, &e) == 0; i++) {
            text_add(buf, size, used, "%s%s = ", i ? ", " : "", e.key);
            node_text(e.value, buf, size, used, depth + 1);
        }
        text_add(buf, size, used, "}");
        break;
    }
    default: text_add(buf, size, used, "%s", bk_toml_string(node) ? bk_toml_string(node) : "?"); break;
    }
}

void bk_toml_value_text(const bk_toml_node *node, char *buf, size_t size)
{
    size_t used = 0;
    if (size)
        buf[0] = '\0';
    node_text(node, buf, size, &used, 0);
}

void bk_double_text(double v, char *buf, size_t size)
{
    shortest_double(v, buf, size);
}

void bk_string_text(const char *text, char *buf, size_t size)
{
    size_t used = 0;
    if (size)
        buf[0] = '\0';
    quoted_text(buf, size, &used, text);
}

/* 1 when two TOML values are the same value (an integer and a float of equal value are). */
static int same_node(const bk_toml_node *a, const bk_toml_node *b, int depth)
{
    bk_toml_type ta = bk_toml_type_of(a), tb = bk_toml_type_of(b);
    if ((ta == BK_TOML_INT || ta == BK_TOML_FLOAT) && (tb == BK_TOML_INT || tb == BK_TOML_FLOAT)) {
        if (ta == BK_TOML_INT && tb == BK_TOML_INT)
            return bk_toml_int(a) == bk_toml_int(b);
        double x = bk_toml_float(a), y = bk_toml_float(b);
        return x == y || (isnan(x) && isnan(y));
    }
    if (ta != tb || depth > BK_TOML_MAX_DEPTH)
        return ta == tb;
    switch (ta) {
    case BK_TOML_BOOL: return bk_toml_bool(a) == bk_toml_bool(b);
    case BK_TOML_ARRAY:
        if (bk_toml_count(a) != bk_toml_count(b))
            return 0;
        for (size_t i = 0; i < bk_toml_count(a); i++)
            if (!same_node(bk_toml_at(a, i), bk_toml_at(b, i), depth + 1))
                return 0;
        return 1;
    case BK_TOML_TABLE: {
        if (bk_toml_count(a) != bk_toml_count(b))
            return 0;
        bk_toml_entry e;
        for (size_t i = 0; bk_toml_entry_at(a, i, &e) == 0; i++) {
            const bk_toml_node *other = bk_toml_get(b, e.key);
            if (!other || !same_node(e.value, other, depth + 1))
                return 0;
        }
        return 1;
    }
    default: {
        const char *x = bk_toml_string(a), *y = bk_toml_string(b);
        return x && y ? strcmp(x, y) == 0 : x == y;
    }
    }
}

/* A schema value as TOML writes it (lists truncated to the buffer). */
static void value_text(const bk_experiment *exp, const key_spec *k, char *buf, size_t size)
{
    const char *field = (const char *)exp + k->offset;
    size_t used = 0;
    buf[0] = '\0';
    switch (k->type) {
    case KEY_INT: text_add(buf, size, &used, "%lld", (long long)*(const int64_t *)field); break;
    case KEY_FLOAT: shortest_double(*(const double *)field, buf, size); break;
    case KEY_BOOL: text_add(buf, size, &used, "%s", *(const int *)field ? "true" : "false"); break;
    case KEY_BOOL_OR_CHOICE: bool_or_choice_text(k, *(const int *)field, buf, size); break;
    case KEY_CHOICE: {
        char name[48];
        quoted_text(buf, size, &used, bk_choice_name(k->choices, *(const int64_t *)field, name, sizeof name));
        break;
    }
    case KEY_STRING: quoted_text(buf, size, &used, *(const char *const *)field); break;
    case KEY_STRINGS: {
        const bk_string_list *list = (const bk_string_list *)field;
        text_add(buf, size, &used, "[");
        for (int j = 0; j < list->n; j++) {
            text_add(buf, size, &used, j ? ", " : "");
            quoted_text(buf, size, &used, list->items[j]);
        }
        text_add(buf, size, &used, "]");
        break;
    }
    }
}

static int same_value(const bk_experiment *a, const bk_experiment *b, const key_spec *k)
{
    const char *x = (const char *)a + k->offset, *y = (const char *)b + k->offset;
    switch (k->type) {
    case KEY_INT:
    case KEY_CHOICE: return *(const int64_t *)x == *(const int64_t *)y;
    case KEY_FLOAT: return *(const double *)x == *(const double *)y;
    case KEY_BOOL:
    case KEY_BOOL_OR_CHOICE: return *(const int *)x == *(const int *)y;
    case KEY_STRING: return strcmp(*(const char *const *)x, *(const char *const *)y) == 0;
    case KEY_STRINGS: {
        const bk_string_list *p = (const bk_string_list *)x, *q = (const bk_string_list *)y;
        if (p->n != q->n)
            return 0;
        for (int j = 0; j < p->n; j++)
            if (strcmp(p->items[j], q->items[j]) != 0)
                return 0;
        return 1;
    }
    }
    return 0;
}

typedef struct change_list {
    bk_experiment_change *out;
    int cap, n;
    bk_experiment_change sink; /* a change past the caller's room: counted, not kept */
} change_list;

static bk_experiment_change *next_change(change_list *c, bk_key_role role)
{
    bk_experiment_change *ch = c->n < c->cap ? &c->out[c->n] : &c->sink;
    c->n++;
    memset(ch, 0, sizeof *ch);
    ch->role = role;
    return ch;
}

static void term_engine_change_as(change_list *c, bk_key_role role, int k, const char *key, const char *before,
                                  const char *after)
{
    bk_experiment_change *ch = next_change(c, role);
    snprintf(ch->key, sizeof ch->key, "term.%d.%s", k, key);
    snprintf(ch->where, sizeof ch->where, "[[term]] #%d %s", k + 1, key);
    bk_copy_text(ch->before, sizeof ch->before, before);
    bk_copy_text(ch->after, sizeof ch->after, after);
}

static void term_engine_change(change_list *c, int k, const char *key, const char *before, const char *after)
{
    term_engine_change_as(c, BK_KEY_MODEL, k, key, before, after);
}

static void optional_text(const char *s, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    if (s)
        quoted_text(buf, size, &used, s);
    else
        snprintf(buf, size, "not set");
}

static void term_changes(change_list *c, const bk_term_config *x, const bk_term_config *y, int k)
{
    char before[96], after[96];
    if (strcmp(x->plugin, y->plugin) != 0) {
        optional_text(x->plugin, before, sizeof before), optional_text(y->plugin, after, sizeof after);
        term_engine_change(c, k, "plugin", before, after);
    }
    if (!(x->name == y->name || (x->name && y->name && strcmp(x->name, y->name) == 0))) {
        optional_text(x->name, before, sizeof before), optional_text(y->name, after, sizeof after);
        term_engine_change(c, k, "name", before, after);
    }
    if (x->stream_set != y->stream_set || x->stream != y->stream) {
        char name[32];
        optional_text(x->stream_set ? bk_choice_name(BK_STREAM_CHOICES, x->stream, name, sizeof name) : NULL, before,
                      sizeof before);
        optional_text(y->stream_set ? bk_choice_name(BK_STREAM_CHOICES, y->stream, name, sizeof name) : NULL, after,
                      sizeof after);
        term_engine_change(c, k, "stream", before, after);
    }
    if (!(x->weight == y->weight || (isnan(x->weight) && isnan(y->weight)))) {
        if (isnan(x->weight))
            snprintf(before, sizeof before, "not set");
        else
            shortest_double(x->weight, before, sizeof before);
        if (isnan(y->weight))
            snprintf(after, sizeof after, "not set");
        else
            shortest_double(y->weight, after, sizeof after);
        term_engine_change(c, k, "weight", before, after);
    }
    const struct {
        const char *key;
        int x, y;
    } flags[] = {{"per_layer", x->per_layer, y->per_layer},
                 {"learn_weight", x->learn_weight, y->learn_weight},
                 {"weight_per_head", x->weight_per_head, y->weight_per_head}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (flags[i].x == flags[i].y)
            continue;
        snprintf(before, sizeof before, "%s", flags[i].x < 0 ? "not set" : flags[i].x ? "true" : "false");
        snprintf(after, sizeof after, "%s", flags[i].y < 0 ? "not set" : flags[i].y ? "true" : "false");
        term_engine_change(c, k, flags[i].key, before, after);
    }
    /* the optimizer's treatment of the term's parameters: the training still to come, like [train] lr */
    const struct {
        const char *key;
        const bk_toml_node *x, *y;
    } groups[] = {{"lr_scale", x->lr_scale, y->lr_scale}, {"weight_decay", x->weight_decay, y->weight_decay}};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        if (groups[i].x == groups[i].y || (groups[i].x && groups[i].y && same_node(groups[i].x, groups[i].y, 0)))
            continue;
        size_t ub = 0, ua = 0;
        if (groups[i].x)
            node_text(groups[i].x, before, sizeof before, &ub, 0);
        else
            snprintf(before, sizeof before, "not set");
        if (groups[i].y)
            node_text(groups[i].y, after, sizeof after, &ua, 0);
        else
            snprintf(after, sizeof after, "not set");
        term_engine_change_as(c, BK_KEY_SCHEDULE, k, groups[i].key, before, after);
    }
    /* the plugin's own options: every key of either table that is not the engine's */
    for (int side = 0; side < 2; side++) {
        const bk_toml_node *mine = side ? y->table : x->table, *theirs = side ? x->table : y->table;
        bk_toml_entry e;
        for (size_t i = 0; bk_toml_entry_at(mine, i, &e) == 0; i++) {
            if (bk_term_key_is_reserved(e.key))
                continue;
            const bk_toml_node *other = bk_toml_get(theirs, e.key);
            if (side == 1 && other)
                continue; /* compared from the first side */
            if (other && same_node(e.value, other, 0))
                continue;
            bk_experiment_change *ch = next_change(c, BK_KEY_OPTION);
            snprintf(ch->key, sizeof ch->key, "term.%d.%s", k, e.key);
            snprintf(ch->where, sizeof ch->where, "[[term]] #%d (%s) option '%s'", k + 1, x->name ? x->name : x->plugin,
                     e.key);
            size_t ub = 0, ua = 0;
            const bk_toml_node *was = side ? other : e.value, *now = side ? e.value : other;
            if (was)
                node_text(was, ch->before, sizeof ch->before, &ub, 0);
            else
                snprintf(ch->before, sizeof ch->before, "not set");
            if (now)
                node_text(now, ch->after, sizeof ch->after, &ua, 0);
            else
                snprintf(ch->after, sizeof ch->after, "not set");
        }
    }
}

int bk_experiment_diff(const bk_experiment *a, const bk_experiment *b, bk_experiment_change *out, int cap)
{
    change_list c = {.out = out, .cap = cap};
    for (size_t i = 0; i < N_SCHEMA; i++) {
        const key_spec *k = &schema[i];
        if (same_value(a, b, k))
            continue;
        bk_experiment_change *ch = next_change(&c, bk_experiment_key_role(k->section, k->key));
        snprintf(ch->key, sizeof ch->key, "%s.%s", k->section, k->key);
        snprintf(ch->where, sizeof ch->where, "[%s] %s", k->section, k->key);
        value_text(a, k, ch->before, sizeof ch->before);
        value_text(b, k, ch->after, sizeof ch->after);
    }
    if (a->n_terms != b->n_terms) {
        bk_experiment_change *ch = next_change(&c, BK_KEY_MODEL);
        snprintf(ch->key, sizeof ch->key, "term");
        snprintf(ch->where, sizeof ch->where, "the [[term]] list");
        snprintf(ch->before, sizeof ch->before, "%d term%s", a->n_terms, a->n_terms == 1 ? "" : "s");
        snprintf(ch->after, sizeof ch->after, "%d term%s", b->n_terms, b->n_terms == 1 ? "" : "s");
    }
    for (int k = 0; k < a->n_terms && k < b->n_terms; k++)
        term_changes(&c, &a->terms[k], &b->terms[k], k);
    return c.n;
}
