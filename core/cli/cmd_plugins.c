/* biaskit plugins: what plugins are found, where, and what each one takes. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "cli/args.h"
#include "cli/commands.h"
#include "plugin/contract.h"
#include "cuda/device.h"
#include "plugin/descriptor.h"
#include "plugin/host.h"
#include "plugin/param_info.h"
#include "plugin/services.h"
#include "util/isolate.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char help[] =
    "usage: biaskit plugins [NAME|PATH ...] [--timeout S] [--strict]\n"
    "       biaskit plugins --capabilities\n\n"
    "Lists every plugin found on the search path (or only the named ones; a PATH to a .so loads that\n"
    "file): name, version, file, capabilities, what it needs from the engine (distances, the query\n"
    "position, masks, a logit scale, the evaluation length), reference, learnable parameters (for an\n"
    "8-head model with the default options: each tensor's shape, the bounds param_project() keeps it in\n"
    "and its initialisation, as the plugin's param_info() declares them, else \"not declared\") and\n"
    "every option with its type, default and meaning.\n\n"
    "Search path: the directories of $BIASKIT_PLUGIN_PATH (colon-separated), in order; then, when this\n"
    "executable is installed (<its directory>/../lib/biaskit/plugins exists), that directory; an\n"
    "executable that is not installed (./build/biaskit, the tests) searches the build directory it was\n"
    "compiled in instead. The first plugin of a name wins; a later file of the same name is noted on\n"
    "stderr as shadowed, with the file that wins. The same file reached twice is one plugin.\n\n"
    "Each file is loaded and described in a child process: a file that is not a valid plugin, or whose\n"
    "code crashes, calls exit() or does not return (in its constructors, its entry point or create()),\n"
    "is skipped with a warning on stderr naming the file, the stage and what happened, and the listing\n"
    "goes on. A plugin directory or file that users other than its owner and group may write is named\n"
    "in a warning: a library placed there runs its code in whoever lists or loads plugins.\n\n"
    "  --capabilities  print the capability contract as a Markdown table (the guide's table is this):\n"
    "                each BIASKIT_CAP_* bit, what a term of it does, the hooks it requires, the hooks it\n"
    "                needs to train, and what its terms read from the engine; loads no plugin\n"
    "  --timeout S   time limit for loading and describing one file, in seconds (default 60)\n"
    "  --strict      exit 1 when a file was skipped or a plugin directory or file is writable by others\n\n"
    "exit status: 0 the listing was printed (files skipped on the search path are warnings, unless\n"
    "--strict); 1 a plugin named on the command line could not be loaded, or --strict found a problem;\n"
    "2 bad usage.\n";

/* "`a`, `b`" for a list of hooks (with required_or: "`a` or `b`"); "none" when empty. */
static void hooks_text(const bk_hook *hooks, const bk_hook *alternative, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int k = 0; k < BK_CAP_HOOKS && hooks[k].name && used < size; k++) {
        used += (size_t)snprintf(buf + used, size - used, "%s`%s`", k ? ", " : "", hooks[k].name);
        if (k == 0 && alternative && alternative->name && used < size)
            used += (size_t)snprintf(buf + used, size - used, " or `%s`", alternative->name);
    }
    if (!used)
        snprintf(buf, size, "none");
}

/* The capability contract as the guide's table (plugin/contract.h). */
static void print_capabilities(FILE *out)
{
    size_t n;
    const bk_capability *rows = bk_capabilities(&n);
    fprintf(out, "| capability | a term of it | hooks it requires | to train, also | its terms read |\n"
                 "|---|---|---|---|---|\n");
    for (size_t r = 0; r < n; r++) {
        char upper[24], req[160], par[160];
        size_t k = 0;
        for (; rows[r].name[k] && k + 1 < sizeof upper; k++)
            upper[k] = (char)(rows[r].name[k] - 'a' + 'A');
        upper[k] = '\0';
        hooks_text(rows[r].required, &rows[r].required_or, req, sizeof req);
        hooks_text(rows[r].with_params, NULL, par, sizeof par);
        if (!rows[r].train_why && strcmp(par, "none") != 0)
            strncat(par, " (with parameters)", sizeof par - strlen(par) - 1);
        fprintf(out, "| `BIASKIT_CAP_%s` | %s | %s | %s | ", upper, rows[r].summary, req, par);
        for (int j = 0; j < 2 && rows[r].reads[j]; j++)
            fprintf(out, "%s%s", j ? "; " : "", rows[r].reads[j]);
        fprintf(out, "%s |\n", rows[r].reads[0] ? "" : "nothing");
    }
}

typedef struct scan_counts {
    int rejected, shadowed, writable;
} scan_counts;

static void print_default(FILE *out, const biaskit_option *o)
{
    switch (o->type) {
    case BIASKIT_OPT_BOOL: fprintf(out, "%-9s", o->default_number != 0 ? "true" : "false"); break;
    case BIASKIT_OPT_INT: fprintf(out, "%-9.0f", o->default_number); break;
    case BIASKIT_OPT_DOUBLE: fprintf(out, "%-9g", o->default_number); break;
    case BIASKIT_OPT_STRING: {
        char quoted[128];
        snprintf(quoted, sizeof quoted, "\"%s\"", o->default_string ? o->default_string : "");
        fprintf(out, "%-9s", quoted);
        break;
    }
    case BIASKIT_OPT_DOUBLE_ARRAY:
    case BIASKIT_OPT_STRING_ARRAY: fprintf(out, "%-9s", "[]"); break;
    }
}

/* One line per tensor: its shape, the bounds param_project() keeps it in and its initialisation in
 * words, as the plugin's param_info() declares them ("not declared" without the hook or the text). */
static void print_param_info(FILE *out, const bk_plugin *p, const void *inst, const biaskit_tensor_info *tensors,
                             int32_t n)
{
    const biaskit_plugin *d = p->desc;
    bk_plugin_stage("plugin '%s' ('%s'), in param_info()", d->name, p->path);
    for (int32_t i = 0; i < n; i++) {
        char shape[96], bounds[64];
        snprintf(shape, sizeof shape, "%s[%dx%d]", tensors[i].name, tensors[i].rows, tensors[i].cols);
        biaskit_param_info info;
        biaskit_error pe;
        int unterminated;
        bk_param_info_status st = bk_param_info_read(d, inst, i, &info, &pe, &unterminated);
        if (st == BK_PARAM_INFO_FAILED) {
            fprintf(out, "    %-16s (param_info() failed: %s)\n", shape, pe.message[0] ? pe.message : "no message given");
            continue;
        }
        if (st == BK_PARAM_INFO_NONE)
            snprintf(bounds, sizeof bounds, "not declared");
        else
            bk_param_info_bounds(&info, bounds, sizeof bounds);
        fprintf(out, "    %-16s bounds %-22s init %s%s\n", shape, bounds, info.init[0] ? info.init : "not declared",
                unterminated ? " (param_info() left the text without its NUL: cut)" : "");
    }
}

/* Learnable parameters of an instance made with default options for an 8-head, 1-layer model. */
static void print_parameters(FILE *out, const bk_plugin *p)
{
    const biaskit_plugin *d = p->desc;
    biaskit_config view;
    bk_error e;
    if (bk_config_view_init(&view, d, NULL, (bk_toml_pos){"(defaults)", 0, 0}, d->name, &e))
        return;
    biaskit_geometry geo = {sizeof geo, 1, 8, 256, 32, 256, 256};
    void *inst = NULL;
    biaskit_error pe = {0};
    bk_plugin_stage("plugin '%s' ('%s'), in create() with the default options", d->name, p->path);
    int rc = d->create(bk_services(), &view, &geo, &inst, &pe);
    bk_plugin_stage(NULL);
    if (rc != BIASKIT_OK) {
        fprintf(out, "  parameters:   (default options need more: %s)\n", pe.message);
        return;
    }
    if (bk_plugin_check_created(p, inst, &e)) {
        fprintf(out, "  parameters:   (create() with the default options: %s)\n", e.message);
        return;
    }
    bk_plugin_stage("plugin '%s' ('%s'), in param_count() and param_tensors()", d->name, p->path);
    int64_t count = d->param_count ? d->param_count(inst) : 0;
    if (count == 0)
        fprintf(out, "  parameters:   none with the default options");
    else if (d->capabilities &
             (BIASKIT_CAP_TABLE | BIASKIT_CAP_COORDINATE | BIASKIT_CAP_SCALE | BIASKIT_CAP_CONTENT | BIASKIT_CAP_COUNT))
        fprintf(out, "  parameters:   %lld learnable for 8 heads, %s", (long long)count,
               d->flags & BIASKIT_FLAG_PER_LAYER ? "per layer by default" : "shared across layers by default");
    else /* an embedding or a rotation acts once, so the engine keeps one copy (core/bias/terms.c) */
        fprintf(out, "  parameters:   %lld learnable for 8 heads, one copy (the term acts once, not per layer)",
               (long long)count);
    biaskit_tensor_info tensors[16];
    int32_t n = count > 0 && d->param_tensors ? d->param_tensors(inst, tensors, 16) : 0;
    for (int32_t i = 0; i < n && i < 16; i++)
        fprintf(out, "%s %s[%dx%d]", i ? "," : ":", tensors[i].name, tensors[i].rows, tensors[i].cols);
    fprintf(out, "\n");
    if (n > 0)
        print_param_info(out, p, inst, tensors, n < 16 ? n : 16);
    /* the parameter groups it declares (param_group(); [[term]] lr_scale / weight_decay override them) */
    int (*declare)(const void *, int32_t, biaskit_param_group *, biaskit_error *) = BK_DESCRIPTOR_FN(d, param_group);
    if (count > 0 && declare) {
        bk_plugin_stage("plugin '%s' ('%s'), in param_group()", d->name, p->path);
        fprintf(out, "  groups:      ");
        const int32_t shown = n > 0 ? (n < 16 ? n : 16) : 1;
        for (int32_t i = 0; i < shown; i++) {
            biaskit_param_group g = {sizeof g, 1.0, BIASKIT_WEIGHT_DECAY_DEFAULT};
            biaskit_error ge = {0, ""};
            fprintf(out, "%s %s: ", i ? ";" : "", n > 0 ? tensors[i].name : "theta");
            if (declare(inst, n > 0 ? i : -1, &g, &ge) != BIASKIT_OK)
                fprintf(out, "(param_group() failed: %s)", ge.message);
            else if (g.weight_decay == BIASKIT_WEIGHT_DECAY_DEFAULT)
                fprintf(out, "lr x %g, weight decay: the engine's (none; [train] weight_decay with decay_all)",
                        g.lr_scale);
            else
                fprintf(out, "lr x %g, weight decay %g", g.lr_scale, g.weight_decay);
        }
        fprintf(out, "\n");
    }
    bk_plugin_stage("plugin '%s' ('%s'), in destroy()", d->name, p->path);
    d->destroy(inst);
    bk_plugin_stage(NULL);
}

/* What the plugin's terms read from the engine: each capability's reads (plugin/contract.h), each once,
 * and what its optional hooks ask for. */
static void print_needs(FILE *out, const biaskit_plugin *d)
{
    const char *said[32];
    int n = 0;
    size_t n_rows;
    const bk_capability *rows = bk_capabilities(&n_rows);
    fprintf(out, "  needs:        ");
    for (size_t r = 0; r < n_rows; r++)
        for (int k = 0; (d->capabilities & rows[r].bit) && k < 2 && rows[r].reads[k]; k++) {
            int again = 0;
            for (int m = 0; m < n; m++)
                again |= strcmp(said[m], rows[r].reads[k]) == 0;
            if (!again && n < 32) {
                fprintf(out, "%s%s", n ? ", " : "", rows[r].reads[k]);
                said[n++] = rows[r].reads[k];
            }
        }
    const struct {
        int present;
        const char *what;
    } hooks[] = {
        {BK_DESCRIPTOR_FN(d, rotary_ctx) != NULL, "the evaluation length (frequencies per length)"},
        {BK_DESCRIPTOR_FN(d, param_init_ctx) != NULL, "the layer index at initialisation"},
    };
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++)
        if (hooks[i].present)
            fprintf(out, "%s%s", n++ ? ", " : "", hooks[i].what);
    fprintf(out, "%s\n", n ? "" : "nothing");
}

static void print_plugin(FILE *out, const bk_plugin *p)
{
    const biaskit_plugin *d = p->desc;
    char caps[128];
    fprintf(out, "\n%s %s - %s\n", d->name, d->version, d->summary);
    fprintf(out, "  file:         %s\n", p->path);
    /* tables and embeddings may bring CUDA code; the ABI 2 terms' arrays are always the host's, and the
     * engine's kernels do the per-element work on every backend */
    const int device_code = (d->capabilities & (BIASKIT_CAP_TABLE | BIASKIT_CAP_EMBED)) != 0;
    fprintf(out, "  capabilities: %s%s\n", bk_capabilities_string(d->capabilities, caps, sizeof caps),
           !device_code ? "" : d->table_cuda || bk_descriptor_embed_cuda(d) ? " (CUDA kernels)" : " (host only)");
    if (d->reference)
        fprintf(out, "  reference:    %s\n", d->reference);
    print_needs(out, d);
    print_parameters(out, p);
    if (!d->n_options) {
        fprintf(out, "  options:      none\n");
        return;
    }
    fprintf(out, "  options:\n");
    for (uint32_t i = 0; i < d->n_options; i++) {
        const biaskit_option *o = &d->options[i];
        fprintf(out, "    %-16s %-12s = ", o->name, bk_option_type_name(o->type));
        print_default(out, o);
        fprintf(out, " %s", o->doc ? o->doc : "");
        if (o->choices) {
            fprintf(out, " (");
            for (const char *c = o->choices; *c; c++)
                fputs(*c == '|' ? ", " : (char[2]){*c, 0}, out);
            fprintf(out, ")");
        }
        fprintf(out, "\n");
    }
}

/* One plugin listed: its name, its file and its listing, from a child. */
typedef struct listed {
    char *name, *path, *text;
} listed;

typedef struct lister {
    bk_registry *reg;
    unsigned timeout_s;
    listed *items;
    size_t n, cap;
    dev_t *seen_dev; /* every file tried, by identity: a file reached twice is one plugin */
    ino_t *seen_ino;
    size_t n_seen;
    scan_counts counts;
    int status;
} lister;

typedef struct list_job {
    bk_registry *reg;
    const char *name_or_path;
} list_job;

/* In the child: load the plugin, then "NAME\tPATH\n" and its listing. */
static int describe_in_child(void *ctx, FILE *out, bk_error *err)
{
    const list_job *job = ctx;
    const bk_plugin *p;
    int rc = bk_registry_load(job->reg, job->name_or_path, &p, err);
    if (rc)
        return rc;
    fprintf(out, "%s\t%s\n", p->desc->name, p->path);
    print_plugin(out, p);
    return BK_OK;
}

static const listed *find_listed(const lister *l, const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->items[i].name, name) == 0)
            return &l->items[i];
    return NULL;
}

/* 1 when the file was tried before (by another path); else it is remembered. */
static int seen_before(lister *l, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 0;
    for (size_t i = 0; i < l->n_seen; i++)
        if (l->seen_dev[i] == st.st_dev && l->seen_ino[i] == st.st_ino)
            return 1;
    dev_t *devs = realloc(l->seen_dev, (l->n_seen + 1) * sizeof *devs);
    if (devs)
        l->seen_dev = devs;
    ino_t *inos = devs ? realloc(l->seen_ino, (l->n_seen + 1) * sizeof *inos) : NULL;
    if (!inos)
        return 0;
    l->seen_ino = inos;
    l->seen_dev[l->n_seen] = st.st_dev;
    l->seen_ino[l->n_seen++] = st.st_ino;
    return 0;
}

static void warn_writable(lister *l, const char *kind, const char *path)
{
    char mode[128];
    if (!bk_plugin_path_writable_by_others(path, mode, sizeof mode))
        return;
    l->counts.writable++;
    fprintf(stderr,
            "biaskit: warning: %s '%s' is writable by users other than its owner and group (%s): a library placed "
            "there runs its code in whoever lists or loads plugins; remove that permission (chmod o-w)%s\n",
            kind, path, mode, strcmp(kind, "plugin directory") == 0 ? " or take it off the search path" : "");
}

/* Describes one plugin in a child; 0 and *item filled, or the error (the child's, or how it died). */
static int describe(lister *l, const char *name_or_path, listed *item, bk_error *err)
{
    char what[PATH_MAX + 64];
    snprintf(what, sizeof what, "listing plugin '%s'", name_or_path);
    list_job job = {l->reg, name_or_path};
    bk_isolated res;
    int rc = bk_plugin_isolate(describe_in_child, &job, l->timeout_s, what, &res, err);
    char *text = res.output;
    char *tab = text ? strchr(text, '\t') : NULL, *nl = tab ? strchr(tab, '\n') : NULL;
    if (!rc && (!tab || !nl))
        rc = bk_fail(err, BK_ERR_INTERNAL, "%s: the child process sent no listing", what);
    if (rc) {
        free(text);
        return rc;
    }
    *tab = *nl = '\0';
    item->name = strdup(text);
    item->path = strdup(tab + 1);
    item->text = strdup(nl + 1);
    free(text);
    if (!item->name || !item->path || !item->text) {
        free(item->name), free(item->path), free(item->text);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory listing plugin '%s'", name_or_path);
    }
    return BK_OK;
}

static void keep(lister *l, listed *item)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 16;
        listed *grown = realloc(l->items, cap * sizeof *grown);
        if (!grown) {
            fprintf(stderr, "biaskit: warning: out of memory listing plugin '%s'\n", item->path);
            free(item->name), free(item->path), free(item->text);
            return;
        }
        l->items = grown;
        l->cap = cap;
    }
    l->items[l->n++] = *item;
}

/* A file of the search path: listed, shadowed (a note), or skipped (a warning). */
static void scan_file(void *ctx, const char *path)
{
    lister *l = ctx;
    if (seen_before(l, path))
        return;
    warn_writable(l, "plugin file", path);
    listed item;
    bk_error err;
    if (describe(l, path, &item, &err)) {
        l->counts.rejected++;
        fprintf(stderr, "biaskit: warning: skipped: %s\n", err.message);
        return;
    }
    const listed *winner = find_listed(l, item.name);
    if (winner) { /* a note: an installed biaskit's build tree holds the same plugins */
        char message[2 * PATH_MAX + 256];
        bk_shadow_message(message, sizeof message, item.path, item.name, winner->path);
        fprintf(stderr, "biaskit: note: %s\n", message);
        l->counts.shadowed++;
        free(item.name), free(item.path), free(item.text);
        return;
    }
    keep(l, &item);
}

/* A plugin named on the command line: an error when it does not load. */
static void named(lister *l, const char *name_or_path)
{
    char path[PATH_MAX];
    bk_error err;
    int rc = bk_registry_locate(l->reg, name_or_path, path, sizeof path, &err);
    if (!rc) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
            *slash = '\0';
            warn_writable(l, "plugin directory", dir);
        }
        warn_writable(l, "plugin file", path);
    }
    listed item;
    if (rc || (rc = describe(l, name_or_path, &item, &err))) {
        l->status = bk_report(&err);
        return;
    }
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->items[i].path, item.path) == 0) { /* the same file named twice: listed once */
            free(item.name), free(item.path), free(item.text);
            return;
        }
    const listed *first = find_listed(l, item.name);
    if (first) {
        bk_fail_duplicate_name(&err, item.path, item.name, first->path);
        l->status = bk_report(&err);
        free(item.name), free(item.path), free(item.text);
        return;
    }
    keep(l, &item);
}

int bk_cmd_plugins(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0}, {"timeout", 1, 0}, {"strict", 0, 0}, {"capabilities", 0, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, sizeof specs / sizeof specs[0], "biaskit plugins", &args, &err))
        return bk_report(&err);
    bk_plugin_set_writable_policy(BK_WRITABLE_QUIET); /* it reports such paths itself, counted */
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    if (bk_args_get(&args, "capabilities")) {
        print_capabilities(stdout);
        return 0;
    }
    long timeout = BK_ISOLATE_TIMEOUT_S;
    const char *t = bk_args_get(&args, "timeout");
    if (t && bk_args_int("timeout", t, 1, 86400, &timeout, &err))
        return bk_report(&err);
    bk_registry reg;
    if (bk_registry_init(&reg, &err))
        return bk_report(&err);

    char device[256];
    bk_device_probe(device, sizeof device);
    printf("device: %s\nsearch path:\n", device);
    for (size_t i = 0; i < reg.n_search_dirs; i++)
        printf("  %zu. %s\n", i + 1, reg.search_dirs[i]);
    fflush(stdout);

    lister l = {.reg = &reg, .timeout_s = (unsigned)timeout};
    if (args.n_positional == 0) {
        for (size_t i = 0; i < reg.n_search_dirs; i++)
            warn_writable(&l, "plugin directory", reg.search_dirs[i]);
        bk_registry_scan_files(&reg, scan_file, &l);
    } else {
        for (size_t i = 0; i < args.n_positional; i++)
            named(&l, args.positional[i]);
    }
    for (size_t i = 0; i < l.n; i++)
        fputs(l.items[i].text, stdout);
    if (l.n == 0 && l.status == 0)
        printf("\nno plugins found\n");
    printf("\n%zu plugin%s", l.n, l.n == 1 ? "" : "s");
    if (l.counts.rejected)
        printf(", %d file%s skipped (see above)", l.counts.rejected, l.counts.rejected == 1 ? "" : "s");
    if (l.counts.shadowed)
        printf(", %d shadowed (see above)", l.counts.shadowed);
    if (l.counts.writable)
        printf(", %d writable by others (see above)", l.counts.writable);
    printf("\n");
    for (size_t i = 0; i < l.n; i++)
        free(l.items[i].name), free(l.items[i].path), free(l.items[i].text);
    free(l.items);
    free(l.seen_dev);
    free(l.seen_ino);
    bk_registry_free(&reg);
    if (!l.status && bk_args_get(&args, "strict") && (l.counts.rejected || l.counts.writable))
        l.status = 1;
    return l.status;
}
