/* The products of the flash-style CPU attention's tiles (attention_flash.c), written for their shapes:
 *
 *     C[m][n] = alpha * sum_k A(m, k) B[k][n]            (accumulate = 0)
 *     C[m][n] = C[m][n] + alpha * sum_k A(m, k) B[k][n]  (accumulate = 1)
 *
 * for m < M, n < N, with A(m, k) = A[m * sam + k * sak] (any strides: a transposed A is sam = 1) and the
 * rows of B contiguous (B[k][n] = B[k * ldb + n]). The attention's products are small in one dimension
 * (K = the head size, 16 to 128, for q.k; N = the head size for P V) and a BLAS's packing and its
 * write-back of C cost as much as the multiply-adds there; these read A by broadcasts and B row by row,
 * in registers of up to 12 rows by 2 vectors, with no packing (cpu/gemm.c packs around them for the
 * linear layers).
 *
 * Every element is the same bits in every variant, whatever the vector width and whatever M, N:
 * s_0 = 0, s_{k+1} = fma(A(m, k), B[k][n], s_k) for k = 0 .. K-1 in order, then alpha * s (rounded) and,
 * accumulating, C + that (rounded). The variants: AVX-512F + FMA (16 lanes), AVX2 + FMA (8 lanes), and
 * plain C with fmaf() (correctly rounded, so the same bits; slow where the CPU has no FMA), chosen per
 * call by what the CPU has. bk_tile_gemm_variant runs one of them (the tests compare them). */
#ifndef BK_CPU_TILE_GEMM_H
#define BK_CPU_TILE_GEMM_H

#include <stddef.h>

void bk_tile_gemm(int M, int N, int K, float alpha, const float *A, ptrdiff_t sam, ptrdiff_t sak, const float *B,
                  ptrdiff_t ldb, int accumulate, float *C, ptrdiff_t ldc);

enum { BK_TILE_GEMM_PLAIN = 0, BK_TILE_GEMM_AVX2 = 1, BK_TILE_GEMM_AVX512 = 2, BK_TILE_GEMM_VARIANTS = 3 };

/* The variant bk_tile_gemm runs on this CPU (asks the CPU); _cached asks once per process. */
int bk_tile_gemm_best(void);
int bk_tile_gemm_best_cached(void);
/* Runs `variant` (it must be <= bk_tile_gemm_best()); returns 0, or -1 when this CPU cannot run it. */
int bk_tile_gemm_variant(int variant, int M, int N, int K, float alpha, const float *A, ptrdiff_t sam, ptrdiff_t sak,
                         const float *B, ptrdiff_t ldb, int accumulate, float *C, ptrdiff_t ldc);

/* A part of K, for products whose K is taken in slices (cpu/gemm.c): each chain starts at 0 (P_in NULL)
 * or at P_in[m * ldp + n], a chain an earlier slice left there, and either ends in P_out[m * ldp + n] as
 * it is (P_out non-NULL; C, alpha and accumulate unused) or is finished into C as bk_tile_gemm does.
 * A chain carried so through any slicing of K gives the bits of one call over the whole K. P_in may
 * equal P_out. Returns 0, or -1 when this CPU cannot run `variant`. */
int bk_tile_gemm_span(int variant, int M, int N, int K, const float *A, ptrdiff_t sam, ptrdiff_t sak, const float *B,
                      ptrdiff_t ldb, const float *P_in, float *P_out, ptrdiff_t ldp, float alpha, int accumulate,
                      float *C, ptrdiff_t ldc);

#endif
