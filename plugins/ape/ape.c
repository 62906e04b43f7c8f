/* Absolute position embeddings as a biaskit plugin (the `embed` capability): the baselines every
 * length-extrapolation paper compares against. The vector A[p] is added to the token embedding at
 * the input; p is the token index (stream = "token") or the position inside the segment (stream =
 * "segment", with a segmenting term such as bipe).
 *
 *   variant = "sinusoidal"  fixed sin/cos of Vaswani et al. (no parameters), any position;
 *   variant = "learned"     a trained table of max_positions rows (GPT-2 style), N(0, init_std^2);
 *                           positions past the table read its last row. */
#include "ape_math.h"

#include <math.h>
#include <stdlib.h>

#ifdef BIASKIT_WITH_CUDA
#include "ape_cuda.h"
#endif

#define APE_SINUSOIDAL 0
#define APE_LEARNED 1

typedef struct ape {
    const biaskit_services *svc;
    int variant;
    int32_t dim;
    int32_t rows;      /* learned: table rows */
    double base;       /* sinusoidal */
    double scale;      /* sinusoidal: amplitude */
    double init_std;   /* learned */
    float *cache;      /* sinusoidal: cached_rows x dim values */
    int32_t cached_rows;
    int64_t *device_runs;      /* CUDA builds: scratch of embed_backward_cuda */
    int64_t device_runs_capacity;
} ape;

static const biaskit_option options[] = {
    BIASKIT_OPTION_CHOICE("variant", "sinusoidal", "sinusoidal|learned",
                          "sinusoidal: fixed sin/cos (Vaswani et al.); learned: a trained table"),
    BIASKIT_OPTION_DOUBLE("base", 10000.0, "sinusoidal: wavelength base, w_i = base^(-2i/dim)"),
    BIASKIT_OPTION_DOUBLE("scale", 0.0,
                          "sinusoidal: amplitude of the vectors (0 = 1/sqrt(dim), the Transformer paper's ratio to "
                          "its sqrt(dim)-scaled token embeddings)"),
    BIASKIT_OPTION_INT("max_positions", 0, "learned: rows of the table (0 = the training length)"),
    BIASKIT_OPTION_DOUBLE("init_std", 0.02, "learned: standard deviation of the initial values"),
};

static void destroy(void *inst)
{
    ape *a = inst;
    if (a) {
        free(a->cache);
#ifdef BIASKIT_WITH_CUDA
        bk_ape_cuda_release(a->device_runs);
#endif
    }
    free(a);
}

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    const char *variant;
    int64_t rows;
    double base, init_std, scale;
    int rc;
    if ((rc = svc->get_string(cfg, "variant", &variant, err)) || (rc = svc->get_double(cfg, "base", &base, err)) ||
        (rc = svc->get_double(cfg, "scale", &scale, err)) ||
        (rc = svc->get_int(cfg, "max_positions", &rows, err)) || (rc = svc->get_double(cfg, "init_std", &init_std, err)))
        return rc;
    if (geo->d_model < 2 || geo->d_model % 2)
        return svc->error(err, BIASKIT_ERR_INVALID, "the model width must be even and >= 2 for sin/cos pairs, got %d",
                          (int)geo->d_model);
    if (!isfinite(base) || base <= 1.0)
        return svc->config_error(cfg, "base", err, "expected a finite base > 1, got %g", base);
    if (!isfinite(scale) || scale < 0.0)
        return svc->config_error(cfg, "scale", err, "expected a finite amplitude >= 0 (0 = 1/sqrt(dim)), got %g", scale);
    if (variant[0] == 'l' && svc->is_set(cfg, "scale"))
        return svc->config_error(cfg, "scale", err, "applies to variant = \"sinusoidal\" only (a learned table's "
                                 "size is set by init_std)");
    if (rows < 0 || rows > (1 << 24))
        return svc->config_error(cfg, "max_positions", err, "expected 0 (the training length) or 1 .. 16777216 rows, got %lld",
                                 (long long)rows);
    if (rows == 0)
        rows = geo->train_length;
    if (rows < 1)
        return svc->config_error(cfg, "max_positions", err, "expected at least one row (the training length is %d)",
                                 (int)geo->train_length);
    if (!isfinite(init_std) || init_std < 0.0)
        return svc->config_error(cfg, "init_std", err, "expected a finite standard deviation >= 0, got %g", init_std);
    ape *a = calloc(1, sizeof *a);
    if (!a)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    a->svc = svc;
    a->variant = variant[0] == 'l' ? APE_LEARNED : APE_SINUSOIDAL;
    a->dim = geo->d_model;
    a->rows = (int32_t)rows;
    a->base = base;
    a->scale = scale > 0.0 ? scale : bk_ape_default_scale(geo->d_model);
    a->init_std = init_std;
    *out = a;
    return BIASKIT_OK;
}

static int64_t param_count(const void *inst)
{
    const ape *a = inst;
    return a->variant == APE_LEARNED ? (int64_t)a->rows * a->dim : 0;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)err;
    const ape *a = inst;
    bk_ape_learned_init(theta, param_count(inst), a->init_std, seed);
    return BIASKIT_OK;
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    const ape *a = inst;
    if (a->variant != APE_LEARNED)
        return 0;
    if (capacity >= 1)
        out[0] = (biaskit_tensor_info){"table", 0, a->rows, a->dim};
    return 1;
}

/* The sinusoidal rows 0 .. rows-1, computed once and kept (calls on an instance are not concurrent). */
static int sinusoidal_rows(ape *a, int32_t rows, biaskit_error *err)
{
    if (rows <= a->cached_rows)
        return BIASKIT_OK;
    float *cache = malloc(sizeof(float) * (size_t)rows * (size_t)a->dim);
    if (!cache)
        return a->svc->error(err, BIASKIT_ERR_NOMEM, "out of memory for %d sinusoidal rows", (int)rows);
    for (int32_t p = 0; p < rows; p++)
        for (int32_t c = 0; c < a->dim; c++)
            cache[(size_t)p * (size_t)a->dim + (size_t)c] = bk_ape_sinusoidal(a->base, a->scale, p, c, a->dim);
    free(a->cache);
    a->cache = cache;
    a->cached_rows = rows;
    return BIASKIT_OK;
}

static int embed(const void *inst, const float *theta, const int32_t *positions, int64_t count, float *out,
                 biaskit_error *err)
{
    ape *a = (ape *)inst; /* the sinusoidal cache */
    if (a->variant == APE_LEARNED) {
        bk_ape_learned_embed(theta, a->rows, a->dim, positions, count, out);
        return BIASKIT_OK;
    }
    int32_t rows = 0;
    for (int64_t n = 0; n < count; n++) {
        if (positions[n] < 0)
            return a->svc->error(err, BIASKIT_ERR_INVALID, "position %d of token %lld is negative", (int)positions[n],
                                 (long long)n);
        rows = positions[n] + 1 > rows ? positions[n] + 1 : rows;
    }
    int rc = sinusoidal_rows(a, rows, err);
    if (rc)
        return rc;
    bk_ape_learned_embed(a->cache, a->cached_rows, a->dim, positions, count, out);
    return BIASKIT_OK;
}

static int embed_backward(const void *inst, const float *theta, const int32_t *positions, int64_t count,
                          const float *dout, float *dtheta, biaskit_error *err)
{
    (void)theta, (void)err;
    const ape *a = inst;
    if (a->variant == APE_LEARNED)
        bk_ape_learned_backward(a->rows, a->dim, positions, count, dout, dtheta);
    return BIASKIT_OK;
}

#ifdef BIASKIT_WITH_CUDA
static int embed_cuda(const void *inst, const float *theta, const int32_t *positions, int64_t count, float *out,
                      void *stream, biaskit_error *err)
{
    const ape *a = inst;
    if (a->variant == APE_LEARNED && !theta)
        return a->svc->error(err, BIASKIT_ERR_INVALID, "expected %lld parameters (theta), got NULL",
                             (long long)param_count(inst));
    return bk_ape_embed_cuda(a->svc, a->variant == APE_LEARNED ? theta : NULL, a->rows, a->base, a->scale, a->dim, positions,
                             count, out, stream, err);
}

static int embed_backward_cuda(const void *inst, const float *theta, const int32_t *positions, int64_t count,
                               const float *dout, float *dtheta, void *stream, biaskit_error *err)
{
    (void)theta;
    ape *a = (ape *)inst; /* the device scratch is a cache */
    if (a->variant != APE_LEARNED)
        return BIASKIT_OK;
    return bk_ape_embed_backward_cuda(a->svc, a->rows, a->dim, positions, count, dout, dtheta, &a->device_runs,
                                      &a->device_runs_capacity, stream, err);
}
#endif

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "ape",
    .version = "1.0.0",
    .summary = "absolute position embedding added at the input: sinusoidal (fixed) or learned (table)",
    .reference = "Vaswani et al., Attention Is All You Need, NeurIPS 2017 (sinusoidal); GPT-2 (learned)",
    .capabilities = BIASKIT_CAP_EMBED,
    .flags = 0,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .param_count = param_count,
    .param_init = param_init,
    .param_tensors = param_tensors,
    .embed = embed,
    .embed_backward = embed_backward,
#ifdef BIASKIT_WITH_CUDA
    .embed_cuda = embed_cuda,
    .embed_backward_cuda = embed_backward_cuda,
#endif
};

BIASKIT_DEFINE_PLUGIN(descriptor)
