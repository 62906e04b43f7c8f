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
 * of the tensor's data bytes as 16 hex digits} (bk_xxh64, seed 0), verified for every tensor on load
 * unless `no_verify`; "plugins": one record per term, in term order: term, plugin (name), file (the
 * resolved .so path), version, descriptor (XXH64 of the declarations that shape the math: ABI version,
 * name, capabilities, flags, and every option's name, type, default and choices; not the version, not
 * the doc strings) and file_xxh64 (XXH64 of the .so file's bytes on disk when the checkpoint is written);
 * "init": the checkpoint a fine-tuning started from (train/init.h: its path, seal, step and experiment
 * source), when it did; "tokenizer_xxh64": the XXH64 of the model's tokenizer, when it has one, whose
 * canonical tokenizer.json text (data/bpe.h) is the "tokenizer" key beside "biaskit" (an imported
 * model's; a fine-tuning carries its parent's).
 *
 * The metadata's seal (format 3): the "biaskit_xxh64" key holds the XXH64 (seed 0, 16 hex digits) of the
 * "biaskit" text exactly as stored, so one checksum covers the experiment text, the overrides, the step
 * and data cursor, the plugin records and every tensor's checksum (hence, with them, every tensor). It
 * is verified on every load, --no-verify included (it costs microseconds): an edit by hand or a damaged
 * header is refused naming the file and what the checksum covers. It detects edits and corruption; it
 * is no signature: whoever recomputes it forges a checkpoint, and then the values are still checked
 * against the experiment (below). Format 2 (no seal) still loads, with a warning; `strict` refuses it.
 *
 * Checked on load, against the stored experiment: step <= [train] steps; for format 3, tokens = step x
 * batch x length x accumulate and the data cursor (data_epoch, data_index) is where step x batch x
 * accumulate windows leave it (facts that --set cannot change on a checkpoint, below). A run resumed
 * from a format 2 checkpoint whose batch, length or accumulation changed on an earlier resume (allowed
 * then) cannot meet that: its saves keep the counts and write "counts_checked": false, and then only
 * the step is checked.
 *
 * --set on a checkpoint (the options' overrides), by the role of each key it changes
 * (config/experiment.h, bk_experiment_key_role): [data] and [run] keys are free; [model], [attention],
 * the [[term]] list and a term's engine keys are refused everywhere (the weights were trained for that
 * model); [train] length, batch, accumulate, seed and init are refused everywhere (facts of the training);
 * the other [train] keys (steps, lr, ...) change on resume only (eval, bias and erf do not train), and
 * steps not below the checkpoint's step; a plugin's own option is a warning naming it, or with `strict`
 * an error (the engine cannot tell whether it changes the math). Setting a key to its stored value is
 * no change.
 *
 * On load each term's plugin is compared with its record (the record of the same term position):
 * another plugin, another version, other declarations or other file bytes are a warning naming the
 * term, both plugins and what changed (old vs new), or with `strict` an error. A plugin found at
 * another path with the same bytes is not a change.
 *
 * Written atomically (temp file + rename + directory fsync), so an interrupted write leaves the
 * previous checkpoint intact. Read through util/file.h: a FIFO, a device or a directory is refused by
 * name without blocking. */
#ifndef BK_CHECKPOINT_H
#define BK_CHECKPOINT_H

#include "train/adamw.h"
#include "train/lm.h"

/* 2: named plugin tensors, per-tensor checksums, plugin records; 3: the metadata's seal
 * (biaskit_xxh64). Formats 2 and 3 are read (2 with a warning); format 1 files are refused. */
#define BK_CHECKPOINT_FORMAT 3
#define BK_CHECKPOINT_FORMAT_OLDEST 2

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
    int no_verify;                /* skip hashing the tensors' data (--no-verify of eval, bias, erf, trf); the
                                     metadata's seal is still checked. train --resume never sets it: a resumed
                                     run writes fresh checksums over what it read, which would make a corrupt
                                     tensor look sound in its next checkpoint */
} bk_checkpoint_options;

/* Why a checkpoint that is only read (eval, bias, erf: not train --resume) refuses a --set that makes
 * change `c`, as a phrase ("it would change the model's shape or function (...)"); NULL when the change
 * is allowed ([data] and [run] keys; a plugin's own option, with a warning). bk_checkpoint_meta_read
 * judges eval's --set by it, and a sweep its variants' eval_set. */
const char *bk_checkpoint_eval_refusal(const bk_experiment_change *c);

/* What a checkpoint's metadata says, read and checked without building the model. */
typedef struct bk_checkpoint_meta {
    int format;              /* BK_CHECKPOINT_FORMAT_OLDEST .. BK_CHECKPOINT_FORMAT */
    int counts_checked;      /* tokens and data cursor were checked against the experiment (format 3, not
                                marked "counts_checked": false) */
    bk_train_state state;
    int64_t adam_t;
    const char *config, *config_dir, *config_source; /* the stored experiment (owned by `json`) */
    const char **overrides;  /* the stored overrides, then the options' (n_saved + n_extra) */
    int n_saved, n_overrides;
    bk_experiment exp;       /* the stored experiment with every override applied, validated */
    void *json;              /* the parsed metadata (cJSON, owned) */
} bk_checkpoint_meta;

/* Reads the metadata of checkpoint `path`: `json` is its "biaskit" text and `seal` its "biaskit_xxh64"
 * (NULL when absent). Checks the format, the seal, every number, the step and data cursor against the
 * stored experiment, and the options' overrides by the role of each key they change (above); `resume`
 * says whether a training continues (train --resume) or the model is only read. Warnings (format 2, a
 * plugin option changed) go to o->warn. On success *m is filled (free it with bk_checkpoint_meta_free);
 * on failure it is left empty. Errors name the file and the field, or the --set and the key. */
int bk_checkpoint_meta_read(const char *path, const char *json, const char *seal, const bk_checkpoint_options *o,
                            int resume, bk_checkpoint_meta *m, bk_error *err);
void bk_checkpoint_meta_free(bk_checkpoint_meta *m);

/* The seal of a metadata text: XXH64, seed 0, as 16 lower-case hex digits (out[17]). */
void bk_checkpoint_seal(const char *json, char out[17]);

/* Rebuild the model from a checkpoint: the experiment stored in it (with the options' overrides on
 * top, bk_checkpoint_meta_read), then every tensor. With `opt` the optimizer is set up and its moments restored (resume); with
 * NULL only the weights are read (evaluation). The model is built on the backend its [run] device names
 * (overrides included) and what was read is uploaded there. Errors name the file and the tensor or field that is
 * missing, malformed, of another shape or whose checksum differs. `o` may be NULL (no overrides, not
 * strict, warnings on stderr). */
int bk_checkpoint_load_ex(const char *path, const bk_checkpoint_options *o, bk_lm *lm, bk_adamw *opt,
                          bk_train_state *st, bk_error *err);

/* bk_checkpoint_load_ex with these overrides, not strict, warnings on stderr. */
int bk_checkpoint_load(const char *path, const char *const *extra_overrides, int n_extra, bk_lm *lm, bk_adamw *opt,
                       bk_train_state *st, bk_error *err);

/* The tokenizer checkpoint `path` stores (an imported model's; fine-tunings carry it), its metadata's seal
 * and the tokenizer's recorded checksum verified, the tensors not read. A checkpoint without one is
 * BK_ERR_CONFIG naming it. */
int bk_checkpoint_read_tokenizer(const char *path, bk_bpe **out, bk_error *err);

/* 1 when `path` looks like a safetensors file (ends in .safetensors, or is a regular file that begins
 * with a little-endian header length that fits the file followed by '{', or with a header length below
 * 4 GiB at all: a damaged checkpoint, whose reader then gives the reason), 0 otherwise (e.g. an
 * experiment file). Never blocks: a FIFO without the extension is not opened for reading. */
int bk_checkpoint_is_file(const char *path);

/* What every process of a data-parallel job must share (dist/dist.h, bk_dist_same), as lines of text: the
 * step it starts from, the --set overrides, each term's plugin (name, version, the checksums of its
 * declarations and of its file's bytes, and the file, which is shown but may differ), and the experiment
 * file's text. Free it; NULL when out of memory. */
char *bk_lm_agreement_text(const bk_lm *lm, int64_t step);

#endif
