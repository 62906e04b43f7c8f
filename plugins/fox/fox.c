/* The Forgetting Transformer's forget gate (BIASKIT_CAP_CONTENT, ABI 2; fox_math.h): each head's
 * position advances by a_h(t) = -log sigmoid(w_h . x_t + b_h) at token t, so that the bias of the pair
 * (i, j) is sum_{l=j+1..i} log f_h(l), per head and per layer (BIASKIT_FLAG_PER_LAYER: the paper's
 * fgate_proj is a Linear(d_model, n_heads) of every layer). The plain FoX layer ("FoX (LLaMA)" in the
 * paper): no output gate, output norm, QK-norm or key/value shift (FoX (Pro) adds those to the layer,
 * not to the position).
 *
 * Options:
 *   gate        "full": the gate reads the token (w and b learned, the paper's default);
 *               "bias_only": b alone (data-independent: ALiBi with learned slopes softplus(-b_h))
 *   w_std       standard deviation of w's normal initialisation (0.02: the paper's initializer_range)
 *   bias_init   "zero" (the paper's "full" gate: f = 1/2 where w . x = 0) or "timescales": head h's
 *               time constant -1 / log sigmoid(b_h) log-spaced over [t_min, t_max]
 *   t_min, t_max  the timescales' range (1 and 1000 tokens) */
#include "fox_math.h"

#include <biaskit/random.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GATE_FULL = 0, GATE_BIAS_ONLY = 1 };

typedef struct fox {
    const biaskit_services *svc;
    int32_t heads, dim;
    int gate;
    int timescales;
    double w_std, t_min, t_max;
} fox;

static const biaskit_option options[] = {
    BIASKIT_OPTION_CHOICE("gate", "full", "full|bias_only",
                          "full: f = sigmoid(w_h . x_t + b_h) reads the token; bias_only: f = sigmoid(b_h)"),
    BIASKIT_OPTION_DOUBLE("w_std", 0.02, "standard deviation of w's normal initialisation (full gate)"),
    BIASKIT_OPTION_CHOICE("bias_init", "zero", "zero|timescales",
                          "zero: b = 0; timescales: -1/log sigmoid(b_h) log-spaced over [t_min, t_max]"),
    BIASKIT_OPTION_DOUBLE("t_min", 1.0, "shortest time constant of bias_init = \"timescales\" (tokens)"),
    BIASKIT_OPTION_DOUBLE("t_max", 1000.0, "longest time constant of bias_init = \"timescales\" (tokens)"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    if (geo->n_heads < 1 || geo->d_model < 1)
        return svc->error(err, BIASKIT_ERR_INVALID, "expected at least one head and one channel, got %d and %d",
                          (int)geo->n_heads, (int)geo->d_model);
    const char *gate = NULL, *bias_init = NULL;
    double w_std = 0.0, t_min = 0.0, t_max = 0.0;
    int rc;
    if ((rc = svc->get_string(cfg, "gate", &gate, err)) || (rc = svc->get_double(cfg, "w_std", &w_std, err)) ||
        (rc = svc->get_string(cfg, "bias_init", &bias_init, err)) ||
        (rc = svc->get_double(cfg, "t_min", &t_min, err)) || (rc = svc->get_double(cfg, "t_max", &t_max, err)))
        return rc;
    /* An option that means nothing under the chosen gate or initialisation, set explicitly, is refused
     * rather than ignored. */
    const int full = strcmp(gate, "bias_only") != 0, timescales = !strcmp(bias_init, "timescales");
    if (!full && svc->is_set(cfg, "w_std"))
        return svc->config_error(cfg, "w_std", err, "'w_std' applies with gate = \"full\" only; gate is \"%s\"", gate);
    static const char *const timescale_keys[] = {"t_min", "t_max"};
    for (int k = 0; k < 2; k++)
        if (!timescales && svc->is_set(cfg, timescale_keys[k]))
            return svc->config_error(cfg, timescale_keys[k], err,
                                     "'%s' applies with bias_init = \"timescales\" only; bias_init is \"%s\"",
                                     timescale_keys[k], bias_init);
    if (!isfinite(w_std) || w_std < 0.0)
        return svc->config_error(cfg, "w_std", err, "expected a finite standard deviation >= 0, got %g", w_std);
    if (!isfinite(t_min) || t_min <= 0.0)
        return svc->config_error(cfg, "t_min", err, "expected a finite time constant > 0 tokens, got %g", t_min);
    if (!isfinite(t_max) || t_max < t_min)
        return svc->config_error(cfg, "t_max", err, "expected a finite time constant >= t_min = %g, got %g", t_min,
                                 t_max);
    fox *f = calloc(1, sizeof *f);
    if (!f)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    f->svc = svc;
    f->heads = geo->n_heads;
    f->dim = geo->d_model;
    f->gate = full ? GATE_FULL : GATE_BIAS_ONLY;
    f->timescales = timescales;
    f->w_std = w_std;
    f->t_min = t_min;
    f->t_max = t_max;
    *out = f;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

/* theta = [w (heads x dim, full gate only) | b (heads)] */
static int64_t w_count(const fox *f)
{
    return f->gate == GATE_FULL ? (int64_t)f->heads * f->dim : 0;
}

static int64_t param_count(const void *inst)
{
    const fox *f = inst;
    return w_count(f) + f->heads;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)err;
    const fox *f = inst;
    biaskit_rng r = biaskit_rng_seeded(seed);
    const int64_t nw = w_count(f);
    for (int64_t k = 0; k < nw; k++)
        theta[k] = (float)(f->w_std * biaskit_rng_normal(&r));
    for (int32_t h = 0; h < f->heads; h++) {
        double b = 0.0;
        if (f->timescales) {
            double u = f->heads > 1 ? (double)h / (double)(f->heads - 1) : 0.0;
            b = bk_fox_bias_for_timescale(f->t_min * pow(f->t_max / f->t_min, u));
        }
        theta[nw + h] = (float)b;
    }
    return BIASKIT_OK;
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    const fox *f = inst;
    int32_t n = 0;
    if (f->gate == GATE_FULL) {
        if (n < capacity)
            out[n] = (biaskit_tensor_info){"w", 0, f->heads, f->dim};
        n++;
    }
    if (n < capacity)
        out[n] = (biaskit_tensor_info){"b", w_count(f), f->heads, 1};
    return n + 1;
}

static int param_info(const void *inst, int32_t tensor, biaskit_param_info *out, biaskit_error *err)
{
    (void)err;
    const fox *f = inst;
    if (f->gate == GATE_FULL && tensor == 0)
        snprintf(out->init, sizeof out->init, "normal(0, %g)", f->w_std);
    else if (f->timescales)
        snprintf(out->init, sizeof out->init, "-log(expm1(1/T_h)), T_h log-spaced over [%g, %g]", f->t_min, f->t_max);
    else
        snprintf(out->init, sizeof out->init, "0");
    return BIASKIT_OK;
}

static int check_call(const fox *f, const float *theta, const float *x, int64_t count, biaskit_error *err)
{
    if (!theta)
        return f->svc->error(err, BIASKIT_ERR_INVALID, "theta is NULL: the gate has parameters");
    if (count < 0 || (count > 0 && !x))
        return f->svc->error(err, BIASKIT_ERR_INVALID, "expected count >= 0 tokens with their inputs, got %lld%s",
                             (long long)count, x ? "" : " and x = NULL");
    return BIASKIT_OK;
}

/* z = w_h . x_n + b_h, the products summed in double in channel order */
static double gate_logit(const fox *f, const float *theta, const float *xn, int32_t h)
{
    double z = theta[w_count(f) + h];
    if (f->gate == GATE_FULL) {
        const float *w = theta + (size_t)h * (size_t)f->dim;
        for (int32_t c = 0; c < f->dim; c++)
            z += (double)w[c] * xn[c];
    }
    return z;
}

static int content(const void *inst, const float *theta, const biaskit_context *ctx, const float *x, int64_t count,
                   float *steps, biaskit_error *err)
{
    (void)ctx; /* the same in training and evaluation, at every length */
    const fox *f = inst;
    int rc = check_call(f, theta, x, count, err);
    if (rc)
        return rc;
    for (int64_t n = 0; n < count; n++)
        for (int32_t h = 0; h < f->heads; h++)
            steps[n * f->heads + h] = (float)bk_fox_step(gate_logit(f, theta, x + n * f->dim, h));
    return BIASKIT_OK;
}

/* g = dL/da * da/dz per (token, head); dw_h += sum_n g x_n and db_h += sum_n g (double, tokens in order);
 * dx_n += sum_h g w_h */
static int content_backward(const void *inst, const float *theta, const biaskit_context *ctx, const float *x,
                            int64_t count, const float *dsteps, float *dtheta, float *dx, biaskit_error *err)
{
    (void)ctx;
    const fox *f = inst;
    int rc = check_call(f, theta, x, count, err);
    if (rc)
        return rc;
    const int32_t H = f->heads, C = f->dim;
    const int64_t nw = w_count(f);
    double *acc = calloc((size_t)(nw + H), sizeof *acc);
    if (!acc)
        return f->svc->error(err, BIASKIT_ERR_NOMEM, "out of memory for the gate's gradient");
    for (int64_t n = 0; n < count; n++) {
        const float *xn = x + n * C;
        for (int32_t h = 0; h < H; h++) {
            const double g = (double)dsteps[n * H + h] * bk_fox_dstep(gate_logit(f, theta, xn, h));
            acc[nw + h] += g;
            if (f->gate != GATE_FULL)
                continue;
            const float *w = theta + (size_t)h * (size_t)C;
            double *dw = acc + (size_t)h * (size_t)C;
            float *dxn = dx + n * C;
            for (int32_t c = 0; c < C; c++) {
                dw[c] += g * xn[c];
                dxn[c] += (float)(g * w[c]);
            }
        }
    }
    for (int64_t k = 0; k < nw + H; k++)
        dtheta[k] += (float)acc[k];
    free(acc);
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "fox",
    .version = "1.0.0",
    .summary = "Forgetting Transformer: bias sum_{l=j+1..i} log sigmoid(w_h . x_l + b_h), a forget gate per head "
               "and layer",
    .reference = "Lin, Nikishin, He, Courville, Forgetting Transformer: Softmax Attention with a Forget Gate, ICLR "
                 "2025 (arXiv 2503.02130)",
    .capabilities = BIASKIT_CAP_CONTENT,
    .flags = BIASKIT_FLAG_PER_LAYER,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .param_count = param_count,
    .param_init = param_init,
    .param_tensors = param_tensors,
    .param_info = param_info,
    .content = content,
    .content_backward = content_backward,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
