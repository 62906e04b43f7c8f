/* Attention over the position views of a rotary term (rotary_views in the SDK, model/positions.h's
 * bk_positions_views): training-free context extension (Self-Extend, ReRoPE, STRING) as exact
 * multi-pass attention.
 *
 * View v owns the pairs lo_v <= i - j < hi_v (hi_v 0: no bound; the views tile [0, inf)) and rotates q_i
 * and k_j at its own positions. Its pass runs the ordinary flash attention over a packed copy of the
 * layer's q, k, v shifted by lo_v: row t of the copy holds q of token t + lo_v and k, v of token t, so a
 * causal pass over the T - lo_v rows, masked to a window of hi_v - lo_v keys when bounded, sees exactly
 * the pairs the view owns (query t + lo_v, key j <= t), and tiles outside them are never visited. The
 * copy is rotated by the view's tables (row t: q at q_pos[t + lo], k at k_pos[t]). The passes' outputs
 * are merged by their log-sum-exps (bk_lse_merge): one softmax over every key, not an approximation.
 *
 * Backward: the flash backward of each pass from the merged output and log-sum-exp (P = exp(s - lse)
 * with the whole row's lse is each pair's true probability, D_i = dO_i . O_i the whole row's), its q, k
 * gradients rotated back by the view's tables and added into the rows they came from; v's as they are.
 *
 * All of it in fp32 storage, on the backend's copy_rows, rotary, attention_lse_forward/backward and
 * attention_merge (model/backend.h). */
#ifndef BK_VIEWS_H
#define BK_VIEWS_H

#include "model/backend.h"
#include "util/error.h"

#include <biaskit/plugin.h>

#include <stddef.h>
#include <stdint.h>

typedef struct bk_views {
    int n; /* 0: no views */
    bk_rotary_view rot[BIASKIT_MAX_ROTARY_VIEWS];
    int32_t lo[BIASKIT_MAX_ROTARY_VIEWS], hi[BIASKIT_MAX_ROTARY_VIEWS];
} bk_views;

/* Floats of backend scratch the forward (backward = 0) or the backward needs for B x T tokens. */
size_t bk_views_scratch_floats(int B, int T, int C, int H, int backward);

/* out (B, T, C) and lse (B, H, T) of the views' attention over qkv (B, T, 3C) whose q and k are not
 * rotated. */
int bk_views_forward(bk_backend *be, const bk_views *vw, float *out, float *lse, const float *qkv, float *scratch,
                     int B, int T, int C, int H, bk_error *err);

/* dqkv (B, T, 3C, gradients of the unrotated q, k, v) += the backward from dout, given the forward's qkv,
 * out and lse. */
int bk_views_backward(bk_backend *be, const bk_views *vw, float *dqkv, const float *dout, const float *qkv,
                      const float *out, const float *lse, float *scratch, int B, int T, int C, int H, bk_error *err);

#endif
