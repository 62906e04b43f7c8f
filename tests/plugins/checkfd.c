/* Plugins for the per-entry finite differences of `biaskit check` (core/check/gradient.c;
 * tests/test_check_fd.c): terms that mix scales. A linear decay with a tiny learnable curvature on a
 * large constant,
 *     T_h(d) = offset - a_h d - exp(log_b_h) d^2,   a_h ~ 0.5, exp(log_b_h) ~ 1e-6, offset 1000,
 * a_h in [0, 8], log_b_h in [-30, log 1e-4] (the curvature positive and tiny at every parameter the
 * projection allows; its exponent needs small steps, and each step moves entries of size ~1000 by
 * far less than their float rounding over the first distances). Compiled once per CHECKFD_KIND:
 *   1 mixed     gradients right: must pass (L = sum w T alone fails it through float rounding)
 *   2 mixedbad  dT/dlog_b_h 2% too large (a wrong factor in the curvature's gradient only): must fail
 *   3 farbad    dT/dlog_b_h 10% too large, but only where a_h > 2 (a branch the random parameter sets
 *               never reach): passes by default, fails at --params with a_h = 4
 *   4 plain     T_h(d) = -a_h d - b_h d^2 with b_h itself the parameter (in [0, 1e-4], ~ 1e-6), no
 *               offset: linear in every parameter; gradients right: must pass
 * The options `a` and `b` give the initial values (head h: a (1 + h/8), curvature b (1 + h/8)). */
#include <biaskit/plugin.h>

#include <math.h>
#include <stdlib.h>

#ifndef CHECKFD_KIND
#error "compile with -DCHECKFD_KIND=1..4"
#endif

#define A_MAX 8.0f
#define B_MAX 1e-4f
#define LOG_B_MIN -30.0f
#define LOG_B_MAX -9.2103404f /* log 1e-4 */
#define PLAIN (CHECKFD_KIND == 4)
#define OFFSET (PLAIN ? 0.0f : 1000.0f)
#define FAR_A 2.0f /* kind 3: the gradient is wrong where a_h > FAR_A */

typedef struct checkfd {
    const biaskit_services *svc;
    int32_t heads;
    double a, b;
} checkfd;

static const biaskit_option options[] = {
    BIASKIT_OPTION_DOUBLE("a", 0.5, "initial slope: head h gets a (1 + h/8)"),
    BIASKIT_OPTION_DOUBLE("b", 1e-6, "initial curvature: head h gets b (1 + h/8)"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    double a, b;
    int rc = svc->get_double(cfg, "a", &a, err);
    if (!rc)
        rc = svc->get_double(cfg, "b", &b, err);
    if (rc)
        return rc;
    if (!(a >= 0.0 && a <= A_MAX))
        return svc->config_error(cfg, "a", err, "expected a slope in [0, %g], got %g", (double)A_MAX, a);
    if (!(b >= 0.0 && b <= B_MAX))
        return svc->config_error(cfg, "b", err, "expected a curvature in [0, %g], got %g", (double)B_MAX, b);
    checkfd *p = malloc(sizeof *p);
    if (!p)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    *p = (checkfd){svc, geo->n_heads, a, b};
    *out = p;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    const checkfd *p = inst;
    if (distances <= 0)
        return p->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", (int)distances);
    int32_t H = p->heads;
    for (int32_t h = 0; h < H; h++)
        for (int32_t d = 0; d < distances; d++) {
            float x = (float)d;
#if PLAIN
            out[(size_t)h * (size_t)distances + (size_t)d] = -theta[h] * x - theta[H + h] * x * x;
#else
            out[(size_t)h * (size_t)distances + (size_t)d] = OFFSET - theta[h] * x - expf(theta[H + h]) * x * x;
#endif
        }
    return BIASKIT_OK;
}

static int64_t param_count(const void *inst)
{
    return 2 * (int64_t)((const checkfd *)inst)->heads;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)seed, (void)err;
    const checkfd *p = inst;
    for (int32_t h = 0; h < p->heads; h++) {
        theta[h] = (float)(p->a * (1.0 + h / 8.0));
        double b = p->b * (1.0 + h / 8.0);
        theta[p->heads + h] = (float)(PLAIN ? b : log(b > 1e-13 ? b : 1e-13));
    }
    return BIASKIT_OK;
}

static void param_project(const void *inst, float *theta)
{
    int32_t H = ((const checkfd *)inst)->heads;
    for (int32_t h = 0; h < H; h++) {
        theta[h] = theta[h] >= 0.0f ? (theta[h] <= A_MAX ? theta[h] : A_MAX) : 0.0f;
#if PLAIN
        theta[H + h] = theta[H + h] >= 0.0f ? (theta[H + h] <= B_MAX ? theta[H + h] : B_MAX) : 0.0f;
#else
        theta[H + h] = theta[H + h] >= LOG_B_MIN ? (theta[H + h] <= LOG_B_MAX ? theta[H + h] : LOG_B_MAX) : LOG_B_MIN;
#endif
    }
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    int32_t H = ((const checkfd *)inst)->heads;
    if (capacity > 0)
        out[0] = (biaskit_tensor_info){"a", 0, H, 1};
    if (capacity > 1)
        out[1] = (biaskit_tensor_info){PLAIN ? "b" : "log_b", H, H, 1};
    return 2;
}

/* dT/da_h = -d; dT/dlog_b_h = -exp(log_b_h) d^2 (plain: dT/db_h = -d^2). */
static int table_backward(const void *inst, const float *theta, int32_t distances, const float *dtable,
                          float *dtheta, biaskit_error *err)
{
    (void)err;
    int32_t H = ((const checkfd *)inst)->heads;
    for (int32_t h = 0; h < H; h++) {
        double ga = 0.0, gb = 0.0, curvature = PLAIN ? 1.0 : exp((double)theta[H + h]);
        const float *g = dtable + (size_t)h * (size_t)distances;
        for (int32_t d = 0; d < distances; d++) {
            ga -= (double)g[d] * d;
            gb -= (double)g[d] * curvature * d * d;
        }
#if CHECKFD_KIND == 2
        gb *= 1.02;
#elif CHECKFD_KIND == 3
        if (theta[h] > FAR_A)
            gb *= 1.1;
#endif
        dtheta[h] += (float)ga;
        dtheta[H + h] += (float)gb;
    }
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = CHECKFD_NAME,
    .version = "0.0.1",
    .summary = "test plugin for biaskit check: a term that mixes scales (offset - a d - b d^2, b tiny)",
    .capabilities = BIASKIT_CAP_TABLE,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .table = table,
    .param_count = param_count,
    .param_init = param_init,
    .param_project = param_project,
    .param_tensors = param_tensors,
    .table_backward = table_backward,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
