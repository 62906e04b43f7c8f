/* biaskit plugins: what plugins are found, where, and what each one takes. */
#include "cli/args.h"
#include "cli/commands.h"
#include "device.h"
#include "plugin/host.h"
#include "plugin/services.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
    "usage: biaskit plugins [NAME|PATH ...]\n\n"
    "Lists every plugin found on the search path (or only the named ones; a PATH to a .so loads that\n"
    "file): name, version, file, capabilities, reference, learnable parameters and every option with\n"
    "its type, default and meaning. Files that are not valid plugins are reported on stderr.\n\n"
    "Search path: $BIASKIT_PLUGIN_PATH (colon-separated), <prefix>/lib/biaskit/plugins of this\n"
    "executable, then the build directory. The first plugin of a name wins; a later file of the same\n"
    "name is noted on stderr as shadowed, with the file that wins.\n";

typedef struct scan_counts {
    int rejected, shadowed;
} scan_counts;

/* A rejected file is a warning; a shadowed one is a note (an installed biaskit also searches the build
 * directory it came from, whose plugins its own install directory shadows). */
static void on_problem(void *ctx, bk_scan_problem kind, const char *path, const char *message)
{
    (void)path; /* every message names its file */
    scan_counts *counts = ctx;
    if (kind == BK_SCAN_SHADOWED) {
        counts->shadowed++;
        fprintf(stderr, "biaskit: note: %s\n", message);
    } else {
        counts->rejected++;
        fprintf(stderr, "biaskit: warning: skipped: %s\n", message);
    }
}

static void print_default(const biaskit_option *o)
{
    switch (o->type) {
    case BIASKIT_OPT_BOOL: printf("%-9s", o->default_number != 0 ? "true" : "false"); break;
    case BIASKIT_OPT_INT: printf("%-9.0f", o->default_number); break;
    case BIASKIT_OPT_DOUBLE: printf("%-9g", o->default_number); break;
    case BIASKIT_OPT_STRING: {
        char quoted[128];
        snprintf(quoted, sizeof quoted, "\"%s\"", o->default_string ? o->default_string : "");
        printf("%-9s", quoted);
        break;
    }
    case BIASKIT_OPT_DOUBLE_ARRAY:
    case BIASKIT_OPT_STRING_ARRAY: printf("%-9s", "[]"); break;
    }
}

/* Learnable parameters of an instance made with default options for an 8-head, 1-layer model. */
static void print_parameters(const bk_plugin *p)
{
    const biaskit_plugin *d = p->desc;
    biaskit_config view;
    bk_error e;
    if (bk_config_view_init(&view, d, NULL, (bk_toml_pos){"(defaults)", 0, 0}, d->name, &e))
        return;
    biaskit_geometry geo = {sizeof geo, 1, 8, 256, 32, 256, 256};
    void *inst = NULL;
    biaskit_error pe = {0};
    if (d->create(bk_services(), &view, &geo, &inst, &pe) != BIASKIT_OK) {
        printf("  parameters:   (default options need more: %s)\n", pe.message);
        return;
    }
    if (bk_plugin_check_created(p, inst, &e)) {
        printf("  parameters:   (create() with the default options: %s)\n", e.message);
        return;
    }
    int64_t count = d->param_count ? d->param_count(inst) : 0;
    if (count == 0)
        printf("  parameters:   none with the default options");
    else if (d->capabilities & BIASKIT_CAP_TABLE)
        printf("  parameters:   %lld learnable for 8 heads, %s", (long long)count,
               d->flags & BIASKIT_FLAG_PER_LAYER ? "per layer by default" : "shared across layers by default");
    else /* an embedding or a rotation acts once, so the engine keeps one copy (core/bias/terms.c) */
        printf("  parameters:   %lld learnable for 8 heads, one copy (the term acts once, not per layer)",
               (long long)count);
    biaskit_tensor_info tensors[16];
    int32_t n = count > 0 && d->param_tensors ? d->param_tensors(inst, tensors, 16) : 0;
    for (int32_t i = 0; i < n && i < 16; i++)
        printf("%s %s[%dx%d]", i ? "," : ":", tensors[i].name, tensors[i].rows, tensors[i].cols);
    printf("\n");
    d->destroy(inst);
}

static void print_plugin(const bk_plugin *p)
{
    const biaskit_plugin *d = p->desc;
    char caps[128];
    printf("\n%s %s - %s\n", d->name, d->version, d->summary);
    printf("  file:         %s\n", p->path);
    printf("  capabilities: %s%s\n", bk_capabilities_string(d->capabilities, caps, sizeof caps),
           d->table_cuda ? " (CUDA kernels)" : " (host only)");
    if (d->reference)
        printf("  reference:    %s\n", d->reference);
    print_parameters(p);
    if (!d->n_options) {
        printf("  options:      none\n");
        return;
    }
    printf("  options:\n");
    for (uint32_t i = 0; i < d->n_options; i++) {
        const biaskit_option *o = &d->options[i];
        printf("    %-16s %-12s = ", o->name, bk_option_type_name(o->type));
        print_default(o);
        printf(" %s", o->doc ? o->doc : "");
        if (o->choices) {
            printf(" (");
            for (const char *c = o->choices; *c; c++)
                fputs(*c == '|' ? ", " : (char[2]){*c, 0}, stdout);
            printf(")");
        }
        printf("\n");
    }
}

int bk_cmd_plugins(int argc, char **argv)
{
    static const bk_arg_spec specs[] = {{"help", 0, 0}};
    bk_args args;
    bk_error err;
    if (bk_args_parse(argc, argv, specs, 1, "biaskit plugins", &args, &err))
        return bk_report(&err);
    if (bk_args_get(&args, "help")) {
        fputs(help, stdout);
        return 0;
    }
    bk_registry reg;
    if (bk_registry_init(&reg, &err))
        return bk_report(&err);

    char device[256];
    bk_device_probe(device, sizeof device);
    printf("device: %s\nsearch path:\n", device);
    for (size_t i = 0; i < reg.n_search_dirs; i++)
        printf("  %zu. %s\n", i + 1, reg.search_dirs[i]);

    scan_counts problems = {0, 0};
    int status = 0;
    if (args.n_positional == 0) {
        bk_registry_scan(&reg, on_problem, &problems);
    } else {
        for (size_t i = 0; i < args.n_positional; i++) {
            const bk_plugin *p;
            if (bk_registry_load(&reg, args.positional[i], &p, &err))
                status = bk_report(&err);
        }
    }
    for (size_t i = 0; i < reg.count; i++)
        print_plugin(reg.plugins[i]);
    if (reg.count == 0 && status == 0)
        printf("\nno plugins found\n");
    printf("\n%zu plugin%s", reg.count, reg.count == 1 ? "" : "s");
    if (problems.rejected)
        printf(", %d file%s skipped (see above)", problems.rejected, problems.rejected == 1 ? "" : "s");
    if (problems.shadowed)
        printf(", %d shadowed (see above)", problems.shadowed);
    printf("\n");
    bk_registry_free(&reg);
    return status;
}
