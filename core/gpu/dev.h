/* The device backend's code is written once and compiled twice (core/model/backend.h):
 *
 *   core/cuda/backend_cuda.cu       as CUDA C++: kernels on a stream, cuBLAS for the GEMMs;
 *   core/gpu/backend_emulated.c     as C11: each kernel launch a loop over its thread indices, each
 *                                   GEMM a column-major cblas_sgemm per batch entry.
 *
 * What is shared lives in headers under core/gpu/ and must be valid C11 and CUDA C++ at once (no
 * designated initialisers, no compound literals, explicit casts from void *, no VLAs):
 *
 *   kernels_*.h   kernel bodies: `static inline BK_DEV_HD void k_name(int64_t i, const void *args)`,
 *                 where i is the thread index in [0, n) and args points to a `k_name_args` struct.
 *                 A body writes only outputs that belong to index i (no two indices write one
 *                 address, no atomics), so the result cannot depend on the order threads run in:
 *                 that is what makes the emulation a faithful test and every GPU run deterministic.
 *   ops_*.h       the backend functions (backend.h's table) as `static` functions that launch
 *                 kernels (BK_LAUNCH) and call GEMMs (dev_gemm) through the primitives below;
 *                 ops.h includes them and puts them into a table (dev_set_ops).
 *
 * The primitives each instantiation defines as `static` functions before including gpu/ops.h:
 *
 *   int dev_gemm(bk_dev *d, int transa, int transb, int m, int n, int k, float alpha,
 *                const float *A, int lda, int64_t strideA, const float *B, int ldb, int64_t strideB,
 *                float beta, float *C, int ldc, int64_t strideC, int batch, bk_error *err);
 *       cublasSgemmStridedBatched's meaning exactly: column-major, C = alpha op(A) op(B) + beta C for
 *       each of `batch` matrices (A + b * strideA, ...); transa/transb are 0 (N) or 1 (T).
 *   int dev_gemm_bf16(...)  the same with A and B stored in bf16 (const uint16_t *), C fp32: fp32
 *       accumulation on the tensor cores ([run] precision = "bf16").
 *   int dev_launched(bk_dev *d, const char *what, bk_error *err);   after a launch
 *   int dev_scratch(bk_dev *d, int slot, size_t bytes, void **out, bk_error *err);
 *       a buffer of at least `bytes` that stays valid until the next dev_scratch of the same slot
 *       (grown on demand, never shrunk; contents undefined). Slots: BK_DEV_SCRATCH_*.
 *   int dev_upload(bk_dev *d, void *dst, const void *src_host, size_t bytes, bk_error *err);
 *   int dev_download(bk_dev *d, void *dst_host, const void *src, size_t bytes, bk_error *err); waits
 *   int dev_zero(bk_dev *d, void *ptr, size_t bytes, bk_error *err);
 */
#ifndef BK_GPU_DEV_H
#define BK_GPU_DEV_H

#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define BK_DEV_HD __host__ __device__
#else
#define BK_DEV_HD
#endif

/* Threads per block of every grid launch. */
#define BK_DEV_THREADS 256
/* Most blocks of a grid-stride launch. */
#define BK_DEV_MAX_BLOCKS 65535

/* Scratch slots (dev_scratch). */
enum {
    BK_DEV_SCRATCH_ATT_Q = 0,   /* attention: q, k, v permuted to (B, H, T, hd) */
    BK_DEV_SCRATCH_ATT_K,
    BK_DEV_SCRATCH_ATT_V,
    BK_DEV_SCRATCH_ATT_O,       /* attention output / its gradient in (B, H, T, hd) */
    BK_DEV_SCRATCH_ATT_S,       /* scores of one query block (forward without saved probabilities) */
    BK_DEV_SCRATCH_ATT_DS,      /* score gradient of one query block */
    BK_DEV_SCRATCH_ATT_DQ,
    BK_DEV_SCRATCH_ATT_DK,
    BK_DEV_SCRATCH_ATT_DV,
    BK_DEV_SCRATCH_ATT_G,       /* per-(b, h) table-gradient partials */
    BK_DEV_SCRATCH_PARTIAL,     /* per-chunk partial sums of the reductions */
    BK_DEV_SCRATCH_PARTIAL2,
    BK_DEV_SCRATCH_HOST_ARGS,   /* small argument arrays uploaded for one call */
    BK_DEV_SCRATCH_BF16,        /* a GEMM's fp32 operand rounded to bf16 (bf16 storage) */
    BK_DEV_SCRATCH_ATT_V2,      /* the fused attention's partials of the ABI 2 gradients (kernels_flash.h) */
    BK_DEV_SCRATCH_ATT_TURN,    /* the second-generation backward's turns and ticket (kernels_flash2_bwd.h) */
    BK_DEV_SCRATCH_COUNT
};

typedef struct bk_dev {
    void *stream;            /* cudaStream_t (NULL when emulated) */
    void *blas;              /* cublasHandle_t (NULL when emulated) */
    int tf32;                /* TF32 matmuls */
    int bf16;                /* bf16 tensor-core matmuls (cuBLAS's compute type 32F_FAST_16BF) */
    size_t smem_optin;       /* shared memory a block may have (the GPU's opt-in limit; 0: no limit) */
    int flash_gen;           /* 2: the fused attention's second generation (gpu/ops_flash2.h), forward and
                                backward, where it has a program; 0 (the default) or 1: the first */
    void *scratch[BK_DEV_SCRATCH_COUNT];
    size_t scratch_bytes[BK_DEV_SCRATCH_COUNT];
} bk_dev;

typedef void (*bk_dev_kernel)(int64_t i, const void *args);

/* Block programs (kernels_flash.h): `static inline BK_DEV_HD void k_name(int64_t cta, const void *args,
 * float *smem)` runs one thread block (CTA) of BK_CTA_THREADS threads that share `smem`, as a sequence
 * of phases separated by barriers:
 *
 *     BK_CTA_PHASE(t) { ...what thread t does, reading and writing smem... }
 *
 * On the GPU every thread runs the body with its own t, then all meet at __syncthreads(). In C the body
 * runs for t = 0, 1, ..., BK_CTA_THREADS - 1 in turn: a faithful emulation as long as no thread reads in
 * one phase what another writes in the same phase (the rule the block programs keep). The body is a
 * loop of one round in both, so `continue` and `break` end thread t's part of the phase. Code between
 * phases is run by every thread on the GPU and once in C: it may only compute values uniform over the
 * block (loop bounds, tile indices). State that lives across phases is in smem, never in a
 * thread's local variables. */
typedef void (*bk_dev_cta_program)(int64_t cta, const void *args, float *smem);

/* Threads per block of every block program, and its warps. */
#define BK_CTA_THREADS 128
#define BK_CTA_WARPS (BK_CTA_THREADS / 32)

/* BK_CTA_WARP_PHASE(w) { ... } is a phase run per warp: on the GPU all 32 threads of warp w run the
 * body together (warp-collective operations: gpu/mma.h), in C the body runs once for each w. */
#if defined(__CUDA_ARCH__)
#define BK_CTA_PHASE(t)                                                                                    \
    for (int bk_cta_once_ = 1; bk_cta_once_; bk_cta_once_ = 0, __syncthreads())                            \
        for (int t = (int)threadIdx.x, bk_cta_round_ = 1; bk_cta_round_; bk_cta_round_ = 0)
#define BK_CTA_WARP_PHASE(w)                                                                               \
    for (int bk_cta_once_ = 1; bk_cta_once_; bk_cta_once_ = 0, __syncthreads())                            \
        for (int w = (int)(threadIdx.x / 32), bk_cta_round_ = 1; bk_cta_round_; bk_cta_round_ = 0)
#else
/* The order the emulation runs a phase's threads in: 0 ascending (the default), 1 descending. A block
 * program that breaks the rule above gives different results in the two orders; the tests compare
 * them (backend_emulated.c defines it). */
extern int bk_emulated_thread_order;
#define BK_CTA_PHASE(t)                                                                                    \
    for (int bk_cta_i_ = 0; bk_cta_i_ < BK_CTA_THREADS; bk_cta_i_++)                                       \
        for (int t = bk_emulated_thread_order ? BK_CTA_THREADS - 1 - bk_cta_i_ : bk_cta_i_, bk_cta_round_ = 1; \
             bk_cta_round_; bk_cta_round_ = 0)
#define BK_CTA_WARP_PHASE(w)                                                                               \
    for (int bk_cta_i_ = 0; bk_cta_i_ < BK_CTA_WARPS; bk_cta_i_++)                                         \
        for (int w = bk_emulated_thread_order ? BK_CTA_WARPS - 1 - bk_cta_i_ : bk_cta_i_, bk_cta_round_ = 1;    \
             bk_cta_round_; bk_cta_round_ = 0)
#endif

#if defined(__CUDACC__)

static inline unsigned bk_dev_blocks(int64_t n)
{
    int64_t b = (n + BK_DEV_THREADS - 1) / BK_DEV_THREADS;
    return (unsigned)(b < 1 ? 1 : b > BK_DEV_MAX_BLOCKS ? BK_DEV_MAX_BLOCKS : b);
}

/* One grid-stride loop runs any kernel body: thread i of n calls F(i, &args). */
template <typename A, void (*F)(int64_t, const void *)>
__global__ void bk_dev_grid(int64_t n, A args)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        F(i, &args);
}

/* Launch kernel body F over n indices with `args` (an lvalue of type A); evaluates to BK_OK or the
 * launch error. */
#define BK_LAUNCH(d, F, A, n, args, err)                                                                 \
    (bk_dev_grid<A, F><<<bk_dev_blocks((int64_t)(n)), BK_DEV_THREADS, 0, (cudaStream_t)(d)->stream>>>( \
         (int64_t)(n), (args)),                                                                        \
     dev_launched((d), #F, (err)))

/* One block program per block: block `cta` of n runs F(cta, &args, smem) with smem_bytes of dynamic
 * shared memory (allowed above the default 48 KiB first). n must be at least 1. */
template <typename A, void (*F)(int64_t, const void *, float *)>
__global__ void __launch_bounds__(BK_CTA_THREADS) bk_dev_cta(A args)
{
    extern __shared__ __align__(128) float bk_dev_smem[]; /* 32-byte aligned at least: gpu/mma.h's loads */
    F((int64_t)blockIdx.x, &args, bk_dev_smem);
}

/* A program may use more than the default 48 KiB of dynamic shared memory only once allowed to; the
 * driver call is made the first time a program needs more than it was allowed (once per program and
 * size, not per launch). A refusal surfaces as the launch's error. */
template <typename A, void (*F)(int64_t, const void *, float *)>
static inline void bk_dev_cta_allow(size_t bytes)
{
    static size_t allowed = 48 * 1024;
    if (bytes > allowed &&
        cudaFuncSetAttribute(bk_dev_cta<A, F>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) == cudaSuccess)
        allowed = bytes;
}

#define BK_LAUNCH_CTA(d, F, A, n, smem_bytes, args, err)                                                    \
    (bk_dev_cta_allow<A, F>((size_t)(smem_bytes)),                                                          \
     bk_dev_cta<A, F><<<(unsigned)(n), BK_CTA_THREADS, (size_t)(smem_bytes), (cudaStream_t)(d)->stream>>>( \
         (args)),                                                                                           \
     dev_launched((d), #F, (err)))

#else

/* The emulation: every index in turn (in parallel over host threads; bodies write disjoint outputs,
 * so the order does not matter). Defined in backend_emulated.c. */
int bk_emulated_launch(int64_t n, bk_dev_kernel f, const void *args);

#define BK_LAUNCH(d, F, A, n, args, err) ((void)(d), (void)(err), bk_emulated_launch((int64_t)(n), F, &(args)))

/* Blocks 0 .. n-1 in turn (in parallel over host threads, each with its own smem_bytes of "shared
 * memory"; a block writes only what belongs to it). BK_ERR_NOMEM when that memory cannot be had. */
int bk_emulated_launch_cta(int64_t n, bk_dev_cta_program f, const void *args, size_t smem_bytes, bk_error *err);

#define BK_LAUNCH_CTA(d, F, A, n, smem_bytes, args, err)                                                  \
    ((void)(d), bk_emulated_launch_cta((int64_t)(n), F, &(args), (size_t)(smem_bytes), (err)))

#endif

/* Turns between blocks (the fused attention's second-generation backward, kernels_flash2_bwd.h): terms
 * from several blocks added into one place in a fixed order without atomics on the values.
 *   bk_dev_ticket(counter)        the block's place in line: 0, 1, 2, ... in the order blocks start (one
 *                                 thread per block calls it);
 *   bk_dev_wait_turn(turn, me)    one thread of the block spins until *turn == me, then what the block
 *                                 that passed the turn wrote is visible to it (and, after the phase's
 *                                 barrier, to the block);
 *   bk_dev_pass_turn(turn, next)  one thread, after a barrier that follows the block's writes: they are
 *                                 made visible, then *turn = next.
 * A block may wait only for a turn that a block with an earlier ticket passes: that block has started
 * and runs to its end, so every wait ends. On the GPU: atomics on global memory and __threadfence (the
 * pattern of cooperative groups' grid barrier). In C (backend_emulated.c): blocks run on host threads in
 * ticket order, the spin an acquire load that yields the processor, the pass a release store. */
#if defined(__CUDA_ARCH__)
static __device__ inline uint32_t bk_dev_ticket(uint32_t *counter)
{
    return atomicAdd(counter, 1u);
}
static __device__ inline void bk_dev_wait_turn(int32_t *turn, int32_t me)
{
    while (atomicAdd(turn, 0) != me)
        __nanosleep(32);
    __threadfence();
}
static __device__ inline void bk_dev_pass_turn(int32_t *turn, int32_t next)
{
    __threadfence();
    atomicExch(turn, next);
}
#else
uint32_t bk_dev_ticket(uint32_t *counter);
void bk_dev_wait_turn(int32_t *turn, int32_t me);
void bk_dev_pass_turn(int32_t *turn, int32_t next);
#endif

/* The tile pairs the fused attention's block programs visit (kernels_flash.h: index K_FLASH_FWD, _DKDV,
 * _DQ), counted by the emulation only, so that a test can see that a mask's skipped tiles are never
 * visited; nothing on the GPU. Block programs run in parallel over host threads: relaxed atomic adds. */
#if defined(__CUDACC__)
#define BK_DEV_COUNT_TILE(which) ((void)0)
#else
extern long long bk_emulated_tile_visits[3];
#define BK_DEV_COUNT_TILE(which) ((void)__atomic_fetch_add(&bk_emulated_tile_visits[(which)], 1LL, __ATOMIC_RELAXED))
#endif

#endif
