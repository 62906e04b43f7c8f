#define _DEFAULT_SOURCE /* flock */
#include "train/rundir.h"

#include "util/file.h"
#include "util/path.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* A run directory named through a symbolic link (`what` 'dir'): refused when the directory it points to
 * holds another run, a checkpoint or a metrics log that this training does not resume (`resume`: the
 * checkpoint it continues, or NULL). Naming that directory itself replaces the run, as it always has. */
static int check_link(const char *what, const char *dir, const char *resume, bk_error *err)
{
    struct stat st;
    char target[PATH_MAX];
    if (lstat(dir, &st) != 0 || !S_ISLNK(st.st_mode) || !realpath(dir, target))
        return BK_OK; /* not a link; a dangling one is reported when the directory is made */
    static const char *const run_files[] = {BK_RUN_CHECKPOINT_FILE, BK_RUN_METRICS_FILE};
    struct stat resumed, ours;
    char ckpt[PATH_MAX + 32];
    snprintf(ckpt, sizeof ckpt, "%s/%s", target, BK_RUN_CHECKPOINT_FILE);
    if (resume && stat(resume, &resumed) == 0 && stat(ckpt, &ours) == 0 && resumed.st_dev == ours.st_dev &&
        resumed.st_ino == ours.st_ino)
        return BK_OK; /* this training continues the run the link names */
    for (size_t i = 0; i < sizeof run_files / sizeof run_files[0]; i++) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", target, run_files[i]);
        if (stat(path, &st) == 0)
            return bk_fail(err, BK_ERR_IO,
                           "%s '%s' is a symbolic link to '%s', which holds another run (%s); training through the "
                           "link would replace it. Name the directory itself to replace that run, continue it with "
                           "--resume %s/%s, or write elsewhere",
                           what, dir, target, run_files[i], target, BK_RUN_CHECKPOINT_FILE);
    }
    return BK_OK;
}

static int choose(const bk_lm *lm, const char *out_dir, const char *resume, char *dir, size_t size, bk_error *err)
{
    const bk_experiment *e = &lm->exp;
    int rc;
    if (out_dir && !*out_dir)
        return bk_fail(err, BK_ERR_USAGE, "--out: expected a directory, got an empty string");
    if (out_dir) {
        rc = bk_path_resolve(NULL, out_dir, dir, size, err);
        return rc ? rc : check_link("--out", dir, resume, err);
    }
    if (resume) { /* a resumed run continues in its checkpoint's directory */
        char buf[PATH_MAX];
        if (snprintf(buf, sizeof buf, "%s", resume) >= (int)sizeof buf)
            return bk_fail(err, BK_ERR_INVALID, "checkpoint path '%s' is too long (at most %zu bytes)", resume,
                           sizeof buf - 1);
        char *slash = strrchr(buf, '/');
        if (slash)
            slash[slash == buf] = '\0'; /* "/ckpt" keeps "/" */
        return bk_path_resolve(NULL, slash ? buf : ".", dir, size, err);
    }
    if (e->run.out_dir && e->run.out_dir[0]) {
        rc = bk_path_resolve(lm->config_dir, e->run.out_dir, dir, size, err);
        return rc ? rc : check_link("[run] out_dir", dir, resume, err);
    }
    const char *base = strrchr(e->path, '/') ? strrchr(e->path, '/') + 1 : e->path;
    size_t len = strlen(base);
    if (len > 5 && strcmp(base + len - 5, ".toml") == 0)
        len -= 5;
    if (snprintf(dir, size, "runs/%.*s", (int)len, base) >= (int)size)
        return bk_fail(err, BK_ERR_INVALID, "run directory name for '%s' is too long (at most %zu bytes)", e->path,
                       size - 1);
    return check_link("the run directory", dir, resume, err);
}

int bk_run_dir_choose(const bk_lm *lm, const char *out_dir, const char *resume, char *dir, size_t size,
                      bk_error *err)
{
    int rc = choose(lm, out_dir, resume, dir, size, err);
    /* a run directory inside a data directory of its experiment: the next training would read its
     * checkpoint and logs as data */
    const bk_experiment *e = &lm->exp;
    for (int i = 0; !rc && i < e->data.paths.n + e->data.val_paths.n; i++) {
        const int val = i >= e->data.paths.n;
        const char *p = val ? e->data.val_paths.items[i - e->data.paths.n] : e->data.paths.items[i];
        char data[PATH_MAX];
        struct stat st;
        if ((rc = bk_path_resolve(lm->config_dir, p, data, sizeof data, err)) || stat(data, &st) != 0 ||
            !S_ISDIR(st.st_mode) || !bk_path_within(dir, data))
            continue;
        rc = bk_fail(err, BK_ERR_USAGE, "%s '%s' lies inside the data directory '%s' ([data] %s): a training "
                     "there would read the run's checkpoint and logs as data; write the run elsewhere",
                     out_dir                                ? "--out"
                     : resume                               ? "the resumed run's directory"
                     : e->run.out_dir && e->run.out_dir[0] ? "[run] out_dir"
                                                            : "the run directory",
                     dir, data,
                     val ? "val_paths" : "paths");
    }
    return rc;
}

/* mkdir -p */
static int make_dirs(const char *path, bk_error *err)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return bk_fail(err, BK_ERR_INVALID, "run directory '%s' is too long (at most %zu bytes)", path, sizeof buf - 1);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            struct stat st;
            if (mkdir(buf, 0777) != 0) {
                if (errno != EEXIST)
                    return bk_fail(err, BK_ERR_IO, "cannot create the run directory '%s': %s: %s", path, buf,
                                   strerror(errno));
                if (stat(buf, &st) != 0)
                    return bk_fail(err, BK_ERR_IO, "cannot create the run directory '%s': '%s': %s", path, buf,
                                   strerror(errno));
                if (!S_ISDIR(st.st_mode))
                    return bk_fail(err, BK_ERR_IO,
                                   "cannot create the run directory '%s': '%s' is not a directory (it is %s)", path,
                                   buf, bk_file_kind(st.st_mode));
            }
            *p = c;
            if (!c)
                break;
        }
    }
    return BK_OK;
}

int bk_run_dir_open(bk_run_dir *rd, const char *dir, bk_error *err)
{
    memset(rd, 0, sizeof *rd);
    rd->lock_fd = -1;
    int rc = make_dirs(dir, err);
    if (rc)
        return rc;
    bk_path_display(dir, rd->path, sizeof rd->path);
    char lock[PATH_MAX + 32];
    snprintf(lock, sizeof lock, "%s/%s", rd->path, BK_RUN_LOCK_FILE);
    char holder[32];
    /* The lock file is removed by its holder when the training ends (bk_run_dir_close), while still
     * held. A trainer that opened the file just before that unlink and took the flock just after the
     * close holds the lock of a file no longer at the path, which a third trainer would recreate and
     * lock too: so the lock only counts when the path still names the locked file; else take it again
     * (a few times: each retry needs another training to end in between). */
    for (int attempt = 0;; attempt++) {
        rc = bk_file_lock(lock, "the lock file of the run directory", &rd->lock_fd, holder, sizeof holder, err);
        if (rc || rd->lock_fd < 0)
            break;
        struct stat held, named;
        if (fstat(rd->lock_fd, &held) == 0 && lstat(lock, &named) == 0 && held.st_dev == named.st_dev &&
            held.st_ino == named.st_ino)
            break;
        close(rd->lock_fd);
        rd->lock_fd = -1;
        if (attempt == 100)
            return bk_fail(err, BK_ERR_IO, "the lock file '%s' of the run directory kept changing while it was "
                           "taken (100 attempts): is another program removing it?", lock);
    }
    if (rc)
        return rc;
    if (rd->lock_fd < 0)
        return bk_fail(err, BK_ERR_IO, "the run directory '%s' is in use by another training (pid %s, lock %s); "
                       "wait for it to end or write elsewhere with --out DIR", rd->path, holder, lock);
    /* Temporary files of checkpoint and metrics writes that a killed trainer left: with the lock held
     * no one else writes here, so they are all stale. */
    DIR *d = opendir(rd->path);
    for (struct dirent *ent; d && (ent = readdir(d));)
        if (strncmp(ent->d_name, BK_RUN_CHECKPOINT_FILE ".tmp", sizeof BK_RUN_CHECKPOINT_FILE + 3) == 0 ||
            strncmp(ent->d_name, BK_RUN_METRICS_FILE ".tmp", sizeof BK_RUN_METRICS_FILE + 3) == 0) {
            char stale[PATH_MAX + 300];
            snprintf(stale, sizeof stale, "%s/%s", rd->path, ent->d_name);
            remove(stale);
        }
    if (d)
        closedir(d);
    return BK_OK;
}

void bk_run_dir_close(bk_run_dir *rd)
{
    if (rd->lock_fd >= 0) {
        /* The file goes with the training, removed while the flock is still held (see bk_run_dir_open for
         * why that is safe), and only when the path still names it. A crash (SIGKILL, power) leaves it:
         * harmless, since the flock dies with the process; the next training of the directory takes the
         * lock on that file and removes it when it ends. */
        char lock[PATH_MAX + 32];
        snprintf(lock, sizeof lock, "%s/%s", rd->path, BK_RUN_LOCK_FILE);
        struct stat held, named;
        if (fstat(rd->lock_fd, &held) == 0 && lstat(lock, &named) == 0 && held.st_dev == named.st_dev &&
            held.st_ino == named.st_ino)
            unlink(lock);
        close(rd->lock_fd); /* releases the flock */
    }
    rd->lock_fd = -1;
}

/* The step of one metrics record ({"step": N, ...}); 0 when it has none. */
static int record_step(const char *line, long long *step)
{
    const char *p = strstr(line, "\"step\":");
    if (!p)
        return 0;
    char *end;
    errno = 0;
    *step = strtoll(p + 7, &end, 10);
    return end != p + 7 && !errno;
}

/* Rewrite `path` keeping the complete records with step <= `step`; a missing file is fine. */
static int cut_metrics(const char *path, int64_t step, bk_error *err)
{
    FILE *in = fopen(path, "r");
    if (!in)
        return errno == ENOENT ? BK_OK : bk_fail(err, BK_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    char tmp[PATH_MAX + 64];
    snprintf(tmp, sizeof tmp, "%s.tmp", path); /* the run directory's lock makes this name ours */
    FILE *out = fopen(tmp, "w");
    if (!out) {
        int saved = errno;
        fclose(in);
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", tmp, strerror(saved));
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int ok = 1;
    long long s;
    while (ok && (n = getline(&line, &cap, in)) > 0)
        if (line[n - 1] == '\n' && record_step(line, &s) && s <= step) /* a torn last line goes too */
            ok = fwrite(line, 1, (size_t)n, out) == (size_t)n;
    int saved = errno, read_error = ferror(in);
    free(line);
    fclose(in);
    ok = ok && !read_error && fflush(out) == 0 && fsync(fileno(out)) == 0;
    if (!ok)
        saved = errno;
    if (fclose(out) != 0 && ok)
        ok = 0, saved = errno;
    if (ok && rename(tmp, path) != 0)
        ok = 0, saved = errno;
    if (!ok) {
        remove(tmp);
        return bk_fail(err, BK_ERR_IO, "cannot cut '%s' back to step %lld (through %s): %s", path, (long long)step,
                       tmp, strerror(saved ? saved : EIO));
    }
    return BK_OK;
}

int bk_run_dir_metrics(const bk_run_dir *rd, int resume, int64_t step, FILE **out, bk_error *err)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", rd->path, BK_RUN_METRICS_FILE);
    int rc = resume ? cut_metrics(path, step, err) : BK_OK;
    if (rc)
        return rc;
    if (!(*out = fopen(path, resume ? "a" : "w")))
        return bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    return BK_OK;
}
