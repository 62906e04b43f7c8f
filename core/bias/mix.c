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

void bk_mix_backward(bk_mixing mode, const float *const *tables, const double *weights, int n_terms, size_t n,
                     const float *mixed, const float *dout, float *const *dtables, double *dweights)
{
    for (int t = 0; t < n_terms; t++) {
        /* A kernel-mode term of weight 0 takes no part in M (see bk_mix_tables): its table gets no
         * gradient, and dM/dw_t = exp(T_t - M) is left out too, since T_t - M may exceed the range of
         * exp() and 0 * inf would poison the other terms' gradients through the softmax backward. */
        if (mode == BK_MIX_KERNEL && !(weights[t] > 0.0))
            continue;
        double dw = 0.0;
        for (size_t k = 0; k < n; k++) {
            double g = dout[k];
            /* dM/dw_t: T_t (sum) or exp(T_t - M) (kernel); dM/dT_t = w_t times that in kernel mode */
            double dm_dw = mode == BK_MIX_SUM ? (double)tables[t][k] : exp((double)tables[t][k] - (double)mixed[k]);
            double dm_dt = mode == BK_MIX_SUM ? weights[t] : weights[t] * dm_dw;
            if (dtables && dtables[t])
                dtables[t][k] += (float)(g * dm_dt);
            dw += g * dm_dw;
        }
        if (dweights)
            dweights[t] += dw;
    }
}

void bk_mix_tables_grouped(bk_mixing mode, const float *const *tables, const double *weights, int groups,
                           int n_terms, size_t n, float *out)
{
    const size_t per = n / (size_t)groups;
    const float *part[n_terms > 0 ? n_terms : 1];
    for (int g = 0; g < groups; g++) {
        for (int t = 0; t < n_terms; t++)
            part[t] = tables[t] + (size_t)g * per;
        bk_mix_tables(mode, part, weights + (size_t)g * (size_t)n_terms, n_terms, per, out + (size_t)g * per);
    }
}

void bk_mix_backward_grouped(bk_mixing mode, const float *const *tables, const double *weights, int groups,
                             int n_terms, size_t n, const float *mixed, const float *dout, float *const *dtables,
                             double *dweights)
{
    const size_t per = n / (size_t)groups;
    const float *part[n_terms > 0 ? n_terms : 1];
    float *dpart[n_terms > 0 ? n_terms : 1];
    for (int g = 0; g < groups; g++) {
        const size_t at = (size_t)g * per;
        for (int t = 0; t < n_terms; t++) {
            part[t] = tables[t] + at;
            dpart[t] = dtables && dtables[t] ? dtables[t] + at : NULL;
        }
        bk_mix_backward(mode, part, weights + (size_t)g * (size_t)n_terms, n_terms, per, mixed + at, dout + at,
                        dtables ? dpart : NULL, dweights ? dweights + (size_t)g * (size_t)n_terms : NULL);
    }
}

/* weights = the mixing rule's map of logits (sum: themselves; kernel: their softmax), in double. */
static void weights_from_logits(bk_mixing mode, const double *logits, int n, double *weights)
{
    if (mode == BK_MIX_SUM) {
        for (int t = 0; t < n; t++)
            weights[t] = logits[t];
        return;
    }
    double m = -INFINITY, total = 0.0;
    for (int t = 0; t < n; t++)
        m = logits[t] > m ? logits[t] : m;
    for (int t = 0; t < n; t++)
        total += weights[t] = exp(logits[t] - m);
    for (int t = 0; t < n; t++)
        weights[t] /= total;
}

void bk_mix_weights_from_params(bk_mixing mode, const float *params, int n, double *weights)
{
    double logits[n > 0 ? n : 1];
    for (int t = 0; t < n; t++)
        logits[t] = params[t];
    weights_from_logits(mode, logits, n, weights);
}

void bk_mix_params_from_weights(bk_mixing mode, const double *weights, int n, float *params)
{
    for (int t = 0; t < n; t++) /* softmax(log w) = w on the simplex; a zero weight stays (almost) zero */
        params[t] = mode == BK_MIX_SUM ? (float)weights[t] : (float)log(weights[t] > 1e-30 ? weights[t] : 1e-30);
}

void bk_mix_params_backward(bk_mixing mode, const double *weights, const double *dweights, int n, float *dparams)
{
    if (mode == BK_MIX_SUM) {
        for (int t = 0; t < n; t++)
            dparams[t] += (float)dweights[t];
        return;
    }
    /* softmax Jacobian: da_t = w_t (dw_t - sum_u w_u dw_u); a weight of exactly 0 (softmax underflow)
     * contributes w_t dw_t -> 0, so it is skipped rather than multiplied into 0 * (a huge dw_t). */
    double mean = 0.0;
    for (int t = 0; t < n; t++)
        if (weights[t] > 0.0)
            mean += weights[t] * dweights[t];
    for (int t = 0; t < n; t++)
        if (weights[t] > 0.0)
            dparams[t] += (float)(weights[t] * (dweights[t] - mean));
}

int bk_mix_param_count(const unsigned char *kind, int n_terms, int groups)
{
    int count = 0;
    for (int t = 0; t < n_terms; t++)
        count += kind[t] == BK_MIX_LEARNED ? 1 : kind[t] == BK_MIX_LEARNED_PER_HEAD ? groups : 0;
    return count;
}

void bk_mix_params_init(bk_mixing mode, const unsigned char *kind, int n_terms, int groups, const double *w,
                        float *params, double *logits)
{
    for (int t = 0, p = 0; t < n_terms; t++) {
        double fixed = mode == BK_MIX_SUM ? w[t] : w[t] > 0.0 ? log(w[t]) : -INFINITY;
        float learned = 0.0f;
        bk_mix_params_from_weights(mode, &w[t], 1, &learned);
        for (int g = 0; g < groups; g++)
            logits[(size_t)g * (size_t)n_terms + (size_t)t] = kind[t] == BK_MIX_FIXED ? fixed : (double)learned;
        if (kind[t] == BK_MIX_LEARNED)
            params[p++] = learned;
        else if (kind[t] == BK_MIX_LEARNED_PER_HEAD)
            for (int g = 0; g < groups; g++)
                params[p++] = learned;
    }
}

void bk_mix_weights_from_packed(bk_mixing mode, const unsigned char *kind, int n_terms, int groups,
                                const float *params, double *logits, double *weights)
{
    for (int t = 0, p = 0; t < n_terms; t++) {
        if (kind[t] == BK_MIX_FIXED)
            continue;
        for (int g = 0; g < groups; g++)
            logits[(size_t)g * (size_t)n_terms + (size_t)t] = params[kind[t] == BK_MIX_LEARNED ? p : p + g];
        p += kind[t] == BK_MIX_LEARNED ? 1 : groups;
    }
    for (int g = 0; g < groups; g++)
        weights_from_logits(mode, logits + (size_t)g * (size_t)n_terms, n_terms, weights + (size_t)g * (size_t)n_terms);
}

void bk_mix_packed_backward(bk_mixing mode, const unsigned char *kind, int n_terms, int groups,
                            const double *weights, const double *dweights, float *dparams)
{
    double mean[groups > 0 ? groups : 1];
    for (int g = 0; g < groups; g++) { /* kernel: the softmax Jacobian's sum_u w_u dw_u of each row */
        const double *w = weights + (size_t)g * (size_t)n_terms, *dw = dweights + (size_t)g * (size_t)n_terms;
        mean[g] = 0.0;
        for (int t = 0; mode == BK_MIX_KERNEL && t < n_terms; t++)
            if (w[t] > 0.0)
                mean[g] += w[t] * dw[t];
    }
    for (int t = 0, p = 0; t < n_terms; t++) {
        if (kind[t] == BK_MIX_FIXED)
            continue;
        double shared = 0.0;
        int any = 0;
        for (int g = 0; g < groups; g++) {
            const size_t at = (size_t)g * (size_t)n_terms + (size_t)t;
            /* as bk_mix_params_backward: a kernel weight of exactly 0 contributes nothing */
            if (mode == BK_MIX_KERNEL && !(weights[at] > 0.0))
                continue;
            double d = mode == BK_MIX_SUM ? dweights[at] : weights[at] * (dweights[at] - mean[g]);
            if (kind[t] == BK_MIX_LEARNED_PER_HEAD)
                dparams[p + g] += (float)d;
            else
                shared = any ? shared + d : d, any = 1;
        }
        if (kind[t] == BK_MIX_LEARNED && any)
            dparams[p] += (float)shared;
        p += kind[t] == BK_MIX_LEARNED ? 1 : groups;
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
