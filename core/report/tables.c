/* The report of a sweep, its tables (report_internal.h): Markdown cells and headings, the perplexity
 * table of report.md, and the numbers as CSV (results.csv, runs.csv). */
#define _POSIX_C_SOURCE 200809L
#include "report/report_internal.h"

#include "util/number.h"
#include "util/output.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Text for Markdown (a table cell or a line): '|' escaped, line breaks as spaces, and the characters that
 * start HTML or an entity as entities, so that a file name like "<script>" shows as text. */
void rp_md_cell(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else if (*s == '\n' || *s == '\r')
            fputc(' ', f);
        else if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else
            fputc(*s, f);
    }
}

void rp_md_code(FILE *f, const char *s)
{
    fputc('`', f);
    for (; s && *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else if (*s == '\n' || *s == '\r')
            fputc(' ', f);
        else if (*s == '`') /* would end the span */
            fputc('\'', f);
        else
            fputc(*s, f);
    }
    fputc('`', f);
}

static void csv_number(FILE *f, double v, const char *fmt)
{
    if (isfinite(v))
        fprintf(f, fmt, v);
}

/* "4x" for length / train length. */
static void ratio_text(long long length, long long train, char *out, size_t size)
{
    if (train <= 0) {
        out[0] = '\0';
        return;
    }
    double r = (double)length / (double)train;
    if (r == floor(r))
        snprintf(out, size, "%.0fx", r);
    else
        snprintf(out, size, "%.3gx", r);
}

void rp_group_heading(const report_ctx *c, FILE *md, int group)
{
    const group_rec *g = &c->groups[group];
    fprintf(md, "### Corpus ");
    rp_md_cell(md, *g->corpus ? g->corpus : "(none)");
    if (*g->grid) {
        fprintf(md, ", ");
        rp_md_cell(md, g->grid);
    }
    fprintf(md, "\n\n");
}

void rp_write_table(const report_ctx *c, FILE *md, int group, int proto)
{
    fprintf(md, "| variant |");
    for (int l = 0; l < c->n_lengths; l++) {
        char ratio[32];
        ratio_text(c->lengths[l], c->train_length, ratio, sizeof ratio);
        fprintf(md, " %d%s%s%s |", (int)c->lengths[l], *ratio ? " (" : "", ratio, *ratio ? ")" : "");
    }
    fprintf(md, "\n|:--|");
    for (int l = 0; l < c->n_lengths; l++)
        fprintf(md, "--:|");
    fprintf(md, "\n");
    for (int v = 0; v < c->n_variants; v++) {
        if (!rp_group_has_variant(c, group, v))
            continue;
        fprintf(md, "| ");
        rp_md_cell(md, c->variants[v]);
        fprintf(md, " |");
        for (int l = 0; l < c->n_lengths; l++) {
            cell s;
            rp_cell_stats(c, group, v, proto, c->lengths[l], &s);
            if (s.n == 0)
                fprintf(md, " — |");
            else {
                char mean[32], std[32];
                bk_number_text(s.ppl_mean, 2, mean, sizeof mean);
                if (s.n == 1)
                    fprintf(md, " %s (n=1) |", mean);
                else
                    fprintf(md, " %s ± %s (n=%d) |", mean, bk_number_text(s.ppl_std, 2, std, sizeof std), s.n);
            }
        }
        fprintf(md, "\n");
    }
    fprintf(md, "\n");
}

int rp_write_csvs(report_ctx *c, bk_error *err)
{
    char path[REPORT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/results.csv", c->out_dir);
    bk_copy_text(c->sum->csv, sizeof c->sum->csv, path);
    FILE *f = fopen(path, "w");
    if (!f)
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    fprintf(f, "corpus,grid,variant,protocol,length,x_train,n,ppl_mean,ppl_std,loss_mean,loss_std,seeds\n");
    for (int g = 0; g < c->n_groups; g++)
        for (int p = 0; p < N_PROTO; p++) {
            if (p == PROTO_SLIDING && c->sliding <= 0)
                continue;
            for (int v = 0; v < c->n_variants; v++) {
                if (!rp_group_has_variant(c, g, v))
                    continue;
                for (int l = 0; l < c->n_lengths; l++) {
                    cell s;
                    char ratio[32];
                    rp_cell_stats(c, g, v, p, c->lengths[l], &s);
                    ratio_text(c->lengths[l], c->train_length, ratio, sizeof ratio);
                    if (*ratio)
                        ratio[strlen(ratio) - 1] = '\0'; /* "4x" -> "4" */
                    bk_csv_field(f, c->groups[g].corpus);
                    fputc(',', f);
                    bk_csv_field(f, c->groups[g].grid);
                    fputc(',', f);
                    bk_csv_field(f, c->variants[v]);
                    fprintf(f, ",%s,%d,%s,%d,", proto_name[p], (int)c->lengths[l], ratio, s.n);
                    csv_number(f, s.ppl_mean, "%.6f");
                    fputc(',', f);
                    csv_number(f, s.ppl_std, "%.6f");
                    fputc(',', f);
                    csv_number(f, s.loss_mean, "%.6f");
                    fputc(',', f);
                    csv_number(f, s.loss_std, "%.6f");
                    fputc(',', f);
                    bk_csv_field(f, s.seeds);
                    fputc('\n', f);
                }
            }
        }
    if (ferror(f) | (fclose(f) != 0))
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", path, strerror(errno));

    snprintf(path, sizeof path, "%s/runs.csv", c->out_dir);
    if (!(f = fopen(path, "w")))
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    fprintf(f, "run,variant,corpus,grid,seed,state,protocol,length,loss,ppl,problem\n");
    for (int i = 0; i < c->n_runs; i++) {
        const run_rec *r = &c->runs[i];
        int rows = 0;
        for (int p = 0; p < N_PROTO; p++)
            for (int k = 0; r->ev[p].ok && k < r->ev[p].n; k++) {
                const eval_point *pt = &r->ev[p].pts[k];
                bk_csv_field(f, r->name), fputc(',', f), bk_csv_field(f, r->variant), fputc(',', f);
                bk_csv_field(f, r->corpus), fputc(',', f), bk_csv_field(f, r->grid);
                fprintf(f, ",%lld,", r->seed);
                bk_csv_field(f, r->state);
                fprintf(f, ",%s,%d,%.6f,%.6f,", proto_name[p], (int)pt->length, pt->loss, pt->ppl);
                bk_csv_field(f, r->problem);
                fputc('\n', f);
                rows++;
            }
        if (!rows) {
            bk_csv_field(f, r->name), fputc(',', f), bk_csv_field(f, r->variant), fputc(',', f);
            bk_csv_field(f, r->corpus), fputc(',', f), bk_csv_field(f, r->grid);
            fprintf(f, ",%lld,", r->seed);
            bk_csv_field(f, r->state);
            fprintf(f, ",,,,,");
            bk_csv_field(f, r->problem);
            fputc('\n', f);
        }
    }
    if (ferror(f) | (fclose(f) != 0))
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    return BK_OK;
}
