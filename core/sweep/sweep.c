/* The sweep file: parsing, expansion into runs, resolution through the experiment layer, and the
 * state files of a sweep directory (docs/sweeps.md). */
#define _GNU_SOURCE /* strdup, fnmatch, mkdir, getpid, flock, MAP_ANONYMOUS */
#include "sweep/sweep.h"

#include "bias/terms.h"
#include "config/experiment.h"
#include "config/toml.h"
#include "plugin/host.h"
#include "plugin/services.h"
#include "io/safetensors.h" /* bk_xxh64 */
#include "train/checkpoint.h" /* bk_checkpoint_eval_refusal */
#include "train/rundir.h"
#include "util/file.h"
#include "util/path.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------------
 * A growable string
 * ---------------------------------------------------------------------------------------------- */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_add(sbuf *b, const char *text, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s, b->cap = cap;
    }
    memcpy(b->s + b->n, text, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void sb_puts(sbuf *b, const char *text)
{
    sb_add(b, text, strlen(text));
}

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    if ((size_t)n < sizeof small) {
        sb_add(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_add(b, big, (size_t)n);
    free(big);
}

/* The buffer's text, handed to the caller (never NULL unless out of memory). */
static char *sb_take(sbuf *b)
{
    if (b->oom) {
        free(b->s);
        return NULL;
    }
    if (!b->s)
        return strdup("");
    return b->s;
}

/* ------------------------------------------------------------------------------------------------
 * TOML text from nodes: values inline, and whole documents
 * ---------------------------------------------------------------------------------------------- */

/* Where relative paths inside values are read from while writing them out. */
typedef struct path_ctx {
    const char *sweep_dir;  /* paths written in the sweep file (and its set strings) */
    const char *base_file;  /* the base file's source name: its values are read from base_dir */
    const char *base_dir;
} path_ctx;

static int is_bare_key(const char *key)
{
    if (!*key)
        return 0;
    for (const char *c = key; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
              *c == '-'))
            return 0;
    return 1;
}

static void put_string(sbuf *b, const char *s)
{
    sb_puts(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"': sb_puts(b, "\\\""); break;
        case '\\': sb_puts(b, "\\\\"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\t': sb_puts(b, "\\t"); break;
        case '\r': sb_puts(b, "\\r"); break;
        case '\b': sb_puts(b, "\\b"); break;
        case '\f': sb_puts(b, "\\f"); break;
        default:
            if (*c < 0x20 || *c == 0x7f)
                sb_printf(b, "\\u%04x", *c);
            else
                sb_add(b, (const char *)c, 1);
        }
    }
    sb_puts(b, "\"");
}

static void put_key(sbuf *b, const char *key)
{
    if (is_bare_key(key))
        sb_puts(b, key);
    else
        put_string(b, key);
}

static void put_float(sbuf *b, double v)
{
    if (isnan(v)) {
        sb_puts(b, "nan");
        return;
    }
    if (isinf(v)) {
        sb_puts(b, v < 0 ? "-inf" : "inf");
        return;
    }
    char text[40];
    for (int digits = 6; digits <= 17; digits++) { /* the shortest text that reads back as the same double */
        snprintf(text, sizeof text, "%.*g", digits, v);
        if (strtod(text, NULL) == v)
            break;
    }
    sb_printf(b, "%s%s", text, strpbrk(text, ".en") ? "" : ".0");
}

/* A value that is a path (is_path): written absolute, read from the directory of where it was written. */
static void put_path(sbuf *b, const bk_toml_node *node, const path_ctx *pc)
{
    const char *s = bk_toml_string(node);
    const char *src = bk_toml_position(node).source;
    const char *dir = pc && pc->base_file && src && strcmp(src, pc->base_file) == 0 ? pc->base_dir
                      : pc                                                        ? pc->sweep_dir
                                                                                  : NULL;
    char path[4096];
    bk_error ignored;
    if (*s && dir && bk_path_resolve(dir, s, path, sizeof path, &ignored) == BK_OK)
        put_string(b, path);
    else
        put_string(b, s);
}

static int plugin_is_path(const char *s)
{
    size_t n = strlen(s);
    return strchr(s, '/') != NULL || (n > 3 && strcmp(s + n - 3, ".so") == 0);
}

/* Path-valued keys of an experiment: [data] paths and val_paths, and a [[term]] plugin given as a path. */
enum { NOT_PATH = 0, PATH_LIST = 1, PLUGIN_PATH = 2 };

static int path_kind(const char *section, const char *key)
{
    if (!section)
        return NOT_PATH;
    if (strcmp(section, "data") == 0 && (strcmp(key, "paths") == 0 || strcmp(key, "val_paths") == 0))
        return PATH_LIST;
    if (strcmp(section, "term") == 0 && strcmp(key, "plugin") == 0)
        return PLUGIN_PATH;
    return NOT_PATH;
}

static void put_value(sbuf *b, const bk_toml_node *node, int kind, const path_ctx *pc);

static void put_inline_table(sbuf *b, const bk_toml_node *table, const char *section, const path_ctx *pc)
{
    bk_toml_entry e;
    sb_puts(b, "{");
    for (size_t i = 0; bk_toml_entry_at(table, i, &e) == 0; i++) {
        sb_puts(b, i ? ", " : "");
        put_key(b, e.key);
        sb_puts(b, " = ");
        put_value(b, e.value, path_kind(section, e.key), pc);
    }
    sb_puts(b, "}");
}

static void put_value(sbuf *b, const bk_toml_node *node, int kind, const path_ctx *pc)
{
    switch (bk_toml_type_of(node)) {
    case BK_TOML_STRING:
        if (kind == PATH_LIST || (kind == PLUGIN_PATH && plugin_is_path(bk_toml_string(node))))
            put_path(b, node, pc);
        else
            put_string(b, bk_toml_string(node));
        break;
    case BK_TOML_INT: sb_printf(b, "%lld", (long long)bk_toml_int(node)); break;
    case BK_TOML_FLOAT: put_float(b, bk_toml_float(node)); break;
    case BK_TOML_BOOL: sb_puts(b, bk_toml_bool(node) ? "true" : "false"); break;
    case BK_TOML_DATE:
    case BK_TOML_TIME:
    case BK_TOML_DATETIME: sb_puts(b, bk_toml_string(node)); break;
    case BK_TOML_ARRAY:
        sb_puts(b, "[");
        for (size_t i = 0; i < bk_toml_count(node); i++) {
            sb_puts(b, i ? ", " : "");
            const bk_toml_node *el = bk_toml_at(node, i);
            if (bk_toml_type_of(el) == BK_TOML_TABLE)
                put_inline_table(b, el, kind == PLUGIN_PATH ? "term" : NULL, pc);
            else
                put_value(b, el, kind, pc);
        }
        sb_puts(b, "]");
        break;
    case BK_TOML_TABLE: put_inline_table(b, node, NULL, pc); break;
    case BK_TOML_NONE: sb_puts(b, "\"\""); break;
    }
}

static int is_table_array(const bk_toml_node *node)
{
    if (bk_toml_type_of(node) != BK_TOML_ARRAY || bk_toml_count(node) == 0)
        return 0;
    for (size_t i = 0; i < bk_toml_count(node); i++)
        if (bk_toml_type_of(bk_toml_at(node, i)) != BK_TOML_TABLE)
            return 0;
    return 1;
}

static void put_table_body(sbuf *b, const bk_toml_node *table, const char *prefix, const char *section,
                           int force_out_dir, const path_ctx *pc);

/* The tables and arrays of tables under `table` (already written: its plain keys), as [prefix.key]. */
static void put_subtables(sbuf *b, const bk_toml_node *table, const char *prefix, const char *section,
                          const path_ctx *pc)
{
    bk_toml_entry e;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; bk_toml_entry_at(table, i, &e) == 0; i++) {
            int sub = bk_toml_type_of(e.value) == BK_TOML_TABLE, arr = is_table_array(e.value);
            if ((pass == 0 && !sub) || (pass == 1 && !arr))
                continue;
            sbuf name = {0};
            if (prefix) {
                sb_puts(&name, prefix);
                sb_puts(&name, ".");
            }
            if (is_bare_key(e.key))
                sb_puts(&name, e.key);
            else {
                sbuf q = {0};
                put_string(&q, e.key);
                sb_puts(&name, q.s ? q.s : "\"\"");
                free(q.s);
            }
            if (name.oom) {
                b->oom = 1;
                free(name.s);
                return;
            }
            const char *sec = section ? section : e.key;
            if (sub) {
                sb_printf(b, "\n[%s]\n", name.s);
                put_table_body(b, e.value, name.s, sec, !prefix && strcmp(e.key, "run") == 0, pc);
            } else
                for (size_t k = 0; k < bk_toml_count(e.value); k++) {
                    sb_printf(b, "\n[[%s]]\n", name.s);
                    put_table_body(b, bk_toml_at(e.value, k), name.s, sec, 0, pc);
                }
            free(name.s);
        }
}

static void put_table_body(sbuf *b, const bk_toml_node *table, const char *prefix, const char *section,
                           int force_out_dir, const path_ctx *pc)
{
    bk_toml_entry e;
    for (size_t i = 0; bk_toml_entry_at(table, i, &e) == 0; i++) {
        if (bk_toml_type_of(e.value) == BK_TOML_TABLE || is_table_array(e.value))
            continue;
        if (force_out_dir && strcmp(e.key, "out_dir") == 0)
            continue;
        put_key(b, e.key);
        sb_puts(b, " = ");
        put_value(b, e.value, prefix ? path_kind(section, e.key) : NOT_PATH, pc);
        sb_puts(b, "\n");
    }
    if (force_out_dir) /* a run writes its own directory: the one experiment.toml lies in */
        sb_puts(b, "out_dir = \".\"\n");
    put_subtables(b, table, prefix, section, pc);
}

/* The whole document as TOML text; [run] out_dir becomes "." (the file's own directory). */
static char *document_text(const bk_toml_node *root, const path_ctx *pc)
{
    sbuf b = {0};
    put_table_body(&b, root, NULL, NULL, 0, pc);
    if (!bk_toml_get(root, "run"))
        sb_puts(&b, "\n[run]\nout_dir = \".\"\n");
    return sb_take(&b);
}

/* ------------------------------------------------------------------------------------------------
 * The parsed sweep file
 * ---------------------------------------------------------------------------------------------- */

/* One assignment the sweep makes to the base experiment, with where the sweep file says so. */
typedef struct assign {
    char *text;       /* "section.key=VALUE" as --set reads it */
    bk_toml_pos pos;  /* in the sweep file */
    char *label;      /* "variant 'alibi'", "[grid] train.lr", ... */
} assign;

typedef struct assign_list {
    assign *items;
    int n, cap;
} assign_list;

typedef struct group { /* a [[variant]] or a [[corpus]] */
    const char *name;
    bk_toml_pos pos;
    bk_toml_pos name_pos;
    assign_list sets;
    assign_list eval_sets; /* a variant's eval_set: given to its evaluation only */
} group;

typedef struct grid_axis {
    char *key;
    bk_toml_pos pos;
    const bk_toml_node *values;
} grid_axis;

typedef struct sweep_priv {
    bk_toml *doc;
    char *base_text;      /* the base file's text, or "" for an inline base */
    char *base_dir;
    assign_list base;     /* an inline base, as assignments */
    assign_list common;   /* [sweep] set: given to every run */
    group *variants;
    int n_variants;
    group *corpora;
    int n_corpora;
    grid_axis *grid;
    int n_grid;
    int64_t seeds[4096];
    bk_toml_pos seed_pos[4096];
    int n_seeds;
} sweep_priv;

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

static void priv_free(sweep_priv *p)
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

static int wrong(bk_error *err, const bk_toml_node *node, const char *where, const char *expected)
{
    return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(node), "%s: expected %s, got %s", where, expected,
                      bk_toml_type_name(bk_toml_type_of(node)));
}

static int unknown_key(bk_error *err, bk_toml_pos pos, const char *key, const char *where,
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
static char *assignment_text(const char *key, const bk_toml_node *value, int kind, const path_ctx *pc)
{
    sbuf b = {0};
    sb_puts(&b, key);
    sb_puts(&b, "=");
    put_value(&b, value, kind, pc);
    return sb_take(&b);
}

/* Each leaf of the tables under `table` (a section of an experiment) as an assignment "prefix.key=value";
 * "term" (the [[term]] list) is one assignment of the whole array. */
static int flatten(assign_list *out, const bk_toml_node *table, const char *prefix, const char *section,
                   const char *label, const path_ctx *pc, int depth, bk_error *err)
{
    bk_toml_entry e;
    for (size_t i = 0; bk_toml_entry_at(table, i, &e) == 0; i++) {
        char key[512];
        if (snprintf(key, sizeof key, "%s%s%s", prefix ? prefix : "", prefix ? "." : "", e.key) >= (int)sizeof key)
            return bk_fail_at(err, BK_ERR_CONFIG, e.key_pos, "%s: key '%s' is too long", label, e.key);
        if (strchr(e.key, '.') || strchr(e.key, '='))
            return bk_fail_at(err, BK_ERR_CONFIG, e.key_pos,
                              "%s: key '%s': an experiment key has no '.' or '=' (write nested tables)", label, e.key);
        const char *sec = section ? section : e.key;
        int rc;
        if (!prefix && strcmp(e.key, "term") == 0) {
            if (bk_toml_type_of(e.value) != BK_TOML_ARRAY)
                return wrong(err, e.value, "term", "an array of tables ([[...term]], or [] for no positional term)");
            for (size_t k = 0; k < bk_toml_count(e.value); k++)
                if (bk_toml_type_of(bk_toml_at(e.value, k)) != BK_TOML_TABLE) {
                    char where[64];
                    snprintf(where, sizeof where, "term element %zu", k);
                    return wrong(err, bk_toml_at(e.value, k), where, "a table");
                }
            rc = assign_add(out, assignment_text("term", e.value, PLUGIN_PATH, pc), e.key_pos, label, err);
        } else if (bk_toml_type_of(e.value) == BK_TOML_TABLE && depth < 8) {
            rc = flatten(out, e.value, key, sec, label, pc, depth + 1, err);
        } else if (!prefix) {
            char where[600];
            snprintf(where, sizeof where, "%s: '%s'", label, e.key);
            return wrong(err, e.value, where, "a table of experiment keys (a section such as [train])");
        } else {
            rc = assign_add(out, assignment_text(key, e.value, path_kind(sec, e.key), pc), e.key_pos, label, err);
        }
        if (rc)
            return rc;
    }
    return BK_OK;
}

static int valid_name(const char *s)
{
    if (!*s || *s == '.' || strlen(s) > 100)
        return 0;
    for (const char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_' ||
              *c == '-' || *c == '.' || *c == '+'))
            return 0;
    return 1;
}

static int read_sets(assign_list *out, const bk_toml_node *v, const char *label, bk_error *err);
static int read_eval_sets(assign_list *out, const bk_toml_node *v, const char *label, const path_ctx *pc,
                          bk_error *err);

/* [[variant]] or [[corpus]] tables. */
static int read_groups(const bk_toml_node *array, const char *what, int allow_term, group **out, int *n_out,
                       const path_ctx *pc, bk_error *err)
{
    char where[64];
    snprintf(where, sizeof where, "'%s'", what);
    if (bk_toml_type_of(array) != BK_TOML_ARRAY)
        return wrong(err, array, where, allow_term ? "an array of tables ([[variant]])" : "an array of tables ([[corpus]])");
    size_t n = bk_toml_count(array);
    *out = calloc(n ? n : 1, sizeof **out);
    if (!*out)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory reading the sweep file");
    for (size_t i = 0; i < n; i++) {
        const bk_toml_node *t = bk_toml_at(array, i);
        snprintf(where, sizeof where, "[[%s]] #%zu", what, i + 1);
        if (bk_toml_type_of(t) != BK_TOML_TABLE)
            return wrong(err, t, where, "a table");
        group *g = &(*out)[i];
        g->pos = bk_toml_position(t);
        (*n_out)++;
        const bk_toml_node *name = bk_toml_get(t, "name");
        if (!name)
            return bk_fail_at(err, BK_ERR_CONFIG, g->pos, "%s has no 'name' (it names the runs: name = \"%s\")", where,
                              allow_term ? "alibi" : "headers");
        if (bk_toml_type_of(name) != BK_TOML_STRING)
            return wrong(err, name, where, "a string for 'name'");
        g->name = bk_toml_string(name);
        g->name_pos = bk_toml_position(name);
        if (!valid_name(g->name))
            return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(name),
                              "%s name '%s': expected 1-100 characters of A-Z a-z 0-9 _ - . + (not starting with '.'): "
                              "it is part of directory names",
                              where, g->name);
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
                    return wrong(err, one, label, "an array of tables for 'term' ([[variant.term]], or [] for none)");
                for (size_t j = 0; j < bk_toml_count(one); j++)
                    if (bk_toml_type_of(bk_toml_at(one, j)) != BK_TOML_TABLE)
                        return wrong(err, bk_toml_at(one, j), label, "a table in 'term'");
                rc = assign_add(&g->sets, assignment_text("term", one, PLUGIN_PATH, pc), e.key_pos, label, err);
            } else if (bk_toml_type_of(e.value) == BK_TOML_TABLE) {
                /* an experiment section ([variant.train], or dotted keys train.lr = ...): one assignment per leaf */
                rc = flatten(&g->sets, e.value, e.key, e.key, label, pc, 1, err);
            } else {
                static const char *const keys[] = {"name", "set",  "model", "attention", "train",
                                                   "data", "run", "term",  "eval_set"};
                return unknown_key(err, e.key_pos, e.key, where, keys, allow_term ? 9 : 7);
            }
            if (rc)
                return rc;
        }
    }
    return BK_OK;
}

/* [grid]: dotted keys ("train.lr") or nested tables, each leaf a non-empty array of values. */
static int read_grid(sweep_priv *p, const bk_toml_node *table, const char *prefix, int depth, bk_error *err)
{
    bk_toml_entry e;
    for (size_t i = 0; bk_toml_entry_at(table, i, &e) == 0; i++) {
        char key[512];
        if (snprintf(key, sizeof key, "%s%s%s", prefix ? prefix : "", prefix ? "." : "", e.key) >= (int)sizeof key)
            return bk_fail_at(err, BK_ERR_CONFIG, e.key_pos, "[grid] key '%s' is too long", e.key);
        if (bk_toml_type_of(e.value) == BK_TOML_TABLE && depth < 8) {
            int rc = read_grid(p, e.value, key, depth + 1, err);
            if (rc)
                return rc;
            continue;
        }
        char where[600];
        snprintf(where, sizeof where, "[grid] '%s'", key);
        if (bk_toml_type_of(e.value) != BK_TOML_ARRAY)
            return wrong(err, e.value, where, "an array of the values to try, e.g. [1e-3, 3e-3]");
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
        return wrong(err, v, where, "an integer");
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
        return wrong(err, v, where, "an array of integers");
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

/* ------------------------------------------------------------------------------------------------
 * Resolution of one run
 * ---------------------------------------------------------------------------------------------- */

/* An error of the experiment layer about an assignment ("--set TEXT: ...", "--set 'TEXT': ...") is
 * re-worded to name where the sweep file made it; any other gets the run's name. */
static int map_error(bk_error *err, const assign *const *as, int n, const char *who)
{
    char *msg = strdup(err->message);
    if (!msg)
        return err->code;
    for (int i = 0; i < n; i++) {
        const assign *a = as[i];
        size_t tn = strlen(a->text);
        const char *rest = NULL, *at = NULL;
        /* at the start of the message, or inside it (a plugin's refusal is wrapped: "term 'x' (plugin
         * ...): create() failed: --set TEXT:1:41: ...") */
        for (const char *p = strstr(msg, "--set "); p && !rest; p = strstr(p + 1, "--set ")) {
            if (strncmp(p + 6, a->text, tn) == 0 && p[6 + tn] == ':') {
                rest = p + 6 + tn + 1;
                /* :LINE:COL of the position inside the assignment */
                const char *r = rest;
                for (int k = 0; k < 2 && *r >= '0' && *r <= '9'; k++) {
                    while (*r >= '0' && *r <= '9')
                        r++;
                    if (*r == ':')
                        rest = ++r;
                }
            } else if (p[6] == '\'' && strncmp(p + 7, a->text, tn) == 0 && strncmp(p + 7 + tn, "':", 2) == 0) {
                rest = p + 7 + tn + 2;
            }
            at = p;
        }
        if (!rest)
            continue;
        while (*rest == ' ')
            rest++;
        bk_fail_at(err, err->code == BK_ERR_USAGE ? BK_ERR_CONFIG : err->code, a->pos, "%s, %s, '%s': %.*s%s", who,
                   a->label, a->text, (int)(at - msg), msg, rest);
        free(msg);
        return err->code;
    }
    bk_fail(err, err->code == BK_ERR_USAGE ? BK_ERR_CONFIG : err->code, "%s (resolving %s)", msg, who);
    free(msg);
    return err->code;
}

static void sanitize(char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-' || *s == '.' || *s == '+'))
            *s = '_';
}

/* The value text of a grid value: a string as it is, anything else as TOML. */
static char *value_text(const bk_toml_node *v)
{
    if (bk_toml_type_of(v) == BK_TOML_STRING)
        return strdup(bk_toml_string(v));
    sbuf b = {0};
    put_value(&b, v, NOT_PATH, NULL);
    return sb_take(&b);
}

void bk_sweep_data_name(const char *const *paths, int n, char *out, size_t size)
{
    sbuf b = {0};
    for (int i = 0; i < n; i++) {
        const char *p = paths[i];
        size_t len = strlen(p);
        while (len > 1 && p[len - 1] == '/')
            len--;
        size_t start = len;
        while (start > 0 && p[start - 1] != '/')
            start--;
        size_t end = len;
        for (size_t k = len; k > start + 1; k--)
            if (p[k - 1] == '.') { /* a file's extension: "wiki.train.txt" -> "wiki.train" */
                end = k - 1;
                break;
            }
        if (end > start) {
            if (b.n)
                sb_puts(&b, "+");
            sb_add(&b, p + start, end - start);
        }
    }
    char *text = sb_take(&b);
    if (!text || !*text)
        snprintf(out, size, "%s", n ? "data" : "base");
    else {
        sanitize(text);
        snprintf(out, size, "%.48s", text);
    }
    free(text);
}

static void run_free(bk_sweep_run *r)
{
    free(r->name), free(r->dir), free(r->text), free(r->invalid), free(r->eval_set_json), free(r->corpus_owned);
    for (int i = 0; i < r->n_eval_sets; i++)
        free(r->eval_sets[i]);
    free(r->eval_sets);
    for (int i = 0; i < r->n_grid; i++)
        free(r->grid_keys[i]), free(r->grid_values[i]);
    free(r->grid_keys), free(r->grid_values);
    for (int i = 0; i < r->n_sets; i++)
        free(r->sets[i]);
    free(r->sets);
    memset(r, 0, sizeof *r);
}

/* The answer of the plugins for one model and term list (checked once, shared by the runs that give
 * the plugins the same: check_key). */
typedef struct term_answer {
    char *key;
    int rc;          /* bk_terms_create's code; BK_ERR_PLUGIN with `died` when the child did not finish */
    int died;        /* crashed, exited or hung: `message` says which */
    int term;        /* then the 0-based term being created, or -1 when not known */
    char *message;   /* the refusal (positions of the experiment checked), or what happened to the child */
} term_answer;

typedef struct resolver {
    bk_sweep *sw;
    sweep_priv *p;
    path_ctx pc;
    const char *base_source; /* the name errors give the base: its path, or the sweep file for an inline base */
    const bk_sweep_load_options *o;
    bk_registry reg;
    int reg_ready;
    term_answer *answers;
    int n_answers;
    volatile int *at;        /* shared with the checking child: the term it is creating */
} resolver;

static void resolver_free(resolver *rs)
{
    if (rs->reg_ready)
        bk_registry_free(&rs->reg);
    rs->reg_ready = 0;
    for (int i = 0; i < rs->n_answers; i++)
        free(rs->answers[i].key), free(rs->answers[i].message);
    free(rs->answers);
    rs->answers = NULL;
    rs->n_answers = 0;
    if (rs->at)
        munmap((void *)rs->at, sizeof *rs->at);
    rs->at = NULL;
}

/* What bk_terms_create sees of an experiment besides the seed: the model's geometry, the attention
 * section and the [[term]] list (paths in it are absolute or read from one directory per sweep). */
static char *check_key(const bk_experiment *exp)
{
    sbuf b = {0};
    sb_printf(&b, "%lld %lld %lld %lld %lld %lld|", (long long)exp->model.layers, (long long)exp->model.heads,
              (long long)exp->model.dim, (long long)exp->model.vocab, (long long)exp->train.length,
              (long long)exp->attention.mixing);
    const bk_toml_node *root = bk_toml_root(exp->doc), *v;
    if ((v = bk_toml_get(root, "attention")))
        put_value(&b, v, NOT_PATH, NULL);
    sb_puts(&b, "|");
    if ((v = bk_toml_get(root, "term")))
        put_value(&b, v, NOT_PATH, NULL);
    return sb_take(&b);
}

typedef struct term_check {
    const bk_experiment *exp;
    bk_registry *reg;
    volatile int *at;
} term_check;

/* In the child: each term alone first (its create(), param_init(): what a plugin can crash in),
 * with `at` naming it, then the whole list as the training creates it, whose answer is returned. */
static int check_terms_child(void *ctx, FILE *out, bk_error *err)
{
    (void)out;
    const term_check *tc = ctx;
    /* a probe: what a plugin says it does (info lines) is for the run's own log, not the sweep's */
    bk_set_log_level(BIASKIT_LOG_WARN);
    bk_experiment one = *tc->exp;
    for (int i = 0; i < tc->exp->n_terms; i++) {
        *tc->at = i;
        one.terms = &tc->exp->terms[i];
        one.n_terms = 1;
        bk_term_set set;
        bk_error ignored; /* a refusal of a term alone may be the list's (roles, weights): the list answers */
        if (bk_terms_create(&set, &one, tc->reg, &ignored) == BK_OK)
            bk_terms_free(&set);
    }
    *tc->at = -1;
    bk_term_set set;
    int rc = bk_terms_create(&set, tc->exp, tc->reg, err);
    if (rc == BK_OK)
        bk_terms_free(&set);
    return rc;
}

/* The plugins' answer for `exp` (cached by check_key); NULL with err set when no child can be started. */
static const term_answer *check_terms(resolver *rs, const bk_experiment *exp, bk_error *err)
{
    char *key = check_key(exp);
    if (!key) {
        bk_fail(err, BK_ERR_NOMEM, "out of memory checking the terms of the runs");
        return NULL;
    }
    for (int i = 0; i < rs->n_answers; i++)
        if (strcmp(rs->answers[i].key, key) == 0) {
            free(key);
            return &rs->answers[i];
        }
    term_answer *grown = realloc(rs->answers, (size_t)(rs->n_answers + 1) * sizeof *grown);
    if (!grown) {
        free(key);
        bk_fail(err, BK_ERR_NOMEM, "out of memory checking the terms of the runs");
        return NULL;
    }
    rs->answers = grown;
    if (!rs->reg_ready) {
        if (bk_registry_init(&rs->reg, err)) {
            free(key);
            return NULL;
        }
        rs->reg_ready = 1;
    }
    rs->reg.relative_to = rs->p->base_dir ? rs->p->base_dir : rs->sw->dir;
    if (!rs->at) {
        void *shared = mmap(NULL, sizeof *rs->at, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (shared == MAP_FAILED) {
            free(key);
            bk_fail(err, BK_ERR_INTERNAL, "cannot map memory to share with a child process: %s", strerror(errno));
            return NULL;
        }
        rs->at = shared;
    }
    *rs->at = -1;
    term_check tc = {exp, &rs->reg, rs->at};
    unsigned timeout = rs->o && rs->o->plugin_timeout_s ? rs->o->plugin_timeout_s : BK_SWEEP_PLUGIN_TIMEOUT_S;
    bk_isolated res;
    bk_error cerr;
    bk_error_clear(&cerr);
    int rc = bk_plugin_isolate(check_terms_child, &tc, timeout, "the check of the run's terms", &res, &cerr);
    free(res.output);
    if (rc != BK_OK && !res.finished && rc != BK_ERR_PLUGIN) { /* no child: the sweep cannot check its runs */
        free(key);
        *err = cerr;
        return NULL;
    }
    term_answer *a = &rs->answers[rs->n_answers];
    memset(a, 0, sizeof *a);
    a->key = key;
    a->rc = rc;
    a->died = rc != BK_OK && !res.finished;
    a->term = a->died ? *rs->at : -1;
    if (!(a->message = strdup(rc ? cerr.message : ""))) {
        free(key);
        bk_fail(err, BK_ERR_NOMEM, "out of memory checking the terms of the runs");
        return NULL;
    }
    rs->n_answers++;
    return a;
}

/* The plugins' refusal of a run's terms (`answer`, for experiment `e` composed of the assignments `as`)
 * as the run's `invalid` text, naming the sweep file's line; `when`: "training" or what else ran. */
static int refusal_text(const term_answer *answer, const bk_experiment *e, const assign *const *as, int n,
                        const char *who, const char *when, char **invalid, bk_error *err)
{
    bk_error perr;
    bk_error_clear(&perr);
    if (!answer->died) {
        perr.code = answer->rc;
        bk_copy_text(perr.message, sizeof perr.message, answer->message);
    } else if (answer->term >= 0 && answer->term < e->n_terms) {
        const bk_term_config *t = &e->terms[answer->term];
        bk_fail_at(&perr, BK_ERR_PLUGIN, t->pos,
                   "[[term]] #%d (%s): %s, when the sweep checked the term (in a child process, before %s); "
                   "'biaskit check %s' tests the plugin",
                   t->index, t->plugin, answer->message, when, t->plugin);
    } else
        bk_fail(&perr, BK_ERR_PLUGIN, "%s, when the sweep checked the terms (in a child process, before %s)",
                answer->message, when);
    map_error(&perr, as, n, who);
    if (!(*invalid = strdup(perr.message)))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
    return BK_OK;
}

#define EVAL_SET_MAX_CHANGES 64 /* keys one eval_set string may change (a whole table at once) */

/* The evaluation's experiment of a run whose variant has an eval_set: the run's assignments `as` (n,
 * `texts` their text) and then each eval_set string, appended there (the arrays have room), read by
 * the experiment layer (an error names the string's line and column) and judged by what it changes,
 * as `biaskit eval --set` judges it on the run's checkpoint: a change eval refuses is an error here,
 * before anything trains. `trained`: the experiment of the first n. */
static int resolve_eval_sets(const resolver *rs, const group *v, const assign **as, const char **texts, int n,
                             const bk_experiment *trained, const char *who, bk_experiment *out, bk_error *err)
{
    bk_experiment prev;
    int have_prev = 0;
    bk_experiment_change *changes = malloc(EVAL_SET_MAX_CHANGES * sizeof *changes);
    if (!changes)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
    int rc = BK_OK;
    for (int i = 0; i < v->eval_sets.n && !rc; i++) {
        const assign *a = &v->eval_sets.items[i];
        as[n + i] = a;
        texts[n + i] = a->text;
        bk_experiment next;
        if ((rc = bk_experiment_parse(rs->p->base_text, rs->base_source, texts, (size_t)(n + i + 1), &next, err))) {
            map_error(err, as, n + i + 1, who);
            break;
        }
        int k = bk_experiment_diff(have_prev ? &prev : trained, &next, changes, EVAL_SET_MAX_CHANGES);
        if (k > EVAL_SET_MAX_CHANGES) /* none may go unjudged */
            rc = bk_fail_at(err, BK_ERR_CONFIG, a->pos,
                            "%s, %s, '%s': it changes %d keys at once, more than the %d judged one by one; give them "
                            "as separate strings",
                            who, a->label, a->text, k, EVAL_SET_MAX_CHANGES);
        for (int c = 0; c < k && c < EVAL_SET_MAX_CHANGES && !rc; c++) {
            const char *why = bk_checkpoint_eval_refusal(&changes[c]);
            if (why)
                rc = bk_fail_at(err, BK_ERR_CONFIG, a->pos,
                                "%s, %s, '%s': it changes %s (%s when trained, %s when evaluated), which `biaskit "
                                "eval --set` refuses: %s; an eval_set may change [data] and [run] keys and a "
                                "plugin's own options",
                                who, a->label, a->text, changes[c].where, changes[c].before, changes[c].after, why);
        }
        if (have_prev)
            bk_experiment_free(&prev);
        prev = next;
        have_prev = 1;
    }
    free(changes);
    if (rc) {
        if (have_prev)
            bk_experiment_free(&prev);
        return rc;
    }
    *out = prev;
    return BK_OK;
}

/* The run's copy of its variant's eval_set, and the same as a JSON array (bk_run_status eval_set). */
static int keep_eval_sets(bk_sweep_run *run, const group *v, bk_error *err)
{
    cJSON *arr = cJSON_CreateArray();
    int ok = arr && (run->eval_sets = calloc((size_t)v->eval_sets.n, sizeof *run->eval_sets));
    for (int i = 0; ok && i < v->eval_sets.n; i++) {
        ok = (run->eval_sets[i] = strdup(v->eval_sets.items[i].text)) &&
             cJSON_AddItemToArray(arr, cJSON_CreateString(v->eval_sets.items[i].text));
        run->n_eval_sets += run->eval_sets[i] != NULL;
    }
    char *json = ok ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    if (json && strlen(json) >= BK_SWEEP_EVAL_SET_JSON_MAX) { /* control characters, escaped 6 bytes each */
        cJSON_free(json);
        return bk_fail_at(err, BK_ERR_CONFIG, v->eval_sets.items[0].pos,
                          "variant '%s' eval_set: written as JSON (status.json) it is longer than %d bytes; "
                          "expected shorter strings",
                          v->name, BK_SWEEP_EVAL_SET_JSON_MAX - 1);
    }
    run->eval_set_json = json ? strdup(json) : NULL;
    cJSON_free(json);
    if (!run->eval_set_json)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
    return BK_OK;
}

/* Resolve the run of (variant, corpus, grid point, seed index); seed index -1: the base's seed. */
static int resolve_run(resolver *rs, const group *v, const group *c, const int *point, int seed_i,
                       bk_sweep_run *run, bk_error *err)
{
    sweep_priv *p = rs->p;
    int cap = p->base.n + p->common.n + (v ? v->sets.n + v->eval_sets.n : 0) + (c ? c->sets.n : 0) + p->n_grid + 1;
    const assign **as = calloc((size_t)cap, sizeof *as);
    const char **texts = calloc((size_t)cap, sizeof *texts);
    assign *extra = calloc((size_t)p->n_grid + 1, sizeof *extra); /* seed and grid assignments */
    int n = 0, n_extra = 0, rc = BK_OK;
    memset(run, 0, sizeof *run);
    if (!as || !texts || !extra) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
        goto out;
    }
    for (int i = 0; i < p->base.n; i++)
        as[n++] = &p->base.items[i];
    for (int i = 0; i < p->common.n; i++)
        as[n++] = &p->common.items[i];
    for (int i = 0; v && i < v->sets.n; i++)
        as[n++] = &v->sets.items[i];
    for (int i = 0; c && i < c->sets.n; i++)
        as[n++] = &c->sets.items[i];
    run->variant = v ? v->name : "base";
    run->corpus = c ? c->name : NULL; /* without [[corpus]]: from the data, once the experiment is parsed */
    if (seed_i >= 0) {
        char text[64];
        snprintf(text, sizeof text, "train.seed=%lld", (long long)p->seeds[seed_i]);
        extra[n_extra] = (assign){strdup(text), p->seed_pos[seed_i], (char *)"[sweep] seeds"};
        if (!extra[n_extra].text) {
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
            goto out;
        }
        as[n++] = &extra[n_extra++];
    }
    run->grid_keys = calloc((size_t)p->n_grid + 1, sizeof *run->grid_keys);
    run->grid_values = calloc((size_t)p->n_grid + 1, sizeof *run->grid_values);
    if (!run->grid_keys || !run->grid_values) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
        goto out;
    }
    sbuf suffix = {0};
    for (int g = 0; g < p->n_grid; g++) {
        const bk_toml_node *val = bk_toml_at(p->grid[g].values, (size_t)point[g]);
        extra[n_extra].text = assignment_text(p->grid[g].key, val, NOT_PATH, &rs->pc);
        extra[n_extra].pos = bk_toml_position(val);
        extra[n_extra].label = (char *)"[grid]";
        run->grid_keys[g] = strdup(p->grid[g].key);
        run->grid_values[g] = value_text(val);
        run->n_grid++;
        if (!extra[n_extra].text || !run->grid_keys[g] || !run->grid_values[g]) {
            free(suffix.s);
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
            goto out;
        }
        as[n++] = &extra[n_extra++];
        const char *last = strrchr(p->grid[g].key, '.');
        sb_printf(&suffix, "-%s%s", last ? last + 1 : p->grid[g].key, run->grid_values[g]);
    }
    for (int i = 0; i < n; i++)
        texts[i] = as[i]->text;
    run->n_common_sets = p->base.n + p->common.n;

    /* the experiment layer validates every engine key of the composed experiment */
    bk_experiment exp;
    char name[256] = "";
    if ((rc = bk_experiment_parse(p->base_text, rs->base_source, texts, (size_t)n, &exp, err))) {
        free(suffix.s);
        snprintf(name, sizeof name, "runs '%s-%s%s*'", run->variant, run->corpus ? run->corpus : "",
                 run->corpus ? "-" : "");
        map_error(err, as, n, name);
        goto out;
    }
    /* [run] out_dir written in the sweep file (set, variant, corpus, grid, inline base): refused, not
     * ignored; a base file's own out_dir is not the sweep's to use (each run writes its directory) */
    const bk_toml_node *run_table = bk_toml_get(bk_toml_root(exp.doc), "run");
    const bk_toml_node *od = run_table ? bk_toml_get(run_table, "out_dir") : NULL;
    bk_toml_pos od_pos = od ? bk_toml_position(od) : (bk_toml_pos){0};
    if (od && od_pos.source && strncmp(od_pos.source, "--set ", 6) == 0) {
        free(suffix.s);
        rc = bk_fail_at(err, BK_ERR_CONFIG, od_pos,
                        "[run] out_dir: each run writes its own directory in the sweep directory (<sweep dir>/<run "
                        "name>); give the sweep directory as [sweep] out_dir");
        bk_experiment_free(&exp); /* after the message: the position's source is the document's */
        snprintf(name, sizeof name, "runs '%s-%s%s*'", run->variant, run->corpus ? run->corpus : "",
                 run->corpus ? "-" : "");
        map_error(err, as, n, name);
        goto out;
    }
    char *sfx = sb_take(&suffix);
    if (!sfx) {
        bk_experiment_free(&exp);
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
        goto out;
    }
    sanitize(sfx);
    if (!run->corpus) { /* issue 27: named from the data, not "base" */
        char data_name[64];
        const char *paths[16];
        int n_paths = 0;
        for (int i = 0; i < exp.data.paths.n && n_paths < 16; i++)
            paths[n_paths++] = exp.data.paths.items[i];
        bk_sweep_data_name(paths, n_paths, data_name, sizeof data_name);
        if (!(run->corpus_owned = strdup(data_name))) {
            free(sfx);
            bk_experiment_free(&exp);
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
            goto out;
        }
        run->corpus = run->corpus_owned;
    }
    snprintf(name, sizeof name, "%s-%s-s%lld%s", run->variant, run->corpus, (long long)exp.train.seed, sfx);
    free(sfx);
    run->seed = exp.train.seed;
    run->train_length = exp.train.length;
    run->threads = exp.run.threads;
    run->text = document_text(bk_toml_root(exp.doc), &rs->pc);
    run->name = strdup(name);
    run->sets = calloc((size_t)n + 1, sizeof *run->sets);
    char dir[4096];
    if (!run->text || !run->name || !run->sets) {
        bk_experiment_free(&exp);
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        if (!(run->sets[i] = strdup(texts[i]))) {
            bk_experiment_free(&exp);
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
            goto out;
        }
        run->n_sets++;
    }
    if (snprintf(dir, sizeof dir, "%s/%s", rs->sw->out_dir, name) >= (int)sizeof dir - 64) {
        bk_experiment_free(&exp);
        rc = bk_fail(err, BK_ERR_INVALID, "run '%s': its directory name is too long", name);
        goto out;
    }
    if (!(run->dir = strdup(dir))) {
        bk_experiment_free(&exp);
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
        goto out;
    }

    /* the text written reads back as the same experiment */
    char source[4200];
    snprintf(source, sizeof source, "%s/" BK_SWEEP_EXPERIMENT_FILE, dir);
    bk_experiment back;
    bk_error perr;
    if (bk_experiment_parse(run->text, source, NULL, 0, &back, &perr)) {
        bk_experiment_free(&exp);
        rc = bk_fail(err, BK_ERR_INTERNAL, "run '%s': the written experiment text does not read back: %s", name,
                     perr.message);
        goto out;
    }
    bk_experiment_free(&back);

    /* the evaluation's experiment: the variant's eval_set on top, judged as `biaskit eval --set` judges it */
    int m = v ? v->eval_sets.n : 0;
    bk_experiment eval_exp;
    char who[300];
    snprintf(who, sizeof who, "run '%s'", name);
    if (m && (rc = resolve_eval_sets(rs, v, as, texts, n, &exp, who, &eval_exp, err))) {
        bk_experiment_free(&exp);
        goto out;
    }
    if (m && (rc = keep_eval_sets(run, v, err))) {
        bk_experiment_free(&eval_exp), bk_experiment_free(&exp);
        goto out;
    }

    /* the plugins check the terms as the training will, in a child process, then (with an eval_set) as
     * the evaluation will; a refusal names the sweep file's line, a crash, an exit or a hang the term
     * and its plugin */
    int check = exp.n_terms > 0 && !(rs->o && rs->o->no_plugin_check) &&
                bk_sweep_run_selected(run, rs->o ? rs->o->only : NULL, rs->o ? rs->o->n_only : 0);
    for (int phase = 0; check && phase < (m ? 2 : 1) && !run->invalid && !rc; phase++) {
        const bk_experiment *e = phase ? &eval_exp : &exp;
        const term_answer *answer = check_terms(rs, e, err);
        if (!answer)
            rc = err->code;
        else if (answer->rc != BK_OK)
            rc = refusal_text(answer, e, as, phase ? n + m : n, who, phase ? "evaluating (eval_set)" : "training",
                              &run->invalid, err);
    }
    if (m)
        bk_experiment_free(&eval_exp);
    bk_experiment_free(&exp);
out:
    for (int i = 0; extra && i < n_extra; i++)
        free(extra[i].text);
    free(extra), free(as), free(texts);
    if (rc)
        run_free(run);
    return rc;
}

/* ------------------------------------------------------------------------------------------------
 * Loading
 * ---------------------------------------------------------------------------------------------- */

/* A "set" array of "key=value" strings, as --set reads them. */
static int read_sets(assign_list *out, const bk_toml_node *v, const char *label, bk_error *err)
{
    if (bk_toml_type_of(v) != BK_TOML_ARRAY)
        return wrong(err, v, label, "an array of \"key=value\" strings for 'set'");
    for (size_t j = 0; j < bk_toml_count(v); j++) {
        const bk_toml_node *s = bk_toml_at(v, j);
        if (bk_toml_type_of(s) != BK_TOML_STRING)
            return wrong(err, s, label, "a \"key=value\" string in 'set'");
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
    if (strncmp(key, "data.", 5) != 0 || path_kind("data", key + 5) != PATH_LIST)
        return strdup(text);
    sbuf doc = {0};
    sb_puts(&doc, "v = ");
    sb_puts(&doc, eq + 1);
    bk_toml *t = NULL;
    bk_error ignored; /* a value that is not TOML: the experiment layer says so, naming the string */
    char *out = NULL;
    if (!doc.oom && bk_toml_parse_string(doc.s, "eval_set", &t, &ignored) == BK_OK)
        out = assignment_text(key, bk_toml_get(bk_toml_root(t), "v"), PATH_LIST, pc);
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
        return wrong(err, v, where, expected);
    if (bk_toml_count(v) > BK_SWEEP_MAX_EVAL_SETS)
        return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v), "%s: at most %d strings, got %zu", where,
                          BK_SWEEP_MAX_EVAL_SETS, bk_toml_count(v));
    size_t total = 0;
    for (size_t j = 0; j < bk_toml_count(v); j++) {
        const bk_toml_node *s = bk_toml_at(v, j);
        if (bk_toml_type_of(s) != BK_TOML_STRING)
            return wrong(err, s, where, expected);
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

static int read_sweep_table(sweep_priv *p, const bk_toml_node *t, const char **out_dir,
                            bk_error *err)
{
    static const char *const keys[] = {"out_dir", "seeds", "set"};
    if (bk_toml_type_of(t) != BK_TOML_TABLE)
        return wrong(err, t, "'sweep'", "a table ([sweep])");
    bk_toml_entry e;
    for (size_t i = 0; bk_toml_entry_at(t, i, &e) == 0; i++) {
        int rc = BK_OK;
        if (strcmp(e.key, "out_dir") == 0) {
            if (bk_toml_type_of(e.value) != BK_TOML_STRING || !*bk_toml_string(e.value))
                return wrong(err, e.value, "[sweep] out_dir", "a non-empty string (a directory)");
            *out_dir = bk_toml_string(e.value);
        } else if (strcmp(e.key, "seeds") == 0) {
            rc = read_ints(e.value, "[sweep] seeds", 0, 9007199254740991LL, p->seeds, p->seed_pos, 4096, &p->n_seeds,
                           err);
        } else if (strcmp(e.key, "set") == 0) {
            rc = read_sets(&p->common, e.value, "[sweep]", err);
        } else
            return unknown_key(err, e.key_pos, e.key, "[sweep]", keys, 3);
        if (rc)
            return rc;
    }
    return BK_OK;
}

static int read_eval_table(bk_sweep *sw, const bk_toml_node *t, int64_t *multiples, int *n_multiples, bk_error *err)
{
    static const char *const keys[] = {"lengths", "multiples", "sliding", "tokens"};
    if (bk_toml_type_of(t) != BK_TOML_TABLE)
        return wrong(err, t, "'eval'", "a table ([eval])");
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
        else
            return unknown_key(err, e.key_pos, e.key, "[eval]", keys, 4);
        if (rc)
            return rc;
    }
    return BK_OK;
}

/* An absolute directory with its existing part made real (symbolic links and ".." resolved there):
 * the sweep directory is named the same however the sweep file's out_dir reaches it. */
static void canonical_dir(char *dir, size_t size)
{
    char head[4096], real[PATH_MAX];
    snprintf(head, sizeof head, "%s", dir);
    size_t cut = strlen(head);
    for (;;) {
        if (realpath(head, real)) {
            char out[8192];
            snprintf(out, sizeof out, "%s%s", real, dir + cut);
            if (strlen(out) < size)
                snprintf(dir, size, "%s", out);
            return;
        }
        char *slash = strrchr(head, '/');
        if (!slash || slash == head)
            return;
        *slash = '\0';
        cut = (size_t)(slash - head);
    }
}

/* The sweep directory: one that exists must be a directory; one that does not must be creatable (its
 * nearest existing ancestor a directory). `pos`: where the sweep file gives it. */
static int check_out_dir(const char *dir, bk_toml_pos pos, bk_error *err)
{
    char head[4096];
    snprintf(head, sizeof head, "%s", dir);
    for (;;) {
        struct stat st;
        if (stat(head, &st) == 0) {
            if (S_ISDIR(st.st_mode))
                return BK_OK;
            if (strcmp(head, dir) == 0)
                return bk_fail_at(err, BK_ERR_CONFIG, pos,
                                  "[sweep] out_dir: the sweep directory '%s' is %s; expected a directory (or a path "
                                  "where one can be created)",
                                  dir, bk_file_kind(st.st_mode));
            return bk_fail_at(err, BK_ERR_CONFIG, pos,
                              "[sweep] out_dir: the sweep directory '%s' cannot be created: '%s' is %s, not a directory",
                              dir, head, bk_file_kind(st.st_mode));
        }
        if (errno != ENOENT && errno != ENOTDIR)
            return bk_fail_at(err, BK_ERR_CONFIG, pos, "[sweep] out_dir: cannot use the sweep directory '%s': '%s': %s",
                              dir, head, strerror(errno));
        char *slash = strrchr(head, '/');
        if (!slash || slash == head)
            return BK_OK;
        *slash = '\0';
    }
}

/* Two runs of one name: which parts of the sweep file made it. */
static int name_clash(const bk_sweep *sw, const sweep_priv *p, const bk_sweep_run *a, const bk_sweep_run *b,
                      bk_error *err)
{
    if (strcmp(a->variant, b->variant) != 0 || strcmp(a->corpus, b->corpus) != 0) {
        bk_toml_pos pos = {sw->path, 0, 0};
        for (int i = 0; i < p->n_variants; i++)
            if (p->variants[i].name == b->variant && strcmp(a->variant, b->variant) != 0)
                pos = p->variants[i].name_pos;
        for (int i = 0; i < p->n_corpora && !pos.line; i++)
            if (p->corpora[i].name == b->corpus)
                pos = p->corpora[i].name_pos;
        return bk_fail_at(err, BK_ERR_CONFIG, pos,
                          "variant '%s' with corpus '%s' and variant '%s' with corpus '%s' make the same run name "
                          "'%s' (<variant>-<corpus>-s<seed>...): rename the variant or the corpus so that their "
                          "names joined with '-' differ",
                          a->variant, a->corpus, b->variant, b->corpus, a->name);
    }
    if (a->seed != b->seed || a->n_grid == 0)
        return bk_fail_at(err, BK_ERR_CONFIG, (bk_toml_pos){sw->path, 0, 0},
                          "runs of variant '%s' and corpus '%s' are both named '%s' (seeds %lld and %lld): every run "
                          "needs its own directory",
                          a->variant, a->corpus, a->name, (long long)a->seed, (long long)b->seed);
    char pa[512] = "", pb[512] = "";
    size_t ua = 0, ub = 0;
    for (int g = 0; g < a->n_grid; g++) {
        if (ua < sizeof pa)
            ua += (size_t)snprintf(pa + ua, sizeof pa - ua, "%s%s=%s", g ? ", " : "", a->grid_keys[g], a->grid_values[g]);
        if (ub < sizeof pb)
            ub += (size_t)snprintf(pb + ub, sizeof pb - ub, "%s%s=%s", g ? ", " : "", b->grid_keys[g], b->grid_values[g]);
    }
    return bk_fail_at(err, BK_ERR_CONFIG, p->n_grid ? p->grid[0].pos : (bk_toml_pos){sw->path, 0, 0},
                      "[grid]: the grid points (%s) and (%s) both name the run '%s' (a run's name holds the last part of "
                      "each grid key and its value, with characters outside A-Z a-z 0-9 _ - . + as '_'): every run "
                      "needs its own directory",
                      pa, pb, a->name);
}

static int load(const char *path, const bk_sweep_load_options *o, bk_sweep *sw, sweep_priv *p, bk_error *err)
{
    char buf[4096];
    int rc;
    if ((rc = bk_path_dir_of(path, buf, sizeof buf, err)) || !(sw->dir = strdup(buf)))
        return rc ? rc : bk_fail(err, BK_ERR_NOMEM, "out of memory");
    const char *slash = strrchr(path, '/');
    const char *file = slash ? slash + 1 : path;
    if (snprintf(buf, sizeof buf, "%s/%s", sw->dir, file) >= (int)sizeof buf || !(sw->path = strdup(buf)))
        return bk_fail(err, BK_ERR_INVALID, "sweep file path too long: '%s'", path);
    if ((rc = bk_toml_parse_file(path, &p->doc, err)))
        return rc;
    const bk_toml_node *root = bk_toml_root(p->doc);
    path_ctx pc = {sw->dir, NULL, NULL};

    static const char *const keys[] = {"base", "sweep", "eval", "grid", "variant", "corpus"};
    const bk_toml_node *base = NULL, *variants = NULL, *corpora = NULL;
    const char *out_dir = NULL;
    bk_toml_pos out_dir_pos = {sw->path, 0, 0};
    int64_t multiples[BK_SWEEP_MAX_LENGTHS] = {1, 2, 4, 8};
    int n_multiples = 4;
    sw->tokens = 65536;
    bk_toml_entry e;
    for (size_t i = 0; bk_toml_entry_at(root, i, &e) == 0; i++) {
        rc = BK_OK;
        if (strcmp(e.key, "base") == 0)
            base = e.value;
        else if (strcmp(e.key, "sweep") == 0)
            rc = read_sweep_table(p, e.value, &out_dir, err);
        else if (strcmp(e.key, "eval") == 0)
            rc = read_eval_table(sw, e.value, multiples, &n_multiples, err);
        else if (strcmp(e.key, "grid") == 0) {
            if (bk_toml_type_of(e.value) != BK_TOML_TABLE)
                return wrong(err, e.value, "'grid'", "a table ([grid])");
            rc = read_grid(p, e.value, NULL, 0, err);
        } else if (strcmp(e.key, "variant") == 0)
            variants = e.value;
        else if (strcmp(e.key, "corpus") == 0)
            corpora = e.value;
        else
            return unknown_key(err, e.key_pos, e.key, "the sweep file", keys, 6);
        if (rc)
            return rc;
    }

    /* the base: a file, or an inline experiment */
    if (!base)
        return bk_fail_at(err, BK_ERR_CONFIG, (bk_toml_pos){sw->path, 0, 0},
                          "no base experiment: give base = \"experiment.toml\" (a path from this file's directory) "
                          "before the first table, or an inline [base] table with [base.model], [base.train], ...");
    if (bk_toml_type_of(base) == BK_TOML_STRING) {
        if (!*bk_toml_string(base))
            return wrong(err, base, "base", "a path to an experiment file");
        if ((rc = bk_path_resolve(sw->dir, bk_toml_string(base), buf, sizeof buf, err)) || !(sw->base = strdup(buf)))
            return rc ? rc : bk_fail(err, BK_ERR_NOMEM, "out of memory");
        size_t len;
        if ((rc = bk_toml_read_file(sw->base, &p->base_text, &len, err)))
            return bk_fail_at(err, rc, bk_toml_position(base), "base: %s", err->message);
        if ((rc = bk_path_dir_of(sw->base, buf, sizeof buf, err)) || !(p->base_dir = strdup(buf)))
            return rc ? rc : bk_fail(err, BK_ERR_NOMEM, "out of memory");
    } else if (bk_toml_type_of(base) == BK_TOML_TABLE) {
        if (!(p->base_text = strdup("")))
            return bk_fail(err, BK_ERR_NOMEM, "out of memory");
        if ((rc = flatten(&p->base, base, NULL, NULL, "[base]", &pc, 0, err)))
            return rc;
    } else
        return wrong(err, base, "base", "a path to an experiment file, or a table (an inline experiment)");

    if (variants && (rc = read_groups(variants, "variant", 1, &p->variants, &p->n_variants, &pc, err)))
        return rc;
    if (corpora && (rc = read_groups(corpora, "corpus", 0, &p->corpora, &p->n_corpora, &pc, err)))
        return rc;
    if (variants && p->n_variants == 0)
        return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(variants), "'variant': expected at least one [[variant]]");
    if (corpora && p->n_corpora == 0)
        return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(corpora), "'corpus': expected at least one [[corpus]]");

    /* the sweep directory */
    if (out_dir) {
        bk_toml_entry oe;
        const bk_toml_node *st = bk_toml_get(root, "sweep");
        for (size_t i = 0; st && bk_toml_entry_at(st, i, &oe) == 0; i++)
            if (strcmp(oe.key, "out_dir") == 0)
                out_dir_pos = bk_toml_position(oe.value);
        rc = bk_path_resolve(sw->dir, out_dir, buf, sizeof buf, err);
    }
    else {
        char stem[512];
        snprintf(stem, sizeof stem, "%s", file);
        char *dot = strrchr(stem, '.');
        if (dot && strcmp(dot, ".toml") == 0)
            *dot = '\0';
        char cwd[4096], rel[1100];
        snprintf(rel, sizeof rel, "runs/%s", stem);
        if (!getcwd(cwd, sizeof cwd))
            return bk_fail(err, BK_ERR_IO, "cannot read the working directory: %s", strerror(errno));
        rc = bk_path_resolve(cwd, rel, buf, sizeof buf, err);
    }
    if (rc)
        return rc;
    canonical_dir(buf, sizeof buf);
    if (!(sw->out_dir = strdup(buf)))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    if ((rc = check_out_dir(sw->out_dir, out_dir_pos, err)))
        return rc;

    /* the base alone first: its own errors name its own lines */
    resolver rs = {sw, p, {sw->dir, sw->base, p->base_dir}, sw->base ? sw->base : sw->path, o, {0}, 0, NULL, 0, NULL};
    bk_experiment exp;
    if (sw->base) {
        if ((rc = bk_experiment_parse(p->base_text, rs.base_source, NULL, 0, &exp, err)))
            return bk_error_prefix(err, "base experiment: ");
        bk_experiment_free(&exp);
    }

    /* expansion: variant x corpus x grid point x seed */
    int nv = p->n_variants ? p->n_variants : 1, nc = p->n_corpora ? p->n_corpora : 1;
    int ns = p->n_seeds ? p->n_seeds : 1;
    long long total = (long long)nv * nc * ns;
    for (int g = 0; g < p->n_grid; g++)
        total *= (long long)bk_toml_count(p->grid[g].values);
    int max_runs = o && o->max_runs > 0 ? o->max_runs : BK_SWEEP_MAX_RUNS;
    if (total > max_runs)
        return bk_fail_at(err, BK_ERR_CONFIG, (bk_toml_pos){sw->path, 0, 0},
                          "the sweep expands to %lld runs; at most %d", total, max_runs);
    sw->runs = calloc((size_t)total, sizeof *sw->runs);
    int *point = calloc((size_t)p->n_grid + 1, sizeof *point);
    if (!sw->runs || !point) {
        free(point);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory expanding the sweep");
    }
    rc = BK_OK;
    for (int vi = 0; vi < nv && !rc; vi++)
        for (int ci = 0; ci < nc && !rc; ci++) {
            memset(point, 0, (size_t)(p->n_grid + 1) * sizeof *point);
            for (;;) {
                for (int si = 0; si < ns && !rc; si++) {
                    bk_sweep_run *run = &sw->runs[sw->n_runs];
                    rc = resolve_run(&rs, p->n_variants ? &p->variants[vi] : NULL,
                                     p->n_corpora ? &p->corpora[ci] : NULL, point, p->n_seeds ? si : -1, run, err);
                    if (!rc)
                        sw->n_runs++;
                }
                int g = p->n_grid - 1; /* the next grid point, the last key fastest */
                while (g >= 0 && ++point[g] == (int)bk_toml_count(p->grid[g].values))
                    point[g--] = 0;
                if (g < 0 || rc)
                    break;
            }
        }
    free(point);
    resolver_free(&rs);
    if (rc)
        return rc;

    for (int i = 0; i < sw->n_runs; i++)
        for (int k = 0; k < i; k++)
            if (strcmp(sw->runs[i].name, sw->runs[k].name) == 0)
                return name_clash(sw, p, &sw->runs[k], &sw->runs[i], err);
    sw->train_length = sw->runs[0].train_length;
    for (int i = 1; i < sw->n_runs; i++)
        if (sw->runs[i].train_length != sw->train_length)
            return bk_fail_at(err, BK_ERR_CONFIG, (bk_toml_pos){sw->path, 0, 0},
                              "run '%s' trains at length %lld but run '%s' at %lld: the runs of a sweep share one "
                              "[train] length (compared at the same evaluation lengths); make a sweep per length",
                              sw->runs[0].name, (long long)sw->train_length, sw->runs[i].name,
                              (long long)sw->runs[i].train_length);
    if (!sw->n_lengths) {
        for (int i = 0; i < n_multiples; i++) {
            int64_t L = multiples[i] * sw->train_length;
            if (L > (1 << 24))
                return bk_fail_at(err, BK_ERR_CONFIG, (bk_toml_pos){sw->path, 0, 0},
                                  "[eval] multiples: %lld x the training length %lld is past 16777216 tokens",
                                  (long long)multiples[i], (long long)sw->train_length);
            sw->lengths[sw->n_lengths++] = (int32_t)L;
        }
    }
    return BK_OK;
}

int bk_sweep_load_ex(const char *path, const bk_sweep_load_options *o, bk_sweep *out, bk_error *err)
{
    memset(out, 0, sizeof *out);
    sweep_priv *p = calloc(1, sizeof *p);
    if (!p)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory loading '%s'", path);
    out->priv = p;
    int rc = load(path, o, out, p, err);
    if (rc)
        bk_sweep_free(out);
    return rc;
}

int bk_sweep_load(const char *path, bk_sweep *out, bk_error *err)
{
    return bk_sweep_load_ex(path, NULL, out, err);
}

void bk_sweep_free(bk_sweep *sw)
{
    if (!sw)
        return;
    for (int i = 0; i < sw->n_runs; i++)
        run_free(&sw->runs[i]);
    free(sw->runs);
    free(sw->path), free(sw->dir), free(sw->out_dir), free(sw->base);
    priv_free(sw->priv);
    memset(sw, 0, sizeof *sw);
}

int bk_sweep_run_selected(const bk_sweep_run *run, const char *const *patterns, int n)
{
    for (int i = 0; i < n; i++)
        if (fnmatch(patterns[i], run->name, 0) == 0)
            return 1;
    return n <= 0;
}

/* ------------------------------------------------------------------------------------------------
 * Files of the sweep directory
 * ---------------------------------------------------------------------------------------------- */

static int mkdir_p(const char *dir, bk_error *err)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return bk_fail(err, BK_ERR_INVALID, "directory name too long: '%s'", dir);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return bk_fail(err, BK_ERR_IO, "cannot create directory '%s': %s", buf, strerror(errno));
            *p = c;
            if (!c)
                break;
        }
    }
    return BK_OK;
}

/* Write `text` to `path` through a temporary file and a rename: a reader sees the old or the new file. */
static int write_atomic(const char *path, const char *text, bk_error *err)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    /* a new file of ours: whatever a dead sweep of this pid (or anyone) left under the name goes first */
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", tmp, strerror(e));
    }
    int bad = fputs(text, f) < 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", path, strerror(e));
    }
    return BK_OK;
}

/* A state file of the sweep directory: *text NULL when there is none; else a regular file of at
 * most BK_TEXT_FILE_MAX bytes (a FIFO or a device there is refused, never read). */
static int read_state_file(const char *path, const char *what, char **text, bk_error *err)
{
    *text = NULL;
    struct stat st;
    if (lstat(path, &st) != 0 && errno == ENOENT)
        return BK_OK;
    size_t len;
    return bk_file_read_all(path, what, BK_TEXT_FILE_MAX, text, &len, err);
}

int bk_sweep_lock(const bk_sweep *sw, int *fd, bk_error *err)
{
    *fd = -1;
    int rc = mkdir_p(sw->out_dir, err);
    if (rc)
        return rc;
    char lock[4200];
    snprintf(lock, sizeof lock, "%s/" BK_SWEEP_LOCK_FILE, sw->out_dir);
    char holder[32];
    rc = bk_file_lock(lock, "the lock file of the sweep directory", fd, holder, sizeof holder, err);
    if (rc == BK_OK && *fd < 0)
        rc = bk_fail(err, BK_ERR_IO, "the sweep directory '%s' is in use by another sweep (pid %s, lock %s); wait "
                     "for it to end (its runs would train twice), or give this sweep another [sweep] out_dir",
                     sw->out_dir, holder, lock);
    return rc;
}

void bk_sweep_unlock(int *fd)
{
    if (*fd >= 0)
        close(*fd); /* releases the flock; the file stays (removing it would race the next sweep) */
    *fd = -1;
}

int bk_sweep_write_index(const bk_sweep *sw, bk_error *err)
{
    int rc = mkdir_p(sw->out_dir, err);
    if (rc)
        return rc;
    cJSON *root = cJSON_CreateObject(), *lengths = NULL, *runs = NULL;
    int ok = root && cJSON_AddStringToObject(root, "sweep", sw->path) && (lengths = cJSON_AddArrayToObject(root, "lengths"));
    for (int i = 0; ok && i < sw->n_lengths; i++)
        ok = cJSON_AddItemToArray(lengths, cJSON_CreateNumber(sw->lengths[i]));
    ok = ok && cJSON_AddNumberToObject(root, "sliding", (double)sw->sliding) &&
         cJSON_AddNumberToObject(root, "train_length", (double)sw->train_length) &&
         (runs = cJSON_AddArrayToObject(root, "runs"));
    for (int i = 0; ok && i < sw->n_runs; i++) {
        const bk_sweep_run *r = &sw->runs[i];
        cJSON *o = cJSON_CreateObject(), *grid = NULL, *sets = NULL;
        ok = o && cJSON_AddItemToArray(runs, o) && cJSON_AddStringToObject(o, "name", r->name) &&
             cJSON_AddStringToObject(o, "dir", r->name) && cJSON_AddStringToObject(o, "variant", r->variant) &&
             cJSON_AddStringToObject(o, "corpus", r->corpus) && cJSON_AddNumberToObject(o, "seed", (double)r->seed) &&
             (grid = cJSON_AddObjectToObject(o, "grid"));
        for (int g = 0; ok && g < r->n_grid; g++)
            ok = cJSON_AddStringToObject(grid, r->grid_keys[g], r->grid_values[g]) != NULL;
        ok = ok && (sets = cJSON_AddArrayToObject(o, "sets"));
        for (int s = 0; ok && s < r->n_sets; s++)
            ok = cJSON_AddItemToArray(sets, cJSON_CreateString(r->sets[s]));
        cJSON *eval_set = NULL; /* only when given: the index of a sweep without one stays as it was */
        if (ok && r->n_eval_sets)
            ok = (eval_set = cJSON_AddArrayToObject(o, "eval_set")) != NULL;
        for (int s = 0; ok && s < r->n_eval_sets; s++)
            ok = cJSON_AddItemToArray(eval_set, cJSON_CreateString(r->eval_sets[s]));
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory writing " BK_SWEEP_INDEX_FILE);
    char path[4200];
    snprintf(path, sizeof path, "%s/" BK_SWEEP_INDEX_FILE, sw->out_dir);
    size_t n = strlen(text);
    char *full = malloc(n + 2);
    if (full) {
        memcpy(full, text, n);
        memcpy(full + n, "\n", 2);
    }
    cJSON_free(text);
    if (!full)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory writing " BK_SWEEP_INDEX_FILE);
    rc = write_atomic(path, full, err);
    free(full);
    return rc;
}

int bk_sweep_eval_set_current(const bk_sweep_run *run, const bk_run_status *st)
{
    return strcmp(run->eval_set_json ? run->eval_set_json : "", st->eval_set) == 0;
}

int bk_sweep_has_checkpoint(const bk_sweep_run *run)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/" BK_RUN_CHECKPOINT_FILE, run->dir);
    return stat(path, &st) == 0;
}

int bk_sweep_trained_as(const bk_sweep_run *from, const char *text)
{
    if (!bk_sweep_has_checkpoint(from))
        return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/" BK_SWEEP_EXPERIMENT_FILE, from->dir);
    char *old = NULL;
    bk_error ignored;
    int same = read_state_file(path, "run experiment file", &old, &ignored) == BK_OK && old && strcmp(old, text) == 0;
    free(old);
    return same;
}

typedef struct text_key {
    uint64_t hash;
    int index;
} text_key;

static int text_key_order(const void *a, const void *b)
{
    const text_key *x = a, *y = b;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

int bk_sweep_first_of_experiment(const bk_sweep *sw, int *first, bk_error *err)
{
    text_key *keys = malloc((size_t)(sw->n_runs ? sw->n_runs : 1) * sizeof *keys);
    if (!keys)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    for (int i = 0; i < sw->n_runs; i++) {
        keys[i] = (text_key){bk_xxh64(sw->runs[i].text, strlen(sw->runs[i].text), 0), i};
        first[i] = i;
    }
    qsort(keys, (size_t)sw->n_runs, sizeof *keys, text_key_order); /* by hash, then index */
    for (int a = 0; a < sw->n_runs;) {
        int b = a;
        while (b < sw->n_runs && keys[b].hash == keys[a].hash)
            b++;
        for (int i = a + 1; i < b; i++) /* the earliest of the same text (a hash may be shared by others) */
            for (int k = a; k < i; k++)
                if (first[keys[k].index] == keys[k].index &&
                    strcmp(sw->runs[keys[k].index].text, sw->runs[keys[i].index].text) == 0) {
                    first[keys[i].index] = keys[k].index;
                    break;
                }
        a = b;
    }
    free(keys);
    return BK_OK;
}

/* A copy of the regular file `from` at `to`, written into a temporary file renamed over `to`. */
static int copy_file(const char *from, const char *to, bk_error *err)
{
    FILE *in;
    int rc = bk_file_open_regular(from, "file", 0, &in, NULL, err);
    if (rc)
        return rc;
    char tmp[4300];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", to, (long)getpid()) >= (int)sizeof tmp) {
        fclose(in);
        return bk_fail(err, BK_ERR_INVALID, "path too long: '%s'", to);
    }
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) {
        int e = errno;
        fclose(in);
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", tmp, strerror(e));
    }
    char buf[1 << 16];
    size_t n;
    int bad = 0;
    while (!bad && (n = fread(buf, 1, sizeof buf, in)) > 0)
        bad = bk_write_all(fd, buf, n) != 0;
    int e = errno;
    bad |= ferror(in) != 0;
    fclose(in);
    bad |= fsync(fd) != 0 || close(fd) != 0;
    if (bad || rename(tmp, to) != 0) {
        e = bad ? e : errno;
        unlink(tmp);
        return bk_fail(err, BK_ERR_IO, "cannot copy '%s' to '%s': %s", from, to, strerror(e));
    }
    return BK_OK;
}

int bk_sweep_share_training(const bk_sweep_run *from, const bk_sweep_run *to, bk_error *err)
{
    static const char *const files[] = {BK_RUN_CHECKPOINT_FILE, BK_RUN_METRICS_FILE}; /* the checkpoint first */
    for (int i = 0; i < 2; i++) {
        char a[4200], b[4200];
        struct stat st;
        snprintf(a, sizeof a, "%s/%s", from->dir, files[i]);
        snprintf(b, sizeof b, "%s/%s", to->dir, files[i]);
        if (i > 0 && lstat(a, &st) != 0 && errno == ENOENT) {
            unlink(b); /* no metrics: none of another training either */
            continue;
        }
        int rc = copy_file(a, b, err);
        if (rc) {
            char c[4200];
            snprintf(c, sizeof c, "%s/" BK_RUN_CHECKPOINT_FILE, to->dir);
            unlink(c);
            return bk_error_prefix(err, "run '%s': sharing the training of run '%s': ", to->name, from->name);
        }
    }
    char c[4200];
    snprintf(c, sizeof c, "%s/" BK_RUN_CHECKPOINT_FILE, to->dir);
    bk_file_sync_dir(c); /* the renames, durable */
    return BK_OK;
}

int bk_sweep_prepare_run(const bk_sweep_run *run, int has_checkpoint, bk_error *err)
{
    int rc = mkdir_p(run->dir, err);
    if (rc)
        return rc;
    char path[4200];
    snprintf(path, sizeof path, "%s/" BK_SWEEP_EXPERIMENT_FILE, run->dir);
    char *old;
    if ((rc = read_state_file(path, "run experiment file", &old, err)))
        return bk_error_prefix(err, "run '%s': ", run->name);
    int same = old && strcmp(old, run->text) == 0;
    free(old);
    if (same)
        return BK_OK;
    if (old && has_checkpoint)
        return bk_fail(err, BK_ERR_CONFIG,
                       "run '%s': the sweep file now resolves to another experiment than '%s', which its checkpoint "
                       "was trained from; delete '%s' to train the new one (or restore the sweep file to resume)",
                       run->name, path, run->dir);
    return write_atomic(path, run->text, err);
}

const char *bk_run_state_name(bk_run_state state)
{
    static const char *const names[] = {"pending", "training", "evaluating", "done", "failed"}; /* BK_RUN_STATE_CHOICES */
    return (int)state >= 0 && (int)state < 5 ? names[state] : "?";
}

int bk_sweep_read_status(const bk_sweep_run *run, bk_run_status *st, bk_error *err)
{
    memset(st, 0, sizeof *st);
    st->state = BK_RUN_PENDING;
    char path[4200];
    snprintf(path, sizeof path, "%s/" BK_SWEEP_STATUS_FILE, run->dir);
    char *text;
    int rc = read_state_file(path, "status file", &text, err);
    if (rc || !text)
        return rc;
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *state = cJSON_GetObjectItemCaseSensitive(j, "state");
    int index = cJSON_IsString(state) ? bk_choice_index(BK_RUN_STATE_CHOICES, state->valuestring) : -1;
    if (!cJSON_IsObject(j) || index < 0) {
        cJSON_Delete(j);
        return bk_fail(err, BK_ERR_PARSE, "%s: expected a JSON object with \"state\": one of %s (delete it to start the "
                                          "run again)",
                       path, BK_RUN_STATE_CHOICES);
    }
    st->state = (bk_run_state)index;
    const cJSON *v;
    if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(j, "error")))
        bk_copy_text(st->error, sizeof st->error, v->valuestring);
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(j, "train_seconds")))
        st->train_seconds = v->valuedouble;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(j, "eval_seconds")))
        st->eval_seconds = v->valuedouble;
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "eval_set"))) { /* as written: an array of strings */
        char *text = cJSON_IsArray(v) ? cJSON_PrintUnformatted(v) : NULL;
        /* anything else, or too long, is recorded as not matching any eval_set: evaluated again */
        bk_copy_text(st->eval_set, sizeof st->eval_set, text ? text : "?");
        if (text && strlen(text) >= sizeof st->eval_set)
            bk_copy_text(st->eval_set, sizeof st->eval_set, "?");
        cJSON_free(text);
    }
    cJSON_Delete(j);
    return BK_OK;
}

int bk_sweep_write_status(const bk_sweep_run *run, const bk_run_status *st, bk_error *err)
{
    cJSON *j = cJSON_CreateObject();
    int ok = j && cJSON_AddStringToObject(j, "state", bk_run_state_name(st->state)) &&
             cJSON_AddStringToObject(j, "error", st->error) &&
             cJSON_AddNumberToObject(j, "train_seconds", round(st->train_seconds * 1000.0) / 1000.0) &&
             cJSON_AddNumberToObject(j, "eval_seconds", round(st->eval_seconds * 1000.0) / 1000.0);
    if (ok && st->eval_set[0]) { /* only when given: the status of a run without one stays as it was */
        cJSON *set = cJSON_Parse(st->eval_set);
        ok = cJSON_IsArray(set) && cJSON_AddItemToObject(j, "eval_set", set);
        if (!ok)
            cJSON_Delete(set);
    }
    char *text = ok ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!text)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory writing " BK_SWEEP_STATUS_FILE);
    sbuf b = {0};
    sb_puts(&b, text);
    sb_puts(&b, "\n");
    cJSON_free(text);
    char *full = sb_take(&b);
    if (!full)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory writing " BK_SWEEP_STATUS_FILE);
    char path[4200];
    snprintf(path, sizeof path, "%s/" BK_SWEEP_STATUS_FILE, run->dir);
    int rc = write_atomic(path, full, err);
    free(full);
    return rc;
}

const char bk_sweep_format_help[] =
    "The sweep file (TOML; paths are read from its directory):\n\n"
    "  base = \"exp.toml\"          the base experiment (before any table); or an inline [base] table\n"
    "                             with [base.model], [base.train], [[base.term]], ...\n"
    "  [sweep]\n"
    "  out_dir = \"runs/x\"         the sweep directory (default: runs/<sweep file name> in the working\n"
    "                             directory)\n"
    "  seeds = [1, 2, 3]          one run per seed ([train] seed); default: the base's seed\n"
    "  set = [\"train.steps=20\"]   experiment keys given to every run (\"key=value\" as --set reads them)\n"
    "  [eval]\n"
    "  lengths = [128, 256]       evaluation lengths in tokens; or\n"
    "  multiples = [1, 2, 4, 8]   ... in multiples of the training length (the default)\n"
    "  sliding = 64               also the sliding-window protocol with this stride (default 0: off)\n"
    "  tokens = 65536             evaluation tokens per length (0 = all)\n"
    "  [grid]\n"
    "  \"train.lr\" = [1e-3, 3e-3]  every combination of the values of every key\n"
    "  [[variant]]                a positional scheme: its name, and what it changes in the base:\n"
    "  name = \"alibi\"\n"
    "  term = [{plugin = \"alibi\"}] its [[term]] list (or [[variant.term]] tables; [] = no term,\n"
    "                             NoPE); without 'term' the base's terms stay\n"
    "  set = [\"attention.mixing=kernel\"]   any experiment keys, as --set reads them\n"
    "  attention.learn_weights = true     ... or as TOML keys of experiment sections\n"
    "  eval_set = [\"term.0.scaling=\\\"yarn\\\"\", \"term.0.factor=4\"]   keys given to the evaluation\n"
    "                             only, as `biaskit eval --set` reads them: the run trains as it would\n"
    "                             without them (the same checkpoint); [data] and [run] keys and a\n"
    "                             plugin's own options (those eval allows)\n"
    "  [[corpus]]                 a data set: name, and data settings (as for a variant)\n"
    "  name = \"headers\"\n"
    "  data.paths = [\"/usr/include\"]\n"
    "  data.extensions = [\".h\"]\n\n"
    "Each run is base + [sweep] set + variant + corpus + seed + grid point (in that order: a later\n"
    "one wins), validated as `biaskit config` would, and named\n"
    "<variant>-<corpus>-s<seed>[-<key><value>...] (no [[variant]]: the variant 'base'; no [[corpus]]:\n"
    "the corpus is named from the run's [data] paths, e.g. 'include' for /usr/include, 'wiki' for\n"
    "wiki.txt, joined by '+' for several).\n";
