#include "model/gpt.h"

#include "cpu/attention.h"
#include "model/layers.h"
#include "util/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define INIT_STD 0.02
#define EVAL_LOGIT_ROWS 256 /* evaluation computes logits this many tokens at a time */

/* Activation tensors, carved out of one allocation. Per-layer tensors hold La layers: every layer
 * when training, one (reused) when evaluating. */
typedef struct acts {
    float *encoded, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *attproj, *res2, *ln2, *ln2_mean, *ln2_rstd,
        *fch, *fch_gelu, *fcproj, *res3, *lnf, *lnf_mean, *lnf_rstd, *logits, *probs;
} acts;

#define N_ACTS (sizeof(acts) / sizeof(float *))

static void act_sizes(const bk_gpt *m, int B, int T, int train, size_t sizes[N_ACTS])
{
    size_t BT = (size_t)B * T, C = (size_t)m->C, La = train ? (size_t)m->L : 1, V = (size_t)m->V;
    size_t rows = train ? BT : (BT < EVAL_LOGIT_ROWS ? BT : EVAL_LOGIT_ROWS);
    size_t s[N_ACTS] = {
        BT * C,                                            /* encoded */
        La * BT * C, La * BT, La * BT,                     /* ln1, mean, rstd */
        La * BT * 3 * C, La * BT * C,                      /* qkv, atty */
        train ? La * B * (size_t)m->H * T * T : 0,         /* att: probabilities kept for backward */
        La * BT * C, La * BT * C,                          /* attproj, res2 */
        La * BT * C, La * BT, La * BT,                     /* ln2, mean, rstd */
        La * BT * 4 * C, La * BT * 4 * C, La * BT * C, La * BT * C, /* fch, fch_gelu, fcproj, res3 */
        BT * C, BT, BT,                                    /* lnf, mean, rstd */
        rows * V, train ? BT * V : 0,                      /* logits, probs */
    };
    memcpy(sizes, s, sizeof s);
}

static void carve(float *base, const size_t sizes[N_ACTS], acts *a)
{
    float **ptr = (float **)a;
    for (size_t i = 0; i < N_ACTS; i++) {
        ptr[i] = base;
        base += sizes[i];
    }
}

static int reserve_acts(bk_gpt *m, int B, int T, int train, bk_error *err)
{
    if (m->acts && B == m->B && T == m->T && train == m->train)
        return BK_OK;
    size_t sizes[N_ACTS], total = 0;
    act_sizes(m, B, T, train, sizes);
    for (size_t i = 0; i < N_ACTS; i++)
        total += sizes[i];
    free(m->acts), free(m->dacts), free(m->losses);
    m->acts = malloc(total * sizeof(float));
    m->dacts = train ? calloc(total, sizeof(float)) : NULL;
    m->losses = malloc((size_t)B * T * sizeof(float));
    if (!m->acts || (train && !m->dacts) || !m->losses) {
        free(m->acts), free(m->dacts), free(m->losses);
        m->acts = m->dacts = m->losses = NULL;
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for activations of %d x %d tokens (%.1f GiB)", B, T,
                       (double)total * sizeof(float) * (train ? 2 : 1) / (1024.0 * 1024 * 1024));
    }
    m->acts_size = total;
    m->B = B, m->T = T, m->train = train;
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

static void point(const bk_gpt *m, float *base, bk_gpt_params *p)
{
    float **ptr = (float **)p;
    for (int i = 0; i < m->n_tensors; i++)
        ptr[i] = base + m->tensors[i].offset;
}

int bk_gpt_init(bk_gpt *m, int layers, int heads, int dim, int vocab, bk_bias *bias, uint64_t seed, bk_error *err)
{
    memset(m, 0, sizeof *m);
    if (layers < 1 || heads < 1 || dim < 1 || vocab < 2 || dim % heads)
        return bk_fail(err, BK_ERR_INVALID, "model shape: layers %d, heads %d, dim %d, vocab %d is not valid", layers,
                       heads, dim, vocab);
    m->L = layers, m->H = heads, m->C = dim, m->V = vocab;
    m->bias = bias;
    int rc = bk_positions_init(&m->pos, bias ? bias->set : NULL, err);
    if (rc) {
        bk_positions_free(&m->pos);
        return rc;
    }
    int64_t L = layers, C = dim, V = vocab;
    size_t off = 0;
    /* the order of bk_gpt_params */
    set_tensor(m, "wte", 2, V, C, 0, 1, &off);
    set_tensor(m, "ln1w", 2, L, C, 0, 0, &off);
    set_tensor(m, "ln1b", 2, L, C, 0, 0, &off);
    set_tensor(m, "qkvw", 3, L, 3 * C, C, 1, &off);
    set_tensor(m, "qkvb", 2, L, 3 * C, 0, 0, &off);
    set_tensor(m, "attprojw", 3, L, C, C, 1, &off);
    set_tensor(m, "attprojb", 2, L, C, 0, 0, &off);
    set_tensor(m, "ln2w", 2, L, C, 0, 0, &off);
    set_tensor(m, "ln2b", 2, L, C, 0, 0, &off);
    set_tensor(m, "fcw", 3, L, 4 * C, C, 1, &off);
    set_tensor(m, "fcb", 2, L, 4 * C, 0, 0, &off);
    set_tensor(m, "fcprojw", 3, L, C, 4 * C, 1, &off);
    set_tensor(m, "fcprojb", 2, L, C, 0, 0, &off);
    set_tensor(m, "lnfw", 1, C, 0, 0, 0, &off);
    set_tensor(m, "lnfb", 1, C, 0, 0, 0, &off);
    m->n_params = off;
    if (!(m->params = malloc(off * sizeof(float)))) {
        bk_positions_free(&m->pos);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for %zu parameters", off);
    }
    point(m, m->params, &m->p);

    bk_rng rng = {bk_derive_seed(seed, 0x6d6f64656c, 0)}; /* "model" */
    double residual_std = INIT_STD / sqrt(2.0 * layers);
    for (int i = 0; i < m->n_tensors; i++) {
        const bk_gpt_tensor *t = &m->tensors[i];
        float *x = m->params + t->offset;
        int is_norm_weight = !strcmp(t->name, "ln1w") || !strcmp(t->name, "ln2w") || !strcmp(t->name, "lnfw");
        double std = !strcmp(t->name, "attprojw") || !strcmp(t->name, "fcprojw") ? residual_std : INIT_STD;
        for (size_t k = 0; k < t->count; k++)
            x[k] = t->decay ? (float)(std * bk_rng_normal(&rng)) : is_norm_weight ? 1.0f : 0.0f;
    }
    return BK_OK;
}

void bk_gpt_free(bk_gpt *m)
{
    if (!m)
        return;
    free(m->params);
    free(m->grads);
    free(m->acts);
    free(m->dacts);
    free(m->losses);
    bk_positions_free(&m->pos);
    memset(m, 0, sizeof *m);
}

int bk_gpt_alloc_grads(bk_gpt *m, bk_error *err)
{
    if (m->grads)
        return BK_OK;
    if (!(m->grads = calloc(m->n_params, sizeof(float))))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for %zu gradients", m->n_params);
    point(m, m->grads, &m->g);
    return BK_OK;
}

void bk_gpt_zero_grad(bk_gpt *m)
{
    if (m->grads)
        memset(m->grads, 0, m->n_params * sizeof(float));
}

const float *bk_gpt_logits(const bk_gpt *m)
{
    if (!m->acts || !m->train)
        return NULL;
    size_t sizes[N_ACTS];
    act_sizes(m, m->B, m->T, 1, sizes);
    acts a;
    carve(m->acts, sizes, &a);
    return a.logits;
}

static void attention_bias(const bk_gpt *m, int layer, bk_attention_bias *ab)
{
    memset(ab, 0, sizeof *ab);
    if (!m->bias)
        return;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        ab->table[s] = bk_bias_table(m->bias, layer, (bk_stream)s);
        ab->positions[s] = ab->table[s] ? bk_positions_stream(&m->pos, (bk_stream)s) : NULL;
    }
    ab->distances = m->bias->distances;
}

int bk_gpt_forward(bk_gpt *m, const int32_t *inputs, const int32_t *targets, int B, int T, int train, bk_error *err)
{
    int rc;
    if (m->bias && m->bias->set->n && m->bias->distances < T)
        return bk_fail(err, BK_ERR_INVALID, "the bias tables hold %d distances, the sequence needs %d",
                       (int)m->bias->distances, T);
    for (int64_t n = 0; n < (int64_t)B * T; n++)
        if (inputs[n] < 0 || inputs[n] >= m->V || (targets && (targets[n] < 0 || targets[n] >= m->V)))
            return bk_fail(err, BK_ERR_INVALID, "token %lld is outside the vocabulary of %d",
                           (long long)(inputs[n] < 0 || inputs[n] >= m->V ? inputs[n] : targets[n]), m->V);
    if ((rc = reserve_acts(m, B, T, train, err)))
        return rc;
    size_t sizes[N_ACTS];
    act_sizes(m, B, T, train, sizes);
    acts a;
    carve(m->acts, sizes, &a);
    const int C = m->C, H = m->H, BT = B * T;
    const bk_gpt_params *p = &m->p;

    if ((rc = bk_positions_prepare(&m->pos, inputs, B, T, err)))
        return rc;
    bk_encoder_forward(a.encoded, inputs, p->wte, B, T, C);
    if ((rc = bk_embed_forward(&m->pos, a.encoded, err)))
        return rc;
    for (int l = 0; l < m->L; l++) {
        size_t la = train ? (size_t)l : 0; /* activation slot of this layer */
        const float *residual = l == 0 ? a.encoded : a.res3 + (train ? la - 1 : 0) * BT * C;
        float *ln1 = a.ln1 + la * BT * C, *ln1_mean = a.ln1_mean + la * BT, *ln1_rstd = a.ln1_rstd + la * BT;
        float *qkv = a.qkv + la * BT * 3 * C, *atty = a.atty + la * BT * C;
        float *att = train ? a.att + la * (size_t)B * H * T * T : NULL;
        float *attproj = a.attproj + la * BT * C, *res2 = a.res2 + la * BT * C;
        float *ln2 = a.ln2 + la * BT * C, *ln2_mean = a.ln2_mean + la * BT, *ln2_rstd = a.ln2_rstd + la * BT;
        float *fch = a.fch + la * BT * 4 * C, *fch_gelu = a.fch_gelu + la * BT * 4 * C;
        float *fcproj = a.fcproj + la * BT * C, *res3 = a.res3 + la * BT * C;

        bk_layernorm_forward(ln1, ln1_mean, ln1_rstd, residual, p->ln1w + l * C, p->ln1b + l * C, BT, C);
        bk_matmul_forward(qkv, ln1, p->qkvw + (size_t)l * 3 * C * C, p->qkvb + l * 3 * C, BT, C, 3 * C);
        bk_rotary_forward(&m->pos, qkv, C, H); /* qkv keeps the rotated q, k: attention backward reads them */
        bk_attention_bias ab;
        attention_bias(m, l, &ab);
        if ((rc = bk_attention_forward(atty, att, qkv, &ab, B, T, C, H, err)))
            return bk_error_prefix(err, "layer %d attention: ", l);
        bk_matmul_forward(attproj, atty, p->attprojw + (size_t)l * C * C, p->attprojb + l * C, BT, C, C);
        bk_residual_forward(res2, residual, attproj, (size_t)BT * C); /* eval: reads res3 before it is rewritten */
        bk_layernorm_forward(ln2, ln2_mean, ln2_rstd, res2, p->ln2w + l * C, p->ln2b + l * C, BT, C);
        bk_matmul_forward(fch, ln2, p->fcw + (size_t)l * 4 * C * C, p->fcb + l * 4 * C, BT, C, 4 * C);
        bk_gelu_forward(fch_gelu, fch, (size_t)BT * 4 * C);
        bk_matmul_forward(fcproj, fch_gelu, p->fcprojw + (size_t)l * C * 4 * C, p->fcprojb + l * C, BT, 4 * C, C);
        bk_residual_forward(res3, res2, fcproj, (size_t)BT * C);
    }
    const float *last = a.res3 + (train ? (size_t)(m->L - 1) : 0) * BT * C;
    bk_layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, last, p->lnfw, p->lnfb, BT, C);

    if (train) {
        bk_matmul_forward(a.logits, a.lnf, p->wte, NULL, BT, C, m->V);
        if (targets)
            bk_crossentropy_forward(m->losses, a.probs, a.logits, targets, BT, m->V);
    } else if (targets) {
        for (int row = 0; row < BT; row += EVAL_LOGIT_ROWS) {
            int rows = BT - row < EVAL_LOGIT_ROWS ? BT - row : EVAL_LOGIT_ROWS;
            bk_matmul_forward(a.logits, a.lnf + (size_t)row * C, p->wte, NULL, rows, C, m->V);
            bk_crossentropy_forward(m->losses + row, NULL, a.logits, targets + row, rows, m->V);
        }
    }
    if (targets) {
        double total = 0.0;
        for (int n = 0; n < BT; n++)
            total += m->losses[n];
        m->loss = (float)(total / BT);
    }
    return BK_OK;
}

int bk_gpt_backward(bk_gpt *m, const int32_t *inputs, const int32_t *targets, float loss_scale, bk_error *err)
{
    if (!m->acts || !m->train)
        return bk_fail(err, BK_ERR_INVALID, "backward needs a training forward pass first");
    int rc = bk_gpt_alloc_grads(m, err);
    if (rc)
        return rc;
    const int B = m->B, T = m->T, C = m->C, H = m->H, L = m->L, BT = B * T;
    size_t sizes[N_ACTS];
    act_sizes(m, B, T, 1, sizes);
    acts a, d;
    carve(m->acts, sizes, &a);
    carve(m->dacts, sizes, &d);
    memset(m->dacts, 0, m->acts_size * sizeof(float));
    const bk_gpt_params *p = &m->p, *g = &m->g;

    /* dtable buffers per stream for the bias gradient of one layer */
    int32_t D = m->bias ? m->bias->distances : 0;
    float *dtable_mem = NULL;
    float *dtable[BK_STREAM_COUNT] = {NULL, NULL};
    if (m->bias && m->bias->set->n) {
        if (!(dtable_mem = malloc((size_t)BK_STREAM_COUNT * H * D * sizeof(float))))
            return bk_fail(err, BK_ERR_NOMEM, "out of memory for table gradients");
        for (int s = 0; s < BK_STREAM_COUNT; s++)
            if (m->bias->n_on[s])
                dtable[s] = dtable_mem + (size_t)s * H * D;
    }

    bk_crossentropy_backward(d.logits, a.probs, targets, loss_scale / (float)BT, BT, m->V);
    bk_matmul_backward(d.lnf, g->wte, NULL, d.logits, a.lnf, p->wte, BT, C, m->V);
    size_t last = (size_t)(L - 1) * BT * C;
    bk_layernorm_backward(d.res3 + last, g->lnfw, g->lnfb, d.lnf, a.res3 + last, p->lnfw, a.lnf_mean, a.lnf_rstd, BT,
                          C);
    for (int l = L - 1; l >= 0 && !rc; l--) {
        size_t o1 = (size_t)l * BT, oC = o1 * C, o3 = oC * 3, o4 = oC * 4;
        const float *residual = l == 0 ? a.encoded : a.res3 + (size_t)(l - 1) * BT * C;
        float *dresidual = l == 0 ? d.encoded : d.res3 + (size_t)(l - 1) * BT * C;

        bk_residual_backward(d.res2 + oC, d.fcproj + oC, d.res3 + oC, (size_t)BT * C);
        bk_matmul_backward(d.fch_gelu + o4, g->fcprojw + (size_t)l * C * 4 * C, g->fcprojb + l * C, d.fcproj + oC,
                           a.fch_gelu + o4, p->fcprojw + (size_t)l * C * 4 * C, BT, 4 * C, C);
        bk_gelu_backward(d.fch + o4, a.fch + o4, d.fch_gelu + o4, (size_t)BT * 4 * C);
        bk_matmul_backward(d.ln2 + oC, g->fcw + (size_t)l * 4 * C * C, g->fcb + l * 4 * C, d.fch + o4, a.ln2 + oC,
                           p->fcw + (size_t)l * 4 * C * C, BT, C, 4 * C);
        bk_layernorm_backward(d.res2 + oC, g->ln2w + l * C, g->ln2b + l * C, d.ln2 + oC, a.res2 + oC, p->ln2w + l * C,
                              a.ln2_mean + o1, a.ln2_rstd + o1, BT, C);
        bk_residual_backward(dresidual, d.attproj + oC, d.res2 + oC, (size_t)BT * C);
        bk_matmul_backward(d.atty + oC, g->attprojw + (size_t)l * C * C, g->attprojb + l * C, d.attproj + oC,
                           a.atty + oC, p->attprojw + (size_t)l * C * C, BT, C, C);
        bk_attention_bias ab;
        attention_bias(m, l, &ab);
        if (dtable_mem)
            memset(dtable_mem, 0, (size_t)BK_STREAM_COUNT * H * D * sizeof(float));
        if ((rc = bk_attention_backward(d.qkv + o3, dtable, d.atty + oC, a.qkv + o3,
                                        a.att + (size_t)l * B * H * T * T, &ab, B, T, C, H, err))) {
            bk_error_prefix(err, "layer %d attention backward: ", l);
            break;
        }
        if (dtable_mem && (rc = bk_bias_backward(m->bias, l, (const float *const *)dtable, err)))
            break;
        bk_rotary_backward(&m->pos, d.qkv + o3, C, H);
        bk_matmul_backward(d.ln1 + oC, g->qkvw + (size_t)l * 3 * C * C, g->qkvb + l * 3 * C, d.qkv + o3, a.ln1 + oC,
                           p->qkvw + (size_t)l * 3 * C * C, BT, C, 3 * C);
        bk_layernorm_backward(dresidual, g->ln1w + l * C, g->ln1b + l * C, d.ln1 + oC, residual, p->ln1w + l * C,
                              a.ln1_mean + o1, a.ln1_rstd + o1, BT, C);
    }
    if (!rc)
        bk_encoder_backward(g->wte, d.encoded, inputs, B, T, C);
    if (!rc && m->bias)
        rc = bk_embed_backward(&m->pos, d.encoded, m->bias->dtheta, err);
    free(dtable_mem);
    return rc;
}
