/* Host distance-table benchmark of one table plugin: times its table() and table_backward().
 *
 *   bench_tables [--distances 65536] [--heads 12] [--reps 15] [--plugin-dir DIR]... [--name NAME]
 *                TERM_TOML_LINES...
 *
 *   bench_tables 'plugin = "kerple"\nvariant = "power"'
 *   bench_tables --plugin-dir build/plugins --name qin-nlogn 'plugin = "qin"' 'form = "nlogn"'
 *
 * TERM_TOML_LINES is the body of one [[term]] table: each positional argument is one or more lines, a
 * literal backslash-n inside one is a line break. The term is built as the tests build theirs
 * (tests/term_fixture.h): bk_experiment_parse of
 *     [model]\nlayers = 2\nheads = H\ndim = 8 H\n[[term]]\n + the lines
 * then a registry searching exactly the --plugin-dir directories, in order (without any, the engine's
 * default search: $BIASKIT_PLUGIN_PATH, then this build tree's plugin directory), then bk_terms_create.
 * The file the plugin was loaded from is printed, so that a comparison of two directories can be
 * checked to have loaded what it meant to.
 *
 * When the term has learnable parameters, theta is initialised with the plugin's param_init (seed 1)
 * and param_project. Then, single-threaded, timed with clock_gettime(CLOCK_MONOTONIC) after one untimed
 * warm-up call of each:
 *     `reps` calls of desc->table(instance, theta, D, out, &err)                  (n_heads * D floats)
 *     `reps` calls of desc->table_backward(instance, theta, D, dtable, dtheta, &err)  (with parameters)
 * dtable holds fixed pseudo-random normal values (seed 3); dtheta is zeroed before each call, outside
 * the timed region. The plugin is called directly: no finiteness check, no engine fallback. A
 * checksum of the table (the sum of its values, in double) and of the last gradient is printed, so that
 * two builds of a plugin can be seen to compute the same thing.
 *
 * Exit status: 0; 1 when building the term or a plugin call fails (the message names the plugin, and
 * the option for a bad option); 2 for bad command-line arguments (usage is printed).
 *
 * Last line, machine-readable (backward fields "na" when the term has no parameters):
 *   RESULT name=NAME table_ms_median=... table_ms_min=... backward_ms_median=... backward_ms_min=...
 */
#define _POSIX_C_SOURCE 200809L
#include "bias/terms.h"
#include "config/experiment.h"
#include "plugin/host.h"

#include "bench_util.h"

#include <biaskit/random.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef BK_BENCH_PLUGIN_DIR
#define BK_BENCH_PLUGIN_DIR ""
#endif

#define MAX_DIRS 16

typedef struct options {
    int distances, heads, reps;
    const char *dirs[MAX_DIRS];
    int n_dirs;
    const char *name;
    char *lines; /* the [[term]] body, newline-terminated lines */
} options;

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_tables [--distances D] [--heads H] [--reps N] [--plugin-dir DIR]... [--name NAME]\n"
               "                    TERM_TOML_LINES...\n"
               "  TERM_TOML_LINES: the body of one [[term]] table, one or more arguments, each one or more\n"
               "  lines (a literal \\n is a line break), e.g. 'plugin = \"kerple\"\\nvariant = \"power\"'\n"
               "defaults: --distances 65536 --heads 12 --reps 15; without --plugin-dir: $BIASKIT_PLUGIN_PATH,\n"
               "          then the build tree's plugins (%s)\n",
            *BK_BENCH_PLUGIN_DIR ? BK_BENCH_PLUGIN_DIR : "none compiled in");
}

static int parse_int(const char *flag, const char *s, int min, long max, int *out)
{
    char *end;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || v < min || v > max) {
        fprintf(stderr, "bench_tables: %s expects an integer in [%d, %ld], got '%s'\n", flag, min, max,
                s ? s : "(nothing)");
        return 1;
    }
    *out = (int)v;
    return 0;
}

/* Appends `arg` to o->lines, a literal backslash-n becoming a line break, and ends it with one. */
static int append_lines(options *o, const char *arg)
{
    size_t have = o->lines ? strlen(o->lines) : 0, len = strlen(arg);
    char *grown = realloc(o->lines, have + len + 2);
    if (!grown) {
        fprintf(stderr, "bench_tables: out of memory reading the term's lines\n");
        return 1;
    }
    o->lines = grown;
    char *w = o->lines + have;
    for (const char *r = arg; *r; r++) {
        if (r[0] == '\\' && r[1] == 'n') {
            *w++ = '\n';
            r++;
        } else {
            *w++ = *r;
        }
    }
    if (w == o->lines || w[-1] != '\n')
        *w++ = '\n';
    *w = '\0';
    return 0;
}

/* 0 on success, 2 on a bad argument (after printing why and the usage). */
static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->distances = 65536, o->heads = 12, o->reps = 15;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = -1;
        if (!strcmp(a, "--distances"))
            rc = parse_int(a, v, 1, 1L << 28, &o->distances);
        else if (!strcmp(a, "--heads"))
            rc = parse_int(a, v, 1, 4096, &o->heads);
        else if (!strcmp(a, "--reps"))
            rc = parse_int(a, v, 1, 100000, &o->reps);
        if (rc == 1)
            goto bad;
        if (rc == 0) {
            i++;
            continue;
        }
        if (!strcmp(a, "--plugin-dir") || !strcmp(a, "--name")) {
            if (!v || !*v) {
                fprintf(stderr, "bench_tables: %s expects a value\n", a);
                goto bad;
            }
            if (!strcmp(a, "--name")) {
                o->name = v;
            } else if (o->n_dirs == MAX_DIRS) {
                fprintf(stderr, "bench_tables: at most %d --plugin-dir\n", MAX_DIRS);
                goto bad;
            } else {
                o->dirs[o->n_dirs++] = v;
            }
            i++;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(o->lines);
            exit(0);
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "bench_tables: unknown argument '%s'\n", a);
            goto bad;
        } else if (append_lines(o, a)) {
            goto bad;
        }
    }
    if (!o->lines) {
        fprintf(stderr, "bench_tables: no [[term]] lines given (e.g. 'plugin = \"alibi\"')\n");
        goto bad;
    }
    return 0;
bad:
    usage(stderr);
    free(o->lines);
    o->lines = NULL;
    return 2;
}

/* A one-token name for the RESULT line: NAME with blanks made '_', or the term's lines compacted
 * (plugin=kerple,variant=power). */
static void result_name(const options *o, char *out, size_t size)
{
    size_t n = 0;
    const char *src = o->name ? o->name : o->lines;
    for (const char *r = src; *r && n + 1 < size; r++) {
        char c = *r;
        if (o->name)
            out[n++] = (c == ' ' || c == '\t' || c == '\n') ? '_' : c;
        else if (c == '\n') {
            if (r[1])
                out[n++] = ',';
        } else if (c != ' ' && c != '\t' && c != '"' && c != '\'')
            out[n++] = c;
    }
    out[n] = '\0';
}

int main(int argc, char **argv)
{
    options o;
    if (parse_args(argc, argv, &o))
        return 2;
    char name[256];
    result_name(&o, name, sizeof name);

    size_t text_size = strlen(o.lines) + 128;
    char *text = malloc(text_size);
    if (!text) {
        fprintf(stderr, "bench_tables: out of memory\n");
        free(o.lines);
        return 1;
    }
    snprintf(text, text_size, "[model]\nlayers = 2\nheads = %d\ndim = %d\n[[term]]\n%s", o.heads, o.heads * 8,
             o.lines);

    bk_experiment exp;
    bk_registry reg;
    bk_term_set set;
    memset(&exp, 0, sizeof exp);
    memset(&reg, 0, sizeof reg);
    memset(&set, 0, sizeof set);
    float *theta = NULL, *table = NULL, *dtable = NULL, *dtheta = NULL;
    double *t_table = NULL, *t_back = NULL;
    int status = 1;
    bk_error err = {0};

    if (bk_experiment_parse(text, "bench_tables term", NULL, 0, &exp, &err)) {
        fprintf(stderr, "bench_tables: %s\n  term lines:\n%s", err.message, o.lines);
        goto done;
    }
    if ((o.n_dirs ? bk_registry_init_dirs(&reg, o.dirs, (size_t)o.n_dirs, &err) : bk_registry_init(&reg, &err))) {
        fprintf(stderr, "bench_tables: plugin search path: %s\n", err.message);
        goto done;
    }
    if (bk_terms_create(&set, &exp, &reg, &err)) {
        fprintf(stderr, "bench_tables: %s\n", err.message);
        goto done;
    }
    if (set.n != 1) {
        fprintf(stderr, "bench_tables: expected exactly one [[term]], got %d\n", set.n);
        goto done;
    }
    const bk_term *t = &set.terms[0];
    const biaskit_plugin *desc = t->plugin->desc;
    if (!bk_term_has_table(t) || !desc->table) {
        fprintf(stderr, "bench_tables: plugin %s (%s) has no distance table (BIASKIT_CAP_TABLE)\n", desc->name,
                t->plugin->path);
        goto done;
    }
    const int32_t D = o.distances;
    const size_t H = (size_t)t->n_heads, n = H * (size_t)D;
    const size_t P = t->n_params > 0 && t->theta ? (size_t)t->n_params : 0;
    if (P && !desc->table_backward) {
        fprintf(stderr, "bench_tables: plugin %s (%s): %zu learnable parameters but no table_backward\n",
                desc->name, t->plugin->path, P);
        goto done;
    }
    table = malloc(sizeof *table * n);
    t_table = malloc(sizeof *t_table * (size_t)o.reps);
    t_back = malloc(sizeof *t_back * (size_t)o.reps);
    if (P) {
        theta = malloc(sizeof *theta * P);
        dtheta = malloc(sizeof *dtheta * P);
        dtable = malloc(sizeof *dtable * n);
    }
    if (!table || !t_table || !t_back || (P && (!theta || !dtheta || !dtable))) {
        fprintf(stderr, "bench_tables: out of memory for %zu x %d tables\n", H, (int)D);
        goto done;
    }
    biaskit_error pe = {0, ""};
    if (P) {
        if (!desc->param_init) {
            fprintf(stderr, "bench_tables: plugin %s (%s): %zu parameters but no param_init\n", desc->name,
                    t->plugin->path, P);
            goto done;
        }
        if (desc->param_init(t->instance, theta, 1, &pe) != BIASKIT_OK) {
            fprintf(stderr, "bench_tables: plugin %s (%s): param_init(): %s\n", desc->name, t->plugin->path,
                    pe.message);
            goto done;
        }
        if (desc->param_project)
            desc->param_project(t->instance, theta);
        biaskit_rng rng = biaskit_rng_seeded(3);
        for (size_t i = 0; i < n; i++)
            dtable[i] = (float)biaskit_rng_normal(&rng);
    }

    printf("bench_tables: %s\n  plugin %s %s from %s\n  heads %zu, distances %d, parameters %zu, reps %d\n",
           name, desc->name, desc->version ? desc->version : "", t->plugin->path, H, (int)D, P, o.reps);

    /* table(): one warm-up call, then reps timed ones */
    if (desc->table(t->instance, theta, D, table, &pe) != BIASKIT_OK) {
        fprintf(stderr, "bench_tables: plugin %s (%s): table(): %s\n", desc->name, t->plugin->path, pe.message);
        goto done;
    }
    double table_sum = 0.0;
    for (size_t i = 0; i < n; i++)
        table_sum += table[i];
    for (int r = 0; r < o.reps; r++) {
        double t0 = now();
        int rc = desc->table(t->instance, theta, D, table, &pe);
        t_table[r] = 1e3 * (now() - t0);
        if (rc != BIASKIT_OK) {
            fprintf(stderr, "bench_tables: plugin %s (%s): table(): %s\n", desc->name, t->plugin->path,
                    pe.message);
            goto done;
        }
    }
    double table_med = median_sorted(t_table, o.reps), table_min = t_table[0];
    printf("  table():          median %9.3f ms  min %9.3f ms  (checksum %.9g)\n", table_med, table_min, table_sum);

    char back_med_s[32] = "na", back_min_s[32] = "na";
    if (P) {
        memset(dtheta, 0, sizeof *dtheta * P);
        if (desc->table_backward(t->instance, theta, D, dtable, dtheta, &pe) != BIASKIT_OK) {
            fprintf(stderr, "bench_tables: plugin %s (%s): table_backward(): %s\n", desc->name, t->plugin->path,
                    pe.message);
            goto done;
        }
        for (int r = 0; r < o.reps; r++) {
            memset(dtheta, 0, sizeof *dtheta * P);
            double t0 = now();
            int rc = desc->table_backward(t->instance, theta, D, dtable, dtheta, &pe);
            t_back[r] = 1e3 * (now() - t0);
            if (rc != BIASKIT_OK) {
                fprintf(stderr, "bench_tables: plugin %s (%s): table_backward(): %s\n", desc->name,
                        t->plugin->path, pe.message);
                goto done;
            }
        }
        double grad_sum = 0.0;
        for (size_t i = 0; i < P; i++)
            grad_sum += dtheta[i];
        double back_med = median_sorted(t_back, o.reps), back_min = t_back[0];
        printf("  table_backward(): median %9.3f ms  min %9.3f ms  (checksum %.9g)\n", back_med, back_min,
               grad_sum);
        snprintf(back_med_s, sizeof back_med_s, "%.4f", back_med);
        snprintf(back_min_s, sizeof back_min_s, "%.4f", back_min);
    } else {
        printf("  table_backward(): no parameters\n");
    }
    printf("RESULT name=%s table_ms_median=%.4f table_ms_min=%.4f backward_ms_median=%s backward_ms_min=%s\n", name,
           table_med, table_min, back_med_s, back_min_s);
    status = 0;

done:
    free(theta), free(table), free(dtable), free(dtheta), free(t_table), free(t_back);
    bk_terms_free(&set);
    bk_registry_free(&reg);
    bk_experiment_free(&exp);
    free(text);
    free(o.lines);
    return status;
}
