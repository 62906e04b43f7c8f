/* A rotary plugin of ABI 2 with rotary_ctx() and no rotary_frequencies(), for tests/test_rope_scaling.c:
 * what it returns shows what the engine asked (inv_freq[0] = 1 / ctx->length, inv_freq[1] = 0.5 in a
 * training call, else 0.25; the other pairs 0.125) and its options make it misbehave on purpose:
 * `amplitude` is returned as is (0, negative: refused by the engine), `inf_amplitude` returns +inf instead
 * (the host refuses an option beyond 1e15, so no `amplitude` reaches inf), `nan_pair` >= 0 makes that
 * frequency NaN. It counts its calls (`calls`, read by the test through the instance). */
#include <biaskit/plugin.h>

#include <math.h>
#include <stdlib.h>

typedef struct rotctx {
    int32_t calls; /* first: the test reads it */
    int32_t pairs;
    double amplitude;
    int inf_amplitude;
    int64_t nan_pair;
} rotctx;

static const biaskit_option options[] = {
    BIASKIT_OPTION_DOUBLE("amplitude", 1.0, "returned as the amplitude, whatever it is"),
    BIASKIT_OPTION_INT("nan_pair", -1, "this frequency is NaN (-1: none)"),
    BIASKIT_OPTION_BOOL("inf_amplitude", 0, "return +inf as the amplitude"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    rotctx *r = calloc(1, sizeof *r);
    if (!r)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    int rc;
    if ((rc = svc->get_double(cfg, "amplitude", &r->amplitude, err)) ||
        (rc = svc->get_int(cfg, "nan_pair", &r->nan_pair, err)) ||
        (rc = svc->get_bool(cfg, "inf_amplitude", &r->inf_amplitude, err))) {
        free(r);
        return rc;
    }
    r->pairs = geo->d_head / 2;
    *out = r;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

static int rotary_ctx(const void *inst, const biaskit_context *ctx, float *inv_freq, float *amplitude,
                      biaskit_error *err)
{
    (void)err;
    rotctx *r = (rotctx *)inst; /* a test plugin: the call count is its only state */
    r->calls++;
    for (int32_t k = 0; k < r->pairs; k++)
        inv_freq[k] = k == 0 ? 1.0f / (float)ctx->length : k == 1 ? (ctx->training ? 0.5f : 0.25f) : 0.125f;
    if (r->nan_pair >= 0 && r->nan_pair < r->pairs)
        inv_freq[r->nan_pair] = NAN;
    *amplitude = r->inf_amplitude ? INFINITY : (float)r->amplitude;
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "rotctx",
    .version = "0.0.1",
    .summary = "test: a rotary plugin with rotary_ctx only, returning what it was asked",
    .capabilities = BIASKIT_CAP_ROTARY,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .rotary_ctx = rotary_ctx,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
