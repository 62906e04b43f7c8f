/* BiPE's segmentation (He et al., "Two Stones Hit One Bird: Bilevel Positional Encoding for Better
 * Length Extrapolation", ICML 2024, §3.1), written once for the host code and device code: a token
 * gets the index of its segment and its position inside it; a delimiter belongs to the segment it
 * closes, so the token after it starts the next segment at position 0. */
#ifndef BIASKIT_BIPE_MATH_H
#define BIASKIT_BIPE_MATH_H

#include <biaskit/plugin.h>

#include <stdint.h>

/* One step: writes the token's (segment, position) from the running state, then advances the state
 * past it; `closes` says whether the token is a delimiter. */
static inline BIASKIT_HD void bk_bipe_step(int closes, int32_t *segment, int32_t *position, int32_t *index_out,
                                           int32_t *position_out)
{
    *index_out = *segment;
    *position_out = *position;
    if (closes) {
        *segment += 1;
        *position = 0;
    } else {
        *position += 1;
    }
}

#endif
