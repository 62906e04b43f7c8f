#include "model/positions.h"

#include "plugin/contract.h"

#include "plugin/descriptor.h"
#include "plugin/services.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int plugin_fail(bk_error *err, const bk_term *t, const biaskit_error *pe, const char *what)
{
    return bk_fail(err, pe->code ? pe->code : BK_ERR_PLUGIN, "term '%s' (plugin %s): %s failed: %s", t->label,
                   t->plugin->desc->name, what, pe->message[0] ? pe->message : "no message given");
}

/* The rotary plugin's rotary_ctx (ABI 2), or NULL when its descriptor ends before the field or leaves it unset. */
typedef int (*rotary_ctx_fn)(const void *inst, const biaskit_context *ctx, float *inv_freq, float *amplitude,
                             biaskit_error *err);
static rotary_ctx_fn rotary_ctx_of(const biaskit_plugin *d)
{
    return BK_DESCRIPTOR_FN(d, rotary_ctx);
}

/* What the engine relies on from a rotary plugin (plugin/contract.h): finite frequencies; an amplitude
 * (rotary_ctx) finite and > 0. */
static int check_rotary(const bk_term *t, const float *inv_freq, int32_t pairs, float amplitude, const char *hook,
                        int32_t length, bk_error *err)
{
    char at[48] = "", why[320];
    if (length > 0)
        snprintf(at, sizeof at, " for length %d", (int)length);
    if (bk_contract_rotary(inv_freq, pairs, amplitude, why, sizeof why))
        return bk_fail(err, BK_ERR_PLUGIN, "term '%s' (plugin %s): %s%s gave %s", t->label, t->plugin->desc->name,
                       hook, at, why);
    return BK_OK;
}

/* rotary_ctx() for sequences of `length` tokens into ps->inv_freq_next and *amplitude, checked. */
static int ask_rotary_ctx(bk_positions *ps, int32_t length, int training, float *amplitude, bk_error *err)
{
    const bk_term *t = &ps->set->terms[ps->set->rotary];
    biaskit_context ctx = bk_term_context(ps->set, -1, length, training);
    biaskit_error pe = {0, ""};
    *amplitude = NAN; /* a plugin that leaves it unset is caught by the check */
    bk_plugin_call_enter(t, "rotary_ctx()", -1, ps->step);
    int prc = rotary_ctx_of(t->plugin->desc)(t->instance, &ctx, ps->inv_freq_next, amplitude, &pe);
    bk_plugin_call_leave();
    if (prc != BIASKIT_OK)
        return plugin_fail(err, t, &pe, "rotary_ctx()");
    return check_rotary(t, ps->inv_freq_next, ps->pairs, *amplitude, "rotary_ctx()", length, err);
}

/* The rotary plugin's rotary_decay (xPos), or NULL. */
typedef int (*rotary_decay_fn)(const void *inst, const biaskit_context *ctx, float *zeta, float *scale,
                               biaskit_error *err);
static rotary_decay_fn rotary_decay_of(const biaskit_plugin *d)
{
    return BK_DESCRIPTOR_FN(d, rotary_decay);
}

/* rotary_decay() into ps->decay and ps->decay_scale, checked: every zeta_k and the scale finite and > 0. */
static int ask_rotary_decay(bk_positions *ps, const bk_term *t, bk_error *err)
{
    if (!(ps->decay = malloc((size_t)ps->pairs * sizeof(float))))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for rotary decays");
    biaskit_context ctx = bk_term_context(ps->set, -1, ps->set->geometry.train_length, 1);
    biaskit_error pe = {0, ""};
    float scale = NAN;
    bk_plugin_call_enter(t, "rotary_decay()", -1, 0);
    int prc = rotary_decay_of(t->plugin->desc)(t->instance, &ctx, ps->decay, &scale, &pe);
    bk_plugin_call_leave();
    if (prc != BIASKIT_OK)
        return plugin_fail(err, t, &pe, "rotary_decay()");
    char why[160];
    if (bk_contract_rotary_decay(ps->decay, ps->pairs, scale, why, sizeof why))
        return bk_fail(err, BK_ERR_PLUGIN, "term '%s' (plugin %s): rotary_decay() gave %s", t->label,
                       t->plugin->desc->name, why);
    ps->decay_scale = scale;
    return BK_OK;
}

/* The rotary plugin's rotary_views (Self-Extend, ReRoPE, STRING), or NULL. */
typedef int (*rotary_views_fn)(const void *inst, const biaskit_context *ctx, biaskit_rotary_view *views,
                               int32_t max_views, int32_t *n_views, biaskit_error *err);
static rotary_views_fn rotary_views_of(const biaskit_plugin *d)
{
    return BK_DESCRIPTOR_FN(d, rotary_views);
}

int bk_positions_init(bk_positions *ps, const bk_term_set *set, bk_error *err)
{
    memset(ps, 0, sizeof *ps);
    ps->set = set;
    ps->amplitude = 1.0f;
    ps->training = 1;
    if (set && set->n) {
        size_t n = (size_t)set->n;
        ps->cuda_embeds = calloc(n, sizeof *ps->cuda_embeds);
        ps->host_embeds = calloc(n, sizeof *ps->host_embeds);
        ps->cuda_embed_backwards = calloc(n, sizeof *ps->cuda_embed_backwards);
        ps->host_embed_backwards = calloc(n, sizeof *ps->host_embed_backwards);
        ps->logged = calloc(n, 1);
        if (!ps->cuda_embeds || !ps->host_embeds || !ps->cuda_embed_backwards || !ps->host_embed_backwards ||
            !ps->logged)
            return bk_fail(err, BK_ERR_NOMEM, "out of memory for the positions of %d terms", set->n);
    }
    if (!set || set->rotary < 0)
        return BK_OK;
    const bk_term *t = &set->terms[set->rotary];
    ps->pairs = set->geometry.d_head / 2;
    if (!(ps->inv_freq = malloc((size_t)ps->pairs * sizeof(float))) ||
        !(ps->inv_freq_next = malloc((size_t)ps->pairs * sizeof(float))))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for rotary frequencies");
    if (rotary_decay_of(t->plugin->desc)) {
        int rc = ask_rotary_decay(ps, t, err);
        if (rc)
            return rc;
    }
    ps->has_views = rotary_views_of(t->plugin->desc) != NULL;
    if (rotary_ctx_of(t->plugin->desc)) {
        /* asked now too, so that a plugin that fails does so when the model is built */
        ps->has_rotary_ctx = 1;
        int32_t length = set->geometry.train_length > 0 ? set->geometry.train_length : 1;
        int rc = ask_rotary_ctx(ps, length, ps->training, &ps->amplitude, err);
        if (rc)
            return rc;
        memcpy(ps->inv_freq, ps->inv_freq_next, (size_t)ps->pairs * sizeof(float));
        ps->freq_length = length, ps->freq_training = ps->training;
        return BK_OK;
    }
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(t, "rotary_frequencies()", -1, 0);
    int prc = t->plugin->desc->rotary_frequencies(t->instance, ps->inv_freq, &pe);
    bk_plugin_call_leave();
    if (prc != BIASKIT_OK)
        return plugin_fail(err, t, &pe, "rotary_frequencies()");
    return check_rotary(t, ps->inv_freq, ps->pairs, ps->amplitude, "rotary_frequencies()", 0, err);
}

void bk_positions_set_training(bk_positions *ps, int training)
{
    ps->training = training != 0;
}

static int on_device(const bk_positions *ps)
{
    return ps->be && ps->be->on_device;
}

static void release(bk_positions *ps, void *ptr)
{
    if (ptr)
        ps->be->release(ps->be, ptr);
}

/* The device copies of the per-batch arrays (token indices, segments, embedding buffers). */
static void device_batch_free(bk_positions *ps)
{
    if (!on_device(ps))
        return;
    release(ps, ps->token_index_dev), release(ps, ps->segment_index_dev), release(ps, ps->segment_position_dev);
    release(ps, ps->embed_dev);
    free(ps->embed_host);
    ps->token_index_dev = ps->segment_index_dev = ps->segment_position_dev = NULL;
    ps->embed_dev = ps->embed_host = NULL;
    ps->dev_capacity = 0;
    ps->dev_B = ps->dev_T = 0;
}

/* Everything bk_positions_set_backend allocated in the backend's memory. */
static void device_free(bk_positions *ps)
{
    if (!on_device(ps))
        return;
    device_batch_free(ps);
    release(ps, ps->rot_cos_dev), release(ps, ps->rot_sin_dev);
    ps->rot_cos_dev = ps->rot_sin_dev = NULL;
    release(ps, ps->view_cos_dev), release(ps, ps->view_sin_dev);
    ps->view_cos_dev = ps->view_sin_dev = NULL;
    ps->view_capacity_dev = 0, ps->views_version_dev = 0;
    ps->rot_rows_dev = 0;
    ps->rot_capacity_dev = 0;
    ps->rot_version_dev = 0;
    for (int t = 0; ps->set && t < ps->set->n; t++) {
        if (ps->embed_theta_dev)
            release(ps, ps->embed_theta_dev[t]);
        if (ps->embed_dtheta_dev)
            release(ps, ps->embed_dtheta_dev[t]);
    }
    free(ps->embed_theta_dev), free(ps->embed_dtheta_dev), free(ps->grad_host);
    ps->embed_theta_dev = ps->embed_dtheta_dev = NULL;
    ps->grad_host = NULL;
}

void bk_positions_free(bk_positions *ps)
{
    if (!ps)
        return;
    device_free(ps);
    free(ps->cuda_embeds), free(ps->host_embeds), free(ps->cuda_embed_backwards), free(ps->host_embed_backwards);
    free(ps->logged);
    free(ps->token_index);
    free(ps->segment_index);
    free(ps->segment_position);
    free(ps->inv_freq);
    free(ps->inv_freq_next);
    free(ps->decay);
    free(ps->rot_cos);
    free(ps->rot_sin);
    free(ps->view_pos);
    free(ps->view_cos);
    free(ps->view_sin);
    memset(ps, 0, sizeof *ps);
}

static int reserve(bk_positions *ps, int64_t n, bk_error *err)
{
    if (n <= ps->capacity)
        return BK_OK;
    int segments = ps->set && ps->set->segmenter >= 0;
    int32_t *ti = malloc((size_t)n * sizeof *ti);
    int32_t *si = segments ? malloc((size_t)n * sizeof *si) : NULL;
    int32_t *sp = segments ? malloc((size_t)n * sizeof *sp) : NULL;
    if (!ti || (segments && (!si || !sp))) {
        free(ti), free(si), free(sp);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the positions of %lld tokens", (long long)n);
    }
    free(ps->token_index), free(ps->segment_index), free(ps->segment_position);
    ps->token_index = ti, ps->segment_index = si, ps->segment_position = sp;
    ps->capacity = n;
    return BK_OK;
}

int64_t bk_segments_first_violation(const int32_t *index, const int32_t *position, int64_t n)
{
    for (int64_t k = 0; k < n; k++) {
        int32_t step = k ? index[k] - index[k - 1] : index[k];
        int32_t want = k == 0 || step == 1 ? 0 : position[k - 1] + 1;
        if ((k == 0 ? step != 0 : step != 0 && step != 1) || position[k] != want)
            return k;
    }
    return -1;
}

/* What the attention and the embeddings rely on, checked for one row. */
static int check_segments(const bk_term *t, const int32_t *index, const int32_t *position, int T, int row,
                          bk_error *err)
{
    int64_t k = bk_segments_first_violation(index, position, T);
    if (k < 0)
        return BK_OK;
    return bk_fail(err, BK_ERR_PLUGIN,
                   "term '%s' (plugin %s): segment() gave token %lld of row %d segment %d, position %d (after "
                   "segment %d, position %d); expected segment 0, position 0 first, then segments growing by 0 or 1 "
                   "and positions restarting at 0 in a new segment, else growing by 1",
                   t->label, t->plugin->desc->name, (long long)k, row, (int)index[k], (int)position[k],
                   k ? (int)index[k - 1] : 0, k ? (int)position[k - 1] : 0);
}

/* The rotation tables for positions < T: made again when T outgrows them or when the frequencies or the
 * amplitude change (rotary_ctx asked again for a new length or training flag). */
/* Grows the host tables *a and *b (the same size) to hold n floats each. */
static int grow_pair(float **a, float **b, int64_t *capacity, int64_t n)
{
    if (n <= *capacity)
        return BK_OK;
    float *pa = realloc(*a, (size_t)n * sizeof *pa);
    if (pa)
        *a = pa;
    float *pb = pa ? realloc(*b, (size_t)n * sizeof *pb) : NULL;
    if (pb)
        *b = pb;
    if (!pa || !pb)
        return BK_ERR_NOMEM;
    *capacity = n;
    return BK_OK;
}

static int prepare_rotary(bk_positions *ps, int T, bk_error *err)
{
    if (!ps->pairs || T < 1)
        return BK_OK;
    int changed = 0;
    float amplitude = ps->amplitude;
    if (ps->has_rotary_ctx && (T != ps->freq_length || ps->training != ps->freq_training)) {
        int rc = ask_rotary_ctx(ps, T, ps->training, &amplitude, err);
        if (rc)
            return rc;
        changed = memcmp(ps->inv_freq_next, ps->inv_freq, (size_t)ps->pairs * sizeof(float)) != 0 ||
                  memcmp(&amplitude, &ps->amplitude, sizeof amplitude) != 0;
    }
    if (!changed && T <= ps->rot_rows) {
        ps->freq_length = ps->has_rotary_ctx ? T : ps->freq_length;
        ps->freq_training = ps->training;
        return BK_OK;
    }
    const int64_t n = (int64_t)T * ps->pairs * (ps->decay ? 2 : 1); /* with a decay, q's tables and k's */
    if (grow_pair(&ps->rot_cos, &ps->rot_sin, &ps->rot_capacity, n))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for rotary angles of %d positions", T);
    if (changed) { /* what the tables are made of from now on */
        float *f = ps->inv_freq;
        ps->inv_freq = ps->inv_freq_next, ps->inv_freq_next = f;
        ps->amplitude = amplitude;
    }
    if (ps->has_rotary_ctx)
        ps->freq_length = T, ps->freq_training = ps->training;
    /* the angle in double: p * inv_freq reaches 1e4 rad at long lengths, where float loses the phase; the
     * amplitude (1 unless the plugin scales q and k) multiplies both, rounded once */
    const double amp = (double)ps->amplitude;
    const size_t kpart = (size_t)T * (size_t)ps->pairs; /* where k's tables start (with a decay) */
    for (int p = 0; p < T; p++)
        for (int32_t k = 0; k < ps->pairs; k++) {
            const double angle = (double)p * (double)ps->inv_freq[k];
            const size_t at = (size_t)p * ps->pairs + k;
            if (!ps->decay) {
                ps->rot_cos[at] = (float)(amp * cos(angle));
                ps->rot_sin[at] = (float)(amp * sin(angle));
                continue;
            }
            /* xPos: q's pair times zeta^(p/scale), k's times zeta^(-p/scale) */
            const double up = pow((double)ps->decay[k], (double)p / (double)ps->decay_scale);
            const float qa = (float)(amp * up), ka = (float)(amp / up);
            if (!(isfinite(qa) && qa > 0.0f && isfinite(ka) && ka > 0.0f))
                return bk_fail(err, BK_ERR_INVALID,
                               "term '%s' (plugin %s): the decay of pair %d at position %d is out of float's range "
                               "(zeta %g, scale %g: q x %g, k x %g); expected shorter sequences or a larger scale",
                               ps->set->terms[ps->set->rotary].label,
                               ps->set->terms[ps->set->rotary].plugin->desc->name, (int)k, p,
                               (double)ps->decay[k], (double)ps->decay_scale, amp * up, amp / up);
            ps->rot_cos[at] = (float)(amp * up * cos(angle)), ps->rot_sin[at] = (float)(amp * up * sin(angle));
            ps->rot_cos[kpart + at] = (float)(amp / up * cos(angle));
            ps->rot_sin[kpart + at] = (float)(amp / up * sin(angle));
        }
    ps->rot_rows = T;
    ps->rot_version++;
    return BK_OK;
}

/* rotary_views() for T tokens, checked (plugin/contract.h), and the views' tables from the frequencies
 * and the amplitude of the rotation (prepare_rotary first). */
static int prepare_views(bk_positions *ps, int T, bk_error *err)
{
    if (!ps->has_views || T < 1)
        return BK_OK;
    if (T == ps->views_length && ps->training == ps->views_training && ps->rot_version == ps->views_rot_version)
        return BK_OK;
    const bk_term *t = &ps->set->terms[ps->set->rotary];
    const int64_t need = 2 * (int64_t)BIASKIT_MAX_ROTARY_VIEWS * T;
    if (need > ps->view_pos_capacity) {
        double *p = realloc(ps->view_pos, (size_t)need * sizeof *p);
        if (!p)
            return bk_fail(err, BK_ERR_NOMEM, "out of memory for the rotary views of %d positions", T);
        ps->view_pos = p, ps->view_pos_capacity = need;
    }
    biaskit_rotary_view views[BIASKIT_MAX_ROTARY_VIEWS];
    for (int v = 0; v < BIASKIT_MAX_ROTARY_VIEWS; v++) {
        views[v].min_distance = views[v].max_distance = -1; /* a plugin that leaves them is caught below */
        views[v].q_pos = ps->view_pos + (size_t)2 * v * T, views[v].k_pos = views[v].q_pos + T;
        for (int i = 0; i < 2 * T; i++)
            views[v].q_pos[i] = NAN;
    }
    biaskit_context ctx = bk_term_context(ps->set, -1, T, ps->training);
    biaskit_error pe = {0, ""};
    int32_t n = -1;
    bk_plugin_call_enter(t, "rotary_views()", -1, ps->step);
    int prc = rotary_views_of(t->plugin->desc)(t->instance, &ctx, views, BIASKIT_MAX_ROTARY_VIEWS, &n, &pe);
    bk_plugin_call_leave();
    if (prc != BIASKIT_OK)
        return plugin_fail(err, t, &pe, "rotary_views()");
    char why[320];
    if (bk_contract_rotary_views(views, n, T, why, sizeof why))
        return bk_fail(err, BK_ERR_PLUGIN, "term '%s' (plugin %s): rotary_views() for length %d gave %s", t->label,
                       t->plugin->desc->name, T, why);
    /* one view of [0, inf) at the token indices is the ordinary rotation */
    int plain = n == 1;
    for (int i = 0; plain && i < T; i++)
        plain = views[0].q_pos[i] == (double)i && views[0].k_pos[i] == (double)i;
    if (plain)
        n = 0;
    if (n && (ps->decay || t->stream != BK_STREAM_TOKEN))
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "term '%s' (plugin %s): position views (rotary_views) %s; expected a term on the token stream "
                       "without a decay",
                       t->label, t->plugin->desc->name,
                       ps->decay ? "with a decay (rotary_decay) are not supported"
                                 : "on the segment stream are not supported");
    int64_t floats = 0;
    for (int32_t v = 0; v < n; v++)
        floats += 2 * (int64_t)(T > views[v].min_distance ? T - views[v].min_distance : 0) * ps->pairs;
    if (grow_pair(&ps->view_cos, &ps->view_sin, &ps->view_capacity, floats))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the rotary views' angles of %d positions", T);
    /* the angle in double as the ordinary tables' (prepare_rotary), the amplitude on q and k */
    const double amp = (double)ps->amplitude;
    int64_t off = 0;
    for (int32_t v = 0; v < n; v++) {
        const int32_t lo = views[v].min_distance, rows = T > lo ? T - lo : 0;
        ps->view_lo[v] = lo, ps->view_hi[v] = views[v].max_distance, ps->view_off[v] = off;
        for (int32_t r = 0; r < rows; r++)
            for (int32_t k = 0; k < ps->pairs; k++) {
                const double f = (double)ps->inv_freq[k];
                const double aq = views[v].q_pos[r + lo] * f, ak = views[v].k_pos[r] * f;
                const size_t at = (size_t)off + (size_t)r * ps->pairs + k, kat = at + (size_t)rows * ps->pairs;
                ps->view_cos[at] = (float)(amp * cos(aq)), ps->view_sin[at] = (float)(amp * sin(aq));
                ps->view_cos[kat] = (float)(amp * cos(ak)), ps->view_sin[kat] = (float)(amp * sin(ak));
            }
        off += 2 * (int64_t)rows * ps->pairs;
    }
    ps->n_views = n, ps->view_floats = floats;
    ps->views_length = T, ps->views_training = ps->training, ps->views_rot_version = ps->rot_version;
    ps->views_version++;
    return BK_OK;
}

/* A CUDA backend and a plugin with embed_cuda: the embedding runs on the device. */
static int embeds_on_device(const bk_positions *ps, const bk_term *t)
{
    return ps->be && ps->be->kind == BK_BACKEND_CUDA && bk_descriptor_embed_cuda(t->plugin->desc);
}

int bk_positions_set_backend(bk_positions *ps, bk_backend *be, bk_error *err)
{
    if (ps->be == be)
        return BK_OK;
    device_free(ps);
    ps->be = be;
    ps->B = ps->T = 0; /* the next prepare uploads */
    if (!on_device(ps) || !ps->set || !ps->set->n)
        return BK_OK;
    size_t n = (size_t)ps->set->n, largest = 0;
    ps->embed_theta_dev = calloc(n, sizeof *ps->embed_theta_dev);
    ps->embed_dtheta_dev = calloc(n, sizeof *ps->embed_dtheta_dev);
    if (!ps->embed_theta_dev || !ps->embed_dtheta_dev)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory setting up the positions on the %s backend", be->name);
    for (int i = 0; i < ps->set->n; i++) {
        const bk_term *t = &ps->set->terms[i];
        size_t bytes = (size_t)t->n_params * sizeof(float);
        if (!(t->caps & BIASKIT_CAP_EMBED) || !t->n_params || !embeds_on_device(ps, t))
            continue;
        int rc = be->alloc(be, (void **)&ps->embed_theta_dev[i], bytes, err);
        if (!rc && bk_descriptor_embed_backward_cuda(t->plugin->desc)) {
            rc = be->alloc(be, (void **)&ps->embed_dtheta_dev[i], bytes, err);
            largest = bytes > largest ? bytes : largest;
        }
        if (rc)
            return bk_error_prefix(err, "device parameters of term '%s' (plugin %s, %lld floats): ", t->label,
                                   t->plugin->desc->name, (long long)t->n_params);
    }
    if (largest && !(ps->grad_host = malloc(largest)))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the staging of embedding gradients");
    return BK_OK;
}

/* A pair of host tables (cos, sin) of `floats` each into the device's *cdev, *sdev (grown when
 * *capacity is too small). */
static int upload_tables(bk_positions *ps, float **cdev, float **sdev, int64_t *capacity, const float *c,
                         const float *s, int64_t floats, bk_error *err)
{
    bk_backend *be = ps->be;
    const size_t bytes = (size_t)floats * sizeof(float);
    int rc;
    if (floats > *capacity) {
        release(ps, *cdev), release(ps, *sdev);
        *cdev = *sdev = NULL;
        *capacity = 0;
        if ((rc = be->alloc(be, (void **)cdev, bytes, err)) || (rc = be->alloc(be, (void **)sdev, bytes, err)))
            return rc;
        *capacity = floats;
    }
    if (bytes && ((rc = be->upload(be, *cdev, c, bytes, err)) || (rc = be->upload(be, *sdev, s, bytes, err))))
        return rc;
    return BK_OK;
}

/* After the host arrays of a prepare: the device copies of what the device reads. */
static int upload_batch(bk_positions *ps, bk_error *err)
{
    bk_backend *be = ps->be;
    int64_t n = (int64_t)ps->B * ps->T;
    int segments = ps->set && ps->set->segmenter >= 0;
    int embeds = 0;
    for (int i = 0; ps->set && i < ps->set->n; i++)
        embeds |= (ps->set->terms[i].caps & BIASKIT_CAP_EMBED) != 0;
    int rc = BK_OK;
    if (n > ps->dev_capacity) {
        device_batch_free(ps);
        size_t ints = (size_t)n * sizeof(int32_t);
        size_t floats = embeds ? (size_t)n * (size_t)ps->set->geometry.d_model * sizeof(float) : 0;
        rc = be->alloc(be, (void **)&ps->token_index_dev, ints, err);
        if (!rc && segments)
            rc = be->alloc(be, (void **)&ps->segment_index_dev, ints, err);
        if (!rc && segments)
            rc = be->alloc(be, (void **)&ps->segment_position_dev, ints, err);
        if (!rc && embeds)
            rc = be->alloc(be, (void **)&ps->embed_dev, floats, err);
        if (!rc && embeds && !(ps->embed_host = malloc(floats)))
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory");
        if (rc) {
            device_batch_free(ps);
            return bk_error_prefix(err, "the positions of %lld tokens on the %s backend: ", (long long)n, be->name);
        }
        ps->dev_capacity = n;
    }
    size_t bytes = (size_t)n * sizeof(int32_t);
    if (ps->dev_B != ps->B || ps->dev_T != ps->T) { /* token indices depend on the shape only */
        if ((rc = be->upload(be, ps->token_index_dev, ps->token_index, bytes, err)))
            return rc;
        ps->dev_B = ps->B, ps->dev_T = ps->T;
    }
    if (segments && ((rc = be->upload(be, ps->segment_index_dev, ps->segment_index, bytes, err)) ||
                     (rc = be->upload(be, ps->segment_position_dev, ps->segment_position, bytes, err))))
        return rc;
    if (ps->pairs && ps->rot_version_dev != ps->rot_version) { /* the host tables were made again */
        const int64_t floats = (int64_t)ps->rot_rows * ps->pairs * (ps->decay ? 2 : 1);
        ps->rot_rows_dev = 0;
        ps->rot_version_dev = 0;
        if ((rc = upload_tables(ps, &ps->rot_cos_dev, &ps->rot_sin_dev, &ps->rot_capacity_dev, ps->rot_cos,
                                ps->rot_sin, floats, err)))
            return bk_error_prefix(err, "rotary angles of %d positions on the %s backend: ", (int)ps->rot_rows,
                                   be->name);
        ps->rot_rows_dev = ps->rot_rows;
        ps->rot_version_dev = ps->rot_version;
    }
    if (ps->n_views && ps->views_version_dev != ps->views_version) { /* the views' tables were made again */
        ps->views_version_dev = 0;
        if ((rc = upload_tables(ps, &ps->view_cos_dev, &ps->view_sin_dev, &ps->view_capacity_dev, ps->view_cos,
                                ps->view_sin, ps->view_floats, err)))
            return bk_error_prefix(err, "rotary views' angles of %d positions on the %s backend: ", (int)ps->T,
                                   be->name);
        ps->views_version_dev = ps->views_version;
    }
    return BK_OK;
}

int bk_positions_prepare(bk_positions *ps, const int32_t *inputs, int B, int T, bk_error *err)
{
    int64_t n = (int64_t)B * T;
    int rc = reserve(ps, n, err);
    if (rc)
        return rc;
    ps->B = B, ps->T = T;
    for (int64_t i = 0; i < n; i++)
        ps->token_index[i] = (int32_t)(i % T);
    ps->span[BK_STREAM_TOKEN] = T;
    ps->span[BK_STREAM_SEGMENT] = 0;
    if (ps->set && ps->set->segmenter >= 0) {
        const bk_term *t = &ps->set->terms[ps->set->segmenter];
        for (int b = 0; b < B; b++) {
            size_t row = (size_t)b * (size_t)T;
            biaskit_error pe = {0, ""};
            bk_plugin_call_enter(t, "segment()", -1, ps->step);
            int prc = t->plugin->desc->segment(t->instance, inputs + row, T, ps->segment_index + row,
                                               ps->segment_position + row, &pe);
            bk_plugin_call_leave();
            if (prc != BIASKIT_OK)
                return plugin_fail(err, t, &pe, "segment()");
            if ((rc = check_segments(t, ps->segment_index + row, ps->segment_position + row, T, b, err)))
                return rc;
            /* indices start at 0 and never decrease: the row's largest distance is its last index */
            int32_t span = T > 0 ? ps->segment_index[row + (size_t)T - 1] + 1 : 0;
            ps->span[BK_STREAM_SEGMENT] = span > ps->span[BK_STREAM_SEGMENT] ? span : ps->span[BK_STREAM_SEGMENT];
        }
    }
    if ((rc = prepare_rotary(ps, T, err)) || (rc = prepare_views(ps, T, err)))
        return rc;
    return on_device(ps) ? upload_batch(ps, err) : BK_OK;
}

int32_t bk_positions_span(const bk_positions *ps, bk_stream s)
{
    return (int)s >= 0 && s < BK_STREAM_COUNT ? ps->span[s] : 0;
}

const int32_t *bk_positions_stream(const bk_positions *ps, bk_stream s)
{
    if (s != BK_STREAM_SEGMENT)
        return NULL;
    return on_device(ps) ? ps->segment_index_dev : ps->segment_index;
}

int bk_positions_rotary(const bk_positions *ps, bk_rotary_view *view)
{
    memset(view, 0, sizeof *view);
    if (!ps->pairs)
        return 0;
    const bk_term *t = &ps->set->terms[ps->set->rotary];
    int device = on_device(ps);
    view->cos = device ? ps->rot_cos_dev : ps->rot_cos;
    view->sin = device ? ps->rot_sin_dev : ps->rot_sin;
    view->positions = t->stream == BK_STREAM_SEGMENT ? bk_positions_stream(ps, BK_STREAM_SEGMENT) : NULL;
    view->pairs = ps->pairs;
    view->rows = device ? ps->rot_rows_dev : ps->rot_rows;
    if (ps->decay) { /* k's tables after q's */
        const size_t kpart = (size_t)view->rows * (size_t)ps->pairs;
        view->kcos = view->cos + kpart, view->ksin = view->sin + kpart;
    }
    return 1;
}

int bk_positions_views(const bk_positions *ps, bk_rotary_view views[BIASKIT_MAX_ROTARY_VIEWS],
                       int32_t lo[BIASKIT_MAX_ROTARY_VIEWS], int32_t hi[BIASKIT_MAX_ROTARY_VIEWS])
{
    const int device = on_device(ps);
    const float *c = device ? ps->view_cos_dev : ps->view_cos, *s = device ? ps->view_sin_dev : ps->view_sin;
    for (int32_t v = 0; v < ps->n_views; v++) {
        const int32_t rows = ps->T > ps->view_lo[v] ? ps->T - ps->view_lo[v] : 0;
        const size_t kpart = (size_t)rows * (size_t)ps->pairs;
        memset(&views[v], 0, sizeof views[v]);
        views[v].cos = c + ps->view_off[v], views[v].sin = s + ps->view_off[v];
        views[v].kcos = views[v].cos + kpart, views[v].ksin = views[v].sin + kpart;
        views[v].pairs = ps->pairs, views[v].rows = rows;
        lo[v] = ps->view_lo[v], hi[v] = ps->view_hi[v];
    }
    return ps->n_views;
}

/* An embedding term reads the token index, or the position inside the segment (host or device copy). */
static const int32_t *embed_positions(const bk_positions *ps, const bk_term *t, int device)
{
    if (t->stream == BK_STREAM_SEGMENT)
        return device ? ps->segment_position_dev : ps->segment_position;
    return device ? ps->token_index_dev : ps->token_index;
}

/* Once per term and run: the engine's log says that its plugin's host code stands in on the device. */
static void log_host_path(bk_positions *ps, int i, unsigned what)
{
    if (ps->logged[i] & what)
        return;
    ps->logged[i] |= (unsigned char)what;
    const bk_term *t = &ps->set->terms[i];
    const char *why = ps->be->kind != BK_BACKEND_CUDA ? "the emulated backend never calls plugins' CUDA code"
                      : what == 1                      ? "the plugin has no embed_cuda()"
                                                       : "the plugin has no embed_backward_cuda()";
    bk_services()->log(BIASKIT_LOG_INFO, t->plugin->desc->name,
                       "term '%s': %s computed on the host and copied %s the %s device (%s)", t->label,
                       what == 1 ? "embedding" : "embedding gradient", what == 1 ? "to" : "from", ps->be->name, why);
}

/* The host embed() of term i into `out` (host, (B*T, C)), adding. */
static int host_embed(bk_positions *ps, int i, float *out, bk_error *err)
{
    const bk_term *t = &ps->set->terms[i];
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(t, "embed()", -1, ps->step);
    int prc = t->plugin->desc->embed(t->instance, bk_term_theta(t, 0), embed_positions(ps, t, 0),
                                     (int64_t)ps->B * ps->T, out, &pe);
    bk_plugin_call_leave();
    if (prc != BIASKIT_OK)
        return plugin_fail(err, t, &pe, "embed()");
    ps->host_embeds[i]++;
    return BK_OK;
}

/* Term i on a device backend: embed_cuda on the stream, or the host embedding uploaded and added. */
static int device_embed(bk_positions *ps, int i, float *encoded, bk_error *err)
{
    bk_backend *be = ps->be;
    const bk_term *t = &ps->set->terms[i];
    const int64_t count = (int64_t)ps->B * ps->T;
    const size_t n = (size_t)count * (size_t)ps->set->geometry.d_model;
    int rc;
    if (!embeds_on_device(ps, t)) {
        log_host_path(ps, i, 1);
        memset(ps->embed_host, 0, n * sizeof(float));
        if ((rc = host_embed(ps, i, ps->embed_host, err)) ||
            (rc = be->upload(be, ps->embed_dev, ps->embed_host, n * sizeof(float), err)) ||
            (rc = be->residual_forward(be, encoded, encoded, ps->embed_dev, n, err)))
            return rc;
        return BK_OK;
    }
    float *theta = ps->embed_theta_dev[i];
    if (theta && (rc = be->upload(be, theta, bk_term_theta(t, 0), (size_t)t->n_params * sizeof(float), err)))
        return bk_error_prefix(err, "uploading the parameters of term '%s': ", t->label);
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(t, "embed_cuda()", -1, ps->step);
    int prc = bk_descriptor_embed_cuda(t->plugin->desc)(t->instance, theta, embed_positions(ps, t, 1), count,
                                                        encoded, be->stream(be), &pe);
    bk_plugin_call_leave();
    if (prc != BIASKIT_OK)
        return plugin_fail(err, t, &pe, "embed_cuda()");
    ps->cuda_embeds[i]++;
    return BK_OK;
}

int bk_embed_forward(bk_positions *ps, float *encoded, bk_error *err)
{
    if (!ps->set)
        return BK_OK;
    for (int i = 0; i < ps->set->n; i++) {
        if (!(ps->set->terms[i].caps & BIASKIT_CAP_EMBED))
            continue;
        int rc = on_device(ps) ? device_embed(ps, i, encoded, err) : host_embed(ps, i, encoded, err);
        if (rc)
            return rc;
    }
    return BK_OK;
}

/* The host embed_backward() of term i from the host dencoded into the host dtheta. */
static int host_embed_backward(bk_positions *ps, int i, const float *dencoded, float *dtheta, bk_error *err)
{
    const bk_term *t = &ps->set->terms[i];
    const biaskit_plugin *d = t->plugin->desc;
    if (!d->embed_backward)
        return bk_fail(err, BK_ERR_PLUGIN, "term '%s' (plugin %s) has %lld parameters but no embed_backward()",
                       t->label, d->name, (long long)t->n_params);
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(t, "embed_backward()", -1, ps->step);
    int prc = d->embed_backward(t->instance, bk_term_theta(t, 0), embed_positions(ps, t, 0), (int64_t)ps->B * ps->T,
                                dencoded, dtheta, &pe);
    bk_plugin_call_leave();
    if (prc != BIASKIT_OK)
        return plugin_fail(err, t, &pe, "embed_backward()");
    ps->host_embed_backwards[i]++;
    return BK_OK;
}

/* Term i on a device backend: embed_backward_cuda into a zeroed device gradient, downloaded and added
 * into the host dtheta; or dencoded downloaded (once for every host-path term) for the host variant. */
static int device_embed_backward(bk_positions *ps, int i, const float *dencoded, float *dtheta, int *downloaded,
                                 bk_error *err)
{
    bk_backend *be = ps->be;
    const bk_term *t = &ps->set->terms[i];
    const int64_t count = (int64_t)ps->B * ps->T;
    int rc;
    float *grad = ps->embed_dtheta_dev ? ps->embed_dtheta_dev[i] : NULL;
    if (!grad) {
        log_host_path(ps, i, 2);
        size_t n = (size_t)count * (size_t)ps->set->geometry.d_model;
        if (!*downloaded && (rc = be->download(be, ps->embed_host, dencoded, n * sizeof(float), err)))
            return bk_error_prefix(err, "term '%s': copying the input gradient to the host: ", t->label);
        *downloaded = 1;
        return host_embed_backward(ps, i, ps->embed_host, dtheta, err);
    }
    size_t bytes = (size_t)t->n_params * sizeof(float);
    if ((rc = be->zero(be, grad, bytes, err)))
        return rc;
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(t, "embed_backward_cuda()", -1, ps->step);
    int prc = bk_descriptor_embed_backward_cuda(t->plugin->desc)(t->instance, ps->embed_theta_dev[i],
                                                                 embed_positions(ps, t, 1), count, dencoded, grad,
                                                                 be->stream(be), &pe);
    bk_plugin_call_leave();
    if (prc != BIASKIT_OK)
        return plugin_fail(err, t, &pe, "embed_backward_cuda()");
    if ((rc = be->download(be, ps->grad_host, grad, bytes, err)))
        return bk_error_prefix(err, "term '%s': copying its embedding gradient to the host: ", t->label);
    for (int64_t k = 0; k < t->n_params; k++)
        dtheta[k] += ps->grad_host[k];
    ps->cuda_embed_backwards[i]++;
    return BK_OK;
}

int bk_embed_backward(bk_positions *ps, const float *dencoded, float *const *dtheta, bk_error *err)
{
    if (!ps->set)
        return BK_OK;
    int downloaded = 0;
    for (int i = 0; i < ps->set->n; i++) {
        const bk_term *t = &ps->set->terms[i];
        if (!(t->caps & BIASKIT_CAP_EMBED) || !t->n_params)
            continue;
        int rc = on_device(ps) ? device_embed_backward(ps, i, dencoded, dtheta[i], &downloaded, err)
                               : host_embed_backward(ps, i, dencoded, dtheta[i], err);
        if (rc)
            return rc;
    }
    return BK_OK;
}
