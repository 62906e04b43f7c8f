/* The launch of the fused attention's second-generation forward (kernels_flash2.h), written once for the
 * CUDA backend and its C emulation (gpu/dev.h), called by ops_flash.h's forward when bk_dev.flash_gen is
 * 2 (the first generation stays the default and the reference). It runs the fp32 programs' forward only
 * (not the bf16 tensor-core one, not bf16 storage), for the head sizes and key tiles it has an
 * instantiation for, when its shared memory fits the GPU; otherwise it reports that it did not run and
 * the first generation runs. The key tile is the first generation's plan tile: the second generation
 * gives its bits only at the same key tile (kernels_flash2.h, "Bits"). */
#ifndef BK_GPU_OPS_FLASH2_H
#define BK_GPU_OPS_FLASH2_H

#include "gpu/dev.h"
#include "gpu/kernels_flash.h"
#include "gpu/kernels_flash2.h"

#include <stddef.h>
#include <stdint.h>

/* m16 fragments per warp of the instantiation for (head size, key tile), 0 when there is none. */
static inline int dev_flash2_mf(int hd, int tile)
{
    if (tile == 64 && (hd == 16 || hd == 32 || hd == 64))
        return 2;
    if (tile == 32 && hd == 64)
        return 2;
    if ((tile == 32 || tile == 16) && hd == 128)
        return 1;
    return 0;
}

/* The shared memory of that instantiation in bytes (0 when there is none). */
static inline size_t dev_flash2_smem(int hd, int tile)
{
    const int mf = dev_flash2_mf(hd, tile);
    return mf ? (size_t)k_flash2_layout(hd, tile, mf).total * sizeof(float) : 0;
}

/* The forward of `a` (shape, tile, storage set as for k_flash_fwd; fp32 storage) on the second
 * generation: *ran = 1 when it ran (the launch's status returned), 0 when it has no program for the shape
 * or its block needs more shared memory than d allows (BK_OK, nothing done). */
static int dev_flash2_forward(bk_dev *d, const k_flash_args *a, int *ran, bk_error *err)
{
    const int hd = a->C / a->H, tile = a->tile, mf = dev_flash2_mf(hd, tile);
    *ran = 0;
    if (!mf || a->qkv16 || a->out16)
        return BK_OK;
    const size_t bytes = dev_flash2_smem(hd, tile);
    if (d->smem_optin && bytes > d->smem_optin)
        return BK_OK;
    const int br = k_flash2_layout(hd, tile, mf).br;
    const int64_t blocks = (int64_t)a->B * a->H * ((a->T + br - 1) / br);
    k_flash_args A = *a;
    *ran = 1;
    if (hd == 16)
        return BK_LAUNCH_CTA(d, k_flash2_fwd_16_64, k_flash_args, blocks, bytes, A, err);
    if (hd == 32)
        return BK_LAUNCH_CTA(d, k_flash2_fwd_32_64, k_flash_args, blocks, bytes, A, err);
    if (hd == 64 && tile == 64)
        return BK_LAUNCH_CTA(d, k_flash2_fwd_64_64, k_flash_args, blocks, bytes, A, err);
    if (hd == 64)
        return BK_LAUNCH_CTA(d, k_flash2_fwd_64_32, k_flash_args, blocks, bytes, A, err);
    if (tile == 32)
        return BK_LAUNCH_CTA(d, k_flash2_fwd_128_32, k_flash_args, blocks, bytes, A, err);
    return BK_LAUNCH_CTA(d, k_flash2_fwd_128_16, k_flash_args, blocks, bytes, A, err);
}

#endif
