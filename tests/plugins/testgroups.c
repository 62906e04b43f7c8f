/* A learnable test plugin that declares parameter groups (plugin.h, param_group): T_h(d) = b_h - a_h * d,
 * theta = [b_0 .. b_{H-1}, a_0 .. a_{H-1}] with the tensors listed "a" first (not in offset order, which
 * the engine must not assume). It asks for tensor "a": lr x lr_a, weight decay decay_a; tensor "b" keeps
 * the engine's defaults. Options make the declaration wrong on purpose (misdeclare), or drop the tensor
 * names (named = false: param_group is then asked for the whole theta, tensor -1). */
#include <biaskit/plugin.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct testgroups {
    const biaskit_services *svc;
    int32_t heads;
    double lr_a, decay_a;
    int named;
    const char *misdeclare;
} testgroups;

static const biaskit_option options[] = {
    BIASKIT_OPTION_DOUBLE("lr_a", 0.5, "declared learning-rate scale of tensor a"),
    BIASKIT_OPTION_DOUBLE("decay_a", 0.0, "declared weight decay of tensor a (-1: the engine's rule)"),
    BIASKIT_OPTION_BOOL("named", 1, "list the tensors a and b (false: theta is one unnamed vector)"),
    BIASKIT_OPTION_CHOICE("misdeclare", "none", "none|negative|nan|decay|fail",
                          "declare a bad group on purpose: lr_scale -1, lr_scale NaN, weight_decay -0.5, or fail"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    testgroups *t = calloc(1, sizeof *t);
    if (!t)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    t->svc = svc;
    t->heads = geo->n_heads;
    int rc;
    if ((rc = svc->get_double(cfg, "lr_a", &t->lr_a, err)) ||
        (rc = svc->get_double(cfg, "decay_a", &t->decay_a, err)) ||
        (rc = svc->get_bool(cfg, "named", &t->named, err)) ||
        (rc = svc->get_string(cfg, "misdeclare", &t->misdeclare, err))) {
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
    return 2 * (int64_t)((const testgroups *)inst)->heads;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)seed, (void)err;
    const testgroups *t = inst;
    for (int32_t h = 0; h < t->heads; h++) {
        theta[h] = 0.0f;                           /* b_h */
        theta[t->heads + h] = 0.1f * (float)(h + 1); /* a_h */
    }
    return BIASKIT_OK;
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    const testgroups *t = inst;
    if (!t->named)
        return 0;
    if (capacity >= 2) {
        out[0] = (biaskit_tensor_info){"a", t->heads, t->heads, 1};
        out[1] = (biaskit_tensor_info){"b", 0, t->heads, 1};
    }
    return 2;
}

static int param_group(const void *inst, int32_t tensor, biaskit_param_group *out, biaskit_error *err)
{
    const testgroups *t = inst;
    if (strcmp(t->misdeclare, "fail") == 0)
        return t->svc->error(err, BIASKIT_ERR_INTERNAL, "asked to fail, as a test");
    if (tensor == 1) /* "b": the engine's defaults */
        return BIASKIT_OK;
    out->lr_scale = t->lr_a;
    out->weight_decay = t->decay_a;
    if (strcmp(t->misdeclare, "negative") == 0)
        out->lr_scale = -1.0;
    else if (strcmp(t->misdeclare, "nan") == 0)
        out->lr_scale = NAN;
    else if (strcmp(t->misdeclare, "decay") == 0)
        out->weight_decay = -0.5;
    return BIASKIT_OK;
}

static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    const testgroups *t = inst;
    if (distances <= 0)
        return t->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive");
    for (int32_t h = 0; h < t->heads; h++)
        for (int32_t d = 0; d < distances; d++)
            out[(size_t)h * distances + d] = theta[h] - theta[t->heads + h] * (float)d;
    return BIASKIT_OK;
}

static int table_backward(const void *inst, const float *theta, int32_t distances, const float *dtable,
                          float *dtheta, biaskit_error *err)
{
    (void)theta, (void)err;
    const testgroups *t = inst;
    for (int32_t h = 0; h < t->heads; h++) {
        double db = 0.0, da = 0.0;
        for (int32_t d = 0; d < distances; d++) {
            db += dtable[(size_t)h * distances + d];
            da += -(double)d * dtable[(size_t)h * distances + d];
        }
        dtheta[h] += (float)db;
        dtheta[t->heads + h] += (float)da;
    }
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "testgroups",
    .version = "0.0.1",
    .summary = "test plugin: b_h - a_h d, with parameter groups declared for a",
    .capabilities = BIASKIT_CAP_TABLE,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .param_count = param_count,
    .param_init = param_init,
    .param_tensors = param_tensors,
    .table = table,
    .table_backward = table_backward,
    .param_group = param_group,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
