/* bf16 values and 16 x 16 matrix products on tensor cores for the block programs (gpu/dev.h), valid C11
 * and CUDA C++: on the GPU nvcuda::wmma (bf16 inputs, fp32 accumulation; sm_80 and later), in C an
 * emulation that rounds the same inputs to bf16 the same way and sums in float.
 *
 * bf16 is stored as uint16_t (its bits) in both, so that block programs carve it from their shared
 * memory alike. bk_bf16_round is round-to-nearest-even (NaN stays NaN), as __float2bfloat16_rn;
 * bk_tf32_round (TF32, [run] matmul = "tf32") is below it.
 *
 * bk_mma_block is warp-collective on the GPU: every thread of one warp calls it with the same arguments
 * (inside BK_CTA_WARP_PHASE). It computes one 16 x 16 block of C (fp32, row-major, leading dimension
 * ldc) = [C +] A B over a depth of k (a multiple of 16), A (16 x k) and B (k x 16) bf16 in row-major or
 * column-major order (a_colmajor, b_colmajor) with leading dimensions lda, ldb. wmma's rules hold for
 * both: every pointer 32-byte aligned, lda and ldb multiples of 8, ldc a multiple of 4. The order in
 * which the GPU sums a 16-deep product is the hardware's; the emulation sums k ascending, so the two
 * agree to fp32 rounding of the sums, not bit for bit. */
#ifndef BK_GPU_MMA_H
#define BK_GPU_MMA_H

#include "gpu/dev.h"
#include "util/half.h" /* bk_bf16_value */

#include <stdint.h>
#include <string.h>

/* wmma's bf16 fragments need sm_80; for an older target the GPU runs the emulation's loops. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define BK_MMA_WMMA 1
#endif

#if defined(__CUDA_ARCH__)
#include <cuda_bf16.h>
#include <mma.h>
#endif

static inline BK_DEV_HD uint16_t bk_bf16_round(float x)
{
#if defined(__CUDA_ARCH__)
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
#else
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u); /* to nearest, ties to even */
    return (uint16_t)(u >> 16);
#endif
}


/* x rounded to TF32 (10 explicit mantissa bits, fp32's 8-bit exponent), kept in a float: what
 * [run] matmul = "tf32" multiplies. Round to nearest, ties away from zero, as PTX's cvt.rna.tf32.f32
 * (CUDA's wmma::__float_to_tf32); a carry may reach the exponent (the largest floats round to inf);
 * inf stays inf and NaN stays NaN. cuBLAS does not document its kernels' conversion: the emulated
 * backend rounds both operands of every GEMM with this (gpu/backend_emulated.c), and test_backend_layers
 * compares that with a GPU's TF32 GEMMs when one answers. Plain C, so host and device alike. */
static inline BK_DEV_HD float bk_tf32_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) /* inf or NaN: unchanged (a NaN whose payload is in the low bits
                                            * would become inf if they were cut) */
        return x;
    u = (u + 0x1000u) & 0xffffe000u; /* half a unit of the 10th mantissa bit added to the magnitude */
    memcpy(&x, &u, sizeof x);
    return x;
}

#if defined(BK_MMA_WMMA)
template <typename LA, typename LB>
__device__ inline void bk_mma_wmma(float *c, int ldc, const uint16_t *a, int lda, int a_colmajor, const uint16_t *b,
                                   int ldb, int b_colmajor, int k, int accumulate)
{
    using namespace nvcuda;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    if (accumulate)
        wmma::load_matrix_sync(acc, c, (unsigned)ldc, wmma::mem_row_major);
    else
        wmma::fill_fragment(acc, 0.0f);
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LA> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LB> fb;
    for (int k0 = 0; k0 < k; k0 += 16) {
        const uint16_t *ap = a + (a_colmajor ? (int64_t)k0 * lda : k0);
        const uint16_t *bp = b + (b_colmajor ? k0 : (int64_t)k0 * ldb);
        wmma::load_matrix_sync(fa, reinterpret_cast<const __nv_bfloat16 *>(ap), (unsigned)lda);
        wmma::load_matrix_sync(fb, reinterpret_cast<const __nv_bfloat16 *>(bp), (unsigned)ldb);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c, acc, (unsigned)ldc, wmma::mem_row_major);
}
#endif

static inline BK_DEV_HD void bk_mma_block(float *c, int ldc, const uint16_t *a, int lda, int a_colmajor,
                                          const uint16_t *b, int ldb, int b_colmajor, int k, int accumulate)
{
#if defined(BK_MMA_WMMA)
    using nvcuda::wmma::col_major;
    using nvcuda::wmma::row_major;
    if (a_colmajor && b_colmajor)
        bk_mma_wmma<col_major, col_major>(c, ldc, a, lda, 1, b, ldb, 1, k, accumulate);
    else if (a_colmajor)
        bk_mma_wmma<col_major, row_major>(c, ldc, a, lda, 1, b, ldb, 0, k, accumulate);
    else if (b_colmajor)
        bk_mma_wmma<row_major, col_major>(c, ldc, a, lda, 0, b, ldb, 1, k, accumulate);
    else
        bk_mma_wmma<row_major, row_major>(c, ldc, a, lda, 0, b, ldb, 0, k, accumulate);
#else
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float acc = accumulate ? c[i * ldc + j] : 0.0f;
            for (int kk = 0; kk < k; kk++) {
                const uint16_t x = a_colmajor ? a[(int64_t)kk * lda + i] : a[(int64_t)i * lda + kk];
                const uint16_t y = b_colmajor ? b[(int64_t)j * ldb + kk] : b[(int64_t)kk * ldb + j];
                acc += bk_bf16_value(x) * bk_bf16_value(y);
            }
            c[i * ldc + j] = acc;
        }
#endif
}

/* Warp w's share of C (m x n, both multiples of 16) = [C +] A B over depth k: the 16 x 16 blocks
 * w, w + BK_CTA_WARPS, ... in row-major block order. A's block row i0 starts at a + i0 * lda (row-major)
 * or a + i0 (column-major); B's block column j0 at b + j0 (row-major) or b + j0 * ldb. */
static inline BK_DEV_HD void bk_mma_tile(float *c, int ldc, const uint16_t *a, int lda, int a_colmajor,
                                         const uint16_t *b, int ldb, int b_colmajor, int m, int n, int k,
                                         int accumulate, int w)
{
    const int nb = n / 16;
    for (int f = w; f < (m / 16) * nb; f += BK_CTA_WARPS) {
        const int i0 = (f / nb) * 16, j0 = (f % nb) * 16;
        bk_mma_block(c + (int64_t)i0 * ldc + j0, ldc, a + (a_colmajor ? i0 : (int64_t)i0 * lda), lda, a_colmajor,
                     b + (b_colmajor ? (int64_t)j0 * ldb : j0), ldb, b_colmajor, k, accumulate);
    }
}

#endif
