/* The Forgetting Transformer's forget gate (Lin, Nikishin, He and Courville, "Forgetting Transformer:
 * Softmax Attention with a Forget Gate", ICLR 2025), as a content position (plugin.h, CAP_CONTENT):
 *
 *     f_h(t) = sigmoid(z),  z = w_h . x_t + b_h               the forget gate of head h at token t
 *     a_h(t) = -log f_h(t) = softplus(-z) >= 0                 the step of the position
 *     Bias[h,i,j] = -(a_h(j+1) + ... + a_h(i)) = sum_{l=j+1..i} log f_h(l)     (not scaled by 1/sqrt(d))
 *     da/dz = -(1 - f) = -sigmoid(-z)
 *
 * With the gate data-independent (gate = "bias_only": a_h = softplus(-b_h) for every token) the bias is
 * -(i - j) softplus(-b_h): ALiBi with slope softplus(-b_h). The timescale initialisation of b gives head h
 * a forget rate whose time constant -1 / log f is T_h: b_h = -log(expm1(1 / T_h)). */
#ifndef BK_FOX_MATH_H
#define BK_FOX_MATH_H

#include <biaskit/plugin.h>

#include <math.h>

/* a = -log sigmoid(z) = softplus(-z) = max(-z, 0) + log1p(exp(-|z|)), stable for every finite z */
static inline BIASKIT_HD double bk_fox_step(double z)
{
    return (z < 0.0 ? -z : 0.0) + log1p(exp(-fabs(z)));
}

/* da/dz = -(1 - sigmoid(z)) = -sigmoid(-z) */
static inline BIASKIT_HD double bk_fox_dstep(double z)
{
    return z >= 0.0 ? -exp(-z) / (1.0 + exp(-z)) : -1.0 / (1.0 + exp(z));
}

/* The gate bias whose forget rate has time constant T (T > 0): -1 / log sigmoid(b) = T. */
static inline double bk_fox_bias_for_timescale(double T)
{
    return -log(expm1(1.0 / T));
}

#endif
