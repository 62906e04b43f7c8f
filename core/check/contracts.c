/* biaskit check: the contracts of the plugin's functions, each unit in its own child process
 * (check/harness.c): create() with the default configuration and its parameters, finite tables that
 * do not depend on how many distances were asked for, project(), determinism, and the segment,
 * embed and rotary contracts. The gradients are in check/gradient.c, CUDA in check/cuda.c. */
#include "check/internal.h"

#include "plugin/contract.h"

#include "model/positions.h"
#include "plugin/descriptor.h"
#include "plugin/param_info.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX_TOLERANCE 1e-6    /* the table at D distances vs the first D of the longest table */
#define EMBED_ADD_TOLERANCE 1e-6 /* embed into a non-zero start: start + embedding, relative */
#define WILD_MIN_EXP (-3)        /* wild parameters for project(): random sign, 10^U(-3, 6) */
#define WILD_MAX_EXP 6

static int32_t table_heads(const checker *c)
{
    return c->geo.n_heads;
}

/* ---- create() with the default configuration ---------------------------------------------------- */

static void check_tensors(checker *c, const instance *in)
{
    const biaskit_plugin *d = c->d;
    if (in->n_params == 0) {
        ck_item(c, BK_CHECK_PASS, "parameters", "no learnable parameters with the default configuration");
        return;
    }
    char why[BIASKIT_ERROR_MESSAGE_MAX + 64];
    if (ck_init_params(in, NULL, c->opt->seed, why, sizeof why)) {
        ck_item(c, BK_CHECK_FAIL, "parameters", "%lld parameters: %s", (long long)in->n_params, why);
        return;
    }
    if (!d->param_tensors) {
        ck_item(c, BK_CHECK_PASS, "parameters", "%lld learnable parameters, param_init works (no param_tensors: entries "
                "are called theta[i])", (long long)in->n_params);
        return;
    }
    biaskit_tensor_info probe = {"(untouched)", -7, -7, -7};
    ck_stage(c, "param_tensors()");
    int32_t n = d->param_tensors(in->inst, &probe, 0);
    strbuf bad = {0}, list = {0};
    if (probe.offset != -7)
        ck_sb_printf(&bad, "; param_tensors(capacity 0) wrote an entry");
    biaskit_tensor_info *t = n > 0 ? calloc((size_t)n, sizeof *t) : NULL;
    if (n < 0 || (n > 0 && !t))
        ck_sb_printf(&bad, "; param_tensors() returned %d", n);
    int32_t again = t ? d->param_tensors(in->inst, t, n) : 0;
    if (t && again != n)
        ck_sb_printf(&bad, "; param_tensors() returned %d, then %d", n, again);
    int64_t covered = 0;
    for (int32_t k = 0; t && k < n; k++) {
        int64_t len = (int64_t)t[k].rows * t[k].cols;
        if (!t[k].name || !*t[k].name || t[k].rows < 1 || t[k].cols < 1 || t[k].offset < 0 ||
            t[k].offset + len > in->n_params)
            ck_sb_printf(&bad, "; tensor #%d (%s) offset %lld, %dx%d is not inside theta (%lld values)", k,
                         t[k].name ? t[k].name : "no name", (long long)t[k].offset, t[k].rows, t[k].cols,
                         (long long)in->n_params);
        for (int32_t j = 0; j < k; j++) {
            if (t[j].name && t[k].name && strcmp(t[j].name, t[k].name) == 0)
                ck_sb_printf(&bad, "; tensor name '%s' is used twice", t[k].name);
            int64_t jl = (int64_t)t[j].rows * t[j].cols;
            if (t[k].offset < t[j].offset + jl && t[j].offset < t[k].offset + len)
                ck_sb_printf(&bad, "; tensors '%s' and '%s' overlap", t[j].name ? t[j].name : "?",
                             t[k].name ? t[k].name : "?");
        }
        covered += len;
        ck_sb_printf(&list, "%s%s[%dx%d]", k ? ", " : "", t[k].name ? t[k].name : "?", t[k].rows, t[k].cols);
    }
    if (t && !bad.len && covered != in->n_params)
        ck_sb_printf(&bad, "; the tensors cover %lld of the %lld parameters", (long long)covered, (long long)in->n_params);
    if (bad.len)
        ck_item(c, BK_CHECK_FAIL, "parameters", "%lld parameters: %s", (long long)in->n_params, bad.s + 2);
    else
        ck_item(c, BK_CHECK_PASS, "parameters", "%lld learnable parameters (%s), param_init works",
                (long long)in->n_params, ck_sb_text(&list));
    free(t);
    free(bad.s);
    free(list.s);
}

void ck_unit_create(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    const biaskit_geometry *g = &c->geo;
    char config[160];
    snprintf(config, sizeof config, "%d layers, %d heads, d_model %d, d_head %d, vocab %d, train_length %d%s",
             g->n_layers, g->n_heads, g->d_model, g->d_head, g->vocab_size, g->train_length,
             c->opt->n_sets ? ", with --set options" : "");
    if (ck_instance_create(c, &c->view, g, &in, why, sizeof why)) {
        ck_item(c, BK_CHECK_FAIL, "create", "create() with the default configuration (%s): %s", config, why);
        return;
    }
    ck_item(c, BK_CHECK_PASS, "create", "create() with the default configuration (%s)", config);
    check_tensors(c, &in);
    ck_instance_close(&in);
}

/* ---- tables ------------------------------------------------------------------------------------- */

static void check_table_prefixes(checker *c, const instance *in, const float *longest, int32_t longest_d)
{
    int32_t L = c->geo.train_length;
    int32_t lengths[] = {1, 2, 7, L, L + 1, 1000};
    int32_t H = table_heads(c);
    strbuf done = {0};
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    float *t = ck_guarded_alloc((size_t)H * (size_t)(L + 1 > 1000 ? L + 1 : 1000));
    for (size_t k = 0; t && k < sizeof lengths / sizeof lengths[0]; k++) {
        int32_t D = lengths[k];
        if (D > longest_d || (k > 0 && D == lengths[k - 1]))
            continue;
        model_fn m = {.kind = FN_TABLE, .distances = D};
        if (ck_forward_finite(in, &m, in->theta, t, why, sizeof why)) {
            ck_item(c, BK_CHECK_FAIL, "table-prefix", "table with %d distances: %s", D, why);
            free(t), free(done.s);
            return;
        }
        for (int32_t h = 0; h < H; h++)
            for (int32_t d = 0; d < D; d++) {
                double a = t[(size_t)h * (size_t)D + (size_t)d], b = longest[(size_t)h * (size_t)longest_d + (size_t)d];
                if (fabs(a - b) > PREFIX_TOLERANCE * fmax(fabs(a), fabs(b))) {
                    ck_item(c, BK_CHECK_FAIL, "table-prefix",
                            "T[h][d] depends on the number of distances asked for: head %d, distance %d is %.9g with %d "
                            "distances and %.9g with %d (T must be a function of theta only; tolerance %g relative)",
                            h, d, a, D, b, longest_d, PREFIX_TOLERANCE);
                    free(t), free(done.s);
                    return;
                }
            }
        ck_sb_printf(&done, "%s%d", done.len ? ", " : "", D);
    }
    if (!t)
        ck_item(c, BK_CHECK_FAIL, "table-prefix", "out of memory for the table comparison");
    else
        ck_item(c, BK_CHECK_PASS, "table-prefix",
                "tables with %s distances equal the first entries of the %d-distance table (within %g relative)",
                ck_sb_text(&done), longest_d, PREFIX_TOLERANCE);
    free(t);
    free(done.s);
}

static void check_random_tables(checker *c, instance *in, float *t, int32_t D)
{
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    if (in->n_params == 0) {
        ck_item(c, BK_CHECK_SKIP, "table-random", "table with random parameters: no parameters");
        return;
    }
    for (int s = 0; s < c->opt->n_seeds; s++) {
        model_fn m = {.kind = FN_TABLE, .distances = D};
        if (ck_random_params(in, bk_derive_seed(c->opt->seed, 100, (uint64_t)s), why, sizeof why) ||
            ck_forward_finite(in, &m, in->theta, t, why, sizeof why)) {
            ck_item(c, BK_CHECK_FAIL, "table-random", "random projected parameters (set %d): %s", s + 1, why);
            return;
        }
    }
    ck_item(c, BK_CHECK_PASS, "table-random",
            "table finite up to %d distances with %d random projected parameter sets (param_init, + N(0, (%g|theta| + "
            "%g)^2), param_project)", D, c->opt->n_seeds, PERTURB_REL, PERTURB_ABS);
}

void ck_unit_tables(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (ck_open_default(c, "table-finite", c->opt->seed, 0, &in))
        return;
    int32_t D = c->opt->max_distances, H = table_heads(c);
    float *t = ck_guarded_alloc((size_t)H * (size_t)D);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    model_fn m = {.kind = FN_TABLE, .distances = D};
    int rc = t ? ck_forward(&in, &m, in.theta, NULL, t, why, sizeof why) : CALL_BROKEN;
    long long k = rc == CALL_OK ? ck_first_non_finite(t, (size_t)H * (size_t)D) : -1;
    if (!t)
        ck_item(c, BK_CHECK_FAIL, "table-finite", "out of memory for a %d x %d table", H, D);
    else if (rc != CALL_OK)
        ck_item(c, BK_CHECK_FAIL, "table-finite", "table up to %d distances (default parameters): %s", D, why);
    else if (k >= 0)
        ck_item(c, BK_CHECK_FAIL, "table-finite", "table up to %d distances (default parameters) is %g at head %lld, "
                "distance %lld", D, (double)t[k], k / D, k % D);
    else
        ck_item(c, BK_CHECK_PASS, "table-finite", "table finite up to %d distances (default parameters)", D);
    if (rc == CALL_OK) /* the comparisons read only the first 1000 distances of the long table */
        check_table_prefixes(c, &in, t, D);
    if (t)
        check_random_tables(c, &in, t, D);
    free(t);
    ck_instance_close(&in);
}

/* ---- project() ---------------------------------------------------------------------------------- */

/* Wild parameters: random sign and magnitude 10^U(-3, 6), some exact zeros. */
static void wild_params(float *theta, size_t n, uint64_t seed)
{
    rng r = ck_rng_for(seed, R_WILD, 0);
    for (size_t i = 0; i < n; i++) {
        double mag = pow(10.0, WILD_MIN_EXP + (WILD_MAX_EXP - WILD_MIN_EXP) * bk_rng_uniform(&r));
        double u = bk_rng_uniform(&r);
        theta[i] = u < 0.1 ? 0.0f : (float)(u < 0.55 ? -mag : mag);
    }
    if (n > 0)
        theta[0] = (float)-pow(10.0, WILD_MAX_EXP);
    if (n > 1)
        theta[1] = (float)pow(10.0, WILD_MAX_EXP);
}

/* project(x) twice vs once, bitwise; 0 or 1 with why. */
static int check_idempotent(const instance *in, float *x, float *y, const char *what, char *why, size_t size)
{
    size_t n = ck_n_params(in);
    ck_project(in, x);
    memcpy(y, x, n * sizeof *y);
    ck_project(in, y);
    size_t at;
    if (ck_bits_equal(x, y, n, &at))
        return 0;
    char entry[64];
    ck_entry_name(in, (int64_t)at, entry, sizeof entry);
    snprintf(why, size, "not idempotent on %s: %s is %.9g after one projection and %.9g after two", what, entry,
             (double)x[at], (double)y[at]);
    return 1;
}

/* After projecting wild values: every parameter finite, and the outputs finite. */
static int check_in_range(const instance *in, const float *x, char *why, size_t size)
{
    long long k = ck_first_non_finite(x, ck_n_params(in));
    if (k >= 0) {
        char entry[64];
        ck_entry_name(in, k, entry, sizeof entry);
        snprintf(why, size, "leaves %s = %g after projecting wild values", entry, (double)x[k]);
        return 1;
    }
    const checker *c = in->c;
    uint32_t caps = c->d->capabilities;
    int32_t L = c->geo.train_length, P = 0;
    int32_t *pos = (caps & BIASKIT_CAP_EMBED) ? ck_embed_positions(L, L, 1, 0) : NULL;
    char inner[BIASKIT_ERROR_MESSAGE_MAX + 128];
    if ((caps & BIASKIT_CAP_COORDINATE) && ck_grid_points(in, &P, inner, sizeof inner))
        P = 0; /* the "coordinate-points" item reports it */
    model_fn fns[5];
    int n = 0;
    if (caps & BIASKIT_CAP_TABLE)
        fns[n++] = (model_fn){.kind = FN_TABLE, .distances = c->opt->max_distances};
    if ((caps & BIASKIT_CAP_EMBED) && pos)
        fns[n++] = (model_fn){.kind = FN_EMBED, .positions = pos, .count = L};
    if (P)
        fns[n++] = (model_fn){.kind = FN_GRID, .distances = P};
    if (caps & BIASKIT_CAP_COORDINATE)
        fns[n++] = (model_fn){.kind = FN_COORD, .distances = L, .rows = L, .length = L, .training = 1};
    if (caps & BIASKIT_CAP_SCALE)
        fns[n++] = (model_fn){.kind = FN_SCALE, .rows = L, .length = L, .training = 1};
    int bad = (caps & BIASKIT_CAP_EMBED) && !pos;
    if (bad)
        snprintf(why, size, "out of memory");
    for (int k = 0; k < n && !bad; k++) {
        float *out = ck_guarded_alloc(ck_fn_outputs(in, &fns[k]));
        bad = !out || ck_forward_finite(in, &fns[k], x, out, inner, sizeof inner);
        if (bad)
            snprintf(why, size, "after projecting wild values: %s", out ? inner : "out of memory");
        free(out);
    }
    free(pos);
    return bad;
}

void ck_unit_project(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (ck_open_default(c, "project", c->opt->seed, 0, &in))
        return;
    if (in.n_params == 0 || !c->d->param_project) {
        ck_item(c, BK_CHECK_SKIP, "project", "project(): %s",
                in.n_params == 0 ? "no parameters" : "no param_project (unconstrained parameters)");
        ck_instance_close(&in);
        return;
    }
    size_t n = ck_n_params(&in);
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    int bad = !x || !y;
    if (bad)
        snprintf(why, sizeof why, "out of memory for %zu parameters", n);
    for (int s = 0; !bad && s < c->opt->n_seeds; s++) {
        uint64_t seed = bk_derive_seed(c->opt->seed, 400, (uint64_t)s);
        bad = ck_init_params(&in, x, seed, why, sizeof why) || check_idempotent(&in, x, y, "initial parameters", why, sizeof why);
        if (!bad && !(bad = ck_random_params(&in, seed, why, sizeof why))) {
            memcpy(x, in.theta, n * sizeof *x);
            bad = check_idempotent(&in, x, y, "random parameters", why, sizeof why);
        }
        if (!bad) {
            wild_params(x, n, seed);
            bad = check_idempotent(&in, x, y, "wild parameters", why, sizeof why) || check_in_range(&in, x, why, sizeof why);
        }
    }
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "project", "project(): %s", why);
    else
        ck_item(c, BK_CHECK_PASS, "project",
                "project() idempotent (bitwise) on initial, random and wild parameters (random sign, 10^U(%d,%d)); wild "
                "values end finite with finite %s (%d sets)", WILD_MIN_EXP, WILD_MAX_EXP,
                c->d->capabilities & BIASKIT_CAP_TABLE ? "tables" : "outputs", c->opt->n_seeds);
    free(x);
    free(y);
    ck_instance_close(&in);
}

/* ---- param_info(): the declared bounds and initialisation ---------------------------------------- */

#define PARAM_INFO_GUARD 64 /* bytes after the struct the plugin may not write */

/* A side without a bound is -inf (lower) or +inf (upper); any other bound is finite, and lower <= upper. */
static int bounds_sound(const biaskit_param_info *p)
{
    return !isnan(p->lower) && !isnan(p->upper) && p->lower != INFINITY && p->upper != -INFINITY &&
           p->lower <= p->upper;
}

/* The first element of tensor `t` of theta outside the declared [lower, upper] (compared in float, as
 * param_project() stores a clamped value; a NaN is outside), or -1. */
static int64_t first_outside(const float *theta, const biaskit_tensor_info *t, const biaskit_param_info *p)
{
    const float lo = (float)p->lower, hi = (float)p->upper;
    const int64_t len = (int64_t)t->rows * t->cols;
    for (int64_t i = 0; i < len; i++) {
        float v = theta[t->offset + i];
        if (isnan(v) || v < lo || v > hi)
            return i;
    }
    return -1;
}

/* Every tensor of `theta` inside its sound declared bounds; 0, or 1 with why (naming `what`). */
static int check_inside(const instance *in, const float *theta, const biaskit_tensor_info *t,
                        const biaskit_param_info *info, const int *sound, int32_t n, const char *what, strbuf *bad)
{
    for (int32_t k = 0; k < n; k++) {
        int64_t i = sound[k] ? first_outside(theta, &t[k], &info[k]) : -1;
        if (i < 0)
            continue;
        char entry[96], bounds[64];
        ck_entry_name(in, t[k].offset + i, entry, sizeof entry);
        bk_param_info_bounds(&info[k], bounds, sizeof bounds);
        ck_sb_printf(bad, "; %s = %.9g with %s, outside the declared %s of '%s' (param_project() must keep every "
                     "element inside its declared bounds)", entry, (double)theta[t[k].offset + i], what, bounds,
                     t[k].name);
        return 1;
    }
    return 0;
}

/* param_info() (plugin.h) for every tensor of the default instance: sound bounds (lower -inf or finite,
 * upper +inf or finite, lower <= upper), an init text with its NUL, nothing written past the struct,
 * no error; then the parameters after param_init and param_project (initial; random, as
 * ck_random_params; wild, projected) inside the declared bounds. The initial values are compared after
 * the projection, as the engine initialises: an init rule may draw past a bound that the projection
 * clamps (KERPLE's U(0, 2) and its r > 0). */
void ck_unit_param_info(checker *c, const void *arg)
{
    (void)arg;
    if (!BK_DESCRIPTOR_FN(c->d, param_info)) {
        ck_item(c, BK_CHECK_SKIP, "param-info", "param_info(): not declared (`biaskit plugins` shows the bounds and "
                "the initialisation as \"not declared\")");
        return;
    }
    instance in;
    if (ck_open_default(c, "param-info", c->opt->seed, 0, &in))
        return;
    biaskit_tensor_info probe;
    ck_stage(c, "param_tensors()");
    int32_t n = in.n_params > 0 && c->d->param_tensors ? c->d->param_tensors(in.inst, &probe, 0) : 0;
    if (in.n_params == 0 || n <= 0) {
        ck_item(c, BK_CHECK_SKIP, "param-info", "param_info(): %s", in.n_params == 0 ? "no parameters with the default "
                "configuration" : "no tensors named by param_tensors() to ask about");
        ck_instance_close(&in);
        return;
    }
    biaskit_tensor_info *t = calloc((size_t)n, sizeof *t);
    biaskit_param_info *info = calloc((size_t)n, sizeof *info);
    int *sound = calloc((size_t)n, sizeof *sound);
    size_t np = ck_n_params(&in);
    float *x = malloc(np * sizeof *x);
    strbuf bad = {0}, list = {0};
    if (!t || !info || !sound || !x || c->d->param_tensors(in.inst, t, n) != n)
        ck_sb_printf(&bad, "; out of memory, or param_tensors() changed its count");
    for (int32_t k = 0; !bad.len && k < n; k++) {
        struct {
            biaskit_param_info info;
            unsigned char guard[PARAM_INFO_GUARD];
        } g;
        memset(g.guard, 0xA5, sizeof g.guard);
        biaskit_error pe;
        int unterminated;
        ck_stage(c, "param_info(%d) (tensor '%s')", k, t[k].name);
        bk_param_info_status st = bk_param_info_read(c->d, in.inst, k, &g.info, &pe, &unterminated);
        info[k] = g.info;
        int intact = 1;
        for (size_t b = 0; b < sizeof g.guard; b++)
            intact &= g.guard[b] == 0xA5;
        char bounds[64];
        bk_param_info_bounds(&info[k], bounds, sizeof bounds);
        if (st == BK_PARAM_INFO_FAILED)
            ck_sb_printf(&bad, "; tensor '%s': param_info() failed: %s", t[k].name,
                         pe.message[0] ? pe.message : "no message given");
        else if (!intact)
            ck_sb_printf(&bad, "; tensor '%s': param_info() wrote past the end of biaskit_param_info", t[k].name);
        else if (unterminated)
            ck_sb_printf(&bad, "; tensor '%s': the init text has no NUL within its %d bytes", t[k].name,
                         BIASKIT_PARAM_INFO_TEXT_MAX);
        else if (!(sound[k] = bounds_sound(&info[k])))
            ck_sb_printf(&bad, "; tensor '%s': bounds [%g, %g] (expected lower -inf or finite, upper inf or finite, "
                         "lower <= upper)", t[k].name, info[k].lower, info[k].upper);
        else
            ck_sb_printf(&list, "%s%s %s, init %s", k ? "; " : "", t[k].name, bounds,
                         info[k].init[0] ? info[k].init : "not declared");
    }
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    if (!bad.len)
        check_inside(&in, in.theta, t, info, sound, n, "the initial parameters (param_init, param_project)", &bad);
    for (int s = 0; !bad.len && s < c->opt->n_seeds; s++) {
        uint64_t seed = bk_derive_seed(c->opt->seed, 500, (uint64_t)s);
        char what[96];
        if (ck_random_params(&in, seed, why, sizeof why)) {
            ck_sb_printf(&bad, "; random parameters: %s", why);
            break;
        }
        snprintf(what, sizeof what, "random projected parameters (set %d)", s + 1);
        if (check_inside(&in, in.theta, t, info, sound, n, what, &bad))
            break;
        wild_params(x, np, seed);
        ck_project(&in, x);
        snprintf(what, sizeof what, "wild projected parameters (set %d)", s + 1);
        check_inside(&in, x, t, info, sound, n, what, &bad);
    }
    if (bad.len)
        ck_item(c, BK_CHECK_FAIL, "param-info", "param_info(): %s", bad.s + 2);
    else
        ck_item(c, BK_CHECK_PASS, "param-info", "param_info() for %d tensor%s: %s; initial, random and wild projected "
                "parameters inside the bounds (%d sets)", n, n == 1 ? "" : "s", ck_sb_text(&list), c->opt->n_seeds);
    free(t);
    free(info);
    free(sound);
    free(x);
    free(bad.s);
    free(list.s);
    ck_instance_close(&in);
}

/* ---- determinism ---------------------------------------------------------------------------------- */

static int twice_forward(const instance *in, const model_fn *m, char *why, size_t size)
{
    size_t n = ck_fn_outputs(in, m);
    float *a = ck_guarded_alloc(n), *b = ck_guarded_alloc(n);
    char label[96];
    ck_fn_label(m, label, sizeof label);
    int bad = !a || !b || ck_forward(in, m, in->theta, NULL, a, why, size) || ck_forward(in, m, in->theta, NULL, b, why, size) ||
              ck_same_bits(a, b, n, label, why, size);
    if (!a || !b)
        snprintf(why, size, "out of memory for %zu values", n);
    free(a);
    free(b);
    return bad;
}

static int twice_backward(const instance *in, const model_fn *m, char *why, size_t size)
{
    size_t n = ck_n_params(in), n_out = ck_fn_outputs(in, m);
    float *w = malloc((n_out ? n_out : 1) * sizeof *w), *a = ck_guarded_alloc(n), *b = ck_guarded_alloc(n);
    int bad = !w || !a || !b;
    if (bad)
        snprintf(why, size, "out of memory for %zu values", n);
    if (!bad) {
        rng r = ck_rng_for(0, R_WEIGHTS, 7);
        ck_random_fill(w, n_out, &r);
        memset(a, 0, n * sizeof *a);
        memset(b, 0, n * sizeof *b);
        bad = ck_backward(in, m, in->theta, w, a, why, size) || ck_backward(in, m, in->theta, w, b, why, size) ||
              ck_same_bits(a, b, n, ck_fn_backward_name(m), why, size);
    }
    free(w), free(a), free(b);
    return bad;
}

static int twice_init(const instance *in, char *why, size_t size)
{
    size_t n = ck_n_params(in);
    float *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
    int bad = !a || !b || ck_init_params(in, a, 12345, why, size) || ck_init_params(in, b, 12345, why, size) ||
              ck_same_bits(a, b, n, "param_init() + param_project() with one seed", why, size);
    free(a), free(b);
    return bad;
}

static int twice_segment(const instance *in, char *why, size_t size)
{
    static const char text[] = "The cat sat. The dog ran.\nx = 12 + 30\nno delimiter here";
    int64_t n = (int64_t)sizeof text - 1;
    int32_t tokens[sizeof text], ia[sizeof text], pa[sizeof text], ib[sizeof text], pb[sizeof text];
    for (int64_t k = 0; k < n; k++)
        tokens[k] = (unsigned char)text[k] % (in->geo.vocab_size > 0 ? in->geo.vocab_size : 256);
    biaskit_error pe = {0};
    ck_stage(in->c, "segment()");
    int rc = in->c->d->segment(in->inst, tokens, n, ia, pa, &pe);
    if (rc == BIASKIT_OK)
        rc = in->c->d->segment(in->inst, tokens, n, ib, pb, &pe);
    if (rc != BIASKIT_OK) {
        snprintf(why, size, "segment() failed: %s", pe.message[0] ? pe.message : "(no message)");
        return 1;
    }
    if (memcmp(ia, ib, (size_t)n * sizeof *ia) || memcmp(pa, pb, (size_t)n * sizeof *pa)) {
        snprintf(why, size, "segment() differs between two identical calls");
        return 1;
    }
    return 0;
}

static int twice_rotary(const instance *in, char *why, size_t size)
{
    int32_t half = in->geo.d_head / 2;
    float *a = ck_guarded_alloc((size_t)half), *b = ck_guarded_alloc((size_t)half);
    biaskit_error pe = {0};
    ck_stage(in->c, "rotary_frequencies()");
    int bad = !a || !b || in->c->d->rotary_frequencies(in->inst, a, &pe) != BIASKIT_OK ||
              in->c->d->rotary_frequencies(in->inst, b, &pe) != BIASKIT_OK;
    if (bad)
        snprintf(why, size, "rotary_frequencies() failed: %s", pe.message[0] ? pe.message : "(no message)");
    else
        bad = ck_same_bits(a, b, (size_t)half, "rotary_frequencies()", why, size);
    free(a), free(b);
    return bad;
}

/* Two calls agree; *points 0 when the answer is outside 2 .. BK_CONTRACT_POINTS_MAX (the grid is not called:
 * the "coordinate-points" item reports it). */
static int twice_points(const instance *in, int32_t *points, char *why, size_t size)
{
    ck_stage(in->c, "coordinate_points()");
    int32_t a = in->c->d->coordinate_points(in->inst), b = in->c->d->coordinate_points(in->inst);
    if (a != b) {
        snprintf(why, size, "coordinate_points() differs between two identical calls: %d, then %d", a, b);
        return 1;
    }
    *points = a >= 2 && a <= BK_CONTRACT_POINTS_MAX ? a : 0;
    return 0;
}

static int twice_mask(const instance *in, char *why, size_t size)
{
    biaskit_mask a, b;
    int32_t L = in->geo.train_length;
    if (ck_mask(in, L, 0, 0, &a, why, size) || ck_mask(in, L, 0, 0, &b, why, size))
        return 1;
    if (a.window != b.window || a.sinks != b.sinks || a.distance_cap != b.distance_cap) {
        snprintf(why, size, "mask() differs between two identical calls: window %d, sinks %d, distance_cap %d, then "
                 "%d, %d, %d", a.window, a.sinks, a.distance_cap, b.window, b.sinks, b.distance_cap);
        return 1;
    }
    return 0;
}

static int twice_rotary_ctx(const instance *in, char *why, size_t size)
{
    int32_t half = in->geo.d_head / 2, L = in->geo.train_length;
    float *a = ck_guarded_alloc((size_t)half), *b = ck_guarded_alloc((size_t)half), amp_a = 0.0f, amp_b = 0.0f;
    int bad = !a || !b;
    if (bad)
        snprintf(why, size, "out of memory");
    /* at 4 L: a dynamic scaling is active there */
    int32_t n = L <= INT32_MAX / 4 ? 4 * L : L;
    bad = bad || ck_rotary_ctx(in, n, 0, 0, a, &amp_a, why, size) || ck_rotary_ctx(in, n, 0, 0, b, &amp_b, why, size) ||
          ck_same_bits(a, b, (size_t)half, "rotary_ctx() (frequencies)", why, size) ||
          ck_same_bits(&amp_a, &amp_b, 1, "rotary_ctx() (amplitude)", why, size);
    free(a), free(b);
    return bad;
}

void ck_unit_determinism(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (ck_open_default(c, "determinism", bk_derive_seed(c->opt->seed, 500, 0), 1, &in))
        return;
    const biaskit_plugin *d = c->d;
    uint32_t caps = d->capabilities;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    strbuf done = {0};
    int bad = 0;
    int32_t L = c->geo.train_length, P = 0;
    int32_t *pos = ck_embed_positions(L, 64, 0, c->opt->seed);
    model_fn table = {.kind = FN_TABLE, .distances = 1000}, embed = {.kind = FN_EMBED, .positions = pos, .count = 64};
    model_fn grid = {.kind = FN_GRID}, coord = {.kind = FN_COORD, .distances = L, .rows = L, .length = L, .training = 1};
    model_fn scale = {.kind = FN_SCALE, .rows = L, .length = L, .training = 1};
    if (!bad && in.n_params > 0 && !(bad = twice_init(&in, why, sizeof why)))
        ck_sb_printf(&done, ", param_init");
    if (!bad && (caps & BIASKIT_CAP_TABLE) && !(bad = twice_forward(&in, &table, why, sizeof why)))
        ck_sb_printf(&done, ", table");
    if (!bad && (caps & BIASKIT_CAP_TABLE) && in.n_params > 0 && d->table_backward &&
        !(bad = twice_backward(&in, &table, why, sizeof why)))
        ck_sb_printf(&done, ", table_backward");
    if (!bad && (caps & BIASKIT_CAP_COORDINATE)) {
        if (!(bad = twice_points(&in, &P, why, sizeof why)))
            ck_sb_printf(&done, ", coordinate_points");
        grid.distances = P;
        if (!bad && P && !(bad = twice_forward(&in, &grid, why, sizeof why)))
            ck_sb_printf(&done, ", table over the grid");
        if (!bad && P && in.n_params > 0 && d->table_backward && !(bad = twice_backward(&in, &grid, why, sizeof why)))
            ck_sb_printf(&done, ", its table_backward");
        if (!bad && !(bad = twice_forward(&in, &coord, why, sizeof why)))
            ck_sb_printf(&done, ", coordinate");
        if (!bad && in.n_params > 0 && BK_DESCRIPTOR_FN(d, coordinate_backward) &&
            !(bad = twice_backward(&in, &coord, why, sizeof why)))
            ck_sb_printf(&done, ", coordinate_backward");
    }
    if (!bad && (caps & BIASKIT_CAP_SCALE) && !(bad = twice_forward(&in, &scale, why, sizeof why)))
        ck_sb_printf(&done, ", scale");
    if (!bad && (caps & BIASKIT_CAP_SCALE) && in.n_params > 0 && BK_DESCRIPTOR_FN(d, scale_backward) &&
        !(bad = twice_backward(&in, &scale, why, sizeof why)))
        ck_sb_printf(&done, ", scale_backward");
    if (!bad && (caps & BIASKIT_CAP_MASK) && !(bad = twice_mask(&in, why, sizeof why)))
        ck_sb_printf(&done, ", mask");
    if (!bad && (caps & BIASKIT_CAP_EMBED) && pos && !(bad = twice_forward(&in, &embed, why, sizeof why)))
        ck_sb_printf(&done, ", embed");
    if (!bad && (caps & BIASKIT_CAP_EMBED) && pos && in.n_params > 0 && d->embed_backward &&
        !(bad = twice_backward(&in, &embed, why, sizeof why)))
        ck_sb_printf(&done, ", embed_backward");
    if (!bad && (caps & BIASKIT_CAP_SEGMENT) && !(bad = twice_segment(&in, why, sizeof why)))
        ck_sb_printf(&done, ", segment");
    if (!bad && (caps & BIASKIT_CAP_ROTARY) && d->rotary_frequencies && !(bad = twice_rotary(&in, why, sizeof why)))
        ck_sb_printf(&done, ", rotary_frequencies");
    if (!bad && (caps & BIASKIT_CAP_ROTARY) && ck_has_rotary_ctx(c) && !(bad = twice_rotary_ctx(&in, why, sizeof why)))
        ck_sb_printf(&done, ", rotary_ctx");
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "determinism", "not deterministic: %s", why);
    else if (done.len)
        ck_item(c, BK_CHECK_PASS, "determinism", "deterministic: two calls give bit-identical results (%s)", done.s + 2);
    else
        ck_item(c, BK_CHECK_SKIP, "determinism", "determinism: nothing to call twice");
    free(done.s);
    free(pos);
    ck_instance_close(&in);
}

/* ---- segment ------------------------------------------------------------------------------------ */

/* The contract on one token sequence; 0 or 1 with why. */
static int check_segments(const instance *in, const char *label, const int32_t *tokens, int64_t n, char *why,
                          size_t size)
{
    int32_t *idx = malloc((size_t)(n + GUARD_FLOATS) * sizeof *idx), *pos = malloc((size_t)(n + GUARD_FLOATS) * sizeof *pos);
    if (!idx || !pos) {
        free(idx), free(pos);
        snprintf(why, size, "out of memory for %lld tokens", (long long)n);
        return 1;
    }
    for (int64_t k = 0; k < n + GUARD_FLOATS; k++)
        idx[k] = pos[k] = -7;
    biaskit_error pe = {0};
    ck_stage(in->c, "segment() on %s", label);
    int rc = in->c->d->segment(in->inst, tokens, n, idx, pos, &pe), bad = 1;
    if (rc != BIASKIT_OK)
        snprintf(why, size, "segment() on %s failed: %s", label, pe.message[0] ? pe.message : "(no message)");
    else if (idx[n] != -7 || pos[n] != -7)
        snprintf(why, size, "segment() on %s wrote past the end of its %lld outputs", label, (long long)n);
    else {
        int64_t k = bk_segments_first_violation(idx, pos, n);
        bad = k >= 0;
        if (k == 0)
            snprintf(why, size, "segment() on %s: the first token has segment %d, position %d (expected 0, 0)",
                     label, idx[0], pos[0]);
        else if (k > 0)
            snprintf(why, size, "segment() on %s: token %lld has segment %d, position %d after segment %d, position "
                     "%d (segments must grow by 0 or 1; positions restart at 0 in a new segment, else grow by 1)",
                     label, (long long)k, idx[k], pos[k], idx[k - 1], pos[k - 1]);
    }
    free(idx), free(pos);
    return bad;
}

void ck_unit_segment(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (ck_open_default(c, "segment", c->opt->seed, 0, &in))
        return;
    static const char *const texts[][2] = {
        {"text with '.' and '\\n'", "The cat sat on the mat. It was warm.\nThe dog did not mind. Then it rained.\n"},
        {"arithmetic with '='", "12+34=46\n7*8=56\n100-1=99"},
        {"text without any delimiter", "no delimiter at all in this sentence"},
        {"one token", "."},
        {"delimiters only", "..\n\n==.\n"},
    };
    int32_t V = c->geo.vocab_size > 0 ? c->geo.vocab_size : 256;
    int32_t tokens[4096];
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    int bad = 0;
    for (size_t t = 0; !bad && t < sizeof texts / sizeof texts[0]; t++) {
        int64_t n = (int64_t)strlen(texts[t][1]);
        for (int64_t k = 0; k < n; k++)
            tokens[k] = (unsigned char)texts[t][1][k] % V;
        bad = check_segments(&in, texts[t][0], tokens, n, why, sizeof why);
    }
    if (!bad) {
        rng r = ck_rng_for(c->opt->seed, R_TOKENS, 0);
        for (int k = 0; k < 4096; k++)
            tokens[k] = (int32_t)(bk_rng_u64(&r) % (uint64_t)V);
        bad = check_segments(&in, "4096 random tokens", tokens, 4096, why, sizeof why);
    }
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "segment", "%s", why);
    else
        ck_item(c, BK_CHECK_PASS, "segment",
                "segment(): indices start at 0 and grow by 0 or 1, positions restart at 0 in each new segment (text with "
                "'.', '\\n', '=', without delimiters, one token, 4096 random tokens)");
    ck_instance_close(&in);
}

/* ---- embed -------------------------------------------------------------------------------------- */

/* embed() into a random start must give start + the embedding into zeros. */
static int check_embed_adds(const instance *in, const model_fn *m, const float *alone, char *why, size_t size)
{
    size_t n = ck_fn_outputs(in, m);
    float *start = malloc((n ? n : 1) * sizeof *start), *out = ck_guarded_alloc(n);
    int bad = !start || !out;
    if (bad)
        snprintf(why, size, "out of memory for %zu values", n);
    rng r = ck_rng_for(0, R_START, 1);
    for (size_t k = 0; !bad && k < n; k++)
        start[k] = (float)ck_rng_sym(&r);
    if (!bad)
        bad = ck_forward(in, m, in->theta, start, out, why, size);
    for (size_t k = 0; !bad && k < n; k++) {
        double want = (double)start[k] + (double)alone[k];
        if (fabs((double)out[k] - want) > EMBED_ADD_TOLERANCE * (fabs((double)start[k]) + fabs((double)alone[k]))) {
            char place[96];
            ck_output_place(in, m, k, place, sizeof place);
            snprintf(why, size, "embed() does not add into out at %s: started at %.9g, embedding %.9g, got %.9g "
                     "(expected their sum: embed must +=)", place, (double)start[k], (double)alone[k], (double)out[k]);
            bad = 1;
        }
    }
    free(start), free(out);
    return bad;
}

/* Positions past the training length: finite values or a refusal with a message. */
static int check_far_positions(const instance *in, char *note, size_t note_size, char *why, size_t size)
{
    int32_t far[] = {in->geo.train_length, 2 * in->geo.train_length, 4095, in->c->opt->max_distances - 1};
    model_fn m = {.kind = FN_EMBED, .positions = far, .count = 4};
    float *out = ck_guarded_alloc(ck_fn_outputs(in, &m));
    char inner[BIASKIT_ERROR_MESSAGE_MAX + 128];
    int bad = !out;
    if (bad)
        snprintf(why, size, "out of memory");
    else if ((bad = ck_forward(in, &m, in->theta, NULL, out, inner, sizeof inner)) != CALL_OK) {
        /* a refusal with a message is a fine answer; a broken call is not */
        bad = bad == CALL_BROKEN;
        if (bad)
            snprintf(why, size, "%s", inner);
        else
            snprintf(note, note_size, "refused with a message");
    } else if (ck_first_non_finite(out, ck_fn_outputs(in, &m)) >= 0) {
        snprintf(why, size, "embed() of positions %d, %d, 4095, %d gives non-finite values", far[0], far[1], far[3]);
        bad = 1;
    } else {
        snprintf(note, note_size, "finite");
    }
    free(out);
    return bad;
}

void ck_unit_embed(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (ck_open_default(c, "embed", c->opt->seed, 0, &in))
        return;
    int32_t L = c->geo.train_length;
    int32_t *pos = ck_embed_positions(L, L, 1, 0);
    model_fn m = {.kind = FN_EMBED, .positions = pos, .count = L};
    float *alone = pos ? ck_guarded_alloc(ck_fn_outputs(&in, &m)) : NULL;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300], note[BIASKIT_ERROR_MESSAGE_MAX + 64] = "";
    int bad = !alone;
    if (bad)
        snprintf(why, sizeof why, "out of memory");
    bad = bad || ck_forward_finite(&in, &m, in.theta, alone, why, sizeof why) || check_embed_adds(&in, &m, alone, why, sizeof why) ||
          check_far_positions(&in, note, sizeof note, why, sizeof why);
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "embed", "%s", why);
    else
        ck_item(c, BK_CHECK_PASS, "embed",
                "embed() adds into out (+=, within %g relative) and is finite for positions 0..%d; positions %d..%d: %s",
                EMBED_ADD_TOLERANCE, L - 1, L, c->opt->max_distances - 1, note);
    free(alone), free(pos);
    ck_instance_close(&in);
}

/* ---- rotary ------------------------------------------------------------------------------------- */

static void check_rotary_frequencies(checker *c, const instance *in)
{
    int32_t half = c->geo.d_head / 2;
    float *f = ck_guarded_alloc((size_t)half);
    biaskit_error pe = {0};
    ck_stage(c, "rotary_frequencies()");
    int rc = f ? c->d->rotary_frequencies(in->inst, f, &pe) : BIASKIT_ERR_NOMEM;
    if (rc != BIASKIT_OK) {
        ck_item(c, BK_CHECK_FAIL, "rotary", "rotary_frequencies() failed: %s", pe.message[0] ? pe.message : "(no message)");
    } else if (!ck_guard_intact(f, (size_t)half)) {
        ck_item(c, BK_CHECK_FAIL, "rotary", "rotary_frequencies() wrote more than d_head/2 = %d values", half);
    } else {
        int32_t k = 0;
        while (k < half && isfinite(f[k]) && !ck_is_sentinel(f[k]))
            k++;
        if (k < half)
            ck_item(c, BK_CHECK_FAIL, "rotary", "rotary_frequencies(): inverse frequency %d is %s (expected finite)",
                    k, ck_is_sentinel(f[k]) ? "unwritten" : "not finite");
        else
            ck_item(c, BK_CHECK_PASS, "rotary", "rotary_frequencies(): d_head/2 = %d inverse frequencies, finite "
                    "(%.3g .. %.3g; 0: a pair that does not turn)", half, half ? (double)f[0] : 0.0,
                    half ? (double)f[half - 1] : 0.0);
    }
    free(f);
}

/* rotary_decay() (xPos): d_head/2 zeta_k and a scale, finite and > 0 (bk_contract_rotary_decay), every
 * value written, nothing beyond, the same bits twice. */
static void check_rotary_decay(checker *c, const instance *in)
{
    const int32_t half = c->geo.d_head / 2;
    float *z[2] = {ck_guarded_alloc((size_t)half), ck_guarded_alloc((size_t)half)}, scale[2] = {0.0f, 0.0f};
    char why[BIASKIT_ERROR_MESSAGE_MAX + 200] = "";
    int bad = !z[0] || !z[1];
    if (bad)
        snprintf(why, sizeof why, "out of memory");
    biaskit_context ctx = ck_context(in, c->geo.train_length, 1);
    for (int k = 0; k < 2 && !bad; k++) {
        biaskit_error pe = {0};
        ck_fill_sentinel(&scale[k], 1);
        ck_stage(c, "rotary_decay()");
        int rc = BK_DESCRIPTOR_FN(c->d, rotary_decay)(in->inst, &ctx, z[k], &scale[k], &pe);
        if (rc != BIASKIT_OK)
            bad = 1, snprintf(why, sizeof why, "rotary_decay() failed: %s", pe.message[0] ? pe.message : "(no message)");
        else if (!ck_guard_intact(z[k], (size_t)half))
            bad = 1, snprintf(why, sizeof why, "rotary_decay() wrote more than d_head/2 = %d values", half);
        for (int32_t i = 0; i < half && !bad; i++)
            if (ck_is_sentinel(z[k][i]))
                bad = 1, snprintf(why, sizeof why, "rotary_decay() left zeta %d unwritten", i);
        if (!bad && ck_is_sentinel(scale[k]))
            bad = 1, snprintf(why, sizeof why, "rotary_decay() left the scale unwritten");
        char what[200];
        if (!bad && bk_contract_rotary_decay(z[k], half, scale[k], what, sizeof what))
            bad = 1, snprintf(why, sizeof why, "rotary_decay() gave %s", what);
    }
    bad = bad || ck_same_bits(z[0], z[1], (size_t)half, "rotary_decay() (zeta)", why, sizeof why) ||
          ck_same_bits(&scale[0], &scale[1], 1, "rotary_decay() (scale)", why, sizeof why);
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "rotary", "%s", why);
    else
        ck_item(c, BK_CHECK_PASS, "rotary", "rotary_decay(): d_head/2 = %d decays zeta_k, finite and > 0 (%.3g .. %.3g), "
                "scale %g; the same bits twice", half, (double)z[0][0], (double)z[0][half - 1], (double)scale[0]);
    free(z[0]), free(z[1]);
}

/* rotary_views() at lengths L and 2L (L the training length): views that tile [0, inf), every position
 * finite and written (the buffers start as NaN), nothing written past ctx->length (a guard of 16 values),
 * the same bits twice. */
static void check_rotary_views(checker *c, const instance *in)
{
    enum { GUARD = 16 };
    const int32_t L = c->geo.train_length > 0 ? c->geo.train_length : 64;
    const int32_t lengths[2] = {L, 2 * L};
    char why[BIASKIT_ERROR_MESSAGE_MAX + 200] = "", said[160] = "";
    int bad = 0;
    for (int li = 0; li < 2 && !bad; li++) {
        const int32_t T = lengths[li];
        const size_t per = (size_t)T + GUARD, all = (size_t)2 * BIASKIT_MAX_ROTARY_VIEWS * per;
        double *buf[2] = {malloc(all * sizeof(double)), malloc(all * sizeof(double))};
        biaskit_rotary_view v[2][BIASKIT_MAX_ROTARY_VIEWS];
        int32_t n[2] = {-1, -1};
        if (!buf[0] || !buf[1])
            bad = 1, snprintf(why, sizeof why, "out of memory");
        for (int k = 0; k < 2 && !bad; k++) {
            for (size_t i = 0; i < all; i++)
                buf[k][i] = NAN;
            for (int w = 0; w < BIASKIT_MAX_ROTARY_VIEWS; w++) {
                v[k][w].min_distance = v[k][w].max_distance = -1;
                v[k][w].q_pos = buf[k] + (size_t)2 * w * per, v[k][w].k_pos = v[k][w].q_pos + per;
            }
            biaskit_context ctx = ck_context(in, T, 0);
            biaskit_error pe = {0};
            ck_stage(c, "rotary_views()");
            int rc = BK_DESCRIPTOR_FN(c->d, rotary_views)(in->inst, &ctx, v[k], BIASKIT_MAX_ROTARY_VIEWS, &n[k], &pe);
            char what[320];
            if (rc != BIASKIT_OK)
                bad = 1, snprintf(why, sizeof why, "rotary_views() at length %d failed: %s", (int)T,
                                  pe.message[0] ? pe.message : "(no message)");
            else if (bk_contract_rotary_views(v[k], n[k], T, what, sizeof what))
                bad = 1, snprintf(why, sizeof why, "rotary_views() at length %d gave %s", (int)T, what);
            for (int w = 0; w < BIASKIT_MAX_ROTARY_VIEWS && !bad; w++)
                for (size_t g = (size_t)T; g < per && !bad; g++)
                    if (!isnan(v[k][w].q_pos[g]) || !isnan(v[k][w].k_pos[g]))
                        bad = 1, snprintf(why, sizeof why,
                                          "rotary_views() at length %d wrote position %zu of view %d, past the "
                                          "length",
                                          (int)T, g, w);
        }
        /* the same views twice: their ranges, and every value (the unwritten ones NaN in both) */
        int same = !bad && n[0] == n[1];
        for (int w = 0; same && w < n[0]; w++)
            same = v[0][w].min_distance == v[1][w].min_distance && v[0][w].max_distance == v[1][w].max_distance;
        for (size_t i = 0; same && i < all; i++)
            same = (isnan(buf[0][i]) && isnan(buf[1][i])) || buf[0][i] == buf[1][i];
        if (!bad && !same)
            bad = 1, snprintf(why, sizeof why, "rotary_views() at length %d gave other views the second time", (int)T);
        if (!bad && li == 0) {
            if (n[0] == 0)
                snprintf(said, sizeof said, "no views (the ordinary rotation) with these options");
            else {
                int at = snprintf(said, sizeof said, "%d views at length %d:", (int)n[0], (int)T);
                for (int w = 0; w < n[0] && at > 0 && (size_t)at < sizeof said; w++) {
                    char end[16] = "inf";
                    if (v[0][w].max_distance)
                        snprintf(end, sizeof end, "%d", (int)v[0][w].max_distance);
                    at += snprintf(said + at, sizeof said - (size_t)at, " [%d, %s)", (int)v[0][w].min_distance, end);
                }
            }
        }
        free(buf[0]), free(buf[1]);
    }
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "rotary-views", "%s", why);
    else
        ck_item(c, BK_CHECK_PASS, "rotary-views",
                "rotary_views(): %s; the views tile [0, inf), every position finite and nothing past the length, at "
                "lengths %d and %d, the same twice",
                said, (int)lengths[0], (int)lengths[1]);
}

/* "rotary": rotary_frequencies() (ABI 1); "rotary-ctx": rotary_ctx() (ABI 2, abi2.c). A plugin may have
 * either or both. */
void ck_unit_rotary(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    if (ck_open_default(c, "rotary", c->opt->seed, 0, &in))
        return;
    if (c->d->rotary_frequencies)
        check_rotary_frequencies(c, &in);
    if (ck_has_rotary_ctx(c))
        ck_check_rotary_ctx(c, &in);
    if (BK_DESCRIPTOR_FN(c->d, rotary_decay) && c->geo.d_head >= 2)
        check_rotary_decay(c, &in);
    if (BK_DESCRIPTOR_FN(c->d, rotary_views))
        check_rotary_views(c, &in);
    ck_instance_close(&in);
}
