/* A content-position test plugin that misbehaves on purpose (tests/test_content.sh, tests/test_check.c):
 * the steps read channel 0 of the input, a_h(n) = 0.1 (h + 1) theta_h (1 + x_n0^2) (theta initialised to 1,
 * learnable, projected onto theta >= 0 so that every step is >= 0), except that `failure` says what goes
 * wrong at token `token` (the index into the call's tokens) and head `head` of the layers `layer` says
 * (-1: every layer):
 *
 *   nan              content() writes a NaN step
 *   negative         content() writes -0.5 (a position that goes back)
 *   error            content() returns an error with a message
 *   backward_error   content_backward() returns an error with a message
 *   grad_x           content_backward() adds half of dL/dx (every token and layer)
 *   grad_theta       content_backward() adds half of dL/dtheta
 *   overwrite        content_backward() writes dL/dx into dx instead of adding it
 *   dx_past          content_backward() writes 0.5 into the float just past the end of dx */
#include <biaskit/plugin.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NONE, NAN_STEP, NEGATIVE, ERROR, BACKWARD_ERROR, GRAD_X, GRAD_THETA, OVERWRITE, DX_PAST };

typedef struct badcontent {
    const biaskit_services *svc;
    int32_t heads, dim;
    int failure;
    int64_t token, head, layer;
} badcontent;

static const biaskit_option options[] = {
    BIASKIT_OPTION_CHOICE("failure", "none",
                          "none|nan|negative|error|backward_error|grad_x|grad_theta|overwrite|dx_past",
                          "what goes wrong (see tests/plugins/badcontent.c)"),
    BIASKIT_OPTION_INT("token", 5, "the token (index into the call's tokens) that misbehaves"),
    BIASKIT_OPTION_INT("head", 1, "the head that misbehaves"),
    BIASKIT_OPTION_INT("layer", -1, "only this layer misbehaves (-1 = every layer)"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    const char *failure = NULL;
    badcontent *b = calloc(1, sizeof *b);
    if (!b)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    int rc;
    if ((rc = svc->get_string(cfg, "failure", &failure, err)) || (rc = svc->get_int(cfg, "token", &b->token, err)) ||
        (rc = svc->get_int(cfg, "head", &b->head, err)) || (rc = svc->get_int(cfg, "layer", &b->layer, err))) {
        free(b);
        return rc;
    }
    static const char *const names[] = {"none",           "nan",    "negative",   "error",
                                        "backward_error", "grad_x", "grad_theta", "overwrite",
                                        "dx_past"};
    for (int k = 0; k < 9; k++)
        if (!strcmp(failure, names[k]))
            b->failure = k;
    b->svc = svc;
    b->heads = geo->n_heads;
    b->dim = geo->d_model;
    *out = b;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

static int64_t param_count(const void *inst)
{
    return ((const badcontent *)inst)->heads;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)seed, (void)err;
    for (int32_t h = 0; h < ((const badcontent *)inst)->heads; h++)
        theta[h] = 1.0f;
    return BIASKIT_OK;
}

static void param_project(const void *inst, float *theta)
{
    for (int32_t h = 0; h < ((const badcontent *)inst)->heads; h++)
        theta[h] = theta[h] > 0.0f ? theta[h] : 0.0f; /* NaN too */
}

static int fails_here(const badcontent *b, const biaskit_context *ctx)
{
    return b->layer < 0 || b->layer == ctx->layer;
}

static int content(const void *inst, const float *theta, const biaskit_context *ctx, const float *x, int64_t count,
                   float *steps, biaskit_error *err)
{
    const badcontent *b = inst;
    if (b->failure == ERROR && fails_here(b, ctx))
        return b->svc->error(err, BIASKIT_ERR_INVALID, "badcontent: content() fails on purpose");
    for (int64_t n = 0; n < count; n++) {
        const double x0 = x[n * b->dim];
        for (int32_t h = 0; h < b->heads; h++)
            steps[n * b->heads + h] = (float)(0.1 * (h + 1) * theta[h] * (1.0 + x0 * x0));
    }
    if (fails_here(b, ctx) && b->token < count && b->head < b->heads) {
        float *bad = &steps[b->token * b->heads + b->head];
        if (b->failure == NAN_STEP)
            *bad = NAN;
        else if (b->failure == NEGATIVE)
            *bad = -0.5f;
    }
    return BIASKIT_OK;
}

static int content_backward(const void *inst, const float *theta, const biaskit_context *ctx, const float *x,
                            int64_t count, const float *dsteps, float *dtheta, float *dx, biaskit_error *err)
{
    const badcontent *b = inst;
    if (b->failure == BACKWARD_ERROR && fails_here(b, ctx))
        return b->svc->error(err, BIASKIT_ERR_INVALID, "badcontent: content_backward() fails on purpose");
    const double fx = b->failure == GRAD_X ? 0.5 : 1.0, ft = b->failure == GRAD_THETA ? 0.5 : 1.0;
    for (int64_t n = 0; n < count; n++) {
        const double x0 = x[n * b->dim];
        double gx = 0.0;
        for (int32_t h = 0; h < b->heads; h++) {
            const double g = dsteps[n * b->heads + h] * 0.1 * (h + 1);
            dtheta[h] += (float)(ft * g * (1.0 + x0 * x0));
            gx += g * theta[h] * 2.0 * x0;
        }
        if (b->failure == OVERWRITE)
            dx[n * b->dim] = (float)gx;
        else
            dx[n * b->dim] += (float)(fx * gx);
    }
    if (b->failure == DX_PAST)
        dx[count * b->dim] = 0.5f;
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "badcontent",
    .version = "0.0.1",
    .summary = "test plugin: a content position that misbehaves on purpose",
    .capabilities = BIASKIT_CAP_CONTENT,
    .flags = BIASKIT_FLAG_PER_LAYER,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .param_count = param_count,
    .param_init = param_init,
    .param_project = param_project,
    .content = content,
    .content_backward = content_backward,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
