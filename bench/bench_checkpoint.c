/* The cost of verifying a checkpoint (docs/robustness.md, "Checkpoints"): the median time of loading
 * it for evaluation with every checksum verified and with --no-verify (the tensors' hashes skipped),
 * then the parts: reading the file, hashing every tensor, sealing the metadata.
 *
 *   build/bench_checkpoint runs/demo_alibi/checkpoint.safetensors [LOADS (default 21)] */
#define _POSIX_C_SOURCE 200809L
#include "io/safetensors.h"
#include "train/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_LOADS 201

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: bench_checkpoint CHECKPOINT [LOADS]\n");
        return 2;
    }
    const char *path = argv[1];
    int loads = argc > 2 ? atoi(argv[2]) : 21;
    if (loads < 1 || loads > MAX_LOADS) {
        fprintf(stderr, "bench_checkpoint: LOADS must be 1..%d\n", MAX_LOADS);
        return 2;
    }
    const char *sets[1] = {"run.device=cpu"};
    for (int no_verify = 0; no_verify < 2; no_verify++) {
        double t[MAX_LOADS];
        for (int r = 0; r < loads; r++) {
            bk_checkpoint_options o = {.overrides = sets, .n_overrides = 1, .no_verify = no_verify};
            bk_lm lm;
            bk_train_state st;
            bk_error err;
            double start = now_s();
            if (bk_checkpoint_load_ex(path, &o, &lm, NULL, &st, &err)) {
                fprintf(stderr, "bench_checkpoint: %s\n", err.message);
                return 1;
            }
            t[r] = now_s() - start;
            bk_lm_close(&lm);
        }
        qsort(t, (size_t)loads, sizeof t[0], by_value);
        printf("eval load, %s: median %.1f ms (min %.1f, max %.1f) over %d loads\n",
               no_verify ? "--no-verify" : "verified", 1e3 * t[loads / 2], 1e3 * t[0], 1e3 * t[loads - 1], loads);
    }
    bk_safetensors *st;
    bk_error err;
    double start = now_s();
    if (bk_safetensors_open(path, &st, &err)) {
        fprintf(stderr, "bench_checkpoint: %s\n", err.message);
        return 1;
    }
    double read = now_s() - start;
    size_t bytes = 0;
    volatile uint64_t sink = 0;
    start = now_s();
    for (int i = 0; i < bk_safetensors_count(st); i++) {
        const bk_st_tensor *x = bk_safetensors_at(st, i);
        size_t count = 1;
        for (int d = 0; d < x->ndim; d++)
            count *= (size_t)x->shape[d];
        sink ^= bk_xxh64(x->data, count * sizeof(float), 0);
        bytes += count * sizeof(float);
    }
    double hash = now_s() - start;
    const char *meta = bk_safetensors_meta(st, "biaskit");
    char seal[17];
    start = now_s();
    for (int k = 0; k < 1000; k++)
        bk_checkpoint_seal(meta ? meta : "", seal);
    double seal_s = (now_s() - start) / 1000;
    printf("read %.1f ms; XXH64 of %zu tensor bytes %.1f ms (%.2f GB/s); seal of %zu metadata bytes %.2f us\n",
           1e3 * read, bytes, 1e3 * hash, hash > 0 ? (double)bytes / hash / 1e9 : 0.0, meta ? strlen(meta) : 0,
           1e6 * seal_s);
    bk_safetensors_close(st);
    return 0;
}
