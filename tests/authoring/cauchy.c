/* A learnable Cauchy bias, written as an outside author would against the installed SDK:
 *     T_h(d) = -log(1 + (d / s_h)^2),  s_h = 2^(h+1) at initialisation
 * (head 0 looks 2 tokens far, head H-1 2^H tokens), dT/ds = 2 d^2 / (s (s^2 + d^2)). */
#include <biaskit/table_plugin.h>

#define CAU_PARAMS(X) X(s, PER_HEAD, BIASKIT_TP_EXPR(pow(2.0, h + 1)), 1e-3, INFINITY, "width s_h")
BIASKIT_TP_TYPES(cau, CAU_PARAMS, BIASKIT_TP_NO_CONSTANTS)
BIASKIT_TP_TABLE(cau) { return -log1pf(((float)d / p.s) * ((float)d / p.s)); }
BIASKIT_TP_GRADIENT(cau)
{
    float d2 = (float)d * (float)d;
    g->s = 2.0f * d2 / (p.s * (p.s * p.s + d2));
}
BIASKIT_TABLE_PLUGIN(cau, CAU_PARAMS, BIASKIT_TP_NO_CONSTANTS, .name = "cauchy", .version = "1.0.0",
                     .summary = "learnable Cauchy bias -log(1 + (d / s_h)^2)")
