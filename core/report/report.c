/* The report of a sweep (report.h): read sweep.json and every run's status and evaluations, write
 * report.md, results.csv and runs.csv, and draw the figures through gnuplot (plot.h). */
#define _POSIX_C_SOURCE 200809L
#include "report/report.h"

#include "report/plot.h"
#include "io/safetensors.h"
#include "plugin/services.h"
#include "train/checkpoint.h"
#include "train/rundir.h"
#include "util/file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define REPORT_PATH_MAX 4096
#define MAX_BIAS_POINTS 4096   /* distances drawn per head curve (evenly thinned beyond) */
#define MAX_LENGTH 16777216    /* the largest evaluation length `biaskit eval` accepts */
#define MAX_LENGTHS 256        /* evaluation lengths in a report (a sweep has at most 64) */

/* The evaluation protocols: the files a sweep writes and the "protocol" field inside them. */
enum { PROTO_CHUNKS = 0, PROTO_SLIDING = 1, N_PROTO = 2 };
static const char *const proto_file[N_PROTO] = {"eval.json", "eval-sliding.json"};
static const char *const proto_name[N_PROTO] = {"non-overlapping", "sliding"};

typedef struct eval_point {
    int32_t length;
    double loss, ppl;
    double *pos;   /* position-wise loss (length values), or NULL */
} eval_point;

typedef struct eval_file {
    int ok;
    eval_point *pts;
    int n;
    long long step; /* the checkpoint step it evaluated; -1 when the file gives none */
} eval_file;

typedef struct run_rec {
    char *name, *dir, *variant, *corpus, *grid; /* grid: "key=value, key=value" or "" */
    char **eval_sets;   /* the variant's eval_set (sweep.json): --set strings its evaluation was given */
    int n_eval_sets;
    char *eval_set_json; /* the same as unformatted JSON ("" when none), compared with status.json's */
    long long seed;
    char path[REPORT_PATH_MAX]; /* the run directory */
    char state[64];
    char problem[BK_ERROR_MESSAGE_MAX]; /* "" or why the run is listed as failed, missing or incomplete */
    int group, variant_index;
    eval_file ev[N_PROTO];
} run_rec;

typedef struct group_rec {
    const char *corpus, *grid; /* borrowed from the first run of the group */
    char slug[96];
} group_rec;

typedef struct report_ctx {
    const bk_sweep_report_options *o;
    bk_sweep_report_summary *sum;
    char sweep_dir[REPORT_PATH_MAX], index_path[REPORT_PATH_MAX + 16], out_dir[REPORT_PATH_MAX];
    char *sweep_name;
    int32_t lengths[MAX_LENGTHS];
    int n_lengths;
    long long sliding, train_length;
    run_rec *runs;
    int n_runs;
    group_rec *groups;
    int n_groups;
    const char **variants;
    int n_variants;
    char **used;      /* figure names taken */
    int n_used;
    char **notes;     /* figure-level problems, listed at the end of the report */
    int n_notes;
    int warned_gnuplot;
} report_ctx;

/* ------------------------------------------------------------------------------------------------
 * Small helpers
 * ---------------------------------------------------------------------------------------------- */

static char *dup_text(const char *s)
{
    size_t n = strlen(s ? s : "") + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s ? s : "", n);
    return d;
}

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

static void note(report_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(report_ctx *c, const char *fmt, ...)
{
    char text[BK_ERROR_MESSAGE_MAX + 512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (c->o->log)
        fprintf(c->o->log, "biaskit report: warning: %s\n", text);
    char **more = realloc(c->notes, (size_t)(c->n_notes + 1) * sizeof *more);
    if (!more)
        return;
    c->notes = more;
    if ((c->notes[c->n_notes] = dup_text(text)))
        c->n_notes++;
}

static int join_path(char *out, size_t size, const char *dir, const char *name, bk_error *err)
{
    int n = name[0] == '/' ? snprintf(out, size, "%s", name) : snprintf(out, size, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= size)
        return bk_fail(err, BK_ERR_INVALID, "path too long: '%s/%s'", dir, name);
    return BK_OK;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* mkdir -p */
static int make_dirs(const char *dir, bk_error *err)
{
    char path[REPORT_PATH_MAX];
    bk_copy_text(path, sizeof path, dir);
    for (char *p = path + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(path, 0777) != 0 && errno != EEXIST)
                return bk_fail(err, BK_ERR_IO, "cannot create the report directory '%s': %s", path, strerror(errno));
            *p = saved;
            if (!saved)
                break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return bk_fail(err, BK_ERR_IO, "the report directory '%s' is not a directory", dir);
    return BK_OK;
}

/* Whether `path` names anything (a file that is not regular is refused when read, by name). */
static int path_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* JSON text parsed; NULL with `why` saying where it is bad (`name`:LINE:COLUMN). */
static cJSON *parse_json(const char *text, size_t len, const char *name, char *why, size_t size)
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
static cJSON *read_json(const char *path, const char *what, char *why, size_t size)
{
    bk_error err;
    char *text;
    size_t len;
    if (bk_file_read_all(path, what, BK_TEXT_FILE_MAX, &text, &len, &err)) {
        bk_copy_text(why, size, err.message);
        return NULL;
    }
    cJSON *j = parse_json(text, len, path, why, size);
    free(text);
    return j;
}

/* An integer-valued JSON number in [lo, hi]. */
static int json_int(const cJSON *v, double lo, double hi, long long *out)
{
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < lo || v->valuedouble > hi)
        return 0;
    *out = (long long)v->valuedouble;
    return 1;
}

/* Names of figure files: letters, digits, '.', '-' and '_' only. */
static void slugify(const char *text, char *out, size_t size)
{
    size_t n = 0;
    for (const char *p = text; *p && n + 1 < size; p++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                 ch == '-';
        if (!ok)
            ch = '_';
        if (ch == '_' && (n == 0 || out[n - 1] == '_'))
            continue;
        out[n++] = ch;
    }
    while (n > 0 && out[n - 1] == '_')
        n--;
    out[n] = '\0';
    if (n == 0)
        bk_copy_text(out, size, "x");
}

/* A figure name not used before in this report: `base`, else base-2, base-3, ... */
static int figure_name(report_ctx *c, const char *base, char *out, size_t size, bk_error *err)
{
    char slug[160];
    slugify(base, slug, sizeof slug);
    for (int k = 1;; k++) {
        if (k == 1)
            snprintf(out, size, "%s", slug);
        else
            snprintf(out, size, "%s-%d", slug, k);
        int taken = 0;
        for (int i = 0; i < c->n_used && !taken; i++)
            taken = strcmp(c->used[i], out) == 0;
        if (!taken)
            break;
    }
    char **more = realloc(c->used, (size_t)(c->n_used + 1) * sizeof *more);
    if (!more || !(more[c->n_used] = dup_text(out))) {
        if (more)
            c->used = more;
        return bk_fail(err, BK_ERR_NOMEM, "out of memory naming a figure");
    }
    c->used = more;
    c->n_used++;
    return BK_OK;
}

/* Text for a Markdown table cell: '|' escaped, line breaks as spaces. */
static void md_cell(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else if (*s == '\n' || *s == '\r')
            fputc(' ', f);
        else
            fputc(*s, f);
    }
}

/* A CSV field, quoted when it must be (RFC 4180). */
static void csv_field(FILE *f, const char *s)
{
    if (!s)
        s = "";
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_number(FILE *f, double v, const char *fmt)
{
    if (isfinite(v))
        fprintf(f, fmt, v);
}

/* "4x" for length / train length. */
static void ratio_text(long long length, long long train, char *out, size_t size)
{
    if (train <= 0) {
        out[0] = '\0';
        return;
    }
    double r = (double)length / (double)train;
    if (r == floor(r))
        snprintf(out, size, "%.0fx", r);
    else
        snprintf(out, size, "%.3gx", r);
}

/* ------------------------------------------------------------------------------------------------
 * Reading the sweep
 * ---------------------------------------------------------------------------------------------- */

static void eval_file_free(eval_file *e)
{
    for (int i = 0; i < e->n; i++)
        free(e->pts[i].pos);
    free(e->pts);
    memset(e, 0, sizeof *e);
}

/* A run's eval.json / eval-sliding.json (`biaskit eval --json`) parsed, from file `path`: its points,
 * its step (-1 when it gives none); problems go to the run. */
static void parse_eval(report_ctx *c, run_rec *r, int proto, const cJSON *j, const char *path)
{
    eval_file *e = &r->ev[proto];
    e->step = -1;
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(j, "step");
    if (step && !json_int(step, 0, 9007199254740991.0, &e->step)) {
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
        if (!json_int(cJSON_GetObjectItemCaseSensitive(item, "length"), 1, MAX_LENGTH, &length) ||
            !cJSON_IsNumber(loss) || !cJSON_IsNumber(ppl)) {
            add_problem(r, "%s: result %d: expected numbers \"length\" (a positive integer), \"loss\" and \"ppl\"", path,
                        k + 1);
            eval_file_free(e);
            return;
        }
        eval_point *pt = &e->pts[e->n++];
        pt->length = (int32_t)length, pt->loss = loss->valuedouble, pt->ppl = ppl->valuedouble;
        const cJSON *pos = cJSON_GetObjectItemCaseSensitive(item, "position_loss");
        if (cJSON_IsArray(pos) && cJSON_GetArraySize(pos) == length && (pt->pos = malloc((size_t)length * sizeof(double)))) {
            int t = 0;
            const cJSON *v;
            cJSON_ArrayForEach(v, pos) pt->pos[t++] = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        } else if (pos && !cJSON_IsNull(pos) && !pt->pos)
            note(c, "run '%s': %s: position_loss at length %lld is not an array of %lld numbers; not drawn", r->name,
                 proto_file[proto], length, length);
        k++;
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
    cJSON *j = read_json(path, "evaluation file", why, sizeof why);
    if (!j) {
        add_problem(r, "%s", why);
        return;
    }
    parse_eval(c, r, proto, j, path);
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
    int ok = j && json_int(cJSON_GetObjectItemCaseSensitive(j, "step"), 0, 9007199254740991.0, step);
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
        note(c, "run '%s': cannot read the step of its checkpoint, so its evaluations are not checked against it: %s",
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
        eval_file_free(e);
    }
}

static void read_run(report_ctx *c, run_rec *r)
{
    char path[REPORT_PATH_MAX + 32], why[BK_ERROR_MESSAGE_MAX];
    struct stat st;
    if (stat(r->path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        bk_copy_text(r->state, sizeof r->state, "missing");
        add_problem(r, "run directory '%s' does not exist", r->path);
        return;
    }
    snprintf(path, sizeof path, "%s/status.json", r->path);
    if (!path_exists(path)) {
        bk_copy_text(r->state, sizeof r->state, "pending");
        add_problem(r, "not run yet: no status.json in '%s'", r->path);
        return;
    }
    cJSON *j = read_json(path, "status file", why, sizeof why);
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

static int parse_index(report_ctx *c, const cJSON *j, bk_error *err);

/* sweep.json: the runs, lengths, protocols. Malformed: an error naming the file and the field. */
static int read_index(report_ctx *c, bk_error *err)
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
    cJSON *j = read_json(c->index_path, "sweep index", why, sizeof why);
    if (!j)
        return bk_fail(err, BK_ERR_PARSE, "%s", why);
    int rc = parse_index(c, j, err);
    cJSON_Delete(j);
    return rc;
}

/* sweep.json parsed, from c->index_path: the runs (their directories under c->sweep_dir), lengths,
 * protocols; malformed: an error naming the file and the field. */
static int parse_index(report_ctx *c, const cJSON *j, bk_error *err)
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
    if (!(c->sweep_name = dup_text(v ? v->valuestring : ""))) {
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
            if (!json_int(item, 1, MAX_LENGTH, &L)) {
                rc = bk_fail(err, BK_ERR_PARSE, "%s: \"lengths\" item %d: expected a positive integer", path,
                             c->n_lengths + 1);
                goto done;
            }
            c->lengths[c->n_lengths++] = (int32_t)L;
        }
    }
    c->sliding = 0;
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "sliding")) && !json_int(v, 0, MAX_LENGTH, &c->sliding)) {
        rc = bk_fail(err, BK_ERR_PARSE, "%s: \"sliding\": expected a non-negative integer (0: no sliding window)", path);
        goto done;
    }
    c->train_length = 0;
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "train_length")) && !json_int(v, 1, MAX_LENGTH, &c->train_length)) {
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
        if (!json_int(cJSON_GetObjectItemCaseSensitive(item, "seed"), -9007199254740991.0, 9007199254740991.0,
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
        if (!(r->name = dup_text(text[0])) || !(r->dir = dup_text(text[1])) || !(r->variant = dup_text(text[2])) ||
            !(r->corpus = dup_text(text[3])) || !(r->grid = dup_text(grid))) {
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
        r->eval_set_json = dup_text(es_json ? es_json : "");
        cJSON_free(es_json);
        if (!r->eval_set_json || (n_es && !(r->eval_sets = calloc((size_t)n_es, sizeof *r->eval_sets)))) {
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory");
            goto done;
        }
        cJSON_ArrayForEach(s, es)
        {
            if (!(r->eval_sets[r->n_eval_sets] = dup_text(s->valuestring))) {
                rc = bk_fail(err, BK_ERR_NOMEM, "out of memory");
                goto done;
            }
            r->n_eval_sets++;
        }
        if ((rc = join_path(r->path, sizeof r->path, c->sweep_dir, r->dir, err)))
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
            slugify(base, gr->slug, sizeof gr->slug);
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
static void lengths_from_evals(report_ctx *c)
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

/* ------------------------------------------------------------------------------------------------
 * Statistics over seeds
 * ---------------------------------------------------------------------------------------------- */

typedef struct cell {
    int n;
    double ppl_mean, ppl_std, loss_mean, loss_std; /* std: sample standard deviation; NAN when n < 2 */
    char seeds[256];                               /* "1;2": the seeds that contribute */
} cell;

static const eval_point *find_point(const eval_file *e, int32_t length)
{
    for (int i = 0; e->ok && i < e->n; i++)
        if (e->pts[i].length == length)
            return &e->pts[i];
    return NULL;
}

static void mean_std(const double *x, int n, double *mean, double *std)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += x[i];
    *mean = n ? s / n : NAN;
    if (n < 2) {
        *std = NAN;
        return;
    }
    double q = 0;
    for (int i = 0; i < n; i++)
        q += (x[i] - *mean) * (x[i] - *mean);
    *std = sqrt(q / (n - 1));
}

static void cell_stats(const report_ctx *c, int group, int variant, int proto, int32_t length, cell *out)
{
    memset(out, 0, sizeof *out);
    double *ppl = malloc((size_t)c->n_runs * sizeof *ppl), *loss = malloc((size_t)c->n_runs * sizeof *loss);
    size_t used = 0;
    for (int i = 0; ppl && loss && i < c->n_runs; i++) {
        const run_rec *r = &c->runs[i];
        const eval_point *pt;
        if (r->group != group || r->variant_index != variant || !(pt = find_point(&r->ev[proto], length)))
            continue;
        ppl[out->n] = pt->ppl, loss[out->n] = pt->loss;
        out->n++;
        if (used < sizeof out->seeds)
            used += (size_t)snprintf(out->seeds + used, sizeof out->seeds - used, "%s%lld", used ? ";" : "", r->seed);
    }
    if (ppl && loss) {
        mean_std(ppl, out->n, &out->ppl_mean, &out->ppl_std);
        mean_std(loss, out->n, &out->loss_mean, &out->loss_std);
    } else
        out->n = 0, out->ppl_mean = out->ppl_std = out->loss_mean = out->loss_std = NAN;
    free(ppl), free(loss);
}

/* Whether any run of the group has results for the protocol. */
static int group_has_proto(const report_ctx *c, int group, int proto)
{
    for (int i = 0; i < c->n_runs; i++)
        if (c->runs[i].group == group && c->runs[i].ev[proto].ok)
            return 1;
    return 0;
}

static int group_has_variant(const report_ctx *c, int group, int variant)
{
    for (int i = 0; i < c->n_runs; i++)
        if (c->runs[i].group == group && c->runs[i].variant_index == variant)
            return 1;
    return 0;
}

/* The first seed of (group, variant) among the runs that finished: the run whose bias and mixing
 * weights are drawn. -1 when none finished. */
static int first_seed_run(const report_ctx *c, int group, int variant)
{
    int best = -1;
    for (int i = 0; i < c->n_runs; i++) {
        const run_rec *r = &c->runs[i];
        if (r->group != group || r->variant_index != variant || strcmp(r->state, "done") != 0)
            continue;
        if (best < 0 || r->seed < c->runs[best].seed)
            best = i;
    }
    return best;
}

/* ------------------------------------------------------------------------------------------------
 * Figures
 * ---------------------------------------------------------------------------------------------- */

/* Draw `p` (its png set from `name`) and put it in the report; a failure is noted, never fatal. */
static void figure(report_ctx *c, FILE *md, bk_plot *p, const char *name, const char *alt)
{
    char png[REPORT_PATH_MAX + 160];
    snprintf(png, sizeof png, "%s/%s.png", c->out_dir, name);
    p->png = png;
    bk_error err = {0};
    int rc = bk_plot_write(p, &err);
    if (rc == BK_OK) {
        c->sum->figures++;
        fprintf(md, "![%s](%s.png)\n\n<sub>drawn by [%s.gp](%s.gp) from [%s.dat](%s.dat)</sub>\n\n", alt, name, name,
                name, name, name);
    } else if (rc == BK_ERR_UNSUPPORTED) {
        c->sum->undrawn++;
        if (!c->warned_gnuplot && c->o->log)
            fprintf(c->o->log, "biaskit report: warning: %s; the other figures likewise\n", err.message);
        c->warned_gnuplot = 1;
        fprintf(md, "*Figure not drawn (gnuplot is not installed): install gnuplot-nox, then run `gnuplot %s.gp` "
                    "here; its data is %s.dat.*\n\n", name, name);
    } else {
        c->sum->figure_errors++;
        if (!c->sum->first_figure_error[0])
            bk_copy_text(c->sum->first_figure_error, sizeof c->sum->first_figure_error, err.message);
        note(c, "figure %s.png: %s", name, err.message);
        fprintf(md, "*Figure %s.png could not be drawn: ", name);
        md_cell(md, err.message);
        fprintf(md, "*\n\n");
    }
}

/* ": corpus X, key=value" for a figure title; "" when the group has neither. */
static void group_label(const group_rec *g, char *out, size_t size)
{
    if (*g->corpus && *g->grid)
        snprintf(out, size, ": corpus %s, %s", g->corpus, g->grid);
    else if (*g->corpus)
        snprintf(out, size, ": corpus %s", g->corpus);
    else if (*g->grid)
        snprintf(out, size, ": %s", g->grid);
    else
        out[0] = '\0';
}

/* A vertical line at the training length from y0 to y1, as a series of two points. */
static void train_marker(const report_ctx *c, double *x, double *y, double y0, double y1, char *title, size_t size,
                         bk_plot_series *s)
{
    x[0] = x[1] = (double)c->train_length;
    y[0] = y0, y[1] = y1;
    snprintf(title, size, "training length %lld", c->train_length);
    *s = (bk_plot_series){title, x, y, 2};
}

/* (1) perplexity vs evaluation length for one group and protocol: a line per variant. */
static int figure_ppl(report_ctx *c, FILE *md, int group, int proto, bk_error *err)
{
    int nv = c->n_variants, nl = c->n_lengths;
    bk_plot_series *series = calloc((size_t)nv + 1, sizeof *series);
    double *x = calloc((size_t)nl + 2, sizeof *x), *y = calloc((size_t)(nv * nl) + 2, sizeof *y);
    char(*titles)[256] = calloc((size_t)nv + 1, sizeof *titles);
    if (!series || !x || !y || !titles) {
        free(series), free(x), free(y), free(titles);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for a figure");
    }
    for (int l = 0; l < nl; l++)
        x[l] = c->lengths[l];
    int ns = 0;
    double lo = INFINITY, hi = -INFINITY;
    for (int v = 0; v < nv; v++) {
        if (!group_has_variant(c, group, v))
            continue;
        int n_min = 1 << 30, n_max = 0;
        double spread = 0;
        for (int l = 0; l < nl; l++) {
            cell s;
            cell_stats(c, group, v, proto, c->lengths[l], &s);
            y[v * nl + l] = s.n ? s.ppl_mean : NAN;
            if (s.n) {
                n_min = s.n < n_min ? s.n : n_min;
                n_max = s.n > n_max ? s.n : n_max;
                lo = s.ppl_mean < lo ? s.ppl_mean : lo;
                hi = s.ppl_mean > hi ? s.ppl_mean : hi;
            }
            if (s.n > 1 && s.ppl_std / s.ppl_mean > spread)
                spread = s.ppl_std / s.ppl_mean;
        }
        if (n_max == 0)
            continue;
        char nt[32];
        if (n_min == n_max)
            snprintf(nt, sizeof nt, "n=%d", n_max);
        else
            snprintf(nt, sizeof nt, "n=%d-%d", n_min, n_max);
        if (n_max > 1)
            snprintf(titles[ns], sizeof titles[ns], "%s (%s, std <= %.1f%% of the mean)", c->variants[v], nt, 100.0 * spread);
        else
            snprintf(titles[ns], sizeof titles[ns], "%s (%s)", c->variants[v], nt);
        series[ns] = (bk_plot_series){titles[ns], x, y + v * nl, (size_t)nl};
        ns++;
    }
    if (ns > 0) {
        char title[1400], name[200], base[160], marker[64];
        double mx[2], my[2];
        if (c->train_length > 0 && hi > lo)
            train_marker(c, mx, my, lo, hi, marker, sizeof marker, &series[ns++]);
        const group_rec *g = &c->groups[group];
        char label[700];
        group_label(g, label, sizeof label);
        snprintf(title, sizeof title, "Perplexity, mean over seeds (%s)%s",
                 proto == PROTO_CHUNKS ? "non-overlapping" : "sliding", label);
        snprintf(base, sizeof base, "ppl-%s%s", g->slug, proto == PROTO_SLIDING ? "-sliding" : "");
        int rc = figure_name(c, base, name, sizeof name, err);
        if (!rc) {
            bk_plot p = {NULL, title, "evaluation length (tokens)", "perplexity", 1, 1, series, ns, 1};
            figure(c, md, &p, name, "perplexity vs evaluation length");
        }
        free(series), free(x), free(y), free(titles);
        return rc;
    }
    free(series), free(x), free(y), free(titles);
    return BK_OK;
}

/* (2) loss at each position at the longest length with position-wise losses, a line per variant
 * (mean over seeds; a centred moving average when the length is long). */
static int figure_positions(report_ctx *c, FILE *md, int group, bk_error *err)
{
    int32_t L = 0;
    for (int i = 0; i < c->n_runs; i++) {
        const run_rec *r = &c->runs[i];
        if (r->group != group)
            continue;
        for (int k = 0; r->ev[PROTO_CHUNKS].ok && k < r->ev[PROTO_CHUNKS].n; k++)
            if (r->ev[PROTO_CHUNKS].pts[k].pos && r->ev[PROTO_CHUNKS].pts[k].length > L)
                L = r->ev[PROTO_CHUNKS].pts[k].length;
    }
    if (L == 0)
        return BK_OK;
    int nv = c->n_variants;
    int window = L >= 256 ? L / 128 : 1;
    window |= 1; /* odd: centred */
    bk_plot_series *series = calloc((size_t)nv + 1, sizeof *series);
    double *x = malloc((size_t)L * sizeof *x), *y = malloc((size_t)nv * (size_t)L * sizeof *y);
    double *mean = malloc((size_t)L * sizeof *mean);
    int *count = malloc((size_t)L * sizeof *count);
    char(*titles)[256] = calloc((size_t)nv + 1, sizeof *titles);
    int rc = BK_OK;
    if (!series || !x || !y || !mean || !count || !titles) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the position-wise loss of length %d", (int)L);
        goto done;
    }
    for (int32_t t = 0; t < L; t++)
        x[t] = t + 1;
    int ns = 0;
    double lo = INFINITY, hi = -INFINITY;
    for (int v = 0; v < nv; v++) {
        memset(mean, 0, (size_t)L * sizeof *mean);
        memset(count, 0, (size_t)L * sizeof *count);
        int n = 0;
        for (int i = 0; i < c->n_runs; i++) {
            const run_rec *r = &c->runs[i];
            const eval_point *pt;
            if (r->group != group || r->variant_index != v || !(pt = find_point(&r->ev[PROTO_CHUNKS], L)) || !pt->pos)
                continue;
            n++;
            for (int32_t t = 0; t < L; t++)
                if (isfinite(pt->pos[t]))
                    mean[t] += pt->pos[t], count[t]++;
        }
        if (!n)
            continue;
        for (int32_t t = 0; t < L; t++)
            mean[t] = count[t] ? mean[t] / count[t] : NAN;
        double *yv = y + (size_t)v * (size_t)L;
        int h = window / 2;
        for (int32_t t = 0; t < L; t++) {
            double s = 0;
            int m = 0;
            for (int32_t u = t - h < 0 ? 0 : t - h; u <= t + h && u < L; u++)
                if (isfinite(mean[u]))
                    s += mean[u], m++;
            yv[t] = m ? s / m : NAN;
            if (m) {
                lo = yv[t] < lo ? yv[t] : lo;
                hi = yv[t] > hi ? yv[t] : hi;
            }
        }
        snprintf(titles[ns], sizeof titles[ns], "%s (n=%d)", c->variants[v], n);
        series[ns] = (bk_plot_series){titles[ns], x, yv, (size_t)L};
        ns++;
    }
    if (ns > 0) {
        char title[1400], name[200], base[160], marker[64];
        double mx[2], my[2];
        if (c->train_length > 0 && c->train_length < L && hi > lo)
            train_marker(c, mx, my, lo, hi, marker, sizeof marker, &series[ns++]);
        const group_rec *g = &c->groups[group];
        char smooth[64] = "";
        if (window > 1)
            snprintf(smooth, sizeof smooth, "; moving average over %d positions", window);
        char label[700];
        group_label(g, label, sizeof label);
        snprintf(title, sizeof title, "Loss at each position, length %d, mean over seeds%s%s", (int)L, smooth, label);
        snprintf(base, sizeof base, "position-loss-%s", g->slug);
        if (!(rc = figure_name(c, base, name, sizeof name, err))) {
            fprintf(md, "Length %d (non-overlapping chunks; the loss at each position averaged over the chunks, "
                        "then over seeds%s):\n\n", (int)L, smooth);
            bk_plot p = {NULL, title, "position in the sequence", "loss (nats)", 0, 0, series, ns, 0};
            figure(c, md, &p, name, "loss at each position");
        }
    }
done:
    free(series), free(x), free(y), free(mean), free(count), free(titles);
    return rc;
}

typedef struct warn_ctx {
    report_ctx *c;
    const run_rec *run;
} warn_ctx;

static void on_checkpoint_warning(void *ctx, const char *message)
{
    warn_ctx *w = ctx;
    /* a plugin option its variant's eval_set changes is what the sweep asked for: no note */
    for (int k = 0; k < w->run->n_eval_sets; k++) {
        const char *at = strstr(message, "--set ");
        size_t n = strlen(w->run->eval_sets[k]);
        for (; at; at = strstr(at + 1, "--set "))
            if (strncmp(at + 6, w->run->eval_sets[k], n) == 0 && strncmp(at + 6 + n, " changes ", 9) == 0)
                return;
    }
    note(w->c, "run '%s': checkpoint: %s", w->run->name, message);
}

/* (3) every head's mixed table T_h(d) of the run's checkpoint, per stream (and per layer when a term
 * of the stream has per-layer parameters). */
static int figures_bias(report_ctx *c, FILE *md, const run_rec *r, const bk_lm *lm, bk_error *err)
{
    const bk_term_set *set = &lm->terms;
    int32_t D = 0;
    for (int i = 0; i < c->n_lengths; i++)
        D = c->lengths[i] > D ? c->lengths[i] : D;
    if (c->train_length > D)
        D = (int32_t)c->train_length;
    if (D < 2)
        D = (int32_t)lm->exp.train.length;
    int32_t H = set->geometry.n_heads;
    int32_t stride = D > MAX_BIAS_POINTS ? (D + MAX_BIAS_POINTS - 1) / MAX_BIAS_POINTS : 1;
    size_t npts = (size_t)((D + stride - 1) / stride);
    float *table = malloc((size_t)H * (size_t)D * sizeof *table);
    double *x = malloc(npts * sizeof *x), *y = malloc((size_t)H * npts * sizeof *y);
    bk_plot_series *series = calloc((size_t)H + 1, sizeof *series);
    char(*titles)[32] = calloc((size_t)H + 1, sizeof *titles);
    int rc = BK_OK, drawn = 0;
    if (!table || !x || !y || !series || !titles) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the tables of run '%s' (%d heads x %d distances)", r->name,
                     (int)H, (int)D);
        goto done;
    }
    for (size_t i = 0; i < npts; i++)
        x[i] = (double)((int64_t)i * stride);
    for (int s = 0; s < BK_STREAM_COUNT && !rc; s++) {
        int n_terms = 0, per_layer = 0;
        char members[512] = "";
        size_t used = 0;
        for (int t = 0; t < set->n; t++) {
            const bk_term *term = &set->terms[t];
            if ((int)term->stream != s || !bk_term_has_table(term))
                continue;
            n_terms++;
            per_layer |= term->per_layer;
            if (used < sizeof members)
                used += (size_t)snprintf(members + used, sizeof members - used, "%s%s", used ? " + " : "", term->label);
        }
        if (!n_terms)
            continue;
        char stream[16];
        bk_choice_name(BK_STREAM_CHOICES, s, stream, sizeof stream);
        int layers = per_layer ? lm->gpt.L : 1;
        for (int layer = 0; layer < layers && !rc; layer++) {
            int got;
            bk_error terr = {0};
            if (bk_terms_mixed_table(set, layer, (bk_stream)s, D, table, &got, &terr)) {
                note(c, "run '%s': the %s-stream table of layer %d cannot be computed: %s", r->name, stream, layer,
                     terr.message);
                continue;
            }
            double lo = INFINITY, hi = -INFINITY;
            for (int32_t h = 0; h < H; h++) {
                for (size_t i = 0; i < npts; i++) {
                    double v = table[(size_t)h * (size_t)D + i * (size_t)stride];
                    y[(size_t)h * npts + i] = v;
                    if (isfinite(v)) {
                        lo = v < lo ? v : lo;
                        hi = v > hi ? v : hi;
                    }
                }
                snprintf(titles[h], sizeof titles[h], "head %d", (int)h);
                series[h] = (bk_plot_series){titles[h], x, y + (size_t)h * npts, npts};
            }
            int ns = H;
            char marker[64], title[2000], base[300], name[340], where[96] = "";
            double mx[2], my[2];
            if (c->train_length > 0 && c->train_length < D && hi > lo)
                train_marker(c, mx, my, lo, hi, marker, sizeof marker, &series[ns++]);
            if (per_layer)
                snprintf(where, sizeof where, ", layer %d", layer);
            char label[700];
            group_label(&c->groups[r->group], label, sizeof label);
            snprintf(title, sizeof title, "Learned bias T_h(d) of %s (seed %lld%s%s): %s on the %s stream%s", r->variant,
                     r->seed, label[0] ? "," : "", label[0] ? label + 1 : "", members, stream, where);
            snprintf(base, sizeof base, "bias-%s-%s%s%s%s", c->groups[r->group].slug, r->variant,
                     s == BK_STREAM_TOKEN ? "" : "-", s == BK_STREAM_TOKEN ? "" : stream, per_layer ? "-layer" : "");
            if (per_layer)
                snprintf(base + strlen(base), sizeof base - strlen(base), "%d", layer);
            if ((rc = figure_name(c, base, name, sizeof name, err)))
                break;
            if (!drawn)
                fprintf(md, "**%s** (run `%s`, seed %lld): %s, distances 0 to %d%s.\n\n", r->variant, r->name, r->seed,
                        members, (int)D - 1, stride > 1 ? " (every few distances drawn)" : "");
            bk_plot p = {NULL, title, "distance d = i - j", "bias added to the attention score", 0, 0, series, ns, 0};
            figure(c, md, &p, name, "learned bias per head");
            drawn++;
        }
    }
    if (!rc && !drawn)
        fprintf(md, "**%s** (run `%s`): no distance table (its positional terms act on the embeddings or on q and k, "
                    "or there are none).\n\n", r->variant, r->name);
done:
    free(table), free(x), free(y), free(series), free(titles);
    return rc;
}

/* The mixing weights of metrics.jsonl, one point per record that has "mix" and "step": x[i] the
 * step, y[k * lines + i] weight k (the streams' terms in order, offset[s] + j; NAN where missing). A
 * record whose step is not after the one before it (a training resumed from an earlier checkpoint
 * logs its steps again) replaces every earlier point from that step on: the curve is the last
 * training's, one point per step, steps increasing. */
typedef struct mix_log {
    size_t lines, n;   /* capacity (lines of the text), points */
    int total;         /* weights per point */
    double *x, *y;
    int bad;           /* lines malformed or with weights of another shape */
    int restarts;      /* records that went back in steps */
    long long first_restart; /* the step of the first of them */
} mix_log;

static void mix_log_free(mix_log *m)
{
    free(m->x), free(m->y);
    memset(m, 0, sizeof *m);
}

/* Parses `text` (len bytes; NUL bytes end a line's JSON there) for terms n_on[s] per stream. Returns
 * BK_OK, or BK_ERR_NOMEM. */
static int parse_mix_log(const char *text, size_t len, const int n_on[BK_STREAM_COUNT], mix_log *m)
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
        mix_log_free(m);
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
        if (mix && json_int(cJSON_GetObjectItemCaseSensitive(j, "step"), 0, 9007199254740991.0, &step)) {
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

/* (4) the learned mixing weights over training, from the "mix" objects of metrics.jsonl. */
static int figure_mix(report_ctx *c, FILE *md, const run_rec *r, const bk_lm *lm, bk_error *err)
{
    char path[REPORT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/" BK_RUN_METRICS_FILE, r->path);
    char *text = NULL;
    size_t len = 0;
    bk_error rerr;
    if (bk_file_read_all(path, "metrics file", BK_JSONL_FILE_MAX, &text, &len, &rerr)) {
        note(c, "run '%s': %s; its mixing weights are not drawn", r->name, rerr.message);
        return BK_OK;
    }
    const bk_bias *b = &lm->bias;
    mix_log m;
    int total = 0;
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        total += b->n_on[s];
    bk_plot_series *series = calloc((size_t)(total ? total : 1), sizeof *series);
    char(*titles)[128] = calloc((size_t)(total ? total : 1), sizeof *titles);
    int rc = BK_OK;
    if (parse_mix_log(text, len, b->n_on, &m) || !series || !titles) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory reading '%s'", path);
        goto done;
    }
    size_t n = m.n, lines = m.lines;
    double *x = m.x, *y = m.y;
    int offset[BK_STREAM_COUNT];
    for (int s = 0, o = 0; s < BK_STREAM_COUNT; s++)
        offset[s] = o, o += b->n_on[s];
    if (m.bad)
        note(c, "run '%s': %s: %d line%s malformed or with mixing weights of another shape than the checkpoint's "
             "terms; skipped", r->name, path, m.bad, m.bad == 1 ? "" : "s");
    if (m.restarts)
        note(c, "run '%s': %s: steps logged again from step %lld%s (a training resumed from an earlier checkpoint): the "
             "records of the last training are drawn, each step once", r->name, path, m.first_restart,
             m.restarts > 1 ? " and later" : "");
    if (n == 0) {
        fprintf(md, "**%s** (run `%s`): metrics.jsonl has no mixing weights (trained by a biaskit that did not log "
                    "them).\n\n", r->variant, r->name);
        goto done;
    }
    int streams_used = 0;
    for (int s = 0; s < BK_STREAM_COUNT; s++)
        streams_used += b->n_on[s] > 0;
    int ns = 0;
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        char stream[16];
        bk_choice_name(BK_STREAM_CHOICES, s, stream, sizeof stream);
        for (int k = 0; k < b->n_on[s]; k++) {
            const bk_term *t = &lm->terms.terms[b->on[s][k]];
            if (streams_used > 1)
                snprintf(titles[ns], sizeof titles[ns], "%s: %s", stream, t->label);
            else
                snprintf(titles[ns], sizeof titles[ns], "%s", t->label);
            series[ns] = (bk_plot_series){titles[ns], x, y + (size_t)(offset[s] + k) * lines, n};
            ns++;
        }
    }
    char mixing[16], title[1400], base[300], name[340];
    bk_choice_name(BK_MIXING_CHOICES, lm->exp.attention.mixing, mixing, sizeof mixing);
    char label[700];
    group_label(&c->groups[r->group], label, sizeof label);
    snprintf(title, sizeof title, "Mixing weights over training (%s mixing): %s, seed %lld%s%s", mixing, r->variant,
             r->seed, label[0] ? "," : "", label[0] ? label + 1 : "");
    snprintf(base, sizeof base, "mix-%s-%s", c->groups[r->group].slug, r->variant);
    if (!(rc = figure_name(c, base, name, sizeof name, err))) {
        fprintf(md, "**%s** (run `%s`, seed %lld), %s mixing:\n\n", r->variant, r->name, r->seed, mixing);
        bk_plot p = {NULL, title, "training step", "weight", 0, 0, series, ns, n <= 30};
        figure(c, md, &p, name, "mixing weights over training");
    }
done:
    free(text), free(series), free(titles);
    mix_log_free(&m);
    return rc;
}

static void group_heading(const report_ctx *c, FILE *md, int group)
{
    const group_rec *g = &c->groups[group];
    fprintf(md, "### Corpus ");
    md_cell(md, *g->corpus ? g->corpus : "(none)");
    if (*g->grid) {
        fprintf(md, ", ");
        md_cell(md, g->grid);
    }
    fprintf(md, "\n\n");
}

/* (3) into `md` and (4) into `mix` for the first seed of every (group, variant): one checkpoint load
 * each. */
static int figures_checkpoints(report_ctx *c, FILE *md, FILE *mix, bk_error *err)
{
    int any_mix = 0;
    for (int g = 0; g < c->n_groups; g++) {
        int heading = 0, mix_heading = 0;
        for (int v = 0; v < c->n_variants; v++) {
            if (!group_has_variant(c, g, v))
                continue;
            if (!heading && c->n_groups > 1)
                group_heading(c, md, g);
            heading = 1;
            int i = first_seed_run(c, g, v);
            if (i < 0) {
                fprintf(md, "**");
                md_cell(md, c->variants[v]);
                fprintf(md, "**: no run finished.\n\n");
                continue;
            }
            const run_rec *r = &c->runs[i];
            char ckpt[REPORT_PATH_MAX + 32];
            snprintf(ckpt, sizeof ckpt, "%s/" BK_RUN_CHECKPOINT_FILE, r->path);
            if (!file_exists(ckpt)) {
                fprintf(md, "**%s** (run `%s`): no checkpoint at `%s`.\n\n", r->variant, r->name, ckpt);
                note(c, "run '%s': no checkpoint at '%s'; its bias is not drawn", r->name, ckpt);
                continue;
            }
            /* on the CPU whatever device trained it: a table is a few thousand values; with the
             * variant's eval_set, the model as it was evaluated */
            const char **overrides = malloc((size_t)(1 + r->n_eval_sets) * sizeof *overrides);
            if (!overrides)
                return bk_fail(err, BK_ERR_NOMEM, "out of memory");
            overrides[0] = "run.device=cpu";
            for (int k = 0; k < r->n_eval_sets; k++)
                overrides[1 + k] = r->eval_sets[k];
            warn_ctx w = {c, r};
            bk_checkpoint_options co = {.overrides = overrides, .n_overrides = 1 + r->n_eval_sets,
                                        .warn = on_checkpoint_warning, .warn_ctx = &w};
            bk_lm lm;
            bk_train_state st;
            bk_error lerr = {0};
            /* what a plugin says it does (info lines: a scaling the eval_set chose) went to the run's
             * eval.log when it was evaluated; the report says it once, in its list of variants */
            bk_set_log_level(BIASKIT_LOG_WARN);
            int load_rc = bk_checkpoint_load_ex(ckpt, &co, &lm, NULL, &st, &lerr);
            bk_set_log_level(BIASKIT_LOG_INFO);
            free(overrides);
            if (load_rc) {
                fprintf(md, "**%s** (run `%s`): the model cannot be rebuilt from its checkpoint: ", r->variant, r->name);
                md_cell(md, lerr.message);
                fprintf(md, "\n\n");
                note(c, "run '%s': cannot rebuild the model from its checkpoint: %s", r->name, lerr.message);
                continue;
            }
            int rc = figures_bias(c, md, r, &lm, err);
            if (!rc && lm.bias.learn_weights) { /* a stream learns (every term, some, or per head) */
                if (!mix_heading && c->n_groups > 1)
                    group_heading(c, mix, g);
                mix_heading = 1;
                rc = figure_mix(c, mix, r, &lm, err);
                any_mix = 1;
            }
            bk_lm_close(&lm);
            if (rc)
                return rc;
        }
    }
    if (!any_mix)
        fprintf(mix, "No variant learns its mixing weights ([attention] learn_weights is off).\n\n");
    return BK_OK;
}

/* ------------------------------------------------------------------------------------------------
 * The report
 * ---------------------------------------------------------------------------------------------- */

static void write_table(const report_ctx *c, FILE *md, int group, int proto)
{
    fprintf(md, "| variant |");
    for (int l = 0; l < c->n_lengths; l++) {
        char ratio[32];
        ratio_text(c->lengths[l], c->train_length, ratio, sizeof ratio);
        fprintf(md, " %d%s%s%s |", (int)c->lengths[l], *ratio ? " (" : "", ratio, *ratio ? ")" : "");
    }
    fprintf(md, "\n|:--|");
    for (int l = 0; l < c->n_lengths; l++)
        fprintf(md, "--:|");
    fprintf(md, "\n");
    for (int v = 0; v < c->n_variants; v++) {
        if (!group_has_variant(c, group, v))
            continue;
        fprintf(md, "| ");
        md_cell(md, c->variants[v]);
        fprintf(md, " |");
        for (int l = 0; l < c->n_lengths; l++) {
            cell s;
            cell_stats(c, group, v, proto, c->lengths[l], &s);
            if (s.n == 0)
                fprintf(md, " — |");
            else if (s.n == 1)
                fprintf(md, " %.2f (n=1) |", s.ppl_mean);
            else
                fprintf(md, " %.2f ± %.2f (n=%d) |", s.ppl_mean, s.ppl_std, s.n);
        }
        fprintf(md, "\n");
    }
    fprintf(md, "\n");
}

static int write_csvs(report_ctx *c, bk_error *err)
{
    char path[REPORT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/results.csv", c->out_dir);
    bk_copy_text(c->sum->csv, sizeof c->sum->csv, path);
    FILE *f = fopen(path, "w");
    if (!f)
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    fprintf(f, "corpus,grid,variant,protocol,length,x_train,n,ppl_mean,ppl_std,loss_mean,loss_std,seeds\n");
    for (int g = 0; g < c->n_groups; g++)
        for (int p = 0; p < N_PROTO; p++) {
            if (p == PROTO_SLIDING && c->sliding <= 0)
                continue;
            for (int v = 0; v < c->n_variants; v++) {
                if (!group_has_variant(c, g, v))
                    continue;
                for (int l = 0; l < c->n_lengths; l++) {
                    cell s;
                    char ratio[32];
                    cell_stats(c, g, v, p, c->lengths[l], &s);
                    ratio_text(c->lengths[l], c->train_length, ratio, sizeof ratio);
                    if (*ratio)
                        ratio[strlen(ratio) - 1] = '\0'; /* "4x" -> "4" */
                    csv_field(f, c->groups[g].corpus);
                    fputc(',', f);
                    csv_field(f, c->groups[g].grid);
                    fputc(',', f);
                    csv_field(f, c->variants[v]);
                    fprintf(f, ",%s,%d,%s,%d,", proto_name[p], (int)c->lengths[l], ratio, s.n);
                    csv_number(f, s.ppl_mean, "%.6f");
                    fputc(',', f);
                    csv_number(f, s.ppl_std, "%.6f");
                    fputc(',', f);
                    csv_number(f, s.loss_mean, "%.6f");
                    fputc(',', f);
                    csv_number(f, s.loss_std, "%.6f");
                    fputc(',', f);
                    csv_field(f, s.seeds);
                    fputc('\n', f);
                }
            }
        }
    if (ferror(f) | (fclose(f) != 0))
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", path, strerror(errno));

    snprintf(path, sizeof path, "%s/runs.csv", c->out_dir);
    if (!(f = fopen(path, "w")))
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    fprintf(f, "run,variant,corpus,grid,seed,state,protocol,length,loss,ppl,problem\n");
    for (int i = 0; i < c->n_runs; i++) {
        const run_rec *r = &c->runs[i];
        int rows = 0;
        for (int p = 0; p < N_PROTO; p++)
            for (int k = 0; r->ev[p].ok && k < r->ev[p].n; k++) {
                const eval_point *pt = &r->ev[p].pts[k];
                csv_field(f, r->name), fputc(',', f), csv_field(f, r->variant), fputc(',', f);
                csv_field(f, r->corpus), fputc(',', f), csv_field(f, r->grid);
                fprintf(f, ",%lld,", r->seed);
                csv_field(f, r->state);
                fprintf(f, ",%s,%d,%.6f,%.6f,", proto_name[p], (int)pt->length, pt->loss, pt->ppl);
                csv_field(f, r->problem);
                fputc('\n', f);
                rows++;
            }
        if (!rows) {
            csv_field(f, r->name), fputc(',', f), csv_field(f, r->variant), fputc(',', f);
            csv_field(f, r->corpus), fputc(',', f), csv_field(f, r->grid);
            fprintf(f, ",%lld,", r->seed);
            csv_field(f, r->state);
            fprintf(f, ",,,,,");
            csv_field(f, r->problem);
            fputc('\n', f);
        }
    }
    if (ferror(f) | (fclose(f) != 0))
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    return BK_OK;
}

static int write_report(report_ctx *c, bk_error *err)
{
    char path[REPORT_PATH_MAX + 32], tmp[REPORT_PATH_MAX + 48];
    snprintf(path, sizeof path, "%s/report.md", c->out_dir);
    snprintf(tmp, sizeof tmp, "%s/report.md.tmp", c->out_dir);
    bk_copy_text(c->sum->report, sizeof c->sum->report, path);
    FILE *md = fopen(tmp, "w");
    if (!md)
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    int rc = BK_OK;

    /* the summary */
    fprintf(md, "# Sweep report\n\n");
    fprintf(md, "- sweep: `%s`, directory `%s`\n", *c->sweep_name ? c->sweep_name : "(not named)", c->sweep_dir);
    fprintf(md, "- runs: %d; %d finished with every evaluation, %d failed, missing or incomplete%s\n", c->n_runs,
            c->sum->done, c->sum->problems, c->sum->problems ? " (listed below)" : "");
    fprintf(md, "- variants: ");
    for (int v = 0; v < c->n_variants; v++) {
        fprintf(md, "%s", v ? ", " : "");
        md_cell(md, c->variants[v]);
        /* a variant evaluated with an eval_set: the same training as without it, evaluated with these */
        const run_rec *first = NULL;
        for (int i = 0; i < c->n_runs && !first; i++)
            if (c->runs[i].variant_index == v)
                first = &c->runs[i];
        for (int k = 0; first && k < first->n_eval_sets; k++) {
            fprintf(md, "%s`", k ? ", " : " (evaluated with ");
            md_cell(md, first->eval_sets[k]);
            fprintf(md, "`%s", k + 1 == first->n_eval_sets ? ")" : "");
        }
    }
    fprintf(md, "\n- training length: %lld tokens; evaluation lengths:", c->train_length);
    for (int l = 0; l < c->n_lengths; l++)
        fprintf(md, "%s %d", l ? "," : "", (int)c->lengths[l]);
    fprintf(md, "\n- protocols: non-overlapping chunks (every token scored)");
    if (c->sliding > 0)
        fprintf(md, "; sliding window, stride %lld (the last %lld tokens of each window scored)", c->sliding, c->sliding);
    time_t now = time(NULL);
    char date[64] = "";
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &tm);
    fprintf(md, "\n- perplexity cells: mean ± sample standard deviation over the seeds that finished, n seeds; "
                "— where none did\n- written by `biaskit report` on %s\n\n", date);

    fprintf(md, "## Failed or missing runs\n\n");
    if (!c->sum->problems)
        fprintf(md, "None: every run finished and was evaluated.\n\n");
    else {
        fprintf(md, "| run | variant | corpus | seed | state | error |\n|:--|:--|:--|--:|:--|:--|\n");
        for (int i = 0; i < c->n_runs; i++) {
            const run_rec *r = &c->runs[i];
            if (!r->problem[0])
                continue;
            fprintf(md, "| ");
            md_cell(md, r->name);
            fprintf(md, " | ");
            md_cell(md, r->variant);
            fprintf(md, " | ");
            md_cell(md, r->corpus);
            fprintf(md, " | %lld | ", r->seed);
            md_cell(md, r->state);
            fprintf(md, " | ");
            md_cell(md, r->problem);
            fprintf(md, " |\n");
        }
        fprintf(md, "\n");
    }

    /* (1) tables and perplexity curves */
    fprintf(md, "## Perplexity by evaluation length\n\n");
    for (int g = 0; g < c->n_groups && !rc; g++) {
        group_heading(c, md, g);
        for (int p = 0; p < N_PROTO && !rc; p++) {
            if (p == PROTO_SLIDING && c->sliding <= 0)
                continue;
            if (p == PROTO_CHUNKS)
                fprintf(md, "Non-overlapping chunks:\n\n");
            else
                fprintf(md, "Sliding window, stride %lld:\n\n", c->sliding);
            write_table(c, md, g, p);
            if (group_has_proto(c, g, p))
                rc = figure_ppl(c, md, g, p, err);
        }
    }

    /* (2) position-wise loss */
    if (!rc) {
        fprintf(md, "## Loss at each position at the longest length\n\n");
        int before = c->sum->figures + c->sum->undrawn + c->sum->figure_errors;
        for (int g = 0; g < c->n_groups && !rc; g++) {
            if (c->n_groups > 1)
                group_heading(c, md, g);
            rc = figure_positions(c, md, g, err);
        }
        if (!rc && before == c->sum->figures + c->sum->undrawn + c->sum->figure_errors)
            fprintf(md, "No evaluation has position-wise losses.\n\n");
    }

    /* (3) learned biases, (4) mixing weights */
    if (!rc) {
        fprintf(md, "## Learned biases\n\nEvery head's distance table T_h(d) as the attention adds it to its scores "
                    "(the mix of the stream's terms, after the 1/sqrt(d_head) scale), rebuilt from the checkpoint of "
                    "each variant's first seed; a vertical line marks the training length.\n\n");
        char *mix_text = NULL;
        size_t mix_len = 0;
        FILE *mix = open_memstream(&mix_text, &mix_len);
        if (!mix)
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the report");
        else {
            rc = figures_checkpoints(c, md, mix, err);
            if (fclose(mix) != 0 && !rc)
                rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the report");
            if (!rc) {
                fprintf(md, "## Mixing weights over training\n\n");
                fwrite(mix_text, 1, mix_len, md);
            }
        }
        free(mix_text);
    }

    if (!rc) {
        if (c->n_notes) {
            fprintf(md, "## Notes\n\n");
            for (int i = 0; i < c->n_notes; i++) {
                fprintf(md, "- ");
                md_cell(md, c->notes[i]);
                fprintf(md, "\n");
            }
            fprintf(md, "\n");
        }
        fprintf(md, "## Files\n\n"
                    "- `results.csv`: one row per corpus, grid point, variant, protocol and length: "
                    "corpus, grid, variant, protocol, length, x_train (length / training length), n (seeds), "
                    "ppl_mean, ppl_std (sample; empty when n < 2), loss_mean, loss_std, seeds\n"
                    "- `runs.csv`: one row per run, protocol and length: run, variant, corpus, grid, seed, state, "
                    "protocol, length, loss, ppl, problem (a failed run has one row, with its error)\n"
                    "- every figure `NAME.png` comes with `NAME.gp`, the gnuplot script that drew it, and "
                    "`NAME.dat`, its data: edit the script and run `gnuplot NAME.gp` to restyle it\n");
    }
    int werr = ferror(md);
    if (fclose(md) != 0 || werr) {
        remove(tmp);
        return rc ? rc : bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    }
    if (rc) {
        remove(tmp);
        return rc;
    }
    if (rename(tmp, path) != 0)
        return bk_fail(err, BK_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    return BK_OK;
}

static void ctx_free(report_ctx *c)
{
    for (int i = 0; i < c->n_runs; i++) {
        run_rec *r = &c->runs[i];
        free(r->name), free(r->dir), free(r->variant), free(r->corpus), free(r->grid), free(r->eval_set_json);
        for (int k = 0; k < r->n_eval_sets; k++)
            free(r->eval_sets[k]);
        free(r->eval_sets);
        for (int p = 0; p < N_PROTO; p++)
            eval_file_free(&r->ev[p]);
    }
    free(c->runs), free(c->groups), free(c->variants), free(c->sweep_name);
    for (int i = 0; i < c->n_used; i++)
        free(c->used[i]);
    free(c->used);
    for (int i = 0; i < c->n_notes; i++)
        free(c->notes[i]);
    free(c->notes);
}

int bk_sweep_report(const bk_sweep_report_options *o, bk_sweep_report_summary *sum, bk_error *err)
{
    memset(sum, 0, sizeof *sum);
    if (!o || !o->sweep_dir || !*o->sweep_dir)
        return bk_fail(err, BK_ERR_USAGE, "report: no sweep directory given");
    report_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    c->o = o, c->sum = sum;
    bk_copy_text(c->sweep_dir, sizeof c->sweep_dir, o->sweep_dir);
    size_t n = strlen(c->sweep_dir);
    while (n > 1 && c->sweep_dir[n - 1] == '/')
        c->sweep_dir[--n] = '\0';
    int rc = read_index(c, err);
    if (!rc) {
        if (o->out_dir && *o->out_dir)
            bk_copy_text(c->out_dir, sizeof c->out_dir, o->out_dir);
        else
            rc = join_path(c->out_dir, sizeof c->out_dir, c->sweep_dir, BK_REPORT_DEFAULT_SUBDIR, err);
    }
    if (!rc) {
        bk_copy_text(sum->out_dir, sizeof sum->out_dir, c->out_dir);
        for (int i = 0; i < c->n_runs; i++)
            read_run(c, &c->runs[i]);
        if (c->n_lengths == 0)
            lengths_from_evals(c);
        if (c->train_length == 0) /* from an evaluation file, else unknown (no markers) */
            for (int i = 0; i < c->n_runs && !c->train_length; i++) {
                char path[REPORT_PATH_MAX + 32], why[256];
                snprintf(path, sizeof path, "%s/%s", c->runs[i].path, proto_file[PROTO_CHUNKS]);
                cJSON *j = c->runs[i].ev[PROTO_CHUNKS].ok ? read_json(path, "evaluation file", why, sizeof why) : NULL;
                long long L;
                if (j && json_int(cJSON_GetObjectItemCaseSensitive(j, "train_length"), 1, MAX_LENGTH, &L))
                    c->train_length = L;
                cJSON_Delete(j);
            }
        sum->runs = c->n_runs;
        for (int i = 0; i < c->n_runs; i++) {
            if (c->runs[i].problem[0])
                sum->problems++;
            else
                sum->done++;
        }
        rc = make_dirs(c->out_dir, err);
    }
    if (!rc)
        rc = write_csvs(c, err);
    if (!rc)
        rc = write_report(c, err);
    ctx_free(c);
    free(c);
    return rc;
}

int bk_report_read_bytes(bk_report_file kind, const char *bytes, size_t size, bk_error *err)
{
    bk_error_clear(err);
    report_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    bk_sweep_report_options o = {"fuzz", NULL, NULL};
    bk_sweep_report_summary sum;
    memset(&sum, 0, sizeof sum);
    c->o = &o, c->sum = &sum;
    bk_copy_text(c->sweep_dir, sizeof c->sweep_dir, "fuzz");
    bk_copy_text(c->index_path, sizeof c->index_path, "fuzz/sweep.json");
    int rc = BK_OK;
    char why[BK_ERROR_MESSAGE_MAX];
    if (kind == BK_REPORT_FILE_METRICS) {
        static const int n_on[BK_STREAM_COUNT] = {2, 1};
        mix_log m;
        if (parse_mix_log(bytes, size, n_on, &m))
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory");
        else if (m.n > m.lines)
            rc = bk_fail(err, BK_ERR_INTERNAL, "metrics: %zu points from %zu lines", m.n, m.lines);
        for (size_t i = 1; !rc && i < m.n; i++)
            if (!(m.x[i] > m.x[i - 1])) /* the steps drawn increase */
                rc = bk_fail(err, BK_ERR_INTERNAL, "metrics: step %g after %g", m.x[i], m.x[i - 1]);
        mix_log_free(&m);
    } else {
        cJSON *j = parse_json(bytes, size, kind == BK_REPORT_FILE_INDEX ? "sweep.json" : "eval.json", why, sizeof why);
        if (!j)
            rc = bk_fail(err, BK_ERR_PARSE, "%s", why);
        else if (kind == BK_REPORT_FILE_INDEX) {
            rc = parse_index(c, j, err);
            if (!rc && c->n_lengths == 0)
                lengths_from_evals(c);
        } else {
            /* the evaluation of one run of a sweep at lengths 16, 32, 64 */
            static const int32_t lengths[] = {16, 32, 64};
            c->n_lengths = 3;
            memcpy(c->lengths, lengths, sizeof lengths);
            run_rec *r = c->runs = calloc(1, sizeof *c->runs);
            if (!r)
                rc = bk_fail(err, BK_ERR_NOMEM, "out of memory");
            else {
                c->n_runs = 1;
                int proto = kind == BK_REPORT_FILE_EVAL_SLIDING ? PROTO_SLIDING : PROTO_CHUNKS;
                parse_eval(c, r, proto, j, "fuzz/run/eval.json");
                if (r->problem[0])
                    rc = bk_fail(err, BK_ERR_PARSE, "%s", r->problem);
                for (int k = 0; r->ev[proto].ok && k < r->ev[proto].n; k++) {
                    cell s;
                    cell_stats(c, 0, 0, proto, r->ev[proto].pts[k].length, &s);
                }
            }
        }
        cJSON_Delete(j);
    }
    ctx_free(c);
    free(c);
    return rc;
}
