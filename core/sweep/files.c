/* The files of a sweep directory (sweep.h): its lock, the sweep index (sweep.json), each run's
 * experiment.toml and status.json, and the training one run shares with another; every state file
 * written through a temporary file and a rename. */
#define _GNU_SOURCE /* getpid, flock */
#include "sweep/sweep_internal.h"

#include "io/safetensors.h" /* bk_xxh64 */
#include "train/rundir.h"
#include "util/file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static int mkdir_p(const char *dir, bk_error *err)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return bk_fail(err, BK_ERR_INVALID, "directory name too long: '%s' (at most %zu bytes)", dir, sizeof buf - 1);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return bk_fail(err, BK_ERR_IO, "cannot create directory '%s': %s", buf, strerror(errno));
            *p = c;
            if (!c)
                break;
        }
    }
    return BK_OK;
}

/* Write `text` to `path` through a temporary file and a rename: a reader sees the old or the new file. */
static int write_atomic(const char *path, const char *text, bk_error *err)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    /* a new file of ours: whatever a dead sweep of this pid (or anyone) left under the name goes first */
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", tmp, strerror(e));
    }
    int bad = fputs(text, f) < 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        remove(tmp);
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", path, strerror(e));
    }
    return BK_OK;
}

/* A state file of the sweep directory: *text NULL when there is none; else a regular file of at
 * most BK_TEXT_FILE_MAX bytes (a FIFO or a device there is refused, never read). */
static int read_state_file(const char *path, const char *what, char **text, bk_error *err)
{
    *text = NULL;
    struct stat st;
    if (lstat(path, &st) != 0 && errno == ENOENT)
        return BK_OK;
    size_t len;
    return bk_file_read_all(path, what, BK_TEXT_FILE_MAX, text, &len, err);
}

int bk_sweep_lock(const bk_sweep *sw, int *fd, bk_error *err)
{
    *fd = -1;
    int rc = mkdir_p(sw->out_dir, err);
    if (rc)
        return rc;
    char lock[4200];
    snprintf(lock, sizeof lock, "%s/" BK_SWEEP_LOCK_FILE, sw->out_dir);
    char holder[32];
    rc = bk_file_lock(lock, "the lock file of the sweep directory", fd, holder, sizeof holder, err);
    if (rc == BK_OK && *fd < 0)
        rc = bk_fail(err, BK_ERR_IO, "the sweep directory '%s' is in use by another sweep (pid %s, lock %s); wait "
                     "for it to end (its runs would train twice), or give this sweep another [sweep] out_dir",
                     sw->out_dir, holder, lock);
    return rc;
}

void bk_sweep_unlock(int *fd)
{
    if (*fd >= 0)
        close(*fd); /* releases the flock; the file stays (removing it would race the next sweep) */
    *fd = -1;
}

int bk_sweep_write_index(const bk_sweep *sw, bk_error *err)
{
    int rc = mkdir_p(sw->out_dir, err);
    if (rc)
        return rc;
    cJSON *root = cJSON_CreateObject(), *lengths = NULL, *runs = NULL;
    int ok = root && cJSON_AddStringToObject(root, "sweep", sw->path) && (lengths = cJSON_AddArrayToObject(root, "lengths"));
    for (int i = 0; ok && i < sw->n_lengths; i++)
        ok = cJSON_AddItemToArray(lengths, cJSON_CreateNumber(sw->lengths[i]));
    ok = ok && cJSON_AddNumberToObject(root, "sliding", (double)sw->sliding) &&
         cJSON_AddNumberToObject(root, "train_length", (double)sw->train_length) &&
         (runs = cJSON_AddArrayToObject(root, "runs"));
    for (int i = 0; ok && i < sw->n_runs; i++) {
        const bk_sweep_run *r = &sw->runs[i];
        cJSON *o = cJSON_CreateObject(), *grid = NULL, *sets = NULL;
        ok = o && cJSON_AddItemToArray(runs, o) && cJSON_AddStringToObject(o, "name", r->name) &&
             cJSON_AddStringToObject(o, "dir", r->name) && cJSON_AddStringToObject(o, "variant", r->variant) &&
             cJSON_AddStringToObject(o, "corpus", r->corpus) && cJSON_AddNumberToObject(o, "seed", (double)r->seed) &&
             (grid = cJSON_AddObjectToObject(o, "grid"));
        for (int g = 0; ok && g < r->n_grid; g++)
            ok = cJSON_AddStringToObject(grid, r->grid_keys[g], r->grid_values[g]) != NULL;
        ok = ok && (sets = cJSON_AddArrayToObject(o, "sets"));
        for (int s = 0; ok && s < r->n_sets; s++)
            ok = cJSON_AddItemToArray(sets, cJSON_CreateString(r->sets[s]));
        cJSON *eval_set = NULL; /* only when given: the index of a sweep without one stays as it was */
        if (ok && r->n_eval_sets)
            ok = (eval_set = cJSON_AddArrayToObject(o, "eval_set")) != NULL;
        for (int s = 0; ok && s < r->n_eval_sets; s++)
            ok = cJSON_AddItemToArray(eval_set, cJSON_CreateString(r->eval_sets[s]));
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory writing " BK_SWEEP_INDEX_FILE);
    char path[4200];
    snprintf(path, sizeof path, "%s/" BK_SWEEP_INDEX_FILE, sw->out_dir);
    size_t n = strlen(text);
    char *full = malloc(n + 2);
    if (full) {
        memcpy(full, text, n);
        memcpy(full + n, "\n", 2);
    }
    cJSON_free(text);
    if (!full)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory writing " BK_SWEEP_INDEX_FILE);
    rc = write_atomic(path, full, err);
    free(full);
    return rc;
}

int bk_sweep_eval_set_current(const bk_sweep_run *run, const bk_run_status *st)
{
    return strcmp(run->eval_set_json ? run->eval_set_json : "", st->eval_set) == 0;
}

int bk_sweep_has_checkpoint(const bk_sweep_run *run)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/" BK_RUN_CHECKPOINT_FILE, run->dir);
    return stat(path, &st) == 0;
}

int bk_sweep_trained_as(const bk_sweep_run *from, const char *text)
{
    if (!bk_sweep_has_checkpoint(from))
        return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/" BK_SWEEP_EXPERIMENT_FILE, from->dir);
    char *old = NULL;
    bk_error ignored;
    int same = read_state_file(path, "run experiment file", &old, &ignored) == BK_OK && old && strcmp(old, text) == 0;
    free(old);
    return same;
}

typedef struct text_key {
    uint64_t hash;
    int index;
} text_key;

static int text_key_order(const void *a, const void *b)
{
    const text_key *x = a, *y = b;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

int bk_sweep_first_of_experiment(const bk_sweep *sw, int *first, bk_error *err)
{
    text_key *keys = malloc((size_t)(sw->n_runs ? sw->n_runs : 1) * sizeof *keys);
    if (!keys)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    for (int i = 0; i < sw->n_runs; i++) {
        keys[i] = (text_key){bk_xxh64(sw->runs[i].text, strlen(sw->runs[i].text), 0), i};
        first[i] = i;
    }
    qsort(keys, (size_t)sw->n_runs, sizeof *keys, text_key_order); /* by hash, then index */
    for (int a = 0; a < sw->n_runs;) {
        int b = a;
        while (b < sw->n_runs && keys[b].hash == keys[a].hash)
            b++;
        for (int i = a + 1; i < b; i++) /* the earliest of the same text (a hash may be shared by others) */
            for (int k = a; k < i; k++)
                if (first[keys[k].index] == keys[k].index &&
                    strcmp(sw->runs[keys[k].index].text, sw->runs[keys[i].index].text) == 0) {
                    first[keys[i].index] = keys[k].index;
                    break;
                }
        a = b;
    }
    free(keys);
    return BK_OK;
}

/* A copy of the regular file `from` at `to`, written into a temporary file renamed over `to`. */
static int copy_file(const char *from, const char *to, bk_error *err)
{
    FILE *in;
    int rc = bk_file_open_regular(from, "file", 0, &in, NULL, err);
    if (rc)
        return rc;
    char tmp[4300];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", to, (long)getpid()) >= (int)sizeof tmp) {
        fclose(in);
        return bk_fail(err, BK_ERR_INVALID, "path too long: '%s' (at most %zu bytes with its temporary suffix)", to,
                       sizeof tmp - 1);
    }
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) {
        int e = errno;
        fclose(in);
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", tmp, strerror(e));
    }
    char buf[1 << 16];
    size_t n;
    int bad = 0;
    while (!bad && (n = fread(buf, 1, sizeof buf, in)) > 0)
        bad = bk_write_all(fd, buf, n) != 0;
    int e = errno;
    bad |= ferror(in) != 0;
    fclose(in);
    bad |= fsync(fd) != 0 || close(fd) != 0;
    if (bad || rename(tmp, to) != 0) {
        e = bad ? e : errno;
        unlink(tmp);
        return bk_fail(err, BK_ERR_IO, "cannot copy '%s' to '%s': %s", from, to, strerror(e));
    }
    return BK_OK;
}

int bk_sweep_share_training(const bk_sweep_run *from, const bk_sweep_run *to, bk_error *err)
{
    static const char *const files[] = {BK_RUN_CHECKPOINT_FILE, BK_RUN_METRICS_FILE}; /* the checkpoint first */
    for (int i = 0; i < 2; i++) {
        char a[4200], b[4200];
        struct stat st;
        snprintf(a, sizeof a, "%s/%s", from->dir, files[i]);
        snprintf(b, sizeof b, "%s/%s", to->dir, files[i]);
        if (i > 0 && lstat(a, &st) != 0 && errno == ENOENT) {
            unlink(b); /* no metrics: none of another training either */
            continue;
        }
        int rc = copy_file(a, b, err);
        if (rc) {
            char c[4200];
            snprintf(c, sizeof c, "%s/" BK_RUN_CHECKPOINT_FILE, to->dir);
            unlink(c);
            return bk_error_prefix(err, "run '%s': sharing the training of run '%s': ", to->name, from->name);
        }
    }
    char c[4200];
    snprintf(c, sizeof c, "%s/" BK_RUN_CHECKPOINT_FILE, to->dir);
    bk_file_sync_dir(c); /* the renames, durable */
    return BK_OK;
}

int bk_sweep_prepare_run(const bk_sweep_run *run, int has_checkpoint, bk_error *err)
{
    int rc = mkdir_p(run->dir, err);
    if (rc)
        return rc;
    char path[4200];
    snprintf(path, sizeof path, "%s/" BK_SWEEP_EXPERIMENT_FILE, run->dir);
    char *old;
    if ((rc = read_state_file(path, "run experiment file", &old, err)))
        return bk_error_prefix(err, "run '%s': ", run->name);
    int same = old && strcmp(old, run->text) == 0;
    free(old);
    if (same)
        return BK_OK;
    if (old && has_checkpoint)
        return bk_fail(err, BK_ERR_CONFIG,
                       "run '%s': the sweep file now resolves to another experiment than '%s', which its checkpoint "
                       "was trained from; delete '%s' to train the new one (or restore the sweep file to resume)",
                       run->name, path, run->dir);
    return write_atomic(path, run->text, err);
}

const char *bk_run_state_name(bk_run_state state)
{
    static const char *const names[] = {"pending", "training", "evaluating", "done", "failed"}; /* BK_RUN_STATE_CHOICES */
    return (int)state >= 0 && (int)state < 5 ? names[state] : "?";
}

int bk_sweep_read_status(const bk_sweep_run *run, bk_run_status *st, bk_error *err)
{
    memset(st, 0, sizeof *st);
    st->state = BK_RUN_PENDING;
    char path[4200];
    snprintf(path, sizeof path, "%s/" BK_SWEEP_STATUS_FILE, run->dir);
    char *text;
    int rc = read_state_file(path, "status file", &text, err);
    if (rc || !text)
        return rc;
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *state = cJSON_GetObjectItemCaseSensitive(j, "state");
    int index = cJSON_IsString(state) ? bk_choice_index(BK_RUN_STATE_CHOICES, state->valuestring) : -1;
    if (!cJSON_IsObject(j) || index < 0) {
        cJSON_Delete(j);
        return bk_fail(err, BK_ERR_PARSE, "%s: expected a JSON object with \"state\": one of %s (delete it to start the "
                                          "run again)",
                       path, BK_RUN_STATE_CHOICES);
    }
    st->state = (bk_run_state)index;
    const cJSON *v;
    if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(j, "error")))
        bk_copy_text(st->error, sizeof st->error, v->valuestring);
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(j, "train_seconds")))
        st->train_seconds = v->valuedouble;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(j, "eval_seconds")))
        st->eval_seconds = v->valuedouble;
    if ((v = cJSON_GetObjectItemCaseSensitive(j, "eval_set"))) { /* as written: an array of strings */
        char *text = cJSON_IsArray(v) ? cJSON_PrintUnformatted(v) : NULL;
        /* anything else, or too long, is recorded as not matching any eval_set: evaluated again */
        bk_copy_text(st->eval_set, sizeof st->eval_set, text ? text : "?");
        if (text && strlen(text) >= sizeof st->eval_set)
            bk_copy_text(st->eval_set, sizeof st->eval_set, "?");
        cJSON_free(text);
    }
    cJSON_Delete(j);
    return BK_OK;
}

int bk_sweep_write_status(const bk_sweep_run *run, const bk_run_status *st, bk_error *err)
{
    cJSON *j = cJSON_CreateObject();
    int ok = j && cJSON_AddStringToObject(j, "state", bk_run_state_name(st->state)) &&
             cJSON_AddStringToObject(j, "error", st->error) &&
             cJSON_AddNumberToObject(j, "train_seconds", round(st->train_seconds * 1000.0) / 1000.0) &&
             cJSON_AddNumberToObject(j, "eval_seconds", round(st->eval_seconds * 1000.0) / 1000.0);
    if (ok && st->eval_set[0]) { /* only when given: the status of a run without one stays as it was */
        cJSON *set = cJSON_Parse(st->eval_set);
        ok = cJSON_IsArray(set) && cJSON_AddItemToObject(j, "eval_set", set);
        if (!ok)
            cJSON_Delete(set);
    }
    char *text = ok ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!text)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory writing " BK_SWEEP_STATUS_FILE);
    sbuf b = {0};
    sw_sb_puts(&b, text);
    sw_sb_puts(&b, "\n");
    cJSON_free(text);
    char *full = sw_sb_take(&b);
    if (!full)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory writing " BK_SWEEP_STATUS_FILE);
    char path[4200];
    snprintf(path, sizeof path, "%s/" BK_SWEEP_STATUS_FILE, run->dir);
    int rc = write_atomic(path, full, err);
    free(full);
    return rc;
}
