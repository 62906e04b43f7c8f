/* The plugin host: finds plugin shared objects, loads them with dlopen(), checks their descriptor
 * against the ABI, and keeps one registry entry per plugin name (docs/design.md §5).
 *
 * Search order for a plugin named NAME (file biaskit_NAME.so):
 *   1. each directory of $BIASKIT_PLUGIN_PATH (colon-separated), in order;
 *   2. when the running executable is installed (<its directory>/../lib/biaskit/plugins exists): that
 *      install directory, and nothing else;
 *   3. otherwise (./build/biaskit, the tests): the build directory the engine was compiled in.
 * A plugin named by a path ("./libmine.so", anything containing '/' or ending in ".so") is loaded
 * from that file only. Only regular files are loaded: a FIFO, a device or a directory is refused by
 * name before dlopen() could block on it or read it.
 *
 * Loading runs the plugin's code in this process (its constructors, its entry point); a command that
 * only needs an answer from a plugin asks it in a child process (bk_plugin_isolate below). */
#ifndef BK_PLUGIN_HOST_H
#define BK_PLUGIN_HOST_H

#include "util/error.h"
#include "util/isolate.h"

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

/* The file bk_registry_load would load for `name_or_path`, without loading anything: a path resolved
 * (against reg->relative_to), or the first biaskit_NAME.so of the search path. Not found: the message
 * lists every file that was tried; a biaskit_NAME.so that is not a regular file is refused by name. */
int bk_registry_locate(const bk_registry *reg, const char *name_or_path, char *path, size_t size, bk_error *err);

/* Registers a descriptor that is already in memory (a test's, a fuzzer's; bk_registry_load_file
 * takes the same path after dlopen() and the entry point): refused unless the validator
 * (plugin/descriptor.h) accepts it and its name is free, with the messages of bk_registry_load_file
 * naming `path`. The descriptor must outlive the registry; nothing is unloaded when it is freed. */
int bk_registry_add(bk_registry *reg, const biaskit_plugin *desc, const char *path, const bk_plugin **out,
                    bk_error *err);

/* Load every biaskit_*.so in the search path, in search order. Files that are rejected, and names
 * already provided by an earlier directory (shadowed: the message names both files), are reported
 * through `on_problem` (may be NULL) and skipped; the scan goes on. A file already registered under
 * another path (a symlink, a hard link, a directory listed twice) is the same plugin and is not
 * reported. Returns the number of plugins registered. */
typedef enum bk_scan_problem { BK_SCAN_REJECTED, BK_SCAN_SHADOWED } bk_scan_problem;
typedef void (*bk_scan_problem_fn)(void *ctx, bk_scan_problem kind, const char *path, const char *message);
size_t bk_registry_scan(bk_registry *reg, bk_scan_problem_fn on_problem, void *ctx);

/* The files bk_registry_scan would load, without loading them: each biaskit_*.so of each search
 * directory, in search order (by name within a directory); fn(ctx, path) for each. */
typedef void (*bk_scan_file_fn)(void *ctx, const char *path);
void bk_registry_scan_files(const bk_registry *reg, bk_scan_file_fn fn, void *ctx);

/* BK_ERR_PLUGIN "plugin 'PATH': duplicate name 'NAME', already loaded from 'FIRST'". */
int bk_fail_duplicate_name(bk_error *err, const char *path, const char *name, const char *first);

/* The note for a file whose plugin name an earlier file of the search path has: "'PATH' (plugin
 * 'NAME') is shadowed by 'WINNER', earlier in the search path". */
void bk_shadow_message(char *buf, size_t size, const char *path, const char *name, const char *winner);

/* ---- plugin code in a child process -------------------------------------------------------------
 * A plugin's constructors, its entry point, create() and the rest are arbitrary code that may crash,
 * call exit() or never return. bk_plugin_isolate runs fn in a child (util/isolate.h) while every
 * stage of plugin code that the loader (dlopen, the entry point, reading the descriptor, dlclose) and
 * the terms (create() and the other calls, bias/terms.c) enter is written to a page shared with the
 * parent. A child that dies is then BK_ERR_PLUGIN naming the stage, its plugin and file, and what
 * happened: "plugin file '/x/biaskit_y.so', in dlopen() (its constructors): the plugin code crashed
 * with signal 6 (SIGABRT, Aborted)"; `what` names the work when it died outside plugin code.
 * timeout_s 0: BK_ISOLATE_TIMEOUT_S. One call at a time per process (the page is process-wide); a
 * child may call it again (its own children then report to it). */
int bk_plugin_isolate(bk_isolated_fn fn, void *ctx, unsigned timeout_s, const char *what, bk_isolated *res,
                      bk_error *err);

/* Names the plugin code about to run (printf-style), when a bk_plugin_isolate child is listening
 * (bk_plugin_stage_active); NULL ends the stage. Anywhere else it does nothing. */
int bk_plugin_stage_active(void);
void bk_plugin_stage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whether users other than the owner and group may write `path` (a plugin directory or file): a
 * library placed there runs its code in whoever loads it. NULL when not (or when `path` does not
 * exist), else the mode in words for a warning, written into buf: "mode 0777". */
const char *bk_plugin_path_writable_by_others(const char *path, char *buf, size_t size);

/* What loading a plugin file does when the file or its directory is writable by others: a warning on
 * standard error, once per file and process (the default); a refusal (BK_ERR_PLUGIN, naming the file and
 * the mode: a command's --strict); or nothing (biaskit plugins, which reports such paths itself). */
typedef enum bk_writable_policy { BK_WRITABLE_WARN = 0, BK_WRITABLE_REFUSE = 1, BK_WRITABLE_QUIET = 2 } bk_writable_policy;
void bk_plugin_set_writable_policy(bk_writable_policy policy);

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
