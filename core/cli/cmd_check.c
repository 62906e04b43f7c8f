/* biaskit check: the conformance checks of one plugin (core/check/check.h), one line per check. */
#include "check/check.h"
#include "cli/args.h"
#include "cli/commands.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bk_cmd_check(int argc, char **argv);

static const char help[] =
    "usage: biaskit check <NAME|PATH> [--layers N] [--heads N] [--dim N] [--length L] [--vocab V]\n"
    "                     [--set KEY=VALUE]... [--distances D] [--max-distance N] [--seeds N]\n"
    "                     [--timeout S] [--allow-increasing] [--tolerance X] [--params V1,V2,...]\n\n"
    "Conformance checks for plugin authors. Loads the plugin (a name on the search path, or a path to\n"
    "its .so) and prints one line per check, PASS, FAIL, SKIP or WARN, then 'N passed, N failed,\n"
    "N skipped' (and ', N warnings' when there are any: they do not change the exit status):\n\n"
    "  descriptor     ABI, name/version/summary, capabilities vs function pointers, option declarations,\n"
    "                 by the loader's own rules: what the engine refuses (capability or flag bits it does\n"
    "                 not know, a capability without its function, ...) fails the load, with its message\n"
    "  create         create() with the default configuration; with 0 heads, 1 head, an odd d_head; and\n"
    "                 with bad values of every option (numbers -1, 0, +-1e30, nan, +-inf; strings \"\" and\n"
    "                 \"no-such-value\"; arrays empty, of 1 and n_heads+1 values, negative, huge, nan):\n"
    "                 each must fail with a message, or succeed with finite outputs (the table over\n"
    "                 train_length distances; the ABI 2 outputs at train_length, within their\n"
    "                 contracts); a crash, hang or exit() fails\n"
    "  tables         finite up to --distances (initial and random projected parameters); T[h][d] does\n"
    "                 not depend on the number of distances asked for\n"
    "  long-range     (TABLE) the table up to --max-distance (one table() call with N + 1 distances),\n"
    "                 read at every distance below 4096 and 64 geometric points per octave beyond, at\n"
    "                 the initial parameters, the random projected ones, and 9 corners (every entry\n"
    "                 1e-6, 1 or 1e3, all +, all - or random signs, then param_project; corners it\n"
    "                 leaves non-finite are skipped): every value finite; no pole (a sign change\n"
    "                 between neighbouring distances, |T| rising towards it on both sides, jumping\n"
    "                 by more than 1000 x the head's median |T|); T(d) <= 1e6 x max(1, d / 4096)\n"
    "                 at the initial parameters (1e6 up to distance 4096, at most linear growth\n"
    "                 beyond; large negative values are harmless). A failure names the head, the\n"
    "                 distance, the value and the parameters (the first 8, by name). A NaN below\n"
    "                 --distances is the tables item's: then this is a SKIP\n"
    "  long-range-coordinate, long-range-scale, long-range-mask, long-range-rotary\n"
    "                 the ABI 2 capabilities the same way: coordinate() at length --max-distance\n"
    "                 (phi, rscale, u(i, i) within the contract; the grid table finite) at the same\n"
    "                 parameter sets; scale() finite, and |s| <= 1e4 at the initial and random sets;\n"
    "                 mask() valid at L, 4L, ... --max-distance and the same at every length (a window\n"
    "                 that depends on the length fails); rotary_ctx() frequencies and amplitude finite\n"
    "                 and > 0 that far (a change with the length is allowed and said)\n"
    "  long-range-content\n"
    "                 (CONTENT) content() of --max-distance tokens (fewer when x would pass 8 MiB),\n"
    "                 x in [-1, 1], [-1e3, 1e3], +-1e4 and 0, at the same parameter sets: every step\n"
    "                 finite and >= 0 (a defect within the content item's tokens is its: a SKIP)\n"

    "  shape          (TABLE; COORDINATE: the bias along the last row) each head over the same grid\n"
    "                 at the initial parameters (and the random ones): decreasing with distance\n"
    "                 (recency), increasing, flat or not monotonic; a head that increases (prefers\n"
    "                 distant tokens) is a WARN, unless --allow-increasing or param_init is random\n"
    "  coordinate     (COORDINATE) coordinate_points() in 2 .. 1048576; the table over that grid of u\n"
    "                 finite (initial and random parameters; a grid, not distances: no prefix check);\n"
    "                 coordinate() at the training length L (in training and in evaluation), 4L, 16L,\n"
    "                 ... and --distances (distances = rows = length), initial and random parameters:\n"
    "                 phi finite, >= 0, non-decreasing; rscale finite, >= 0; u(i, i) = phi[i] rscale[i]\n"
    "                 <= 1 + 1e-5 (the coordinate stays in [0, 1])\n"
    "  scale          (SCALE) scale() finite at the same lengths and parameters; any sign\n"
    "  content        (CONTENT) content() of 1, 7 and 4L tokens, x in [-1, 1] and [-10, 10], initial and\n"
    "                 random parameters: every step written, finite, >= 0, the same bits twice;\n"
    "                 content_backward adds into dtheta and into dx, and matches central differences\n"
    "                 of L = sum w*steps through theta and through x (7 and 33 tokens)\n"
    "  count          (COUNT) count(): 2 .. 1048576 position vectors and a finite pos_scale, the same on\n"
    "                 every call; count_vectors() finite and the same bits twice, initial and random\n"
    "                 parameters\n"
    "  mask           (MASK) window >= 1, sinks >= 0, distance_cap >= 0 at the same lengths; what it\n"
    "                 keeps, in words, or how it changes with the length\n"
    "  rotary-ctx     (rotary_ctx) d_head/2 finite frequencies and an amplitude finite and > 0 at L/4,\n"
    "                 L/2, L (training and not), 2L, 8L, 64L; when the answer at L equals\n"
    "                 rotary_frequencies() (unscaled), every shorter length gives the same answer (a\n"
    "                 dynamic scaling is s = max(1, length / L))\n"
    "  gradients      table_backward / embed_backward add (+=) and match central differences of\n"
    "                 L = sum dtable*T (L = sum out*R), dtable ~ U[-1,1], computed in float64 at 64,\n"
    "                 300 and 4097 distances (the last within --distances; embed: positions): steps\n"
    "                 0.1 x max(|theta|, 0.1 or 1e-3) / 1.4^k, Ridders-extrapolated; relative error\n"
    "                 <= --tolerance (1e-3), the denominator at least 5% of sum |dtable dT/dtheta|\n"
    "                 (where the sum cancels); up to 256 (embed: 64) parameter entries per case. The\n"
    "                 same for the grid's table_backward, coordinate_backward (L = sum w_phi*phi +\n"
    "                 w_r*rscale), scale_backward (L = sum dscale*s) and count_vectors_backward (L =\n"
    "                 sum dE*E), at the initial parameters and random ones, over the grid, the\n"
    "                 position vectors or at lengths L and 4L (training).\n"
    "                 Kinks (max, |x|, ReLU): an entry whose central difference disagrees gets a closer\n"
    "                 look: one-sided differences from steps <= 2.5e-4 x max(|theta|, 0.1); where they\n"
    "                 agree, the gradient must match them; where they differ (a kink at theta), it must\n"
    "                 match at theta +- 1e-3 x max(|theta|, 0.1) on both sides (the item names the\n"
    "                 entry); else, on both sides, the difference quotient over [theta, theta +- s] must\n"
    "                 match the analytic gradient averaged over the interval (64 or 512 points, s = 4e-3,\n"
    "                 0.1 or 1 x max(|theta|, 0.1): kinks denser than any step, as the ReLUs of a table\n"
    "                 over a fine grid), within 4 standard deviations of the outputs' float rounding.\n"
    "                 Where L still disagrees (TABLE), each table entry decides alone: dT[h][d]/dtheta_i\n"
    "                 from table_backward with a one-hot dtable against Ridders' central differences of\n"
    "                 T[h][d] (every entry of the failing table, and 8 distances per head from 0 to\n"
    "                 --distances - 1, geometric), each within the tolerance relative to max(|analytic|,\n"
    "                 |numeric|) plus 4 ulp(T[h][d]) / step (the float rounding of the entry): a small\n"
    "                 parameter's effect drowned in the rounding of large entries no longer fails. A FAIL\n"
    "                 lists the 5 worst entries (parameter, theta, head, distance, analytic, numeric,\n"
    "                 rel. error, tolerance) and the parameter set (the first 8 values)\n"
    "  project        idempotent (bitwise) and keeps wild parameters (random sign, 10^U(-3,6)) finite\n"
    "                 with finite tables (and grid, coordinates, scales)\n"
    "  param-info     (param_info) per tensor: bounds not NaN, lower <= upper, lower not +inf, upper\n"
    "                 not -inf; the init text NUL-terminated; every element inside the bounds after\n"
    "                 param_init + param_project (initial, random and wild parameters); SKIP without it\n"
    "  determinism    repeated calls of every function give bit-identical results (the ABI 2 ones too)\n"
    "  segment, embed, rotary   the contracts of those capabilities\n"
    "  CUDA           when a GPU answers (else SKIP): table_cuda vs table, |cuda - host| <= 1e-5 |host|\n"
    "                 + 1e-6 max|head|; table_backward_cuda vs table_backward, <= 1e-4 (|host| + max|host|);\n"
    "                 embed_cuda vs embed, <= 1e-5 |host| + 1e-6 max|host|; embed_backward_cuda vs\n"
    "                 embed_backward, <= 1e-4 (|host| + max|host|). Without a GPU, a hand-written CUDA\n"
    "                 path is said to be unverified; a <biaskit/table_plugin.h> plugin's kernels run on\n"
    "                 the host instead (cuda-table-emulated, cuda-backward-emulated: the kernels' own\n"
    "                 per-thread code over their grid and reduction order, same tolerances), and each\n"
    "                 __CUDA_ARCH__ in its source file is a WARN (cuda-device-branch)\n\n"
    "Every call into the plugin runs in a child process: a crash, an exit() or a hang is reported with\n"
    "its signal, exit status or time limit, and the checks go on. Loading too: a child loads the plugin\n"
    "first (dlopen and the library's constructors, the entry point, the descriptor); a load that\n"
    "crashes, exits or hangs is one FAIL line naming the file, the stage and what happened.\n\n"
    "  --layers N --heads N --dim N --length L --vocab V\n"
    "                the model the plugin is created for (default 2, 12, 192, 128, 256: d_head 16)\n"
    "  --set K=V     a plugin option, written as in the experiment file's [[term]] table (repeatable):\n"
    "                --set slope_scale=2  --set 'slopes=[1, 0.5]'  --set 'variant=\"power\"'\n"
    "  --distances D longest table checked, and the longest length of the coordinate, scale and mask\n"
    "                checks (default 65536)\n"
    "  --max-distance N\n"
    "                longest distance of the long-range and shape checks (default 1048576; the\n"
    "                table is heads x (N + 1) floats, 48 MiB with 12 heads; N is lowered, with a\n"
    "                note, where that would pass 256 MiB)\n"
    "  --allow-increasing\n"
    "                heads that increase with distance are intended: the shape item passes\n"
    "  --seeds N     random parameter sets for the table, coordinate, scale and gradient checks\n"
    "                (default 3)\n"
    "  --timeout S   time limit of each child process in seconds (default 60): S seconds of its CPU\n"
    "                time, so that a busy machine does not fail a correct plugin; a child that waits\n"
    "                (not computing) stops after S seconds on the clock, any child after 20 S; the\n"
    "                child that loads the plugin gets S seconds on the clock\n"
    "  --tolerance X relative tolerance of the gradient checks, a finite number > 0 (default 0.001)\n"
    "  --params V1,V2,...\n"
    "                the gradient checks and the long-range probes start from these parameters\n"
    "                (exactly param_count() numbers, in the order of 'biaskit plugins NAME';\n"
    "                param_project applied, and the items say when it moved any), before the random\n"
    "                sets; a 'params' item says whether the table is finite there\n\n"
    "exit status: 0 no check failed (skips and warnings allowed), 1 a check failed or the plugin does\n"
    "not load, "
    "2 bad usage.\n";

/* The header (the first time), then the item. */
static void print_item(void *ctx, const bk_check_item *it)
{
    const char **header = ctx;
    if (*header) {
        printf("%s\n", *header);
        *header = NULL;
    }
    printf("%s  %s\n", bk_check_status_name(it->status), it->text);
    fflush(stdout);
}

/* The integer flags into opt; BK_OK or a usage error. */
static int read_geometry(const bk_args *args, bk_check_options *opt, bk_error *err)
{
    static const struct {
        const char *name;
        long min, max;
    } flags[] = {{"layers", 1, 1024}, {"heads", 1, 1024},     {"dim", 1, 65536},   {"length", 1, 1L << 24},
                 {"vocab", 2, 1L << 20}, {"distances", 1, 1L << 20}, {"seeds", 1, 100}, {"timeout", 1, 86400},
                 {"max-distance", 1, 1L << 26}};
    long values[9] = {opt->layers, opt->heads, opt->dim, opt->length, opt->vocab, opt->max_distances, opt->n_seeds,
                      (long)opt->timeout_s, opt->max_distance};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const char *v = bk_args_get(args, flags[i].name);
        int rc = v ? bk_args_int(flags[i].name, v, flags[i].min, flags[i].max, &values[i], err) : BK_OK;
        if (rc)
            return rc;
    }
    if (values[2] % values[1] != 0)
        return bk_fail(err, BK_ERR_USAGE, "--dim: %ld is not a multiple of the number of heads (%ld)", values[2],
                       values[1]);
    opt->layers = (int32_t)values[0], opt->heads = (int32_t)values[1], opt->dim = (int32_t)values[2];
    opt->length = (int32_t)values[3], opt->vocab = (int32_t)values[4], opt->max_distances = (int32_t)values[5];
    opt->n_seeds = (int)values[6], opt->timeout_s = (unsigned)values[7], opt->max_distance = (int32_t)values[8];
    opt->allow_increasing = bk_args_get(args, "allow-increasing") != NULL;
    return BK_OK;
}

/* --tolerance X: a finite number > 0. */
static int read_tolerance(const bk_args *args, bk_check_options *opt, bk_error *err)
{
    const char *v = bk_args_get(args, "tolerance");
    if (!v)
        return BK_OK;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || !(x > 0.0))
        return bk_fail(err, BK_ERR_USAGE, "--tolerance: expected a finite number > 0 (a relative error, e.g. 0.01), "
                       "got '%s'", v);
    opt->tolerance = x;
    return BK_OK;
}

/* --params V1,V2,...: finite numbers (as float) into a new array *out (the caller frees it). */
static int read_params(const bk_args *args, bk_check_options *opt, float **out, bk_error *err)
{
    const char *v = bk_args_get(args, "params");
    *out = NULL;
    if (!v)
        return BK_OK;
    size_t n = 1;
    for (const char *p = v; *p; p++)
        n += *p == ',';
    float *values = malloc(n * sizeof *values);
    if (!values)
        return bk_fail(err, BK_ERR_NOMEM, "--params: out of memory for %zu values", n);
    const char *p = v;
    for (size_t i = 0; i < n; i++) {
        char *end;
        double x = strtod(p, &end);
        while (*end == ' ')
            end++;
        if (end == p || (*end && *end != ',') || !isfinite(x) || !isfinite((float)x)) {
            free(values);
            return bk_fail(err, BK_ERR_USAGE, "--params: value %zu ('%.*s') is not a finite number (expected "
                           "comma-separated numbers, one per parameter: V1,V2,...)", i + 1, (int)strcspn(p, ","), p);
        }
        values[i] = (float)x;
        p = *end ? end + 1 : end;
    }
    opt->params = values;
    opt->n_params = (int64_t)n;
    *out = values;
    return BK_OK;
}

int bk_cmd_check(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0},   {"layers", 1, 0},    {"heads", 1, 0},
                                        {"dim", 1, 0},    {"length", 1, 0},    {"vocab", 1, 0},
                                        {"set", 1, 1},    {"distances", 1, 0}, {"seeds", 1, 0},
                                        {"timeout", 1, 0}, {"max-distance", 1, 0}, {"allow-increasing", 0, 0},
                                        {"tolerance", 1, 0}, {"params", 1, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit check", &args, &err))
        return bk_report(&err);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    if (args.n_positional != 1) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit check: expected one plugin name or path; see 'biaskit check --help'");
        return bk_report(&err);
    }
    bk_check_options opt;
    bk_check_options_default(&opt);
    const char *sets[BK_ARGS_MAX];
    opt.n_sets = bk_args_all(&args, "set", sets, BK_ARGS_MAX);
    opt.sets = sets;
    float *params = NULL;
    if (read_geometry(&args, &opt, &err) || read_tolerance(&args, &opt, &err) ||
        read_params(&args, &opt, &params, &err))
        return bk_report(&err);

    bk_registry reg;
    if (bk_registry_init(&reg, &err)) {
        free(params);
        return bk_report(&err);
    }
    char text[512];
    snprintf(text, sizeof text, "checking plugin %s: %d layers, %d heads, d_model %d, d_head %d, vocab %d, "
             "train_length %d", args.positional[0], opt.layers, opt.heads, opt.dim, opt.dim / opt.heads, opt.vocab,
             opt.length);
    const char *header = text; /* printed with the first item: a usage error prints nothing else */
    bk_check_counts counts;
    int rc = bk_check_plugin(&reg, args.positional[0], &opt, print_item, &header, &counts, &err);
    bk_registry_free(&reg);
    free(params);
    if (rc)
        return bk_report(&err);
    if (counts.warned) /* the line without warnings stays as it was: scripts read it */
        printf("%d passed, %d failed, %d skipped, %d warning%s\n", counts.passed, counts.failed, counts.skipped,
               counts.warned, counts.warned == 1 ? "" : "s");
    else
        printf("%d passed, %d failed, %d skipped\n", counts.passed, counts.failed, counts.skipped);
    return counts.failed ? 1 : 0;
}
