/* Reading a plugin's param_info() (plugin.h, appended after param_group): the one place that fills the
 * engine's defaults before the call and guards against what a plugin may return, for `biaskit plugins`,
 * `biaskit params` and `biaskit check`. */
#ifndef BK_PLUGIN_PARAM_INFO_H
#define BK_PLUGIN_PARAM_INFO_H

#include "plugin/descriptor.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef enum bk_param_info_status {
    BK_PARAM_INFO_NONE = 0, /* the plugin has no param_info(): bounds and initialisation not declared */
    BK_PARAM_INFO_OK,       /* *out holds the answer (defaults for what the plugin left alone) */
    BK_PARAM_INFO_FAILED    /* param_info() returned an error: pe->message says why (or is empty) */
} bk_param_info_status;

/* param_info(inst, tensor) into *out, defaults first (struct_size, lower -INFINITY, upper INFINITY, init
 * ""). The text is cut to a string whatever the plugin wrote: *unterminated (may be NULL) is set when it
 * left no NUL inside init (a plugin bug that `biaskit check` fails), and the last byte is made NUL, so
 * that a caller may always print out->init. pe->message is made a string too. */
static inline bk_param_info_status bk_param_info_read(const biaskit_plugin *d, const void *inst, int32_t tensor,
                                                      biaskit_param_info *out, biaskit_error *pe, int *unterminated)
{
    int (*fn)(const void *, int32_t, biaskit_param_info *, biaskit_error *) = BK_DESCRIPTOR_FN(d, param_info);
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->lower = -INFINITY;
    out->upper = INFINITY;
    memset(pe, 0, sizeof *pe);
    if (unterminated)
        *unterminated = 0;
    if (!fn)
        return BK_PARAM_INFO_NONE;
    int rc = fn(inst, tensor, out, pe);
    out->struct_size = sizeof *out; /* the plugin may not change what the engine reads */
    if (unterminated)
        *unterminated = memchr(out->init, '\0', sizeof out->init) == NULL;
    out->init[sizeof out->init - 1] = '\0';
    pe->message[sizeof pe->message - 1] = '\0';
    return rc == BIASKIT_OK ? BK_PARAM_INFO_OK : BK_PARAM_INFO_FAILED;
}

/* "[lo, hi]" with -inf / inf for a side without a bound, or "no bounds" for neither. */
static inline void bk_param_info_bounds(const biaskit_param_info *p, char *buf, size_t size)
{
    if (p->lower == -INFINITY && p->upper == INFINITY)
        snprintf(buf, size, "no bounds");
    else
        snprintf(buf, size, "[%g, %g]", p->lower, p->upper);
}

#endif
