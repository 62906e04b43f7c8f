/* Line plots through gnuplot: every figure biaskit makes (report, trf, erf) is a PNG with, next to it,
 * the gnuplot script that drew it (PATH.gp) and its data (PATH.dat), so a user can restyle a figure by
 * editing the script and running `gnuplot PATH.gp`. No image is encoded here.
 *
 * PATH is the image's path without ".png": figs/ppl.png comes with figs/ppl.gp and figs/ppl.dat. The
 * script finds its data and names its image relative to its own location, so `gnuplot figs/ppl.gp`
 * works from any directory. The data holds one block per series (gnuplot `index N`, two blank lines
 * apart; a series with nothing drawable has none); a blank line inside a block is a gap. The script
 * uses the pngcairo terminal when gnuplot has it, else png, 900x600; text is not "enhanced" (an
 * underscore is an underscore); a logarithmic x axis is base 2 over at most 2^12, else base 10. */
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

/* Write PATH.gp and PATH.dat, then run gnuplot on the script to draw PATH.png. When gnuplot is not
 * installed the script and data are still written and BK_ERR_UNSUPPORTED says so (install gnuplot-nox,
 * then run gnuplot on the script). Any other failure (a file, gnuplot's own error) names the path:
 * gnuplot failing gives its standard error; a figure with no drawable point at all is
 * BK_ERR_INVALID before anything is written. gnuplot runs as a child process (no shell). */
int bk_plot_write(const bk_plot *p, bk_error *err);

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
