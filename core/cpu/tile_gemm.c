/* The flash-style attention's tile products (tile_gemm.h): one plain C variant and, on x86-64, AVX2 and
 * AVX-512 ones in registers of up to 6 (AVX2) or 12 (AVX-512) rows by 2 vectors. Each output element is
 * accumulated by one chain of fused multiply-adds over k in order, in every variant, so all give the
 * same bits. */
#include "cpu/tile_gemm.h"

#include <math.h>
#include <stdatomic.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BK_TILE_GEMM_X86 1
#endif

/* Where a call's chains start and end (tile_gemm.h, bk_tile_gemm_span): from 0 or from P; into P as they
 * are (a part of K) or finished into C: alpha * s, added to C when accumulating (two roundings, in
 * every variant). */
struct span {
    const float *P_in; /* NULL: every chain starts at 0 */
    float *P_out;      /* non-NULL: the chains end here, unfinished (C unused) */
    ptrdiff_t ldp;
    float alpha;
    int accumulate;
};

static inline float finish(float s, float alpha, const float *c, int accumulate) {
    const float r = alpha * s;
    return accumulate ? *c + r : r;
}

/* Plain C: fmaf is exact-then-rounded, the same as the vector units' fused multiply-add. Also the
 * vector variants' columns past their last full vector pair (AVX2). */
static void gemm_plain_cols(int M, int n0, int N, int K, const float *A, ptrdiff_t sam, ptrdiff_t sak,
                            const float *B, ptrdiff_t ldb, const struct span *sp, float *C, ptrdiff_t ldc) {
    for (int m = 0; m < M; m++)
        for (int n = n0; n < N; n++) {
            float s = sp->P_in ? sp->P_in[m * sp->ldp + n] : 0.0f;
            for (int k = 0; k < K; k++)
                s = fmaf(A[m * sam + k * sak], B[k * ldb + n], s);
            if (sp->P_out)
                sp->P_out[m * sp->ldp + n] = s;
            else
                C[m * ldc + n] = finish(s, sp->alpha, &C[m * ldc + n], sp->accumulate);
        }
}

#ifdef BK_TILE_GEMM_X86

/* Each vector variant is a register block of R rows by two vectors, R fixed at compile time (so the
 * accumulators stay in registers), written once as a macro and instantiated for the row counts the
 * variant walks M with: the widest block that still fits the rows left, down to single rows. Per k:
 * two vectors of B's row, R broadcasts of A, 2R fused multiply-adds. AVX-512: 12 rows (24 of the 32
 * registers; 8 rows ran at two thirds of the speed, 14 and 16 spill), AVX2: 6 rows (12 of 16). */

/* ---- AVX2 + FMA: 16 columns per block; the columns past the last full 16 by the plain loop (the same
 * bits) ---- */

#define BK_ROWS_AVX2(R)                                                                                            \
    __attribute__((target("avx2,fma"), always_inline)) static inline void rows_avx2_##R(                           \
        int K, const float *A, ptrdiff_t sam, ptrdiff_t sak, const float *B, ptrdiff_t ldb, const struct span *sp, \
        int m, int n, float *C, ptrdiff_t ldc) {                                                                   \
        __m256 c[R][2];                                                                                            \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                                                     \
            c[r][0] = sp->P_in ? _mm256_loadu_ps(sp->P_in + (m + r) * sp->ldp + n) : _mm256_setzero_ps();          \
            c[r][1] = sp->P_in ? _mm256_loadu_ps(sp->P_in + (m + r) * sp->ldp + n + 8) : _mm256_setzero_ps();      \
        }                                                                                                          \
        const float *a = A + m * sam, *b = B + n;                                                                  \
        for (int k = 0; k < K; k++, a += sak, b += ldb) {                                                          \
            const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);                                    \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                                                 \
                const __m256 ar = _mm256_broadcast_ss(a + r * sam);                                                \
                c[r][0] = _mm256_fmadd_ps(ar, b0, c[r][0]);                                                        \
                c[r][1] = _mm256_fmadd_ps(ar, b1, c[r][1]);                                                        \
            }                                                                                                      \
        }                                                                                                          \
        if (sp->P_out) {                                                                                           \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                                                 \
                float *p = sp->P_out + (m + r) * sp->ldp + n;                                                      \
                _mm256_storeu_ps(p, c[r][0]), _mm256_storeu_ps(p + 8, c[r][1]);                                    \
            }                                                                                                      \
            return;                                                                                                \
        }                                                                                                          \
        const __m256 al = _mm256_set1_ps(sp->alpha);                                                               \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                                                     \
            float *cr = C + (m + r) * ldc + n;                                                                     \
            __m256 v0 = _mm256_mul_ps(al, c[r][0]), v1 = _mm256_mul_ps(al, c[r][1]);                               \
            if (sp->accumulate)                                                                                    \
                v0 = _mm256_add_ps(_mm256_loadu_ps(cr), v0), v1 = _mm256_add_ps(_mm256_loadu_ps(cr + 8), v1);      \
            _mm256_storeu_ps(cr, v0), _mm256_storeu_ps(cr + 8, v1);                                                \
        }                                                                                                          \
    }
BK_ROWS_AVX2(6)
BK_ROWS_AVX2(4)
BK_ROWS_AVX2(1)

__attribute__((target("avx2,fma"))) static void gemm_avx2(int M, int N, int K, const float *A, ptrdiff_t sam,
                                                          ptrdiff_t sak, const float *B, ptrdiff_t ldb,
                                                          const struct span *sp, float *C, ptrdiff_t ldc) {
    const int N16 = N - N % 16;
    for (int n = 0; n < N16; n += 16) {
        int m = 0;
        for (; m + 6 <= M; m += 6)
            rows_avx2_6(K, A, sam, sak, B, ldb, sp, m, n, C, ldc);
        for (; m + 4 <= M; m += 4)
            rows_avx2_4(K, A, sam, sak, B, ldb, sp, m, n, C, ldc);
        for (; m < M; m++)
            rows_avx2_1(K, A, sam, sak, B, ldb, sp, m, n, C, ldc);
    }
    if (N16 < N)
        gemm_plain_cols(M, N16, N, K, A, sam, sak, B, ldb, sp, C, ldc);
}

/* ---- AVX-512F + FMA: 32 columns per block, the last columns masked ---- */

#define BK_ROWS_AVX512(R, NAME, SAM, FULL)                                                                                          \
    __attribute__((target("avx512f,fma"), always_inline)) static inline void NAME##R(                      \
        int K, const float *A, ptrdiff_t sam, ptrdiff_t sak, const float *B, ptrdiff_t ldb, const struct span *sp, \
        int m, int n, __mmask16 k0, __mmask16 k1, float *C, ptrdiff_t ldc) {                                       \
        __m512 c[R][2];                                                                                            \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                                                     \
            const float *p = sp->P_in ? sp->P_in + (m + r) * sp->ldp + n : NULL;                                   \
            c[r][0] = p ? _mm512_maskz_loadu_ps(k0, p) : _mm512_setzero_ps();                                      \
            c[r][1] = p ? _mm512_maskz_loadu_ps(k1, p + 16) : _mm512_setzero_ps();                                 \
        }                                                                                                          \
        const float *a = A + m * sam, *b = B + n;                                                                  \
        /* rows by threes from four bases: row 3q + i at a_q + i * sam, an addressing mode's index and scale */    \
        const float *a0 = a, *a3 = a + 3 * (SAM), *a6 = a + 6 * (SAM), *a9 = a + 9 * (SAM);                        \
        _Pragma("GCC unroll 4") for (int k = 0; k < K; k++, b += ldb, a0 += sak, a3 += sak, a6 += sak, a9 += sak) {\
            const __m512 b0 = (FULL) ? _mm512_loadu_ps(b) : _mm512_maskz_loadu_ps(k0, b);                    \
            const __m512 b1 = (FULL) ? _mm512_loadu_ps(b + 16) : _mm512_maskz_loadu_ps(k1, b + 16);              \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                                                 \
                const float *aq = r < 3 ? a0 : r < 6 ? a3 : r < 9 ? a6 : a9;                                       \
                const __m512 ar = _mm512_set1_ps(aq[r % 3 * (SAM)]);                                               \
                c[r][0] = _mm512_fmadd_ps(ar, b0, c[r][0]);                                                        \
                c[r][1] = _mm512_fmadd_ps(ar, b1, c[r][1]);                                                        \
            }                                                                                                      \
        }                                                                                                          \
        if (sp->P_out) {                                                                                           \
            _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                                                 \
                float *p = sp->P_out + (m + r) * sp->ldp + n;                                                      \
                _mm512_mask_storeu_ps(p, k0, c[r][0]), _mm512_mask_storeu_ps(p + 16, k1, c[r][1]);                 \
            }                                                                                                      \
            return;                                                                                                \
        }                                                                                                          \
        const __m512 al = _mm512_set1_ps(sp->alpha);                                                               \
        _Pragma("GCC unroll 16") for (int r = 0; r < R; r++) {                                                     \
            float *cr = C + (m + r) * ldc + n;                                                                     \
            __m512 v0 = _mm512_mul_ps(al, c[r][0]), v1 = _mm512_mul_ps(al, c[r][1]);                               \
            if (sp->accumulate)                                                                                    \
                v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(k0, cr), v0),                                             \
                v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(k1, cr + 16), v1);                                        \
            _mm512_mask_storeu_ps(cr, k0, v0), _mm512_mask_storeu_ps(cr + 16, k1, v1);                             \
        }                                                                                                          \
    }
BK_ROWS_AVX512(12, rows_avx512_, sam, 0)
BK_ROWS_AVX512(8, rows_avx512_, sam, 0)
BK_ROWS_AVX512(4, rows_avx512_, sam, 0)
BK_ROWS_AVX512(1, rows_avx512_, sam, 0)
/* A's rows next to each other (sam = 1, as cpu/gemm.c packs it): the broadcasts' addresses are constant
 * offsets, which leaves the general registers free (with sam unknown, 11 of them hold row offsets and the
 * loop reloads some from the stack) */
BK_ROWS_AVX512(12, rows_avx512_packed_, 1, 0)
BK_ROWS_AVX512(8, rows_avx512_packed_, 1, 0)
BK_ROWS_AVX512(4, rows_avx512_packed_, 1, 0)
/* ... and all 32 columns there: no masks in the loop (the masks were reloaded from the stack each k) */
BK_ROWS_AVX512(12, rows_avx512_full_, 1, 1)

__attribute__((target("avx512f,fma"))) static void gemm_avx512(int M, int N, int K, const float *A, ptrdiff_t sam,
                                                               ptrdiff_t sak, const float *B, ptrdiff_t ldb,
                                                               const struct span *sp, float *C, ptrdiff_t ldc) {
    for (int n = 0; n < N; n += 32) {
        const int w = N - n < 32 ? N - n : 32;
        const __mmask16 k0 = w >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << w) - 1u);
        const __mmask16 k1 = w >= 32 ? (__mmask16)0xFFFF : w > 16 ? (__mmask16)((1u << (w - 16)) - 1u) : 0;
        int m = 0;
        if (sam == 1 && w == 32)
            for (; m + 12 <= M; m += 12)
                rows_avx512_full_12(K, A, sam, sak, B, ldb, sp, m, n, k0, k1, C, ldc);
        if (sam == 1) {
            for (; m + 12 <= M; m += 12)
                rows_avx512_packed_12(K, A, sam, sak, B, ldb, sp, m, n, k0, k1, C, ldc);
            if (m + 8 <= M)
                rows_avx512_packed_8(K, A, sam, sak, B, ldb, sp, m, n, k0, k1, C, ldc), m += 8;
            if (m + 4 <= M)
                rows_avx512_packed_4(K, A, sam, sak, B, ldb, sp, m, n, k0, k1, C, ldc), m += 4;
        }
        for (; m + 12 <= M; m += 12)
            rows_avx512_12(K, A, sam, sak, B, ldb, sp, m, n, k0, k1, C, ldc);
        if (m + 8 <= M)
            rows_avx512_8(K, A, sam, sak, B, ldb, sp, m, n, k0, k1, C, ldc), m += 8;
        if (m + 4 <= M)
            rows_avx512_4(K, A, sam, sak, B, ldb, sp, m, n, k0, k1, C, ldc), m += 4;
        for (; m < M; m++)
            rows_avx512_1(K, A, sam, sak, B, ldb, sp, m, n, k0, k1, C, ldc);
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
static void run_variant(int variant, int M, int N, int K, const float *A, ptrdiff_t sam, ptrdiff_t sak, const float *B,
                        ptrdiff_t ldb, const struct span *sp, float *C, ptrdiff_t ldc)
{
#ifdef BK_TILE_GEMM_X86
    if (variant == BK_TILE_GEMM_AVX512) {
        gemm_avx512(M, N, K, A, sam, sak, B, ldb, sp, C, ldc);
        return;
    }
    if (variant == BK_TILE_GEMM_AVX2) {
        gemm_avx2(M, N, K, A, sam, sak, B, ldb, sp, C, ldc);
        return;
    }
#else
    (void)variant;
#endif
    gemm_plain_cols(M, 0, N, K, A, sam, sak, B, ldb, sp, C, ldc);
}

int bk_tile_gemm_variant(int variant, int M, int N, int K, float alpha, const float *A, ptrdiff_t sam, ptrdiff_t sak,
                         const float *B, ptrdiff_t ldb, int accumulate, float *C, ptrdiff_t ldc)
{
    if (variant < 0 || variant > bk_tile_gemm_best())
        return -1;
    const struct span sp = {NULL, NULL, 0, alpha, accumulate};
    run_variant(variant, M, N, K, A, sam, sak, B, ldb, &sp, C, ldc);
    return 0;
}

int bk_tile_gemm_best_cached(void) {
    static _Atomic int best = -1; /* asked once; every thread finds the same answer */
    int v = atomic_load_explicit(&best, memory_order_relaxed);
    if (v < 0) {
        v = bk_tile_gemm_best();
        atomic_store_explicit(&best, v, memory_order_relaxed);
    }
    return v;
}

void bk_tile_gemm(int M, int N, int K, float alpha, const float *A, ptrdiff_t sam, ptrdiff_t sak, const float *B,
                  ptrdiff_t ldb, int accumulate, float *C, ptrdiff_t ldc) {
    const struct span sp = {NULL, NULL, 0, alpha, accumulate};
    run_variant(bk_tile_gemm_best_cached(), M, N, K, A, sam, sak, B, ldb, &sp, C, ldc); /* no CPU query per call */
}

int bk_tile_gemm_span(int variant, int M, int N, int K, const float *A, ptrdiff_t sam, ptrdiff_t sak, const float *B,
                      ptrdiff_t ldb, const float *P_in, float *P_out, ptrdiff_t ldp, float alpha, int accumulate,
                      float *C, ptrdiff_t ldc)
{
    if (variant < 0 || variant > bk_tile_gemm_best_cached())
        return -1;
    const struct span sp = {P_in, P_out, ldp, alpha, accumulate};
    run_variant(variant, M, N, K, A, sam, sak, B, ldb, &sp, C, ldc);
    return 0;
}
