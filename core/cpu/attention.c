/* Causal multi-head attention with additive biases, fp32 on the CPU (attention.h).
 *
 * One OpenMP task per (b, h). A task walks its queries in blocks of BK_ATT_BLOCK rows. The block [i0, i1)
 * visits only the keys some of its rows can see, in two contiguous parts (model/bias_math.h):
 *     sinks   keys [0, ns),       ns = min(sinks, first)
 *     window  keys [first, i1),   first = bk_mask_first_key(i0, window)
 * laid side by side as the ns + (i1 - first) columns of a compact block of scores, so that every
 * product is one sgemm per part (none for an empty sinks part):
 *     A = Q[i0:i1] K[parts]^T / sqrt(hd)
 *     P = softmax_row(scale_h(i) A + tables + grid) over the keys row i sees (-inf, then 0, elsewhere)
 *     out[i0:i1] = P V[parts]
 * Without a mask, first = ns = 0 and the window part is the causal prefix [0, i1): the plain causal
 * attention, and a call without any ABI 2 term performs the operations of ABI 1 one for one (same
 * bits). With a mask, the work and the scratch per query grow with sinks + window + BK_ATT_BLOCK, not with T.
 *
 * Inside a block, row i sees (bias_math.h's predicate bk_mask_keeps) the keys [0, min(sinks, f_i)) and
 * [f_i, i], f_i = bk_mask_first_key(i, window); in the compact row these are every column up to the
 * diagonal except the window part's keys [max(first, min(sinks, f_i)), f_i) (row_keys below).
 *
 * The products run on the kernels bk_gemm_attention_kernels picks (cpu/gemm.h): the engine's tile kernels
 * (each element one chain of fused multiply-adds over k in order: the same bits on every CPU and vector
 * width) wherever the CPU has AVX2 or AVX-512, else, or with BIASKIT_GEMM=blas, the BLAS, which runs
 * single-threaded inside the parallel region. Either way each task is sequential and its result is the
 * same whichever thread runs it. */
#include "cpu/attention.h"
#include "cpu/attention_rows.h"
#include "cpu/gemm.h"
#include "cpu/tile_gemm.h"

#include "model/bias_math.h"
#include "model/cope_math.h"
#include "model/host_simd.h"
#include "model/softmax_math.h"
#include "util/error.h"

#include "util/blas.h"
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(BK_STREAM_COUNT == 2, "stream_names lists the streams of BK_STREAM_CHOICES");
static const char *const stream_names[BK_STREAM_COUNT] = {"token", "segment"};

/* Shapes; the ABI 2 fields; and every distance p_s(i) - p_s(j) of a visible pair inside
 * [0, distances), for the tables and (grid) for phi. Positions are non-decreasing, so per row b it is
 * enough that consecutive positions do not decrease and that p(i) - p(lowest_key(i)) < distances
 * (without a window-only mask, p(T-1) - p(0)). span[s] receives 1 + the largest distance met on
 * stream s (0 when the stream has no table): the table gradient never touches entries beyond it.
 * O(B T) at most. */
int bk_attention_check_args(const bk_attention_bias *bias, int B, int T, int C, int H, int32_t span[BK_STREAM_COUNT],
                      bk_error *err)
{
    if (B <= 0 || T <= 0 || C <= 0 || H <= 0 || C % H)
        return bk_fail(err, BK_ERR_INVALID,
                       "attention: need B, T, C, H > 0 and C divisible by H, got B=%d T=%d C=%d H=%d", B, T, C, H);
    if (bias) {
        if (bias->window < 0)
            return bk_fail(err, BK_ERR_INVALID,
                           "attention: mask window = %d: expected the number of keys a query sees (>= 1), or 0 "
                           "for no mask",
                           bias->window);
        if (bias->sinks < 0)
            return bk_fail(err, BK_ERR_INVALID, "attention: mask sinks = %d: expected a number of keys >= 0",
                           bias->sinks);
        if (bias->grid && bias->points < 2)
            return bk_fail(err, BK_ERR_INVALID,
                           "attention: coordinate table: points = %d: expected at least 2 grid points of u",
                           bias->points);
        if (bias->cope && (bias->cope_points < 2 || !isfinite(bias->cope_scale)))
            return bk_fail(err, BK_ERR_INVALID,
                           "attention: counted positions: %d position vectors and scale %g; expected at least 2 "
                           "vectors and a finite scale",
                           (int)bias->cope_points, (double)bias->cope_scale);
        if (bias->grid && (!bias->phi || !bias->rscale))
            return bk_fail(err, BK_ERR_INVALID,
                           "attention: coordinate table: the grid is set but %s is NULL (u = phi[d] * rscale[i] "
                           "needs both)",
                           !bias->phi ? "phi" : "rscale");
    }
    const terms tm = terms_of(bias, T);
    if (tm.st.grid && bias->distances < visible_span(&tm, T))
        return bk_fail(err, BK_ERR_INVALID,
                       "attention: coordinate table: phi holds %d distances, but visible keys lie up to d = %lld "
                       "away (need distances >= %lld)",
                       bias->distances, (long long)visible_span(&tm, T) - 1, (long long)visible_span(&tm, T));
    const int window_only = tm.st.window > 0 && tm.st.sinks == 0;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        span[s] = 0;
        if (!bias || !bias->table[s])
            continue;
        const int64_t D = bias->distances;
        for (int b = 0; b < B; b++) {
            const int32_t *p = bias->positions[s] ? bias->positions[s] + (size_t)b * T : NULL;
            int64_t far = p ? (int64_t)p[T - 1] - p[0] : T - 1;
            if (p) {
                for (int t = 1; t < T; t++) {
                    int64_t d = (int64_t)p[t] - p[t - 1];
                    if (d < 0)
                        return bk_fail(err, BK_ERR_INVALID,
                                       "attention: stream '%s', batch row %d: distance p(i=%d) - p(j=%d) = %lld is "
                                       "negative (positions must be non-decreasing along the sequence)",
                                       stream_names[s], b, t, t - 1, (long long)d);
                }
            }
            if (window_only) { /* the farthest visible pair of each query */
                far = 0;
                for (int i = 0; i < T; i++) {
                    const int j = lowest_key(&tm, i);
                    const int64_t d = p ? (int64_t)p[i] - p[j] : i - j;
                    far = d > far ? d : far;
                }
            }
            if (far >= D) {
                int i = 0; /* the first query whose farthest visible key leaves the table */
                while ((p ? (int64_t)p[i] - p[lowest_key(&tm, i)] : (int64_t)i - lowest_key(&tm, i)) < D)
                    i++;
                const int j = lowest_key(&tm, i);
                return bk_fail(err, BK_ERR_INVALID,
                               "attention: stream '%s', batch row %d: distance p(i=%d) - p(j=%d) = %lld is outside "
                               "the bias table, which holds distances 0 .. %lld",
                               stream_names[s], b, i, j, p ? (long long)p[i] - p[j] : (long long)(i - j),
                               (long long)D - 1);
            }
            if (far + 1 > span[s])
                span[s] = (int32_t)(far + 1);
        }
    }
    return BK_OK;
}

/* The per-head products, on the kernels of bk_gemm_attention_kernels (cpu/gemm.h): the BLAS (bk_sgemm,
 * single-threaded inside the parallel region) or the engine's tile kernels, which take B by rows, so a
 * product with B^T reads the head's keys or values transposed once per task (kt, vt: transpose_head):
 *     C = alpha op(A) op(B), or C + that (accumulate)
 * op(A) = A (M x K, lda) or, transA, A^T (A stored K x M); op(B) = B (K x N, ldb) or, transB, B^T with B
 * stored N x K (ldb) for the BLAS and given transposed, K x N (Bt, ldbt), for the engine's kernels. */
static void prod(int kernels, int transA, int transB, int M, int N, int K, float alpha, const float *A,
                 ptrdiff_t lda, const float *B, ptrdiff_t ldb, const float *Bt, ptrdiff_t ldbt, int accumulate,
                 float *C, ptrdiff_t ldc)
{
    if (kernels == BK_GEMM_BLAS)
        bk_sgemm(transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, (int)lda,
                 B, (int)ldb, accumulate ? 1.0f : 0.0f, C, (int)ldc);
    else
        bk_tile_gemm_span(kernels, M, N, K, A, transA ? 1 : lda, transA ? lda : 1, transB ? Bt : B,
                          transB ? ldbt : ldb, NULL, NULL, 0, alpha, accumulate, C, ldc);
}

/* The products' kernels and, for the engine's, per thread a head's keys (and, backward, values) transposed
 * (hd x ldt each), and counted positions' vectors transposed (Et: hd x cope_points). */
typedef struct heads {
    int kernels; /* BK_GEMM_BLAS or a BK_TILE_GEMM_* variant */
    size_t ldt, per_thread;
    float *buf, *Et;
} heads;

static int heads_alloc(heads *hs, const terms *tm, int T, int hd, int count, const char *what, bk_error *err)
{
    hs->kernels = bk_gemm_attention_kernels();
    hs->ldt = transposed_ld(T);
    hs->per_thread = (size_t)count * (size_t)hd * hs->ldt;
    hs->buf = hs->Et = NULL;
    if (hs->kernels == BK_GEMM_BLAS)
        return BK_OK;
    const size_t bytes = (size_t)omp_get_max_threads() * hs->per_thread * sizeof(float);
    hs->buf = malloc(bytes);
    if (tm->cope && hs->buf) {
        const size_t np = (size_t)tm->cope_points;
        if ((hs->Et = malloc(np * (size_t)hd * sizeof(float))))
            for (size_t p = 0; p < np; p++)
                for (int d = 0; d < hd; d++)
                    hs->Et[(size_t)d * np + p] = tm->cope[p * (size_t)hd + (size_t)d];
    }
    if (!hs->buf || (tm->cope && !hs->Et)) {
        free(hs->buf);
        free(hs->Et);
        return bk_fail(err, BK_ERR_NOMEM, "attention %s: cannot allocate %zu bytes for the heads' keys and values "
                       "transposed", what, bytes);
    }
    return BK_OK;
}

/* This thread's keys transposed (then values, when v is given), or NULL on the BLAS. */
static float *heads_mine(const heads *hs, const float *k, const float *v, int T, int hd, int C3)
{
    if (!hs->buf)
        return NULL;
    float *kt = hs->buf + (size_t)omp_get_thread_num() * hs->per_thread;
    transpose_head(kt, hs->ldt, k, T, hd, C3);
    if (v)
        transpose_head(kt + (size_t)hd * hs->ldt, hs->ldt, v, T, hd, C3);
    return kt;
}

static void heads_free(heads *hs)
{
    free(hs->buf);
    free(hs->Et);
}

/* Counted positions of row i (cope_math.h, bk_cope_row) from its scores a = q.k / sqrt(hd) before any term
 * is added and its logits against the position vectors (l): out[c] for the row's compact columns. */
static inline BK_HOST_INLINE void counted_row(const float *a, int i, const block_keys *kb, const terms *tm,
                                              const float *l, float *out)
{
    const row_keys rk = row_of(i, kb, tm);
    bk_cope_row(a, rk.live, rk.m0, rk.m1, l, tm->cope_points, tm->cope_scale, out);
}

/* The way back through counted_row (bk_cope_row_backward): dl += dL/dl, out = dL/da through the gates. */
static inline BK_HOST_INLINE void counted_row_backward(const float *ds, const float *a, int i, const block_keys *kb,
                                                       const terms *tm, const float *l, float *dl, float *out)
{
    const row_keys rk = row_of(i, kb, tm);
    bk_cope_row_backward(ds, a, rk.live, rk.m0, rk.m1, l, tm->cope_points, tm->cope_scale, dl, out);
}

/* Row i of a block of scores (`width` columns): the terms on the visible keys, -inf on the masked ones,
 * then softmax in place over the columns up to the diagonal (max subtracted so exp cannot overflow;
 * a masked column's exp is exactly 0) and zeros in the columns after it. */
static inline BK_HOST_INLINE void softmax_row(float *row, int i, int width, const block_keys *kb, const terms *tm,
                                              const bk_score_head *hv, const float *counted)
{
    const row_keys rk = row_of(i, kb, tm);
    bk_score_run(hv, i, 0, kb->ns, row);
    bk_score_run(hv, i, kb->first, rk.m0 - kb->ns, row + kb->ns);
    bk_score_run(hv, i, kb->first - kb->ns + rk.m1, rk.live - rk.m1, row + rk.m1);
    if (counted) /* masked columns hold 0 and become -inf below */
        for (int c = 0; c < rk.live; c++)
            row[c] += counted[c];
    for (int c = rk.m0; c < rk.m1; c++)
        row[c] = -INFINITY;
    bk_causal_softmax_row(row, rk.live, width);
}

BK_HOST_CLONES
int bk_attention_forward(float *out, float *probs, const float *qkv, const bk_attention_bias *bias, int B, int T,
                         int C, int H, bk_error *err)
{
    int32_t span[BK_STREAM_COUNT];
    int rc = bk_attention_check_args(bias, B, T, C, H, span, err);
    if (rc != BK_OK)
        return rc;
    const int hd = C / H, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hd);
    const terms tm = terms_of(bias, T);
    /* Without a mask, probs rows serve as the score block (keys at their own columns); with one, the
     * scores are compact (ld columns) whether or not probs is kept, so that both compute the same bits,
     * and the rows are spread into probs afterwards. */
    const int masked = tm.st.window > 0;
    const int64_t ld = block_width(&tm, T);

    /* Each thread keeps one block of scores; the team is at most max_threads wide. */
    float *scratch = NULL;
    if (!probs || masked) {
        size_t bytes = (size_t)omp_get_max_threads() * BK_ATT_BLOCK * (size_t)ld * sizeof *scratch;
        scratch = malloc(bytes);
        if (!scratch)
            return bk_fail(err, BK_ERR_NOMEM, "attention forward: cannot allocate %zu bytes of score scratch", bytes);
    }
    /* counted positions: per thread, the block's logits against the position vectors and one row's terms */
    const size_t cope_per_thread = tm.cope ? (size_t)BK_ATT_BLOCK * (size_t)tm.cope_points + (size_t)ld : 0;
    float *cope_scratch = NULL;
    if (tm.cope && !(cope_scratch = malloc((size_t)omp_get_max_threads() * cope_per_thread * sizeof(float)))) {
        free(scratch);
        return bk_fail(err, BK_ERR_NOMEM, "attention forward: cannot allocate the counted positions' scratch");
    }
    heads hs;
    if ((rc = heads_alloc(&hs, &tm, T, hd, 1, "forward", err)) != BK_OK) {
        free(scratch);
        free(cope_scratch);
        return rc;
    }

#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H;
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hd, *k = q + C, *v = q + 2 * C;
        const bk_score_head hv = bk_score_head_of(&tm.st, b, h, H, T);
        float *mine = scratch ? scratch + (size_t)omp_get_thread_num() * BK_ATT_BLOCK * (size_t)ld : NULL;
        float *cl = cope_scratch ? cope_scratch + (size_t)omp_get_thread_num() * cope_per_thread : NULL;
        float *counted = cl ? cl + (size_t)BK_ATT_BLOCK * (size_t)tm.cope_points : NULL;
        const float *kt = heads_mine(&hs, k, NULL, T, hd, C3);
        for (int i0 = 0; i0 < T; i0 += BK_ATT_BLOCK) {
            const int i1 = i0 + BK_ATT_BLOCK < T ? i0 + BK_ATT_BLOCK : T, rows = i1 - i0;
            const block_keys kb = keys_of(i0, i1, &tm);
            /* probs keeps whole rows (zeros past the diagonal); scratch only needs the live columns */
            const int direct = probs && !masked;
            float *S = direct ? probs + ((size_t)bh * T + i0) * T : mine;
            const int width = direct ? T : kb.ns + kb.nw;
            const float *qb = q + (size_t)i0 * C3;
            if (kb.ns)
                prod(hs.kernels, 0, 1, rows, kb.ns, hd, scale, qb, C3, k, C3, kt, hs.ldt, 0, S, ld);
            prod(hs.kernels, 0, 1, rows, kb.nw, hd, scale, qb, C3, k + (size_t)kb.first * C3, C3,
                 kt ? kt + kb.first : NULL, hs.ldt, 0, S + kb.ns, ld);
            if (cl) /* l = Q[i0:i1] E^T */
                prod(hs.kernels, 0, 1, rows, tm.cope_points, hd, 1.0f, qb, C3, tm.cope, hd, hs.Et, tm.cope_points, 0,
                     cl, tm.cope_points);
            for (int r = 0; r < rows; r++) {
                if (cl)
                    counted_row(S + (size_t)r * ld, i0 + r, &kb, &tm, cl + (size_t)r * tm.cope_points, counted);
                softmax_row(S + (size_t)r * ld, i0 + r, width, &kb, &tm, &hv, counted);
            }
            float *o = out + ((size_t)b * T + i0) * C + (size_t)h * hd;
            if (kb.ns)
                prod(hs.kernels, 0, 0, rows, hd, kb.ns, 1.0f, S, ld, v, C3, NULL, 0, 0, o, C);
            prod(hs.kernels, 0, 0, rows, hd, kb.nw, 1.0f, S + kb.ns, ld, v + (size_t)kb.first * C3, C3, NULL, 0,
                 kb.ns != 0, o, C);
            if (probs && masked)
                for (int r = 0; r < rows; r++) {
                    float *dst = probs + ((size_t)bh * T + i0 + r) * T;
                    const float *src = S + (size_t)r * ld;
                    memcpy(dst, src, (size_t)kb.ns * sizeof *dst);
                    memset(dst + kb.ns, 0, (size_t)(kb.first - kb.ns) * sizeof *dst);
                    memcpy(dst + kb.first, src + kb.ns, (size_t)kb.nw * sizeof *dst);
                    memset(dst + i1, 0, (size_t)(T - i1) * sizeof *dst);
                }
        }
    }
    free(scratch);
    free(cope_scratch);
    heads_free(&hs);
    return BK_OK;
}

/* Streams whose table gradient is wanted (each task's slice holds `width` distances per stream: the
 * largest that occurs, often far fewer than the table's row), then the ABI 2 gradients wanted. */
void bk_att_grads_plan(att_grads *g, const bk_attention_bias *bias, float *const dtable[BK_STREAM_COUNT],
                       const terms *tm, const int32_t span[BK_STREAM_COUNT], int T)
{
    g->n_grad = 0;
    g->width = 0;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (dtable && dtable[s] && bias && bias->table[s]) {
            g->grad[g->n_grad++] = s;
            g->width = (size_t)span[s] > g->width ? (size_t)span[s] : g->width;
        }
    }
    g->want_grid = tm->st.grid && (bias->dgrid || bias->dphi || bias->drscale);
    g->want_scale = tm->st.lscale && bias->dscale;
    g->want_cpos = tm->st.cpos && bias->dcpos;
    g->n_phi = g->want_grid ? (size_t)visible_span(tm, T) : 0;
    g->off_grid = (size_t)g->n_grad * g->width;
    g->off_phi = g->off_grid + (g->want_grid ? (size_t)tm->st.points : 0);
    g->off_rs = g->off_phi + g->n_phi;
    g->off_scale = g->off_rs + (g->want_grid ? (size_t)T : 0);
    g->off_cpos = g->off_scale + (g->want_scale ? (size_t)T : 0);
    g->slice = g->off_cpos + (g->want_cpos ? 2 * (size_t)T : 0);
}

/* G_s[h], dF[h] and dscale[h] summed over b = 0, 1, ...; dphi and drscale over (b, h) = (0, 0), (0, 1),
 * ...; dcpos per (b, h): dL/dP(t) = t's key sum - its query sum. */
void bk_att_grads_reduce(const att_grads *g, const double *acc, float *const dtable[BK_STREAM_COUNT],
                         const bk_attention_bias *bias, const terms *tm, const int32_t span[BK_STREAM_COUNT], int B,
                         int H, int T)
{
    const size_t slice = g->slice;
    if (g->n_grad) {
        const size_t D = (size_t)bias->distances;
#pragma omp parallel for schedule(static)
        for (int gh = 0; gh < g->n_grad * H; gh++) {
            const int k = gh / H, h = gh % H;
            float *dst = dtable[g->grad[k]] + (size_t)h * D;
            for (size_t d = 0; d < (size_t)span[g->grad[k]]; d++) {
                double sum = 0.0;
                for (int b = 0; b < B; b++)
                    sum += acc[((size_t)b * H + h) * slice + (size_t)k * g->width + d];
                dst[d] += (float)sum;
            }
        }
    }
    if (g->want_grid && bias->dgrid) {
        const int np = tm->st.points;
#pragma omp parallel for schedule(static)
        for (int hg = 0; hg < H * np; hg++) {
            const int h = hg / np, k = hg % np;
            double sum = 0.0;
            for (int b = 0; b < B; b++)
                sum += acc[((size_t)b * H + h) * slice + g->off_grid + (size_t)k];
            bias->dgrid[hg] += (float)sum;
        }
    }
    if (g->want_grid && bias->dphi) {
#pragma omp parallel for schedule(static)
        for (int d = 0; d < (int)g->n_phi; d++) {
            double sum = 0.0;
            for (int bh = 0; bh < B * H; bh++)
                sum += acc[(size_t)bh * slice + g->off_phi + (size_t)d];
            bias->dphi[d] += (float)sum;
        }
    }
    if (g->want_grid && bias->drscale) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < T; i++) {
            double sum = 0.0;
            for (int bh = 0; bh < B * H; bh++)
                sum += acc[(size_t)bh * slice + g->off_rs + (size_t)i];
            bias->drscale[i] += (float)sum;
        }
    }
    if (g->want_scale) {
#pragma omp parallel for schedule(static)
        for (int hi = 0; hi < H * T; hi++) {
            const int h = hi / T, i = hi % T;
            double sum = 0.0;
            for (int b = 0; b < B; b++)
                sum += acc[((size_t)b * H + h) * slice + g->off_scale + (size_t)i];
            bias->dscale[hi] += (float)sum;
        }
    }
    if (g->want_cpos) {
#pragma omp parallel for schedule(static)
        for (int bh = 0; bh < B * H; bh++) {
            const double *keys = acc + (size_t)bh * slice + g->off_cpos, *queries = keys + T;
            for (int t = 0; t < T; t++)
                bias->dcpos[(size_t)bh * T + t] += (float)bk_content_grad(keys[t], queries[t]);
        }
    }
}

/* Backward, with P from the forward pass and dO = dout for one (b, h), per block of rows [i0, i1), over
 * the block's key parts (the columns of the compact block; masked keys are never multiplied):
 *     dP = dO V[parts]^T
 *     dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik)  (softmax Jacobian: dL/ds; 0 where P is, set to exactly 0
 *                                              on masked keys; the sum by bk_dot_lanes, in double)
 *     G_s[h][p_s(i) - p_s(j)] += dS_ij          (the tables enter s unscaled)
 *     dF, dphi, drscale                         (bk_score_grid_grad)
 *     dscale_h(i) += sum_j dS_ij a_ij           (a = Q K^T / sqrt(hd) recomputed for the block: P alone
 *                                              cannot give it where scale_h(i) = 0)
 *     dV[parts] += P^T dO,  dQ[i0:i1] += dS' K[parts] / sqrt(hd),  dK[parts] += dS'^T Q[i0:i1] / sqrt(hd)
 *                                              with dS'_ij = scale_h(i) dS_ij
 * Tasks write disjoint column ranges of dqkv. The other gradients are summed per task into its own
 * double slice and the slices added in a fixed order afterwards (over b; for dphi and drscale over
 * b and h), so the result does not depend on the threads. */
BK_HOST_CLONES
int bk_attention_backward(float *dqkv, float *const dtable[BK_STREAM_COUNT], const float *dout, const float *qkv,
                          const float *probs, const bk_attention_bias *bias, int B, int T, int C, int H,
                          bk_error *err)
{
    if (!probs)
        return bk_fail(err, BK_ERR_INVALID, "attention backward: needs the probabilities saved by the forward pass");
    int32_t span[BK_STREAM_COUNT];
    int rc = bk_attention_check_args(bias, B, T, C, H, span, err);
    if (rc != BK_OK)
        return rc;
    const int hd = C / H, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hd);
    const terms tm = terms_of(bias, T);
    const int64_t ld = block_width(&tm, T);

    att_grads plan;
    bk_att_grads_plan(&plan, bias, dtable, &tm, span, T);
    const int n_grad = plan.n_grad, *grad = plan.grad, want_grid = plan.want_grid, want_scale = plan.want_scale,
              want_cpos = plan.want_cpos;
    const size_t width = plan.width, off_grid = plan.off_grid, off_phi = plan.off_phi, off_rs = plan.off_rs,
                 off_scale = plan.off_scale, off_cpos = plan.off_cpos, slice = plan.slice;

    /* per thread: dS; a (for dscale and the gates of counted positions); with counted positions the block's
     * logits l against the position vectors, their gradient dl, and one row's dL/da through the gates */
    const int cope = tm.cope != NULL, need_a = want_scale || cope;
    const size_t np = cope ? (size_t)tm.cope_points : 0;
    const size_t per_thread = (size_t)BK_ATT_BLOCK * (size_t)ld * (need_a ? 2 : 1) + (cope ? 2 * BK_ATT_BLOCK * np + (size_t)ld : 0);
    size_t dp_bytes = (size_t)omp_get_max_threads() * per_thread * sizeof(float);
    float *scratch = malloc(dp_bytes);
    double *acc = slice ? calloc((size_t)B * H * slice, sizeof *acc) : NULL;
    /* dL/dE per (b, h) task (np x hd floats, added block after block), summed over the tasks in order */
    float *dE = cope && bias->dcope ? calloc((size_t)B * H * np * (size_t)hd, sizeof *dE) : NULL;
    if (!scratch || (slice && !acc) || (cope && bias->dcope && !dE)) {
        free(scratch);
        free(acc);
        free(dE);
        return bk_fail(err, BK_ERR_NOMEM,
                       "attention backward: cannot allocate %zu bytes of score scratch and %zu bytes of "
                       "bias-gradient scratch",
                       dp_bytes, (size_t)B * H * slice * sizeof *acc);
    }
    heads hs;
    if ((rc = heads_alloc(&hs, &tm, T, hd, 2, "backward", err)) != BK_OK) {
        free(scratch);
        free(acc);
        free(dE);
        return rc;
    }

#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H;
        const size_t base = (size_t)b * T * C3 + (size_t)h * hd;
        const float *q = qkv + base, *k = q + C, *v = q + 2 * C;
        float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
        float *dS = scratch + (size_t)omp_get_thread_num() * per_thread;
        float *A = need_a ? dS + (size_t)BK_ATT_BLOCK * ld : NULL;
        float *cl = cope ? dS + (size_t)BK_ATT_BLOCK * ld * 2 : NULL, *dcl = cl ? cl + BK_ATT_BLOCK * np : NULL;
        float *gates = dcl ? dcl + BK_ATT_BLOCK * np : NULL;
        float *my_dE = dE ? dE + (size_t)bh * np * (size_t)hd : NULL;
        const bk_score_head hv = bk_score_head_of(&tm.st, b, h, H, T);
        const int32_t *gpos[BK_STREAM_COUNT];
        for (int g = 0; g < n_grad; g++)
            gpos[g] = bias->positions[grad[g]] ? bias->positions[grad[g]] + (size_t)b * T : NULL;
        double *my_acc = acc ? acc + (size_t)bh * slice : NULL;
        float *vt = NULL, *kt = heads_mine(&hs, k, v, T, hd, C3);
        if (kt)
            vt = kt + (size_t)hd * hs.ldt;

        for (int i0 = 0; i0 < T; i0 += BK_ATT_BLOCK) {
            const int i1 = i0 + BK_ATT_BLOCK < T ? i0 + BK_ATT_BLOCK : T, rows = i1 - i0;
            const block_keys kb = keys_of(i0, i1, &tm);
            const int ns = kb.ns, first = kb.first, nw = kb.nw;
            const float *P = probs + ((size_t)bh * T + i0) * T;
            const float *dO = dout + ((size_t)b * T + i0) * C + (size_t)h * hd;
            const float *qb = q + (size_t)i0 * C3, *kw = k + (size_t)first * C3, *vw = v + (size_t)first * C3;
            if (ns)
                prod(hs.kernels, 0, 1, rows, ns, hd, 1.0f, dO, C, v, C3, vt, hs.ldt, 0, dS, ld);
            prod(hs.kernels, 0, 1, rows, nw, hd, 1.0f, dO, C, vw, C3, vt ? vt + first : NULL, hs.ldt, 0, dS + ns, ld);
            if (A) {
                if (ns)
                    prod(hs.kernels, 0, 1, rows, ns, hd, scale, qb, C3, k, C3, kt, hs.ldt, 0, A, ld);
                prod(hs.kernels, 0, 1, rows, nw, hd, scale, qb, C3, kw, C3, kt ? kt + first : NULL, hs.ldt, 0,
                     A + ns, ld);
            }
            if (cl) { /* l = Q[i0:i1] E^T as the forward had it; dl starts at 0 */
                prod(hs.kernels, 0, 1, rows, (int)np, hd, 1.0f, qb, C3, tm.cope, hd, hs.Et, (ptrdiff_t)np, 0, cl,
                     (ptrdiff_t)np);
                memset(dcl, 0, (size_t)rows * np * sizeof *dcl);
            }
            for (int r = 0; r < rows; r++) {
                const int i = i0 + r;
                const row_keys rk = row_of(i, &kb, &tm);
                const float *Pi = P + (size_t)r * T, *Pw = Pi + first - ns; /* Pw[c]: column c >= ns */
                float *row = dS + (size_t)r * ld;
                double dot = bk_dot_lanes(Pi + first, row + ns, i + 1 - first);
                if (ns)
                    dot = bk_dot_lanes(Pi, row, ns) + dot;
                const float fdot = (float)dot;
                BK_OMP_SIMD
                for (int c = 0; c < ns; c++)
                    row[c] = Pi[c] * (row[c] - fdot);
                BK_OMP_SIMD
                for (int c = ns; c < rk.live; c++)
                    row[c] = Pw[c] * (row[c] - fdot);
                for (int c = rk.m0; c < rk.m1; c++)
                    row[c] = 0.0f;
                BK_OMP_SIMD
                for (int c = rk.live; c < ns + nw; c++)
                    row[c] = 0.0f;
                /* the visible columns: [0, ns), [ns, m0), [m1, live) */
                const int c0[3] = {0, ns, rk.m1}, c1[3] = {ns, rk.m0, rk.live};
                const int j0[3] = {0, first, first - ns + rk.m1};
                for (int g = 0; g < n_grad; g++)
                    for (int part = 0; part < 3; part++)
                        bk_score_table_grad(my_acc + (size_t)g * width, gpos[g], row + c0[part], i, j0[part],
                                            c1[part] - c0[part]);
                if (want_grid) {
                    double *drs = my_acc + off_rs + i;
                    for (int part = 0; part < 3; part++)
                        bk_score_grid_grad(my_acc + off_grid, my_acc + off_phi, drs, &hv, row + c0[part], i, j0[part],
                                           c1[part] - c0[part]);
                }
                if (want_scale) /* masked columns hold dS = 0 */
                    my_acc[off_scale + i] += bk_dot_lanes(row, A + (size_t)r * ld, rk.live);
                if (want_cpos) { /* each key's column sum, each query's row sum of dS (masked columns hold 0) */
                    double *keys = my_acc + off_cpos, sum = 0.0;
                    for (int c = 0; c < ns; c++)
                        keys[c] += row[c], sum += row[c];
                    for (int c = ns; c < rk.live; c++)
                        keys[first - ns + c] += row[c], sum += row[c];
                    my_acc[off_cpos + (size_t)T + (size_t)i] += sum;
                }
                if (cl)
                    counted_row_backward(row, A + (size_t)r * ld, i, &kb, &tm, cl + (size_t)r * np, dcl + (size_t)r * np,
                                         gates);
                if (hv.lam) {
                    const float lam = hv.lam[i];
                    BK_OMP_SIMD
                    for (int c = 0; c < rk.live; c++)
                        row[c] *= lam;
                }
                if (cl) /* dL/da: the score's (scaled) and the gates' */
                    for (int c = 0; c < rk.live; c++)
                        row[c] += gates[c];
            }
            if (ns)
                prod(hs.kernels, 1, 0, ns, hd, rows, 1.0f, P, T, dO, C, NULL, 0, 1, dv, C3);
            prod(hs.kernels, 1, 0, nw, hd, rows, 1.0f, P + first, T, dO, C, NULL, 0, 1, dv + (size_t)first * C3, C3);
            if (ns)
                prod(hs.kernels, 0, 0, rows, hd, ns, scale, dS, ld, k, C3, NULL, 0, 1, dq + (size_t)i0 * C3, C3);
            prod(hs.kernels, 0, 0, rows, hd, nw, scale, dS + ns, ld, kw, C3, NULL, 0, 1, dq + (size_t)i0 * C3, C3);
            if (ns)
                prod(hs.kernels, 1, 0, ns, hd, rows, scale, dS, ld, qb, C3, NULL, 0, 1, dk, C3);
            prod(hs.kernels, 1, 0, nw, hd, rows, scale, dS + ns, ld, qb, C3, NULL, 0, 1, dk + (size_t)first * C3, C3);
            if (cl) { /* through l = Q E^T: dQ += dl E, dE += dl^T Q */
                prod(hs.kernels, 0, 0, rows, hd, (int)np, 1.0f, dcl, (ptrdiff_t)np, tm.cope, hd, NULL, 0, 1,
                     dq + (size_t)i0 * C3, C3);
                if (my_dE)
                    prod(hs.kernels, 1, 0, (int)np, hd, rows, 1.0f, dcl, (ptrdiff_t)np, qb, C3, NULL, 0, 1, my_dE, hd);
            }
        }
    }

    bk_att_grads_reduce(&plan, acc, dtable, bias, &tm, span, B, H, T);
    if (dE) { /* dcope = sum over (b, h) = (0, 0), (0, 1), ... */
        const size_t n = np * (size_t)hd;
#pragma omp parallel for schedule(static)
        for (size_t e = 0; e < n; e++) {
            double sum = 0.0;
            for (int bh = 0; bh < B * H; bh++)
                sum += dE[(size_t)bh * n + e];
            bias->dcope[e] += (float)sum;
        }
    }
    free(scratch);
    free(acc);
    free(dE);
    heads_free(&hs);
    return BK_OK;
}
