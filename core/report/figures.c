/* The report of a sweep, its figures (report_internal.h): perplexity vs evaluation length, the loss at
 * each position, every head's learned bias table rebuilt from a checkpoint and the mixing weights over
 * training, each built from the runs and drawn through gnuplot (plot.h) into the report. */
#define _POSIX_C_SOURCE 200809L
#include "report/report_internal.h"

#include "report/plot.h"
#include "plugin/services.h"
#include "train/checkpoint.h"
#include "train/rundir.h"
#include "util/file.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BIAS_POINTS 4096   /* distances drawn per head curve (evenly thinned beyond) */

/* Names of figure files: letters, digits, '.', '-' and '_' only. */
void rp_slugify(const char *text, char *out, size_t size)
{
    size_t n = 0;
    for (const char *p = text; *p && n + 1 < size; p++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                 ch == '-';
        if (!ok)
            ch = '_';
        if (ch == '_' && (n == 0 || out[n - 1] == '_'))
            continue;
        out[n++] = ch;
    }
    while (n > 0 && out[n - 1] == '_')
        n--;
    out[n] = '\0';
    if (n == 0)
        bk_copy_text(out, size, "x");
}

/* A figure name not used before in this report: `base`, else base-2, base-3, ... */
int rp_figure_name(report_ctx *c, const char *base, char *out, size_t size, bk_error *err)
{
    char slug[160];
    rp_slugify(base, slug, sizeof slug);
    for (int k = 1;; k++) {
        if (k == 1)
            snprintf(out, size, "%s", slug);
        else
            snprintf(out, size, "%s-%d", slug, k);
        int taken = 0;
        for (int i = 0; i < c->n_used && !taken; i++)
            taken = strcmp(c->used[i], out) == 0;
        if (!taken)
            break;
    }
    char **more = realloc(c->used, (size_t)(c->n_used + 1) * sizeof *more);
    if (!more || !(more[c->n_used] = rp_dup_text(out))) {
        if (more)
            c->used = more;
        return bk_fail(err, BK_ERR_NOMEM, "out of memory naming a figure");
    }
    c->used = more;
    c->n_used++;
    return BK_OK;
}

/* Draw `p` (its png set from `name`) and put it in the report; a failure is noted, never fatal. */
static void figure(report_ctx *c, FILE *md, bk_plot *p, const bk_plot_marks *m, const char *name, const char *alt)
{
    char png[REPORT_PATH_MAX + 160];
    bk_error err = {0};
    int rc = BK_OK;
    if (snprintf(png, sizeof png, "%s/%s.png", c->out_dir, name) >= (int)sizeof png)
        rc = bk_fail(&err, BK_ERR_INVALID, "the figure's path %s/%s.png is longer than %zu bytes", c->out_dir, name,
                     sizeof png - 1);
    if (rc == BK_OK) {
        p->png = png;
        rc = bk_plot_write_marked(p, m, &err);
    }
    rp_figure_drawn(c, md, rc, &err, name, alt);
}

void rp_figure_drawn(report_ctx *c, FILE *md, int rc, const bk_error *e, const char *name, const char *alt)
{
    char pdf[REPORT_PATH_MAX + 160];
    if (snprintf(pdf, sizeof pdf, "%s/%s.pdf", c->out_dir, name) >= (int)sizeof pdf)
        pdf[0] = '\0'; /* too long to be there: no link */
    /* a message names the report's files where they will be, not in the staging directory */
    bk_error err = *e;
    const size_t staged = strlen(c->out_dir);
    char *at = c->final_dir[0] && staged ? strstr(err.message, c->out_dir) : NULL;
    for (int k = 0; at && k < 8; k++, at = strstr(at + strlen(c->final_dir), c->out_dir)) {
        char rest[sizeof err.message];
        bk_copy_text(rest, sizeof rest, at + staged);
        snprintf(at, sizeof err.message - (size_t)(at - err.message), "%s%s", c->final_dir, rest);
    }
    if (rc == BK_OK) {
        c->sum->figures++;
        fprintf(md, "![%s](%s.png)\n\n<sub>drawn by [%s.gp](%s.gp) from [%s.dat](%s.dat)", alt, name, name, name, name,
                name);
        bk_error none;
        if (bk_file_check_regular(pdf, "figure", &none) == BK_OK)
            fprintf(md, "; [PDF](%s.pdf)", name);
        fprintf(md, "</sub>\n\n");
    } else if (rc == BK_ERR_UNSUPPORTED) {
        c->sum->undrawn++;
        if (!c->warned_gnuplot && c->o->log)
            fprintf(c->o->log, "biaskit report: warning: %s; the other figures likewise\n", err.message);
        c->warned_gnuplot = 1;
        fprintf(md, "*Figure not drawn (gnuplot is not installed): install gnuplot-nox, then run `gnuplot %s.gp` "
                    "here; its data is %s.dat.*\n\n", name, name);
    } else {
        c->sum->figure_errors++;
        if (!c->sum->first_figure_error[0])
            bk_copy_text(c->sum->first_figure_error, sizeof c->sum->first_figure_error, err.message);
        rp_note(c, "figure %s.png: %s", name, err.message);
        fprintf(md, "*Figure %s.png could not be drawn: ", name);
        rp_md_cell(md, err.message);
        fprintf(md, "*\n\n");
    }
}

/* ": corpus X, key=value" for a figure title; "" when the group has neither. */
static void group_label(const group_rec *g, char *out, size_t size)
{
    if (*g->corpus && *g->grid)
        snprintf(out, size, ": corpus %s, %s", g->corpus, g->grid);
    else if (*g->corpus)
        snprintf(out, size, ": corpus %s", g->corpus);
    else if (*g->grid)
        snprintf(out, size, ": %s", g->grid);
    else
        out[0] = '\0';
}

/* What a figure's title starts with: the sweep file's name without its directory and ".toml" (sweep.json's
 * "sweep"), else the sweep directory's name. */
static const char *sweep_title(const report_ctx *c)
{
    static _Thread_local char name[128];
    const char *from = c->sweep_name && *c->sweep_name ? c->sweep_name : c->sweep_dir;
    const char *slash = strrchr(from, '/');
    snprintf(name, sizeof name, "%.120s", slash && slash[1] ? slash + 1 : from);
    const size_t n = strlen(name);
    if (n > 5 && !strcmp(name + n - 5, ".toml"))
        name[n - 5] = '\0';
    return name;
}

/* The training length as a marked x (a thin grey dashed line, not a legend entry); none when unknown or
 * outside [lo, hi] of the x axis. */
static bk_plot_marks train_marks(const report_ctx *c, double lo, double hi, const bk_plot_band *bands, char *label,
                                 size_t size)
{
    bk_plot_marks m;
    memset(&m, 0, sizeof m);
    m.bands = bands;
    if (c->train_length > 0 && (double)c->train_length >= lo && (double)c->train_length <= hi) {
        snprintf(label, size, "training length %lld", c->train_length);
        m.vline = (double)c->train_length, m.vline_label = label;
    }
    return m;
}

/* The most series a perplexity figure splits into panels (more: one panel, colours repeat). */
#define PPL_MAX_SERIES 64
/* Series per panel before a figure is split by family. */
#define PPL_PANEL_SERIES 16

/* The panels of a perplexity figure (report.h's clip; docs/reports.md): outliers, a variant whose
 * perplexity somewhere exceeds clip x the median of the variants' at the longest length, in a panel of
 * their own; and beyond 16 series one panel per family (the variant's name up to its first '-').
 * Returns the number of panels (1: none), panel[k] of series k and each panel's title. */
static int ppl_panels(const report_ctx *c, const bk_plot_series *series, int ns, int nl, int *panel,
                      char (*titles)[96])
{
    double sorted[PPL_MAX_SERIES];
    int n_last = 0, outlier[PPL_MAX_SERIES] = {0}, any_outlier = 0;
    for (int k = 0; k < ns; k++)
        if (isfinite(series[k].y[nl - 1]))
            sorted[n_last++] = series[k].y[nl - 1];
    if (c->o->clip > 1.0 && n_last > 0) {
        for (int i = 1; i < n_last; i++) /* insertion sort: a few dozen values */
            for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
                const double t = sorted[j];
                sorted[j] = sorted[j - 1], sorted[j - 1] = t;
            }
        const double median = n_last % 2 ? sorted[n_last / 2] : 0.5 * (sorted[n_last / 2 - 1] + sorted[n_last / 2]);
        for (int k = 0; k < ns; k++)
            for (int l = 0; l < nl; l++)
                if (isfinite(series[k].y[l]) && series[k].y[l] > c->o->clip * median)
                    outlier[k] = 1;
        for (int k = 0; k < ns; k++)
            any_outlier |= outlier[k];
    }
    int n = 0;
    if (ns > PPL_PANEL_SERIES) { /* families, in the order they first appear */
        for (int k = 0; k < ns; k++) {
            if (outlier[k])
                continue;
            const char *v = series[k].title;
            const size_t len = strcspn(v, "- (");
            int found = -1;
            for (int q = 0; q < n && found < 0; q++)
                if (strlen(titles[q]) == len && !strncmp(titles[q], v, len))
                    found = q;
            if (found < 0) {
                snprintf(titles[n], sizeof titles[n], "%.*s", (int)(len < 90 ? len : 90), v);
                found = n++;
            }
            panel[k] = found;
        }
    } else if (any_outlier) {
        snprintf(titles[n++], sizeof titles[0], "within %g x the median at the longest length", c->o->clip);
        for (int k = 0; k < ns; k++)
            panel[k] = 0;
    }
    if (any_outlier) {
        snprintf(titles[n], sizeof titles[0], "outliers: above %g x the median at the longest length", c->o->clip);
        for (int k = 0; k < ns; k++)
            if (outlier[k])
                panel[k] = n;
        n++;
    }
    return n > 1 ? n : 1;
}

/* (1) perplexity vs evaluation length for one group and protocol: a line per variant, the mean over seeds
 * with a band of -/+ one standard deviation where there are two seeds or more. */
int rp_figure_ppl(report_ctx *c, FILE *md, int group, int proto, bk_error *err)
{
    int nv = c->n_variants, nl = c->n_lengths;
    bk_plot_series *series = calloc((size_t)nv + 1, sizeof *series);
    bk_plot_band *bands = calloc((size_t)nv + 1, sizeof *bands);
    double *x = calloc((size_t)nl + 2, sizeof *x), *y = calloc((size_t)(nv * nl) + 2, sizeof *y);
    double *blo = calloc((size_t)(nv * nl) + 2, sizeof *blo), *bhi = calloc((size_t)(nv * nl) + 2, sizeof *bhi);
    char(*titles)[256] = calloc((size_t)nv + 1, sizeof *titles);
    if (!series || !bands || !x || !y || !blo || !bhi || !titles) {
        free(series), free(bands), free(x), free(y), free(blo), free(bhi), free(titles);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for a figure");
    }
    for (int l = 0; l < nl; l++)
        x[l] = c->lengths[l];
    int ns = 0, any_band = 0;
    for (int v = 0; v < nv; v++) {
        if (!rp_group_has_variant(c, group, v))
            continue;
        int n_min = 1 << 30, n_max = 0;
        for (int l = 0; l < nl; l++) {
            cell s;
            rp_cell_stats(c, group, v, proto, c->lengths[l], &s);
            y[v * nl + l] = s.n ? s.ppl_mean : NAN;
            blo[v * nl + l] = s.n > 1 ? s.ppl_mean - s.ppl_std : NAN;
            bhi[v * nl + l] = s.n > 1 ? s.ppl_mean + s.ppl_std : NAN;
            if (s.n) {
                n_min = s.n < n_min ? s.n : n_min;
                n_max = s.n > n_max ? s.n : n_max;
            }
        }
        if (n_max == 0)
            continue;
        if (n_min == n_max)
            snprintf(titles[ns], sizeof titles[ns], "%s (n=%d)", c->variants[v], n_max);
        else
            snprintf(titles[ns], sizeof titles[ns], "%s (n=%d-%d)", c->variants[v], n_min, n_max);
        series[ns] = (bk_plot_series){titles[ns], x, y + v * nl, (size_t)nl};
        if (n_max > 1)
            bands[ns] = (bk_plot_band){blo + v * nl, bhi + v * nl}, any_band = 1;
        ns++;
    }
    int rc = BK_OK;
    if (ns > 0) {
        char title[1400], name[200], base[160], marker[64];
        bk_plot_marks m = train_marks(c, x[0], x[nl - 1], any_band ? bands : NULL, marker, sizeof marker);
        int panel[PPL_MAX_SERIES];
        char ptitles[PPL_MAX_SERIES][96];
        const char *pt[PPL_MAX_SERIES];
        if (ns <= PPL_MAX_SERIES && (m.n_panels = ppl_panels(c, series, ns, nl, panel, ptitles)) > 1) {
            for (int k = 0; k < m.n_panels; k++)
                pt[k] = ptitles[k];
            m.panel = panel, m.panel_titles = pt;
        }
        const group_rec *g = &c->groups[group];
        char label[700];
        group_label(g, label, sizeof label);
        snprintf(title, sizeof title, "%.120s: perplexity vs evaluation length (%s)%s%s", sweep_title(c),
                 proto == PROTO_CHUNKS ? "non-overlapping" : "sliding", label,
                 any_band ? "; mean over seeds, band -/+ 1 std" : "");
        snprintf(base, sizeof base, "ppl-%s%s", g->slug, proto == PROTO_SLIDING ? "-sliding" : "");
        rc = rp_figure_name(c, base, name, sizeof name, err);
        if (!rc) {
            bk_plot p = {NULL, title, "evaluation length (tokens)", "perplexity per token (log scale)", 1, 1, series, ns,
                         1};
            figure(c, md, &p, &m, name, "perplexity vs evaluation length");
        }
    }
    free(series), free(bands), free(x), free(y), free(blo), free(bhi), free(titles);
    return rc;
}

/* (2) loss at each position at the longest length with position-wise losses, a line per variant
 * (mean over seeds; a centred moving average when the length is long). */
int rp_figure_positions(report_ctx *c, FILE *md, int group, bk_error *err)
{
    int32_t L = 0;
    for (int i = 0; i < c->n_runs; i++) {
        const run_rec *r = &c->runs[i];
        if (r->group != group)
            continue;
        for (int k = 0; r->ev[PROTO_CHUNKS].ok && k < r->ev[PROTO_CHUNKS].n; k++)
            if (r->ev[PROTO_CHUNKS].pts[k].pos && r->ev[PROTO_CHUNKS].pts[k].length > L)
                L = r->ev[PROTO_CHUNKS].pts[k].length;
    }
    if (L == 0)
        return BK_OK;
    /* log-spaced bins of the positions 1 .. L (x on a log axis): every position up to 16, then bins
     * 2^(1/8) wide; a bin's value is the mean of its positions' losses, its x their geometric centre */
    int32_t *edge = malloc(((size_t)L + 2) * sizeof *edge);
    int nb = 0;
    if (edge) {
        edge[nb++] = 0; /* bin k holds the positions edge[k] .. edge[k + 1] - 1 (0-based) */
        for (int32_t at = 0; at < L;) {
            int32_t next = at < 16 ? at + 1 : (int32_t)ceil((double)(at + 1) * pow(2.0, 1.0 / 8.0)) - 1;
            next = next <= at ? at + 1 : next > L ? L : next;
            edge[nb++] = next, at = next;
        }
        nb--; /* bins, not edges */
    }
    int nv = c->n_variants;
    bk_plot_series *series = calloc((size_t)nv + 1, sizeof *series);
    double *x = malloc(((size_t)nb + 1) * sizeof *x), *y = malloc((size_t)nv * ((size_t)nb + 1) * sizeof *y);
    double *mean = malloc((size_t)L * sizeof *mean);
    int *count = malloc((size_t)L * sizeof *count);
    char(*titles)[256] = calloc((size_t)nv + 1, sizeof *titles);
    int rc = BK_OK;
    if (!edge || !series || !x || !y || !mean || !count || !titles) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the position-wise loss of length %d", (int)L);
        goto done;
    }
    for (int k = 0; k < nb; k++) /* positions are 1-based on the axis */
        x[k] = sqrt((double)(edge[k] + 1) * (double)edge[k + 1]);
    int ns = 0;
    for (int v = 0; v < nv; v++) {
        memset(mean, 0, (size_t)L * sizeof *mean);
        memset(count, 0, (size_t)L * sizeof *count);
        int n = 0;
        for (int i = 0; i < c->n_runs; i++) {
            const run_rec *r = &c->runs[i];
            const eval_point *pt;
            if (r->group != group || r->variant_index != v || !(pt = rp_find_point(&r->ev[PROTO_CHUNKS], L)) || !pt->pos)
                continue;
            n++;
            for (int32_t t = 0; t < L; t++)
                if (isfinite(pt->pos[t]))
                    mean[t] += pt->pos[t], count[t]++;
        }
        if (!n)
            continue;
        double *yv = y + (size_t)v * (size_t)nb;
        for (int k = 0; k < nb; k++) {
            double sum = 0;
            int m = 0;
            for (int32_t t = edge[k]; t < edge[k + 1]; t++)
                if (count[t])
                    sum += mean[t] / count[t], m++;
            yv[k] = m ? sum / m : NAN;
        }
        snprintf(titles[ns], sizeof titles[ns], "%s (n=%d)", c->variants[v], n);
        series[ns] = (bk_plot_series){titles[ns], x, yv, (size_t)nb};
        ns++;
    }
    if (ns > 0) {
        char title[1400], name[200], base[160], marker[64];
        const bk_plot_marks m = train_marks(c, 1.0, (double)L, NULL, marker, sizeof marker);
        const group_rec *g = &c->groups[group];
        char label[700];
        group_label(g, label, sizeof label);
        snprintf(title, sizeof title, "%.120s: loss at each position, length %d, mean over seeds%s", sweep_title(c), (int)L,
                 label);
        snprintf(base, sizeof base, "position-loss-%s", g->slug);
        if (!(rc = rp_figure_name(c, base, name, sizeof name, err))) {
            fprintf(md, "Length %d (non-overlapping chunks; the loss at each position averaged over the chunks, "
                        "then over seeds, then over log-spaced bins of positions: each position up to 16, then "
                        "bins 2^(1/8) wide):\n\n", (int)L);
            bk_plot p = {NULL, title, "position in the sequence (log scale)", "loss (nats)", 1, 0, series, ns, 0};
            figure(c, md, &p, &m, name, "loss at each position");
        }
    }
done:
    free(edge), free(series), free(x), free(y), free(mean), free(count), free(titles);
    return rc;
}

typedef struct warn_ctx {
    report_ctx *c;
    const run_rec *run;
} warn_ctx;

static void on_checkpoint_warning(void *ctx, const char *message)
{
    warn_ctx *w = ctx;
    /* a plugin option its variant's eval_set changes is what the sweep asked for: no note */
    for (int k = 0; k < w->run->n_eval_sets; k++) {
        const char *at = strstr(message, "--set ");
        size_t n = strlen(w->run->eval_sets[k]);
        for (; at; at = strstr(at + 1, "--set "))
            if (strncmp(at + 6, w->run->eval_sets[k], n) == 0 && strncmp(at + 6 + n, " changes ", 9) == 0)
                return;
    }
    rp_note(w->c, "run '%s': checkpoint: %s", w->run->name, message);
}

/* (3) every head's mixed table T_h(d) of the run's checkpoint, per stream (and per layer when a term
 * of the stream has per-layer parameters). */
static int figures_bias(report_ctx *c, FILE *md, const run_rec *r, const bk_lm *lm, bk_error *err)
{
    const bk_term_set *set = &lm->terms;
    int32_t D = 0;
    for (int i = 0; i < c->n_lengths; i++)
        D = c->lengths[i] > D ? c->lengths[i] : D;
    if (c->train_length > D)
        D = (int32_t)c->train_length;
    if (D < 2)
        D = (int32_t)lm->exp.train.length;
    int32_t H = set->geometry.n_heads;
    int32_t stride = D > MAX_BIAS_POINTS ? (D + MAX_BIAS_POINTS - 1) / MAX_BIAS_POINTS : 1;
    size_t npts = (size_t)((D + stride - 1) / stride);
    float *table = malloc((size_t)H * (size_t)D * sizeof *table);
    double *x = malloc(npts * sizeof *x), *y = malloc((size_t)H * npts * sizeof *y);
    bk_plot_series *series = calloc((size_t)H + 1, sizeof *series);
    char(*titles)[64] = calloc((size_t)H + 1, sizeof *titles);
    int rc = BK_OK, drawn = 0;
    if (!table || !x || !y || !series || !titles) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the tables of run '%s' (%d heads x %d distances)", r->name,
                     (int)H, (int)D);
        goto done;
    }
    for (size_t i = 0; i < npts; i++)
        x[i] = (double)((int64_t)i * stride);
    for (int s = 0; s < BK_STREAM_COUNT && !rc; s++) {
        int n_terms = 0, per_layer = 0, learned = 0;
        char members[512] = "";
        size_t used = 0;
        for (int t = 0; t < set->n; t++) {
            const bk_term *term = &set->terms[t];
            if ((int)term->stream != s || !bk_term_has_table(term))
                continue;
            n_terms++;
            per_layer |= term->per_layer;
            learned |= term->n_params > 0;
            if (used < sizeof members)
                used += (size_t)snprintf(members + used, sizeof members - used, "%s%s", used ? " + " : "", term->label);
        }
        if (!n_terms)
            continue;
        char stream[16];
        bk_choice_name(BK_STREAM_CHOICES, s, stream, sizeof stream);
        int layers = per_layer ? lm->gpt.L : 1;
        for (int layer = 0; layer < layers && !rc; layer++) {
            int got;
            bk_error terr = {0};
            if (bk_terms_mixed_table(set, layer, (bk_stream)s, D, table, &got, &terr)) {
                rp_note(c, "run '%s': the %s-stream table of layer %d cannot be computed: %s", r->name, stream, layer,
                     terr.message);
                continue;
            }
            /* each head divided by its largest |T_h(d)|, the divisor in its legend entry: one steep head
             * does not flatten the others */
            for (int32_t h = 0; h < H; h++) {
                double big = 0.0;
                for (size_t i = 0; i < npts; i++) {
                    const double v = table[(size_t)h * (size_t)D + i * (size_t)stride];
                    big = isfinite(v) && fabs(v) > big ? fabs(v) : big;
                }
                for (size_t i = 0; i < npts; i++) {
                    const double v = table[(size_t)h * (size_t)D + i * (size_t)stride];
                    y[(size_t)h * npts + i] = big > 0.0 ? v / big : v;
                }
                snprintf(titles[h], sizeof titles[h], "head %d (/ %.3g)", (int)h, big > 0.0 ? big : 1.0);
                series[h] = (bk_plot_series){titles[h], x, y + (size_t)h * npts, npts};
            }
            int ns = H;
            char marker[64], title[2000], base[300], name[340], where[96] = "";
            const bk_plot_marks m = train_marks(c, 0.0, (double)(D - 1), NULL, marker, sizeof marker);
            if (per_layer)
                snprintf(where, sizeof where, ", layer %d", layer);
            char label[700];
            group_label(&c->groups[r->group], label, sizeof label);
            snprintf(title, sizeof title, "%.120s: %s bias T_h(d) of %s (seed %lld%s%s): %s on the %s stream%s",
                     sweep_title(c), learned ? "learned" : "fixed", r->variant, r->seed, label[0] ? "," : "",
                     label[0] ? label + 1 : "", members, stream, where);
            snprintf(base, sizeof base, "bias-%s-%s%s%s%s", c->groups[r->group].slug, r->variant,
                     s == BK_STREAM_TOKEN ? "" : "-", s == BK_STREAM_TOKEN ? "" : stream, per_layer ? "-layer" : "");
            if (per_layer)
                snprintf(base + strlen(base), sizeof base - strlen(base), "%d", layer);
            if ((rc = rp_figure_name(c, base, name, sizeof name, err)))
                break;
            if (!drawn)
                fprintf(md, "**%s** (run `%s`, seed %lld): %s, distances 0 to %d%s.\n\n", r->variant, r->name, r->seed,
                        members, (int)D - 1, stride > 1 ? " (every few distances drawn)" : "");
            bk_plot p = {NULL, title, "distance d = i - j", "bias / its largest |value| (each head)", 0, 0, series, ns,
                         0};
            figure(c, md, &p, &m, name, learned ? "learned bias per head" : "fixed bias per head");
            drawn++;
        }
    }
    if (!rc && !drawn)
        fprintf(md, "**%s** (run `%s`): no distance table (its positional terms act on the embeddings or on q and k, "
                    "or there are none).\n\n", r->variant, r->name);
done:
    free(table), free(x), free(y), free(series), free(titles);
    return rc;
}

/* Run r's metrics.jsonl (its path into path), or NULL with a note that `what` is not drawn. */
static char *read_metrics(report_ctx *c, const run_rec *r, const char *what, char *path, size_t size, size_t *len)
{
    snprintf(path, size, "%s/" BK_RUN_METRICS_FILE, r->path);
    char *text = NULL;
    bk_error rerr;
    if (bk_file_read_all(path, "metrics file", BK_JSONL_FILE_MAX, &text, len, &rerr)) {
        rp_note(c, "run '%s': %s; its %s are not drawn", r->name, rerr.message, what);
        return NULL;
    }
    return text;
}

/* (4) the learned mixing weights over training, from the "mix" objects of metrics.jsonl. */
static int figure_mix(report_ctx *c, FILE *md, const run_rec *r, const bk_lm *lm, bk_error *err)
{
    char path[REPORT_PATH_MAX + 32];
    size_t len = 0;
    char *text = read_metrics(c, r, "mixing weights", path, sizeof path, &len);
    if (!text)
        return BK_OK;
    const bk_bias *b = &lm->bias;
    mix_log m;
    int total = 0;
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        total += b->n_on[s];
    bk_plot_series *series = calloc((size_t)(total ? total : 1), sizeof *series);
    char(*titles)[128] = calloc((size_t)(total ? total : 1), sizeof *titles);
    int rc = BK_OK;
    if (rp_parse_mix_log(text, len, b->n_on, &m) || !series || !titles) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory reading '%s'", path);
        goto done;
    }
    size_t n = m.n, lines = m.lines;
    double *x = m.x, *y = m.y;
    int offset[BK_STREAM_COUNT];
    for (int s = 0, o = 0; s < BK_STREAM_COUNT; s++)
        offset[s] = o, o += b->n_on[s];
    if (m.bad)
        rp_note(c, "run '%s': %s: %d line%s malformed or with mixing weights of another shape than the checkpoint's "
             "terms; skipped", r->name, path, m.bad, m.bad == 1 ? "" : "s");
    if (m.restarts)
        rp_note(c, "run '%s': %s: steps logged again from step %lld%s (a training resumed from an earlier checkpoint): the "
             "records of the last training are drawn, each step once", r->name, path, m.first_restart,
             m.restarts > 1 ? " and later" : "");
    if (n == 0) {
        fprintf(md, "**%s** (run `%s`): metrics.jsonl has no mixing weights (trained by a biaskit that did not log "
                    "them).\n\n", r->variant, r->name);
        goto done;
    }
    int streams_used = 0;
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        streams_used += b->n_on[s] > 0;
    int ns = 0;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        char stream[16];
        bk_choice_name(BK_STREAM_CHOICES, s, stream, sizeof stream);
        for (int k = 0; k < b->n_on[s]; k++) {
            const bk_term *t = &lm->terms.terms[b->on[s][k]];
            if (streams_used > 1)
                snprintf(titles[ns], sizeof titles[ns], "%s: %s", stream, t->label);
            else
                snprintf(titles[ns], sizeof titles[ns], "%s", t->label);
            series[ns] = (bk_plot_series){titles[ns], x, y + (size_t)(offset[s] + k) * lines, n};
            ns++;
        }
    }
    char mixing[16], title[1400], base[300], name[340];
    bk_choice_name(BK_MIXING_CHOICES, lm->exp.attention.mixing, mixing, sizeof mixing);
    char label[700];
    group_label(&c->groups[r->group], label, sizeof label);
    snprintf(title, sizeof title, "Mixing weights over training (%s mixing): %s, seed %lld%s%s", mixing, r->variant,
             r->seed, label[0] ? "," : "", label[0] ? label + 1 : "");
    snprintf(base, sizeof base, "mix-%s-%s", c->groups[r->group].slug, r->variant);
    if (!(rc = rp_figure_name(c, base, name, sizeof name, err))) {
        fprintf(md, "**%s** (run `%s`, seed %lld), %s mixing:\n\n", r->variant, r->name, r->seed, mixing);
        bk_plot p = {NULL, title, "training step", "weight", 0, 0, series, ns, n <= 30};
        figure(c, md, &p, NULL, name, "mixing weights over training");
    }
done:
    free(text), free(series), free(titles);
    rp_mix_log_free(&m);
    return rc;
}

/* ---- (5) plugin parameters over training --------------------------------------------------------- */

/* The "params" objects of metrics.jsonl: the keys of the first record that has them (term.<term>.<tensor>),
 * each flattened to its values in order (a per_layer term's array per layer, one after the other); a point
 * per record with the same shape, steps increasing (a record that goes back in steps replaces the points
 * from that step on, as for the mixing weights). */
#define PARAMS_MAX_KEYS 32
typedef struct params_log {
    int n_keys, per_key[PARAMS_MAX_KEYS], total;
    char keys[PARAMS_MAX_KEYS][96];
    size_t n, cap;
    double *x, *y; /* y[point * total + value] */
    int bad;
} params_log;

static int flatten(const cJSON *v, double *out, int cap)
{
    if (cJSON_IsNumber(v)) {
        if (cap > 0)
            out[0] = v->valuedouble;
        return 1;
    }
    if (cJSON_IsNull(v)) {
        if (cap > 0)
            out[0] = NAN;
        return 1;
    }
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, v) n += flatten(e, out + (n < cap ? n : cap), cap - n > 0 ? cap - n : 0);
    return n;
}

static void parse_params_log(char *text, size_t len, params_log *m)
{
    memset(m, 0, sizeof *m);
    double vals[1024];
    for (char *line = text, *end; line < text + len; line = end + 1) {
        end = memchr(line, '\n', (size_t)(text + len - line));
        end = end ? end : text + len;
        if (!memchr(line, '"', (size_t)(end - line)) || !strstr(line, "\"params\""))
            continue;
        cJSON *j = cJSON_ParseWithLength(line, (size_t)(end - line));
        const cJSON *st = j ? cJSON_GetObjectItemCaseSensitive(j, "step") : NULL;
        const cJSON *pr = j ? cJSON_GetObjectItemCaseSensitive(j, "params") : NULL;
        if (!cJSON_IsNumber(st) || !cJSON_IsObject(pr)) {
            m->bad += j != NULL && pr != NULL;
            cJSON_Delete(j);
            continue;
        }
        int n = 0, k = 0, ok = 1;
        const cJSON *e;
        cJSON_ArrayForEach(e, pr)
        {
            const int got = flatten(e, vals + n, (int)(sizeof vals / sizeof vals[0]) - n);
            if (!m->total && k < PARAMS_MAX_KEYS) { /* the first record sets the shape */
                bk_copy_text(m->keys[k], sizeof m->keys[k], e->string ? e->string : "?");
                m->per_key[k] = got;
            } else if (k >= m->n_keys || got != m->per_key[k] || strcmp(m->keys[k], e->string ? e->string : "?")) {
                ok = 0;
            }
            n += got, k++;
        }
        if (!m->total) {
            if (k > PARAMS_MAX_KEYS || n > (int)(sizeof vals / sizeof vals[0]) || n == 0)
                ok = 0;
            else
                m->n_keys = k, m->total = n;
        }
        if (!ok || n != m->total) {
            m->bad++;
            cJSON_Delete(j);
            continue;
        }
        const double step = st->valuedouble;
        while (m->n > 0 && m->x[m->n - 1] >= step) /* logged again from an earlier checkpoint */
            m->n--;
        if (m->n == m->cap) {
            const size_t cap = m->cap ? 2 * m->cap : 256;
            double *x = realloc(m->x, cap * sizeof *x), *y = x ? realloc(m->y, cap * (size_t)m->total * sizeof *y) : NULL;
            if (x)
                m->x = x;
            if (!x || !y) {
                cJSON_Delete(j);
                break;
            }
            m->y = y, m->cap = cap;
        }
        m->x[m->n] = step;
        memcpy(m->y + m->n * (size_t)m->total, vals, (size_t)m->total * sizeof *vals);
        m->n++;
        cJSON_Delete(j);
    }
}

/* Run r's plugin parameters over training: a figure per key (term.<term>.<tensor>), a curve per value
 * (per head; per layer and head for a per_layer term), at most 16 curves each. */
static int figure_params(report_ctx *c, FILE *md, const run_rec *r, bk_error *err)
{
    char path[REPORT_PATH_MAX + 32];
    size_t len = 0;
    char *text = read_metrics(c, r, "plugin parameters", path, sizeof path, &len);
    if (!text)
        return BK_OK;
    params_log m;
    parse_params_log(text, len, &m);
    free(text);
    int rc = BK_OK;
    if (m.bad)
        rp_note(c, "run '%s': %s: %d record%s of plugin parameters malformed or of another shape than the first; "
                   "skipped", r->name, path, m.bad, m.bad == 1 ? "" : "s");
    if (m.n == 0) {
        fprintf(md, "**%s** (run `%s`): metrics.jsonl has no plugin parameters (no term has any, or a biaskit that "
                    "did not log them trained it).\n\n", r->variant, r->name);
        free(m.x), free(m.y);
        return BK_OK;
    }
    double *y = malloc(m.n * 16 * sizeof *y);
    char(*titles)[48] = calloc(16, sizeof *titles);
    bk_plot_series series[16];
    if (!y || !titles)
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the parameters of run '%s'", r->name);
    fprintf(md, "**%s** (run `%s`, seed %lld):\n\n", r->variant, r->name, r->seed);
    for (int k = 0, at = 0; !rc && k < m.n_keys; at += m.per_key[k++]) {
        const int nc = m.per_key[k] < 16 ? m.per_key[k] : 16;
        for (int v = 0; v < nc; v++) {
            for (size_t i = 0; i < m.n; i++)
                y[(size_t)v * m.n + i] = m.y[i * (size_t)m.total + (size_t)(at + v)];
            snprintf(titles[v], sizeof titles[v], "[%d]", v);
            series[v] = (bk_plot_series){titles[v], m.x, y + (size_t)v * m.n, m.n};
        }
        char title[1400], base[300], name[340], label[700];
        group_label(&c->groups[r->group], label, sizeof label);
        snprintf(title, sizeof title, "%.120s: %s of %s over training (seed %lld%s%s)%s", sweep_title(c), m.keys[k],
                 r->variant, r->seed, label[0] ? "," : "", label[0] ? label + 1 : "",
                 m.per_key[k] > 16 ? "; the first 16 values" : "");
        snprintf(base, sizeof base, "params-%s-%s-%s", c->groups[r->group].slug, r->variant, m.keys[k]);
        for (char *q = base; *q; q++)
            *q = *q == '.' ? '_' : *q;
        if ((rc = rp_figure_name(c, base, name, sizeof name, err)))
            break;
        bk_plot p = {NULL, title, "training step", m.keys[k], 0, 0, series, nc, m.n <= 30};
        figure(c, md, &p, NULL, name, "a plugin parameter over training");
    }
    free(y), free(titles), free(m.x), free(m.y);
    return rc;
}

/* (3) into `md` and (4) into `mix` for the first seed of every (group, variant): one checkpoint load
 * each. */
int rp_figures_checkpoints(report_ctx *c, FILE *md, FILE *mix, FILE *params, bk_error *err)
{
    int any_mix = 0, any_params = 0;
    for (int g = 0; g < c->n_groups; g++) {
        int heading = 0, mix_heading = 0;
        for (int v = 0; v < c->n_variants; v++) {
            if (!rp_group_has_variant(c, g, v))
                continue;
            if (!heading && c->n_groups > 1)
                rp_group_heading(c, md, g);
            heading = 1;
            int i = rp_first_seed_run(c, g, v);
            if (i < 0) {
                fprintf(md, "**");
                rp_md_cell(md, c->variants[v]);
                fprintf(md, "**: no run finished.\n\n");
                continue;
            }
            const run_rec *r = &c->runs[i];
            char ckpt[REPORT_PATH_MAX + 32];
            snprintf(ckpt, sizeof ckpt, "%s/" BK_RUN_CHECKPOINT_FILE, r->path);
            bk_error ignored;
            if (bk_file_check_regular(ckpt, "checkpoint", &ignored) != BK_OK) {
                fprintf(md, "**%s** (run `%s`): no checkpoint at ", r->variant, r->name);
                rp_md_code(md, ckpt);
                fprintf(md, ".\n\n");
                rp_note(c, "run '%s': no checkpoint at '%s'; its bias is not drawn", r->name, ckpt);
                continue;
            }
            /* on the CPU whatever device trained it: a table is a few thousand values; with the
             * variant's eval_set, the model as it was evaluated */
            const char **overrides = malloc((size_t)(1 + r->n_eval_sets) * sizeof *overrides);
            if (!overrides)
                return bk_fail(err, BK_ERR_NOMEM, "out of memory");
            overrides[0] = "run.device=cpu";
            for (int k = 0; k < r->n_eval_sets; k++)
                overrides[1 + k] = r->eval_sets[k];
            warn_ctx w = {c, r};
            bk_checkpoint_options co = {.overrides = overrides, .n_overrides = 1 + r->n_eval_sets,
                                        .warn = on_checkpoint_warning, .warn_ctx = &w};
            bk_lm lm;
            bk_train_state st;
            bk_error lerr = {0};
            /* what a plugin says it does (info lines: a scaling the eval_set chose) went to the run's
             * eval.log when it was evaluated; the report says it once, in its list of variants */
            bk_set_log_level(BIASKIT_LOG_WARN);
            int load_rc = bk_checkpoint_load_ex(ckpt, &co, &lm, NULL, &st, &lerr);
            bk_set_log_level(BIASKIT_LOG_INFO);
            free(overrides);
            if (load_rc) {
                fprintf(md, "**%s** (run `%s`): the model cannot be rebuilt from its checkpoint: ", r->variant, r->name);
                rp_md_cell(md, lerr.message);
                fprintf(md, "\n\n");
                rp_note(c, "run '%s': cannot rebuild the model from its checkpoint: %s", r->name, lerr.message);
                continue;
            }
            int rc = figures_bias(c, md, r, &lm, err);
            if (!rc && lm.bias.learn_weights) { /* a stream learns (every term, some, or per head) */
                if (!mix_heading && c->n_groups > 1)
                    rp_group_heading(c, mix, g);
                mix_heading = 1;
                rc = figure_mix(c, mix, r, &lm, err);
                any_mix = 1;
            }
            int learned = 0;
            for (int t = 0; t < lm.terms.n; t++)
                learned |= lm.terms.terms[t].n_params > 0;
            if (!rc && learned) {
                if (!any_params && c->n_groups > 1)
                    rp_group_heading(c, params, g);
                any_params = 1;
                rc = figure_params(c, params, r, err);
            }
            bk_lm_close(&lm);
            if (rc)
                return rc;
        }
    }
    if (!any_mix)
        fprintf(mix, "No variant learns its mixing weights ([attention] learn_weights is off).\n\n");
    if (!any_params)
        fprintf(params, "No variant has a term with parameters.\n\n");
    return BK_OK;
}
