/* Reading a user's file: regular files only, with a size cap (file.h). */
#define _GNU_SOURCE /* O_CLOEXEC */
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

const char *bk_file_kind(unsigned mode)
{
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO (named pipe)";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}

static int refuse_kind(const char *path, const char *what, unsigned mode, bk_error *err)
{
    return bk_fail(err, BK_ERR_IO, "%s '%s' is %s; expected a regular file", what, path, bk_file_kind(mode));
}

static int refuse_size(const char *path, const char *what, uint64_t size, uint64_t max_bytes, bk_error *err)
{
    return bk_fail(err, BK_ERR_IO, "%s '%s' is larger than the %" PRIu64 " bytes allowed (%" PRIu64 " bytes or more)",
                   what, path, max_bytes, size);
}

int bk_file_check_regular(const char *path, const char *what, bk_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return bk_fail(err, BK_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return refuse_kind(path, what, st.st_mode, err);
    return BK_OK;
}

int bk_file_open_regular(const char *path, const char *what, uint64_t max_bytes, FILE **out, uint64_t *size,
                         bk_error *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return bk_fail(err, BK_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return bk_fail(err, BK_ERR_IO, "cannot read '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return refuse_kind(path, what, st.st_mode, err);
    }
    if (max_bytes && (uint64_t)st.st_size > max_bytes) {
        close(fd);
        return refuse_size(path, what, (uint64_t)st.st_size, max_bytes, err);
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        return bk_fail(err, BK_ERR_IO, "cannot read '%s': %s", path, strerror(e));
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        return bk_fail(err, BK_ERR_NOMEM, "cannot read '%s': %s", path, strerror(e));
    }
    *out = f;
    if (size)
        *size = (uint64_t)st.st_size;
    return BK_OK;
}

int bk_file_read_all(const char *path, const char *what, uint64_t max_bytes, char **text, size_t *len,
                     bk_error *err)
{
    *text = NULL;
    *len = 0;
    FILE *f;
    uint64_t size;
    int rc = bk_file_open_regular(path, what, max_bytes, &f, &size, err);
    if (rc != BK_OK)
        return rc;
    if (size > (uint64_t)SIZE_MAX - 2) {
        fclose(f);
        return refuse_size(path, what, size, (uint64_t)SIZE_MAX - 2, err);
    }
    /* room for the size stat gave, one byte more to see growth, and the NUL */
    size_t cap = (size_t)size + 2, used = 0;
    char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the %zu bytes of %s '%s'", cap, what, path);
    }
    for (;;) {
        size_t got = fread(buf + used, 1, cap - 1 - used, f);
        used += got;
        if (used < cap - 1) {
            if (ferror(f)) {
                int e = errno;
                free(buf);
                fclose(f);
                return bk_fail(err, BK_ERR_IO, "cannot read '%s': %s", path, e ? strerror(e) : "read error");
            }
            break; /* end of file */
        }
        /* the file grew while read: keep going up to the cap */
        if (max_bytes && used > max_bytes) {
            free(buf);
            fclose(f);
            return refuse_size(path, what, used, max_bytes, err);
        }
        size_t bigger = cap * 2;
        if (max_bytes && bigger > max_bytes + 2)
            bigger = (size_t)max_bytes + 2;
        char *grown = bigger > cap ? realloc(buf, bigger) : NULL;
        if (!grown) {
            free(buf);
            fclose(f);
            return bk_fail(err, BK_ERR_NOMEM, "out of memory for the %zu bytes of %s '%s'", bigger, what, path);
        }
        buf = grown;
        cap = bigger;
    }
    fclose(f);
    buf[used] = '\0';
    *text = buf;
    *len = used;
    return BK_OK;
}

int bk_file_lock(const char *path, const char *what, int *fd, char *holder, size_t size, bk_error *err)
{
    *fd = -1;
    if (size)
        holder[0] = '\0';
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW, 0666);
    if (f < 0)
        return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': %s", what, path, strerror(errno));
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return bk_fail(err, BK_ERR_IO, "cannot read %s '%s': %s", what, path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return bk_fail(err, BK_ERR_IO, "%s '%s' is %s; expected a regular file (remove it)", what, path,
                       bk_file_kind(st.st_mode));
    }
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t got = e == EWOULDBLOCK ? pread(f, pid, sizeof pid - 1, 0) : -1;
        pid[got > 0 ? got : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        close(f);
        if (e != EWOULDBLOCK)
            return bk_fail(err, BK_ERR_IO, "cannot lock %s '%s': %s", what, path, strerror(e));
        if (size)
            snprintf(holder, size, "%s", pid[0] ? pid : "unknown");
        return BK_OK;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(f, 0) != 0 || pwrite(f, pid, (size_t)n, 0) != n) {
        int e = errno;
        close(f);
        return bk_fail(err, BK_ERR_IO, "cannot write %s '%s': %s", what, path, strerror(e));
    }
    *fd = f;
    return BK_OK;
}

int bk_name_has_suffix(const char *name, const char *const *suffixes, int n)
{
    if (n <= 0)
        return 1;
    size_t len = strlen(name);
    for (int i = 0; i < n; i++) {
        size_t el = strlen(suffixes[i]);
        if (el <= len && memcmp(name + len - el, suffixes[i], el) == 0)
            return 1;
    }
    return 0;
}

int bk_write_all(int fd, const void *buf, size_t n)
{
    const char *s = buf;
    while (n > 0) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            if (k == 0)
                errno = EIO;
            return -1;
        }
        s += k;
        n -= (size_t)k;
    }
    return 0;
}

/* fsync of the directory holding `path`, so that a rename into it is durable. File systems that cannot
 * sync a directory (EINVAL) are not an error: there is nothing more to do there. */
int bk_file_sync_dir(const char *path)
{
    size_t n = strlen(path);
    char *dir = malloc(n + 2);
    if (!dir) {
        errno = ENOMEM;
        return -1;
    }
    memcpy(dir, path, n + 1);
    char *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0 && e == EINVAL)
        return 0;
    errno = e;
    return rc;
}
