/* Activation recomputation ([run] recompute, bk_gpt.recompute) and frozen weights (bk_gpt.frozen):
 *
 * - a training forward/backward that recomputes each layer gives the same loss and the same gradients,
 *   bit for bit, as one that keeps every layer: both families, schemes that touch each kind of state a
 *   layer has (tables, rotary angles, a learned FIRE function, a content term's per-layer positions,
 *   counted positions), QK-norm, on the CPU (the blocked and the fused attention) and on the emulated device
 *   backend (with bf16 storage too); and its activation memory is smaller;
 * - with [train] trainable freezing the model's tensors, the gradients of what trains are the same bits
 *   as with everything training, and the frozen matrices' gradients are not computed (they stay 0).
 * - with the model frozen and a term in upper layers only, the backward stops at the lowest of them with
 *   the same bits for what trains.
 *
 * Shapes: B = 2, T = 19 (no block divides it), 3 layers (the middle one is recomputed between two others). */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include "train/init.h"
#include "train/lm.h"

#include <stdlib.h>

enum { B = 2, T = 19 };

static const char gpt2_model[] = "[model]\nlayers = 3\nheads = 4\ndim = 32\nvocab = 256\n";
static const char llama_model[] = "[model]\nfamily = \"llama\"\nlayers = 3\nheads = 4\nkv_heads = 2\nhead_dim = 8\n"
                                  "dim = 24\nffn_dim = 40\nvocab = 256\ntied = false\n";
/* with QK-norm: the q/k/v product each layer keeps (its normalisation's input) is recomputed too */
static const char llama_qk_model[] = "[model]\nfamily = \"llama\"\nlayers = 3\nheads = 4\nkv_heads = 2\n"
                                     "head_dim = 8\ndim = 24\nffn_dim = 40\nvocab = 256\nqk_norm = true\n";

typedef struct scheme {
    const char *name;
    const char *terms;
    const char *attention; /* [run] attention on the CPU */
} scheme;

static const scheme schemes[] = {
    {"rope+alibi", "[[term]]\nplugin = \"rope\"\n[[term]]\nplugin = \"alibi\"\n", "auto"},
    {"kerple", "[[term]]\nplugin = \"kerple\"\nvariant = \"log\"\n", "fused"},
    {"fire", "[[term]]\nplugin = \"fire\"\n", "auto"},
    {"fox", "[[term]]\nplugin = \"fox\"\n", "fused"},
    {"cope", "[[term]]\nplugin = \"cope\"\npoints = 5\ninit_std = 0.2\n", "materialized"},
};
#define N_SCHEMES (sizeof schemes / sizeof schemes[0])

typedef struct run {
    bk_lm lm;
    bk_adamw opt;
} run;

static void check(int rc, const bk_error *err, const char *what)
{
    if (rc)
        fail_msg("%s: %s", what, err->message);
}

/* The run of model + scheme on device ("cpu" or "emulated") with the extra --set assignments. */
static void open_run(run *r, const char *model, const scheme *s, const char *device, const char *const *extra,
                     int n_extra)
{
    memset(r, 0, sizeof *r);
    char text[1024], dev[64], att[64];
    snprintf(text, sizeof text, "%s[train]\nlength = %d\nbatch = %d\nseed = 3\n%s", model, T, B, s->terms);
    snprintf(dev, sizeof dev, "run.device=%s", device);
    snprintf(att, sizeof att, "run.attention=%s", strcmp(device, "cpu") ? "fused" : s->attention);
    const char *sets[8] = {dev, att};
    int n = 2;
    for (int i = 0; i < n_extra; i++)
        sets[n++] = extra[i];
    bk_error err;
    check(bk_lm_open_text(&r->lm, text, s->name, ".", sets, n, &err), &err, s->name);
    check(bk_lm_register(&r->lm, &r->opt, &err), &err, "register");
}

static void close_run(run *r)
{
    bk_adamw_free(&r->opt);
    bk_lm_close(&r->lm);
}

static void forward_backward(run *r)
{
    int32_t in[B * T], tg[B * T];
    for (int n = 0; n < B * T; n++) {
        in[n] = (int32_t)((n * 37 + 11) % 97 + 32);
        tg[n] = (int32_t)((n * 53 + 5) % 89 + 32);
    }
    bk_error err;
    check(bk_bias_forward(&r->lm.bias, T, &err), &err, "bias forward");
    check(bk_lm_zero_grad(&r->lm, &err), &err, "zero grad");
    check(bk_gpt_forward(&r->lm.gpt, in, tg, B, T, 1, &err), &err, "forward");
    check(bk_gpt_backward(&r->lm.gpt, in, tg, 1.0f, &err), &err, "backward");
    check(bk_lm_gradients_ready(&r->lm, &err), &err, "gradients to host");
}

static float *group_grad(const run *r, int i)
{
    bk_error err;
    float *g = malloc(r->opt.groups[i].n * sizeof(float) + 1);
    assert_non_null(g);
    check(bk_adamw_grad_to_host(&r->opt, i, g, &err), &err, "gradient download");
    return g;
}

/* Group i's gradients of a and b are the same bits; returns the largest |value| (0: all zero). */
static double same_group(const run *a, const run *b, int i, const char *what)
{
    float *ga = group_grad(a, i), *gb = group_grad(b, i);
    const size_t n = a->opt.groups[i].n;
    double largest = 0.0;
    for (size_t k = 0; k < n; k++) {
        if (memcmp(&ga[k], &gb[k], sizeof(float)))
            fail_msg("%s: gradient %s[%zu] is %.9g with and %.9g without", what, a->opt.groups[i].name, k,
                     (double)gb[k], (double)ga[k]);
        largest = fabs(ga[k]) > largest ? fabs(ga[k]) : largest;
    }
    free(ga);
    free(gb);
    return largest;
}

/* `also`: one more --set for both runs (NULL: none) */
static void recompute_case(const char *family, const char *model, const scheme *s, const char *device,
                           const char *also)
{
    char what[160];
    snprintf(what, sizeof what, "%s, %s, %s%s%s, recompute", family, s->name, device, also ? ", " : "",
             also ? also : "");
    const char *on[] = {"run.recompute=true", also}, *base[] = {also};
    run full, again;
    open_run(&full, model, s, device, base, also ? 1 : 0);
    open_run(&again, model, s, device, on, also ? 2 : 1);
    assert_int_equal(full.lm.gpt.recompute, 0);
    assert_int_equal(again.lm.gpt.recompute, 1);
    forward_backward(&full);
    forward_backward(&again);
    assert_true(again.lm.gpt.acts_recompute);
    if (memcmp(&full.lm.gpt.loss, &again.lm.gpt.loss, sizeof(float)))
        fail_msg("%s: loss %.9g, without %.9g", what, (double)again.lm.gpt.loss, (double)full.lm.gpt.loss);
    assert_int_equal(full.opt.n_groups, again.opt.n_groups);
    int nonzero = 0;
    for (int i = 0; i < full.opt.n_groups; i++)
        nonzero += same_group(&full, &again, i, what) > 0.0;
    assert_true(nonzero >= full.opt.n_groups - 1); /* the gradients are real (a term may have none) */
    /* the memory: every layer's input and one layer's activations, not three layers' */
    const size_t keep = bk_gpt_model_activation_bytes(&full.lm.gpt, B, T, 1);
    const size_t less = bk_gpt_model_activation_bytes(&again.lm.gpt, B, T, 1);
    if (!(less < keep))
        fail_msg("%s: %zu bytes of activations, without recompute %zu", what, less, keep);
    /* a second step on the same buffers (the slot zeroed between layers, not only once) */
    forward_backward(&again);
    forward_backward(&full);
    for (int i = 0; i < full.opt.n_groups; i++)
        same_group(&full, &again, i, what);
    close_run(&full);
    close_run(&again);
}

static void recompute_gives_the_same_bits(void **state)
{
    (void)state;
    for (size_t s = 0; s < N_SCHEMES; s++) {
        recompute_case("gpt2", gpt2_model, &schemes[s], "cpu", NULL);
        recompute_case("llama", llama_model, &schemes[s], "cpu", NULL);
        recompute_case("llama, QK-norm", llama_qk_model, &schemes[s], "cpu", NULL);
    }
}

static void recompute_gives_the_same_bits_emulated(void **state)
{
    (void)state;
    /* the device's fused attention (counted positions need the materialized one: CPU above) */
    /* bf16 storage (gpt2): the recomputed q, k, v go through the fp32 stage again */
    recompute_case("gpt2", gpt2_model, &schemes[0], "emulated", "run.precision=bf16");
    recompute_case("gpt2", gpt2_model, &schemes[1], "emulated", "run.precision=bf16");
    for (size_t s = 0; s < N_SCHEMES; s++)
        if (strcmp(schemes[s].name, "cope")) {
            recompute_case("gpt2", gpt2_model, &schemes[s], "emulated", NULL);
            recompute_case("llama", llama_model, &schemes[s], "emulated", NULL);
            recompute_case("llama, QK-norm", llama_qk_model, &schemes[s], "emulated", NULL);
        }
}

/* The index of optimizer group `name` (it must exist). */
static int group_of(const run *r, const char *name)
{
    for (int i = 0; i < r->opt.n_groups; i++)
        if (!strcmp(r->opt.groups[i].name, name))
            return i;
    fail_msg("no optimizer group %s", name);
    return -1;
}

static void frozen_case(const char *family, const char *model, const char *norms, const char *device)
{
    char what[128];
    snprintf(what, sizeof what, "%s, %s, frozen", family, device);
    const scheme *s = &schemes[2]; /* fire: a term with parameters */
    char trainable[128];
    snprintf(trainable, sizeof trainable, "train.trainable=[\"term.*\", \"%s\"]", norms);
    const char *only[] = {trainable};
    run all, part;
    open_run(&all, model, s, device, NULL, 0);
    open_run(&part, model, s, device, only, 1);
    bk_error err;
    size_t n_all = 0, n_part = 0;
    check(bk_init_trainable(&all.lm, &all.opt, &n_all, &err), &err, "trainable (all)");
    check(bk_init_trainable(&part.lm, &part.opt, &n_part, &err), &err, "trainable (part)");
    assert_true(n_part < n_all);
    forward_backward(&all);
    forward_backward(&part);
    static const char *const matrices[] = {"model.wte", "model.qkvw", "model.attprojw", "model.fcw", "model.fcprojw",
                                           "model.lmhead"};
    int frozen_seen = 0;
    for (int i = 0; i < all.opt.n_groups; i++) {
        const char *name = all.opt.groups[i].name;
        int matrix = 0;
        for (size_t k = 0; k < sizeof matrices / sizeof matrices[0]; k++)
            matrix |= !strcmp(name, matrices[k]);
        const int frozen = part.opt.groups[group_of(&part, name)].frozen;
        assert_true(frozen || !matrix);
        if (!matrix) { /* trains, or a frozen norm or bias: the same bits as when everything trains */
            const double largest = same_group(&all, &part, i, what);
            assert_true(frozen || largest > 0.0);
            continue;
        }
        float *g = group_grad(&part, group_of(&part, name)), *ga = group_grad(&all, i);
        double sum_all = 0.0;
        for (size_t k = 0; k < part.opt.groups[i].n; k++) {
            if (g[k] != 0.0f)
                fail_msg("%s: frozen %s has gradient %.9g at %zu", what, name, (double)g[k], k);
            sum_all += fabs(ga[k]);
        }
        assert_true(sum_all > 0.0); /* it has a gradient when it trains */
        free(g);
        free(ga);
        frozen_seen++;
    }
    assert_true(frozen_seen >= 4);
    close_run(&all);
    close_run(&part);
}

static void frozen_matrices_skip_their_gradients(void **state)
{
    (void)state;
    frozen_case("gpt2", gpt2_model, "model.ln*", "cpu");
    frozen_case("llama", llama_model, "model.rms*", "cpu");
    frozen_case("gpt2", gpt2_model, "model.ln*", "emulated");
    frozen_case("llama", llama_model, "model.rms*", "emulated");
    frozen_case("llama, QK-norm", llama_qk_model, "model.*norm*", "cpu");
}

/* The first C floats of group `name`'s layer l (a per-layer vector tensor of C floats a layer) all zero? */
static int layer_rows_zero(const run *r, const char *name, int l, int C)
{
    float *g = group_grad(r, group_of(r, name));
    int zero = 1;
    for (int k = 0; k < C; k++)
        zero &= g[(size_t)l * C + (size_t)k] == 0.0f;
    free(g);
    return zero;
}

/* A term acting in upper layers only, the model frozen: the backward stops at the lowest of them
 * (bk_gpt.backward_from), the term's gradients are the same bits as a backward through every layer, and
 * the layers below are not visited (a frozen norm's gradient there stays 0, where the full backward gives
 * it a value). */
static void backward_case(const char *family, const char *model, const char *norm, int C, const char *layers,
                          int lowest, const char *device)
{
    char what[160], terms[160];
    snprintf(what, sizeof what, "%s, fire on layers %s, %s", family, layers, device);
    snprintf(terms, sizeof terms, "[[term]]\nplugin = \"fire\"\nlayers = %s\n", layers);
    const scheme s = {"fire (layers)", terms, "auto"};
    const char *only[] = {"train.trainable=[\"term.*\"]"};
    run skip, full;
    open_run(&skip, model, &s, device, only, 1);
    open_run(&full, model, &s, device, only, 1);
    bk_error err;
    size_t n = 0;
    check(bk_init_trainable(&skip.lm, &skip.opt, &n, &err), &err, "trainable (skip)");
    check(bk_init_trainable(&full.lm, &full.opt, &n, &err), &err, "trainable (full)");
    if (skip.lm.gpt.backward_from != lowest)
        fail_msg("%s: the backward starts at layer %d, expected %d", what, skip.lm.gpt.backward_from, lowest);
    full.lm.gpt.backward_from = 0; /* every layer, as without the rule */
    forward_backward(&skip);
    forward_backward(&full);
    int compared = 0;
    for (int i = 0; i < full.opt.n_groups; i++)
        if (!full.opt.groups[i].frozen) {
            assert_true(same_group(&full, &skip, i, what) > 0.0);
            compared++;
        }
    assert_true(compared > 0);
    for (int l = 0; l < 3; l++) {
        const int skipped = layer_rows_zero(&skip, norm, l, C), visited = !layer_rows_zero(&full, norm, l, C);
        assert_true(visited);
        if (skipped != (l < lowest))
            fail_msg("%s: layer %d's %s gradient is %s", what, l, norm, skipped ? "0" : "computed");
    }
    close_run(&skip);
    close_run(&full);
}

static void backward_stops_below_what_trains(void **state)
{
    (void)state;
    backward_case("llama", llama_model, "model.rms1w", 24, "\"last 1\"", 2, "cpu");
    backward_case("llama", llama_model, "model.rms1w", 24, "[1, 2]", 1, "cpu");
    backward_case("llama", llama_model, "model.rms1w", 24, "\"all\"", 0, "cpu");
    backward_case("gpt2", gpt2_model, "model.ln1w", 32, "[2]", 2, "cpu");
    backward_case("llama", llama_model, "model.rms1w", 24, "\"last 2\"", 1, "emulated");
    /* a model tensor that trains takes the backward to every layer */
    const scheme s = {"fire (layers)", "[[term]]\nplugin = \"fire\"\nlayers = \"last 1\"\n", "auto"};
    const char *also[] = {"train.trainable=[\"term.*\", \"model.rms2w\"]"};
    run r;
    open_run(&r, llama_model, &s, "cpu", also, 1);
    bk_error err;
    size_t n = 0;
    check(bk_init_trainable(&r.lm, &r.opt, &n, &err), &err, "trainable");
    assert_int_equal(r.lm.gpt.backward_from, 0);
    close_run(&r);
}

/* recompute's key: a boolean, documented, refused otherwise with the key named. */
static void recompute_key_is_checked(void **state)
{
    (void)state;
    bk_lm lm;
    bk_error err;
    char text[512];
    snprintf(text, sizeof text, "%s[train]\nlength = 8\n[run]\nrecompute = \"yes\"\n", gpt2_model);
    int rc = bk_lm_open_text(&lm, text, "bad.toml", ".", NULL, 0, &err);
    assert_int_not_equal(rc, 0);
    assert_non_null(strstr(err.message, "recompute"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(recompute_gives_the_same_bits),
        cmocka_unit_test(recompute_gives_the_same_bits_emulated),
        cmocka_unit_test(frozen_matrices_skip_their_gradients),
        cmocka_unit_test(backward_stops_below_what_trains),
        cmocka_unit_test(recompute_key_is_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
