/* biaskit new-plugin NAME [--kind K] [--dir D]: a ready folder for a formula-first plugin (sdk/README.md,
 * "Formula-first plugins"): the formula file, a CMakeLists.txt against the installed SDK, a README with the
 * formula and the commands, and an experiment that uses it; for a distance table (the default kind,
 * <biaskit/table_plugin.h>) also its CUDA twin. The kinds coordinate, mask, scale and rotary are the ABI 2
 * shapes of <biaskit/formula_plugin.h> (host code only). Each builds and passes `biaskit check` as written
 * (tests/test_install.sh); the author then edits the formula. */
#define _POSIX_C_SOURCE 200809L
#include "cli/args.h"
#include "cli/commands.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char help[] =
    "usage: biaskit new-plugin NAME [--kind table|coordinate|mask|scale|rotary|views] [--dir D]\n\n"
    "Writes D/NAME/ (D: the working directory by default), a formula-first plugin that builds against\n"
    "the installed SDK and passes `biaskit check` unchanged, to edit into your own formula. The kind\n"
    "says what the plugin computes (default: table):\n\n"
    "  table        a distance table: a learnable per-head linear bias T_h(d) = -m_h d, m_h starting at\n"
    "               ALiBi's slopes (<biaskit/table_plugin.h>; CUDA kernels generated from the formula)\n"
    "  coordinate   a table over a coordinate (as FIRE): F_h(u) = -a_h u at u = log(1 + c d) /\n"
    "               log(1 + c max(i, L)), a_h and c learnable, one copy per layer\n"
    "  mask         a sliding window with attention sinks: keys i - j < window, or j < sinks\n"
    "  scale        a logit scale (as Scalable-Softmax): q.k times s_h ln(i + 1), s_h learnable\n"
    "  rotary       RoPE with position interpolation: theta_k = base^(-2k/d) / s, s fixed or\n"
    "               max(1, length / L) (dynamic)\n"
    "  views        leaky ReRoPE by two position views: RoPE for i - j < window, beyond it the relative\n"
    "               position window + (i - j - window) / k, the two passes merged exactly\n"
    "The last five are the ABI 2 shapes of <biaskit/formula_plugin.h>: host code only (the engine's\n"
    "kernels do the per-element work), so no .cu file.\n\n"
    "  NAME.c           the parameters, the formula(s) and their derivatives\n"
    "  NAME.cu          (table only) #include \"NAME.c\": the CUDA kernels, from the same formula\n"
    "  CMakeLists.txt   find_package(biaskit) + biaskit_add_plugin (table: CUDA when nvcc is found)\n"
    "  README.md        the formula and the commands to build, check and use it\n"
    "  NAME.toml        an experiment with one NAME term\n\n"
    "NAME: a lowercase letter, then lowercase letters, digits or '_' (at most 40): it is the plugin's\n"
    "name and the C prefix of its code, so not 'biaskit' nor 'biaskit_...' (the SDK's prefix), nor a\n"
    "macro of the compiler or the C headers (linux, unix, i386, math_errhandling, stdin, stdout,\n"
    "stderr). D/NAME must not exist yet.\n\n"
    "  --kind K         what the plugin computes (above; default table)\n"
    "  --dir D          the folder to create NAME/ in\n";

#define MAX_NAME 40

/* The files, with @ standing for the plugin's name. */
static const char formula_c[] =
    "/* The biaskit plugin '@': T_h(d) = -m_h d, one learnable slope per head (edit the formula below).\n"
    " * Written with <biaskit/table_plugin.h>: the SDK generates the options, the parameter hooks, the host\n"
    " * table and gradient, the CUDA kernels (through @.cu) and the descriptor. */\n"
    "#include <biaskit/table_plugin.h>\n"
    "\n"
    "/* X(name, PER_HEAD | SCALAR, init rule, lower, upper, doc): the slopes start at ALiBi's 2^(-8(h+1)/H)\n"
    " * (head h = 0..H-1, H a power of two) and stay >= 0 after every optimizer step.\n"
    " * Init rules: BIASKIT_TP_CONST(v), BIASKIT_TP_ALIBI(scale), BIASKIT_TP_UNIFORM(lo, hi),\n"
    " * BIASKIT_TP_SYMMETRIC(a) (U(-a, a)) and BIASKIT_TP_EXPR(expr), expr a C expression of the head h, the\n"
    " * heads H, the copy's layer (-1: shared) and c, e.g. BIASKIT_TP_EXPR(pow(2.0, -8.0 * (h + 1) / H)).\n"
    " * c holds the model (c.heads, c.layers, c.d_model, c.d_head, c.train_length) and the constants.\n"
    " * Options: slope = [..] (1 value or one per head), learnable. */\n"
    "#define @_PARAMS(X) X(slope, PER_HEAD, BIASKIT_TP_ALIBI(1.0), 0.0, INFINITY, \"slope m in T(d) = -m d\")\n"
    "\n"
    "BIASKIT_TP_TYPES(@, @_PARAMS, BIASKIT_TP_NO_CONSTANTS)\n"
    "\n"
    "/* the bias of head h at distance d >= 0, and its derivative with respect to each parameter */\n"
    "BIASKIT_TP_TABLE(@) { return -p.slope * (float)d; }\n"
    "BIASKIT_TP_GRADIENT(@) { g->slope = -(float)d; }\n"
    "\n"
    "BIASKIT_TABLE_PLUGIN(@, @_PARAMS, BIASKIT_TP_NO_CONSTANTS, .name = \"@\", .version = \"0.1.0\",\n"
    "                     .summary = \"learnable linear bias -m_h d (biaskit new-plugin template)\",\n"
    "                     .reference = NULL)\n";

static const char formula_cu[] =
    "/* The CUDA kernels of '@': the same file under nvcc, where the SDK's macros write kernels. */\n"
    "#include \"@.c\"\n";

static const char cmakelists[] =
    "# The biaskit plugin '@', built against an installed biaskit SDK:\n"
    "#   cmake -S . -B build -DCMAKE_PREFIX_PATH=<biaskit install prefix> && cmake --build build\n"
    "cmake_minimum_required(VERSION 3.24)\n"
    "project(biaskit_@_plugin LANGUAGES C)\n"
    "find_package(biaskit 0.1 REQUIRED)\n"
    "\n"
    "# CUDA when nvcc is found (often /usr/local/cuda, off the PATH); -DPLUGIN_CUDA=OFF: host only.\n"
    "option(PLUGIN_CUDA \"Build the plugin's CUDA kernels when nvcc is found\" ON)\n"
    "if(PLUGIN_CUDA)\n"
    "  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)\n"
    "    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)\n"
    "  endif()\n"
    "  include(CheckLanguage)\n"
    "  check_language(CUDA)\n"
    "  if(CMAKE_CUDA_COMPILER)\n"
    "    enable_language(CUDA)\n"
    "  endif()\n"
    "endif()\n"
    "biaskit_add_plugin(@ SOURCES @.c CUDA_SOURCES @.cu OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})\n";

static const char readme[] =
    "# @ — a biaskit plugin\n"
    "\n"
    "A learnable per-head linear bias, the template of `biaskit new-plugin`; edit `@.c` to make it yours:\n"
    "\n"
    "    T_h(d) = −m_h · d,     ∂T_h(d)/∂m_h = −d,     m_h starting at ALiBi's slopes 2^(−8(h+1)/H) (h = 0..H−1), kept ≥ 0\n"
    "\n"
    "`@.c` holds the parameters (`@_PARAMS`), the formula (`BIASKIT_TP_TABLE`) and its derivative\n"
    "(`BIASKIT_TP_GRADIENT`); `@.cu` compiles the same file as CUDA kernels. See the biaskit SDK guide,\n"
    "`<prefix>/share/doc/biaskit/SDK.md` (installed with the SDK), \"Formula-first plugins\", for the init rules,\n"
    "constants and frozen parameters.\n"
    "\n"
    "| option | type | default | meaning |\n"
    "|---|---|---|---|\n"
    "| `slope` | float array | `[]` (ALiBi's slopes) | 1 value (every head) or one per head |\n"
    "| `learnable` | bool | true | false: the slopes are fixed, no parameters |\n"
    "\n"
    "## Build, check, use\n"
    "\n"
    "    cmake -S . -B build -DCMAKE_PREFIX_PATH=<biaskit install prefix>\n"
    "    cmake --build build\n"
    "    BIASKIT_PLUGIN_PATH=$PWD/build biaskit check @             # conformance: tables, gradients, CUDA\n"
    "    BIASKIT_PLUGIN_PATH=$PWD/build biaskit bias @.toml --length 8\n"
    "    BIASKIT_PLUGIN_PATH=$PWD/build biaskit train @.toml       # C headers under /usr/include\n";

static const char experiment[] =
    "# An experiment with one '@' term (the plugin is found on BIASKIT_PLUGIN_PATH, e.g. build/).\n"
    "#   BIASKIT_PLUGIN_PATH=build biaskit train @.toml\n"
    "\n"
    "[model]\n"
    "layers = 2\n"
    "heads = 4\n"
    "dim = 64\n"
    "vocab = 256\n"
    "\n"
    "[train]\n"
    "length = 64\n"
    "batch = 8\n"
    "steps = 100\n"
    "lr = 3e-3\n"
    "warmup = 10\n"
    "\n"
    "[data]\n"
    "format = \"text\"\n"
    "paths = [\"/usr/include\"]\n"
    "extensions = [\".h\"]\n"
    "max_bytes = 2000000\n"
    "\n"
    "[run]\n"
    "out_dir = \"runs/@\"\n"
    "\n"
    "[[term]]\n"
    "plugin = \"@\"\n";

/* ---- the ABI 2 kinds (<biaskit/formula_plugin.h>, host code only) ---------------------------------- */

static const char coordinate_c[] =
    "/* The biaskit plugin '@': a bias read from a table over a coordinate u in [0, 1] (as FIRE; edit the\n"
    " * formulas below):\n"
    " *     Bias[h, i, j] = F_h(u(i, i - j)),   u(i, d) = phi(d) rscale(i) = log(1 + c d) / log(1 + c max(i, L))\n"
    " *     F_h(u) = -a_h u\n"
    " * a_h learnable per head (starting at 8 x ALiBi's slopes, kept >= 0), c learnable (0.1, kept in\n"
    " * [0.001, 1000]), L the option threshold (0: the training length), one copy per layer. The engine reads F\n"
    " * from a grid of u (the option grid) and interpolates it. Written with <biaskit/formula_plugin.h>: the SDK\n"
    " * generates the options, the parameter hooks, the grid table, the coordinates, their gradients and the\n"
    " * descriptor. */\n"
    "#include <biaskit/formula_plugin.h>\n"
    "\n"
    "/* C(name, kind, doc): options the formulas read as c.name */\n"
    "#define @_CONSTANTS(C)                                                                                  \\\n"
    "    C(threshold, BIASKIT_TP_INT(0, 0, INT32_MAX), \"L of max(i, L); 0 = the training length\")\n"
    "/* X(name, shape, init rule, lower, upper, doc): F's parameters, then the coordinate's (SCALAR or ARRAY) */\n"
    "#define @_PARAMS(X) X(a, PER_HEAD, BIASKIT_TP_ALIBI(8.0), 0.0, INFINITY, \"slope a_h of F_h(u) = -a_h u\")\n"
    "#define @_UPARAMS(X) X(c, SCALAR, BIASKIT_TP_CONST(0.1), 1e-3, 1e3, \"c in u = log(1 + c d)\")\n"
    "\n"
    "BIASKIT_FP_COORDINATE_TYPES(@, @_PARAMS, @_UPARAMS, @_CONSTANTS)\n"
    "\n"
    "/* max(i, L), L = threshold or the training length (at least 1) */\n"
    "static double @_norm(@_ctx c, int32_t i)\n"
    "{\n"
    "    double L = c.threshold ? (double)c.threshold : c.train_length > 1 ? (double)c.train_length : 1.0;\n"
    "    return (double)i > L ? (double)i : L;\n"
    "}\n"
    "\n"
    "/* F_h(u) and its derivatives; phi(d) >= 0, non-decreasing; rscale(i) >= 0; phi(i) rscale(i) <= 1 */\n"
    "BIASKIT_FP_F(@) { return -p.a * u; }\n"
    "BIASKIT_FP_F_GRADIENT(@) { g->a = -u; }\n"
    "BIASKIT_FP_PHI(@) { return log1p(p.c * d); }\n"
    "BIASKIT_FP_PHI_GRADIENT(@) { g->c = d / (1.0 + p.c * d); }\n"
    "BIASKIT_FP_RSCALE(@) { return 1.0 / log1p(p.c * @_norm(c, i)); }\n"
    "BIASKIT_FP_RSCALE_GRADIENT(@)\n"
    "{\n"
    "    double n = @_norm(c, i), r = 1.0 / log1p(p.c * n);\n"
    "    g->c = -r * r * n / (1.0 + p.c * n);\n"
    "}\n"
    "\n"
    "/* 257: the default of the option grid (grid points of u) */\n"
    "BIASKIT_COORDINATE_PLUGIN(@, @_PARAMS, @_UPARAMS, @_CONSTANTS, 257, .name = \"@\", .version = \"0.1.0\",\n"
    "                          .flags = BIASKIT_FLAG_PER_LAYER,\n"
    "                          .summary = \"-a_h log(1 + c d) / log(1 + c max(i, L)) (new-plugin --kind coordinate)\",\n"
    "                          .reference = NULL)\n";

static const char coordinate_readme[] =
    "# @ — a biaskit plugin (coordinate table)\n"
    "\n"
    "The template of `biaskit new-plugin --kind coordinate`; edit `@.c` to make it yours. A bias read from a\n"
    "table over a coordinate u in [0, 1], as FIRE (Li et al., ICLR 2024):\n"
    "\n"
    "    Bias[h, i, j] = F_h(u(i, i − j)),   u(i, d) = φ(d) · r(i) = log(1 + c·d) / log(1 + c·max(i, L)),   F_h(u) = −a_h · u\n"
    "\n"
    "with `a_h` learnable per head (starting at 8 × ALiBi's slopes, kept ≥ 0), `c` learnable (0.1, kept in\n"
    "[0.001, 1000]) and one copy per layer. The engine reads F_h from a grid of u (`grid` points) and\n"
    "interpolates it linearly at every (i, j); it asks the plugin only for the grid, φ(d) and r(i).\n"
    "\n"
    "`@.c` holds the parameters (`@_PARAMS`: F's, `@_UPARAMS`: the coordinate's), the options the formulas\n"
    "read (`@_CONSTANTS`), F (`BIASKIT_FP_F`), φ (`BIASKIT_FP_PHI`), r (`BIASKIT_FP_RSCALE`) and their\n"
    "derivatives. The rules: φ(d) ≥ 0 and non-decreasing, r(i) ≥ 0, φ(i)·r(i) ≤ 1 (`biaskit check` and the\n"
    "engine check them). See the comment of `<biaskit/formula_plugin.h>` for every shape, init rule and option.\n"
    "\n"
    "| option | type | default | meaning |\n"
    "|---|---|---|---|\n"
    "| `a` | float array | `[]` (8 × ALiBi's slopes) | 1 value (every head) or one per head |\n"
    "| `c` | float array | `[]` (0.1) | 1 value |\n"
    "| `learnable` | bool | true | false: `a` and `c` fixed at their values, no parameters |\n"
    "| `threshold` | int | 0 | L of max(i, L); 0 = the training length |\n"
    "| `grid` | int | 257 | grid points of u F is tabulated at |\n"
    "\n"
    "## Build, check, use\n"
    "\n"
    "    cmake -S . -B build -DCMAKE_PREFIX_PATH=<biaskit install prefix>\n"
    "    cmake --build build\n"
    "    BIASKIT_PLUGIN_PATH=$PWD/build biaskit check @             # conformance: grid, coordinates, gradients\n"
    "    BIASKIT_PLUGIN_PATH=$PWD/build biaskit train @.toml       # C headers under /usr/include\n";

static const char mask_c[] =
    "/* The biaskit plugin '@': a sliding-window mask with attention sinks (edit the formula below): query i\n"
    " * sees key j when i - j < window (itself and the window - 1 keys before it) or j < sinks; every other score\n"
    " * is exactly -inf. Written with <biaskit/formula_plugin.h>: the SDK generates the options, the checks and\n"
    " * the descriptor. */\n"
    "#include <biaskit/formula_plugin.h>\n"
    "\n"
    "/* C(name, kind, doc): options the formula reads as c.name */\n"
    "#define @_CONSTANTS(C)                                                                                     \\\n"
    "    C(window, BIASKIT_TP_INT(0, 0, INT32_MAX), \"keys i - j < window are visible; 0 = the training length\") \\\n"
    "    C(sinks, BIASKIT_TP_INT(4, 0, INT32_MAX), \"the first sinks keys stay visible to every query\")\n"
    "\n"
    "BIASKIT_FP_TYPES(@, BIASKIT_TP_NO_PARAMS, @_CONSTANTS)\n"
    "\n"
    "/* window >= 1, sinks >= 0, distance_cap >= 0 (> 0: the distance tables are read at min(d, distance_cap));\n"
    " * c.train_length and ctx->length (the length of the call) are there too */\n"
    "BIASKIT_FP_MASK(@)\n"
    "{\n"
    "    m->window = c.window ? c.window : c.train_length;\n"
    "    m->sinks = c.sinks;\n"
    "}\n"
    "\n"
    "BIASKIT_MASK_PLUGIN(@, @_CONSTANTS, .name = \"@\", .version = \"0.1.0\", .reference = NULL,\n"
    "                    .summary = \"sliding window + attention sinks (biaskit new-plugin --kind mask)\")\n";

static const char mask_readme[] =
    "# @ — a biaskit plugin (mask)\n"
    "\n"
    "The template of `biaskit new-plugin --kind mask`; edit `@.c` to make it yours. A sliding window with\n"
    "attention sinks (StreamingLLM, Xiao et al., ICLR 2024): query i sees key j when\n"
    "\n"
    "    i − j < window   (itself and the window − 1 keys before it)   or   j < sinks\n"
    "\n"
    "and every other score is exactly −inf (the attention skips key tiles that are masked entirely).\n"
    "\n"
    "`@.c` holds the options the formula reads (`@_CONSTANTS`) and the formula (`BIASKIT_FP_MASK`), which sets\n"
    "`window` (≥ 1), `sinks` (≥ 0) and `distance_cap` (≥ 0; > 0 reads the distance tables at min(d, cap), as\n"
    "LM-Infinite). See the comment of `<biaskit/formula_plugin.h>`.\n"
    "\n"
    "| option | type | default | meaning |\n"
    "|---|---|---|---|\n"
    "| `window` | int | 0 | keys with i − j < window are visible; 0 = the training length |\n"
    "| `sinks` | int | 4 | the first `sinks` keys stay visible to every query |\n"
    "\n"
    "## Build, check, use\n"
    "\n"
    "    cmake -S . -B build -DCMAKE_PREFIX_PATH=<biaskit install prefix>\n"
    "    cmake --build build\n"
    "    BIASKIT_PLUGIN_PATH=$PWD/build biaskit check @             # conformance: the mask at every length\n"
    "    BIASKIT_PLUGIN_PATH=$PWD/build biaskit train @.toml       # C headers under /usr/include\n";

static const char scale_c[] =
    "/* The biaskit plugin '@': a logit scale (as Scalable-Softmax; edit the formula below):\n"
    " *     score[h, i, j] = s_h(i) q_i . k_j / sqrt(d_head) + biases,   s_h(i) = s_h ln(i + 1)\n"
    " * s_h learnable per head (starting at 0.43), one copy per layer. Written with <biaskit/formula_plugin.h>:\n"
    " * the SDK generates the options, the parameter hooks, the host loops, the gradient and the descriptor. */\n"
    "#include <biaskit/formula_plugin.h>\n"
    "\n"
    "/* X(name, shape, init rule, lower, upper, doc) */\n"
    "#define @_PARAMS(X) X(s, PER_HEAD, BIASKIT_TP_CONST(0.43), -INFINITY, INFINITY, \"s_h of s_h ln(i + 1)\")\n"
    "\n"
    "BIASKIT_FP_TYPES(@, @_PARAMS, BIASKIT_TP_NO_CONSTANTS)\n"
    "\n"
    "/* s of head h at query i (0-based), and its derivative with respect to each parameter */\n"
    "BIASKIT_FP_SCALE(@) { return p.s * log(i + 1.0); }\n"
    "BIASKIT_FP_SCALE_GRADIENT(@) { g->s = log(i + 1.0); }\n"
    "\n"
    "BIASKIT_SCALE_PLUGIN(@, @_PARAMS, BIASKIT_TP_NO_CONSTANTS, .name = \"@\", .version = \"0.1.0\",\n"
    "                     .flags = BIASKIT_FLAG_PER_LAYER, .reference = NULL,\n"
    "                     .summary = \"logit scale s_h ln(i + 1) (biaskit new-plugin --kind scale)\")\n";

static const char scale_readme[] =
    "# @ — a biaskit plugin (logit scale)\n"
    "\n"
    "The template of `biaskit new-plugin --kind scale`; edit `@.c` to make it yours. A per-head, per-query\n"
    "factor on the logits, as Scalable-Softmax (Nakanishi 2025):\n"
    "\n"
    "    score[h, i, j] = s_h(i) · q_i · k_j / √d_head + biases,     s_h(i) = s_h · ln(i + 1),     ∂s_h(i)/∂s_h = ln(i + 1)\n"
    "\n"
    "with `s_h` learnable per head (starting at 0.43) and one copy per layer.\n"
    "\n"
    "`@.c` holds the parameters (`@_PARAMS`), the formula (`BIASKIT_FP_SCALE`) and its derivative\n"
    "(`BIASKIT_FP_SCALE_GRADIENT`); the formula may read the context of the call (`ctx->length`,\n"
    "`ctx->training`). See the comment of `<biaskit/formula_plugin.h>`.\n"
    "\n"
    "| option | type | default | meaning |\n"
    "|---|---|---|---|\n"
    "| `s` | float array | `[]` (0.43) | 1 value (every head) or one per head |\n"
    "| `learnable` | bool | true | false: `s` fixed, no parameters |\n"
    "\n"
    "## Build, check, use\n"
    "\n"
    "    cmake -S . -B build -DCMAKE_PREFIX_PATH=<biaskit install prefix>\n"
    "    cmake --build build\n"
    "    BIASKIT_PLUGIN_PATH=$PWD/build biaskit check @             # conformance: scales, gradient\n"
    "    BIASKIT_PLUGIN_PATH=$PWD/build biaskit train @.toml       # C headers under /usr/include\n";

static const char rotary_c[] =
    "/* The biaskit plugin '@': RoPE with position interpolation (edit the formula below): pair k of q and k at\n"
    " * position p turns by p theta_k,\n"
    " *     theta_k = base^(-2k/d_head) / s,   s = factor, or with factor = 0 s = max(1, length / L)\n"
    " * (L: original_length, or the training length; length: the sequence length of each call). Written with\n"
    " * <biaskit/formula_plugin.h>: the SDK generates the options, the checks and the descriptor. */\n"
    "#include <biaskit/formula_plugin.h>\n"
    "\n"
    "/* C(name, kind, doc): options the formula reads as c.name */\n"
    "#define @_CONSTANTS(C)                                                                                     \\\n"
    "    C(base, BIASKIT_TP_REAL(10000, 2, 1e30), \"frequency base\")                                             \\\n"
    "    C(factor, BIASKIT_TP_REAL(1, 0, 1e6), \"s of theta_k / s; 0 = dynamic, s = max(1, length / L)\")          \\\n"
    "    C(original_length, BIASKIT_TP_INT(0, 0, INT32_MAX), \"L; 0 = the training length\")\n"
    "\n"
    "BIASKIT_FP_TYPES(@, BIASKIT_TP_NO_PARAMS, @_CONSTANTS)\n"
    "\n"
    "/* theta_k for k = 0 .. d_head/2 - 1 at the context of the call (ctx->length, ctx->training) */\n"
    "BIASKIT_FP_INV_FREQ(@)\n"
    "{\n"
    "    double L = c.original_length ? (double)c.original_length : (double)c.train_length, s = ctx->length / L;\n"
    "    return pow(c.base, -2.0 * k / c.d_head) / (c.factor != 0.0 ? c.factor : s > 1.0 ? s : 1.0);\n"
    "}\n"
    "/* what multiplies q and k after the rotation (YaRN's temperature); 1 here */\n"
    "BIASKIT_FP_NO_AMPLITUDE(@)\n"
    "\n"
    "BIASKIT_ROTARY_PLUGIN(@, @_CONSTANTS, .name = \"@\", .version = \"0.1.0\",\n"
    "                      .summary = \"RoPE with position interpolation (biaskit new-plugin --kind rotary)\",\n"
    "                      .reference = \"Chen et al., Extending Context Window of Large Language Models via \"\n"
    "                                   \"Positional Interpolation, 2023\")\n";

static const char rotary_readme[] =
    "# @ — a biaskit plugin (rotary)\n"
    "\n"
    "The template of `biaskit new-plugin --kind rotary`; edit `@.c` to make it yours. RoPE with position\n"
    "interpolation (Chen et al. 2023): pair k of q and k at position p turns by p · θ_k,\n"
    "\n"
    "    θ_k = base^(−2k/d_head) / s,     s = factor,   or with factor = 0:  s = max(1, length / L)\n"
    "\n"
    "where L is `original_length` (0: the training length) and `length` the sequence length of each call\n"
    "(the engine asks again whenever it changes). `factor = 1` is plain RoPE.\n"
    "\n"
    "`@.c` holds the options the formula reads (`@_CONSTANTS`), θ_k (`BIASKIT_FP_INV_FREQ`) and the amplitude\n"
    "that multiplies q and k after the rotation (`BIASKIT_FP_NO_AMPLITUDE`: 1; write `BIASKIT_FP_AMPLITUDE` for\n"
    "YaRN's temperature). See the comment of `<biaskit/formula_plugin.h>`.\n"
    "\n"
    "| option | type | default | meaning |\n"
    "|---|---|---|---|\n"
    "| `base` | float | 10000 | frequency base |\n"
    "| `factor` | float | 1 | s; 0 = dynamic |\n"
    "| `original_length` | int | 0 | L; 0 = the training length |\n"
    "\n"
    "## Build, check, use\n"
    "\n"
    "    cmake -S . -B build -DCMAKE_PREFIX_PATH=<biaskit install prefix>\n"
    "    cmake --build build\n"
    "    BIASKIT_PLUGIN_PATH=$PWD/build biaskit check @             # conformance: frequencies at every length\n"
    "    BIASKIT_PLUGIN_PATH=$PWD/build biaskit train @.toml       # C headers under /usr/include\n";

static const char views_c[] =
    "/* The biaskit plugin '@': leaky ReRoPE (edit the formulas below): RoPE for the pairs i - j < window,\n"
    " * and beyond the relative position window + (i - j - window) / k, as two position views the engine\n"
    " * merges exactly: the far pairs' query at i / k + window (1 - 1 / k), their key at j / k (k = 0: ReRoPE,\n"
    " * the query at window, the key at 0: min(i - j, window)). Written with <biaskit/formula_plugin.h>. */\n"
    "#include <biaskit/formula_plugin.h>\n"
    "\n"
    "/* C(name, kind, doc): options the formulas read as c.name */\n"
    "#define @_CONSTANTS(C)                                                                                     \\\n"
    "    C(base, BIASKIT_TP_REAL(10000, 2, 1e30), \"frequency base\")                                             \\\n"
    "    C(window, BIASKIT_TP_INT(16, 1, INT32_MAX), \"W: pairs closer than W keep RoPE\")                        \\\n"
    "    C(k, BIASKIT_TP_REAL(16, 0, 1e6), \"leak: beyond W the distance grows 1 / k as fast; 0 = capped at W\")\n"
    "\n"
    "BIASKIT_FP_TYPES(@, BIASKIT_TP_NO_PARAMS, @_CONSTANTS)\n"
    "\n"
    "/* plain RoPE's theta_k and amplitude 1 for both views */\n"
    "BIASKIT_FP_INV_FREQ(@) { return pow(c.base, -2.0 * k / c.d_head); }\n"
    "BIASKIT_FP_NO_AMPLITUDE(@)\n"
    "/* the far view: the pairs i - j >= window, the query at far_q(i), the key at far_k(j) */\n"
    "BIASKIT_FP_FAR_FROM(@) { return c.window; }\n"
    "BIASKIT_FP_FAR_Q(@) { return c.k > 0 ? (double)i / c.k + c.window * (1.0 - 1.0 / c.k) : (double)c.window; }\n"
    "BIASKIT_FP_FAR_K(@) { return c.k > 0 ? (double)j / c.k : 0.0; }\n"
    "\n"
    "BIASKIT_VIEWS_PLUGIN(@, @_CONSTANTS, .name = \"@\", .version = \"0.1.0\",\n"
    "                     .summary = \"leaky ReRoPE by two position views (biaskit new-plugin --kind views)\",\n"
    "                     .reference = \"Su, ReRoPE (Rectified Rotary Position Embeddings), 2023\")\n";

static const char views_readme[] =
    "# @ — a biaskit plugin (rotary with position views)\n"
    "\n"
    "The template of `biaskit new-plugin --kind views`; edit `@.c` to make it yours. Leaky ReRoPE (Su 2023):\n"
    "RoPE (θ_k = base^(−2k/d_head)) for the pairs whose distance d = i − j is below `window` W, and beyond it\n"
    "the relative position W + (d − W)/k (k = 0: ReRoPE, min(d, W)). The plugin gives two position views of\n"
    "the attention (`rotary_views`): [0, W) at the token indices, and [W, ∞) with the query at i/k + W(1 − 1/k)\n"
    "and the key at j/k; the engine runs one attention pass per view and merges them exactly by their\n"
    "log-sum-exps (one softmax over every key). Self-Extend and STRING are the same shape with other far\n"
    "positions.\n"
    "\n"
    "`@.c` holds the options (`@_CONSTANTS`), θ_k (`BIASKIT_FP_INV_FREQ`), the amplitude, the far view's first\n"
    "distance (`BIASKIT_FP_FAR_FROM`) and its query and key positions (`BIASKIT_FP_FAR_Q`, `BIASKIT_FP_FAR_K`).\n"
    "See the comment of `<biaskit/formula_plugin.h>`. The views need the rotary term alone in the attention of\n"
    "its layers and fp32 storage.\n"
    "\n"
    "| option | type | default | meaning |\n"
    "|---|---|---|---|\n"
    "| `base` | float | 10000 | frequency base |\n"
    "| `window` | int | 16 | W |\n"
    "| `k` | float | 16 | the leak; 0 = ReRoPE |\n"
    "\n"
    "## Build, check, use\n"
    "\n"
    "    cmake -S . -B build -DCMAKE_PREFIX_PATH=<biaskit install prefix>\n"
    "    cmake --build build\n"
    "    BIASKIT_PLUGIN_PATH=$PWD/build biaskit check @             # conformance: frequencies, the views\n"
    "    BIASKIT_PLUGIN_PATH=$PWD/build biaskit train @.toml       # C headers under /usr/include\n";

static const char cmakelists_host[] =
    "# The biaskit plugin '@', built against an installed biaskit SDK:\n"
    "#   cmake -S . -B build -DCMAKE_PREFIX_PATH=<biaskit install prefix> && cmake --build build\n"
    "# Host code only: the engine calls this plugin's hooks on the host (its kernels do the per-element work).\n"
    "cmake_minimum_required(VERSION 3.24)\n"
    "project(biaskit_@_plugin LANGUAGES C)\n"
    "find_package(biaskit 0.1 REQUIRED)\n"
    "biaskit_add_plugin(@ SOURCES @.c OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})\n"
    "target_link_libraries(biaskit_plugin_@ PRIVATE m)\n";

/* What each kind writes: the formula file, its README, the CMakeLists.txt, the term's extra option lines
 * in the experiment, and (table only) the CUDA twin. */
typedef struct kind {
    const char *name, *formula, *readme, *cmake, *cuda, *term_options;
} kind;

static const kind kinds[] = {
    {"table", formula_c, readme, cmakelists, formula_cu, ""},
    {"coordinate", coordinate_c, coordinate_readme, cmakelists_host, NULL, ""},
    {"mask", mask_c, mask_readme, cmakelists_host, NULL, "window = 16\nsinks = 4\n"},
    {"scale", scale_c, scale_readme, cmakelists_host, NULL, ""},
    {"rotary", rotary_c, rotary_readme, cmakelists_host, NULL, ""},
    {"views", views_c, views_readme, cmakelists_host, NULL, ""},
};

static int valid_name(const char *name)
{
    size_t n = strlen(name);
    if (n < 1 || n > MAX_NAME || name[0] < 'a' || name[0] > 'z')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') || name[i] == '_'))
            return 0;
    return 1;
}

/* A well-formed name whose generated code would not compile, with the reason; NULL for a good name.
 * The code only pastes NAME onto suffixes (NAME_params, NAME_ctx, NAME_tp_create, NAME_PARAMS), so C
 * and C++ keywords are fine (int_params). Two kinds of name are not:
 *  - the SDK's own prefix: 'biaskit' makes biaskit_tp_create, which the SDK declares; 'biaskit_...' is
 *    reserved with it (the SDK's names are biaskit_..., BIASKIT_... and bktp_..., the latter never a
 *    NAME_suffix of the template);
 *  - a lower-case object-like macro of the compiler or of the headers the code includes (GNU C predefines
 *    linux and unix, i386 on 32-bit x86; math.h defines math_errhandling, stdio.h stdin, stdout and
 *    stderr, which the SDK's init-rule messages use): the SDK's macros pass NAME
 *    through other macros, which expand it before pasting (linux_tp_... becomes 1_tp_...).
 * tests/test_ckpt_hostile.sh checks the macros against the compiler's own list and compiles the
 * borderline names. */
static const char *unusable_name(const char *name)
{
    static const char *const macros[] = {"linux", "unix", "i386", "math_errhandling", "stdin", "stdout", "stderr"};
    if (strcmp(name, "biaskit") == 0 || strncmp(name, "biaskit_", 8) == 0)
        return "names 'biaskit' and 'biaskit_...' are the SDK's own prefix (the generated code would declare "
               "NAME_tp_create beside the SDK's biaskit_tp_create and the like)";
    for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++)
        if (strcmp(name, macros[i]) == 0)
            return "it is a macro of the C compiler or of the C headers a plugin includes (GNU C: #define linux 1, "
                   "unix 1, i386 1; math.h: math_errhandling; stdio.h: stdin, stdout, stderr), which the SDK's macros would expand inside the "
                   "generated names";
    return NULL;
}

/* dir/file (with @ in `file` replaced by name) gets `text` with every @ replaced by name. */
static int write_file(const char *dir, const char *file, const char *name, const char *text, bk_error *err)
{
    char path[4200];
    const char *at = strchr(file, '@'); /* at most one @ in a file name */
    if (at)
        snprintf(path, sizeof path, "%s/%.*s%s%s", dir, (int)(at - file), file, name, at + 1);
    else
        snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    if (!f)
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    for (const char *c = text; *c; c++)
        if (*c == '@')
            fputs(name, f);
        else
            fputc(*c, f);
    if (fclose(f) != 0)
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    printf("  %s\n", path);
    return BK_OK;
}

int bk_cmd_new_plugin(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0}, {"dir", 1, 0}, {"kind", 1, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit new-plugin", &args, &err))
        return bk_report(&err);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    if (args.n_positional != 1) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit new-plugin: expected one plugin name; see 'biaskit new-plugin --help'");
        return bk_report(&err);
    }
    const char *name = args.positional[0];
    if (!valid_name(name)) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit new-plugin: '%s' is not a plugin name: expected a lowercase letter, "
                "then lowercase letters, digits or '_', at most %d characters (it is also the C prefix)", name,
                MAX_NAME);
        return bk_report(&err);
    }
    const char *why = unusable_name(name);
    if (why) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit new-plugin: '%s' cannot be a plugin name: %s; the code would not "
                "compile: pick another name", name, why);
        return bk_report(&err);
    }
    const char *kind_name = bk_args_get(&args, "kind");
    const kind *k = NULL;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(kind_name ? kind_name : "table", kinds[i].name) == 0)
            k = &kinds[i];
    if (!k) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit new-plugin: --kind '%s': expected table, coordinate, mask, scale, rotary or views "
                "(see 'biaskit new-plugin --help')", kind_name);
        return bk_report(&err);
    }
    const char *parent = bk_args_get(&args, "dir");
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s/%s", parent ? parent : ".", name) >= (int)sizeof dir) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit new-plugin: --dir '%s' is too long (with the plugin's name at most %zu "
                "bytes)", parent, sizeof dir - 1);
        return bk_report(&err);
    }
    struct stat st;
    if (parent && (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))) {
        bk_fail(&err, BK_ERR_IO, "--dir '%s' is not a directory", parent);
        return bk_report(&err);
    }
    if (mkdir(dir, 0777) != 0) {
        bk_fail(&err, BK_ERR_IO, "cannot create '%s': %s%s", dir, strerror(errno),
                errno == EEXIST ? " (new-plugin writes a new folder: pick another name or --dir)" : "");
        return bk_report(&err);
    }
    printf("new-plugin: writing %s/ (%s plugin)\n", dir, k->name);
    char toml[sizeof experiment + 256];
    snprintf(toml, sizeof toml, "%s%s", experiment, k->term_options);
    int rc = write_file(dir, "@.c", name, k->formula, &err);
    if (!rc && k->cuda)
        rc = write_file(dir, "@.cu", name, k->cuda, &err);
    if (!rc)
        rc = write_file(dir, "CMakeLists.txt", name, k->cmake, &err);
    if (!rc)
        rc = write_file(dir, "README.md", name, k->readme, &err);
    if (!rc)
        rc = write_file(dir, "@.toml", name, toml, &err);
    if (rc)
        return bk_report(&err);
    printf("next: cd %s && cmake -S . -B build -DCMAKE_PREFIX_PATH=<biaskit install prefix> && cmake --build build\n"
           "      BIASKIT_PLUGIN_PATH=$PWD/build biaskit check %s\n", dir, name);
    return 0;
}
