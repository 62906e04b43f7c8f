/* RoPE as a biaskit plugin (the `rotary` capability): q and k of every head are rotated by their
 * position on the term's stream, so q_i . k_j depends on p(i) - p(j) only. On stream = "token" this
 * is plain RoPE; on stream = "segment" (with a segmenting term) it is BiPE-RoPE's inter-segment
 * encoding. Length-aware scalings (position interpolation, NTK-aware, YaRN, LongRoPE's per-pair factors;
 * static or dynamic) through rotary_ctx (ABI 2): the frequencies for the length of each call and the
 * amplitude (rope_math.h); on any of them Resonance RoPE's rounded wavelengths and p-RoPE's partial
 * rotation. Training-free extension (Self-Extend, ReRoPE, STRING) through rotary_views: two position views
 * of the pairs, merged by the engine exactly. No parameters. */
#include "rope_math.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rope {
    const biaskit_services *svc;
    int32_t d_head;
    double base;
    int scaling;        /* BK_ROPE_* */
    double factor;      /* s >= 1, or 0: dynamic, s = max(1, length / L) */
    double L;           /* original_length, or the training length */
    double low, high;   /* yarn's ramp bounds (bk_yarn_range) */
    double attn_factor; /* yarn, longrope */
    double *short_factor, *long_factor; /* longrope: d_head/2 factors each */
    int resonance;
    int32_t turning; /* pairs that turn (partial) */
    int extend;      /* BK_EXTEND_* */
    int64_t window, group, shift;
    double leaky;
} rope;

static const biaskit_option options[] = {
    BIASKIT_OPTION_DOUBLE("base", 10000.0, "frequency base: pair k turns by p * base^(-2k/d_head)"),
    BIASKIT_OPTION_CHOICE("scaling", "none", BK_ROPE_SCALINGS,
                          "length scaling: none (plain RoPE), pi (theta/s), ntk (base*s^(d/(d-2))), yarn (NTK-by-parts "
                          "ramp + q, k times 0.1 ln s + 1)"),
    BIASKIT_OPTION_DOUBLE("factor", 1.0,
                          "scale factor s >= 1; 0 = dynamic: s = max(1, length / original_length), length the "
                          "sequence length of each call"),
    BIASKIT_OPTION_INT("original_length", 0, "L, the context the model was trained for; 0 = [train] length"),
    BIASKIT_OPTION_DOUBLE("beta_fast", 32.0, "yarn: pairs turning more than beta_fast times over L are kept"),
    BIASKIT_OPTION_DOUBLE("beta_slow", 1.0, "yarn: pairs turning fewer than beta_slow times over L are interpolated"),
    BIASKIT_OPTION_DOUBLE("attn_factor", 1.0,
                          "yarn, longrope: multiplies mscale (q and k each; the logits by its square)"),
    BIASKIT_OPTION_DOUBLE_ARRAY("short_factor", "longrope: d_head/2 factors lambda_k > 0, theta_k / lambda_k for "
                                                "sequences up to original_length"),
    BIASKIT_OPTION_DOUBLE_ARRAY("long_factor", "longrope: d_head/2 factors lambda_k > 0 for longer sequences"),
    BIASKIT_OPTION_BOOL("resonance", 0, "Resonance RoPE: each wavelength 2 pi / theta rounded to an integer"),
    BIASKIT_OPTION_DOUBLE("partial", 1.0,
                          "p-RoPE: the fraction p of the pairs that turn (the highest frequencies); the others stay "
                          "unrotated"),
    BIASKIT_OPTION_CHOICE("extend", "none", BK_ROPE_EXTENDS,
                          "training-free extension by two attention passes merged exactly: self-extend (far pairs at "
                          "grouped positions), rerope (relative position min(d, window), or leaky), string (d >= "
                          "shift at d - shift + window)"),
    BIASKIT_OPTION_INT("window", 0,
                       "self-extend: the neighbour window W (d < W keeps RoPE); rerope: W; string: the local window "
                       "W added to the shifted distances"),
    BIASKIT_OPTION_INT("group", 0, "self-extend: the group size G >= 1 of the far positions (floor(p / G))"),
    BIASKIT_OPTION_DOUBLE("leaky", 0.0, "rerope: 0 = ReRoPE (min(d, W)); k > 1 = leaky ReRoPE, W + (d - W) / k"),
    BIASKIT_OPTION_INT("shift", 0, "string: the shift S; distances d >= S attend at d - S + window"),
};

static const char *const scaling_names[] = {"none", "pi", "ntk", "yarn", "longrope"};
static const char *const extend_names[] = {"none", "self-extend", "rerope", "string"};

/* An option that means nothing under the chosen scaling (or extension), set explicitly, is refused rather than
 * ignored. */
static int refuse_unused(const biaskit_services *svc, const biaskit_config *cfg, const char *key, int used,
                         const char *needs, const char *option, const char *value, biaskit_error *err)
{
    if (used || !svc->is_set(cfg, key))
        return BIASKIT_OK;
    return svc->config_error(cfg, key, err, "'%s' applies with %s = %s only; %s is \"%s\"", key, option, needs, option,
                             value);
}

/* A length option of the extension: set, >= min, and (bounded) below the training length when there is one. */
static int read_span(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo,
                     const char *key, int64_t min, int bounded, const char *extend, const char *what, int64_t *out,
                     biaskit_error *err)
{
    if (!svc->is_set(cfg, key))
        return svc->config_error(cfg, key, err, "extend = \"%s\" needs '%s': %s", extend, key, what);
    int rc = svc->get_int(cfg, key, out, err);
    if (rc)
        return rc;
    if (*out < min || *out > INT32_MAX)
        return svc->config_error(cfg, key, err, "expected %s >= %lld, got %lld", what, (long long)min,
                                 (long long)*out);
    if (bounded && geo->train_length > 0 && *out >= geo->train_length)
        return svc->config_error(cfg, key, err,
                                 "expected %s shorter than the training length %d (the positions it keeps are those "
                                 "the model was trained on), got %lld",
                                 what, (int)geo->train_length, (long long)*out);
    return BIASKIT_OK;
}

/* The extension's options (rope.extend and those it reads), into r. */
static int read_extend(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, rope *r,
                       biaskit_error *err)
{
    const char *name;
    int rc = svc->get_string(cfg, "extend", &name, err);
    if (rc)
        return rc;
    r->extend = -1;
    for (int i = 0; i < (int)(sizeof extend_names / sizeof extend_names[0]); i++)
        if (strcmp(name, extend_names[i]) == 0)
            r->extend = i;
    if (r->extend < 0) /* the host checked the choice */
        return svc->config_error(cfg, "extend", err, "expected one of " BK_ROPE_EXTENDS ", got \"%s\"", name);
    const int se = r->extend == BK_EXTEND_SELF, re = r->extend == BK_EXTEND_REROPE, st = r->extend == BK_EXTEND_STRING;
    if ((rc = refuse_unused(svc, cfg, "window", se || re || st, "self-extend, rerope or string", "extend", name, err)) ||
        (rc = refuse_unused(svc, cfg, "group", se, "\"self-extend\"", "extend", name, err)) ||
        (rc = refuse_unused(svc, cfg, "leaky", re, "\"rerope\"", "extend", name, err)) ||
        (rc = refuse_unused(svc, cfg, "shift", st, "\"string\"", "extend", name, err)))
        return rc;
    if (r->extend == BK_EXTEND_NONE)
        return BIASKIT_OK;
    if ((rc = read_span(svc, cfg, geo, "window", 1, 1, name,
                        se ? "the neighbour window in tokens" : re ? "the window in tokens" : "the local window in tokens",
                        &r->window, err)))
        return rc;
    if (se && (rc = read_span(svc, cfg, geo, "group", 1, 1, name, "the group size", &r->group, err)))
        return rc;
    if (st) {
        /* beyond the context the shift exceeds it: T - shift + window must stay below it */
        if ((rc = read_span(svc, cfg, geo, "shift", 2, 0, name, "the shift in tokens", &r->shift, err)))
            return rc;
        if (r->window >= r->shift)
            return svc->config_error(cfg, "window", err,
                                     "expected a local window below the shift %lld (the shifted distances d - shift + "
                                     "window are then smaller than d), got %lld",
                                     (long long)r->shift, (long long)r->window);
    }
    if (re && (rc = svc->get_double(cfg, "leaky", &r->leaky, err)))
        return rc;
    if (re && !(r->leaky == 0.0 || (isfinite(r->leaky) && r->leaky > 1.0)))
        return svc->config_error(cfg, "leaky", err,
                                 "expected 0 (ReRoPE: min(d, window)) or a finite k > 1 (leaky: window + (d - window) "
                                 "/ k), got %g",
                                 r->leaky);
    if (svc->abi_version < 2)
        return svc->config_error(cfg, "extend", err,
                                 "extend = \"%s\" needs a biaskit of plugin ABI 2 or later (rotary_views); this one "
                                 "is ABI %u",
                                 name, (unsigned)svc->abi_version);
    if (se)
        svc->log(BIASKIT_LOG_INFO, "rope",
                 "extend self-extend: d < %lld at RoPE's positions, beyond at floor(i / %lld) - floor(j / %lld) + %lld",
                 (long long)r->window, (long long)r->group, (long long)r->group,
                 (long long)(r->window - r->window / r->group));
    else if (re && r->leaky > 0.0)
        svc->log(BIASKIT_LOG_INFO, "rope", "extend leaky rerope: d < %lld as RoPE, beyond at %lld + (d - %lld) / %g",
                 (long long)r->window, (long long)r->window, (long long)r->window, r->leaky);
    else if (re)
        svc->log(BIASKIT_LOG_INFO, "rope", "extend rerope: relative position min(d, %lld)", (long long)r->window);
    else
        svc->log(BIASKIT_LOG_INFO, "rope", "extend string: d >= %lld attends at d - %lld + %lld", (long long)r->shift,
                 (long long)r->shift, (long long)r->window);
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    rope *r = inst;
    if (r) {
        free(r->short_factor);
        free(r->long_factor);
    }
    free(inst);
}

/* longrope's factor set `key`: exactly `pairs` finite values > 0, into *out (allocated). */
static int read_factors(const biaskit_services *svc, const biaskit_config *cfg, const char *key, int32_t pairs,
                        double **out, biaskit_error *err)
{
    if (!svc->is_set(cfg, key))
        return svc->config_error(cfg, key, err,
                                 "scaling = \"longrope\" needs '%s': %d factors (one per pair, d_head/2)", key,
                                 (int)pairs);
    double *f = calloc((size_t)pairs, sizeof *f);
    if (!f)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    int32_t n = 0;
    int rc = svc->get_double_array(cfg, key, f, pairs, &n, err);
    if (!rc && n != pairs)
        rc = svc->config_error(cfg, key, err, "expected %d factors (one per pair of a head of %d), got %d", (int)pairs,
                               (int)(2 * pairs), (int)n);
    for (int32_t k = 0; !rc && k < n; k++)
        if (!isfinite(f[k]) || f[k] <= 0.0)
            rc = svc->config_error(cfg, key, err, "factor %d: expected a finite value > 0, got %g", (int)k, f[k]);
    if (rc) {
        free(f);
        return rc;
    }
    *out = f;
    return BIASKIT_OK;
}

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    double base, factor, beta_fast, beta_slow, attn_factor, partial;
    int64_t original_length;
    const char *scaling_name;
    int rc, resonance;
    if ((rc = svc->get_double(cfg, "base", &base, err)) || (rc = svc->get_string(cfg, "scaling", &scaling_name, err)) ||
        (rc = svc->get_double(cfg, "factor", &factor, err)) ||
        (rc = svc->get_int(cfg, "original_length", &original_length, err)) ||
        (rc = svc->get_double(cfg, "beta_fast", &beta_fast, err)) ||
        (rc = svc->get_double(cfg, "beta_slow", &beta_slow, err)) ||
        (rc = svc->get_double(cfg, "attn_factor", &attn_factor, err)) ||
        (rc = svc->get_bool(cfg, "resonance", &resonance, err)) ||
        (rc = svc->get_double(cfg, "partial", &partial, err)))
        return rc;
    if (!(partial >= 0.0 && partial <= 1.0))
        return svc->config_error(cfg, "partial", err,
                                 "expected the fraction of the pairs that turn, in [0, 1] (1: every pair), got %g",
                                 partial);
    if (!bk_rope_base_ok(base))
        return svc->config_error(cfg, "base", err, BK_ROPE_BASE_RULE ", got %g", base);
    if (geo->d_head < 2 || geo->d_head % 2)
        return svc->error(err, BIASKIT_ERR_INVALID, "RoPE rotates pairs of channels: the head width must be even, got %d",
                          (int)geo->d_head);
    int scaling = -1;
    for (int i = 0; i < (int)(sizeof scaling_names / sizeof scaling_names[0]); i++)
        if (strcmp(scaling_name, scaling_names[i]) == 0)
            scaling = i;
    if (scaling < 0) /* the host checked the choice; a defence, not a path */
        return svc->config_error(cfg, "scaling", err, "expected one of none, pi, ntk, yarn, longrope, got \"%s\"",
                                 scaling_name);
    const int scaled = scaling != BK_ROPE_NONE, yarn = scaling == BK_ROPE_YARN, longrope = scaling == BK_ROPE_LONGROPE;
    if ((rc = refuse_unused(svc, cfg, "factor", scaled, "pi, ntk, yarn or longrope", "scaling", scaling_name, err)) ||
        (rc = refuse_unused(svc, cfg, "original_length", scaled, "pi, ntk, yarn or longrope", "scaling", scaling_name, err)) ||
        (rc = refuse_unused(svc, cfg, "beta_fast", yarn, "\"yarn\"", "scaling", scaling_name, err)) ||
        (rc = refuse_unused(svc, cfg, "beta_slow", yarn, "\"yarn\"", "scaling", scaling_name, err)) ||
        (rc = refuse_unused(svc, cfg, "attn_factor", yarn || longrope, "yarn or longrope", "scaling", scaling_name, err)) ||
        (rc = refuse_unused(svc, cfg, "short_factor", longrope, "\"longrope\"", "scaling", scaling_name, err)) ||
        (rc = refuse_unused(svc, cfg, "long_factor", longrope, "\"longrope\"", "scaling", scaling_name, err)))
        return rc;
    if (!isfinite(factor) || (factor != 0.0 && factor < 1.0))
        return svc->config_error(cfg, "factor", err,
                                 "expected a scale factor s >= 1, or 0 for dynamic scaling (s = max(1, length / "
                                 "original_length)), got %g",
                                 factor);
    if (original_length < 0 || original_length > INT32_MAX)
        return svc->config_error(cfg, "original_length", err,
                                 "expected a length in tokens >= 1, or 0 for the training length, got %lld",
                                 (long long)original_length);
    if (!isfinite(beta_fast) || beta_fast <= 0.0)
        return svc->config_error(cfg, "beta_fast", err, "expected a finite number of rotations > 0, got %g", beta_fast);
    if (!isfinite(beta_slow) || beta_slow <= 0.0)
        return svc->config_error(cfg, "beta_slow", err, "expected a finite number of rotations > 0, got %g", beta_slow);
    if (beta_fast <= beta_slow)
        return svc->config_error(cfg, svc->is_set(cfg, "beta_fast") ? "beta_fast" : "beta_slow", err,
                                 "expected beta_fast > beta_slow (the ramp runs from the pairs turning beta_fast times "
                                 "over the original length to those turning beta_slow times), got beta_fast %g, "
                                 "beta_slow %g",
                                 beta_fast, beta_slow);
    if (!isfinite(attn_factor) || attn_factor <= 0.0)
        return svc->config_error(cfg, "attn_factor", err, "expected a finite factor > 0, got %g", attn_factor);
    const double L = original_length ? (double)original_length : (double)geo->train_length;
    if (scaled && !(L >= 1.0))
        return svc->config_error(cfg, "original_length", err,
                                 "scaling = \"%s\" needs the original context length, and the model has no training "
                                 "length (%d): set original_length",
                                 scaling_name, (int)geo->train_length);
    if (scaling == BK_ROPE_NTK && geo->d_head < 4)
        return svc->config_error(cfg, "scaling", err,
                                 "scaling = \"ntk\" raises the base to s^(d/(d-2)): it needs a head width >= 4, got %d",
                                 (int)geo->d_head);
    /* A host of ABI 1 calls rotary_frequencies() only, which gives plain RoPE: it would ignore the scaling. */
    if (scaled && svc->abi_version < 2)
        return svc->config_error(cfg, "scaling", err,
                                 "scaling = \"%s\" needs a biaskit of plugin ABI 2 or later (rotary_ctx); this one "
                                 "is ABI %u",
                                 scaling_name, (unsigned)svc->abi_version);
    rope *r = calloc(1, sizeof *r);
    if (!r)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    const int32_t pairs = geo->d_head / 2;
    if (longrope && ((rc = read_factors(svc, cfg, "short_factor", pairs, &r->short_factor, err)) ||
                     (rc = read_factors(svc, cfg, "long_factor", pairs, &r->long_factor, err)))) {
        destroy(r);
        return rc;
    }
    if ((rc = read_extend(svc, cfg, geo, r, err))) {
        destroy(r);
        return rc;
    }
    r->resonance = resonance;
    r->turning = bk_rope_turning_pairs(partial, pairs);
    r->svc = svc;
    r->d_head = geo->d_head;
    r->base = base;
    r->scaling = scaling;
    r->factor = factor;
    r->L = L;
    r->attn_factor = attn_factor;
    if (yarn)
        bk_yarn_range(beta_fast, beta_slow, geo->d_head, base, L, &r->low, &r->high);
    if (scaled) {
        char s_text[64];
        if (factor == 0.0)
            snprintf(s_text, sizeof s_text, "dynamic, s = max(1, length / %g)", L);
        else
            snprintf(s_text, sizeof s_text, "s = %g", factor);
        char m_text[64] = "(0.1 ln s + 1)";
        if (factor != 0.0)
            snprintf(m_text, sizeof m_text, "%g (0.1 ln s + 1)", bk_yarn_mscale(factor));
        if (yarn)
            svc->log(BIASKIT_LOG_INFO, "rope",
                     "scaling yarn (%s), original_length %g, ramp over pairs %g .. %g (beta_fast %g, beta_slow %g), "
                     "q and k x %s x attn_factor %g",
                     s_text, L, r->low, r->high, beta_fast, beta_slow, m_text, attn_factor);
        else if (longrope)
            svc->log(BIASKIT_LOG_INFO, "rope",
                     "scaling longrope (%s), original_length %g: short factors up to it, long beyond; q and k x "
                     "sqrt(1 + ln s / ln %g) x attn_factor %g",
                     s_text, L, L, attn_factor);
        else
            svc->log(BIASKIT_LOG_INFO, "rope", "scaling %s (%s), original_length %g", scaling_name, s_text, L);
    }
    if (resonance || r->turning < pairs)
        svc->log(BIASKIT_LOG_INFO, "rope", "%s%s%d of %d pairs turn", resonance ? "wavelengths rounded (resonance)" : "",
                 resonance ? "; " : "", (int)r->turning, (int)pairs);
    *out = r;
    return BIASKIT_OK;
}

/* RoPE without scaling (resonance and partial applied): what a host of ABI 1 reads (create() refuses a
 * scaling there). */
static int rotary_frequencies(const void *inst, float *inv_freq, biaskit_error *err)
{
    (void)err;
    const rope *r = inst;
    for (int32_t k = 0; k < r->d_head / 2; k++)
        inv_freq[k] = bk_rope_pair_inv_freq(BK_ROPE_NONE, r->base, k, r->d_head, 1.0, 0.0, 0.0, 1.0, r->resonance,
                                            r->turning);
    return BIASKIT_OK;
}

/* The frequencies and the amplitude for sequences of ctx->length tokens (dynamic scaling reads it). */
static int rotary_ctx(const void *inst, const biaskit_context *ctx, float *inv_freq, float *amplitude,
                      biaskit_error *err)
{
    const rope *r = inst;
    double s = r->factor;
    if (r->scaling != BK_ROPE_NONE && s == 0.0) {
        if (!ctx || !BIASKIT_HAS_FIELD(ctx, biaskit_context, length) || ctx->length < 1)
            return r->svc->error(err, BIASKIT_ERR_INVALID,
                                 "dynamic scaling (factor = 0) needs the sequence length in the context, got %d",
                                 ctx && BIASKIT_HAS_FIELD(ctx, biaskit_context, length) ? (int)ctx->length : -1);
        s = bk_rope_dynamic_factor(ctx->length, r->L);
    }
    /* longrope: the long factors for sequences longer than the original length */
    const double *lambda = r->scaling != BK_ROPE_LONGROPE ? NULL
                           : ctx && BIASKIT_HAS_FIELD(ctx, biaskit_context, length) && ctx->length > r->L
                               ? r->long_factor
                               : r->short_factor;
    for (int32_t k = 0; k < r->d_head / 2; k++)
        inv_freq[k] = bk_rope_pair_inv_freq(r->scaling, r->base, k, r->d_head, s, r->low, r->high,
                                            lambda ? lambda[k] : 1.0, r->resonance, r->turning);
    *amplitude = (float)bk_rope_amplitude(r->scaling, s, r->attn_factor, r->L);
    return BIASKIT_OK;
}

/* extend: two views, the near pairs at RoPE's positions and the far ones at the extension's
 * (rope_math.h); none: no views. */
static int rotary_views(const void *inst, const biaskit_context *ctx, biaskit_rotary_view *views, int32_t max_views,
                        int32_t *n_views, biaskit_error *err)
{
    const rope *r = inst;
    *n_views = 0;
    if (r->extend == BK_EXTEND_NONE)
        return BIASKIT_OK;
    if (!ctx || !BIASKIT_HAS_FIELD(ctx, biaskit_context, length) || ctx->length < 1)
        return r->svc->error(err, BIASKIT_ERR_INVALID, "extend needs the sequence length in the context, got %d",
                             ctx && BIASKIT_HAS_FIELD(ctx, biaskit_context, length) ? (int)ctx->length : -1);
    if (max_views < 2)
        return r->svc->error(err, BIASKIT_ERR_INVALID, "extend needs 2 views, the host offers %d", (int)max_views);
    const int64_t from = bk_rope_far_from(r->extend, r->window, r->shift);
    views[0].min_distance = 0, views[0].max_distance = (int32_t)from;
    views[1].min_distance = (int32_t)from, views[1].max_distance = 0;
    for (int32_t t = 0; t < ctx->length; t++) {
        views[0].q_pos[t] = views[0].k_pos[t] = (double)t;
        bk_rope_far_positions(r->extend, t, t, r->window, r->group, r->leaky, r->shift, &views[1].q_pos[t],
                              &views[1].k_pos[t]);
    }
    *n_views = 2;
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "rope",
    .version = "1.3.0",
    .summary = "RoPE: q and k rotated by their position (token or segment stream), theta_k = base^(-2k/d); "
               "PI, NTK-aware, YaRN or LongRoPE scaling, static or dynamic; Resonance RoPE; p-RoPE; Self-Extend, "
               "ReRoPE, STRING",
    .reference = "Su et al., RoFormer: Enhanced Transformer with Rotary Position Embedding, 2021; Peng et al., "
                 "YaRN: Efficient Context Window Extension of Large Language Models, 2023",
    .capabilities = BIASKIT_CAP_ROTARY,
    .flags = 0,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .rotary_frequencies = rotary_frequencies,
    .rotary_ctx = rotary_ctx,
    .rotary_views = rotary_views,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
