/* A sliding window with attention sinks, written as an outside author would against the installed SDK:
 * query i sees the keys j with i - j < window and the first `sinks` keys; everything else is exactly -inf.
 * The window is a property of the model, not of the evaluated length (0: the training length). */
#include <biaskit/formula_plugin.h>

#define WND_CONSTANTS(C)                                                                           \
    C(window, BIASKIT_TP_INT(0, 0, INT32_MAX), "keys i - j < window are visible; 0: the training length") \
    C(sinks, BIASKIT_TP_INT(4, 0, INT32_MAX), "the first sinks keys stay visible")
BIASKIT_FP_TYPES(wnd, BIASKIT_TP_NO_PARAMS, WND_CONSTANTS)
BIASKIT_FP_MASK(wnd)
{
    m->window = c.window ? c.window : c.train_length;
    m->sinks = c.sinks;
}
BIASKIT_MASK_PLUGIN(wnd, WND_CONSTANTS, .name = "windowed", .version = "1.0.0",
                    .summary = "sliding window with attention sinks")
