/* FIRE's formulas, written once (Li et al., "Functional Interpolation for Relative Positions Improves
 * Long Context Transformers", ICLR 2024; the reference PyTorch module `FIRE` of the paper's appendix):
 *
 *     psi_c(x) = log(|c x| + 1)                      (the module takes |c x|: c of either sign stays finite)
 *     N(i)     = max(i, |m L_init|)                  i the 0-based query index; m = L_multiplier (learned)
 *     u(i, d)  = psi_c(d) / (psi_c(N(i)) + eps)      eps = 1e-6; u in [0, 1] for 0 <= d <= i
 *     b_h(u)   = (W2 ReLU(W1 u + b1) + b2)[h]        W1, b1: width; W2: H x width; b2: H
 *
 * The engine takes u apart as phi[d] = psi_c(d) and rscale[i] = 1 / (psi_c(N(i)) + eps) and reads the
 * MLP from a grid of u (plugin.h, BIASKIT_CAP_COORDINATE). Derivatives (derived; the signs follow the
 * module's |.|, sign(0) = 0 as torch.abs's gradient):
 *
 *     dpsi/dc  = x sign(c x) / (|c x| + 1)           dpsi/dx = c sign(c x) / (|c x| + 1)
 *     dN/dm    = L_init sign(m L_init) when |m L_init| > i, else 0 (rows i >= |m L_init| do not see m)
 *     drscale  = -rscale^2 dpsi(N)
 *     db_h/du  = sum_k W2[h,k] 1[W1_k u + b1_k > 0] W1_k       (ReLU'(0) = 0, as torch)
 *
 * Everything is evaluated in double (the engine computes these arrays on the host; the tables are
 * small) and rounded to float once. BIASKIT_HD so that a device copy could call the same code. */
#ifndef BK_FIRE_MATH_H
#define BK_FIRE_MATH_H

#include <biaskit/plugin.h>

#include <math.h>
#include <stdint.h>

#define BK_FIRE_EPS 1e-6            /* the module's eps, added to the normaliser */
#define BK_FIRE_DEFAULT_WIDTH 32    /* the module's mlp_width */
#define BK_FIRE_MAX_WIDTH 4096      /* far above the paper's 32; keeps theta small */
#define BK_FIRE_DEFAULT_C 0.1       /* the module's init_c */
#define BK_FIRE_DEFAULT_GRID 1025   /* grid points of u: measured (plugins/fire/README.md, "Grid") */
#define BK_FIRE_MAX_GRID 65536

/* torch.sign: -1, 0 or 1 */
static inline BIASKIT_HD double bk_fire_sign(double x)
{
    return (double)((x > 0.0) - (x < 0.0));
}

/* psi_c(x) = log(|c x| + 1), by log1p (|c x| is small near the diagonal) */
static inline BIASKIT_HD double bk_fire_psi(double c, double x)
{
    return log1p(fabs(c * x));
}

/* d psi_c(x) / dc = x sign(c x) / (|c x| + 1) */
static inline BIASKIT_HD double bk_fire_psi_dc(double c, double x)
{
    return x * bk_fire_sign(c * x) / (fabs(c * x) + 1.0);
}

/* d psi_c(x) / dx = c sign(c x) / (|c x| + 1) */
static inline BIASKIT_HD double bk_fire_psi_dx(double c, double x)
{
    return c * bk_fire_sign(c * x) / (fabs(c * x) + 1.0);
}

/* N(i) = max(i, |m L_init|) (torch.max(positions, threshold)) */
static inline BIASKIT_HD double bk_fire_normaliser(int32_t i, double m, double L_init)
{
    double n0 = fabs(m * L_init);
    return n0 > (double)i ? n0 : (double)i;
}

/* dN(i)/dm = L_init sign(m L_init) where the threshold wins (|m L_init| > i), else 0 */
static inline BIASKIT_HD double bk_fire_normaliser_dm(int32_t i, double m, double L_init)
{
    return fabs(m * L_init) > (double)i ? L_init * bk_fire_sign(m * L_init) : 0.0;
}

/* rscale(i) = 1 / (psi_c(N(i)) + eps) */
static inline BIASKIT_HD double bk_fire_rscale(int32_t i, double c, double m, double L_init)
{
    return 1.0 / (bk_fire_psi(c, bk_fire_normaliser(i, m, L_init)) + BK_FIRE_EPS);
}

/* d rscale(i) / dc = -rscale^2 dpsi_c(N)/dc */
static inline BIASKIT_HD double bk_fire_rscale_dc(int32_t i, double c, double m, double L_init)
{
    double r = bk_fire_rscale(i, c, m, L_init);
    return -r * r * bk_fire_psi_dc(c, bk_fire_normaliser(i, m, L_init));
}

/* d rscale(i) / dm = -rscale^2 dpsi_c(N)/dN dN/dm */
static inline BIASKIT_HD double bk_fire_rscale_dm(int32_t i, double c, double m, double L_init)
{
    double r = bk_fire_rscale(i, c, m, L_init);
    return -r * r * bk_fire_psi_dx(c, bk_fire_normaliser(i, m, L_init)) * bk_fire_normaliser_dm(i, m, L_init);
}

/* The grid's coordinate: u_g = g / (points - 1), points >= 2 */
static inline BIASKIT_HD double bk_fire_grid_u(int32_t g, int32_t points)
{
    return (double)g / (double)(points - 1);
}

/* Hidden unit k before the ReLU: W1_k u + b1_k */
static inline BIASKIT_HD double bk_fire_preact(float w1, float b1, double u)
{
    return (double)w1 * u + (double)b1;
}

static inline BIASKIT_HD double bk_fire_relu(double a)
{
    return a > 0.0 ? a : 0.0;
}

/* b_h(u) = b2_h + sum_k W2[h,k] ReLU(W1_k u + b1_k); w2 is row h of W2 (width values) */
static inline BIASKIT_HD double bk_fire_mlp(const float *w1, const float *b1, const float *w2, float b2, int32_t width,
                                            double u)
{
    double s = (double)b2;
    for (int32_t k = 0; k < width; k++)
        s += (double)w2[k] * bk_fire_relu(bk_fire_preact(w1[k], b1[k], u));
    return s;
}

/* db_h/du = sum_k W2[h,k] 1[W1_k u + b1_k > 0] W1_k */
static inline BIASKIT_HD double bk_fire_mlp_du(const float *w1, const float *b1, const float *w2, int32_t width, double u)
{
    double s = 0.0;
    for (int32_t k = 0; k < width; k++)
        if (bk_fire_preact(w1[k], b1[k], u) > 0.0)
            s += (double)w2[k] * (double)w1[k];
    return s;
}

/* theta of one layer: W1 (width), b1 (width), W2 (heads x width, row-major), b2 (heads), c, L_multiplier */
typedef struct bk_fire_layout {
    int64_t w1, b1, w2, b2, c, m, count;
} bk_fire_layout;

static inline BIASKIT_HD bk_fire_layout bk_fire_layout_of(int32_t heads, int32_t width)
{
    bk_fire_layout l;
    l.w1 = 0;
    l.b1 = l.w1 + width;
    l.w2 = l.b1 + width;
    l.b2 = l.w2 + (int64_t)heads * width;
    l.c = l.b2 + heads;
    l.m = l.c + 1;
    l.count = l.m + 1;
    return l;
}

#endif
