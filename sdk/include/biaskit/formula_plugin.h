/*
 * biaskit plugin SDK: formula-first plugins beyond distance tables (ABI 2): coordinate tables, masks,
 * logit scales and length-aware rotary frequencies.
 *
 * <biaskit/table_plugin.h> writes a whole distance-table plugin from a formula T(p, c, h, d) and its
 * derivative. This header does the same for the four shapes ABI 2 added (plugin.h, "ABI 2"):
 *
 *   coordinate  Bias[h,i,j] = F_h(u(i, i - j)),  u(i, d) = phi(d) rscale(i) in [0, 1]    (FIRE)
 *               the author writes F(p, c, h, u), phi(p, c, d), rscale(p, c, i) and their derivatives;
 *               the header tabulates F on a grid of u (the `grid` option), and gives table /
 *               table_backward over the grid, coordinate_points, coordinate and coordinate_backward
 *   mask        the author writes window, sinks and distance_cap from the constants       (sliding window)
 *   scale       the author writes s(p, c, h, i, ctx) and its derivative                  (log n, SSMax)
 *   rotary      the author writes inv_freq(c, k, ctx) and amplitude(c, ctx)               (PI, NTK, YaRN)
 *   views       rotary plus a far view: the pairs d = i - j >= far_from(c, ctx) attend with q_i at
 *               far_q(c, i, ctx) and k_j at far_k(c, j, ctx), the nearer ones at i and j; the
 *               engine merges the two passes exactly               (Self-Extend, ReRoPE, STRING)
 *
 * with everything else generated as table_plugin.h generates it: options from the parameter and
 * constant lists, init rules, projection, named tensors, the host loops, the deterministic gradient
 * reduction, the descriptor and the entry point. No CUDA: the engine calls these hooks on the host (their
 * arrays are O(grid + distances + rows) per layer, never T x T: the engine computes them, checks
 * them and uploads them) and its own attention kernels do the per-element work (the grid lookup, the
 * mask, the scale, the rotation). A plugin written with this header is a .c file only; under nvcc the
 * header refuses to compile.
 *
 * ---- What the author writes --------------------------------------------------------------------------
 *
 * 1. Parameters, as in table_plugin.h: an X-macro list, one line each,
 *        X(name, shape, init rule, lower bound, upper bound, "doc")
 *    with table_plugin.h's shapes (PER_HEAD, SCALAR, FIXED_PER_HEAD, FIXED_SCALAR, PER_HEAD_IF(cond, "when"),
 *    SCALAR_IF(cond, "when")) and, here only, arrays whose length n is an expression of the constants:
 *        ARRAY(n)                 n values shared by the heads (c.width hidden units)
 *        PER_HEAD_ARRAY(n)        n values per head: a heads x n matrix, row-major (W2 of an MLP)
 *        FIXED_ARRAY(n), FIXED_PER_HEAD_ARRAY(n)   the same, never learnable
 *    init rules: BIASKIT_TP_CONST(v), BIASKIT_TP_ALIBI(scale) (PER_HEAD only), BIASKIT_TP_UNIFORM(lo, hi)
 *    (lo + (hi - lo) u), BIASKIT_TP_SYMMETRIC(a) (U(-a, a) drawn as a (2u - 1), nn.Linear's init with
 *    a = 1/sqrt(fan_in)) and BIASKIT_TP_EXPR(expr), a C expression (in double) of h, H, c and layer: h is
 *    the head (0 for SCALAR) or, for the arrays, the element's index within the row (the same in every
 *    head's row of a PER_HEAD_ARRAY), H the number of heads, c the context (item 3), layer the copy being
 *    initialised (0 .. layers - 1 for a per-layer term; -1 for a shared copy and for fixed values), e.g.
 *    X(w, ARRAY(c.width), BIASKIT_TP_EXPR(pow(2.0, -h) / c.width), ...); a value that is not a finite float
 *    is an error naming the parameter, the element, the layer and the value. The other rules' numbers and
 *    the bounds may read the constants (BIASKIT_TP_SYMMETRIC(1 / sqrt(c.width))). Each array is checked in
 *    create() to have 1 .. 2^24 elements. The per-layer copies and their seeds: as table_plugin.h says.
 *    A coordinate plugin has two lists: PARAMS, F's parameters, and UPARAMS, the coordinate's (phi and
 *    rscale do not depend on the head: SCALAR or ARRAY shapes only, a static assertion says so); theta is
 *    PARAMS then UPARAMS. Mask and rotary plugins have no parameters (the ABI gives them no theta).
 * 2. Constants (extra options), as in table_plugin.h: C(name, BIASKIT_TP_REAL(def, lo, hi) |
 *    BIASKIT_TP_INT(def, lo, hi) | BIASKIT_TP_CHOICE("def", "a|b"), "doc"); here a REAL is a double.
 * 3. The types:  BIASKIT_FP_TYPES(prefix, PARAMS, CONSTANTS)  (scale; mask and rotary with
 *    BIASKIT_TP_NO_PARAMS), or  BIASKIT_FP_COORDINATE_TYPES(prefix, PARAMS, UPARAMS, CONSTANTS).  They
 *    declare
 *        prefix_params  p: a field per parameter of every list, a double (the float in theta, exactly) or,
 *                       for an array, a const float * to its n values (a PER_HEAD_ARRAY: to head h's row);
 *                       an absent _IF parameter reads 0
 *        prefix_grad    g of F / s: a double per parameter of PARAMS, a double * to n doubles for an array,
 *                       all 0 when the derivative function starts: set what is not 0
 *        prefix_ugrad   g of phi / rscale (coordinate plugins): the same for UPARAMS
 *        prefix_ctx     c: the model (c.heads, c.layers, c.d_model, c.d_head, c.train_length; the same fields
 *                       as a table plugin's context) and a field per constant (a REAL is a double, an INT
 *                       or CHOICE an int32_t); so no constant may be called heads, layers, d_model, d_head
 *                       or train_length (a static assertion names it)
 * 4. The formulas, as bodies after these macros (host code; compute in double: the header rounds each
 *    value to float once). `ctx` is the engine's biaskit_context of the call (length, train_length,
 *    training, layer; never NULL; fields the engine did not fill read 0, as the header copies it). The
 *    engine asks for the coordinate, the scale and the mask once per forward, ctx->length being the
 *    longest sequence of the call, and reads the shorter rows from the same arrays:
 *    a coordinate or a scale must not depend on ctx->length (ctx->training and ctx->layer are fine); the
 *    rotary frequencies are asked again whenever the length changes:
 *      coordinate   BIASKIT_FP_F(prefix)               { return F; }   double F(p, c, h, u), u in [0, 1]
 *                   BIASKIT_FP_F_GRADIENT(prefix)      { g->name = dF/dname; }   (p, c, h, u, g)
 *                   BIASKIT_FP_PHI(prefix)             { return phi; } double phi(p, c, d, ctx), d >= 0
 *                   BIASKIT_FP_PHI_GRADIENT(prefix)    { g->name = dphi/dname; } (p, c, d, ctx, g)
 *                   BIASKIT_FP_RSCALE(prefix)          { return rscale; } double rscale(p, c, i, ctx), i >= 0
 *                   BIASKIT_FP_RSCALE_GRADIENT(prefix) { g->name = drscale/dname; } (p, c, i, ctx, g)
 *                   phi must be >= 0 and non-decreasing in d, rscale >= 0, and phi(i) rscale(i) <= 1 (the
 *                   engine checks all three, naming the first bad index). In phi and rscale, p's per-head
 *                   parameters hold head 0's values: the coordinate is the same for every head.
 *      scale        BIASKIT_FP_SCALE(prefix)           { return s; }   double s(p, c, h, i, ctx)
 *                   BIASKIT_FP_SCALE_GRADIENT(prefix)  { g->name = ds/dname; }   (p, c, h, i, ctx, g)
 *      mask         BIASKIT_FP_MASK(prefix)            { m->window = ...; m->sinks = ...; m->distance_cap = ...; }
 *                   (c, ctx, m): window >= 1 (keys i - j < window are visible), sinks >= 0, distance_cap >= 0
 *                   (0: not capped); the fields start at 0
 *      rotary       BIASKIT_FP_INV_FREQ(prefix)        { return theta_k; } double inv_freq(c, k, ctx), pair
 *                                                      k = 0 .. d_head/2 - 1 turns by p theta_k
 *                   BIASKIT_FP_AMPLITUDE(prefix)       { return a; }   double amplitude(c, ctx) > 0 (multiplies
 *                                                      q and k after the rotation), or BIASKIT_FP_NO_AMPLITUDE(prefix)
 *      views        the two of rotary, and
 *                   BIASKIT_FP_FAR_FROM(prefix)        { return W; }   int64_t far_from(c, ctx) >= 1: the far view's
 *                                                      first distance
 *                   BIASKIT_FP_FAR_Q(prefix)           { return q; }   double far_q(c, i, ctx): query i's position
 *                   BIASKIT_FP_FAR_K(prefix)           { return k; }   double far_k(c, j, ctx): key j's position
 *    A derivative function with nothing learnable to set is written with an empty body: {}.
 * 5. The plugin, whose trailing arguments are designated initialisers of the descriptor (.name, .version,
 *    .summary required; .reference, .flags = BIASKIT_FLAG_PER_LAYER optional):
 *        BIASKIT_COORDINATE_PLUGIN(prefix, PARAMS, UPARAMS, CONSTANTS, GRID, .name = ..., ...)
 *        BIASKIT_SCALE_PLUGIN(prefix, PARAMS, CONSTANTS, .name = ..., ...)
 *        BIASKIT_MASK_PLUGIN(prefix, CONSTANTS, .name = ..., ...)
 *        BIASKIT_ROTARY_PLUGIN(prefix, CONSTANTS, .name = ..., ...)
 *        BIASKIT_VIEWS_PLUGIN(prefix, CONSTANTS, .name = ..., ...)
 *    GRID is the default of the coordinate plugin's `grid` option. The _WITH forms (BIASKIT_SCALE_PLUGIN_WITH(
 *    prefix, PARAMS, CONSTANTS, &settings, ...), and so on, the settings after the lists and GRID) take a
 *    biaskit_tp_settings whose setup() is called at the end of create(), as in table_plugin.h (same_rows is
 *    not read here). As there, the formula bodies get no services (they return a value and cannot fail):
 *    check and log in setup (s->svc); a NaN or inf the engine rejects, naming plugin, term, head and index.
 *
 * ---- What it generates ----------------------------------------------------------------------------------
 *
 *   options     `learnable` (when something is learnable), one DOUBLE_ARRAY option per parameter (1 value, or
 *               one per head (PER_HEAD), or every element (arrays); within the bounds; learnable = false
 *               fixes the given values, or the CONST / ALIBI / EXPR init rule, and refuses a parameter whose rule is
 *               random and that is not given, naming it), the constants (range-checked, naming the key),
 *               and for a coordinate plugin `grid` (2 .. 2^20 points, default GRID). As table_plugin.h.
 *   theta       the present parameters in list order (coordinate: PARAMS, then UPARAMS), each of H (PER_HEAD),
 *               1 (SCALAR), n (ARRAY) or H x n (PER_HEAD_ARRAY, row by row) floats; param_tensors names them
 *               after the parameters (rows x cols: H x 1, 1 x 1, n x 1, H x n).
 *   param_init  list order, element by element; every UNIFORM or SYMMETRIC element takes one draw from
 *               biaskit_rng_seeded(seed), given or not; then param_project, the clamp into [lower, upper]
 *               (idempotent, a NaN stays NaN). EXPR reads layer = -1 here; param_init_ctx (set only when
 *               a rule is EXPR) is the same with layer = ctx->layer, and the engine calls it instead.
 *   param_info  each tensor's bounds and init rule in words, as table_plugin.h ("uniform(0.01, 1)",
 *               "symmetric(0.177)", "expr: pow(2.0, -h) / c.width", "given", ...).
 *   coordinate  table[h * P + g] = (float)F(p_h, c, h, u_g), u_g = (double)g / (P - 1), P = the `grid` option
 *               (table() refuses another P, naming the option); phi[d] = (float)phi(p, c, d, ctx) for
 *               d < distances and rscale[i] = (float)rscale(p, c, i, ctx) for i < rows.
 *   scale       scale[h * rows + i] = (float)s(p_h, c, h, i, ctx).
 *   mask        the author's window, sinks and distance_cap, checked (window >= 1, sinks >= 0, cap >= 0: else
 *               an error with the three values) and written only into the fields inside out->struct_size (a
 *               distance_cap > 0 that the engine's struct cannot hold is BIASKIT_ERR_UNSUPPORTED). create()
 *               evaluates the mask at the training length (in training and in evaluation) and refuses the
 *               options when it is invalid there.
 *   rotary      rotary_ctx(): inv_freq[k] = (float)inv_freq(c, k, ctx) for k < d_head/2 and *amplitude =
 *               (float)amplitude(c, ctx), checked finite (and the amplitude > 0); create() refuses an odd
 *               head width. No rotary_frequencies(): every ABI 2 engine calls rotary_ctx() instead.
 *   views       rotary_ctx() as rotary, and rotary_views(): two views, [0, W) at the token indices and
 *               [W, inf) at far_q(c, i, ctx), far_k(c, j, ctx) for every token (W = far_from(c, ctx), checked
 *               >= 1 and below 2^31; the positions checked finite, naming the token).
 *   backward    deterministic, in double, in the order of table_plugin.h's host loop:
 *               table_backward and scale_backward: for each head h, an accumulator per element of the
 *               gradient row (every element of a shared parameter, head h's row of a per-head one) sums
 *               (double)dout * (the author's derivative) over g (resp. i) ascending; then a per-head
 *               element gets dtheta += (float)sum, and a shared one (SCALAR, ARRAY) adds the head sums in
 *               double, heads ascending, and gets dtheta += (float)total once.
 *               coordinate_backward: one accumulator per element of UPARAMS sums (double)dphi[d] dphi/dname
 *               over d ascending, then (double)drscale[i] drscale/dname over i ascending; dtheta += (float).
 *               Nothing is added for a frozen plugin (learnable = false, or FIXED parameters).
 *   errors      a NULL theta when learnable, distances, rows or points < 1, a grid other than the option's,
 *               0 heads, an odd head width (rotary), a mask or rotary value out of range, bad options (at the
 *               option's file:line:column), out of memory: each says what was expected.
 *
 * Parameter and constant names are option keys ([a-z0-9_]+, not learnable, not an engine term key; `grid`
 * is taken in a coordinate plugin), so tensors are named in lower case. One plugin per translation unit.
 *
 * ---- Worked examples (each installed whole: <prefix>/share/biaskit/examples/formula/fire_fp.c,
 * window_fp.c, ssmax_fp.c and rope_pi_fp.c there)
 *
 * A sliding window with attention sinks (the built-in window,
 * <prefix>/share/biaskit/examples/plugins/window/window.c):
 *
 *     #include <biaskit/formula_plugin.h>
 *     #define WIN_CONSTANTS(C)                                                                          \
 *         C(window, BIASKIT_TP_INT(0, 0, INT32_MAX), "keys i - j < window visible; 0: the training length") \
 *         C(sinks, BIASKIT_TP_INT(0, 0, INT32_MAX), "the first sinks keys stay visible")                  \
 *         C(distance_cap, BIASKIT_TP_INT(0, 0, INT32_MAX), "> 0: tables read at min(d, cap)")
 *     BIASKIT_FP_TYPES(win, BIASKIT_TP_NO_PARAMS, WIN_CONSTANTS)
 *     BIASKIT_FP_MASK(win)
 *     {
 *         m->window = c.window ? c.window : c.train_length;
 *         m->sinks = c.sinks;
 *         m->distance_cap = c.distance_cap;
 *     }
 *     BIASKIT_MASK_PLUGIN(win, WIN_CONSTANTS, .name = "win", .version = "1.0.0", .summary = "sliding window")
 *
 * Scalable-Softmax, s_h(i) = s_h ln(i + 1), one learnable s per head and layer (the built-in ssmax,
 * <prefix>/share/biaskit/examples/plugins/ssmax/ssmax.c):
 *
 *     #include <biaskit/formula_plugin.h>
 *     #define SSM_PARAMS(X) X(s, PER_HEAD, BIASKIT_TP_CONST(0.43), -INFINITY, INFINITY, "s of s ln(i + 1)")
 *     BIASKIT_FP_TYPES(ssm, SSM_PARAMS, BIASKIT_TP_NO_CONSTANTS)
 *     BIASKIT_FP_SCALE(ssm) { return p.s * log((double)i + 1.0); }
 *     BIASKIT_FP_SCALE_GRADIENT(ssm) { g->s = log((double)i + 1.0); }
 *     BIASKIT_SCALE_PLUGIN(ssm, SSM_PARAMS, BIASKIT_TP_NO_CONSTANTS, .name = "ssm", .version = "1.0.0",
 *                          .summary = "Scalable-Softmax", .flags = BIASKIT_FLAG_PER_LAYER)
 *
 * RoPE with position interpolation (theta_k / s; factor 0: dynamic, s = max(1, length / L)):
 *
 *     #include <biaskit/formula_plugin.h>
 *     #define PI_CONSTANTS(C)                                                                           \
 *         C(base, BIASKIT_TP_REAL(10000, 2, 1e30), "frequency base")                                   \
 *         C(factor, BIASKIT_TP_REAL(1, 0, 1e6), "s: theta_k / s; 0: s = max(1, length / L)")           \
 *         C(original_length, BIASKIT_TP_INT(0, 0, INT32_MAX), "L; 0: the training length")
 *     BIASKIT_FP_TYPES(pi, BIASKIT_TP_NO_PARAMS, PI_CONSTANTS)
 *     BIASKIT_FP_INV_FREQ(pi)
 *     {
 *         double L = c.original_length ? c.original_length : c.train_length, s = ctx->length / L;
 *         return pow(c.base, -2.0 * k / c.d_head) / (c.factor != 0.0 ? c.factor : s > 1.0 ? s : 1.0);
 *     }
 *     BIASKIT_FP_NO_AMPLITUDE(pi)
 *     BIASKIT_ROTARY_PLUGIN(pi, PI_CONSTANTS, .name = "pi", .version = "1.0.0", .summary = "RoPE, PI")
 *
 * FIRE (Li et al., ICLR 2024): u = psi(d) / (psi(max(i, L)) + 1e-6), psi(x) = log(|c x| + 1) with learnable c,
 * and F_h(u) = b2_h + sum_k W2[h,k] ReLU(W1_k u + b1_k), one per layer (L fixed here;
 * <prefix>/share/biaskit/examples/formula/fire_fp.c also learns L's multiplier, as the built-in fire):
 *
 *     #include <biaskit/formula_plugin.h>
 *     #define FI_CONSTANTS(C)                                                                           \
 *         C(width, BIASKIT_TP_INT(32, 1, 4096), "hidden units")                                        \
 *         C(threshold, BIASKIT_TP_REAL(512, 1, 1e30), "L of max(i, L)")
 *     #define FI_PARAMS(X)                                                                               \
 *         X(w1, ARRAY(c.width), BIASKIT_TP_SYMMETRIC(1), -INFINITY, INFINITY, "W1")                      \
 *         X(b1, ARRAY(c.width), BIASKIT_TP_SYMMETRIC(1), -INFINITY, INFINITY, "b1")                      \
 *         X(w2, PER_HEAD_ARRAY(c.width), BIASKIT_TP_SYMMETRIC(1 / sqrt(c.width)), -INFINITY, INFINITY, "W2") \
 *         X(b2, PER_HEAD, BIASKIT_TP_SYMMETRIC(1 / sqrt(c.width)), -INFINITY, INFINITY, "b2")
 *     #define FI_UPARAMS(X) X(c, SCALAR, BIASKIT_TP_CONST(0.1), -INFINITY, INFINITY, "c of psi")
 *     BIASKIT_FP_COORDINATE_TYPES(fi, FI_PARAMS, FI_UPARAMS, FI_CONSTANTS)
 *     static double psi_dc(double c, double x) { return x * ((c * x > 0) - (c * x < 0)) / (fabs(c * x) + 1); }
 *     static double norm(fi_ctx c, int32_t i) { return i > c.threshold ? i : c.threshold; }
 *     BIASKIT_FP_PHI(fi) { return log1p(fabs(p.c * d)); }
 *     BIASKIT_FP_PHI_GRADIENT(fi) { g->c = psi_dc(p.c, d); }
 *     BIASKIT_FP_RSCALE(fi) { return 1 / (log1p(fabs(p.c * norm(c, i))) + 1e-6); }
 *     BIASKIT_FP_RSCALE_GRADIENT(fi)
 *     {
 *         double r = 1 / (log1p(fabs(p.c * norm(c, i))) + 1e-6);
 *         g->c = -r * r * psi_dc(p.c, norm(c, i));
 *     }
 *     BIASKIT_FP_F(fi)
 *     {
 *         double s = p.b2;
 *         for (int32_t k = 0; k < c.width; k++)
 *             s += p.w2[k] * fmax(p.w1[k] * u + p.b1[k], 0.0);
 *         return s;
 *     }
 *     BIASKIT_FP_F_GRADIENT(fi)
 *     {
 *         g->b2 = 1;
 *         for (int32_t k = 0; k < c.width; k++) {
 *             double a = p.w1[k] * u + p.b1[k];
 *             g->w2[k] = a > 0 ? a : 0;
 *             g->w1[k] = a > 0 ? p.w2[k] * u : 0;
 *             g->b1[k] = a > 0 ? p.w2[k] : 0;
 *         }
 *     }
 *     BIASKIT_COORDINATE_PLUGIN(fi, FI_PARAMS, FI_UPARAMS, FI_CONSTANTS, 1025, .name = "fi", .version = "1.0.0",
 *                               .summary = "FIRE", .flags = BIASKIT_FLAG_PER_LAYER)
 *
 * `biaskit new-plugin NAME --kind coordinate|mask|scale|rotary|views` writes a folder with such a plugin that
 * builds and passes `biaskit check` as written.
 *
 * Plain C11, host only; needs <math.h> (link -lm).
 */
#ifndef BIASKIT_FORMULA_PLUGIN_H
#define BIASKIT_FORMULA_PLUGIN_H

#if defined(__CUDACC__)
#error "<biaskit/formula_plugin.h> writes host-only plugins (the engine's kernels do the per-element work): compile the plugin as C, without a .cu file"
#endif

#include <biaskit/table_plugin.h>

/* The largest grid of a coordinate plugin: the engine's and biaskit check's limit of coordinate_points(). */
#define BIASKIT_FP_MAX_GRID 1048576

/* ---- shapes: a value (double in p, double in g) or a row (const float * in p, double * in g) ----------- */
#define BIASKIT_FP_TAG_PER_HEAD bkfp_one
#define BIASKIT_FP_TAG_SCALAR bkfp_one
#define BIASKIT_FP_TAG_FIXED_PER_HEAD bkfp_one
#define BIASKIT_FP_TAG_FIXED_SCALAR bkfp_one
#define BIASKIT_FP_TAG_PER_HEAD_IF(cond, when) bkfp_one
#define BIASKIT_FP_TAG_SCALAR_IF(cond, when) bkfp_one
#define BIASKIT_FP_TAG_ARRAY(n) bkfp_row
#define BIASKIT_FP_TAG_PER_HEAD_ARRAY(n) bkfp_row
#define BIASKIT_FP_TAG_FIXED_ARRAY(n) bkfp_row
#define BIASKIT_FP_TAG_FIXED_PER_HEAD_ARRAY(n) bkfp_row
#define BIASKIT_FP_PTYPE_bkfp_one double
#define BIASKIT_FP_PTYPE_bkfp_row const float *
#define BIASKIT_FP_GTYPE_bkfp_one double
#define BIASKIT_FP_GTYPE_bkfp_row double *
/* 1 for the shapes that differ by head (not allowed in a coordinate's UPARAMS) */
#define BIASKIT_FP_HEADED_PER_HEAD 1
#define BIASKIT_FP_HEADED_SCALAR 0
#define BIASKIT_FP_HEADED_FIXED_PER_HEAD 1
#define BIASKIT_FP_HEADED_FIXED_SCALAR 0
#define BIASKIT_FP_HEADED_PER_HEAD_IF(cond, when) 1
#define BIASKIT_FP_HEADED_SCALAR_IF(cond, when) 0
#define BIASKIT_FP_HEADED_ARRAY(n) 0
#define BIASKIT_FP_HEADED_PER_HEAD_ARRAY(n) 1
#define BIASKIT_FP_HEADED_FIXED_ARRAY(n) 0
#define BIASKIT_FP_HEADED_FIXED_PER_HEAD_ARRAY(n) 1
/* constants: a REAL is a double here (host code only) */
#define BIASKIT_FP_CTYPE_bktp_real double
#define BIASKIT_FP_CTYPE_bktp_int int32_t
#define BIASKIT_FP_CTYPE_bktp_choice int32_t

/* ---- list callbacks (internal) -------------------------------------------------------------------------
 * A shape is pasted onto BIASKIT_FP_TAG_, expanded to its tag (a second level), then pasted again (a
 * third). `k_` counts the specs, `off_` the running offset in a gradient row. */
#define BIASKIT_FP_PFIELD_(name, shape, init, lo, hi, doc) BIASKIT_FP_PFIELD2_(BIASKIT_FP_TAG_##shape, name)
#define BIASKIT_FP_PFIELD2_(tag, name) BIASKIT_FP_PFIELD3_(tag, name)
#define BIASKIT_FP_PFIELD3_(tag, name) BIASKIT_FP_PTYPE_##tag name;
#define BIASKIT_FP_GFIELD_(name, shape, init, lo, hi, doc) BIASKIT_FP_GFIELD2_(BIASKIT_FP_TAG_##shape, name)
#define BIASKIT_FP_GFIELD2_(tag, name) BIASKIT_FP_GFIELD3_(tag, name)
#define BIASKIT_FP_GFIELD3_(tag, name) BIASKIT_FP_GTYPE_##tag name;
#define BIASKIT_FP_COUNT_(name, shape, init, lo, hi, doc) +1
#define BIASKIT_FP_HEADED_(name, shape, init, lo, hi, doc) +BIASKIT_FP_HEADED_##shape
#define BIASKIT_FP_CFIELD_(name, kind, doc) BIASKIT_FP_CFIELD2_(name, kind)
#define BIASKIT_FP_CFIELD2_(name, tag, ...) BIASKIT_FP_CTYPE_##tag name;
#define BIASKIT_FP_CTX_(name, kind, doc) BIASKIT_FP_CTX2_(name, kind)
#define BIASKIT_FP_CTX2_(name, tag, ...) c_.name = (BIASKIT_FP_CTYPE_##tag)s_->constants[bktp_c_##name];
#define BIASKIT_FP_SPEC_(name, shape, init, lo, hi, doc)                                                    \
    BIASKIT_TP_SPEC2_(#name, BIASKIT_TP_SHAPE_(shape), (double)(lo), (double)(hi), BIASKIT_TP_WHEN_##shape, doc, \
                      (int64_t)(BIASKIT_TP_LENGTH_##shape), BIASKIT_TP_LTEXT_##shape, init)
/* p_.name from the values v_ (laid out as theta) for head h_ */
#define BIASKIT_FP_LOAD_(name, shape, init, lo, hi, doc) BIASKIT_FP_LOAD2_(BIASKIT_FP_TAG_##shape, name)
#define BIASKIT_FP_LOAD2_(tag, name) BIASKIT_FP_LOAD3_(tag, name)
#define BIASKIT_FP_LOAD3_(tag, name) BIASKIT_FP_LD_##tag(name)
#define BIASKIT_FP_LD_bkfp_one(name) p_.name = biaskit_fp_value_(s_, v_, k_++, h_);
#define BIASKIT_FP_LD_bkfp_row(name) p_.name = biaskit_fp_row_(s_, v_, k_++, h_);
/* before a derivative function: values 0, rows pointed into row_ (zeroed by the caller) */
#define BIASKIT_FP_GSET_(name, shape, init, lo, hi, doc) BIASKIT_FP_GSET2_(BIASKIT_FP_TAG_##shape, name)
#define BIASKIT_FP_GSET2_(tag, name) BIASKIT_FP_GSET3_(tag, name)
#define BIASKIT_FP_GSET3_(tag, name) BIASKIT_FP_GS_##tag(name)
#define BIASKIT_FP_GS_bkfp_one(name)                                                                        \
    g_.name = 0.0;                                                                                          \
    off_ += biaskit_fp_row_length_(&s_->specs[k_++]);
#define BIASKIT_FP_GS_bkfp_row(name)                                                                        \
    g_.name = row_ + off_;                                                                                  \
    off_ += biaskit_fp_row_length_(&s_->specs[k_++]);
/* after it: the values into row_ (the rows are there already) */
#define BIASKIT_FP_GGET_(name, shape, init, lo, hi, doc) BIASKIT_FP_GGET2_(BIASKIT_FP_TAG_##shape, name)
#define BIASKIT_FP_GGET2_(tag, name) BIASKIT_FP_GGET3_(tag, name)
#define BIASKIT_FP_GGET3_(tag, name) BIASKIT_FP_GG_##tag(name)
#define BIASKIT_FP_GG_bkfp_one(name)                                                                        \
    row_[off_] = g_.name;                                                                                   \
    off_ += biaskit_fp_row_length_(&s_->specs[k_++]);
#define BIASKIT_FP_GG_bkfp_row(name) off_ += biaskit_fp_row_length_(&s_->specs[k_++]);

/* ---- host helpers ----------------------------------------------------------------------------------- */

/* The elements of a parameter in one gradient row: an array's n (a PER_HEAD_ARRAY: head h's row), else 1
 * (an absent _IF parameter keeps its slot, which stays 0 and is never added). */
static inline int64_t biaskit_fp_row_length_(const biaskit_tp_param *spec)
{
    return spec->shape == 3 || spec->shape == 4 ? spec->length : 1;
}

/* The elements of the gradient row of specs [k0, k1). */
static inline int64_t biaskit_fp_row_width_(const biaskit_tp_instance *s, int k0, int k1)
{
    int64_t w = 0;
    for (int k = k0; k < k1; k++)
        w += biaskit_fp_row_length_(&s->specs[k]);
    return w;
}

/* A value parameter of head h from values laid out as theta (0 when absent). */
static inline double biaskit_fp_value_(const biaskit_tp_instance *s, const float *v, int k, int32_t h)
{
    const biaskit_tp_param *spec = &s->specs[k];
    if (spec->shape == 0 || !v)
        return 0.0;
    return (double)v[s->offsets[k] + (spec->shape == 2 ? h : 0)];
}

/* An array parameter: its n values (a PER_HEAD_ARRAY: head h's row). */
static inline const float *biaskit_fp_row_(const biaskit_tp_instance *s, const float *v, int k, int32_t h)
{
    const biaskit_tp_param *spec = &s->specs[k];
    if (!v)
        return NULL;
    return v + s->offsets[k] + (spec->shape == 4 ? (int64_t)h * spec->length : 0);
}

/* After head h: the head's sums acc (the gradient row of specs [k0, k1)) into dtheta (per-head elements)
 * or into total (shared ones, heads ascending). */
static inline void biaskit_fp_add_head_(const biaskit_tp_instance *s, int k0, int k1, const double *acc, int32_t h,
                                        double *total, float *dtheta)
{
    int64_t at = 0;
    for (int k = k0; k < k1; k++) {
        const biaskit_tp_param *spec = &s->specs[k];
        int64_t n = biaskit_fp_row_length_(spec);
        if (spec->shape == 2 || spec->shape == 4) {
            float *out = dtheta + s->offsets[k] + (int64_t)h * (spec->shape == 4 ? spec->length : 1);
            for (int64_t j = 0; j < n; j++)
                out[j] += (float)acc[at + j];
        } else if (spec->shape != 0) {
            for (int64_t j = 0; j < n; j++)
                total[at + j] += acc[at + j];
        }
        at += n;
    }
}

/* Once, at the end: the shared elements' totals. */
static inline void biaskit_fp_add_totals_(const biaskit_tp_instance *s, int k0, int k1, const double *total,
                                          float *dtheta)
{
    int64_t at = 0;
    for (int k = k0; k < k1; k++) {
        const biaskit_tp_param *spec = &s->specs[k];
        int64_t n = biaskit_fp_row_length_(spec);
        if (spec->shape == 1 || spec->shape == 3)
            for (int64_t j = 0; j < n; j++)
                dtheta[s->offsets[k] + j] += (float)total[at + j];
        at += n;
    }
}

/* The values to read: theta when learnable (which must then be given), else the fixed values. */
static inline int biaskit_fp_values_(const biaskit_tp_instance *s, const float *theta, const float **v,
                                     biaskit_error *err)
{
    if (s->learnable && !theta)
        return s->svc->error(err, BIASKIT_ERR_INVALID, "expected %lld parameters (theta), got NULL",
                             (long long)s->count);
    *v = s->learnable ? theta : s->values;
    return BIASKIT_OK;
}

/* The engine's context, copied as far as it filled it (the rest 0), or the training length's when NULL. */
static inline biaskit_context biaskit_fp_context_(const biaskit_tp_instance *s, const biaskit_context *ctx)
{
    biaskit_context c;
    memset(&c, 0, sizeof c);
    if (ctx) {
        memcpy(&c, ctx, ctx->struct_size < sizeof c ? ctx->struct_size : sizeof c);
    } else {
        c.layer = -1;
        c.n_layers = s->geometry.n_layers;
        c.n_heads = s->heads;
        c.length = s->geometry.train_length;
        c.train_length = s->geometry.train_length;
    }
    c.struct_size = sizeof c;
    return c;
}

/* The same zeroed double buffers of n elements each (NULL when out of memory; free the first only). */
static inline double *biaskit_fp_scratch_(const biaskit_tp_instance *s, int64_t n, int copies, biaskit_error *err)
{
    double *b = (double *)calloc((size_t)(n > 0 ? n : 1) * (size_t)copies, sizeof *b);
    if (!b)
        s->svc->error(err, BIASKIT_ERR_NOMEM, "out of memory for a gradient row of %lld values", (long long)n);
    return b;
}

/* The mask's fields, checked, into the part of *out the engine's struct has. */
static inline int biaskit_fp_put_mask_(const biaskit_tp_instance *s, const biaskit_mask *m, biaskit_mask *out,
                                       biaskit_error *err)
{
    if (!(m->window >= 1 && m->sinks >= 0 && m->distance_cap >= 0))
        return s->svc->error(err, BIASKIT_ERR_INVALID,
                             "mask: window %d, sinks %d, distance_cap %d: expected window >= 1 (a query always sees "
                             "itself), sinks >= 0 and distance_cap >= 0",
                             (int)m->window, (int)m->sinks, (int)m->distance_cap);
    if (!out)
        return BIASKIT_OK;
    if (!BIASKIT_HAS_FIELD(out, biaskit_mask, sinks))
        return s->svc->error(err, BIASKIT_ERR_INVALID, "biaskit_mask too small (struct_size %u)",
                             (unsigned)out->struct_size);
    out->window = m->window;
    out->sinks = m->sinks;
    if (BIASKIT_HAS_FIELD(out, biaskit_mask, distance_cap))
        out->distance_cap = m->distance_cap;
    else if (m->distance_cap > 0)
        return s->svc->error(err, BIASKIT_ERR_UNSUPPORTED,
                             "distance_cap = %d, but this engine's biaskit_mask has no distance_cap field",
                             (int)m->distance_cap);
    return BIASKIT_OK;
}

/* ---- the types ----------------------------------------------------------------------------------------- */

/* p, g, the coordinate's g, c, the indices; the counts (F's parameters, all, learnable). Each struct has a
 * hidden last field so that it is never empty. */
#define BIASKIT_FP_COORDINATE_TYPES(P, PARAMS, UPARAMS, CONSTANTS)                                         \
    typedef struct P##_params {                                                                            \
        PARAMS(BIASKIT_FP_PFIELD_)                                                                         \
        UPARAMS(BIASKIT_FP_PFIELD_)                                                                        \
        double bkfp_none_;                                                                                 \
    } P##_params;                                                                                          \
    typedef struct P##_grad {                                                                              \
        PARAMS(BIASKIT_FP_GFIELD_)                                                                         \
        double bkfp_none_;                                                                                 \
    } P##_grad;                                                                                            \
    typedef struct P##_ugrad {                                                                             \
        UPARAMS(BIASKIT_FP_GFIELD_)                                                                        \
        double bkfp_none_;                                                                                 \
    } P##_ugrad;                                                                                           \
    CONSTANTS(BIASKIT_TP_CRESERVED_)                                                                       \
    typedef struct P##_ctx {                                                                               \
        BIASKIT_TP_GEOMETRY_FIELDS_                                                                        \
        CONSTANTS(BIASKIT_FP_CFIELD_)                                                                      \
    } P##_ctx;                                                                                             \
    enum P##_fp_pidx { PARAMS(BIASKIT_TP_PIDX_) UPARAMS(BIASKIT_TP_PIDX_) P##_fp_np };                     \
    enum P##_fp_cidx { CONSTANTS(BIASKIT_TP_CIDX_) P##_fp_nc };                                            \
    enum { P##_fp_nf = 0 PARAMS(BIASKIT_FP_COUNT_) };                                                      \
    enum { P##_fp_nlearn = 0 PARAMS(BIASKIT_TP_NLEARN_) UPARAMS(BIASKIT_TP_NLEARN_) };                     \
    enum { P##_fp_nexpr = 0 PARAMS(BIASKIT_TP_NEXPR_) UPARAMS(BIASKIT_TP_NEXPR_) };                        \
    BIASKIT_TP_STATIC_ASSERT_(P##_fp_nlearn == 0 || P##_fp_nlearn == (int)P##_fp_np,                       \
                              "formula_plugin.h: the parameters are all learnable or all FIXED");          \
    BIASKIT_TP_STATIC_ASSERT_(0 UPARAMS(BIASKIT_FP_HEADED_) == 0,                                          \
                              "formula_plugin.h: the coordinate's parameters (UPARAMS) are SCALAR or ARRAY: " \
                              "phi and rscale are the same for every head");
#define BIASKIT_FP_TYPES(P, PARAMS, CONSTANTS) BIASKIT_FP_COORDINATE_TYPES(P, PARAMS, BIASKIT_TP_NO_PARAMS, CONSTANTS)

/* ---- formula signatures (every argument may go unused) ---------------------------------------------------- */
#define BIASKIT_FP_U_ BIASKIT_TP_MAYBE_UNUSED_
#define BIASKIT_FP_F(P)                                                                                    \
    static inline double P##_fp_f(BIASKIT_FP_U_ P##_params p, BIASKIT_FP_U_ P##_ctx c, BIASKIT_FP_U_ int32_t h, \
                                  BIASKIT_FP_U_ double u)
#define BIASKIT_FP_F_GRADIENT(P)                                                                           \
    static inline void P##_fp_f_gradient(BIASKIT_FP_U_ P##_params p, BIASKIT_FP_U_ P##_ctx c,              \
                                         BIASKIT_FP_U_ int32_t h, BIASKIT_FP_U_ double u, BIASKIT_FP_U_ P##_grad *g)
#define BIASKIT_FP_PHI(P)                                                                                  \
    static inline double P##_fp_phi(BIASKIT_FP_U_ P##_params p, BIASKIT_FP_U_ P##_ctx c, BIASKIT_FP_U_ int32_t d, \
                                    BIASKIT_FP_U_ const biaskit_context *ctx)
#define BIASKIT_FP_PHI_GRADIENT(P)                                                                         \
    static inline void P##_fp_phi_gradient(BIASKIT_FP_U_ P##_params p, BIASKIT_FP_U_ P##_ctx c,            \
                                           BIASKIT_FP_U_ int32_t d, BIASKIT_FP_U_ const biaskit_context *ctx, \
                                           BIASKIT_FP_U_ P##_ugrad *g)
#define BIASKIT_FP_RSCALE(P)                                                                               \
    static inline double P##_fp_rscale(BIASKIT_FP_U_ P##_params p, BIASKIT_FP_U_ P##_ctx c,                \
                                       BIASKIT_FP_U_ int32_t i, BIASKIT_FP_U_ const biaskit_context *ctx)
#define BIASKIT_FP_RSCALE_GRADIENT(P)                                                                      \
    static inline void P##_fp_rscale_gradient(BIASKIT_FP_U_ P##_params p, BIASKIT_FP_U_ P##_ctx c,         \
                                              BIASKIT_FP_U_ int32_t i, BIASKIT_FP_U_ const biaskit_context *ctx, \
                                              BIASKIT_FP_U_ P##_ugrad *g)
#define BIASKIT_FP_SCALE(P)                                                                                \
    static inline double P##_fp_scale(BIASKIT_FP_U_ P##_params p, BIASKIT_FP_U_ P##_ctx c,                 \
                                      BIASKIT_FP_U_ int32_t h, BIASKIT_FP_U_ int32_t i,                    \
                                      BIASKIT_FP_U_ const biaskit_context *ctx)
#define BIASKIT_FP_SCALE_GRADIENT(P)                                                                       \
    static inline void P##_fp_scale_gradient(BIASKIT_FP_U_ P##_params p, BIASKIT_FP_U_ P##_ctx c,          \
                                             BIASKIT_FP_U_ int32_t h, BIASKIT_FP_U_ int32_t i,             \
                                             BIASKIT_FP_U_ const biaskit_context *ctx, BIASKIT_FP_U_ P##_grad *g)
#define BIASKIT_FP_MASK(P)                                                                                 \
    static inline void P##_fp_mask(BIASKIT_FP_U_ P##_ctx c, BIASKIT_FP_U_ const biaskit_context *ctx,      \
                                   BIASKIT_FP_U_ biaskit_mask *m)
#define BIASKIT_FP_INV_FREQ(P)                                                                             \
    static inline double P##_fp_inv_freq(BIASKIT_FP_U_ P##_ctx c, BIASKIT_FP_U_ int32_t k,                 \
                                         BIASKIT_FP_U_ const biaskit_context *ctx)
#define BIASKIT_FP_FAR_FROM(P)                                                                             \
    static inline int64_t P##_fp_far_from(BIASKIT_FP_U_ P##_ctx c, BIASKIT_FP_U_ const biaskit_context *ctx)
#define BIASKIT_FP_FAR_Q(P)                                                                                \
    static inline double P##_fp_far_q(BIASKIT_FP_U_ P##_ctx c, BIASKIT_FP_U_ int64_t i,                    \
                                      BIASKIT_FP_U_ const biaskit_context *ctx)
#define BIASKIT_FP_FAR_K(P)                                                                                \
    static inline double P##_fp_far_k(BIASKIT_FP_U_ P##_ctx c, BIASKIT_FP_U_ int64_t j,                    \
                                      BIASKIT_FP_U_ const biaskit_context *ctx)
#define BIASKIT_FP_AMPLITUDE(P)                                                                            \
    static inline double P##_fp_amplitude(BIASKIT_FP_U_ P##_ctx c, BIASKIT_FP_U_ const biaskit_context *ctx)
/* amplitude 1: q and k are only rotated */
#define BIASKIT_FP_NO_AMPLITUDE(P)                                                                         \
    BIASKIT_FP_AMPLITUDE(P) { return 1.0; }

/* ---- the parts every kind shares (internal) ----------------------------------------------------------------
 * The constants, the options (EXTRA: options of the kind, after the constants), the context, the specs,
 * the loader of p, and create() with a setup of the kind (KIND_SETUP, called before the author's). */
#define BIASKIT_FP_COMMON_(P, PARAMS, UPARAMS, CONSTANTS, SETTINGS, KIND_SETUP, EXTRA)                       \
    static const biaskit_tp_constant P##_fp_constants[] = {                                                \
        CONSTANTS(BIASKIT_TP_CSPEC_){NULL, 0, 0.0, NULL, NULL, 0.0, 0.0, NULL}};                           \
    static const biaskit_option P##_fp_options[] = {                                                       \
        BIASKIT_OPTION_BOOL("learnable", 1, "train the parameters; false: fixed at the given values (or "  \
                                            "their non-random init rule), no parameters"),                 \
        PARAMS(BIASKIT_TP_OPTION_) UPARAMS(BIASKIT_TP_OPTION_) CONSTANTS(BIASKIT_TP_COPTION_) EXTRA};      \
    enum { P##_fp_nopt = (int)(sizeof P##_fp_options / sizeof P##_fp_options[0]) - (P##_fp_nlearn == 0) };  \
    static const biaskit_plugin P##_fp_descriptor;                                                         \
    static P##_ctx P##_fp_ctx(const biaskit_tp_instance *s_)                                               \
    {                                                                                                      \
        P##_ctx c_;                                                                                        \
        memset(&c_, 0, sizeof c_);                                                                         \
        BIASKIT_TP_SET_GEOMETRY_(c_, s_);                                                                  \
        CONSTANTS(BIASKIT_FP_CTX_)                                                                         \
        return c_;                                                                                         \
    }                                                                                                      \
    /* parameter k_want_'s BIASKIT_TP_EXPR at element h (an array's index within the row) and copy layer */ \
    static double P##_fp_rule(const biaskit_tp_instance *s_, int k_want_, int32_t h, int32_t layer)        \
    {                                                                                                      \
        BIASKIT_TP_MAYBE_UNUSED_ const P##_ctx c = P##_fp_ctx(s_);                                         \
        BIASKIT_TP_MAYBE_UNUSED_ const int32_t H = s_->heads;                                              \
        BIASKIT_TP_MAYBE_UNUSED_ int k_ = 0;                                                               \
        (void)h, (void)layer, (void)k_want_;                                                               \
        PARAMS(BIASKIT_TP_RULE_)                                                                           \
        UPARAMS(BIASKIT_TP_RULE_)                                                                          \
        return NAN;                                                                                        \
    }                                                                                                      \
    static void P##_fp_specs(const biaskit_tp_instance *s_, biaskit_tp_param *out_)                        \
    {                                                                                                      \
        BIASKIT_TP_MAYBE_UNUSED_ P##_ctx c = P##_fp_ctx(s_);                                               \
        BIASKIT_TP_MAYBE_UNUSED_ int k_ = 0;                                                               \
        (void)out_;                                                                                        \
        PARAMS(BIASKIT_FP_SPEC_)                                                                           \
        UPARAMS(BIASKIT_FP_SPEC_)                                                                          \
    }                                                                                                      \
    BIASKIT_TP_MAYBE_UNUSED_ static P##_params P##_fp_load(const biaskit_tp_instance *s_, const float *v_,  \
                                                           int32_t h_)                                     \
    {                                                                                                      \
        P##_params p_;                                                                                     \
        BIASKIT_TP_MAYBE_UNUSED_ int k_ = 0;                                                               \
        memset(&p_, 0, sizeof p_);                                                                         \
        (void)s_, (void)v_, (void)h_;                                                                      \
        PARAMS(BIASKIT_FP_LOAD_)                                                                           \
        UPARAMS(BIASKIT_FP_LOAD_)                                                                          \
        return p_;                                                                                         \
    }                                                                                                      \
    static int P##_fp_setup(biaskit_tp_instance *s_, const biaskit_config *cfg_, biaskit_error *err_)      \
    {                                                                                                      \
        const biaskit_tp_settings *user_ = (SETTINGS);                                                     \
        s_->split = (int)P##_fp_nf;                                                                        \
        int rc_ = KIND_SETUP(s_, cfg_, err_);                                                              \
        if (!rc_ && user_ && user_->setup)                                                                 \
            rc_ = user_->setup(s_, cfg_, err_);                                                            \
        return rc_;                                                                                        \
    }                                                                                                      \
    static const biaskit_tp_settings P##_fp_settings = {0, P##_fp_setup};                                  \
    static int P##_fp_create(const biaskit_services *svc, const biaskit_config *cfg,                       \
                             const biaskit_geometry *geo, void **out, biaskit_error *err)                  \
    {                                                                                                      \
        return biaskit_tp_create(svc, cfg, geo, P##_fp_descriptor.name, P##_fp_np, P##_fp_nlearn > 0,      \
                                 P##_fp_specs, P##_fp_constants, P##_fp_nc, &P##_fp_settings, NULL,        \
                                 P##_fp_rule, out, err);                                                   \
    }

/* The descriptor's fields every kind shares. */
#define BIASKIT_FP_DESCRIPTOR_(P, CAPS)                                                                    \
    .struct_size = sizeof(biaskit_plugin), .abi_version = BIASKIT_ABI_VERSION, .capabilities = (CAPS),    \
    .options = P##_fp_options + (P##_fp_nlearn == 0), .n_options = (uint32_t)P##_fp_nopt,                 \
    .create = P##_fp_create, .destroy = biaskit_tp_destroy

/* The parameter hooks (only for kinds that have parameters); param_init_ctx when a rule is EXPR (it may read
 * the layer). */
#define BIASKIT_FP_PARAM_HOOKS_(P)                                                                         \
    .param_count = biaskit_tp_param_count, .param_init = biaskit_tp_param_init,                           \
    .param_project = biaskit_tp_param_project, .param_tensors = biaskit_tp_param_tensors,                 \
    .param_init_ctx = P##_fp_nexpr > 0 ? biaskit_tp_param_init_ctx : NULL, .param_info = biaskit_tp_param_info

/* ---- coordinate ------------------------------------------------------------------------------------------- */

/* Reads and checks the `grid` option. */
static inline int biaskit_fp_grid_setup_(biaskit_tp_instance *s, const biaskit_config *cfg, biaskit_error *err)
{
    int64_t grid = 0;
    int rc = s->svc->get_int(cfg, "grid", &grid, err);
    if (rc)
        return rc;
    if (grid < 2 || grid > BIASKIT_FP_MAX_GRID)
        return s->svc->config_error(cfg, "grid", err,
                                    "expected an integer in 2 .. %d (grid points of u in [0, 1] F is tabulated at), "
                                    "got %lld",
                                    BIASKIT_FP_MAX_GRID, (long long)grid);
    s->points = (int32_t)grid;
    return BIASKIT_OK;
}

/* The checks of table() / table_backward() over the grid. */
static inline int biaskit_fp_grid_call_(const biaskit_tp_instance *s, const float *theta, int32_t points,
                                        const float **v, biaskit_error *err)
{
    if (points != s->points)
        return s->svc->error(err, BIASKIT_ERR_INVALID,
                             "the table is over the grid of coordinate_points() = %d values of u (option 'grid'), "
                             "got %d",
                             (int)s->points, (int)points);
    return biaskit_fp_values_(s, theta, v, err);
}

/* The checks of coordinate() / coordinate_backward(). */
static inline int biaskit_fp_coordinate_call_(const biaskit_tp_instance *s, const float *theta, int32_t distances,
                                              int32_t rows, const float **v, biaskit_error *err)
{
    if (distances < 1 || rows < 1)
        return s->svc->error(err, BIASKIT_ERR_INVALID, "expected distances >= 1 and rows >= 1, got %d and %d",
                             (int)distances, (int)rows);
    return biaskit_fp_values_(s, theta, v, err);
}

#define BIASKIT_COORDINATE_PLUGIN(P, PARAMS, UPARAMS, CONSTANTS, GRID, ...)                                 \
    BIASKIT_COORDINATE_PLUGIN_WITH(P, PARAMS, UPARAMS, CONSTANTS, GRID, NULL, __VA_ARGS__)
#define BIASKIT_COORDINATE_PLUGIN_WITH(P, PARAMS, UPARAMS, CONSTANTS, GRID, SETTINGS, ...)                  \
    BIASKIT_FP_COMMON_(P, PARAMS, UPARAMS, CONSTANTS, SETTINGS, biaskit_fp_grid_setup_,                    \
                       BIASKIT_OPTION_INT("grid", (GRID),                                                  \
                                          "grid points of u in [0, 1] F is tabulated at (the attention "   \
                                          "interpolates linearly)"))                                       \
    BIASKIT_TP_STATIC_ASSERT_((GRID) >= 2 && (GRID) <= BIASKIT_FP_MAX_GRID,                                \
                              "formula_plugin.h: the default grid must be 2 .. 2^20 points");              \
    /* derivatives of F at (h, u) into row_, the gradient row of PARAMS (zeroed by the caller) */           \
    static void P##_fp_f_row(const biaskit_tp_instance *s_, P##_params p, P##_ctx c, int32_t h, double u,   \
                             double *row_)                                                                 \
    {                                                                                                      \
        P##_grad g_;                                                                                       \
        BIASKIT_TP_MAYBE_UNUSED_ int k_ = 0;                                                               \
        BIASKIT_TP_MAYBE_UNUSED_ int64_t off_ = 0;                                                         \
        (void)s_, (void)row_;                                                                              \
        PARAMS(BIASKIT_FP_GSET_)                                                                           \
        g_.bkfp_none_ = 0.0;                                                                               \
        P##_fp_f_gradient(p, c, h, u, &g_);                                                                \
        k_ = 0, off_ = 0;                                                                                  \
        PARAMS(BIASKIT_FP_GGET_)                                                                           \
    }                                                                                                      \
    /* derivatives of phi at d (which = 0) or rscale at i (which = 1) into the gradient row of UPARAMS */   \
    static void P##_fp_u_row(const biaskit_tp_instance *s_, P##_params p, P##_ctx c, int which, int32_t x,  \
                             const biaskit_context *ctx, double *row_)                                     \
    {                                                                                                      \
        P##_ugrad g_;                                                                                      \
        BIASKIT_TP_MAYBE_UNUSED_ int k_ = (int)P##_fp_nf;                                                  \
        BIASKIT_TP_MAYBE_UNUSED_ int64_t off_ = 0;                                                         \
        (void)s_, (void)row_;                                                                              \
        UPARAMS(BIASKIT_FP_GSET_)                                                                          \
        g_.bkfp_none_ = 0.0;                                                                               \
        if (which == 0)                                                                                    \
            P##_fp_phi_gradient(p, c, x, ctx, &g_);                                                        \
        else                                                                                               \
            P##_fp_rscale_gradient(p, c, x, ctx, &g_);                                                     \
        k_ = (int)P##_fp_nf, off_ = 0;                                                                     \
        UPARAMS(BIASKIT_FP_GGET_)                                                                          \
    }                                                                                                      \
    static int32_t P##_fp_points(const void *inst)                                                         \
    {                                                                                                      \
        return ((const biaskit_tp_instance *)inst)->points;                                                \
    }                                                                                                      \
    /* table[h * points + g] = F(p_h, c, h, g / (points - 1)) */                                           \
    static int P##_fp_table(const void *inst, const float *theta, int32_t points, float *out, biaskit_error *err) \
    {                                                                                                      \
        const biaskit_tp_instance *s_ = (const biaskit_tp_instance *)inst;                                 \
        const float *v_ = NULL;                                                                            \
        int rc_ = biaskit_fp_grid_call_(s_, theta, points, &v_, err);                                      \
        if (rc_)                                                                                           \
            return rc_;                                                                                    \
        P##_ctx c_ = P##_fp_ctx(s_);                                                                       \
        for (int32_t h = 0; h < s_->heads; h++) {                                                          \
            P##_params p_ = P##_fp_load(s_, v_, h);                                                        \
            for (int32_t g = 0; g < points; g++)                                                           \
                out[(size_t)h * (size_t)points + (size_t)g] =                                              \
                    (float)P##_fp_f(p_, c_, h, (double)g / (double)(points - 1));                          \
        }                                                                                                  \
        return BIASKIT_OK;                                                                                 \
    }                                                                                                      \
    /* per head, g ascending, one double per element of F's gradient row (the header's comment) */         \
    static int P##_fp_table_backward(const void *inst, const float *theta, int32_t points,                 \
                                     const float *dtable, float *dtheta, biaskit_error *err)               \
    {                                                                                                      \
        const biaskit_tp_instance *s_ = (const biaskit_tp_instance *)inst;                                 \
        const float *v_ = NULL;                                                                            \
        int rc_ = biaskit_fp_grid_call_(s_, theta, points, &v_, err);                                      \
        if (rc_ || !s_->learnable || s_->split == 0)                                                       \
            return rc_;                                                                                    \
        const int64_t w_ = biaskit_fp_row_width_(s_, 0, s_->split);                                        \
        double *row_ = biaskit_fp_scratch_(s_, w_, 3, err), *acc_ = row_ + w_, *total_ = acc_ + w_;        \
        if (!row_)                                                                                         \
            return BIASKIT_ERR_NOMEM;                                                                      \
        P##_ctx c_ = P##_fp_ctx(s_);                                                                       \
        for (int32_t h = 0; h < s_->heads; h++) {                                                          \
            P##_params p_ = P##_fp_load(s_, v_, h);                                                        \
            memset(acc_, 0, sizeof *acc_ * (size_t)w_);                                                    \
            for (int32_t g = 0; g < points; g++) {                                                         \
                double dt_ = (double)dtable[(size_t)h * (size_t)points + (size_t)g];                       \
                memset(row_, 0, sizeof *row_ * (size_t)w_);                                                \
                P##_fp_f_row(s_, p_, c_, h, (double)g / (double)(points - 1), row_);                       \
                for (int64_t j = 0; j < w_; j++)                                                           \
                    acc_[j] += dt_ * row_[j];                                                              \
            }                                                                                              \
            biaskit_fp_add_head_(s_, 0, s_->split, acc_, h, total_, dtheta);                               \
        }                                                                                                  \
        biaskit_fp_add_totals_(s_, 0, s_->split, total_, dtheta);                                          \
        free(row_);                                                                                        \
        return BIASKIT_OK;                                                                                 \
    }                                                                                                      \
    /* phi[d] = phi(p, c, d, ctx), rscale[i] = rscale(p, c, i, ctx) */                                     \
    static int P##_fp_coordinate(const void *inst, const float *theta, const biaskit_context *ctx,         \
                                 int32_t distances, int32_t rows, float *phi, float *rscale, biaskit_error *err) \
    {                                                                                                      \
        const biaskit_tp_instance *s_ = (const biaskit_tp_instance *)inst;                                 \
        const float *v_ = NULL;                                                                            \
        int rc_ = biaskit_fp_coordinate_call_(s_, theta, distances, rows, &v_, err);                       \
        if (rc_)                                                                                           \
            return rc_;                                                                                    \
        P##_ctx c_ = P##_fp_ctx(s_);                                                                       \
        biaskit_context x_ = biaskit_fp_context_(s_, ctx);                                                 \
        P##_params p_ = P##_fp_load(s_, v_, 0);                                                            \
        for (int32_t d = 0; d < distances; d++)                                                            \
            phi[d] = (float)P##_fp_phi(p_, c_, d, &x_);                                                    \
        for (int32_t i = 0; i < rows; i++)                                                                 \
            rscale[i] = (float)P##_fp_rscale(p_, c_, i, &x_);                                              \
        return BIASKIT_OK;                                                                                 \
    }                                                                                                      \
    /* one double per element of the coordinate's gradient row: d ascending, then i ascending */           \
    static int P##_fp_coordinate_backward(const void *inst, const float *theta, const biaskit_context *ctx, \
                                          int32_t distances, int32_t rows, const float *dphi,              \
                                          const float *drscale, float *dtheta, biaskit_error *err)         \
    {                                                                                                      \
        const biaskit_tp_instance *s_ = (const biaskit_tp_instance *)inst;                                 \
        const float *v_ = NULL;                                                                            \
        int rc_ = biaskit_fp_coordinate_call_(s_, theta, distances, rows, &v_, err);                       \
        if (rc_ || !s_->learnable || s_->split == s_->n_specs)                                             \
            return rc_;                                                                                    \
        const int64_t w_ = biaskit_fp_row_width_(s_, s_->split, s_->n_specs);                              \
        double *row_ = biaskit_fp_scratch_(s_, w_, 2, err), *acc_ = row_ + w_;                             \
        if (!row_)                                                                                         \
            return BIASKIT_ERR_NOMEM;                                                                      \
        P##_ctx c_ = P##_fp_ctx(s_);                                                                       \
        biaskit_context x_ = biaskit_fp_context_(s_, ctx);                                                 \
        P##_params p_ = P##_fp_load(s_, v_, 0);                                                            \
        for (int which = 0; which < 2; which++)                                                            \
            for (int32_t x = 0; x < (which ? rows : distances); x++) {                                     \
                double w = (double)(which ? drscale[x] : dphi[x]);                                         \
                memset(row_, 0, sizeof *row_ * (size_t)w_);                                                \
                P##_fp_u_row(s_, p_, c_, which, x, &x_, row_);                                             \
                for (int64_t j = 0; j < w_; j++)                                                           \
                    acc_[j] += w * row_[j];                                                                \
            }                                                                                              \
        biaskit_fp_add_totals_(s_, s_->split, s_->n_specs, acc_, dtheta);                                  \
        free(row_);                                                                                        \
        return BIASKIT_OK;                                                                                 \
    }                                                                                                      \
    static const biaskit_plugin P##_fp_descriptor = {                                                      \
        BIASKIT_FP_DESCRIPTOR_(P, BIASKIT_CAP_COORDINATE),                                                 \
        BIASKIT_FP_PARAM_HOOKS_(P),                                                                        \
        .table = P##_fp_table,                                                                             \
        .table_backward = P##_fp_table_backward,                                                           \
        .coordinate_points = P##_fp_points,                                                                \
        .coordinate = P##_fp_coordinate,                                                                   \
        .coordinate_backward = P##_fp_coordinate_backward,                                                 \
        __VA_ARGS__};                                                                                      \
    BIASKIT_DEFINE_PLUGIN(P##_fp_descriptor)

/* ---- scale ------------------------------------------------------------------------------------------------- */

static inline int biaskit_fp_no_setup_(biaskit_tp_instance *s, const biaskit_config *cfg, biaskit_error *err)
{
    (void)s, (void)cfg, (void)err;
    return BIASKIT_OK;
}

static inline int biaskit_fp_rows_call_(const biaskit_tp_instance *s, const float *theta, int32_t rows,
                                        const float **v, biaskit_error *err)
{
    if (rows < 1)
        return s->svc->error(err, BIASKIT_ERR_INVALID, "expected rows >= 1, got %d", (int)rows);
    return biaskit_fp_values_(s, theta, v, err);
}

#define BIASKIT_SCALE_PLUGIN(P, PARAMS, CONSTANTS, ...)                                                    \
    BIASKIT_SCALE_PLUGIN_WITH(P, PARAMS, CONSTANTS, NULL, __VA_ARGS__)
#define BIASKIT_SCALE_PLUGIN_WITH(P, PARAMS, CONSTANTS, SETTINGS, ...)                                     \
    BIASKIT_FP_COMMON_(P, PARAMS, BIASKIT_TP_NO_PARAMS, CONSTANTS, SETTINGS, biaskit_fp_no_setup_, )      \
    /* derivatives of s at (h, i) into row_, the gradient row (zeroed by the caller) */                    \
    static void P##_fp_s_row(const biaskit_tp_instance *s_, P##_params p, P##_ctx c, int32_t h, int32_t i,  \
                             const biaskit_context *ctx, double *row_)                                     \
    {                                                                                                      \
        P##_grad g_;                                                                                       \
        BIASKIT_TP_MAYBE_UNUSED_ int k_ = 0;                                                               \
        BIASKIT_TP_MAYBE_UNUSED_ int64_t off_ = 0;                                                         \
        (void)s_, (void)row_;                                                                              \
        PARAMS(BIASKIT_FP_GSET_)                                                                           \
        g_.bkfp_none_ = 0.0;                                                                               \
        P##_fp_scale_gradient(p, c, h, i, ctx, &g_);                                                       \
        k_ = 0, off_ = 0;                                                                                  \
        PARAMS(BIASKIT_FP_GGET_)                                                                           \
    }                                                                                                      \
    /* scale[h * rows + i] = s(p_h, c, h, i, ctx) */                                                       \
    static int P##_fp_scale_hook(const void *inst, const float *theta, const biaskit_context *ctx,         \
                                 int32_t rows, float *out, biaskit_error *err)                             \
    {                                                                                                      \
        const biaskit_tp_instance *s_ = (const biaskit_tp_instance *)inst;                                 \
        const float *v_ = NULL;                                                                            \
        int rc_ = biaskit_fp_rows_call_(s_, theta, rows, &v_, err);                                        \
        if (rc_)                                                                                           \
            return rc_;                                                                                    \
        P##_ctx c_ = P##_fp_ctx(s_);                                                                       \
        biaskit_context x_ = biaskit_fp_context_(s_, ctx);                                                 \
        for (int32_t h = 0; h < s_->heads; h++) {                                                          \
            P##_params p_ = P##_fp_load(s_, v_, h);                                                        \
            for (int32_t i = 0; i < rows; i++)                                                             \
                out[(size_t)h * (size_t)rows + (size_t)i] = (float)P##_fp_scale(p_, c_, h, i, &x_);        \
        }                                                                                                  \
        return BIASKIT_OK;                                                                                 \
    }                                                                                                      \
    /* per head, i ascending, one double per element of the gradient row (the header's comment) */         \
    static int P##_fp_scale_backward(const void *inst, const float *theta, const biaskit_context *ctx,     \
                                     int32_t rows, const float *dscale, float *dtheta, biaskit_error *err) \
    {                                                                                                      \
        const biaskit_tp_instance *s_ = (const biaskit_tp_instance *)inst;                                 \
        const float *v_ = NULL;                                                                            \
        int rc_ = biaskit_fp_rows_call_(s_, theta, rows, &v_, err);                                        \
        if (rc_ || !s_->learnable || s_->n_specs == 0)                                                     \
            return rc_;                                                                                    \
        const int64_t w_ = biaskit_fp_row_width_(s_, 0, s_->n_specs);                                      \
        double *row_ = biaskit_fp_scratch_(s_, w_, 3, err), *acc_ = row_ + w_, *total_ = acc_ + w_;        \
        if (!row_)                                                                                         \
            return BIASKIT_ERR_NOMEM;                                                                      \
        P##_ctx c_ = P##_fp_ctx(s_);                                                                       \
        biaskit_context x_ = biaskit_fp_context_(s_, ctx);                                                 \
        for (int32_t h = 0; h < s_->heads; h++) {                                                          \
            P##_params p_ = P##_fp_load(s_, v_, h);                                                        \
            memset(acc_, 0, sizeof *acc_ * (size_t)w_);                                                    \
            for (int32_t i = 0; i < rows; i++) {                                                           \
                double ds_ = (double)dscale[(size_t)h * (size_t)rows + (size_t)i];                         \
                memset(row_, 0, sizeof *row_ * (size_t)w_);                                                \
                P##_fp_s_row(s_, p_, c_, h, i, &x_, row_);                                                 \
                for (int64_t j = 0; j < w_; j++)                                                           \
                    acc_[j] += ds_ * row_[j];                                                              \
            }                                                                                              \
            biaskit_fp_add_head_(s_, 0, s_->n_specs, acc_, h, total_, dtheta);                             \
        }                                                                                                  \
        biaskit_fp_add_totals_(s_, 0, s_->n_specs, total_, dtheta);                                        \
        free(row_);                                                                                        \
        return BIASKIT_OK;                                                                                 \
    }                                                                                                      \
    static const biaskit_plugin P##_fp_descriptor = {                                                      \
        BIASKIT_FP_DESCRIPTOR_(P, BIASKIT_CAP_SCALE),                                                      \
        BIASKIT_FP_PARAM_HOOKS_(P),                                                                        \
        .scale = P##_fp_scale_hook,                                                                        \
        .scale_backward = P##_fp_scale_backward,                                                           \
        __VA_ARGS__};                                                                                      \
    BIASKIT_DEFINE_PLUGIN(P##_fp_descriptor)

/* ---- mask -------------------------------------------------------------------------------------------------- */

#define BIASKIT_MASK_PLUGIN(P, CONSTANTS, ...) BIASKIT_MASK_PLUGIN_WITH(P, CONSTANTS, NULL, __VA_ARGS__)
#define BIASKIT_MASK_PLUGIN_WITH(P, CONSTANTS, SETTINGS, ...)                                              \
    static int P##_fp_mask_at_(const biaskit_tp_instance *s_, const biaskit_context *ctx, biaskit_mask *m_); \
    /* create(): the mask at the training length (training and evaluation) must be valid */                 \
    static int P##_fp_mask_setup_(biaskit_tp_instance *s_, const biaskit_config *cfg_, biaskit_error *err_) \
    {                                                                                                      \
        (void)cfg_;                                                                                        \
        for (int training = 1; training >= 0; training--) {                                                \
            biaskit_context x_ = biaskit_fp_context_(s_, NULL);                                            \
            biaskit_mask m_;                                                                               \
            x_.training = training;                                                                        \
            if (P##_fp_mask_at_(s_, &x_, &m_))                                                             \
                return s_->svc->error(err_, BIASKIT_ERR_CONFIG,                                            \
                                      "at the training length %d%s the mask is window %d, sinks %d, "     \
                                      "distance_cap %d: expected window >= 1, sinks >= 0, distance_cap >= 0 " \
                                      "(check the options this plugin computes them from)",              \
                                      (int)x_.length, training ? " (training)" : "", (int)m_.window,       \
                                      (int)m_.sinks, (int)m_.distance_cap);                                \
        }                                                                                                  \
        return BIASKIT_OK;                                                                                 \
    }                                                                                                      \
    BIASKIT_FP_COMMON_(P, BIASKIT_TP_NO_PARAMS, BIASKIT_TP_NO_PARAMS, CONSTANTS, SETTINGS,                 \
                       P##_fp_mask_setup_, )                                                               \
    /* the author's mask; 1 when it is out of range */                                                     \
    static int P##_fp_mask_at_(const biaskit_tp_instance *s_, const biaskit_context *ctx, biaskit_mask *m_) \
    {                                                                                                      \
        memset(m_, 0, sizeof *m_);                                                                         \
        m_->struct_size = sizeof *m_;                                                                      \
        P##_fp_mask(P##_fp_ctx(s_), ctx, m_);                                                              \
        return !(m_->window >= 1 && m_->sinks >= 0 && m_->distance_cap >= 0);                              \
    }                                                                                                      \
    static int P##_fp_mask_hook(const void *inst, const biaskit_context *ctx, biaskit_mask *out,           \
                                biaskit_error *err)                                                        \
    {                                                                                                      \
        const biaskit_tp_instance *s_ = (const biaskit_tp_instance *)inst;                                 \
        biaskit_context x_ = biaskit_fp_context_(s_, ctx);                                                 \
        biaskit_mask m_;                                                                                   \
        if (!out)                                                                                          \
            return s_->svc->error(err, BIASKIT_ERR_INVALID, "biaskit_mask is NULL");                       \
        P##_fp_mask_at_(s_, &x_, &m_);                                                                     \
        return biaskit_fp_put_mask_(s_, &m_, out, err);                                                    \
    }                                                                                                      \
    static const biaskit_plugin P##_fp_descriptor = {                                                      \
        BIASKIT_FP_DESCRIPTOR_(P, BIASKIT_CAP_MASK),                                                       \
        .mask = P##_fp_mask_hook,                                                                          \
        __VA_ARGS__};                                                                                      \
    BIASKIT_DEFINE_PLUGIN(P##_fp_descriptor)

/* ---- rotary ------------------------------------------------------------------------------------------------ */

static inline int biaskit_fp_rotary_setup_(biaskit_tp_instance *s, const biaskit_config *cfg, biaskit_error *err)
{
    (void)cfg;
    if (s->geometry.d_head < 2 || s->geometry.d_head % 2)
        return s->svc->error(err, BIASKIT_ERR_INVALID,
                             "a rotary plugin rotates pairs of channels: the head width must be even, got %d",
                             (int)s->geometry.d_head);
    return BIASKIT_OK;
}

/* The values of rotary_ctx(), checked: finite frequencies, a finite amplitude > 0. */
static inline int biaskit_fp_rotary_check_(const biaskit_tp_instance *s, const biaskit_context *ctx,
                                           const float *inv_freq, float amplitude, biaskit_error *err)
{
    for (int32_t k = 0; k < s->geometry.d_head / 2; k++)
        if (!isfinite(inv_freq[k]))
            return s->svc->error(err, BIASKIT_ERR_INVALID, "inv_freq(k = %d) at length %d is %g: expected a finite "
                                 "number", (int)k, (int)ctx->length, (double)inv_freq[k]);
    if (!(isfinite(amplitude) && amplitude > 0.0f))
        return s->svc->error(err, BIASKIT_ERR_INVALID, "amplitude at length %d is %g: expected finite and > 0",
                             (int)ctx->length, (double)amplitude);
    return BIASKIT_OK;
}

/* The far view's first distance and the positions of rotary_views(), checked. */
static inline int biaskit_fp_views_check_(const biaskit_tp_instance *s, const biaskit_context *ctx, int64_t from,
                                          const biaskit_rotary_view *far, biaskit_error *err)
{
    if (from < 1 || from > INT32_MAX)
        return s->svc->error(err, BIASKIT_ERR_INVALID, "far_from at length %d is %lld: expected a distance >= 1",
                             (int)ctx->length, (long long)from);
    for (int32_t t = 0; t < ctx->length; t++)
        if (!isfinite(far->q_pos[t]) || !isfinite(far->k_pos[t]))
            return s->svc->error(err, BIASKIT_ERR_INVALID, "%s(%d) at length %d is %g: expected a finite position",
                                 isfinite(far->q_pos[t]) ? "far_k" : "far_q", (int)t, (int)ctx->length,
                                 isfinite(far->q_pos[t]) ? far->k_pos[t] : far->q_pos[t]);
    return BIASKIT_OK;
}

#define BIASKIT_ROTARY_PLUGIN(P, CONSTANTS, ...) BIASKIT_ROTARY_PLUGIN_WITH(P, CONSTANTS, NULL, __VA_ARGS__)
#define BIASKIT_ROTARY_PLUGIN_WITH(P, CONSTANTS, SETTINGS, ...)                                            \
    BIASKIT_FP_ROTARY_CTX_(P, CONSTANTS, SETTINGS)                                                         \
    static const biaskit_plugin P##_fp_descriptor = {                                                      \
        BIASKIT_FP_DESCRIPTOR_(P, BIASKIT_CAP_ROTARY),                                                     \
        .rotary_ctx = P##_fp_rotary_ctx,                                                                   \
        __VA_ARGS__};                                                                                      \
    BIASKIT_DEFINE_PLUGIN(P##_fp_descriptor)

#define BIASKIT_VIEWS_PLUGIN(P, CONSTANTS, ...) BIASKIT_VIEWS_PLUGIN_WITH(P, CONSTANTS, NULL, __VA_ARGS__)
#define BIASKIT_VIEWS_PLUGIN_WITH(P, CONSTANTS, SETTINGS, ...)                                             \
    BIASKIT_FP_ROTARY_CTX_(P, CONSTANTS, SETTINGS)                                                         \
    /* two views: the pairs d < W at the token indices, d >= W at far_q(i), far_k(j) */                    \
    static int P##_fp_rotary_views(const void *inst, const biaskit_context *ctx, biaskit_rotary_view *views, \
                                   int32_t max_views, int32_t *n_views, biaskit_error *err)                \
    {                                                                                                      \
        const biaskit_tp_instance *s_ = (const biaskit_tp_instance *)inst;                                 \
        P##_ctx c_ = P##_fp_ctx(s_);                                                                       \
        biaskit_context x_ = biaskit_fp_context_(s_, ctx);                                                 \
        *n_views = 0;                                                                                      \
        if (max_views < 2)                                                                                 \
            return s_->svc->error(err, BIASKIT_ERR_INVALID, "2 views needed, the host offers %d",            \
                                  (int)max_views);                                                         \
        const int64_t w_ = P##_fp_far_from(c_, &x_);                                                       \
        views[0].min_distance = 0, views[0].max_distance = (int32_t)w_;                                    \
        views[1].min_distance = (int32_t)w_, views[1].max_distance = 0;                                    \
        for (int32_t t = 0; t < x_.length; t++) {                                                          \
            views[0].q_pos[t] = views[0].k_pos[t] = (double)t;                                             \
            views[1].q_pos[t] = P##_fp_far_q(c_, t, &x_), views[1].k_pos[t] = P##_fp_far_k(c_, t, &x_);    \
        }                                                                                                  \
        int rc_ = biaskit_fp_views_check_(s_, &x_, w_, &views[1], err);                                    \
        *n_views = rc_ ? 0 : 2;                                                                            \
        return rc_;                                                                                        \
    }                                                                                                      \
    static const biaskit_plugin P##_fp_descriptor = {                                                      \
        BIASKIT_FP_DESCRIPTOR_(P, BIASKIT_CAP_ROTARY),                                                     \
        .rotary_ctx = P##_fp_rotary_ctx,                                                                   \
        .rotary_views = P##_fp_rotary_views,                                                               \
        __VA_ARGS__};                                                                                      \
    BIASKIT_DEFINE_PLUGIN(P##_fp_descriptor)

/* The rotary kinds' common part (internal): options, instance, rotary_ctx(). */
#define BIASKIT_FP_ROTARY_CTX_(P, CONSTANTS, SETTINGS)                                                     \
    BIASKIT_FP_COMMON_(P, BIASKIT_TP_NO_PARAMS, BIASKIT_TP_NO_PARAMS, CONSTANTS, SETTINGS,                 \
                       biaskit_fp_rotary_setup_, )                                                         \
    /* inv_freq[k] = inv_freq(c, k, ctx), *amplitude = amplitude(c, ctx) for sequences of ctx->length */    \
    static int P##_fp_rotary_ctx(const void *inst, const biaskit_context *ctx, float *inv_freq,            \
                                 float *amplitude, biaskit_error *err)                                     \
    {                                                                                                      \
        const biaskit_tp_instance *s_ = (const biaskit_tp_instance *)inst;                                 \
        P##_ctx c_ = P##_fp_ctx(s_);                                                                       \
        biaskit_context x_ = biaskit_fp_context_(s_, ctx);                                                 \
        for (int32_t k = 0; k < s_->geometry.d_head / 2; k++)                                              \
            inv_freq[k] = (float)P##_fp_inv_freq(c_, k, &x_);                                              \
        *amplitude = (float)P##_fp_amplitude(c_, &x_);                                                     \
        return biaskit_fp_rotary_check_(s_, &x_, inv_freq, *amplitude, err);                               \
    }

#endif /* BIASKIT_FORMULA_PLUGIN_H */
