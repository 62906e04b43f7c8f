#define _DEFAULT_SOURCE /* realpath, fchmod, fsync */
#include "util/output.h"

#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_TMP_TRIES 1000

static int is_stdout(const char *path)
{
    return strcmp(path, "-") == 0;
}

static int same_inode(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* The absolute file a regular (or new) output replaces: the real path of an existing one (a symbolic
 * link's target), else the real path of its directory joined with its name. Fails naming the flag and
 * path. */
static int output_target(const char *flag, const char *path, char *out, size_t size, bk_error *err)
{
    char buf[PATH_MAX];
    struct stat st;
    if (stat(path, &st) == 0) {
        if (!realpath(path, buf))
            return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': %s", flag, path, strerror(errno));
    } else {
        if (errno != ENOENT)
            return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': %s", flag, path, strerror(errno));
        if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
            return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': it is a symbolic link to a file that does not exist",
                           flag, path);
        size_t len = strlen(path);
        if (len && path[len - 1] == '/')
            return bk_fail(err, BK_ERR_USAGE, "%s '%s' ends with '/'; expected a file name", flag, path);
        const char *slash = strrchr(path, '/');
        char parent[PATH_MAX];
        if (!slash)
            bk_copy_text(parent, sizeof parent, ".");
        else if (slash == path)
            bk_copy_text(parent, sizeof parent, "/");
        else if ((size_t)(slash - path) >= sizeof parent)
            return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': the path is too long (resolved, at most %d bytes)", flag,
                           path, PATH_MAX - 1);
        else
            memcpy(parent, path, (size_t)(slash - path)), parent[slash - path] = '\0';
        char real_parent[PATH_MAX];
        if (!realpath(parent, real_parent))
            return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': directory '%s': %s", flag, path, parent,
                           strerror(errno));
        const char *base = slash ? slash + 1 : path;
        if (snprintf(buf, sizeof buf, "%s%s%s", real_parent, strcmp(real_parent, "/") == 0 ? "" : "/", base) >=
            (int)sizeof buf)
            return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': the path is too long (resolved, at most %d bytes)", flag,
                           path, PATH_MAX - 1);
    }
    if (strlen(buf) >= size)
        return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': the path is too long (resolved, at most %d bytes)", flag,
                           path, PATH_MAX - 1);
    bk_copy_text(out, size, buf);
    return BK_OK;
}

/* The directory of an absolute target, in dir[size] ("/" for a file at the root). */
static void target_dir(const char *target, char *dir, size_t size)
{
    bk_copy_text(dir, size, target);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[slash == dir] = '\0';
}

/* 1 when the absolute file `target` lies under the directory `dir` (a real path) where the data reader
 * would take it: no hidden component below dir, a name with one of the extensions. */
static int in_data_dir(const char *target, const char *dir, const char *const *ext, int n_ext)
{
    size_t dl = strlen(dir);
    const char *rest;
    if (strcmp(dir, "/") == 0)
        rest = target + 1;
    else if (strncmp(target, dir, dl) == 0 && target[dl] == '/')
        rest = target + dl + 1;
    else
        return 0;
    for (const char *p = rest; *p;) {
        if (*p == '.')
            return 0;
        const char *slash = strchr(p, '/');
        if (!slash)
            break;
        p = slash + 1;
    }
    const char *base = strrchr(target, '/') + 1;
    return bk_name_has_suffix(base, ext, n_ext);
}

static void describe_ext(char *dst, size_t size, const char *const *ext, int n)
{
    if (n <= 0) {
        bk_copy_text(dst, size, "(every name not hidden)");
        return;
    }
    size_t used = (size_t)snprintf(dst, size, "ending in");
    for (int i = 0; i < n && used < size; i++)
        used += (size_t)snprintf(dst + used, size - used, "%s %s", i == 0 ? "" : i == n - 1 ? " or" : ",", ext[i]);
}

/* The refusal: "--csv 'x' is the checkpoint 'y'", or for a file beside the output "--plot 'p' writes 'w',
 * which is the checkpoint 'y'". */
static int refuse(const char *flag, const char *path, const char *written, const char *relation,
                  const bk_output_input *in, const char *extra, bk_error *err)
{
    if (written)
        return bk_fail(err, BK_ERR_USAGE, "%s '%s' writes '%s', which %s the %s '%s'%s", flag, path, written,
                       relation, in->what, in->path, extra);
    return bk_fail(err, BK_ERR_USAGE, "%s '%s' %s the %s '%s'%s", flag, path, relation, in->what, in->path, extra);
}

/* bk_output_check, with `written` the file checked when it is not `path` itself (NULL: path). */
static int check_output(const char *flag, const char *path, const char *written, const bk_output_input *inputs,
                        int n_inputs, bk_error *err)
{
    const char *file = written ? written : path;
    if (!path || !*path)
        return bk_fail(err, BK_ERR_USAGE, "%s: expected a file name ('-' for standard output), got an empty string",
                       flag);
    struct stat out, in;
    if (is_stdout(file)) {
        /* `>>` onto an input: the shell opened it, but the command would still append to it */
        if (fstat(STDOUT_FILENO, &out) == 0 && S_ISREG(out.st_mode))
            for (int i = 0; i < n_inputs; i++)
                if (inputs[i].path && stat(inputs[i].path, &in) == 0 && S_ISREG(in.st_mode) && same_inode(&out, &in))
                    return bk_fail(err, BK_ERR_USAGE, "%s - writes standard output, which is the %s '%s' (an input "
                                   "of this command); choose another file", flag, inputs[i].what, inputs[i].path);
        return BK_OK;
    }
    int exists = stat(file, &out) == 0;
    if (exists && S_ISDIR(out.st_mode))
        return written ? bk_fail(err, BK_ERR_USAGE, "%s '%s' writes '%s', which is a directory; expected a file", flag,
                                 path, written)
                       : bk_fail(err, BK_ERR_USAGE, "%s '%s' is a directory; expected a file", flag, path);
    if (exists && !S_ISREG(out.st_mode) && !S_ISCHR(out.st_mode) && !S_ISFIFO(out.st_mode))
        return bk_fail(err, BK_ERR_USAGE, "%s '%s' is %s; expected a regular file, a character device or a FIFO", flag,
                       file, bk_file_kind(out.st_mode));
    char target[BK_OUTPUT_PATH_MAX];
    int regular = !exists || S_ISREG(out.st_mode);
    int rc = regular ? output_target(flag, file, target, sizeof target, err) : BK_OK;
    if (rc)
        return rc;
    for (int i = 0; i < n_inputs; i++) {
        const bk_output_input *input = &inputs[i];
        if (!input->path || stat(input->path, &in) != 0)
            continue; /* an input that is not there is not replaced; its reader says so */
        if (exists && same_inode(&out, &in))
            return refuse(flag, path, written, "is", input, " (an input of this command); choose another file", err);
        char dir[PATH_MAX];
        if (regular && S_ISDIR(in.st_mode) && realpath(input->path, dir) &&
            in_data_dir(target, dir, input->ext, input->n_ext)) {
            char names[256], extra[400];
            describe_ext(names, sizeof names, input->ext, input->n_ext);
            snprintf(extra, sizeof extra, ", whose files %s are this command's data; choose a file outside it", names);
            return refuse(flag, path, written, "lies in", &(bk_output_input){input->what, dir, NULL, 0}, extra, err);
        }
    }
    if (regular) { /* fail now rather than after the command's work */
        char dir[BK_OUTPUT_PATH_MAX];
        target_dir(target, dir, sizeof dir);
        if (access(dir, W_OK) != 0)
            return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': directory '%s': %s", flag, file, dir,
                           strerror(errno));
    }
    return BK_OK;
}

int bk_output_check(const char *flag, const char *path, const bk_output_input *inputs, int n_inputs,
                    bk_error *err)
{
    return check_output(flag, path, NULL, inputs, n_inputs, err);
}

int bk_output_check_beside(const char *flag, const char *path, const char *written, const bk_output_input *inputs,
                           int n_inputs, bk_error *err)
{
    return check_output(flag, path, written, inputs, n_inputs, err);
}

int bk_output_check_distinct(const char *const *flags, const char *const *paths, int n, bk_error *err)
{
    for (int j = 1; j < n; j++) {
        if (paths[j] && is_stdout(paths[j]))
            for (int i = 0; i < j; i++)
                if (paths[i] && is_stdout(paths[i]))
                    return bk_fail(err, BK_ERR_USAGE, "%s - and %s - both name standard output; give one of them "
                                   "a file", flags[i], flags[j]);
        if (!paths[j] || !*paths[j] || is_stdout(paths[j]))
            continue;
        char tj[BK_OUTPUT_PATH_MAX], ti[BK_OUTPUT_PATH_MAX];
        bk_error ignored;
        struct stat sj, si;
        int have_j = output_target(flags[j], paths[j], tj, sizeof tj, &ignored) == BK_OK;
        int exists_j = stat(paths[j], &sj) == 0;
        for (int i = 0; i < j; i++) {
            if (!paths[i] || !*paths[i] || is_stdout(paths[i]))
                continue;
            int same = exists_j && stat(paths[i], &si) == 0 && same_inode(&si, &sj);
            if (!same && have_j && output_target(flags[i], paths[i], ti, sizeof ti, &ignored) == BK_OK)
                same = strcmp(ti, tj) == 0;
            if (same)
                return bk_fail(err, BK_ERR_USAGE, "%s '%s' is the same file as %s '%s'; give each output its own file",
                               flags[j], paths[j], flags[i], paths[i]);
        }
    }
    return BK_OK;
}

static void reset(bk_output *o)
{
    o->f = NULL;
    o->kind = BK_OUTPUT_CLOSED;
    o->error = 0;
    o->target[0] = o->tmp[0] = '\0';
}

/* A character device or a FIFO, opened without blocking (a FIFO no one reads fails with ENXIO). */
static int open_direct(bk_output *o, bk_error *err)
{
    int fd = open(o->path, O_WRONLY | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENXIO)
            return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': no process reads this FIFO", o->flag, o->path);
        return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': %s", o->flag, o->path, strerror(errno));
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 || !(o->f = fdopen(fd, "w"))) {
        int e = errno;
        close(fd);
        return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': %s", o->flag, o->path, strerror(e));
    }
    o->kind = BK_OUTPUT_DIRECT;
    return BK_OK;
}

/* A temporary file beside the target, created exclusively; it takes an existing target's mode. */
static int open_atomic(bk_output *o, bk_error *err)
{
    int rc = output_target(o->flag, o->path, o->target, sizeof o->target, err);
    if (rc)
        return rc;
    struct stat st;
    int existed = stat(o->target, &st) == 0;
    const char *last = strrchr(o->target, '/'); /* the target is absolute */
    int dir_len = (int)(last - o->target);
    int fd = -1;
    for (unsigned k = 0; k < MAX_TMP_TRIES && fd < 0; k++) {
        snprintf(o->tmp, sizeof o->tmp, "%.*s/.%.180s.%ld.%u.tmp", dir_len, o->target, last + 1, (long)getpid(), k);
        fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        int e = errno;
        o->tmp[0] = '\0';
        return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': cannot create a temporary file beside it: %s", o->flag,
                       o->path, strerror(e));
    }
    if (existed && fchmod(fd, st.st_mode & 07777) != 0) {
        int e = errno;
        close(fd), unlink(o->tmp), o->tmp[0] = '\0';
        return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': cannot give its temporary file the file's mode: %s",
                       o->flag, o->path, strerror(e));
    }
    if (!(o->f = fdopen(fd, "w"))) {
        int e = errno;
        close(fd), unlink(o->tmp), o->tmp[0] = '\0';
        return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': %s", o->flag, o->path, strerror(e));
    }
    o->kind = BK_OUTPUT_ATOMIC;
    return BK_OK;
}

int bk_output_open(bk_output *o, const char *flag, const char *path, const bk_output_input *inputs, int n_inputs,
                   bk_error *err)
{
    reset(o);
    bk_copy_text(o->flag, sizeof o->flag, flag);
    bk_copy_text(o->path, sizeof o->path, path ? path : "");
    int rc = check_output(flag, path, NULL, inputs, n_inputs, err);
    if (rc)
        return rc;
    if (strlen(path) >= sizeof o->path)
        return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': the path is too long (%zu bytes; at most %zu)", flag,
                       path, strlen(path), sizeof o->path - 1);
    if (is_stdout(path)) {
        o->f = stdout;
        o->kind = BK_OUTPUT_STDOUT;
        return BK_OK;
    }
    struct stat st;
    if (stat(path, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)))
        return open_direct(o, err);
    return open_atomic(o, err);
}

int bk_output_printf(bk_output *o, const char *fmt, ...)
{
    if (!o->f || o->error)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    int n = vfprintf(o->f, fmt, ap);
    va_end(ap);
    if (n < 0 || ferror(o->f)) {
        o->error = errno ? errno : EIO;
        return -1;
    }
    return 0;
}

int bk_output_json_string(bk_output *o, const char *s)
{
    if (bk_output_printf(o, "\""))
        return -1;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int bad = *p == '"' ? bk_output_printf(o, "\\\"")
                : *p == '\\' ? bk_output_printf(o, "\\\\")
                : *p < 0x20  ? bk_output_printf(o, "\\u%04x", *p)
                             : bk_output_printf(o, "%c", *p);
        if (bad)
            return -1;
    }
    return bk_output_printf(o, "\"");
}

/* The first error of a stream: a write that failed before, or its flush now. */
static int stream_error(bk_output *o)
{
    if (o->error)
        return o->error;
    errno = 0;
    if (fflush(o->f) != 0)
        return errno ? errno : EIO;
    return ferror(o->f) ? EIO : 0;
}

int bk_output_close(bk_output *o, bk_error *err)
{
    int e = 0;
    switch (o->kind) {
    case BK_OUTPUT_CLOSED:
        return BK_OK;
    case BK_OUTPUT_STDOUT:
        e = stream_error(o);
        reset(o);
        return e ? bk_fail(err, BK_ERR_IO, "cannot write %s to standard output: %s", o->flag, strerror(e)) : BK_OK;
    case BK_OUTPUT_DIRECT:
        e = stream_error(o);
        if (fclose(o->f) != 0 && !e)
            e = errno;
        reset(o);
        return e ? bk_fail(err, BK_ERR_IO, "cannot write %s '%s': %s", o->flag, o->path, strerror(e)) : BK_OK;
    case BK_OUTPUT_ATOMIC:
        break;
    }
    struct stat st;
    int existed = stat(o->target, &st) == 0;
    e = stream_error(o);
    if (!e && fsync(fileno(o->f)) != 0)
        e = errno;
    if (fclose(o->f) != 0 && !e)
        e = errno;
    o->f = NULL;
    if (!e && rename(o->tmp, o->target) != 0)
        e = errno;
    if (e) {
        unlink(o->tmp);
        reset(o);
        return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': %s (%s)", o->flag, o->path, strerror(e),
                       existed ? "the file is unchanged" : "no file was created");
    }
    /* the rename itself reaches the disk with its directory; best effort: the file is complete and in
     * place either way */
    (void)bk_file_sync_dir(o->target);
    reset(o);
    return BK_OK;
}

void bk_output_discard(bk_output *o)
{
    if (o->kind == BK_OUTPUT_ATOMIC || o->kind == BK_OUTPUT_DIRECT) {
        if (o->f)
            fclose(o->f);
        if (o->kind == BK_OUTPUT_ATOMIC && o->tmp[0])
            unlink(o->tmp);
    }
    reset(o);
}

void bk_csv_field(FILE *f, const char *s)
{
    if (!s)
        s = "";
    const int formula = strchr("=+-@\t\r", s[0]) != NULL && s[0] != '\0';
    const int quote = strpbrk(s, ",\"\n\r") != NULL;
    if (quote)
        fputc('"', f);
    if (formula)
        fputc('\'', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    if (quote)
        fputc('"', f);
}

int bk_output_stdout_check(bk_error *err)
{
    errno = 0;
    int e = fflush(stdout) != 0 ? (errno ? errno : EIO) : ferror(stdout) ? EIO : 0;
    return e ? bk_fail(err, BK_ERR_IO, "cannot write standard output: %s", strerror(e)) : BK_OK;
}
