/* Formula-first reach: what <biaskit/table_plugin.h> and <biaskit/formula_plugin.h> give an author beyond
 * fixed numbers.
 *   - BIASKIT_TP_EXPR(expr), an init rule that is an expression of h, H, c and layer: a Cauchy bias's
 *     s_h = base^(h+1) exact per head (tests/plugins/cauchy_tp.c), w = (layer + 2) train_length / 1024 per
 *     layer through the engine and through param_init_ctx directly, the fixed value with learnable = false,
 *     values beyond float range refused naming parameter, head, layer and value; on arrays (reach_fp.c: h is
 *     the element's index within the row, every head's row alike);
 *   - the geometry in a table plugin's context (kinky_tp.c: c.layers, c.d_head, c.d_model in a rule,
 *     c.train_length in the formula) and the names it reserves: a constant called d_head (or train_length)
 *     does not compile, with a message naming it; another name does;
 *   - param_init_ctx only where a rule is EXPR (so `biaskit plugins` says "the layer index at
 *     initialisation" only there);
 *   - param_info: the bounds and the init rule in words, for every rule kind and a given option, and the
 *     numbers' spelling. */
#define _POSIX_C_SOURCE 200809L /* popen, getpid */
#include "term_fixture.h"

#include "plugin/descriptor.h"

#include <biaskit/table_plugin.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* "[model] layers = 2, heads = H, dim = 8H [train] length = L [[term]] plugin = ..." plus option lines. */
static void experiment(char *buf, size_t size, int heads, int train_length, const char *plugin, const char *options)
{
    snprintf(buf, size,
             "[model]\nlayers = 2\nheads = %d\ndim = %d\n[train]\nlength = %d\nseed = 3\n[[term]]\nplugin = \"%s\"\n%s",
             heads, heads * 8, train_length, plugin, options ? options : "");
}

static void open_plugin(fixture *f, int heads, int train_length, const char *plugin, const char *options)
{
    char text[2048];
    experiment(text, sizeof text, heads, train_length, plugin, options);
    open_ok(f, text);
}

static void expect_plugin_error(int heads, int train_length, const char *plugin, const char *options,
                                const char *needle1, const char *needle2)
{
    char text[2048];
    experiment(text, sizeof text, heads, train_length, plugin, options);
    expect_term_error(text, needle1, needle2);
}

/* ---- BIASKIT_TP_EXPR in a table plugin ---------------------------------------------------------------- */

/* cauchy_tp: theta = s (H values), w (1). Through the engine, a per-layer term: copy l has s_h = base^(h+1)
 * (pow, rounded to float once) and w = (l + 2) L / 1024. */
static void test_expr_per_head_and_layer(void **state)
{
    (void)state;
    static const struct {
        int heads, train_length;
        const char *options;
        double base;
    } cases[] = {{8, 1024, NULL, 2.0}, {6, 512, "base = 1.5\n", 1.5}, {1, 256, "base = 3\n", 3.0}};
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++) {
        fixture f;
        open_plugin(&f, cases[n].heads, cases[n].train_length, "cauchy_tp", cases[n].options);
        const bk_term *t = &f.set.terms[0];
        const int H = cases[n].heads;
        assert_int_equal(t->n_params, H + 1);
        assert_int_equal(t->n_copies, 2);
        for (int l = 0; l < 2; l++) {
            const float *theta = bk_term_theta(t, l);
            for (int h = 0; h < H; h++)
                if (theta[h] != (float)pow(cases[n].base, h + 1))
                    fail_msg("case %zu, layer %d: s[%d] = %.9g, expected base^(h+1) = %.9g", n, l, h, (double)theta[h],
                             pow(cases[n].base, h + 1));
            const float w = (float)((l + 2) * cases[n].train_length / 1024.0);
            if (theta[H] != w)
                fail_msg("case %zu, layer %d: w = %.9g, expected (layer + 2) L / 1024 = %.9g", n, l, (double)theta[H],
                         (double)w);
        }
        close_terms(&f);
    }
}

/* The descriptor directly: param_init_ctx with a biaskit_context reads its layer; param_init is layer -1;
 * the seed does not matter (no draws); param_init_ctx is set only for plugins with an EXPR rule. */
static void test_expr_param_init_ctx(void **state)
{
    (void)state;
    fixture f;
    open_plugin(&f, 4, 2048, "cauchy_tp", NULL);
    const bk_term *t = &f.set.terms[0];
    const biaskit_plugin *d = t->plugin->desc;
    assert_non_null(BK_DESCRIPTOR_FN(d, param_init_ctx));
    float theta[5];
    biaskit_error pe = {0, ""};
    for (int layer = -1; layer <= 6; layer++) {
        biaskit_context ctx = {.struct_size = sizeof ctx, .layer = layer, .n_layers = 7, .n_heads = 4,
                               .length = 2048, .train_length = 2048, .training = 1};
        memset(theta, 0, sizeof theta);
        assert_int_equal(d->param_init_ctx(t->instance, theta, 1000u + (uint64_t)layer, &ctx, &pe), BIASKIT_OK);
        assert_true(theta[4] == (float)((layer + 2) * 2048 / 1024.0));
        for (int h = 0; h < 4; h++)
            assert_true(theta[h] == (float)pow(2.0, h + 1));
    }
    memset(theta, 0, sizeof theta);
    assert_int_equal(d->param_init(t->instance, theta, 5, &pe), BIASKIT_OK);
    assert_true(theta[4] == 2.0f); /* layer -1: (-1 + 2) 2048 / 1024 */
    close_terms(&f);

    /* no EXPR rule: no param_init_ctx (the engine calls param_init; listings say nothing of layers) */
    open_plugin(&f, 4, 2048, "tp_scalar", NULL);
    assert_null(BK_DESCRIPTOR_FN(f.set.terms[0].plugin->desc, param_init_ctx));
    close_terms(&f);
    open_plugin(&f, 4, 2048, "kinky_tp", NULL);
    assert_non_null(BK_DESCRIPTOR_FN(f.set.terms[0].plugin->desc, param_init_ctx));
    close_terms(&f);
}

/* The geometry in a table plugin's context (kinky_tp): b_h = 0.01 layers d_head / d_model from a rule, the
 * second kink at d = L + train_length / 64 in the formula, on the host (the CUDA kernels get the same
 * struct by value; `biaskit check` compares them, emulated without a GPU). */
static void test_geometry_in_context(void **state)
{
    (void)state;
    for (int heads = 2; heads <= 4; heads += 2) {
        fixture f;
        open_plugin(&f, heads, 256, "kinky_tp", NULL); /* d_model 8 H, d_head 8, 2 layers, M = 4 */
        const bk_term *t = &f.set.terms[0];
        const float *theta = bk_term_theta(t, 0), *a = theta, *b = theta + heads, L = theta[2 * heads];
        assert_true(L == 8.0f);
        float table[4 * 24];
        biaskit_error pe = {0, ""};
        assert_int_equal(t->plugin->desc->table(t->instance, theta, 24, table, &pe), BIASKIT_OK);
        for (int h = 0; h < heads; h++) {
            assert_true(a[h] == (float)(1.0 / (h + 1)));
            if (b[h] != (float)(0.01 * 2 * 8 / (8.0 * heads)))
                fail_msg("H = %d: b[%d] = %.9g, expected 0.01 layers d_head / d_model = %.9g", heads, h, (double)b[h],
                         0.01 * 2 * 8 / (8.0 * heads));
            for (int d = 0; d < 24; d++) {
                float r = (float)d - 12.0f, want = -a[h] * fmaxf((float)d, 8.0f) - b[h] * (r > 0.0f ? r : 0.0f);
                if (fabsf(table[h * 24 + d] - want) > 1e-6f * (1.0f + fabsf(want)))
                    fail_msg("H = %d: T_%d(%d) = %.9g, expected %.9g (the second kink at 8 + 256 / 64)", heads, h, d,
                             (double)table[h * 24 + d], (double)want);
            }
        }
        close_terms(&f);
    }
}

/* learnable = false: no parameters; the table uses the EXPR values made in create() (layer -1). A given
 * value replaces the rule. */
static void test_expr_fixed(void **state)
{
    (void)state;
    fixture f;
    open_plugin(&f, 4, 1024, "cauchy_tp", "learnable = false\n");
    const bk_term *t = &f.set.terms[0];
    assert_int_equal(t->n_params, 0);
    float table[4 * 40];
    biaskit_error pe = {0, ""};
    assert_int_equal(t->plugin->desc->table(t->instance, NULL, 40, table, &pe), BIASKIT_OK);
    for (int h = 0; h < 4; h++)
        for (int d = 0; d < 40; d++) {
            float x = (float)d / (float)pow(2.0, h + 1), want = -1.0f * log1pf(x * x);
            if (fabsf(table[h * 40 + d] - want) > 1e-6f * (1.0f + fabsf(want)))
                fail_msg("T_%d(%d) = %.9g, expected -log(1 + (d / 2^(h+1))^2) = %.9g", h, d,
                         (double)table[h * 40 + d], (double)want);
        }
    close_terms(&f);

    open_plugin(&f, 4, 1024, "cauchy_tp", "learnable = false\ns = [3.0]\nw = [0.5]\n");
    t = &f.set.terms[0];
    assert_int_equal(t->plugin->desc->table(t->instance, NULL, 40, table, &pe), BIASKIT_OK);
    float x = 7.0f / 3.0f;
    assert_true(fabsf(table[3 * 40 + 7] - (-0.5f * log1pf(x * x))) < 1e-6f);
    close_terms(&f);
}

/* Values beyond float range: param_init (learnable) and create() (learnable = false) refuse them, naming
 * the parameter, the rule, the head, the layer and the value. base = 1e15 (the largest option number the
 * engine takes): s_2 = 1e45, inf as a float. */
static void test_expr_not_finite(void **state)
{
    (void)state;
    char text[2048];
    experiment(text, sizeof text, 4, 1024, "cauchy_tp", "base = 1e15\n");
    fixture f;
    bk_error err;
    int rc = open_terms(&f, text, &err);
    close_terms(&f);
    assert_int_not_equal(rc, BK_OK);
    assert_message_has(err.message, "param_init_ctx()");
    assert_message_has(err.message, "parameter 's'");
    assert_message_has(err.message, "BIASKIT_TP_EXPR(pow(c.base, h + 1))");
    assert_message_has(err.message, "1e+45 at head h = 2, layer 0");
    assert_message_has(err.message, "expected a finite float");

    expect_plugin_error(4, 1024, "cauchy_tp", "base = 1e15\nlearnable = false\n", "parameter 's'",
                        "1e+45 at head h = 2, layer -1");
    expect_plugin_error(4, 1024, "cauchy_tp", "base = 1e15\nlearnable = false\n", "learnable = false",
                        "set 's' instead");
    /* a given value needs no rule */
    fixture g;
    open_plugin(&g, 4, 1024, "cauchy_tp", "base = 1e15\ns = [4.0]\n");
    assert_true(bk_term_theta(&g.set.terms[0], 1)[3] == 4.0f);
    close_terms(&g);
}

/* ---- the arrays of <biaskit/formula_plugin.h> ------------------------------------------------------------ */

/* reach_fp, width 4 (default) and 6: theta = g (H), o (1), w (width: pow(2, -k) / width), v (H x width:
 * 0.01 (k + 1) in every row). h in an array's rule is the element's index within the row. */
static void test_expr_arrays(void **state)
{
    (void)state;
    for (int width = 4; width <= 6; width += 2) {
        char options[64];
        snprintf(options, sizeof options, "width = %d\n", width);
        fixture f;
        open_plugin(&f, 3, 256, "reach_fp", options);
        const bk_term *t = &f.set.terms[0];
        assert_int_equal(t->n_params, 3 + 1 + width + 3 * width);
        assert_non_null(BK_DESCRIPTOR_FN(t->plugin->desc, param_init_ctx));
        for (int l = 0; l < t->n_copies; l++) {
            const float *theta = bk_term_theta(t, l), *w = theta + 4, *v = w + width;
            for (int k = 0; k < width; k++)
                if (w[k] != (float)(pow(2.0, -k) / width))
                    fail_msg("width %d, layer %d: w[%d] = %.9g, expected 2^-k / width", width, l, k, (double)w[k]);
            for (int h = 0; h < 3; h++)
                for (int k = 0; k < width; k++)
                    if (v[h * width + k] != (float)(0.01 * (k + 1)))
                        fail_msg("width %d, layer %d: v[%d][%d] = %.9g, expected 0.01 (k + 1)", width, l, h, k,
                                 (double)v[h * width + k]);
            for (int h = 0; h < 3; h++) /* the other rules still draw */
                assert_true(theta[h] >= 0.5f && theta[h] <= 1.0f);
            assert_true(fabsf(theta[3]) <= 1.0f / sqrtf((float)width));
        }
        close_terms(&f);
    }
}

/* ---- reserved constant names (the geometry) ----------------------------------------------------------- */

/* Compiles `source` with the C compiler the build used (syntax only); returns its exit status, its output
 * in out. */
static int compile(const char *source, char *out, size_t size)
{
    char path[1024], cmd[3072];
    snprintf(path, sizeof path, "%s/tests/test_formula_reach_%d.c", BK_TEST_BINARY_DIR, (int)getpid());
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(source, fp);
    fclose(fp);
    snprintf(cmd, sizeof cmd, "'%s' -std=c11 -fsyntax-only -I'%s/sdk/include' '%s' 2>&1", BK_TEST_CC,
             BK_TEST_SOURCE_DIR, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    remove(path);
    return status;
}

static void test_reserved_names(void **state)
{
    (void)state;
    static const char table_fmt[] =
        "#include <biaskit/table_plugin.h>\n"
        "#define Q_PARAMS(X) X(a, PER_HEAD, BIASKIT_TP_EXPR(c.d_model + c.layers + h), 0.0, INFINITY, \"a\")\n"
        "#define Q_CONSTANTS(C) C(%s, BIASKIT_TP_INT(1, 0, 10), \"k\")\n"
        "BIASKIT_TP_TYPES(q, Q_PARAMS, Q_CONSTANTS)\n"
        "BIASKIT_TP_TABLE(q) { return -p.a * (float)d / (float)(c.d_head * c.train_length); }\n"
        "BIASKIT_TP_GRADIENT(q) { g->a = -(float)d; }\n"
        "BIASKIT_TABLE_PLUGIN(q, Q_PARAMS, Q_CONSTANTS, .name = \"q\", .version = \"1\", .summary = \"q\")\n";
    static const char formula_fmt[] =
        "#include <biaskit/formula_plugin.h>\n"
        "#define Q_PARAMS(X) X(a, ARRAY(c.k), BIASKIT_TP_EXPR(h * layer), -INFINITY, INFINITY, \"a\")\n"
        "#define Q_CONSTANTS(C) C(%s, BIASKIT_TP_INT(1, 1, 10), \"k\") C(k, BIASKIT_TP_INT(2, 1, 9), \"n\")\n"
        "BIASKIT_FP_TYPES(q, Q_PARAMS, Q_CONSTANTS)\n"
        "BIASKIT_FP_SCALE(q) { return p.a[0] * c.train_length; }\n"
        "BIASKIT_FP_SCALE_GRADIENT(q) { g->a[0] = c.train_length; }\n"
        "BIASKIT_SCALE_PLUGIN(q, Q_PARAMS, Q_CONSTANTS, .name = \"q\", .version = \"1\", .summary = \"q\")\n";
    static const struct {
        const char *fmt, *name;
        int refused;
    } cases[] = {{table_fmt, "d_head", 1},   {table_fmt, "layers", 1},        {table_fmt, "d_head2", 0},
                 {formula_fmt, "train_length", 1}, {formula_fmt, "d_model", 1}, {formula_fmt, "length", 0}};
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++) {
        char source[2048], out[8192], needle[128];
        snprintf(source, sizeof source, cases[n].fmt, cases[n].name);
        int status = compile(source, out, sizeof out);
        if (!cases[n].refused) {
            if (status != 0)
                fail_msg("constant '%s': expected to compile, got:\n%s", cases[n].name, out);
            continue;
        }
        if (status == 0)
            fail_msg("constant '%s': expected a compile error, it compiled", cases[n].name);
        snprintf(needle, sizeof needle, "a constant may not be called %s (c.%s is", cases[n].name, cases[n].name);
        assert_message_has(out, needle);
    }
}

/* ---- param_info ---------------------------------------------------------------------------------------- */

/* Tensor `tensor`'s bounds and text (the engine's defaults first). */
static biaskit_param_info info_of(const bk_term *t, int32_t tensor)
{
    biaskit_param_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    info.lower = -INFINITY;
    info.upper = INFINITY;
    biaskit_error pe = {0, ""};
    const biaskit_plugin *d = t->plugin->desc;
    assert_non_null(BK_DESCRIPTOR_FN(d, param_info));
    if (d->param_info(t->instance, tensor, &info, &pe) != BIASKIT_OK)
        fail_msg("param_info(%d): %s", (int)tensor, pe.message);
    return info;
}

static void expect_info(const bk_term *t, int32_t tensor, double lower, double upper, const char *text)
{
    biaskit_param_info info = info_of(t, tensor);
    if (!(info.lower == lower && info.upper == upper) || strcmp(info.init, text) != 0)
        fail_msg("%s tensor %d: [%g, %g] \"%s\", expected [%g, %g] \"%s\"", t->plugin->desc->name, (int)tensor,
                 info.lower, info.upper, info.init, lower, upper, text);
}

static void test_param_info(void **state)
{
    (void)state;
    fixture f;
    open_plugin(&f, 8, 512, "tp_scalar", NULL); /* CONST, ALIBI */
    expect_info(&f.set.terms[0], 0, 0.0, 100.0, "1");
    expect_info(&f.set.terms[0], 1, 0.0, INFINITY, "ALiBi: 2^(-8(h+1)/H)");
    biaskit_param_info small = {.struct_size = (uint32_t)offsetof(biaskit_param_info, init)};
    biaskit_error pe = {0, ""};
    assert_int_equal(f.set.terms[0].plugin->desc->param_info(f.set.terms[0].instance, 1, &small, &pe), BIASKIT_OK);
    assert_true(small.upper == INFINITY && small.lower == 0.0); /* the fields inside struct_size only */
    assert_int_equal(f.set.terms[0].plugin->desc->param_info(f.set.terms[0].instance, 2, &small, &pe),
                     BIASKIT_ERR_INVALID);
    assert_message_has(pe.message, "tensor 2: expected 0 .. 1");
    close_terms(&f);

    open_plugin(&f, 6, 512, "tp_scalar", "amp = [2.5]\n"); /* given; ALiBi with H not a power of two */
    expect_info(&f.set.terms[0], 0, 0.0, 100.0, "given");
    expect_info(&f.set.terms[0], 1, 0.0, INFINITY, "ALiBi: Press et al.'s slopes for H = 6 (not a power of two: "
                                                   "interleaved)");
    close_terms(&f);

    open_plugin(&f, 4, 512, "kerple_tp", NULL); /* UNIFORM */
    expect_info(&f.set.terms[0], 0, 0.01, INFINITY, "uniform(0, 2)");
    expect_info(&f.set.terms[0], 1, 0.01, INFINITY, "uniform(0, 1)");
    close_terms(&f);

    open_plugin(&f, 4, 512, "cauchy_tp", NULL); /* EXPR */
    expect_info(&f.set.terms[0], 0, 1e-6, INFINITY, "expr: pow(c.base, h + 1)");
    expect_info(&f.set.terms[0], 1, 0.0, INFINITY, "expr: (layer + 2) * c.train_length / 1024.0");
    close_terms(&f);

    open_plugin(&f, 2, 512, "reach_fp", "width = 16\n"); /* formula_plugin.h: UNIFORM, SYMMETRIC, EXPR arrays */
    expect_info(&f.set.terms[0], 0, 0.0, 10.0, "uniform(0.5, 1)");
    expect_info(&f.set.terms[0], 1, -1.0, 1.0, "symmetric(0.25)");
    expect_info(&f.set.terms[0], 2, -INFINITY, INFINITY, "expr: pow(2.0, -h) / c.width");
    expect_info(&f.set.terms[0], 3, -INFINITY, INFINITY, "expr: 0.01 * (h + 1)");
    close_terms(&f);

    open_plugin(&f, 2, 512, "reach_fp", "width = 32\n"); /* 1 / sqrt(32), to 6 digits */
    expect_info(&f.set.terms[0], 1, -1.0, 1.0, "symmetric(0.176777)");
    close_terms(&f);
}

/* ALIBI with a scale (no test plugin has one: the built-in alibi's slopes are FIXED, so they are no tensor):
 * param_info on an instance made here, H = 8 and 12. */
static void test_param_info_alibi_scale(void **state)
{
    (void)state;
    biaskit_tp_param spec = {.name = "m", .shape = 2, .init = BIASKIT_TP_INIT_ALIBI, .init_a = 0.5, .lower = 0.0,
                             .upper = INFINITY, .doc = "m"};
    unsigned char given = 0;
    int64_t offset = 0;
    biaskit_tp_instance s;
    memset(&s, 0, sizeof s);
    s.specs = &spec;
    s.n_specs = 1;
    s.learnable = 1;
    s.given = &given;
    s.offsets = &offset;
    biaskit_param_info info = {.struct_size = sizeof info};
    biaskit_error pe = {0, ""};
    s.heads = 8;
    assert_int_equal(biaskit_tp_param_info(&s, 0, &info, &pe), BIASKIT_OK);
    assert_string_equal(info.init, "ALiBi x 0.5: 2^(-8(h+1)/H)");
    assert_true(info.lower == 0.0 && info.upper == INFINITY);
    s.heads = 12;
    assert_int_equal(biaskit_tp_param_info(&s, 0, &info, &pe), BIASKIT_OK);
    assert_string_equal(info.init, "ALiBi x 0.5: Press et al.'s slopes for H = 12 (not a power of two: interleaved)");
}

/* The numbers' spelling: the shorter of fixed and exponent, at most 6 digits, no -0. */
static void test_number_spelling(void **state)
{
    (void)state;
    static const struct {
        double v;
        const char *text;
    } cases[] = {{1e-3, "1e-3"}, {0.5, "0.5"}, {1.0, "1"}, {-0.0, "0"}, {100.0, "100"}, {1e6, "1e6"},
                 {0.01, "0.01"}, {-2.5e-7, "-2.5e-7"}, {3.0e38, "3e38"}, {0.17677669529663687, "0.176777"}, {512.0, "512"}, {1000.0, "1e3"},
                 {1024.0, "1024"}, {123456.0, "123456"}, {0.0001, "1e-4"}, {0.25, "0.25"},
                 {INFINITY, "inf"}, {-INFINITY, "-inf"}, {12345678.0, "1.23457e7"}};
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++) {
        char buf[32];
        biaskit_tp_number_(buf, sizeof buf, cases[n].v);
        if (strcmp(buf, cases[n].text) != 0)
            fail_msg("%.17g: \"%s\", expected \"%s\"", cases[n].v, buf, cases[n].text);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expr_per_head_and_layer),
        cmocka_unit_test(test_expr_param_init_ctx),
        cmocka_unit_test(test_geometry_in_context),
        cmocka_unit_test(test_expr_fixed),
        cmocka_unit_test(test_expr_not_finite),
        cmocka_unit_test(test_expr_arrays),
        cmocka_unit_test(test_reserved_names),
        cmocka_unit_test(test_param_info),
        cmocka_unit_test(test_param_info_alibi_scale),
        cmocka_unit_test(test_number_spelling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
