/*
 * biaskit plugin SDK: formula-first table plugins.
 *
 * A distance-table plugin (BIASKIT_CAP_TABLE) is mostly boilerplate around two formulas: reading the
 * parameters' options, initialising, clamping and naming theta, looping over heads and distances on the
 * host, launching kernels, and reducing the gradient deterministically. This header writes all of that
 * once. The author writes only:
 *
 *   1. the parameters, as an X-macro list, one line each:
 *          X(name, shape, init rule, lower bound, upper bound, "doc")
 *      shape:     PER_HEAD | SCALAR                 learnable (the `learnable` option, default true)
 *                 FIXED_PER_HEAD | FIXED_SCALAR     never learnable: the option's value or the init rule
 *                 PER_HEAD_IF(cond, "when") | SCALAR_IF(cond, "when")
 *                                                   learnable, present only when cond (an expression of
 *                                                   the context c, below) holds; "when" says so in errors
 *      A plugin's parameters are all learnable or all FIXED (a static assertion says so); a plugin with
 *      only FIXED parameters, or none (BIASKIT_TP_NO_PARAMS), has no `learnable` option.
 *      init rule: BIASKIT_TP_CONST(v)          every element v
 *                 BIASKIT_TP_ALIBI(scale)      head h of H: scale * the ALiBi slope (biaskit_tp_alibi_slope)
 *                 BIASKIT_TP_UNIFORM(lo, hi)   lo + (hi - lo) u, u = biaskit_rng_uniform() from the seed
 *                 BIASKIT_TP_SYMMETRIC(a)      U(-a, a) as a (2u - 1) (one rounding: nn.Linear's init)
 *                 BIASKIT_TP_EXPR(expr)        expr, a C expression (host code, in double) of
 *                                              h  the head, 0-based (0 for a SCALAR; for the array shapes
 *                                                 of formula_plugin.h the element's index within the row,
 *                                                 the same in every head's row),
 *                                              H  the number of heads,
 *                                              c  the context (the constants and the geometry, below),
 *                                              layer  the copy being initialised: 0 .. layers - 1 for a
 *                                                 per-layer term, -1 for a shared copy and for the fixed
 *                                                 values of learnable = false / FIXED shapes (made once,
 *                                                 in create());
 *                                              e.g. s_h = 2^(h+1): BIASKIT_TP_EXPR(pow(2.0, h + 1)).
 *                                              A value that is not a finite float (NaN, inf, |v| >
 *                                              FLT_MAX) is an error naming the parameter, the head, the
 *                                              layer and the value (param_init, or create() when fixed).
 *      CONST, ALIBI and EXPR take no draws: with learnable = false a parameter that is not given takes
 *      its rule's values. How copies are seeded: the engine initialises each copy of a term's parameters
 *      (one per layer for a per-layer term, else one) with its own seed, derived from [train] seed, the
 *      term's index and the layer (0 for a shared copy), so UNIFORM / SYMMETRIC draws differ by layer;
 *      CONST and ALIBI give every copy the same values, EXPR whatever its expression of `layer` says.
 *      bounds: param_project() clamps every element into [lower, upper] (use -INFINITY / INFINITY for
 *      none). The clamp is idempotent and leaves a NaN a NaN, so a diverged run shows up in the engine's
 *      finiteness checks instead of being silently reset. The init rule's numbers (but EXPR's) and the
 *      bounds may be expressions of the constants (c.name): they are evaluated once, in create();
 *   2. optional constants (extra options), as an X-macro list, one line each:
 *          C(name, kind, "doc")
 *      kind: BIASKIT_TP_REAL(default, lower, upper)   a number, c.name is a float
 *            BIASKIT_TP_INT(default, lower, upper)    an integer, c.name is an int32_t
 *            BIASKIT_TP_CHOICE("default", "a|b|c")    one of the words, c.name is its index (a = 0, ...)
 *      each checked to lie in [lower, upper] (BIASKIT_TP_NO_CONSTANTS when there are none);
 *   3. the formula and its gradient, with the signatures these macros write (host and device):
 *          BIASKIT_TP_TABLE(prefix)    { return T;  }          float T(p, c, h, d)
 *          BIASKIT_TP_GRADIENT(prefix) { g->name = dT/dname; ... }
 *      where p holds the parameters of head h (p.name; a SCALAR parameter has the same value on every
 *      head, an absent _IF parameter reads 0), c the context: the model's geometry (c.heads, c.layers,
 *      c.d_model, c.d_head, c.train_length, int32_t, on the host and the device alike) and c.name of
 *      every constant (so no constant may be called heads, layers, d_model, d_head or train_length: a
 *      static assertion names it),
 *      h the head, d >= 0 the distance, and g the derivatives of T(p, c, h, d) with respect to each
 *      parameter (fields start at 0). A plugin with nothing learnable (no parameters, or FIXED ones)
 *      writes BIASKIT_TP_NO_GRADIENT(prefix) instead.
 *
 * The whole plugin, for T_h(d) = -w_h d^2 (<prefix>/share/biaskit/examples/plugin_gaussian/gaussian.c):
 *
 *     #include <biaskit/table_plugin.h>
 *     #define GAUSSIAN_PARAMS(X) X(width, PER_HEAD, BIASKIT_TP_CONST(1e-3), 0.0, INFINITY, "w in -w d^2")
 *     BIASKIT_TP_TYPES(gaussian, GAUSSIAN_PARAMS, BIASKIT_TP_NO_CONSTANTS)
 *     BIASKIT_TP_TABLE(gaussian) { return -p.width * (float)d * (float)d; }
 *     BIASKIT_TP_GRADIENT(gaussian) { g->width = -(float)d * (float)d; }
 *     BIASKIT_TABLE_PLUGIN(gaussian, GAUSSIAN_PARAMS, BIASKIT_TP_NO_CONSTANTS,
 *                          .name = "gaussian", .version = "1.0.0", .summary = "...", .reference = "...")
 *
 * The trailing arguments of BIASKIT_TABLE_PLUGIN are designated initialisers of the descriptor: .name,
 * .version and .summary are required, .reference and .flags (BIASKIT_FLAG_PER_LAYER) optional; the
 * macro fills every other field. For CUDA, add a .cu file that is the one line  #include "gaussian.c"
 * and list it as CUDA_SOURCES of biaskit_add_plugin(): under nvcc (__CUDACC__) the same two macros
 * produce the kernels and their launchers instead of the descriptor, and the C file (compiled with
 * BIASKIT_WITH_CUDA=1 by biaskit_add_plugin) hooks them up as table_cuda / table_backward_cuda.
 * Everything is generated into the including file; one table plugin per translation unit.
 *
 * BIASKIT_TABLE_PLUGIN_WITH(prefix, PARAMS, CONSTANTS, &settings, ...) takes a biaskit_tp_settings:
 *   same_rows  1: T does not depend on the head (no PER_HEAD parameter, h unused): the host table
 *              computes row 0 once and copies it to the other heads;
 *   setup      called at the end of create() with the instance, to check combinations of options and
 *              to compute FIXED values from them. BIASKIT_TP_VALUES(s, name) are a parameter's values
 *              (as floats, laid out as theta), BIASKIT_TP_EXACT(s, name) the same before rounding to
 *              float, BIASKIT_TP_GIVEN(s, name) whether its option was set, BIASKIT_TP_CONSTANT(s, name)
 *              a constant's value (a double; a choice's index). Its errors name an option through
 *              s->svc->config_error(cfg, "key", err, ...). The settings and setup are compiled by nvcc
 *              too (in the .cu file): keep them to the C that is also C++.
 *
 * Services: the formula and derivative bodies (BIASKIT_TP_TABLE, BIASKIT_TP_GRADIENT, and formula_plugin.h's
 * BIASKIT_FP_*) get no services: they are host and device code that return a value and cannot fail. Check
 * options and log in setup (s->svc->config_error(cfg, "key", err, ...), s->svc->log(BIASKIT_LOG_INFO,
 * s->plugin, ...)); a value the formula cannot give is a NaN or inf, which the engine rejects naming the
 * plugin, term, head and distance. A plugin that must fail or log from table() itself writes the full
 * descriptor (plugin.h: svc stays valid until destroy()).
 *
 * What it generates (a normal static biaskit_plugin, so the host validates it like any other):
 *   options     learnable (bool, default true; only when there are learnable parameters), then one
 *               DOUBLE_ARRAY option per parameter, named after it, then the constants. A parameter
 *               option holds 1 value (every head) or one per head (PER_HEAD), or exactly 1 value
 *               (SCALAR); each finite and within float range. Setting the option of an absent _IF
 *               parameter is an error that quotes its "when".
 *               Given values must lie within the parameter's bounds.
 *               learnable = true:  theta holds every present parameter; a given value replaces the
 *                                  init rule.
 *               learnable = false, or FIXED: no parameters (theta = NULL), the table uses the given
 *                                  values; a parameter not given
 *                                  takes its init rule if that is CONST, ALIBI or EXPR (layer = -1),
 *                                  and is an error (naming the option) if it is UNIFORM or SYMMETRIC,
 *                                  which need a seed.
 *   theta       the present parameters in list order, each a block of H floats (PER_HEAD) or 1 (SCALAR);
 *               param_tensors names the blocks after the parameters (rows H or 1, cols 1).
 *   param_init  in list order, element by element; every UNIFORM or SYMMETRIC parameter takes one draw
 *               per element from biaskit_rng_seeded(seed), given or not (so giving one parameter leaves the
 *               draws of the others unchanged); then param_project. CONST, ALIBI and EXPR take no draws;
 *               EXPR sees layer = -1 here.
 *   param_init_ctx  (only when some rule is EXPR) the same, with layer = ctx->layer: the engine calls it
 *               instead of param_init, once per copy (`biaskit plugins NAME` then lists "the layer index
 *               at initialisation").
 *   param_info  for each tensor of param_tensors: lower and upper as evaluated, and the init rule in words
 *               with its numbers as evaluated (at most 6 digits): "1e-3" (CONST), "ALiBi x 0.5:
 *               2^(-8(h+1)/H)", "uniform(0.01, 1)", "symmetric(0.177)" (U(-a, a)), "expr: pow(2.0, h + 1)"
 *               (as written), or "given" when the option set the values. `biaskit plugins NAME` and
 *               `biaskit params` show them.
 *   table       table[h * D + d] = T(p_h, c, h, d), h ascending, d ascending.
 *   backward    the reduction order, host: for each head h, each parameter k has a double accumulator
 *               acc_k = sum over d = 0, 1, ..., D-1 of (double)dtable[h][d] * (double)g_k(d), in that
 *               order; then a PER_HEAD parameter gets dtheta[k][h] += (float)acc_k, and a SCALAR one
 *               sums acc_k over h = 0, 1, ... in double and adds (float) of that once at the end.
 *               CUDA: the distances of a head are split among B blocks (B depends on D only) of
 *               BIASKIT_TP_THREADS threads; thread t of block b sums, in double, the distances
 *               d = b T + t, then d += B T, ...; the block adds its threads' sums by a fixed tree in
 *               shared memory into one partial per (head, block, parameter), written to scratch memory
 *               (stream-ordered cudaMallocAsync / cudaFreeAsync); a second kernel, one thread per
 *               element of dtheta, sums the partials in the fixed order (head ascending, then block
 *               ascending) and adds (float) of the double sum. No atomics: the same inputs give the
 *               same bits on every run (not the host's bits: the order differs).
 *   CUDA        table_cuda / table_backward_cuda enqueue only on the engine's stream; fixed values are
 *               copied to the device once (biaskit_cuda_upload_once) and freed in destroy().
 *   emulation   the CUDA kernels' per-thread code is written once (BIASKIT_HD) and also runs on the host
 *               over the kernels' grid, in the kernels' order: the plugin exports it as
 *               biaskit_tp_emulation() (its one symbol besides the entry point), and `biaskit check`
 *               compares it with the host functions on any machine, GPU or not. What it cannot see is
 *               a formula that differs on the device (#ifdef __CUDA_ARCH__): check warns about those.
 *   errors      distances <= 0, a NULL theta for a learnable plugin, 0 heads, bad option values
 *               (reported at the option's file:line:column by the host), out of memory, CUDA failures.
 *
 * Parameter and constant names become option keys: [a-z0-9_]+, not "learnable" and not an engine term
 * key (the engine's: plugin, name, stream, weight, per_layer, learn_weight, weight_per_head, lr_scale,
 * weight_decay); the host refuses the plugin at load otherwise. At most BIASKIT_TP_MAX_PARAMS = 24
 * parameters (the CUDA block sums of every parameter share 48 KiB of shared memory; a static assertion
 * says so in every build, with CUDA or without).
 *
 * The shapes of ABI 2 (coordinate tables such as FIRE, masks, logit scales, length-aware rotary frequencies)
 * and the array shapes (ARRAY(n), PER_HEAD_ARRAY(n)) are <biaskit/formula_plugin.h>'s, which builds on the
 * host part of this header; a table plugin refuses an array shape (a static assertion).
 *
 * Plain C11 (and C++ / CUDA C++ for the device part); the host part needs <math.h> (link -lm).
 */
#ifndef BIASKIT_TABLE_PLUGIN_H
#define BIASKIT_TABLE_PLUGIN_H

#include <biaskit/plugin.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#if !defined(__CUDACC__)
#include <biaskit/random.h>

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#endif

#if defined(__CUDACC__)
#include <biaskit/plugin_cuda.h>
#endif

#if defined(__cplusplus)
#define BIASKIT_TP_STATIC_ASSERT_ static_assert
#else
#define BIASKIT_TP_STATIC_ASSERT_ _Static_assert
#endif

/* ---- what the author writes in the lists ------------------------------------------------------ */

/* Parameter shapes, as numbers: 2 one value per head, 1 one value shared by the heads, 0 absent. A
 * shape in a list is pasted onto these prefixes; the _IF shapes are function-like and read `c`. */
#define BIASKIT_TP_SHAPE_PER_HEAD 2
#define BIASKIT_TP_SHAPE_SCALAR 1
#define BIASKIT_TP_SHAPE_FIXED_PER_HEAD 2
#define BIASKIT_TP_SHAPE_FIXED_SCALAR 1
#define BIASKIT_TP_SHAPE_PER_HEAD_IF(cond, when) ((cond) ? 2 : 0)
#define BIASKIT_TP_SHAPE_SCALAR_IF(cond, when) ((cond) ? 1 : 0)
/* Array shapes (3: n values shared by the heads; 4: n values per head, row-major by head), for the plugins
 * of <biaskit/formula_plugin.h> only: a table plugin refuses them (a static assertion in BIASKIT_TP_TYPES).
 * n is an expression of the constants (c.width), evaluated in create(). */
#define BIASKIT_TP_SHAPE_ARRAY(n) 3
#define BIASKIT_TP_SHAPE_PER_HEAD_ARRAY(n) 4
#define BIASKIT_TP_SHAPE_FIXED_ARRAY(n) 3
#define BIASKIT_TP_SHAPE_FIXED_PER_HEAD_ARRAY(n) 4
#define BIASKIT_TP_LEARN_ARRAY(n) 1
#define BIASKIT_TP_LEARN_PER_HEAD_ARRAY(n) 1
#define BIASKIT_TP_LEARN_FIXED_ARRAY(n) 0
#define BIASKIT_TP_LEARN_FIXED_PER_HEAD_ARRAY(n) 0
#define BIASKIT_TP_WHEN_ARRAY(n) NULL
#define BIASKIT_TP_WHEN_PER_HEAD_ARRAY(n) NULL
#define BIASKIT_TP_WHEN_FIXED_ARRAY(n) NULL
#define BIASKIT_TP_WHEN_FIXED_PER_HEAD_ARRAY(n) NULL
#define BIASKIT_TP_OPTDOC_ARRAY(n) "; 1 value (every element) or all " #n " of them"
#define BIASKIT_TP_OPTDOC_PER_HEAD_ARRAY(n) "; 1 value (every element) or all heads x " #n " of them, head by head"
#define BIASKIT_TP_OPTDOC_FIXED_ARRAY(n) BIASKIT_TP_OPTDOC_ARRAY(n)
#define BIASKIT_TP_OPTDOC_FIXED_PER_HEAD_ARRAY(n) BIASKIT_TP_OPTDOC_PER_HEAD_ARRAY(n)
/* The elements per row of an array shape (the expression n, for create()), and its text (for messages);
 * 0 and NULL for the other shapes. */
#define BIASKIT_TP_LENGTH_PER_HEAD 0
#define BIASKIT_TP_LENGTH_SCALAR 0
#define BIASKIT_TP_LENGTH_FIXED_PER_HEAD 0
#define BIASKIT_TP_LENGTH_FIXED_SCALAR 0
#define BIASKIT_TP_LENGTH_PER_HEAD_IF(cond, when) 0
#define BIASKIT_TP_LENGTH_SCALAR_IF(cond, when) 0
#define BIASKIT_TP_LENGTH_ARRAY(n) (n)
#define BIASKIT_TP_LENGTH_PER_HEAD_ARRAY(n) (n)
#define BIASKIT_TP_LENGTH_FIXED_ARRAY(n) (n)
#define BIASKIT_TP_LENGTH_FIXED_PER_HEAD_ARRAY(n) (n)
#define BIASKIT_TP_LTEXT_PER_HEAD NULL
#define BIASKIT_TP_LTEXT_SCALAR NULL
#define BIASKIT_TP_LTEXT_FIXED_PER_HEAD NULL
#define BIASKIT_TP_LTEXT_FIXED_SCALAR NULL
#define BIASKIT_TP_LTEXT_PER_HEAD_IF(cond, when) NULL
#define BIASKIT_TP_LTEXT_SCALAR_IF(cond, when) NULL
#define BIASKIT_TP_LTEXT_ARRAY(n) #n
#define BIASKIT_TP_LTEXT_PER_HEAD_ARRAY(n) #n
#define BIASKIT_TP_LTEXT_FIXED_ARRAY(n) #n
#define BIASKIT_TP_LTEXT_FIXED_PER_HEAD_ARRAY(n) #n
#define BIASKIT_TP_ISARRAY_PER_HEAD 0
#define BIASKIT_TP_ISARRAY_SCALAR 0
#define BIASKIT_TP_ISARRAY_FIXED_PER_HEAD 0
#define BIASKIT_TP_ISARRAY_FIXED_SCALAR 0
#define BIASKIT_TP_ISARRAY_PER_HEAD_IF(cond, when) 0
#define BIASKIT_TP_ISARRAY_SCALAR_IF(cond, when) 0
#define BIASKIT_TP_ISARRAY_ARRAY(n) 1
#define BIASKIT_TP_ISARRAY_PER_HEAD_ARRAY(n) 1
#define BIASKIT_TP_ISARRAY_FIXED_ARRAY(n) 1
#define BIASKIT_TP_ISARRAY_FIXED_PER_HEAD_ARRAY(n) 1
#define BIASKIT_TP_LEARN_PER_HEAD 1
#define BIASKIT_TP_LEARN_SCALAR 1
#define BIASKIT_TP_LEARN_FIXED_PER_HEAD 0
#define BIASKIT_TP_LEARN_FIXED_SCALAR 0
#define BIASKIT_TP_LEARN_PER_HEAD_IF(cond, when) 1
#define BIASKIT_TP_LEARN_SCALAR_IF(cond, when) 1
#define BIASKIT_TP_WHEN_PER_HEAD NULL
#define BIASKIT_TP_WHEN_SCALAR NULL
#define BIASKIT_TP_WHEN_FIXED_PER_HEAD NULL
#define BIASKIT_TP_WHEN_FIXED_SCALAR NULL
#define BIASKIT_TP_WHEN_PER_HEAD_IF(cond, when) when
#define BIASKIT_TP_WHEN_SCALAR_IF(cond, when) when
#define BIASKIT_TP_OPTDOC_PER_HEAD "; 1 value (every head) or one per head"
#define BIASKIT_TP_OPTDOC_SCALAR "; 1 value"
#define BIASKIT_TP_OPTDOC_FIXED_PER_HEAD "; 1 value (every head) or one per head"
#define BIASKIT_TP_OPTDOC_FIXED_SCALAR "; 1 value"
#define BIASKIT_TP_OPTDOC_PER_HEAD_IF(cond, when) "; " when " only; 1 value (every head) or one per head"
#define BIASKIT_TP_OPTDOC_SCALAR_IF(cond, when) "; " when " only; 1 value"
/* The rest of a parameter option's doc, by whether the parameter is learnable (the LEARN value above). */
#define BIASKIT_TP_OPTUSE_1 "; the initial value (default: the init rule), or the fixed value when learnable = false"
#define BIASKIT_TP_OPTUSE_0 "; the fixed value (default: the init rule)"
#define BIASKIT_TP_OPTUSE_(learn) BIASKIT_TP_OPTUSE2_(learn)
#define BIASKIT_TP_OPTUSE2_(learn) BIASKIT_TP_OPTUSE_##learn

/* Initialisation rules. Each expands to five items (kind, a, b, e, text): kind, a and b are fields of
 * biaskit_tp_param, evaluated in create() with the context c in scope; e and text are EXPR's expression
 * and its spelling. e is compiled only in the generated rule function (host code), where h (the element:
 * the head, 0 for a SCALAR, the index within the row for an array), H (the heads), layer (the copy being
 * initialised, -1 for a shared one or a fixed value) and c are in scope. SYMMETRIC(a) is U(-a, a) drawn as
 * a (2u - 1): one rounding, as the built-in fire draws nn.Linear's init (a = 1/sqrt(fan_in)), where
 * UNIFORM(-a, a) would round twice (-a + 2a u). */
enum {
    BIASKIT_TP_INIT_CONST = 0,
    BIASKIT_TP_INIT_ALIBI = 1,
    BIASKIT_TP_INIT_UNIFORM = 2,
    BIASKIT_TP_INIT_SYMMETRIC = 3,
    BIASKIT_TP_INIT_EXPR = 4
};
#define BIASKIT_TP_CONST(value) BIASKIT_TP_INIT_CONST, (double)(value), 0.0, 0.0, NULL
#define BIASKIT_TP_ALIBI(scale) BIASKIT_TP_INIT_ALIBI, (double)(scale), 0.0, 0.0, NULL
#define BIASKIT_TP_UNIFORM(lo, hi) BIASKIT_TP_INIT_UNIFORM, (double)(lo), (double)(hi), 0.0, NULL
#define BIASKIT_TP_SYMMETRIC(a) BIASKIT_TP_INIT_SYMMETRIC, (double)(a), 0.0, 0.0, NULL
#define BIASKIT_TP_EXPR(expr) BIASKIT_TP_INIT_EXPR, 0.0, 0.0, (double)(expr), #expr
/* The parts of a rule (internal): the kind (a constant expression), and e. */
#define BIASKIT_TP_RULE_KIND_(...) BIASKIT_TP_RULE_KIND2_(__VA_ARGS__)
#define BIASKIT_TP_RULE_KIND2_(kind, a, b, e, text) (kind)
#define BIASKIT_TP_RULE_E_(...) BIASKIT_TP_RULE_E2_(__VA_ARGS__)
#define BIASKIT_TP_RULE_E2_(kind, a, b, e, text) e

/* The model's geometry in every formula context, c.heads ... c.train_length (biaskit_geometry: n_heads,
 * n_layers, d_model, d_head, train_length), before the constants' fields; so no constant may take one of
 * these names (BIASKIT_TP_RESERVED_ below, a static assertion that names it). */
#define BIASKIT_TP_GEOMETRY_FIELDS_ int32_t heads, layers, d_model, d_head, train_length;
#define BIASKIT_TP_SET_GEOMETRY_(c_, s_)                                                                  \
    ((c_).heads = (s_)->heads, (c_).layers = (s_)->geometry.n_layers, (c_).d_model = (s_)->geometry.d_model, \
     (c_).d_head = (s_)->geometry.d_head, (c_).train_length = (s_)->geometry.train_length)
/* 1 when a constant's name is one of the geometry's (the probe: a name with a BIASKIT_TP_RSV_ macro expands
 * to two items, so the 1 moves into the second place). */
#define BIASKIT_TP_RSV_heads ~, 1
#define BIASKIT_TP_RSV_layers ~, 1
#define BIASKIT_TP_RSV_d_model ~, 1
#define BIASKIT_TP_RSV_d_head ~, 1
#define BIASKIT_TP_RSV_train_length ~, 1
#define BIASKIT_TP_SECOND_(a, b, ...) b
#define BIASKIT_TP_PROBE_(...) BIASKIT_TP_SECOND_(__VA_ARGS__, 0, ~)
#define BIASKIT_TP_RESERVED_(name) BIASKIT_TP_PROBE_(BIASKIT_TP_RSV_##name)
#define BIASKIT_TP_CRESERVED_(name, kind, doc)                                                            \
    BIASKIT_TP_STATIC_ASSERT_(!BIASKIT_TP_RESERVED_(name),                                                \
                              "a constant may not be called " #name " (c." #name " is part of the model "    \
                              "geometry in the context: c.heads, c.layers, c.d_model, c.d_head, c.train_length)");

/* Constant kinds. Each expands to (tag, default number, default string, choices, lower, upper); the
 * tag is pasted onto the prefixes below, so it is a plain word and never a macro. */
enum { BIASKIT_TP_KIND_REAL = 0, BIASKIT_TP_KIND_INT = 1, BIASKIT_TP_KIND_CHOICE = 2 };
#define BIASKIT_TP_REAL(def, lo, hi) bktp_real, (double)(def), NULL, NULL, (double)(lo), (double)(hi)
#define BIASKIT_TP_INT(def, lo, hi) bktp_int, (double)(def), NULL, NULL, (double)(lo), (double)(hi)
#define BIASKIT_TP_CHOICE(def, choices) bktp_choice, 0.0, def, choices, 0.0, 0.0
#define BIASKIT_TP_CTYPE_bktp_real float
#define BIASKIT_TP_CTYPE_bktp_int int32_t
#define BIASKIT_TP_CTYPE_bktp_choice int32_t
#define BIASKIT_TP_CKIND_bktp_real BIASKIT_TP_KIND_REAL
#define BIASKIT_TP_CKIND_bktp_int BIASKIT_TP_KIND_INT
#define BIASKIT_TP_CKIND_bktp_choice BIASKIT_TP_KIND_CHOICE
#define BIASKIT_TP_OPTTYPE_bktp_real BIASKIT_OPT_DOUBLE
#define BIASKIT_TP_OPTTYPE_bktp_int BIASKIT_OPT_INT
#define BIASKIT_TP_OPTTYPE_bktp_choice BIASKIT_OPT_STRING

/* The empty lists. */
#define BIASKIT_TP_NO_PARAMS(X)
#define BIASKIT_TP_NO_CONSTANTS(C)

/* Threads per block of the generated kernels. */
#define BIASKIT_TP_THREADS 256

/* The most parameters of one plugin: the backward's block sums of every parameter, BIASKIT_TP_THREADS
 * doubles each, share 48 KiB of CUDA shared memory. Checked by a static assertion in every build, with
 * CUDA or without, so that a plugin that builds on a host-only machine also builds with nvcc. */
#define BIASKIT_TP_MAX_PARAMS 24

/* The most elements of one parameter (an array shape's size is computed from the constants). */
#define BIASKIT_TP_MAX_ARRAY (1 << 24)

/* One parameter's spec, as create() evaluates the list (the generated code keeps them in the instance). */
typedef struct biaskit_tp_param {
    const char *name;
    int shape;           /* 2: one value per head; 1: one value shared by the heads; 0: absent;
                          * 3: `length` values shared by the heads; 4: `length` values per head */
    int init;            /* BIASKIT_TP_INIT_* */
    double init_a;       /* CONST: the value; ALIBI: the scale; UNIFORM: lo; SYMMETRIC: a */
    double init_b;       /* UNIFORM: hi */
    double lower, upper; /* the projection's bounds */
    const char *when;    /* _IF shapes: when the parameter is present; else NULL */
    const char *doc;
    int64_t length;      /* shapes 3, 4: the elements of a row (the shape's n); else 0 */
    const char *length_text; /* shapes 3, 4: n as written ("c.width"), for messages; else NULL */
    const char *init_text;   /* EXPR: the expression as written ("pow(2.0, h + 1)"); else NULL */
} biaskit_tp_param;

/* One constant's spec. */
typedef struct biaskit_tp_constant {
    const char *name;
    int kind;            /* BIASKIT_TP_KIND_* */
    double def;          /* REAL, INT */
    const char *def_choice, *choices; /* CHOICE */
    double lower, upper; /* REAL, INT */
    const char *doc;
} biaskit_tp_constant;

/* The instance every generated plugin uses (table_plugin.h's and formula_plugin.h's): the specs say what
 * differs. The fields a setup function may read are marked; it may write `values` and `exact` of FIXED
 * parameters (through the macros). */
typedef struct biaskit_tp_instance {
    const biaskit_services *svc; /* setup: the host's services */
    const char *plugin;          /* the plugin's name, for log lines */
    biaskit_tp_param *specs;     /* setup: the parameters as evaluated (shape 0: absent) */
    int n_specs;
    int32_t heads;               /* setup */
    int learnable;               /* setup: theta holds the parameters */
    int same_rows;
    int64_t count;               /* elements of the present parameters (theta's size when learnable) */
    int64_t *offsets;            /* n_specs: where each parameter starts in theta's layout */
    unsigned char *given;        /* n_specs: the option was set */
    float *values;               /* count: given values (learnable) or the fixed values, laid out as theta */
    double *exact;               /* count: the same, before rounding to float */
    double *constants;           /* setup: the constants' values, in list order (a choice's index) */
    float *device_values;        /* fixed, CUDA: device copy of values, made on first use */
    void (*release)(float *device); /* frees device_values (CUDA builds), else NULL */
    biaskit_geometry geometry;   /* setup: the model, as create() got it (the context's c.layers ...) */
    /* read by <biaskit/formula_plugin.h> only */
    int32_t points;              /* coordinate plugins: the grid (the `grid` option) */
    int split;                   /* coordinate plugins: specs [0, split) are F's, [split, n_specs) the coordinate's */
    /* the value of parameter k's BIASKIT_TP_EXPR rule at element h (the head; an array's index within the
     * row) for copy `layer` (-1: shared, or a fixed value): generated with the plugin's context in scope */
    double (*rule)(const struct biaskit_tp_instance *s, int k, int32_t h, int32_t layer);
} biaskit_tp_instance;

/* Optional settings (BIASKIT_TABLE_PLUGIN_WITH). */
typedef struct biaskit_tp_settings {
    int same_rows; /* 1: T is the same in every head; the host computes one row and copies it */
    int (*setup)(biaskit_tp_instance *s, const biaskit_config *cfg, biaskit_error *err);
} biaskit_tp_settings;

/* A setup function's view of a parameter or constant, by name. */
#define BIASKIT_TP_VALUES(s, name) ((s)->values + (s)->offsets[bktp_p_##name])
#define BIASKIT_TP_EXACT(s, name) ((s)->exact + (s)->offsets[bktp_p_##name])
#define BIASKIT_TP_GIVEN(s, name) ((s)->given[bktp_p_##name])
#define BIASKIT_TP_CONSTANT(s, name) ((s)->constants[bktp_c_##name])

/* ---- the ALiBi slopes ----------------------------------------------------------------------------
 * Press, Smith & Lewis, "Train Short, Test Long", ICLR 2022, reference get_slopes(n): for n a power of
 * two, m_h = 2^(-8 (h+1) / n); otherwise, with c = 2^floor(log2 n), the c slopes of get_slopes(c) and
 * then every other slope of get_slopes(2c) (its 1st, 3rd, ...). The built-in alibi and mep plugins use
 * this function too. */
#if !defined(__CUDA_ARCH__)
static inline double biaskit_tp_alibi_series_(int32_t n, int32_t h)
{
    double start = pow(2.0, -pow(2.0, -(log2((double)n) - 3.0)));
    return start * pow(start, (double)h);
}

/* The slope of head h (0-based) of n >= 1 heads. */
static inline double biaskit_tp_alibi_slope(int32_t n, int32_t h)
{
    int32_t c = 1;
    while (c * 2 <= n)
        c *= 2;
    return h < c ? biaskit_tp_alibi_series_(c, h) : biaskit_tp_alibi_series_(2 * c, 2 * (h - c));
}
#endif

/* ---- formula signatures ------------------------------------------------------------------------ */

#if defined(__GNUC__)
#define BIASKIT_TP_MAYBE_UNUSED_ __attribute__((unused))
#else
#define BIASKIT_TP_MAYBE_UNUSED_
#endif

/* A formula need not use all of p, c, h, d: they are marked so -Wunused-parameter stays quiet. */
#define BIASKIT_TP_TABLE(P)                                                                              \
    static inline BIASKIT_HD float P##_tp_formula(BIASKIT_TP_MAYBE_UNUSED_ P##_params p,                  \
                                                  BIASKIT_TP_MAYBE_UNUSED_ P##_ctx c,                     \
                                                  BIASKIT_TP_MAYBE_UNUSED_ int32_t h,                     \
                                                  BIASKIT_TP_MAYBE_UNUSED_ int32_t d)
#define BIASKIT_TP_GRADIENT(P)                                                                           \
    static inline BIASKIT_HD void P##_tp_gradient(BIASKIT_TP_MAYBE_UNUSED_ P##_params p,                  \
                                                  BIASKIT_TP_MAYBE_UNUSED_ P##_ctx c,                     \
                                                  BIASKIT_TP_MAYBE_UNUSED_ int32_t h,                     \
                                                  BIASKIT_TP_MAYBE_UNUSED_ int32_t d,                     \
                                                  BIASKIT_TP_MAYBE_UNUSED_ P##_params *g)
/* In place of BIASKIT_TP_GRADIENT when nothing is learnable (no parameters, or only FIXED ones). */
#define BIASKIT_TP_NO_GRADIENT(P)                                                                        \
    BIASKIT_TP_GRADIENT(P) {}

/* ---- list callbacks (internal) ----------------------------------------------------------------------
 * Each is applied to every line of a list. Offsets into theta are kept in a running `off_`, parameter
 * indices in a running `k_`. A shape is pasted onto a prefix (so an _IF shape becomes a call); a
 * constant's kind is expanded into its fields and spread over a second macro's parameters. */
#define BIASKIT_TP_SHAPE_(shape) BIASKIT_TP_SHAPE_##shape
#define BIASKIT_TP_FIELD_(name, shape, init, lo, hi, doc) float name;
#define BIASKIT_TP_PIDX_(name, shape, init, lo, hi, doc) bktp_p_##name,
#define BIASKIT_TP_NLEARN_(name, shape, init, lo, hi, doc) +BIASKIT_TP_LEARN_##shape
#define BIASKIT_TP_NARRAY_(name, shape, init, lo, hi, doc) +BIASKIT_TP_ISARRAY_##shape
#define BIASKIT_TP_LOAD_(name, shape, init, lo, hi, doc)                                                  \
    {                                                                                                     \
        int sh_ = BIASKIT_TP_SHAPE_(shape);                                                               \
        p_.name = sh_ ? v_[off_ + (sh_ == 2 ? h_ : 0)] : 0.0f;                                            \
        off_ += sh_ == 2 ? (int64_t)c.heads : (int64_t)sh_;                                               \
    }
#define BIASKIT_TP_ZERO_(name, shape, init, lo, hi, doc) g_.name = 0.0f;
#define BIASKIT_TP_ACC_(name, shape, init, lo, hi, doc) acc_[k_++] += gt_ * (double)g_.name;
#define BIASKIT_TP_SPEC_(name, shape, init, lo, hi, doc)                                                  \
    BIASKIT_TP_SPEC2_(#name, BIASKIT_TP_SHAPE_(shape), (double)(lo), (double)(hi), BIASKIT_TP_WHEN_##shape, doc, \
                      0, NULL, init)
/* the spec from its fields (the rule spread over the last five: its e is dropped here) */
#define BIASKIT_TP_SPEC2_(...) BIASKIT_TP_SPEC3_(__VA_ARGS__)
#define BIASKIT_TP_SPEC3_(name_, shape_, lo_, hi_, when_, doc_, length_, ltext_, kind, a, b, e, text)       \
    {                                                                                                     \
        biaskit_tp_param t_ = {name_, shape_, kind, a, b, lo_, hi_, when_, doc_, length_, ltext_, text};     \
        out_[k_++] = t_;                                                                                  \
    }
/* +1 for a parameter whose rule is BIASKIT_TP_EXPR */
#define BIASKIT_TP_NEXPR_(name, shape, init, lo, hi, doc) +(BIASKIT_TP_RULE_KIND_(init) == BIASKIT_TP_INIT_EXPR)
/* in the generated rule function: parameter k_want_'s expression, if it is the k_-th and an EXPR */
#define BIASKIT_TP_RULE_(name, shape, init, lo, hi, doc)                                                  \
    if (k_++ == k_want_ && BIASKIT_TP_RULE_KIND_(init) == BIASKIT_TP_INIT_EXPR)                           \
        return BIASKIT_TP_RULE_E_(init);
#define BIASKIT_TP_OPTION_(name, shape, init, lo, hi, doc)                                                \
    BIASKIT_OPTION_DOUBLE_ARRAY(#name, doc BIASKIT_TP_OPTDOC_##shape BIASKIT_TP_OPTUSE_(BIASKIT_TP_LEARN_##shape)),
#define BIASKIT_TP_CIDX_(name, kind, doc) bktp_c_##name,
#define BIASKIT_TP_CFIELD_(name, kind, doc) BIASKIT_TP_CFIELD2_(name, kind)
#define BIASKIT_TP_CFIELD2_(name, tag, ...) BIASKIT_TP_CTYPE_##tag name;
#define BIASKIT_TP_CSPEC_(name, kind, doc) BIASKIT_TP_CSPEC2_(name, doc, kind)
#define BIASKIT_TP_CSPEC2_(name, doc, tag, def, dstr, choices, lo, hi)                                    \
    {#name, BIASKIT_TP_CKIND_##tag, def, dstr, choices, lo, hi, doc},
#define BIASKIT_TP_COPTION_(name, kind, doc) BIASKIT_TP_COPTION2_(name, doc, kind)
#define BIASKIT_TP_COPTION2_(name, doc, tag, def, dstr, choices, lo, hi)                                  \
    {#name, BIASKIT_TP_OPTTYPE_##tag, def, dstr, choices, doc},
#define BIASKIT_TP_CTX_(name, kind, doc) BIASKIT_TP_CTX2_(name, kind)
#define BIASKIT_TP_CTX2_(name, tag, ...) c_.name = (BIASKIT_TP_CTYPE_##tag)s_->constants[bktp_c_##name];

/* The parameter and context types, the indices, and the loader from theta's layout; before the
 * formulas. P##_params has a hidden last field so that it is never empty. */
#define BIASKIT_TP_TYPES(P, PARAMS, CONSTANTS)                                                            \
    typedef struct P##_params {                                                                           \
        PARAMS(BIASKIT_TP_FIELD_)                                                                         \
        float bktp_none_;                                                                                 \
    } P##_params;                                                                                         \
    CONSTANTS(BIASKIT_TP_CRESERVED_)                                                                      \
    typedef struct P##_ctx {                                                                              \
        BIASKIT_TP_GEOMETRY_FIELDS_                                                                       \
        CONSTANTS(BIASKIT_TP_CFIELD_)                                                                     \
    } P##_ctx;                                                                                            \
    enum P##_tp_pidx { PARAMS(BIASKIT_TP_PIDX_) P##_tp_np };                                              \
    enum P##_tp_cidx { CONSTANTS(BIASKIT_TP_CIDX_) P##_tp_nc };                                           \
    enum { P##_tp_nlearn = 0 PARAMS(BIASKIT_TP_NLEARN_) };                                                \
    enum { P##_tp_nexpr = 0 PARAMS(BIASKIT_TP_NEXPR_) };                                                  \
    BIASKIT_TP_STATIC_ASSERT_(P##_tp_nlearn == 0 || P##_tp_nlearn == (int)P##_tp_np,                      \
                              "table_plugin.h: the parameters are all learnable or all FIXED");           \
    BIASKIT_TP_STATIC_ASSERT_(0 PARAMS(BIASKIT_TP_NARRAY_) == 0,                                          \
                              "table_plugin.h: ARRAY shapes are for <biaskit/formula_plugin.h> plugins"); \
    BIASKIT_TP_STATIC_ASSERT_((int)P##_tp_np <= BIASKIT_TP_MAX_PARAMS,                                    \
                              "table_plugin.h: at most 24 parameters (BIASKIT_TP_MAX_PARAMS: the CUDA "   \
                              "block sums of every parameter fit in 48 KiB of shared memory)");          \
    /* The parameters of head h_ from values v_ laid out as theta. */                                     \
    static inline BIASKIT_HD P##_params P##_tp_load(const float *v_, P##_ctx c, int32_t h_)               \
    {                                                                                                     \
        P##_params p_;                                                                                    \
        BIASKIT_TP_MAYBE_UNUSED_ int64_t off_ = 0;                                                        \
        (void)v_;                                                                                         \
        (void)h_;                                                                                         \
        PARAMS(BIASKIT_TP_LOAD_)                                                                          \
        p_.bktp_none_ = 0.0f;                                                                             \
        (void)off_;                                                                                       \
        (void)c;                                                                                          \
        return p_;                                                                                        \
    }

/* The number of parameters, and the same at least 1 (for array sizes). */
#define BIASKIT_TP_NPARAMS_(P) ((int)P##_tp_np)
#define BIASKIT_TP_NPARAMS1_(P) (P##_tp_np > 0 ? (int)P##_tp_np : 1)

/* The gradient of T at (HV, DV) accumulated into the doubles ACC[] with weight GT (host and device).
 * ACC must not be named acc_ (nor GT use gt_): the block's own names would shadow them. */
#define BIASKIT_TP_ACCUMULATE_(P, PARAMS, PV, CV, HV, DV, GT, ACC)                                          \
    do {                                                                                                  \
        P##_params g_;                                                                                    \
        BIASKIT_TP_MAYBE_UNUSED_ double gt_ = (GT);                                                       \
        BIASKIT_TP_MAYBE_UNUSED_ double *acc_ = (ACC);                                                    \
        BIASKIT_TP_MAYBE_UNUSED_ int k_ = 0;                                                              \
        PARAMS(BIASKIT_TP_ZERO_)                                                                          \
        g_.bktp_none_ = 0.0f;                                                                             \
        P##_tp_gradient((PV), (CV), (HV), (DV), &g_);                                                     \
        PARAMS(BIASKIT_TP_ACC_)                                                                           \
        (void)g_;                                                                                         \
        (void)gt_;                                                                                        \
        (void)acc_;                                                                                       \
        (void)k_;                                                                                         \
    } while (0)

/* ---- the generated CUDA kernels' per-thread work (host and device) ----------------------------------
 * Each kernel of the device part (under nvcc, at the end of this header) is its grid running these
 * functions, with __syncthreads() between the phases of a block. The host part's emulation (the section
 * "the CUDA kernels, emulated on the host") runs the same functions over the same grid in loops, so that
 * `biaskit check` runs the CUDA path's formulas and its reduction order without a GPU. Written once here,
 * compiled by the C compiler for the emulation and by nvcc for the kernels. */

/* Blocks of `threads` threads for a grid-stride loop over n elements: 1 .. BIASKIT_TP_MAX_BLOCKS. The
 * same as <biaskit/plugin_cuda.h>'s biaskit_cuda_blocks (the device part asserts the two limits equal). */
#define BIASKIT_TP_MAX_BLOCKS 1024
static inline BIASKIT_HD unsigned biaskit_tp_blocks_(int64_t n, int threads)
{
    int64_t blocks = (n + threads - 1) / threads;
    return (unsigned)(blocks < 1 ? 1 : blocks > BIASKIT_TP_MAX_BLOCKS ? BIASKIT_TP_MAX_BLOCKS : blocks);
}

/* The backward's partial kernel: at least this many distances per thread before another block is worth
 * its partial, so B = biaskit_tp_blocks_(D, BIASKIT_TP_THREADS * BIASKIT_TP_PER_THREAD) (B depends on D only). */
#define BIASKIT_TP_PER_THREAD 8

/* One step of a block's tree: thread t < stride adds slot t + stride into slot t, for each of the np
 * sums (sh[k * BIASKIT_TP_THREADS + t]). The threads of one step read and write disjoint slots, so the
 * emulation's sequential t gives the kernel's bits. */
static inline BIASKIT_HD void biaskit_tp_tree_step_(double *sh, int np, unsigned t, unsigned stride)
{
    if (t < stride)
        for (int k = 0; k < np; k++)
            sh[k * BIASKIT_TP_THREADS + t] += sh[k * BIASKIT_TP_THREADS + t + stride];
}

/* Thread 0 of block b (of `blocks`) of head h: the tree's roots into partial[(h * blocks + b) * np + k]. */
static inline BIASKIT_HD void biaskit_tp_store_partial_(const double *sh, int np, int32_t h, unsigned blocks,
                                                        unsigned b, double *partial)
{
    for (int k = 0; k < np; k++)
        partial[((size_t)h * blocks + b) * (size_t)np + (size_t)k] = sh[k * BIASKIT_TP_THREADS];
}

/* Sum of the partials of element (k, h) of dtheta: partial[(head * blocks + b) * np + k], for one head
 * (PER_HEAD) or every head ascending (SCALAR), blocks ascending. */
static inline BIASKIT_HD double biaskit_tp_sum_partials_(const double *partial, int32_t heads, unsigned blocks,
                                                         int np, int k, int per_head, int32_t h)
{
    double s = 0.0;
    for (int32_t hh = per_head ? h : 0; hh < (per_head ? h + 1 : heads); hh++)
        for (unsigned b = 0; b < blocks; b++)
            s += partial[((size_t)hh * blocks + b) * (size_t)np + (size_t)k];
    return s;
}

/* The final kernel's element e_ of dtheta (laid out as theta): the sum of its partials, added as a float. */
#define BIASKIT_TP_FINAL_(name, shape, init, lo, hi, doc)                                                 \
    {                                                                                                     \
        int sh_ = BIASKIT_TP_SHAPE_(shape);                                                               \
        int64_t n_ = sh_ == 2 ? (int64_t)c.heads : (int64_t)sh_;                                          \
        if (e_ >= off_ && e_ < off_ + n_)                                                                 \
            dtheta[e_] += (float)biaskit_tp_sum_partials_(partial, c.heads, blocks, np_, k_, sh_ == 2,    \
                                                          (int32_t)(e_ - off_));                          \
        off_ += n_;                                                                                       \
        k_++;                                                                                             \
    }

#define BIASKIT_TP_COUNT_(name, shape, init, lo, hi, doc)                                                 \
    {                                                                                                     \
        int sh_ = BIASKIT_TP_SHAPE_(shape);                                                               \
        count += sh_ == 2 ? (int64_t)c.heads : (int64_t)sh_;                                              \
    }

/* A plugin's per-thread functions (BIASKIT_TABLE_PLUGIN_WITH writes them, host and device):
 *   P_tp_table_thread    the table kernel's thread x of head h (a grid-stride loop, `stride` threads)
 *   P_tp_thread_sums     the partial kernel's thread t of block b (of `blocks`), head h: acc[k] = the
 *                        double sum over d = b T + t, then d += blocks T, ... (T = BIASKIT_TP_THREADS)
 *   P_tp_final_element   the final kernel's element e of dtheta
 *   P_tp_count           the elements of dtheta (theta's size when learnable) */
#define BIASKIT_TP_THREAD_FUNCTIONS_(P, PARAMS)                                                           \
    static inline BIASKIT_HD void P##_tp_table_thread(const float *v, P##_ctx c, int32_t distances,       \
                                                      float *table, int32_t h, int64_t x, int64_t stride) \
    {                                                                                                     \
        P##_params p = P##_tp_load(v, c, h);                                                              \
        for (int64_t d = x; d < distances; d += stride)                                                   \
            table[(size_t)h * (size_t)distances + (size_t)d] = P##_tp_formula(p, c, h, (int32_t)d);       \
    }                                                                                                     \
    static inline BIASKIT_HD void P##_tp_thread_sums(const float *v, P##_ctx c, int32_t distances,        \
                                                     const float *dtable, int32_t h, unsigned b,          \
                                                     unsigned blocks, unsigned t, double *acc)            \
    {                                                                                                     \
        P##_params p = P##_tp_load(v, c, h);                                                              \
        for (int k = 0; k < BIASKIT_TP_NPARAMS1_(P); k++)                                                 \
            acc[k] = 0.0;                                                                                 \
        for (int64_t d = (int64_t)b * BIASKIT_TP_THREADS + t; d < distances;                              \
             d += (int64_t)blocks * BIASKIT_TP_THREADS)                                                   \
            BIASKIT_TP_ACCUMULATE_(P, PARAMS, p, c, h, (int32_t)d,                                        \
                                   (double)dtable[(size_t)h * (size_t)distances + (size_t)d], acc);       \
    }                                                                                                     \
    static inline BIASKIT_HD void P##_tp_final_element(P##_ctx c, unsigned blocks, const double *partial,  \
                                                       float *dtheta, int64_t e_)                         \
    {                                                                                                     \
        const int np_ = BIASKIT_TP_NPARAMS1_(P);                                                          \
        BIASKIT_TP_MAYBE_UNUSED_ int64_t off_ = 0;                                                        \
        BIASKIT_TP_MAYBE_UNUSED_ int k_ = 0;                                                              \
        (void)c;                                                                                          \
        (void)blocks;                                                                                     \
        (void)partial;                                                                                    \
        (void)dtheta;                                                                                     \
        (void)e_;                                                                                         \
        PARAMS(BIASKIT_TP_FINAL_)                                                                         \
        (void)off_;                                                                                       \
        (void)k_;                                                                                         \
        (void)np_;                                                                                        \
    }                                                                                                     \
    static inline BIASKIT_HD int64_t P##_tp_count(P##_ctx c)                                              \
    {                                                                                                     \
        int64_t count = 0;                                                                                \
        PARAMS(BIASKIT_TP_COUNT_)                                                                         \
        (void)c;                                                                                          \
        return count;                                                                                     \
    }

#if !defined(__CUDACC__)
/* ======================================= host part (C) ======================================== */

static inline int64_t biaskit_tp_size_(const biaskit_tp_param *spec, int32_t heads)
{
    switch (spec->shape) {
    case 2: return (int64_t)heads;
    case 3: return spec->length;
    case 4: return (int64_t)heads * spec->length;
    default: return (int64_t)spec->shape;
    }
}

/* 1 for the shapes whose values differ by head (PER_HEAD, PER_HEAD_ARRAY). */
static inline int biaskit_tp_per_head_(const biaskit_tp_param *spec)
{
    return spec->shape == 2 || spec->shape == 4;
}

static inline void biaskit_tp_destroy(void *inst)
{
    biaskit_tp_instance *s = (biaskit_tp_instance *)inst;
    if (!s)
        return;
    if (s->release)
        s->release(s->device_values);
    free(s->specs);
    free(s->offsets);
    free(s->given);
    free(s->values);
    free(s->exact);
    free(s->constants);
    free(s);
}

/* The value of an init rule that needs no seed (CONST, ALIBI, EXPR) for element i of parameter k (laid out
 * as theta: a PER_HEAD_ARRAY's element i is head i / n, index i % n within the row) and copy `layer`. */
static inline double biaskit_tp_rule_(const biaskit_tp_instance *s, int k, int64_t i, int32_t layer)
{
    const biaskit_tp_param *spec = &s->specs[k];
    if (spec->init == BIASKIT_TP_INIT_EXPR)
        return s->rule ? s->rule(s, k, (int32_t)(spec->shape == 4 ? i % spec->length : i), layer) : NAN;
    return spec->init == BIASKIT_TP_INIT_ALIBI ? spec->init_a * biaskit_tp_alibi_slope(s->heads, (int32_t)i)
                                               : spec->init_a;
}

/* An EXPR value v of element i of parameter k must be a finite float: else 1, with a message in msg that names
 * the parameter, the element (head, array index), the layer, the expression and the value. */
static inline int biaskit_tp_rule_bad_(const biaskit_tp_instance *s, int k, int64_t i, int32_t layer, double v,
                                       char *msg, size_t size)
{
    const biaskit_tp_param *spec = &s->specs[k];
    if (spec->init != BIASKIT_TP_INIT_EXPR || (isfinite(v) && fabs(v) <= FLT_MAX))
        return 0;
    char at[96];
    if (spec->shape == 4)
        snprintf(at, sizeof at, "head %lld, element h = %lld", (long long)(i / spec->length),
                 (long long)(i % spec->length));
    else if (spec->shape == 3)
        snprintf(at, sizeof at, "element h = %lld", (long long)i);
    else if (spec->shape == 2)
        snprintf(at, sizeof at, "head h = %lld", (long long)i);
    else
        snprintf(at, sizeof at, "h = 0 (a scalar)");
    snprintf(msg, size, "parameter '%s': its init rule BIASKIT_TP_EXPR(%s) is %g at %s, layer %d (H = %d): expected a "
             "finite float (|value| <= %g)",
             spec->name, spec->init_text ? spec->init_text : "?", v, at, (int)layer, (int)s->heads, (double)FLT_MAX);
    return 1;
}

/* Clamp one element into [lower, upper]; a NaN stays NaN (both comparisons are false). */
static inline float biaskit_tp_clamp_(float v, const biaskit_tp_param *spec)
{
    if (v < (float)spec->lower)
        v = (float)spec->lower;
    if (v > (float)spec->upper)
        v = (float)spec->upper;
    return v;
}

/* Reads option spec->name (1 value, or one per head for PER_HEAD) into dst and exact, checking it;
 * buf has room for `heads` doubles. */
static inline int biaskit_tp_read_(biaskit_tp_instance *s, const biaskit_config *cfg, const biaskit_tp_param *spec,
                                   double *buf, float *dst, double *exact, biaskit_error *err)
{
    const biaskit_services *svc = s->svc;
    int32_t n = (int32_t)biaskit_tp_size_(spec, s->heads), count = 0;
    int rc = svc->get_double_array(cfg, spec->name, buf, n, &count, err);
    if ((rc == BIASKIT_ERR_CONFIG && count > n) || (!rc && count != 1 && count != n)) {
        if (spec->shape == 3 || spec->shape == 4)
            return svc->config_error(cfg, spec->name, err,
                                     "expected 1 value (every element) or %d values (%s%s = %lld here), got %d",
                                     (int)n, spec->shape == 4 ? "heads x " : "", spec->length_text,
                                     (long long)spec->length, (int)count);
        if (spec->shape == 2)
            return svc->config_error(cfg, spec->name, err,
                                     "expected 1 value (every head) or %d values (one per head), got %d", (int)n,
                                     (int)count);
        return svc->config_error(cfg, spec->name, err, "expected 1 value (a scalar parameter), got %d", (int)count);
    }
    if (rc)
        return rc;
    for (int32_t i = 0; i < count; i++) {
        double v = buf[i];
        if (!isfinite(v) || fabs(v) > FLT_MAX)
            return svc->config_error(cfg, spec->name, err, "value %d: expected a finite float, got %g", (int)i, v);
        if (!(v >= spec->lower && v <= spec->upper))
            return svc->config_error(cfg, spec->name, err,
                                     "value %d: expected a value in [%g, %g] (the bounds of parameter '%s'), got %g",
                                     (int)i, spec->lower, spec->upper, spec->name, v);
    }
    for (int32_t i = 0; i < n; i++) {
        exact[i] = buf[count == 1 ? 0 : i];
        dst[i] = (float)exact[i];
    }
    for (int32_t i = 0; i < n; i++) /* a bound that is not a float: the value rounds onto the float bound */
        dst[i] = biaskit_tp_clamp_(dst[i], spec);
    return BIASKIT_OK;
}

/* Reads the constants into s->constants (a choice as its index in the list). */
static inline int biaskit_tp_read_constants_(biaskit_tp_instance *s, const biaskit_config *cfg,
                                             const biaskit_tp_constant *constants, int n_constants,
                                             biaskit_error *err)
{
    const biaskit_services *svc = s->svc;
    int rc = BIASKIT_OK;
    for (int k = 0; k < n_constants && !rc; k++) {
        const biaskit_tp_constant *cs = &constants[k];
        double v = 0.0;
        if (cs->kind == BIASKIT_TP_KIND_REAL) {
            rc = svc->get_double(cfg, cs->name, &v, err);
            if (!rc && !(isfinite(v) && v >= cs->lower && v <= cs->upper && fabs(v) <= FLT_MAX))
                rc = svc->config_error(cfg, cs->name, err, "expected a finite value in [%g, %g], got %g", cs->lower,
                                       cs->upper, v);
        } else if (cs->kind == BIASKIT_TP_KIND_INT) {
            int64_t i = 0;
            rc = svc->get_int(cfg, cs->name, &i, err);
            if (!rc && !((double)i >= cs->lower && (double)i <= cs->upper && i >= INT32_MIN && i <= INT32_MAX))
                rc = svc->config_error(cfg, cs->name, err, "expected an integer in [%.17g, %.17g], got %lld",
                                       cs->lower, cs->upper, (long long)i);
            v = (double)i;
        } else {
            const char *word = NULL;
            rc = svc->get_string(cfg, cs->name, &word, err);
            int index = -1, at = 0;
            size_t len = rc ? 0 : strlen(word);
            for (const char *p = cs->choices; !rc && index < 0 && p; at++) {
                const char *bar = strchr(p, '|');
                size_t n = bar ? (size_t)(bar - p) : strlen(p);
                if (n == len && strncmp(p, word, n) == 0)
                    index = at;
                p = bar ? bar + 1 : NULL;
            }
            if (!rc && index < 0) /* the host checks the choice first; this guards a list it did not see */
                rc = svc->config_error(cfg, cs->name, err, "expected one of %s, got '%s'", cs->choices, word);
            v = (double)index;
        }
        s->constants[k] = v;
    }
    return rc;
}

/* Reads the option of parameter k, or fills it from its rule when fixed; checks the _IF rules. */
static inline int biaskit_tp_read_param_(biaskit_tp_instance *s, const biaskit_config *cfg, int k, double *buf,
                                         biaskit_error *err)
{
    const biaskit_services *svc = s->svc;
    const biaskit_tp_param *spec = &s->specs[k];
    int32_t n = (int32_t)biaskit_tp_size_(spec, s->heads);
    float *values = s->values + s->offsets[k];
    double *exact = s->exact + s->offsets[k];
    if (spec->shape == 0)
        return svc->is_set(cfg, spec->name)
                   ? svc->config_error(cfg, spec->name, err, "'%s' is used only with %s", spec->name,
                                       spec->when ? spec->when : "other options")
                   : BIASKIT_OK;
    if (spec->init == BIASKIT_TP_INIT_ALIBI && spec->shape != 2)
        return svc->error(err, BIASKIT_ERR_INTERNAL,
                          "parameter '%s': BIASKIT_TP_ALIBI needs a PER_HEAD parameter (one slope per head)",
                          spec->name);
    if (svc->is_set(cfg, spec->name)) {
        s->given[k] = 1;
        return biaskit_tp_read_(s, cfg, spec, buf, values, exact, err);
    }
    if (s->learnable)
        return BIASKIT_OK;
    if (spec->init == BIASKIT_TP_INIT_UNIFORM || spec->init == BIASKIT_TP_INIT_SYMMETRIC)
        return svc->config_error(cfg, spec->name, err,
                                 "learnable = false needs a fixed value of '%s' (its init rule is random): expected "
                                 "%s = [value]%s",
                                 spec->name, spec->name,
                                 spec->shape == 2   ? " (every head) or one value per head"
                                 : spec->shape >= 3 ? " (every element) or all of its values"
                                                    : "");
    for (int32_t i = 0; i < n; i++) { /* a fixed value is made once, for every layer: layer = -1 */
        char msg[BIASKIT_ERROR_MESSAGE_MAX / 2];
        exact[i] = biaskit_tp_rule_(s, k, i, -1);
        if (biaskit_tp_rule_bad_(s, k, i, -1, exact[i], msg, sizeof msg))
            return svc->config_error(cfg, spec->name, err, "%s; learnable = false takes it as the fixed value: set "
                                     "'%s' instead", msg, spec->name);
        values[i] = biaskit_tp_clamp_((float)exact[i], spec);
    }
    return BIASKIT_OK;
}

/* create(): reads the constants, evaluates the parameter list with them (`specs`, which builds the
 * context from s->constants), reads learnable and the parameters' options, then calls the setup. */
static inline int biaskit_tp_create(const biaskit_services *svc, const biaskit_config *cfg,
                                    const biaskit_geometry *geo, const char *plugin, int n_specs, int has_learnable,
                                    void (*specs)(const biaskit_tp_instance *s, biaskit_tp_param *out),
                                    const biaskit_tp_constant *constants, int n_constants,
                                    const biaskit_tp_settings *settings, void (*release)(float *),
                                    double (*rule)(const biaskit_tp_instance *, int, int32_t, int32_t), void **out,
                                    biaskit_error *err)
{
    if (geo->n_heads < 1)
        return svc->error(err, BIASKIT_ERR_INVALID, "expected at least one head, got %d", (int)geo->n_heads);
    biaskit_tp_instance *s = (biaskit_tp_instance *)calloc(1, sizeof *s);
    if (!s)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    s->svc = svc;
    s->plugin = plugin;
    s->n_specs = n_specs;
    s->heads = geo->n_heads;
    s->release = release;
    s->rule = rule;
    s->same_rows = settings ? settings->same_rows : 0;
    s->split = n_specs;
    /* the geometry as far as the host filled it (a smaller struct_size: the rest stays 0) */
    size_t geo_size = geo->struct_size < sizeof s->geometry ? geo->struct_size : sizeof s->geometry;
    memcpy(&s->geometry, geo, geo_size);
    s->specs = (biaskit_tp_param *)calloc((size_t)n_specs + 1, sizeof *s->specs);
    s->offsets = (int64_t *)calloc((size_t)n_specs + 1, sizeof *s->offsets);
    s->given = (unsigned char *)calloc((size_t)n_specs + 1, 1);
    s->constants = (double *)calloc((size_t)n_constants + 1, sizeof *s->constants);
    double *buf = NULL;
    int rc = !s->specs || !s->offsets || !s->given || !s->constants
                 ? svc->error(err, BIASKIT_ERR_NOMEM, "out of memory")
                 : biaskit_tp_read_constants_(s, cfg, constants, n_constants, err);
    if (!rc && has_learnable)
        rc = svc->get_bool(cfg, "learnable", &s->learnable, err);
    int64_t widest = s->heads; /* the largest parameter: the option buffer */
    if (!rc) {
        specs(s, s->specs);
        for (int k = 0; k < n_specs && !rc; k++) {
            const biaskit_tp_param *spec = &s->specs[k];
            /* an array's size comes from the constants: checked here, since their bounds may allow 0 */
            if ((spec->shape == 3 || spec->shape == 4) &&
                !(spec->length >= 1 && spec->length <= BIASKIT_TP_MAX_ARRAY &&
                  biaskit_tp_size_(spec, s->heads) <= BIASKIT_TP_MAX_ARRAY))
                rc = svc->error(err, BIASKIT_ERR_CONFIG,
                                "parameter '%s': %s%s = %lld elements per row%s; expected 1 .. %d elements in all "
                                "(set the options it is computed from accordingly)",
                                spec->name, spec->shape == 4 ? "PER_HEAD_ARRAY of " : "ARRAY of ", spec->length_text,
                                (long long)spec->length, spec->shape == 4 ? " for every head" : "",
                                (int)BIASKIT_TP_MAX_ARRAY);
            s->offsets[k] = s->count;
            s->count += rc ? 0 : biaskit_tp_size_(spec, s->heads);
            if (!rc && biaskit_tp_size_(spec, s->heads) > widest)
                widest = biaskit_tp_size_(spec, s->heads);
        }
    }
    if (!rc) {
        s->values = (float *)calloc((size_t)s->count + 1, sizeof *s->values);
        s->exact = (double *)calloc((size_t)s->count + 1, sizeof *s->exact);
        buf = (double *)malloc(sizeof *buf * (size_t)widest);
        if (!s->values || !s->exact || !buf)
            rc = svc->error(err, BIASKIT_ERR_NOMEM, "out of memory for %lld parameters", (long long)s->count);
    }
    for (int k = 0; k < n_specs && !rc; k++)
        rc = biaskit_tp_read_param_(s, cfg, k, buf, err);
    free(buf);
    if (!rc && settings && settings->setup)
        rc = settings->setup(s, cfg, err);
    if (rc) {
        biaskit_tp_destroy(s);
        return rc;
    }
    *out = s;
    return BIASKIT_OK;
}

static inline int64_t biaskit_tp_param_count(const void *inst)
{
    const biaskit_tp_instance *s = (const biaskit_tp_instance *)inst;
    return s->learnable ? s->count : 0;
}

static inline void biaskit_tp_param_project(const void *inst, float *theta)
{
    const biaskit_tp_instance *s = (const biaskit_tp_instance *)inst;
    for (int k = 0; s->learnable && k < s->n_specs; k++)
        for (int64_t i = 0; i < biaskit_tp_size_(&s->specs[k], s->heads); i++)
            theta[s->offsets[k] + i] = biaskit_tp_clamp_(theta[s->offsets[k] + i], &s->specs[k]);
}

/* param_init for copy `layer` (-1: a shared copy; EXPR rules read it): list order, element by element, one
 * draw per UNIFORM or SYMMETRIC element (given or not), then the clamp. A non-finite EXPR value is an error. */
static inline int biaskit_tp_init_(const void *inst, float *theta, uint64_t seed, int32_t layer, biaskit_error *err)
{
    const biaskit_tp_instance *s = (const biaskit_tp_instance *)inst;
    if (!s->learnable)
        return BIASKIT_OK;
    biaskit_rng rng = biaskit_rng_seeded(seed);
    for (int k = 0; k < s->n_specs; k++) {
        const biaskit_tp_param *spec = &s->specs[k];
        for (int64_t i = 0; i < biaskit_tp_size_(spec, s->heads); i++) {
            int64_t at = s->offsets[k] + i;
            double v = spec->init == BIASKIT_TP_INIT_UNIFORM
                           ? spec->init_a + (spec->init_b - spec->init_a) * biaskit_rng_uniform(&rng)
                       : spec->init == BIASKIT_TP_INIT_SYMMETRIC ? spec->init_a * (2.0 * biaskit_rng_uniform(&rng) - 1.0)
                       : s->given[k]                             ? 0.0 /* not evaluated: the option's value */
                                                                 : biaskit_tp_rule_(s, k, i, layer);
            char msg[BIASKIT_ERROR_MESSAGE_MAX];
            if (!s->given[k] && biaskit_tp_rule_bad_(s, k, i, layer, v, msg, sizeof msg))
                return s->svc->error(err, BIASKIT_ERR_INVALID, "%s", msg);
            theta[at] = s->given[k] ? s->values[at] : (float)v;
        }
    }
    biaskit_tp_param_project(inst, theta);
    return BIASKIT_OK;
}

static inline int biaskit_tp_param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    return biaskit_tp_init_(inst, theta, seed, -1, err);
}

/* The descriptor's param_init_ctx (set only when a rule is EXPR): ctx->layer is the copy being initialised. */
static inline int biaskit_tp_param_init_ctx(const void *inst, float *theta, uint64_t seed, const biaskit_context *ctx,
                                            biaskit_error *err)
{
    int32_t layer = ctx && BIASKIT_HAS_FIELD(ctx, biaskit_context, layer) ? ctx->layer : -1;
    return biaskit_tp_init_(inst, theta, seed, layer, err);
}

static inline int32_t biaskit_tp_param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    const biaskit_tp_instance *s = (const biaskit_tp_instance *)inst;
    int32_t n = 0;
    for (int k = 0; s->learnable && k < s->n_specs; k++) {
        if (s->specs[k].shape == 0)
            continue;
        const biaskit_tp_param *spec = &s->specs[k];
        biaskit_tensor_info t = {spec->name, s->offsets[k], (int32_t)biaskit_tp_size_(spec, s->heads), 1};
        if (spec->shape == 4) /* heads x n, row-major */
            t.rows = s->heads, t.cols = (int32_t)spec->length;
        if (n < capacity)
            out[n] = t;
        n++;
    }
    return n;
}

/* v for a listing: at most 6 significant digits (fewer when they give v back), in the shorter of the fixed
 * and the exponent spellings ("0.5", "1e-3", "1e6", "0.176777"); never "-0". */
static inline void biaskit_tp_number_(char *out, size_t size, double v)
{
    if (v == 0.0)
        v = 0.0; /* -0 prints as 0 */
    if (!isfinite(v)) {
        snprintf(out, size, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        return;
    }
    int p = 1;
    char g[48], e[48];
    while (p < 6) {
        snprintf(g, sizeof g, "%.*g", p, v);
        if (strtod(g, NULL) == v)
            break;
        p++;
    }
    /* an integer part of up to 6 digits stays fixed: 512, not 5.12e2 */
    int q = fabs(v) >= 1.0 && fabs(v) < 1e6 ? (int)floor(log10(fabs(v))) + 1 : 0;
    snprintf(g, sizeof g, "%.*g", q > p ? q : p, v);
    snprintf(e, sizeof e, "%.*e", p - 1, v);
    char *spell[2] = {g, e};
    for (int k = 0; k < 2; k++) { /* "1e-03" -> "1e-3", "1e+06" -> "1e6" */
        char *x = strchr(spell[k], 'e');
        if (!x)
            continue;
        char *d = x + 1, *src = x + 1;
        if (*src == '-')
            *d++ = *src++;
        else if (*src == '+')
            src++;
        while (*src == '0' && src[1])
            src++;
        memmove(d, src, strlen(src) + 1);
    }
    const char *w = strlen(e) < strlen(g) ? e : g;
    size_t n = strlen(w) < size ? strlen(w) : size - 1;
    memcpy(out, w, n);
    out[n] = '\0';
}

/* param_info(): the bounds of tensor `tensor` of param_tensors() and its init rule in words, the numbers as
 * create() evaluated them: "given" (the option set it), "1e-3" (CONST), "ALiBi x 0.5: 2^(-8(h+1)/H)",
 * "uniform(0.01, 1)", "symmetric(0.176777)" (U(-a, a)), "expr: pow(2.0, h + 1)" (as written). */
static inline int biaskit_tp_param_info(const void *inst, int32_t tensor, biaskit_param_info *out, biaskit_error *err)
{
    const biaskit_tp_instance *s = (const biaskit_tp_instance *)inst;
    int k = 0, n = 0;
    for (; s->learnable && k < s->n_specs; k++)
        if (s->specs[k].shape != 0 && n++ == tensor)
            break;
    if (!s->learnable || k == s->n_specs || tensor < 0)
        return s->svc->error(err, BIASKIT_ERR_INVALID, "tensor %d: expected 0 .. %d (the tensors of param_tensors())",
                             (int)tensor, (int)biaskit_tp_param_tensors(inst, NULL, 0) - 1);
    const biaskit_tp_param *spec = &s->specs[k];
    if (!out || !BIASKIT_HAS_FIELD(out, biaskit_param_info, upper))
        return out ? BIASKIT_OK : s->svc->error(err, BIASKIT_ERR_INVALID, "biaskit_param_info is NULL");
    out->lower = spec->lower;
    out->upper = spec->upper;
    if (!BIASKIT_HAS_FIELD(out, biaskit_param_info, init))
        return BIASKIT_OK;
    char a[32], b[32];
    biaskit_tp_number_(a, sizeof a, spec->init_a);
    biaskit_tp_number_(b, sizeof b, spec->init_b);
    char *t = out->init;
    const size_t size = sizeof out->init;
    if (s->given[k])
        snprintf(t, size, "given");
    else if (spec->init == BIASKIT_TP_INIT_CONST)
        snprintf(t, size, "%s", a);
    else if (spec->init == BIASKIT_TP_INIT_UNIFORM)
        snprintf(t, size, "uniform(%s, %s)", a, b);
    else if (spec->init == BIASKIT_TP_INIT_SYMMETRIC)
        snprintf(t, size, "symmetric(%s)", a);
    else if (spec->init == BIASKIT_TP_INIT_EXPR)
        snprintf(t, size, "expr: %s", spec->init_text ? spec->init_text : "?");
    else if ((s->heads & (s->heads - 1)) == 0) /* ALiBi, H a power of two */
        snprintf(t, size, "ALiBi%s%s: 2^(-8(h+1)/H)", spec->init_a == 1.0 ? "" : " x ", spec->init_a == 1.0 ? "" : a);
    else
        snprintf(t, size, "ALiBi%s%s: Press et al.'s slopes for H = %d (not a power of two: interleaved)",
                 spec->init_a == 1.0 ? "" : " x ", spec->init_a == 1.0 ? "" : a, (int)s->heads);
    return BIASKIT_OK;
}

/* The checks every table call starts with; *v gets the values to read (theta, or the fixed values
 * when frozen; for the CUDA variants the caller swaps in the device copy). */
static inline int biaskit_tp_values_(const biaskit_tp_instance *s, const float *theta, int32_t distances,
                                     const float **v, biaskit_error *err)
{
    if (distances <= 0)
        return s->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", (int)distances);
    if (s->learnable && !theta)
        return s->svc->error(err, BIASKIT_ERR_INVALID, "expected %lld parameters (theta), got NULL",
                             (long long)s->count);
    *v = s->learnable ? theta : s->values;
    return BIASKIT_OK;
}

/* After head h's double sums acc[k]: a PER_HEAD parameter's element h gets its sum now, a SCALAR one
 * collects it in total[k] (heads ascending) for biaskit_tp_add_totals_; an absent one nothing. */
static inline void biaskit_tp_add_head_(const biaskit_tp_instance *s, const double *acc, int32_t h, double *total,
                                        float *dtheta)
{
    for (int k = 0; k < s->n_specs; k++) {
        if (s->specs[k].shape == 2)
            dtheta[s->offsets[k] + h] += (float)acc[k];
        else
            total[k] += acc[k];
    }
}

static inline void biaskit_tp_add_totals_(const biaskit_tp_instance *s, const double *total, float *dtheta)
{
    for (int k = 0; k < s->n_specs; k++)
        if (s->specs[k].shape == 1)
            dtheta[s->offsets[k]] += (float)total[k];
}

#if defined(BIASKIT_WITH_CUDA)
/* The CUDA functions the .cu file (the same source under nvcc) defines; hidden like everything but the
 * entry point (biaskit_add_plugin builds with hidden visibility). */
#define BIASKIT_TP_CUDA_(P)                                                                              \
    int P##_tp_table_cuda_(const biaskit_services *svc, const float *v, P##_ctx c, int32_t distances,    \
                           float *table, void *stream, biaskit_error *err);                               \
    int P##_tp_backward_cuda_(const biaskit_services *svc, const float *v, P##_ctx c, int32_t distances, \
                              const float *dtable, float *dtheta, void *stream, biaskit_error *err);      \
    int P##_tp_upload_(const biaskit_services *svc, const float *host, int64_t count, float **device,    \
                       void *stream, biaskit_error *err);                                                 \
    void P##_tp_release_(float *device);                                                                  \
    /* Device values: theta when learnable, else the device copy of the fixed values (a cache in the      \
     * instance, hence the cast; none when there are no values). */                                       \
    static int P##_tp_device_values_(const void *inst, const float *theta, int32_t distances,            \
                                     void *stream, const float **v, biaskit_error *err)                   \
    {                                                                                                     \
        biaskit_tp_instance *s_ = (biaskit_tp_instance *)inst;                                            \
        int rc_ = biaskit_tp_values_(s_, theta, distances, v, err);                                       \
        if (rc_ || s_->learnable)                                                                         \
            return rc_;                                                                                   \
        if (s_->count > 0)                                                                                \
            rc_ = P##_tp_upload_(s_->svc, s_->values, s_->count, &s_->device_values, stream, err);        \
        *v = s_->device_values;                                                                           \
        return rc_;                                                                                       \
    }                                                                                                     \
    static int P##_tp_table_cuda(const void *inst, const float *theta, int32_t distances, float *out,    \
                                 void *stream, biaskit_error *err)                                        \
    {                                                                                                     \
        const biaskit_tp_instance *s_ = (const biaskit_tp_instance *)inst;                                \
        const float *v_ = NULL;                                                                           \
        int rc_ = P##_tp_device_values_(inst, theta, distances, stream, &v_, err);                        \
        return rc_ ? rc_ : P##_tp_table_cuda_(s_->svc, v_, P##_tp_ctx(s_), distances, out, stream, err); \
    }                                                                                                     \
    static int P##_tp_backward_cuda(const void *inst, const float *theta, int32_t distances,             \
                                    const float *dtable, float *dtheta, void *stream, biaskit_error *err) \
    {                                                                                                     \
        const biaskit_tp_instance *s_ = (const biaskit_tp_instance *)inst;                                \
        const float *v_ = NULL;                                                                           \
        int rc_ = biaskit_tp_values_(s_, theta, distances, &v_, err);                                     \
        if (rc_ || !s_->learnable)                                                                        \
            return rc_; /* frozen: no parameters, nothing to add */                                       \
        return P##_tp_backward_cuda_(s_->svc, v_, P##_tp_ctx(s_), distances, dtable, dtheta, stream, err); \
    }
#define BIASKIT_TP_CUDA_FIELDS_(P) .table_cuda = P##_tp_table_cuda, .table_backward_cuda = P##_tp_backward_cuda,
#define BIASKIT_TP_RELEASE_(P) P##_tp_release_
#else
#define BIASKIT_TP_CUDA_(P)
#define BIASKIT_TP_CUDA_FIELDS_(P)
#define BIASKIT_TP_RELEASE_(P) NULL
#endif

/* The whole plugin: options, specs, create, host table and gradient, the CUDA hooks when built with
 * CUDA, the descriptor (... = its designated initialisers: .name, .version, .summary, ...) and the
 * entry point. The `learnable` option comes first and is left out when nothing is learnable. */
#define BIASKIT_TABLE_PLUGIN(P, PARAMS, CONSTANTS, ...)                                                    \
    BIASKIT_TABLE_PLUGIN_WITH(P, PARAMS, CONSTANTS, NULL, __VA_ARGS__)
#define BIASKIT_TABLE_PLUGIN_WITH(P, PARAMS, CONSTANTS, SETTINGS, ...)                                     \
    /* a sentinel keeps the array non-empty when there are no constants */                                 \
    static const biaskit_tp_constant P##_tp_constants[] = {                                                \
        CONSTANTS(BIASKIT_TP_CSPEC_){NULL, 0, 0.0, NULL, NULL, 0.0, 0.0, NULL}};                           \
    static const biaskit_option P##_tp_options[] = {                                                       \
        BIASKIT_OPTION_BOOL("learnable", 1, "train the parameters; false: fixed at the given values (or "  \
                                            "their non-random init rule), no parameters"),                 \
        PARAMS(BIASKIT_TP_OPTION_) CONSTANTS(BIASKIT_TP_COPTION_)};                                        \
    static const biaskit_plugin P##_tp_descriptor;                                                         \
    static P##_ctx P##_tp_ctx(const biaskit_tp_instance *s_)                                               \
    {                                                                                                      \
        P##_ctx c_;                                                                                        \
        memset(&c_, 0, sizeof c_);                                                                         \
        BIASKIT_TP_SET_GEOMETRY_(c_, s_);                                                                  \
        CONSTANTS(BIASKIT_TP_CTX_)                                                                         \
        return c_;                                                                                         \
    }                                                                                                      \
    /* parameter k_want_'s BIASKIT_TP_EXPR at element h and copy layer (host only: see biaskit_tp_rule_) */ \
    static double P##_tp_rule(const biaskit_tp_instance *s_, int k_want_, int32_t h, int32_t layer)        \
    {                                                                                                      \
        BIASKIT_TP_MAYBE_UNUSED_ const P##_ctx c = P##_tp_ctx(s_);                                         \
        BIASKIT_TP_MAYBE_UNUSED_ const int32_t H = s_->heads;                                              \
        BIASKIT_TP_MAYBE_UNUSED_ int k_ = 0;                                                               \
        (void)h, (void)layer, (void)k_want_;                                                               \
        PARAMS(BIASKIT_TP_RULE_)                                                                           \
        return NAN;                                                                                        \
    }                                                                                                      \
    /* the parameter list, evaluated with the constants */                                                 \
    static void P##_tp_specs(const biaskit_tp_instance *s_, biaskit_tp_param *out_)                        \
    {                                                                                                      \
        BIASKIT_TP_MAYBE_UNUSED_ P##_ctx c = P##_tp_ctx(s_);                                               \
        int k_ = 0;                                                                                        \
        (void)out_;                                                                                        \
        PARAMS(BIASKIT_TP_SPEC_)                                                                           \
        (void)k_;                                                                                          \
    }                                                                                                      \
    BIASKIT_TP_CUDA_(P)                                                                                    \
    static int P##_tp_create(const biaskit_services *svc, const biaskit_config *cfg,                       \
                             const biaskit_geometry *geo, void **out, biaskit_error *err)                  \
    {                                                                                                      \
        return biaskit_tp_create(svc, cfg, geo, P##_tp_descriptor.name, P##_tp_np, P##_tp_nlearn > 0,      \
                                 P##_tp_specs, P##_tp_constants, P##_tp_nc, (SETTINGS),                    \
                                 BIASKIT_TP_RELEASE_(P), P##_tp_rule, out, err);                           \
    }                                                                                                      \
    static int P##_tp_table(const void *inst, const float *theta, int32_t distances, float *out,           \
                            biaskit_error *err)                                                            \
    {                                                                                                      \
        const biaskit_tp_instance *s_ = (const biaskit_tp_instance *)inst;                                 \
        const float *v_ = NULL;                                                                            \
        int rc_ = biaskit_tp_values_(s_, theta, distances, &v_, err);                                      \
        if (rc_)                                                                                           \
            return rc_;                                                                                    \
        P##_ctx c_ = P##_tp_ctx(s_);                                                                       \
        for (int32_t h = 0; h < s_->heads; h++) {                                                          \
            float *row_ = out + (size_t)h * (size_t)distances;                                             \
            if (h > 0 && s_->same_rows) {                                                                  \
                memcpy(row_, out, sizeof *row_ * (size_t)distances);                                       \
                continue;                                                                                  \
            }                                                                                              \
            P##_params p_ = P##_tp_load(v_, c_, h);                                                        \
            for (int32_t d = 0; d < distances; d++)                                                        \
                row_[d] = P##_tp_formula(p_, c_, h, d);                                                    \
        }                                                                                                  \
        return BIASKIT_OK;                                                                                 \
    }                                                                                                      \
    /* the documented host order: per head, d ascending, one double per parameter */                       \
    static int P##_tp_table_backward(const void *inst, const float *theta, int32_t distances,              \
                                     const float *dtable, float *dtheta, biaskit_error *err)               \
    {                                                                                                      \
        const biaskit_tp_instance *s_ = (const biaskit_tp_instance *)inst;                                 \
        const float *v_ = NULL;                                                                            \
        int rc_ = biaskit_tp_values_(s_, theta, distances, &v_, err);                                      \
        if (rc_ || !s_->learnable)                                                                         \
            return rc_; /* frozen: no parameters, nothing to add */                                        \
        P##_ctx c_ = P##_tp_ctx(s_);                                                                       \
        double total_[BIASKIT_TP_NPARAMS1_(P)] = {0};                                                      \
        for (int32_t h = 0; h < s_->heads; h++) {                                                          \
            P##_params p_ = P##_tp_load(v_, c_, h);                                                        \
            const float *row_ = dtable + (size_t)h * (size_t)distances;                                    \
            double head_[BIASKIT_TP_NPARAMS1_(P)] = {0};                                                   \
            for (int32_t d = 0; d < distances; d++)                                                        \
                BIASKIT_TP_ACCUMULATE_(P, PARAMS, p_, c_, h, d, (double)row_[d], head_);                   \
            biaskit_tp_add_head_(s_, head_, h, total_, dtheta);                                            \
        }                                                                                                  \
        biaskit_tp_add_totals_(s_, total_, dtheta);                                                        \
        return BIASKIT_OK;                                                                                 \
    }                                                                                                      \
    static const biaskit_plugin P##_tp_descriptor = {                                                      \
        .struct_size = sizeof(biaskit_plugin),                                                             \
        .abi_version = BIASKIT_ABI_VERSION,                                                                \
        .capabilities = BIASKIT_CAP_TABLE,                                                                 \
        .options = P##_tp_options + (P##_tp_nlearn == 0),                                                  \
        .n_options = sizeof P##_tp_options / sizeof P##_tp_options[0] - (P##_tp_nlearn == 0),              \
        .create = P##_tp_create,                                                                           \
        .destroy = biaskit_tp_destroy,                                                                     \
        .param_count = biaskit_tp_param_count,                                                             \
        .param_init = biaskit_tp_param_init,                                                               \
        .param_project = biaskit_tp_param_project,                                                         \
        .param_tensors = biaskit_tp_param_tensors,                                                         \
        .param_init_ctx = P##_tp_nexpr > 0 ? biaskit_tp_param_init_ctx : NULL,                             \
        .param_info = biaskit_tp_param_info,                                                               \
        .table = P##_tp_table,                                                                             \
        .table_backward = P##_tp_table_backward,                                                           \
        BIASKIT_TP_CUDA_FIELDS_(P) __VA_ARGS__};                                                           \
    BIASKIT_TP_EMULATION_(P, PARAMS) /* the CUDA kernels on the host, for `biaskit check` */              \
    BIASKIT_DEFINE_PLUGIN(P##_tp_descriptor)

/* ---- the CUDA kernels, emulated on the host ---------------------------------------------------------
 * The device part's three kernels, run on the CPU over the same grid from the same per-thread functions
 * (BIASKIT_TP_THREAD_FUNCTIONS_): the table kernel's B = biaskit_tp_blocks_(D, T) blocks of T threads
 * per head; the partial kernel's B = biaskit_tp_blocks_(D, T * BIASKIT_TP_PER_THREAD) blocks per head,
 * each thread's double sums, then the block's tree (stride T/2, T/4, ..., 1: one step for every thread
 * before the next, as __syncthreads() orders them) into one partial per (head, block, parameter); then
 * the final kernel's elements, each summing its partials head ascending, block ascending. So the
 * emulated gradient has the CUDA kernels' bits wherever the C compiler and nvcc round the formula alike
 * (nvcc contracts a * b + c into fused multiply-adds by default, the C build does not: the last bits
 * of a value may differ), and not the host table_backward's bits (that sums d = 0, 1, ... in one double
 * per head: the same terms, another order). A plugin built with BIASKIT_TABLE_PLUGIN exports them, with
 * its source file, as biaskit_tp_emulation() (the one symbol besides the entry point), for `biaskit
 * check`, which compares them with the host functions without a GPU. Nothing of the ABI changes: the
 * engine never calls them. */

/* What biaskit_tp_emulation() returns (fields are appended; struct_size says how many there are). */
typedef struct biaskit_tp_emulated {
    size_t struct_size;             /* sizeof(biaskit_tp_emulated) as the plugin was built */
    const biaskit_plugin *plugin;   /* the descriptor these belong to (the entry point's) */
    const char *source;             /* the plugin's source file (__FILE__ where BIASKIT_TABLE_PLUGIN is) */
    int32_t threads;                /* BIASKIT_TP_THREADS */
    int32_t per_thread;             /* BIASKIT_TP_PER_THREAD */
    /* table_cuda's kernel on the host: table()'s signature, host memory */
    int (*table_emulated)(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err);
    /* table_backward_cuda's two kernels on the host: table_backward()'s signature, host memory */
    int (*table_backward_emulated)(const void *inst, const float *theta, int32_t distances, const float *dtable,
                                   float *dtheta, biaskit_error *err);
} biaskit_tp_emulated;

#define BIASKIT_TP_EMULATION_SYMBOL "biaskit_tp_emulation"
typedef const biaskit_tp_emulated *(*biaskit_tp_emulation_fn)(void);

/* The blocks of the backward's partial kernel at D distances (B depends on D only). */
static inline unsigned biaskit_tp_backward_blocks(int32_t distances)
{
    return biaskit_tp_blocks_(distances, BIASKIT_TP_THREADS * BIASKIT_TP_PER_THREAD);
}

/* The block tree of the partial kernel on sh[np * T] (every thread of a step before the next step). */
static inline void biaskit_tp_emulate_tree_(double *sh, int np)
{
    for (unsigned stride = BIASKIT_TP_THREADS / 2; stride > 0; stride /= 2)
        for (unsigned t = 0; t < BIASKIT_TP_THREADS; t++)
            biaskit_tp_tree_step_(sh, np, t, stride);
}

#define BIASKIT_TP_EMULATION_(P, PARAMS)                                                                  \
    BIASKIT_TP_THREAD_FUNCTIONS_(P, PARAMS)                                                               \
    static int P##_tp_table_emulated(const void *inst, const float *theta, int32_t distances, float *out, \
                                     biaskit_error *err)                                                  \
    {                                                                                                     \
        const biaskit_tp_instance *s_ = (const biaskit_tp_instance *)inst;                                \
        const float *v_ = NULL;                                                                           \
        int rc_ = biaskit_tp_values_(s_, theta, distances, &v_, err);                                     \
        if (rc_)                                                                                          \
            return rc_;                                                                                   \
        P##_ctx c_ = P##_tp_ctx(s_);                                                                      \
        unsigned blocks_ = biaskit_tp_blocks_(distances, BIASKIT_TP_THREADS);                             \
        for (int32_t h = 0; h < s_->heads; h++)                                                           \
            for (unsigned b = 0; b < blocks_; b++)                                                        \
                for (unsigned t = 0; t < BIASKIT_TP_THREADS; t++)                                         \
                    P##_tp_table_thread(v_, c_, distances, out, h, (int64_t)b * BIASKIT_TP_THREADS + t,   \
                                        (int64_t)blocks_ * BIASKIT_TP_THREADS);                           \
        return BIASKIT_OK;                                                                                \
    }                                                                                                     \
    static int P##_tp_backward_emulated(const void *inst, const float *theta, int32_t distances,          \
                                        const float *dtable, float *dtheta, biaskit_error *err)           \
    {                                                                                                     \
        enum { NP_ = BIASKIT_TP_NPARAMS1_(P), T_ = BIASKIT_TP_THREADS };                                  \
        const biaskit_tp_instance *s_ = (const biaskit_tp_instance *)inst;                                \
        const float *v_ = NULL;                                                                           \
        int rc_ = biaskit_tp_values_(s_, theta, distances, &v_, err);                                     \
        if (rc_ || !s_->learnable)                                                                        \
            return rc_; /* frozen: no parameters, nothing to add */                                       \
        P##_ctx c_ = P##_tp_ctx(s_);                                                                      \
        unsigned blocks_ = biaskit_tp_backward_blocks(distances);                                         \
        int64_t count_ = P##_tp_count(c_);                                                                \
        if (count_ == 0)                                                                                  \
            return BIASKIT_OK;                                                                            \
        size_t n_ = (size_t)s_->heads * blocks_ * (size_t)NP_;                                            \
        double *partial_ = (double *)malloc(sizeof *partial_ * n_);                                       \
        double *sh_ = (double *)malloc(sizeof *sh_ * (size_t)NP_ * T_);                                   \
        if (!partial_ || !sh_) {                                                                          \
            free(partial_);                                                                               \
            free(sh_);                                                                                    \
            return s_->svc->error(err, BIASKIT_ERR_NOMEM, "out of memory for %zu gradient partials", n_); \
        }                                                                                                 \
        for (int32_t h = 0; h < s_->heads; h++)                                                           \
            for (unsigned b = 0; b < blocks_; b++) {                                                      \
                for (unsigned t = 0; t < T_; t++) {                                                       \
                    double acc_[NP_];                                                                     \
                    P##_tp_thread_sums(v_, c_, distances, dtable, h, b, blocks_, t, acc_);                \
                    for (int k = 0; k < NP_; k++)                                                         \
                        sh_[k * T_ + t] = acc_[k];                                                        \
                }                                                                                         \
                biaskit_tp_emulate_tree_(sh_, NP_);                                                       \
                biaskit_tp_store_partial_(sh_, NP_, h, blocks_, b, partial_);                             \
            }                                                                                             \
        for (int64_t e = 0; e < count_; e++)                                                              \
            P##_tp_final_element(c_, blocks_, partial_, dtheta, e);                                       \
        free(partial_);                                                                                   \
        free(sh_);                                                                                        \
        return BIASKIT_OK;                                                                                \
    }                                                                                                     \
    BIASKIT_EXPORT const biaskit_tp_emulated *biaskit_tp_emulation(void);                                 \
    BIASKIT_EXPORT const biaskit_tp_emulated *biaskit_tp_emulation(void)                                  \
    {                                                                                                     \
        static const biaskit_tp_emulated e_ = {sizeof(biaskit_tp_emulated), &P##_tp_descriptor, __FILE__, \
                                               BIASKIT_TP_THREADS, BIASKIT_TP_PER_THREAD,                 \
                                               P##_tp_table_emulated, P##_tp_backward_emulated};          \
        return &e_;                                                                                       \
    }

#else /* __CUDACC__ */
/* ==================================== device part (CUDA C++) =================================== */

/* The launches' block counts are the shared biaskit_tp_blocks_ (the emulation's too): the same limit. */
static_assert(BIASKIT_TP_MAX_BLOCKS == BIASKIT_CUDA_MAX_BLOCKS,
              "table_plugin.h: BIASKIT_TP_MAX_BLOCKS must equal plugin_cuda.h's BIASKIT_CUDA_MAX_BLOCKS");

#define BIASKIT_TABLE_PLUGIN(P, PARAMS, CONSTANTS, ...)                                                    \
    BIASKIT_TABLE_PLUGIN_WITH(P, PARAMS, CONSTANTS, NULL, __VA_ARGS__)
#define BIASKIT_TABLE_PLUGIN_WITH(P, PARAMS, CONSTANTS, SETTINGS, ...)                                     \
    /* the settings are host code: referenced here so that nvcc does not call them unused */               \
    static const void *const P##_tp_settings_ BIASKIT_TP_MAYBE_UNUSED_ = (SETTINGS);                      \
    BIASKIT_TP_THREAD_FUNCTIONS_(P, PARAMS)                                                                \
    /* one row per blockIdx.y = head, a grid-stride loop over the distances */                             \
    static __global__ void P##_tp_table_kernel(const float *v, P##_ctx c, int32_t distances, float *table) \
    {                                                                                                      \
        P##_tp_table_thread(v, c, distances, table, (int32_t)blockIdx.y,                                   \
                            (int64_t)blockIdx.x * blockDim.x + threadIdx.x, (int64_t)gridDim.x * blockDim.x); \
    }                                                                                                      \
    /* block (blockIdx.x, head blockIdx.y): fixed distances per thread, a fixed tree per block */          \
    static __global__ void P##_tp_partial_kernel(const float *v, P##_ctx c, int32_t distances,             \
                                                 const float *dtable, double *partial)                     \
    {                                                                                                      \
        enum { NP = BIASKIT_TP_NPARAMS1_(P), T = BIASKIT_TP_THREADS };                                     \
        static_assert(NP <= BIASKIT_TP_MAX_PARAMS && BIASKIT_TP_MAX_PARAMS * T * sizeof(double) <= 48 * 1024, \
                      "table_plugin.h: at most BIASKIT_TP_MAX_PARAMS parameters (the block sums fit in 48 KiB of " \
                      "shared memory)");                                                                 \
        __shared__ double sh[NP * T];                                                                      \
        unsigned t = threadIdx.x;                                                                          \
        double acc[NP];                                                                                    \
        P##_tp_thread_sums(v, c, distances, dtable, (int32_t)blockIdx.y, blockIdx.x, gridDim.x, t, acc);   \
        for (int k = 0; k < NP; k++)                                                                       \
            sh[k * T + t] = acc[k];                                                                        \
        __syncthreads();                                                                                   \
        for (unsigned stride = T / 2; stride > 0; stride /= 2) {                                           \
            biaskit_tp_tree_step_(sh, NP, t, stride);                                                      \
            __syncthreads();                                                                               \
        }                                                                                                  \
        if (t == 0)                                                                                        \
            biaskit_tp_store_partial_(sh, NP, (int32_t)blockIdx.y, gridDim.x, blockIdx.x, partial);        \
    }                                                                                                      \
    /* one thread per element of dtheta: the partials in a fixed order */                                  \
    static __global__ void P##_tp_final_kernel(P##_ctx c, unsigned blocks, int64_t count,                  \
                                               const double *partial, float *dtheta)                       \
    {                                                                                                      \
        for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < count;                        \
             e += (int64_t)gridDim.x * blockDim.x)                                                         \
            P##_tp_final_element(c, blocks, partial, dtheta, e);                                           \
    }                                                                                                      \
    extern "C" int P##_tp_table_cuda_(const biaskit_services *svc, const float *v, P##_ctx c,              \
                                      int32_t distances, float *table, void *stream, biaskit_error *err)   \
    {                                                                                                      \
        P##_tp_table_kernel<<<dim3(biaskit_tp_blocks_(distances, BIASKIT_TP_THREADS), (unsigned)c.heads),  \
                              BIASKIT_TP_THREADS, 0, (cudaStream_t)stream>>>(v, c, distances, table);      \
        return biaskit_cuda_launched(svc, "the table kernel", err);                                        \
    }                                                                                                      \
    extern "C" int P##_tp_backward_cuda_(const biaskit_services *svc, const float *v, P##_ctx c,           \
                                         int32_t distances, const float *dtable, float *dtheta,            \
                                         void *stream, biaskit_error *err)                                 \
    {                                                                                                      \
        const int np = BIASKIT_TP_NPARAMS1_(P);                                                            \
        unsigned blocks = biaskit_tp_blocks_(distances, BIASKIT_TP_THREADS * BIASKIT_TP_PER_THREAD);       \
        size_t n = (size_t)c.heads * blocks * (size_t)np;                                                  \
        int64_t count = P##_tp_count(c); /* the elements of theta */                                       \
        if (count == 0)                                                                                    \
            return BIASKIT_OK;                                                                             \
        double *partial = NULL;                                                                            \
        cudaError_t ce = cudaMallocAsync((void **)&partial, sizeof(double) * n, (cudaStream_t)stream);     \
        if (ce != cudaSuccess)                                                                             \
            return svc->error(err, BIASKIT_ERR_DEVICE, "cudaMallocAsync of %zu gradient partials: %s", n,  \
                              cudaGetErrorString(ce));                                                     \
        P##_tp_partial_kernel<<<dim3(blocks, (unsigned)c.heads), BIASKIT_TP_THREADS, 0,                    \
                                (cudaStream_t)stream>>>(v, c, distances, dtable, partial);                 \
        int rc = biaskit_cuda_launched(svc, "the gradient kernel (partials)", err);                        \
        if (!rc) {                                                                                         \
            P##_tp_final_kernel<<<biaskit_tp_blocks_(count, BIASKIT_TP_THREADS), BIASKIT_TP_THREADS, 0,    \
                                  (cudaStream_t)stream>>>(c, blocks, count, partial, dtheta);              \
            rc = biaskit_cuda_launched(svc, "the gradient kernel (final sum)", err);                       \
        }                                                                                                  \
        ce = cudaFreeAsync(partial, (cudaStream_t)stream);                                                 \
        if (!rc && ce != cudaSuccess)                                                                      \
            rc = svc->error(err, BIASKIT_ERR_DEVICE, "cudaFreeAsync of the gradient partials: %s",         \
                            cudaGetErrorString(ce));                                                       \
        return rc;                                                                                         \
    }                                                                                                      \
    extern "C" int P##_tp_upload_(const biaskit_services *svc, const float *host, int64_t count,           \
                                  float **device, void *stream, biaskit_error *err)                        \
    {                                                                                                      \
        return biaskit_cuda_upload_once(svc, host, (size_t)count, device, stream, "fixed parameters", err); \
    }                                                                                                      \
    extern "C" void P##_tp_release_(float *device)                                                         \
    {                                                                                                      \
        biaskit_cuda_free(device);                                                                         \
    }

#endif /* __CUDACC__ */

#endif /* BIASKIT_TABLE_PLUGIN_H */
