/* The report of a sweep, statistics over seeds (report_internal.h): the mean and sample standard
 * deviation of a table cell (a group, variant, protocol and length), and which runs a figure draws. */
#define _POSIX_C_SOURCE 200809L
#include "report/report_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const eval_point *rp_find_point(const eval_file *e, int32_t length)
{
    for (int i = 0; e->ok && i < e->n; i++)
        if (e->pts[i].length == length)
            return &e->pts[i];
    return NULL;
}

static void mean_std(const double *x, int n, double *mean, double *std)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += x[i];
    *mean = n ? s / n : NAN;
    if (n < 2) {
        *std = NAN;
        return;
    }
    double q = 0;
    for (int i = 0; i < n; i++)
        q += (x[i] - *mean) * (x[i] - *mean);
    *std = sqrt(q / (n - 1));
}

void rp_cell_stats(const report_ctx *c, int group, int variant, int proto, int32_t length, cell *out)
{
    memset(out, 0, sizeof *out);
    double *ppl = malloc((size_t)c->n_runs * sizeof *ppl), *loss = malloc((size_t)c->n_runs * sizeof *loss);
    size_t used = 0;
    for (int i = 0; ppl && loss && i < c->n_runs; i++) {
        const run_rec *r = &c->runs[i];
        const eval_point *pt;
        if (r->group != group || r->variant_index != variant || !(pt = rp_find_point(&r->ev[proto], length)))
            continue;
        ppl[out->n] = pt->ppl, loss[out->n] = pt->loss;
        out->n++;
        if (used < sizeof out->seeds)
            used += (size_t)snprintf(out->seeds + used, sizeof out->seeds - used, "%s%lld", used ? ";" : "", r->seed);
    }
    if (ppl && loss) {
        mean_std(ppl, out->n, &out->ppl_mean, &out->ppl_std);
        mean_std(loss, out->n, &out->loss_mean, &out->loss_std);
    } else
        out->n = 0, out->ppl_mean = out->ppl_std = out->loss_mean = out->loss_std = NAN;
    free(ppl), free(loss);
}

/* Whether any run of the group has results for the protocol. */
int rp_group_has_proto(const report_ctx *c, int group, int proto)
{
    for (int i = 0; i < c->n_runs; i++)
        if (c->runs[i].group == group && c->runs[i].ev[proto].ok)
            return 1;
    return 0;
}

int rp_group_has_variant(const report_ctx *c, int group, int variant)
{
    for (int i = 0; i < c->n_runs; i++)
        if (c->runs[i].group == group && c->runs[i].variant_index == variant)
            return 1;
    return 0;
}

/* The first seed of (group, variant) among the runs that finished: the run whose bias and mixing
 * weights are drawn. -1 when none finished. */
int rp_first_seed_run(const report_ctx *c, int group, int variant)
{
    int best = -1;
    for (int i = 0; i < c->n_runs; i++) {
        const run_rec *r = &c->runs[i];
        if (r->group != group || r->variant_index != variant || strcmp(r->state, "done") != 0)
            continue;
        if (best < 0 || r->seed < c->runs[best].seed)
            best = i;
    }
    return best;
}
