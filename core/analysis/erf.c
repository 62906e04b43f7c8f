#include "analysis/erf.h"

#include <stdlib.h>
#include <string.h>

void bk_erf_accumulate(const float *probs, int B, int H, int T, int queries, double *profile)
{
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            double *p = profile + (size_t)h * T;
            for (int i = T - queries; i < T; i++) {
                const float *row = probs + (((size_t)b * H + h) * T + (size_t)i) * T;
                for (int t = 0; t <= i; t++)
                    p[t] += row[i - t];
            }
        }
}

int bk_erf_measure(bk_lm *lm, const bk_tokens *data, int32_t length, int sequences, int queries, double *profile,
                   int *used, bk_error *err)
{
    bk_gpt *m = &lm->gpt;
    const int L = m->L, H = m->H, T = length;
    *used = 0;
    if (T < 1 || queries < 1 || queries > T || sequences < 1)
        return bk_fail(err, BK_ERR_INVALID, "ERF: expected length >= 1, 1 <= queries <= length and sequences >= 1; "
                       "got length %d, %d queries, %d sequences", (int)T, queries, sequences);
    if (!lm->be || lm->be->kind != BK_BACKEND_CPU)
        return bk_fail(err, BK_ERR_UNSUPPORTED, "ERF reads the attention probabilities, which only the CPU backend "
                       "keeps; the model is on %s: set run.device=cpu", lm->be ? lm->be->name : "no backend");
    if (lm->be->attention == BK_ATTENTION_FUSED)
        return bk_fail(err, BK_ERR_UNSUPPORTED, "ERF reads the attention probabilities, which the CPU's fused attention "
                       "does not keep; set run.attention=materialized (or auto)");
    int64_t available = data->count / T;
    if (available < 1)
        return bk_fail(err, BK_ERR_INVALID, "ERF at length %d: the data (%s) has %lld tokens, fewer than one sequence",
                       (int)T, data->name, (long long)data->count);
    int n = available < sequences ? (int)available : sequences;
    lm->bias.training = 0; /* an evaluation of the trained model */
    int rc = bk_bias_forward(&lm->bias, T, err);
    if (rc)
        return rc;
    int32_t *in = malloc((size_t)T * sizeof *in);
    if (!in)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for a sequence of %d tokens", (int)T);
    memset(profile, 0, (size_t)L * H * T * sizeof *profile);
    for (int s = 0; s < n && !rc; s++) {
        const uint16_t *src = data->tokens + (size_t)s * T;
        for (int t = 0; t < T; t++)
            in[t] = src[t];
        /* one sequence per forward: the saved probabilities are L x H x T x T floats */
        if ((rc = bk_gpt_forward(m, in, NULL, 1, T, 1, err)))
            break;
        for (int l = 0; l < L; l++) {
            const float *probs = bk_gpt_attention_probs(m, l);
            if (!probs && m->views.n) {
                rc = bk_fail(err, BK_ERR_UNSUPPORTED,
                             "ERF: layer %d has position views (the rotary term's rotary_views, e.g. rope's extend): "
                             "its passes are merged by their log-sum-exps and keep no attention probabilities; "
                             "expected a model without them",
                             l);
                break;
            }
            if (!probs) {
                rc = bk_fail(err, BK_ERR_INTERNAL, "ERF: no attention probabilities kept for layer %d", l);
                break;
            }
            bk_erf_accumulate(probs, 1, H, T, queries, profile + (size_t)l * H * T);
        }
    }
    free(in);
    if (rc)
        return rc;
    const double rows = (double)n * queries;
    for (size_t k = 0; k < (size_t)L * H * T; k++)
        profile[k] /= rows;
    *used = n;
    return BK_OK;
}
