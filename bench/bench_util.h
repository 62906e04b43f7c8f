/* Timing helpers shared by the benchmark programs of bench/. */
#ifndef BK_BENCH_UTIL_H
#define BK_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

/* seconds on CLOCK_MONOTONIC */
static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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
