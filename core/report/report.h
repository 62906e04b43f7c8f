/* The report of a sweep (`biaskit report`, docs/reports.md): from a directory written by
 * `biaskit sweep` (sweep.json, and per run status.json, eval.json, eval-sliding.json, the checkpoint
 * and metrics.jsonl), a Markdown report with its figures and the numbers as CSV:
 *
 *   report.md     perplexity by evaluation length x variant, one table per corpus and grid point and
 *                 per protocol (non-overlapping chunks; sliding window when the sweep has one): mean
 *                 ± sample standard deviation over the seeds that finished, with n; the figures; the
 *                 runs that failed or are missing, each with its error (never dropped silently)
 *   results.csv   one row per (corpus, grid point, variant, protocol, length): n, mean, std, seeds
 *   runs.csv      one row per (run, protocol, length): that run's loss and perplexity
 *   figures       NAME.png drawn by NAME.gp from NAME.dat (core/report/plot.h):
 *                   ppl-*        perplexity vs evaluation length (log axes), a line per variant
 *                   position-*   loss at each position at the longest length, a line per variant
 *                   bias-*       the learned distance table T_h(d) of every head (a curve each) of
 *                                each variant's first seed, rebuilt from its checkpoint
 *                   mix-*        learned mixing weights over training (metrics.jsonl "mix"), when
 *                                [attention] learn_weights is on
 *
 * The sweep directory is only read; everything is written into the output directory (created). */
#ifndef BK_REPORT_H
#define BK_REPORT_H

#include "util/error.h"

#include <stddef.h>
#include <stdio.h>

#define BK_REPORT_DEFAULT_SUBDIR "report"

typedef struct bk_sweep_report_options {
    const char *sweep_dir; /* the directory holding sweep.json */
    const char *out_dir;   /* NULL: <sweep_dir>/report */
    FILE *log;             /* progress and warnings, one line each; NULL: none */
    double clip;           /* > 1: the perplexity figures draw a variant whose perplexity somewhere exceeds
                            * clip x the median of the variants' at the longest length in a panel of its
                            * own ("outliers"), so that it does not squash the others; 0: none */
} bk_sweep_report_options;

typedef struct bk_sweep_report_summary {
    int runs;              /* runs in sweep.json */
    int done;              /* runs with every evaluation the sweep asked for read */
    int problems;          /* runs failed, missing or incomplete: listed in the report */
    int figures;           /* PNGs drawn */
    int undrawn;           /* figures whose script and data are written but not drawn (no gnuplot) */
    int figure_errors;     /* figures that failed otherwise (each noted in the report and the log) */
    char out_dir[4096];
    char report[4096];     /* report.md */
    char csv[4096];        /* results.csv */
    char first_figure_error[BK_ERROR_MESSAGE_MAX];
} bk_sweep_report_summary;

/* Read the sweep directory and write the report. Fails (naming the file and what was expected) when
 * the directory is not a sweep directory or sweep.json is malformed, or when the output cannot be
 * written. A run that failed, is missing, or whose evaluation files are missing or malformed is not
 * an error: the report lists it with its error. A figure that cannot be drawn is not an error
 * either (the summary counts it; the report says why). */
int bk_sweep_report(const bk_sweep_report_options *o, bk_sweep_report_summary *sum, bk_error *err);

/* The report's readers on a file's bytes instead of a sweep directory (fuzz/fuzz_report.c drives them):
 * sweep.json as the report reads it; eval.json / eval-sliding.json as a run's evaluation at lengths 16,
 * 32 and 64; metrics.jsonl's mixing weights for 2 token-stream terms and 1 segment-stream term.
 * Returns BK_OK, or the error the report would give (sweep.json) or the problem it would list for the
 * run (the others); BK_ERR_INTERNAL when a reader broke its own promise (metrics: the steps drawn do
 * not increase). Nothing is read from or written to disk. */
typedef enum bk_report_file {
    BK_REPORT_FILE_INDEX = 0,
    BK_REPORT_FILE_EVAL = 1,
    BK_REPORT_FILE_EVAL_SLIDING = 2,
    BK_REPORT_FILE_METRICS = 3
} bk_report_file;
int bk_report_read_bytes(bk_report_file kind, const char *bytes, size_t size, bk_error *err);

#endif
