/* biaskit sweep, inside: what the files of core/sweep/ that read a sweep file and keep its directory
 * (sweep.h) share. Nothing here is part of the engine's interface; every function is prefixed sw_.
 *
 *   toml_text.c  a growable string, and experiment TOML written from nodes (values, whole documents)
 *   parse.c      the parsed sweep file: its tables read into assignments, variants, corpora and a grid
 *   resolve.c    the resolution of one run through the experiment layer, its terms checked by the plugins
 *   sweep.c      loading: the sweep file read, expanded into runs and resolved; its help text
 *   files.c      the files of the sweep directory: the lock, sweep.json, status.json, experiment.toml */
#ifndef BK_SWEEP_INTERNAL_H
#define BK_SWEEP_INTERNAL_H

#include "sweep/sweep.h"

#include "config/toml.h"
#include "plugin/host.h"

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------------------------------
 * toml_text.c: a growable string, and TOML text from nodes
 * ---------------------------------------------------------------------------------------------- */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

void sw_sb_add(sbuf *b, const char *text, size_t n);
void sw_sb_puts(sbuf *b, const char *text);
__attribute__((format(printf, 2, 3))) void sw_sb_printf(sbuf *b, const char *fmt, ...);
char *sw_sb_take(sbuf *b);

/* Where relative paths inside values are read from while writing them out. */
typedef struct path_ctx {
    const char *sweep_dir;  /* paths written in the sweep file (and its set strings) */
    const char *base_file;  /* the base file's source name: its values are read from base_dir */
    const char *base_dir;
} path_ctx;

/* Path-valued keys of an experiment: [data] paths and val_paths, and a [[term]] plugin given as a path. */
enum { NOT_PATH = 0, PATH_LIST = 1, PLUGIN_PATH = 2 };

int sw_path_kind(const char *section, const char *key);
/* A value as inline TOML (a path of kind PATH_LIST or PLUGIN_PATH made absolute, as `pc` says). */
void sw_put_value(sbuf *b, const bk_toml_node *node, int kind, const path_ctx *pc);
char *sw_document_text(const bk_toml_node *root, const path_ctx *pc);

/* ------------------------------------------------------------------------------------------------
 * parse.c: the parsed sweep file
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

void sw_priv_free(sweep_priv *p);
int sw_wrong(bk_error *err, const bk_toml_node *node, const char *where, const char *expected);
int sw_unknown_key(bk_error *err, bk_toml_pos pos, const char *key, const char *where,
                   const char *const *names, size_t n);
char *sw_assignment_text(const char *key, const bk_toml_node *value, int kind, const path_ctx *pc);
int sw_flatten(assign_list *out, const bk_toml_node *table, const char *prefix, const char *section,
               const char *label, const path_ctx *pc, int depth, bk_error *err);
int sw_read_groups(const bk_toml_node *array, const char *what, int allow_term, group **out, int *n_out,
                   const path_ctx *pc, bk_error *err);
int sw_read_grid(sweep_priv *p, const bk_toml_node *table, const char *prefix, int depth, bk_error *err);
int sw_read_sweep_table(sweep_priv *p, const bk_toml_node *t, const char **out_dir, bk_error *err);
int sw_read_eval_table(bk_sweep *sw, const bk_toml_node *t, int64_t *multiples, int *n_multiples, bk_error *err);

/* ------------------------------------------------------------------------------------------------
 * resolve.c: the resolution of one run
 * ---------------------------------------------------------------------------------------------- */

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

void sw_resolver_free(resolver *rs);
int sw_resolve_run(resolver *rs, const group *v, const group *c, const int *point, int seed_i,
                   bk_sweep_run *run, bk_error *err);
void sw_run_free(bk_sweep_run *r);

#endif
