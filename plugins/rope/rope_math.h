/* RoPE's frequencies, written once (host and device). Su et al., "RoFormer: Enhanced Transformer
 * with Rotary Position Embedding" (2021), Eq. 15: theta_k = base^(-2k/d), k = 0 .. d/2 - 1, for a
 * head of width d; pair k of q and k at position p is rotated by p * theta_k. The engine applies the
 * rotation (rotate-half layout of GPT-NeoX / Llama: the pair is (x[k], x[k + d/2])). */
#ifndef BIASKIT_ROPE_MATH_H
#define BIASKIT_ROPE_MATH_H

#include <biaskit/plugin.h>

#include <math.h>
#include <stdint.h>

static inline BIASKIT_HD float bk_rope_inv_freq(double base, int32_t k, int32_t d_head)
{
    return (float)pow(base, -2.0 * (double)k / (double)d_head);
}

#endif
