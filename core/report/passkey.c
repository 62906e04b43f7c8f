/* The report of a sweep, its passkey section (report_internal.h): the runs' passkey.json (biaskit passkey
 * --json, run by the sweep when its [eval] asks for passkey lengths) summed per corpus, grid point and
 * variant over the depths and the seeds that have one: a table of the exact-match accuracy by length
 * (and the digit accuracy), and per variant a heat map of the exact-match accuracy by length and depth. */
#define _POSIX_C_SOURCE 200809L
#include "report/report_internal.h"

#include "report/plot.h"
#include "sweep/sweep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PK_MAX_LENGTHS 64
#define PK_MAX_DEPTHS 16

/* One variant of one group: trials and correct answers per (length, depth) summed over its seeds. */
typedef struct pk_sum {
    int n_runs;
    double trials[PK_MAX_LENGTHS][PK_MAX_DEPTHS], correct[PK_MAX_LENGTHS][PK_MAX_DEPTHS], digits[PK_MAX_LENGTHS][PK_MAX_DEPTHS];
} pk_sum;

/* The grid of a group: the lengths and depths of the first passkey.json read (others' cells that are not
 * on it are not counted). */
typedef struct pk_grid {
    int n_lengths, n_depths;
    double lengths[PK_MAX_LENGTHS], depths[PK_MAX_DEPTHS];
} pk_grid;

static int find(const double *v, int n, double x)
{
    for (int i = 0; i < n; i++)
        if (v[i] == x)
            return i;
    return -1;
}

/* Adds run r's passkey.json to s (the grid set from it when empty); 0 when it has none or it is malformed
 * (a note then). */
static int add_run(report_ctx *c, const run_rec *r, pk_grid *g, pk_sum *s)
{
    char path[REPORT_PATH_MAX + 32], why[256];
    snprintf(path, sizeof path, "%s/" BK_SWEEP_PASSKEY_FILE, r->path);
    if (access(path, F_OK) != 0)
        return 0;
    cJSON *j = rp_read_json(path, "passkey file", why, sizeof why);
    const cJSON *res = j ? cJSON_GetObjectItemCaseSensitive(j, "results") : NULL;
    if (!cJSON_IsArray(res)) {
        rp_note(c, "run '%s': %s; its passkey grid is not reported", r->name, j ? "passkey.json has no results" : why);
        cJSON_Delete(j);
        return 0;
    }
    if (!g->n_lengths) {
        const cJSON *L = cJSON_GetObjectItemCaseSensitive(j, "lengths"), *D = cJSON_GetObjectItemCaseSensitive(j, "depths");
        const cJSON *e;
        cJSON_ArrayForEach(e, L) if (cJSON_IsNumber(e) && g->n_lengths < PK_MAX_LENGTHS) g->lengths[g->n_lengths++] = e->valuedouble;
        cJSON_ArrayForEach(e, D) if (cJSON_IsNumber(e) && g->n_depths < PK_MAX_DEPTHS) g->depths[g->n_depths++] = e->valuedouble;
    }
    const cJSON *e;
    int counted = 0;
    cJSON_ArrayForEach(e, res)
    {
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(e, "length"), *d = cJSON_GetObjectItemCaseSensitive(e, "depth");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "trials"), *k = cJSON_GetObjectItemCaseSensitive(e, "correct");
        const cJSON *da = cJSON_GetObjectItemCaseSensitive(e, "digit_accuracy");
        if (!cJSON_IsNumber(l) || !cJSON_IsNumber(d) || !cJSON_IsNumber(t) || !cJSON_IsNumber(k) || !cJSON_IsNumber(da))
            continue;
        const int li = find(g->lengths, g->n_lengths, l->valuedouble), di = find(g->depths, g->n_depths, d->valuedouble);
        if (li < 0 || di < 0)
            continue;
        s->trials[li][di] += t->valuedouble, s->correct[li][di] += k->valuedouble;
        s->digits[li][di] += da->valuedouble * t->valuedouble;
        counted = 1;
    }
    cJSON_Delete(j);
    s->n_runs += counted;
    return counted;
}

int rp_write_passkey(report_ctx *c, FILE *md, bk_error *err)
{
    int any = 0, rc = BK_OK;
    pk_sum *sums = calloc((size_t)(c->n_variants ? c->n_variants : 1), sizeof *sums);
    if (!sums)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the passkey grids");
    for (int g = 0; g < c->n_groups && !rc; g++) {
        pk_grid grid;
        memset(&grid, 0, sizeof grid);
        memset(sums, 0, (size_t)(c->n_variants ? c->n_variants : 1) * sizeof *sums);
        int have = 0;
        for (int i = 0; i < c->n_runs; i++)
            if (c->runs[i].group == g)
                have += add_run(c, &c->runs[i], &grid, &sums[c->runs[i].variant_index]);
        if (!have)
            continue;
        if (!any)
            fprintf(md, "## Passkey retrieval\n\nA 5-digit key hidden in filler text at each depth, asked for at the "
                        "end (`biaskit passkey`, teacher-forced exact match of every digit); a cell is the share of "
                        "trials answered exactly over every depth and seed, with the digit accuracy (chance: about 0.1) "
                        "and the number of seeds.\n\n");
        any = 1;
        if (c->n_groups > 1)
            rp_group_heading(c, md, g);
        fprintf(md, "| variant |");
        for (int l = 0; l < grid.n_lengths; l++)
            fprintf(md, " %g (%.3gx) |", grid.lengths[l], c->train_length > 0 ? grid.lengths[l] / (double)c->train_length : 0.0);
        fprintf(md, "\n|:--|");
        for (int l = 0; l < grid.n_lengths; l++)
            fprintf(md, "--:|");
        fprintf(md, "\n");
        for (int v = 0; v < c->n_variants; v++) {
            const pk_sum *s = &sums[v];
            if (!s->n_runs)
                continue;
            fprintf(md, "| ");
            rp_md_cell(md, c->variants[v]);
            fprintf(md, " |");
            for (int l = 0; l < grid.n_lengths; l++) {
                double t = 0, k = 0, dg = 0;
                for (int d = 0; d < grid.n_depths; d++)
                    t += s->trials[l][d], k += s->correct[l][d], dg += s->digits[l][d];
                if (t > 0)
                    fprintf(md, " %.2f (digits %.2f, n=%d) |", k / t, dg / t, s->n_runs);
                else
                    fprintf(md, " — |");
            }
            fprintf(md, "\n");
        }
        fprintf(md, "\n");
        for (int v = 0; v < c->n_variants && !rc; v++) {
            const pk_sum *s = &sums[v];
            if (!s->n_runs)
                continue;
            double z[PK_MAX_LENGTHS * PK_MAX_DEPTHS];
            for (int d = 0; d < grid.n_depths; d++)
                for (int l = 0; l < grid.n_lengths; l++)
                    z[d * grid.n_lengths + l] = s->trials[l][d] > 0 ? s->correct[l][d] / s->trials[l][d] : NAN;
            char base[300], name[340], png[REPORT_PATH_MAX + 400], title[600];
            snprintf(base, sizeof base, "passkey-%s-%s", c->groups[g].slug, c->variants[v]);
            if ((rc = rp_figure_name(c, base, name, sizeof name, err)))
                break;
            snprintf(png, sizeof png, "%s/%s.png", c->out_dir, name);
            snprintf(title, sizeof title, "Passkey retrieval of %.120s: exact match over %d seed%s", c->variants[v],
                     s->n_runs, s->n_runs == 1 ? "" : "s");
            const bk_heatmap h = {png, title, "length (tokens)", "depth of the key", "exact match", grid.lengths,
                                  grid.depths, z, grid.n_lengths, grid.n_depths, 0.0, 1.0};
            bk_error herr = {0};
            const int hr = bk_heatmap_write(&h, &herr);
            rp_figure_drawn(c, md, hr, &herr, name, "passkey retrieval by length and depth");
        }
    }
    free(sums);
    return rc;
}
