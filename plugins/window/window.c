/* A sliding-window mask with attention sinks (BIASKIT_CAP_MASK, ABI 2): StreamingLLM's sinks, and with
 * distance_cap LM-Infinite's Lambda-shape. No parameters: mask() hands the engine three integers
 * (window_math.h); the engine's attention makes the masked scores exactly -inf and skips key tiles that
 * are masked entirely.
 *
 * Options:
 *   window        keys i - j < window are visible (the query and the window - 1 keys before it);
 *                 0 (default) = the training length
 *   sinks         the first `sinks` keys stay visible to every later query (0)
 *   distance_cap  > 0: the distance tables are read at min(d, distance_cap); 0 = not capped */
#include "window_math.h"

#include <stdlib.h>

typedef struct window {
    const biaskit_services *svc;
    int32_t window, sinks, distance_cap;
} window;

static const biaskit_option options[] = {
    BIASKIT_OPTION_INT("window", 0,
                       "keys with i - j < window are visible (the query + window - 1 before it); not set: train length"),
    BIASKIT_OPTION_INT("sinks", 0, "the first `sinks` keys stay visible to every query (StreamingLLM: 4)"),
    BIASKIT_OPTION_INT("distance_cap", 0,
                       "> 0: distance tables read at min(d, distance_cap) (LM-Infinite); 0 = not capped"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    int64_t w = 0, sinks = 0, cap = 0;
    int rc;
    if ((rc = svc->get_int(cfg, "window", &w, err)) || (rc = svc->get_int(cfg, "sinks", &sinks, err)) ||
        (rc = svc->get_int(cfg, "distance_cap", &cap, err)))
        return rc;
    /* not set: the training length (LM-Infinite's local branch = the pre-training length); set: >= 1, since
     * a window of 0 keys would leave every row without a key */
    if (svc->is_set(cfg, "window") ? w < 1 || w > INT32_MAX : w != 0)
        return svc->config_error(cfg, "window", err,
                                 "expected an integer in 1 .. %d (keys i - j < window are visible: the query and the "
                                 "window - 1 keys before it; leave it out for the training length), got %lld",
                                 INT32_MAX, (long long)w);
    int64_t resolved = bk_window_resolve(w, geo->train_length);
    if (resolved < 1)
        return svc->config_error(cfg, "window", err,
                                 "not set, the window is the training length, which is %d here: set window = N (N >= 1)",
                                 (int)geo->train_length);
    if (sinks < 0 || sinks > INT32_MAX)
        return svc->config_error(cfg, "sinks", err, "expected an integer in 0 .. %d (keys visible to every query), got %lld",
                                 INT32_MAX, (long long)sinks);
    if (cap < 0 || cap > INT32_MAX)
        return svc->config_error(cfg, "distance_cap", err,
                                 "expected an integer in 0 .. %d (0 = distances not capped), got %lld", INT32_MAX,
                                 (long long)cap);
    window *m = calloc(1, sizeof *m);
    if (!m)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    m->svc = svc;
    m->window = (int32_t)resolved;
    m->sinks = (int32_t)sinks;
    m->distance_cap = (int32_t)cap;
    *out = m;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

/* Fills the fields of *out that lie inside out->struct_size (set by the engine). */
static int mask(const void *inst, const biaskit_context *ctx, biaskit_mask *out, biaskit_error *err)
{
    (void)ctx; /* the same mask in training and evaluation, at every length */
    const window *m = inst;
    if (!out || !BIASKIT_HAS_FIELD(out, biaskit_mask, sinks))
        return m->svc->error(err, BIASKIT_ERR_INVALID, "biaskit_mask is NULL or too small (struct_size %u)",
                             out ? (unsigned)out->struct_size : 0u);
    out->window = m->window;
    out->sinks = m->sinks;
    if (BIASKIT_HAS_FIELD(out, biaskit_mask, distance_cap))
        out->distance_cap = m->distance_cap;
    else if (m->distance_cap > 0)
        return m->svc->error(err, BIASKIT_ERR_UNSUPPORTED,
                             "distance_cap = %d, but this engine's biaskit_mask has no distance_cap field",
                             (int)m->distance_cap);
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "window",
    .version = "1.0.0",
    .summary = "sliding-window mask (i - j < window) with attention sinks; optional distance cap (LM-Infinite)",
    .reference = "Xiao et al., Efficient Streaming Language Models with Attention Sinks, ICLR 2024; Han et al., "
                 "LM-Infinite, arXiv 2308.16137",
    .capabilities = BIASKIT_CAP_MASK,
    .flags = 0,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .mask = mask,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
