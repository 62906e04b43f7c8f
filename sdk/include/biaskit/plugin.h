/*
 * biaskit plugin SDK, ABI version 2 (ABI 1 plus appended fields: a plugin built for ABI 1 loads unchanged).
 *
 * A plugin is a shared object that exports one function, `biaskit_plugin_entry`, returning a
 * pointer to a static `biaskit_plugin` descriptor. The engine loads it with dlopen(), checks the
 * descriptor's ABI version and size, and from then on talks to it only through the descriptor's
 * function pointers. The plugin never links the engine: everything it needs from the host (reading
 * its options from the experiment file, logging, reporting errors) arrives as a table of function
 * pointers, `biaskit_services`, handed to create() and valid until destroy(): a plugin keeps it in its
 * instance and calls it from every hook (table() included).
 *
 * The math contract. For query token i and key token j <= i of head h,
 *
 *     score[h,i,j] = q_i . k_j / sqrt(d_head) + Bias[h, i, j]
 *     Bias[h,i,j]  = mix over terms t of T_t[h, p_t(i) - p_t(j)]
 *
 * A plugin with BIASKIT_CAP_TABLE computes the distance table T[h][d] for d = 0 .. D-1 from its
 * parameters theta alone. The bias is added after the 1/sqrt(d_head) scale and before the causal
 * mask and softmax. The engine never asks a plugin for a T x T matrix.
 *
 * Growing the ABI: fields are only ever appended to the structs below. Every struct starts with
 * `struct_size`, set to sizeof() as the side that filled it was compiled; the reader looks only at
 * fields that lie inside that size (BIASKIT_HAS_FIELD). Appending fields raises BIASKIT_ABI_VERSION;
 * the host loads plugins built for any version from BIASKIT_ABI_VERSION_MIN to its own and refuses a
 * newer one. A change that breaks old plugins would raise BIASKIT_ABI_VERSION_MIN too.
 *
 * This header is plain C11 (also valid C++ and CUDA C++) and depends on nothing but the C library.
 */
#ifndef BIASKIT_PLUGIN_H
#define BIASKIT_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Versions, export and host/device macros
 * ------------------------------------------------------------------------------------------- */

/* The ABI a plugin is compiled against. ABI 2 only appended fields to ABI 1's structs, so the host
 * loads plugins of every version from BIASKIT_ABI_VERSION_MIN to its own; a plugin built for a newer
 * ABI is refused. */
#define BIASKIT_ABI_VERSION 2u
#define BIASKIT_ABI_VERSION_MIN 1u

/* Name of the one symbol every plugin exports. */
#define BIASKIT_ENTRY_SYMBOL "biaskit_plugin_entry"

#if defined(_WIN32)
#define BIASKIT_EXPORT __declspec(dllexport)
#else
#define BIASKIT_EXPORT __attribute__((visibility("default")))
#endif

/* Marks a per-element formula that both the host loop and the CUDA kernel call, so that each
 * formula is written exactly once:   static inline BIASKIT_HD float my_bias(float a, int32_t d)  */
#if defined(__CUDACC__)
#define BIASKIT_HD __host__ __device__
#else
#define BIASKIT_HD
#endif

/* True when a descriptor (or any struct of this header) that was filled by the other side is large
 * enough to contain `field`. */
#define BIASKIT_HAS_FIELD(ptr, type, field) \
    ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type *)0)->field))

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */

typedef enum biaskit_status {
    BIASKIT_OK = 0,
    BIASKIT_ERR_CONFIG = 1,      /* an option value is wrong (type, range, length) */
    BIASKIT_ERR_INVALID = 2,     /* a call's arguments are wrong (e.g. distances <= 0) */
    BIASKIT_ERR_NOMEM = 3,       /* an allocation failed */
    BIASKIT_ERR_UNSUPPORTED = 4, /* the plugin cannot do what was asked (capability missing) */
    BIASKIT_ERR_DEVICE = 5,      /* a CUDA call failed */
    BIASKIT_ERR_INTERNAL = 6     /* anything else */
} biaskit_status;

#define BIASKIT_ERROR_MESSAGE_MAX 512

/* Every fallible call takes one of these. On failure the callee sets `code` and writes a one-line
 * human-readable `message` (what was wrong and what was expected; no trailing newline) and returns
 * the same code. The host prefixes the plugin's name and the configuration file position. */
typedef struct biaskit_error {
    int code;
    char message[BIASKIT_ERROR_MESSAGE_MAX];
} biaskit_error;

/* ---------------------------------------------------------------------------------------------
 * Options: what a plugin can be configured with in the experiment file
 * ------------------------------------------------------------------------------------------- */

typedef enum biaskit_option_type {
    BIASKIT_OPT_BOOL = 1,
    BIASKIT_OPT_INT = 2,
    BIASKIT_OPT_DOUBLE = 3,       /* an integer literal is accepted too */
    BIASKIT_OPT_STRING = 4,
    BIASKIT_OPT_DOUBLE_ARRAY = 5, /* default: empty */
    BIASKIT_OPT_STRING_ARRAY = 6  /* default: empty */
} biaskit_option_type;

/* One option of a plugin. The host checks every key of a term's table against this list before
 * create() is called: an unknown key or a value of the wrong type is reported with its file, line
 * and column, and never reaches the plugin. `biaskit plugins` prints the list. */
typedef struct biaskit_option {
    const char *name;           /* TOML key: [a-z0-9_]+, not one of the engine's term keys */
    biaskit_option_type type;
    double default_number;      /* default of BOOL (0/1), INT and DOUBLE options */
    const char *default_string; /* default of STRING options */
    const char *choices;        /* STRING options: "a|b|c" restricts the value to these; or NULL */
    const char *doc;            /* one line shown by `biaskit plugins` */
} biaskit_option;

/* Convenience initialisers for option tables. */
#define BIASKIT_OPTION_BOOL(name, def, doc) {(name), BIASKIT_OPT_BOOL, (def) ? 1.0 : 0.0, NULL, NULL, (doc)}
#define BIASKIT_OPTION_INT(name, def, doc) {(name), BIASKIT_OPT_INT, (double)(def), NULL, NULL, (doc)}
#define BIASKIT_OPTION_DOUBLE(name, def, doc) {(name), BIASKIT_OPT_DOUBLE, (def), NULL, NULL, (doc)}
#define BIASKIT_OPTION_STRING(name, def, doc) {(name), BIASKIT_OPT_STRING, 0.0, (def), NULL, (doc)}
#define BIASKIT_OPTION_CHOICE(name, def, choices, doc) {(name), BIASKIT_OPT_STRING, 0.0, (def), (choices), (doc)}
#define BIASKIT_OPTION_DOUBLE_ARRAY(name, doc) {(name), BIASKIT_OPT_DOUBLE_ARRAY, 0.0, NULL, NULL, (doc)}
#define BIASKIT_OPTION_STRING_ARRAY(name, doc) {(name), BIASKIT_OPT_STRING_ARRAY, 0.0, NULL, NULL, (doc)}

/* ---------------------------------------------------------------------------------------------
 * Host services
 * ------------------------------------------------------------------------------------------- */

/* Opaque view of one term's table in the experiment file, valid until the instance is destroyed. */
typedef struct biaskit_config biaskit_config;

typedef enum biaskit_log_level {
    BIASKIT_LOG_ERROR = 0,
    BIASKIT_LOG_WARN = 1,
    BIASKIT_LOG_INFO = 2,
    BIASKIT_LOG_DEBUG = 3
} biaskit_log_level;

/* Functions the host gives a plugin. Never NULL for fields inside struct_size. */
typedef struct biaskit_services {
    uint32_t struct_size;
    uint32_t abi_version; /* the host's BIASKIT_ABI_VERSION */

    /* Typed option reads. `key` must be one of the plugin's declared options of that type: the value
     * from the experiment file, else the declared default. Types were checked before create(), so
     * these fail only for an undeclared key or a type that differs from the declaration (a plugin
     * bug), with a message naming the key. */
    int (*get_bool)(const biaskit_config *cfg, const char *key, int *out, biaskit_error *err);
    int (*get_int)(const biaskit_config *cfg, const char *key, int64_t *out, biaskit_error *err);
    int (*get_double)(const biaskit_config *cfg, const char *key, double *out, biaskit_error *err);
    /* The string stays valid until destroy(). */
    int (*get_string)(const biaskit_config *cfg, const char *key, const char **out, biaskit_error *err);
    /* Writes at most `capacity` values and sets *count to the array's length; an array longer than
     * `capacity` is a BIASKIT_ERR_CONFIG error naming the key and its position. */
    int (*get_double_array)(const biaskit_config *cfg, const char *key, double *out, int32_t capacity,
                            int32_t *count, biaskit_error *err);
    int (*get_string_array)(const biaskit_config *cfg, const char *key, const char **out,
                            int32_t capacity, int32_t *count, biaskit_error *err);
    /* 1 when the experiment file sets `key` explicitly, 0 when the default applies. */
    int (*is_set)(const biaskit_config *cfg, const char *key);

    /* Report a bad option value: formats the message, prefixed with the file:line:column of `key`
     * (or of the term when the key is not set), stores it in `err` with BIASKIT_ERR_CONFIG and
     * returns BIASKIT_ERR_CONFIG.      return svc->config_error(cfg, "slopes", err, "...", ...); */
    int (*config_error)(const biaskit_config *cfg, const char *key, biaskit_error *err,
                        const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 4, 5)))
#endif
        ;
    /* Any other error: formats the message into `err`, sets `code`, returns `code`. */
    int (*error)(biaskit_error *err, int code, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;
    /* A log line, shown according to the user's verbosity; `plugin` is the plugin's name. */
    void (*log)(int level, const char *plugin, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;
} biaskit_services;

/* ---------------------------------------------------------------------------------------------
 * What the model looks like, handed to create()
 * ------------------------------------------------------------------------------------------- */

typedef struct biaskit_geometry {
    uint32_t struct_size;
    int32_t n_layers;
    int32_t n_heads;
    int32_t d_model;
    int32_t d_head;
    int32_t vocab_size;
    int32_t train_length; /* training context length in tokens */
} biaskit_geometry;

/* One named tensor inside a plugin's parameter vector theta (for checkpoints and listings). */
typedef struct biaskit_tensor_info {
    const char *name; /* e.g. "r1"; unique within the plugin */
    int64_t offset;   /* first element inside theta */
    int32_t rows;     /* shape rows x cols; a vector has cols = 1 */
    int32_t cols;
} biaskit_tensor_info;

/* ---------------------------------------------------------------------------------------------
 * Capabilities and flags
 * ------------------------------------------------------------------------------------------- */

enum {
    BIASKIT_CAP_TABLE = 1u << 0,   /* table / table_backward: a distance table T[h][d] */
    BIASKIT_CAP_SEGMENT = 1u << 1, /* segment: token ids -> (segment index, position in segment) */
    BIASKIT_CAP_EMBED = 1u << 2,   /* embed / embed_backward: absolute embedding added at the input */
    BIASKIT_CAP_ROTARY = 1u << 3,  /* rotary_frequencies: RoPE on q and k */
    BIASKIT_CAP_WEIGHT = 1u << 4,  /* reserved: multiplicative distance kernel on q.k (not implemented) */
    /* ABI 2 (see "Beyond distance tables" below) */
    BIASKIT_CAP_COORDINATE = 1u << 5, /* table over a coordinate u(i, d) in [0, 1]; coordinate() */
    BIASKIT_CAP_MASK = 1u << 6,       /* mask(): exact -inf outside a window, with sinks */
    BIASKIT_CAP_SCALE = 1u << 7,      /* scale(): per-head, per-query factor on q.k / sqrt(d_head) */
    BIASKIT_CAP_CONTENT = 1u << 8,    /* content(): a position that advances by steps computed from the content */
    BIASKIT_CAP_COUNT = 1u << 9       /* count(): contextual positions counted by gates on q.k (CoPE) */
};

enum {
    /* Parameters are per layer unless the term says otherwise (default: shared across layers). */
    BIASKIT_FLAG_PER_LAYER = 1u << 0
};

/* ---------------------------------------------------------------------------------------------
 * ABI 2: context, and biases beyond distance tables
 *
 * The contract grows to
 *
 *     score[h,i,j] = s_h(i) * q_i . k_j / sqrt(d_head) + Bias[h,i,j]      (-inf where a mask says so)
 *     Bias[h,i,j]  = mix of distance tables T_t[h, p_t(i) - p_t(j)]      (ABI 1)
 *                  + F[h](u(i, d)),  u(i, d) = phi(d) * rscale(i)         (BIASKIT_CAP_COORDINATE)
 *
 * with i, j the 0-based token indices inside the sequence and d = i - j:
 *  - COORDINATE: the plugin's table() is over a grid of `points` values of u (coordinate_points()):
 *    table[h * points + g] = F_h(g / (points - 1)); the attention interpolates it linearly at
 *    u(i, d). coordinate() gives the two factors of u: phi[d] for d < distances (>= 0, non-decreasing
 *    in d) and rscale[i] for i < rows (>= 0), such that u(i, i) = phi[i] * rscale[i] <= 1 (up to float
 *    rounding: the engine allows 1e-5 and clamps u to [0, 1]). The engine checks both. The gradient comes back as dL/dF (table_backward, over the grid) and as dL/dphi and
 *    dL/drscale (coordinate_backward). Example: FIRE, phi(d) = log(c d + 1), rscale(i) =
 *    1 / log(c max(i, L) + 1).
 *  - MASK: mask() describes which keys a query sees: the key j is visible to query i when
 *    i - j < window (the query and the window - 1 keys before it) or j < sinks. A masked score is
 *    exactly -inf, whatever the other terms add; the kernels skip key tiles that are masked
 *    entirely. At most one masking term per experiment.
 *  - SCALE: scale() gives s_h(i) for h < n_heads, i < rows: scale[h * rows + i]. It multiplies
 *    q.k / sqrt(d_head) only, not the additive biases. Its gradient dL/ds comes back to
 *    scale_backward(). At most one scaling term per experiment.
 *  - CONTENT: a position computed from the content (the Forgetting Transformer's forget gate). content()
 *    reads the layer's attention input x (count tokens x d_model, row n = token n: the first LayerNorm's
 *    output, what the q/k/v projection reads) and writes every token's step a[n * n_heads + h], finite
 *    and >= 0. The engine sums the steps along each sequence into the position P_h(t) = a_h(0) + ... +
 *    a_h(t) (every sequence starts afresh) and adds
 *        Bias[h,i,j] += -(P_h(i) - P_h(j)) = -(a_h(j+1) + ... + a_h(i))        (0 on the diagonal)
 *    after the 1/sqrt(d_head) scale: distance on a time axis that the content stretches, read by a
 *    linear table of slope -1 (a plugin that wants another slope puts it in its steps). The
 *    Forgetting Transformer: a_h(t) = -log sigmoid(w_h . x_t + b_h) >= 0. The gradient comes back as
 *    dL/da to content_backward(), which adds the parameters' gradient into dtheta and the input's into
 *    dx. The attention keeps T floats per sequence and head for it, never a T x T array. The steps
 *    depend on the tokens, so content() is called in every forward of every layer (with the layer's
 *    copy of theta for a per-layer term), not once per length. At most one content term per experiment.
 *  - COUNT: contextual positions (CoPE). The position of key j seen from query i counts the keys from j
 *    to i that the query's gates open, and reads learned position vectors e_0 .. e_{points-1} (d_head
 *    floats each) at that fractional position:
 *        g_it = sigmoid(q_i . k_t / sqrt(d_head)),   p_ij = min(g_ij + ... + g_ii, points - 1)
 *        Bias[h,i,j] += pos_scale * ((1 - w) q_i . e_floor(p) + w q_i . e_ceil(p)),   w = p - floor(p)
 *    with the sums over the keys query i sees (a masked key has no gate), q and k the head's own (after
 *    any rotation) and the gate read before any logit scale. count() gives `points` (>= 2) and
 *    `pos_scale`; count_vectors() the vectors E[k * d_head + c] (one set per layer copy, shared by the
 *    heads); the gradient comes back as dL/dE to count_vectors_backward(), and through the gates and
 *    q . e to q and k inside the attention. The attention computes the gates of every visible pair: a
 *    second q.k product per pair in the backward, and points floats per query row.
 *    At most one counting term per experiment.
 * None of these hands a T x T tensor to a plugin: the arrays are O(points), O(distances), O(rows).
 * The engine computes coordinates, masks and scales once per forward for the longest sequence of the
 * call (ctx->length) and reads them for every shorter one: their values should depend on ctx->layer and
 * ctx->training only, not on ctx->length (rotary_ctx is asked again for each length).
 * ------------------------------------------------------------------------------------------- */

/* What the engine is computing when it calls a plugin. */
typedef struct biaskit_context {
    uint32_t struct_size;
    int32_t layer;        /* 0 .. n_layers - 1 for a per-layer value, -1 for one shared by every layer */
    int32_t n_layers;
    int32_t n_heads;
    int32_t length;       /* tokens per sequence in this call: the training window or the evaluated length */
    int32_t train_length; /* the context length the model trains at ([model] context) */
    int32_t training;     /* 1 inside a training step, 0 in evaluation */
} biaskit_context;

/* What a BIASKIT_CAP_MASK term keeps (see above). */
typedef struct biaskit_mask {
    uint32_t struct_size;
    int32_t window;       /* >= 1: keys with i - j < window are visible (FlashAttention's window_size[0]
                           * = window - 1) */
    int32_t sinks;        /* >= 0: the first `sinks` keys are visible to every query after them */
    int32_t distance_cap; /* >= 0: when > 0, the distance tables are read at min(d, distance_cap) (so the
                           * sinks sit at most that far away: LM-Infinite's Lambda-shape); 0: not capped */
} biaskit_mask;

/* What a BIASKIT_CAP_COUNT term counts with (see above; the engine sets struct_size, points = 0 and
 * pos_scale = 1 / sqrt(d_head) first). */
typedef struct biaskit_count {
    uint32_t struct_size;
    int32_t points;   /* >= 2: position vectors e_0 .. e_{points-1}; counts are clamped to points - 1 */
    float pos_scale;  /* finite: the factor on the interpolated q . e (CoPE's reference code: 1/sqrt(d_head)) */
} biaskit_count;

/* One position view of a rotary term's call (rotary_views, appended after rotary_decay): the pairs of
 * query i and key j with min_distance <= i - j < max_distance (max_distance 0: no bound) attend with q_i
 * rotated at position q_pos[i] and k_j at k_pos[j] (in tokens; finite, fractions allowed) instead of
 * both at their token index. The engine gives the buffers (ctx->length values each); the plugin writes
 * the distances and every position. Up to BIASKIT_MAX_ROTARY_VIEWS views. */
#define BIASKIT_MAX_ROTARY_VIEWS 4
typedef struct biaskit_rotary_view {
    int32_t min_distance, max_distance;
    double *q_pos, *k_pos;
} biaskit_rotary_view;

/* How the optimizer treats one of a plugin's tensors (param_group(), appended at the end of the
 * descriptor). The engine fills every field with its default before the call: struct_size, lr_scale = 1,
 * weight_decay = BIASKIT_WEIGHT_DECAY_DEFAULT; a plugin sets only what it wants (and only fields inside
 * struct_size). The experiment file may override both per term or per tensor ([[term]] lr_scale,
 * weight_decay), so these are the plugin's recommendation, not a constraint. */
#define BIASKIT_WEIGHT_DECAY_DEFAULT (-1.0)
typedef struct biaskit_param_group {
    uint32_t struct_size;
    double lr_scale;     /* finite, >= 0: the tensor trains at [train] lr x lr_scale (1: as everything else;
                          * 0: frozen, its Adam moments still updated) */
    double weight_decay; /* finite, >= 0: the tensor's decoupled weight-decay coefficient (AdamW:
                          * p -= lr x lr_scale x weight_decay x p per step), whatever [train] weight_decay
                          * and decay_all say; BIASKIT_WEIGHT_DECAY_DEFAULT: the engine's rule (no decay,
                          * or [train] weight_decay when [train] decay_all = true) */
} biaskit_param_group;

/* What param_info() says about one tensor (appended at the end of the descriptor). The engine fills
 * every field with its default before the call: struct_size, lower = -INFINITY, upper = INFINITY,
 * init = "" (unknown); a plugin sets what it knows, and only fields inside struct_size. */
#define BIASKIT_PARAM_INFO_TEXT_MAX 160
typedef struct biaskit_param_info {
    uint32_t struct_size;
    double lower, upper;                    /* param_project() keeps every element in [lower, upper] */
    char init[BIASKIT_PARAM_INFO_TEXT_MAX]; /* the initial values in words, with the numbers as evaluated:
                                             * "1e-3", "uniform(0.01, 1)", "2^(-8(h+1)/H) x 0.5 (ALiBi)",
                                             * "pow(2, h + 1)"; NUL-terminated */
} biaskit_param_info;

/* ---------------------------------------------------------------------------------------------
 * The descriptor
 * ------------------------------------------------------------------------------------------- */

/* Conventions for every function below:
 *  - `inst` is what create() returned. Calls on one instance are not made concurrently.
 *  - `theta` is the plugin's parameter vector (param_count floats), owned by the engine, which
 *    trains it, checkpoints it and, for per-layer terms, keeps one copy per layer. A plugin with no
 *    parameters gets theta = NULL (host and CUDA variants alike): its fixed values are its own, kept
 *    in the instance, with a device copy for the CUDA variants (biaskit_cuda_upload_once() in
 *    <biaskit/plugin_cuda.h>).
 *  - Gradients accumulate: backward functions add (+=) into their output.
 *  - Return BIASKIT_OK or an error code with `err` filled (see biaskit_error).
 *  - The CUDA variants take device pointers and a cudaStream_t passed as void*; they must only
 *    enqueue work on that stream. They are optional: when NULL the engine calls the host variant and
 *    copies. */
typedef struct biaskit_plugin {
    uint32_t struct_size; /* sizeof(biaskit_plugin) as the plugin was compiled */
    uint32_t abi_version; /* BIASKIT_ABI_VERSION as the plugin was compiled */
    const char *name;     /* [a-z0-9_-]+, unique among loaded plugins; `plugin = "name"` in TOML */
    const char *version;  /* the plugin's own version, free form ("1.0.0") */
    const char *summary;  /* one line: what the scheme is */
    const char *reference;/* the paper or source the formulas come from; may be NULL */
    uint32_t capabilities;/* BIASKIT_CAP_* */
    uint32_t flags;       /* BIASKIT_FLAG_* */
    const biaskit_option *options;
    uint32_t n_options;

    /* Lifecycle. create() reads its options through `svc`, checks them against the geometry and
     * either returns an instance in *out or fails with a message. `svc`, `cfg` and `geo` stay valid
     * until destroy(). */
    int (*create)(const biaskit_services *svc, const biaskit_config *cfg,
                  const biaskit_geometry *geo, void **out, biaskit_error *err);
    void (*destroy)(void *inst);

    /* Parameters (all optional: NULL means none). */
    int64_t (*param_count)(const void *inst);
    /* Fill theta with initial values; deterministic for a given seed. */
    int (*param_init)(const void *inst, float *theta, uint64_t seed, biaskit_error *err);
    /* Project theta onto its constraints in place (e.g. KERPLE r > 0); called after every optimizer
     * step. Must be idempotent. */
    void (*param_project)(const void *inst, float *theta);
    /* Describe theta as named tensors: fills up to `capacity` entries, returns how many there are. */
    int32_t (*param_tensors)(const void *inst, biaskit_tensor_info *out, int32_t capacity);

    /* BIASKIT_CAP_TABLE. table[h * distances + d] = T_h(d), 0 <= h < n_heads, 0 <= d < distances.
     * The host services reach this and every other hook through the instance: keep the `svc` given to
     * create() in it (valid until destroy()) and fail with
     *     return inst->svc->error(err, BIASKIT_ERR_INVALID, "expected ..., got %d", ...);
     * (the engine shows the message with the term, the plugin's name and file, the hook and, where they
     * apply, the layer and the training step), or log with inst->svc->log(BIASKIT_LOG_INFO, "name", ...) (shown at the
     * user's verbosity; table() and table_backward() run every step and layer, so log once, not per
     * call). The same holds for table_backward() and the other hooks. */
    int (*table)(const void *inst, const float *theta, int32_t distances, float *table,
                 biaskit_error *err);
    /* dtheta += sum over h, d of dtable[h * distances + d] * dT_h(d)/dtheta. Errors and log lines
     * through the svc kept from create(), as for table(). */
    int (*table_backward)(const void *inst, const float *theta, int32_t distances,
                          const float *dtable, float *dtheta, biaskit_error *err);
    int (*table_cuda)(const void *inst, const float *theta, int32_t distances, float *table,
                      void *stream, biaskit_error *err);
    int (*table_backward_cuda)(const void *inst, const float *theta, int32_t distances,
                               const float *dtable, float *dtheta, void *stream, biaskit_error *err);

    /* BIASKIT_CAP_SEGMENT. For `count` tokens of one sequence, write each token's segment index and
     * its position inside its segment. The engine checks every row and rejects, naming the plugin and
     * the first bad token, anything but: token 0 is segment 0, position 0; after that each segment
     * index equals the previous one or exceeds it by exactly 1 (no gaps, never decreasing), and the
     * position is 0 when the index stepped up, else the previous position + 1. Every sequence the
     * engine hands over (a training window, an evaluation chunk) starts segment 0 afresh. */
    int (*segment)(const void *inst, const int32_t *tokens, int64_t count, int32_t *segment_index,
                   int32_t *segment_position, biaskit_error *err);

    /* BIASKIT_CAP_EMBED. out[n * d_model + c] += A[positions[n]][c] for n < count. The engine passes
     * the first (layer 0) copy of theta. */
    int (*embed)(const void *inst, const float *theta, const int32_t *positions, int64_t count,
                 float *out, biaskit_error *err);
    /* dtheta += dA, where dA[positions[n]][c] += dout[n * d_model + c]. */
    int (*embed_backward)(const void *inst, const float *theta, const int32_t *positions,
                          int64_t count, const float *dout, float *dtheta, biaskit_error *err);

    /* BIASKIT_CAP_ROTARY. Write the d_head/2 inverse frequencies: pair k of q and k at position p is
     * rotated by the angle p * inv_freq[k]. */
    int (*rotary_frequencies)(const void *inst, float *inv_freq, biaskit_error *err);

    /* --- appended in ABI 1 (read by the host only through BIASKIT_HAS_FIELD: a plugin compiled
     * against an older header has a smaller struct_size and gets the host variants + a copy) --- */

    /* BIASKIT_CAP_EMBED on the device, optional: embed and embed_backward with device pointers
     * (theta, positions, out, dout, dtheta), work enqueued on `stream` only. Same semantics as the
     * host variants: out[n * d_model + c] += A[positions[n]][c]; dtheta += dA. embed_backward_cuda
     * must be deterministic (no float atomics: every output element summed in a fixed order). The
     * positions come in sequences (a batch is several): the token index 0, 1, 2, ... of each, or the
     * position inside the segment, which restarts at 0 with every segment; so they are not sorted.
     * The built-in ape plugin shows one way (runs of non-decreasing positions, searched by bisection):
     * its source is installed with the SDK, <prefix>/share/biaskit/examples/plugins/ape/ape.cu. */
    int (*embed_cuda)(const void *inst, const float *theta, const int32_t *positions, int64_t count,
                      float *out, void *stream, biaskit_error *err);
    int (*embed_backward_cuda)(const void *inst, const float *theta, const int32_t *positions,
                               int64_t count, const float *dout, float *dtheta, void *stream,
                               biaskit_error *err);
    /* --- appended in ABI 2 (read only through BIASKIT_HAS_FIELD; every one optional unless its
     * capability needs it) --- */

    /* Like param_init, with the context: ctx->layer is the copy being initialised (per-layer terms;
     * -1 for a shared copy). When set, the host calls it instead of param_init. */
    int (*param_init_ctx)(const void *inst, float *theta, uint64_t seed, const biaskit_context *ctx,
                          biaskit_error *err);

    /* BIASKIT_CAP_COORDINATE: the number of grid points of u in [0, 1] (>= 2) the table is given at. */
    int32_t (*coordinate_points)(const void *inst);
    /* BIASKIT_CAP_COORDINATE: u(i, d) = phi[d] * rscale[i] for d < distances, i < rows. */
    int (*coordinate)(const void *inst, const float *theta, const biaskit_context *ctx, int32_t distances,
                      int32_t rows, float *phi, float *rscale, biaskit_error *err);
    /* dtheta += dphi . dphi/dtheta + drscale . drscale/dtheta. */
    int (*coordinate_backward)(const void *inst, const float *theta, const biaskit_context *ctx,
                               int32_t distances, int32_t rows, const float *dphi, const float *drscale,
                               float *dtheta, biaskit_error *err);

    /* BIASKIT_CAP_MASK: fill *out (the engine sets out->struct_size first). */
    int (*mask)(const void *inst, const biaskit_context *ctx, biaskit_mask *out, biaskit_error *err);

    /* BIASKIT_CAP_SCALE: scale[h * rows + i] = s_h(i), finite. */
    int (*scale)(const void *inst, const float *theta, const biaskit_context *ctx, int32_t rows, float *scale,
                 biaskit_error *err);
    /* dtheta += sum over h, i of dscale[h * rows + i] * ds_h(i)/dtheta. */
    int (*scale_backward)(const void *inst, const float *theta, const biaskit_context *ctx, int32_t rows,
                          const float *dscale, float *dtheta, biaskit_error *err);

    /* BIASKIT_CAP_ROTARY, length-aware (position interpolation, NTK, YaRN): the d_head/2 inverse
     * frequencies for sequences of ctx->length tokens, and the amplitude that multiplies q and k after
     * the rotation (1 for plain RoPE; YaRN's temperature: the logits are multiplied by amplitude^2).
     * When set, the host calls it (again whenever the length changes) instead of rotary_frequencies. */
    int (*rotary_ctx)(const void *inst, const biaskit_context *ctx, float *inv_freq, float *amplitude,
                      biaskit_error *err);

    /* Parameter groups (optional; read only through BIASKIT_HAS_FIELD: a plugin without it trains every
     * parameter at [train] lr, decayed only with decay_all). The learning-rate scale and weight decay of
     * tensor `tensor`: an index into the list param_tensors() gives, or -1 for the whole theta when the
     * plugin has no param_tensors() (or its tensors do not tile theta exactly: the engine then stores
     * and trains theta as one vector). *out holds the engine's defaults on entry (biaskit_param_group).
     * Called once per term and tensor after param_init, for a plugin with parameters only; a per-layer
     * term's copies all follow the same declaration. */
    int (*param_group)(const void *inst, int32_t tensor, biaskit_param_group *out, biaskit_error *err);

    /* What a tensor's values may be and where they start (optional; read only through BIASKIT_HAS_FIELD):
     * for tensor `tensor` of param_tensors(), the bounds param_project() keeps every element in and the
     * initialisation rule in words. *out holds the engine's defaults on entry (biaskit_param_info: no
     * bounds, no text); fill what is known. Shown by `biaskit plugins NAME` and `biaskit params`; the
     * formula-first headers fill it from the parameter lists. `biaskit check` fails a bound that is NaN
     * (or +inf as a lower, -inf as an upper bound), lower > upper, a text without its NUL, an error,
     * and parameters that param_init + param_project (initial, perturbed or wild) leave outside. */
    int (*param_info)(const void *inst, int32_t tensor, biaskit_param_info *out, biaskit_error *err);

    /* BIASKIT_CAP_CONTENT (appended after param_info; read only through BIASKIT_HAS_FIELD): the steps of
     * `count` tokens from their inputs x (count x d_model), a[n * n_heads + h] >= 0 and finite (see
     * "Beyond distance tables"). ctx->layer is the layer whose input x is (0 .. n_layers - 1, for a
     * shared term too); the tokens are ctx->length-long sequences one after the other. The engine checks
     * every value and names the token and head of the first that is not. */
    int (*content)(const void *inst, const float *theta, const biaskit_context *ctx, const float *x, int64_t count,
                   float *steps, biaskit_error *err);
    /* dtheta += sum over n, h of dsteps[n * n_heads + h] * da_h(n)/dtheta, and dx (count x d_model) +=
     * the same through x. Needed when the plugin has parameters; dx is never NULL. */
    int (*content_backward)(const void *inst, const float *theta, const biaskit_context *ctx, const float *x,
                            int64_t count, const float *dsteps, float *dtheta, float *dx, biaskit_error *err);

    /* BIASKIT_CAP_COUNT (read only through BIASKIT_HAS_FIELD): the layout of the counted positions (*out
     * holds the engine's defaults on entry), the same for every layer and call. */
    int (*count)(const void *inst, const biaskit_context *ctx, biaskit_count *out, biaskit_error *err);
    /* E[k * d_head + c] = component c of position vector k, k < points, from the layer's copy of theta. */
    int (*count_vectors)(const void *inst, const float *theta, const biaskit_context *ctx, int32_t points, float *E,
                         biaskit_error *err);
    /* dtheta += sum over k, c of dE[k * d_head + c] * dE_kc/dtheta. Needed when the plugin has parameters. */
    int (*count_vectors_backward)(const void *inst, const float *theta, const biaskit_context *ctx, int32_t points,
                                  const float *dE, float *dtheta, biaskit_error *err);

    /* BIASKIT_CAP_ROTARY, optional (appended after count_vectors_backward; read only through
     * BIASKIT_HAS_FIELD): a decay per frequency pair, as xPos: zeta[k] > 0 for each of the d_head/2 pairs and
     * one *scale > 0. The rotated pair k of q at position p is multiplied by zeta[k]^(p / scale), that of k
     * by zeta[k]^(-p / scale), so q_i . k_j gains zeta_k^((p(i) - p(j)) / scale) on top of the rotation
     * and the amplitude. Asked once, when the term is built. */
    int (*rotary_decay)(const void *inst, const biaskit_context *ctx, float *zeta, float *scale, biaskit_error *err);
    /* BIASKIT_CAP_ROTARY, optional (appended after rotary_decay; read only through BIASKIT_HAS_FIELD):
     * several position views of one call (training-free context extension: Self-Extend, ReRoPE, STRING).
     * Write *n_views <= max_views views (biaskit_rotary_view) whose distance ranges tile [0, inf) in order:
     * view 0 from distance 0, each from where the one before ends, the last one unbounded. The attention
     * runs one pass per view over the pairs it owns, with that view's positions, and merges the passes
     * exactly by their log-sum-exps: one softmax over every key. *n_views = 0 (or 1 view of [0, inf) at the
     * token indices): the ordinary rotation. The frequencies and the amplitude are rotary_ctx's (or
     * rotary_frequencies'); the term must be on the token stream, without rotary_decay, alone in the
     * attention of its layers. Asked again whenever the length (ctx->length) or the training flag
     * changes. */
    int (*rotary_views)(const void *inst, const biaskit_context *ctx, biaskit_rotary_view *views, int32_t max_views,
                        int32_t *n_views, biaskit_error *err);
} biaskit_plugin;

/* The size of the first version of the descriptor: the host refuses anything smaller. A descriptor
 * that ends there (a plugin built before embed_cuda was appended) loads: the host reads the fields
 * after rotary_frequencies only when BIASKIT_HAS_FIELD says they are inside struct_size. */
#define BIASKIT_PLUGIN_V1_SIZE (offsetof(biaskit_plugin, rotary_frequencies) + sizeof(void (*)(void)))

/* The entry point's type. `host_abi_version` lets a plugin that supports several ABIs pick one. */
typedef const biaskit_plugin *(*biaskit_entry_fn)(uint32_t host_abi_version);

/* Define the entry point of a plugin whose descriptor is the static object `descriptor`:
 *     static const biaskit_plugin my_plugin = { sizeof(biaskit_plugin), BIASKIT_ABI_VERSION, ... };
 *     BIASKIT_DEFINE_PLUGIN(my_plugin)                                                            */
#define BIASKIT_DEFINE_PLUGIN(descriptor)                                              \
    BIASKIT_EXPORT const biaskit_plugin *biaskit_plugin_entry(uint32_t host_abi_version); \
    BIASKIT_EXPORT const biaskit_plugin *biaskit_plugin_entry(uint32_t host_abi_version) \
    {                                                                                  \
        (void)host_abi_version;                                                        \
        return &(descriptor);                                                          \
    }

#ifdef __cplusplus
}
#endif

#endif /* BIASKIT_PLUGIN_H */
