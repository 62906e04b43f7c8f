/* biaskit check: the probes, create() with bad option values and bad geometries, each in its own
 * child process: every probe must succeed (then its outputs must be finite) or fail with a
 * message, never crash, hang or exit. */
#define _GNU_SOURCE /* strdup */
#include "check/internal.h"

#include "config/experiment.h"
#include "plugin/contract.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPORTED 4           /* failing entries named in one line */

typedef struct probe {
    char *literal; /* TOML value */
    char *label;   /* how the report names it */
} probe;

typedef struct probe_list {
    probe *p;
    int n, cap;
} probe_list;

static void add_probe(probe_list *l, const char *literal, const char *label)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        probe *grown = realloc(l->p, (size_t)cap * sizeof *grown);
        if (!grown)
            return;
        l->p = grown;
        l->cap = cap;
    }
    char *lit = strdup(literal), *lab = strdup(label ? label : literal);
    if (!lit || !lab) {
        free(lit), free(lab);
        return;
    }
    l->p[l->n++] = (probe){lit, lab};
}

static void free_probes(probe_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->p[i].literal), free(l->p[i].label);
    free(l->p);
    memset(l, 0, sizeof *l);
}

/* "[v, v, ..., v]" with `count` copies of v. */
static void add_array_probe(probe_list *l, const char *v, int count, const char *label)
{
    strbuf b = {0};
    ck_sb_printf(&b, "[");
    for (int i = 0; i < count; i++)
        ck_sb_printf(&b, "%s%s", i ? ", " : "", v);
    ck_sb_printf(&b, "]");
    add_probe(l, ck_sb_text(&b), label);
    free(b.s);
}

/* The values tried for one option: wrong or out of any sensible range, plus each declared choice. */
static void option_probes(const biaskit_option *o, int32_t heads, probe_list *l)
{
    static const char *const numbers[] = {"-1", "0", "-1e30", "1e30", "nan", "inf", "-inf"};
    static const char *const ints[] = {"-1", "0", "1", "2147483648", "-9223372036854775808", "9223372036854775807"};
    char label[64];
    switch (o->type) {
    case BIASKIT_OPT_BOOL:
        add_probe(l, "true", NULL);
        add_probe(l, "false", NULL);
        break;
    case BIASKIT_OPT_INT:
        for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
            add_probe(l, ints[i], NULL);
        break;
    case BIASKIT_OPT_DOUBLE:
        for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++)
            add_probe(l, numbers[i], NULL);
        break;
    case BIASKIT_OPT_STRING:
        add_probe(l, "\"\"", NULL);
        add_probe(l, "\"no-such-value\"", NULL);
        for (const char *a = o->choices ? o->choices : ""; *a;) {
            size_t len = strcspn(a, "|");
            char lit[128];
            snprintf(lit, sizeof lit, "\"%.*s\"", (int)(len < 100 ? len : 100), a);
            add_probe(l, lit, NULL);
            a += len + (a[len] ? 1 : 0);
        }
        break;
    case BIASKIT_OPT_DOUBLE_ARRAY:
        add_probe(l, "[]", NULL);
        add_probe(l, "[0.5]", NULL);
        snprintf(label, sizeof label, "[0.5 x %d]", heads + 1);
        add_array_probe(l, "0.5", heads + 1, label);
        for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
            snprintf(label, sizeof label, "[%s x %d]", numbers[i], heads);
            add_array_probe(l, numbers[i], heads, label);
        }
        break;
    case BIASKIT_OPT_STRING_ARRAY:
        add_probe(l, "[]", NULL);
        add_probe(l, "[\"\"]", NULL);
        add_probe(l, "[\"no-such-value\"]", NULL);
        snprintf(label, sizeof label, "[\"x\" x %d]", heads + 1);
        add_array_probe(l, "\"x\"", heads + 1, label);
        break;
    }
}

typedef struct probe_arg {
    const char *override;  /* "term.0.KEY=VALUE", or NULL: the default configuration */
    biaskit_geometry geo;
} probe_arg;

/* Outputs of an instance made from a probe: finite table over train_length distances, finite
 * embedding of positions 0..train_length-1; the grid table and coordinate() at train_length, finite and
 * in [0, 1]; scale() finite; a valid mask(); rotary_ctx() finite with an amplitude > 0; finite positive
 * rotary frequencies; a segment() call. */
static int probe_outputs(const instance *in, char *why, size_t size)
{
    const checker *c = in->c;
    uint32_t caps = c->d->capabilities;
    int32_t L = in->geo.train_length > 0 ? in->geo.train_length : 1;
    if (ck_init_params(in, NULL, c->opt->seed, why, size))
        return 1;
    int32_t *pos = ck_embed_positions(L, L, 1, 0);
    model_fn table = {.kind = FN_TABLE, .distances = L}, embed = {.kind = FN_EMBED, .positions = pos, .count = L};
    model_fn *fns[2] = {(caps & BIASKIT_CAP_TABLE) ? &table : NULL, (caps & BIASKIT_CAP_EMBED) && pos ? &embed : NULL};
    int bad = 0;
    for (int k = 0; k < 2 && !bad; k++) {
        if (!fns[k])
            continue;
        float *out = ck_guarded_alloc(ck_fn_outputs(in, fns[k]));
        bad = !out || ck_forward_finite(in, fns[k], in->theta, out, why, size);
        free(out);
    }
    free(pos);
    if (!bad && (caps & BIASKIT_CAP_COORDINATE)) {
        int32_t P = 0;
        model_fn fn[2] = {{.kind = FN_GRID}, {.kind = FN_COORD, .distances = L, .rows = L, .length = L, .training = 1}};
        bad = ck_grid_points(in, &P, why, size);
        fn[0].distances = P;
        for (int k = 0; k < 2 && !bad; k++) {
            float *out = ck_guarded_alloc(ck_fn_outputs(in, &fn[k]));
            bad = !out || ck_forward_finite(in, &fn[k], in->theta, out, why, size) ||
                  (k == 1 && ck_coordinate_contract(&fn[k], out, NULL, NULL, why, size));
            free(out);
        }
    }
    if (!bad && (caps & BIASKIT_CAP_SCALE)) {
        model_fn m = {.kind = FN_SCALE, .rows = L, .length = L, .training = 1};
        float *out = ck_guarded_alloc(ck_fn_outputs(in, &m));
        bad = !out || ck_forward_finite(in, &m, in->theta, out, why, size);
        free(out);
    }
    if (!bad && (caps & BIASKIT_CAP_MASK)) {
        biaskit_mask m;
        bad = ck_mask(in, L, 1, 1, &m, why, size) != CALL_OK;
    }
    if (!bad && (caps & BIASKIT_CAP_ROTARY) && ck_has_rotary_ctx(c) && in->geo.d_head >= 0) {
        float *f = ck_guarded_alloc((size_t)(in->geo.d_head / 2)), amplitude;
        bad = !f || ck_rotary_ctx(in, L, 1, 1, f, &amplitude, why, size) != CALL_OK;
        free(f);
    }
    if (!bad && (caps & BIASKIT_CAP_ROTARY) && c->d->rotary_frequencies && in->geo.d_head >= 0) {
        int32_t half = in->geo.d_head / 2;
        float *f = ck_guarded_alloc((size_t)half);
        biaskit_error pe = {0};
        ck_stage(c, "rotary_frequencies()");
        bad = !f || c->d->rotary_frequencies(in->inst, f, &pe) != BIASKIT_OK;
        if (bad)
            snprintf(why, size, "rotary_frequencies() failed: %s", pe.message[0] ? pe.message : "(no message)");
        char what[320]; /* what the engine relies on (rotary_frequencies has no amplitude: 1) */
        if (!bad && bk_contract_rotary(f, half, 1.0f, what, sizeof what)) {
            snprintf(why, size, "rotary_frequencies() gave %s", what);
            bad = 1;
        }
        free(f);
    }
    if (!bad && (caps & BIASKIT_CAP_SEGMENT)) {
        int32_t tokens[16], idx[16], spos[16];
        for (int k = 0; k < 16; k++)
            tokens[k] = (int32_t)((unsigned char)"ab. cd\nef = 12.x"[k] % (uint32_t)(in->geo.vocab_size > 0 ? in->geo.vocab_size : 256));
        biaskit_error pe = {0};
        ck_stage(c, "segment()");
        int rc = c->d->segment(in->inst, tokens, 16, idx, spos, &pe);
        bad = rc != BIASKIT_OK && ck_refusal("segment()", rc, &pe, why, size) == CALL_BROKEN;
    }
    return bad;
}

/* In a child: one probe, reported as one R line "accepted", "refused", "host" or "bad". */
static void probe_child(checker *c, const void *varg)
{
    const probe_arg *a = varg;
    bk_experiment exp;
    biaskit_config view;
    const biaskit_config *v = &c->view;
    bk_error e;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
    if (a->override) {
        c->overrides[c->n_overrides] = (char *)a->override;
        ck_stage(c, "reading the value");
        if (bk_experiment_parse(c->exp_text, "(biaskit check)", (const char *const *)c->overrides, c->n_overrides + 1,
                                &exp, &e) ||
            bk_config_view_init(&view, c->d, exp.terms[0].table, exp.terms[0].pos, c->view.label, &e)) {
            ck_child_line(c, 'R', "host", e.message);
            return;
        }
        v = &view;
    }
    instance in;
    int rc = ck_instance_create(c, v, &a->geo, &in, why, sizeof why);
    if (rc != CALL_OK) {
        ck_child_line(c, 'R', rc == CALL_REFUSED ? "refused" : "bad", why);
        return;
    }
    int bad = probe_outputs(&in, why, sizeof why);
    ck_child_line(c, 'R', bad ? "bad" : "accepted", bad ? why : "");
    ck_instance_close(&in);
}

typedef struct probe_outcome {
    char kind[16];
    char text[BIASKIT_ERROR_MESSAGE_MAX + 300];
} probe_outcome;

static void take_outcome(checker *c, char tag, const char *id, const char *text, void *ctx)
{
    (void)c;
    probe_outcome *o = ctx;
    if (tag != 'R')
        return;
    snprintf(o->kind, sizeof o->kind, "%s", id);
    snprintf(o->text, sizeof o->text, "%s", text);
}

/* Runs one probe; a crash, hang or exit becomes kind "bad" with the reason. */
static int run_probe(checker *c, const probe_arg *a, probe_outcome *o, bk_error *err)
{
    child_result r;
    memset(o, 0, sizeof *o);
    int rc = ck_run_child(c, probe_child, a, &r, err);
    if (rc)
        return rc;
    ck_for_each_line(c, &r, take_outcome, o);
    if (!r.finished) {
        snprintf(o->kind, sizeof o->kind, "bad");
        ck_describe_abort(c, &r, o->text, sizeof o->text);
    } else if (!o->kind[0]) {
        snprintf(o->kind, sizeof o->kind, "bad");
        snprintf(o->text, sizeof o->text, "the probe reported nothing");
    }
    free(r.output.s);
    return BK_OK;
}

/* Sorts probe labels by outcome for the summary line. */
typedef struct probe_summary {
    strbuf accepted, refused, host, bad;
    int n_bad, n;
} probe_summary;

static void summarise(probe_summary *s, const char *label, const probe_outcome *o)
{
    s->n++;
    if (strcmp(o->kind, "bad") == 0) {
        if (s->n_bad++ < MAX_REPORTED)
            ck_sb_printf(&s->bad, "%s%s: %s", s->bad.len ? "; " : "", label, o->text);
        return;
    }
    strbuf *b = strcmp(o->kind, "accepted") == 0 ? &s->accepted : strcmp(o->kind, "refused") == 0 ? &s->refused : &s->host;
    ck_sb_printf(b, "%s%s", b->len ? ", " : "", label);
}

static void report_summary(checker *c, const char *id, const char *what, probe_summary *s)
{
    strbuf fine = {0};
    if (s->accepted.len)
        ck_sb_printf(&fine, "; accepted (finite outputs): %s", s->accepted.s);
    if (s->refused.len)
        ck_sb_printf(&fine, "; refused by create() with a message: %s", s->refused.s);
    if (s->host.len)
        ck_sb_printf(&fine, "; rejected by the host before create(): %s", s->host.s);
    if (s->n_bad)
        ck_item(c, BK_CHECK_FAIL, id, "%s: %d of %d probes fail: %s%s%s", what, s->n_bad, s->n, s->bad.s,
                s->n_bad > MAX_REPORTED ? "; ..." : "", ck_sb_text(&fine));
    else
        ck_item(c, BK_CHECK_PASS, id, "%s: %d probes handled%s", what, s->n, ck_sb_text(&fine));
    free(fine.s), free(s->accepted.s), free(s->refused.s), free(s->host.s), free(s->bad.s);
}

int ck_probe_option(checker *c, const biaskit_option *o, bk_error *err)
{
    probe_list l = {0};
    option_probes(o, c->geo.n_heads, &l);
    probe_summary s = {0};
    int rc = BK_OK;
    for (int i = 0; i < l.n && !rc; i++) {
        strbuf assign = {0};
        ck_sb_printf(&assign, "term.0.%s=%s", o->name, l.p[i].literal);
        probe_arg a = {ck_sb_text(&assign), c->geo};
        probe_outcome out;
        if (!(rc = run_probe(c, &a, &out, err)))
            summarise(&s, l.p[i].label, &out);
        free(assign.s);
    }
    char id[128], what[160];
    snprintf(id, sizeof id, "option:%s", o->name);
    snprintf(what, sizeof what, "option %s (%s)", o->name, bk_option_type_name(o->type));
    if (!rc)
        report_summary(c, id, what, &s);
    else
        free(s.accepted.s), free(s.refused.s), free(s.host.s), free(s.bad.s);
    free_probes(&l);
    return rc;
}

int ck_probe_geometries(checker *c, bk_error *err)
{
    biaskit_geometry zero = c->geo, one = c->geo, odd = c->geo;
    zero.n_heads = 0, zero.d_head = 0;
    one.n_heads = 1, one.d_model = c->geo.d_head, one.d_head = c->geo.d_head;
    odd.d_head = c->geo.d_head | 1, odd.d_model = c->geo.n_heads * odd.d_head;
    struct {
        const biaskit_geometry *geo;
        char label[48];
    } cases[] = {{&zero, "0 heads"}, {&one, "1 head"}, {&odd, ""}};
    snprintf(cases[2].label, sizeof cases[2].label, "odd d_head %d", odd.d_head);
    probe_summary s = {0};
    for (size_t i = 0; i < 3; i++) {
        probe_arg a = {NULL, *cases[i].geo};
        probe_outcome out;
        int rc = run_probe(c, &a, &out, err);
        if (rc) {
            free(s.accepted.s), free(s.refused.s), free(s.host.s), free(s.bad.s);
            return rc;
        }
        summarise(&s, cases[i].label, &out);
    }
    report_summary(c, "geometry", "create() with other geometries", &s);
    return BK_OK;
}
