/* The descriptor validator (descriptor.h): every rule about a descriptor, written once, each with
 * the severity that decides whether the loader refuses the plugin. */
#include "plugin/descriptor.h"

#include "config/experiment.h"
#include "plugin/contract.h"
#include "plugin/host.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The flag bits this engine implements; its capability bits are the contract's rows (plugin/contract.h).
 * Anything else is refused, not ignored (see check_capabilities). */
#define KNOWN_FLAGS ((uint32_t)BIASKIT_FLAG_PER_LAYER)

typedef struct sink {
    bk_descriptor_problem_fn fn;
    void *ctx;
    int refused;
} sink;

__attribute__((format(printf, 4, 5))) static void problem(sink *s, bk_descriptor_part part,
                                                          bk_descriptor_severity severity, const char *fmt, ...)
{
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (severity == BK_DESCRIPTOR_REFUSED)
        s->refused++;
    if (s->fn)
        s->fn(s->ctx, part, severity, text);
}

int bk_descriptor_identifier(const char *s, int allow_dash)
{
    if (!s || !*s)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' || (allow_dash && *s == '-')))
            return 0;
    return 1;
}

static int is_one_line(const char *s)
{
    return s && *s && !strchr(s, '\n') && !strchr(s, '\r');
}

/* A text field the engine prints: NULL is refused where the engine reads it unconditionally;
 * empty or multi-line text only garbles listings. */
static void check_text(sink *s, const char *value, const char *field, int may_be_null, const char *why_one_line)
{
    if (!value && !may_be_null)
        problem(s, BK_DESCRIPTOR_FIELDS, BK_DESCRIPTOR_REFUSED, "descriptor lacks a %s string", field);
    else if (value && !is_one_line(value))
        problem(s, BK_DESCRIPTOR_FIELDS, BK_DESCRIPTOR_FLAWED, "%s must be %sa non-empty one-line string%s", field,
                may_be_null ? "NULL or " : "", why_one_line);
}

/* 1 when the rest of the descriptor can be read (the size and the ABI are right). */
static int check_fields(sink *s, const biaskit_plugin *d)
{
    if (d->struct_size < BIASKIT_PLUGIN_V1_SIZE) {
        problem(s, BK_DESCRIPTOR_FIELDS, BK_DESCRIPTOR_REFUSED,
                "descriptor is %u bytes, ABI %u needs at least %zu; rebuild it against this SDK", d->struct_size,
                BIASKIT_ABI_VERSION, (size_t)BIASKIT_PLUGIN_V1_SIZE);
        return 0;
    }
    if (d->abi_version < BIASKIT_ABI_VERSION_MIN || d->abi_version > BIASKIT_ABI_VERSION) {
        problem(s, BK_DESCRIPTOR_FIELDS, BK_DESCRIPTOR_REFUSED,
                "ABI version mismatch: built for ABI %u, this biaskit loads ABI %u to %u; rebuild it against this SDK",
                d->abi_version, BIASKIT_ABI_VERSION_MIN, BIASKIT_ABI_VERSION);
        return 0;
    }
    if (!bk_descriptor_identifier(d->name, 1))
        problem(s, BK_DESCRIPTOR_FIELDS, BK_DESCRIPTOR_REFUSED,
                "descriptor name '%s' is not valid (expected lower-case letters, digits, '_' or '-')",
                d->name ? d->name : "(null)");
    check_text(s, d->version, "version", 0, "");
    check_text(s, d->summary, "summary", 0, " (`biaskit plugins` prints it on one line)");
    check_text(s, d->reference, "reference", 1, "");
    if (!d->create || !d->destroy)
        problem(s, BK_DESCRIPTOR_FIELDS, BK_DESCRIPTOR_REFUSED, "descriptor lacks the %s function",
                !d->create ? "create" : "destroy");
    return 1;
}

/* "TABLE" for "table". */
static const char *upper(const char *name, char *buf, size_t size)
{
    size_t k = 0;
    for (; name[k] && k + 1 < size; k++)
        buf[k] = (char)(name[k] >= 'a' && name[k] <= 'z' ? name[k] - 'a' + 'A' : name[k]);
    buf[k] = '\0';
    return buf;
}

static void check_capabilities(sink *s, const biaskit_plugin *d)
{
    const bk_descriptor_part part = BK_DESCRIPTOR_CAPABILITIES;
    uint32_t caps = d->capabilities;
    size_t n_rows;
    const bk_capability *rows = bk_capabilities(&n_rows);
    /* A bit this engine does not know comes from a newer SDK (the ABI lets the descriptor's meaning
     * grow) and asks the engine to do something: call a function it has no slot for, or treat the
     * parameters differently. Ignoring it would run a model other than the one the plugin describes,
     * and nothing would say so; refusing costs an upgrade of biaskit, and the message says which bits.
     * A reserved bit (BIASKIT_CAP_WEIGHT: declared by the SDK, not implemented) is the same case. */
    char known[160] = "", big[24];
    size_t used = 0;
    uint32_t reserved = 0;
    for (size_t r = 0; r < n_rows; r++) {
        if (rows[r].reserved)
            reserved |= rows[r].bit;
        else if (used < sizeof known)
            used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "", rows[r].name);
    }
    uint32_t unknown = caps & ~(bk_capabilities_known() | reserved);
    if (unknown)
        problem(s, part, BK_DESCRIPTOR_REFUSED,
                "declares capability bits 0x%x that this biaskit does not know (ABI %u: %s); it would ignore what they "
                "ask for and compute another model, so it refuses the plugin (use a biaskit that knows them)",
                unknown, BIASKIT_ABI_VERSION, known);
    for (size_t r = 0; r < n_rows; r++)
        if (rows[r].reserved && (caps & rows[r].bit))
            problem(s, part, BK_DESCRIPTOR_REFUSED,
                    "declares BIASKIT_CAP_%s, which is reserved and not part of ABI %u: this biaskit cannot honour it",
                    upper(rows[r].name, big, sizeof big), BIASKIT_ABI_VERSION);
    if (d->flags & ~KNOWN_FLAGS)
        problem(s, part, BK_DESCRIPTOR_REFUSED,
                "declares flag bits 0x%x that this biaskit does not know (ABI %u: per_layer); it would ignore what "
                "they ask for, so it refuses the plugin (use a biaskit that knows them)", d->flags & ~KNOWN_FLAGS,
                BIASKIT_ABI_VERSION);
    if (!caps)
        problem(s, part, BK_DESCRIPTOR_FLAWED, "declares no capability (%s): the engine has nothing to call", known);
    for (size_t r = 0; r < n_rows; r++) {
        const bk_capability *row = &rows[r];
        const int declared = (caps & row->bit) != 0;
        upper(row->name, big, sizeof big);
        for (int k = 0; declared && k < BK_CAP_HOOKS && row->required[k].name; k++)
            if (!bk_hook_present(d, &row->required[k]) && !(k == 0 && bk_hook_present(d, &row->required_or)))
                problem(s, part, BK_DESCRIPTOR_REFUSED, "declares the %s capability but has no %s function", row->name,
                        row->required_text[k]);
        for (int k = 0; declared && (d->param_count || row->train_why) && k < BK_CAP_HOOKS && row->with_params[k].name;
             k++)
            if (!bk_hook_present(d, &row->with_params[k])) {
                if (row->train_why)
                    problem(s, part, BK_DESCRIPTOR_FLAWED, "%s needs %s(): %s", big, row->with_params[k].name,
                            row->train_why);
                else
                    problem(s, part, BK_DESCRIPTOR_FLAWED, "%s with parameters (param_count) needs %s()", big,
                            row->with_params[k].name);
            }
        int owned = 0;
        for (int k = 0; !declared && k < BK_CAP_HOOKS && row->own[k].name; k++)
            if (bk_hook_present(d, &row->own[k])) {
                if (!row->own_text)
                    problem(s, part, BK_DESCRIPTOR_FLAWED, "has %s() but does not declare BIASKIT_CAP_%s",
                            row->own[k].name, big);
                owned = 1;
            }
        if (owned && row->own_text)
            problem(s, part, BK_DESCRIPTOR_FLAWED, "has %s but does not declare BIASKIT_CAP_%s", row->own_text, big);
    }
    if (d->param_count && !d->param_init)
        problem(s, part, BK_DESCRIPTOR_REFUSED, "has param_count but no param_init");
    if ((caps & BIASKIT_CAP_TABLE) && (caps & BIASKIT_CAP_COORDINATE))
        problem(s, part, BK_DESCRIPTOR_REFUSED,
                "declares both TABLE and COORDINATE: table() is over distances for one and over the grid of u for the "
                "other; make two plugins");
    const int table = (caps & (BIASKIT_CAP_TABLE | BIASKIT_CAP_COORDINATE)) != 0;
    if (d->table_backward_cuda && !d->table_cuda)
        problem(s, part, BK_DESCRIPTOR_FLAWED,
                "table_backward_cuda() without table_cuda() is suspicious: the forward table would come from the "
                "host and its gradient from the device");
    if (!table && (d->table || d->table_backward || d->table_cuda || d->table_backward_cuda))
        problem(s, part, BK_DESCRIPTOR_FLAWED,
                "has table functions but declares neither BIASKIT_CAP_TABLE nor BIASKIT_CAP_COORDINATE (the engine "
                "never calls them)");
    bk_embed_cuda_fn embed_cuda = bk_descriptor_embed_cuda(d); /* NULL past an older struct_size */
    bk_embed_backward_cuda_fn embed_backward_cuda = bk_descriptor_embed_backward_cuda(d);
    if (embed_backward_cuda && !embed_cuda)
        problem(s, part, BK_DESCRIPTOR_FLAWED,
                "embed_backward_cuda() without embed_cuda() is suspicious: the forward embedding would come from the "
                "host and its gradient from the device");
}

/* Problems of a choice list "a|b|c": empty alternatives, repeats. */
static void check_choice_list(sink *s, const biaskit_option *o)
{
    const char *c = o->choices;
    size_t n = strlen(c);
    if (n == 0 || c[0] == '|' || c[n - 1] == '|' || strstr(c, "||"))
        problem(s, BK_DESCRIPTOR_OPTIONS, BK_DESCRIPTOR_FLAWED, "option '%s': choices \"%s\" has an empty alternative",
                o->name, c);
    for (const char *a = c; *a;) {
        size_t len = strcspn(a, "|");
        for (const char *b = a + len + (a[len] ? 1 : 0); *b;) {
            size_t blen = strcspn(b, "|");
            if (blen == len && len > 0 && strncmp(a, b, len) == 0)
                problem(s, BK_DESCRIPTOR_OPTIONS, BK_DESCRIPTOR_FLAWED, "option '%s': choice '%.*s' is listed twice",
                        o->name, (int)len, a);
            b += blen + (b[blen] ? 1 : 0);
        }
        a += len + (a[len] ? 1 : 0);
    }
}

/* The default of a well-named option of a known type. */
static void check_default(sink *s, const biaskit_option *o)
{
    const bk_descriptor_part part = BK_DESCRIPTOR_OPTIONS;
    const bk_descriptor_severity flawed = BK_DESCRIPTOR_FLAWED;
    double v = o->default_number;
    switch (o->type) {
    case BIASKIT_OPT_BOOL:
        if (v != 0.0 && v != 1.0)
            problem(s, part, flawed, "option '%s': a bool default must be 0 or 1, got %g", o->name, v);
        break;
    case BIASKIT_OPT_INT:
        /* refused: get_int() hands the default to create() as an int64_t, and the conversion of a NaN, an
         * infinity or anything past 2^63 is undefined behaviour in C (a fraction would be cut silently) */
        if (!isfinite(v) || v != floor(v) || fabs(v) > 9007199254740992.0)
            problem(s, part, BK_DESCRIPTOR_REFUSED,
                    "option '%s': an int default must be a whole number of magnitude at most 2^53, got %g", o->name, v);
        break;
    case BIASKIT_OPT_DOUBLE:
        if (!isfinite(v))
            problem(s, part, flawed, "option '%s': a float default must be finite, got %g", o->name, v);
        break;
    case BIASKIT_OPT_STRING:
        if (!o->default_string)
            problem(s, part, flawed, "option '%s': a string default must not be NULL (give \"\" for none)", o->name);
        break;
    case BIASKIT_OPT_DOUBLE_ARRAY:
    case BIASKIT_OPT_STRING_ARRAY: break;
    }
    if (o->choices && o->type != BIASKIT_OPT_STRING)
        problem(s, part, flawed, "option '%s': choices are only checked for string options, this one is a %s", o->name,
                bk_option_type_name(o->type));
    if (o->choices && o->type == BIASKIT_OPT_STRING) {
        check_choice_list(s, o);
        if (o->default_string && bk_choice_index(o->choices, o->default_string) < 0)
            problem(s, part, flawed, "option '%s': default \"%s\" is not one of its choices \"%s\"", o->name,
                    o->default_string, o->choices);
    }
}

static void check_options(sink *s, const biaskit_plugin *d)
{
    const bk_descriptor_part part = BK_DESCRIPTOR_OPTIONS;
    const bk_descriptor_severity refused = BK_DESCRIPTOR_REFUSED;
    if (d->n_options && !d->options) {
        problem(s, part, refused, "n_options is %u but options is NULL", d->n_options);
        return;
    }
    for (uint32_t i = 0; i < d->n_options; i++) {
        const biaskit_option *o = &d->options[i];
        if (!bk_descriptor_identifier(o->name, 0)) {
            problem(s, part, refused, "option #%u has an invalid name '%s' (expected [a-z0-9_]+)", i,
                    o->name ? o->name : "(null)");
            continue;
        }
        if (bk_term_key_is_reserved(o->name))
            problem(s, part, refused, "option '%s' collides with an engine term key (%s)", o->name, BK_TERM_KEYS_TEXT);
        for (uint32_t j = 0; j < i; j++)
            if (d->options[j].name && strcmp(d->options[j].name, o->name) == 0)
                problem(s, part, refused, "option '%s' is declared twice", o->name);
        if (o->type < BIASKIT_OPT_BOOL || o->type > BIASKIT_OPT_STRING_ARRAY) {
            problem(s, part, refused, "option '%s' has unknown type %d", o->name, (int)o->type);
            continue;
        }
        if (!is_one_line(o->doc))
            problem(s, part, BK_DESCRIPTOR_FLAWED,
                    "option '%s': doc must be a non-empty one-line string (`biaskit plugins` shows it)", o->name);
        check_default(s, o);
    }
}

int bk_descriptor_problems(const biaskit_plugin *d, bk_descriptor_problem_fn fn, void *ctx)
{
    sink s = {fn, ctx, 0};
    if (check_fields(&s, d)) {
        check_capabilities(&s, d);
        check_options(&s, d);
    }
    return s.refused;
}
