/* The plugin host: discovery, loading, and every rejection with its message (DESIGN.md §3). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "test_util.h"

#include "plugin/host.h"

#include <stdlib.h>

static const char *const builtin_dirs[] = {BK_TEST_PLUGIN_DIR};
static const char *const test_dirs[] = {BK_TEST_PLUGINS_DIR};

static void load_builtin_by_name(void **state)
{
    (void)state;
    bk_registry reg;
    bk_error err;
    assert_int_equal(bk_registry_init_dirs(&reg, builtin_dirs, 1, &err), BK_OK);
    const bk_plugin *p = NULL, *again = NULL;
    assert_int_equal(bk_registry_load(&reg, "alibi", &p, &err), BK_OK);
    assert_string_equal(p->desc->name, "alibi");
    assert_int_equal(p->desc->abi_version, BIASKIT_ABI_VERSION);
    assert_true(p->desc->capabilities & BIASKIT_CAP_TABLE);
    assert_non_null(strstr(p->path, "biaskit_alibi.so"));
    /* the same name, and the same file by path, give the same entry */
    assert_int_equal(bk_registry_load(&reg, "alibi", &again, &err), BK_OK);
    assert_ptr_equal(p, again);
    assert_int_equal(bk_registry_load(&reg, BK_TEST_PLUGIN_DIR "/biaskit_alibi.so", &again, &err), BK_OK);
    assert_ptr_equal(p, again);
    assert_int_equal(reg.count, 1);
    assert_ptr_equal(bk_registry_find(&reg, "alibi"), p);
    bk_registry_free(&reg);
}

static void not_found_lists_paths(void **state)
{
    (void)state;
    bk_registry reg;
    bk_error err;
    const char *dirs[] = {"/nonexistent/one", BK_TEST_PLUGIN_DIR};
    assert_int_equal(bk_registry_init_dirs(&reg, dirs, 2, &err), BK_OK);
    const bk_plugin *p;
    assert_int_equal(bk_registry_load(&reg, "nosuch", &p, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "plugin 'nosuch' not found; searched: /nonexistent/one/biaskit_nosuch.so, ");
    assert_message_has(err.message, BK_TEST_PLUGIN_DIR "/biaskit_nosuch.so");
    assert_message_has(err.message, "BIASKIT_PLUGIN_PATH");
    /* by path */
    assert_int_equal(bk_registry_load(&reg, "/nonexistent/biaskit_x.so", &p, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "plugin file '/nonexistent/biaskit_x.so' not found");
    /* neither a name nor a path */
    assert_int_equal(bk_registry_load(&reg, "Bad Name", &p, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "'Bad Name' is neither a plugin name");
    bk_registry_free(&reg);
}

/* Load a file of the test plugin directory and expect a rejection containing `needle`. */
static void expect_rejected(const char *file, const char *needle)
{
    bk_registry reg;
    bk_error err;
    assert_int_equal(bk_registry_init_dirs(&reg, test_dirs, 1, &err), BK_OK);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", BK_TEST_PLUGINS_DIR, file);
    const bk_plugin *p = NULL;
    assert_int_equal(bk_registry_load_file(&reg, path, &p, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, needle);
    assert_message_has(err.message, file); /* every rejection names the file */
    assert_int_equal(reg.count, 0);
    bk_registry_free(&reg);
}

static void rejects_missing_entry_symbol(void **state)
{
    (void)state;
    expect_rejected("biaskit_noentry.so", "is not a biaskit plugin: no entry symbol 'biaskit_plugin_entry'");
}

static void rejects_abi_mismatch(void **state)
{
    (void)state;
    char needle[128];
    snprintf(needle, sizeof needle, "ABI version mismatch: built for ABI %u, this biaskit loads ABI %u",
             BIASKIT_ABI_VERSION + 1, BIASKIT_ABI_VERSION);
    expect_rejected("biaskit_futureabi.so", needle);
}

static void rejects_small_descriptor(void **state)
{
    (void)state;
    expect_rejected("biaskit_tiny.so", "descriptor is 16 bytes");
}

static void rejects_missing_create(void **state)
{
    (void)state;
    expect_rejected("biaskit_nocreate.so", "descriptor lacks the create function");
}

static void rejects_non_elf(void **state)
{
    (void)state;
    expect_rejected("biaskit_junk.so", "cannot load plugin");
}

static void rejects_duplicate_name(void **state)
{
    (void)state;
    bk_registry reg;
    bk_error err;
    const char *dirs[] = {BK_TEST_PLUGIN_DIR, BK_TEST_PLUGINS_DIR};
    assert_int_equal(bk_registry_init_dirs(&reg, dirs, 2, &err), BK_OK);
    const bk_plugin *alibi, *p;
    assert_int_equal(bk_registry_load(&reg, "alibi", &alibi, &err), BK_OK);
    assert_int_equal(bk_registry_load(&reg, BK_TEST_PLUGINS_DIR "/biaskit_dupalibi.so", &p, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "biaskit_dupalibi.so': duplicate name 'alibi', already loaded from '");
    assert_message_has(err.message, alibi->path);
    assert_int_equal(reg.count, 1);
    bk_registry_free(&reg);
}

static void rejects_name_that_differs_from_file(void **state)
{
    (void)state;
    bk_registry reg;
    bk_error err;
    assert_int_equal(bk_registry_init_dirs(&reg, test_dirs, 1, &err), BK_OK);
    const bk_plugin *p;
    assert_int_equal(bk_registry_load(&reg, "dupalibi", &p, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "declares the name 'alibi', expected 'dupalibi'");
    bk_registry_free(&reg);
}

typedef struct problems {
    int count;
    int noentry, futureabi, tiny, nocreate, junk, shadowed;
} problems;

static void record_problem(void *ctx, const char *path, const char *message)
{
    problems *p = ctx;
    p->count++;
    p->noentry += strstr(path, "noentry") && strstr(message, "no entry symbol");
    p->futureabi += strstr(path, "futureabi") && strstr(message, "ABI version mismatch");
    p->tiny += strstr(path, "tiny") && strstr(message, "descriptor is 16 bytes");
    p->nocreate += strstr(path, "nocreate") && strstr(message, "create");
    p->junk += strstr(path, "junk") && strstr(message, "cannot load");
    p->shadowed += strstr(path, "dupalibi") && strstr(message, "shadowed");
}

static void scan_registers_good_and_reports_bad(void **state)
{
    (void)state;
    bk_registry reg;
    bk_error err;
    const char *dirs[] = {BK_TEST_PLUGIN_DIR, BK_TEST_PLUGINS_DIR};
    assert_int_equal(bk_registry_init_dirs(&reg, dirs, 2, &err), BK_OK);
    problems pr = {0};
    size_t n = bk_registry_scan(&reg, record_problem, &pr);
    assert_true(n >= 2);
    assert_non_null(bk_registry_find(&reg, "alibi"));
    assert_non_null(bk_registry_find(&reg, "testlin"));
    /* the built-in directory comes first, so the duplicate 'alibi' of the test directory is shadowed */
    assert_non_null(strstr(bk_registry_find(&reg, "alibi")->path, BK_TEST_PLUGIN_DIR));
    assert_int_equal(pr.noentry, 1);
    assert_int_equal(pr.futureabi, 1);
    assert_int_equal(pr.tiny, 1);
    assert_int_equal(pr.nocreate, 1);
    assert_int_equal(pr.junk, 1);
    assert_int_equal(pr.shadowed, 1);
    assert_int_equal(pr.count, 6);
    bk_registry_free(&reg);
}

static void search_path_from_environment(void **state)
{
    (void)state;
    setenv("BIASKIT_PLUGIN_PATH", "/first/dir::/second/dir", 1);
    bk_registry reg;
    bk_error err;
    assert_int_equal(bk_registry_init(&reg, &err), BK_OK);
    assert_true(reg.n_search_dirs >= 3);
    assert_string_equal(reg.search_dirs[0], "/first/dir");
    assert_string_equal(reg.search_dirs[1], "/second/dir");
    /* the build directory is always last */
    assert_string_equal(reg.search_dirs[reg.n_search_dirs - 1], BK_TEST_PLUGIN_DIR);
    const bk_plugin *p;
    assert_int_equal(bk_registry_load(&reg, "alibi", &p, &err), BK_OK);
    bk_registry_free(&reg);
    unsetenv("BIASKIT_PLUGIN_PATH");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(load_builtin_by_name),
        cmocka_unit_test(not_found_lists_paths),
        cmocka_unit_test(rejects_missing_entry_symbol),
        cmocka_unit_test(rejects_abi_mismatch),
        cmocka_unit_test(rejects_small_descriptor),
        cmocka_unit_test(rejects_missing_create),
        cmocka_unit_test(rejects_non_elf),
        cmocka_unit_test(rejects_duplicate_name),
        cmocka_unit_test(rejects_name_that_differs_from_file),
        cmocka_unit_test(scan_registers_good_and_reports_bad),
        cmocka_unit_test(search_path_from_environment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
