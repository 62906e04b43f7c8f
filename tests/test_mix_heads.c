/* Mixing weights learned per term or per head (docs/design.md §2.1; bias/mix.h, bias/bias.h):
 *   - which weights train: [attention] learn_weights (false, true = "per_term", "per_head") and the terms'
 *     learn_weight / weight_per_head, down to the bias's kinds, rows and packed parameters and the
 *     optimizer's mix.<stream> group;
 *   - refusals with file:line:column: the keys on a term without a table, one weight per head for a weight
 *     that does not train, a bad learn_weights;
 *   - the emulated device (the CUDA backend's code run as C) against the CPU: the mixed tables, the table
 *     terms' parameter gradients and the mixing parameters' gradients, for sum and kernel mixing with
 *     weights per head (and one shared learned weight and one fixed weight beside them);
 *   - the terms' weights after a change of the parameters (head_weights, weight = their mean) and
 *     bk_terms_mixed_table (what `biaskit bias`, trf, erf and reports mix) equal to the bias's table. */
#define _POSIX_C_SOURCE 200809L
#include "term_fixture.h"

#include "bias/bias.h"
#include "bias/mix.h"
#include "train/lm.h"

#include <math.h>
#include <stdlib.h>

#define MODEL "[model]\nlayers = 2\nheads = 4\ndim = 32\nvocab = 256\n[train]\nlength = 64\n"
#define D_TABLE 40

static void open_lm(bk_lm *lm, const char *text)
{
    bk_error err;
    setenv("BIASKIT_PLUGIN_PATH", BK_TEST_PLUGIN_DIR ":" BK_TEST_PLUGINS_DIR, 1);
    if (bk_lm_open_text(lm, text, "exp.toml", ".", NULL, 0, &err))
        fail_msg("%s\n  experiment:\n%s", err.message, text);
}

/* [attention] learn_weights = "per_head" with a term that keeps its weight and one that learns one weight:
 * kinds, rows, packed parameters, the optimizer's group, and every term's head weights. */
static void which_weights_train(void **state)
{
    (void)state;
    bk_lm lm;
    open_lm(&lm, MODEL "[attention]\nmixing = \"kernel\"\nlearn_weights = \"per_head\"\n"
                       "[[term]]\nplugin = \"alibi\"\n"
                       "[[term]]\nplugin = \"kerple\"\nlearn_weight = false\nweight = 2\n"
                       "[[term]]\nplugin = \"testlin\"\nweight_per_head = false\n"
                       "[[term]]\nplugin = \"rope\"\n");
    const bk_term *t = lm.terms.terms;
    assert_true(t[0].learn_weight && t[0].weight_per_head);
    assert_true(!t[1].learn_weight && !t[1].weight_per_head);
    assert_true(t[2].learn_weight && !t[2].weight_per_head);
    assert_true(!t[3].learn_weight && !t[3].head_weights); /* rope: no table */
    const bk_bias *b = &lm.bias;
    assert_int_equal(b->n_on[BK_STREAM_TOKEN], 3);
    assert_int_equal(b->groups[BK_STREAM_TOKEN], 4);
    assert_int_equal(b->kind[BK_STREAM_TOKEN][0], BK_MIX_LEARNED_PER_HEAD);
    assert_int_equal(b->kind[BK_STREAM_TOKEN][1], BK_MIX_FIXED);
    assert_int_equal(b->kind[BK_STREAM_TOKEN][2], BK_MIX_LEARNED);
    assert_int_equal(b->n_mix[BK_STREAM_TOKEN], 4 + 1);
    for (int k = 0; k < 3; k++)
        assert_non_null(t[k].head_weights);
    bk_adamw opt = {0};
    bk_error err;
    if (bk_lm_register(&lm, &opt, &err))
        fail_msg("%s", err.message);
    int found = 0;
    for (int g = 0; g < opt.n_groups; g++)
        if (!strcmp(opt.groups[g].name, "mix.token"))
            found = 1, assert_int_equal(opt.groups[g].n, 5);
    assert_true(found);
    /* kernel mode: alibi and testlin 1/3 (not given: 1/n), kerple 2, normalised: 1/8, 6/8, 1/8 */
    for (int h = 0; h < 4; h++) {
        double total = 0.0;
        for (int k = 0; k < 3; k++)
            total += t[k].head_weights[h];
        assert_float_equal(total, 1.0, 1e-12);
        assert_float_equal(t[1].head_weights[h] / t[0].head_weights[h], 6.0, 1e-6);
    }
    bk_adamw_free(&opt);
    bk_lm_close(&lm);
}

/* One term's weight learned alone ([attention] learn_weights off): one parameter, the others fixed; in
 * sum mode a fixed weight stays exactly as the file gives it after the learned one moved. */
static void one_term_learns_its_weight(void **state)
{
    (void)state;
    bk_lm lm;
    open_lm(&lm, MODEL "[[term]]\nplugin = \"alibi\"\nweight = 0.1\n"
                       "[[term]]\nplugin = \"kerple\"\nlearn_weight = true\nweight = 0.7\n");
    assert_int_equal(lm.bias.n_mix[BK_STREAM_TOKEN], 1);
    assert_int_equal(lm.bias.groups[BK_STREAM_TOKEN], 1);
    assert_true(lm.bias.learn_weights);
    lm.bias.mix_params[BK_STREAM_TOKEN][0] = 1.5f;
    bk_bias_sync_weights(&lm.bias);
    assert_true(lm.terms.terms[0].weight == 0.1);
    assert_true(lm.terms.terms[1].weight == 1.5);
    assert_null(lm.terms.terms[0].head_weights);
    bk_lm_close(&lm);
}

static void refusals(void **state)
{
    (void)state;
    setenv("BIASKIT_PLUGIN_PATH", BK_TEST_PLUGIN_DIR ":" BK_TEST_PLUGINS_DIR, 1);
    expect_term_error(MODEL "[[term]]\nplugin = \"rope\"\nlearn_weight = true\n", "exp.toml:10:16: [[term]] #1 (rope): "
                      "'learn_weight' is about the weight that mixes a distance table; plugin 'rope' has no table",
                      NULL);
    expect_term_error(MODEL "[[term]]\nplugin = \"bipe\"\nweight_per_head = false\n",
                      "exp.toml:10:19: [[term]] #1 (bipe): 'weight_per_head'", "has no table");
    expect_term_error(MODEL "[[term]]\nplugin = \"alibi\"\nweight_per_head = true\n",
                      "exp.toml:10:19: [[term]] #1 (alibi): weight_per_head = true needs a weight that trains", NULL);
    expect_term_error(MODEL "[attention]\nlearn_weights = \"per_head\"\n[[term]]\nplugin = \"alibi\"\n"
                            "learn_weight = false\nweight_per_head = true\n",
                      "exp.toml:13:19: [[term]] #1 (alibi): weight_per_head = true needs a weight that trains", NULL);
    expect_term_error(MODEL "[attention]\nlearn_weights = \"per_layer\"\n",
                      "exp.toml:9:17: [attention] learn_weights: expected true, false or one of per_term, per_head, "
                      "got 'per_layer'", NULL);
    expect_term_error(MODEL "[[term]]\nplugin = \"alibi\"\nlearn_weight = 1\n",
                      "exp.toml:10:16: [[term]] #1: expected a boolean for 'learn_weight', got integer", NULL);
}

/* Everything the bias gives on one backend: mixed tables, gradients of the terms' parameters and of the
 * mixing parameters, after a forward at D_TABLE and a backward of fixed dL/dM on every layer. */
typedef struct run {
    float mixed[2][BK_STREAM_COUNT][4 * D_TABLE];
    float dtheta[4][256];
    float mix_grads[16];
    int n_mix;
} run;

static void run_on(const char *text, const char *device, run *r)
{
    char full[2048];
    snprintf(full, sizeof full, "%s[run]\ndevice = \"%s\"\n", text, device);
    bk_lm lm;
    open_lm(&lm, full);
    bk_bias *b = &lm.bias;
    bk_backend *be = lm.be;
    bk_error err;
    memset(r, 0, sizeof *r);
    /* parameters moved off their start, each head and term apart */
    for (int k = 0; k < b->n_mix[BK_STREAM_TOKEN]; k++)
        b->mix_params[BK_STREAM_TOKEN][k] += 0.1f * (float)(k + 1) * (k % 2 ? -1.0f : 1.0f);
    bk_bias_sync_weights(b);
    if (bk_bias_forward(b, D_TABLE, &err))
        fail_msg("%s: %s", device, err.message);
    const size_t n = 4 * D_TABLE;
    for (int l = 0; l < 2; l++)
        for (int s = 0; s < BK_STREAM_COUNT; s++) {
            const float *m = bk_bias_table(b, l, (bk_stream)s);
            if (m && be->download(be, r->mixed[l][s], m, n * sizeof(float), &err))
                fail_msg("%s", err.message);
        }
    float *dm_mem = NULL, host[4 * D_TABLE];
    if (be->alloc(be, (void **)&dm_mem, n * sizeof(float), &err))
        fail_msg("%s", err.message);
    bk_bias_zero_grad(b);
    for (int l = 0; l < 2; l++) {
        biaskit_rng g = biaskit_rng_seeded(77 + (uint64_t)l);
        for (size_t i = 0; i < n; i++)
            host[i] = (float)(2.0 * biaskit_rng_uniform(&g) - 1.0);
        if (be->upload(be, dm_mem, host, n * sizeof(float), &err))
            fail_msg("%s", err.message);
        const float *dm[BK_STREAM_COUNT] = {dm_mem, NULL};
        if (bk_bias_backward(b, l, dm, &err))
            fail_msg("%s: %s", device, err.message);
    }
    if (bk_bias_gradients_to_host(b, &err))
        fail_msg("%s", err.message);
    be->release(be, dm_mem);
    for (int t = 0; t < lm.terms.n && t < 4; t++) {
        const int64_t count = (int64_t)lm.terms.terms[t].n_copies * lm.terms.terms[t].n_params;
        assert_true(count <= 256);
        if (b->dtheta[t])
            memcpy(r->dtheta[t], b->dtheta[t], (size_t)count * sizeof(float));
    }
    r->n_mix = b->n_mix[BK_STREAM_TOKEN];
    assert_true(r->n_mix <= 16);
    memcpy(r->mix_grads, b->mix_grads[BK_STREAM_TOKEN], (size_t)r->n_mix * sizeof(float));
    bk_lm_close(&lm);
}

static void close_to(const float *a, const float *b, int n, double tol, const char *what)
{
    double top = 0.0;
    for (int i = 0; i < n; i++)
        top = fmax(top, fabs((double)b[i]));
    for (int i = 0; i < n; i++)
        if (!(fabs((double)a[i] - b[i]) <= tol * (fabs((double)b[i]) + top)))
            fail_msg("%s %d: emulated %.9g, cpu %.9g", what, i, (double)a[i], (double)b[i]);
}

/* Per-head weights on the emulated device against the CPU: the device mixes each head's row with the
 * same kernels the CPU's loops mirror, so the mixed tables agree to rounding, the gradients too. */
static void emulated_device_matches_cpu(void **state)
{
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        char text[1024];
        snprintf(text, sizeof text,
                 MODEL "[attention]\nmixing = \"%s\"\nlearn_weights = \"per_head\"\n"
                       "[[term]]\nplugin = \"kerple\"\nper_layer = true\n"
                       "[[term]]\nplugin = \"alibi\"\nweight_per_head = false\n"
                       "[[term]]\nplugin = \"testlin\"\nlearn_weight = false\nweight = 0.5\n"
                       "[[term]]\nplugin = \"t5\"\n",
                 mode ? "kernel" : "sum");
        run *cpu = calloc(1, sizeof *cpu), *emu = calloc(1, sizeof *emu);
        run_on(text, "cpu", cpu);
        run_on(text, "emulated", emu);
        assert_int_equal(cpu->n_mix, 2 * 4 + 1); /* kerple and t5 per head, alibi one, testlin fixed */
        assert_int_equal(emu->n_mix, cpu->n_mix);
        for (int l = 0; l < 2; l++)
            for (int i = 0; i < 4 * D_TABLE; i++)
                if (!(fabs(emu->mixed[l][0][i] - cpu->mixed[l][0][i]) <= 1e-6 * (1.0 + fabs(cpu->mixed[l][0][i]))))
                    fail_msg("%s: layer %d mixed[%d]: emulated %.9g, cpu %.9g", mode ? "kernel" : "sum", l, i,
                             (double)emu->mixed[l][0][i], (double)cpu->mixed[l][0][i]);
        close_to(emu->mix_grads, cpu->mix_grads, cpu->n_mix, 1e-5, "mixing-parameter gradient");
        for (int t = 0; t < 4; t++)
            close_to(emu->dtheta[t], cpu->dtheta[t], 256, 1e-5, "parameter gradient");
        double any = 0.0;
        for (int k = 0; k < cpu->n_mix; k++)
            any += fabs(cpu->mix_grads[k]);
        assert_true(any > 0.0);
        free(cpu), free(emu);
    }
}

/* After the parameters moved: the terms hold each head's weight (and their mean), and the term set's own
 * mixing (bk_terms_mixed_table) gives the bias's mixed table. */
static void terms_carry_the_head_weights(void **state)
{
    (void)state;
    bk_lm lm;
    open_lm(&lm, MODEL "[attention]\nmixing = \"sum\"\nlearn_weights = \"per_head\"\n"
                       "[[term]]\nplugin = \"alibi\"\n[[term]]\nplugin = \"kerple\"\n");
    bk_bias *b = &lm.bias;
    for (int k = 0; k < 8; k++)
        b->mix_params[BK_STREAM_TOKEN][k] = 0.25f * (float)k - 0.5f;
    bk_bias_sync_weights(b);
    const bk_term *t = lm.terms.terms;
    for (int h = 0; h < 4; h++) {
        assert_true(t[0].head_weights[h] == 0.25 * h - 0.5);
        assert_true(t[1].head_weights[h] == 0.25 * (h + 4) - 0.5);
    }
    assert_float_equal(t[0].weight, (-0.5 - 0.25 + 0.0 + 0.25) / 4, 1e-15);
    bk_error err;
    float mine[4 * D_TABLE];
    int n_terms = 0;
    if (bk_bias_forward(b, D_TABLE, &err) ||
        bk_terms_mixed_table(&lm.terms, 0, BK_STREAM_TOKEN, D_TABLE, mine, &n_terms, &err))
        fail_msg("%s", err.message);
    assert_int_equal(n_terms, 2);
    assert_memory_equal(mine, bk_bias_table(b, 0, BK_STREAM_TOKEN), sizeof mine);
    bk_lm_close(&lm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(which_weights_train),
        cmocka_unit_test(one_term_learns_its_weight),
        cmocka_unit_test(refusals),
        cmocka_unit_test(emulated_device_matches_cpu),
        cmocka_unit_test(terms_carry_the_head_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
