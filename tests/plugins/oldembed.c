/* A learned absolute embedding built as a plugin of the first ABI 1 descriptor: struct_size is
 * BIASKIT_PLUGIN_V1_SIZE, which ends at rotary_frequencies, before embed_cuda and embed_backward_cuda
 * were appended. The fields past that size hold functions that fail loudly if called: the host must
 * not read them (BIASKIT_HAS_FIELD), so the plugin loads and its embedding runs through the host
 * embed() / embed_backward() on every backend (tests/test_bias_device.c). A[p][c] = theta[p * C + c],
 * p clamped to the table's `rows` rows (the training length). */
#include <biaskit/plugin.h>

#include <stdlib.h>

typedef struct oldembed {
    const biaskit_services *svc;
    int32_t rows, dim;
} oldembed;

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    (void)cfg;
    oldembed *o = calloc(1, sizeof *o);
    if (!o)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    o->svc = svc;
    o->rows = geo->train_length > 0 ? geo->train_length : 1;
    o->dim = geo->d_model;
    *out = o;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

static int64_t param_count(const void *inst)
{
    const oldembed *o = inst;
    return (int64_t)o->rows * o->dim;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)err;
    uint64_t x = seed | 1;
    for (int64_t i = 0; i < param_count(inst); i++) { /* xorshift: values in [-0.05, 0.05) */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        theta[i] = (float)((double)(x >> 11) / 9007199254740992.0 - 0.5) * 0.1f;
    }
    return BIASKIT_OK;
}

static int32_t row_of(const oldembed *o, int32_t p)
{
    return p < 0 ? 0 : p >= o->rows ? o->rows - 1 : p;
}

static int embed(const void *inst, const float *theta, const int32_t *positions, int64_t count, float *out,
                 biaskit_error *err)
{
    (void)err;
    const oldembed *o = inst;
    for (int64_t n = 0; n < count; n++)
        for (int32_t c = 0; c < o->dim; c++)
            out[n * o->dim + c] += theta[(int64_t)row_of(o, positions[n]) * o->dim + c];
    return BIASKIT_OK;
}

static int embed_backward(const void *inst, const float *theta, const int32_t *positions, int64_t count,
                          const float *dout, float *dtheta, biaskit_error *err)
{
    (void)theta, (void)err;
    const oldembed *o = inst;
    for (int64_t n = 0; n < count; n++)
        for (int32_t c = 0; c < o->dim; c++)
            dtheta[(int64_t)row_of(o, positions[n]) * o->dim + c] += dout[n * o->dim + c];
    return BIASKIT_OK;
}

/* Past struct_size: never to be called. */
static int poison_embed_cuda(const void *inst, const float *theta, const int32_t *positions, int64_t count,
                             float *out, void *stream, biaskit_error *err)
{
    (void)theta, (void)positions, (void)count, (void)out, (void)stream;
    const oldembed *o = inst;
    return o->svc->error(err, BIASKIT_ERR_INTERNAL, "embed_cuda lies past struct_size and must not be called");
}

static int poison_embed_backward_cuda(const void *inst, const float *theta, const int32_t *positions, int64_t count,
                                      const float *dout, float *dtheta, void *stream, biaskit_error *err)
{
    (void)theta, (void)positions, (void)count, (void)dout, (void)dtheta, (void)stream;
    const oldembed *o = inst;
    return o->svc->error(err, BIASKIT_ERR_INTERNAL,
                         "embed_backward_cuda lies past struct_size and must not be called");
}

static const biaskit_plugin descriptor = {
    .struct_size = (uint32_t)BIASKIT_PLUGIN_V1_SIZE, /* as compiled before embed_cuda was appended */
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "oldembed",
    .version = "1.0.0",
    .summary = "test: a learned embedding with the first ABI 1 descriptor size (no device embedding fields)",
    .reference = NULL,
    .capabilities = BIASKIT_CAP_EMBED,
    .create = create,
    .destroy = destroy,
    .param_count = param_count,
    .param_init = param_init,
    .embed = embed,
    .embed_backward = embed_backward,
    .embed_cuda = poison_embed_cuda,
    .embed_backward_cuda = poison_embed_backward_cuda,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
