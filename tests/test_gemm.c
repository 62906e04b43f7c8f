/* The linear layers' products (cpu/gemm.h): every kernel this CPU runs (plain C with fmaf, AVX2, AVX-512)
 * gives the bits of one fused multiply-add chain per element over k in order, whatever the shape
 * (remainders in every dimension, K = 0, K cut into several slices), the operands' transposition, the
 * leading dimensions, accumulating or not, alpha, and the thread count; the BLAS path matches the double
 * reference; BIASKIT_GEMM's values are checked. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "test_util.h"

#include "test_random.h"

#include "cpu/gemm.h"
#include "cpu/tile_gemm.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the reference: the chain of gemm.h, element by element */
static float chain(int tA, int tB, int m, int n, int K, const float *A, ptrdiff_t lda, const float *B, ptrdiff_t ldb)
{
    float s = 0.0f;
    for (int k = 0; k < K; k++)
        s = fmaf(tA ? A[k * lda + m] : A[m * lda + k], tB ? B[n * ldb + k] : B[k * ldb + n], s);
    return s;
}

static void one_case(int kernels, int tA, int tB, int M, int N, int K, float alpha, int accumulate, int threads)
{
    const ptrdiff_t lda = (tA ? M : K) + 3, ldb = (tB ? K : N) + 1, ldc = N + 2;
    const size_t na = (size_t)(tA ? K : M) * lda + 1, nb = (size_t)(tB ? N : K) * ldb + 1, nc = (size_t)M * ldc;
    float *A = random_floats(na, 1.0), *B = random_floats(nb, 1.0), *C0 = random_floats(nc, 1.0);
    float *C = malloc((nc ? nc : 1) * sizeof *C);
    assert_non_null(C);
    memcpy(C, C0, nc * sizeof *C);
    omp_set_num_threads(threads);
    assert_int_equal(bk_gemm_with(kernels, tA, tB, M, N, K, alpha, A, lda, B, ldb, accumulate, C, ldc), 0);
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            const float r = alpha * chain(tA, tB, m, n, K, A, lda, B, ldb);
            const float want = accumulate ? C0[m * ldc + n] + r : r;
            const float got = C[m * ldc + n];
            if (kernels == BK_GEMM_BLAS) { /* the library's order: within a K-term float sum */
                double ref = 0.0;
                for (int k = 0; k < K; k++)
                    ref += (double)(tA ? A[k * lda + m] : A[m * lda + k]) * (tB ? B[n * ldb + k] : B[k * ldb + n]);
                ref = (accumulate ? C0[m * ldc + n] : 0.0) + alpha * ref;
                if (!(fabs(got - ref) <= 1e-6 * (K + 2) * (1.0 + fabs(ref))))
                    fail_msg("blas %d x %d x %d: (%d, %d) %.9g, reference %.9g", M, N, K, m, n, got, ref);
            } else if (memcmp(&got, &want, sizeof got) != 0) {
                fail_msg("kernels %d, %d threads, %d x %d x %d (A%s, B%s, alpha %g, %s): (%d, %d) is %.9g, the chain "
                         "gives %.9g",
                         kernels, threads, M, N, K, tA ? "^T" : "", tB ? "^T" : "", alpha,
                         accumulate ? "accumulating" : "written", m, n, got, want);
            }
        }
        for (ptrdiff_t n = N; n < ldc; n++) /* the padding between rows is never written */
            if (memcmp(&C[m * ldc + n], &C0[m * ldc + n], sizeof *C))
                fail_msg("kernels %d, %d x %d x %d: wrote the padding at (%d, %td)", kernels, M, N, K, m, n);
    }
    free(A), free(B), free(C0), free(C);
}

static void every_kernel_gives_the_chain_bits(void **state)
{
    (void)state;
    rng_state = 2911;
    const int saved = omp_get_max_threads();
    /* shapes: rows around the 12-row blocks and the 64/128-row blocks, columns around 32 and the
     * 256-column blocks, K = 0, 1, small, and more than one 256-slice; 260 rows: several chunks of rows
     * per thread (a weight gradient's thread carries the chains of all of them across K's slices); 2000
     * rows: more than the 16 chunks of one group in one thread (the AVX2 case runs with 1 thread) */
    const int shapes[][3] = {{1, 1, 1},     {5, 17, 7},    {13, 33, 0},   {37, 45, 300}, {130, 300, 257},
                             {129, 31, 600}, {24, 256, 256}, {200, 64, 513}, {12, 32, 1},   {7, 520, 40},
                             {260, 300, 520}, {2000, 40, 300}};
    int cases = 0;
    for (int v = 0; v <= bk_tile_gemm_best(); v++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (int t = 0; t < 4; t++) {
                const int tA = t & 1, tB = t >> 1, acc = (int)((s + (size_t)t) % 2);
                one_case(v, tA, tB, shapes[s][0], shapes[s][1], shapes[s][2], s % 3 ? 1.0f : 0.5f, acc,
                         1 + (int)((s + (size_t)v) % 3));
                cases++;
            }
    omp_set_num_threads(saved);
    printf("cases: %d over %d kernel variants (0 plain, 1 AVX2, 2 AVX-512)\n", cases, bk_tile_gemm_best() + 1);
}

static void blas_path_matches_the_reference(void **state)
{
    (void)state;
    rng_state = 12;
    for (int t = 0; t < 4; t++)
        one_case(BK_GEMM_BLAS, t & 1, t >> 1, 37, 45, 300, 0.5f, t % 2, 2);
}

/* The rows are shared out evenly: every thread gets M / threads rows to within 4 (a 128-row weight
 * gradient once went to two threads as 120 and 8 rows), the chunks cover [0, M) in order, start at
 * multiples of 4 and hold at most about 120 rows. */
static void threads_get_equal_rows(void **state)
{
    (void)state;
    const int Ms[] = {1, 4, 6, 8, 128, 130, 256, 384, 512, 1000, 1536, 2048, 8192};
    for (size_t i = 0; i < sizeof Ms / sizeof *Ms; i++)
        for (int threads = 1; threads <= 8; threads++) {
            const int M = Ms[i], chunks = bk_gemm_chunks(M, threads);
            assert_true(chunks >= threads && chunks % threads == 0);
            assert_int_equal(bk_gemm_chunk_start(M, chunks, 0), 0);
            assert_int_equal(bk_gemm_chunk_start(M, chunks, chunks), M);
            for (int c = 0; c < chunks; c++) {
                const int s0 = bk_gemm_chunk_start(M, chunks, c), s1 = bk_gemm_chunk_start(M, chunks, c + 1);
                if (c < chunks - 1 && s0 % 4 != 0)
                    fail_msg("M %d, %d threads: chunk %d starts at row %d, not a multiple of 4", M, threads, c, s0);
                if (s1 < s0 || s1 - s0 > 124)
                    fail_msg("M %d, %d threads: chunk %d holds rows %d .. %d", M, threads, c, s0, s1);
            }
            const int per = chunks / threads;
            for (int t = 0; t < threads; t++) {
                const int rows = bk_gemm_chunk_start(M, chunks, (t + 1) * per) - bk_gemm_chunk_start(M, chunks, t * per);
                const double even = (double)M / threads;
                if (rows < even - 4 || rows > even + 4)
                    fail_msg("M %d, %d threads: thread %d gets %d rows, expected %.1f to within 4", M, threads, t, rows,
                             even);
            }
        }
}

static void thread_count_does_not_change_bits(void **state)
{
    (void)state;
    rng_state = 3;
    const int M = 300, N = 200, K = 700, best = bk_tile_gemm_best();
    float *A = random_floats((size_t)K * M, 1.0), *B = random_floats((size_t)K * N, 1.0);
    float *C[3];
    const int saved = omp_get_max_threads();
    for (int i = 0; i < 3; i++) {
        C[i] = calloc((size_t)M * N, sizeof *C[i]);
        assert_non_null(C[i]);
        omp_set_num_threads(i + 1);
        assert_int_equal(bk_gemm_with(best, 1, 0, M, N, K, 1.0f, A, M, B, N, 0, C[i], N), 0);
        if (i)
            assert_memory_equal(C[i], C[0], (size_t)M * N * sizeof *C[i]);
    }
    /* inside a parallel region the calling thread computes it alone, to the same bits */
#pragma omp parallel num_threads(2)
    {
#pragma omp single
        {
            float *D = calloc((size_t)M * N, sizeof *D);
            if (D && bk_gemm_with(best, 1, 0, M, N, K, 1.0f, A, M, B, N, 0, D, N) == 0 &&
                memcmp(D, C[0], (size_t)M * N * sizeof *D) != 0)
                fail_msg("inside a parallel region: different bits");
            free(D);
        }
    }
    omp_set_num_threads(saved);
    for (int i = 0; i < 3; i++)
        free(C[i]);
    free(A), free(B);
}

static void unknown_kernels_refused(void **state)
{
    (void)state;
    float a = 1.0f, b = 2.0f, c = 5.0f;
    assert_int_equal(bk_gemm_with(BK_TILE_GEMM_VARIANTS, 0, 0, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0, &c, 1), -1);
    assert_int_equal(bk_gemm_with(-7, 0, 0, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0, &c, 1), -1);
    assert_true(c == 5.0f);
}

static void environment_variable_checked(void **state)
{
    (void)state;
    char msg[256];
    const char *ok[] = {"auto", "blas", "plain", ""};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        setenv(BK_GEMM_ENV, ok[i], 1);
        assert_int_equal(bk_gemm_check_env(msg, sizeof msg), 0);
    }
    setenv(BK_GEMM_ENV, "avx1024", 1);
    assert_int_equal(bk_gemm_check_env(msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "BIASKIT_GEMM='avx1024'"));
    assert_non_null(strstr(msg, "expected auto, avx512, avx2, plain or blas"));
    if (bk_tile_gemm_best() < BK_TILE_GEMM_AVX512) {
        setenv(BK_GEMM_ENV, "avx512", 1);
        assert_int_equal(bk_gemm_check_env(msg, sizeof msg), -1);
        assert_non_null(strstr(msg, "cannot run"));
    } else {
        setenv(BK_GEMM_ENV, "avx512", 1);
        assert_int_equal(bk_gemm_check_env(msg, sizeof msg), 0);
    }
    unsetenv(BK_GEMM_ENV);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_kernel_gives_the_chain_bits),
        cmocka_unit_test(blas_path_matches_the_reference),
        cmocka_unit_test(threads_get_equal_rows),
        cmocka_unit_test(thread_count_does_not_change_bits),
        cmocka_unit_test(unknown_kernels_refused),
        cmocka_unit_test(environment_variable_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
