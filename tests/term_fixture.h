/* Shared by the tests that build positional terms from experiment text: a fixture holding the
 * experiment, the plugin registry (the built-in plugins and the test plugins) and the terms; helpers
 * that expect success or an error message; and the CUDA-vs-host comparison of one term's table and
 * gradient, which fails when the plugin lacks the CUDA entry points it is compared through. Functions
 * are static inline so each test uses what it needs. The experiment text is named "exp.toml" in
 * messages. */
#ifndef BK_TERM_FIXTURE_H
#define BK_TERM_FIXTURE_H

#include "test_util.h"

#include "bias/terms.h"
#include "cuda/device.h"

#include <biaskit/random.h>

#include <math.h>
#include <stdlib.h>

typedef struct fixture {
    bk_experiment exp;
    bk_registry reg;
    bk_term_set set;
} fixture;

static const char *const fixture_dirs[] = {BK_TEST_PLUGIN_DIR, BK_TEST_PLUGINS_DIR};

/* Builds the terms of `text`; returns the code and leaves the message in err. */
static inline int open_terms(fixture *f, const char *text, bk_error *err)
{
    memset(f, 0, sizeof *f);
    int rc = bk_experiment_parse(text, "exp.toml", NULL, 0, &f->exp, err);
    if (rc)
        return rc;
    assert_int_equal(bk_registry_init_dirs(&f->reg, fixture_dirs, 2, err), BK_OK);
    return bk_terms_create(&f->set, &f->exp, &f->reg, err);
}

static inline void close_terms(fixture *f)
{
    bk_terms_free(&f->set);
    bk_registry_free(&f->reg);
    bk_experiment_free(&f->exp);
}

/* open_terms that must succeed. */
static inline void open_ok(fixture *f, const char *text)
{
    bk_error err;
    if (open_terms(f, text, &err) != BK_OK)
        fail_msg("%s\n  experiment:\n%s", err.message, text);
}

/* Building the terms of `text` fails with a message containing needle1 (and needle2 unless NULL). */
static inline void expect_term_error(const char *text, const char *needle1, const char *needle2)
{
    fixture f;
    bk_error err;
    int rc = open_terms(&f, text, &err);
    close_terms(&f);
    if (rc == BK_OK)
        fail_msg("expected an error containing \"%s\" for:\n%s", needle1, text);
    assert_message_has(err.message, needle1);
    if (needle2)
        assert_message_has(err.message, needle2);
}

/* sum_{h,d} g[h][d] * T(theta)[h][d] from the plugin's own (fp32) table, summed in double; *mag gets
 * sum_d |g[h][d] * T[h][d]| of head `head` (what fp32 rounding of that head's row can disturb). */
static inline double plugin_loss(const bk_term *t, const float *theta, int32_t D, const float *g, int head,
                                 double *mag)
{
    size_t n = (size_t)t->n_heads * (size_t)D;
    float *tab = malloc(sizeof *tab * n);
    biaskit_error pe = {0, ""};
    assert_int_equal(t->plugin->desc->table(t->instance, theta, D, tab, &pe), BIASKIT_OK);
    double s = 0.0;
    *mag = 0.0;
    for (size_t i = 0; i < n; i++) {
        s += (double)g[i] * tab[i];
        if (i / (size_t)D == (size_t)head)
            *mag += fabs((double)g[i] * tab[i]);
    }
    free(tab);
    return s;
}

/* The plugin's own CUDA entry points must exist: bk_term_table_cuda falls back to the host table when
 * a plugin has no table_cuda, so a CUDA-vs-host comparison through it alone would pass host against
 * host. Every built-in table plugin has table_cuda, and table_backward_cuda when it has parameters. */
static inline void require_cuda_entry_points(const bk_term *t)
{
    const biaskit_plugin *desc = t->plugin->desc;
    if (!desc->table_cuda)
        fail_msg("term %s (plugin %s): the descriptor has no table_cuda, so a CUDA-vs-host comparison would "
                 "compare the host table with itself",
                 t->label, desc->name);
    if (t->n_params > 0 && !desc->table_backward_cuda)
        fail_msg("term %s (plugin %s): %lld learnable parameters but no table_backward_cuda: the CUDA gradient "
                 "cannot be compared",
                 t->label, desc->name, (long long)t->n_params);
}

/* The term's layer-0 table at D distances from the plugin's table_cuda, called here directly on device
 * buffers (never the engine's host fallback), copied back into out (n_heads * D floats). */
static inline void plugin_table_cuda(const bk_term *t, int32_t D, float *out)
{
    require_cuda_entry_points(t);
    const biaskit_plugin *desc = t->plugin->desc;
    size_t n = (size_t)t->n_heads * (size_t)D, P = t->theta ? (size_t)t->n_params : 0;
    void *d_table = NULL, *d_theta = NULL;
    bk_error err;
    if (bk_device_alloc(&d_table, n * sizeof(float), &err) ||
        (P && (bk_device_alloc(&d_theta, P * sizeof(float), &err) ||
               bk_device_upload(d_theta, bk_term_theta(t, 0), P * sizeof(float), &err))))
        fail_msg("%s", err.message);
    biaskit_error pe = {0, ""};
    if (desc->table_cuda(t->instance, d_theta, D, d_table, NULL, &pe) != BIASKIT_OK)
        fail_msg("%s: table_cuda: %s", t->label, pe.message);
    if (bk_device_download(out, d_table, n * sizeof(float), &err))
        fail_msg("%s", err.message);
    bk_device_free(d_table);
    bk_device_free(d_theta);
}

/* The CUDA table of term `t` at D distances (from the plugin's table_cuda, which must exist) equals the
 * host one, and the engine's bk_term_table_cuda returns exactly it; the CUDA gradient (table_backward_cuda,
 * which must exist when the term has parameters) equals the host one, and two CUDA gradients are
 * bit-identical. A term without parameters says that it has no gradient to compare. Needs a GPU (the
 * caller checks bk_device_probe). The gradient tolerance is relative to backward(|g|), the sum of
 * |g dT/dtheta|, which for kernels with derivatives of one sign is the size of the terms being summed. */
static inline void compare_cuda(const bk_term *t, int32_t D)
{
    require_cuda_entry_points(t);
    const biaskit_plugin *desc = t->plugin->desc;
    size_t n = (size_t)t->n_heads * (size_t)D;
    float *host = malloc(sizeof *host * n), *dev = malloc(sizeof *dev * n), *engine = malloc(sizeof *engine * n);
    bk_error err;
    assert_int_equal(bk_term_table(t, 0, D, host, &err), BK_OK);
    plugin_table_cuda(t, D, dev);
    if (bk_term_table_cuda(t, 0, D, engine, &err) != BK_OK)
        fail_msg("%s", err.message);
    if (memcmp(dev, engine, sizeof *dev * n) != 0)
        fail_msg("%s: bk_term_table_cuda differs from the plugin's table_cuda", t->label);
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)host[i] - dev[i]) <= 2e-6 * (1.0 + fabs((double)host[i]))))
            fail_msg("%s: head %zu, d = %zu: host %.9g, cuda %.9g", t->label, i / (size_t)D, i % (size_t)D,
                     (double)host[i], (double)dev[i]);
    size_t P = (size_t)t->n_params;
    if (!P) {
        print_message("%s (plugin %s): no parameters, no gradient to compare\n", t->label, desc->name);
    } else { /* require_cuda_entry_points: table_backward_cuda exists */
        float *g = malloc(sizeof *g * n), *absg = malloc(sizeof *absg * n);
        biaskit_rng rng = biaskit_rng_seeded(3);
        for (size_t i = 0; i < n; i++) {
            g[i] = (float)biaskit_rng_normal(&rng);
            absg[i] = fabsf(g[i]);
        }
        const float *theta = bk_term_theta(t, 0);
        float *want = calloc(P, sizeof *want), *scale = calloc(P, sizeof *scale);
        float *got = malloc(sizeof *got * P), *got2 = malloc(sizeof *got2 * P);
        biaskit_error pe = {0, ""};
        assert_int_equal(desc->table_backward(t->instance, theta, D, g, want, &pe), BIASKIT_OK);
        assert_int_equal(desc->table_backward(t->instance, theta, D, absg, scale, &pe), BIASKIT_OK);
        void *d_theta = NULL, *d_g = NULL, *d_grad = NULL;
        if (bk_device_alloc(&d_theta, P * sizeof(float), &err) || bk_device_alloc(&d_g, n * sizeof(float), &err) ||
            bk_device_alloc(&d_grad, P * sizeof(float), &err) ||
            bk_device_upload(d_theta, theta, P * sizeof(float), &err) ||
            bk_device_upload(d_g, g, n * sizeof(float), &err))
            fail_msg("%s", err.message);
        for (int run = 0; run < 2; run++) {
            float *out = run ? got2 : got;
            memset(out, 0, sizeof *out * P);
            if (bk_device_upload(d_grad, out, P * sizeof(float), &err))
                fail_msg("%s", err.message);
            if (desc->table_backward_cuda(t->instance, d_theta, D, d_g, d_grad, NULL, &pe) != BIASKIT_OK)
                fail_msg("%s: table_backward_cuda: %s", t->label, pe.message);
            if (bk_device_download(out, d_grad, P * sizeof(float), &err))
                fail_msg("%s", err.message);
        }
        assert_memory_equal(got, got2, sizeof *got * P);
        for (size_t i = 0; i < P; i++)
            if (!(fabs((double)got[i] - want[i]) <= 1e-5 * fabs((double)scale[i]) + 1e-6))
                fail_msg("%s: gradient %zu: host %.9g, cuda %.9g", t->label, i, (double)want[i], (double)got[i]);
        bk_device_free(d_theta);
        bk_device_free(d_g);
        bk_device_free(d_grad);
        free(g), free(absg), free(want), free(scale), free(got), free(got2);
    }
    free(host);
    free(dev);
    free(engine);
}

#endif
