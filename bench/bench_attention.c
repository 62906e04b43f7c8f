/* CPU attention benchmark: times the causal attention of core/cpu/attention.h at one shape, forward
 * (and backward, with the table gradient), and prints a checksum of the outputs so that two builds can
 * be seen to compute the same thing (or by how much they differ).
 *
 *   bench_attention [--batch 8] [--length 256] [--dim 256] [--heads 8] [--reps 20] [--warmup 1]
 *                   [--threads 2] [--attention materialized|fused] [--table alibi|kerple|none]
 *                   [--mode fwdbwd|fwd] [--segment] [--nobias] [--max-gib G] [--name NAME]
 *
 *   --attention materialized  (default) bk_attention_forward / bk_attention_backward: the blocked
 *                             kernel; with --mode fwdbwd the forward saves the B x H x T x T
 *                             probabilities backward reads (what training with attention =
 *                             "materialized" does)
 *               fused         bk_attention_flash_forward / bk_attention_flash_backward: the flash-style
 *                             kernel, saving B x H x T floats (the log-sum-exp) for backward
 *   --table alibi   (default) the token table -slope_h * d, slope_h = 2^(-8 (h+1) / H) (ALiBi's slopes
 *                             for a power-of-two H), fixed; its table gradient is still computed
 *           kerple            KERPLE-log, -r1_h log(1 + r2_h d) with learnable r1_h = 1 + h/2,
 *                             r2_h = 2^-(h+1): the forward computes the table on the host from r1, r2
 *                             (in the timed call), the backward the table gradient and from it dr1, dr2
 *           none              no table (also --nobias)
 *   --mode fwdbwd   (default) forward then backward, each timed
 *          fwd                forward only, nothing saved (probs / lse NULL): what evaluation runs
 *   --segment adds a second stream whose positions advance every 4 tokens (a segment table, with its
 *   own gradient; materialized only).
 *   --max-gib G: refuse (exit status 3, before allocating) a run whose buffers exceed G GiB; default
 *   three quarters of the physical memory. Materialized fwdbwd at B 1, H 4, T 65536 saves 64 GiB of
 *   probabilities, so it is refused on most machines.
 *
 * Inputs are fixed pseudo-random values (qkv, dout uniform in [-1, 1)). After `warmup` untimed calls
 * of each, `reps` calls of each are timed with clock_gettime(CLOCK_MONOTONIC); the minimum and the
 * median are printed. GFLOP/s counts the attention products (QK^T and PV forward, the four backward
 * products) over the causal half, B H T^2 hd multiply-adds per product.
 *
 * Exit status: 0; 1 when an attention call fails (the kernel's message is printed) or memory runs out;
 * 2 for bad arguments; 3 when the run would need more than --max-gib. Last line, machine-readable:
 *   RESULT name=NAME attention=... table=... mode=... B=... T=... C=... H=... threads=...
 *          fwd_ms_min=... fwd_ms_median=... bwd_ms_min=... bwd_ms_median=... ms_min=... checksum=...
 *          blas=... core=... kernel=...
 * ms_min: the fastest forward (fwd) or forward + backward of one repetition (fwdbwd); bwd_* are "na"
 * with --mode fwd. blas / core: the BLAS library and the kernels it picked (bk_blas_name, bk_blas_describe);
 * kernel: the attention functions called. */
#define _POSIX_C_SOURCE 200809L
#include "cpu/attention.h"
#include "util/blas.h"
#include "util/error.h"

#include "bench_util.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double checksum(const float *x, size_t n)
{
    double sum = 0.0;
    for (size_t k = 0; k < n; k++)
        sum += (double)x[k] * (double)((k % 7) + 1);
    return sum;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: bench_attention [--batch B] [--length T] [--dim C] [--heads H] [--reps N] [--warmup N]\n"
            "                       [--threads N] [--attention materialized|fused] [--table alibi|kerple|none]\n"
            "                       [--mode fwdbwd|fwd] [--segment] [--nobias] [--max-gib G] [--name NAME]\n");
    return 2;
}

/* index of `s` in the NULL-terminated `choices`, or -1 (message printed) */
static int choose(const char *flag, const char *s, const char *const *choices)
{
    for (int k = 0; choices[k]; k++)
        if (!strcmp(s, choices[k]))
            return k;
    fprintf(stderr, "bench_attention: %s expects one of", flag);
    for (int k = 0; choices[k]; k++)
        fprintf(stderr, " %s%s", choices[k], choices[k + 1] ? "," : "");
    fprintf(stderr, "; got '%s'\n", s);
    return -1;
}

enum { ATT_MATERIALIZED, ATT_FUSED };
enum { TAB_ALIBI, TAB_KERPLE, TAB_NONE };
enum { MODE_FWDBWD, MODE_FWD };
static const char *const att_names[] = {"materialized", "fused", NULL};
static const char *const tab_names[] = {"alibi", "kerple", "none", NULL};
static const char *const mode_names[] = {"fwdbwd", "fwd", NULL};

/* KERPLE-log's parameters of head h (the same in bench/long_context.py) */
static float kerple_r1(int h) { return 1.0f + 0.5f * (float)h; }
static float kerple_r2(int h) { return ldexpf(1.0f, -(h + 1)); }

/* table[h][d] = -r1_h log(1 + r2_h d), d < T */
static void kerple_table(float *table, const float *r1, const float *r2, int H, int T)
{
#pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++)
        for (int d = 0; d < T; d++)
            table[(size_t)h * T + d] = -r1[h] * log1pf(r2[h] * (float)d);
}

/* dr1_h += sum_d G[h][d] (-log(1 + r2 d)), dr2_h += sum_d G[h][d] (-r1 d / (1 + r2 d)), in double */
static void kerple_grad(float *dr1, float *dr2, const float *dtable, const float *r1, const float *r2, int H, int T)
{
#pragma omp parallel for schedule(static)
    for (int h = 0; h < H; h++) {
        double g1 = 0.0, g2 = 0.0;
        for (int d = 0; d < T; d++) {
            const double g = dtable[(size_t)h * T + d], x = (double)d;
            g1 -= g * log1p((double)r2[h] * x);
            g2 -= g * (double)r1[h] * x / (1.0 + (double)r2[h] * x);
        }
        dr1[h] += (float)g1, dr2[h] += (float)g2;
    }
}

int main(int argc, char **argv)
{
    int B = 8, T = 256, C = 256, H = 8, reps = 20, warmup = 1, threads = 2, segment = 0;
    int att = ATT_MATERIALIZED, tab = TAB_ALIBI, mode = MODE_FWDBWD;
    double max_gib = -1.0;
    const char *name = "attention";
    for (int k = 1; k < argc; k++) {
        const char *a = argv[k];
        int *target = !strcmp(a, "--batch")     ? &B
                      : !strcmp(a, "--length")  ? &T
                      : !strcmp(a, "--dim")     ? &C
                      : !strcmp(a, "--heads")   ? &H
                      : !strcmp(a, "--reps")    ? &reps
                      : !strcmp(a, "--warmup")  ? &warmup
                      : !strcmp(a, "--threads") ? &threads
                                                : NULL;
        int *choice = !strcmp(a, "--attention") ? &att : !strcmp(a, "--table") ? &tab : !strcmp(a, "--mode") ? &mode : NULL;
        if (target) {
            if (k + 1 >= argc)
                return usage();
            char *end;
            long v = strtol(argv[++k], &end, 10);
            const long lo = target == &warmup ? 0 : 1;
            if (*end || v < lo || v > 1 << 20) {
                fprintf(stderr, "bench_attention: %s needs an integer from %ld to %d, got '%s'\n", a, lo, 1 << 20,
                        argv[k]);
                return 2;
            }
            *target = (int)v;
        } else if (choice) {
            if (k + 1 >= argc)
                return usage();
            const char *const *names = choice == &att ? att_names : choice == &tab ? tab_names : mode_names;
            if ((*choice = choose(a, argv[++k], names)) < 0)
                return 2;
        } else if (!strcmp(a, "--max-gib") && k + 1 < argc) {
            char *end;
            max_gib = strtod(argv[++k], &end);
            if (*end || !(max_gib > 0.0)) {
                fprintf(stderr, "bench_attention: --max-gib needs a positive number of GiB, got '%s'\n", argv[k]);
                return 2;
            }
        } else if (!strcmp(a, "--segment"))
            segment = 1;
        else if (!strcmp(a, "--nobias"))
            tab = TAB_NONE;
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
    if (segment && (tab == TAB_NONE || att == ATT_FUSED)) {
        fprintf(stderr, "bench_attention: --segment needs a table (--table alibi or kerple) and --attention "
                        "materialized\n");
        return 2;
    }
    if (max_gib < 0.0) { /* three quarters of the physical memory */
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        max_gib = pages > 0 && page > 0 ? 0.75 * (double)pages * (double)page / (1 << 30) : 16.0;
    }
    omp_set_num_threads(threads);

    const int fwd_only = mode == MODE_FWD, fused = att == ATT_FUSED;
    const int n_tables = tab == TAB_NONE ? 0 : segment ? 2 : 1;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    /* what the forward saves for backward: probabilities (materialized) or the log-sum-exp (fused) */
    const size_t nsaved = fwd_only ? 0 : fused ? (size_t)B * H * T : (size_t)B * H * T * T;
    const double need_gib =
        ((fwd_only ? 1.0 : 2.0) * (double)nqkv + (fwd_only ? 1.0 : 2.0) * (double)nout + (double)nsaved +
         2.0 * n_tables * (double)H * T) * sizeof(float) / (1 << 30);
    if (need_gib > max_gib) {
        fprintf(stderr,
                "bench_attention: too much memory: --attention %s --mode %s at B %d T %d C %d H %d needs %.1f GiB "
                "(%s), more than --max-gib %.1f; run --attention fused or --mode fwd, or a shorter --length\n",
                att_names[att], mode_names[mode], B, T, C, H, need_gib,
                !fwd_only && !fused ? "the saved B*H*T*T probabilities" : "q, k, v and the outputs", max_gib);
        return 3;
    }

    float *qkv = malloc(nqkv * sizeof *qkv), *dqkv = fwd_only ? NULL : malloc(nqkv * sizeof *dqkv);
    float *out = malloc(nout * sizeof *out), *dout = fwd_only ? NULL : malloc(nout * sizeof *dout);
    float *saved = nsaved ? malloc(nsaved * sizeof *saved) : NULL;
    int32_t *segpos = segment ? malloc((size_t)B * T * sizeof *segpos) : NULL;
    double *tf = malloc((size_t)reps * sizeof *tf), *tb = malloc((size_t)reps * sizeof *tb);
    double *tt = malloc((size_t)reps * sizeof *tt);
    float *table[BK_STREAM_COUNT] = {NULL}, *dtable[BK_STREAM_COUNT] = {NULL};
    float r1[64], r2[64], dr1[64] = {0}, dr2[64] = {0};
    if (tab == TAB_KERPLE && H > 64) {
        fprintf(stderr, "bench_attention: --table kerple takes at most 64 heads, got --heads %d\n", H);
        return 2;
    }
    int oom = !qkv || !out || !tf || !tb || !tt || (!fwd_only && (!dqkv || !dout)) || (nsaved && !saved) ||
              (segment && !segpos);
    for (int s = 0; s < n_tables; s++) {
        table[s] = malloc((size_t)H * T * sizeof(float));
        dtable[s] = fwd_only ? NULL : calloc((size_t)H * T, sizeof(float));
        oom |= !table[s] || (!fwd_only && !dtable[s]);
    }
    if (oom) {
        fprintf(stderr, "bench_attention: out of memory for B %d T %d C %d H %d (%.1f GiB)\n", B, T, C, H, need_gib);
        return 1;
    }
    fill(qkv, nqkv, 1);
    if (dout)
        fill(dout, nout, 2);
    for (int h = 0; h < H && h < 64; h++)
        r1[h] = kerple_r1(h), r2[h] = kerple_r2(h);
    for (int s = 0; s < n_tables; s++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < T; d++)
                table[s][(size_t)h * T + d] =
                    tab == TAB_KERPLE ? -r1[h] * log1pf(r2[h] * (float)d) / (float)(s + 1)
                                      : -ldexpf(1.0f, -(h + 1) * 8 / H) * (float)d / (float)(s + 1);
    for (int b = 0; segment && b < B; b++)
        for (int t = 0; t < T; t++)
            segpos[(size_t)b * T + t] = t / 4;
    bk_attention_bias bias;
    memset(&bias, 0, sizeof bias);
    bias.distances = T;
    for (int s = 0; s < n_tables; s++)
        bias.table[s] = table[s];
    bias.positions[1] = segpos;
    const bk_attention_bias *use = n_tables ? &bias : NULL;
    const char *kernel = fused ? (fwd_only ? "bk_attention_flash_forward"
                                           : "bk_attention_flash_forward+bk_attention_flash_backward")
                               : (fwd_only ? "bk_attention_forward(probs=NULL)"
                                           : "bk_attention_forward(probs)+bk_attention_backward");

    bk_error err;
    bk_error_clear(&err);
    for (int r = -warmup; r < reps; r++) { /* r < 0: the warm-up */
        double t0 = now();
        if (tab == TAB_KERPLE) /* learnable: the table follows r1, r2 at every call */
            kerple_table(table[0], r1, r2, H, T);
        const int rc = fused ? bk_attention_flash_forward(out, saved, qkv, use, B, T, C, H, &err)
                             : bk_attention_forward(out, saved, qkv, use, B, T, C, H, &err);
        if (rc != BK_OK)
            goto fail;
        double t1 = now(), t2 = t1, t3 = t1;
        if (!fwd_only) {
            memset(dqkv, 0, nqkv * sizeof *dqkv);
            for (int s = 0; s < n_tables; s++)
                memset(dtable[s], 0, (size_t)H * T * sizeof(float));
            t2 = now();
            const int rcb =
                fused ? bk_attention_flash_backward(dqkv, dtable, dout, qkv, out, saved, use, B, T, C, H, &err)
                      : bk_attention_backward(dqkv, dtable, dout, qkv, saved, use, B, T, C, H, &err);
            if (rcb != BK_OK)
                goto fail;
            if (tab == TAB_KERPLE) {
                memset(dr1, 0, sizeof dr1), memset(dr2, 0, sizeof dr2);
                kerple_grad(dr1, dr2, dtable[0], r1, r2, H, T);
            }
            t3 = now();
        }
        if (r >= 0)
            tf[r] = (t1 - t0) * 1e3, tb[r] = (t3 - t2) * 1e3, tt[r] = tf[r] + tb[r];
    }
    double sum = checksum(out, nout);
    if (!fwd_only) {
        sum += checksum(dqkv, nqkv);
        for (int s = 0; s < n_tables; s++)
            sum += checksum(dtable[s], (size_t)H * T);
        if (tab == TAB_KERPLE)
            sum += checksum(dr1, (size_t)H) + checksum(dr2, (size_t)H);
    }
    double fmin = tf[0], bmin = tb[0], tmin = tt[0];
    for (int r = 1; r < reps; r++) {
        fmin = tf[r] < fmin ? tf[r] : fmin;
        bmin = tb[r] < bmin ? tb[r] : bmin;
        tmin = tt[r] < tmin ? tt[r] : tmin;
    }
    const double fmed = median_sorted(tf, reps), bmed = median_sorted(tb, reps);
    const double product = 2.0 * B * H * (double)T * T * (C / H) / 2.0; /* FLOPs of one product, causal half */
    /* the kernels the BLAS picked: the word after "kernels " in its description */
    char core[128];
    const char *kernels = strstr(bk_blas_describe(), "kernels ");
    snprintf(core, sizeof core, "%s", kernels ? kernels + 8 : "?");
    core[strcspn(core, " ;,")] = '\0'; /* the kernels' name alone, not the notes after it */
    printf("bench_attention: B %d T %d C %d H %d (hd %d), %s attention, %s, %s, %d threads, %d reps after %d "
           "warm-up; %s; BLAS %s\n",
           B, T, C, H, C / H, att_names[att],
           tab == TAB_NONE ? "no table"
           : segment       ? "token + segment tables"
           : tab == TAB_KERPLE ? "KERPLE-log table (learnable r1, r2)"
                               : "ALiBi token table",
           fwd_only ? "forward only" : "forward + backward", threads, reps, warmup, kernel, bk_blas_describe());
    printf("forward  %10.3f ms min, %10.3f median  (%.1f GFLOP/s at the min)\n", fmin, fmed,
           2 * product / fmin / 1e6);
    char bmin_s[32] = "na", bmed_s[32] = "na";
    if (!fwd_only) {
        printf("backward %10.3f ms min, %10.3f median  (%.1f GFLOP/s at the min)\n", bmin, bmed,
               4 * product / bmin / 1e6);
        snprintf(bmin_s, sizeof bmin_s, "%.3f", bmin);
        snprintf(bmed_s, sizeof bmed_s, "%.3f", bmed);
    }
    printf("RESULT name=%s attention=%s table=%s mode=%s B=%d T=%d C=%d H=%d threads=%d fwd_ms_min=%.3f "
           "fwd_ms_median=%.3f bwd_ms_min=%s bwd_ms_median=%s ms_min=%.3f checksum=%.9e blas=%s core=%s "
           "kernel=%s\n",
           name, att_names[att], segment ? "token+segment" : tab_names[tab], mode_names[mode], B, T, C, H, threads,
           fmin, fmed, bmin_s, bmed_s, tmin, sum, bk_blas_name(), core[0] ? core : "?", kernel);
    return 0;
fail:
    fprintf(stderr, "bench_attention: %s attention, %s: %s\n", att_names[att], mode_names[mode], err.message);
    return 1;
}
