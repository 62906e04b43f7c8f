/* FIRE (Li et al., ICLR 2024) written with <biaskit/formula_plugin.h>, for tests/test_formula_v2.c: the
 * expressions of plugins/fire/fire_math.h operation for operation, the same theta layout (W1, b1, W2, b2,
 * c, L_multiplier) and the same init draws, so that its grid table, coordinates and gradients equal the
 * built-in fire's (bit for bit, but for the gradients of W1 and b1, summed per head first here: within
 * float rounding). Options: width, threshold and grid as fire's; c_init is the option c = [...].
 *
 *   u(i, d) = psi(d) / (psi(max(i, |m L|)) + 1e-6),   psi(x) = log(|c x| + 1)
 *   F_h(u)  = b2_h + sum_k W2[h,k] ReLU(W1_k u + b1_k) */
#include <biaskit/formula_plugin.h>

#define FIRE_FP_CONSTANTS(C)                                                                               \
    C(width, BIASKIT_TP_INT(32, 1, 4096), "hidden units of the MLP u -> width -> heads")                   \
    C(threshold, BIASKIT_TP_REAL(0, 0, 1e30), "L of max(i, |L_multiplier L|); 0 = floor(train length / 2)")
#define FIRE_FP_PARAMS(X)                                                                                  \
    X(w1, ARRAY(c.width), BIASKIT_TP_SYMMETRIC(1), -INFINITY, INFINITY, "W1 (width)")                      \
    X(b1, ARRAY(c.width), BIASKIT_TP_SYMMETRIC(1), -INFINITY, INFINITY, "b1 (width)")                      \
    X(w2, PER_HEAD_ARRAY(c.width), BIASKIT_TP_SYMMETRIC(1 / sqrt(c.width)), -INFINITY, INFINITY, "W2")     \
    X(b2, PER_HEAD, BIASKIT_TP_SYMMETRIC(1 / sqrt(c.width)), -INFINITY, INFINITY, "b2 (heads)")
#define FIRE_FP_UPARAMS(X)                                                                                 \
    X(c, SCALAR, BIASKIT_TP_CONST(0.1), -INFINITY, INFINITY, "c of psi(x) = log(|c x| + 1)")              \
    X(l_multiplier, SCALAR, BIASKIT_TP_CONST(1), -INFINITY, INFINITY, "m of max(i, |m L|)")

BIASKIT_FP_COORDINATE_TYPES(fire_fp, FIRE_FP_PARAMS, FIRE_FP_UPARAMS, FIRE_FP_CONSTANTS)

static double sgn(double x) { return (double)((x > 0.0) - (x < 0.0)); }
static double relu(double a) { return a > 0.0 ? a : 0.0; }
static double psi_dc(double c, double x) { return x * sgn(c * x) / (fabs(c * x) + 1.0); }
static double psi_dx(double c, double x) { return c * sgn(c * x) / (fabs(c * x) + 1.0); }
/* L: the threshold, 0 = floor(L_train / 2) (at least 1); the normaliser N(i) = max(i, |m L|) */
static double threshold(fire_fp_ctx c)
{
    int32_t half = c.train_length / 2;
    return c.threshold > 0 ? c.threshold : half > 1 ? (double)half : 1.0;
}
static double norm(fire_fp_params p, fire_fp_ctx c, int32_t i)
{
    double n0 = fabs(p.l_multiplier * threshold(c));
    return n0 > (double)i ? n0 : (double)i;
}

BIASKIT_FP_PHI(fire_fp) { return log1p(fabs(p.c * (double)d)); }
BIASKIT_FP_PHI_GRADIENT(fire_fp) { g->c = psi_dc(p.c, (double)d); }
BIASKIT_FP_RSCALE(fire_fp) { return 1.0 / (log1p(fabs(p.c * norm(p, c, i))) + 1e-6); }
BIASKIT_FP_RSCALE_GRADIENT(fire_fp)
{
    double n = norm(p, c, i), r = 1.0 / (log1p(fabs(p.c * n)) + 1e-6), L = threshold(c);
    g->c = -r * r * psi_dc(p.c, n);
    g->l_multiplier = -r * r * psi_dx(p.c, n) * (fabs(p.l_multiplier * L) > (double)i ? L * sgn(p.l_multiplier * L) : 0.0);
}
BIASKIT_FP_F(fire_fp)
{
    double s = p.b2;
    for (int32_t k = 0; k < c.width; k++)
        s += (double)p.w2[k] * relu((double)p.w1[k] * u + (double)p.b1[k]);
    return s;
}
BIASKIT_FP_F_GRADIENT(fire_fp)
{
    g->b2 = 1.0;
    for (int32_t k = 0; k < c.width; k++) {
        double a = (double)p.w1[k] * u + (double)p.b1[k];
        g->w2[k] = relu(a);
        g->w1[k] = a > 0.0 ? (double)p.w2[k] * u : 0.0;
        g->b1[k] = a > 0.0 ? (double)p.w2[k] : 0.0;
    }
}

BIASKIT_COORDINATE_PLUGIN(fire_fp, FIRE_FP_PARAMS, FIRE_FP_UPARAMS, FIRE_FP_CONSTANTS, 1025, .name = "fire_fp",
                          .version = "1.0.0", .flags = BIASKIT_FLAG_PER_LAYER,
                          .summary = "test: FIRE through <biaskit/formula_plugin.h> (as plugins/fire)",
                          .reference = "Li et al., Functional Interpolation for Relative Positions Improves Long "
                                       "Context Transformers, ICLR 2024")
