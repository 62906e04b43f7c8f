/* The model's matrix products on the CPU: the engine's own kernels, not the BLAS's.
 *
 *     C = alpha op(A) op(B)         (accumulate = 0)
 *     C = C + alpha op(A) op(B)     (accumulate = 1)
 *
 * row-major, C M x N with leading dimension ldc; op(A) M x K: A itself (M x K, lda) or, transA, A^T (A
 * stored K x M); op(B) K x N: B (K x N, ldb) or, transB, B^T (B stored N x K). These are the linear
 * layers' products (forward: inp . W^T; backward: dout . W and dout^T . inp).
 *
 * Every element is one chain of fused multiply-adds over k = 0 .. K-1 in order, then alpha * s and,
 * accumulating, C + that (two roundings): the bits of cpu/tile_gemm.h's products, whatever the CPU's
 * vector width (AVX-512, AVX2, plain C with fmaf), the thread count, the blocking and the library the
 * engine links: a model run with them trains to the same bits on an AVX2 machine and an AVX-512 one.
 *
 * How: C is cut into blocks of a chunk of rows (about 120: bk_gemm_chunk_start) by 256 columns, each
 * computed by one thread (OpenMP, the threads of omp_get_max_threads() outside a parallel region, the
 * calling thread alone inside one; each thread gets whole chunks, every block of columns of them, and
 * the same number of rows to within 4), over K in slices of 256 with the chains carried between
 * slices in per-thread partial sums (bk_tile_gemm_span). B is packed in strips of 32 columns: where A is
 * not transposed (forward, input gradients), all of it once per call, shared by the threads, and A read
 * where it is; in the weight gradients (A = dout transposed), each thread packs B's slice of a block of
 * columns once for its chunks (up to 16 at a time), carries the chains of all their rows, and copies A's
 * slice per chunk so that the kernels read it by rows.
 *
 * The kernels are chosen once per process. BIASKIT_GEMM unset or "auto": the engine's where they are
 * wider than the BLAS's (bk_blas_vector_bits: e.g. OPENBLAS_CORETYPE=Haswell, or an OpenBLAS older than
 * the CPU, on a CPU with AVX-512F), the BLAS through bk_sgemm otherwise (OpenBLAS's AVX-512 kernels ran
 * the model's products 1.2-1.4x faster than these on the machine of docs/performance.md; BLIS and
 * MKL do not say their width and are kept). BIASKIT_GEMM = "avx512", "avx2" or "plain" runs the
 * engine's kernels of that width (refused when the CPU cannot run them; "plain" is slow): the bits then
 * no longer depend on the machine's vector width or the BLAS. "blas": every product through bk_sgemm,
 * the library's own reduction order and bits. */
#ifndef BK_CPU_GEMM_H
#define BK_CPU_GEMM_H

#include <stddef.h>

#define BK_GEMM_ENV "BIASKIT_GEMM"

void bk_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, ptrdiff_t lda, const float *B,
             ptrdiff_t ldb, int accumulate, float *C, ptrdiff_t ldc);

/* The kernels bk_gemm runs: a BK_TILE_GEMM_* variant (cpu/tile_gemm.h), or BK_GEMM_BLAS. */
enum { BK_GEMM_BLAS = -1 };
int bk_gemm_kernels(void);
/* "avx512", "avx2", "plain" or "blas" */
const char *bk_gemm_kernels_name(void);
/* The kernels of the blocked attention's per-head products (cpu/attention.c; the flash-style kernel always
 * runs the engine's): BIASKIT_GEMM's when it names kernels (the BLAS for "blas"), else (auto) the engine's
 * widest where the CPU has AVX2 or AVX-512, the BLAS on older CPUs. Unlike the linear layers, auto does not
 * keep an AVX-512 BLAS here: at these shapes (64 query rows, one dimension the head size) a BLAS packs and
 * writes back as much as it multiplies, and the engine's kernels ran them faster than OpenBLAS's of the same
 * width (docs/performance.md). */
int bk_gemm_attention_kernels(void);
const char *bk_gemm_attention_name(void);
/* the name of given kernels, and the kernels of a name (-3 when it is none of those four) */
const char *bk_gemm_kernels_label(int kernels);
int bk_gemm_kernels_parse(const char *name);
/* bk_gemm with the given kernels (a BK_TILE_GEMM_* variant or BK_GEMM_BLAS) whatever BIASKIT_GEMM says;
 * returns 0, or -1 when this CPU cannot run them (the tests compare the variants) */
int bk_gemm_with(int kernels, int transA, int transB, int M, int N, int K, float alpha, const float *A, ptrdiff_t lda,
                 const float *B, ptrdiff_t ldb, int accumulate, float *C, ptrdiff_t ldc);
/* "the engine's avx512 kernels (BIASKIT_GEMM=auto)" and the like, for banners: the linear layers' kernels,
 * and the attention products' */
const char *bk_gemm_describe(void);
const char *bk_gemm_attention_describe(void);
/* The partition of bk_gemm's M rows: `chunks` chunks (bk_gemm_chunks: at least M / 120, a multiple of
 * the threads), chunk c starting at row bk_gemm_chunk_start(M, chunks, c) = c M / chunks rounded down to a
 * multiple of 4 (M for c = chunks); thread t of `threads` computes chunks t chunks / threads up to
 * (t + 1) chunks / threads. */
int bk_gemm_chunks(int M, int threads);
int bk_gemm_chunk_start(int M, int chunks, int c);

/* Checks BIASKIT_GEMM: 0 when it is unset or one of the values above that this CPU runs; -1 with a
 * message naming the variable, its value and what was expected (the CLI calls it first, so a bad value
 * stops a run instead of being ignored). */
int bk_gemm_check_env(char *msg, size_t msg_size);

#endif
