/* The report of a sweep, reading (report_internal.h): sweep.json, each run's status.json and evaluations
 * (eval.json, eval-sliding.json) checked against its checkpoint's step, and the mixing weights that
 * metrics.jsonl logs. What a run lacks is its problem, listed in the report, never an error. */
#define _POSIX_C_SOURCE 200809L
#include "report/report_internal.h"

#include "io/safetensors.h"
#include "train/rundir.h"
#include "util/file.h"
#include "util/name.h"
#include "util/path.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Appends "; text" (or text) to a run's problem. */
static void add_problem(run_rec *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_problem(run_rec *r, const char *fmt, ...)
{
    size_t used = strlen(r->problem);
    if (used && used + 2 < sizeof r->problem) {
        memcpy(r->problem + used, "; ", 3);
        used += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->problem + used, sizeof r->problem - used, fmt, ap);
    va_end(ap);
}

int rp_join_path(char *out, size_t size, const char *dir, const char *name, bk_error *err)
{
    int n = name[0] == '/' ? snprintf(out, size, "%s", name) : snprintf(out, size, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= size)
        return bk_fail(err, BK_ERR_INVALID, "path too long: '%s/%s' (at most %zu bytes)", dir, name, size - 1);
    return BK_OK;
}

/* Whether `path` names anything (a file that is not regular is refused when read, by name). */
static int path_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* JSON text parsed; NULL with `why` saying where it is bad (`name`:LINE:COLUMN). */
cJSON *rp_parse_json(const char *text, size_t len, const char *name, char *why, size_t size)
{
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        int line = 1, col = 1;
        for (const char *p = text; end && p < end && p < text + len; p++)
            if (*p == '\n')
                line++, col = 1;
            else
                col++;
        snprintf(why, size, "%s:%d:%d: malformed JSON", name, line, col);
    }
    return j;
}

/* A JSON file (a regular file of at most BK_TEXT_FILE_MAX bytes) parsed; NULL with `why` saying what
 * went wrong (the file, or where the JSON is bad). */
cJSON *rp_read_json(const char *path, const char *what, char *why, size_t size)
{
    bk_error err;
    char *text;
    size_t len;
    if (bk_file_read_all(path, what, BK_TEXT_FILE_MAX, &text, &len, &err)) {
        bk_copy_text(why, size, err.message);
        return NULL;
    }
    cJSON *j = rp_parse_json(text, len, path, why, size);
    free(text);
    return j;
}

/* An integer-valued JSON number in [lo, hi]. */
int rp_json_int(const cJSON *v, double lo, double hi, long long *out)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < lo || v->valuedouble > hi)
        return 0;
    *out = (long long)v->valuedouble;
    return 1;
}

void rp_eval_file_free(eval_file *e)
{
    for (int i = 0; i < e->n; i++)
        free(e->pts[i].pos);
    free(e->pts);
    memset(e, 0, sizeof *e);
}

/* A run's eval.json / eval-sliding.json (`biaskit eval --json`) parsed, from file `path`: its points,
 * its step (-1 when it gives none); problems go to the run. */
/* |log(ppl) - loss| of an eval.json result, both written to 6 decimals: a few units of the last place */
#define EVAL_PPL_TOLERANCE 1e-5

void rp_parse_eval(report_ctx *c, run_rec *r, int proto, const cJSON *j, const char *path)
{
    eval_file *e = &r->ev[proto];
    e->step = -1;
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step");
    if (step && !rp_json_int(step, 0, 9007199254740991.0, &e->step)) {
        add_problem(r, "%s: \"step\": expected a non-negative integer (the checkpoint's step)", path);
        return;
    }
    const cJSON *protocol = cJSON_GetObjectItemCaseSensitive(j, "protocol");
    const cJSON *results = cJSON_GetObjectItemCaseSensitive(j, "results");
    if (cJSON_IsString(protocol) && strcmp(protocol->valuestring, proto_name[proto]) != 0) {
        add_problem(r, "%s: protocol is \"%s\", expected \"%s\"", path, protocol->valuestring, proto_name[proto]);
        return;
    }
    if (!cJSON_IsArray(results)) {
        add_problem(r, "%s: expected a \"results\" array (the output of 'biaskit eval --json')", path);
        return;
    }
    int n = cJSON_GetArraySize(results);
    e->pts = calloc(n ? (size_t)n : 1, sizeof *e->pts);
    if (!e->pts) {
        add_problem(r, "%s: out of memory", path);
        return;
    }
    int k = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, results)
    {
        long long length;
        const cJSON *loss = cJSON_GetObjectItemCaseSensitive(item, "loss");
        const cJSON *ppl = cJSON_GetObjectItemCaseSensitive(item, "ppl");
        if (!rp_json_int(cJSON_GetObjectItemCaseSensitive(item, "length"), 1, MAX_LENGTH, &length) ||
            !cJSON_IsNumber(loss) || !cJSON_IsNumber(ppl)) {
            add_problem(r, "%s: result %d: expected numbers \"length\" (a positive integer), \"loss\" and \"ppl\"", path,
                        k + 1);
            rp_eval_file_free(e);
            return;
        }
        /* what biaskit eval writes: a finite loss >= 0, its perplexity exp(loss) (both to 6 decimals), one
         * result per length; anything else was edited or made elsewhere, and is not averaged */
        const double lv = loss->valuedouble, pv = ppl->valuedouble;
        const char *why = NULL;
        if (!isfinite(lv) || lv < 0.0 || !isfinite(pv) || pv < 1.0)
            why = "expected a finite \"loss\" >= 0 and \"ppl\" >= 1";
        else if (fabs(log(pv) - lv) > EVAL_PPL_TOLERANCE)
            why = "\"ppl\" is not exp(\"loss\")";
        for (int p = 0; p < e->n && !why; p++)
            if (e->pts[p].length == length)
                why = "a second result at this length";
        if (why) {
            add_problem(r, "%s: result %d (length %lld, loss %g, ppl %g): %s", path, k + 1, length, lv, pv, why);
            rp_eval_file_free(e);
            return;
        }
        eval_point *pt = &e->pts[e->n++];
        pt->length = (int32_t)length, pt->loss = lv, pt->ppl = pv;
        const cJSON *pos = cJSON_GetObjectItemCaseSensitive(item, "position_loss");
        if (cJSON_IsArray(pos) && cJSON_GetArraySize(pos) == length && (pt->pos = malloc((size_t)length * sizeof(double)))) {
            int t = 0;
            const cJSON *v;
            cJSON_ArrayForEach(v, pos) pt->pos[t++] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        } else if (pos && !cJSON_IsNull(pos) && !pt->pos)
            rp_note(c, "run '%s': %s: position_loss at length %lld is not an array of %lld numbers; not drawn", r->name,
                 proto_file[proto], length, length);
        k++;
    }
    long long tl;
    const cJSON *train_length = cJSON_GetObjectItemCaseSensitive(j, "train_length");
    if (train_length && c->train_length > 0 &&
        (!rp_json_int(train_length, 1, MAX_LENGTH, &tl) || tl != c->train_length)) {
        add_problem(r, "%s: \"train_length\" is not the sweep's training length, %lld", path, c->train_length);
        rp_eval_file_free(e);
        return;
    }
    e->ok = 1;
    /* every length the sweep asked for */
    for (int i = 0; i < c->n_lengths; i++) {
        int found = 0;
        for (int p = 0; p < e->n && !found; p++)
            found = e->pts[p].length == c->lengths[i];
        if (!found)
            add_problem(r, "%s has no result at length %d", proto_file[proto], (int)c->lengths[i]);
    }
}

static void read_eval(report_ctx *c, run_rec *r, int proto)
{
    char path[REPORT_PATH_MAX + 32], why[BK_ERROR_MESSAGE_MAX];
    snprintf(path, sizeof path, "%s/%s", r->path, proto_file[proto]);
    if (!path_exists(path)) {
        add_problem(r, "%s is missing", proto_file[proto]);
        return;
    }
    cJSON *j = rp_read_json(path, "evaluation file", why, sizeof why);
    if (!j) {
        add_problem(r, "%s", why);
        return;
    }
    rp_parse_eval(c, r, proto, j, path);
    cJSON_Delete(j);
}

/* The step of the checkpoint at `path` (its metadata, checkpoint.h: the "biaskit" key); 0 with `why`
 * when it cannot be read. */
static int checkpoint_step(const char *path, long long *step, char *why, size_t size)
{
    bk_safetensors *st = NULL;
    bk_error err;
    if (bk_safetensors_open_header(path, &st, &err)) { /* the step only: the data is not read */
        bk_copy_text(why, size, err.message);
        return 0;
    }
    const char *meta = bk_safetensors_meta(st, "biaskit");
    cJSON *j = meta ? cJSON_Parse(meta) : NULL;
    int ok = j && rp_json_int(cJSON_GetObjectItemCaseSensitive(j, "step"), 0, 9007199254740991.0, step);
    if (!ok)
        snprintf(why, size, "%.1500s: no step in its metadata (not a biaskit checkpoint)", path);
    cJSON_Delete(j);
    bk_safetensors_close(st);
    return ok;
}

/* The evaluations of a finished run must be of the checkpoint that is there now: an eval.json of step
 * 60 beside a checkpoint of step 52 (two sweeps in one directory, a training resumed by hand) is not
 * the run's result. Such an evaluation is set aside and the run listed. */
static void check_eval_steps(report_ctx *c, run_rec *r)
{
    char ckpt[REPORT_PATH_MAX + 32], why[BK_ERROR_MESSAGE_MAX];
    snprintf(ckpt, sizeof ckpt, "%s/" BK_RUN_CHECKPOINT_FILE, r->path);
    int any = 0;
    for (int p = 0; p < N_PROTO; p++)
        any |= r->ev[p].ok && r->ev[p].step >= 0;
    if (!any)
        return;
    if (!path_exists(ckpt)) /* deleted to save space: nothing to compare */
        return;
    long long step;
    if (!checkpoint_step(ckpt, &step, why, sizeof why)) {
        rp_note(c, "run '%s': cannot read the step of its checkpoint, so its evaluations are not checked against it: %s",
             r->name, why);
        return;
    }
    for (int p = 0; p < N_PROTO; p++) {
        eval_file *e = &r->ev[p];
        if (!e->ok || e->step < 0 || e->step == step)
            continue;
        add_problem(r, "%s is of step %lld but the checkpoint is at step %lld: the evaluation is not of this model "
                       "(evaluate it again: delete %s and status.json, then run the sweep again)",
                    proto_file[p], e->step, step, proto_file[p]);
        rp_eval_file_free(e);
    }
}

void rp_read_run(report_ctx *c, run_rec *r)
{
    char path[REPORT_PATH_MAX + 32], why[BK_ERROR_MESSAGE_MAX];
    struct stat st;
    if (stat(r->path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        bk_copy_text(r->state, sizeof r->state, "missing");
        add_problem(r, "run directory '%s' does not exist", r->path);
        return;
    }
    if (!bk_path_within(r->path, c->sweep_dir)) {
        bk_copy_text(r->state, sizeof r->state, "outside");
        add_problem(r, "run directory '%s' leads outside the sweep directory (a symbolic link?): not read", r->path);
        return;
    }
    snprintf(path, sizeof path, "%s/status.json", r->path);
    if (!path_exists(path)) {
        bk_copy_text(r->state, sizeof r->state, "pending");
        add_problem(r, "not run yet: no status.json in '%s'", r->path);
        return;
    }
    cJSON *j = rp_read_json(path, "status file", why, sizeof why);
    if (!j) {
        bk_copy_text(r->state, sizeof r->state, "unknown");
        add_problem(r, "%s", why);
        return;
    }
    const cJSON *state = cJSON_GetObjectItemCaseSensitive(j, "state");
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (!cJSON_IsString(state)) {
        bk_copy_text(r->state, sizeof r->state, "unknown");
        add_problem(r, "%s: expected a string \"state\"", path);
        cJSON_Delete(j);
        return;
    }
    bk_copy_text(r->state, sizeof r->state, state->valuestring);
    const char *message = cJSON_IsString(error) ? error->valuestring : "";
    /* the evaluation of a done run used its variant's eval_set as sweep.json gives it (a sweep stopped
     * between writing sweep.json and evaluating the run again leaves the old one's results) */
    const cJSON *used = cJSON_GetObjectItemCaseSensitive(j, "eval_set");
    char *used_json = used ? cJSON_PrintUnformatted(used) : NULL;
    int stale = strcmp(used_json ? used_json : "", r->eval_set_json) != 0;
    if (strcmp(state->valuestring, "done") == 0 && stale) {
        add_problem(r, "evaluated with eval_set %s, but its variant now gives %s: run the sweep again to evaluate it "
                    "again", used_json ? used_json : "(none)", *r->eval_set_json ? r->eval_set_json : "(none)");
        bk_copy_text(r->state, sizeof r->state, "stale");
        cJSON_free(used_json);
        cJSON_Delete(j);
        return;
    }
    cJSON_free(used_json);
    if (strcmp(state->valuestring, "done") != 0) {
        if (strcmp(state->valuestring, "failed") == 0)
            add_problem(r, "%s", *message ? message : "failed (status.json gives no error)");
        else
            add_problem(r, "not finished: state '%s'%s%s", state->valuestring, *message ? ": " : "", message);
        cJSON_Delete(j);
        return;
    }
    cJSON_Delete(j);
    read_eval(c, r, PROTO_CHUNKS);
    if (c->sliding > 0)
        read_eval(c, r, PROTO_SLIDING);
    check_eval_steps(c, r);
}

/* sweep.json: the runs, lengths, protocols. Malformed: an error naming the file and the field. */
int rp_read_index(report_ctx *c, bk_error *err)
{
    struct stat st;
    if (stat(c->sweep_dir, &st) != 0)
        return bk_fail(err, BK_ERR_IO, "cannot open the sweep directory '%s': %s", c->sweep_dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return bk_fail(err, BK_ERR_INVALID,
                       "'%s' is not a directory: expected a sweep directory (the output of 'biaskit sweep', with "
                       "sweep.json in it)", c->sweep_dir);
    snprintf(c->index_path, sizeof c->index_path, "%s/sweep.json", c->sweep_dir);
    if (!path_exists(c->index_path))
        return bk_fail(err, BK_ERR_INVALID,
                       "'%s' is not a sweep directory: it has no sweep.json (made by 'biaskit sweep')", c->sweep_dir);
    char why[BK_ERROR_MESSAGE_MAX];
    cJSON *j = rp_read_json(c->index_path, "sweep index", why, sizeof why);
    if (!j)
        return bk_fail(err, BK_ERR_PARSE, "%s", why);
    int rc = rp_parse_index(c, j, err);
    cJSON_Delete(j);
    return rc;
}

/* sweep.json parsed, from c->index_path: the runs (their directories under c->sweep_dir), lengths,
 * protocols; malformed: an error naming the file and the field. */
/* The longest name of a run, a variant or a corpus in sweep.json (a run's joins its variant, corpus and grid
 * point). */
#define RUN_NAME_MAX 1000

/* 1 when a run's "dir" of sweep.json names a directory inside the sweep: relative, no ".." component
 * (a sweep.json edited to name /etc or another sweep is not reported as this sweep's run). */
static int run_dir_inside(const char *dir)
{
    if (dir[0] == '/')
        return 0;
    for (const char *p = dir; *p;) {
        const size_t n = strcspn(p, "/");
        if (n == 2 && p[0] == '.' && p[1] == '.')
            return 0;
        p += n + (p[n] == '/');
    }
    return 1;
}

int rp_parse_index(report_ctx *c, const cJSON *j, bk_error *err)
{
    int rc = BK_OK;
    const char *path = c->index_path;
    const cJSON *v;
    if (!cJSON_IsObject(j)) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: expected a JSON object", path);
        goto done;
    }
    v = cJSON_GetObjectItemCaseSensitive(j, "sweep");
    if (v && !cJSON_IsString(v)) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: \"sweep\": expected a string (the sweep file's path)", path);
        goto done;
    }
    if (!(c->sweep_name = rp_dup_text(v ? v->valuestring : ""))) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory");
        goto done;
    }
    v = cJSON_GetObjectItemCaseSensitive(j, "lengths");
    if (v) {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > MAX_LENGTHS) {
            rc = bk_fail(err, BK_ERR_PARSE, "%s: \"lengths\": expected an array of at most %d positive integers", path,
                         MAX_LENGTHS);
            goto done;
        }
        const cJSON *item;
        cJSON_ArrayForEach(item, v)
        {
            long long L;
            if (!rp_json_int(item, 1, MAX_LENGTH, &L)) {
                rc = bk_fail(err, BK_ERR_PARSE, "%s: \"lengths\" item %d: expected a positive integer", path,
                             c->n_lengths + 1);
                goto done;
            }
            c->lengths[c->n_lengths++] = (int32_t)L;
        }
    }
    c->sliding = 0;
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "sliding")) && !rp_json_int(v, 0, MAX_LENGTH, &c->sliding)) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: \"sliding\": expected a non-negative integer (0: no sliding window)", path);
        goto done;
    }
    c->train_length = 0;
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "train_length")) && !rp_json_int(v, 1, MAX_LENGTH, &c->train_length)) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: \"train_length\": expected a positive integer", path);
        goto done;
    }
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(j, "runs");
    if (!cJSON_IsArray(runs)) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: expected a \"runs\" array", path);
        goto done;
    }
    int n = cJSON_GetArraySize(runs);
    if (n == 0) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: \"runs\" is empty: nothing to report", path);
        goto done;
    }
    if (!(c->runs = calloc((size_t)n, sizeof *c->runs)) || !(c->groups = calloc((size_t)n, sizeof *c->groups)) ||
        !(c->variants = calloc((size_t)n, sizeof *c->variants))) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for %d runs", n);
        goto done;
    }
    const cJSON *item;
    cJSON_ArrayForEach(item, runs)
    {
        int k = c->n_runs;
        run_rec *r = &c->runs[k];
        static const char *const names[] = {"name", "dir", "variant", "corpus"};
        const char *text[4];
        for (int f = 0; f < 4; f++) {
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(item, names[f]);
            if (!cJSON_IsString(s) || (f < 2 && !*s->valuestring)) {
                rc = bk_fail(err, BK_ERR_PARSE, "%s: run %d: expected a%s string \"%s\"", path, k + 1,
                             f < 2 ? " non-empty" : "", names[f]);
                goto done;
            }
            text[f] = s->valuestring;
        }
        if (!rp_json_int(cJSON_GetObjectItemCaseSensitive(item, "seed"), -9007199254740991.0, 9007199254740991.0,
                      &r->seed)) {
            rc = bk_fail(err, BK_ERR_PARSE, "%s: run %d ('%s'): expected an integer \"seed\"", path, k + 1, text[0]);
            goto done;
        }
        /* the grid point as "key=value, key=value", in the order of sweep.json */
        char grid[1024] = "";
        size_t used = 0;
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(item, "grid");
        if (g && !cJSON_IsObject(g)) {
            rc = bk_fail(err, BK_ERR_PARSE, "%s: run %d ('%s'): \"grid\": expected an object of key: value", path, k + 1,
                         text[0]);
            goto done;
        }
        const cJSON *kv;
        cJSON_ArrayForEach(kv, g)
        {
            char value[256];
            if (cJSON_IsString(kv))
                bk_copy_text(value, sizeof value, kv->valuestring);
            else if (cJSON_IsNumber(kv))
                snprintf(value, sizeof value, "%.10g", kv->valuedouble);
            else if (cJSON_IsBool(kv))
                bk_copy_text(value, sizeof value, cJSON_IsTrue(kv) ? "true" : "false");
            else {
                rc = bk_fail(err, BK_ERR_PARSE, "%s: run %d ('%s'): grid value \"%s\": expected a string or a number",
                             path, k + 1, text[0], kv->string);
                goto done;
            }
            if (used < sizeof grid)
                used += (size_t)snprintf(grid + used, sizeof grid - used, "%s%s=%s", used ? ", " : "", kv->string, value);
        }
        if (!(r->name = rp_dup_text(text[0])) || !(r->dir = rp_dup_text(text[1])) || !(r->variant = rp_dup_text(text[2])) ||
            !(r->corpus = rp_dup_text(text[3])) || !(r->grid = rp_dup_text(grid))) {
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory");
            goto done;
        }
        c->n_runs++;
        /* the variant's eval_set: absent when none */
        const cJSON *es = cJSON_GetObjectItemCaseSensitive(item, "eval_set"), *s;
        int es_ok = !es || cJSON_IsArray(es);
        cJSON_ArrayForEach(s, es) es_ok = es_ok && cJSON_IsString(s);
        if (!es_ok) {
            rc = bk_fail(err, BK_ERR_PARSE, "%s: run %d ('%s'): \"eval_set\": expected an array of strings (the "
                         "--set strings of its evaluation)", path, k + 1, text[0]);
            goto done;
        }
        int n_es = es ? cJSON_GetArraySize(es) : 0;
        char *es_json = es ? cJSON_PrintUnformatted(es) : NULL;
        r->eval_set_json = rp_dup_text(es_json ? es_json : "");
        cJSON_free(es_json);
        if (!r->eval_set_json || (n_es && !(r->eval_sets = calloc((size_t)n_es, sizeof *r->eval_sets)))) {
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory");
            goto done;
        }
        cJSON_ArrayForEach(s, es)
        {
            if (!(r->eval_sets[r->n_eval_sets] = rp_dup_text(s->valuestring))) {
                rc = bk_fail(err, BK_ERR_NOMEM, "out of memory");
                goto done;
            }
            r->n_eval_sets++;
        }
        for (int f = 0; f < 4; f++)
            if (f != 1 && *text[f] && !bk_name_valid(text[f], RUN_NAME_MAX)) {
                rc = bk_fail(err, BK_ERR_PARSE, "%s: run %d: \"%s\" '%s': expected 1-%d characters of " BK_NAME_CHARS
                             " (" BK_NAME_FIRST "), as biaskit sweep writes it", path, k + 1, names[f], text[f],
                             RUN_NAME_MAX);
                goto done;
            }
        if (!run_dir_inside(r->dir)) {
            rc = bk_fail(err, BK_ERR_PARSE, "%s: run %d ('%s'): \"dir\" '%s': expected a directory inside the sweep "
                         "directory (a relative path without '..'), as biaskit sweep writes it", path, k + 1, text[0],
                         r->dir);
            goto done;
        }
        if ((rc = rp_join_path(r->path, sizeof r->path, c->sweep_dir, r->dir, err)))
            goto done;
        /* its group (corpus, grid point) and variant, in order of first appearance */
        r->group = -1;
        for (int i = 0; i < c->n_groups && r->group < 0; i++)
            if (strcmp(c->groups[i].corpus, r->corpus) == 0 && strcmp(c->groups[i].grid, r->grid) == 0)
                r->group = i;
        if (r->group < 0) {
            group_rec *gr = &c->groups[c->n_groups];
            gr->corpus = r->corpus, gr->grid = r->grid;
            char base[1200];
            snprintf(base, sizeof base, "%s%s%s", *r->corpus ? r->corpus : "default", *r->grid ? "_" : "", r->grid);
            rp_slugify(base, gr->slug, sizeof gr->slug);
            r->group = c->n_groups++;
        }
        r->variant_index = -1;
        for (int i = 0; i < c->n_variants && r->variant_index < 0; i++)
            if (strcmp(c->variants[i], r->variant) == 0)
                r->variant_index = i;
        if (r->variant_index < 0) {
            c->variants[c->n_variants] = r->variant;
            r->variant_index = c->n_variants++;
        }
    }
    for (int i = 0; i < c->n_runs; i++)
        for (int k = 0; k < i; k++)
            if (strcmp(c->runs[i].path, c->runs[k].path) == 0) {
                rc = bk_fail(err, BK_ERR_PARSE, "%s: runs %d ('%s') and %d ('%s') have the same directory '%s'", path,
                             k + 1, c->runs[k].name, i + 1, c->runs[i].name, c->runs[i].dir);
                goto done;
            }
done:
    return rc;
}

/* Without "lengths" in sweep.json: every length found in the evaluations, sorted. */
void rp_lengths_from_evals(report_ctx *c)
{
    for (int i = 0; i < c->n_runs; i++)
        for (int p = 0; p < N_PROTO; p++)
            for (int k = 0; k < c->runs[i].ev[p].n; k++) {
                int32_t L = c->runs[i].ev[p].pts[k].length;
                int found = 0;
                for (int m = 0; m < c->n_lengths && !found; m++)
                    found = c->lengths[m] == L;
                if (!found && c->n_lengths < MAX_LENGTHS)
                    c->lengths[c->n_lengths++] = L;
            }
    for (int i = 1; i < c->n_lengths; i++)
        for (int k = i; k > 0 && c->lengths[k - 1] > c->lengths[k]; k--) {
            int32_t t = c->lengths[k];
            c->lengths[k] = c->lengths[k - 1], c->lengths[k - 1] = t;
        }
}

void rp_mix_log_free(mix_log *m)
{
    free(m->x), free(m->y);
    memset(m, 0, sizeof *m);
}

/* Parses `text` (len bytes; NUL bytes end a line's JSON there) for terms n_on[s] per stream. Returns
 * BK_OK, or BK_ERR_NOMEM. */
int rp_parse_mix_log(const char *text, size_t len, const int n_on[BK_STREAM_COUNT], mix_log *m)
{
    memset(m, 0, sizeof *m);
    int offset[BK_STREAM_COUNT];
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        offset[s] = m->total, m->total += n_on[s];
    m->lines = 1;
    for (size_t i = 0; i < len; i++)
        m->lines += text[i] == '\n';
    m->x = malloc(m->lines * sizeof *m->x);
    m->y = malloc(m->lines * (size_t)(m->total ? m->total : 1) * sizeof *m->y);
    if (!m->x || !m->y) {
        rp_mix_log_free(m);
        return BK_ERR_NOMEM;
    }
    for (size_t at = 0; at < len;) {
        const char *line = text + at, *nl = memchr(line, '\n', len - at);
        size_t n = nl ? (size_t)(nl - line) : len - at;
        at += n + 1;
        size_t blank = 0;
        while (blank < n && (line[blank] == ' ' || line[blank] == '\t' || line[blank] == '\r'))
            blank++;
        if (blank == n)
            continue;
        cJSON *j = cJSON_ParseWithLength(line, n);
        const cJSON *mix = j ? cJSON_GetObjectItemCaseSensitive(j, "mix") : NULL;
        long long step;
        if (mix && rp_json_int(cJSON_GetObjectItemCaseSensitive(j, "step"), 0, 9007199254740991.0, &step)) {
            size_t i = m->n;
            if (i > 0 && m->x[i - 1] >= (double)step) {
                if (!m->restarts++)
                    m->first_restart = step;
                while (i > 0 && m->x[i - 1] >= (double)step)
                    i--;
            }
            m->x[i] = (double)step;
            for (int k = 0; k < m->total; k++)
                m->y[(size_t)k * m->lines + i] = NAN;
            for (int s = 0; s < BK_STREAM_COUNT; s++) {
                char stream[16];
                bk_choice_name(BK_STREAM_CHOICES, s, stream, sizeof stream);
                const cJSON *w = cJSON_GetObjectItemCaseSensitive(mix, stream);
                if (!w)
                    continue;
                if (!cJSON_IsArray(w) || cJSON_GetArraySize(w) != n_on[s]) {
                    m->bad++;
                    continue;
                }
                int k = 0;
                const cJSON *v;
                cJSON_ArrayForEach(v, w)
                {
                    m->y[(size_t)(offset[s] + k) * m->lines + i] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
                    k++;
                }
            }
            m->n = i + 1;
        } else if (!j)
            m->bad++;
        cJSON_Delete(j);
    }
    return BK_OK;
}
