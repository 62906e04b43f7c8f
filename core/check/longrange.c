/* biaskit check: the distance table far beyond the distances the other checks look at (the items
 * "long-range" and "shape"). A learnable bias can be finite at every distance up to --distances and
 * still break further out: T_h(d) = -a_h d / (1 + b_h d) with a projection that lets b_h < 0 has a
 * pole at d = 1/|b_h|, reached only at some parameters. So the table is computed once per parameter
 * set up to --max-distance (one table() call with max + 1 distances) and inspected on a grid: every
 * distance below CK_LR_DENSE, then CK_LR_PER_OCTAVE geometric points per octave up to the maximum.
 * Parameter sets: the initial ones, the random projected ones of the other checks, and "corners":
 * every entry set to 1e-6, 1 or 1e3 with the sign +, - or random per entry, then param_project (the
 * region the projection allows;
 * a corner the projection leaves non-finite is skipped: the "project" item covers that). */
#include "check/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK_LR_DENSE 4096       /* every distance below this is inspected */
#define CK_LR_PER_OCTAVE 64    /* then this many geometric grid points per octave */
#define CK_LR_POLE_JUMP 1e3    /* a sign change between neighbouring distances that jumps by more than
                                * this times the head's median |T| over the grid, |T| rising towards it
                                * on both sides, is a pole */
#define CK_LR_FLAT_REL 1e-6    /* shape: steps within this times max |T_h| count as flat (float noise) */
#define CK_LR_PRINT_PARAMS 8   /* parameter values printed with a failure */
#define CK_LR_MAX_FLOATS (1L << 26) /* the table at most 256 MiB: with many heads the maximum is lowered */

/* Corners: every entry at one magnitude with sign +, - or random per entry (a pole needs mixed signs:
 * -a d / (1 + b d) with a > 0 and b < 0). */
static const double corner_magnitudes[] = {1e-6, 1.0, 1e3};
enum { CORNER_SIGNS = 3 };

/* The grid: 0 .. min(max, CK_LR_DENSE - 1), then round(CK_LR_DENSE 2^(k / CK_LR_PER_OCTAVE)) up to
 * max, and max itself; increasing, no repeats. Returns the count; *out malloc'd (NULL when out of
 * memory). */
static size_t make_grid(int32_t max, int32_t **out)
{
    size_t cap = (size_t)CK_LR_DENSE + 40 * CK_LR_PER_OCTAVE + 2, n = 0;
    int32_t *g = malloc(cap * sizeof *g);
    *out = g;
    if (!g)
        return 0;
    for (int32_t d = 0; d <= max && d < CK_LR_DENSE; d++)
        g[n++] = d;
    for (int k = 1; max >= CK_LR_DENSE && n + 1 < cap; k++) {
        double x = CK_LR_DENSE * pow(2.0, (double)k / CK_LR_PER_OCTAVE);
        int32_t d = x >= (double)max ? max : (int32_t)lround(x);
        if (d > g[n - 1])
            g[n++] = d;
        if (d == max)
            break;
    }
    return n;
}

typedef struct lr_set {
    char label[96]; /* "the initial parameters", "random parameter set 2", "corner: every entry 1e+03" */
    int initial;    /* the |T| bound applies (the initial parameters only) */
} lr_set;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* First problem of head h over the grid: a non-finite value, a pole, or (when `bounded`) T(d) beyond
 * BK_CHECK_LONG_RANGE_BOUND x max(1, d / CK_LR_DENSE) (growth up to linear allowed: the bound is 1e6 up to distance
 * 4096, a slope of 244 per token beyond); 0, or 1 with what in `what`, or 2 when it is a non-finite value below `known` (a
 * distance the table-finite and table-random items look at: they report it). `scratch` holds n
 * doubles. */
static int inspect_head(const float *row, const int32_t *grid, size_t n, int32_t known, int bounded, double *scratch, char *what,
                        size_t size)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(row[grid[i]])) {
            snprintf(what, size, "is %g at distance %d", (double)row[grid[i]], grid[i]);
            return grid[i] < known ? 2 : 1;
        }
    for (size_t i = 0; i < n; i++)
        scratch[i] = fabs((double)row[grid[i]]);
    qsort(scratch, n, sizeof *scratch, cmp_double);
    double median = scratch[n / 2];
    for (size_t i = 1; i < n; i++) {
        double a = row[grid[i - 1]], b = row[grid[i]];
        if (!((a < 0 && b > 0) || (a > 0 && b < 0)))
            continue;
        /* The integer step where the sign changes (the table holds every distance). */
        int32_t e = grid[i - 1];
        while (e + 1 < grid[i] && (row[e + 1] < 0) == (a < 0) && row[e + 1] != 0)
            e++;
        double te = row[e], tf = row[e + 1];
        if ((te < 0) == (tf < 0) || te == 0 || tf == 0)
            continue; /* the sign passed through 0: a zero crossing, not a pole */
        int32_t right = e + 2 <= grid[n - 1] ? e + 2 : -1; /* the table holds distances 0 .. grid[n - 1] */
        int rising_left = e == 0 || fabs(te) > fabs((double)row[e - 1]);
        int rising_right = right < 0 || fabs(tf) > fabs((double)row[right]);
        if (rising_left && rising_right && fabs(tf - te) > CK_LR_POLE_JUMP * median) {
            snprintf(what, size, "has a pole between distances %d and %d: %.6g then %.6g (a sign change jumping by "
                     "more than %g x the head's median |T| %.3g)", e, e + 1, te, tf, CK_LR_POLE_JUMP, median);
            return 1;
        }
    }
    if (bounded)
        for (size_t i = 0; i < n; i++) {
            /* Only a positive bias is bounded: one that grows faster than linearly makes the farthest keys win
             * every softmax. Large negative values only make keys negligible (a Gaussian -w d^2, a mask-like
             * bias), which is harmless; linear growth is allowed (a slope of 1 is 1e6 at distance 1e6). */
            double bound = BK_CHECK_LONG_RANGE_BOUND * fmax(1.0, (double)grid[i] / CK_LR_DENSE);
            if ((double)row[grid[i]] > bound) {
                snprintf(what, size, "is %.6g at distance %d: T beyond %g x max(1, d / %d) = %.6g", (double)row[grid[i]],
                         grid[i], BK_CHECK_LONG_RANGE_BOUND, CK_LR_DENSE, bound);
                return 1;
            }
        }
    return 0;
}

/* Shape of head h over the grid: -1 decreasing (recency), +1 increasing, 0 flat, 2 neither. */
static int head_shape(const float *row, const int32_t *grid, size_t n)
{
    double hi = 0;
    for (size_t i = 0; i < n; i++)
        hi = fmax(hi, fabs((double)row[grid[i]]));
    double tol = CK_LR_FLAT_REL * hi;
    int up = 0, down = 0;
    for (size_t i = 1; i < n; i++) {
        double step = (double)row[grid[i]] - (double)row[grid[i - 1]];
        up |= step > tol;
        down |= step < -tol;
    }
    return up && down ? 2 : up ? 1 : down ? -1 : 0;
}

/* "0-3, 5, 7-11" for the heads h with shape[h] == want into b; the count. */
static int heads_list(strbuf *b, const int *shape, int32_t H, int want)
{
    int count = 0;
    for (int32_t h = 0; h < H; h++) {
        if (shape[h] != want || (h > 0 && shape[h - 1] == want))
            continue;
        int32_t e = h;
        while (e + 1 < H && shape[e + 1] == want)
            e++;
        ck_sb_printf(b, "%s%d", count ? ", " : "", h);
        if (e > h)
            ck_sb_printf(b, "-%d", e);
        count += e - h + 1;
    }
    return count;
}

static void params_text(const instance *in, strbuf *b)
{
    size_t n = ck_n_params(in);
    if (n == 0) {
        ck_sb_printf(b, "no parameters");
        return;
    }
    for (size_t i = 0; i < n && i < CK_LR_PRINT_PARAMS; i++) {
        char name[64];
        ck_entry_name(in, (int64_t)i, name, sizeof name);
        ck_sb_printf(b, "%s%s = %.6g", i ? ", " : "", name, (double)in->theta[i]);
    }
    if (n > CK_LR_PRINT_PARAMS)
        ck_sb_printf(b, ", ... (%zu values)", n);
}

void ck_unit_longrange(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (ck_open_default(c, "long-range", c->opt->seed, 0, &in))
        return;
    int32_t max = c->opt->max_distance, H = c->geo.n_heads;
    if ((long)H * ((long)max + 1) > CK_LR_MAX_FLOATS)
        max = (int32_t)(CK_LR_MAX_FLOATS / H - 1);
    int32_t D = max + 1;
    char lowered[160] = "";
    if (max < c->opt->max_distance)
        snprintf(lowered, sizeof lowered, " (--max-distance %d lowered to %d: %d heads, the table within %ld MiB)",
                 c->opt->max_distance, max, H, CK_LR_MAX_FLOATS * 4 / (1L << 20));
    int32_t *grid = NULL;
    size_t n = make_grid(max, &grid);
    size_t np = ck_n_params(&in);
    float *t = ck_guarded_alloc((size_t)H * (size_t)D);
    double *scratch = malloc((n ? n : 1) * sizeof *scratch);
    int *shape = calloc((size_t)H, sizeof *shape);
    strbuf increasing = {0}; /* the increasing heads of random sets */
    if (!grid || !t || !scratch || !shape) {
        ck_item(c, BK_CHECK_FAIL, "long-range", "out of memory for a %d x %d table", H, D);
        goto done;
    }
    char why[BIASKIT_ERROR_MESSAGE_MAX + 400];
    int n_random = np ? c->opt->n_seeds : 0;
    int n_corners = np ? (int)(sizeof corner_magnitudes / sizeof corner_magnitudes[0]) * CORNER_SIGNS : 0;
    int skipped_corners = 0, sets = 0, failed = 0, shape_ok = 0; /* shape_ok: the initial set was clean */
    for (int s = 0; s < 1 + n_random + n_corners && !failed; s++) {
        lr_set set = {"", s == 0};
        if (s == 0) {
            snprintf(set.label, sizeof set.label, "the initial parameters");
        } else if (s <= n_random) {
            snprintf(set.label, sizeof set.label, "random projected parameter set %d", s);
            if (ck_random_params(&in, bk_derive_seed(c->opt->seed, 100, (uint64_t)(s - 1)), why, sizeof why)) {
                ck_item(c, BK_CHECK_FAIL, "long-range", "%s: %s", set.label, why);
                failed = 1;
                break;
            }
        } else {
            int k = s - 1 - n_random;
            double mag = corner_magnitudes[k / CORNER_SIGNS];
            int signs = k % CORNER_SIGNS;
            static const char *const sign_words[] = {"+", "-", "random-signed "};
            snprintf(set.label, sizeof set.label, "corner: every entry %s%g, then param_project", sign_words[signs], mag);
            rng r = ck_rng_for(c->opt->seed, R_WILD, 1000 + (uint64_t)k);
            for (size_t i = 0; i < np; i++) {
                int negative = signs == 1 || (signs == 2 && bk_rng_uniform(&r) < 0.5);
                in.theta[i] = (float)(negative ? -mag : mag);
            }
            ck_project(&in, in.theta);
            if (ck_first_non_finite(in.theta, np) >= 0) {
                skipped_corners++;
                continue;
            }
        }
        model_fn m = {.kind = FN_TABLE, .distances = D};
        int rc = ck_forward(&in, &m, in.theta, NULL, t, why, sizeof why);
        if (rc == CALL_REFUSED && s == 0) {
            ck_item(c, BK_CHECK_SKIP, "long-range", "table() with %d distances (--max-distance %d): %s", D, max, why);
            goto done;
        }
        if (rc != CALL_OK) {
            ck_item(c, BK_CHECK_FAIL, "long-range", "table() with %d distances at %s: %s", D, set.label, why);
            failed = 1;
            break;
        }
        sets++;
        for (int32_t h = 0; h < H && !failed; h++) {
            const float *row = t + (size_t)h * (size_t)D;
            char what[400];
            int32_t known = s <= n_random ? c->opt->max_distances : 0;
            int bad = inspect_head(row, grid, n, known, set.initial, scratch, what, sizeof what);
            if (bad == 2) {
                ck_item(c, BK_CHECK_SKIP, "long-range", "head %d %s at %s, below --distances %d: the table-finite and "
                        "table-random items report it", h, what, set.label, c->opt->max_distances);
                goto done;
            }
            if (bad) {
                strbuf p = {0};
                params_text(&in, &p);
                ck_item(c, BK_CHECK_FAIL, "long-range", "head %d %s, at %s (%s)", h, what, set.label, ck_sb_text(&p));
                free(p.s);
                failed = 1;
            }
        }
        if (failed || s > n_random)
            continue;
        shape_ok = 1;
        /* Shape: the initial set into shape[], the random sets' increasing heads noted. */
        int rising = 0;
        for (int32_t h = 0; h < H; h++) {
            int sh = head_shape(t + (size_t)h * (size_t)D, grid, n);
            if (s == 0)
                shape[h] = sh;
            else
                rising += sh == 1;
        }
        if (s > 0 && rising)
            ck_sb_printf(&increasing, "%s%d in set %d", increasing.len ? ", " : "", rising, s);
    }
    if (!failed && np == 0)
        ck_item(c, BK_CHECK_PASS, "long-range",
                "table finite, no poles (a sign change jumping by > %g x the head's median |T|), T <= %g x max(1, d "
                "/ %d) up to distance %d%s, on every distance below %d and %d points per octave beyond (no parameters)",
                CK_LR_POLE_JUMP, BK_CHECK_LONG_RANGE_BOUND, CK_LR_DENSE, max, lowered, CK_LR_DENSE, CK_LR_PER_OCTAVE);
    else if (!failed)
        ck_item(c, BK_CHECK_PASS, "long-range",
                "table finite, no poles (a sign change jumping by > %g x the head's median |T|) up to distance %d%s, "
                "on every distance below %d and %d points per octave beyond, at %d parameter sets (initial, %d "
                "random, %d corners: entries 1e-6, 1 or 1e3 with sign +, - or random, projected%s); T <= %g x "
                "max(1, d / %d) at the initial parameters",
                CK_LR_POLE_JUMP, max, lowered, CK_LR_DENSE, CK_LR_PER_OCTAVE, sets, n_random,
                n_corners - skipped_corners, skipped_corners ? ", corners the projection leaves non-finite skipped" : "",
                BK_CHECK_LONG_RANGE_BOUND, CK_LR_DENSE);
    if (shape_ok) { /* the initial set, and the random sets inspected before a failure */
        static const struct {
            int shape;
            const char *one, *many;
        } kinds[] = {{-1, "decreases with distance", "decrease with distance"},
                     {2, "is not monotonic", "are not monotonic"},
                     {0, "is flat", "are flat"},
                     {1, "increases with distance (prefers distant tokens)", "increase with distance (prefer distant tokens)"}};
        strbuf text = {0};
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            strbuf heads = {0};
            int count = heads_list(&heads, shape, H, kinds[k].shape);
            if (count)
                ck_sb_printf(&text, "%s%s %s %s", text.len ? "; " : "", count == 1 ? "head" : "heads", ck_sb_text(&heads),
                             count == 1 ? kinds[k].one : kinds[k].many);
            free(heads.s);
        }
        int warn = 0;
        for (int32_t h = 0; h < H; h++)
            warn |= shape[h] == 1;
        ck_sb_printf(&text, " up to distance %d at the initial parameters", max);
        if (increasing.len) {
            ck_sb_printf(&text, "; heads increasing at random projected parameters: %s", ck_sb_text(&increasing));
            warn = 1;
        }
        if (warn && c->opt->allow_increasing)
            ck_item(c, BK_CHECK_PASS, "shape", "%s (increasing heads allowed by --allow-increasing)", ck_sb_text(&text));
        else if (warn)
            ck_item(c, BK_CHECK_WARN, "shape", "%s: intended? (--allow-increasing silences this)", ck_sb_text(&text));
        else
            ck_item(c, BK_CHECK_PASS, "shape", "%s", ck_sb_text(&text));
        free(text.s);
    }
done:
    free(increasing.s);
    free(grid);
    free(t);
    free(scratch);
    free(shape);
    ck_instance_close(&in);
}
