/* ABI 2 plugins for the long-range probes of `biaskit check` ("long-range-coordinate", "shape",
 * "long-range-scale", "long-range-mask"; core/check/longrange.c, tests/test_check.c). Compiled once per
 * CHECKBAD4_KIND into its own shared object; every other check passes on each.
 *
 * The coordinate base (kinds 1, 2, 5): per-layer parameters a (one per head, >= 0 by param_project) and c;
 *     table over the grid: F_h(u_g) = -a_h u_g (kind 5: +a_h u_g), u_g = g / (POINTS - 1)
 *     phi[d] = log(|c| d + 1),  rscale[i] = 1 / (log(|c| max(i, T) + 1) + eps),  T = train_length / 2
 * initialised to a_h = 0.5 + 0.1 h, c = 0.1. The scale base (kind 3): s_h(i) = a_h log(i + 1). The kinds:
 *   1 phiinf     phi[d] = inf beyond distance PHI_FROM (100000): past every length the other checks use
 *   2 ufar       rscale 25% too large beyond row FAR_ROW (8192): u(i, i) > 1 on those rows only
 *   3 scalenan   s_h(i) NaN beyond row NAN_ROW (5000), but only for a head whose a_h is not its initial
 *                value: at random (and corner) parameters only
 *   4 maskgrow   mask() window 128, but length / 512 for lengths beyond GROW_FROM (65536): the window
 *                depends on ctx->length only far out
 *   5 rising     correct, F increasing: every head prefers distant tokens (the "shape" WARN) */
#include <biaskit/plugin.h>

#include <math.h>
#include <stdlib.h>

#ifndef CHECKBAD4_KIND
#error "compile with -DCHECKBAD4_KIND=1..5"
#endif

#define COORD (CHECKBAD4_KIND == 1 || CHECKBAD4_KIND == 2 || CHECKBAD4_KIND == 5)
#define SCALE (CHECKBAD4_KIND == 3)
#define MASK (CHECKBAD4_KIND == 4)
#define POINTS 65
#define EPS 1e-6
#define PHI_FROM 100000
#define FAR_ROW 8192
#define NAN_ROW 5000
#define GROW_FROM 65536
#define F_SIGN (CHECKBAD4_KIND == 5 ? 1.0 : -1.0)

typedef struct cb4 {
    const biaskit_services *svc;
    int32_t heads;
    double T;
} cb4;

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    (void)cfg;
    if (geo->n_heads < 1 || geo->train_length < 2)
        return svc->error(err, BIASKIT_ERR_INVALID, "expected heads >= 1 and a train length >= 2, got %d and %d",
                          (int)geo->n_heads, (int)geo->train_length);
    cb4 *b = calloc(1, sizeof *b);
    if (!b)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    b->svc = svc;
    b->heads = geo->n_heads;
    b->T = (double)(geo->train_length / 2);
    *out = b;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

#if COORD || SCALE
static double a_init(int32_t h)
{
    return 0.5 + 0.1 * h;
}

static int64_t param_count(const void *inst)
{
    return ((const cb4 *)inst)->heads + (COORD ? 1 : 0);
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)seed, (void)err;
    const cb4 *b = inst;
    for (int32_t h = 0; h < b->heads; h++)
        theta[h] = (float)a_init(h);
    if (COORD)
        theta[b->heads] = 0.1f; /* c */
    return BIASKIT_OK;
}

/* a_h >= 0: the shape of F stays what the kind says at every parameter set */
static void param_project(const void *inst, float *theta)
{
    const cb4 *b = inst;
    for (int32_t h = 0; h < b->heads; h++)
        if (!(theta[h] >= 0.0f))
            theta[h] = 0.0f;
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    const cb4 *b = inst;
    const biaskit_tensor_info t[2] = {{"a", 0, b->heads, 1}, {"c", b->heads, 1, 1}};
    int32_t n = COORD ? 2 : 1;
    for (int32_t k = 0; k < n && k < capacity; k++)
        out[k] = t[k];
    return n;
}
#endif

#if COORD
static int32_t coordinate_points(const void *inst)
{
    (void)inst;
    return POINTS;
}

static int table(const void *inst, const float *theta, int32_t points, float *out, biaskit_error *err)
{
    const cb4 *b = inst;
    if (points != POINTS)
        return b->svc->error(err, BIASKIT_ERR_INVALID, "the grid has %d points, got %d", POINTS, (int)points);
    for (int32_t h = 0; h < b->heads; h++)
        for (int32_t g = 0; g < points; g++)
            out[(size_t)h * POINTS + (size_t)g] = (float)(F_SIGN * (double)theta[h] * g / (POINTS - 1));
    return BIASKIT_OK;
}

static int table_backward(const void *inst, const float *theta, int32_t points, const float *dtable, float *dtheta,
                          biaskit_error *err)
{
    (void)theta;
    const cb4 *b = inst;
    if (points != POINTS)
        return b->svc->error(err, BIASKIT_ERR_INVALID, "the grid has %d points, got %d", POINTS, (int)points);
    for (int32_t h = 0; h < b->heads; h++) {
        double acc = 0.0;
        for (int32_t g = 0; g < points; g++)
            acc += (double)dtable[(size_t)h * POINTS + (size_t)g] * g / (POINTS - 1);
        dtheta[h] += (float)(F_SIGN * acc);
    }
    return BIASKIT_OK;
}

static double sign(double x)
{
    return (double)((x > 0.0) - (x < 0.0));
}

static double normaliser(const cb4 *b, int32_t i)
{
    return b->T > (double)i ? b->T : (double)i;
}

static int coordinate(const void *inst, const float *theta, const biaskit_context *ctx, int32_t distances,
                      int32_t rows, float *phi, float *rscale, biaskit_error *err)
{
    (void)ctx, (void)err;
    const cb4 *b = inst;
    double c = theta[b->heads];
    for (int32_t d = 0; d < distances; d++)
        phi[d] = (CHECKBAD4_KIND == 1 && d > PHI_FROM) ? INFINITY : (float)log1p(fabs(c) * d);
    for (int32_t i = 0; i < rows; i++) {
        double r = 1.0 / (log1p(fabs(c) * normaliser(b, i)) + EPS);
        if (CHECKBAD4_KIND == 2 && i > FAR_ROW)
            r *= 1.25; /* the bug: u(i, i) up to 1.25, beyond row 8192 only */
        rscale[i] = (float)r;
    }
    return BIASKIT_OK;
}

static int coordinate_backward(const void *inst, const float *theta, const biaskit_context *ctx, int32_t distances,
                               int32_t rows, const float *dphi, const float *drscale, float *dtheta,
                               biaskit_error *err)
{
    (void)ctx, (void)err;
    const cb4 *b = inst;
    double c = theta[b->heads], dc = 0.0;
    for (int32_t d = 0; d < distances && d <= PHI_FROM; d++)
        dc += (double)dphi[d] * d * sign(c) / (fabs(c) * d + 1.0);
    for (int32_t i = 0; i < rows; i++) {
        double N = normaliser(b, i), r = 1.0 / (log1p(fabs(c) * N) + EPS);
        double dr = -r * r * N * sign(c) / (fabs(c) * N + 1.0);
        if (CHECKBAD4_KIND == 2 && i > FAR_ROW)
            dr *= 1.25;
        dc += (double)drscale[i] * dr;
    }
    dtheta[b->heads] += (float)dc;
    return BIASKIT_OK;
}
#endif

#if SCALE
static float scale_of(const float *theta, int32_t h, int32_t i)
{
    /* the bug: NaN far out, only once a_h has left its initial value */
    if (i > NAN_ROW && fabsf(theta[h] - (float)a_init(h)) > 1e-6f)
        return NAN;
    return (float)((double)theta[h] * log1p((double)i));
}

static int scale(const void *inst, const float *theta, const biaskit_context *ctx, int32_t rows, float *out,
                 biaskit_error *err)
{
    (void)ctx, (void)err;
    const cb4 *b = inst;
    for (int32_t h = 0; h < b->heads; h++)
        for (int32_t i = 0; i < rows; i++)
            out[(size_t)h * (size_t)rows + (size_t)i] = scale_of(theta, h, i);
    return BIASKIT_OK;
}

static int scale_backward(const void *inst, const float *theta, const biaskit_context *ctx, int32_t rows,
                          const float *dscale, float *dtheta, biaskit_error *err)
{
    (void)theta, (void)ctx, (void)err;
    const cb4 *b = inst;
    for (int32_t h = 0; h < b->heads; h++) {
        double acc = 0.0;
        for (int32_t i = 0; i < rows; i++)
            acc += (double)dscale[(size_t)h * (size_t)rows + (size_t)i] * log1p((double)i);
        dtheta[h] += (float)acc;
    }
    return BIASKIT_OK;
}
#endif

#if MASK
static int mask(const void *inst, const biaskit_context *ctx, biaskit_mask *out, biaskit_error *err)
{
    (void)inst, (void)err;
    out->window = ctx->length > GROW_FROM ? ctx->length / 512 : 128; /* the bug: grows with the length */
    out->sinks = 4;
    out->distance_cap = 0;
    return BIASKIT_OK;
}
#endif

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = CHECKBAD4_NAME,
    .version = "0.0.1",
    .summary = "test plugin for biaskit check: an ABI 2 capability that breaks (or not) far away",
#if COORD
    .capabilities = BIASKIT_CAP_COORDINATE,
    .flags = BIASKIT_FLAG_PER_LAYER,
    .table = table,
    .table_backward = table_backward,
    .coordinate_points = coordinate_points,
    .coordinate = coordinate,
    .coordinate_backward = coordinate_backward,
#elif SCALE
    .capabilities = BIASKIT_CAP_SCALE,
    .flags = BIASKIT_FLAG_PER_LAYER,
    .scale = scale,
    .scale_backward = scale_backward,
#else
    .capabilities = BIASKIT_CAP_MASK,
    .mask = mask,
#endif
    .create = create,
    .destroy = destroy,
#if COORD || SCALE
    .param_count = param_count,
    .param_init = param_init,
    .param_project = param_project,
    .param_tensors = param_tensors,
#endif
};

BIASKIT_DEFINE_PLUGIN(descriptor)
