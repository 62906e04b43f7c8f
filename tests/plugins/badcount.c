/* A counted-positions test plugin that misbehaves on purpose (tests/test_content.sh): 3 position vectors
 * of ones times theta (learnable, 1 at first), except that `failure` says what goes wrong:
 *
 *   nan              count_vectors() writes a NaN at vector 1, component 2
 *   points           count() says 1 position vector (at least 2 are needed)
 *   error            count_vectors() returns an error with a message
 *   grad             count_vectors_backward() adds half the gradient (for `biaskit check`'s count-gradient) */
#include <biaskit/plugin.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NONE, NAN_VECTOR, POINTS, ERROR, GRAD };

typedef struct badcount {
    const biaskit_services *svc;
    int32_t d_head;
    int failure;
} badcount;

static const biaskit_option options[] = {
    BIASKIT_OPTION_CHOICE("failure", "none", "none|nan|points|error|grad",
                          "what goes wrong (see tests/plugins/badcount.c)"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    const char *failure = NULL;
    int rc = svc->get_string(cfg, "failure", &failure, err);
    if (rc)
        return rc;
    badcount *b = calloc(1, sizeof *b);
    if (!b)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    static const char *const names[] = {"none", "nan", "points", "error", "grad"};
    for (int k = 0; k < 5; k++)
        if (!strcmp(failure, names[k]))
            b->failure = k;
    b->svc = svc;
    b->d_head = geo->d_head;
    *out = b;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

static int64_t param_count(const void *inst)
{
    (void)inst;
    return 1;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)inst, (void)seed, (void)err;
    theta[0] = 1.0f;
    return BIASKIT_OK;
}

static int count(const void *inst, const biaskit_context *ctx, biaskit_count *out, biaskit_error *err)
{
    (void)ctx, (void)err;
    out->points = ((const badcount *)inst)->failure == POINTS ? 1 : 3;
    return BIASKIT_OK;
}

static int count_vectors(const void *inst, const float *theta, const biaskit_context *ctx, int32_t points, float *E,
                         biaskit_error *err)
{
    (void)ctx;
    const badcount *b = inst;
    if (b->failure == ERROR)
        return b->svc->error(err, BIASKIT_ERR_INVALID, "badcount: count_vectors() fails on purpose");
    for (int32_t k = 0; k < points * b->d_head; k++)
        E[k] = theta[0];
    if (b->failure == NAN_VECTOR)
        E[1 * b->d_head + 2] = NAN;
    return BIASKIT_OK;
}

static int count_vectors_backward(const void *inst, const float *theta, const biaskit_context *ctx, int32_t points,
                                  const float *dE, float *dtheta, biaskit_error *err)
{
    (void)theta, (void)ctx, (void)err;
    const badcount *b = inst;
    for (int32_t k = 0; k < points * b->d_head; k++)
        dtheta[0] += (b->failure == GRAD ? 0.5f : 1.0f) * dE[k];
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "badcount",
    .version = "0.0.1",
    .summary = "test plugin: counted positions that misbehave on purpose",
    .capabilities = BIASKIT_CAP_COUNT,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .param_count = param_count,
    .param_init = param_init,
    .count = count,
    .count_vectors = count_vectors,
    .count_vectors_backward = count_vectors_backward,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
