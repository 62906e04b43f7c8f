/* biaskit check: the plugin's CUDA functions against its host functions, on the device the engine
 * would use (device.h); without a GPU the checks are skipped with the reason. */
#include "check/internal.h"

#include "device.h"
#include "plugin/descriptor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_TABLE_RTOL 1e-5     /* |cuda - host| <= RTOL |host| + ATOL max|host of the head| */
#define CUDA_TABLE_ATOL 1e-6
#define CUDA_GRAD_TOL 1e-4       /* |cuda - host| <= TOL (|host_i| + max_j |host_j|) */

/* Device buffers of one comparison; every pointer may be NULL. */
typedef struct device_bufs {
    void *theta, *table, *dtable, *dtheta, *positions;
} device_bufs;

static void device_bufs_free(device_bufs *b)
{
    bk_device_free(b->theta);
    bk_device_free(b->table);
    bk_device_free(b->dtable);
    bk_device_free(b->dtheta);
    bk_device_free(b->positions);
    memset(b, 0, sizeof *b);
}

static int device_copy_of(void **dst, const float *src, size_t n, bk_error *err)
{
    *dst = NULL;
    if (n == 0)
        return BK_OK;
    int rc = bk_device_alloc(dst, n * sizeof(float), err);
    return rc ? rc : (src ? bk_device_upload(*dst, src, n * sizeof(float), err) : BK_OK);
}

/* table_cuda at D distances into host memory `out`. */
static int cuda_table(const instance *in, const float *theta, int32_t D, float *out, char *why, size_t size)
{
    size_t n = (size_t)in->geo.n_heads * (size_t)D;
    device_bufs b = {0};
    bk_error e = {0};
    biaskit_error pe = {0};
    int rc = device_copy_of(&b.theta, theta, ck_n_params(in), &e);
    if (!rc)
        rc = bk_device_alloc(&b.table, n * sizeof(float), &e);
    if (!rc) {
        ck_stage(in->c, "table_cuda() with %d distances", D);
        if (in->c->d->table_cuda(in->inst, b.theta, D, b.table, NULL, &pe) != BIASKIT_OK)
            rc = bk_fail(&e, BK_ERR_PLUGIN, "table_cuda() with %d distances failed: %s", D,
                         pe.message[0] ? pe.message : "(no message)");
    }
    if (!rc)
        rc = bk_device_download(out, b.table, n * sizeof(float), &e);
    device_bufs_free(&b);
    if (rc)
        bk_copy_text(why, size, e.message);
    return rc != BK_OK;
}

/* table_backward_cuda: dtheta (host, in and out) += the device gradient. */
static int cuda_backward(const instance *in, const float *theta, int32_t D, const float *dtable, float *dtheta,
                         char *why, size_t size)
{
    size_t n = ck_n_params(in), n_out = (size_t)in->geo.n_heads * (size_t)D;
    device_bufs b = {0};
    bk_error e = {0};
    biaskit_error pe = {0};
    int rc = device_copy_of(&b.theta, theta, n, &e);
    if (!rc)
        rc = device_copy_of(&b.dtable, dtable, n_out, &e);
    if (!rc)
        rc = device_copy_of(&b.dtheta, dtheta, n, &e);
    if (!rc) {
        ck_stage(in->c, "table_backward_cuda() with %d distances", D);
        if (in->c->d->table_backward_cuda(in->inst, b.theta, D, b.dtable, b.dtheta, NULL, &pe) != BIASKIT_OK)
            rc = bk_fail(&e, BK_ERR_PLUGIN, "table_backward_cuda() with %d distances failed: %s", D,
                         pe.message[0] ? pe.message : "(no message)");
    }
    if (!rc)
        rc = bk_device_download(dtheta, b.dtheta, n * sizeof(float), &e);
    device_bufs_free(&b);
    if (rc)
        bk_copy_text(why, size, e.message);
    return rc != BK_OK;
}

/* |cuda - host| <= RTOL |host| + ATOL max over the head of |host|. */
static int compare_tables(const float *dev, const float *host, int32_t H, int32_t D, char *why, size_t size)
{
    for (int32_t h = 0; h < H; h++) {
        const float *x = host + (size_t)h * (size_t)D, *y = dev + (size_t)h * (size_t)D;
        double head_max = 0.0;
        for (int32_t d = 0; d < D; d++)
            head_max = fmax(head_max, fabs((double)x[d]));
        for (int32_t d = 0; d < D; d++) {
            double diff = fabs((double)y[d] - (double)x[d]);
            if (!(diff <= CUDA_TABLE_RTOL * fabs((double)x[d]) + CUDA_TABLE_ATOL * head_max)) {
                snprintf(why, size, "head %d, distance %d of %d: CUDA %.9g vs host %.9g", h, d, D, (double)y[d],
                         (double)x[d]);
                return 1;
            }
        }
    }
    return 0;
}

static void cuda_compare_tables(checker *c, instance *in)
{
    int32_t L = c->geo.train_length, H = c->geo.n_heads, maxd = c->opt->max_distances;
    int32_t lengths[] = {1, L, 4097, maxd};
    float *host = ck_guarded_alloc((size_t)H * (size_t)maxd), *dev = malloc((size_t)H * (size_t)maxd * sizeof *dev),
          *again = malloc((size_t)H * (size_t)maxd * sizeof *again);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    int bad = !host || !dev || !again;
    if (bad)
        snprintf(why, sizeof why, "out of memory for %d x %d tables", H, maxd);
    for (int set = 0; !bad && set < 2; set++) {
        if (set == 1 && in->n_params == 0)
            break;
        if (set == 1 && (bad = ck_random_params(in, bk_derive_seed(c->opt->seed, 600, 0), why, sizeof why)))
            break;
        for (size_t k = 0; !bad && k < sizeof lengths / sizeof lengths[0]; k++) {
            int32_t D = lengths[k];
            if (D > maxd)
                continue;
            model_fn m = {.kind = FN_TABLE, .distances = D};
            bad = ck_forward_finite(in, &m, in->theta, host, why, sizeof why) || cuda_table(in, in->theta, D, dev, why, sizeof why) ||
                  compare_tables(dev, host, H, D, why, sizeof why);
        }
    }
    if (!bad)
        bad = cuda_table(in, in->theta, maxd, dev, why, sizeof why) || cuda_table(in, in->theta, maxd, again, why, sizeof why) ||
              ck_same_bits(dev, again, (size_t)H * (size_t)maxd, "table_cuda()", why, sizeof why);
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "cuda-table", "CUDA table vs host: %s", why);
    else
        ck_item(c, BK_CHECK_PASS, "cuda-table",
                "CUDA table vs host at 1, %d, 4097, %d distances, %s: |cuda - host| <= %g |host| + %g max|head|; "
                "bit-identical on repeat", L, maxd, in->n_params ? "initial and random parameters" : "fixed table",
                CUDA_TABLE_RTOL, CUDA_TABLE_ATOL);
    free(host), free(dev), free(again);
}

static int compare_gradients(const instance *in, const float *dev, const float *host, char *why, size_t size)
{
    size_t n = ck_n_params(in);
    double top = 0.0;
    for (size_t i = 0; i < n; i++)
        top = fmax(top, fabs((double)host[i]));
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)dev[i] - (double)host[i]);
        if (!(diff <= CUDA_GRAD_TOL * (fabs((double)host[i]) + top))) {
            char entry[64];
            ck_entry_name(in, (int64_t)i, entry, sizeof entry);
            snprintf(why, size, "%s: CUDA %.9g vs host %.9g", entry, (double)dev[i], (double)host[i]);
            return 1;
        }
    }
    return 0;
}

static void cuda_compare_gradients(checker *c, instance *in)
{
    static const int32_t sizes[] = {64, 300, 4097};
    size_t n = ck_n_params(in);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    float *w = malloc((size_t)c->geo.n_heads * 4097 * sizeof *w), *host = ck_guarded_alloc(n), *dev = calloc(n, sizeof *dev),
          *again = calloc(n, sizeof *again);
    int bad = !w || !host || !dev || !again;
    if (bad)
        snprintf(why, sizeof why, "out of memory");
    if (!bad)
        bad = ck_random_params(in, bk_derive_seed(c->opt->seed, 700, 0), why, sizeof why);
    for (size_t k = 0; !bad && k < 3; k++) {
        model_fn m = {.kind = FN_TABLE, .distances = sizes[k]};
        rng r = ck_rng_for(c->opt->seed, R_WEIGHTS, 1000 + k);
        ck_random_fill(w, ck_fn_outputs(in, &m), &r);
        memset(host, 0, n * sizeof *host);
        memset(dev, 0, n * sizeof *dev);
        memset(again, 0, n * sizeof *again);
        bad = ck_backward(in, &m, in->theta, w, host, why, sizeof why) ||
              cuda_backward(in, in->theta, sizes[k], w, dev, why, sizeof why) ||
              compare_gradients(in, dev, host, why, sizeof why) ||
              cuda_backward(in, in->theta, sizes[k], w, again, why, sizeof why) ||
              ck_same_bits(dev, again, n, "table_backward_cuda()", why, sizeof why);
    }
    if (!bad) { /* into a non-zero start: start + gradient */
        for (size_t i = 0; i < n; i++)
            again[i] = (float)(1.0 + fabs((double)dev[i]));
        float *start = malloc(n * sizeof *start);
        if (start)
            memcpy(start, again, n * sizeof *start);
        else
            snprintf(why, sizeof why, "out of memory");
        bad = !start || cuda_backward(in, in->theta, sizes[2], w, again, why, sizeof why);
        for (size_t i = 0; !bad && i < n; i++)
            if (fabs((double)again[i] - ((double)start[i] + (double)dev[i])) >
                ADD_TOLERANCE * (fabs((double)start[i]) + fabs((double)dev[i]))) {
                char entry[64];
                ck_entry_name(in, (int64_t)i, entry, sizeof entry);
                snprintf(why, sizeof why, "table_backward_cuda() does not add into dtheta: %s started at %.9g, "
                         "gradient %.9g, got %.9g", entry, (double)start[i], (double)dev[i], (double)again[i]);
                bad = 1;
            }
        free(start);
    }
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "cuda-backward", "CUDA table gradient vs host: %s", why);
    else
        ck_item(c, BK_CHECK_PASS, "cuda-backward",
                "CUDA table gradient vs host at 64, 300, 4097 distances: |cuda - host| <= %g (|host_i| + max|host|); "
                "adds (+=); bit-identical on repeat", CUDA_GRAD_TOL);
    free(w), free(host), free(dev), free(again);
}

/* embed_cuda of `count` positions added to zeros, into host memory `out` (count x d_model). */
static int cuda_embed(const instance *in, const float *theta, const int32_t *pos, int64_t count, float *out,
                      char *why, size_t size)
{
    size_t n = (size_t)count * (size_t)in->geo.d_model;
    device_bufs b = {0};
    bk_error e = {0};
    biaskit_error pe = {0};
    memset(out, 0, n * sizeof *out);
    int rc = device_copy_of(&b.theta, theta, ck_n_params(in), &e);
    if (!rc)
        rc = device_copy_of(&b.table, out, n, &e);
    if (!rc && (rc = bk_device_alloc(&b.positions, (size_t)count * sizeof(int32_t), &e)) == BK_OK)
        rc = bk_device_upload(b.positions, pos, (size_t)count * sizeof(int32_t), &e);
    if (!rc) {
        ck_stage(in->c, "embed_cuda() of %lld positions", (long long)count);
        if (bk_descriptor_embed_cuda(in->c->d)(in->inst, b.theta, b.positions, count, b.table, NULL, &pe) !=
            BIASKIT_OK)
            rc = bk_fail(&e, BK_ERR_PLUGIN, "embed_cuda() of %lld positions failed: %s", (long long)count,
                         pe.message[0] ? pe.message : "(no message)");
    }
    if (!rc)
        rc = bk_device_download(out, b.table, n * sizeof(float), &e);
    device_bufs_free(&b);
    if (rc)
        bk_copy_text(why, size, e.message);
    return rc != BK_OK;
}

/* embed_backward_cuda: dtheta (host, in and out) += the device gradient from dout (count x d_model). */
static int cuda_embed_backward(const instance *in, const float *theta, const int32_t *pos, int64_t count,
                               const float *dout, float *dtheta, char *why, size_t size)
{
    size_t n = ck_n_params(in), n_out = (size_t)count * (size_t)in->geo.d_model;
    device_bufs b = {0};
    bk_error e = {0};
    biaskit_error pe = {0};
    int rc = device_copy_of(&b.theta, theta, n, &e);
    if (!rc)
        rc = device_copy_of(&b.dtable, dout, n_out, &e);
    if (!rc)
        rc = device_copy_of(&b.dtheta, dtheta, n, &e);
    if (!rc && (rc = bk_device_alloc(&b.positions, (size_t)count * sizeof(int32_t), &e)) == BK_OK)
        rc = bk_device_upload(b.positions, pos, (size_t)count * sizeof(int32_t), &e);
    if (!rc) {
        ck_stage(in->c, "embed_backward_cuda() of %lld positions", (long long)count);
        if (bk_descriptor_embed_backward_cuda(in->c->d)(in->inst, b.theta, b.positions, count, b.dtable, b.dtheta,
                                                        NULL, &pe) != BIASKIT_OK)
            rc = bk_fail(&e, BK_ERR_PLUGIN, "embed_backward_cuda() of %lld positions failed: %s", (long long)count,
                         pe.message[0] ? pe.message : "(no message)");
    }
    if (!rc)
        rc = bk_device_download(dtheta, b.dtheta, n * sizeof(float), &e);
    device_bufs_free(&b);
    if (rc)
        bk_copy_text(why, size, e.message);
    return rc != BK_OK;
}

/* The positions the embedding items use: one sequence 0 .. L-1, then `extra` random ones below L (a
 * second sequence in no order: the in-segment positions of a segment stream restart at 0). */
static int32_t *embed_case_positions(int32_t L, int64_t extra, uint64_t seed, int64_t *count)
{
    int32_t *seq = ck_embed_positions(L, L, 1, seed), *rnd = ck_embed_positions(L, extra, 0, seed);
    int32_t *pos = seq && rnd ? malloc((size_t)(L + extra) * sizeof *pos) : NULL;
    if (pos) {
        memcpy(pos, seq, (size_t)L * sizeof *pos);
        memcpy(pos + L, rnd, (size_t)extra * sizeof *pos);
        *count = L + extra;
    }
    free(seq), free(rnd);
    return pos;
}

/* |cuda - host| <= RTOL |host| + ATOL max |host| over every value of the embedding. */
static int compare_embeddings(const float *dev, const float *host, size_t n, int32_t C, const int32_t *pos, char *why,
                              size_t size)
{
    double top = 0.0;
    for (size_t k = 0; k < n; k++)
        top = fmax(top, fabs((double)host[k]));
    for (size_t k = 0; k < n; k++) {
        double diff = fabs((double)dev[k] - (double)host[k]);
        if (!(diff <= CUDA_TABLE_RTOL * fabs((double)host[k]) + CUDA_TABLE_ATOL * top)) {
            snprintf(why, size, "token %zu (position %d), channel %zu: CUDA %.9g vs host %.9g", k / (size_t)C,
                     (int)pos[k / (size_t)C], k % (size_t)C, (double)dev[k], (double)host[k]);
            return 1;
        }
    }
    return 0;
}

static void cuda_compare_embeddings(checker *c, instance *in)
{
    int32_t L = c->geo.train_length, C = c->geo.d_model;
    int64_t count = 0;
    int32_t *pos = embed_case_positions(L, 64, bk_derive_seed(c->opt->seed, 800, 0), &count);
    size_t n = (size_t)count * (size_t)C;
    float *host = pos ? ck_guarded_alloc(n) : NULL, *dev = malloc(n * sizeof *dev), *again = malloc(n * sizeof *again);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    int bad = !pos || !host || !dev || !again;
    if (bad)
        snprintf(why, sizeof why, "out of memory for the embedding of %lld positions", (long long)count);
    model_fn m = {.kind = FN_EMBED, .positions = pos, .count = count};
    for (int set = 0; !bad && set < 2; set++) {
        if (set == 1 && in->n_params == 0)
            break;
        if (set == 1 && (bad = ck_random_params(in, bk_derive_seed(c->opt->seed, 810, 0), why, sizeof why)))
            break;
        bad = ck_forward_finite(in, &m, in->theta, host, why, sizeof why) ||
              cuda_embed(in, in->theta, pos, count, dev, why, sizeof why) ||
              compare_embeddings(dev, host, n, C, pos, why, sizeof why);
    }
    if (!bad)
        bad = cuda_embed(in, in->theta, pos, count, again, why, sizeof why) ||
              ck_same_bits(dev, again, n, "embed_cuda()", why, sizeof why);
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "cuda-embed", "CUDA embedding vs host: %s", why);
    else
        ck_item(c, BK_CHECK_PASS, "cuda-embed",
                "CUDA embedding vs host of %lld positions (0 .. %d, then 64 at random), %s: |cuda - host| <= %g |host| "
                "+ %g max|host|; bit-identical on repeat", (long long)count, L - 1,
                in->n_params ? "initial and random parameters" : "fixed embedding", CUDA_TABLE_RTOL, CUDA_TABLE_ATOL);
    free(pos), free(host), free(dev), free(again);
}

static void cuda_compare_embed_gradients(checker *c, instance *in)
{
    int32_t L = c->geo.train_length, C = c->geo.d_model;
    int64_t count = 0;
    int32_t *pos = embed_case_positions(L, 64, bk_derive_seed(c->opt->seed, 900, 0), &count);
    size_t n = ck_n_params(in), n_out = (size_t)count * (size_t)C;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    float *w = malloc(n_out * sizeof *w), *host = ck_guarded_alloc(n), *dev = calloc(n, sizeof *dev),
          *again = calloc(n, sizeof *again), *start = malloc(n * sizeof *start);
    int bad = !pos || !w || !host || !dev || !again || !start;
    if (bad)
        snprintf(why, sizeof why, "out of memory");
    if (!bad)
        bad = ck_random_params(in, bk_derive_seed(c->opt->seed, 910, 0), why, sizeof why);
    model_fn m = {.kind = FN_EMBED, .positions = pos, .count = count};
    if (!bad) {
        rng r = ck_rng_for(c->opt->seed, R_WEIGHTS, 2000);
        ck_random_fill(w, n_out, &r);
        memset(host, 0, n * sizeof *host);
        bad = ck_backward(in, &m, in->theta, w, host, why, sizeof why) ||
              cuda_embed_backward(in, in->theta, pos, count, w, dev, why, sizeof why) ||
              compare_gradients(in, dev, host, why, sizeof why) ||
              cuda_embed_backward(in, in->theta, pos, count, w, again, why, sizeof why) ||
              ck_same_bits(dev, again, n, "embed_backward_cuda()", why, sizeof why);
    }
    if (!bad) { /* into a non-zero start: start + gradient */
        for (size_t i = 0; i < n; i++)
            again[i] = start[i] = (float)(1.0 + fabs((double)dev[i]));
        bad = cuda_embed_backward(in, in->theta, pos, count, w, again, why, sizeof why);
        for (size_t i = 0; !bad && i < n; i++)
            if (fabs((double)again[i] - ((double)start[i] + (double)dev[i])) >
                ADD_TOLERANCE * (fabs((double)start[i]) + fabs((double)dev[i]))) {
                char entry[64];
                ck_entry_name(in, (int64_t)i, entry, sizeof entry);
                snprintf(why, sizeof why, "embed_backward_cuda() does not add into dtheta: %s started at %.9g, "
                         "gradient %.9g, got %.9g", entry, (double)start[i], (double)dev[i], (double)again[i]);
                bad = 1;
            }
    }
    if (bad)
        ck_item(c, BK_CHECK_FAIL, "cuda-embed-backward", "CUDA embedding gradient vs host: %s", why);
    else
        ck_item(c, BK_CHECK_PASS, "cuda-embed-backward",
                "CUDA embedding gradient vs host of %lld positions: |cuda - host| <= %g (|host_i| + max|host|); adds "
                "(+=); bit-identical on repeat", (long long)count, CUDA_GRAD_TOL);
    free(pos), free(w), free(host), free(dev), free(again), free(start);
}

/* The embedding items: embed_cuda and embed_backward_cuda against embed and embed_backward. */
void ck_unit_cuda_embed(checker *c, const void *arg)
{
    (void)arg;
    const biaskit_plugin *d = c->d;
    char device[256];
    int gpu = bk_device_probe(device, sizeof device);
    int want_forward = bk_descriptor_embed_cuda(d) != NULL;
    int want_backward = bk_descriptor_embed_backward_cuda(d) != NULL;
    if (!want_forward)
        ck_item(c, BK_CHECK_SKIP, "cuda-embed", "CUDA embedding vs host: the plugin has no embed_cuda() (the engine "
                "computes the embedding on the host and copies it)");
    else if (!gpu)
        ck_item(c, BK_CHECK_SKIP, "cuda-embed", "CUDA embedding vs host: no GPU (%s)", device);
    if (want_backward && !gpu)
        ck_item(c, BK_CHECK_SKIP, "cuda-embed-backward", "CUDA embedding gradient vs host: no GPU (%s)", device);
    if (!gpu || (!want_forward && !want_backward))
        return;
    instance in;
    if (ck_open_default(c, "cuda-embed", c->opt->seed, 0, &in))
        return;
    if (want_forward)
        cuda_compare_embeddings(c, &in);
    if (want_backward && in.n_params > 0 && d->embed_backward)
        cuda_compare_embed_gradients(c, &in);
    else if (want_backward)
        ck_item(c, BK_CHECK_SKIP, "cuda-embed-backward", "CUDA embedding gradient vs host: %s",
                in.n_params ? "no host embed_backward() to compare with"
                            : "no parameters with the default configuration");
    ck_instance_close(&in);
}

void ck_unit_cuda(checker *c, const void *arg)
{
    (void)arg;
    const biaskit_plugin *d = c->d;
    char device[256];
    int gpu = bk_device_probe(device, sizeof device);
    int want_backward = d->table_backward_cuda != NULL;
    if (!d->table_cuda)
        ck_item(c, BK_CHECK_SKIP, "cuda-table", "CUDA table vs host: the plugin has no table_cuda() (the engine "
                "computes the table on the host and copies it)");
    else if (!gpu)
        ck_item(c, BK_CHECK_SKIP, "cuda-table", "CUDA table vs host: no GPU (%s)", device);
    if (want_backward && !gpu)
        ck_item(c, BK_CHECK_SKIP, "cuda-backward", "CUDA table gradient vs host: no GPU (%s)", device);
    if (!gpu || (!d->table_cuda && !want_backward))
        return;
    instance in;
    if (ck_open_default(c, "cuda-table", c->opt->seed, 0, &in))
        return;
    if (d->table_cuda)
        cuda_compare_tables(c, &in);
    if (want_backward && in.n_params > 0 && d->table_backward)
        cuda_compare_gradients(c, &in);
    else if (want_backward)
        ck_item(c, BK_CHECK_SKIP, "cuda-backward", "CUDA table gradient vs host: %s",
                in.n_params ? "no host table_backward() to compare with" : "no parameters with the default configuration");
    ck_instance_close(&in);
}
