#include "bias/mix.h"

#include <math.h>

void bk_mix_tables(bk_mixing mode, const float *const *tables, const double *weights, int n_terms, size_t n,
                   float *out)
{
    if (mode == BK_MIX_SUM) {
        for (size_t k = 0; k < n; k++) {
            double acc = 0.0;
            for (int t = 0; t < n_terms; t++)
                acc += weights[t] * (double)tables[t][k];
            out[k] = (float)acc;
        }
        return;
    }
    for (size_t k = 0; k < n; k++) {
        double m = -INFINITY;
        for (int t = 0; t < n_terms; t++)
            if (weights[t] > 0.0 && tables[t][k] > m)
                m = tables[t][k];
        double acc = 0.0;
        for (int t = 0; t < n_terms; t++)
            if (weights[t] > 0.0)
                acc += weights[t] * exp((double)tables[t][k] - m);
        out[k] = (float)(m + log(acc));
    }
}

int bk_mix_weights(bk_mixing mode, double *weights, const char *const *labels, int n, bk_error *err)
{
    double total = 0.0;
    for (int t = 0; t < n; t++) {
        if (isnan(weights[t]))
            weights[t] = mode == BK_MIX_SUM ? 1.0 : 1.0 / n;
        if (mode == BK_MIX_KERNEL && weights[t] < 0.0)
            return bk_fail(err, BK_ERR_CONFIG,
                           "term '%s': weight %g is negative; kernel mixing needs weights >= 0 (a mixture of kernels)",
                           labels[t], weights[t]);
        total += weights[t];
    }
    if (mode == BK_MIX_KERNEL && n > 0) {
        if (!(total > 0.0))
            return bk_fail(err, BK_ERR_CONFIG, "kernel mixing needs a positive total weight, the weights sum to %g",
                           total);
        for (int t = 0; t < n; t++)
            weights[t] /= total;
    }
    return BK_OK;
}
