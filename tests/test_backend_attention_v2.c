/* The device backends' fused attention (core/gpu/kernels_flash.h, kernels_flash_tc.h, ops_flash.h) with the
 * ABI 2 terms of bk_attention_bias (cpu/attention.h): the coordinate table (grid read at u = phi[i - j]
 * rscale[i]), the window mask with sinks, the logit scale, and their gradients dgrid, dphi, drscale,
 * dscale; on the emulated backend (the device code compiled as C) and, when a GPU answers, on the CUDA
 * backend, against the double-precision reference of tests/attention_ref.h:
 *
 *  - out, forward-only out (the same bits), the saved row log-sum-exp (against a double-precision one
 *    computed here), dqkv accumulated into a nonzero start, dtable (token and segment), dgrid, dphi,
 *    drscale and dscale (each accumulated into a nonzero start), for each term alone, all of them with
 *    both tables, window 1, a window >= T, 0, 1, 3 and 70 sinks (70 > the window, and more than a tile),
 *    lengths that are not multiples of the tile and span several tiles, one token, head sizes 8, 64 and
 *    160 (fp32 tiles of 64, 32 and 16 rows) and 24 (padded to 32 on tensor cores), a logit scale with
 *    zeros and negatives; fp32 and bf16 tensor-core products ([run] matmul = "bf16");
 *  - two runs give the same bits, the second (emulated) with every phase's threads in reverse order;
 *  - bf16 storage (attention_forward / attention_backward with BK_STORAGE_BF16) gives the bits of fp32 storage of
 *    the same values on the same tensor-core programs, the ABI 2 gradients included;
 *  - tile skipping: the key tiles a query tile walks (k_flash_key_tiles / k_flash_kt_next) and the query
 *    tiles a key tile walks (k_flash_qt_end) are exactly those bk_mask_tile does not classify SKIP, with
 *    the counts of the windows-and-sinks digest at tiles of 128 (T = 1024, w = 256: 7 full, 14 partial,
 *    43 skipped of 64; with 4 sinks 7 / 19 / 38; T = 4096, w = 512, 4 sinks: 90 / 87 / 847 of 1024), and
 *    the emulated programs visit exactly that many tile pairs (bk_emulated_tile_visits);
 *  - the materialized attention refuses each ABI 2 term naming [run] attention = "fused", and the fused
 *    one refuses malformed terms naming them;
 *  - the content position (cpos, dcpos; random and non-decreasing per (b, h)) alone and with the other terms,
 *    with windows and sinks, the logit scale, head sizes 8, 64, 160 and 24, lengths off the tiles, one token,
 *    fp32 and bf16 products and bf16 storage, against the CPU's attention (cpu/attention.c: attention_ref.h
 *    has no content position) with the tolerances below (dcpos: those of dtable); and dcpos's query sums
 *    (a row's sum of dS, 0 when the backward gets the forward's own output, so invisible above) against a
 *    double-precision sum with a random O given to the backward (dcpos_counts_query_sums), on both
 *    generations and the tensor-core programs;
 *  - counted positions (CoPE: cope, dcope) on the materialized attention against the CPU's, alone and with
 *    the distance tables, head sizes 8 and 64, T = 1, 33 and 130, 3 vectors (counts clamp) and 200, and the
 *    refusals: the fused attention refuses CoPE naming BIASKIT_CAP_COUNT and attention = "materialized",
 *    the materialized one refuses CoPE with a window (emulated_cope_matches_cpu, cuda_cope_matches_cpu).
 *
 * The test's coordinate: FIRE's phi(d) = log(c d + 1), rscale(i) = 1 / log(c max(i, L) + 1), cut to
 * multiples of 2^-10 (phi) and 2^-8 (rscale), rounded down (so u(i, i) <= 1 still), and points - 1 a power of
 * two: then u and u (points - 1) are exact in float, so the device (float) and the reference (double) pick the
 * same cell for every pair; the slope jumps from cell to cell, so dphi and drscale could not be compared
 * otherwise.
 *
 * Tolerances, |device - reference| <= atol + rtol |reference| (reference: double, rounded to float after the
 * starting value is added). Largest errors seen emulated over the cases below (2026-11-25) in parentheses;
 * the bounds are 3 to 10 times those, for the GPU's expf and other sum orders:
 *   fp32 products                             bf16 products (q, k, v, dO, P, dS rounded to bf16 before them)
 *   out      1e-6 + 1e-5 |x|  (1.8e-7)        1e-2 + 1e-2 |x|  (2.8e-3)
 *   lse      1e-5 + 1e-5 |x|  (4.8e-7)        5e-3 + 5e-3 |x|  (2.1e-3)
 *   dqkv     1e-5 + 1e-4 |x|  (1.9e-6)        2e-2 + 2e-2 |x|  (5.9e-3)
 *   dtable   2e-5 + 1e-4 |x|  (3.6e-6)        1e-1 + 5e-2 |x|  (3.9e-2)
 *   dgrid    2e-5 + 1e-4 |x|  (3.8e-6)        1e-1 + 5e-2 |x|  (3.6e-2)
 *   dphi     5e-4 + 2e-4 |x|  (1.9e-5)        5e-2 + 5e-2 |x|  (2.9e-3)
 *   drscale  5e-4 + 2e-4 |x|  (6.1e-5)        5e-2 + 5e-2 |x|  (1.1e-2)
 *   dscale   2e-5 + 1e-4 |x|  (9.5e-7)        5e-2 + 5e-2 |x|  (5.2e-3)
 * dphi and drscale are sums of dS slope rscale and dS slope phi, with slopes up to 2 (points - 1) (32, 64) for
 * the fp32 cases' random grids (values up to about 120); the bf16 cases use smooth grids (spec.smooth):
 * dS's bf16 error times slopes of 32 would be most of what is measured. Window 1 gives the largest bf16
 * errors of dtable and dgrid: there dS = P (dP - D) is 0 but for rounding, D = dO . O being computed from
 * the fp32 values and dP from their bf16 roundings.
 * (see print_message's lines for each case's largest errors). */
#include "test_util.h"
#include "test_random.h"
#include "test_floats.h"

#include "attention_ref.h"
#include "cpu/attention.h"
#include "cuda/device.h"
#include "gpu/dev.h"           /* bk_emulated_thread_order, bk_emulated_tile_visits */
#include "gpu/kernels_flash.h" /* k_flash_key_tiles, k_flash_kt_next, k_flash_qt_end */
#include "gpu/mma.h"           /* bk_bf16_round, bk_bf16_value */
#include "model/backend.h"
#include "model/bias_math.h"

#include <math.h>
#include <stdlib.h>

enum {
    V2_TOKEN = 1,   /* token-stream table (positions NULL) */
    V2_SEGMENT = 2, /* segment-stream table with positions: repeats and gaps */
    V2_GRID = 4,    /* coordinate table with phi, rscale */
    V2_SCALE = 8,   /* logit scale (zeros and negatives among its values) */
    V2_CPOS = 16    /* content position (random, non-decreasing per (b, h)): the reference is then the CPU's */
};

enum { NO_DGRID = 1, NO_DPHI = 2, NO_DRSCALE = 4, NO_DSCALE = 8, NO_DCPOS = 16 };

typedef struct spec {
    int B, T, C, H, flags, window, sinks, points;
    int no_grads; /* gradients not asked for: NO_DGRID | NO_DPHI | NO_DRSCALE | NO_DSCALE | NO_DCPOS (their
                     outputs NULL) */
    int smooth; /* the grid a random walk of steps up to 0.05 (slopes up to 0.05 (points - 1)) instead of
                   independent values in [-1, 1] (slopes up to 2 (points - 1)) */
} spec;

typedef struct problem {
    spec sp;
    int D;
    float *qkv, *dout, *dqkv0;
    float *table[BK_STREAM_COUNT], *dtable0[BK_STREAM_COUNT];
    int32_t *pos[BK_STREAM_COUNT], span[BK_STREAM_COUNT];
    float *grid, *phi, *rscale, *scale, *cpos;
    float *dgrid0, *dphi0, *drscale0, *dscale0, *dcpos0;
} problem;

typedef struct result {
    float *out, *out_fwd_only, *lse, *dqkv;
    float *dtable[BK_STREAM_COUNT];
    float *dgrid, *dphi, *drscale, *dscale, *dcpos;
} result;


/* Segment positions: each row from 0, steps of 0 (repeat), 1 or 3 (gap). */
static int32_t *segment_positions(int B, int T)
{
    int32_t *p = malloc((size_t)B * T * sizeof *p);
    assert_non_null(p);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const double u = 0.5 * (uniform() + 1.0);
            p[b * T + t] = t == 0 ? 0 : p[b * T + t - 1] + (u < 0.6 ? 0 : u < 0.7 ? 3 : 1);
        }
    return p;
}

static problem make_problem(const spec *sp, uint64_t seed)
{
    rng_state = seed;
    problem pb;
    memset(&pb, 0, sizeof pb);
    pb.sp = *sp;
    const int B = sp->B, T = sp->T, C = sp->C, H = sp->H;
    pb.qkv = random_floats((size_t)B * T * 3 * C, 1.0);
    pb.dout = random_floats((size_t)B * T * C, 1.0);
    pb.dqkv0 = random_floats((size_t)B * T * 3 * C, 0.5);
    int32_t far = T;
    if (sp->flags & V2_TOKEN)
        pb.span[0] = T;
    if (sp->flags & V2_SEGMENT) {
        pb.pos[1] = segment_positions(B, T);
        pb.span[1] = 1;
        for (int b = 0; b < B; b++) {
            const int32_t d = pb.pos[1][b * T + T - 1] - pb.pos[1][b * T] + 1;
            pb.span[1] = d > pb.span[1] ? d : pb.span[1];
        }
        far = pb.span[1] > far ? pb.span[1] : far;
    }
    pb.D = far + 5;
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (pb.span[s]) {
            pb.table[s] = random_floats((size_t)H * pb.D, 1.0);
            pb.dtable0[s] = random_floats((size_t)H * pb.D, 0.5);
        }
    if (sp->flags & V2_GRID) {
        const int P = sp->points;
        pb.grid = random_floats((size_t)H * P, 1.0);
        if (sp->smooth)
            for (int h = 0; h < H; h++)
                for (int g = 1; g < P; g++)
                    pb.grid[h * P + g] = pb.grid[h * P + g - 1] + 0.05f * pb.grid[h * P + g];
        pb.dgrid0 = random_floats((size_t)H * P, 0.5);
        pb.dphi0 = random_floats((size_t)pb.D, 0.5);
        pb.drscale0 = random_floats((size_t)T, 0.5);
        pb.phi = malloc((size_t)pb.D * sizeof *pb.phi);
        pb.rscale = malloc((size_t)T * sizeof *pb.rscale);
        assert_non_null(pb.phi);
        assert_non_null(pb.rscale);
        const double c = 0.37, L = T / 3 > 1 ? T / 3 : 1;
        for (int d = 0; d < pb.D; d++)
            pb.phi[d] = (float)(floor(log(c * d + 1.0) * 1024.0) / 1024.0);
        for (int i = 0; i < T; i++)
            pb.rscale[i] = (float)(floor(256.0 / log(c * (i > L ? i : L) + 1.0)) / 256.0);
    }
    if (sp->flags & V2_SCALE) {
        pb.scale = random_floats((size_t)H * T, 1.5);
        for (int k = 0; k < H * T; k += 5)
            pb.scale[k] = 0.0f; /* a row whose scores are the bias alone */
        pb.dscale0 = random_floats((size_t)H * T, 0.5);
    }
    if (sp->flags & V2_CPOS) { /* per (b, h): from a random start in [-1, 1), steps in [0, 0.5) */
        pb.cpos = malloc((size_t)B * H * T * sizeof *pb.cpos);
        assert_non_null(pb.cpos);
        for (int bh = 0; bh < B * H; bh++)
            for (int t = 0; t < T; t++)
                pb.cpos[bh * T + t] =
                    t == 0 ? (float)uniform() : pb.cpos[bh * T + t - 1] + 0.25f * (float)(uniform() + 1.0);
        pb.dcpos0 = random_floats((size_t)B * H * T, 0.5);
    }
    return pb;
}

static void free_problem(problem *pb)
{
    free(pb->qkv), free(pb->dout), free(pb->dqkv0);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        free(pb->table[s]), free(pb->dtable0[s]), free(pb->pos[s]);
    free(pb->grid), free(pb->phi), free(pb->rscale), free(pb->scale), free(pb->cpos);
    free(pb->dgrid0), free(pb->dphi0), free(pb->drscale0), free(pb->dscale0), free(pb->dcpos0);
}

static void free_result(result *r)
{
    free(r->out), free(r->out_fwd_only), free(r->lse), free(r->dqkv);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        free(r->dtable[s]);
    free(r->dgrid), free(r->dphi), free(r->drscale), free(r->dscale), free(r->dcpos);
    memset(r, 0, sizeof *r);
}

static size_t table_floats(const problem *pb)
{
    return (size_t)pb->sp.H * pb->D;
}

/* The bias with the problem's host arrays (no gradient outputs). */
static bk_attention_bias host_bias(const problem *pb)
{
    bk_attention_bias bias;
    memset(&bias, 0, sizeof bias);
    bias.distances = pb->D;
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        bias.table[s] = pb->table[s], bias.positions[s] = pb->pos[s], bias.span[s] = pb->span[s];
    bias.grid = pb->grid, bias.phi = pb->phi, bias.rscale = pb->rscale, bias.points = pb->sp.points;
    bias.window = pb->sp.window, bias.sinks = pb->sp.sinks;
    bias.scale = pb->scale;
    bias.cpos = pb->cpos;
    return bias;
}

/* start + reference, rounded to float once (n values; start may be NULL: 0) */
static float *want_of(const float *start, const double *ref, size_t n)
{
    float *w = malloc((n ? n : 1) * sizeof *w);
    assert_non_null(w);
    for (size_t k = 0; k < n; k++)
        w[k] = (float)((start ? (double)start[k] : 0.0) + ref[k]);
    return w;
}

/* The saved row statistics in double: lse[b][h][i] = log sum over the visible j of exp(s_ij), with s_ij the
 * reference's score (attention_ref.h). */
static float *reference_lse(const problem *pb)
{
    const int B = pb->sp.B, T = pb->sp.T, C = pb->sp.C, H = pb->sp.H, hd = C / H;
    float *lse = malloc((size_t)B * H * T * sizeof *lse);
    double *s = malloc((size_t)T * sizeof *s);
    assert_non_null(lse);
    assert_non_null(s);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const float *q = pb->qkv + ((size_t)b * T + i) * 3 * C + (size_t)h * hd;
                const double lam = pb->scale ? pb->scale[(size_t)h * T + i] : 1.0;
                double mx = -INFINITY, sum = 0.0;
                for (int j = 0; j <= i; j++) {
                    s[j] = -INFINITY;
                    if (!bk_mask_keeps(i, j, pb->sp.window, pb->sp.sinks))
                        continue;
                    const float *k = pb->qkv + ((size_t)b * T + j) * 3 * C + C + (size_t)h * hd;
                    double dot = 0.0;
                    for (int d = 0; d < hd; d++)
                        dot += (double)q[d] * k[d];
                    s[j] = lam * dot / sqrt((double)hd);
                    for (int st = 0; st < BK_STREAM_COUNT; st++)
                        if (pb->table[st]) {
                            const int32_t *p = pb->pos[st] ? pb->pos[st] + (size_t)b * T : NULL;
                            s[j] += pb->table[st][(size_t)h * pb->D + (p ? p[i] - p[j] : i - j)];
                        }
                    if (pb->grid) {
                        double t;
                        const int g = ref_cell((double)pb->phi[i - j] * pb->rscale[i], pb->sp.points, &t);
                        const float *F = pb->grid + (size_t)h * pb->sp.points;
                        s[j] += F[g] + t * ((double)F[g + 1] - F[g]);
                    }
                    if (pb->cpos) {
                        const float *P = pb->cpos + ((size_t)b * H + h) * T;
                        s[j] += (double)P[j] - P[i];
                    }
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j <= i; j++)
                    sum += s[j] == -INFINITY ? 0.0 : exp(s[j] - mx);
                lse[((size_t)b * H + h) * T + i] = (float)(mx + log(sum));
            }
    free(s);
    return lse;
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
    if (!host)
        return NULL;
    void *p = dev_alloc(be, bytes);
    bk_error err = {0};
    if (bytes && be->upload(be, p, host, bytes, &err) != BK_OK)
        fail_msg("%s: upload of %zu bytes: %s", be->name, bytes, err.message);
    return p;
}

static float *host_copy_of(bk_backend *be, const void *dev, size_t n)
{
    if (!dev)
        return NULL;
    float *h = malloc((n ? n : 1) * sizeof *h);
    assert_non_null(h);
    bk_error err = {0};
    if (n && be->download(be, h, dev, n * sizeof *h, &err) != BK_OK)
        fail_msg("%s: download of %zu floats: %s", be->name, n, err.message);
    return h;
}

/* The problem's bias in backend memory with its gradient outputs (copies of the starting values). */
typedef struct dev_bias {
    bk_attention_bias bias;
    float *dtable[BK_STREAM_COUNT];
} dev_bias;

static dev_bias dev_bias_of(bk_backend *be, const problem *pb)
{
    const int T = pb->sp.T, H = pb->sp.H, P = pb->sp.points;
    dev_bias db;
    memset(&db, 0, sizeof db);
    db.bias = host_bias(pb);
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        db.bias.table[s] = dev_copy_of(be, pb->table[s], table_floats(pb) * sizeof(float));
        db.bias.positions[s] = dev_copy_of(be, pb->pos[s], (size_t)pb->sp.B * T * sizeof(int32_t));
        db.dtable[s] = dev_copy_of(be, pb->dtable0[s], table_floats(pb) * sizeof(float));
    }
    db.bias.grid = dev_copy_of(be, pb->grid, (size_t)H * P * sizeof(float));
    db.bias.phi = dev_copy_of(be, pb->phi, (size_t)pb->D * sizeof(float));
    db.bias.rscale = dev_copy_of(be, pb->rscale, (size_t)T * sizeof(float));
    db.bias.scale = dev_copy_of(be, pb->scale, (size_t)H * T * sizeof(float));
    db.bias.cpos = dev_copy_of(be, pb->cpos, (size_t)pb->sp.B * H * T * sizeof(float));
    const int no = pb->sp.no_grads;
    db.bias.dgrid = no & NO_DGRID ? NULL : dev_copy_of(be, pb->dgrid0, (size_t)H * P * sizeof(float));
    db.bias.dphi = no & NO_DPHI ? NULL : dev_copy_of(be, pb->dphi0, (size_t)pb->D * sizeof(float));
    db.bias.drscale = no & NO_DRSCALE ? NULL : dev_copy_of(be, pb->drscale0, (size_t)T * sizeof(float));
    db.bias.dscale = no & NO_DSCALE ? NULL : dev_copy_of(be, pb->dscale0, (size_t)H * T * sizeof(float));
    db.bias.dcpos = no & NO_DCPOS ? NULL : dev_copy_of(be, pb->dcpos0, (size_t)pb->sp.B * H * T * sizeof(float));
    return db;
}

/* The gradient outputs downloaded into r. */
static void dev_bias_results(bk_backend *be, const problem *pb, const dev_bias *db, result *r)
{
    const int T = pb->sp.T, H = pb->sp.H, P = pb->sp.points;
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        r->dtable[s] = host_copy_of(be, db->dtable[s], table_floats(pb));
    r->dgrid = host_copy_of(be, db->bias.dgrid, (size_t)H * P);
    r->dphi = host_copy_of(be, db->bias.dphi, (size_t)pb->D);
    r->drscale = host_copy_of(be, db->bias.drscale, (size_t)T);
    r->dscale = host_copy_of(be, db->bias.dscale, (size_t)H * T);
    r->dcpos = host_copy_of(be, db->bias.dcpos, (size_t)pb->sp.B * H * T);
}

static void dev_bias_release(bk_backend *be, dev_bias *db)
{
    void *bufs[] = {(void *)db->bias.grid, (void *)db->bias.phi, (void *)db->bias.rscale, (void *)db->bias.scale,
                    (void *)db->bias.cpos, db->bias.dgrid,        db->bias.dphi,          db->bias.drscale,
                    db->bias.dscale,       db->bias.dcpos};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        if (bufs[k])
            be->release(be, bufs[k]);
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (db->bias.table[s])
            be->release(be, (void *)db->bias.table[s]);
        if (db->bias.positions[s])
            be->release(be, (void *)db->bias.positions[s]);
        if (db->dtable[s])
            be->release(be, db->dtable[s]);
    }
}

/* The problem on backend `be` (fp32 storage): forward into NaN-filled `saved` and out (an entry the forward
 * does not write shows), forward-only, backward into the starting values. */
static result run_device(bk_backend *be, const problem *pb)
{
    const int B = pb->sp.B, T = pb->sp.T, C = pb->sp.C, H = pb->sp.H;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nsaved = (size_t)B * H * T;
    assert_int_equal(be->attention_saved(be, B, T, H), nsaved);
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
    dev_bias db = dev_bias_of(be, pb);

    bk_error err = {0};
    if (be->attention_forward(be, BK_STORAGE_FP32, out, saved, qkv, &db.bias, B, T, C, H, &err) != BK_OK)
        fail_msg("%s attention forward (saved): %s", be->name, err.message);
    if (be->attention_forward(be, BK_STORAGE_FP32, out2, NULL, qkv, &db.bias, B, T, C, H, &err) != BK_OK)
        fail_msg("%s attention forward (forward-only): %s", be->name, err.message);
    if (be->attention_backward(be, BK_STORAGE_FP32, dqkv, db.dtable, dout, qkv, out, saved, &db.bias, B, T, C, H, &err) != BK_OK)
        fail_msg("%s attention backward: %s", be->name, err.message);

    result r;
    memset(&r, 0, sizeof r);
    r.out = host_copy_of(be, out, nout);
    r.out_fwd_only = host_copy_of(be, out2, nout);
    r.lse = host_copy_of(be, saved, nsaved);
    r.dqkv = host_copy_of(be, dqkv, nqkv);
    dev_bias_results(be, pb, &db, &r);
    void *bufs[] = {qkv, dout, dqkv, saved, out, out2};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->release(be, bufs[k]);
    dev_bias_release(be, &db);
    return r;
}

/* ---- comparisons ----------------------------------------------------------------------------- */

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
    if (!a && !b)
        return;
    assert_non_null(a);
    assert_non_null(b);
    for (size_t k = 0; k < n; k++)
        if (memcmp(&a[k], &b[k], sizeof *a))
            fail_msg("%s: %s differs at [%zu]: %.9g vs %.9g", label, what, k, (double)a[k], (double)b[k]);
}

typedef struct tolerances {
    double out_a, out_r, lse_a, lse_r, dqkv_a, dqkv_r, dtab_a, dtab_r, dgrid_a, dgrid_r, dphi_a, dphi_r, drs_a, drs_r,
        dsc_a, dsc_r, dcp_a, dcp_r;
} tolerances;

/* the header's table */
static const tolerances tol_fp32 = {1e-6, 1e-5, 1e-5, 1e-5, 1e-5, 1e-4, 2e-5, 1e-4, 2e-5,
                                    1e-4, 5e-4, 2e-4, 5e-4, 2e-4, 2e-5, 1e-4, 2e-5, 1e-4};
static const tolerances tol_bf16 = {1e-2, 1e-2, 5e-3, 5e-3, 2e-2, 2e-2, 1e-1, 5e-2, 1e-1,
                                    5e-2, 5e-2, 5e-2, 5e-2, 5e-2, 5e-2, 5e-2, 1e-1, 5e-2};

static void label_of(char *label, size_t size, const bk_backend *be, const spec *sp)
{
    snprintf(label, size, "%s%s B=%d T=%d C=%d H=%d%s%s%s%s%s w=%d sinks=%d%s", be->name,
             be->matmul == BK_MATMUL_BF16 ? " bf16" : "", sp->B, sp->T, sp->C, sp->H, sp->flags & V2_TOKEN ? " token" : "",
             sp->flags & V2_SEGMENT ? " segment" : "", sp->flags & V2_GRID ? " grid" : "",
             sp->flags & V2_SCALE ? " scale" : "", sp->flags & V2_CPOS ? " cpos" : "", sp->window, sp->sinks,
             sp->no_grads ? " (some gradients)" : "");
}

/* The CPU attention (cpu/attention.c, itself checked against PyTorch) as the reference of a case with a
 * content position: ref's arrays (allocated by ref_grads_alloc) receive its out and gradients, each from 0;
 * returns dcpos (B*H*T doubles). */
static double *cpu_reference(ref_grads *ref, const problem *pb)
{
    const int B = pb->sp.B, T = pb->sp.T, C = pb->sp.C, H = pb->sp.H, P = pb->sp.points;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nbht = (size_t)B * H * T;
    bk_attention_bias bias = host_bias(pb);
    float *out = calloc(nout, sizeof *out), *probs = calloc(nbht * T, sizeof *probs);
    float *dqkv = calloc(nqkv, sizeof *dqkv), *dcpos = calloc(nbht, sizeof *dcpos);
    float *dtable[BK_STREAM_COUNT] = {NULL};
    assert_non_null(out);
    assert_non_null(probs);
    assert_non_null(dqkv);
    assert_non_null(dcpos);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (pb->table[s])
            dtable[s] = calloc(table_floats(pb), sizeof(float));
    if (pb->grid) {
        bias.dgrid = calloc((size_t)H * P, sizeof(float));
        bias.dphi = calloc((size_t)pb->D, sizeof(float));
        bias.drscale = calloc((size_t)T, sizeof(float));
    }
    if (pb->scale)
        bias.dscale = calloc((size_t)H * T, sizeof(float));
    bias.dcpos = dcpos;
    bk_error err = {0};
    if (bk_attention_forward(out, probs, pb->qkv, &bias, B, T, C, H, &err) != BK_OK)
        fail_msg("cpu attention forward: %s", err.message);
    if (bk_attention_backward(dqkv, dtable, pb->dout, pb->qkv, probs, &bias, B, T, C, H, &err) != BK_OK)
        fail_msg("cpu attention backward: %s", err.message);
    for (size_t k = 0; k < nout; k++)
        ref->out[k] = out[k];
    for (size_t k = 0; k < nqkv; k++)
        ref->dqkv[k] = dqkv[k];
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        for (size_t k = 0; dtable[s] && k < table_floats(pb); k++)
            ref->dtable[s][k] = dtable[s][k];
    for (int k = 0; pb->grid && k < H * P; k++)
        ref->dgrid[k] = bias.dgrid[k];
    for (int k = 0; pb->grid && k < pb->D; k++)
        ref->dphi[k] = bias.dphi[k];
    for (int k = 0; pb->grid && k < T; k++)
        ref->drscale[k] = bias.drscale[k];
    for (int k = 0; pb->scale && k < H * T; k++)
        ref->dscale[k] = bias.dscale[k];
    double *want = malloc(nbht * sizeof *want);
    assert_non_null(want);
    for (size_t k = 0; k < nbht; k++)
        want[k] = dcpos[k];
    free(out), free(probs), free(dqkv), free(dcpos);
    free(bias.dgrid), free(bias.dphi), free(bias.drscale), free(bias.dscale);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        free(dtable[s]);
    return want;
}

static void check_case_tol(bk_backend *be, const tolerances *tol, const spec *sp, uint64_t seed)
{
    char label[200];
    label_of(label, sizeof label, be, sp);
    problem pb = make_problem(sp, seed);
    const int B = sp->B, T = sp->T, C = sp->C, H = sp->H, P = sp->points;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nsaved = (size_t)B * H * T;

    bk_attention_bias bias = host_bias(&pb);
    ref_grads ref;
    ref_grads_alloc(&ref, &bias, B, T, C, H);
    double *ref_dcpos = NULL;
    if (pb.cpos) /* attention_ref.h has no content position: the CPU's attention is the reference */
        ref_dcpos = cpu_reference(&ref, &pb);
    else
        ref_attention(&ref, pb.qkv, pb.dout, &bias, B, T, C, H);
    result got = run_device(be, &pb);

    float *w = want_of(NULL, ref.out, nout);
    const double e_out = expect_close("out", label, got.out, w, nout, tol->out_a, tol->out_r);
    free(w);
    expect_same_bits("forward-only out vs saved out", label, got.out_fwd_only, got.out, nout);
    float *lse = reference_lse(&pb);
    const double e_lse = expect_close("saved row log-sum-exp", label, got.lse, lse, nsaved, tol->lse_a, tol->lse_r);
    free(lse);
    w = want_of(pb.dqkv0, ref.dqkv, nqkv);
    const double e_dqkv = expect_close("dqkv", label, got.dqkv, w, nqkv, tol->dqkv_a, tol->dqkv_r);
    free(w);
    double e_tab = 0.0, e_grid = 0.0, e_phi = 0.0, e_rs = 0.0, e_sc = 0.0, e_cp = 0.0;
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (pb.table[s]) {
            w = want_of(pb.dtable0[s], ref.dtable[s], table_floats(&pb));
            const double e = expect_close(s ? "dtable[segment]" : "dtable[token]", label, got.dtable[s], w,
                                          table_floats(&pb), tol->dtab_a, tol->dtab_r);
            e_tab = e > e_tab ? e : e_tab;
            free(w);
        }
    if (got.dgrid) {
        w = want_of(pb.dgrid0, ref.dgrid, (size_t)H * P);
        e_grid = expect_close("dgrid", label, got.dgrid, w, (size_t)H * P, tol->dgrid_a, tol->dgrid_r);
        free(w);
    }
    if (got.dphi) {
        w = want_of(pb.dphi0, ref.dphi, (size_t)pb.D);
        e_phi = expect_close("dphi", label, got.dphi, w, (size_t)pb.D, tol->dphi_a, tol->dphi_r);
        free(w);
    }
    if (got.drscale) {
        w = want_of(pb.drscale0, ref.drscale, (size_t)T);
        e_rs = expect_close("drscale", label, got.drscale, w, (size_t)T, tol->drs_a, tol->drs_r);
        free(w);
    }
    if (got.dscale) {
        w = want_of(pb.dscale0, ref.dscale, (size_t)H * T);
        e_sc = expect_close("dscale", label, got.dscale, w, (size_t)H * T, tol->dsc_a, tol->dsc_r);
        free(w);
    }
    if (pb.cpos && !(sp->no_grads & NO_DCPOS)) {
        assert_non_null(got.dcpos);
        w = want_of(pb.dcpos0, ref_dcpos, nsaved);
        e_cp = expect_close("dcpos", label, got.dcpos, w, nsaved, tol->dcp_a, tol->dcp_r);
        free(w);
    }
    print_message("%-78s max error out %.2g lse %.2g dqkv %.2g dtable %.2g dgrid %.2g dphi %.2g drscale %.2g "
                  "dscale %.2g dcpos %.2g\n",
                  label, e_out, e_lse, e_dqkv, e_tab, e_grid, e_phi, e_rs, e_sc, e_cp);

    /* a second run gives the same bits; emulated, with every phase's threads in the opposite order */
    if (be->kind == BK_BACKEND_EMULATED)
        bk_emulated_thread_order = 1;
    result again = run_device(be, &pb);
    bk_emulated_thread_order = 0;
    expect_same_bits("out (second run)", label, again.out, got.out, nout);
    expect_same_bits("forward-only out (second run)", label, again.out_fwd_only, got.out_fwd_only, nout);
    expect_same_bits("lse (second run)", label, again.lse, got.lse, nsaved);
    expect_same_bits("dqkv (second run)", label, again.dqkv, got.dqkv, nqkv);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        expect_same_bits("dtable (second run)", label, again.dtable[s], got.dtable[s], table_floats(&pb));
    expect_same_bits("dgrid (second run)", label, again.dgrid, got.dgrid, (size_t)H * P);
    expect_same_bits("dphi (second run)", label, again.dphi, got.dphi, (size_t)pb.D);
    expect_same_bits("drscale (second run)", label, again.drscale, got.drscale, (size_t)T);
    expect_same_bits("dscale (second run)", label, again.dscale, got.dscale, (size_t)H * T);
    expect_same_bits("dcpos (second run)", label, again.dcpos, got.dcpos, nsaved);

    free_result(&again);
    free_result(&got);
    ref_grads_free(&ref);
    free(ref_dcpos);
    free_problem(&pb);
}

static spec mk(int B, int T, int C, int H, int flags, int window, int sinks)
{
    spec sp;
    sp.B = B, sp.T = T, sp.C = C, sp.H = H, sp.flags = flags, sp.window = window, sp.sinks = sinks;
    sp.points = 17;
    sp.no_grads = 0, sp.smooth = 0;
    return sp;
}

/* The fp32 cases. Head size 8 (C 96, H 12) takes tiles of 64 rows (T = 130: 64 + 64 + 2), 64 (C 128, H 2)
 * tiles of 32 (T = 150: four and a part), 160 (C 320, H 2) tiles of 16. */
static void check_all_fp32(bk_backend *be)
{
    const int ALL = V2_TOKEN | V2_SEGMENT | V2_GRID | V2_SCALE;
    uint64_t seed = 1;
    spec sp;
    /* each term alone */
    sp = mk(2, 130, 96, 12, V2_GRID, 0, 0), check_case_tol(be, &tol_fp32, &sp, seed++);
    sp.points = 33, check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 130, 96, 12, V2_SCALE, 0, 0), check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 130, 96, 12, 0, 20, 0), check_case_tol(be, &tol_fp32, &sp, seed++);
    /* sinks 1 and 3 with a window; everything with both tables */
    sp = mk(2, 130, 96, 12, 0, 20, 3), check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 130, 96, 12, ALL, 37, 1), check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 130, 96, 12, ALL, 0, 0), check_case_tol(be, &tol_fp32, &sp, seed++);
    /* window 1 (the diagonal only), a window >= T, sinks beyond the window and beyond a tile */
    sp = mk(2, 130, 96, 12, V2_GRID | V2_SCALE | V2_TOKEN, 1, 0), check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 130, 96, 12, ALL, 140, 2), check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 130, 96, 12, ALL, 4, 70), check_case_tol(be, &tol_fp32, &sp, seed++);
    /* other tiles */
    sp = mk(2, 150, 128, 2, ALL, 50, 3), check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 70, 320, 2, ALL, 20, 1), check_case_tol(be, &tol_fp32, &sp, seed++);
    /* one token */
    sp = mk(2, 1, 96, 12, ALL, 3, 1), check_case_tol(be, &tol_fp32, &sp, seed++);
    /* some of the gradients asked for: each partial works without the others */
    static const int subsets[] = {NO_DGRID | NO_DRSCALE | NO_DSCALE, NO_DPHI | NO_DSCALE, NO_DGRID | NO_DPHI | NO_DRSCALE,
                                  NO_DGRID | NO_DPHI | NO_DRSCALE | NO_DSCALE};
    for (size_t k = 0; k < sizeof subsets / sizeof subsets[0]; k++)
        sp = mk(2, 130, 96, 12, ALL, 37, 1), sp.no_grads = subsets[k], check_case_tol(be, &tol_fp32, &sp, seed++);
    /* the content position (against the CPU's attention): alone, with a window and sinks, with the logit
     * scale, with everything; head sizes 8, 64, 160 (tiles 64, 32, 16) at lengths that are not multiples of
     * them; one token; without its gradient, and its gradient without the others */
    seed = 100;
    sp = mk(2, 130, 96, 12, V2_CPOS, 0, 0), check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 130, 96, 12, V2_CPOS, 20, 3), check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 130, 96, 12, V2_CPOS | V2_SCALE, 0, 0), check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 130, 96, 12, ALL | V2_CPOS, 37, 1), check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 130, 96, 12, ALL | V2_CPOS, 4, 70), check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 150, 128, 2, V2_CPOS | V2_SCALE | V2_TOKEN, 50, 3), check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 70, 320, 2, ALL | V2_CPOS, 20, 1), check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 1, 96, 12, ALL | V2_CPOS, 3, 1), check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 130, 96, 12, V2_CPOS | V2_SCALE, 37, 1), sp.no_grads = NO_DCPOS;
    check_case_tol(be, &tol_fp32, &sp, seed++);
    sp = mk(2, 130, 96, 12, ALL | V2_CPOS, 37, 1), sp.no_grads = NO_DGRID | NO_DPHI | NO_DRSCALE | NO_DSCALE,
    check_case_tol(be, &tol_fp32, &sp, seed++);
}

/* bf16 tensor-core products: tiles of 64 (head sizes 8, 64), 32 (160), and head size 24 padded to 32. */
static void check_all_bf16(bk_backend *be)
{
    const int ALL = V2_TOKEN | V2_SEGMENT | V2_GRID | V2_SCALE;
    const bk_matmul_mode was = be->matmul;
    be->matmul = BK_MATMUL_BF16;
    uint64_t seed = 200;
    spec sp;
    sp = mk(2, 130, 96, 12, ALL, 37, 1), sp.smooth = 1, check_case_tol(be, &tol_bf16, &sp, seed++);
    sp = mk(2, 130, 96, 12, V2_GRID | V2_SCALE, 0, 0), sp.smooth = 1, check_case_tol(be, &tol_bf16, &sp, seed++);
    sp = mk(2, 150, 128, 2, ALL, 50, 3), sp.smooth = 1, check_case_tol(be, &tol_bf16, &sp, seed++);
    sp = mk(2, 70, 320, 2, ALL, 4, 40), sp.smooth = 1, check_case_tol(be, &tol_bf16, &sp, seed++);
    sp = mk(2, 40, 72, 3, ALL, 1, 0), sp.smooth = 1, check_case_tol(be, &tol_bf16, &sp, seed++);
    static const int subsets[] = {NO_DGRID | NO_DRSCALE | NO_DSCALE, NO_DGRID | NO_DPHI | NO_DSCALE,
                                  NO_DGRID | NO_DPHI | NO_DRSCALE};
    for (size_t k = 0; k < sizeof subsets / sizeof subsets[0]; k++)
        sp = mk(2, 130, 96, 12, V2_GRID | V2_SCALE, 37, 1), sp.no_grads = subsets[k], sp.smooth = 1,
        check_case_tol(be, &tol_bf16, &sp, seed++);
    /* the content position (against the CPU's attention) */
    sp = mk(2, 130, 96, 12, V2_CPOS | V2_SCALE, 0, 0), check_case_tol(be, &tol_bf16, &sp, seed++);
    sp = mk(2, 150, 128, 2, ALL | V2_CPOS, 50, 3), sp.smooth = 1, check_case_tol(be, &tol_bf16, &sp, seed++);
    sp = mk(2, 40, 72, 3, V2_CPOS | V2_TOKEN, 7, 2), check_case_tol(be, &tol_bf16, &sp, seed++);
    be->matmul = was;
}

/* ---- bf16 storage ---------------------------------------------------------------------------- */

static void *dev_bf16_of(bk_backend *be, const float *x, size_t n)
{
    uint16_t *h = malloc((n ? n : 1) * sizeof *h);
    assert_non_null(h);
    for (size_t k = 0; k < n; k++)
        h[k] = bk_bf16_round(x[k]);
    void *d = dev_copy_of(be, h, n * sizeof *h);
    free(h);
    return d;
}

/* bf16 storage against fp32 storage of the same (bf16) values on the same tensor-core programs, the
 * backward of fp32 storage given the bf16 output as O: the same bits everywhere, the ABI 2 gradients
 * included. */
static void check_bf16_storage(bk_backend *be, const spec *sp, uint64_t seed)
{
    char label[200];
    label_of(label, sizeof label, be, sp);
    strncat(label, " (bf16 storage)", sizeof label - strlen(label) - 1);
    problem pb = make_problem(sp, seed);
    const int B = sp->B, T = sp->T, C = sp->C, H = sp->H, P = sp->points;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nsaved = (size_t)B * H * T;
    for (size_t k = 0; k < nqkv; k++)
        pb.qkv[k] = bk_bf16_value(bk_bf16_round(pb.qkv[k]));
    for (size_t k = 0; k < nout; k++)
        pb.dout[k] = bk_bf16_value(bk_bf16_round(pb.dout[k]));
    bk_error err = {0};

    dev_bias d32 = dev_bias_of(be, &pb);
    float *qkv = dev_copy_of(be, pb.qkv, nqkv * sizeof(float)), *dout = dev_copy_of(be, pb.dout, nout * sizeof(float));
    float *out = dev_alloc(be, nout * sizeof(float)), *lse = dev_alloc(be, nsaved * sizeof(float));
    float *dqkv = dev_copy_of(be, pb.dqkv0, nqkv * sizeof(float));
    if (be->attention_forward(be, BK_STORAGE_FP32, out, lse, qkv, &d32.bias, B, T, C, H, &err) != BK_OK)
        fail_msg("%s: fp32 forward: %s", label, err.message);
    float *out32 = host_copy_of(be, out, nout);
    for (size_t k = 0; k < nout; k++)
        out32[k] = bk_bf16_value(bk_bf16_round(out32[k]));
    float *o_rounded = dev_copy_of(be, out32, nout * sizeof(float));
    if (be->attention_backward(be, BK_STORAGE_FP32, dqkv, d32.dtable, dout, qkv, o_rounded, lse, &d32.bias, B, T, C, H, &err) != BK_OK)
        fail_msg("%s: fp32 backward: %s", label, err.message);

    dev_bias d16 = dev_bias_of(be, &pb);
    uint16_t *qkv16 = dev_bf16_of(be, pb.qkv, nqkv), *dout16 = dev_bf16_of(be, pb.dout, nout);
    uint16_t *out16 = dev_alloc(be, nout * sizeof(uint16_t));
    float *lse16 = dev_alloc(be, nsaved * sizeof(float)), *dqkv16 = dev_copy_of(be, pb.dqkv0, nqkv * sizeof(float));
    if (be->attention_forward(be, BK_STORAGE_BF16, out16, lse16, qkv16, &d16.bias, B, T, C, H, &err) != BK_OK)
        fail_msg("%s: forward: %s", label, err.message);
    if (be->attention_backward(be, BK_STORAGE_BF16, dqkv16, d16.dtable, dout16, qkv16, out16, lse16, &d16.bias, B, T, C, H,
                                    &err) != BK_OK)
        fail_msg("%s: backward: %s", label, err.message);

    uint16_t *o16 = malloc(nout * sizeof *o16);
    float *of = malloc(nout * sizeof *of);
    assert_non_null(o16);
    assert_non_null(of);
    if (be->download(be, o16, out16, nout * sizeof *o16, &err) != BK_OK)
        fail_msg("%s: download: %s", label, err.message);
    for (size_t k = 0; k < nout; k++)
        of[k] = bk_bf16_value(o16[k]);
    expect_same_bits("out (bf16 storage vs the fp32 output rounded)", label, of, out32, nout);
    free(o16), free(of);
    float *x = host_copy_of(be, lse, nsaved), *y = host_copy_of(be, lse16, nsaved);
    expect_same_bits("row log-sum-exp", label, y, x, nsaved);
    free(x), free(y);
    x = host_copy_of(be, dqkv, nqkv), y = host_copy_of(be, dqkv16, nqkv);
    expect_same_bits("dqkv", label, y, x, nqkv);
    free(x), free(y);
    result r32, r16;
    memset(&r32, 0, sizeof r32);
    memset(&r16, 0, sizeof r16);
    dev_bias_results(be, &pb, &d32, &r32);
    dev_bias_results(be, &pb, &d16, &r16);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        expect_same_bits("dtable", label, r16.dtable[s], r32.dtable[s], table_floats(&pb));
    expect_same_bits("dgrid", label, r16.dgrid, r32.dgrid, (size_t)H * P);
    expect_same_bits("dphi", label, r16.dphi, r32.dphi, (size_t)pb.D);
    expect_same_bits("drscale", label, r16.drscale, r32.drscale, (size_t)T);
    expect_same_bits("dscale", label, r16.dscale, r32.dscale, (size_t)H * T);
    expect_same_bits("dcpos", label, r16.dcpos, r32.dcpos, nsaved);
    print_message("%-78s the same bits as fp32 storage\n", label);

    free_result(&r32), free_result(&r16);
    free(out32);
    void *bufs[] = {qkv, dout, out, lse, dqkv, o_rounded, qkv16, dout16, out16, lse16, dqkv16};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->release(be, bufs[k]);
    dev_bias_release(be, &d32);
    dev_bias_release(be, &d16);
    free_problem(&pb);
}

static void check_all_bf16_storage(bk_backend *be)
{
    const int ALL = V2_TOKEN | V2_SEGMENT | V2_GRID | V2_SCALE;
    const bk_matmul_mode was = be->matmul;
    be->matmul = BK_MATMUL_BF16;
    spec sp;
    sp = mk(2, 130, 96, 12, ALL, 37, 3), check_bf16_storage(be, &sp, 300);
    sp = mk(2, 70, 320, 2, ALL, 4, 40), check_bf16_storage(be, &sp, 301);
    sp = mk(2, 40, 72, 3, V2_GRID | V2_SCALE, 0, 0), check_bf16_storage(be, &sp, 302);
    sp = mk(2, 130, 96, 12, ALL | V2_CPOS, 37, 3), check_bf16_storage(be, &sp, 303);
    be->matmul = was;
}

/* ---- refusals -------------------------------------------------------------------------------- */

/* The materialized attention refuses each ABI 2 term, naming it and the fused attention; the fused one
 * refuses malformed terms, naming them. */
static void check_errors(bk_backend *be)
{
    const int B = 1, T = 20, C = 16, H = 2;
    float *qkv = dev_alloc(be, (size_t)B * T * 3 * C * sizeof(float));
    float *dqkv = dev_alloc(be, (size_t)B * T * 3 * C * sizeof(float));
    float *out = dev_alloc(be, (size_t)B * T * C * sizeof(float));
    float *buf = dev_alloc(be, (size_t)B * H * T * T * sizeof(float)); /* saved, grid, phi, rscale, scale */
    bk_attention_bias bias;
    bk_error err = {0};

    be->attention = BK_ATTENTION_MATERIALIZED;
    static const char *const names[4] = {"a coordinate table (grid)", "a window mask", "a logit scale",
                                         "a content position"};
    for (int term = 0; term < 4; term++) {
        memset(&bias, 0, sizeof bias);
        bias.distances = T;
        if (term == 0)
            bias.grid = buf, bias.phi = buf, bias.rscale = buf, bias.points = 4;
        else if (term == 1)
            bias.window = 5, bias.sinks = 1;
        else if (term == 2)
            bias.scale = buf;
        else
            bias.cpos = buf;
        assert_int_equal(be->attention_forward(be, BK_STORAGE_FP32, out, buf, qkv, &bias, B, T, C, H, &err), BK_ERR_UNSUPPORTED);
        assert_message_has(err.message, "attention forward");
        assert_message_has(err.message, names[term]);
        assert_message_has(err.message, "attention = \"fused\"");
        assert_int_equal(be->attention_backward(be, BK_STORAGE_FP32, dqkv, NULL, out, qkv, out, buf, &bias, B, T, C, H, &err),
                         BK_ERR_UNSUPPORTED);
        assert_message_has(err.message, "attention backward");
        assert_message_has(err.message, names[term]);
    }
    /* sinks without a window mask nothing: no refusal */
    memset(&bias, 0, sizeof bias);
    bias.sinks = 3;
    assert_int_equal(be->attention_forward(be, BK_STORAGE_FP32, out, buf, qkv, &bias, B, T, C, H, &err), BK_OK);
    be->attention = BK_ATTENTION_FUSED;

    memset(&bias, 0, sizeof bias);
    bias.window = -1;
    assert_int_equal(be->attention_forward(be, BK_STORAGE_FP32, out, buf, qkv, &bias, B, T, C, H, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "mask window -1");
    bias.window = 4, bias.sinks = -2;
    assert_int_equal(be->attention_backward(be, BK_STORAGE_FP32, dqkv, NULL, out, qkv, out, buf, &bias, B, T, C, H, &err),
                     BK_ERR_INVALID);
    assert_message_has(err.message, "sinks -2");
    memset(&bias, 0, sizeof bias);
    bias.grid = buf, bias.rscale = buf, bias.points = 4, bias.distances = T;
    assert_int_equal(be->attention_forward(be, BK_STORAGE_FP32, out, buf, qkv, &bias, B, T, C, H, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "phi is NULL");
    bias.phi = buf, bias.points = 1;
    assert_int_equal(be->attention_forward(be, BK_STORAGE_FP32, out, buf, qkv, &bias, B, T, C, H, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "1 grid points");
    bias.points = 4, bias.distances = T - 1;
    assert_int_equal(be->attention_forward(be, BK_STORAGE_FP32, out, buf, qkv, &bias, B, T, C, H, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "phi holds 19");

    void *bufs[] = {qkv, dqkv, out, buf};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->release(be, bufs[k]);
}

/* ---- tile skipping --------------------------------------------------------------------------- */

typedef struct tile_counts {
    int full, partial, skip;     /* every tile pair by bk_mask_tile */
    int visited_q, visited_k;    /* pairs walked by the query tiles (forward, dq), by the key tiles (dkdv) */
} tile_counts;

/* The walks of kernels_flash.h against bk_mask_tile over every tile pair: each walk visits exactly the
 * pairs that are not SKIP, each once, in ascending order. */
static tile_counts count_tiles(int T, int tile, int window, int sinks)
{
    const int nq = (T + tile - 1) / tile;
    tile_counts n;
    memset(&n, 0, sizeof n);
    char *seen = calloc((size_t)nq * nq, 1);
    assert_non_null(seen);
    for (int qt = 0; qt < nq; qt++)
        for (int kt = 0; kt < nq; kt++) {
            const int q1 = qt * tile + tile < T ? qt * tile + tile : T, k1 = kt * tile + tile < T ? kt * tile + tile : T;
            const int cls = bk_mask_tile(qt * tile, q1, kt * tile, k1, window, sinks);
            n.full += cls == BK_TILE_FULL, n.partial += cls == BK_TILE_PARTIAL, n.skip += cls == BK_TILE_SKIP;
            seen[qt * nq + kt] = cls != BK_TILE_SKIP; /* 1: to visit */
        }
    for (int qt = 0; qt < nq; qt++) {
        int sink_end, first, last = -1;
        for (int kt = k_flash_key_tiles(qt, tile, window, sinks, &sink_end, &first); kt <= qt;
             kt = k_flash_kt_next(kt, sink_end, first)) {
            if (kt <= last || seen[qt * nq + kt] != 1)
                fail_msg("T=%d tile=%d w=%d sinks=%d: query tile %d walks key tile %d (%s)", T, tile, window, sinks,
                         qt, kt, kt <= last ? "out of order" : "a skipped or repeated tile");
            seen[qt * nq + kt] = 2, last = kt, n.visited_q++;
        }
    }
    for (int kt = 0; kt < nq; kt++) {
        const int cols = kt * tile + tile < T ? tile : T - kt * tile;
        for (int qt = kt; qt < k_flash_qt_end(kt, cols, tile, nq, window, sinks); qt++) {
            if (seen[qt * nq + kt] != 2)
                fail_msg("T=%d tile=%d w=%d sinks=%d: key tile %d walks query tile %d, a skipped or repeated tile", T,
                         tile, window, sinks, kt, qt);
            seen[qt * nq + kt] = 3, n.visited_k++;
        }
    }
    for (int k = 0; k < nq * nq; k++)
        if (seen[k] == 1 || seen[k] == 2)
            fail_msg("T=%d tile=%d w=%d sinks=%d: tile pair (query %d, key %d) is not SKIP but the %s walk misses it",
                     T, tile, window, sinks, k / nq, k % nq, seen[k] == 1 ? "query tiles'" : "key tiles'");
    free(seen);
    return n;
}

static void tile_walks_skip_masked_tiles(void **state)
{
    (void)state;
    /* the digest's counts, tiles of 128 */
    static const int cases[][7] = {
        /* T, w, sinks, full, partial, skip, total */
        {1024, 256, 0, 7, 14, 43, 64},
        {1024, 256, 4, 7, 19, 38, 64},
        {4096, 512, 4, 90, 87, 847, 1024},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int *k = cases[c];
        tile_counts n = count_tiles(k[0], 128, k[1], k[2]);
        print_message("T=%d w=%d sinks=%d, tiles of 128: %d full, %d partial, %d skipped of %d\n", k[0], k[1], k[2],
                      n.full, n.partial, n.skip, n.full + n.partial + n.skip);
        assert_int_equal(n.full, k[3]);
        assert_int_equal(n.partial, k[4]);
        assert_int_equal(n.skip, k[5]);
        assert_int_equal(n.visited_q, k[3] + k[4]);
        assert_int_equal(n.visited_k, k[3] + k[4]);
    }
    /* the walks on other shapes: no window, window 1, a window >= T, sinks beyond the window and beyond a
     * tile, lengths that are not multiples of the tile */
    static const int shapes[][4] = {{130, 64, 0, 0},  {130, 64, 1, 0},   {130, 64, 200, 5}, {130, 64, 4, 70},
                                    {150, 32, 50, 3}, {1000, 16, 37, 1}, {1, 64, 3, 1},     {333, 64, 64, 64},
                                    {333, 64, 65, 63}, {4096, 64, 512, 4}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int *k = shapes[c];
        tile_counts n = count_tiles(k[0], k[1], k[2], k[3]);
        assert_int_equal(n.visited_q, n.full + n.partial);
    }
    /* a window's walk grows with the window, not with T: from 4096 to 8192 tokens, each of the 64 more query
     * tiles walks 256 / 64 + 1 = 5 key tiles (the digest's ceil(w / B) + 1), while the causal walk quadruples */
    tile_counts a = count_tiles(4096, 64, 256, 0), b = count_tiles(8192, 64, 256, 0);
    assert_int_equal(b.visited_q - a.visited_q, 64 * 5);
}

/* The emulated programs visit exactly the pairs the walk does (bk_emulated_tile_visits), and the result is
 * the reference's: T = 1024, window 256, 4 sinks, tiles of 64 (head size 8). */
static void emulated_visits_only_unmasked_tiles(void **state)
{
    (void)state;
    bk_backend *be = NULL;
    bk_error err = {0};
    if (bk_backend_emulated_create(&be, BK_MATMUL_FP32, &err) != BK_OK)
        fail_msg("bk_backend_emulated_create: %s", err.message);
    spec sp = mk(1, 1024, 16, 2, V2_GRID | V2_SCALE | V2_TOKEN, 256, 4);
    problem pb = make_problem(&sp, 400);
    const tile_counts n = count_tiles(sp.T, 64, sp.window, sp.sinks);
    const long long pairs = (long long)sp.B * sp.H * (n.full + n.partial);
    const long long causal = (long long)sp.B * sp.H * 16 * 17 / 2;

    for (int k = 0; k < 3; k++)
        bk_emulated_tile_visits[k] = 0;
    result r = run_device(be, &pb); /* two forwards and a backward */
    print_message("T=1024 w=256 sinks=4, tiles of 64, B=1 H=2: visited forward %lld, dkdv %lld, dq %lld (of %lld "
                  "causal tile pairs per pass)\n",
                  bk_emulated_tile_visits[K_FLASH_FWD], bk_emulated_tile_visits[K_FLASH_DKDV],
                  bk_emulated_tile_visits[K_FLASH_DQ], causal);
    assert_int_equal(bk_emulated_tile_visits[K_FLASH_FWD], 2 * pairs);
    assert_int_equal(bk_emulated_tile_visits[K_FLASH_DKDV], pairs);
    assert_int_equal(bk_emulated_tile_visits[K_FLASH_DQ], pairs);
    assert_true(pairs < causal);
    free_result(&r);

    /* and the numbers are right at this length */
    check_case_tol(be, &tol_fp32, &sp, 400);
    free_problem(&pb);
    bk_backend_destroy(be);
}

/* ---- the content position's query sums ------------------------------------------------------- */

/* dcpos(t) = (sum of dS over t's column) - (sum over its row), and a row's sum of dS = P (dP - D) is 0 only
 * when D is the row's sum of P dP, i.e. when the backward is given the forward's own output (then the
 * comparisons with the CPU cannot see the row sums). Here the backward gets a random O instead, so that
 * D = dO . O is arbitrary and the rows' sums are of the size of the columns': dcpos against a double-precision
 * sum of dS_ij = P_ij (dO_i . v_j - D_i) with the CPU forward's P, on the first and second generations (fp32)
 * and the tensor-core programs (bf16). */
static void check_dcpos_rows(bk_backend *be, const spec *sp, int gen, double atol, double rtol, uint64_t seed)
{
    char label[200];
    label_of(label, sizeof label, be, sp);
    snprintf(label + strlen(label), sizeof label - strlen(label), " (random O, flash_gen %d)", gen);
    problem pb = make_problem(sp, seed);
    const int B = sp->B, T = sp->T, C = sp->C, H = sp->H, hd = C / H;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nbht = (size_t)B * H * T;
    float *O = random_floats(nout, 1.0);

    /* the reference: P from the CPU, the rest in double */
    bk_attention_bias hb = host_bias(&pb);
    float *cpu_out = malloc(nout * sizeof *cpu_out), *probs = malloc(nbht * T * sizeof *probs);
    double *want = calloc(nbht, sizeof *want);
    assert_non_null(cpu_out);
    assert_non_null(probs);
    assert_non_null(want);
    bk_error err = {0};
    if (bk_attention_forward(cpu_out, probs, pb.qkv, &hb, B, T, C, H, &err) != BK_OK)
        fail_msg("cpu attention forward: %s", err.message);
    double rows_size = 0.0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const float *dO = pb.dout + ((size_t)b * T + i) * C + (size_t)h * hd;
                const float *o = O + ((size_t)b * T + i) * C + (size_t)h * hd;
                double D = 0.0, row = 0.0;
                for (int d = 0; d < hd; d++)
                    D += (double)dO[d] * o[d];
                for (int j = 0; j <= i; j++) {
                    const double P = probs[(((size_t)b * H + h) * T + i) * T + j];
                    if (P == 0.0)
                        continue;
                    const float *v = pb.qkv + ((size_t)b * T + j) * 3 * C + 2 * C + (size_t)h * hd;
                    double dP = 0.0;
                    for (int d = 0; d < hd; d++)
                        dP += (double)dO[d] * v[d];
                    const double dS = P * (dP - D);
                    want[((size_t)b * H + h) * T + j] += dS;
                    row += dS;
                }
                want[((size_t)b * H + h) * T + i] -= row;
                rows_size = fabs(row) > rows_size ? fabs(row) : rows_size;
            }

    /* the device: the forward's lse, then the backward with O */
    dev_bias db = dev_bias_of(be, &pb);
    float *qkv = dev_copy_of(be, pb.qkv, nqkv * sizeof(float));
    float *dout = dev_copy_of(be, pb.dout, nout * sizeof(float));
    float *dO = dev_copy_of(be, O, nout * sizeof(float)), *dqkv = dev_copy_of(be, pb.dqkv0, nqkv * sizeof(float));
    float *out = dev_alloc(be, nout * sizeof(float)), *lse = dev_alloc(be, nbht * sizeof(float));
    if (be->attention_forward(be, BK_STORAGE_FP32, out, lse, qkv, &db.bias, B, T, C, H, &err) != BK_OK)
        fail_msg("%s: forward: %s", label, err.message);
    bk_dev *d = (bk_dev *)be->impl;
    d->flash_gen = gen;
    const int rc = be->attention_backward(be, BK_STORAGE_FP32, dqkv, db.dtable, dout, qkv, dO, lse, &db.bias, B, T, C, H, &err);
    d->flash_gen = 0;
    if (rc != BK_OK)
        fail_msg("%s: backward: %s", label, err.message);
    result got;
    memset(&got, 0, sizeof got);
    dev_bias_results(be, &pb, &db, &got);
    float *w = want_of(pb.dcpos0, want, nbht);
    const double e = expect_close("dcpos", label, got.dcpos, w, nbht, atol, rtol);
    print_message("%-78s max error dcpos %.2g (rows' sums up to %.2g)\n", label, e, rows_size);
    assert_true(rows_size > 1.0);

    free(w), free(want), free(probs), free(cpu_out), free(O);
    free_result(&got);
    void *bufs[] = {qkv, dout, dO, dqkv, out, lse};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->release(be, bufs[k]);
    dev_bias_release(be, &db);
    free_problem(&pb);
}

static void dcpos_counts_query_sums(void **state)
{
    (void)state;
    bk_backend *be = NULL;
    bk_error err = {0};
    if (bk_backend_emulated_create(&be, BK_MATMUL_FP32, &err) != BK_OK)
        fail_msg("bk_backend_emulated_create: %s", err.message);
    spec sp = mk(2, 130, 96, 12, V2_CPOS | V2_SCALE | V2_TOKEN, 37, 1);
    for (int gen = 0; gen <= 2; gen += 2)
        check_dcpos_rows(be, &sp, gen, 1e-4, 1e-4, 500);
    sp = mk(2, 150, 128, 2, V2_CPOS | V2_SCALE, 0, 0);
    for (int gen = 0; gen <= 2; gen += 2)
        check_dcpos_rows(be, &sp, gen, 1e-4, 1e-4, 501);
    be->matmul = BK_MATMUL_BF16;
    sp = mk(2, 130, 96, 12, V2_CPOS | V2_SCALE | V2_TOKEN, 37, 1);
    check_dcpos_rows(be, &sp, 0, 1e-1, 5e-2, 502);
    be->matmul = BK_MATMUL_FP32;
    bk_backend_destroy(be);
}

/* ---- counted positions (CoPE) on the materialized attention --------------------------------------- */

/* cope (points x hd position vectors, cope_scale), alone and with the token and segment tables, on the
 * materialized attention against the CPU's (cpu/attention.c, itself checked against PyTorch): out (with
 * and without saved probabilities), dqkv, dtable and dcope accumulated into nonzero starts; a second
 * backward with the emulated threads in reverse order gives the same bits. Tolerances: the GEMMs' orders
 * differ from OpenBLAS's row-major ones; a count near a cell edge would amplify that, which these seeds
 * do not meet. */
typedef struct cope_case {
    int B, T, C, H, points, tables; /* tables: V2_TOKEN | V2_SEGMENT */
} cope_case;

static void check_cope_case(bk_backend *be, const cope_case *cc, uint64_t seed)
{
    rng_state = seed;
    const int B = cc->B, T = cc->T, C = cc->C, H = cc->H, P = cc->points, hd = C / H, D = 3 * T + 1;
    const size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, ne = (size_t)P * hd, nt = (size_t)H * D;
    const size_t ns = (size_t)B * H * T * T;
    float *qkv = random_floats(nq, 1.0), *dout = random_floats(no, 1.0), *dqkv0 = random_floats(nq, 0.5);
    float *E = random_floats(ne, 0.5), *dcope0 = random_floats(ne, 0.5);
    float *tab[BK_STREAM_COUNT] = {NULL, NULL}, *dtab0[BK_STREAM_COUNT] = {NULL, NULL};
    int32_t *pos[BK_STREAM_COUNT] = {NULL, NULL};
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (cc->tables & (s == BK_STREAM_TOKEN ? V2_TOKEN : V2_SEGMENT)) {
            tab[s] = random_floats(nt, 1.0), dtab0[s] = random_floats(nt, 0.5);
            if (s != BK_STREAM_TOKEN)
                pos[s] = segment_positions(B, T);
        }
    bk_attention_bias hb;
    memset(&hb, 0, sizeof hb);
    hb.distances = D;
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        hb.table[s] = tab[s], hb.positions[s] = pos[s];
    hb.cope = E, hb.cope_points = P, hb.cope_scale = 0.75f;

    /* the CPU */
    bk_error err = {0};
    float *out = malloc(no * sizeof *out), *probs = malloc(ns * sizeof *probs);
    float *dqkv = malloc(nq * sizeof *dqkv), *dcope = malloc(ne * sizeof *dcope);
    float *dtab[BK_STREAM_COUNT] = {NULL, NULL};
    assert_true(out && probs && dqkv && dcope);
    memcpy(dqkv, dqkv0, nq * sizeof *dqkv), memcpy(dcope, dcope0, ne * sizeof *dcope);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (tab[s]) {
            dtab[s] = malloc(nt * sizeof(float));
            assert_non_null(dtab[s]);
            memcpy(dtab[s], dtab0[s], nt * sizeof(float));
        }
    if (bk_attention_forward(out, probs, qkv, &hb, B, T, C, H, &err) != BK_OK)
        fail_msg("CPU attention forward: %s", err.message);
    hb.dcope = dcope;
    if (bk_attention_backward(dqkv, dtab, dout, qkv, probs, &hb, B, T, C, H, &err) != BK_OK)
        fail_msg("CPU attention backward: %s", err.message);

    /* the device */
    bk_attention_bias db = hb;
    db.cope = dev_copy_of(be, E, ne * sizeof(float));
    db.dcope = dev_copy_of(be, dcope0, ne * sizeof(float));
    float *d_dtab[BK_STREAM_COUNT] = {NULL, NULL};
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        db.table[s] = dev_copy_of(be, tab[s], nt * sizeof(float));
        db.positions[s] = dev_copy_of(be, pos[s], (size_t)B * T * sizeof(int32_t));
        d_dtab[s] = dev_copy_of(be, dtab0[s], nt * sizeof(float));
    }
    float *d_qkv = dev_copy_of(be, qkv, nq * sizeof(float)), *d_dout = dev_copy_of(be, dout, no * sizeof(float));
    float *d_out = dev_alloc(be, no * sizeof(float)), *d_saved = dev_alloc(be, ns * sizeof(float));
    float *d_dqkv = dev_copy_of(be, dqkv0, nq * sizeof(float));
    char label[128];
    snprintf(label, sizeof label, "%s materialized cope B=%d T=%d C=%d H=%d points=%d tables=%d", be->name, B, T, C, H,
             P, cc->tables);
    be->attention = BK_ATTENTION_MATERIALIZED;
    if (be->attention_forward(be, BK_STORAGE_FP32, d_out, NULL, d_qkv, &db, B, T, C, H, &err) != BK_OK)
        fail_msg("%s: forward-only: %s", label, err.message);
    float *got = host_copy_of(be, d_out, no);
    const double e_fwd = expect_close("out (forward only)", label, got, out, no, 1e-5, 1e-4);
    free(got);
    if (be->attention_forward(be, BK_STORAGE_FP32, d_out, d_saved, d_qkv, &db, B, T, C, H, &err) != BK_OK)
        fail_msg("%s: forward: %s", label, err.message);
    got = host_copy_of(be, d_out, no);
    expect_close("out", label, got, out, no, 1e-5, 1e-4);
    free(got);
    if (be->attention_backward(be, BK_STORAGE_FP32, d_dqkv, d_dtab, d_dout, d_qkv, d_out, d_saved, &db, B, T, C, H, &err) != BK_OK)
        fail_msg("%s: backward: %s", label, err.message);
    float *g_dqkv = host_copy_of(be, d_dqkv, nq), *g_dcope = host_copy_of(be, db.dcope, ne);
    const double e_dqkv = expect_close("dqkv", label, g_dqkv, dqkv, nq, 1e-4, 1e-3);
    const double e_dcope = expect_close("dcope", label, g_dcope, dcope, ne, 1e-4, 1e-3);
    double e_dtab = 0.0;
    float *g_dtab[BK_STREAM_COUNT] = {NULL, NULL};
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (tab[s]) {
            g_dtab[s] = host_copy_of(be, d_dtab[s], nt);
            const double e = expect_close(s == BK_STREAM_TOKEN ? "dtable[token]" : "dtable[segment]", label, g_dtab[s],
                                          dtab[s], nt, 1e-4, 1e-3);
            e_dtab = e > e_dtab ? e : e_dtab;
        }
    print_message("%s: largest errors out %.2g dqkv %.2g dcope %.2g dtable %.2g\n", label, e_fwd, e_dqkv, e_dcope,
                  e_dtab);

    /* again from the same starts, the emulated threads in reverse order: the same bits */
    bk_error e2 = {0};
    assert_int_equal(be->upload(be, d_dqkv, dqkv0, nq * sizeof(float), &e2), BK_OK);
    assert_int_equal(be->upload(be, db.dcope, dcope0, ne * sizeof(float), &e2), BK_OK);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (tab[s])
            assert_int_equal(be->upload(be, d_dtab[s], dtab0[s], nt * sizeof(float), &e2), BK_OK);
    bk_emulated_thread_order = 1;
    const int rc = be->attention_backward(be, BK_STORAGE_FP32, d_dqkv, d_dtab, d_dout, d_qkv, d_out, d_saved, &db, B, T, C, H, &err);
    bk_emulated_thread_order = 0;
    if (rc != BK_OK)
        fail_msg("%s: second backward: %s", label, err.message);
    float *h2 = host_copy_of(be, d_dqkv, nq), *c2 = host_copy_of(be, db.dcope, ne);
    expect_same_bits("dqkv (second run)", label, h2, g_dqkv, nq);
    expect_same_bits("dcope (second run)", label, c2, g_dcope, ne);
    free(h2), free(c2);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (tab[s]) {
            float *t2 = host_copy_of(be, d_dtab[s], nt);
            expect_same_bits("dtable (second run)", label, t2, g_dtab[s], nt);
            free(t2);
        }
    be->attention = BK_ATTENTION_FUSED;

    void *dbufs[] = {(void *)db.cope, db.dcope, d_qkv, d_dout, d_out, d_saved, d_dqkv};
    for (size_t k = 0; k < sizeof dbufs / sizeof dbufs[0]; k++)
        be->release(be, dbufs[k]);
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (db.table[s])
            be->release(be, (void *)db.table[s]);
        if (db.positions[s])
            be->release(be, (void *)db.positions[s]);
        if (d_dtab[s])
            be->release(be, d_dtab[s]);
        free(tab[s]), free(dtab0[s]), free(pos[s]), free(dtab[s]), free(g_dtab[s]);
    }
    free(qkv), free(dout), free(dqkv0), free(E), free(dcope0), free(out), free(probs), free(dqkv), free(dcope);
    free(g_dqkv), free(g_dcope);
}

/* The cases: head sizes 8 and 64; T = 1, 33 and 130 (two query blocks of DEV_ATT_QBLOCK = 128); 3 vectors
 * (counts clamp after a few keys) and 200 (they never do); without tables, with the token table, with both. */
static void check_cope_all(bk_backend *be)
{
    static const int Ts[3] = {1, 33, 130}, Cs[2] = {16, 128}, Ps[2] = {3, 200};
    static const int tables[3] = {0, V2_TOKEN, V2_TOKEN | V2_SEGMENT};
    uint64_t seed = 0xC0FE;
    for (int t = 0; t < 3; t++)
        for (int c = 0; c < 2; c++)
            for (int p = 0; p < 2; p++)
                for (int k = 0; k < 3; k++) {
                    if (Ts[t] == 130 && k == 1)
                        continue; /* the longest length with no table or both only */
                    const cope_case cc = {2, Ts[t], Cs[c], 2, Ps[p], tables[k]};
                    check_cope_case(be, &cc, seed++);
                }
}

/* The fused attention refuses a counting term, naming the capability and the materialized attention; the
 * materialized one refuses it with another ABI 2 term (a window), and malformed (1 vector). */
static void check_cope_errors(bk_backend *be)
{
    const int B = 1, T = 20, C = 16, H = 2;
    float *qkv = dev_alloc(be, (size_t)B * T * 3 * C * sizeof(float));
    float *dqkv = dev_alloc(be, (size_t)B * T * 3 * C * sizeof(float));
    float *out = dev_alloc(be, (size_t)B * T * C * sizeof(float));
    float *buf = dev_alloc(be, (size_t)B * H * T * T * sizeof(float));
    bk_attention_bias bias;
    bk_error err = {0};
    memset(&bias, 0, sizeof bias);
    bias.distances = T, bias.cope = buf, bias.cope_points = 4, bias.cope_scale = 1.0f;

    be->attention = BK_ATTENTION_FUSED;
    assert_int_equal(be->attention_forward(be, BK_STORAGE_FP32, out, buf, qkv, &bias, B, T, C, H, &err), BK_ERR_UNSUPPORTED);
    assert_message_has(err.message, "attention forward");
    assert_message_has(err.message, "BIASKIT_CAP_COUNT");
    assert_message_has(err.message, "attention = \"materialized\"");
    assert_int_equal(be->attention_backward(be, BK_STORAGE_FP32, dqkv, NULL, out, qkv, out, buf, &bias, B, T, C, H, &err),
                     BK_ERR_UNSUPPORTED);
    assert_message_has(err.message, "attention backward");
    assert_message_has(err.message, "attention = \"materialized\"");

    be->attention = BK_ATTENTION_MATERIALIZED;
    bias.window = 5;
    assert_int_equal(be->attention_forward(be, BK_STORAGE_FP32, out, buf, qkv, &bias, B, T, C, H, &err), BK_ERR_UNSUPPORTED);
    assert_message_has(err.message, "counted positions (CoPE)");
    assert_message_has(err.message, "a window mask");
    assert_int_equal(be->attention_backward(be, BK_STORAGE_FP32, dqkv, NULL, out, qkv, out, buf, &bias, B, T, C, H, &err),
                     BK_ERR_UNSUPPORTED);
    assert_message_has(err.message, "a window mask");
    bias.window = 0, bias.cope_points = 1;
    assert_int_equal(be->attention_forward(be, BK_STORAGE_FP32, out, buf, qkv, &bias, B, T, C, H, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "1 position vectors");
    be->attention = BK_ATTENTION_FUSED;

    void *bufs[] = {qkv, dqkv, out, buf};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        be->release(be, bufs[k]);
}

static void check_cope(bk_backend *be)
{
    check_cope_all(be);
    check_cope_errors(be);
}

/* ---- the backends ---------------------------------------------------------------------------- */

static void check_backend(bk_backend *be)
{
    assert_int_equal(be->attention, BK_ATTENTION_FUSED);
    check_all_fp32(be);
    check_all_bf16(be);
    check_all_bf16_storage(be);
    check_errors(be);
}

/* `check` on the emulated backend, or on a CUDA one (skipped when no GPU answers). */
static void run_on(int cuda, void (*check)(bk_backend *))
{
    char desc[256];
    if (cuda && !bk_device_probe(desc, sizeof desc)) {
        print_message("skipping the CUDA backend: no GPU answers (%s)\n", desc);
        skip();
    }
    bk_backend *be = NULL;
    bk_error err = {0};
    if (!cuda && bk_backend_emulated_create(&be, BK_MATMUL_FP32, &err) != BK_OK)
        fail_msg("bk_backend_emulated_create: %s", err.message);
    if (cuda && bk_backend_cuda_create(&be, BK_MATMUL_FP32, &err) != BK_OK)
        fail_msg("a GPU answers (%s) but bk_backend_cuda_create failed: %s", desc, err.message);
    check(be);
    bk_backend_destroy(be);
}

static void emulated_cope_matches_cpu(void **state)
{
    (void)state;
    run_on(0, check_cope);
}

static void cuda_cope_matches_cpu(void **state)
{
    (void)state;
    run_on(1, check_cope);
}

static void emulated_matches_reference(void **state)
{
    (void)state;
    run_on(0, check_backend);
}

static void cuda_matches_reference(void **state)
{
    (void)state;
    run_on(1, check_backend);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tile_walks_skip_masked_tiles),
        cmocka_unit_test(emulated_visits_only_unmasked_tiles),
        cmocka_unit_test(emulated_matches_reference),
        cmocka_unit_test(dcpos_counts_query_sums),
        cmocka_unit_test(cuda_matches_reference),
        cmocka_unit_test(emulated_cope_matches_cpu),
        cmocka_unit_test(cuda_cope_matches_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
