/* What is wrong with a plugin's descriptor: the one validator behind both the loader (host.c, which
 * refuses a plugin with a problem the engine cannot live with) and `biaskit check` (core/check/, which
 * fails every problem, so that an author sees them all before anyone loads the plugin).
 *
 * Nothing of the plugin runs: only the descriptor's fields are read, and none past its struct_size. */
#ifndef BK_PLUGIN_DESCRIPTOR_H
#define BK_PLUGIN_DESCRIPTOR_H

#include <biaskit/plugin.h>

/* Which group of fields a problem is about; `biaskit check` reports one line per group. */
typedef enum bk_descriptor_part {
    BK_DESCRIPTOR_FIELDS,       /* size, ABI, name, version, summary, reference, create, destroy */
    BK_DESCRIPTOR_CAPABILITIES, /* capability and flag bits against the function pointers */
    BK_DESCRIPTOR_OPTIONS       /* the declared options */
} bk_descriptor_part;

typedef enum bk_descriptor_severity {
    /* The engine cannot use the plugin safely or faithfully: the loader refuses it. */
    BK_DESCRIPTOR_REFUSED,
    /* The engine can use it, but something is wrong or misleading (a NULL table_backward fails only
     * when training reaches it, a multi-line summary garbles `biaskit plugins`): check fails it. */
    BK_DESCRIPTOR_FLAWED
} bk_descriptor_severity;

/* One problem; `text` is a phrase without the plugin's name or file ("declares the table capability
 * but has no table function"), valid during the call only. */
typedef void (*bk_descriptor_problem_fn)(void *ctx, bk_descriptor_part part, bk_descriptor_severity severity,
                                         const char *text);

/* Calls `fn` for every problem of `d`, fields first, then capabilities, then options. A descriptor
 * too small for this ABI or of another ABI is one problem and nothing more is read (its fields may
 * not be there or may mean something else). Returns the number of BK_DESCRIPTOR_REFUSED problems. */
int bk_descriptor_problems(const biaskit_plugin *d, bk_descriptor_problem_fn fn, void *ctx);

/* The descriptor fields appended after BIASKIT_PLUGIN_V1_SIZE, read only when the plugin's struct_size
 * holds them (BIASKIT_HAS_FIELD): a plugin built against an older SDK gets NULL, which means "not
 * provided" (the engine runs the host variant and copies). Every reader of these fields goes through
 * these accessors. */
typedef int (*bk_embed_cuda_fn)(const void *inst, const float *theta, const int32_t *positions, int64_t count,
                                float *out, void *stream, biaskit_error *err);
typedef int (*bk_embed_backward_cuda_fn)(const void *inst, const float *theta, const int32_t *positions,
                                         int64_t count, const float *dout, float *dtheta, void *stream,
                                         biaskit_error *err);

static inline bk_embed_cuda_fn bk_descriptor_embed_cuda(const biaskit_plugin *d)
{
    return BIASKIT_HAS_FIELD(d, biaskit_plugin, embed_cuda) ? d->embed_cuda : NULL;
}

static inline bk_embed_backward_cuda_fn bk_descriptor_embed_backward_cuda(const biaskit_plugin *d)
{
    return BIASKIT_HAS_FIELD(d, biaskit_plugin, embed_backward_cuda) ? d->embed_backward_cuda : NULL;
}

/* The same for the ABI 2 hooks (param_init_ctx, coordinate_points, coordinate, coordinate_backward,
 * mask, scale, scale_backward, rotary_ctx): the field, or NULL when struct_size ends before it. */
#define BK_DESCRIPTOR_FN(d, field) (BIASKIT_HAS_FIELD((d), biaskit_plugin, field) ? (d)->field : NULL)

/* Whether `s` is a plugin name ([a-z0-9_-]+, allow_dash) or an option name ([a-z0-9_]+). */
int bk_descriptor_identifier(const char *s, int allow_dash);

#endif
