/* A learnable test plugin that declares its tensors' bounds and initialisation by hand (plugin.h,
 * param_info), for `biaskit plugins NAME` and `biaskit check` (tests/test_param_info.sh):
 *
 *     T_h(d) = b_h + c - a_h d,  theta = [a_0 .. a_{H-1}, b_0 .. b_{H-1}, c]
 *
 * a starts at 0.1 (h + 1) and is kept in [0, 10]; b starts at 0, unbounded; c starts at 0, kept in [-1, 1].
 * The option `mode` makes the declaration wrong on purpose:
 *   good          every tensor declared truthfully
 *   listing       (the default) a truthful, b's param_info() fails, c's text fills all of init without a NUL
 *   inverted      a declared [10, 0]
 *   nonfinite     a's upper bound NaN
 *   outside       a declared [0, 0.05]: param_init and param_project leave values above it
 *   unterminated  c's text without a NUL
 *   fail          b's param_info() fails
 * With seed_probe = true (and at least 3 heads), param_init writes its seed into b: b_0, b_1, b_2 = bits 0-21,
 * 22-43 and 44-63 (each exact in a float), so a test reads the seed of every layer's copy from the initial
 * values (the SDK guide's "Per-layer parameters" gives the derivation). */
#include <biaskit/plugin.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct paraminfo {
    const biaskit_services *svc;
    int32_t heads;
    const char *mode;
    int seed_probe;
} paraminfo;

static const biaskit_option options[] = {
    BIASKIT_OPTION_CHOICE("mode", "listing", "good|listing|inverted|nonfinite|outside|unterminated|fail",
                          "which declaration param_info() makes (see the source)"),
    BIASKIT_OPTION_BOOL("seed_probe", 0, "param_init writes its seed into b_0, b_1, b_2 (22 bits each)"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    paraminfo *t = calloc(1, sizeof *t);
    if (!t)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    t->svc = svc;
    t->heads = geo->n_heads;
    int rc = svc->get_string(cfg, "mode", &t->mode, err);
    if (!rc)
        rc = svc->get_bool(cfg, "seed_probe", &t->seed_probe, err);
    if (!rc && t->seed_probe && t->heads < 3)
        rc = svc->config_error(cfg, "seed_probe", err, "needs at least 3 heads (the seed's 3 pieces), got %d",
                               (int)t->heads);
    if (rc) {
        free(t);
        return rc;
    }
    *out = t;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

static int64_t param_count(const void *inst)
{
    return 2 * (int64_t)((const paraminfo *)inst)->heads + 1;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)err;
    const paraminfo *t = inst;
    for (int32_t h = 0; h < t->heads; h++) {
        theta[h] = 0.1f * (float)(h + 1);
        theta[t->heads + h] = 0.0f;
    }
    theta[2 * t->heads] = 0.0f;
    if (t->seed_probe)
        for (int k = 0; k < 3; k++)
            theta[t->heads + k] = (float)((seed >> (22 * k)) & 0x3FFFFFu);
    return BIASKIT_OK;
}

static float clamp(float v, float lo, float hi)
{
    return v < lo ? lo : v > hi ? hi : v; /* NaN stays NaN */
}

static void param_project(const void *inst, float *theta)
{
    const paraminfo *t = inst;
    for (int32_t h = 0; h < t->heads; h++)
        theta[h] = clamp(theta[h], 0.0f, 10.0f);
    theta[2 * t->heads] = clamp(theta[2 * t->heads], -1.0f, 1.0f);
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    const paraminfo *t = inst;
    if (capacity >= 3) {
        out[0] = (biaskit_tensor_info){"a", 0, t->heads, 1};
        out[1] = (biaskit_tensor_info){"b", t->heads, t->heads, 1};
        out[2] = (biaskit_tensor_info){"c", 2 * t->heads, 1, 1};
    }
    return 3;
}

static int param_info(const void *inst, int32_t tensor, biaskit_param_info *out, biaskit_error *err)
{
    const paraminfo *t = inst;
    const char *m = t->mode;
    switch (tensor) {
    case 0:
        out->lower = 0.0;
        out->upper = strcmp(m, "outside") == 0 ? 0.05 : strcmp(m, "nonfinite") == 0 ? NAN : 10.0;
        if (strcmp(m, "inverted") == 0)
            out->lower = 10.0, out->upper = 0.0;
        strcpy(out->init, "0.1 (h + 1)");
        return BIASKIT_OK;
    case 1:
        if (strcmp(m, "listing") == 0 || strcmp(m, "fail") == 0)
            return t->svc->error(err, BIASKIT_ERR_INTERNAL, "param_info of b fails, as a test");
        strcpy(out->init, "0");
        return BIASKIT_OK;
    case 2:
        out->lower = -1.0;
        out->upper = 1.0;
        if (strcmp(m, "listing") == 0 || strcmp(m, "unterminated") == 0)
            memset(out->init, 'x', sizeof out->init); /* no NUL anywhere */
        else
            strcpy(out->init, "0");
        return BIASKIT_OK;
    default: return t->svc->error(err, BIASKIT_ERR_INVALID, "no tensor %d (a, b, c)", tensor);
    }
}

static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    const paraminfo *t = inst;
    if (distances <= 0)
        return t->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", distances);
    const float c = theta[2 * t->heads];
    for (int32_t h = 0; h < t->heads; h++)
        for (int32_t d = 0; d < distances; d++)
            out[(size_t)h * (size_t)distances + (size_t)d] = theta[t->heads + h] + c - theta[h] * (float)d;
    return BIASKIT_OK;
}

static int table_backward(const void *inst, const float *theta, int32_t distances, const float *dtable,
                          float *dtheta, biaskit_error *err)
{
    (void)theta, (void)err;
    const paraminfo *t = inst;
    double dc = 0.0;
    for (int32_t h = 0; h < t->heads; h++) {
        double da = 0.0, db = 0.0;
        for (int32_t d = 0; d < distances; d++) {
            double g = dtable[(size_t)h * (size_t)distances + (size_t)d];
            da -= (double)d * g;
            db += g;
        }
        dtheta[h] += (float)da;
        dtheta[t->heads + h] += (float)db;
        dc += db;
    }
    dtheta[2 * t->heads] += (float)dc;
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "paraminfo",
    .version = "0.0.1",
    .summary = "test plugin: b_h + c - a_h d, with param_info() declared by hand (wrong on request)",
    .capabilities = BIASKIT_CAP_TABLE,
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
    .param_info = param_info,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
