/* An out-of-tree biaskit plugin: the Gaussian bias T_h(d) = -w_h d^2, one learnable width per head,
 * written with <biaskit/table_plugin.h> (formula and gradient; the SDK writes the rest). */
#include <biaskit/table_plugin.h>

/* X(name, PER_HEAD | SCALAR, init rule, lower, upper, doc): w starts at 1e-3 and stays >= 0 (below 0
 * the bias would reward distance). Options: width = [w] or one per head; learnable = false fixes w. */
#define GAUSSIAN_PARAMS(X) X(width, PER_HEAD, BIASKIT_TP_CONST(1e-3), 0.0, INFINITY, "width w in T(d) = -w d^2")

BIASKIT_TP_TYPES(gaussian, GAUSSIAN_PARAMS, BIASKIT_TP_NO_CONSTANTS)

BIASKIT_TP_TABLE(gaussian) { return -p.width * (float)d * (float)d; }
BIASKIT_TP_GRADIENT(gaussian) { g->width = -(float)d * (float)d; }

BIASKIT_TABLE_PLUGIN(gaussian, GAUSSIAN_PARAMS, BIASKIT_TP_NO_CONSTANTS, .name = "gaussian", .version = "0.2.0",
                     .summary = "example: Gaussian bias -w_h d^2, one learnable width per head",
                     .reference = "biaskit SDK example (the Gaussian kernel of MEP, Gao 2024, as a plain bias)")
