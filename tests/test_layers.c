/* The model's elementwise and reduction layers against double-precision references: GELU-tanh
 * forward and backward (including arguments where tanh saturates and exp overflows), and the
 * parameter-gradient reductions of the matmul bias and of LayerNorm, for shapes that are not
 * multiples of the column block, with any thread count giving the same bits. */
#include "test_util.h"
#include "test_floats.h"

#include "model/expf_math.h"
#include "model/gelu_math.h"
#include "model/layers.h"
#include "model/softmax_math.h"
#include "util/rng.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>

static double gelu_ref(double x)
{
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1.0 + tanh(u));
}

static double gelu_grad_ref(double x)
{
    double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    double t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

static void gelu_matches_tanh_form(void **state)
{
    (void)state;
    enum { N = 20001 };
    static float x[N], y[N], dx[N], dy[N];
    for (int i = 0; i < N; i++) {
        x[i] = -12.0f + 24.0f * (float)i / (N - 1); /* includes 0 and +-12 */
        dy[i] = 1.0f;
        dx[i] = 0.5f; /* backward accumulates */
    }
    bk_gelu_forward(y, x, N);
    bk_gelu_backward(dx, x, dy, N);
    double worst_y = 0, worst_dx = 0;
    for (int i = 0; i < N; i++) {
        double ey = fabs(y[i] - gelu_ref(x[i])), edx = fabs(dx[i] - 0.5 - gelu_grad_ref(x[i]));
        double sy = 1.0 + fabs(gelu_ref(x[i])), sdx = 1.0 + fabs(gelu_grad_ref(x[i]));
        worst_y = fmax(worst_y, ey / sy);
        worst_dx = fmax(worst_dx, edx / sdx);
    }
    if (worst_y > 1e-6 || worst_dx > 2e-6)
        fail_msg("GELU: worst error forward %.3g, backward %.3g (want <= 1e-6, 2e-6)", worst_y, worst_dx);
}

/* The vectorisable exp of GELU against exp in double over its whole domain [-87, 80]: every float of a
 * dense sweep plus the end points, the relative error in units of the last place (2^-23 relative). */
static void expf_poly_matches_exp(void **state)
{
    (void)state;
    double worst = 0.0, at = 0.0;
    for (float a = BK_EXPF_MIN; a <= BK_GELU_EXP_MAX; a = nextafterf(a, INFINITY) + 1e-4f) {
        double want = exp((double)a), got = (double)bk_expf_poly(a);
        double ulps = fabs(got - want) / want * 8388608.0; /* 2^23 */
        if (ulps > worst)
            worst = ulps, at = a;
    }
    const float ends[] = {BK_EXPF_MIN, -0.0f, 0.0f, 1e-30f, -1e-30f, 0.34657359f, -0.34657359f, BK_GELU_EXP_MAX};
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        double want = exp((double)ends[i]), got = (double)bk_expf_poly(ends[i]);
        double ulps = fabs(got - want) / want * 8388608.0;
        if (ulps > worst)
            worst = ulps, at = ends[i];
    }
    print_message("bk_expf_poly: worst relative error %.3f ulp (at a = %.9g)\n", worst, at);
    if (!(worst <= 2.0))
        fail_msg("bk_expf_poly(%.9g): %.3f ulp from exp (want <= 2)", at, worst);
}

/* The softmax's exp of a non-positive argument: the same accuracy, exactly 0 below the range and for
 * -inf, exactly 1 at 0, and a NaN kept. */
static void expf_nonpositive_edges(void **state)
{
    (void)state;
    assert_true(bk_expf_nonpositive(0.0f) == 1.0f);
    assert_true(bk_expf_nonpositive(-0.0f) == 1.0f);
    assert_true(bk_expf_nonpositive(-INFINITY) == 0.0f);
    assert_true(bk_expf_nonpositive(-1000.0f) == 0.0f);
    assert_true(bk_expf_nonpositive(nextafterf(BK_EXPF_MIN, -INFINITY)) == 0.0f);
    assert_true(bk_expf_nonpositive(BK_EXPF_MIN) == bk_expf_poly(BK_EXPF_MIN));
    assert_true(isnan(bk_expf_nonpositive(NAN)));
    for (float x = -86.9f; x < 0.0f; x += 0.01f)
        if (!(fabs((double)bk_expf_nonpositive(x) - exp((double)x)) <= 2.0 * exp((double)x) / 8388608.0))
            fail_msg("bk_expf_nonpositive(%.9g) = %.9g, exp = %.9g", x, bk_expf_nonpositive(x), exp((double)x));
}

static void gelu_finite_at_extremes(void **state)
{
    (void)state;
    const float x[] = {-1e4f, -200.0f, -60.0f, -45.0f, -30.0f, -10.0f, 0.0f, 10.0f, 45.0f, 1e4f};
    enum { N = sizeof x / sizeof x[0] };
    float y[N], dx[N] = {0}, dy[N];
    for (int i = 0; i < N; i++)
        dy[i] = 1.0f;
    bk_gelu_forward(y, x, N);
    bk_gelu_backward(dx, x, dy, N);
    for (int i = 0; i < N; i++) {
        if (!isfinite(y[i]) || !isfinite(dx[i]))
            fail_msg("GELU(%g) = %g, GELU'(%g) = %g: not finite", x[i], y[i], x[i], dx[i]);
        if (x[i] <= -10.0f && (fabsf(y[i]) > 1e-20f || fabsf(dx[i]) > 1e-18f))
            fail_msg("GELU(%g) = %g, GELU'(%g) = %g: want ~0", x[i], y[i], x[i], dx[i]);
        if (x[i] >= 10.0f && (y[i] != x[i] || dx[i] != 1.0f))
            fail_msg("GELU(%g) = %g, GELU'(%g) = %g: want x and 1", x[i], y[i], x[i], dx[i]);
    }
}

/* dbias of bk_matmul_backward is the column sum of dout; N and OC straddle the column block. */
static void matmul_bias_gradient(void **state)
{
    (void)state;
    const int N = 37, C = 5, OCs[] = {1, 63, 64, 65, 130};
    for (size_t k = 0; k < sizeof OCs / sizeof OCs[0]; k++) {
        int OC = OCs[k];
        bk_rng r = {(uint64_t)OC};
        float *dout = normal_floats(&r, (size_t)N * OC, 1.0), *inp = normal_floats(&r, (size_t)N * C, 1.0);
        float *w = normal_floats(&r, (size_t)OC * C, 1.0);
        float *dinp = calloc((size_t)N * C, sizeof(float)), *dw = calloc((size_t)OC * C, sizeof(float));
        float *db1 = calloc((size_t)OC, sizeof(float)), *db2 = calloc((size_t)OC, sizeof(float));
        assert_true(dinp && dw && db1 && db2);
        for (int o = 0; o < OC; o++)
            db1[o] = db2[o] = 0.25f * (float)o;
        omp_set_num_threads(1);
        bk_matmul_backward(dinp, dw, db1, dout, inp, w, N, C, OC);
        omp_set_num_threads(3);
        bk_matmul_backward(dinp, dw, db2, dout, inp, w, N, C, OC);
        for (int o = 0; o < OC; o++) {
            double want = 0.25 * o;
            for (int n = 0; n < N; n++)
                want += dout[(size_t)n * OC + o];
            if (fabs(db1[o] - want) > 1e-5 * (1.0 + fabs(want)))
                fail_msg("OC=%d: dbias[%d] = %.9g, want %.9g", OC, o, db1[o], want);
        }
        assert_memory_equal(db1, db2, (size_t)OC * sizeof(float));
        free(dout), free(inp), free(w), free(dinp), free(dw), free(db1), free(db2);
    }
}

/* LayerNorm's dweight = sum_n norm[n,c] dy[n,c] and dbias = sum_n dy[n,c]; dinp checked by central
 * differences of L = sum y . R. */
static void layernorm_gradients(void **state)
{
    (void)state;
    const int N = 29, Cs[] = {3, 64, 100};
    for (size_t k = 0; k < sizeof Cs / sizeof Cs[0]; k++) {
        int C = Cs[k];
        bk_rng r = {100u + (uint64_t)C};
        float *x = normal_floats(&r, (size_t)N * C, 2.0), *R = normal_floats(&r, (size_t)N * C, 1.0);
        float *w = normal_floats(&r, (size_t)C, 1.0), *b = normal_floats(&r, (size_t)C, 1.0);
        float *y = malloc((size_t)N * C * sizeof(float)), *mean = malloc(N * sizeof(float));
        float *rstd = malloc(N * sizeof(float)), *dx = calloc((size_t)N * C, sizeof(float));
        float *dw1 = calloc(C, sizeof(float)), *db1 = calloc(C, sizeof(float));
        float *dw2 = calloc(C, sizeof(float)), *db2 = calloc(C, sizeof(float));
        assert_true(y && mean && rstd && dx && dw1 && db1 && dw2 && db2);
        bk_layernorm_forward(y, mean, rstd, x, w, b, N, C);
        omp_set_num_threads(1);
        bk_layernorm_backward(dx, dw1, db1, R, x, w, mean, rstd, N, C);
        omp_set_num_threads(3);
        memset(dx, 0, (size_t)N * C * sizeof(float));
        bk_layernorm_backward(dx, dw2, db2, R, x, w, mean, rstd, N, C);
        assert_memory_equal(dw1, dw2, (size_t)C * sizeof(float));
        assert_memory_equal(db1, db2, (size_t)C * sizeof(float));
        for (int c = 0; c < C; c++) {
            double want_w = 0, want_b = 0;
            for (int n = 0; n < N; n++) {
                double dy = R[(size_t)n * C + c];
                want_w += ((double)x[(size_t)n * C + c] - mean[n]) * rstd[n] * dy;
                want_b += dy;
            }
            if (fabs(dw1[c] - want_w) > 1e-4 * (1.0 + fabs(want_w)) || fabs(db1[c] - want_b) > 1e-5 * (1.0 + fabs(want_b)))
                fail_msg("C=%d: dweight[%d] = %g (want %g), dbias = %g (want %g)", C, c, dw1[c], want_w, db1[c], want_b);
        }
        /* dinp by central differences in double on one row */
        int n = N / 2;
        for (int c = 0; c < C; c += C > 8 ? C / 7 : 1) {
            double lp = 0, lm = 0, h = 1e-3;
            for (int sgn = -1; sgn <= 1; sgn += 2) {
                double xs[128], m = 0, v = 0, loss = 0;
                for (int j = 0; j < C; j++)
                    xs[j] = x[(size_t)n * C + j] + (j == c ? sgn * h : 0.0);
                for (int j = 0; j < C; j++)
                    m += xs[j];
                m /= C;
                for (int j = 0; j < C; j++)
                    v += (xs[j] - m) * (xs[j] - m);
                v /= C;
                for (int j = 0; j < C; j++)
                    loss += ((xs[j] - m) / sqrt(v + 1e-5) * w[j] + b[j]) * R[(size_t)n * C + j];
                if (sgn < 0)
                    lm = loss;
                else
                    lp = loss;
            }
            double fd = (lp - lm) / (2 * h), got = dx[(size_t)n * C + c];
            if (fabs(got - fd) > 2e-3 * (1.0 + fabs(fd)))
                fail_msg("C=%d: dinp[%d,%d] = %g, central difference %g", C, n, c, got, fd);
        }
        free(x), free(R), free(w), free(b), free(y), free(mean), free(rstd), free(dx);
        free(dw1), free(db1), free(dw2), free(db2);
    }
}

/* The lane reductions of model/softmax_math.h against sums in double, for every length 0..70 (full
 * lane steps and every tail), and the cross-entropy row (built on them) against log-sum-exp in double. */
static void lane_reductions_match_references(void **state)
{
    (void)state;
    bk_rng r = {7u};
    float *a = normal_floats(&r, 70, 3.0), *b = normal_floats(&r, 70, 1.0);
    for (int n = 0; n <= 70; n++) {
        double sum = 0.0, dot = 0.0, abs_sum = 0.0;
        float max = -INFINITY;
        for (int j = 0; j < n; j++) {
            sum += a[j], abs_sum += fabs(a[j]);
            dot += (double)a[j] * b[j];
            max = a[j] > max ? a[j] : max;
        }
        float got_sum = bk_sum_lanes(a, n), got_max = bk_max_lanes(a, n);
        double got_dot = bk_dot_lanes(a, b, n);
        if (fabs(got_sum - sum) > 1e-6 * (abs_sum + 1.0))
            fail_msg("bk_sum_lanes n=%d: %.9g, in double %.9g", n, (double)got_sum, sum);
        if (got_max != max)
            fail_msg("bk_max_lanes n=%d: %.9g, want %.9g", n, (double)got_max, (double)max);
        if (fabs(got_dot - dot) > 1e-12 * (fabs(dot) + 1.0))
            fail_msg("bk_dot_lanes n=%d: %.17g, in double %.17g", n, got_dot, dot);
    }
    const float nan_row[3] = {1.0f, NAN, 2.0f};
    assert_true(bk_max_lanes(nan_row, 3) == 2.0f);

    const int Vs[] = {1, 7, 8, 9, 256, 259};
    for (size_t k = 0; k < sizeof Vs / sizeof Vs[0]; k++) {
        const int V = Vs[k];
        float *z = normal_floats(&r, (size_t)V, 5.0), *probs = malloc((size_t)V * sizeof(float)), loss;
        assert_non_null(probs);
        double m = -INFINITY, total = 0.0;
        for (int v = 0; v < V; v++)
            m = z[v] > m ? z[v] : m;
        for (int v = 0; v < V; v++)
            total += exp((double)z[v] - m);
        const int target = V / 2;
        const double want = log(total) - ((double)z[target] - m);
        bk_crossentropy_row(z, V, target, &loss, probs);
        if (fabs(loss - want) > 1e-6 * (1.0 + fabs(want)))
            fail_msg("crossentropy V=%d: loss %.9g, in double %.9g", V, (double)loss, want);
        for (int v = 0; v < V; v++) {
            /* the float argument z - max carries up to half an ulp of |z - max|, which exp turns into a
             * relative error of that size; the polynomial and the scaling add a few ulp */
            const double p = exp((double)z[v] - m) / total, arg = fabs((double)z[v] - m);
            if (fabs(probs[v] - p) > (arg * 6e-8 + 4e-7) * p + 1e-30)
                fail_msg("crossentropy V=%d: probability %d = %.9g, in double %.9g", V, v, (double)probs[v], p);
        }
        free(z), free(probs);
    }
    free(a), free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gelu_matches_tanh_form),
        cmocka_unit_test(expf_poly_matches_exp),
        cmocka_unit_test(expf_nonpositive_edges),
        cmocka_unit_test(gelu_finite_at_extremes),
        cmocka_unit_test(matmul_bias_gradient),
        cmocka_unit_test(layernorm_gradients),
        cmocka_unit_test(lane_reductions_match_references),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
