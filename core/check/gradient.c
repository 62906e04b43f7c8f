/* biaskit check: the backward functions (table_backward, embed_backward, and of ABI 2 the grid's
 * table_backward, coordinate_backward, scale_backward) against finite differences of the plugin's own
 * forward function, and that they add (+=) into dtheta. */
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
#define GRAD_TOLERANCE 1e-3      /* relative error, see relative_error() */
#define GRAD_SCALE_SHARE 5e-2    /* a denominator is at least 5% of sum_k |w_k dOut_k/dtheta_i| */
#define GRAD_MAX_TABLE_ENTRIES 256
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
typedef enum { LOOK_SMALL_STEPS = 1, LOOK_KINK, LOOK_DENSE } look_kind;

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
        int kink = relative_error(cl->right, cl->left, sc, max_scale) > GRAD_TOLERANCE &&
                   fabs(cl->right - cl->left) > 2.0 * (re + le);
        if (!kink) {
            cl->err = relative_error(analytic, 0.5 * (cl->right + cl->left), sc, max_scale);
            if (cl->err <= GRAD_TOLERANCE) {
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
                    ok = at_offset(in, m, w, i, cl->offset, h, wk, g, max_scale, &a, &num, &e) && e <= GRAD_TOLERANCE;
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
        if (k % 2 && first_err > KINK_MORE_SAMPLES_BELOW * GRAD_TOLERANCE)
            continue;
        cl->span = spans[k / 2];
        cl->samples = samples[k % 2];
        cl->err = cl->raw = 0.0;
        sides_ok = 1;
        for (int side = 1; side >= -1 && sides_ok; side -= 2) {
            double mean = 0.0, quotient = 0.0, e = INFINITY, raw = INFINITY;
            sides_ok = interval_mean(in, m, w, i, side, cl->span, cl->samples, wk, g, max_scale, &mean, &quotient, &e,
                                     &raw) &&
                       e <= GRAD_TOLERANCE;
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
                 GRAD_TOLERANCE, params, label, cl->fail);
    if (!passed)
        return;
    if (cl->how == LOOK_SMALL_STEPS)
        gr->closer++;
    if (cl->how == LOOK_KINK && !gr->kinks++)
        snprintf(gr->first_kink, sizeof gr->first_kink,
                 "%s (%s, %s): one-sided differences %.6g and %.6g, matched at theta +- %.2g (rel. error %.1e)", entry,
                 params, label, cl->right, cl->left, fabs(cl->offset), cl->err);
    if (cl->how == LOOK_DENSE && !gr->dense++)
        snprintf(gr->first_dense, sizeof gr->first_dense,
                 "%s (%s, %s): over [theta - %.2g, theta] and [theta, theta + %.2g], %d points (rel. error %.1e%s)",
                 entry, params, label, cl->span, cl->span, cl->samples, cl->raw,
                 cl->raw > GRAD_TOLERANCE ? ", within the float rounding of the outputs" : "");
}

/* One parameter set (named `params`) and one output shape: backward vs numeric derivative for the
 * chosen entries. */
static void check_gradient_case(const instance *in, const model_fn *m, uint64_t seed, const char *params, size_t cap,
                                grad_report *gr)
{
    size_t n = ck_n_params(in), n_out = ck_fn_outputs(in, m);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    float *w = malloc((n_out ? n_out : 1) * sizeof *w), *g0 = ck_guarded_alloc(n);
    fd_work wk = {ck_guarded_alloc(n_out), ck_guarded_alloc(n_out), ck_guarded_alloc(n_out)};
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
        int passed = err <= GRAD_TOLERANCE;
        if (!passed && gr->failed < KINK_MAX_FAILURES)
            passed = closer_look(in, m, w, entries[e], a, &wk, max_scale, &cl);
        else if (!passed)
            gr->unlooked++;
        record_entry(in, m, entries[e], a, num[e], err, passed, &cl, params, gr);
    }
done:
    free(w), free(g0), free(wk.a), free(wk.b), free(wk.base), free(entries), free(num), free(scale), free(ok);
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
                what, cases, cap, gr->checked, gr->worst, gr->worst_entry[0] ? gr->worst_entry : "-", GRAD_TOLERANCE,
                GRAD_FIRST_STEP, GRAD_STEP_FLOOR, GRAD_STEP_FLOOR_SMALL, GRAD_SHRINK, unchecked, closer,
                ck_sb_text(&kinks));
    free(kinks.s);
}

static void random_params_label(int s, char *buf, size_t size)
{
    snprintf(buf, size, "random parameter set %d", s + 1);
}

void ck_unit_table_gradient(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    grad_report gr = {.id = "table-gradient", .adds_id = "table-backward-adds"};
    if (ck_open_default(c, "table-gradient", c->opt->seed, 0, &in))
        return;
    if (in.n_params == 0 || !c->d->table_backward) {
        ck_item(c, BK_CHECK_SKIP, "table-gradient", "table gradient: %s", in.n_params == 0
                ? "no parameters with the default configuration" : "no table_backward() (see capabilities)");
        ck_instance_close(&in);
        return;
    }
    static const int32_t sizes[] = {64, 300};
    for (int s = 0; s < c->opt->n_seeds && !gr.setup_fail[0]; s++) {
        uint64_t seed = bk_derive_seed(c->opt->seed, 200, (uint64_t)s);
        char why[BIASKIT_ERROR_MESSAGE_MAX + 128], params[48];
        random_params_label(s, params, sizeof params);
        if (ck_random_params(&in, seed, why, sizeof why)) {
            snprintf(gr.setup_fail, sizeof gr.setup_fail, "%s", why);
            break;
        }
        for (size_t k = 0; k < 2 && !gr.setup_fail[0]; k++) {
            model_fn m = {.kind = FN_TABLE, .distances = sizes[k]};
            check_gradient_case(&in, &m, seed, params, GRAD_MAX_TABLE_ENTRIES, &gr);
        }
    }
    char cases[128];
    snprintf(cases, sizeof cases, "L = sum dtable*T, dtable ~ U[-1,1], %d random parameter sets x distances 64, 300",
             c->opt->n_seeds);
    report_gradient(c, &gr, "table_backward", cases, GRAD_MAX_TABLE_ENTRIES);
    ck_instance_close(&in);
}

void ck_unit_embed_gradient(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    grad_report gr = {.id = "embed-gradient", .adds_id = "embed-backward-adds"};
    if (ck_open_default(c, "embed-gradient", c->opt->seed, 0, &in))
        return;
    if (in.n_params == 0 || !c->d->embed_backward) {
        ck_item(c, BK_CHECK_SKIP, "embed-gradient", "embed gradient: %s", in.n_params == 0
                ? "no parameters with the default configuration" : "no embed_backward() (see capabilities)");
        ck_instance_close(&in);
        return;
    }
    int32_t L = c->geo.train_length;
    for (int s = 0; s < c->opt->n_seeds && !gr.setup_fail[0]; s++) {
        uint64_t seed = bk_derive_seed(c->opt->seed, 300, (uint64_t)s);
        char why[BIASKIT_ERROR_MESSAGE_MAX + 128], params[48];
        random_params_label(s, params, sizeof params);
        if (ck_random_params(&in, seed, why, sizeof why)) {
            snprintf(gr.setup_fail, sizeof gr.setup_fail, "%s", why);
            break;
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
    snprintf(cases, sizeof cases, "L = sum out*R, R ~ U[-1,1], %d random parameter sets x positions 0..%d and 64 random "
             "positions (repeats)", c->opt->n_seeds, L - 1);
    report_gradient(c, &gr, "embed_backward", cases, GRAD_MAX_EMBED_ENTRIES);
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
    grad_report gr = {.id = g->id, .adds_id = g->adds_id};
    if (ck_open_default(c, g->id, c->opt->seed, 0, &in))
        return;
    if (in.n_params == 0 || !g->has_backward) {
        ck_item(c, BK_CHECK_SKIP, g->id, "%s gradient: %s", g->what,
                in.n_params == 0 ? "no parameters with the default configuration"
                                 : "no backward function (see capabilities)");
        ck_instance_close(&in);
        return;
    }
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128], params[48];
    const int32_t L = c->geo.train_length;
    model_fn cases[2];
    int n_cases = 0;
    strbuf shapes = {0};
    if (g->kind == FN_GRID) {
        int32_t P = 0;
        if (ck_grid_points(&in, &P, why, sizeof why)) {
            ck_item(c, BK_CHECK_FAIL, g->id, "%s gradient: %s", g->what, why);
            ck_instance_close(&in);
            return;
        }
        cases[n_cases++] = (model_fn){.kind = FN_GRID, .distances = P};
        ck_sb_printf(&shapes, "the grid of %d points", P);
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
        if (s < 0)
            snprintf(params, sizeof params, "initial parameters");
        else
            random_params_label(s, params, sizeof params);
        if (s < 0 ? ck_init_params(&in, NULL, seed, why, sizeof why) : ck_random_params(&in, seed, why, sizeof why)) {
            snprintf(gr.setup_fail, sizeof gr.setup_fail, "%s", why);
            break;
        }
        for (int k = 0; k < n_cases && !gr.setup_fail[0]; k++)
            check_gradient_case(&in, &cases[k], seed, params, GRAD_MAX_TABLE_ENTRIES, &gr);
    }
    strbuf text = {0};
    ck_sb_printf(&text, "%s, w ~ U[-1,1], initial + %d random parameter sets x %s", g->loss, c->opt->n_seeds,
                 ck_sb_text(&shapes));
    report_gradient(c, &gr, g->what, ck_sb_text(&text), GRAD_MAX_TABLE_ENTRIES);
    free(text.s);
    free(shapes.s);
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

void ck_unit_scale_gradient(checker *c, const void *arg)
{
    (void)arg;
    abi2_gradient g = {"scale-gradient", "scale-backward-adds", "scale_backward", FN_SCALE,
                       BK_DESCRIPTOR_FN(c->d, scale_backward) != NULL, 230, "L = sum dscale*s"};
    run_abi2_gradient(c, &g);
}
