/* Scalable-Softmax (BIASKIT_CAP_SCALE, ABI 2): score = s_h ln(i + 1) q_i . k_j / sqrt(d_head) + biases,
 * one learnable s per head, per layer (BIASKIT_FLAG_PER_LAYER; ssmax_math.h).
 *
 * Options:
 *   s_init   initial s of every head (0.43) */
#include "ssmax_math.h"

#include <stdlib.h>

typedef struct ssmax {
    const biaskit_services *svc;
    int32_t heads;
    double s_init;
} ssmax;

static const biaskit_option options[] = {
    BIASKIT_OPTION_DOUBLE("s_init", BK_SSMAX_DEFAULT_S, "initial s of every head in s ln(i+1) (paper Fig. 1: 0.43)"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    if (geo->n_heads < 1)
        return svc->error(err, BIASKIT_ERR_INVALID, "expected at least one head, got %d", (int)geo->n_heads);
    double s_init = 0.0;
    int rc = svc->get_double(cfg, "s_init", &s_init, err);
    if (rc)
        return rc;
    if (!isfinite(s_init))
        return svc->config_error(cfg, "s_init", err, "expected a finite number, got %g", s_init);
    ssmax *s = calloc(1, sizeof *s);
    if (!s)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    s->svc = svc;
    s->heads = geo->n_heads;
    s->s_init = s_init;
    *out = s;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

static int64_t param_count(const void *inst)
{
    return ((const ssmax *)inst)->heads;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)seed, (void)err;
    const ssmax *s = inst;
    for (int32_t h = 0; h < s->heads; h++)
        theta[h] = (float)s->s_init;
    return BIASKIT_OK;
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    if (capacity > 0)
        out[0] = (biaskit_tensor_info){"s", 0, ((const ssmax *)inst)->heads, 1};
    return 1;
}

static int check_call(const ssmax *s, const float *theta, int32_t rows, biaskit_error *err)
{
    if (!theta)
        return s->svc->error(err, BIASKIT_ERR_INVALID, "theta is NULL: s is a parameter");
    if (rows < 1)
        return s->svc->error(err, BIASKIT_ERR_INVALID, "expected rows >= 1, got %d", (int)rows);
    return BIASKIT_OK;
}

/* scale[h * rows + i] = s_h ln(i + 1) */
static int scale(const void *inst, const float *theta, const biaskit_context *ctx, int32_t rows, float *out,
                 biaskit_error *err)
{
    (void)ctx; /* the same in training and evaluation */
    const ssmax *s = inst;
    int rc = check_call(s, theta, rows, err);
    if (rc)
        return rc;
    for (int32_t h = 0; h < s->heads; h++)
        for (int32_t i = 0; i < rows; i++)
            out[(size_t)h * (size_t)rows + (size_t)i] = (float)bk_ssmax_scale(theta[h], i);
    return BIASKIT_OK;
}

/* ds_h += sum_i dscale[h * rows + i] ln(i + 1), summed in double, i ascending */
static int scale_backward(const void *inst, const float *theta, const biaskit_context *ctx, int32_t rows,
                          const float *dscale, float *dtheta, biaskit_error *err)
{
    (void)ctx;
    const ssmax *s = inst;
    int rc = check_call(s, theta, rows, err);
    if (rc)
        return rc;
    for (int32_t h = 0; h < s->heads; h++) {
        double acc = 0.0;
        for (int32_t i = 0; i < rows; i++)
            acc += (double)dscale[(size_t)h * (size_t)rows + (size_t)i] * bk_ssmax_ds(i);
        dtheta[h] += (float)acc;
    }
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "ssmax",
    .version = "1.0.0",
    .summary = "Scalable-Softmax: q.k multiplied by s_h ln(i+1), s learned per head and layer",
    .reference = "Nakanishi, Scalable-Softmax Is Superior for Attention, arXiv 2501.19399 (2025)",
    .capabilities = BIASKIT_CAP_SCALE,
    .flags = BIASKIT_FLAG_PER_LAYER,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .param_count = param_count,
    .param_init = param_init,
    .param_tensors = param_tensors,
    .scale = scale,
    .scale_backward = scale_backward,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
