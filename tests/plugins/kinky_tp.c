/* A formula-first test plugin with kinks at its initial parameters, for `biaskit check` (whose finite
 * differences must recognise them instead of failing them) and tests/test_formula_reach.c (the geometry
 * in the context, in the rules and in the formula):
 *
 *   T_h(d) = -a_h max(d, L) - b_h ReLU(d - L - M),   M = train_length / 64
 *
 * with a learnable threshold L starting at the integer 8 (so distances L and L + M sit on the kinks).
 * dT/da_h = -max(d, L); dT/db_h = -ReLU(d - L - M); dT/dL = -a_h [d < L] + b_h [d > L + M] (one side at
 * a kink: either is a subgradient). a_h starts at 1 / (h + 1), b_h at 0.01 layers d_head / d_model. */
#include <biaskit/table_plugin.h>

#define KINKY_TP_PARAMS(X)                                                                                \
    X(a, PER_HEAD, BIASKIT_TP_EXPR(1.0 / (h + 1)), 0.0, INFINITY, "slope a_h of -a_h max(d, L)")             \
    X(b, PER_HEAD, BIASKIT_TP_EXPR(0.01 * c.layers * c.d_head / c.d_model), 0.0, INFINITY,                 \
      "slope b_h of -b_h ReLU(d - L - train_length / 64)")                                                 \
    X(l, SCALAR, BIASKIT_TP_CONST(8.0), 1.0, INFINITY, "threshold L")

BIASKIT_TP_TYPES(kinky_tp, KINKY_TP_PARAMS, BIASKIT_TP_NO_CONSTANTS)

BIASKIT_TP_TABLE(kinky_tp)
{
    float x = (float)d, r = x - p.l - (float)(c.train_length / 64);
    return -p.a * fmaxf(x, p.l) - p.b * (r > 0.0f ? r : 0.0f);
}
BIASKIT_TP_GRADIENT(kinky_tp)
{
    float x = (float)d, r = x - p.l - (float)(c.train_length / 64);
    g->a = -fmaxf(x, p.l);
    g->b = -(r > 0.0f ? r : 0.0f);
    g->l = (x < p.l ? -p.a : 0.0f) + (r > 0.0f ? p.b : 0.0f);
}

BIASKIT_TABLE_PLUGIN(kinky_tp, KINKY_TP_PARAMS, BIASKIT_TP_NO_CONSTANTS, .name = "kinky_tp", .version = "1.0.0",
                     .summary = "test: -a_h max(d, L) - b_h ReLU(d - L - train_length/64), kinks at a learnable L")
