/* biaskit check: every capability far beyond the lengths the other checks look at, and at parameters
 * from the whole region the projection allows (the "long-range" items), and the shape of the bias
 * along the distance ("shape"). A learnable bias can be finite at every distance up to --distances and
 * still break further out: T_h(d) = -a_h d / (1 + b_h d) with a projection that lets b_h < 0 has a
 * pole at d = 1/|b_h|, reached only at some parameters.
 *
 * Parameter sets (shared by every probe here): the initial ones, the random projected ones of the
 * capability's own checks (the same seeds, so "random parameter set 2" is the same set in both
 * items), and "corners": every entry set to 1e-6, 1 or 1e3 with the sign +, - or random per entry,
 * then param_project (a corner the projection leaves non-finite is skipped: the "project" item covers
 * that). Bounds on the values apply to the initial and random sets only: a corner is an extreme of
 * what the projection allows, where large values are legitimate (a slope of 1e3); corners are checked
 * for what is never legitimate (non-finite values, poles, the contracts).
 *
 *   long-range             TABLE: table() once per set up to --max-distance (one call with max + 1
 *                          distances), inspected on a grid: every distance below CK_LR_DENSE, then
 *                          CK_LR_PER_OCTAVE geometric points per octave: finite, no poles, T bounded
 *   long-range-coordinate  COORDINATE: coordinate() at length --max-distance (distances = rows = max,
 *                          every entry): the contract of phi, rscale and u(i, i) <= 1 + BK_COORD_SLACK
 *                          (the engine's, bias/query.c); the grid table finite
 *   shape                  TABLE: each head T_h(d); COORDINATE: F_h(u(i, d)) along the last row
 *                          i = max - 1, as the attention reads it (bk_coord_cell / bk_coord_lerp):
 *                          decreasing, increasing (WARN unless --allow-increasing), flat or neither
 *   long-range-scale       SCALE: scale() at length --max-distance, every entry finite, |s| bounded
 *   long-range-content     CONTENT: content() of --max-distance tokens (fewer when x would pass 8 MiB),
 *                          x in [-1, 1], [-1e3, 1e3], +-1e4 and 0: every step finite and >= 0
 *   long-range-mask        MASK: mask() valid at lengths up to --max-distance and the same at every
 *                          length (plugin.h: the engine computes it once for the longest sequence)
 *   long-range-rotary      ROTARY with rotary_ctx(): frequencies finite and >= 0, amplitude finite and
 *                          > 0 at lengths up to --max-distance (changing with the length is allowed)
 * A defect the capability's own item already reports (below --distances, at the initial or random
 * parameters) is a SKIP here that says so, not a second FAIL. */
#include "check/internal.h"

#include "plugin/contract.h"

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

/* Shape of one head from its values v[at[i]] (v[i] when at is NULL), i < n, in order of growing
 * distance: -1 decreasing (recency), +1 increasing, 0 flat, 2 neither. */
static int head_shape(const float *v, const int32_t *at, size_t n)
{
    double hi = 0;
    for (size_t i = 0; i < n; i++)
        hi = fmax(hi, fabs((double)v[at ? at[i] : (int32_t)i]));
    double tol = CK_LR_FLAT_REL * hi;
    int up = 0, down = 0;
    for (size_t i = 1; i < n; i++) {
        double step = (double)v[at ? at[i] : (int32_t)i] - (double)v[at ? at[i - 1] : (int32_t)(i - 1)];
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

/* The first CK_LR_PRINT_PARAMS values of theta by name ("a[0] = 0.5, ..., ... (24 values)"). */
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

/* ---- parameter sets ------------------------------------------------------------------------------ */

/* Set 0 is the initial parameters, sets 1 .. n_random the random projected ones, then the corners. */
typedef struct lr_sets {
    int n_random, n_corners;
    uint64_t purpose; /* random set s: ck_random_params(seed derived from (--seed, purpose, s - 1)), the
                       * seeds of the capability's own random checks */
    int used;         /* sets evaluated */
    int skipped;      /* corners the projection left non-finite */
} lr_sets;

enum { SET_INITIAL, SET_RANDOM, SET_CORNER };

static lr_sets sets_of(const checker *c, const instance *in, uint64_t purpose)
{
    int np = ck_n_params(in) > 0;
    return (lr_sets){np ? c->opt->n_seeds : 0,
                     np ? (int)(sizeof corner_magnitudes / sizeof corner_magnitudes[0]) * CORNER_SIGNS : 0, purpose,
                     0, 0};
}

static int sets_count(const lr_sets *sets)
{
    return 1 + sets->n_random + sets->n_corners;
}

static int set_kind(const lr_sets *sets, int s)
{
    return s == 0 ? SET_INITIAL : s <= sets->n_random ? SET_RANDOM : SET_CORNER;
}

/* --params replaces the initial parameters (when it gives param_count() values: check.c refuses
 * anything else before the checks run). */
static int params_given(const checker *c, const instance *in)
{
    return c->opt->params && c->opt->n_params > 0 && (size_t)c->opt->n_params == ck_n_params(in);
}

/* 1 when a defect of set s below --distances is already the finding of the capability's own items
 * (table-finite, coordinate, scale): they look at the initial parameters and at the same random sets,
 * not at --params or the corners. */
static int reported_below(const checker *c, const instance *in, const lr_sets *sets, int s)
{
    int kind = set_kind(sets, s);
    return kind == SET_RANDOM || (kind == SET_INITIAL && !params_given(c, in));
}

/* What set 0 is called in the shape item. */
static const char *initial_name(const checker *c, const instance *in)
{
    return params_given(c, in) ? "the given parameters (--params)" : "the initial parameters";
}

/* Set s into in->theta and its name into label: 0; 1 for a corner the projection leaves non-finite
 * (skipped, counted); -1 when the parameters cannot be made (why). */
static int set_load(const checker *c, const instance *in, lr_sets *sets, int s, char *label, size_t label_size,
                    char *why, size_t size)
{
    switch (set_kind(sets, s)) {
    case SET_INITIAL:
        snprintf(label, label_size, "%s", initial_name(c, in));
        if (params_given(c, in)) {
            memcpy(in->theta, c->opt->params, ck_n_params(in) * sizeof *in->theta);
            ck_project(in, in->theta);
            return 0;
        }
        /* the parameters every other check starts from (ck_open_default) */
        return ck_init_params(in, NULL, c->opt->seed, why, size) ? -1 : 0;
    case SET_RANDOM:
        snprintf(label, label_size, "random projected parameter set %d", s);
        return ck_random_params(in, bk_derive_seed(c->opt->seed, sets->purpose, (uint64_t)(s - 1)), why, size) ? -1
                                                                                                                 : 0;
    default: break;
    }
    int k = s - 1 - sets->n_random;
    double mag = corner_magnitudes[k / CORNER_SIGNS];
    int signs = k % CORNER_SIGNS;
    static const char *const sign_words[] = {"+", "-", "random-signed "};
    snprintf(label, label_size, "corner: every entry %s%g, then param_project", sign_words[signs], mag);
    rng r = ck_rng_for(c->opt->seed, R_WILD, 1000 + (uint64_t)k);
    size_t np = ck_n_params(in);
    for (size_t i = 0; i < np; i++) {
        int negative = signs == 1 || (signs == 2 && bk_rng_uniform(&r) < 0.5);
        in->theta[i] = (float)(negative ? -mag : mag);
    }
    ck_project(in, in->theta);
    if (ck_first_non_finite(in->theta, np) >= 0) {
        sets->skipped++;
        return 1;
    }
    return 0;
}

/* "at 13 parameter sets (initial, 3 random, 9 corners: ...)" or "(no parameters)". */
static void sets_text(const lr_sets *sets, strbuf *b)
{
    if (sets->n_random + sets->n_corners == 0) {
        ck_sb_printf(b, "(no parameters)");
        return;
    }
    ck_sb_printf(b, "at %d parameter sets (initial, %d random, %d corners: entries 1e-6, 1 or 1e3 with sign +, - or "
                 "random, projected%s)", sets->used, sets->n_random, sets->n_corners - sets->skipped,
                 sets->skipped ? ", corners the projection leaves non-finite skipped" : "");
}

/* A failure of item `id` at the current set: "<what>, at <label> (<parameters>)". */
static void fail_at(checker *c, const instance *in, const char *id, const char *what, const char *label)
{
    strbuf p = {0};
    params_text(in, &p);
    ck_item(c, BK_CHECK_FAIL, id, "%s, at %s (%s)", what, label, ck_sb_text(&p));
    free(p.s);
}

/* ---- shape --------------------------------------------------------------------------------------- */

/* 1 when param_init draws the parameters at random (two seeds give different values: an MLP's
 * initialisation): the shape at initialisation is then a draw, not the author's choice. */
static int init_is_random(const checker *c, const instance *in)
{
    size_t np = ck_n_params(in);
    float *a = np ? malloc(2 * np * sizeof *a) : NULL;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 64];
    int random = a && !ck_init_params(in, a, c->opt->seed, why, sizeof why) &&
                 !ck_init_params(in, a + np, bk_derive_seed(c->opt->seed, R_INIT, 7), why, sizeof why) &&
                 memcmp(a, a + np, np * sizeof *a) != 0;
    free(a);
    return random;
}

/* The "shape" item: shape[h] of the initial parameters; `what` names what was followed ("" or "F_h(u(i,
 * d)) along the last row i = 1048575: "), `along` how far ("up to distance 1048576"); `increasing` lists
 * the random sets' increasing heads. An increasing head is a WARN unless --allow-increasing, or unless
 * param_init is random (`random_init`): then it is said, not warned about. */
static void shape_item(checker *c, const instance *in, const int *shape, int32_t H, const char *what,
                        const char *along, const strbuf *increasing)
{
    int random_init = init_is_random(c, in);
    static const struct {
        int shape;
        const char *one, *many;
    } kinds[] = {{-1, "decreases with distance", "decrease with distance"},
                 {2, "is not monotonic", "are not monotonic"},
                 {0, "is flat", "are flat"},
                 {1, "increases with distance (prefers distant tokens)", "increase with distance (prefer distant tokens)"}};
    strbuf text = {0};
    ck_sb_printf(&text, "%s", what);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        strbuf heads = {0};
        int count = heads_list(&heads, shape, H, kinds[k].shape);
        if (count)
            ck_sb_printf(&text, "%s%s %s %s", text.len > strlen(what) ? "; " : "", count == 1 ? "head" : "heads",
                         ck_sb_text(&heads),
                         count == 1 ? kinds[k].one : kinds[k].many);
        free(heads.s);
    }
    int warn = 0;
    for (int32_t h = 0; h < H; h++)
        warn |= shape[h] == 1;
    ck_sb_printf(&text, " %s at %s", along, initial_name(c, in));
    if (increasing->len) {
        ck_sb_printf(&text, "; heads increasing at random projected parameters: %s", ck_sb_text(increasing));
        warn = 1;
    }
    if (warn && c->opt->allow_increasing)
        ck_item(c, BK_CHECK_PASS, "shape", "%s (increasing heads allowed by --allow-increasing)", ck_sb_text(&text));
    else if (warn && random_init)
        ck_item(c, BK_CHECK_PASS, "shape", "%s (param_init draws the parameters at random: the shape at "
                "initialisation is a draw, not a choice, and the increasing heads are not warned about)",
                ck_sb_text(&text));
    else if (warn)
        ck_item(c, BK_CHECK_WARN, "shape", "%s: intended? (--allow-increasing silences this)", ck_sb_text(&text));
    else
        ck_item(c, BK_CHECK_PASS, "shape", "%s", ck_sb_text(&text));
    free(text.s);
}

/* Shapes of set s: the initial set into shape[], the number of increasing heads of a random set into
 * *increasing ("3 in set 2"). `vals` holds H rows of `stride` values read at at[0 .. n) (every value
 * when at is NULL). */
static void note_shapes(int s, const float *vals, size_t stride, const int32_t *at, size_t n, int32_t H, int *shape,
                        strbuf *increasing)
{
    int rising = 0;
    for (int32_t h = 0; h < H; h++) {
        int sh = head_shape(vals + (size_t)h * stride, at, n);
        if (s == 0)
            shape[h] = sh;
        else
            rising += sh == 1;
    }
    if (s > 0 && rising)
        ck_sb_printf(increasing, "%s%d in set %d", increasing->len ? ", " : "", rising, s);
}

/* ---- TABLE --------------------------------------------------------------------------------------- */

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
    float *t = ck_guarded_alloc((size_t)H * (size_t)D);
    double *scratch = malloc((n ? n : 1) * sizeof *scratch);
    int *shape = calloc((size_t)H, sizeof *shape);
    strbuf increasing = {0}; /* the increasing heads of random sets */
    if (!grid || !t || !scratch || !shape) {
        ck_item(c, BK_CHECK_FAIL, "long-range", "out of memory for a %d x %d table", H, D);
        goto done;
    }
    char why[BIASKIT_ERROR_MESSAGE_MAX + 400], label[96];
    lr_sets sets = sets_of(c, &in, 100); /* the seeds of table-random */
    int failed = 0, shape_ok = 0; /* shape_ok: the initial set was clean */
    for (int s = 0; s < sets_count(&sets) && !failed; s++) {
        int kind = set_kind(&sets, s), got = set_load(c, &in, &sets, s, label, sizeof label, why, sizeof why);
        if (got > 0)
            continue;
        if (got < 0) {
            ck_item(c, BK_CHECK_FAIL, "long-range", "%s: %s", label, why);
            failed = 1;
            break;
        }
        model_fn m = {.kind = FN_TABLE, .distances = D};
        int rc = ck_forward(&in, &m, in.theta, NULL, t, why, sizeof why);
        if (rc == CALL_REFUSED && s == 0) {
            ck_item(c, BK_CHECK_SKIP, "long-range", "table() with %d distances (--max-distance %d): %s", D, max, why);
            goto done;
        }
        if (rc != CALL_OK) {
            ck_item(c, BK_CHECK_FAIL, "long-range", "table() with %d distances at %s: %s", D, label, why);
            failed = 1;
            break;
        }
        sets.used++;
        for (int32_t h = 0; h < H && !failed; h++) {
            const float *row = t + (size_t)h * (size_t)D;
            char what[400], head[480];
            int32_t known = reported_below(c, &in, &sets, s) ? c->opt->max_distances : 0;
            int bad = inspect_head(row, grid, n, known, kind == SET_INITIAL, scratch, what, sizeof what);
            if (bad == 2) {
                ck_item(c, BK_CHECK_SKIP, "long-range", "head %d %s at %s, below --distances %d: the table-finite and "
                        "table-random items report it", h, what, label, c->opt->max_distances);
                failed = 1; /* not a PASS; the shape of the sets before is still said */
                break;
            }
            if (bad) {
                snprintf(head, sizeof head, "head %d %s", h, what);
                fail_at(c, &in, "long-range", head, label);
                failed = 1;
            }
        }
        if (failed || kind == SET_CORNER)
            continue;
        shape_ok = 1;
        note_shapes(s, t, (size_t)D, grid, n, H, shape, &increasing);
    }
    if (!failed) {
        strbuf st = {0};
        sets_text(&sets, &st);
        ck_item(c, BK_CHECK_PASS, "long-range",
                "table finite, no poles (a sign change jumping by > %g x the head's median |T|) up to distance %d%s, "
                "on every distance below %d and %d points per octave beyond, %s; T <= %g x max(1, d / %d) at the "
                "initial parameters",
                CK_LR_POLE_JUMP, max, lowered, CK_LR_DENSE, CK_LR_PER_OCTAVE, ck_sb_text(&st),
                BK_CHECK_LONG_RANGE_BOUND, CK_LR_DENSE);
        free(st.s);
    }
    if (shape_ok) { /* the initial set, and the random sets inspected before a failure */
        char along[64];
        snprintf(along, sizeof along, "up to distance %d", max);
        shape_item(c, &in, shape, H, "", along, &increasing);
    }
done:
    free(increasing.s);
    free(grid);
    free(t);
    free(scratch);
    free(shape);
    ck_instance_close(&in);
}

/* ---- COORDINATE ---------------------------------------------------------------------------------- */

/* ck_coordinate_contract on the first K distances and rows of a coordinate() output of N (the call the
 * "coordinate" item makes at length K): 1 when it fails there too. */
static int contract_fails_below(const float *out, int32_t N, int32_t K)
{
    float *head = malloc(2 * (size_t)K * sizeof *head);
    if (!head)
        return 0;
    memcpy(head, out, (size_t)K * sizeof *head);
    memcpy(head + K, out + N, (size_t)K * sizeof *head);
    model_fn m = {.kind = FN_COORD, .distances = K, .rows = K, .length = K};
    char why[8];
    int bad = ck_coordinate_contract(&m, head, NULL, NULL, why, sizeof why);
    free(head);
    return bad;
}

void ck_unit_longrange_coordinate(checker *c, const void *arg)
{
    (void)arg;
    static const char id[] = "long-range-coordinate";
    instance in;
    if (ck_open_default(c, id, c->opt->seed, 0, &in))
        return;
    /* phi and rscale: 2 N floats, within CK_LR_MAX_FLOATS */
    int32_t N = c->opt->max_distance < 2 ? 2 : c->opt->max_distance;
    if (2L * N > CK_LR_MAX_FLOATS)
        N = (int32_t)(CK_LR_MAX_FLOATS / 2);
    const int32_t H = c->geo.n_heads;
    char lowered[160] = "";
    if (N < c->opt->max_distance)
        snprintf(lowered, sizeof lowered, " (--max-distance %d lowered to %d: phi and rscale within %ld MiB)",
                 c->opt->max_distance, N, CK_LR_MAX_FLOATS * 4 / (1L << 20));
    char why[BIASKIT_ERROR_MESSAGE_MAX + 400], label[96], what[BIASKIT_ERROR_MESSAGE_MAX + 600];
    int32_t P = 0;
    if (ck_grid_points(&in, &P, why, sizeof why)) {
        ck_item(c, BK_CHECK_SKIP, id, "%s: the coordinate-points item reports it", why);
        ck_instance_close(&in);
        return;
    }
    int32_t *dist = NULL; /* the distances the shape is read at, along row N - 1 */
    size_t n = make_grid(N - 1, &dist);
    model_fn coord = {.kind = FN_COORD, .distances = N, .rows = N, .length = N};
    model_fn gridfn = {.kind = FN_GRID, .distances = P};
    float *out = ck_guarded_alloc(ck_fn_outputs(&in, &coord)), *table = ck_guarded_alloc(ck_fn_outputs(&in, &gridfn));
    float *vals = malloc((size_t)H * (n ? n : 1) * sizeof *vals);
    int *shape = calloc((size_t)H, sizeof *shape);
    strbuf increasing = {0};
    if (!dist || !out || !table || !vals || !shape) {
        ck_item(c, BK_CHECK_FAIL, id, "out of memory for coordinates at length %d", N);
        goto done;
    }
    lr_sets sets = sets_of(c, &in, 600); /* the seeds of the coordinate item */
    int failed = 0, shape_ok = 0;
    double top_u = -1.0;
    char top_where[160] = "";
    for (int s = 0; s < sets_count(&sets) && !failed; s++) {
        int kind = set_kind(&sets, s), got = set_load(c, &in, &sets, s, label, sizeof label, why, sizeof why);
        if (got > 0)
            continue;
        if ((failed = got < 0)) {
            ck_item(c, BK_CHECK_FAIL, id, "%s: %s", label, why);
            break;
        }
        int rc = ck_forward(&in, &coord, in.theta, NULL, out, why, sizeof why);
        if (rc == CALL_REFUSED && s == 0) {
            ck_item(c, BK_CHECK_SKIP, id, "coordinate() at length %d (--max-distance): %s", N, why);
            goto done;
        }
        if ((failed = rc != CALL_OK)) {
            snprintf(what, sizeof what, "coordinate() at length %d: %s", N, why);
            fail_at(c, &in, id, what, label);
            break;
        }
        double u = 0.0;
        int32_t at = 0;
        if (ck_coordinate_contract(&coord, out, &u, &at, why, sizeof why)) {
            int32_t K = c->opt->max_distances < N ? c->opt->max_distances : N;
            if (reported_below(c, &in, &sets, s) && contract_fails_below(out, N, K)) {
                ck_item(c, BK_CHECK_SKIP, id, "coordinate() at length %d, %s: %s; below --distances %d: the "
                        "coordinate item reports it", N, label, why, c->opt->max_distances);
                failed = 1; /* not a PASS; the shape of the sets before is still said */
                break;
            }
            snprintf(what, sizeof what, "coordinate() at length %d (distances = rows = %d): %s", N, N, why);
            fail_at(c, &in, id, what, label);
            failed = 1;
            break;
        }
        if (u > top_u) {
            top_u = u;
            snprintf(top_where, sizeof top_where, "row %d, %s", at, label);
        }
        rc = ck_forward(&in, &gridfn, in.theta, NULL, table, why, sizeof why);
        long long k = rc == CALL_OK ? ck_first_non_finite(table, ck_fn_outputs(&in, &gridfn)) : -1;
        if (rc == CALL_OK && k >= 0) {
            snprintf(why, sizeof why, "table() over the grid of %d points gives %g at head %lld, grid point %lld (u = "
                     "%.6g)", P, (double)table[k], k / P, k % P, (double)(k % P) / (P - 1));
            rc = CALL_BROKEN;
        }
        if (rc != CALL_OK) {
            if (kind == SET_INITIAL && !params_given(c, &in)) {
                ck_item(c, BK_CHECK_SKIP, id, "%s, at %s: the grid-finite item reports it", why, label);
                failed = 1;
                break;
            }
            fail_at(c, &in, id, why, label);
            failed = 1;
            break;
        }
        sets.used++;
        if (kind == SET_CORNER)
            continue;
        /* The bias the attention adds along the last row, F_h(u(N - 1, d)) at the grid's distances, read
         * from the grid table as the engine reads it. */
        const float *phi = out, *rscale = out + N;
        for (int32_t h = 0; h < H; h++)
            for (size_t j = 0; j < n; j++)
                vals[(size_t)h * n + j] = bk_coord_score(table + (size_t)h * (size_t)P, P, phi[dist[j]], rscale[N - 1]);
        shape_ok = 1;
        note_shapes(s, vals, n, NULL, n, H, shape, &increasing);
    }
    if (!failed) {
        strbuf st = {0};
        sets_text(&sets, &st);
        ck_item(c, BK_CHECK_PASS, id,
                "coordinate() at length %d (distances = rows = %d, every entry)%s: phi finite, >= 0, non-decreasing; "
                "rscale finite, >= 0; u(i, i) = phi[i] rscale[i] <= 1 + %g; the grid table (%d points) finite; %s; "
                "largest u(i, i) %.7g (%s)", N, N, lowered, (double)CK_COORD_SLACK, P, ck_sb_text(&st), top_u,
                top_where);
        free(st.s);
    }
    if (shape_ok) {
        char row[96], along[64];
        snprintf(row, sizeof row, "the bias F_h(u(i, d)) along the last row i = %d: ", N - 1);
        snprintf(along, sizeof along, "up to distance %d", N - 1);
        shape_item(c, &in, shape, H, row, along, &increasing);
    }
done:
    free(increasing.s);
    free(dist);
    free(out);
    free(table);
    free(vals);
    free(shape);
    ck_instance_close(&in);
}

/* ---- SCALE --------------------------------------------------------------------------------------- */

void ck_unit_longrange_scale(checker *c, const void *arg)
{
    (void)arg;
    static const char id[] = "long-range-scale";
    instance in;
    if (ck_open_default(c, id, c->opt->seed, 0, &in))
        return;
    int32_t N = c->opt->max_distance, H = c->geo.n_heads;
    if ((long)H * (long)N > CK_LR_MAX_FLOATS)
        N = (int32_t)(CK_LR_MAX_FLOATS / H);
    char lowered[160] = "";
    if (N < c->opt->max_distance)
        snprintf(lowered, sizeof lowered, " (--max-distance %d lowered to %d: %d heads, the scales within %ld MiB)",
                 c->opt->max_distance, N, H, CK_LR_MAX_FLOATS * 4 / (1L << 20));
    model_fn m = {.kind = FN_SCALE, .rows = N, .length = N};
    size_t nv = ck_fn_outputs(&in, &m);
    float *out = ck_guarded_alloc(nv);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 400], label[96], what[300];
    if (!out) {
        ck_item(c, BK_CHECK_FAIL, id, "out of memory for %d x %d scales", H, N);
        ck_instance_close(&in);
        return;
    }
    lr_sets sets = sets_of(c, &in, 610); /* the seeds of the scale item */
    int failed = 0;
    double lo = INFINITY, hi = -INFINITY;
    for (int s = 0; s < sets_count(&sets) && !failed; s++) {
        int kind = set_kind(&sets, s), got = set_load(c, &in, &sets, s, label, sizeof label, why, sizeof why);
        if (got > 0)
            continue;
        if ((failed = got < 0)) {
            ck_item(c, BK_CHECK_FAIL, id, "%s: %s", label, why);
            break;
        }
        int rc = ck_forward(&in, &m, in.theta, NULL, out, why, sizeof why);
        if (rc == CALL_REFUSED && s == 0) {
            ck_item(c, BK_CHECK_SKIP, id, "scale() at length %d (--max-distance): %s", N, why);
            goto done;
        }
        if ((failed = rc != CALL_OK)) {
            snprintf(what, sizeof what, "scale() at length %d: %.200s", N, why);
            fail_at(c, &in, id, what, label);
            break;
        }
        sets.used++;
        /* the first bad row of any head (rows in order: the nearest failure is the one to fix) */
        size_t bad = nv;
        for (size_t j = 0; j < nv; j++) {
            float v = out[j];
            int out_of_range = !isfinite(v) || (kind != SET_CORNER && fabs((double)v) > CK_SCALE_BOUND);
            if (out_of_range && (bad == nv || j % (size_t)N < bad % (size_t)N))
                bad = j;
        }
        if (bad < nv) {
            int32_t h = (int32_t)(bad / (size_t)N), i = (int32_t)(bad % (size_t)N);
            double v = out[bad];
            if (!isfinite(v) && reported_below(c, &in, &sets, s) && i < c->opt->max_distances) {
                ck_item(c, BK_CHECK_SKIP, id, "scale() at length %d gives %g at head %d, row %d, at %s, below "
                        "--distances %d: the scale item reports it", N, v, h, i, label, c->opt->max_distances);
                goto done;
            }
            if (!isfinite(v))
                snprintf(what, sizeof what, "scale() at length %d gives %g at head %d, row %d", N, v, h, i);
            else
                snprintf(what, sizeof what, "scale() at length %d gives s = %.6g at head %d, row %d: |s| beyond %g "
                         "(a logit scale that large makes softmax a hard argmax)", N, v, h, i, CK_SCALE_BOUND);
            fail_at(c, &in, id, what, label);
            failed = 1;
            break;
        }
        if (kind == SET_INITIAL)
            for (size_t j = 0; j < nv; j++)
                lo = fmin(lo, out[j]), hi = fmax(hi, out[j]);
    }
    if (!failed) {
        strbuf st = {0};
        sets_text(&sets, &st);
        ck_item(c, BK_CHECK_PASS, id, "scale() at length %d%s (rows 0 .. %d, every head): finite %s; |s| <= %g%s; s "
                "from %.4g to %.4g at %s", N, lowered, N - 1, ck_sb_text(&st), CK_SCALE_BOUND,
                sets.n_random ? " at the initial and random ones" : "", lo <= hi ? lo : 0.0, lo <= hi ? hi : 0.0,
                initial_name(c, &in));
        free(st.s);
    }
done:
    free(out);
    ck_instance_close(&in);
}

/* ---- CONTENT ------------------------------------------------------------------------------------- */

#define CK_LR_CONTENT_FLOATS (1L << 21) /* the inputs x at most 8 MiB (the steps cost tokens x d_model x heads) */

/* The inputs of long-range-content, in order; the content item covers the first (and [-10, 10]). */
static const char *const content_inputs[] = {"x in [-1, 1]", "x in [-1e3, 1e3]", "x = +-1e4 (random signs)",
                                             "x = 0"};
enum { CONTENT_INPUTS = sizeof content_inputs / sizeof content_inputs[0] };

static void content_fill(float *x, size_t n, int kind, rng *r)
{
    for (size_t e = 0; e < n; e++) {
        double u = ck_rng_sym(r);
        x[e] = kind == 0 ? (float)u : kind == 1 ? (float)(1e3 * u) : kind == 2 ? (u < 0.0 ? -1e4f : 1e4f) : 0.0f;
    }
}

/* The first step of out[n] that is not finite and >= 0; n when none. */
static size_t first_bad_step(const float *out, size_t n)
{
    size_t k = 0;
    while (k < n && bk_contract_step_ok(out[k]))
        k++;
    return k;
}

/* content() of N tokens (one sequence of length N) on input kind k at the loaded set s: CALL_OK when every
 * step is finite and >= 0, else the failure reported (a SKIP when the content item has it). */
static int content_probe(checker *c, instance *in, const model_fn *m, const lr_sets *sets, int s, int k,
                         const char *label, float *out)
{
    static const char id[] = "long-range-content";
    char why[BIASKIT_ERROR_MESSAGE_MAX + 200], what[BIASKIT_ERROR_MESSAGE_MAX + 400];
    int rc = ck_forward(in, m, in->theta, NULL, out, why, sizeof why);
    if (rc == CALL_REFUSED && s == 0 && k == 0 && reported_below(c, in, sets, s)) {
        ck_item(c, BK_CHECK_SKIP, id, "content() of %lld tokens: %s: the content item reports it", (long long)m->count,
                why);
        return rc;
    }
    if (rc != CALL_OK) {
        snprintf(what, sizeof what, "content() of %lld tokens, %s: %s", (long long)m->count, content_inputs[k], why);
        fail_at(c, in, id, what, label);
        return rc;
    }
    size_t nv = ck_fn_outputs(in, m), H = (size_t)(in->geo.n_heads > 0 ? in->geo.n_heads : 1);
    const size_t bad = first_bad_step(out, nv);
    if (bad == nv)
        return CALL_OK;
    const double v = out[bad];
    const size_t token = bad / H, head = bad % H;
    int32_t covered = c->geo.train_length > 0 ? 4 * c->geo.train_length : 4; /* the content item's longest call */
    if (k == 0 && reported_below(c, in, sets, s) && token < (size_t)covered) {
        ck_item(c, BK_CHECK_SKIP, id, "content() of %lld tokens gives the step %g at token %zu, head %zu, at %s, "
                "%s, within the content item's %d tokens: the content item reports it", (long long)m->count, v, token,
                head, label, content_inputs[k], covered);
        return CALL_REFUSED;
    }
    snprintf(what, sizeof what, "content() of %lld tokens, %s, gives the step %g at token %zu, head %zu: every step "
             "must be finite and >= 0", (long long)m->count, content_inputs[k], v, token, head);
    fail_at(c, in, id, what, label);
    return CALL_BROKEN;
}

/* content() on --max-distance tokens of large and odd inputs at every parameter set: finite, >= 0. */
void ck_unit_longrange_content(checker *c, const void *arg)
{
    (void)arg;
    static const char id[] = "long-range-content";
    instance in;
    if (ck_open_default(c, id, c->opt->seed, 0, &in))
        return;
    const long C = c->geo.d_model > 0 ? c->geo.d_model : 1;
    int32_t N = c->opt->max_distance;
    if ((long)N * C > CK_LR_CONTENT_FLOATS)
        N = (int32_t)(CK_LR_CONTENT_FLOATS / C);
    char lowered[160] = "", why[BIASKIT_ERROR_MESSAGE_MAX + 200], label[96];
    if (N < c->opt->max_distance)
        snprintf(lowered, sizeof lowered, " (--max-distance %d lowered to %d: %ld channels, the inputs within %ld "
                 "MiB)", c->opt->max_distance, N, C, CK_LR_CONTENT_FLOATS * 4 / (1L << 20));
    float *x = malloc((size_t)N * (size_t)C * sizeof *x);
    model_fn m = {.kind = FN_CONTENT, .count = N, .x = x, .length = N};
    const size_t nv = ck_fn_outputs(&in, &m);
    float *out = ck_guarded_alloc(nv);
    lr_sets sets = sets_of(c, &in, 650); /* the seeds of the content item */
    int failed = !x || !out;
    if (failed)
        ck_item(c, BK_CHECK_FAIL, id, "out of memory for the inputs and steps of %d tokens", N);
    double lo = INFINITY, hi = -INFINITY;
    for (int s = 0; s < sets_count(&sets) && !failed; s++) {
        int got = set_load(c, &in, &sets, s, label, sizeof label, why, sizeof why);
        if (got > 0)
            continue;
        if ((failed = got < 0))
            ck_item(c, BK_CHECK_FAIL, id, "%s: %s", label, why);
        for (int k = 0; k < CONTENT_INPUTS && !failed; k++) {
            rng r = ck_rng_for(c->opt->seed, R_START, 700 + (uint64_t)k);
            content_fill(x, (size_t)N * (size_t)C, k, &r);
            failed = content_probe(c, &in, &m, &sets, s, k, label, out) != CALL_OK;
            for (size_t j = 0; !failed && set_kind(&sets, s) == SET_INITIAL && j < nv; j++)
                lo = fmin(lo, out[j]), hi = fmax(hi, out[j]);
        }
        sets.used += !failed;
    }
    if (!failed) {
        strbuf st = {0};
        sets_text(&sets, &st);
        ck_item(c, BK_CHECK_PASS, id, "content() of %d tokens%s, x in [-1, 1], [-1e3, 1e3], +-1e4 and 0: every step "
                "finite and >= 0 %s; steps from %.4g to %.4g at %s", N, lowered, ck_sb_text(&st), lo <= hi ? lo : 0.0,
                lo <= hi ? hi : 0.0, initial_name(c, &in));
        free(st.s);
    }
    free(x);
    free(out);
    ck_instance_close(&in);
}

/* ---- MASK and ROTARY: lengths -------------------------------------------------------------------- */

/* The lengths of the mask and rotary probes: the training length, then `factor` times the previous one
 * below --max-distance, then --max-distance. Returns the count (at most `cap`). */
static int far_lengths(const checker *c, int64_t factor, int32_t *out, int cap)
{
    const int64_t L = c->geo.train_length > 0 ? c->geo.train_length : 1, top = c->opt->max_distance;
    int n = 0;
    for (int64_t x = L; x < top && n < cap - 1; x *= factor)
        out[n++] = (int32_t)x;
    if (n == 0 || out[n - 1] < top)
        out[n++] = (int32_t)top;
    return n;
}

#define CK_LR_MAX_LENGTHS 40

/* ---- MASK ---------------------------------------------------------------------------------------- */

void ck_unit_longrange_mask(checker *c, const void *arg)
{
    (void)arg;
    static const char id[] = "long-range-mask";
    instance in;
    if (ck_open_default(c, id, c->opt->seed, 0, &in))
        return;
    /* x4 as the mask item's lengths: every length here up to --distances is one it checks too */
    int32_t lengths[CK_LR_MAX_LENGTHS];
    int n = far_lengths(c, 4, lengths, CK_LR_MAX_LENGTHS);
    biaskit_mask masks[CK_LR_MAX_LENGTHS], train;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 400];
    strbuf text = {0};
    for (int k = 0; k < n; k++)
        ck_sb_printf(&text, "%s%d", k ? ", " : "", lengths[k]);
    /* the training call at the training length may differ (ctx->training is allowed to matter) */
    if (ck_mask(&in, lengths[0], 1, 1, &train, why, sizeof why) != CALL_OK) {
        ck_item(c, BK_CHECK_SKIP, id, "%s: the mask item reports it", why);
        goto done;
    }
    for (int k = 0; k < n; k++)
        if (ck_mask(&in, lengths[k], 0, 1, &masks[k], why, sizeof why) != CALL_OK) {
            if (lengths[k] <= c->opt->max_distances)
                ck_item(c, BK_CHECK_SKIP, id, "%s: the mask item reports it", why);
            else
                ck_item(c, BK_CHECK_FAIL, id, "%s", why);
            goto done;
        }
    const biaskit_mask *far = &masks[n - 1];
    for (int k = 0; k < n - 1; k++)
        if (masks[k].window != far->window || masks[k].sinks != far->sinks ||
            masks[k].distance_cap != far->distance_cap) {
            ck_item(c, BK_CHECK_FAIL, id, "mask() gives window %d, sinks %d, distance_cap %d at length %d but window "
                    "%d, sinks %d, distance_cap %d at length %d: a mask must not depend on ctx->length (the engine "
                    "computes it once for the longest sequence of a call and reads it for every shorter one; "
                    "ctx->training and ctx->layer may matter)", masks[k].window, masks[k].sinks,
                    masks[k].distance_cap, lengths[k], far->window, far->sinks, far->distance_cap, lengths[n - 1]);
            goto done;
        }
    char training[160] = "";
    if (train.window != far->window || train.sinks != far->sinks || train.distance_cap != far->distance_cap)
        snprintf(training, sizeof training, "; in training (length %d) window %d, sinks %d, distance_cap %d",
                 lengths[0], train.window, train.sinks, train.distance_cap);
    ck_item(c, BK_CHECK_PASS, id, "mask(): window >= 1, sinks >= 0, distance_cap >= 0 and the same at lengths %s "
            "(not a function of ctx->length, as the engine requires): window %d, sinks %d, distance_cap %d%s",
            ck_sb_text(&text), far->window, far->sinks, far->distance_cap, training);
done:
    free(text.s);
    ck_instance_close(&in);
}

/* ---- ROTARY -------------------------------------------------------------------------------------- */

void ck_unit_longrange_rotary(checker *c, const void *arg)
{
    (void)arg;
    static const char id[] = "long-range-rotary";
    if (!ck_has_rotary_ctx(c)) {
        ck_item(c, BK_CHECK_SKIP, id, "no rotary_ctx(): the frequencies do not depend on the length (the rotary item "
                "checks rotary_frequencies())");
        return;
    }
    instance in;
    if (ck_open_default(c, id, c->opt->seed, 0, &in))
        return;
    const int32_t half = in.geo.d_head / 2;
    int32_t lengths[CK_LR_MAX_LENGTHS];
    int n = far_lengths(c, 2, lengths, CK_LR_MAX_LENGTHS);
    float *f = ck_guarded_alloc((size_t)half), *first = ck_guarded_alloc((size_t)half), amp = 0, amp0 = 0;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 400];
    double lo = INFINITY, hi = -INFINITY;
    int32_t changes = 0; /* the first length whose answer differs from the training length's */
    if (!f || !first) {
        ck_item(c, BK_CHECK_FAIL, id, "out of memory");
        goto done;
    }
    for (int k = 0; k < n; k++) {
        int rc = ck_rotary_ctx(&in, lengths[k], 0, 1, f, &amp, why, sizeof why);
        int32_t at = -1;
        for (int32_t j = 0; rc == CALL_OK && j < half && at < 0; j++)
            if (!(f[j] >= 0.0f))
                at = j;
        if (rc == CALL_OK && at >= 0) {
            snprintf(why, sizeof why, "rotary_ctx() at length %d gives inverse frequency %d = %g (expected >= 0; 0: "
                     "a pair that does not turn)", lengths[k], at, (double)f[at]);
            rc = CALL_BROKEN;
        }
        if (rc != CALL_OK) {
            /* what the rotary-ctx item's own lengths (up to 64 L) show is reported there */
            int seen = rc != CALL_OK && at < 0 && ck_rotary_ctx_fails_near(c, &in);
            ck_item(c, seen ? BK_CHECK_SKIP : BK_CHECK_FAIL, id, "%s%s", why,
                    seen ? "; the rotary-ctx item reports a failure at its lengths" : "");
            goto done;
        }
        lo = fmin(lo, amp), hi = fmax(hi, amp);
        if (k == 0) {
            memcpy(first, f, (size_t)half * sizeof *f);
            amp0 = amp;
        } else if (!changes && (amp != amp0 || memcmp(first, f, (size_t)half * sizeof *f) != 0)) {
            changes = lengths[k];
        }
    }
    char note[120];
    if (changes)
        snprintf(note, sizeof note, "; the answer changes with the length from %d on (dynamic scaling: allowed)",
                 changes);
    else
        snprintf(note, sizeof note, "; the same answer at every length");
    ck_item(c, BK_CHECK_PASS, id, "rotary_ctx() at lengths %d .. %d (x2 each): d_head/2 = %d inverse frequencies "
            "finite and > 0, amplitude finite and > 0 (%.6g .. %.6g)%s", lengths[0], lengths[n - 1], half, lo, hi,
            note);
done:
    free(f);
    free(first);
    ck_instance_close(&in);
}
