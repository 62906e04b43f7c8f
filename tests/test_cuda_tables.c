/* CUDA tables equal host tables, for every built-in table plugin (gradients: `biaskit check`). Needs a GPU: without one the whole test exits 77, which ctest
 * reports as skipped (with the reason printed). */
#include "test_util.h"

#include "bias/terms.h"
#include "device.h"

#include <math.h>
#include <stdlib.h>

static const char *const dirs[] = {BK_TEST_PLUGIN_DIR, BK_TEST_PLUGINS_DIR};

/* Host and CUDA tables of every term of `text` at `distances` agree to `tol` (relative). */
static void compare(const char *text, int32_t distances, double tol)
{
    bk_experiment exp;
    bk_registry reg;
    bk_term_set set;
    bk_error err;
    if (bk_experiment_parse(text, "cuda.toml", NULL, 0, &exp, &err) ||
        bk_registry_init_dirs(&reg, dirs, 2, &err) || bk_terms_create(&set, &exp, &reg, &err))
        fail_msg("%s", err.message);
    for (int i = 0; i < set.n; i++) {
        const bk_term *t = &set.terms[i];
        if (!bk_term_has_table(t))
            continue;
        size_t n = (size_t)t->n_heads * (size_t)distances;
        float *host = malloc(n * sizeof *host), *dev = malloc(n * sizeof *dev);
        assert_int_equal(bk_term_table(t, 0, distances, host, &err), BK_OK);
        if (bk_term_table_cuda(t, 0, distances, dev, &err))
            fail_msg("%s", err.message);
        for (size_t k = 0; k < n; k++)
            if (fabs((double)host[k] - dev[k]) > tol * (1.0 + fabs((double)host[k])))
                fail_msg("term %s: element %zu: host %.9g, cuda %.9g", t->label, k, (double)host[k], (double)dev[k]);
        free(host);
        free(dev);
    }
    bk_terms_free(&set);
    bk_registry_free(&reg);
    bk_experiment_free(&exp);
}

static void alibi_power_of_two_heads(void **state)
{
    (void)state;
    compare("[model]\nheads = 16\ndim = 256\n[[term]]\nplugin = \"alibi\"\n", 65536, 1e-6);
}

static void alibi_other_heads_and_variants(void **state)
{
    (void)state;
    compare("[model]\nheads = 12\ndim = 384\n[[term]]\nplugin = \"alibi\"\nslope_scale = 96.0\n", 4097, 1e-6);
    compare("[model]\nheads = 3\ndim = 48\n[[term]]\nplugin = \"alibi\"\nslopes = [0.5, 0.1, 0.01]\n", 1000, 1e-6);
}

/* The learnable and fixed table plugins at their initial parameters; device transcendental functions
 * (logf, powf, expf) may differ from glibc's by a few ulp, hence 1e-5. */
static void kerple_variants(void **state)
{
    (void)state;
    compare("[model]\nheads = 12\ndim = 384\n[[term]]\nplugin = \"kerple\"\n", 65536, 1e-5);
    compare("[model]\nheads = 8\ndim = 256\n[[term]]\nplugin = \"kerple\"\nvariant = \"power\"\n", 65536, 1e-5);
    compare("[model]\nheads = 5\ndim = 80\n[[term]]\nplugin = \"kerple\"\nvariant = \"3para-log\"\n", 8192, 1e-5);
}

static void t5_mep_qin(void **state)
{
    (void)state;
    compare("[model]\nheads = 12\ndim = 384\n[[term]]\nplugin = \"t5\"\n[[term]]\nplugin = \"t5\"\nname = \"b\"\n"
            "bidirectional = true\n",
            65536, 1e-6);
    compare("[model]\nheads = 12\ndim = 384\n[[term]]\nplugin = \"mep\"\n[[term]]\nplugin = \"mep\"\nname = \"p\"\n"
            "variant = \"param\"\n",
            65536, 1e-5);
    compare("[model]\nheads = 4\ndim = 64\n[[term]]\nplugin = \"qin\"\n[[term]]\nplugin = \"qin\"\nname = \"t2\"\n"
            "form = \"type2\"\n[[term]]\nplugin = \"qin\"\nname = \"n\"\nform = \"nlogn\"\n",
            65536, 1e-5);
}

int main(void)
{
    char device[256];
    if (!bk_device_probe(device, sizeof device)) {
        printf("skipped: no GPU answers here: %s\n", device);
        return 77;
    }
    printf("device: %s\n", device);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(alibi_power_of_two_heads),
        cmocka_unit_test(alibi_other_heads_and_variants),
        cmocka_unit_test(kerple_variants),
        cmocka_unit_test(t5_mep_qin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
