/* ABI 2 keeps ABI 1 plugins working: testlin built against the ABI 1 header as it shipped
 * (tests/plugins/abi1/biaskit/plugin.h) loads, reports ABI 1 and a descriptor that ends where ABI 2's
 * fields begin, is never asked for an ABI 2 hook, and gives the same parameters, tables and table
 * gradients, bit for bit, as the same source built against today's header. The ABI 2 engine rules
 * around it (a second masking term, a masking term on the segment stream) are refused with the term named. */
#include "term_fixture.h"

#include "plugin/descriptor.h"

#include <stddef.h>

static const char *experiment(const char *plugin)
{
    static char text[512];
    snprintf(text, sizeof text,
             "[model]\nlayers = 2\nheads = 4\ndim = 16\nvocab = 64\n[train]\nlength = 16\nseed = 7\n"
             "[[term]]\nplugin = \"%s\"\nper_layer = true\ninit = 0.5\n",
             plugin);
    return text;
}

static void abi1_plugin_matches_abi2_build(void **state)
{
    (void)state;
    fixture old, now;
    open_ok(&old, experiment("testlin_abi1"));
    open_ok(&now, experiment("testlin"));
    const bk_term *a = &old.set.terms[0], *b = &now.set.terms[0];
    const biaskit_plugin *da = a->plugin->desc;
    assert_int_equal(da->abi_version, 1);
    assert_int_equal(b->plugin->desc->abi_version, BIASKIT_ABI_VERSION);
    /* the old descriptor ends where ABI 2 appended its fields: none of them is read */
    assert_int_equal(da->struct_size, offsetof(biaskit_plugin, param_init_ctx));
    assert_null(BK_DESCRIPTOR_FN(da, param_init_ctx));
    assert_null(BK_DESCRIPTOR_FN(da, rotary_ctx));
    assert_null(BK_DESCRIPTOR_FN(da, mask));
    assert_int_equal(a->n_params, b->n_params);
    assert_int_equal(a->n_copies, b->n_copies);
    assert_memory_equal(a->theta, b->theta, (size_t)a->n_params * a->n_copies * sizeof(float));
    enum { D = 40 };
    float ta[4 * D], tb[4 * D], g[4 * D];
    bk_error err;
    for (int l = 0; l < 2; l++) {
        assert_int_equal(bk_term_table(a, l, D, ta, &err), BK_OK);
        assert_int_equal(bk_term_table(b, l, D, tb, &err), BK_OK);
        assert_memory_equal(ta, tb, sizeof ta);
    }
    for (int i = 0; i < 4 * D; i++)
        g[i] = (float)((i * 37) % 11) - 5.0f;
    float *ga = calloc((size_t)a->n_params, sizeof(float)), *gb = calloc((size_t)b->n_params, sizeof(float));
    biaskit_error pe = {0, ""};
    assert_int_equal(da->table_backward(a->instance, bk_term_theta(a, 1), D, g, ga, &pe), BIASKIT_OK);
    assert_int_equal(b->plugin->desc->table_backward(b->instance, bk_term_theta(b, 1), D, g, gb, &pe), BIASKIT_OK);
    assert_memory_equal(ga, gb, (size_t)a->n_params * sizeof(float));
    free(ga), free(gb);
    close_terms(&old);
    close_terms(&now);
}

static void one_mask_term_on_tokens(void **state)
{
    (void)state;
    const char *base = "[model]\nlayers = 1\nheads = 2\ndim = 8\nvocab = 32\n[train]\nlength = 8\n";
    char text[1024];
    snprintf(text, sizeof text, "%s[[term]]\nplugin = \"window\"\nwindow = 4\n[[term]]\nplugin = \"window\"\nwindow = 2\n",
             base);
    expect_term_error(text, "a second masking term", "one per model");
    snprintf(text, sizeof text, "%s[[term]]\nplugin = \"window\"\nwindow = 4\nstream = \"segment\"\n", base);
    expect_term_error(text, "works on the token index", "stream = \"segment\"");
    snprintf(text, sizeof text, "%s[[term]]\nplugin = \"window\"\nwindow = 4\nper_layer = true\n", base);
    expect_term_error(text, "per_layer = true needs a term that acts inside each layer", "window");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(abi1_plugin_matches_abi2_build),
        cmocka_unit_test(one_mask_term_on_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
