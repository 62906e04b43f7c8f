/* biaskit check: instances of the plugin under test, and its functions wrapped so that every
 * failure becomes a sentence (what was called, with what, what went wrong); guarded output buffers
 * catch writes past the end and entries left unwritten. */
#include "check/internal.h"

#include "bias/terms.h"
#include "plugin/descriptor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARAMS (1ll << 28)

rng ck_rng_for(uint64_t seed, uint64_t purpose, uint64_t index)
{
    return (rng){bk_derive_seed(seed, purpose, index)};
}

double ck_rng_sym(rng *r) /* (-1, 1] */
{
    return 2.0 * bk_rng_uniform(r) - 1.0;
}

/* A quiet NaN with a payload no arithmetic produces: marks memory a plugin has not written. */
static const uint32_t SENTINEL_BITS = 0x7fc5a5a5u;

int ck_is_sentinel(float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits == SENTINEL_BITS;
}

void ck_fill_sentinel(float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        memcpy(&v[i], &SENTINEL_BITS, sizeof SENTINEL_BITS);
}

/* n floats plus the guard, sentinel-filled; NULL when out of memory. */
float *ck_guarded_alloc(size_t n)
{
    float *v = malloc((n + GUARD_FLOATS) * sizeof *v);
    if (v)
        ck_fill_sentinel(v, n + GUARD_FLOATS);
    return v;
}

int ck_guard_intact(const float *v, size_t n)
{
    for (size_t i = n; i < n + GUARD_FLOATS; i++)
        if (!ck_is_sentinel(v[i]))
            return 0;
    return 1;
}

/* Index of the first non-finite value, or -1. */
long long ck_first_non_finite(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return (long long)i;
    return -1;
}

int ck_bits_equal(const float *a, const float *b, size_t n, size_t *at)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) != 0) {
            *at = i;
            return 0;
        }
    return 1;
}

void ck_instance_close(instance *in)
{
    if (in->c) {
        ck_stage(in->c, "destroy()");
        in->c->d->destroy(in->inst);
    }
    free(in->theta);
    memset(in, 0, sizeof *in);
}

/* The answer of a failed call: CALL_REFUSED with its message, or CALL_BROKEN without one. */
int ck_refusal(const char *call, int rc, biaskit_error *pe, char *why, size_t size)
{
    pe->message[sizeof pe->message - 1] = '\0';
    if (pe->message[0]) {
        snprintf(why, size, "%s failed: %s", call, pe->message);
        return CALL_REFUSED;
    }
    snprintf(why, size, "%s failed (code %d) without a message", call, rc);
    return CALL_BROKEN;
}

/* create() and the parameter vector (zeros): CALL_OK, or CALL_REFUSED / CALL_BROKEN with why. */
int ck_instance_create(const checker *c, const biaskit_config *view, const biaskit_geometry *geo,
                       instance *in, char *why, size_t size)
{
    memset(in, 0, sizeof *in);
    in->geo = *geo;
    biaskit_error pe = {0};
    ck_stage(c, "create()");
    int rc = c->d->create(bk_services(), view, geo, &in->inst, &pe);
    if (rc != BIASKIT_OK)
        return ck_refusal("create()", rc, &pe, why, size);
    bk_error e;
    if (bk_plugin_check_created(c->plugin, in->inst, &e)) {
        bk_copy_text(why, size, e.message);
        return CALL_BROKEN;
    }
    in->c = c;
    ck_stage(c, "param_count()");
    in->n_params = c->d->param_count ? c->d->param_count(in->inst) : 0;
    if (in->n_params < 0 || in->n_params > MAX_PARAMS) {
        snprintf(why, size, "param_count() returned %lld (expected 0 .. %lld)", (long long)in->n_params,
                 (long long)MAX_PARAMS);
        ck_instance_close(in);
        return CALL_BROKEN;
    }
    if (in->n_params > 0 && !(in->theta = calloc((size_t)in->n_params, sizeof *in->theta))) {
        snprintf(why, size, "out of memory for %lld parameters", (long long)in->n_params);
        ck_instance_close(in);
        return CALL_BROKEN;
    }
    return CALL_OK;
}

size_t ck_n_params(const instance *in)
{
    return (size_t)in->n_params;
}

void ck_project(const instance *in, float *theta)
{
    if (in->n_params > 0 && in->c->d->param_project) {
        ck_stage(in->c, "param_project()");
        in->c->d->param_project(in->inst, theta);
    }
}

biaskit_context ck_context(const instance *in, int32_t length, int training)
{
    int per_layer = (in->c->d->flags & BIASKIT_FLAG_PER_LAYER) && in->geo.n_layers > 1;
    return bk_term_context_of(&in->geo, per_layer ? 0 : -1, length, training);
}

/* param_init(seed) into theta (in->theta when NULL), then param_project; param_init_ctx when the plugin
 * has it, with the context of the engine's initialisation (core/bias/terms.c): train_length, training. */
int ck_init_params(const instance *in, float *theta, uint64_t seed, char *why, size_t size)
{
    if (in->n_params == 0)
        return 0;
    theta = theta ? theta : in->theta;
    biaskit_error pe = {0};
    const biaskit_plugin *d = in->c->d;
    int rc;
    if (BK_DESCRIPTOR_FN(d, param_init_ctx)) {
        biaskit_context ctx = ck_context(in, in->geo.train_length, 1);
        ck_stage(in->c, "param_init_ctx()");
        if ((rc = d->param_init_ctx(in->inst, theta, seed, &ctx, &pe)) != BIASKIT_OK)
            return ck_refusal("param_init_ctx()", rc, &pe, why, size);
    } else {
        ck_stage(in->c, "param_init()");
        if ((rc = d->param_init(in->inst, theta, seed, &pe)) != BIASKIT_OK)
            return ck_refusal("param_init()", rc, &pe, why, size);
    }
    ck_project(in, theta);
    return 0;
}

/* Random parameters: param_init, theta + N(0, (0.25 |theta| + 0.05)^2), param_project. */
int ck_random_params(const instance *in, uint64_t seed, char *why, size_t size)
{
    if (ck_init_params(in, NULL, bk_derive_seed(seed, R_INIT, 0), why, size))
        return 1;
    rng r = ck_rng_for(seed, R_PERTURB, 0);
    for (size_t i = 0; i < ck_n_params(in); i++) {
        double t = in->theta[i];
        in->theta[i] = (float)(t + (PERTURB_REL * fabs(t) + PERTURB_ABS) * bk_rng_normal(&r));
    }
    ck_project(in, in->theta);
    return 0;
}

/* Names entry i of theta after the plugin's tensors: "r2[3]", "table[5,17]", else "theta[i]". */
void ck_entry_name(const instance *in, int64_t i, char *buf, size_t size)
{
    biaskit_tensor_info t[64];
    int32_t n = in->c->d->param_tensors ? in->c->d->param_tensors(in->inst, t, 64) : 0;
    for (int32_t k = 0; k < n && k < 64; k++) {
        int64_t len = (int64_t)t[k].rows * t[k].cols;
        if (t[k].name && i >= t[k].offset && i < t[k].offset + len && t[k].cols > 0) {
            int64_t j = i - t[k].offset;
            if (t[k].cols == 1)
                snprintf(buf, size, "%s[%lld]", t[k].name, (long long)j);
            else
                snprintf(buf, size, "%s[%lld,%lld]", t[k].name, (long long)(j / t[k].cols), (long long)(j % t[k].cols));
            return;
        }
    }
    snprintf(buf, size, "theta[%lld]", (long long)i);
}

static size_t heads_of(const instance *in)
{
    return (size_t)(in->geo.n_heads > 0 ? in->geo.n_heads : 0);
}

size_t ck_fn_outputs(const instance *in, const model_fn *m)
{
    switch (m->kind) {
    case FN_TABLE:
    case FN_GRID: return heads_of(in) * (size_t)m->distances;
    case FN_COORD: return (size_t)m->distances + (size_t)m->rows;
    case FN_SCALE: return heads_of(in) * (size_t)m->rows;
    case FN_COUNT: return (size_t)m->distances * (size_t)(in->geo.d_head > 0 ? in->geo.d_head : 0);
    case FN_CONTENT: return (size_t)m->count * heads_of(in);
    case FN_EMBED: break;
    }
    return (size_t)m->count * (size_t)(in->geo.d_model > 0 ? in->geo.d_model : 0);
}

/* "head 3, distance 40000", "token 5, channel 17", "head 2, grid point 7", "rscale[4097]", "head 1,
 * query 9000" for output index k. */
void ck_output_place(const instance *in, const model_fn *m, size_t k, char *buf, size_t size)
{
    size_t D = (size_t)m->distances, R = (size_t)m->rows;
    switch (m->kind) {
    case FN_TABLE: snprintf(buf, size, "head %zu, distance %zu", k / D, k % D); return;
    case FN_GRID: snprintf(buf, size, "head %zu, grid point %zu of %zu", k / D, k % D, D); return;
    case FN_COORD:
        if (k < D)
            snprintf(buf, size, "phi[%zu]", k);
        else
            snprintf(buf, size, "rscale[%zu]", k - D);
        return;
    case FN_SCALE: snprintf(buf, size, "head %zu, query %zu", k / R, k % R); return;
    case FN_COUNT:
        snprintf(buf, size, "vector %zu, component %zu", k / (size_t)in->geo.d_head, k % (size_t)in->geo.d_head);
        return;
    case FN_CONTENT: snprintf(buf, size, "token %zu, head %zu", k / heads_of(in), k % heads_of(in)); return;
    case FN_EMBED: break;
    }
    snprintf(buf, size, "position %d (token %zu), channel %zu", m->positions[k / (size_t)in->geo.d_model],
             k / (size_t)in->geo.d_model, k % (size_t)in->geo.d_model);
}

void ck_fn_label(const model_fn *m, char *buf, size_t size)
{
    const char *training = m->training ? " (training)" : "";
    switch (m->kind) {
    case FN_TABLE: snprintf(buf, size, "table() with %d distances", m->distances); return;
    case FN_GRID: snprintf(buf, size, "table() over the grid of %d points", m->distances); return;
    case FN_COORD:
        if (m->distances == m->rows && m->rows == m->length)
            snprintf(buf, size, "coordinate() at length %d%s", m->length, training);
        else
            snprintf(buf, size, "coordinate() at length %d%s, %d distances, %d rows", m->length, training,
                     m->distances, m->rows);
        return;
    case FN_SCALE:
        if (m->rows == m->length)
            snprintf(buf, size, "scale() at length %d%s", m->length, training);
        else
            snprintf(buf, size, "scale() at length %d%s, %d rows", m->length, training, m->rows);
        return;
    case FN_COUNT: snprintf(buf, size, "count_vectors() of %d position vectors", m->distances); return;
    case FN_CONTENT: snprintf(buf, size, "content() of %lld tokens", (long long)m->count); return;
    case FN_EMBED: break;
    }
    snprintf(buf, size, "embed() of %lld positions", (long long)m->count);
}

const char *ck_fn_backward_name(const model_fn *m)
{
    switch (m->kind) {
    case FN_TABLE:
    case FN_GRID: return "table_backward()";
    case FN_COORD: return "coordinate_backward()";
    case FN_SCALE: return "scale_backward()";
    case FN_COUNT: return "count_vectors_backward()";
    case FN_CONTENT: return "content_backward()";
    case FN_EMBED: break;
    }
    return "embed_backward()";
}

/* An output written, nothing past its end: CALL_OK, or CALL_BROKEN with why. */
static int check_written(const instance *in, const model_fn *m, const char *label, const float *out, size_t n,
                         size_t first, char *why, size_t size)
{
    if (!ck_guard_intact(out, n)) {
        snprintf(why, size, "%s wrote past the end of its %zu output values", label, n);
        return CALL_BROKEN;
    }
    for (size_t k = 0; k < n; k++)
        if (ck_is_sentinel(out[k])) {
            char place[96];
            ck_output_place(in, m, first + k, place, sizeof place);
            snprintf(why, size, "%s left %s unwritten", label, place);
            return CALL_BROKEN;
        }
    return CALL_OK;
}

/* coordinate() into separate guarded phi and rscale (so that a write past the end of either is seen),
 * copied to out: phi, then rscale. */
static int coordinate_call(const instance *in, const model_fn *m, const float *theta, float *out, const char *label,
                           char *why, size_t size)
{
    size_t D = (size_t)m->distances, R = (size_t)m->rows;
    float *phi = ck_guarded_alloc(D), *rscale = ck_guarded_alloc(R);
    if (!phi || !rscale) {
        free(phi), free(rscale);
        snprintf(why, size, "out of memory for %zu + %zu coordinate values", D, R);
        return CALL_BROKEN;
    }
    biaskit_context ctx = ck_context(in, m->length, m->training);
    biaskit_error pe = {0};
    ck_stage(in->c, "%s", label);
    int rc = in->c->d->coordinate(in->inst, theta, &ctx, m->distances, m->rows, phi, rscale, &pe);
    char phi_label[160], rscale_label[160];
    snprintf(phi_label, sizeof phi_label, "%s (phi)", label);
    snprintf(rscale_label, sizeof rscale_label, "%s (rscale)", label);
    if (rc != BIASKIT_OK)
        rc = ck_refusal(label, rc, &pe, why, size);
    else if ((rc = check_written(in, m, phi_label, phi, D, 0, why, size)) == CALL_OK &&
             (rc = check_written(in, m, rscale_label, rscale, R, D, why, size)) == CALL_OK) {
        memcpy(out, phi, D * sizeof *out);
        memcpy(out + D, rscale, R * sizeof *out);
    }
    free(phi), free(rscale);
    return rc;
}

/* The plugin's output into out (fn_outputs + guard floats): the table, or the embedding added to
 * zeros (or to `start` when not NULL), the grid table, coordinate() or scale(). CALL_OK; CALL_REFUSED
 * (failed with a message) or CALL_BROKEN (failed without one, wrote past its end, left an entry
 * unwritten) with why. Non-finite values are the caller's business. */
int ck_forward(const instance *in, const model_fn *m, const float *theta, const float *start, float *out,
               char *why, size_t size)
{
    size_t n = ck_fn_outputs(in, m);
    char label[128];
    ck_fn_label(m, label, sizeof label);
    ck_fill_sentinel(out, n + GUARD_FLOATS);
    if (m->kind == FN_EMBED)
        for (size_t k = 0; k < n; k++)
            out[k] = start ? start[k] : 0.0f;
    if (m->kind == FN_COORD)
        return coordinate_call(in, m, theta, out, label, why, size);
    biaskit_error pe = {0};
    ck_stage(in->c, "%s", label);
    const biaskit_plugin *d = in->c->d;
    biaskit_context ctx = ck_context(in, m->length, m->training);
    int rc;
    switch (m->kind) {
    case FN_TABLE:
    case FN_GRID: rc = d->table(in->inst, theta, m->distances, out, &pe); break;
    case FN_SCALE: rc = d->scale(in->inst, theta, &ctx, m->rows, out, &pe); break;
    case FN_COUNT: rc = d->count_vectors(in->inst, theta, &ctx, m->distances, out, &pe); break;
    case FN_CONTENT: ctx.layer = 0; rc = d->content(in->inst, theta, &ctx, m->x, m->count, out, &pe); break;
    default: rc = d->embed(in->inst, theta, m->positions, m->count, out, &pe); break;
    }
    if (rc != BIASKIT_OK)
        return ck_refusal(label, rc, &pe, why, size);
    return check_written(in, m, label, out, n, 0, why, size);
}

/* forward() that also requires every value to be finite. */
int ck_forward_finite(const instance *in, const model_fn *m, const float *theta, float *out, char *why,
                      size_t size)
{
    if (ck_forward(in, m, theta, NULL, out, why, size))
        return 1;
    long long k = ck_first_non_finite(out, ck_fn_outputs(in, m));
    if (k < 0)
        return 0;
    char label[128], place[96];
    ck_fn_label(m, label, sizeof label);
    ck_output_place(in, m, (size_t)k, place, sizeof place);
    snprintf(why, size, "%s gives %g at %s", label, (double)out[k], place);
    return 1;
}

/* content_backward's dx (from ck_guarded_alloc): nothing written past its count x d_model values, every
 * value finite. 0, or 1 with why. */
static int dx_sound(const instance *in, const model_fn *m, const char *name, char *why, size_t size)
{
    const size_t C = (size_t)(in->geo.d_model > 0 ? in->geo.d_model : 0), n = (size_t)m->count * C;
    if (!ck_guard_intact(m->dx, n)) {
        snprintf(why, size, "%s wrote past the end of dx (%lld tokens x %zu channels)", name, (long long)m->count, C);
        return 1;
    }
    long long k = ck_first_non_finite(m->dx, n);
    if (k >= 0)
        snprintf(why, size, "%s gives %g for dx at token %zu, channel %zu (dx must stay finite)", name,
                 (double)m->dx[k], (size_t)k / C, (size_t)k % C);
    return k >= 0;
}

/* dtheta += d(sum w * out)/dtheta through table_backward, embed_backward, coordinate_backward (w: the
 * weights of phi, then of rscale), scale_backward or content_backward (which also adds into m->dx). */
int ck_backward(const instance *in, const model_fn *m, const float *theta, const float *w, float *dtheta,
                char *why, size_t size)
{
    const char *name = ck_fn_backward_name(m);
    const biaskit_plugin *d = in->c->d;
    biaskit_context ctx = ck_context(in, m->length, m->training);
    biaskit_error pe = {0};
    ck_stage(in->c, "%s", name);
    int rc;
    switch (m->kind) {
    case FN_TABLE:
    case FN_GRID: rc = d->table_backward(in->inst, theta, m->distances, w, dtheta, &pe); break;
    case FN_COORD:
        rc = d->coordinate_backward(in->inst, theta, &ctx, m->distances, m->rows, w, w + m->distances, dtheta, &pe);
        break;
    case FN_SCALE: rc = d->scale_backward(in->inst, theta, &ctx, m->rows, w, dtheta, &pe); break;
    case FN_COUNT: rc = d->count_vectors_backward(in->inst, theta, &ctx, m->distances, w, dtheta, &pe); break;
    case FN_CONTENT:
        ctx.layer = 0; /* the layer whose input x is */
        rc = d->content_backward(in->inst, theta, &ctx, m->x, m->count, w, dtheta, m->dx, &pe);
        break;
    default: rc = d->embed_backward(in->inst, theta, m->positions, m->count, w, dtheta, &pe); break;
    }
    if (rc != BIASKIT_OK)
        return ck_refusal(name, rc, &pe, why, size);
    if (!ck_guard_intact(dtheta, ck_n_params(in))) {
        snprintf(why, size, "%s wrote past the end of dtheta (%lld values)", name, (long long)in->n_params);
        return 1;
    }
    long long k = ck_first_non_finite(dtheta, ck_n_params(in));
    if (k >= 0) {
        char entry[64];
        ck_entry_name(in, k, entry, sizeof entry);
        snprintf(why, size, "%s gives %g for %s", name, (double)dtheta[k], entry);
        return 1;
    }
    return m->kind == FN_CONTENT ? dx_sound(in, m, name, why, size) : 0;
}

void ck_random_fill(float *v, size_t n, rng *r)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (float)ck_rng_sym(r);
}

/* Opens the default instance with parameters from `seed` (random when `random`, else initial); on
 * failure reports `id` as FAIL (the checks of this unit cannot run) and returns 1. */
int ck_open_default(checker *c, const char *id, uint64_t seed, int random, instance *in)
{
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    if (ck_instance_create(c, &c->view, &c->geo, in, why, sizeof why)) {
        ck_item(c, BK_CHECK_FAIL, id, "%s: cannot run: %s", id, why);
        return 1;
    }
    if (random ? ck_random_params(in, seed, why, sizeof why) : ck_init_params(in, NULL, seed, why, sizeof why)) {
        ck_item(c, BK_CHECK_FAIL, id, "%s: %s", id, why);
        ck_instance_close(in);
        return 1;
    }
    return 0;
}

/* Positions for the embedding checks: 0 .. L-1, or `count` random ones below L (with repeats). */
int32_t *ck_embed_positions(int32_t L, int64_t count, int sequential, uint64_t seed)
{
    int32_t *p = malloc((size_t)(count > 0 ? count : 1) * sizeof *p);
    rng r = ck_rng_for(seed, R_POSITIONS, (uint64_t)count);
    for (int64_t n = 0; p && n < count; n++)
        p[n] = sequential ? (int32_t)n : (int32_t)(bk_rng_u64(&r) % (uint64_t)L);
    return p;
}

/* Two calls of `what` into a and b (n values) must agree bit for bit; 0 or 1 with why. */
int ck_same_bits(const float *a, const float *b, size_t n, const char *what, char *why, size_t size)
{
    size_t at;
    if (ck_bits_equal(a, b, n, &at))
        return 0;
    snprintf(why, size, "%s differs between two identical calls at value %zu: %.9g vs %.9g", what, at, (double)a[at],
             (double)b[at]);
    return 1;
}
