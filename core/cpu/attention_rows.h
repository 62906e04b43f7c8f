/* What the two CPU attention kernels share (internal to core/cpu): the blocked kernel of attention.c
 * (the probabilities saved for backward) and the flash-style one of attention_flash.c (row statistics
 * only). The terms of a call, the key parts of a block of query rows and the layout of the gradients' slices;
 * the scores' terms on a run of a row and where their gradients go are the per-score interface's
 * (model/score_terms.h: bk_score_run, bk_score_table_grad, bk_score_grid_grad), which the device programs
 * call too. */
#ifndef BK_CPU_ATTENTION_ROWS_H
#define BK_CPU_ATTENTION_ROWS_H

#include "cpu/attention.h"
#include "model/bias_math.h"
#include "model/host_simd.h"
#include "model/score_terms.h"
#include "util/error.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Query rows per block: BK_ATT_BLOCK x T floats of scores per thread (BK_ATT_BLOCK x (sinks + window + BK_ATT_BLOCK) with a
 * mask), and sgemms large enough to run near peak; the masked triangle computed in vain is BK_ATT_BLOCK / (2 T)
 * of the work (BK_ATT_BLOCK / (2 (window + BK_ATT_BLOCK)) with a mask). */
#define BK_ATT_BLOCK 64


/* The terms of a call: the per-score ones (bk_attention_score_terms, the mask normalised) and counted
 * positions (a row term: attention.c's counted_row). */
typedef struct terms {
    bk_score_terms st;
    const float *cope; /* counted positions: cope_points x hd */
    int32_t cope_points;
    float cope_scale;
} terms;

static inline terms terms_of(const bk_attention_bias *bias, int T)
{
    terms tm;
    memset(&tm, 0, sizeof tm);
    tm.st = bk_attention_score_terms(bias, T);
    if (bias) {
        tm.cope = bias->cope;
        tm.cope_points = bias->cope_points;
        tm.cope_scale = bias->cope_scale;
    }
    return tm;
}

/* 1 + the largest d = i - j of a visible pair: the window alone keeps d < window; with sinks (or
 * without a mask) query T - 1 sees key 0. */
static inline int64_t visible_span(const terms *tm, int T)
{
    return tm->st.window > 0 && tm->st.sinks == 0 ? tm->st.window : T;
}

/* The smallest key query i sees (the farthest one: positions are non-decreasing). */
static inline int lowest_key(const terms *tm, int i)
{
    return tm->st.window > 0 && tm->st.sinks == 0 ? (int)bk_mask_first_key(i, tm->st.window) : 0;
}

/* Columns of a block of scores: ns + (i1 - first) <= min(sinks, first) + window + BK_ATT_BLOCK - 1, and
 * <= i1 <= T (ns <= first). */
static inline int64_t block_width(const terms *tm, int T)
{
    if (tm->st.window <= 0)
        return T;
    int64_t w = (int64_t)tm->st.sinks + tm->st.window + BK_ATT_BLOCK - 1;
    return w < T ? w : T;
}

/* Row stride of a head's keys (or values) transposed: T rounded up to 16 floats, plus 16, so that the hd
 * rows a tile product reads do not share a few cache sets (at T = 4096 an unpadded stride of 16 KiB
 * would). */
static inline size_t transposed_ld(int T)
{
    return ((size_t)T + 15) / 16 * 16 + 16;
}

/* c[j * hd + d] = x[j * C3 + d]: a head's values (or keys) with their rows next to each other, for the
 * tile products that take them as B by rows over a long K (P V, dS K): read where they are, each row of
 * hd floats sits 3C floats from the next, a page or more apart at the model's widths, and the rows of a
 * tile of 256 keys fall into few cache sets (the flash forward at 16,384 tokens ran 1.10x faster with
 * its values copied; docs/performance.md). */
static inline void copy_head(float *c, const float *x, int T, int hd, int C3)
{
    for (int j = 0; j < T; j++)
        memcpy(c + (size_t)j * hd, x + (size_t)j * C3, (size_t)hd * sizeof *c);
}

/* t[d * ld + j] = x[j * C3 + d]: a head's keys (or values) transposed, so that a run of them is the rows
 * of a tile product's B (cpu/tile_gemm.h). */
static inline void transpose_head(float *t, size_t ld, const float *x, int T, int hd, int C3)
{
    enum { ROWS = 16 }; /* keys per pass: each of t's rows receives a run of 16 floats, one cache line */
    for (int j0 = 0; j0 < T; j0 += ROWS) {
        const int n = T - j0 < ROWS ? T - j0 : ROWS;
        const float *src = x + (size_t)j0 * C3;
        for (int d = 0; d < hd; d++) {
            float *dst = t + (size_t)d * ld + j0;
            for (int r = 0; r < n; r++)
                dst[r] = src[(size_t)r * C3 + d];
        }
    }
}

/* Shapes; the ABI 2 fields; and every distance p_s(i) - p_s(j) of a visible pair inside [0, distances)
 * (attention.c). span[s]: 1 + the largest distance met on stream s (0 without a table). */
int bk_attention_check_args(const bk_attention_bias *bias, int B, int T, int C, int H,
                            int32_t span[BK_STREAM_COUNT], bk_error *err);

/* The keys of the block [i0, i1): sinks [0, ns) in columns [0, ns), then [first, i1) in columns
 * [ns, ns + nw). Column c holds key c (c < ns) or first - ns + c. */
typedef struct block_keys {
    int first, ns, nw;
} block_keys;

static inline BK_HOST_INLINE block_keys keys_of(int i0, int i1, const terms *tm)
{
    block_keys kb;
    kb.first = (int)bk_mask_first_key(i0, tm->st.window);
    kb.ns = tm->st.sinks < kb.first ? tm->st.sinks : kb.first;
    kb.nw = i1 - kb.first;
    return kb;
}

/* Row i of a block: columns [0, live) hold the keys up to the diagonal; of those, columns [m0, m1) are
 * masked, the window part's keys [max(first, min(sinks, f_i)), f_i) with f_i = bk_mask_first_key(i,
 * window): below its own window the row still sees the keys that are sinks. Empty without a mask. */
typedef struct row_keys {
    int live, m0, m1;
} row_keys;

static inline BK_HOST_INLINE row_keys row_of(int i, const block_keys *kb, const terms *tm)
{
    const int fi = (int)bk_mask_first_key(i, tm->st.window);
    int lo = tm->st.sinks < fi ? tm->st.sinks : fi;
    lo = lo > kb->first ? lo : kb->first;
    row_keys rk = {.live = kb->ns + i + 1 - kb->first, .m0 = kb->ns + lo - kb->first, .m1 = kb->ns + fi - kb->first};
    return rk;
}

/* Where the bias gradients of one (b, h) task sit in its slice of doubles: the table gradients of the
 * wanted streams (`width` distances each), then dF (points), dphi (the visible distances), drscale (T),
 * dscale (T: the task's head) and the content position's key and query sums (2 T). */
typedef struct att_grads {
    int grad[BK_STREAM_COUNT], n_grad; /* the streams whose table gradient is wanted */
    size_t width;
    int want_grid, want_scale, want_cpos;
    size_t n_phi, off_grid, off_phi, off_rs, off_scale, off_cpos, slice;
} att_grads;

void bk_att_grads_plan(att_grads *g, const bk_attention_bias *bias, float *const dtable[BK_STREAM_COUNT],
                       const terms *tm, const int32_t span[BK_STREAM_COUNT], int T);
/* The task slices (acc: B x H x slice doubles) summed in a fixed order into dtable and the bias's
 * ABI 2 gradient outputs (+=). */
void bk_att_grads_reduce(const att_grads *g, const double *acc, float *const dtable[BK_STREAM_COUNT],
                         const bk_attention_bias *bias, const terms *tm, const int32_t span[BK_STREAM_COUNT], int B,
                         int H, int T);

#endif
