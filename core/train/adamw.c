#include "train/adamw.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The functions a group's arithmetic runs through: its backend's, or for host memory the CPU
 * backend's loops (the reference every backend reproduces). */
static bk_backend *ops_of(const bk_param_group *g)
{
    return g->be ? g->be : bk_backend_cpu();
}

/* 1 when the group's memory is not host memory (mirrors are separate arrays). */
static int on_device(const bk_param_group *g)
{
    return g->be && g->be->on_device;
}

static void release_group(bk_param_group *g)
{
    if (g->be) {
        if (g->m)
            g->be->release(g->be, g->m);
        if (g->v)
            g->be->release(g->be, g->v);
    } else
        free(g->m), free(g->v);
    if (on_device(g)) {
        free(g->m_host), free(g->v_host);
        if (g->owns_param_host)
            free(g->param_host);
    }
    g->m = g->v = g->m_host = g->v_host = g->param_host = NULL;
    free(g->segments);
    g->segments = NULL;
    g->n_segments = 0;
}

int bk_adamw_add_on(bk_adamw *opt, bk_backend *be, const char *name, float *param, float *grad, float *param_host,
                    size_t n, int decay, bk_error *err)
{
    if (opt->n_groups == opt->capacity) {
        int cap = opt->capacity ? 2 * opt->capacity : 32;
        bk_param_group *g = realloc(opt->groups, (size_t)cap * sizeof *g);
        if (!g)
            return bk_fail(err, BK_ERR_NOMEM, "out of memory for optimizer groups");
        opt->groups = g;
        opt->capacity = cap;
    }
    bk_param_group *g = &opt->groups[opt->n_groups];
    memset(g, 0, sizeof *g);
    bk_copy_text(g->name, sizeof g->name, name);
    g->be = be;
    g->param = param, g->grad = grad, g->n = n, g->decay = decay;
    const size_t bytes = (n ? n : 1) * sizeof(float);
    if (!be) {
        g->m = calloc(n ? n : 1, sizeof(float));
        g->v = calloc(n ? n : 1, sizeof(float));
        if (!g->m || !g->v) {
            release_group(g);
            return bk_fail(err, BK_ERR_NOMEM, "out of memory for the moments of '%s' (%zu values)", name, n);
        }
    } else {
        int rc = be->alloc(be, (void **)&g->m, bytes, err);
        if (!rc)
            rc = be->alloc(be, (void **)&g->v, bytes, err);
        if (rc) {
            release_group(g);
            return bk_error_prefix(err, "the AdamW moments of '%s' (%zu values) on the %s backend: ", name, n,
                                   be->name);
        }
    }
    if (on_device(g)) {
        g->m_host = calloc(n ? n : 1, sizeof(float));
        g->v_host = calloc(n ? n : 1, sizeof(float));
        g->param_host = param_host;
        if (!param_host) {
            g->param_host = calloc(n ? n : 1, sizeof(float));
            g->owns_param_host = 1;
        }
        if (!g->m_host || !g->v_host || !g->param_host) {
            release_group(g);
            return bk_fail(err, BK_ERR_NOMEM, "out of memory for the host copies of '%s' (%zu values)", name, n);
        }
    } else
        g->param_host = param, g->m_host = g->m, g->v_host = g->v;
    opt->n_groups++;
    return BK_OK;
}

int bk_adamw_add(bk_adamw *opt, const char *name, float *param, float *grad, size_t n, int decay, bk_error *err)
{
    return bk_adamw_add_on(opt, NULL, name, param, grad, NULL, n, decay, err);
}

int bk_adamw_set_segments(bk_adamw *opt, int group, const bk_adamw_segment *segments, int n, bk_error *err)
{
    if (group < 0 || group >= opt->n_groups)
        return bk_fail(err, BK_ERR_INVALID, "optimizer group %d of %d", group, opt->n_groups);
    bk_param_group *g = &opt->groups[group];
    if (g->be && g->be->on_device)
        return bk_fail(err, BK_ERR_INVALID, "optimizer group '%s': segments are for host groups", g->name);
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        const bk_adamw_segment *s = &segments[i];
        if (s->offset != at || s->count == 0 || s->count > g->n - at)
            return bk_fail(err, BK_ERR_INVALID,
                           "optimizer group '%s' (%zu values): segment %d covers [%zu, %zu); expected one starting at "
                           "%zu inside the group", g->name, g->n, i, s->offset, s->offset + s->count, at);
        if (!isfinite(s->lr_scale) || s->lr_scale < 0.0 || !isfinite(s->weight_decay))
            return bk_fail(err, BK_ERR_INVALID,
                           "optimizer group '%s': segment %d has lr_scale %g and weight_decay %g; expected a finite "
                           "lr_scale >= 0 and a finite weight_decay", g->name, i, s->lr_scale, s->weight_decay);
        at += s->count;
    }
    if (at != g->n)
        return bk_fail(err, BK_ERR_INVALID, "optimizer group '%s': its segments cover %zu of its %zu values", g->name,
                       at, g->n);
    bk_adamw_segment *merged = malloc((size_t)(n > 0 ? n : 1) * sizeof *merged);
    if (!merged)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the segments of '%s'", g->name);
    int m = 0;
    for (int i = 0; i < n; i++) {
        bk_adamw_segment s = segments[i];
        if (s.weight_decay < 0.0)
            s.weight_decay = -1.0; /* one marker for the group's rule, so that runs of it merge */
        if (m && merged[m - 1].lr_scale == s.lr_scale && merged[m - 1].weight_decay == s.weight_decay)
            merged[m - 1].count += s.count;
        else
            merged[m++] = s;
    }
    free(g->segments);
    g->segments = NULL;
    g->n_segments = 0;
    if (m == 1 && merged[0].lr_scale == 1.0 && merged[0].weight_decay < 0.0) {
        free(merged); /* the plain group */
        return BK_OK;
    }
    g->segments = merged;
    g->n_segments = m;
    return BK_OK;
}

void bk_adamw_free(bk_adamw *opt)
{
    for (int i = 0; i < opt->n_groups; i++)
        release_group(&opt->groups[i]);
    free(opt->groups);
    memset(opt, 0, sizeof *opt);
}

/* Each group's squared norm is summed by its backend in chunks of BK_NORM_CHUNK values, then the chunk
 * sums in index order (model/backend.h: the CPU's order, so the grouping of the additions depends on
 * neither the thread count, nor the order threads finish in, nor the device), and the groups' sums are
 * added in group order here: clipping — and with it every weight — is bit-identical however many
 * threads run and whichever backend holds a tensor. */
int bk_adamw_grad_norm(const bk_adamw *opt, double *norm, bk_error *err)
{
    double total = 0.0;
    *norm = NAN;
    for (int i = 0; i < opt->n_groups; i++) {
        const bk_param_group *g = &opt->groups[i];
        if (g->frozen)
            continue;
        bk_backend *be = ops_of(g);
        double sum = 0.0;
        int rc = be->sumsq(be, g->grad, g->n, &sum, err);
        if (rc)
            return rc;
        total += sum;
    }
    *norm = sqrt(total);
    return BK_OK;
}

int bk_adamw_scale_grads(bk_adamw *opt, float s, bk_error *err)
{
    for (int i = 0; i < opt->n_groups; i++) {
        bk_param_group *g = &opt->groups[i];
        if (g->frozen)
            continue;
        bk_backend *be = ops_of(g);
        int rc = be->scale(be, g->grad, g->n, s, err);
        if (rc)
            return rc;
    }
    return BK_OK;
}

int bk_adamw_step(bk_adamw *opt, double lr, double beta1, double beta2, double eps, double weight_decay,
                  bk_error *err)
{
    opt->t++;
    /* every fp32 argument computed once, here, for every group and backend */
    const float b1 = (float)beta1, b2 = (float)beta2, flr = (float)lr, feps = (float)eps;
    const float c1 = (float)(1.0 - pow(beta1, (double)opt->t)), c2 = (float)(1.0 - pow(beta2, (double)opt->t));
    for (int i = 0; i < opt->n_groups; i++) {
        bk_param_group *g = &opt->groups[i];
        if (g->frozen)
            continue;
        bk_backend *be = ops_of(g);
        const float wd = g->decay ? (float)weight_decay : 0.0f;
        if (!g->n_segments) {
            int rc = be->adamw(be, g->param, g->grad, g->m, g->v, g->n, flr, b1, b2, feps, wd, c1, c2, err);
            if (rc)
                return rc;
            continue;
        }
        for (int k = 0; k < g->n_segments; k++) { /* host memory (bk_adamw_set_segments): pointers offset */
            const bk_adamw_segment *s = &g->segments[k];
            const float slr = (float)(lr * s->lr_scale), swd = s->weight_decay >= 0.0 ? (float)s->weight_decay : wd;
            int rc = be->adamw(be, g->param + s->offset, g->grad + s->offset, g->m + s->offset, g->v + s->offset,
                               s->count, slr, b1, b2, feps, swd, c1, c2, err);
            if (rc)
                return rc;
        }
    }
    return BK_OK;
}

int bk_adamw_to_host(bk_adamw *opt, bk_error *err)
{
    for (int i = 0; i < opt->n_groups; i++) {
        bk_param_group *g = &opt->groups[i];
        if (!on_device(g))
            continue;
        const size_t bytes = g->n * sizeof(float);
        int rc = g->be->download(g->be, g->param_host, g->param, bytes, err);
        if (!rc)
            rc = g->be->download(g->be, g->m_host, g->m, bytes, err);
        if (!rc)
            rc = g->be->download(g->be, g->v_host, g->v, bytes, err);
        if (rc)
            return rc;
    }
    return BK_OK;
}

int bk_adamw_to_device(bk_adamw *opt, bk_error *err)
{
    for (int i = 0; i < opt->n_groups; i++) {
        bk_param_group *g = &opt->groups[i];
        if (!on_device(g))
            continue;
        const size_t bytes = g->n * sizeof(float);
        int rc = g->be->upload(g->be, g->param, g->param_host, bytes, err);
        if (!rc)
            rc = g->be->upload(g->be, g->m, g->m_host, bytes, err);
        if (!rc)
            rc = g->be->upload(g->be, g->v, g->v_host, bytes, err);
        if (rc)
            return rc;
    }
    return BK_OK;
}

int bk_adamw_grad_to_host(const bk_adamw *opt, int i, float *dst_host, bk_error *err)
{
    if (i < 0 || i >= opt->n_groups)
        return bk_fail(err, BK_ERR_INVALID, "optimizer group %d of %d", i, opt->n_groups);
    const bk_param_group *g = &opt->groups[i];
    if (!on_device(g)) {
        memcpy(dst_host, g->grad, g->n * sizeof(float));
        return BK_OK;
    }
    return g->be->download(g->be, dst_host, g->grad, g->n * sizeof(float), err);
}

double bk_lr_schedule(int64_t s, int64_t steps, int64_t warmup, double lr, double final_fraction)
{
    if (s < warmup)
        return lr * (double)(s + 1) / (double)warmup;
    double floor = lr * final_fraction;
    if (steps - warmup <= 1)
        return lr;
    double progress = (double)(s - warmup) / (double)(steps - warmup - 1); /* 0 .. 1 */
    return floor + 0.5 * (lr - floor) * (1.0 + cos(3.141592653589793 * progress));
}
