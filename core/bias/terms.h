/* The positional terms of an experiment: one plugin instance per [[term]], its parameters (one copy,
 * or one per layer), and the tables they produce.
 *
 * What a term does follows from its plugin's capabilities (docs/design.md §2.3):
 *   table    a distance table on the term's stream, mixed with the other table terms of that stream;
 *   segment  the segmenter of the model: token ids -> (segment index, position in segment), which is
 *            what the `segment` stream reads (at most one such term; its stream defaults to segment);
 *   embed    an absolute embedding added at the input, indexed by the term's stream: the token index
 *            on `token`, the position inside the segment on `segment`;
 *   rotary   RoPE on q and k by the term's stream positions (at most one such term);
 * and, in ABI 2 (plugin.h, "Beyond distance tables"; bias/query.h), on the token index only:
 *   coordinate  a table over u(i, d) in [0, 1], interpolated by the attention (at most one);
 *   mask        window and sinks: -inf outside (at most one);
 *   scale       a per-head, per-query factor on q.k / sqrt(d_head) (at most one);
 *   content     a position advanced by steps computed from each layer's input (at most one; bias/content.h);
 *   count       positions counted by gates on q.k, read from learned vectors (CoPE; at most one).
 * Only table terms take `weight`, `learn_weight` and `weight_per_head`; table, coordinate and scale
 * terms take `per_layer` (they act inside every layer's attention); the others act once, at the input,
 * on q and k, or as a mask. Coordinate, mask and scale terms are not mixed: they act on the score after
 * the mixed tables. Terms with parameters take `lr_scale` and `weight_decay` (parameter groups: the
 * [[term]] keys, else the plugin's param_group() declaration, else lr x 1 and the engine's decay rule). */
#ifndef BK_TERMS_H
#define BK_TERMS_H

#include "config/experiment.h"
#include "plugin/host.h"
#include "plugin/services.h"

/* Most named tensors read from one plugin's param_tensors(). */
#define BK_TERM_MAX_TENSORS 256

/* How the optimizer trains one tensor of a term's parameters (each copy of it, when per layer). */
typedef struct bk_term_group {
    char name[72];          /* the tensor's name in param_tensors(), or "theta" (the whole vector) */
    int64_t offset, count;  /* its values inside one copy of theta */
    double lr_scale;        /* finite, >= 0: [train] lr x lr_scale */
    double weight_decay;    /* finite, >= 0; or BIASKIT_WEIGHT_DECAY_DEFAULT: the engine's rule ([train]
                             * weight_decay with decay_all, else none) */
} bk_term_group;

typedef struct bk_term {
    const bk_plugin *plugin;
    biaskit_config view; /* the plugin reads its options through this */
    void *instance;
    char label[64];      /* the term's name */
    int index;           /* 1-based [[term]] position */
    int32_t n_heads;     /* rows of the term's tables */
    bk_stream stream;
    uint32_t caps;       /* the plugin's BIASKIT_CAP_* */
    double weight;       /* mixing weight (table terms), completed by bk_mix_weights; with head_weights,
                          * their mean (what logs and reports show for the term) */
    int learn_weight;    /* table terms: the mixing weight trains (learn_weight, else [attention]) */
    int weight_per_head; /* ... one weight per head (weight_per_head, else learn_weights = "per_head") */
    double *head_weights;/* n_heads weights when the weights of the term's stream are per head (some table
                          * term on it has weight_per_head; bk_term_weight_at reads them), else NULL */
    int per_layer;
    int64_t n_params;    /* floats per copy */
    int n_copies;        /* n_layers when per_layer, else 1 */
    float *theta;        /* n_copies * n_params, initialised and projected */
    bk_term_group *groups; /* n_groups tensors tiling one copy of theta, in offset order (n_params > 0) */
    int n_groups;
    /* The layers the term acts in ([[term]] layers, bk_term_layers): layers_on[l] for each layer, or NULL
     * (every layer). Terms that act inside the attention or on q and k only (not an embedding or the
     * segmenter). */
    unsigned char *layers_on;
} bk_term;

typedef struct bk_term_set {
    bk_term *terms;
    int n;
    bk_mixing mixing;
    biaskit_geometry geometry;
    int segmenter;       /* index of the term whose plugin segments, or -1 */
    int rotary;          /* index of the rotary term, or -1 */
    int coordinate;      /* index of the coordinate-table term, or -1 */
    int mask;            /* index of the masking term, or -1 */
    int scale;           /* index of the logit-scale term, or -1 */
    int content;         /* index of the content-position term, or -1 */
    int count;           /* index of the counted-positions term (CoPE), or -1 */
} bk_term_set;

/* 1 when `term` contributes a distance table on its stream. */
static inline int bk_term_has_table(const bk_term *term)
{
    return (term->caps & BIASKIT_CAP_TABLE) != 0;
}

/* The mixing weight of `term` for head h. */
static inline double bk_term_weight_at(const bk_term *term, int32_t h)
{
    return term->head_weights ? term->head_weights[h] : term->weight;
}

/* 1 when `term` acts inside every layer's attention with its own values per layer when per_layer
 * (a distance table, a coordinate table, a logit scale, a content position or counted positions). */
static inline int bk_term_in_attention(const bk_term *term)
{
    return (term->caps & (BIASKIT_CAP_TABLE | BIASKIT_CAP_COORDINATE | BIASKIT_CAP_SCALE | BIASKIT_CAP_CONTENT |
                          BIASKIT_CAP_COUNT)) != 0;
}

/* 1 when `term` acts in layer `layer` ([[term]] layers); layer -1 (not a layer's call) counts as in. */
static inline int bk_term_on_layer(const bk_term *term, int layer)
{
    return !term->layers_on || layer < 0 || term->layers_on[layer];
}

/* 1 when the experiment's mask acts in `layer`: it has no masking term (then the mask is none anyway) or
 * its masking term acts there ([[term]] layers). */
static inline int bk_mask_on_layer(const bk_term_set *set, int layer)
{
    return set->mask < 0 || bk_term_on_layer(&set->terms[set->mask], layer);
}

/* The context of a call into `term`'s plugin (plugin.h, biaskit_context): `layer` -1 for a value shared
 * by every layer; `length` the sequence length of the call. */
biaskit_context bk_term_context(const bk_term_set *set, int layer, int32_t length, int training);
/* The same from a geometry alone (what a set's context reads). */
biaskit_context bk_term_context_of(const biaskit_geometry *geo, int layer, int32_t length, int training);

/* Load each term's plugin from `reg`, check its options, create its instance, allocate and
 * initialise its parameters (seeded from [train] seed, the term and the layer), project them, and
 * complete the mixing weights per stream. Every error names the term and its position. */
int bk_terms_create(bk_term_set *set, const bk_experiment *exp, bk_registry *reg, bk_error *err);

/* BK_OK unless the set's masking term gives a distance cap > 0 while no term has a distance table to
 * cap: then BK_ERR_CONFIG naming the term, at *pos when pos is not NULL. */
int bk_terms_refuse_idle_cap(const bk_term_set *set, int32_t cap, const bk_toml_pos *pos, bk_error *err);
void bk_terms_free(bk_term_set *set);

/* The named tensors of `term` (its plugin's param_tensors()) into info[BK_TERM_MAX_TENSORS] when they
 * tile one copy of theta exactly (each value in one tensor, names unique and usable in a tensor name:
 * at most 64 characters, no '"', not "theta"); returns how many, or 0 otherwise (the term's theta is
 * then one tensor, "theta": checkpoints store it whole). */
int32_t bk_term_tensors(const bk_term *term, biaskit_tensor_info *info);

/* Parameters of `term` used by `layer`. NULL when the term has none. */
float *bk_term_theta(const bk_term *term, int layer);

/* Host table of one term for one layer: table[h * distances + d]; rejects non-finite values with a
 * message naming the plugin, head and distance. */
int bk_term_table(const bk_term *term, int layer, int32_t distances, float *table, bk_error *err);

/* The same inside a training step, for the messages: `layer` is named unless it is -1 (a table shared
 * by every layer), `step` unless it is 0; `check` = 0 skips the finiteness check (benchmarks only). */
int bk_term_table_at(const bk_term *term, int layer, int64_t step, int check, int32_t distances, float *table,
                     bk_error *err);

/* A plugin's failed call as an engine error: "term 'T' (plugin P, FILE) at layer L, step S: hook() failed:
 * <the plugin's message>" with the plugin's code (BK_ERR_PLUGIN when it gave none); layer -1 and step 0
 * are left out. Returns the code. */
int bk_term_plugin_failed(bk_error *err, const bk_term *t, const char *hook, int layer, int64_t step,
                          const biaskit_error *pe);

/* " at layer 2, step 3" (the parts that are set: layer >= 0, step > 0) into buf; returns buf. */
const char *bk_term_where(int layer, int64_t step, char *buf, size_t size);

/* The plugin call in progress, kept so that a crash inside a plugin can be reported (train.c's fatal
 * signal handler). Enter before calling a plugin hook, leave after it returns; `hook` is a string
 * literal such as "table()", `layer` -1 and `step` 0 when they do not apply. Calls are not nested. */
void bk_plugin_call_enter(const bk_term *term, const char *hook, int layer, int64_t step);
void bk_plugin_call_leave(void);
/* Async-signal-safe: writes "plugin P (term 'T', hook(), layer L, step S)" into buf (at most size - 1
 * bytes, terminated) when a call is in progress and returns its length; else returns 0. */
size_t bk_plugin_call_describe(char *buf, size_t size);

/* The mixed table of every term on `stream` for `layer` (n_heads * distances floats), with the terms'
 * current weights (per head where the stream's are). *n_terms is set to the number of terms on the
 * stream; with none, the table is all zeros. */
int bk_terms_mixed_table(const bk_term_set *set, int layer, bk_stream stream, int32_t distances, float *out,
                         int *n_terms, bk_error *err);

/* Table of one term for one layer computed on the GPU with the plugin's table_cuda and copied back
 * into host memory `table`; a plugin without device code gets its host table (the engine's
 * fallback). The caller checks first that a GPU answers (bk_device_probe). */
int bk_term_table_cuda(const bk_term *term, int layer, int32_t distances, float *table, bk_error *err);

#endif
