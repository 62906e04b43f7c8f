/* The capability contract: one row per BIASKIT_CAP_* bit (plugin.h) with the hooks it requires, the
 * hooks it needs when the plugin has parameters, the hooks that belong to it, what its terms read from
 * the engine (`biaskit plugins` prints it) and a one-line description; and the validators of what a
 * plugin's hooks return. The descriptor check (plugin/descriptor.c), the engine (core/bias) and
 * `biaskit check` (core/check) all read these: a rule is written here once, and the engine and check
 * cannot disagree about it. Each validator returns 0 when the values keep the contract, else 1 with a
 * phrase in why[size] naming the first value that breaks it; the caller says who gave it (the engine:
 * the term, plugin, layer and step; check: the call and its inputs).
 *
 * Adding a capability: its bit in sdk/include/biaskit/plugin.h, a row below (contract.c), a validator
 * here if it returns values, and the places that compute it (docs/design.md, "Where things live"). */
#ifndef BK_PLUGIN_CONTRACT_H
#define BK_PLUGIN_CONTRACT_H

#include <biaskit/plugin.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* A hook of the descriptor: its name as messages write it and where it lies in biaskit_plugin. */
typedef struct bk_hook {
    const char *name; /* NULL ends a list */
    size_t offset;
} bk_hook;

/* 1 when the descriptor has hook `h` (inside its struct_size, not NULL). */
int bk_hook_present(const biaskit_plugin *d, const bk_hook *h);

enum { BK_CAP_HOOKS = 4 };

typedef struct bk_capability {
    uint32_t bit;
    const char *name;                      /* as `plugins`, `config` and messages write it: "coordinate" */
    const char *summary;                   /* one line: what a term of it does */
    const char *reads[2];                  /* what its terms read from the engine (`plugins`, "needs:") */
    bk_hook required[BK_CAP_HOOKS];        /* each must be there (an alternative: required_or) */
    const char *required_text[BK_CAP_HOOKS]; /* how the refusal names each required hook */
    bk_hook required_or;                   /* rotary: rotary_frequencies or rotary_ctx */
    bk_hook with_params[BK_CAP_HOOKS];     /* needed to train: when the plugin has parameters (always, with
                                            * train_why: the loss reaches the engine through them) */
    const char *train_why;                 /* why they are needed without parameters too, or NULL */
    bk_hook own[BK_CAP_HOOKS];             /* present without the bit: a flawed descriptor */
    const char *own_text;                  /* how that message names them: "coordinate functions" */
    int reserved;                          /* declared by the SDK, not part of this ABI (WEIGHT) */
} bk_capability;

/* The rows, in the order `plugins` lists capabilities; *n receives their number. */
const bk_capability *bk_capabilities(size_t *n);
/* Every bit of a row that is not reserved. */
uint32_t bk_capabilities_known(void);

/* ---- validators of what the hooks return ------------------------------------------------------- */

/* What a validator found: the values keep the contract, a value is wrong (why: "phi[3] = nan (expected
 * ...)", the engine writes "gave " before it), or a coordinate leaves [0, 1] (the engine writes "puts the
 * coordinate outside [0, 1]: " before it). */
enum { BK_CONTRACT_OK = 0, BK_CONTRACT_BAD_VALUE = 1, BK_CONTRACT_OUT_OF_RANGE = 2 };

/* The most grid points of a coordinate table and position vectors of a counting term. */
#define BK_CONTRACT_POINTS_MAX 1048576

/* coordinate_points(): 2 .. BK_CONTRACT_POINTS_MAX grid points of u in [0, 1]. */
int bk_contract_points(int32_t points, char *why, size_t size);

/* The first index of x[0 .. n) that is not finite, or -1: tables, grids, logit scales and position
 * vectors must be finite (the caller names the value by its layout). */
int64_t bk_contract_first_nonfinite(const float *x, size_t n);

/* coordinate(): phi[0 .. D) finite, >= 0, never decreasing; rscale[0 .. R) finite, >= 0; and
 * u(i, i) = phi[i] rscale[i] <= 1 + BK_COORD_SLACK (in float, as the attention forms it) for i < min(D, R).
 * max_u, max_at (may be NULL) receive the largest u(i, i) and its i. */
int bk_contract_coordinate(const float *phi, int32_t D, const float *rscale, int32_t R, double *max_u, int32_t *max_at,
                           char *why, size_t size);

/* content(): each step finite and >= 0 (the position may not go back). */
static inline int bk_contract_step_ok(float a)
{
    return isfinite(a) && a >= 0.0f;
}

/* mask(): window >= 1, sinks >= 0, distance_cap >= 0. */
int bk_contract_mask(const biaskit_mask *m, char *why, size_t size);

/* count(): 2 .. BK_CONTRACT_POINTS_MAX position vectors and a finite pos_scale. */
int bk_contract_count(const biaskit_count *c, char *why, size_t size);

/* rotary_ctx(): half finite inverse frequencies and a finite amplitude > 0. */
int bk_contract_rotary(const float *inv_freq, int32_t half, float amplitude, char *why, size_t size);

/* rotary_decay(): half finite zeta_k > 0 and a finite scale > 0. */
int bk_contract_rotary_decay(const float *zeta, int32_t half, float scale, char *why, size_t size);

/* rotary_views() for a call of `length` tokens: 0 .. BIASKIT_MAX_ROTARY_VIEWS views whose distance ranges
 * tile [0, inf) in order (the first from 0, each from the end of the one before, every bounded one
 * non-empty, the last unbounded), every position finite. */
int bk_contract_rotary_views(const biaskit_rotary_view *views, int32_t n, int32_t length, char *why, size_t size);

#endif
