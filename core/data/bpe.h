/* Byte-level BPE tokenizers (GPT-2, SmolLM2, Llama 3, ...), encoding as HF `tokenizers` does.
 *
 * A tokenizer comes from an HF tokenizer.json or from a GGUF file's tokenizer.ggml.* metadata, and can
 * be written back as a tokenizer.json (bk_bpe_to_hf_json) that both this reader and HF's
 * Tokenizer.from_str load into the same tokenizer.
 *
 * Encoding a text (bk_bpe_encode), in HF's order:
 *   1. Added tokens are split out of the text, leftmost-longest: first those with normalized = false
 *      (special tokens by default) over the whole text, then those with normalized = true over what is
 *      left (with no normalizer both match the raw text). Their ids are emitted as they are.
 *   2. Each remaining piece goes through the pre-tokenizer steps in order (Split by a regex or a
 *      literal string with behaviour Isolated, Removed, MergedWithPrevious, MergedWithNext or
 *      Contiguous, optionally inverted; Digits), each step splitting every piece further; empty pieces
 *      are dropped. The last step is always ByteLevel: a space is prepended to every piece that does
 *      not begin with one when add_prefix_space is set, and the piece is split by GPT-2's regex when
 *      use_regex is set. Regexes are PCRE2's in UTF + UCP mode with the meaning HF's Oniguruma gives
 *      them: \s and \S are Unicode White_Space and its complement, ^ and $ match at every line; \w, \W,
 *      \b and \B are refused (Oniguruma's word class is no set of categories PCRE2 can name). They run
 *      on each piece alone (a lookahead does not see past the piece), with the find-all rule of HF's
 *      regexes (an empty match right after the previous match is skipped).
 *   3. Each piece's bytes become the printable byte-to-unicode alphabet of GPT-2, and the model's BPE
 *      merges them exactly as HF's Word::merge_all does: a heap of (rank, position) that merges the
 *      lowest rank first, the leftmost on ties, with HF's check of stale entries. A pair listed twice
 *      among the merges takes the rank of its last listing. With ignore_merges a piece that is itself a
 *      vocabulary entry is that one token. A byte whose character is not in the vocabulary becomes
 *      unk_token when one is set (consecutive ones fused with fuse_unk) and is dropped otherwise, as
 *      HF does.
 * No special token is added (no BOS/EOS: a caller that wants one adds bk_bpe_bos's id itself).
 * The input must be valid UTF-8 (HF encodes Python str): anything else, an overlong form, a surrogate
 * or a code point past U+10FFFF, is refused (BK_ERR_INVALID) naming the byte offset and the byte.
 *
 * Decoding (bk_bpe_decode) is HF's ByteLevel decoder: a token whose every character is in the
 * byte-level alphabet gives those bytes, any other (an added token such as "foo bar") its own UTF-8
 * bytes; special tokens are written too. The output is bytes (not checked to be UTF-8).
 *
 * Read from tokenizer.json: model.type "BPE" with vocab (ids a permutation of 0..n-1) and merges
 * ("a b" strings or ["a", "b"] pairs, both tokens and their concatenation in the vocabulary);
 * unk_token, fuse_unk, ignore_merges; added_tokens, each either a vocabulary entry with that id or
 * the next id after the vocabulary (as HF assigns them), with lstrip, rstrip and single_word false;
 * normalizer null; pre_tokenizer ByteLevel, or a Sequence (nested ones flattened) of Split and Digits
 * ending with ByteLevel; decoder null or ByteLevel; truncation and padding null; the post-processor is
 * not used (it only adds special tokens), but a TemplateProcessing whose single template begins with
 * a special token gives bk_bpe_bos. Refused, naming the file and the key: anything else (another
 * model type, a normalizer, byte_fallback, dropout, a continuing_subword_prefix or
 * end_of_word_suffix, an unknown pre-tokenizer or decoder, a merge of tokens not in the vocabulary,
 * an invalid regex), and malformed JSON with its line and column.
 *
 * bos/eos: from the GGUF keys tokenizer.ggml.bos_token_id / eos_token_id; in a tokenizer.json, from
 * model.biaskit {"bos_id", "eos_id"} (what bk_bpe_to_hf_json writes; HF ignores the key), else bos
 * from the post-processor's template as above and eos the first special added token among
 * "<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"; -1 when none. */
#ifndef BK_DATA_BPE_H
#define BK_DATA_BPE_H

#include "io/gguf.h"
#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bk_bpe bk_bpe;

/* The largest tokenizer.json bk_bpe_open reads. */
#define BK_BPE_JSON_MAX ((uint64_t)512 << 20)

/* From the text of an HF tokenizer.json (len bytes; need not be NUL-terminated). `name` names it in
 * messages (the file's path). Errors: BK_ERR_PARSE (malformed JSON, a wrong or missing key),
 * BK_ERR_UNSUPPORTED (a form refused above), BK_ERR_NOMEM. */
int bk_bpe_from_hf_json(const char *text, size_t len, const char *name, bk_bpe **out, bk_error *err);

/* From a GGUF file's metadata (`path` names it in messages): tokenizer.ggml.model "gpt2" (byte-level
 * BPE; any other model is refused by name), tokenizer.ggml.tokens (the vocabulary in id order),
 * tokenizer.ggml.merges ("a b" strings, by rank), tokenizer.ggml.token_type (optional: CONTROL (3)
 * tokens become special added tokens, USER_DEFINED (4) ones added tokens, both with normalized =
 * false), tokenizer.ggml.bos_token_id / eos_token_id (optional), and tokenizer.ggml.pre, the
 * pre-tokenizer as llama.cpp names it, mapped onto the HF pre-tokenizer that tokenizes alike:
 *   "gpt2"               ByteLevel(add_prefix_space = false, use_regex = true)
 *   "smollm"             Sequence[Digits(individual_digits = true), ByteLevel(false, use_regex = true)]
 *   "llama3", "llama-bpe"  Sequence[Split(Llama 3's regex, Isolated), ByteLevel(false, use_regex = false)],
 *                        with ignore_merges
 *   "default" (also when the key is missing, as llama.cpp reads it): llama.cpp's four regexes in turn,
 *                        each a Split(Isolated), then ByteLevel(false, use_regex = false)
 * Any other pre is refused by name. */
int bk_bpe_from_gguf(const bk_gguf *g, const char *path, bk_bpe **out, bk_error *err);

/* The tokenizer at `path`: a directory (its tokenizer.json), a GGUF file (by its magic "GGUF"), or a
 * tokenizer.json. BK_ERR_IO naming the path when it cannot be read. */
int bk_bpe_open(const char *path, bk_bpe **out, bk_error *err);

/* The canonical tokenizer.json of t (*text NUL-terminated, to free; *len without the NUL):
 * bk_bpe_from_hf_json reads it back to the same tokenizer, and HF tokenizers (0.20 and later: merges
 * are written as pairs) loads it and encodes every text alike. Keys: version, truncation, padding,
 * added_tokens, normalizer (null), pre_tokenizer, post_processor (null), decoder (ByteLevel), model
 * (BPE, vocab in id order, merges in file order, and model.biaskit with bos_id and eos_id). */
int bk_bpe_to_hf_json(const bk_bpe *t, char **text, size_t *len, bk_error *err);

/* text[len] into token ids (*ids to free, *n of them; *ids may be NULL when n is 0). */
int bk_bpe_encode(const bk_bpe *t, const char *text, size_t len, int32_t **ids, size_t *n, bk_error *err);

/* ids[n] into bytes (*text NUL-terminated, to free; *len without the NUL). An id outside
 * [0, bk_bpe_vocab_size) is BK_ERR_INVALID naming it and its position. */
int bk_bpe_decode(const bk_bpe *t, const int32_t *ids, size_t n, char **text, size_t *len, bk_error *err);

/* Every id: the model's vocabulary and the added tokens after it. */
int bk_bpe_vocab_size(const bk_bpe *t);
/* The token of `id` as the vocabulary spells it (byte-level alphabet), or NULL when out of range. */
const char *bk_bpe_token(const bk_bpe *t, int id);
/* 1 when id is an added token marked special. */
int bk_bpe_is_special(const bk_bpe *t, int id);
int bk_bpe_bos(const bk_bpe *t); /* -1 when none */
int bk_bpe_eos(const bk_bpe *t); /* -1 when none */
/* A few words on the pre-tokenizer ("Sequence[Digits(individual), ByteLevel(regex)]"), for banners. */
const char *bk_bpe_describe(const bk_bpe *t);

void bk_bpe_free(bk_bpe *t);

#endif
