/* biaskit check: the backward functions (table_backward, embed_backward, and of ABI 2 the grid's
 * table_backward, coordinate_backward, scale_backward) against finite differences of the plugin's own
 * forward function, and that they add (+=) into dtheta; for tables, where L = sum w out disagrees,
 * per table entry (see FD_ROUND_ULPS). The relative tolerance is the option's (--tolerance); with
 * --params the checks also run at the given parameters (given_params). */
#include "check/internal.h"

#include "plugin/descriptor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Gradients: central differences of L in float64 over shrinking steps, extrapolated to step 0 by
 * Ridders' method (the estimate with the smallest error estimate wins), so that neither truncation
 * (large steps) nor the float32 rounding of the plugin's outputs (small steps) decides the verdict. */
#define GRAD_FIRST_STEP 0.1      /* first h = 0.1 * max(|theta_i|, floor), for both floors: */
#define GRAD_STEP_FLOOR 0.1      /*   parameters of natural size ~1 resting near 0 (exponents) */
#define GRAD_STEP_FLOOR_SMALL 1e-3 /* parameters whose function bends within |theta| of them */
#define GRAD_SHRINK 1.4          /* h /= 1.4 per step, at most GRAD_STEPS steps */
#define GRAD_STEPS 10
/* the tolerance on the relative error (relative_error()) is the option's (BK_CHECK_TOLERANCE by default) */
#define GRAD_SCALE_SHARE 5e-2    /* a denominator is at least 5% of sum_k |w_k dOut_k/dtheta_i| */
#define GRAD_MAX_TABLE_ENTRIES 256
#define GRAD_FAR_DISTANCES 4097  /* the table gradient's third case: past 4096, beyond any training length
                                  * a check models, so a derivative that breaks only far away fails */
#define GRAD_MAX_EMBED_ENTRIES 64

/* Kinks. A function with max(), |x| or ReLU in it (FIRE: max(i, L) at an integer L, |c x|, the ReLUs of
 * its grid table) has points where its derivative jumps; there the central difference is the mean of
 * the two one-sided derivatives and the analytic gradient is one of them. An entry whose central
 * difference disagrees gets a closer look:
 *  1. one-sided differences from steps <= KINK_OFFSET/4: when they agree with each other there is no
 *     kink at theta_i (the long steps crossed one farther away, or curvature): the gradient must match
 *     them;
 *  2. when they disagree, theta_i sits on a kink: the gradient must match the central differences at
 *     theta_i + offset and at theta_i - offset, off the kink (steps <= offset/4, so that the kink stays
 *     outside; a few offsets per side, another kink may lie near);
 *  3. when kinks lie closer together than any step float32 outputs allow (the ReLUs of a table over a
 *     fine grid: one kink per grid point), or the rounding of the outputs drowns the small steps: on
 *     each side of theta_i the difference quotient (L(theta_i + s) - L(theta_i)) / s, which is exactly
 *     the mean of dL/dtheta_i over [theta_i, theta_i + s] however many kinks lie inside, must match the
 *     analytic gradient averaged over 64, else 512 points of that interval (midpoint rule); s = 4 x the
 *     offset, else 0.1 max(|theta_i|, 0.1), else max(|theta_i|, 0.1) (the first where both sides match:
 *     a wide interval averages the rounding away, a narrow one has fewer kinks to sample). A difference
 *     within 4 standard deviations of the quotient's float rounding (from the ulps of the outputs that
 *     moved) is not held against the gradient: an entry whose derivative is tiny next to the outputs it
 *     moves cannot be resolved better by any difference of float outputs.
 * A wrong gradient matches in none of them, so it still fails (unless its error hides in the rounding
 * of the outputs, which no finite difference can see). */
#define KINK_OFFSET 1e-3         /* offset = 1e-3 max(|theta_i|, 0.1) */
#define KINK_STEP_SHARE 0.25     /* first step of the closer look: offset / 4 */
#define KINK_TRIES 3             /* offsets 1, 1.6, 2.2 x the offset on each side */
#define KINK_TRY_GROWTH 0.6
#define KINK_SPAN 4.0            /* 3.: the first interval: 4 offsets on each side */
#define KINK_SAMPLES 64          /* 3.: the analytic gradient at 64 points of each interval, then 512 */
#define KINK_SAMPLES_MORE 512
#define KINK_MORE_SAMPLES_BELOW 20 /* 512 points only where 64 gave a rel. error below 20 x the tolerance */
#define KINK_NOISE_SIGMAS 4.0    /* 3.: differences within 4 standard deviations of the float rounding pass */
#define KINK_MAX_FAILURES 4      /* after 4 entries failed their closer look, the others get none (time) */

typedef struct fd_work {
    float *a, *b, *base; /* outputs at theta + h, theta - h and at theta */
    double tol;          /* the relative tolerance (--tolerance) */
} fd_work;

/* The output with theta[i] moved by `step`; *moved gets the move as stored in float. 1 when it worked
 * and every value is finite. */
static int moved_output(const instance *in, const model_fn *m, float *theta, int64_t i, double step, float *out,
                        double *moved)
{
    float orig = theta[i];
    theta[i] = (float)((double)orig + step);
    *moved = (double)theta[i] - (double)orig;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    int ok = *moved != 0.0 && !ck_forward(in, m, theta, NULL, out, why, sizeof why) &&
             ck_first_non_finite(out, ck_fn_outputs(in, m)) < 0;
    theta[i] = orig;
    return ok;
}

/* side 0: (L(theta_i + h) - L(theta_i - h)) / 2h; side +1: (L(theta_i + h) - L(theta_i)) / h; side -1:
 * (L(theta_i) - L(theta_i - h)) / h; for L = sum_k w_k out_k, in float64 over the float outputs (with
 * the steps as stored in float; L(theta_i) from wk->base, the output at theta). *scale gets
 * sum_k |w_k d out_k / dtheta_i|, the size of the terms the gradient sums. 1 when the outputs are
 * finite. */
static int difference(const instance *in, const model_fn *m, const float *w, float *theta, int64_t i, double h,
                      int side, fd_work *wk, double *value, double *scale)
{
    double mp = 0.0, mm = 0.0;
    const float *hi = wk->base, *lo = wk->base;
    if (side >= 0) {
        if (!moved_output(in, m, theta, i, h, wk->a, &mp))
            return 0;
        hi = wk->a;
    }
    if (side <= 0) {
        if (!moved_output(in, m, theta, i, -h, wk->b, &mm))
            return 0;
        lo = wk->b;
    }
    double sum = 0.0, abs_sum = 0.0;
    for (size_t k = 0, n = ck_fn_outputs(in, m); k < n; k++) {
        double term = (double)w[k] * ((double)hi[k] - (double)lo[k]);
        sum += term;
        abs_sum += fabs(term);
    }
    *value = sum / (mp - mm);
    *scale = abs_sum / (mp - mm);
    return 1;
}

/* d(sum w * out)/dtheta_i by Ridders' extrapolation (Numerical Recipes' dfridr) of central (side 0) or
 * one-sided (side +-1) differences from first step h: steps h, h/1.4, h/1.4^2, ...; the error of a
 * central difference is a series in h^2, of a one-sided one in h, hence the factor of each order. A
 * first step whose outputs are not finite is quartered (a parameter near the edge of its domain).
 * *error gets the method's error estimate. 0 when no step gives finite outputs. */
static int ridders(const instance *in, const model_fn *m, const float *w, float *theta, int64_t i, double h, int side,
                   fd_work *wk, double *value, double *scale, double *error)
{
    double a[GRAD_STEPS][GRAD_STEPS], ignored;
    int tries = 0;
    while (!difference(in, m, w, theta, i, h, side, wk, &a[0][0], scale))
        if (++tries > 8)
            return 0;
        else
            h /= 4.0;
    double best = a[0][0], err = INFINITY;
    const double order = side ? GRAD_SHRINK : GRAD_SHRINK * GRAD_SHRINK;
    for (int k = 1; k < GRAD_STEPS; k++) {
        h /= GRAD_SHRINK;
        if (!difference(in, m, w, theta, i, h, side, wk, &a[0][k], &ignored))
            break;
        double fac = order;
        for (int j = 1; j <= k; j++, fac *= order) {
            a[j][k] = (a[j - 1][k] * fac - a[j - 1][k - 1]) / (fac - 1.0);
            double e = fmax(fabs(a[j][k] - a[j - 1][k]), fabs(a[j][k] - a[j - 1][k - 1]));
            if (e <= err) {
                err = e;
                best = a[j][k];
            }
        }
        if (fabs(a[k][k] - a[k - 1][k - 1]) >= 2.0 * err)
            break; /* higher orders only add rounding noise now */
    }
    *value = best;
    *error = err;
    return 1;
}

/* Ridders from a first step of 0.1 max(|theta_i|, 0.1) and of 0.1 max(|theta_i|, 1e-3): the estimate
 * with the smaller error estimate. 0 when neither gives finite outputs. */
static int numeric_derivative(const instance *in, const model_fn *m, const float *w, float *theta, int64_t i,
                              fd_work *wk, double *value, double *scale)
{
    double t = fabs((double)theta[i]), v, s, e, best_e = INFINITY;
    double starts[2] = {GRAD_FIRST_STEP * fmax(t, GRAD_STEP_FLOOR), GRAD_FIRST_STEP * fmax(t, GRAD_STEP_FLOOR_SMALL)};
    int found = 0;
    for (int k = 0; k < 2; k++) {
        if (k == 1 && starts[1] == starts[0])
            break;
        if (ridders(in, m, w, theta, i, starts[k], 0, wk, &v, &s, &e) && (!found || e < best_e)) {
            *value = v;
            *scale = s;
            best_e = e;
            found = 1;
        }
    }
    return found;
}

/* The entries of theta to check: all of them up to `cap`, else a random sample, 3/4 from the entries
 * with a non-zero analytic gradient and the rest from the others. Returns the count. */
static size_t choose_entries(const float *analytic, size_t n, size_t cap, rng *r, int64_t *out)
{
    if (n <= cap) {
        for (size_t i = 0; i < n; i++)
            out[i] = (int64_t)i;
        return n;
    }
    int64_t *order = malloc(n * sizeof *order);
    if (!order)
        return 0;
    for (size_t i = 0; i < n; i++)
        order[i] = (int64_t)i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(bk_rng_u64(r) % (uint64_t)(i + 1));
        int64_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
    size_t k = 0, want_nonzero = cap * 3 / 4;
    for (size_t i = 0; i < n && k < want_nonzero; i++)
        if (analytic[order[i]] != 0.0f) {
            out[k++] = order[i];
            order[i] = -1;
        }
    for (size_t i = 0; i < n && k < cap; i++)
        if (order[i] >= 0)
            out[k++] = order[i];
    free(order);
    return k;
}

/* |a - n| / max(|a|, |n|, 5% of the terms' size, 1e-6 of the largest terms' size in this set): where
 * the sum cancels, the error is measured against the size of what was summed. */
static double relative_error(double analytic, double numeric, double scale, double max_scale)
{
    double denom = fmax(fmax(fabs(analytic), fabs(numeric)), fmax(GRAD_SCALE_SHARE * scale, 1e-6 * max_scale));
    double diff = fabs(analytic - numeric);
    return denom > 0.0 ? diff / denom : (diff > 0.0 ? INFINITY : 0.0);
}

/* ---- per table entry ---------------------------------------------------------------------------- */

/* Where L = sum_k w_k out_k disagrees with the analytic gradient even on a closer look, each table entry
 * decides alone: dT[h][d]/dtheta_i from table_backward with a one-hot dtable (exact: the backward of one
 * entry) against Ridders' central differences of T[h][d] alone (the same steps as numeric_derivative,
 * every entry's own tableau). An entry passes when
 *     |analytic - numeric| <= tolerance x max(|analytic|, |numeric|) + FD_ROUND_ULPS ulp(T) / (2 step),
 * the second term the float rounding of that entry at theta +- step (the formula rounds a few times,
 * Ridders' extrapolation adds a factor): a parameter whose effect on small entries is drowned in L by
 * the rounding of large entries it also moves is judged where it can be resolved. The entries: every
 * entry of the table L was taken over (up to FD_MAX_ENTRIES, else FD_POINTS per head), and for a
 * distance table FD_POINTS distances per head over [0, --distances): 0, then geometric from 1 to the
 * largest. A failing entry gets the closer look of L (kinks, see KINK_OFFSET) with the one-hot weights
 * (at most FD_CLOSER_LOOKS per parameter, the worst first). A wrong gradient fails at the entries it
 * is wrong at (when they are among these), with the worst printed. */
#define FD_ROUND_ULPS 8.0
#define FD_POINTS 8
#define FD_MAX_ENTRIES 4096
#define FD_MAX_CACHE (1u << 23)  /* analytic derivatives cached (entries x parameters floats) up to this */
#define FD_MAX_FAILURES 4        /* after 4 parameters failed per entry, the others fail without a look */
#define FD_MAX_LOOKS 32          /* and after 32 looks in one item (time: each look differentiates tables) */
#define FD_MAX_FAR_OUTPUTS (1 << 24) /* the far table: heads x distances at most this (64 MiB a copy) */
#define FD_CLOSER_LOOKS 2
#define FD_WORST 5
#define FD_SHOWN_PARAMS 8

typedef struct fd_entry {
    char param[64], place[96], params[256];
    double theta, analytic, numeric, rel, tol;
} fd_entry;

typedef struct grad_report {
    const char *id, *adds_id;
    double worst;
    char worst_entry[64];
    int checked, failed, unchecked, adds_failed;
    int closer, kinks, dense; /* entries that passed on a closer look, by how (see KINK_OFFSET) */
    int unlooked;             /* entries that failed without a closer look (KINK_MAX_FAILURES) */
    char first_fail[1400];
    char first_kink[600];
    char first_dense[600];
    char adds_fail[600];
    char setup_fail[BIASKIT_ERROR_MESSAGE_MAX + 200];
    double tol;               /* the relative tolerance (--tolerance) */
    /* per table entry (FD_ROUND_ULPS): parameters that passed there after L failed, that failed there;
     * the worst failing entries, the parameter set of the first, why a look could not run */
    int fd_passed, fd_failed, fd_looks;
    char fd_first_pass[400];
    int n_worst;
    fd_entry worst_entries[FD_WORST];
    char fd_params[1200];
    char fd_unrun[BIASKIT_ERROR_MESSAGE_MAX + 200];
    const char *backward_name;
} grad_report;

/* Backward into a non-zero start must give start + gradient. */
static void check_adds(const instance *in, const model_fn *m, const float *w, const float *g0, grad_report *gr,
                       uint64_t seed)
{
    size_t n = ck_n_params(in);
    float *start = malloc(n * sizeof *start), *g1 = ck_guarded_alloc(n);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    rng r = ck_rng_for(seed, R_START, 0);
    for (size_t i = 0; start && g1 && i < n; i++) {
        double mag = (0.5 + 0.5 * bk_rng_uniform(&r)) * fmax(fabs((double)g0[i]), 1.0);
        start[i] = (float)(bk_rng_uniform(&r) < 0.5 ? -mag : mag);
        g1[i] = start[i];
    }
    if (!start || !g1)
        snprintf(gr->setup_fail, sizeof gr->setup_fail, "out of memory for %zu gradient values", n);
    else if (ck_backward(in, m, in->theta, w, g1, why, sizeof why))
        snprintf(gr->setup_fail, sizeof gr->setup_fail, "%s", why);
    for (size_t i = 0; start && g1 && !gr->setup_fail[0] && i < n; i++) {
        double want = (double)start[i] + (double)g0[i];
        if (fabs((double)g1[i] - want) > ADD_TOLERANCE * (fabs((double)start[i]) + fabs((double)g0[i]))) {
            if (!gr->adds_failed++) {
                char entry[64];
                ck_entry_name(in, (int64_t)i, entry, sizeof entry);
                snprintf(gr->adds_fail, sizeof gr->adds_fail,
                         "%s started at %.9g, expected %.9g + %.9g = %.9g, got %.9g (backward functions must add "
                         "into their output, +=)", entry, (double)start[i], (double)start[i], (double)g0[i], want,
                         (double)g1[i]);
            }
        }
    }
    free(start);
    free(g1);
}

/* The closer look at one entry (see KINK_OFFSET). */
typedef enum { LOOK_SMALL_STEPS = 1, LOOK_KINK, LOOK_DENSE, LOOK_ENTRIES } look_kind;

typedef struct closer {
    look_kind how;        /* how the entry passed */
    double right, left;   /* the one-sided derivatives from small steps */
    double offset;        /* 2.: the offset of the last comparison off the kink */
    double span;          /* 3.: the interval on each side */
    int samples;          /* 3.: and the points the analytic gradient was averaged over */
    double raw;           /* 3.: the relative error before the allowance for float rounding */
    double err;           /* the relative error the entry passed with (the larger of two sides) */
    char fail[800];       /* why it fails: appended to the entry's message */
} closer;

/* dL/dtheta_i from one backward call into zeros, with theta_i at theta_i + offset (in float). */
static int analytic_at(const instance *in, const model_fn *m, const float *w, int64_t i, double offset, float *g,
                       double *value)
{
    size_t n = ck_n_params(in);
    float orig = in->theta[i];
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    in->theta[i] = (float)((double)orig + offset);
    ck_fill_sentinel(g, n + GUARD_FLOATS);
    memset(g, 0, n * sizeof *g);
    int ok = !ck_backward(in, m, in->theta, w, g, why, sizeof why);
    *value = g[i];
    in->theta[i] = orig;
    return ok;
}

/* 2.: at theta_i + offset, the analytic derivative and Ridders' central estimate from first step h;
 * *err their relative error. 0 when either cannot be computed. */
static int at_offset(const instance *in, const model_fn *m, const float *w, int64_t i, double offset, double h,
                     fd_work *wk, float *g, double max_scale, double *analytic, double *numeric, double *err)
{
    float orig = in->theta[i];
    double scale, estimate_error;
    if (!analytic_at(in, m, w, i, offset, g, analytic))
        return 0;
    in->theta[i] = (float)((double)orig + offset);
    int ok = ridders(in, m, w, in->theta, i, h, 0, wk, numeric, &scale, &estimate_error);
    in->theta[i] = orig;
    if (ok)
        *err = relative_error(*analytic, *numeric, scale, max_scale);
    return ok;
}

/* The distance from |x| to the next float up. */
static double ulp_of(float x)
{
    float a = fabsf(x);
    return (double)nextafterf(a, INFINITY) - (double)a;
}

/* The standard deviation of sum_k w_k (hi_k - lo_k) that comes from rounding each output to float
 * (uniform within half an ulp: variance ulp^2 / 12), over the outputs that changed. */
static double rounding_noise(const float *w, const float *hi, const float *lo, size_t n)
{
    double var = 0.0;
    for (size_t k = 0; k < n; k++)
        if (memcmp(&hi[k], &lo[k], sizeof hi[k]) != 0) {
            double uh = ulp_of(hi[k]), ul = ulp_of(lo[k]);
            var += (double)w[k] * (double)w[k] * (uh * uh + ul * ul) / 12.0;
        }
    return sqrt(var);
}

/* 3.: on side `side` (+-1), the difference quotient over [theta_i, theta_i + side span] (the interval as
 * stored in float) against the midpoint-rule mean of the analytic derivative over it. *err is their
 * relative error less KINK_NOISE_SIGMAS standard deviations of the quotient's float rounding (an entry
 * whose derivative is tiny next to the outputs it moves cannot be resolved better): the entry passes
 * when it is <= the tolerance. */
static int interval_mean(const instance *in, const model_fn *m, const float *w, int64_t i, int side, double span,
                         int samples, fd_work *wk, float *g, double max_scale, double *mean, double *quotient,
                         double *err, double *raw)
{
    double scale, moved;
    if (!difference(in, m, w, in->theta, i, span, side, wk, quotient, &scale))
        return 0;
    const float *moved_out = side > 0 ? wk->a : wk->b;
    double noise = rounding_noise(w, moved_out, wk->base, ck_fn_outputs(in, m));
    float orig = in->theta[i];
    moved = (double)(float)((double)orig + side * span) - (double)orig;
    double sum = 0.0, v;
    for (int k = 0; k < samples; k++) {
        if (!analytic_at(in, m, w, i, moved * (k + 0.5) / samples, g, &v))
            return 0;
        sum += v;
    }
    *mean = sum / samples;
    double allowed = KINK_NOISE_SIGMAS * noise / fabs(moved);
    double diff = fabs(*mean - *quotient);
    *raw = relative_error(*mean, *quotient, scale, max_scale);
    *err = *raw * (diff > allowed ? (diff - allowed) / diff : 0.0);
    return 1;
}

/* 1 when entry i passes on a closer look (see KINK_OFFSET), else 0 with cl->fail. wk->base must hold
 * the output at in->theta. */
static int closer_look(const instance *in, const model_fn *m, const float *w, int64_t i, double analytic, fd_work *wk,
                       double max_scale, closer *cl)
{
    const double delta = KINK_OFFSET * fmax(fabs((double)in->theta[i]), GRAD_STEP_FLOOR);
    const double h = delta * KINK_STEP_SHARE;
    float *g = ck_guarded_alloc(ck_n_params(in));
    if (!g) {
        snprintf(cl->fail, sizeof cl->fail, "; out of memory for a closer look");
        return 0;
    }
    strbuf why = {0};
    /* 1. one-sided differences; they disagree when they differ by more than the tolerance and more than
     * their error estimates (the rounding of the outputs makes small steps noisy) */
    double rs, ls, re, le;
    if (!ridders(in, m, w, in->theta, i, h, +1, wk, &cl->right, &rs, &re) ||
        !ridders(in, m, w, in->theta, i, h, -1, wk, &cl->left, &ls, &le)) {
        ck_sb_printf(&why, "; the one-sided differences from steps <= %.2g are not finite", h);
    } else {
        const double sc = fmax(rs, ls);
        int kink = relative_error(cl->right, cl->left, sc, max_scale) > wk->tol &&
                   fabs(cl->right - cl->left) > 2.0 * (re + le);
        if (!kink) {
            cl->err = relative_error(analytic, 0.5 * (cl->right + cl->left), sc, max_scale);
            if (cl->err <= wk->tol) {
                cl->how = LOOK_SMALL_STEPS;
                free(g);
                return 1;
            }
            ck_sb_printf(&why, "; the one-sided differences from steps <= %.2g agree (%.6g, %.6g): no kink there", h,
                         cl->right, cl->left);
        } else {
            /* 2. off the kink, on both sides */
            int sides_ok = 1;
            cl->err = 0.0;
            for (int side = 1; side >= -1 && sides_ok; side -= 2) {
                double a = 0.0, num = 0.0, e = INFINITY;
                int ok = 0;
                for (int k = 0; k < KINK_TRIES && !ok; k++) {
                    cl->offset = side * delta * (1.0 + KINK_TRY_GROWTH * k);
                    ok = at_offset(in, m, w, i, cl->offset, h, wk, g, max_scale, &a, &num, &e) && e <= wk->tol;
                }
                if (!ok)
                    ck_sb_printf(&why, "; one-sided differences %.6g right, %.6g left: a kink, and off it, at theta "
                                 "%+.3g, analytic %.6g vs central difference %.6g (rel. error %.1e)", cl->right,
                                 cl->left, cl->offset, a, num, e);
                sides_ok = ok;
                cl->err = fmax(cl->err, e);
            }
            if (sides_ok) {
                cl->how = LOOK_KINK;
                free(g), free(why.s);
                return 1;
            }
        }
    }
    /* 3. kinks closer together than the steps, or rounding: means over an interval on each side; 512
     * points only where 64 came close (a wrong gradient is far off at once) */
    const double wide = fmax(fabs((double)in->theta[i]), GRAD_STEP_FLOOR);
    const double spans[3] = {KINK_SPAN * delta, GRAD_FIRST_STEP * wide, wide};
    const int samples[2] = {KINK_SAMPLES, KINK_SAMPLES_MORE};
    int sides_ok = 0;
    double first_err = INFINITY;
    for (int k = 0; k < 6 && !sides_ok; k++) {
        if (k % 2 && first_err > KINK_MORE_SAMPLES_BELOW * wk->tol)
            continue;
        cl->span = spans[k / 2];
        cl->samples = samples[k % 2];
        cl->err = cl->raw = 0.0;
        sides_ok = 1;
        for (int side = 1; side >= -1 && sides_ok; side -= 2) {
            double mean = 0.0, quotient = 0.0, e = INFINITY, raw = INFINITY;
            sides_ok = interval_mean(in, m, w, i, side, cl->span, cl->samples, wk, g, max_scale, &mean, &quotient, &e,
                                     &raw) &&
                       e <= wk->tol;
            if (!sides_ok && k == 0)
                ck_sb_printf(&why, "; over [theta, theta %+.3g] the difference quotient %.6g vs the analytic "
                             "gradient's mean %.6g (%d points; rel. error %.1e; wider intervals too)", side * cl->span,
                             quotient, mean, cl->samples, raw);
            cl->err = fmax(cl->err, e);
            cl->raw = fmax(cl->raw, raw);
        }
        if (k % 2 == 0)
            first_err = cl->err;
    }
    if (sides_ok)
        cl->how = LOOK_DENSE;
    else
        snprintf(cl->fail, sizeof cl->fail, "%s", ck_sb_text(&why));
    free(g), free(why.s);
    return sides_ok;
}

typedef struct fd_table {
    model_fn m;
    size_t n_out, ne;
    size_t *idx;                  /* output index of each entry */
    float *grad;                  /* ne x n_params analytic derivatives, or NULL (computed per parameter) */
    float *w;                     /* one-hot weights, n_out */
    fd_work wk;                   /* outputs (n_out + guard); base: at theta */
    double *num, *est_err, *allow; /* per entry: Ridders' estimate, its error estimate, the rounding allowance */
    double *ana;                  /* per entry: the analytic derivative (NAN: backward failed) */
    double *prev, *cur, *col_est, *col_err, *col_allow;
    unsigned char *done;
} fd_table;

typedef struct fd_ctx {
    fd_table t[2];
    int n, ready;
    float *g;                     /* a gradient (n_params + guard) */
    char why[BIASKIT_ERROR_MESSAGE_MAX + 200]; /* why the look could not run */
} fd_ctx;

static void fd_table_free(fd_table *t)
{
    free(t->idx), free(t->grad), free(t->w), free(t->wk.a), free(t->wk.b), free(t->wk.base);
    free(t->num), free(t->est_err), free(t->allow), free(t->prev), free(t->cur), free(t->col_est);
    free(t->col_err), free(t->col_allow), free(t->done), free(t->ana);
    memset(t, 0, sizeof *t);
}

static void fd_free(fd_ctx *fc)
{
    for (int k = 0; k < 2; k++)
        fd_table_free(&fc->t[k]);
    free(fc->g);
    memset(fc, 0, sizeof *fc);
}

/* FD_POINTS distances of a row of n: 0, then round(x^(j / (FD_POINTS - 2))) for x = n - 1 (1 .. n - 1),
 * without repeats, into d[]; returns the count. */
static size_t fd_distances(size_t n, size_t *d)
{
    size_t k = 0;
    for (int j = -1; j <= FD_POINTS - 2 && n > 0; j++) {
        size_t v = j < 0 ? 0 : (size_t)llround(pow((double)(n - 1), (double)j / (FD_POINTS - 2)));
        if (v < n && (k == 0 || v > d[k - 1]))
            d[k++] = v;
    }
    return k;
}

/* One table of entries: every output of m (up to FD_MAX_ENTRIES) or FD_POINTS per row; the output at
 * theta; the analytic derivatives (cached when they fit). 0, or 1 with fc->why. */
static int fd_table_open(const instance *in, const model_fn *m, int all, fd_ctx *fc, fd_table *t)
{
    size_t n = ck_n_params(in);
    t->m = *m;
    t->n_out = ck_fn_outputs(in, m);
    size_t row = (size_t)m->distances, rows = row ? t->n_out / row : 0;
    all = all && t->n_out <= FD_MAX_ENTRIES;
    size_t cap = all ? t->n_out : rows * FD_POINTS, S = GRAD_STEPS;
    t->idx = malloc((cap ? cap : 1) * sizeof *t->idx);
    t->w = calloc(t->n_out ? t->n_out : 1, sizeof *t->w);
    t->wk = (fd_work){ck_guarded_alloc(t->n_out), ck_guarded_alloc(t->n_out), ck_guarded_alloc(t->n_out), 0.0};
    t->num = malloc((cap ? cap : 1) * sizeof(double)), t->est_err = malloc((cap ? cap : 1) * sizeof(double));
    t->allow = malloc((cap ? cap : 1) * sizeof(double)), t->prev = malloc((cap ? cap : 1) * S * sizeof(double));
    t->cur = malloc((cap ? cap : 1) * S * sizeof(double)), t->col_est = malloc((cap ? cap : 1) * sizeof(double));
    t->col_err = malloc((cap ? cap : 1) * sizeof(double)), t->col_allow = malloc((cap ? cap : 1) * sizeof(double));
    t->done = malloc(cap ? cap : 1);
    t->ana = malloc((cap ? cap : 1) * sizeof(double));
    if (!t->ana || !t->idx || !t->w || !t->wk.a || !t->wk.b || !t->wk.base || !t->num || !t->est_err || !t->allow ||
        !t->prev || !t->cur || !t->col_est || !t->col_err || !t->col_allow || !t->done) {
        snprintf(fc->why, sizeof fc->why, "out of memory for the entries of %zu outputs", t->n_out);
        return 1;
    }
    if (all)
        for (size_t k = 0; k < t->n_out; k++)
            t->idx[t->ne++] = k;
    else
        for (size_t r = 0; r < rows; r++) {
            size_t d[FD_POINTS + 1], nd = fd_distances(row, d);
            for (size_t j = 0; j < nd; j++)
                t->idx[t->ne++] = r * row + d[j];
        }
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    if (ck_forward_finite(in, m, in->theta, t->wk.base, why, sizeof why)) {
        snprintf(fc->why, sizeof fc->why, "%s", why);
        return 1;
    }
    if (t->ne * n <= FD_MAX_CACHE && (t->grad = malloc((t->ne * n > 0 ? t->ne * n : 1) * sizeof *t->grad))) {
        double ignored;
        for (size_t e = 0; e < t->ne; e++) {
            t->w[t->idx[e]] = 1.0f;
            int ok = analytic_at(in, m, t->w, 0, 0.0, fc->g, &ignored);
            t->w[t->idx[e]] = 0.0f;
            if (!ok) {
                snprintf(fc->why, sizeof fc->why, "%s with a one-hot dtable failed", ck_fn_backward_name(m));
                return 1;
            }
            memcpy(t->grad + e * n, fc->g, n * sizeof *fc->g);
        }
    }
    return 0;
}

/* The entries for the case m at the current theta (once per case). 0, or 1 with fc->why. */
static int fd_open(const instance *in, const model_fn *m, double tol, fd_ctx *fc)
{
    if (fc->ready)
        return fc->why[0] != 0;
    fc->ready = 1;
    if (!(fc->g = ck_guarded_alloc(ck_n_params(in)))) {
        snprintf(fc->why, sizeof fc->why, "out of memory");
        return 1;
    }
    if (fd_table_open(in, m, 1, fc, &fc->t[fc->n++]))
        return 1;
    int32_t far = in->c->opt->max_distances;
    size_t heads = m->distances ? ck_fn_outputs(in, m) / (size_t)m->distances : 1;
    if (heads && (size_t)far * heads > FD_MAX_FAR_OUTPUTS)
        far = (int32_t)(FD_MAX_FAR_OUTPUTS / heads);
    if (m->kind == FN_TABLE && far > m->distances) {
        model_fn mf = {.kind = FN_TABLE, .distances = far};
        if (fd_table_open(in, &mf, 0, fc, &fc->t[fc->n])) { /* not finite far away: that is table-finite's */
            fd_table_free(&fc->t[fc->n]);
            fc->why[0] = '\0';
        } else {
            fc->n++;
        }
    }
    for (int k = 0; k < fc->n; k++)
        fc->t[k].wk.tol = tol;
    return 0;
}

/* d out_idx[e] / dtheta_i, analytic. */
static int fd_analytic(const instance *in, fd_table *t, fd_ctx *fc, size_t e, int64_t i, double *value)
{
    if (t->grad) {
        *value = t->grad[e * ck_n_params(in) + (size_t)i];
        return 1;
    }
    t->w[t->idx[e]] = 1.0f;
    int ok = analytic_at(in, &t->m, t->w, i, 0.0, fc->g, value);
    t->w[t->idx[e]] = 0.0f;
    return ok;
}

/* The float rounding of entry k between the outputs a and b over the move between them. */
static double fd_allowance(const float *a, const float *b, size_t k, double moved)
{
    return FD_ROUND_ULPS * fmax(ulp_of(a[k]), ulp_of(b[k])) / fabs(moved);
}

/* ridders() (side 0) for every entry of t at once from first step h: where an entry's error estimate is
 * smaller than what t->est_err holds, its estimate into t->num and the rounding allowance of its
 * smallest step into t->allow. 0 when no step gives finite outputs. */
static int fd_ridders(const instance *in, fd_table *t, int64_t i, double h)
{
    const size_t S = GRAD_STEPS, ne = t->ne;
    const double order = GRAD_SHRINK * GRAD_SHRINK;
    double mp = 0.0, mm = 0.0;
    int tries = 0;
    while (!moved_output(in, &t->m, in->theta, i, h, t->wk.a, &mp) ||
           !moved_output(in, &t->m, in->theta, i, -h, t->wk.b, &mm))
        if (++tries > 8)
            return 0;
        else
            h /= 4.0;
    for (size_t e = 0; e < ne; e++) {
        size_t k = t->idx[e];
        t->prev[e * S] = ((double)t->wk.a[k] - (double)t->wk.b[k]) / (mp - mm);
        t->col_est[e] = t->prev[e * S];
        t->col_err[e] = INFINITY;
        t->col_allow[e] = fd_allowance(t->wk.a, t->wk.b, k, mp - mm);
        t->done[e] = 0;
    }
    size_t open = ne;
    for (size_t k = 1; k < S && open; k++) {
        h /= GRAD_SHRINK;
        if (!moved_output(in, &t->m, in->theta, i, h, t->wk.a, &mp) ||
            !moved_output(in, &t->m, in->theta, i, -h, t->wk.b, &mm))
            break;
        for (size_t e = 0; e < ne; e++) {
            if (t->done[e])
                continue;
            double *prev = t->prev + e * S, *cur = t->cur + e * S;
            size_t o = t->idx[e];
            cur[0] = ((double)t->wk.a[o] - (double)t->wk.b[o]) / (mp - mm);
            double allow = fd_allowance(t->wk.a, t->wk.b, o, mp - mm), fac = order;
            for (size_t j = 1; j <= k; j++, fac *= order) {
                cur[j] = (cur[j - 1] * fac - prev[j - 1]) / (fac - 1.0);
                double err = fmax(fabs(cur[j] - cur[j - 1]), fabs(cur[j] - prev[j - 1]));
                if (err <= t->col_err[e]) {
                    t->col_err[e] = err;
                    t->col_est[e] = cur[j];
                    t->col_allow[e] = allow;
                }
            }
            if (fabs(cur[k] - prev[k - 1]) >= 2.0 * t->col_err[e]) {
                t->done[e] = 1;
                open--;
            }
            memcpy(prev, cur, (k + 1) * sizeof *cur);
        }
    }
    for (size_t e = 0; e < ne; e++)
        if (t->col_err[e] < t->est_err[e] || !isfinite(t->num[e])) {
            t->num[e] = t->col_est[e];
            t->est_err[e] = t->col_err[e];
            t->allow[e] = t->col_allow[e];
        }
    return 1;
}

/* One entry's verdict: diff <= tol max(|a|, |n|) + allow. *rel gets diff / max(|a|, |n|), *tol_used the
 * tolerance on that scale, *norm diff / (max(|a|, |n|) + allow / tol) (<= tol when it passes). */
static int fd_verdict(double a, double n, double allow, double tol, double *rel, double *tol_used, double *norm)
{
    double diff = fabs(a - n), big = fmax(fabs(a), fabs(n));
    *rel = big > 0.0 ? diff / big : (diff > 0.0 ? INFINITY : 0.0);
    *tol_used = big > 0.0 ? tol + allow / big : INFINITY;
    *norm = big + allow / tol > 0.0 ? diff / (big + allow / tol) : 0.0;
    return isfinite(a) && diff <= tol * big + allow;
}

/* The FD_WORST entries farthest beyond their tolerance (rel / tol), the farthest first. */
static void fd_keep_worst(grad_report *gr, const fd_entry *x)
{
    int n = gr->n_worst < FD_WORST ? gr->n_worst : FD_WORST, at = n;
    while (at > 0 && gr->worst_entries[at - 1].rel / gr->worst_entries[at - 1].tol < x->rel / x->tol)
        at--;
    if (at >= FD_WORST)
        return;
    for (int k = (n < FD_WORST ? n : FD_WORST - 1); k > at; k--)
        gr->worst_entries[k] = gr->worst_entries[k - 1];
    gr->worst_entries[at] = *x;
    if (gr->n_worst < FD_WORST)
        gr->n_worst++;
}

/* "a[0] = 0.5, a[1] = 0.5625, ... (24 values)": the first FD_SHOWN_PARAMS values of theta by name. */
static void fd_params_text(const instance *in, const char *params, char *buf, size_t size)
{
    strbuf b = {0};
    size_t n = ck_n_params(in);
    ck_sb_printf(&b, "%s: ", params);
    for (size_t k = 0; k < n && k < FD_SHOWN_PARAMS; k++) {
        char name[64];
        ck_entry_name(in, (int64_t)k, name, sizeof name);
        ck_sb_printf(&b, "%s%s = %.7g", k ? ", " : "", name, (double)in->theta[k]);
    }
    ck_sb_printf(&b, "%s(%zu value%s)", n > FD_SHOWN_PARAMS ? ", ... " : " ", n, n == 1 ? "" : "s");
    snprintf(buf, size, "%s", ck_sb_text(&b));
    free(b.s);
}

/* Parameter i per entry: 1 when every entry passes (*worst the largest normalised error, see
 * fd_verdict), 0 when one fails (its entries into gr's worst), -1 when the look cannot run. */
static int per_entry_look(const instance *in, const model_fn *m, fd_ctx *fc, int64_t i, const char *params,
                          grad_report *gr, double *worst)
{
    if (fd_open(in, m, gr->tol, fc)) {
        if (!gr->fd_unrun[0])
            snprintf(gr->fd_unrun, sizeof gr->fd_unrun, "%s", fc->why);
        return -1;
    }
    double t = fabs((double)in->theta[i]);
    const double starts[2] = {GRAD_FIRST_STEP * fmax(t, GRAD_STEP_FLOOR),
                              GRAD_FIRST_STEP * fmax(t, GRAD_STEP_FLOOR_SMALL)};
    int passed = 1, looks = 0;
    *worst = 0.0;
    for (int k = 0; k < fc->n; k++) {
        fd_table *tb = &fc->t[k];
        for (size_t e = 0; e < tb->ne; e++)
            tb->num[e] = NAN, tb->est_err[e] = INFINITY, tb->allow[e] = 0.0;
        int found = 0;
        for (int s = 0; s < 2; s++)
            if (!(s == 1 && starts[1] == starts[0]))
                found |= fd_ridders(in, tb, i, starts[s]);
        if (!found) {
            char label[128];
            ck_fn_label(&tb->m, label, sizeof label);
            if (!gr->fd_unrun[0])
                snprintf(gr->fd_unrun, sizeof gr->fd_unrun, "the outputs of %s are not finite at theta +- any step",
                         label);
            return -1;
        }
        for (size_t e = 0; e < tb->ne; e++)
            if (!fd_analytic(in, tb, fc, e, i, &tb->ana[e]))
                tb->ana[e] = NAN;
        /* the failing entries, worst first, get the closer look until one fails it */
        for (;;) {
            size_t bad = tb->ne;
            double bad_norm = -1.0, a = 0.0;
            for (size_t e = 0; e < tb->ne; e++) {
                double ae = tb->ana[e], rel, tol_used, norm;
                if (tb->done[e] == 2)
                    continue;
                int ok = fd_verdict(ae, tb->num[e], tb->allow[e], gr->tol, &rel, &tol_used, &norm);
                if (ok)
                    *worst = fmax(*worst, norm);
                else if (norm > bad_norm || !isfinite(norm))
                    bad = e, bad_norm = norm, a = ae;
            }
            if (bad == tb->ne)
                break;
            closer cl = {0};
            if (looks < FD_CLOSER_LOOKS) {
                looks++;
                tb->w[tb->idx[bad]] = 1.0f;
                int ok = closer_look(in, &tb->m, tb->w, i, a, &tb->wk, 0.0, &cl);
                tb->w[tb->idx[bad]] = 0.0f;
                if (ok) {
                    tb->done[bad] = 2; /* passed on a closer look */
                    *worst = fmax(*worst, cl.err);
                    continue;
                }
            }
            passed = 0;
            for (size_t e = 0; e < tb->ne; e++) {
                double ae = tb->ana[e];
                fd_entry x = {.theta = in->theta[i]};
                if (tb->done[e] == 2)
                    continue;
                double norm;
                if (fd_verdict(ae, tb->num[e], tb->allow[e], gr->tol, &x.rel, &x.tol, &norm))
                    continue;
                x.analytic = ae, x.numeric = tb->num[e];
                ck_entry_name(in, i, x.param, sizeof x.param);
                ck_output_place(in, &tb->m, tb->idx[e], x.place, sizeof x.place);
                snprintf(x.params, sizeof x.params, "%s", params);
                fd_keep_worst(gr, &x);
            }
            if (!gr->fd_params[0])
                fd_params_text(in, params, gr->fd_params, sizeof gr->fd_params);
            break;
        }
        for (size_t e = 0; e < tb->ne; e++)
            tb->done[e] = 0;
        if (!passed)
            break; /* the far entries would only cost time */
    }
    return passed;
}

/* The worst entries and the parameter set, appended to a FAIL. */
static void fd_report_worst(const grad_report *gr, strbuf *b)
{
    if (!gr->n_worst)
        return;
    ck_sb_printf(b, "; per table entry (dT/dtheta from %s with a one-hot dtable vs central differences of "
                 "that entry alone), the worst:", gr->backward_name);
    for (int k = 0; k < gr->n_worst; k++) {
        const fd_entry *x = &gr->worst_entries[k];
        ck_sb_printf(b, "%s %s = %.7g (%s), %s: analytic %.7g vs numeric %.7g, rel. error %.2e > tolerance "
                     "%.2e", k ? ";" : "", x->param, x->theta, x->params, x->place, x->analytic, x->numeric, x->rel,
                     x->tol);
    }
    ck_sb_printf(b, "; parameters (%s)", gr->fd_params);
}

/* ---- --params --------------------------------------------------------------------------------- */

/* theta = the given parameters (--params), then param_project; *label names them, and says how many
 * values the projection moved (the first by name). */
static void given_params(const instance *in, char *label, size_t size)
{
    size_t n = ck_n_params(in), moved = 0, first = 0;
    const float *p = in->c->opt->params;
    memcpy(in->theta, p, n * sizeof *in->theta);
    ck_project(in, in->theta);
    for (size_t k = 0; k < n; k++)
        if (memcmp(&in->theta[k], &p[k], sizeof p[k]) != 0 && !moved++)
            first = k;
    if (!moved) {
        snprintf(label, size, "the given parameters (--params)");
        return;
    }
    char name[64];
    ck_entry_name(in, (int64_t)first, name, sizeof name);
    snprintf(label, size, "the given parameters (--params; param_project moved %zu of %zu, the first %s %.7g -> %.7g)",
             moved, n, name, (double)p[first], (double)in->theta[first]);
}

/* One entry's verdict into the report. */
static void record_entry(const instance *in, const model_fn *m, int64_t i, double a, double num, double err,
                         int passed, const closer *cl, const char *params, grad_report *gr)
{
    char entry[64], label[128];
    ck_entry_name(in, i, entry, sizeof entry);
    ck_fn_label(m, label, sizeof label);
    double final = passed && cl->how ? cl->err : err;
    if (final > gr->worst) {
        gr->worst = final;
        snprintf(gr->worst_entry, sizeof gr->worst_entry, "%s", entry);
    }
    gr->checked++;
    if (!passed && !gr->failed++)
        snprintf(gr->first_fail, sizeof gr->first_fail,
                 "%s: analytic %.6g vs central difference %.6g (rel. error %.1e > %g; %s, %s)%s", entry, a, num, err,
                 gr->tol, params, label, cl->fail);
    if (!passed)
        return;
    if (cl->how == LOOK_SMALL_STEPS)
        gr->closer++;
    if (cl->how == LOOK_ENTRIES && !gr->fd_passed++)
        snprintf(gr->fd_first_pass, sizeof gr->fd_first_pass, "%s (%s, %s): L's rel. error %.1e, per entry %.1e",
                 entry, params, label, err, cl->err);
    if (cl->how == LOOK_KINK && !gr->kinks++)
        snprintf(gr->first_kink, sizeof gr->first_kink,
                 "%s (%s, %s): one-sided differences %.6g and %.6g, matched at theta +- %.2g (rel. error %.1e)", entry,
                 params, label, cl->right, cl->left, fabs(cl->offset), cl->err);
    if (cl->how == LOOK_DENSE && !gr->dense++)
        snprintf(gr->first_dense, sizeof gr->first_dense,
                 "%s (%s, %s): over [theta - %.2g, theta] and [theta, theta + %.2g], %d points (rel. error %.1e%s)",
                 entry, params, label, cl->span, cl->span, cl->samples, cl->raw,
                 cl->raw > gr->tol ? ", within the float rounding of the outputs" : "");
}

/* One parameter set (named `params`) and one output shape: backward vs numeric derivative for the
 * chosen entries. */
static void check_gradient_case(const instance *in, const model_fn *m, uint64_t seed, const char *params, size_t cap,
                                grad_report *gr)
{
    size_t n = ck_n_params(in), n_out = ck_fn_outputs(in, m);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    float *w = malloc((n_out ? n_out : 1) * sizeof *w), *g0 = ck_guarded_alloc(n);
    fd_work wk = {ck_guarded_alloc(n_out), ck_guarded_alloc(n_out), ck_guarded_alloc(n_out), gr->tol};
    fd_ctx fc = {0};
    int64_t *entries = malloc((cap < n ? cap : n) * sizeof *entries);
    double *num = malloc((cap < n ? cap : n) * sizeof *num), *scale = malloc((cap < n ? cap : n) * sizeof *scale);
    int *ok = malloc((cap < n ? cap : n) * sizeof *ok);
    if (!w || !g0 || !wk.a || !wk.b || !wk.base || !entries || !num || !scale || !ok) {
        snprintf(gr->setup_fail, sizeof gr->setup_fail, "out of memory for the gradient check");
        goto done;
    }
    /* the stream index of a table's or an embedding's weights is its distances (as before ABI 2) */
    rng r = ck_rng_for(seed, R_WEIGHTS, (uint64_t)m->distances + (uint64_t)m->rows);
    ck_random_fill(w, n_out, &r);
    memset(g0, 0, n * sizeof *g0);
    if (ck_backward(in, m, in->theta, w, g0, why, sizeof why) || ck_forward_finite(in, m, in->theta, wk.base, why, sizeof why)) {
        snprintf(gr->setup_fail, sizeof gr->setup_fail, "%s", why);
        goto done;
    }
    check_adds(in, m, w, g0, gr, seed);
    if (gr->setup_fail[0])
        goto done;
    rng re = ck_rng_for(seed, R_ENTRIES, (uint64_t)m->distances + (uint64_t)m->rows);
    size_t k = choose_entries(g0, n, cap, &re, entries);
    double max_scale = 0.0;
    for (size_t e = 0; e < k; e++) {
        ok[e] = numeric_derivative(in, m, w, in->theta, entries[e], &wk, &num[e], &scale[e]);
        if (ok[e])
            max_scale = fmax(max_scale, scale[e]);
        else
            gr->unchecked++;
    }
    for (size_t e = 0; e < k; e++) {
        if (!ok[e])
            continue;
        double a = g0[entries[e]], err = relative_error(a, num[e], scale[e], max_scale);
        closer cl = {0};
        int passed = err <= gr->tol, looked = 0;
        if (!passed && gr->failed < KINK_MAX_FAILURES) {
            passed = closer_look(in, m, w, entries[e], a, &wk, max_scale, &cl);
            looked = 1;
        }
        if (!passed && (m->kind == FN_TABLE || m->kind == FN_GRID) && gr->fd_failed < FD_MAX_FAILURES &&
            gr->fd_looks++ < FD_MAX_LOOKS) {
            double worst = 0.0;
            int r = per_entry_look(in, m, &fc, entries[e], params, gr, &worst);
            if (r > 0) {
                passed = 1;
                cl = (closer){.how = LOOK_ENTRIES, .err = worst};
            } else if (r == 0) {
                gr->fd_failed++;
            }
        }
        if (!passed && !looked)
            gr->unlooked++;
        record_entry(in, m, entries[e], a, num[e], err, passed, &cl, params, gr);
    }
done:
    free(w), free(g0), free(wk.a), free(wk.b), free(wk.base), free(entries), free(num), free(scale), free(ok);
    fd_free(&fc);
}

static void report_gradient(checker *c, const grad_report *gr, const char *what, const char *cases, size_t cap)
{
    if (gr->setup_fail[0]) {
        ck_item(c, BK_CHECK_FAIL, gr->id, "%s: %s", what, gr->setup_fail);
        return;
    }
    if (gr->adds_failed)
        ck_item(c, BK_CHECK_FAIL, gr->adds_id, "%s does not add into dtheta in %d entries: %s", what, gr->adds_failed,
                gr->adds_fail);
    else
        ck_item(c, BK_CHECK_PASS, gr->adds_id, "%s adds into a non-zero dtheta (+=; within %g relative)", what,
                ADD_TOLERANCE);
    char unchecked[96] = "", closer[200] = "";
    strbuf kinks = {0};
    if (gr->unchecked)
        snprintf(unchecked, sizeof unchecked, "; %d entries not checkable (outputs not finite at theta +- any step)",
                 gr->unchecked);
    if (gr->closer)
        snprintf(closer, sizeof closer, "; %d entr%s matched one-sided differences from steps <= %g x max(|theta|, "
                 "%g) x %g (no kink there)", gr->closer, gr->closer == 1 ? "y" : "ies", KINK_OFFSET, GRAD_STEP_FLOOR,
                 KINK_STEP_SHARE);
    if (gr->kinks)
        ck_sb_printf(&kinks, "; %d kink%s stepped around (checked at theta +- %g x max(|theta|, %g) instead), the "
                     "first: %s", gr->kinks, gr->kinks == 1 ? "" : "s", KINK_OFFSET, GRAD_STEP_FLOOR, gr->first_kink);
    if (gr->dense)
        ck_sb_printf(&kinks, "; %d entr%s with kinks closer together than the steps (ReLU over a fine grid) or "
                     "differences drowned in float rounding: the difference quotient on each side matched the "
                     "analytic gradient averaged over the interval (%d or %d points; %g, %g or 1 x max(|theta|, %g) "
                     "wide), the first: %s", gr->dense, gr->dense == 1 ? "y" : "ies", KINK_SAMPLES, KINK_SAMPLES_MORE,
                     KINK_SPAN * KINK_OFFSET, GRAD_FIRST_STEP, GRAD_STEP_FLOOR, gr->first_dense);
    if (gr->fd_passed)
        ck_sb_printf(&kinks, "; %d entr%s failed L = sum w*out only through the float rounding of the outputs "
                     "and matched per table entry (dT/dtheta within the tolerance + %g ulp(T) / (2 step)), the first: "
                     "%s", gr->fd_passed, gr->fd_passed == 1 ? "y" : "ies", FD_ROUND_ULPS, gr->fd_first_pass);
    if (gr->failed && gr->fd_unrun[0])
        ck_sb_printf(&kinks, "; the per-entry look could not run: %s", gr->fd_unrun);
    if (gr->failed)
        fd_report_worst(gr, &kinks);
    char unlooked[128] = "";
    if (gr->unlooked)
        snprintf(unlooked, sizeof unlooked, " (%d of them without a closer look: %d had failed it)", gr->unlooked,
                 KINK_MAX_FAILURES);
    if (gr->failed)
        ck_item(c, BK_CHECK_FAIL, gr->id, "%s gradient %s; %d of %d checks fail%s, worst rel. error %.1e at %s%s%s%s",
                what, gr->first_fail, gr->failed, gr->checked, unlooked, gr->worst, gr->worst_entry, unchecked, closer,
                ck_sb_text(&kinks));
    else if (gr->checked == 0)
        ck_item(c, BK_CHECK_FAIL, gr->id, "%s gradient: no entry could be checked%s", what, unchecked);
    else
        ck_item(c, BK_CHECK_PASS, gr->id,
                "%s gradient vs central differences in float64: %s, up to %zu entries each, %d checks; worst rel. error "
                "%.1e at %s (tolerance %g; steps %g x max(|theta|, %g or %g) / %g^k, Ridders-extrapolated)%s%s%s",
                what, cases, cap, gr->checked, gr->worst, gr->worst_entry[0] ? gr->worst_entry : "-", gr->tol,
                GRAD_FIRST_STEP, GRAD_STEP_FLOOR, GRAD_STEP_FLOOR_SMALL, GRAD_SHRINK, unchecked, closer,
                ck_sb_text(&kinks));
    free(kinks.s);
}

static void random_params_label(int s, char *buf, size_t size)
{
    snprintf(buf, size, "random parameter set %d", s + 1);
}

/* The "params" item: the table finite up to --distances at the given parameters. 0, or 1 when it is
 * not (FAIL: no gradient there). */
static int given_table_finite(checker *c, const instance *in, const char *params)
{
    model_fn m = {.kind = FN_TABLE, .distances = c->opt->max_distances};
    float *t = ck_guarded_alloc(ck_fn_outputs(in, &m));
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128] = "out of memory for the table";
    int bad = !t || ck_forward_finite(in, &m, in->theta, t, why, sizeof why);
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "params", "table at %s, %d distances: %s", params, m.distances, why);
    else
        ck_item(c, BK_CHECK_PASS, "params", "table finite at %s, %d distances", params, m.distances);
    free(t);
    return bad;
}

void ck_unit_table_gradient(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    grad_report gr = {.id = "table-gradient", .adds_id = "table-backward-adds", .tol = c->opt->tolerance,
                      .backward_name = "table_backward()"};
    if (ck_open_default(c, "table-gradient", c->opt->seed, 0, &in))
        return;
    if (in.n_params == 0 || !c->d->table_backward) {
        ck_item(c, BK_CHECK_SKIP, "table-gradient", "table gradient: %s", in.n_params == 0
                ? "no parameters with the default configuration" : "no table_backward() (see capabilities)");
        ck_instance_close(&in);
        return;
    }
    /* 64 and 300 distances, and far out (GRAD_FAR_DISTANCES, within --distances): a gradient that goes
     * wrong only at long distances (a branch on d, a float that loses d's low bits) shows there */
    const int32_t far = c->opt->max_distances < GRAD_FAR_DISTANCES ? c->opt->max_distances : GRAD_FAR_DISTANCES;
    const int32_t sizes[] = {64, 300, far};
    const size_t n_sizes = far > 300 ? 3 : 2;
    const int given = c->opt->params != NULL;
    for (int s = -given; s < c->opt->n_seeds && !gr.setup_fail[0]; s++) {
        uint64_t seed = s < 0 ? c->opt->seed : bk_derive_seed(c->opt->seed, 200, (uint64_t)s);
        char why[BIASKIT_ERROR_MESSAGE_MAX + 128], params[256];
        if (s < 0) {
            given_params(&in, params, sizeof params);
            if (given_table_finite(c, &in, params))
                continue;
        } else {
            random_params_label(s, params, sizeof params);
            if (ck_random_params(&in, seed, why, sizeof why)) {
                snprintf(gr.setup_fail, sizeof gr.setup_fail, "%s", why);
                break;
            }
        }
        for (size_t k = 0; k < n_sizes && !gr.setup_fail[0]; k++) {
            model_fn m = {.kind = FN_TABLE, .distances = sizes[k]};
            check_gradient_case(&in, &m, seed, params, GRAD_MAX_TABLE_ENTRIES, &gr);
        }
    }
    char cases[200], far_text[32] = "";
    if (n_sizes == 3)
        snprintf(far_text, sizeof far_text, ", %d", (int)far);
    snprintf(cases, sizeof cases, "L = sum dtable*T, dtable ~ U[-1,1], %s%d random parameter sets x distances 64, 300%s",
             given ? "the given parameters + " : "", c->opt->n_seeds, far_text);
    report_gradient(c, &gr, "table_backward", cases, GRAD_MAX_TABLE_ENTRIES);
    ck_instance_close(&in);
}

void ck_unit_embed_gradient(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    grad_report gr = {.id = "embed-gradient", .adds_id = "embed-backward-adds", .tol = c->opt->tolerance,
                      .backward_name = "embed_backward()"};
    if (ck_open_default(c, "embed-gradient", c->opt->seed, 0, &in))
        return;
    if (in.n_params == 0 || !c->d->embed_backward) {
        ck_item(c, BK_CHECK_SKIP, "embed-gradient", "embed gradient: %s", in.n_params == 0
                ? "no parameters with the default configuration" : "no embed_backward() (see capabilities)");
        ck_instance_close(&in);
        return;
    }
    int32_t L = c->geo.train_length;
    const int given = c->opt->params != NULL;
    for (int s = -given; s < c->opt->n_seeds && !gr.setup_fail[0]; s++) {
        uint64_t seed = s < 0 ? c->opt->seed : bk_derive_seed(c->opt->seed, 300, (uint64_t)s);
        char why[BIASKIT_ERROR_MESSAGE_MAX + 128], params[256];
        if (s < 0) {
            given_params(&in, params, sizeof params);
        } else {
            random_params_label(s, params, sizeof params);
            if (ck_random_params(&in, seed, why, sizeof why)) {
                snprintf(gr.setup_fail, sizeof gr.setup_fail, "%s", why);
                break;
            }
        }
        for (int sequential = 1; sequential >= 0 && !gr.setup_fail[0]; sequential--) {
            int64_t count = sequential ? L : 64;
            int32_t *pos = ck_embed_positions(L, count, sequential, seed);
            model_fn m = {.kind = FN_EMBED, .positions = pos, .count = count};
            if (!pos)
                snprintf(gr.setup_fail, sizeof gr.setup_fail, "out of memory for %lld positions", (long long)count);
            else
                check_gradient_case(&in, &m, seed, params, GRAD_MAX_EMBED_ENTRIES, &gr);
            free(pos);
        }
    }
    char cases[160];
    snprintf(cases, sizeof cases, "L = sum out*R, R ~ U[-1,1], %s%d random parameter sets x positions 0..%d and 64 "
             "random positions (repeats)", given ? "the given parameters + " : "", c->opt->n_seeds, L - 1);
    report_gradient(c, &gr, "embed_backward", cases, GRAD_MAX_EMBED_ENTRIES);
    ck_instance_close(&in);
}

/* ---- CONTENT: the two cases of the gradient checks ---------------------------------------------------- */

#define CONTENT_TOKENS_SHORT 7
#define CONTENT_TOKENS_LONG 33

/* FN_CONTENT cases: 7 tokens with x in [-1, 1] and 33 with x in [-3, 3] (fixed draws), each with a dx buffer
 * for the backward; 1 when out of memory. */
static int content_cases(const checker *c, model_fn cases[2], float *inputs[2], float *dx[2])
{
    const int64_t tokens[2] = {CONTENT_TOKENS_SHORT, CONTENT_TOKENS_LONG};
    const double amplitude[2] = {1.0, 2.0};
    const size_t C = (size_t)(c->geo.d_model > 0 ? c->geo.d_model : 0);
    for (int k = 0; k < 2; k++) {
        const size_t n = (size_t)tokens[k] * C;
        inputs[k] = ck_guarded_alloc(n);
        dx[k] = ck_guarded_alloc(n);
        if (!inputs[k] || !dx[k])
            return 1;
        rng r = ck_rng_for(c->opt->seed, R_START, 100 + (uint64_t)k);
        for (size_t e = 0; e < n; e++)
            inputs[k][e] = (float)(amplitude[k] * ck_rng_sym(&r));
        memset(dx[k], 0, n * sizeof(float));
        cases[k] = (model_fn){.kind = FN_CONTENT, .count = tokens[k], .x = inputs[k], .dx = dx[k],
                              .length = (int32_t)tokens[k], .training = 1};
    }
    return 0;
}

/* L(x) = sum_k w_k content(theta, x)_k in double, with x[e] moved by about `delta` (*moved: the step x[e]
 * took in float); 0 when the plugin refused or gave a non-finite step. */
static int content_loss(const instance *in, const model_fn *m, float *x, size_t e, double delta, const float *w,
                        float *out, double *loss, double *moved)
{
    const float keep = x[e];
    x[e] = (float)((double)keep + delta);
    *moved = (double)x[e] - (double)keep;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    const int bad = ck_forward_finite(in, m, in->theta, out, why, sizeof why);
    x[e] = keep;
    if (bad)
        return 0;
    double sum = 0.0;
    for (size_t k = 0, n = ck_fn_outputs(in, m); k < n; k++)
        sum += (double)w[k] * (double)out[k];
    *loss = sum;
    return 1;
}

/* dL/dx[e] by Ridders' extrapolation of central differences from a first step h (steps h / 1.4^k); *step
 * gets the smallest step the estimate used (its rounding noise is largest). */
static int content_ridders(const instance *in, const model_fn *m, float *x, size_t e, double h, const float *w,
                           float *out, double *value, double *step)
{
    double a[GRAD_STEPS][GRAD_STEPS], best = 0.0, err = INFINITY;
    *step = h;
    for (int k = 0; k < GRAD_STEPS; k++, h /= GRAD_SHRINK) {
        double lp, lm, sp, sm;
        if (!content_loss(in, m, x, e, h, w, out, &lp, &sp) || !content_loss(in, m, x, e, -h, w, out, &lm, &sm) ||
            sp == sm)
            return k > 0 ? (*value = best, 1) : 0;
        a[0][k] = (lp - lm) / (sp - sm);
        *step = sp - sm;
        if (k == 0) {
            best = a[0][0];
            continue;
        }
        double fac = GRAD_SHRINK * GRAD_SHRINK;
        for (int j = 1; j <= k; j++, fac *= GRAD_SHRINK * GRAD_SHRINK) {
            a[j][k] = (a[j - 1][k] * fac - a[j - 1][k - 1]) / (fac - 1.0);
            const double d = fmax(fabs(a[j][k] - a[j - 1][k]), fabs(a[j][k] - a[j - 1][k - 1]));
            if (d <= err)
                err = d, best = a[j][k];
        }
        if (fabs(a[k][k] - a[k - 1][k - 1]) >= 2.0 * err)
            break;
    }
    *value = best;
    return 1;
}

/* What the check of dL/dx found over the cases and parameter sets. */
typedef struct x_report {
    int checked, failed;
    double worst, tol;
    char worst_entry[96], first_fail[600], adds_fail[400], setup_fail[BIASKIT_ERROR_MESSAGE_MAX + 400];
} x_report;

/* content_backward's dL/dx for one case at the instance's parameters: it adds into a non-zero dx, and up
 * to 24 entries (3/4 of them with a non-zero gradient) agree with Ridders' central differences within the
 * tolerance (relative to the larger of the two, at least 1e-3 of the case's largest |dL/dx|) plus the float
 * rounding of the steps x[e] moves: 8 x sum_h |w| ulp(step) of its token over the smallest step used. */
static void check_content_x(const instance *in, model_fn *m, uint64_t seed, const char *params, x_report *xr)
{
    const size_t n_out = ck_fn_outputs(in, m), n_x = (size_t)m->count * (size_t)in->geo.d_model;
    float *w = ck_guarded_alloc(n_out), *out = ck_guarded_alloc(n_out), *dth = ck_guarded_alloc(ck_n_params(in));
    float *start = ck_guarded_alloc(n_x), *twice = ck_guarded_alloc(n_x), *x = (float *)m->x;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    if (!w || !out || !dth || !start || !twice) {
        snprintf(xr->setup_fail, sizeof xr->setup_fail, "out of memory for the gradient through x");
        goto done;
    }
    rng r = ck_rng_for(seed, R_WEIGHTS, 300 + (uint64_t)m->count);
    ck_random_fill(w, n_out, &r);
    ck_random_fill(start, n_x, &r);
    memset(dth, 0, ck_n_params(in) * sizeof *dth);
    memset(m->dx, 0, n_x * sizeof *m->dx);
    if (ck_backward(in, m, in->theta, w, dth, why, sizeof why)) {
        snprintf(xr->setup_fail, sizeof xr->setup_fail, "%.*s (%s)", BIASKIT_ERROR_MESSAGE_MAX, why, params);
        goto done;
    }
    float *analytic = m->dx;
    memcpy(twice, start, n_x * sizeof *twice);
    model_fn again = *m;
    again.dx = twice;
    if (ck_backward(in, &again, in->theta, w, dth, why, sizeof why)) {
        snprintf(xr->setup_fail, sizeof xr->setup_fail, "%.*s (%s)", BIASKIT_ERROR_MESSAGE_MAX, why, params);
        goto done;
    }
    for (size_t e = 0; e < n_x && !xr->adds_fail[0]; e++) {
        const double want = (double)start[e] + (double)analytic[e];
        if (fabs((double)twice[e] - want) > 1e-5 * (fabs(want) + fabs((double)analytic[e])) + 1e-7)
            snprintf(xr->adds_fail, sizeof xr->adds_fail, "content_backward() into dx = %g at token %zu, channel %zu "
                     "gave %g; adding its gradient %g should give %g (dx must be added into, not overwritten; %s)",
                     (double)start[e], e / (size_t)in->geo.d_model, e % (size_t)in->geo.d_model, (double)twice[e],
                     (double)analytic[e], want, params);
    }
    double largest = 0.0;
    for (size_t e = 0; e < n_x; e++)
        largest = fmax(largest, fabs((double)analytic[e]));
    for (int k = 0; k < 24; k++) {
        size_t e = (size_t)(bk_rng_u64(&r) % n_x);
        if (k < 18) /* prefer entries the gradient reaches */
            for (int t = 0; t < 16 && analytic[e] == 0.0f; t++)
                e = (size_t)(bk_rng_u64(&r) % n_x);
        double numeric, step;
        if (!content_ridders(in, m, x, e, GRAD_FIRST_STEP * fmax(fabs((double)x[e]), GRAD_STEP_FLOOR), w, out,
                             &numeric, &step) ||
            ck_forward_finite(in, m, in->theta, out, why, sizeof why))
            continue;
        const size_t H = (size_t)in->geo.n_heads, token = e / (size_t)in->geo.d_model;
        double noise = 0.0;
        for (size_t h = 0; h < H; h++)
            noise += fabs((double)w[token * H + h]) * ulp_of(out[token * H + h]);
        noise = 8.0 * noise / step;
        const double a = analytic[e], denom = fmax(fmax(fabs(a), fabs(numeric)), 1e-3 * largest);
        const double rel = denom > 0.0 ? fmax(0.0, fabs(a - numeric) - noise) / denom : 0.0;
        const double raw = denom > 0.0 ? fabs(a - numeric) / denom : 0.0; /* before the rounding allowance */
        xr->checked++;
        if (raw > xr->worst) {
            xr->worst = raw;
            snprintf(xr->worst_entry, sizeof xr->worst_entry, "token %zu, channel %zu of %lld tokens",
                     e / (size_t)in->geo.d_model, e % (size_t)in->geo.d_model, (long long)m->count);
        }
        if (rel > xr->tol && xr->failed++ == 0)
            snprintf(xr->first_fail, sizeof xr->first_fail, "dL/dx at token %zu, channel %zu of %lld tokens: "
                     "analytic %.9g, numeric %.9g, relative error %.3g > %g (%s)", e / (size_t)in->geo.d_model,
                     e % (size_t)in->geo.d_model, (long long)m->count, a, numeric, rel, xr->tol, params);
    }
done:
    free(w), free(out), free(dth), free(start), free(twice);
}

/* The gradient through the steps into x: the item "content-gradient-x" (and "content-backward-adds-x"),
 * at the initial and n_seeds random parameter sets, both cases of content_cases. */
static void run_content_x(checker *c)
{
    instance in;
    x_report xr = {.tol = c->opt->tolerance};
    if (ck_open_default(c, "content-gradient-x", c->opt->seed, 0, &in))
        return;
    if (!BK_DESCRIPTOR_FN(c->d, content_backward)) {
        ck_item(c, BK_CHECK_SKIP, "content-gradient-x", "no content_backward (see capabilities)");
        ck_instance_close(&in);
        return;
    }
    model_fn cases[2];
    float *inputs[2] = {NULL, NULL}, *dx[2] = {NULL, NULL};
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128], params[64];
    if (content_cases(c, cases, inputs, dx))
        snprintf(xr.setup_fail, sizeof xr.setup_fail, "out of memory for the inputs");
    for (int s = -1; s < c->opt->n_seeds && !xr.setup_fail[0]; s++) {
        const uint64_t seed = s < 0 ? c->opt->seed : bk_derive_seed(c->opt->seed, 260, (uint64_t)s);
        int rc;
        if (s < 0) {
            snprintf(params, sizeof params, "initial parameters");
            rc = in.n_params ? ck_init_params(&in, NULL, seed, why, sizeof why) : 0;
        } else {
            if (!in.n_params)
                break;
            random_params_label(s, params, sizeof params);
            rc = ck_random_params(&in, seed, why, sizeof why);
        }
        if (rc) {
            snprintf(xr.setup_fail, sizeof xr.setup_fail, "%s", why);
            break;
        }
        for (int k = 0; k < 2 && !xr.setup_fail[0]; k++)
            check_content_x(&in, &cases[k], seed, params, &xr);
    }
    if (xr.setup_fail[0])
        ck_item(c, BK_CHECK_FAIL, "content-gradient-x", "%s", xr.setup_fail);
    else if (xr.adds_fail[0])
        ck_item(c, BK_CHECK_FAIL, "content-backward-adds-x", "%s", xr.adds_fail);
    else
        ck_item(c, BK_CHECK_PASS, "content-backward-adds-x", "content_backward adds into a non-zero dx (+=)");
    if (!xr.setup_fail[0] && xr.failed)
        ck_item(c, BK_CHECK_FAIL, "content-gradient-x", "%d of %d entries of dL/dx disagree with central differences; "
                "first: %s", xr.failed, xr.checked, xr.first_fail);
    else if (!xr.setup_fail[0])
        ck_item(c, BK_CHECK_PASS, "content-gradient-x", "dL/dx through the steps vs central differences in float64: "
                "L = sum w*steps, w ~ U[-1,1], %d entries of x (%d and %d tokens, initial%s parameters); worst "
                "relative error %.2g at %s before the steps' rounding is allowed for (tolerance %g after)", xr.checked, CONTENT_TOKENS_SHORT, CONTENT_TOKENS_LONG,
                in.n_params ? " and random" : "", xr.worst, xr.worst_entry[0] ? xr.worst_entry : "-", xr.tol);
    for (int k = 0; k < 2; k++)
        free(inputs[k]), free(dx[k]);
    ck_instance_close(&in);
}

/* ---- ABI 2: the grid's table_backward, coordinate_backward, scale_backward ------------------------ */

typedef struct abi2_gradient {
    const char *id, *adds_id, *what; /* the items and the function's name */
    fn_kind kind;
    int has_backward;
    uint64_t purpose; /* of the random parameter sets */
    const char *loss; /* the L whose derivative is compared, in words */
} abi2_gradient;

/* The initial parameters (a kink of max(i, L) sits there when L is an integer: see KINK_OFFSET) and
 * n_seeds random sets; the grid (FN_GRID), or lengths train_length and 4 x train_length in training
 * (FN_COORD: distances = rows = length, as the engine calls it; FN_SCALE: rows = length). */
static void run_abi2_gradient(checker *c, const abi2_gradient *g)
{
    instance in;
    grad_report gr = {.id = g->id, .adds_id = g->adds_id, .tol = c->opt->tolerance, .backward_name = g->what};
    if (ck_open_default(c, g->id, c->opt->seed, 0, &in))
        return;
    if (in.n_params == 0 || !g->has_backward) {
        ck_item(c, BK_CHECK_SKIP, g->id, "%s gradient: %s", g->what,
                in.n_params == 0 ? "no parameters with the default configuration"
                                 : "no backward function (see capabilities)");
        ck_instance_close(&in);
        return;
    }
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128], params[256];
    const int32_t L = c->geo.train_length;
    model_fn cases[2];
    int n_cases = 0;
    strbuf shapes = {0};
    float *inputs[2] = {NULL, NULL}, *dx[2] = {NULL, NULL};
    if (g->kind == FN_CONTENT) {
        if (content_cases(c, cases, inputs, dx)) {
            ck_item(c, BK_CHECK_FAIL, g->id, "%s gradient: out of memory for the inputs", g->what);
            ck_instance_close(&in);
            return;
        }
        n_cases = 2;
        ck_sb_printf(&shapes, "%lld and %lld tokens (x in [-1, 1] and [-2, 2])", (long long)cases[0].count,
                     (long long)cases[1].count);
    } else if (g->kind == FN_GRID || g->kind == FN_COUNT) {
        int32_t P = 0;
        biaskit_count layout;
        if (g->kind == FN_GRID ? ck_grid_points(&in, &P, why, sizeof why)
                               : ck_count_layout(&in, &layout, why, sizeof why)) {
            ck_item(c, BK_CHECK_FAIL, g->id, "%s gradient: %s", g->what, why);
            ck_instance_close(&in);
            return;
        }
        P = g->kind == FN_GRID ? P : layout.points;
        cases[n_cases++] = (model_fn){.kind = g->kind, .distances = P, .length = L, .training = 1};
        ck_sb_printf(&shapes, g->kind == FN_GRID ? "the grid of %d points" : "%d position vectors", P);
    } else {
        for (int k = 0; k < 2; k++) {
            int32_t n = k ? (L <= INT32_MAX / 4 ? 4 * L : L) : L;
            if (k && n == L)
                break;
            cases[n_cases++] = (model_fn){.kind = g->kind, .distances = g->kind == FN_COORD ? n : 0, .rows = n,
                                          .length = n, .training = 1};
            ck_sb_printf(&shapes, "%s%d", k ? ", " : "lengths ", n);
        }
        ck_sb_printf(&shapes, " (training)");
    }
    for (int s = -1; s < c->opt->n_seeds && !gr.setup_fail[0]; s++) {
        uint64_t seed = s < 0 ? c->opt->seed : bk_derive_seed(c->opt->seed, g->purpose, (uint64_t)s);
        int rc = 0;
        if (s < 0 && c->opt->params) { /* the given parameters, in place of the initial ones */
            given_params(&in, params, sizeof params);
        } else if (s < 0) {
            snprintf(params, sizeof params, "initial parameters");
            rc = ck_init_params(&in, NULL, seed, why, sizeof why);
        } else {
            random_params_label(s, params, sizeof params);
            rc = ck_random_params(&in, seed, why, sizeof why);
        }
        if (rc) {
            snprintf(gr.setup_fail, sizeof gr.setup_fail, "%s", why);
            break;
        }
        for (int k = 0; k < n_cases && !gr.setup_fail[0]; k++)
            check_gradient_case(&in, &cases[k], seed, params, GRAD_MAX_TABLE_ENTRIES, &gr);
    }
    strbuf text = {0};
    ck_sb_printf(&text, "%s, w ~ U[-1,1], %s + %d random parameter sets x %s", g->loss,
                 c->opt->params ? "the given parameters" : "initial", c->opt->n_seeds, ck_sb_text(&shapes));
    report_gradient(c, &gr, g->what, ck_sb_text(&text), GRAD_MAX_TABLE_ENTRIES);
    free(text.s);
    free(shapes.s);
    for (int k = 0; k < 2; k++)
        free(inputs[k]), free(dx[k]);
    ck_instance_close(&in);
}

void ck_unit_grid_gradient(checker *c, const void *arg)
{
    (void)arg;
    abi2_gradient g = {"grid-gradient", "grid-backward-adds", "table_backward (grid)", FN_GRID,
                       c->d->table_backward != NULL, 210, "L = sum dtable*F over the grid"};
    run_abi2_gradient(c, &g);
}

void ck_unit_coordinate_gradient(checker *c, const void *arg)
{
    (void)arg;
    abi2_gradient g = {"coordinate-gradient", "coordinate-backward-adds", "coordinate_backward", FN_COORD,
                       BK_DESCRIPTOR_FN(c->d, coordinate_backward) != NULL, 220, "L = sum w_phi*phi + w_r*rscale"};
    run_abi2_gradient(c, &g);
}

void ck_unit_content_gradient(checker *c, const void *arg)
{
    (void)arg;
    abi2_gradient g = {"content-gradient", "content-backward-adds", "content_backward (theta)", FN_CONTENT,
                       BK_DESCRIPTOR_FN(c->d, content_backward) != NULL, 250, "L = sum w*steps"};
    run_abi2_gradient(c, &g);
    run_content_x(c);
}

void ck_unit_count_gradient(checker *c, const void *arg)
{
    (void)arg;
    abi2_gradient g = {"count-gradient", "count-backward-adds", "count_vectors_backward", FN_COUNT,
                       BK_DESCRIPTOR_FN(c->d, count_vectors_backward) != NULL, 240, "L = sum dE*E"};
    run_abi2_gradient(c, &g);
}

void ck_unit_scale_gradient(checker *c, const void *arg)
{
    (void)arg;
    abi2_gradient g = {"scale-gradient", "scale-backward-adds", "scale_backward", FN_SCALE,
                       BK_DESCRIPTOR_FN(c->d, scale_backward) != NULL, 230, "L = sum dscale*s"};
    run_abi2_gradient(c, &g);
}
