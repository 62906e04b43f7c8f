/* Shared objects that misbehave before the engine ever sees a descriptor: in a constructor (which
 * dlopen() runs), in the entry point, or by returning a descriptor that cannot be read. Compiled
 * once per HOSTILE_KIND into its own file biaskit_<name>.so in a directory of its own, which no
 * test scans with `biaskit plugins` by accident (tests/plugins/CMakeLists.txt); tests/test_bad_plugins.sh
 * copies them where it needs them. `biaskit check`, `plugins` and the engine must report each one,
 * naming the file and the stage, and go on. The kinds:
 *   1 ctor_abort     a constructor calls abort()
 *   2 ctor_exit      a constructor calls exit(0)
 *   3 ctor_hang      a constructor never returns
 *   4 entry_data     the entry symbol is an array of data, not a function
 *   5 entry_garbage  the entry point returns a pointer to nothing mapped
 *   6 entry_abort    the entry point calls abort()
 *   7 entry_hang     the entry point never returns
 *   8 desc_garbage   the descriptor's name points to nothing mapped */
#define _POSIX_C_SOURCE 200809L /* pause */
#include <biaskit/plugin.h>

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef HOSTILE_KIND
#error "compile with -DHOSTILE_KIND=1..8"
#endif

/* An address no process maps (the kernel's half of the address space on x86-64 and arm64). */
#define UNMAPPED ((uintptr_t)0xdead000000000000ull)

__attribute__((unused)) static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    (void)cfg, (void)geo;
    return svc->error(err, BIASKIT_ERR_INTERNAL, "never created: %p", (void *)out);
}

__attribute__((unused)) static void destroy(void *inst)
{
    (void)inst;
}

__attribute__((unused)) static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    (void)inst, (void)theta, (void)err;
    for (int32_t d = 0; d < distances; d++)
        out[d] = 0.0f;
    return BIASKIT_OK;
}

__attribute__((unused)) static biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "hostile",
    .version = "0",
    .summary = "misbehaves on purpose",
    .capabilities = BIASKIT_CAP_TABLE,
    .create = create,
    .destroy = destroy,
    .table = table,
};

__attribute__((unused)) static void never_return(void)
{
    for (;;)
        pause(); /* waits for a signal that never comes */
}

#if HOSTILE_KIND == 1
__attribute__((constructor)) static void on_load(void)
{
    abort();
}
#elif HOSTILE_KIND == 2
__attribute__((constructor)) static void on_load(void)
{
    exit(0);
}
#elif HOSTILE_KIND == 3
__attribute__((constructor)) static void on_load(void)
{
    never_return();
}
#endif

#if HOSTILE_KIND == 4
/* Data under the entry point's name: calling it jumps into a non-executable page. */
BIASKIT_EXPORT const uint32_t biaskit_plugin_entry[4] = {0, 0, 0, 0};
#else
BIASKIT_EXPORT const biaskit_plugin *biaskit_plugin_entry(uint32_t host_abi_version);
BIASKIT_EXPORT const biaskit_plugin *biaskit_plugin_entry(uint32_t host_abi_version)
{
    (void)host_abi_version;
#if HOSTILE_KIND == 5
    return (const biaskit_plugin *)UNMAPPED;
#elif HOSTILE_KIND == 6
    abort();
#elif HOSTILE_KIND == 7
    never_return();
#elif HOSTILE_KIND == 8
    descriptor.name = (const char *)UNMAPPED;
#endif
    return &descriptor;
}
#endif
