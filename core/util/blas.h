/* The engine's one seam to the BLAS: every single-precision matrix product goes through bk_sgemm.
 *
 * bk_sgemm takes cblas_sgemm's arguments, row-major, without the layout argument:
 *
 *     cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
 *     bk_sgemm(CblasNoTrans, CblasTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
 *
 * C (M x N, leading dimension ldc) = alpha op(A) op(B) + beta C, op(A) M x K, op(B) K x N; transA and
 * transB are the CBLAS constants CblasNoTrans / CblasTrans, which this header brings in from the
 * chosen library's CBLAS header (include this header instead of <cblas.h>, not next to it: the
 * libraries' headers define the same enums).
 *
 * The library is chosen when the engine is built: CMake's BIASKIT_BLAS (core/CMakeLists.txt) defines
 * one of
 *   BK_BLAS_OPENBLAS        Debian's OpenBLAS, OpenMP build (default): cblas_sgemm itself, bit for bit
 *   BK_BLAS_BLIS            Debian's BLIS, OpenMP build (libblis-openmp-dev), through its typed API
 *   BK_BLAS_SCIPY_OPENBLAS  OpenBLAS of PyPI's scipy-openblas32 (pthreads build, symbols scipy_*)
 *   BK_BLAS_MKL             oneMKL of PyPI's mkl-devel, GNU OpenMP threading layer
 *
 * Threads, the same for every library: called inside an active OpenMP parallel region (the attention
 * runs one product per thread), the product runs on the calling thread alone; called outside one, it
 * runs on omp_get_max_threads() threads. OpenBLAS's OpenMP build does this by itself; blas.c does it
 * for BLIS (a per-call thread count) and scipy-openblas (whose thread count is one process-wide
 * setting: correct as long as products are called either from inside OpenMP regions or from one
 * thread outside them, as the engine does) and MKL (its thread-local thread count,
 * mkl_set_num_threads_local, set on each call). */
#ifndef BK_UTIL_BLAS_H
#define BK_UTIL_BLAS_H

#include <stddef.h>

#if defined(BK_BLAS_OPENBLAS) + defined(BK_BLAS_BLIS) + defined(BK_BLAS_SCIPY_OPENBLAS) + defined(BK_BLAS_MKL) > 1
#error "biaskit: more than one of BK_BLAS_OPENBLAS, BK_BLAS_BLIS, BK_BLAS_SCIPY_OPENBLAS, BK_BLAS_MKL is defined"
#endif
#if !defined(BK_BLAS_BLIS) && !defined(BK_BLAS_SCIPY_OPENBLAS) && !defined(BK_BLAS_MKL) && !defined(BK_BLAS_OPENBLAS)
#define BK_BLAS_OPENBLAS 1
#endif

#if defined(BK_BLAS_MKL)
#include <mkl_cblas.h>
#elif defined(BK_BLAS_SCIPY_OPENBLAS)
/* scipy-openblas32's cblas.h, by its path (core/CMakeLists.txt): its directory stays off the include
 * path so that another file's <cblas.h> still finds the system's header. */
#include BK_SCIPY_OPENBLAS_CBLAS_H
#elif defined(BK_BLAS_BLIS)
/* BLIS's cblas.h carries most of blis.h (POSIX types included) and does not build as strict C11, so
 * only blas.c includes BLIS; here, the two CBLAS constants' enums, with the values every CBLAS gives
 * them, unless a CBLAS header came first (they all guard themselves with CBLAS_H). */
#ifndef CBLAS_H
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };
#endif
#else
/* Debian's OpenBLAS (default) */
#include <cblas.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* "OpenBLAS 0.3.21 (openmp), kernels SkylakeX" and the like: the library the engine was built with,
 * its version, and the kernels it picked on this CPU where the library can say. A static string,
 * filled on the first call (call it once from one thread before relying on it from several). */
const char *bk_blas_describe(void);
/* the library alone: "openblas", "blis", "scipy-openblas" or "mkl" (BIASKIT_BLAS's value) */
const char *bk_blas_name(void);

/* Debian's OpenBLAS 0.3.21 takes a CPU newer than itself for an old one and runs its SSE3 ("Prescott")
 * kernels there: 3-9x slower products on an Intel CPU with AVX-512 (docs/performance.md, "BLAS choice").
 * It reads OPENBLAS_CORETYPE once, when it loads, so a program can only start again with the variable
 * set. bk_blas_better_coretype: the kernels to name ("SkylakeX" with AVX-512F, "Haswell" with AVX2)
 * when the library is that OpenBLAS, it fell back so, and OPENBLAS_CORETYPE is not set; NULL otherwise.
 * bk_blas_restart_with_better_kernels: in that case sets OPENBLAS_CORETYPE and BK_BLAS_CORETYPE_SET_VAR
 * (which bk_blas_describe then mentions) and executes the program again with argv (Linux: /proc/self/exe);
 * returns only when nothing was to be done or the restart failed. Call it first thing in main, before
 * any thread or file is opened. A user who sets OPENBLAS_CORETYPE keeps their choice. */
/* The vector width of the kernels the BLAS runs, in bits (512, 256, 128), where the library names them
 * (OpenBLAS: its core name); 0 where it does not say (BLIS, MKL) or names a core not known here. */
int bk_blas_vector_bits(void);
#define BK_BLAS_CORETYPE_SET_VAR "BIASKIT_OPENBLAS_CORETYPE_SET"
const char *bk_blas_better_coretype(void);
void bk_blas_restart_with_better_kernels(char **argv);

#if !defined(BK_BLAS_OPENBLAS)
/* blas.c: the product with the thread rule above (BLIS, scipy-openblas, MKL) */
void bk_blas_sgemm_rowmajor(enum CBLAS_TRANSPOSE transA, enum CBLAS_TRANSPOSE transB, int M, int N, int K,
                            float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                            int ldc);
#endif

static inline void bk_sgemm(enum CBLAS_TRANSPOSE transA, enum CBLAS_TRANSPOSE transB, int M, int N, int K,
                            float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                            int ldc)
{
#if defined(BK_BLAS_OPENBLAS)
    cblas_sgemm(CblasRowMajor, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    bk_blas_sgemm_rowmajor(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

/* The same product with column-major operands (the emulated device backend's cuBLAS semantics):
 * column-major C = op(A) op(B) is row-major C^T = op(B)^T op(A)^T, the row-major call with the
 * operands swapped, which is what the CBLAS libraries do inside their column-major entry as well. */
static inline void bk_sgemm_colmajor(enum CBLAS_TRANSPOSE transA, enum CBLAS_TRANSPOSE transB, int M, int N,
                                     int K, float alpha, const float *A, int lda, const float *B, int ldb,
                                     float beta, float *C, int ldc)
{
#if defined(BK_BLAS_OPENBLAS)
    cblas_sgemm(CblasColMajor, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
    bk_blas_sgemm_rowmajor(transB, transA, N, M, K, alpha, B, ldb, A, lda, beta, C, ldc);
#endif
}

#ifdef __cplusplus
}
#endif

#endif
