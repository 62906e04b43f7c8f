/* The BLAS seam (util/blas.h): the description of the library the engine was built with, and, for the
 * libraries other than Debian's OpenBLAS, the product with the engine's thread rule (single-threaded
 * inside an active OpenMP region, omp_get_max_threads() threads outside). */
#define _POSIX_C_SOURCE 200809L /* setenv, execv; BLIS's header needs POSIX's pthread types */
#if defined(BK_BLAS_BLIS)
/* before util/blas.h, which then takes the CBLAS enums from it; core/CMakeLists.txt puts its directory
 * on this file's system include path alone (its header-only helpers are not -Wextra clean, and its
 * cblas.h must not stand in for <cblas.h> elsewhere) */
#include <blis.h>
#endif

#include "util/blas.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(BK_BLAS_MKL)
#include <mkl_service.h>
#endif

#if defined(BK_BLAS_SCIPY_OPENBLAS)
#include <stdatomic.h>
#endif

static char bk_blas_text[512];

#if defined(BK_BLAS_OPENBLAS) || defined(BK_BLAS_SCIPY_OPENBLAS)
/* OpenBLAS falls back to its SSE3 kernels ("Prescott") on a CPU its version does not know: Debian's
 * 0.3.21 does so on Intel family 6 model 207 (Emerald Rapids), with AVX-512, and runs the model's
 * products 3-5x slower (docs/performance.md, "BLAS choice"). Returns a hint for the description, or "". */
static int bk_openblas_core_bits(const char *core);

static const char *bk_openblas_better_core(const char *core)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    const int is_old = bk_openblas_core_bits(core) == 128; /* one of its generic SSE cores */
    if (is_old && __builtin_cpu_supports("avx512f"))
        return "SkylakeX";
    if (is_old && __builtin_cpu_supports("avx2"))
        return "Haswell";
#else
    (void)core;
#endif
    return NULL;
}

/* The vector width of OpenBLAS's kernels named `core`, in bits: 512 for its AVX-512 kernels, 256 for its
 * AVX2 ones (and AMD's 256-bit cores), 128 for the SSE ones; 0 for a name not in these lists. */
static int bk_openblas_core_bits(const char *core)
{
    static const char *const w512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    static const char *const w256[] = {"Haswell", "Zen", "SandyBridge", "Excavator", "Steamroller", "Piledriver",
                                       "Bulldozer"};
    static const char *const w128[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Barcelona",
                                       "Opteron", "Bobcat", "Katmai", "Northwood", "Banias"};
    if (!core)
        return 0;
    for (size_t k = 0; k < sizeof w512 / sizeof w512[0]; k++)
        if (strcmp(core, w512[k]) == 0)
            return 512;
    for (size_t k = 0; k < sizeof w256 / sizeof w256[0]; k++)
        if (strcmp(core, w256[k]) == 0)
            return 256;
    for (size_t k = 0; k < sizeof w128 / sizeof w128[0]; k++)
        if (strcmp(core, w128[k]) == 0)
            return 128;
    return 0;
}

static const char *bk_openblas_fallback_hint(const char *core)
{
    const char *better = bk_openblas_better_core(core);
    if (!better)
        return getenv(BK_BLAS_CORETYPE_SET_VAR) ? " (OPENBLAS_CORETYPE set by biaskit: this OpenBLAS took the CPU for an "
                                                  "older one)"
                                                : "";
    return strcmp(better, "SkylakeX") == 0
               ? "; this CPU has AVX-512: OPENBLAS_CORETYPE=SkylakeX (or Haswell) runs faster kernels"
               : "; this CPU has AVX2: OPENBLAS_CORETYPE=Haswell runs faster kernels";
}
#endif

#if !defined(BK_BLAS_OPENBLAS)
/* the thread count a product called here and now may use */
static int bk_blas_threads_here(void)
{
    if (omp_in_parallel())
        return 1;
    int nt = omp_get_max_threads();
    return nt > 0 ? nt : 1;
}
#endif

#if defined(BK_BLAS_OPENBLAS)

const char *bk_blas_name(void) { return "openblas"; }

const char *bk_blas_better_coretype(void)
{
    return getenv("OPENBLAS_CORETYPE") ? NULL : bk_openblas_better_core(openblas_get_corename());
}

int bk_blas_vector_bits(void) { return bk_openblas_core_bits(openblas_get_corename()); }

const char *bk_blas_describe(void)
{
    if (!bk_blas_text[0]) {
        int par = openblas_get_parallel();
        const char *mode = par == 2 ? "openmp" : par == 1 ? "pthreads" : "sequential";
        const char *core = openblas_get_corename();
        snprintf(bk_blas_text, sizeof bk_blas_text, "openblas: %s (%s build), kernels %s%s", openblas_get_config(),
                 mode, core, bk_openblas_fallback_hint(core));
    }
    return bk_blas_text;
}

#elif defined(BK_BLAS_BLIS)

const char *bk_blas_name(void) { return "blis"; }

const char *bk_blas_describe(void)
{
    if (!bk_blas_text[0])
        snprintf(bk_blas_text, sizeof bk_blas_text, "blis: BLIS %s (%s), kernels %s", bli_info_get_version_str(),
                 bli_info_get_enable_openmp() ? "openmp build" : "not the openmp build",
                 bli_arch_string(bli_arch_query_id()));
    return bk_blas_text;
}

void bk_blas_sgemm_rowmajor(enum CBLAS_TRANSPOSE transA, enum CBLAS_TRANSPOSE transB, int M, int N, int K,
                            float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                            int ldc)
{
    /* BLIS takes both strides of each operand: row-major is (row stride ld, column stride 1). Its
     * typed API takes non-const pointers and reads A, B, alpha and beta only. */
    rntm_t rntm = BLIS_RNTM_INITIALIZER;
    bli_rntm_set_num_threads(bk_blas_threads_here(), &rntm);
    bli_sgemm_ex(transA == CblasTrans ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
                 transB == CblasTrans ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, M, N, K, &alpha, (float *)A, lda, 1,
                 (float *)B, ldb, 1, &beta, C, ldc, 1, NULL, &rntm);
}

#elif defined(BK_BLAS_SCIPY_OPENBLAS)

const char *bk_blas_name(void) { return "scipy-openblas"; }

const char *bk_blas_describe(void)
{
    if (!bk_blas_text[0]) {
        int par = scipy_openblas_get_parallel();
        const char *mode = par == 2 ? "openmp" : par == 1 ? "pthreads" : "sequential";
        const char *core = scipy_openblas_get_corename();
        snprintf(bk_blas_text, sizeof bk_blas_text, "scipy-openblas: %s (%s build), kernels %s%s",
                 scipy_openblas_get_config(), mode, core, bk_openblas_fallback_hint(core));
    }
    return bk_blas_text;
}

int bk_blas_vector_bits(void) { return bk_openblas_core_bits(scipy_openblas_get_corename()); }

/* The pthreads build has no per-call thread count (scipy_openblas_set_num_threads_local is declared in
 * its header but not exported by 0.3.34.481.3) and does not look at OpenMP: called with its process-wide
 * count at 2 from two OpenMP threads at once, each call would split the product between its own
 * threads, and the two calls would queue on its level-3 lock. So the count is switched to 1 when a
 * product is called inside an OpenMP region and back to omp_get_max_threads() outside one, only when it
 * changes. Every thread inside a region asks for the same 1, and outside regions one thread calls. */
static atomic_int bk_scipy_threads; /* the count last set here; 0: none yet */

static void bk_scipy_set_threads(int want)
{
    if (atomic_load_explicit(&bk_scipy_threads, memory_order_acquire) != want) {
        scipy_openblas_set_num_threads(want);
        atomic_store_explicit(&bk_scipy_threads, want, memory_order_release);
    }
}

void bk_blas_sgemm_rowmajor(enum CBLAS_TRANSPOSE transA, enum CBLAS_TRANSPOSE transB, int M, int N, int K,
                            float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                            int ldc)
{
    bk_scipy_set_threads(bk_blas_threads_here());
    scipy_cblas_sgemm(CblasRowMajor, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* The unprefixed cblas_sgemm for code that still calls it directly (<cblas.h> of the system declares
 * it; the library exports only scipy_cblas_sgemm), with the same thread rule. */
void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE transA, enum CBLAS_TRANSPOSE transB, int M, int N,
                 int K, float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                 int ldc);
void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE transA, enum CBLAS_TRANSPOSE transB, int M, int N,
                 int K, float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    bk_scipy_set_threads(bk_blas_threads_here());
    scipy_cblas_sgemm(order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

#elif defined(BK_BLAS_MKL)

const char *bk_blas_name(void) { return "mkl"; }

const char *bk_blas_describe(void)
{
    if (!bk_blas_text[0]) {
        char version[256];
        MKLVersion v;
        mkl_get_version_string(version, (int)sizeof version);
        mkl_get_version(&v);
        snprintf(bk_blas_text, sizeof bk_blas_text, "mkl: %s (GNU OpenMP threading layer), kernels %s", version,
                 v.Processor ? v.Processor : "(not said)");
    }
    return bk_blas_text;
}

void bk_blas_sgemm_rowmajor(enum CBLAS_TRANSPOSE transA, enum CBLAS_TRANSPOSE transB, int M, int N, int K,
                            float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
                            int ldc)
{
    /* thread-local: a call inside a region changes nothing for the other threads */
    int before = mkl_set_num_threads_local(bk_blas_threads_here());
    cblas_sgemm(CblasRowMajor, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    mkl_set_num_threads_local(before);
}

#endif

#if !defined(BK_BLAS_OPENBLAS)
const char *bk_blas_better_coretype(void)
{
    return NULL; /* BLIS, MKL and the newer OpenBLAS pick kernels this CPU runs well */
}
#endif

#if defined(BK_BLAS_BLIS) || defined(BK_BLAS_MKL)
int bk_blas_vector_bits(void) { return 0; /* not said in a form compared here: trusted to fit the CPU */ }
#endif

void bk_blas_restart_with_better_kernels(char **argv)
{
#if defined(__linux__)
    const char *core = bk_blas_better_coretype();
    if (!core || getenv(BK_BLAS_CORETYPE_SET_VAR))
        return;
    if (setenv("OPENBLAS_CORETYPE", core, 1) == 0 && setenv(BK_BLAS_CORETYPE_SET_VAR, core, 1) == 0)
        execv("/proc/self/exe", argv);
    /* not restarted: go on with the kernels loaded */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(BK_BLAS_CORETYPE_SET_VAR);
#else
    (void)argv;
#endif
}
