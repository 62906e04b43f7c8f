/* A learnable rational bias, written as an outside author would against the installed SDK:
 *     T_h(d) = -a_h d / (1 + b_h d)
 * linear (ALiBi-like) near d = 0, saturating at -a_h / b_h far away. b_h >= 0 keeps the denominator
 * positive: with b_h < 0 it has a pole at d = 1 / |b_h| (tests/test_authoring.sh plants exactly that). */
#include <biaskit/table_plugin.h>

#define RAT_PARAMS(X)                                                                 \
    X(a, PER_HEAD, BIASKIT_TP_ALIBI(1), 0.0, INFINITY, "slope at d = 0")              \
    X(b, PER_HEAD, BIASKIT_TP_CONST(1e-3), 0.0, INFINITY, "saturation rate")
BIASKIT_TP_TYPES(rat, RAT_PARAMS, BIASKIT_TP_NO_CONSTANTS)
BIASKIT_TP_TABLE(rat) { return -p.a * (float)d / (1.0f + p.b * (float)d); }
BIASKIT_TP_GRADIENT(rat)
{
    float q = 1.0f + p.b * (float)d;
    g->a = -(float)d / q;
    g->b = p.a * (float)d * (float)d / (q * q);
}
BIASKIT_TABLE_PLUGIN(rat, RAT_PARAMS, BIASKIT_TP_NO_CONSTANTS, .name = "rational", .version = "1.0.0",
                     .summary = "learnable rational bias -a_h d / (1 + b_h d)")
