/* Plugins for the long-range checks of `biaskit check` ("long-range" and "shape", core/check/longrange.c;
 * tests/test_check.c). Compiled once per CHECKBAD3_KIND into its own shared object:
 *   1 pole     the rational bias T_h(d) = -a_h d / (1 + b_h d), a_h >= 0, with a projection that lets
 *              b_h go down to B_FLOOR < 0: a pole at d = 1/|b_h| >= 5882, beyond every distance the
 *              other checks look at with their gradients, and reached only at random or corner
 *              parameters (the initial b_h = 1e-3 > 0)
 *   2 nanfar   no parameters, T_h(d) = -0.1 (h + 1) d, but NaN for every d > NAN_FROM (4000)
 *   3 rising   ALiBi with the sign flipped, T_h(d) = +m_h d, m_h = 2^(-8 (h + 1) / H) learnable (>= 0),
 *              gradients right: correct, but every head prefers distant tokens (the "shape" WARN)
 *   4 rational the rational bias with b_h >= 0: correct everywhere */
#include <biaskit/plugin.h>

#include <math.h>
#include <stdlib.h>

#ifndef CHECKBAD3_KIND
#error "compile with -DCHECKBAD3_KIND=1..4"
#endif

#define RATIONAL (CHECKBAD3_KIND == 1 || CHECKBAD3_KIND == 4)
#define LEARNABLE (CHECKBAD3_KIND != 2)
#define NAN_FROM 4000
/* Kind 1: b_h >= -1.7e-4 puts the pole at d >= 1/1.7e-4 = 5882.35 (not an integer: every value finite). */
#define B_FLOOR (CHECKBAD3_KIND == 1 ? -1.7e-4f : 0.0f)

typedef struct checkbad3 {
    const biaskit_services *svc;
    int32_t heads;
} checkbad3;

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    (void)cfg;
    checkbad3 *b = malloc(sizeof *b);
    if (!b)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    b->svc = svc;
    b->heads = geo->n_heads;
    *out = b;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    const checkbad3 *b = inst;
    if (distances <= 0)
        return b->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", (int)distances);
    int32_t H = b->heads;
#if CHECKBAD3_KIND == 2
    (void)theta;
#endif
    for (int32_t h = 0; h < H; h++) {
        float *row = out + (size_t)h * (size_t)distances;
        for (int32_t d = 0; d < distances; d++) {
#if RATIONAL
            row[d] = -theta[h] * (float)d / (1.0f + theta[H + h] * (float)d);
#elif CHECKBAD3_KIND == 2
            row[d] = d > NAN_FROM ? NAN : -0.1f * (float)(h + 1) * (float)d;
#else
            row[d] = theta[h] * (float)d;
#endif
        }
    }
    return BIASKIT_OK;
}

#if LEARNABLE
static int64_t param_count(const void *inst)
{
    return (RATIONAL ? 2 : 1) * (int64_t)((const checkbad3 *)inst)->heads;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)seed, (void)err;
    int32_t H = ((const checkbad3 *)inst)->heads;
    for (int32_t h = 0; h < H; h++) {
#if RATIONAL
        theta[h] = 0.05f * (float)(h + 1);
        theta[H + h] = 1e-3f;
#else
        theta[h] = exp2f(-8.0f * (float)(h + 1) / (float)H);
#endif
    }
    return BIASKIT_OK;
}

static void param_project(const void *inst, float *theta)
{
    int32_t H = ((const checkbad3 *)inst)->heads;
    for (int32_t h = 0; h < H; h++) {
        if (!(theta[h] >= 0.0f))
            theta[h] = 0.0f;
#if RATIONAL
        if (!(theta[H + h] >= B_FLOOR))
            theta[H + h] = B_FLOOR;
#endif
    }
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    int32_t H = ((const checkbad3 *)inst)->heads;
    if (capacity > 0)
        out[0] = (biaskit_tensor_info){RATIONAL ? "a" : "slope", 0, H, 1};
#if RATIONAL
    if (capacity > 1)
        out[1] = (biaskit_tensor_info){"b", H, H, 1};
    return 2;
#else
    return 1;
#endif
}

/* dT/da = -d / (1 + b d), dT/db = a d^2 / (1 + b d)^2; the ALiBi flip: dT/dm = d. */
static int table_backward(const void *inst, const float *theta, int32_t distances, const float *dtable,
                          float *dtheta, biaskit_error *err)
{
    (void)err;
    int32_t H = ((const checkbad3 *)inst)->heads;
    for (int32_t h = 0; h < H; h++) {
        double ga = 0.0, gb = 0.0;
        const float *g = dtable + (size_t)h * (size_t)distances;
        for (int32_t d = 0; d < distances; d++) {
#if RATIONAL
            double den = 1.0 + (double)theta[H + h] * d;
            ga -= g[d] * d / den;
            gb += g[d] * (double)theta[h] * d * d / (den * den);
#else
            ga += g[d] * (double)d;
#endif
        }
        dtheta[h] += (float)ga;
#if RATIONAL
        dtheta[H + h] += (float)gb;
#else
        (void)gb, (void)theta;
#endif
    }
    return BIASKIT_OK;
}
#endif

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = CHECKBAD3_NAME,
    .version = "0.0.1",
    .summary = "test plugin for biaskit check: a bias that breaks (or not) far away",
    .capabilities = BIASKIT_CAP_TABLE,
    .create = create,
    .destroy = destroy,
    .table = table,
#if LEARNABLE
    .param_count = param_count,
    .param_init = param_init,
    .param_project = param_project,
    .param_tensors = param_tensors,
    .table_backward = table_backward,
#endif
};

BIASKIT_DEFINE_PLUGIN(descriptor)
