#define _XOPEN_SOURCE 700 /* realpath, getcwd */
#include "util/path.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void bk_path_clean(char *path)
{
    const int absolute = path[0] == '/';
    char *w = path;
    if (absolute)
        *w++ = '/';
    for (const char *r = path; *r;) {
        while (*r == '/')
            r++;
        const char *end = r;
        while (*end && *end != '/')
            end++;
        size_t n = (size_t)(end - r);
        if (n == 0 || (n == 1 && r[0] == '.')) {
            r = end;
            continue;
        }
        if (w > path + absolute)
            *w++ = '/';
        memmove(w, r, n);
        w += n;
        r = end;
    }
    *w = '\0';
    if (!path[0])
        strcpy(path, ".");
}

int bk_path_resolve(const char *base_dir, const char *path, char *out, size_t size, bk_error *err)
{
    int n = path[0] == '/' || !base_dir || !base_dir[0] ? snprintf(out, size, "%s", path)
                                                        : snprintf(out, size, "%s/%s", base_dir, path);
    if (n < 0 || (size_t)n >= size)
        return bk_fail(err, BK_ERR_INVALID, "path '%s' read from '%s' is longer than %zu bytes", path,
                       base_dir ? base_dir : ".", size - 1);
    bk_path_clean(out);
    return BK_OK;
}

int bk_path_dir_of(const char *file, char *out, size_t size, bk_error *err)
{
    char dir[PATH_MAX], real[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s", file) >= (int)sizeof dir)
        return bk_fail(err, BK_ERR_INVALID, "path '%s' is longer than %zu bytes", file, sizeof dir - 1);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = '\0'; /* "/x.toml" */
    else if (slash)
        *slash = '\0';
    else
        strcpy(dir, ".");
    if (realpath(dir, real))
        return bk_path_resolve(NULL, real, out, size, err);
    if (dir[0] == '/')
        return bk_path_resolve(NULL, dir, out, size, err);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd))
        return bk_fail(err, BK_ERR_IO, "cannot read the working directory (to anchor '%s'): %s", file,
                       strerror(errno));
    return bk_path_resolve(cwd, dir, out, size, err);
}

int bk_path_within(const char *path, const char *dir)
{
    char p[PATH_MAX], d[PATH_MAX], abs[PATH_MAX];
    bk_error ignored;
    if (!realpath(dir, d) || bk_path_resolve(NULL, path, abs, sizeof abs, &ignored))
        return 0;
    /* climb to the deepest directory that exists, then come back down by name */
    char tail[PATH_MAX] = "";
    for (;;) {
        struct stat st;
        if (stat(abs, &st) == 0) {
            if (!realpath(abs, p))
                return 0;
            break;
        }
        char *slash = strrchr(abs, '/');
        if (!slash || slash == abs)
            return 0;
        char t[PATH_MAX];
        if (snprintf(t, sizeof t, "/%s%s", slash + 1, tail) >= (int)sizeof t)
            return 0;
        bk_copy_text(tail, sizeof tail, t);
        *slash = '\0';
    }
    if (strlen(p) + strlen(tail) >= sizeof p)
        return 0;
    strcat(p, tail);
    bk_path_clean(p);
    const size_t n = strlen(d);
    return strncmp(p, d, n) == 0 && (p[n] == '\0' || p[n] == '/' || (n == 1 && d[0] == '/'));
}

void bk_path_display(const char *path, char *out, size_t size)
{
    char real[PATH_MAX];
    bk_copy_text(out, size, realpath(path, real) ? real : path);
    bk_path_clean(out);
}

void bk_path_title(const char *path, char *out, size_t size)
{
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", path ? path : "");
    bk_path_clean(copy);
    char *slash = strrchr(copy, '/');
    char *name = slash ? slash + 1 : copy;
    if (!strncmp(name, "checkpoint", 10) && slash) { /* a run's checkpoint: its directory's name */
        *slash = '\0';
        char *up = strrchr(copy, '/');
        name = up ? up + 1 : copy;
    }
    static const char *const ext[] = {".toml", ".safetensors"};
    const size_t n = strlen(name);
    for (int k = 0; k < 2; k++) {
        const size_t e = strlen(ext[k]);
        if (n > e && !strcmp(name + n - e, ext[k]))
            name[n - e] = '\0';
    }
    snprintf(out, size, "%s", name);
}
