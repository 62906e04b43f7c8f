/* The device attention (core/gpu/ops_flash.h, ops_attention.h) against the CPU reference
 * (cpu/attention.c), on the emulated backend (the device code compiled as C) and, when a GPU answers,
 * on the CUDA backend, for the fused attention (the default) and the materialized one: forward output
 * and what forward saves (the probabilities, or the fused row log-sum-exp against a double-precision
 * reference), forward-only output, dqkv (accumulated into a nonzero start) and the table gradients
 * (likewise), for no bias, the token table, a segment stream with repeated positions and gaps, both
 * streams, explicit token positions, head sizes 8 to 160 (the fused tiles of 64, 32 and 16 rows), and
 * lengths of one token and of several blocks or tiles that are not multiples of them; then that two
 * runs give the same bits (emulated, the second with each phase's threads in reverse order), and the
 * argument errors. The fused attention on bf16 tensor cores ([run] matmul = "bf16") against the CPU
 * with bf16 tolerances (below), and a forward-only pass at T = 4096 in both precisions. bf16 storage
 * (attention_forward / attention_backward with BK_STORAGE_BF16) against the same programs with fp32 storage of the
 * same values, bit for bit, and its refusals.
 *
 * Tolerances (|device - cpu| <= atol + rtol |cpu|): the device sums its GEMMs in other orders and
 * in other query blocks than the CPU (dK and dV accumulate over 128-row blocks, the CPU's over 64;
 * the fused attention's online softmax rescales as it goes), so results agree to float rounding, not
 * bit for bit:
 *   out, probabilities      atol 1e-6, rtol 1e-5  (largest error seen emulated: 2.4e-7)
 *   row log-sum-exp         atol 1e-5, rtol 1e-5
 *   dqkv                    atol 1e-5, rtol 1e-4  (seen: 1.7e-6)
 *   dtable                  atol 2e-5, rtol 1e-4  (seen: 2.6e-6; sums of up to B*T*T/2 score
 *                                                   gradients, each carrying float rounding)
 * about ten times what was seen, for cuBLAS's and the GPU's expf's different rounding.
 * Saved and forward-only outputs run the same code (fused) or GEMM shapes and per-row arithmetic
 * (materialized): bit-identical when emulated and fused, within 1e-6 on CUDA materialized (cuBLAS may
 * choose its kernel by leading dimension). */
#include "test_util.h"
#include "test_random.h"
#include "test_floats.h"

#include "cpu/attention.h"
#include "cuda/device.h"
#include "gpu/dev.h" /* bk_emulated_thread_order */
#include "gpu/mma.h" /* bk_bf16_round, bk_bf16_value */
#include "model/backend.h"

#include <math.h>
#include <stdlib.h>

enum {
    BIAS_TOKEN = 1,          /* token-stream table, positions NULL (the token index) */
    BIAS_SEGMENT = 2,        /* segment-stream table with positions: repeats and gaps */
    BIAS_TOKEN_EXPLICIT = 4, /* token-stream positions given explicitly (repeats, an offset) */
    BIAS_SPAN_UNKNOWN = 8    /* span left 0: the device works over all of the table's distances */
};

typedef struct problem {
    int B, T, C, H, D, flags;
    float *qkv, *dout;               /* (B, T, 3C), (B, T, C) */
    float *dqkv0;                    /* the starting value of dqkv: backward accumulates */
    float *table[BK_STREAM_COUNT];   /* H x D, or NULL */
    float *dtable0[BK_STREAM_COUNT]; /* the starting value of dtable[s] */
    int32_t *pos[BK_STREAM_COUNT];   /* B x T, or NULL */
    int32_t span[BK_STREAM_COUNT];
} problem;

typedef struct result {
    float *out, *out_fwd_only, *probs, *dqkv; /* probs: the saved probabilities, or the fused row lse */
    float *dtable[BK_STREAM_COUNT];
} result;


static int32_t *positions(int B, int T, int first_of_row, double p_repeat, double p_gap)
{
    int32_t *p = malloc((size_t)B * T * sizeof *p);
    assert_non_null(p);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            if (t == 0) {
                p[b * T] = first_of_row * b;
                continue;
            }
            const double u = 0.5 * (uniform() + 1.0);
            p[b * T + t] = p[b * T + t - 1] + (u < p_repeat ? 0 : u < p_repeat + p_gap ? 3 : 1);
        }
    return p;
}

static problem make_problem(int B, int T, int C, int H, int flags, uint64_t seed)
{
    rng_state = seed;
    problem pb;
    memset(&pb, 0, sizeof pb);
    pb.B = B, pb.T = T, pb.C = C, pb.H = H, pb.flags = flags;
    pb.qkv = random_floats((size_t)B * T * 3 * C, 1.0);
    pb.dout = random_floats((size_t)B * T * C, 1.0);
    pb.dqkv0 = random_floats((size_t)B * T * 3 * C, 0.5);
    if (flags & BIAS_TOKEN_EXPLICIT)
        pb.pos[0] = positions(B, T, 7, 0.2, 0.0);
    if (flags & BIAS_SEGMENT)
        pb.pos[1] = positions(B, T, 0, 0.6, 0.1);
    /* span[s] = 1 + the largest distance of the batch; the tables hold a few distances more */
    int32_t far = 0;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (!(s == 0 ? flags & (BIAS_TOKEN | BIAS_TOKEN_EXPLICIT) : flags & BIAS_SEGMENT))
            continue;
        pb.span[s] = 1;
        for (int b = 0; b < B; b++) {
            const int32_t d = pb.pos[s] ? pb.pos[s][b * T + T - 1] - pb.pos[s][b * T] : T - 1;
            pb.span[s] = d + 1 > pb.span[s] ? d + 1 : pb.span[s];
        }
        far = pb.span[s] > far ? pb.span[s] : far;
    }
    pb.D = far + 5;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (!pb.span[s])
            continue;
        pb.table[s] = random_floats((size_t)H * pb.D, 1.0);
        pb.dtable0[s] = random_floats((size_t)H * pb.D, 0.5);
        if (flags & BIAS_SPAN_UNKNOWN)
            pb.span[s] = 0;
    }
    return pb;
}

static void free_problem(problem *pb)
{
    free(pb->qkv);
    free(pb->dout);
    free(pb->dqkv0);
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        free(pb->table[s]);
        free(pb->dtable0[s]);
        free(pb->pos[s]);
    }
}

static void free_result(result *r)
{
    free(r->out);
    free(r->out_fwd_only);
    free(r->probs);
    free(r->dqkv);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        free(r->dtable[s]);
    memset(r, 0, sizeof *r);
}

static size_t table_floats(const problem *pb)
{
    return (size_t)pb->H * pb->D;
}

/* The CPU reference: forward with probabilities, backward into copies of dqkv0 and dtable0. */
static result run_cpu(const problem *pb)
{
    const size_t nqkv = (size_t)pb->B * pb->T * 3 * pb->C, nout = (size_t)pb->B * pb->T * pb->C;
    const size_t nprobs = (size_t)pb->B * pb->H * pb->T * pb->T;
    result r;
    memset(&r, 0, sizeof r);
    r.out = malloc(nout * sizeof(float));
    r.probs = malloc(nprobs * sizeof(float));
    assert_non_null(r.out);
    assert_non_null(r.probs);
    r.dqkv = copy_floats(pb->dqkv0, nqkv);
    bk_attention_bias bias;
    memset(&bias, 0, sizeof bias);
    bias.distances = pb->D;
    float *dtable[BK_STREAM_COUNT] = {NULL, NULL};
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        bias.table[s] = pb->table[s];
        bias.positions[s] = pb->pos[s];
        bias.span[s] = pb->span[s];
        if (pb->table[s])
            dtable[s] = r.dtable[s] = copy_floats(pb->dtable0[s], table_floats(pb));
    }
    bk_error err = {0};
    int rc = bk_attention_forward(r.out, r.probs, pb->qkv, &bias, pb->B, pb->T, pb->C, pb->H, &err);
    if (rc != BK_OK)
        fail_msg("cpu attention forward: %s", err.message);
    rc = bk_attention_backward(r.dqkv, dtable, pb->dout, pb->qkv, r.probs, &bias, pb->B, pb->T, pb->C, pb->H, &err);
    if (rc != BK_OK)
        fail_msg("cpu attention backward: %s", err.message);
    return r;
}

/* ---- backend memory -------------------------------------------------------------------------- */

static void *dev_alloc(bk_backend *be, size_t bytes)
{
    void *p = NULL;
    bk_error err = {0};
    if (be->alloc(be, &p, bytes, &err) != BK_OK)
        fail_msg("%s: alloc of %zu bytes: %s", be->name, bytes, err.message);
    return p;
}

static void *dev_copy_of(bk_backend *be, const void *host, size_t bytes)
{
    void *p = dev_alloc(be, bytes);
    bk_error err = {0};
    if (bytes && be->upload(be, p, host, bytes, &err) != BK_OK)
        fail_msg("%s: upload of %zu bytes: %s", be->name, bytes, err.message);
    return p;
}

static float *host_copy_of(bk_backend *be, const void *dev, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    assert_non_null(h);
    bk_error err = {0};
    if (n && be->download(be, h, dev, n * sizeof *h, &err) != BK_OK)
        fail_msg("%s: download of %zu floats: %s", be->name, n, err.message);
    return h;
}

/* What attention_saved should answer: the probabilities (materialized) or one log-sum-exp per row
 * (fused). */
static size_t saved_floats(const bk_backend *be, const problem *pb)
{
    const size_t rows = (size_t)pb->B * pb->H * pb->T;
    return be->attention == BK_ATTENTION_MATERIALIZED ? rows * pb->T : rows;
}

/* The fused forward's saved row statistics, computed in double from the problem: lse[b][h][i] =
 * log sum_{j <= i} exp(s_ij), s_ij = (q_i . k_j) / sqrt(hd) + the tables' entries. */
static float *reference_lse(const problem *pb)
{
    const int B = pb->B, T = pb->T, C = pb->C, H = pb->H, hd = C / H;
    float *lse = malloc((size_t)B * H * T * sizeof *lse);
    double *s = malloc((size_t)T * sizeof *s);
    assert_non_null(lse);
    assert_non_null(s);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const float *q = pb->qkv + ((size_t)b * T + i) * 3 * C + (size_t)h * hd;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    const float *k = pb->qkv + ((size_t)b * T + j) * 3 * C + C + (size_t)h * hd;
                    double dot = 0.0;
                    for (int d = 0; d < hd; d++)
                        dot += (double)q[d] * k[d];
                    s[j] = dot / sqrt((double)hd);
                    for (int st = 0; st < BK_STREAM_COUNT; st++)
                        if (pb->table[st]) {
                            const int32_t *p = pb->pos[st] ? pb->pos[st] + (size_t)b * T : NULL;
                            s[j] += pb->table[st][(size_t)h * pb->D + (p ? p[i] - p[j] : i - j)];
                        }
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j <= i; j++)
                    sum += exp(s[j] - mx);
                lse[((size_t)b * H + h) * T + i] = (float)(mx + log(sum));
            }
    free(s);
    return lse;
}

/* The problem on backend `be`: forward into a `saved` buffer first filled with NaN (so that an entry
 * the forward does not write shows), forward-only, backward into dqkv0 and dtable0. */
static result run_device(bk_backend *be, const problem *pb)
{
    const size_t nqkv = (size_t)pb->B * pb->T * 3 * pb->C, nout = (size_t)pb->B * pb->T * pb->C;
    const size_t nsaved = be->attention_saved(be, pb->B, pb->T, pb->H);
    assert_int_equal(nsaved, saved_floats(be, pb));
    const size_t nfill = nsaved > nout ? nsaved : nout;
    float *nan_fill = malloc(nfill * sizeof *nan_fill);
    assert_non_null(nan_fill);
    for (size_t k = 0; k < nfill; k++)
        nan_fill[k] = NAN;

    float *qkv = dev_copy_of(be, pb->qkv, nqkv * sizeof(float));
    float *dout = dev_copy_of(be, pb->dout, nout * sizeof(float));
    float *dqkv = dev_copy_of(be, pb->dqkv0, nqkv * sizeof(float));
    float *saved = dev_copy_of(be, nan_fill, nsaved * sizeof(float));
    float *out = dev_copy_of(be, nan_fill, nout * sizeof(float));
    float *out2 = dev_copy_of(be, nan_fill, nout * sizeof(float));
    free(nan_fill);
    bk_attention_bias bias;
    memset(&bias, 0, sizeof bias);
    bias.distances = pb->D;
    float *dtable[BK_STREAM_COUNT] = {NULL, NULL};
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        bias.span[s] = pb->span[s];
        if (pb->table[s]) {
            bias.table[s] = dev_copy_of(be, pb->table[s], table_floats(pb) * sizeof(float));
            dtable[s] = dev_copy_of(be, pb->dtable0[s], table_floats(pb) * sizeof(float));
        }
        if (pb->pos[s])
            bias.positions[s] = dev_copy_of(be, pb->pos[s], (size_t)pb->B * pb->T * sizeof(int32_t));
    }

    bk_error err = {0};
    if (be->attention_forward(be, BK_STORAGE_FP32, out, saved, qkv, &bias, pb->B, pb->T, pb->C, pb->H, &err) != BK_OK)
        fail_msg("%s attention forward (saved): %s", be->name, err.message);
    if (be->attention_forward(be, BK_STORAGE_FP32, out2, NULL, qkv, &bias, pb->B, pb->T, pb->C, pb->H, &err) != BK_OK)
        fail_msg("%s attention forward (forward-only): %s", be->name, err.message);
    if (be->attention_backward(be, BK_STORAGE_FP32, dqkv, dtable, dout, qkv, out, saved, &bias, pb->B, pb->T, pb->C, pb->H, &err) !=
        BK_OK)
        fail_msg("%s attention backward: %s", be->name, err.message);

    result r;
    memset(&r, 0, sizeof r);
    r.out = host_copy_of(be, out, nout);
    r.out_fwd_only = host_copy_of(be, out2, nout);
    r.probs = host_copy_of(be, saved, nsaved);
    r.dqkv = host_copy_of(be, dqkv, nqkv);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (dtable[s])
            r.dtable[s] = host_copy_of(be, dtable[s], table_floats(pb));

    be->release(be, qkv);
    be->release(be, dout);
    be->release(be, dqkv);
    be->release(be, saved);
    be->release(be, out);
    be->release(be, out2);
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        be->release(be, (void *)bias.table[s]);
        be->release(be, (void *)bias.positions[s]);
        be->release(be, dtable[s]);
    }
    return r;
}

/* ---- comparisons ----------------------------------------------------------------------------- */

/* Fails at the first element outside atol + rtol |want| (NaN included); returns the largest absolute
 * error otherwise. */
static double expect_close(const char *what, const char *label, const float *got, const float *want, size_t n,
                           double atol, double rtol)
{
    double worst = 0.0;
    for (size_t k = 0; k < n; k++) {
        const double e = fabs((double)got[k] - (double)want[k]);
        if (!(e <= atol + rtol * fabs((double)want[k])))
            fail_msg("%s: %s[%zu] = %.9g, expected %.9g (error %.3g > %.3g + %.3g * |expected|)", label, what, k,
                     (double)got[k], (double)want[k], e, atol, rtol);
        worst = e > worst ? e : worst;
    }
    return worst;
}

static void expect_same_bits(const char *what, const char *label, const float *a, const float *b, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (memcmp(&a[k], &b[k], sizeof *a))
            fail_msg("%s: %s differs between two runs at [%zu]: %.9g vs %.9g", label, what, k, (double)a[k],
                     (double)b[k]);
}

/* |device - cpu| <= atol + rtol |cpu| per quantity */
typedef struct tolerances {
    double out_a, out_r, saved_a, saved_r, dqkv_a, dqkv_r, dtab_a, dtab_r;
} tolerances;

/* fp32 (see the header) */
static const tolerances tol_fp32 = {1e-6, 1e-5, 1e-5, 1e-5, 1e-5, 1e-4, 2e-5, 1e-4};
/* bf16 tensor-core products ([run] matmul = "bf16", fused): q, k, v, dO, P and dS rounded to 8-bit
 * mantissas (relative error up to 2^-9) before the products. Largest errors seen emulated over the cases
 * of check_modes: out 2.6e-3, lse 1.6e-3, dqkv 5.8e-3, dtable 3.3e-2 (head size 160: its dtable entries
 * are sums of up to a few thousand dS values); the bounds are 1.5-4 times that. */
static const tolerances tol_bf16 = {1e-2, 1e-2, 5e-3, 5e-3, 2e-2, 2e-2, 5e-2, 5e-2};

static void check_case_tol(bk_backend *be, const tolerances *tol, int B, int T, int C, int H, int flags,
                           uint64_t seed)
{
    char label[160];
    snprintf(label, sizeof label, "%s %s%s B=%d T=%d C=%d H=%d bias=%s%s%s%s", be->name,
             be->attention == BK_ATTENTION_MATERIALIZED ? "materialized" : "fused",
             be->matmul == BK_MATMUL_BF16 ? " bf16" : "", B, T, C, H,
             flags & BIAS_TOKEN ? "token " : "", flags & BIAS_TOKEN_EXPLICIT ? "token-positions " : "",
             flags & BIAS_SEGMENT ? "segment " : "", flags & BIAS_SPAN_UNKNOWN ? "span-unknown" : "");
    problem pb = make_problem(B, T, C, H, flags, seed);
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nsaved = saved_floats(be, &pb);
    result want = run_cpu(&pb);
    result got = run_device(be, &pb);

    double e_out = expect_close("out", label, got.out, want.out, nout, tol->out_a, tol->out_r);
    double e_saved;
    if (be->attention == BK_ATTENTION_MATERIALIZED) {
        e_saved = expect_close("saved probabilities", label, got.probs, want.probs, nsaved, tol->out_a, tol->out_r);
    } else {
        float *lse = reference_lse(&pb);
        e_saved = expect_close("saved row log-sum-exp", label, got.probs, lse, nsaved, tol->saved_a, tol->saved_r);
        free(lse);
    }
    /* the fused forward runs the same code with and without saving; the materialized one the same
     * GEMM shapes at other leading dimensions, which cuBLAS may serve with other kernels */
    if (be->kind == BK_BACKEND_EMULATED || be->attention == BK_ATTENTION_FUSED)
        expect_same_bits("forward-only out vs saved out", label, got.out_fwd_only, got.out, nout);
    else
        expect_close("forward-only out vs saved out", label, got.out_fwd_only, got.out, nout, 1e-6, 1e-6);
    double e_dqkv = expect_close("dqkv", label, got.dqkv, want.dqkv, nqkv, tol->dqkv_a, tol->dqkv_r);
    double e_dtab = 0.0;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (!pb.table[s])
            continue;
        double e = expect_close(s == 0 ? "dtable[token]" : "dtable[segment]", label, got.dtable[s], want.dtable[s],
                                table_floats(&pb), tol->dtab_a, tol->dtab_r);
        e_dtab = e > e_dtab ? e : e_dtab;
    }
    print_message("%-70s max error out %.2g, saved %.2g, dqkv %.2g, dtable %.2g\n", label, e_out, e_saved, e_dqkv,
                  e_dtab);

    /* a second run gives the same bits, the table gradients included; emulated, the second runs the
     * threads of every phase of the fused block programs in the opposite order (gpu/dev.h), which
     * shows a thread reading what another writes in the same phase */
    if (be->kind == BK_BACKEND_EMULATED)
        bk_emulated_thread_order = 1;
    result again = run_device(be, &pb);
    bk_emulated_thread_order = 0;
    expect_same_bits("out", label, again.out, got.out, nout);
    expect_same_bits("out (forward-only)", label, again.out_fwd_only, got.out_fwd_only, nout);
    expect_same_bits("saved", label, again.probs, got.probs, nsaved);
    expect_same_bits("dqkv", label, again.dqkv, got.dqkv, nqkv);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (pb.table[s])
            expect_same_bits(s == 0 ? "dtable[token]" : "dtable[segment]", label, again.dtable[s], got.dtable[s],
                             table_floats(&pb));

    free_result(&again);
    free_result(&got);
    free_result(&want);
    free_problem(&pb);
}

static void check_case(bk_backend *be, int B, int T, int C, int H, int flags, uint64_t seed)
{
    check_case_tol(be, &tol_fp32, B, T, C, H, flags, seed);
}

/* Every case on one backend. Materialized: T = 37 is one query block, 130 two (128 + 2), 300 three.
 * Fused: head size 8 and 32 take tiles of 64 rows (T = 130 is 64 + 64 + 2), 64 tiles of 32, 160 tiles
 * of 16. No length is a multiple of a block or tile. */
static void check_all(bk_backend *be)
{
    static const int lengths[] = {37, 130};
    static const int biases[] = {0, BIAS_TOKEN, BIAS_SEGMENT, BIAS_TOKEN | BIAS_SEGMENT};
    uint64_t seed = 1;
    for (size_t l = 0; l < sizeof lengths / sizeof *lengths; l++)
        for (size_t k = 0; k < sizeof biases / sizeof *biases; k++)
            check_case(be, 3, lengths[l], 96, 12, biases[k], seed++); /* hd 8 */
    check_case(be, 3, 130, 128, 2, 0, seed++);                         /* hd 64 */
    check_case(be, 3, 130, 128, 2, BIAS_TOKEN | BIAS_SEGMENT, seed++);
    check_case(be, 3, 37, 128, 2, BIAS_SEGMENT, seed++);
    check_case(be, 3, 300, 96, 12, BIAS_TOKEN | BIAS_SEGMENT, seed++); /* three blocks */
    check_case(be, 2, 130, 96, 12, BIAS_TOKEN_EXPLICIT | BIAS_SEGMENT, seed++);
    check_case(be, 2, 130, 96, 12, BIAS_TOKEN | BIAS_SEGMENT | BIAS_SPAN_UNKNOWN, seed++);
    check_case(be, 2, 130, 64, 2, BIAS_TOKEN | BIAS_SEGMENT, seed++);  /* hd 32 */
    check_case(be, 2, 70, 320, 2, BIAS_TOKEN | BIAS_SEGMENT, seed++);  /* hd 160 */
    check_case(be, 2, 1, 96, 12, BIAS_TOKEN | BIAS_SEGMENT, seed++);   /* one token */
}

/* What the host can check without reading backend memory fails with a message naming it. */
static void check_errors(bk_backend *be)
{
    const int B = 1, T = 20, C = 16, H = 2;
    float *qkv = dev_alloc(be, (size_t)B * T * 3 * C * sizeof(float));
    float *dqkv = dev_alloc(be, (size_t)B * T * 3 * C * sizeof(float));
    float *out = dev_alloc(be, (size_t)B * T * C * sizeof(float));
    float *saved = dev_alloc(be, be->attention_saved(be, B, T, H) * sizeof(float));
    float *table = dev_alloc(be, (size_t)H * 32 * sizeof(float));
    int32_t *pos = dev_alloc(be, (size_t)B * T * sizeof(int32_t));
    bk_attention_bias bias;
    memset(&bias, 0, sizeof bias);
    bk_error err = {0};

    assert_int_equal(be->attention_forward(be, BK_STORAGE_FP32, out, saved, qkv, NULL, B, T, 15, H, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "C divisible by H");
    assert_message_has(err.message, "C=15");

    /* the token stream without positions reaches distance T - 1 = 19: a table of 10 is too short */
    bias.table[0] = table, bias.distances = 10;
    assert_int_equal(be->attention_forward(be, BK_STORAGE_FP32, out, saved, qkv, &bias, B, T, C, H, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "stream 'token'");
    assert_message_has(err.message, "outside the bias table");
    assert_message_has(err.message, "0 .. 9");

    /* a span beyond the table */
    memset(&bias, 0, sizeof bias);
    bias.table[1] = table, bias.positions[1] = pos, bias.distances = 32, bias.span[1] = 33;
    assert_int_equal(be->attention_forward(be, BK_STORAGE_FP32, out, NULL, qkv, &bias, B, T, C, H, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "stream 'segment'");
    assert_message_has(err.message, "span 33");
    assert_message_has(err.message, "0 .. 31");
    float *dtable[BK_STREAM_COUNT] = {NULL, table};
    assert_int_equal(be->attention_backward(be, BK_STORAGE_FP32, dqkv, dtable, out, qkv, out, saved, &bias, B, T, C, H, &err),
                     BK_ERR_INVALID);
    assert_message_has(err.message, "attention backward");
    assert_message_has(err.message, "span 33");

    bias.span[1] = 5;
    assert_int_equal(be->attention_backward(be, BK_STORAGE_FP32, dqkv, dtable, out, qkv, out, NULL, &bias, B, T, C, H, &err),
                     BK_ERR_INVALID);
    if (be->attention == BK_ATTENTION_MATERIALIZED) {
        assert_message_has(err.message, "saved by the forward pass");
    } else {
        assert_message_has(err.message, "row statistics it saved (saved is NULL)");
        assert_int_equal(be->attention_backward(be, BK_STORAGE_FP32, dqkv, dtable, out, qkv, NULL, saved, &bias, B, T, C, H, &err),
                         BK_ERR_INVALID);
        assert_message_has(err.message, "(out is NULL)");
        /* a head of 512 floats: even tiles of 16 rows need more shared memory than a block may have */
        assert_int_equal(be->attention_forward(be, BK_STORAGE_FP32, out, saved, qkv, NULL, 1, T, 512, 1, &err), BK_ERR_UNSUPPORTED);
        assert_message_has(err.message, "head size 512");
        assert_message_has(err.message, "attention = \"materialized\"");
    }

    be->release(be, qkv);
    be->release(be, dqkv);
    be->release(be, out);
    be->release(be, saved);
    be->release(be, table);
    be->release(be, pos);
}

/* Evaluation at a long length: forward only (no saved statistics), one sequence of T = 4096 (64 query
 * tiles of 64 rows), a token table over every distance, fused in fp32 and bf16 against the CPU's
 * forward-only pass. */
static void check_long_forward(bk_backend *be)
{
    const int B = 1, T = 4096, C = 32, H = 2;
    problem pb = make_problem(B, T, C, H, BIAS_TOKEN, 77);
    const size_t nout = (size_t)B * T * C;
    float *want = malloc(nout * sizeof *want);
    assert_non_null(want);
    bk_attention_bias bias;
    memset(&bias, 0, sizeof bias);
    bias.distances = pb.D, bias.table[0] = pb.table[0], bias.span[0] = pb.span[0];
    bk_error err = {0};
    if (bk_attention_forward(want, NULL, pb.qkv, &bias, B, T, C, H, &err) != BK_OK)
        fail_msg("cpu forward-only attention at T = %d: %s", T, err.message);

    float *qkv = dev_copy_of(be, pb.qkv, (size_t)B * T * 3 * C * sizeof(float));
    float *out = dev_alloc(be, nout * sizeof(float));
    bias.table[0] = dev_copy_of(be, pb.table[0], table_floats(&pb) * sizeof(float));
    const bk_matmul_mode was = be->matmul;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        be->matmul = bf16 ? BK_MATMUL_BF16 : BK_MATMUL_FP32;
        if (be->attention_forward(be, BK_STORAGE_FP32, out, NULL, qkv, &bias, B, T, C, H, &err) != BK_OK)
            fail_msg("%s forward-only attention at T = %d: %s", be->name, T, err.message);
        float *got = host_copy_of(be, out, nout);
        const tolerances *tol = bf16 ? &tol_bf16 : &tol_fp32;
        double e = expect_close("out", bf16 ? "T=4096 forward-only, bf16" : "T=4096 forward-only", got, want, nout,
                                tol->out_a, tol->out_r);
        print_message("%s fused%s B=1 T=4096 forward-only: max error out %.2g\n", be->name, bf16 ? " bf16" : "", e);
        free(got);
    }
    be->matmul = was;
    be->release(be, qkv);
    be->release(be, out);
    be->release(be, (void *)bias.table[0]);
    free(want);
    free_problem(&pb);
}

/* ---- bf16 storage ---------------------------------------------------------------------------- */

static uint16_t *bf16_bits_of(const float *x, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    assert_non_null(h);
    for (size_t k = 0; k < n; k++)
        h[k] = bk_bf16_round(x[k]);
    return h;
}

static float *floats_of_bf16(bk_backend *be, const uint16_t *dev, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    float *f = malloc((n ? n : 1) * sizeof *f);
    assert_non_null(h);
    assert_non_null(f);
    bk_error err = {0};
    if (n && be->download(be, h, dev, n * sizeof *h, &err) != BK_OK)
        fail_msg("%s: download of %zu bf16 values: %s", be->name, n, err.message);
    for (size_t k = 0; k < n; k++)
        f[k] = bk_bf16_value(h[k]);
    free(h);
    return f;
}

/* The attention with bf16 storage (attention_forward / attention_backward with BK_STORAGE_BF16) against the same
 * tensor-core programs with fp32 storage of the same values: q, k, v and dO are made bf16 values first,
 * and the fp32 backward is given the bf16 output as O. Then the storage is the only difference, and
 * everything must come out in the same bits: the output (bf16, the rounded fp32 output), the row
 * statistics, dqkv (accumulated into dqkv0) and the table gradients (into dtable0). */
static void check_bf16_storage(bk_backend *be, int B, int T, int C, int H, int flags, uint64_t seed)
{
    problem pb = make_problem(B, T, C, H, flags, seed);
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nsaved = (size_t)B * H * T;
    for (size_t k = 0; k < nqkv; k++)
        pb.qkv[k] = bk_bf16_value(bk_bf16_round(pb.qkv[k]));
    for (size_t k = 0; k < nout; k++)
        pb.dout[k] = bk_bf16_value(bk_bf16_round(pb.dout[k]));
    char label[160];
    snprintf(label, sizeof label, "%s bf16 storage B=%d T=%d C=%d H=%d flags=%d", be->name, B, T, C, H, flags);

    bk_attention_bias bias;
    memset(&bias, 0, sizeof bias);
    bias.distances = pb.D;
    float *dtab32[BK_STREAM_COUNT] = {NULL, NULL}, *dtab16[BK_STREAM_COUNT] = {NULL, NULL};
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        bias.span[s] = pb.span[s];
        if (pb.table[s]) {
            bias.table[s] = dev_copy_of(be, pb.table[s], table_floats(&pb) * sizeof(float));
            dtab32[s] = dev_copy_of(be, pb.dtable0[s], table_floats(&pb) * sizeof(float));
            dtab16[s] = dev_copy_of(be, pb.dtable0[s], table_floats(&pb) * sizeof(float));
        }
        if (pb.pos[s])
            bias.positions[s] = dev_copy_of(be, pb.pos[s], (size_t)B * T * sizeof(int32_t));
    }
    bk_error err = {0};

    /* fp32 storage; the backward's O is the output rounded to bf16 */
    float *qkv = dev_copy_of(be, pb.qkv, nqkv * sizeof(float)), *dout = dev_copy_of(be, pb.dout, nout * sizeof(float));
    float *out = dev_alloc(be, nout * sizeof(float)), *lse = dev_alloc(be, nsaved * sizeof(float));
    float *dqkv = dev_copy_of(be, pb.dqkv0, nqkv * sizeof(float));
    if (be->attention_forward(be, BK_STORAGE_FP32, out, lse, qkv, &bias, B, T, C, H, &err) != BK_OK)
        fail_msg("%s: fp32 forward: %s", label, err.message);
    float *out32 = host_copy_of(be, out, nout);
    for (size_t k = 0; k < nout; k++)
        out32[k] = bk_bf16_value(bk_bf16_round(out32[k]));
    float *o_rounded = dev_copy_of(be, out32, nout * sizeof(float));
    if (be->attention_backward(be, BK_STORAGE_FP32, dqkv, dtab32, dout, qkv, o_rounded, lse, &bias, B, T, C, H, &err) != BK_OK)
        fail_msg("%s: fp32 backward: %s", label, err.message);

    /* bf16 storage */
    uint16_t *h16 = bf16_bits_of(pb.qkv, nqkv);
    uint16_t *qkv16 = dev_copy_of(be, h16, nqkv * sizeof(uint16_t));
    free(h16);
    h16 = bf16_bits_of(pb.dout, nout);
    uint16_t *dout16 = dev_copy_of(be, h16, nout * sizeof(uint16_t));
    free(h16);
    uint16_t *out16 = dev_alloc(be, nout * sizeof(uint16_t));
    float *lse16 = dev_alloc(be, nsaved * sizeof(float)), *dqkv16 = dev_copy_of(be, pb.dqkv0, nqkv * sizeof(float));
    if (be->attention_forward(be, BK_STORAGE_BF16, out16, lse16, qkv16, &bias, B, T, C, H, &err) != BK_OK)
        fail_msg("%s: forward: %s", label, err.message);
    if (be->attention_backward(be, BK_STORAGE_BF16, dqkv16, dtab16, dout16, qkv16, out16, lse16, &bias, B, T, C, H, &err) !=
        BK_OK)
        fail_msg("%s: backward: %s", label, err.message);

    float *a = floats_of_bf16(be, out16, nout);
    expect_same_bits("out (bf16 storage vs the fp32 output rounded)", label, a, out32, nout);
    free(a);
    float *x = host_copy_of(be, lse, nsaved), *y = host_copy_of(be, lse16, nsaved);
    expect_same_bits("row log-sum-exp", label, y, x, nsaved);
    free(x), free(y);
    x = host_copy_of(be, dqkv, nqkv), y = host_copy_of(be, dqkv16, nqkv);
    expect_same_bits("dqkv", label, y, x, nqkv);
    free(x), free(y);
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (!dtab32[s])
            continue;
        x = host_copy_of(be, dtab32[s], table_floats(&pb)), y = host_copy_of(be, dtab16[s], table_floats(&pb));
        expect_same_bits(s ? "segment table gradient" : "token table gradient", label, y, x, table_floats(&pb));
        free(x), free(y);
    }

    free(out32);
    void *bufs[] = {qkv, dout, out, lse, dqkv, o_rounded, qkv16, dout16, out16, lse16, dqkv16};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->release(be, bufs[k]);
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        be->release(be, (void *)bias.table[s]);
        be->release(be, (void *)bias.positions[s]);
        be->release(be, dtab32[s]);
        be->release(be, dtab16[s]);
    }
    free_problem(&pb);
}

/* bf16 storage is refused, naming what it needs, outside the fused attention on bf16 tensor cores, and
 * without its inputs. */
static void check_bf16_storage_errors(bk_backend *be)
{
    const bk_matmul_mode was = be->matmul;
    bk_error err = {0};
    uint16_t *x = dev_alloc(be, 64 * sizeof(uint16_t));
    float *lse = dev_alloc(be, 64 * sizeof(float));
    be->matmul = BK_MATMUL_FP32;
    assert_int_equal(be->attention_forward(be, BK_STORAGE_BF16, x, lse, x, NULL, 1, 2, 16, 2, &err), BK_ERR_UNSUPPORTED);
    assert_message_has(err.message, "bf16 storage needs the fused attention on bf16 tensor cores");
    assert_message_has(err.message, "matmul = \"fp32\"");
    be->matmul = BK_MATMUL_BF16;
    be->attention = BK_ATTENTION_MATERIALIZED;
    assert_int_equal(be->attention_backward(be, BK_STORAGE_BF16, (float *)lse, NULL, x, x, x, lse, NULL, 1, 2, 16, 2, &err),
                     BK_ERR_UNSUPPORTED);
    assert_message_has(err.message, "attention = \"materialized\"");
    be->attention = BK_ATTENTION_FUSED;
    assert_int_equal(be->attention_forward(be, BK_STORAGE_BF16, x, lse, NULL, NULL, 1, 2, 16, 2, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "qkv is NULL");
    assert_int_equal(be->attention_backward(be, BK_STORAGE_BF16, (float *)lse, NULL, x, x, x, NULL, NULL, 1, 2, 16, 2, &err),
                     BK_ERR_INVALID);
    assert_message_has(err.message, "saved is NULL");
    /* a head too large for the fused programs (512 > 480 in bf16): the advice leaves bf16 storage */
    assert_int_equal(be->attention_forward(be, BK_STORAGE_BF16, x, lse, x, NULL, 1, 2, 1024, 2, &err), BK_ERR_UNSUPPORTED);
    assert_message_has(err.message, "head size 512 is too large for the fused attention");
    assert_message_has(err.message, "with precision = \"fp32\" (bf16 storage needs the fused attention)");
    be->release(be, x);
    be->release(be, lse);
    be->matmul = was;
}

/* The fused attention (the default) and the materialized one. */
static void check_modes(bk_backend *be)
{
    assert_int_equal(be->attention, BK_ATTENTION_FUSED);
    check_all(be);
    check_errors(be);
    be->attention = BK_ATTENTION_MATERIALIZED;
    check_all(be);
    check_errors(be);
    be->attention = BK_ATTENTION_FUSED;

    /* bf16 tensor-core products: tiles of 64 (hd 8, 32, 64), 32 (hd 160) rows; head sizes that are
     * not multiples of 16 are padded */
    const bk_matmul_mode was = be->matmul;
    be->matmul = BK_MATMUL_BF16;
    uint64_t seed = 100;
    check_case_tol(be, &tol_bf16, 3, 37, 96, 12, 0, seed++);
    check_case_tol(be, &tol_bf16, 3, 130, 96, 12, BIAS_TOKEN | BIAS_SEGMENT, seed++);
    check_case_tol(be, &tol_bf16, 2, 130, 64, 2, BIAS_TOKEN, seed++);
    check_case_tol(be, &tol_bf16, 2, 150, 128, 2, BIAS_TOKEN | BIAS_SEGMENT, seed++);
    check_case_tol(be, &tol_bf16, 2, 70, 320, 2, BIAS_SEGMENT, seed++);
    check_case_tol(be, &tol_bf16, 2, 40, 72, 3, BIAS_TOKEN_EXPLICIT | BIAS_SEGMENT, seed++); /* hd 24 */
    check_case_tol(be, &tol_bf16, 2, 1, 96, 12, BIAS_TOKEN, seed++);
    /* bf16 storage: tiles of 64 (hd 8, 64) and 32 (hd 160) rows, a head size padded to 16 (24), both
     * streams, lengths that are not multiples of the tile, one token */
    check_bf16_storage(be, 3, 37, 96, 12, 0, seed++);
    check_bf16_storage(be, 2, 130, 64, 1, BIAS_TOKEN | BIAS_SEGMENT, seed++);
    check_bf16_storage(be, 2, 70, 320, 2, BIAS_SEGMENT, seed++);
    check_bf16_storage(be, 2, 40, 72, 3, BIAS_TOKEN_EXPLICIT | BIAS_SEGMENT, seed++);
    check_bf16_storage(be, 1, 1, 96, 12, BIAS_TOKEN, seed++);
    be->matmul = was;
    check_bf16_storage_errors(be);
    check_long_forward(be);

    /* a GPU that lets a block have 48 KiB of shared memory only: smaller tiles (head size 64 in fp32:
     * 16 rows instead of 32), and a refusal that says the limit is this GPU's */
    if (be->kind == BK_BACKEND_EMULATED) {
        bk_dev *d = (bk_dev *)be->impl;
        d->smem_optin = 48 * 1024;
        check_case(be, 2, 70, 128, 2, BIAS_TOKEN | BIAS_SEGMENT, seed++);
        be->matmul = BK_MATMUL_BF16;
        check_case_tol(be, &tol_bf16, 2, 70, 128, 2, BIAS_TOKEN, seed++);
        be->matmul = was;
        bk_error err = {0};
        float *x = dev_alloc(be, 4);
        assert_int_equal(be->attention_forward(be, BK_STORAGE_FP32, x, x, x, NULL, 1, 4, 512, 2, &err), BK_ERR_UNSUPPORTED);
        assert_message_has(err.message, "head size 256");
        assert_message_has(err.message, "at most 49152 allowed on this GPU");
        be->release(be, x);
        d->smem_optin = 0;
    }
}

static void emulated_matches_cpu(void **state)
{
    (void)state;
    bk_backend *be = NULL;
    bk_error err = {0};
    if (bk_backend_emulated_create(&be, BK_MATMUL_FP32, &err) != BK_OK)
        fail_msg("bk_backend_emulated_create: %s", err.message);
    check_modes(be);
    bk_backend_destroy(be);
    /* the CPU has no bf16 storage: the one entry per operation refuses the tag, naming it */
    bk_backend *cpu = bk_backend_cpu();
    float x[8] = {0}, y[8] = {0};
    assert_int_equal(cpu->attention_forward(cpu, BK_STORAGE_BF16, y, NULL, x, NULL, 1, 1, 6, 1, &err),
                     BK_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "the CPU backend's attention_forward stores fp32 only"));
    assert_int_equal(cpu->matmul_forward(cpu, BK_STORAGE_BF16, y, x, x, NULL, 1, 1, 1, &err), BK_ERR_UNSUPPORTED);
    assert_int_equal(cpu->gelu_forward(cpu, BK_STORAGE_BF16, y, x, 8, &err), BK_ERR_UNSUPPORTED);
    assert_null(cpu->cast_bf16);
}

/* The fused backward's table-gradient partials on the token stream hold, for query tile qt, only the
 * distances below the tile's end (kernels_flash.h, k_flash_g_len): at T = 130 with tiles of 64 (head size
 * 8), rows of 64, 128 and 130 distances per (b, h) instead of 3 x 130 (check_case checks the gradient). */
static void table_partials_fit_their_tiles(void **state)
{
    (void)state;
    const int B = 2, T = 130, C = 16, H = 2;
    bk_backend *be = NULL;
    bk_error err = {0};
    if (bk_backend_emulated_create(&be, BK_MATMUL_FP32, &err) != BK_OK)
        fail_msg("bk_backend_emulated_create: %s", err.message);
    check_case(be, B, T, C, H, BIAS_TOKEN, 77);
    const bk_dev *d = (const bk_dev *)be->impl;
    assert_int_equal(d->scratch_bytes[BK_DEV_SCRATCH_ATT_G], (size_t)B * H * (64 + 128 + 130) * sizeof(double));
    bk_backend_destroy(be);
}

static void cuda_matches_cpu(void **state)
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
    check_modes(be);
    bk_backend_destroy(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(emulated_matches_cpu),
        cmocka_unit_test(table_partials_fit_their_tiles),
        cmocka_unit_test(cuda_matches_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
