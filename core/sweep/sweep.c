/* The sweep file (docs/sweeps.md): loaded, that is read (parse.c), expanded into runs (variant x corpus
 * x grid point x seed) and each resolved (resolve.c), with its sweep directory; and its help text. The
 * state files of a sweep directory are files.c's; the pieces share sweep_internal.h. */
#define _GNU_SOURCE /* strdup, fnmatch */
#include "sweep/sweep_internal.h"

#include "config/experiment.h"
#include "util/file.h"
#include "util/path.h"

#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
        return bk_fail(err, BK_ERR_INVALID, "sweep file path too long: '%s' (at most %zu bytes with its directory)", path,
                                       sizeof buf - 1);
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
    sw->passkey_trials = 10;
    static const double default_depths[] = {0.0, 0.25, 0.5, 0.75, 1.0};
    sw->n_passkey_depths = (int)(sizeof default_depths / sizeof default_depths[0]);
    for (int k = 0; k < sw->n_passkey_depths; k++)
        sw->passkey_depths[k] = default_depths[k];
    bk_toml_entry e;
    for (size_t i = 0; bk_toml_entry_at(root, i, &e) == 0; i++) {
        rc = BK_OK;
        if (strcmp(e.key, "base") == 0)
            base = e.value;
        else if (strcmp(e.key, "sweep") == 0)
            rc = sw_read_sweep_table(p, e.value, &out_dir, err);
        else if (strcmp(e.key, "eval") == 0)
            rc = sw_read_eval_table(sw, e.value, multiples, &n_multiples, err);
        else if (strcmp(e.key, "grid") == 0) {
            if (bk_toml_type_of(e.value) != BK_TOML_TABLE)
                return sw_wrong(err, e.value, "'grid'", "a table ([grid])");
            rc = sw_read_grid(p, e.value, NULL, 0, err);
        } else if (strcmp(e.key, "variant") == 0)
            variants = e.value;
        else if (strcmp(e.key, "corpus") == 0)
            corpora = e.value;
        else
            return sw_unknown_key(err, e.key_pos, e.key, "the sweep file", keys, 6);
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
            return sw_wrong(err, base, "base", "a path to an experiment file");
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
        if ((rc = sw_flatten(&p->base, base, NULL, NULL, "[base]", &pc, 0, err)))
            return rc;
    } else
        return sw_wrong(err, base, "base", "a path to an experiment file, or a table (an inline experiment)");

    if (variants && (rc = sw_read_groups(variants, "variant", 1, &p->variants, &p->n_variants, &pc, err)))
        return rc;
    if (corpora && (rc = sw_read_groups(corpora, "corpus", 0, &p->corpora, &p->n_corpora, &pc, err)))
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
                    rc = sw_resolve_run(&rs, p->n_variants ? &p->variants[vi] : NULL,
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
    sw_resolver_free(&rs);
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
        sw_run_free(&sw->runs[i]);
    free(sw->runs);
    free(sw->path), free(sw->dir), free(sw->out_dir), free(sw->base);
    sw_priv_free(sw->priv);
    memset(sw, 0, sizeof *sw);
}

int bk_sweep_run_selected(const bk_sweep_run *run, const char *const *patterns, int n)
{
    for (int i = 0; i < n; i++)
        if (fnmatch(patterns[i], run->name, 0) == 0)
            return 1;
    return n <= 0;
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
    "  passkey = [256, 1024]      also passkey retrieval at these lengths (biaskit passkey; >= 101)\n"
    "  passkey_depths = [0, 0.5, 1]  ... at these depths in [0, 1] (default 0, 0.25, 0.5, 0.75, 1)\n"
    "  passkey_trials = 10        ... with this many keys per cell (default 10)\n"
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
