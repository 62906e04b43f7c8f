/* The device backend's functions (ops_layers.h, ops_attention.h) put into a backend table, once for
 * both instantiations (gpu/dev.h): each includes this after defining its primitives, then fills the
 * entries that differ (alloc, release, copy, sync, destroy) itself. */
#ifndef BK_GPU_OPS_H
#define BK_GPU_OPS_H

#include "gpu/ops_flash.h"
#include "gpu/ops_layers.h"

/* The table's upload, download and zero are the primitives on the backend's bk_dev; its stream is the
 * bk_dev's (NULL when emulated: plugins' CUDA code is not called there). */
static int dev_table_upload(bk_backend *be, void *dst, const void *src_host, size_t bytes, bk_error *err)
{
    return dev_upload((bk_dev *)be->impl, dst, src_host, bytes, err);
}

static int dev_table_download(bk_backend *be, void *dst_host, const void *src, size_t bytes, bk_error *err)
{
    return dev_download((bk_dev *)be->impl, dst_host, src, bytes, err);
}

static int dev_table_zero(bk_backend *be, void *ptr, size_t bytes, bk_error *err)
{
    return dev_zero((bk_dev *)be->impl, ptr, bytes, err);
}

static void *dev_table_stream(bk_backend *be)
{
    return ((bk_dev *)be->impl)->stream;
}

/* One table entry per operation, its storage a tag (model/backend.h): the fp32 and the bf16 program
 * behind it, chosen here once. */
static int dev_layernorm_forward_as(bk_backend *be, bk_storage s, void *out, float *mean, float *rstd,
                                    const float *inp, const float *weight, const float *bias, int N, int C,
                                    bk_error *err)
{
    return s == BK_STORAGE_BF16
               ? dev_layernorm_forward_bf16(be, (uint16_t *)out, mean, rstd, inp, weight, bias, N, C, err)
               : dev_layernorm_forward(be, (float *)out, mean, rstd, inp, weight, bias, N, C, err);
}

static int dev_matmul_forward_as(bk_backend *be, bk_storage s, float *out, const void *inp, const void *weight,
                                 const float *bias, int N, int C, int OC, bk_error *err)
{
    return s == BK_STORAGE_BF16 ? dev_matmul_forward_bf16(be, out, (const uint16_t *)inp, (const uint16_t *)weight,
                                                          bias, N, C, OC, err)
                                : dev_matmul_forward(be, out, (const float *)inp, (const float *)weight, bias, N, C,
                                                     OC, err);
}

static int dev_matmul_backward_as(bk_backend *be, bk_storage s, float *dinp, float *dweight, float *dbias,
                                  const float *dout, const void *inp, const void *weight, int N, int C, int OC,
                                  bk_error *err)
{
    return s == BK_STORAGE_BF16 ? dev_matmul_backward_bf16(be, dinp, dweight, dbias, dout, (const uint16_t *)inp,
                                                           (const uint16_t *)weight, N, C, OC, err)
                                : dev_matmul_backward(be, dinp, dweight, dbias, dout, (const float *)inp,
                                                      (const float *)weight, N, C, OC, err);
}

static int dev_gelu_forward_as(bk_backend *be, bk_storage s, void *out, const float *inp, size_t n, bk_error *err)
{
    return s == BK_STORAGE_BF16 ? dev_gelu_forward_bf16(be, (uint16_t *)out, inp, n, err)
                                : dev_gelu_forward(be, (float *)out, inp, n, err);
}

static int dev_attention_forward_as(bk_backend *be, bk_storage s, void *out, float *saved, const void *qkv,
                                    const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err)
{
    return s == BK_STORAGE_BF16
               ? dev_attention_forward_bf16(be, (uint16_t *)out, saved, (const uint16_t *)qkv, bias, B, T, C, H, err)
               : dev_attention_forward(be, (float *)out, saved, (const float *)qkv, bias, B, T, C, H, err);
}

static int dev_attention_backward_as(bk_backend *be, bk_storage s, float *dqkv, float *const dtable[BK_STREAM_COUNT],
                                     const void *dout, const void *qkv, const void *out, const float *saved,
                                     const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err)
{
    return s == BK_STORAGE_BF16
               ? dev_attention_backward_bf16(be, dqkv, dtable, (const uint16_t *)dout, (const uint16_t *)qkv,
                                             (const uint16_t *)out, saved, bias, B, T, C, H, err)
               : dev_attention_backward(be, dqkv, dtable, (const float *)dout, (const float *)qkv, (const float *)out,
                                        saved, bias, B, T, C, H, err);
}

static int dev_attention_lse_forward(bk_backend *be, float *out, float *lse, const float *qkv,
                                     const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err)
{
    return dev_flash_forward(be, out, lse, qkv, bias, B, T, C, H, err);
}

static int dev_attention_lse_backward(bk_backend *be, float *dqkv, const float *dout, const float *qkv,
                                      const float *out, const float *lse, const bk_attention_bias *bias, int B, int T,
                                      int C, int H, bk_error *err)
{
    float *const none[BK_STREAM_COUNT] = {NULL, NULL};
    return dev_flash_backward(be, dqkv, none, dout, qkv, out, lse, bias, B, T, C, H, err);
}

static void dev_set_ops(bk_backend *be)
{
    be->upload = dev_table_upload;
    be->download = dev_table_download;
    be->zero = dev_table_zero;
    be->stream = dev_table_stream;
    be->encoder_forward = dev_encoder_forward;
    be->encoder_backward = dev_encoder_backward;
    be->layernorm_forward = dev_layernorm_forward_as;
    be->layernorm_backward = dev_layernorm_backward;
    be->matmul_forward = dev_matmul_forward_as;
    be->matmul_backward = dev_matmul_backward_as;
    be->cast_bf16 = dev_cast_bf16;
    be->gelu_forward = dev_gelu_forward_as;
    be->gelu_backward = dev_gelu_backward;
    be->rmsnorm_forward = dev_rmsnorm_forward;
    be->rmsnorm_backward = dev_rmsnorm_backward;
    be->headnorm_forward = dev_headnorm_forward;
    be->headnorm_backward = dev_headnorm_backward;
    be->swiglu_forward = dev_swiglu_forward;
    be->swiglu_backward = dev_swiglu_backward;
    be->gqa_expand = dev_gqa_expand;
    be->gqa_reduce = dev_gqa_reduce;
    be->residual_forward = dev_residual_forward;
    be->residual_backward = dev_residual_backward;
    be->crossentropy_forward = dev_crossentropy_forward;
    be->crossentropy_backward = dev_crossentropy_backward;
    be->rotary = dev_rotary;
    be->attention_saved = dev_attention_saved;
    be->attention_forward = dev_attention_forward_as;
    be->attention_backward = dev_attention_backward_as;
    be->copy_rows = dev_copy_rows;
    be->attention_lse_forward = dev_attention_lse_forward;
    be->attention_lse_backward = dev_attention_lse_backward;
    be->attention_merge = dev_attention_merge;
    be->mix_forward = dev_mix_forward;
    be->mix_backward = dev_mix_backward;
    be->first_nonfinite = dev_first_nonfinite;
    be->sumsq = dev_sumsq;
    be->scale = dev_scale;
    be->adamw = dev_adamw;
}

#endif
