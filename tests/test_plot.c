/* Plots through gnuplot (core/report/plot.h): the script and the data are written and readable, the
 * PNG is drawn (it starts with the PNG signature), log axes and gaps are in the script and the data,
 * paths with spaces and quotes work, the script redraws the figure from another directory, and with no
 * gnuplot on PATH the script is still written and BK_ERR_UNSUPPORTED says what to do. Tests that need
 * gnuplot are skipped when it is not installed (scripts/setup.sh installs gnuplot-nox). */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include "report/plot.h"

#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/bk_test_plot_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}


static int starts_with_png_signature(const char *path)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char head[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t got = fread(head, 1, 8, f);
    fclose(f);
    return got == 8 && memcmp(head, sig, 8) == 0;
}

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && st.st_size > 0;
}

#define N_POINTS 6
static const double xs[N_POINTS] = {64, 128, 256, 512, 1024, 2048};
static const double ya[N_POINTS] = {20.5, 21.0, 22.5, 25.0, 30.0, 41.0};
static double yb[N_POINTS] = {19.0, 19.5, 0, 40.0, 90.0, 300.0}; /* yb[2] set to NaN below */

static bk_plot two_series(const char *png, bk_plot_series *s)
{
    yb[2] = NAN;
    s[0] = (bk_plot_series){"alibi (n=2)", xs, ya, N_POINTS};
    s[1] = (bk_plot_series){"kerple's log", xs, yb, N_POINTS};
    return (bk_plot){png, "perplexity vs length", "evaluation length", "perplexity", 1, 1, s, 2, 1};
}

static void needs_gnuplot(void)
{
    if (!bk_plot_available())
        skip();
}

static void test_draws_png_with_script_and_data(void **state)
{
    (void)state;
    needs_gnuplot();
    char png[512], gp[512], dat[512];
    snprintf(png, sizeof png, "%s/ppl.png", dir);
    snprintf(gp, sizeof gp, "%s/ppl.gp", dir);
    snprintf(dat, sizeof dat, "%s/ppl.dat", dir);
    bk_plot_series s[2];
    bk_plot p = two_series(png, s);
    bk_error err = {0};
    int rc = bk_plot_write(&p, &err);
    if (rc)
        fail_msg("bk_plot_write: %s", err.message);
    assert_true(starts_with_png_signature(png));

    char *script = bk_test_read_all(gp);
    assert_message_has(script, "set terminal pngcairo size 1800,1200"); /* twice 900x600 */
    assert_message_has(script, "set terminal png size 1800,1200");
    assert_message_has(script, "set terminal pdfcairo size 6in,4in"); /* and a PDF beside it */
    assert_message_has(script, "set key outside below center horizontal");
    assert_message_has(script, "set title 'perplexity vs length'");
    assert_message_has(script, "set xlabel 'evaluation length'");
    assert_message_has(script, "set ylabel 'perplexity'");
    assert_message_has(script, "set logscale x 2"); /* 64 .. 2048: a tick per power of two */
    assert_message_has(script, "set logscale y 10");
    assert_message_has(script, "set key");
    assert_message_has(script, "data = here.'ppl.dat'");
    assert_message_has(script, "plot data index 0 using 1:2 with linespoints lc rgb \"#0072B2\" dt 1 lw 1.5 pt 7");
    assert_message_has(script, "title 'alibi (n=2)'");
    assert_message_has(script, "data index 1 using 1:2 with linespoints lc rgb \"#D55E00\" dt 2 lw 1.5 pt 5");
    assert_message_has(script, "title 'kerple''s log'"); /* a quote doubled in a gnuplot string */
    free(script);

    /* two blocks; the NaN of the second series is a gap (a blank line inside its block) */
    char *data = bk_test_read_all(dat);
    assert_message_has(data, "# index 0: alibi (n=2)\n64 20.5\n128 21\n");
    assert_message_has(data, "\n\n\n# index 1: kerple's log\n64 19\n128 19.5\n\n512 40\n1024 90\n2048 300\n");
    free(data);
}

/* Paper style: 16 series get 16 different colours (and dashes and markers that change from one to the
 * next), a band is drawn from columns 3 and 4 of its block, the marked x is a dashed grey arrow outside
 * the legend, the PNG is 1800x1200 and a PDF is drawn beside it. */
static void test_paper_style(void **state)
{
    (void)state;
    needs_gnuplot();
    char png[512], gp[512], dat[512], pdf[512];
    snprintf(png, sizeof png, "%s/style.png", dir);
    snprintf(gp, sizeof gp, "%s/style.gp", dir);
    snprintf(dat, sizeof dat, "%s/style.dat", dir);
    snprintf(pdf, sizeof pdf, "%s/style.pdf", dir);
    enum { NS = 16 };
    double y[NS][N_POINTS], lo[N_POINTS], hi[N_POINTS];
    char titles[NS][16];
    bk_plot_series s[NS];
    for (int k = 0; k < NS; k++) {
        for (int i = 0; i < N_POINTS; i++)
            y[k][i] = 10.0 + k + 0.1 * i;
        snprintf(titles[k], sizeof titles[k], "v%d", k);
        s[k] = (bk_plot_series){titles[k], xs, y[k], N_POINTS};
    }
    for (int i = 0; i < N_POINTS; i++)
        lo[i] = y[0][i] - 0.5, hi[i] = y[0][i] + 0.5;
    lo[3] = NAN; /* no band at this point */
    bk_plot_band bands[NS] = {{lo, hi}};
    const bk_plot_marks marks = {bands, 128.0, "train length", NULL, 0, NULL};
    bk_plot p = {png, "style", "length", "perplexity", 1, 1, s, NS, 1};
    bk_error err = {0};
    if (bk_plot_write_marked(&p, &marks, &err))
        fail_msg("bk_plot_write: %s", err.message);
    assert_true(starts_with_png_signature(png));
    char *script = bk_test_read_all(gp);
    /* every series its own colour */
    char seen[NS][16];
    for (int k = 0; k < NS; k++) {
        char want[64];
        snprintf(want, sizeof want, "data index %d using 1:2 with linespoints lc rgb \"", k);
        const char *at = strstr(script, want);
        assert_non_null(at);
        memcpy(seen[k], at + strlen(want), 7);
        seen[k][7] = '\0';
        for (int j = 0; j < k; j++)
            if (!strcmp(seen[j], seen[k]))
                fail_msg("series %d and %d share the colour %s", j, k, seen[k]);
        snprintf(want, sizeof want, "%.7s\" dt %d lw 1.5 pt", seen[k], k % 4 + 1);
        assert_message_has(at, want);
    }
    assert_message_has(script, "plot data index 0 using 1:3:4 with filledcurves fs transparent solid 0.18");
    assert_message_has(script, "set arrow from 128, graph 0 to 128, graph 1 nohead dt 2");
    assert_message_has(script, "set label 'train length' at 128, graph 0");
    assert_null(strstr(script, "title 'train length'")); /* not a series: not in the legend */
    free(script);
    char *data = bk_test_read_all(dat);
    assert_message_has(data, "# index 0: v0\n64 10 9.5 10.5\n128 10.1 9.6 10.6\n256 10.2 9.7 10.7\n512 10.3 NaN NaN\n");
    free(data);
    assert_true(exists(pdf));
    FILE *f = fopen(pdf, "rb");
    char head[5] = {0};
    assert_non_null(f);
    assert_int_equal(fread(head, 1, 4, f), 4);
    fclose(f);
    assert_string_equal(head, "%PDF");
    /* the PNG's size: 1800 x 1200 (IHDR at byte 16, big-endian) */
    f = fopen(png, "rb");
    unsigned char ihdr[24];
    assert_non_null(f);
    assert_int_equal(fread(ihdr, 1, 24, f), 24);
    fclose(f);
    assert_int_equal((ihdr[16] << 24) | (ihdr[17] << 16) | (ihdr[18] << 8) | ihdr[19], 1800);
    assert_int_equal((ihdr[20] << 24) | (ihdr[21] << 16) | (ihdr[22] << 8) | ihdr[23], 1200);
}

/* Small multiples: 20 series in 4 panels (5 each, colours from the start of the palette in each), one
 * multiplot drawn into the PNG and again into the PDF; one y range for every panel (the data's, 10 .. 29 +
 * 0.1 (N_POINTS - 1), widened 4% on the log axis), the y label once along the figure's edge, the x label
 * on the bottom row, the marked x's label in the title. */
static void test_small_multiples(void **state)
{
    (void)state;
    needs_gnuplot();
    char png[512], gp[512], pdf[512];
    snprintf(png, sizeof png, "%s/panels.png", dir);
    snprintf(gp, sizeof gp, "%s/panels.gp", dir);
    snprintf(pdf, sizeof pdf, "%s/panels.pdf", dir);
    enum { NS = 20 };
    double y[NS][N_POINTS];
    char titles[NS][16];
    bk_plot_series s[NS];
    int panel[NS];
    for (int k = 0; k < NS; k++) {
        for (int i = 0; i < N_POINTS; i++)
            y[k][i] = 10.0 + k + 0.1 * i;
        snprintf(titles[k], sizeof titles[k], "v%d", k);
        s[k] = (bk_plot_series){titles[k], xs, y[k], N_POINTS};
        panel[k] = k / 5;
    }
    static const char *const names[4] = {"alpha", "beta", "gamma", "delta"};
    const bk_plot_marks marks = {NULL, 128.0, "train length", panel, 4, names};
    bk_plot p = {png, "panels", "length", "perplexity", 1, 1, s, NS, 1};
    bk_error err = {0};
    if (bk_plot_write_marked(&p, &marks, &err))
        fail_msg("bk_plot_write_marked: %s", err.message);
    assert_true(starts_with_png_signature(png));
    assert_true(exists(pdf));
    char *script = bk_test_read_all(gp);
    assert_message_has(script, "set multiplot layout 2, 2 title 'panels (dashed: train length)'");
    char want_range[96];
    snprintf(want_range, sizeof want_range, "set yrange [%.10g:%.10g]", 10.0 / 1.04,
             (29.0 + 0.1 * (N_POINTS - 1)) * 1.04);
    assert_message_has(script, want_range);
    assert_message_has(script, "set label 1 'perplexity' at screen 0.015, 0.5 center rotate by 90");
    const char *first = strstr(script, "set title 'alpha'"), *third = strstr(script, "set title 'gamma'");
    assert_non_null(first);
    assert_non_null(third);
    /* inside the panels: no y label on any, the x label on the bottom row only */
    assert_non_null(strstr(first, "set ylabel ''"));
    assert_null(strstr(first, "set ylabel 'perplexity'"));
    assert_int_equal(strncmp(strstr(first, "set xlabel"), "set xlabel ''", 13), 0);
    assert_int_equal(strncmp(strstr(third, "set xlabel"), "set xlabel 'length'", 19), 0);
    for (int k = 0; k < 4; k++) {
        char want[64];
        snprintf(want, sizeof want, "set title '%s'", names[k]);
        assert_message_has(script, want);
    }
    /* the first series of the second panel (block 5) takes the palette's first colour again */
    assert_message_has(script, "plot data index 5 using 1:2 with linespoints lc rgb \"#0072B2\" dt 1");
    assert_message_has(script, "data index 19 using 1:2 with linespoints lc rgb \"#E69F00\" dt 1");
    free(script);
}

static void test_linear_axes_and_gaps(void **state)
{
    (void)state;
    needs_gnuplot();
    char png[512], gp[512], dat[512];
    snprintf(png, sizeof png, "%s/bias.png", dir);
    snprintf(gp, sizeof gp, "%s/bias.gp", dir);
    snprintf(dat, sizeof dat, "%s/bias.dat", dir);
    double x[5] = {0, 1, 2, 3, 4}, y0[5] = {0, -1, -2, -3, -4}, y1[5] = {NAN, INFINITY, -0.5, NAN, -1.5};
    double y2[5] = {NAN, NAN, NAN, NAN, NAN};
    bk_plot_series s[3] = {{"head 0", x, y0, 5}, {"head 1", x, y1, 5}, {"head 2", x, y2, 5}};
    bk_plot p = {png, "T_h(d)", "distance d", "bias", 0, 0, s, 3, 0};
    bk_error err = {0};
    if (bk_plot_write(&p, &err))
        fail_msg("bk_plot_write: %s", err.message);
    assert_true(starts_with_png_signature(png));
    char *script = bk_test_read_all(gp);
    assert_null(strstr(script, "logscale"));
    assert_message_has(script, "with linespoints lc rgb \"#D55E00\" dt 2");
    assert_message_has(script, "# series 3, head 2: no finite value to draw");
    assert_null(strstr(script, "title 'head 2'"));
    /* T_h(d) keeps its underscore: text is not "enhanced" */
    assert_message_has(script, "noenhanced");
    free(script);
    char *data = bk_test_read_all(dat);
    /* leading non-finite values make no gap, an inner one does; the empty series has no block */
    assert_message_has(data, "# index 1: head 1\n2 -0.5\n\n4 -1.5\n");
    assert_null(strstr(data, "head 2"));
    free(data);

    /* a log axis: values that are not positive are gaps too */
    double yl[4] = {1, 0, 10, 100}, xl[4] = {1, 2, 3, 4};
    bk_plot_series sl = {"loss", xl, yl, 4};
    bk_plot pl = {png, "log y", "x", "y", 0, 1, &sl, 1, 0};
    if (bk_plot_write(&pl, &err))
        fail_msg("bk_plot_write: %s", err.message);
    data = bk_test_read_all(dat);
    assert_message_has(data, "# index 0: loss\n1 1\n\n3 10\n4 100\n");
    free(data);
}

static void test_path_with_space_and_redraw(void **state)
{
    (void)state;
    needs_gnuplot();
    char sub[512], png[600], gp[600];
    snprintf(sub, sizeof sub, "%s/my figures 'x'", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(png, sizeof png, "%s/ppl curve.png", sub);
    snprintf(gp, sizeof gp, "%s/ppl curve.gp", sub);
    bk_plot_series s[2];
    bk_plot p = two_series(png, s);
    bk_error err = {0};
    if (bk_plot_write(&p, &err))
        fail_msg("bk_plot_write: %s", err.message);
    assert_true(starts_with_png_signature(png));

    /* the script redraws the figure when run from elsewhere (it finds its data beside itself) */
    assert_int_equal(unlink(png), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (chdir("/") != 0)
            _exit(3);
        execlp("gnuplot", "gnuplot", gp, (char *)NULL);
        _exit(4);
    }
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
    assert_true(starts_with_png_signature(png));
}

static void test_without_gnuplot(void **state)
{
    (void)state;
    char png[512], gp[512], dat[512], empty[512];
    snprintf(png, sizeof png, "%s/none.png", dir);
    snprintf(gp, sizeof gp, "%s/none.gp", dir);
    snprintf(dat, sizeof dat, "%s/none.dat", dir);
    snprintf(empty, sizeof empty, "%s/empty-bin", dir);
    assert_int_equal(mkdir(empty, 0755), 0);
    const char *saved = getenv("PATH");
    char *old = strdup(saved ? saved : "/usr/bin:/bin");
    setenv("PATH", empty, 1);
    bk_plot_series s[2];
    bk_plot p = two_series(png, s);
    bk_error err = {0};
    int rc = bk_plot_write(&p, &err);
    int available = bk_plot_available();
    setenv("PATH", old, 1);
    free(old);
    assert_int_equal(rc, BK_ERR_UNSUPPORTED);
    assert_int_equal(available, 0);
    assert_message_has(err.message, "gnuplot was not found on PATH");
    assert_message_has(err.message, gp);
    assert_message_has(err.message, "gnuplot-nox");
    assert_true(exists(gp));
    assert_true(exists(dat));
    assert_false(exists(png));
}

static void test_gnuplot_error_is_reported(void **state)
{
    (void)state;
    needs_gnuplot();
    /* the directory of the image cannot be written: the data file fails first, naming it */
    char png[512];
    snprintf(png, sizeof png, "%s/no such dir/x.png", dir);
    bk_plot_series s[2];
    bk_plot p = two_series(png, s);
    bk_error err = {0};
    assert_int_equal(bk_plot_write(&p, &err), BK_ERR_IO);
    assert_message_has(err.message, "cannot write plot data");
    assert_message_has(err.message, "no such dir/x.dat");

    /* gnuplot failing: a stand-in on PATH that complains on its standard error and exits 1, then one
     * that exits 0 but draws nothing */
    char bin[512], fake[600];
    snprintf(bin, sizeof bin, "%s/fake-bin", dir);
    assert_int_equal(mkdir(bin, 0755), 0);
    snprintf(fake, sizeof fake, "%s/gnuplot", bin);
    snprintf(png, sizeof png, "%s/fails.png", dir);
    p.png = png;
    const char *saved = getenv("PATH");
    char *old = strdup(saved ? saved : "/usr/bin:/bin");
    setenv("PATH", bin, 1);
    FILE *f = fopen(fake, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\necho \"line 12: unknown terminal type\" >&2\necho \"second line\" >&2\nexit 1\n");
    fclose(f);
    chmod(fake, 0755);
    int rc_fail = bk_plot_write(&p, &err);
    char failed[BK_ERROR_MESSAGE_MAX];
    memcpy(failed, err.message, sizeof failed);
    f = fopen(fake, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\nexit 0\n");
    fclose(f);
    int rc_nothing = bk_plot_write(&p, &err);
    setenv("PATH", old, 1);
    free(old);
    assert_int_equal(rc_fail, BK_ERR_IO);
    assert_message_has(failed, "plot '");
    assert_message_has(failed, "fails.png': gnuplot failed on '");
    assert_message_has(failed, "fails.gp': line 12: unknown terminal type | second line");
    assert_int_equal(rc_nothing, BK_ERR_IO);
    assert_message_has(err.message, "fails.gp' but wrote no PNG image there");
}

static void test_bad_input(void **state)
{
    (void)state;
    bk_error err = {0};
    bk_plot_series s[2];
    bk_plot p = two_series("/tmp/x.svg", s);
    assert_int_equal(bk_plot_write(&p, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "'/tmp/x.svg': the output path must end in .png");
    double nan[2] = {NAN, NAN};
    bk_plot_series sn = {"nothing", nan, nan, 2};
    char png[512];
    snprintf(png, sizeof png, "%s/nothing.png", dir);
    bk_plot pn = {png, "t", "x", "y", 0, 0, &sn, 1, 0};
    assert_int_equal(bk_plot_write(&pn, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "nothing to draw");
    assert_message_has(err.message, "nothing.png");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_draws_png_with_script_and_data),
        cmocka_unit_test(test_paper_style),
        cmocka_unit_test(test_small_multiples),
        cmocka_unit_test(test_linear_axes_and_gaps),
        cmocka_unit_test(test_path_with_space_and_redraw),
        cmocka_unit_test(test_without_gnuplot),
        cmocka_unit_test(test_gnuplot_error_is_reported),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
