/* CPU attention benchmark for masks: times forward-only bk_attention_forward (probs = NULL, as
 * evaluation runs it) with a sliding window and sinks at one shape, to show that the cost per token
 * follows the window, not the length.
 *
 *   bench_attention_window [--batch 1] [--length 4096] [--dim 128] [--heads 4] [--window 128] [--sinks 4]
 *                          [--reps 10] [--threads 2] [--name NAME]
 *
 * --window 0 runs without a mask (the full causal attention) for comparison. Inputs are fixed
 * pseudo-random values (qkv uniform in [-1, 1)) and an ALiBi-like token table -slope_h * d. After one
 * untimed warm-up call, `reps` calls are timed with clock_gettime(CLOCK_MONOTONIC); the minimum and
 * the median are printed, and the minimum per token (B T tokens per call).
 *
 * Exit status: 0; 1 when an attention call fails; 2 for bad arguments. Last line, machine-readable:
 *   RESULT name=NAME T=... window=... sinks=... fwd_ms_min=... fwd_ms_median=... us_per_token=... checksum=...
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

static int usage(void)
{
    fprintf(stderr, "usage: bench_attention_window [--batch B] [--length T] [--dim C] [--heads H] [--window W]\n"
                    "                              [--sinks S] [--reps N] [--threads N] [--name NAME]\n");
    return 2;
}

int main(int argc, char **argv)
{
    int B = 1, T = 4096, C = 128, H = 4, window = 128, sinks = 4, reps = 10, threads = 2;
    const char *name = "attention_window";
    for (int k = 1; k < argc; k++) {
        const char *a = argv[k];
        int *target = !strcmp(a, "--batch")     ? &B
                      : !strcmp(a, "--length")  ? &T
                      : !strcmp(a, "--dim")     ? &C
                      : !strcmp(a, "--heads")   ? &H
                      : !strcmp(a, "--window")  ? &window
                      : !strcmp(a, "--sinks")   ? &sinks
                      : !strcmp(a, "--reps")    ? &reps
                      : !strcmp(a, "--threads") ? &threads
                                                : NULL;
        if (target) {
            if (k + 1 >= argc)
                return usage();
            char *end;
            long v = strtol(argv[++k], &end, 10);
            const int may_be_zero = target == &window || target == &sinks;
            if (*end || v < (may_be_zero ? 0 : 1) || v > 1 << 24) {
                fprintf(stderr, "bench_attention_window: %s needs a %s integer, got '%s'\n", a,
                        may_be_zero ? "non-negative" : "positive", argv[k]);
                return 2;
            }
            *target = (int)v;
        } else if (!strcmp(a, "--name") && k + 1 < argc)
            name = argv[++k];
        else {
            fprintf(stderr, "bench_attention_window: unknown argument '%s'\n", a);
            return usage();
        }
    }
    if (C % H) {
        fprintf(stderr, "bench_attention_window: --dim %d is not a multiple of --heads %d\n", C, H);
        return 2;
    }
    omp_set_num_threads(threads);

    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    float *qkv = malloc(nqkv * sizeof *qkv), *out = malloc(nout * sizeof *out);
    float *table = malloc((size_t)H * T * sizeof *table);
    double *tf = malloc((size_t)reps * sizeof *tf);
    if (!qkv || !out || !table || !tf) {
        fprintf(stderr, "bench_attention_window: out of memory for B %d T %d C %d H %d\n", B, T, C, H);
        return 1;
    }
    fill(qkv, nqkv, 1);
    for (int h = 0; h < H; h++)
        for (int d = 0; d < T; d++)
            table[(size_t)h * T + d] = -ldexpf(1.0f, -(h + 1) * 8 / H) * (float)d;
    bk_attention_bias bias;
    memset(&bias, 0, sizeof bias);
    bias.distances = T;
    bias.table[0] = table;
    bias.window = window;
    bias.sinks = window ? sinks : 0;

    bk_error err;
    bk_error_clear(&err);
    for (int r = -1; r < reps; r++) { /* r = -1: the warm-up */
        double t0 = now();
        if (bk_attention_forward(out, NULL, qkv, &bias, B, T, C, H, &err) != BK_OK) {
            fprintf(stderr, "bench_attention_window: %s\n", err.message);
            return 1;
        }
        double t1 = now();
        if (r >= 0)
            tf[r] = (t1 - t0) * 1e3;
    }
    double sum = 0.0;
    for (size_t k = 0; k < nout; k++)
        sum += (double)out[k] * (double)((k % 7) + 1);
    double fmin = tf[0];
    for (int r = 1; r < reps; r++)
        fmin = tf[r] < fmin ? tf[r] : fmin;
    const double fmed = median_sorted(tf, reps), per_token = fmin * 1e3 / ((double)B * T);
    printf("bench_attention_window: B %d T %d C %d H %d (hd %d), window %d, sinks %d, token table, forward only, "
           "%d threads, %d reps\n",
           B, T, C, H, C / H, window, bias.sinks, threads, reps);
    printf("forward  %9.3f ms min, %9.3f median, %.3f us per token at the min\n", fmin, fmed, per_token);
    printf("RESULT name=%s T=%d window=%d sinks=%d fwd_ms_min=%.3f fwd_ms_median=%.3f us_per_token=%.4f "
           "checksum=%.9e\n",
           name, T, window, bias.sinks, fmin, fmed, per_token, sum);
    free(qkv), free(out), free(table), free(tf);
    return 0;
}
