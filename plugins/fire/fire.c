/* FIRE (Li et al., ICLR 2024) as a biaskit plugin (ABI 2, BIASKIT_CAP_COORDINATE):
 *
 *     Bias[h, i, j] = b_h(u(i, i - j)),   u(i, d) = psi_c(d) / (psi_c(max(i, |m L_init|)) + eps)
 *
 * with b_h the MLP 1 -> width -> H (ReLU) shared by the heads of a layer, one FIRE per layer
 * (BIASKIT_FLAG_PER_LAYER). The plugin gives the engine the two factors of u (coordinate(): phi[d],
 * rscale[i]) and the MLP on a grid of u (table(): F_h(u_g), u_g = g / (points - 1)); the attention
 * interpolates the grid linearly. Formulas and derivatives: fire_math.h; the grid's error:
 * README.md ("Grid").
 *
 * Options:
 *   width       hidden units of the MLP (32)
 *   c_init      initial c (0.1)
 *   threshold   L_init (frozen; the learned threshold is |L_multiplier L_init|); 0 = floor(L_train / 2)
 *   grid        grid points of u (BK_FIRE_DEFAULT_GRID) */
#include "fire_math.h"

#include <biaskit/random.h>

#include <math.h>
#include <stdlib.h>

typedef struct fire {
    const biaskit_services *svc;
    int32_t heads, width, points;
    double c_init, L_init;
    bk_fire_layout lay;
} fire;

static const biaskit_option options[] = {
    BIASKIT_OPTION_INT("width", BK_FIRE_DEFAULT_WIDTH, "hidden units of the MLP u -> width -> heads (paper: 32)"),
    BIASKIT_OPTION_DOUBLE("c_init", BK_FIRE_DEFAULT_C, "initial c of psi(x) = log(|c x| + 1) (paper: 0.1)"),
    BIASKIT_OPTION_DOUBLE("threshold", 0.0,
                          "L_init of the normaliser max(i, |L_multiplier L_init|); 0 = floor(train length / 2)"),
    BIASKIT_OPTION_INT("grid", BK_FIRE_DEFAULT_GRID, "grid points of u in [0, 1] the MLP is tabulated at"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    if (geo->n_heads < 1)
        return svc->error(err, BIASKIT_ERR_INVALID, "expected at least one head, got %d", (int)geo->n_heads);
    int64_t width = 0, grid = 0;
    double c_init = 0.0, threshold = 0.0;
    int rc;
    if ((rc = svc->get_int(cfg, "width", &width, err)) || (rc = svc->get_double(cfg, "c_init", &c_init, err)) ||
        (rc = svc->get_double(cfg, "threshold", &threshold, err)) || (rc = svc->get_int(cfg, "grid", &grid, err)))
        return rc;
    if (width < 1 || width > BK_FIRE_MAX_WIDTH)
        return svc->config_error(cfg, "width", err, "expected an integer in 1 .. %d (hidden units of the MLP), got %lld",
                                 BK_FIRE_MAX_WIDTH, (long long)width);
    if (!isfinite(c_init) || c_init == 0.0)
        return svc->config_error(cfg, "c_init", err,
                                 "expected a finite number other than 0 (c = 0 makes psi(x) = 0 for every distance "
                                 "and its gradient sign(c x) = 0, so c never leaves 0), got %g",
                                 c_init);
    if (!isfinite(threshold) || threshold < 0.0)
        return svc->config_error(cfg, "threshold", err,
                                 "expected a finite number >= 0 (0 = floor(train length / 2)), got %g", threshold);
    if (grid < 2 || grid > BK_FIRE_MAX_GRID)
        return svc->config_error(cfg, "grid", err, "expected an integer in 2 .. %d (grid points of u in [0, 1]), got %lld",
                                 BK_FIRE_MAX_GRID, (long long)grid);
    /* The default threshold: half the training length (the DAPE code's init_L), so that a model trained at
     * L_train sees both regimes: rows i < L_train/2 with the constant normaliser (a distance table) and rows
     * i >= L_train/2 normalised by their own psi(i), the regime every longer evaluation is in. The paper's
     * constant 512 would never be reached by training at 512 tokens or fewer. */
    if (threshold == 0.0) {
        int32_t L = geo->train_length / 2;
        threshold = L > 1 ? (double)L : 1.0;
    }
    fire *f = calloc(1, sizeof *f);
    if (!f)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    f->svc = svc;
    f->heads = geo->n_heads;
    f->width = (int32_t)width;
    f->points = (int32_t)grid;
    f->c_init = c_init;
    f->L_init = threshold;
    f->lay = bk_fire_layout_of(f->heads, f->width);
    *out = f;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

static int64_t param_count(const void *inst)
{
    return ((const fire *)inst)->lay.count;
}

/* nn.Linear's default init (U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias): W1, b1 ~ U(-1, 1)
 * (fan_in 1), W2, b2 ~ U(-1/sqrt(width), 1/sqrt(width)); c = c_init, L_multiplier = 1. One uniform draw
 * per element, in theta's order (W1, b1, W2 row by row, b2), from the seed the engine derives per layer. */
static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)err;
    const fire *f = inst;
    biaskit_rng r = biaskit_rng_seeded(seed);
    double a2 = 1.0 / sqrt((double)f->width);
    for (int64_t k = 0; k < f->lay.c; k++) {
        double a = k < f->lay.w2 ? 1.0 : a2;
        theta[k] = (float)(a * (2.0 * biaskit_rng_uniform(&r) - 1.0));
    }
    theta[f->lay.c] = (float)f->c_init;
    theta[f->lay.m] = 1.0f;
    return BIASKIT_OK;
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    const fire *f = inst;
    const biaskit_tensor_info t[6] = {
        {"W1", f->lay.w1, f->width, 1}, {"b1", f->lay.b1, f->width, 1}, {"W2", f->lay.w2, f->heads, f->width},
        {"b2", f->lay.b2, f->heads, 1}, {"c", f->lay.c, 1, 1},           {"L_multiplier", f->lay.m, 1, 1},
    };
    for (int32_t k = 0; k < 6 && k < capacity; k++)
        out[k] = t[k];
    return 6;
}

static int32_t coordinate_points(const void *inst)
{
    return ((const fire *)inst)->points;
}

static int check_grid(const fire *f, const float *theta, int32_t points, biaskit_error *err)
{
    if (!theta)
        return f->svc->error(err, BIASKIT_ERR_INVALID, "theta is NULL: FIRE's MLP, c and L_multiplier are parameters");
    if (points != f->points)
        return f->svc->error(err, BIASKIT_ERR_INVALID,
                             "the table is over the grid of coordinate_points() = %d values of u (option 'grid'), got "
                             "%d",
                             (int)f->points, (int)points);
    return BIASKIT_OK;
}

/* table[h * points + g] = b_h(u_g), u_g = g / (points - 1) */
static int table(const void *inst, const float *theta, int32_t points, float *out, biaskit_error *err)
{
    const fire *f = inst;
    int rc = check_grid(f, theta, points, err);
    if (rc)
        return rc;
    const float *w1 = theta + f->lay.w1, *b1 = theta + f->lay.b1, *w2 = theta + f->lay.w2, *b2 = theta + f->lay.b2;
    for (int32_t h = 0; h < f->heads; h++)
        for (int32_t g = 0; g < points; g++)
            out[(size_t)h * (size_t)points + (size_t)g] =
                (float)bk_fire_mlp(w1, b1, w2 + (size_t)h * (size_t)f->width, b2[h], f->width, bk_fire_grid_u(g, points));
    return BIASKIT_OK;
}

/* dtheta += sum over h, g of dtable[h][g] db_h(u_g)/dtheta:
 *   dW2[h,k] += sum_g dt[h,g] ReLU(a_k(u_g)),  db2[h] += sum_g dt[h,g],
 *   e_k(g) = sum_h dt[h,g] W2[h,k] 1[a_k(u_g) > 0],  dW1_k += sum_g e_k(g) u_g,  db1_k += sum_g e_k(g).
 * Summed in double in a fixed order (g ascending, then h), added once as floats: deterministic. */
static int table_backward(const void *inst, const float *theta, int32_t points, const float *dtable, float *dtheta,
                          biaskit_error *err)
{
    const fire *f = inst;
    int rc = check_grid(f, theta, points, err);
    if (rc)
        return rc;
    const int32_t H = f->heads, W = f->width;
    const float *w1 = theta + f->lay.w1, *b1 = theta + f->lay.b1, *w2 = theta + f->lay.w2;
    size_t n = (size_t)f->lay.c; /* W1, b1, W2, b2 */
    double *acc = calloc(n, sizeof *acc);
    if (!acc)
        return f->svc->error(err, BIASKIT_ERR_NOMEM, "out of memory for the gradient of FIRE's MLP (%zu values)", n);
    double *dw1 = acc + f->lay.w1, *db1 = acc + f->lay.b1, *dw2 = acc + f->lay.w2, *db2 = acc + f->lay.b2;
    for (int32_t g = 0; g < points; g++) {
        double u = bk_fire_grid_u(g, points);
        for (int32_t k = 0; k < W; k++) {
            double a = bk_fire_preact(w1[k], b1[k], u);
            double e = 0.0;
            for (int32_t h = 0; h < H; h++) {
                double dt = (double)dtable[(size_t)h * (size_t)points + (size_t)g];
                dw2[(size_t)h * (size_t)W + (size_t)k] += dt * bk_fire_relu(a);
                if (a > 0.0)
                    e += dt * (double)w2[(size_t)h * (size_t)W + (size_t)k];
            }
            dw1[k] += e * u;
            db1[k] += e;
        }
        for (int32_t h = 0; h < H; h++)
            db2[h] += (double)dtable[(size_t)h * (size_t)points + (size_t)g];
    }
    for (size_t k = 0; k < n; k++)
        dtheta[k] += (float)acc[k];
    free(acc);
    return BIASKIT_OK;
}

static int check_coordinate(const fire *f, const float *theta, int32_t distances, int32_t rows, biaskit_error *err)
{
    if (!theta)
        return f->svc->error(err, BIASKIT_ERR_INVALID, "theta is NULL: FIRE's c and L_multiplier are parameters");
    if (distances < 1 || rows < 1)
        return f->svc->error(err, BIASKIT_ERR_INVALID, "expected distances >= 1 and rows >= 1, got %d and %d",
                             (int)distances, (int)rows);
    return BIASKIT_OK;
}

/* phi[d] = psi_c(d), rscale[i] = 1 / (psi_c(N(i)) + eps), each computed in double and rounded to float once.
 * u(i, i) = psi(i) / (psi(N(i)) + eps) < 1 exactly; the float product phi[i] * rscale[i] the engine forms
 * could exceed 1 by an ulp once psi > ~17 (where eps / psi is below float's half ulp): the engine allows a
 * few ulps and clamps u to [0, 1] (bias_math.h); no such row was found (test_fire.c). */
static int coordinate(const void *inst, const float *theta, const biaskit_context *ctx, int32_t distances, int32_t rows,
                      float *phi, float *rscale, biaskit_error *err)
{
    (void)ctx; /* FIRE needs the query index only: no length, no training flag */
    const fire *f = inst;
    int rc = check_coordinate(f, theta, distances, rows, err);
    if (rc)
        return rc;
    double c = theta[f->lay.c], m = theta[f->lay.m];
    for (int32_t d = 0; d < distances; d++)
        phi[d] = (float)bk_fire_psi(c, (double)d);
    for (int32_t i = 0; i < rows; i++)
        rscale[i] = (float)bk_fire_rscale(i, c, m, f->L_init);
    return BIASKIT_OK;
}

/* dtheta[c] += sum_d dphi[d] dpsi(d)/dc + sum_i drscale[i] drscale(i)/dc;
 * dtheta[L_multiplier] += sum_i drscale[i] drscale(i)/dm (non-zero only on rows i < |m L_init|). */
static int coordinate_backward(const void *inst, const float *theta, const biaskit_context *ctx, int32_t distances,
                               int32_t rows, const float *dphi, const float *drscale, float *dtheta, biaskit_error *err)
{
    (void)ctx;
    const fire *f = inst;
    int rc = check_coordinate(f, theta, distances, rows, err);
    if (rc)
        return rc;
    double c = theta[f->lay.c], m = theta[f->lay.m], dc = 0.0, dm = 0.0;
    for (int32_t d = 0; d < distances; d++)
        dc += (double)dphi[d] * bk_fire_psi_dc(c, (double)d);
    for (int32_t i = 0; i < rows; i++) {
        dc += (double)drscale[i] * bk_fire_rscale_dc(i, c, m, f->L_init);
        dm += (double)drscale[i] * bk_fire_rscale_dm(i, c, m, f->L_init);
    }
    dtheta[f->lay.c] += (float)dc;
    dtheta[f->lay.m] += (float)dm;
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "fire",
    .version = "1.0.0",
    .summary = "FIRE: learned MLP of u = log(|c d|+1) / log(|c max(i, L)|+1), one per layer, interpolated from a grid",
    .reference = "Li et al., Functional Interpolation for Relative Positions Improves Long Context Transformers, "
                 "ICLR 2024 (arXiv 2310.04418; the appendix's PyTorch module FIRE)",
    .capabilities = BIASKIT_CAP_COORDINATE,
    .flags = BIASKIT_FLAG_PER_LAYER,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .param_count = param_count,
    .param_init = param_init,
    .param_tensors = param_tensors,
    .table = table,
    .table_backward = table_backward,
    .coordinate_points = coordinate_points,
    .coordinate = coordinate,
    .coordinate_backward = coordinate_backward,
};

BIASKIT_DEFINE_PLUGIN(descriptor)
