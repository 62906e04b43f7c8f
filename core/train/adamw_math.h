/* One AdamW update of one value, written once for the host loops and the device kernels
 * (train/adamw.h has the step's definition):
 *     m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *     p -= lr (m / bc1 / (sqrt(v / bc2) + eps) + wd p)      bc1 = 1 - b1^t, bc2 = 1 - b2^t
 * in fp32, in this order, so that every backend computes the same bits from the same inputs. */
#ifndef BK_ADAMW_MATH_H
#define BK_ADAMW_MATH_H

#include "model/host_simd.h" /* BK_HOST_INLINE */

#include <biaskit/plugin.h> /* BIASKIT_HD */

#include <math.h>

static inline BK_HOST_INLINE BIASKIT_HD void bk_adamw_update(float *param, float grad, float *m, float *v, float lr,
                                                             float beta1, float beta2, float eps, float weight_decay,
                                                             float bc1, float bc2)
{
    float mk = beta1 * *m + (1.0f - beta1) * grad;
    float vk = beta2 * *v + (1.0f - beta2) * grad * grad;
    *m = mk, *v = vk;
    float mhat = mk / bc1, vhat = vk / bc2;
    *param -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * *param);
}

#endif
