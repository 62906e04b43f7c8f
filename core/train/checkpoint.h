/* Checkpoints: one safetensors file (io/safetensors.h), format BK_CHECKPOINT_FORMAT.
 *
 * Tensors: every trainable tensor under its checkpoint name, and its AdamW moments as adam.m.<name> and
 * adam.v.<name>:
 *   model.<tensor>          the transformer's tensors, with their shapes;
 *   term.<label>.<tensor>   a term's parameters, one safetensors tensor per name its plugin's
 *                           param_tensors() gives (term.kerple.r1, ...): shape [rows] for a vector
 *                           (cols = 1), else [rows, cols], with a leading [layers] when per_layer. A
 *                           plugin without param_tensors(), or whose tensors do not tile theta exactly,
 *                           is stored whole as term.<label>.theta, shape [copies, n_params];
 *   mix.<stream>            learnable mixing parameters.
 *
 * Metadata (the "biaskit" key, JSON): format; step, adam_t, tokens, data_epoch, data_index (non-negative
 * integers below 2^53, adam_t = step) and val_loss; the experiment (config text, config_source: the name
 * of the file it came from, config_dir, overrides); "checksum": "xxh64" and "tensors": {name: the XXH64
 * of the tensor's data bytes as 16 hex digits} (bk_xxh64, seed 0), verified for every tensor on load;
 * "plugins": one record per term: term, plugin (name), file (the resolved .so path), version,
 * descriptor (XXH64 of the declarations that shape the math: ABI version, name, capabilities, flags,
 * and every option's name, type, default and choices; not the version, not the doc strings) and
 * file_xxh64 (XXH64 of the .so file's bytes on disk when the checkpoint is written).
 *
 * On load each term's plugin is compared with its record: another version, other declarations or
 * other file bytes are a warning naming the term, the plugin and what changed (old vs new), or with
 * `strict` an error. A plugin found at another path with the same bytes is not a change.
 *
 * Written atomically (temp file + rename + directory fsync), so an interrupted write leaves the
 * previous checkpoint intact. */
#ifndef BK_CHECKPOINT_H
#define BK_CHECKPOINT_H

#include "train/adamw.h"
#include "train/lm.h"

/* 2: named plugin tensors, per-tensor checksums, plugin records. Format 1 files are refused. */
#define BK_CHECKPOINT_FORMAT 2

typedef struct bk_train_state {
    int64_t step;          /* optimizer steps done */
    int64_t data_epoch;    /* training loader cursor */
    int64_t data_index;
    int64_t tokens;        /* training tokens seen */
    double val_loss;       /* last validation loss, NAN if none */
} bk_train_state;

/* Writes the host copies of the optimizer's groups (adamw.h): after training on a device backend, call
 * bk_adamw_to_host first (a no-op on the CPU). The file is the same whichever backend trained. */
int bk_checkpoint_save(const char *path, const bk_lm *lm, const bk_adamw *opt, const bk_train_state *st,
                       bk_error *err);

/* Receives each warning of a load (one line, no newline). */
typedef void (*bk_checkpoint_warn_fn)(void *ctx, const char *message);

typedef struct bk_checkpoint_options {
    const char *const *overrides; /* applied on top of the stored experiment (e.g. a longer length) */
    int n_overrides;
    int strict;                   /* a plugin that differs from its record is an error (BK_ERR_PLUGIN) */
    bk_checkpoint_warn_fn warn;   /* NULL: "biaskit: warning: ..." lines on stderr */
    void *warn_ctx;
} bk_checkpoint_options;

/* Rebuild the model from a checkpoint: the experiment stored in it (with the options' overrides on
 * top), then every tensor. With `opt` the optimizer is set up and its moments restored (resume); with
 * NULL only the weights are read (evaluation). The model is built on the backend its [run] device names
 * (overrides included) and what was read is uploaded there. Errors name the file and the tensor or field that is
 * missing, malformed, of another shape or whose checksum differs. `o` may be NULL (no overrides, not
 * strict, warnings on stderr). */
int bk_checkpoint_load_ex(const char *path, const bk_checkpoint_options *o, bk_lm *lm, bk_adamw *opt,
                          bk_train_state *st, bk_error *err);

/* bk_checkpoint_load_ex with these overrides, not strict, warnings on stderr. */
int bk_checkpoint_load(const char *path, const char *const *extra_overrides, int n_extra, bk_lm *lm, bk_adamw *opt,
                       bk_train_state *st, bk_error *err);

/* 1 when `path` looks like a safetensors file (ends in .safetensors, or begins with a little-endian
 * header length that fits the file followed by '{'), 0 otherwise (e.g. an experiment file). */
int bk_checkpoint_is_file(const char *path);

#endif
