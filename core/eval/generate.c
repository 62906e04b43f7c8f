#include "eval/generate.h"

#include "util/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int bk_text_model_check(const bk_lm *lm, const char *command, int tokenizes, bk_error *err)
{
    if (lm->tokenizer && !tokenizes)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: the model reads text through its BPE tokenizer (%s); %s builds byte-level sequences and "
                       "does not tokenize them yet", command, bk_bpe_describe(lm->tokenizer), command);
    if (lm->tokenizer || lm->gpt.V == 256)
        return BK_OK;
    return bk_fail(err, BK_ERR_UNSUPPORTED,
                   "%s: the model has a vocabulary of %d tokens and its checkpoint carries no tokenizer; %s reads "
                   "and writes text for byte-level models (vocab 256: [data] format = \"text\", or shards of "
                   "scripts/tokenize.py --bytes) and for checkpoints with a tokenizer (biaskit import stores it)",
                   command, lm->gpt.V, command);
}

void bk_text_encode(const char *text, size_t len, int32_t *out)
{
    for (size_t i = 0; i < len; i++)
        out[i] = (int32_t)(unsigned char)text[i];
}

int bk_lm_logits_at(bk_lm *lm, const int32_t *inputs, int B, int T, const int32_t *rows, int n_rows, float *out,
                    bk_error *err)
{
    const int32_t V = lm->gpt.V;
    for (int r = 0; r < n_rows; r++)
        if (rows[r] < 0 || rows[r] >= T)
            return bk_fail(err, BK_ERR_INTERNAL, "logits of position %d asked of a sequence of %d tokens",
                           (int)rows[r], T);
    lm->bias.training = 0; /* the plugins' context says evaluation, as in bk_eval */
    int rc = bk_bias_forward(&lm->bias, T, err);
    /* train = 1 keeps the logits (an evaluation forward computes them a block at a time and keeps none) */
    if (!rc)
        rc = bk_gpt_forward(&lm->gpt, inputs, NULL, B, T, 1, err);
    float *all = rc ? NULL : malloc((size_t)B * T * V * sizeof *all);
    if (!rc && !all)
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the logits of %d x %d tokens", B, T);
    if (!rc)
        rc = bk_gpt_copy_logits(&lm->gpt, all, err);
    for (int b = 0; b < B && !rc; b++)
        for (int r = 0; r < n_rows; r++)
            memcpy(out + ((size_t)b * n_rows + r) * V, all + ((size_t)b * T + rows[r]) * V, (size_t)V * sizeof *out);
    free(all);
    /* a NaN logit has no argmax: the text it would give (NUL bytes) or the score (0) would be made up */
    for (size_t k = 0; !rc && k < (size_t)B * n_rows * V; k++)
        if (!isfinite(out[k]))
            rc = bk_fail(err, BK_ERR_INVALID, "the model's logit of token %d at position %d (sequence %d) is %g: "
                         "the model is not finite (its parameters? see biaskit params); no result is made from it",
                         (int)(k % (size_t)V), (int)rows[(k / (size_t)V) % (size_t)n_rows],
                         (int)(k / ((size_t)V * n_rows)), (double)out[k]);
    return rc;
}

int bk_sampler_check(const bk_sampler *s, int32_t V, bk_error *err)
{
    if (s->top_k < 0 || s->top_k > V)
        return bk_fail(err, BK_ERR_USAGE, "--top-k: expected an integer in [1, %d] (the vocabulary), got %d", (int)V,
                       (int)s->top_k);
    if (s->top_k > 0 && !(isfinite(s->temperature) && s->temperature > 0.0))
        return bk_fail(err, BK_ERR_USAGE, "--temperature: expected a finite number > 0, got %g", s->temperature);
    return BK_OK;
}

size_t bk_sampler_scratch_size(int32_t V)
{
    return (size_t)V * (sizeof(int32_t) + sizeof(double));
}

/* Order for the top-k: larger logit first, then the lower token id (a total order: deterministic). */
static const float *sort_logits;
static int by_logit(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = sort_logits[i], y = sort_logits[j];
    if (x != y)
        return x > y ? -1 : 1;
    return (i > j) - (i < j);
}

int32_t bk_sampler_next(bk_sampler *s, const float *logits, int32_t V, void *scratch)
{
    if (s->top_k == 0)
        return bk_argmax(logits, V);
    double *p = scratch;
    int32_t *ids = (int32_t *)(p + V);
    for (int32_t i = 0; i < V; i++)
        ids[i] = i;
    sort_logits = logits; /* qsort has no context argument in C11; one sampler runs at a time */
    qsort(ids, (size_t)V, sizeof *ids, by_logit);
    const int32_t k = s->top_k;
    /* softmax(logits / temperature) over the k largest, shifted by the largest for range */
    const double top = (double)logits[ids[0]];
    double total = 0.0;
    for (int32_t r = 0; r < k; r++)
        total += p[r] = exp(((double)logits[ids[r]] - top) / s->temperature);
    bk_rng rng = biaskit_rng_seeded(s->rng);
    const double u = bk_rng_uniform(&rng) * total; /* in (0, total] */
    s->rng = rng.state;
    double acc = 0.0;
    for (int32_t r = 0; r < k; r++) {
        acc += p[r];
        if (u <= acc)
            return ids[r];
    }
    return ids[k - 1]; /* rounding: u a hair above the accumulated total */
}

int bk_generate(bk_lm *lm, const int32_t *prompt, int32_t n_prompt, int32_t n_new, int32_t max_length,
                bk_sampler *s, int32_t *out, bk_error *err)
{
    if (n_prompt < 1)
        return bk_fail(err, BK_ERR_INVALID, "the prompt is empty: give at least one token to continue");
    const int64_t longest = (int64_t)n_prompt + n_new - 1; /* the last forward reads all but the last token */
    if (longest > max_length)
        return bk_fail(err, BK_ERR_INVALID,
                       "the prompt (%d tokens) and %d new tokens need a forward of %lld tokens, beyond the limit of "
                       "%d tokens",
                       (int)n_prompt, (int)n_new, (long long)longest, (int)max_length);
    const int32_t V = lm->gpt.V;
    int32_t *seq = malloc((size_t)(n_prompt + n_new) * sizeof *seq);
    float *row = malloc((size_t)V * sizeof *row);
    void *scratch = malloc(bk_sampler_scratch_size(V));
    int rc = BK_OK;
    if (!seq || !row || !scratch)
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory generating %d tokens", (int)n_new);
    if (!rc)
        memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    for (int32_t t = 0; t < n_new && !rc; t++) {
        const int32_t T = n_prompt + t, last = T - 1;
        if (!(rc = bk_lm_logits_at(lm, seq, 1, T, &last, 1, row, err)))
            out[t] = seq[T] = bk_sampler_next(s, row, V, scratch);
    }
    free(seq), free(row), free(scratch);
    return rc;
}
