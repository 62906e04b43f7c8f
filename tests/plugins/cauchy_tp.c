/* A formula-first test plugin for the expression init rule (BIASKIT_TP_EXPR) and the geometry in the
 * context, for tests/test_formula_reach.c: the Cauchy bias
 *
 *   T_h(d) = -w log(1 + (d / s_h)^2)
 *
 * s_h: per head, starting at base^(h+1) (2, 4, 8, ... by default: an expression of the head h);
 * w:   shared by the heads, starting at (layer + 2) train_length / 1024 (an expression of the copy's layer,
 *      -1 for a shared copy or a fixed value, and of the geometry c.train_length).
 * dT/dw = -log(1 + x^2), dT/ds_h = 2 w x^2 / (s_h (1 + x^2)) with x = d / s_h. */
#include <biaskit/table_plugin.h>

#define CAUCHY_TP_PARAMS(X)                                                                               \
    X(s, PER_HEAD, BIASKIT_TP_EXPR(pow(c.base, h + 1)), 1e-6, INFINITY, "scale s_h of -w log(1 + (d/s_h)^2)") \
    X(w, SCALAR, BIASKIT_TP_EXPR((layer + 2) * c.train_length / 1024.0), 0.0, INFINITY, "amplitude w")
#define CAUCHY_TP_CONSTANTS(C) C(base, BIASKIT_TP_REAL(2.0, 1e-3, 1e30), "s_h starts at base^(h+1)")

BIASKIT_TP_TYPES(cauchy_tp, CAUCHY_TP_PARAMS, CAUCHY_TP_CONSTANTS)

BIASKIT_TP_TABLE(cauchy_tp)
{
    float x = (float)d / p.s;
    return -p.w * log1pf(x * x);
}
BIASKIT_TP_GRADIENT(cauchy_tp)
{
    float x = (float)d / p.s;
    g->w = -log1pf(x * x);
    g->s = 2.0f * p.w * x * x / (p.s * (1.0f + x * x));
}

BIASKIT_TABLE_PLUGIN(cauchy_tp, CAUCHY_TP_PARAMS, CAUCHY_TP_CONSTANTS, .name = "cauchy_tp", .version = "1.0.0",
                     .summary = "test: Cauchy bias -w log(1 + (d/s_h)^2), s_h from an expression of h",
                     .flags = BIASKIT_FLAG_PER_LAYER)
