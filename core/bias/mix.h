/* Mixing of distance tables (docs/design.md §2.1): terms on one position stream combine into one table.
 *   sum:    M = sum_t w_t T_t                       (logit space)
 *   kernel: M = log sum_t w_t exp(T_t)              (kernel / probability space, MEP-style),
 *           computed as m + log sum_t w_t exp(T_t - m) with m = max over terms with w_t > 0. */
#ifndef BK_MIX_H
#define BK_MIX_H

#include "config/experiment.h"

#include <stddef.h>

/* out[k] = mix of tables[t][k] for k < n. In kernel mode weights must be >= 0 with at least one
 * > 0; terms with weight 0 do not take part. */
void bk_mix_tables(bk_mixing mode, const float *const *tables, const double *weights, int n_terms, size_t n,
                   float *out);

/* Gradient of bk_mix_tables. Given dout = dL/dM (n values) and the forward's tables and output M:
 *   sum:    dL/dT_t += w_t dM,                 dL/dw_t += sum_k dM T_t
 *   kernel: dL/dT_t += dM w_t exp(T_t - M),    dL/dw_t += sum_k dM exp(T_t - M)
 * In kernel mode a term of weight 0 gets neither (it took no part in M). dtables[t] may be NULL (a
 * term without parameters); dweights may be NULL. Sums are in double. */
void bk_mix_backward(bk_mixing mode, const float *const *tables, const double *weights, int n_terms, size_t n,
                     const float *mixed, const float *dout, float *const *dtables, double *dweights);

/* Learnable weights (docs/design.md §2.1): sum mode trains the weights themselves; kernel mode keeps them on
 * the simplex as w = softmax(a). These map parameters to weights and weight gradients back. */
void bk_mix_weights_from_params(bk_mixing mode, const float *params, int n, double *weights);
void bk_mix_params_from_weights(bk_mixing mode, const double *weights, int n, float *params);
/* dparams += d(loss)/d(params) given dweights = d(loss)/d(weights) at `weights`. */
void bk_mix_params_backward(bk_mixing mode, const double *weights, const double *dweights, int n, float *dparams);

/* Check and complete the weights of the n terms on one stream, in place. Weights not given are NAN:
 * sum mode fills 1, kernel mode fills 1/n. Kernel mode then requires every weight >= 0 and a
 * positive total, and rescales them to sum to 1 (the simplex); `labels` name terms in messages. */
int bk_mix_weights(bk_mixing mode, double *weights, const char *const *labels, int n, bk_error *err);

#endif
