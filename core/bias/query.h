/* The ABI 2 terms of a model during training and evaluation (plugin.h, "Beyond distance tables"): the
 * coordinate table (FIRE), the mask (window and sinks) and the logit scale (log n, SSMax), at most one of
 * each, all on the token index. For every layer they become the small arrays the attention reads
 * (cpu/attention.h, bk_attention_bias), and the counting term's position vectors (CoPE: points x d_head
 * per copy, plugin.h BIASKIT_CAP_COUNT; the CPU attention and a device's materialized attention read them,
 * a device's fused attention is refused): the grid F_h(u_g) (H x points), the two factors of the coordinate
 * phi[d] (distances) and rscale[i] (distances rows), the scale s_h(i) (H x distances), and the window and
 * sinks. The way back: the attention's dgrid, dphi, drscale and dscale of one layer go to the plugin's
 * table_backward, coordinate_backward and scale_backward, which add into the term's dtheta.
 *
 * Every array is computed by the plugin's host functions (they are O(points + distances), not T x T) and
 * checked: grid, phi, rscale and scale finite; phi >= 0 and non-decreasing; rscale >= 0; and the
 * coordinate inside [0, 1] (u(i, i) = phi[i] rscale[i] <= 1, the largest u of row i since phi does not
 * decrease) — a message names the term, its plugin, the layer and the first bad index. On a device
 * backend the arrays are uploaded after they are computed, and the gradients downloaded before the
 * plugin's backward (a few KiB per layer and step).
 *
 * The rows are computed for i < distances (the longest sequence of the call), so one forward serves every
 * evaluation length up to it: none of these values depends on the length of the sequence. */
#ifndef BK_QUERY_H
#define BK_QUERY_H

#include "bias/terms.h"
#include "cpu/attention.h"
#include "model/backend.h"

/* The largest grid a coordinate term may ask for (coordinate_points()). */

typedef struct bk_query {
    const bk_term_set *set;
    bk_backend *be; /* NULL or the CPU: host memory, nothing copied */
    int n_layers;
    int32_t n_heads;
    int32_t points;     /* the coordinate term's grid, else 0 */
    int32_t distances;  /* of the last forward */
    int32_t capacity;   /* distances the arrays hold */
    biaskit_mask mask;  /* of the last forward; window 0 without a masking term */
    /* per copy of the coordinate term (grid, phi, rscale) and of the scale term (scale), on the host ... */
    float *grid_h, *phi_h, *rscale_h, *scale_h;
    /* ... and in the backend's memory (the same pointers on the CPU) */
    float *grid, *phi, *rscale, *scale;
    /* one layer's gradients in the backend's memory, and their host copies on a device */
    float *dgrid, *dphi, *drscale, *dscale;
    float *dgrid_h, *dphi_h, *drscale_h, *dscale_h;
    /* the counting term (CoPE): its layout, its position vectors per copy (points x d_head) on the host and
     * in the backend's memory, and one layer's gradient */
    biaskit_count count;
    float *cope_h, *cope, *dcope_h, *dcope;
} bk_query;

/* Set up for `set` (which must outlive it); asks the coordinate term for its grid size. */
int bk_query_init(bk_query *q, const bk_term_set *set, int n_layers, bk_error *err);
void bk_query_free(bk_query *q);

/* 1 when the set has a coordinate, mask, scale or counting term. */
int bk_query_active(const bk_query *q);

/* Compute on `be` from now on (NULL or the CPU: host memory). */
int bk_query_set_backend(bk_query *q, bk_backend *be, bk_error *err);

/* Every layer's arrays for rows and distances 0 .. distances - 1 from the current parameters; `training`
 * and `step` go to the plugins' context and the messages; check = 0 skips the value checks. */
int bk_query_forward(bk_query *q, int32_t distances, int training, int64_t step, int check, bk_error *err);

/* The forward fields of the attention's bias for `layer` (grid, points, phi, rscale, window, sinks, scale,
 * cope, cope_points, cope_scale). */
void bk_query_attention(const bk_query *q, int layer, bk_attention_bias *ab);

/* Before the attention backward of `layer`: zeroes the layer's gradients and points ab's dgrid, dphi,
 * drscale and dscale at them (only for terms with parameters). */
int bk_query_backward_begin(bk_query *q, int layer, bk_attention_bias *ab, bk_error *err);

/* After it: the plugins' backwards add the layer's gradients into dtheta[t] (per term, host, n_copies x
 * n_params). */
int bk_query_backward(bk_query *q, int layer, float *const *dtheta, int training, int64_t step, bk_error *err);

#endif
