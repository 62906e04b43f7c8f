/* Formula-first ABI 2 plugins (<biaskit/formula_plugin.h>): four plugins written with the header
 * (tests/plugins/fire_fp.c, window_fp.c, ssmax_fp.c, rope_pi_fp.c) against the built-in fire, window,
 * ssmax and rope (scaling = "pi"), both loaded through the engine's terms (tests/term_fixture.h: the same
 * experiment, the same [train] seed, so the same per-layer seeds):
 *   fire     theta of every layer, the grid table, coordinate() and coordinate_backward() bit for bit;
 *            table_backward bit for bit for W2, b2 (and nothing for c, m), within float rounding for W1
 *            and b1 (the header sums each head first, fire sums the heads inside its grid loop);
 *   window   mask() at every length, training or not, and into a smaller biaskit_mask;
 *   ssmax    theta, scale() and scale_backward() bit for bit;
 *   rope     rotary_ctx() bit for bit, static and dynamic factors.
 * Then the header itself: the author-line counts of those plugins (FIRE <= 60, window <= 20), array
 * options, frozen arrays, and the errors (each naming its key or what was expected). */
#include "term_fixture.h"

#include <biaskit/random.h>

#include <ctype.h>
#include <math.h>
#include <stdlib.h>

/* "[model] ... [train] length = L [[term]] plugin = ..." plus option lines. */
static void experiment(char *buf, size_t size, int heads, int d_head, int train_length, const char *plugin,
                       const char *options)
{
    snprintf(buf, size,
             "[model]\nlayers = 2\nheads = %d\ndim = %d\n[train]\nlength = %d\nseed = 7\n[[term]]\nplugin = \"%s\"\n%s",
             heads, heads * d_head, train_length, plugin, options ? options : "");
}

static void open_plugin(fixture *f, int heads, int d_head, int train_length, const char *plugin, const char *options)
{
    char text[2048];
    experiment(text, sizeof text, heads, d_head, train_length, plugin, options);
    open_ok(f, text);
}

static void expect_plugin_error(int heads, int train_length, const char *plugin, const char *options,
                                const char *needle1, const char *needle2)
{
    char text[2048];
    experiment(text, sizeof text, heads, 16, train_length, plugin, options);
    expect_term_error(text, needle1, needle2);
}

static void fill_normal(float *x, size_t n, uint64_t seed, double scale)
{
    biaskit_rng rng = biaskit_rng_seeded(seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * biaskit_rng_normal(&rng));
}

static void expect_bits(const float *a, const float *b, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
            fail_msg("%s[%zu]: built-in %.9g, formula-first %.9g", what, i, (double)a[i], (double)b[i]);
}

/* Tensor names equal but for case (option keys are lower case: W1 -> w1, L_multiplier -> l_multiplier). */
static int same_name(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
            return 0;
    return *a == *b;
}

static void expect_same_tensors(const bk_term *a, const bk_term *b, int32_t n)
{
    biaskit_tensor_info ia[8], ib[8];
    assert_int_equal(a->plugin->desc->param_tensors(a->instance, ia, 8), n);
    assert_int_equal(b->plugin->desc->param_tensors(b->instance, ib, 8), n);
    for (int32_t k = 0; k < n; k++) {
        if (!same_name(ia[k].name, ib[k].name))
            fail_msg("tensor %d: '%s' vs '%s'", (int)k, ia[k].name, ib[k].name);
        assert_int_equal(ia[k].offset, ib[k].offset);
        assert_int_equal(ia[k].rows, ib[k].rows);
        assert_int_equal(ia[k].cols, ib[k].cols);
    }
}

/* ---- FIRE ------------------------------------------------------------------------------------------ */

typedef struct fire_case {
    int heads, width, grid, train_length;
    const char *threshold; /* option text, "" for the default */
} fire_case;

/* The grid table, table_backward, coordinate and coordinate_backward of the two terms at theta. */
static void compare_fire_at(const bk_term_set *set, const bk_term *a, const bk_term *b, const float *theta, int width,
                            int layer, int *w1b1_exact, int *w1b1_total)
{
    const biaskit_plugin *da = a->plugin->desc, *db = b->plugin->desc;
    const int32_t H = a->n_heads, P = da->coordinate_points(a->instance);
    const size_t n = (size_t)H * (size_t)P, np = (size_t)a->n_params;
    assert_int_equal(db->coordinate_points(b->instance), P);
    float *ta = malloc(sizeof *ta * n), *tb = malloc(sizeof *tb * n), *g = malloc(sizeof *g * n);
    float *ga = malloc(sizeof *ga * np), *gb = malloc(sizeof *gb * np), *scale = calloc(np, sizeof *scale);
    biaskit_error pe = {0, ""};
    assert_int_equal(da->table(a->instance, theta, P, ta, &pe), BIASKIT_OK);
    assert_int_equal(db->table(b->instance, theta, P, tb, &pe), BIASKIT_OK);
    expect_bits(ta, tb, n, "grid table");

    /* table_backward into the same non-zero dtheta; the scale of each entry: backward of |dtable| */
    fill_normal(g, n, 100 + (uint64_t)layer, 1.0);
    fill_normal(ga, np, 200 + (uint64_t)layer, 0.1);
    memcpy(gb, ga, sizeof *ga * np);
    assert_int_equal(da->table_backward(a->instance, theta, P, g, ga, &pe), BIASKIT_OK);
    assert_int_equal(db->table_backward(b->instance, theta, P, g, gb, &pe), BIASKIT_OK);
    for (size_t k = 0; k < n; k++)
        g[k] = fabsf(g[k]);
    assert_int_equal(da->table_backward(a->instance, theta, P, g, scale, &pe), BIASKIT_OK);
    const size_t w1b1 = 2 * (size_t)width; /* W1, b1 come first; then W2, b2, c, m */
    for (size_t k = 0; k < np; k++) {
        if (k < w1b1) {
            (*w1b1_total)++;
            if (memcmp(&ga[k], &gb[k], sizeof(float)) == 0)
                (*w1b1_exact)++;
            else if (!(fabs((double)ga[k] - gb[k]) <= 1e-6 * (fabs((double)ga[k]) + scale[k])))
                fail_msg("table_backward, %s[%zu]: fire %.9g, fire_fp %.9g (scale %.3g)", k < (size_t)width ? "W1" : "b1",
                         k % (size_t)width, (double)ga[k], (double)gb[k], (double)scale[k]);
        } else if (memcmp(&ga[k], &gb[k], sizeof(float)) != 0) {
            fail_msg("table_backward, theta[%zu]: fire %.9g, fire_fp %.9g", k, (double)ga[k], (double)gb[k]);
        }
    }

    /* coordinates at the engine's contexts, then their gradient */
    static const int32_t lengths[] = {1, 7, 64, 300};
    for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++) {
        const int32_t D = lengths[l], R = lengths[l] + 3;
        for (int training = 0; training < 2; training++) {
            biaskit_context ctx = bk_term_context(set, layer % 2, D, training);
            float *pa = malloc(sizeof(float) * (size_t)(D + R)), *pb = malloc(sizeof(float) * (size_t)(D + R));
            assert_int_equal(da->coordinate(a->instance, theta, &ctx, D, R, pa, pa + D, &pe), BIASKIT_OK);
            assert_int_equal(db->coordinate(b->instance, theta, &ctx, D, R, pb, pb + D, &pe), BIASKIT_OK);
            expect_bits(pa, pb, (size_t)D, "phi");
            expect_bits(pa + D, pb + D, (size_t)R, "rscale");
            float *w = malloc(sizeof(float) * (size_t)(D + R));
            fill_normal(w, (size_t)(D + R), 300 + l, 1.0);
            fill_normal(ga, np, 400 + l, 0.1);
            memcpy(gb, ga, sizeof *ga * np);
            assert_int_equal(da->coordinate_backward(a->instance, theta, &ctx, D, R, w, w + D, ga, &pe), BIASKIT_OK);
            assert_int_equal(db->coordinate_backward(b->instance, theta, &ctx, D, R, w, w + D, gb, &pe), BIASKIT_OK);
            expect_bits(ga, gb, np, "coordinate_backward: dtheta");
            free(pa), free(pb), free(w);
        }
    }
    free(ta), free(tb), free(g), free(ga), free(gb), free(scale);
}

static void fire_same_as_builtin(void **state)
{
    (void)state;
    static const fire_case cases[] = {
        {3, 8, 65, 64, "threshold = 20.5\n"},
        {12, 32, 1025, 64, ""}, /* the defaults: threshold floor(64 / 2) */
        {4, 5, 2, 1, ""},       /* a two-point grid; threshold default 1 */
        {2, 1, 17, 512, "threshold = 512\n"},
    };
    int exact = 0, total = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const fire_case *fc = &cases[k];
        char oa[256], ob[256];
        snprintf(oa, sizeof oa, "width = %d\ngrid = %d\n%sc_init = 0.37\n", fc->width, fc->grid, fc->threshold);
        snprintf(ob, sizeof ob, "width = %d\ngrid = %d\n%sc = [0.37]\n", fc->width, fc->grid, fc->threshold);
        fixture fa, fb;
        open_plugin(&fa, fc->heads, 16, fc->train_length, "fire", oa);
        open_plugin(&fb, fc->heads, 16, fc->train_length, "fire_fp", ob);
        const bk_term *a = &fa.set.terms[0], *b = &fb.set.terms[0];
        assert_int_equal(a->caps, b->caps);
        assert_int_equal(a->plugin->desc->flags, b->plugin->desc->flags);
        assert_int_equal(a->n_params, b->n_params);
        assert_int_equal(a->n_copies, 2);
        assert_int_equal(b->n_copies, 2);
        expect_same_tensors(a, b, 6);
        const size_t np = (size_t)a->n_params;
        /* the engine's initial theta of each layer (the same seeds): bit for bit */
        for (int layer = 0; layer < 2; layer++) {
            expect_bits(bk_term_theta(a, layer), bk_term_theta(b, layer), np, "initial theta");
            compare_fire_at(&fa.set, a, b, bk_term_theta(a, layer), fc->width, layer, &exact, &total);
        }
        /* random MLPs, c and m of both signs (|m L| above and below the rows) */
        static const float cs[] = {0.1f, 0.37f, -0.2f, 2.0f}, ms[] = {1.0f, 1.23f, -0.9f, -1.7f};
        float *theta = malloc(sizeof *theta * np);
        for (int s = 0; s < 4; s++) {
            fill_normal(theta, np, 50 + (uint64_t)s, 0.8);
            theta[np - 2] = cs[s];
            theta[np - 1] = ms[s];
            compare_fire_at(&fa.set, a, b, theta, fc->width, s, &exact, &total);
        }
        free(theta);
        close_terms(&fa);
        close_terms(&fb);
    }
    print_message("fire vs fire_fp: %d of %d W1/b1 gradient entries bit-identical, the rest within 1e-6 relative\n",
                  exact, total);
}

/* learnable = false: the given arrays are the plugin's (no parameters), its table and coordinates fire's
 * at a theta holding the same values; nothing is added by the backwards. */
static void fire_frozen_arrays(void **state)
{
    (void)state;
    fixture fa, fb;
    open_plugin(&fa, 2, 16, 64, "fire", "width = 3\ngrid = 33\nthreshold = 10\n");
    open_plugin(&fb, 2, 16, 64, "fire_fp",
                "width = 3\ngrid = 33\nthreshold = 10\nlearnable = false\nw1 = [1.0, -2.0, 0.5]\nb1 = [0.25]\n"
                "w2 = [0.5, -1.0, 2.0, 1.5, 0.0, -0.25]\nb2 = [0.125, -0.5]\nc = [0.3]\nl_multiplier = [1.5]\n");
    const bk_term *a = &fa.set.terms[0], *b = &fb.set.terms[0];
    assert_int_equal(b->n_params, 0);
    assert_null(bk_term_theta(b, 0));
    const float theta[] = {1.0f, -2.0f, 0.5f, 0.25f, 0.25f, 0.25f, 0.5f, -1.0f, 2.0f, 1.5f, 0.0f, -0.25f,
                           0.125f, -0.5f, 0.3f, 1.5f};
    assert_int_equal(a->n_params, (int64_t)(sizeof theta / sizeof theta[0]));
    biaskit_error pe = {0, ""};
    float ta[2 * 33], tb[2 * 33];
    assert_int_equal(a->plugin->desc->table(a->instance, theta, 33, ta, &pe), BIASKIT_OK);
    assert_int_equal(b->plugin->desc->table(b->instance, NULL, 33, tb, &pe), BIASKIT_OK);
    expect_bits(ta, tb, 2 * 33, "frozen grid table");
    biaskit_context ctx = bk_term_context(&fb.set, 0, 40, 0);
    float pa[80], pb[80];
    assert_int_equal(a->plugin->desc->coordinate(a->instance, theta, &ctx, 40, 40, pa, pa + 40, &pe), BIASKIT_OK);
    assert_int_equal(b->plugin->desc->coordinate(b->instance, NULL, &ctx, 40, 40, pb, pb + 40, &pe), BIASKIT_OK);
    expect_bits(pa, pb, 80, "frozen coordinates");
    float sentinel[1] = {3.0f}, w[80];
    fill_normal(w, 80, 1, 1.0);
    assert_int_equal(b->plugin->desc->table_backward(b->instance, NULL, 33, tb, sentinel, &pe), BIASKIT_OK);
    assert_int_equal(b->plugin->desc->coordinate_backward(b->instance, NULL, &ctx, 40, 40, w, w + 40, sentinel, &pe),
                     BIASKIT_OK);
    assert_true(sentinel[0] == 3.0f);
    close_terms(&fa);
    close_terms(&fb);
}

/* Array options: 1 value fills every element, all of them are laid out as theta; tensors n x 1 and H x n. */
static void array_options(void **state)
{
    (void)state;
    fixture f;
    open_plugin(&f, 2, 16, 64, "fire_fp", "width = 3\nw1 = [0.5]\nw2 = [1, 2, 3, 4, 5, 6]\nb2 = [7, 8]\n");
    const bk_term *t = &f.set.terms[0];
    assert_int_equal(t->n_params, 3 + 3 + 6 + 2 + 2);
    for (int layer = 0; layer < 2; layer++) {
        const float *theta = bk_term_theta(t, layer);
        const float want_w1[3] = {0.5f, 0.5f, 0.5f}, want_w2[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        expect_bits(want_w1, theta, 3, "w1 = [0.5]");
        expect_bits(want_w2, theta + 6, 8, "w2, b2 as given");
        assert_true(theta[3] != theta[4]); /* b1 not given: drawn per element */
        assert_true(theta[14] == 0.1f && theta[15] == 1.0f);
    }
    biaskit_tensor_info info[6];
    assert_int_equal(t->plugin->desc->param_tensors(t->instance, info, 6), 6);
    assert_string_equal(info[0].name, "w1");
    assert_int_equal(info[0].rows, 3);
    assert_int_equal(info[0].cols, 1);
    assert_string_equal(info[2].name, "w2");
    assert_int_equal(info[2].offset, 6);
    assert_int_equal(info[2].rows, 2);
    assert_int_equal(info[2].cols, 3);
    assert_int_equal(info[3].rows, 2);
    assert_int_equal(info[4].rows, 1);
    /* a given value leaves the draws of the others alone: b1 as without w1 = [0.5] */
    fixture g;
    open_plugin(&g, 2, 16, 64, "fire_fp", "width = 3\n");
    expect_bits(bk_term_theta(&g.set.terms[0], 0) + 3, bk_term_theta(t, 0) + 3, 3, "b1's draws");
    close_terms(&g);
    close_terms(&f);
}

/* The errors of the coordinate kind, each naming its key (or what the call got). */
static void fire_errors(void **state)
{
    (void)state;
    expect_plugin_error(2, 64, "fire_fp", "grid = 1\n", "grid", "expected an integer in 2 .. 1048576");
    expect_plugin_error(2, 64, "fire_fp", "grid = 1\n", "exp.toml:", NULL);
    expect_plugin_error(2, 64, "fire_fp", "width = 0\n", "width", "expected an integer in [1, 4096]");
    expect_plugin_error(2, 64, "fire_fp", "width = 4\nw1 = [1, 2]\n", "w1",
                        "expected 1 value (every element) or 4 values (c.width = 4 here), got 2");
    expect_plugin_error(2, 64, "fire_fp", "width = 4\nw2 = [1, 2, 3, 4]\n", "w2",
                        "expected 1 value (every element) or 8 values (heads x c.width = 4 here), got 4");
    expect_plugin_error(2, 64, "fire_fp", "c = [1, 2]\n", "'c'", "expected 1 value (a scalar parameter)");
    expect_plugin_error(2, 64, "fire_fp", "learnable = false\nw1 = [1]\n", "b1",
                        "learnable = false needs a fixed value of 'b1' (its init rule is random)");
    expect_plugin_error(2, 64, "fire_fp", "threshold = -1\n", "threshold", "expected a finite value in [0, 1e+30]");

    fixture f;
    open_plugin(&f, 2, 16, 64, "fire_fp", "grid = 9\n");
    const bk_term *t = &f.set.terms[0];
    const biaskit_plugin *d = t->plugin->desc;
    float out[64], dth[256] = {0};
    biaskit_error pe = {0, ""};
    assert_int_equal(d->table(t->instance, bk_term_theta(t, 0), 10, out, &pe), BIASKIT_ERR_INVALID);
    assert_message_has(pe.message, "coordinate_points() = 9 values of u (option 'grid'), got 10");
    assert_int_equal(d->table(t->instance, NULL, 9, out, &pe), BIASKIT_ERR_INVALID);
    assert_message_has(pe.message, "parameters (theta), got NULL");
    assert_int_equal(d->table_backward(t->instance, bk_term_theta(t, 0), 8, out, dth, &pe), BIASKIT_ERR_INVALID);
    biaskit_context ctx = bk_term_context(&f.set, 0, 4, 1);
    assert_int_equal(d->coordinate(t->instance, bk_term_theta(t, 0), &ctx, 0, 4, out, out + 4, &pe),
                     BIASKIT_ERR_INVALID);
    assert_message_has(pe.message, "expected distances >= 1 and rows >= 1, got 0 and 4");
    assert_int_equal(d->coordinate_backward(t->instance, bk_term_theta(t, 0), &ctx, 4, 0, out, out, dth, &pe),
                     BIASKIT_ERR_INVALID);
    for (int k = 0; k < 256; k++)
        assert_true(dth[k] == 0.0f);
    close_terms(&f);
}

/* ---- window ---------------------------------------------------------------------------------------- */

static void window_same_as_builtin(void **state)
{
    (void)state;
    /* a cap needs a distance table to cap (the engine refuses it alone): an ALiBi term beside it */
    static const char *const options[] = {"", "window = 4\nsinks = 2\n",
                                          "window = 1\nsinks = 1\ndistance_cap = 50\n[[term]]\nplugin = \"alibi\"\n",
                                          "window = 100000\n", "sinks = 3\ndistance_cap = 7\n[[term]]\nplugin = \"alibi\"\n"};
    static const int trains[] = {96, 7};
    for (size_t o = 0; o < sizeof options / sizeof options[0]; o++)
        for (size_t tl = 0; tl < 2; tl++) {
            fixture fa, fb;
            open_plugin(&fa, 4, 16, trains[tl], "window", options[o]);
            open_plugin(&fb, 4, 16, trains[tl], "window_fp", options[o]);
            const bk_term *a = &fa.set.terms[0], *b = &fb.set.terms[0];
            assert_int_equal(a->caps, b->caps);
            assert_int_equal(b->n_params, 0);
            static const int32_t lengths[] = {1, 7, 96, 4096};
            for (size_t l = 0; l < 4; l++)
                for (int training = 0; training < 2; training++) {
                    biaskit_context ctx = bk_term_context(&fa.set, -1, lengths[l], training);
                    biaskit_mask ma = {sizeof ma, -5, -5, -5}, mb = {sizeof mb, -5, -5, -5};
                    biaskit_error pe = {0, ""};
                    assert_int_equal(a->plugin->desc->mask(a->instance, &ctx, &ma, &pe), BIASKIT_OK);
                    assert_int_equal(b->plugin->desc->mask(b->instance, &ctx, &mb, &pe), BIASKIT_OK);
                    if (memcmp(&ma, &mb, sizeof ma) != 0)
                        fail_msg("options \"%s\", train %d, length %d: window %d/%d, sinks %d/%d, cap %d/%d", options[o],
                                 trains[tl], lengths[l], ma.window, mb.window, ma.sinks, mb.sinks, ma.distance_cap,
                                 mb.distance_cap);
                    /* an engine whose biaskit_mask ends before distance_cap: that field untouched */
                    biaskit_mask sa = {offsetof(biaskit_mask, distance_cap), -5, -5, -5}, sb = sa;
                    int ra = a->plugin->desc->mask(a->instance, &ctx, &sa, &pe);
                    int rb = b->plugin->desc->mask(b->instance, &ctx, &sb, &pe);
                    assert_int_equal(ra, rb);
                    assert_int_equal(ra, ma.distance_cap > 0 ? BIASKIT_ERR_UNSUPPORTED : BIASKIT_OK);
                    assert_memory_equal(&sa, &sb, sizeof sa);
                    assert_int_equal(sb.distance_cap, -5);
                    biaskit_mask tiny = {offsetof(biaskit_mask, sinks), 0, 0, 0};
                    assert_int_equal(b->plugin->desc->mask(b->instance, &ctx, &tiny, &pe), BIASKIT_ERR_INVALID);
                    assert_int_equal(b->plugin->desc->mask(b->instance, &ctx, NULL, &pe), BIASKIT_ERR_INVALID);
                }
            close_terms(&fa);
            close_terms(&fb);
        }
    /* out of range, at the key */
    expect_plugin_error(4, 96, "window_fp", "sinks = -1\n", "sinks", "expected an integer in [0, 2147483647]");
    /* a mask the formula leaves invalid at create(): window unset and a geometry without a training length
     * (the engine never makes one; create() called directly with the term's options) */
    fixture f;
    open_plugin(&f, 4, 16, 96, "window_fp", "sinks = 2\n");
    const bk_term *t = &f.set.terms[0];
    biaskit_geometry geo = f.set.geometry;
    geo.train_length = 0;
    void *inst = NULL;
    biaskit_error pe = {0, ""};
    assert_int_equal(t->plugin->desc->create(bk_services(), &t->view, &geo, &inst, &pe), BIASKIT_ERR_CONFIG);
    assert_null(inst);
    assert_message_has(pe.message, "at the training length 0 (training) the mask is window 0, sinks 2, distance_cap 0: "
                                   "expected window >= 1");
    close_terms(&f);
}

/* ---- ssmax ------------------------------------------------------------------------------------------ */

static void ssmax_same_as_builtin(void **state)
{
    (void)state;
    static const char *const oa[] = {"", "s_init = 1.5\n", "s_init = -0.25\n"};
    static const char *const ob[] = {"", "s = [1.5]\n", "s = [-0.25]\n"};
    for (size_t o = 0; o < 3; o++) {
        fixture fa, fb;
        open_plugin(&fa, 5, 16, 64, "ssmax", oa[o]);
        open_plugin(&fb, 5, 16, 64, "ssmax_fp", ob[o]);
        const bk_term *a = &fa.set.terms[0], *b = &fb.set.terms[0];
        const biaskit_plugin *da = a->plugin->desc, *db = b->plugin->desc;
        assert_int_equal(a->caps, b->caps);
        assert_int_equal(da->flags, db->flags);
        assert_int_equal(a->n_params, 5);
        assert_int_equal(b->n_params, 5);
        expect_same_tensors(a, b, 1);
        float theta[5];
        for (int s = -2; s < 3; s++) {
            if (s < 0) /* the engine's initial theta of each layer */
                memcpy(theta, bk_term_theta(a, s + 2), sizeof theta);
            else
                fill_normal(theta, 5, 60 + (uint64_t)s, 1.0);
            if (s < 0)
                expect_bits(bk_term_theta(a, s + 2), bk_term_theta(b, s + 2), 5, "initial theta");
            static const int32_t rows[] = {1, 7, 4096};
            for (size_t r = 0; r < 3; r++) {
                const int32_t R = rows[r];
                biaskit_context ctx = bk_term_context(&fa.set, 0, R, 1);
                float *sa = malloc(sizeof(float) * 5 * (size_t)R), *sb = malloc(sizeof(float) * 5 * (size_t)R);
                biaskit_error pe = {0, ""};
                assert_int_equal(da->scale(a->instance, theta, &ctx, R, sa, &pe), BIASKIT_OK);
                assert_int_equal(db->scale(b->instance, theta, &ctx, R, sb, &pe), BIASKIT_OK);
                expect_bits(sa, sb, 5 * (size_t)R, "scale");
                float ga[5], gb[5];
                fill_normal(sa, 5 * (size_t)R, 70 + r, 1.0);
                fill_normal(ga, 5, 80 + r, 0.1);
                memcpy(gb, ga, sizeof ga);
                assert_int_equal(da->scale_backward(a->instance, theta, &ctx, R, sa, ga, &pe), BIASKIT_OK);
                assert_int_equal(db->scale_backward(b->instance, theta, &ctx, R, sa, gb, &pe), BIASKIT_OK);
                expect_bits(ga, gb, 5, "scale_backward");
                assert_int_equal(db->scale(b->instance, theta, &ctx, 0, sb, &pe), BIASKIT_ERR_INVALID);
                assert_message_has(pe.message, "expected rows >= 1, got 0");
                free(sa), free(sb);
            }
        }
        close_terms(&fa);
        close_terms(&fb);
    }
}

/* ---- rope, scaling = "pi" -------------------------------------------------------------------------- */

static void rope_pi_same_as_builtin(void **state)
{
    (void)state;
    static const struct {
        const char *rope, *formula;
    } cases[] = {
        {"scaling = \"pi\"\nfactor = 4\n", "factor = 4\n"},
        {"scaling = \"pi\"\nfactor = 2.5\nbase = 500000\n", "factor = 2.5\nbase = 500000\n"},
        {"scaling = \"pi\"\nfactor = 0\n", "factor = 0\n"},                                  /* dynamic */
        {"scaling = \"pi\"\nfactor = 0\noriginal_length = 100\n", "factor = 0\noriginal_length = 100\n"},
        {"", ""},                                                                             /* plain RoPE */
    };
    static const int d_heads[] = {16, 64, 2};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (size_t dh = 0; dh < 3; dh++) {
            fixture fa, fb;
            open_plugin(&fa, 2, d_heads[dh], 128, "rope", cases[k].rope);
            open_plugin(&fb, 2, d_heads[dh], 128, "rope_pi_fp", cases[k].formula);
            const bk_term *a = &fa.set.terms[0], *b = &fb.set.terms[0];
            assert_int_equal(a->caps, b->caps);
            static const int32_t lengths[] = {16, 128, 129, 256, 1000, 65536};
            for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
                for (int training = 0; training < 2; training++) {
                    biaskit_context ctx = bk_term_context(&fa.set, -1, lengths[l], training);
                    float fa_[32], fb_[32], ampa = 0.0f, ampb = 0.0f;
                    biaskit_error pe = {0, ""};
                    assert_int_equal(a->plugin->desc->rotary_ctx(a->instance, &ctx, fa_, &ampa, &pe), BIASKIT_OK);
                    assert_int_equal(b->plugin->desc->rotary_ctx(b->instance, &ctx, fb_, &ampb, &pe), BIASKIT_OK);
                    expect_bits(fa_, fb_, (size_t)d_heads[dh] / 2, "inv_freq");
                    assert_true(ampa == ampb && ampb == 1.0f);
                }
            close_terms(&fa);
            close_terms(&fb);
        }
    /* the rotary kind refuses an odd head width, and a factor out of range names its key */
    expect_plugin_error(2, 128, "rope_pi_fp", "factor = -1\n", "factor", "expected a finite value in [0, 1e+06]");
    /* the plugin's own setup (BIASKIT_ROTARY_PLUGIN_WITH), after the header's checks */
    expect_plugin_error(2, 128, "rope_pi_fp", "factor = 0.5\n", "factor", "expected s >= 1, or 0 (dynamic), got 0.5");
    char text[512];
    snprintf(text, sizeof text, "[model]\nlayers = 1\nheads = 3\ndim = 21\n[[term]]\nplugin = \"rope_pi_fp\"\n");
    expect_term_error(text, "the head width must be even, got 7", NULL);
}

/* ---- the author's lines --------------------------------------------------------------------------------
 * Counted as: the lines of the .c file that hold something once comments are removed, i.e. without blank
 * lines, comment lines and the comment part of a mixed line (a string holding a comment opener would be
 * miscounted; none of the plugins has one). */
static int author_lines(const char *file)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/plugins/%s", BK_TEST_SOURCE_DIR, file);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot read %s", path);
    int lines = 0, in_comment = 0, has_code = 0, c, prev = 0;
    while ((c = fgetc(f)) != EOF) {
        if (in_comment) {
            if (prev == '*' && c == '/')
                in_comment = 0, c = 0;
        } else if (prev == '/' && c == '*') {
            in_comment = 1, has_code = has_code > 1 ? has_code : 0, c = 0;
        } else if (prev == '/' && c == '/') {
            while ((c = fgetc(f)) != EOF && c != '\n')
                ;
            if (has_code > 1)
                lines++;
            has_code = 0, prev = 0;
            continue;
        } else if (c != '\n' && !isspace(c)) {
            /* a '/' may open a comment: count it only when the next character does not */
            has_code = c == '/' ? (has_code > 1 ? has_code : 1) : 2;
        }
        if (c == '\n') {
            if (has_code > 0)
                lines++;
            has_code = 0;
        }
        prev = c;
    }
    if (has_code > 0)
        lines++;
    fclose(f);
    return lines;
}

static void author_line_counts(void **state)
{
    (void)state;
    const int fire = author_lines("fire_fp.c"), window = author_lines("window_fp.c");
    const int ssmax = author_lines("ssmax_fp.c"), rope = author_lines("rope_pi_fp.c");
    print_message("author lines (no blanks, no comments): fire_fp.c %d, window_fp.c %d, ssmax_fp.c %d, rope_pi_fp.c %d\n",
                  fire, window, ssmax, rope);
    assert_true(fire > 20 && fire <= 60);
    assert_true(window > 5 && window <= 20);
    assert_true(ssmax > 3 && ssmax <= 20);
    assert_true(rope > 5 && rope <= 25); /* 14 for the formula, 8 for its optional setup (the _WITH form) */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fire_same_as_builtin),
        cmocka_unit_test(fire_frozen_arrays),
        cmocka_unit_test(array_options),
        cmocka_unit_test(fire_errors),
        cmocka_unit_test(window_same_as_builtin),
        cmocka_unit_test(ssmax_same_as_builtin),
        cmocka_unit_test(rope_pi_same_as_builtin),
        cmocka_unit_test(author_line_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
