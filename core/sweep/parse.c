/* The sweep file, parsed (sweep_internal.h): its tables ([sweep], [eval], [grid], [[variant]],
 * [[corpus]], an inline [base]) read into assignments "key=value" as --set reads them, each with where
 * the sweep file makes it; errors name the sweep file's line and column. */
#define _GNU_SOURCE /* strdup */
#include "sweep/sweep_internal.h"

#include "config/experiment.h"
#include "eval/passkey.h"
#include "util/name.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void assigns_free(assign_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->items[i].text), free(l->items[i].label);
    free(l->items);
    memset(l, 0, sizeof *l);
}

static int assign_add(assign_list *l, char *text, bk_toml_pos pos, const char *label, bk_error *err)
{
    if (!text)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory reading the sweep file");
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        assign *items = realloc(l->items, (size_t)cap * sizeof *items);
        if (!items) {
            free(text);
            return bk_fail(err, BK_ERR_NOMEM, "out of memory reading the sweep file");
        }
        l->items = items, l->cap = cap;
    }
    char *lab = strdup(label);
    if (!lab) {
        free(text);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory reading the sweep file");
    }
    l->items[l->n++] = (assign){text, pos, lab};
    return BK_OK;
}

void sw_priv_free(sweep_priv *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_variants; i++)
        assigns_free(&p->variants[i].sets), assigns_free(&p->variants[i].eval_sets);
    for (int i = 0; i < p->n_corpora; i++)
        assigns_free(&p->corpora[i].sets);
    for (int i = 0; i < p->n_grid; i++)
        free(p->grid[i].key);
    free(p->variants), free(p->corpora), free(p->grid);
    assigns_free(&p->base);
    assigns_free(&p->common);
    free(p->base_text), free(p->base_dir);
    bk_toml_free(p->doc);
    free(p);
}

int sw_wrong(bk_error *err, const bk_toml_node *node, const char *where, const char *expected)
{
    return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(node), "%s: expected %s, got %s", where, expected,
                      bk_toml_type_name(bk_toml_type_of(node)));
}

int sw_unknown_key(bk_error *err, bk_toml_pos pos, const char *key, const char *where,
                   const char *const *names, size_t n)
{
    char list[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < n && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", names[i]);
    const char *hint = bk_closest_word(key, names, n);
    char hint_text[96] = "";
    if (hint)
        snprintf(hint_text, sizeof hint_text, " (did you mean '%s'?)", hint);
    return bk_fail_at(err, BK_ERR_CONFIG, pos, "unknown key '%s' in %s%s; expected one of: %s", key, where,
                      hint_text, list);
}

/* "key=VALUE" with VALUE the node as inline TOML (paths made absolute from the sweep file's directory). */
char *sw_assignment_text(const char *key, const bk_toml_node *value, int kind, const path_ctx *pc)
{
    sbuf b = {0};
    sw_sb_puts(&b, key);
    sw_sb_puts(&b, "=");
    sw_put_value(&b, value, kind, pc);
    return sw_sb_take(&b);
}

/* Each leaf of the tables under `table` (a section of an experiment) as an assignment "prefix.key=value";
 * "term" (the [[term]] list) is one assignment of the whole array. */
int sw_flatten(assign_list *out, const bk_toml_node *table, const char *prefix, const char *section,
               const char *label, const path_ctx *pc, int depth, bk_error *err)
{
    bk_toml_entry e;
    for (size_t i = 0; bk_toml_entry_at(table, i, &e) == 0; i++) {
        char key[512];
        if (snprintf(key, sizeof key, "%s%s%s", prefix ? prefix : "", prefix ? "." : "", e.key) >= (int)sizeof key)
            return bk_fail_at(err, BK_ERR_CONFIG, e.key_pos, "%s: key '%s' is too long (at most %zu bytes with its table's prefix)",
                              label, e.key, sizeof key - 1);
        if (strchr(e.key, '.') || strchr(e.key, '='))
            return bk_fail_at(err, BK_ERR_CONFIG, e.key_pos,
                              "%s: key '%s': an experiment key has no '.' or '=' (write nested tables)", label, e.key);
        const char *sec = section ? section : e.key;
        int rc;
        if (!prefix && strcmp(e.key, "term") == 0) {
            if (bk_toml_type_of(e.value) != BK_TOML_ARRAY)
                return sw_wrong(err, e.value, "term", "an array of tables ([[...term]], or [] for no positional term)");
            for (size_t k = 0; k < bk_toml_count(e.value); k++)
                if (bk_toml_type_of(bk_toml_at(e.value, k)) != BK_TOML_TABLE) {
                    char where[64];
                    snprintf(where, sizeof where, "term element %zu", k);
                    return sw_wrong(err, bk_toml_at(e.value, k), where, "a table");
                }
            rc = assign_add(out, sw_assignment_text("term", e.value, PLUGIN_PATH, pc), e.key_pos, label, err);
        } else if (bk_toml_type_of(e.value) == BK_TOML_TABLE && depth < 8) {
            rc = sw_flatten(out, e.value, key, sec, label, pc, depth + 1, err);
        } else if (!prefix) {
            char where[600];
            snprintf(where, sizeof where, "%s: '%s'", label, e.key);
            return sw_wrong(err, e.value, where, "a table of experiment keys (a section such as [train])");
        } else {
            rc = assign_add(out, sw_assignment_text(key, e.value, sw_path_kind(sec, e.key), pc), e.key_pos, label, err);
        }
        if (rc)
            return rc;
    }
    return BK_OK;
}

/* a variant's or a corpus's name: part of directory names */
#define SWEEP_NAME_MAX 100

/* A "set" array of "key=value" strings, as --set reads them. */
static int read_sets(assign_list *out, const bk_toml_node *v, const char *label, bk_error *err)
{
    if (bk_toml_type_of(v) != BK_TOML_ARRAY)
        return sw_wrong(err, v, label, "an array of \"key=value\" strings for 'set'");
    for (size_t j = 0; j < bk_toml_count(v); j++) {
        const bk_toml_node *s = bk_toml_at(v, j);
        if (bk_toml_type_of(s) != BK_TOML_STRING)
            return sw_wrong(err, s, label, "a \"key=value\" string in 'set'");
        if (!strchr(bk_toml_string(s), '='))
            return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(s),
                              "%s set '%s': expected \"key=value\", e.g. \"attention.mixing=kernel\"", label,
                              bk_toml_string(s));
        int rc = assign_add(out, strdup(bk_toml_string(s)), bk_toml_position(s), label, err);
        if (rc)
            return rc;
    }
    return BK_OK;
}

/* An eval_set string "data.paths=[...]" (or val_paths) with its relative paths made absolute from the
 * sweep file's directory, as in a variant's other settings (the evaluation would read them from the
 * run's directory); any other string as it is. */
static char *eval_set_text(const char *text, const path_ctx *pc)
{
    const char *eq = strchr(text, '=');
    char key[64];
    size_t n = (size_t)(eq - text);
    while (n && (text[n - 1] == ' ' || text[n - 1] == '\t'))
        n--;
    const char *k = text;
    while (n && (*k == ' ' || *k == '\t'))
        k++, n--;
    if (n >= sizeof key)
        return strdup(text);
    memcpy(key, k, n);
    key[n] = '\0';
    if (strncmp(key, "data.", 5) != 0 || sw_path_kind("data", key + 5) != PATH_LIST)
        return strdup(text);
    sbuf doc = {0};
    sw_sb_puts(&doc, "v = ");
    sw_sb_puts(&doc, eq + 1);
    bk_toml *t = NULL;
    bk_error ignored; /* a value that is not TOML: the experiment layer says so, naming the string */
    char *out = NULL;
    if (!doc.oom && bk_toml_parse_string(doc.s, "eval_set", &t, &ignored) == BK_OK)
        out = sw_assignment_text(key, bk_toml_get(bk_toml_root(t), "v"), PATH_LIST, pc);
    bk_toml_free(t);
    free(doc.s);
    return out ? out : strdup(text);
}

/* A variant's eval_set: an array of "key=value" strings as `biaskit eval --set` reads them, given to
 * the run's evaluation only. Which keys eval lets change is judged per run (resolve_eval_sets). */
static int read_eval_sets(assign_list *out, const bk_toml_node *v, const char *label, const path_ctx *pc,
                          bk_error *err)
{
    char where[200];
    snprintf(where, sizeof where, "%s eval_set", label);
    static const char expected[] = "an array of \"key=value\" strings, as `biaskit eval --set` reads them (e.g. "
                                   "[\"term.0.scaling=\\\"yarn\\\"\", \"term.0.factor=4\"])";
    if (bk_toml_type_of(v) != BK_TOML_ARRAY)
        return sw_wrong(err, v, where, expected);
    if (bk_toml_count(v) > BK_SWEEP_MAX_EVAL_SETS)
        return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v), "%s: at most %d strings, got %zu", where,
                          BK_SWEEP_MAX_EVAL_SETS, bk_toml_count(v));
    size_t total = 0;
    for (size_t j = 0; j < bk_toml_count(v); j++) {
        const bk_toml_node *s = bk_toml_at(v, j);
        if (bk_toml_type_of(s) != BK_TOML_STRING)
            return sw_wrong(err, s, where, expected);
        const char *text = bk_toml_string(s);
        if (!strchr(text, '=') || text[0] == '=')
            return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(s),
                              "%s '%s': expected \"key=value\", as `biaskit eval --set` reads it (e.g. "
                              "\"term.0.factor=4\")",
                              where, text);
        if ((total += strlen(text)) > BK_SWEEP_EVAL_SET_TEXT_MAX)
            return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(s), "%s: at most %d characters in all", where,
                              BK_SWEEP_EVAL_SET_TEXT_MAX);
        int rc = assign_add(out, eval_set_text(text, pc), bk_toml_position(s), where, err);
        if (rc)
            return rc;
    }
    return BK_OK;
}

/* [[variant]] or [[corpus]] tables. */
int sw_read_groups(const bk_toml_node *array, const char *what, int allow_term, group **out, int *n_out,
                   const path_ctx *pc, bk_error *err)
{
    char where[64];
    snprintf(where, sizeof where, "'%s'", what);
    if (bk_toml_type_of(array) != BK_TOML_ARRAY)
        return sw_wrong(err, array, where, allow_term ? "an array of tables ([[variant]])" : "an array of tables ([[corpus]])");
    size_t n = bk_toml_count(array);
    *out = calloc(n ? n : 1, sizeof **out);
    if (!*out)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory reading the sweep file");
    for (size_t i = 0; i < n; i++) {
        const bk_toml_node *t = bk_toml_at(array, i);
        snprintf(where, sizeof where, "[[%s]] #%zu", what, i + 1);
        if (bk_toml_type_of(t) != BK_TOML_TABLE)
            return sw_wrong(err, t, where, "a table");
        group *g = &(*out)[i];
        g->pos = bk_toml_position(t);
        (*n_out)++;
        const bk_toml_node *name = bk_toml_get(t, "name");
        if (!name)
            return bk_fail_at(err, BK_ERR_CONFIG, g->pos, "%s has no 'name' (it names the runs: name = \"%s\")", where,
                              allow_term ? "alibi" : "headers");
        if (bk_toml_type_of(name) != BK_TOML_STRING)
            return sw_wrong(err, name, where, "a string for 'name'");
        g->name = bk_toml_string(name);
        g->name_pos = bk_toml_position(name);
        if (!bk_name_valid(g->name, SWEEP_NAME_MAX))
            return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(name),
                              "%s name '%s': expected 1-%d characters of " BK_NAME_CHARS " (" BK_NAME_FIRST "): "
                              "it is part of directory names",
                              where, g->name, SWEEP_NAME_MAX);
        for (size_t k = 0; k < i; k++)
            if (strcmp((*out)[k].name, g->name) == 0)
                return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(name), "%s name '%s' is already used by %s #%zu",
                                  where, g->name, what, k + 1);
        char label[160];
        snprintf(label, sizeof label, "%s '%s'", what, g->name);
        bk_toml_entry e;
        for (size_t k = 0; bk_toml_entry_at(t, k, &e) == 0; k++) {
            int rc = BK_OK;
            if (strcmp(e.key, "name") == 0)
                continue;
            if (strcmp(e.key, "set") == 0) {
                rc = read_sets(&g->sets, e.value, label, err);
            } else if (strcmp(e.key, "eval_set") == 0) {
                if (!allow_term)
                    return bk_fail_at(err, BK_ERR_CONFIG, e.key_pos,
                                      "%s: a corpus gives data settings; eval_set (keys given to the evaluation "
                                      "only) belongs in [[variant]]",
                                      label);
                rc = read_eval_sets(&g->eval_sets, e.value, label, pc, err);
            } else if (strcmp(e.key, "term") == 0 && !allow_term) {
                return bk_fail_at(err, BK_ERR_CONFIG, e.key_pos,
                                  "%s: a corpus gives data settings; positional terms belong in [[variant]]", label);
            } else if (strcmp(e.key, "term") == 0) {
                const bk_toml_node *one = e.value;
                if (bk_toml_type_of(one) != BK_TOML_ARRAY)
                    return sw_wrong(err, one, label, "an array of tables for 'term' ([[variant.term]], or [] for none)");
                for (size_t j = 0; j < bk_toml_count(one); j++)
                    if (bk_toml_type_of(bk_toml_at(one, j)) != BK_TOML_TABLE)
                        return sw_wrong(err, bk_toml_at(one, j), label, "a table in 'term'");
                rc = assign_add(&g->sets, sw_assignment_text("term", one, PLUGIN_PATH, pc), e.key_pos, label, err);
            } else if (bk_toml_type_of(e.value) == BK_TOML_TABLE) {
                /* an experiment section ([variant.train], or dotted keys train.lr = ...): one assignment per leaf */
                rc = sw_flatten(&g->sets, e.value, e.key, e.key, label, pc, 1, err);
            } else {
                static const char *const keys[] = {"name", "set",  "model", "attention", "train",
                                                   "data", "run", "term",  "eval_set"};
                return sw_unknown_key(err, e.key_pos, e.key, where, keys, allow_term ? 9 : 7);
            }
            if (rc)
                return rc;
        }
    }
    return BK_OK;
}

/* [grid]: dotted keys ("train.lr") or nested tables, each leaf a non-empty array of values. */
int sw_read_grid(sweep_priv *p, const bk_toml_node *table, const char *prefix, int depth, bk_error *err)
{
    bk_toml_entry e;
    for (size_t i = 0; bk_toml_entry_at(table, i, &e) == 0; i++) {
        char key[512];
        if (snprintf(key, sizeof key, "%s%s%s", prefix ? prefix : "", prefix ? "." : "", e.key) >= (int)sizeof key)
            return bk_fail_at(err, BK_ERR_CONFIG, e.key_pos, "[grid] key '%s' is too long (at most %zu bytes with its table's prefix)",
                              e.key, sizeof key - 1);
        if (bk_toml_type_of(e.value) == BK_TOML_TABLE && depth < 8) {
            int rc = sw_read_grid(p, e.value, key, depth + 1, err);
            if (rc)
                return rc;
            continue;
        }
        char where[600];
        snprintf(where, sizeof where, "[grid] '%s'", key);
        if (bk_toml_type_of(e.value) != BK_TOML_ARRAY)
            return sw_wrong(err, e.value, where, "an array of the values to try, e.g. [1e-3, 3e-3]");
        if (bk_toml_count(e.value) == 0)
            return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(e.value), "%s: expected at least one value", where);
        if (!strchr(key, '.'))
            return bk_fail_at(err, BK_ERR_CONFIG, e.key_pos,
                              "%s: expected an experiment key \"section.key\", e.g. \"train.lr\"", where);
        for (int k = 0; k < p->n_grid; k++)
            if (strcmp(p->grid[k].key, key) == 0)
                return bk_fail_at(err, BK_ERR_CONFIG, e.key_pos, "%s is given twice", where);
        grid_axis *g = realloc(p->grid, (size_t)(p->n_grid + 1) * sizeof *g);
        if (!g)
            return bk_fail(err, BK_ERR_NOMEM, "out of memory reading [grid]");
        p->grid = g;
        if (!(g[p->n_grid].key = strdup(key)))
            return bk_fail(err, BK_ERR_NOMEM, "out of memory reading [grid]");
        g[p->n_grid].pos = e.key_pos;
        g[p->n_grid].values = e.value;
        p->n_grid++;
    }
    return BK_OK;
}

static int read_int(const bk_toml_node *v, const char *where, int64_t min, int64_t max, int64_t *out, bk_error *err)
{
    if (bk_toml_type_of(v) != BK_TOML_INT)
        return sw_wrong(err, v, where, "an integer");
    int64_t x = bk_toml_int(v);
    if (x < min || x > max)
        return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v), "%s: expected an integer in [%lld, %lld], got %lld",
                          where, (long long)min, (long long)max, (long long)x);
    *out = x;
    return BK_OK;
}

/* An array of integers in [min, max] (lengths, multiples, seeds). */
static int read_ints(const bk_toml_node *v, const char *where, int64_t min, int64_t max, int64_t *out,
                     bk_toml_pos *pos, int cap, int *n, bk_error *err)
{
    if (bk_toml_type_of(v) != BK_TOML_ARRAY)
        return sw_wrong(err, v, where, "an array of integers");
    if (bk_toml_count(v) == 0)
        return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v), "%s: expected at least one integer", where);
    if (bk_toml_count(v) > (size_t)cap)
        return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v), "%s: at most %d values", where, cap);
    *n = 0;
    for (size_t i = 0; i < bk_toml_count(v); i++) {
        int rc = read_int(bk_toml_at(v, i), where, min, max, &out[i], err);
        if (rc)
            return rc;
        for (size_t k = 0; k < i; k++)
            if (out[k] == out[i])
                return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(bk_toml_at(v, i)), "%s: %lld is given twice",
                                  where, (long long)out[i]);
        if (pos)
            pos[i] = bk_toml_position(bk_toml_at(v, i));
        (*n)++;
    }
    return BK_OK;
}

int sw_read_sweep_table(sweep_priv *p, const bk_toml_node *t, const char **out_dir,
                        bk_error *err)
{
    static const char *const keys[] = {"out_dir", "seeds", "set"};
    if (bk_toml_type_of(t) != BK_TOML_TABLE)
        return sw_wrong(err, t, "'sweep'", "a table ([sweep])");
    bk_toml_entry e;
    for (size_t i = 0; bk_toml_entry_at(t, i, &e) == 0; i++) {
        int rc = BK_OK;
        if (strcmp(e.key, "out_dir") == 0) {
            if (bk_toml_type_of(e.value) != BK_TOML_STRING || !*bk_toml_string(e.value))
                return sw_wrong(err, e.value, "[sweep] out_dir", "a non-empty string (a directory)");
            *out_dir = bk_toml_string(e.value);
        } else if (strcmp(e.key, "seeds") == 0) {
            rc = read_ints(e.value, "[sweep] seeds", 0, 9007199254740991LL, p->seeds, p->seed_pos, 4096, &p->n_seeds,
                           err);
        } else if (strcmp(e.key, "set") == 0) {
            rc = read_sets(&p->common, e.value, "[sweep]", err);
        } else
            return sw_unknown_key(err, e.key_pos, e.key, "[sweep]", keys, 3);
        if (rc)
            return rc;
    }
    return BK_OK;
}

/* [eval] passkey_depths: numbers in [0, 1], each once. */
static int read_depths(const bk_toml_node *v, bk_sweep *sw, bk_error *err)
{
    const char *where = "[eval] passkey_depths";
    if (bk_toml_type_of(v) != BK_TOML_ARRAY || bk_toml_count(v) == 0)
        return sw_wrong(err, v, where, "a non-empty array of numbers in [0, 1]");
    if (bk_toml_count(v) > BK_SWEEP_MAX_PASSKEY_DEPTHS)
        return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v), "%s: at most %d values", where,
                          BK_SWEEP_MAX_PASSKEY_DEPTHS);
    for (size_t i = 0; i < bk_toml_count(v); i++) {
        const bk_toml_node *x = bk_toml_at(v, i);
        const int t = bk_toml_type_of(x);
        const double d = t == BK_TOML_FLOAT ? bk_toml_float(x) : t == BK_TOML_INT ? (double)bk_toml_int(x) : NAN;
        if (!(d >= 0.0 && d <= 1.0))
            return sw_wrong(err, x, where, "numbers in [0, 1] (the key's relative depth in the filler)");
        for (size_t k = 0; k < i; k++)
            if (sw->passkey_depths[k] == d)
                return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(x), "%s: %g is given twice", where, d);
        sw->passkey_depths[i] = d;
    }
    sw->n_passkey_depths = (int)bk_toml_count(v);
    return BK_OK;
}

int sw_read_eval_table(bk_sweep *sw, const bk_toml_node *t, int64_t *multiples, int *n_multiples, bk_error *err)
{
    static const char *const keys[] = {"lengths", "multiples", "sliding", "tokens", "passkey", "passkey_depths",
                                       "passkey_trials"};
    if (bk_toml_type_of(t) != BK_TOML_TABLE)
        return sw_wrong(err, t, "'eval'", "a table ([eval])");
    const bk_toml_node *lengths = bk_toml_get(t, "lengths"), *mult = bk_toml_get(t, "multiples");
    if (lengths && mult)
        return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_key_position(t, "multiples"),
                          "[eval]: give 'lengths' (tokens) or 'multiples' (of the training length), not both");
    bk_toml_entry e;
    for (size_t i = 0; bk_toml_entry_at(t, i, &e) == 0; i++) {
        int rc;
        if (strcmp(e.key, "lengths") == 0) {
            int64_t v[BK_SWEEP_MAX_LENGTHS];
            int n = 0;
            rc = read_ints(e.value, "[eval] lengths", 1, 1 << 24, v, NULL, BK_SWEEP_MAX_LENGTHS, &n, err);
            for (int k = 0; !rc && k < n; k++)
                sw->lengths[k] = (int32_t)v[k];
            sw->n_lengths = n;
        } else if (strcmp(e.key, "multiples") == 0)
            rc = read_ints(e.value, "[eval] multiples", 1, 1 << 16, multiples, NULL, BK_SWEEP_MAX_LENGTHS, n_multiples,
                           err);
        else if (strcmp(e.key, "sliding") == 0)
            rc = read_int(e.value, "[eval] sliding", 0, 1 << 24, &sw->sliding, err);
        else if (strcmp(e.key, "tokens") == 0)
            rc = read_int(e.value, "[eval] tokens", 0, 9007199254740991LL, &sw->tokens, err);
        else if (strcmp(e.key, "passkey") == 0) {
            int64_t v[BK_SWEEP_MAX_LENGTHS];
            int n = 0;
            rc = read_ints(e.value, "[eval] passkey (lengths)", bk_passkey_min_length(), 1 << 20, v, NULL,
                           BK_SWEEP_MAX_LENGTHS, &n, err);
            for (int k = 0; !rc && k < n; k++)
                sw->passkey[k] = (int32_t)v[k];
            sw->n_passkey = rc ? 0 : n;
        } else if (strcmp(e.key, "passkey_depths") == 0)
            rc = read_depths(e.value, sw, err);
        else if (strcmp(e.key, "passkey_trials") == 0)
            rc = read_int(e.value, "[eval] passkey_trials", 1, 1 << 20, &sw->passkey_trials, err);
        else
            return sw_unknown_key(err, e.key_pos, e.key, "[eval]", keys, 7);
        if (rc)
            return rc;
    }
    /* the passkey's depths and trials mean nothing without its lengths: refused rather than ignored */
    static const char *const passkey_keys[] = {"passkey_depths", "passkey_trials"};
    for (int k = 0; k < 2; k++)
        if (bk_toml_get(t, passkey_keys[k]) && !bk_toml_get(t, "passkey"))
            return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_key_position(t, passkey_keys[k]),
                              "[eval] %s applies with [eval] passkey (the lengths to test) only; passkey is not set",
                              passkey_keys[k]);
    return BK_OK;
}
