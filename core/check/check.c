/* biaskit check (check/check.h): the options, the default configuration, and the order in which
 * the checks run. */
#include "check/internal.h"

#include "config/experiment.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bk_check_options_default(bk_check_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->layers = 2;
    opt->heads = 12;
    opt->dim = 192;
    opt->vocab = 256;
    opt->length = 128;
    opt->max_distances = 65536;
    opt->max_distance = 1 << 20;
    opt->n_seeds = 3;
    opt->seed = 20240611;
    opt->timeout_s = 60;
    opt->tolerance = BK_CHECK_TOLERANCE;
}

static int usage_error(bk_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(bk_error *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bk_vfail(err, BK_ERR_USAGE, fmt, ap);
    va_end(ap);
    return BK_ERR_USAGE;
}

/* An error of reading the configuration, as a usage error naming the command. */
static int as_usage_error(bk_error *err)
{
    bk_error_prefix(err, "biaskit check: ");
    err->code = BK_ERR_USAGE;
    return BK_ERR_USAGE;
}

static int check_options_valid(const bk_check_options *o, bk_error *err)
{
    if (o->max_distance < 1 || o->max_distance > (1 << 26))
        return usage_error(err, "biaskit check: --max-distance must be in 1 .. %d (got %d)", 1 << 26, o->max_distance);
    if (o->max_distances < 1 || o->n_seeds < 1 || o->timeout_s < 1)
        return usage_error(err, "biaskit check: distances, seeds and time limit must be positive (got %d, %d, %u)",
                           o->max_distances, o->n_seeds, o->timeout_s);
    if (!(o->tolerance > 0.0) || !isfinite(o->tolerance))
        return usage_error(err, "biaskit check: --tolerance must be a finite number > 0 (got %g)", o->tolerance);
    if (o->n_params < 0 || (o->n_params > 0) != (o->params != NULL))
        return usage_error(err, "biaskit check: --params: %lld values and %s (expected both or neither)",
                           (long long)o->n_params, o->params ? "a value array" : "no value array");
    for (int64_t i = 0; i < o->n_params; i++)
        if (!isfinite(o->params[i]))
            return usage_error(err, "biaskit check: --params: value %lld is %g (expected finite numbers)",
                               (long long)i + 1, (double)o->params[i]);
    for (size_t i = 0; i < o->n_sets; i++) {
        const char *eq = strchr(o->sets[i], '=');
        if (!eq || eq == o->sets[i])
            return usage_error(err, "--set '%s': expected KEY=VALUE, KEY one of the plugin's options", o->sets[i]);
    }
    return BK_OK;
}

/* The default configuration: an experiment with the geometry and one [[term]] carrying the --set
 * options, checked against the plugin's declarations like any experiment file. */
static int open_config(checker *c, bk_error *err)
{
    const bk_check_options *o = c->opt;
    strbuf text = {0};
    ck_sb_printf(&text, "[model]\nlayers = %d\nheads = %d\ndim = %d\nvocab = %d\n[train]\nlength = %d\n[[term]]\n"
                 "plugin = \"%s\"\n", o->layers, o->heads, o->dim, o->vocab, o->length, c->d->name);
    c->exp_text = text.s;
    c->overrides = calloc(o->n_sets + 1, sizeof *c->overrides);
    if (!c->exp_text || !c->overrides)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < o->n_sets; i++) {
        strbuf b = {0};
        ck_sb_printf(&b, "term.0.%s", o->sets[i]);
        if (!(c->overrides[c->n_overrides++] = b.s))
            return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    }
    int rc = bk_experiment_parse(c->exp_text, "(biaskit check)", (const char *const *)c->overrides, c->n_overrides,
                                 &c->exp, err);
    if (rc)
        return as_usage_error(err);
    c->have_exp = 1;
    char label[128];
    snprintf(label, sizeof label, "[[term]] (%s)", c->d->name);
    if (bk_config_view_init(&c->view, c->d, c->exp.terms[0].table, c->exp.terms[0].pos, label, err))
        return as_usage_error(err);
    c->geo = (biaskit_geometry){sizeof(biaskit_geometry), o->layers, o->heads, o->dim, o->dim / o->heads, o->vocab,
                                o->length};
    return BK_OK;
}

static void close_config(checker *c)
{
    if (c->have_exp)
        bk_experiment_free(&c->exp);
    for (size_t i = 0; i < c->n_overrides; i++)
        free(c->overrides[i]);
    free(c->overrides);
    free(c->exp_text);
}

typedef struct unit {
    const char *id, *what;
    uint32_t needs; /* a capability, or 0 */
    child_fn fn;
} unit;

static const unit units[] = {
    {"table-finite", "table checks", BIASKIT_CAP_TABLE, ck_unit_tables},
    {"long-range", "long-range table checks", BIASKIT_CAP_TABLE, ck_unit_longrange},
    {"table-gradient", "table gradient", BIASKIT_CAP_TABLE, ck_unit_table_gradient},
    {"coordinate-points", "coordinate checks", BIASKIT_CAP_COORDINATE, ck_unit_coordinate},
    {"long-range-coordinate", "long-range coordinate checks", BIASKIT_CAP_COORDINATE, ck_unit_longrange_coordinate},
    {"grid-gradient", "grid gradient", BIASKIT_CAP_COORDINATE, ck_unit_grid_gradient},
    {"coordinate-gradient", "coordinate gradient", BIASKIT_CAP_COORDINATE, ck_unit_coordinate_gradient},
    {"scale", "scale checks", BIASKIT_CAP_SCALE, ck_unit_scale},
    {"long-range-scale", "long-range scale checks", BIASKIT_CAP_SCALE, ck_unit_longrange_scale},
    {"scale-gradient", "scale gradient", BIASKIT_CAP_SCALE, ck_unit_scale_gradient},
    {"content", "content checks", BIASKIT_CAP_CONTENT, ck_unit_content},
    {"long-range-content", "long-range content checks", BIASKIT_CAP_CONTENT, ck_unit_longrange_content},
    {"content-gradient", "content gradient", BIASKIT_CAP_CONTENT, ck_unit_content_gradient},
    {"count", "count checks", BIASKIT_CAP_COUNT, ck_unit_count},
    {"count-gradient", "count gradient", BIASKIT_CAP_COUNT, ck_unit_count_gradient},
    {"mask", "mask checks", BIASKIT_CAP_MASK, ck_unit_mask},
    {"long-range-mask", "long-range mask checks", BIASKIT_CAP_MASK, ck_unit_longrange_mask},
    {"embed", "embed checks", BIASKIT_CAP_EMBED, ck_unit_embed},
    {"embed-gradient", "embed gradient", BIASKIT_CAP_EMBED, ck_unit_embed_gradient},
    {"segment", "segment checks", BIASKIT_CAP_SEGMENT, ck_unit_segment},
    {"rotary", "rotary checks", BIASKIT_CAP_ROTARY, ck_unit_rotary},
    {"long-range-rotary", "long-range rotary_ctx checks", BIASKIT_CAP_ROTARY, ck_unit_longrange_rotary},
    {"project", "project checks", 0, ck_unit_project},
    {"param-info", "param_info checks", 0, ck_unit_param_info},
    {"determinism", "determinism checks", 0, ck_unit_determinism},
    {"cuda-table", "CUDA checks", BIASKIT_CAP_TABLE, ck_unit_cuda},
    {"cuda-embed", "CUDA embedding checks", BIASKIT_CAP_EMBED, ck_unit_cuda_embed},
};

static int run_checks(checker *c, bk_error *err)
{
    int rc, created = 0;
    if ((rc = ck_run_unit(c, "create", "create() with the default configuration", ck_unit_create, NULL, &created, err)))
        return rc;
    if ((rc = ck_probe_geometries(c, err)))
        return rc;
    for (uint32_t i = 0; i < c->d->n_options && !rc; i++)
        rc = ck_probe_option(c, &c->d->options[i], err);
    if (rc)
        return rc;
    if (!created) {
        ck_item(c, BK_CHECK_SKIP, "remaining", "tables, coordinates, scales, masks, gradients, project, determinism "
                "and CUDA: create() with the default configuration failed");
        return BK_OK;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0] && !rc; i++)
        if (!units[i].needs || (c->d->capabilities & units[i].needs))
            rc = ck_run_unit(c, units[i].id, units[i].what, units[i].fn, NULL, NULL, err);
    return rc ? rc : ck_check_fresh_memory(c, err);
}

/* In a child: param_count() of the default configuration, as an R line (nothing when create() fails:
 * the create item says why). */
static void count_params(checker *c, const void *arg)
{
    (void)arg;
    instance in;
    char why[BIASKIT_ERROR_MESSAGE_MAX + 128], text[32];
    if (ck_instance_create(c, &c->view, &c->geo, &in, why, sizeof why))
        return;
    snprintf(text, sizeof text, "%lld", (long long)in.n_params);
    ck_child_line(c, 'R', "param_count", text);
    ck_instance_close(&in);
}

static void read_count(checker *c, char tag, const char *id, const char *text, void *ctx)
{
    (void)c;
    if (tag == 'R' && strcmp(id, "param_count") == 0)
        *(long long *)ctx = strtoll(text, NULL, 10);
}

/* --params must give exactly param_count() values: a usage error naming both counts, before any item. */
static int check_params_count(checker *c, bk_error *err)
{
    if (!c->opt->params)
        return BK_OK;
    child_result r;
    long long count = -1;
    int rc = ck_run_child(c, count_params, NULL, &r, err);
    if (rc)
        return rc;
    ck_for_each_line(c, &r, read_count, &count);
    free(r.output.s);
    long long n = (long long)c->opt->n_params;
    if (count == 0)
        return usage_error(err, "biaskit check: --params: %s has no parameters with this configuration "
                           "(param_count() is 0): leave --params out", c->d->name);
    if (count > 0 && count != n)
        return usage_error(err, "biaskit check: --params: %lld value%s given, but %s has %lld parameters with this "
                           "configuration (param_count()): expected %lld comma-separated numbers", n,
                           n == 1 ? "" : "s", c->d->name, count, count);
    return BK_OK;
}

typedef struct load_job {
    bk_registry *reg;
    const char *name_or_path;
} load_job;

/* In the child: everything bk_registry_load does (dlopen and the constructors, the entry point, the
 * descriptor read and validated); the child's registry is thrown away with it. */
static int load_in_child(void *ctx, FILE *out, bk_error *err)
{
    (void)out;
    const load_job *job = ctx;
    const bk_plugin *p;
    return bk_registry_load(job->reg, job->name_or_path, &p, err);
}

/* The plugin loaded into `reg`, but only after a child process loaded it first, within the time
 * limit: a constructor or an entry point that crashes, calls exit() or never returns, an entry symbol
 * that is not a function, a descriptor that cannot be read, is an error naming the file and the stage
 * (plugin/host.h), and this process never runs that code. */
static int load_plugin(bk_registry *reg, const char *name_or_path, unsigned timeout_s, const bk_plugin **out,
                       bk_error *err)
{
    load_job job = {reg, name_or_path};
    char what[600];
    snprintf(what, sizeof what, "loading plugin '%s'", name_or_path);
    int rc = bk_plugin_isolate(load_in_child, &job, timeout_s, what, NULL, err);
    return rc ? rc : bk_registry_load(reg, name_or_path, out, err);
}

int bk_check_plugin(bk_registry *reg, const char *name_or_path, const bk_check_options *opt,
                    bk_check_report_fn report, void *ctx, bk_check_counts *counts, bk_error *err)
{
    memset(counts, 0, sizeof *counts);
    int rc = check_options_valid(opt, err);
    if (rc)
        return rc;
    checker c = {.opt = opt, .report = report, .ctx = ctx, .counts = counts, .out_fd = -1};
    bk_error load_err;
    if (load_plugin(reg, name_or_path, opt->timeout_s, &c.plugin, &load_err)) {
        ck_item(&c, BK_CHECK_FAIL, "load", "%s", load_err.message);
        return BK_OK;
    }
    c.d = c.plugin->desc;
    if ((rc = open_config(&c, err)) == BK_OK && (rc = check_params_count(&c, err)) == BK_OK) {
        /* a bad --set or --params is reported before any check */
        ck_item(&c, BK_CHECK_PASS, "load", "loads: %s %s from %s (ABI %u, descriptor %u bytes)", c.d->name,
                c.d->version, c.plugin->path, c.d->abi_version, c.d->struct_size);
        ck_check_descriptor(&c);
        rc = run_checks(&c, err);
    }
    close_config(&c);
    return rc;
}
