/* biaskit report: the paper-style report of a sweep (core/report/report.h, docs/reports.md). */
#include "cli/args.h"
#include "cli/commands.h"
#include "report/report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char help[] =
    "usage: biaskit report <sweep dir> [--out DIR] [--clip F]\n\n"
    "Reads a directory written by 'biaskit sweep' (sweep.json, and in every run's directory its\n"
    "status.json, eval.json, eval-sliding.json, checkpoint and metrics.jsonl) and writes:\n\n"
    "  report.md    perplexity by evaluation length x variant, per corpus and grid point and per\n"
    "               protocol, as mean +- sample std over seeds (n shown); the figures; the runs that\n"
    "               failed or are missing, each with its error\n"
    "  results.csv  the same numbers, one row per corpus, grid point, variant, protocol and length\n"
    "  runs.csv     every run's loss and perplexity at every length\n"
    "  figures      perplexity vs length, loss at each position at the longest length, each variant's\n"
    "               learned bias T_h(d) per head (from its first seed's checkpoint), and the learned\n"
    "               mixing weights over training: NAME.png, with the gnuplot script NAME.gp that drew\n"
    "               it from NAME.dat (restyle: edit NAME.gp, run 'gnuplot NAME.gp')\n\n"
    "Figures need gnuplot (Debian: gnuplot-nox); without it the scripts and data are still written.\n"
    "Only regular files are read (a FIFO or a device in a file's place is refused by name). An\n"
    "evaluation of another step than the run's checkpoint is set aside and the run listed.\n\n"
    "  --out DIR    write the report there (default: <sweep dir>/report)\n"
    "  --clip F     draw a variant whose perplexity exceeds F x the median of the variants' at the\n"
    "               longest length in a panel of its own (outliers), beside the others (F > 1)\n\n"
    "The perplexity figures draw more than 16 variants as small multiples, one panel per family\n"
    "(the name up to its first '-': kerple-log and kerple-power are 'kerple').\n";

/* The report of sweep directory `dir` into `out` (NULL: dir/report), with the summary lines; the exit
 * status (also `biaskit sweep --report`). */
int bk_report_sweep_dir(const char *dir, const char *out, double clip)
{
    bk_error err;
    bk_sweep_report_options o = {dir, out, stderr, clip};
    bk_sweep_report_summary sum;
    if (bk_sweep_report(&o, &sum, &err))
        return bk_report(&err);
    printf("report: %s\n", sum.report);
    printf("numbers: %s (and runs.csv beside it)\n", sum.csv);
    printf("runs: %d, %d finished, %d failed, missing or incomplete%s\n", sum.runs, sum.done, sum.problems,
           sum.problems ? " (listed in the report)" : "");
    printf("figures: %d drawn", sum.figures);
    if (sum.undrawn)
        printf(", %d not drawn (no gnuplot: their .gp scripts and .dat data are written)", sum.undrawn);
    if (sum.figure_errors)
        printf(", %d failed", sum.figure_errors);
    printf("\n");
    if (sum.figure_errors) {
        bk_fail(&err, BK_ERR_IO, "the report is written, but %d figure%s could not be drawn (the report says which); "
                "the first: %s", sum.figure_errors, sum.figure_errors == 1 ? "" : "s", sum.first_figure_error);
        return bk_report(&err);
    }
    return 0;
}

int bk_cmd_report(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0}, {"out", 1, 0}, {"clip", 1, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit report", &args, &err))
        return bk_report(&err);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    if (args.n_positional != 1) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit report: expected one sweep directory; see 'biaskit report --help'");
        return bk_report(&err);
    }
    double clip = 0.0;
    const char *ct = bk_args_get(&args, "clip");
    if (ct) {
        char *end = NULL;
        clip = strtod(ct, &end);
        if (!*ct || *end || !(clip > 1.0) || !isfinite(clip)) {
            bk_fail(&err, BK_ERR_USAGE, "biaskit report: --clip '%s': expected a number > 1 (a factor of the median "
                    "perplexity)", ct);
            return bk_report(&err);
        }
    }
    return bk_report_sweep_dir(args.positional[0], bk_args_get(&args, "out"), clip);
}
