/* This machine's peak single-precision FMA rate: independent chains of vector fused multiply-adds that
 * never touch memory, in every thread of a team, at the widest width the CPU runs (AVX-512F or AVX2 +
 * FMA). No matrix product can beat it, so it bounds what any training step can reach here; bench_train
 * and bench_gemm print it beside the SGEMM rate. */
#ifndef BK_BENCH_FMA_PEAK_H
#define BK_BENCH_FMA_PEAK_H

#include "bench_util.h"

#include <math.h>
#include <omp.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

enum { FMA_PEAK_CHAINS = 12 }; /* at least the FMA latency times the FMA units (4 cycles x 2 units on the
                                * cores measured so far) */

/* fma_chains_LANES(iters, seed): iters rounds of FMA_PEAK_CHAINS vector FMAs; returns a value that
 * depends on all of them */
#define FMA_PEAK_CHAINS_FN(LANES, TARGET, VEC, SET1, FMADD, ADD, STOREU)                                       \
    __attribute__((target(TARGET))) static float fma_chains_##LANES(long iters, float seed)                    \
    {                                                                                                          \
        VEC c[FMA_PEAK_CHAINS];                                                                                \
        for (int i = 0; i < FMA_PEAK_CHAINS; i++)                                                              \
            c[i] = SET1(seed + (float)i);                                                                      \
        const VEC a = SET1(0.999999f), b = SET1(1e-7f);                                                        \
        for (long k = 0; k < iters; k++) {                                                                     \
            _Pragma("GCC unroll 12") for (int i = 0; i < FMA_PEAK_CHAINS; i++) c[i] = FMADD(c[i], a, b);       \
        }                                                                                                      \
        for (int i = 1; i < FMA_PEAK_CHAINS; i++)                                                              \
            c[0] = ADD(c[0], c[i]);                                                                            \
        float v[LANES], sum = 0.0f;                                                                            \
        STOREU(v, c[0]);                                                                                       \
        for (int l = 0; l < LANES; l++)                                                                        \
            sum += v[l];                                                                                       \
        return sum;                                                                                            \
    }
FMA_PEAK_CHAINS_FN(16, "avx512f,fma", __m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps)
FMA_PEAK_CHAINS_FN(8, "avx2,fma", __m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps)

/* GFLOP/s of `threads` threads running the chains at once (best of 5 runs after a warm-up, each 120
 * million vector FMAs per thread: 20-40 ms at 3 GHz); NAN where the CPU has neither AVX-512F nor AVX2 + FMA. *lanes: the vector width used. */
static double fma_peak_gflops(int threads, int *lanes)
{
    __builtin_cpu_init();
    const int w = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")  ? 16
                  : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 8
                                                                                    : 0;
    if (lanes)
        *lanes = w;
    if (!w)
        return NAN;
    const long iters = 10000000; /* rounds of FMA_PEAK_CHAINS FMAs */
    double best = INFINITY;
    volatile double sink = 0.0; /* keeps the chains' results, so the compiler keeps the chains */
    for (int r = 0; r < 6; r++) { /* the first is a warm-up */
        double sum = 0.0;
        const double t = now();
#pragma omp parallel num_threads(threads) reduction(+ : sum)
        sum += w == 16 ? fma_chains_16(iters, (float)omp_get_thread_num())
                       : fma_chains_8(iters, (float)omp_get_thread_num());
        const double dt = now() - t;
        sink = sink + sum;
        if (r > 0 && dt < best)
            best = dt;
    }
    return 2.0 * FMA_PEAK_CHAINS * w * (double)iters * threads / best / 1e9;
}
#else
static double fma_peak_gflops(int threads, int *lanes)
{
    (void)threads;
    if (lanes)
        *lanes = 0;
    return NAN;
}
#endif

#endif
