/* Passkey retrieval (Mohtashami & Jaggi, "Landmark Attention", 2023; used by Position Interpolation and
 * YaRN): a random 5-digit key hidden at a relative depth in repeated filler text, asked for at the end.
 *
 * One sequence of length T + 1 bytes (the model reads the first T; the last digit is only a target):
 *
 *   [filler, p bytes][needle][filler, F - p bytes][question][k1 k2 k3 k4 k5]
 *
 *   filler   BK_PASSKEY_FILLER repeated as one stream and cut at F = T + 1 - |needle| - |question| - 5
 *            bytes; the needle is inserted into that stream at p, the start of a sentence: the last
 *            boundary (0, F, or a byte after ". ") at or before round(depth x F)
 *   needle   "The pass key is K. Remember it. K is the pass key. "
 *   question "What is the pass key? The pass key is "
 *
 * Scoring (teacher forcing): one forward over the T bytes; the trial is correct when, at each of the 5
 * positions before a digit, the argmax of the logits over the whole vocabulary is that digit (first
 * maximum on a tie). It equals greedy decoding of the 5 digits (each greedy step would see the same
 * prefix, since every earlier digit was right) at a fifth of the cost. The digit accuracy (right digits
 * / 5) is kept too: it moves before the exact match does in small models.
 *
 * Keys: uniform in [10000, 99999], from a seed derived from (seed, length, depth, trial) alone, so a
 * cell's trials are the same whatever else the grid holds. */
#ifndef BK_PASSKEY_H
#define BK_PASSKEY_H

#include "train/lm.h"
#include "util/error.h"

#include <stdint.h>
#include <stdio.h>

#define BK_PASSKEY_DIGITS 5
#define BK_PASSKEY_FILLER "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
#define BK_PASSKEY_QUESTION "What is the pass key? The pass key is "
/* the needle around the key K: NEEDLE_A K NEEDLE_B K NEEDLE_C */
#define BK_PASSKEY_NEEDLE_A "The pass key is "
#define BK_PASSKEY_NEEDLE_B ". Remember it. "
#define BK_PASSKEY_NEEDLE_C " is the pass key. "

/* The shortest length T: the needle, the question and 4 digits read, no filler (101 bytes). */
int32_t bk_passkey_min_length(void);

/* The key of trial `trial` of the cell (length, depth) for `seed`: in [10000, 99999]. */
uint32_t bk_passkey_key(uint64_t seed, int32_t length, double depth, int32_t trial);

/* Writes the T + 1 byte tokens of the sequence into seq; *needle_at: where the needle starts (p).
 * BK_ERR_INVALID when T < bk_passkey_min_length() (the message says the minimum and why) or depth is
 * not in [0, 1]. */
int bk_passkey_build(int32_t T, double depth, uint32_t key, int32_t *seq, int32_t *needle_at, bk_error *err);

/* Training samples for fine-tuning on the task (`biaskit passkey --write-samples`): n samples of exactly
 * T bytes each, written one after the other to f (T >= bk_passkey_min_length() + 1): sample k is the
 * sequence of length T - 1 (T bytes with its key's last digit) at a depth uniform in [0, 1] and a key,
 * both from seed's own stream (not the evaluation's keys). Trained at [train] length = T, each training
 * window is one whole sample (the loader cuts windows at multiples of T). Returns BK_ERR_IO when a write
 * fails (naming `name`). */
int bk_passkey_write_samples(FILE *f, const char *name, int32_t T, int64_t n, uint64_t seed, bk_error *err);

/* The teacher-forced score of one trial from the logits (n x V) at the n positions before each of the n
 * answer tokens answer[0..n): the number of positions whose argmax is the answer token; the trial is
 * correct when it is n. */
int bk_passkey_score(const float *logits, int32_t V, const int32_t *answer, int n);

typedef struct bk_passkey_cell {
    int32_t length;
    double depth;
    int32_t trials, correct;   /* exact matches of all 5 digits */
    int64_t digits_correct;    /* of trials x 5 */
    double accuracy;           /* correct / trials */
    double digit_accuracy;     /* digits_correct / (5 trials) */
    int32_t needle_at_first;   /* where the needle starts in trial 0 (bytes), for the record */
} bk_passkey_cell;

/* Checks a grid: every length >= bk_passkey_min_length() and <= max_length, every depth in [0, 1],
 * trials >= 1; BK_ERR_USAGE naming --lengths, --depths or --trials with the value and the bound. */
int bk_passkey_check(const int32_t *lengths, int n_lengths, const double *depths, int n_depths, int32_t trials,
                     int32_t max_length, bk_error *err);

/* Run the grid: cells[i * n_depths + j] gets (lengths[i], depths[j]). Byte-level models only
 * (bk_text_model_check). Trials of one length are batched, up to BK_PASSKEY_TOKENS_PER_BATCH tokens a
 * forward. progress (may be NULL) is called after each cell. */
#define BK_PASSKEY_TOKENS_PER_BATCH 4096
int bk_passkey_run(bk_lm *lm, const int32_t *lengths, int n_lengths, const double *depths, int n_depths,
                   int32_t trials, uint64_t seed, bk_passkey_cell *cells,
                   void (*progress)(const bk_passkey_cell *cell, void *ctx), void *ctx, bk_error *err);

#endif
