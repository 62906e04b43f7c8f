/* Timing and input helpers shared by the benchmark programs of bench/ and bench/gpu/. */
#ifndef BK_BENCH_UTIL_H
#define BK_BENCH_UTIL_H

#include "util/clock.h"

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* seconds on CLOCK_MONOTONIC (the engine's clock) */
static inline double now(void)
{
    return bk_now_seconds();
}

/* x[k] uniform in [-1, 1) from a xorshift64 stream of `seed` */
static inline void fill(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t k = 0; k < n; k++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[k] = (float)((double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    }
}

/* qsort order of doubles */
static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v in place; returns its median. */
static inline double median_sorted(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
