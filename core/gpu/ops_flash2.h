/* The launches of the fused attention's second generation (kernels_flash2.h: forward; kernels_flash2_bwd.h:
 * backward), written once for the CUDA backend and its C emulation (gpu/dev.h), called by ops_flash.h when
 * bk_dev.flash_gen is 2 (the first generation stays the default and the reference). They run the fp32
 * programs only (not the bf16 tensor-core ones, not bf16 storage), the forward for the head sizes and key
 * tiles it has an instantiation for, each when its shared memory fits the GPU; otherwise they report that
 * they did not run and the first generation runs. The key tile is the first generation's plan tile: the second generation
 * gives its bits only at the same key tile (kernels_flash2.h, "Bits"). */
#ifndef BK_GPU_OPS_FLASH2_H
#define BK_GPU_OPS_FLASH2_H

#include "gpu/dev.h"
#include "gpu/kernels_flash.h"
#include "gpu/kernels_flash2.h"
#include "gpu/kernels_flash2_bwd.h"

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

/* The backward of `a` (shape, tile, storage, dsum, the table partials G and the ABI 2 partials set as for
 * the first generation's k_flash_dkdv / k_flash_dq; fp32 storage) on the second generation
 * (kernels_flash2_bwd.h): D, the turns, the one-pass block program, dQ into dqkv; the table and ABI 2
 * partials are then reduced by the caller as after the first generation. *ran = 1 when it ran, 0 when
 * its block needs more shared memory than d allows or the storage is bf16 (BK_OK, nothing done). Any
 * head size and tile: its block program has no per-shape instantiation. */
static int dev_flash2_backward(bk_dev *d, const k_flash_args *a, int *ran, bk_error *err)
{
    const int hd = a->C / a->H, nq = k_flash_tiles(a);
    *ran = 0;
    if (a->qkv16 || a->o16 || a->dout16)
        return BK_OK;
    const size_t bytes = (size_t)k_flash2_bwd_layout(a->tile, hd, k_flash_v2_needs(&a->v2)).f.total * sizeof(float);
    const size_t dsum_bytes = (size_t)2 * K_FLASH2_DSUM_ROWS * (hd + 1) * sizeof(float);
    if (d->smem_optin && (bytes > d->smem_optin || dsum_bytes > d->smem_optin))
        return BK_OK;
    *ran = 1;
    const int64_t rows = (int64_t)a->B * a->H * a->T, turns = (int64_t)a->B * a->H * nq;
    k_flash2_bwd_args g;
    memset(&g, 0, sizeof g);
    g.fa = *a;
    void *buf = NULL;
    int rc;
    if ((rc = dev_scratch(d, BK_DEV_SCRATCH_ATT_TURN, (size_t)(turns + 1) * sizeof(int32_t), &buf, err)) != BK_OK)
        return rc;
    g.turn = (int32_t *)buf, g.ticket = (uint32_t *)(g.turn + turns);
    if ((rc = dev_scratch(d, BK_DEV_SCRATCH_ATT_DQ, (size_t)a->B * a->T * a->C * sizeof(float), &buf, err)) != BK_OK ||
        (rc = dev_zero(d, buf, (size_t)a->B * a->T * a->C * sizeof(float), err)) != BK_OK)
        return rc;
    g.dq = (float *)buf;
    /* the rows' running sums start at 0 (the first generation wrote them whole at the end of k_flash_dq) */
    if (a->v2.dscale_part && (rc = dev_zero(d, a->v2.dscale_part, (size_t)rows * sizeof(double), err)) != BK_OK)
        return rc;
    if (a->v2.drscale_part && (rc = dev_zero(d, a->v2.drscale_part, (size_t)rows * sizeof(double), err)) != BK_OK)
        return rc;
    const int64_t chunks = (int64_t)a->B * a->H * ((a->T + K_FLASH2_DSUM_ROWS - 1) / K_FLASH2_DSUM_ROWS);
    k_flash_args A = *a;
    if ((rc = BK_LAUNCH(d, k_flash2_turn_init, k_flash2_bwd_args, turns, g, err)) != BK_OK ||
        (rc = BK_LAUNCH_CTA(d, k_flash2_dsum, k_flash_args, chunks, dsum_bytes, A, err)) != BK_OK ||
        (rc = BK_LAUNCH_CTA(d, k_flash2_bwd, k_flash2_bwd_args, turns, bytes, g, err)) != BK_OK)
        return rc;
    return BK_LAUNCH(d, k_flash2_dq_add, k_flash2_bwd_args, (int64_t)a->B * a->T * a->C, g, err);
}

#endif
