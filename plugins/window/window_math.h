/* The sliding window with attention sinks (StreamingLLM: Xiao et al., ICLR 2024) and LM-Infinite's
 * Lambda-shaped mask (Han et al., arXiv 2308.16137), as the engine applies them (plugin.h, BIASKIT_CAP_MASK;
 * the predicate itself lives in the engine):
 *
 *     key j is visible to query i  <=>  j <= i  and  (i - j < window  or  j < sinks)
 *
 * so a query sees itself and the window - 1 keys before it (FlashAttention's window_size[0] = window - 1:
 * its window_size[0] = w keeps w + 1 keys), and the first `sinks` keys always. With distance_cap > 0 the
 * distance tables are read at min(d, distance_cap) (LM-Infinite's limit_distance). */
#ifndef BK_WINDOW_MATH_H
#define BK_WINDOW_MATH_H

#include <biaskit/plugin.h>

#include <stdint.h>

/* The window when the option is 0 (its default): the training length, LM-Infinite's local branch
 * (L_pretrain). A model trained at that length sees no mask in training (every i - j < L_train) and at
 * most L_train keys (plus the sinks) per query beyond it. */
static inline BIASKIT_HD int64_t bk_window_resolve(int64_t window, int32_t train_length)
{
    return window == 0 ? (int64_t)train_length : window;
}

#endif
