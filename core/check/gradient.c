/* biaskit check: table_backward() and embed_backward() against finite differences of the plugin's
 * own forward function, and that they add (+=) into dtheta. */
#include "check/internal.h"

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

/* (L(theta_i + h) - L(theta_i - h)) / 2h for L = sum_k w_k out_k, in float64 over the float outputs
 * (with the steps as stored in float). *scale gets sum_k |w_k d out_k / dtheta_i|, the size of the
 * terms the gradient sums. 1 when both outputs are finite. */
static int central_difference(const instance *in, const model_fn *m, const float *w, float *theta, int64_t i,
                              double h, fd_work *wk, double *value, double *scale)
{
    double mp, mm;
    if (!moved_output(in, m, theta, i, h, wk->a, &mp) || !moved_output(in, m, theta, i, -h, wk->b, &mm))
        return 0;
    double sum = 0.0, abs_sum = 0.0;
    for (size_t k = 0, n = ck_fn_outputs(in, m); k < n; k++) {
        double term = (double)w[k] * ((double)wk->a[k] - (double)wk->b[k]);
        sum += term;
        abs_sum += fabs(term);
    }
    *value = sum / (mp - mm);
    *scale = abs_sum / (mp - mm);
    return 1;
}

/* d(sum w * out)/dtheta_i by Ridders' extrapolation of central differences (Numerical Recipes'
 * dfridr) from first step h: steps h, h/1.4, h/1.4^2, ...; a first step whose outputs are not finite
 * is quartered (a parameter near the edge of its domain). *error gets the method's error estimate.
 * 0 when no step gives finite outputs. */
static int ridders(const instance *in, const model_fn *m, const float *w, float *theta, int64_t i, double h,
                   fd_work *wk, double *value, double *scale, double *error)
{
    double a[GRAD_STEPS][GRAD_STEPS], ignored;
    int tries = 0;
    while (!central_difference(in, m, w, theta, i, h, wk, &a[0][0], scale))
        if (++tries > 8)
            return 0;
        else
            h /= 4.0;
    double best = a[0][0], err = INFINITY;
    const double shrink2 = GRAD_SHRINK * GRAD_SHRINK;
    for (int k = 1; k < GRAD_STEPS; k++) {
        h /= GRAD_SHRINK;
        if (!central_difference(in, m, w, theta, i, h, wk, &a[0][k], &ignored))
            break;
        double fac = shrink2;
        for (int j = 1; j <= k; j++, fac *= shrink2) {
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
        if (ridders(in, m, w, theta, i, starts[k], wk, &v, &s, &e) && (!found || e < best_e)) {
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
    char first_fail[600];
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

static void record_entry(const instance *in, const model_fn *m, int64_t i, double a, double num, double err,
                         int seed_index, grad_report *gr)
{
    char entry[64];
    ck_entry_name(in, i, entry, sizeof entry);
    if (err > gr->worst) {
        gr->worst = err;
        snprintf(gr->worst_entry, sizeof gr->worst_entry, "%s", entry);
    }
    gr->checked++;
    if (err > GRAD_TOLERANCE && !gr->failed++) {
        char label[96];
        ck_fn_label(m, label, sizeof label);
        snprintf(gr->first_fail, sizeof gr->first_fail,
                 "%s: analytic %.6g vs central difference %.6g (rel. error %.1e > %g; parameter set %d, %s)", entry, a,
                 num, err, GRAD_TOLERANCE, seed_index + 1, label);
    }
}

/* One parameter set and one output shape: backward vs numeric derivative for the chosen entries. */
static void check_gradient_case(const instance *in, const model_fn *m, uint64_t seed, int seed_index, size_t cap,
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
    rng r = ck_rng_for(seed, R_WEIGHTS, (uint64_t)m->distances);
    ck_random_fill(w, n_out, &r);
    memset(g0, 0, n * sizeof *g0);
    if (ck_backward(in, m, in->theta, w, g0, why, sizeof why) || ck_forward_finite(in, m, in->theta, wk.base, why, sizeof why)) {
        snprintf(gr->setup_fail, sizeof gr->setup_fail, "%s", why);
        goto done;
    }
    check_adds(in, m, w, g0, gr, seed);
    if (gr->setup_fail[0])
        goto done;
    rng re = ck_rng_for(seed, R_ENTRIES, (uint64_t)m->distances);
    size_t k = choose_entries(g0, n, cap, &re, entries);
    double max_scale = 0.0;
    for (size_t e = 0; e < k; e++) {
        ok[e] = numeric_derivative(in, m, w, in->theta, entries[e], &wk, &num[e], &scale[e]);
        if (ok[e])
            max_scale = fmax(max_scale, scale[e]);
        else
            gr->unchecked++;
    }
    for (size_t e = 0; e < k; e++)
        if (ok[e])
            record_entry(in, m, entries[e], g0[entries[e]], num[e],
                         relative_error(g0[entries[e]], num[e], scale[e], max_scale), seed_index, gr);
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
    char unchecked[96] = "";
    if (gr->unchecked)
        snprintf(unchecked, sizeof unchecked, "; %d entries not checkable (outputs not finite at theta +- any step)",
                 gr->unchecked);
    if (gr->failed)
        ck_item(c, BK_CHECK_FAIL, gr->id, "%s gradient %s; %d of %d checks fail, worst rel. error %.1e at %s%s", what,
                gr->first_fail, gr->failed, gr->checked, gr->worst, gr->worst_entry, unchecked);
    else if (gr->checked == 0)
        ck_item(c, BK_CHECK_FAIL, gr->id, "%s gradient: no entry could be checked%s", what, unchecked);
    else
        ck_item(c, BK_CHECK_PASS, gr->id,
                "%s gradient vs central differences in float64: %s, up to %zu entries each, %d checks; worst rel. error "
                "%.1e at %s (tolerance %g; steps %g x max(|theta|, %g or %g) / %g^k, Ridders-extrapolated)%s",
                what, cases, cap, gr->checked, gr->worst, gr->worst_entry[0] ? gr->worst_entry : "-", GRAD_TOLERANCE,
                GRAD_FIRST_STEP, GRAD_STEP_FLOOR, GRAD_STEP_FLOOR_SMALL, GRAD_SHRINK, unchecked);
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
        char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
        if (ck_random_params(&in, seed, why, sizeof why)) {
            snprintf(gr.setup_fail, sizeof gr.setup_fail, "%s", why);
            break;
        }
        for (size_t k = 0; k < 2 && !gr.setup_fail[0]; k++) {
            model_fn m = {FN_TABLE, sizes[k], NULL, 0};
            check_gradient_case(&in, &m, seed, s, GRAD_MAX_TABLE_ENTRIES, &gr);
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
        char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
        if (ck_random_params(&in, seed, why, sizeof why)) {
            snprintf(gr.setup_fail, sizeof gr.setup_fail, "%s", why);
            break;
        }
        for (int sequential = 1; sequential >= 0 && !gr.setup_fail[0]; sequential--) {
            int64_t count = sequential ? L : 64;
            int32_t *pos = ck_embed_positions(L, count, sequential, seed);
            model_fn m = {FN_EMBED, 0, pos, count};
            if (!pos)
                snprintf(gr.setup_fail, sizeof gr.setup_fail, "out of memory for %lld positions", (long long)count);
            else
                check_gradient_case(&in, &m, seed, s, GRAD_MAX_EMBED_ENTRIES, &gr);
            free(pos);
        }
    }
    char cases[160];
    snprintf(cases, sizeof cases, "L = sum out*R, R ~ U[-1,1], %d random parameter sets x positions 0..%d and 64 random "
             "positions (repeats)", c->opt->n_seeds, L - 1);
    report_gradient(c, &gr, "embed_backward", cases, GRAD_MAX_EMBED_ENTRIES);
    ck_instance_close(&in);
}
