/* biaskit check: the contracts of the ABI 2 capabilities (plugin.h, "Beyond distance tables"), each unit
 * in its own child process (check/harness.c):
 *   COORDINATE  coordinate_points() in 2 .. 2^20; table() finite over that grid (it is over u, not over
 *               distances: no prefix check); coordinate() at the training length and far beyond it:
 *               phi finite, >= 0, non-decreasing, rscale finite, >= 0, u(i, i) = phi[i] rscale[i] <= 1
 *   SCALE       scale() finite at the same lengths (any sign: SSMax's s ln(i + 1) is 0 at i = 0)
 *   MASK        mask() window >= 1, sinks >= 0, distance_cap >= 0 at every length, said in words
 *   ROTARY      rotary_ctx(): finite frequencies, a finite amplitude > 0, and no scaling below the
 *               training length when the answer there is the unscaled one
 * Every call gets a biaskit_context built as the engine builds it (ck_context). The gradients of the
 * backward functions are in check/gradient.c; the same contracts at --max-distance (2^20) and at the
 * corners of the parameter region, and the length-independence of a mask, in check/longrange.c. */
#include "check/internal.h"

#include "plugin/contract.h"
#include "plugin/descriptor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LENGTH_CASES 24
#define ROTARY_SAME_TOLERANCE 1e-6 /* "the same frequencies": relative, per pair */

/* ---- shared helpers (internal.h) ---------------------------------------------------------------- */

int ck_grid_points(const instance *in, int32_t *points, char *why, size_t size)
{
    ck_stage(in->c, "coordinate_points()");
    int32_t a = in->c->d->coordinate_points(in->inst), b = in->c->d->coordinate_points(in->inst);
    if (a != b) {
        snprintf(why, size, "coordinate_points() returned %d, then %d (the grid must not change)", a, b);
        return 1;
    }
    if (bk_contract_points(a, why, size))
        return 1;
    *points = a;
    return 0;
}

int ck_count_layout(const instance *in, biaskit_count *out, char *why, size_t size)
{
    biaskit_count c[2];
    biaskit_context ctx = ck_context(in, in->geo.train_length, 1);
    for (int k = 0; k < 2; k++) {
        c[k] = (biaskit_count){.struct_size = sizeof c[k], .points = 0,
                               .pos_scale = 1.0f / sqrtf((float)(in->geo.d_head > 0 ? in->geo.d_head : 1))};
        biaskit_error pe = {0};
        ck_stage(in->c, "count()");
        int rc = in->c->d->count(in->inst, &ctx, &c[k], &pe);
        if (rc != BIASKIT_OK)
            return ck_refusal("count()", rc, &pe, why, size) != 0;
    }
    if (c[0].points != c[1].points || memcmp(&c[0].pos_scale, &c[1].pos_scale, sizeof(float))) {
        snprintf(why, size, "count() said %d vectors and pos_scale %g, then %d and %g (the layout must not change)",
                 (int)c[0].points, (double)c[0].pos_scale, (int)c[1].points, (double)c[1].pos_scale);
        return 1;
    }
    char what[256];
    if (bk_contract_count(&c[0], what, sizeof what)) {
        snprintf(why, size, "count() said %s", what);
        return 1;
    }
    *out = c[0];
    return 0;
}

int ck_coordinate_contract(const model_fn *m, const float *out, double *max_u, int32_t *max_at, char *why,
                           size_t size)
{
    return bk_contract_coordinate(out, m->distances, out + m->distances, m->rows, max_u, max_at, why, size) != 0;
}

int ck_mask(const instance *in, int32_t length, int training, int values, biaskit_mask *out, char *why, size_t size)
{
    /* a guard after the struct: a plugin that writes past biaskit_mask (built against another
     * header) is caught */
    struct {
        biaskit_mask m;
        int32_t guard[8];
    } box;
    memset(&box, 0, sizeof box);
    box.m.struct_size = sizeof box.m;
    for (int k = 0; k < 8; k++)
        box.guard[k] = 0x5a5a5a5a;
    biaskit_context ctx = ck_context(in, length, training);
    biaskit_error pe = {0};
    char label[96];
    snprintf(label, sizeof label, "mask() at length %d%s", length, training ? " (training)" : "");
    ck_stage(in->c, "%s", label);
    int rc = in->c->d->mask(in->inst, &ctx, &box.m, &pe);
    if (rc != BIASKIT_OK)
        return ck_refusal(label, rc, &pe, why, size);
    for (int k = 0; k < 8; k++)
        if (box.guard[k] != 0x5a5a5a5a) {
            snprintf(why, size, "%s wrote past the end of biaskit_mask (%zu bytes)", label, sizeof box.m);
            return CALL_BROKEN;
        }
    if (box.m.struct_size != sizeof box.m) {
        snprintf(why, size, "%s changed struct_size to %u (the engine sets it: %zu)", label,
                 (unsigned)box.m.struct_size, sizeof box.m);
        return CALL_BROKEN;
    }
    char what[320];
    if (values && bk_contract_mask(&box.m, what, sizeof what)) {
        snprintf(why, size, "%s gives %s", label, what);
        return CALL_BROKEN;
    }
    *out = box.m;
    return CALL_OK;
}

int ck_has_rotary_ctx(const checker *c)
{
    return BK_DESCRIPTOR_FN(c->d, rotary_ctx) != NULL;
}

int ck_rotary_ctx(const instance *in, int32_t length, int training, int values, float *inv_freq, float *amplitude,
                  char *why, size_t size)
{
    const int32_t half = in->geo.d_head > 0 ? in->geo.d_head / 2 : 0;
    float amp;
    ck_fill_sentinel(inv_freq, (size_t)half + GUARD_FLOATS);
    ck_fill_sentinel(&amp, 1);
    biaskit_context ctx = ck_context(in, length, training);
    biaskit_error pe = {0};
    char label[96];
    snprintf(label, sizeof label, "rotary_ctx() at length %d%s", length, training ? " (training)" : "");
    ck_stage(in->c, "%s", label);
    int rc = in->c->d->rotary_ctx(in->inst, &ctx, inv_freq, &amp, &pe);
    if (rc != BIASKIT_OK)
        return ck_refusal(label, rc, &pe, why, size);
    if (!ck_guard_intact(inv_freq, (size_t)half)) {
        snprintf(why, size, "%s wrote more than d_head/2 = %d inverse frequencies", label, half);
        return CALL_BROKEN;
    }
    for (int32_t k = 0; k < half; k++) {
        if (ck_is_sentinel(inv_freq[k])) {
            snprintf(why, size, "%s left inverse frequency %d unwritten", label, k);
            return CALL_BROKEN;
        }
    }
    if (ck_is_sentinel(amp)) {
        snprintf(why, size, "%s left the amplitude unwritten", label);
        return CALL_BROKEN;
    }
    char what[320];
    if (values && bk_contract_rotary(inv_freq, half, amp, what, sizeof what)) {
        snprintf(why, size, "%s gives %s", label, what);
        return CALL_BROKEN;
    }
    *amplitude = amp;
    return CALL_OK;
}

/* ---- lengths ------------------------------------------------------------------------------------- */

typedef struct length_case {
    int32_t length;
    int training;
} length_case;

/* The lengths the contracts are checked at: the training length in a training call and in evaluation,
 * then 4, 16, 64, ... times it below --distances, and --distances itself: bugs of long contexts show
 * only there. Returns the count; *text lists them. */
static int contract_lengths(const checker *c, length_case *out, strbuf *text)
{
    const int64_t L = c->geo.train_length > 0 ? c->geo.train_length : 1, top = c->opt->max_distances;
    int n = 0;
    out[n++] = (length_case){(int32_t)L, 1};
    out[n++] = (length_case){(int32_t)L, 0};
    int64_t last = L;
    for (int64_t x = 4 * L; x < top && n < MAX_LENGTH_CASES - 1; x *= 4)
        out[n++] = (length_case){(int32_t)(last = x), 0};
    if (top > last)
        out[n++] = (length_case){(int32_t)top, 0};
    for (int k = 0; k < n; k++)
        ck_sb_printf(text, "%s%d%s", k ? ", " : "", out[k].length, out[k].training ? " (training)" : "");
    return n;
}

/* Parameter set s: -1 the initial parameters, else random set s (purpose `purpose`); its name in *label. */
static int parameter_set(const instance *in, int s, uint64_t purpose, char *label, size_t label_size, char *why,
                         size_t size)
{
    const checker *c = in->c;
    if (s < 0) {
        snprintf(label, label_size, "initial parameters");
        return ck_init_params(in, NULL, c->opt->seed, why, size);
    }
    snprintf(label, label_size, "random parameter set %d", s + 1);
    return ck_random_params(in, bk_derive_seed(c->opt->seed, purpose, (uint64_t)s), why, size);
}

/* ---- COORDINATE ---------------------------------------------------------------------------------- */

static void check_grid(checker *c, instance *in, int32_t P)
{
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300], label[48];
    model_fn m = {.kind = FN_GRID, .distances = P};
    size_t n = ck_fn_outputs(in, &m);
    float *t = ck_guarded_alloc(n);
    if (!t) {
        ck_item(c, BK_CHECK_FAIL, "grid-finite", "out of memory for a %zu-value grid table", n);
        return;
    }
    if (ck_init_params(in, NULL, c->opt->seed, why, sizeof why) || ck_forward_finite(in, &m, in->theta, t, why, sizeof why)) {
        ck_item(c, BK_CHECK_FAIL, "grid-finite", "initial parameters: %s", why);
    } else {
        double lo = INFINITY, hi = -INFINITY;
        for (size_t k = 0; k < n; k++)
            lo = fmin(lo, t[k]), hi = fmax(hi, t[k]);
        ck_item(c, BK_CHECK_PASS, "grid-finite", "table() over the grid of %d points (u = g / %d) finite with the "
                "initial parameters (%.4g .. %.4g); a grid, not distances: no prefix check", P, P - 1,
                n ? lo : 0.0, n ? hi : 0.0);
    }
    if (in->n_params == 0) {
        ck_item(c, BK_CHECK_SKIP, "grid-random", "grid table with random parameters: no parameters");
    } else {
        int bad = 0;
        for (int s = 0; s < c->opt->n_seeds && !bad; s++)
            if ((bad = parameter_set(in, s, 620, label, sizeof label, why, sizeof why) ||
                       ck_forward_finite(in, &m, in->theta, t, why, sizeof why)))
                ck_item(c, BK_CHECK_FAIL, "grid-random", "%s: %s", label, why);
        if (!bad)
            ck_item(c, BK_CHECK_PASS, "grid-random", "grid table finite with %d random projected parameter sets "
                    "(param_init, + N(0, (%g|theta| + %g)^2), param_project)", c->opt->n_seeds, PERTURB_REL,
                    PERTURB_ABS);
    }
    free(t);
}

static void check_coordinates(checker *c, instance *in)
{
    length_case lengths[MAX_LENGTH_CASES];
    strbuf text = {0};
    int n_lengths = contract_lengths(c, lengths, &text);
    int32_t longest = 0;
    for (int k = 0; k < n_lengths; k++)
        longest = lengths[k].length > longest ? lengths[k].length : longest;
    float *out = ck_guarded_alloc(2 * (size_t)longest);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300], label[48], fn[128], top_where[200] = "";
    double top = -1.0;
    int bad = !out;
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "coordinate", "out of memory for coordinates at length %d", longest);
    int sets = in->n_params ? c->opt->n_seeds : 0;
    for (int s = -1; s < sets && !bad; s++) {
        if ((bad = parameter_set(in, s, 600, label, sizeof label, why, sizeof why))) {
            ck_item(c, BK_CHECK_FAIL, "coordinate", "%s: %s", label, why);
            break;
        }
        for (int k = 0; k < n_lengths && !bad; k++) {
            int32_t n = lengths[k].length;
            model_fn m = {.kind = FN_COORD, .distances = n, .rows = n, .length = n, .training = lengths[k].training};
            double u = 0.0;
            int32_t at = 0;
            ck_fn_label(&m, fn, sizeof fn);
            if ((bad = ck_forward(in, &m, in->theta, NULL, out, why, sizeof why) != CALL_OK))
                ck_item(c, BK_CHECK_FAIL, "coordinate", "%s: %s", label, why);
            else if ((bad = ck_coordinate_contract(&m, out, &u, &at, why, sizeof why)))
                ck_item(c, BK_CHECK_FAIL, "coordinate", "%s, %s: %s", fn, label, why);
            else if (u > top) {
                top = u;
                snprintf(top_where, sizeof top_where, "row %d, %s, %s", at, fn, label);
            }
        }
    }
    if (!bad)
        ck_item(c, BK_CHECK_PASS, "coordinate",
                "coordinate(): phi finite, >= 0, non-decreasing; rscale finite, >= 0; u(i, i) = phi[i] rscale[i] <= 1 "
                "+ %g, at lengths %s (distances = rows = length), initial%s parameters; largest u(i, i) %.7g (%s)",
                (double)CK_COORD_SLACK, ck_sb_text(&text), sets ? " and random" : "", top, top_where);
    free(out);
    free(text.s);
}

void ck_unit_coordinate(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (ck_open_default(c, "coordinate-points", c->opt->seed, 0, &in))
        return;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    int32_t P = 0;
    if (ck_grid_points(&in, &P, why, sizeof why)) {
        ck_item(c, BK_CHECK_FAIL, "coordinate-points", "%s; the grid table is not checked", why);
    } else {
        ck_item(c, BK_CHECK_PASS, "coordinate-points", "coordinate_points() = %d, in 2 .. %d and the same on every "
                "call: the table is F_h(u) at u = g / %d", P, BK_CONTRACT_POINTS_MAX, P - 1);
        check_grid(c, &in, P);
    }
    check_coordinates(c, &in);
    ck_instance_close(&in);
}

/* ---- SCALE --------------------------------------------------------------------------------------- */

void ck_unit_scale(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (ck_open_default(c, "scale", c->opt->seed, 0, &in))
        return;
    length_case lengths[MAX_LENGTH_CASES];
    strbuf text = {0};
    int n_lengths = contract_lengths(c, lengths, &text);
    int32_t longest = 0;
    for (int k = 0; k < n_lengths; k++)
        longest = lengths[k].length > longest ? lengths[k].length : longest;
    model_fn widest = {.kind = FN_SCALE, .rows = longest};
    float *out = ck_guarded_alloc(ck_fn_outputs(&in, &widest));
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300], label[48];
    double lo = INFINITY, hi = -INFINITY;
    int bad = !out;
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "scale", "out of memory for scales at length %d", longest);
    int sets = in.n_params ? c->opt->n_seeds : 0;
    for (int s = -1; s < sets && !bad; s++) {
        if ((bad = parameter_set(&in, s, 610, label, sizeof label, why, sizeof why))) {
            ck_item(c, BK_CHECK_FAIL, "scale", "%s: %s", label, why);
            break;
        }
        for (int k = 0; k < n_lengths && !bad; k++) {
            int32_t n = lengths[k].length;
            model_fn m = {.kind = FN_SCALE, .rows = n, .length = n, .training = lengths[k].training};
            if ((bad = ck_forward_finite(&in, &m, in.theta, out, why, sizeof why)))
                ck_item(c, BK_CHECK_FAIL, "scale", "%s (%s)", why, label);
            for (size_t j = 0, nv = ck_fn_outputs(&in, &m); !bad && j < nv; j++)
                lo = fmin(lo, out[j]), hi = fmax(hi, out[j]);
        }
    }
    if (!bad)
        ck_item(c, BK_CHECK_PASS, "scale", "scale(): finite at lengths %s (n_heads x length values), initial%s "
                "parameters; s from %.4g to %.4g (no sign required)", ck_sb_text(&text), sets ? " and random" : "",
                lo <= hi ? lo : 0.0, lo <= hi ? hi : 0.0);
    free(out);
    free(text.s);
    ck_instance_close(&in);
}

/* ---- COUNT --------------------------------------------------------------------------------------- */

/* count()'s layout, then count_vectors() finite for the initial and n_seeds random parameter sets, and the
 * same bits on a second call. */
void ck_unit_count(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (ck_open_default(c, "count", c->opt->seed, 0, &in))
        return;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300], label[48];
    biaskit_count layout;
    if (ck_count_layout(&in, &layout, why, sizeof why)) {
        ck_item(c, BK_CHECK_FAIL, "count", "%s; the position vectors are not checked", why);
        ck_instance_close(&in);
        return;
    }
    model_fn m = {.kind = FN_COUNT, .distances = layout.points, .length = c->geo.train_length, .training = 1};
    const size_t n = ck_fn_outputs(&in, &m);
    float *E = ck_guarded_alloc(n), *again = ck_guarded_alloc(n);
    int bad = !E || !again;
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "count", "out of memory for %d position vectors", (int)layout.points);
    double lo = INFINITY, hi = -INFINITY;
    int sets = in.n_params ? c->opt->n_seeds : 0;
    for (int s = -1; s < sets && !bad; s++) {
        if ((bad = parameter_set(&in, s, 640, label, sizeof label, why, sizeof why)) ||
            (bad = ck_forward_finite(&in, &m, in.theta, E, why, sizeof why)) ||
            (bad = ck_forward_finite(&in, &m, in.theta, again, why, sizeof why))) {
            ck_item(c, BK_CHECK_FAIL, "count", "%s: %s", label, why);
            break;
        }
        if ((bad = memcmp(E, again, n * sizeof *E) != 0)) {
            size_t k = 0;
            while (k < n && !memcmp(&E[k], &again[k], sizeof *E))
                k++;
            char place[96];
            ck_output_place(&in, &m, k, place, sizeof place);
            ck_item(c, BK_CHECK_FAIL, "count", "%s: count_vectors() gave %.9g, then %.9g at %s (the same "
                    "parameters must give the same bits)", label, (double)E[k], (double)again[k], place);
            break;
        }
        for (size_t k = 0; k < n; k++)
            lo = fmin(lo, E[k]), hi = fmax(hi, E[k]);
    }
    if (!bad)
        ck_item(c, BK_CHECK_PASS, "count", "count() = %d position vectors of %d values, pos_scale %g, the same on "
                "every call; count_vectors() finite and the same bits twice for the initial%s parameters (%g .. %g)",
                (int)layout.points, (int)c->geo.d_head, (double)layout.pos_scale, sets ? " and random" : "", lo, hi);
    free(E);
    free(again);
    ck_instance_close(&in);
}

/* ---- CONTENT -------------------------------------------------------------------------------------- */

/* content() on random inputs x of 1, 7 and 4 L tokens (L the training length), x in [-1, 1] and in [-10, 10],
 * for the initial and random parameter sets: every step written, nothing past the end, finite, >= 0 (the
 * position may not go back), and the same bits on a second call. */
void ck_unit_content(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (ck_open_default(c, "content", c->opt->seed, 0, &in))
        return;
    const int32_t L = c->geo.train_length > 0 ? c->geo.train_length : 1;
    const int64_t tokens[3] = {1, 7, 4 * (int64_t)L};
    const double amplitude[2] = {1.0, 10.0};
    const size_t C = (size_t)c->geo.d_model, most = (size_t)tokens[2] * C;
    model_fn widest = {.kind = FN_CONTENT, .count = tokens[2]};
    const size_t n_out = ck_fn_outputs(&in, &widest);
    float *x = malloc((most ? most : 1) * sizeof *x), *out = ck_guarded_alloc(n_out), *again = ck_guarded_alloc(n_out);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300], label[48];
    int bad = !x || !out || !again;
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "content", "out of memory for the inputs of %lld tokens", (long long)tokens[2]);
    double lo = INFINITY, hi = -INFINITY;
    const int sets = in.n_params ? c->opt->n_seeds : 0;
    for (int s = -1; s < sets && !bad; s++) {
        if ((bad = parameter_set(&in, s, 650, label, sizeof label, why, sizeof why))) {
            ck_item(c, BK_CHECK_FAIL, "content", "%s: %s", label, why);
            break;
        }
        for (int k = 0; k < 3 && !bad; k++)
            for (int a = 0; a < 2 && !bad; a++) {
                rng r = ck_rng_for(c->opt->seed, R_START, 200 + (uint64_t)(3 * a + k));
                for (size_t e = 0; e < (size_t)tokens[k] * C; e++)
                    x[e] = (float)(amplitude[a] * ck_rng_sym(&r));
                model_fn m = {.kind = FN_CONTENT, .count = tokens[k], .x = x, .length = (int32_t)tokens[k], .training = 1};
                const size_t n = ck_fn_outputs(&in, &m);
                size_t at = 0;
                if ((bad = ck_forward_finite(&in, &m, in.theta, out, why, sizeof why)))
                    ck_item(c, BK_CHECK_FAIL, "content", "%s (%s, x in [-%g, %g])", why, label, amplitude[a], amplitude[a]);
                while (!bad && at < n && bk_contract_step_ok(out[at]))
                    lo = fmin(lo, out[at]), hi = fmax(hi, out[at]), at++;
                char place[96];
                if (!bad && at < n) {
                    ck_output_place(&in, &m, at, place, sizeof place);
                    ck_item(c, BK_CHECK_FAIL, "content", "content() of %lld tokens gives the step %g at %s (%s, x in "
                            "[-%g, %g]): a step must be >= 0, the position may not go back", (long long)tokens[k],
                            (double)out[at], place, label, amplitude[a], amplitude[a]);
                    bad = 1;
                }
                if (!bad && (bad = ck_forward_finite(&in, &m, in.theta, again, why, sizeof why)))
                    ck_item(c, BK_CHECK_FAIL, "content", "%s (%s, second call)", why, label);
                if (!bad && (bad = memcmp(out, again, n * sizeof *out) != 0)) {
                    size_t d = 0;
                    while (!memcmp(&out[d], &again[d], sizeof *out))
                        d++;
                    ck_output_place(&in, &m, d, place, sizeof place);
                    ck_item(c, BK_CHECK_FAIL, "content", "content() of %lld tokens gave %.9g, then %.9g at %s (%s): "
                            "the same inputs must give the same bits", (long long)tokens[k], (double)out[d],
                            (double)again[d], place, label);
                }
            }
    }
    if (!bad)
        ck_item(c, BK_CHECK_PASS, "content", "content() of 1, 7 and %lld tokens, x in [-1, 1] and [-10, 10], the "
                "initial%s parameters: every step written, finite, >= 0 and the same bits twice; steps from %.4g to "
                "%.4g", (long long)tokens[2], sets ? " and random" : "", lo <= hi ? lo : 0.0, lo <= hi ? hi : 0.0);
    free(x);
    free(out);
    free(again);
    ck_instance_close(&in);
}

/* ---- MASK ---------------------------------------------------------------------------------------- */

static int32_t mask_field(const biaskit_mask *m, int f)
{
    return f == 0 ? m->window : f == 1 ? m->sinks : m->distance_cap;
}

static int same_mask(const biaskit_mask *a, const biaskit_mask *b)
{
    return a->window == b->window && a->sinks == b->sinks && a->distance_cap == b->distance_cap;
}

/* What a mask keeps, in words. */
static void describe_mask(const biaskit_mask *m, strbuf *b)
{
    if (m->window == 1)
        ck_sb_printf(b, "query i sees key j when j = i (itself only)");
    else
        ck_sb_printf(b, "query i sees key j when i - j < %d (itself and the %d keys before it)", m->window,
                     m->window - 1);
    if (m->sinks > 0)
        ck_sb_printf(b, " or j < %d (%d sink%s)", m->sinks, m->sinks, m->sinks == 1 ? "" : "s");
    if (m->distance_cap > 0)
        ck_sb_printf(b, "; distance tables read at min(d, %d)", m->distance_cap);
    else
        ck_sb_printf(b, "; distances not capped");
}

void ck_unit_mask(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (ck_open_default(c, "mask", c->opt->seed, 0, &in))
        return;
    length_case lengths[MAX_LENGTH_CASES];
    biaskit_mask masks[MAX_LENGTH_CASES] = {{0}};
    strbuf text = {0}, words = {0};
    int n_lengths = contract_lengths(c, lengths, &text);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    int bad = 0, varies = 0;
    for (int k = 0; k < n_lengths && !bad; k++) {
        if ((bad = ck_mask(&in, lengths[k].length, lengths[k].training, 1, &masks[k], why, sizeof why) != CALL_OK))
            ck_item(c, BK_CHECK_FAIL, "mask", "%s", why);
        else
            varies |= !same_mask(&masks[k], &masks[0]);
    }
    if (!bad) {
        if (!varies) {
            describe_mask(&masks[0], &words);
            int32_t first_masked = 0;
            for (int k = 0; k < n_lengths && !first_masked; k++)
                if (lengths[k].length > masks[0].window)
                    first_masked = lengths[k].length;
            if (!first_masked)
                ck_sb_printf(&words, "; the window covers every length checked: nothing is masked there");
            ck_item(c, BK_CHECK_PASS, "mask", "mask(): the same at every length (%s): %s", ck_sb_text(&text),
                    ck_sb_text(&words));
        } else {
            /* what changes, length by length; then what it keeps at the training length */
            static const char *const names[3] = {"window", "sinks", "distance_cap"};
            for (int f = 0; f < 3; f++) {
                int changes = 0;
                for (int k = 1; k < n_lengths; k++)
                    changes |= mask_field(&masks[k], f) != mask_field(&masks[0], f);
                if (!changes)
                    continue;
                ck_sb_printf(&words, "%s%s", words.len ? "; " : "", names[f]);
                for (int k = 0; k < n_lengths; k++)
                    ck_sb_printf(&words, "%s %d at %d%s", k ? "," : "", mask_field(&masks[k], f), lengths[k].length,
                                 lengths[k].training ? " (training)" : "");
            }
            ck_sb_printf(&words, "; at the training length ");
            describe_mask(&masks[0], &words);
            ck_item(c, BK_CHECK_PASS, "mask", "mask(): window >= 1, sinks >= 0, distance_cap >= 0 at every length "
                    "(%s), and it depends on the length: %s", ck_sb_text(&text), ck_sb_text(&words));
        }
    }
    free(text.s);
    free(words.s);
    ck_instance_close(&in);
}

/* ---- ROTARY, length-aware ------------------------------------------------------------------------- */

static int same_frequencies(const float *a, const float *b, int32_t half, int32_t *at)
{
    for (int32_t k = 0; k < half; k++)
        if (fabs((double)a[k] - (double)b[k]) > ROTARY_SAME_TOLERANCE * fmax(fabs((double)a[k]), fabs((double)b[k]))) {
            *at = k;
            return 0;
        }
    return 1;
}

enum { ROT_CASES = 7 };

/* The lengths of the rotary-ctx item: below the training length (L/4, L/2), at it (training and not),
 * then 2, 8 and 64 times it. */
static void rotary_ctx_lengths(const checker *c, int64_t want[ROT_CASES], int training[ROT_CASES])
{
    const int64_t L = c->geo.train_length > 0 ? c->geo.train_length : 1;
    const int64_t w[ROT_CASES] = {L / 4, L / 2, L, L, 2 * L, 8 * L, 64 * L};
    for (int k = 0; k < ROT_CASES; k++)
        want[k] = w[k], training[k] = k == 2;
}

int ck_rotary_ctx_fails_near(const checker *c, const instance *in)
{
    int64_t want[ROT_CASES];
    int training[ROT_CASES], bad = 0;
    rotary_ctx_lengths(c, want, training);
    float *f = ck_guarded_alloc((size_t)(in->geo.d_head / 2)), amp;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    for (int k = 0; k < ROT_CASES && f && !bad; k++)
        if (want[k] >= 1 && want[k] <= INT32_MAX)
            bad = ck_rotary_ctx(in, (int32_t)want[k], training[k], 1, f, &amp, why, sizeof why) != CALL_OK;
    free(f);
    return bad;
}

void ck_check_rotary_ctx(checker *c, const instance *in)
{
    const int32_t L = c->geo.train_length > 0 ? c->geo.train_length : 1, half = in->geo.d_head / 2;
    int64_t want[ROT_CASES];
    int training[ROT_CASES];
    rotary_ctx_lengths(c, want, training);
    enum { AT_L = 3 };
    float *f[ROT_CASES] = {0}, amp[ROT_CASES] = {0}, *plain = ck_guarded_alloc((size_t)half);
    int used[ROT_CASES] = {0};
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    strbuf text = {0}, note = {0};
    int bad = !plain;
    if (bad)
        snprintf(why, sizeof why, "out of memory");
    for (int k = 0; k < ROT_CASES && !bad; k++) {
        if (want[k] < 1 || want[k] > INT32_MAX || (k == 0 && want[0] == want[1]))
            continue;
        if (!(f[k] = ck_guarded_alloc((size_t)half))) {
            bad = 1;
            snprintf(why, sizeof why, "out of memory");
            break;
        }
        used[k] = 1;
        bad = ck_rotary_ctx(in, (int32_t)want[k], training[k], 1, f[k], &amp[k], why, sizeof why) != CALL_OK;
        ck_sb_printf(&text, "%s%lld%s", text.len ? ", " : "", (long long)want[k], training[k] ? " (training)" : "");
    }
    double lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < ROT_CASES && !bad; k++)
        if (used[k])
            lo = fmin(lo, amp[k]), hi = fmax(hi, amp[k]);
    /* Does the answer change with the length beyond L (a dynamic scaling)? */
    int32_t at = 0;
    int dynamic = 0;
    for (int k = AT_L + 1; k < ROT_CASES && !bad; k++)
        if (used[k] && (!same_frequencies(f[k], f[AT_L], half, &at) || amp[k] != amp[AT_L])) {
            if (!dynamic)
                ck_sb_printf(&note, "; the answer changes with the length (dynamic): at %lld, pair %d turns at "
                             "%.6g per position (%.6g at %d), amplitude %.6g (%.6g)", (long long)want[k], at,
                             (double)f[k][at], (double)f[AT_L][at], L, (double)amp[k], (double)amp[AT_L]);
            dynamic = 1;
        }
    if (!bad && !dynamic)
        ck_sb_printf(&note, "; the same answer at every length (static)");
    /* At lengths up to L, a length-aware scaling leaves RoPE unscaled (s = max(1, length / L) = 1). The
     * check can tell only when the plugin also has rotary_frequencies(), the unscaled values, and its
     * answer at L equals them: then every shorter length must give the same answer (a static scaling
     * or an original length below L gives scaled values at L: not compared). */
    if (!bad && c->d->rotary_frequencies) {
        biaskit_error pe = {0};
        ck_stage(c, "rotary_frequencies()");
        int rc = c->d->rotary_frequencies(in->inst, plain, &pe);
        if (rc != BIASKIT_OK) {
            ck_refusal("rotary_frequencies()", rc, &pe, why, sizeof why);
            bad = 1;
        } else if (same_frequencies(f[AT_L], plain, half, &at)) {
            for (int k = 0; k < AT_L && !bad; k++)
                if (used[k] && (!same_frequencies(f[k], f[AT_L], half, &at) || amp[k] != amp[AT_L])) {
                    bad = 1;
                    snprintf(why, sizeof why,
                             "rotary_ctx() at length %lld%s gives pair %d = %.9g and amplitude %.9g, but at the "
                             "training length %d it gives %.9g and %.9g, the unscaled values of "
                             "rotary_frequencies(): below the length the model trained at, a length-aware scaling "
                             "must leave RoPE unscaled (s = max(1, length / L) = 1)",
                             (long long)want[k], training[k] ? " (training)" : "", at, (double)f[k][at],
                             (double)amp[k], L, (double)f[AT_L][at], (double)amp[AT_L]);
                }
            if (!bad)
                ck_sb_printf(&note, "; at lengths <= %d the unscaled values of rotary_frequencies()", L);
        } else {
            ck_sb_printf(&note, "; at length %d it differs from rotary_frequencies() (pair %d: %.6g vs %.6g): scaled "
                         "there, so lengths below are not compared with the unscaled values", L, at,
                         (double)f[AT_L][at], (double)plain[at]);
        }
    }
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "rotary-ctx", "%s", why);
    else
        ck_item(c, BK_CHECK_PASS, "rotary-ctx", "rotary_ctx(): d_head/2 = %d finite inverse frequencies and a finite "
                "amplitude > 0 at lengths %s; amplitude %.6g .. %.6g%s", half, ck_sb_text(&text), lo, hi,
                ck_sb_text(&note));
    for (int k = 0; k < ROT_CASES; k++)
        free(f[k]);
    free(plain);
    free(text.s);
    free(note.s);
}
