/* biaskit check: the plugin's CUDA functions against its host functions, on the device the engine
 * would use (cuda/device.h); without a GPU the checks are skipped with the reason. A plugin built with
 * <biaskit/table_plugin.h> also exports its CUDA kernels emulated on the host (biaskit_tp_emulation():
 * the same per-thread code over the same grid): those are compared with the host functions on every
 * machine, and its source is searched for device-only branches (__CUDA_ARCH__), which the emulation
 * cannot see. */
#include "check/internal.h"

#include "check/cuda_compare.h"
#include "cuda/device.h"
#include "plugin/descriptor.h"

#include <biaskit/table_plugin.h>

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where the "CUDA" functions of a comparison run: on the GPU (emu NULL), or emulated on the host. */
typedef struct cuda_path {
    const biaskit_tp_emulated *emu;
    const char *label;       /* in mismatches: "CUDA 1.5 vs host 1.25" */
    const char *table_id, *backward_id;
    const char *table_what;  /* item texts: "CUDA table", "CUDA table (emulated on the host)" */
    const char *grad_what;
} cuda_path;

static const cuda_path gpu_path = {NULL, "CUDA", "cuda-table", "cuda-backward", "CUDA table",
                                   "CUDA table gradient"};

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

/* The emulated table_cuda at D distances into `out`: every entry written, nothing past the end. */
static int emulated_table(const instance *in, const biaskit_tp_emulated *emu, const float *theta, int32_t D,
                          float *out, char *why, size_t size)
{
    size_t n = (size_t)in->geo.n_heads * (size_t)D;
    float *buf = ck_guarded_alloc(n);
    biaskit_error pe = {0};
    int bad = 0;
    if (!buf) {
        snprintf(why, size, "out of memory for a table of %zu values", n);
        return 1;
    }
    ck_stage(in->c, "the emulated table_cuda() with %d distances", D);
    if (emu->table_emulated(in->inst, theta, D, buf, &pe) != BIASKIT_OK)
        bad = snprintf(why, size, "the emulated table_cuda() with %d distances failed: %s", D,
                       pe.message[0] ? pe.message : "(no message)") > 0;
    else if (!ck_guard_intact(buf, n))
        bad = snprintf(why, size, "the emulated table_cuda() with %d distances wrote past the end of the table",
                       D) > 0;
    for (size_t k = 0; !bad && k < n; k++)
        if (ck_is_sentinel(buf[k]))
            bad = snprintf(why, size, "the emulated table_cuda() with %d distances left head %zu, distance %zu "
                           "unwritten", D, k / (size_t)D, k % (size_t)D) > 0;
    if (!bad)
        memcpy(out, buf, n * sizeof *out);
    free(buf);
    return bad;
}

static int path_table(const cuda_path *p, const instance *in, const float *theta, int32_t D, float *out, char *why,
                      size_t size)
{
    return p->emu ? emulated_table(in, p->emu, theta, D, out, why, size) : cuda_table(in, theta, D, out, why, size);
}

/* dtheta (host, in and out) += the gradient of the path's table_backward_cuda. */
static int path_backward(const cuda_path *p, const instance *in, const float *theta, int32_t D, const float *dtable,
                         float *dtheta, char *why, size_t size)
{
    if (!p->emu)
        return cuda_backward(in, theta, D, dtable, dtheta, why, size);
    biaskit_error pe = {0};
    ck_stage(in->c, "the emulated table_backward_cuda() with %d distances", D);
    if (p->emu->table_backward_emulated(in->inst, theta, D, dtable, dtheta, &pe) == BIASKIT_OK)
        return 0;
    snprintf(why, size, "the emulated table_backward_cuda() with %d distances failed: %s", D,
             pe.message[0] ? pe.message : "(no message)");
    return 1;
}

/* |cuda - host| <= RTOL |host| + ATOL max over the head of |host|. */
int ck_compare_tables(const float *dev, const float *host, int32_t H, int32_t D, const char *label, char *why,
                      size_t size)
{
    for (int32_t h = 0; h < H; h++) {
        const float *x = host + (size_t)h * (size_t)D, *y = dev + (size_t)h * (size_t)D;
        double head_max = 0.0;
        for (int32_t d = 0; d < D; d++)
            head_max = fmax(head_max, fabs((double)x[d]));
        for (int32_t d = 0; d < D; d++) {
            double diff = fabs((double)y[d] - (double)x[d]);
            if (!(diff <= CUDA_TABLE_RTOL * fabs((double)x[d]) + CUDA_TABLE_ATOL * head_max)) {
                snprintf(why, size, "head %d, distance %d of %d: %s %.9g vs host %.9g", h, d, D, label,
                         (double)y[d], (double)x[d]);
                return 1;
            }
        }
    }
    return 0;
}

static void cuda_compare_tables(checker *c, instance *in, const cuda_path *p)
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
            bad = ck_forward_finite(in, &m, in->theta, host, why, sizeof why) ||
                  path_table(p, in, in->theta, D, dev, why, sizeof why) ||
                  ck_compare_tables(dev, host, H, D, p->label, why, sizeof why);
        }
    }
    if (!bad)
        bad = path_table(p, in, in->theta, maxd, dev, why, sizeof why) ||
              path_table(p, in, in->theta, maxd, again, why, sizeof why) ||
              ck_same_bits(dev, again, (size_t)H * (size_t)maxd, p->emu ? "the emulated table_cuda()" : "table_cuda()",
                           why, sizeof why);
    if (bad)
        ck_item(c, BK_CHECK_FAIL, p->table_id, "%s vs host: %s", p->table_what, why);
    else
        ck_item(c, BK_CHECK_PASS, p->table_id,
                "%s vs host at 1, %d, 4097, %d distances, %s: |cuda - host| <= %g |host| + %g max|head|; "
                "bit-identical on repeat%s", p->table_what, L, maxd,
                in->n_params ? "initial and random parameters" : "fixed table", CUDA_TABLE_RTOL, CUDA_TABLE_ATOL,
                p->emu ? " (the helper's kernel code over the GPU's grid, compiled for the host)" : "");
    free(host), free(dev), free(again);
}

int64_t ck_gradient_mismatch(const float *dev, const float *host, size_t n)
{
    double top = 0.0;
    for (size_t i = 0; i < n; i++)
        top = fmax(top, fabs((double)host[i]));
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)dev[i] - (double)host[i]);
        if (!(diff <= CUDA_GRAD_TOL * (fabs((double)host[i]) + top)))
            return (int64_t)i;
    }
    return -1;
}

static int compare_gradients(const instance *in, const float *dev, const float *host, const char *label, char *why,
                             size_t size)
{
    int64_t i = ck_gradient_mismatch(dev, host, ck_n_params(in));
    if (i < 0)
        return 0;
    char entry[64];
    ck_entry_name(in, i, entry, sizeof entry);
    snprintf(why, size, "%s: %s %.9g vs host %.9g", entry, label, (double)dev[i], (double)host[i]);
    return 1;
}

static void cuda_compare_gradients(checker *c, instance *in, const cuda_path *p)
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
              path_backward(p, in, in->theta, sizes[k], w, dev, why, sizeof why) ||
              compare_gradients(in, dev, host, p->label, why, sizeof why) ||
              path_backward(p, in, in->theta, sizes[k], w, again, why, sizeof why) ||
              ck_same_bits(dev, again, n, p->emu ? "the emulated table_backward_cuda()" : "table_backward_cuda()",
                           why, sizeof why);
    }
    if (!bad) { /* into a non-zero start: start + gradient */
        for (size_t i = 0; i < n; i++)
            again[i] = (float)(1.0 + fabs((double)dev[i]));
        float *start = malloc(n * sizeof *start);
        if (start)
            memcpy(start, again, n * sizeof *start);
        else
            snprintf(why, sizeof why, "out of memory");
        bad = !start || path_backward(p, in, in->theta, sizes[2], w, again, why, sizeof why);
        for (size_t i = 0; !bad && i < n; i++)
            if (fabs((double)again[i] - ((double)start[i] + (double)dev[i])) >
                ADD_TOLERANCE * (fabs((double)start[i]) + fabs((double)dev[i]))) {
                char entry[64];
                ck_entry_name(in, (int64_t)i, entry, sizeof entry);
                snprintf(why, sizeof why, "%stable_backward_cuda() does not add into dtheta: %s started at %.9g, "
                         "gradient %.9g, got %.9g", p->emu ? "the emulated " : "", entry, (double)start[i],
                         (double)dev[i], (double)again[i]);
                bad = 1;
            }
        free(start);
    }
    if (bad)
        ck_item(c, BK_CHECK_FAIL, p->backward_id, "%s vs host: %s", p->grad_what, why);
    else
        ck_item(c, BK_CHECK_PASS, p->backward_id,
                "%s vs host at 64, 300, 4097 distances: |cuda - host| <= %g (|host_i| + max|host|); "
                "adds (+=); bit-identical on repeat%s", p->grad_what, CUDA_GRAD_TOL,
                p->emu ? " (the kernels' blocks, block trees and partial sums, in their order)" : "");
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
              compare_gradients(in, dev, host, "CUDA", why, sizeof why) ||
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

/* The emulation a plugin built with <biaskit/table_plugin.h> exports (biaskit_tp_emulation), when it belongs
 * to the plugin being checked and is large enough; else NULL (a hand-written plugin, an older SDK). */
static const biaskit_tp_emulated *find_emulation(const checker *c)
{
    if (!c->plugin || !c->plugin->handle)
        return NULL; /* registered from memory (bk_registry_add): no library to look in */
    biaskit_tp_emulation_fn fn = NULL;
    /* POSIX: a function pointer round-trips through void* (dlsym's documented use). */
    *(void **)&fn = dlsym(c->plugin->handle, BIASKIT_TP_EMULATION_SYMBOL);
    if (!fn)
        return NULL;
    ck_stage(c, "%s()", BIASKIT_TP_EMULATION_SYMBOL);
    const biaskit_tp_emulated *e = fn();
    size_t need = offsetof(biaskit_tp_emulated, table_backward_emulated) + sizeof e->table_backward_emulated;
    if (!e || e->struct_size < need || e->plugin != c->d || !e->table_emulated || !e->table_backward_emulated)
        return NULL;
    return e;
}

int ck_device_branches(const char *path, int *lines, int capacity, int *count, char *why, size_t size)
{
    static const char word[] = "__CUDA_ARCH__";
    const size_t wlen = sizeof word - 1;
    *count = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, size, "cannot read '%s': %s", path, strerror(errno));
        return 1;
    }
    /* the text with comments and literals made blanks (newlines kept), then searched line by line */
    strbuf code = {0};
    enum { CODE, LINE_COMMENT, BLOCK_COMMENT, STRING, CHAR } state = CODE;
    int ch, prev = 0;
    while ((ch = fgetc(f)) != EOF) {
        int out = ch;
        switch (state) {
        case CODE:
            if (ch == '/' && prev == '/') {
                state = LINE_COMMENT;
                code.s[code.len - 1] = ' ';
                out = ' ';
            } else if (ch == '*' && prev == '/') {
                state = BLOCK_COMMENT;
                code.s[code.len - 1] = ' ';
                out = ' ';
                ch = 0; /* the '*' of "/" "*" does not close it */
            } else if (ch == '"')
                state = STRING;
            else if (ch == '\'')
                state = CHAR;
            break;
        case LINE_COMMENT:
            if (ch == '\n' && prev != '\\')
                state = CODE;
            else
                out = ' ';
            break;
        case BLOCK_COMMENT:
            if (ch != '\n')
                out = ' ';
            if (ch == '/' && prev == '*') {
                state = CODE;
                ch = 0; /* the '/' of "*" "/" opens nothing after it */
            }
            break;
        case STRING:
        case CHAR:
            if ((state == STRING && ch == '"') || (state == CHAR && ch == '\''))
                state = prev == '\\' ? state : CODE;
            else if (ch != '\n')
                out = ' ';
            if (ch == '\\' && prev == '\\')
                ch = 0; /* an escaped backslash escapes nothing after it */
            break;
        }
        ck_sb_printf(&code, "%c", out);
        prev = ch;
    }
    int read_error = ferror(f);
    fclose(f);
    if (read_error) {
        free(code.s);
        snprintf(why, size, "cannot read '%s': read error", path);
        return 1;
    }
    int line = 1;
    for (const char *p = code.s ? code.s : ""; *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *q = p;
        while (q < p + len && (*q == ' ' || *q == '\t'))
            q++;
        int include = 0;
        if (q < p + len && *q == '#') {
            q++;
            while (q < p + len && (*q == ' ' || *q == '\t'))
                q++;
            include = (size_t)(p + len - q) >= 7 && strncmp(q, "include", 7) == 0;
        }
        for (const char *w = p; !include && w + wlen <= p + len; w++) {
            int before = w > p && (w[-1] == '_' || (w[-1] >= 'a' && w[-1] <= 'z') || (w[-1] >= 'A' && w[-1] <= 'Z') ||
                                   (w[-1] >= '0' && w[-1] <= '9'));
            char a = w + wlen < p + len ? w[wlen] : ' ';
            int after = a == '_' || (a >= 'a' && a <= 'z') || (a >= 'A' && a <= 'Z') || (a >= '0' && a <= '9');
            if (!before && !after && strncmp(w, word, wlen) == 0) {
                if (*count < capacity)
                    lines[*count] = line;
                ++*count;
                break; /* one per line */
            }
        }
        line++;
        p += len + (end ? 1 : 0);
    }
    free(code.s);
    return 0;
}

/* The "cuda-device-branch" item: __CUDA_ARCH__ in the plugin's source makes the device formula differ
 * from the host one there, which the emulation (compiled for the host) cannot see. The whole file is
 * searched (outside comments, literals and #include lines), not only the formula bodies: a formula may
 * call any function of its file. Headers it includes are not searched. */
static void check_device_branches(checker *c, const biaskit_tp_emulated *emu, int gpu_checked)
{
    enum { SHOWN = 8 };
    int lines[SHOWN], count = 0;
    char why[1024];
    const char *src = emu->source;
    if (!src || !*src) {
        ck_item(c, BK_CHECK_SKIP, "cuda-device-branch", "device-only branches (__CUDA_ARCH__) not looked for: the "
                "plugin does not name its source file");
        return;
    }
    if (ck_device_branches(src, lines, SHOWN, &count, why, sizeof why)) {
        ck_item(c, BK_CHECK_SKIP, "cuda-device-branch", "device-only branches (__CUDA_ARCH__) not looked for: the "
                "source the plugin was built from %s", why);
        return;
    }
    if (count == 0) {
        ck_item(c, BK_CHECK_PASS, "cuda-device-branch", "no __CUDA_ARCH__ in %s: the CUDA kernels run the host's "
                "formula (headers it includes are not searched)", src);
        return;
    }
    strbuf at = {0};
    for (int k = 0; k < count && k < SHOWN; k++)
        ck_sb_printf(&at, "%s%s:%d", k ? ", " : "", src, lines[k]);
    if (count > SHOWN)
        ck_sb_printf(&at, " and %d more", count - SHOWN);
    if (gpu_checked)
        ck_item(c, BK_CHECK_PASS, "cuda-device-branch", "device-only branch (__CUDA_ARCH__) at %s: the emulated check "
                "ran the host side; cuda-table and cuda-backward compared the device side on this GPU",
                ck_sb_text(&at));
    else
        ck_item(c, BK_CHECK_WARN, "cuda-device-branch", "device-only branch (__CUDA_ARCH__) at %s: the emulated check "
                "ran the host side; the device side runs only on a GPU", ck_sb_text(&at));
    free(at.s);
}

/* The emulated items of a formula-first plugin: its CUDA kernels run on the host against its host
 * functions, whatever the machine. */
static void check_emulated(checker *c, const biaskit_tp_emulated *emu, int gpu_checked)
{
    static const cuda_path path = {NULL, "emulated CUDA", "cuda-table-emulated", "cuda-backward-emulated",
                                   "CUDA table (the kernel emulated on the host)",
                                   "CUDA table gradient (the kernels emulated on the host)"};
    cuda_path p = path;
    p.emu = emu;
    instance in;
    if (ck_open_default(c, "cuda-table-emulated", c->opt->seed, 0, &in))
        return;
    cuda_compare_tables(c, &in, &p);
    if (in.n_params > 0 && c->d->table_backward)
        cuda_compare_gradients(c, &in, &p);
    else
        ck_item(c, BK_CHECK_SKIP, "cuda-backward-emulated", "%s vs host: %s", p.grad_what,
                in.n_params ? "no host table_backward() to compare with" : "no parameters with the default configuration");
    ck_instance_close(&in);
    check_device_branches(c, emu, gpu_checked);
}

void ck_unit_cuda(checker *c, const void *arg)
{
    (void)arg;
    const biaskit_plugin *d = c->d;
    char device[256];
    int gpu = bk_device_probe(device, sizeof device);
    int want_backward = d->table_backward_cuda != NULL;
    const biaskit_tp_emulated *emu = find_emulation(c);
    const char *no_gpu = emu ? "; its formula-first kernels run emulated on the host instead (the -emulated items)"
                             : "; this plugin's hand-written CUDA path is unverified";
    if (!d->table_cuda)
        ck_item(c, BK_CHECK_SKIP, "cuda-table", "CUDA table vs host: the plugin has no table_cuda() (the engine "
                "computes the table on the host and copies it)");
    else if (!gpu)
        ck_item(c, BK_CHECK_SKIP, "cuda-table", "CUDA table vs host: no GPU (%s)%s", device, no_gpu);
    if (want_backward && !gpu)
        ck_item(c, BK_CHECK_SKIP, "cuda-backward", "CUDA table gradient vs host: no GPU (%s)%s", device, no_gpu);
    if (emu)
        check_emulated(c, emu, gpu && d->table_cuda);
    if (!gpu || (!d->table_cuda && !want_backward))
        return;
    instance in;
    if (ck_open_default(c, "cuda-table", c->opt->seed, 0, &in))
        return;
    if (d->table_cuda)
        cuda_compare_tables(c, &in, &gpu_path);
    if (want_backward && in.n_params > 0 && d->table_backward)
        cuda_compare_gradients(c, &in, &gpu_path);
    else if (want_backward)
        ck_item(c, BK_CHECK_SKIP, "cuda-backward", "CUDA table gradient vs host: %s",
                in.n_params ? "no host table_backward() to compare with" : "no parameters with the default configuration");
    ck_instance_close(&in);
}
