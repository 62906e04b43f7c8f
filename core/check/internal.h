/* biaskit check, inside: what the files of core/check/ share (check/check.h lists them). Nothing here
 * is part of the engine's interface; every name is prefixed ck_. */
#ifndef BK_CHECK_INTERNAL_H
#define BK_CHECK_INTERNAL_H

#include "check/check.h"
#include "config/experiment.h"
#include "model/bias_math.h" /* BK_COORD_SLACK */
#include "plugin/host.h"
#include "plugin/services.h"
#include "util/rng.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#define GUARD_FLOATS 16          /* sentinels after every output: writing past the end is caught */
#define ADD_TOLERANCE 1e-6       /* backward into a non-zero start: start + gradient, relative */
#define PERTURB_REL 0.25         /* random parameters: theta + N(0, (0.25 |theta| + 0.05)^2) */
#define PERTURB_ABS 0.05

/* ---- text buffers (harness.c) ------------------------------------------------------------------- */

typedef struct strbuf {
    char *s;
    size_t len, cap;
} strbuf;

void ck_sb_vprintf(strbuf *b, const char *fmt, va_list ap);
__attribute__((format(printf, 2, 3))) void ck_sb_printf(strbuf *b, const char *fmt, ...);
const char *ck_sb_text(const strbuf *b);

/* ---- reporting and the child processes (harness.c) ---------------------------------------------- */

typedef struct checker {
    const bk_check_options *opt;
    const bk_plugin *plugin;
    const biaskit_plugin *d;
    biaskit_geometry geo;
    char *exp_text;             /* the experiment the default configuration comes from */
    char **overrides;           /* "term.0.KEY=VALUE" for each --set, then one free slot for a probe */
    size_t n_overrides;
    bk_experiment exp;
    int have_exp;
    biaskit_config view;        /* the default configuration */
    bk_check_report_fn report;
    void *ctx;
    bk_check_counts *counts;
    int out_fd;                 /* in a child: the pipe to the parent; -1 in the parent */
} checker;

/* One report item: counted and passed to the callback in the parent, a line to the parent in a child. */
__attribute__((format(printf, 4, 5))) void ck_item(checker *c, bk_check_status status, const char *id,
                                                   const char *fmt, ...);
/* What a child is doing, so that a crash can say where it happened. */
__attribute__((format(printf, 2, 3))) void ck_stage(const checker *c, const char *fmt, ...);
/* One line to the parent: TAG \t ID \t TEXT, with tabs and newlines of the text made spaces. */
void ck_child_line(const checker *c, char tag, const char *id, const char *text);

typedef void (*child_fn)(checker *c, const void *arg);

typedef struct child_result {
    strbuf output;   /* every line the child wrote */
    int finished;    /* it wrote its end line */
    int signal;      /* killed by this signal, or 0 */
    int exit_status; /* when it exited */
    char stage[256]; /* the last stage it announced */
    double cpu_s;    /* the CPU time it used (user + system, all its threads) */
    double wall_s;   /* and the time it took on the clock */
} child_result;

/* fn(c, arg) in a child process; what it wrote and how it ended into *r. */
int ck_run_child(checker *c, child_fn fn, const void *arg, child_result *r, bk_error *err);
/* Why a child did not finish, as a phrase: "crashed with signal 11 (Segmentation fault) in create()". */
void ck_describe_abort(const checker *c, const child_result *r, char *buf, size_t size);

/* Calls fn(line fields) for each item line (tags P, F, S, R) a child wrote. */
typedef void (*line_fn)(checker *c, char tag, const char *id, const char *text, void *ctx);
/* The status of a child's item line by its tag (P, F, W, else SKIP). */
bk_check_status ck_tag_status(char tag);
void ck_for_each_line(checker *c, const child_result *r, line_fn fn, void *ctx);

/* Runs one unit of checks in a child and reports its items; a child that does not finish is a FAIL
 * of `id`. *created (may be NULL) is set when the unit reported "create" as passed. */
int ck_run_unit(checker *c, const char *id, const char *what, child_fn fn, const void *arg, int *created,
                bk_error *err);

/* ---- random numbers, guarded buffers (instance.c) ----------------------------------------------- */

/* The engine's SplitMix64 stream (util/rng.h), one per (seed, purpose, index). */
typedef bk_rng rng;
rng ck_rng_for(uint64_t seed, uint64_t purpose, uint64_t index);
double ck_rng_sym(rng *r); /* (-1, 1] */
void ck_random_fill(float *v, size_t n, rng *r);

/* Random purposes (the second argument of ck_rng_for). */
enum { R_PERTURB = 1, R_WEIGHTS, R_START, R_ENTRIES, R_WILD, R_POSITIONS, R_TOKENS, R_INIT };

/* Memory a plugin has not written holds a NaN with a payload no arithmetic produces. */
int ck_is_sentinel(float v);
void ck_fill_sentinel(float *v, size_t n);
/* n floats plus the guard, sentinel-filled; NULL when out of memory. */
float *ck_guarded_alloc(size_t n);
int ck_guard_intact(const float *v, size_t n);
/* Index of the first non-finite value, or -1. */
long long ck_first_non_finite(const float *v, size_t n);
int ck_bits_equal(const float *a, const float *b, size_t n, size_t *at);
/* Two calls of `what` into a and b (n values) must agree bit for bit; 0 or 1 with why. */
int ck_same_bits(const float *a, const float *b, size_t n, const char *what, char *why, size_t size);

/* ---- instances and the plugin's functions (instance.c) ------------------------------------------ */

typedef struct instance {
    const checker *c;
    void *inst;
    biaskit_geometry geo;
    int64_t n_params;
    float *theta; /* n_params values; NULL when there are none */
} instance;

/* How a call went: done, refused with a message (an allowed answer to bad input), or broken (no
 * message, output written past its end or left unwritten, nonsense counts). */
enum { CALL_OK = 0, CALL_REFUSED = 1, CALL_BROKEN = 2 };

/* The answer of a failed call: CALL_REFUSED with its message, or CALL_BROKEN without one. */
int ck_refusal(const char *call, int rc, biaskit_error *pe, char *why, size_t size);
/* create() and the parameter vector (zeros): CALL_OK, or CALL_REFUSED / CALL_BROKEN with why. */
int ck_instance_create(const checker *c, const biaskit_config *view, const biaskit_geometry *geo, instance *in,
                       char *why, size_t size);
void ck_instance_close(instance *in);
/* Opens the default instance with parameters from `seed` (random when `random`, else initial); on
 * failure reports `id` as FAIL (the checks of this unit cannot run) and returns 1. */
int ck_open_default(checker *c, const char *id, uint64_t seed, int random, instance *in);

size_t ck_n_params(const instance *in);
void ck_project(const instance *in, float *theta);
/* param_init(seed) into theta (in->theta when NULL), then param_project; param_init_ctx instead of
 * param_init when the plugin has it (as the engine: layer as ck_context, train_length, training). */
int ck_init_params(const instance *in, float *theta, uint64_t seed, char *why, size_t size);
/* Random parameters: param_init, theta + N(0, (0.25 |theta| + 0.05)^2), param_project. */
int ck_random_params(const instance *in, uint64_t seed, char *why, size_t size);
/* Names entry i of theta after the plugin's tensors: "r2[3]", "table[5,17]", else "theta[i]". */
void ck_entry_name(const instance *in, int64_t i, char *buf, size_t size);
/* Positions for the embedding checks: 0 .. L-1, or `count` random ones below L (with repeats). */
int32_t *ck_embed_positions(int32_t L, int64_t count, int sequential, uint64_t seed);

/* What the checks evaluate: the table at `distances`, the embedding of `positions`, or (ABI 2) the table
 * of a COORDINATE plugin over its grid of `distances` = coordinate_points() values of u, its coordinate()
 * (phi[distances] then rscale[rows], one output vector) or scale() (scale[h * rows + i]). The last two get
 * a biaskit_context built per call (ck_context) from `length` and `training`. FN_COUNT: a COUNT plugin's
 * count_vectors(), `distances` = count()'s points vectors of d_head values (E[k * d_head + c]). FN_CONTENT:
 * a CONTENT plugin's content() of `count` tokens with inputs x (count x d_model): steps[n * n_heads + h];
 * its backward adds dL/dx into dx (count x d_model), which the caller provides. */
typedef enum { FN_TABLE, FN_EMBED, FN_GRID, FN_COORD, FN_SCALE, FN_COUNT, FN_CONTENT } fn_kind;

typedef struct model_fn {
    fn_kind kind;
    int32_t distances;        /* FN_TABLE: distances; FN_GRID: grid points; FN_COORD: entries of phi; FN_COUNT:
                               * position vectors */
    const int32_t *positions; /* FN_EMBED */
    int64_t count;            /* FN_EMBED: positions; FN_CONTENT: tokens */
    const float *x;           /* FN_CONTENT: the inputs */
    float *dx;                /* FN_CONTENT: the backward's dL/dx (+=) */
    int32_t rows;             /* FN_COORD: entries of rscale; FN_SCALE: queries per head */
    int32_t length;           /* FN_COORD, FN_SCALE: ctx->length */
    int training;             /* FN_COORD, FN_SCALE: ctx->training */
} model_fn;

/* The context of a call, built as the engine builds it (bias/terms.h, bk_term_context) from the
 * instance's geometry: layer 0 for a plugin with BIASKIT_FLAG_PER_LAYER (and more than one layer),
 * else -1 (one copy shared by every layer). */
biaskit_context ck_context(const instance *in, int32_t length, int training);
/* "table_backward()", "embed_backward()", "coordinate_backward()", "scale_backward()". */
const char *ck_fn_backward_name(const model_fn *m);

size_t ck_fn_outputs(const instance *in, const model_fn *m);
/* "head 3, distance 40000" or "token 5, channel 17" for output index k. */
void ck_output_place(const instance *in, const model_fn *m, size_t k, char *buf, size_t size);
void ck_fn_label(const model_fn *m, char *buf, size_t size);
/* The plugin's output into out (ck_fn_outputs + guard floats): the table, or the embedding added to
 * zeros (or to `start` when not NULL). CALL_OK; CALL_REFUSED or CALL_BROKEN with why. */
int ck_forward(const instance *in, const model_fn *m, const float *theta, const float *start, float *out, char *why,
               size_t size);
/* ck_forward() that also requires every value to be finite. */
int ck_forward_finite(const instance *in, const model_fn *m, const float *theta, float *out, char *why, size_t size);
/* dtheta += d(sum w * out)/dtheta through table_backward or embed_backward. */
int ck_backward(const instance *in, const model_fn *m, const float *theta, const float *w, float *dtheta, char *why,
                size_t size);

/* ---- the checks ---------------------------------------------------------------------------------- */

/* descriptor.c: the "descriptor", "capabilities" and "options" items (nothing of the plugin runs). */
void ck_check_descriptor(checker *c);

/* Units, each run in a child (ck_run_unit): contracts.c, gradient.c, cuda.c. */
void ck_unit_create(checker *c, const void *arg);
void ck_unit_tables(checker *c, const void *arg);
/* longrange.c: the probes far out and across the parameter region. TABLE: "long-range" and "shape";
 * COORDINATE: "long-range-coordinate" and "shape"; SCALE: "long-range-scale"; MASK: "long-range-mask";
 * ROTARY: "long-range-rotary" (rotary_ctx()). */
void ck_unit_longrange(checker *c, const void *arg);
void ck_unit_longrange_coordinate(checker *c, const void *arg);
void ck_unit_longrange_scale(checker *c, const void *arg);
void ck_unit_longrange_mask(checker *c, const void *arg);
void ck_unit_longrange_rotary(checker *c, const void *arg);
/* long-range-scale: |s_h(i)| beyond this at the initial or random parameters fails. The scale multiplies
 * q.k / sqrt(d_head); at |s| = 1e4 a difference of 0.01 there (below the rounding of a bf16 logit) is
 * 100 in the logit, past float's exp range (e^-88 underflows): softmax is an argmax decided by noise,
 * its gradient zero almost everywhere. Published scales stay far below: SSMax's s ln n with s = 0.43 is
 * 6 at n = 2^20, log-n scaling log_L n is about 3; a learned inverse temperature of 100 still passes. */
#define CK_SCALE_BOUND 1e4
void ck_unit_table_gradient(checker *c, const void *arg);
void ck_unit_embed_gradient(checker *c, const void *arg);
void ck_unit_project(checker *c, const void *arg);
void ck_unit_determinism(checker *c, const void *arg);
/* Two children with the heap's fresh memory filled differently give the same results (fresh.c). */
int ck_check_fresh_memory(checker *c, bk_error *err);
/* contracts.c: the "param-info" item (the declared bounds and initialisation of each tensor). */
void ck_unit_param_info(checker *c, const void *arg);
void ck_unit_segment(checker *c, const void *arg);
void ck_unit_embed(checker *c, const void *arg);
void ck_unit_rotary(checker *c, const void *arg);
void ck_unit_cuda(checker *c, const void *arg);
/* embed_cuda / embed_backward_cuda against the host embedding (cuda.c), for EMBED plugins. */
void ck_unit_cuda_embed(checker *c, const void *arg);

/* abi2.c: the ABI 2 capabilities. COORDINATE: coordinate_points(), the grid table, coordinate() at long
 * lengths; SCALE: scale() at long lengths; MASK: mask(); ROTARY: rotary_ctx(). */
void ck_unit_coordinate(checker *c, const void *arg);
void ck_unit_scale(checker *c, const void *arg);
void ck_unit_mask(checker *c, const void *arg);
/* The "rotary-ctx" item (ck_unit_rotary calls it on its instance). */
void ck_check_rotary_ctx(checker *c, const instance *in);
/* Units of gradient.c for the ABI 2 backward functions. */
void ck_unit_grid_gradient(checker *c, const void *arg);
void ck_unit_coordinate_gradient(checker *c, const void *arg);
void ck_unit_scale_gradient(checker *c, const void *arg);
/* COUNT (CoPE): count()'s layout and count_vectors() (abi2.c); count_vectors_backward (gradient.c). */
void ck_unit_count(checker *c, const void *arg);
void ck_unit_count_gradient(checker *c, const void *arg);
/* CONTENT (FoX): content() on random inputs (abi2.c); content_backward into theta and into x (gradient.c). */
void ck_unit_content(checker *c, const void *arg);
void ck_unit_longrange_content(checker *c, const void *arg); /* longrange.c */
void ck_unit_content_gradient(checker *c, const void *arg);

#define CK_COORD_SLACK BK_COORD_SLACK /* u(i, i) <= 1 + this: the engine's slack (model/bias_math.h) */

/* count()'s points (2 .. BK_CONTRACT_POINTS_MAX) and pos_scale (finite), the same on two calls, into *out (the
 * engine's defaults on entry: points 0, pos_scale 1/sqrt(d_head)); 0, or 1 with why. */
int ck_count_layout(const instance *in, biaskit_count *out, char *why, size_t size);
/* coordinate_points() in 2 .. BK_CONTRACT_POINTS_MAX into *points; 0, or 1 with why. */
int ck_grid_points(const instance *in, int32_t *points, char *why, size_t size);
/* The contract of one coordinate() output (ck_forward of FN_COORD): phi finite, >= 0, non-decreasing;
 * rscale finite, >= 0; u(i, i) = phi[i] * rscale[i] <= 1 + CK_COORD_SLACK (in float, as the engine
 * computes it). 0, or 1 with why; *max_u (may be NULL) gets the largest u(i, i) and *max_at its row. */
int ck_coordinate_contract(const model_fn *m, const float *out, double *max_u, int32_t *max_at, char *why,
                           size_t size);
/* mask() for a sequence of `length` tokens into *out (struct_size set, the rest zero, as the engine
 * does), nothing written past the struct, then (when `values`) window >= 1, sinks >= 0,
 * distance_cap >= 0: CALL_OK, CALL_REFUSED with its message, CALL_BROKEN (no message, written past its
 * end, values outside the contract) with why. */
int ck_mask(const instance *in, int32_t length, int training, int values, biaskit_mask *out, char *why, size_t size);
/* rotary_ctx() for `length` into inv_freq (d_head/2 values + guard, from ck_guarded_alloc) and
 * *amplitude: every frequency and the amplitude written, nothing past the end, then (when `values`)
 * the frequencies finite, the amplitude finite and > 0: CALL_OK, CALL_REFUSED with its message,
 * CALL_BROKEN with why. */
int ck_rotary_ctx(const instance *in, int32_t length, int training, int values, float *inv_freq, float *amplitude,
                  char *why, size_t size);
/* 1 when the plugin has rotary_ctx() (inside its descriptor's struct_size and set). */
int ck_has_rotary_ctx(const checker *c);
/* 1 when rotary_ctx() breaks its value contract (ck_rotary_ctx) at one of the rotary-ctx item's lengths
 * (L/4 .. 64 L): that item reports it. */
int ck_rotary_ctx_fails_near(const checker *c, const instance *in);

/* probes.c: the "option:NAME" item of one option, and the "geometry" item. */
int ck_probe_option(checker *c, const biaskit_option *o, bk_error *err);
int ck_probe_geometries(checker *c, bk_error *err);

#endif
