/* biaskit report, inside: what the files of core/report/ that write the report of a sweep (report.h)
 * share. Nothing here is part of the engine's interface; every function is prefixed rp_.
 *
 *   runs.c     reading the sweep directory: sweep.json, each run's status.json, eval.json and
 *              eval-sliding.json, its checkpoint's step, and the mixing weights of metrics.jsonl
 *   stats.c    statistics over seeds: a table cell's mean and sample standard deviation
 *   figures.c  the figures: their data built from the runs and their checkpoints, drawn by plot.c
 *   tables.c   Markdown tables and the CSV files
 *   config.c   the configuration section: setup, validation data per corpus, the variants' terms
 *   passkey.c  the passkey retrieval of the runs that have it: a table and heat maps
 *   report.c   the report itself (report.md) and the entry points of report.h */
#ifndef BK_REPORT_INTERNAL_H
#define BK_REPORT_INTERNAL_H

#include "report/report.h"

#include "config/experiment.h" /* BK_STREAM_COUNT */

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define REPORT_PATH_MAX 4096
#define MAX_LENGTH 16777216    /* the largest evaluation length `biaskit eval` accepts */
#define MAX_LENGTHS 256        /* evaluation lengths in a report (a sweep has at most 64) */

/* The evaluation protocols: the files a sweep writes and the "protocol" field inside them. */
enum { PROTO_CHUNKS = 0, PROTO_SLIDING = 1, N_PROTO = 2 };
static const char *const proto_file[N_PROTO] = {"eval.json", "eval-sliding.json"};
static const char *const proto_name[N_PROTO] = {"non-overlapping", "sliding"};

typedef struct eval_point {
    int32_t length;
    double loss, ppl;
    double *pos;   /* position-wise loss (length values), or NULL */
} eval_point;

typedef struct eval_file {
    int ok;
    eval_point *pts;
    int n;
    long long step; /* the checkpoint step it evaluated; -1 when the file gives none */
} eval_file;

typedef struct run_rec {
    char *name, *dir, *variant, *corpus, *grid; /* grid: "key=value, key=value" or "" */
    char **eval_sets;   /* the variant's eval_set (sweep.json): --set strings its evaluation was given */
    int n_eval_sets;
    char *eval_set_json; /* the same as unformatted JSON ("" when none), compared with status.json's */
    long long seed;
    char path[REPORT_PATH_MAX]; /* the run directory */
    char state[64];
    char problem[BK_ERROR_MESSAGE_MAX]; /* "" or why the run is listed as failed, missing or incomplete */
    int group, variant_index;
    eval_file ev[N_PROTO];
} run_rec;

typedef struct group_rec {
    const char *corpus, *grid; /* borrowed from the first run of the group */
    char slug[96];
} group_rec;

typedef struct report_ctx {
    const bk_sweep_report_options *o;
    bk_sweep_report_summary *sum;
    char sweep_dir[REPORT_PATH_MAX], index_path[REPORT_PATH_MAX + 16], out_dir[REPORT_PATH_MAX];
    char final_dir[REPORT_PATH_MAX]; /* where the report lands: out_dir is its staging directory until then */
    char *sweep_name;
    int32_t lengths[MAX_LENGTHS];
    int n_lengths;
    long long sliding, train_length;
    run_rec *runs;
    int n_runs;
    group_rec *groups;
    int n_groups;
    const char **variants;
    int n_variants;
    char **used;      /* figure names taken */
    int n_used;
    char **notes;     /* figure-level problems, listed at the end of the report */
    int n_notes;
    int warned_gnuplot;
} report_ctx;

/* report.c: a copy of `s` ("" for NULL); a note: a warning in the log, listed at the end of the report. */
char *rp_dup_text(const char *s);
void rp_note(report_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------------------------------------
 * runs.c: reading the sweep
 * ---------------------------------------------------------------------------------------------- */

int rp_join_path(char *out, size_t size, const char *dir, const char *name, bk_error *err);
cJSON *rp_parse_json(const char *text, size_t len, const char *name, char *why, size_t size);
cJSON *rp_read_json(const char *path, const char *what, char *why, size_t size);
int rp_json_int(const cJSON *v, double lo, double hi, long long *out);

/* sweep.json read (rp_read_index) or parsed (rp_parse_index): an error names the file and the field. */
int rp_read_index(report_ctx *c, bk_error *err);
int rp_parse_index(report_ctx *c, const cJSON *j, bk_error *err);
/* A run's status and evaluations; problems go to the run (its `problem`), never an error. */
void rp_read_run(report_ctx *c, run_rec *r);
void rp_parse_eval(report_ctx *c, run_rec *r, int proto, const cJSON *j, const char *path);
void rp_eval_file_free(eval_file *e);
void rp_lengths_from_evals(report_ctx *c);

/* The mixing weights of metrics.jsonl, one point per record that has "mix" and "step": x[i] the
 * step, y[k * lines + i] weight k (the streams' terms in order, offset[s] + j; NAN where missing). A
 * record whose step is not after the one before it (a training resumed from an earlier checkpoint
 * logs its steps again) replaces every earlier point from that step on: the curve is the last
 * training's, one point per step, steps increasing. */
typedef struct mix_log {
    size_t lines, n;   /* capacity (lines of the text), points */
    int total;         /* weights per point */
    double *x, *y;
    int bad;           /* lines malformed or with weights of another shape */
    int restarts;      /* records that went back in steps */
    long long first_restart; /* the step of the first of them */
} mix_log;

int rp_parse_mix_log(const char *text, size_t len, const int n_on[BK_STREAM_COUNT], mix_log *m);
void rp_mix_log_free(mix_log *m);

/* ------------------------------------------------------------------------------------------------
 * stats.c: statistics over seeds
 * ---------------------------------------------------------------------------------------------- */

typedef struct cell {
    int n;
    double ppl_mean, ppl_std, loss_mean, loss_std; /* std: sample standard deviation; NAN when n < 2 */
    char seeds[256];                               /* "1;2": the seeds that contribute */
} cell;

const eval_point *rp_find_point(const eval_file *e, int32_t length);
void rp_cell_stats(const report_ctx *c, int group, int variant, int proto, int32_t length, cell *out);
int rp_group_has_proto(const report_ctx *c, int group, int proto);
int rp_group_has_variant(const report_ctx *c, int group, int variant);
int rp_first_seed_run(const report_ctx *c, int group, int variant);

/* ------------------------------------------------------------------------------------------------
 * figures.c: the figures, each drawn and put in the report; a figure that fails is noted, never an
 * error (the errors returned are out of memory and the like)
 * ---------------------------------------------------------------------------------------------- */

void rp_slugify(const char *text, char *out, size_t size);
int rp_figure_ppl(report_ctx *c, FILE *md, int group, int proto, bk_error *err);
int rp_figure_positions(report_ctx *c, FILE *md, int group, bk_error *err);
int rp_figures_checkpoints(report_ctx *c, FILE *md, FILE *mix, FILE *params, bk_error *err);

/* ------------------------------------------------------------------------------------------------
 * tables.c: Markdown tables and CSV
 * ---------------------------------------------------------------------------------------------- */

void rp_md_cell(FILE *f, const char *s);
/* `s` as a Markdown code span (HTML in it is inert): backticks as "'", '|' escaped, line breaks as spaces. */
void rp_md_code(FILE *f, const char *s);

/* figures.c: a figure's name from `base` (slugified, made unique in the report: base-2, ...); after a figure
 * NAME was drawn (rc, e: its result), its lines in the report (image, script, data, PDF) and the counts of
 * the summary, or why it is missing. */
int rp_figure_name(report_ctx *c, const char *base, char *out, size_t size, bk_error *err);
void rp_figure_drawn(report_ctx *c, FILE *md, int rc, const bk_error *e, const char *name, const char *alt);

/* passkey.c: the passkey retrieval of the runs that have passkey.json (sweep [eval] passkey): per corpus
 * and grid point a table (exact-match accuracy by length, over depths and seeds) and a heat map per
 * variant; nothing when no run has one. */
int rp_write_passkey(report_ctx *c, FILE *md, bk_error *err);

/* config.c: the report's configuration section (the first run's setup, each corpus's validation data,
 * each variant's terms). */
void rp_write_config(report_ctx *c, FILE *md);
void rp_group_heading(const report_ctx *c, FILE *md, int group);
void rp_write_table(const report_ctx *c, FILE *md, int group, int proto);
int rp_write_csvs(report_ctx *c, bk_error *err);

#endif
