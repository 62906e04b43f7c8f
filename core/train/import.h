/* biaskit import: a pretrained model's file into an ordinary checkpoint (train/checkpoint.h, format 3,
 * sealed) that eval, passkey, generate, bias and train --resume read like any other.
 *
 * GGUF (io/gguf.h), architecture "llama" (LLaMA, SmolLM2, and the other models llama.cpp stores as llama
 * blocks): the experiment comes from the metadata -- [model] family = "llama" with block_count,
 * embedding_length, feed_forward_length, attention.head_count(_kv), attention.key_length (else
 * embedding_length / head_count), attention.layer_norm_rms_epsilon, the vocabulary from token_embd's rows,
 * tied when there is no output.weight; one [[term]] rope with rope.freq_base (10000 when absent); [train]
 * length = context_length; [run] device = "cpu" (the llama family's backend) -- and the weights are
 * dequantized to fp32 (io/gguf.h: F32, F16, BF16, Q8_0, Q4_0, Q4_1). Layouts:
 *   a GGUF matrix of ne = (in, out) is `out` rows of `in` values: the engine's (out, in);
 *   q and k: llama.cpp's converter reorders each head's rows from the rotate-half pairs (k, k + hd/2)
 *   of HF transformers to adjacent pairs (2k, 2k + 1) for ggml's rope; the engine rotates in the
 *   rotate-half layout (model/rotary_math.h), so row 2k + i of a head here is row i hd/2 + k there;
 *   qkvw[l] is q's rows, then k's, then v's; fcw[l] ffn_gate's rows, then ffn_up's.
 * Refused, naming what: another architecture, rope scaling in the metadata, a rotary dimension other than
 * the head's, a tensor missing, of another shape or unknown (every tensor of the file must be placed), a
 * tokenizer whose vocabulary is not the embedding's rows. The tokenizer itself is not carried yet: the
 * checkpoint evaluates token ids (shards), not text. Nothing is written unless the whole import works. */
#ifndef BK_TRAIN_IMPORT_H
#define BK_TRAIN_IMPORT_H

#include "util/error.h"

#include <stdio.h>

typedef struct bk_import_summary {
    char architecture[32];
    char name[128]; /* general.name, "" when absent */
    int layers, heads, kv_heads, head_dim, dim, ffn_dim, vocab, context, tied;
    double rope_base, norm_eps;
    size_t tensors;    /* read from the file */
    size_t quantized;  /* of them, stored in a block type (Q8_0, Q4_0, Q4_1) */
    size_t parameters; /* of the model */
} bk_import_summary;

/* The experiment's TOML text the GGUF file at `path` gives (into text, of `size` bytes). */
int bk_import_gguf_experiment(const char *path, char *text, size_t size, bk_import_summary *sum, bk_error *err);

/* Reads the GGUF file at `path` and writes the checkpoint at `out` (atomically). */
int bk_import_gguf(const char *path, const char *out, bk_import_summary *sum, bk_error *err);

#endif
