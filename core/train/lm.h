/* A language model ready to train or evaluate: the experiment, its plugins and terms, the bias
 * runtime and the transformer, plus the exact configuration text it was built from (checkpoints
 * carry that text, so `biaskit eval` rebuilds the same model), and the backend that computes it,
 * chosen by [run] device and matmul (model/backend.h). */
#ifndef BK_LM_H
#define BK_LM_H

#include "bias/bias.h"
#include "bias/terms.h"
#include "config/experiment.h"
#include "data/bpe.h"
#include "data/data.h"
#include "model/gpt.h"
#include "plugin/host.h"
#include "train/adamw.h"

typedef struct bk_lm {
    bk_experiment exp;
    bk_registry reg;
    bk_term_set terms;
    bk_bias bias;
    bk_gpt gpt;
    bk_backend *be;      /* computes the model and the bias (owned; the CPU backend is a static object) */
    char *config_text;   /* the experiment file's text */
    char *config_source; /* the experiment file's name as first given (checkpoints keep it unchanged) */
    char *config_dir;    /* its directory, absolute: relative paths of the file are read from there */
    char **overrides;    /* the --set assignments applied on top */
    int n_overrides;
    char device_note[320]; /* why [run] device = "auto" computes on the CPU (what the GPU probe said); "" else */
    char *init_record;   /* JSON: the checkpoint the training started from (train/init.h), kept in every
                            checkpoint of the run; NULL for a run from a fresh initialisation */
    bk_bpe *tokenizer;   /* the model's own tokenizer (an imported model's, carried by its checkpoints), or
                            NULL: text is read as bytes */
    char *tokenizer_json; /* its canonical tokenizer.json text (bk_bpe_to_hf_json), what checkpoints store */
    int add_bos;         /* text read through the tokenizer starts with its BOS token (eval --bos) */
} bk_lm;

/* Build from an experiment file and --set overrides, on the backend [run] device names: auto = the
 * GPU when one answers (cuda/device.h), else the CPU; cuda with no GPU is BK_ERR_DEVICE naming where the
 * device was set; emulated = the CUDA backend's code run on the host (slow; tests). */
int bk_lm_open_file(bk_lm *lm, const char *path, const char *const *overrides, int n_overrides, bk_error *err);
/* Build from configuration text; `source_name` names it in messages, `config_dir` anchors relative paths. */
int bk_lm_open_text(bk_lm *lm, const char *text, const char *source_name, const char *config_dir,
                    const char *const *overrides, int n_overrides, bk_error *err);
void bk_lm_close(bk_lm *lm);

/* Gives the model tokenizer t (owned from here on, also on failure): text data is encoded with it. Its
 * vocabulary must fit the model's (at most [model] vocab tokens, and at most 65536: the token streams
 * hold uint16 ids). */
int bk_lm_set_tokenizer(bk_lm *lm, bk_bpe *t, bk_error *err);

/* Register every trainable tensor with the optimizer under its checkpoint name:
 *   model.<tensor>               transformer tensors (decay: matrices and embedding), as groups in the
 *                                backend's memory (the model's working copies; host mirror: its params)
 *   term.<label>.theta           a term's parameters, shape (copies, n_params), host memory
 *   mix.<stream>                 learnable mixing parameters of a stream (the learned weights, packed:
 *                                bias.h), host memory; only for a stream where some weight trains
 * Allocates the gradients. Plugin parameters and mixing weights are not decayed unless decay_all; a
 * term's parameter groups (lr_scale, weight_decay per tensor) become segments of its group (adamw.h). */
int bk_lm_register(bk_lm *lm, bk_adamw *opt, bk_error *err);

/* Zero every gradient (model, terms, mixing). */
int bk_lm_zero_grad(bk_lm *lm, bk_error *err);

/* Once per step, after the backward passes and before the gradient norm: the bias's device gradients
 * into its host ones (bk_bias_gradients_to_host). */
int bk_lm_gradients_ready(bk_lm *lm, bk_error *err);

/* After the optimizer moved the parameters: plugin projections, mixing weights, fresh tables. */
int bk_lm_after_step(bk_lm *lm, int32_t distances, bk_error *err);
/* The same without the tables (the training loop computes them when the next step starts, so that a
 * plugin failing on them fails in that step, after the checkpoint of this one). */
int bk_lm_after_update(bk_lm *lm, bk_error *err);

/* The experiment's data: [data] paths (and val_paths) read from the experiment file's directory, cut
 * into a training and a validation stream as [data] says; or, when n_data > 0, the files and folders
 * `data` (paths from the working directory: the command line's), every token of them evaluation data
 * (val). With a tokenizer and [data] format = "text", each stream's text (the split is made on its
 * bytes) is encoded with the tokenizer, no special token added (lm->add_bos: its BOS first). Each
 * stream must hold at least min_tokens tokens. With no data at all the message names
 * [data] paths, and ends with `hint` (e.g. "; or give --data PATH"; may be NULL). */
int bk_lm_load_data(const bk_lm *lm, const char *const *data, int n_data, int64_t min_tokens, const char *hint,
                    bk_tokens *train, bk_tokens *val, bk_error *err);
/* The same, describing the split in *split (when not NULL; free with bk_data_split_free). */
int bk_lm_load_data_split(const bk_lm *lm, const char *const *data, int n_data, int64_t min_tokens, const char *hint,
                          bk_tokens *train, bk_tokens *val, bk_data_split *split, bk_error *err);
/* The split of experiment e's [data] (its paths read from config_dir) from the files' sizes, nothing read
 * (bk_data_plan): for `sweep --dry-run`. */
int bk_experiment_data_plan(const bk_experiment *e, const char *config_dir, bk_data_split *out, bk_error *err);

/* A path written in the experiment ([data] paths, [run] out_dir): absolute as is, else read from the
 * experiment file's directory (util/path.h). */
int bk_lm_path(const bk_lm *lm, const char *path, char *out, size_t size, bk_error *err);

/* Where the experiment file of lm was: config_dir joined with the name first given (config_source). */
int bk_lm_experiment_file(const bk_lm *lm, char *out, size_t size, bk_error *err);

#endif
