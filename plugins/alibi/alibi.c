/* ALiBi as a biaskit plugin: T_h(d) = -m_h * d with fixed slopes m_h, no learnable parameters, written
 * with <biaskit/table_plugin.h> (alibi.cu compiles this same file as the CUDA kernels).
 *
 * Options (all optional):
 *   slopes        one slope per head (n_heads values; MEP's slope ablations), or 1 value for every head
 *   uniform_slope one slope for every head instead of the reference series
 *   slope_scale   multiplies every slope (BiPE-ALiBi uses 96 on the segment stream)
 * uniform_slope and slopes exclude each other; slope_scale applies to all three sources. */
#include "alibi_math.h"

#include <biaskit/table_plugin.h>

#define ALIBI_PARAMS(X)                                                                                    \
    X(slopes, FIXED_PER_HEAD, BIASKIT_TP_ALIBI(1.0), 0.0, INFINITY, "if set: the slope of each head instead of 2^(-8(h+1)/n)")
#define ALIBI_CONSTANTS(C)                                                                                 \
    C(slope_scale, BIASKIT_TP_REAL(1.0, 0.0, INFINITY), "multiplies every slope (BiPE-ALiBi: 96 on the segment stream)") \
    C(uniform_slope, BIASKIT_TP_REAL(0.0, 0.0, INFINITY), "if set: this one slope for every head instead of 2^(-8(h+1)/n)")

BIASKIT_TP_TYPES(alibi, ALIBI_PARAMS, ALIBI_CONSTANTS)

BIASKIT_TP_TABLE(alibi) { return bk_alibi_bias(p.slopes, d); }
BIASKIT_TP_NO_GRADIENT(alibi)

/* The slope of each head, scaled in double and rounded once: (float)(slope_scale * m_h), with m_h the
 * given slope, the uniform one or the reference series. */
static int alibi_setup(biaskit_tp_instance *s, const biaskit_config *cfg, biaskit_error *err)
{
    int uniform = s->svc->is_set(cfg, "uniform_slope");
    if (uniform && BIASKIT_TP_GIVEN(s, slopes))
        return s->svc->config_error(cfg, "slopes", err, "'slopes' and 'uniform_slope' exclude each other; set one");
    for (int32_t h = 0; h < s->heads; h++) {
        double m = uniform ? BIASKIT_TP_CONSTANT(s, uniform_slope) : BIASKIT_TP_EXACT(s, slopes)[h];
        BIASKIT_TP_VALUES(s, slopes)[h] = (float)(BIASKIT_TP_CONSTANT(s, slope_scale) * m);
    }
    return BIASKIT_OK;
}

static const biaskit_tp_settings alibi_settings = {0, alibi_setup};

BIASKIT_TABLE_PLUGIN_WITH(alibi, ALIBI_PARAMS, ALIBI_CONSTANTS, &alibi_settings, .name = "alibi", .version = "1.1.0",
                          .summary = "ALiBi: fixed linear bias -m_h * d, slopes 2^(-8(h+1)/n) (power-of-two and other head counts)",
                          .reference = "Press, Smith & Lewis, Train Short, Test Long: Attention with Linear Biases, ICLR 2022")
