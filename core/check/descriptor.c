/* biaskit check: the descriptor, read by the loader's own validator (plugin/descriptor.h), so that
 * the check and the engine cannot disagree about a descriptor. A plugin the loader refuses never
 * gets here (its "load" item fails with the validator's first refusal); what is left to report are
 * the flaws the engine tolerates, grouped into the items "descriptor", "capabilities", "options". */
#include "check/internal.h"

#include "plugin/descriptor.h"

#include <stdlib.h>

typedef struct flaws {
    strbuf part[3]; /* by bk_descriptor_part: "; "-separated phrases */
} flaws;

static void collect(void *ctx, bk_descriptor_part part, bk_descriptor_severity severity, const char *text)
{
    (void)severity; /* refused or flawed: both fail the check */
    flaws *f = ctx;
    ck_sb_printf(&f->part[part], "; %s", text);
}

void ck_check_descriptor(checker *c)
{
    const biaskit_plugin *d = c->d;
    flaws f = {0};
    bk_descriptor_problems(d, collect, &f);

    strbuf *bad = &f.part[BK_DESCRIPTOR_FIELDS];
    if (bad->len)
        ck_item(c, BK_CHECK_FAIL, "descriptor", "descriptor fields: %s", bad->s + 2);
    else
        ck_item(c, BK_CHECK_PASS, "descriptor", "descriptor: name '%s', version '%s', summary%s present", d->name,
                d->version, d->reference ? " and reference" : "");

    bad = &f.part[BK_DESCRIPTOR_CAPABILITIES];
    char names[128];
    bk_capabilities_string(d->capabilities, names, sizeof names);
    if (bad->len)
        ck_item(c, BK_CHECK_FAIL, "capabilities", "capabilities (%s): %s", names, bad->s + 2);
    else
        ck_item(c, BK_CHECK_PASS, "capabilities", "capabilities (%s%s%s%s) match the function pointers", names,
                d->param_count ? "; learnable" : "", d->table_cuda ? "; CUDA table" : "",
                bk_descriptor_embed_cuda(d) ? "; CUDA embed" : "");

    bad = &f.part[BK_DESCRIPTOR_OPTIONS];
    if (bad->len)
        ck_item(c, BK_CHECK_FAIL, "options", "option declarations: %s", bad->s + 2);
    else
        ck_item(c, BK_CHECK_PASS, "options", "%u option declaration%s well formed (names, docs, defaults, choices)",
                d->n_options, d->n_options == 1 ? "" : "s");
    for (int i = 0; i < 3; i++)
        free(f.part[i].s);
}
