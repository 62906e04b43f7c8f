/* Checkpoints: one safetensors file (io/safetensors.h) holding every trainable tensor under its
 * optimizer name (model.wte, term.<label>.theta, mix.token, ...), the AdamW moments (adam.m.<name>,
 * adam.v.<name>), and in its metadata the JSON state: the experiment text and overrides, the step,
 * the optimizer step count and the data cursor. Written atomically (temp file + rename), so an
 * interrupted write leaves the previous checkpoint intact. */
#ifndef BK_CHECKPOINT_H
#define BK_CHECKPOINT_H

#include "train/adamw.h"
#include "train/lm.h"

#define BK_CHECKPOINT_FORMAT 1

typedef struct bk_train_state {
    int64_t step;          /* optimizer steps done */
    int64_t data_epoch;    /* training loader cursor */
    int64_t data_index;
    int64_t tokens;        /* training tokens seen */
    double val_loss;       /* last validation loss, NAN if none */
} bk_train_state;

int bk_checkpoint_save(const char *path, const bk_lm *lm, const bk_adamw *opt, const bk_train_state *st,
                       bk_error *err);

/* Rebuild the model from a checkpoint: the experiment stored in it (with `extra_overrides` applied on
 * top, e.g. a longer evaluation length), then every tensor. With `opt` the optimizer is set up and
 * its moments restored (resume); with NULL only the weights are read (evaluation). Errors name the
 * file and the tensor or field that is missing or has the wrong size. */
int bk_checkpoint_load(const char *path, const char *const *extra_overrides, int n_extra, bk_lm *lm, bk_adamw *opt,
                       bk_train_state *st, bk_error *err);

#endif
