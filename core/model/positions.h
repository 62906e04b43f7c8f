/* Positional terms that are not distance tables (docs/design.md §2.3, §3), for one batch of B x T tokens:
 *
 *   segment  the segmenting term maps each row's token ids to (segment index, position inside the
 *            segment); the segment index is the `segment` stream the attention tables and RoPE read.
 *            Segments restart in every row (every sequence or evaluation chunk starts segment 0).
 *   embed    each embedding term adds A[p] to the token embedding, p = the token index on the
 *            `token` stream, the position inside its segment on the `segment` stream.
 *   rotary   the rotary term's inverse frequencies rotate q and k of every head (rotate-half layout:
 *            pair k of a head is (x[k], x[k + hd/2])) by the angle p * inv_freq[k], p from its stream.
 *
 * bk_positions_prepare() runs once per forward; backward reuses what it computed. */
#ifndef BK_POSITIONS_H
#define BK_POSITIONS_H

#include "bias/terms.h"
#include "util/error.h"

#include <stdint.h>

typedef struct bk_positions {
    const bk_term_set *set;     /* may be NULL (no terms) */
    int B, T;                   /* tokens of the last prepare */
    int64_t capacity;           /* tokens the arrays hold */
    int32_t *token_index;       /* (B, T): t */
    int32_t *segment_index;     /* (B, T), when there is a segmenter */
    int32_t *segment_position;  /* (B, T), when there is a segmenter */
    int32_t pairs;              /* rotary: d_head / 2, or 0 without a rotary term */
    float *inv_freq;            /* pairs */
    float *rot_cos, *rot_sin;   /* (rot_rows, pairs): cos and sin of p * inv_freq[k] for p < rot_rows */
    int32_t rot_rows;
    int64_t step;               /* the training step, for the crash report's plugin-call record (0: none) */
} bk_positions;

/* Set up for the terms of `set` (NULL: nothing to do); asks the rotary term for its frequencies. */
int bk_positions_init(bk_positions *ps, const bk_term_set *set, bk_error *err);
void bk_positions_free(bk_positions *ps);

/* Segments of every row of `inputs` (B, T), the token indices and the rotary angles for positions
 * < T. Checks what the segmenter returns (index 0 first, steps of 0 or 1, positions counting up from
 * 0 in each segment) and names the plugin when it is wrong. */
int bk_positions_prepare(bk_positions *ps, const int32_t *inputs, int B, int T, bk_error *err);

/* The segment contract of the SDK (plugin.h): token 0 is segment 0, position 0; then each segment
 * index grows by 0 or 1, and the position restarts at 0 in a new segment, else grows by 1. Returns
 * the first of n tokens that breaks it, or -1. */
int64_t bk_segments_first_violation(const int32_t *index, const int32_t *position, int64_t n);

/* Positions of stream `s` for the attention: NULL for the token stream (the token index itself). */
const int32_t *bk_positions_stream(const bk_positions *ps, bk_stream s);

/* encoded (B*T, C) += every embedding term's A[p]; dtheta[t] += their gradients from dencoded. */
int bk_embed_forward(const bk_positions *ps, float *encoded, bk_error *err);
int bk_embed_backward(const bk_positions *ps, const float *dencoded, float *const *dtheta, bk_error *err);

/* Rotate q and k of qkv (B*T, 3C) in place; backward applies the inverse rotation to dq and dk of
 * dqkv, turning gradients with respect to the rotated q, k into gradients of the unrotated ones. */
void bk_rotary_forward(const bk_positions *ps, float *qkv, int C, int H);
void bk_rotary_backward(const bk_positions *ps, float *dqkv, int C, int H);

#endif
