/* The model's products on the CPU (gemm.h): blocks of C per thread, K in slices, the chains carried
 * between slices; the kernels are tile_gemm.c's. */
#include "cpu/gemm.h"

#include "cpu/tile_gemm.h"
#include "util/blas.h"

#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    GEMM_MB = 120, /* rows of C per block: ten of the AVX-512 kernel's 12-row blocks */
    GEMM_NB = 256, /* columns of C per block: a slice of B's block stays in L1/L2 across the rows */
    GEMM_KC = 256, /* K per slice */
    GEMM_NR = 32,  /* columns of B per packed strip: the AVX-512 kernel's two vectors */
    GEMM_MR = 12,  /* rows of A per packed sliver: the AVX-512 kernel's register block */
    GEMM_GROUP = 16, /* chunks of a weight gradient that share one packing of B's slice: their partial
                      * sums, up to 16 x 124 rows x 256 columns (2 MiB), are the thread's memory bound */
};

/* ---- the kernels' choice ---- */

static const char *const kernel_names[] = {"plain", "avx2", "avx512"}; /* by BK_TILE_GEMM_* */

/* what BIASKIT_GEMM asks for: a variant, BK_GEMM_BLAS, or -2 for auto; -3 when the value is not one of
 * these */
int bk_gemm_kernels_parse(const char *name) {
    if (strcmp(name, "blas") == 0)
        return BK_GEMM_BLAS;
    for (int i = 0; i < BK_TILE_GEMM_VARIANTS; i++)
        if (strcmp(name, kernel_names[i]) == 0)
            return i;
    return -3;
}

const char *bk_gemm_kernels_label(int kernels) {
    return kernels == BK_GEMM_BLAS ? "blas" : kernel_names[kernels];
}

static int parse_env(const char *v) {
    return !v || !*v || strcmp(v, "auto") == 0 ? -2 : bk_gemm_kernels_parse(v);
}

int bk_gemm_check_env(char *msg, size_t msg_size) {
    const char *v = getenv(BK_GEMM_ENV);
    const int want = parse_env(v);
    if (want == -3) {
        snprintf(msg, msg_size, "%s='%s': expected auto, avx512, avx2, plain or blas", BK_GEMM_ENV, v);
        return -1;
    }
    if (want >= 0 && want > bk_tile_gemm_best_cached()) {
        snprintf(msg, msg_size, "%s='%s': this CPU cannot run these kernels (it runs %s at most)", BK_GEMM_ENV, v,
                 kernel_names[bk_tile_gemm_best_cached()]);
        return -1;
    }
    return 0;
}

/* the kernels BIASKIT_GEMM names, when it names some this CPU runs; -2 otherwise (auto) */
static int asked(int best) {
    const int want = parse_env(getenv(BK_GEMM_ENV));
    return want == BK_GEMM_BLAS || (want >= 0 && want <= best) ? want : -2;
}

static int choose(void) {
    const int best = bk_tile_gemm_best_cached(), want = asked(best);
    if (want != -2)
        return want;
    /* auto (and, when nobody checked the variable first, a value this CPU cannot run): the engine's
     * kernels where they are wider than the BLAS's, the BLAS otherwise (OpenBLAS's own AVX-512 kernels
     * ran the model's products faster than these: docs/performance.md) */
    const int bits = best == BK_TILE_GEMM_AVX512 ? 512 : best == BK_TILE_GEMM_AVX2 ? 256 : 0;
    const int blas_bits = bk_blas_vector_bits();
    return bits > 0 && blas_bits > 0 && bits > blas_bits ? best : BK_GEMM_BLAS;
}

/* a choice made once per process: every thread finds the same answer */
static int once(_Atomic int *slot, int (*how)(void)) {
    int v = atomic_load_explicit(slot, memory_order_relaxed);
    if (v == -100) {
        v = how();
        atomic_store_explicit(slot, v, memory_order_relaxed);
    }
    return v;
}

int bk_gemm_kernels(void) {
    static _Atomic int chosen = -100;
    return once(&chosen, choose);
}

const char *bk_gemm_kernels_name(void) { return bk_gemm_kernels_label(bk_gemm_kernels()); }

/* auto: the engine's kernels wherever they are vector kernels (gemm.h) */
static int choose_attention(void) {
    const int best = bk_tile_gemm_best_cached(), want = asked(best);
    if (want != -2)
        return want;
    return best > BK_TILE_GEMM_PLAIN ? best : BK_GEMM_BLAS;
}

int bk_gemm_attention_kernels(void) {
    static _Atomic int chosen = -100;
    return once(&chosen, choose_attention);
}

const char *bk_gemm_attention_name(void) { return bk_gemm_kernels_label(bk_gemm_attention_kernels()); }

/* "the BLAS (BIASKIT_GEMM=...)" or "the engine's ... kernels (BIASKIT_GEMM=...)"; why_blas: what auto's
 * choice of the BLAS means */
static const char *describe(char *text, size_t size, int k, const char *why_blas) {
    const char *v = getenv(BK_GEMM_ENV);
    if (k == BK_GEMM_BLAS)
        snprintf(text, size, "the BLAS (%s=%s)", BK_GEMM_ENV, v && *v ? v : why_blas);
    else
        snprintf(text, size, "the engine's %s kernels (%s=%s)", kernel_names[k], BK_GEMM_ENV, v && *v ? v : "auto");
    return text;
}

const char *bk_gemm_describe(void) {
    static char text[160];
    return describe(text, sizeof text, bk_gemm_kernels(), "auto: the BLAS's kernels are as wide as the engine's");
}

const char *bk_gemm_attention_describe(void) {
    static char text[160];
    return describe(text, sizeof text, bk_gemm_attention_kernels(), "auto: this CPU has neither AVX2 nor AVX-512");
}

/* ---- the product ---- */

/* Without memory for the blocks: each element's chain by itself (the same bits, slowly). */
static void gemm_by_element(int transA, int transB, int M, int N, int K, float alpha, const float *A, ptrdiff_t lda,
                            const float *B, ptrdiff_t ldb, int accumulate, float *C, ptrdiff_t ldc) {
    const ptrdiff_t sam = transA ? 1 : lda, sak = transA ? lda : 1;
    const ptrdiff_t sbk = transB ? 1 : ldb, sbn = transB ? ldb : 1;
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++)
                s = fmaf(A[m * sam + k * sak], B[k * sbk + n * sbn], s);
            const float r = alpha * s;
            C[m * ldc + n] = accumulate ? C[m * ldc + n] + r : r;
        }
}

/* One strip of B's packing: columns [n0 + j, n0 + j + w) of rows [k0, k0 + kw) of B (K x N; with transB
 * stored N x K, leading dimension ldb), rows contiguous: dst[k * w + c] = B(k0 + k, n0 + j + c). B's rows
 * are a multiple of 4 KiB apart in the model, so unpacked they would fall into the same few L1 sets. */
static void pack_strip(int transB, const float *B, ptrdiff_t ldb, int n, int k0, int kw, int w, float *dst) {
    if (transB) { /* B(k, n) = B[n * ldb + k]: read along k, one column of the strip at a time */
        for (int c = 0; c < w; c++) {
            const float *src = B + (ptrdiff_t)(n + c) * ldb + k0;
            for (int k = 0; k < kw; k++)
                dst[(size_t)k * w + c] = src[k];
        }
        return;
    }
    const float *src = B + (ptrdiff_t)k0 * ldb + n;
    if (w == GEMM_NR)
        for (int k = 0; k < kw; k++)
            for (int c = 0; c < GEMM_NR; c++) /* a fixed length: vector moves */
                dst[(size_t)k * GEMM_NR + c] = src[k * ldb + c];
    else
        for (int k = 0; k < kw; k++)
            memcpy(dst + (size_t)k * w, src + k * ldb, (size_t)w * sizeof *dst);
}

/* Where the slice of K [k0, k0 + kw) of the block of columns [n0, n0 + cols) has its strips (strip j at
 * + j * kw) in a packing of all of B (pack_in_team). */
static size_t packed_at(int K, int n0, int cols, int k0) {
    return (size_t)n0 * K + (size_t)k0 * cols;
}

/* All of B packed once, shared by the team: the units (block of GEMM_NB columns, slice of kc, strip)
 * shared out over the threads; the omp for ends with the team's barrier. */
static void pack_in_team(int transB, int N, int K, int kc, const float *B, ptrdiff_t ldb, float *Bp) {
    const int nb_count = (N + GEMM_NB - 1) / GEMM_NB, ks_count = K > 0 ? (K + kc - 1) / kc : 0;
    const int strips = GEMM_NB / GEMM_NR, units = nb_count * ks_count * strips;
#pragma omp for schedule(static)
    for (int u = 0; u < units; u++) {
        const int n0 = u / (ks_count * strips) * GEMM_NB, k0 = u / strips % ks_count * kc, j = u % strips * GEMM_NR;
        const int cols = N - n0 < GEMM_NB ? N - n0 : GEMM_NB, kw = K - k0 < kc ? K - k0 : kc;
        if (j < cols) {
            const int w = cols - j < GEMM_NR ? cols - j : GEMM_NR;
            pack_strip(transB, B, ldb, n0 + j, k0, kw, w, Bp + packed_at(K, n0, cols, k0) + (size_t)j * kw);
        }
    }
}

/* The partition of the rows (gemm.h). */
int bk_gemm_chunks(int M, int threads) {
    const int t = threads > 0 ? threads : 1;
    return ((M + GEMM_MB - 1) / GEMM_MB + t - 1) / t * t;
}

int bk_gemm_chunk_start(int M, int chunks, int c) {
    return c >= chunks ? M : (int)((int64_t)c * M / chunks / 4 * 4);
}

/* A transposed (stored K x M): its rows [m0, m0 + rows) over the slice of K [k0, k0 + kw) copied in
 * slivers of GEMM_MR rows, each by columns (dst[s * kw + k * h + r] = A[(k0 + k) * lda + m0 + s + r], h
 * the sliver's rows, 12 but for the last), which the kernels read fastest (tile_gemm.c) */
static void copy_transposed(const float *A, ptrdiff_t lda, int m0, int rows, int k0, int kw, float *dst) {
    for (int s0 = 0; s0 < rows; s0 += GEMM_MR, dst += (size_t)GEMM_MR * kw) {
        const int h = rows - s0 < GEMM_MR ? rows - s0 : GEMM_MR;
        const float *src = A + (size_t)k0 * lda + m0 + s0;
        if (h == GEMM_MR) /* a fixed length: vector moves, not a call per row */
            for (int k = 0; k < kw; k++)
                for (int r = 0; r < GEMM_MR; r++)
                    dst[(size_t)k * GEMM_MR + r] = src[k * lda + r];
        else
            for (int k = 0; k < kw; k++)
                memcpy(dst + (size_t)k * h, src + k * lda, (size_t)h * sizeof *dst);
    }
}

/* One slice of K of a weight gradient's block: `rows` rows (copied: Ap, copy_transposed) by `cols`
 * columns (packed: bslice, strip j at + j * kw) into C (the block's corner), the chains started at 0
 * (first) or taken from P (rows by GEMM_NB) and left in P (not last) or finished into C. */
static void block_slice(int variant, int rows, int cols, int kw, const float *Ap, const float *bslice, float *P,
                        int first, int last, float alpha, int accumulate, float *C, ptrdiff_t ldc) {
    for (int j = 0; j < cols; j += GEMM_NR) {
        const int w = cols - j < GEMM_NR ? cols - j : GEMM_NR;
        const float *bj = bslice + (size_t)j * kw;
        for (int s0 = 0; s0 < rows; s0 += GEMM_MR) {
            const int h = rows - s0 < GEMM_MR ? rows - s0 : GEMM_MR;
            float *ps = P ? P + (size_t)s0 * GEMM_NB + j : NULL;
            bk_tile_gemm_span(variant, h, w, kw, Ap + (size_t)s0 * kw, 1, h, bj, w, first ? NULL : ps, last ? NULL : ps,
                              GEMM_NB, alpha, accumulate, C + (size_t)s0 * ldc + j, ldc);
        }
    }
}

struct product {
    int variant, transA, transB, M, N, K, kc, chunks;
    float alpha;
    const float *A, *B;
    ptrdiff_t lda, ldb, ldc;
    int accumulate;
    float *C;
};

/* The forward and input-gradient products (A not transposed; M the tokens): B packed once by the team
 * (Bp); blocks of a chunk of rows by GEMM_NB columns handed out by the static schedule (each thread whole
 * chunks), K by slices with the chains carried in P (mb x GEMM_NB). A is read where it is, by rows (a
 * packing of it cost as much as the kernels gained from it at the model's shapes). */
static void thread_rows(const struct product *p, const float *Bp, float *P) {
    const int nb_count = (p->N + GEMM_NB - 1) / GEMM_NB, blocks = p->chunks * nb_count, K = p->K, kc = p->kc;
#pragma omp for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
        const int chunk = blk / nb_count, n0 = blk % nb_count * GEMM_NB;
        const int m0 = bk_gemm_chunk_start(p->M, p->chunks, chunk);
        const int rows = bk_gemm_chunk_start(p->M, p->chunks, chunk + 1) - m0;
        const int cols = p->N - n0 < GEMM_NB ? p->N - n0 : GEMM_NB;
        if (rows <= 0)
            continue;
        for (int k0 = 0; k0 < K || k0 == 0; k0 += kc) {
            const int kw = K - k0 < kc ? K - k0 : kc;
            const int first = k0 == 0, last = k0 + kw >= K;
            const float *bslice = Bp + packed_at(K, n0, cols, k0);
            for (int j = 0; j < cols; j += GEMM_NR) {
                const int w = cols - j < GEMM_NR ? cols - j : GEMM_NR;
                float *pj = P ? P + j : NULL;
                bk_tile_gemm_span(p->variant, rows, w, kw, p->A + (size_t)m0 * p->lda + k0, p->lda, 1,
                                  bslice + (size_t)j * kw, w, first ? NULL : pj, last ? NULL : pj, GEMM_NB, p->alpha,
                                  p->accumulate, p->C + (size_t)m0 * p->ldc + n0 + j, p->ldc);
            }
            if (K == 0)
                break;
        }
    }
}

/* The weight gradients (A transposed: dout^T; M the output channels, K the tokens), part t of parts: the
 * chunks t chunks / parts up to (t + 1) chunks / parts, in groups of up to GEMM_GROUP; per group, block
 * of columns and slice of K, B's slice packed once (Bblock, kc x GEMM_NB) for all the group's chunks,
 * then each chunk's slice of A copied (Ap) and the chains of all the group's rows carried (P: its rows
 * by GEMM_NB). */
static void part_channels(const struct product *p, int t, int parts, float *Bblock, float *Ap, float *P) {
    const int c0 = (int)((int64_t)t * p->chunks / parts), c1 = (int)((int64_t)(t + 1) * p->chunks / parts);
    const int K = p->K, kc = p->kc;
    for (int g0 = c0; g0 < c1; g0 += GEMM_GROUP) {
        const int g1 = c1 - g0 < GEMM_GROUP ? c1 : g0 + GEMM_GROUP, r0 = bk_gemm_chunk_start(p->M, p->chunks, g0);
        for (int n0 = 0; n0 < p->N; n0 += GEMM_NB) {
            const int cols = p->N - n0 < GEMM_NB ? p->N - n0 : GEMM_NB;
            for (int k0 = 0; k0 < K || k0 == 0; k0 += kc) {
                const int kw = K - k0 < kc ? K - k0 : kc;
                for (int j = 0; j < cols; j += GEMM_NR)
                    pack_strip(p->transB, p->B, p->ldb, n0 + j, k0, kw, cols - j < GEMM_NR ? cols - j : GEMM_NR,
                               Bblock + (size_t)j * kw);
                for (int c = g0; c < g1; c++) {
                    const int m0 = bk_gemm_chunk_start(p->M, p->chunks, c);
                    const int rows = bk_gemm_chunk_start(p->M, p->chunks, c + 1) - m0;
                    if (rows <= 0)
                        continue;
                    copy_transposed(p->A, p->lda, m0, rows, k0, kw, Ap);
                    block_slice(p->variant, rows, cols, kw, Ap, Bblock,
                                P ? P + (size_t)(m0 - r0) * GEMM_NB : NULL, k0 == 0, k0 + kw >= K, p->alpha,
                                p->accumulate, p->C + (size_t)m0 * p->ldc + n0, p->ldc);
                }
                if (K == 0)
                    break;
            }
        }
    }
}

/* the most rows one of `parts` shares of the chunks gets (parts = chunks: a chunk; = threads: a thread) */
static int rows_max(int M, int chunks, int parts) {
    int most = 1;
    for (int i = 0; i < parts; i++) {
        const int rows = bk_gemm_chunk_start(M, chunks, (int)((int64_t)(i + 1) * chunks / parts)) -
                         bk_gemm_chunk_start(M, chunks, (int)((int64_t)i * chunks / parts));
        most = rows > most ? rows : most;
    }
    return most;
}

static void run(int variant, int transA, int transB, int M, int N, int K, float alpha, const float *A, ptrdiff_t lda,
                const float *B, ptrdiff_t ldb, int accumulate, float *C, ptrdiff_t ldc) {
    if (M <= 0 || N <= 0)
        return;
    if (variant == BK_GEMM_BLAS) {
        bk_sgemm(transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, (int)lda,
                 B, (int)ldb, accumulate ? 1.0f : 0.0f, C, (int)ldc);
        return;
    }
    const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    /* the rows in chunks (gemm.h: about GEMM_MB rows, ten 12-row slivers; as many as a multiple of the
     * threads), so that each thread gets whole chunks and about as many rows as the others. (Blocks of 120
     * rows handed out in turn left the two threads 120 and 8 rows of a 128-row weight gradient.) */
    const int chunks = bk_gemm_chunks(M, threads), mb = rows_max(M, chunks, chunks);
    const int kc = K < GEMM_KC ? (K > 0 ? K : 1) : GEMM_KC;
    const int sliced = K > kc;
    const struct product p = {variant, transA, transB, M, N, K, kc, chunks, alpha, A, B, lda, ldb, ldc, accumulate, C};

    /* B packed: all of it once, shared by the team, where its blocks of columns are used by many chunks of
     * rows (A not transposed: M the tokens); else (the weight gradients) each thread packs B's slice of a
     * block once for all its chunks, which then stays in the cache (the whole packing read back was
     * 5-10% slower there) */
    const int shared = !transA;
    float *Bp = shared ? malloc((size_t)K * N * sizeof *Bp + 1) : NULL;
    if (shared && !Bp) {
        gemm_by_element(transA, transB, M, N, K, alpha, A, lda, B, ldb, accumulate, C, ldc);
        return;
    }
    /* per thread: a transposed A's slice of a chunk, B's slice of a block (not shared), the partial sums
     * (when K is sliced: a chunk's rows; transposed, the rows of a group of the thread's chunks) */
    const size_t apack = transA ? (size_t)mb * kc : 0;
    const size_t bpack = shared ? 0 : (size_t)kc * GEMM_NB;
    const int part_rows = rows_max(M, chunks, threads), group_rows = GEMM_GROUP * mb;
    const size_t prows = (size_t)(!transA ? mb : part_rows < group_rows ? part_rows : group_rows);
    const size_t psize = sliced ? prows * GEMM_NB : 0;
    atomic_int failed = 0;

#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        float *mine = malloc((apack + bpack + psize) * sizeof *mine + 1);
        if (!mine)
            atomic_store(&failed, 1);
        if (shared) {
            pack_in_team(transB, N, K, kc, B, ldb, Bp); /* ends with the team's barrier */
        } else {
#pragma omp barrier
        }
        if (!atomic_load(&failed)) {
            float *Ap = mine, *Bblock = mine + apack, *P = sliced ? mine + apack + bpack : NULL;
            if (transA) {
#pragma omp for schedule(static)
                for (int part = 0; part < threads; part++) /* one each, unless the team came smaller */
                    part_channels(&p, part, threads, Bblock, Ap, P);
            } else
                thread_rows(&p, Bp, P);
        }
        free(mine);
    }
    if (atomic_load(&failed))
        gemm_by_element(transA, transB, M, N, K, alpha, A, lda, B, ldb, accumulate, C, ldc);
    free(Bp);
}

void bk_gemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, ptrdiff_t lda, const float *B,
             ptrdiff_t ldb, int accumulate, float *C, ptrdiff_t ldc) {
    run(bk_gemm_kernels(), transA, transB, M, N, K, alpha, A, lda, B, ldb, accumulate, C, ldc);
}

int bk_gemm_with(int kernels, int transA, int transB, int M, int N, int K, float alpha, const float *A, ptrdiff_t lda,
                 const float *B, ptrdiff_t ldb, int accumulate, float *C, ptrdiff_t ldc) {
    if (kernels != BK_GEMM_BLAS && (kernels < 0 || kernels > bk_tile_gemm_best_cached()))
        return -1;
    run(kernels, transA, transB, M, N, K, alpha, A, lda, B, ldb, accumulate, C, ldc);
    return 0;
}
