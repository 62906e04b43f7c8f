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

enum { FMA_PEAK_CHAINS = 12 }; /* enough to cover the FMA latency times the units (4 x 2 here, 4 x 3 on
                                * some cores) */

/* iters rounds of FMA_PEAK_CHAINS vector FMAs; returns a value that depends on all of them */
__attribute__((target("avx512f,fma"))) static float fma_chains_512(long iters, float seed)
{
    __m512 c[FMA_PEAK_CHAINS];
    for (int i = 0; i < FMA_PEAK_CHAINS; i++)
        c[i] = _mm512_set1_ps(seed + (float)i);
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < FMA_PEAK_CHAINS; i++)
            c[i] = _mm512_fmadd_ps(c[i], a, b);
    }
    for (int i = 1; i < FMA_PEAK_CHAINS; i++)
        c[0] = _mm512_add_ps(c[0], c[i]);
    return _mm512_reduce_add_ps(c[0]);
}

__attribute__((target("avx2,fma"))) static float fma_chains_256(long iters, float seed)
{
    __m256 c[FMA_PEAK_CHAINS];
    for (int i = 0; i < FMA_PEAK_CHAINS; i++)
        c[i] = _mm256_set1_ps(seed + (float)i);
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (long k = 0; k < iters; k++) {
#pragma GCC unroll 12
        for (int i = 0; i < FMA_PEAK_CHAINS; i++)
            c[i] = _mm256_fmadd_ps(c[i], a, b);
    }
    for (int i = 1; i < FMA_PEAK_CHAINS; i++)
        c[0] = _mm256_add_ps(c[0], c[i]);
    float v[8];
    _mm256_storeu_ps(v, c[0]);
    return v[0] + v[7];
}

/* GFLOP/s of `threads` threads running the chains at once (best of 5 runs of about 0.1 s after a
 * warm-up); NAN where the CPU has neither AVX-512F nor AVX2 + FMA. *lanes: the vector width used. */
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
    const long iters = 20000000 / w * 8; /* about 0.1 s at 3 GHz */
    double best = INFINITY;
    volatile double sink = 0.0; /* keeps the chains' results, so the compiler keeps the chains */
    for (int r = 0; r < 6; r++) { /* the first is a warm-up */
        double sum = 0.0;
        const double t = now();
#pragma omp parallel num_threads(threads) reduction(+ : sum)
        sum += w == 16 ? fma_chains_512(iters, (float)omp_get_thread_num())
                       : fma_chains_256(iters, (float)omp_get_thread_num());
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
