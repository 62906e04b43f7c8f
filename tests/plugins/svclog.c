/* A test plugin that uses the host services from its table functions, as plugin.h allows (the services
 * passed to create() stay valid until destroy()): T_h(d) = -slope d with a fixed slope, no parameters.
 * table() logs every call through svc->log at INFO ("table() asked for N distances"), and refuses more
 * than `limit` distances with svc->error(...), a message the engine must surface with the plugin's name
 * (tests/test_plugin_services.sh). */
#include <biaskit/plugin.h>

#include <stdlib.h>

typedef struct svclog {
    const biaskit_services *svc; /* kept from create(): valid until destroy() */
    int32_t heads;
    int64_t limit;
    double slope;
} svclog;

static const biaskit_option options[] = {
    BIASKIT_OPTION_INT("limit", 64, "table() refuses more distances than this (svc->error)"),
    BIASKIT_OPTION_DOUBLE("slope", 0.5, "T_h(d) = -slope d"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    svclog *t = calloc(1, sizeof *t);
    if (!t)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    t->svc = svc;
    t->heads = geo->n_heads;
    int rc;
    if ((rc = svc->get_int(cfg, "limit", &t->limit, err)) || (rc = svc->get_double(cfg, "slope", &t->slope, err))) {
        free(t);
        return rc;
    }
    if (t->limit < 1) {
        const long long limit = (long long)t->limit;
        free(t);
        return svc->config_error(cfg, "limit", err, "expected at least 1 distance, got %lld", limit);
    }
    *out = t;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    (void)theta;
    const svclog *t = inst;
    t->svc->log(BIASKIT_LOG_INFO, "svclog", "table() asked for %d distances", distances);
    if (distances <= 0 || distances > t->limit)
        return t->svc->error(err, BIASKIT_ERR_INVALID, "svclog refuses %d distances: its option limit is %lld",
                             distances, (long long)t->limit);
    for (int32_t h = 0; h < t->heads; h++)
        for (int32_t d = 0; d < distances; d++)
            out[(size_t)h * (size_t)distances + (size_t)d] = (float)(-t->slope * d);
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "svclog",
    .version = "0.0.1",
    .summary = "test plugin: -slope d, logging from table() and refusing more than `limit` distances",
    .capabilities = BIASKIT_CAP_TABLE,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .table = table,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
