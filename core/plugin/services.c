#include "plugin/services.h"

#include "config/experiment.h"
#include "plugin/host.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int log_level = BIASKIT_LOG_INFO;

void bk_set_log_level(int level)
{
    log_level = level;
}

static const biaskit_option *find_option(const biaskit_plugin *d, const char *key)
{
    for (uint32_t i = 0; i < d->n_options; i++)
        if (strcmp(d->options[i].name, key) == 0)
            return &d->options[i];
    return NULL;
}

static const char *expected_text(biaskit_option_type t)
{
    switch (t) {
    case BIASKIT_OPT_BOOL: return "a boolean (true or false)";
    case BIASKIT_OPT_INT: return "an integer";
    case BIASKIT_OPT_DOUBLE: return "a number";
    case BIASKIT_OPT_STRING: return "a string";
    case BIASKIT_OPT_DOUBLE_ARRAY: return "an array of numbers";
    case BIASKIT_OPT_STRING_ARRAY: return "an array of strings";
    }
    return "a value";
}

static int scalar_matches(biaskit_option_type t, bk_toml_type v)
{
    switch (t) {
    case BIASKIT_OPT_BOOL: return v == BK_TOML_BOOL;
    case BIASKIT_OPT_INT: return v == BK_TOML_INT;
    case BIASKIT_OPT_DOUBLE: return v == BK_TOML_INT || v == BK_TOML_FLOAT;
    case BIASKIT_OPT_STRING: return v == BK_TOML_STRING;
    case BIASKIT_OPT_DOUBLE_ARRAY: return v == BK_TOML_INT || v == BK_TOML_FLOAT; /* per element */
    case BIASKIT_OPT_STRING_ARRAY: return v == BK_TOML_STRING;                    /* per element */
    }
    return 0;
}

/* The largest magnitude a DOUBLE or DOUBLE_ARRAY option may hold. No bias, scale, base or length a plugin
 * takes comes near it, while a value beyond it (1e30) overflows to inf once a plugin squares it or scales
 * a float table by it; so the host refuses it, with its position, before create() sees it. */
#define BK_OPTION_NUMBER_MAX 1e15

/* A number that a DOUBLE option may hold: finite and within +-BK_OPTION_NUMBER_MAX. */
static int number_ok(double x)
{
    return isfinite(x) && fabs(x) <= BK_OPTION_NUMBER_MAX;
}

/* "expected a finite number[ of magnitude at most 1e+15], got X" for a number refused by number_ok; an
 * array's element says "value I: expected a finite float", the words of <biaskit/table_plugin.h>. */
static int bad_number(const biaskit_config *view, const biaskit_option *o, const bk_toml_node *v, long element,
                      bk_error *err)
{
    double x = bk_toml_float(v);
    char where[32] = "";
    if (element >= 0)
        snprintf(where, sizeof where, "value %ld: ", element);
    char range[64] = "";
    if (isfinite(x))
        snprintf(range, sizeof range, " of magnitude at most %g", BK_OPTION_NUMBER_MAX);
    return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v), "%s option '%s': %sexpected a finite %s%s, got %g",
                      view->label, o->name, where, element >= 0 ? "float" : "number", range, x);
}

static int check_value(const biaskit_config *view, const biaskit_option *o, const bk_toml_node *v,
                       bk_error *err)
{
    bk_toml_type t = bk_toml_type_of(v);
    int is_array = o->type == BIASKIT_OPT_DOUBLE_ARRAY || o->type == BIASKIT_OPT_STRING_ARRAY;
    if (is_array) {
        if (t != BK_TOML_ARRAY)
            return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v), "%s option '%s': expected %s, got %s",
                              view->label, o->name, expected_text(o->type), bk_toml_type_name(t));
        for (size_t i = 0; i < bk_toml_count(v); i++) {
            const bk_toml_node *e = bk_toml_at(v, i);
            if (!scalar_matches(o->type, bk_toml_type_of(e)))
                return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(e),
                                  "%s option '%s': element %zu: expected %s, got %s", view->label, o->name, i,
                                  o->type == BIASKIT_OPT_DOUBLE_ARRAY ? "a number" : "a string",
                                  bk_toml_type_name(bk_toml_type_of(e)));
            if (o->type == BIASKIT_OPT_DOUBLE_ARRAY && !number_ok(bk_toml_float(e)))
                return bad_number(view, o, e, (long)i, err);
        }
        return BK_OK;
    }
    if (!scalar_matches(o->type, t))
        return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v), "%s option '%s': expected %s, got %s",
                          view->label, o->name, expected_text(o->type), bk_toml_type_name(t));
    if (o->type == BIASKIT_OPT_DOUBLE && !number_ok(bk_toml_float(v)))
        return bad_number(view, o, v, -1, err);
    if (o->type == BIASKIT_OPT_STRING && o->choices && bk_choice_index(o->choices, bk_toml_string(v)) < 0) {
        char list[256];
        bk_choices_text(o->choices, list, sizeof list);
        return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(v), "%s option '%s': expected one of %s, got '%s'",
                          view->label, o->name, list, bk_toml_string(v));
    }
    return BK_OK;
}

static int unknown_option(const biaskit_config *view, const bk_toml_entry *e, bk_error *err)
{
    const biaskit_plugin *d = view->desc;
    const char *names[64];
    size_t n = 0;
    char list[768];
    size_t used = 0;
    list[0] = '\0';
    for (uint32_t i = 0; i < d->n_options; i++) {
        if (n < sizeof names / sizeof names[0])
            names[n++] = d->options[i].name;
        if (used < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", d->options[i].name);
    }
    const char *hint = bk_closest_word(e->key, names, n);
    char hint_text[96] = "";
    if (hint)
        snprintf(hint_text, sizeof hint_text, " (did you mean '%s'?)", hint);
    return bk_fail_at(err, BK_ERR_CONFIG, e->key_pos, "%s: unknown key '%s'%s; plugin '%s' takes: %s%s%s",
                      view->label, e->key, hint_text, d->name, d->n_options ? list : "no options",
                      "; engine term keys: ", BK_TERM_KEYS_TEXT);
}

int bk_config_view_init(biaskit_config *view, const biaskit_plugin *desc, const bk_toml_node *table,
                        bk_toml_pos pos, const char *label, bk_error *err)
{
    memset(view, 0, sizeof *view);
    view->desc = desc;
    view->table = table;
    view->pos = pos;
    snprintf(view->label, sizeof view->label, "%s", label);
    if (!table)
        return BK_OK;
    bk_toml_entry e;
    for (size_t i = 0; bk_toml_entry_at(table, i, &e) == 0; i++) {
        if (bk_term_key_is_reserved(e.key))
            continue;
        const biaskit_option *o = find_option(desc, e.key);
        if (!o)
            return unknown_option(view, &e, err);
        int rc = check_value(view, o, e.value, err);
        if (rc)
            return rc;
    }
    return BK_OK;
}

void bk_config_option_text(const biaskit_config *view, const biaskit_option *o, char *buf, size_t size, int *is_set)
{
    const bk_toml_node *v = view->table ? bk_toml_get(view->table, o->name) : NULL;
    *is_set = v != NULL;
    if (v) {
        bk_toml_value_text(v, buf, size);
        return;
    }
    switch (o->type) {
    case BIASKIT_OPT_BOOL: snprintf(buf, size, "%s", o->default_number != 0 ? "true" : "false"); break;
    case BIASKIT_OPT_INT: snprintf(buf, size, "%lld", (long long)o->default_number); break;
    case BIASKIT_OPT_DOUBLE: bk_double_text(o->default_number, buf, size); break;
    case BIASKIT_OPT_STRING: bk_string_text(o->default_string ? o->default_string : "", buf, size); break;
    default: snprintf(buf, size, "[]"); break;
    }
}

/* ------------------------------------------------------------------------------------------------
 * The services
 * ---------------------------------------------------------------------------------------------- */

static void copy_error(biaskit_error *out, const bk_error *e)
{
    if (out) {
        out->code = e->code;
        bk_copy_text(out->message, sizeof out->message, e->message);
    }
}

/* The declared option `key` of type `type` and its value node (NULL when unset). */
static int lookup(const biaskit_config *cfg, const char *key, biaskit_option_type type,
                  const biaskit_option **opt, const bk_toml_node **value, biaskit_error *err)
{
    const biaskit_option *o = find_option(cfg->desc, key);
    if (!o || o->type != type) {
        bk_error e;
        bk_fail(&e, BIASKIT_ERR_INTERNAL,
                "plugin '%s' read option '%s' as %s, but %s (fix the plugin's options table)", cfg->desc->name, key,
                bk_option_type_name(type),
                o ? "declared it with another type" : "did not declare it");
        copy_error(err, &e);
        return e.code;
    }
    *opt = o;
    *value = cfg->table ? bk_toml_get(cfg->table, key) : NULL;
    return BIASKIT_OK;
}

static int get_bool(const biaskit_config *cfg, const char *key, int *out, biaskit_error *err)
{
    const biaskit_option *o;
    const bk_toml_node *v;
    int rc = lookup(cfg, key, BIASKIT_OPT_BOOL, &o, &v, err);
    if (!rc)
        *out = v ? bk_toml_bool(v) : o->default_number != 0;
    return rc;
}

static int get_int(const biaskit_config *cfg, const char *key, int64_t *out, biaskit_error *err)
{
    const biaskit_option *o;
    const bk_toml_node *v;
    int rc = lookup(cfg, key, BIASKIT_OPT_INT, &o, &v, err);
    if (!rc)
        *out = v ? bk_toml_int(v) : (int64_t)o->default_number;
    return rc;
}

static int get_double(const biaskit_config *cfg, const char *key, double *out, biaskit_error *err)
{
    const biaskit_option *o;
    const bk_toml_node *v;
    int rc = lookup(cfg, key, BIASKIT_OPT_DOUBLE, &o, &v, err);
    if (!rc)
        *out = v ? bk_toml_float(v) : o->default_number;
    return rc;
}

static int get_string(const biaskit_config *cfg, const char *key, const char **out, biaskit_error *err)
{
    const biaskit_option *o;
    const bk_toml_node *v;
    int rc = lookup(cfg, key, BIASKIT_OPT_STRING, &o, &v, err);
    if (!rc)
        *out = v ? bk_toml_string(v) : o->default_string;
    return rc;
}

static int array_too_long(const biaskit_config *cfg, const char *key, const bk_toml_node *v, int32_t capacity,
                          biaskit_error *err)
{
    bk_error e;
    bk_fail_at(&e, BIASKIT_ERR_CONFIG, bk_toml_position(v), "%s option '%s': %zu values given, at most %d allowed",
               cfg->label, key, bk_toml_count(v), capacity);
    copy_error(err, &e);
    return e.code;
}

static int get_double_array(const biaskit_config *cfg, const char *key, double *out, int32_t capacity,
                            int32_t *count, biaskit_error *err)
{
    const biaskit_option *o;
    const bk_toml_node *v;
    int rc = lookup(cfg, key, BIASKIT_OPT_DOUBLE_ARRAY, &o, &v, err);
    if (rc)
        return rc;
    *count = v ? (int32_t)bk_toml_count(v) : 0;
    if (*count > capacity)
        return array_too_long(cfg, key, v, capacity, err);
    for (int32_t i = 0; i < *count; i++)
        out[i] = bk_toml_float(bk_toml_at(v, (size_t)i));
    return BIASKIT_OK;
}

static int get_string_array(const biaskit_config *cfg, const char *key, const char **out, int32_t capacity,
                            int32_t *count, biaskit_error *err)
{
    const biaskit_option *o;
    const bk_toml_node *v;
    int rc = lookup(cfg, key, BIASKIT_OPT_STRING_ARRAY, &o, &v, err);
    if (rc)
        return rc;
    *count = v ? (int32_t)bk_toml_count(v) : 0;
    if (*count > capacity)
        return array_too_long(cfg, key, v, capacity, err);
    for (int32_t i = 0; i < *count; i++)
        out[i] = bk_toml_string(bk_toml_at(v, (size_t)i));
    return BIASKIT_OK;
}

static int is_set(const biaskit_config *cfg, const char *key)
{
    return cfg->table && bk_toml_get(cfg->table, key) != NULL;
}

static int config_error(const biaskit_config *cfg, const char *key, biaskit_error *err, const char *fmt, ...)
{
    char body[BIASKIT_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    const bk_toml_node *v = cfg->table && key ? bk_toml_get(cfg->table, key) : NULL;
    bk_toml_pos pos = v ? bk_toml_position(v) : cfg->pos;
    bk_error e;
    bk_fail_at(&e, BIASKIT_ERR_CONFIG, pos, "%s option '%s': %s", cfg->label, key ? key : "?", body);
    copy_error(err, &e);
    return BIASKIT_ERR_CONFIG;
}

static int error(biaskit_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

static void log_line(int level, const char *plugin, const char *fmt, ...)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    if (level > log_level)
        return;
    if (level < BIASKIT_LOG_ERROR)
        level = BIASKIT_LOG_ERROR;
    if (level > BIASKIT_LOG_DEBUG)
        level = BIASKIT_LOG_DEBUG;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "biaskit: %s: plugin %s: ", names[level], plugin ? plugin : "?");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const biaskit_services services = {
    .struct_size = sizeof(biaskit_services),
    .abi_version = BIASKIT_ABI_VERSION,
    .get_bool = get_bool,
    .get_int = get_int,
    .get_double = get_double,
    .get_string = get_string,
    .get_double_array = get_double_array,
    .get_string_array = get_string_array,
    .is_set = is_set,
    .config_error = config_error,
    .error = error,
    .log = log_line,
};

const biaskit_services *bk_services(void)
{
    return &services;
}
