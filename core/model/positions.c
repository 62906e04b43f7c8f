#include "model/positions.h"

#include "model/rotary_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int plugin_fail(bk_error *err, const bk_term *t, const biaskit_error *pe, const char *what)
{
    return bk_fail(err, pe->code ? pe->code : BK_ERR_PLUGIN, "term '%s' (plugin %s): %s failed: %s", t->label,
                   t->plugin->desc->name, what, pe->message[0] ? pe->message : "no message given");
}

int bk_positions_init(bk_positions *ps, const bk_term_set *set, bk_error *err)
{
    memset(ps, 0, sizeof *ps);
    ps->set = set;
    if (!set || set->rotary < 0)
        return BK_OK;
    const bk_term *t = &set->terms[set->rotary];
    ps->pairs = set->geometry.d_head / 2;
    if (!(ps->inv_freq = malloc((size_t)ps->pairs * sizeof(float))))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for rotary frequencies");
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(t, "rotary_frequencies()", -1, 0);
    int prc = t->plugin->desc->rotary_frequencies(t->instance, ps->inv_freq, &pe);
    bk_plugin_call_leave();
    if (prc != BIASKIT_OK)
        return plugin_fail(err, t, &pe, "rotary_frequencies()");
    for (int32_t k = 0; k < ps->pairs; k++)
        if (!isfinite(ps->inv_freq[k]))
            return bk_fail(err, BK_ERR_PLUGIN, "term '%s' (plugin %s): rotary frequency %d is %g, expected a finite number",
                           t->label, t->plugin->desc->name, (int)k, (double)ps->inv_freq[k]);
    return BK_OK;
}

void bk_positions_free(bk_positions *ps)
{
    if (!ps)
        return;
    free(ps->token_index);
    free(ps->segment_index);
    free(ps->segment_position);
    free(ps->inv_freq);
    free(ps->rot_cos);
    free(ps->rot_sin);
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

static int prepare_rotary(bk_positions *ps, int T, bk_error *err)
{
    if (!ps->pairs || T <= ps->rot_rows)
        return BK_OK;
    size_t n = (size_t)T * (size_t)ps->pairs;
    float *c = malloc(n * sizeof *c), *s = malloc(n * sizeof *s);
    if (!c || !s) {
        free(c), free(s);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for rotary angles of %d positions", T);
    }
    /* the angle in double: p * inv_freq reaches 1e4 rad at long lengths, where float loses the phase */
    for (int p = 0; p < T; p++)
        for (int32_t k = 0; k < ps->pairs; k++) {
            double angle = (double)p * (double)ps->inv_freq[k];
            c[(size_t)p * ps->pairs + k] = (float)cos(angle);
            s[(size_t)p * ps->pairs + k] = (float)sin(angle);
        }
    free(ps->rot_cos), free(ps->rot_sin);
    ps->rot_cos = c, ps->rot_sin = s;
    ps->rot_rows = T;
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
        }
    }
    return prepare_rotary(ps, T, err);
}

const int32_t *bk_positions_stream(const bk_positions *ps, bk_stream s)
{
    return s == BK_STREAM_SEGMENT ? ps->segment_index : NULL;
}

/* An embedding term reads the token index, or the position inside the segment. */
static const int32_t *embed_positions(const bk_positions *ps, const bk_term *t)
{
    return t->stream == BK_STREAM_SEGMENT ? ps->segment_position : ps->token_index;
}

int bk_embed_forward(const bk_positions *ps, float *encoded, bk_error *err)
{
    if (!ps->set)
        return BK_OK;
    for (int i = 0; i < ps->set->n; i++) {
        const bk_term *t = &ps->set->terms[i];
        if (!(t->caps & BIASKIT_CAP_EMBED))
            continue;
        biaskit_error pe = {0, ""};
        bk_plugin_call_enter(t, "embed()", -1, ps->step);
        int prc = t->plugin->desc->embed(t->instance, bk_term_theta(t, 0), embed_positions(ps, t),
                                         (int64_t)ps->B * ps->T, encoded, &pe);
        bk_plugin_call_leave();
        if (prc != BIASKIT_OK)
            return plugin_fail(err, t, &pe, "embed()");
    }
    return BK_OK;
}

int bk_embed_backward(const bk_positions *ps, const float *dencoded, float *const *dtheta, bk_error *err)
{
    if (!ps->set)
        return BK_OK;
    for (int i = 0; i < ps->set->n; i++) {
        const bk_term *t = &ps->set->terms[i];
        if (!(t->caps & BIASKIT_CAP_EMBED) || !t->n_params)
            continue;
        const biaskit_plugin *d = t->plugin->desc;
        if (!d->embed_backward)
            return bk_fail(err, BK_ERR_PLUGIN, "term '%s' (plugin %s) has %lld parameters but no embed_backward()",
                           t->label, d->name, (long long)t->n_params);
        biaskit_error pe = {0, ""};
        bk_plugin_call_enter(t, "embed_backward()", -1, ps->step);
        int prc = d->embed_backward(t->instance, bk_term_theta(t, 0), embed_positions(ps, t), (int64_t)ps->B * ps->T,
                                    dencoded, dtheta[i], &pe);
        bk_plugin_call_leave();
        if (prc != BIASKIT_OK)
            return plugin_fail(err, t, &pe, "embed_backward()");
    }
    return BK_OK;
}

/* sign = +1 rotates by +theta (forward), -1 by -theta (the transpose: backward). */
static void rotate(const bk_positions *ps, float *qkv, int C, int H, float sign)
{
    if (!ps->pairs)
        return;
    const bk_term *t = &ps->set->terms[ps->set->rotary];
    const int32_t *pos = t->stream == BK_STREAM_SEGMENT ? ps->segment_index : ps->token_index;
    const int hd = C / H, half = ps->pairs;
    const int64_t n = (int64_t)ps->B * ps->T;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float *c = ps->rot_cos + (size_t)pos[i] * half, *s = ps->rot_sin + (size_t)pos[i] * half;
        for (int part = 0; part < 2; part++) /* q, then k */
            for (int h = 0; h < H; h++) {
                float *x = qkv + (size_t)i * 3 * C + (size_t)part * C + (size_t)h * hd;
                for (int k = 0; k < half; k++)
                    bk_rotate_pair(&x[k], &x[k + half], c[k], sign * s[k]);
            }
    }
}

void bk_rotary_forward(const bk_positions *ps, float *qkv, int C, int H)
{
    rotate(ps, qkv, C, H, 1.0f);
}

void bk_rotary_backward(const bk_positions *ps, float *dqkv, int C, int H)
{
    rotate(ps, dqkv, C, H, -1.0f);
}
