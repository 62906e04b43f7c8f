/* A formula-first logit-scale plugin (<biaskit/formula_plugin.h>) with every init rule, for
 * tests/test_formula_reach.c (the expression rule on arrays, param_info's texts) and `biaskit check`:
 *
 *   s_h(i) = g_h ln(i + 2) + o + sum_k (w_k + v_hk) / (i + k + 1),   k = 0 .. width - 1
 *
 * g_h: per head, uniform(0.5, 1);   o: shared, symmetric(1 / sqrt(width)), i.e. U(-a, a);
 * w:   ARRAY(width), starting at 2^-h / width, h being the element index k (an expression);
 * v:   PER_HEAD_ARRAY(width), starting at 0.01 (h + 1) in every head's row, h = k again (an expression).
 * ds/dg_h = ln(i + 2), ds/do = 1, ds/dw_k = ds/dv_hk = 1 / (i + k + 1). */
#include <biaskit/formula_plugin.h>

#define REACH_FP_CONSTANTS(C) C(width, BIASKIT_TP_INT(4, 1, 64), "terms of the sum")
#define REACH_FP_PARAMS(X)                                                                                \
    X(g, PER_HEAD, BIASKIT_TP_UNIFORM(0.5, 1.0), 0.0, 10.0, "g_h of g_h ln(i + 2)")                        \
    X(o, SCALAR, BIASKIT_TP_SYMMETRIC(1.0 / sqrt(c.width)), -1.0, 1.0, "offset o")                        \
    X(w, ARRAY(c.width), BIASKIT_TP_EXPR(pow(2.0, -h) / c.width), -INFINITY, INFINITY, "w_k")             \
    X(v, PER_HEAD_ARRAY(c.width), BIASKIT_TP_EXPR(0.01 * (h + 1)), -INFINITY, INFINITY, "v_hk")
BIASKIT_FP_TYPES(reach_fp, REACH_FP_PARAMS, REACH_FP_CONSTANTS)

BIASKIT_FP_SCALE(reach_fp)
{
    double s = p.g * log((double)i + 2.0) + p.o;
    for (int32_t k = 0; k < c.width; k++)
        s += ((double)p.w[k] + (double)p.v[k]) / ((double)i + k + 1.0);
    return s;
}
BIASKIT_FP_SCALE_GRADIENT(reach_fp)
{
    g->g = log((double)i + 2.0);
    g->o = 1.0;
    for (int32_t k = 0; k < c.width; k++)
        g->w[k] = g->v[k] = 1.0 / ((double)i + k + 1.0);
}
BIASKIT_SCALE_PLUGIN(reach_fp, REACH_FP_PARAMS, REACH_FP_CONSTANTS, .name = "reach_fp", .version = "1.0.0",
                     .summary = "test: a logit scale with every init rule, arrays initialised by expressions",
                     .flags = BIASKIT_FLAG_PER_LAYER)
