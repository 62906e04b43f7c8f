#include "model/layers.h"
#include "model/gelu_math.h"
#include "model/host_simd.h"
#include "model/layernorm_math.h"
#include "model/llama_math.h"
#include "model/softmax_math.h"

#include "cpu/gemm.h"
#include <math.h>
#include <string.h>

/* columns summed together by the parameter-gradient loops (row-major reads, fixed order) */
#define COLUMN_BLOCK 64

void bk_encoder_forward(float *out, const int32_t *inp, const float *wte, int B, int T, int C)
{
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < (int64_t)B * T; n++)
        memcpy(out + n * C, wte + (size_t)inp[n] * (size_t)C, (size_t)C * sizeof(float));
}

void bk_encoder_backward(float *dwte, const float *dout, const int32_t *inp, int B, int T, int C)
{
    /* Tokens repeat, so rows of dwte receive several contributions: parallel over channels, and in
     * token order inside each channel, keeps the sums deterministic. */
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; c++)
        for (int64_t n = 0; n < (int64_t)B * T; n++)
            dwte[(size_t)inp[n] * (size_t)C + (size_t)c] += dout[n * C + c];
}

BK_HOST_CLONES
void bk_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                          const float *bias, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        bk_layernorm_row(out + (size_t)n * C, &mean[n], &rstd[n], inp + (size_t)n * C, weight, bias, C);
}

BK_HOST_CLONES
void bk_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                           const float *weight, const float *mean, const float *rstd, int N, int C)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        bk_layernorm_row_backward(dinp + (size_t)n * C, dout + (size_t)n * C, inp + (size_t)n * C, weight, mean[n],
                                  rstd[n], C);
    /* parameter gradients: blocks of channels in parallel, rows in order inside each (deterministic) */
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += COLUMN_BLOCK) {
        int nc = C - c0 < COLUMN_BLOCK ? C - c0 : COLUMN_BLOCK;
        double dw[COLUMN_BLOCK] = {0}, db[COLUMN_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            const float *dy = dout + (size_t)n * C + c0, *x = inp + (size_t)n * C + c0;
            for (int c = 0; c < nc; c++) {
                dw[c] += (double)((x[c] - mean[n]) * rstd[n]) * dy[c];
                db[c] += dy[c];
            }
        }
        for (int c = 0; c < nc; c++) {
            dweight[c0 + c] += (float)dw[c];
            dbias[c0 + c] += (float)db[c];
        }
    }
}

/* where row r of a headnorm's N G rows starts (model/layers.h); plain RMSNorm is G = 1, stride = C */
static inline size_t headnorm_row(int64_t r, int G, int hd, int stride)
{
    return (size_t)(r / G) * (size_t)stride + (size_t)(r % G) * (size_t)hd;
}

BK_HOST_CLONES
void bk_headnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int G, int hd,
                         int stride, float eps)
{
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < (int64_t)N * G; r++) {
        const size_t at = headnorm_row(r, G, hd, stride);
        bk_rmsnorm_row(out + at, &rstd[r], inp + at, weight, hd, eps);
    }
}

BK_HOST_CLONES
void bk_headnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                          const float *rstd, int N, int G, int hd, int stride, int accumulate)
{
    const int64_t rows = (int64_t)N * G;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const size_t at = headnorm_row(r, G, hd, stride);
        if (!accumulate) /* the row written: 0 + its gradient, as the device kernel computes it */
            memset(dinp + at, 0, (size_t)hd * sizeof(float));
        bk_rmsnorm_row_backward(dinp + at, dout + at, inp + at, weight, rstd[r], hd);
    }
    /* dw_c = sum_r dy x rstd: blocks of channels in parallel, rows in order inside each (deterministic) */
#pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < hd; c0 += COLUMN_BLOCK) {
        int nc = hd - c0 < COLUMN_BLOCK ? hd - c0 : COLUMN_BLOCK;
        double dw[COLUMN_BLOCK] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const size_t at = headnorm_row(r, G, hd, stride) + (size_t)c0;
            const float *dy = dout + at, *x = inp + at;
            for (int c = 0; c < nc; c++)
                dw[c] += bk_rmsnorm_dweight_term(x[c], rstd[r], dy[c]);
        }
        for (int c = 0; c < nc; c++)
            dweight[c0 + c] += (float)dw[c];
    }
}

void bk_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C, float eps)
{
    bk_headnorm_forward(out, rstd, inp, weight, N, 1, C, C, eps);
}

void bk_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                         const float *rstd, int N, int C)
{
    bk_headnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, 1, C, C, 1);
}

BK_HOST_CLONES
void bk_swiglu_forward(float *out, const float *inp, int N, int F)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F;
        float *h = out + (size_t)n * F;
        BK_OMP_SIMD
        for (int f = 0; f < F; f++)
            h[f] = bk_swiglu(g[f], u[f]);
    }
}

BK_HOST_CLONES
void bk_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *g = inp + (size_t)n * 2 * F, *u = g + F, *dh = dout + (size_t)n * F;
        float *dg = dinp + (size_t)n * 2 * F, *du = dg + F;
        BK_OMP_SIMD
        for (int f = 0; f < F; f++) {
            float a, b;
            bk_swiglu_grad(g[f], u[f], dh[f], &a, &b);
            dg[f] += a;
            du[f] += b;
        }
    }
}

void bk_gqa_expand(float *qkv, const float *qkvr, int N, int H, int KV, int hd)
{
    const size_t A = (size_t)H * hd, R = (size_t)(H + 2 * KV) * hd;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *src = qkvr + (size_t)n * R;
        float *dst = qkv + (size_t)n * 3 * A;
        memcpy(dst, src, A * sizeof *dst); /* q */
        for (int h = 0; h < H; h++) {
            const size_t g = (size_t)bk_gqa_kv_head(h, H, KV) * hd;
            memcpy(dst + A + (size_t)h * hd, src + A + g, (size_t)hd * sizeof *dst);                         /* k */
            memcpy(dst + 2 * A + (size_t)h * hd, src + A + (size_t)KV * hd + g, (size_t)hd * sizeof *dst); /* v */
        }
    }
}

void bk_gqa_reduce(float *dqkvr, const float *dqkv, int N, int H, int KV, int hd)
{
    const size_t A = (size_t)H * hd, R = (size_t)(H + 2 * KV) * hd;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *src = dqkv + (size_t)n * 3 * A;
        float *dst = dqkvr + (size_t)n * R;
        for (size_t c = 0; c < A; c++)
            dst[c] += src[c];
        for (int h = 0; h < H; h++) { /* the query heads of a group in ascending order */
            const size_t g = (size_t)bk_gqa_kv_head(h, H, KV) * hd;
            for (int d = 0; d < hd; d++) {
                dst[A + g + d] += src[A + (size_t)h * hd + d];
                dst[A + (size_t)KV * hd + g + d] += src[2 * A + (size_t)h * hd + d];
            }
        }
    }
}

void bk_copy_rows(float *dst, size_t dst_ld, const float *src, size_t src_ld, size_t rows, size_t width,
                  int accumulate)
{
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        float *d = dst + r * dst_ld;
        const float *x = src + r * src_ld;
        if (!accumulate) {
            memmove(d, x, width * sizeof *d);
            continue;
        }
        for (size_t c = 0; c < width; c++)
            d[c] += x[c];
    }
}

void bk_attention_merge(float *out, float *lse, const float *part, const float *part_lse, int B, int T, int lo, int C,
                        int H)
{
    const int hd = C / H, rows = T - lo;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H;
        for (int t = 0; t < rows; t++) {
            const int i = t + lo;
            float wa, wb;
            float *l = lse + (size_t)bh * T + i;
            *l = bk_lse_merge(*l, part_lse[(size_t)bh * rows + t], &wa, &wb);
            float *o = out + ((size_t)b * T + i) * C + (size_t)h * hd;
            const float *p = part + ((size_t)b * rows + t) * C + (size_t)h * hd;
            for (int d = 0; d < hd; d++)
                o[d] = wa * o[d] + wb * p[d];
        }
    }
}

BK_HOST_CLONES
void bk_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C, int OC)
{
    /* With a bias, out starts as the bias in every row and the product adds to it (accumulating): one
     * pass over out instead of a write of the product and an addition afterwards. */
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++)
            memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof *out);
    }
    bk_gemm(0, 1, N, OC, C, 1.0f, inp, C, weight, C, bias != NULL, out, OC);
}

BK_HOST_CLONES
void bk_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, int N, int C, int OC)
{
    /* dinp (N, C) += dout (N, OC) . weight (OC, C);  dweight (OC, C) += dout^T . inp (none for NULL) */
    bk_gemm(0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 1, dinp, C);
    if (dweight)
        bk_gemm(1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1, dweight, C);
    if (!dbias)
        return;
    /* Row by row over a block of columns: contiguous reads, and each column still sums n = 0..N-1 in
     * order (in double), so the result does not depend on the thread count. */
#pragma omp parallel for schedule(static)
    for (int o0 = 0; o0 < OC; o0 += COLUMN_BLOCK) {
        int no = OC - o0 < COLUMN_BLOCK ? OC - o0 : COLUMN_BLOCK;
        double acc[COLUMN_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            const float *row = dout + (size_t)n * OC + o0;
            for (int o = 0; o < no; o++)
                acc[o] += row[o];
        }
        for (int o = 0; o < no; o++)
            dbias[o0 + o] += (float)acc[o];
    }
}

/* GELU-tanh: the per-element formulas are in model/gelu_math.h, shared with the device kernels; on the
 * host they are branch-free float arithmetic, so the loops vectorise (omp simd). */
BK_HOST_CLONES
void bk_gelu_forward(float *out, const float *inp, size_t n)
{
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = bk_gelu(inp[i]);
}

BK_HOST_CLONES
void bk_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        dinp[i] += bk_gelu_grad(inp[i]) * dout[i];
}

BK_HOST_CLONES
void bk_residual_forward(float *out, const float *a, const float *b, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

BK_HOST_CLONES
void bk_residual_backward(float *da, float *db, const float *dout, size_t n)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

BK_HOST_CLONES
void bk_crossentropy_forward(float *losses, float *probs, const float *logits, const int32_t *targets, int N, int V)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        bk_crossentropy_row(logits + (size_t)n * V, V, targets[n], &losses[n], probs ? probs + (size_t)n * V : NULL);
    }
}

BK_HOST_CLONES
void bk_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets, float dloss, int N, int V)
{
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int v = 0; v < V; v++)
            dlogits[(size_t)n * V + v] = (probs[(size_t)n * V + v] - (v == targets[n] ? 1.0f : 0.0f)) * dloss;
}
