/* ABI 2 plugins for `biaskit check` (tests/test_check.c): a correct coordinate plugin with a kink at its
 * initial parameters, and plugins that break one ABI 2 rule each. Compiled once per CHECKBAD2_KIND into
 * its own shared object; every other check must still pass on each.
 *
 * The coordinate base (kinds 1-3), FIRE's normaliser without the MLP: per-layer parameters a (one per
 * head), c and m;
 *     table over the grid: F_h(u_g) = a_h u_g, u_g = g / (POINTS - 1)
 *     phi[d] = log(|c| d + 1),  rscale[i] = 1 / (log(|c| max(i, |m| T) + 1) + eps),  T = train_length / 2
 * initialised (param_init_ctx) to a_h = 0.5 + 0.1 h, c = 0.1, m = 1: the row i = T sits exactly on the
 * kink of max(i, |m| T) in m (its derivative is 0 on one side, not on the other), as FIRE's does at an
 * integer threshold. The scale base (kinds 4-5): s_h(i) = a_h log(i + 1), per head. The kinds:
 *   1 coordkink  correct: must pass, the kink stepped around
 *   2 coordfar   rscale 25% too large beyond row 4096: u(i, i) > 1 at long lengths only
 *   3 coordgrad  coordinate_backward 1.5 times too large
 *   4 scalenan   scale() NaN from query 5000 on
 *   5 scalegrad  scale_backward twice too large
 *   6 mask0      mask() with window 0
 *   7 rotamp0    rotary_ctx() amplitude 0 beyond 4 x the training length
 *   8 rotnan     rotary_ctx() frequencies NaN from 64 x the training length on
 *   9 rotdyn     rotary_ctx() dynamic scaling without max(1, .): s = length / L also below L
 *  10 masklen    mask() window = length / 2 (the mask item explains how it changes with the length;
 *                long-range-mask fails it: the engine computes one mask for the longest sequence of a call)
 *  11 rotviews   rotary_views() as ReRoPE's two views (window 4) at the training length, with a gap
 *                ([0, 4) then [5, inf)) at longer ones */
#include <biaskit/plugin.h>

#include <math.h>
#include <stdlib.h>

#ifndef CHECKBAD2_KIND
#error "compile with -DCHECKBAD2_KIND=1..11"
#endif

#define COORD (CHECKBAD2_KIND <= 3)
#define SCALE (CHECKBAD2_KIND == 4 || CHECKBAD2_KIND == 5)
#define MASK (CHECKBAD2_KIND == 6 || CHECKBAD2_KIND == 10)
#define ROTARY (CHECKBAD2_KIND >= 7 && CHECKBAD2_KIND <= 9 || CHECKBAD2_KIND == 11)
#define POINTS 65
#define EPS 1e-6
#define FAR_ROW 4096
#define NAN_QUERY 5000

typedef struct cb2 {
    const biaskit_services *svc;
    int32_t heads, layers, train_length, d_head;
    double T;
} cb2;

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    (void)cfg;
    if (geo->n_heads < 1 || geo->train_length < 2)
        return svc->error(err, BIASKIT_ERR_INVALID, "expected heads >= 1 and a train length >= 2, got %d and %d",
                          (int)geo->n_heads, (int)geo->train_length);
    cb2 *b = calloc(1, sizeof *b);
    if (!b)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    b->svc = svc;
    b->heads = geo->n_heads;
    b->layers = geo->n_layers;
    b->train_length = geo->train_length;
    b->d_head = geo->d_head;
    b->T = (double)(geo->train_length / 2); /* an integer: the kink sits on a row */
    *out = b;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

/* The context must be the engine's: refuse anything else, so that a wrong one fails the check. */
static int check_ctx(const cb2 *b, const biaskit_context *ctx, biaskit_error *err)
{
    if (!ctx || ctx->struct_size < sizeof *ctx || ctx->n_heads != b->heads || ctx->n_layers != b->layers ||
        ctx->train_length != b->train_length || ctx->layer < -1 || ctx->layer >= b->layers || ctx->length < 1)
        return b->svc->error(err, BIASKIT_ERR_INVALID, "a context unlike the engine's (struct_size %u, heads %d, "
                             "layers %d, layer %d, length %d, train_length %d)", ctx ? (unsigned)ctx->struct_size : 0u,
                             ctx ? (int)ctx->n_heads : -1, ctx ? (int)ctx->n_layers : -1, ctx ? (int)ctx->layer : -9,
                             ctx ? (int)ctx->length : -1, ctx ? (int)ctx->train_length : -1);
    return BIASKIT_OK;
}

#if COORD || SCALE
static int64_t param_count(const void *inst)
{
    return ((const cb2 *)inst)->heads + (COORD ? 2 : 0);
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)seed, (void)err;
    const cb2 *b = inst;
    for (int32_t h = 0; h < b->heads; h++)
        theta[h] = (float)(0.5 + 0.1 * h);
    if (COORD) {
        theta[b->heads] = 0.1f; /* c */
        theta[b->heads + 1] = 1.0f; /* m: |m| T = T, on row T */
    }
    return BIASKIT_OK;
}

static int param_init_ctx(const void *inst, float *theta, uint64_t seed, const biaskit_context *ctx,
                          biaskit_error *err)
{
    int rc = check_ctx(inst, ctx, err);
    return rc ? rc : param_init(inst, theta, seed, err);
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    const cb2 *b = inst;
    const biaskit_tensor_info t[3] = {{"a", 0, b->heads, 1}, {"c", b->heads, 1, 1}, {"m", b->heads + 1, 1, 1}};
    int32_t n = COORD ? 3 : 1;
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
    const cb2 *b = inst;
    if (points != POINTS)
        return b->svc->error(err, BIASKIT_ERR_INVALID, "the grid has %d points, got %d", POINTS, (int)points);
    for (int32_t h = 0; h < b->heads; h++)
        for (int32_t g = 0; g < points; g++)
            out[(size_t)h * POINTS + (size_t)g] = (float)((double)theta[h] * g / (POINTS - 1));
    return BIASKIT_OK;
}

static int table_backward(const void *inst, const float *theta, int32_t points, const float *dtable, float *dtheta,
                          biaskit_error *err)
{
    (void)theta;
    const cb2 *b = inst;
    if (points != POINTS)
        return b->svc->error(err, BIASKIT_ERR_INVALID, "the grid has %d points, got %d", POINTS, (int)points);
    for (int32_t h = 0; h < b->heads; h++) {
        double acc = 0.0;
        for (int32_t g = 0; g < points; g++)
            acc += (double)dtable[(size_t)h * POINTS + (size_t)g] * g / (POINTS - 1);
        dtheta[h] += (float)acc;
    }
    return BIASKIT_OK;
}

static double sign(double x)
{
    return (double)((x > 0.0) - (x < 0.0));
}

/* N(i) = max(i, |m| T) */
static double normaliser(const cb2 *b, double m, int32_t i)
{
    double n0 = fabs(m) * b->T;
    return n0 > (double)i ? n0 : (double)i;
}

static double rscale_of(const cb2 *b, double c, double m, int32_t i)
{
    return 1.0 / (log1p(fabs(c) * normaliser(b, m, i)) + EPS);
}

static int coordinate(const void *inst, const float *theta, const biaskit_context *ctx, int32_t distances,
                      int32_t rows, float *phi, float *rscale, biaskit_error *err)
{
    const cb2 *b = inst;
    int rc = check_ctx(b, ctx, err);
    if (rc)
        return rc;
    double c = theta[b->heads], m = theta[b->heads + 1];
    for (int32_t d = 0; d < distances; d++)
        phi[d] = (float)log1p(fabs(c) * d);
    for (int32_t i = 0; i < rows; i++) {
        double r = rscale_of(b, c, m, i);
        if (CHECKBAD2_KIND == 2 && i >= FAR_ROW)
            r *= 1.25; /* the bug: u(i, i) up to 1.25, beyond 4096 rows only */
        rscale[i] = (float)r;
    }
    return BIASKIT_OK;
}

static int coordinate_backward(const void *inst, const float *theta, const biaskit_context *ctx, int32_t distances,
                               int32_t rows, const float *dphi, const float *drscale, float *dtheta,
                               biaskit_error *err)
{
    const cb2 *b = inst;
    int rc = check_ctx(b, ctx, err);
    if (rc)
        return rc;
    double c = theta[b->heads], m = theta[b->heads + 1], dc = 0.0, dm = 0.0;
    for (int32_t d = 0; d < distances; d++)
        dc += (double)dphi[d] * d * sign(c) / (fabs(c) * d + 1.0);
    for (int32_t i = 0; i < rows; i++) {
        double r = rscale_of(b, c, m, i), N = normaliser(b, m, i), dpsi_dN = fabs(c) / (fabs(c) * N + 1.0);
        dc += (double)drscale[i] * -r * r * N * sign(c) / (fabs(c) * N + 1.0);
        if (fabs(m) * b->T > (double)i) /* the threshold wins: N = |m| T (on the kink, as torch: 0) */
            dm += (double)drscale[i] * -r * r * dpsi_dN * b->T * sign(m);
    }
    double factor = CHECKBAD2_KIND == 3 ? 1.5 : 1.0; /* kind 3: off by a factor */
    dtheta[b->heads] += (float)(factor * dc);
    dtheta[b->heads + 1] += (float)(factor * dm);
    return BIASKIT_OK;
}
#endif

#if SCALE
static int scale(const void *inst, const float *theta, const biaskit_context *ctx, int32_t rows, float *out,
                 biaskit_error *err)
{
    const cb2 *b = inst;
    int rc = check_ctx(b, ctx, err);
    if (rc)
        return rc;
    for (int32_t h = 0; h < b->heads; h++)
        for (int32_t i = 0; i < rows; i++)
            out[(size_t)h * (size_t)rows + (size_t)i] =
                (CHECKBAD2_KIND == 4 && i >= NAN_QUERY) ? NAN : (float)((double)theta[h] * log1p((double)i));
    return BIASKIT_OK;
}

static int scale_backward(const void *inst, const float *theta, const biaskit_context *ctx, int32_t rows,
                          const float *dscale, float *dtheta, biaskit_error *err)
{
    (void)theta;
    const cb2 *b = inst;
    int rc = check_ctx(b, ctx, err);
    if (rc)
        return rc;
    for (int32_t h = 0; h < b->heads; h++) {
        double acc = 0.0;
        for (int32_t i = 0; i < rows; i++)
            acc += (double)dscale[(size_t)h * (size_t)rows + (size_t)i] * log1p((double)i);
        dtheta[h] += (float)((CHECKBAD2_KIND == 5 ? 2.0 : 1.0) * acc); /* kind 5: twice too large */
    }
    return BIASKIT_OK;
}
#endif

#if MASK
static int mask(const void *inst, const biaskit_context *ctx, biaskit_mask *out, biaskit_error *err)
{
    const cb2 *b = inst;
    int rc = check_ctx(b, ctx, err);
    if (rc)
        return rc;
    out->window = CHECKBAD2_KIND == 6 ? 0 : (ctx->length / 2 > 1 ? ctx->length / 2 : 1);
    out->sinks = 4;
    out->distance_cap = 0;
    return BIASKIT_OK;
}
#endif

#if ROTARY
/* Plain RoPE, base 10000 */
static double plain(const cb2 *b, int32_t k)
{
    return pow(10000.0, -2.0 * k / (double)b->d_head);
}

static int rotary_frequencies(const void *inst, float *inv_freq, biaskit_error *err)
{
    (void)err;
    const cb2 *b = inst;
    for (int32_t k = 0; k < b->d_head / 2; k++)
        inv_freq[k] = (float)plain(b, k);
    return BIASKIT_OK;
}

/* Position interpolation, dynamic: theta_k / s, s = max(1, length / L) (kind 9 forgets the max). */
static int rotary_ctx(const void *inst, const biaskit_context *ctx, float *inv_freq, float *amplitude,
                      biaskit_error *err)
{
    const cb2 *b = inst;
    int rc = check_ctx(b, ctx, err);
    if (rc)
        return rc;
    double s = (double)ctx->length / b->train_length;
    if (CHECKBAD2_KIND != 9 && s < 1.0)
        s = 1.0;
    for (int32_t k = 0; k < b->d_head / 2; k++)
        inv_freq[k] = (CHECKBAD2_KIND == 8 && ctx->length >= 64 * b->train_length) ? NAN : (float)(plain(b, k) / s);
    *amplitude = (CHECKBAD2_KIND == 7 && ctx->length > 4 * b->train_length) ? 0.0f : 1.0f;
    return BIASKIT_OK;
}

#if CHECKBAD2_KIND == 11
static int rotary_views(const void *inst, const biaskit_context *ctx, biaskit_rotary_view *views, int32_t max_views,
                        int32_t *n_views, biaskit_error *err)
{
    const cb2 *b = inst;
    (void)max_views, (void)err;
    views[0].min_distance = 0, views[0].max_distance = 4;
    views[1].min_distance = ctx->length > b->train_length ? 5 : 4, views[1].max_distance = 0;
    for (int32_t t = 0; t < ctx->length; t++) {
        views[0].q_pos[t] = views[0].k_pos[t] = t;
        views[1].q_pos[t] = 4, views[1].k_pos[t] = 0;
    }
    *n_views = 2;
    return BIASKIT_OK;
}
#endif
#endif

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = CHECKBAD2_NAME,
    .version = "0.0.1",
    .summary = "test plugin for biaskit check: an ABI 2 capability, right (kinks) or broken on purpose",
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
    .scale = scale,
    .scale_backward = scale_backward,
#elif MASK
    .capabilities = BIASKIT_CAP_MASK,
    .mask = mask,
#else
    .capabilities = BIASKIT_CAP_ROTARY,
    .rotary_frequencies = rotary_frequencies,
    .rotary_ctx = rotary_ctx,
#if CHECKBAD2_KIND == 11
    .rotary_views = rotary_views,
#endif
#endif
#if COORD || SCALE
    .param_count = param_count,
    .param_init = param_init,
    .param_init_ctx = param_init_ctx,
    .param_tensors = param_tensors,
#endif
    .create = create,
    .destroy = destroy,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
