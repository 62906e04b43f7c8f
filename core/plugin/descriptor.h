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

/* Whether `s` is a plugin name ([a-z0-9_-]+, allow_dash) or an option name ([a-z0-9_]+). */
int bk_descriptor_identifier(const char *s, int allow_dash);

#endif
