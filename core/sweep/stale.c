/* Stale runs of a sweep: see stale.h. */
#define _GNU_SOURCE
#include "sweep/stale.h"

#include "train/rundir.h"
#include "util/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One `key = value` of an experiment text, the key with its section ("train.steps", "term.0.plugin"). */
typedef struct entry {
    char key[160];
    const char *value; /* into the text */
    size_t value_len;
} entry;

typedef struct entries {
    entry *e;
    int n, cap;
} entries;

static size_t trimmed(const char *s, size_t n, const char **start)
{
    while (n && (*s == ' ' || *s == '\t' || *s == '\r'))
        s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        n--;
    *start = s;
    return n;
}

/* The entries of `text` in order. Array tables ([[name]]) are numbered per name from 0. Returns -1
 * when out of memory. */
static int parse_entries(const char *text, entries *out)
{
    char section[128] = "";
    struct {
        char name[96];
        int count;
    } arrays[32];
    int n_arrays = 0;
    out->e = NULL, out->n = 0, out->cap = 0;
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        const char *s;
        size_t n = trimmed(line, len, &s);
        line = nl ? nl + 1 : NULL;
        if (n == 0 || s[0] == '#')
            continue;
        if (n >= 4 && s[0] == '[' && s[1] == '[' && s[n - 1] == ']' && s[n - 2] == ']') {
            const char *name;
            size_t nn = trimmed(s + 2, n - 4, &name);
            int k = 0;
            while (k < n_arrays && !(strlen(arrays[k].name) == nn && strncmp(arrays[k].name, name, nn) == 0))
                k++;
            if (k == n_arrays && n_arrays < 32) {
                snprintf(arrays[k].name, sizeof arrays[k].name, "%.*s", (int)nn, name);
                arrays[k].count = 0;
                n_arrays++;
            }
            int index = k < 32 ? arrays[k].count++ : 0;
            snprintf(section, sizeof section, "%.*s.%d", (int)nn, name, index);
            continue;
        }
        if (s[0] == '[' && s[n - 1] == ']') {
            const char *name;
            size_t nn = trimmed(s + 1, n - 2, &name);
            snprintf(section, sizeof section, "%.*s", (int)nn, name);
            continue;
        }
        const char *eq = memchr(s, '=', n);
        if (!eq)
            continue;
        if (out->n == out->cap) {
            int cap = out->cap ? 2 * out->cap : 32;
            entry *e = realloc(out->e, (size_t)cap * sizeof *e);
            if (!e)
                return -1;
            out->e = e, out->cap = cap;
        }
        entry *e = &out->e[out->n++];
        const char *key;
        size_t kn = trimmed(s, (size_t)(eq - s), &key);
        if (section[0])
            snprintf(e->key, sizeof e->key, "%s.%.*s", section, (int)kn, key);
        else
            snprintf(e->key, sizeof e->key, "%.*s", (int)kn, key);
        e->value_len = trimmed(eq + 1, n - (size_t)(eq + 1 - s), &e->value);
    }
    return 0;
}

static const entry *find(const entries *list, const char *key)
{
    for (int i = 0; i < list->n; i++)
        if (strcmp(list->e[i].key, key) == 0)
            return &list->e[i];
    return NULL;
}

static int same_value(const entry *a, const entry *b)
{
    return a->value_len == b->value_len && memcmp(a->value, b->value, a->value_len) == 0;
}

/* "<value>" cut to 120 characters, or "none (the default)" */
static void describe(const entry *e, char *out, size_t size)
{
    if (!e)
        snprintf(out, size, "none (the default)");
    else if (e->value_len > 120)
        snprintf(out, size, "%.117s...", e->value);
    else
        snprintf(out, size, "%.*s", (int)e->value_len, e->value);
}

void bk_sweep_first_difference(const char *run_text, const char *sweep_text, char *why, size_t size)
{
    entries old, now;
    if (parse_entries(run_text, &old) || parse_entries(sweep_text, &now)) {
        snprintf(why, size, "the text differs");
        free(old.e), free(now.e);
        return;
    }
    const entry *a = NULL, *b = NULL;
    const char *key = NULL;
    for (int i = 0; i < now.n && !key; i++) {
        const entry *o = find(&old, now.e[i].key);
        if (!o || !same_value(o, &now.e[i]))
            key = now.e[i].key, a = o, b = &now.e[i];
    }
    for (int i = 0; i < old.n && !key; i++)
        if (!find(&now, old.e[i].key))
            key = old.e[i].key, a = &old.e[i], b = NULL;
    if (key) {
        char va[128], vb[128];
        describe(a, va, sizeof va);
        describe(b, vb, sizeof vb);
        snprintf(why, size, "%s: run has %s, sweep asks %s", key, va, vb);
    } else {
        snprintf(why, size, "the text differs (the same keys and values)");
    }
    free(old.e), free(now.e);
}

int bk_sweep_run_stale(const bk_sweep_run *run, const bk_run_status *st, char *why, size_t size)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" BK_SWEEP_EXPERIMENT_FILE, run->dir);
    struct stat sb;
    if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return 0;
    if (!(st->state == BK_RUN_DONE || bk_sweep_has_checkpoint(run)))
        return 0; /* nothing trained from the old text: preparing the run rewrites it */
    char *old = NULL;
    size_t len;
    bk_error ignored;
    if (bk_file_read_all(path, "run experiment file", 64u << 20, &old, &len, &ignored))
        return 0;
    int stale = strcmp(old, run->text) != 0;
    if (stale)
        bk_sweep_first_difference(old, run->text, why, size);
    free(old);
    return stale;
}

int bk_sweep_clear_run(const bk_sweep_run *run, bk_error *err)
{
    static const char *const results[] = {BK_RUN_CHECKPOINT_FILE, BK_RUN_METRICS_FILE, BK_SWEEP_EVAL_FILE,
                                          BK_SWEEP_EVAL_SLIDING_FILE, BK_SWEEP_STATUS_FILE, BK_SWEEP_TRAIN_LOG,
                                          BK_SWEEP_EVAL_LOG, BK_RUN_LOCK_FILE};
    char path[4200];
    for (size_t i = 0; i < sizeof results / sizeof results[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", run->dir, results[i]);
        if (unlink(path) != 0 && errno != ENOENT)
            return bk_fail(err, BK_ERR_IO, "run '%s' (stale): cannot remove '%s' to train it again: %s", run->name,
                           path, strerror(errno));
    }
    bk_file_sync_dir(run->dir);
    int rc = bk_sweep_prepare_run(run, 0, err);
    if (rc)
        return rc;
    bk_run_status st;
    memset(&st, 0, sizeof st);
    st.state = BK_RUN_PENDING;
    return bk_sweep_write_status(run, &st, err);
}
