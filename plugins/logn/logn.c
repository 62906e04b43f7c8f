/* Log-length logit scaling (BIASKIT_CAP_SCALE, ABI 2), no parameters: score = s(i) q_i . k_j / sqrt(d_head)
 * + biases, the same s(i) for every head (logn_math.h).
 *
 * Options:
 *   form   "log" (default): s(i) = ln(i + 1) in training and evaluation (Chiang & Cholak 2022);
 *          "qwen": s(i) = ln(i + 1) / ln(L_train) for i + 1 > L_train, else 1, in evaluation only (Qwen) */
#include "logn_math.h"

#include <stdlib.h>
#include <string.h>

typedef struct logn {
    const biaskit_services *svc;
    int form;
    int32_t heads;
} logn;

static const biaskit_option options[] = {
    BIASKIT_OPTION_CHOICE("form", "log", "log|qwen",
                          "log: ln(i+1) always; qwen: ln(i+1)/ln(L_train) beyond L_train, evaluation only"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    if (geo->n_heads < 1)
        return svc->error(err, BIASKIT_ERR_INVALID, "expected at least one head, got %d", (int)geo->n_heads);
    const char *form = NULL;
    int rc = svc->get_string(cfg, "form", &form, err);
    if (rc)
        return rc;
    int f = strcmp(form, "qwen") == 0 ? BK_LOGN_QWEN : BK_LOGN_LOG; /* the host checked the choices */
    if (f == BK_LOGN_QWEN && geo->train_length < 2)
        return svc->config_error(cfg, "form", err,
                                 "form \"qwen\" divides by ln(train length), which needs a train length >= 2, got %d",
                                 (int)geo->train_length);
    logn *s = calloc(1, sizeof *s);
    if (!s)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    s->svc = svc;
    s->form = f;
    s->heads = geo->n_heads;
    *out = s;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

/* scale[h * rows + i] = s(i) for every head */
static int scale(const void *inst, const float *theta, const biaskit_context *ctx, int32_t rows, float *out,
                 biaskit_error *err)
{
    (void)theta;
    const logn *s = inst;
    if (rows < 1)
        return s->svc->error(err, BIASKIT_ERR_INVALID, "expected rows >= 1, got %d", (int)rows);
    if (s->form == BK_LOGN_QWEN && !ctx)
        return s->svc->error(err, BIASKIT_ERR_INVALID, "form \"qwen\" needs the context (train length, training)");
    if (s->form == BK_LOGN_QWEN && ctx->train_length < 2)
        return s->svc->error(err, BIASKIT_ERR_INVALID,
                             "form \"qwen\" divides by ln(train length): expected ctx->train_length >= 2, got %d",
                             (int)ctx->train_length);
    int32_t L = ctx ? ctx->train_length : 0; /* the log form reads neither */
    int training = ctx ? ctx->training : 0;
    for (int32_t i = 0; i < rows; i++) {
        float v = (float)bk_logn_scale(s->form, i, L, training);
        for (int32_t h = 0; h < s->heads; h++)
            out[(size_t)h * (size_t)rows + (size_t)i] = v;
    }
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "logn",
    .version = "1.0.0",
    .summary = "log-length logit scale: q.k multiplied by ln(i+1) (or Qwen's ln(i+1)/ln(L_train) beyond L_train)",
    .reference = "Chiang & Cholak, Overcoming a Theoretical Limitation of Self-Attention, ACL 2022; Qwen's logn "
                 "attention (modeling_qwen.py)",
    .capabilities = BIASKIT_CAP_SCALE,
    .flags = 0,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .scale = scale,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
