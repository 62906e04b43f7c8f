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
 * training loop, which names it when the gradient norm turns out not finite. */
#ifndef BK_BIAS_H
#define BK_BIAS_H

#include "bias/terms.h"

typedef struct bk_bias {
    bk_term_set *set;
    int n_layers;
    int32_t n_heads;
    int32_t distances;            /* table length of the last forward */
    int32_t capacity;             /* distances the buffers hold */
    int learn_weights;
    int n_on[BK_STREAM_COUNT];    /* terms on each stream */
    int *on[BK_STREAM_COUNT];     /* their indices in set->terms */
    float *mix_params[BK_STREAM_COUNT]; /* learnable mixing parameters, shared by all layers */
    float *mix_grads[BK_STREAM_COUNT];
    float **dtheta;               /* per term: n_copies * n_params gradient (NULL without parameters) */
    float *term_tables;           /* [layer][term] n_heads * capacity */
    float *mixed;                 /* [layer][stream] n_heads * capacity */
    float *scratch;               /* n_terms * n_heads * capacity (backward) */
    int64_t step;                 /* the training step being computed, named in messages (0: none) */
    int check_finite;             /* 1 (the default): reject non-finite tables and note bad gradients */
    char nonfinite[768];          /* since the last zero_grad: the first plugin gradient that went
                                   * non-finite from a finite dL/dT, described; "" when none */
} bk_bias;

/* Set up for `set` (which must outlive the bias). With learn_weights the terms' current weights are
 * the initial mixing parameters. */
int bk_bias_init(bk_bias *b, bk_term_set *set, int n_layers, int learn_weights, bk_error *err);
void bk_bias_free(bk_bias *b);

/* Compute every layer's tables for distances 0 .. distances-1 from the current parameters. */
int bk_bias_forward(bk_bias *b, int32_t distances, bk_error *err);

/* The mixed table of (layer, stream), n_heads x distances; NULL when no term uses the stream. */
const float *bk_bias_table(const bk_bias *b, int layer, bk_stream stream);

/* Accumulate the gradients of layer `layer` given dmixed[s] = dL/dM[layer][s] (NULL for streams
 * without terms): plugin parameter gradients into dtheta, mixing-parameter gradients into mix_grads. */
int bk_bias_backward(bk_bias *b, int layer, const float *const dmixed[BK_STREAM_COUNT], bk_error *err);

/* Zero dtheta and mix_grads; clears `nonfinite`. */
void bk_bias_zero_grad(bk_bias *b);

/* Apply each plugin's param_project() to every parameter copy (after every optimizer step). Fails,
 * naming the term, when a projected parameter is not finite. */
int bk_bias_project(bk_bias *b, bk_error *err);

/* After the optimizer changed mix_params: recompute the terms' weights from them. */
void bk_bias_sync_weights(bk_bias *b);

#endif
