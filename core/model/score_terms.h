/* The per-score term interface: what every attention program (the CPU's blocked and flash kernels,
 * cpu/attention*.c; the device's materialized, fused, second-generation and tensor-core programs,
 * gpu/kernels_*.h) asks for the score of (b, h, i, j) and for where that score's gradient goes. Host and
 * device (BIASKIT_HD), inline, C11 and CUDA C++. The terms of cpu/attention.h, for key j <= i visible:
 *
 *     s = lscale_h(i) a  +  sum over streams k of table_k[h][p_k(i) - p_k(j)]  +  F_h(phi[i - j] rscale[i])
 *                        +  (P_bh(j) - P_bh(i))
 *
 * a = q_i . k_j / sqrt(hd) as the program computed it; the terms are added in that order, one float
 * addition each (bk_score_run), which is the order every program had before this interface, so the bits
 * did not move. A masked pair has no score (the programs write -inf) and no gradient.
 *
 * The pieces:
 *   bk_score_terms         the terms of a call, pointers in the program's memory (host or device);
 *   bk_score_head_of       their view for one (b, h): the pointers offset once;
 *   bk_score_run / _one    the forward: a run of keys of one row (the CPU's vectorised rows), or one pair
 *                          (the device's per-element threads) -- the same function;
 *   bk_score_keeps, _tile  the mask: one pair, and a tile of pairs (skip / full / partial, for skipping);
 *   where gradients go     bk_score_distance (the table entry of term k a pair read), bk_score_cell (the
 *                          grid cell and weight it read), bk_score_tables_grad / bk_score_grid_grad (the
 *                          host's per-row scatter of dS into them); the logit scale's gradient is dS a,
 *                          the content position's +dS for the key and -dS for the query (bias_math.h).
 *
 * Counted positions (CoPE, cope_math.h) are not a per-score term: a pair's count depends on every key
 * between j and i, so they are a row term (bk_cope_row), computed by the materialized programs only.
 *
 * A new additive term: a field in bk_score_terms (and its view in bk_score_head), one line in
 * bk_score_run, its gradient's "where" here; then where it is computed (core/bias) and where its
 * gradient is reduced (each program family's own deterministic order: cpu/attention.c's slices,
 * gpu/kernels_flash.h's partials). docs/design.md's "Where things live" lists the files. */
#ifndef BK_SCORE_TERMS_H
#define BK_SCORE_TERMS_H

#include "config/experiment.h" /* BK_STREAM_COUNT */
#include "model/bias_math.h"
#include "model/host_simd.h"

#include <biaskit/plugin.h> /* BIASKIT_HD */

#include <math.h>
#include <stdint.h>

/* The terms of one attention call; every pointer NULL (window 0) when its term is absent. */
typedef struct bk_score_terms {
    const float *table[BK_STREAM_COUNT];       /* H x distances per stream, or NULL */
    const int32_t *positions[BK_STREAM_COUNT]; /* B x T per stream, or NULL: the token index */
    int32_t distances;                         /* row length of the tables and of phi */
    const float *lscale;                       /* H x T: the logit scale (NULL: 1) */
    const float *grid;                         /* H x points: the coordinate table */
    const float *phi;                          /* distances floats */
    const float *rscale;                       /* T floats */
    int32_t points;
    const float *cpos; /* B x H x T: the content position */
    int32_t window, sinks;
} bk_score_terms;

/* The terms of one (b, h): the call's (t), and its rows of them. tab[k], pos[k] for k < n are the streams
 * with a table, in stream order. */
typedef struct bk_score_head {
    const bk_score_terms *t;
    const float *tab[BK_STREAM_COUNT];
    const int32_t *pos[BK_STREAM_COUNT];
    int stream[BK_STREAM_COUNT];
    int n;
    const float *lam; /* lscale_h, T floats */
    const float *F;   /* the grid of head h, points floats */
    const float *cp;  /* the content position of (b, h), T floats */
} bk_score_head;

static inline BK_HOST_INLINE BIASKIT_HD bk_score_head bk_score_head_of(const bk_score_terms *t, int64_t b, int h,
                                                                       int H, int T)
{
    bk_score_head s;
    s.t = t;
    s.n = 0;
    for (int k = 0; k < BK_STREAM_COUNT; k++) {
        s.tab[k] = (const float *)0, s.pos[k] = (const int32_t *)0, s.stream[k] = k;
        if (!t->table[k])
            continue;
        s.tab[s.n] = t->table[k] + (int64_t)h * t->distances;
        s.pos[s.n] = t->positions[k] ? t->positions[k] + b * T : (const int32_t *)0;
        s.stream[s.n] = k;
        s.n++;
    }
    s.lam = t->lscale ? t->lscale + (int64_t)h * T : (const float *)0;
    s.F = t->grid ? t->grid + (int64_t)h * t->points : (const float *)0;
    s.cp = t->cpos ? t->cpos + (b * H + h) * (int64_t)T : (const float *)0;
    return s;
}

/* ---- the score --------------------------------------------------------------------------------------- */

/* The distance a pair (i, j) reads in the table of term k: p_k(i) - p_k(j). */
static inline BK_HOST_INLINE BIASKIT_HD int64_t bk_score_distance(const bk_score_head *s, int k, int i, int j)
{
    const int32_t *p = s->pos[k];
    return p ? (int64_t)p[i] - (int64_t)p[j] : (int64_t)i - (int64_t)j;
}

/* x[c] += table k's entries for keys j0 .. j0 + n - 1 of row i. The engine promises every distance of a
 * visible pair inside [0, distances) (the CPU checks them all, the device's caller the host positions);
 * a run whose end distances (positions do not decrease along t) stay inside reads them straight, and a
 * distance outside turns its score into NaN instead of a read outside the table, so that a broken
 * promise shows as a non-finite loss, not as silently wrong numbers. */
static inline BK_HOST_INLINE BIASKIT_HD void bk_score_table_run(const bk_score_head *s, int k, int i, int j0, int n,
                                                                float *x)
{
    const float *tab = s->tab[k];
    const int32_t *p = s->pos[k];
    const int64_t D = s->t->distances, hi = bk_score_distance(s, k, i, j0), lo = bk_score_distance(s, k, i, j0 + n - 1);
    if (lo >= 0 && hi < D) {
        if (p) {
            const int32_t pi = p[i], *pj = p + j0;
            for (int c = 0; c < n; c++)
                x[c] += tab[pi - pj[c]];
        } else {
            const int d0 = i - j0; /* d = d0 - c */
            BK_OMP_SIMD
            for (int c = 0; c < n; c++)
                x[c] += tab[d0 - c];
        }
        return;
    }
    for (int c = 0; c < n; c++) {
        const int64_t d = bk_score_distance(s, k, i, j0 + c);
        x[c] += (d >= 0 && d < D) ? tab[d] : (float)NAN;
    }
}

/* The grid cell of the pair (i, j), j <= i, and its weight w (bias_math.h): the same for every (b, h). */
static inline BK_HOST_INLINE BIASKIT_HD int32_t bk_score_cell(const bk_score_terms *t, int i, int j, float *w)
{
    return bk_coord_cell(bk_coord_u(t->phi[i - j], t->rscale[i]), t->points, w);
}

/* The scores of keys j0 .. j0 + n - 1 of row i (all visible): x[c] holds a_ij on entry, s_ij on return. */
static inline BK_HOST_INLINE BIASKIT_HD void bk_score_run(const bk_score_head *s, int i, int j0, int n, float *x)
{
    if (n <= 0)
        return;
    if (s->lam) {
        const float lam = s->lam[i];
        BK_OMP_SIMD
        for (int c = 0; c < n; c++)
            x[c] *= lam;
    }
    for (int k = 0; k < s->n; k++)
        bk_score_table_run(s, k, i, j0, n, x);
    if (s->F) {
        const float rs = s->t->rscale[i], *phi = s->t->phi;
        const int32_t points = s->t->points;
        const int d0 = i - j0; /* d = d0 - c */
        for (int c = 0; c < n; c++)
            x[c] += bk_coord_score(s->F, points, phi[d0 - c], rs);
    }
    if (s->cp) {
        const float pi = s->cp[i], *pj = s->cp + j0;
        BK_OMP_SIMD
        for (int c = 0; c < n; c++)
            x[c] += bk_content_term(pi, pj[c]);
    }
}

/* The score of one visible pair from a = a_ij. */
static inline BK_HOST_INLINE BIASKIT_HD float bk_score_one(const bk_score_head *s, int i, int j, float a)
{
    float x = a;
    bk_score_run(s, i, j, 1, &x);
    return x;
}

/* ---- the mask ---------------------------------------------------------------------------------------- */

/* Whether the pair (i, j) has a score (the causal mask included). */
static inline BK_HOST_INLINE BIASKIT_HD int bk_score_keeps(const bk_score_terms *t, int i, int j)
{
    return bk_mask_keeps(i, j, t->window, t->sinks);
}

/* The class of the tile of query rows [i0, i1) by keys [j0, j1), both non-empty: BK_TILE_SKIP (every pair
 * masked: never loaded), BK_TILE_FULL (every pair kept: no test per pair), BK_TILE_PARTIAL. */
static inline BK_HOST_INLINE BIASKIT_HD int bk_score_tile(const bk_score_terms *t, int i0, int i1, int j0, int j1)
{
    return bk_mask_tile(i0, i1, j0, j1, t->window, t->sinks);
}

/* Whether (i, j) of a tile of class cls has a score: every pair of a full tile, per pair in a partial one. */
static inline BK_HOST_INLINE BIASKIT_HD int bk_score_tile_keeps(const bk_score_terms *t, int cls, int i, int j)
{
    return cls == BK_TILE_FULL || bk_score_keeps(t, i, j);
}

/* ---- where the gradient goes: the host's scatter of one row's dS ------------------------------------- */

/* G[p_k(i) - p_k(j)] += dS_ij over keys j0 .. j0 + n - 1 of row i (ds[c]: key j0 + c), the pointers of
 * term k (p NULL: the token index). */
static inline BK_HOST_INLINE void bk_score_table_grad(double *G, const int32_t *p, const float *ds, int i, int j0,
                                                      int n)
{
    if (p) {
        const int32_t pi = p[i], *pj = p + j0;
        for (int c = 0; c < n; c++)
            G[pi - pj[c]] += ds[c];
    } else if (n > 0) { /* G[d] for d = i - j, from the last key back: G read forwards (vectorises) */
        double *g = G + (i - j0) - (n - 1);
        const float *r = ds + n - 1;
        BK_OMP_SIMD
        for (int t = 0; t < n; t++)
            g[t] += (double)r[-t];
    }
}

/* The coordinate table's gradients over keys j0 .. j0 + n - 1 of row i (d = i - j), with u = phi[d]
 * rscale[i] in cell g at t: s = F[g] + t (F[g+1] - F[g]), so
 *     dF[g] += dS (1 - t),  dF[g+1] += dS t,  du = dS slope_g,
 *     dphi[d] += du rscale[i],  drscale[i] += du phi[d]   (*drs: this row's sum, added once). */
static inline BK_HOST_INLINE void bk_score_grid_grad(double *dF, double *dphi, double *drs, const bk_score_head *s,
                                                     const float *ds, int i, int j0, int n)
{
    const float rs = s->t->rscale[i], *phi = s->t->phi;
    double sum = 0.0;
    for (int c = 0; c < n; c++) {
        const int d = i - j0 - c;
        float t;
        const int32_t g = bk_score_cell(s->t, i, j0 + c, &t);
        const double dsc = ds[c];
        dF[g] += dsc * (1.0 - (double)t);
        dF[g + 1] += dsc * (double)t;
        const double du = dsc * (double)bk_coord_slope(s->F, g, s->t->points);
        dphi[d] += du * (double)rs;
        sum += du * (double)phi[d];
    }
    *drs += sum;
}

#endif
