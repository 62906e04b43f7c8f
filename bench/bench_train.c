/* Training-step benchmark of the CPU engine.
 *
 *   bench_train --layers 4 --dim 256 --heads 8 --length 256 --batch 8 --steps 10 --warmup 3
 *               [--threads 2] [--vocab 256] [--alibi | --nope] [--name NAME] [--no-breakdown]
 *               [--finite-checks] [--eval] [--attention fused|materialized|auto]
 *
 * Builds the model from TOML text (bk_lm_open_text, an ALiBi [[term]] unless --nope; the plugin is
 * found through BIASKIT_PLUGIN_PATH or the build tree), feeds it random tokens and times full training
 * steps after `warmup` untimed ones:
 *     bk_lm_zero_grad, bk_gpt_forward(train=1), bk_gpt_backward, bk_adamw_step, bk_lm_after_step
 * (what bk_train does per step, minus data loading, the gradient norm/clipping and logging).
 *
 * The breakdown comes from a separate instrumented pass that calls the layer functions of
 * core/model/layers.h and core/cpu/attention.h in the order gpt.c calls them, on buffers of the same
 * shapes and with the model's own weights and bias tables, and times each call: attention
 * (bk_attention_forward/backward), matmuls (bk_matmul_forward/backward, L x 4 per direction + the tied
 * lm head), the other layer kernels, and the memset gpt.c does on its activation gradients. Each is
 * reported as a fraction of the measured step time; what is left is the optimizer, the bias tables
 * and anything the instrumented pass does not see.
 *
 * --eval times evaluation instead: `warmup` untimed, then `steps` timed forward passes
 *     bk_gpt_forward(train=0)
 * (with the targets, so the loss is computed; no backward, no optimizer, no breakdown, no SGEMM rate),
 * what `biaskit eval` runs per batch; tokens/s = B T / the mean pass. At long lengths use --batch 1.
 * --attention sets [run] attention in the model's TOML ("fused": flash-style kernels keeping B x H x T
 * row statistics; "materialized": the blocked kernel saving B x H x T x T probabilities in training;
 * "auto": the engine's choice, core/model/backend.h); without it the engine's default. The RESULT line
 * names it (attention=...; "default" when not given) with the BLAS and the kernels it picked (blas=...
 * core=..., from bk_blas_name and bk_blas_describe).
 *
 * --finite-checks measures what the engine's non-finite checks cost (core/bias/bias.h): the checks
 * of the plugins' tables (bk_bias_forward) and parameter gradients (bk_bias_backward), timed with
 * bias.check_finite on and off over many calls, as a fraction of the median step; then whole steps
 * alternately with the checks on and off (noisier: the difference is far below a step's jitter). The
 * loss and gradient-norm checks of the training loop are two isfinite() on values computed anyway.
 *
 * The FLOP rate line gives the model's FLOPs per step (matmuls and the attention's two products,
 * forward + backward = 3 x forward) over the measured step time, as a fraction of this machine's SGEMM
 * rate (bk_sgemm, util/blas.h, of 2048^3 with the same threads, best of 5): model_gflops, sgemm_gflops,
 * mfu_frac; and beside it the FLOPs per step (step_gflop) and the machine's FMA peak with the same threads
 * (fma_peak.h: FMA chains in registers, which no product beats; fma_peak_gflops). blas= and core= name
 * the BLAS the engine was built with and the kernels it picked (bk_blas_name, bk_blas_describe); gemm= the kernels of the linear layers' products (cpu/gemm.h: the
 * engine's avx512, avx2 or plain kernels, or blas; environment variable BIASKIT_GEMM), att_gemm= those of
 * the blocked attention's per-head products (bk_gemm_attention_kernels).
 *
 * Last line, machine-readable:
 *   RESULT name=... tokens_per_s=... ms_per_step=... attention_frac=... matmul_frac=... [more keys]
 */
#define _POSIX_C_SOURCE 200809L
#include "cpu/attention.h"
#include "cpu/gemm.h"
#include "model/gpt.h"
#include "model/layers.h"
#include "train/adamw.h"
#include "train/lm.h"
#include "util/blas.h"

#include "bench_util.h"
#include "fma_peak.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 5 /* instrumented passes */

/* The model's FLOPs per training step (forward + backward = 3 x forward): per token, the matmuls
 * 2 (12 L C^2 + V C) (qkv, projection, the MLP's two, and the tied head) and the attention's two
 * products over the causal keys, 2 x 2 C (T + 1) / 2 per layer on average. */
static double model_flops(int L, int C, int V, int T, int B)
{
    double per_token = 2.0 * (12.0 * L * (double)C * C + (double)V * C) + 2.0 * L * (double)C * (T + 1);
    return 3.0 * per_token * (double)B * T;
}

/* This machine's SGEMM rate with the step's threads: the best of 5 bk_sgemm of 2048^3 (the largest
 * rate a matmul reaches here; the model's matmuls are smaller), in GFLOP/s. */
static double sgemm_gflops(void)
{
    enum { N = 2048 };
    float *a = malloc(sizeof(float) * N * N), *b = malloc(sizeof(float) * N * N), *c = malloc(sizeof(float) * N * N);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return NAN;
    }
    for (size_t i = 0; i < (size_t)N * N; i++)
        a[i] = (float)(i % 7) * 0.25f, b[i] = (float)(i % 5) * 0.5f, c[i] = 0.0f;
    double best = INFINITY;
    for (int r = 0; r < 6; r++) { /* the first is a warm-up */
        double t = now();
        bk_sgemm(CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
        t = now() - t;
        if (r > 0 && t < best)
            best = t;
    }
    free(a), free(b), free(c);
    return 2.0 * N * N * (double)N / best / 1e9;
}

/* The median of v[0 .. n-1] (at most 64 values), v left as it is. */
static double median(const double *v, int n)
{
    double w[64];
    n = n < 64 ? n : 64;
    memcpy(w, v, (size_t)n * sizeof *w);
    return median_sorted(w, n);
}

typedef struct options {
    int layers, dim, heads, length, batch, steps, warmup, threads, vocab, alibi, breakdown, finite_checks, eval;
    const char *name, *attention;
} options;

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_train [--layers N] [--dim N] [--heads N] [--length T] [--batch B] [--steps N]\n"
               "                   [--warmup N] [--threads N] [--vocab V] [--alibi | --nope] [--name NAME]\n"
               "                   [--no-breakdown] [--finite-checks] [--eval] [--attention fused|materialized|auto]\n"
               "defaults: --layers 4 --dim 256 --heads 8 --length 256 --batch 8 --steps 10 --warmup 3 --vocab 256\n"
               "          --alibi; --threads 0 keeps OMP_NUM_THREADS / every core\n");
}

static int parse_int(const char *flag, const char *s, int min, int *out)
{
    char *end;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || *end || v < min || v > 1000000000L) {
        fprintf(stderr, "bench_train: %s expects an integer >= %d, got '%s'\n", flag, min, s ? s : "(nothing)");
        return 1;
    }
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){4, 256, 8, 256, 8, 10, 3, 0, 256, 1, 1, 0, 0, NULL, NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        struct {
            const char *flag;
            int *dst, min;
        } ints[] = {{"--layers", &o->layers, 1}, {"--dim", &o->dim, 1},       {"--heads", &o->heads, 1},
                    {"--length", &o->length, 1}, {"--batch", &o->batch, 1},   {"--steps", &o->steps, 1},
                    {"--warmup", &o->warmup, 0}, {"--threads", &o->threads, 0}, {"--vocab", &o->vocab, 2}};
        int matched = 0;
        for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++)
            if (!strcmp(a, ints[k].flag)) {
                if (parse_int(a, v, ints[k].min, ints[k].dst))
                    return 1;
                i++, matched = 1;
                break;
            }
        if (matched)
            continue;
        if (!strcmp(a, "--alibi"))
            o->alibi = 1;
        else if (!strcmp(a, "--nope"))
            o->alibi = 0;
        else if (!strcmp(a, "--no-breakdown"))
            o->breakdown = 0;
        else if (!strcmp(a, "--finite-checks"))
            o->finite_checks = 1;
        else if (!strcmp(a, "--eval"))
            o->eval = 1;
        else if (!strcmp(a, "--attention") && v) {
            if (strcmp(v, "fused") && strcmp(v, "materialized") && strcmp(v, "auto")) {
                fprintf(stderr, "bench_train: --attention expects fused, materialized or auto, got '%s'\n", v);
                return 1;
            }
            o->attention = v, i++;
        }
        else if (!strcmp(a, "--name") && v)
            o->name = v, i++;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "bench_train: unknown argument '%s'\n", a);
            usage(stderr);
            return 1;
        }
    }
    if (o->eval && o->finite_checks) {
        fprintf(stderr, "bench_train: --finite-checks times training steps; it does not go with --eval\n");
        return 1;
    }
    if (o->dim % o->heads) {
        fprintf(stderr, "bench_train: --dim %d is not divisible by --heads %d\n", o->dim, o->heads);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------------
 * The instrumented pass: gpt.c's forward and backward, call for call, with a timer around each. */

enum {
    CAT_ATTN,
    CAT_MATMUL,
    CAT_HEAD, /* the lm-head matmuls */
    CAT_LAYERNORM,
    CAT_GELU,
    CAT_RESIDUAL,
    CAT_XENT,
    CAT_ENCODER,
    CAT_BIAS, /* bk_bias_backward */
    CAT_MEMSET,
    CAT_COUNT
};
static const char *const cat_names[CAT_COUNT] = {"attention", "matmul", "lm head", "layernorm", "gelu",
                                                 "residual",  "softmax+xent", "embedding", "bias backward",
                                                 "memset dacts"};

typedef struct timers {
    double t[2][CAT_COUNT]; /* [0 forward, 1 backward][category] */
    int bwd;
} timers;

#define TIMED(tm, cat, call)                                                                                       \
    do {                                                                                                           \
        double t0_ = now();                                                                                        \
        call;                                                                                                      \
        (tm)->t[(tm)->bwd][cat] += now() - t0_;                                                                    \
    } while (0)

/* The activation layout of gpt.c (train mode), so that the memset and every stride match. */
typedef struct acts {
    float *encoded, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *attproj, *res2, *ln2, *ln2_mean, *ln2_rstd,
        *fch, *fch_gelu, *fcproj, *res3, *lnf, *lnf_mean, *lnf_rstd, *logits, *probs;
} acts;
#define N_ACTS (sizeof(acts) / sizeof(float *))

static size_t carve(float *base, const bk_gpt *m, int B, int T, acts *a)
{
    size_t BT = (size_t)B * T, C = (size_t)m->C, L = (size_t)m->L, V = (size_t)m->V;
    size_t s[N_ACTS] = {
        BT * C,          L * BT * C,          L * BT,      L * BT,      L * BT * 3 * C, L * BT * C,
        L * B * (size_t)m->H * T * T, L * BT * C, L * BT * C, L * BT * C, L * BT,     L * BT,
        L * BT * 4 * C, L * BT * 4 * C,      L * BT * C,  L * BT * C,  BT * C,         BT,
        BT,             BT * V,              BT * V,
    };
    size_t total = 0;
    float **ptr = (float **)a;
    for (size_t i = 0; i < N_ACTS; i++) {
        ptr[i] = base ? base + total : NULL;
        total += s[i];
    }
    return total;
}

typedef struct replica {
    bk_gpt *m;
    int B, T;
    float *acts_mem, *dacts_mem, *grads, *losses, *dtable_mem;
    size_t acts_size, zeroed_size; /* floats in all, and those backward zeroes */
    acts a, d;
    bk_gpt_params g;
} replica;

static int replica_init(replica *r, bk_gpt *m, int B, int T)
{
    memset(r, 0, sizeof *r);
    r->m = m, r->B = B, r->T = T;
    r->acts_size = carve(NULL, m, B, T, &r->a);
    r->acts_mem = calloc(r->acts_size, sizeof(float));
    r->dacts_mem = calloc(r->acts_size, sizeof(float));
    r->grads = calloc(m->n_params, sizeof(float));
    r->losses = calloc((size_t)B * T, sizeof(float));
    r->dtable_mem = calloc((size_t)BK_STREAM_COUNT * m->H * (size_t)(T > 0 ? T : 1), sizeof(float));
    if (!r->acts_mem || !r->dacts_mem || !r->grads || !r->losses || !r->dtable_mem)
        return 1;
    carve(r->acts_mem, m, B, T, &r->a);
    carve(r->dacts_mem, m, B, T, &r->d);
    r->zeroed_size = (size_t)(r->d.att - r->d.encoded) + (size_t)(r->d.logits - r->d.attproj);
    /* gradient tensors at the parameters' offsets */
    float **gp = (float **)&r->g;
    float *const *pp = (float *const *)&m->p;
    for (int i = 0; i < m->n_tensors; i++)
        gp[i] = r->grads + (pp[i] - m->params);
    return 0;
}

static void replica_free(replica *r)
{
    free(r->acts_mem), free(r->dacts_mem), free(r->grads), free(r->losses), free(r->dtable_mem);
}

static void attention_bias(const bk_gpt *m, int layer, bk_attention_bias *ab)
{
    memset(ab, 0, sizeof *ab);
    if (!m->bias)
        return;
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        ab->table[s] = bk_bias_table(m->bias, layer, (bk_stream)s);
    ab->distances = m->bias->distances;
}

static int replica_pass(replica *r, const int32_t *in, const int32_t *tg, timers *tm, bk_error *err)
{
    bk_gpt *m = r->m;
    const int B = r->B, T = r->T, C = m->C, H = m->H, L = m->L, V = m->V, BT = B * T;
    const bk_gpt_params *p = &m->p, *g = &r->g;
    acts *a = &r->a, *d = &r->d;
    int rc = BK_OK;

    /* forward */
    tm->bwd = 0;
    TIMED(tm, CAT_ENCODER, bk_encoder_forward(a->encoded, in, p->wte, B, T, C));
    for (int l = 0; l < L; l++) {
        size_t o1 = (size_t)l * BT, oC = o1 * C, o3 = oC * 3, o4 = oC * 4;
        const float *residual = l == 0 ? a->encoded : a->res3 + (size_t)(l - 1) * BT * C;
        float *att = a->att + (size_t)l * B * H * T * T;
        TIMED(tm, CAT_LAYERNORM,
              bk_layernorm_forward(a->ln1 + oC, a->ln1_mean + o1, a->ln1_rstd + o1, residual, p->ln1w + l * C,
                                   p->ln1b + l * C, BT, C));
        TIMED(tm, CAT_MATMUL,
              bk_matmul_forward(a->qkv + o3, a->ln1 + oC, p->qkvw + (size_t)l * 3 * C * C, p->qkvb + l * 3 * C, BT,
                                C, 3 * C));
        bk_attention_bias ab;
        attention_bias(m, l, &ab);
        TIMED(tm, CAT_ATTN, rc = bk_attention_forward(a->atty + oC, att, a->qkv + o3, &ab, B, T, C, H, err));
        if (rc)
            return rc;
        TIMED(tm, CAT_MATMUL,
              bk_matmul_forward(a->attproj + oC, a->atty + oC, p->attprojw + (size_t)l * C * C, p->attprojb + l * C,
                                BT, C, C));
        TIMED(tm, CAT_RESIDUAL, bk_residual_forward(a->res2 + oC, residual, a->attproj + oC, (size_t)BT * C));
        TIMED(tm, CAT_LAYERNORM,
              bk_layernorm_forward(a->ln2 + oC, a->ln2_mean + o1, a->ln2_rstd + o1, a->res2 + oC, p->ln2w + l * C,
                                   p->ln2b + l * C, BT, C));
        TIMED(tm, CAT_MATMUL,
              bk_matmul_forward(a->fch + o4, a->ln2 + oC, p->fcw + (size_t)l * 4 * C * C, p->fcb + l * 4 * C, BT, C,
                                4 * C));
        TIMED(tm, CAT_GELU, bk_gelu_forward(a->fch_gelu + o4, a->fch + o4, (size_t)BT * 4 * C));
        TIMED(tm, CAT_MATMUL,
              bk_matmul_forward(a->fcproj + oC, a->fch_gelu + o4, p->fcprojw + (size_t)l * C * 4 * C,
                                p->fcprojb + l * C, BT, 4 * C, C));
        TIMED(tm, CAT_RESIDUAL, bk_residual_forward(a->res3 + oC, a->res2 + oC, a->fcproj + oC, (size_t)BT * C));
    }
    const size_t last = (size_t)(L - 1) * BT * C;
    TIMED(tm, CAT_LAYERNORM,
          bk_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->res3 + last, p->lnfw, p->lnfb, BT, C));
    TIMED(tm, CAT_HEAD, bk_matmul_forward(a->logits, a->lnf, p->wte, NULL, BT, C, V));
    TIMED(tm, CAT_XENT, bk_crossentropy_forward(r->losses, a->probs, a->logits, tg, BT, V));

    /* backward */
    tm->bwd = 1;
    /* gpt.c zeroes all but the att, logits and probs slots, through the backend (threads share it out) */
    TIMED(tm, CAT_MEMSET, {
        m->be->zero(m->be, d->encoded, (size_t)(d->att - d->encoded) * sizeof(float), err);
        m->be->zero(m->be, d->attproj, (size_t)(d->logits - d->attproj) * sizeof(float), err);
    });
    const int32_t D = m->bias ? m->bias->distances : 0;
    const int have_terms = m->bias && m->bias->set->n;
    float *dtable[BK_STREAM_COUNT] = {NULL, NULL};
    if (have_terms)
        for (int s = 0; s < BK_STREAM_COUNT; s++)
            if (m->bias->n_on[s])
                dtable[s] = r->dtable_mem + (size_t)s * H * D;
    TIMED(tm, CAT_XENT, bk_crossentropy_backward(d->logits, a->probs, tg, 1.0f / (float)BT, BT, V));
    TIMED(tm, CAT_HEAD, bk_matmul_backward(d->lnf, g->wte, NULL, d->logits, a->lnf, p->wte, BT, C, V));
    TIMED(tm, CAT_LAYERNORM,
          bk_layernorm_backward(d->res3 + last, g->lnfw, g->lnfb, d->lnf, a->res3 + last, p->lnfw, a->lnf_mean,
                                a->lnf_rstd, BT, C));
    for (int l = L - 1; l >= 0; l--) {
        size_t o1 = (size_t)l * BT, oC = o1 * C, o3 = oC * 3, o4 = oC * 4;
        const float *residual = l == 0 ? a->encoded : a->res3 + (size_t)(l - 1) * BT * C;
        float *dresidual = l == 0 ? d->encoded : d->res3 + (size_t)(l - 1) * BT * C;
        TIMED(tm, CAT_RESIDUAL, bk_residual_backward(d->res2 + oC, d->fcproj + oC, d->res3 + oC, (size_t)BT * C));
        TIMED(tm, CAT_MATMUL,
              bk_matmul_backward(d->fch_gelu + o4, g->fcprojw + (size_t)l * C * 4 * C, g->fcprojb + l * C,
                                 d->fcproj + oC, a->fch_gelu + o4, p->fcprojw + (size_t)l * C * 4 * C, BT, 4 * C, C));
        TIMED(tm, CAT_GELU, bk_gelu_backward(d->fch + o4, a->fch + o4, d->fch_gelu + o4, (size_t)BT * 4 * C));
        TIMED(tm, CAT_MATMUL,
              bk_matmul_backward(d->ln2 + oC, g->fcw + (size_t)l * 4 * C * C, g->fcb + l * 4 * C, d->fch + o4,
                                 a->ln2 + oC, p->fcw + (size_t)l * 4 * C * C, BT, C, 4 * C));
        TIMED(tm, CAT_LAYERNORM,
              bk_layernorm_backward(d->res2 + oC, g->ln2w + l * C, g->ln2b + l * C, d->ln2 + oC, a->res2 + oC,
                                    p->ln2w + l * C, a->ln2_mean + o1, a->ln2_rstd + o1, BT, C));
        TIMED(tm, CAT_RESIDUAL, bk_residual_backward(dresidual, d->attproj + oC, d->res2 + oC, (size_t)BT * C));
        TIMED(tm, CAT_MATMUL,
              bk_matmul_backward(d->atty + oC, g->attprojw + (size_t)l * C * C, g->attprojb + l * C, d->attproj + oC,
                                 a->atty + oC, p->attprojw + (size_t)l * C * C, BT, C, C));
        bk_attention_bias ab;
        attention_bias(m, l, &ab);
        if (have_terms)
            memset(r->dtable_mem, 0, (size_t)BK_STREAM_COUNT * H * D * sizeof(float));
        TIMED(tm, CAT_ATTN,
              rc = bk_attention_backward(d->qkv + o3, dtable, d->atty + oC, a->qkv + o3,
                                         a->att + (size_t)l * B * H * T * T, &ab, B, T, C, H, err));
        if (rc)
            return rc;
        if (have_terms)
            TIMED(tm, CAT_BIAS, rc = bk_bias_backward(m->bias, l, (const float *const *)dtable, err));
        if (rc)
            return rc;
        TIMED(tm, CAT_MATMUL,
              bk_matmul_backward(d->ln1 + oC, g->qkvw + (size_t)l * 3 * C * C, g->qkvb + l * 3 * C, d->qkv + o3,
                                 a->ln1 + oC, p->qkvw + (size_t)l * 3 * C * C, BT, C, 3 * C));
        TIMED(tm, CAT_LAYERNORM,
              bk_layernorm_backward(dresidual, g->ln1w + l * C, g->ln1b + l * C, d->ln1 + oC, residual,
                                    p->ln1w + l * C, a->ln1_mean + o1, a->ln1_rstd + o1, BT, C));
    }
    TIMED(tm, CAT_ENCODER, bk_encoder_backward(g->wte, d->encoded, in, B, T, C));
    return BK_OK;
}

/* ------------------------------------------------------------------------------------------------ */

typedef struct phase {
    double zero, fwd, bwd, opt, after;
} phase;

static int train_step(bk_lm *lm, bk_adamw *opt, const int32_t *in, const int32_t *tg, int B, int T, phase *ph,
                      bk_error *err)
{
    const bk_experiment *e = &lm->exp;
    int rc;
    double t0 = now();
    if ((rc = bk_lm_zero_grad(lm, err)))
        return rc;
    double t1 = now();
    if ((rc = bk_gpt_forward(&lm->gpt, in, tg, B, T, 1, err)))
        return rc;
    double t2 = now();
    if ((rc = bk_gpt_backward(&lm->gpt, in, tg, 1.0f, err)))
        return rc;
    double t3 = now();
    if ((rc = bk_adamw_step(opt, e->train.lr, e->train.beta1, e->train.beta2, e->train.eps, e->train.weight_decay,
                            err)))
        return rc;
    double t4 = now();
    if ((rc = bk_lm_after_step(lm, T, err)))
        return rc;
    double t5 = now();
    ph->zero += t1 - t0, ph->fwd += t2 - t1, ph->bwd += t3 - t2, ph->opt += t4 - t3, ph->after += t5 - t4;
    return BK_OK;
}

/* Seconds per call of bk_bias_forward and of one step's bk_bias_backward (every layer), with the
 * checks off (index 0) and on (index 1): the minimum over `rounds` rounds of `reps` calls, the rounds
 * alternating off and on so that a slow spell of the machine hits both. */
static int time_bias(bk_lm *lm, int T, int reps, int rounds, double fwd[2], double bwd[2], bk_error *err)
{
    bk_bias *b = &lm->bias;
    size_t n = (size_t)b->n_heads * (size_t)T;
    float *dmem = calloc(BK_STREAM_COUNT * n, sizeof *dmem);
    if (!dmem)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    const float *dmixed[BK_STREAM_COUNT];
    for (int s = 0; s < BK_STREAM_COUNT; s++) /* a small finite dL/dM */
        dmixed[s] = b->n_on[s] ? dmem + (size_t)s * n : NULL;
    for (size_t i = 0; i < BK_STREAM_COUNT * n; i++)
        dmem[i] = 1e-6f * (float)(i % 7);
    int rc = BK_OK;
    fwd[0] = fwd[1] = bwd[0] = bwd[1] = INFINITY;
    for (int r = 0; r < 2 * rounds && !rc; r++) {
        const int on = r % 2;
        b->check_finite = on;
        double t = now();
        for (int i = 0; i < reps && !rc; i++)
            rc = bk_bias_forward(b, T, err);
        t = (now() - t) / reps;
        fwd[on] = t < fwd[on] ? t : fwd[on];
        t = now();
        for (int i = 0; i < reps && !rc; i++) {
            bk_bias_zero_grad(b);
            for (int l = b->n_layers - 1; l >= 0 && !rc; l--)
                rc = bk_bias_backward(b, l, dmixed, err);
        }
        t = (now() - t) / reps;
        bwd[on] = t < bwd[on] ? t : bwd[on];
    }
    b->check_finite = 1;
    free(dmem);
    return rc;
}

/* --finite-checks: prints the cost of the non-finite checks; *frac = their share of the median step. */
static int measure_finite_checks(bk_lm *lm, bk_adamw *opt, const int32_t *in, const int32_t *tg, int B, int T,
                                 int steps, double step_med, double *frac, bk_error *err)
{
    double fwd[2], bwd[2];
    int rc;
    if ((rc = time_bias(lm, T, 1000, 25, fwd, bwd, err)))
        return rc;
    const double fwd_off = fwd[0], fwd_on = fwd[1], bwd_off = bwd[0], bwd_on = bwd[1];
    double cost = (fwd_on - fwd_off) + (bwd_on - bwd_off);
    *frac = cost / step_med;
    printf("finite checks: bias tables %.3f us (%.3f with, %.3f without) + plugin gradients %.3f us (%.3f with, "
           "%.3f without) = %.3f us per step = %.5f%% of the median step of %.2f ms\n",
           1e6 * (fwd_on - fwd_off), 1e6 * fwd_on, 1e6 * fwd_off, 1e6 * (bwd_on - bwd_off), 1e6 * bwd_on,
           1e6 * bwd_off, 1e6 * cost, 100 * *frac, 1e3 * step_med);
    /* whole steps, alternately with and without the checks */
    double on[64], off[64];
    int n = steps < 64 ? steps : 64;
    phase ph = {0};
    for (int i = 0; i < 2 * n && !rc; i++) {
        lm->bias.check_finite = i % 2 == 0;
        double t = now();
        rc = train_step(lm, opt, in, tg, B, T, &ph, err);
        (i % 2 == 0 ? on : off)[i / 2] = now() - t;
    }
    lm->bias.check_finite = 1;
    if (rc)
        return rc;
    double m_on = median(on, n), m_off = median(off, n);
    printf("finite checks, whole steps alternately: median %.3f ms with, %.3f ms without (%+.2f%%, %d steps each; "
           "step-to-step jitter dominates)\n",
           1e3 * m_on, 1e3 * m_off, 100 * (m_on - m_off) / m_off, n);
    return BK_OK;
}

/* The kernels the BLAS picked: the word after "kernels " in bk_blas_describe() (a RESULT field), "?" when
 * it does not say */
static const char *blas_core(void)
{
    static char core[128];
    const char *k = strstr(bk_blas_describe(), "kernels ");
    snprintf(core, sizeof core, "%s", k ? k + 8 : "?");
    core[strcspn(core, " ;,")] = '\0'; /* the kernels' name alone, not the notes after it */
    return core[0] ? core : "?";
}

/* --eval: forward passes only, train = 0 (what `biaskit eval` runs); prints the RESULT line. */
static int evaluate(bk_lm *lm, const int32_t *in, const int32_t *tg, const options *o, const char *name, int threads,
                    bk_error *err)
{
    const int B = o->batch, T = o->length;
    int rc = BK_OK;
    double w0 = now();
    for (int i = 0; i < o->warmup && !rc; i++)
        rc = bk_gpt_forward(&lm->gpt, in, tg, B, T, 0, err);
    const double warm_s = now() - w0;
    double *times = calloc((size_t)o->steps, sizeof *times);
    if (!times) {
        fprintf(stderr, "bench_train: out of memory for %d step times\n", o->steps);
        return 1;
    }
    double best = INFINITY, start = now();
    for (int i = 0; i < o->steps && !rc; i++) {
        double t = now();
        rc = bk_gpt_forward(&lm->gpt, in, tg, B, T, 0, err);
        times[i] = t = now() - t;
        best = t < best ? t : best;
    }
    const double total = now() - start, med = median(times, o->steps < 64 ? o->steps : 64);
    free(times);
    if (rc) {
        fprintf(stderr, "bench_train: eval forward (B %d, T %d): %s\n", B, T, err->message);
        return 1;
    }
    const double pass_s = total / o->steps, tok_s = (double)B * T / pass_s;
    printf("eval:  %.2f ms/forward (median %.2f, fastest %.2f) = %.0f tokens/s over %d forward passes (train = 0) "
           "after %d warm-up (%.2f s); loss %.4f\n",
           1e3 * pass_s, 1e3 * med, 1e3 * best, tok_s, o->steps, o->warmup, warm_s, lm->gpt.loss);
    printf("RESULT name=%s tokens_per_s=%.1f ms_per_step=%.3f attention_frac=na matmul_frac=na other_frac=na "
           "median_ms=%.3f fwd_ms=%.3f bwd_ms=na opt_ms=na threads=%d warmup_s=%.3f loss=%.6f engine=biaskit "
           "mode=eval attention=%s blas=%s core=%s gemm=%s att_gemm=%s\n",
           name, tok_s, 1e3 * pass_s, 1e3 * med, 1e3 * pass_s, threads, warm_s, lm->gpt.loss,
           o->attention ? o->attention : "default", bk_blas_name(), blas_core(), bk_gemm_kernels_name(),
           bk_gemm_attention_name());
    return 0;
}

int main(int argc, char **argv)
{
    bk_blas_restart_with_better_kernels(argv); /* as biaskit does (util/blas.h) */
    char gemm_msg[256];
    if (bk_gemm_check_env(gemm_msg, sizeof gemm_msg) != 0) {
        fprintf(stderr, "bench_train: %s\n", gemm_msg);
        return 2;
    }
    options o;
    if (parse_args(argc, argv, &o))
        return 2;
    if (o.threads > 0) /* the BLAS follows omp_get_max_threads() outside parallel regions (util/blas.h) */
        omp_set_num_threads(o.threads);
    const int threads = omp_get_max_threads();
    char name[256];
    if (o.name)
        snprintf(name, sizeof name, "%s", o.name);
    else
        snprintf(name, sizeof name, "L%d_C%d_H%d_T%d_B%d_%s", o.layers, o.dim, o.heads, o.length, o.batch,
                 o.alibi ? "alibi" : "nope");

    char toml[1024], attention_line[64] = "";
    if (o.attention)
        snprintf(attention_line, sizeof attention_line, "attention = \"%s\"\n", o.attention);
    snprintf(toml, sizeof toml,
             "[model]\nlayers = %d\nheads = %d\ndim = %d\nvocab = %d\n\n"
             "[train]\nlength = %d\nbatch = %d\nsteps = %d\nseed = 1\n\n"
             "[run]\nthreads = %d\n%s%s",
             o.layers, o.heads, o.dim, o.vocab, o.length, o.batch, o.steps + o.warmup, o.threads, attention_line,
             o.alibi ? "\n[[term]]\nplugin = \"alibi\"\n" : "");

    bk_error err = {0};
    bk_lm lm;
    bk_adamw opt = {0};
    int rc;
    if ((rc = bk_lm_open_text(&lm, toml, "bench_train", ".", NULL, 0, &err))) {
        fprintf(stderr, "bench_train: %s\n", err.message);
        return 1;
    }
    if ((rc = bk_lm_register(&lm, &opt, &err)) || (rc = bk_bias_forward(&lm.bias, o.length, &err))) {
        fprintf(stderr, "bench_train: %s\n", err.message);
        bk_adamw_free(&opt);
        bk_lm_close(&lm);
        return 1;
    }

    const int B = o.batch, T = o.length;
    const size_t BT = (size_t)B * T;
    int32_t *in = malloc(BT * sizeof *in), *tg = malloc(BT * sizeof *tg);
    if (!in || !tg) {
        fprintf(stderr, "bench_train: out of memory for tokens\n");
        return 1;
    }
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    for (size_t n = 0; n < BT; n++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        in[n] = (int32_t)(s % (uint64_t)o.vocab);
    }
    for (size_t n = 0; n < BT; n++)
        tg[n] = n + 1 < BT ? in[n + 1] : in[0];

    printf("bench_train: %s | %d layers, dim %d, %d heads (hd %d), vocab %d, T %d, batch %d | %s | %zu params | "
           "%d threads | %s | attention %s | BLAS %s | linear layers: %s | attention products: %s\n",
           name, o.layers, o.dim, o.heads, o.dim / o.heads, o.vocab, T, B, o.alibi ? "ALiBi" : "NoPE",
           lm.gpt.n_params, threads, o.eval ? "eval (forward only)" : "training steps",
           o.attention ? o.attention : "default", bk_blas_describe(), bk_gemm_describe(),
           bk_gemm_attention_describe());

    if (o.eval) {
        rc = evaluate(&lm, in, tg, &o, name, threads, &err);
        free(in), free(tg);
        bk_adamw_free(&opt);
        bk_lm_close(&lm);
        return rc;
    }

    phase ph = {0};
    for (int i = 0; i < o.warmup && !rc; i++)
        rc = train_step(&lm, &opt, in, tg, B, T, &ph, &err);
    memset(&ph, 0, sizeof ph);
    double *times = calloc((size_t)o.steps, sizeof *times);
    if (!times)
        return 1;
    double best = INFINITY, start = now();
    for (int i = 0; i < o.steps && !rc; i++) {
        double t = now();
        rc = train_step(&lm, &opt, in, tg, B, T, &ph, &err);
        times[i] = t = now() - t;
        best = t < best ? t : best;
    }
    double total = now() - start;
    const double step_med = median(times, o.steps < 64 ? o.steps : 64);
    free(times);
    if (rc) {
        fprintf(stderr, "bench_train: %s\n", err.message);
        return 1;
    }
    const double step_s = total / o.steps, tok_s = (double)BT / step_s, n = o.steps;
    printf("step:  %.2f ms/step (median %.2f, fastest %.2f) = %.0f tokens/s over %d steps after %d warm-up; "
           "loss %.4f\n",
           1e3 * step_s, 1e3 * step_med, 1e3 * best, tok_s, o.steps, o.warmup, lm.gpt.loss);
    printf("phases: zero_grad %.2f | forward %.2f | backward %.2f | adamw %.2f | after_step %.2f ms\n",
           1e3 * ph.zero / n, 1e3 * ph.fwd / n, 1e3 * ph.bwd / n, 1e3 * ph.opt / n, 1e3 * ph.after / n);

    double frac[CAT_COUNT] = {0}, cat[CAT_COUNT] = {0};
    if (o.breakdown) {
        replica r;
        if (replica_init(&r, &lm.gpt, B, T)) {
            fprintf(stderr, "bench_train: out of memory for the instrumented pass (%.1f GiB)\n",
                    2.0 * r.acts_size * sizeof(float) / (1 << 30));
            return 1;
        }
        /* one warm-up pass (pages, caches), then REPS passes; each category's median over the passes
         * (robust to another process taking a core for a while) */
        timers tm, rep[REPS];
        memset(&tm, 0, sizeof tm);
        memset(rep, 0, sizeof rep);
        rc = replica_pass(&r, in, tg, &tm, &err);
        double pass[REPS];
        for (int i = 0; i < REPS && !rc; i++) {
            pass[i] = now();
            rc = replica_pass(&r, in, tg, &rep[i], &err);
            pass[i] = now() - pass[i];
        }
        if (rc) {
            fprintf(stderr, "bench_train: instrumented pass: %s\n", err.message);
            return 1;
        }
        for (int d = 0; d < 2; d++)
            for (int c = 0; c < CAT_COUNT; c++) {
                double v[REPS];
                for (int i = 0; i < REPS; i++)
                    v[i] = rep[i].t[d][c];
                tm.t[d][c] = median(v, REPS);
            }
        const double pass_med = median(pass, REPS);
        double sum = 0;
        for (int c = 0; c < CAT_COUNT; c++) {
            cat[c] = tm.t[0][c] + tm.t[1][c];
            frac[c] = cat[c] / step_med;
            sum += cat[c];
        }
        printf("breakdown: kernels timed in an instrumented pass (gpt.c's calls, same shapes; median of %d passes\n"
               "           %.2f ms), as fractions of the median step of %.2f ms:\n",
               REPS, 1e3 * pass_med, 1e3 * step_med);
        printf("  %-14s %9s %9s %9s %7s\n", "", "fwd ms", "bwd ms", "total", "%step");
        for (int c = 0; c < CAT_COUNT; c++)
            printf("  %-14s %9.2f %9.2f %9.2f %6.1f%%\n", cat_names[c], 1e3 * tm.t[0][c], 1e3 * tm.t[1][c],
                   1e3 * cat[c], 100 * frac[c]);
        printf("  %-14s %9s %9s %9.2f %6.1f%%  (optimizer, bias tables, zero_grad, timer gaps)\n", "rest", "", "",
               1e3 * (step_med - sum), 100 * (1.0 - sum / step_med));
        printf("  (memset dacts: bk_gpt_backward zeroes %.0f of the %.0f MiB of activation gradients every step)\n",
               r.zeroed_size * 4.0 / (1 << 20), r.acts_size * 4.0 / (1 << 20));
        replica_free(&r);
    }
    double checks_frac = -1;
    if (o.finite_checks &&
        (rc = measure_finite_checks(&lm, &opt, in, tg, B, T, o.steps, step_med, &checks_frac, &err))) {
        fprintf(stderr, "bench_train: finite checks: %s\n", err.message);
        return 1;
    }
    if (o.finite_checks) /* RESULT stays the last line */
        printf("FINITE_CHECKS name=%s frac=%.7f\n", name, checks_frac);
    double other = 0;
    for (int c = CAT_LAYERNORM; c < CAT_COUNT; c++)
        other += frac[c];
    const double step_gflop = model_flops(o.layers, o.dim, o.vocab, T, B) / 1e9;
    const double model_gflops = step_gflop / step_s, peak = sgemm_gflops();
    int lanes = 0;
    const double fma_peak = fma_peak_gflops(threads, &lanes);
    printf("FLOP rate: model %.1f GFLOP/s (matmuls and attention products, 3 x forward: %.2f GFLOP per step) = "
           "%.0f%% of this machine's SGEMM rate, %.1f GFLOP/s (bk_sgemm 2048^3, %d threads), and %.0f%% of its FMA "
           "peak, %.1f GFLOP/s (%d-lane FMA chains in registers, %d threads)\n",
           model_gflops, step_gflop, 100.0 * model_gflops / peak, peak, threads, 100.0 * model_gflops / fma_peak,
           fma_peak, lanes, threads);
    printf("RESULT name=%s tokens_per_s=%.1f ms_per_step=%.3f attention_frac=%.4f matmul_frac=%.4f other_frac=%.4f "
           "layernorm_frac=%.4f gelu_frac=%.4f residual_frac=%.4f xent_frac=%.4f embedding_frac=%.4f "
           "memset_frac=%.4f median_ms=%.3f fwd_ms=%.3f bwd_ms=%.3f opt_ms=%.3f threads=%d model_gflops=%.2f "
           "sgemm_gflops=%.2f mfu_frac=%.4f step_gflop=%.3f fma_peak_gflops=%.2f engine=biaskit mode=train "
           "attention=%s blas=%s core=%s gemm=%s att_gemm=%s\n",
           name, tok_s, 1e3 * step_s, frac[CAT_ATTN], frac[CAT_MATMUL] + frac[CAT_HEAD], other,
           frac[CAT_LAYERNORM], frac[CAT_GELU], frac[CAT_RESIDUAL], frac[CAT_XENT], frac[CAT_ENCODER],
           frac[CAT_MEMSET], 1e3 * step_med, 1e3 * ph.fwd / n, 1e3 * ph.bwd / n,
           1e3 * (ph.opt + ph.after + ph.zero) / n, threads, model_gflops, peak, model_gflops / peak, step_gflop,
           fma_peak, o.attention ? o.attention : "default", bk_blas_name(), blas_core(), bk_gemm_kernels_name(),
           bk_gemm_attention_name());
    free(in), free(tg);
    bk_adamw_free(&opt);
    bk_lm_close(&lm);
    return 0;
}
