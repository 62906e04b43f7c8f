/* Flash-style causal attention on the CPU (attention.h): the scores of attention.c, never stored as rows.
 *
 * One OpenMP task per (b, h), its queries in blocks of FLASH_ROWS rows, as the blocked kernel. A block
 * [i0, i1) walks the keys some of its rows see — the sinks [0, ns) and the window [first, i1), the parts
 * of attention_rows.h (keys_of) — in tiles of FLASH_TILE keys, so the scratch per thread is one block
 * by one tile (68 KiB forward, 204 KiB backward) plus hd x T floats per copy of the head: forward its
 * keys transposed and its values with their rows together (copy_head), backward its keys and values
 * transposed and its keys together; the tiles above the diagonal are never visited. For a tile [j0, j1):
 *     A = Q[i0:i1] K[j0:j1]^T / sqrt(hd)                       (one tile product)
 *     s = scale_h(i) A + the terms (bk_score_run), -inf on the keys row i does not see
 *     online softmax (bk_online_softmax_row): m, l, and the tile's exps against the new max;
 *     O[i0:i1] = alpha O + exps V[j0:j1]                       (the rows' rescale, one tile product)
 * and at the end out = O / l and lse = m + log l (B x H x T floats, when backward will want them).
 *
 * Backward recomputes each tile's scores from q, k and lse (P = exp(s - lse), bk_flash_prob), with
 * D_i = dO_i . O_i from the forward's output, and per tile
 *     dP = dO V^T,  dS = P (dP - D),  the terms' gradients from dS on the visible keys,
 *     dV[j0:j1] += P^T dO,  dQ[i0:i1] += dS' K[j0:j1] / sqrt(hd),  dK[j0:j1] += dS'^T Q[i0:i1] / sqrt(hd)
 * with dS' = scale_h(i) dS: five tile products. A task writes only its own (b, h)'s columns of dqkv and its own
 * slice of the bias gradients (bk_att_grads_plan / reduce: summed in a fixed order afterwards), and
 * walks its blocks and tiles in one order, so the result does not depend on the number of threads.
 *
 * The products are tile_gemm.h's, not the BLAS's: at these shapes (one dimension the head size) a BLAS
 * spends as much on packing and on writing C back as on the multiply-adds; tile_gemm reads the keys and
 * values transposed or copied once per (b, h) and gives the same bits on every CPU. Counted positions (CoPE's gates need every visible pair of a row before any of its
 * scores) are refused. */
#include "cpu/attention.h"
#include "cpu/attention_rows.h"
#include "cpu/tile_gemm.h"

#include "model/bias_math.h"
#include "model/host_simd.h"
#include "model/softmax_math.h"
#include "util/error.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Keys per tile: a block's tile of scores (64 x 256 floats, 64 KiB) stays in the L2 cache with the
 * tile of K and V it multiplies (64 x 256 was as fast as any of 32, 64, 128 rows by 128, 256, 512 keys in
 * bench_attention --attention fused; docs/performance.md). */
#define FLASH_TILE 256
/* Row stride of a tile of scores: a tile row plus 16 floats, so that a column of the tile (read down the
 * rows by the transposed products) does not fall into a few cache sets. */
#define FLASH_LD (FLASH_TILE + 16)
/* Query rows per block. */
#define FLASH_ROWS 64

/* The keys of [j0, j1) that row i sees: at most two ranges, the sinks below min(sinks, f_i) and the
 * window [f_i, i] (f_i = 0 without a mask). Returns their number; lo/hi are key indices. */
static inline BK_HOST_INLINE int visible_ranges(int i, int j0, int j1, const terms *tm, int lo[2], int hi[2])
{
    const int fi = (int)bk_mask_first_key(i, tm->st.window);
    const int sink_end = tm->st.sinks < fi ? tm->st.sinks : fi;
    int n = 0;
    int a = j0, b = j1 < sink_end ? j1 : sink_end;
    if (a < b)
        lo[n] = a, hi[n] = b, n++;
    a = j0 > fi ? j0 : fi;
    b = j1 < i + 1 ? j1 : i + 1;
    if (a < b)
        lo[n] = a, hi[n] = b, n++;
    return n;
}

/* Row i of a tile of keys [j0, j0 + n): row[c] holds a_ij (key j0 + c) and becomes s_ij on the keys the
 * row sees, -inf elsewhere. Returns the number of visible keys. */
static inline BK_HOST_INLINE int score_row(float *row, int i, int j0, int n, const terms *tm,
                                           const bk_score_head *hv)
{
    int lo[2], hi[2];
    const int parts = visible_ranges(i, j0, j0 + n, tm, lo, hi);
    int c = 0, seen = 0;
    for (int p = 0; p < parts; p++) {
        for (; c < lo[p] - j0; c++)
            row[c] = -INFINITY;
        bk_score_run(hv, i, lo[p], hi[p] - lo[p], row + lo[p] - j0);
        c = hi[p] - j0;
        seen += hi[p] - lo[p];
    }
    for (; c < n; c++)
        row[c] = -INFINITY;
    return seen;
}

/* Tiles of a block: the sinks part [0, ns), then the window part [first, i1), FLASH_TILE keys at a time.
 * Returns 0 after the last tile. */
static inline int next_tile(const block_keys *kb, int i1, int *j0, int *j1)
{
    if (*j1 < 0)
        *j0 = kb->ns ? 0 : kb->first;
    else if (*j0 < kb->ns && *j1 == kb->ns)
        *j0 = kb->first; /* the sinks done: the window part */
    else
        *j0 = *j1;
    if (*j0 >= i1)
        return 0;
    const int end = *j0 < kb->ns ? kb->ns : i1;
    *j1 = *j0 + FLASH_TILE < end ? *j0 + FLASH_TILE : end;
    return 1;
}

static int refuse_counted(const bk_attention_bias *bias, const char *what, bk_error *err)
{
    if (bias && bias->cope)
        return bk_fail(err, BK_ERR_INVALID,
                       "attention %s: counted positions (BIASKIT_CAP_COUNT) are computed only by the materialized "
                       "attention; expected [run] attention = \"materialized\"",
                       what);
    return BK_OK;
}

BK_HOST_CLONES
int bk_attention_flash_forward(float *out, float *lse, const float *qkv, const bk_attention_bias *bias, int B,
                               int T, int C, int H, bk_error *err)
{
    int32_t span[BK_STREAM_COUNT];
    int rc = bk_attention_check_args(bias, B, T, C, H, span, err);
    if (rc == BK_OK)
        rc = refuse_counted(bias, "forward", err);
    if (rc != BK_OK)
        return rc;
    const int hd = C / H, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hd);
    const terms tm = terms_of(bias, T);
    /* per thread: the block's tile of scores, its rows' m, l, alpha, the head's keys transposed and its
     * values copied (copy_head) */
    const size_t ldt = transposed_ld(T);
    const size_t per_thread = (size_t)FLASH_ROWS * FLASH_LD + 3 * FLASH_ROWS + (size_t)hd * ldt + (size_t)T * hd;
    const size_t bytes = (size_t)omp_get_max_threads() * per_thread * sizeof(float);
    float *scratch = malloc(bytes);
    if (!scratch)
        return bk_fail(err, BK_ERR_NOMEM, "attention forward (flash): cannot allocate %zu bytes of score scratch",
                       bytes);

#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H;
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hd, *k = q + C, *v = q + 2 * C;
        const bk_score_head hv = bk_score_head_of(&tm.st, b, h, H, T);
        float *S = scratch + (size_t)omp_get_thread_num() * per_thread;
        float *m = S + (size_t)FLASH_ROWS * FLASH_LD, *l = m + FLASH_ROWS, *alpha = l + FLASH_ROWS;
        float *kt = alpha + FLASH_ROWS, *vc = kt + (size_t)hd * ldt;
        transpose_head(kt, ldt, k, T, hd, C3);
        copy_head(vc, v, T, hd, C3);
        for (int i0 = 0; i0 < T; i0 += FLASH_ROWS) {
            const int i1 = i0 + FLASH_ROWS < T ? i0 + FLASH_ROWS : T, rows = i1 - i0;
            const block_keys kb = keys_of(i0, i1, &tm);
            float *o = out + ((size_t)b * T + i0) * C + (size_t)h * hd;
            for (int r = 0; r < rows; r++) {
                m[r] = -INFINITY, l[r] = 0.0f;
                memset(o + (size_t)r * C, 0, (size_t)hd * sizeof *o);
            }
            int j0 = 0, j1 = -1;
            while (next_tile(&kb, i1, &j0, &j1)) {
                const int n = j1 - j0;
                bk_tile_gemm(rows, n, hd, scale, q + (size_t)i0 * C3, C3, 1, kt + j0, (ptrdiff_t)ldt, 0, S, FLASH_LD);
                for (int r = 0; r < rows; r++) {
                    float *row = S + (size_t)r * FLASH_LD;
                    score_row(row, i0 + r, j0, n, &tm, &hv);
                    bk_online_softmax_row(row, n, &m[r], &l[r], &alpha[r]);
                    if (alpha[r] != 1.0f) {
                        float *orow = o + (size_t)r * C;
                        const float al = alpha[r];
                        BK_OMP_SIMD
                        for (int d = 0; d < hd; d++)
                            orow[d] *= al;
                    }
                }
                bk_tile_gemm(rows, hd, n, 1.0f, S, FLASH_LD, 1, vc + (size_t)j0 * hd, hd, 1, o, C);
            }
            for (int r = 0; r < rows; r++) {
                float *orow = o + (size_t)r * C;
                const float inv = 1.0f / l[r];
                BK_OMP_SIMD
                for (int d = 0; d < hd; d++)
                    orow[d] *= inv;
                if (lse)
                    lse[(size_t)bh * T + i0 + r] = m[r] + logf(l[r]);
            }
        }
    }
    free(scratch);
    return BK_OK;
}

BK_HOST_CLONES
int bk_attention_flash_backward(float *dqkv, float *const dtable[BK_STREAM_COUNT], const float *dout,
                                const float *qkv, const float *out, const float *lse, const bk_attention_bias *bias,
                                int B, int T, int C, int H, bk_error *err)
{
    if (!lse || !out)
        return bk_fail(err, BK_ERR_INVALID,
                       "attention backward (flash): needs the row log-sum-exps and the output of the forward pass");
    int32_t span[BK_STREAM_COUNT];
    int rc = bk_attention_check_args(bias, B, T, C, H, span, err);
    if (rc == BK_OK)
        rc = refuse_counted(bias, "backward", err);
    if (rc != BK_OK)
        return rc;
    const int hd = C / H, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hd);
    const terms tm = terms_of(bias, T);
    att_grads g;
    bk_att_grads_plan(&g, bias, dtable, &tm, span, T);

    /* per thread: A (q.k / sqrt(hd)), P and dP / dS tiles, the block's D, the head's keys and values
     * transposed and its keys copied (copy_head) */
    const size_t ldt = transposed_ld(T);
    const size_t tile = (size_t)FLASH_ROWS * FLASH_LD;
    const size_t per_thread = 3 * tile + FLASH_ROWS + 2 * (size_t)hd * ldt + (size_t)T * hd;
    const size_t bytes = (size_t)omp_get_max_threads() * per_thread * sizeof(float);
    float *scratch = malloc(bytes);
    double *acc = g.slice ? calloc((size_t)B * H * g.slice, sizeof *acc) : NULL;
    if (!scratch || (g.slice && !acc)) {
        free(scratch);
        free(acc);
        return bk_fail(err, BK_ERR_NOMEM,
                       "attention backward (flash): cannot allocate %zu bytes of score scratch and %zu bytes of "
                       "bias-gradient scratch",
                       bytes, (size_t)B * H * g.slice * sizeof *acc);
    }

#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H;
        const size_t base = (size_t)b * T * C3 + (size_t)h * hd;
        const float *q = qkv + base, *k = q + C, *v = q + 2 * C;
        float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
        float *A = scratch + (size_t)omp_get_thread_num() * per_thread, *P = A + tile, *dS = P + tile;
        float *D = dS + tile, *kt = D + FLASH_ROWS, *vt = kt + (size_t)hd * ldt, *kc = vt + (size_t)hd * ldt;
        transpose_head(kt, ldt, k, T, hd, C3);
        transpose_head(vt, ldt, v, T, hd, C3);
        copy_head(kc, k, T, hd, C3);
        const bk_score_head hv = bk_score_head_of(&tm.st, b, h, H, T);
        const int32_t *gpos[BK_STREAM_COUNT];
        for (int s = 0; s < g.n_grad; s++)
            gpos[s] = bias->positions[g.grad[s]] ? bias->positions[g.grad[s]] + (size_t)b * T : NULL;
        double *my = acc ? acc + (size_t)bh * g.slice : NULL;
        const float *L = lse + (size_t)bh * T;

        for (int i0 = 0; i0 < T; i0 += FLASH_ROWS) {
            const int i1 = i0 + FLASH_ROWS < T ? i0 + FLASH_ROWS : T, rows = i1 - i0;
            const block_keys kb = keys_of(i0, i1, &tm);
            const float *dO = dout + ((size_t)b * T + i0) * C + (size_t)h * hd;
            const float *O = out + ((size_t)b * T + i0) * C + (size_t)h * hd, *qb = q + (size_t)i0 * C3;
            for (int r = 0; r < rows; r++)
                D[r] = (float)bk_dot_lanes(dO + (size_t)r * C, O + (size_t)r * C, hd);
            int j0 = 0, j1 = -1;
            while (next_tile(&kb, i1, &j0, &j1)) {
                const int n = j1 - j0;
                bk_tile_gemm(rows, n, hd, scale, qb, C3, 1, kt + j0, (ptrdiff_t)ldt, 0, A, FLASH_LD);
                bk_tile_gemm(rows, n, hd, 1.0f, dO, C, 1, vt + j0, (ptrdiff_t)ldt, 0, dS, FLASH_LD);
                for (int r = 0; r < rows; r++) {
                    const int i = i0 + r;
                    const float *a = A + (size_t)r * FLASH_LD;
                    float *p = P + (size_t)r * FLASH_LD, *ds = dS + (size_t)r * FLASH_LD;
                    memcpy(p, a, (size_t)n * sizeof *p);
                    score_row(p, i, j0, n, &tm, &hv);
                    const float li = L[i], Di = D[r];
                    BK_OMP_SIMD
                    for (int c = 0; c < n; c++) {
                        p[c] = bk_flash_prob(p[c], li); /* -inf (unseen keys) gives exactly 0 */
                        ds[c] = p[c] * (ds[c] - Di);
                    }
                    int lo[2], hi[2];
                    const int parts = visible_ranges(i, j0, j1, &tm, lo, hi);
                    for (int part = 0; part < parts; part++) {
                        const int c0 = lo[part] - j0, c1 = hi[part] - j0;
                        for (int s = 0; s < g.n_grad; s++)
                            bk_score_table_grad(my + (size_t)s * g.width, gpos[s], ds + c0, i, lo[part], c1 - c0);
                        if (g.want_grid)
                            bk_score_grid_grad(my + g.off_grid, my + g.off_phi, my + g.off_rs + i, &hv, ds + c0, i,
                                               lo[part], c1 - c0);
                        if (g.want_scale)
                            my[g.off_scale + i] += bk_dot_lanes(ds + c0, a + c0, c1 - c0);
                        if (g.want_cpos) { /* each key's column sum, each query's row sum of dS */
                            double *keys = my + g.off_cpos, sum = 0.0;
                            for (int c = c0; c < c1; c++)
                                keys[j0 + c] += ds[c], sum += ds[c];
                            my[g.off_cpos + (size_t)T + (size_t)i] += sum;
                        }
                    }
                    if (hv.lam) {
                        const float lam = hv.lam[i];
                        BK_OMP_SIMD
                        for (int c = 0; c < n; c++)
                            ds[c] *= lam;
                    }
                }
                bk_tile_gemm(n, hd, rows, 1.0f, P, 1, FLASH_LD, dO, C, 1, dv + (size_t)j0 * C3, C3);
                bk_tile_gemm(rows, hd, n, scale, dS, FLASH_LD, 1, kc + (size_t)j0 * hd, hd, 1, dq + (size_t)i0 * C3,
                             C3);
                bk_tile_gemm(n, hd, rows, scale, dS, 1, FLASH_LD, qb, C3, 1, dk + (size_t)j0 * C3, C3);
            }
        }
    }
    bk_att_grads_reduce(&g, acc, dtable, bias, &tm, span, B, H, T);
    free(scratch);
    free(acc);
    return BK_OK;
}
