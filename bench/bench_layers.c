/* The host's elementwise layers (core/model/layers.c) at the three benchmark sizes' shapes, in each of
 * their vector copies (core/model/host_simd.h): the copy the loader picks for this CPU, the same source
 * built for AVX2 alone and built for baseline x86-64 (the builds test_host_clones compares bit for bit:
 * tests/host_clones_avx2.c, tests/host_clones_base.c). The copies run in turn inside each round, so a
 * slow spell of the machine hits all of them; each row is the fastest round.
 *
 *   bench_layers [--size a|b|c|all] [--rounds N] [--threads N]
 *
 * Output: one line per (size, layer, copy), `layer size=c op=gelu_fwd elements=1048576 copy=avx2 ms=...
 * ns_per_element=...`, and per (size, layer) the AVX2 build's time over the picked copy's. */
#include "bench_util.h"

#include "model/layers.h"
#include "../tests/host_clones.h"

#include <omp.h>
#include <stdio.h>
#include <string.h>

/* the builds of tests/host_clones_avx2.c and tests/host_clones_base.c */
BK_HOST_CLONES_DECLARE(avx2_)
BK_HOST_CLONES_DECLARE(base_)

typedef struct {
    const char *name;
    void (*gelu_forward)(float *, const float *, size_t);
    void (*gelu_backward)(float *, const float *, const float *, size_t);
    void (*layernorm_forward)(float *, float *, float *, const float *, const float *, const float *, int, int);
    void (*layernorm_backward)(float *, float *, float *, const float *, const float *, const float *, const float *,
                               const float *, int, int);
    void (*crossentropy_forward)(float *, float *, const float *, const int32_t *, int, int);
    void (*crossentropy_backward)(float *, const float *, const int32_t *, float, int, int);
    void (*residual_forward)(float *, const float *, const float *, size_t);
} build;

#define BUILD(p, label)                                                                                            \
    {                                                                                                              \
        label, p##gelu_forward, p##gelu_backward, p##layernorm_forward, p##layernorm_backward,                     \
            p##crossentropy_forward, p##crossentropy_backward, p##residual_forward                                 \
    }

enum { OP_GELU_F, OP_GELU_B, OP_LN_F, OP_LN_B, OP_XENT_F, OP_XENT_B, OP_RESID_F, OP_COUNT };
static const char *const OP_NAMES[OP_COUNT] = {"gelu_fwd", "gelu_bwd", "layernorm_fwd", "layernorm_bwd",
                                               "crossentropy_fwd", "crossentropy_bwd", "residual_fwd"};

/* the benchmark sizes (bench/run.sh): tokens per step and width; the vocabulary is 256 */
typedef struct {
    const char *name;
    int tokens, C;
} size_spec;
static const size_spec SIZES[] = {{"a", 8 * 256, 256}, {"b", 4 * 512, 512}, {"c", 16 * 128, 128}};
enum { VOCAB = 256 };

typedef struct {
    int N, C, V;
    float *x, *x4, *y4, *d4, *g4, *y, *d, *g, *w, *b, *mean, *rstd, *dw, *db, *logits, *probs, *losses, *dlogits;
    int32_t *targets;
} buffers;

static size_t elements(const buffers *bf, int op)
{
    switch (op) {
    case OP_GELU_F:
    case OP_GELU_B:
        return (size_t)bf->N * 4 * bf->C;
    case OP_XENT_F:
    case OP_XENT_B:
        return (size_t)bf->N * bf->V;
    default:
        return (size_t)bf->N * bf->C;
    }
}

static void run_op(const build *bd, buffers *bf, int op)
{
    const int N = bf->N, C = bf->C, V = bf->V;
    const size_t n4 = (size_t)N * 4 * C, n = (size_t)N * C;
    switch (op) {
    case OP_GELU_F:
        bd->gelu_forward(bf->y4, bf->x4, n4);
        break;
    case OP_GELU_B:
        bd->gelu_backward(bf->g4, bf->x4, bf->d4, n4);
        break;
    case OP_LN_F:
        bd->layernorm_forward(bf->y, bf->mean, bf->rstd, bf->x, bf->w, bf->b, N, C);
        break;
    case OP_LN_B:
        bd->layernorm_backward(bf->g, bf->dw, bf->db, bf->d, bf->x, bf->w, bf->mean, bf->rstd, N, C);
        break;
    case OP_XENT_F:
        bd->crossentropy_forward(bf->losses, bf->probs, bf->logits, bf->targets, N, V);
        break;
    case OP_XENT_B:
        bd->crossentropy_backward(bf->dlogits, bf->probs, bf->targets, 1.0f / (float)N, N, V);
        break;
    default:
        bd->residual_forward(bf->y, bf->x, bf->d, n);
        break;
    }
}

static float *floats(size_t n, uint64_t seed, float scale)
{
    float *x = malloc(n * sizeof *x);
    if (!x) {
        fprintf(stderr, "bench_layers: cannot allocate %zu floats\n", n);
        exit(1);
    }
    fill(x, n, seed);
    for (size_t k = 0; k < n; k++)
        x[k] *= scale;
    return x;
}

int main(int argc, char **argv)
{
    const char *size = "all";
    int rounds = 5, threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc)
            size = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "bench_layers: unknown argument '%s'; expected --size a|b|c|all, --rounds N, --threads N\n",
                    argv[i]);
            return 2;
        }
    }
    if (rounds < 1 || threads < 1) {
        fprintf(stderr, "bench_layers: --rounds and --threads take a number >= 1\n");
        return 2;
    }
    omp_set_num_threads(threads);

    build builds[3];
    int n_builds = 0;
    const char *picked = "baseline";
    int has_avx2 = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    picked = __builtin_cpu_supports("avx512f") ? "avx512f" : __builtin_cpu_supports("avx2") ? "avx2" : "baseline";
    has_avx2 = __builtin_cpu_supports("avx2");
#endif
    char picked_label[48];
    snprintf(picked_label, sizeof picked_label, "picked(%s)", picked);
    builds[n_builds++] = (build)BUILD(bk_, picked_label);
    if (has_avx2)
        builds[n_builds++] = (build)BUILD(avx2_, "avx2");
    builds[n_builds++] = (build)BUILD(base_, "baseline");
    printf("bench_layers: %d threads, %d rounds; the loader picked the %s copies\n", threads, rounds, picked);

    int matched = 0;
    for (size_t s = 0; s < sizeof SIZES / sizeof SIZES[0]; s++) {
        if (strcmp(size, "all") && strcmp(size, SIZES[s].name))
            continue;
        matched = 1;
        buffers bf = {.N = SIZES[s].tokens, .C = SIZES[s].C, .V = VOCAB};
        const size_t n = (size_t)bf.N * bf.C, n4 = 4 * n, nv = (size_t)bf.N * VOCAB;
        bf.x = floats(n, 1, 3.0f), bf.x4 = floats(n4, 2, 3.0f), bf.y4 = floats(n4, 3, 1.0f);
        bf.d4 = floats(n4, 4, 1.0f), bf.g4 = floats(n4, 5, 0.0f), bf.y = floats(n, 6, 1.0f);
        bf.d = floats(n, 7, 1.0f), bf.g = floats(n, 8, 0.0f), bf.w = floats((size_t)bf.C, 9, 1.0f);
        bf.b = floats((size_t)bf.C, 10, 1.0f), bf.mean = floats((size_t)bf.N, 11, 1.0f);
        bf.rstd = floats((size_t)bf.N, 12, 1.0f), bf.dw = floats((size_t)bf.C, 13, 0.0f);
        bf.db = floats((size_t)bf.C, 14, 0.0f), bf.logits = floats(nv, 15, 4.0f), bf.probs = floats(nv, 16, 1.0f);
        bf.losses = floats((size_t)bf.N, 17, 1.0f), bf.dlogits = floats(nv, 18, 1.0f);
        bf.targets = malloc((size_t)bf.N * sizeof *bf.targets);
        if (!bf.targets)
            return 1;
        for (int i = 0; i < bf.N; i++)
            bf.targets[i] = (int32_t)((i * 7919) % VOCAB);
        builds[0].layernorm_forward(bf.y, bf.mean, bf.rstd, bf.x, bf.w, bf.b, bf.N, bf.C); /* real statistics */
        builds[0].crossentropy_forward(bf.losses, bf.probs, bf.logits, bf.targets, bf.N, VOCAB);

        for (int op = 0; op < OP_COUNT; op++) {
            double best[3] = {1e30, 1e30, 1e30};
            /* calls per timing: about 20 ms of work at 1 ns an element */
            const size_t per = elements(&bf, op);
            const int reps = per >= 20000000 ? 1 : (int)(20000000 / per);
            for (int k = 0; k < n_builds; k++)
                run_op(&builds[k], &bf, op); /* warm-up */
            for (int r = 0; r < rounds; r++)
                for (int k = 0; k < n_builds; k++) {
                    double t = now();
                    for (int rep = 0; rep < reps; rep++)
                        run_op(&builds[k], &bf, op);
                    t = (now() - t) / reps;
                    if (t < best[k])
                        best[k] = t;
                }
            for (int k = 0; k < n_builds; k++)
                printf("layer size=%s op=%s elements=%zu copy=%s ms=%.4f ns_per_element=%.3f\n", SIZES[s].name,
                       OP_NAMES[op], per, builds[k].name, best[k] * 1e3, best[k] * 1e9 / (double)per);
            if (has_avx2)
                printf("layer size=%s op=%s avx2_over_picked=%.2f baseline_over_picked=%.2f\n", SIZES[s].name,
                       OP_NAMES[op], best[1] / best[0], best[n_builds - 1] / best[0]);
        }
        free(bf.x), free(bf.x4), free(bf.y4), free(bf.d4), free(bf.g4), free(bf.y), free(bf.d), free(bf.g);
        free(bf.w), free(bf.b), free(bf.mean), free(bf.rstd), free(bf.dw), free(bf.db), free(bf.logits);
        free(bf.probs), free(bf.losses), free(bf.dlogits), free(bf.targets);
    }
    if (!matched) {
        fprintf(stderr, "bench_layers: unknown size '%s'; expected a, b, c or all\n", size);
        return 2;
    }
    return 0;
}
