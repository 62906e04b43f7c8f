/* How the host's elementwise loops are vectorised, in one place:
 *
 *   BK_OMP_SIMD     `#pragma omp simd` where OpenMP compiles the host code, nothing elsewhere (nvcc,
 *                   no -fopenmp);
 *   BK_HOST_INLINE  on the shared row functions (softmax, LayerNorm, exp, ...) that those loops call:
 *                   always inlined on the host, so that they are compiled into each copy below (an
 *                   out-of-line call would run the baseline code from the AVX2 copy);
 *   BK_HOST_CLONES  on a host function with such loops: GCC / clang compile it three times, for
 *                   AVX-512F (16-wide vectors), for AVX2 (8-wide) and for baseline x86-64 (SSE2), and
 *                   the loader picks the widest copy the CPU runs (an ifunc, resolved once). Nothing
 *                   where the build does not define BK_HAVE_TARGET_CLONES (core/CMakeLists.txt checks
 *                   that the compiler takes the attribute) or defines BK_NO_HOST_CLONES. The AVX-512
 *                   copy made GELU 1.4-1.7x faster than the AVX2 one (docs/performance.md).
 *
 * The copies compute the same bits: nothing is contracted into an FMA in any of them (the layer files
 * are built with -ffp-contract=off, core/CMakeLists.txt), per-element arithmetic is IEEE in any width,
 * and every sum over a row is written with an explicit number of lanes (BK_SUM_LANES,
 * model/softmax_math.h) rather than left to the vectoriser, so the grouping does not follow the
 * register width.
 * test_host_clones compares the copy the CPU picks and an AVX2-only build with the baseline build, bit
 * for bit (the layers, the blocked attention, AdamW); test_attention_flash does the same for the flash
 * attention. */
#ifndef BK_HOST_SIMD_H
#define BK_HOST_SIMD_H

#if defined(_OPENMP) && !defined(__CUDACC__)
#define BK_OMP_SIMD _Pragma("omp simd")
#else
#define BK_OMP_SIMD
#endif

#if defined(__GNUC__) && !defined(__CUDACC__)
#define BK_HOST_INLINE __attribute__((always_inline))
#else
#define BK_HOST_INLINE
#endif

#if defined(BK_HAVE_TARGET_CLONES) && !defined(BK_NO_HOST_CLONES) && !defined(__CUDACC__) && defined(__x86_64__)
#define BK_HOST_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define BK_HOST_CLONES
#endif

#endif
