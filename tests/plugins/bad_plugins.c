/* Broken plugins for the loader's rejection tests. Compiled once per BAD_KIND, each into its own
 * shared object; every one must be refused with a message naming the file and the reason: by the
 * loader (kinds 1-5, 7), or, for the one whose descriptor is fine but whose create() breaks its
 * contract (kind 6), when the engine creates an instance. */
#include <biaskit/plugin.h>

#include <stddef.h>

__attribute__((unused)) static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    (void)svc, (void)cfg, (void)geo, (void)err;
    *out = NULL;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    (void)inst;
}

static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    (void)inst, (void)theta, (void)err;
    for (int32_t d = 0; d < distances; d++)
        out[d] = 0.0f;
    return BIASKIT_OK;
}

#if BAD_KIND == 1 /* no entry symbol at all */
BIASKIT_EXPORT int some_other_symbol(void);
BIASKIT_EXPORT int some_other_symbol(void)
{
    return create(NULL, NULL, NULL, NULL, NULL) + (destroy(NULL), 0) + table(NULL, NULL, 0, NULL, NULL);
}
#else
static const biaskit_plugin descriptor = {
#if BAD_KIND == 3 /* a descriptor from before v1 */
    .struct_size = 16,
#else
    .struct_size = sizeof(biaskit_plugin),
#endif
#if BAD_KIND == 2 /* built for a future ABI */
    .abi_version = BIASKIT_ABI_VERSION + 1,
#else
    .abi_version = BIASKIT_ABI_VERSION,
#endif
#if BAD_KIND == 5 /* a valid plugin that claims a name already taken by a built-in */
    .name = "alibi",
#elif BAD_KIND == 6 /* create() says BIASKIT_OK but returns no instance */
    .name = "nullinst",
#elif BAD_KIND == 7 /* a capability bit from a newer SDK that this engine does not know */
    .name = "futurecap",
#else
    .name = "bad",
#endif
    .version = "0",
    .summary = "broken on purpose",
#if BAD_KIND == 7
    .capabilities = BIASKIT_CAP_TABLE | (1u << 20),
#else
    .capabilities = BIASKIT_CAP_TABLE,
#endif
#if BAD_KIND != 4 /* no create() */
    .create = create,
#endif
    .destroy = destroy,
    .table = table,
};
BIASKIT_DEFINE_PLUGIN(descriptor)
#endif
