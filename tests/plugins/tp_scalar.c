/* A formula-first test plugin using what KERPLE does not: a SCALAR parameter, the ALIBI and CONST init
 * rules and a constant (extra option), for tests/test_table_plugin.c.
 *
 *   T_h(d) = offset - amp * slope_h * d     amp: scalar, starts at 1; slope_h: ALiBi's slopes */
#include <biaskit/table_plugin.h>

#define TP_SCALAR_PARAMS(X)                                                                     \
    X(amp, SCALAR, BIASKIT_TP_CONST(1.0), 0.0, 100.0, "amplitude shared by the heads")          \
    X(slope, PER_HEAD, BIASKIT_TP_ALIBI(1.0), 0.0, INFINITY, "slope of each head")
#define TP_SCALAR_CONSTANTS(C) C(offset, BIASKIT_TP_REAL(0.0, -10.0, 10.0), "added to every element")

BIASKIT_TP_TYPES(tp_scalar, TP_SCALAR_PARAMS, TP_SCALAR_CONSTANTS)

BIASKIT_TP_TABLE(tp_scalar) { return c.offset - p.amp * p.slope * (float)d; }
BIASKIT_TP_GRADIENT(tp_scalar)
{
    g->amp = -p.slope * (float)d;
    g->slope = -p.amp * (float)d;
}

BIASKIT_TABLE_PLUGIN(tp_scalar, TP_SCALAR_PARAMS, TP_SCALAR_CONSTANTS, .name = "tp_scalar", .version = "1.0.0",
                     .summary = "test: offset - amp slope_h d, a scalar and a per-head parameter")
