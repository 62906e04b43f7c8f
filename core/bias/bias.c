#include "bias/bias.h"

#include "bias/mix.h"
#include "plugin/services.h"

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

/* Tables in the backend's memory: on a device backend its buffers, else host (malloc). */
static int on_device(const bk_bias *b)
{
    return b->be && b->be->on_device;
}

/* Plugins' CUDA functions are called on a CUDA backend only (never emulated, never the CPU). */
static int calls_cuda(const bk_bias *b)
{
    return b->be && b->be->kind == BK_BACKEND_CUDA;
}

static void table_buffers_free(bk_bias *b)
{
    if (on_device(b)) {
        b->be->release(b->be, b->term_tables);
        b->be->release(b->be, b->mixed);
        b->be->release(b->be, b->scratch);
        if (b->capped)
            b->be->release(b->be, b->capped);
        if (b->capped_grad)
            b->be->release(b->be, b->capped_grad);
    } else {
        free(b->term_tables), free(b->mixed), free(b->scratch), free(b->capped), free(b->capped_grad);
    }
    free(b->host_table);
    b->term_tables = b->mixed = b->scratch = b->host_table = b->capped = b->capped_grad = NULL;
    b->capacity = 0;
}

/* Everything bk_bias_set_backend allocated in the backend's memory. */
static void device_state_free(bk_bias *b)
{
    for (int t = 0; b->set && t < b->set->n; t++) {
        if (b->theta_dev && b->theta_dev[t])
            b->be->release(b->be, b->theta_dev[t]);
        if (b->dtheta_dev && b->dtheta_dev[t])
            b->be->release(b->be, b->dtheta_dev[t]);
    }
    free(b->theta_dev), free(b->dtheta_dev), free(b->host_grad);
    b->theta_dev = b->dtheta_dev = NULL;
    b->host_grad = NULL;
}

void bk_bias_free(bk_bias *b)
{
    if (!b)
        return;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        free(b->on[s]);
        free(b->kind[s]);
        free(b->mix_params[s]);
        free(b->mix_grads[s]);
        free(b->logits[s]);
    }
    for (int t = 0; b->dtheta && t < b->set->n; t++)
        free(b->dtheta[t]);
    free(b->dtheta);
    table_buffers_free(b);
    device_state_free(b);
    free(b->cuda_tables), free(b->host_tables), free(b->cuda_backwards), free(b->host_backwards);
    free(b->logged), free(b->dtable_nonfinite);
    bk_query_free(&b->query);
    bk_content_free(&b->content);
    memset(b, 0, sizeof *b);
}

/* The current weights of the terms on stream s, groups[s] rows of them in their order on the stream:
 * w[g * n_on + k]. */
static void stream_weights(const bk_bias *b, int s, double *w)
{
    const int n = b->n_on[s];
    for (int g = 0; g < b->groups[s]; g++)
        for (int k = 0; k < n; k++) {
            const bk_term *t = &b->set->terms[b->on[s][k]];
            w[g * n + k] = b->groups[s] > 1 ? bk_term_weight_at(t, g) : t->weight;
        }
}

/* The terms of stream s that act in layer l ([[term]] layers): idx[k] their positions in b->on[s], in
 * order; returns their number (b->n_on[s] when every term acts in every layer). */
static int layer_terms(const bk_bias *b, int l, int s, int *idx)
{
    int count = 0;
    for (int k = 0; k < b->n_on[s]; k++)
        if (bk_term_on_layer(&b->set->terms[b->on[s][k]], l))
            idx[count++] = k;
    return count;
}

/* The weights of those terms (groups rows, as stream_weights) from the stream's w (groups x n_on). */
static void layer_weights(const bk_bias *b, int s, const double *w, const int *idx, int count, double *out)
{
    for (int g = 0; g < b->groups[s]; g++)
        for (int k = 0; k < count; k++)
            out[g * count + k] = w[g * b->n_on[s] + idx[k]];
}

/* 1 when layer l's tables are capped (the distance cap of the mask term, where that term acts). */
static int capped_at(const bk_bias *b, int l)
{
    return b->distance_cap && bk_mask_on_layer(b->set, l);
}

int bk_bias_init(bk_bias *b, bk_term_set *set, int n_layers, int learn_weights, bk_error *err)
{
    memset(b, 0, sizeof *b);
    b->set = set;
    b->n_layers = n_layers;
    b->n_heads = set->geometry.n_heads;
    b->check_finite = 1;
    b->training = 1;
    size_t n_terms = (size_t)(set->n ? set->n : 1);
    b->dtheta = calloc(n_terms, sizeof *b->dtheta);
    b->cuda_tables = calloc(n_terms, sizeof *b->cuda_tables);
    b->host_tables = calloc(n_terms, sizeof *b->host_tables);
    b->cuda_backwards = calloc(n_terms, sizeof *b->cuda_backwards);
    b->host_backwards = calloc(n_terms, sizeof *b->host_backwards);
    b->logged = calloc(n_terms, 1);
    b->dtable_nonfinite = calloc(n_terms, 1);
    if (!b->dtheta || !b->cuda_tables || !b->host_tables || !b->cuda_backwards || !b->host_backwards || !b->logged ||
        !b->dtable_nonfinite)
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
        const int n = b->n_on[s];
        b->on[s] = calloc((size_t)n, sizeof *b->on[s]);
        b->kind[s] = calloc((size_t)n, 1);
        if (!b->on[s] || !b->kind[s])
            goto nomem;
        b->groups[s] = 1;
        for (int t = 0, k = 0; t < set->n; t++)
            if (set->terms[t].stream == (bk_stream)s && bk_term_has_table(&set->terms[t])) {
                const bk_term *term = &set->terms[t];
                b->kind[s][k] = !learn_weights || !term->learn_weight ? BK_MIX_FIXED
                                : term->weight_per_head             ? BK_MIX_LEARNED_PER_HEAD
                                                                    : BK_MIX_LEARNED;
                if (b->kind[s][k] == BK_MIX_LEARNED_PER_HEAD)
                    b->groups[s] = b->n_heads;
                b->on[s][k++] = t;
            }
        b->n_mix[s] = bk_mix_param_count(b->kind[s], n, b->groups[s]);
        b->learn_weights |= b->n_mix[s] > 0;
        const size_t room = (size_t)(b->n_mix[s] > n ? b->n_mix[s] : n);
        b->mix_params[s] = calloc(room, sizeof(float));
        b->mix_grads[s] = calloc(room, sizeof(float));
        b->logits[s] = calloc((size_t)b->groups[s] * (size_t)n, sizeof(double));
        if (!b->mix_params[s] || !b->mix_grads[s] || !b->logits[s])
            goto nomem;
        double w[n]; /* the configured weights (a per-head term's rows all start at its weight) */
        for (int k = 0; k < n; k++)
            w[k] = set->terms[b->on[s][k]].weight;
        bk_mix_params_init(set->mixing, b->kind[s], n, b->groups[s], w, b->mix_params[s], b->logits[s]);
    }
    if (b->learn_weights)
        bk_bias_sync_weights(b); /* kernel mode: weights as the softmax of their parameters exactly */
    int rc = bk_query_init(&b->query, set, n_layers, err);
    if (!rc)
        bk_content_init(&b->content, set);
    if (rc)
        bk_bias_free(b);
    return rc;
nomem:
    bk_bias_free(b);
    return bk_fail(err, BK_ERR_NOMEM, "out of memory setting up the positional terms");
}

int bk_bias_set_backend(bk_bias *b, bk_backend *be, bk_error *err)
{
    if (b->be == be)
        return BK_OK;
    table_buffers_free(b); /* reallocated in the new memory by the next forward */
    device_state_free(b);
    b->be = be;
    b->zero_pending = 0;
    int qrc = bk_query_set_backend(&b->query, be, err);
    if (!qrc)
        qrc = bk_content_set_backend(&b->content, be, err);
    if (qrc)
        return qrc;
    if (!on_device(b) || !calls_cuda(b))
        return BK_OK;
    size_t n_terms = (size_t)(b->set->n ? b->set->n : 1), largest = 0;
    b->theta_dev = calloc(n_terms, sizeof *b->theta_dev);
    b->dtheta_dev = calloc(n_terms, sizeof *b->dtheta_dev);
    if (!b->theta_dev || !b->dtheta_dev)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory setting up the positional terms on the %s backend", be->name);
    for (int t = 0; t < b->set->n; t++) {
        const bk_term *term = &b->set->terms[t];
        const biaskit_plugin *d = term->plugin->desc;
        size_t bytes = (size_t)term->n_copies * (size_t)term->n_params * sizeof(float);
        if (!bk_term_has_table(term) || !term->n_params)
            continue;
        int rc = BK_OK;
        if (d->table_cuda || d->table_backward_cuda)
            rc = be->alloc(be, (void **)&b->theta_dev[t], bytes, err);
        if (!rc && d->table_backward_cuda) {
            rc = be->alloc(be, (void **)&b->dtheta_dev[t], bytes, err);
            largest = bytes > largest ? bytes : largest;
        }
        if (rc)
            return bk_error_prefix(err, "device parameters of term '%s' (plugin %s, %lld floats): ", term->label,
                                   d->name, (long long)(bytes / sizeof(float)));
    }
    if (largest && !(b->host_grad = malloc(largest)))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the staging of device gradients");
    return BK_OK;
}

/* n floats of the bias's memory: the backend's on a device, else the host's. */
static int table_alloc(bk_bias *b, float **out, size_t n, bk_error *err)
{
    if (on_device(b))
        return b->be->alloc(b->be, (void **)out, n * sizeof(float), err);
    *out = malloc(n * sizeof(float));
    return *out ? BK_OK : bk_fail(err, BK_ERR_NOMEM, "out of memory for %zu table values", n);
}

static int reserve(bk_bias *b, int32_t distances, bk_error *err)
{
    if (distances <= b->capacity)
        return BK_OK;
    table_buffers_free(b);
    size_t per = (size_t)b->n_heads * (size_t)distances;
    size_t n_terms = (size_t)(b->set->n ? b->set->n : 1);
    int rc = table_alloc(b, &b->term_tables, (size_t)b->n_layers * n_terms * per, err);
    if (!rc)
        rc = table_alloc(b, &b->mixed, (size_t)b->n_layers * BK_STREAM_COUNT * per, err);
    if (!rc)
        rc = table_alloc(b, &b->scratch, n_terms * per, err);
    if (!rc && b->query.set && b->set->mask >= 0) { /* a distance cap may come with the mask */
        rc = table_alloc(b, &b->capped, (size_t)b->n_layers * BK_STREAM_COUNT * per, err);
        if (!rc)
            rc = table_alloc(b, &b->capped_grad, per, err);
    }
    if (!rc && on_device(b) && !(b->host_table = malloc(per * sizeof(float))))
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory");
    if (rc) {
        table_buffers_free(b);
        return bk_error_prefix(err, "distance tables of length %d on the %s backend: ", (int)distances,
                               b->be ? b->be->name : "cpu");
    }
    b->capacity = distances;
    return BK_OK;
}

/* Once per term and run: the engine's log says that its plugin's host code stands in on the device. */
static void log_host_path(bk_bias *b, const bk_term *term, unsigned what)
{
    if (b->logged[term - b->set->terms] & what)
        return;
    b->logged[term - b->set->terms] |= (unsigned char)what;
    const biaskit_plugin *d = term->plugin->desc;
    const char *why = b->be->kind != BK_BACKEND_CUDA ? "the emulated backend never calls plugins' CUDA code"
                      : what == 1                     ? "the plugin has no table_cuda()"
                                                      : "the plugin has no table_backward_cuda()";
    bk_services()->log(BIASKIT_LOG_INFO, d->name, "term '%s': %s computed on the host and copied %s the %s device (%s)",
                       term->label, what == 1 ? "table" : "table gradient", what == 1 ? "to" : "from", b->be->name,
                       why);
}

/* The table of term t for `layer` (-1: shared by every layer) into `table` in the backend's memory. */
static int device_table(bk_bias *b, int t, int layer, int32_t distances, float *table, bk_error *err)
{
    bk_backend *be = b->be;
    const bk_term *term = &b->set->terms[t];
    const biaskit_plugin *d = term->plugin->desc;
    size_t n = (size_t)b->n_heads * (size_t)distances;
    int rc;
    if (!calls_cuda(b) || !d->table_cuda) { /* the host table, checked there, then the copy */
        log_host_path(b, term, 1);
        if ((rc = bk_term_table_at(term, layer, b->step, b->check_finite, distances, b->host_table, err)))
            return rc;
        b->host_tables[t]++;
        return be->upload(be, table, b->host_table, n * sizeof(float), err);
    }
    const float *theta = b->theta_dev[t] ? b->theta_dev[t] + (size_t)(layer < 0 ? 0 : layer) * (size_t)term->n_params
                                         : NULL;
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(term, "table_cuda()", layer, b->step);
    int prc = d->table_cuda(term->instance, theta, distances, table, be->stream(be), &pe);
    bk_plugin_call_leave();
    if (prc != BIASKIT_OK)
        return bk_term_plugin_failed(err, term, "table_cuda()", layer, b->step, &pe);
    b->cuda_tables[t]++;
    if (!b->check_finite)
        return BK_OK;
    int64_t bad = -1;
    float value = 0.0f;
    if ((rc = be->first_nonfinite(be, table, n, &bad, err)) ||
        (bad >= 0 && (rc = be->download(be, &value, table + bad, sizeof value, err))))
        return bk_error_prefix(err, "term '%s' (plugin %s): checking its CUDA table: ", term->label, d->name);
    if (bad < 0)
        return BK_OK;
    char where[64];
    return bk_fail(err, BK_ERR_PLUGIN,
                   "term '%s' (plugin %s, %s)%s: CUDA table has a non-finite value %g at head %d, distance %d",
                   term->label, d->name, term->plugin->path, bk_term_where(layer, b->step, where, sizeof where),
                   (double)value, (int)(bad / distances), (int)(bad % distances));
}

/* The mixed table of (layer l, stream s) from its terms' tables: on the host bk_mix_tables_grouped, on a
 * device be->mix_forward, once per row of weights (the whole table, or each head's row of distances
 * when the weights are per head: the same kernel on each head's part). */
static int mix_forward(bk_bias *b, int l, int s, size_t n, bk_error *err)
{
    const int all = b->n_on[s], groups = b->groups[s];
    int idx[all];
    const int count = layer_terms(b, l, s, idx);
    if (!count) /* no term of the stream in this layer: bk_bias_table gives none */
        return BK_OK;
    const float *tables[count];
    double w_all[groups * all], w[groups * count];
    for (int k = 0; k < count; k++)
        tables[k] = term_table(b, l, b->on[s][idx[k]]);
    stream_weights(b, s, w_all);
    layer_weights(b, s, w_all, idx, count, w);
    float *out = mixed_table(b, l, s);
    if (!on_device(b)) {
        bk_mix_tables_grouped(b->set->mixing, tables, w, groups, count, n, out);
        return BK_OK;
    }
    const size_t per = n / (size_t)groups;
    const float *part[count];
    for (int g = 0; g < groups; g++) {
        for (int k = 0; k < count; k++)
            part[k] = tables[k] + (size_t)g * per;
        int rc = b->be->mix_forward(b->be, b->set->mixing, part, w + g * count, count, per, out + (size_t)g * per, err);
        if (rc)
            return rc;
    }
    return BK_OK;
}

/* The forward of a device backend: tables on the device (or from the host), mixed there. */
static int device_forward(bk_bias *b, int32_t distances, bk_error *err)
{
    bk_backend *be = b->be;
    size_t n = (size_t)b->n_heads * (size_t)distances;
    int rc = BK_OK;
    for (int t = 0; t < b->set->n && b->theta_dev && !rc; t++) /* the host theta is authoritative */
        if (b->theta_dev[t])
            rc = be->upload(be, b->theta_dev[t], b->set->terms[t].theta,
                            (size_t)b->set->terms[t].n_copies * (size_t)b->set->terms[t].n_params * sizeof(float), err);
    if (rc)
        return bk_error_prefix(err, "uploading the positional terms' parameters: ");
    for (int l = 0; l < b->n_layers; l++) {
        for (int t = 0; t < b->set->n; t++) {
            const bk_term *term = &b->set->terms[t];
            if (!bk_term_has_table(term))
                continue;
            if (l > 0 && term->n_copies == 1) /* shared parameters: the same table on every layer */
                rc = be->copy(be, term_table(b, l, t), term_table(b, 0, t), n * sizeof(float), err);
            else
                rc = device_table(b, t, term->n_copies > 1 ? l : -1, distances, term_table(b, l, t), err);
            if (rc)
                return rc;
        }
        for (int s = 0; s < BK_STREAM_COUNT; s++)
            if (b->n_on[s] && (rc = mix_forward(b, l, s, n, err)))
                return bk_error_prefix(err, "mixing the %s-stream tables of layer %d: ",
                                       s == BK_STREAM_SEGMENT ? "segment" : "token", l);
    }
    return BK_OK;
}

static int host_forward(bk_bias *b, int32_t distances, bk_error *err);

/* LM-Infinite's distance cap: M_capped[h][d] = M[h][min(d, cap)], into b->capped. */
static void cap_rows(float *out, const float *m, int32_t heads, int32_t distances, int32_t cap)
{
    for (int32_t h = 0; h < heads; h++) {
        const float *row = m + (size_t)h * (size_t)distances;
        float *dst = out + (size_t)h * (size_t)distances;
        for (int32_t d = 0; d < distances; d++)
            dst[d] = row[d < cap ? d : cap];
    }
}

static float *capped_table(const bk_bias *b, int layer, int stream)
{
    return b->capped + ((size_t)layer * BK_STREAM_COUNT + (size_t)stream) * table_size(b);
}

static int apply_cap(bk_bias *b, bk_error *err)
{
    if (!b->distance_cap)
        return BK_OK;
    const size_t n = (size_t)b->n_heads * (size_t)b->distances;
    for (int l = 0; l < b->n_layers; l++)
        for (int s = 0; s < BK_STREAM_COUNT; s++) {
            int idx[BK_STREAM_COUNT + b->n_on[s]];
            if (!b->n_on[s] || !capped_at(b, l) || !layer_terms(b, l, s, idx))
                continue; /* no tables, or not capped in this layer */
            if (!on_device(b)) {
                cap_rows(capped_table(b, l, s), mixed_table(b, l, s), b->n_heads, b->distances, b->distance_cap);
                continue;
            }
            float *staged = b->host_table; /* n floats: the mixed table comes down, is capped, goes up */
            int rc = b->be->download(b->be, staged, mixed_table(b, l, s), n * sizeof(float), err);
            for (int32_t h = 0; h < b->n_heads && !rc; h++) {
                float *row = staged + (size_t)h * (size_t)b->distances;
                for (int32_t d = b->distance_cap + 1; d < b->distances; d++)
                    row[d] = row[b->distance_cap];
            }
            if (!rc)
                rc = b->be->upload(b->be, capped_table(b, l, s), staged, n * sizeof(float), err);
            if (rc)
                return bk_error_prefix(err, "capping the distance tables at %d: ", (int)b->distance_cap);
        }
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
    rc = on_device(b) ? device_forward(b, distances, err) : host_forward(b, distances, err);
    if (!rc)
        rc = bk_query_forward(&b->query, distances, b->training, b->step, b->check_finite, err);
    if (rc)
        return rc;
    /* a cap at or past the last distance changes nothing */
    b->distance_cap = b->query.mask.distance_cap < distances - 1 ? b->query.mask.distance_cap : 0;
    return apply_cap(b, err);
}

static int host_forward(bk_bias *b, int32_t distances, bk_error *err)
{
    int rc;
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
            else
                b->host_tables[t]++;
        }
        for (int s = 0; s < BK_STREAM_COUNT; s++)
            if (b->n_on[s])
                mix_forward(b, l, s, n, err); /* cannot fail on the host */
    }
    return BK_OK;
}

const float *bk_bias_table(const bk_bias *b, int layer, bk_stream stream)
{
    if (!b->n_on[stream])
        return NULL;
    int idx[b->n_on[stream]];
    if (!layer_terms(b, layer, (int)stream, idx))
        return NULL;
    return capped_at(b, layer) ? capped_table(b, layer, (int)stream) : mixed_table(b, layer, (int)stream);
}

void bk_bias_attention(const bk_bias *b, int layer, bk_attention_bias *ab)
{
    bk_query_attention(&b->query, layer, ab);
}

int bk_bias_backward_begin(bk_bias *b, int layer, bk_attention_bias *ab, bk_error *err)
{
    return bk_query_backward_begin(&b->query, layer, ab, err);
}

int bk_bias_query_backward(bk_bias *b, int layer, bk_error *err)
{
    return bk_query_backward(&b->query, layer, b->dtheta, b->training, b->step, err);
}

/* The gradient of the cap: dM[h][cap] += sum over d > cap of dM_capped[h][d], dM[h][d > cap] = 0, into
 * b->capped_grad (backend memory). */
static int fold_cap(bk_bias *b, const float *dcapped, const float **dmixed, bk_error *err)
{
    const size_t n = (size_t)b->n_heads * (size_t)b->distances;
    float *host = on_device(b) ? b->host_table : b->capped_grad;
    int rc = on_device(b) ? b->be->download(b->be, host, dcapped, n * sizeof(float), err) : BK_OK;
    if (rc)
        return bk_error_prefix(err, "the gradient of the distance cap: ");
    if (!on_device(b))
        memcpy(host, dcapped, n * sizeof(float));
    for (int32_t h = 0; h < b->n_heads; h++) {
        float *row = host + (size_t)h * (size_t)b->distances;
        double folded = row[b->distance_cap];
        for (int32_t d = b->distance_cap + 1; d < b->distances; d++) {
            folded += row[d];
            row[d] = 0.0f;
        }
        row[b->distance_cap] = (float)folded;
    }
    if (on_device(b) && (rc = b->be->upload(b->be, b->capped_grad, host, n * sizeof(float), err)))
        return bk_error_prefix(err, "the gradient of the distance cap: ");
    *dmixed = b->capped_grad;
    return BK_OK;
}

static int all_finite(const float *x, size_t n)
{
    float acc = 0.0f; /* x - x is 0 for a finite x, NaN for a NaN or an inf */
    for (size_t i = 0; i < n; i++)
        acc += x[i] - x[i];
    return acc == acc;
}

static void note_nonfinite_grad(bk_bias *b, const bk_term *term, const float *dtheta, const char *hook,
                                const char *where)
{
    int64_t i = 0;
    while (i < term->n_params && isfinite(dtheta[i]))
        i++;
    snprintf(b->nonfinite, sizeof b->nonfinite,
             "term '%s' (plugin %s, %s)%s: %s gave a non-finite gradient %g for parameter %lld of %lld from a finite "
             "dL/dT",
             term->label, term->plugin->desc->name, term->plugin->path, where, hook,
             (double)dtheta[i < term->n_params ? i : 0], (long long)i, (long long)term->n_params);
}

/* The host table_backward() of term t at `layer` from the host dL/dT `dtable` into the host dtheta. */
static int host_table_backward(bk_bias *b, int t, int layer, const float *dtable, bk_error *err)
{
    const bk_term *term = &b->set->terms[t];
    const biaskit_plugin *d = term->plugin->desc;
    size_t n = (size_t)b->n_heads * (size_t)b->distances;
    if (!d->table_backward)
        return bk_fail(err, BK_ERR_PLUGIN, "term '%s' (plugin %s) has %lld parameters but no table_backward()",
                       term->label, d->name, (long long)term->n_params);
    int copy = term->n_copies > 1 ? layer : 0;
    float *dtheta = b->dtheta[t] + (size_t)copy * (size_t)term->n_params;
    int was_finite = b->check_finite && !b->nonfinite[0] && all_finite(dtheta, (size_t)term->n_params);
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(term, "table_backward()", layer, b->step);
    int rc = d->table_backward(term->instance, bk_term_theta(term, layer), b->distances, dtable, dtheta, &pe);
    bk_plugin_call_leave();
    char where[64];
    if (rc != BIASKIT_OK)
        return bk_fail(err, BK_ERR_PLUGIN, "term '%s' (plugin %s, %s)%s: table_backward() failed: %s", term->label,
                       d->name, term->plugin->path, bk_term_where(layer, b->step, where, sizeof where),
                       pe.message[0] ? pe.message : "no message given");
    b->host_backwards[t]++;
    /* blame the plugin only when what it was given, dL/dT, was finite */
    if (was_finite && !all_finite(dtheta, (size_t)term->n_params) && all_finite(dtable, n))
        note_nonfinite_grad(b, term, dtheta, "table_backward()", bk_term_where(layer, b->step, where, sizeof where));
    return BK_OK;
}

/* The gradient of term t at `layer` from dL/dT `dtable` in the backend's memory. */
static int device_table_backward(bk_bias *b, int t, int layer, const float *dtable, bk_error *err)
{
    bk_backend *be = b->be;
    const bk_term *term = &b->set->terms[t];
    const biaskit_plugin *d = term->plugin->desc;
    size_t n = (size_t)b->n_heads * (size_t)b->distances;
    int rc;
    if (!b->dtheta_dev || !b->dtheta_dev[t]) { /* no table_backward_cuda here: dL/dT to the host */
        log_host_path(b, term, 2);
        if ((rc = be->download(be, b->host_table, dtable, n * sizeof(float), err)))
            return bk_error_prefix(err, "term '%s' (plugin %s): copying dL/dT to the host: ", term->label, d->name);
        return host_table_backward(b, t, layer, b->host_table, err);
    }
    if (b->check_finite && !b->dtable_nonfinite[t]) { /* to blame the plugin only for a finite dL/dT */
        int64_t bad = -1;
        if ((rc = be->first_nonfinite(be, dtable, n, &bad, err)))
            return bk_error_prefix(err, "term '%s' (plugin %s): checking dL/dT: ", term->label, d->name);
        b->dtable_nonfinite[t] = bad >= 0;
    }
    size_t offset = (size_t)(term->n_copies > 1 ? layer : 0) * (size_t)term->n_params;
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(term, "table_backward_cuda()", layer, b->step);
    int prc = d->table_backward_cuda(term->instance, b->theta_dev[t] + offset, b->distances, dtable,
                                     b->dtheta_dev[t] + offset, be->stream(be), &pe);
    bk_plugin_call_leave();
    if (prc != BIASKIT_OK)
        return bk_term_plugin_failed(err, term, "table_backward_cuda()", layer, b->step, &pe);
    b->cuda_backwards[t]++;
    return BK_OK;
}

/* Before the device dtheta is added into after a zero_grad or a bk_bias_gradients_to_host. */
static int zero_device_grads(bk_bias *b, bk_error *err)
{
    if (!b->zero_pending)
        return BK_OK;
    for (int t = 0; b->dtheta_dev && t < b->set->n; t++) {
        const bk_term *term = &b->set->terms[t];
        int rc = b->dtheta_dev[t] ? b->be->zero(b->be, b->dtheta_dev[t],
                                                (size_t)term->n_copies * (size_t)term->n_params * sizeof(float), err)
                                  : BK_OK;
        if (rc)
            return bk_error_prefix(err, "zeroing the device gradient of term '%s': ", term->label);
    }
    b->zero_pending = 0;
    return BK_OK;
}

/* be->mix_backward of (layer, stream s) once per row of weights, as mix_forward; the weights' gradient
 * (dw, groups x n_on) only when some weight of the stream trains. */
static int device_mix_backward(bk_bias *b, int layer, int s, int count, const float *const *tables, const double *w,
                               const float *dm, float *const *dtables, double *dw, bk_error *err)
{
    const int groups = b->groups[s];
    const size_t per = (size_t)b->n_heads * (size_t)b->distances / (size_t)groups;
    const float *mixed = mixed_table(b, layer, s);
    if (groups == 1)
        return b->be->mix_backward(b->be, b->set->mixing, tables, w, count, per, mixed, dm, dtables,
                                   b->n_mix[s] ? dw : NULL, err);
    const float *part[count];
    float *dpart[count];
    for (int g = 0; g < groups; g++) {
        const size_t at = (size_t)g * per;
        for (int k = 0; k < count; k++) {
            part[k] = tables[k] + at;
            dpart[k] = dtables[k] ? dtables[k] + at : NULL;
        }
        int rc = b->be->mix_backward(b->be, b->set->mixing, part, w + g * count, count, per, mixed + at, dm + at,
                                     dpart, b->n_mix[s] ? dw + g * count : NULL, err);
        if (rc)
            return rc;
    }
    return BK_OK;
}

int bk_bias_backward(bk_bias *b, int layer, const float *const dmixed[BK_STREAM_COUNT], bk_error *err)
{
    size_t n = (size_t)b->n_heads * (size_t)b->distances;
    int device = on_device(b), rc;
    if (device && (rc = zero_device_grads(b, err)))
        return rc;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        const int all = b->n_on[s];
        if (!all || !dmixed[s])
            continue;
        int idx[all];
        const int count = layer_terms(b, layer, s, idx); /* the stream's terms in this layer */
        if (!count)
            continue;
        const float *dm = dmixed[s];
        if (capped_at(b, layer) && (rc = fold_cap(b, dmixed[s], &dm, err)))
            return rc;
        const int groups = b->groups[s];
        const float *tables[count];
        float *dtables[count];
        double w_all[groups * all], dw_all[groups * all], w[groups * count], dw[groups * count];
        for (int k = 0; k < groups * count; k++)
            dw[k] = 0.0;
        for (int k = 0; k < count; k++) {
            const bk_term *term = &b->set->terms[b->on[s][idx[k]]];
            tables[k] = term_table(b, layer, b->on[s][idx[k]]);
            dtables[k] = term->n_params ? b->scratch + (size_t)k * n : NULL;
            if (dtables[k] && !device)
                memset(dtables[k], 0, n * sizeof(float));
            else if (dtables[k] && (rc = b->be->zero(b->be, dtables[k], n * sizeof(float), err)))
                return rc;
        }
        stream_weights(b, s, w_all);
        layer_weights(b, s, w_all, idx, count, w);
        if (!device)
            bk_mix_backward_grouped(b->set->mixing, tables, w, groups, count, n, mixed_table(b, layer, s), dm,
                                    dtables, dw);
        else if ((rc = device_mix_backward(b, layer, s, count, tables, w, dm, dtables, dw, err)))
            return bk_error_prefix(err, "mixing backward of the %s-stream tables of layer %d: ",
                                   s == BK_STREAM_SEGMENT ? "segment" : "token", layer);
        if (b->n_mix[s]) { /* the weights of the terms not in this layer get nothing from it */
            for (int k = 0; k < groups * all; k++)
                dw_all[k] = 0.0;
            for (int g = 0; g < groups; g++)
                for (int k = 0; k < count; k++)
                    dw_all[g * all + idx[k]] = dw[g * count + k];
            bk_mix_packed_backward(b->set->mixing, b->kind[s], all, groups, w_all, dw_all, b->mix_grads[s]);
        }
        for (int k = 0; k < count; k++) {
            if (!dtables[k])
                continue;
            rc = device ? device_table_backward(b, b->on[s][idx[k]], layer, dtables[k], err)
                        : host_table_backward(b, b->on[s][idx[k]], layer, dtables[k], err);
            if (rc)
                return rc;
        }
    }
    return BK_OK;
}

int bk_bias_gradients_to_host(bk_bias *b, bk_error *err)
{
    if (!on_device(b) || !b->dtheta_dev || b->zero_pending)
        return BK_OK; /* host gradients are complete, or nothing was added on the device since zeroed */
    for (int t = 0; t < b->set->n; t++) {
        if (!b->dtheta_dev[t])
            continue;
        const bk_term *term = &b->set->terms[t];
        size_t m = (size_t)term->n_copies * (size_t)term->n_params;
        int rc = b->be->download(b->be, b->host_grad, b->dtheta_dev[t], m * sizeof(float), err);
        if (rc)
            return bk_error_prefix(err, "copying the gradient of term '%s' (plugin %s) to the host: ", term->label,
                                   term->plugin->desc->name);
        if (b->check_finite && !b->nonfinite[0] && !b->dtable_nonfinite[t] && all_finite(b->dtheta[t], m) &&
            !all_finite(b->host_grad, m)) {
            int c = 0;
            while (c < term->n_copies - 1 && all_finite(b->host_grad + (size_t)c * (size_t)term->n_params,
                                                        (size_t)term->n_params))
                c++;
            char where[64];
            note_nonfinite_grad(b, term, b->host_grad + (size_t)c * (size_t)term->n_params, "table_backward_cuda()",
                                bk_term_where(term->n_copies > 1 ? c : -1, b->step, where, sizeof where));
        }
        for (size_t i = 0; i < m; i++)
            b->dtheta[t][i] += b->host_grad[i];
    }
    b->zero_pending = 1; /* moved: the next backward starts from zero */
    return BK_OK;
}

void bk_bias_zero_grad(bk_bias *b)
{
    b->nonfinite[0] = '\0';
    b->zero_pending = b->dtheta_dev != NULL;
    if (b->set->n)
        memset(b->dtable_nonfinite, 0, (size_t)b->set->n);
    for (int t = 0; t < b->set->n; t++) {
        const bk_term *term = &b->set->terms[t];
        if (b->dtheta[t])
            memset(b->dtheta[t], 0, (size_t)term->n_copies * (size_t)term->n_params * sizeof(float));
    }
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        if (b->n_on[s])
            memset(b->mix_grads[s], 0, (size_t)(b->n_mix[s] > b->n_on[s] ? b->n_mix[s] : b->n_on[s]) * sizeof(float));
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
        if (!b->n_mix[s])
            continue;
        const int n = b->n_on[s], groups = b->groups[s];
        double w[groups * n];
        bk_mix_weights_from_packed(b->set->mixing, b->kind[s], n, groups, b->mix_params[s], b->logits[s], w);
        for (int k = 0; k < n; k++) {
            bk_term *t = &b->set->terms[b->on[s][k]];
            if (groups == 1 || !t->head_weights) {
                t->weight = w[k];
                continue;
            }
            double total = 0.0; /* `weight` is the heads' mean: what logs and reports show for the term */
            for (int g = 0; g < groups; g++)
                total += t->head_weights[g] = w[g * n + k];
            t->weight = total / groups;
        }
    }
}
