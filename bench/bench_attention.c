/* CPU attention benchmark: times bk_attention_forward (saving the probabilities, as training does)
 * and bk_attention_backward (with the table gradient) at one shape, and prints a checksum of the
 * outputs so that two builds can be seen to compute the same thing (or by how much they differ).
 *
 *   bench_attention [--batch 8] [--length 256] [--dim 256] [--heads 8] [--reps 20] [--threads 2]
 *                   [--segment] [--nobias] [--name NAME]
 *
 * Inputs are fixed pseudo-random values (qkv, dout uniform in [-1, 1); the token table an ALiBi-like
 * -slope_h * d). --segment adds a second stream whose positions advance every 4 tokens (a segment
 * table, with its own gradient); --nobias runs without any table. After one untimed warm-up call of
 * each, `reps` calls of each are timed with clock_gettime(CLOCK_MONOTONIC); the minimum and the
 * median are printed. GFLOP/s counts the attention products (QK^T and PV forward, the four backward
 * products) over the causal half, B H T^2 hd multiply-adds per product.
 *
 * Exit status: 0; 1 when an attention call fails; 2 for bad arguments. Last line, machine-readable:
 *   RESULT name=NAME fwd_ms_min=... fwd_ms_median=... bwd_ms_min=... bwd_ms_median=... checksum=...
 */
#define _POSIX_C_SOURCE 200809L
#include "cpu/attention.h"
#include "util/error.h"

#include "bench_util.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double checksum(const float *x, size_t n)
{
    double sum = 0.0;
    for (size_t k = 0; k < n; k++)
        sum += (double)x[k] * (double)((k % 7) + 1);
    return sum;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_attention [--batch B] [--length T] [--dim C] [--heads H] [--reps N] [--threads N]\n"
                    "                       [--segment] [--nobias] [--name NAME]\n");
    return 2;
}

int main(int argc, char **argv)
{
    int B = 8, T = 256, C = 256, H = 8, reps = 20, threads = 2, segment = 0, nobias = 0;
    const char *name = "attention";
    for (int k = 1; k < argc; k++) {
        const char *a = argv[k];
        int *target = !strcmp(a, "--batch")     ? &B
                      : !strcmp(a, "--length")  ? &T
                      : !strcmp(a, "--dim")     ? &C
                      : !strcmp(a, "--heads")   ? &H
                      : !strcmp(a, "--reps")    ? &reps
                      : !strcmp(a, "--threads") ? &threads
                                                : NULL;
        if (target) {
            if (k + 1 >= argc)
                return usage();
            char *end;
            long v = strtol(argv[++k], &end, 10);
            if (*end || v <= 0 || v > 1 << 20) {
                fprintf(stderr, "bench_attention: %s needs a positive integer, got '%s'\n", a, argv[k]);
                return 2;
            }
            *target = (int)v;
        } else if (!strcmp(a, "--segment"))
            segment = 1;
        else if (!strcmp(a, "--nobias"))
            nobias = 1;
        else if (!strcmp(a, "--name") && k + 1 < argc)
            name = argv[++k];
        else {
            fprintf(stderr, "bench_attention: unknown argument '%s'\n", a);
            return usage();
        }
    }
    if (C % H) {
        fprintf(stderr, "bench_attention: --dim %d is not a multiple of --heads %d\n", C, H);
        return 2;
    }
    omp_set_num_threads(threads);

    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nprobs = (size_t)B * H * T * T;
    float *qkv = malloc(nqkv * sizeof *qkv), *dqkv = malloc(nqkv * sizeof *dqkv);
    float *out = malloc(nout * sizeof *out), *dout = malloc(nout * sizeof *dout);
    float *probs = malloc(nprobs * sizeof *probs);
    int32_t *segpos = malloc((size_t)B * T * sizeof *segpos);
    double *tf = malloc((size_t)reps * sizeof *tf), *tb = malloc((size_t)reps * sizeof *tb);
    float *table[BK_STREAM_COUNT] = {NULL}, *dtable[BK_STREAM_COUNT] = {NULL};
    const int n_tables = nobias ? 0 : segment ? 2 : 1;
    for (int s = 0; s < n_tables; s++) {
        table[s] = malloc((size_t)H * T * sizeof(float));
        dtable[s] = calloc((size_t)H * T, sizeof(float));
    }
    if (!qkv || !dqkv || !out || !dout || !probs || !segpos || !tf || !tb ||
        (n_tables > 0 && (!table[0] || !dtable[0])) || (n_tables > 1 && (!table[1] || !dtable[1]))) {
        fprintf(stderr, "bench_attention: out of memory for B %d T %d C %d H %d\n", B, T, C, H);
        return 1;
    }
    fill(qkv, nqkv, 1);
    fill(dout, nout, 2);
    for (int s = 0; s < n_tables; s++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < T; d++)
                table[s][(size_t)h * T + d] = -ldexpf(1.0f, -(h + 1) * 8 / H) * (float)d / (float)(s + 1);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            segpos[(size_t)b * T + t] = t / 4;
    bk_attention_bias bias;
    memset(&bias, 0, sizeof bias);
    bias.distances = T;
    for (int s = 0; s < n_tables; s++)
        bias.table[s] = table[s];
    bias.positions[1] = segment ? segpos : NULL;
    const bk_attention_bias *use = nobias ? NULL : &bias;

    bk_error err;
    bk_error_clear(&err);
    for (int r = -1; r < reps; r++) { /* r = -1: the warm-up */
        double t0 = now();
        if (bk_attention_forward(out, probs, qkv, use, B, T, C, H, &err) != BK_OK)
            goto fail;
        double t1 = now();
        memset(dqkv, 0, nqkv * sizeof *dqkv);
        for (int s = 0; s < n_tables; s++)
            memset(dtable[s], 0, (size_t)H * T * sizeof(float));
        double t2 = now();
        if (bk_attention_backward(dqkv, dtable, dout, qkv, probs, use, B, T, C, H, &err) != BK_OK)
            goto fail;
        double t3 = now();
        if (r >= 0)
            tf[r] = (t1 - t0) * 1e3, tb[r] = (t3 - t2) * 1e3;
    }
    double sum = checksum(out, nout) + checksum(dqkv, nqkv);
    for (int s = 0; s < n_tables; s++)
        sum += checksum(dtable[s], (size_t)H * T);
    double fmin = tf[0], bmin = tb[0];
    for (int r = 1; r < reps; r++) {
        fmin = tf[r] < fmin ? tf[r] : fmin;
        bmin = tb[r] < bmin ? tb[r] : bmin;
    }
    const double fmed = median_sorted(tf, reps), bmed = median_sorted(tb, reps);
    const double product = 2.0 * B * H * (double)T * T * (C / H) / 2.0; /* FLOPs of one product, causal half */
    printf("bench_attention: B %d T %d C %d H %d (hd %d), %s, %d threads, %d reps\n", B, T, C, H, C / H,
           nobias ? "no bias" : segment ? "token + segment tables" : "token table", threads, reps);
    printf("forward  %8.3f ms min, %8.3f median  (%.1f GFLOP/s at the min)\n", fmin, fmed, 2 * product / fmin / 1e6);
    printf("backward %8.3f ms min, %8.3f median  (%.1f GFLOP/s at the min)\n", bmin, bmed, 4 * product / bmin / 1e6);
    printf("RESULT name=%s fwd_ms_min=%.3f fwd_ms_median=%.3f bwd_ms_min=%.3f bwd_ms_median=%.3f checksum=%.9e\n", name,
           fmin, fmed, bmin, bmed, sum);
    return 0;
fail:
    fprintf(stderr, "bench_attention: %s\n", err.message);
    return 1;
}
