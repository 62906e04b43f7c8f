/* Reopening a stored run: the one way every command that opens a checkpoint goes (eval, generate,
 * passkey, bias, params, trf, erf, train --resume). A purpose says what the opener will do with it and
 * so what the stored run may be changed in: the rules themselves are the checkpoint's
 * (train/checkpoint.h: a reopened run never changes the model's shape or how it was trained; to
 * evaluate or inspect it, [data] and [run] keys and a plugin's own options may change, with a warning for
 * the options; to resume it, also the [train] keys a longer run needs). */
#ifndef BK_TRAIN_REOPEN_H
#define BK_TRAIN_REOPEN_H

#include "train/checkpoint.h"

typedef enum bk_reopen_purpose {
    BK_REOPEN_EVALUATE = 0, /* run the model as trained: eval, generate, passkey */
    BK_REOPEN_INSPECT = 1,  /* read its terms and weights: bias, params, trf, erf; the model is rebuilt on the
                             * CPU whatever device trained it (run.device=cpu comes first: --set may say
                             * otherwise) */
    BK_REOPEN_RESUME = 2    /* train on from it: train --resume (every tensor's checksum verified) */
} bk_reopen_purpose;

/* The most --set overrides a request carries. */
#define BK_REOPEN_MAX_SETS 64

typedef struct bk_reopen_request {
    bk_reopen_purpose purpose;
    const char *const *sets; /* the user's --set overrides, in order */
    int n_sets;
    int strict;              /* a plugin that differs from its record, a format 2 checkpoint: errors */
    int no_verify;           /* skip the tensors' checksums (not with BK_REOPEN_RESUME) */
} bk_reopen_request;

/* The overrides a purpose applies, in order, into out[cap] (cap >= n_sets + 1); returns their count. */
int bk_reopen_overrides(const bk_reopen_request *r, const char **out, int cap);

/* Opens the checkpoint at `path` for r->purpose into lm (and, to resume, opt and st; opt must be NULL
 * otherwise; st may be NULL to evaluate or inspect). Errors name the file and what was refused. */
int bk_reopen(const char *path, const bk_reopen_request *r, bk_lm *lm, bk_adamw *opt, bk_train_state *st,
              bk_error *err);

#endif
