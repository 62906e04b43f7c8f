/* ALiBi as a biaskit plugin: T_h(d) = -m_h * d with fixed slopes m_h, no learnable parameters.
 *
 * Options (all optional):
 *   slope_scale   multiplies every slope (BiPE-ALiBi uses 96 on the segment stream)
 *   uniform_slope one slope for every head instead of the reference series
 *   slopes        an explicit slope per head (MEP's slope ablations); exactly n_heads values
 * uniform_slope and slopes exclude each other; slope_scale applies to all three sources. */
#include "alibi_math.h"
#ifdef BIASKIT_WITH_CUDA
#include "alibi_cuda.h"
#endif

#include <math.h>
#include <stdlib.h>

typedef struct alibi {
    const biaskit_services *svc;
    int32_t heads;
    float *slopes;        /* heads values, scale applied */
    float *device_slopes; /* lazily made device copy (CUDA builds) */
} alibi;

static const biaskit_option options[] = {
    BIASKIT_OPTION_DOUBLE("slope_scale", 1.0, "multiplies every slope (BiPE-ALiBi: 96 on the segment stream)"),
    BIASKIT_OPTION_DOUBLE("uniform_slope", 0.0, "if set: this one slope for every head instead of 2^(-8h/n)"),
    BIASKIT_OPTION_DOUBLE_ARRAY("slopes", "if set: one slope per head (n_heads values) instead of 2^(-8h/n)"),
};

static void destroy(void *inst)
{
    alibi *a = inst;
    if (!a)
        return;
#ifdef BIASKIT_WITH_CUDA
    bk_alibi_cuda_release(a->device_slopes);
#endif
    free(a->slopes);
    free(a);
}

/* Read the options into `slope` (heads values, unscaled). */
static int read_slopes(const biaskit_services *svc, const biaskit_config *cfg, int32_t heads, double *slope,
                       biaskit_error *err)
{
    int rc;
    if (svc->is_set(cfg, "uniform_slope") && svc->is_set(cfg, "slopes"))
        return svc->config_error(cfg, "slopes", err, "'slopes' and 'uniform_slope' exclude each other; set one");
    if (svc->is_set(cfg, "uniform_slope")) {
        double u;
        if ((rc = svc->get_double(cfg, "uniform_slope", &u, err)))
            return rc;
        if (!isfinite(u) || u < 0.0)
            return svc->config_error(cfg, "uniform_slope", err, "expected a finite slope >= 0, got %g", u);
        for (int32_t h = 0; h < heads; h++)
            slope[h] = u;
        return BIASKIT_OK;
    }
    if (svc->is_set(cfg, "slopes")) {
        int32_t count = 0;
        if ((rc = svc->get_double_array(cfg, "slopes", slope, heads, &count, err)))
            return rc;
        if (count != heads)
            return svc->config_error(cfg, "slopes", err, "expected %d slopes (one per head), got %d", (int)heads,
                                     (int)count);
        for (int32_t h = 0; h < heads; h++)
            if (!isfinite(slope[h]) || slope[h] < 0.0)
                return svc->config_error(cfg, "slopes", err, "slope %d: expected a finite slope >= 0, got %g",
                                         (int)h, slope[h]);
        return BIASKIT_OK;
    }
    bk_alibi_slopes(heads, slope);
    return BIASKIT_OK;
}

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    if (geo->n_heads < 1)
        return svc->error(err, BIASKIT_ERR_INVALID, "expected at least one head, got %d", (int)geo->n_heads);
    double scale;
    int rc = svc->get_double(cfg, "slope_scale", &scale, err);
    if (rc)
        return rc;
    if (!isfinite(scale) || scale < 0.0)
        return svc->config_error(cfg, "slope_scale", err, "expected a finite scale >= 0, got %g", scale);

    double *slope = malloc(sizeof *slope * (size_t)geo->n_heads);
    alibi *a = calloc(1, sizeof *a);
    if (a)
        a->slopes = malloc(sizeof *a->slopes * (size_t)geo->n_heads);
    if (!slope || !a || !a->slopes) {
        free(slope);
        destroy(a);
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory for %d slopes", (int)geo->n_heads);
    }
    if ((rc = read_slopes(svc, cfg, geo->n_heads, slope, err))) {
        free(slope);
        destroy(a);
        return rc;
    }
    a->svc = svc;
    a->heads = geo->n_heads;
    for (int32_t h = 0; h < a->heads; h++)
        a->slopes[h] = (float)(scale * slope[h]);
    free(slope);
    *out = a;
    return BIASKIT_OK;
}

static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    (void)theta;
    const alibi *a = inst;
    if (distances <= 0)
        return a->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", (int)distances);
    for (int32_t h = 0; h < a->heads; h++)
        for (int32_t d = 0; d < distances; d++)
            out[(size_t)h * (size_t)distances + (size_t)d] = bk_alibi_bias(a->slopes[h], d);
    return BIASKIT_OK;
}

#ifdef BIASKIT_WITH_CUDA
static int table_cuda(const void *inst, const float *theta, int32_t distances, float *out, void *stream,
                      biaskit_error *err)
{
    (void)theta;
    alibi *a = (alibi *)inst; /* the device copy of the slopes is a cache */
    if (distances <= 0)
        return a->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", (int)distances);
    return bk_alibi_table_cuda(a->svc, a->slopes, a->heads, &a->device_slopes, distances, out, stream, err);
}
#endif

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "alibi",
    .version = "1.0.0",
    .summary = "ALiBi: fixed linear bias -m_h * d, slopes 2^(-8h/n) (power-of-two and other head counts)",
    .reference = "Press, Smith & Lewis, Train Short, Test Long: Attention with Linear Biases, ICLR 2022",
    .capabilities = BIASKIT_CAP_TABLE,
    .flags = 0,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .table = table,
#ifdef BIASKIT_WITH_CUDA
    .table_cuda = table_cuda,
#endif
};

BIASKIT_DEFINE_PLUGIN(descriptor)
