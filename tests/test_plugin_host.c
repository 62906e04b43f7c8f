/* The plugin host: discovery, loading, and every rejection with its message (docs/design.md §5). */
#define _DEFAULT_SOURCE /* setenv, mkdtemp */
#include "test_util.h"

#include "plugin/descriptor.h"
#include "plugin/host.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

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
    snprintf(needle, sizeof needle, "ABI version mismatch: built for ABI %u, this biaskit loads ABI %u to %u",
             BIASKIT_ABI_VERSION + 1, BIASKIT_ABI_VERSION_MIN, BIASKIT_ABI_VERSION);
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

/* A capability bit from a newer SDK: refused with the file and the bits, not silently ignored. */
static void rejects_unknown_capability_bits(void **state)
{
    (void)state;
    expect_rejected("biaskit_futurecap.so", "(futurecap): declares capability bits 0x100000 that this biaskit does not know");
}

/* The validator on descriptors built here: what the loader refuses and what it only flags. */
typedef struct seen {
    int refused, flawed;
    char first[512];
    bk_descriptor_part first_part;
} seen;

static void record_seen(void *ctx, bk_descriptor_part part, bk_descriptor_severity severity, const char *text)
{
    seen *s = ctx;
    if (!s->refused && !s->flawed) {
        snprintf(s->first, sizeof s->first, "%s", text);
        s->first_part = part;
    }
    s->refused += severity == BK_DESCRIPTOR_REFUSED;
    s->flawed += severity == BK_DESCRIPTOR_FLAWED;
}

static int dummy_create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo,
                        void **out, biaskit_error *err)
{
    (void)svc, (void)cfg, (void)geo, (void)err;
    *out = NULL;
    return BIASKIT_OK;
}

static void dummy_destroy(void *inst)
{
    (void)inst;
}

static int dummy_table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    (void)inst, (void)theta, (void)distances, (void)out, (void)err;
    return BIASKIT_OK;
}

static int dummy_rotary(const void *inst, float *inv_freq, biaskit_error *err)
{
    (void)inst, (void)inv_freq, (void)err;
    return BIASKIT_OK;
}

static biaskit_plugin valid_descriptor(void)
{
    return (biaskit_plugin){.struct_size = sizeof(biaskit_plugin), .abi_version = BIASKIT_ABI_VERSION,
                            .name = "ok", .version = "1", .summary = "fine", .capabilities = BIASKIT_CAP_TABLE,
                            .create = dummy_create, .destroy = dummy_destroy, .table = dummy_table};
}

static seen problems_of(const biaskit_plugin *d)
{
    seen s = {0};
    int refused = bk_descriptor_problems(d, record_seen, &s);
    assert_int_equal(refused, s.refused);
    return s;
}

static void descriptor_validator_refuses_what_the_engine_cannot_honour(void **state)
{
    (void)state;
    biaskit_plugin d = valid_descriptor();
    seen s = problems_of(&d);
    assert_int_equal(s.refused + s.flawed, 0);

    d.capabilities = BIASKIT_CAP_TABLE | (1u << 31);
    s = problems_of(&d);
    assert_int_equal(s.refused, 1);
    assert_int_equal(s.first_part, BK_DESCRIPTOR_CAPABILITIES);
    assert_message_has(s.first, "declares capability bits 0x80000000 that this biaskit does not know");

    d.capabilities = BIASKIT_CAP_TABLE | BIASKIT_CAP_WEIGHT; /* reserved, not implemented */
    s = problems_of(&d);
    assert_int_equal(s.refused, 1);
    assert_message_has(s.first, "BIASKIT_CAP_WEIGHT, which is reserved and not part of ABI 2");

    d = valid_descriptor();
    d.flags = BIASKIT_FLAG_PER_LAYER | (1u << 4);
    s = problems_of(&d);
    assert_int_equal(s.refused, 1);
    assert_message_has(s.first, "declares flag bits 0x10 that this biaskit does not know");

    d = valid_descriptor();
    d.capabilities = BIASKIT_CAP_TABLE | BIASKIT_CAP_ROTARY; /* no rotary_frequencies */
    s = problems_of(&d);
    assert_int_equal(s.refused, 1);
    assert_message_has(s.first, "declares the rotary capability but has no rotary_frequencies or rotary_ctx function");

    /* ABI 2: each capability needs its hook; table() means one thing per plugin */
    d = valid_descriptor();
    d.capabilities = BIASKIT_CAP_COORDINATE; /* table() present, no coordinate_points / coordinate */
    s = problems_of(&d);
    assert_int_equal(s.refused, 2);
    assert_message_has(s.first, "declares the coordinate capability but has no coordinate_points function");
    d = valid_descriptor();
    d.capabilities = BIASKIT_CAP_TABLE | BIASKIT_CAP_MASK;
    s = problems_of(&d);
    assert_int_equal(s.refused, 1);
    assert_message_has(s.first, "declares the mask capability but has no mask function");
    d = valid_descriptor();
    d.capabilities = BIASKIT_CAP_TABLE | BIASKIT_CAP_SCALE;
    s = problems_of(&d);
    assert_int_equal(s.refused, 1);
    assert_message_has(s.first, "declares the scale capability but has no scale function");
}

/* An int option's default reaches create() as an int64_t: one the conversion cannot represent (found
 * by fuzz_descriptor: 7e223, undefined behaviour in get_int) or would cut (2.5) is refused. */
static void descriptor_validator_refuses_an_int_default_that_is_not_an_integer(void **state)
{
    (void)state;
    static const double bad[] = {7.3e223, 2.5, -1e19, 1e300};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        biaskit_option o[] = {BIASKIT_OPTION_INT("count", 0, "how many")};
        o[0].default_number = bad[i];
        biaskit_plugin d = valid_descriptor();
        d.options = o;
        d.n_options = 1;
        seen s = problems_of(&d);
        assert_int_equal(s.refused, 1);
        assert_message_has(s.first, "option 'count': an int default must be a whole number of magnitude at most 2^53");
    }
    biaskit_option nan_default[] = {BIASKIT_OPTION_INT("count", 0, "how many")};
    nan_default[0].default_number = 0.0 / 0.0;
    biaskit_plugin d = valid_descriptor();
    d.options = nan_default;
    d.n_options = 1;
    assert_int_equal(problems_of(&d).refused, 1);
    biaskit_option fine[] = {BIASKIT_OPTION_INT("count", -9007199254740992LL, "how many")};
    d.options = fine;
    seen s = problems_of(&d);
    assert_int_equal(s.refused + s.flawed, 0);
}

static void descriptor_validator_only_flags_what_the_engine_tolerates(void **state)
{
    (void)state;
    biaskit_plugin d = valid_descriptor();
    d.summary = "two\nlines";
    d.rotary_frequencies = dummy_rotary; /* without the rotary capability: never called */
    seen s = problems_of(&d);
    assert_int_equal(s.refused, 0);
    assert_int_equal(s.flawed, 2);
    assert_int_equal(s.first_part, BK_DESCRIPTOR_FIELDS);
    assert_message_has(s.first, "summary must be a non-empty one-line string");
}

/* A descriptor of another ABI: one problem, and nothing else of it is read. */
static void descriptor_validator_stops_at_a_foreign_abi(void **state)
{
    (void)state;
    biaskit_plugin d = valid_descriptor();
    d.abi_version = BIASKIT_ABI_VERSION + 1;
    d.name = NULL;
    d.capabilities = 1u << 30;
    seen s = problems_of(&d);
    assert_int_equal(s.refused, 1);
    assert_int_equal(s.flawed, 0);
    assert_message_has(s.first, "ABI version mismatch");
}

/* create() said OK without an instance: the one check every caller of create() makes. */
static void null_instance_is_named(void **state)
{
    (void)state;
    bk_registry reg;
    bk_error err;
    assert_int_equal(bk_registry_init_dirs(&reg, test_dirs, 1, &err), BK_OK);
    const bk_plugin *p;
    assert_int_equal(bk_registry_load_file(&reg, BK_TEST_PLUGINS_DIR "/biaskit_nullinst.so", &p, &err), BK_OK);
    assert_int_equal(bk_plugin_check_created(p, p, &err), BK_OK);
    assert_int_equal(bk_plugin_check_created(p, NULL, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "plugin 'nullinst' ('" BK_TEST_PLUGINS_DIR "/biaskit_nullinst.so'): create() "
                                    "returned BIASKIT_OK but no instance");
    bk_registry_free(&reg);
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
    int noentry, futureabi, tiny, nocreate, junk, futurecap, shadowed;
} problems;

static void record_problem(void *ctx, bk_scan_problem kind, const char *path, const char *message)
{
    problems *p = ctx;
    p->count++;
    p->noentry += kind == BK_SCAN_REJECTED && strstr(path, "noentry") && strstr(message, "no entry symbol");
    p->futureabi += kind == BK_SCAN_REJECTED && strstr(path, "futureabi") && strstr(message, "ABI version mismatch");
    p->tiny += kind == BK_SCAN_REJECTED && strstr(path, "tiny") && strstr(message, "descriptor is 16 bytes");
    p->nocreate += kind == BK_SCAN_REJECTED && strstr(path, "nocreate") && strstr(message, "create");
    p->junk += kind == BK_SCAN_REJECTED && strstr(path, "junk") && strstr(message, "cannot load");
    p->futurecap += kind == BK_SCAN_REJECTED && strstr(path, "futurecap") && strstr(message, "capability bits 0x100000");
    /* a shadow names both files: the one skipped and the one that wins */
    p->shadowed += kind == BK_SCAN_SHADOWED && strstr(path, "dupalibi") &&
                   strstr(message, BK_TEST_PLUGINS_DIR "/biaskit_dupalibi.so' (plugin 'alibi') is shadowed by '") &&
                   strstr(message, BK_TEST_PLUGIN_DIR "/biaskit_alibi.so', earlier in the search path");
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
    assert_int_equal(pr.futurecap, 1);
    assert_int_equal(pr.shadowed, 1);
    assert_int_equal(pr.count, 7);
    assert_null(bk_registry_find(&reg, "futurecap"));
    bk_registry_free(&reg);
}

/* The same directory twice, and the same file by another path: one plugin each, nothing shadowed. */
static void scan_same_file_twice_is_no_shadow(void **state)
{
    (void)state;
    bk_registry reg;
    bk_error err;
    const char *dirs[] = {BK_TEST_PLUGIN_DIR, BK_TEST_PLUGIN_DIR "/.", BK_TEST_PLUGIN_DIR};
    assert_int_equal(bk_registry_init_dirs(&reg, dirs, 3, &err), BK_OK);
    problems pr = {0};
    size_t n = bk_registry_scan(&reg, record_problem, &pr);
    assert_true(n >= 1);
    assert_int_equal(pr.count, 0);
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

/* A FIFO (or a directory) under a plugin's file name: refused by name, by path and in a search,
 * before dlopen() could block on it (an alarm fails the test if anything blocks). */
static void non_regular_files_are_refused_before_dlopen(void **state)
{
    (void)state;
    char dir[] = "/tmp/bk_host_fifo_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char fifo[256], sub[256];
    snprintf(fifo, sizeof fifo, "%s/biaskit_x.so", dir);
    snprintf(sub, sizeof sub, "%s/biaskit_d.so", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(mkdir(sub, 0700), 0);
    alarm(20);
    bk_registry reg;
    bk_error err;
    const char *dirs[] = {dir};
    assert_int_equal(bk_registry_init_dirs(&reg, dirs, 1, &err), BK_OK);
    const bk_plugin *p;
    assert_int_equal(bk_registry_load_file(&reg, fifo, &p, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "plugin file '");
    assert_message_has(err.message, "/biaskit_x.so' is a FIFO (named pipe); expected a regular file");
    assert_int_equal(bk_registry_load(&reg, "x", &p, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "/biaskit_x.so' is a FIFO (named pipe)");
    char path[512];
    assert_int_equal(bk_registry_locate(&reg, "d", path, sizeof path, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "/biaskit_d.so' is a directory");
    assert_int_equal(reg.count, 0);
    problems pr = {0};
    assert_int_equal(bk_registry_scan(&reg, record_problem, &pr), 0);
    assert_int_equal(pr.count, 2); /* both reported as rejected, neither opened */
    alarm(0);
    bk_registry_free(&reg);
    unlink(fifo);
    rmdir(sub);
    rmdir(dir);
}

/* bk_registry_locate finds the file and loads nothing. */
static void locate_loads_nothing(void **state)
{
    (void)state;
    bk_registry reg;
    bk_error err;
    assert_int_equal(bk_registry_init_dirs(&reg, builtin_dirs, 1, &err), BK_OK);
    char path[1024];
    assert_int_equal(bk_registry_locate(&reg, "alibi", path, sizeof path, &err), BK_OK);
    assert_string_equal(path, BK_TEST_PLUGIN_DIR "/biaskit_alibi.so");
    assert_int_equal(reg.count, 0);
    assert_int_equal(bk_registry_locate(&reg, "nosuch", path, sizeof path, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "plugin 'nosuch' not found; searched: ");
    bk_registry_free(&reg);
}

/* The loader's acceptance path without a library: the validator, then the name. */
static void a_descriptor_in_memory_is_accepted_like_a_loaded_one(void **state)
{
    (void)state;
    bk_registry reg;
    bk_error err;
    assert_int_equal(bk_registry_init_dirs(&reg, NULL, 0, &err), BK_OK);
    biaskit_plugin d = valid_descriptor(), twin = valid_descriptor(), bad = valid_descriptor();
    const bk_plugin *p;
    assert_int_equal(bk_registry_add(&reg, &d, "(memory)", &p, &err), BK_OK);
    assert_ptr_equal(p->desc, &d);
    assert_ptr_equal(bk_registry_find(&reg, "ok"), p);
    assert_int_equal(bk_registry_add(&reg, &twin, "(twin)", &p, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "plugin '(twin)': duplicate name 'ok', already loaded from '(memory)'");
    bad.name = "other";
    bad.capabilities = BIASKIT_CAP_TABLE | (1u << 20);
    assert_int_equal(bk_registry_add(&reg, &bad, "(bad)", &p, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "plugin '(bad)' (other): declares capability bits 0x100000");
    assert_int_equal(bk_registry_add(&reg, NULL, "(none)", &p, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, "plugin '(none)': biaskit_plugin_entry() returned no descriptor");
    assert_int_equal(reg.count, 1);
    bk_registry_free(&reg); /* nothing to unload */
}

typedef struct load_job {
    const char *path;
    int fail_plainly;
} load_job;

static int load_in_child(void *ctx, FILE *out, bk_error *err)
{
    const load_job *job = ctx;
    fprintf(out, "child was here");
    if (job->fail_plainly)
        return bk_fail(err, BK_ERR_CONFIG, "a plain failure");
    bk_registry reg;
    int rc = bk_registry_init_dirs(&reg, NULL, 0, err);
    const bk_plugin *p;
    if (!rc)
        rc = bk_registry_load_file(&reg, job->path, &p, err);
    bk_registry_free(&reg);
    return rc;
}

/* Plugin code that crashes, exits or hangs in a child: the error names the stage and the file. */
static void isolate_names_the_stage_that_died(void **state)
{
    (void)state;
    static const struct {
        const char *file, *stage, *how;
    } cases[] = {
        {"biaskit_ctor_abort.so", "in dlopen() (mapping the library and running its constructors)",
         "the plugin code crashed with signal 6 (SIGABRT"},
        {"biaskit_ctor_exit.so", "in dlopen() (mapping the library and running its constructors)",
         "the plugin code ended the process (exit status 0)"},
        {"biaskit_entry_data.so", "in its entry point biaskit_plugin_entry()",
         "the plugin code crashed with signal 11 (SIGSEGV"},
        {"biaskit_entry_garbage.so", "reading the descriptor its entry point returned",
         "the plugin code crashed with signal 11 (SIGSEGV"},
        {"biaskit_desc_garbage.so", "reading the descriptor its entry point returned",
         "the plugin code crashed with signal 11 (SIGSEGV"},
        {"biaskit_entry_hang.so", "in its entry point biaskit_plugin_entry()",
         "the plugin code did not finish within 1 s (killed)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[1024], needle[1200];
        snprintf(path, sizeof path, "%s/hostile/%s", BK_TEST_PLUGINS_DIR, cases[i].file);
        load_job job = {path, 0};
        bk_isolated res;
        bk_error err;
        assert_int_equal(bk_plugin_isolate(load_in_child, &job, 1, "loading it", &res, &err), BK_ERR_PLUGIN);
        assert_false(res.finished);
        snprintf(needle, sizeof needle, "plugin file '%s', %s: %s", path, cases[i].stage, cases[i].how);
        assert_message_has(err.message, needle);
        assert_false(bk_plugin_stage_active()); /* only a child listens */
        free(res.output);
    }
    /* a child that finishes: its own error and its text, untouched */
    load_job plain = {"", 1};
    bk_isolated res;
    bk_error err;
    assert_int_equal(bk_plugin_isolate(load_in_child, &plain, 5, "loading it", &res, &err), BK_ERR_CONFIG);
    assert_string_equal(err.message, "a plain failure");
    assert_string_equal(res.output, "child was here");
    free(res.output);
    /* a good plugin loads in the child */
    load_job good = {BK_TEST_PLUGIN_DIR "/biaskit_alibi.so", 0};
    assert_int_equal(bk_plugin_isolate(load_in_child, &good, 5, "loading it", NULL, &err), BK_OK);
}

static void writable_by_others_is_noticed(void **state)
{
    (void)state;
    char dir[] = "/tmp/bk_host_open_XXXXXX", buf[128];
    assert_non_null(mkdtemp(dir));
    assert_int_equal(chmod(dir, 0755), 0);
    assert_null(bk_plugin_path_writable_by_others(dir, buf, sizeof buf));
    assert_int_equal(chmod(dir, 0775), 0); /* the group is the owner's business */
    assert_null(bk_plugin_path_writable_by_others(dir, buf, sizeof buf));
    assert_int_equal(chmod(dir, 0777), 0);
    assert_non_null(bk_plugin_path_writable_by_others(dir, buf, sizeof buf));
    assert_string_equal(buf, "mode 0777");
    assert_int_equal(chmod(dir, 01777), 0);
    assert_non_null(bk_plugin_path_writable_by_others(dir, buf, sizeof buf));
    assert_message_has(buf, "mode 1777, sticky");
    assert_null(bk_plugin_path_writable_by_others("/nonexistent/dir", buf, sizeof buf));
    rmdir(dir);
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
        cmocka_unit_test(rejects_unknown_capability_bits),
        cmocka_unit_test(descriptor_validator_refuses_what_the_engine_cannot_honour),
        cmocka_unit_test(descriptor_validator_only_flags_what_the_engine_tolerates),
        cmocka_unit_test(descriptor_validator_refuses_an_int_default_that_is_not_an_integer),
        cmocka_unit_test(descriptor_validator_stops_at_a_foreign_abi),
        cmocka_unit_test(null_instance_is_named),
        cmocka_unit_test(rejects_duplicate_name),
        cmocka_unit_test(rejects_name_that_differs_from_file),
        cmocka_unit_test(scan_registers_good_and_reports_bad),
        cmocka_unit_test(scan_same_file_twice_is_no_shadow),
        cmocka_unit_test(search_path_from_environment),
        cmocka_unit_test(non_regular_files_are_refused_before_dlopen),
        cmocka_unit_test(locate_loads_nothing),
        cmocka_unit_test(a_descriptor_in_memory_is_accepted_like_a_loaded_one),
        cmocka_unit_test(isolate_names_the_stage_that_died),
        cmocka_unit_test(writable_by_others_is_noticed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
