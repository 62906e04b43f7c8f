/* The positional bias of a model during training and evaluation: for every layer and position stream,
 * the mixed distance table the attention reads, and the way back from the attention's table gradient
 * to each plugin's parameters and to learnable mixing weights (docs/design.md §2.2).
 *
 *   forward:  T_t = plugin table of term t (its layer's parameters), M[l][s] = mix over terms on s
 *   backward: dM[l][s] (from the attention) -> dT_t (mixing rule) -> plugin table_backward -> dtheta_t
 *             and dM -> dw_t -> d(mixing parameters) when the weights are learned
 *
 * Tables are recomputed by bk_bias_forward() whenever parameters change (every optimizer step).
 *
 * A misbehaving plugin (tests/test_misbehave.sh): a table with a NaN or an inf, or a table()/table_backward()
 * error, fails with a message naming the term, its plugin, the layer (of a per-layer term) and `step`;
 * a non-finite parameter gradient computed from a finite dL/dT is recorded in `nonfinite` for the
 * training loop, which names it when the gradient norm turns out not finite.
 *
 * On a device backend (bk_bias_set_backend; model/backend.h) the tables, the mixed tables and the
 * backward scratch live in the backend's memory, and the mixing runs there (be->mix_forward,
 * be->mix_backward). Each (layer, term) table comes from the plugin's table_cuda on the backend's
 * stream when the backend is CUDA and the plugin has one; otherwise from its host table(), uploaded
 * (the emulated backend never calls plugins' CUDA code: the host variant and the copy stand in). The
 * engine logs once per term which terms take the host path and why, and counts per term where every
 * table and every gradient came from (cuda_tables, host_tables, cuda_backwards, host_backwards).
 *
 * Parameters: "copy the tiny theta". The host theta of every term (bk_term.theta) stays the
 * authoritative copy: the optimizer updates it, param_project() projects it, checkpoints save it, all
 * on the host, exactly as on the CPU. Each bk_bias_forward uploads it (a table term has a few floats
 * per head: KERPLE 2-3 x heads, T5 buckets x heads) into a device copy that table_cuda and
 * table_backward_cuda read. Keeping one authoritative host copy costs one tiny upload per step and
 * spares the optimizer, the projection and the checkpoints a second, device-side code path.
 * Gradients go the other way: table_backward_cuda adds into a device dtheta, which
 * bk_bias_gradients_to_host downloads and adds into the host dtheta once per step; the host
 * fallback's table_backward() adds into the host dtheta directly. */
#ifndef BK_BIAS_H
#define BK_BIAS_H

#include "bias/content.h"
#include "bias/query.h"
#include "bias/terms.h"
#include "model/backend.h"

typedef struct bk_bias {
    bk_term_set *set;
    int n_layers;
    int32_t n_heads;
    int32_t distances;            /* table length of the last forward */
    int32_t capacity;             /* distances the buffers hold */
    int learn_weights;            /* some mixing weight trains (a stream has n_mix > 0) */
    int n_on[BK_STREAM_COUNT];    /* terms on each stream */
    int *on[BK_STREAM_COUNT];     /* their indices in set->terms */
    /* Mixing weights (bias/mix.h): per stream, how each term's weight is set (kind: BK_MIX_FIXED,
     * BK_MIX_LEARNED, BK_MIX_LEARNED_PER_HEAD, from the terms' learn_weight / weight_per_head), the rows of
     * weights (groups: 1, or n_heads when one of them learns per head), the learned parameters packed
     * term after term (n_mix of them, shared by all layers; the optimizer's mix.<stream>) and the logits
     * of every term (groups x n_on). The current weights live in the terms (weight, head_weights). */
    unsigned char *kind[BK_STREAM_COUNT];
    int groups[BK_STREAM_COUNT];
    int n_mix[BK_STREAM_COUNT];
    float *mix_params[BK_STREAM_COUNT]; /* n_mix learnable mixing parameters (at least n_on floats, zeros
                                         * past n_mix) */
    float *mix_grads[BK_STREAM_COUNT];
    double *logits[BK_STREAM_COUNT];
    float **dtheta;               /* per term: n_copies * n_params gradient (NULL without parameters) */
    float *term_tables;           /* [layer][term] n_heads * capacity */
    float *mixed;                 /* [layer][stream] n_heads * capacity */
    float *scratch;               /* n_terms * n_heads * capacity (backward) */
    int64_t step;                 /* the training step being computed, named in messages (0: none) */
    int check_finite;             /* 1 (the default): reject non-finite tables and note bad gradients */
    char nonfinite[768];          /* since the last zero_grad: the first plugin gradient that went
                                   * non-finite from a finite dL/dT, described; "" when none */

    /* Where every table and gradient came from since bk_bias_init, per term (indices of set->terms):
     * tables made by the plugin's table_cuda on the device, tables made by its host table() (the CPU,
     * or the host fallback of a device backend: host table + upload), and likewise the gradient calls
     * (table_backward_cuda, or table_backward() on the host). A table shared by every layer counts
     * once per forward. Tests read them to know the CUDA function really ran. */
    int64_t *cuda_tables, *host_tables;
    int64_t *cuda_backwards, *host_backwards;

    /* --- device backend (bk_bias_set_backend); term_tables, mixed and scratch above are then in
     * the backend's memory --- */
    bk_backend *be;               /* NULL (the default) or the CPU: host memory, nothing is copied */
    float **theta_dev;            /* per term: device copy of theta (CUDA backend, a plugin with CUDA
                                   * functions and parameters), uploaded by every forward; else NULL */
    float **dtheta_dev;           /* per term: device gradient of table_backward_cuda, else NULL */
    float *host_table;            /* host staging of one table (n_heads * capacity) for the host path */
    float *host_grad;             /* host staging of the largest device gradient */
    unsigned char *logged;        /* per term: 1 host-path table logged, 2 host-path gradient logged */
    unsigned char *dtable_nonfinite; /* per term: a dL/dT given to table_backward_cuda was not finite */
    int zero_pending;             /* the device dtheta must be zeroed before it is added into again */

    /* --- ABI 2 (bias/query.h): the coordinate, mask and scale terms --- */
    bk_query query;
    bk_content content;           /* the content-position term (bias/content.h); its forward and backward
                                   * run inside the model's layers (they read the layer's input) */
    int training;                 /* 1 (the default): tables for training steps; 0 for evaluation (the
                                   * plugins' biaskit_context.training) */
    int32_t distance_cap;         /* the mask's distance_cap (0: none): the attention reads
                                   * M[h][min(d, cap)] (LM-Infinite's Lambda-shape) */
    float *capped;                /* with a distance cap: [layer][stream] the mixed tables capped (the
                                   * attention's), in the backend's memory; `mixed` stays uncapped */
    float *capped_grad;           /* with a distance cap: one folded dL/dM (n_heads * capacity) */
} bk_bias;

/* Set up for `set` (which must outlive the bias). With learn_weights the weights of the terms whose
 * learn_weight is set train (their current weights are the initial mixing parameters); with 0 every
 * weight stays as the terms give it. */
int bk_bias_init(bk_bias *b, bk_term_set *set, int n_layers, int learn_weights, bk_error *err);
void bk_bias_free(bk_bias *b);

/* Compute on backend `be` from now on (model/backend.h), once after bk_bias_init and before the first
 * forward. The CPU backend (or never calling this) keeps the host behaviour, with no copies; a device
 * backend allocates the tables, mixed tables and scratch in its memory, and for a CUDA backend the
 * device theta and dtheta of the terms whose plugins have CUDA functions. `be` must outlive the bias. */
int bk_bias_set_backend(bk_bias *b, bk_backend *be, bk_error *err);

/* Compute every layer's tables for distances 0 .. distances-1 from the current parameters (on a
 * device backend: uploads theta first, since the host copy is authoritative). */
int bk_bias_forward(bk_bias *b, int32_t distances, bk_error *err);

/* The attention's bias for `layer`: the mixed tables and their positions (set by the model) and the
 * ABI 2 fields (bias/query.h). */
void bk_bias_attention(const bk_bias *b, int layer, bk_attention_bias *ab);

/* The mixed table of (layer, stream), n_heads x distances, in the backend's memory; NULL when no
 * term uses the stream. */
const float *bk_bias_table(const bk_bias *b, int layer, bk_stream stream);

/* Before the attention backward of `layer`: points ab's ABI 2 gradient outputs at zeroed buffers. */
int bk_bias_backward_begin(bk_bias *b, int layer, bk_attention_bias *ab, bk_error *err);

/* Accumulate the gradients of layer `layer` given dmixed[s] = dL/dM[layer][s] (NULL for streams
 * without terms; in the backend's memory): plugin parameter gradients into dtheta (on a CUDA backend
 * into the device dtheta of terms with table_backward_cuda), mixing-parameter gradients into
 * mix_grads (host). */
int bk_bias_backward(bk_bias *b, int layer, const float *const dmixed[BK_STREAM_COUNT], bk_error *err);
/* The same for the ABI 2 terms, after the attention backward that bk_bias_backward_begin prepared. */
int bk_bias_query_backward(bk_bias *b, int layer, bk_error *err);

/* Once per step, after the last bk_bias_backward and before the gradient norm: afterwards dtheta and
 * mix_grads (host) hold the complete gradients. Downloads every device dtheta, adds it into dtheta
 * (noting a non-finite one from a finite dL/dT in `nonfinite`), and marks the device copies for
 * zeroing; calling it again before the next backward adds nothing. No-op on the CPU. */
int bk_bias_gradients_to_host(bk_bias *b, bk_error *err);

/* Zero dtheta and mix_grads; clears `nonfinite`. The device dtheta (if any) is zeroed by the next
 * bk_bias_backward before it adds (a device call that can fail belongs to a function that reports). */
void bk_bias_zero_grad(bk_bias *b);

/* Apply each plugin's param_project() to every parameter copy (after every optimizer step). Fails,
 * naming the term, when a projected parameter is not finite. */
int bk_bias_project(bk_bias *b, bk_error *err);

/* After the optimizer changed mix_params: recompute the terms' weights from them. */
void bk_bias_sync_weights(bk_bias *b);

#endif
