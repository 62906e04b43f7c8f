/* The run directory of a training: which directory (README.md "Paths"), created and locked against a
 * second trainer, and its metrics log cut back to the checkpoint a resumed run continues from. */
#ifndef BK_RUNDIR_H
#define BK_RUNDIR_H

#include "train/lm.h"
#include "util/error.h"

#include <stdint.h>
#include <stdio.h>

#define BK_RUN_LOCK_FILE ".train.lock"
#define BK_RUN_METRICS_FILE "metrics.jsonl"
#define BK_RUN_CHECKPOINT_FILE "checkpoint.safetensors"
#define BK_RUN_SPLIT_FILE "split.json" /* what validation holds (data/split.h) */

typedef struct bk_run_dir {
    char path[4096];    /* the directory: absolute, real path */
    int lock_fd;        /* the lock file, held (flock) until bk_run_dir_close; -1 when none */
} bk_run_dir;

/* Which directory a training writes (not yet created): `out_dir` (command line: from the working
 * directory) when given; else on resume the checkpoint's directory; else [run] out_dir (from the
 * experiment file's directory); else runs/<experiment file name without .toml> in the working
 * directory. An empty out_dir is BK_ERR_USAGE. A directory named through a symbolic link is refused
 * (BK_ERR_IO, naming the link, its target and what it holds) when the target holds another run (a
 * checkpoint or a metrics log) that this training does not resume (`resume`, the checkpoint it
 * continues, or NULL): a training never replaces a run through another name. */
int bk_run_dir_choose(const bk_lm *lm, const char *out_dir, const char *resume, char *dir, size_t size,
                      bk_error *err);

/* Create `dir` (mkdir -p) and take its lock: a second trainer of the same directory fails at once
 * with a message naming the directory and the holder's pid. Released by bk_run_dir_close or when the
 * process ends, however it ends. */
int bk_run_dir_open(bk_run_dir *rd, const char *dir, bk_error *err);
void bk_run_dir_close(bk_run_dir *rd);

/* Open the metrics log for writing. A new run starts it empty; a resumed run first keeps only the
 * records with step <= `step` (the checkpoint's: steps logged after it, before a crash, would
 * otherwise appear twice), rewriting the file atomically (temporary file + rename). */
int bk_run_dir_metrics(const bk_run_dir *rd, int resume, int64_t step, FILE **out, bk_error *err);

#endif
