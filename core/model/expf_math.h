/* A fast exp for the host's elementwise loops, written once: plain float arithmetic that a compiler
 * vectorises (glibc's expf is a call per element), used by GELU (model/gelu_math.h) and the attention
 * softmax (model/softmax_math.h) on the host; device code keeps expf. */
#ifndef BK_EXPF_MATH_H
#define BK_EXPF_MATH_H

#include "model/host_simd.h" /* BK_OMP_SIMD, BK_HOST_INLINE */

#include <biaskit/plugin.h> /* BIASKIT_HD */

#include <math.h>
#include <stdint.h>

/* The lowest argument bk_expf_poly takes: exp(-87) ~ 1.6e-38, just above FLT_MIN. */
#define BK_EXPF_MIN -87.0f

#ifndef __CUDA_ARCH__
/* exp(a) for a in [BK_EXPF_MIN, 88]: a = n ln2 + r with n = round(a log2 e), |r| <= ln2/2
 * (ln2 split in two so that n ln2 is exact), exp(r) by Cephes' degree-5 minimax polynomial for expf,
 * and 2^n put into the exponent bits. n is rounded with the 1.5 * 2^23 trick (adds only, so SSE2 does
 * it). Relative error against exp in double: at most 2 ulp (tests/test_layers.c sweeps the range). */
static inline BK_HOST_INLINE float bk_expf_poly(float a)
{
    const float round_magic = 12582912.0f; /* 1.5 * 2^23: x + magic - magic rounds x to an integer */
    float n = (a * 1.44269504088896341f + round_magic) - round_magic;
    float r = a - n * 0.693359375f;        /* ln2, high part: n * this is exact */
    r = r - n * -2.12194440e-4f;           /* ln2, the rest */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float er = p * r * r + r + 1.0f;
    union {
        int32_t i;
        float f;
    } scale = {((int32_t)n + 127) << 23};
    return er * scale.f;
}
#endif

/* exp(x) for x <= 0 (a softmax argument once the row's max is subtracted): 0 below BK_EXPF_MIN, and a
 * NaN stays NaN (so a diverged score still reaches the loss). Branch-free on the host: it vectorises. */
static inline BK_HOST_INLINE BIASKIT_HD float bk_expf_nonpositive(float x)
{
#ifdef __CUDA_ARCH__
    return expf(x);
#else
    float c = x > BK_EXPF_MIN ? x : BK_EXPF_MIN;
    float e = bk_expf_poly(c);
    e = x < BK_EXPF_MIN ? 0.0f : e;
    return x == x ? e : x;
#endif
}

#endif
