/* CPU attention against a naive double-precision reference that materialises the T x T scores:
 * forward (out and probs), backward (dqkv and the table gradient for L = sum out . R, checked
 * analytically and by central differences on the tables), independence of the thread count, and
 * the errors for distances outside the tables. */
#include "test_util.h"
#include "test_random.h"
#include "test_floats.h"

#include "cpu/attention.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>

typedef struct problem {
    int B, T, C, H, D;
    float *qkv;                     /* (B, T, 3C) */
    float *R;                       /* (B, T, C): the loss is L = sum out . R, so dout = R */
    float *table[BK_STREAM_COUNT];  /* H x D, or NULL */
    int32_t *pos[BK_STREAM_COUNT];  /* B x T, or NULL (token index) */
} problem;

enum { NO_TABLES = 0, TOKEN_TABLE = 1, TOKEN_AND_SEGMENT = 2 };


/* Segment positions step by one at random tokens (about one in four); explicit token positions
 * start at an offset and repeat now and then. Both are non-decreasing with distances < T. */
static problem make_problem(int B, int T, int C, int H, int mode, int explicit_token, uint64_t seed)
{
    rng_state = seed;
    problem pb = {.B = B, .T = T, .C = C, .H = H, .D = T + 2};
    pb.qkv = random_floats((size_t)B * T * 3 * C, 1.0);
    pb.R = random_floats((size_t)B * T * C, 1.0);
    if (mode >= TOKEN_TABLE)
        pb.table[0] = random_floats((size_t)H * pb.D, 1.0);
    if (mode >= TOKEN_AND_SEGMENT) {
        pb.table[1] = random_floats((size_t)H * pb.D, 1.0);
        pb.pos[1] = malloc((size_t)B * T * sizeof(int32_t));
        assert_non_null(pb.pos[1]);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                pb.pos[1][b * T + t] = t == 0 ? 0 : pb.pos[1][b * T + t - 1] + (uniform() > 0.5);
    }
    if (explicit_token) {
        pb.pos[0] = malloc((size_t)B * T * sizeof(int32_t));
        assert_non_null(pb.pos[0]);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                pb.pos[0][b * T + t] = t == 0 ? 100 * b : pb.pos[0][b * T + t - 1] + (uniform() > -0.6);
    }
    return pb;
}

static void free_problem(problem *pb)
{
    free(pb->qkv);
    free(pb->R);
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        free(pb->table[s]);
        free(pb->pos[s]);
    }
}

static bk_attention_bias bias_of(const problem *pb)
{
    bk_attention_bias bias = {.distances = pb->D};
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        bias.table[s] = pb->table[s];
        bias.positions[s] = pb->pos[s];
    }
    return bias;
}

static int pos_of(const problem *pb, int s, int b, int t)
{
    return pb->pos[s] ? pb->pos[s][b * pb->T + t] : t;
}

/* ---- reference, in double ---- */

/* out (B, T, C) and P (B, H, T, T) from the tables `tab` (double copies, so they can be perturbed) */
static void ref_forward(const problem *pb, double *const tab[BK_STREAM_COUNT], double *out, double *P)
{
    const int T = pb->T, C = pb->C, H = pb->H, hd = C / H;
    const double scale = 1.0 / sqrt((double)hd);
    for (int b = 0; b < pb->B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                double *row = P + (((size_t)b * H + h) * T + i) * T;
                const float *q = pb->qkv + ((size_t)b * T + i) * 3 * C + h * hd;
                double max = -INFINITY, sum = 0.0;
                for (int j = 0; j < T; j++) {
                    row[j] = 0.0;
                    if (j > i)
                        continue;
                    const float *k = pb->qkv + ((size_t)b * T + j) * 3 * C + C + h * hd;
                    double s = 0.0;
                    for (int d = 0; d < hd; d++)
                        s += (double)q[d] * k[d];
                    s *= scale;
                    for (int st = 0; st < BK_STREAM_COUNT; st++)
                        if (tab[st])
                            s += tab[st][h * pb->D + pos_of(pb, st, b, i) - pos_of(pb, st, b, j)];
                    row[j] = s;
                    max = s > max ? s : max;
                }
                for (int j = 0; j <= i; j++)
                    sum += row[j] = exp(row[j] - max);
                for (int j = 0; j <= i; j++)
                    row[j] /= sum;
                for (int d = 0; d < hd; d++) {
                    double o = 0.0;
                    for (int j = 0; j <= i; j++)
                        o += row[j] * pb->qkv[((size_t)b * T + j) * 3 * C + 2 * C + h * hd + d];
                    out[((size_t)b * T + i) * C + h * hd + d] = o;
                }
            }
}

static double ref_loss(const problem *pb, double *const tab[BK_STREAM_COUNT])
{
    size_t n_out = (size_t)pb->B * pb->T * pb->C;
    double *out = malloc(n_out * sizeof *out);
    double *P = malloc((size_t)pb->B * pb->H * pb->T * pb->T * sizeof *P);
    assert_true(out && P);
    ref_forward(pb, tab, out, P);
    double L = 0.0;
    for (size_t n = 0; n < n_out; n++)
        L += out[n] * pb->R[n];
    free(out);
    free(P);
    return L;
}

/* dL/dqkv (zeroed by the caller) and G[s][h][delta] = sum of dL/ds over pairs at distance delta */
static void ref_backward(const problem *pb, const double *P, double *dqkv, double *const G[BK_STREAM_COUNT])
{
    const int T = pb->T, C = pb->C, H = pb->H, hd = C / H;
    const double scale = 1.0 / sqrt((double)hd);
    double *dS = malloc((size_t)T * sizeof *dS);
    assert_non_null(dS);
    for (int b = 0; b < pb->B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const double *Pi = P + (((size_t)b * H + h) * T + i) * T;
                const float *dO = pb->R + ((size_t)b * T + i) * C + h * hd;
                const size_t qi = ((size_t)b * T + i) * 3 * C + h * hd;
                double dot = 0.0;
                for (int j = 0; j <= i; j++) {
                    const size_t vj = ((size_t)b * T + j) * 3 * C + 2 * C + h * hd;
                    double dp = 0.0;
                    for (int d = 0; d < hd; d++) {
                        dp += (double)dO[d] * pb->qkv[vj + d];
                        dqkv[vj + d] += Pi[j] * dO[d];
                    }
                    dS[j] = dp;
                    dot += Pi[j] * dp;
                }
                for (int j = 0; j <= i; j++) {
                    dS[j] = Pi[j] * (dS[j] - dot);
                    const size_t kj = ((size_t)b * T + j) * 3 * C + C + h * hd;
                    for (int d = 0; d < hd; d++) {
                        dqkv[qi + d] += scale * dS[j] * pb->qkv[kj + d];
                        dqkv[kj + d] += scale * dS[j] * pb->qkv[qi + d];
                    }
                    for (int st = 0; st < BK_STREAM_COUNT; st++)
                        if (G[st])
                            G[st][h * pb->D + pos_of(pb, st, b, i) - pos_of(pb, st, b, j)] += dS[j];
                }
            }
    free(dS);
}

/* ---- comparisons ---- */

/* |got - want| <= tol (1 + |want|) elementwise, or <= tol max(1, max |want|) when `whole` (sums of
 * many terms that cancel, such as gradients, are only accurate relative to the array's scale) */
static void check_close(const char *what, const double *got, const double *want, size_t n, double tol, int whole)
{
    double scale = 1.0;
    for (size_t k = 0; whole && k < n; k++)
        scale = fabs(want[k]) > scale ? fabs(want[k]) : scale;
    for (size_t k = 0; k < n; k++) {
        double bound = tol * (whole ? scale : 1.0 + fabs(want[k]));
        if (!(fabs(got[k] - want[k]) <= bound))
            fail_msg("%s[%zu]: got %.9g, want %.9g (|diff| %.3g > %.3g)", what, k, got[k], want[k],
                     fabs(got[k] - want[k]), bound);
    }
}

static double *to_double(const float *x, const float *minus, size_t n)
{
    double *y = malloc(n * sizeof *y);
    assert_non_null(y);
    for (size_t k = 0; k < n; k++)
        y[k] = (double)x[k] - (minus ? (double)minus[k] : 0.0);
    return y;
}

/* Forward and backward of one problem against the reference. */
static void run_case(int B, int T, int C, int H, int mode, int explicit_token, uint64_t seed)
{
    problem pb = make_problem(B, T, C, H, mode, explicit_token, seed);
    const bk_attention_bias bias = bias_of(&pb);
    const size_t n_out = (size_t)B * T * C, n_qkv = 3 * n_out, n_p = (size_t)B * H * T * T, n_tab = (size_t)H * pb.D;
    bk_error err;

    float *out = malloc(n_out * sizeof *out), *out_np = malloc(n_out * sizeof *out_np);
    float *probs = malloc(n_p * sizeof *probs);
    assert_true(out && out_np && probs);
    for (size_t k = 0; k < n_p; k++)
        probs[k] = NAN; /* every entry must be written, the zeros above the diagonal included */
    assert_int_equal(bk_attention_forward(out, probs, pb.qkv, &bias, B, T, C, H, &err), BK_OK);
    assert_int_equal(bk_attention_forward(out_np, NULL, pb.qkv, &bias, B, T, C, H, &err), BK_OK);
    assert_memory_equal(out, out_np, n_out * sizeof *out);

    double *tab[BK_STREAM_COUNT] = {NULL, NULL};
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (pb.table[s])
            tab[s] = to_double(pb.table[s], NULL, n_tab);
    double *ref_out = malloc(n_out * sizeof *ref_out), *ref_p = malloc(n_p * sizeof *ref_p);
    assert_true(ref_out && ref_p);
    ref_forward(&pb, tab, ref_out, ref_p);

    double *got = to_double(out, NULL, n_out);
    check_close("out", got, ref_out, n_out, 1e-5, 0);
    free(got);
    got = to_double(probs, NULL, n_p);
    check_close("probs", got, ref_p, n_p, 1e-6, 0);
    free(got);
    for (size_t row = 0; row < (size_t)B * H * T; row++) {
        const int i = (int)(row % T);
        double sum = 0.0;
        for (int j = 0; j < T; j++) {
            if (j > i)
                assert_true(probs[row * T + j] == 0.0f);
            sum += probs[row * T + j];
        }
        assert_float_equal(sum, 1.0, 1e-5);
    }

    /* Backward accumulates: start from random dqkv and dtable and compare the increments. A stream
     * with a gradient buffer but no table must leave its buffer alone. */
    float *pre_dqkv = random_floats(n_qkv, 0.5), *pre_tab = random_floats(n_tab, 0.5);
    float *dqkv = copy_floats(pre_dqkv, n_qkv);
    float *dtable[BK_STREAM_COUNT];
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        dtable[s] = copy_floats(pre_tab, n_tab);
    assert_int_equal(bk_attention_backward(dqkv, dtable, pb.R, pb.qkv, probs, &bias, B, T, C, H, &err), BK_OK);

    double *ref_dqkv = calloc(n_qkv, sizeof *ref_dqkv);
    double *G[BK_STREAM_COUNT] = {NULL, NULL};
    assert_non_null(ref_dqkv);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (pb.table[s]) {
            G[s] = calloc(n_tab, sizeof *G[s]);
            assert_non_null(G[s]);
        }
    ref_backward(&pb, ref_p, ref_dqkv, G);
    got = to_double(dqkv, pre_dqkv, n_qkv);
    check_close("dqkv", got, ref_dqkv, n_qkv, 1e-5, 1);
    free(got);
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (!pb.table[s]) {
            assert_memory_equal(dtable[s], pre_tab, n_tab * sizeof *pre_tab);
            continue;
        }
        got = to_double(dtable[s], pre_tab, n_tab);
        check_close(s ? "dtable[segment]" : "dtable[token]", got, G[s], n_tab, 1e-5, 1);
        free(got);
    }

    /* The reference's table gradient against central differences of its loss: every entry when the
     * problem is small, about a dozen per (stream, head) otherwise. */
    const double eps = 1e-4;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (!tab[s])
            continue;
        const int step = pb.D > 16 ? pb.D / 12 : 1;
        for (int h = 0; h < H; h++)
            for (int d = 0; d < pb.D; d += step) {
                double *x = &tab[s][h * pb.D + d], x0 = *x;
                *x = x0 + eps;
                double up = ref_loss(&pb, tab);
                *x = x0 - eps;
                double down = ref_loss(&pb, tab);
                *x = x0;
                double fd = (up - down) / (2 * eps);
                check_close("finite-difference dtable", &G[s][h * pb.D + d], &fd, 1, 1e-6, 0);
            }
    }

    /* Only the segment table's gradient wanted: the same dqkv, the same segment gradient. */
    if (pb.table[1]) {
        float *dqkv2 = copy_floats(pre_dqkv, n_qkv), *dseg = copy_floats(pre_tab, n_tab);
        float *const only_segment[BK_STREAM_COUNT] = {NULL, dseg};
        assert_int_equal(bk_attention_backward(dqkv2, only_segment, pb.R, pb.qkv, probs, &bias, B, T, C, H, &err),
                         BK_OK);
        assert_memory_equal(dqkv2, dqkv, n_qkv * sizeof *dqkv);
        assert_memory_equal(dseg, dtable[1], n_tab * sizeof *dseg);
        free(dqkv2);
        free(dseg);
    }

    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        free(tab[s]);
        free(G[s]);
        free(dtable[s]);
    }
    free(ref_dqkv);
    free(dqkv);
    free(pre_dqkv);
    free(pre_tab);
    free(ref_out);
    free(ref_p);
    free(out);
    free(out_np);
    free(probs);
    free_problem(&pb);
}

static void small_shapes(void **state)
{
    (void)state;
    for (int mode = NO_TABLES; mode <= TOKEN_AND_SEGMENT; mode++)
        run_case(2, 7, 12, 3, mode, 0, 11 + mode);
    run_case(2, 7, 12, 3, TOKEN_AND_SEGMENT, 1, 17);
    run_case(2, 1, 8, 2, TOKEN_AND_SEGMENT, 0, 19); /* one token: only the diagonal */
}

static void crosses_block_boundary(void **state)
{
    (void)state;
    for (int mode = NO_TABLES; mode <= TOKEN_AND_SEGMENT; mode++)
        run_case(1, 130, 32, 2, mode, 0, 23 + mode);
    run_case(1, 64, 16, 2, TOKEN_AND_SEGMENT, 1, 29); /* exactly one block */
}

static void batch_of_three(void **state)
{
    (void)state;
    for (int mode = NO_TABLES; mode <= TOKEN_AND_SEGMENT; mode++)
        run_case(3, 65, 24, 3, mode, mode == TOKEN_AND_SEGMENT, 31 + mode);
}

/* Forward and backward bit for bit the same on 1, 2 and 3 threads. */
static void independent_of_thread_count(void **state)
{
    (void)state;
    const int B = 3, T = 65, C = 24, H = 3;
    problem pb = make_problem(B, T, C, H, TOKEN_AND_SEGMENT, 0, 41);
    const bk_attention_bias bias = bias_of(&pb);
    const size_t n_out = (size_t)B * T * C, n_qkv = 3 * n_out, n_p = (size_t)B * H * T * T, n_tab = (size_t)H * pb.D;
    const int threads[3] = {1, 2, 3}, saved = omp_get_max_threads();
    float *first[5] = {NULL};
    bk_error err;
    for (int run = 0; run < 3; run++) {
        omp_set_num_threads(threads[run]);
        float *out = malloc(n_out * sizeof *out), *probs = malloc(n_p * sizeof *probs);
        float *dqkv = calloc(n_qkv, sizeof *dqkv), *dtok = calloc(n_tab, sizeof *dtok),
              *dseg = calloc(n_tab, sizeof *dseg);
        assert_true(out && probs && dqkv && dtok && dseg);
        float *const dtable[BK_STREAM_COUNT] = {dtok, dseg};
        assert_int_equal(bk_attention_forward(out, probs, pb.qkv, &bias, B, T, C, H, &err), BK_OK);
        assert_int_equal(bk_attention_backward(dqkv, dtable, pb.R, pb.qkv, probs, &bias, B, T, C, H, &err), BK_OK);
        float *now[5] = {out, probs, dqkv, dtok, dseg};
        const size_t n[5] = {n_out, n_p, n_qkv, n_tab, n_tab};
        for (int k = 0; k < 5; k++) {
            if (run == 0) {
                first[k] = now[k];
                continue;
            }
            assert_memory_equal(now[k], first[k], n[k] * sizeof(float));
            free(now[k]);
        }
    }
    omp_set_num_threads(saved);
    for (int k = 0; k < 5; k++)
        free(first[k]);
    free_problem(&pb);
}

static void distances_outside_the_table(void **state)
{
    (void)state;
    const int B = 2, T = 9, C = 8, H = 2;
    problem pb = make_problem(B, T, C, H, TOKEN_AND_SEGMENT, 0, 53);
    bk_attention_bias bias = bias_of(&pb);
    const size_t n_out = (size_t)B * T * C;
    float *out = malloc(n_out * sizeof *out), *probs = malloc((size_t)B * H * T * T * sizeof *probs);
    float *dqkv = calloc(3 * n_out, sizeof *dqkv), *dtok = calloc((size_t)H * pb.D, sizeof *dtok);
    assert_true(out && probs && dqkv && dtok);
    float *const dtable[BK_STREAM_COUNT] = {dtok, NULL};
    bk_error err;
    assert_int_equal(bk_attention_forward(out, probs, pb.qkv, &bias, B, T, C, H, &err), BK_OK);

    /* a segment jump in row 1 takes p(i) - p(0) past the table */
    int32_t *seg = pb.pos[1] + T;
    for (int t = 5; t < T; t++)
        seg[t] = seg[4] + pb.D + t;
    assert_int_equal(bk_attention_forward(out, probs, pb.qkv, &bias, B, T, C, H, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "distance");
    assert_message_has(err.message, "stream 'segment', batch row 1");
    assert_message_has(err.message, "p(i=5) - p(j=0)");
    assert_int_equal(bk_attention_forward(out, NULL, pb.qkv, &bias, B, T, C, H, &err), BK_ERR_INVALID);
    assert_int_equal(bk_attention_backward(dqkv, dtable, pb.R, pb.qkv, probs, &bias, B, T, C, H, &err),
                     BK_ERR_INVALID);
    assert_message_has(err.message, "distance");

    /* decreasing positions give negative distances */
    seg[5] = seg[4] - 1;
    assert_int_equal(bk_attention_forward(out, probs, pb.qkv, &bias, B, T, C, H, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "distance p(i=5) - p(j=4) = -1 is negative");

    /* positions of a stream without a table are not read */
    bias.table[1] = NULL;
    assert_int_equal(bk_attention_forward(out, probs, pb.qkv, &bias, B, T, C, H, &err), BK_OK);

    /* the token index itself outgrows a table that is too short */
    bias.distances = T - 1;
    assert_int_equal(bk_attention_forward(out, probs, pb.qkv, &bias, B, T, C, H, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "stream 'token', batch row 0: distance p(i=8) - p(j=0) = 8");

    assert_int_equal(bk_attention_backward(dqkv, dtable, pb.R, pb.qkv, NULL, &bias, B, T, C, H, &err),
                     BK_ERR_INVALID);
    assert_message_has(err.message, "probabilities");
    assert_int_equal(bk_attention_forward(out, probs, pb.qkv, &bias, B, T, C, 3, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "C divisible by H");

    free(out);
    free(probs);
    free(dqkv);
    free(dtok);
    free_problem(&pb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(small_shapes),
        cmocka_unit_test(crosses_block_boundary),
        cmocka_unit_test(batch_of_three),
        cmocka_unit_test(independent_of_thread_count),
        cmocka_unit_test(distances_outside_the_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
