/* CUDA tables and their gradients equal the host ones, for every built-in table plugin; the device
 * embeddings (embed_cuda, embed_backward_cuda) of ape and bipe equal their host ones; and through the
 * bias runtime and the positions on the CUDA backend the plugins' CUDA functions really run (the
 * runtimes' counters) and agree with the CPU runtime. The CUDA side is the plugin's own table_cuda,
 * called directly, and the engine's bk_term_table_cuda must return exactly it: the engine falls back
 * to the host table for a plugin without table_cuda, which would make a comparison through it alone pass host against host.
 *
 * First, without a GPU, in a CUDA build: every plugin compared below has table_cuda (and
 * table_backward_cuda when it has parameters); a plugin that lost them fails here. Then the
 * comparisons, which need a GPU: without one the test exits 77, which ctest reports as skipped (with
 * the reason printed). */
#include "term_fixture.h"

#include "bias/bias.h"
#include "model/positions.h"
#include "plugin/descriptor.h"

/* The experiments compared: every built-in table plugin and variant, at table lengths past one
 * grid-stride sweep where it matters. Device transcendental functions (logf, powf, expf) may differ
 * from glibc's by a few ulp, hence 1e-5 for the plugins that use them. */
typedef struct cuda_case {
    const char *text;
    int32_t distances;
    double tol;
} cuda_case;

static const cuda_case alibi_cases[] = {
    {"[model]\nheads = 16\ndim = 256\n[[term]]\nplugin = \"alibi\"\n", 65536, 1e-6},
    {"[model]\nheads = 12\ndim = 384\n[[term]]\nplugin = \"alibi\"\nslope_scale = 96.0\n", 4097, 1e-6},
    {"[model]\nheads = 3\ndim = 48\n[[term]]\nplugin = \"alibi\"\nslopes = [0.5, 0.1, 0.01]\n", 1000, 1e-6},
};

static const cuda_case kerple_cases[] = {
    {"[model]\nheads = 12\ndim = 384\n[[term]]\nplugin = \"kerple\"\n", 65536, 1e-5},
    {"[model]\nheads = 8\ndim = 256\n[[term]]\nplugin = \"kerple\"\nvariant = \"power\"\n", 65536, 1e-5},
    {"[model]\nheads = 5\ndim = 80\n[[term]]\nplugin = \"kerple\"\nvariant = \"3para-log\"\n", 8192, 1e-5},
};

static const cuda_case t5_mep_qin_cases[] = {
    {"[model]\nheads = 12\ndim = 384\n[[term]]\nplugin = \"t5\"\n[[term]]\nplugin = \"t5\"\nname = \"b\"\n"
     "bidirectional = true\n",
     65536, 1e-6},
    {"[model]\nheads = 12\ndim = 384\n[[term]]\nplugin = \"mep\"\n[[term]]\nplugin = \"mep\"\nname = \"p\"\n"
     "variant = \"param\"\n",
     65536, 1e-5},
    {"[model]\nheads = 4\ndim = 64\n[[term]]\nplugin = \"qin\"\n[[term]]\nplugin = \"qin\"\nname = \"t2\"\n"
     "form = \"type2\"\n[[term]]\nplugin = \"qin\"\nname = \"h\"\nform = \"harmonic\"\n[[term]]\nplugin = \"qin\"\n"
     "name = \"n\"\nform = \"nlogn\"\n",
     65536, 1e-5},
};

#define N_CASES(a) (int)(sizeof(a) / sizeof((a)[0]))

/* Host and CUDA tables of every table term of `c` agree to c->tol (relative); returns the number of
 * table terms compared. */
static int compare(const cuda_case *c)
{
    fixture f;
    open_ok(&f, c->text);
    int compared = 0;
    for (int i = 0; i < f.set.n; i++) {
        const bk_term *t = &f.set.terms[i];
        if (!bk_term_has_table(t))
            continue;
        size_t n = (size_t)t->n_heads * (size_t)c->distances;
        float *host = malloc(n * sizeof *host), *dev = malloc(n * sizeof *dev), *engine = malloc(n * sizeof *engine);
        bk_error err;
        assert_int_equal(bk_term_table(t, 0, c->distances, host, &err), BK_OK);
        plugin_table_cuda(t, c->distances, dev); /* fails when the plugin has no table_cuda */
        if (bk_term_table_cuda(t, 0, c->distances, engine, &err))
            fail_msg("%s", err.message);
        if (memcmp(dev, engine, n * sizeof *dev) != 0)
            fail_msg("term %s: bk_term_table_cuda differs from the plugin's table_cuda", t->label);
        for (size_t k = 0; k < n; k++)
            if (fabs((double)host[k] - dev[k]) > c->tol * (1.0 + fabs((double)host[k])))
                fail_msg("term %s: element %zu: host %.9g, cuda %.9g", t->label, k, (double)host[k], (double)dev[k]);
        free(host);
        free(dev);
        free(engine);
        compared++;
    }
    close_terms(&f);
    return compared;
}

static void compare_all(const cuda_case *cases, int n)
{
    for (int i = 0; i < n; i++)
        assert_true(compare(&cases[i]) > 0);
}

static void alibi_heads_and_variants(void **state)
{
    (void)state;
    compare_all(alibi_cases, N_CASES(alibi_cases));
}

static void kerple_variants(void **state)
{
    (void)state;
    compare_all(kerple_cases, N_CASES(kerple_cases));
}

static void t5_mep_qin(void **state)
{
    (void)state;
    compare_all(t5_mep_qin_cases, N_CASES(t5_mep_qin_cases));
}

/* The gradient of every table term of `c` with parameters: table_backward_cuda against the host
 * table_backward at min(D, 4097) distances, |cuda - host| <= 1e-5 backward(|g|) + 1e-6 (relative to the
 * size of what is summed, as compare_cuda in term_fixture.h), and bit-identical on repeat. */
static void compare_gradients_of(const cuda_case *c)
{
    fixture f;
    open_ok(&f, c->text);
    const int32_t D = c->distances < 4097 ? c->distances : 4097;
    for (int i = 0; i < f.set.n; i++) {
        const bk_term *t = &f.set.terms[i];
        if (!bk_term_has_table(t) || !t->n_params)
            continue;
        require_cuda_entry_points(t);
        const biaskit_plugin *desc = t->plugin->desc;
        size_t n = (size_t)t->n_heads * (size_t)D, P = (size_t)t->n_params;
        float *g = malloc(n * sizeof *g), *absg = malloc(n * sizeof *absg);
        float *want = calloc(P, sizeof *want), *scale = calloc(P, sizeof *scale);
        float *got = calloc(P, sizeof *got), *again = calloc(P, sizeof *again);
        biaskit_rng rng = biaskit_rng_seeded(11 + (uint64_t)i);
        for (size_t k = 0; k < n; k++) {
            g[k] = (float)biaskit_rng_normal(&rng);
            absg[k] = fabsf(g[k]);
        }
        const float *theta = bk_term_theta(t, 0);
        biaskit_error pe = {0, ""};
        assert_int_equal(desc->table_backward(t->instance, theta, D, g, want, &pe), BIASKIT_OK);
        assert_int_equal(desc->table_backward(t->instance, theta, D, absg, scale, &pe), BIASKIT_OK);
        void *d_theta = NULL, *d_g = NULL, *d_grad = NULL;
        bk_error err;
        if (bk_device_alloc(&d_theta, P * sizeof(float), &err) || bk_device_alloc(&d_g, n * sizeof(float), &err) ||
            bk_device_alloc(&d_grad, P * sizeof(float), &err) ||
            bk_device_upload(d_theta, theta, P * sizeof(float), &err) ||
            bk_device_upload(d_g, g, n * sizeof(float), &err))
            fail_msg("%s", err.message);
        for (int run = 0; run < 2; run++) {
            float *out = run ? again : got;
            if (bk_device_upload(d_grad, out, P * sizeof(float), &err))
                fail_msg("%s", err.message);
            if (desc->table_backward_cuda(t->instance, d_theta, D, d_g, d_grad, NULL, &pe) != BIASKIT_OK)
                fail_msg("term %s: table_backward_cuda: %s", t->label, pe.message);
            if (bk_device_download(out, d_grad, P * sizeof(float), &err))
                fail_msg("%s", err.message);
        }
        if (memcmp(got, again, P * sizeof *got) != 0)
            fail_msg("term %s (plugin %s): table_backward_cuda differs between two identical calls", t->label,
                     desc->name);
        for (size_t k = 0; k < P; k++)
            if (!(fabs((double)got[k] - want[k]) <= 1e-5 * fabs((double)scale[k]) + 1e-6))
                fail_msg("term %s (plugin %s): gradient %zu at %d distances: host %.9g, cuda %.9g", t->label,
                         desc->name, k, (int)D, (double)want[k], (double)got[k]);
        bk_device_free(d_theta), bk_device_free(d_g), bk_device_free(d_grad);
        free(g), free(absg), free(want), free(scale), free(got), free(again);
    }
    close_terms(&f);
}

static void table_gradients(void **state)
{
    (void)state;
    const cuda_case *lists[] = {alibi_cases, kerple_cases, t5_mep_qin_cases};
    const int counts[] = {N_CASES(alibi_cases), N_CASES(kerple_cases), N_CASES(t5_mep_qin_cases)};
    for (int l = 0; l < 3; l++)
        for (int i = 0; i < counts[l]; i++)
            compare_gradients_of(&lists[l][i]);
}

/* ---- embeddings ------------------------------------------------------------------------------- */

static const char *const embed_cases[] = {
    "[model]\nheads = 4\ndim = 64\n[train]\nlength = 64\n[[term]]\nplugin = \"ape\"\n",
    "[model]\nheads = 4\ndim = 64\n[train]\nlength = 64\n[[term]]\nplugin = \"ape\"\nvariant = \"learned\"\n",
    "[model]\nheads = 4\ndim = 48\n[train]\nlength = 64\n[[term]]\nplugin = \"bipe\"\nmax_position = 9\n",
};

/* Positions of 3 sequences of 80 tokens: the token index (past the 64 rows of a learned table, which
 * clamps), in-segment positions that restart (n % 7), and the token index again. */
enum { EMBED_ROWS = 3, EMBED_T = 80, EMBED_N = EMBED_ROWS * EMBED_T };

static void embed_positions_of(int32_t *pos)
{
    for (int n = 0; n < EMBED_N; n++)
        pos[n] = n / EMBED_T == 1 ? (n % EMBED_T) % 7 : n % EMBED_T;
}

/* The plugin's embed_cuda and embed_backward_cuda, called directly on device buffers, against its host
 * embed and embed_backward: the embedding within 1e-6 (1 + |host|) (sinusoidal: the device's double
 * sin/cos/pow), the gradient bit for bit (ape.cu adds in the host's order), both deterministic. */
static void compare_embedding(const char *text)
{
    fixture f;
    open_ok(&f, text);
    const bk_term *t = &f.set.terms[0];
    const biaskit_plugin *desc = t->plugin->desc;
    bk_embed_cuda_fn fwd = bk_descriptor_embed_cuda(desc);
    bk_embed_backward_cuda_fn bwd = bk_descriptor_embed_backward_cuda(desc);
    if (!fwd || !bwd)
        fail_msg("plugin %s has no embed_cuda / embed_backward_cuda: nothing would be compared", desc->name);
    const int C = f.set.geometry.d_model;
    const size_t n = (size_t)EMBED_N * (size_t)C, P = (size_t)t->n_params;
    int32_t pos[EMBED_N];
    embed_positions_of(pos);
    float *host = calloc(n, sizeof *host), *dev = malloc(n * sizeof *dev), *again = malloc(n * sizeof *again);
    float *dout = malloc(n * sizeof *dout);
    biaskit_rng rng = biaskit_rng_seeded(5);
    for (size_t k = 0; k < n; k++)
        dout[k] = (float)biaskit_rng_normal(&rng);
    biaskit_error pe = {0, ""};
    const float *theta = bk_term_theta(t, 0);
    assert_int_equal(desc->embed(t->instance, theta, pos, EMBED_N, host, &pe), BIASKIT_OK);
    void *d_theta = NULL, *d_pos = NULL, *d_out = NULL, *d_dout = NULL, *d_grad = NULL;
    bk_error err;
    if ((P && (bk_device_alloc(&d_theta, P * sizeof(float), &err) ||
               bk_device_upload(d_theta, theta, P * sizeof(float), &err))) ||
        bk_device_alloc(&d_pos, sizeof pos, &err) || bk_device_upload(d_pos, pos, sizeof pos, &err) ||
        bk_device_alloc(&d_out, n * sizeof(float), &err) || bk_device_alloc(&d_dout, n * sizeof(float), &err) ||
        bk_device_upload(d_dout, dout, n * sizeof(float), &err))
        fail_msg("%s", err.message);
    for (int run = 0; run < 2; run++) {
        float *out = run ? again : dev;
        memset(out, 0, n * sizeof *out);
        if (bk_device_upload(d_out, out, n * sizeof(float), &err))
            fail_msg("%s", err.message);
        if (fwd(t->instance, d_theta, d_pos, EMBED_N, d_out, NULL, &pe) != BIASKIT_OK)
            fail_msg("plugin %s: embed_cuda: %s", desc->name, pe.message);
        if (bk_device_download(out, d_out, n * sizeof(float), &err))
            fail_msg("%s", err.message);
    }
    assert_memory_equal(dev, again, n * sizeof *dev);
    for (size_t k = 0; k < n; k++)
        if (!(fabs((double)dev[k] - host[k]) <= 1e-6 * (1.0 + fabs((double)host[k]))))
            fail_msg("plugin %s: token %zu (position %d), channel %zu: host %.9g, cuda %.9g", desc->name,
                     k / (size_t)C, (int)pos[k / (size_t)C], k % (size_t)C, (double)host[k], (double)dev[k]);
    if (P) {
        float *want = calloc(P, sizeof *want), *got = calloc(P, sizeof *got), *got2 = calloc(P, sizeof *got2);
        assert_int_equal(desc->embed_backward(t->instance, theta, pos, EMBED_N, dout, want, &pe), BIASKIT_OK);
        if (bk_device_alloc(&d_grad, P * sizeof(float), &err))
            fail_msg("%s", err.message);
        for (int run = 0; run < 2; run++) {
            float *out = run ? got2 : got;
            if (bk_device_upload(d_grad, out, P * sizeof(float), &err))
                fail_msg("%s", err.message);
            if (bwd(t->instance, d_theta, d_pos, EMBED_N, d_dout, d_grad, NULL, &pe) != BIASKIT_OK)
                fail_msg("plugin %s: embed_backward_cuda: %s", desc->name, pe.message);
            if (bk_device_download(out, d_grad, P * sizeof(float), &err))
                fail_msg("%s", err.message);
        }
        for (size_t k = 0; k < P; k++)
            if (memcmp(&got[k], &want[k], sizeof(float)) != 0 || memcmp(&got2[k], &want[k], sizeof(float)) != 0)
                fail_msg("plugin %s: embedding gradient %zu: host %.9g, cuda %.9g then %.9g (expected the host's "
                         "bits)", desc->name, k, (double)want[k], (double)got[k], (double)got2[k]);
        free(want), free(got), free(got2);
    }
    bk_device_free(d_theta), bk_device_free(d_pos), bk_device_free(d_out), bk_device_free(d_dout);
    bk_device_free(d_grad);
    free(host), free(dev), free(again), free(dout);
    close_terms(&f);
}

static void embeddings(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof embed_cases / sizeof embed_cases[0]; i++)
        compare_embedding(embed_cases[i]);
}

/* ---- the runtimes on the CUDA backend ------------------------------------------------------------ */

static void download_or_fail(bk_backend *be, void *dst, const void *src, size_t bytes)
{
    bk_error err;
    if (be->download(be, dst, src, bytes, &err))
        fail_msg("%s", err.message);
}

/* The mixed tables and one step's gradients of `text` (2 layers) on `be`, into host arrays. The
 * counters of `b` are left for the caller. */
static void bias_step(fixture *f, bk_bias *b, bk_backend *be, int32_t D, float *mixed, float **dtheta)
{
    bk_error err;
    if (bk_bias_init(b, &f->set, (int)f->exp.model.layers, f->exp.attention.learn_weights, &err) ||
        bk_bias_set_backend(b, be, &err) || bk_bias_forward(b, D, &err))
        fail_msg("%s: %s", be->name, err.message);
    const size_t n = (size_t)b->n_heads * (size_t)D;
    float *dm_host = malloc(n * sizeof *dm_host), *dm = NULL;
    if (be->alloc(be, (void **)&dm, n * sizeof(float), &err))
        fail_msg("%s", err.message);
    bk_bias_zero_grad(b);
    for (int l = 0; l < b->n_layers; l++) {
        download_or_fail(be, mixed + (size_t)l * n, bk_bias_table(b, l, BK_STREAM_TOKEN), n * sizeof(float));
        biaskit_rng rng = biaskit_rng_seeded(100 + (uint64_t)l);
        for (size_t k = 0; k < n; k++)
            dm_host[k] = (float)biaskit_rng_normal(&rng);
        if (be->upload(be, dm, dm_host, n * sizeof(float), &err))
            fail_msg("%s", err.message);
        const float *dmixed[BK_STREAM_COUNT] = {dm, NULL};
        if (bk_bias_backward(b, l, dmixed, &err))
            fail_msg("%s: %s", be->name, err.message);
    }
    if (bk_bias_gradients_to_host(b, &err))
        fail_msg("%s: %s", be->name, err.message);
    for (int t = 0; t < f->set.n; t++)
        if (dtheta[t])
            memcpy(dtheta[t], b->dtheta[t],
                   (size_t)f->set.terms[t].n_copies * (size_t)f->set.terms[t].n_params * sizeof(float));
    be->release(be, dm);
    free(dm_host);
}

/* Through the bias runtime on the CUDA backend every table term's tables and gradients come from its
 * plugin's table_cuda / table_backward_cuda (the counters say so), and they agree with the CPU runtime:
 * mixed tables within 1e-5 (1 + |cpu|), gradients within 1e-4 (|cpu_i| + max |cpu|). */
static void bias_runtime_calls_table_cuda(void **state)
{
    (void)state;
    const char *text = "[model]\nlayers = 2\nheads = 4\ndim = 64\n[attention]\nmixing = \"kernel\"\n"
                       "learn_weights = true\n[[term]]\nplugin = \"alibi\"\n[[term]]\nplugin = \"kerple\"\n"
                       "per_layer = true\n[[term]]\nplugin = \"t5\"\n[[term]]\nplugin = \"mep\"\nvariant = \"param\"\n";
    enum { D = 300 };
    bk_backend *cuda = NULL;
    bk_error err;
    if (bk_backend_cuda_create(&cuda, BK_MATMUL_FP32, &err))
        fail_msg("%s", err.message);
    fixture fc, fd;
    open_ok(&fc, text);
    open_ok(&fd, text);
    const int L = 2, n_terms = fc.set.n;
    const size_t n = (size_t)fc.set.geometry.n_heads * D;
    float *mc = malloc(L * n * sizeof *mc), *md = malloc(L * n * sizeof *md);
    float *gc[8] = {NULL}, *gd[8] = {NULL};
    for (int t = 0; t < n_terms; t++) {
        size_t P = (size_t)fc.set.terms[t].n_copies * (size_t)fc.set.terms[t].n_params;
        gc[t] = P ? malloc(P * sizeof(float)) : NULL;
        gd[t] = P ? malloc(P * sizeof(float)) : NULL;
    }
    bk_bias bc, bd;
    bias_step(&fc, &bc, bk_backend_cpu(), D, mc, gc);
    bias_step(&fd, &bd, cuda, D, md, gd);
    for (size_t k = 0; k < L * n; k++)
        if (!(fabs((double)md[k] - mc[k]) <= 1e-5 * (1.0 + fabs((double)mc[k]))))
            fail_msg("mixed table value %zu: cuda %.9g, cpu %.9g", k, (double)md[k], (double)mc[k]);
    for (int t = 0; t < n_terms; t++) {
        const bk_term *term = &fd.set.terms[t];
        if (bd.cuda_tables[t] == 0 || bd.host_tables[t] != 0)
            fail_msg("term %s (plugin %s): %lld tables from table_cuda, %lld from the host: expected table_cuda only",
                     term->label, term->plugin->desc->name, (long long)bd.cuda_tables[t],
                     (long long)bd.host_tables[t]);
        if (!gc[t])
            continue;
        if (bd.cuda_backwards[t] == 0 || bd.host_backwards[t] != 0)
            fail_msg("term %s: %lld gradients from table_backward_cuda, %lld from the host", term->label,
                     (long long)bd.cuda_backwards[t], (long long)bd.host_backwards[t]);
        size_t P = (size_t)term->n_copies * (size_t)term->n_params;
        double top = 0.0;
        for (size_t k = 0; k < P; k++)
            top = fmax(top, fabs((double)gc[t][k]));
        assert_true(top > 0.0);
        for (size_t k = 0; k < P; k++)
            if (!(fabs((double)gd[t][k] - gc[t][k]) <= 1e-4 * (fabs((double)gc[t][k]) + top)))
                fail_msg("term %s: gradient %zu: cuda %.9g, cpu %.9g", term->label, k, (double)gd[t][k],
                         (double)gc[t][k]);
    }
    for (int k = 0; k < bc.n_on[BK_STREAM_TOKEN]; k++) {
        double a = bd.mix_grads[BK_STREAM_TOKEN][k], b = bc.mix_grads[BK_STREAM_TOKEN][k];
        if (!(fabs(a - b) <= 1e-4 * (fabs(b) + 1e-3)))
            fail_msg("mixing-parameter gradient %d: cuda %.9g, cpu %.9g", k, a, b);
    }
    bk_bias_free(&bc), bk_bias_free(&bd);
    for (int t = 0; t < n_terms; t++)
        free(gc[t]), free(gd[t]);
    free(mc), free(md);
    close_terms(&fc), close_terms(&fd);
    bk_backend_destroy(cuda);
}

/* Through the positions on the CUDA backend, ape (learned) and bipe embed with embed_cuda and
 * embed_backward_cuda (the counters say so), equal to the CPU runtime: the embedding within 1e-6,
 * the gradients bit for bit. */
static void positions_call_embed_cuda(void **state)
{
    (void)state;
    const char *text = "[model]\nlayers = 2\nheads = 4\ndim = 32\n[train]\nlength = 16\n[[term]]\nplugin = "
                       "\"bipe\"\n[[term]]\nplugin = \"ape\"\nvariant = \"learned\"\n";
    enum { B = 2, T = 16, C = 32 };
    bk_backend *cuda = NULL;
    bk_error err;
    if (bk_backend_cuda_create(&cuda, BK_MATMUL_FP32, &err))
        fail_msg("%s", err.message);
    fixture fc, fd;
    open_ok(&fc, text);
    open_ok(&fd, text);
    bk_positions pc, pd;
    if (bk_positions_init(&pc, &fc.set, &err) || bk_positions_init(&pd, &fd.set, &err) ||
        bk_positions_set_backend(&pd, cuda, &err))
        fail_msg("%s", err.message);
    const char *sample = "ab. cd\nef. gh.ij\nk. lm.nop\nqr.";
    int32_t tokens[B * T];
    for (int i = 0; i < B * T; i++)
        tokens[i] = (unsigned char)sample[i % 31];
    if (bk_positions_prepare(&pc, tokens, B, T, &err) || bk_positions_prepare(&pd, tokens, B, T, &err))
        fail_msg("%s", err.message);
    assert_int_equal(bk_positions_span(&pd, BK_STREAM_SEGMENT), bk_positions_span(&pc, BK_STREAM_SEGMENT));
    const size_t n = (size_t)B * T * C;
    float *xc = malloc(n * sizeof *xc), *xd = malloc(n * sizeof *xd), *mem = NULL;
    biaskit_rng rng = biaskit_rng_seeded(9);
    for (size_t k = 0; k < n; k++)
        xc[k] = (float)biaskit_rng_normal(&rng);
    if (cuda->alloc(cuda, (void **)&mem, n * sizeof(float), &err) ||
        cuda->upload(cuda, mem, xc, n * sizeof(float), &err) || bk_embed_forward(&pc, xc, &err) ||
        bk_embed_forward(&pd, mem, &err))
        fail_msg("%s", err.message);
    download_or_fail(cuda, xd, mem, n * sizeof(float));
    for (size_t k = 0; k < n; k++)
        if (!(fabs((double)xd[k] - xc[k]) <= 1e-6 * (1.0 + fabs((double)xc[k]))))
            fail_msg("encoded value %zu: cuda %.9g, cpu %.9g", k, (double)xd[k], (double)xc[k]);
    for (size_t k = 0; k < n; k++)
        xc[k] = (float)biaskit_rng_normal(&rng);
    float *dc[2], *dd[2];
    for (int t = 0; t < 2; t++) {
        dc[t] = calloc((size_t)fc.set.terms[t].n_params, sizeof(float));
        dd[t] = calloc((size_t)fc.set.terms[t].n_params, sizeof(float));
    }
    if (cuda->upload(cuda, mem, xc, n * sizeof(float), &err) || bk_embed_backward(&pc, xc, dc, &err) ||
        bk_embed_backward(&pd, mem, dd, &err))
        fail_msg("%s", err.message);
    for (int t = 0; t < 2; t++) {
        const bk_term *term = &fd.set.terms[t];
        if (pd.cuda_embeds[t] != 1 || pd.host_embeds[t] != 0 || pd.cuda_embed_backwards[t] != 1 ||
            pd.host_embed_backwards[t] != 0)
            fail_msg("term %s: embed_cuda %lld, host embed %lld, embed_backward_cuda %lld, host backward %lld: "
                     "expected the CUDA functions once each", term->label, (long long)pd.cuda_embeds[t],
                     (long long)pd.host_embeds[t], (long long)pd.cuda_embed_backwards[t],
                     (long long)pd.host_embed_backwards[t]);
        for (int64_t k = 0; k < term->n_params; k++)
            if (memcmp(&dd[t][k], &dc[t][k], sizeof(float)) != 0)
                fail_msg("term %s: gradient %lld: cuda %.9g, cpu %.9g", term->label, (long long)k,
                         (double)dd[t][k], (double)dc[t][k]);
        free(dc[t]), free(dd[t]);
    }
    cuda->release(cuda, mem);
    free(xc), free(xd);
    bk_positions_free(&pc), bk_positions_free(&pd);
    close_terms(&fc), close_terms(&fd);
    bk_backend_destroy(cuda);
}

/* A plugin built before embed_cuda was appended (tests/plugins/oldembed.c: the fields past its
 * struct_size hold functions that fail if called) embeds on the host path of the CUDA backend. */
static void old_descriptor_on_the_cuda_backend(void **state)
{
    (void)state;
    const char *text =
        "[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 8\n[[term]]\nplugin = \"oldembed\"\n";
    enum { B = 2, T = 8, C = 16 };
    bk_backend *cuda = NULL;
    bk_error err;
    if (bk_backend_cuda_create(&cuda, BK_MATMUL_FP32, &err))
        fail_msg("%s", err.message);
    fixture f;
    open_ok(&f, text);
    bk_positions ps;
    int32_t tokens[B * T] = {0};
    float *mem = NULL, *dtheta = calloc((size_t)f.set.terms[0].n_params, sizeof(float));
    float *dth[1] = {dtheta};
    if (bk_positions_init(&ps, &f.set, &err) || bk_positions_set_backend(&ps, cuda, &err) ||
        bk_positions_prepare(&ps, tokens, B, T, &err) ||
        cuda->alloc(cuda, (void **)&mem, B * T * C * sizeof(float), &err) ||
        bk_embed_forward(&ps, mem, &err) || bk_embed_backward(&ps, mem, dth, &err))
        fail_msg("%s", err.message);
    assert_int_equal(ps.host_embeds[0], 1);
    assert_int_equal(ps.cuda_embeds[0], 0);
    assert_int_equal(ps.host_embed_backwards[0], 1);
    assert_int_equal(ps.cuda_embed_backwards[0], 0);
    cuda->release(cuda, mem);
    free(dtheta);
    bk_positions_free(&ps);
    close_terms(&f);
    bk_backend_destroy(cuda);
}

/* No GPU needed: the descriptors of every plugin compared above carry their CUDA entry points. */
static void every_compared_plugin_has_cuda_entry_points(void **state)
{
    (void)state;
#ifndef BK_HAVE_CUDA
    printf("skipped: built without CUDA, the plugins have no CUDA entry points\n");
    skip();
#else
    const cuda_case *lists[] = {alibi_cases, kerple_cases, t5_mep_qin_cases};
    const int counts[] = {N_CASES(alibi_cases), N_CASES(kerple_cases), N_CASES(t5_mep_qin_cases)};
    int checked = 0;
    for (int l = 0; l < 3; l++)
        for (int i = 0; i < counts[l]; i++) {
            fixture f;
            open_ok(&f, lists[l][i].text);
            for (int k = 0; k < f.set.n; k++)
                if (bk_term_has_table(&f.set.terms[k])) {
                    require_cuda_entry_points(&f.set.terms[k]);
                    checked++;
                }
            close_terms(&f);
        }
    assert_int_equal(checked, 14);
    for (size_t i = 0; i < sizeof embed_cases / sizeof embed_cases[0]; i++) {
        fixture f;
        open_ok(&f, embed_cases[i]);
        const biaskit_plugin *desc = f.set.terms[0].plugin->desc;
        if (!bk_descriptor_embed_cuda(desc) || !bk_descriptor_embed_backward_cuda(desc))
            fail_msg("plugin %s: the descriptor has no embed_cuda / embed_backward_cuda", desc->name);
        close_terms(&f);
    }
#endif
}

int main(void)
{
    const struct CMUnitTest no_gpu[] = {
        cmocka_unit_test(every_compared_plugin_has_cuda_entry_points),
    };
    int failed = cmocka_run_group_tests_name("descriptors", no_gpu, NULL, NULL);
    if (failed)
        return failed;
    char device[256];
    if (!bk_device_probe(device, sizeof device)) {
        printf("skipped: no GPU answers here: %s\n", device);
        return 77;
    }
    printf("device: %s\n", device);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(alibi_heads_and_variants),
        cmocka_unit_test(kerple_variants),
        cmocka_unit_test(t5_mep_qin),
        cmocka_unit_test(table_gradients),
        cmocka_unit_test(embeddings),
        cmocka_unit_test(bias_runtime_calls_table_cuda),
        cmocka_unit_test(positions_call_embed_cuda),
        cmocka_unit_test(old_descriptor_on_the_cuda_backend),
    };
    return cmocka_run_group_tests_name("cuda tables", tests, NULL, NULL);
}
