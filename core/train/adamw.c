#include "train/adamw.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bk_adamw_add(bk_adamw *opt, const char *name, float *param, float *grad, size_t n, int decay, bk_error *err)
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
    g->param = param, g->grad = grad, g->n = n, g->decay = decay;
    g->m = calloc(n ? n : 1, sizeof(float));
    g->v = calloc(n ? n : 1, sizeof(float));
    if (!g->m || !g->v) {
        free(g->m), free(g->v);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the moments of '%s' (%zu values)", name, n);
    }
    opt->n_groups++;
    return BK_OK;
}

void bk_adamw_free(bk_adamw *opt)
{
    for (int i = 0; i < opt->n_groups; i++)
        free(opt->groups[i].m), free(opt->groups[i].v);
    free(opt->groups);
    memset(opt, 0, sizeof *opt);
}

/* The squared norm is summed in chunks of a fixed size, the chunks of a round in parallel, then the
 * chunk sums in index order: the grouping of the additions depends on neither the thread count nor
 * the order threads finish in (an OpenMP reduction(+) depends on both), so clipping — and with it
 * every weight — is bit-identical however many threads run. */
enum { NORM_CHUNK = 4096, NORM_ROUND = 256 };

double bk_adamw_grad_norm(const bk_adamw *opt)
{
    double total = 0.0;
    for (int i = 0; i < opt->n_groups; i++) {
        const bk_param_group *g = &opt->groups[i];
        const size_t n_chunks = (g->n + NORM_CHUNK - 1) / NORM_CHUNK;
        for (size_t first = 0; first < n_chunks; first += NORM_ROUND) {
            double part[NORM_ROUND];
            const int count = (int)(n_chunks - first < NORM_ROUND ? n_chunks - first : NORM_ROUND);
#pragma omp parallel for schedule(static) if (count > 1)
            for (int c = 0; c < count; c++) {
                size_t lo = (first + (size_t)c) * NORM_CHUNK, hi = lo + NORM_CHUNK < g->n ? lo + NORM_CHUNK : g->n;
                double sum = 0.0;
                for (size_t k = lo; k < hi; k++)
                    sum += (double)g->grad[k] * g->grad[k];
                part[c] = sum;
            }
            for (int c = 0; c < count; c++)
                total += part[c];
        }
    }
    return sqrt(total);
}

void bk_adamw_scale_grads(bk_adamw *opt, float s)
{
    for (int i = 0; i < opt->n_groups; i++) {
        bk_param_group *g = &opt->groups[i];
#pragma omp parallel for schedule(static)
        for (size_t k = 0; k < g->n; k++)
            g->grad[k] *= s;
    }
}

void bk_adamw_step(bk_adamw *opt, double lr, double beta1, double beta2, double eps, double weight_decay)
{
    opt->t++;
    const float b1 = (float)beta1, b2 = (float)beta2;
    const float c1 = (float)(1.0 - pow(beta1, (double)opt->t)), c2 = (float)(1.0 - pow(beta2, (double)opt->t));
    for (int i = 0; i < opt->n_groups; i++) {
        bk_param_group *g = &opt->groups[i];
        const float wd = g->decay ? (float)weight_decay : 0.0f, flr = (float)lr, feps = (float)eps;
#pragma omp parallel for schedule(static)
        for (size_t k = 0; k < g->n; k++) {
            float grad = g->grad[k];
            float m = b1 * g->m[k] + (1.0f - b1) * grad;
            float v = b2 * g->v[k] + (1.0f - b2) * grad * grad;
            g->m[k] = m, g->v[k] = v;
            float mhat = m / c1, vhat = v / c2;
            g->param[k] -= flr * (mhat / (sqrtf(vhat) + feps) + wd * g->param[k]);
        }
    }
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
