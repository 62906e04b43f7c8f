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

/* Weights per head (docs/design.md §2.1): `groups` rows of weights, weights[g * n_terms + t], row g
 * mixing the g-th of `groups` equal parts of the n values (the tables are n_heads rows of distances, so
 * with groups = n_heads row h mixes head h's table row). Each part is mixed by bk_mix_tables (and its
 * gradient by bk_mix_backward, dweights[g * n_terms + t] += that part's sum); groups = 1 is the plain
 * call. n must be a multiple of groups. */
void bk_mix_tables_grouped(bk_mixing mode, const float *const *tables, const double *weights, int groups,
                           int n_terms, size_t n, float *out);
void bk_mix_backward_grouped(bk_mixing mode, const float *const *tables, const double *weights, int groups,
                             int n_terms, size_t n, const float *mixed, const float *dout, float *const *dtables,
                             double *dweights);

/* Learnable weights (docs/design.md §2.1): sum mode trains the weights themselves; kernel mode keeps them on
 * the simplex as w = softmax(a). These map parameters to weights and weight gradients back. */
void bk_mix_weights_from_params(bk_mixing mode, const float *params, int n, double *weights);
void bk_mix_params_from_weights(bk_mixing mode, const double *weights, int n, float *params);
/* dparams += d(loss)/d(params) given dweights = d(loss)/d(weights) at `weights`. */
void bk_mix_params_backward(bk_mixing mode, const double *weights, const double *dweights, int n, float *dparams);

/* The mixing parameters of one stream when some of its weights are learned (docs/design.md §2.1).
 * kind[t] says how term t's weight is set: */
enum {
    BK_MIX_FIXED = 0,            /* as the file gives it (completed by bk_mix_weights) */
    BK_MIX_LEARNED = 1,          /* one parameter, shared by every head */
    BK_MIX_LEARNED_PER_HEAD = 2  /* one parameter per head */
};
/* The stream's weights are `groups` rows of n_terms (1, or n_heads when some term is
 * BK_MIX_LEARNED_PER_HEAD), each row from a row of logits a[g][t]:
 *     sum:    w[g][t] = a[g][t]
 *     kernel: w[g][.] = softmax over the stream's terms of a[g][.]     (each head's row on the simplex)
 * A learned term's logit is its parameter (one value repeated in every row, or one per row); a fixed
 * term's is its weight (sum) or the log of it (kernel; -inf for a weight of 0, which then stays 0). So
 * in sum mode a fixed weight stays as given, and in kernel mode the ratios among fixed weights do while
 * the learned ones move against them. The parameters are packed term after term: none for a fixed term,
 * 1 for BK_MIX_LEARNED, `groups` for BK_MIX_LEARNED_PER_HEAD. With every term BK_MIX_LEARNED and
 * groups = 1 these are the functions above, bit for bit. */
int bk_mix_param_count(const unsigned char *kind, int n_terms, int groups);
/* The initial parameters and logits from the completed weights w[n_terms]: a learned logit is
 * bk_mix_params_from_weights of its weight (in every row), a fixed one as above. */
void bk_mix_params_init(bk_mixing mode, const unsigned char *kind, int n_terms, int groups, const double *w,
                        float *params, double *logits);
/* weights[groups][n_terms] from the parameters; the learned entries of logits are set from params first. */
void bk_mix_weights_from_packed(bk_mixing mode, const unsigned char *kind, int n_terms, int groups,
                                const float *params, double *logits, double *weights);
/* dparams += d(loss)/d(params) given dweights[groups][n_terms] = d(loss)/d(weights) at `weights`: per row
 * the Jacobian of bk_mix_params_backward; a shared parameter gets the sum over rows (in double, rows in
 * order, then added as a float). */
void bk_mix_packed_backward(bk_mixing mode, const unsigned char *kind, int n_terms, int groups,
                            const double *weights, const double *dweights, float *dparams);

/* Check and complete the weights of the n terms on one stream, in place. Weights not given are NAN:
 * sum mode fills 1, kernel mode fills 1/n. Kernel mode then requires every weight >= 0 and a
 * positive total, and rescales them to sum to 1 (the simplex); `labels` name terms in messages. */
int bk_mix_weights(bk_mixing mode, double *weights, const char *const *labels, int n, bk_error *err);

#endif
