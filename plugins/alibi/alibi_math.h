/* ALiBi's formulas, written once and shared by the plugin (alibi.c, and alibi.cu for CUDA), the MEP
 * plugin and the tests.
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
#include <biaskit/table_plugin.h>

#include <math.h>
#include <stdint.h>

/* The bias of a head with slope `slope` at distance d >= 0 (host and device). */
static inline BIASKIT_HD float bk_alibi_bias(float slope, int32_t d)
{
    return -slope * (float)d;
}

#ifndef __CUDA_ARCH__
/* Write the n >= 1 reference slopes into out[0 .. n-1] (the SDK's biaskit_tp_alibi_slope). */
static inline void bk_alibi_slopes(int32_t n, double *out)
{
    for (int32_t h = 0; h < n; h++)
        out[h] = biaskit_tp_alibi_slope(n, h);
}
#endif

#endif
