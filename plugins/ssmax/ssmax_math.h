/* Scalable-Softmax (Nakanishi, "Scalable-Softmax Is Superior for Attention", arXiv 2501.19399):
 * softmax_j(n^(s z_j)) = softmax_j((s ln n) z_j), i.e. the logits of query i (0-based) multiplied by
 *
 *     s_h(i) = s_h ln n,   n = i + 1 (the keys a causal query sees),   ds_h(i)/ds_h = ln n
 *
 * with s learned per head (and per layer). ln n is logn_math.h's. */
#ifndef BK_SSMAX_MATH_H
#define BK_SSMAX_MATH_H

#include "../logn/logn_math.h"

/* s_init: 0.43, the value in the caption of the paper's Fig. 1 (the paper's own initialisation of s
 * is not confirmed) */
#define BK_SSMAX_DEFAULT_S 0.43

static inline BIASKIT_HD double bk_ssmax_scale(double s, int32_t i)
{
    return s * bk_logn_ln_n(i);
}

static inline BIASKIT_HD double bk_ssmax_ds(int32_t i)
{
    return bk_logn_ln_n(i);
}

#endif
