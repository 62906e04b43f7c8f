/* Causal multi-head attention with additive distance-table biases, fp32 on the CPU (attention.h).
 *
 * One OpenMP task per (b, h). A task walks its queries in blocks of BLOCK rows; for the block [i0, i1)
 * only keys 0 .. i1-1 can be visited, so every product is an sgemm over that causal prefix:
 *     S = Q[i0:i1] K[0:i1]^T / sqrt(hd)      (block x i1)
 *     P = softmax_row(S + bias, j <= i)
 *     out[i0:i1] = P V[0:i1]
 * OpenBLAS runs single-threaded inside the parallel region, so each task is sequential and its result
 * is the same whichever thread runs it. */
#include "cpu/attention.h"

#include "model/host_simd.h"
#include "model/softmax_math.h"
#include "util/error.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

/* Query rows per block: BLOCK x T floats of scores per thread, and sgemms large enough to run near
 * peak; the masked triangle computed in vain is BLOCK / (2 T) of the work. */
#define BLOCK 64

_Static_assert(BK_STREAM_COUNT == 2, "stream_names lists the streams of BK_STREAM_CHOICES");
static const char *const stream_names[BK_STREAM_COUNT] = {"token", "segment"};

/* The tables and position rows that bias one (b, h): s[i][j] += tab[k][pos[k][i] - pos[k][j]], with
 * pos[k] == NULL meaning the token index. */
typedef struct row_bias {
    const float *tab[BK_STREAM_COUNT];
    const int32_t *pos[BK_STREAM_COUNT];
    int stream[BK_STREAM_COUNT];
    int n;
} row_bias;

static row_bias bias_for(const bk_attention_bias *bias, int b, int h, int T)
{
    row_bias rb = {.n = 0};
    if (!bias)
        return rb;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (!bias->table[s])
            continue;
        rb.tab[rb.n] = bias->table[s] + (size_t)h * bias->distances;
        rb.pos[rb.n] = bias->positions[s] ? bias->positions[s] + (size_t)b * T : NULL;
        rb.stream[rb.n] = s;
        rb.n++;
    }
    return rb;
}

/* Shapes, and every distance p_s(i) - p_s(j), j <= i, inside [0, distances). Positions are
 * non-decreasing, so per row b it is enough that consecutive positions do not decrease and that
 * p(T-1) - p(0) < distances. span[s] receives 1 + the largest distance met on stream s (0 when the
 * stream has no table): the table gradient never touches entries beyond it. */
static int check_args(const bk_attention_bias *bias, int B, int T, int C, int H, int32_t span[BK_STREAM_COUNT],
                      bk_error *err)
{
    if (B <= 0 || T <= 0 || C <= 0 || H <= 0 || C % H)
        return bk_fail(err, BK_ERR_INVALID,
                       "attention: need B, T, C, H > 0 and C divisible by H, got B=%d T=%d C=%d H=%d", B, T, C, H);
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
            if (far >= D) {
                int i = 0; /* the first query whose distance to key 0 leaves the table */
                if (p)
                    while ((int64_t)p[i] - p[0] < D)
                        i++;
                else
                    i = D > 0 ? (int)D : 0;
                return bk_fail(err, BK_ERR_INVALID,
                               "attention: stream '%s', batch row %d: distance p(i=%d) - p(j=0) = %lld is outside "
                               "the bias table, which holds distances 0 .. %lld",
                               stream_names[s], b, i, p ? (long long)p[i] - p[0] : (long long)i, (long long)D - 1);
            }
            if (far + 1 > span[s])
                span[s] = (int32_t)(far + 1);
        }
    }
    return BK_OK;
}

/* Row i of a score block (keys 0 .. i live, `width` columns in all): add the bias, then softmax in
 * place over j <= i (max subtracted so exp cannot overflow) and zero columns i+1 .. width-1. */
static inline BK_HOST_INLINE void softmax_row(float *row, int i, int width, const row_bias *rb)
{
    for (int k = 0; k < rb->n; k++) {
        const float *tab = rb->tab[k];
        const int32_t *p = rb->pos[k];
        if (p) {
            const int32_t pi = p[i];
            for (int j = 0; j <= i; j++)
                row[j] += tab[pi - p[j]];
        } else {
            BK_OMP_SIMD
            for (int j = 0; j <= i; j++)
                row[j] += tab[i - j];
        }
    }
    bk_causal_softmax_row(row, i + 1, width);
}

BK_HOST_CLONES
int bk_attention_forward(float *out, float *probs, const float *qkv, const bk_attention_bias *bias, int B, int T,
                         int C, int H, bk_error *err)
{
    int32_t span[BK_STREAM_COUNT];
    int rc = check_args(bias, B, T, C, H, span, err);
    if (rc != BK_OK)
        return rc;
    const int hd = C / H, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hd);

    /* Without probs, each thread keeps one block of scores; the team is at most max_threads wide. */
    float *scratch = NULL;
    if (!probs) {
        size_t bytes = (size_t)omp_get_max_threads() * BLOCK * T * sizeof *scratch;
        scratch = malloc(bytes);
        if (!scratch)
            return bk_fail(err, BK_ERR_NOMEM, "attention forward: cannot allocate %zu bytes of score scratch", bytes);
    }

#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H;
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hd, *k = q + C, *v = q + 2 * C;
        const row_bias rb = bias_for(bias, b, h, T);
        float *mine = scratch ? scratch + (size_t)omp_get_thread_num() * BLOCK * T : NULL;
        for (int i0 = 0; i0 < T; i0 += BLOCK) {
            const int i1 = i0 + BLOCK < T ? i0 + BLOCK : T, rows = i1 - i0;
            /* probs keeps whole rows (zeros past the diagonal); scratch only needs the i1 live columns */
            float *S = probs ? probs + ((size_t)bh * T + i0) * T : mine;
            const int width = probs ? T : i1;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, i1, hd, scale, q + (size_t)i0 * C3, C3, k, C3,
                        0.0f, S, T);
            for (int r = 0; r < rows; r++)
                softmax_row(S + (size_t)r * T, i0 + r, width, &rb);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, i1, 1.0f, S, T, v, C3, 0.0f,
                        out + ((size_t)b * T + i0) * C + (size_t)h * hd, C);
        }
    }
    free(scratch);
    return BK_OK;
}

/* Backward, with P from the forward pass and dO = dout for one (b, h), per block of rows [i0, i1):
 *     dP = dO V[0:i1]^T
 *     dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik)  (softmax Jacobian; 0 for j > i since P_ij = 0; the sum
 *                                              by bk_dot_lanes, in double)
 *     dV[0:i1] += P^T dO,  dQ[i0:i1] += dS K[0:i1] / sqrt(hd),  dK[0:i1] += dS^T Q[i0:i1] / sqrt(hd)
 *     G_s[h][p_s(i) - p_s(j)] += dS_ij   (the bias enters s unscaled)
 * Tasks write disjoint column ranges of dqkv. G is summed per task into its own double slice and the
 * slices are added over b in a fixed order afterwards, so the result does not depend on the threads. */
BK_HOST_CLONES
int bk_attention_backward(float *dqkv, float *const dtable[BK_STREAM_COUNT], const float *dout, const float *qkv,
                          const float *probs, const bk_attention_bias *bias, int B, int T, int C, int H,
                          bk_error *err)
{
    if (!probs)
        return bk_fail(err, BK_ERR_INVALID, "attention backward: needs the probabilities saved by the forward pass");
    int32_t span[BK_STREAM_COUNT];
    int rc = check_args(bias, B, T, C, H, span, err);
    if (rc != BK_OK)
        return rc;
    const int hd = C / H, C3 = 3 * C;
    const float scale = 1.0f / sqrtf((float)hd);

    /* Streams whose table gradient is wanted; each task's slice holds `width` distances per stream
     * (the largest that occurs, often far fewer than the table's row). */
    int grad[BK_STREAM_COUNT], n_grad = 0;
    size_t width = 0;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (dtable && dtable[s] && bias && bias->table[s]) {
            grad[n_grad++] = s;
            width = (size_t)span[s] > width ? (size_t)span[s] : width;
        }
    }
    const size_t slice = (size_t)n_grad * width; /* doubles per (b, h) task */

    size_t dp_bytes = (size_t)omp_get_max_threads() * BLOCK * T * sizeof(float);
    float *scratch = malloc(dp_bytes);
    double *acc = slice ? calloc((size_t)B * H * slice, sizeof *acc) : NULL;
    if (!scratch || (slice && !acc)) {
        free(scratch);
        free(acc);
        return bk_fail(err, BK_ERR_NOMEM,
                       "attention backward: cannot allocate %zu bytes of score scratch and %zu bytes of "
                       "table-gradient scratch",
                       dp_bytes, (size_t)B * H * slice * sizeof *acc);
    }

#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H;
        const size_t base = (size_t)b * T * C3 + (size_t)h * hd;
        const float *q = qkv + base, *k = q + C, *v = q + 2 * C;
        float *dq = dqkv + base, *dk = dq + C, *dv = dq + 2 * C;
        float *dS = scratch + (size_t)omp_get_thread_num() * BLOCK * T;
        const int32_t *gpos[BK_STREAM_COUNT];
        for (int g = 0; g < n_grad; g++)
            gpos[g] = bias->positions[grad[g]] ? bias->positions[grad[g]] + (size_t)b * T : NULL;
        double *my_acc = acc ? acc + (size_t)bh * slice : NULL;

        for (int i0 = 0; i0 < T; i0 += BLOCK) {
            const int i1 = i0 + BLOCK < T ? i0 + BLOCK : T, rows = i1 - i0;
            const float *P = probs + ((size_t)bh * T + i0) * T;
            const float *dO = dout + ((size_t)b * T + i0) * C + (size_t)h * hd;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, i1, hd, 1.0f, dO, C, v, C3, 0.0f, dS, T);
            for (int r = 0; r < rows; r++) {
                const int i = i0 + r;
                const float *Pi = P + (size_t)r * T;
                float *row = dS + (size_t)r * T;
                const float fdot = (float)bk_dot_lanes(Pi, row, i + 1);
                BK_OMP_SIMD
                for (int j = 0; j <= i; j++)
                    row[j] = Pi[j] * (row[j] - fdot);
                BK_OMP_SIMD
                for (int j = i + 1; j < i1; j++)
                    row[j] = 0.0f;
                for (int g = 0; g < n_grad; g++) {
                    double *G = my_acc + (size_t)g * width;
                    const int32_t *p = gpos[g];
                    if (p) {
                        const int32_t pi = p[i];
                        for (int j = 0; j <= i; j++)
                            G[pi - p[j]] += row[j];
                    } else {
                        BK_OMP_SIMD
                        for (int j = 0; j <= i; j++)
                            G[i - j] += row[j];
                    }
                }
            }
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hd, rows, 1.0f, P, T, dO, C, 1.0f, dv, C3);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, i1, scale, dS, T, k, C3, 1.0f,
                        dq + (size_t)i0 * C3, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hd, rows, scale, dS, T, q + (size_t)i0 * C3, C3,
                        1.0f, dk, C3);
        }
    }

    /* G_s[h] = sum over b = 0, 1, ... of the task slices: one (stream, head) per iteration */
    if (n_grad) {
        const size_t D = (size_t)bias->distances;
#pragma omp parallel for schedule(static)
        for (int gh = 0; gh < n_grad * H; gh++) {
            const int g = gh / H, h = gh % H;
            float *dst = dtable[grad[g]] + (size_t)h * D;
            for (size_t d = 0; d < (size_t)span[grad[g]]; d++) {
                double sum = 0.0;
                for (int b = 0; b < B; b++)
                    sum += acc[((size_t)b * H + h) * slice + (size_t)g * width + d];
                dst[d] += (float)sum;
            }
        }
    }
    free(scratch);
    free(acc);
    return BK_OK;
}
