/* xPos as a biaskit plugin (the `rotary` capability with rotary_decay): RoPE's rotation of q and k, and
 * per frequency pair k a decay zeta_k = (2k/d + gamma) / (1 + gamma): the rotated pair of q at position p
 * is multiplied by zeta_k^(p / scale_base), that of k by zeta_k^(-p / scale_base), so q_i . k_j gains
 * zeta_k^((i - j) / scale_base), a decay with the distance that is fastest for the highest frequencies.
 * Sun, Dong, Patra, Ma, Huang, Benhaim, Chaudhary, Song, Wei, "A Length-Extrapolatable Transformer"
 * (2022), Sec. 3.2 (gamma = 0.4, scale_base 512). No parameters. */
#include "../rope/rope_math.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct xpos {
    int32_t d_head;
    double base, gamma, scale_base;
} xpos;

static const biaskit_option options[] = {
    BIASKIT_OPTION_DOUBLE("base", 10000.0, "frequency base: pair k turns by p * base^(-2k/d_head)"),
    BIASKIT_OPTION_DOUBLE("gamma", 0.4, "zeta_k = (2k/d_head + gamma) / (1 + gamma), > 0"),
    BIASKIT_OPTION_DOUBLE("scale_base", 512.0, "q x zeta_k^(p / scale_base), k x zeta_k^(-p / scale_base), > 0"),
};

/* xPos's decay of pair k of a head of d channels (the paper's zeta; torchscale's XPOS scale). */
static inline double xpos_zeta(int32_t k, int32_t d_head, double gamma)
{
    return (2.0 * (double)k / (double)d_head + gamma) / (1.0 + gamma);
}

static void destroy(void *inst)
{
    free(inst);
}

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    double base, gamma, scale_base;
    int rc;
    if ((rc = svc->get_double(cfg, "base", &base, err)) || (rc = svc->get_double(cfg, "gamma", &gamma, err)) ||
        (rc = svc->get_double(cfg, "scale_base", &scale_base, err)))
        return rc;
    if (!bk_rope_base_ok(base))
        return svc->config_error(cfg, "base", err, BK_ROPE_BASE_RULE ", got %g", base);
    if (!isfinite(gamma) || gamma <= 0.0)
        return svc->config_error(cfg, "gamma", err, "expected a finite gamma > 0 (zeta_0 = gamma / (1 + gamma)), got %g",
                                 gamma);
    if (!isfinite(scale_base) || scale_base <= 0.0)
        return svc->config_error(cfg, "scale_base", err, "expected a finite scale > 0, got %g", scale_base);
    if (geo->d_head < 2 || geo->d_head % 2)
        return svc->error(err, BIASKIT_ERR_INVALID, "xPos rotates pairs of channels: the head width must be even, got %d",
                          (int)geo->d_head);
    xpos *x = calloc(1, sizeof *x);
    if (!x)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    x->d_head = geo->d_head, x->base = base, x->gamma = gamma, x->scale_base = scale_base;
    *out = x;
    return BIASKIT_OK;
}

static int rotary_frequencies(const void *inst, float *inv_freq, biaskit_error *err)
{
    (void)err;
    const xpos *x = inst;
    for (int32_t k = 0; k < x->d_head / 2; k++)
        inv_freq[k] = bk_rope_inv_freq(x->base, k, x->d_head);
    return BIASKIT_OK;
}

static int rotary_decay(const void *inst, const biaskit_context *ctx, float *zeta, float *scale, biaskit_error *err)
{
    (void)ctx, (void)err;
    const xpos *x = inst;
    for (int32_t k = 0; k < x->d_head / 2; k++)
        zeta[k] = (float)xpos_zeta(k, x->d_head, x->gamma);
    *scale = (float)x->scale_base;
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "xpos",
    .version = "1.0.0",
    .summary = "xPos: RoPE with a decay per frequency, q x zeta_k^(p/scale), k x zeta_k^(-p/scale), "
               "zeta_k = (2k/d + gamma)/(1 + gamma)",
    .reference = "Sun et al., A Length-Extrapolatable Transformer, 2022",
    .capabilities = BIASKIT_CAP_ROTARY,
    .flags = 0,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .rotary_frequencies = rotary_frequencies,
    .rotary_decay = rotary_decay,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
