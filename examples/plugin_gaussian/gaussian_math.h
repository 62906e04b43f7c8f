/* The Gaussian bias's formula and its derivative, written once for the host (gaussian.c) and the
 * device (gaussian.cu):  T_h(d) = -w_h * d^2,  dT_h(d)/dw_h = -d^2. */
#ifndef GAUSSIAN_MATH_H
#define GAUSSIAN_MATH_H

#include <biaskit/plugin.h>

static inline BIASKIT_HD float gaussian_bias(float width, int32_t d)
{
    return -width * (float)d * (float)d;
}

static inline BIASKIT_HD float gaussian_bias_dwidth(int32_t d)
{
    return -(float)d * (float)d;
}

#endif
