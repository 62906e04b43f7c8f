/* The training loop (docs/design.md §6): micro-batches with gradient accumulation, global-norm clipping,
 * AdamW with warm-up + cosine, plugin projections after every step, periodic validation, a metrics
 * log (metrics.jsonl), a progress line, and atomic checkpoints (at checkpoint_every, at the end, on
 * Ctrl-C). A resumed run continues exactly: the same losses as an uninterrupted one.
 *
 * Data parallel (options.dist with N > 1 processes, docs/scaling.md): every process reads each global
 * batch and trains on its own B/N rows; the gradients (model, plugin parameters, mixing weights) are
 * averaged over the processes in a fixed order before the norm, the clipping and AdamW, so the
 * parameters stay the same bits on every process; validation batches are shared out and their losses
 * added in batch order (the same bits as one process). Rank 0 alone writes the log, the metrics and
 * the checkpoints, which do not depend on N. */
#ifndef BK_TRAIN_H
#define BK_TRAIN_H

#include "dist/dist.h"
#include "util/error.h"

#include <stdint.h>
#include <stdio.h>

typedef struct bk_train_options {
    const char *config;            /* experiment file (ignored with resume) */
    const char *const *overrides;  /* --set assignments */
    int n_overrides;
    const char *resume;            /* checkpoint to continue from, or NULL */
    const char *init;              /* checkpoint whose weights start the training (train/init.h; overrides
                                      [train] init; not with resume), or NULL */
    int strict;                    /* with resume: plugins that differ from the checkpoint's records are an error */
    const char *out_dir;           /* overrides [run] out_dir (and, on resume, the checkpoint's directory) */
    int64_t stop_after;            /* stop with a checkpoint after this many steps of this run (0 = never) */
    int progress;                  /* 1: redraw one progress line (terminal); 0: plain log lines */
    FILE *out;                     /* where progress and summaries go */
    bk_dist *dist;                 /* the data-parallel processes (mpirun), or NULL for one process */
} bk_train_options;

typedef struct bk_train_summary {
    int64_t steps;
    double train_loss;       /* mean loss of the last step */
    double val_loss;         /* last validation loss (NAN if none) */
    double seconds;
    double tokens_per_second;
    int interrupted;         /* stopped by a signal or stop_after, checkpoint written */
    int signalled;           /* ... by this signal (SIGINT, SIGTERM, SIGHUP); 0: by stop_after */
    char checkpoint[4096];   /* the checkpoint written last */
} bk_train_summary;

int bk_train(const bk_train_options *opt, bk_train_summary *summary, bk_error *err);

#endif
