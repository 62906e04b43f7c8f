/* main() for a fuzz target outside libFuzzer: runs LLVMFuzzerTestOneInput once on every file named
 * on the command line, or on every file of a named directory (sorted, hidden files skipped), so the
 * corpora under fuzz/corpus/ are regression tests of every build (tests/CMakeLists.txt's siblings in
 * fuzz/CMakeLists.txt). A crash is the failure; the target's return value is ignored. */
#define _POSIX_C_SOURCE 200809L

#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot read '%s'\n", path);
        return 1;
    }
    size_t cap = 4096, size = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + size, 1, cap - size, f)) > 0;) {
        size += got;
        if (size == cap) {
            uint8_t *bigger = realloc(buf, cap * 2);
            if (!bigger)
                free(buf);
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "replay: out of memory reading '%s'\n", path);
        return 1;
    }
    /* an exact-size copy, so that ASan catches a read one byte past the input */
    uint8_t *exact = malloc(size ? size : 1);
    if (!exact) {
        free(buf);
        return 1;
    }
    memcpy(exact, buf, size);
    free(buf);
    LLVMFuzzerTestOneInput(exact, size);
    free(exact);
    return 0;
}

static int compare(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_path(const char *path, int *n_files)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: '%s' does not exist\n", path);
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        ++*n_files;
        return run_file(path);
    }
    DIR *d = opendir(path);
    if (!d) {
        fprintf(stderr, "replay: cannot read directory '%s'\n", path);
        return 1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **bigger = realloc(names, cap * sizeof *names);
            if (!bigger) {
                rc = 1;
                break;
            }
            names = bigger;
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len))) {
            rc = 1;
            break;
        }
        snprintf(names[n++], len, "%s/%s", path, e->d_name);
    }
    closedir(d);
    if (n > 1)
        qsort(names, n, sizeof *names, compare);
    for (size_t i = 0; i < n; i++) {
        if (!rc)
            rc = run_path(names[i], n_files);
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIRECTORY...\n", argv[0]);
        return 2;
    }
    int n_files = 0;
    for (int i = 1; i < argc; i++)
        if (run_path(argv[i], &n_files))
            return 1;
    printf("replayed %d input%s\n", n_files, n_files == 1 ? "" : "s");
    return 0;
}
