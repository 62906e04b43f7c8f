/* Device attention benchmark: times be->attention_forward, or forward + backward (the table gradient
 * included when the table is learnable), of the CUDA backend at one shape; bench/gpu/attention.sh runs
 * it next to PyTorch's SDPA and FlexAttention (bench/gpu/attention_torch.py).
 *
 *   bench_flash_gpu --batch B --heads H --length T --head-dim D [--table alibi|kerple|t5|none]
 *                   [--mode fwd|fwdbwd] [--dtype fp32|bf16] [--storage fp32|bf16]
 *                   [--attention fused|fused2|materialized] [--warmup 5] [--reps 20] [--device cuda|emulated]
 *                   [--dump DIR]
 *
 * Tables (one per head, over the distances 0 .. T-1, the same values attention_torch.py uses):
 *   alibi   -m_h d, m_h = 2^(-8(h+1)/H): fixed, so fwdbwd computes no table gradient;
 *   kerple  -r1_h log(1 + r2_h d) (the "log" variant): learnable, fwdbwd computes the table gradient;
 *   t5      w[h][bucket(d)], T5's causal buckets (32 buckets, max distance 128): learnable, likewise;
 *   none    no table.
 * Which table it is changes only the values: the kernel reads a table either way. The parameters' own
 * gradients (from the table gradient) are a few thousand flops and not timed.
 *
 * Inputs are uniform in [-1, 1). Each call is timed as a batch: `reps` calls queued, then one wait
 * (be->sync), wall clock by clock_gettime; the printed time is that total over reps (after `warmup`
 * calls). FLOPs count the causal half: forward 4 B H D T(T+1)/2, forward + backward 3.5 times that
 * (FlashAttention's convention, as attention_torch.py).
 *
 * --dtype: fp32 runs the fp32 programs (CUDA cores); bf16 the backend with [run] matmul = "bf16", whose
 * fused attention multiplies on bf16 tensor cores.
 * --storage: how q, k, v, dO and the output are kept in memory: bf16 (the default with --dtype bf16, as
 * PyTorch's bf16 tensors: be->attention_forward_bf16 / attention_backward_bf16) or fp32 (the default
 * with --dtype fp32; with --dtype bf16 the tensor cores then round the fp32 values as tiles are
 * loaded, which is what the model does today). dqkv and the table gradient are fp32 either way.
 * --attention fused2: the fused attention's second generation (bk_dev.flash_gen = 2; fp32 only): the forward
 * of gpu/kernels_flash2.h for the head sizes it has a program for (else the first generation's), the
 * one-pass backward of gpu/kernels_flash2_bwd.h (5 products per tile pair instead of 7) where its block fits
 * the GPU's shared memory (else the first generation's).
 * --dump DIR: after the timing, one more call (forward, and backward into zeroed dqkv and dtable) whose
 * inputs and results are written to DIR as raw little-endian float32 files: qkv (B, T, 3C), out (B, T,
 * C), table (H, T) unless --table none, and with fwdbwd dout (B, T, C), dqkv (B, T, 3C) and, for a
 * learnable table, dtable (H, T), bf16-stored arrays widened to float; DIR/meta.json says the shape.
 * bench/gpu/check_dump.py compares them with PyTorch in float64, so the numbers behind a timing can be
 * checked at its own shape.
 * Exit status: 0; 1 when a call fails; 2 for bad arguments; 3 when no GPU answers. Last line:
 *   RESULT engine=biaskit peer=<attention> table=... mode=... B=.. H=.. T=.. D=.. dtype=.. storage=.. ms=...
 *          tflops=...
 */
#define _POSIX_C_SOURCE 200809L
#include "cuda/device.h"
#include "gpu/mma.h" /* bk_bf16_round, bk_bf16_value */
#include "model/backend.h"
#include "util/error.h"

#include "../bench_util.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* T5's causal bucket of distance d (num_buckets 32, max_distance 128): exact below 16, then
 * logarithmic up to bucket 31. */
static int t5_bucket(int d)
{
    const int exact = 16, buckets = 32, max_distance = 128;
    if (d < exact)
        return d;
    int b = exact + (int)(log((double)d / exact) / log((double)max_distance / exact) * (buckets - exact));
    return b < buckets - 1 ? b : buckets - 1;
}

static void make_table(float *tab, const char *table, int H, int T)
{
    for (int h = 0; h < H; h++)
        for (int d = 0; d < T; d++) {
            float v = 0.0f;
            if (!strcmp(table, "alibi"))
                v = (float)(-pow(2.0, -8.0 * (h + 1) / H) * d);
            else if (!strcmp(table, "kerple"))
                v = (float)(-(1.0 + 0.1 * h) * log(1.0 + (1.0 + 0.05 * h) * d));
            else if (!strcmp(table, "t5"))
                v = (float)(0.1 * sin(0.7 * (h + 1) + t5_bucket(d)));
            tab[(size_t)h * T + d] = v;
        }
}

/* DIR/NAME.f32: n floats as they are in memory (little-endian on every machine biaskit builds for) */
static int write_floats(const char *dir, const char *name, const float *x, size_t n, bk_error *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.f32", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return bk_fail(err, BK_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
    const size_t wrote = fwrite(x, sizeof *x, n, f);
    if (fclose(f) || wrote != n)
        return bk_fail(err, BK_ERR_IO, "cannot write '%s' (%zu of %zu floats written)", path, wrote, n);
    return BK_OK;
}

/* n values from host into dst, as they are or (host16 not NULL: bf16 storage) rounded to bf16 in host16 */
static int upload_values(bk_backend *be, void *dst, const float *host, uint16_t *host16, size_t n, bk_error *err)
{
    if (!host16)
        return be->upload(be, dst, host, n * sizeof *host, err);
    for (size_t k = 0; k < n; k++)
        host16[k] = bk_bf16_round(host[k]);
    return be->upload(be, dst, host16, n * sizeof *host16, err);
}

/* One forward / backward of the storage the run asked for (model/backend.h, bk_storage). */
static int call_forward(bk_backend *be, int b16, void *out, float *saved, const void *qkv,
                        const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err)
{
    return be->attention_forward(be, b16 ? BK_STORAGE_BF16 : BK_STORAGE_FP32, out, saved, qkv, bias, B, T, C, H, err);
}

static int call_backward(bk_backend *be, int b16, float *dqkv, float *const dtables[BK_STREAM_COUNT],
                         const void *dout, const void *qkv, const void *out, const float *saved,
                         const bk_attention_bias *bias, int B, int T, int C, int H, bk_error *err)
{
    return be->attention_backward(be, b16 ? BK_STORAGE_BF16 : BK_STORAGE_FP32, dqkv, dtables, dout, qkv, out, saved,
                                  bias, B, T, C, H, err);
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_flash_gpu --batch B --heads H --length T --head-dim D [--table alibi|kerple|t5|none]\n"
                    "                       [--mode fwd|fwdbwd] [--dtype fp32|bf16] [--storage fp32|bf16]\n"
                    "                       [--attention fused|fused2|materialized] [--warmup N] [--reps N]\n"
                    "                       [--device cuda|emulated] [--dump DIR]\n");
    return 2;
}

typedef struct opts {
    int B, H, T, D, warmup, reps;
    const char *table, *mode, *dtype, *storage, *attention, *device, *dump;
} opts;

static void result_line(const opts *o, const char *tail)
{
    printf("RESULT engine=biaskit peer=%s table=%s mode=%s B=%d H=%d T=%d D=%d dtype=%s storage=%s device=%s %s\n",
           o->attention, o->table, o->mode, o->B, o->H, o->T, o->D, o->dtype, o->storage ? o->storage : o->dtype,
           o->device, tail);
}

static int fail(const opts *o, const char *what, const bk_error *err)
{
    fprintf(stderr, "bench_flash_gpu: %s: %s\n", what, err->message);
    char tail[96];
    snprintf(tail, sizeof tail, "error=%s", what);
    for (char *c = tail; *c; c++)
        if (*c == ' ')
            *c = '-';
    result_line(o, tail);
    return 1;
}

int main(int argc, char **argv)
{
    opts o = {0, 0, 0, 0, 5, 20, "alibi", "fwdbwd", "fp32", NULL, "fused", "cuda", NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *ip = !strcmp(a, "--batch") ? &o.B : !strcmp(a, "--heads") ? &o.H : !strcmp(a, "--length") ? &o.T
                : !strcmp(a, "--head-dim") ? &o.D : !strcmp(a, "--warmup") ? &o.warmup : !strcmp(a, "--reps") ? &o.reps
                : NULL;
        const char **sp = !strcmp(a, "--table") ? &o.table : !strcmp(a, "--mode") ? &o.mode
                        : !strcmp(a, "--dtype") ? &o.dtype : !strcmp(a, "--storage") ? &o.storage
                        : !strcmp(a, "--attention") ? &o.attention
                        : !strcmp(a, "--device") ? &o.device : !strcmp(a, "--dump") ? &o.dump : NULL;
        if ((!ip && !sp) || !v) {
            fprintf(stderr, "bench_flash_gpu: %s %s\n", a, !ip && !sp ? "is not an option" : "needs a value");
            return usage();
        }
        if (ip) {
            char *end;
            long x = strtol(v, &end, 10);
            if (*end || x < 0 || x > 1 << 30) {
                fprintf(stderr, "bench_flash_gpu: %s %s: expected a whole number >= 0\n", a, v);
                return usage();
            }
            *ip = (int)x;
        } else {
            *sp = v;
        }
        i++;
    }
    if (o.B < 1 || o.H < 1 || o.T < 1 || o.D < 1 || o.reps < 1) {
        fprintf(stderr, "bench_flash_gpu: --batch, --heads, --length, --head-dim and --reps must be >= 1\n");
        return usage();
    }
    const int learnable = !strcmp(o.table, "kerple") || !strcmp(o.table, "t5");
    if (!learnable && strcmp(o.table, "alibi") && strcmp(o.table, "none")) {
        fprintf(stderr, "bench_flash_gpu: --table %s: expected alibi, kerple, t5 or none\n", o.table);
        return usage();
    }
    const int backward = !strcmp(o.mode, "fwdbwd");
    if (!backward && strcmp(o.mode, "fwd")) {
        fprintf(stderr, "bench_flash_gpu: --mode %s: expected fwd or fwdbwd\n", o.mode);
        return usage();
    }
    if (strcmp(o.attention, "fused") && strcmp(o.attention, "fused2") && strcmp(o.attention, "materialized")) {
        fprintf(stderr, "bench_flash_gpu: --attention %s: expected fused, fused2 or materialized\n", o.attention);
        return usage();
    }
    if (strcmp(o.device, "cuda") && strcmp(o.device, "emulated")) {
        fprintf(stderr, "bench_flash_gpu: --device %s: expected cuda or emulated\n", o.device);
        return usage();
    }
    const int bf16 = !strcmp(o.dtype, "bf16");
    if (!bf16 && strcmp(o.dtype, "fp32")) {
        fprintf(stderr, "bench_flash_gpu: --dtype %s: expected fp32 or bf16\n", o.dtype);
        return usage();
    }
    if (!o.storage)
        o.storage = o.dtype;
    const int b16 = !strcmp(o.storage, "bf16"); /* bf16 storage */
    if (!b16 && strcmp(o.storage, "fp32")) {
        fprintf(stderr, "bench_flash_gpu: --storage %s: expected fp32 or bf16\n", o.storage);
        return usage();
    }
    if (bf16 && !strcmp(o.attention, "fused2")) {
        fprintf(stderr, "bench_flash_gpu: --attention fused2 has fp32 programs only (forward and backward): use --dtype fp32\n");
        return usage();
    }
    if (b16 && (!bf16 || !strcmp(o.attention, "materialized"))) {
        fprintf(stderr, "bench_flash_gpu: --storage bf16 needs --dtype bf16 and the fused attention\n");
        return usage();
    }

    bk_error err = {0};
    bk_backend *be = NULL;
    if (!strcmp(o.device, "cuda")) {
        char desc[256];
        if (!bk_device_probe(desc, sizeof desc)) {
            fprintf(stderr, "bench_flash_gpu: no GPU answers: %s\n", desc);
            result_line(&o, "error=no-gpu");
            return 3;
        }
        if (bk_backend_cuda_create(&be, bf16 ? BK_MATMUL_BF16 : BK_MATMUL_FP32, &err) != BK_OK)
            return fail(&o, "creating the CUDA backend", &err);
    } else if (bk_backend_emulated_create(&be, bf16 ? BK_MATMUL_BF16 : BK_MATMUL_FP32, &err) != BK_OK) {
        return fail(&o, "creating the emulated backend", &err);
    }
    /* from here on a failure releases what was allocated (FAIL) before it exits with status 1 */
    int status = 0;
#define FAIL(what)                             \
    do {                                       \
        status = fail(&o, (what), &err);       \
        goto done;                             \
    } while (0)
    be->attention = !strcmp(o.attention, "materialized") ? BK_ATTENTION_MATERIALIZED : BK_ATTENTION_FUSED;
    ((bk_dev *)be->impl)->flash_gen = !strcmp(o.attention, "fused2") ? 2 : 0; /* gpu/ops_flash2.h */
    fprintf(stderr, "bench_flash_gpu: %s, %s attention\n", be->description, o.attention);

    const int B = o.B, H = o.H, T = o.T, C = o.H * o.D;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, ntab = (size_t)H * T;
    const size_t nsaved = backward ? be->attention_saved(be, B, T, H) : 0;
    const size_t esz = b16 ? sizeof(uint16_t) : sizeof(float); /* bytes of a q, k, v, dO or output value */
    float *host = malloc((nqkv > ntab ? nqkv : ntab) * sizeof *host);
    uint16_t *host16 = b16 ? malloc(nqkv * sizeof *host16) : NULL;
    void *qkv = NULL, *out = NULL, *dout = NULL, *dqkv = NULL, *saved = NULL, *table = NULL, *dtable = NULL;
    int rc = host && (host16 || !b16) ? BK_OK : bk_fail(&err, BK_ERR_NOMEM, "out of memory");
    if (!rc)
        rc = be->alloc(be, &qkv, nqkv * esz, &err);
    if (!rc)
        rc = be->alloc(be, &out, nout * esz, &err);
    if (!rc && backward)
        rc = be->alloc(be, &dout, nout * esz, &err);
    if (!rc && backward)
        rc = be->alloc(be, &dqkv, nqkv * sizeof(float), &err);
    if (!rc && backward)
        rc = be->alloc(be, &saved, (nsaved ? nsaved : 1) * sizeof(float), &err);
    if (!rc && strcmp(o.table, "none"))
        rc = be->alloc(be, &table, ntab * sizeof(float), &err);
    if (!rc && backward && learnable)
        rc = be->alloc(be, &dtable, ntab * sizeof(float), &err);
    if (rc)
        FAIL("allocating device memory");
    fill(host, nqkv, 1);
    if ((rc = upload_values(be, qkv, host, host16, nqkv, &err)))
        FAIL("upload");
    if (backward) {
        fill(host, nout, 2);
        if ((rc = upload_values(be, dout, host, host16, nout, &err)))
            FAIL("upload");
    }
    bk_attention_bias bias;
    memset(&bias, 0, sizeof bias);
    if (table) {
        make_table(host, o.table, H, T);
        if ((rc = be->upload(be, table, host, ntab * sizeof(float), &err)))
            FAIL("upload");
        bias.table[0] = table, bias.distances = T, bias.span[0] = T;
    }
    float *dtables[BK_STREAM_COUNT] = {dtable, NULL};

    double t0 = 0.0;
    for (int k = 0; k < o.warmup + o.reps; k++) {
        if (k == o.warmup) {
            if ((rc = be->sync(be, &err)))
                FAIL("warm-up");
            t0 = now();
        }
        if ((rc = call_forward(be, b16, out, saved, qkv, table ? &bias : NULL, B, T, C, H, &err)))
            FAIL("attention forward");
        if (backward && (rc = call_backward(be, b16, dqkv, dtables, dout, qkv, out, saved, table ? &bias : NULL, B, T,
                                            C, H, &err)))
            FAIL("attention backward");
    }
    if ((rc = be->sync(be, &err)))
        FAIL("timed calls");
    const double seconds = (now() - t0) / o.reps;
    const double flops = 4.0 * B * H * (double)o.D * ((double)T * (T + 1) / 2.0) * (backward ? 3.5 : 1.0);
    char tail[128];
    snprintf(tail, sizeof tail, "ms=%.4f tflops=%.3f", seconds * 1e3, flops / seconds / 1e12);
    result_line(&o, tail);

    if (o.dump) {
        const bk_attention_bias *bp = table ? &bias : NULL;
        if ((dqkv && (rc = be->zero(be, dqkv, nqkv * sizeof(float), &err))) ||
            (dtable && (rc = be->zero(be, dtable, ntab * sizeof(float), &err))) ||
            (rc = call_forward(be, b16, out, saved, qkv, bp, B, T, C, H, &err)) ||
            (backward && (rc = call_backward(be, b16, dqkv, dtables, dout, qkv, out, saved, bp, B, T, C, H, &err))))
            FAIL("the call for --dump");
        const struct {
            const char *name;
            void *buf;
            size_t n;
            int b16; /* stored as bf16: widened to float for the file */
        } files[] = {{"qkv", qkv, nqkv, b16}, {"out", out, nout, b16},   {"table", table, ntab, 0},
                     {"dout", dout, nout, b16}, {"dqkv", dqkv, nqkv, 0}, {"dtable", dtable, ntab, 0}};
        for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
            if (!files[k].buf)
                continue;
            if (files[k].b16) {
                if ((rc = be->download(be, host16, files[k].buf, files[k].n * sizeof *host16, &err)))
                    FAIL("download for --dump");
                for (size_t e = 0; e < files[k].n; e++)
                    host[e] = bk_bf16_value(host16[e]);
            } else if ((rc = be->download(be, host, files[k].buf, files[k].n * sizeof(float), &err))) {
                FAIL("download for --dump");
            }
            if ((rc = write_floats(o.dump, files[k].name, host, files[k].n, &err)))
                FAIL("--dump");
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/meta.json", o.dump);
        FILE *f = fopen(path, "w");
        int bad = !f;
        if (f) {
            bad = fprintf(f,
                          "{\"B\": %d, \"H\": %d, \"T\": %d, \"D\": %d, \"table\": \"%s\", \"mode\": \"%s\", "
                          "\"dtype\": \"%s\", \"storage\": \"%s\", \"attention\": \"%s\", \"device\": \"%s\"}\n",
                          B, H, T, o.D, o.table, o.mode, o.dtype, o.storage, o.attention, o.device) < 0;
            bad |= fclose(f) != 0;
        }
        if (bad) {
            bk_fail(&err, BK_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
            FAIL("--dump");
        }
        fprintf(stderr, "bench_flash_gpu: wrote the inputs and results of one call to %s/\n", o.dump);
    }

done:;
    void *bufs[] = {qkv, out, dout, dqkv, saved, table, dtable};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        if (bufs[k])
            be->release(be, bufs[k]);
    bk_backend_destroy(be);
    free(host);
    free(host16);
    return status;
}
