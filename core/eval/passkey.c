#include "eval/passkey.h"

#include "eval/generate.h"
#include "util/rng.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIT_LEN(s) ((int32_t)(sizeof(s) - 1))
#define NEEDLE_LEN (LIT_LEN(BK_PASSKEY_NEEDLE_A) + LIT_LEN(BK_PASSKEY_NEEDLE_B) + LIT_LEN(BK_PASSKEY_NEEDLE_C) + \
                    2 * BK_PASSKEY_DIGITS)
#define QUESTION_LEN LIT_LEN(BK_PASSKEY_QUESTION)

int32_t bk_passkey_min_length(void)
{
    return NEEDLE_LEN + QUESTION_LEN + BK_PASSKEY_DIGITS - 1;
}

uint32_t bk_passkey_key(uint64_t seed, int32_t length, double depth, int32_t trial)
{
    /* the depth in millionths: 0.25 and 0.250000001 are one cell */
    uint64_t d = (uint64_t)llround(depth * 1e6);
    uint64_t h = bk_derive_seed(bk_derive_seed(seed, (uint64_t)length, d), (uint64_t)trial, 0x9a55cee7ull);
    return 10000u + (uint32_t)(h % 90000u);
}

/* The filler stream's byte i (the sentences repeated). */
static char filler_at(int32_t i)
{
    static const char filler[] = BK_PASSKEY_FILLER;
    return filler[i % LIT_LEN(BK_PASSKEY_FILLER)];
}

static int32_t put(int32_t *seq, int32_t at, const char *s, int32_t n)
{
    bk_text_encode(s, (size_t)n, seq + at);
    return at + n;
}

int bk_passkey_build(int32_t T, double depth, uint32_t key, int32_t *seq, int32_t *needle_at, bk_error *err)
{
    if (T < bk_passkey_min_length())
        return bk_fail(err, BK_ERR_INVALID,
                       "passkey length %d: the shortest is %d tokens (the needle, %d bytes, the question, %d, "
                       "and the key's first %d digits, with no filler)",
                       (int)T, (int)bk_passkey_min_length(), (int)NEEDLE_LEN, (int)QUESTION_LEN,
                       BK_PASSKEY_DIGITS - 1);
    if (!(depth >= 0.0 && depth <= 1.0))
        return bk_fail(err, BK_ERR_INVALID, "passkey depth %g: expected a relative depth in [0, 1]", depth);
    if (key < 10000u || key > 99999u)
        return bk_fail(err, BK_ERR_INTERNAL, "passkey key %u: expected 5 digits", key);
    const int32_t F = T + 1 - NEEDLE_LEN - QUESTION_LEN - BK_PASSKEY_DIGITS;
    /* the needle starts a sentence: the last boundary at or before round(depth F) */
    int32_t p = (int32_t)lround(depth * (double)F);
    while (p > 0 && p < F && !(p >= 2 && filler_at(p - 1) == ' ' && filler_at(p - 2) == '.'))
        p--;
    char k[BK_PASSKEY_DIGITS + 1];
    snprintf(k, sizeof k, "%05u", key);
    int32_t at = 0;
    for (; at < p; at++)
        seq[at] = (unsigned char)filler_at(at);
    *needle_at = p;
    at = put(seq, at, BK_PASSKEY_NEEDLE_A, LIT_LEN(BK_PASSKEY_NEEDLE_A));
    at = put(seq, at, k, BK_PASSKEY_DIGITS);
    at = put(seq, at, BK_PASSKEY_NEEDLE_B, LIT_LEN(BK_PASSKEY_NEEDLE_B));
    at = put(seq, at, k, BK_PASSKEY_DIGITS);
    at = put(seq, at, BK_PASSKEY_NEEDLE_C, LIT_LEN(BK_PASSKEY_NEEDLE_C));
    for (int32_t i = p; i < F; i++) /* the stream goes on where the needle interrupted it */
        seq[at++] = (unsigned char)filler_at(i);
    at = put(seq, at, BK_PASSKEY_QUESTION, QUESTION_LEN);
    at = put(seq, at, k, BK_PASSKEY_DIGITS);
    return at == T + 1 ? BK_OK
                       : bk_fail(err, BK_ERR_INTERNAL, "passkey sequence of %d tokens, not %d", (int)at, (int)T + 1);
}

/* The samples' stream: the seed mixed with a constant of its own, so that a sample's key is not the
 * evaluation's key of a cell for the same seed. */
#define BK_PASSKEY_SAMPLE_STREAM 0x5a3b1eULL

int bk_passkey_write_samples(FILE *f, const char *name, int32_t T, int64_t n, uint64_t seed, bk_error *err)
{
    if (T < bk_passkey_min_length() + 1)
        return bk_fail(err, BK_ERR_INVALID, "passkey samples of %d bytes: the shortest is %d (a sequence of %d "
                       "tokens and its last digit)", (int)T, (int)bk_passkey_min_length() + 1,
                       (int)bk_passkey_min_length());
    int32_t *seq = malloc((size_t)T * sizeof *seq);
    unsigned char *bytes = malloc((size_t)T);
    if (!seq || !bytes) {
        free(seq), free(bytes);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for a passkey sample of %d bytes", (int)T);
    }
    bk_rng rng = {bk_derive_seed(seed, BK_PASSKEY_SAMPLE_STREAM, 0)};
    int rc = BK_OK;
    for (int64_t k = 0; k < n && rc == BK_OK; k++) {
        const double depth = bk_rng_uniform(&rng);
        const uint32_t key = 10000u + (uint32_t)(bk_rng_u64(&rng) % 90000u);
        int32_t at;
        if ((rc = bk_passkey_build(T - 1, depth, key, seq, &at, err)) != BK_OK)
            break;
        for (int32_t i = 0; i < T; i++)
            bytes[i] = (unsigned char)seq[i];
        if (fwrite(bytes, 1, (size_t)T, f) != (size_t)T)
            rc = bk_fail(err, BK_ERR_IO, "cannot write passkey samples to '%s'", name);
    }
    free(seq), free(bytes);
    return rc;
}

int bk_passkey_score(const float *logits, int32_t V, const int32_t *answer, int n)
{
    int right = 0;
    for (int j = 0; j < n; j++)
        right += bk_argmax(logits + (size_t)j * V, V) == answer[j];
    return right;
}

int bk_passkey_check(const int32_t *lengths, int n_lengths, const double *depths, int n_depths, int32_t trials,
                     int32_t max_length, bk_error *err)
{
    for (int i = 0; i < n_lengths; i++) {
        if (lengths[i] < bk_passkey_min_length())
            return bk_fail(err, BK_ERR_USAGE,
                           "--lengths: %d is below the shortest passkey length, %d tokens (the needle with its "
                           "key, the question and the key: %d bytes with no filler)",
                           (int)lengths[i], (int)bk_passkey_min_length(), (int)bk_passkey_min_length() + 1);
        if (lengths[i] > max_length)
            return bk_fail(err, BK_ERR_USAGE, "--lengths: %d is beyond the limit of %d tokens (--max-length)",
                           (int)lengths[i], (int)max_length);
    }
    for (int j = 0; j < n_depths; j++)
        if (!(depths[j] >= 0.0 && depths[j] <= 1.0))
            return bk_fail(err, BK_ERR_USAGE, "--depths: %g is outside [0, 1] (0: the key at the start, 1: just "
                           "before the question)", depths[j]);
    if (trials < 1)
        return bk_fail(err, BK_ERR_USAGE, "--trials: expected at least 1 trial, got %d", (int)trials);
    return BK_OK;
}

/* One cell: its trials in batches of up to BK_PASSKEY_TOKENS_PER_BATCH tokens. */
static int run_cell(bk_lm *lm, int32_t T, double depth, int32_t trials, uint64_t seed, bk_passkey_cell *c,
                    bk_error *err)
{
    const int32_t V = lm->gpt.V;
    int B = BK_PASSKEY_TOKENS_PER_BATCH / T > 1 ? BK_PASSKEY_TOKENS_PER_BATCH / T : 1;
    if (B > trials)
        B = trials;
    memset(c, 0, sizeof *c);
    c->length = T, c->depth = depth, c->trials = trials;
    int32_t *seq = malloc((size_t)(T + 1) * sizeof *seq), *in = malloc((size_t)B * T * sizeof *in);
    int32_t *answers = malloc((size_t)B * BK_PASSKEY_DIGITS * sizeof *answers);
    float *logits = malloc((size_t)B * BK_PASSKEY_DIGITS * V * sizeof *logits);
    int32_t rows[BK_PASSKEY_DIGITS];
    for (int j = 0; j < BK_PASSKEY_DIGITS; j++) /* the positions that predict the digits */
        rows[j] = T - BK_PASSKEY_DIGITS + j;
    int rc = BK_OK;
    if (!seq || !in || !answers || !logits)
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for passkey trials of length %d", (int)T);
    for (int32_t t0 = 0; t0 < trials && !rc; t0 += B) {
        int nb = trials - t0 < B ? trials - t0 : B;
        for (int b = 0; b < nb && !rc; b++) {
            int32_t at;
            rc = bk_passkey_build(T, depth, bk_passkey_key(seed, T, depth, t0 + b), seq, &at, err);
            if (t0 + b == 0)
                c->needle_at_first = at;
            memcpy(in + (size_t)b * T, seq, (size_t)T * sizeof *in);
            memcpy(answers + (size_t)b * BK_PASSKEY_DIGITS, seq + T + 1 - BK_PASSKEY_DIGITS,
                   BK_PASSKEY_DIGITS * sizeof *answers);
        }
        if (!rc)
            rc = bk_lm_logits_at(lm, in, nb, T, rows, BK_PASSKEY_DIGITS, logits, err);
        for (int b = 0; b < nb && !rc; b++) {
            int right = bk_passkey_score(logits + (size_t)b * BK_PASSKEY_DIGITS * V, V,
                                         answers + (size_t)b * BK_PASSKEY_DIGITS, BK_PASSKEY_DIGITS);
            c->digits_correct += right;
            c->correct += right == BK_PASSKEY_DIGITS;
        }
    }
    free(seq), free(in), free(answers), free(logits);
    if (rc)
        return bk_error_prefix(err, "passkey at length %d, depth %g: ", (int)T, depth);
    c->accuracy = (double)c->correct / (double)trials;
    c->digit_accuracy = (double)c->digits_correct / ((double)trials * BK_PASSKEY_DIGITS);
    return BK_OK;
}

int bk_passkey_run(bk_lm *lm, const int32_t *lengths, int n_lengths, const double *depths, int n_depths,
                   int32_t trials, uint64_t seed, bk_passkey_cell *cells,
                   void (*progress)(const bk_passkey_cell *cell, void *ctx), void *ctx, bk_error *err)
{
    int rc = bk_text_model_check(lm, "passkey", 0, err);
    for (int i = 0; i < n_lengths && !rc; i++)
        for (int j = 0; j < n_depths && !rc; j++) {
            bk_passkey_cell *c = &cells[(size_t)i * n_depths + j];
            if (!(rc = run_cell(lm, lengths[i], depths[j], trials, seed, c, err)) && progress)
                progress(c, ctx);
        }
    return rc;
}
