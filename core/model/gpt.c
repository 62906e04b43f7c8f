#include "model/gpt.h"
#include "model/layers.h"

#include "util/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define INIT_STD 0.02
#define EVAL_LOGIT_ROWS 256 /* evaluation computes logits this many tokens at a time */

/* Activation tensors, carved out of one allocation. Per-layer tensors hold La layers: every layer
 * when training, one (reused) when evaluating or when training recomputes (bk_gpt.recompute). Recompute
 * keeps every layer of res3 (each layer's output, so the next one's input; its gradient too), atty and att
 * (the attention's output and what its backward reads: the recomputation skips the attention itself).
 * With bf16 storage (bf16_storage below) ln1, qkv, atty, ln2, fch_gelu and lnf hold bf16 values
 * (uint16_t, in half the room) and `stage` is the fp32 room the qkv product (bias, RoPE) is computed in
 * before it is rounded (with llama also the RMSNorm and SwiGLU outputs); their gradients stay fp32. */
typedef struct acts {
    float *encoded, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *attproj, *res2, *ln2, *ln2_mean, *ln2_rstd,
        *fch, *fch_gelu, *fcproj, *res3, *lnf, *lnf_mean, *lnf_rstd, *logits, *probs, *stage, *qkvr, *qkraw, *qkrstd;
} acts;
/* Family llama (empty slots for gpt2, so that its layout is the same): ln1, ln2 and lnf hold the RMSNorm
 * outputs and their rstd (no mean); qkv the q, k, v of every query head (the key/value heads expanded,
 * rotated: what the attention reads); fch the gate and up products (2F), fch_gelu silu(gate) up (F); qkvr
 * the q/k/v product of one layer before the expansion ((H + 2 KV) hd per token; its gradient too). With
 * QK-norm, qkraw keeps each layer's q/k/v product as it comes out (the normalisation's input) and qkrstd
 * the rstd of its H + KV heads, and qkvr holds the product with q and k normalised; qkraw's gradient is
 * one layer's. */

#define N_ACTS (sizeof(acts) / sizeof(float *))

/* [run] precision = "bf16" on a device backend (model/backend.h) */
static int bf16_storage(const bk_backend *be)
{
    return be->on_device && be->precision == BK_PRECISION_BF16;
}

/* The floats' room of n values stored in bf16 (b16) or fp32: bf16 slots are whole 16-byte units. */
static size_t room(int b16, size_t n)
{
    return b16 ? (n + 7) / 8 * 4 : n;
}

static size_t larger(size_t a, size_t b)
{
    return a > b ? a : b;
}

/* Slot sizes in floats of the activations (grads = 0) or of their gradients (grads = 1). Nothing takes
 * the gradient of the saved attention (backward reads a.att and keeps dS in its own scratch) or of the
 * probabilities (crossentropy_backward writes d.logits from a.probs): those two gradient slots are
 * empty. */
static void shape_sizes(bk_backend *be, const bk_gpt_shape *sh, int B, int T, int train, int recompute, int grads,
                        size_t sizes[N_ACTS])
{
    size_t BT = (size_t)B * T, C = (size_t)sh->dim, V = (size_t)sh->vocab;
    const size_t Lr = train ? (size_t)sh->layers : 1, La = recompute ? 1 : Lr; /* slots of res3, of the others */
    const size_t Lk = grads ? La : Lr; /* of atty and att */
    size_t rows = train ? BT : (BT < EVAL_LOGIT_ROWS ? BT : EVAL_LOGIT_ROWS);
    const int h = bf16_storage(be) && !grads; /* bf16 slots */
    const int llama = sh->family == BK_FAMILY_LLAMA;
    const size_t A = (size_t)sh->heads * sh->head_dim, F = (size_t)sh->ffn_dim;
    const size_t R = llama ? (size_t)(sh->heads + 2 * sh->kv_heads) * sh->head_dim : 0;
    const size_t means = llama ? 0 : 1; /* RMSNorm keeps no mean */
    /* the stage's floats per token: the q/k/v, and with llama the RMSNorm and SwiGLU outputs (their backend
     * operations write fp32) */
    const size_t stage = llama ? larger(3 * A, larger(C, F)) : 3 * A;
    size_t s[N_ACTS] = {
        BT * C,                                                     /* encoded */
        room(h, La * BT * C), means * La * BT, La * BT,             /* ln1, mean, rstd */
        room(h, La * BT * 3 * A), room(h, Lk * BT * A),             /* qkv, atty */
        train && !grads ? Lk * be->attention_saved(be, B, T, sh->heads) : 0, /* att: what attention backward reads */
        La * BT * C, La * BT * C,                                   /* attproj, res2 */
        room(h, La * BT * C), means * La * BT, La * BT,             /* ln2, mean, rstd */
        La * BT * (llama ? 2 : 1) * F, room(h, La * BT * F), La * BT * C, Lr * BT * C, /* fch, fch_gelu, fcproj, res3 */
        room(h, BT * C), means * BT, BT,                            /* lnf, mean, rstd */
        rows * V, train && !grads ? BT * V : 0,                     /* logits, probs */
        h ? BT * stage : 0,                                         /* stage */
        BT * R,                                                     /* qkvr */
        sh->qk_norm ? (grads ? 1 : La) * BT * R : 0,                /* qkraw */
        sh->qk_norm && !grads ? La * BT * (size_t)(sh->heads + sh->kv_heads) : 0, /* qkrstd */
    };
    memcpy(sizes, s, sizeof s);
}

/* The shape of the gpt2 model of these sizes. */
static bk_gpt_shape gpt2_shape(int layers, int heads, int dim, int vocab)
{
    bk_gpt_shape sh = {BK_FAMILY_GPT2, layers, heads, heads, dim / heads, dim, 4 * dim, vocab, 1, 1e-5f, 0};
    return sh;
}

static bk_gpt_shape model_shape(const bk_gpt *m)
{
    bk_gpt_shape sh = {m->family, m->L, m->H, m->KV, m->hd, m->C, m->F, m->V, m->tied, m->eps, m->qk_norm};
    return sh;
}

/* The layout of the model's activations: for its recompute when training. */
static int recomputes(const bk_gpt *m, int train)
{
    return train && m->recompute;
}

/* The sizes of the activations (grads = 0) or their gradients (grads = 1) laid out for recompute. */
static void layout_sizes(const bk_gpt *m, int B, int T, int train, int recompute, int grads, size_t sizes[N_ACTS])
{
    const bk_gpt_shape sh = model_shape(m);
    shape_sizes(m->be, &sh, B, T, train, recompute, grads, sizes);
}

/* ... of the activations the model holds (reserve_acts laid them out) */
static void act_sizes(const bk_gpt *m, int B, int T, int train, int grads, size_t sizes[N_ACTS])
{
    layout_sizes(m, B, T, train, train && m->acts_recompute, grads, sizes);
}

static size_t total_of(const size_t sizes[N_ACTS])
{
    size_t total = 0;
    for (size_t i = 0; i < N_ACTS; i++)
        total += sizes[i];
    return total;
}

static size_t activation_bytes(bk_backend *be, const bk_gpt_shape *sh, int B, int T, int train, int recompute)
{
    size_t sizes[N_ACTS], total;
    shape_sizes(be, sh, B, T, train, recompute, 0, sizes);
    total = total_of(sizes);
    if (train) { /* training allocates their gradients too */
        shape_sizes(be, sh, B, T, train, recompute, 1, sizes);
        total += total_of(sizes);
    }
    return total * sizeof(float);
}

size_t bk_gpt_activation_bytes(bk_backend *be, int layers, int heads, int dim, int vocab, int B, int T, int train)
{
    const bk_gpt_shape sh = gpt2_shape(layers, heads, dim, vocab);
    return activation_bytes(be, &sh, B, T, train, 0);
}

size_t bk_gpt_model_activation_bytes(const bk_gpt *m, int B, int T, int train)
{
    const bk_gpt_shape sh = model_shape(m);
    return activation_bytes(m->be, &sh, B, T, train, recomputes(m, train));
}

size_t bk_gpt_parameter_bytes(const bk_gpt *m)
{
    return m->n_params * (4 * sizeof(float) + (bf16_storage(m->be) ? sizeof(uint16_t) : 0));
}

static void carve(float *base, const size_t sizes[N_ACTS], acts *a)
{
    float **ptr = (float **)a;
    for (size_t i = 0; i < N_ACTS; i++) {
        ptr[i] = base;
        base += sizes[i];
    }
}

static void release(bk_gpt *m, void *ptr)
{
    if (ptr)
        m->be->release(m->be, ptr);
}

static void free_acts(bk_gpt *m)
{
    release(m, m->acts);
    release(m, m->dacts);
    m->dacts_size = 0;
    if (m->wlosses != m->losses)
        release(m, m->wlosses);
    free(m->losses);
    m->acts = m->dacts = m->wlosses = m->losses = NULL;
    m->acts_size = 0;
}

static int reserve_acts(bk_gpt *m, int B, int T, int train, bk_error *err)
{
    if (m->acts && B == m->B && T == m->T && train == m->train && recomputes(m, train) == m->acts_recompute)
        return BK_OK;
    const size_t bytes = bk_gpt_model_activation_bytes(m, B, T, train);
    const int recompute = recomputes(m, train);
    size_t sizes[N_ACTS];
    layout_sizes(m, B, T, train, recompute, 0, sizes);
    const size_t total = total_of(sizes); /* floats of acts */
    layout_sizes(m, B, T, train, recompute, 1, sizes);
    const size_t dtotal = train ? total_of(sizes) : 0; /* of dacts */
    free_acts(m);
    bk_backend *be = m->be;
    int rc = be->alloc(be, (void **)&m->acts, total * sizeof(float), err);
    if (!rc && train)
        rc = be->alloc(be, (void **)&m->dacts, dtotal * sizeof(float), err);
    if (!rc && !(m->losses = malloc((size_t)B * T * sizeof(float))))
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for %d x %d losses", B, T);
    if (!rc && be->on_device)
        rc = be->alloc(be, (void **)&m->wlosses, (size_t)B * T * sizeof(float), err);
    else
        m->wlosses = m->losses;
    if (rc) {
        free_acts(m);
        return bk_error_prefix(err, "activations of %d x %d tokens (%.1f GiB on %s): ", B, T,
                               (double)bytes / (1024.0 * 1024 * 1024), be->name);
    }
    m->acts_size = total, m->dacts_size = dtotal;
    m->B = B, m->T = T, m->train = train, m->acts_recompute = recompute;
    return BK_OK;
}

/* The batch in the backend's memory; on the CPU the caller's arrays themselves. With `train`, the
 * buckets of the token ids for the encoder backward (bk_batch_buckets). */
static int upload_batch(bk_gpt *m, const int32_t *inputs, const int32_t *targets, int B, int T, int train,
                        bk_error *err)
{
    bk_backend *be = m->be;
    const int64_t n = (int64_t)B * T;
    bk_batch_view *bv = &m->batch;
    memset(bv, 0, sizeof *bv);
    bv->inputs_host = inputs;
    if (n > m->batch_capacity) {
        release(m, m->d_inputs), release(m, m->d_targets), release(m, m->d_buckets);
        free(m->h_buckets);
        m->d_inputs = m->d_targets = m->d_buckets = m->h_buckets = NULL;
        m->batch_capacity = 0;
        size_t bytes = (size_t)n * sizeof(int32_t), bucket_bytes = 3 * (size_t)(n + 1) * sizeof(int32_t);
        int rc = BK_OK;
        if (be->on_device && ((rc = be->alloc(be, (void **)&m->d_inputs, bytes, err)) ||
                              (rc = be->alloc(be, (void **)&m->d_targets, bytes, err)) ||
                              (rc = be->alloc(be, (void **)&m->d_buckets, bucket_bytes, err))))
            return bk_error_prefix(err, "the token ids of a batch of %lld tokens on the %s backend: ", (long long)n,
                                   be->name);
        if (be->on_device && !(m->h_buckets = malloc(bucket_bytes)))
            return bk_fail(err, BK_ERR_NOMEM, "out of memory for the buckets of %lld tokens", (long long)n);
        m->batch_capacity = n;
    }
    if (!be->on_device) {
        bv->inputs = inputs, bv->targets = targets;
        return BK_OK;
    }
    int rc = be->upload(be, m->d_inputs, inputs, (size_t)n * sizeof(int32_t), err);
    if (!rc && targets)
        rc = be->upload(be, m->d_targets, targets, (size_t)n * sizeof(int32_t), err);
    if (rc)
        return rc;
    bv->inputs = m->d_inputs;
    bv->targets = targets ? m->d_targets : NULL;
    if (train) {
        int32_t *ids = m->h_buckets, *start = ids + n + 1, *tokens = start + n + 1;
        bv->n_buckets = bk_batch_buckets(inputs, n, ids, start, tokens);
        if ((rc = be->upload(be, m->d_buckets, m->h_buckets, 3 * (size_t)(n + 1) * sizeof(int32_t), err)))
            return rc;
        bv->bucket_ids = m->d_buckets;
        bv->bucket_start = m->d_buckets + n + 1;
        bv->bucket_tokens = m->d_buckets + 2 * (n + 1);
    }
    return BK_OK;
}

static void set_tensor(bk_gpt *m, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2, int decay,
                       size_t *offset)
{
    bk_gpt_tensor *t = &m->tensors[m->n_tensors++];
    t->name = name;
    t->ndim = ndim;
    t->shape[0] = d0, t->shape[1] = d1, t->shape[2] = d2;
    t->count = (size_t)d0 * (size_t)(ndim > 1 ? d1 : 1) * (size_t)(ndim > 2 ? d2 : 1);
    t->offset = *offset;
    t->decay = decay;
    *offset += t->count;
}

/* The llama family's tensors in the order of bk_llama_params' members (some are optional: lmhead,
 * qnormw, knormw). */
static const char *const llama_members[] = {"wte",     "rms1w", "qkvw",   "attprojw", "rms2w", "fcw",
                                            "fcprojw", "rmsfw", "lmhead", "qnormw",   "knormw"};

/* The views of one copy of the parameters (or their gradients) at base: the family's struct (llama: by
 * name, the optional members NULL when absent). */
static void point(const bk_gpt *m, float *base, bk_gpt_params *p, bk_llama_params *lp)
{
    if (m->family == BK_FAMILY_LLAMA) {
        memset(lp, 0, sizeof *lp);
        float **ptr = (float **)lp;
        for (int i = 0; i < m->n_tensors; i++)
            for (size_t k = 0; k < sizeof llama_members / sizeof llama_members[0]; k++)
                if (!strcmp(m->tensors[i].name, llama_members[k]))
                    ptr[k] = base + m->tensors[i].offset;
        return;
    }
    float **ptr = (float **)p;
    for (int i = 0; i < m->n_tensors; i++)
        ptr[i] = base + m->tensors[i].offset;
}

bk_gpt_shape bk_gpt_shape_of(const bk_experiment *exp)
{
    bk_gpt_shape sh = gpt2_shape((int)exp->model.layers, (int)exp->model.heads, (int)exp->model.dim,
                                 (int)exp->model.vocab);
    if (exp->model.family == BK_FAMILY_LLAMA) {
        sh.family = BK_FAMILY_LLAMA;
        sh.kv_heads = (int)bk_experiment_kv_heads(exp);
        sh.head_dim = (int)bk_experiment_head_dim(exp);
        sh.ffn_dim = (int)exp->model.ffn_dim;
        sh.tied = exp->model.tied != 0;
        sh.qk_norm = exp->model.qk_norm != 0;
        sh.norm_eps = (float)exp->model.norm_eps;
    }
    return sh;
}

int bk_gpt_init(bk_gpt *m, int layers, int heads, int dim, int vocab, bk_bias *bias, uint64_t seed, bk_error *err)
{
    if (layers < 1 || heads < 1 || dim < 1 || vocab < 2 || dim % heads) {
        memset(m, 0, sizeof *m);
        return bk_fail(err, BK_ERR_INVALID, "model shape: layers %d, heads %d, dim %d, vocab %d is not valid", layers,
                       heads, dim, vocab);
    }
    const bk_gpt_shape sh = gpt2_shape(layers, heads, dim, vocab);
    return bk_gpt_init_shape(m, &sh, bias, seed, err);
}

/* The tensors of the shape's family, in the order of its params struct. */
static void set_tensors(bk_gpt *m, size_t *off)
{
    const int64_t L = m->L, C = m->C, V = m->V, A = m->A, F = m->F, R = (int64_t)(m->H + 2 * m->KV) * m->hd;
    if (m->family == BK_FAMILY_LLAMA) { /* the order of bk_llama_params */
        set_tensor(m, "wte", 2, V, C, 0, 1, off);
        set_tensor(m, "rms1w", 2, L, C, 0, 0, off);
        set_tensor(m, "qkvw", 3, L, R, C, 1, off);
        set_tensor(m, "attprojw", 3, L, C, A, 1, off);
        set_tensor(m, "rms2w", 2, L, C, 0, 0, off);
        set_tensor(m, "fcw", 3, L, 2 * F, C, 1, off);
        set_tensor(m, "fcprojw", 3, L, C, F, 1, off);
        set_tensor(m, "rmsfw", 1, C, 0, 0, 0, off);
        if (!m->tied)
            set_tensor(m, "lmhead", 2, V, C, 0, 1, off);
        if (m->qk_norm) {
            set_tensor(m, "qnormw", 2, L, m->hd, 0, 0, off);
            set_tensor(m, "knormw", 2, L, m->hd, 0, 0, off);
        }
        return;
    }
    /* the order of bk_gpt_params */
    set_tensor(m, "wte", 2, V, C, 0, 1, off);
    set_tensor(m, "ln1w", 2, L, C, 0, 0, off);
    set_tensor(m, "ln1b", 2, L, C, 0, 0, off);
    set_tensor(m, "qkvw", 3, L, 3 * C, C, 1, off);
    set_tensor(m, "qkvb", 2, L, 3 * C, 0, 0, off);
    set_tensor(m, "attprojw", 3, L, C, C, 1, off);
    set_tensor(m, "attprojb", 2, L, C, 0, 0, off);
    set_tensor(m, "ln2w", 2, L, C, 0, 0, off);
    set_tensor(m, "ln2b", 2, L, C, 0, 0, off);
    set_tensor(m, "fcw", 3, L, 4 * C, C, 1, off);
    set_tensor(m, "fcb", 2, L, 4 * C, 0, 0, off);
    set_tensor(m, "fcprojw", 3, L, C, 4 * C, 1, off);
    set_tensor(m, "fcprojb", 2, L, C, 0, 0, off);
    set_tensor(m, "lnfw", 1, C, 0, 0, 0, off);
    set_tensor(m, "lnfb", 1, C, 0, 0, 0, off);
}

/* The tensors a block's residual branch ends with (initialised smaller, GPT-2's scheme) and the norms'
 * weights (initialised to 1), in both families. */
static int is_residual_projection(const char *name)
{
    return !strcmp(name, "attprojw") || !strcmp(name, "fcprojw");
}

static int is_norm_weight(const char *name)
{
    return !strcmp(name, "ln1w") || !strcmp(name, "ln2w") || !strcmp(name, "lnfw") || !strcmp(name, "rms1w") ||
           !strcmp(name, "rms2w") || !strcmp(name, "rmsfw") || !strcmp(name, "qnormw") || !strcmp(name, "knormw");
}

int bk_gpt_init_shape(bk_gpt *m, const bk_gpt_shape *sh, bk_bias *bias, uint64_t seed, bk_error *err)
{
    memset(m, 0, sizeof *m);
    const int llama = sh->family == BK_FAMILY_LLAMA;
    if (sh->layers < 1 || sh->heads < 1 || sh->dim < 1 || sh->vocab < 2 || sh->head_dim < 1 || sh->kv_heads < 1 ||
        sh->heads % sh->kv_heads || sh->ffn_dim < 1 || (!llama && sh->heads * sh->head_dim != sh->dim) ||
        (llama && !(sh->norm_eps > 0.0f)))
        return bk_fail(err, BK_ERR_INVALID,
                       "model shape: family %s, layers %d, heads %d, kv_heads %d, head_dim %d, dim %d, ffn_dim %d, "
                       "vocab %d is not valid",
                       llama ? "llama" : "gpt2", sh->layers, sh->heads, sh->kv_heads, sh->head_dim, sh->dim,
                       sh->ffn_dim, sh->vocab);
    m->L = sh->layers, m->H = sh->heads, m->C = sh->dim, m->V = sh->vocab;
    m->family = sh->family, m->KV = sh->kv_heads, m->hd = sh->head_dim, m->A = sh->heads * sh->head_dim;
    m->F = sh->ffn_dim, m->tied = llama ? sh->tied : 1, m->eps = sh->norm_eps, m->qk_norm = llama && sh->qk_norm;
    m->bias = bias;
    int rc = bk_positions_init(&m->pos, bias ? bias->set : NULL, err);
    if (rc) {
        bk_positions_free(&m->pos);
        return rc;
    }
    size_t off = 0;
    set_tensors(m, &off);
    m->n_params = off;
    m->be = bk_backend_cpu();
    if (!(m->params = malloc(off * sizeof(float)))) {
        bk_positions_free(&m->pos);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for %zu parameters", off);
    }
    m->wparams = m->params;
    point(m, m->params, &m->wp, &m->lwp);
    point(m, m->params, &m->p, &m->lp);

    bk_rng rng = {bk_derive_seed(seed, 0x6d6f64656c, 0)}; /* "model" */
    double residual_std = INIT_STD / sqrt(2.0 * sh->layers);
    for (int i = 0; i < m->n_tensors; i++) {
        const bk_gpt_tensor *t = &m->tensors[i];
        float *x = m->params + t->offset;
        const int norm = is_norm_weight(t->name);
        double std = is_residual_projection(t->name) ? residual_std : INIT_STD;
        for (size_t k = 0; k < t->count; k++)
            x[k] = t->decay ? (float)(std * bk_rng_normal(&rng)) : norm ? 1.0f : 0.0f;
    }
    return BK_OK;
}

void bk_gpt_free(bk_gpt *m)
{
    if (!m)
        return;
    if (m->be) {
        free_acts(m);
        if (m->wparams != m->params)
            release(m, m->wparams);
        release(m, m->wparams16);
        if (m->wgrads != m->grads)
            release(m, m->wgrads);
        if (m->be->on_device)
            release(m, m->d_inputs), release(m, m->d_targets), release(m, m->d_buckets);
        release(m, m->dtable_mem);
        release(m, m->views_mem);
    }
    free(m->params);
    free(m->grads);
    free(m->h_buckets);
    bk_positions_free(&m->pos);
    memset(m, 0, sizeof *m);
}

int bk_gpt_alloc_grads(bk_gpt *m, bk_error *err)
{
    if (m->grads)
        return BK_OK;
    if (!(m->grads = calloc(m->n_params, sizeof(float))))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for %zu gradients", m->n_params);
    if (!m->be->on_device)
        m->wgrads = m->grads;
    else {
        int rc = m->be->alloc(m->be, (void **)&m->wgrads, m->n_params * sizeof(float), err);
        if (rc) {
            free(m->grads);
            m->grads = NULL;
            return bk_error_prefix(err, "%zu gradients: ", m->n_params);
        }
    }
    point(m, m->grads, &m->g, &m->lg);
    point(m, m->wgrads, &m->wg, &m->lwg);
    return BK_OK;
}

int bk_gpt_zero_grad(bk_gpt *m, bk_error *err)
{
    if (!m->wgrads)
        return BK_OK;
    return m->be->zero(m->be, m->wgrads, m->n_params * sizeof(float), err);
}

int bk_gpt_set_backend(bk_gpt *m, bk_backend *be, bk_error *err)
{
    if (be == m->be)
        return BK_OK;
    if (m->be->on_device || m->acts)
        return bk_fail(err, BK_ERR_INVALID, "the model can move to another backend only once, before its first forward "
                       "(it is on %s)", m->be->name);
    int rc = bk_positions_set_backend(&m->pos, be, err);
    if (rc)
        return rc;
    m->be = be;
    if (!be->on_device)
        return BK_OK;
    m->wparams = NULL, m->wgrads = NULL;
    const size_t bytes = m->n_params * sizeof(float);
    if ((rc = be->alloc(be, (void **)&m->wparams, bytes, err)) ||
        (rc = be->upload(be, m->wparams, m->params, bytes, err)) ||
        (m->grads && ((rc = be->alloc(be, (void **)&m->wgrads, bytes, err)) ||
                      (rc = be->upload(be, m->wgrads, m->grads, bytes, err))))) {
        release(m, m->wparams), release(m, m->wgrads);
        m->wparams = m->params, m->wgrads = m->grads;
        m->be = bk_backend_cpu();
        return bk_error_prefix(err, "moving %zu model parameters to %s: ", m->n_params, be->name);
    }
    point(m, m->wparams, &m->wp, &m->lwp);
    if (m->wgrads)
        point(m, m->wgrads, &m->wg, &m->lwg);
    return BK_OK;
}

int bk_gpt_to_host(bk_gpt *m, bk_error *err)
{
    if (!m->be->on_device)
        return BK_OK;
    const size_t bytes = m->n_params * sizeof(float);
    int rc = m->be->download(m->be, m->params, m->wparams, bytes, err);
    if (!rc && m->grads)
        rc = m->be->download(m->be, m->grads, m->wgrads, bytes, err);
    return rc;
}

int bk_gpt_to_device(bk_gpt *m, bk_error *err)
{
    if (!m->be->on_device)
        return BK_OK;
    return m->be->upload(m->be, m->wparams, m->params, m->n_params * sizeof(float), err);
}

static float *logits_of(const bk_gpt *m)
{
    size_t sizes[N_ACTS];
    act_sizes(m, m->B, m->T, 1, 0, sizes);
    acts a;
    carve(m->acts, sizes, &a);
    return a.logits;
}

const float *bk_gpt_logits(const bk_gpt *m)
{
    if (!m->acts || !m->train || m->be->on_device)
        return NULL;
    return logits_of(m);
}

int bk_gpt_copy_logits(const bk_gpt *m, float *dst, bk_error *err)
{
    if (!m->acts || !m->train)
        return bk_fail(err, BK_ERR_INVALID, "no logits: they are kept by a training forward pass only");
    return m->be->download(m->be, dst, logits_of(m), (size_t)m->B * m->T * m->V * sizeof(float), err);
}

const float *bk_gpt_attention_probs(const bk_gpt *m, int layer)
{
    if (!m->acts || !m->train || m->be->kind != BK_BACKEND_CPU || m->be->attention == BK_ATTENTION_FUSED ||
        layer < 0 || layer >= m->L)
        return NULL;
    if (m->views.n && m->pos.set && bk_term_on_layer(&m->pos.set->terms[m->pos.set->rotary], layer))
        return NULL; /* the layer's position views keep their merged lse there, not probabilities */
    size_t sizes[N_ACTS];
    act_sizes(m, m->B, m->T, 1, 0, sizes);
    acts a;
    carve(m->acts, sizes, &a);
    return a.att + (size_t)layer * m->be->attention_saved(m->be, m->B, m->T, m->H);
}

static void attention_bias(const bk_gpt *m, int layer, bk_attention_bias *ab)
{
    memset(ab, 0, sizeof *ab);
    if (!m->bias)
        return;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        ab->table[s] = bk_bias_table(m->bias, layer, (bk_stream)s);
        ab->positions[s] = ab->table[s] ? bk_positions_stream(&m->pos, (bk_stream)s) : NULL;
        ab->span[s] = ab->table[s] ? bk_positions_span(&m->pos, (bk_stream)s) : 0;
    }
    ab->distances = m->bias->distances;
    bk_bias_attention(m->bias, layer, ab);
}

/* --- bf16 storage --------------------------------------------------------------------------------
 * The weights' bf16 copies (m->wparams16) have the working parameters' layout: the copy of a weight is
 * at the same offset. The products run on whichever storage their input has (inp16 set: bf16). */
static const uint16_t *w16(const bk_gpt *m, const float *w)
{
    return m->wparams16 + (w - m->wparams);
}

/* The storage of the saved activations and of the weights the products read (model/backend.h). */
static bk_storage storage_of(const bk_backend *be)
{
    return bf16_storage(be) ? BK_STORAGE_BF16 : BK_STORAGE_FP32;
}

/* The weights of a product in storage s: the fp32 master weights, or their bf16 copies. */
static const void *weights_in(const bk_gpt *m, bk_storage s, const float *w)
{
    return s == BK_STORAGE_BF16 ? (const void *)w16(m, w) : (const void *)w;
}

static int linear_forward(bk_gpt *m, bk_storage s, float *out, const void *inp, const float *w, const float *bias,
                          int N, int C, int OC, bk_error *err)
{
    return m->be->matmul_forward(m->be, s, out, inp, weights_in(m, s, w), bias, N, C, OC, err);
}

static int linear_backward(bk_gpt *m, bk_storage s, float *dinp, float *dw, float *db, const float *dout,
                           const void *inp, const float *w, int N, int C, int OC, bk_error *err)
{
    return m->be->matmul_backward(m->be, s, dinp, dw, db, dout, inp, weights_in(m, s, w), N, C, OC, err);
}

/* Layer la's saved inputs of the products and the attention, in storage s (their buffers are sized for
 * fp32; bf16 values take the front half). */
typedef struct stored {
    void *ln1, *qkv, *atty, *ln2, *fch_gelu;
} stored;

static void *at_value(void *base, bk_storage s, size_t index)
{
    return (char *)base + index * bk_storage_bytes(s);
}

static stored stored_of(const bk_gpt *m, const acts *a, bk_storage s, size_t la, size_t lk)
{
    const size_t BT = (size_t)m->B * m->T, C = (size_t)m->C, A = (size_t)m->A, F = (size_t)m->F;
    stored st = {at_value(a->ln1, s, la * BT * C), at_value(a->qkv, s, la * BT * 3 * A),
                 at_value(a->atty, s, lk * BT * A), at_value(a->ln2, s, la * BT * C),
                 at_value(a->fch_gelu, s, la * BT * F)};
    return st;
}

/* A row program's fp32 output `out` kept in storage s at `kept`: rounded from the stage (out is the stage)
 * with bf16 storage; with fp32 it was written in place (out is kept). */
static int keep(bk_backend *be, bk_storage s, void *kept, const float *out, size_t n, bk_error *err)
{
    return s == BK_STORAGE_BF16 ? be->cast_bf16(be, (uint16_t *)kept, out, n, err) : BK_OK;
}

/* The attention's output gradient dO (n values) as the attention backward reads it in storage s: as it
 * is, or rounded to bf16 in the stage. */
static int attention_dout(bk_backend *be, bk_storage s, const acts *a, const float *datty, size_t n,
                          const void **dout, bk_error *err)
{
    *dout = datty;
    if (s != BK_STORAGE_BF16)
        return BK_OK;
    *dout = a->stage;
    return be->cast_bf16(be, (uint16_t *)a->stage, datty, n, err);
}

/* Every backend call below returns BK_OK or fails with err set: stop at the first failure. */
#define TRY(call)                   \
    do {                            \
        if ((rc = (call)) != BK_OK) \
            goto fail;              \
    } while (0)

/* The slots of layer l's activations: in training every layer its own, or with recompute slot 0 for all
 * but res3, atty and att (every layer keeps its own); in evaluation slot 0 for all, the input (res3) read
 * before the layer rewrites it. */
typedef struct layer_slots {
    size_t ls;             /* slot of the per-layer activations */
    size_t lk;             /* of atty and att (recompute keeps every layer's) */
    int slots;             /* how many slots they have (the content term's too) */
    const float *residual; /* the layer's input: a.encoded or the previous layer's res3 */
    float *res3;           /* its output */
} layer_slots;

static layer_slots slots_of(const bk_gpt *m, const acts *a, int l, int train, int recompute)
{
    const size_t BTC = (size_t)m->B * m->T * m->C;
    layer_slots s;
    s.ls = train && !recompute ? (size_t)l : 0;
    s.lk = train ? (size_t)l : 0;
    s.slots = train && !recompute ? m->L : 1;
    const size_t lr = train ? (size_t)l : 0; /* res3's slot; eval: one, read as the input before it is rewritten */
    s.residual = l == 0 ? a->encoded : a->res3 + (train ? lr - 1 : 0) * BTC;
    s.res3 = a->res3 + lr * BTC;
    return s;
}

/* The position views of a layer whose rotation is rot (rotary_at): the rotary term's views, when it has
 * some, else NULL (the ordinary rotation and attention). */
static const bk_views *views_at(const bk_gpt *m, const bk_rotary_view *rot)
{
    return rot && m->views.n ? &m->views : NULL;
}

/* The lse of an evaluation forward's views (a training one keeps them where the attention's saved go). */
static float *views_lse(const bk_gpt *m)
{
    return m->views_mem + bk_views_scratch_floats(m->B, m->T, m->A, m->H, m->train);
}

/* Before a forward with views: fp32 storage, no other term in the attention of a layer they act in, and
 * the scratch. */
static int views_ready(bk_gpt *m, int B, int T, int train, bk_error *err)
{
    const bk_term_set *set = m->pos.set;
    const bk_term *rt = &set->terms[set->rotary];
    if (storage_of(m->be) == BK_STORAGE_BF16)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "term '%s' (plugin %s): its position views (rotary_views) compute in fp32; [run] precision "
                       "= \"bf16\" keeps q, k, v in bf16: use precision = \"fp32\"",
                       rt->label, rt->plugin->desc->name);
    for (int l = 0; l < m->L; l++)
        for (int k = 0; bk_term_on_layer(rt, l) && k < set->n; k++) {
            const bk_term *t = &set->terms[k];
            if (k != set->rotary && bk_term_on_layer(t, l) &&
                (bk_term_in_attention(t) || (t->caps & BIASKIT_CAP_MASK)))
                return bk_fail(err, BK_ERR_UNSUPPORTED,
                               "term '%s' (plugin %s) acts in the attention of layer %d, where term '%s' (plugin %s) "
                               "has position views (rotary_views): the views' passes take the rotary term alone; "
                               "expected no other attention term in its layers (see [[term]] layers)",
                               t->label, t->plugin->desc->name, l, rt->label, rt->plugin->desc->name);
        }
    const size_t need = bk_views_scratch_floats(B, T, m->A, m->H, train) + (size_t)B * m->H * T;
    if (need > m->views_capacity) {
        release(m, m->views_mem);
        m->views_mem = NULL, m->views_capacity = 0;
        int rc = m->be->alloc(m->be, (void **)&m->views_mem, need * sizeof(float), err);
        if (rc)
            return bk_error_prefix(err, "position views' scratch (%zu floats): ", need);
        m->views_capacity = need;
    }
    return BK_OK;
}

/* A layer's attention forward in storage s: the views' passes (fp32; the lse into saved when training)
 * or the backend's attention. W: the attention's width (H heads of hd). */
static int layer_attention(bk_gpt *m, int l, bk_storage s, void *out, float *saved, const void *qkv,
                           const bk_attention_bias *ab, const bk_views *vw, int W, bk_error *err)
{
    bk_backend *be = m->be;
    const int rc = vw ? bk_views_forward(be, vw, (float *)out, saved ? saved : views_lse(m), (const float *)qkv,
                                         m->views_mem, m->B, m->T, W, m->H, err)
                      : be->attention_forward(be, s, out, saved, qkv, ab, m->B, m->T, W, m->H, err);
    return rc ? bk_error_prefix(err, "layer %d attention: ", l) : BK_OK;
}

/* Its backward: dqkv (the gradients of q, k, v as the rotation left them, or as they were before the
 * views' rotations) += ... */
static int layer_attention_backward(bk_gpt *m, int l, bk_storage s, float *dqkv, float *const dtable[BK_STREAM_COUNT],
                                    const void *dout, const void *qkv, const void *out, const float *saved,
                                    const bk_attention_bias *ab, const bk_views *vw, int W, bk_error *err)
{
    bk_backend *be = m->be;
    const int rc = vw ? bk_views_backward(be, vw, dqkv, (const float *)dout, (const float *)qkv, (const float *)out,
                                          saved, m->views_mem, m->B, m->T, W, m->H, err)
                      : be->attention_backward(be, s, dqkv, dtable, dout, qkv, out, saved, ab, m->B, m->T, W, m->H,
                                               err);
    return rc ? bk_error_prefix(err, "layer %d attention backward: ", l) : BK_OK;
}

/* The rotation of layer l: rot, unless the rotary term does not act in that layer ([[term]] layers). */
static const bk_rotary_view *rotary_at(const bk_gpt *m, int l, const bk_rotary_view *rot)
{
    return rot && bk_term_on_layer(&m->pos.set->terms[m->pos.set->rotary], l) ? rot : NULL;
}

/* 1 when the content term (content: there is one) acts in layer l. */
static int content_at(const bk_gpt *m, int l, int content)
{
    return content && bk_term_on_layer(&m->bias->set->terms[m->bias->set->content], l);
}

/* The attention bias of layer l (and with a content term its positions, from the layer's normalised input
 * ln1, into the slots' slot), before the attention. */
static int layer_bias(bk_gpt *m, int l, const layer_slots *sl, const float *ln1, int content, bk_attention_bias *ab,
                      bk_error *err)
{
    attention_bias(m, l, ab);
    if (!content)
        return BK_OK;
    int rc = bk_content_forward(&m->bias->content, l, (int)sl->ls, sl->slots, ln1, m->B, m->T, m->bias->training,
                                m->bias->step, m->bias->check_finite, err);
    if (!rc)
        bk_content_attention(&m->bias->content, (int)sl->ls, ab);
    return rc;
}

/* Before layer l's attention backward: its bias, the table gradients zeroed, the terms' backward begun. */
static int layer_bias_backward_begin(bk_gpt *m, int l, const layer_slots *sl, size_t dtable_floats, int content,
                                     bk_attention_bias *ab, bk_error *err)
{
    attention_bias(m, l, ab);
    int rc = BK_OK;
    if (m->dtable_mem && (rc = m->be->zero(m->be, m->dtable_mem, dtable_floats * sizeof(float), err)))
        return rc;
    if (m->bias && (rc = bk_bias_backward_begin(m->bias, l, ab, err)))
        return rc;
    if (content) {
        bk_content_attention(&m->bias->content, (int)sl->ls, ab);
        rc = bk_content_backward_begin(&m->bias->content, ab, err);
    }
    return rc;
}

/* After it: the tables' and the query terms' gradients, and a content term's into dln1 (before the q/k/v
 * product's backward: both add into dln1). */
static int layer_bias_backward_end(bk_gpt *m, int l, float *const dtable[BK_STREAM_COUNT], int content,
                                   const float *ln1, float *dln1, bk_error *err)
{
    int rc = BK_OK;
    if (m->dtable_mem && (rc = bk_bias_backward(m->bias, l, (const float *const *)dtable, err)))
        return rc;
    if (m->bias && (rc = bk_bias_query_backward(m->bias, l, err)))
        return rc;
    if (content)
        rc = bk_content_backward(&m->bias->content, l, ln1, dln1, m->bias->dtheta, m->bias->training, m->bias->step,
                                 err);
    return rc;
}

/* One block of the llama family (forward) into the slots `sl`: from sl.residual to sl.res3, on any backend,
 * in its storage; `train` keeps what the attention backward reads; `again` (recompute, before the layer's
 * backward) skips the attention, whose output and statistics the training forward kept. With bf16
 * storage the RMSNorm and SwiGLU outputs and the rotated q, k, v are computed in the fp32 stage and kept
 * rounded to bf16 (keep). */
static int llama_layer_forward(bk_gpt *m, const acts *a, int l, const layer_slots *sl, int train, int again,
                               const bk_rotary_view *rot, int content, bk_error *err)
{
    int rc;
    bk_backend *be = m->be;
    const bk_llama_params *p = &m->lwp;
    const int B = m->B, T = m->T, C = m->C, H = m->H, KV = m->KV, hd = m->hd, A = m->A, F = m->F, BT = B * T;
    const int R = (H + 2 * KV) * hd;
    const bk_storage s = storage_of(be);
    const int b16 = s == BK_STORAGE_BF16;
    const size_t la = sl->ls;
    const float *residual = sl->residual;
    float *ln1_rstd = a->ln1_rstd + la * BT;
    float *att = train ? a->att + sl->lk * be->attention_saved(be, B, T, H) : NULL;
    float *attproj = a->attproj + la * BT * C, *res2 = a->res2 + la * BT * C;
    float *ln2_rstd = a->ln2_rstd + la * BT;
    float *fch = a->fch + la * BT * 2 * F;
    float *fcproj = a->fcproj + la * BT * C, *res3 = sl->res3;
    const stored st = stored_of(m, a, s, la, sl->lk);
    /* where each kept value is computed: in place (fp32), or in the stage */
    float *ln1 = b16 ? a->stage : st.ln1, *qkv = b16 ? a->stage : st.qkv, *ln2 = b16 ? a->stage : st.ln2;
    float *swi = b16 ? a->stage : st.fch_gelu;

    TRY(be->rmsnorm_forward(be, ln1, ln1_rstd, residual, p->rms1w + (size_t)l * C, BT, C, m->eps, err));
    TRY(keep(be, s, st.ln1, ln1, (size_t)BT * C, err));
    float *proj = m->qk_norm ? a->qkraw + la * BT * R : a->qkvr; /* the q/k/v product */
    TRY(linear_forward(m, s, proj, st.ln1, p->qkvw + (size_t)l * R * C, NULL, BT, C, R, err));
    if (m->qk_norm) { /* qkvr: v as it is, the query and key heads normalised */
        float *rstd = a->qkrstd + la * BT * (H + KV);
        TRY(be->copy(be, a->qkvr, proj, (size_t)BT * R * sizeof(float), err));
        TRY(be->headnorm_forward(be, a->qkvr, rstd, proj, p->qnormw + (size_t)l * hd, BT, H, hd, R, m->eps, err));
        TRY(be->headnorm_forward(be, a->qkvr + H * hd, rstd + (size_t)BT * H, proj + H * hd,
                                 p->knormw + (size_t)l * hd, BT, KV, hd, R, m->eps, err));
    }
    TRY(be->gqa_expand(be, qkv, a->qkvr, BT, H, KV, hd, err));
    const bk_views *vw = views_at(m, rot);
    if (rot && !vw) /* qkv keeps the rotated q, k: attention backward reads them (views rotate copies) */
        TRY(be->rotary(be, qkv, rot, B, T, A, H, 1.0f, err));
    TRY(keep(be, s, st.qkv, qkv, (size_t)BT * 3 * A, err));
    bk_attention_bias ab; /* a content term: fp32 storage only (refused by bk_gpt_forward) */
    TRY(layer_bias(m, l, sl, (const float *)st.ln1, content, &ab, err));
    if (!again)
        TRY(layer_attention(m, l, s, st.atty, att, st.qkv, &ab, vw, A, err));
    TRY(linear_forward(m, s, attproj, st.atty, p->attprojw + (size_t)l * C * A, NULL, BT, A, C, err));
    TRY(be->residual_forward(be, res2, residual, attproj, (size_t)BT * C, err));
    TRY(be->rmsnorm_forward(be, ln2, ln2_rstd, res2, p->rms2w + (size_t)l * C, BT, C, m->eps, err));
    TRY(keep(be, s, st.ln2, ln2, (size_t)BT * C, err));
    TRY(linear_forward(m, s, fch, st.ln2, p->fcw + (size_t)l * 2 * F * C, NULL, BT, C, 2 * F, err));
    TRY(be->swiglu_forward(be, swi, fch, BT, F, err));
    TRY(keep(be, s, st.fch_gelu, swi, (size_t)BT * F, err));
    TRY(linear_forward(m, s, fcproj, st.fch_gelu, p->fcprojw + (size_t)l * C * F, NULL, BT, F, C, err));
    TRY(be->residual_forward(be, res3, res2, fcproj, (size_t)BT * C, err));
    return BK_OK;
fail:
    return rc;
}

/* The gradient g of a product's weight, tensor `name`: NULL when that tensor is frozen (m->frozen), so
 * that the product skips it. */
static float *wgrad(const bk_gpt *m, const char *name, float *g)
{
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name))
            return m->frozen[i] ? NULL : g;
    return g;
}

/* One block of the llama family (backward) from d.res3 of layer l (slot lr = l) to the gradient of its
 * input (dresidual), reading the forward's activations in slot sl->ls; dtable and the bias as
 * bk_gpt_backward sets them up. */
static int llama_layer_backward(bk_gpt *m, const acts *a, const acts *d, int l, const layer_slots *sl,
                                float *dresidual, float *const dtable[BK_STREAM_COUNT], size_t dtable_floats,
                                const bk_rotary_view *rot, int content, bk_error *err)
{
    int rc;
    bk_backend *be = m->be;
    const bk_llama_params *p = &m->lwp, *g = &m->lwg;
    const int B = m->B, T = m->T, C = m->C, H = m->H, KV = m->KV, hd = m->hd, A = m->A, F = m->F, BT = B * T;
    const int R = (H + 2 * KV) * hd;
    const bk_storage s = storage_of(be); /* of a's ln1, qkv, atty, ln2, fch_gelu (the forward's) */
    const size_t saved = be->attention_saved(be, B, T, H);
    const size_t o1 = sl->ls * BT, oC = o1 * C, oA = o1 * A, oF = o1 * F;
    const float *residual = sl->residual;
    const float *dres3 = d->res3 + (size_t)l * BT * C;
    const stored st = stored_of(m, a, s, sl->ls, sl->lk);

    TRY(be->residual_backward(be, d->res2 + oC, d->fcproj + oC, dres3, (size_t)BT * C, err));
    TRY(linear_backward(m, s, d->fch_gelu + oF, wgrad(m, "fcprojw", g->fcprojw + (size_t)l * C * F), NULL,
                        d->fcproj + oC, st.fch_gelu, p->fcprojw + (size_t)l * C * F, BT, F, C, err));
    TRY(be->swiglu_backward(be, d->fch + 2 * oF, a->fch + 2 * oF, d->fch_gelu + oF, BT, F, err));
    TRY(linear_backward(m, s, d->ln2 + oC, wgrad(m, "fcw", g->fcw + (size_t)l * 2 * F * C), NULL,
                        d->fch + 2 * oF, st.ln2, p->fcw + (size_t)l * 2 * F * C, BT, C, 2 * F, err));
    TRY(be->rmsnorm_backward(be, d->res2 + oC, g->rms2w + (size_t)l * C, d->ln2 + oC, a->res2 + oC,
                             p->rms2w + (size_t)l * C, a->ln2_rstd + o1, BT, C, err));
    TRY(be->residual_backward(be, dresidual, d->attproj + oC, d->res2 + oC, (size_t)BT * C, err));
    TRY(linear_backward(m, s, d->atty + oA, wgrad(m, "attprojw", g->attprojw + (size_t)l * C * A), NULL,
                        d->attproj + oC, st.atty, p->attprojw + (size_t)l * C * A, BT, A, C, err));
    bk_attention_bias ab;
    TRY(layer_bias_backward_begin(m, l, sl, dtable_floats, content, &ab, err));
    const void *dout;
    TRY(attention_dout(be, s, a, d->atty + oA, (size_t)BT * A, &dout, err));
    const bk_views *vw = views_at(m, rot);
    TRY(layer_attention_backward(m, l, s, d->qkv + 3 * oA, dtable, dout, st.qkv, st.atty, a->att + sl->lk * saved,
                                 &ab, vw, A, err));
    TRY(layer_bias_backward_end(m, l, dtable, content, (const float *)st.ln1, d->ln1 + oC, err));
    if (rot && !vw)
        TRY(be->rotary(be, d->qkv + 3 * oA, rot, B, T, A, H, -1.0f, err));
    TRY(be->zero(be, d->qkvr, (size_t)BT * R * sizeof(float), err));
    TRY(be->gqa_reduce(be, d->qkvr, d->qkv + 3 * oA, BT, H, KV, hd, err));
    const float *dproj = d->qkvr; /* the gradient of the q/k/v product */
    if (m->qk_norm) { /* through the heads' normalisation: v's gradient as it is, the heads' rows written */
        const float *proj = a->qkraw + sl->ls * BT * R, *rstd = a->qkrstd + sl->ls * BT * (H + KV);
        TRY(be->copy(be, d->qkraw, d->qkvr, (size_t)BT * R * sizeof(float), err));
        TRY(be->headnorm_backward(be, d->qkraw, g->qnormw + (size_t)l * hd, d->qkvr, proj, p->qnormw + (size_t)l * hd,
                                  rstd, BT, H, hd, R, err));
        TRY(be->headnorm_backward(be, d->qkraw + H * hd, g->knormw + (size_t)l * hd, d->qkvr + H * hd, proj + H * hd,
                                  p->knormw + (size_t)l * hd, rstd + (size_t)BT * H, BT, KV, hd, R, err));
        dproj = d->qkraw;
    }
    TRY(linear_backward(m, s, d->ln1 + oC, wgrad(m, "qkvw", g->qkvw + (size_t)l * R * C), NULL, dproj,
                        st.ln1, p->qkvw + (size_t)l * R * C, BT, C, R, err));
    TRY(be->rmsnorm_backward(be, dresidual, g->rms1w + (size_t)l * C, d->ln1 + oC, residual, p->rms1w + (size_t)l * C,
                             a->ln1_rstd + o1, BT, C, err));
    return BK_OK;
fail:
    return rc;
}

/* One block of the gpt2 family (forward) into the slots `sl`, in the backend's storage; `train` and
 * `again` as llama_layer_forward's. */
static int gpt2_layer_forward(bk_gpt *m, const acts *a, int l, const layer_slots *sl, int train, int again,
                              const bk_rotary_view *rot, int content, bk_error *err)
{
    int rc;
    bk_backend *be = m->be;
    const bk_gpt_params *p = &m->wp;
    const int B = m->B, T = m->T, C = m->C, H = m->H, BT = B * T;
    const bk_storage sg = storage_of(be);
    const int b16 = sg == BK_STORAGE_BF16;
    const size_t la = sl->ls;
    const float *residual = sl->residual;
    float *ln1_mean = a->ln1_mean + la * BT, *ln1_rstd = a->ln1_rstd + la * BT;
    float *att = train ? a->att + sl->lk * be->attention_saved(be, B, T, H) : NULL;
    float *attproj = a->attproj + la * BT * C, *res2 = a->res2 + la * BT * C;
    float *ln2_mean = a->ln2_mean + la * BT, *ln2_rstd = a->ln2_rstd + la * BT;
    float *fch = a->fch + la * BT * 4 * C;
    float *fcproj = a->fcproj + la * BT * C, *res3 = sl->res3;
    const stored st = stored_of(m, a, sg, la, sl->lk);
    float *qkv = b16 ? a->stage : (float *)st.qkv; /* with bf16 storage computed in the fp32 stage, then kept */

    TRY(be->layernorm_forward(be, sg, st.ln1, ln1_mean, ln1_rstd, residual, p->ln1w + l * C, p->ln1b + l * C, BT, C,
                              err));
    TRY(linear_forward(m, sg, qkv, st.ln1, p->qkvw + (size_t)l * 3 * C * C, p->qkvb + l * 3 * C, BT, C, 3 * C, err));
    const bk_views *vw = views_at(m, rot);
    if (rot && !vw) /* qkv keeps the rotated q, k: attention backward reads them (views rotate copies) */
        TRY(be->rotary(be, qkv, rot, B, T, C, H, 1.0f, err));
    TRY(keep(be, sg, st.qkv, qkv, (size_t)BT * 3 * C, err)); /* q, k, v with bias and rotation applied */
    bk_attention_bias ab; /* a content term: fp32 storage only (refused by bk_gpt_forward) */
    TRY(layer_bias(m, l, sl, (const float *)st.ln1, content, &ab, err));
    if (!again)
        TRY(layer_attention(m, l, sg, st.atty, att, st.qkv, &ab, vw, C, err));
    TRY(linear_forward(m, sg, attproj, st.atty, p->attprojw + (size_t)l * C * C, p->attprojb + l * C, BT, C, C, err));
    /* eval: reads res3 before it is rewritten */
    TRY(be->residual_forward(be, res2, residual, attproj, (size_t)BT * C, err));
    TRY(be->layernorm_forward(be, sg, st.ln2, ln2_mean, ln2_rstd, res2, p->ln2w + l * C, p->ln2b + l * C, BT, C,
                              err));
    TRY(linear_forward(m, sg, fch, st.ln2, p->fcw + (size_t)l * 4 * C * C, p->fcb + l * 4 * C, BT, C, 4 * C, err));
    TRY(be->gelu_forward(be, sg, st.fch_gelu, fch, (size_t)BT * 4 * C, err));
    TRY(linear_forward(m, sg, fcproj, st.fch_gelu, p->fcprojw + (size_t)l * C * 4 * C, p->fcprojb + l * C, BT, 4 * C,
                       C, err));
    TRY(be->residual_forward(be, res3, res2, fcproj, (size_t)BT * C, err));
    return BK_OK;
fail:
    return rc;
}

/* One block of the gpt2 family (backward), as llama_layer_backward. */
static int gpt2_layer_backward(bk_gpt *m, const acts *a, const acts *d, int l, const layer_slots *sl,
                               float *dresidual, float *const dtable[BK_STREAM_COUNT], size_t dtable_floats,
                               const bk_rotary_view *rot, int content, bk_error *err)
{
    int rc;
    bk_backend *be = m->be;
    const bk_gpt_params *p = &m->wp, *g = &m->wg;
    const int B = m->B, T = m->T, C = m->C, H = m->H, BT = B * T;
    const bk_storage sg = storage_of(be); /* of a's ln1, qkv, atty, ln2, fch_gelu and lnf (the forward's) */
    const size_t saved = be->attention_saved(be, B, T, H);
    const size_t o1 = sl->ls * BT, oC = o1 * C, o3 = oC * 3, o4 = oC * 4;
    const float *residual = sl->residual;
    const float *dres3 = d->res3 + (size_t)l * BT * C;
    const stored st = stored_of(m, a, sg, sl->ls, sl->lk);

    TRY(be->residual_backward(be, d->res2 + oC, d->fcproj + oC, dres3, (size_t)BT * C, err));
    TRY(linear_backward(m, sg, d->fch_gelu + o4, wgrad(m, "fcprojw", g->fcprojw + (size_t)l * C * 4 * C),
                        g->fcprojb + l * C, d->fcproj + oC, st.fch_gelu, p->fcprojw + (size_t)l * C * 4 * C, BT,
                        4 * C, C, err));
    TRY(be->gelu_backward(be, d->fch + o4, a->fch + o4, d->fch_gelu + o4, (size_t)BT * 4 * C, err));
    TRY(linear_backward(m, sg, d->ln2 + oC, wgrad(m, "fcw", g->fcw + (size_t)l * 4 * C * C), g->fcb + l * 4 * C,
                        d->fch + o4, st.ln2, p->fcw + (size_t)l * 4 * C * C, BT, C, 4 * C, err));
    TRY(be->layernorm_backward(be, d->res2 + oC, g->ln2w + l * C, g->ln2b + l * C, d->ln2 + oC, a->res2 + oC,
                               p->ln2w + l * C, a->ln2_mean + o1, a->ln2_rstd + o1, BT, C, err));
    TRY(be->residual_backward(be, dresidual, d->attproj + oC, d->res2 + oC, (size_t)BT * C, err));
    TRY(linear_backward(m, sg, d->atty + oC, wgrad(m, "attprojw", g->attprojw + (size_t)l * C * C),
                        g->attprojb + l * C, d->attproj + oC, st.atty, p->attprojw + (size_t)l * C * C, BT, C, C,
                        err));
    bk_attention_bias ab;
    TRY(layer_bias_backward_begin(m, l, sl, dtable_floats, content, &ab, err));
    const void *dout;
    TRY(attention_dout(be, sg, a, d->atty + oC, (size_t)BT * C, &dout, err));
    const bk_views *vw = views_at(m, rot);
    TRY(layer_attention_backward(m, l, sg, d->qkv + o3, dtable, dout, st.qkv, st.atty, a->att + sl->lk * saved, &ab,
                                 vw, C, err));
    TRY(layer_bias_backward_end(m, l, dtable, content, (const float *)st.ln1, d->ln1 + oC, err));
    if (rot && !vw)
        TRY(be->rotary(be, d->qkv + o3, rot, B, T, C, H, -1.0f, err));
    TRY(linear_backward(m, sg, d->ln1 + oC, wgrad(m, "qkvw", g->qkvw + (size_t)l * 3 * C * C), g->qkvb + l * 3 * C,
                        d->qkv + o3, st.ln1, p->qkvw + (size_t)l * 3 * C * C, BT, C, 3 * C, err));
    TRY(be->layernorm_backward(be, dresidual, g->ln1w + l * C, g->ln1b + l * C, d->ln1 + oC, residual, p->ln1w + l * C,
                               a->ln1_mean + o1, a->ln1_rstd + o1, BT, C, err));
    return BK_OK;
fail:
    return rc;
}

int bk_gpt_forward(bk_gpt *m, const int32_t *inputs, const int32_t *targets, int B, int T, int train, bk_error *err)
{
    int rc;
    if (m->bias && m->bias->set->n && m->bias->distances < T)
        return bk_fail(err, BK_ERR_INVALID, "the bias tables hold %d distances, the sequence needs %d",
                       (int)m->bias->distances, T);
    if (m->argmax && (train || !targets || m->be->on_device))
        return bk_fail(err, BK_ERR_UNSUPPORTED, "the most likely tokens are kept by an evaluation forward with "
                       "targets on a backend whose memory is the host's (this one: %s)", m->be->name);
    for (int64_t n = 0; n < (int64_t)B * T; n++)
        if (inputs[n] < 0 || inputs[n] >= m->V || (targets && (targets[n] < 0 || targets[n] >= m->V)))
            return bk_fail(err, BK_ERR_INVALID, "token %lld is outside the vocabulary of %d",
                           (long long)(inputs[n] < 0 || inputs[n] >= m->V ? inputs[n] : targets[n]), m->V);
    if ((rc = reserve_acts(m, B, T, train, err)) || (rc = upload_batch(m, inputs, targets, B, T, train, err)))
        return rc;
    size_t sizes[N_ACTS];
    act_sizes(m, B, T, train, 0, sizes);
    acts a;
    carve(m->acts, sizes, &a);
    const int C = m->C, BT = B * T;
    const bk_gpt_params *p = &m->wp;
    bk_backend *be = m->be;
    const int32_t *tg = m->batch.targets;
    const bk_storage sg = storage_of(be);
    const int b16 = sg == BK_STORAGE_BF16;
    const int content = m->bias && bk_content_active(&m->bias->content);
    if (content && b16)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "term '%s' (plugin %s) reads the layers' inputs in fp32: [run] precision = \"bf16\" keeps "
                       "them in bf16; use precision = \"fp32\"",
                       m->bias->set->terms[m->bias->set->content].label,
                       m->bias->set->terms[m->bias->set->content].plugin->desc->name);
    if (b16) { /* the weights' bf16 copies, from the master weights as they are now */
        if (!m->wparams16 && (rc = be->alloc(be, (void **)&m->wparams16, m->n_params * sizeof(uint16_t), err)))
            return bk_error_prefix(err, "bf16 copies of %zu parameters: ", m->n_params);
        if ((rc = be->cast_bf16(be, m->wparams16, m->wparams, m->n_params, err)))
            return rc;
    }
    if (m->bias) /* the rotary term's context (biaskit_context.training) follows the bias's */
        bk_positions_set_training(&m->pos, m->bias->training);
    if ((rc = bk_positions_prepare(&m->pos, inputs, B, T, err)))
        return rc;
    bk_rotary_view rot; /* valid after prepare: angles for positions < T, on the backend */
    const int rotary = bk_positions_rotary(&m->pos, &rot);
    m->views.n = rotary ? bk_positions_views(&m->pos, m->views.rot, m->views.lo, m->views.hi) : 0;
    if (m->views.n)
        TRY(views_ready(m, B, T, train, err));
    const int llama = m->family == BK_FAMILY_LLAMA;
    const float *wte = llama ? m->lwp.wte : p->wte, *head = llama && !m->tied ? m->lwp.lmhead : wte;
    TRY(be->encoder_forward(be, a.encoded, &m->batch, wte, B, T, C, err));
    TRY(bk_embed_forward(&m->pos, a.encoded, err));
    for (int l = 0; l < m->L; l++) {
        const layer_slots sl = slots_of(m, &a, l, train, m->acts_recompute);
        const bk_rotary_view *rl = rotary_at(m, l, rotary ? &rot : NULL);
        const int cl = content_at(m, l, content);
        TRY(llama ? llama_layer_forward(m, &a, l, &sl, train, 0, rl, cl, err)
                  : gpt2_layer_forward(m, &a, l, &sl, train, 0, rl, cl, err));
    }
    const float *last = a.res3 + (train ? (size_t)(m->L - 1) : 0) * BT * C;
    if (llama) {
        float *lnf = b16 ? a.stage : a.lnf;
        TRY(be->rmsnorm_forward(be, lnf, a.lnf_rstd, last, m->lwp.rmsfw, BT, C, m->eps, err));
        TRY(keep(be, sg, a.lnf, lnf, (size_t)BT * C, err));
    }
    else
        TRY(be->layernorm_forward(be, sg, a.lnf, a.lnf_mean, a.lnf_rstd, last, p->lnfw, p->lnfb, BT, C, err));

    if (train) {
        TRY(linear_forward(m, sg, a.logits, a.lnf, head, NULL, BT, C, m->V, err));
        if (targets)
            TRY(be->crossentropy_forward(be, m->wlosses, a.probs, a.logits, tg, BT, m->V, err));
    } else if (targets) {
        for (int row = 0; row < BT; row += EVAL_LOGIT_ROWS) {
            int rows = BT - row < EVAL_LOGIT_ROWS ? BT - row : EVAL_LOGIT_ROWS;
            TRY(linear_forward(m, sg, a.logits, at_value(a.lnf, sg, (size_t)row * C), head, NULL, rows, C, m->V,
                               err));
            TRY(be->crossentropy_forward(be, m->wlosses + row, NULL, a.logits, tg + row, rows, m->V, err));
            for (int r = 0; m->argmax && r < rows; r++) /* host memory: checked on entry */
                m->argmax[row + r] = bk_argmax(a.logits + (size_t)r * m->V, m->V);
        }
    }
    if (targets) {
        if (m->wlosses != m->losses) /* the loss comes down */
            TRY(be->download(be, m->losses, m->wlosses, (size_t)BT * sizeof(float), err));
        double total = 0.0;
        for (int n = 0; n < BT; n++)
            total += m->losses[n];
        m->loss = (float)(total / BT);
    }
    return BK_OK;
fail:
    return rc;
}

int bk_gpt_backward(bk_gpt *m, const int32_t *inputs, const int32_t *targets, float loss_scale, bk_error *err)
{
    (void)inputs, (void)targets; /* the forward's batch, kept in m->batch */
    if (!m->acts || !m->train)
        return bk_fail(err, BK_ERR_INVALID, "backward needs a training forward pass first");
    if (!m->batch.targets)
        return bk_fail(err, BK_ERR_INVALID, "backward needs a forward pass with targets");
    int rc = bk_gpt_alloc_grads(m, err);
    if (rc)
        return rc;
    bk_backend *be = m->be;
    const int B = m->B, T = m->T, C = m->C, H = m->H, L = m->L, BT = B * T;
    size_t sizes[N_ACTS];
    acts a, d;
    act_sizes(m, B, T, 1, 0, sizes);
    carve(m->acts, sizes, &a);
    act_sizes(m, B, T, 1, 1, sizes);
    carve(m->dacts, sizes, &d);
    const bk_storage sg = storage_of(be); /* of a's ln1, qkv, atty, ln2, fch_gelu and lnf (the forward's) */
    const int content = m->bias && bk_content_active(&m->bias->content);
    /* The gradients the layers accumulate into start at zero. Not zeroed: d.logits (crossentropy_backward
     * writes all of it); d.att and d.probs are empty (shape_sizes). */
    if ((rc = be->zero(be, d.encoded, (size_t)(d.logits - d.encoded) * sizeof(float), err)))
        return rc;
    const bk_gpt_params *p = &m->wp, *g = &m->wg;
    bk_rotary_view rot;
    const int rotary = bk_positions_rotary(&m->pos, &rot);

    /* table gradients of one layer, per stream, in the backend's memory */
    int32_t D = m->bias ? m->bias->distances : 0;
    float *dtable[BK_STREAM_COUNT] = {NULL, NULL};
    const size_t dtable_floats = (size_t)BK_STREAM_COUNT * H * (size_t)D;
    if (m->bias && m->bias->set->n) {
        if (dtable_floats > m->dtable_capacity) {
            release(m, m->dtable_mem);
            m->dtable_mem = NULL, m->dtable_capacity = 0;
            if ((rc = be->alloc(be, (void **)&m->dtable_mem, dtable_floats * sizeof(float), err)))
                return bk_error_prefix(err, "table gradients: ");
            m->dtable_capacity = dtable_floats;
        }
        for (int s = 0; s < BK_STREAM_COUNT; s++)
            if (m->bias->n_on[s])
                dtable[s] = m->dtable_mem + (size_t)s * H * D;
    }

    TRY(be->crossentropy_backward(be, d.logits, a.probs, m->batch.targets, loss_scale / (float)BT, BT, m->V, err));
    const int llama = m->family == BK_FAMILY_LLAMA;
    float *dwte = wgrad(m, "wte", llama ? m->lwg.wte : g->wte); /* NULL: frozen */
    size_t last = (size_t)(L - 1) * BT * C;
    if (llama) {
        const int untied = !m->tied;
        TRY(linear_backward(m, sg, d.lnf, untied ? wgrad(m, "lmhead", m->lwg.lmhead) : dwte, NULL, d.logits, a.lnf,
                            untied ? m->lwp.lmhead : m->lwp.wte, BT, C, m->V, err));
        TRY(be->rmsnorm_backward(be, d.res3 + last, m->lwg.rmsfw, d.lnf, a.res3 + last, m->lwp.rmsfw, a.lnf_rstd, BT,
                                 C, err));
    } else {
        TRY(linear_backward(m, sg, d.lnf, dwte, NULL, d.logits, a.lnf, p->wte, BT, C, m->V, err));
        TRY(be->layernorm_backward(be, d.res3 + last, g->lnfw, g->lnfb, d.lnf, a.res3 + last, p->lnfw, a.lnf_mean,
                                   a.lnf_rstd, BT, C, err));
    }
    const int recompute = m->acts_recompute;
    /* the layers below backward_from hold nothing that trains: their backward is left out (not when the
     * embedding trains, which a caller setting backward_from does not let happen) */
    const int from = dwte || m->backward_from < 0 || m->backward_from >= L ? 0 : m->backward_from;
    for (int l = L - 1; l >= from; l--) {
        const layer_slots sl = slots_of(m, &a, l, 1, recompute);
        float *dresidual = l == 0 ? d.encoded : d.res3 + (size_t)(l - 1) * BT * C;
        const bk_rotary_view *rl = rotary_at(m, l, rotary ? &rot : NULL);
        const int cl = content_at(m, l, content);
        if (recompute) { /* layer l's activations again (but the attention's) from its input; its gradients'
                            slot from zero */
            TRY(llama ? llama_layer_forward(m, &a, l, &sl, 1, 1, rl, cl, err)
                      : gpt2_layer_forward(m, &a, l, &sl, 1, 1, rl, cl, err));
            if (l < L - 1)
                TRY(be->zero(be, d.ln1, (size_t)(d.res3 - d.ln1) * sizeof(float), err));
        }
        TRY(llama ? llama_layer_backward(m, &a, &d, l, &sl, dresidual, dtable, dtable_floats, rl, cl, err)
                  : gpt2_layer_backward(m, &a, &d, l, &sl, dresidual, dtable, dtable_floats, rl, cl, err));
    }
    if (dwte)
        TRY(be->encoder_backward(be, dwte, d.encoded, &m->batch, B, T, C, err));
    if (m->bias)
        TRY(bk_embed_backward(&m->pos, d.encoded, m->bias->dtheta, err));
    return BK_OK;
fail:
    return rc;
}
