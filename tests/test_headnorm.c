/* QK-norm's backend operation, headnorm_forward/backward (model/backend.h): RMSNorm of the query or key heads
 * of q/k/v product rows, on the CPU backend, on the emulated device backend and on the CUDA backend when a GPU
 * answers (otherwise those cases print why and are skipped). Checked: at G = 1, stride = C it gives
 * rmsnorm_forward/backward's bits; on the strided layout of N = 37 rows of (H + 2 KV) hd floats (H = 4 query
 * heads, KV = 2 key heads, hd = 16) it matches a float64 reference written here (itself checked by central
 * differences of sum(out r)), writes only its rows (out and dinp) and accumulates into dweight; the emulated backend
 * gives the CPU's bits where its RMSNorm does (tests/test_backend_layers.c); invalid sizes are refused. */
#include "test_util.h"
#include "test_backend.h"
#include "test_floats.h"

#include "gpu/dev.h" /* bk_emulated_thread_order */
#include "model/backend.h"
#include "util/rng.h"

#include <math.h>
#include <stdlib.h>

enum { N = 37, H = 4, KV = 2, HD = 16, R = (H + 2 * KV) * HD };
#define EPS 1e-6f
#define SENTINEL 1234.5f

/* a backend buffer with n floats of host (zeroed when host is NULL) */
static float *put_floats(bk_backend *be, const float *host, size_t n)
{
    return (float *)put(be, host, n * sizeof(float));
}

/* max_i |got - want| / (|want| + rms(want)) <= tol */
static void expect_close(const char *what, const float *got, const double *want, size_t n, double tol)
{
    double ss = 0.0, worst = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        ss += want[i] * want[i];
    const double rms = sqrt(ss / (double)n);
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - want[i]) / (fabs(want[i]) + rms + 1e-30);
        if (!(e <= worst))
            worst = e, at = i;
    }
    if (!(worst <= tol))
        fail_msg("%s: element %zu is %.9g, expected %.9g: relative error %.3g exceeds %.3g (of %zu values)", what, at,
                 got[at], want[at], worst, tol, n);
}

static double *to_doubles(const float *x, size_t n)
{
    double *d = malloc(n * sizeof *d);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

/* --- G = 1, stride = C: plain RMSNorm's bits ----------------------------------------------------------- */

static void plain_case(bk_backend *be, int n, int c, uint64_t seed)
{
    const size_t nc = (size_t)n * c;
    bk_rng r = biaskit_rng_seeded(seed);
    float *x = normal_floats(&r, nc, 2.0), *w = normal_floats(&r, (size_t)c, 1.0), *dy = normal_floats(&r, nc, 1.0);
    float *dx0 = normal_floats(&r, nc, 0.5), *dw0 = normal_floats(&r, (size_t)c, 0.5);
    float *x_d = put_floats(be, x, nc), *w_d = put_floats(be, w, (size_t)c), *dy_d = put_floats(be, dy, nc);
    float *zeros = calloc(nc, sizeof *zeros);
    assert_non_null(zeros);
    /* [0] rmsnorm, accumulating into a zero dinp; [1] headnorm, writing its rows over dx0 */
    float *o[2], *s[2], *dx[2], *dw[2];
    for (int k = 0; k < 2; k++) {
        o[k] = put_floats(be, NULL, nc), s[k] = put_floats(be, NULL, (size_t)n);
        dx[k] = put_floats(be, k ? dx0 : zeros, nc), dw[k] = put_floats(be, dw0, (size_t)c);
    }
    OK(be->rmsnorm_forward(be, o[0], s[0], x_d, w_d, n, c, EPS, &err_));
    OK(be->headnorm_forward(be, o[1], s[1], x_d, w_d, n, 1, c, c, EPS, &err_));
    OK(be->rmsnorm_backward(be, dx[0], dw[0], dy_d, x_d, w_d, s[0], n, c, &err_));
    OK(be->headnorm_backward(be, dx[1], dw[1], dy_d, x_d, w_d, s[0], n, 1, c, c, &err_));
    const struct {
        const char *what;
        float *const *p;
        size_t n;
    } outputs[] = {{"out", o, nc}, {"rstd", s, (size_t)n}, {"dinp", dx, nc}, {"dweight", dw, (size_t)c}};
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) {
        float *want = get(be, outputs[i].p[0], outputs[i].n), *got = get(be, outputs[i].p[1], outputs[i].n);
        char what[96];
        snprintf(what, sizeof what, "%s headnorm %s at G = 1 (%d x %d) against rmsnorm's", be->name,
                 outputs[i].what, n, c);
        expect_same(what, got, want, outputs[i].n);
        free(want), free(got);
    }
    for (int k = 0; k < 2; k++)
        be->release(be, o[k]), be->release(be, s[k]), be->release(be, dx[k]), be->release(be, dw[k]);
    be->release(be, x_d), be->release(be, w_d), be->release(be, dy_d);
    free(x), free(w), free(dy), free(dx0), free(dw0), free(zeros);
}

static void plain_rows_are_rmsnorm(void **state)
{
    bk_backend *be = backend_of(state);
    plain_case(be, 41, 96, 1);
    plain_case(be, 111, 300, 2); /* lanes with a tail, rows wider than a block */
    plain_case(be, 5, 3, 3);     /* fewer channels than lanes */
}

/* --- the strided layout: the q heads (G = H at offset 0) and the k heads (G = KV at offset H hd) -------- */

typedef struct heads_in {
    float *qkvr, *wq, *wk, *dout, *dx0, *dwq0, *dwk0;
} heads_in;

/* what a backend gives: out after the q call alone and after both; the rstds; dinp, dwq, dwk computed
 * onto dx0, dwq0, dwk0 (dinp's rows written, the weights' gradients accumulated) and onto zeros (zero) */
typedef struct heads_out {
    float *out_q, *out, *rq, *rk, *dinp, *dwq, *dwk, *dinp_zero, *dwq_zero, *dwk_zero;
} heads_out;

static heads_in heads_inputs(void)
{
    bk_rng r = biaskit_rng_seeded(7);
    heads_in in;
    in.qkvr = normal_floats(&r, (size_t)N * R, 1.5);
    in.wq = normal_floats(&r, HD, 1.0), in.wk = normal_floats(&r, HD, 1.0);
    in.dout = normal_floats(&r, (size_t)N * R, 1.0), in.dx0 = normal_floats(&r, (size_t)N * R, 0.5);
    in.dwq0 = normal_floats(&r, HD, 0.5), in.dwk0 = normal_floats(&r, HD, 0.5);
    for (size_t i = 0; i < (size_t)N * R; i++)
        in.qkvr[i] += 0.3f; /* rows whose mean is not 0 */
    in.qkvr[0] = 0.0f, in.qkvr[1] = -0.0f;
    return in;
}

static void heads_free(heads_in *in, heads_out *o)
{
    free(in->qkvr), free(in->wq), free(in->wk), free(in->dout), free(in->dx0), free(in->dwq0), free(in->dwk0);
    free(o->out_q), free(o->out), free(o->rq), free(o->rk), free(o->dinp), free(o->dwq), free(o->dwk);
    free(o->dinp_zero), free(o->dwq_zero), free(o->dwk_zero);
}

/* the backward of both groups onto dinp, dwq and dwk (backend buffers) */
static void heads_backward(bk_backend *be, float *dinp, float *dwq, float *dwk, const float *dout, const float *qkvr,
                           const float *wq, const float *wk, const float *rq, const float *rk)
{
    OK(be->headnorm_backward(be, dinp, dwq, dout, qkvr, wq, rq, N, H, HD, R, &err_));
    OK(be->headnorm_backward(be, dinp + H * HD, dwk, dout + H * HD, qkvr + H * HD, wk, rk, N, KV, HD, R, &err_));
}

static heads_out heads_run(bk_backend *be, const heads_in *in)
{
    const size_t n = (size_t)N * R;
    heads_out o;
    float *sentinel = malloc(n * sizeof *sentinel);
    assert_non_null(sentinel);
    for (size_t i = 0; i < n; i++)
        sentinel[i] = SENTINEL;
    float *x = put_floats(be, in->qkvr, n), *wq = put_floats(be, in->wq, HD), *wk = put_floats(be, in->wk, HD);
    float *dy = put_floats(be, in->dout, n), *out = put_floats(be, sentinel, n);
    float *rq = put_floats(be, NULL, (size_t)N * H), *rk = put_floats(be, NULL, (size_t)N * KV);
    OK(be->headnorm_forward(be, out, rq, x, wq, N, H, HD, R, EPS, &err_));
    o.out_q = get(be, out, n);
    OK(be->headnorm_forward(be, out + H * HD, rk, x + H * HD, wk, N, KV, HD, R, EPS, &err_));
    o.out = get(be, out, n), o.rq = get(be, rq, (size_t)N * H), o.rk = get(be, rk, (size_t)N * KV);
    float *dx = put_floats(be, in->dx0, n), *dwq = put_floats(be, in->dwq0, HD), *dwk = put_floats(be, in->dwk0, HD);
    heads_backward(be, dx, dwq, dwk, dy, x, wq, wk, rq, rk);
    o.dinp = get(be, dx, n), o.dwq = get(be, dwq, HD), o.dwk = get(be, dwk, HD);
    OK(be->zero(be, dx, n * sizeof(float), &err_));
    OK(be->zero(be, dwq, HD * sizeof(float), &err_));
    OK(be->zero(be, dwk, HD * sizeof(float), &err_));
    heads_backward(be, dx, dwq, dwk, dy, x, wq, wk, rq, rk);
    o.dinp_zero = get(be, dx, n), o.dwq_zero = get(be, dwq, HD), o.dwk_zero = get(be, dwk, HD);
    float *bufs[] = {x, wq, wk, dy, out, rq, rk, dx, dwq, dwk};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->release(be, bufs[i]);
    free(sentinel);
    return o;
}

/* One row in float64: y = x s w, s = 1 / sqrt(mean(x^2) + eps); with dy: dx += s (w dy) - x s^3 mean(w dy x),
 * dw += x s dy (y, dx, dw may be NULL). Returns sum(y dy). */
static double ref_row(const double *x, const double *w, const double *dy, double *y, double *dx, double *dw,
                      double *rstd)
{
    double ss = 0.0, dot = 0.0, l = 0.0;
    for (int c = 0; c < HD; c++)
        ss += x[c] * x[c], dot += w[c] * dy[c] * x[c];
    const double s = 1.0 / sqrt(ss / HD + (double)EPS), k = dot / HD * s * s * s;
    for (int c = 0; c < HD; c++) {
        l += x[c] * s * w[c] * dy[c];
        if (y)
            y[c] = x[c] * s * w[c];
        if (dx)
            dx[c] += s * w[c] * dy[c] - x[c] * k;
        if (dw)
            dw[c] += x[c] * s * dy[c];
    }
    if (rstd)
        *rstd = s;
    return l;
}

/* offset of row r of a group of g heads that starts at column `first` */
static size_t row_at(int r, int g, int first)
{
    return (size_t)(r / g) * R + (size_t)first + (size_t)(r % g) * HD;
}

/* The float64 reference of both groups: out (outside the rows: SENTINEL), rstd of q then k, dinp (from 0),
 * dwq, dwk; and sum(out dout). */
static double ref_heads(const double *x, const double *wq, const double *wk, const double *dy, double *out,
                        double *rstd, double *dinp, double *dwq, double *dwk)
{
    const struct {
        int g, first;
        const double *w;
        double *dw;
    } groups[2] = {{H, 0, wq, dwq}, {KV, H * HD, wk, dwk}};
    double l = 0.0;
    for (size_t i = 0; i < (size_t)N * R; i++)
        out[i] = SENTINEL, dinp[i] = 0.0;
    for (int c = 0; c < HD; c++)
        dwq[c] = dwk[c] = 0.0;
    for (int k = 0, at_rstd = 0; k < 2; k++)
        for (int r = 0; r < N * groups[k].g; r++) {
            const size_t at = row_at(r, groups[k].g, groups[k].first);
            l += ref_row(x + at, groups[k].w, dy + at, out + at, dinp + at, groups[k].dw, &rstd[at_rstd++]);
        }
    return l;
}

/* The reference's gradients against central differences of its sum(out r): every q and k input, both weights. */
static void reference_is_its_gradient(void **state)
{
    (void)state;
    heads_in in = heads_inputs();
    const size_t n = (size_t)N * R;
    double *x = to_doubles(in.qkvr, n), *wq = to_doubles(in.wq, HD), *wk = to_doubles(in.wk, HD);
    double *r = to_doubles(in.dout, n), *out = malloc(n * sizeof *out), *dinp = malloc(n * sizeof *dinp);
    double *fd = calloc(n, sizeof *fd), rstd[N * (H + KV)], dwq[HD], dwk[HD], fdw[2 * HD], t[HD], tw[2 * HD];
    assert_non_null(out);
    assert_non_null(dinp);
    assert_non_null(fd);
    ref_heads(x, wq, wk, r, out, rstd, dinp, dwq, dwk);
    const double h = 1e-5;
    for (int k = 0; k < 2; k++) { /* x: only its own row's term of the sum moves */
        const int g = k ? KV : H, first = k ? H * HD : 0;
        const double *w = k ? wk : wq;
        for (int row = 0; row < N * g; row++) {
            const size_t at = row_at(row, g, first);
            for (int c = 0; c < HD; c++) {
                memcpy(t, x + at, sizeof t);
                t[c] = x[at + c] + h;
                const double up = ref_row(t, w, r + at, NULL, NULL, NULL, NULL);
                t[c] = x[at + c] - h;
                fd[at + c] = (up - ref_row(t, w, r + at, NULL, NULL, NULL, NULL)) / (2 * h);
            }
        }
    }
    for (int c = 0; c < 2 * HD; c++) { /* weights: every row of their group */
        double *w = c < HD ? wq : wk, sum[2];
        const int g = c < HD ? H : KV, first = c < HD ? 0 : H * HD;
        for (int side = 0; side < 2; side++) {
            memcpy(tw, w, HD * sizeof *w);
            tw[c % HD] += side ? -h : h;
            sum[side] = 0.0;
            for (int row = 0; row < N * g; row++) {
                const size_t at = row_at(row, g, first);
                sum[side] += ref_row(x + at, tw, r + at, NULL, NULL, NULL, NULL);
            }
        }
        fdw[c] = (sum[0] - sum[1]) / (2 * h);
    }
    float *f = malloc((n + 2 * HD) * sizeof *f);
    assert_non_null(f);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)dinp[i];
    for (int c = 0; c < HD; c++)
        f[n + c] = (float)dwq[c], f[n + HD + c] = (float)dwk[c];
    /* the float copies of the analytic gradient: 6e-8; the differences' truncation and rounding: < 1e-8 */
    expect_close("reference dinp against central differences", f, fd, n, 1e-6);
    expect_close("reference dweight against central differences", f + n, fdw, 2 * HD, 1e-6);
    free(x), free(wq), free(wk), free(r), free(out), free(dinp), free(fd), free(f);
    heads_free(&in, &(heads_out){0});
}

/* columns [from, R) of every token equal `want`'s bit for bit */
static void expect_untouched(const char *what, const float *got, const float *want, int from)
{
    for (int n = 0; n < N; n++)
        for (int c = from; c < R; c++)
            if (memcmp(&got[n * R + c], &want[n * R + c], sizeof(float)) != 0)
                fail_msg("%s: token %d column %d is %.9g, expected it untouched (%.9g)", what, n, c, got[n * R + c],
                         want[n * R + c]);
}

static void strided_heads_match_reference(void **state)
{
    bk_backend *be = backend_of(state);
    heads_in in = heads_inputs();
    heads_out o = heads_run(be, &in);
    const size_t n = (size_t)N * R;
    double *x = to_doubles(in.qkvr, n), *wq = to_doubles(in.wq, HD), *wk = to_doubles(in.wk, HD);
    double *dy = to_doubles(in.dout, n), *out = malloc(n * sizeof *out), *dinp = malloc(n * sizeof *dinp);
    double rstd[N * (H + KV)], dwq[HD], dwk[HD];
    assert_non_null(out);
    assert_non_null(dinp);
    ref_heads(x, wq, wk, dy, out, rstd, dinp, dwq, dwk);

    float *sentinel = copy_floats(o.out, n);
    for (size_t i = 0; i < n; i++)
        sentinel[i] = SENTINEL;
    expect_untouched("out after the q heads alone (k and v parts)", o.out_q, sentinel, H * HD);
    expect_untouched("out after the q and k heads (v part)", o.out, sentinel, (H + KV) * HD);
    /* forward: float sums of squares in double and float products against float64: 1e-6 */
    expect_close("out", o.out, out, n, 1e-6);
    expect_close("rstd of the q heads", o.rq, rstd, (size_t)N * H, 1e-6);
    expect_close("rstd of the k heads", o.rk, rstd + N * H, (size_t)N * KV, 1e-6);

    /* backward (from the backend's own rstd, float): 1e-5 */
    expect_close("dinp from zero", o.dinp_zero, dinp, n, 1e-5);
    expect_close("dweight of q from zero", o.dwq_zero, dwq, HD, 1e-5);
    expect_close("dweight of k from zero", o.dwk_zero, dwk, HD, 1e-5);
    /* onto non-zero values: the q and k rows are written (what they get from zero), the v part keeps its
     * values; the weights' gradients get one float addition of what they get from zero */
    float *sum = copy_floats(in.dx0, n);
    for (size_t i = 0; i < n; i++)
        if ((int)(i % R) < (H + KV) * HD)
            sum[i] = o.dinp_zero[i];
    expect_same("dinp's rows written over non-zero values", o.dinp, sum, n);
    float wsum[2 * HD], wgot[2 * HD];
    for (int c = 0; c < HD; c++) {
        wsum[c] = in.dwq0[c] + o.dwq_zero[c], wsum[HD + c] = in.dwk0[c] + o.dwk_zero[c];
        wgot[c] = o.dwq[c], wgot[HD + c] = o.dwk[c];
    }
    expect_same("dweight accumulated onto non-zero values", wgot, wsum, 2 * HD);

    free(x), free(wq), free(wk), free(dy), free(out), free(dinp), free(sentinel), free(sum);
    heads_free(&in, &o);
}

/* --- the emulated backend against the CPU --------------------------------------------------------------- */

static void strided_heads_are_cpu_bits(void **state)
{
    bk_backend *be = backend_of(state);
    heads_in in = heads_inputs();
    heads_out want = heads_run(bk_backend_cpu(), &in);
    const size_t n = (size_t)N * R;
    for (int order = 0; order < 2; order++) { /* the block programs' threads ascending, then descending */
        bk_emulated_thread_order = order;
        heads_out got = heads_run(be, &in);
        expect_same("out", got.out, want.out, n);
        expect_same("rstd of the q heads", got.rq, want.rq, (size_t)N * H);
        expect_same("rstd of the k heads", got.rk, want.rk, (size_t)N * KV);
        expect_same("dinp", got.dinp, want.dinp, n);
        /* dweight: double sums over the rows in chunks of 32 instead of one run (as RMSNorm's): 1e-6 */
        double *w = to_doubles(want.dwq, HD);
        expect_close("dweight of q", got.dwq, w, HD, 1e-6);
        free(w), w = to_doubles(want.dwk, HD);
        expect_close("dweight of k", got.dwk, w, HD, 1e-6);
        free(w);
        heads_free(&(heads_in){0}, &got);
    }
    bk_emulated_thread_order = 0;
    heads_free(&in, &want);
}

/* --- refusals ------------------------------------------------------------------------------------------- */

static void invalid_sizes_are_refused(void **state)
{
    bk_backend *be = backend_of(state);
    const struct {
        int n, g, hd, stride;
        const char *says;
    } bad[] = {{N, 0, HD, R, "37 tokens of 0 heads of 16 channels in rows of 128 floats"},
               {N, H, 0, R, "37 tokens of 4 heads of 0 channels"},
               {N, H, HD, H * HD - 1, "37 tokens of 4 heads of 16 channels in rows of 63 floats"},
               {-1, H, HD, R, "-1 tokens"}};
    float buf[1] = {0.0f};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (int backward = 0; backward < 2; backward++) {
            bk_error err;
            bk_error_clear(&err);
            const int rc = backward ? be->headnorm_backward(be, buf, buf, buf, buf, buf, buf, bad[i].n, bad[i].g,
                                                            bad[i].hd, bad[i].stride, &err)
                                    : be->headnorm_forward(be, buf, buf, buf, buf, bad[i].n, bad[i].g, bad[i].hd,
                                                           bad[i].stride, EPS, &err);
            assert_int_equal(rc, BK_ERR_INVALID);
            char op[64];
            snprintf(op, sizeof op, "%s %s", be->name, backward ? "headnorm_backward" : "headnorm_forward");
            assert_message_has(err.message, op);
            assert_message_has(err.message, bad[i].says);
            assert_message_has(err.message, "expected");
        }
}

/* --- groups --------------------------------------------------------------------------------------------- */

static int cpu_setup(void **state)
{
    static fixture f;
    f.kind = BK_BACKEND_CPU, f.be = bk_backend_cpu();
    *state = &f;
    return 0;
}

#define CASES                                                                                                   \
    cmocka_unit_test(plain_rows_are_rmsnorm), cmocka_unit_test(strided_heads_match_reference),                  \
        cmocka_unit_test(invalid_sizes_are_refused)

int main(void)
{
    const struct CMUnitTest host[] = {cmocka_unit_test(reference_is_its_gradient)};
    const struct CMUnitTest cpu[] = {CASES};
    const struct CMUnitTest emulated[] = {CASES, cmocka_unit_test(strided_heads_are_cpu_bits)};
    const struct CMUnitTest cuda[] = {CASES};
    int failed = cmocka_run_group_tests_name("reference", host, NULL, NULL);
    failed += cmocka_run_group_tests_name("cpu", cpu, cpu_setup, NULL);
    failed += cmocka_run_group_tests_name("emulated", emulated, emulated_setup, teardown);
    failed += cmocka_run_group_tests_name("cuda", cuda, cuda_setup, teardown);
    return failed ? 1 : 0;
}
