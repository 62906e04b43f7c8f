#include "analysis/trf.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

void bk_rf_prefix(const double *w, int64_t n, double *prefix)
{
    double sum = 0.0, c = 0.0; /* Neumaier: c collects the low-order bits lost by sum */
    prefix[0] = 0.0;
    for (int64_t t = 0; t < n; t++) {
        double y = sum + w[t];
        c += fabs(sum) >= fabs(w[t]) ? (sum - y) + w[t] : (w[t] - y) + sum;
        sum = y;
        prefix[t + 1] = sum + c;
    }
}

int64_t bk_rf_field(const double *prefix, int64_t L, double eps)
{
    const double threshold = (1.0 - eps) * prefix[L];
    int64_t j = 0; /* the first j, scanning forward: j = L always qualifies */
    while (j < L && !(prefix[j] >= threshold))
        j++;
    return j;
}

void bk_rf_curve(const double *prefix, int64_t L, int n, double *eps, double *field)
{
    for (int k = 0; k < n; k++) {
        eps[k] = n > 1 ? 1.0 - (double)k / (double)(n - 1) : 0.0;
        field[k] = (double)bk_rf_field(prefix, L, eps[k]) / (double)L;
    }
}

double bk_rf_kernel(const float *table, int64_t n, double *b)
{
    double m = -INFINITY;
    for (int64_t t = 0; t < n; t++)
        m = (double)table[t] > m ? (double)table[t] : m;
    for (int64_t t = 0; t < n; t++)
        b[t] = exp((double)table[t] - m);
    return m;
}

int bk_trf_analyse(const double *b, double log_scale, const int64_t *windows, int n_windows, const double *eps,
                   int n_eps, double *prefix, bk_trf_result *out, bk_error *err)
{
    if (n_windows < 1 || n_windows > BK_RF_MAX_WINDOWS || n_eps < 1 || n_eps > BK_RF_MAX_EPS)
        return bk_fail(err, BK_ERR_INVALID, "receptive field: expected 1 to %d windows and 1 to %d epsilons, got %d "
                       "and %d", BK_RF_MAX_WINDOWS, BK_RF_MAX_EPS, n_windows, n_eps);
    for (int w = 0; w < n_windows; w++)
        if (windows[w] < 1 || (w && windows[w] <= windows[w - 1]))
            return bk_fail(err, BK_ERR_INVALID, "receptive field: windows must be increasing and >= 1; window %d is "
                           "%lld", w + 1, (long long)windows[w]);
    for (int e = 0; e < n_eps; e++)
        if (!(eps[e] > 0.0 && eps[e] < 1.0))
            return bk_fail(err, BK_ERR_INVALID, "receptive field: epsilon %d is %g, expected a value in (0, 1)", e + 1,
                           eps[e]);
    out->n_windows = n_windows, out->n_eps = n_eps;
    out->log_scale = log_scale;
    const int64_t longest = windows[n_windows - 1];
    bk_rf_prefix(b, longest, prefix);
    if (!(prefix[longest] > 0.0) || !isfinite(prefix[longest]))
        return bk_fail(err, BK_ERR_INVALID, "receptive field: the weights of %lld distances sum to %g, expected a "
                       "positive finite sum", (long long)longest, prefix[longest]);
    for (int e = 0; e < n_eps; e++)
        out->eps[e] = eps[e];
    for (int w = 0; w < n_windows; w++) {
        out->windows[w] = windows[w];
        out->sum[w] = exp(log_scale) * prefix[windows[w]];
        for (int e = 0; e < n_eps; e++)
            out->field[w][e] = bk_rf_field(prefix, windows[w], eps[e]);
    }
    out->tail = 0.0;
    out->settled = -1;
    out->verdict = BK_TRF_NONE;
    out->tail_threshold = eps[0];
    for (int e = 1; e < n_eps; e++)
        out->tail_threshold = eps[e] < out->tail_threshold ? eps[e] : out->tail_threshold;
    if (n_windows > 1) {
        const int64_t prev = windows[n_windows - 2];
        out->tail = (prefix[longest] - prefix[prev]) / prefix[longest];
        out->settled = 1;
        for (int e = 0; e < n_eps; e++) {
            const double before = (double)out->field[n_windows - 2][e], after = (double)out->field[n_windows - 1][e];
            const double slack = BK_TRF_SETTLED_SHARE * before > 1.0 ? BK_TRF_SETTLED_SHARE * before : 1.0;
            if (fabs(after - before) > slack)
                out->settled = 0;
        }
        /* tail < eps_min: S_L' > (1 - eps) S_L for every eps, so every TRF_L(eps) <= L' */
        out->verdict = out->settled ? BK_TRF_SETTLED
                       : out->tail < out->tail_threshold ? BK_TRF_SATURATED
                                                         : BK_TRF_GROWING;
    }
    return BK_OK;
}

const char *bk_trf_verdict_name(bk_trf_verdict v)
{
    switch (v) {
    case BK_TRF_SETTLED: return "settled";
    case BK_TRF_SATURATED: return "saturated";
    case BK_TRF_GROWING: return "growing";
    default: return "-";
    }
}

static int cmp_int64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int bk_rf_parse_windows(const char *text, const char *option, int64_t max, int64_t *out, int *n, bk_error *err)
{
    *n = 0;
    for (const char *p = text; *p;) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 1 || v > max || (*end && *end != ','))
            return bk_fail(err, BK_ERR_USAGE, "--%s: expected integers in [1, %lld] separated by commas, got '%s'",
                           option, (long long)max, text);
        if (*n == BK_RF_MAX_WINDOWS)
            return bk_fail(err, BK_ERR_USAGE, "--%s: at most %d values", option, BK_RF_MAX_WINDOWS);
        out[(*n)++] = v;
        p = *end ? end + 1 : end;
    }
    if (!*n)
        return bk_fail(err, BK_ERR_USAGE, "--%s: expected integers separated by commas, got nothing", option);
    qsort(out, (size_t)*n, sizeof *out, cmp_int64);
    int k = 1;
    for (int i = 1; i < *n; i++)
        if (out[i] != out[k - 1])
            out[k++] = out[i];
    *n = k;
    return BK_OK;
}

int bk_rf_parse_eps(const char *text, const char *option, double *out, int *n, bk_error *err)
{
    *n = 0;
    for (const char *p = text; *p;) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || !(v > 0.0 && v < 1.0) || (*end && *end != ','))
            return bk_fail(err, BK_ERR_USAGE, "--%s: expected numbers in (0, 1) separated by commas, got '%s'", option,
                           text);
        if (*n == BK_RF_MAX_EPS)
            return bk_fail(err, BK_ERR_USAGE, "--%s: at most %d values", option, BK_RF_MAX_EPS);
        out[(*n)++] = v;
        p = *end ? end + 1 : end;
    }
    if (!*n)
        return bk_fail(err, BK_ERR_USAGE, "--%s: expected numbers separated by commas, got nothing", option);
    return BK_OK;
}
