/* Row programs: block programs (gpu/dev.h) for the layers that reduce along rows — LayerNorm forward and
 * backward, softmax + cross-entropy (kernels_layers.h) and the materialized attention's softmax rows
 * (kernels_attention.h). A row of the CPU's row functions (model/softmax_math.h, layernorm_math.h) is
 * BK_SUM_LANES interleaved partial results combined in a fixed order; here each lane is one thread that
 * runs the lane's loop exactly as the CPU does, so a block of BK_CTA_THREADS threads takes
 * K_ROWS_PER_CTA consecutive rows: in a reduction phase thread t is lane t % BK_SUM_LANES of the block's
 * row t / BK_SUM_LANES, the lanes' results kept in shared memory; in an elementwise phase every thread
 * takes a strided share of each row (coalesced). The lanes combine as on the CPU, so the results are the
 * CPU's bits wherever the arithmetic is (emulated), while no row is one thread's serial loop (the first
 * version, one thread per row, left GPT-2 small's 8,192 rows of 50,257 logits to 8,192 threads). */
#ifndef BK_GPU_ROWS_H
#define BK_GPU_ROWS_H

#include "gpu/dev.h"
#include "model/softmax_math.h" /* BK_SUM_LANES */

#include <stdint.h>

#define K_ROWS_PER_CTA (BK_CTA_THREADS / BK_SUM_LANES)

/* blocks for n rows */
static inline BK_DEV_HD int64_t k_row_blocks(int64_t n)
{
    return (n + K_ROWS_PER_CTA - 1) / K_ROWS_PER_CTA;
}

/* rows of block `cta` of a program over n rows (the last block may have fewer) */
static inline BK_DEV_HD int k_rows_of(int64_t cta, int64_t n)
{
    const int64_t first = cta * K_ROWS_PER_CTA;
    return n - first < K_ROWS_PER_CTA ? (int)(n - first) : K_ROWS_PER_CTA;
}

#endif
