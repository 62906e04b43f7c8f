/* Text in and out of a trained model: `biaskit generate` and `biaskit passkey`.
 *
 * Text is tokenized here only for byte-level models (one token per byte, vocab 256: [data] format =
 * "text", or shards written by `scripts/tokenize.py --bytes`). A BPE model's tokenizer lives in its
 * tokenizer.json, which the engine does not read: such a model is refused (BK_ERR_UNSUPPORTED) with a
 * message that says so.
 *
 * Logits come from a forward that keeps them (bk_gpt_forward with train = 1, then bk_gpt_copy_logits;
 * no gradient is computed). That forward keeps what a training step keeps: on the CPU backend the
 * attention probabilities of every layer, L x H x T x T floats per sequence, so its memory grows with
 * T^2 (a device backend with fused attention keeps L x H x T row statistics). There is no KV cache:
 * generation recomputes the whole growing sequence for each new token (O(n) forwards of up to n
 * tokens), which is simple and exact and fast enough for a quick look at a small model. */
#ifndef BK_GENERATE_H
#define BK_GENERATE_H

#include "model/layers.h" /* bk_argmax */
#include "train/lm.h"
#include "util/error.h"

#include <stdint.h>

/* The longest sequence generate and passkey run, by default, as a multiple of the training length
 * (eval's default lengths go to 8x; passkey grids to 16x). */
#define BK_GENERATE_MAX_FACTOR 16

/* BK_OK when `command` can read and write `lm`'s text: a byte-level model (vocab 256 and no tokenizer),
 * or, where the command tokenizes (`tokenizes`), a model with its tokenizer; else BK_ERR_UNSUPPORTED naming
 * the command and why. */
int bk_text_model_check(const bk_lm *lm, const char *command, int tokenizes, bk_error *err);

/* The byte tokens of text[0..len) into out (len int32). */
void bk_text_encode(const char *text, size_t len, int32_t *out);

/* Forward over B sequences of T tokens (inputs, B x T) and copy into out (B x n_rows x V floats) the
 * logits at positions rows[0..n_rows) of each sequence (the distribution of the token after each).
 * Computes the bias tables for T first. Evaluation context (the plugins see training = 0). */
int bk_lm_logits_at(bk_lm *lm, const int32_t *inputs, int B, int T, const int32_t *rows, int n_rows, float *out,
                    bk_error *err);


/* How the next token is chosen: greedy (top_k = 0): the argmax; else sampled from the softmax of
 * logits / temperature restricted to the top_k largest logits (ties at the k-th value: the lower
 * token ids), with one uniform draw of `rng` (inverse CDF, accumulated in double). */
typedef struct bk_sampler {
    int32_t top_k;       /* 0: greedy; else 1 <= top_k <= V */
    double temperature;  /* > 0, finite; used when top_k > 0 */
    uint64_t rng;        /* the SplitMix64 state (util/rng.h), advanced by each draw */
} bk_sampler;

/* Checks top_k (0 or in [1, V]) and temperature (finite, > 0 when top_k > 0): BK_ERR_USAGE naming
 * --top-k or --temperature with the value and what is expected. */
int bk_sampler_check(const bk_sampler *s, int32_t V, bk_error *err);

/* The next token from one row of V logits. `scratch` holds V int32 and V doubles (bk_sampler_scratch_size). */
int32_t bk_sampler_next(bk_sampler *s, const float *logits, int32_t V, void *scratch);
size_t bk_sampler_scratch_size(int32_t V);

/* Generate n_new tokens after prompt[0..n_prompt) into out[0..n_new): each step runs the forward on
 * the whole sequence so far (no KV cache) and picks the next token with `s`. The prompt must not be
 * empty and n_prompt + n_new - 1 (the longest forward) must be at most max_length: else BK_ERR_INVALID
 * saying the limit. */
int bk_generate(bk_lm *lm, const int32_t *prompt, int32_t n_prompt, int32_t n_new, int32_t max_length,
                bk_sampler *s, int32_t *out, bk_error *err);

#endif
