/* ALiBi's formulas, written once and shared by the host code (alibi.c), the CUDA kernel (alibi.cu)
 * and the tests.
 *
 * Press, Smith & Lewis, "Train Short, Test Long: Attention with Linear Biases Enables Input Length
 * Extrapolation", ICLR 2022. Head h of n gets the fixed slope m_h and the bias -m_h * d at distance d.
 * The slopes follow the reference get_slopes(n):
 *   n a power of two:  m_h = 2^(-8 (h+1) / n), h = 0 .. n-1 (a geometric series starting at 2^(-8/n));
 *   otherwise, with c = 2^floor(log2 n): the c slopes of get_slopes(c), then every other slope of
 *   get_slopes(2c) (its 1st, 3rd, 5th, ...) until n slopes are reached. */
#ifndef BIASKIT_ALIBI_MATH_H
#define BIASKIT_ALIBI_MATH_H

#include <biaskit/plugin.h>

#include <math.h>
#include <stdint.h>

/* The bias of a head with slope `slope` at distance d >= 0 (host and device). */
static inline BIASKIT_HD float bk_alibi_bias(float slope, int32_t d)
{
    return -slope * (float)d;
}

#ifndef __CUDA_ARCH__
/* Slope h (0-based) of the power-of-two series of length n: start * ratio^h with
 * start = ratio = 2^(-2^-(log2(n) - 3)) = 2^(-8/n). */
static inline double bk_alibi_power_of_two_slope(int32_t n, int32_t h)
{
    double start = pow(2.0, -pow(2.0, -(log2((double)n) - 3.0)));
    return start * pow(start, (double)h);
}

/* Write the n >= 1 reference slopes into out[0 .. n-1]. */
static inline void bk_alibi_slopes(int32_t n, double *out)
{
    int32_t c = 1;
    while (c * 2 <= n)
        c *= 2; /* c = 2^floor(log2 n) */
    for (int32_t h = 0; h < c; h++)
        out[h] = bk_alibi_power_of_two_slope(c, h);
    /* get_slopes(2c)[0::2][:n-c]: the even-indexed slopes of the series of length 2c */
    for (int32_t k = 0; k < n - c; k++)
        out[c + k] = bk_alibi_power_of_two_slope(2 * c, 2 * k);
}
#endif

#endif
