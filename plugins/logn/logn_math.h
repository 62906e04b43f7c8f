/* Log-length logit scaling: the factor on q_i . k_j / sqrt(d_head) of query i (0-based token index),
 * with n = i + 1 the number of keys a causal query sees (plugin.h, BIASKIT_CAP_SCALE):
 *
 *   log   s(i) = ln n                                   Chiang & Cholak, ACL 2022 (their encoder used the
 *                                                       string length as n)
 *   qwen  s(i) = ln n / ln L_train  when n > L_train,   Qwen's logn attention (modeling_qwen.py: log(n,
 *         else 1; 1 in training                         seq_length) if n > seq_length else 1, applied only
 *                                                       when not training)
 *
 * Scalable-Softmax (plugins/ssmax) multiplies the same ln n by a learned s_h. */
#ifndef BK_LOGN_MATH_H
#define BK_LOGN_MATH_H

#include <biaskit/plugin.h>

#include <math.h>
#include <stdint.h>

enum { BK_LOGN_LOG = 0, BK_LOGN_QWEN = 1 }; /* the order of the `form` choices */

/* ln n, n = i + 1 keys visible to query i */
static inline BIASKIT_HD double bk_logn_ln_n(int32_t i)
{
    return log((double)i + 1.0);
}

/* Qwen's factor: log_{L_train}(n) when n > L_train, else 1 (train_length >= 2) */
static inline BIASKIT_HD double bk_logn_qwen(int32_t i, int32_t train_length)
{
    return (int64_t)i + 1 > (int64_t)train_length ? bk_logn_ln_n(i) / log((double)train_length) : 1.0;
}

/* s(i) of a form; qwen is 1 while training */
static inline BIASKIT_HD double bk_logn_scale(int form, int32_t i, int32_t train_length, int training)
{
    if (form == BK_LOGN_QWEN)
        return training ? 1.0 : bk_logn_qwen(i, train_length);
    return bk_logn_ln_n(i);
}

#endif
