/* KERPLE as a biaskit plugin: a learnable kernelized relative bias per head, shared across layers,
 * written with <biaskit/table_plugin.h> (kerple.cu compiles this same file as the CUDA kernels).
 *
 *   variant = "log"        T_h(d) = -r1_h ln(1 + r2_h d)          theta = r1 (H), r2 (H)
 *   variant = "power"      T_h(d) = -r1_h d^r2_h  (0 < r2 <= 2)    theta = r1 (H), r2 (H)
 *   variant = "3para-log"  T_h(d) = -r1_h ln(1 + r2_h d^r3_h)     theta = r1 (H), r2 (H), r3 (H)
 *
 * Initialisation and clamps follow the official code (README.md, Parameters): amplitudes and exponents
 * ~ U(0,2) (power amplitude ~ U(0,1)), log scales ~ U(0,1); every parameter >= 0.01 and exponents <= 2,
 * enforced by param_project() after every optimizer step.
 *
 * Options:
 *   variant     log | power | 3para-log
 *   learnable   false: no parameters, the values of r1, r2 (r3) are fixed (they must be given)
 *   r1, r2, r3  one value for every head or one per head: fixed values (learnable = false) or
 *               initial values (learnable = true, instead of the random init) */
#include "kerple_math.h"

#include <biaskit/table_plugin.h>

/* The choice list is in the order of BK_KERPLE_LOG, BK_KERPLE_POWER, BK_KERPLE_3PARA_LOG. */
#define KERPLE_CONSTANTS(C)                                                                                \
    C(variant, BIASKIT_TP_CHOICE("log", "log|power|3para-log"),                                            \
      "log: -r1 ln(1+r2 d); power: -r1 d^r2 (r2 <= 2); 3para-log: -r1 ln(1+r2 d^r3) (r3 <= 2)")

/* The init ranges and the bound on r2 depend on the variant (c.variant); r3 exists in 3para-log only. */
#define KERPLE_IS_POWER (c.variant == BK_KERPLE_POWER)
#define KERPLE_PARAMS(X)                                                                                   \
    X(r1, PER_HEAD, BIASKIT_TP_UNIFORM(0.0, KERPLE_IS_POWER ? 1.0 : 2.0), BK_KERPLE_MIN, INFINITY,         \
      "amplitude r1 > 0; default random init")                                                             \
    X(r2, PER_HEAD, BIASKIT_TP_UNIFORM(0.0, KERPLE_IS_POWER ? 2.0 : 1.0), BK_KERPLE_MIN,                   \
      KERPLE_IS_POWER ? BK_KERPLE_MAX_EXPONENT : INFINITY, "log: scale r2 > 0; power: exponent 0 < r2 <= 2") \
    X(r3, PER_HEAD_IF(c.variant == BK_KERPLE_3PARA_LOG, "variant \"3para-log\""), BIASKIT_TP_UNIFORM(0.0, 2.0), \
      BK_KERPLE_MIN, BK_KERPLE_MAX_EXPONENT, "exponent 0 < r3 <= 2")

BIASKIT_TP_TYPES(kerple, KERPLE_PARAMS, KERPLE_CONSTANTS)

BIASKIT_TP_TABLE(kerple) { return bk_kerple_bias(c.variant, p.r1, p.r2, p.r3, d); }
BIASKIT_TP_GRADIENT(kerple)
{
    float dr[BK_KERPLE_MAX_TENSORS] = {0.0f, 0.0f, 0.0f};
    bk_kerple_grad(c.variant, p.r1, p.r2, p.r3, d, dr);
    g->r1 = dr[0];
    g->r2 = dr[1];
    g->r3 = dr[2];
}

BIASKIT_TABLE_PLUGIN(kerple, KERPLE_PARAMS, KERPLE_CONSTANTS, .name = "kerple", .version = "1.1.0",
                     .summary = "KERPLE: learnable kernelized bias per head, -r1 ln(1+r2 d) (log), -r1 d^r2 (power) or 3para-log",
                     .reference = "Chi, Fan, Ramadge & Rudnicky, KERPLE: Kernelized Relative Positional Embedding for Length "
                                  "Extrapolation, NeurIPS 2022 (code: chijames/KERPLE)")
