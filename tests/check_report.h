/* `biaskit check`'s report as the tests collect it (tests/test_check.c, test_check_fd.c,
 * test_check_cuda_emul.c): every item with its status, id and text, and the helpers that look at it. */
#ifndef BK_TEST_CHECK_REPORT_H
#define BK_TEST_CHECK_REPORT_H

#include "test_util.h"

#include "check/check.h"

#include <stdlib.h>

#define CHECK_REPORT_MAX_ITEMS 160

typedef struct report {
    int n;
    struct {
        bk_check_status status;
        char id[64];
        char text[8192];
    } items[CHECK_REPORT_MAX_ITEMS];
    bk_check_counts counts;
} report;

static inline void check_report_collect(void *ctx, const bk_check_item *it)
{
    report *r = ctx;
    if (r->n == CHECK_REPORT_MAX_ITEMS)
        fail_msg("more than %d items", CHECK_REPORT_MAX_ITEMS);
    r->items[r->n].status = it->status;
    snprintf(r->items[r->n].id, sizeof r->items[r->n].id, "%s", it->id);
    snprintf(r->items[r->n].text, sizeof r->items[r->n].text, "%s", it->text);
    r->n++;
}

/* bk_check_plugin on `plugin` (a name on the test plugin path, or a .so file of the test plugin directory)
 * with *opt, the report into *r (cleared first); the code of bk_check_plugin. */
static inline int check_report_run(const char *plugin, const bk_check_options *opt, report *r, bk_error *err)
{
    static const char *const dirs[] = {BK_TEST_PLUGIN_DIR, BK_TEST_PLUGINS_DIR};
    char path[1024];
    if (strstr(plugin, ".so"))
        snprintf(path, sizeof path, "%s/%s", BK_TEST_PLUGINS_DIR, plugin);
    else
        snprintf(path, sizeof path, "%s", plugin);
    bk_registry reg;
    assert_int_equal(bk_registry_init_dirs(&reg, dirs, 2, err), BK_OK);
    memset(r, 0, sizeof *r);
    int rc = bk_check_plugin(&reg, path, opt, check_report_collect, r, &r->counts, err);
    bk_registry_free(&reg);
    return rc;
}

/* The same in a new report (the caller frees it); the run must work. */
static inline report *check_report_of(const char *plugin, const bk_check_options *opt)
{
    report *r = malloc(sizeof *r);
    bk_error err;
    assert_non_null(r);
    if (check_report_run(plugin, opt, r, &err) != BK_OK)
        fail_msg("bk_check_plugin(%s): %s", plugin, err.message);
    return r;
}

static inline int find(const report *r, const char *id)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->items[i].id, id) == 0)
            return i;
    return -1;
}

static inline void print_report(const report *r)
{
    for (int i = 0; i < r->n; i++)
        fprintf(stderr, "    %s  [%s] %s\n", bk_check_status_name(r->items[i].status), r->items[i].id, r->items[i].text);
}

/* Item `id` is there with `status` and its text contains each of `needles` (a list ending in NULL; the
 * list may be NULL). */
static inline void expect_item_has(const report *r, const char *id, bk_check_status status,
                                   const char *const *needles)
{
    int i = find(r, id);
    if (i < 0) {
        print_report(r);
        fail_msg("no item '%s'", id);
    }
    if (r->items[i].status != status) {
        print_report(r);
        fail_msg("item '%s' is %s, expected %s", id, bk_check_status_name(r->items[i].status),
                 bk_check_status_name(status));
    }
    for (const char *const *n = needles; n && *n; n++)
        if (!strstr(r->items[i].text, *n)) {
            print_report(r);
            fail_msg("item '%s' lacks \"%s\"", id, *n);
        }
}

/* Item `id` is there with `status` and its text contains `needle` (may be NULL). */
static inline void expect_item(const report *r, const char *id, bk_check_status status, const char *needle)
{
    const char *const needles[] = {needle, NULL};
    expect_item_has(r, id, status, needles);
}

/* `failing` (a list ending in NULL) are the only FAIL items, and the counts add up. */
static inline void expect_only_failures(const report *r, const char *const *failing)
{
    int failed = 0;
    for (int i = 0; i < r->n; i++) {
        int expected = 0;
        for (const char *const *f = failing; *f; f++)
            expected |= strcmp(*f, r->items[i].id) == 0;
        if ((r->items[i].status == BK_CHECK_FAIL) != expected) {
            print_report(r);
            fail_msg("item '%s' is %s", r->items[i].id, bk_check_status_name(r->items[i].status));
        }
        failed += r->items[i].status == BK_CHECK_FAIL;
    }
    for (const char *const *f = failing; *f; f++)
        expect_item(r, *f, BK_CHECK_FAIL, NULL);
    assert_int_equal(r->counts.failed, failed);
    assert_int_equal(r->counts.passed + r->counts.failed + r->counts.skipped + r->counts.warned, r->n);
}

#endif
