/* The model's matrix products through bk_sgemm (core/util/blas.h), at the exact shapes and leading
 * dimensions the engine uses, for the three benchmark sizes of docs/performance.md; bench/blas.sh runs
 * it once per BLAS build. Usage:
 *
 *     bench_gemm [--size a|b|c|all] [--reps N] [--min-time S] [--no-big] [--kernels LIST]
 *
 * Per size, N = B*T rows, and for each linear layer (qkv C->3C, attention projection C->C, fc C->4C,
 * fc projection 4C->C, per block; the tied head C->V once) as core/model/layers.c calls them:
 *   fwd   out = inp W^T          NoTrans, Trans   N x OC x Cin  (beta 1 with a bias, 0 for the head)
 *   dinp  dinp += dout W         NoTrans, NoTrans N x Cin x OC
 *   dw    dW += dout^T inp       Trans, NoTrans   OC x Cin x N
 * timed outside any parallel region (the BLAS's own threads), and the attention's per-head products
 * over 64-row query blocks (causal, no window: block i0..i1 sees keys 0..i1-1) as core/cpu/attention.c
 * calls them, each kind over every block of every (batch, head) in one `omp parallel for` over B*H, so
 * that each product runs single-threaded inside the region:
 *   qk    S = scale Q K^T        NoTrans, Trans   rows x i1 x hd   lda 3C, ldb 3C, ldc T
 *   pv    O = P V                NoTrans, NoTrans rows x hd x i1   lda T, ldb 3C, ldc C
 *   dp    dP = dO V^T            NoTrans, Trans   rows x i1 x hd   lda C, ldb 3C, ldc T
 *   dv    dV += P^T dO           Trans, NoTrans   i1 x hd x rows   lda T, ldb C, ldc 3C
 *   dq    dQ += scale dS K       NoTrans, NoTrans rows x hd x i1   lda T, ldb 3C, ldc 3C
 *   dk    dK += scale dS^T Q     Trans, NoTrans   i1 x hd x rows   lda T, ldb 3C, ldc 3C
 * Each time is the minimum over at least --reps calls (default 3) after one warm-up call, and more (up
 * to 200) until the timed calls add up to --min-time seconds (default 0.3): the machine may be shared,
 * and a minimum over many short calls finds the ones no other job interrupted. Output: one line per
 * shape, "gemm key=value ...", then per size the products of one training
 * step ("step ..."): each linear product times its count (layers, or 1 for the head), each attention
 * kind times the layers; then the 2048^3 SGEMM rate ("big ..."), outside any region, and the machine's
 * FMA peak with the same threads ("peak ...": fma_peak.h, FMA chains in registers).
 *
 * --kernels times the linear products with each of a comma-separated list of kernels (cpu/gemm.h,
 * bk_gemm_with): blas (bk_sgemm, the default list), avx512, avx2, plain (the engine's; those this CPU
 * cannot run are refused), interleaved call by call so that a shared machine's slow moments fall on
 * all of them alike; each linear line then carries kernels=..., the step line per kernels
 * linear_ms_<kernels>= and linear_gflops_<kernels>= (its linear_ms and total_ms: the list's first). The
 * attention's products always go through bk_sgemm. Unlike bench_train, bench_gemm does not restart with
 * OPENBLAS_CORETYPE set (util/blas.h): set it. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime (bench_util.h) */
#include "cpu/gemm.h"
#include "cpu/tile_gemm.h"
#include "util/blas.h"

#include "bench_util.h"
#include "fma_peak.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ATT_BLOCK 64 /* BK_ATT_BLOCK of core/cpu/attention.c */
#define VOCAB 256

typedef struct size_spec {
    const char *name;
    int L, C, H, T, B;
} size_spec;

static const size_spec SIZES[] = {
    {"a", 4, 256, 8, 256, 8},
    {"b", 6, 512, 8, 512, 4},
    {"c", 2, 128, 4, 128, 16},
};

static int reps = 3;          /* at least this many timed calls per shape */
static double min_time = 0.3; /* and more, up to 200, until they add up to this many seconds */

static float *alloc_filled(size_t n, uint64_t seed)
{
    float *x = malloc(n * sizeof *x);
    if (!x) {
        fprintf(stderr, "bench_gemm: cannot allocate %zu floats\n", n);
        exit(1);
    }
    fill(x, n, seed);
    for (size_t k = 0; k < n; k++) /* small values: beta = 1 accumulations stay far from overflow */
        x[k] *= 0.01f;
    return x;
}

static const char *trans_name(enum CBLAS_TRANSPOSE a, enum CBLAS_TRANSPOSE b)
{
    return a == CblasTrans ? (b == CblasTrans ? "TT" : "TN") : (b == CblasTrans ? "NT" : "NN");
}

/* the kernels to time the linear products with (--kernels), BK_GEMM_BLAS or BK_TILE_GEMM_* */
static int kernels[4] = {BK_GEMM_BLAS};
static int n_kernels = 1;

/* one linear product with each of the kernels, interleaved: min time in seconds over reps calls each */
static void time_linear(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                        int accumulate, float *C, int ldc, double *best)
{
    double spent = 0;
    for (int k = 0; k < n_kernels; k++)
        best[k] = 1e30;
    for (int r = 0; r <= reps || (spent < min_time && r <= 200); r++)
        for (int k = 0; k < n_kernels; k++) {
            double t0 = now();
            bk_gemm_with(kernels[k], ta, tb, M, N, K, 1.0f, A, lda, B, ldb, accumulate, C, ldc);
            double t = now() - t0;
            if (r > 0) { /* r = 0: warm-up */
                spent += t / n_kernels;
                if (t < best[k])
                    best[k] = t;
            }
        }
}

enum { QK, PV, DP, DV, DQ, DK, ATT_KINDS };
static const char *const ATT_NAME[ATT_KINDS] = {"qk", "pv", "dp", "dv", "dq", "dk"};

/* every block of every (b, h) of one attention product kind, in one parallel loop; returns seconds,
 * sets *flops */
static double attention_kind(int kind, const size_spec *s, const float *qkv, float *dqkv, float *probs, float *dS,
                             const float *dout, float *out, double *flops)
{
    const int C = s->C, H = s->H, T = s->T, B = s->B, hd = C / H, C3 = 3 * C;
    const float scale = 1.0f;
    double f = 0;
    for (int i0 = 0; i0 < T; i0 += ATT_BLOCK) {
        int i1 = i0 + ATT_BLOCK < T ? i0 + ATT_BLOCK : T;
        f += 2.0 * (i1 - i0) * (double)i1 * hd;
    }
    *flops = f * B * H;
    double t0 = now();
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H;
        const size_t base = (size_t)b * T * C3 + (size_t)h * hd;
        const float *q = qkv + base, *k = q + C, *v = q + 2 * C;
        float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
        float *mine = dS + (size_t)omp_get_thread_num() * ATT_BLOCK * (size_t)T;
        for (int i0 = 0; i0 < T; i0 += ATT_BLOCK) {
            const int i1 = i0 + ATT_BLOCK < T ? i0 + ATT_BLOCK : T, rows = i1 - i0;
            float *P = probs + ((size_t)bh * T + i0) * T;
            const float *qb = q + (size_t)i0 * C3;
            const float *dO = dout + ((size_t)b * T + i0) * C + (size_t)h * hd;
            float *o = out + ((size_t)b * T + i0) * C + (size_t)h * hd;
            switch (kind) {
            case QK:
                bk_sgemm(CblasNoTrans, CblasTrans, rows, i1, hd, scale, qb, C3, k, C3, 0.0f, P, T);
                break;
            case PV:
                bk_sgemm(CblasNoTrans, CblasNoTrans, rows, hd, i1, 1.0f, P, T, v, C3, 0.0f, o, C);
                break;
            case DP:
                bk_sgemm(CblasNoTrans, CblasTrans, rows, i1, hd, 1.0f, dO, C, v, C3, 0.0f, mine, T);
                break;
            case DV:
                bk_sgemm(CblasTrans, CblasNoTrans, i1, hd, rows, 1.0f, P, T, dO, C, 1.0f, dv, C3);
                break;
            case DQ:
                bk_sgemm(CblasNoTrans, CblasNoTrans, rows, hd, i1, scale, mine, T, k, C3, 1.0f, dq + (size_t)i0 * C3,
                         C3);
                break;
            default:
                bk_sgemm(CblasTrans, CblasNoTrans, i1, hd, rows, scale, mine, T, qb, C3, 1.0f, dk, C3);
                break;
            }
        }
    }
    return now() - t0;
}

static const char *const ATT_TRANS[ATT_KINDS] = {"NT", "NN", "NT", "TN", "NN", "TN"};
/* i1: the block's last query + 1 (the keys it sees), rows: the block's query rows (64 but the last) */
static const char *const ATT_SHAPE[ATT_KINDS] = {"M=rows N=i1 K=hd", "M=rows N=hd K=i1", "M=rows N=i1 K=hd",
                                                 "M=i1 N=hd K=rows", "M=rows N=hd K=i1", "M=i1 N=hd K=rows"};

static void run_size(const size_spec *s)
{
    const int C = s->C, T = s->T, B = s->B, H = s->H, L = s->L, N = B * T, hd = C / H;
    struct {
        const char *name;
        int in, out, count, bias;
    } lin[] = {
        {"qkv", C, 3 * C, L, 1}, {"proj", C, C, L, 1}, {"fc", C, 4 * C, L, 1},
        {"fcproj", 4 * C, C, L, 1}, {"head", C, VOCAB, 1, 0},
    };
    const size_t maxw = (size_t)4 * C > VOCAB ? (size_t)4 * C : VOCAB;
    float *inp = alloc_filled((size_t)N * maxw, 1), *dout = alloc_filled((size_t)N * maxw, 2);
    float *w = alloc_filled(maxw * maxw, 3), *outb = alloc_filled((size_t)N * maxw, 4);
    float *dw = alloc_filled(maxw * maxw, 5);
    double linear_ms[4] = {0}, attn_ms = 0, step_flops = 0, linear_flops = 0;

    for (size_t l = 0; l < sizeof lin / sizeof lin[0]; l++) {
        const int Cin = lin[l].in, OC = lin[l].out;
        struct {
            const char *pass;
            int ta, tb;
            int M, Nn, K;
        } p[3] = {
            {"fwd", 0, 1, N, OC, Cin},
            {"dinp", 0, 0, N, Cin, OC},
            {"dw", 1, 0, OC, Cin, N},
        };
        for (int k = 0; k < 3; k++) {
            double t[4];
            if (k == 0)
                time_linear(p[k].ta, p[k].tb, N, OC, Cin, inp, Cin, w, Cin, lin[l].bias, outb, OC, t);
            else if (k == 1)
                time_linear(p[k].ta, p[k].tb, N, Cin, OC, dout, OC, w, Cin, 1, outb, Cin, t);
            else
                time_linear(p[k].ta, p[k].tb, OC, Cin, N, dout, OC, inp, Cin, 1, dw, Cin, t);
            double fl = 2.0 * p[k].M * (double)p[k].Nn * p[k].K;
            for (int v = 0; v < n_kernels; v++) {
                printf("gemm size=%s op=%s pass=%s trans=%s M=%d N=%d K=%d per_step=%d region=outside kernels=%s "
                       "ms=%.4f gflops=%.1f\n",
                       s->name, lin[l].name, p[k].pass, trans_name(p[k].ta ? CblasTrans : CblasNoTrans,
                                                                   p[k].tb ? CblasTrans : CblasNoTrans),
                       p[k].M, p[k].Nn, p[k].K, lin[l].count, bk_gemm_kernels_label(kernels[v]), 1e3 * t[v],
                       fl / t[v] * 1e-9);
                linear_ms[v] += 1e3 * t[v] * lin[l].count;
            }
            linear_flops += fl * lin[l].count;
        }
    }
    step_flops = linear_flops;

    const int C3 = 3 * C, nt = omp_get_max_threads();
    float *qkv = alloc_filled((size_t)N * C3, 6), *dqkv = alloc_filled((size_t)N * C3, 7);
    float *probs = alloc_filled((size_t)B * H * T * T, 8), *dS = alloc_filled((size_t)nt * ATT_BLOCK * T, 9);
    float *ao = alloc_filled((size_t)N * C, 10);
    for (int kind = 0; kind < ATT_KINDS; kind++) {
        double best = 1e30, fl = 0, spent = 0;
        for (int r = 0; r <= reps || (spent < min_time && r <= 200); r++) {
            double t = attention_kind(kind, s, qkv, dqkv, probs, dS, dout, ao, &fl);
            if (r > 0) {
                spent += t;
                if (t < best)
                    best = t;
            }
        }
        printf("gemm size=%s op=attn_%s pass=%s trans=%s %s hd=%d T=%d blocks=%d per_step=%d region=inside ms=%.4f "
               "gflops=%.1f\n",
               s->name, ATT_NAME[kind], kind < DP ? "fwd" : "bwd", ATT_TRANS[kind], ATT_SHAPE[kind], hd, T,
               B * H * ((T + ATT_BLOCK - 1) / ATT_BLOCK), L, 1e3 * best, fl / best * 1e-9);
        attn_ms += 1e3 * best * L;
        step_flops += fl * L;
    }
    printf("step size=%s L=%d C=%d H=%d hd=%d T=%d B=%d threads=%d linear_ms=%.2f attn_ms=%.2f total_ms=%.2f "
           "gflops=%.1f",
           s->name, L, C, H, hd, T, B, nt, linear_ms[0], attn_ms, linear_ms[0] + attn_ms,
           step_flops / ((linear_ms[0] + attn_ms) * 1e-3) * 1e-9);
    for (int v = 0; v < n_kernels; v++)
        printf(" linear_ms_%s=%.2f linear_gflops_%s=%.1f", bk_gemm_kernels_label(kernels[v]), linear_ms[v],
               bk_gemm_kernels_label(kernels[v]), linear_flops / (linear_ms[v] * 1e-3) * 1e-9);
    printf("\n");
    fflush(stdout);
    free(inp), free(dout), free(w), free(outb), free(dw), free(qkv), free(dqkv), free(probs), free(dS), free(ao);
}

static void run_big(void)
{
    const int n = 2048;
    float *a = alloc_filled((size_t)n * n, 11), *b = alloc_filled((size_t)n * n, 12);
    float *c = alloc_filled((size_t)n * n, 13);
    double t[4];
    time_linear(0, 0, n, n, n, a, n, b, n, 0, c, n, t);
    for (int v = 0; v < n_kernels; v++)
        printf("big M=%d N=%d K=%d threads=%d kernels=%s ms=%.3f gflops=%.1f\n", n, n, n, omp_get_max_threads(),
               bk_gemm_kernels_label(kernels[v]), 1e3 * t[v], 2.0 * n * (double)n * n / t[v] * 1e-9);
    int lanes = 0;
    const double peak = fma_peak_gflops(omp_get_max_threads(), &lanes);
    printf("peak threads=%d lanes=%d gflops=%.1f\n", omp_get_max_threads(), lanes, peak);
    free(a), free(b), free(c);
}

int main(int argc, char **argv)
{
    const char *which = "all";
    int big = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc)
            which = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-time") && i + 1 < argc)
            min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--no-big"))
            big = 0;
        else if (!strcmp(argv[i], "--kernels") && i + 1 < argc) {
            char list[128];
            snprintf(list, sizeof list, "%s", argv[++i]);
            n_kernels = 0;
            for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                const int k = bk_gemm_kernels_parse(tok);
                if (k == -3 || (k != BK_GEMM_BLAS && k > bk_tile_gemm_best()) || n_kernels == 4) {
                    fprintf(stderr, "bench_gemm: --kernels: '%s' is not one of blas, avx512, avx2, plain that this "
                                    "CPU runs (at most 4)\n", tok);
                    return 2;
                }
                kernels[n_kernels++] = k;
            }
            if (n_kernels == 0) {
                fprintf(stderr, "bench_gemm: --kernels needs a list, e.g. blas,avx512\n");
                return 2;
            }
        } else {
            fprintf(stderr,
                    "bench_gemm: unknown argument '%s'; expected --size a|b|c|all, --reps N, --min-time S, --no-big, "
                    "--kernels LIST\n",
                    argv[i]);
            return 2;
        }
    }
    if (reps < 1) {
        fprintf(stderr, "bench_gemm: --reps must be at least 1\n");
        return 2;
    }
    printf("blas name=%s threads=%d describe=\"%s\"\n", bk_blas_name(), omp_get_max_threads(), bk_blas_describe());
    int ran = 0;
    for (size_t k = 0; k < sizeof SIZES / sizeof SIZES[0]; k++)
        if (!strcmp(which, "all") || !strcmp(which, SIZES[k].name))
            run_size(&SIZES[k]), ran = 1;
    if (!ran) {
        fprintf(stderr, "bench_gemm: --size '%s' is not a size; expected a, b, c or all\n", which);
        return 2;
    }
    if (big)
        run_big();
    return 0;
}
