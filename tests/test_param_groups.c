/* Parameter groups (plugin.h param_group; bias/terms.h bk_term_group; train/adamw.h segments):
 *   - AdamW with segments: each run of a group steps with lr x lr_scale and its own weight decay, the exact
 *     update of train/adamw_math.h (and on the first step its closed form), runs merged, a plain group left
 *     plain, bad runs refused;
 *   - a plugin's declaration (tests/plugins/testgroups.c: tensor "a" at lr x 0.5 with weight decay 0, "b" at
 *     the defaults, listed out of offset order) reaching the optimizer as segments of the term's group, per
 *     layer too, and one training step moving each tensor by its own rule;
 *   - [[term]] lr_scale / weight_decay overriding it, as a number or per tensor (lr_scale.b = ...), and for
 *     a plugin without tensor names (the whole theta, param_group asked with tensor -1);
 *   - refusals naming file:line:column (a negative or non-finite value, a key on a term without parameters,
 *     a tensor the plugin does not have) or the plugin (a bad declaration, a failing param_group());
 *   - `biaskit plugins` shows the declared groups. */
#define _POSIX_C_SOURCE 200809L
#include "term_fixture.h"

#include "train/adamw.h"
#include "train/adamw_math.h"
#include "train/lm.h"

#include <math.h>
#include <stdlib.h>

#define MODEL "[model]\nlayers = 2\nheads = 4\ndim = 32\nvocab = 256\n[train]\nlength = 32\n"

static void open_lm(bk_lm *lm, const char *text)
{
    bk_error err;
    setenv("BIASKIT_PLUGIN_PATH", BK_TEST_PLUGIN_DIR ":" BK_TEST_PLUGINS_DIR, 1);
    if (bk_lm_open_text(lm, text, "exp.toml", ".", NULL, 0, &err))
        fail_msg("%s\n  experiment:\n%s", err.message, text);
}

/* Six values in three runs: lr x 0.5 with decay 0.2, lr x 2 with the group's rule (decay on: [train]
 * weight_decay 0.1), lr x 1 with decay 0. Two steps, each value against bk_adamw_update with its run's lr
 * and decay, bit for bit; the first step against its closed form p - lr (g / (|g| + eps) + wd p). */
static void segments_step_with_their_own_rate_and_decay(void **state)
{
    (void)state;
    float p[6] = {0.5f, -0.25f, 1.0f, -2.0f, 0.75f, 0.125f}, g[6] = {0.3f, -0.02f, 1.5f, 0.4f, -0.6f, 0.05f};
    float p0[6], want[6], m[6] = {0}, v[6] = {0};
    memcpy(p0, p, sizeof p);
    bk_adamw opt = {0};
    bk_error err;
    assert_int_equal(bk_adamw_add(&opt, "x", p, g, 6, 1, &err), BK_OK);
    const bk_adamw_segment seg[4] = {{0, 1, 0.5, 0.2}, {1, 1, 0.5, 0.2}, {2, 2, 2.0, -1.0}, {4, 2, 1.0, 0.0}};
    assert_int_equal(bk_adamw_set_segments(&opt, 0, seg, 4, &err), BK_OK);
    assert_int_equal(opt.groups[0].n_segments, 3); /* the first two merged */
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    const double scale[6] = {0.5, 0.5, 2.0, 2.0, 1.0, 1.0}, decay[6] = {0.2, 0.2, wd, wd, 0.0, 0.0};
    memcpy(want, p, sizeof p);
    for (int step = 1; step <= 2; step++) {
        const float c1 = (float)(1.0 - pow(b1, step)), c2 = (float)(1.0 - pow(b2, step));
        for (int i = 0; i < 6; i++)
            bk_adamw_update(&want[i], g[i], &m[i], &v[i], (float)(lr * scale[i]), (float)b1, (float)b2, (float)eps,
                            (float)decay[i], c1, c2);
        assert_int_equal(bk_adamw_step(&opt, lr, b1, b2, eps, wd, &err), BK_OK);
        assert_memory_equal(p, want, sizeof p);
        if (step == 1)
            for (int i = 0; i < 6; i++) {
                double closed = p0[i] - lr * scale[i] * (g[i] / (fabs(g[i]) + eps) + decay[i] * p0[i]);
                assert_float_equal(p[i], closed, 1e-6);
            }
    }
    /* runs of lr x 1 with the group's rule only: the plain group, no segments */
    const bk_adamw_segment plain[2] = {{0, 3, 1.0, -1.0}, {3, 3, 1.0, -5.0}};
    assert_int_equal(bk_adamw_set_segments(&opt, 0, plain, 2, &err), BK_OK);
    assert_int_equal(opt.groups[0].n_segments, 0);
    /* refused: a gap, a run past the end, a negative or non-finite scale */
    const bk_adamw_segment gap[2] = {{0, 2, 1.0, 0.0}, {3, 3, 1.0, 0.0}};
    assert_int_equal(bk_adamw_set_segments(&opt, 0, gap, 2, &err), BK_ERR_INVALID);
    assert_message_has(err.message,
                       "optimizer group 'x' (6 values): segment 1 covers [3, 6); expected one starting at 2");
    const bk_adamw_segment past[1] = {{0, 7, 1.0, 0.0}};
    assert_int_equal(bk_adamw_set_segments(&opt, 0, past, 1, &err), BK_ERR_INVALID);
    const bk_adamw_segment negative[1] = {{0, 6, -0.5, 0.0}};
    assert_int_equal(bk_adamw_set_segments(&opt, 0, negative, 1, &err), BK_ERR_INVALID);
    assert_message_has(err.message, "segment 0 has lr_scale -0.5");
    const bk_adamw_segment nan_wd[1] = {{0, 6, 1.0, NAN}};
    assert_int_equal(bk_adamw_set_segments(&opt, 0, nan_wd, 1, &err), BK_ERR_INVALID);
    bk_adamw_free(&opt);
}

static const bk_param_group *group_named(const bk_adamw *opt, const char *name)
{
    for (int g = 0; g < opt->n_groups; g++)
        if (!strcmp(opt->groups[g].name, name))
            return &opt->groups[g];
    fail_msg("no optimizer group '%s'", name);
    return NULL;
}

static void expect_segment(const bk_param_group *g, int k, size_t offset, size_t count, double lr, double wd)
{
    assert_true(k < g->n_segments);
    const bk_adamw_segment *s = &g->segments[k];
    if (s->offset != offset || s->count != count || s->lr_scale != lr || s->weight_decay != wd)
        fail_msg("group %s segment %d: [%zu, +%zu) lr x %g decay %g; expected [%zu, +%zu) lr x %g decay %g", g->name,
                 k, s->offset, s->count, s->lr_scale, s->weight_decay, offset, count, lr, wd);
}

/* testgroups per layer: theta = [b (4), a (4)] per copy; a at lr x 0.5, decay 0; b at the defaults. One
 * step with decay_all (so that b decays by [train] weight_decay and a does not): each value against
 * bk_adamw_update with its tensor's rule. */
static void plugin_declaration_reaches_the_optimizer(void **state)
{
    (void)state;
    bk_lm lm;
    open_lm(&lm, MODEL "[[term]]\nplugin = \"testgroups\"\nper_layer = true\n");
    const bk_term *t = &lm.terms.terms[0];
    assert_int_equal(t->n_groups, 2);
    assert_string_equal(t->groups[0].name, "b"); /* offset order */
    assert_true(t->groups[0].lr_scale == 1.0 && t->groups[0].weight_decay == BIASKIT_WEIGHT_DECAY_DEFAULT);
    assert_string_equal(t->groups[1].name, "a");
    assert_true(t->groups[1].lr_scale == 0.5 && t->groups[1].weight_decay == 0.0);
    bk_adamw opt = {0};
    bk_error err;
    if (bk_lm_register(&lm, &opt, &err))
        fail_msg("%s", err.message);
    const bk_param_group *g = group_named(&opt, "term.testgroups.theta");
    assert_int_equal(g->n_segments, 4);
    expect_segment(g, 0, 0, 4, 1.0, -1.0);
    expect_segment(g, 1, 4, 4, 0.5, 0.0);
    expect_segment(g, 2, 8, 4, 1.0, -1.0);
    expect_segment(g, 3, 12, 4, 0.5, 0.0);
    /* one step, decayed group (as decay_all would make it) */
    ((bk_param_group *)g)->decay = 1;
    float before[16], want[16], m[16] = {0}, v[16] = {0};
    for (int i = 0; i < 16; i++)
        g->grad[i] = 0.1f * (float)(i + 1) * (i % 3 ? 1.0f : -1.0f), g->param[i] = 0.05f * (float)(i - 7);
    memcpy(before, g->param, sizeof before);
    memcpy(want, before, sizeof want);
    for (int i = 0; i < 16; i++) {
        const int is_a = (i % 8) >= 4;
        bk_adamw_update(&want[i], g->grad[i], &m[i], &v[i], (float)(1e-2 * (is_a ? 0.5 : 1.0)), 0.9f, 0.95f, 1e-8f,
                        is_a ? 0.0f : 0.1f, (float)(1.0 - 0.9), (float)(1.0 - 0.95));
    }
    if (bk_adamw_step(&opt, 1e-2, 0.9, 0.95, 1e-8, 0.1, &err))
        fail_msg("%s", err.message);
    assert_memory_equal(g->param, want, sizeof want);
    bk_adamw_free(&opt);
    bk_lm_close(&lm);
}

/* The [[term]] keys override the declaration: a number for every tensor, or per tensor. */
static void term_keys_override_the_declaration(void **state)
{
    (void)state;
    bk_lm lm;
    open_lm(&lm, MODEL "[[term]]\nplugin = \"testgroups\"\nlr_scale = 0.25\n");
    assert_true(lm.terms.terms[0].groups[0].lr_scale == 0.25 && lm.terms.terms[0].groups[1].lr_scale == 0.25);
    assert_true(lm.terms.terms[0].groups[1].weight_decay == 0.0); /* still the declaration's */
    bk_lm_close(&lm);
    open_lm(&lm, MODEL "[[term]]\nplugin = \"testgroups\"\nlr_scale.b = 3\nweight_decay.a = 0.01\n"
                       "weight_decay.b = 0.5\n");
    const bk_term *t = &lm.terms.terms[0];
    assert_true(t->groups[0].lr_scale == 3.0 && t->groups[0].weight_decay == 0.5);  /* b */
    assert_true(t->groups[1].lr_scale == 0.5 && t->groups[1].weight_decay == 0.01); /* a */
    bk_lm_close(&lm);
    /* without tensor names: one group, "theta", declared for tensor -1 (the plugin gives it a's rule) */
    open_lm(&lm, MODEL "[[term]]\nplugin = \"testgroups\"\nnamed = false\nlr_a = 0.75\n");
    assert_int_equal(lm.terms.terms[0].n_groups, 1);
    assert_string_equal(lm.terms.terms[0].groups[0].name, "theta");
    assert_true(lm.terms.terms[0].groups[0].lr_scale == 0.75);
    bk_lm_close(&lm);
    open_lm(&lm, MODEL "[[term]]\nplugin = \"testgroups\"\nnamed = false\nlr_scale.theta = 2\n");
    assert_true(lm.terms.terms[0].groups[0].lr_scale == 2.0);
    bk_lm_close(&lm);
    /* a plugin without param_group: lr x 1 and the engine's rule; a key sets it */
    open_lm(&lm, MODEL "[[term]]\nplugin = \"kerple\"\nweight_decay = 0.05\n");
    for (int g = 0; g < 2; g++)
        assert_true(lm.terms.terms[0].groups[g].lr_scale == 1.0 && lm.terms.terms[0].groups[g].weight_decay == 0.05);
    bk_lm_close(&lm);
}

static void refusals(void **state)
{
    (void)state;
    setenv("BIASKIT_PLUGIN_PATH", BK_TEST_PLUGIN_DIR ":" BK_TEST_PLUGINS_DIR, 1);
    expect_term_error(MODEL "[[term]]\nplugin = \"testgroups\"\nlr_scale = -1\n",
                      "exp.toml:10:12: [[term]] #1: expected a number for 'lr_scale' (or a table of numbers, one per "
                      "tensor), a number in [0, 1000], got -1", NULL);
    /* bounded as [train] bounds its rate and decay: 1e30 trained KERPLE's r1 to 2.9e27 */
    expect_term_error(MODEL "[[term]]\nplugin = \"testgroups\"\nlr_scale = 1e30\n",
                      "exp.toml:10:12: [[term]] #1: expected a number for 'lr_scale'", "in [0, 1000], got 1e+30");
    expect_term_error(MODEL "[[term]]\nplugin = \"testgroups\"\nweight_decay.a = 11\n",
                      "exp.toml:10:18: [[term]] #1: expected a number for 'weight_decay.a'", "in [0, 10], got 11");
    /* a name that is another term's default name: their tensors (term.NAME.*) would be ambiguous */
    expect_term_error(MODEL "[[term]]\nplugin = \"alibi\"\n[[term]]\nplugin = \"testgroups\"\nname = \"alibi\"\n",
                      "[[term]] #2: name 'alibi' is the default name of [[term]] #1 (plugin alibi, not named): name "
                      "that term too, or choose another name", NULL);
    expect_term_error(MODEL "[[term]]\nplugin = \"testgroups\"\nname = \"alibi\"\n[[term]]\nplugin = \"alibi\"\n",
                      "[[term]] #1: name 'alibi' is the default name of [[term]] #2 (plugin alibi", NULL);
    expect_term_error(MODEL "[[term]]\nplugin = \"testgroups\"\nlr_scale = nan\n", "exp.toml:10:12: [[term]] #1:",
                      "got nan");
    expect_term_error(MODEL "[[term]]\nplugin = \"testgroups\"\nweight_decay = inf\n", "exp.toml:10:16: [[term]] #1:",
                      "got inf");
    expect_term_error(MODEL "[[term]]\nplugin = \"testgroups\"\nlr_scale.a = -0.5\n",
                      "exp.toml:10:14: [[term]] #1: expected a number for 'lr_scale.a', a number in [0, 1000], got -0.5",
                      NULL);
    expect_term_error(MODEL "[[term]]\nplugin = \"testgroups\"\nweight_decay = \"none\"\n",
                      "exp.toml:10:16: [[term]] #1: expected a number for 'weight_decay'", "got string");
    expect_term_error(MODEL "[[term]]\nplugin = \"alibi\"\nlr_scale = 0.5\n",
                      "exp.toml:10:12: [[term]] #1 (alibi): 'lr_scale' sets how the optimizer trains the term's "
                      "parameters; plugin 'alibi' has none here (param_count() is 0), remove the key", NULL);
    expect_term_error(MODEL "[[term]]\nplugin = \"kerple\"\nlearnable = false\nr1 = [1.0]\nr2 = [0.5]\n"
                            "weight_decay = 0\n",
                      "exp.toml:13:16: [[term]] #1 (kerple): 'weight_decay'", "has none here");
    expect_term_error(MODEL "[[term]]\nplugin = \"testgroups\"\nlr_scale.c = 1\n",
                      "exp.toml:10:10: [[term]] #1 (testgroups): lr_scale.c: plugin 'testgroups' has no tensor 'c'; "
                      "its parameters are: b, a", NULL);
    expect_term_error(MODEL "[[term]]\nplugin = \"testgroups\"\nnamed = false\nweight_decay.a = 1\n",
                      "weight_decay.a: plugin 'testgroups' has no tensor 'a'; its parameters are: theta (one vector: "
                      "the plugin names no tensors)", NULL);
    expect_term_error(MODEL "[[term]]\nplugin = \"testgroups\"\nmisdeclare = \"negative\"\n",
                      "term 'testgroups' (plugin testgroups, ", "param_group() gives tensor 'a' lr_scale = -1; "
                      "expected a number in [0, 1000]");
    expect_term_error(MODEL "[[term]]\nplugin = \"testgroups\"\nmisdeclare = \"nan\"\n",
                      "param_group() gives tensor 'a' lr_scale = nan", NULL);
    expect_term_error(MODEL "[[term]]\nplugin = \"testgroups\"\nmisdeclare = \"decay\"\n",
                      "param_group() gives tensor 'a' weight_decay = -0.5; expected a number in [0, 10] or "
                      "BIASKIT_WEIGHT_DECAY_DEFAULT (-1)", NULL);
    expect_term_error(MODEL "[[term]]\nplugin = \"testgroups\"\nmisdeclare = \"fail\"\n",
                      "param_group() failed: asked to fail, as a test", NULL);
}

/* `biaskit plugins testgroups` lists the declared groups. */
static void plugins_lists_the_groups(void **state)
{
    (void)state;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "BIASKIT_PLUGIN_PATH='%s' '%s/biaskit' plugins testgroups alibi 2>&1",
             BK_TEST_PLUGINS_DIR, BK_TEST_BINARY_DIR);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[16384];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    assert_int_equal(pclose(p), 0);
    assert_message_has(out, "  groups:       a: lr x 0.5, weight decay 0; b: lr x 1, weight decay: the engine's (none; "
                            "[train] weight_decay with decay_all)\n");
    assert_int_equal(strstr(strstr(out, "alibi "), "groups:") != NULL, 0); /* no hook, no line */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(segments_step_with_their_own_rate_and_decay),
        cmocka_unit_test(plugin_declaration_reaches_the_optimizer),
        cmocka_unit_test(term_keys_override_the_declaration),
        cmocka_unit_test(refusals),
        cmocka_unit_test(plugins_lists_the_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
