/* The content position of a model (plugin.h, BIASKIT_CAP_CONTENT; at most one term): in every layer the
 * plugin reads the layer's attention input x (the first LayerNorm's output, B x T tokens of d_model) and
 * gives each token's step a_h(t) >= 0 per head; the position is their running sum along each sequence,
 *
 *     P[b][h][t] = a_h(b, 0) + ... + a_h(b, t)      (summed in double, kept in float)
 *
 * and the attention adds -(P(i) - P(j)) to the score of the pair (i, j) (cpu/attention.h, cpos). The way
 * back: the attention's dL/dP (dcpos) becomes dL/da by the sum over the later tokens of the sequence,
 *
 *     dL/da(t) = dL/dP(t) + dL/dP(t + 1) + ... + dL/dP(T - 1)
 *
 * which content_backward() turns into the parameters' gradient (dtheta) and x's (added into dx).
 *
 * The steps depend on the tokens, so they are computed in every forward, layer by layer; a training forward
 * keeps every layer's positions (B H T floats each) for backward. The plugin runs on the host: on a
 * device backend x is copied to the host, the positions uploaded, and on the way back dL/dP downloaded and
 * dL/dx uploaded and added (B T (d_model + H) floats per layer each way).
 *
 * Every step is checked (finite, >= 0): a message names the term, its plugin, the layer, the step of
 * training, and the batch row, token and head of the first bad value. */
#ifndef BK_CONTENT_H
#define BK_CONTENT_H

#include "bias/terms.h"
#include "cpu/attention.h"
#include "model/backend.h"

typedef struct bk_content {
    const bk_term_set *set;
    bk_backend *be;       /* NULL or the CPU: host memory, nothing copied */
    int32_t H, C;
    int B, T;             /* of the last forward */
    size_t capacity;      /* floats of pos */
    float *pos;           /* [slot][b][h][t] in the backend's memory */
    float *pos_h;         /* one slot on the host (the same memory as pos on the CPU) */
    float *steps_h;       /* B T H steps of one layer on the host (forward), then their gradient (backward) */
    float *x_h;           /* device backends: x of one layer on the host */
    float *dpos, *dpos_h; /* one layer's dL/dP (backend, host) */
    float *dx_h, *dx_dev; /* device backends: dL/dx on the host and its upload */
    size_t tokens_capacity; /* B T the per-layer arrays hold */
} bk_content;

/* Set up for `set` (which must outlive it). */
void bk_content_init(bk_content *c, const bk_term_set *set);
void bk_content_free(bk_content *c);
/* 1 when the set has a content term. */
int bk_content_active(const bk_content *c);
/* Compute on `be` from now on (NULL or the CPU: host memory). */
int bk_content_set_backend(bk_content *c, bk_backend *be, bk_error *err);

/* The positions of `layer` from x (B T x d_model, backend memory), into slot `slot` (0 .. slots - 1; a
 * training forward uses slot = layer, an evaluation slot 0 with slots = 1); `training` and `step` go to the
 * plugin's context and the messages; check = 0 skips the value checks. */
int bk_content_forward(bk_content *c, int layer, int slot, int slots, const float *x, int B, int T, int training,
                       int64_t step, int check, bk_error *err);
/* The attention's cpos for slot `slot` (set by the last forward). */
void bk_content_attention(const bk_content *c, int slot, bk_attention_bias *ab);
/* Before the attention backward: zeroes dL/dP and points ab->dcpos at it. */
int bk_content_backward_begin(bk_content *c, bk_attention_bias *ab, bk_error *err);
/* After it: the plugin's content_backward adds layer `layer`'s gradients into dtheta (host, the term's
 * n_copies x n_params) and into dx (B T x d_model, backend memory), from x (backend memory). */
int bk_content_backward(bk_content *c, int layer, const float *x, float *dx, float *const *dtheta, int training,
                        int64_t step, bk_error *err);

#endif
