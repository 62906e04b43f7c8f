/* Random attention problems for the CPU attention tests (test_attention_v2, test_attention_flash): q,
 * k, v, dout, tables on one or two streams, a coordinate table (FIRE's coordinate), a window/sink mask and
 * a logit scale, in a bk_attention_bias; and the relative comparison of a result with a double reference. */
#ifndef BK_TEST_ATTENTION_PROBLEM_H
#define BK_TEST_ATTENTION_PROBLEM_H

#include "test_util.h"

#include "test_random.h"

#include "cpu/attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NO_TABLES = 0, TOKEN_TABLE = 1, TOKEN_AND_SEGMENT = 2 };

typedef struct spec {
    int B, T, C, H;
    int tables;    /* NO_TABLES, TOKEN_TABLE, TOKEN_AND_SEGMENT */
    int grid;      /* a coordinate table */
    int window;    /* 0: no mask */
    int sinks;
    int scale;     /* a logit scale: s_h ln(i + 1) (0 on row 0), one head negative, zeros on rows i % 17 == 5 */
    int distances; /* 0: T + 2 */
} spec;

typedef struct problem {
    spec sp;
    int D, points;
    float *qkv, *dout;
    float *table[BK_STREAM_COUNT];
    int32_t *pos[BK_STREAM_COUNT];
    float *grid, *phi, *rscale, *scale;
    bk_attention_bias bias;
} problem;


/* The coordinate is FIRE's (c = 0.7, L = 8): phi(d) = ln(1 + c d), rscale(i) = 1 / ln(1 + c max(i, L)),
 * so u(i, d) lies in [0, 1]. */
static inline problem make_problem(spec sp, uint64_t seed)
{
    rng_state = seed;
    problem pb = {.sp = sp, .D = sp.distances ? sp.distances : sp.T + 2, .points = 6};
    const int B = sp.B, T = sp.T, C = sp.C, H = sp.H;
    pb.qkv = random_floats((size_t)B * T * 3 * C, 1.5);
    pb.dout = random_floats((size_t)B * T * C, 1.0);
    if (sp.tables >= TOKEN_TABLE)
        pb.table[0] = random_floats((size_t)H * pb.D, 1.0);
    if (sp.tables >= TOKEN_AND_SEGMENT) {
        pb.table[1] = random_floats((size_t)H * pb.D, 1.0);
        pb.pos[1] = malloc((size_t)B * T * sizeof(int32_t));
        assert_non_null(pb.pos[1]);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                pb.pos[1][b * T + t] = t == 0 ? 0 : pb.pos[1][b * T + t - 1] + (uniform() > 0.5);
    }
    if (sp.grid) {
        pb.grid = random_floats((size_t)H * pb.points, 2.0);
        pb.phi = malloc((size_t)pb.D * sizeof(float));
        pb.rscale = malloc((size_t)T * sizeof(float));
        assert_true(pb.phi && pb.rscale);
        for (int d = 0; d < pb.D; d++)
            pb.phi[d] = (float)log1p(0.7 * d);
        for (int i = 0; i < T; i++)
            pb.rscale[i] = (float)(1.0 / log1p(0.7 * (i > 8 ? i : 8)));
    }
    if (sp.scale) {
        static const double s_h[4] = {0.9, -0.6, 1.4, 0.3};
        pb.scale = malloc((size_t)H * T * sizeof(float));
        assert_non_null(pb.scale);
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++)
                pb.scale[(size_t)h * T + i] = i % 17 == 5 ? 0.0f : (float)(s_h[h % 4] * log(i + 1.0));
    }
    bk_attention_bias *bias = &pb.bias;
    memset(bias, 0, sizeof *bias);
    bias->distances = pb.D;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        bias->table[s] = pb.table[s];
        bias->positions[s] = pb.pos[s];
    }
    bias->grid = pb.grid;
    bias->points = pb.grid ? pb.points : 0;
    bias->phi = pb.phi;
    bias->rscale = pb.rscale;
    bias->window = sp.window;
    bias->sinks = sp.sinks;
    bias->scale = pb.scale;
    return pb;
}

static inline void free_problem(problem *pb)
{
    free(pb->qkv), free(pb->dout), free(pb->grid), free(pb->phi), free(pb->rscale), free(pb->scale);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        free(pb->table[s]), free(pb->pos[s]);
}

/* ---- comparisons ---- */

/* max |x - (start + ref)| / max |start + ref| */
static inline double rel_err(const float *x, const float *start, const double *ref, size_t n)
{
    double worst = 0.0, big = 0.0;
    for (size_t k = 0; k < n; k++) {
        const double e = (start ? (double)start[k] : 0.0) + ref[k];
        const double d = fabs((double)x[k] - e);
        worst = d > worst || d != d ? d : worst;
        big = fabs(e) > big ? fabs(e) : big;
    }
    return big > 0.0 ? worst / big : worst;
}

static inline void expect_close(const char *what, const char *name, const float *x, const float *start, const double *ref,
                         size_t n, double tol)
{
    const double e = rel_err(x, start, ref, n);
    if (!(e <= tol))
        fail_msg("%s: %s differs from the reference by %.3g (relative to its largest value), tolerance %.3g", what,
                 name, e, tol);
}

#endif
