/* Receptive fields of a positional bias: the theoretical receptive field (TRF) and the arithmetic
 * shared with the empirical one (ERF) of Qin, Zhong & Deng, "Exploring Transformer Extrapolation",
 * AAAI 2024, arXiv 2307.10156 (§ "Theoretical Receptive Field", Eq. 22, and Appendix E's `draw`).
 * docs/receptive-field.md explains the quantities.
 *
 * Everything here is a function of an array w_t >= 0 indexed by the distance t = i - j (t = 0 is the
 * query itself): for the TRF w_t = b_t = exp(T_h(t)), a head's exponentiated distance table; for the
 * ERF w_t = the mean post-softmax attention at distance t. On a window of the first L values:
 *
 *     S_L      = sum_{t<L} w_t                                  (partial sum)
 *     RF_L(e)  = the smallest j in [0, L] with S_j >= (1 - e) S_L
 *
 * ">=" as the paper's `draw` code (its Eq. 22 writes ">"; the two differ only where a partial sum
 * lands exactly on the threshold). For 0 < e < 1 and w_0 > 0 the field is in [1, L]; RF_L(1) = 0 and
 * RF_L(0) is one past the last non-zero weight. Sums are compensated (Neumaier) in double. */
#ifndef BK_TRF_H
#define BK_TRF_H

#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

#define BK_RF_MAX_WINDOWS 16
#define BK_RF_MAX_EPS 16
/* how far TRF may move between the two largest windows for a series to count as settled */
#define BK_TRF_SETTLED_SHARE 0.05

/* The verdict on the two largest windows L' < L (bk_trf_result.verdict; docs/receptive-field.md):
 *   SETTLED    every TRF_L(eps) is within BK_TRF_SETTLED_SHARE (or one token) of TRF_L'(eps);
 *   SATURATED  some TRF moves more, but the tail (the share of the head's mass beyond L') is below the
 *              smallest eps asked: the partial sums have stopped growing at the precisions asked, and
 *              every TRF_L(eps) is <= L' (tail <= eps is exactly TRF_L(eps) <= L'). What moves is
 *              where inside L' a thin remainder of mass puts the threshold (a slowly converging series,
 *              or a floor too small to matter at these eps);
 *   GROWING    some TRF moves more and the tail holds at least the smallest eps of the mass: a
 *              divergent series, or one converging too slowly for these windows;
 *   NONE       a single window: no verdict. */
typedef enum bk_trf_verdict {
    BK_TRF_NONE = -1,
    BK_TRF_GROWING = 0,
    BK_TRF_SETTLED = 1,
    BK_TRF_SATURATED = 2
} bk_trf_verdict;

/* "settled", "saturated", "growing" or "-". */
const char *bk_trf_verdict_name(bk_trf_verdict v);
/* the number of epsilon values of the paper's `draw` curve */
#define BK_RF_CURVE_POINTS 50

/* prefix[j] = S_j = sum_{t<j} w[t] for j = 0 .. n (n + 1 values). */
void bk_rf_prefix(const double *w, int64_t n, double *prefix);

/* RF_L(eps) from the prefix sums of at least L values (L >= 1, 0 <= eps <= 1). */
int64_t bk_rf_field(const double *prefix, int64_t L, double eps);

/* The paper's `draw` (Appendix E): for eps[k] = 1 - k/(n-1), k = 0 .. n-1 (1 down to 0), the
 * normalised field RF_L(eps[k]) / L into field[k]. */
void bk_rf_curve(const double *prefix, int64_t L, int n, double *eps, double *field);

/* b[t] = exp(table[t] - m) for t < n, with m = max_t table[t], which is returned: the largest b is 1,
 * so no sum overflows or vanishes whatever the table's offset. Receptive fields and ratios of partial
 * sums do not depend on m; the partial sums of exp(T) are exp(m) S_L. */
double bk_rf_kernel(const float *table, int64_t n, double *b);

/* The TRF of one head on several windows. */
typedef struct bk_trf_result {
    int n_windows, n_eps;
    int64_t windows[BK_RF_MAX_WINDOWS];            /* increasing */
    double eps[BK_RF_MAX_EPS];
    double log_scale;                              /* m of bk_rf_kernel */
    double sum[BK_RF_MAX_WINDOWS];                 /* S_L of exp(T) = exp(m) * S_L of b (may be inf) */
    int64_t field[BK_RF_MAX_WINDOWS][BK_RF_MAX_EPS]; /* TRF_L(eps) */
    /* Growth of the partial sums between the two largest windows L' < L:
     *     tail = (S_L - S_L') / S_L   (the share of the largest window's mass beyond L'; 0 with one window)
     * and the verdict: `settled` = 1 when, for every eps, TRF_L(eps) differs from TRF_L'(eps) by at
     * most BK_TRF_SETTLED_SHARE of TRF_L'(eps) or by one token, whichever is more (the series looks
     * convergent at these precisions); 0 when one moves more (the series diverges, or converges too
     * slowly for these windows); -1 with a single window (no verdict). Windows far apart (10x and
     * more) make the verdict sharp: a divergent series' TRF grows about as fast as the window. */
    double tail;
    int settled;
    /* the classification (bk_trf_verdict above): `settled` refined by the tail against the smallest eps */
    bk_trf_verdict verdict;
    double tail_threshold; /* the smallest eps asked: the tail below which a moving TRF is SATURATED */
} bk_trf_result;

/* Analyse one row of b (at least windows[n_windows - 1] values, from bk_rf_kernel with scale
 * log_scale); `prefix` is scratch of windows[n_windows - 1] + 1 doubles. windows must be increasing
 * and >= 1, eps in (0, 1); BK_ERR_INVALID names what is wrong otherwise. */
int bk_trf_analyse(const double *b, double log_scale, const int64_t *windows, int n_windows, const double *eps,
                   int n_eps, double *prefix, bk_trf_result *out, bk_error *err);

/* Parse "512,9216,200000" (positive integers up to max, at most BK_RF_MAX_WINDOWS) into increasing
 * order, duplicates dropped; `option` names the option in BK_ERR_USAGE messages. */
int bk_rf_parse_windows(const char *text, const char *option, int64_t max, int64_t *out, int *n, bk_error *err);
/* Parse "0.1,0.01" (values in (0, 1), at most BK_RF_MAX_EPS, kept in the given order). */
int bk_rf_parse_eps(const char *text, const char *option, double *out, int *n, bk_error *err);

#endif
