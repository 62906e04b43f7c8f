/* The t5 plugin: HF T5 bucketing against the test vectors of plugins/t5/README.md, the
 * table after param_init, the gradient (naive scatter, central finite differences, determinism), the
 * initialisation, bad options, and long tables. The plugin is loaded through the engine. */
#include "term_fixture.h"

#include "bias/terms.h"

#include "../plugins/t5/t5_math.h"

#include <math.h>
#include <stdlib.h>

static const biaskit_plugin *desc_of(const fixture *f)
{
    return f->set.terms[0].plugin->desc;
}

/* The bucketing shape that the experiment texts of a test set up. */
static bk_t5_shape shape(int32_t heads, int32_t buckets, int32_t max_distance, int bidirectional, double scale)
{
    return (bk_t5_shape){heads, buckets, max_distance, bidirectional, scale};
}

/* A fixed pseudo-random sequence in [-1, 1) (no dependency on the engine's RNG). */
static double lcg(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*state >> 11) * 0x1.0p-52 - 1.0;
}

/* ---------------------------------------------------------------------------------------------
 * Bucketing
 * ------------------------------------------------------------------------------------------- */

static void causal_test_vectors(void **state)
{
    (void)state;
    /* plugins/t5/README.md, test vectors: causal, 32 buckets, max_distance 128, distance -> bucket */
    static const int32_t v[][2] = {{0, 0},    {1, 1},    {15, 15},  {16, 16},  {17, 16},  {18, 16},   {19, 17},
                                   {20, 17},  {22, 18},  {23, 18},  {24, 19},  {25, 19},  {32, 21},   {45, 23},
                                   {64, 26},  {90, 29},  {100, 30}, {127, 31}, {128, 31}, {1000, 31}};
    bk_t5_shape s = shape(1, 32, 128, 0, 1.0);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        int32_t got = bk_t5_relative_position_bucket(-v[i][0], 0, 32, 128);
        if (got != v[i][1])
            fail_msg("causal distance %d: bucket %d, want %d", v[i][0], got, v[i][1]);
        assert_int_equal(bk_t5_bucket(&s, v[i][0]), v[i][1]);
    }
    /* future keys (relative position > 0) share bucket 0 in the causal bucketing */
    assert_int_equal(bk_t5_relative_position_bucket(1, 0, 32, 128), 0);
    assert_int_equal(bk_t5_relative_position_bucket(500, 0, 32, 128), 0);
}

static void bidirectional_test_vectors(void **state)
{
    (void)state;
    /* plugins/t5/README.md, test vectors: bidirectional, 32 buckets, 128, (key - query) -> bucket */
    static const int32_t v[][2] = {{-200, 15}, {-128, 15}, {-8, 8},  {-1, 1},   {0, 0},    {1, 17},
                                   {7, 23},    {8, 24},    {12, 25}, {127, 31}, {500, 31}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        int32_t got = bk_t5_relative_position_bucket(v[i][0], 1, 32, 128);
        if (got != v[i][1])
            fail_msg("bidirectional relative position %d: bucket %d, want %d", v[i][0], got, v[i][1]);
    }
    /* the causal distance d of a bidirectional term is relative position -d: the lower half */
    bk_t5_shape s = shape(1, 32, 128, 1, 1.0);
    assert_int_equal(bk_t5_bucket(&s, 8), 8);
    assert_int_equal(bk_t5_bucket(&s, 200), 15);
}

static void first_distance_of_each_bucket(void **state)
{
    (void)state;
    /* plugins/t5/README.md: 0..16 -> buckets 0..16, then the first distance of buckets 17..31 */
    int32_t first[32];
    for (int b = 0; b <= 16; b++)
        first[b] = b;
    static const int32_t later[15] = {19, 21, 24, 27, 31, 35, 40, 46, 52, 59, 67, 77, 87, 99, 113};
    for (int b = 17; b < 32; b++)
        first[b] = later[b - 17];
    bk_t5_shape s = shape(1, 32, 128, 0, 1.0);
    for (int b = 0; b < 32; b++) {
        assert_int_equal(bk_t5_bucket(&s, first[b]), b);
        if (b > 0)
            assert_int_equal(bk_t5_bucket(&s, first[b] - 1), b - 1);
        int32_t got = bk_t5_first_distance(&s, b, 65536);
        if (got != first[b])
            fail_msg("first distance of bucket %d: %d, want %d", b, got, first[b]);
    }
    /* no distance reaches a bucket past the last one; a short table ends before late buckets */
    assert_int_equal(bk_t5_first_distance(&s, 32, 65536), 65536);
    assert_int_equal(bk_t5_first_distance(&s, 31, 100), 100);
    /* every distance from 113 on shares bucket 31: the bias is constant beyond it */
    for (int32_t d = 113; d < 70000; d += 7)
        assert_int_equal(bk_t5_bucket(&s, d), 31);
}

/* Buckets never decrease with distance (the CUDA gradient relies on it), and the binary search
 * agrees with a linear scan, for several shapes. */
static void buckets_are_monotone(void **state)
{
    (void)state;
    const bk_t5_shape shapes[] = {shape(1, 32, 128, 0, 1), shape(1, 32, 128, 1, 1), shape(1, 2, 2, 0, 1),
                                  shape(1, 64, 40, 0, 1),  shape(1, 8, 5, 1, 1),    shape(1, 256, 100000, 0, 1),
                                  shape(1, 33, 17, 0, 1)};
    const int32_t D = 1 << 17;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const bk_t5_shape *s = &shapes[k];
        int32_t reachable = s->bidirectional ? s->buckets / 2 : s->buckets;
        int32_t prev = 0;
        for (int32_t d = 0; d < D; d++) {
            int32_t b = bk_t5_bucket(s, d);
            if (b < prev || b >= reachable)
                fail_msg("shape %zu: bucket(%d) = %d after %d (reachable 0..%d)", k, d, b, prev, reachable - 1);
            for (int32_t c = prev + 1; d > 0 && c <= b; c++) /* buckets first reached at d */
                if (bk_t5_first_distance(s, c, D) != d)
                    fail_msg("shape %zu: first distance of bucket %d: %d, linear scan %d", k, c,
                             bk_t5_first_distance(s, c, D), d);
            prev = b;
        }
    }
}

/* Against the formula in double precision wherever float rounding cannot matter (the double
 * quotient is not within 1e-4 of an integer), for distances up to 3 max_distance. */
static void buckets_match_the_formula(void **state)
{
    (void)state;
    const int32_t cfg[][3] = {{32, 128, 0}, {32, 128, 1}, {16, 64, 0}, {64, 1000, 0}, {48, 300, 1}, {10, 6, 0}};
    for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
        int32_t buckets = cfg[k][0], max_distance = cfg[k][1], bi = cfg[k][2];
        for (int32_t rel = -3 * max_distance; rel <= 3 * max_distance; rel++) {
            int32_t nb = bi ? buckets / 2 : buckets, ret = bi && rel > 0 ? nb : 0;
            int32_t n = bi ? abs(rel) : (rel < 0 ? -rel : 0), me = nb / 2, want;
            if (n < me) {
                want = ret + n;
            } else {
                double v = log((double)n / me) / log((double)max_distance / me) * (nb - me);
                if (fabs(v - floor(v + 0.5)) < 1e-4)
                    continue;
                want = ret + (me + (int32_t)v < nb - 1 ? me + (int32_t)v : nb - 1);
            }
            int32_t got = bk_t5_relative_position_bucket(rel, bi, buckets, max_distance);
            if (got != want)
                fail_msg("buckets %d, max_distance %d, bidirectional %d, relative position %d: %d, want %d", buckets,
                         max_distance, bi, rel, got, want);
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * Through the engine
 * ------------------------------------------------------------------------------------------- */

static void parameters_and_table(void **state)
{
    (void)state;
    fixture f;
    open_ok(&f, "[model]\nlayers = 3\nheads = 4\ndim = 32\n[train]\nseed = 7\n"
                "[[term]]\nplugin = \"t5\"\nscale = 2.5\n");
    const bk_term *t = &f.set.terms[0];
    assert_int_equal(t->n_params, 4 * 32);
    assert_int_equal(t->per_layer, 0); /* one table shared by all layers, as in T5 and KERPLE */
    assert_int_equal(t->n_copies, 1);
    assert_ptr_equal(bk_term_theta(t, 0), bk_term_theta(t, 2));
    biaskit_tensor_info info[2];
    assert_int_equal(desc_of(&f)->param_tensors(t->instance, info, 2), 1);
    assert_string_equal(info[0].name, "buckets");
    assert_int_equal(info[0].offset, 0);
    assert_int_equal(info[0].rows, 4);
    assert_int_equal(info[0].cols, 32);

    const float *w = bk_term_theta(t, 0);
    int nonzero = 0;
    for (int i = 0; i < 4 * 32; i++)
        nonzero += w[i] != 0.0f;
    assert_true(nonzero == 4 * 32);

    enum { D = 300 };
    float table[4 * D];
    bk_error err;
    assert_int_equal(bk_term_table(t, 1, D, table, &err), BK_OK);
    bk_t5_shape s = shape(4, 32, 128, 0, 2.5);
    for (int h = 0; h < 4; h++)
        for (int d = 0; d < D; d++) {
            float want = 2.5f * w[h * 32 + bk_t5_bucket(&s, d)];
            if (table[h * D + d] != want)
                fail_msg("head %d distance %d: %g, want %g", h, d, (double)table[h * D + d], (double)want);
        }
    /* distances 0 .. 15 each have their own bucket, 16..18 share one, 113.. share the last */
    assert_true(table[0] == 2.5f * w[0] && table[15] == 2.5f * w[15]);
    assert_true(table[16] == table[18] && table[18] != table[19]);
    assert_true(table[113] == table[D - 1] && table[113] == 2.5f * w[31]);
    close_terms(&f);

    /* per_layer = true: one table per layer, initialised from different seeds */
    open_ok(&f, "[model]\nlayers = 3\nheads = 4\ndim = 32\n[[term]]\nplugin = \"t5\"\nper_layer = true\n");
    t = &f.set.terms[0];
    assert_int_equal(t->n_copies, 3);
    assert_true(memcmp(bk_term_theta(t, 0), bk_term_theta(t, 1), sizeof(float) * 4 * 32) != 0);
    close_terms(&f);
}

static void bidirectional_table_uses_the_lower_half(void **state)
{
    (void)state;
    fixture f;
    open_ok(&f, "[model]\nheads = 2\ndim = 16\n[[term]]\nplugin = \"t5\"\nbidirectional = true\n");
    const bk_term *t = &f.set.terms[0];
    assert_int_equal(t->n_params, 2 * 32);
    const float *w = bk_term_theta(t, 0);
    enum { D = 400 };
    float table[2 * D];
    bk_error err;
    assert_int_equal(bk_term_table(t, 0, D, table, &err), BK_OK);
    for (int h = 0; h < 2; h++)
        for (int d = 0; d < D; d++)
            assert_true(table[h * D + d] == w[h * 32 + bk_t5_relative_position_bucket(-d, 1, 32, 128)]);
    assert_true(table[D + 8] == w[32 + 8] && table[D + 200] == w[32 + 15]);

    /* the upper half (keys after the query) is never used by a causal model: zero gradient */
    float dtable[2 * D], dtheta[2 * 32] = {0};
    for (int i = 0; i < 2 * D; i++)
        dtable[i] = 1.0f;
    biaskit_error pe = {0};
    assert_int_equal(desc_of(&f)->table_backward(t->instance, w, D, dtable, dtheta, &pe), BIASKIT_OK);
    for (int h = 0; h < 2; h++) {
        double total = 0;
        for (int b = 0; b < 32; b++) {
            total += dtheta[h * 32 + b];
            if (b >= 16)
                assert_true(dtheta[h * 32 + b] == 0.0f);
        }
        assert_true(total == D); /* every distance lands in exactly one bucket */
        assert_true(dtheta[h * 32 + 15] >= D - 128); /* every d >= max_distance is in bucket 15 */
    }
    close_terms(&f);
}

static void initialisation(void **state)
{
    (void)state;
    /* xavier-normal by default: std sqrt(2 / (buckets + heads)) */
    const struct {
        const char *text;
        int n;
        double std;
    } cases[] = {
        {"[model]\nheads = 16\ndim = 64\n[[term]]\nplugin = \"t5\"\nbuckets = 256\nmax_distance = 4096\n", 16 * 256,
         0.0857492925712544 /* sqrt(2/272) */},
        {"[model]\nheads = 12\ndim = 48\n[[term]]\nplugin = \"t5\"\nbuckets = 300\nmax_distance = 1000\n"
         "init_std = 0.5\n",
         12 * 300, 0.5},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fixture f;
        open_ok(&f, cases[c].text);
        const float *w = bk_term_theta(&f.set.terms[0], 0);
        assert_int_equal(f.set.terms[0].n_params, cases[c].n);
        double sum = 0, sq = 0;
        for (int i = 0; i < cases[c].n; i++) {
            sum += w[i];
            sq += (double)w[i] * w[i];
        }
        double mean = sum / cases[c].n, sd = sqrt(sq / cases[c].n - mean * mean);
        if (fabs(mean) > 4 * cases[c].std / sqrt(cases[c].n) || fabs(sd / cases[c].std - 1) > 0.06)
            fail_msg("case %zu: mean %g, std %g; want 0, %g", c, mean, sd, cases[c].std);
        close_terms(&f);
    }
}

static void initialisation_is_deterministic(void **state)
{
    (void)state;
    const char *text = "[model]\nheads = 4\ndim = 32\n[train]\nseed = 11\n[[term]]\nplugin = \"t5\"\n";
    fixture a, b, c;
    open_ok(&a, text);
    open_ok(&b, text);
    open_ok(&c, "[model]\nheads = 4\ndim = 32\n[train]\nseed = 12\n[[term]]\nplugin = \"t5\"\n");
    assert_memory_equal(bk_term_theta(&a.set.terms[0], 0), bk_term_theta(&b.set.terms[0], 0), sizeof(float) * 128);
    assert_true(memcmp(bk_term_theta(&a.set.terms[0], 0), bk_term_theta(&c.set.terms[0], 0), sizeof(float) * 128) != 0);
    /* param_init itself: same seed, same values */
    float x[128], y[128];
    biaskit_error pe = {0};
    assert_int_equal(desc_of(&a)->param_init(a.set.terms[0].instance, x, 99, &pe), BIASKIT_OK);
    assert_int_equal(desc_of(&a)->param_init(a.set.terms[0].instance, y, 99, &pe), BIASKIT_OK);
    assert_memory_equal(x, y, sizeof x);
    close_terms(&a);
    close_terms(&b);
    close_terms(&c);
}

/* L(theta) = sum over h, d of g[h][d] * T[h][d], in double. */
static double loss(const fixture *f, const float *theta, int32_t D, const float *g, float *table)
{
    biaskit_error pe = {0};
    const bk_term *t = &f->set.terms[0];
    assert_int_equal(desc_of(f)->table(t->instance, theta, D, table, &pe), BIASKIT_OK);
    double l = 0;
    for (int32_t i = 0; i < t->n_heads * D; i++)
        l += (double)g[i] * (double)table[i];
    return l;
}

static void gradient(void **state)
{
    (void)state;
    enum { H = 3, NB = 16, D = 200, P = H * NB };
    const double scale = 1.7;
    fixture f;
    open_ok(&f, "[model]\nheads = 3\ndim = 24\n[[term]]\nplugin = \"t5\"\nbuckets = 16\nmax_distance = 50\n"
                "scale = 1.7\n");
    const bk_term *t = &f.set.terms[0];
    const biaskit_plugin *d = desc_of(&f);
    assert_int_equal(t->n_params, P);
    float theta[P], g[H * D], table[H * D];
    memcpy(theta, bk_term_theta(t, 0), sizeof theta);
    uint64_t rng = 42;
    for (int i = 0; i < H * D; i++)
        g[i] = (float)lcg(&rng);

    /* the plugin's gradient, accumulated onto a non-zero dtheta */
    float grad[P], again[P];
    for (int i = 0; i < P; i++)
        grad[i] = again[i] = 0.25f;
    biaskit_error pe = {0};
    assert_int_equal(d->table_backward(t->instance, theta, D, g, grad, &pe), BIASKIT_OK);
    assert_int_equal(d->table_backward(t->instance, theta, D, g, again, &pe), BIASKIT_OK);
    assert_memory_equal(grad, again, sizeof grad); /* deterministic: bit-identical */

    /* a naive scatter, written independently: bucket per (h, d), double sums, d ascending */
    bk_t5_shape s = shape(H, NB, 50, 0, scale);
    int touched[NB] = {0};
    for (int h = 0; h < H; h++)
        for (int b = 0; b < NB; b++) {
            double acc = 0;
            for (int dd = 0; dd < D; dd++)
                if (bk_t5_relative_position_bucket(-dd, 0, NB, 50) == b) {
                    acc += g[h * D + dd];
                    touched[b] = 1;
                }
            float want = 0.25f + (float)(scale * acc);
            if (fabsf(grad[h * NB + b] - want) > 1e-6f * (1.0f + fabsf(want)))
                fail_msg("dtheta[%d][%d] = %.9g, naive scatter %.9g", h, b, (double)grad[h * NB + b], (double)want);
        }
    for (int b = 0; b < NB; b++)
        assert_true(touched[b]); /* D = 200 > max_distance reaches every bucket */
    assert_int_equal(bk_t5_bucket(&s, D - 1), NB - 1);

    /* central finite differences of L in double */
    for (int k = 0; k < P; k++) {
        float saved = theta[k], hi = saved + 1e-2f, lo = saved - 1e-2f;
        theta[k] = hi;
        double lhi = loss(&f, theta, D, g, table);
        theta[k] = lo;
        double llo = loss(&f, theta, D, g, table);
        theta[k] = saved;
        double fd = (lhi - llo) / ((double)hi - (double)lo), an = (double)grad[k] - 0.25;
        if (fabs(fd - an) > 1e-4 * (1.0 + fabs(fd)))
            fail_msg("parameter %d: finite difference %.9g, table_backward %.9g", k, fd, an);
    }
    /* a non-positive length is refused with a message */
    assert_int_equal(d->table_backward(t->instance, theta, 0, g, grad, &pe), BIASKIT_ERR_INVALID);
    assert_message_has(pe.message, "distances must be positive, got 0");
    close_terms(&f);
}

static void long_tables_are_finite(void **state)
{
    (void)state;
    enum { D = 65536 };
    const struct {
        const char *text;
        bk_t5_shape shape;
    } cases[] = {
        {"[model]\nheads = 4\ndim = 32\n[[term]]\nplugin = \"t5\"\nscale = 5.656854249492381\n",
         {4, 32, 128, 0, 5.656854249492381}},
        {"[model]\nheads = 4\ndim = 32\n[[term]]\nplugin = \"t5\"\nbidirectional = true\nbuckets = 64\n",
         {4, 64, 128, 1, 1.0}},
        {"[model]\nheads = 4\ndim = 32\n[[term]]\nplugin = \"t5\"\nbuckets = 8\nmax_distance = 2147483647\n",
         {4, 8, INT32_MAX, 0, 1.0}},
    };
    float *table = malloc(sizeof *table * 4 * D), *dtable = malloc(sizeof *dtable * 4 * D);
    assert_non_null(table);
    assert_non_null(dtable);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        fixture f;
        open_ok(&f, cases[c].text);
        bk_error err;
        const bk_term *t = &f.set.terms[0];
        const bk_t5_shape *s = &cases[c].shape;
        assert_int_equal(t->n_params, 4 * s->buckets);
        if (bk_term_table(t, 0, D, table, &err) != BK_OK) /* the engine checks that every value is finite */
            fail_msg("case %zu: %s", c, err.message);
        const float *w = bk_term_theta(t, 0);
        for (int h = 0; h < 4; h++)
            for (int32_t d = D - 5; d < D; d++)
                assert_true(table[(size_t)h * D + (size_t)d] ==
                            (float)s->scale * w[h * s->buckets + bk_t5_bucket(s, d)]);
        for (size_t i = 0; i < (size_t)4 * D; i++)
            dtable[i] = 1e-3f;
        float *dtheta = calloc((size_t)t->n_params, sizeof *dtheta);
        assert_non_null(dtheta);
        biaskit_error pe = {0};
        assert_int_equal(desc_of(&f)->table_backward(t->instance, w, D, dtable, dtheta, &pe), BIASKIT_OK);
        double total = 0;
        for (int64_t i = 0; i < t->n_params; i++) {
            assert_true(isfinite(dtheta[i]));
            total += dtheta[i];
        }
        /* every distance lands in one bucket: the gradient sums to scale * 4 * D * 1e-3 */
        assert_float_equal(total, s->scale * 4 * D * (double)1e-3f, 1e-3 * fabs(s->scale));
        free(dtheta);
        close_terms(&f);
    }
    free(table);
    free(dtable);
}

static void bad_options(void **state)
{
    (void)state;
    expect_term_error("[[term]]\nplugin = \"t5\"\nbuckets = 1\n", "exp.toml:3:11: ",
                 "option 'buckets': expected an integer in 2 .. 65536, got 1");
    expect_term_error("[[term]]\nplugin = \"t5\"\nbuckets = 100000\n", "option 'buckets'", "got 100000");
    expect_term_error("[[term]]\nplugin = \"t5\"\nbidirectional = true\nbuckets = 31\n", "exp.toml:4:11: ",
                 "option 'buckets': with bidirectional = true, expected an even integer in 4 .. 65536");
    expect_term_error("[[term]]\nplugin = \"t5\"\nbidirectional = true\nbuckets = 2\n", "option 'buckets'", "got 2");
    expect_term_error("[[term]]\nplugin = \"t5\"\nmax_distance = 16\n", "exp.toml:3:16: ",
                 "option 'max_distance': expected an integer greater than the 16 exact buckets (buckets/2)");
    expect_term_error("[[term]]\nplugin = \"t5\"\nbidirectional = true\nmax_distance = 8\n", "option 'max_distance'",
                 "greater than the 8 exact buckets (buckets/4 when bidirectional)");
    expect_term_error("[[term]]\nplugin = \"t5\"\nmax_distance = 4294967296\n", "option 'max_distance'",
                 "at most 2147483647");
    expect_term_error("[[term]]\nplugin = \"t5\"\nscale = inf\n", "option 'scale'", "finite");
    expect_term_error("[[term]]\nplugin = \"t5\"\ninit_std = -0.1\n", "exp.toml:3:12: ",
                 "option 'init_std': expected a finite std >= 0");
    expect_term_error("[[term]]\nplugin = \"t5\"\nbucket = 16\n", "unknown key 'bucket'", "did you mean 'buckets'");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(causal_test_vectors),
        cmocka_unit_test(bidirectional_test_vectors),
        cmocka_unit_test(first_distance_of_each_bucket),
        cmocka_unit_test(buckets_are_monotone),
        cmocka_unit_test(buckets_match_the_formula),
        cmocka_unit_test(parameters_and_table),
        cmocka_unit_test(bidirectional_table_uses_the_lower_half),
        cmocka_unit_test(initialisation),
        cmocka_unit_test(initialisation_is_deterministic),
        cmocka_unit_test(gradient),
        cmocka_unit_test(long_tables_are_finite),
        cmocka_unit_test(bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
