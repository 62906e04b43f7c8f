/* RoPE as a biaskit plugin (the `rotary` capability): q and k of every head are rotated by their
 * position on the term's stream, so q_i . k_j depends on p(i) - p(j) only. On stream = "token" this
 * is plain RoPE; on stream = "segment" (with a segmenting term) it is BiPE-RoPE's inter-segment
 * encoding. No parameters. */
#include "rope_math.h"

#include <math.h>
#include <stdlib.h>

typedef struct rope {
    const biaskit_services *svc;
    int32_t d_head;
    double base;
} rope;

static const biaskit_option options[] = {
    BIASKIT_OPTION_DOUBLE("base", 10000.0, "frequency base: pair k turns by p * base^(-2k/d_head)"),
};

static void destroy(void *inst)
{
    free(inst);
}

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    double base;
    int rc = svc->get_double(cfg, "base", &base, err);
    if (rc)
        return rc;
    if (!isfinite(base) || base <= 1.0)
        return svc->config_error(cfg, "base", err, "expected a finite base > 1, got %g", base);
    if (geo->d_head < 2 || geo->d_head % 2)
        return svc->error(err, BIASKIT_ERR_INVALID, "RoPE rotates pairs of channels: the head width must be even, got %d",
                          (int)geo->d_head);
    rope *r = calloc(1, sizeof *r);
    if (!r)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    r->svc = svc;
    r->d_head = geo->d_head;
    r->base = base;
    *out = r;
    return BIASKIT_OK;
}

static int rotary_frequencies(const void *inst, float *inv_freq, biaskit_error *err)
{
    (void)err;
    const rope *r = inst;
    for (int32_t k = 0; k < r->d_head / 2; k++)
        inv_freq[k] = bk_rope_inv_freq(r->base, k, r->d_head);
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "rope",
    .version = "1.0.0",
    .summary = "RoPE: q and k rotated by their position (token or segment stream), theta_k = base^(-2k/d)",
    .reference = "Su et al., RoFormer: Enhanced Transformer with Rotary Position Embedding, 2021",
    .capabilities = BIASKIT_CAP_ROTARY,
    .flags = 0,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .rotary_frequencies = rotary_frequencies,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
