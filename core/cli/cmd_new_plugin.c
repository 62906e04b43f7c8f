/* biaskit new-plugin NAME [--dir D]: a ready folder for a formula-first plugin (sdk/README.md,
 * "Formula-first plugins"): the formula file, its CUDA twin, a CMakeLists.txt against the installed
 * SDK, a README with the formula and the commands, and an experiment that uses it. It builds and
 * passes `biaskit check` as written (tests/test_install.sh); the author then edits the formula. */
#define _POSIX_C_SOURCE 200809L
#include "cli/args.h"
#include "cli/commands.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char help[] =
    "usage: biaskit new-plugin NAME [--dir D]\n\n"
    "Writes D/NAME/ (D: the working directory by default), a formula-first plugin that builds against\n"
    "the installed SDK and passes `biaskit check` unchanged: a learnable per-head linear bias\n"
    "T_h(d) = -m_h d, m_h starting at ALiBi's slopes, to edit into your own formula.\n\n"
    "  NAME.c           the parameters, the formula T and its derivative (<biaskit/table_plugin.h>)\n"
    "  NAME.cu          #include \"NAME.c\": the CUDA kernels, generated from the same formula\n"
    "  CMakeLists.txt   find_package(biaskit) + biaskit_add_plugin (CUDA when nvcc is found)\n"
    "  README.md        the formula and the commands to build, check and use it\n"
    "  NAME.toml        an experiment with one NAME term\n\n"
    "NAME: a lowercase letter, then lowercase letters, digits or '_' (at most 40): it is the plugin's\n"
    "name and the C prefix of its code, so not 'biaskit' nor 'biaskit_...' (the SDK's prefix), nor a\n"
    "macro of the compiler or the C headers (linux, unix, i386, math_errhandling). D/NAME must not\n"
    "exist yet.\n\n"
    "  --dir D          the folder to create NAME/ in\n";

#define MAX_NAME 40

/* The files, with @ standing for the plugin's name. */
static const char formula_c[] =
    "/* The biaskit plugin '@': T_h(d) = -m_h d, one learnable slope per head (edit the formula below).\n"
    " * Written with <biaskit/table_plugin.h>: the SDK generates the options, the parameter hooks, the host\n"
    " * table and gradient, the CUDA kernels (through @.cu) and the descriptor. */\n"
    "#include <biaskit/table_plugin.h>\n"
    "\n"
    "/* X(name, PER_HEAD | SCALAR, init rule, lower, upper, doc): the slopes start at ALiBi's 2^(-8h/H) and\n"
    " * stay >= 0 after every optimizer step. Options: slope = [..] (1 value or one per head), learnable. */\n"
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
    "    T_h(d) = −m_h · d,     ∂T_h(d)/∂m_h = −d,     m_h starting at ALiBi's slopes 2^(−8h/H), kept ≥ 0\n"
    "\n"
    "`@.c` holds the parameters (`@_PARAMS`), the formula (`BIASKIT_TP_TABLE`) and its derivative\n"
    "(`BIASKIT_TP_GRADIENT`); `@.cu` compiles the same file as CUDA kernels. See the biaskit SDK guide,\n"
    "`sdk/README.md`, \"Formula-first plugins\", for the init rules, constants and frozen parameters.\n"
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
 *    linux and unix, i386 on 32-bit x86; math.h defines math_errhandling): the SDK's macros pass NAME
 *    through other macros, which expand it before pasting (linux_tp_... becomes 1_tp_...).
 * tests/test_ckpt_hostile.sh checks the macros against the compiler's own list and compiles the
 * borderline names. */
static const char *unusable_name(const char *name)
{
    static const char *const macros[] = {"linux", "unix", "i386", "math_errhandling"};
    if (strcmp(name, "biaskit") == 0 || strncmp(name, "biaskit_", 8) == 0)
        return "names 'biaskit' and 'biaskit_...' are the SDK's own prefix (the generated code would declare "
               "NAME_tp_create beside the SDK's biaskit_tp_create and the like)";
    for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++)
        if (strcmp(name, macros[i]) == 0)
            return "it is a macro of the C compiler or of the C headers a plugin includes (GNU C: #define linux 1, "
                   "unix 1, i386 1; math.h: math_errhandling), which the SDK's macros would expand inside the "
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
    static const bk_arg_spec specs[] = {{"help", 0, 0}, {"dir", 1, 0}};
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
    const char *parent = bk_args_get(&args, "dir");
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s/%s", parent ? parent : ".", name) >= (int)sizeof dir) {
        bk_fail(&err, BK_ERR_USAGE, "biaskit new-plugin: --dir '%s' is too long", parent);
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
    printf("new-plugin: writing %s/\n", dir);
    int rc = write_file(dir, "@.c", name, formula_c, &err);
    if (!rc)
        rc = write_file(dir, "@.cu", name, formula_cu, &err);
    if (!rc)
        rc = write_file(dir, "CMakeLists.txt", name, cmakelists, &err);
    if (!rc)
        rc = write_file(dir, "README.md", name, readme, &err);
    if (!rc)
        rc = write_file(dir, "@.toml", name, experiment, &err);
    if (rc)
        return bk_report(&err);
    printf("next: cd %s && cmake -S . -B build -DCMAKE_PREFIX_PATH=<biaskit install prefix> && cmake --build build\n"
           "      BIASKIT_PLUGIN_PATH=$PWD/build biaskit check %s\n", dir, name);
    return 0;
}
