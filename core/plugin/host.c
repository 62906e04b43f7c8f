#define _GNU_SOURCE /* realpath, strdup, dladdr */
#include "plugin/host.h"

#include "plugin/contract.h"

#include "plugin/descriptor.h"
#include "util/file.h"
#include "util/path.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef BK_BUILD_PLUGIN_DIR
#define BK_BUILD_PLUGIN_DIR ""
#endif
#ifndef BK_INSTALL_PLUGIN_SUBDIR
#define BK_INSTALL_PLUGIN_SUBDIR "lib/biaskit/plugins"
#endif

static int add_dir(bk_registry *reg, const char *dir, bk_error *err)
{
    if (!dir || !*dir)
        return BK_OK;
    char **grown = realloc(reg->search_dirs, (reg->n_search_dirs + 1) * sizeof *grown);
    if (!grown)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory building the plugin search path");
    reg->search_dirs = grown;
    if (!(reg->search_dirs[reg->n_search_dirs] = strdup(dir)))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory building the plugin search path");
    reg->n_search_dirs++;
    return BK_OK;
}

int bk_registry_init_dirs(bk_registry *reg, const char *const *dirs, size_t n_dirs, bk_error *err)
{
    memset(reg, 0, sizeof *reg);
    for (size_t i = 0; i < n_dirs; i++) {
        int rc = add_dir(reg, dirs[i], err);
        if (rc) {
            bk_registry_free(reg);
            return rc;
        }
    }
    return BK_OK;
}

int bk_registry_init(bk_registry *reg, bk_error *err)
{
    int rc = bk_registry_init_dirs(reg, NULL, 0, err);
    if (rc)
        return rc;
    const char *env = getenv("BIASKIT_PLUGIN_PATH");
    if (env) {
        char *copy = strdup(env);
        if (!copy)
            return bk_fail(err, BK_ERR_NOMEM, "out of memory reading BIASKIT_PLUGIN_PATH");
        char *save = NULL;
        for (char *dir = strtok_r(copy, ":", &save); dir && !rc; dir = strtok_r(NULL, ":", &save))
            rc = add_dir(reg, dir, err);
        free(copy);
    }
    /* An installed binary searches its own install tree only: the build directory it was compiled in
     * holds the same plugins and would shadow-report every one of them. */
    int installed = 0;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (!rc && n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            char dir[PATH_MAX + 64];
            snprintf(dir, sizeof dir, "%s/../%s", exe, BK_INSTALL_PLUGIN_SUBDIR);
            char canon[PATH_MAX];
            if (realpath(dir, canon)) {
                installed = 1;
                rc = add_dir(reg, canon, err);
            }
        }
    }
    if (!rc && !installed)
        rc = add_dir(reg, BK_BUILD_PLUGIN_DIR, err);
    if (rc)
        bk_registry_free(reg);
    return rc;
}

/* ---- the stage of plugin code, shared with a parent (bk_plugin_isolate) -------------------------- */

static char *stage_page; /* MAP_SHARED with the parent; NULL: no parent listens */
static size_t stage_size;

int bk_plugin_stage_active(void)
{
    return stage_page != NULL;
}

void bk_plugin_stage(const char *fmt, ...)
{
    if (!stage_page)
        return;
    if (!fmt) {
        stage_page[0] = '\0';
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(stage_page, stage_size, fmt, ap);
    va_end(ap);
}

int bk_plugin_isolate(bk_isolated_fn fn, void *ctx, unsigned timeout_s, const char *what, bk_isolated *res,
                      bk_error *err)
{
    bk_isolated local;
    if (!res)
        res = &local;
    memset(res, 0, sizeof *res);
    size_t size = (size_t)sysconf(_SC_PAGESIZE);
    char *page = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return bk_fail(err, BK_ERR_INTERNAL, "%s: cannot map a page shared with a child process: %s", what,
                       strerror(errno));
    page[0] = '\0';
    char *outer_page = stage_page; /* a child of a child: the stages go to the innermost parent */
    size_t outer_size = stage_size;
    stage_page = page;
    stage_size = size;
    int rc = bk_isolate(fn, ctx, timeout_s, "the plugin code", res, err);
    stage_page = outer_page;
    stage_size = outer_size;
    if (rc && !res->finished) {
        char stage[BK_ERROR_MESSAGE_MAX / 2]; /* the child wrote it NUL-terminated; it may have died mid-write */
        snprintf(stage, sizeof stage, "%.*s", (int)strnlen(page, size), page);
        if (stage[0])
            bk_error_prefix(err, "%s: ", stage);
        else
            bk_error_prefix(err, "%s: ", what);
    }
    munmap(page, size);
    if (res == &local)
        free(local.output);
    return rc;
}

const char *bk_plugin_path_writable_by_others(const char *path, char *buf, size_t size)
{
    struct stat st;
    if (stat(path, &st) != 0 || !(st.st_mode & S_IWOTH))
        return NULL;
    snprintf(buf, size, "mode %04o%s", (unsigned)(st.st_mode & 07777),
             S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) ? ", sticky: others cannot replace files, but can add them" : "");
    return buf;
}

static bk_writable_policy writable_policy = BK_WRITABLE_WARN;

void bk_plugin_set_writable_policy(bk_writable_policy policy)
{
    writable_policy = policy;
}

/* The file `canon` (a real path) about to be loaded, and its directory, against the policy. */
static int check_writable(const char *canon, bk_error *err)
{
    static char warned[8][PATH_MAX];
    static int n_warned;
    char dir[PATH_MAX], mode[128];
    snprintf(dir, sizeof dir, "%s", canon);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[slash == dir] = '\0';
    const char *const paths[2] = {canon, dir};
    for (int k = 0; k < 2 && writable_policy != BK_WRITABLE_QUIET; k++) {
        if (!bk_plugin_path_writable_by_others(paths[k], mode, sizeof mode))
            continue;
        const char *kind = k ? "the directory" : "the file";
        if (writable_policy == BK_WRITABLE_REFUSE)
            return bk_fail(err, BK_ERR_PLUGIN, "plugin file '%s': %s '%s' is writable by users other than its owner "
                           "and group (%s): a library placed there runs its code in whoever loads it; refused under "
                           "--strict (chmod o-w %s)", canon, kind, paths[k], mode, paths[k]);
        int seen = 0;
        for (int i = 0; i < n_warned && !seen; i++)
            seen = strcmp(warned[i], canon) == 0;
        if (seen)
            return BK_OK;
        if (n_warned < 8)
            snprintf(warned[n_warned++], sizeof warned[0], "%s", canon);
        fprintf(stderr, "biaskit: warning: plugin file '%s': %s '%s' is writable by users other than its owner and "
                "group (%s): a library placed there runs its code in whoever loads it; remove that permission (chmod "
                "o-w %s); --strict refuses it\n", canon, kind, paths[k], mode, paths[k]);
        return BK_OK;
    }
    return BK_OK;
}

/* dlclose() runs the library's destructors: plugin code too. */
static void close_library(void *handle, const char *path)
{
    bk_plugin_stage("plugin file '%s', in dlclose() (unloading the library runs its destructors)", path);
    dlclose(handle);
    bk_plugin_stage(NULL);
}

static void plugin_free(bk_plugin *p)
{
    if (!p)
        return;
    if (p->handle)
        close_library(p->handle, p->path);
    free(p->path);
    free(p);
}

void bk_registry_free(bk_registry *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < reg->count; i++)
        plugin_free(reg->plugins[i]);
    free(reg->plugins);
    for (size_t i = 0; i < reg->n_search_dirs; i++)
        free(reg->search_dirs[i]);
    free(reg->search_dirs);
    memset(reg, 0, sizeof *reg);
}

const bk_plugin *bk_registry_find(const bk_registry *reg, const char *name)
{
    for (size_t i = 0; i < reg->count; i++)
        if (strcmp(reg->plugins[i]->desc->name, name) == 0)
            return reg->plugins[i];
    return NULL;
}

int bk_plugin_check_created(const bk_plugin *p, const void *instance, bk_error *err)
{
    if (instance)
        return BK_OK;
    return bk_fail(err, BK_ERR_PLUGIN,
                   "plugin '%s' ('%s'): create() returned BIASKIT_OK but no instance (*out is NULL); create() must "
                   "set *out to its instance or fail with a message",
                   p->desc->name, p->path);
}

/* The first problem that makes the loader refuse a descriptor (plugin/descriptor.h). */
typedef struct refusal {
    char text[BK_ERROR_MESSAGE_MAX / 2];
    int found;
} refusal;

static void keep_first_refusal(void *ctx, bk_descriptor_part part, bk_descriptor_severity severity, const char *text)
{
    (void)part;
    refusal *r = ctx;
    if (severity == BK_DESCRIPTOR_REFUSED && !r->found++)
        snprintf(r->text, sizeof r->text, "%s", text);
}

/* Everything the host relies on in a descriptor, checked once at load time by the validator that
 * `biaskit check` reports from; the message names the file, and the plugin when its name is valid. */
static int check_descriptor(const biaskit_plugin *d, const char *path, bk_error *err)
{
    refusal r = {0};
    if (bk_descriptor_problems(d, keep_first_refusal, &r) == 0)
        return BK_OK;
    int named = d->struct_size >= BIASKIT_PLUGIN_V1_SIZE && d->abi_version >= BIASKIT_ABI_VERSION_MIN &&
                d->abi_version <= BIASKIT_ABI_VERSION &&
                bk_descriptor_identifier(d->name, 1);
    if (named)
        return bk_fail(err, BK_ERR_PLUGIN, "plugin '%s' (%s): %s", path, d->name, r.text);
    return bk_fail(err, BK_ERR_PLUGIN, "plugin '%s': %s", path, r.text);
}

static int register_plugin(bk_registry *reg, bk_plugin *p, bk_error *err)
{
    if (reg->count == reg->capacity) {
        size_t cap = reg->capacity ? 2 * reg->capacity : 8;
        bk_plugin **grown = realloc(reg->plugins, cap * sizeof *grown);
        if (!grown)
            return bk_fail(err, BK_ERR_NOMEM, "out of memory registering plugin '%s'", p->path);
        reg->plugins = grown;
        reg->capacity = cap;
    }
    reg->plugins[reg->count++] = p;
    return BK_OK;
}

/* Accepts a descriptor for `canon`: the validator, then the name (*same_name is set when the only
 * problem is that its name is already taken, by that plugin); on success registers it, owning
 * `handle` (may be NULL). */
static int accept_descriptor(bk_registry *reg, const biaskit_plugin *desc, const char *canon, void *handle,
                             dev_t dev, ino_t ino, const bk_plugin **out, const bk_plugin **same_name, bk_error *err)
{
    bk_plugin_stage("plugin file '%s', reading the descriptor its entry point returned", canon);
    int rc = check_descriptor(desc, canon, err);
    if (!rc) {
        const bk_plugin *same = bk_registry_find(reg, desc->name);
        if (same) {
            *same_name = same;
            rc = bk_fail_duplicate_name(err, canon, desc->name, same->path);
        }
    }
    bk_plugin_stage(NULL);
    if (rc)
        return rc;
    bk_plugin *p = calloc(1, sizeof *p);
    if (!p || !(p->path = strdup(canon))) {
        free(p);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory loading plugin '%s'", canon);
    }
    p->desc = desc;
    p->file_dev = dev;
    p->file_ino = ino;
    if ((rc = register_plugin(reg, p, err))) {
        plugin_free(p);
        return rc;
    }
    p->handle = handle; /* owned from here on */
    *out = p;
    return BK_OK;
}

int bk_registry_add(bk_registry *reg, const biaskit_plugin *desc, const char *path, const bk_plugin **out,
                    bk_error *err)
{
    const bk_plugin *same_name = NULL;
    if (!desc)
        return bk_fail(err, BK_ERR_PLUGIN, "plugin '%s': %s() returned no descriptor", path, BIASKIT_ENTRY_SYMBOL);
    return accept_descriptor(reg, desc, path, NULL, 0, 0, out, &same_name, err);
}

/* Loads one file; *same_name is set when the only problem is that its name is already taken, by
 * that plugin. A file already registered, by this path or another (a symlink, a hard link, a
 * directory listed twice), is the same plugin: its entry is returned, and dlopen() would return the
 * same library anyway. Each stage that runs the library's code is named for bk_plugin_isolate. */
static int load_file(bk_registry *reg, const char *path, const bk_plugin **out, const bk_plugin **same_name,
                     bk_error *err)
{
    *same_name = NULL;
    char canon[PATH_MAX];
    struct stat st;
    if (!realpath(path, canon) || stat(canon, &st) != 0)
        return bk_fail(err, BK_ERR_PLUGIN, "plugin file '%s' not found: %s", path, strerror(errno));
    for (size_t i = 0; i < reg->count; i++)
        if (strcmp(reg->plugins[i]->path, canon) == 0 ||
            (reg->plugins[i]->file_dev == st.st_dev && reg->plugins[i]->file_ino == st.st_ino)) {
            *out = reg->plugins[i];
            return BK_OK;
        }
    /* dlopen() of a FIFO blocks until someone writes it, of a device reads it: refused by name first */
    if (bk_file_check_regular(canon, "plugin file", err)) {
        err->code = BK_ERR_PLUGIN;
        return err->code;
    }
    int rc = check_writable(canon, err);
    if (rc)
        return rc;

    dlerror();
    bk_plugin_stage("plugin file '%s', in dlopen() (mapping the library and running its constructors)", canon);
    void *handle = dlopen(canon, RTLD_NOW | RTLD_LOCAL);
    bk_plugin_stage(NULL);
    if (!handle)
        return bk_fail(err, BK_ERR_PLUGIN, "cannot load plugin '%s': %s", canon, dlerror());
    biaskit_entry_fn entry;
    /* POSIX: a function pointer round-trips through void* (dlsym's documented use). */
    *(void **)&entry = dlsym(handle, BIASKIT_ENTRY_SYMBOL);
    if (!entry) {
        close_library(handle, canon);
        return bk_fail(err, BK_ERR_PLUGIN,
                       "plugin '%s' is not a biaskit plugin: no entry symbol '%s' (define it with BIASKIT_DEFINE_PLUGIN)",
                       canon, BIASKIT_ENTRY_SYMBOL);
    }
    bk_plugin_stage("plugin file '%s', in its entry point %s()", canon, BIASKIT_ENTRY_SYMBOL);
    const biaskit_plugin *desc = entry(BIASKIT_ABI_VERSION);
    bk_plugin_stage(NULL);
    rc = desc ? accept_descriptor(reg, desc, canon, handle, st.st_dev, st.st_ino, out, same_name, err)
                  : bk_fail(err, BK_ERR_PLUGIN, "plugin '%s': %s() returned no descriptor", canon, BIASKIT_ENTRY_SYMBOL);
    if (rc)
        close_library(handle, canon);
    return rc;
}

int bk_registry_load_file(bk_registry *reg, const char *path, const bk_plugin **out, bk_error *err)
{
    const bk_plugin *same_name;
    return load_file(reg, path, out, &same_name, err);
}

static int names_a_path(const char *s)
{
    size_t n = strlen(s), k = strlen(BK_PLUGIN_FILE_SUFFIX);
    return strchr(s, '/') != NULL || (n >= k && strcmp(s + n - k, BK_PLUGIN_FILE_SUFFIX) == 0);
}

int bk_registry_locate(const bk_registry *reg, const char *name_or_path, char *path, size_t size, bk_error *err)
{
    if (names_a_path(name_or_path))
        return bk_path_resolve(reg->relative_to, name_or_path, path, size, err);
    if (!bk_descriptor_identifier(name_or_path, 1))
        return bk_fail(err, BK_ERR_PLUGIN,
                       "'%s' is neither a plugin name (lower-case letters, digits, '_', '-') nor a path to a .so",
                       name_or_path);
    char tried[BK_ERROR_MESSAGE_MAX / 2] = "";
    size_t used = 0;
    for (size_t i = 0; i < reg->n_search_dirs; i++) {
        int n = snprintf(path, size, "%s/%s%s%s", reg->search_dirs[i], BK_PLUGIN_FILE_PREFIX, name_or_path,
                         BK_PLUGIN_FILE_SUFFIX);
        struct stat st;
        if (n > 0 && (size_t)n < size && stat(path, &st) == 0) {
            if (S_ISREG(st.st_mode))
                return BK_OK;
            bk_file_check_regular(path, "plugin file", err); /* a FIFO, a directory: refused by name */
            err->code = BK_ERR_PLUGIN;
            return err->code;
        }
        if (used < sizeof tried)
            used += (size_t)snprintf(tried + used, sizeof tried - used, "%s%s", used ? ", " : "", path);
    }
    return bk_fail(err, BK_ERR_PLUGIN,
                   "plugin '%s' not found; searched: %s (add its directory to BIASKIT_PLUGIN_PATH or give a path)",
                   name_or_path, reg->n_search_dirs ? tried : "no directories");
}

int bk_registry_load(bk_registry *reg, const char *name_or_path, const bk_plugin **out, bk_error *err)
{
    int by_name = !names_a_path(name_or_path);
    const bk_plugin *loaded = by_name ? bk_registry_find(reg, name_or_path) : NULL;
    if (loaded) {
        *out = loaded;
        return BK_OK;
    }
    char path[PATH_MAX];
    int rc = bk_registry_locate(reg, name_or_path, path, sizeof path, err);
    if (rc || (rc = bk_registry_load_file(reg, path, out, err)))
        return rc;
    if (by_name && strcmp((*out)->desc->name, name_or_path) != 0)
        return bk_fail(err, BK_ERR_PLUGIN, "plugin file '%s' declares the name '%s', expected '%s'", (*out)->path,
                       (*out)->desc->name, name_or_path);
    return BK_OK;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void bk_registry_scan_files(const bk_registry *reg, bk_scan_file_fn fn, void *ctx)
{
    size_t prefix = strlen(BK_PLUGIN_FILE_PREFIX), suffix = strlen(BK_PLUGIN_FILE_SUFFIX);
    for (size_t i = 0; i < reg->n_search_dirs; i++) {
        DIR *dir = opendir(reg->search_dirs[i]);
        if (!dir)
            continue;
        char **files = NULL;
        size_t n = 0;
        for (struct dirent *e; (e = readdir(dir));) {
            size_t len = strlen(e->d_name);
            if (len <= prefix + suffix || strncmp(e->d_name, BK_PLUGIN_FILE_PREFIX, prefix) != 0 ||
                strcmp(e->d_name + len - suffix, BK_PLUGIN_FILE_SUFFIX) != 0)
                continue;
            char **grown = realloc(files, (n + 1) * sizeof *grown);
            if (!grown || !(grown[n] = strdup(e->d_name))) {
                files = grown ? grown : files;
                break;
            }
            files = grown;
            n++;
        }
        closedir(dir);
        qsort(files, n, sizeof *files, compare_names); /* a stable listing order */
        for (size_t k = 0; k < n; k++) {
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", reg->search_dirs[i], files[k]);
            free(files[k]);
            fn(ctx, path);
        }
        free(files);
    }
}

int bk_fail_duplicate_name(bk_error *err, const char *path, const char *name, const char *first)
{
    return bk_fail(err, BK_ERR_PLUGIN, "plugin '%s': duplicate name '%s', already loaded from '%s'", path, name, first);
}

void bk_shadow_message(char *buf, size_t size, const char *path, const char *name, const char *winner)
{
    snprintf(buf, size, "'%s' (plugin '%s') is shadowed by '%s', earlier in the search path", path, name, winner);
}

typedef struct scan_state {
    bk_registry *reg;
    bk_scan_problem_fn on_problem;
    void *ctx;
} scan_state;

static void scan_one(void *ctx, const char *path)
{
    scan_state *s = ctx;
    const bk_plugin *p, *winner;
    bk_error e;
    if (!load_file(s->reg, path, &p, &winner, &e) || !s->on_problem)
        return;
    if (!winner) {
        s->on_problem(s->ctx, BK_SCAN_REJECTED, path, e.message);
        return;
    }
    char canon[PATH_MAX], message[2 * PATH_MAX + 256];
    const char *shown = realpath(path, canon) ? canon : path;
    bk_shadow_message(message, sizeof message, shown, winner->desc->name, winner->path);
    s->on_problem(s->ctx, BK_SCAN_SHADOWED, shown, message);
}

size_t bk_registry_scan(bk_registry *reg, bk_scan_problem_fn on_problem, void *ctx)
{
    size_t before = reg->count;
    scan_state s = {reg, on_problem, ctx};
    bk_registry_scan_files(reg, scan_one, &s);
    return reg->count - before;
}

const char *bk_capabilities_string(uint32_t caps, char *buf, size_t size)
{
    size_t n, used = 0;
    const bk_capability *rows = bk_capabilities(&n);
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++)
        if ((caps & rows[i].bit) && used < size)
            used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", rows[i].name);
    if (!used)
        snprintf(buf, size, "none");
    return buf;
}

const char *bk_option_type_name(biaskit_option_type type)
{
    switch (type) {
    case BIASKIT_OPT_BOOL: return "bool";
    case BIASKIT_OPT_INT: return "int";
    case BIASKIT_OPT_DOUBLE: return "float";
    case BIASKIT_OPT_STRING: return "string";
    case BIASKIT_OPT_DOUBLE_ARRAY: return "float array";
    case BIASKIT_OPT_STRING_ARRAY: return "string array";
    }
    return "unknown";
}
