/* The plugin host: finds plugin shared objects, loads them with dlopen(), checks their descriptor
 * against the ABI, and keeps one registry entry per plugin name (docs/design.md §5).
 *
 * Search order for a plugin named NAME (file biaskit_NAME.so):
 *   1. each directory of $BIASKIT_PLUGIN_PATH (colon-separated), in order;
 *   2. the install directory: <directory of the running executable>/../lib/biaskit/plugins;
 *   3. the build directory the engine was compiled in (so ./build/biaskit finds built-in plugins).
 * A plugin named by a path ("./libmine.so", anything containing '/' or ending in ".so") is loaded
 * from that file only. */
#ifndef BK_PLUGIN_HOST_H
#define BK_PLUGIN_HOST_H

#include "util/error.h"

#include <biaskit/plugin.h>
#include <stddef.h>
#include <sys/types.h>

/* A prefix and suffix around a plugin's name make its file name. */
#define BK_PLUGIN_FILE_PREFIX "biaskit_"
#define BK_PLUGIN_FILE_SUFFIX ".so"

typedef struct bk_plugin {
    const biaskit_plugin *desc;
    void *handle; /* from dlopen */
    char *path;   /* canonical path of the shared object */
    dev_t file_dev; /* its identity, which a hard link shares with it */
    ino_t file_ino;
} bk_plugin;

typedef struct bk_registry {
    bk_plugin **plugins;
    size_t count;
    size_t capacity;
    char **search_dirs;
    size_t n_search_dirs;
    const char *relative_to; /* borrowed: directory a relative plugin path is read from (an experiment
                                file's, util/path.h); NULL = the working directory */
} bk_registry;

/* An empty registry with the default search path (see above). */
int bk_registry_init(bk_registry *reg, bk_error *err);
/* An empty registry searching exactly `dirs` (tests, embedding applications). */
int bk_registry_init_dirs(bk_registry *reg, const char *const *dirs, size_t n_dirs, bk_error *err);
/* Destroys nothing but the registry: instances made from its plugins must be gone first. */
void bk_registry_free(bk_registry *reg);

/* Load the plugin in `path` (or return the already-loaded entry for the same file).
 * Rejections (BK_ERR_PLUGIN), each naming the file: not found, not loadable (dlerror), no entry
 * symbol, no descriptor, descriptor too small, ABI version mismatch, missing name or functions,
 * bad option declarations, duplicate name (another file already registered that name). */
int bk_registry_load_file(bk_registry *reg, const char *path, const bk_plugin **out, bk_error *err);

/* Load by name (searching the path) or by path (see above). Not found: the message lists every
 * file that was tried. */
int bk_registry_load(bk_registry *reg, const char *name_or_path, const bk_plugin **out,
                     bk_error *err);

/* Load every biaskit_*.so in the search path, in search order. Files that are rejected, and names
 * already provided by an earlier directory (shadowed: the message names both files), are reported
 * through `on_problem` (may be NULL) and skipped; the scan goes on. A file already registered under
 * another path (a symlink, a hard link, a directory listed twice) is the same plugin and is not
 * reported. Returns the number of plugins registered. */
typedef enum bk_scan_problem { BK_SCAN_REJECTED, BK_SCAN_SHADOWED } bk_scan_problem;
typedef void (*bk_scan_problem_fn)(void *ctx, bk_scan_problem kind, const char *path, const char *message);
size_t bk_registry_scan(bk_registry *reg, bk_scan_problem_fn on_problem, void *ctx);

/* After create() returned BIASKIT_OK: BK_OK when it gave an instance, else BK_ERR_PLUGIN naming the
 * plugin and its file. Every caller of create() asks, since every other function of the plugin gets
 * the instance, and the SDK promises create() "either returns an instance in *out or fails". */
int bk_plugin_check_created(const bk_plugin *p, const void *instance, bk_error *err);

/* Registered plugin by name, or NULL. */
const bk_plugin *bk_registry_find(const bk_registry *reg, const char *name);

/* Human-readable list of capability flags ("table, segment"); writes into buf. */
const char *bk_capabilities_string(uint32_t caps, char *buf, size_t size);
/* "bool", "int", "float", "string", "float array", "string array". */
const char *bk_option_type_name(biaskit_option_type type);

#endif
