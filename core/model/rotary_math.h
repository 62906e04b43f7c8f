/* RoPE's rotation of one pair of channels, written once for the host and the device.
 * Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding" (2021), Eq. 34 in the
 * rotate-half layout of GPT-NeoX / Llama: the pair is (x[k], x[k + hd/2]), rotated by the angle
 * theta = p * inv_freq[k]:   y1 = x1 cos - x2 sin,   y2 = x2 cos + x1 sin.
 * The rotation is orthogonal, so its backward is the same call with -sin. The tables may carry an
 * amplitude a (YaRN's temperature; model/positions.h): cos_theta = a cos, sin_theta = a sin make the map
 * a R, and the same call with -sin_theta is a R^T, still its exact transpose (the gradient). */
#ifndef BK_ROTARY_MATH_H
#define BK_ROTARY_MATH_H

#include <biaskit/plugin.h>

static inline BIASKIT_HD void bk_rotate_pair(float *x1, float *x2, float cos_theta, float sin_theta)
{
    float a = *x1, b = *x2;
    *x1 = a * cos_theta - b * sin_theta;
    *x2 = b * cos_theta + a * sin_theta;
}

#endif
