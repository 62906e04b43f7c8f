/* The flash-style attention's tile products (tile_gemm.h): one plain C variant and, on x86-64, AVX2 and
 * AVX-512 ones in registers of 4 (AVX2) or 8 (AVX-512) rows by 2 vectors. Each output element is
 * accumulated by one chain of fused multiply-adds over k in order, in every variant, so all give the
 * same bits. */
#include "cpu/tile_gemm.h"

#include <math.h>
#include <stdatomic.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BK_TILE_GEMM_X86 1
#endif

/* The end of every element: alpha * s, added to C when accumulating (two roundings, in every variant). */
static inline float finish(float s, float alpha, const float *c, int accumulate) {
    const float r = alpha * s;
    return accumulate ? *c + r : r;
}

/* Plain C: fmaf is exact-then-rounded, the same as the vector units' fused multiply-add. */
static void gemm_plain(int M, int N, int K, float alpha, const float *A, ptrdiff_t sam, ptrdiff_t sak, const float *B,
                       ptrdiff_t ldb, int accumulate, float *C, ptrdiff_t ldc) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++)
                s = fmaf(A[m * sam + k * sak], B[k * ldb + n], s);
            C[m * ldc + n] = finish(s, alpha, &C[m * ldc + n], accumulate);
        }
}

#ifdef BK_TILE_GEMM_X86

/* ---- AVX2 + FMA: 4 rows x 16 columns (two vectors of 8) per step; the columns past the last full 16 by
 * the plain variant's loop (the same bits) ---- */

__attribute__((target("avx2,fma"))) static inline void store8(float *c, __m256 s, __m256 al, int accumulate) {
    const __m256 r = _mm256_mul_ps(al, s);
    _mm256_storeu_ps(c, accumulate ? _mm256_add_ps(_mm256_loadu_ps(c), r) : r);
}

__attribute__((target("avx2,fma"))) static void gemm_avx2(int M, int N, int K, float alpha, const float *A,
                                                          ptrdiff_t sam, ptrdiff_t sak, const float *B, ptrdiff_t ldb,
                                                          int accumulate, float *C, ptrdiff_t ldc) {
    const __m256 al = _mm256_set1_ps(alpha);
    const int N16 = N - N % 16;
    for (int n = 0; n < N16; n += 16) {
        int m = 0;
        for (; m + 4 <= M; m += 4) {
            __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
                   c31 = c00;
            const float *a = A + m * sam, *b = B + n;
            for (int k = 0; k < K; k++, a += sak, b += ldb) {
                const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
                const __m256 a0 = _mm256_broadcast_ss(a), a1 = _mm256_broadcast_ss(a + sam);
                const __m256 a2 = _mm256_broadcast_ss(a + 2 * sam), a3 = _mm256_broadcast_ss(a + 3 * sam);
                c00 = _mm256_fmadd_ps(a0, b0, c00), c01 = _mm256_fmadd_ps(a0, b1, c01);
                c10 = _mm256_fmadd_ps(a1, b0, c10), c11 = _mm256_fmadd_ps(a1, b1, c11);
                c20 = _mm256_fmadd_ps(a2, b0, c20), c21 = _mm256_fmadd_ps(a2, b1, c21);
                c30 = _mm256_fmadd_ps(a3, b0, c30), c31 = _mm256_fmadd_ps(a3, b1, c31);
            }
            float *c = C + m * ldc + n;
            store8(c, c00, al, accumulate), store8(c + 8, c01, al, accumulate);
            store8(c + ldc, c10, al, accumulate), store8(c + ldc + 8, c11, al, accumulate);
            store8(c + 2 * ldc, c20, al, accumulate), store8(c + 2 * ldc + 8, c21, al, accumulate);
            store8(c + 3 * ldc, c30, al, accumulate), store8(c + 3 * ldc + 8, c31, al, accumulate);
        }
        for (; m < M; m++) {
            __m256 c0 = _mm256_setzero_ps(), c1 = c0;
            const float *a = A + m * sam, *b = B + n;
            for (int k = 0; k < K; k++, a += sak, b += ldb) {
                const __m256 a0 = _mm256_broadcast_ss(a);
                c0 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b), c0), c1 = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b + 8), c1);
            }
            store8(C + m * ldc + n, c0, al, accumulate), store8(C + m * ldc + n + 8, c1, al, accumulate);
        }
    }
    if (N16 < N)
        for (int m = 0; m < M; m++)
            for (int n = N16; n < N; n++) {
                float s = 0.0f;
                for (int k = 0; k < K; k++)
                    s = fmaf(A[m * sam + k * sak], B[k * ldb + n], s);
                C[m * ldc + n] = finish(s, alpha, &C[m * ldc + n], accumulate);
            }
}

/* ---- AVX-512F + FMA: 8 rows x 32 columns (two vectors of 16) per step, the last columns masked ---- */

__attribute__((target("avx512f,fma"))) static inline void store16(float *c, __mmask16 mask, __m512 s, __m512 al,
                                                                  int accumulate) {
    const __m512 r = _mm512_mul_ps(al, s);
    _mm512_mask_storeu_ps(c, mask, accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(mask, c), r) : r);
}

__attribute__((target("avx512f,fma"))) static void gemm_avx512(int M, int N, int K, float alpha, const float *A,
                                                               ptrdiff_t sam, ptrdiff_t sak, const float *B,
                                                               ptrdiff_t ldb, int accumulate, float *C, ptrdiff_t ldc) {
    const __m512 al = _mm512_set1_ps(alpha);
    for (int n = 0; n < N; n += 32) {
        const int w = N - n < 32 ? N - n : 32;
        const __mmask16 k0 = w >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << w) - 1u);
        const __mmask16 k1 = w >= 32 ? (__mmask16)0xFFFF : w > 16 ? (__mmask16)((1u << (w - 16)) - 1u) : 0;
        int m = 0;
        for (; m + 8 <= M; m += 8) { /* 16 accumulators of the 32 registers */
            __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
                   c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
            const float *a = A + m * sam, *b = B + n;
            for (int k = 0; k < K; k++, a += sak, b += ldb) {
                const __m512 b0 = _mm512_maskz_loadu_ps(k0, b), b1 = _mm512_maskz_loadu_ps(k1, b + 16);
                const __m512 a0 = _mm512_set1_ps(a[0 * sam]);
                c00 = _mm512_fmadd_ps(a0, b0, c00), c01 = _mm512_fmadd_ps(a0, b1, c01);
                const __m512 a1 = _mm512_set1_ps(a[1 * sam]);
                c10 = _mm512_fmadd_ps(a1, b0, c10), c11 = _mm512_fmadd_ps(a1, b1, c11);
                const __m512 a2 = _mm512_set1_ps(a[2 * sam]);
                c20 = _mm512_fmadd_ps(a2, b0, c20), c21 = _mm512_fmadd_ps(a2, b1, c21);
                const __m512 a3 = _mm512_set1_ps(a[3 * sam]);
                c30 = _mm512_fmadd_ps(a3, b0, c30), c31 = _mm512_fmadd_ps(a3, b1, c31);
                const __m512 a4 = _mm512_set1_ps(a[4 * sam]);
                c40 = _mm512_fmadd_ps(a4, b0, c40), c41 = _mm512_fmadd_ps(a4, b1, c41);
                const __m512 a5 = _mm512_set1_ps(a[5 * sam]);
                c50 = _mm512_fmadd_ps(a5, b0, c50), c51 = _mm512_fmadd_ps(a5, b1, c51);
                const __m512 a6 = _mm512_set1_ps(a[6 * sam]);
                c60 = _mm512_fmadd_ps(a6, b0, c60), c61 = _mm512_fmadd_ps(a6, b1, c61);
                const __m512 a7 = _mm512_set1_ps(a[7 * sam]);
                c70 = _mm512_fmadd_ps(a7, b0, c70), c71 = _mm512_fmadd_ps(a7, b1, c71);
            }
            store16(C + (m + 0) * ldc + n, k0, c00, al, accumulate),
                store16(C + (m + 0) * ldc + n + 16, k1, c01, al, accumulate);
            store16(C + (m + 1) * ldc + n, k0, c10, al, accumulate),
                store16(C + (m + 1) * ldc + n + 16, k1, c11, al, accumulate);
            store16(C + (m + 2) * ldc + n, k0, c20, al, accumulate),
                store16(C + (m + 2) * ldc + n + 16, k1, c21, al, accumulate);
            store16(C + (m + 3) * ldc + n, k0, c30, al, accumulate),
                store16(C + (m + 3) * ldc + n + 16, k1, c31, al, accumulate);
            store16(C + (m + 4) * ldc + n, k0, c40, al, accumulate),
                store16(C + (m + 4) * ldc + n + 16, k1, c41, al, accumulate);
            store16(C + (m + 5) * ldc + n, k0, c50, al, accumulate),
                store16(C + (m + 5) * ldc + n + 16, k1, c51, al, accumulate);
            store16(C + (m + 6) * ldc + n, k0, c60, al, accumulate),
                store16(C + (m + 6) * ldc + n + 16, k1, c61, al, accumulate);
            store16(C + (m + 7) * ldc + n, k0, c70, al, accumulate),
                store16(C + (m + 7) * ldc + n + 16, k1, c71, al, accumulate);
        }
        for (; m < M; m++) {
            __m512 c0 = _mm512_setzero_ps(), c1 = c0;
            const float *a = A + m * sam, *b = B + n;
            for (int k = 0; k < K; k++, a += sak, b += ldb) {
                const __m512 a0 = _mm512_set1_ps(a[0]);
                c0 = _mm512_fmadd_ps(a0, _mm512_maskz_loadu_ps(k0, b), c0);
                c1 = _mm512_fmadd_ps(a0, _mm512_maskz_loadu_ps(k1, b + 16), c1);
            }
            store16(C + m * ldc + n, k0, c0, al, accumulate), store16(C + m * ldc + n + 16, k1, c1, al, accumulate);
        }
    }
}

#endif

int bk_tile_gemm_best(void) {
#ifdef BK_TILE_GEMM_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma"))
        return BK_TILE_GEMM_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return BK_TILE_GEMM_AVX2;
#endif
    return BK_TILE_GEMM_PLAIN;
}

/* The variant, unchecked (the callers below check or know it). */
static void run_variant(int variant, int M, int N, int K, float alpha, const float *A, ptrdiff_t sam, ptrdiff_t sak,
                        const float *B, ptrdiff_t ldb, int accumulate, float *C, ptrdiff_t ldc)
{
#ifdef BK_TILE_GEMM_X86
    if (variant == BK_TILE_GEMM_AVX512) {
        gemm_avx512(M, N, K, alpha, A, sam, sak, B, ldb, accumulate, C, ldc);
        return;
    }
    if (variant == BK_TILE_GEMM_AVX2) {
        gemm_avx2(M, N, K, alpha, A, sam, sak, B, ldb, accumulate, C, ldc);
        return;
    }
#else
    (void)variant;
#endif
    gemm_plain(M, N, K, alpha, A, sam, sak, B, ldb, accumulate, C, ldc);
}

int bk_tile_gemm_variant(int variant, int M, int N, int K, float alpha, const float *A, ptrdiff_t sam, ptrdiff_t sak,
                         const float *B, ptrdiff_t ldb, int accumulate, float *C, ptrdiff_t ldc)
{
    if (variant < 0 || variant > bk_tile_gemm_best())
        return -1;
    run_variant(variant, M, N, K, alpha, A, sam, sak, B, ldb, accumulate, C, ldc);
    return 0;
}

void bk_tile_gemm(int M, int N, int K, float alpha, const float *A, ptrdiff_t sam, ptrdiff_t sak, const float *B,
                  ptrdiff_t ldb, int accumulate, float *C, ptrdiff_t ldc) {
    static _Atomic int best = -1; /* asked once; every thread finds the same answer */
    int v = atomic_load_explicit(&best, memory_order_relaxed);
    if (v < 0) {
        v = bk_tile_gemm_best();
        atomic_store_explicit(&best, v, memory_order_relaxed);
    }
    run_variant(v, M, N, K, alpha, A, sam, sak, B, ldb, accumulate, C, ldc); /* no CPU query per call */
}
