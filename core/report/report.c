/* The report of a sweep (report.h): read sweep.json and every run's status and evaluations (runs.c),
 * write report.md here, with its tables, results.csv and runs.csv (tables.c), and the figures drawn
 * through gnuplot (figures.c, plot.h); the pieces share report_internal.h. */
#define _POSIX_C_SOURCE 200809L
#include "report/report_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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
    fprintf(md, "- sweep: `%s`, directory `%s`\n", *c->sweep_name ? c->sweep_name : "(not named)", c->sweep_dir);
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
            fprintf(md, "%s`", k ? ", " : " (evaluated with ");
            rp_md_cell(md, first->eval_sets[k]);
            fprintf(md, "`%s", k + 1 == first->n_eval_sets ? ")" : "");
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
        rc = make_dirs(c->out_dir, err);
    }
    if (!rc)
        rc = rp_write_csvs(c, err);
    if (!rc)
        rc = write_report(c, err);
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
