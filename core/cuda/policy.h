/* The CUDA backend's decisions that need no GPU, as plain C (compiled into the engine in every build and
 * into the backend module, cuda/module.h), so that tests/test_cuda_policy.c checks them on any machine:
 *
 *   - which GPU this process uses (the local rank of an MPI launcher, or [run] gpu), and the banner's
 *     words for why;
 *   - what a kernel launch reports, from the launch's error and, in the debug mode BIASKIT_CUDA_SYNC=1,
 *     the error of the stream synchronisation after it;
 *   - how the memory pool's release threshold is set (BIASKIT_CUDA_POOL_KEEP).
 *
 * Environment variables are read through a lookup function (bk_cuda_env), so a test passes its own. */
#ifndef BK_CUDA_POLICY_H
#define BK_CUDA_POLICY_H

#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* getenv's meaning: the value of `name`, or NULL when unset. */
typedef const char *(*bk_cuda_env)(const char *name, void *ctx);
/* getenv itself (ctx unused). */
const char *bk_cuda_getenv(const char *name, void *ctx);

/* --- which GPU -------------------------------------------------------------------------------------- */

/* The local-rank variables, in the order they are consulted: the first one set decides.
 * Open MPI's and MPICH's launchers (mpirun / mpiexec) come before Slurm's, because an mpirun started
 * inside a Slurm job step inherits that step's SLURM_LOCALID (0 for every rank it starts), while its
 * own variable is right; under srun the MPI ones are unset and SLURM_LOCALID is the rank's. */
#define BK_CUDA_LOCAL_RANK_VARS                                                                            \
    {{"OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI"}, {"MPI_LOCALRANKID", "MPICH"}, {"SLURM_LOCALID", "Slurm"}}

/* [run] gpu's "not set": choose from the local rank. */
#define BK_CUDA_GPU_AUTO (-1)

typedef struct bk_cuda_gpu_choice {
    int device;     /* the CUDA device index, in [0, count) */
    char why[160];  /* the banner's words: "GPU 1 (local rank 1 of Open MPI)" */
} bk_cuda_gpu_choice;

/* The GPU of this process, among `count` >= 1 visible devices (CUDA_VISIBLE_DEVICES applied):
 *   - `requested` >= 0 ([run] gpu): that device; an error when it is not below count;
 *   - else the first local-rank variable set (BK_CUDA_LOCAL_RANK_VARS), modulo count: a launcher that
 *     gives each rank its own GPU (Slurm's --gpus-per-task, a CUDA_VISIBLE_DEVICES per rank) leaves each
 *     process one visible device whatever its local rank, and more processes than GPUs on a node is a
 *     legitimate (slower) setup, e.g. testing two ranks on one GPU; the banner then says "modulo N
 *     visible GPUs";
 *   - else device 0 ("GPU 0 (one process; no local rank set)").
 * A variable set to anything but a decimal integer in [0, 2^31) is an error naming it and its value (a
 * launcher we misread should not silently pile every rank on one GPU); [run] gpu overrides it.
 * `requested_where` names where [run] gpu was set (for the messages; NULL: "[run] gpu"). */
int bk_cuda_choose_gpu(int64_t requested, const char *requested_where, int count, bk_cuda_env env, void *ctx,
                       bk_cuda_gpu_choice *out, bk_error *err);

/* --- what a launch reports -------------------------------------------------------------------------- */

/* One CUDA call's outcome, as the runtime names it: code 0 (cudaSuccess) or an error with
 * cudaGetErrorName's `name` ("cudaErrorIllegalAddress") and cudaGetErrorString's `text`. */
typedef struct bk_cuda_status {
    int code;
    const char *name;
    const char *text;
} bk_cuda_status;

/* Whether an error of this name comes from a kernel that failed while running (an illegal address, a
 * device-side assert, ...): such an error is sticky (the context is unusable) and is returned by
 * whatever call comes next, so at a launch it may be an earlier kernel's, not this one's. */
int bk_cuda_error_is_async(const char *name);

/* BIASKIT_CUDA_SYNC's value -> *on: unset, "" or "0" off; "1" on; anything else an error naming it. */
int bk_cuda_sync_mode(const char *value, int *on, bk_error *err);

/* What the check after launching `what` (a kernel, or a cuBLAS call in sync mode) reports:
 *   launch   the runtime's last error read (and so cleared) right after the launch: this launch's,
 *            because every earlier error was cleared where it was reported;
 *   synced   1 when the stream was synchronised after the launch (BIASKIT_CUDA_SYNC=1), with the
 *            outcome in `sync`.
 * BK_OK when both are clean; else BK_ERR_DEVICE with a message naming `what` and saying whether it
 * failed to start, failed while running (sync mode), or met an earlier kernel's sticky failure. */
int bk_cuda_launch_report(const char *what, bk_cuda_status launch, int synced, bk_cuda_status sync,
                          bk_error *err);

/* --- the memory pool -------------------------------------------------------------------------------- */

/* The release threshold of the device's default memory pool (cudaMemPoolAttrReleaseThreshold): the
 * bytes the pool keeps reserved at a synchronisation instead of returning them to the driver. From
 * BIASKIT_CUDA_POOL_KEEP: unset or "" -> UINT64_MAX (keep everything: a training step frees and
 * reallocates the same sizes every step); a size "N", "NK", "NM", "NG" (bytes, KiB, MiB, GiB); "0"
 * returns every free byte at each synchronisation (the driver's default). Anything else is an error
 * naming the variable. */
int bk_cuda_pool_keep(const char *value, uint64_t *bytes, bk_error *err);

#ifdef __cplusplus
}
#endif

#endif
