/* The empirical receptive field (ERF) of a trained model: Qin, Zhong & Deng, "Exploring Transformer
 * Extrapolation", AAAI 2024, arXiv 2307.10156 (§ "Theoretical Receptive Field": n_emp(eps), Eq. 13
 * with 1 - C_ij / C_ii = eps). docs/receptive-field.md describes the procedure.
 *
 * Aggregation (the paper leaves it open; this is ours): the model runs a training-mode forward on the
 * CPU over N sequences of `length` tokens; for each layer and head, the post-softmax attention rows
 * of the last Q queries i = length - Q .. length - 1 of every sequence are re-indexed by distance
 * t = i - s (t = 0: the query itself) and averaged over those rows:
 *
 *     p[l][h][t] = mean over (sequence, query i >= t) rows of P_lh[i][i - t]
 *                  (sum of the rows' values at t / the number of rows, so sum_t p = 1)
 *
 * ERF_lh(eps) = RF_length(eps) of p[l][h] (analysis/trf.h: the smallest j with sum_{t<j} p >=
 * (1 - eps) sum_t p). Heads and layers are aggregated by averaging p (each head's row weighs the
 * same), then taking the field of the mean. */
#ifndef BK_ERF_H
#define BK_ERF_H

#include "data/data.h"
#include "train/lm.h"

/* profile[h * T + t] += sum over queries i in [T - queries, T) and batch rows b of
 * probs[b][h][i][i - t] (probs: (B, H, T, T) as bk_gpt_attention_probs keeps them). Adds
 * B * queries rows per head. */
void bk_erf_accumulate(const float *probs, int B, int H, int T, int queries, double *profile);

/* Measure p (above) of every layer and head: profile gets lm->gpt.L * H * length doubles,
 * profile[(l * H + h) * length + t]. The model must be on the CPU backend (BK_ERR_UNSUPPORTED
 * otherwise, saying to set run.device=cpu). Sequences are the first `sequences` non-overlapping
 * windows of `length` tokens of `data` (fewer when the data is shorter: *used says how many; none
 * fits is BK_ERR_INVALID naming the data and the length). 1 <= queries <= length. */
int bk_erf_measure(bk_lm *lm, const bk_tokens *data, int32_t length, int sequences, int queries, double *profile,
                   int *used, bk_error *err);

#endif
