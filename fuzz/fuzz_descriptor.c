/* Fuzz target: plugin descriptors, as a fake plugin whose descriptor the fuzzer writes. The input
 * builds a biaskit_plugin (sdk/include/biaskit/plugin.h) -- its size and ABI, name, version, summary,
 * reference, capability and flag bits, which functions are present, and its options (names, types,
 * defaults, choices, docs) -- and then a [[term]] table for it. The descriptor goes through
 *   - the validator (core/plugin/descriptor.c, bk_descriptor_problems): every problem has a text, the
 *     count of refusals is what it returns, nothing is read past struct_size (the descriptor is
 *     allocated with exactly struct_size bytes when that is less than the whole struct);
 *   - the loader's acceptance path without dlopen (bk_registry_add, core/plugin/host.c): accepted
 *     exactly when the validator refuses nothing, a second descriptor of the same name is refused;
 *   - for an accepted descriptor, an experiment whose [[term]] names it (core/config/experiment.c) and
 *     the term table checked against its declarations (bk_config_view_init, core/plugin/services.c);
 *     when that passes, every declared option is read through the services with its declared type,
 *     which must succeed (the contract of plugin.h: types were checked before create()).
 * Every pointer of the descriptor points into memory made from the input, NUL-terminated; nothing of
 * the fake plugin is ever called.
 *
 * Input layout (little-endian; a read past the end gives zeros):
 *   u8 size selector: 0 sizeof(biaskit_plugin), 1 BIASKIT_PLUGIN_V1_SIZE, 2 u32 raw struct_size, else
 *      V1 size + (selector % 16) * 8
 *   u8 ABI selector: 0 this ABI, else u32 raw abi_version
 *   str name, str version, str summary, str reference
 *   u32 capabilities, u32 flags
 *   u16 function mask: bit i makes function i non-NULL (create, destroy, param_count, param_init,
 *       param_project, param_tensors, table, table_backward, table_cuda, table_backward_cuda, segment,
 *       embed, embed_backward, rotary_frequencies, embed_cuda, embed_backward_cuda)
 *   u8 option count (% 17), u8 bit 0: options pointer NULL
 *   per option: str name, u8 type (raw), f64 default_number, str default_string, str choices, str doc
 *   the rest: TOML lines appended to the [[term]] table (after its `plugin = "NAME"` line)
 * where str is u8 length (255: NULL) and that many bytes. */
#include "fuzz.h"

#include "config/experiment.h"
#include "plugin/descriptor.h"
#include "plugin/host.h"
#include "plugin/services.h"

#include <stdlib.h>
#include <string.h>

#define MAX_OPTIONS 16

typedef struct reader {
    const uint8_t *p;
    size_t left;
} reader;

static uint8_t u8(reader *r)
{
    if (!r->left)
        return 0;
    r->left--;
    return *r->p++;
}

static uint32_t u32(reader *r)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)u8(r) << (8 * i);
    return v;
}

static double f64(reader *r)
{
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++)
        bits |= (uint64_t)u8(r) << (8 * i);
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* Every allocation of one input, freed at its end. */
typedef struct pool {
    void *blocks[4 + 4 * MAX_OPTIONS + 8];
    size_t n;
} pool;

static void *keep(pool *pl, void *block)
{
    if (!block)
        abort(); /* out of memory: nothing to learn */
    pl->blocks[pl->n++] = block;
    return block;
}

/* A string of exactly its length + 1 bytes (an over-read is caught), or NULL. */
static const char *str(reader *r, pool *pl)
{
    uint8_t n = u8(r);
    if (n == 255)
        return NULL;
    char *s = keep(pl, malloc((size_t)n + 1));
    for (uint8_t i = 0; i < n; i++)
        s[i] = (char)u8(r);
    s[n] = '\0';
    return s;
}

/* Never called: the fake plugin's functions exist only to be non-NULL. */
static void never_called(void)
{
    abort();
}
#define SET_FN(d, field) ((d).field = (__typeof__((d).field))never_called)

static void set_functions(biaskit_plugin *d, uint32_t mask)
{
    if (mask & (1u << 0)) SET_FN(*d, create);
    if (mask & (1u << 1)) SET_FN(*d, destroy);
    if (mask & (1u << 2)) SET_FN(*d, param_count);
    if (mask & (1u << 3)) SET_FN(*d, param_init);
    if (mask & (1u << 4)) SET_FN(*d, param_project);
    if (mask & (1u << 5)) SET_FN(*d, param_tensors);
    if (mask & (1u << 6)) SET_FN(*d, table);
    if (mask & (1u << 7)) SET_FN(*d, table_backward);
    if (mask & (1u << 8)) SET_FN(*d, table_cuda);
    if (mask & (1u << 9)) SET_FN(*d, table_backward_cuda);
    if (mask & (1u << 10)) SET_FN(*d, segment);
    if (mask & (1u << 11)) SET_FN(*d, embed);
    if (mask & (1u << 12)) SET_FN(*d, embed_backward);
    if (mask & (1u << 13)) SET_FN(*d, rotary_frequencies);
    if (mask & (1u << 14)) SET_FN(*d, embed_cuda);
    if (mask & (1u << 15)) SET_FN(*d, embed_backward_cuda);
}

typedef struct tally {
    int refused, flawed;
} tally;

static void count_problem(void *ctx, bk_descriptor_part part, bk_descriptor_severity severity, const char *text)
{
    tally *t = ctx;
    if (!text || !text[0] || (unsigned)part > BK_DESCRIPTOR_OPTIONS)
        abort(); /* every problem says what it is, in one of the three parts */
    if (severity == BK_DESCRIPTOR_REFUSED)
        t->refused++;
    else if (severity == BK_DESCRIPTOR_FLAWED)
        t->flawed++;
    else
        abort();
}

/* Reads every declared option through the services with its declared type: must succeed, since the
 * view checked the table's values against the declarations. */
static void read_options(const biaskit_plugin *d, const biaskit_config *view)
{
    const biaskit_services *svc = bk_services();
    for (uint32_t i = 0; i < d->n_options; i++) {
        const biaskit_option *o = &d->options[i];
        biaskit_error e = {0};
        int rc = BIASKIT_OK;
        switch (o->type) {
        case BIASKIT_OPT_BOOL: {
            int v;
            rc = svc->get_bool(view, o->name, &v, &e);
            break;
        }
        case BIASKIT_OPT_INT: {
            int64_t v;
            rc = svc->get_int(view, o->name, &v, &e);
            break;
        }
        case BIASKIT_OPT_DOUBLE: {
            double v;
            rc = svc->get_double(view, o->name, &v, &e);
            break;
        }
        case BIASKIT_OPT_STRING: {
            const char *v = NULL;
            rc = svc->get_string(view, o->name, &v, &e);
            if (!rc && v)
                (void)strlen(v);
            break;
        }
        case BIASKIT_OPT_DOUBLE_ARRAY: {
            double v[8];
            int32_t n = -1;
            rc = svc->get_double_array(view, o->name, v, 8, &n, &e);
            if (n < 0 || (rc == BIASKIT_OK && n > 8) || (rc != BIASKIT_OK && n <= 8))
                abort(); /* the count is always given; too long is the only refusal */
            rc = BIASKIT_OK;
            break;
        }
        case BIASKIT_OPT_STRING_ARRAY: {
            const char *v[8];
            int32_t n = -1;
            rc = svc->get_string_array(view, o->name, v, 8, &n, &e);
            if (n < 0 || (rc == BIASKIT_OK && n > 8) || (rc != BIASKIT_OK && n <= 8))
                abort();
            for (int32_t k = 0; rc == BIASKIT_OK && k < n; k++)
                (void)strlen(v[k]);
            rc = BIASKIT_OK;
            break;
        }
        }
        if (rc != BIASKIT_OK)
            abort(); /* a declared option of its declared type could not be read */
        (void)svc->is_set(view, o->name);
        /* the wrong type is refused with a message, never read */
        int64_t wrong;
        biaskit_error w = {0};
        if (o->type != BIASKIT_OPT_INT && (svc->get_int(view, o->name, &wrong, &w) == BIASKIT_OK || !w.message[0]))
            abort();
    }
    biaskit_error u = {0};
    double x;
    if (svc->get_double(view, "no such option at all", &x, &u) == BIASKIT_OK)
        abort();
}

/* An experiment with one [[term]] naming the plugin, the input's lines added to its table. */
static void check_term_table(const biaskit_plugin *d, const uint8_t *text, size_t size)
{
    if (memchr(text, '\0', size))
        return; /* the experiment reader takes C strings; fuzz_toml covers NUL bytes */
    static const char head[] = "[model]\nlayers = 1\nheads = 2\ndim = 8\n[[term]]\nplugin = \"";
    size_t name_len = strlen(d->name);
    char *exp_text = malloc(sizeof head + name_len + 3 + size + 1);
    if (!exp_text)
        return;
    size_t at = 0;
    memcpy(exp_text, head, sizeof head - 1);
    at += sizeof head - 1;
    memcpy(exp_text + at, d->name, name_len); /* a valid name: [a-z0-9_-], nothing to escape */
    at += name_len;
    memcpy(exp_text + at, "\"\n", 2);
    at += 2;
    memcpy(exp_text + at, text, size);
    at += size;
    exp_text[at] = '\0';
    bk_experiment exp;
    bk_error err;
    if (bk_experiment_parse(exp_text, "fuzz.toml", NULL, 0, &exp, &err) == BK_OK) {
        if (exp.n_terms < 1)
            abort();
        biaskit_config view;
        int rc = bk_config_view_init(&view, d, exp.terms[0].table, exp.terms[0].pos, "[[term]] #0 (fuzz)", &err);
        if (rc == BK_OK)
            read_options(d, &view);
        else if (!err.message[0])
            abort();
        /* the defaults alone always bind */
        if (bk_config_view_init(&view, d, NULL, exp.terms[0].pos, "(defaults)", &err) != BK_OK)
            abort();
        read_options(d, &view);
        bk_experiment_free(&exp);
    } else if (!err.message[0]) {
        abort();
    }
    free(exp_text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = {data, size};
    pool pl = {{0}, 0};
    biaskit_plugin d;
    memset(&d, 0, sizeof d);

    uint8_t size_sel = u8(&r);
    uint32_t struct_size = size_sel == 0   ? (uint32_t)sizeof(biaskit_plugin)
                           : size_sel == 1 ? (uint32_t)BIASKIT_PLUGIN_V1_SIZE
                           : size_sel == 2 ? u32(&r)
                                           : (uint32_t)BIASKIT_PLUGIN_V1_SIZE + (uint32_t)(size_sel % 16) * 8u;
    d.struct_size = struct_size;
    d.abi_version = u8(&r) == 0 ? BIASKIT_ABI_VERSION : u32(&r);
    d.name = str(&r, &pl);
    d.version = str(&r, &pl);
    d.summary = str(&r, &pl);
    d.reference = str(&r, &pl);
    d.capabilities = u32(&r);
    d.flags = u32(&r);
    uint32_t mask = u8(&r);
    mask |= (uint32_t)u8(&r) << 8;
    set_functions(&d, mask);
    uint32_t n_options = u8(&r) % (MAX_OPTIONS + 1);
    int options_null = u8(&r) & 1;
    biaskit_option *options = n_options ? keep(&pl, calloc(n_options, sizeof *options)) : NULL;
    for (uint32_t i = 0; i < n_options; i++) {
        options[i].name = str(&r, &pl);
        options[i].type = (biaskit_option_type)u8(&r);
        options[i].default_number = f64(&r);
        options[i].default_string = str(&r, &pl);
        options[i].choices = str(&r, &pl);
        options[i].doc = str(&r, &pl);
    }
    d.options = options_null ? NULL : options;
    d.n_options = n_options;

    /* exactly struct_size bytes when that is less than the whole descriptor (at least the size field) */
    size_t alloc = struct_size < sizeof d ? (struct_size < sizeof d.struct_size ? sizeof d.struct_size : struct_size)
                                          : sizeof d;
    biaskit_plugin *desc = keep(&pl, malloc(alloc));
    memcpy(desc, &d, alloc);

    tally t = {0, 0};
    int refused = bk_descriptor_problems(desc, count_problem, &t);
    if (refused != t.refused || refused < 0)
        abort(); /* the return value is the number of refusals */
    if (bk_descriptor_problems(desc, NULL, NULL) != refused)
        abort(); /* the same answer without a callback */

    bk_registry reg;
    bk_error err;
    if (bk_registry_init_dirs(&reg, NULL, 0, &err) != BK_OK)
        abort();
    const bk_plugin *p = NULL;
    int rc = bk_registry_add(&reg, desc, "(fuzz)", &p, &err);
    if ((rc == BK_OK) != (refused == 0))
        abort(); /* the loader accepts exactly what the validator does not refuse */
    if (rc != BK_OK && (!err.message[0] || !strstr(err.message, "(fuzz)")))
        abort(); /* a refusal names the file */
    if (rc == BK_OK) {
        if (p->desc != desc || bk_registry_find(&reg, desc->name) != p)
            abort();
        char caps[128];
        (void)bk_capabilities_string(desc->capabilities, caps, sizeof caps);
        for (uint32_t i = 0; i < desc->n_options; i++)
            (void)bk_option_type_name(desc->options[i].type);
        const bk_plugin *twin;
        if (bk_registry_add(&reg, desc, "(twin)", &twin, &err) != BK_ERR_PLUGIN || !strstr(err.message, "duplicate"))
            abort(); /* a name is taken once */
        check_term_table(desc, r.p, r.left);
    }
    bk_registry_free(&reg);
    for (size_t i = 0; i < pl.n; i++)
        free(pl.blocks[i]);
    return 0;
}
