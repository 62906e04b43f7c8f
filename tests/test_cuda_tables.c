/* CUDA tables equal host tables, for every built-in table plugin (gradients: test_kerple, test_mep and
 * `biaskit check`). The CUDA side is the plugin's own table_cuda, called directly, and the engine's
 * bk_term_table_cuda must return exactly it: the engine falls back to the host table for a plugin
 * without table_cuda, which would make a comparison through it alone pass host against host.
 *
 * First, without a GPU, in a CUDA build: every plugin compared below has table_cuda (and
 * table_backward_cuda when it has parameters); a plugin that lost them fails here. Then the
 * comparisons, which need a GPU: without one the test exits 77, which ctest reports as skipped (with
 * the reason printed). */
#include "term_fixture.h"

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
    };
    return cmocka_run_group_tests_name("cuda tables", tests, NULL, NULL);
}
