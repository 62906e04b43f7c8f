/* The model (docs/design.md §6): a decoder with no positional embedding of its own, in one of two block
 * families ([model] family). gpt2, the default:
 *
 *   x = wte[token] + the embedding terms' A[p]           (none by default)
 *   per block l:  x += attn_proj(attention(ln1(x)) with the bias tables of layer l and, when a
 *                      rotary term is configured, q and k rotated by their positions)
 *                 x += mlp_proj(gelu(mlp_fc(ln2(x))))
 *   logits = lnf(x) . wte^T            (tied output head)
 * llama (bk_llama_params): RMSNorm in place of LayerNorm, no biases, q of H heads and k, v of KV heads
 * (grouped-query attention: each key/value head serves H / KV query heads, expanded to full heads for the
 * attention, model/layers.h), heads of head_dim, the MLP x += down(silu(gate(x)) * up(x)) of ffn_dim, and
 * the output head wte or its own matrix (tied or not):
 *   per block l:  x += o(attention(rms1(x)));  x += down(swiglu(fc(rms2(x))))   (fc = [gate; up])
 *   logits = rmsf(x) . head^T
 * and with QK-norm ([model] qk_norm) each query head's and key head's hd values RMS-normalised (norm_eps)
 * with the layer's qnormw / knormw before they are rotated, as Qwen3 does.
 *
 * Every layer is a forward/backward pair run through a backend (backend.h: the CPU reference, CUDA, or
 * the CUDA code emulated on the CPU), llm.c style; the model logic below is the same for all of them.
 * Parameters live in one allocation carved into named tensors; so do their gradients and the
 * activations. On a device backend the working parameters, gradients and activations stay in device
 * memory: a step uploads the batch (and its encoder buckets) and downloads the per-token losses; the
 * host copies `params` and `grads` are refreshed only on request (bk_gpt_to_host: checkpoints).
 * Positional information comes only from the bias terms (bias/bias.h); with no terms it is NoPE. */
#ifndef BK_GPT_H
#define BK_GPT_H

#include "bias/bias.h"
#include "model/backend.h"
#include "model/positions.h"
#include "model/views.h"
#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

#define BK_GPT_N_TENSORS 16

/* The parameter tensors, in their order in memory. Shapes: L = layers, C = dim, V = vocab. */
typedef struct bk_gpt_params {
    float *wte;      /* (V, C) token embedding, also the output head */
    float *ln1w;     /* (L, C) */
    float *ln1b;     /* (L, C) */
    float *qkvw;     /* (L, 3C, C) */
    float *qkvb;     /* (L, 3C) */
    float *attprojw; /* (L, C, C) */
    float *attprojb; /* (L, C) */
    float *ln2w;     /* (L, C) */
    float *ln2b;     /* (L, C) */
    float *fcw;      /* (L, 4C, C) */
    float *fcb;      /* (L, 4C) */
    float *fcprojw;  /* (L, C, 4C) */
    float *fcprojb;  /* (L, C) */
    float *lnfw;     /* (C) */
    float *lnfb;     /* (C) */
} bk_gpt_params;

/* The llama family's tensors, in their order in memory. A = H hd (the attention's width), R = (H + 2 KV) hd,
 * F = ffn_dim. */
typedef struct bk_llama_params {
    float *wte;      /* (V, C) token embedding (and the output head when tied) */
    float *rms1w;    /* (L, C) */
    float *qkvw;     /* (L, R, C): q, then k, then v, each head's rows together */
    float *attprojw; /* (L, C, A) */
    float *rms2w;    /* (L, C) */
    float *fcw;      /* (L, 2F, C): gate, then up */
    float *fcprojw;  /* (L, C, F): down */
    float *rmsfw;    /* (C) */
    float *lmhead;   /* (V, C), untied only */
    float *qnormw;   /* (L, hd), QK-norm only: the query heads' RMSNorm weight */
    float *knormw;   /* (L, hd), QK-norm only: the key heads' */
} bk_llama_params;

/* A model's shape: the experiment's [model] (bk_gpt_shape_of) with its defaults applied. */
typedef struct bk_gpt_shape {
    int family; /* bk_model_family */
    int layers, heads, kv_heads, head_dim, dim, ffn_dim, vocab;
    int tied;
    float norm_eps;
    int qk_norm; /* llama: RMSNorm of each query and key head before the rotation */
} bk_gpt_shape;

/* Name, shape and place of one parameter tensor (checkpoints, the reference test, the optimizer). */
typedef struct bk_gpt_tensor {
    const char *name; /* "wte", "ln1w", ... as in bk_gpt_params */
    int ndim;
    int64_t shape[3];
    size_t offset;    /* first float inside params */
    size_t count;
    int decay;        /* 1 for matrices and the embedding (weight decay applies), 0 for norms and biases */
} bk_gpt_tensor;

typedef struct bk_gpt {
    int L, H, C, V;
    int family;          /* bk_model_family */
    int KV, hd, A, F;    /* key/value heads, head width, attention width H hd, MLP width (4 C for gpt2) */
    int tied;
    float eps;           /* llama: RMSNorm's epsilon */
    int qk_norm;         /* llama: QK-norm ([model] qk_norm) */
    bk_gpt_tensor tensors[BK_GPT_N_TENSORS];
    int n_tensors;
    size_t n_params;
    float *params; /* host copy (initialisation, checkpoints) */
    float *grads;  /* host copy, allocated with the working gradients */
    bk_gpt_params p, g;
    bk_backend *be;          /* computes the layers: the CPU backend unless bk_gpt_set_backend (not owned) */
    float *wparams, *wgrads; /* the working copies in be's memory; the same arrays as params, grads on the CPU */
    uint16_t *wparams16;     /* [run] precision = "bf16": wparams rounded to bf16, refreshed by every forward */
    bk_gpt_params wp, wg;
    bk_llama_params lp, lg, lwp, lwg; /* the same four views, family llama */
    /* the batch of the last forward in be's memory (aliases of the caller's arrays on the CPU), and
     * the encoder backward's buckets of its token ids */
    int32_t *d_inputs, *d_targets, *d_buckets, *h_buckets;
    int64_t batch_capacity;
    bk_batch_view batch;
    float *wlosses;          /* (B, T) per-token losses in be's memory (== losses on the CPU) */
    float *dtable_mem;       /* table gradients of one layer, BK_STREAM_COUNT x H x capacity, in be's memory */
    size_t dtable_capacity;
    bk_views views;          /* the rotary term's position views of the last forward (views.n 0: none) */
    float *views_mem;        /* their scratch (bk_views_scratch_floats) and an evaluation's lse, in be's memory */
    size_t views_capacity;   /* floats views_mem holds */
    bk_bias *bias; /* not owned */
    bk_positions pos; /* segments, embeddings and rotary angles of the last forward */

    /* activations for up to B x T tokens; `train` ones keep every layer and the attention
     * probabilities for backward, eval ones keep one layer at a time */
    int B, T, train;
    int recompute;      /* [run] recompute: a training forward keeps each layer's input, its attention's output
                           and what the attention's backward reads, and one layer's other activations; the
                           backward recomputes a layer's forward (all but the attention) before its
                           backward, with the same kernels on the same inputs, so the gradients are the same
                           bits. Set before a training forward. */
    int acts_recompute; /* the recompute the activations were laid out for */
    unsigned char frozen[BK_GPT_N_TENSORS]; /* 1: backward leaves this tensor's gradient as it is (a frozen
                                               tensor of [train] trainable): its products skip the weight
                                               gradient; the gradients into the activations still flow */
    int backward_from;  /* the lowest layer the backward reaches (0: every layer, the embedding too): above 0
                           when nothing below that layer trains (the frozen model's tensors of [train] trainable
                           with terms acting in upper layers only; bk_init_trainable sets it), so the layers
                           below are left out of the backward, which gives what trains the same bits */
    float *acts; /* in be's memory */
    size_t acts_size, dacts_size; /* floats of acts and of dacts (their gradients, training only) */
    float *dacts;
    float *losses;   /* (B, T) loss of every token of the last forward */
    int32_t *argmax; /* NULL, or host memory for (B, T) ids the caller owns: an evaluation forward (train = 0)
                        with targets writes each position's most likely next token there (the lowest id on
                        a tie); backends whose memory is the host's only */
    float loss;      /* their mean */
} bk_gpt;

/* Shapes and parameters (GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
 * LayerNorm weights 1, biases 0), deterministic for `seed`. */
int bk_gpt_init(bk_gpt *m, int layers, int heads, int dim, int vocab, bk_bias *bias, uint64_t seed, bk_error *err);
/* Any family: the shape's tensors (llama: N(0, 0.02), the output projections of attention and MLP
 * N(0, 0.02/sqrt(2L)), RMSNorm weights 1), deterministic for `seed`. */
int bk_gpt_init_shape(bk_gpt *m, const bk_gpt_shape *shape, bk_bias *bias, uint64_t seed, bk_error *err);
bk_gpt_shape bk_gpt_shape_of(const bk_experiment *exp);
void bk_gpt_free(bk_gpt *m);

/* Forward over inputs (B, T); with targets, the per-token losses and their mean. `train` keeps what
 * backward needs (probabilities of every layer); without it, memory is one layer's activations and
 * no T x T buffer is kept. The bias tables must have been computed (bk_bias_forward) for >= T. */
int bk_gpt_forward(bk_gpt *m, const int32_t *inputs, const int32_t *targets, int B, int T, int train, bk_error *err);

/* Bytes of backend memory that a forward over B x T tokens allocates for activations (with `train`, for
 * their gradients too) in a model of this shape on backend `be` (its attention decides what training
 * keeps: B*H*T*T probabilities on the CPU and with the materialized device attention, B*H*T row
 * statistics with the fused one). Evaluation keeps one layer and a bounded block of logits, so its
 * memory grows linearly with T on every backend. With bf16 storage (be->precision, [run] precision =
 * "bf16" on a device backend) the activations that feed products take 2 bytes each and an fp32 stage of
 * 3 C floats per token is added; their gradients stay fp32. Parameters, gradients of parameters,
 * optimizer state, the weights' bf16 copies (bk_gpt_parameter_bytes) and backend scratch are not
 * included. */
size_t bk_gpt_activation_bytes(bk_backend *be, int layers, int heads, int dim, int vocab, int B, int T, int train);
/* The same for a model of any family, laid out for its m->recompute: a training forward that recomputes
 * keeps every layer's input and attention output (B T (C + heads head_dim) floats a layer) and what its
 * attention backward reads, one layer's other activations, and their gradients. */
size_t bk_gpt_model_activation_bytes(const bk_gpt *m, int B, int T, int train);

/* Bytes the model keeps per parameter on its backend while training: value, gradient and AdamW's two
 * moments (4 floats), and with bf16 storage the weights' bf16 copies (2 bytes more). */
size_t bk_gpt_parameter_bytes(const bk_gpt *m);

/* Backward of the last (train) forward: grads += d(mean loss * loss_scale)/d(params), and the bias
 * terms' gradients through bk_bias_backward. The gradients of the matrices marked in m->frozen (wte,
 * qkvw, attprojw, fcw, fcprojw, lmhead) are not computed: they keep their values. */
int bk_gpt_backward(bk_gpt *m, const int32_t *inputs, const int32_t *targets, float loss_scale, bk_error *err);

/* Logits (B, T, V) of the last train forward: NULL on a device backend (use bk_gpt_copy_logits). */
const float *bk_gpt_logits(const bk_gpt *m);
/* The same copied into host memory dst (B * T * V floats), on any backend. */
int bk_gpt_copy_logits(const bk_gpt *m, float *dst, bk_error *err);

/* Attention probabilities (B, H, T, T) of `layer` kept by the last forward with train = 1: row
 * (b, h, i) holds P[i][j] for keys j <= i (entries j > i are 0). On the CPU backend with the blocked
 * kernel only ([run] attention = "auto" or "materialized"): NULL when the model computes on a device or
 * with the CPU's fused attention (they keep row statistics instead: e.g. --set run.device=cpu
 * --set run.attention=auto), when the last forward was not a training one, in a layer with position views
 * (rotary_views: passes merged by their log-sum-exps keep no probabilities), or for a layer out of range.
 * Valid until the next forward. */
const float *bk_gpt_attention_probs(const bk_gpt *m, int layer);

/* Allocate the (zeroed) gradients, once; m->g and m->wg then point into them. */
int bk_gpt_alloc_grads(bk_gpt *m, bk_error *err);
int bk_gpt_zero_grad(bk_gpt *m, bk_error *err);

/* Move the model to backend `be` (not owned; it must outlive the model), once, before the first
 * forward: the working parameters (and gradients, when allocated) are copied there, and the model's
 * positions (segments, rotary angles) follow. The CPU backend is where bk_gpt_init leaves it. */
int bk_gpt_set_backend(bk_gpt *m, bk_backend *be, bk_error *err);
/* Host copies from the working ones: params, and grads when allocated. No-op on the CPU. */
int bk_gpt_to_host(bk_gpt *m, bk_error *err);
/* Working parameters from the host copy `params` (after a checkpoint load). No-op on the CPU. */
int bk_gpt_to_device(bk_gpt *m, bk_error *err);

#endif
