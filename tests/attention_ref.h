/* A plain double-precision attention with every bias term (cpu/attention.h's contract, ABI 2 terms
 * included), O(B H T^2), written from the formulas for the tests of the CPU and device attentions:
 *
 *   a_ij   = q_i . k_j / sqrt(hd)
 *   s_ij   = scale_h(i) a_ij + sum_s table_s[h][p_s(i) - p_s(j)] + grid_h(u(i, i - j))    (j <= i, visible)
 *   s_ij   = -inf (masked: j > i, or a window/sink mask hides it)
 *   P      = softmax_j(s),  out_i = sum_j P_ij v_j
 * and, given dout, every gradient: dqkv, dtable[s], dgrid, dphi, drscale, dscale (each written, not
 * added: the caller adds its own starting values when it compares accumulating backwards). The grid is
 * read by linear interpolation (model/bias_math.h's cell rule, in double here). */
#ifndef BK_TEST_ATTENTION_REF_H
#define BK_TEST_ATTENTION_REF_H

#include "cpu/attention.h"
#include "model/bias_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct ref_grads {
    double *out;                      /* B T C */
    double *probs;                    /* B H T T (0 where masked) */
    double *dqkv;                     /* B T 3C */
    double *dtable[BK_STREAM_COUNT];  /* H x distances, for streams with a table */
    double *dgrid;                    /* H x points */
    double *dphi;                     /* distances */
    double *drscale;                  /* T */
    double *dscale;                   /* H x T */
} ref_grads;

static inline void ref_grads_alloc(ref_grads *g, const bk_attention_bias *bias, int B, int T, int C, int H)
{
    memset(g, 0, sizeof *g);
    g->out = calloc((size_t)B * T * C, sizeof(double));
    g->probs = calloc((size_t)B * H * T * T, sizeof(double));
    g->dqkv = calloc((size_t)B * T * 3 * C, sizeof(double));
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (bias && bias->table[s])
            g->dtable[s] = calloc((size_t)H * bias->distances, sizeof(double));
    if (bias && bias->grid) {
        g->dgrid = calloc((size_t)H * bias->points, sizeof(double));
        g->dphi = calloc((size_t)bias->distances, sizeof(double));
        g->drscale = calloc((size_t)T, sizeof(double));
    }
    if (bias && bias->scale)
        g->dscale = calloc((size_t)H * T, sizeof(double));
}

static inline void ref_grads_free(ref_grads *g)
{
    free(g->out), free(g->probs), free(g->dqkv), free(g->dgrid), free(g->dphi), free(g->drscale), free(g->dscale);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        free(g->dtable[s]);
    memset(g, 0, sizeof *g);
}

/* u's grid cell in double, by the rule of bk_coord_cell. */
static inline int ref_cell(double u, int points, double *t)
{
    double x = u * (points - 1);
    x = x > 0 ? x : 0;
    x = x < points - 1 ? x : points - 1;
    int g = (int)x;
    g = g < points - 2 ? g : points - 2;
    *t = x - g;
    return g;
}

/* dout may be NULL (forward only). */
static inline void ref_attention(ref_grads *g, const float *qkv, const float *dout, const bk_attention_bias *bias,
                                 int B, int T, int C, int H)
{
    const int hd = C / H, C3 = 3 * C;
    const double inv = 1.0 / sqrt((double)hd);
    double *a = malloc((size_t)T * sizeof(double)), *dP = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const float *q = qkv + ((size_t)b * T + i) * C3 + (size_t)h * hd;
                double *P = g->probs + (((size_t)b * H + h) * T + i) * T;
                double lam = bias && bias->scale ? bias->scale[(size_t)h * T + i] : 1.0;
                double mx = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * C3 + C + (size_t)h * hd;
                    double dot = 0;
                    for (int c = 0; c < hd; c++)
                        dot += (double)q[c] * k[c];
                    a[j] = dot * inv;
                    if (bias && !bk_mask_keeps(i, j, bias->window, bias->sinks)) {
                        P[j] = -INFINITY;
                        continue;
                    }
                    double s = lam * a[j];
                    for (int st = 0; st < BK_STREAM_COUNT; st++) {
                        if (!bias || !bias->table[st])
                            continue;
                        const int32_t *p = bias->positions[st] ? bias->positions[st] + (size_t)b * T : NULL;
                        int d = p ? p[i] - p[j] : i - j;
                        s += bias->table[st][(size_t)h * bias->distances + d];
                    }
                    if (bias && bias->grid) {
                        double t, u = (double)bias->phi[i - j] * bias->rscale[i];
                        int c = ref_cell(u, bias->points, &t);
                        const float *F = bias->grid + (size_t)h * bias->points;
                        s += F[c] + t * ((double)F[c + 1] - F[c]);
                    }
                    P[j] = s;
                    mx = s > mx ? s : mx;
                }
                double sum = 0;
                for (int j = 0; j <= i; j++)
                    sum += P[j] == -INFINITY ? 0 : exp(P[j] - mx);
                for (int j = 0; j <= i; j++)
                    P[j] = P[j] == -INFINITY ? 0 : exp(P[j] - mx) / sum;
                for (int j = i + 1; j < T; j++)
                    P[j] = 0;
                double *o = g->out + ((size_t)b * T + i) * C + (size_t)h * hd;
                for (int j = 0; j <= i; j++) {
                    const float *v = qkv + ((size_t)b * T + j) * C3 + 2 * C + (size_t)h * hd;
                    for (int c = 0; c < hd; c++)
                        o[c] += P[j] * v[c];
                }
                if (!dout)
                    continue;
                /* backward of row i */
                const float *dO = dout + ((size_t)b * T + i) * C + (size_t)h * hd;
                double dot_pdp = 0;
                for (int j = 0; j <= i; j++) {
                    const float *v = qkv + ((size_t)b * T + j) * C3 + 2 * C + (size_t)h * hd;
                    double x = 0;
                    for (int c = 0; c < hd; c++)
                        x += (double)dO[c] * v[c];
                    dP[j] = x;
                    dot_pdp += P[j] * x;
                    double *dv = g->dqkv + ((size_t)b * T + j) * C3 + 2 * C + (size_t)h * hd;
                    for (int c = 0; c < hd; c++)
                        dv[c] += P[j] * dO[c];
                }
                double *dq = g->dqkv + ((size_t)b * T + i) * C3 + (size_t)h * hd;
                for (int j = 0; j <= i; j++) {
                    double dS = P[j] * (dP[j] - dot_pdp); /* dL/ds_ij; 0 where masked (P = 0) */
                    if (dS == 0.0)
                        continue;
                    const float *k = qkv + ((size_t)b * T + j) * C3 + C + (size_t)h * hd;
                    double *dk = g->dqkv + ((size_t)b * T + j) * C3 + C + (size_t)h * hd;
                    for (int c = 0; c < hd; c++) {
                        dq[c] += dS * lam * inv * k[c];
                        dk[c] += dS * lam * inv * q[c];
                    }
                    if (g->dscale)
                        g->dscale[(size_t)h * T + i] += dS * a[j];
                    for (int st = 0; st < BK_STREAM_COUNT; st++) {
                        if (!g->dtable[st])
                            continue;
                        const int32_t *p = bias->positions[st] ? bias->positions[st] + (size_t)b * T : NULL;
                        int d = p ? p[i] - p[j] : i - j;
                        g->dtable[st][(size_t)h * bias->distances + d] += dS;
                    }
                    if (g->dgrid) {
                        double t, u = (double)bias->phi[i - j] * bias->rscale[i];
                        int c = ref_cell(u, bias->points, &t);
                        const float *F = bias->grid + (size_t)h * bias->points;
                        g->dgrid[(size_t)h * bias->points + c] += dS * (1 - t);
                        g->dgrid[(size_t)h * bias->points + c + 1] += dS * t;
                        double du = dS * ((double)F[c + 1] - F[c]) * (bias->points - 1);
                        g->dphi[i - j] += du * bias->rscale[i];
                        g->drscale[i] += du * bias->phi[i - j];
                    }
                }
            }
    free(a);
    free(dP);
}

#endif
