/* Line plots through gnuplot (plot.h): PATH.gp, PATH.dat, then `gnuplot PATH.gp` draws PATH.png.
 *
 * The data file holds one gnuplot data block per drawn series (`index N`), two blank lines apart; a
 * single blank line inside a block breaks the line there (a non-finite value, or one that a log axis
 * cannot show). The script finds the data and names the image relative to its own path (ARG0), so
 * `gnuplot some/dir/PATH.gp` redraws the figure from any working directory. gnuplot runs in a child
 * process (fork + execvp, no shell), its standard error captured for the message when it fails. */
#define _POSIX_C_SOURCE 200809L
#include "report/plot.h"
#include "util/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PLOT_PATH_MAX 4096
#define STDERR_KEEP 1536       /* bytes of gnuplot's standard error kept for a message */
#define GNUPLOT_TIMEOUT_S 120  /* a figure of a few thousand points takes well under a second */

/* ------------------------------------------------------------------------------------------------
 * Paths and text
 * ---------------------------------------------------------------------------------------------- */

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* `s` as a gnuplot single-quoted string: '' stands for a quote, nothing else is special; a line
 * break (which would end the command) becomes a space. */
static void put_quoted(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; s && *s; s++) {
        if (*s == '\'')
            fputs("''", f);
        else if (*s == '\n' || *s == '\r')
            fputc(' ', f);
        else
            fputc(*s, f);
    }
    fputc('\'', f);
}

/* `s` on one comment line of the data file. */
static void put_comment_text(FILE *f, const char *s)
{
    for (; s && *s; s++)
        fputc(*s == '\n' || *s == '\r' ? ' ' : *s, f);
}

/* A point the figure can show: both coordinates finite, and positive on a logarithmic axis. */
static int drawable(const bk_plot *p, double x, double y)
{
    return isfinite(x) && isfinite(y) && (!p->logx || x > 0) && (!p->logy || y > 0);
}

static size_t drawable_points(const bk_plot *p, const bk_plot_series *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        n += drawable(p, s->x[i], s->y[i]);
    return n;
}

/* The base of a logarithmic x axis: 2 when the data spans at most 2^12 (sequence lengths, distances:
 * a tick at every power of two), else 10. */
static int log_base_x(const bk_plot *p)
{
    double lo = INFINITY, hi = 0;
    for (int k = 0; k < p->n_series; k++)
        for (size_t i = 0; i < p->series[k].n; i++)
            if (drawable(p, p->series[k].x[i], p->series[k].y[i])) {
                double x = p->series[k].x[i];
                lo = x < lo ? x : lo;
                hi = x > hi ? x : hi;
            }
    return hi > 0 && lo > 0 && hi / lo <= 4096.0 ? 2 : 10;
}

/* A round step (1, 2 or 5 times a power of ten) near `raw`. */
static double nice_step(double raw)
{
    double e = pow(10.0, floor(log10(raw))), m = raw / e;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * e;
}

/* Ticks of a logarithmic y axis, which gnuplot would label only at powers of ten (none at all when
 * the data lies inside one decade): over less than a decade, round values evenly spaced between the
 * smallest and the largest value; over more, 1-2-5 steps (1 per decade beyond 10^4). Writes
 * "set ytics (...)" or nothing. */
static void put_log_y_ticks(FILE *f, const bk_plot *p)
{
    double lo = INFINITY, hi = 0;
    for (int k = 0; k < p->n_series; k++)
        for (size_t i = 0; i < p->series[k].n; i++)
            if (drawable(p, p->series[k].x[i], p->series[k].y[i])) {
                double y = p->series[k].y[i];
                lo = y < lo ? y : lo;
                hi = y > hi ? y : hi;
            }
    if (!(hi > lo) || !isfinite(lo))
        return;
    double ticks[64];
    int n = 0;
    if (hi / lo <= 10) {
        double step = nice_step((hi - lo) / 5);
        for (int tries = 0; tries < 4; tries++, step = nice_step(step / 2.5)) {
            n = 0;
            for (double v = ceil(lo / step) * step; v <= hi * (1 + 1e-12) && n < 64; v += step)
                ticks[n++] = v;
            if (n >= 3)
                break;
        }
    } else {
        static const double steps[] = {1, 2, 5};
        int n_steps = hi / lo > 1e4 ? 1 : 3;
        for (int e = (int)floor(log10(lo)); e <= (int)ceil(log10(hi)) && n < 64; e++)
            for (int m = 0; m < n_steps && n < 64; m++) {
                double v = steps[m] * pow(10.0, e);
                if (v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12))
                    ticks[n++] = v;
            }
    }
    if (n < 2)
        return;
    fprintf(f, "set ytics (");
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%.6g", i ? ", " : "", ticks[i]);
    fprintf(f, ")\n");
}

static int check_plot(const bk_plot *p, size_t *n_png, bk_error *err)
{
    if (!p || !p->png || !*p->png)
        return bk_fail(err, BK_ERR_INVALID, "plot: no output path given");
    size_t n = strlen(p->png);
    if (n < 5 || strcmp(p->png + n - 4, ".png") != 0)
        return bk_fail(err, BK_ERR_INVALID, "plot '%s': the output path must end in .png", p->png);
    if (n + 1 > PLOT_PATH_MAX)
        return bk_fail(err, BK_ERR_INVALID, "plot '%.200s...': path too long (%zu bytes; at most %d)", p->png, n,
                       PLOT_PATH_MAX - 1);
    if (p->n_series < 0 || (p->n_series > 0 && !p->series))
        return bk_fail(err, BK_ERR_INVALID, "plot '%s': %d series but no series array", p->png, p->n_series);
    size_t total = 0;
    for (int k = 0; k < p->n_series; k++) {
        const bk_plot_series *s = &p->series[k];
        if (s->n > 0 && (!s->x || !s->y))
            return bk_fail(err, BK_ERR_INVALID, "plot '%s': series %d ('%s') has %zu points but no x or y array",
                           p->png, k + 1, s->title ? s->title : "", s->n);
        total += drawable_points(p, s);
    }
    if (total == 0)
        return bk_fail(err, BK_ERR_INVALID,
                       "plot '%s': nothing to draw: no series has a finite point%s", p->png,
                       p->logx || p->logy ? " (positive on the logarithmic axes)" : "");
    *n_png = n;
    return BK_OK;
}

/* ------------------------------------------------------------------------------------------------
 * The data file and the script
 * ---------------------------------------------------------------------------------------------- */

/* The series colours: Okabe and Ito's eight colour-blind-safe colours (yellow left out: it vanishes on
 * white) first, then nine more that stay apart from them and from the grey of the marked x. */
static const char *const plot_palette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9",
                                           "#000000", "#8C564B", "#9467BD", "#BCBD22", "#17BECF", "#E377C2",
                                           "#1F3A93", "#B22222", "#2CA02C", "#A6761D"};
#define PLOT_COLOURS ((int)(sizeof plot_palette / sizeof plot_palette[0]))
/* gnuplot's filled and open markers: circle, square, triangle, diamond, ... */
static const int plot_markers[] = {7, 5, 9, 13, 6, 4, 8, 12};
#define PLOT_MARKERS ((int)(sizeof plot_markers / sizeof plot_markers[0]))
/* The grey of a marked x (the training length). */
#define PLOT_VLINE_COLOUR "#888888"

/* Series k's band, or NULL. */
static const bk_plot_band *band_of(const bk_plot_marks *m, int k)
{
    return m && m->bands && m->bands[k].lo && m->bands[k].hi ? &m->bands[k] : NULL;
}

static int band_drawable(const bk_plot *p, const bk_plot_series *s, const bk_plot_band *b, size_t i)
{
    return drawable(p, s->x[i], b->lo[i]) && drawable(p, s->x[i], b->hi[i]);
}

static int write_data(const bk_plot *p, const bk_plot_marks *m, const char *path, const char *stem_base,
                      bk_error *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return bk_fail(err, BK_ERR_IO, "cannot write plot data '%s': %s", path, strerror(errno));
    fprintf(f, "# data of %s.png, drawn by %s.gp: one block per series (gnuplot `index N`), two blank lines\n"
               "# apart; columns x y (and the band's low and high, when it has one); a blank line inside a block\n"
               "# is a gap (a value that is not finite, or not\n"
               "# positive on a logarithmic axis). A series with nothing to draw has no block.\n",
            stem_base, stem_base);
    int block = 0;
    for (int k = 0; k < p->n_series; k++) {
        const bk_plot_series *s = &p->series[k];
        if (!drawable_points(p, s))
            continue;
        fprintf(f, "%s# index %d: ", block ? "\n\n" : "", block);
        put_comment_text(f, s->title);
        fputc('\n', f);
        int gap = 0, any = 0;
        for (size_t i = 0; i < s->n; i++) {
            if (!drawable(p, s->x[i], s->y[i])) {
                gap = any; /* a gap only between drawn points */
                continue;
            }
            if (gap)
                fputc('\n', f);
            gap = 0, any = 1;
            const bk_plot_band *b = band_of(m, k);
            if (b && band_drawable(p, s, b, i)) /* columns 3 and 4: the band, NaN where it is not drawable */
                fprintf(f, "%.10g %.10g %.10g %.10g\n", s->x[i], s->y[i], b->lo[i], b->hi[i]);
            else if (b)
                fprintf(f, "%.10g %.10g NaN NaN\n", s->x[i], s->y[i]);
            else
                fprintf(f, "%.10g %.10g\n", s->x[i], s->y[i]);
        }
        block++;
    }
    if (ferror(f) | (fclose(f) != 0))
        return bk_fail(err, BK_ERR_IO, "cannot write plot data '%s': %s", path, strerror(errno));
    return BK_OK;
}

/* A script's opening: where it is, its data, the terminal and the image (line plots and heat maps). */
static void put_preamble(FILE *f, const char *stem_base)
{
    fprintf(f, "# Drawn by biaskit. Restyle the figure by editing this script, then run\n"
               "#     gnuplot %s.gp\n"
               "# (from any directory: the data and the image are found beside the script).\n\n", stem_base);
    char script[PLOT_PATH_MAX + 8], data[PLOT_PATH_MAX + 8], png[PLOT_PATH_MAX + 8];
    snprintf(script, sizeof script, "%s.gp", stem_base);
    snprintf(data, sizeof data, "%s.dat", stem_base);
    snprintf(png, sizeof png, "%s.png", stem_base);
    fprintf(f, "script = ");
    put_quoted(f, script);
    fprintf(f, "\nhere = ''\n"
               "if (exists(\"ARG0\") && strlen(ARG0) > strlen(script) && \\\n"
               "    ARG0[strlen(ARG0) - strlen(script) + 1:] eq script) here = ARG0[1:strlen(ARG0) - strlen(script)]\n"
               "data = here.");
    put_quoted(f, data);
    fprintf(f, "\n\n# pngcairo (antialiased) when this gnuplot has it, else the plain png terminal\n"
               "# at twice 900x600, type and lines scaled alike\n"
               "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
               "    set terminal pngcairo size 1800,1200 noenhanced font \"sans,20\" linewidth 3\n"
               "} else {\n"
               "    set terminal png size 1800,1200 noenhanced font \"sans,20\" linewidth 3\n"
               "}\n"
               "set output here.");
    put_quoted(f, png);
    fprintf(f, "\n\n");
}

/* A script's end: the image closed, then the same figure as a PDF beside it when gnuplot has pdfcairo. */
static void put_pdf(FILE *f, const char *stem_base)
{
    char pdf[PLOT_PATH_MAX + 8];
    snprintf(pdf, sizeof pdf, "%s.pdf", stem_base);
    fprintf(f, "unset output\n\n# the same figure as a PDF (vector, for a paper)\n"
               "if (strstrt(GPVAL_TERMINALS, \"pdfcairo\") > 0) {\n"
               "    set terminal pdfcairo size 6in,4in noenhanced font \"sans,9\" linewidth 1.5\n"
               "    set output here.");
    put_quoted(f, pdf);
    fprintf(f, "\n    replot\n    unset output\n}\n");
}

/* Small multiples share one y range, so that panels compare by eye: the drawable values of every series and
 * band, with a 4% margin (a factor on a log axis). Nothing is written when there is no range. */
static void put_shared_yrange(FILE *f, const bk_plot *p, const bk_plot_marks *m)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < p->n_series; k++) {
        const bk_plot_series *s = &p->series[k];
        const bk_plot_band *b = band_of(m, k);
        for (size_t i = 0; i < s->n; i++) {
            const double y[3] = {s->y[i], b ? b->lo[i] : NAN, b ? b->hi[i] : NAN};
            for (int c = 0; c < 3; c++)
                if (drawable(p, s->x[i], y[c])) {
                    lo = y[c] < lo ? y[c] : lo;
                    hi = y[c] > hi ? y[c] : hi;
                }
        }
    }
    if (!(hi > lo))
        return;
    if (p->logy)
        fprintf(f, "set yrange [%.10g:%.10g]\n", lo / 1.04, hi * 1.04);
    else
        fprintf(f, "set yrange [%.10g:%.10g]\n", lo - 0.04 * (hi - lo), hi + 0.04 * (hi - lo));
}

static int write_script(const bk_plot *p, const bk_plot_marks *m, const char *path, const char *stem_base,
                        bk_error *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return bk_fail(err, BK_ERR_IO, "cannot write plot script '%s': %s", path, strerror(errno));
    put_preamble(f, stem_base);
    fprintf(f, "set title ");
    put_quoted(f, p->title ? p->title : "");
    fprintf(f, "\nset xlabel ");
    put_quoted(f, p->xlabel ? p->xlabel : "");
    fprintf(f, "\nset ylabel ");
    put_quoted(f, p->ylabel ? p->ylabel : "");
    fprintf(f, "\n");
    if (p->logx)
        fprintf(f, "set logscale x %d\nset format x \"%%g\"\n", log_base_x(p));
    if (p->logy)
{
        fprintf(f, "set logscale y 10\nset format y \"%%g\"\n");
        put_log_y_ticks(f, p);
    }
    fprintf(f, "set grid xtics ytics mxtics mytics lc rgb \"#dddddd\" lt 1, lc rgb \"#eeeeee\" lt 1\n"
               "set key outside below center horizontal noenhanced spacing 1.2 maxrows 4\n"
               "set border 3\n"
               "set tics nomirror\n"
               "# the ranges hug the data, with a small margin\n"
               "set autoscale xfixmin\nset autoscale xfixmax\nset autoscale yfixmin\nset autoscale yfixmax\n"
               "set offsets graph 0.02, graph 0.02, graph 0.05, graph 0.05\n\n");
    const int panels = m && m->panel && m->n_panels > 1 ? m->n_panels : 1;
    if (m && isfinite(m->vline) && (m->vline != 0.0 || m->vline_label) && !(p->logx && m->vline <= 0.0)) {
        fprintf(f, "# the marked x: a thin grey dashed line, labelled (in the title of small multiples), not in the "
                   "legend\n"
                   "set arrow from %.10g, graph 0 to %.10g, graph 1 nohead dt 2 lw 1 lc rgb \"" PLOT_VLINE_COLOUR
                   "\" back\n",
                m->vline, m->vline);
        if (m->vline_label && panels == 1) {
            fprintf(f, "set label ");
            put_quoted(f, m->vline_label);
            fprintf(f, " at %.10g, graph 0 offset 0.5, 1 left tc rgb \"#666666\"\n", m->vline);
        }
        fprintf(f, "\n");
    }

    for (int k = 0; k < p->n_series; k++) {
        const bk_plot_series *s = &p->series[k];
        if (!drawable_points(p, s)) {
            fprintf(f, "# series %d, ", k + 1);
            put_comment_text(f, s->title);
            fprintf(f, ": no finite value to draw\n");
        }
    }
    /* the data block of each drawable series (blocks are numbered over the drawable series in order) */
    int *block_of = malloc(((size_t)p->n_series + 1) * sizeof *block_of);
    if (!block_of) {
        fclose(f);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory writing plot script '%s'", path);
    }
    for (int k = 0, b = 0; k < p->n_series; k++)
        block_of[k] = drawable_points(p, &p->series[k]) ? b++ : -1;
    const int cols = (int)ceil(sqrt((double)panels)), rows = (panels + cols - 1) / cols;
    if (panels > 1) {
        put_shared_yrange(f, p, m);
        /* multiplot cannot be replotted: the script draws twice, into the PNG and then into the PDF */
        fprintf(f, "set key inside top left noenhanced spacing 1.1 font \",16\"\n"
                   "set lmargin 7\n"
                   "pdf = strstrt(GPVAL_TERMINALS, \"pdfcairo\") > 0\n"
                   "do for [pass = 1:2] {\n"
                   "if (pass == 2 && pdf) {\n"
                   "    set terminal pdfcairo size 9in,%.1fin noenhanced font \"sans,8\" linewidth 1.2\n"
                   "    set key font \",7\"\n"
                   "    set output here.",
                1.0 + 3.0 * rows);
        char pdf[PLOT_PATH_MAX + 8];
        snprintf(pdf, sizeof pdf, "%s.pdf", stem_base);
        put_quoted(f, pdf);
        fprintf(f, "\n}\nif (pass == 1 || pdf) {\nset multiplot layout %d, %d title ", rows, cols);
        char title[512];
        snprintf(title, sizeof title, "%s%s%s%s", p->title ? p->title : "",
                 m->vline_label && isfinite(m->vline) ? " (dashed: " : "",
                 m->vline_label && isfinite(m->vline) ? m->vline_label : "",
                 m->vline_label && isfinite(m->vline) ? ")" : "");
        put_quoted(f, title);
        fprintf(f, "\nunset title\n");
    }
    for (int pn = 0; pn < panels; pn++) {
        if (panels > 1) {
            fprintf(f, "set title ");
            put_quoted(f, m->panel_titles && m->panel_titles[pn] ? m->panel_titles[pn] : "");
            /* the axes' labels once: y along the left edge of the figure (drawn with the first panel), x on the
             * bottom row; a legend only where a panel holds more than one series (its title names a lone one) */
            fprintf(f, "\nset ylabel ");
            put_quoted(f, "");
            fprintf(f, "\n");
            if (pn == 0 && p->ylabel) {
                fprintf(f, "set label 1 ");
                put_quoted(f, p->ylabel);
                fprintf(f, " at screen 0.015, 0.5 center rotate by 90\n");
            } else if (pn == 1) {
                fprintf(f, "unset label 1\n");
            }
            fprintf(f, "set xlabel ");
            put_quoted(f, pn + cols >= panels && p->xlabel ? p->xlabel : "");
            int in_panel = 0;
            for (int k = 0; k < p->n_series; k++)
                in_panel += block_of[k] >= 0 && m->panel[k] == pn;
            fprintf(f, "\n%s\n", in_panel > 1 ? "set key inside top left Left reverse opaque noenhanced samplen 2" : "unset key");
        }
        int first = 1, shown = 0;
        for (int k = 0; k < p->n_series; k++) {
            const bk_plot_series *s = &p->series[k];
            if (block_of[k] < 0 || (panels > 1 && m->panel[k] != pn))
                continue;
            /* colour i (16 that do not repeat), dash i % 4, marker i % 8 for the panel's i-th series:
             * neighbours differ three ways */
            const char *colour = plot_palette[shown % PLOT_COLOURS];
            if (band_of(m, k)) /* the band first, under the line, not in the legend */
                fprintf(f, "%s data index %d using 1:3:4 with filledcurves fs transparent solid 0.18 noborder "
                           "lc rgb \"%s\" notitle",
                        first ? "plot" : ", \\\n    ", block_of[k], colour), first = 0;
            const size_t n = drawable_points(p, s);
            const size_t every = p->points || n <= 12 ? 1 : (n + 7) / 8; /* about 8 markers on a long series */
            fprintf(f, "%s data index %d using 1:2 with linespoints lc rgb \"%s\" dt %d lw 1.5 pt %d ps %s pi %zu title ",
                    first ? "plot" : ", \\\n    ", block_of[k], colour, shown % 4 + 1,
                    plot_markers[shown % PLOT_MARKERS], p->points ? "1.2" : "0.9", every);
            put_quoted(f, s->title ? s->title : "");
            first = 0;
            shown++;
        }
        if (first && panels > 1) /* a panel with nothing drawable: an empty frame keeps the layout */
            fprintf(f, "set multiplot next");
        fprintf(f, "\n");
    }
    free(block_of);
    if (panels > 1) {
        fprintf(f, "unset multiplot\nunset output\n}\n}\n");
        if (ferror(f) | (fclose(f) != 0))
            return bk_fail(err, BK_ERR_IO, "cannot write plot script '%s': %s", path, strerror(errno));
        return BK_OK;
    }
    fprintf(f, "\n");
    put_pdf(f, stem_base);
    if (ferror(f) | (fclose(f) != 0))
        return bk_fail(err, BK_ERR_IO, "cannot write plot script '%s': %s", path, strerror(errno));
    return BK_OK;
}

/* ------------------------------------------------------------------------------------------------
 * Running gnuplot
 * ---------------------------------------------------------------------------------------------- */

/* 1 when an executable `gnuplot` is on PATH (execvp's search). */
static int gnuplot_on_path(void)
{
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        char file[PLOT_PATH_MAX];
        if (n + sizeof "/gnuplot" < sizeof file) {
            if (n == 0)
                snprintf(file, sizeof file, "./gnuplot");
            else
                snprintf(file, sizeof file, "%.*s/gnuplot", (int)n, path);
            struct stat st;
            if (stat(file, &st) == 0 && S_ISREG(st.st_mode) && access(file, X_OK) == 0)
                return 1;
        }
        if (!end)
            break;
        path = end + 1;
    }
    return 0;
}

/* Run gnuplot with `argv` (argv[0] = "gnuplot"), standard input from /dev/null, standard output
 * discarded, standard error kept (the last STDERR_KEEP bytes, terminated) in `errtext`. *status is
 * the exit status, or -1 (killed by a signal, or by the time limit). Fails only when it could not run. */
static int run_gnuplot(char *const argv[], int *status, char *errtext, size_t errsize, bk_error *err)
{
    int pipefd[2];
    errtext[0] = '\0';
    if (pipe(pipefd) != 0)
        return bk_fail(err, BK_ERR_IO, "cannot run gnuplot: pipe: %s", strerror(errno));
    fflush(NULL); /* the child must not write our buffered output again */
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(pipefd[0]), close(pipefd[1]);
        return bk_fail(err, BK_ERR_IO, "cannot run gnuplot: fork: %s", strerror(e));
    }
    if (pid == 0) { /* the child: only async-signal-safe calls until exec */
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, STDIN_FILENO);
            dup2(null, STDOUT_FILENO);
        }
        dup2(pipefd[1], STDERR_FILENO);
        close(pipefd[0]);
        close(pipefd[1]);
        execvp(argv[0], argv);
        static const char msg[] = "cannot execute gnuplot\n";
        ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)ignored;
        _exit(127);
    }
    close(pipefd[1]);
    size_t used = 0;
    char buf[512];
    double deadline = bk_now_seconds() + GNUPLOT_TIMEOUT_S;
    int timed_out = 0;
    for (;;) {
        struct pollfd pfd = {pipefd[0], POLLIN, 0};
        int left_ms = (int)((deadline - bk_now_seconds()) * 1000.0);
        if (left_ms <= 0) {
            timed_out = 1;
            kill(pid, SIGKILL);
            break;
        }
        int r = poll(&pfd, 1, left_ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue; /* the time limit is checked above */
        ssize_t got = read(pipefd[0], buf, sizeof buf);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        /* keep the end: gnuplot's last lines say what went wrong */
        size_t g = (size_t)got;
        if (g >= errsize - 1) {
            memcpy(errtext, buf + g - (errsize - 1), errsize - 1);
            used = errsize - 1;
        } else {
            if (used + g > errsize - 1) {
                size_t drop = used + g - (errsize - 1);
                memmove(errtext, errtext + drop, used - drop);
                used -= drop;
            }
            memcpy(errtext + used, buf, g);
            used += g;
        }
        errtext[used] = '\0';
    }
    close(pipefd[0]);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0)
        if (errno != EINTR) {
            *status = -1;
            return bk_fail(err, BK_ERR_IO, "cannot run gnuplot: waitpid: %s", strerror(errno));
        }
    *status = !timed_out && WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
    if (timed_out)
        snprintf(errtext, errsize, "stopped after %d s without finishing", GNUPLOT_TIMEOUT_S);
    return BK_OK;
}

/* gnuplot's standard error on one line: line breaks become " | ", leading space dropped. */
static void describe_stderr(const char *text, char *out, size_t size)
{
    size_t n = 0;
    int pending = 0;
    for (const char *r = text; *r && n + 4 < size; r++) {
        if (*r == '\n' || *r == '\r') {
            pending = n > 0;
            continue;
        }
        if (pending) {
            memcpy(out + n, " | ", 3);
            n += 3;
            pending = 0;
        }
        if (*r == ' ' && n == 0)
            continue;
        out[n++] = *r;
    }
    out[n] = '\0';
    if (n == 0)
        bk_copy_text(out, size, "(nothing on its standard error)");
}

/* 1 when the file `path` starts with `head` (n_head bytes) and its last bytes, less any trailing
 * white space when `trim`, are `tail` (n_tail bytes): a whole image, not one cut short by a full disk. */
static int file_framed(const char *path, const unsigned char *head, size_t n_head, const unsigned char *tail,
                       size_t n_tail, int trim)
{
    unsigned char buf[64];
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    int ok = fread(buf, 1, n_head, f) == n_head && memcmp(buf, head, n_head) == 0 && fseek(f, 0, SEEK_END) == 0;
    long size = ok ? ftell(f) : -1;
    long back = size < (long)sizeof buf ? size : (long)sizeof buf;
    ok = ok && size >= (long)(n_head + n_tail) && fseek(f, size - back, SEEK_SET) == 0 &&
         fread(buf, 1, (size_t)back, f) == (size_t)back;
    fclose(f);
    size_t end = ok ? (size_t)back : 0;
    while (trim && end > 0 && (buf[end - 1] == '\n' || buf[end - 1] == '\r' || buf[end - 1] == ' '))
        end--;
    return ok && end >= n_tail && memcmp(buf + end - n_tail, tail, n_tail) == 0;
}

/* 1 when `path` is a whole PNG image: its signature first, its IEND chunk (with its CRC) last. */
static int is_png(const char *path)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    static const unsigned char iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
    return file_framed(path, sig, sizeof sig, iend, sizeof iend, 0);
}

/* 1 when `path` is a whole PDF: "%PDF-" first, "%%EOF" last. */
static int is_pdf(const char *path)
{
    return file_framed(path, (const unsigned char *)"%PDF-", 5, (const unsigned char *)"%%EOF", 5, 1);
}

/* Run gnuplot on the script `gp` (written) to draw `png`, and check that it did. */
static int draw_script(const char *png, const char *gp, bk_error *err)
{
    int rc;
    if (!gnuplot_on_path())
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "plot '%s': gnuplot was not found on PATH; the script '%s' and its data are written: "
                       "install gnuplot (Debian: apt-get install gnuplot-nox), then run 'gnuplot %s'",
                       png, gp, gp);
    /* an image left from before must not pass for this one (nor its PDF, drawn by the same script) */
    char pdf[PLOT_PATH_MAX + 4];
    snprintf(pdf, sizeof pdf, "%.*s.pdf", (int)(strlen(png) - 4), png);
    if ((unlink(png) != 0 && errno != ENOENT) || (unlink(pdf) != 0 && errno != ENOENT))
        return bk_fail(err, BK_ERR_IO, "plot '%s': cannot replace the old image: %s", png, strerror(errno));
    char errtext[STDERR_KEEP], message[STDERR_KEEP + 512];
    int status;
    char prog[] = "gnuplot";
    char gp_arg[PLOT_PATH_MAX + 4];
    bk_copy_text(gp_arg, sizeof gp_arg, gp);
    char *argv[] = {prog, gp_arg, NULL};
    if ((rc = run_gnuplot(argv, &status, errtext, sizeof errtext, err)))
        return bk_error_prefix(err, "plot '%s': ", png);
    describe_stderr(errtext, message, sizeof message);
    if (status == 127 && strstr(errtext, "cannot execute gnuplot"))
        return bk_fail(err, BK_ERR_UNSUPPORTED, "plot '%s': gnuplot could not be executed; the script '%s' is written",
                       png, gp);
    if (status != 0)
        return bk_fail(err, BK_ERR_IO, "plot '%s': gnuplot %s on '%s': %s", png,
                       status < 0 ? "was stopped" : "failed", gp, message);
    if (!is_png(png))
        return bk_fail(err, BK_ERR_IO, "plot '%s': gnuplot ran '%s' but wrote no PNG image there (or one cut short: "
                       "a full disk?); it said: %s", png, gp, message);
    if (access(pdf, F_OK) == 0 && !is_pdf(pdf)) /* written when this gnuplot has pdfcairo */
        return bk_fail(err, BK_ERR_IO, "plot '%s': gnuplot ran '%s' but its PDF '%s' is not whole (a full disk cuts it "
                       "short); it said: %s", png, gp, pdf, message);
    return BK_OK;
}

int bk_plot_write(const bk_plot *p, bk_error *err)
{
    return bk_plot_write_marked(p, NULL, err);
}

int bk_plot_write_marked(const bk_plot *p, const bk_plot_marks *m, bk_error *err)
{
    size_t n = 0;
    int rc = check_plot(p, &n, err);
    if (rc)
        return rc;
    char stem[PLOT_PATH_MAX], gp[PLOT_PATH_MAX + 4], dat[PLOT_PATH_MAX + 4];
    memcpy(stem, p->png, n - 4);
    stem[n - 4] = '\0';
    snprintf(gp, sizeof gp, "%s.gp", stem);
    snprintf(dat, sizeof dat, "%s.dat", stem);
    if ((rc = write_data(p, m, dat, base_name(stem), err)) || (rc = write_script(p, m, gp, base_name(stem), err)))
        return rc;
    return draw_script(p->png, gp, err);
}

/* ------------------------------------------------------------------------------------------------
 * Heat maps
 * ---------------------------------------------------------------------------------------------- */

int bk_heatmap_write(const bk_heatmap *h, bk_error *err)
{
    if (!h || !h->png || !*h->png)
        return bk_fail(err, BK_ERR_INVALID, "plot: no output path given");
    size_t n = strlen(h->png);
    if (n < 5 || strcmp(h->png + n - 4, ".png") != 0)
        return bk_fail(err, BK_ERR_INVALID, "plot '%s': the output path must end in .png", h->png);
    if (n + 1 > PLOT_PATH_MAX)
        return bk_fail(err, BK_ERR_INVALID, "plot '%.200s...': path too long (%zu bytes; at most %d)", h->png, n,
                       PLOT_PATH_MAX - 1);
    if (h->nx < 1 || h->ny < 1 || !h->xs || !h->ys || !h->z)
        return bk_fail(err, BK_ERR_INVALID, "plot '%s': a heat map needs at least one row and one column", h->png);
    if (!(isfinite(h->zmin) && isfinite(h->zmax) && h->zmin < h->zmax))
        return bk_fail(err, BK_ERR_INVALID, "plot '%s': colour range [%g, %g] is empty", h->png, h->zmin, h->zmax);
    char stem[PLOT_PATH_MAX], gp[PLOT_PATH_MAX + 4], dat[PLOT_PATH_MAX + 4];
    memcpy(stem, h->png, n - 4);
    stem[n - 4] = '\0';
    snprintf(gp, sizeof gp, "%s.gp", stem);
    snprintf(dat, sizeof dat, "%s.dat", stem);
    const char *sb = base_name(stem);

    FILE *f = fopen(dat, "w");
    if (!f)
        return bk_fail(err, BK_ERR_IO, "cannot write plot data '%s': %s", dat, strerror(errno));
    fprintf(f, "# data of %s.png, drawn by %s.gp: column i, row j, value (NaN: no value)\n", sb, sb);
    for (int j = 0; j < h->ny; j++) {
        for (int i = 0; i < h->nx; i++) {
            double z = h->z[(size_t)j * h->nx + i];
            if (isfinite(z))
                fprintf(f, "%d %d %.10g\n", i, j, z);
            else
                fprintf(f, "%d %d NaN\n", i, j);
        }
        fputc('\n', f);
    }
    if (ferror(f) | (fclose(f) != 0))
        return bk_fail(err, BK_ERR_IO, "cannot write plot data '%s': %s", dat, strerror(errno));

    if (!(f = fopen(gp, "w")))
        return bk_fail(err, BK_ERR_IO, "cannot write plot script '%s': %s", gp, strerror(errno));
    put_preamble(f, sb);
    fprintf(f, "set title ");
    put_quoted(f, h->title ? h->title : "");
    fprintf(f, "\nset xlabel ");
    put_quoted(f, h->xlabel ? h->xlabel : "");
    fprintf(f, "\nset ylabel ");
    put_quoted(f, h->ylabel ? h->ylabel : "");
    fprintf(f, "\nset cblabel ");
    put_quoted(f, h->zlabel ? h->zlabel : "");
    fprintf(f, "\nset cbrange [%.10g:%.10g]\n", h->zmin, h->zmax);
    fprintf(f, "set palette defined (0 \"#ffffff\", 1 \"#08306b\")\n"
               "set xrange [-0.5:%d.5]\nset yrange [-0.5:%d.5]\nset tics out nomirror\nunset key\n",
            h->nx - 1, h->ny - 1);
    fprintf(f, "set xtics (");
    for (int i = 0; i < h->nx; i++)
        fprintf(f, "%s\"%g\" %d", i ? ", " : "", h->xs[i], i);
    fprintf(f, ")\nset ytics (");
    for (int j = 0; j < h->ny; j++)
        fprintf(f, "%s\"%g\" %d", j ? ", " : "", h->ys[j], j);
    fprintf(f, ")\n");
    /* each cell's value written on it, white on the dark half of the palette */
    fprintf(f, "mid = %.10g\n"
               "plot data using 1:2:3 with image, \\\n"
               "     data using 1:2:($3 == $3 ? sprintf(\"%%.2f\", $3) : \"\"):($3 > mid ? 0xffffff : 0) \\\n"
               "     with labels tc rgb variable\n",
            0.5 * (h->zmin + h->zmax));
    put_pdf(f, sb);
    if (ferror(f) | (fclose(f) != 0))
        return bk_fail(err, BK_ERR_IO, "cannot write plot script '%s': %s", gp, strerror(errno));
    return draw_script(h->png, gp, err);
}

int bk_plot_available(void)
{
    if (!gnuplot_on_path())
        return 0;
    /* an unknown terminal is an error, and gnuplot -e exits non-zero on one */
    static const char *const terminals[] = {"set terminal pngcairo", "set terminal png"};
    for (size_t i = 0; i < sizeof terminals / sizeof terminals[0]; i++) {
        char prog[] = "gnuplot", opt[] = "-e", command[64];
        bk_copy_text(command, sizeof command, terminals[i]);
        char *argv[] = {prog, opt, command, NULL};
        char errtext[256];
        int status;
        bk_error ignored;
        if (run_gnuplot(argv, &status, errtext, sizeof errtext, &ignored) == BK_OK && status == 0)
            return 1;
    }
    return 0;
}
