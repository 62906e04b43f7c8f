/* `biaskit check`: the conformance checks a plugin author runs on a plugin before anyone trains
 * with it. The plugin is loaded through a registry, then every check reports one item (PASS, FAIL or
 * SKIP with a one-line text) through a callback; nothing is printed and nothing exits here.
 *
 * What is checked (docs: sdk/README.md, "6. Check it"):
 *   load, descriptor, capabilities, options    the descriptor, without calling the plugin
 *   create, parameters                         create() with the default configuration (+ --set)
 *   geometry, option:NAME                      create() with bad geometries and bad option values:
 *                                              each probe must succeed (then its outputs must be
 *                                              finite) or fail with a message, never crash
 *   table-finite, table-prefix, table-random   finite tables up to max_distances; T[h][d] does not
 *                                              depend on the number of distances asked for
 *   long-range, shape                          the table up to --max-distance (default 2^20) at
 *                                              initial, random and corner parameters: finite, no
 *                                              poles, |T| bounded at the initial ones; each
 *                                              head decreasing, increasing (WARN) or neither
 *                                              (check/longrange.c)
 *   long-range-coordinate, long-range-scale, long-range-mask, long-range-rotary, long-range-content
 *                                              the ABI 2 capabilities the same way: coordinate() and
 *                                              the grid at length --max-distance, scale() bounded,
 *                                              the mask independent of the length, rotary_ctx far out,
 *                                              content() steps finite and >= 0 on large inputs
 *   table-backward-adds, table-gradient        table_backward adds (+=) and matches central finite
 *                                              differences of L = sum dtable * T computed in float64
 *                                              (kinks stepped around: check/gradient.c); where L
 *                                              disagrees, each table entry T[h][d] alone decides
 *                                              (float rounding of large entries drowns small terms)
 *   params                                     with --params: the table finite up to max_distances
 *                                              at the given parameters (after param_project)
 *   embed, embed-backward-adds, embed-gradient the same for the embedding
 *   coordinate-points, grid-finite, grid-random, coordinate
 *                                              COORDINATE: the grid of u, its table, and coordinate()
 *                                              at the training length and far beyond (check/abi2.c)
 *   grid-backward-adds, grid-gradient, coordinate-backward-adds, coordinate-gradient
 *                                              the grid's table_backward and coordinate_backward
 *   scale, scale-backward-adds, scale-gradient SCALE: scale() finite far beyond; scale_backward
 *   content, content-backward-adds, content-gradient, content-backward-adds-x, content-gradient-x
 *                                              CONTENT: content() finite, >= 0, the same bits twice;
 *                                              content_backward into theta and into x (+=, central
 *                                              differences of L = sum dsteps * steps)
 *   mask                                       MASK: window >= 1, sinks >= 0, distance_cap >= 0
 *   project, determinism, segment, rotary, rotary-ctx
 *                                              idempotent projection into range; bit-identical
 *                                              repeated calls; segment and rotary contracts, and
 *                                              rotary_ctx (finite, amplitude > 0, unscaled below L)
 *   param-info                                 param_info(): sound bounds, a terminated text, initial,
 *                                              random and wild projected parameters inside the bounds
 *   cuda-table, cuda-backward                  the plugin's CUDA code against its host code (SKIP
 *                                              without a GPU, with the reason)
 *   cuda-table-emulated, cuda-backward-emulated, cuda-device-branch
 *                                              a table_plugin.h plugin's CUDA kernels run on the
 *                                              host (same grid and order) against its host code,
 *                                              GPU or not; __CUDA_ARCH__ in its source: WARN
 *   remaining                                  SKIP: create() with the default configuration failed,
 *                                              so nothing that needs an instance ran
 * Checks of capabilities the plugin does not declare are not reported.
 *
 * Every call into the plugin runs in a fork()ed child process, so a crash (signal), a hang (time
 * limit) or an exit() inside the plugin is reported as a FAIL of the check that ran it and the
 * remaining checks go on. Loading too: a child loads the plugin first (dlopen and the library's
 * constructors, the entry point, the descriptor read and validated), within the time limit; only when
 * that child succeeded is the plugin loaded into the registry here. A load that crashes, exits or
 * hangs is the one FAIL item "load", naming the file, the stage and what happened.
 *
 * The files of core/check/: harness.c (report lines, child processes), descriptor.c (the descriptor,
 * through the loader's own validator, plugin/descriptor.h), instance.c (instances and wrapped
 * calls), contracts.c (create, tables, project, param-info, determinism, segment, embed, rotary), abi2.c
 * (coordinate, scale, mask, rotary_ctx), gradient.c (finite differences), probes.c (bad options and
 * geometries), cuda.c, and check.c (this API). Every call of an ABI 2 hook gets a biaskit_context built
 * as the engine builds it. */
#ifndef BK_CHECK_CHECK_H
#define BK_CHECK_CHECK_H

#include "plugin/host.h"
#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

/* WARN: something that may be intended but is worth a look (a head that increases with distance);
 * it counts as neither passed nor failed, and does not change the exit status. */
typedef enum bk_check_status { BK_CHECK_PASS = 0, BK_CHECK_FAIL = 1, BK_CHECK_SKIP = 2, BK_CHECK_WARN = 3 } bk_check_status;

/* The long-range probe (check/longrange.c): |T(d)| beyond this x max(1, d / 4096) at the initial
 * parameters fails (1e6 up to distance 4096; beyond, growth up to linear: 244 per token). */
#define BK_CHECK_LONG_RANGE_BOUND 1e6

/* The default relative tolerance of the gradient checks (--tolerance). */
#define BK_CHECK_TOLERANCE 1e-3

/* One reported check. The strings are valid during the callback only. */
typedef struct bk_check_item {
    bk_check_status status;
    const char *id;   /* stable name of the check ("table-gradient", "option:slopes"), for tests and tools */
    const char *text; /* one line for a person: what was checked, with tolerances, or what went wrong */
} bk_check_item;

typedef void (*bk_check_report_fn)(void *ctx, const bk_check_item *item);

typedef struct bk_check_options {
    /* The model the plugin is created for: d_head = dim / heads. */
    int32_t layers, heads, dim, vocab, length;
    /* Plugin options as "KEY=VALUE", read as TOML values like the experiment file's [[term]] keys. */
    const char *const *sets;
    size_t n_sets;
    int32_t max_distances; /* longest table checked for finiteness; longest length of the ABI 2 checks */
    int32_t max_distance;  /* the long-range probe: the table up to this distance (one call, max + 1) */
    int allow_increasing;  /* a head that increases with distance is a PASS of "shape", not a WARN */
    int n_seeds;           /* random parameter sets for the finiteness and gradient checks */
    uint64_t seed;         /* base of every random choice: the same seed gives the same report */
    unsigned timeout_s;    /* time limit of each child process (a hung plugin fails its check) */
    double tolerance;      /* relative tolerance of the gradient checks (> 0, finite; default
                            * BK_CHECK_TOLERANCE) */
    const float *params;   /* NULL, or n_params values (exactly param_count() of the default
                            * configuration, else a usage error): the gradient checks (and the table's
                            * finiteness there) run at these, after param_project, in place of the
                            * initial set */
    int64_t n_params;
} bk_check_options;

/* 2 layers, 12 heads, dim 192 (d_head 16), vocab 256, length 128; 65536 distances; long-range probe
 * up to 1048576; 3 seeds; 60 s; tolerance 1e-3; no given parameters. */
void bk_check_options_default(bk_check_options *opt);

typedef struct bk_check_counts {
    int passed, failed, skipped, warned;
} bk_check_counts;

/* Load `name_or_path` into `reg` (after a child loaded it, see above) and run every check, reporting
 * each item through `report` and counting them in *counts. A plugin that does not load is one FAIL
 * item ("load") and nothing else.
 * Returns BK_OK when the checks ran (whatever they found); BK_ERR_USAGE when the options are wrong
 * (a geometry the engine would refuse, a --set value the plugin's declarations refuse), with the
 * message in err; another code when the checks cannot run (no fork(), out of memory). */
int bk_check_plugin(bk_registry *reg, const char *name_or_path, const bk_check_options *opt,
                    bk_check_report_fn report, void *ctx, bk_check_counts *counts, bk_error *err);

/* "PASS", "FAIL", "SKIP", "WARN". */
const char *bk_check_status_name(bk_check_status status);

#endif
