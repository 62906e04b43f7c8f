/* bk_backend_cuda_create (model/backend.h) in a CUDA build: a thin dispatcher to the module
 * biaskit_cuda_backend.so (cuda/module.h), dlopen()ed the first time a cuda backend is created or a GPU
 * answers the probe, so that biaskit maps cuBLAS only when a GPU path is asked for.
 *
 * Where the module is: an installed biaskit (one with <prefix>/lib/biaskit/plugins beside its bin/)
 * loads it from <prefix>/lib/biaskit only; any other (the build tree's biaskit, the tests) from the
 * build directory it was compiled in, as the plugins' search path does (plugin/host.c). A module that
 * cannot be loaded is named with the loader's reason (dlerror). */
#define _GNU_SOURCE /* realpath */
#include "cuda/module.h"
#include "cuda/policy.h"
#include "cuda/device.h"
#include "model/backend.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef BK_BUILD_CUDA_MODULE_DIR
#define BK_BUILD_CUDA_MODULE_DIR ""
#endif
#ifndef BK_INSTALL_CUDA_MODULE_SUBDIR
#define BK_INSTALL_CUDA_MODULE_SUBDIR "lib/biaskit"
#endif

#ifndef BK_INSTALL_PLUGIN_SUBDIR
#define BK_INSTALL_PLUGIN_SUBDIR "lib/biaskit/plugins"
#endif

/* The module's path: <exe dir>/../lib/biaskit/<file> for an installed biaskit, else <build dir>/<file>.
 * Installed means what it means to the plugins' search path (plugin/host.c): <exe dir>/../lib/biaskit/
 * plugins exists, so that a biaskit takes its plugins and its module from the same tree. */
static void module_path(const char *file, char *out, size_t size)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            char dir[PATH_MAX + 64], canon[PATH_MAX];
            snprintf(dir, sizeof dir, "%s/../%s", exe, BK_INSTALL_PLUGIN_SUBDIR);
            if (realpath(dir, canon)) {
                snprintf(dir, sizeof dir, "%s/../%s", exe, BK_INSTALL_CUDA_MODULE_SUBDIR);
                if (realpath(dir, canon)) {
                    snprintf(out, size, "%s/%s", canon, file);
                    return;
                }
            }
        }
    }
    snprintf(out, size, "%s/%s", BK_BUILD_CUDA_MODULE_DIR, file);
}

static struct {
    char path[PATH_MAX + 64];
    void *handle;
    const bk_cuda_backend_api *api; /* NULL when the module could not be used */
    char why[2 * PATH_MAX];         /* why not, naming the module's path */
} module;

/* dlerror()'s text without the path in front when it starts with it (the message names it already). */
static const char *reason(const char *path, const char *text)
{
    if (!text)
        return "unknown error";
    size_t n = strlen(path);
    if (strncmp(text, path, n) == 0 && text[n] == ':' && text[n + 1] == ' ')
        return text + n + 2;
    return text;
}

static void load(void)
{
    module_path(BK_CUDA_BACKEND_MODULE, module.path, sizeof module.path);
    dlerror();
    module.handle = dlopen(module.path, RTLD_NOW | RTLD_LOCAL);
    if (!module.handle) {
        snprintf(module.why, sizeof module.why, "the CUDA backend module '%s' cannot be loaded: %s", module.path,
                 reason(module.path, dlerror()));
        return;
    }
    bk_cuda_backend_entry entry = (bk_cuda_backend_entry)dlsym(module.handle, BK_CUDA_BACKEND_ENTRY);
    if (!entry) {
        snprintf(module.why, sizeof module.why, "the CUDA backend module '%s' has no %s(): %s", module.path,
                 BK_CUDA_BACKEND_ENTRY, reason(module.path, dlerror()));
        dlclose(module.handle);
        module.handle = NULL;
        return;
    }
    const bk_cuda_backend_api *api = entry();
    if (!api || api->abi != BK_CUDA_MODULE_ABI || api->error_size != sizeof(bk_error) ||
        api->backend_size != sizeof(bk_backend) || !api->create) {
        snprintf(module.why, sizeof module.why,
                 "the CUDA backend module '%s' is from another biaskit build (module interface %u, bk_error %u "
                 "bytes, bk_backend %u bytes; this biaskit expects %u, %zu, %zu): rebuild or reinstall biaskit",
                 module.path, api ? api->abi : 0u, api ? api->error_size : 0u, api ? api->backend_size : 0u,
                 BK_CUDA_MODULE_ABI, sizeof(bk_error), sizeof(bk_backend));
        dlclose(module.handle);
        module.handle = NULL;
        return;
    }
    module.api = api;
}

const char *bk_cuda_backend_module_error(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load);
    return module.api ? NULL : module.why;
}

int bk_backend_cuda_create_on(bk_backend **out, bk_matmul_mode matmul, int64_t gpu, const char *gpu_where,
                              bk_error *err)
{
    *out = NULL;
    const char *why = bk_cuda_backend_module_error();
    if (why)
        return bk_fail(err, BK_ERR_DEVICE, "CUDA backend: %s", why);
    return module.api->create(out, matmul, gpu, gpu_where, err);
}

/* The GPU of this process's local rank (cuda/policy.h). */
int bk_backend_cuda_create(bk_backend **out, bk_matmul_mode matmul, bk_error *err)
{
    return bk_backend_cuda_create_on(out, matmul, BK_CUDA_GPU_AUTO, NULL, err);
}
