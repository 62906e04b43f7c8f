/* biaskit import: a pretrained model's file into an ordinary checkpoint (train/checkpoint.h, format 3,
 * sealed) that eval, passkey, generate, bias and train --resume read like any other.
 *
 * GGUF (io/gguf.h), architecture "llama" (LLaMA, SmolLM2, and the other models llama.cpp stores as llama
 * blocks): the experiment comes from the metadata -- [model] family = "llama" with block_count,
 * embedding_length, feed_forward_length, attention.head_count(_kv), attention.key_length (else
 * embedding_length / head_count), attention.layer_norm_rms_epsilon, the vocabulary from token_embd's rows,
 * tied when there is no output.weight; one [[term]] rope with rope.freq_base (10000 when absent); [train]
 * length = context_length; [run] device = "cpu" (where its parity with HF transformers is measured;
 * --set run.device moves it) -- and the weights are dequantized to fp32 (io/gguf.h: F32, F16, BF16, Q8_0, Q4_0, Q4_1). Layouts:
 *   a GGUF matrix of ne = (in, out) is `out` rows of `in` values: the engine's (out, in);
 *   q and k: llama.cpp's converter reorders each head's rows from the rotate-half pairs (k, k + hd/2)
 *   of HF transformers to adjacent pairs (2k, 2k + 1) for ggml's rope; the engine rotates in the
 *   rotate-half layout (model/rotary_math.h), so row 2k + i of a head here is row i hd/2 + k there;
 *   qkvw[l] is q's rows, then k's, then v's; fcw[l] ffn_gate's rows, then ffn_up's.
 * Refused, naming what: another architecture, rope scaling in the metadata, a rotary dimension other than
 * the head's, a tensor missing, of another shape or unknown (every tensor of the file must be placed), a
 * tokenizer whose vocabulary is not the embedding's rows. The tokenizer (tokenizer.ggml.*; an HF
 * directory's tokenizer.json) is carried in the checkpoint (bk_import_tokenizer), so that eval, train and
 * tokenize read text with it. Nothing is written unless the whole import works.
 *
 * HF transformers directories (train/import_hf.c): config.json, and model.safetensors or the shards that
 * model.safetensors.index.json's weight_map names (each tensor must be in the shard the map says); tensors
 * in F32, F16 or BF16, widened to fp32 exactly. By config.json's `architectures`:
 *   LlamaForCausalLM, and MistralForCausalLM with sliding_window = null: [model] family = "llama" from
 *   num_hidden_layers, hidden_size, intermediate_size, num_attention_heads, num_key_value_heads (else the
 *   heads), head_dim (else hidden_size / heads), rms_norm_eps, vocab_size, tie_word_embeddings; [train]
 *   length = max_position_embeddings; one rope term with base = rope_theta, and rope_scaling "linear" as its
 *   scaling = "pi", "yarn" as "yarn" (original_length = max_position_embeddings, beta_fast, beta_slow, and
 *   attn_factor = attention_factor / (0.1 ln factor + 1), since the plugin multiplies by that itself).
 *   Layouts: a Linear weight is (out, in), the engine's; q_proj's and k_proj's rows are already in the
 *   rotate-half layout the engine rotates (pairs (k, k + head_dim/2)): unlike the GGUF path nothing is
 *   reordered; qkvw[l] is q_proj's rows, then k_proj's, then v_proj's; fcw[l] gate_proj's, then up_proj's.
 *   GPT2LMHeadModel: [model] family = "gpt2" from n_layer, n_embd, n_head, vocab_size; the learned positions
 *   wpe become an ape term (variant = "learned", max_positions = n_positions, its table = wpe); [train]
 *   length = n_positions. GPT-2's Conv1D weights are stored (in, out): c_attn, c_proj and c_fc are
 *   transposed into the engine's (out, in); c_attn's 3 n_embd outputs are q, k, v as qkvw's rows are.
 *   Names are taken with or without the "model." / "transformer." prefix; rotary_emb.inv_freq (llama) and
 *   attn.bias, attn.masked_bias (GPT-2's causal-mask buffers) are ignored; a tied head stored as
 *   lm_head.weight must equal the embedding. [run] device = "cpu" for both.
 * Refused, naming what: no config.json, no safetensors weights, another architecture (Qwen2 by name: its
 * q, k, v biases), attention_bias or mlp_bias true, hidden_act other than silu, partial_rotary_factor != 1,
 * rope_scaling dynamic, llama3, longrope or any other type (or keys the mapping does not read), a Mistral
 * sliding window; for GPT-2 an untied head, n_inner other than 4 n_embd, layer_norm_epsilon other than the
 * engine's 1e-5, another activation than GELU's tanh form, scale_attn_weights false,
 * scale_attn_by_inverse_layer_idx, cross-attention; a tensor missing, of another shape, in another dtype,
 * unknown, or stored twice; an embedding whose rows are not vocab_size; a shard missing or truncated.
 * Nothing is written unless the whole import works. */
#ifndef BK_TRAIN_IMPORT_H
#define BK_TRAIN_IMPORT_H

#include "train/lm.h"
#include "util/error.h"

#include <stdio.h>

typedef struct bk_import_summary {
    char architecture[32];
    char name[128];  /* general.name (HF: config.json's _name_or_path), "" when absent */
    char family[8];  /* HF: "llama" or "gpt2"; "" (llama) from GGUF */
    int layers, heads, kv_heads, head_dim, dim, ffn_dim, vocab, context, tied;
    int qk_norm;       /* HF Qwen3ForCausalLM: the per-head RMSNorm of q and k ([model] qk_norm) */
    double rope_base, norm_eps;
    size_t tensors;    /* read from the file */
    size_t quantized;  /* of them, stored in a block type (Q8_0, Q4_0, Q4_1) */
    size_t half;       /* HF: of them, stored in F16 or BF16 */
    size_t parameters; /* of the model */
    char tokenizer[200]; /* what the checkpoint carries: the tokenizer's description (data/bpe.h), or why none */
} bk_import_summary;

/* The tokenizer an import read (rc: what its reader returned; t: the tokenizer when rc is BK_OK) into lm,
 * described in s->tokenizer: a kind the C tokenizer does not read (BK_ERR_UNSUPPORTED: SentencePiece, a
 * normalizer, ...) leaves the checkpoint without one, saying why; a malformed one (tokens or merges
 * missing, a vocabulary larger than the embedding) refuses the import. */
int bk_import_tokenizer(int rc, bk_bpe *t, bk_lm *lm, bk_import_summary *s, bk_error *err);

/* The experiment's TOML text the GGUF file at `path` gives (into text, of `size` bytes). */
int bk_import_gguf_experiment(const char *path, char *text, size_t size, bk_import_summary *sum, bk_error *err);

/* Reads the GGUF file at `path` and writes the checkpoint at `out` (atomically). */
int bk_import_gguf(const char *path, const char *out, bk_import_summary *sum, bk_error *err);

/* The experiment's TOML text the HF transformers directory `dir` gives (config.json only). */
int bk_import_hf_experiment(const char *dir, char *text, size_t size, bk_import_summary *sum, bk_error *err);

/* Reads the HF transformers directory `dir` and writes the checkpoint at `out` (atomically). */
int bk_import_hf(const char *dir, const char *out, bk_import_summary *sum, bk_error *err);

#endif
