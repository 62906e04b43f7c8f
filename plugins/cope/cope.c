/* Contextual Position Encoding, CoPE (Golovneva, Wang, Weston and Sukhbaatar, "Contextual Position
 * Encoding: Learning to Count What's Important", arXiv 2405.18719, 2024), as counted positions
 * (BIASKIT_CAP_COUNT, ABI 2; plugin.h):
 *
 *     g_it = sigmoid(q_i . k_t / sqrt(d_head)),   p_ij = min(sum_{t=j..i} g_it, points - 1)
 *     score[h,i,j] += pos_scale ((1 - w) q_i . e_floor(p) + w q_i . e_ceil(p)),   w = p - floor(p)
 *
 * The engine's attention computes the gates, the counts and the interpolation (core/cpu/attention.c,
 * core/model/cope_math.h); this plugin owns the position vectors e_0 .. e_{points-1}: one set per layer
 * (BIASKIT_FLAG_PER_LAYER; per_layer = false shares them, the reference code's --cope-shared), shared by
 * the heads of the layer, initialised to zero as the reference code does.
 *
 * Options:
 *   points      position vectors (0: the training length + 1, the reference code's block_size + 1); counts
 *               are clamped to points - 1
 *   pos_scale   "sqrt_d": the interpolated q . e is divided by sqrt(d_head) with q . k (the reference code,
 *               (z + pos) / sqrt(d)); "none": added as it is (the paper's appendix code)
 *   init_std    standard deviation of the vectors' normal initialisation (0: zeros, the reference code's) */
#include <biaskit/plugin.h>
#include <biaskit/random.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cope {
    const biaskit_services *svc;
    int32_t points, d_head;
    int divide;
    double init_std;
} cope;

static const biaskit_option options[] = {
    BIASKIT_OPTION_INT("points", 0, "position vectors, counts clamped to points - 1 (0: training length + 1)"),
    BIASKIT_OPTION_CHOICE("pos_scale", "sqrt_d", "sqrt_d|none",
                          "sqrt_d: q.e divided by sqrt(d_head) like q.k (reference code); none: added unscaled"),
    BIASKIT_OPTION_DOUBLE("init_std", 0.0, "standard deviation of the vectors' normal initialisation (0: zeros)"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    if (geo->d_head < 1 || geo->train_length < 1)
        return svc->error(err, BIASKIT_ERR_INVALID, "expected a head width and a training length >= 1, got %d and %d",
                          (int)geo->d_head, (int)geo->train_length);
    int64_t points = 0;
    const char *pos_scale = NULL;
    double init_std = 0.0;
    int rc;
    if ((rc = svc->get_int(cfg, "points", &points, err)) || (rc = svc->get_string(cfg, "pos_scale", &pos_scale, err)) ||
        (rc = svc->get_double(cfg, "init_std", &init_std, err)))
        return rc;
    if (points == 0)
        points = (int64_t)geo->train_length + 1;
    if (points < 2 || points > 65536)
        return svc->config_error(cfg, "points", err, "expected 2 .. 65536 position vectors (or 0), got %lld",
                                 (long long)points);
    if (!isfinite(init_std) || init_std < 0.0)
        return svc->config_error(cfg, "init_std", err, "expected a finite standard deviation >= 0, got %g", init_std);
    cope *c = calloc(1, sizeof *c);
    if (!c)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    c->svc = svc;
    c->points = (int32_t)points;
    c->d_head = geo->d_head;
    c->divide = !strcmp(pos_scale, "sqrt_d");
    c->init_std = init_std;
    *out = c;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

static int64_t param_count(const void *inst)
{
    const cope *c = inst;
    return (int64_t)c->points * c->d_head;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)err;
    const cope *c = inst;
    biaskit_rng r = biaskit_rng_seeded(seed);
    for (int64_t k = 0; k < param_count(c); k++)
        theta[k] = c->init_std > 0.0 ? (float)(c->init_std * biaskit_rng_normal(&r)) : 0.0f;
    return BIASKIT_OK;
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    const cope *c = inst;
    if (capacity > 0)
        out[0] = (biaskit_tensor_info){"e", 0, c->points, c->d_head};
    return 1;
}

static int param_info(const void *inst, int32_t tensor, biaskit_param_info *out, biaskit_error *err)
{
    (void)tensor, (void)err;
    const cope *c = inst;
    if (c->init_std > 0.0)
        snprintf(out->init, sizeof out->init, "normal(0, %g)", c->init_std);
    else
        snprintf(out->init, sizeof out->init, "0 (the reference code's zeros)");
    return BIASKIT_OK;
}

static int count(const void *inst, const biaskit_context *ctx, biaskit_count *out, biaskit_error *err)
{
    (void)ctx, (void)err;
    const cope *c = inst;
    out->points = c->points;
    out->pos_scale = c->divide ? (float)(1.0 / sqrt((double)c->d_head)) : 1.0f;
    return BIASKIT_OK;
}

static int check_call(const cope *c, const float *theta, int32_t points, biaskit_error *err)
{
    if (!theta)
        return c->svc->error(err, BIASKIT_ERR_INVALID, "theta is NULL: the position vectors are parameters");
    if (points != c->points)
        return c->svc->error(err, BIASKIT_ERR_INVALID, "expected %d position vectors (count()), got %d",
                             (int)c->points, (int)points);
    return BIASKIT_OK;
}

static int count_vectors(const void *inst, const float *theta, const biaskit_context *ctx, int32_t points, float *E,
                         biaskit_error *err)
{
    (void)ctx;
    const cope *c = inst;
    int rc = check_call(c, theta, points, err);
    if (rc)
        return rc;
    memcpy(E, theta, (size_t)param_count(c) * sizeof *E);
    return BIASKIT_OK;
}

static int count_vectors_backward(const void *inst, const float *theta, const biaskit_context *ctx, int32_t points,
                                  const float *dE, float *dtheta, biaskit_error *err)
{
    (void)ctx;
    const cope *c = inst;
    int rc = check_call(c, theta, points, err);
    if (rc)
        return rc;
    for (int64_t k = 0; k < param_count(c); k++)
        dtheta[k] += dE[k];
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "cope",
    .version = "1.0.0",
    .summary = "Contextual Position Encoding: positions counted by gates sigmoid(q.k), read from learned vectors",
    .reference = "Golovneva, Wang, Weston, Sukhbaatar, Contextual Position Encoding: Learning to Count What's "
                 "Important, arXiv 2405.18719 (2024)",
    .capabilities = BIASKIT_CAP_COUNT,
    .flags = BIASKIT_FLAG_PER_LAYER,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .param_count = param_count,
    .param_init = param_init,
    .param_tensors = param_tensors,
    .param_info = param_info,
    .count = count,
    .count_vectors = count_vectors,
    .count_vectors_backward = count_vectors_backward,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
