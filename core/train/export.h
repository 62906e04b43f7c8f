/* biaskit export --hf: a checkpoint (train/checkpoint.h) into a directory that HF transformers loads with
 * from_pretrained(DIR): config.json and model.safetensors (F32). The inverse of the HF import
 * (train/import.h, train/import_hf.c), for the checkpoints whose model transformers can express:
 *
 *   [model] family = "llama" with exactly one [[term]], a rope term on the token stream:
 *     LlamaForCausalLM (model_type "llama") with hidden_size, intermediate_size, num_hidden_layers,
 *     num_attention_heads, num_key_value_heads, head_dim, rms_norm_eps, vocab_size, tie_word_embeddings,
 *     hidden_act "silu", attention_bias and mlp_bias false, torch_dtype "float32"; rope_theta = the term's
 *     base; its scaling "none": no rope_scaling; "pi" with factor f: {"rope_type": "linear", "factor": f};
 *     "yarn": {"rope_type": "yarn", "factor", "beta_fast", "beta_slow", "attention_factor" = attn_factor x
 *     (0.1 ln factor + 1)} (train/hf_map.h); max_position_embeddings = [train] length, except under yarn,
 *     where transformers 4.46 takes max_position_embeddings as YaRN's original context: there it is the
 *     term's original_length (its default is [train] length), so a model trained past its parent's length
 *     with YaRN keeps its frequencies. Tensors: model.embed_tokens.weight, model.layers.{l}.self_attn.
 *     {q,k,v,o}_proj.weight (qkvw's rows q | k | v, already in transformers' rotate-half layout: nothing is
 *     permuted), mlp.{gate,up,down}_proj.weight (fcw's rows gate | up), input_layernorm.weight,
 *     post_attention_layernorm.weight, model.norm.weight, and lm_head.weight when untied.
 *   [model] family = "gpt2" with exactly one [[term]], an ape term of variant "learned" on the token
 *     stream: GPT2LMHeadModel (model_type "gpt2") with n_layer, n_embd, n_head, n_positions = n_ctx = the
 *     table's rows (max_positions), vocab_size, layer_norm_epsilon 1e-5, activation_function "gelu_new",
 *     tied, no dropout; the table is transformer.wpe.weight; the Conv1D weights (c_attn, c_proj, c_fc) are
 *     stored (in, out): the engine's (out, in) transposed.
 *
 * Refused, naming what and why (nothing is written): another number of terms, a term of another plugin
 * (alibi, t5, ...: transformers' class has no such positional scheme), rope on gpt2 or ape on llama, a
 * sinusoidal ape, a term on the segment stream or per layer, a plugin option transformers has no field for,
 * rope scaling "ntk" or a factor of 0 (dynamic scaling), learnable mixing weights. The tokenizer is not
 * written (checkpoints carry none yet). */
#ifndef BK_TRAIN_EXPORT_H
#define BK_TRAIN_EXPORT_H

#include "train/lm.h"
#include "util/error.h"

#include <stddef.h>

typedef struct bk_export_options {
    int force;     /* DIR may be a non-empty directory: its config.json and model.safetensors are replaced */
    int no_verify; /* skip the checkpoint's tensor checksums (its metadata seal is still checked) */
} bk_export_options;

typedef struct bk_export_summary {
    char architecture[32]; /* "LlamaForCausalLM" or "GPT2LMHeadModel" */
    char positions[400];   /* the positional scheme as written: "rope_theta 10000, rope_scaling yarn ..." */
    int layers, heads, kv_heads, head_dim, dim, ffn_dim, vocab, tied;
    int context;           /* max_position_embeddings (llama) or n_positions (gpt2) */
    size_t tensors;        /* written to model.safetensors */
    size_t parameters;     /* their values */
    int tokenizer;         /* tokenizer.json and tokenizer_config.json written (the checkpoint carries one) */
} bk_export_summary;

/* config.json's text for the model `lm` (opened from a checkpoint, `source` names it in messages) into
 * text[size], or the refusal: what transformers cannot express, named. */
int bk_export_hf_config(const bk_lm *lm, const char *source, char *text, size_t size, bk_export_summary *s,
                        bk_error *err);

/* Opens the checkpoint at `ckpt` (train/reopen.h, BK_REOPEN_INSPECT) and writes `dir`/config.json and
 * `dir`/model.safetensors, and when the checkpoint carries a tokenizer its canonical `dir`/tokenizer.json
 * and a `dir`/tokenizer_config.json naming PreTrainedTokenizerFast (so AutoTokenizer loads it as it is,
 * adding no special token), each atomically. `dir` is created when absent (its parent must exist); a
 * directory that holds anything is refused unless o->force; a path that is not a directory is refused;
 * neither file may be the checkpoint itself. `o` may be NULL (no force, verify). Nothing is written when
 * the export is refused. */
int bk_export_hf(const char *ckpt, const char *dir, const bk_export_options *o, bk_export_summary *s,
                 bk_error *err);

#endif
