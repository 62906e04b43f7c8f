/* Positional terms that are not distance tables (docs/design.md §2.3, §3), for one batch of B x T tokens:
 *
 *   segment  the segmenting term maps each row's token ids to (segment index, position inside the
 *            segment); the segment index is the `segment` stream the attention tables and RoPE read.
 *            Segments restart in every row (every sequence or evaluation chunk starts segment 0).
 *   embed    each embedding term adds A[p] to the token embedding, p = the token index on the
 *            `token` stream, the position inside its segment on the `segment` stream.
 *   rotary   the rotary term's inverse frequencies rotate q and k of every head (rotate-half layout:
 *            pair k of a head is (x[k], x[k + hd/2])) by the angle p * inv_freq[k], p from its stream,
 *            and multiply them by the term's amplitude (1 but for YaRN's temperature): the tables hold
 *            amplitude * cos and amplitude * sin, so the rotation is amplitude * R and the backward's
 *            (the same tables, sin negated) amplitude * R^T, its exact transpose. A plugin with
 *            rotary_ctx (ABI 2) is asked for both with the length of the forward (biaskit_context), again
 *            whenever the length or the training flag changes (length-aware RoPE: PI, NTK, YaRN,
 *            dynamic scaling); one without gives fixed frequencies (rotary_frequencies) and amplitude 1.
 *
 * bk_positions_prepare() runs once per forward; backward reuses what it computed.
 *
 * On a device backend (bk_positions_set_backend; model/backend.h) the segments and the rotary angles
 * are still computed on the host (the segmenter is host code), then uploaded: what the attention, the
 * rotation and the embeddings read (bk_positions_stream, bk_positions_rotary) is in the backend's
 * memory. An embedding runs on the device through the plugin's embed_cuda / embed_backward_cuda on a
 * CUDA backend when the plugin has them; otherwise its host embed() fills a host buffer that is
 * uploaded and added (backward: dencoded is downloaded for the host embed_backward()). */
#ifndef BK_POSITIONS_H
#define BK_POSITIONS_H

#include "bias/terms.h"
#include "model/backend.h"
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
    float *inv_freq;            /* pairs: the frequencies the tables were made with */
    float *inv_freq_next;       /* pairs: what rotary_ctx() returns, checked before it replaces inv_freq */
    float amplitude;            /* what multiplies q and k after the rotation (rotary_ctx; else 1) */
    int has_rotary_ctx;         /* the rotary plugin has rotary_ctx (asked per length) */
    int32_t freq_length;        /* the length the frequencies were asked for (rotary_ctx), 0 before */
    int freq_training;          /* ... and the training flag they were asked with */
    int training;               /* the training flag of the next prepare (bk_positions_set_training; 1 at init) */
    float *decay;               /* pairs: rotary_decay's zeta_k, or NULL (no decay) */
    float decay_scale;          /* ... and its scale */
    /* (rot_rows, pairs): amplitude * cos and sin of p * inv_freq[k], p < rot_rows, for q and k; with a decay
     * q's (times zeta_k^(p/scale)) and then k's (times zeta_k^(-p/scale)), (2, rot_rows, pairs) */
    float *rot_cos, *rot_sin;
    int32_t rot_rows;
    int64_t rot_capacity;       /* floats rot_cos and rot_sin hold */
    uint64_t rot_version;       /* counts the tables' recomputations (the device copy follows it) */
    int64_t step;               /* the training step, for the crash report's plugin-call record (0: none) */
    int32_t span[BK_STREAM_COUNT]; /* bk_positions_span */

    /* rotary_views (ABI 2, appended): the views of the last prepare, n_views of them (0: the ordinary
     * rotation). View v owns the distances [view_lo[v], view_hi[v]) (view_hi 0: unbounded); its tables
     * cover the T - view_lo[v] rows of the view's packed q, k, v (model/views.h: row t holds q of token
     * t + lo and k, v of token t): amplitude * cos and sin of q_pos[t + lo] * inv_freq[k] for q, (rows,
     * pairs), then of k_pos[t] * inv_freq[k] for k, at view_off[v] floats into view_cos and view_sin. */
    int has_views;
    int32_t n_views;
    int32_t view_lo[BIASKIT_MAX_ROTARY_VIEWS], view_hi[BIASKIT_MAX_ROTARY_VIEWS];
    int64_t view_off[BIASKIT_MAX_ROTARY_VIEWS];
    double *view_pos;            /* the plugin's buffers: per view q_pos then k_pos, T values each */
    int64_t view_pos_capacity;   /* values view_pos holds */
    float *view_cos, *view_sin;
    int64_t view_capacity;       /* floats view_cos and view_sin hold */
    int64_t view_floats;         /* floats of the views' tables (each of cos, sin) */
    int32_t views_length;        /* the length the views were asked for, 0 before */
    int views_training;          /* ... and the training flag */
    uint64_t views_rot_version;  /* the rot_version (frequencies, amplitude) the view tables were made with */
    uint64_t views_version;      /* counts the view tables' recomputations */

    /* Where each embedding came from, per term (indices of set->terms): the plugin's embed_cuda /
     * embed_backward_cuda, or its host embed() / embed_backward() (the CPU, or the host fallback). */
    int64_t *cuda_embeds, *host_embeds, *cuda_embed_backwards, *host_embed_backwards;

    /* --- device backend (bk_positions_set_backend) --- */
    bk_backend *be;              /* NULL (the default) or the CPU: the host arrays above are what is read */
    int64_t dev_capacity;        /* tokens the device arrays hold */
    int dev_B, dev_T;            /* the shape whose token indices are on the device */
    int32_t *token_index_dev, *segment_index_dev, *segment_position_dev;
    float *rot_cos_dev, *rot_sin_dev;
    float *view_cos_dev, *view_sin_dev;
    int64_t view_capacity_dev;   /* floats view_cos_dev and view_sin_dev hold */
    uint64_t views_version_dev;  /* the views_version uploaded */
    int32_t rot_rows_dev;
    int64_t rot_capacity_dev;    /* floats rot_cos_dev and rot_sin_dev hold */
    uint64_t rot_version_dev;    /* the rot_version uploaded */
    float *embed_host;           /* host fallback: (B*T, C) of one term's embedding or dencoded */
    float *embed_dev;            /* the same on the device, added into encoded */
    float **embed_theta_dev;     /* per term: device theta for embed_cuda (uploaded every forward) */
    float **embed_dtheta_dev;    /* per term: device gradient of embed_backward_cuda */
    float *grad_host;            /* host staging of the largest device embedding gradient */
    unsigned char *logged;       /* per term: 1 host-path embed logged, 2 host-path gradient logged */
} bk_positions;

/* Set up for the terms of `set` (NULL: nothing to do); asks the rotary term for its frequencies (a
 * plugin with rotary_ctx: for the training length, training; a prepare of another length or flag asks
 * again). Checks them: every frequency finite, the amplitude finite and > 0, naming the plugin. */
int bk_positions_init(bk_positions *ps, const bk_term_set *set, bk_error *err);
void bk_positions_free(bk_positions *ps);

/* Whether the next prepares are for training (1, the default, as bk_bias's `training`) or an evaluation
 * (0): the biaskit_context.training a rotary_ctx() plugin is asked with. The model sets it before each
 * prepare. */
void bk_positions_set_training(bk_positions *ps, int training);

/* Compute on backend `be` from now on (the model calls it once, before the first prepare; `be` must
 * outlive the positions). The CPU keeps everything on the host, with no copies. */
int bk_positions_set_backend(bk_positions *ps, bk_backend *be, bk_error *err);

/* Segments of every row of `inputs` (B, T; host memory), the token indices and the rotary angles for
 * positions < T (a rotary_ctx() plugin asked again when T or the training flag differ from its last
 * call; the tables made again when what it returns differs), and the spans. Checks what the segmenter returns (index 0 first, steps of 0 or 1,
 * positions counting up from 0 in each segment) and names the plugin when it is wrong. On a device
 * backend, then uploads what the device reads. */
int bk_positions_prepare(bk_positions *ps, const int32_t *inputs, int B, int T, bk_error *err);

/* 1 + the largest p(i) - p(j), j <= i, over the batch of the last prepare on stream s: T on the token
 * stream, 1 + the largest last segment index of a row on the segment stream (0 without a segmenter). */
int32_t bk_positions_span(const bk_positions *ps, bk_stream s);

/* The segment contract of the SDK (plugin.h): token 0 is segment 0, position 0; then each segment
 * index grows by 0 or 1, and the position restarts at 0 in a new segment, else grows by 1. Returns
 * the first of n tokens that breaks it, or -1. */
int64_t bk_segments_first_violation(const int32_t *index, const int32_t *position, int64_t n);

/* Positions of stream `s` for the attention, in the backend's memory: NULL for the token stream (the
 * token index itself). */
const int32_t *bk_positions_stream(const bk_positions *ps, bk_stream s);

/* With a rotary term: fills `view` (cos, sin, positions in the backend's memory; positions NULL on the
 * token stream) for the backend's rotary() and returns 1; else returns 0. Valid until the next prepare. */
int bk_positions_rotary(const bk_positions *ps, bk_rotary_view *view);

/* The rotary term's views of the last prepare (rotary_views): fills views[v] (q's tables in cos, sin,
 * k's in kcos, ksin, rows T - lo[v], in the backend's memory), lo[v] and hi[v] (0: unbounded) for each
 * and returns their number; 0 without views (the ordinary rotation of bk_positions_rotary). */
int bk_positions_views(const bk_positions *ps, bk_rotary_view views[BIASKIT_MAX_ROTARY_VIEWS],
                       int32_t lo[BIASKIT_MAX_ROTARY_VIEWS], int32_t hi[BIASKIT_MAX_ROTARY_VIEWS]);

/* encoded (B*T, C; backend memory) += every embedding term's A[p]; dtheta[t] (host, per term of the
 * set) += their gradients from dencoded (backend memory). The parameters are the host theta of each
 * term (uploaded for embed_cuda on every forward: the host copy is authoritative, see bias.h). */
int bk_embed_forward(bk_positions *ps, float *encoded, bk_error *err);
int bk_embed_backward(bk_positions *ps, const float *dencoded, float *const *dtheta, bk_error *err);

#endif
