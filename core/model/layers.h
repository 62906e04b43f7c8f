/* The layers of the model, each a forward/backward pair (llm.c's train_gpt2.c is the model for this
 * file). Shapes are in the argument names: B batch, T time, C channels, OC output channels, V vocab.
 * Backward functions accumulate (+=) into their gradient outputs. */
#ifndef BK_LAYERS_H
#define BK_LAYERS_H

#include <stddef.h>
#include <stdint.h>

/* out[b,t,:] = wte[inp[b,t], :] */
void bk_encoder_forward(float *out, const int32_t *inp, const float *wte, int B, int T, int C);
void bk_encoder_backward(float *dwte, const float *dout, const int32_t *inp, int B, int T, int C);

/* y = (x - mean) / sqrt(var + 1e-5) * w + b over the last dimension; mean and rstd are saved. */
void bk_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                          const float *bias, int N, int C);
void bk_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                           const float *weight, const float *mean, const float *rstd, int N, int C);

/* RMSNorm (the LLaMA family; model/llama_math.h): y = x / sqrt(mean(x^2) + eps) * w over the last
 * dimension; rstd saved. Backward: dinp += ..., dweight += ... (each channel's sum over the rows in row
 * order, in double). bk_headnorm_forward(..., N, 1, C, C, eps). */
void bk_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C, float eps);
void bk_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                         const float *rstd, int N, int C);

/* RMSNorm of N G rows of hd channels, row r (r < N G) at offset (r / G) stride + (r % G) hd of inp, out,
 * dinp and dout (QK-norm: the G query or key heads of each of N q/k/v product rows of stride floats), one
 * weight of hd for all rows; rstd (N G) per row. Only the rows are written; out must not alias inp.
 * Backward: dinp's rows += ... (accumulate) or = ... (0 + the gradient; the rest of dinp untouched), in
 * the same layout; dweight (hd) += the sum over all N G rows in row order. The caller checks the sizes
 * (G >= 1, hd >= 1, stride >= G hd). */
void bk_headnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int G, int hd,
                         int stride, float eps);
void bk_headnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                          const float *rstd, int N, int G, int hd, int stride, int accumulate);

/* SwiGLU: inp rows of 2F = [gate | up], out rows of F = silu(gate) * up; backward dinp += ... */
void bk_swiglu_forward(float *out, const float *inp, int N, int F);
void bk_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F);

/* Grouped-query attention as full heads: qkvr rows ((H + 2 KV) hd: q of H heads, k and v of KV) to qkv rows
 * (3 H hd, the attention's layout) with key/value head bk_gqa_kv_head(h) copied to head h; reduce is its
 * transpose, dqkvr += (the group's heads summed in ascending order). */
void bk_gqa_expand(float *qkv, const float *qkvr, int N, int H, int KV, int hd);
void bk_gqa_reduce(float *dqkvr, const float *dqkv, int N, int H, int KV, int hd);

/* Position views (model/views.h). dst row r (width floats from dst + r dst_ld) = src row r, or += with
 * accumulate, r < rows. Merge: rows i >= lo of out (B, T, C) and lse (B, H, T) with part (B, T - lo, C)
 * and part_lse (B, H, T - lo), a pass over other keys of rows lo .. T - 1 (bk_lse_merge). */
void bk_copy_rows(float *dst, size_t dst_ld, const float *src, size_t src_ld, size_t rows, size_t width,
                  int accumulate);
void bk_attention_merge(float *out, float *lse, const float *part, const float *part_lse, int B, int T, int lo, int C,
                        int H);

/* out (N, OC) = inp (N, C) . weight^T (OC, C) + bias (OC, or NULL), through OpenBLAS. */
void bk_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C, int OC);
/* dinp += dout . weight; dweight += dout^T . inp and dbias += the column sums of dout, each skipped when
 * NULL. */
void bk_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                        const float *weight, int N, int C, int OC);

/* GELU, tanh approximation (GPT-2; PyTorch gelu(approximate="tanh")). */
void bk_gelu_forward(float *out, const float *inp, size_t n);
void bk_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* out = a + b */
void bk_residual_forward(float *out, const float *a, const float *b, size_t n);
/* da += dout, db += dout */
void bk_residual_backward(float *da, float *db, const float *dout, size_t n);

/* For each of N rows of logits (V): probs = softmax (when probs is not NULL, else not kept) and
 * losses[n] = -log softmax(logits)[targets[n]]. */
void bk_crossentropy_forward(float *losses, float *probs, const float *logits, const int32_t *targets, int N, int V);
/* dlogits = (probs - onehot(target)) * dloss, overwritten (not accumulated: the logits have one use). */
void bk_crossentropy_backward(float *dlogits, const float *probs, const int32_t *targets, float dloss, int N, int V);

/* The index of the largest of v[0..n): the first one on a tie (so the choice is deterministic). */
static inline int32_t bk_argmax(const float *v, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best])
            best = i;
    return best;
}

#endif
