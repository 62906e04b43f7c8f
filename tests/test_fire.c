/* The FIRE plugin (plugins/fire), called through its descriptor (tests/plugin_direct.h):
 *  - the descriptor: capability, per-layer flag, parameter tensors, grid size, no projection;
 *  - initialisation: nn.Linear's ranges, c_init, L_multiplier = 1, the SDK's draws in theta's order;
 *  - the check values of plugins/fire/README.md (width-2 MLP: u, b_0, b_1, du/dc, du/dm, db/du) through
 *    coordinate(), coordinate_backward(), table() + the engine's interpolation, and fire_math.h;
 *  - the default threshold (floor(L_train / 2)) and a given one;
 *  - table_backward and coordinate_backward against central differences (of fire_math.h in double and of
 *    the plugin's own float outputs), c and L_multiplier of both signs, away from ReLU kinks and from
 *    the row i = |L_multiplier L_init|; accumulation and determinism;
 *  - u(i, i) = phi[i] rscale[i] <= 1 in float where psi is large;
 *  - refused options and calls, each naming the key;
 *  - PyTorch: the exact module's bias and gradients by autograd against the engine's route (grid,
 *    interpolation, chain rule, the plugin's two backwards), tests/reference/fire_reference.py; skipped
 *    without torch. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include "plugin_direct.h"

#include "io/safetensors.h"
#include "model/bias_math.h"

#include "../plugins/fire/fire_math.h"

#include <biaskit/random.h>

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

static void expect_near(double got, double want, double rel, double abs_tol, const char *what)
{
    if (!(fabs(got - want) <= rel * fabs(want) + abs_tol))
        fail_msg("%s: got %.9g, want %.9g", what, got, want);
}

static void experiment(char *buf, size_t size, int heads, int train_length, const char *options)
{
    snprintf(buf, size, "[model]\nlayers = 2\nheads = %d\ndim = %d\n[train]\nlength = %d\n[[term]]\nplugin = \"fire\"\n%s",
             heads, heads * 8, train_length, options ? options : "");
}

static void get_coordinate(const direct_plugin *p, const float *theta, int32_t distances, int32_t rows, float *phi,
                           float *rscale)
{
    biaskit_context ctx = direct_context(p, rows, 1);
    biaskit_error pe = {0, ""};
    if (p->desc->coordinate(p->inst, theta, &ctx, distances, rows, phi, rscale, &pe) != BIASKIT_OK)
        fail_msg("coordinate(): %s", pe.message);
}

static void get_table(const direct_plugin *p, const float *theta, float *grid)
{
    biaskit_error pe = {0, ""};
    if (p->desc->table(p->inst, theta, p->desc->coordinate_points(p->inst), grid, &pe) != BIASKIT_OK)
        fail_msg("table(): %s", pe.message);
}

/* ---- descriptor and initialisation ---------------------------------------------------------------- */

static void descriptor_and_tensors(void **state)
{
    (void)state;
    char text[512];
    direct_plugin p;
    experiment(text, sizeof text, 12, 256, NULL);
    direct_open_ok(&p, "fire", text);
    const biaskit_plugin *d = p.desc;
    assert_int_equal(d->capabilities, BIASKIT_CAP_COORDINATE);
    assert_int_equal(d->flags, BIASKIT_FLAG_PER_LAYER);
    assert_null(d->param_project); /* c is not clamped: the module takes |c x| */
    assert_int_equal(d->coordinate_points(p.inst), BK_FIRE_DEFAULT_GRID);
    assert_int_equal(d->param_count(p.inst), 2 * 32 + 12 * 32 + 12 + 2);
    biaskit_tensor_info t[8];
    assert_int_equal(d->param_tensors(p.inst, t, 0), 6);
    assert_int_equal(d->param_tensors(p.inst, t, 8), 6);
    const struct {
        const char *name;
        int64_t offset;
        int32_t rows, cols;
    } want[6] = {{"W1", 0, 32, 1}, {"b1", 32, 32, 1}, {"W2", 64, 12, 32},
                 {"b2", 448, 12, 1}, {"c", 460, 1, 1}, {"L_multiplier", 461, 1, 1}};
    for (int k = 0; k < 6; k++) {
        assert_string_equal(t[k].name, want[k].name);
        assert_int_equal(t[k].offset, want[k].offset);
        assert_int_equal(t[k].rows, want[k].rows);
        assert_int_equal(t[k].cols, want[k].cols);
    }
    direct_close(&p);

    experiment(text, sizeof text, 3, 256, "width = 5\ngrid = 17\n");
    direct_open_ok(&p, "fire", text);
    assert_int_equal(p.desc->coordinate_points(p.inst), 17);
    assert_int_equal(p.desc->param_count(p.inst), 2 * 5 + 3 * 5 + 3 + 2);
    direct_close(&p);
}

static void initialisation(void **state)
{
    (void)state;
    enum { H = 4, W = 64 };
    char text[512];
    direct_plugin p;
    experiment(text, sizeof text, H, 256, "width = 64\nc_init = 0.25\n");
    direct_open_ok(&p, "fire", text);
    int64_t n = p.desc->param_count(p.inst);
    bk_fire_layout lay = bk_fire_layout_of(H, W);
    assert_int_equal(n, lay.count);
    float *a = malloc(sizeof *a * (size_t)n), *b = malloc(sizeof *b * (size_t)n), *c = malloc(sizeof *c * (size_t)n);
    biaskit_error pe = {0, ""};
    assert_int_equal(p.desc->param_init(p.inst, a, 42, &pe), BIASKIT_OK);
    assert_int_equal(p.desc->param_init(p.inst, b, 42, &pe), BIASKIT_OK);
    assert_int_equal(p.desc->param_init(p.inst, c, 43, &pe), BIASKIT_OK);
    assert_memory_equal(a, b, sizeof *a * (size_t)n);
    assert_memory_not_equal(a, c, sizeof *a * (size_t)lay.c);
    biaskit_rng rng = biaskit_rng_seeded(42);
    double a2 = 1.0 / sqrt((double)W);
    for (int64_t k = 0; k < lay.c; k++) { /* one SDK draw per element, W1, b1, W2, b2 */
        double bound = k < lay.w2 ? 1.0 : a2;
        float want = (float)(bound * (2.0 * biaskit_rng_uniform(&rng) - 1.0));
        if (a[k] != want)
            fail_msg("theta[%lld]: %.9g, want %.9g", (long long)k, (double)a[k], (double)want);
        if (!(fabs(a[k]) <= bound))
            fail_msg("theta[%lld] = %g outside [-%g, %g]", (long long)k, (double)a[k], bound, bound);
    }
    /* the draws cover their ranges */
    double lo1 = 1, hi1 = -1, lo2 = 1, hi2 = -1;
    for (int64_t k = 0; k < lay.w2; k++)
        lo1 = fmin(lo1, a[k]), hi1 = fmax(hi1, a[k]);
    for (int64_t k = lay.w2; k < lay.c; k++)
        lo2 = fmin(lo2, a[k]), hi2 = fmax(hi2, a[k]);
    assert_true(lo1 < -0.8 && hi1 > 0.8);
    assert_true(lo2 < -0.8 * a2 && hi2 > 0.8 * a2 && hi2 <= a2);
    assert_true(a[lay.c] == 0.25f && a[lay.m] == 1.0f && c[lay.c] == 0.25f && c[lay.m] == 1.0f);
    free(a), free(b), free(c);
    direct_close(&p);
}

/* ---- the check values ------------------------------------------------------------------------------ */

/* The README's width-2 MLP: W1 = [1, -1], b1 = [0, 0.5], W2 = [[1, 0.5], [-2, 1]], b2 = [0.1, -0.2], H = 2,
 * c = 0.1, L_init = 512, L_multiplier = 1. */
static const float vector_theta[12] = {1, -1, 0, 0.5f, 1, 0.5f, -2, 1, 0.1f, -0.2f, 0.1f, 1};
static const struct {
    int32_t i, j;
    double u, b0, b1, du_dc, du_dm, db0, db1;
} vector_rows[] = {
    {0, 0, 0, 0.350000, 0.300000, 0, 0, -0.5, -1.0},
    {10, 3, 0.134164, 0.417082, -0.102491, 0.708383, -0.033272, 0.5, -3.0},
    {511, 0, 0.999515, 1.099515, -2.199030, 0.001110, -0.247875, 1.0, -2.0},
    {1000, 0, 1.000000, 1.100000, -2.200000, 0, 0, 1.0, -2.0},
    {1000, 500, 0.851944, 0.951944, -1.903888, 0.296597, 0, 1.0, -2.0},
    {4095, 4000, 0.390764, 0.545382, -0.872292, 0.855771, 0, 0.5, -3.0},
};

static void check_values(void **state)
{
    (void)state;
    enum { N = 4096 };
    char text[512];
    direct_plugin p;
    experiment(text, sizeof text, 2, 64, "width = 2\nthreshold = 512\n");
    direct_open_ok(&p, "fire", text);
    assert_int_equal(p.desc->param_count(p.inst), 12);
    bk_fire_layout lay = bk_fire_layout_of(2, 2);
    const float *th = vector_theta;
    float *phi = malloc(sizeof *phi * N), *rscale = malloc(sizeof *rscale * N);
    get_coordinate(&p, th, N, N, phi, rscale);
    int32_t P = p.desc->coordinate_points(p.inst);
    float *grid = malloc(sizeof *grid * 2 * (size_t)P);
    get_table(&p, th, grid);
    biaskit_context ctx = direct_context(&p, N, 1);
    for (size_t r = 0; r < sizeof vector_rows / sizeof vector_rows[0]; r++) {
        int32_t i = vector_rows[r].i, d = i - vector_rows[r].j;
        char what[64];
        float u = bk_coord_u(phi[d], rscale[i]); /* as the attention forms it */
        snprintf(what, sizeof what, "row (%d, %d): u", i, vector_rows[r].j);
        expect_near(u, vector_rows[r].u, 0, 1e-6, what);
        /* b through fire_math.h at the plugin's u, and through the grid as the attention reads it: the
         * kinks of this MLP sit at u = 0 and 0.5, grid points, so the interpolation is exact here */
        const double want_b[2] = {vector_rows[r].b0, vector_rows[r].b1}, want_db[2] = {vector_rows[r].db0, vector_rows[r].db1};
        float t;
        int32_t cell = bk_coord_cell(u, P, &t);
        for (int h = 0; h < 2; h++) {
            snprintf(what, sizeof what, "row (%d, %d): b_%d", i, vector_rows[r].j, h);
            expect_near(bk_fire_mlp(th + lay.w1, th + lay.b1, th + lay.w2 + 2 * h, th[lay.b2 + h], 2, u), want_b[h], 0,
                        2e-6, what);
            expect_near(bk_coord_lerp(grid + (size_t)h * (size_t)P, cell, t), want_b[h], 0, 2e-6, what);
            snprintf(what, sizeof what, "row (%d, %d): db_%d/du", i, vector_rows[r].j, h);
            expect_near(bk_fire_mlp_du(th + lay.w1, th + lay.b1, th + lay.w2 + 2 * h, 2, vector_rows[r].u), want_db[h], 0,
                        1e-12, what);
            if (vector_rows[r].u > 0.0) /* u = 0 is a kink: the grid's first cell has the right-hand slope */
                expect_near(bk_coord_slope(grid + (size_t)h * (size_t)P, cell, P), want_db[h], 0, 1e-3, what);
        }
        /* du/dc and du/dm through coordinate_backward: dphi = rscale[i] e_d, drscale = phi[d] e_i */
        float *dphi = calloc(N, sizeof *dphi), *drs = calloc(N, sizeof *drs), dth[12] = {0};
        dphi[d] = rscale[i];
        drs[i] += phi[d];
        biaskit_error pe = {0, ""};
        assert_int_equal(p.desc->coordinate_backward(p.inst, th, &ctx, N, N, dphi, drs, dth, &pe), BIASKIT_OK);
        snprintf(what, sizeof what, "row (%d, %d): du/dc", i, vector_rows[r].j);
        expect_near(dth[lay.c], vector_rows[r].du_dc, 0, 1.5e-6, what);
        snprintf(what, sizeof what, "row (%d, %d): du/dm", i, vector_rows[r].j);
        expect_near(dth[lay.m], vector_rows[r].du_dm, 0, 1.5e-6, what);
        for (int k = 0; k < lay.c; k++) /* the MLP's parameters get nothing from coordinate_backward */
            assert_true(dth[k] == 0.0f);
        free(dphi), free(drs);
    }
    /* the same distance 95 at a short row (i <= 512): psi(95) / (psi(512) + eps) */
    expect_near(bk_coord_u(phi[95], rscale[200]), 0.594520, 0, 1e-6, "d = 95 at i = 200");
    /* every row's u(i, i) <= 1, every row's farthest key near 1 beyond the threshold */
    for (int32_t i = 0; i < N; i++)
        assert_true(bk_coord_u(phi[i], rscale[i]) <= 1.0f);
    free(phi), free(rscale), free(grid);
    direct_close(&p);
}

/* threshold 0 (default) = floor(L_train / 2): rows below share the normaliser; a given threshold; the
 * threshold scales with |L_multiplier| */
static void threshold_default(void **state)
{
    (void)state;
    enum { N = 200 };
    const struct {
        int train;
        const char *options;
        double L;
    } cases[] = {{64, NULL, 32}, {65, NULL, 32}, {64, "threshold = 100\n", 100}, {64, "threshold = 0\n", 32},
                 {2, NULL, 1}, {1, NULL, 1}, {256, "threshold = 40.5\n", 40.5}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char text[512];
        direct_plugin p;
        experiment(text, sizeof text, 2, cases[k].train, cases[k].options);
        direct_open_ok(&p, "fire", text);
        int64_t n = p.desc->param_count(p.inst);
        float *theta = malloc(sizeof *theta * (size_t)n);
        biaskit_error pe = {0, ""};
        assert_int_equal(p.desc->param_init(p.inst, theta, 1, &pe), BIASKIT_OK);
        bk_fire_layout lay = bk_fire_layout_of(2, BK_FIRE_DEFAULT_WIDTH);
        float phi[N], rscale[N];
        for (int mult = 0; mult < 2; mult++) {
            double m = mult ? -1.5 : 1.0;
            theta[lay.m] = (float)m;
            get_coordinate(&p, theta, N, N, phi, rscale);
            double L = fabs(m) * cases[k].L;
            for (int32_t i = 0; i < N; i++) {
                double want = 1.0 / (log1p(BK_FIRE_DEFAULT_C * fmax(i, L)) + BK_FIRE_EPS);
                char what[96];
                snprintf(what, sizeof what, "train %d, %s, m = %g: rscale[%d]", cases[k].train,
                         cases[k].options ? cases[k].options : "default", m, i);
                expect_near(rscale[i], want, 2e-7, 0, what);
            }
        }
        free(theta);
        direct_close(&p);
    }
}

/* ---- gradients ------------------------------------------------------------------------------------- */

/* sum_{h,g} dt[h][g] b_h(u_g) by fire_math.h in double */
static double table_loss(const float *th, bk_fire_layout lay, int32_t H, int32_t W, int32_t P, const float *dt)
{
    double s = 0.0;
    for (int32_t h = 0; h < H; h++)
        for (int32_t g = 0; g < P; g++)
            s += (double)dt[h * P + g] *
                 bk_fire_mlp(th + lay.w1, th + lay.b1, th + lay.w2 + (size_t)h * (size_t)W, th[lay.b2 + h], W,
                             bk_fire_grid_u(g, P));
    return s;
}

static void table_gradient(void **state)
{
    (void)state;
    enum { H = 3, W = 8, P = 65 };
    char text[512];
    direct_plugin p;
    experiment(text, sizeof text, H, 64, "width = 8\ngrid = 65\n");
    direct_open_ok(&p, "fire", text);
    bk_fire_layout lay = bk_fire_layout_of(H, W);
    float th[64];
    assert_true(lay.count <= 64);
    biaskit_error pe = {0, ""};
    assert_int_equal(p.desc->param_init(p.inst, th, 11, &pe), BIASKIT_OK);
    for (int64_t k = lay.w2; k < lay.c; k++)
        th[k] *= 10.0f; /* trained-like output weights */
    /* no grid point within 1e-3 of a kink, so a step of 1e-5 never crosses one */
    for (int32_t k = 0; k < W; k++)
        for (int32_t g = 0; g < P; g++)
            if (fabs(bk_fire_preact(th[lay.w1 + k], th[lay.b1 + k], bk_fire_grid_u(g, P))) < 1e-3)
                fail_msg("seed 11: hidden unit %d has a kink at grid point %d: pick another seed", k, g);
    float dt[H * P];
    biaskit_rng rng = biaskit_rng_seeded(8);
    for (int k = 0; k < H * P; k++)
        dt[k] = (float)biaskit_rng_normal(&rng);
    float grad[64];
    for (int k = 0; k < 64; k++)
        grad[k] = 0.5f; /* table_backward adds */
    assert_int_equal(p.desc->table_backward(p.inst, th, P, dt, grad, &pe), BIASKIT_OK);
    float grid_p[H * P], grid_m[H * P];
    int skipped32 = 0;
    for (int64_t k = 0; k < lay.count; k++) {
        double analytic = (double)grad[k] - 0.5;
        if (k >= lay.c) { /* c and L_multiplier do not enter the grid */
            assert_true(grad[k] == 0.5f);
            continue;
        }
        float tp[64], tm[64];
        memcpy(tp, th, sizeof tp);
        memcpy(tm, th, sizeof tm);
        double step = 1e-5;
        tp[k] = (float)(th[k] + step);
        tm[k] = (float)(th[k] - step);
        double width = (double)tp[k] - (double)tm[k];
        double fd = (table_loss(tp, lay, H, W, P, dt) - table_loss(tm, lay, H, W, P, dt)) / width;
        if (!(fabs(analytic - fd) <= 1e-4 * fabs(fd) + 1e-4))
            fail_msg("theta[%lld]: table_backward %.9g, central differences (fire_math.h) %.9g", (long long)k, analytic,
                     fd);
        /* the plugin's own float table, a step of 1e-2, where the step moves no kink across a grid point (else
         * the difference quotient mixes two linear pieces): the hidden units' signs at every grid point must be
         * the same at both ends */
        memcpy(tp, th, sizeof tp);
        memcpy(tm, th, sizeof tm);
        tp[k] += 1e-2f;
        tm[k] -= 1e-2f;
        int crosses = 0;
        for (int32_t unit = 0; unit < W; unit++)
            for (int32_t g = 0; g < P; g++) {
                double u = bk_fire_grid_u(g, P);
                crosses |= (bk_fire_preact(tp[lay.w1 + unit], tp[lay.b1 + unit], u) > 0) !=
                           (bk_fire_preact(tm[lay.w1 + unit], tm[lay.b1 + unit], u) > 0);
            }
        if (crosses) {
            skipped32++;
            continue;
        }
        width = (double)tp[k] - (double)tm[k];
        get_table(&p, tp, grid_p);
        get_table(&p, tm, grid_m);
        double lp = 0, lm = 0, noise = 0;
        for (int g = 0; g < H * P; g++) {
            lp += (double)dt[g] * grid_p[g];
            lm += (double)dt[g] * grid_m[g];
            noise += fabs((double)dt[g] * grid_p[g]) * 0x1.0p-23;
        }
        double fd32 = (lp - lm) / width;
        if (!(fabs(analytic - fd32) <= 1e-4 * fabs(fd32) + 2 * noise / width + 1e-4))
            fail_msg("theta[%lld]: table_backward %.9g, central differences (plugin table) %.9g", (long long)k,
                     analytic, fd32);
    }
    /* W2 and b2 never move a kink; of the 2 W parameters of the units, a few may */
    print_message("float table differences: %d of %lld MLP parameters skipped (a kink crosses a grid point)\n",
                  skipped32, (long long)lay.c);
    assert_true(skipped32 <= W / 2);
    /* deterministic, accumulating */
    float once[64] = {0}, again[64] = {0}, twice[64];
    assert_int_equal(p.desc->table_backward(p.inst, th, P, dt, once, &pe), BIASKIT_OK);
    assert_int_equal(p.desc->table_backward(p.inst, th, P, dt, again, &pe), BIASKIT_OK);
    assert_memory_equal(once, again, sizeof once);
    memcpy(twice, once, sizeof twice);
    assert_int_equal(p.desc->table_backward(p.inst, th, P, dt, twice, &pe), BIASKIT_OK);
    for (int64_t k = 0; k < lay.count; k++)
        assert_true(twice[k] == 2.0f * once[k]);
    direct_close(&p);
}

/* sum_d dphi[d] phi(d) + sum_i drs[i] rscale(i) by fire_math.h in double */
static double coordinate_loss(double c, double m, double L, int32_t N, const float *dphi, const float *drs)
{
    double s = 0.0;
    for (int32_t d = 0; d < N; d++)
        s += (double)dphi[d] * bk_fire_psi(c, d);
    for (int32_t i = 0; i < N; i++)
        s += (double)drs[i] * bk_fire_rscale(i, c, m, L);
    return s;
}

static void coordinate_gradient(void **state)
{
    (void)state;
    enum { N = 40 };
    char text[512];
    direct_plugin p;
    /* threshold 20.5 (not an integer): rows 0 .. 20 see L_multiplier, rows 21 .. 39 do not, and no row sits at
     * the kink i = |m L_init| for the multipliers below */
    experiment(text, sizeof text, 2, 64, "width = 4\nthreshold = 20.5\n");
    direct_open_ok(&p, "fire", text);
    bk_fire_layout lay = bk_fire_layout_of(2, 4);
    float th[32];
    biaskit_error pe = {0, ""};
    assert_int_equal(p.desc->param_init(p.inst, th, 3, &pe), BIASKIT_OK);
    float dphi[N], drs[N];
    biaskit_rng rng = biaskit_rng_seeded(9);
    for (int k = 0; k < N; k++) {
        dphi[k] = (float)biaskit_rng_normal(&rng);
        drs[k] = (float)biaskit_rng_normal(&rng);
    }
    biaskit_context ctx = direct_context(&p, N, 1);
    const float cs[] = {0.1f, 0.37f, -0.2f, 2.0f}, ms[] = {1.0f, 1.23f, -0.9f, -1.7f};
    for (size_t a = 0; a < sizeof cs / sizeof cs[0]; a++)
        for (size_t b = 0; b < sizeof ms / sizeof ms[0]; b++) {
            th[lay.c] = cs[a];
            th[lay.m] = ms[b];
            float grad[32];
            for (int k = 0; k < 32; k++)
                grad[k] = 0.5f;
            assert_int_equal(p.desc->coordinate_backward(p.inst, th, &ctx, N, N, dphi, drs, grad, &pe), BIASKIT_OK);
            for (int64_t k = 0; k < lay.c; k++)
                assert_true(grad[k] == 0.5f);
            double got[2] = {(double)grad[lay.c] - 0.5, (double)grad[lay.m] - 0.5};
            double c = cs[a], m = ms[b], h = 1e-6;
            double fd[2] = {(coordinate_loss(c + h, m, 20.5, N, dphi, drs) - coordinate_loss(c - h, m, 20.5, N, dphi, drs)) /
                                (2 * h),
                            (coordinate_loss(c, m + h, 20.5, N, dphi, drs) - coordinate_loss(c, m - h, 20.5, N, dphi, drs)) /
                                (2 * h)};
            /* the plugin's own float outputs, a step of 1e-3 */
            double fd32[2];
            for (int which = 0; which < 2; which++) {
                float tp[32], tm[32], php[N], phm[N], rsp[N], rsm[N];
                memcpy(tp, th, sizeof tp);
                memcpy(tm, th, sizeof tm);
                int64_t k = which ? lay.m : lay.c;
                tp[k] += 1e-3f;
                tm[k] -= 1e-3f;
                get_coordinate(&p, tp, N, N, php, rsp);
                get_coordinate(&p, tm, N, N, phm, rsm);
                double lp = 0, lm = 0;
                for (int i = 0; i < N; i++) {
                    lp += (double)dphi[i] * php[i] + (double)drs[i] * rsp[i];
                    lm += (double)dphi[i] * phm[i] + (double)drs[i] * rsm[i];
                }
                fd32[which] = (lp - lm) / ((double)tp[k] - (double)tm[k]);
            }
            for (int which = 0; which < 2; which++) {
                const char *name = which ? "L_multiplier" : "c";
                if (!(fabs(got[which] - fd[which]) <= 1e-5 * fabs(fd[which]) + 1e-5))
                    fail_msg("c = %g, m = %g: d/d%s: coordinate_backward %.9g, central differences (fire_math.h) %.9g",
                             c, m, name, got[which], fd[which]);
                if (!(fabs(got[which] - fd32[which]) <= 1e-2 * fabs(fd32[which]) + 2e-3))
                    fail_msg("c = %g, m = %g: d/d%s: coordinate_backward %.9g, central differences (plugin) %.9g", c, m,
                             name, got[which], fd32[which]);
            }
        }
    /* rows at or beyond the threshold do not see L_multiplier: a gradient on row 21 alone gives it nothing */
    th[lay.c] = 0.1f;
    th[lay.m] = 1.0f;
    float zero[N] = {0}, only[N] = {0}, grad[32] = {0};
    only[21] = 1.0f;
    assert_int_equal(p.desc->coordinate_backward(p.inst, th, &ctx, N, N, zero, only, grad, &pe), BIASKIT_OK);
    assert_true(grad[lay.m] == 0.0f);
    assert_true(grad[lay.c] != 0.0f);
    only[21] = 0.0f;
    only[20] = 1.0f;
    assert_int_equal(p.desc->coordinate_backward(p.inst, th, &ctx, N, N, zero, only, grad, &pe), BIASKIT_OK);
    assert_true(grad[lay.m] != 0.0f);
    /* deterministic, accumulating */
    float once[32] = {0}, again[32] = {0}, twice[32];
    assert_int_equal(p.desc->coordinate_backward(p.inst, th, &ctx, N, N, dphi, drs, once, &pe), BIASKIT_OK);
    assert_int_equal(p.desc->coordinate_backward(p.inst, th, &ctx, N, N, dphi, drs, again, &pe), BIASKIT_OK);
    assert_memory_equal(once, again, sizeof once);
    memcpy(twice, once, sizeof twice);
    assert_int_equal(p.desc->coordinate_backward(p.inst, th, &ctx, N, N, dphi, drs, twice, &pe), BIASKIT_OK);
    assert_true(twice[lay.c] == 2.0f * once[lay.c] && twice[lay.m] == 2.0f * once[lay.m]);
    direct_close(&p);
}

/* psi(i) above about 17 leaves u(i, i) = psi / (psi + eps) within float's half ulp of 1: the float product
 * phi[i] * rscale[i] could round above 1 (the engine allows a few ulps and clamps). Here it does not, up to
 * 300000 rows at c = 1000 (psi up to 19.5), and rscale is its double value rounded once. */
static void diagonal_stays_in_range(void **state)
{
    (void)state;
    enum { N = 300000 };
    char text[512];
    direct_plugin p;
    experiment(text, sizeof text, 1, 64, "width = 2\nc_init = 1000\n");
    direct_open_ok(&p, "fire", text);
    float th[16];
    biaskit_error pe = {0, ""};
    assert_int_equal(p.desc->param_init(p.inst, th, 1, &pe), BIASKIT_OK);
    float *phi = malloc(sizeof *phi * N), *rscale = malloc(sizeof *rscale * N);
    get_coordinate(&p, th, N, N, phi, rscale);
    for (int32_t i = 0; i < N; i++) {
        if (!(bk_coord_u(phi[i], rscale[i]) <= 1.0f))
            fail_msg("row %d: u(i, i) = %.9g > 1", i, (double)bk_coord_u(phi[i], rscale[i]));
        assert_true(rscale[i] == (float)bk_fire_rscale(i, 1000.0, 1.0, 32.0));
        assert_true(phi[i] == (float)bk_fire_psi(1000.0, i));
    }
    free(phi), free(rscale);
    direct_close(&p);
}

/* ---- refusals -------------------------------------------------------------------------------------- */

static void bad_options(void **state)
{
    (void)state;
    const struct {
        const char *options, *needle1, *needle2;
    } cases[] = {
        {"width = 0\n", "exp.toml:9:9: [[term]] #1 (fire) option 'width': ",
         "expected an integer in 1 .. 4096 (hidden units of the MLP), got 0"},
        {"width = -2\n", "option 'width'", "got -2"},
        {"width = 5000\n", "option 'width'", "got 5000"},
        {"grid = 1\n", "exp.toml:9:8: [[term]] #1 (fire) option 'grid': ",
         "expected an integer in 2 .. 65536 (grid points of u in [0, 1]), got 1"},
        {"grid = 65537\n", "option 'grid'", "got 65537"},
        {"threshold = -1\n", "exp.toml:9:13: [[term]] #1 (fire) option 'threshold': ",
         "expected a finite number >= 0 (0 = floor(train length / 2)), got -1"},
        {"threshold = inf\n", "option 'threshold'", "got inf"},
        {"c_init = nan\n", "option 'c_init'", "expected a finite number, got nan"},
        {"grid = 2.5\n", "option 'grid'", NULL},
        {"widht = 8\n", "unknown key 'widht'", NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char text[512];
        experiment(text, sizeof text, 2, 64, cases[k].options);
        direct_expect_error("fire", text, cases[k].needle1, cases[k].needle2);
    }
    /* grid = 2 and width = 1 are the smallest accepted */
    char text[512];
    direct_plugin p;
    experiment(text, sizeof text, 2, 64, "grid = 2\nwidth = 1\n");
    direct_open_ok(&p, "fire", text);
    direct_close(&p);
}

static void bad_calls(void **state)
{
    (void)state;
    char text[512];
    direct_plugin p;
    experiment(text, sizeof text, 2, 64, "width = 2\ngrid = 9\n");
    direct_open_ok(&p, "fire", text);
    biaskit_context ctx = direct_context(&p, 8, 1);
    float th[12], grid[2 * 10], phi[8], rs[8], dth[12] = {0};
    memcpy(th, vector_theta, sizeof th);
    biaskit_error pe = {0, ""};
    assert_int_equal(p.desc->table(p.inst, th, 10, grid, &pe), BIASKIT_ERR_INVALID);
    assert_message_has(pe.message, "the table is over the grid of coordinate_points() = 9 values of u (option 'grid'), got 10");
    assert_int_equal(p.desc->table_backward(p.inst, th, 8, grid, dth, &pe), BIASKIT_ERR_INVALID);
    assert_int_equal(p.desc->table(p.inst, NULL, 9, grid, &pe), BIASKIT_ERR_INVALID);
    assert_message_has(pe.message, "theta is NULL");
    assert_int_equal(p.desc->coordinate(p.inst, NULL, &ctx, 8, 8, phi, rs, &pe), BIASKIT_ERR_INVALID);
    assert_int_equal(p.desc->coordinate(p.inst, th, &ctx, 0, 8, phi, rs, &pe), BIASKIT_ERR_INVALID);
    assert_message_has(pe.message, "expected distances >= 1 and rows >= 1, got 0 and 8");
    assert_int_equal(p.desc->coordinate_backward(p.inst, th, &ctx, 8, 0, phi, rs, dth, &pe), BIASKIT_ERR_INVALID);
    for (int k = 0; k < 12; k++)
        assert_true(dth[k] == 0.0f);
    direct_close(&p);
}

/* ---- against PyTorch ------------------------------------------------------------------------------- */

static const char *python(void)
{
    const char *py = getenv("BIASKIT_PYTHON");
    return py && *py ? py : "/usr/bin/python3";
}

/* T = 40, threshold 16 with L_multiplier 0.97 (N0 = 15.52: rows 0 .. 15 normalised by the threshold, 16 .. 39
 * by psi(i), no row at the kink), c = 0.3, 3 heads, width 32, the default grid; a random upstream gradient
 * on j <= i. The C side follows the engine: u = phi[d] rscale[i] in float, the grid interpolated
 * (model/bias_math.h), dgrid with the interpolation weights, du = G * the cell's slope, dphi[d] += du rscale[i],
 * drscale[i] += du phi[d], then table_backward and coordinate_backward. */
static void against_pytorch(void **state)
{
    (void)state;
    char probe[512];
    snprintf(probe, sizeof probe, "'%s' -c 'import torch' >/dev/null 2>&1", python());
    if (system(probe) != 0) {
        print_message("skipped: %s cannot import torch (install python3-torch, or set BIASKIT_PYTHON)\n", python());
        skip();
    }
    enum { T = 40, H = 3, W = 32 };
    char text[512];
    direct_plugin p;
    experiment(text, sizeof text, H, 64, "threshold = 16\n");
    direct_open_ok(&p, "fire", text);
    bk_fire_layout lay = bk_fire_layout_of(H, W);
    int32_t P = p.desc->coordinate_points(p.inst);
    float *th = malloc(sizeof *th * (size_t)lay.count);
    biaskit_error pe = {0, ""};
    assert_int_equal(p.desc->param_init(p.inst, th, 2024, &pe), BIASKIT_OK);
    for (int64_t k = lay.w2; k < lay.c; k++)
        th[k] *= 4.0f; /* a little larger than at init, so the bias is not tiny */
    th[lay.c] = 0.3f;
    th[lay.m] = 0.97f;
    float *grid = malloc(sizeof *grid * (size_t)H * (size_t)P), phi[T], rscale[T];
    get_table(&p, th, grid);
    get_coordinate(&p, th, T, T, phi, rscale);
    float *G = calloc((size_t)H * T * T, sizeof *G), *bias = calloc((size_t)H * T * T, sizeof *bias);
    double *dgrid = calloc((size_t)H * (size_t)P, sizeof *dgrid), dphi[T] = {0}, drs[T] = {0};
    biaskit_rng rng = biaskit_rng_seeded(77);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j <= i; j++) {
                size_t e = ((size_t)h * T + (size_t)i) * T + (size_t)j;
                G[e] = (float)biaskit_rng_normal(&rng);
                float t, u = bk_coord_u(phi[i - j], rscale[i]);
                int32_t g = bk_coord_cell(u, P, &t);
                const float *F = grid + (size_t)h * (size_t)P;
                bias[e] = bk_coord_lerp(F, g, t);
                dgrid[(size_t)h * (size_t)P + (size_t)g] += (double)G[e] * (1.0 - t);
                dgrid[(size_t)h * (size_t)P + (size_t)g + 1] += (double)G[e] * t;
                double du = (double)G[e] * bk_coord_slope(F, g, P);
                dphi[i - j] += du * rscale[i];
                drs[i] += du * phi[i - j];
            }
    float *dgrid_f = malloc(sizeof *dgrid_f * (size_t)H * (size_t)P), dphi_f[T], drs_f[T];
    for (size_t k = 0; k < (size_t)H * (size_t)P; k++)
        dgrid_f[k] = (float)dgrid[k];
    for (int k = 0; k < T; k++)
        dphi_f[k] = (float)dphi[k], drs_f[k] = (float)drs[k];
    float *grad = calloc((size_t)lay.count, sizeof *grad);
    biaskit_context ctx = direct_context(&p, T, 1);
    assert_int_equal(p.desc->table_backward(p.inst, th, P, dgrid_f, grad, &pe), BIASKIT_OK);
    assert_int_equal(p.desc->coordinate_backward(p.inst, th, &ctx, T, T, dphi_f, drs_f, grad, &pe), BIASKIT_OK);

    char dir[] = "/tmp/bk_fire_reference_XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/fire.safetensors", dir);
    static const char *const names[6] = {"W1", "b1", "W2", "b2", "c", "L_multiplier"};
    static const char *const grad_names[6] = {"grad.W1", "grad.b1", "grad.W2", "grad.b2", "grad.c", "grad.L_multiplier"};
    const int64_t offs[6] = {lay.w1, lay.b1, lay.w2, lay.b2, lay.c, lay.m};
    const int64_t shapes[6][2] = {{W, 0}, {W, 0}, {H, W}, {H, 0}, {1, 0}, {1, 0}};
    bk_st_tensor t[14];
    int n = 0;
    for (int k = 0; k < 6; k++) {
        t[n++] = (bk_st_tensor){names[k], shapes[k][1] ? 2 : 1, {shapes[k][0], shapes[k][1]}, th + offs[k]};
        t[n++] = (bk_st_tensor){grad_names[k], shapes[k][1] ? 2 : 1, {shapes[k][0], shapes[k][1]}, grad + offs[k]};
    }
    t[n++] = (bk_st_tensor){"G", 3, {H, T, T}, G};
    t[n++] = (bk_st_tensor){"bias", 3, {H, T, T}, bias};
    char sT[16], sP[16];
    snprintf(sT, sizeof sT, "%d", T);
    snprintf(sP, sizeof sP, "%d", (int)P);
    const bk_st_meta meta[3] = {{"T", sT}, {"L_init", "16"}, {"points", sP}};
    bk_error err;
    if (bk_safetensors_write(path, t, n, meta, 3, &err) != BK_OK)
        fail_msg("%s", err.message);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/reference/fire_reference.py' check '%s'", python(), BK_TEST_SOURCE_DIR,
             path);
    fflush(stdout);
    int status = system(cmd);
    if (status != 0)
        fail_msg("fire_reference.py disagrees (exit status %d); its input is kept: %s", status, path);
    if (!getenv("BK_REFERENCE_KEEP")) {
        unlink(path);
        rmdir(dir);
    } else
        print_message("kept %s\n", path);
    free(th), free(grid), free(G), free(bias), free(dgrid), free(dgrid_f), free(grad);
    direct_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(descriptor_and_tensors),
        cmocka_unit_test(initialisation),
        cmocka_unit_test(check_values),
        cmocka_unit_test(threshold_default),
        cmocka_unit_test(table_gradient),
        cmocka_unit_test(coordinate_gradient),
        cmocka_unit_test(diagonal_stays_in_range),
        cmocka_unit_test(bad_options),
        cmocka_unit_test(bad_calls),
        cmocka_unit_test(against_pytorch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
