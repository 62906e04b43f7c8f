/* Causal multi-head self-attention with additive distance-table biases, on the CPU in fp32.
 *
 * For batch row b, head h, query i and key j <= i (docs/design.md §2):
 *     s[i][j] = (q_i . k_j) / sqrt(hd) + sum over streams s of table_s[h][p_s(i) - p_s(j)]
 *     P = softmax_j(s) over j <= i;  out_i = sum_j P[i][j] v_j
 * Terms on one stream were already mixed into one table per (layer, stream) (bias/mix.h); streams
 * add. The T x T bias is never materialised: the kernels read the small tables.
 *
 * Layouts (llm.c): qkv is (B, T, 3C) with row t = [q | k | v], head h owning columns h*hd .. h*hd+hd-1
 * of each third; out and dout are (B, T, C); hd = C / H.
 *
 * Work is split over (b, h) with OpenMP; each task walks the queries in blocks of rows and uses
 * OpenBLAS for the q.k and P.v products of a block, so only the causal half is computed and the
 * scratch is a block of rows, not a T x T matrix, when `probs` is NULL (evaluation at long lengths).
 *
 * ABI 2 terms (the coordinate table, the mask, the logit scale; fields below): with a mask, a block of
 * queries computes only the keys some of its rows see (the window and the sinks), so the cost per
 * query grows with the window, not with T, and so does the scratch of forward-only evaluation
 * (BLOCK x (sinks + window + BLOCK) floats per thread); masked scores are exactly -inf (probability
 * exactly 0) and get no gradient; the terms of masked pairs (tables, phi) are never read. A mask that
 * hides no causal pair (sinks + window >= T) is no mask: the call gives the unmasked bits. A call
 * without any ABI 2 term runs the ABI 1 arithmetic, operation for operation.
 *
 * Determinism: results do not depend on the number of threads. The table gradient is reduced
 * along diagonals per (b, h) into scratch and then summed over b in a fixed order; dgrid, dphi,
 * drscale and dscale likewise (per (b, h) slices in double, summed in a fixed order); dcpos per (b, h)
 * in double, in key order. */
#ifndef BK_CPU_ATTENTION_H
#define BK_CPU_ATTENTION_H

#include "config/experiment.h"
#include "model/score_terms.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct bk_attention_bias {
    /* table[s]: H x distances floats for stream s, or NULL when no term uses stream s. */
    const float *table[BK_STREAM_COUNT];
    /* positions[s]: B x T position of each token on stream s (non-decreasing along t); NULL means
     * the token index t. Needed for every stream whose table is set. */
    const int32_t *positions[BK_STREAM_COUNT];
    /* Row length of the tables (and of phi): every p_s(i) - p_s(j) of a visible pair must be < distances
     * (with a window and no sinks, the pairs i - j < window only; else every j <= i). */
    int32_t distances;
    /* span[s]: 1 + the largest p_s(i) - p_s(j), j <= i, in the batch (the table gradient is zero
     * beyond it), or 0 when not known (then distances). The CPU computes its own; the device
     * attention reads it to size its table-gradient work (the model sets it from the host positions). */
    int32_t span[BK_STREAM_COUNT];

    /* --- ABI 2 terms (model/bias_math.h; all on the token index i, j and d = i - j; each absent when
     * its pointer is NULL / window is 0) --- */
    /* Coordinate table: score += grid[h * points + .] interpolated at u = phi[d] * rscale[i]. */
    const float *grid;   /* H x points */
    int32_t points;      /* >= 2 */
    const float *phi;    /* distances floats, >= 0, non-decreasing */
    const float *rscale; /* T floats (per query index, the same for every batch row), phi[i] * rscale[i] <= 1 */
    /* Mask: key j <= i is visible to query i when i - j < window or j < sinks (window 0: no mask;
     * window >= 0 and sinks >= 0, else BK_ERR_INVALID). */
    int32_t window, sinks;
    /* Logit scale: score = scale[h * T + i] * q.k / sqrt(hd) + bias (NULL: 1). */
    const float *scale;

    /* Content position (BIASKIT_CAP_CONTENT, bias/content.h): score += cpos[b][h][j] - cpos[b][h][i], i.e.
     * -(P_h(i) - P_h(j)) for the position P of each (batch row, head), B x H x T floats, non-decreasing
     * along t (NULL: none). */
    const float *cpos;
    /* Counted positions (BIASKIT_CAP_COUNT, CoPE; model/bias_math.h): score += cope_scale * the
     * interpolation of q_i . cope[k] (points vectors of hd floats, shared by the heads) at p_ij =
     * min(sum over the visible keys t in [j, i] of sigmoid(q_i . k_t / sqrt(hd)), points - 1). NULL: none. */
    const float *cope;
    int32_t cope_points;
    float cope_scale;

    /* Backward outputs of the ABI 2 terms (+=; each NULL when not wanted): dgrid (H x points),
     * dphi (distances), drscale (T), dscale (H x T), each summed over the batch (dphi, drscale also over
     * the heads). Ignored by the forward pass, and left alone when their term is absent (grid or
     * scale NULL). dscale[h * T + i] = sum_j dL/ds_ij * q_i.k_j / sqrt(hd). */
    float *dgrid, *dphi, *drscale, *dscale;
    /* dcpos (B x H x T, += dL/dcpos: for each token, the score gradients of its pairs as a key minus those
     * of its pairs as a query); left alone without cpos. */
    float *dcpos;
    /* dcope (points x hd, += dL/dcope, summed over the batch and the heads); left alone without cope. The
     * gates' and q . e's gradients reach q and k in dqkv. */
    float *dcope;
} bk_attention_bias;

/* The per-score terms of a call (model/score_terms.h), for every attention program, host and device: the
 * tables and their positions, the coordinate table, the logit scale, the content position and the mask,
 * normalised: window = sinks = 0 when it hides no causal pair, i.e. when sinks + window >= T (every key
 * j <= T - 1 - window is then a sink; window >= T is the case sinks = 0), so that such a call runs the
 * unmasked code and gives its bits. Counted positions are a row term, not in them. All absent for NULL. */
static inline bk_score_terms bk_attention_score_terms(const bk_attention_bias *bias, int T)
{
    bk_score_terms st;
    memset(&st, 0, sizeof st);
    if (!bias)
        return st;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        st.table[s] = bias->table[s];
        st.positions[s] = bias->table[s] ? bias->positions[s] : (const int32_t *)0;
    }
    st.distances = bias->distances;
    if (bias->window > 0 && (int64_t)bias->window + bias->sinks < T) {
        st.window = bias->window;
        st.sinks = bias->sinks;
    }
    if (bias->grid) {
        st.grid = bias->grid;
        st.points = bias->points;
        st.phi = bias->phi;
        st.rscale = bias->rscale;
    }
    st.lscale = bias->scale;
    st.cpos = bias->cpos;
    return st;
}

/* Forward. `probs` (B, H, T, T), when not NULL, receives the attention probabilities for the
 * backward pass (entries j > i and masked entries are 0). Returns BK_ERR_NOMEM (message set) if scratch
 * cannot be allocated, BK_ERR_INVALID if a distance falls outside the tables or phi, or an ABI 2 field
 * is out of its range (points < 2, grid without phi or rscale, window or sinks < 0). */
int bk_attention_forward(float *out, float *probs, const float *qkv, const bk_attention_bias *bias, int B, int T,
                         int C, int H, bk_error *err);

/* Backward: dqkv += d(loss)/d(qkv); dtable[s] (H x distances), when not NULL, += the diagonal-reduced
 * score gradient G_s[h][delta] = sum over (b, i, j <= i) with p_s(i) - p_s(j) = delta of dL/ds[b,h,i,j];
 * the ABI 2 gradients into bias->dgrid, dphi, drscale, dscale. `probs` is what the forward pass saved
 * (with the same bias). */
int bk_attention_backward(float *dqkv, float *const dtable[BK_STREAM_COUNT], const float *dout, const float *qkv,
                          const float *probs, const bk_attention_bias *bias, int B, int T, int C, int H,
                          bk_error *err);

/* Flash-style attention (attention_flash.c): the same scores, but each block of query rows walks the
 * visible keys in tiles, keeping its rows' running maximum and sum (the online softmax) and its output
 * rows, so no row of T scores is ever stored: scratch per thread is a block of rows by a tile of keys,
 * whatever T. Forward saves lse[b][h][i] = max_j s_ij + log(sum_j exp(s_ij - max)) (B x H x T floats;
 * NULL: forward only); backward recomputes the scores tile by tile from q, k, the terms and lse, with
 * D_i = dO_i . O_i from `out`. The terms it computes: the tables, the mask, the logit scale, the
 * coordinate table and the content position (their gradients too); counted positions are refused
 * (BK_ERR_INVALID, naming attention = "materialized"). Results equal the blocked kernel's up to the
 * order of the softmax's sums (a few float roundings: the tests bound it); the same bits for any number
 * of threads. */
int bk_attention_flash_forward(float *out, float *lse, const float *qkv, const bk_attention_bias *bias, int B,
                               int T, int C, int H, bk_error *err);
int bk_attention_flash_backward(float *dqkv, float *const dtable[BK_STREAM_COUNT], const float *dout,
                                const float *qkv, const float *out, const float *lse, const bk_attention_bias *bias,
                                int B, int T, int C, int H, bk_error *err);

#endif
