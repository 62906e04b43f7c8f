/* The CUDA backend's decisions that need no GPU (cuda/policy.h), on any machine: which GPU a process uses
 * (each local-rank variable, their precedence, [run] gpu, bad values, the banner's words); what a kernel
 * launch reports from the launch's and the debug synchronisation's errors; BIASKIT_CUDA_SYNC and
 * BIASKIT_CUDA_POOL_KEEP; [run] gpu in the experiment schema.
 * `test_cuda_policy cuda` (test_cuda_policy_cuda), where a GPU answers (else exit 77, skipped): a failed, reported CUDA call
 * leaves no error for the next launch check (no_stale_error), and the backend's description, [run] gpu's
 * range, the sync mode and the variables' errors (gpu_backend_choice). Not tested anywhere: the sync
 * mode's report of a kernel that faults (a sticky error would spoil the process for the tests after it). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "test_util.h"

#include "config/experiment.h"
#include "cuda/policy.h"
#include "cuda/device.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if BK_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* A fake environment: name=value pairs. */
typedef struct fake_env {
    const char *pairs[8][2];
} fake_env;

static const char *lookup(const char *name, void *ctx)
{
    const fake_env *e = ctx;
    for (int i = 0; i < 8 && e->pairs[i][0]; i++)
        if (!strcmp(e->pairs[i][0], name))
            return e->pairs[i][1];
    return NULL;
}

/* The choice for `requested` among `count` GPUs under `env`; fails the test on an error. */
static bk_cuda_gpu_choice choose(int64_t requested, int count, fake_env env)
{
    bk_cuda_gpu_choice c;
    bk_error err;
    if (bk_cuda_choose_gpu(requested, NULL, count, lookup, &env, &c, &err))
        fail_msg("unexpected error: %s", err.message);
    return c;
}

static void choose_error(int64_t requested, const char *where, int count, fake_env env, const char *needle1,
                         const char *needle2)
{
    bk_cuda_gpu_choice c;
    bk_error err;
    if (bk_cuda_choose_gpu(requested, where, count, lookup, &env, &c, &err) == BK_OK)
        fail_msg("expected an error containing \"%s\", got GPU %d (%s)", needle1, c.device, c.why);
    assert_message_has(err.message, needle1);
    if (needle2)
        assert_message_has(err.message, needle2);
}

static void gpu_each_variable(void **state)
{
    (void)state;
    bk_cuda_gpu_choice c = choose(-1, 4, (fake_env){{{"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}});
    assert_int_equal(c.device, 1);
    assert_string_equal(c.why, "GPU 1 (local rank 1 of Open MPI)");
    c = choose(-1, 4, (fake_env){{{"MPI_LOCALRANKID", "2"}}});
    assert_int_equal(c.device, 2);
    assert_string_equal(c.why, "GPU 2 (local rank 2 of MPICH)");
    c = choose(-1, 4, (fake_env){{{"SLURM_LOCALID", "3"}}});
    assert_int_equal(c.device, 3);
    assert_string_equal(c.why, "GPU 3 (local rank 3 of Slurm)");
    c = choose(-1, 4, (fake_env){{{NULL, NULL}}});
    assert_int_equal(c.device, 0);
    assert_string_equal(c.why, "GPU 0 (no local rank set: one process)");
    /* variables of other launchers say nothing about the GPU */
    c = choose(-1, 4, (fake_env){{{"OMPI_COMM_WORLD_RANK", "3"}, {"PMI_RANK", "2"}}});
    assert_int_equal(c.device, 0);
}

/* Open MPI, then MPICH, then Slurm: an mpirun inside a Slurm step inherits SLURM_LOCALID = 0. */
static void gpu_precedence(void **state)
{
    (void)state;
    bk_cuda_gpu_choice c = choose(
        -1, 8, (fake_env){{{"SLURM_LOCALID", "0"}, {"MPI_LOCALRANKID", "5"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "3"}}});
    assert_int_equal(c.device, 3);
    assert_string_equal(c.why, "GPU 3 (local rank 3 of Open MPI)");
    c = choose(-1, 8, (fake_env){{{"SLURM_LOCALID", "0"}, {"MPI_LOCALRANKID", "5"}}});
    assert_int_equal(c.device, 5);
    assert_string_equal(c.why, "GPU 5 (local rank 5 of MPICH)");
    /* the first variable set decides, even when a later one would be valid and it is not */
    choose_error(-1, NULL, 8, (fake_env){{{"OMPI_COMM_WORLD_LOCAL_RANK", "x"}, {"SLURM_LOCALID", "1"}}},
                 "OMPI_COMM_WORLD_LOCAL_RANK = 'x'", NULL);
}

/* [run] gpu overrides every variable, and is checked against the visible count. */
static void gpu_override(void **state)
{
    (void)state;
    bk_cuda_gpu_choice c = choose(2, 4, (fake_env){{{"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}});
    assert_int_equal(c.device, 2);
    assert_string_equal(c.why, "GPU 2 ([run] gpu = 2)");
    c = choose(0, 1, (fake_env){{{"SLURM_LOCALID", "abc"}}}); /* a bad variable is not even read */
    assert_int_equal(c.device, 0);
    choose_error(4, "exp.toml:3:7: [run] gpu", 4, (fake_env){{{NULL, NULL}}}, "exp.toml:3:7: [run] gpu = 4",
                 "sees 4 GPUs (devices 0..3");
    choose_error(1, NULL, 1, (fake_env){{{NULL, NULL}}}, "[run] gpu = 1, but this process sees 1 GPU (", NULL);
    choose_error(0, NULL, 0, (fake_env){{{NULL, NULL}}}, "no GPU answers", NULL);
}

/* More local ranks than GPUs: modulo the count, and the banner says so. */
static void gpu_modulo(void **state)
{
    (void)state;
    bk_cuda_gpu_choice c = choose(-1, 2, (fake_env){{{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}}});
    assert_int_equal(c.device, 1);
    assert_string_equal(c.why, "GPU 1 (local rank 3 of Open MPI, modulo 2 visible GPUs)");
    /* each rank sees its own one GPU (Slurm --gpus-per-task=1): device 0 for every rank */
    c = choose(-1, 1, (fake_env){{{"SLURM_LOCALID", "7"}}});
    assert_int_equal(c.device, 0);
    assert_string_equal(c.why, "GPU 0 (local rank 7 of Slurm, modulo 1 visible GPU)");
    c = choose(-1, 3, (fake_env){{{"MPI_LOCALRANKID", "2147483647"}}});
    assert_int_equal(c.device, 2147483647 % 3);
}

static void gpu_bad_values(void **state)
{
    (void)state;
    static const char *const bad[] = {"abc", "-1", "", " 1", "1 ", "1x", "+1", "0x1", "2147483648", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char needle[96];
        snprintf(needle, sizeof needle, "SLURM_LOCALID = '%s' (Slurm's local rank", bad[i]);
        choose_error(-1, NULL, 4, (fake_env){{{"SLURM_LOCALID", bad[i]}}}, needle, "set [run] gpu = N");
        snprintf(needle, sizeof needle, "MPI_LOCALRANKID = '%s' (MPICH's", bad[i]);
        choose_error(-1, NULL, 4, (fake_env){{{"MPI_LOCALRANKID", bad[i]}}}, needle, "expected an integer >= 0");
    }
}

static bk_cuda_status ok(void)
{
    return (bk_cuda_status){0, "cudaSuccess", "no error"};
}

static void launch_reports(void **state)
{
    (void)state;
    bk_error err;
    const bk_cuda_status config = {9, "cudaErrorInvalidConfiguration", "invalid configuration argument"};
    const bk_cuda_status illegal = {700, "cudaErrorIllegalAddress", "an illegal memory access was encountered"};
    /* a clean launch; without sync mode a sync status is not looked at */
    assert_int_equal(bk_cuda_launch_report("kernel k_a", ok(), 0, ok(), &err), BK_OK);
    assert_int_equal(bk_cuda_launch_report("kernel k_a", ok(), 0, illegal, &err), BK_OK);
    assert_int_equal(bk_cuda_launch_report("kernel k_a", ok(), 1, ok(), &err), BK_OK);
    /* the launch itself failed: this kernel's error */
    assert_int_equal(bk_cuda_launch_report("kernel k_a", config, 0, ok(), &err), BK_ERR_DEVICE);
    assert_string_equal(err.message, "CUDA backend: launching kernel k_a failed: invalid configuration argument "
                                     "(cudaErrorInvalidConfiguration)");
    /* a sticky error at a launch is an earlier kernel's: say so, and how to find which */
    assert_int_equal(bk_cuda_launch_report("kernel k_b", illegal, 0, ok(), &err), BK_ERR_DEVICE);
    assert_message_has(err.message, "at launching kernel k_b: an illegal memory access was encountered "
                                    "(cudaErrorIllegalAddress), the sticky error of work queued earlier");
    assert_message_has(err.message, "BIASKIT_CUDA_SYNC=1 to name the kernel");
    assert_null(strstr(err.message, "launching kernel k_b failed"));
    /* ... in sync mode every engine kernel was checked: the culprit is other queued work */
    assert_int_equal(bk_cuda_launch_report("kernel k_b", illegal, 1, ok(), &err), BK_ERR_DEVICE);
    assert_message_has(err.message, "a copy or a plugin's kernel");
    /* sync mode: the kernel started, then failed while running */
    assert_int_equal(bk_cuda_launch_report("kernel k_c", ok(), 1, illegal, &err), BK_ERR_DEVICE);
    assert_string_equal(err.message, "CUDA backend: kernel k_c failed while running: an illegal memory access was "
                                     "encountered (cudaErrorIllegalAddress) (BIASKIT_CUDA_SYNC=1: the stream was "
                                     "synchronised right after its launch)");
    assert_int_equal(bk_cuda_launch_report("cuBLAS GEMM (cublasSgemmStridedBatched)", ok(), 1, config, &err),
                     BK_ERR_DEVICE);
    assert_message_has(err.message, "cuBLAS GEMM (cublasSgemmStridedBatched) failed while running");
    /* names the runtime may not give */
    assert_int_equal(bk_cuda_launch_report("kernel k_d", (bk_cuda_status){1, NULL, NULL}, 0, ok(), &err),
                     BK_ERR_DEVICE);
    assert_message_has(err.message, "launching kernel k_d failed: unknown (unknown)");

    assert_true(bk_cuda_error_is_async("cudaErrorIllegalAddress"));
    assert_true(bk_cuda_error_is_async("cudaErrorLaunchFailure"));
    assert_true(bk_cuda_error_is_async("cudaErrorAssert"));
    assert_true(bk_cuda_error_is_async("cudaErrorMisalignedAddress"));
    assert_false(bk_cuda_error_is_async("cudaErrorInvalidConfiguration"));
    assert_false(bk_cuda_error_is_async("cudaErrorMemoryAllocation"));
    assert_false(bk_cuda_error_is_async("cudaErrorLaunchOutOfResources"));
    assert_false(bk_cuda_error_is_async(NULL));
}

static void sync_mode(void **state)
{
    (void)state;
    bk_error err;
    int on = -1;
    assert_int_equal(bk_cuda_sync_mode(NULL, &on, &err), BK_OK);
    assert_int_equal(on, 0);
    assert_int_equal(bk_cuda_sync_mode("", &on, &err), BK_OK);
    assert_int_equal(on, 0);
    assert_int_equal(bk_cuda_sync_mode("0", &on, &err), BK_OK);
    assert_int_equal(on, 0);
    assert_int_equal(bk_cuda_sync_mode("1", &on, &err), BK_OK);
    assert_int_equal(on, 1);
    assert_int_equal(bk_cuda_sync_mode("yes", &on, &err), BK_ERR_CONFIG);
    assert_message_has(err.message, "BIASKIT_CUDA_SYNC = 'yes': expected 1");
    assert_int_equal(on, 0);
}

static void pool_keep(void **state)
{
    (void)state;
    bk_error err;
    uint64_t b = 0;
    assert_int_equal(bk_cuda_pool_keep(NULL, &b, &err), BK_OK);
    assert_true(b == UINT64_MAX);
    assert_int_equal(bk_cuda_pool_keep("", &b, &err), BK_OK);
    assert_true(b == UINT64_MAX);
    assert_int_equal(bk_cuda_pool_keep("0", &b, &err), BK_OK);
    assert_true(b == 0);
    assert_int_equal(bk_cuda_pool_keep("123", &b, &err), BK_OK);
    assert_true(b == 123);
    assert_int_equal(bk_cuda_pool_keep("4K", &b, &err), BK_OK);
    assert_true(b == 4096);
    assert_int_equal(bk_cuda_pool_keep("512M", &b, &err), BK_OK);
    assert_true(b == 512ull << 20);
    assert_int_equal(bk_cuda_pool_keep("20G", &b, &err), BK_OK);
    assert_true(b == 20ull << 30);
    static const char *const bad[] = {"-1", "1.5G", "G", "2g", "1GB", " 1", "18446744073709551616",
                                      "17179869184G"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bk_cuda_pool_keep(bad[i], &b, &err) != BK_ERR_CONFIG)
            fail_msg("BIASKIT_CUDA_POOL_KEEP = '%s' accepted (%llu)", bad[i], (unsigned long long)b);
        char needle[80];
        snprintf(needle, sizeof needle, "BIASKIT_CUDA_POOL_KEEP = '%s': expected", bad[i]);
        assert_message_has(err.message, needle);
    }
}

/* [run] gpu in the experiment schema: default, a value, --set, and the range's error with its position. */
static void config_run_gpu(void **state)
{
    (void)state;
    bk_experiment exp;
    bk_error err;
    assert_int_equal(bk_experiment_parse("", "exp.toml", NULL, 0, &exp, &err), BK_OK);
    assert_int_equal(exp.run.gpu, BK_CUDA_GPU_AUTO);
    bk_experiment_free(&exp);
    assert_int_equal(bk_experiment_parse("[run]\ngpu = 3\n", "exp.toml", NULL, 0, &exp, &err), BK_OK);
    assert_int_equal(exp.run.gpu, 3);
    bk_experiment_free(&exp);
    const char *set[] = {"run.gpu=1"};
    assert_int_equal(bk_experiment_parse("[run]\ngpu = 3\n", "exp.toml", set, 1, &exp, &err), BK_OK);
    assert_int_equal(exp.run.gpu, 1);
    bk_experiment_free(&exp);
    static const char *const bad[] = {"[run]\ndevice = \"cuda\"\ngpu = -2\n", "[run]\ndevice = \"cuda\"\ngpu = 1024\n",
                                      "[run]\ndevice = \"cuda\"\ngpu = \"1\"\n", "[run]\ndevice = \"cuda\"\ngpu = 1.5\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (bk_experiment_parse(bad[i], "exp.toml", NULL, 0, &exp, &err) == BK_OK) {
            bk_experiment_free(&exp);
            fail_msg("accepted:\n%s", bad[i]);
        }
        assert_message_has(err.message, "exp.toml:3:");
        assert_message_has(err.message, "gpu");
    }
    assert_int_equal(bk_experiment_parse("[run]\ngpu = -2\n", "exp.toml", NULL, 0, &exp, &err), BK_ERR_CONFIG);
    assert_message_has(err.message, "exp.toml:2:7");
    printf("[run] gpu = -2: %s\n", err.message);
    const char *bad_set[] = {"run.gpu=-5"};
    assert_int_not_equal(bk_experiment_parse("", "exp.toml", bad_set, 1, &exp, &err), BK_OK);
    assert_message_has(err.message, "run.gpu");
}

#if BK_HAVE_CUDA
/* A GPU answers (else the test is skipped with the reason). Without a driver or a GPU the runtime's
 * initialisation error is returned by every call, cudaGetLastError included (measured: CUDA 12 with
 * no driver gives cudaErrorInsufficientDriver forever), so there is no error to clear and nothing to
 * test. */
static int gpu_or_skip(void)
{
    char desc[512];
    if (!bk_device_probe(desc, sizeof desc)) {
        printf("skipped: needs a GPU (no GPU answers: %s)\n", desc);
        return 0;
    }
    return 1;
}

/* One AdamW kernel launch on `be` (4 values), through the backend's table: its result code. */
static int launch_something(bk_backend *be, bk_error *err)
{
    float *buf = NULL;
    int rc = be->alloc(be, (void **)&buf, 4 * 4 * sizeof(float), err);
    if (rc)
        return rc;
    rc = be->adamw(be, buf, buf + 4, buf + 8, buf + 12, 4, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.1f, 0.05f, err);
    if (!rc)
        rc = be->sync(be, err);
    be->release(be, buf);
    return rc;
}
#endif

/* A CUDA call of the engine that fails and is reported leaves no error behind: the next kernel launch
 * check reports that launch's outcome, not the earlier failure (the defect: a failed cudaMallocAsync,
 * reported and handled, then made the next launch "fail" with out of memory). Needs a GPU. */
static void no_stale_error(void **state)
{
    (void)state;
#if BK_HAVE_CUDA
    if (!gpu_or_skip())
        skip();
    bk_error err;
    void *p = NULL;
    const size_t huge = (size_t)1 << 50; /* 1 PiB: cudaErrorMemoryAllocation, not sticky */
    assert_int_not_equal(bk_device_alloc(&p, huge, &err), BK_OK);
    printf("bk_device_alloc of 1 PiB: %s\n", err.message);
    assert_int_equal(cudaPeekAtLastError(), cudaSuccess);
    bk_backend *be = NULL;
    assert_int_equal(bk_backend_cuda_create_on(&be, BK_MATMUL_FP32, BK_CUDA_GPU_AUTO, NULL, &err), BK_OK);
    assert_int_not_equal(be->alloc(be, &p, huge, &err), BK_OK);
    printf("backend alloc of 1 PiB: %s\n", err.message);
    assert_int_equal(cudaPeekAtLastError(), cudaSuccess);
    if (launch_something(be, &err))
        fail_msg("a kernel launch after a reported allocation failure: %s", err.message);
    bk_backend_destroy(be);
#else
    printf("skipped: built without CUDA\n");
    skip();
#endif
}

/* On a GPU: the backend's description (the banner's device line) names the GPU and why; [run] gpu beyond
 * the visible count is refused naming where it was set; BIASKIT_CUDA_SYNC=1 is said and its launches
 * pass; a bad BIASKIT_CUDA_SYNC / BIASKIT_CUDA_POOL_KEEP is refused. Needs a GPU. */
static void gpu_backend_choice(void **state)
{
    (void)state;
#if BK_HAVE_CUDA
    if (!gpu_or_skip())
        skip();
    int count = 0;
    assert_int_equal(cudaGetDeviceCount(&count), cudaSuccess);
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK"), unsetenv("MPI_LOCALRANKID"), unsetenv("SLURM_LOCALID");
    bk_error err;
    bk_backend *be = NULL;
    assert_int_equal(bk_backend_cuda_create(&be, BK_MATMUL_FP32, &err), BK_OK);
    printf("description: %s\n", be->description);
    assert_message_has(be->description, "cuda:0 ");
    assert_message_has(be->description, "; GPU 0 (no local rank set: one process)");
    bk_backend_destroy(be);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    assert_int_equal(bk_backend_cuda_create(&be, BK_MATMUL_FP32, &err), BK_OK);
    printf("description: %s\n", be->description);
    char want[96];
    snprintf(want, sizeof want, "cuda:%d ", 1 % count);
    assert_message_has(be->description, want);
    assert_message_has(be->description, count > 1 ? "; GPU 1 (local rank 1 of Open MPI)" : "modulo 1 visible GPU)");
    assert_int_equal(launch_something(be, &err), BK_OK);
    bk_backend_destroy(be);
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    assert_int_not_equal(bk_backend_cuda_create_on(&be, BK_MATMUL_FP32, count, "exp.toml:4:7: [run] gpu", &err),
                         BK_OK);
    assert_null(be);
    assert_message_has(err.message, "exp.toml:4:7: [run] gpu = ");
    setenv("BIASKIT_CUDA_SYNC", "1", 1);
    assert_int_equal(bk_backend_cuda_create(&be, BK_MATMUL_FP32, &err), BK_OK);
    assert_message_has(be->description, "; BIASKIT_CUDA_SYNC=1");
    if (launch_something(be, &err))
        fail_msg("a kernel in sync mode: %s", err.message);
    bk_backend_destroy(be);
    setenv("BIASKIT_CUDA_SYNC", "on", 1);
    assert_int_not_equal(bk_backend_cuda_create(&be, BK_MATMUL_FP32, &err), BK_OK);
    assert_message_has(err.message, "BIASKIT_CUDA_SYNC = 'on'");
    unsetenv("BIASKIT_CUDA_SYNC");
    setenv("BIASKIT_CUDA_POOL_KEEP", "lots", 1);
    assert_int_not_equal(bk_backend_cuda_create(&be, BK_MATMUL_FP32, &err), BK_OK);
    assert_message_has(err.message, "BIASKIT_CUDA_POOL_KEEP = 'lots'");
    setenv("BIASKIT_CUDA_POOL_KEEP", "64M", 1);
    assert_int_equal(bk_backend_cuda_create(&be, BK_MATMUL_FP32, &err), BK_OK);
    bk_backend_destroy(be);
    unsetenv("BIASKIT_CUDA_POOL_KEEP");
    assert_int_equal(cudaPeekAtLastError(), cudaSuccess);
#else
    printf("skipped: built without CUDA\n");
    skip();
#endif
}

/* `test_cuda_policy` runs what needs no GPU; `test_cuda_policy cuda` (ctest: test_cuda_policy_cuda) the
 * GPU checks, exiting 77 (skipped) with the reason printed when no GPU answers. */
int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "cuda")) {
#if BK_HAVE_CUDA
        if (!gpu_or_skip())
            return 77;
#else
        printf("skipped: built without CUDA\n");
        return 77;
#endif
        const struct CMUnitTest gpu[] = {cmocka_unit_test(no_stale_error), cmocka_unit_test(gpu_backend_choice)};
        return cmocka_run_group_tests(gpu, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpu_each_variable), cmocka_unit_test(gpu_precedence), cmocka_unit_test(gpu_override),
        cmocka_unit_test(gpu_modulo),        cmocka_unit_test(gpu_bad_values), cmocka_unit_test(launch_reports),
        cmocka_unit_test(sync_mode),         cmocka_unit_test(pool_keep),      cmocka_unit_test(config_run_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
