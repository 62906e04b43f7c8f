/* A learnable test plugin for the engine's tests: T_h(d) = -a_h * d with one learnable slope per
 * head, plus switches that make it misbehave on purpose (create failure, a NaN in the table). */
#include <biaskit/plugin.h>

#include <math.h>
#include <stdlib.h>

typedef struct testlin {
    const biaskit_services *svc;
    int32_t heads;
    double init;
    int64_t nan_at; /* distance whose value is NaN; -1 for none */
} testlin;

static const biaskit_option options[] = {
    BIASKIT_OPTION_DOUBLE("init", 0.25, "initial slope of head h: init * (h + 1)"),
    BIASKIT_OPTION_BOOL("fail_create", 0, "make create() fail (tests the error path)"),
    BIASKIT_OPTION_INT("nan_at", -1, "distance at which the table is NaN (tests the finiteness check)"),
    BIASKIT_OPTION_CHOICE("flavour", "plain", "plain|fancy", "a choice option (tests choice checking)"),
    BIASKIT_OPTION_STRING_ARRAY("tags", "a string array (tests array checking)"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    int fail = 0;
    int rc = svc->get_bool(cfg, "fail_create", &fail, err);
    if (rc)
        return rc;
    if (fail)
        return svc->config_error(cfg, "fail_create", err, "asked to fail, as a test");
    testlin *t = calloc(1, sizeof *t);
    if (!t)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    t->svc = svc;
    t->heads = geo->n_heads;
    if ((rc = svc->get_double(cfg, "init", &t->init, err)) || (rc = svc->get_int(cfg, "nan_at", &t->nan_at, err))) {
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
    return ((const testlin *)inst)->heads;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)seed, (void)err;
    const testlin *t = inst;
    for (int32_t h = 0; h < t->heads; h++)
        theta[h] = (float)(t->init * (h + 1));
    return BIASKIT_OK;
}

static void param_project(const void *inst, float *theta)
{
    const testlin *t = inst;
    for (int32_t h = 0; h < t->heads; h++)
        if (theta[h] < 0.0f)
            theta[h] = 0.0f;
}

#ifndef TESTLIN_UNNAMED
static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    if (capacity > 0)
        out[0] = (biaskit_tensor_info){"slope", 0, ((const testlin *)inst)->heads, 1};
    return 1;
}
#endif

static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    const testlin *t = inst;
    if (distances <= 0)
        return t->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive");
    for (int32_t h = 0; h < t->heads; h++)
        for (int32_t d = 0; d < distances; d++)
            out[(size_t)h * distances + d] = d == t->nan_at ? NAN : -theta[h] * (float)d;
    return BIASKIT_OK;
}

static int table_backward(const void *inst, const float *theta, int32_t distances, const float *dtable,
                          float *dtheta, biaskit_error *err)
{
    (void)theta, (void)err;
    const testlin *t = inst;
    for (int32_t h = 0; h < t->heads; h++) {
        double acc = 0.0;
        for (int32_t d = 0; d < distances; d++)
            acc += -(double)d * dtable[(size_t)h * distances + d];
        dtheta[h] += (float)acc;
    }
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
#ifdef TESTLIN_UNNAMED /* the same plugin without param_tensors: checkpoints store its theta whole */
    .name = "testlin_unnamed",
#elif defined(TESTLIN_ABI1) /* the same source built against the ABI 1 header (tests/plugins/abi1) */
    .name = "testlin_abi1",
#else
    .name = "testlin",
#endif
    .version = "0.0.1",
    .summary = "test plugin: learnable per-head linear bias -a_h * d",
    .capabilities = BIASKIT_CAP_TABLE,
    .flags = 0,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .param_count = param_count,
    .param_init = param_init,
    .param_project = param_project,
#ifndef TESTLIN_UNNAMED
    .param_tensors = param_tensors,
#endif
    .table = table,
    .table_backward = table_backward,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
