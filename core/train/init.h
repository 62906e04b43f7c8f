/* Starting a training from another checkpoint's weights (train --init CKPT, [train] init): the weights
 * come from the checkpoint, everything else from the new experiment — its length, data, steps,
 * schedule, terms — and the optimizer starts afresh (zero moments, step 0).
 *
 * The rules, by checkpoint tensor name (train/checkpoint.h):
 *   model.<tensor>     every one the new model has must be in the checkpoint with the same shape (else
 *                      an error naming the tensor and both shapes: a model of another family, width,
 *                      depth or vocabulary cannot start from it);
 *   term.<label>.<t>   carried over when the checkpoint has a term of the same label made by the same
 *                      plugin (its plugin record, by name) and the tensor has the same shape (another
 *                      shape is an error naming both); a new term, or a term whose plugin changed,
 *                      starts from its plugin's initialisation;
 *   mix.<stream>       carried over when it has the same shape, else initialised afresh.
 * A tensor of the checkpoint the new model does not take (a dropped or replaced term, a mixing
 * weight of another shape) is named in the report; the AdamW moments are not read. The checkpoint's
 * tokenizer, when it stores one, becomes the new model's (its text data is encoded with it). The checkpoint's
 * metadata seal and every tensor's checksum are verified first; its experiment is not rebuilt, so its
 * plugins need not be installed.
 *
 * Which tensors train ([train] trainable): shell globs (fnmatch) over the same names; an optimizer
 * group trains when each of its tensors matches a pattern, and a term's tensors train or stay frozen
 * together (a pattern that selects some of a term's tensors but not all is an error, as is a pattern
 * that matches nothing). A frozen group keeps its values and moments (train/adamw.h). */
#ifndef BK_TRAIN_INIT_H
#define BK_TRAIN_INIT_H

#include "train/lm.h"

/* What bk_init_from took, started afresh and left (each list "a, b, ..." truncated to its size). */
typedef struct bk_init_report {
    int carried, fresh, dropped;
    char fresh_names[1024];
    char dropped_names[1024];
    char seal[17];        /* the checkpoint's metadata seal ("" for a format 2 checkpoint) */
    int64_t step;         /* the checkpoint's step */
} bk_init_report;

/* Reads the weights of checkpoint `path` into the model of lm, registered in opt (bk_lm_register, moments
 * zero), by the rules above, uploads them to the model's backend and sets lm->init_record (the
 * checkpoint's path as given, its seal, step and experiment source). Errors name the file and the
 * tensor. */
int bk_init_from(const char *path, bk_lm *lm, bk_adamw *opt, bk_init_report *rep, bk_error *err);

/* Freezes every group of opt that the patterns of [train] trainable do not select (none: every group
 * trains), and marks the model's frozen tensors (bk_gpt.frozen: their weight gradients are not computed);
 * *n_trainable counts the values that train. Errors name the pattern or the term. */
int bk_init_trainable(bk_lm *lm, bk_adamw *opt, size_t *n_trainable, bk_error *err);

#endif
