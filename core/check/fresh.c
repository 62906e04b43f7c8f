/* biaskit check, fresh memory: a plugin that reads memory it never wrote (a scratch buffer of its own
 * used before it is filled, a field create() left unset) gives results that depend on what that memory
 * happened to hold, which may well be finite and pass every other check. Two children run the plugin's
 * functions on the same inputs, each with the heap's fresh memory filled with another byte (glibc's
 * M_PERTURB: malloc'd memory holds ~byte, freed memory byte); their results must agree bit for bit. */
#define _GNU_SOURCE /* mallopt's M_PERTURB */
#include "check/internal.h"

#include "plugin/descriptor.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The two fillings, and the size up to which allocations stay in the heap (mmap'ed ones are the
 * kernel's zeros, which no filling reaches). */
static const int fillings[2] = {0x5a, 0xa5};
#define FRESH_MMAP_THRESHOLD (32 << 20)

static uint64_t fnv1a(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* One function's output as an R line: its label and the hash of its bits (or why it failed). */
static void fingerprint(checker *c, const char *label, const float *v, size_t n, const char *failed)
{
    char text[BIASKIT_ERROR_MESSAGE_MAX + 64];
    if (failed)
        snprintf(text, sizeof text, "failed: %s", failed);
    else
        snprintf(text, sizeof text, "%016llx", (unsigned long long)fnv1a(v, n * sizeof *v, 0xcbf29ce484222325ull));
    ck_child_line(c, 'R', label, text);
}

static void forward_print(checker *c, const instance *in, const model_fn *m, const char *label)
{
    size_t n = ck_fn_outputs(in, m);
    float *out = ck_guarded_alloc(n);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    if (!out)
        return;
    int bad = ck_forward(in, m, in->theta, NULL, out, why, sizeof why);
    fingerprint(c, label, out, n, bad ? why : NULL);
    free(out);
}

static void backward_print(checker *c, const instance *in, const model_fn *m, const char *label)
{
    size_t n = ck_n_params(in), n_out = ck_fn_outputs(in, m);
    float *w = malloc((n_out ? n_out : 1) * sizeof *w), *g = ck_guarded_alloc(n);
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128];
    if (w && g) {
        rng r = ck_rng_for(0, R_WEIGHTS, 11);
        ck_random_fill(w, n_out, &r);
        memset(g, 0, n * sizeof *g);
        int bad = ck_backward(in, m, in->theta, w, g, why, sizeof why);
        fingerprint(c, label, g, n, bad ? why : NULL);
    }
    free(w), free(g);
}

/* glibc hands out small blocks from per-thread caches that M_PERTURB does not fill: the caches are filled
 * here with blocks that hold the pattern (all but their first 16 bytes, the cache's links, which are the
 * same in both children). */
#define FRESH_CACHED_MAX 1024
#define FRESH_CACHED_COUNT 8

static void prime_caches(int pattern)
{
    static void *blocks[FRESH_CACHED_MAX / 16][FRESH_CACHED_COUNT];
    for (size_t s = 16; s <= FRESH_CACHED_MAX; s += 16)
        for (int k = 0; k < FRESH_CACHED_COUNT; k++)
            if ((blocks[s / 16 - 1][k] = malloc(s)))
                memset(blocks[s / 16 - 1][k], pattern ^ 0xff, s);
    for (size_t s = 16; s <= FRESH_CACHED_MAX; s += 16)
        for (int k = 0; k < FRESH_CACHED_COUNT; k++)
            free(blocks[s / 16 - 1][k]);
}

/* In a child: the filling, then every function of the default instance, fingerprinted. */
static void fresh_child(checker *c, const void *arg)
{
    mallopt(M_MMAP_THRESHOLD, FRESH_MMAP_THRESHOLD);
    mallopt(M_PERTURB, *(const int *)arg);
    prime_caches(*(const int *)arg);
    instance in;
    if (ck_open_default(c, "fresh-memory", bk_derive_seed(c->opt->seed, 600, 0), 1, &in))
        return;
    const biaskit_plugin *d = c->d;
    const uint32_t caps = d->capabilities;
    const int32_t L = c->geo.train_length;
    int32_t *pos = ck_embed_positions(L, 64, 0, c->opt->seed);
    model_fn table = {.kind = FN_TABLE, .distances = 1000}, embed = {.kind = FN_EMBED, .positions = pos, .count = 64};
    model_fn coord = {.kind = FN_COORD, .distances = L, .rows = L, .length = L, .training = 1};
    model_fn scale = {.kind = FN_SCALE, .rows = L, .length = L, .training = 1};
    const int learned = in.n_params > 0;
    if (caps & BIASKIT_CAP_TABLE) {
        forward_print(c, &in, &table, "table()");
        if (learned && d->table_backward)
            backward_print(c, &in, &table, "table_backward()");
    }
    if (caps & BIASKIT_CAP_COORDINATE) {
        forward_print(c, &in, &coord, "coordinate()");
        if (learned && BK_DESCRIPTOR_FN(d, coordinate_backward))
            backward_print(c, &in, &coord, "coordinate_backward()");
    }
    if (caps & BIASKIT_CAP_SCALE) {
        forward_print(c, &in, &scale, "scale()");
        if (learned && BK_DESCRIPTOR_FN(d, scale_backward))
            backward_print(c, &in, &scale, "scale_backward()");
    }
    if ((caps & BIASKIT_CAP_EMBED) && pos) {
        forward_print(c, &in, &embed, "embed()");
        if (learned && d->embed_backward)
            backward_print(c, &in, &embed, "embed_backward()");
    }
    if (caps & BIASKIT_CAP_CONTENT) {
        const int64_t T = 7;
        const size_t C = (size_t)c->geo.d_model;
        float *x = malloc((size_t)T * (C ? C : 1) * sizeof *x);
        if (x) {
            rng r = ck_rng_for(c->opt->seed, R_START, 600);
            for (size_t e = 0; e < (size_t)T * C; e++)
                x[e] = (float)ck_rng_sym(&r);
            model_fn content = {.kind = FN_CONTENT, .count = T, .x = x, .length = (int32_t)T, .training = 1};
            forward_print(c, &in, &content, "content()");
        }
        free(x);
    }
    if (caps & BIASKIT_CAP_COUNT) {
        biaskit_count layout;
        char why[BIASKIT_ERROR_MESSAGE_MAX + 300];
        if (!ck_count_layout(&in, &layout, why, sizeof why)) {
            model_fn count = {.kind = FN_COUNT, .distances = layout.points, .length = L, .training = 1};
            forward_print(c, &in, &count, "count_vectors()");
        }
    }
    if ((caps & BIASKIT_CAP_ROTARY) && d->rotary_frequencies) {
        const size_t half = (size_t)(in.geo.d_head / 2);
        float *f = ck_guarded_alloc(half);
        biaskit_error pe = {0};
        if (f) {
            ck_stage(c, "rotary_frequencies()");
            const int rc = d->rotary_frequencies(in.inst, f, &pe);
            fingerprint(c, "rotary_frequencies()", f, half, rc == BIASKIT_OK ? NULL : pe.message);
        }
        free(f);
    }
    free(pos);
    ck_instance_close(&in);
}

typedef struct prints {
    char label[16][48];
    char text[16][BIASKIT_ERROR_MESSAGE_MAX + 64];
    int n;
    int forward; /* the child's items are reported (the first child's only: the second's are the same) */
} prints;

static void collect(checker *c, char tag, const char *id, const char *text, void *ctx)
{
    prints *p = ctx;
    if (tag != 'R') {
        if (p->forward)
            ck_item(c, ck_tag_status(tag), id, "%s", text);
        return;
    }
    if (p->n >= 16)
        return;
    snprintf(p->label[p->n], sizeof p->label[0], "%s", id);
    snprintf(p->text[p->n], sizeof p->text[0], "%s", text);
    p->n++;
}

/* Forwards a child's items (its FAIL when the default instance could not open) and says whether it
 * finished; *out gets its fingerprints. */
static int run_filled(checker *c, int k, prints *out, bk_error *err, int *finished)
{
    child_result r;
    memset(out, 0, sizeof *out);
    out->forward = k == 0;
    int rc = ck_run_child(c, fresh_child, &fillings[k], &r, err);
    if (rc)
        return rc;
    ck_for_each_line(c, &r, collect, out);
    *finished = r.finished;
    if (!r.finished) {
        char why[600];
        ck_describe_abort(c, &r, why, sizeof why);
        ck_item(c, BK_CHECK_FAIL, "fresh-memory", "fresh-memory checks (heap filled with 0x%02x): %s", fillings[k], why);
    }
    free(r.output.s);
    return BK_OK;
}

/* AddressSanitizer's allocator replaces glibc's: M_PERTURB does not reach it (it fills memory its own way) */
#if defined(__SANITIZE_ADDRESS__)
#define FRESH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FRESH_ASAN 1
#endif
#endif

int ck_check_fresh_memory(checker *c, bk_error *err)
{
#ifdef FRESH_ASAN
    (void)err;
    ck_item(c, BK_CHECK_SKIP, "fresh-memory", "fresh-memory checks: this biaskit is built with AddressSanitizer, whose "
            "allocator the heap fillings do not reach (run check with a build without it)");
    return BK_OK;
#endif
    prints *p = calloc(2, sizeof *p);
    if (!p)
        return bk_fail(err, BK_ERR_NOMEM, "biaskit check: out of memory");
    int finished[2] = {0, 0}, rc = BK_OK;
    for (int k = 0; k < 2 && !rc; k++)
        rc = run_filled(c, k, &p[k], err, &finished[k]);
    if (!rc && finished[0] && finished[1]) {
        strbuf done = {0};
        int bad = -1;
        for (int i = 0; i < p[0].n && bad < 0; i++) {
            if (i >= p[1].n || strcmp(p[0].label[i], p[1].label[i]) || strcmp(p[0].text[i], p[1].text[i]))
                bad = i;
            else if (strncmp(p[0].text[i], "failed", 6) != 0)
                ck_sb_printf(&done, ", %s", p[0].label[i]);
        }
        if (bad >= 0)
            ck_item(c, BK_CHECK_FAIL, "fresh-memory",
                    "%s reads memory it never wrote: with the heap's fresh memory filled with 0x%02x it gives %s, "
                    "with 0x%02x %s (the same inputs); find the read with valgrind (valgrind --track-origins=yes "
                    "biaskit bias EXPERIMENT.toml)",
                    p[0].label[bad], fillings[0], p[0].text[bad], fillings[1],
                    bad < p[1].n ? p[1].text[bad] : "nothing");
        else if (done.len)
            ck_item(c, BK_CHECK_PASS, "fresh-memory",
                    "reads only memory it wrote: the same bits with the heap's fresh memory filled with 0x%02x or "
                    "0x%02x (%s)", fillings[0], fillings[1], done.s + 2);
        else
            ck_item(c, BK_CHECK_SKIP, "fresh-memory", "fresh-memory checks: no function gave a result to compare");
        free(done.s);
    }
    free(p);
    return rc;
}
