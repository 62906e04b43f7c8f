/* The fused attention's second generation (core/gpu/kernels_flash2.h, kernels_flash2_bwd.h, ops_flash2.h) on
 * the emulated backend (the device code compiled as C, a warp's lanes run one by one over per-lane register
 * arrays, blocks on OpenMP threads):
 *
 *  - program_matches_first_generation: each instantiation (head size x key tile: 16 x 64, 32 x 64, 64 x 64,
 *    64 x 32, 128 x 32, 128 x 16), launched directly, gives the same bits as the first generation's
 *    k_flash_fwd at the same tile, output and row log-sum-exp, for T in {1, 17, 64, 65, 200} with an
 *    ALiBi-like token table, a segment table with positions (repeats and gaps), a window with sinks (the
 *    tile skipping), a logit scale (zeros and negatives among it) and FIRE's coordinate table, alone and
 *    together; then again with the phases' threads and the warps' lanes in reverse order (a lane reading
 *    what another writes in the same step would show);
 *  - dispatch_selects_second_generation: be->attention_forward with bk_dev.flash_gen = 2 (the switch
 *    ops_flash.h reads) against flash_gen = 0 (the first generation, the default), head sizes 64 and 128,
 *    the five lengths, tables, positions, mask and logit scale: the same bits, with matmul fp32 and tf32
 *    (whose fused attention is fp32 too); and against the CPU's attention (cpu/attention.c) within the
 *    first generation's fp32 tolerance, 1e-6 + 1e-5 |x|: the CPU normalises whole rows and multiplies P V
 *    by sgemm, so no tiled online softmax can give its bits (the share of equal bits is printed);
 *  - cuda_dispatch: the same on the CUDA backend when a GPU answers (skipped otherwise), within the
 *    tolerance, printing how many outputs have the first generation's bits (see check_dispatch);
 *  - order_matters: a scalar host model of one row (key tiles in the first generation's order, its
 *    online-softmax step bk_online_softmax_row, PV keys ascending) gives the programs' bits for every row,
 *    and the same model with the key tiles walked from the diagonal down (FlashAttention-2's order)
 *    does not: the bit comparisons above can fail when an order changes;
 *  - backward_matches_first_generation: be->attention_backward with flash_gen 2 (the one-pass backward,
 *    kernels_flash2_bwd.h) against 0, fp32 and tf32: dqkv (added into random start values), the token
 *    and segment streams' table gradients, dgrid, dphi, drscale and dscale bit for bit, head sizes 16,
 *    64, 128, 160 (the plan's tiles 64, 32, 32, 16), the five lengths, each term alone and all together,
 *    and again with the phases' threads in reverse order; the second generation visits each tile pair
 *    once where the first visits it twice. Blocks run on the OpenMP threads (one per core), so the
 *    turns between blocks are exercised where there are two or more: with the wait for a turn removed,
 *    the comparison fails on two threads (tried);
 *  - a content position (cpos; dcpos bit for bit, and checked to have moved from its start) alone, with the
 *    mask and logit scale, and with everything: in the forward programs, the dispatch (at the odd lengths,
 *    against the CPU too) and the backward. */
#include "test_util.h"
#include "test_random.h"

#include "cpu/attention.h"
#include "cuda/device.h"
#include "gpu/dev.h"
#include "gpu/kernels_flash.h"
#include "gpu/kernels_flash2.h"
#include "model/backend.h"

#include <math.h>
#include <stdlib.h>

enum { F_TOKEN = 1, F_SEGMENT = 2, F_MASK = 4, F_SCALE = 8, F_GRID = 16, F_CPOS = 32 };

typedef struct problem {
    int B, T, C, H, flags, window, sinks, points, D;
    float *qkv, *table[BK_STREAM_COUNT], *scale, *grid, *phi, *rscale, *cpos;
    int32_t *pos[BK_STREAM_COUNT], span[BK_STREAM_COUNT];
} problem;

static problem make_problem(int B, int T, int hd, int H, int flags, uint64_t seed)
{
    problem pb;
    memset(&pb, 0, sizeof pb);
    rng_state = seed;
    pb.B = B, pb.T = T, pb.C = hd * H, pb.H = H, pb.flags = flags;
    pb.qkv = random_floats((size_t)B * T * 3 * pb.C, 1.0);
    if (flags & F_SEGMENT) { /* positions from 0 in steps of 0, 1 or 3 */
        pb.pos[1] = malloc((size_t)B * T * sizeof(int32_t));
        assert_non_null(pb.pos[1]);
        pb.span[1] = 1;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const double u = 0.5 * (uniform() + 1.0);
                pb.pos[1][b * T + t] = t == 0 ? 0 : pb.pos[1][b * T + t - 1] + (u < 0.6 ? 0 : u < 0.7 ? 3 : 1);
                const int32_t span = pb.pos[1][b * T + t] + 1;
                pb.span[1] = span > pb.span[1] ? span : pb.span[1];
            }
    }
    pb.D = (T > pb.span[1] ? T : pb.span[1]) + 5;
    if (flags & F_TOKEN) { /* ALiBi: -m_h d, m_h = 2^(-8 (h + 1) / H) */
        pb.table[0] = malloc((size_t)H * pb.D * sizeof(float));
        assert_non_null(pb.table[0]);
        for (int h = 0; h < H; h++)
            for (int d = 0; d < pb.D; d++)
                pb.table[0][h * pb.D + d] = (float)(-pow(2.0, -8.0 * (h + 1) / H) * d);
        pb.span[0] = T;
    }
    if (flags & F_SEGMENT)
        pb.table[1] = random_floats((size_t)H * pb.D, 1.0);
    if (flags & F_MASK)
        pb.window = 23, pb.sinks = 3;
    if (flags & F_SCALE) {
        pb.scale = random_floats((size_t)H * T, 1.5);
        for (int k = 0; k < H * T; k += 5)
            pb.scale[k] = 0.0f;
    }
    if (flags & F_GRID) { /* FIRE's phi, rscale cut to exact floats (tests/test_backend_attention_v2.c) */
        pb.points = 33;
        pb.grid = random_floats((size_t)H * pb.points, 1.0);
        pb.phi = malloc((size_t)pb.D * sizeof(float));
        pb.rscale = malloc((size_t)T * sizeof(float));
        assert_non_null(pb.phi);
        assert_non_null(pb.rscale);
        const double c = 0.37, L = T / 3 > 1 ? T / 3 : 1;
        for (int d = 0; d < pb.D; d++)
            pb.phi[d] = (float)(floor(log(c * d + 1.0) * 1024.0) / 1024.0);
        for (int i = 0; i < T; i++)
            pb.rscale[i] = (float)(floor(256.0 / log(c * (i > L ? i : L) + 1.0)) / 256.0);
    }
    if (flags & F_CPOS) { /* a content position per (b, h): from a random start, steps in [0, 0.8) */
        pb.cpos = malloc((size_t)B * H * T * sizeof(float));
        assert_non_null(pb.cpos);
        for (int bh = 0; bh < B * H; bh++)
            for (int t = 0; t < T; t++)
                pb.cpos[bh * T + t] =
                    t == 0 ? (float)uniform() : pb.cpos[bh * T + t - 1] + 0.4f * (float)(uniform() + 1.0);
    }
    return pb;
}

static void free_problem(problem *pb)
{
    free(pb->qkv), free(pb->scale), free(pb->grid), free(pb->phi), free(pb->rscale), free(pb->cpos);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        free(pb->table[s]), free(pb->pos[s]);
}

static bk_attention_bias bias_of(const problem *pb)
{
    bk_attention_bias bias;
    memset(&bias, 0, sizeof bias);
    bias.distances = pb->D;
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        bias.table[s] = pb->table[s], bias.positions[s] = pb->pos[s], bias.span[s] = pb->span[s];
    bias.grid = pb->grid, bias.phi = pb->phi, bias.rscale = pb->rscale, bias.points = pb->points;
    bias.window = pb->window, bias.sinks = pb->sinks, bias.scale = pb->scale;
    bias.cpos = pb->cpos;
    return bias;
}

/* The programs' arguments for host (= emulated device) memory, as ops_flash.h's dev_flash_args_of makes
 * them. */
static k_flash_args args_of(const problem *pb, int tile, float *out, float *lse)
{
    k_flash_args a;
    memset(&a, 0, sizeof a);
    a.qkv = pb->qkv, a.out = out, a.lse = lse;
    a.terms.distances = pb->D;
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        a.terms.table[s] = pb->table[s], a.terms.positions[s] = pb->table[s] ? pb->pos[s] : NULL;
    a.terms.grid = pb->grid, a.terms.phi = pb->phi, a.terms.rscale = pb->rscale, a.terms.points = pb->points;
    a.terms.window = pb->window, a.terms.sinks = pb->sinks, a.terms.lscale = pb->scale, a.terms.cpos = pb->cpos;
    a.B = pb->B, a.T = pb->T, a.C = pb->C, a.H = pb->H, a.tile = tile;
    a.scale = 1.0f / sqrtf((float)(pb->C / pb->H));
    return a;
}

typedef struct outputs {
    float *out, *lse;
} outputs;

static outputs outputs_new(const problem *pb)
{
    outputs o;
    o.out = malloc((size_t)pb->B * pb->T * pb->C * sizeof(float));
    o.lse = malloc((size_t)pb->B * pb->H * pb->T * sizeof(float));
    assert_non_null(o.out);
    assert_non_null(o.lse);
    for (size_t k = 0; k < (size_t)pb->B * pb->T * pb->C; k++)
        o.out[k] = NAN; /* every element must be written */
    for (size_t k = 0; k < (size_t)pb->B * pb->H * pb->T; k++)
        o.lse[k] = NAN;
    return o;
}

static void outputs_free(outputs *o)
{
    free(o->out), free(o->lse);
}

static void expect_same_bits(const char *what, const char *label, const float *a, const float *b, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (memcmp(&a[k], &b[k], sizeof *a))
            fail_msg("%s: %s differs at %zu: %.9g vs %.9g", label, what, k, (double)a[k], (double)b[k]);
}

/* The first generation at `tile`. */
static outputs run_gen1(const problem *pb, int tile)
{
    outputs o = outputs_new(pb);
    k_flash_args a = args_of(pb, tile, o.out, o.lse);
    const int hd = pb->C / pb->H;
    const size_t bytes = (size_t)k_flash_layout(K_FLASH_FWD, 0, tile, hd, 0).total * sizeof(float);
    bk_error err = {0};
    if (bk_emulated_launch_cta((int64_t)pb->B * pb->H * k_flash_tiles(&a), k_flash_fwd, &a, bytes, &err) != BK_OK)
        fail_msg("k_flash_fwd: %s", err.message);
    return o;
}

/* The second generation's instantiation for (head size, tile). */
static outputs run_gen2(const problem *pb, int tile)
{
    const int hd = pb->C / pb->H;
    bk_dev_cta_program f = NULL;
    int mf = 0;
    if (hd == 16 && tile == 64)
        f = k_flash2_fwd_16_64, mf = 2;
    else if (hd == 32 && tile == 64)
        f = k_flash2_fwd_32_64, mf = 2;
    else if (hd == 64 && tile == 64)
        f = k_flash2_fwd_64_64, mf = 2;
    else if (hd == 64 && tile == 32)
        f = k_flash2_fwd_64_32, mf = 2;
    else if (hd == 128 && tile == 32)
        f = k_flash2_fwd_128_32, mf = 1;
    else if (hd == 128 && tile == 16)
        f = k_flash2_fwd_128_16, mf = 1;
    else
        fail_msg("no second-generation program for head size %d, tile %d", hd, tile);
    outputs o = outputs_new(pb);
    k_flash_args a = args_of(pb, tile, o.out, o.lse);
    const k_flash2_smem L = k_flash2_layout(hd, tile, mf);
    bk_error err = {0};
    if (bk_emulated_launch_cta((int64_t)pb->B * pb->H * ((pb->T + L.br - 1) / L.br), f, &a,
                               (size_t)L.total * sizeof(float), &err) != BK_OK)
        fail_msg("k_flash2_fwd (head size %d, tile %d): %s", hd, tile, err.message);
    return o;
}

static void check_same(const problem *pb, int tile, const char *label)
{
    outputs g1 = run_gen1(pb, tile), g2 = run_gen2(pb, tile);
    expect_same_bits("out", label, g2.out, g1.out, (size_t)pb->B * pb->T * pb->C);
    expect_same_bits("lse", label, g2.lse, g1.lse, (size_t)pb->B * pb->H * pb->T);
    /* again with every phase's threads, warps and lanes in reverse order */
    bk_emulated_thread_order = 1;
    outputs r2 = run_gen2(pb, tile);
    bk_emulated_thread_order = 0;
    expect_same_bits("out (reverse lane order)", label, r2.out, g2.out, (size_t)pb->B * pb->T * pb->C);
    expect_same_bits("lse (reverse lane order)", label, r2.lse, g2.lse, (size_t)pb->B * pb->H * pb->T);
    outputs_free(&g1), outputs_free(&g2), outputs_free(&r2);
}

static void program_matches_first_generation(void **state)
{
    (void)state;
    static const int shapes[][2] = {{64, 32}, {128, 32}, {16, 64}, {32, 64}, {64, 64}, {128, 16}};
    static const int lengths[] = {1, 17, 64, 65, 200};
    static const int flag_sets[] = {F_TOKEN, F_TOKEN | F_SEGMENT, F_TOKEN | F_MASK | F_SCALE,
                                    F_TOKEN | F_SEGMENT | F_MASK | F_SCALE | F_GRID, F_CPOS | F_MASK,
                                    F_TOKEN | F_SEGMENT | F_MASK | F_SCALE | F_GRID | F_CPOS};
    uint64_t seed = 0x5eed2;
    int cases = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t t = 0; t < sizeof lengths / sizeof lengths[0]; t++)
            for (size_t f = 0; f < sizeof flag_sets / sizeof flag_sets[0]; f++) {
                const int hd = shapes[s][0], tile = shapes[s][1], T = lengths[t];
                /* the small heads only on the full sets of terms: they add instantiations, not paths */
                if (hd < 64 && (flag_sets[f] & ~F_CPOS) != (F_TOKEN | F_SEGMENT | F_MASK | F_SCALE | F_GRID))
                    continue;
                problem pb = make_problem(2, T, hd, 2, flag_sets[f], seed++);
                char label[128];
                snprintf(label, sizeof label, "head size %d tile %d T %d terms %#x", hd, tile, T, flag_sets[f]);
                check_same(&pb, tile, label);
                free_problem(&pb);
                cases++;
            }
    print_message("second generation = first generation, bit for bit: %d cases\n", cases);
}

/* ---- through the backend ------------------------------------------------------------------------- */

/* A backend copy of `bytes` at host (NULL for NULL), remembered in mem[*n] to release. */
static void *dev_copy(bk_backend *be, void **mem, int *n, const void *host, size_t bytes)
{
    if (!host)
        return NULL;
    bk_error err = {0};
    void *p = NULL;
    if (be->alloc(be, &p, bytes, &err) != BK_OK || be->upload(be, p, host, bytes, &err) != BK_OK)
        fail_msg("%s: copy of %zu bytes to the backend: %s", be->name, bytes, err.message);
    mem[(*n)++] = p;
    return p;
}

/* be->attention_forward of the problem (its arrays copied to the backend) with bk_dev.flash_gen = gen. */
static outputs dev_forward(bk_backend *be, const problem *pb, int gen)
{
    const int B = pb->B, T = pb->T, C = pb->C, H = pb->H;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * H * T;
    bk_error err = {0};
    void *mem[8] = {0};
    int n = 0;
    bk_attention_bias bias = bias_of(pb);
    const float *qkv = dev_copy(be, mem, &n, pb->qkv, nqkv * sizeof(float));
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        bias.table[s] = dev_copy(be, mem, &n, pb->table[s], (size_t)H * pb->D * sizeof(float));
        bias.positions[s] = dev_copy(be, mem, &n, pb->pos[s], (size_t)B * T * sizeof(int32_t));
    }
    bias.scale = dev_copy(be, mem, &n, pb->scale, (size_t)H * T * sizeof(float));
    bias.cpos = dev_copy(be, mem, &n, pb->cpos, (size_t)B * H * T * sizeof(float));
    void *out = NULL, *lse = NULL;
    if (be->alloc(be, &out, nout * sizeof(float), &err) != BK_OK || be->alloc(be, &lse, nlse * sizeof(float), &err))
        fail_msg("%s: alloc: %s", be->name, err.message);
    bk_dev *d = (bk_dev *)be->impl;
    d->flash_gen = gen;
    const int rc = be->attention_forward(be, BK_STORAGE_FP32, (float *)out, (float *)lse, qkv, &bias, B, T, C, H, &err);
    d->flash_gen = 0;
    if (rc != BK_OK)
        fail_msg("%s: attention forward (flash_gen %d): %s", be->name, gen, err.message);
    outputs o = outputs_new(pb);
    if (be->download(be, o.out, out, nout * sizeof(float), &err) != BK_OK ||
        be->download(be, o.lse, lse, nlse * sizeof(float), &err) != BK_OK)
        fail_msg("%s: download: %s", be->name, err.message);
    be->release(be, out), be->release(be, lse);
    for (int k = 0; k < n; k++)
        be->release(be, mem[k]);
    return o;
}

/* The forward through be->attention_forward with flash_gen 2 against 0: the same bits when `exact`
 * (emulated), else (a GPU) within the fp32 tolerance with the count of equal bits printed: nvcc decides per
 * kernel which products it fuses into FMAs (a * b + c * d has two ways), so the two generations' GPU
 * bits can differ although their orders are the same. Both against the CPU within the tolerance. */
static void check_dispatch(bk_backend *be, int exact)
{
    bk_error err = {0};
    bk_dev *d = (bk_dev *)be->impl;
    assert_int_equal(d->flash_gen, 0); /* the first generation is the default */
    static const int heads[] = {64, 128};
    static const int lengths[] = {1, 17, 64, 65, 200};
    for (size_t hh = 0; hh < 2; hh++)
        for (size_t t = 0; t < sizeof lengths / sizeof lengths[0]; t++) {
            const int hd = heads[hh], T = lengths[t];
            /* a content position at the odd lengths */
            problem pb = make_problem(2, T, hd, 2, F_TOKEN | F_SEGMENT | F_MASK | F_SCALE | (t % 2 ? F_CPOS : 0),
                                      77 + t + 10 * hh);
            const bk_attention_bias bias = bias_of(&pb);
            const size_t nout = (size_t)pb.B * T * pb.C, nlse = (size_t)pb.B * pb.H * T;
            assert_int_equal(be->attention_saved(be, pb.B, T, pb.H), nlse);
            outputs g[2];
            for (int k = 0; k < 2; k++)
                g[k] = dev_forward(be, &pb, k ? 2 : 0);
            char label[96];
            snprintf(label, sizeof label, "%s, head size %d T %d%s", be->name, hd, T, pb.cpos ? " cpos" : "");
            if (exact) {
                expect_same_bits("out", label, g[1].out, g[0].out, nout);
                expect_same_bits("lse", label, g[1].lse, g[0].lse, nlse);
            } else {
                size_t same = 0;
                for (size_t k = 0; k < nout; k++) {
                    const double e = fabs((double)g[1].out[k] - (double)g[0].out[k]);
                    if (!(e <= 1e-6 + 1e-5 * fabs((double)g[0].out[k])))
                        fail_msg("%s: out[%zu] = %.9g, first generation %.9g", label, k, (double)g[1].out[k],
                                 (double)g[0].out[k]);
                    same += !memcmp(&g[1].out[k], &g[0].out[k], sizeof(float));
                }
                for (size_t k = 0; k < nlse; k++)
                    if (!(fabs((double)g[1].lse[k] - (double)g[0].lse[k]) <= 1e-5 + 1e-5 * fabs((double)g[0].lse[k])))
                        fail_msg("%s: lse[%zu] = %.9g, first generation %.9g", label, k, (double)g[1].lse[k],
                                 (double)g[0].lse[k]);
                print_message("%s: %zu of %zu outputs the first generation's bits\n", label, same, nout);
            }
            /* the CPU: within the first generation's fp32 tolerance (tests/test_backend_attention.c) */
            float *cpu = malloc(nout * sizeof *cpu), *probs = malloc((size_t)pb.B * pb.H * T * T * sizeof *probs);
            assert_non_null(cpu);
            assert_non_null(probs);
            if (bk_attention_forward(cpu, probs, pb.qkv, &bias, pb.B, T, pb.C, pb.H, &err) != BK_OK)
                fail_msg("cpu attention forward: %s", err.message);
            double worst = 0.0;
            size_t same = 0;
            for (size_t k = 0; k < nout; k++) {
                const double e = fabs((double)g[1].out[k] - (double)cpu[k]);
                if (!(e <= 1e-6 + 1e-5 * fabs((double)cpu[k])))
                    fail_msg("%s: out[%zu] = %.9g, cpu %.9g", label, k, (double)g[1].out[k], (double)cpu[k]);
                worst = e > worst ? e : worst;
                same += !memcmp(&g[1].out[k], &cpu[k], sizeof *cpu);
            }
            print_message("%s: largest |gen2 - cpu| %.2g, %zu of %zu outputs the CPU's bits\n", label, worst, same,
                          nout);
            free(cpu), free(probs);
            outputs_free(&g[0]), outputs_free(&g[1]);
            free_problem(&pb);
        }
}

/* check(emulated backend) with matmul fp32, then tf32: [run] matmul = "tf32" leaves the fused attention's
 * programs fp32 (both generations'). */
static void on_emulated_fp32_and_tf32(void (*check)(bk_backend *be))
{
    static const int modes[2] = {BK_MATMUL_FP32, BK_MATMUL_TF32};
    for (int m = 0; m < 2; m++) {
        bk_backend *be = NULL;
        bk_error err = {0};
        if (bk_backend_emulated_create(&be, modes[m], &err) != BK_OK)
            fail_msg("bk_backend_emulated_create (%s): %s", m ? "tf32" : "fp32", err.message);
        check(be);
        bk_backend_destroy(be);
    }
}

static void check_dispatch_exact(bk_backend *be)
{
    check_dispatch(be, 1);
}

static void dispatch_selects_second_generation(void **state)
{
    (void)state;
    on_emulated_fp32_and_tf32(check_dispatch_exact);
}

static void cuda_dispatch(void **state)
{
    (void)state;
    char desc[256];
    if (!bk_device_probe(desc, sizeof desc)) {
        print_message("skipping the CUDA backend: no GPU answers (%s)\n", desc);
        skip();
    }
    bk_backend *be = NULL;
    bk_error err = {0};
    if (bk_backend_cuda_create(&be, BK_MATMUL_FP32, &err) != BK_OK)
        fail_msg("a GPU answers (%s) but bk_backend_cuda_create failed: %s", desc, err.message);
    check_dispatch(be, 0);
    bk_backend_destroy(be);
}

/* ---- the order is what gives the bits -------------------------------------------------------------- */

/* Row i of (b, h) by the first generation's operations with key tiles of `tile` walked ascending, or
 * descending (from the diagonal down, FlashAttention-2's order): out (hd floats) and lse. */
static void model_row(const k_flash_args *a, int64_t b, int h, int i, int descending, float *out, float *lse)
{
    const int hd = a->C / a->H, tile = a->tile, qt = i / tile;
    float row[64], m = -INFINITY, l = 0.0f, alpha = 0.0f, O[128];
    for (int d = 0; d < hd; d++)
        O[d] = 0.0f;
    int seq[1024], n = 0, sink_end, first;
    for (int kt = k_flash_key_tiles(qt, tile, a->terms.window, a->terms.sinks, &sink_end, &first); kt <= qt;
         kt = k_flash_kt_next(kt, sink_end, first))
        seq[n++] = kt;
    const float *q = a->qkv + k_flash_qkv_at(a, 0, b, h, i);
    for (int s = 0; s < n; s++) {
        const int kt = seq[descending ? n - 1 - s : s], j0 = kt * tile, cols = k_flash_rows(a, j0);
        const int cls = k_flash_tile_class(a, qt * tile, k_flash_rows(a, qt * tile), j0, cols);
        for (int c = 0; c < tile; c++) {
            const int j = j0 + c;
            row[c] = c < cols && k_flash_keeps(a, cls, i, j)
                         ? k_flash_score(a, b, h, i, j, q, a->qkv + k_flash_qkv_at(a, 1, b, h, j))
                         : -INFINITY;
        }
        bk_online_softmax_row(row, tile, &m, &l, &alpha);
        for (int d = 0; d < hd; d++) {
            float acc = O[d] * alpha;
            for (int c = 0; c < cols; c++)
                acc += row[c] * a->qkv[k_flash_qkv_at(a, 2, b, h, j0 + c) + d];
            O[d] = acc;
        }
    }
    for (int d = 0; d < hd; d++)
        out[d] = O[d] * (1.0f / l);
    *lse = m + logf(l);
}

static void order_matters(void **state)
{
    (void)state;
    const int hd = 64, tile = 32;
    problem pb = make_problem(2, 200, hd, 2, F_TOKEN | F_SEGMENT | F_MASK | F_SCALE | F_GRID, 4242);
    outputs g2 = run_gen2(&pb, tile);
    k_flash_args a = args_of(&pb, tile, NULL, NULL);
    size_t differ = 0;
    for (int b = 0; b < pb.B; b++)
        for (int h = 0; h < pb.H; h++)
            for (int i = 0; i < pb.T; i++) {
                float out[128], lse, rout[128], rlse;
                model_row(&a, b, h, i, 0, out, &lse);
                model_row(&a, b, h, i, 1, rout, &rlse);
                const float *got = g2.out + k_flash_bt_at(&a, b, h, i);
                char label[64];
                snprintf(label, sizeof label, "row model (b %d h %d i %d)", b, h, i);
                expect_same_bits("out", label, got, out, (size_t)hd);
                expect_same_bits("lse", label, &g2.lse[((size_t)b * pb.H + h) * pb.T + i], &lse, 1);
                for (int d = 0; d < hd; d++)
                    differ += memcmp(&rout[d], &got[d], sizeof *got) != 0;
                differ += memcmp(&rlse, &lse, sizeof lse) != 0;
            }
    print_message("key tiles walked from the diagonal down: %zu of %d values change bits\n", differ,
                  pb.B * pb.H * pb.T * (hd + 1));
    assert_true(differ > 0);
    outputs_free(&g2);
    free_problem(&pb);
}

/* ---- the backward ---------------------------------------------------------------------------------- */

/* What a backward writes (host copies): dqkv, the two streams' table gradients and the four ABI 2
 * gradients, each started from random values (the backward adds into them). */
typedef struct grads {
    float *dqkv, *dtable[BK_STREAM_COUNT], *dgrid, *dphi, *drscale, *dscale, *dcpos;
    float *dcpos0; /* dcpos's starting values */
    size_t n[6 + BK_STREAM_COUNT]; /* element counts: dqkv, dtable[s]..., dgrid, dphi, drscale, dscale, dcpos */
} grads;

static void grads_free(grads *g)
{
    free(g->dqkv), free(g->dgrid), free(g->dphi), free(g->drscale), free(g->dscale);
    free(g->dcpos), free(g->dcpos0);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        free(g->dtable[s]);
}

/* A backend buffer of n floats holding a copy of host[0 .. n-1] (NULL when host is NULL). */
static float *dev_floats(bk_backend *be, void **mem, int *k, const float *host, size_t n)
{
    return (float *)dev_copy(be, mem, k, host, n * sizeof(float));
}

/* be->attention_backward of the problem with bk_dev.flash_gen = gen (the forward's out and lse by the
 * first generation), every gradient the bias has wanted; `visits` receives the tile pairs the fused
 * programs visited (bk_emulated_tile_visits: dK/dV and dQ). */
static grads dev_backward(bk_backend *be, const problem *pb, int gen, long long visits[2])
{
    const int B = pb->B, T = pb->T, C = pb->C, H = pb->H;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * H * T;
    bk_error err = {0};
    void *mem[32] = {0};
    int n = 0;
    bk_attention_bias bias = bias_of(pb);
    const float *qkv = dev_floats(be, mem, &n, pb->qkv, nqkv);
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        bias.table[s] = dev_floats(be, mem, &n, pb->table[s], (size_t)H * pb->D);
        bias.positions[s] = dev_copy(be, mem, &n, pb->pos[s], (size_t)B * T * sizeof(int32_t));
    }
    bias.scale = dev_floats(be, mem, &n, pb->scale, (size_t)H * T);
    bias.grid = dev_floats(be, mem, &n, pb->grid, (size_t)H * pb->points);
    bias.phi = dev_floats(be, mem, &n, pb->phi, (size_t)pb->D);
    bias.rscale = dev_floats(be, mem, &n, pb->rscale, (size_t)T);
    bias.cpos = dev_floats(be, mem, &n, pb->cpos, (size_t)B * H * T);

    /* the starting values of every output, and dO: the same for both generations (seeded) */
    grads g;
    memset(&g, 0, sizeof g);
    rng_state = 0xbac4 + (uint64_t)T;
    float *dout = random_floats(nout, 1.0);
    g.n[0] = nqkv, g.dqkv = random_floats(nqkv, 0.5);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (pb->table[s])
            g.n[1 + s] = (size_t)H * pb->D, g.dtable[s] = random_floats(g.n[1 + s], 0.5);
    if (pb->grid) {
        g.n[1 + BK_STREAM_COUNT] = (size_t)H * pb->points, g.dgrid = random_floats(g.n[1 + BK_STREAM_COUNT], 0.5);
        g.n[2 + BK_STREAM_COUNT] = (size_t)pb->D, g.dphi = random_floats((size_t)pb->D, 0.5);
        g.n[3 + BK_STREAM_COUNT] = (size_t)T, g.drscale = random_floats((size_t)T, 0.5);
    }
    if (pb->scale)
        g.n[4 + BK_STREAM_COUNT] = (size_t)H * T, g.dscale = random_floats(g.n[4 + BK_STREAM_COUNT], 0.5);
    if (pb->cpos) {
        g.n[5 + BK_STREAM_COUNT] = (size_t)B * H * T, g.dcpos = random_floats(g.n[5 + BK_STREAM_COUNT], 0.5);
        g.dcpos0 = malloc(g.n[5 + BK_STREAM_COUNT] * sizeof(float));
        assert_non_null(g.dcpos0);
        memcpy(g.dcpos0, g.dcpos, g.n[5 + BK_STREAM_COUNT] * sizeof(float));
    }

    float *ddqkv = dev_floats(be, mem, &n, g.dqkv, nqkv), *ddout = dev_floats(be, mem, &n, dout, nout);
    float *dtable[BK_STREAM_COUNT];
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        dtable[s] = dev_floats(be, mem, &n, g.dtable[s], g.n[1 + s]);
    bias.dgrid = dev_floats(be, mem, &n, g.dgrid, g.n[1 + BK_STREAM_COUNT]);
    bias.dphi = dev_floats(be, mem, &n, g.dphi, g.n[2 + BK_STREAM_COUNT]);
    bias.drscale = dev_floats(be, mem, &n, g.drscale, g.n[3 + BK_STREAM_COUNT]);
    bias.dscale = dev_floats(be, mem, &n, g.dscale, g.n[4 + BK_STREAM_COUNT]);
    bias.dcpos = dev_floats(be, mem, &n, g.dcpos, g.n[5 + BK_STREAM_COUNT]);

    void *out = NULL, *lse = NULL;
    if (be->alloc(be, &out, nout * sizeof(float), &err) != BK_OK || be->alloc(be, &lse, nlse * sizeof(float), &err))
        fail_msg("%s: alloc: %s", be->name, err.message);
    if (be->attention_forward(be, BK_STORAGE_FP32, (float *)out, (float *)lse, qkv, &bias, B, T, C, H, &err) != BK_OK)
        fail_msg("%s: attention forward: %s", be->name, err.message);
    bk_dev *d = (bk_dev *)be->impl;
    const long long v0 = bk_emulated_tile_visits[K_FLASH_DKDV], q0 = bk_emulated_tile_visits[K_FLASH_DQ];
    d->flash_gen = gen;
    const int rc = be->attention_backward(be, BK_STORAGE_FP32, ddqkv, dtable, ddout, qkv, (const float *)out, (const float *)lse, &bias,
                                          B, T, C, H, &err);
    d->flash_gen = 0;
    if (rc != BK_OK)
        fail_msg("%s: attention backward (flash_gen %d): %s", be->name, gen, err.message);
    visits[0] = bk_emulated_tile_visits[K_FLASH_DKDV] - v0, visits[1] = bk_emulated_tile_visits[K_FLASH_DQ] - q0;
    if (be->download(be, g.dqkv, ddqkv, nqkv * sizeof(float), &err) != BK_OK)
        fail_msg("%s: download: %s", be->name, err.message);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (g.dtable[s] && be->download(be, g.dtable[s], dtable[s], g.n[1 + s] * sizeof(float), &err) != BK_OK)
            fail_msg("%s: download: %s", be->name, err.message);
    float *host[5] = {g.dgrid, g.dphi, g.drscale, g.dscale, g.dcpos};
    float *devp[5] = {bias.dgrid, bias.dphi, bias.drscale, bias.dscale, bias.dcpos};
    for (int k = 0; k < 5; k++)
        if (host[k] && be->download(be, host[k], devp[k], g.n[1 + BK_STREAM_COUNT + k] * sizeof(float), &err) != BK_OK)
            fail_msg("%s: download: %s", be->name, err.message);
    be->release(be, out), be->release(be, lse);
    for (int k = 0; k < n; k++)
        be->release(be, mem[k]);
    free(dout);
    return g;
}

static void expect_same_grads(const char *label, const grads *x, const grads *y, const problem *pb)
{
    expect_same_bits("dqkv", label, x->dqkv, y->dqkv, (size_t)pb->B * pb->T * 3 * pb->C);
    static const char *const names[BK_STREAM_COUNT] = {"dtable (token stream)", "dtable (segment stream)"};
    for (int s = 0; s < BK_STREAM_COUNT && s < 2; s++)
        if (x->dtable[s])
            expect_same_bits(names[s], label, x->dtable[s], y->dtable[s], (size_t)pb->H * pb->D);
    if (x->dgrid) {
        expect_same_bits("dgrid", label, x->dgrid, y->dgrid, (size_t)pb->H * pb->points);
        expect_same_bits("dphi", label, x->dphi, y->dphi, (size_t)pb->D);
        expect_same_bits("drscale", label, x->drscale, y->drscale, (size_t)pb->T);
    }
    if (x->dscale)
        expect_same_bits("dscale", label, x->dscale, y->dscale, (size_t)pb->H * pb->T);
    if (x->dcpos)
        expect_same_bits("dcpos", label, x->dcpos, y->dcpos, (size_t)pb->B * pb->H * pb->T);
}

/* The backward through be->attention_backward with flash_gen 2 against 0 on the emulated backend: the same
 * bits in dqkv (added into), both streams' table gradients and the four ABI 2 gradients, at head sizes
 * 16, 64, 128 and 160 (plan tiles 64, 32, 32 and 16), the five lengths and the terms alone and together;
 * with the phases' threads in reverse order; each tile pair visited once by the second generation where
 * the first visits it twice (k_flash_dkdv and k_flash_dq: the two products the second does not repeat). */
static void check_backward(bk_backend *be)
{
    static const int heads[] = {16, 64, 128, 160};
    static const int lengths[] = {1, 17, 64, 65, 200};
    static const int flag_sets[] = {F_TOKEN, F_TOKEN | F_SEGMENT, F_TOKEN | F_MASK | F_SCALE, F_GRID | F_SCALE,
                                    F_TOKEN | F_SEGMENT | F_MASK | F_SCALE | F_GRID, F_CPOS,
                                    F_CPOS | F_MASK | F_SCALE,
                                    F_TOKEN | F_SEGMENT | F_MASK | F_SCALE | F_GRID | F_CPOS};
    const int all = F_TOKEN | F_SEGMENT | F_MASK | F_SCALE | F_GRID;
    int cases = 0;
    long long pairs = 0;
    for (size_t hh = 0; hh < sizeof heads / sizeof heads[0]; hh++)
        for (size_t t = 0; t < sizeof lengths / sizeof lengths[0]; t++)
            for (size_t f = 0; f < sizeof flag_sets / sizeof flag_sets[0]; f++) {
                const int hd = heads[hh], T = lengths[t];
                if ((hd == 16 || hd == 160) && (flag_sets[f] & ~F_CPOS) != all) /* other tiles: the full sets */
                    continue;
                problem pb = make_problem(2, T, hd, 2, flag_sets[f], 0xb0c + 31 * hh + 7 * t + f);
                char label[128];
                snprintf(label, sizeof label, "%s backward, head size %d T %d terms %#x", be->name, hd, T,
                         flag_sets[f]);
                long long v1[2], v2[2], v3[2];
                grads g1 = dev_backward(be, &pb, 0, v1), g2 = dev_backward(be, &pb, 2, v2);
                expect_same_grads(label, &g2, &g1, &pb);
                if (g1.dcpos && T > 1) { /* the same bits, and not because neither added anything */
                    double moved = 0.0;
                    for (size_t k = 0; k < g1.n[5 + BK_STREAM_COUNT]; k++)
                        moved = fmax(moved, fabs((double)g1.dcpos[k] - (double)g1.dcpos0[k]));
                    if (!(moved > 1e-3))
                        fail_msg("%s: dcpos moved by at most %.3g from its starting values", label, moved);
                }
                bk_emulated_thread_order = 1;
                grads g3 = dev_backward(be, &pb, 2, v3);
                bk_emulated_thread_order = 0;
                expect_same_grads(label, &g3, &g2, &pb);
                if (v1[0] != v1[1] || v2[0] != v1[0] || v2[1] != 0)
                    fail_msg("%s: tile pairs visited: first generation %lld (dK/dV) + %lld (dQ), second %lld + %lld; "
                             "expected the second to visit the first's dK/dV pairs once and nothing more",
                             label, v1[0], v1[1], v2[0], v2[1]);
                pairs += v2[0];
                grads_free(&g1), grads_free(&g2), grads_free(&g3);
                free_problem(&pb);
                cases++;
            }
    print_message("%s: second-generation backward = first generation, bit for bit: %d cases, %lld tile pairs "
                  "visited once (the first generation: twice)\n",
                  be->name, cases, pairs);
}

static void backward_matches_first_generation(void **state)
{
    (void)state;
    on_emulated_fp32_and_tf32(check_backward);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(program_matches_first_generation),
        cmocka_unit_test(dispatch_selects_second_generation),
        cmocka_unit_test(cuda_dispatch),
        cmocka_unit_test(order_matters),
        cmocka_unit_test(backward_matches_first_generation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
