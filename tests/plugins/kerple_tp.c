/* KERPLE-log written with <biaskit/table_plugin.h>, for tests/test_table_plugin.c: the same formulas,
 * init ranges and clamps as the built-in kerple plugin's variant "log" (plugins/kerple), so that its
 * tables, gradients, projection and initialisation can be compared with the built-in one bit for bit.
 *
 *   T_h(d) = -r1_h ln(1 + r2_h d),   r1 ~ U(0, 2), r2 ~ U(0, 1), both clamped at >= 0.01 */
#include <biaskit/table_plugin.h>

#define KERPLE_TP_PARAMS(X)                                                                  \
    X(r1, PER_HEAD, BIASKIT_TP_UNIFORM(0.0, 2.0), 0.01, INFINITY, "amplitude r1 > 0")       \
    X(r2, PER_HEAD, BIASKIT_TP_UNIFORM(0.0, 1.0), 0.01, INFINITY, "log scale r2 > 0")

BIASKIT_TP_TYPES(kerple_tp, KERPLE_TP_PARAMS, BIASKIT_TP_NO_CONSTANTS)

/* The expressions of plugins/kerple/kerple_math.h (bk_kerple_log_*), operation for operation. */
BIASKIT_TP_TABLE(kerple_tp) { return -p.r1 * log1pf(p.r2 * (float)d); }
BIASKIT_TP_GRADIENT(kerple_tp)
{
    float x = (float)d;
    g->r1 = -log1pf(p.r2 * x);
    g->r2 = -p.r1 * x / (1.0f + p.r2 * x);
}

BIASKIT_TABLE_PLUGIN(kerple_tp, KERPLE_TP_PARAMS, BIASKIT_TP_NO_CONSTANTS, .name = "kerple_tp", .version = "1.0.0",
                     .summary = "test: KERPLE-log -r1 ln(1+r2 d) through <biaskit/table_plugin.h>",
                     .reference = "Chi, Fan, Ramadge & Rudnicky, KERPLE, NeurIPS 2022 (as plugins/kerple)")
