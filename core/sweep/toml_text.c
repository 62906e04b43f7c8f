/* The sweep file, TOML text (sweep_internal.h): a growable string, and experiment TOML written from the
 * nodes of a parsed document, a value inline or a whole document, with the paths in it made absolute
 * from where they were written. */
#define _GNU_SOURCE /* strdup */
#include "sweep/sweep_internal.h"

#include "util/path.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sw_sb_add(sbuf *b, const char *text, size_t n)
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

void sw_sb_puts(sbuf *b, const char *text)
{
    sw_sb_add(b, text, strlen(text));
}

__attribute__((format(printf, 2, 3))) void sw_sb_printf(sbuf *b, const char *fmt, ...)
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
        sw_sb_add(b, small, (size_t)n);
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
    sw_sb_add(b, big, (size_t)n);
    free(big);
}

/* The buffer's text, handed to the caller (never NULL unless out of memory). */
char *sw_sb_take(sbuf *b)
{
    if (b->oom) {
        free(b->s);
        return NULL;
    }
    if (!b->s)
        return strdup("");
    return b->s;
}

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
    sw_sb_puts(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"': sw_sb_puts(b, "\\\""); break;
        case '\\': sw_sb_puts(b, "\\\\"); break;
        case '\n': sw_sb_puts(b, "\\n"); break;
        case '\t': sw_sb_puts(b, "\\t"); break;
        case '\r': sw_sb_puts(b, "\\r"); break;
        case '\b': sw_sb_puts(b, "\\b"); break;
        case '\f': sw_sb_puts(b, "\\f"); break;
        default:
            if (*c < 0x20 || *c == 0x7f)
                sw_sb_printf(b, "\\u%04x", *c);
            else
                sw_sb_add(b, (const char *)c, 1);
        }
    }
    sw_sb_puts(b, "\"");
}

static void put_key(sbuf *b, const char *key)
{
    if (is_bare_key(key))
        sw_sb_puts(b, key);
    else
        put_string(b, key);
}

static void put_float(sbuf *b, double v)
{
    if (isnan(v)) {
        sw_sb_puts(b, "nan");
        return;
    }
    if (isinf(v)) {
        sw_sb_puts(b, v < 0 ? "-inf" : "inf");
        return;
    }
    char text[40];
    for (int digits = 6; digits <= 17; digits++) { /* the shortest text that reads back as the same double */
        snprintf(text, sizeof text, "%.*g", digits, v);
        if (strtod(text, NULL) == v)
            break;
    }
    sw_sb_printf(b, "%s%s", text, strpbrk(text, ".en") ? "" : ".0");
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

int sw_path_kind(const char *section, const char *key)
{
    if (!section)
        return NOT_PATH;
    if (strcmp(section, "data") == 0 && (strcmp(key, "paths") == 0 || strcmp(key, "val_paths") == 0))
        return PATH_LIST;
    if (strcmp(section, "term") == 0 && strcmp(key, "plugin") == 0)
        return PLUGIN_PATH;
    return NOT_PATH;
}

static void put_inline_table(sbuf *b, const bk_toml_node *table, const char *section, const path_ctx *pc)
{
    bk_toml_entry e;
    sw_sb_puts(b, "{");
    for (size_t i = 0; bk_toml_entry_at(table, i, &e) == 0; i++) {
        sw_sb_puts(b, i ? ", " : "");
        put_key(b, e.key);
        sw_sb_puts(b, " = ");
        sw_put_value(b, e.value, sw_path_kind(section, e.key), pc);
    }
    sw_sb_puts(b, "}");
}

void sw_put_value(sbuf *b, const bk_toml_node *node, int kind, const path_ctx *pc)
{
    switch (bk_toml_type_of(node)) {
    case BK_TOML_STRING:
        if (kind == PATH_LIST || (kind == PLUGIN_PATH && plugin_is_path(bk_toml_string(node))))
            put_path(b, node, pc);
        else
            put_string(b, bk_toml_string(node));
        break;
    case BK_TOML_INT: sw_sb_printf(b, "%lld", (long long)bk_toml_int(node)); break;
    case BK_TOML_FLOAT: put_float(b, bk_toml_float(node)); break;
    case BK_TOML_BOOL: sw_sb_puts(b, bk_toml_bool(node) ? "true" : "false"); break;
    case BK_TOML_DATE:
    case BK_TOML_TIME:
    case BK_TOML_DATETIME: sw_sb_puts(b, bk_toml_string(node)); break;
    case BK_TOML_ARRAY:
        sw_sb_puts(b, "[");
        for (size_t i = 0; i < bk_toml_count(node); i++) {
            sw_sb_puts(b, i ? ", " : "");
            const bk_toml_node *el = bk_toml_at(node, i);
            if (bk_toml_type_of(el) == BK_TOML_TABLE)
                put_inline_table(b, el, kind == PLUGIN_PATH ? "term" : NULL, pc);
            else
                sw_put_value(b, el, kind, pc);
        }
        sw_sb_puts(b, "]");
        break;
    case BK_TOML_TABLE: put_inline_table(b, node, NULL, pc); break;
    case BK_TOML_NONE: sw_sb_puts(b, "\"\""); break;
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
                sw_sb_puts(&name, prefix);
                sw_sb_puts(&name, ".");
            }
            if (is_bare_key(e.key))
                sw_sb_puts(&name, e.key);
            else {
                sbuf q = {0};
                put_string(&q, e.key);
                sw_sb_puts(&name, q.s ? q.s : "\"\"");
                free(q.s);
            }
            if (name.oom) {
                b->oom = 1;
                free(name.s);
                return;
            }
            const char *sec = section ? section : e.key;
            if (sub) {
                sw_sb_printf(b, "\n[%s]\n", name.s);
                put_table_body(b, e.value, name.s, sec, !prefix && strcmp(e.key, "run") == 0, pc);
            } else
                for (size_t k = 0; k < bk_toml_count(e.value); k++) {
                    sw_sb_printf(b, "\n[[%s]]\n", name.s);
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
        sw_sb_puts(b, " = ");
        sw_put_value(b, e.value, prefix ? sw_path_kind(section, e.key) : NOT_PATH, pc);
        sw_sb_puts(b, "\n");
    }
    if (force_out_dir) /* a run writes its own directory: the one experiment.toml lies in */
        sw_sb_puts(b, "out_dir = \".\"\n");
    put_subtables(b, table, prefix, section, pc);
}

/* The whole document as TOML text; [run] out_dir becomes "." (the file's own directory). */
char *sw_document_text(const bk_toml_node *root, const path_ctx *pc)
{
    sbuf b = {0};
    put_table_body(&b, root, NULL, NULL, 0, pc);
    if (!bk_toml_get(root, "run"))
        sw_sb_puts(&b, "\n[run]\nout_dir = \".\"\n");
    return sw_sb_take(&b);
}
