#include "bias/query.h"

#include "plugin/contract.h"

#include "model/bias_math.h"
#include "plugin/descriptor.h"
#include "plugin/services.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static int on_device(const bk_query *q)
{
    return q->be && q->be->on_device;
}

static const bk_term *coord_term(const bk_query *q)
{
    return q->set->coordinate >= 0 ? &q->set->terms[q->set->coordinate] : NULL;
}

static const bk_term *scale_term(const bk_query *q)
{
    return q->set->scale >= 0 ? &q->set->terms[q->set->scale] : NULL;
}

/* t when it acts in layer `layer` ([[term]] layers), else NULL. */
static const bk_term *in_layer(const bk_term *t, int layer)
{
    return t && bk_term_on_layer(t, layer) ? t : NULL;
}

static const bk_term *count_term(const bk_query *q)
{
    return q->set->count >= 0 ? &q->set->terms[q->set->count] : NULL;
}

static int copies(const bk_term *t)
{
    return t ? t->n_copies : 0;
}

int bk_query_active(const bk_query *q)
{
    return q->set && (q->set->coordinate >= 0 || q->set->mask >= 0 || q->set->scale >= 0 || q->set->count >= 0);
}

__attribute__((format(printf, 6, 7))) static int bad_value(bk_error *err, const bk_term *t, const char *hook, int layer,
                                                           int64_t step, const char *fmt, ...)
{
    char where[64], what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return bk_fail(err, BK_ERR_PLUGIN, "term '%s' (plugin %s, %s)%s: %s %s", t->label, t->plugin->desc->name,
                   t->plugin->path, bk_term_where(layer, step, where, sizeof where), hook, what);
}

/* The counting term's layout: points in 2 .. BK_CONTRACT_POINTS_MAX, a finite pos_scale (plugin/contract.h). */
static int count_init(bk_query *q, bk_error *err)
{
    const bk_term *t = count_term(q);
    if (!t)
        return BK_OK;
    const int32_t hd = q->set->geometry.d_head;
    biaskit_count out = {.struct_size = sizeof out, .points = 0, .pos_scale = 1.0f / sqrtf((float)hd)};
    biaskit_context ctx = bk_term_context(q->set, -1, q->set->geometry.train_length, 1);
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(t, "count()", -1, 0);
    int rc = BK_DESCRIPTOR_FN(t->plugin->desc, count)(t->instance, &ctx, &out, &pe);
    bk_plugin_call_leave();
    if (rc != BIASKIT_OK)
        return bk_term_plugin_failed(err, t, "count()", -1, 0, &pe);
    char why[320];
    if (bk_contract_count(&out, why, sizeof why))
        return bad_value(err, t, "count()", -1, 0, "gave %s", why);
    q->count = out;
    return BK_OK;
}

int bk_query_init(bk_query *q, const bk_term_set *set, int n_layers, bk_error *err)
{
    memset(q, 0, sizeof *q);
    q->set = set;
    q->n_layers = n_layers;
    q->n_heads = set->geometry.n_heads;
    int rc = count_init(q, err);
    const bk_term *c = coord_term(q);
    if (rc || !c)
        return rc;
    bk_plugin_call_enter(c, "coordinate_points()", -1, 0);
    int32_t points = BK_DESCRIPTOR_FN(c->plugin->desc, coordinate_points)(c->instance);
    bk_plugin_call_leave();
    char why[160];
    if (bk_contract_points(points, why, sizeof why))
        return bk_fail(err, BK_ERR_PLUGIN, "term '%s' (plugin %s, %s): %s", c->label, c->plugin->desc->name,
                       c->plugin->path, why);
    q->points = points;
    return BK_OK;
}

static void release(bk_query *q, float *p)
{
    if (p && on_device(q))
        q->be->release(q->be, p);
}

static void arrays_free(bk_query *q)
{
    release(q, q->grid), release(q, q->phi), release(q, q->rscale), release(q, q->scale);
    release(q, q->dgrid), release(q, q->dphi), release(q, q->drscale), release(q, q->dscale);
    release(q, q->cope), release(q, q->dcope);
    free(q->grid_h), free(q->phi_h), free(q->rscale_h), free(q->scale_h);
    free(q->dgrid_h), free(q->dphi_h), free(q->drscale_h), free(q->dscale_h);
    free(q->cope_h), free(q->dcope_h);
    q->grid = q->phi = q->rscale = q->scale = NULL;
    q->dgrid = q->dphi = q->drscale = q->dscale = NULL;
    q->grid_h = q->phi_h = q->rscale_h = q->scale_h = NULL;
    q->dgrid_h = q->dphi_h = q->drscale_h = q->dscale_h = NULL;
    q->cope = q->dcope = q->cope_h = q->dcope_h = NULL;
    q->capacity = 0;
}

void bk_query_free(bk_query *q)
{
    if (!q || !q->set)
        return;
    arrays_free(q);
    memset(q, 0, sizeof *q);
}

int bk_query_set_backend(bk_query *q, bk_backend *be, bk_error *err)
{
    if (q->be == be)
        return BK_OK;
    const bk_term *t = q->set ? count_term(q) : NULL;
    if (t && be && be->attention == BK_ATTENTION_FUSED)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "term '%s' (plugin %s): counted positions (CoPE, BIASKIT_CAP_COUNT) are not computed by the "
                       "fused attention of the %s backend: use [run] attention = \"materialized\"%s",
                       t->label, t->plugin->desc->name, be->name,
                       be->on_device ? " or device = \"cpu\"" : " (or \"auto\")");
    arrays_free(q); /* reallocated in the new memory by the next forward */
    q->be = be;
    return BK_OK;
}

/* One array of n floats on the host (*host) and, on a device, its twin in the backend's memory (*dev;
 * else *dev = *host). */
static int pair_alloc(bk_query *q, float **host, float **dev, size_t n, bk_error *err)
{
    if (!n)
        return BK_OK;
    if (!(*host = calloc(n, sizeof(float))))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for %zu floats of the positional terms", n);
    if (!on_device(q)) {
        *dev = *host;
        return BK_OK;
    }
    return q->be->alloc(q->be, (void **)dev, n * sizeof(float), err);
}

static int reserve(bk_query *q, int32_t distances, bk_error *err)
{
    if (distances <= q->capacity)
        return BK_OK;
    arrays_free(q);
    /* on the CPU the device pointer is the host one: only one free of each (arrays_free frees the host side) */
    const size_t H = (size_t)q->n_heads, D = (size_t)distances, P = (size_t)q->points;
    const bk_term *c = coord_term(q), *s = scale_term(q);
    int rc = BK_OK;
    if (c) {
        rc = pair_alloc(q, &q->grid_h, &q->grid, (size_t)copies(c) * H * P, err);
        if (!rc)
            rc = pair_alloc(q, &q->phi_h, &q->phi, (size_t)copies(c) * D, err);
        if (!rc)
            rc = pair_alloc(q, &q->rscale_h, &q->rscale, (size_t)copies(c) * D, err);
        if (!rc && c->n_params)
            rc = pair_alloc(q, &q->dgrid_h, &q->dgrid, H * P, err);
        if (!rc && c->n_params)
            rc = pair_alloc(q, &q->dphi_h, &q->dphi, D, err);
        if (!rc && c->n_params)
            rc = pair_alloc(q, &q->drscale_h, &q->drscale, D, err);
    }
    if (!rc && s) {
        rc = pair_alloc(q, &q->scale_h, &q->scale, (size_t)copies(s) * H * D, err);
        if (!rc && s->n_params)
            rc = pair_alloc(q, &q->dscale_h, &q->dscale, H * D, err);
    }
    const bk_term *n = count_term(q);
    const size_t E = n ? (size_t)q->count.points * (size_t)q->set->geometry.d_head : 0;
    if (!rc && n) {
        rc = pair_alloc(q, &q->cope_h, &q->cope, (size_t)copies(n) * E, err);
        if (!rc && n->n_params)
            rc = pair_alloc(q, &q->dcope_h, &q->dcope, E, err);
    }
    if (rc) {
        arrays_free(q);
        return bk_error_prefix(err, "the coordinate and scale arrays of %d distances on the %s backend: ",
                               (int)distances, q->be ? q->be->name : "cpu");
    }
    q->capacity = distances;
    return BK_OK;
}


static int coordinate_forward(bk_query *q, int copy, int32_t D, const biaskit_context *ctx, int64_t step, int check,
                              bk_error *err)
{
    const bk_term *c = coord_term(q);
    const biaskit_plugin *d = c->plugin->desc;
    const int layer = ctx->layer;
    const size_t H = (size_t)q->n_heads, P = (size_t)q->points;
    float *grid = q->grid_h + (size_t)copy * H * P, *phi = q->phi_h + (size_t)copy * (size_t)D;
    float *rscale = q->rscale_h + (size_t)copy * (size_t)D;
    const float *theta = bk_term_theta(c, copy);
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(c, "table()", layer, step);
    int rc = d->table(c->instance, theta, q->points, grid, &pe);
    bk_plugin_call_leave();
    if (rc != BIASKIT_OK)
        return bk_term_plugin_failed(err, c, "table()", layer, step, &pe);
    bk_plugin_call_enter(c, "coordinate()", layer, step);
    rc = BK_DESCRIPTOR_FN(d, coordinate)(c->instance, theta, ctx, D, D, phi, rscale, &pe);
    bk_plugin_call_leave();
    if (rc != BIASKIT_OK)
        return bk_term_plugin_failed(err, c, "coordinate()", layer, step, &pe);
    if (!check)
        return BK_OK;
    int64_t bad = bk_contract_first_nonfinite(grid, H * P);
    if (bad >= 0)
        return bad_value(err, c, "table()", layer, step, "gave a non-finite value %g at head %d, grid point %d of %d",
                         (double)grid[bad], (int)(bad / (int64_t)P), (int)(bad % (int64_t)P), (int)P);
    char why[320];
    const int broken = bk_contract_coordinate(phi, D, rscale, D, NULL, NULL, why, sizeof why);
    if (broken)
        return bad_value(err, c, "coordinate()", layer, step, "%s%s",
                         broken == BK_CONTRACT_OUT_OF_RANGE ? "puts the coordinate outside [0, 1]: " : "gave ", why);
    return BK_OK;
}

static int scale_forward(bk_query *q, int copy, int32_t D, const biaskit_context *ctx, int64_t step, int check,
                         bk_error *err)
{
    const bk_term *s = scale_term(q);
    float *scale = q->scale_h + (size_t)copy * (size_t)q->n_heads * (size_t)D;
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(s, "scale()", ctx->layer, step);
    int rc = BK_DESCRIPTOR_FN(s->plugin->desc, scale)(s->instance, bk_term_theta(s, copy), ctx, D, scale, &pe);
    bk_plugin_call_leave();
    if (rc != BIASKIT_OK)
        return bk_term_plugin_failed(err, s, "scale()", ctx->layer, step, &pe);
    int64_t bad = check ? bk_contract_first_nonfinite(scale, (size_t)q->n_heads * (size_t)D) : -1;
    if (bad >= 0)
        return bad_value(err, s, "scale()", ctx->layer, step,
                         "gave a logit scale that is not finite: %g at head %d, query %d", (double)scale[bad],
                         (int)(bad / D), (int)(bad % D));
    return BK_OK;
}

static int count_forward(bk_query *q, int copy, const biaskit_context *ctx, int64_t step, int check, bk_error *err)
{
    const bk_term *t = count_term(q);
    const int32_t P = q->count.points, hd = q->set->geometry.d_head;
    float *E = q->cope_h + (size_t)copy * (size_t)P * (size_t)hd;
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(t, "count_vectors()", ctx->layer, step);
    int rc = BK_DESCRIPTOR_FN(t->plugin->desc, count_vectors)(t->instance, bk_term_theta(t, copy), ctx, P, E, &pe);
    bk_plugin_call_leave();
    if (rc != BIASKIT_OK)
        return bk_term_plugin_failed(err, t, "count_vectors()", ctx->layer, step, &pe);
    int64_t bad = check ? bk_contract_first_nonfinite(E, (size_t)P * (size_t)hd) : -1;
    if (bad >= 0)
        return bad_value(err, t, "count_vectors()", ctx->layer, step,
                         "gave a position vector that is not finite: %g at vector %d, component %d", (double)E[bad],
                         (int)(bad / hd), (int)(bad % hd));
    return BK_OK;
}

static int mask_forward(bk_query *q, const biaskit_context *ctx, int64_t step, bk_error *err)
{
    memset(&q->mask, 0, sizeof q->mask);
    if (q->set->mask < 0)
        return BK_OK;
    const bk_term *t = &q->set->terms[q->set->mask];
    biaskit_mask m = {.struct_size = sizeof m};
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(t, "mask()", -1, step);
    int rc = BK_DESCRIPTOR_FN(t->plugin->desc, mask)(t->instance, ctx, &m, &pe);
    bk_plugin_call_leave();
    if (rc != BIASKIT_OK)
        return bk_term_plugin_failed(err, t, "mask()", -1, step, &pe);
    char why[320];
    if (bk_contract_mask(&m, why, sizeof why))
        return bad_value(err, t, "mask()", -1, step, "gave %s", why);
    /* the cap may first appear at another length than the training length checked at creation */
    if ((rc = bk_terms_refuse_idle_cap(q->set, m.distance_cap, NULL, err)))
        return rc;
    q->mask = m;
    return BK_OK;
}

static int upload(bk_query *q, float *dev, const float *host, size_t n, bk_error *err)
{
    return on_device(q) && n ? q->be->upload(q->be, dev, host, n * sizeof(float), err) : BK_OK;
}

int bk_query_forward(bk_query *q, int32_t distances, int training, int64_t step, int check, bk_error *err)
{
    if (!bk_query_active(q))
        return BK_OK;
    int rc = reserve(q, distances, err);
    if (rc)
        return rc;
    q->distances = distances;
    biaskit_context ctx = bk_term_context(q->set, -1, distances, training);
    if ((rc = mask_forward(q, &ctx, step, err)))
        return rc;
    const bk_term *c = coord_term(q), *s = scale_term(q);
    for (int k = 0; k < copies(c) && !rc; k++) {
        ctx.layer = c->n_copies > 1 ? k : -1;
        rc = coordinate_forward(q, k, distances, &ctx, step, check, err);
    }
    for (int k = 0; k < copies(s) && !rc; k++) {
        ctx.layer = s->n_copies > 1 ? k : -1;
        rc = scale_forward(q, k, distances, &ctx, step, check, err);
    }
    const bk_term *n = count_term(q);
    for (int k = 0; k < copies(n) && !rc; k++) {
        ctx.layer = n->n_copies > 1 ? k : -1;
        rc = count_forward(q, k, &ctx, step, check, err);
    }
    if (!rc && n)
        rc = upload(q, q->cope, q->cope_h,
                    (size_t)copies(n) * (size_t)q->count.points * (size_t)q->set->geometry.d_head, err);
    const size_t H = (size_t)q->n_heads, D = (size_t)distances;
    if (!rc && c) {
        /* the copies are packed with the capacity's stride: upload per copy */
        rc = upload(q, q->grid, q->grid_h, (size_t)copies(c) * H * (size_t)q->points, err);
        for (int k = 0; k < copies(c) && !rc; k++) {
            rc = upload(q, q->phi + (size_t)k * D, q->phi_h + (size_t)k * D, D, err);
            if (!rc)
                rc = upload(q, q->rscale + (size_t)k * D, q->rscale_h + (size_t)k * D, D, err);
        }
    }
    if (!rc && s)
        rc = upload(q, q->scale, q->scale_h, (size_t)copies(s) * H * D, err);
    return rc;
}

void bk_query_attention(const bk_query *q, int layer, bk_attention_bias *ab)
{
    if (!bk_query_active(q))
        return;
    const size_t H = (size_t)q->n_heads, D = (size_t)q->distances;
    const bk_term *c = in_layer(coord_term(q), layer), *s = in_layer(scale_term(q), layer);
    if (c) {
        const size_t k = c->n_copies > 1 ? (size_t)layer : 0;
        ab->grid = q->grid + k * H * (size_t)q->points;
        ab->points = q->points;
        ab->phi = q->phi + k * D;
        ab->rscale = q->rscale + k * D;
    }
    if (s)
        ab->scale = q->scale + (s->n_copies > 1 ? (size_t)layer : 0) * H * D;
    if (bk_mask_on_layer(q->set, layer)) {
        ab->window = q->mask.window;
        ab->sinks = q->mask.sinks;
    }
    const bk_term *n = in_layer(count_term(q), layer);
    if (n) {
        const size_t E = (size_t)q->count.points * (size_t)q->set->geometry.d_head;
        ab->cope = q->cope + (n->n_copies > 1 ? (size_t)layer : 0) * E;
        ab->cope_points = q->count.points;
        ab->cope_scale = q->count.pos_scale;
    }
}

static int zero(bk_query *q, float *dev, float *host, size_t n, bk_error *err)
{
    if (!dev)
        return BK_OK;
    if (on_device(q))
        return q->be->zero(q->be, dev, n * sizeof(float), err);
    memset(host, 0, n * sizeof(float));
    return BK_OK;
}

int bk_query_backward_begin(bk_query *q, int layer, bk_attention_bias *ab, bk_error *err)
{
    (void)layer;
    if (!bk_query_active(q))
        return BK_OK;
    const size_t H = (size_t)q->n_heads, D = (size_t)q->distances;
    int rc = zero(q, q->dgrid, q->dgrid_h, H * (size_t)q->points, err);
    if (!rc)
        rc = zero(q, q->dphi, q->dphi_h, D, err);
    if (!rc)
        rc = zero(q, q->drscale, q->drscale_h, D, err);
    if (!rc)
        rc = zero(q, q->dscale, q->dscale_h, H * D, err);
    if (!rc)
        rc = zero(q, q->dcope, q->dcope_h, (size_t)q->count.points * (size_t)q->set->geometry.d_head, err);
    if (rc)
        return bk_error_prefix(err, "zeroing the coordinate, scale and position-vector gradients: ");
    ab->dgrid = q->dgrid, ab->dphi = q->dphi, ab->drscale = q->drscale, ab->dscale = q->dscale;
    ab->dcope = q->dcope;
    return BK_OK;
}

static int download(bk_query *q, float *host, const float *dev, size_t n, bk_error *err)
{
    return on_device(q) && n ? q->be->download(q->be, host, dev, n * sizeof(float), err) : BK_OK;
}

int bk_query_backward(bk_query *q, int layer, float *const *dtheta, int training, int64_t step, bk_error *err)
{
    if (!bk_query_active(q))
        return BK_OK;
    const size_t H = (size_t)q->n_heads;
    const int32_t D = q->distances;
    const bk_term *c = in_layer(coord_term(q), layer), *s = in_layer(scale_term(q), layer);
    biaskit_context ctx = bk_term_context(q->set, -1, D, training);
    biaskit_error pe = {0, ""};
    int rc = BK_OK;
    if (c && c->n_params) {
        const int copy = c->n_copies > 1 ? layer : 0;
        const biaskit_plugin *d = c->plugin->desc;
        float *dth = dtheta[q->set->coordinate] + (size_t)copy * (size_t)c->n_params;
        ctx.layer = c->n_copies > 1 ? layer : -1;
        if ((rc = download(q, q->dgrid_h, q->dgrid, H * (size_t)q->points, err)) ||
            (rc = download(q, q->dphi_h, q->dphi, (size_t)D, err)) ||
            (rc = download(q, q->drscale_h, q->drscale, (size_t)D, err)))
            return bk_error_prefix(err, "copying the coordinate gradients to the host: ");
        bk_plugin_call_enter(c, "table_backward()", ctx.layer, step);
        rc = d->table_backward(c->instance, bk_term_theta(c, copy), q->points, q->dgrid_h, dth, &pe);
        bk_plugin_call_leave();
        if (rc != BIASKIT_OK)
            return bk_term_plugin_failed(err, c, "table_backward()", ctx.layer, step, &pe);
        bk_plugin_call_enter(c, "coordinate_backward()", ctx.layer, step);
        rc = BK_DESCRIPTOR_FN(d, coordinate_backward)(c->instance, bk_term_theta(c, copy), &ctx, D, D, q->dphi_h,
                                                      q->drscale_h, dth, &pe);
        bk_plugin_call_leave();
        if (rc != BIASKIT_OK)
            return bk_term_plugin_failed(err, c, "coordinate_backward()", ctx.layer, step, &pe);
    }
    if (s && s->n_params) {
        const int copy = s->n_copies > 1 ? layer : 0;
        float *dth = dtheta[q->set->scale] + (size_t)copy * (size_t)s->n_params;
        ctx.layer = s->n_copies > 1 ? layer : -1;
        if ((rc = download(q, q->dscale_h, q->dscale, H * (size_t)D, err)))
            return bk_error_prefix(err, "copying the scale gradient to the host: ");
        bk_plugin_call_enter(s, "scale_backward()", ctx.layer, step);
        rc = BK_DESCRIPTOR_FN(s->plugin->desc, scale_backward)(s->instance, bk_term_theta(s, copy), &ctx, D,
                                                                q->dscale_h, dth, &pe);
        bk_plugin_call_leave();
        if (rc != BIASKIT_OK)
            return bk_term_plugin_failed(err, s, "scale_backward()", ctx.layer, step, &pe);
    }
    const bk_term *n = in_layer(count_term(q), layer);
    if (n && n->n_params && BK_DESCRIPTOR_FN(n->plugin->desc, count_vectors_backward)) {
        const int copy = n->n_copies > 1 ? layer : 0;
        const int32_t P = q->count.points;
        float *dth = dtheta[q->set->count] + (size_t)copy * (size_t)n->n_params;
        ctx.layer = n->n_copies > 1 ? layer : -1;
        if ((rc = download(q, q->dcope_h, q->dcope, (size_t)P * (size_t)q->set->geometry.d_head, err)))
            return bk_error_prefix(err, "copying the position vectors' gradient to the host: ");
        bk_plugin_call_enter(n, "count_vectors_backward()", ctx.layer, step);
        rc = BK_DESCRIPTOR_FN(n->plugin->desc, count_vectors_backward)(n->instance, bk_term_theta(n, copy), &ctx, P,
                                                                        q->dcope_h, dth, &pe);
        bk_plugin_call_leave();
        if (rc != BIASKIT_OK)
            return bk_term_plugin_failed(err, n, "count_vectors_backward()", ctx.layer, step, &pe);
    }
    return BK_OK;
}
