/* The sliding window with attention sinks of plugins/window, written with <biaskit/formula_plugin.h>, for
 * tests/test_formula_v2.c (the same mask for the same options). */
#include <biaskit/formula_plugin.h>

#define WINDOW_FP_CONSTANTS(C)                                                                             \
    C(window, BIASKIT_TP_INT(0, 0, INT32_MAX), "keys with i - j < window are visible; 0: the train length")  \
    C(sinks, BIASKIT_TP_INT(0, 0, INT32_MAX), "the first `sinks` keys stay visible to every query")        \
    C(distance_cap, BIASKIT_TP_INT(0, 0, INT32_MAX), "> 0: distance tables read at min(d, distance_cap)")

BIASKIT_FP_TYPES(window_fp, BIASKIT_TP_NO_PARAMS, WINDOW_FP_CONSTANTS)

BIASKIT_FP_MASK(window_fp)
{
    m->window = c.window ? c.window : c.train_length;
    m->sinks = c.sinks;
    m->distance_cap = c.distance_cap;
}

BIASKIT_MASK_PLUGIN(window_fp, WINDOW_FP_CONSTANTS, .name = "window_fp", .version = "1.0.0",
                    .summary = "test: sliding window + sinks through <biaskit/formula_plugin.h> (as plugins/window)")
