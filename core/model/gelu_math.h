/* GELU, tanh approximation (GPT-2; PyTorch gelu(approximate="tanh")), per element, written once for
 * the host (model/layers.c) and the device kernels (gpu/kernels_layers.h).
 *
 * 0.5 x (1 + tanh u) with u = sqrt(2/pi) (x + 0.044715 x^3) is computed as x * s with
 * s = 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)), with exp on the host by bk_expf_poly (model/expf_math.h,
 * vectorised; expf on the device); the result differs from the tanhf form by a few ulp. Below
 * exp(BK_EXPF_MIN) e is taken as exp(BK_EXPF_MIN): s = 1 / (1 + e) is 1 either way. d/dx = s + x * s' where
 * s' = 2 s (1 - s) du/dx = 2 e s^2 du/dx (e = exp(-2u)), i.e. 0.5 x sech^2(u) du/dx. */
#ifndef BK_GELU_MATH_H
#define BK_GELU_MATH_H

#include "model/expf_math.h"

#include <biaskit/plugin.h>

#include <math.h>
#include <stdint.h>

#define BK_GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */
#define BK_GELU_CUBIC 0.044715f
/* Past exp(-2u) = exp(80), s = 1/(1+e) < 2e-35 is taken as 0: e stays finite (e * s * s below would
 * be inf * 0 otherwise) and GELU(x) = x * s is exactly -0 for every very negative x, as the tanh form. */
#define BK_GELU_EXP_MAX 80.0f

#ifndef __CUDA_ARCH__
#define BK_GELU_EXPF(a) bk_expf_poly(a)
#else
#define BK_GELU_EXPF(a) expf(a)
#endif

/* s = 0.5 (1 + tanh u), and e = exp(-2u) (clamped) in *e_out. */
static inline BK_HOST_INLINE BIASKIT_HD float bk_gelu_sigmoid(float x, float *e_out)
{
    float u = BK_GELU_SCALE * (x + BK_GELU_CUBIC * x * x * x);
    float a = -2.0f * u;
    /* clamped by comparisons (a NaN becomes BK_GELU_EXP_MAX, as fminf would make it), which vectorise;
     * fminf / fmaxf are library calls unless NaNs are assumed away */
    float c = a < BK_GELU_EXP_MAX ? a : BK_GELU_EXP_MAX;
    float e = BK_GELU_EXPF(c > BK_EXPF_MIN ? c : BK_EXPF_MIN);
    *e_out = e;
    float s = 1.0f / (1.0f + e); /* computed either way: a select of two values vectorises */
    return a > BK_GELU_EXP_MAX ? 0.0f : s;
}

/* GELU(x) */
static inline BK_HOST_INLINE BIASKIT_HD float bk_gelu(float x)
{
    float e;
    return x * bk_gelu_sigmoid(x, &e);
}

/* dGELU/dx at x */
static inline BK_HOST_INLINE BIASKIT_HD float bk_gelu_grad(float x)
{
    float e;
    float s = bk_gelu_sigmoid(x, &e);
    float du = BK_GELU_SCALE * (1.0f + 3.0f * BK_GELU_CUBIC * x * x);
    return s + 2.0f * x * (e * s) * s * du;
}

#endif
