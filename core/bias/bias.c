#include "bias/bias.h"

#include "bias/mix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t table_size(const bk_bias *b)
{
    return (size_t)b->n_heads * (size_t)b->capacity;
}

static float *term_table(const bk_bias *b, int layer, int term)
{
    return b->term_tables + ((size_t)layer * (size_t)b->set->n + (size_t)term) * table_size(b);
}

static float *mixed_table(const bk_bias *b, int layer, int stream)
{
    return b->mixed + ((size_t)layer * BK_STREAM_COUNT + (size_t)stream) * table_size(b);
}

void bk_bias_free(bk_bias *b)
{
    if (!b)
        return;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        free(b->on[s]);
        free(b->mix_params[s]);
        free(b->mix_grads[s]);
    }
    for (int t = 0; b->dtheta && t < b->set->n; t++)
        free(b->dtheta[t]);
    free(b->dtheta);
    free(b->term_tables);
    free(b->mixed);
    free(b->scratch);
    memset(b, 0, sizeof *b);
}

/* The current weights of the terms on stream s, in their order on the stream. */
static void stream_weights(const bk_bias *b, int s, double *w)
{
    for (int k = 0; k < b->n_on[s]; k++)
        w[k] = b->set->terms[b->on[s][k]].weight;
}

int bk_bias_init(bk_bias *b, bk_term_set *set, int n_layers, int learn_weights, bk_error *err)
{
    memset(b, 0, sizeof *b);
    b->set = set;
    b->n_layers = n_layers;
    b->n_heads = set->geometry.n_heads;
    b->learn_weights = learn_weights;
    b->check_finite = 1;
    b->dtheta = calloc((size_t)(set->n ? set->n : 1), sizeof *b->dtheta);
    if (!b->dtheta)
        goto nomem;
    for (int t = 0; t < set->n; t++) {
        const bk_term *term = &set->terms[t];
        size_t n = (size_t)term->n_copies * (size_t)term->n_params;
        if (n && !(b->dtheta[t] = calloc(n, sizeof(float))))
            goto nomem;
    }
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        for (int t = 0; t < set->n; t++)
            b->n_on[s] += set->terms[t].stream == (bk_stream)s && bk_term_has_table(&set->terms[t]);
        if (!b->n_on[s])
            continue;
        b->on[s] = calloc((size_t)b->n_on[s], sizeof *b->on[s]);
        b->mix_params[s] = calloc((size_t)b->n_on[s], sizeof(float));
        b->mix_grads[s] = calloc((size_t)b->n_on[s], sizeof(float));
        if (!b->on[s] || !b->mix_params[s] || !b->mix_grads[s])
            goto nomem;
        for (int t = 0, k = 0; t < set->n; t++)
            if (set->terms[t].stream == (bk_stream)s && bk_term_has_table(&set->terms[t]))
                b->on[s][k++] = t;
        double w[b->n_on[s]];
        stream_weights(b, s, w);
        bk_mix_params_from_weights(set->mixing, w, b->n_on[s], b->mix_params[s]);
    }
    if (learn_weights)
        bk_bias_sync_weights(b); /* kernel mode: weights as the softmax of their parameters exactly */
    return BK_OK;
nomem:
    bk_bias_free(b);
    return bk_fail(err, BK_ERR_NOMEM, "out of memory setting up the positional terms");
}

static int reserve(bk_bias *b, int32_t distances, bk_error *err)
{
    if (distances <= b->capacity)
        return BK_OK;
    size_t per = (size_t)b->n_heads * (size_t)distances;
    size_t n_terms = (size_t)(b->set->n ? b->set->n : 1);
    float *terms = malloc((size_t)b->n_layers * n_terms * per * sizeof(float));
    float *mixed = malloc((size_t)b->n_layers * BK_STREAM_COUNT * per * sizeof(float));
    float *scratch = malloc(n_terms * per * sizeof(float));
    if (!terms || !mixed || !scratch) {
        free(terms), free(mixed), free(scratch);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for distance tables of length %d", (int)distances);
    }
    free(b->term_tables), free(b->mixed), free(b->scratch);
    b->term_tables = terms, b->mixed = mixed, b->scratch = scratch;
    b->capacity = distances;
    return BK_OK;
}

int bk_bias_forward(bk_bias *b, int32_t distances, bk_error *err)
{
    if (distances <= 0)
        return bk_fail(err, BK_ERR_INVALID, "table length must be positive, got %d", (int)distances);
    int rc = reserve(b, distances, err);
    if (rc)
        return rc;
    b->distances = distances;
    size_t n = (size_t)b->n_heads * (size_t)distances;
    for (int l = 0; l < b->n_layers; l++) {
        for (int t = 0; t < b->set->n; t++) {
            const bk_term *term = &b->set->terms[t];
            if (!bk_term_has_table(term))
                continue;
            if (l > 0 && term->n_copies == 1) /* shared parameters: the same table on every layer */
                memcpy(term_table(b, l, t), term_table(b, 0, t), n * sizeof(float));
            else if ((rc = bk_term_table_at(term, term->n_copies > 1 ? l : -1, b->step, b->check_finite, distances,
                                            term_table(b, l, t), err)))
                return rc;
        }
        for (int s = 0; s < BK_STREAM_COUNT; s++) {
            if (!b->n_on[s])
                continue;
            const float *tables[b->n_on[s]];
            double w[b->n_on[s]];
            for (int k = 0; k < b->n_on[s]; k++)
                tables[k] = term_table(b, l, b->on[s][k]);
            stream_weights(b, s, w);
            bk_mix_tables(b->set->mixing, tables, w, b->n_on[s], n, mixed_table(b, l, s));
        }
    }
    return BK_OK;
}

const float *bk_bias_table(const bk_bias *b, int layer, bk_stream stream)
{
    return b->n_on[stream] ? mixed_table(b, layer, (int)stream) : NULL;
}

static int all_finite(const float *x, size_t n)
{
    float acc = 0.0f; /* x - x is 0 for a finite x, NaN for a NaN or an inf */
    for (size_t i = 0; i < n; i++)
        acc += x[i] - x[i];
    return acc == acc;
}

static void note_nonfinite_grad(bk_bias *b, const bk_term *term, const float *dtheta, const char *where)
{
    int64_t i = 0;
    while (i < term->n_params && isfinite(dtheta[i]))
        i++;
    snprintf(b->nonfinite, sizeof b->nonfinite,
             "term '%s' (plugin %s, %s)%s: table_backward() gave a non-finite gradient %g for parameter %lld of "
             "%lld from a finite dL/dT",
             term->label, term->plugin->desc->name, term->plugin->path, where,
             (double)dtheta[i < term->n_params ? i : 0], (long long)i, (long long)term->n_params);
}

int bk_bias_backward(bk_bias *b, int layer, const float *const dmixed[BK_STREAM_COUNT], bk_error *err)
{
    size_t n = (size_t)b->n_heads * (size_t)b->distances;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        int count = b->n_on[s];
        if (!count || !dmixed[s])
            continue;
        const float *tables[count];
        float *dtables[count];
        double w[count], dw[count];
        for (int k = 0; k < count; k++) {
            const bk_term *term = &b->set->terms[b->on[s][k]];
            tables[k] = term_table(b, layer, b->on[s][k]);
            dtables[k] = term->n_params ? b->scratch + (size_t)k * n : NULL;
            if (dtables[k])
                memset(dtables[k], 0, n * sizeof(float));
            dw[k] = 0.0;
        }
        stream_weights(b, s, w);
        bk_mix_backward(b->set->mixing, tables, w, count, n, mixed_table(b, layer, s), dmixed[s], dtables, dw);
        if (b->learn_weights)
            bk_mix_params_backward(b->set->mixing, w, dw, count, b->mix_grads[s]);
        for (int k = 0; k < count; k++) {
            if (!dtables[k])
                continue;
            int t = b->on[s][k];
            const bk_term *term = &b->set->terms[t];
            const biaskit_plugin *d = term->plugin->desc;
            if (!d->table_backward)
                return bk_fail(err, BK_ERR_PLUGIN, "term '%s' (plugin %s) has %lld parameters but no table_backward()",
                               term->label, d->name, (long long)term->n_params);
            int copy = term->n_copies > 1 ? layer : 0;
            float *dtheta = b->dtheta[t] + (size_t)copy * (size_t)term->n_params;
            int was_finite = b->check_finite && !b->nonfinite[0] && all_finite(dtheta, (size_t)term->n_params);
            biaskit_error pe = {0, ""};
            bk_plugin_call_enter(term, "table_backward()", layer, b->step);
            int rc = d->table_backward(term->instance, bk_term_theta(term, layer), b->distances, dtables[k], dtheta,
                                       &pe);
            bk_plugin_call_leave();
            char where[64];
            if (rc != BIASKIT_OK)
                return bk_fail(err, BK_ERR_PLUGIN, "term '%s' (plugin %s, %s)%s: table_backward() failed: %s",
                               term->label, d->name, term->plugin->path,
                               bk_term_where(layer, b->step, where, sizeof where),
                               pe.message[0] ? pe.message : "no message given");
            /* blame the plugin only when what it was given, dL/dT, was finite */
            if (was_finite && !all_finite(dtheta, (size_t)term->n_params) && all_finite(dtables[k], n))
                note_nonfinite_grad(b, term, dtheta, bk_term_where(layer, b->step, where, sizeof where));
        }
    }
    return BK_OK;
}

void bk_bias_zero_grad(bk_bias *b)
{
    b->nonfinite[0] = '\0';
    for (int t = 0; t < b->set->n; t++) {
        const bk_term *term = &b->set->terms[t];
        if (b->dtheta[t])
            memset(b->dtheta[t], 0, (size_t)term->n_copies * (size_t)term->n_params * sizeof(float));
    }
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (b->n_on[s])
            memset(b->mix_grads[s], 0, (size_t)b->n_on[s] * sizeof(float));
}

int bk_bias_project(bk_bias *b, bk_error *err)
{
    for (int t = 0; t < b->set->n; t++) {
        const bk_term *term = &b->set->terms[t];
        if (!term->n_params || !term->plugin->desc->param_project)
            continue;
        for (int c = 0; c < term->n_copies; c++) {
            float *theta = term->theta + (size_t)c * (size_t)term->n_params;
            int layer = term->n_copies > 1 ? c : -1;
            bk_plugin_call_enter(term, "param_project()", layer, b->step);
            term->plugin->desc->param_project(term->instance, theta);
            bk_plugin_call_leave();
            if (b->check_finite && !all_finite(theta, (size_t)term->n_params)) {
                char where[64];
                return bk_fail(err, BK_ERR_PLUGIN, "term '%s' (plugin %s, %s)%s: param_project() left a parameter "
                               "that is not finite", term->label, term->plugin->desc->name, term->plugin->path,
                               bk_term_where(layer, b->step, where, sizeof where));
            }
        }
    }
    return BK_OK;
}

void bk_bias_sync_weights(bk_bias *b)
{
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (!b->n_on[s])
            continue;
        double w[b->n_on[s]];
        bk_mix_weights_from_params(b->set->mixing, b->mix_params[s], b->n_on[s], w);
        for (int k = 0; k < b->n_on[s]; k++)
            b->set->terms[b->on[s][k]].weight = w[k];
    }
}
