/* Kernel bodies of the device layers, the optimizer and the bias-table mixing (gpu/dev.h explains
 * the form: k_name(i, args) computes the outputs of thread index i, valid C11 and CUDA C++ at once).
 *
 * Every body is the device form of a CPU reference and keeps its arithmetic and, for every sum, its
 * order: the references are model/layers.c, train/adamw.c (train/adamw_math.h) and bias/mix.c. Where a sum over many rows
 * or values must be split to give the GPU enough threads, it is split into fixed chunks whose partial
 * sums (in double) a second kernel — or the host — adds up in chunk order, so the result depends only
 * on the data and the chunk size, never on thread counts or scheduling:
 *
 *   column sums over rows (LayerNorm dweight/dbias, RMSNorm dweight, matmul dbias): chunks of
 *       BK_DEV_ROW_CHUNK rows,
 *       partial[chunk][c] summed over the chunk's rows in order, then over chunks in order
 *       (k_column_sum), then added to the float gradient. The CPU sums all rows of a column in one
 *       double: the two differ only in the rounding of double additions (~1e-16 relative), which the
 *       final float conversion almost always hides;
 *   the gradient norm (sumsq): chunks of BK_NORM_CHUNK values, each summed in index order in double,
 *       then the chunk sums in chunk order — exactly adamw.c's grouping, hence equal bits;
 *   the mixing weights' gradients and first_nonfinite: chunks of BK_DEV_SCAN_CHUNK values.
 */
#ifndef BK_GPU_KERNELS_LAYERS_H
#define BK_GPU_KERNELS_LAYERS_H

#include "config/experiment.h"
#include "gpu/dev.h"
#include "gpu/mma.h"
#include "gpu/rows.h"
#include "model/gelu_math.h"
#include "model/layernorm_math.h"
#include "model/llama_math.h"
#include "model/rotary_math.h"
#include "model/softmax_math.h"
#include "train/adamw_math.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* Rows per partial sum of the column reductions. */
#define BK_DEV_ROW_CHUNK 32
/* Values per partial of the mixing weights' gradient and of first_nonfinite. */
#define BK_DEV_SCAN_CHUNK 1024

/* sum + x^2 in double, rounded after the product and after the sum as the CPU does: nvcc would fuse
 * the two into one FMA (a single rounding) and change the bits of the gradient norm. */
static inline BK_DEV_HD double k_add_square(double sum, float x)
{
#if defined(__CUDA_ARCH__)
    return __dadd_rn(sum, __dmul_rn((double)x, (double)x));
#else
    return sum + (double)x * (double)x;
#endif
}

/* isfinite() without relying on which overloads <math.h> offers in device code: NaN compares false,
 * +-inf exceeds FLT_MAX. */
static inline BK_DEV_HD int k_finite(float x)
{
    return fabsf(x) <= FLT_MAX;
}

/* --- encoder ----------------------------------------------------------------------------------- */

/* index (n, c) of (N, C): out[n, c] = wte[inp[n], c] */
typedef struct k_encoder_forward_args {
    float *out;
    const int32_t *inp;
    const float *wte;
    int64_t C;
} k_encoder_forward_args;

static inline BK_DEV_HD void k_encoder_forward(int64_t i, const void *args)
{
    const k_encoder_forward_args *a = (const k_encoder_forward_args *)args;
    int64_t n = i / a->C, c = i % a->C;
    a->out[i] = a->wte[(int64_t)a->inp[n] * a->C + c];
}

/* index (u, c) of (n_buckets, C): dwte[ids[u], c] += dout[t, c] for the bucket's tokens t in ascending
 * order, one float addition at a time — the CPU's loop over all tokens in order, restricted to the
 * tokens of one id, so the bits are the CPU's. Each (id, c) has one thread: no atomics. */
typedef struct k_encoder_backward_args {
    float *dwte;
    const float *dout;
    const int32_t *ids, *start, *tokens;
    int64_t C;
} k_encoder_backward_args;

static inline BK_DEV_HD void k_encoder_backward(int64_t i, const void *args)
{
    const k_encoder_backward_args *a = (const k_encoder_backward_args *)args;
    int64_t u = i / a->C, c = i % a->C;
    float *w = a->dwte + (int64_t)a->ids[u] * a->C + c;
    float acc = *w;
    for (int32_t j = a->start[u]; j < a->start[u + 1]; j++)
        acc += a->dout[(int64_t)a->tokens[j] * a->C + c];
    *w = acc;
}

/* --- layernorm --------------------------------------------------------------------------------- */

/* bk_layernorm_row (model/layernorm_math.h, the CPU layer's code) as a row program (gpu/rows.h),
 * K_ROWS_PER_CTA rows per block:
 * shared memory 2 * BK_CTA_THREADS doubles (the lane sums of x, then of its squared deviations) */
typedef struct k_layernorm_forward_args {
    float *out, *mean, *rstd;
    uint16_t *out16; /* not NULL: the output rounded to bf16 there instead of out (bf16 storage) */
    const float *inp, *weight, *bias;
    int64_t N, C;
} k_layernorm_forward_args;

#define K_LAYERNORM_SMEM_BYTES (2 * BK_CTA_THREADS * sizeof(double))

static inline BK_DEV_HD void k_layernorm_forward(int64_t cta, const void *args, float *smem)
{
    const k_layernorm_forward_args *a = (const k_layernorm_forward_args *)args;
    const int64_t C = a->C, n0 = cta * K_ROWS_PER_CTA;
    const int rows = k_rows_of(cta, a->N);
    double *lm = (double *)smem, *lv = lm + BK_CTA_THREADS;
    BK_CTA_PHASE(t)
    {
        const int r = t / BK_SUM_LANES;
        if (r >= rows)
            continue;
        const float *x = a->inp + (n0 + r) * C;
        double acc = 0.0;
        for (int64_t c = t % BK_SUM_LANES; c < C; c += BK_SUM_LANES)
            acc += x[c];
        lm[t] = acc;
    }
    BK_CTA_PHASE(t)
    {
        const int r = t / BK_SUM_LANES;
        if (r >= rows)
            continue;
        const float *x = a->inp + (n0 + r) * C;
        const double m = bk_layernorm_lanes_mean(lm + r * BK_SUM_LANES, C);
        double acc = 0.0;
        for (int64_t c = t % BK_SUM_LANES; c < C; c += BK_SUM_LANES)
            acc += bk_layernorm_square(x[c], m);
        lv[t] = acc;
    }
    BK_CTA_PHASE(t)
    {
        for (int r = 0; r < rows; r++) {
            const int64_t n = n0 + r;
            const float *x = a->inp + n * C;
            const double m = bk_layernorm_lanes_mean(lm + r * BK_SUM_LANES, C);
            const float s = bk_layernorm_rstd(bk_layernorm_lanes_mean(lv + r * BK_SUM_LANES, C));
            for (int64_t c = t; c < C; c += BK_CTA_THREADS) {
                const float y = bk_layernorm_y(x[c], m, s, a->weight[c], a->bias[c]);
                if (a->out16)
                    a->out16[n * C + c] = bk_bf16_round(y);
                else
                    a->out[n * C + c] = y;
            }
            if (t == 0)
                a->mean[n] = (float)m, a->rstd[n] = s;
        }
    }
}

/* dinp += bk_layernorm_row_backward (model/layernorm_math.h, the CPU layer's code) as a row program
 * (gpu/rows.h), K_ROWS_PER_CTA rows per block: shared memory 2 * BK_CTA_THREADS doubles (the lane sums of dnorm and dnorm * norm) */
typedef struct k_layernorm_backward_args {
    float *dinp;
    double *part_w, *part_b; /* (chunks, C) partials of dweight and dbias */
    const float *dout, *inp, *weight, *mean, *rstd;
    int64_t N, C;
} k_layernorm_backward_args;

static inline BK_DEV_HD void k_layernorm_backward_dinp(int64_t cta, const void *args, float *smem)
{
    const k_layernorm_backward_args *a = (const k_layernorm_backward_args *)args;
    const int64_t C = a->C, n0 = cta * K_ROWS_PER_CTA;
    const int rows = k_rows_of(cta, a->N);
    double *lmean = (double *)smem, *ldot = lmean + BK_CTA_THREADS;
    BK_CTA_PHASE(t)
    {
        const int r = t / BK_SUM_LANES;
        const int64_t n = n0 + r;
        if (r >= rows)
            continue;
        const float *x = a->inp + n * C, *dy = a->dout + n * C;
        double sm = 0.0, sd = 0.0;
        for (int64_t c = t % BK_SUM_LANES; c < C; c += BK_SUM_LANES) {
            float norm, dnorm;
            bk_layernorm_dterms(x[c], dy[c], a->weight[c], a->mean[n], a->rstd[n], &norm, &dnorm);
            sm += dnorm;
            sd += dnorm * norm;
        }
        lmean[t] = sm, ldot[t] = sd;
    }
    BK_CTA_PHASE(t)
    {
        for (int r = 0; r < rows; r++) {
            const int64_t n = n0 + r;
            const float *x = a->inp + n * C, *dy = a->dout + n * C, mean = a->mean[n], rstd = a->rstd[n];
            const float dnorm_mean = (float)bk_layernorm_lanes_mean(lmean + r * BK_SUM_LANES, C);
            const float dnorm_norm_mean = (float)bk_layernorm_lanes_mean(ldot + r * BK_SUM_LANES, C);
            for (int64_t c = t; c < C; c += BK_CTA_THREADS) {
                float norm, dnorm;
                bk_layernorm_dterms(x[c], dy[c], a->weight[c], mean, rstd, &norm, &dnorm);
                a->dinp[n * C + c] += bk_layernorm_dx(norm, dnorm, dnorm_mean, dnorm_norm_mean, rstd);
            }
        }
    }
}

/* index (chunk, c) of (ceil(N / BK_DEV_ROW_CHUNK), C): the chunk's rows in order, in double:
 * part_w = sum norm * dy, part_b = sum dy (first stage of dweight, dbias; k_column_sum is the second) */
static inline BK_DEV_HD void k_layernorm_backward_params(int64_t i, const void *args)
{
    const k_layernorm_backward_args *a = (const k_layernorm_backward_args *)args;
    const int64_t C = a->C, chunk = i / C, c = i % C;
    const int64_t lo = chunk * BK_DEV_ROW_CHUNK, hi = lo + BK_DEV_ROW_CHUNK < a->N ? lo + BK_DEV_ROW_CHUNK : a->N;
    double dw = 0.0, db = 0.0;
    for (int64_t n = lo; n < hi; n++) {
        float dy = a->dout[n * C + c];
        dw += (double)((a->inp[n * C + c] - a->mean[n]) * a->rstd[n]) * dy;
        db += dy;
    }
    a->part_w[i] = dw;
    a->part_b[i] = db;
}

/* --- RMSNorm, SwiGLU, grouped-query heads (the llama family) ------------------------------------ */

/* bk_rmsnorm_row (model/llama_math.h, the CPU layer's code) as a row program (gpu/rows.h),
 * K_ROWS_PER_CTA rows per block: shared memory BK_CTA_THREADS doubles (the lane sums of the squares).
 * Backward, the same form for dinp (the lane sums of bk_rmsnorm_dterm), then the weight gradient as
 * LayerNorm's: per-chunk partials (k_rmsnorm_backward_params), summed over chunks by k_column_sum.
 * Row r of the N rows starts at k_rmsnorm_at (bk_headnorm_forward's layout, model/layers.h): G rows per
 * stride floats; plain RMSNorm is G = 1, stride = C. */
typedef struct k_rmsnorm_args {
    float *out, *rstd, *dinp;
    double *part_w; /* (chunks, C) partials of dweight */
    const float *inp, *weight, *dout, *rstd_in;
    float eps;
    int64_t N, C;      /* rows (tokens x G), channels per row */
    int64_t G, stride; /* rows per token, floats per token */
    int accumulate;    /* backward: dinp's rows += their gradient (1) or = 0 + it (0) */
} k_rmsnorm_args;

/* where row r starts in inp, out, dout and dinp */
static inline BK_DEV_HD int64_t k_rmsnorm_at(const k_rmsnorm_args *a, int64_t r)
{
    return (r / a->G) * a->stride + (r % a->G) * a->C;
}

#define K_RMSNORM_SMEM_BYTES (BK_CTA_THREADS * sizeof(double))

static inline BK_DEV_HD void k_rmsnorm_forward(int64_t cta, const void *args, float *smem)
{
    const k_rmsnorm_args *a = (const k_rmsnorm_args *)args;
    const int64_t C = a->C, n0 = cta * K_ROWS_PER_CTA;
    const int rows = k_rows_of(cta, a->N);
    double *lane = (double *)smem;
    BK_CTA_PHASE(t)
    {
        const int r = t / BK_SUM_LANES;
        if (r >= rows)
            continue;
        const float *x = a->inp + k_rmsnorm_at(a, n0 + r);
        double acc = 0.0;
        for (int64_t c = t % BK_SUM_LANES; c < C; c += BK_SUM_LANES)
            acc += bk_rmsnorm_square(x[c]);
        lane[t] = acc;
    }
    BK_CTA_PHASE(t)
    {
        for (int r = 0; r < rows; r++) {
            const int64_t n = n0 + r, at = k_rmsnorm_at(a, n);
            const float *x = a->inp + at;
            const float s = bk_rmsnorm_lanes_rstd(lane + r * BK_SUM_LANES, C, a->eps);
            for (int64_t c = t; c < C; c += BK_CTA_THREADS)
                a->out[at + c] = bk_rmsnorm_y(x[c], s, a->weight[c]);
            if (t == 0)
                a->rstd[n] = s;
        }
    }
}

/* dinp += bk_rmsnorm_row_backward (model/llama_math.h) */
static inline BK_DEV_HD void k_rmsnorm_backward_dinp(int64_t cta, const void *args, float *smem)
{
    const k_rmsnorm_args *a = (const k_rmsnorm_args *)args;
    const int64_t C = a->C, n0 = cta * K_ROWS_PER_CTA;
    const int rows = k_rows_of(cta, a->N);
    double *lane = (double *)smem;
    BK_CTA_PHASE(t)
    {
        const int r = t / BK_SUM_LANES;
        if (r >= rows)
            continue;
        const int64_t at = k_rmsnorm_at(a, n0 + r);
        const float *x = a->inp + at, *dy = a->dout + at;
        double acc = 0.0;
        for (int64_t c = t % BK_SUM_LANES; c < C; c += BK_SUM_LANES)
            acc += bk_rmsnorm_dterm(x[c], dy[c], a->weight[c]);
        lane[t] = acc;
    }
    BK_CTA_PHASE(t)
    {
        for (int r = 0; r < rows; r++) {
            const int64_t n = n0 + r, at = k_rmsnorm_at(a, n);
            const float *x = a->inp + at, *dy = a->dout + at, rstd = a->rstd_in[n];
            const float k = bk_rmsnorm_lanes_k(lane + r * BK_SUM_LANES, C, rstd);
            for (int64_t c = t; c < C; c += BK_CTA_THREADS)
                a->dinp[at + c] =
                    (a->accumulate ? a->dinp[at + c] : 0.0f) + bk_rmsnorm_dx(x[c], dy[c], a->weight[c], rstd, k);
        }
    }
}

/* index (chunk, c) of (ceil(N / BK_DEV_ROW_CHUNK), C): part_w = the chunk's rows' bk_rmsnorm_dweight_term
 * in order, in double (first stage of dweight; k_column_sum is the second) */
static inline BK_DEV_HD void k_rmsnorm_backward_params(int64_t i, const void *args)
{
    const k_rmsnorm_args *a = (const k_rmsnorm_args *)args;
    const int64_t C = a->C, chunk = i / C, c = i % C;
    const int64_t lo = chunk * BK_DEV_ROW_CHUNK, hi = lo + BK_DEV_ROW_CHUNK < a->N ? lo + BK_DEV_ROW_CHUNK : a->N;
    double dw = 0.0;
    for (int64_t n = lo; n < hi; n++) {
        const int64_t at = k_rmsnorm_at(a, n) + c;
        dw += bk_rmsnorm_dweight_term(a->inp[at], a->rstd_in[n], a->dout[at]);
    }
    a->part_w[i] = dw;
}

/* index (n, f) of (N, F): rows of inp are (gate | up), 2F wide (model/layers.h) */
typedef struct k_swiglu_args {
    float *out;        /* forward: h (N, F); backward: dinp (N, 2F), accumulated */
    const float *inp;  /* (N, 2F) */
    const float *dout; /* backward: dh (N, F) */
    int64_t F;
} k_swiglu_args;

/* h = bk_swiglu(gate, up) */
static inline BK_DEV_HD void k_swiglu_forward(int64_t i, const void *args)
{
    const k_swiglu_args *a = (const k_swiglu_args *)args;
    const int64_t n = i / a->F, f = i % a->F;
    const float *g = a->inp + n * 2 * a->F;
    a->out[i] = bk_swiglu(g[f], g[a->F + f]);
}

/* dgate, dup += bk_swiglu_grad: index (n, f) writes dinp[n, f] and dinp[n, F + f] only */
static inline BK_DEV_HD void k_swiglu_backward(int64_t i, const void *args)
{
    const k_swiglu_args *a = (const k_swiglu_args *)args;
    const int64_t n = i / a->F, f = i % a->F;
    const float *g = a->inp + n * 2 * a->F;
    float *d = a->out + n * 2 * a->F;
    float dg, du;
    bk_swiglu_grad(g[f], g[a->F + f], a->dout[i], &dg, &du);
    d[f] += dg;
    d[a->F + f] += du;
}

/* Position views (model/views.h; model/layers.c's bk_copy_rows and bk_attention_merge). */
typedef struct k_copy_rows_args {
    float *dst;
    const float *src;
    int64_t dst_ld, src_ld, width, accumulate;
} k_copy_rows_args;

/* index (r, c) of rows x width */
static inline BK_DEV_HD void k_copy_rows(int64_t i, const void *args)
{
    const k_copy_rows_args *a = (const k_copy_rows_args *)args;
    const int64_t r = i / a->width, c = i % a->width;
    const float x = a->src[r * a->src_ld + c];
    float *d = a->dst + r * a->dst_ld + c;
    *d = a->accumulate ? *d + x : x;
}

typedef struct k_merge_args {
    float *out, *lse;
    const float *part, *part_lse;
    int64_t T, lo, C, H;
} k_merge_args;

/* index (b, t, c) of (B, T - lo, C): row i = t + lo of out, its weights from the two log-sum-exps (the
 * rows' lse are merged afterwards, k_merge_lse) */
static inline BK_DEV_HD void k_merge_out(int64_t i, const void *args)
{
    const k_merge_args *a = (const k_merge_args *)args;
    const int64_t rows = a->T - a->lo, c = i % a->C, t = (i / a->C) % rows, b = i / (a->C * rows);
    const int64_t h = c / (a->C / a->H), bh = b * a->H + h;
    float wa, wb;
    (void)bk_lse_merge(a->lse[bh * a->T + t + a->lo], a->part_lse[bh * rows + t], &wa, &wb);
    float *o = a->out + (b * a->T + t + a->lo) * a->C + c;
    *o = wa * *o + wb * a->part[(b * rows + t) * a->C + c];
}

/* index (b, h, t) of (B, H, T - lo) */
static inline BK_DEV_HD void k_merge_lse(int64_t i, const void *args)
{
    const k_merge_args *a = (const k_merge_args *)args;
    const int64_t rows = a->T - a->lo, t = i % rows, bh = i / rows;
    float wa, wb;
    float *l = a->lse + bh * a->T + t + a->lo;
    *l = bk_lse_merge(*l, a->part_lse[bh * rows + t], &wa, &wb);
}

/* The q/k/v product's rows hold R = (H + 2 KV) hd values (q of H heads, k and v of KV); the attention reads
 * 3 A, A = H hd, with key/value head bk_gqa_kv_head(h) in head h's place (model/layers.h, bk_gqa_expand). */
typedef struct k_gqa_args {
    float *out;       /* expand: qkv (N, 3A); reduce: dqkvr (N, R), accumulated */
    const float *inp; /* expand: qkvr (N, R); reduce: dqkv (N, 3A) */
    int64_t H, KV, hd;
} k_gqa_args;

/* index (n, j) of (N, 3A): a copy */
static inline BK_DEV_HD void k_gqa_expand(int64_t i, const void *args)
{
    const k_gqa_args *a = (const k_gqa_args *)args;
    const int64_t A = a->H * a->hd, R = (a->H + 2 * a->KV) * a->hd, n = i / (3 * A), j = i % (3 * A);
    const int64_t part = j / A, h = (j % A) / a->hd, d = j % a->hd;
    const float *src = a->inp + n * R;
    const int64_t g = (int64_t)bk_gqa_kv_head((int)h, (int)a->H, (int)a->KV) * a->hd;
    a->out[i] = part == 0 ? src[j] : src[A + (part - 1) * a->KV * a->hd + g + d];
}

/* index (n, j) of (N, R): a q entry adds its one gradient; a k or v entry of key/value head g those of the
 * query heads that read it, in ascending order of h, one float addition at a time (the CPU's order) */
static inline BK_DEV_HD void k_gqa_reduce(int64_t i, const void *args)
{
    const k_gqa_args *a = (const k_gqa_args *)args;
    const int64_t A = a->H * a->hd, R = (a->H + 2 * a->KV) * a->hd, n = i / R, j = i % R;
    const float *src = a->inp + n * 3 * A;
    if (j < A) {
        a->out[i] += src[j];
        return;
    }
    const int64_t part = (j - A) / (a->KV * a->hd), g = ((j - A) % (a->KV * a->hd)) / a->hd, d = j % a->hd;
    float acc = a->out[i];
    for (int64_t h = 0; h < a->H; h++)
        if (bk_gqa_kv_head((int)h, (int)a->H, (int)a->KV) == g)
            acc += src[(1 + part) * A + h * a->hd + d];
    a->out[i] = acc;
}

/* --- column reductions (matmul dbias; second stage of every column sum) ------------------------- */

/* index (chunk, c) of (ceil(N / BK_DEV_ROW_CHUNK), C): part[chunk, c] = sum of x[n, c] over the
 * chunk's rows in order, in double */
typedef struct k_column_partials_args {
    double *part;
    const float *x;
    int64_t N, C;
} k_column_partials_args;

static inline BK_DEV_HD void k_column_partials(int64_t i, const void *args)
{
    const k_column_partials_args *a = (const k_column_partials_args *)args;
    const int64_t C = a->C, chunk = i / C, c = i % C;
    const int64_t lo = chunk * BK_DEV_ROW_CHUNK, hi = lo + BK_DEV_ROW_CHUNK < a->N ? lo + BK_DEV_ROW_CHUNK : a->N;
    double acc = 0.0;
    for (int64_t n = lo; n < hi; n++)
        acc += a->x[n * C + c];
    a->part[i] = acc;
}

/* index c: out[c] += (float)(sum of part[chunk, c] over chunks in order) */
typedef struct k_column_sum_args {
    float *out;
    const double *part;
    int64_t chunks, C;
} k_column_sum_args;

static inline BK_DEV_HD void k_column_sum(int64_t c, const void *args)
{
    const k_column_sum_args *a = (const k_column_sum_args *)args;
    double acc = 0.0;
    for (int64_t k = 0; k < a->chunks; k++)
        acc += a->part[k * a->C + c];
    a->out[c] += (float)acc;
}

/* --- matmul bias ------------------------------------------------------------------------------- */

/* index (n, o) of (N, OC): out[n, o] += bias[o], after the GEMM (the CPU starts its sgemm from the bias
 * instead) */
typedef struct k_bias_add_args {
    float *out;
    const float *bias;
    int64_t OC;
} k_bias_add_args;

static inline BK_DEV_HD void k_bias_add(int64_t i, const void *args)
{
    const k_bias_add_args *a = (const k_bias_add_args *)args;
    a->out[i] += a->bias[i % a->OC];
}

/* --- elementwise ------------------------------------------------------------------------------- */

typedef struct k_unary_args {
    float *out;
    const float *x, *dout;
    float s;
} k_unary_args;

/* out = GELU(x) */
static inline BK_DEV_HD void k_gelu_forward(int64_t i, const void *args)
{
    const k_unary_args *a = (const k_unary_args *)args;
    a->out[i] = bk_gelu(a->x[i]);
}

/* bf16 storage ([run] precision = "bf16"): out = bf16(x), and out = bf16(GELU(x)), rounded to nearest
 * even (gpu/mma.h) */
typedef struct k_bf16_args {
    uint16_t *out;
    const float *x;
} k_bf16_args;

static inline BK_DEV_HD void k_cast_bf16(int64_t i, const void *args)
{
    const k_bf16_args *a = (const k_bf16_args *)args;
    a->out[i] = bk_bf16_round(a->x[i]);
}

static inline BK_DEV_HD void k_gelu_forward_bf16(int64_t i, const void *args)
{
    const k_bf16_args *a = (const k_bf16_args *)args;
    a->out[i] = bk_bf16_round(bk_gelu(a->x[i]));
}

/* out (dinp) += GELU'(x) dout */
static inline BK_DEV_HD void k_gelu_backward(int64_t i, const void *args)
{
    const k_unary_args *a = (const k_unary_args *)args;
    a->out[i] += bk_gelu_grad(a->x[i]) * a->dout[i];
}

/* out *= s (gradient clipping) */
static inline BK_DEV_HD void k_scale(int64_t i, const void *args)
{
    const k_unary_args *a = (const k_unary_args *)args;
    a->out[i] *= a->s;
}

typedef struct k_residual_args {
    float *out, *out2;
    const float *a, *b;
} k_residual_args;

/* out = a + b */
static inline BK_DEV_HD void k_residual_forward(int64_t i, const void *args)
{
    const k_residual_args *r = (const k_residual_args *)args;
    r->out[i] = r->a[i] + r->b[i];
}

/* out (da) += a (dout), out2 (db) += a (dout) */
static inline BK_DEV_HD void k_residual_backward(int64_t i, const void *args)
{
    const k_residual_args *r = (const k_residual_args *)args;
    r->out[i] += r->a[i];
    r->out2[i] += r->a[i];
}

/* --- softmax + cross-entropy ------------------------------------------------------------------- */

typedef struct k_crossentropy_args {
    float *losses, *probs, *dlogits;
    const float *logits, *probs_in;
    const int32_t *targets;
    float dloss;
    int64_t N, V;
} k_crossentropy_args;

/* bk_crossentropy_row (model/softmax_math.h, the CPU layer's code) — max in float, the exps in float,
 * their sum in double by lanes, loss = log(total) - (z[target] - max), probabilities when asked — as a
 * row program (gpu/rows.h), K_ROWS_PER_CTA rows per block: shared memory BK_CTA_THREADS floats (the lanes' maxima) and as many
 * doubles (their sums) */
#define K_CROSSENTROPY_SMEM_BYTES (BK_CTA_THREADS * (sizeof(float) + sizeof(double)))

static inline BK_DEV_HD void k_crossentropy_forward(int64_t cta, const void *args, float *smem)
{
    const k_crossentropy_args *a = (const k_crossentropy_args *)args;
    const int64_t V = a->V, n0 = cta * K_ROWS_PER_CTA;
    const int rows = k_rows_of(cta, a->N);
    double *lsum = (double *)smem;
    float *lmax = smem + 2 * BK_CTA_THREADS;
    BK_CTA_PHASE(t)
    {
        const int r = t / BK_SUM_LANES;
        if (r >= rows)
            continue;
        const float *z = a->logits + (n0 + r) * V;
        float m = -INFINITY;
        for (int64_t v = t % BK_SUM_LANES; v < V; v += BK_SUM_LANES)
            m = bk_lane_max(m, z[v]);
        lmax[t] = m;
    }
    BK_CTA_PHASE(t)
    {
        const int r = t / BK_SUM_LANES;
        if (r >= rows)
            continue;
        const float *z = a->logits + (n0 + r) * V, m = bk_max_of_lanes(lmax + r * BK_SUM_LANES);
        double acc = 0.0;
        for (int64_t v = t % BK_SUM_LANES; v < V; v += BK_SUM_LANES)
            acc += bk_ce_term(z[v], m);
        lsum[t] = acc;
    }
    BK_CTA_PHASE(t)
    {
        for (int r = 0; r < rows; r++) {
            const int64_t n = n0 + r;
            const float *z = a->logits + n * V, m = bk_max_of_lanes(lmax + r * BK_SUM_LANES);
            const double total = BK_LANES_TOTAL(lsum + r * BK_SUM_LANES);
            if (t == 0)
                a->losses[n] = bk_ce_loss(total, z[a->targets[n]], m);
            if (!a->probs)
                continue;
            const float inv = bk_ce_inv(total);
            for (int64_t v = t; v < V; v += BK_CTA_THREADS)
                a->probs[n * V + v] = bk_ce_prob(z[v], m, inv);
        }
    }
}

/* index (n, v): dlogits = (probs - onehot(target)) dloss, overwritten */
static inline BK_DEV_HD void k_crossentropy_backward(int64_t i, const void *args)
{
    const k_crossentropy_args *a = (const k_crossentropy_args *)args;
    const int64_t n = i / a->V, v = i % a->V;
    a->dlogits[i] = (a->probs_in[i] - (v == (int64_t)a->targets[n] ? 1.0f : 0.0f)) * a->dloss;
}

/* --- rotary ------------------------------------------------------------------------------------ */

/* index (n, part, h, k) of (B*T, 2, H, pairs): rotate pair k = (x[k], x[k + pairs]) of head h of q
 * (part 0) or k (part 1) in qkv (N, 3C) by the angles of token n's position (positions[n], or n % T)
 * (model/positions.c rotate). One pair per thread: the pairs are independent, so the bits are those of
 * any order (the first version gave each token's 2 H pairs-long loop to one thread). */
typedef struct k_rotary_args {
    float *qkv;
    const float *cos, *sin;
    const float *kcos, *ksin; /* k's tables, or NULL: q's */
    const int32_t *positions;
    int64_t T, C, H, pairs;
    float sign;
} k_rotary_args;

static inline BK_DEV_HD void k_rotary(int64_t i, const void *args)
{
    const k_rotary_args *a = (const k_rotary_args *)args;
    const int64_t half = a->pairs, k = i % half, h = (i / half) % a->H, part = (i / (half * a->H)) % 2;
    const int64_t n = i / (half * a->H * 2);
    const int64_t p = a->positions ? (int64_t)a->positions[n] : n % a->T;
    float *x = a->qkv + n * 3 * a->C + part * a->C + h * (a->C / a->H);
    const float *c = part && a->kcos ? a->kcos : a->cos, *sn = part && a->ksin ? a->ksin : a->sin;
    bk_rotate_pair(&x[k], &x[k + half], c[p * half + k], a->sign * sn[p * half + k]);
}

/* --- reductions to the host ---------------------------------------------------------------------- */

/* index chunk: part[chunk] = sum of x[k]^2 over the chunk's BK_NORM_CHUNK values in index order, in
 * double (train/adamw.c bk_adamw_grad_norm's first level) */
typedef struct k_sumsq_args {
    double *part;
    const float *x;
    int64_t n, chunk;
} k_sumsq_args;

static inline BK_DEV_HD void k_sumsq_partials(int64_t i, const void *args)
{
    const k_sumsq_args *a = (const k_sumsq_args *)args;
    const int64_t lo = i * a->chunk, hi = lo + a->chunk < a->n ? lo + a->chunk : a->n;
    double sum = 0.0;
    for (int64_t k = lo; k < hi; k++)
        sum = k_add_square(sum, a->x[k]);
    a->part[i] = sum;
}

/* index r: out[r] = sum of part[r * count + j] over j in order (the second level of a chunked sum) */
typedef struct k_sum_rows_args {
    double *out;
    const double *part;
    int64_t count;
} k_sum_rows_args;

static inline BK_DEV_HD void k_sum_rows(int64_t r, const void *args)
{
    const k_sum_rows_args *a = (const k_sum_rows_args *)args;
    double sum = 0.0;
    for (int64_t j = 0; j < a->count; j++)
        sum += a->part[r * a->count + j];
    a->out[r] = sum;
}

/* index chunk: part[chunk] = the first k of the chunk's BK_DEV_SCAN_CHUNK values with x[k] not
 * finite, or -1; k_first_index (one index) then takes the first chunk's answer that is not -1 */
typedef struct k_nonfinite_args {
    int64_t *part, *out;
    const float *x;
    int64_t n, chunks;
} k_nonfinite_args;

static inline BK_DEV_HD void k_nonfinite_partials(int64_t i, const void *args)
{
    const k_nonfinite_args *a = (const k_nonfinite_args *)args;
    const int64_t lo = i * BK_DEV_SCAN_CHUNK, hi = lo + BK_DEV_SCAN_CHUNK < a->n ? lo + BK_DEV_SCAN_CHUNK : a->n;
    int64_t found = -1;
    for (int64_t k = lo; k < hi && found < 0; k++)
        if (!k_finite(a->x[k]))
            found = k;
    a->part[i] = found;
}

static inline BK_DEV_HD void k_first_index(int64_t i, const void *args)
{
    const k_nonfinite_args *a = (const k_nonfinite_args *)args;
    int64_t found = -1;
    for (int64_t c = 0; c < a->chunks && found < 0; c++)
        found = a->part[c];
    a->out[i] = found;
}

/* --- AdamW ------------------------------------------------------------------------------------- */

/* index k: one AdamW update (train/adamw_math.h, the host loops' formula: the same fp32 bits where the
 * compiler does not contract it into FMAs) */
typedef struct k_adamw_args {
    float *param, *m, *v;
    const float *grad;
    float lr, beta1, beta2, eps, weight_decay, bc1, bc2;
} k_adamw_args;

static inline BK_DEV_HD void k_adamw(int64_t k, const void *args)
{
    const k_adamw_args *a = (const k_adamw_args *)args;
    bk_adamw_update(&a->param[k], a->grad[k], &a->m[k], &a->v[k], a->lr, a->beta1, a->beta2, a->eps,
                    a->weight_decay, a->bc1, a->bc2);
}

/* --- mixing of bias tables (bias/mix.c) ------------------------------------------------------------ */

typedef struct k_mix_args {
    const float *const *tables;  /* n_terms device pointers, in device memory */
    float *const *dtables;       /* n_terms device pointers (entries may be NULL), or NULL */
    const double *weights;       /* n_terms, in device memory */
    const float *mixed, *dout;
    float *out;
    double *part;                /* (n_terms, chunks) partials of the weights' gradients */
    int64_t n, chunks;
    int n_terms, mode;           /* bk_mixing */
} k_mix_args;

/* Whether term t takes part: every term when summing, terms of weight > 0 in kernel mode. */
static inline BK_DEV_HD int k_mix_active(const k_mix_args *a, int t)
{
    return a->mode == BK_MIX_SUM || a->weights[t] > 0.0;
}

/* dM/dw_t at k: T_t (sum) or exp(T_t - M) (kernel); dM/dT_t is w_t in sum mode, w_t dM/dw_t in kernel mode */
static inline BK_DEV_HD double k_mix_dm_dw(const k_mix_args *a, int t, int64_t k)
{
    return a->mode == BK_MIX_SUM ? (double)a->tables[t][k] : exp((double)a->tables[t][k] - (double)a->mixed[k]);
}

/* index k: out[k] = sum_t w_t T_t[k] (sum) or m + log sum_t w_t exp(T_t[k] - m) over active terms,
 * m their largest table value (kernel); terms in order, in double */
static inline BK_DEV_HD void k_mix_forward(int64_t k, const void *args)
{
    const k_mix_args *a = (const k_mix_args *)args;
    if (a->mode == BK_MIX_SUM) {
        double acc = 0.0;
        for (int t = 0; t < a->n_terms; t++)
            acc += a->weights[t] * (double)a->tables[t][k];
        a->out[k] = (float)acc;
        return;
    }
    double m = -INFINITY;
    for (int t = 0; t < a->n_terms; t++)
        if (a->weights[t] > 0.0 && a->tables[t][k] > m)
            m = a->tables[t][k];
    double acc = 0.0;
    for (int t = 0; t < a->n_terms; t++)
        if (a->weights[t] > 0.0)
            acc += a->weights[t] * exp((double)a->tables[t][k] - m);
    a->out[k] = (float)(m + log(acc));
}

/* index k: dtables[t][k] += (float)(dout[k] dM/dT_t) for every active term with a gradient table */
static inline BK_DEV_HD void k_mix_backward_tables(int64_t k, const void *args)
{
    const k_mix_args *a = (const k_mix_args *)args;
    double g = a->dout[k];
    for (int t = 0; t < a->n_terms; t++) {
        if (!k_mix_active(a, t) || !a->dtables[t])
            continue;
        double dm_dt = a->mode == BK_MIX_SUM ? a->weights[t] : a->weights[t] * k_mix_dm_dw(a, t, k);
        a->dtables[t][k] += (float)(g * dm_dt);
    }
}

/* index (t, chunk) of (n_terms, chunks): part[t, chunk] = sum of dout[k] dM/dw_t over the chunk's
 * BK_DEV_SCAN_CHUNK values in index order, in double (0 for an inactive term) */
static inline BK_DEV_HD void k_mix_backward_weights(int64_t i, const void *args)
{
    const k_mix_args *a = (const k_mix_args *)args;
    const int t = (int)(i / a->chunks);
    const int64_t lo = (i % a->chunks) * BK_DEV_SCAN_CHUNK;
    const int64_t hi = lo + BK_DEV_SCAN_CHUNK < a->n ? lo + BK_DEV_SCAN_CHUNK : a->n;
    double dw = 0.0;
    if (k_mix_active(a, t))
        for (int64_t k = lo; k < hi; k++)
            dw += (double)a->dout[k] * k_mix_dm_dw(a, t, k);
    a->part[i] = dw;
}

#endif
