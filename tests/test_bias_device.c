/* The bias runtime and the positions on a device backend, without a GPU: the emulated backend (the
 * CUDA backend's code run on the host as C; its memory is treated as device memory, so everything is
 * read back through download) against the CPU runtime of the same experiment.
 *
 *   bias: ALiBi + KERPLE (per layer) + T5 + MEP-param, two layers, sum and kernel mixing, fixed and
 *         learnable weights: the term tables (host tables + upload on the emulated backend: equal bit
 *         for bit), the mixed tables (|emu - cpu| <= 1e-6 (1 + |cpu|)), the parameter gradients and
 *         the mixing-parameter gradients after bk_bias_gradients_to_host
 *         (|emu - cpu| <= 1e-5 (|cpu_i| + max_j |cpu_j|): the device mixing sums in another order);
 *         where every table and gradient came from (the counters: host path only, emulated);
 *   positions: bipe segments, spans, the rotary view, and the embeddings of ape (learned) and bipe
 *         through the host fallback (host embed + upload + add; dencoded downloaded for backward):
 *         equal to the CPU's bit for bit;
 *   an embedding plugin built with the first ABI 1 descriptor size (tests/plugins/oldembed.c) loads,
 *         its fields past struct_size are never read, and it runs on the host path. */
#define _POSIX_C_SOURCE 200809L
#include "term_fixture.h"

#include "bias/bias.h"
#include "model/positions.h"
#include "plugin/descriptor.h"

#include <math.h>
#include <stdlib.h>

#define MODEL "[model]\nlayers = 2\nheads = 4\ndim = 32\nvocab = 256\n[train]\nlength = 64\n"
#define TABLE_TERMS                                                                                          \
    "[[term]]\nplugin = \"alibi\"\n[[term]]\nplugin = \"kerple\"\nper_layer = true\n[[term]]\nplugin = \"t5\"\n" \
    "[[term]]\nplugin = \"mep\"\nvariant = \"param\"\n"

#define MAX_TERMS 8
#define D_TABLE 48

/* What one run of the bias runtime gives, on the host. */
typedef struct bias_run {
    int n_terms, n_layers;
    int32_t H, D;
    float *terms;                         /* [layer][term] H x D */
    float *mixed;                         /* [layer][stream] H x D (zeros for a stream without terms) */
    float *dtheta[MAX_TERMS];             /* per term: n_copies * n_params */
    int64_t n_theta[MAX_TERMS];
    float mix_grads[BK_STREAM_COUNT][MAX_TERMS];
    int n_on[BK_STREAM_COUNT];
    int has_table[MAX_TERMS];
    int64_t host_tables[MAX_TERMS], cuda_tables[MAX_TERMS], host_backwards[MAX_TERMS], cuda_backwards[MAX_TERMS];
} bias_run;

static void bias_run_free(bias_run *r)
{
    free(r->terms);
    free(r->mixed);
    for (int t = 0; t < MAX_TERMS; t++)
        free(r->dtheta[t]);
    memset(r, 0, sizeof *r);
}

static void download(bk_backend *be, void *dst, const void *src, size_t bytes)
{
    bk_error err;
    if (be->download(be, dst, src, bytes, &err))
        fail_msg("download of %zu bytes from %s: %s", bytes, be->name, err.message);
}

/* dL/dM for (layer, stream): fixed pseudo-random values in [-1, 1]. */
static void fill_dmixed(float *x, size_t n, uint64_t seed)
{
    biaskit_rng r = biaskit_rng_seeded(seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(2.0 * biaskit_rng_uniform(&r) - 1.0);
}

/* Forward at D/2 then D distances (the buffers grow), then one step's backward over every layer and
 * bk_bias_gradients_to_host, on `be`. */
static void run_bias(const char *text, bk_backend *be, bias_run *r)
{
    fixture f;
    open_ok(&f, text);
    assert_true(f.set.n <= MAX_TERMS);
    bk_bias b;
    bk_error err;
    memset(r, 0, sizeof *r);
    r->n_terms = f.set.n, r->n_layers = (int)f.exp.model.layers, r->H = f.set.geometry.n_heads, r->D = D_TABLE;
    if (bk_bias_init(&b, &f.set, r->n_layers, f.exp.attention.learn_weights, &err) ||
        bk_bias_set_backend(&b, be, &err) || bk_bias_forward(&b, D_TABLE / 2, &err) ||
        bk_bias_forward(&b, D_TABLE, &err))
        fail_msg("%s: %s", be->name, err.message);
    const size_t n = (size_t)r->H * D_TABLE;
    assert_int_equal(b.capacity, D_TABLE);
    r->terms = calloc((size_t)r->n_layers * (size_t)r->n_terms * n, sizeof(float));
    r->mixed = calloc((size_t)r->n_layers * BK_STREAM_COUNT * n, sizeof(float));
    for (int l = 0; l < r->n_layers; l++) {
        for (int t = 0; t < r->n_terms; t++)
            if (bk_term_has_table(&f.set.terms[t]))
                download(be, r->terms + ((size_t)l * r->n_terms + t) * n,
                         b.term_tables + ((size_t)l * r->n_terms + t) * n, n * sizeof(float));
        for (int s = 0; s < BK_STREAM_COUNT; s++) {
            const float *m = bk_bias_table(&b, l, (bk_stream)s);
            if (m)
                download(be, r->mixed + ((size_t)l * BK_STREAM_COUNT + s) * n, m, n * sizeof(float));
        }
    }
    /* backward: dL/dM uploaded into the backend's memory, every layer, then to the host */
    float *host_dm = malloc(n * sizeof *host_dm);
    float *dm_mem[BK_STREAM_COUNT] = {NULL, NULL};
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (b.n_on[s] && be->alloc(be, (void **)&dm_mem[s], n * sizeof(float), &err))
            fail_msg("%s", err.message);
    bk_bias_zero_grad(&b);
    for (int l = 0; l < r->n_layers; l++) {
        const float *dm[BK_STREAM_COUNT] = {NULL, NULL};
        for (int s = 0; s < BK_STREAM_COUNT; s++) {
            if (!dm_mem[s])
                continue;
            fill_dmixed(host_dm, n, 1000 + 10 * (uint64_t)l + (uint64_t)s);
            if (be->upload(be, dm_mem[s], host_dm, n * sizeof(float), &err))
                fail_msg("%s", err.message);
            dm[s] = dm_mem[s];
        }
        if (bk_bias_backward(&b, l, dm, &err))
            fail_msg("%s: layer %d backward: %s", be->name, l, err.message);
    }
    if (bk_bias_gradients_to_host(&b, &err))
        fail_msg("%s: %s", be->name, err.message);
    if (b.nonfinite[0])
        fail_msg("%s: unexpected non-finite gradient note: %s", be->name, b.nonfinite);
    for (int t = 0; t < r->n_terms; t++) {
        const bk_term *term = &f.set.terms[t];
        r->n_theta[t] = (int64_t)term->n_copies * term->n_params;
        r->has_table[t] = bk_term_has_table(term);
        if (r->n_theta[t]) {
            r->dtheta[t] = malloc((size_t)r->n_theta[t] * sizeof(float));
            memcpy(r->dtheta[t], b.dtheta[t], (size_t)r->n_theta[t] * sizeof(float));
        }
        r->host_tables[t] = b.host_tables[t], r->cuda_tables[t] = b.cuda_tables[t];
        r->host_backwards[t] = b.host_backwards[t], r->cuda_backwards[t] = b.cuda_backwards[t];
    }
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        r->n_on[s] = b.n_on[s];
        for (int k = 0; k < b.n_on[s]; k++)
            r->mix_grads[s][k] = b.mix_grads[s][k];
    }
    /* gradients_to_host twice adds nothing more */
    if (bk_bias_gradients_to_host(&b, &err))
        fail_msg("%s", err.message);
    for (int t = 0; t < r->n_terms; t++)
        if (r->n_theta[t] && memcmp(r->dtheta[t], b.dtheta[t], (size_t)r->n_theta[t] * sizeof(float)) != 0)
            fail_msg("%s: a second bk_bias_gradients_to_host changed the gradient of term %d", be->name, t);
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (dm_mem[s])
            be->release(be, dm_mem[s]);
    free(host_dm);
    bk_bias_free(&b);
    close_terms(&f);
}

/* |got - want| <= tol (|want_i| + max_j |want_j|) for every value; `what` names them in the message. */
static void expect_close(const float *got, const float *want, size_t n, double tol, const char *what, int term)
{
    double top = 0.0;
    for (size_t i = 0; i < n; i++)
        top = fmax(top, fabs((double)want[i]));
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - (double)want[i]) <= tol * (fabs((double)want[i]) + top)))
            fail_msg("%s (term %d), value %zu: emulated %.9g, cpu %.9g (tolerance %g relative)", what, term, i,
                     (double)got[i], (double)want[i], tol);
}

static void compare_bias(const char *text)
{
    bk_backend *emu = NULL;
    bk_error err;
    if (bk_backend_emulated_create(&emu, BK_MATMUL_FP32, &err))
        fail_msg("%s", err.message);
    bias_run cpu, dev;
    run_bias(text, bk_backend_cpu(), &cpu);
    run_bias(text, emu, &dev);
    const size_t n = (size_t)cpu.H * (size_t)cpu.D;
    for (int l = 0; l < cpu.n_layers; l++) {
        for (int t = 0; t < cpu.n_terms; t++) {
            const size_t at = ((size_t)l * cpu.n_terms + t) * n;
            const float *a = dev.terms + at, *b = cpu.terms + at;
            for (size_t i = 0; i < n; i++)
                if (a[i] != b[i])
                    fail_msg("layer %d, term %d, value %zu: emulated table %.9g, cpu %.9g (both host tables)", l, t,
                             i, (double)a[i], (double)b[i]);
        }
        for (int s = 0; s < BK_STREAM_COUNT; s++) {
            const float *a = dev.mixed + ((size_t)l * BK_STREAM_COUNT + s) * n;
            const float *b = cpu.mixed + ((size_t)l * BK_STREAM_COUNT + s) * n;
            for (size_t i = 0; i < n; i++)
                if (!(fabs((double)a[i] - (double)b[i]) <= 1e-6 * (1.0 + fabs((double)b[i]))))
                    fail_msg("layer %d, stream %d, value %zu: emulated mixed %.9g, cpu %.9g", l, s, i, (double)a[i],
                             (double)b[i]);
        }
    }
    for (int t = 0; t < cpu.n_terms; t++) {
        /* the emulated backend never calls plugins' CUDA code: every table came from the host */
        assert_int_equal(dev.cuda_tables[t], 0);
        assert_int_equal(dev.cuda_backwards[t], 0);
        assert_int_equal(dev.host_tables[t], cpu.host_tables[t]);
        assert_int_equal(dev.host_backwards[t], cpu.host_backwards[t]);
        assert_true(cpu.host_tables[t] > 0 || !cpu.has_table[t]);
        if (!cpu.n_theta[t] || !cpu.has_table[t])
            continue;
        assert_true(cpu.host_backwards[t] > 0);
        double norm = 0.0;
        for (int64_t i = 0; i < cpu.n_theta[t]; i++)
            norm += fabs((double)cpu.dtheta[t][i]);
        if (!(norm > 0.0))
            fail_msg("term %d got no gradient on the CPU: the comparison would prove nothing", t);
        expect_close(dev.dtheta[t], cpu.dtheta[t], (size_t)cpu.n_theta[t], 1e-5, "dtheta", t);
    }
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        expect_close(dev.mix_grads[s], cpu.mix_grads[s], (size_t)cpu.n_on[s], 1e-5, "mixing-parameter gradient", s);
    bias_run_free(&cpu);
    bias_run_free(&dev);
    bk_backend_destroy(emu);
}

static int mix_grads_nonzero(const char *text)
{
    bias_run r;
    run_bias(text, bk_backend_cpu(), &r);
    int any = 0;
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        for (int k = 0; k < r.n_on[s]; k++)
            any |= r.mix_grads[s][k] != 0.0f;
    bias_run_free(&r);
    return any;
}

static void bias_sum_mixing(void **state)
{
    (void)state;
    compare_bias(MODEL TABLE_TERMS);
}

static void bias_kernel_mixing(void **state)
{
    (void)state;
    compare_bias(MODEL "[attention]\nmixing = \"kernel\"\n" TABLE_TERMS);
}

static void bias_learnable_weights(void **state)
{
    (void)state;
    const char *sum = MODEL "[attention]\nlearn_weights = true\n" TABLE_TERMS;
    const char *kernel = MODEL "[attention]\nmixing = \"kernel\"\nlearn_weights = true\n" TABLE_TERMS;
    assert_true(mix_grads_nonzero(sum));
    assert_true(mix_grads_nonzero(kernel));
    compare_bias(sum);
    compare_bias(kernel);
}

/* Two streams: tables on the token and the segment stream at once. */
static void bias_two_streams(void **state)
{
    (void)state;
    compare_bias(MODEL "[[term]]\nplugin = \"bipe\"\n[[term]]\nplugin = \"kerple\"\nstream = \"segment\"\n"
                       "[[term]]\nplugin = \"t5\"\n[[term]]\nplugin = \"mep\"\nvariant = \"param\"\nstream = "
                       "\"segment\"\n");
}

/* A non-finite host table is refused on the device backend too, naming the term and where. */
static void bias_nonfinite_table_is_named(void **state)
{
    (void)state;
    bk_backend *emu = NULL;
    bk_error err;
    if (bk_backend_emulated_create(&emu, BK_MATMUL_FP32, &err))
        fail_msg("%s", err.message);
    fixture f;
    open_ok(&f, MODEL "[[term]]\nplugin = \"testlin\"\nnan_at = 5\n");
    bk_bias b;
    assert_int_equal(bk_bias_init(&b, &f.set, 2, 0, &err), BK_OK);
    assert_int_equal(bk_bias_set_backend(&b, emu, &err), BK_OK);
    b.step = 7;
    assert_int_equal(bk_bias_forward(&b, 16, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "term 'testlin'");
    assert_message_has(err.message, "non-finite value");
    assert_message_has(err.message, "distance 5");
    assert_message_has(err.message, "step 7");
    bk_bias_free(&b);
    close_terms(&f);
    bk_backend_destroy(emu);
}

/* ---- positions ------------------------------------------------------------------------------- */

#define POS_TERMS                                                                                            \
    "[[term]]\nplugin = \"bipe\"\n[[term]]\nplugin = \"ape\"\nvariant = \"learned\"\n[[term]]\nplugin = "    \
    "\"rope\"\nstream = \"segment\"\n[[term]]\nplugin = \"alibi\"\nstream = \"segment\"\n"

static void tokens_of(int32_t *tokens, int n, int shift)
{
    const char *sample = "ab. cd\nef. gh.ij\nk. lm.nop\nqr.";
    int len = (int)strlen(sample);
    for (int i = 0; i < n; i++)
        tokens[i] = (unsigned char)sample[(i + shift) % len];
}

static void expect_same_ints(bk_backend *be, const int32_t *dev, const int32_t *host, size_t n, const char *what)
{
    int32_t *got = malloc(n * sizeof *got);
    download(be, got, dev, n * sizeof *got);
    for (size_t i = 0; i < n; i++)
        if (got[i] != host[i])
            fail_msg("%s[%zu]: emulated %d, cpu %d", what, i, (int)got[i], (int)host[i]);
    free(got);
}

static void expect_same_floats(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            fail_msg("%s[%zu]: emulated %.9g, cpu %.9g (expected the same bits)", what, i, (double)got[i],
                     (double)want[i]);
}

/* Positions and embeddings of `text` on the emulated backend against the CPU, for batches (1, 8) and
 * then (2, 16) (the device arrays grow); fails on the first difference. */
static void compare_positions(const char *text)
{
    bk_backend *emu = NULL;
    bk_error err;
    if (bk_backend_emulated_create(&emu, BK_MATMUL_FP32, &err))
        fail_msg("%s", err.message);
    fixture fc, fe;
    open_ok(&fc, text);
    open_ok(&fe, text);
    bk_positions pc, pe;
    if (bk_positions_init(&pc, &fc.set, &err) || bk_positions_set_backend(&pc, bk_backend_cpu(), &err) ||
        bk_positions_init(&pe, &fe.set, &err) || bk_positions_set_backend(&pe, emu, &err))
        fail_msg("%s", err.message);
    const int C = fc.set.geometry.d_model;
    const int shapes[2][2] = {{1, 8}, {2, 16}};
    for (int k = 0; k < 2; k++) {
        const int B = shapes[k][0], T = shapes[k][1], N = B * T;
        int32_t tokens[64];
        tokens_of(tokens, N, k);
        if (bk_positions_prepare(&pc, tokens, B, T, &err) || bk_positions_prepare(&pe, tokens, B, T, &err))
            fail_msg("%s", err.message);
        /* spans */
        int32_t want_span = 0;
        for (int b = 0; fc.set.segmenter >= 0 && b < B; b++) {
            int32_t last = pc.segment_index[b * T + T - 1];
            want_span = last + 1 > want_span ? last + 1 : want_span;
        }
        assert_int_equal(bk_positions_span(&pc, BK_STREAM_TOKEN), T);
        assert_int_equal(bk_positions_span(&pe, BK_STREAM_TOKEN), T);
        assert_int_equal(bk_positions_span(&pc, BK_STREAM_SEGMENT), want_span);
        assert_int_equal(bk_positions_span(&pe, BK_STREAM_SEGMENT), want_span);
        if (fc.set.segmenter >= 0) {
            assert_true(want_span > 1); /* the sample has delimiters */
            assert_ptr_equal(bk_positions_stream(&pc, BK_STREAM_SEGMENT), pc.segment_index);
            expect_same_ints(emu, bk_positions_stream(&pe, BK_STREAM_SEGMENT), pc.segment_index, (size_t)N,
                             "segment index");
            expect_same_ints(emu, pe.segment_position_dev, pc.segment_position, (size_t)N, "segment position");
        }
        assert_null(bk_positions_stream(&pe, BK_STREAM_TOKEN));
        /* the rotary view */
        bk_rotary_view vc, ve;
        int rc_c = bk_positions_rotary(&pc, &vc), rc_e = bk_positions_rotary(&pe, &ve);
        assert_int_equal(rc_c, rc_e);
        if (rc_c) {
            assert_int_equal(vc.pairs, ve.pairs);
            assert_int_equal(vc.rows, ve.rows);
            assert_true(ve.rows >= T);
            size_t m = (size_t)vc.rows * (size_t)vc.pairs;
            float *got = malloc(m * sizeof *got);
            download(emu, got, ve.cos, m * sizeof *got);
            expect_same_floats(got, vc.cos, m, "rotary cos");
            download(emu, got, ve.sin, m * sizeof *got);
            expect_same_floats(got, vc.sin, m, "rotary sin");
            free(got);
            assert_true((vc.positions == NULL) == (ve.positions == NULL));
            if (vc.positions)
                expect_same_ints(emu, ve.positions, vc.positions, (size_t)N, "rotary positions");
        }
        /* embeddings forward: encoded (random) += every embedding */
        size_t n = (size_t)N * (size_t)C;
        float *enc_c = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float)), *enc_e = NULL;
        float *before = malloc(n * sizeof(float));
        fill_dmixed(enc_c, n, 77 + (uint64_t)k);
        memcpy(before, enc_c, n * sizeof(float));
        if (emu->alloc(emu, (void **)&enc_e, n * sizeof(float), &err) ||
            emu->upload(emu, enc_e, enc_c, n * sizeof(float), &err))
            fail_msg("%s", err.message);
        if (bk_embed_forward(&pc, enc_c, &err) || bk_embed_forward(&pe, enc_e, &err))
            fail_msg("%s", err.message);
        download(emu, got, enc_e, n * sizeof(float));
        expect_same_floats(got, enc_c, n, "encoded + embeddings");
        double moved = 0.0;
        for (size_t i = 0; i < n; i++)
            moved += fabs((double)enc_c[i] - (double)before[i]);
        assert_true(moved > 0.0); /* the embeddings did add something */
        /* backward: dtheta += from dencoded (random) */
        fill_dmixed(enc_c, n, 99 + (uint64_t)k);
        if (emu->upload(emu, enc_e, enc_c, n * sizeof(float), &err))
            fail_msg("%s", err.message);
        float *dth_c[MAX_TERMS] = {NULL}, *dth_e[MAX_TERMS] = {NULL};
        for (int t = 0; t < fc.set.n; t++) {
            dth_c[t] = fc.set.terms[t].n_params ? calloc((size_t)fc.set.terms[t].n_params, sizeof(float)) : NULL;
            dth_e[t] = fc.set.terms[t].n_params ? calloc((size_t)fc.set.terms[t].n_params, sizeof(float)) : NULL;
        }
        if (bk_embed_backward(&pc, enc_c, dth_c, &err) || bk_embed_backward(&pe, enc_e, dth_e, &err))
            fail_msg("%s", err.message);
        int embeds = 0;
        for (int t = 0; t < fc.set.n; t++) {
            if (!(fc.set.terms[t].caps & BIASKIT_CAP_EMBED))
                continue;
            embeds++;
            assert_int_equal(pe.cuda_embeds[t], 0);
            assert_int_equal(pe.host_embeds[t], k + 1);
            assert_int_equal(pc.host_embeds[t], k + 1);
            if (!fc.set.terms[t].n_params)
                continue;
            assert_int_equal(pe.cuda_embed_backwards[t], 0);
            assert_int_equal(pe.host_embed_backwards[t], k + 1);
            expect_same_floats(dth_e[t], dth_c[t], (size_t)fc.set.terms[t].n_params, "embedding gradient");
            double norm = 0.0;
            for (int64_t i = 0; i < fc.set.terms[t].n_params; i++)
                norm += fabs((double)dth_c[t][i]);
            assert_true(norm > 0.0);
        }
        assert_true(embeds > 0);
        for (int t = 0; t < fc.set.n; t++)
            free(dth_c[t]), free(dth_e[t]);
        emu->release(emu, enc_e);
        free(enc_c), free(got), free(before);
    }
    bk_positions_free(&pc);
    bk_positions_free(&pe);
    close_terms(&fc);
    close_terms(&fe);
    bk_backend_destroy(emu);
}

static void positions_segments_rotary_embeddings(void **state)
{
    (void)state;
    compare_positions(MODEL POS_TERMS);
    /* rotary on the token stream (no positions array), sinusoidal ape */
    compare_positions(MODEL "[[term]]\nplugin = \"ape\"\n[[term]]\nplugin = \"ape\"\nname = \"l\"\nvariant = "
                            "\"learned\"\n[[term]]\nplugin = \"rope\"\n");
}

/* A plugin built before embed_cuda was appended (struct_size = BIASKIT_PLUGIN_V1_SIZE) loads, the
 * host never reads the fields past its size (which hold functions that fail if called), and its
 * embedding runs on the host path of a device backend exactly as on the CPU. */
static void old_descriptor_loads_and_runs_on_the_host(void **state)
{
    (void)state;
    const char *text = MODEL "[[term]]\nplugin = \"oldembed\"\n";
    fixture f;
    open_ok(&f, text);
    const biaskit_plugin *d = f.set.terms[0].plugin->desc;
    assert_int_equal(d->struct_size, (uint32_t)BIASKIT_PLUGIN_V1_SIZE);
    assert_true(d->struct_size < sizeof(biaskit_plugin));
    assert_non_null(d->embed_cuda); /* present in the object, past struct_size */
    assert_null(bk_descriptor_embed_cuda(d));
    assert_null(bk_descriptor_embed_backward_cuda(d));
    assert_int_equal(bk_descriptor_problems(d, NULL, NULL), 0);
    close_terms(&f);
    compare_positions(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bias_sum_mixing),
        cmocka_unit_test(bias_kernel_mixing),
        cmocka_unit_test(bias_learnable_weights),
        cmocka_unit_test(bias_two_streams),
        cmocka_unit_test(bias_nonfinite_table_is_named),
        cmocka_unit_test(positions_segments_rotary_embeddings),
        cmocka_unit_test(old_descriptor_loads_and_runs_on_the_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
