#include "bias/content.h"

#include "plugin/contract.h"
#include "plugin/descriptor.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int on_device(const bk_content *c)
{
    return c->be && c->be->on_device;
}

static const bk_term *term_of(const bk_content *c)
{
    return c->set && c->set->content >= 0 ? &c->set->terms[c->set->content] : NULL;
}

int bk_content_active(const bk_content *c)
{
    return term_of(c) != NULL;
}

void bk_content_init(bk_content *c, const bk_term_set *set)
{
    memset(c, 0, sizeof *c);
    c->set = set;
    c->H = set->geometry.n_heads;
    c->C = set->geometry.d_model;
}

/* The positions of slot `slot` in the backend's memory. */
static float *slot_of(const bk_content *c, int slot)
{
    return c->pos + (size_t)slot * (size_t)c->B * c->T * c->H;
}

/* On the CPU the backend pointers are the host ones (freed once, as host memory). */
static void pos_free(bk_content *c)
{
    if (on_device(c))
        c->be->release(c->be, c->pos);
    free(c->pos_h);
    c->pos = c->pos_h = NULL;
    c->capacity = 0;
}

static void layer_free(bk_content *c)
{
    if (on_device(c)) {
        c->be->release(c->be, c->dpos);
        c->be->release(c->be, c->dx_dev);
    }
    free(c->dpos_h), free(c->steps_h), free(c->x_h), free(c->dx_h);
    c->dpos = c->dpos_h = c->steps_h = c->x_h = c->dx_h = c->dx_dev = NULL;
    c->tokens_capacity = 0;
}

void bk_content_free(bk_content *c)
{
    if (!c || !c->set)
        return;
    pos_free(c);
    layer_free(c);
    memset(c, 0, sizeof *c);
}

int bk_content_set_backend(bk_content *c, bk_backend *be, bk_error *err)
{
    (void)err;
    if (c->be == be)
        return BK_OK;
    pos_free(c);
    layer_free(c); /* reallocated in the new memory by the next forward */
    c->be = be;
    return BK_OK;
}

/* n floats in the backend's memory (*dev) and, on a device, their host twin (*host; else *host = *dev). */
static int pair_alloc(bk_content *c, float **host, float **dev, size_t n, bk_error *err)
{
    if (!(*host = calloc(n ? n : 1, sizeof(float))))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for %zu floats of the content positions", n);
    if (!on_device(c)) {
        *dev = *host;
        return BK_OK;
    }
    return c->be->alloc(c->be, (void **)dev, n * sizeof(float), err);
}

static int reserve(bk_content *c, int B, int T, int slots, bk_error *err)
{
    const size_t tokens = (size_t)B * (size_t)T, H = (size_t)c->H, C = (size_t)c->C;
    const size_t need = (size_t)slots * tokens * H;
    int rc = BK_OK;
    if (need > c->capacity) {
        pos_free(c);
        if (on_device(c)) {
            rc = c->be->alloc(c->be, (void **)&c->pos, need * sizeof(float), err);
            if (!rc && !(c->pos_h = calloc(tokens * H, sizeof(float))))
                rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for %zu floats of the content positions", tokens * H);
        } else if (!(c->pos = c->pos_h = calloc(need, sizeof(float)))) {
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for %zu floats of the content positions", need);
        }
        if (rc) {
            pos_free(c);
            return bk_error_prefix(err, "content positions of %d x %d tokens: ", B, T);
        }
        c->capacity = need;
    }
    if (tokens > c->tokens_capacity) {
        layer_free(c);
        if (!(c->steps_h = calloc(tokens * H, sizeof(float))))
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the steps of %zu tokens", tokens);
        if (!rc)
            rc = pair_alloc(c, &c->dpos_h, &c->dpos, tokens * H, err);
        if (!rc && on_device(c)) {
            if (!(c->x_h = calloc(tokens * C, sizeof(float))) || !(c->dx_h = calloc(tokens * C, sizeof(float))))
                rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the layer input of %zu tokens", tokens);
            if (!rc)
                rc = c->be->alloc(c->be, (void **)&c->dx_dev, tokens * C * sizeof(float), err);
        }
        if (rc) {
            layer_free(c);
            return bk_error_prefix(err, "content positions of %d x %d tokens: ", B, T);
        }
        c->tokens_capacity = tokens;
    }
    c->B = B, c->T = T;
    return BK_OK;
}

/* x on the host: the array itself on the CPU, else a copy. */
static int host_x(bk_content *c, const float *x, const float **out, bk_error *err)
{
    if (!on_device(c)) {
        *out = x;
        return BK_OK;
    }
    int rc = c->be->download(c->be, c->x_h, x, (size_t)c->B * c->T * c->C * sizeof(float), err);
    if (rc)
        return bk_error_prefix(err, "copying the layer input to the host for the content term: ");
    *out = c->x_h;
    return BK_OK;
}

int bk_content_forward(bk_content *c, int layer, int slot, int slots, const float *x, int B, int T, int training,
                       int64_t step, int check, bk_error *err)
{
    const bk_term *t = term_of(c);
    if (!t)
        return BK_OK;
    if (slot < 0 || slot >= slots)
        return bk_fail(err, BK_ERR_INVALID, "content positions: slot %d of %d", slot, slots);
    int rc = reserve(c, B, T, slots, err);
    const float *xh = NULL;
    if (rc || (rc = host_x(c, x, &xh, err)))
        return rc;
    const int64_t n = (int64_t)B * T;
    const int32_t H = c->H;
    biaskit_context ctx = bk_term_context(c->set, layer, T, training);
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(t, "content()", layer, step);
    rc = BK_DESCRIPTOR_FN(t->plugin->desc, content)(t->instance, bk_term_theta(t, layer), &ctx, xh, n, c->steps_h,
                                                    &pe);
    bk_plugin_call_leave();
    if (rc != BIASKIT_OK)
        return bk_term_plugin_failed(err, t, "content()", layer, step, &pe);
    float *P = on_device(c) ? c->pos_h : slot_of(c, slot);
    for (int b = 0; b < B; b++)
        for (int32_t h = 0; h < H; h++) {
            double sum = 0.0;
            float *row = P + ((size_t)b * H + h) * T;
            for (int i = 0; i < T; i++) {
                const float a = c->steps_h[((size_t)b * T + i) * H + h];
                if (check && !bk_contract_step_ok(a)) {
                    char where[64];
                    return bk_fail(err, BK_ERR_PLUGIN,
                                   "term '%s' (plugin %s, %s)%s: content() gave the step %g at batch row %d, token "
                                   "%d, head %d: expected a finite value >= 0 (the position may not go back)",
                                   t->label, t->plugin->desc->name, t->plugin->path,
                                   bk_term_where(layer, step, where, sizeof where), (double)a, b, i, (int)h);
                }
                sum += a;
                row[i] = (float)sum;
            }
        }
    if (on_device(c) && (rc = c->be->upload(c->be, slot_of(c, slot), c->pos_h, (size_t)n * H * sizeof(float), err)))
        return bk_error_prefix(err, "copying the content positions to the device: ");
    return BK_OK;
}

void bk_content_attention(const bk_content *c, int slot, bk_attention_bias *ab)
{
    if (!term_of(c) || !c->pos)
        return;
    ab->cpos = slot_of(c, slot);
}

int bk_content_backward_begin(bk_content *c, bk_attention_bias *ab, bk_error *err)
{
    if (!term_of(c) || !c->dpos)
        return BK_OK;
    const size_t n = (size_t)c->B * c->T * c->H;
    if (on_device(c)) {
        int rc = c->be->zero(c->be, c->dpos, n * sizeof(float), err);
        if (rc)
            return bk_error_prefix(err, "zeroing the content-position gradient: ");
    } else {
        memset(c->dpos, 0, n * sizeof(float));
    }
    ab->dcpos = c->dpos;
    return BK_OK;
}

int bk_content_backward(bk_content *c, int layer, const float *x, float *dx, float *const *dtheta, int training,
                        int64_t step, bk_error *err)
{
    const bk_term *t = term_of(c);
    if (!t || !BK_DESCRIPTOR_FN(t->plugin->desc, content_backward))
        return BK_OK;
    const int B = c->B, T = c->T;
    const int32_t H = c->H;
    const size_t n = (size_t)B * T;
    int rc = BK_OK;
    if (on_device(c) && (rc = c->be->download(c->be, c->dpos_h, c->dpos, n * H * sizeof(float), err)))
        return bk_error_prefix(err, "copying the content-position gradient to the host: ");
    /* dL/da(t) = sum over t' >= t of dL/dP(t'), per (b, h), in double from the end of the sequence */
    for (int b = 0; b < B; b++)
        for (int32_t h = 0; h < H; h++) {
            const float *dP = c->dpos_h + ((size_t)b * H + h) * T;
            double sum = 0.0;
            for (int i = T - 1; i >= 0; i--) {
                sum += dP[i];
                c->steps_h[((size_t)b * T + i) * H + h] = (float)sum;
            }
        }
    const float *xh = NULL;
    if ((rc = host_x(c, x, &xh, err)))
        return rc;
    float *dxh = dx;
    if (on_device(c)) {
        dxh = c->dx_h;
        memset(dxh, 0, n * (size_t)c->C * sizeof(float));
    }
    float *dth = t->n_params ? dtheta[c->set->content] + (size_t)(t->n_copies > 1 ? layer : 0) * t->n_params : NULL;
    biaskit_context ctx = bk_term_context(c->set, layer, T, training);
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(t, "content_backward()", layer, step);
    rc = BK_DESCRIPTOR_FN(t->plugin->desc, content_backward)(t->instance, bk_term_theta(t, layer), &ctx, xh,
                                                             (int64_t)n, c->steps_h, dth, dxh, &pe);
    bk_plugin_call_leave();
    if (rc != BIASKIT_OK)
        return bk_term_plugin_failed(err, t, "content_backward()", layer, step, &pe);
    if (on_device(c)) {
        const size_t bytes = n * (size_t)c->C * sizeof(float);
        if ((rc = c->be->upload(c->be, c->dx_dev, dxh, bytes, err)) ||
            (rc = c->be->residual_forward(c->be, dx, dx, c->dx_dev, n * (size_t)c->C, err)))
            return bk_error_prefix(err, "adding the content term's input gradient on the device: ");
    }
    return BK_OK;
}
