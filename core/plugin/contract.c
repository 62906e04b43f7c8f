/* The capability contract (plugin/contract.h): the rows and the validators. */
#include "plugin/contract.h"

#include "model/bias_math.h" /* BK_COORD_SLACK, bk_coord_u */

#include <math.h>
#include <stdio.h>
#include <string.h>

#define HOOK(field) {#field, offsetof(biaskit_plugin, field)}

static const bk_capability rows[] = {
    {BIASKIT_CAP_TABLE, "table", "a distance table T_h(d), mixed with the other tables of its stream",
     {"distance p(i) - p(j) on its stream", NULL}, {HOOK(table)}, {"table"}, {NULL, 0}, {HOOK(table_backward)},
     NULL, {{NULL, 0}}, NULL, 0},
    {BIASKIT_CAP_SEGMENT, "segment", "segments the tokens: defines the segment stream's positions",
     {"token ids (to segment them)", NULL}, {HOOK(segment)}, {"segment"}, {NULL, 0}, {{NULL, 0}}, NULL,
     {HOOK(segment)}, "segment()", 0},
    {BIASKIT_CAP_EMBED, "embed", "an embedding of the positions added at the input", {"absolute positions", NULL},
     {HOOK(embed)}, {"embed"}, {NULL, 0}, {HOOK(embed_backward)}, NULL,
     {HOOK(embed), HOOK(embed_backward), HOOK(embed_cuda), HOOK(embed_backward_cuda)}, "embed functions", 0},
    {BIASKIT_CAP_ROTARY, "rotary", "rotates q and k by position (RoPE and its scalings)",
     {"positions (rotating q and k)", NULL}, {HOOK(rotary_frequencies)}, {"rotary_frequencies or rotary_ctx"},
     HOOK(rotary_ctx), {{NULL, 0}}, NULL, {HOOK(rotary_frequencies), HOOK(rotary_ctx)}, NULL, 0},
    {BIASKIT_CAP_WEIGHT, "weight", "reserved by the SDK, not part of this ABI", {NULL, NULL}, {{NULL, 0}}, {NULL},
     {NULL, 0}, {{NULL, 0}}, NULL, {{NULL, 0}}, NULL, 1},
    {BIASKIT_CAP_COORDINATE, "coordinate", "a table over u(i, d) in [0, 1], interpolated (FIRE)",
     {"query position i", "a coordinate table over u(i, d) in [0, 1]"},
     {HOOK(table), HOOK(coordinate_points), HOOK(coordinate)},
     {"table (over the grid of u)", "coordinate_points", "coordinate"}, {NULL, 0},
     {HOOK(table_backward), HOOK(coordinate_backward)}, NULL,
     {HOOK(coordinate_points), HOOK(coordinate), HOOK(coordinate_backward)}, "coordinate functions", 0},
    {BIASKIT_CAP_MASK, "mask", "hides keys: a window, sinks, a distance cap", {"masks (-inf: window, sinks)", NULL},
     {HOOK(mask)}, {"mask"}, {NULL, 0}, {{NULL, 0}}, NULL, {HOOK(mask)}, "mask()", 0},
    {BIASKIT_CAP_SCALE, "scale", "a factor on q.k per head and query (log n, SSMax)",
     {"query position i", "a logit scale on q.k"}, {HOOK(scale)}, {"scale"}, {NULL, 0}, {HOOK(scale_backward)}, NULL,
     {HOOK(scale), HOOK(scale_backward)}, "scale functions", 0},
    {BIASKIT_CAP_CONTENT, "content", "a position stepped by each layer's input (FoX)",
     {"each layer's attention input x (a position stepped by the content)", NULL}, {HOOK(content)}, {"content"},
     {NULL, 0}, {HOOK(content_backward)}, "the loss reaches the layer's input x through the steps",
     {HOOK(content), HOOK(content_backward)}, "content functions", 0},
    {BIASKIT_CAP_COUNT, "count", "positions counted by gates on q.k, read from learned vectors (CoPE)",
     {"q and k (positions counted by gates on q.k)", NULL}, {HOOK(count), HOOK(count_vectors)},
     {"count", "count_vectors"}, {NULL, 0}, {HOOK(count_vectors_backward)}, NULL,
     {HOOK(count), HOOK(count_vectors), HOOK(count_vectors_backward)}, "count functions", 0},
};

const bk_capability *bk_capabilities(size_t *n)
{
    *n = sizeof rows / sizeof rows[0];
    return rows;
}

uint32_t bk_capabilities_known(void)
{
    uint32_t bits = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (!rows[i].reserved)
            bits |= rows[i].bit;
    return bits;
}

int bk_hook_present(const biaskit_plugin *d, const bk_hook *h)
{
    if (!h->name || h->offset + sizeof(void (*)(void)) > d->struct_size)
        return 0;
    void (*fn)(void);
    memcpy(&fn, (const char *)d + h->offset, sizeof fn);
    return fn != NULL;
}

int64_t bk_contract_first_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return (int64_t)i;
    return -1;
}

int bk_contract_points(int32_t points, char *why, size_t size)
{
    if (points >= 2 && points <= BK_CONTRACT_POINTS_MAX)
        return BK_CONTRACT_OK;
    snprintf(why, size, "coordinate_points() returned %d, expected 2 .. %d grid points of u in [0, 1]", (int)points,
             BK_CONTRACT_POINTS_MAX);
    return BK_CONTRACT_BAD_VALUE;
}

int bk_contract_coordinate(const float *phi, int32_t D, const float *rscale, int32_t R, double *max_u, int32_t *max_at,
                           char *why, size_t size)
{
    for (int32_t d = 0; d < D; d++) {
        if (!isfinite(phi[d]) || phi[d] < 0.0f) {
            snprintf(why, size, "phi[%d] = %g (expected finite and >= 0)", (int)d, (double)phi[d]);
            return BK_CONTRACT_BAD_VALUE;
        }
        if (d > 0 && phi[d] < phi[d - 1]) {
            snprintf(why, size,
                     "phi decreases: phi[%d] = %.9g < phi[%d] = %.9g (phi must not decrease with the distance, so "
                     "that u(i, i) is the largest u of row i)",
                     (int)d, (double)phi[d], (int)d - 1, (double)phi[d - 1]);
            return BK_CONTRACT_BAD_VALUE;
        }
    }
    for (int32_t i = 0; i < R; i++)
        if (!isfinite(rscale[i]) || rscale[i] < 0.0f) {
            snprintf(why, size, "rscale[%d] = %g (expected finite and >= 0)", (int)i, (double)rscale[i]);
            return BK_CONTRACT_BAD_VALUE;
        }
    double top = 0.0;
    int32_t at = 0;
    for (int32_t i = 0; i < D && i < R; i++) {
        const float u = bk_coord_u(phi[i], rscale[i]); /* the largest u of row i (phi does not decrease) */
        if (u > 1.0f + BK_COORD_SLACK) {
            snprintf(why, size,
                     "u(i = %d, d = %d) = phi[%d] * rscale[%d] = %.9g (%.9g * %.9g) > 1 + %g: the table is given over "
                     "u in [0, 1] only",
                     (int)i, (int)i, (int)i, (int)i, (double)u, (double)phi[i], (double)rscale[i],
                     (double)BK_COORD_SLACK);
            return BK_CONTRACT_OUT_OF_RANGE;
        }
        if ((double)u > top) {
            top = u;
            at = i;
        }
    }
    if (max_u)
        *max_u = top;
    if (max_at)
        *max_at = at;
    return BK_CONTRACT_OK;
}

int bk_contract_mask(const biaskit_mask *m, char *why, size_t size)
{
    if (m->window >= 1 && m->sinks >= 0 && m->distance_cap >= 0)
        return BK_CONTRACT_OK;
    snprintf(why, size,
             "window %d, sinks %d, distance_cap %d: expected window >= 1 (a query always sees itself, so no row is "
             "left without a key), sinks >= 0 and distance_cap >= 0",
             (int)m->window, (int)m->sinks, (int)m->distance_cap);
    return BK_CONTRACT_BAD_VALUE;
}

int bk_contract_count(const biaskit_count *c, char *why, size_t size)
{
    if (c->points >= 2 && c->points <= BK_CONTRACT_POINTS_MAX && isfinite(c->pos_scale))
        return BK_CONTRACT_OK;
    snprintf(why, size, "%d position vectors and pos_scale %g: expected 2 .. %d vectors and a finite scale",
             (int)c->points, (double)c->pos_scale, BK_CONTRACT_POINTS_MAX);
    return BK_CONTRACT_BAD_VALUE;
}

int bk_contract_rotary_decay(const float *zeta, int32_t half, float scale, char *why, size_t size)
{
    for (int32_t k = 0; k < half; k++)
        if (!isfinite(zeta[k]) || !(zeta[k] > 0.0f)) {
            snprintf(why, size, "zeta %g for pair %d, expected a finite number > 0", (double)zeta[k], (int)k);
            return BK_CONTRACT_BAD_VALUE;
        }
    if (!isfinite(scale) || !(scale > 0.0f)) {
        snprintf(why, size, "the scale %g, expected a finite number > 0", (double)scale);
        return BK_CONTRACT_BAD_VALUE;
    }
    return BK_CONTRACT_OK;
}

int bk_contract_rotary_views(const biaskit_rotary_view *views, int32_t n, int32_t length, char *why, size_t size)
{
    if (n < 0 || n > BIASKIT_MAX_ROTARY_VIEWS) {
        snprintf(why, size, "%d views, expected 0 .. %d", (int)n, BIASKIT_MAX_ROTARY_VIEWS);
        return BK_CONTRACT_BAD_VALUE;
    }
    int32_t from = 0;
    for (int32_t v = 0; v < n; v++) {
        const biaskit_rotary_view *w = &views[v];
        const int last = v == n - 1;
        if (w->min_distance != from || (last ? w->max_distance != 0 : w->max_distance <= w->min_distance)) {
            snprintf(why, size,
                     "view %d owns distances [%d, %d) (0: unbounded), expected [%d, ...): the views tile [0, inf) "
                     "in order, each bounded one non-empty and only the last unbounded",
                     (int)v, (int)w->min_distance, (int)w->max_distance, (int)from);
            return BK_CONTRACT_BAD_VALUE;
        }
        from = w->max_distance;
        for (int32_t t = 0; t < length; t++)
            if (!isfinite(w->q_pos[t]) || !isfinite(w->k_pos[t])) {
                snprintf(why, size, "view %d: the %s position of token %d is %g, expected a finite number", (int)v,
                         isfinite(w->q_pos[t]) ? "key" : "query", (int)t,
                         (double)(isfinite(w->q_pos[t]) ? w->k_pos[t] : w->q_pos[t]));
                return BK_CONTRACT_BAD_VALUE;
            }
    }
    return BK_CONTRACT_OK;
}

int bk_contract_rotary(const float *inv_freq, int32_t half, float amplitude, char *why, size_t size)
{
    for (int32_t k = 0; k < half; k++)
        if (!isfinite(inv_freq[k])) {
            snprintf(why, size, "inverse frequency %d = %g, expected a finite number", (int)k, (double)inv_freq[k]);
            return BK_CONTRACT_BAD_VALUE;
        }
    if (!isfinite(amplitude) || !(amplitude > 0.0f)) {
        snprintf(why, size,
                 "the amplitude %g, expected a finite number > 0 (it multiplies q and k after the rotation: 0 would "
                 "erase them, a negative one flip them)",
                 (double)amplitude);
        return BK_CONTRACT_BAD_VALUE;
    }
    return BK_CONTRACT_OK;
}
