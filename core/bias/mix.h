/* Mixing of distance tables (DESIGN.md §2): terms on one position stream combine into one table.
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

/* Check and complete the weights of the n terms on one stream, in place. Weights not given are NAN:
 * sum mode fills 1, kernel mode fills 1/n. Kernel mode then requires every weight >= 0 and a
 * positive total, and rescales them to sum to 1 (the simplex); `labels` name terms in messages. */
int bk_mix_weights(bk_mixing mode, double *weights, const char *const *labels, int n, bk_error *err);

#endif
