/* RoPE with position interpolation (plugins/rope, scaling = "pi"), written with <biaskit/formula_plugin.h>,
 * for tests/test_formula_v2.c: theta_k = base^(-2k/d) / s, s = factor, or with factor 0 (dynamic)
 * s = max(1, length / L), L = original_length or the training length. */
#include <biaskit/formula_plugin.h>

#define ROPE_PI_FP_CONSTANTS(C)                                                                            \
    C(base, BIASKIT_TP_REAL(10000, 1.0000001, 1e30), "frequency base")                                    \
    C(factor, BIASKIT_TP_REAL(1, 0, 1e6), "s: theta_k / s; 0 = dynamic, s = max(1, length / L)")           \
    C(original_length, BIASKIT_TP_INT(0, 0, INT32_MAX), "L; 0 = the training length")

BIASKIT_FP_TYPES(rope_pi_fp, BIASKIT_TP_NO_PARAMS, ROPE_PI_FP_CONSTANTS)

BIASKIT_FP_INV_FREQ(rope_pi_fp)
{
    double L = c.original_length ? (double)c.original_length : (double)c.train_length, s = ctx->length / L;
    return pow(c.base, -2.0 * (double)k / (double)c.d_head) / (c.factor != 0.0 ? c.factor : s > 1.0 ? s : 1.0);
}
BIASKIT_FP_NO_AMPLITUDE(rope_pi_fp)

/* as plugins/rope: a factor below 1 would extrapolate; refused at its key (a setup: the _WITH form) */
static int rope_pi_fp_setup(biaskit_tp_instance *s, const biaskit_config *cfg, biaskit_error *err)
{
    double f = BIASKIT_TP_CONSTANT(s, factor);
    return f != 0.0 && f < 1.0 ? s->svc->config_error(cfg, "factor", err, "expected s >= 1, or 0 (dynamic), got %g", f)
                               : BIASKIT_OK;
}
static const biaskit_tp_settings rope_pi_fp_settings = {0, rope_pi_fp_setup};

BIASKIT_ROTARY_PLUGIN_WITH(rope_pi_fp, ROPE_PI_FP_CONSTANTS, &rope_pi_fp_settings, .name = "rope_pi_fp",
                           .version = "1.0.0",
                           .summary = "test: RoPE with position interpolation through <biaskit/formula_plugin.h>")
