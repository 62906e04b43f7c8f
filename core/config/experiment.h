/* The experiment file: a TOML document validated against the engine's schema.
 *
 * Every engine key has a type, a default, a range or choice list, and a doc string, all written once
 * in the schema table (experiment.c); `biaskit config --keys` prints it. Unknown sections or keys,
 * wrong types and out-of-range values are errors naming file:line:column and what was expected.
 *
 *   [model]      layers, heads, dim, vocab
 *   [attention]  mixing ("sum" | "kernel"), learn_weights (false | true | "per_term" | "per_head")
 *   [train]      length, seed, batch, steps, learning-rate schedule, AdamW, clipping, evaluation cadence,
 *                nonfinite ("stop" | "skip")
 *   [data]       format ("text" | "shards"), paths, val_paths, val_fraction, split, split_seed,
 *                extensions, max_bytes
 *   [run]        device ("auto" | "cpu" | "cuda" | "emulated"), matmul ("fp32" | "tf32" | "bf16"),
 *                attention ("fused" | "materialized"), precision ("fp32" | "bf16"), recompute, out_dir, threads,
 *                gpu (-1 = by local rank | N)
 *   [[term]]     one positional term each: plugin, name, stream, weight, per_layer, learn_weight,
 *                weight_per_head, lr_scale, weight_decay, layers, plus the plugin's own options (checked against
 *                the plugin's declarations when it loads)
 */
#ifndef BK_EXPERIMENT_H
#define BK_EXPERIMENT_H

#include "config/toml.h"
#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

/* Each choice list in the order of its enum: the one place these names are written. */
#define BK_STREAM_CHOICES "token|segment"
#define BK_MIXING_CHOICES "sum|kernel"
#define BK_DEVICE_CHOICES "auto|cpu|cuda|emulated"
#define BK_MATMUL_CHOICES "fp32|tf32|bf16" /* the order of bk_matmul_mode (model/backend.h) */
#define BK_ATTENTION_CHOICES "fused|materialized|auto" /* the order of bk_attention_mode (model/backend.h) */
/* [model] family: the block (model/gpt.h) */
typedef enum bk_model_family { BK_FAMILY_GPT2 = 0, BK_FAMILY_LLAMA = 1 } bk_model_family;
#define BK_MODEL_FAMILY_CHOICES "gpt2|llama" /* the order of bk_model_family */
#define BK_PRECISION_CHOICES "fp32|bf16" /* the order of bk_precision (model/backend.h) */
#define BK_DATA_FORMAT_CHOICES "text|shards"
#define BK_DATA_SPLIT_CHOICES "documents|tail" /* bk_split_mode's first two (data/split.h) */
#define BK_NONFINITE_CHOICES "stop|skip"
/* [attention] learn_weights: a boolean (false, true = "per_term") or one of these words; stored as a
 * bk_learn_weights. */
#define BK_LEARN_WEIGHTS_CHOICES "per_term|per_head"

typedef enum bk_stream { BK_STREAM_TOKEN = 0, BK_STREAM_SEGMENT = 1 } bk_stream;
#define BK_STREAM_COUNT 2
typedef enum bk_mixing { BK_MIX_SUM = 0, BK_MIX_KERNEL = 1 } bk_mixing;
/* Which table terms' mixing weights train by default (a term's learn_weight and weight_per_head keys
 * override it): none (false), each term one weight shared by its heads (true, "per_term"), or each
 * term one weight per head ("per_head"). */
typedef enum bk_learn_weights { BK_LEARN_NONE = 0, BK_LEARN_PER_TERM = 1, BK_LEARN_PER_HEAD = 2 } bk_learn_weights;
/* auto: cuda when a GPU answers (cuda/device.h), else cpu; emulated: the CUDA backend's code run on the host
 * (model/backend.h), slow, for testing the device code paths without a GPU. */
typedef enum bk_device_choice {
    BK_DEVICE_AUTO = 0,
    BK_DEVICE_CPU = 1,
    BK_DEVICE_CUDA = 2,
    BK_DEVICE_EMULATED = 3
} bk_device_choice;
typedef enum bk_nonfinite { BK_NONFINITE_STOP = 0, BK_NONFINITE_SKIP = 1 } bk_nonfinite;
/* The longest [[term]] name (the label keeps room for a "#k" suffix). */
#define BK_TERM_NAME_MAX 48
/* The largest AdamW weight decay: [train] weight_decay, a [[term]]'s weight_decay and a plugin's
 * param_group() alike; the largest lr_scale of a term's tensors (lr x lr_scale is their rate). */
#define BK_WEIGHT_DECAY_MAX 10.0
#define BK_LR_SCALE_MAX 1000.0
/* [train] nonfinite = "skip": the run stops after this many skipped steps in a row. */
#define BK_NONFINITE_MAX_SKIPS 10
#define BK_NONFINITE_MAX_SKIPS_TEXT "10"

/* The keys of a [[term]] table that belong to the engine; every other key is a plugin option. */
#define BK_TERM_KEYS_TEXT                                                                                    \
    "plugin, name, stream, weight, per_layer, learn_weight, weight_per_head, lr_scale, weight_decay, layers"
int bk_term_key_is_reserved(const char *key);

typedef struct bk_term_config {
    const char *plugin;         /* name or path of the plugin */
    const char *name;           /* the `name` key, or NULL (the term then takes its plugin's name) */
    bk_stream stream;           /* position stream of the term */
    int stream_set;             /* 1 when the file gives `stream` (else the engine picks the default) */
    double weight;              /* mixing weight; NAN when not given (the mixer picks the default) */
    int per_layer;              /* 1, 0, or -1 when not given (the plugin's default applies) */
    int learn_weight;           /* 1, 0, or -1 when not given ([attention] learn_weights applies) */
    int weight_per_head;        /* 1, 0, or -1 when not given ([attention] learn_weights applies) */
    /* The optimizer's treatment of the term's parameters, or NULL when not given: a number (every
     * tensor of the term) or a table {tensor = number} (lr_scale.slope = 0.5); values checked finite and
     * >= 0 here, tensor names when the plugin is loaded (bias/terms.c). */
    const bk_toml_node *lr_scale, *weight_decay;
    /* The layers the term acts in (`layers`: a list of layer indices or a pattern, bk_term_layers), or NULL:
     * every layer. */
    const bk_toml_node *layers;
    const bk_toml_node *table;  /* the whole [[term]] table, plugin options included */
    bk_toml_pos pos;            /* position of the table */
    int index;                  /* 1-based position among the [[term]] tables */
} bk_term_config;

/* A list of strings from the file: a TOML array of strings, or one string (a list of one). The
 * strings belong to the document. */
typedef struct bk_string_list {
    const char **items;
    int n;
} bk_string_list;

typedef struct bk_experiment {
    bk_toml *doc;
    char *path;
    struct {
        int64_t layers, heads, dim, vocab;
        int64_t family;   /* bk_model_family: BK_MODEL_FAMILY_CHOICES */
        int64_t kv_heads; /* key/value heads (llama; 0: heads) */
        int64_t head_dim; /* width of a head (llama; 0: dim / heads) */
        int64_t ffn_dim;  /* the MLP's hidden width (0: 4 dim for gpt2; llama: required) */
        double norm_eps;  /* RMSNorm's epsilon (llama) */
        int64_t tied;     /* the output head is the token embedding (llama; gpt2 always) */
        int64_t qk_norm;  /* llama: RMSNorm of each query and key head (bk_gpt.qk_norm) */
    } model;
    struct {
        int64_t mixing; /* bk_mixing */
        int learn_weights; /* bk_learn_weights */
    } attention;
    struct {
        int64_t length;
        int64_t seed;
        int64_t batch;          /* sequences per micro-batch */
        int64_t accumulate;     /* micro-batches per optimizer step */
        int64_t steps;          /* optimizer steps */
        double lr;              /* peak learning rate */
        double final_lr;        /* learning rate at the end of the cosine, as a fraction of lr */
        int64_t warmup;         /* linear warm-up steps */
        double weight_decay;    /* decoupled (AdamW) */
        double beta1, beta2, eps;
        double grad_clip;       /* global L2 norm; 0 = off */
        int decay_all;          /* also decay norms, biases, plugin parameters and mixing weights */
        int64_t eval_every;     /* steps between validations; 0 = only at the end */
        int64_t eval_batches;   /* validation micro-batches per validation */
        int64_t checkpoint_every; /* steps between checkpoints; 0 = only at the end */
        int64_t log_every;      /* steps between log lines */
        int64_t nonfinite;      /* bk_nonfinite: a non-finite loss or gradient norm stops the run or skips the step */
        const char *init;       /* a checkpoint whose weights start the training (train/init.h); "" = none */
        bk_string_list trainable; /* shell globs of the tensors that train (none: every tensor) */
    } train;
    struct {
        int64_t format;         /* bk_data_format: BK_DATA_FORMAT_CHOICES */
        bk_string_list paths;
        bk_string_list val_paths;
        double val_fraction;
        int64_t split;          /* BK_DATA_SPLIT_CHOICES */
        int64_t split_seed;
        bk_string_list extensions;
        int64_t max_bytes;
    } data;
    struct {
        int64_t device;         /* bk_device_choice */
        int64_t matmul;         /* bk_matmul_mode (model/backend.h): BK_MATMUL_CHOICES */
        int64_t attention;      /* bk_attention_mode (model/backend.h): BK_ATTENTION_CHOICES */
        int64_t precision;      /* bk_precision (model/backend.h): BK_PRECISION_CHOICES; "bf16" makes matmul
                                   "bf16" (validated: with another matmul or attention it is an error) */
        int64_t recompute;      /* 1: a training forward keeps each layer's input only (bk_gpt.recompute) */
        const char *out_dir;    /* "" = runs/<experiment file name without .toml> */
        int64_t threads;        /* 0 = every core */
        int64_t gpu;            /* the CUDA device index; -1 (BK_CUDA_GPU_AUTO of cuda/policy.h) = from the
                                   local rank */
    } run;
    bk_term_config *terms;
    int n_terms;
} bk_experiment;

/* Load and validate an experiment file, applying `n_overrides` "--set key=value" assignments
 * (section.key=value, term.N.key=value with N counted from 0) before validation. */
int bk_experiment_load(const char *path, const char *const *overrides, size_t n_overrides,
                       bk_experiment *out, bk_error *err);
/* The same from text (tests); `source_name` appears in error positions. */
int bk_experiment_parse(const char *text, const char *source_name, const char *const *overrides,
                        size_t n_overrides, bk_experiment *out, bk_error *err);
void bk_experiment_free(bk_experiment *exp);

/* Print the schema (every section, key, type, default and doc) to `f` (a FILE*). */
void bk_experiment_print_keys(void *f);
/* Print every engine value of `exp` as TOML, section by section, to `f` (a FILE*). */
void bk_experiment_print_values(const bk_experiment *exp, void *f);

/* Fail with "SOURCE:LINE:COL: " + message (position omitted when unknown). */
int bk_fail_at(bk_error *err, int code, bk_toml_pos pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Index of `value` in a choice list "a|b|c", or -1. */
int bk_choice_index(const char *choices, const char *value);
/* The name of choice `index` of "a|b|c" into buf ("?" when out of range); returns buf. */
const char *bk_choice_name(const char *choices, int64_t index, char *buf, size_t size);
/* "a, b, c" for a choice list "a|b|c". */
void bk_choices_text(const char *choices, char *buf, size_t size);

/* The candidate closest to `word` by edit distance if it is close enough to be a likely typo,
 * else NULL ("did you mean 'heads'?"). */
const char *bk_closest_word(const char *word, const char *const *candidates, size_t n);

/* What a key is to a model already trained: a checkpoint's experiment changed by --set (eval, bias,
 * erf, train --resume; train/checkpoint.h says what each command lets change). One rule, here:
 *   [data], [run]                      what the model reads and where it runs          BK_KEY_RUN
 *   [train] length, batch, accumulate, how the stored model was trained (they also      BK_KEY_FACT
 *           seed, init                 place a resumed run's data cursor)
 *   [train] every other key            the training still to come (steps, lr, ...)     BK_KEY_SCHEDULE
 *   [model], [attention], the [[term]]  the model's shape and function                 BK_KEY_MODEL
 *           list and its engine keys
 *   a plugin's own option in a [[term]] the plugin's math, which only it knows          BK_KEY_OPTION */
typedef enum bk_key_role { BK_KEY_RUN, BK_KEY_FACT, BK_KEY_SCHEDULE, BK_KEY_MODEL, BK_KEY_OPTION } bk_key_role;

/* The role of engine key [section] key (BK_KEY_RUN for a key the schema does not have). */
bk_key_role bk_experiment_key_role(const char *section, const char *key);

/* One key whose value differs between two experiments. */
typedef struct bk_experiment_change {
    bk_key_role role;
    char key[96];   /* as --set spells it: "model.heads", "term.0.slope_scale"; "term" for the number of terms */
    char where[96]; /* as messages name it: "[model] heads", "[[term]] #1 (alibi) option 'slope_scale'" */
    char before[96], after[96]; /* the values as TOML writes them ("2", "\"sum\""), or "not set" */
} bk_experiment_change;

/* Compares every engine value and every [[term]] (engine keys and plugin options) of `a` and `b`:
 * writes the first `cap` differences to `out` in schema order, then the terms, and returns how many
 * there are. */
int bk_experiment_diff(const bk_experiment *a, const bk_experiment *b, bk_experiment_change *out, int cap);

/* Width of one attention head: [model] head_dim, else dim / heads (validated to divide exactly). */
static inline int64_t bk_experiment_head_dim(const bk_experiment *exp)
{
    return exp->model.head_dim ? exp->model.head_dim : exp->model.dim / exp->model.heads;
}

/* Key/value heads: [model] kv_heads, else heads. */
static inline int64_t bk_experiment_kv_heads(const bk_experiment *exp)
{
    return exp->model.kv_heads ? exp->model.kv_heads : exp->model.heads;
}

/* A TOML value as the file would write it (strings quoted, floats in their shortest exact form with
 * ".0" on whole numbers, arrays and inline tables), truncated to buf[size]. */
void bk_toml_value_text(const bk_toml_node *node, char *buf, size_t size);
/* A double as TOML reads it back to the same bits (the shortest of 6 to 17 digits, ".0" on whole numbers). */
void bk_double_text(double v, char *buf, size_t size);
/* A TOML basic string: `text` in quotes, '"' and '\\' escaped. */
void bk_string_text(const char *text, char *buf, size_t size);

/* The layers term `t` acts in, of n_layers: on[l] = 1 or 0 for each (on may be NULL: only checked). `layers`
 * is a list of distinct layer indices in [0, n_layers) or a pattern string: "all", "every N from K" (K, K + N,
 * ...), "except every N from K" (the others), "first N", "last N" (N >= 1, K >= 0). Errors (BK_ERR_CONFIG,
 * at the value's file:line:col): a wrong type, a layer that does not exist, a repeated layer, a pattern that
 * is not one of those, one that selects no layer. Without the key every layer is on. */
int bk_term_layers(const bk_term_config *t, int64_t n_layers, unsigned char *on, bk_error *err);

#endif
