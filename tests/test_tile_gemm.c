/* The flash attention's tile products (cpu/tile_gemm.h): every variant this CPU runs (plain C with
 * fmaf, AVX2 + FMA, AVX-512 + FMA) gives the same bits, on shapes with remainders in every dimension
 * (rows not a multiple of 4 or 8, columns not a multiple of 16 or 32, K = 0 and 1), strided and
 * transposed A, accumulating and not; and the products match a double-precision reference within the
 * rounding of a K-term float sum. */
#include "test_util.h"

#include "test_random.h"

#include "cpu/tile_gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* max |C - ref| relative to max |ref| */
static double rel(const float *C, const double *ref, size_t n)
{
    double worst = 0.0, big = 0.0;
    for (size_t e = 0; e < n; e++) {
        const double d = fabs((double)C[e] - ref[e]);
        worst = d > worst || d != d ? d : worst;
        big = fabs(ref[e]) > big ? fabs(ref[e]) : big;
    }
    return big > 0.0 ? worst / big : worst;
}

static void one_shape(int M, int N, int K, int transposed, int accumulate, float alpha)
{
    /* A is M x K (or K x M stored, read transposed) with a padded stride; B is K x N with stride N + 3;
     * C is M x N with stride N + 5 */
    const ptrdiff_t lda = (transposed ? M : K) + 2, ldb = N + 3, ldc = N + 5;
    const size_t na = (size_t)(transposed ? K : M) * lda + 1, nb = (size_t)K * ldb + 1, nc = (size_t)M * ldc;
    float *A = random_floats(na, 1.0), *B = random_floats(nb, 1.0), *C0 = random_floats(nc, 1.0);
    const ptrdiff_t sam = transposed ? 1 : lda, sak = transposed ? lda : 1;
    double *ref = malloc((nc ? nc : 1) * sizeof *ref);
    assert_non_null(ref);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < ldc && n < N; n++) {
            double s = 0.0;
            for (int k = 0; k < K; k++)
                s += (double)A[m * sam + k * sak] * (double)B[k * ldb + n];
            ref[m * ldc + n] = (accumulate ? (double)C0[m * ldc + n] : 0.0) + (double)alpha * s;
        }
    float *first = NULL;
    const int best = bk_tile_gemm_best();
    for (int v = 0; v <= best; v++) {
        float *C = malloc((nc ? nc : 1) * sizeof *C);
        assert_non_null(C);
        if (nc)
            memcpy(C, C0, nc * sizeof *C);
        assert_int_equal(bk_tile_gemm_variant(v, M, N, K, alpha, A, sam, sak, B, ldb, accumulate, C, ldc), 0);
        /* the padding between rows is never written */
        for (int m = 0; m < M; m++)
            for (ptrdiff_t n = N; n < ldc; n++)
                if (C[m * ldc + n] != C0[m * ldc + n])
                    fail_msg("variant %d, %d x %d x %d: wrote the padding at (%d, %td)", v, M, N, K, m, n);
        if (!first) {
            /* a K-term float chain: a few K ulps of the largest term at most */
            for (int m = 0; m < M; m++)
                for (ptrdiff_t n = N; n < ldc; n++)
                    ref[m * ldc + n] = C0[m * ldc + n];
            const double e = rel(C, ref, nc);
            if (!(e <= 1e-6 * (K + 1)))
                fail_msg("variant %d, %d x %d x %d (A %s, %s): %.3g from the double reference", v, M, N, K,
                         transposed ? "transposed" : "rows", accumulate ? "accumulating" : "written", e);
            first = C;
        } else {
            if (memcmp(C, first, nc * sizeof *C))
                fail_msg("variant %d differs in its bits from the plain variant at %d x %d x %d (A %s, %s)", v, M, N,
                         K, transposed ? "transposed" : "rows", accumulate ? "accumulating" : "written");
            free(C);
        }
    }
    free(first), free(ref), free(A), free(B), free(C0);
}

static void variants_same_bits(void **state)
{
    (void)state;
    rng_state = 29;
    const int Ms[] = {1, 3, 4, 7, 8, 9, 11, 12, 13, 17, 20, 24, 25, 29, 64}; /* the 12-, 8-, 4- and 1-row blocks */
    const int Ns[] = {1, 5, 15, 16, 17, 31, 32, 33, 48, 100, 256};
    const int Ks[] = {0, 1, 2, 16, 32, 65};
    for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
        for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
            for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++)
                for (int t = 0; t < 2; t++)
                    one_shape(Ms[a], Ns[b], Ks[c], t, (int)((a + b + c + (size_t)t) % 2), c % 2 ? 0.25f : 1.0f);
    printf("variants compared: %d (0 plain, 1 AVX2, 2 AVX-512)\n", bk_tile_gemm_best() + 1);
}

static void unknown_variant_refused(void **state)
{
    (void)state;
    float a = 1.0f, b = 2.0f, c = 0.0f;
    assert_int_equal(bk_tile_gemm_variant(-1, 1, 1, 1, 1.0f, &a, 1, 1, &b, 1, 0, &c, 1), -1);
    assert_int_equal(bk_tile_gemm_variant(BK_TILE_GEMM_VARIANTS, 1, 1, 1, 1.0f, &a, 1, 1, &b, 1, 0, &c, 1), -1);
    assert_true(c == 0.0f);
    bk_tile_gemm(1, 1, 1, 3.0f, &a, 1, 1, &b, 1, 0, &c, 1);
    assert_true(c == 6.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(variants_same_bits),
        cmocka_unit_test(unknown_variant_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
