/* The CUDA kernels of <biaskit/table_plugin.h> emulated on the host (biaskit_tp_emulation) and what
 * `biaskit check` does with them: the emulated items pass on formula-first plugins without a GPU; a planted
 * device-only branch (tests/plugins/cudabranch.c) is a WARN naming its line; a hand-written CUDA path is
 * said to be unverified; the comparisons report a perturbed table or gradient; the source search finds
 * exactly the code uses of __CUDA_ARCH__; and the emulated gradient has the bits of the documented CUDA
 * order (B blocks of 256 threads per head, a tree per block, partials summed head then block ascending),
 * re-implemented here, for a plugin with a SCALAR and a PER_HEAD parameter. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, fdopen */
#include "check_report.h"

#include "term_fixture.h"

#include "check/check.h"
#include "check/cuda_compare.h"

#include <biaskit/table_plugin.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* bk_check_plugin on `plugin` (a name, or a file of the test plugin directory) with the default options
 * but a shorter long-range probe (not what this file tests). */
static report *checked(const char *plugin)
{
    bk_check_options opt;
    bk_check_options_default(&opt);
    opt.max_distance = 65536;
    return check_report_of(plugin, &opt);
}

static int have_gpu(void)
{
    char device[256];
    return bk_device_probe(device, sizeof device);
}

/* ---- check on formula-first plugins ------------------------------------------------------------- */

static void expect_emulated_pass(const char *plugin)
{
    report *r = checked(plugin);
    expect_item(r, "cuda-table-emulated", BK_CHECK_PASS, "CUDA table (the kernel emulated on the host) vs host");
    expect_item(r, "cuda-backward-emulated", BK_CHECK_PASS, "the kernels' blocks, block trees and partial sums");
    expect_item(r, "cuda-device-branch", BK_CHECK_PASS, "no __CUDA_ARCH__ in ");
    int k = find(r, "cuda-table");
    assert_true(k >= 0);
    if (!have_gpu() && strstr(r->items[k].text, "no GPU")) /* a CUDA build: the plugin has table_cuda() */
        expect_item(r, "cuda-table", BK_CHECK_SKIP, "its formula-first kernels run emulated on the host instead");
    assert_int_equal(r->counts.failed, 0);
    free(r);
}

static void emulated_items_pass_on_formula_first_plugins(void **state)
{
    (void)state;
    expect_emulated_pass("biaskit_tp_scalar.so"); /* a SCALAR and a PER_HEAD parameter, a constant */
    expect_emulated_pass("biaskit_kerple_tp.so");
    expect_emulated_pass("kerple"); /* built-in, with the helper: a choice and a PER_HEAD_IF parameter */
}

/* alibi is FIXED: the emulated table runs, the emulated gradient has nothing to compare. */
static void emulated_table_of_a_fixed_plugin(void **state)
{
    (void)state;
    report *r = checked("alibi");
    expect_item(r, "cuda-table-emulated", BK_CHECK_PASS, "fixed table");
    expect_item(r, "cuda-backward-emulated", BK_CHECK_SKIP, "no parameters with the default configuration");
    free(r);
}

static void device_branch_is_warned_with_its_line(void **state)
{
    (void)state;
    report *r = checked("biaskit_cudabranch.so");
    /* the emulation ran the host side of the branch: it agrees with the host */
    expect_item(r, "cuda-table-emulated", BK_CHECK_PASS, NULL);
    expect_item(r, "cuda-backward-emulated", BK_CHECK_PASS, NULL);
    int k = find(r, "cuda-table");
    assert_true(k >= 0);
    if (have_gpu() && r->items[k].status != BK_CHECK_SKIP) {
        /* on a GPU the device side runs: -2 w d against the host's -w d */
        expect_item(r, "cuda-table", BK_CHECK_FAIL, "CUDA");
        expect_item(r, "cuda-device-branch", BK_CHECK_PASS, "cudabranch.c:16: the emulated check ran the host side");
    } else {
        expect_item(r, "cuda-device-branch", BK_CHECK_WARN,
                    "device-only branch (__CUDA_ARCH__) at " BK_TEST_SOURCE_DIR "/tests/plugins/cudabranch.c:16: "
                    "the emulated check ran the host side; the device side runs only on a GPU");
        assert_null(strstr(r->items[find(r, "cuda-device-branch")].text, ", ")); /* line 16 only */
        assert_int_equal(r->counts.warned >= 1, 1);
        assert_int_equal(r->counts.failed, 0);
    }
    free(r);
}

/* checkbad_decl has a hand-written table_backward_cuda() (and no emulation): no emulated items, and
 * without a GPU the SKIP says its CUDA path is unverified. */
static void hand_written_cuda_is_said_unverified(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad_decl.so");
    assert_int_equal(find(r, "cuda-table-emulated"), -1);
    assert_int_equal(find(r, "cuda-device-branch"), -1);
    if (!have_gpu())
        expect_item(r, "cuda-backward", BK_CHECK_SKIP,
                    "CUDA table gradient vs host: no GPU (");
    if (!have_gpu())
        expect_item(r, "cuda-backward", BK_CHECK_SKIP, "; this plugin's hand-written CUDA path is unverified");
    free(r);
}

/* ---- the comparisons and the source search ------------------------------------------------------ */

static void comparisons_report_a_perturbation(void **state)
{
    (void)state;
    enum { H = 3, D = 300 };
    static float host[H * D], dev[H * D];
    char why[512];
    for (int i = 0; i < H * D; i++)
        host[i] = dev[i] = -0.01f * (float)(i % D) * (float)(1 + i / D);
    assert_int_equal(ck_compare_tables(dev, host, H, D, "emulated CUDA", why, sizeof why), 0);
    dev[2 * D + 123] *= 1.0f + 1e-3f; /* a relative error 100 times the tolerance */
    assert_int_equal(ck_compare_tables(dev, host, H, D, "emulated CUDA", why, sizeof why), 1);
    assert_message_has(why, "head 2, distance 123 of 300: emulated CUDA");
    dev[2 * D + 123] = host[2 * D + 123] * (1.0f + 2e-6f); /* within RTOL */
    assert_int_equal(ck_compare_tables(dev, host, H, D, "emulated CUDA", why, sizeof why), 0);

    float g[8] = {1, -2, 3, 0.5f, 0, 7, -1, 2}, e[8];
    memcpy(e, g, sizeof g);
    assert_int_equal(ck_gradient_mismatch(e, g, 8), -1);
    e[3] += 1e-3f * 7.5f; /* 1e-3 (|g_3| + max|g|): 10 times CUDA_GRAD_TOL */
    assert_int_equal(ck_gradient_mismatch(e, g, 8), 3);
    e[3] = g[3] + (float)(0.5 * CUDA_GRAD_TOL * 7.5);
    assert_int_equal(ck_gradient_mismatch(e, g, 8), -1);
}

static void source_search_finds_code_uses_only(void **state)
{
    (void)state;
    char path[] = "/tmp/bk_cuda_emul_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs("#include <biaskit/table_plugin.h> /* __CUDA_ARCH__ */\n"   /* 1: an include line */
          "/* __CUDA_ARCH__ in a comment\n"                            /* 2 */
          "   still __CUDA_ARCH__ */ int a;\n"                          /* 3 */
          "// __CUDA_ARCH__\n"                                          /* 4 */
          "const char *s = \"__CUDA_ARCH__ \\\" __CUDA_ARCH__\";\n"     /* 5: in a string */
          "int __CUDA_ARCH__X, X__CUDA_ARCH__;\n"                       /* 6: other words */
          "#if defined(__CUDA_ARCH__)\n"                                /* 7 */
          "#endif\n"                                                    /* 8 */
          "char c = '\"'; int b = __CUDA_ARCH__ + __CUDA_ARCH__;\n"     /* 9: once per line */
          "/**/ #ifdef __CUDA_ARCH__\n",                                /* 10 */
          f);
    fclose(f);
    int lines[8], count = -1;
    char why[512];
    assert_int_equal(ck_device_branches(path, lines, 8, &count, why, sizeof why), 0);
    assert_int_equal(count, 3);
    assert_int_equal(lines[0], 7);
    assert_int_equal(lines[1], 9);
    assert_int_equal(lines[2], 10);
    assert_int_equal(ck_device_branches(path, lines, 1, &count, why, sizeof why), 0); /* counts past capacity */
    assert_int_equal(count, 3);
    unlink(path);
    assert_int_equal(ck_device_branches(path, lines, 8, &count, why, sizeof why), 1);
    assert_message_has(why, "cannot read '/tmp/bk_cuda_emul_");
    assert_message_has(why, "No such file");
}

/* ---- the emulation against the documented order ------------------------------------------------- */

static const biaskit_tp_emulated *emulation_of(const bk_term *t)
{
    biaskit_tp_emulation_fn fn = NULL;
    *(void **)&fn = dlsym(t->plugin->handle, BIASKIT_TP_EMULATION_SYMBOL);
    assert_non_null(fn);
    const biaskit_tp_emulated *e = fn();
    assert_non_null(e);
    assert_true(e->struct_size >= sizeof *e);
    assert_ptr_equal(e->plugin, t->plugin->desc);
    assert_int_equal(e->threads, 256);
    assert_int_equal(e->per_thread, 8);
    assert_non_null(strstr(e->source, "tests/plugins/tp_scalar.c"));
    return e;
}

/* The CUDA backward of tp_scalar (T_h(d) = offset - amp slope_h d; theta = [amp, slope_0 .. slope_H-1]) as
 * the header documents it, written out: B = min(1024, max(1, ceil(D / 2048))) blocks per head; thread t of
 * block b sums in double dtable[h][d] g_k(d) over d = 256 b + t, + 256 B, ...; the block adds its 256 sums
 * by the tree (stride 128, 64, ..., 1); the partials (h, b) are summed head ascending (amp) or for the own
 * head (slope), block ascending, and (float) of the sum is added into dtheta. */
static void reference_backward(const float *theta, int H, int32_t D, const float *w, float *dtheta, int64_t wrong_B)
{
    enum { T = 256 };
    int64_t B = ((int64_t)D + 2047) / 2048;
    B = B < 1 ? 1 : B > 1024 ? 1024 : B;
    if (wrong_B) /* a corrupted partial count, to show the comparison sees it */
        B = wrong_B;
    double *partial = calloc((size_t)H * (size_t)B * 2, sizeof *partial), sh[2][T];
    assert_non_null(partial);
    float amp = theta[0];
    for (int h = 0; h < H; h++) {
        float slope = theta[1 + h];
        for (int64_t b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                double a0 = 0.0, a1 = 0.0;
                for (int64_t d = b * T + t; d < D; d += B * T) {
                    double gw = (double)w[(size_t)h * (size_t)D + (size_t)d];
                    float g_amp = -slope * (float)d, g_slope = -amp * (float)d; /* tp_scalar.c's gradient */
                    a0 += gw * (double)g_amp;
                    a1 += gw * (double)g_slope;
                }
                sh[0][t] = a0;
                sh[1][t] = a1;
            }
            for (int stride = T / 2; stride > 0; stride /= 2)
                for (int t = 0; t < stride; t++)
                    for (int k = 0; k < 2; k++)
                        sh[k][t] += sh[k][t + stride];
            partial[((size_t)h * (size_t)B + (size_t)b) * 2] = sh[0][0];
            partial[((size_t)h * (size_t)B + (size_t)b) * 2 + 1] = sh[1][0];
        }
    }
    double s = 0.0;
    for (int h = 0; h < H; h++)
        for (int64_t b = 0; b < B; b++)
            s += partial[((size_t)h * (size_t)B + (size_t)b) * 2];
    dtheta[0] += (float)s;
    for (int h = 0; h < H; h++) {
        s = 0.0;
        for (int64_t b = 0; b < B; b++)
            s += partial[((size_t)h * (size_t)B + (size_t)b) * 2 + 1];
        dtheta[1 + h] += (float)s;
    }
    free(partial);
}

static void emulated_backward_has_the_documented_bits(void **state)
{
    (void)state;
    enum { H = 5 };
    static const int32_t lengths[] = {1, 255, 256, 257, 70000};
    fixture f;
    open_ok(&f, "[model]\nlayers = 1\nheads = 5\ndim = 40\n[[term]]\nplugin = \"tp_scalar\"\noffset = 0.25\n"
                "amp = [0.75]\n");
    const bk_term *t = &f.set.terms[0];
    assert_int_equal(t->n_params, 1 + H);
    const biaskit_tp_emulated *emu = emulation_of(t);
    const biaskit_plugin *d = t->plugin->desc;
    float theta[1 + H] = {0.75f, 0.5f, 0.25f, 0.125f, 0.0625f, 0.03125f};
    int host_differs = 0;
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        int32_t D = lengths[i];
        size_t n = (size_t)H * (size_t)D;
        float *w = malloc(sizeof *w * n), *tab = malloc(sizeof *tab * n), *etab = malloc(sizeof *etab * n);
        assert_true(w && tab && etab);
        /* large terms that nearly cancel in each head (sum_d w d ~ 0, as the last weight makes it), so that
         * the float of the double sum depends on the order of its terms: the test tells orders apart */
        biaskit_rng rng = biaskit_rng_seeded(100 + (uint64_t)D);
        for (int h = 0; h < H; h++) {
            float *row = w + (size_t)h * (size_t)D;
            double sum = 0.0;
            for (int32_t k = 0; k < D; k++) {
                row[k] = (float)(1e3 * biaskit_rng_normal(&rng));
                sum += k < D - 1 ? (double)row[k] * (double)k : 0.0;
            }
            if (D > 1)
                row[D - 1] = (float)(-sum / (double)(D - 1));
        }
        float start[1 + H], emulated[1 + H], ref[1 + H], host[1 + H];
        for (int k = 0; k < 1 + H; k++)
            start[k] = 0.1f * (float)(k + 1); /* adds into a non-zero start */
        memcpy(emulated, start, sizeof start);
        memcpy(ref, start, sizeof start);
        memcpy(host, start, sizeof start);
        biaskit_error pe = {0, ""};
        assert_int_equal(emu->table_backward_emulated(t->instance, theta, D, w, emulated, &pe), BIASKIT_OK);
        reference_backward(theta, H, D, w, ref, 0);
        for (int k = 0; k < 1 + H; k++)
            if (memcmp(&emulated[k], &ref[k], sizeof(float)) != 0)
                fail_msg("D = %d, theta[%d]: emulated %.9g, the documented order %.9g", (int)D, k, (double)emulated[k],
                         (double)ref[k]);
        /* the host's order (d ascending, one double per head) is another sum of the same terms */
        assert_int_equal(d->table_backward(t->instance, theta, D, w, host, &pe), BIASKIT_OK);
        assert_int_equal(ck_gradient_mismatch(emulated, host, 1 + H), -1);
        host_differs += memcmp(emulated, host, sizeof host) != 0;
        if (D == 70000) {
            /* A pair of huge terms that cancel exactly (w = 1e20 at d = a, -5e19 at 2a: g(2a) = 2 g(a) in
             * float) absorbs the low bits of whatever its threads summed before, so the result depends on
             * which distances share a thread: the documented 35 blocks per head give the emulation's bits,
             * a corrupted count of 36 other bits. */
            float em2[1 + H], ref2[1 + H], wrong[1 + H];
            for (int h = 0; h < H; h++) {
                w[(size_t)h * (size_t)D + 1000 + 7 * (size_t)h] = 1e20f;
                w[(size_t)h * (size_t)D + 2000 + 14 * (size_t)h] = -5e19f;
            }
            memcpy(em2, start, sizeof start);
            memcpy(ref2, start, sizeof start);
            memcpy(wrong, start, sizeof start);
            assert_int_equal(emu->table_backward_emulated(t->instance, theta, D, w, em2, &pe), BIASKIT_OK);
            reference_backward(theta, H, D, w, ref2, 0);
            reference_backward(theta, H, D, w, wrong, 36);
            assert_memory_equal(em2, ref2, sizeof em2);
            assert_memory_not_equal(em2, wrong, sizeof em2);
        }
        /* the table: the same element function, compiled alike: the host's bits */
        assert_int_equal(d->table(t->instance, theta, D, tab, &pe), BIASKIT_OK);
        assert_int_equal(emu->table_emulated(t->instance, theta, D, etab, &pe), BIASKIT_OK);
        assert_memory_equal(tab, etab, sizeof *tab * n);
        /* and a 1e-3 change of one host entry is reported against the emulated table */
        char why[512];
        tab[n - 1] = tab[n - 1] * (1.0f + 1e-3f) + (tab[n - 1] == 0.0f ? 1e-3f : 0.0f);
        if (D > 1) /* D = 1: the only entry is offset = 0.25 */
            assert_int_equal(ck_compare_tables(etab, tab, H, D, "emulated CUDA", why, sizeof why), 1);
        free(w), free(tab), free(etab);
    }
    /* the sums cancel enough that the host's order gives other bits: the comparison above tells orders apart */
    print_message("the emulated (CUDA-order) gradient differs from the host's bits at %d of %d lengths\n",
                  host_differs, (int)(sizeof lengths / sizeof lengths[0]));
    assert_true(host_differs >= 1);
    close_terms(&f);
}

/* The emulation refuses what the host refuses, with the host's messages. */
static void emulation_refuses_bad_calls(void **state)
{
    (void)state;
    fixture f;
    open_ok(&f, "[model]\nlayers = 1\nheads = 2\ndim = 16\n[[term]]\nplugin = \"tp_scalar\"\n");
    const bk_term *t = &f.set.terms[0];
    const biaskit_tp_emulated *emu = emulation_of(t);
    float out[4], g[3] = {0};
    biaskit_error pe = {0, ""};
    assert_int_not_equal(emu->table_emulated(t->instance, bk_term_theta(t, 0), 0, out, &pe), BIASKIT_OK);
    assert_message_has(pe.message, "distances must be positive, got 0");
    pe.message[0] = 0;
    assert_int_not_equal(emu->table_backward_emulated(t->instance, NULL, 2, out, g, &pe), BIASKIT_OK);
    assert_message_has(pe.message, "got NULL");
    close_terms(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(comparisons_report_a_perturbation),
        cmocka_unit_test(source_search_finds_code_uses_only),
        cmocka_unit_test(emulated_backward_has_the_documented_bits),
        cmocka_unit_test(emulation_refuses_bad_calls),
        cmocka_unit_test(emulated_items_pass_on_formula_first_plugins),
        cmocka_unit_test(emulated_table_of_a_fixed_plugin),
        cmocka_unit_test(device_branch_is_warned_with_its_line),
        cmocka_unit_test(hand_written_cuda_is_said_unverified),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
