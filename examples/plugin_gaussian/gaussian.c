/* An out-of-tree biaskit plugin: a Gaussian (squared-distance) bias T_h(d) = -w_h * d^2 with one
 * width per head, learnable by default. It builds against the installed SDK only; see README.md.
 *
 * Options:
 *   init_width  initial w_h of every head (> 0)
 *   learnable   false: w is fixed at init_width (the plugin then has no parameters)
 *
 * A learnable plugin reads its values from theta, which the engine owns on the host and, for the CUDA
 * hooks, on the device. A frozen plugin (theta = NULL) keeps its fixed values itself: here `frozen`,
 * and in CUDA builds a device copy made once by biaskit_cuda_upload_once() (gaussian.cu), freed in
 * destroy(). */
#include "gaussian_math.h"
#ifdef BIASKIT_WITH_CUDA
#include "gaussian_cuda.h"
#endif

#include <math.h>
#include <stdlib.h>

typedef struct gaussian {
    const biaskit_services *svc;
    int32_t heads;
    double init_width;
    int learnable;
    float *frozen;        /* learnable = false: the fixed width of each head (host) */
    float *device_frozen; /* its device copy, made on the first table_cuda() call (CUDA builds) */
} gaussian;

static const biaskit_option options[] = {
    BIASKIT_OPTION_DOUBLE("init_width", 1e-3, "initial width w of every head (> 0): T(d) = -w d^2"),
    BIASKIT_OPTION_BOOL("learnable", 1, "train the widths (false: fixed at init_width, no parameters)"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    gaussian g = {svc, geo->n_heads, 0.0, 1, NULL, NULL};
    int rc;
    if ((rc = svc->get_double(cfg, "init_width", &g.init_width, err)) ||
        (rc = svc->get_bool(cfg, "learnable", &g.learnable, err)))
        return rc;
    if (!isfinite(g.init_width) || g.init_width <= 0.0)
        return svc->config_error(cfg, "init_width", err, "expected a finite width > 0, got %g", g.init_width);
    if (!g.learnable) {
        if (g.heads > 0 && !(g.frozen = malloc(sizeof *g.frozen * (size_t)g.heads)))
            return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory for %d widths", (int)g.heads);
        for (int32_t h = 0; h < g.heads; h++)
            g.frozen[h] = (float)g.init_width;
    }
    gaussian *inst = malloc(sizeof *inst);
    if (!inst) {
        free(g.frozen);
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    }
    *inst = g;
    *out = inst;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    gaussian *g = inst;
#ifdef BIASKIT_WITH_CUDA
    gaussian_cuda_release(g->device_frozen);
#endif
    free(g->frozen);
    free(g);
}

static int64_t param_count(const void *inst)
{
    const gaussian *g = inst;
    return g->learnable ? g->heads : 0;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)seed, (void)err;
    const gaussian *g = inst;
    for (int32_t h = 0; g->learnable && h < g->heads; h++)
        theta[h] = (float)g->init_width;
    return BIASKIT_OK;
}

/* A width below zero would turn the bias into a reward for distance: clamp at 0. */
static void param_project(const void *inst, float *theta)
{
    const gaussian *g = inst;
    for (int32_t h = 0; g->learnable && h < g->heads; h++)
        if (!(theta[h] >= 0.0f))
            theta[h] = 0.0f;
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    const gaussian *g = inst;
    if (!g->learnable)
        return 0;
    if (capacity > 0)
        out[0] = (biaskit_tensor_info){"width", 0, g->heads, 1};
    return 1;
}

static float width_of(const gaussian *g, const float *theta, int32_t h)
{
    return g->learnable ? theta[h] : g->frozen[h];
}

static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    const gaussian *g = inst;
    if (distances <= 0)
        return g->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", (int)distances);
    for (int32_t h = 0; h < g->heads; h++) {
        float w = width_of(g, theta, h);
        for (int32_t d = 0; d < distances; d++)
            out[(size_t)h * (size_t)distances + (size_t)d] = gaussian_bias(w, d);
    }
    return BIASKIT_OK;
}

static int table_backward(const void *inst, const float *theta, int32_t distances, const float *dtable,
                          float *dtheta, biaskit_error *err)
{
    (void)theta;
    const gaussian *g = inst;
    if (distances <= 0)
        return g->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", (int)distances);
    for (int32_t h = 0; g->learnable && h < g->heads; h++) {
        double acc = 0.0; /* d^2 grows fast: accumulate in double */
        for (int32_t d = 0; d < distances; d++)
            acc += (double)dtable[(size_t)h * (size_t)distances + (size_t)d] * (double)gaussian_bias_dwidth(d);
        dtheta[h] += (float)acc;
    }
    return BIASKIT_OK;
}

#ifdef BIASKIT_WITH_CUDA
static int table_cuda(const void *inst, const float *theta, int32_t distances, float *out, void *stream,
                      biaskit_error *err)
{
    gaussian *g = (gaussian *)inst; /* device_frozen is a cache the first call fills */
    if (distances <= 0)
        return g->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", (int)distances);
    return gaussian_table_cuda(g->svc, g->heads, g->learnable ? theta : NULL, g->frozen, &g->device_frozen, distances,
                               out, stream, err);
}

static int table_backward_cuda(const void *inst, const float *theta, int32_t distances, const float *dtable,
                               float *dtheta, void *stream, biaskit_error *err)
{
    (void)theta;
    const gaussian *g = inst;
    if (!g->learnable)
        return BIASKIT_OK;
    if (distances <= 0)
        return g->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", (int)distances);
    return gaussian_table_backward_cuda(g->svc, g->heads, distances, dtable, dtheta, stream, err);
}
#endif

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "gaussian",
    .version = "0.1.0",
    .summary = "example: Gaussian bias -w_h d^2, one learnable width per head",
    .reference = "biaskit SDK example (the Gaussian kernel of MEP, Gao 2024, as a plain bias)",
    .capabilities = BIASKIT_CAP_TABLE,
    .flags = 0,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .param_count = param_count,
    .param_init = param_init,
    .param_project = param_project,
    .param_tensors = param_tensors,
    .table = table,
    .table_backward = table_backward,
#ifdef BIASKIT_WITH_CUDA
    .table_cuda = table_cuda,
    .table_backward_cuda = table_backward_cuda,
#endif
};

BIASKIT_DEFINE_PLUGIN(descriptor)
