/* The report of a sweep (report.h): read sweep.json and every run's status and evaluations (runs.c),
 * write report.md here, with its tables, results.csv and runs.csv (tables.c), and the figures drawn
 * through gnuplot (figures.c, plot.h); the pieces share report_internal.h. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "report/report_internal.h"

#include "util/file.h"
#include "util/path.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

char *rp_dup_text(const char *s)
{
    size_t n = strlen(s ? s : "") + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s ? s : "", n);
    return d;
}

void rp_note(report_ctx *c, const char *fmt, ...)
{
    char text[BK_ERROR_MESSAGE_MAX + 512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (c->o->log)
        fprintf(c->o->log, "biaskit report: warning: %s\n", text);
    char **more = realloc(c->notes, (size_t)(c->n_notes + 1) * sizeof *more);
    if (!more)
        return;
    c->notes = more;
    if ((c->notes[c->n_notes] = rp_dup_text(text)))
        c->n_notes++;
}

/* mkdir -p */
static int make_dirs(const char *dir, bk_error *err)
{
    char path[REPORT_PATH_MAX];
    bk_copy_text(path, sizeof path, dir);
    for (char *p = path + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(path, 0777) != 0 && errno != EEXIST)
                return bk_fail(err, BK_ERR_IO, "cannot create the report directory '%s': %s", path, strerror(errno));
            *p = saved;
            if (!saved)
                break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return bk_fail(err, BK_ERR_IO, "the report directory '%s' is not a directory", dir);
    return BK_OK;
}

/* ---- the report directory, written whole or not at all ---------------------------------------------
 * Everything is written into a hidden directory beside out_dir (".NAME.tmp-PID-XXXXXX"), which is renamed
 * over out_dir only when every file is written: an interrupted report or a full disk leaves the old report
 * as it was. The old one is moved aside (".NAME.old-PID-XXXXXX") for the rename and then removed. */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* rm -r, not following links */
static void remove_tree(const char *dir)
{
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* out_dir's parent (absolute) and base name */
static int split_out(const char *out, char *parent, size_t psize, char *base, size_t bsize, bk_error *err)
{
    char clean[REPORT_PATH_MAX];
    bk_copy_text(clean, sizeof clean, out);
    bk_path_clean(clean);
    const char *name = strrchr(clean, '/') ? strrchr(clean, '/') + 1 : clean;
    if (!*name || !strcmp(name, "..") || !strcmp(name, "."))
        return bk_fail(err, BK_ERR_USAGE, "the report directory '%s': expected a directory with a name of its own", out);
    bk_copy_text(base, bsize, name);
    return bk_path_dir_of(clean, parent, psize, err);
}

/* Staging directories left by a report that was killed (its process gone) are removed. */
static void remove_stale(const char *parent, const char *base)
{
    char prefix[REPORT_PATH_MAX];
    snprintf(prefix, sizeof prefix, ".%s.tmp-", base);
    DIR *d = opendir(parent);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long pid = 0;
        if (strncmp(e->d_name, prefix, strlen(prefix)) || sscanf(e->d_name + strlen(prefix), "%ld-", &pid) != 1 ||
            pid <= 0 || !(kill((pid_t)pid, 0) != 0 && errno == ESRCH))
            continue; /* not a staging directory, or its report still runs */
        char path[2 * REPORT_PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", parent, e->d_name);
        remove_tree(path);
    }
    if (d)
        closedir(d);
}

/* May out_dir be replaced by a report? Not the sweep's directory or one above it, not inside a run's
 * directory, and, when it exists and holds anything, a report directory already (its report.md). */
static int out_dir_check(report_ctx *c, const char *out, bk_error *err)
{
    if (bk_path_within(c->sweep_dir, out))
        return bk_fail(err, BK_ERR_USAGE, "the report directory '%s' holds the sweep directory '%s': a report "
                       "replaces its directory whole; give a directory of its own", out, c->sweep_dir);
    for (int i = 0; i < c->n_runs; i++)
        if (bk_path_within(out, c->runs[i].path))
            return bk_fail(err, BK_ERR_USAGE, "the report directory '%s' lies inside the directory of run '%s' "
                           "('%s'); give a directory outside the runs", out, c->runs[i].name, c->runs[i].path);
    struct stat st;
    if (lstat(out, &st) != 0)
        return errno == ENOENT ? BK_OK
                               : bk_fail(err, BK_ERR_IO, "the report directory '%s': %s", out, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return bk_fail(err, BK_ERR_USAGE, "the report directory '%s' is %s, not a directory (a symbolic link is "
                       "not replaced: name its target)", out, bk_file_kind(st.st_mode));
    DIR *d = opendir(out);
    if (!d)
        return bk_fail(err, BK_ERR_IO, "the report directory '%s': cannot read it: %s", out, strerror(errno));
    int empty = 1;
    struct dirent *e;
    while ((e = readdir(d)))
        empty &= !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    char md[REPORT_PATH_MAX + 16];
    snprintf(md, sizeof md, "%s/report.md", out);
    if (!empty && lstat(md, &st) != 0)
        return bk_fail(err, BK_ERR_USAGE, "the report directory '%s' holds files and no report.md: it is not a "
                       "report's directory, and a report replaces its directory whole; give a new or empty "
                       "directory, or a report's", out);
    return BK_OK;
}

static mode_t current_umask(void)
{
    const mode_t m = umask(0);
    umask(m);
    return m;
}

/* Makes the staging directory; c->out_dir becomes it. */
static int stage_begin(report_ctx *c, const char *out, char *staged, size_t size, bk_error *err)
{
    char parent[REPORT_PATH_MAX], base[256];
    int rc = out_dir_check(c, out, err);
    if (!rc)
        rc = split_out(out, parent, sizeof parent, base, sizeof base, err);
    if (!rc)
        rc = make_dirs(parent, err);
    if (rc)
        return rc;
    remove_stale(parent, base);
    if (snprintf(staged, size, "%s/.%s.tmp-%ld-XXXXXX", parent, base, (long)getpid()) >= (int)size)
        return bk_fail(err, BK_ERR_INVALID, "the report directory '%s': its path is too long (at most %zu bytes with its staging "
                       "name)", out, size - 1);
    if (!mkdtemp(staged))
        return bk_fail(err, BK_ERR_IO, "cannot create the report's staging directory '%s': %s", staged,
                       strerror(errno));
    chmod(staged, 0777 & ~current_umask()); /* as mkdir would make it */
    bk_copy_text(c->final_dir, sizeof c->final_dir, out);
    bk_copy_text(c->out_dir, sizeof c->out_dir, staged);
    return BK_OK;
}

/* The staged report renamed over `out`; on failure the old report is left where it was. */
static int stage_commit(const char *staged, const char *out, bk_error *err)
{
    char parent[REPORT_PATH_MAX], base[256], old[REPORT_PATH_MAX + 300];
    int rc = split_out(out, parent, sizeof parent, base, sizeof base, err);
    if (rc)
        return rc;
    struct stat st;
    int had_old = lstat(out, &st) == 0;
    if (had_old) {
        snprintf(old, sizeof old, "%s/.%s.old-%ld-XXXXXX", parent, base, (long)getpid());
        if (!mkdtemp(old) || rmdir(old) != 0 || rename(out, old) != 0)
            return bk_fail(err, BK_ERR_IO, "cannot move the old report '%s' aside: %s", out, strerror(errno));
    }
    if (rename(staged, out) != 0) {
        const int e = errno;
        if (had_old)
            rename(old, out);
        return bk_fail(err, BK_ERR_IO, "cannot rename the report '%s' to '%s': %s", staged, out, strerror(e));
    }
    if (had_old)
        remove_tree(old);
    return BK_OK;
}

static int write_report(report_ctx *c, bk_error *err)
{
    char path[REPORT_PATH_MAX + 32], tmp[REPORT_PATH_MAX + 48];
    snprintf(path, sizeof path, "%s/report.md", c->out_dir);
    snprintf(tmp, sizeof tmp, "%s/report.md.tmp", c->out_dir);
    bk_copy_text(c->sum->report, sizeof c->sum->report, path);
    FILE *md = fopen(tmp, "w");
    if (!md)
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    int rc = BK_OK;

    /* the summary */
    fprintf(md, "# Sweep report\n\n");
    fprintf(md, "- sweep: ");
    rp_md_code(md, *c->sweep_name ? c->sweep_name : "(not named)");
    fprintf(md, ", directory ");
    rp_md_code(md, c->sweep_dir);
    fprintf(md, "\n");
    fprintf(md, "- runs: %d; %d finished with every evaluation, %d failed, missing or incomplete%s\n", c->n_runs,
            c->sum->done, c->sum->problems, c->sum->problems ? " (listed below)" : "");
    fprintf(md, "- variants: ");
    for (int v = 0; v < c->n_variants; v++) {
        fprintf(md, "%s", v ? ", " : "");
        rp_md_cell(md, c->variants[v]);
        /* a variant evaluated with an eval_set: the same training as without it, evaluated with these */
        const run_rec *first = NULL;
        for (int i = 0; i < c->n_runs && !first; i++)
            if (c->runs[i].variant_index == v)
                first = &c->runs[i];
        for (int k = 0; first && k < first->n_eval_sets; k++) {
            fprintf(md, "%s", k ? ", " : " (evaluated with ");
            rp_md_code(md, first->eval_sets[k]);
            fprintf(md, "%s", k + 1 == first->n_eval_sets ? ")" : "");
        }
    }
    fprintf(md, "\n- training length: %lld tokens; evaluation lengths:", c->train_length);
    for (int l = 0; l < c->n_lengths; l++)
        fprintf(md, "%s %d", l ? "," : "", (int)c->lengths[l]);
    fprintf(md, "\n- protocols: non-overlapping chunks (every token scored)");
    if (c->sliding > 0)
        fprintf(md, "; sliding window, stride %lld (the last %lld tokens of each window scored)", c->sliding, c->sliding);
    time_t now = time(NULL);
    char date[64] = "";
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &tm);
    fprintf(md, "\n- perplexity cells: mean ± sample standard deviation over the seeds that finished, n seeds; "
                "— where none did\n- written by `biaskit report` on %s\n\n", date);

    rp_write_config(c, md);
    fprintf(md, "## Failed or missing runs\n\n");
    if (!c->sum->problems)
        fprintf(md, "None: every run finished and was evaluated.\n\n");
    else {
        fprintf(md, "| run | variant | corpus | seed | state | error |\n|:--|:--|:--|--:|:--|:--|\n");
        for (int i = 0; i < c->n_runs; i++) {
            const run_rec *r = &c->runs[i];
            if (!r->problem[0])
                continue;
            fprintf(md, "| ");
            rp_md_cell(md, r->name);
            fprintf(md, " | ");
            rp_md_cell(md, r->variant);
            fprintf(md, " | ");
            rp_md_cell(md, r->corpus);
            fprintf(md, " | %lld | ", r->seed);
            rp_md_cell(md, r->state);
            fprintf(md, " | ");
            rp_md_cell(md, r->problem);
            fprintf(md, " |\n");
        }
        fprintf(md, "\n");
    }

    /* (1) tables and perplexity curves */
    fprintf(md, "## Perplexity by evaluation length\n\n");
    for (int g = 0; g < c->n_groups && !rc; g++) {
        rp_group_heading(c, md, g);
        for (int p = 0; p < N_PROTO && !rc; p++) {
            if (p == PROTO_SLIDING && c->sliding <= 0)
                continue;
            if (p == PROTO_CHUNKS)
                fprintf(md, "Non-overlapping chunks:\n\n");
            else
                fprintf(md, "Sliding window, stride %lld:\n\n", c->sliding);
            rp_write_table(c, md, g, p);
            if (rp_group_has_proto(c, g, p))
                rc = rp_figure_ppl(c, md, g, p, err);
        }
    }

    /* (2) position-wise loss */
    if (!rc) {
        fprintf(md, "## Loss at each position at the longest length\n\n");
        int before = c->sum->figures + c->sum->undrawn + c->sum->figure_errors;
        for (int g = 0; g < c->n_groups && !rc; g++) {
            if (c->n_groups > 1)
                rp_group_heading(c, md, g);
            rc = rp_figure_positions(c, md, g, err);
        }
        if (!rc && before == c->sum->figures + c->sum->undrawn + c->sum->figure_errors)
            fprintf(md, "No evaluation has position-wise losses.\n\n");
    }

    /* passkey retrieval, when the sweep asked for it */
    if (!rc)
        rc = rp_write_passkey(c, md, err);

    /* (3) learned biases, (4) mixing weights */
    if (!rc) {
        fprintf(md, "## Learned biases\n\nEvery head's distance table T_h(d) as the attention adds it to its scores "
                    "(the mix of the stream's terms, after the 1/sqrt(d_head) scale), rebuilt from the checkpoint of "
                    "each variant's first seed, each head divided by its largest |value| (the divisor in the legend); a "
                    "dashed line marks the training length.\n\n");
        char *mix_text = NULL, *par_text = NULL;
        size_t mix_len = 0, par_len = 0;
        FILE *mix = open_memstream(&mix_text, &mix_len), *par = open_memstream(&par_text, &par_len);
        if (!mix || !par)
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the report");
        else
            rc = rp_figures_checkpoints(c, md, mix, par, err);
        if (((mix && fclose(mix) != 0) | (par && fclose(par) != 0)) && !rc)
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the report");
        if (!rc) {
            fprintf(md, "## Mixing weights over training\n\n");
            fwrite(mix_text, 1, mix_len, md);
            fprintf(md, "## Plugin parameters over training\n\nEach learned tensor of a term as metrics.jsonl "
                        "logged it (`term.<term>.<tensor>`, a curve per value: per head, and per layer and head "
                        "for a per-layer term), for each variant's first seed.\n\n");
            fwrite(par_text, 1, par_len, md);
        }
        free(mix_text), free(par_text);
    }

    if (!rc) {
        if (c->n_notes) {
            fprintf(md, "## Notes\n\n");
            for (int i = 0; i < c->n_notes; i++) {
                fprintf(md, "- ");
                rp_md_cell(md, c->notes[i]);
                fprintf(md, "\n");
            }
            fprintf(md, "\n");
        }
        fprintf(md, "## Files\n\n"
                    "- `results.csv`: one row per corpus, grid point, variant, protocol and length: "
                    "corpus, grid, variant, protocol, length, x_train (length / training length), n (seeds), "
                    "ppl_mean, ppl_std (sample; empty when n < 2), loss_mean, loss_std, seeds\n"
                    "- `runs.csv`: one row per run, protocol and length: run, variant, corpus, grid, seed, state, "
                    "protocol, length, loss, ppl, problem (a failed run has one row, with its error)\n"
                    "- every figure `NAME.png` comes with `NAME.pdf` (the same figure, vector; when gnuplot has "
                    "pdfcairo), `NAME.gp`, the gnuplot script that drew both, and `NAME.dat`, its data: edit the "
                    "script and run `gnuplot NAME.gp` to restyle it\n");
    }
    int werr = ferror(md);
    if (fclose(md) != 0 || werr) {
        remove(tmp);
        return rc ? rc : bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    }
    if (rc) {
        remove(tmp);
        return rc;
    }
    if (rename(tmp, path) != 0)
        return bk_fail(err, BK_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    return BK_OK;
}

static void ctx_free(report_ctx *c)
{
    for (int i = 0; i < c->n_runs; i++) {
        run_rec *r = &c->runs[i];
        free(r->name), free(r->dir), free(r->variant), free(r->corpus), free(r->grid), free(r->eval_set_json);
        for (int k = 0; k < r->n_eval_sets; k++)
            free(r->eval_sets[k]);
        free(r->eval_sets);
        for (int p = 0; p < N_PROTO; p++)
            rp_eval_file_free(&r->ev[p]);
    }
    free(c->runs), free(c->groups), free(c->variants), free(c->sweep_name);
    for (int i = 0; i < c->n_used; i++)
        free(c->used[i]);
    free(c->used);
    for (int i = 0; i < c->n_notes; i++)
        free(c->notes[i]);
    free(c->notes);
}

int bk_sweep_report(const bk_sweep_report_options *o, bk_sweep_report_summary *sum, bk_error *err)
{
    memset(sum, 0, sizeof *sum);
    if (!o || !o->sweep_dir || !*o->sweep_dir)
        return bk_fail(err, BK_ERR_USAGE, "report: no sweep directory given");
    report_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    c->o = o, c->sum = sum;
    bk_copy_text(c->sweep_dir, sizeof c->sweep_dir, o->sweep_dir);
    size_t n = strlen(c->sweep_dir);
    while (n > 1 && c->sweep_dir[n - 1] == '/')
        c->sweep_dir[--n] = '\0';
    int rc = rp_read_index(c, err);
    if (!rc) {
        if (o->out_dir && *o->out_dir)
            bk_copy_text(c->out_dir, sizeof c->out_dir, o->out_dir);
        else
            rc = rp_join_path(c->out_dir, sizeof c->out_dir, c->sweep_dir, BK_REPORT_DEFAULT_SUBDIR, err);
    }
    if (!rc) {
        bk_copy_text(sum->out_dir, sizeof sum->out_dir, c->out_dir);
        for (int i = 0; i < c->n_runs; i++)
            rp_read_run(c, &c->runs[i]);
        if (c->n_lengths == 0)
            rp_lengths_from_evals(c);
        if (c->train_length == 0) /* from an evaluation file, else unknown (no markers) */
            for (int i = 0; i < c->n_runs && !c->train_length; i++) {
                char path[REPORT_PATH_MAX + 32], why[256];
                snprintf(path, sizeof path, "%s/%s", c->runs[i].path, proto_file[PROTO_CHUNKS]);
                cJSON *j = c->runs[i].ev[PROTO_CHUNKS].ok ? rp_read_json(path, "evaluation file", why, sizeof why) : NULL;
                long long L;
                if (j && rp_json_int(cJSON_GetObjectItemCaseSensitive(j, "train_length"), 1, MAX_LENGTH, &L))
                    c->train_length = L;
                cJSON_Delete(j);
            }
        sum->runs = c->n_runs;
        for (int i = 0; i < c->n_runs; i++) {
            if (c->runs[i].problem[0])
                sum->problems++;
            else
                sum->done++;
        }
    }
    char out[REPORT_PATH_MAX], staged[REPORT_PATH_MAX + 300] = "";
    bk_copy_text(out, sizeof out, c->out_dir);
    if (!rc)
        rc = stage_begin(c, out, staged, sizeof staged, err);
    if (!rc)
        rc = rp_write_csvs(c, err);
    if (!rc)
        rc = write_report(c, err);
    if (!rc)
        rc = stage_commit(staged, out, err);
    else if (staged[0])
        remove_tree(staged);
    if (!rc) { /* the paths the summary gives are the report's, not the staging directory's */
        snprintf(sum->report, sizeof sum->report, "%.*s/report.md", (int)sizeof sum->report - 16, out);
        snprintf(sum->csv, sizeof sum->csv, "%.*s/results.csv", (int)sizeof sum->csv - 16, out);
    }
    ctx_free(c);
    free(c);
    return rc;
}

int bk_report_read_bytes(bk_report_file kind, const char *bytes, size_t size, bk_error *err)
{
    bk_error_clear(err);
    report_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    bk_sweep_report_options o = {"fuzz", NULL, NULL, 0.0};
    bk_sweep_report_summary sum;
    memset(&sum, 0, sizeof sum);
    c->o = &o, c->sum = &sum;
    bk_copy_text(c->sweep_dir, sizeof c->sweep_dir, "fuzz");
    bk_copy_text(c->index_path, sizeof c->index_path, "fuzz/sweep.json");
    int rc = BK_OK;
    char why[BK_ERROR_MESSAGE_MAX];
    if (kind == BK_REPORT_FILE_METRICS) {
        static const int n_on[BK_STREAM_COUNT] = {2, 1};
        mix_log m;
        if (rp_parse_mix_log(bytes, size, n_on, &m))
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory");
        else if (m.n > m.lines)
            rc = bk_fail(err, BK_ERR_INTERNAL, "metrics: %zu points from %zu lines", m.n, m.lines);
        for (size_t i = 1; !rc && i < m.n; i++)
            if (!(m.x[i] > m.x[i - 1])) /* the steps drawn increase */
                rc = bk_fail(err, BK_ERR_INTERNAL, "metrics: step %g after %g", m.x[i], m.x[i - 1]);
        rp_mix_log_free(&m);
    } else {
        cJSON *j = rp_parse_json(bytes, size, kind == BK_REPORT_FILE_INDEX ? "sweep.json" : "eval.json", why, sizeof why);
        if (!j)
            rc = bk_fail(err, BK_ERR_PARSE, "%s", why);
        else if (kind == BK_REPORT_FILE_INDEX) {
            rc = rp_parse_index(c, j, err);
            if (!rc && c->n_lengths == 0)
                rp_lengths_from_evals(c);
        } else {
            /* the evaluation of one run of a sweep at lengths 16, 32, 64 */
            static const int32_t lengths[] = {16, 32, 64};
            c->n_lengths = 3;
            memcpy(c->lengths, lengths, sizeof lengths);
            run_rec *r = c->runs = calloc(1, sizeof *c->runs);
            if (!r)
                rc = bk_fail(err, BK_ERR_NOMEM, "out of memory");
            else {
                c->n_runs = 1;
                int proto = kind == BK_REPORT_FILE_EVAL_SLIDING ? PROTO_SLIDING : PROTO_CHUNKS;
                rp_parse_eval(c, r, proto, j, "fuzz/run/eval.json");
                if (r->problem[0])
                    rc = bk_fail(err, BK_ERR_PARSE, "%s", r->problem);
                for (int k = 0; r->ev[proto].ok && k < r->ev[proto].n; k++) {
                    cell s;
                    rp_cell_stats(c, 0, 0, proto, r->ev[proto].pts[k].length, &s);
                }
            }
        }
        cJSON_Delete(j);
    }
    ctx_free(c);
    free(c);
    return rc;
}
