/* Line plots through gnuplot: every figure biaskit makes (report, trf, erf) is a PNG with, next to it,
 * the gnuplot script that drew it (PATH.gp), its data (PATH.dat) and the same figure as a PDF (PATH.pdf,
 * vector, for a paper; when gnuplot has the pdfcairo terminal), so a user can restyle a figure by
 * editing the script and running `gnuplot PATH.gp`. No image is encoded here.
 *
 * PATH is the image's path without ".png": figs/ppl.png comes with figs/ppl.gp and figs/ppl.dat. The
 * script finds its data and names its image relative to its own location, so `gnuplot figs/ppl.gp`
 * works from any directory. The data holds one block per series (gnuplot `index N`, two blank lines
 * apart; a series with nothing drawable has none); a blank line inside a block is a gap. The script
 * uses the pngcairo terminal when gnuplot has it, else png, at 1800x1200 (twice 900x600, type and lines
 * scaled alike: sharp on a high-density screen and in print) and pdfcairo at 6 x 4 inches; text is not
 * "enhanced" (an underscore is an underscore); a logarithmic x axis is base 2 over at most 2^12, else
 * base 10.
 *
 * Style (paper-ready): series k has colour k of a palette of 16 that does not repeat (colour-blind-safe
 * first), dash pattern k % 4 and point marker k % 8, so neighbours differ in three ways and the figure
 * survives greyscale; with many points a series shows 8 markers, not one per point. The legend sits
 * below the plot, in columns. A band (lo, hi) is drawn under its line, shaded in its colour; a marked x
 * (vline) is a thin grey dashed line with a label at the top, outside the legend. */
#ifndef BK_PLOT_H
#define BK_PLOT_H

#include "util/error.h"

#include <stddef.h>

typedef struct bk_plot_series {
    const char *title;   /* legend entry */
    const double *x, *y; /* n points; a non-finite x or y (or one <= 0 on a log axis) leaves a gap */
    size_t n;
} bk_plot_series;

typedef struct bk_plot {
    const char *png;     /* output path, ending in .png; PATH.gp and PATH.dat are written beside it */
    const char *title, *xlabel, *ylabel;
    int logx, logy;      /* logarithmic axes */
    const bk_plot_series *series;
    int n_series;
    int points;          /* 1: lines with point markers (few points per series), 0: lines */
} bk_plot;

/* What a figure may add to its lines (bk_plot_write_marked). */
typedef struct bk_plot_band {
    const double *lo, *hi; /* a band around series k's y (e.g. mean -/+ std), n values each, or NULL: a
                            * point whose band is not drawable (not finite, <= 0 on a log axis) has none */
} bk_plot_band;

typedef struct bk_plot_marks {
    const bk_plot_band *bands; /* n_series entries (NULL: no bands) */
    double vline;              /* a marked x, e.g. the training length: drawn when finite and either
                                * non-zero or labelled; not in the legend */
    const char *vline_label;   /* its label ("train length"), or NULL */
    /* Small multiples: n_panels > 1 draws one panel per group of series (panel[k] in [0, n_panels): series
     * k's), side by side with the same axes kinds and labels, each with its title and legend; colours,
     * dashes and markers start again in each panel. */
    const int *panel;
    int n_panels;
    const char *const *panel_titles; /* n_panels, or NULL */
} bk_plot_marks;

/* Write PATH.gp and PATH.dat, then run gnuplot on the script to draw PATH.png. When gnuplot is not
 * installed the script and data are still written and BK_ERR_UNSUPPORTED says so (install gnuplot-nox,
 * then run gnuplot on the script). Any other failure (a file, gnuplot's own error) names the path:
 * gnuplot failing gives its standard error; a figure with no drawable point at all is
 * BK_ERR_INVALID before anything is written. gnuplot runs as a child process (no shell). */
int bk_plot_write(const bk_plot *p, bk_error *err);
/* The same with bands and a marked x (m may be NULL: bk_plot_write). */
int bk_plot_write_marked(const bk_plot *p, const bk_plot_marks *m, bk_error *err);

/* A heat map: cell (i, j) of an nx x ny grid, z[j * nx + i], coloured on [zmin, zmax] (white to dark blue)
 * and labelled with its value (2 decimals; a non-finite z is an empty cell). Columns are the categories
 * xs[0..nx) in order (evenly spaced whatever their values, e.g. lengths 128, 256, 1024), rows ys[0..ny)
 * from the bottom. PATH.gp and PATH.dat (lines "i j z") are written beside PATH.png as for bk_plot_write,
 * with the same errors. */
typedef struct bk_heatmap {
    const char *png;     /* output path, ending in .png */
    const char *title, *xlabel, *ylabel, *zlabel;
    const double *xs, *ys, *z;
    int nx, ny;
    double zmin, zmax;
} bk_heatmap;

int bk_heatmap_write(const bk_heatmap *h, bk_error *err);

/* 1 when a gnuplot that can write PNG answers on PATH. */
int bk_plot_available(void);

#endif
