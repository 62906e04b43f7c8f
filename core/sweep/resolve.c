/* The sweep file, one run resolved (sweep_internal.h): the base and the sweep's assignments composed
 * and validated by the experiment layer (an error names the sweep file's line), the run named and its
 * experiment text written, its variant's eval_set judged, and its terms checked by the plugins in a
 * child process. */
#define _GNU_SOURCE /* strdup, MAP_ANONYMOUS */
#include "sweep/sweep_internal.h"

#include "bias/terms.h"
#include "config/experiment.h"
#include "plugin/services.h"
#include "train/checkpoint.h" /* bk_checkpoint_eval_refusal */

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* An error of the experiment layer about an assignment ("--set TEXT: ...", "--set 'TEXT': ...") is
 * re-worded to name where the sweep file made it; any other gets the run's name. */
static int map_error(bk_error *err, const assign *const *as, int n, const char *who)
{
    char *msg = strdup(err->message);
    if (!msg)
        return err->code;
    for (int i = 0; i < n; i++) {
        const assign *a = as[i];
        size_t tn = strlen(a->text);
        const char *rest = NULL, *at = NULL;
        /* at the start of the message, or inside it (a plugin's refusal is wrapped: "term 'x' (plugin
         * ...): create() failed: --set TEXT:1:41: ...") */
        for (const char *p = strstr(msg, "--set "); p && !rest; p = strstr(p + 1, "--set ")) {
            if (strncmp(p + 6, a->text, tn) == 0 && p[6 + tn] == ':') {
                rest = p + 6 + tn + 1;
                /* :LINE:COL of the position inside the assignment */
                const char *r = rest;
                for (int k = 0; k < 2 && *r >= '0' && *r <= '9'; k++) {
                    while (*r >= '0' && *r <= '9')
                        r++;
                    if (*r == ':')
                        rest = ++r;
                }
            } else if (p[6] == '\'' && strncmp(p + 7, a->text, tn) == 0 && strncmp(p + 7 + tn, "':", 2) == 0) {
                rest = p + 7 + tn + 2;
            }
            at = p;
        }
        if (!rest)
            continue;
        while (*rest == ' ')
            rest++;
        bk_fail_at(err, err->code == BK_ERR_USAGE ? BK_ERR_CONFIG : err->code, a->pos, "%s, %s, '%s': %.*s%s", who,
                   a->label, a->text, (int)(at - msg), msg, rest);
        free(msg);
        return err->code;
    }
    bk_fail(err, err->code == BK_ERR_USAGE ? BK_ERR_CONFIG : err->code, "%s (resolving %s)", msg, who);
    free(msg);
    return err->code;
}

static void sanitize(char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-' || *s == '.' || *s == '+'))
            *s = '_';
}

/* The value text of a grid value: a string as it is, anything else as TOML. */
static char *value_text(const bk_toml_node *v)
{
    if (bk_toml_type_of(v) == BK_TOML_STRING)
        return strdup(bk_toml_string(v));
    sbuf b = {0};
    sw_put_value(&b, v, NOT_PATH, NULL);
    return sw_sb_take(&b);
}

void bk_sweep_data_name(const char *const *paths, int n, char *out, size_t size)
{
    sbuf b = {0};
    for (int i = 0; i < n; i++) {
        const char *p = paths[i];
        size_t len = strlen(p);
        while (len > 1 && p[len - 1] == '/')
            len--;
        size_t start = len;
        while (start > 0 && p[start - 1] != '/')
            start--;
        size_t end = len;
        for (size_t k = len; k > start + 1; k--)
            if (p[k - 1] == '.') { /* a file's extension: "wiki.train.txt" -> "wiki.train" */
                end = k - 1;
                break;
            }
        if (end > start) {
            if (b.n)
                sw_sb_puts(&b, "+");
            sw_sb_add(&b, p + start, end - start);
        }
    }
    char *text = sw_sb_take(&b);
    if (!text || !*text)
        snprintf(out, size, "%s", n ? "data" : "base");
    else {
        sanitize(text);
        snprintf(out, size, "%.48s", text);
    }
    free(text);
}

void sw_run_free(bk_sweep_run *r)
{
    free(r->name), free(r->dir), free(r->text), free(r->invalid), free(r->eval_set_json), free(r->corpus_owned);
    for (int i = 0; i < r->n_eval_sets; i++)
        free(r->eval_sets[i]);
    free(r->eval_sets);
    for (int i = 0; i < r->n_grid; i++)
        free(r->grid_keys[i]), free(r->grid_values[i]);
    free(r->grid_keys), free(r->grid_values);
    for (int i = 0; i < r->n_sets; i++)
        free(r->sets[i]);
    free(r->sets);
    memset(r, 0, sizeof *r);
}

void sw_resolver_free(resolver *rs)
{
    if (rs->reg_ready)
        bk_registry_free(&rs->reg);
    rs->reg_ready = 0;
    for (int i = 0; i < rs->n_answers; i++)
        free(rs->answers[i].key), free(rs->answers[i].message);
    free(rs->answers);
    rs->answers = NULL;
    rs->n_answers = 0;
    if (rs->at)
        munmap((void *)rs->at, sizeof *rs->at);
    rs->at = NULL;
}

/* What bk_terms_create sees of an experiment besides the seed: the model's geometry, the attention
 * section and the [[term]] list (paths in it are absolute or read from one directory per sweep). */
static char *check_key(const bk_experiment *exp)
{
    sbuf b = {0};
    sw_sb_printf(&b, "%lld %lld %lld %lld %lld %lld %lld|", (long long)exp->model.layers, (long long)exp->model.heads,
              (long long)exp->model.dim, (long long)exp->model.vocab, (long long)exp->train.length,
              (long long)exp->attention.mixing, (long long)bk_experiment_head_dim(exp));
    const bk_toml_node *root = bk_toml_root(exp->doc), *v;
    if ((v = bk_toml_get(root, "attention")))
        sw_put_value(&b, v, NOT_PATH, NULL);
    sw_sb_puts(&b, "|");
    if ((v = bk_toml_get(root, "term")))
        sw_put_value(&b, v, NOT_PATH, NULL);
    return sw_sb_take(&b);
}

typedef struct term_check {
    const bk_experiment *exp;
    bk_registry *reg;
    volatile int *at;
} term_check;

/* In the child: each term alone first (its create(), param_init(): what a plugin can crash in),
 * with `at` naming it, then the whole list as the training creates it, whose answer is returned. */
static int check_terms_child(void *ctx, FILE *out, bk_error *err)
{
    (void)out;
    const term_check *tc = ctx;
    /* a probe: what a plugin says it does (info lines) is for the run's own log, not the sweep's */
    bk_set_log_level(BIASKIT_LOG_WARN);
    bk_experiment one = *tc->exp;
    for (int i = 0; i < tc->exp->n_terms; i++) {
        *tc->at = i;
        one.terms = &tc->exp->terms[i];
        one.n_terms = 1;
        bk_term_set set;
        bk_error ignored; /* a refusal of a term alone may be the list's (roles, weights): the list answers */
        if (bk_terms_create(&set, &one, tc->reg, &ignored) == BK_OK)
            bk_terms_free(&set);
    }
    *tc->at = -1;
    bk_term_set set;
    int rc = bk_terms_create(&set, tc->exp, tc->reg, err);
    if (rc == BK_OK)
        bk_terms_free(&set);
    return rc;
}

/* The plugins' answer for `exp` (cached by check_key); NULL with err set when no child can be started. */
static const term_answer *check_terms(resolver *rs, const bk_experiment *exp, bk_error *err)
{
    char *key = check_key(exp);
    if (!key) {
        bk_fail(err, BK_ERR_NOMEM, "out of memory checking the terms of the runs");
        return NULL;
    }
    for (int i = 0; i < rs->n_answers; i++)
        if (strcmp(rs->answers[i].key, key) == 0) {
            free(key);
            return &rs->answers[i];
        }
    term_answer *grown = realloc(rs->answers, (size_t)(rs->n_answers + 1) * sizeof *grown);
    if (!grown) {
        free(key);
        bk_fail(err, BK_ERR_NOMEM, "out of memory checking the terms of the runs");
        return NULL;
    }
    rs->answers = grown;
    if (!rs->reg_ready) {
        if (bk_registry_init(&rs->reg, err)) {
            free(key);
            return NULL;
        }
        rs->reg_ready = 1;
    }
    rs->reg.relative_to = rs->p->base_dir ? rs->p->base_dir : rs->sw->dir;
    if (!rs->at) {
        void *shared = mmap(NULL, sizeof *rs->at, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (shared == MAP_FAILED) {
            free(key);
            bk_fail(err, BK_ERR_INTERNAL, "cannot map memory to share with a child process: %s", strerror(errno));
            return NULL;
        }
        rs->at = shared;
    }
    *rs->at = -1;
    term_check tc = {exp, &rs->reg, rs->at};
    unsigned timeout = rs->o && rs->o->plugin_timeout_s ? rs->o->plugin_timeout_s : BK_SWEEP_PLUGIN_TIMEOUT_S;
    bk_isolated res;
    bk_error cerr;
    bk_error_clear(&cerr);
    int rc = bk_plugin_isolate(check_terms_child, &tc, timeout, "the check of the run's terms", &res, &cerr);
    free(res.output);
    if (rc != BK_OK && !res.finished && rc != BK_ERR_PLUGIN) { /* no child: the sweep cannot check its runs */
        free(key);
        *err = cerr;
        return NULL;
    }
    term_answer *a = &rs->answers[rs->n_answers];
    memset(a, 0, sizeof *a);
    a->key = key;
    a->rc = rc;
    a->died = rc != BK_OK && !res.finished;
    a->term = a->died ? *rs->at : -1;
    if (!(a->message = strdup(rc ? cerr.message : ""))) {
        free(key);
        bk_fail(err, BK_ERR_NOMEM, "out of memory checking the terms of the runs");
        return NULL;
    }
    rs->n_answers++;
    return a;
}

/* The plugins' refusal of a run's terms (`answer`, for experiment `e` composed of the assignments `as`)
 * as the run's `invalid` text, naming the sweep file's line; `when`: "training" or what else ran. */
static int refusal_text(const term_answer *answer, const bk_experiment *e, const assign *const *as, int n,
                        const char *who, const char *when, char **invalid, bk_error *err)
{
    bk_error perr;
    bk_error_clear(&perr);
    if (!answer->died) {
        perr.code = answer->rc;
        bk_copy_text(perr.message, sizeof perr.message, answer->message);
    } else if (answer->term >= 0 && answer->term < e->n_terms) {
        const bk_term_config *t = &e->terms[answer->term];
        bk_fail_at(&perr, BK_ERR_PLUGIN, t->pos,
                   "[[term]] #%d (%s): %s, when the sweep checked the term (in a child process, before %s); "
                   "'biaskit check %s' tests the plugin",
                   t->index, t->plugin, answer->message, when, t->plugin);
    } else
        bk_fail(&perr, BK_ERR_PLUGIN, "%s, when the sweep checked the terms (in a child process, before %s)",
                answer->message, when);
    map_error(&perr, as, n, who);
    if (!(*invalid = strdup(perr.message)))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
    return BK_OK;
}

#define EVAL_SET_MAX_CHANGES 64 /* keys one eval_set string may change (a whole table at once) */

/* The evaluation's experiment of a run whose variant has an eval_set: the run's assignments `as` (n,
 * `texts` their text) and then each eval_set string, appended there (the arrays have room), read by
 * the experiment layer (an error names the string's line and column) and judged by what it changes,
 * as `biaskit eval --set` judges it on the run's checkpoint: a change eval refuses is an error here,
 * before anything trains. `trained`: the experiment of the first n. */
static int resolve_eval_sets(const resolver *rs, const group *v, const assign **as, const char **texts, int n,
                             const bk_experiment *trained, const char *who, bk_experiment *out, bk_error *err)
{
    bk_experiment prev;
    int have_prev = 0;
    bk_experiment_change *changes = malloc(EVAL_SET_MAX_CHANGES * sizeof *changes);
    if (!changes)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
    int rc = BK_OK;
    for (int i = 0; i < v->eval_sets.n && !rc; i++) {
        const assign *a = &v->eval_sets.items[i];
        as[n + i] = a;
        texts[n + i] = a->text;
        bk_experiment next;
        if ((rc = bk_experiment_parse(rs->p->base_text, rs->base_source, texts, (size_t)(n + i + 1), &next, err))) {
            map_error(err, as, n + i + 1, who);
            break;
        }
        int k = bk_experiment_diff(have_prev ? &prev : trained, &next, changes, EVAL_SET_MAX_CHANGES);
        if (k > EVAL_SET_MAX_CHANGES) /* none may go unjudged */
            rc = bk_fail_at(err, BK_ERR_CONFIG, a->pos,
                            "%s, %s, '%s': it changes %d keys at once, more than the %d judged one by one; give them "
                            "as separate strings",
                            who, a->label, a->text, k, EVAL_SET_MAX_CHANGES);
        for (int c = 0; c < k && c < EVAL_SET_MAX_CHANGES && !rc; c++) {
            const char *why = bk_checkpoint_eval_refusal(&changes[c]);
            if (why)
                rc = bk_fail_at(err, BK_ERR_CONFIG, a->pos,
                                "%s, %s, '%s': it changes %s (%s when trained, %s when evaluated), which `biaskit "
                                "eval --set` refuses: %s; an eval_set may change [data] and [run] keys and a "
                                "plugin's own options",
                                who, a->label, a->text, changes[c].where, changes[c].before, changes[c].after, why);
        }
        if (have_prev)
            bk_experiment_free(&prev);
        prev = next;
        have_prev = 1;
    }
    free(changes);
    if (rc) {
        if (have_prev)
            bk_experiment_free(&prev);
        return rc;
    }
    *out = prev;
    return BK_OK;
}

/* The run's copy of its variant's eval_set, and the same as a JSON array (bk_run_status eval_set). */
static int keep_eval_sets(bk_sweep_run *run, const group *v, bk_error *err)
{
    cJSON *arr = cJSON_CreateArray();
    int ok = arr && (run->eval_sets = calloc((size_t)v->eval_sets.n, sizeof *run->eval_sets));
    for (int i = 0; ok && i < v->eval_sets.n; i++) {
        ok = (run->eval_sets[i] = strdup(v->eval_sets.items[i].text)) &&
             cJSON_AddItemToArray(arr, cJSON_CreateString(v->eval_sets.items[i].text));
        run->n_eval_sets += run->eval_sets[i] != NULL;
    }
    char *json = ok ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    if (json && strlen(json) >= BK_SWEEP_EVAL_SET_JSON_MAX) { /* control characters, escaped 6 bytes each */
        cJSON_free(json);
        return bk_fail_at(err, BK_ERR_CONFIG, v->eval_sets.items[0].pos,
                          "variant '%s' eval_set: written as JSON (status.json) it is longer than %d bytes; "
                          "expected shorter strings",
                          v->name, BK_SWEEP_EVAL_SET_JSON_MAX - 1);
    }
    run->eval_set_json = json ? strdup(json) : NULL;
    cJSON_free(json);
    if (!run->eval_set_json)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
    return BK_OK;
}

/* Resolve the run of (variant, corpus, grid point, seed index); seed index -1: the base's seed. */
int sw_resolve_run(resolver *rs, const group *v, const group *c, const int *point, int seed_i,
                   bk_sweep_run *run, bk_error *err)
{
    sweep_priv *p = rs->p;
    int cap = p->base.n + p->common.n + (v ? v->sets.n + v->eval_sets.n : 0) + (c ? c->sets.n : 0) + p->n_grid + 1;
    const assign **as = calloc((size_t)cap, sizeof *as);
    const char **texts = calloc((size_t)cap, sizeof *texts);
    assign *extra = calloc((size_t)p->n_grid + 1, sizeof *extra); /* seed and grid assignments */
    int n = 0, n_extra = 0, rc = BK_OK;
    memset(run, 0, sizeof *run);
    if (!as || !texts || !extra) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
        goto out;
    }
    for (int i = 0; i < p->base.n; i++)
        as[n++] = &p->base.items[i];
    for (int i = 0; i < p->common.n; i++)
        as[n++] = &p->common.items[i];
    for (int i = 0; v && i < v->sets.n; i++)
        as[n++] = &v->sets.items[i];
    for (int i = 0; c && i < c->sets.n; i++)
        as[n++] = &c->sets.items[i];
    run->variant = v ? v->name : "base";
    run->corpus = c ? c->name : NULL; /* without [[corpus]]: from the data, once the experiment is parsed */
    if (seed_i >= 0) {
        char text[64];
        snprintf(text, sizeof text, "train.seed=%lld", (long long)p->seeds[seed_i]);
        extra[n_extra] = (assign){strdup(text), p->seed_pos[seed_i], (char *)"[sweep] seeds"};
        if (!extra[n_extra].text) {
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
            goto out;
        }
        as[n++] = &extra[n_extra++];
    }
    run->grid_keys = calloc((size_t)p->n_grid + 1, sizeof *run->grid_keys);
    run->grid_values = calloc((size_t)p->n_grid + 1, sizeof *run->grid_values);
    if (!run->grid_keys || !run->grid_values) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
        goto out;
    }
    sbuf suffix = {0};
    for (int g = 0; g < p->n_grid; g++) {
        const bk_toml_node *val = bk_toml_at(p->grid[g].values, (size_t)point[g]);
        extra[n_extra].text = sw_assignment_text(p->grid[g].key, val, NOT_PATH, &rs->pc);
        extra[n_extra].pos = bk_toml_position(val);
        extra[n_extra].label = (char *)"[grid]";
        run->grid_keys[g] = strdup(p->grid[g].key);
        run->grid_values[g] = value_text(val);
        run->n_grid++;
        if (!extra[n_extra].text || !run->grid_keys[g] || !run->grid_values[g]) {
            free(suffix.s);
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
            goto out;
        }
        as[n++] = &extra[n_extra++];
        const char *last = strrchr(p->grid[g].key, '.');
        sw_sb_printf(&suffix, "-%s%s", last ? last + 1 : p->grid[g].key, run->grid_values[g]);
    }
    for (int i = 0; i < n; i++)
        texts[i] = as[i]->text;
    run->n_common_sets = p->base.n + p->common.n;

    /* the experiment layer validates every engine key of the composed experiment */
    bk_experiment exp;
    char name[256] = "";
    if ((rc = bk_experiment_parse(p->base_text, rs->base_source, texts, (size_t)n, &exp, err))) {
        free(suffix.s);
        snprintf(name, sizeof name, "runs '%s-%s%s*'", run->variant, run->corpus ? run->corpus : "",
                 run->corpus ? "-" : "");
        map_error(err, as, n, name);
        goto out;
    }
    /* [run] out_dir written in the sweep file (set, variant, corpus, grid, inline base): refused, not
     * ignored; a base file's own out_dir is not the sweep's to use (each run writes its directory) */
    const bk_toml_node *run_table = bk_toml_get(bk_toml_root(exp.doc), "run");
    const bk_toml_node *od = run_table ? bk_toml_get(run_table, "out_dir") : NULL;
    bk_toml_pos od_pos = od ? bk_toml_position(od) : (bk_toml_pos){0};
    if (od && od_pos.source && strncmp(od_pos.source, "--set ", 6) == 0) {
        free(suffix.s);
        rc = bk_fail_at(err, BK_ERR_CONFIG, od_pos,
                        "[run] out_dir: each run writes its own directory in the sweep directory (<sweep dir>/<run "
                        "name>); give the sweep directory as [sweep] out_dir");
        bk_experiment_free(&exp); /* after the message: the position's source is the document's */
        snprintf(name, sizeof name, "runs '%s-%s%s*'", run->variant, run->corpus ? run->corpus : "",
                 run->corpus ? "-" : "");
        map_error(err, as, n, name);
        goto out;
    }
    char *sfx = sw_sb_take(&suffix);
    if (!sfx) {
        bk_experiment_free(&exp);
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
        goto out;
    }
    sanitize(sfx);
    if (!run->corpus) { /* issue 27: named from the data, not "base" */
        char data_name[64];
        const char *paths[16];
        int n_paths = 0;
        for (int i = 0; i < exp.data.paths.n && n_paths < 16; i++)
            paths[n_paths++] = exp.data.paths.items[i];
        bk_sweep_data_name(paths, n_paths, data_name, sizeof data_name);
        if (!(run->corpus_owned = strdup(data_name))) {
            free(sfx);
            bk_experiment_free(&exp);
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
            goto out;
        }
        run->corpus = run->corpus_owned;
    }
    snprintf(name, sizeof name, "%s-%s-s%lld%s", run->variant, run->corpus, (long long)exp.train.seed, sfx);
    free(sfx);
    run->seed = exp.train.seed;
    run->train_length = exp.train.length;
    run->threads = exp.run.threads;
    run->text = sw_document_text(bk_toml_root(exp.doc), &rs->pc);
    run->name = strdup(name);
    run->sets = calloc((size_t)n + 1, sizeof *run->sets);
    char dir[4096];
    if (!run->text || !run->name || !run->sets) {
        bk_experiment_free(&exp);
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        if (!(run->sets[i] = strdup(texts[i]))) {
            bk_experiment_free(&exp);
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
            goto out;
        }
        run->n_sets++;
    }
    if (snprintf(dir, sizeof dir, "%s/%s", rs->sw->out_dir, name) >= (int)sizeof dir - 64) {
        bk_experiment_free(&exp);
        rc = bk_fail(err, BK_ERR_INVALID, "run '%s': its directory name is too long (out_dir/name at most %zu bytes)",
                     name, sizeof dir - 65);
        goto out;
    }
    if (!(run->dir = strdup(dir))) {
        bk_experiment_free(&exp);
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory resolving runs");
        goto out;
    }

    /* the text written reads back as the same experiment */
    char source[4200];
    snprintf(source, sizeof source, "%s/" BK_SWEEP_EXPERIMENT_FILE, dir);
    bk_experiment back;
    bk_error perr;
    if (bk_experiment_parse(run->text, source, NULL, 0, &back, &perr)) {
        bk_experiment_free(&exp);
        rc = bk_fail(err, BK_ERR_INTERNAL, "run '%s': the written experiment text does not read back: %s", name,
                     perr.message);
        goto out;
    }
    bk_experiment_free(&back);

    /* the evaluation's experiment: the variant's eval_set on top, judged as `biaskit eval --set` judges it */
    int m = v ? v->eval_sets.n : 0;
    bk_experiment eval_exp;
    char who[300];
    snprintf(who, sizeof who, "run '%s'", name);
    if (m && (rc = resolve_eval_sets(rs, v, as, texts, n, &exp, who, &eval_exp, err))) {
        bk_experiment_free(&exp);
        goto out;
    }
    if (m && (rc = keep_eval_sets(run, v, err))) {
        bk_experiment_free(&eval_exp), bk_experiment_free(&exp);
        goto out;
    }

    /* the plugins check the terms as the training will, in a child process, then (with an eval_set) as
     * the evaluation will; a refusal names the sweep file's line, a crash, an exit or a hang the term
     * and its plugin */
    int check = exp.n_terms > 0 && !(rs->o && rs->o->no_plugin_check) &&
                bk_sweep_run_selected(run, rs->o ? rs->o->only : NULL, rs->o ? rs->o->n_only : 0);
    for (int phase = 0; check && phase < (m ? 2 : 1) && !run->invalid && !rc; phase++) {
        const bk_experiment *e = phase ? &eval_exp : &exp;
        const term_answer *answer = check_terms(rs, e, err);
        if (!answer)
            rc = err->code;
        else if (answer->rc != BK_OK)
            rc = refusal_text(answer, e, as, phase ? n + m : n, who, phase ? "evaluating (eval_set)" : "training",
                              &run->invalid, err);
    }
    if (m)
        bk_experiment_free(&eval_exp);
    bk_experiment_free(&exp);
out:
    for (int i = 0; extra && i < n_extra; i++)
        free(extra[i].text);
    free(extra), free(as), free(texts);
    if (rc)
        sw_run_free(run);
    return rc;
}
