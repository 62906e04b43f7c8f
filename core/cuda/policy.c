/* cuda/policy.h: the CUDA backend's decisions, in C with no CUDA header. */
#include "cuda/policy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *bk_cuda_getenv(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

/* A decimal integer in [0, INT32_MAX] with nothing around it, else -1. */
static long parse_index(const char *text)
{
    if (!text || *text < '0' || *text > '9')
        return -1;
    errno = 0;
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (errno || *end || v < 0 || v > 2147483647L)
        return -1;
    return v;
}

int bk_cuda_choose_gpu(int64_t requested, const char *requested_where, int count, bk_cuda_env env, void *ctx,
                       bk_cuda_gpu_choice *out, bk_error *err)
{
    out->device = 0;
    out->why[0] = '\0';
    if (count < 1)
        return bk_fail(err, BK_ERR_DEVICE, "CUDA backend: no GPU answers (0 devices visible)");
    const char *where = requested_where ? requested_where : "[run] gpu";
    if (requested >= 0) {
        if (requested >= count)
            return bk_fail(err, BK_ERR_CONFIG,
                           "%s = %lld, but this process sees %d GPU%s (devices 0..%d; CUDA_VISIBLE_DEVICES "
                           "renumbers them): choose one of those, or -1 (--set run.gpu=-1) to choose by local rank",
                           where, (long long)requested, count, count == 1 ? "" : "s", count - 1);
        out->device = (int)requested;
        snprintf(out->why, sizeof out->why, "GPU %d ([run] gpu = %lld)", out->device, (long long)requested);
        return BK_OK;
    }
    static const struct {
        const char *var, *launcher;
    } vars[] = BK_CUDA_LOCAL_RANK_VARS;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *value = env(vars[i].var, ctx);
        if (!value)
            continue;
        long rank = parse_index(value);
        if (rank < 0)
            return bk_fail(err, BK_ERR_CONFIG,
                           "CUDA backend: %s = '%s' (%s's local rank, which chooses this process's GPU): expected "
                           "an integer >= 0; set [run] gpu = N (e.g. --set run.gpu=0) to choose the GPU yourself",
                           vars[i].var, value, vars[i].launcher);
        out->device = (int)(rank % count);
        if (rank < count)
            snprintf(out->why, sizeof out->why, "GPU %d (local rank %ld of %s)", out->device, rank,
                     vars[i].launcher);
        else
            snprintf(out->why, sizeof out->why, "GPU %d (local rank %ld of %s, modulo %d visible GPU%s)", out->device,
                     rank, vars[i].launcher, count, count == 1 ? "" : "s");
        return BK_OK;
    }
    snprintf(out->why, sizeof out->why, "GPU 0 (no local rank set: one process)");
    return BK_OK;
}

int bk_cuda_error_is_async(const char *name)
{
    /* the runtime's errors of a kernel that faulted while running (driver_types.h: "the context cannot be
     * used, so it must be destroyed"), and the ECC / watchdog ones that end a kernel the same way */
    static const char *const sticky[] = {
        "cudaErrorIllegalAddress",   "cudaErrorLaunchFailure",       "cudaErrorAssert",
        "cudaErrorHardwareStackError", "cudaErrorIllegalInstruction", "cudaErrorMisalignedAddress",
        "cudaErrorInvalidAddressSpace", "cudaErrorInvalidPc",        "cudaErrorLaunchTimeout",
        "cudaErrorECCUncorrectable", "cudaErrorTensorMemoryLeak"};
    if (!name)
        return 0;
    for (size_t i = 0; i < sizeof sticky / sizeof sticky[0]; i++)
        if (!strcmp(name, sticky[i]))
            return 1;
    return 0;
}

int bk_cuda_sync_mode(const char *value, int *on, bk_error *err)
{
    *on = 0;
    if (!value || !*value || !strcmp(value, "0"))
        return BK_OK;
    if (!strcmp(value, "1")) {
        *on = 1;
        return BK_OK;
    }
    return bk_fail(err, BK_ERR_CONFIG,
                   "BIASKIT_CUDA_SYNC = '%s': expected 1 (synchronise and check after every kernel) or 0 / unset",
                   value);
}

static const char *or_unknown(const char *s)
{
    return s ? s : "unknown";
}

int bk_cuda_launch_report(const char *what, bk_cuda_status launch, int synced, bk_cuda_status sync,
                          bk_error *err)
{
    if (launch.code) {
        if (bk_cuda_error_is_async(launch.name))
            return bk_fail(err, BK_ERR_DEVICE,
                           "CUDA backend: at launching %s: %s (%s), the sticky error of work queued earlier that "
                           "failed while running (the CUDA context is unusable now)%s",
                           what, or_unknown(launch.text), or_unknown(launch.name),
                           synced ? "; with BIASKIT_CUDA_SYNC=1 every engine kernel and GEMM was checked, so the "
                                    "failure was in other queued work (a copy or a plugin's kernel)"
                                  : "; run again with BIASKIT_CUDA_SYNC=1 to name the kernel that failed");
        return bk_fail(err, BK_ERR_DEVICE, "CUDA backend: launching %s failed: %s (%s)", what,
                       or_unknown(launch.text), or_unknown(launch.name));
    }
    if (synced && sync.code)
        return bk_fail(err, BK_ERR_DEVICE,
                       "CUDA backend: %s failed while running: %s (%s) (BIASKIT_CUDA_SYNC=1: the stream was "
                       "synchronised right after its launch)",
                       what, or_unknown(sync.text), or_unknown(sync.name));
    return BK_OK;
}

int bk_cuda_pool_keep(const char *value, uint64_t *bytes, bk_error *err)
{
    *bytes = UINT64_MAX;
    if (!value || !*value)
        return BK_OK;
    const char *p = value;
    uint64_t n = 0;
    if (*p < '0' || *p > '9')
        goto bad;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (n > (UINT64_MAX - 9) / 10)
            goto bad;
        n = n * 10 + (uint64_t)(*p - '0');
    }
    int shift = 0;
    switch (*p) {
    case '\0':
        break;
    case 'K':
        shift = 10, p++;
        break;
    case 'M':
        shift = 20, p++;
        break;
    case 'G':
        shift = 30, p++;
        break;
    default:
        goto bad;
    }
    if (*p || (shift && n > (UINT64_MAX >> shift)))
        goto bad;
    *bytes = n << shift;
    return BK_OK;
bad:
    return bk_fail(err, BK_ERR_CONFIG,
                   "BIASKIT_CUDA_POOL_KEEP = '%s': expected the bytes the CUDA memory pool keeps reserved between "
                   "steps, as N, NK, NM or NG (KiB, MiB, GiB; 0 returns free memory to the driver at every "
                   "synchronisation), or unset to keep all",
                   value);
}
