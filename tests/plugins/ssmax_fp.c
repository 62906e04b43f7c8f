/* Scalable-Softmax (plugins/ssmax), s_h(i) = s_h ln(i + 1), written with <biaskit/formula_plugin.h>, for
 * tests/test_formula_v2.c (the same scale and gradient, bit for bit). */
#include <biaskit/formula_plugin.h>

#define SSMAX_FP_PARAMS(X) X(s, PER_HEAD, BIASKIT_TP_CONST(0.43), -INFINITY, INFINITY, "s of s_h ln(i + 1)")

BIASKIT_FP_TYPES(ssmax_fp, SSMAX_FP_PARAMS, BIASKIT_TP_NO_CONSTANTS)

BIASKIT_FP_SCALE(ssmax_fp) { return p.s * log((double)i + 1.0); }
BIASKIT_FP_SCALE_GRADIENT(ssmax_fp) { g->s = log((double)i + 1.0); }

BIASKIT_SCALE_PLUGIN(ssmax_fp, SSMAX_FP_PARAMS, BIASKIT_TP_NO_CONSTANTS, .name = "ssmax_fp", .version = "1.0.0",
                     .flags = BIASKIT_FLAG_PER_LAYER,
                     .summary = "test: Scalable-Softmax through <biaskit/formula_plugin.h> (as plugins/ssmax)")
