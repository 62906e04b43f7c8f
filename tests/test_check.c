/* biaskit check (core/check/): it passes real plugins, and on each deliberately broken test
 * plugin (tests/plugins/checkbad.c, and of ABI 2 checkbad2.c) it fails exactly the check that plugin
 * breaks and passes the others; crashes, hangs and exit() inside a plugin are reported and the checks
 * go on; a correct gradient with a kink at the initial parameters passes, the kink stepped around. */
#include "check_report.h"

/* Runs the check of `plugin` (a name or a file of the test plugin directory) with the default
 * options changed by `sets` and `timeout`; returns the code, the report in *r. */
static int run_check(const char *plugin, const char *const *sets, size_t n_sets, unsigned timeout, report *r,
                     bk_error *err)
{
    bk_check_options opt;
    bk_check_options_default(&opt);
    opt.sets = sets;
    opt.n_sets = n_sets;
    if (timeout)
        opt.timeout_s = timeout;
    return check_report_run(plugin, &opt, r, err);
}

static report *checked(const char *plugin)
{
    bk_check_options opt;
    bk_check_options_default(&opt);
    return check_report_of(plugin, &opt);
}

/* The checks that every learnable table plugin gets, all passed. */
static void expect_table_checks_pass(const report *r)
{
    static const char *const ids[] = {"load", "descriptor", "capabilities", "options", "create", "parameters",
                                      "geometry", "option:init", "table-finite", "table-prefix", "table-random",
                                      "table-backward-adds", "table-gradient", "project", "determinism"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        int k = find(r, ids[i]);
        if (k < 0 || r->items[k].status == BK_CHECK_FAIL)
            continue; /* the one failing item is asserted by the caller */
        expect_item(r, ids[i], BK_CHECK_PASS, NULL);
    }
}

static void alibi_passes(void **state)
{
    (void)state;
    report *r = checked("alibi");
    static const char *const none[] = {NULL};
    expect_only_failures(r, none);
    expect_item(r, "load", BK_CHECK_PASS, "alibi");
    expect_item(r, "table-finite", BK_CHECK_PASS, "table finite up to 65536 distances (default parameters)");
    expect_item(r, "table-prefix", BK_CHECK_PASS, NULL);
    expect_item(r, "option:slopes", BK_CHECK_PASS, "[0.5 x 13]");
    /* -1e30 and 1e30 are beyond what the host lets an option hold (plugin/services.c): refused before create() */
    expect_item(r, "option:slope_scale", BK_CHECK_PASS, "refused by create() with a message: -1;");
    expect_item(r, "option:slope_scale", BK_CHECK_PASS, "rejected by the host before create(): -1e30, 1e30");
    expect_item(r, "geometry", BK_CHECK_PASS, "0 heads");
    expect_item(r, "table-gradient", BK_CHECK_SKIP, "no parameters");
    expect_item(r, "long-range", BK_CHECK_PASS, "up to distance 1048576");
    expect_item(r, "shape", BK_CHECK_PASS, "heads 0-11 decrease with distance");
    assert_int_equal(r->counts.warned, 0);
    assert_int_equal(find(r, "segment"), -1); /* capabilities it does not have are not reported */
    int cuda = find(r, "cuda-table");
    assert_true(cuda >= 0 && r->items[cuda].status != BK_CHECK_FAIL);
    assert_true(r->counts.passed >= 12);
    free(r);
}

/* testlin passes everything but its `nan_at` option, which makes the table NaN on purpose: the probes
 * nan_at = 0 and 1 are accepted by create() and then give a NaN table, which the check reports. */
static void testlin_passes_but_its_nan_option(void **state)
{
    (void)state;
    report *r = checked("biaskit_testlin.so");
    static const char *const failing[] = {"option:nan_at", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "option:nan_at", BK_CHECK_FAIL, "0: table() with 128 distances gives nan at head 0, distance 0");
    expect_item(r, "option:nan_at", BK_CHECK_FAIL, "2 of 6 probes fail");
    expect_item(r, "option:fail_create", BK_CHECK_PASS, "refused by create() with a message: true");
    expect_item(r, "option:flavour", BK_CHECK_PASS, "rejected by the host before create(): \"\", \"no-such-value\"");
    expect_item(r, "parameters", BK_CHECK_PASS, "slope[12x1]");
    expect_item(r, "table-gradient", BK_CHECK_PASS, "worst rel. error");
    expect_item(r, "project", BK_CHECK_PASS, NULL);
    free(r);
}

static void same_seed_same_report(void **state)
{
    (void)state;
    report *a = checked("biaskit_testlin.so"), *b = checked("biaskit_testlin.so");
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n; i++)
        assert_string_equal(a->items[i].text, b->items[i].text);
    free(a);
    free(b);
}

static void wrong_gradient_fails_the_gradient(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad_grad.so");
    static const char *const failing[] = {"table-gradient", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "table-gradient", BK_CHECK_FAIL, "analytic");
    expect_item(r, "table-gradient", BK_CHECK_FAIL, "vs central difference");
    expect_item(r, "table-gradient", BK_CHECK_FAIL, "> 0.001");
    expect_table_checks_pass(r);
    free(r);
}

static void crash_on_a_bad_value_is_reported_and_the_check_goes_on(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad_crash.so");
    static const char *const failing[] = {"option:init", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "option:init", BK_CHECK_FAIL, "-1: crashed with signal");
    expect_item(r, "option:init", BK_CHECK_FAIL, "Segmentation fault");
    expect_item(r, "option:init", BK_CHECK_FAIL, "in create()");
    expect_item(r, "option:init", BK_CHECK_FAIL, "1 of 7 probes fail: -1: crashed"); /* -1e30: refused by the host */
    expect_item(r, "option:init", BK_CHECK_FAIL, "accepted (finite outputs): 0;");
    /* the checks after the crash ran */
    expect_item(r, "table-gradient", BK_CHECK_PASS, NULL);
    expect_item(r, "determinism", BK_CHECK_PASS, NULL);
    expect_table_checks_pass(r);
    free(r);
}

static void crash_in_the_default_create_skips_the_rest(void **state)
{
    (void)state;
    const char *sets[] = {"init=-2"};
    report *r = malloc(sizeof *r);
    bk_error err;
    assert_int_equal(run_check("biaskit_checkbad_crash.so", sets, 1, 0, r, &err), BK_OK);
    expect_item(r, "create", BK_CHECK_FAIL, "crashed with signal");
    expect_item(r, "remaining", BK_CHECK_SKIP, "create() with the default configuration failed");
    assert_int_equal(find(r, "table-finite"), -1);
    free(r);
}

static void project_not_idempotent(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad_project.so");
    static const char *const failing[] = {"project", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "project", BK_CHECK_FAIL, "not idempotent");
    expect_item(r, "project", BK_CHECK_FAIL, "after one projection");
    expect_table_checks_pass(r);
    free(r);
}

static void nondeterministic_table(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad_nondet.so");
    static const char *const failing[] = {"determinism", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "determinism", BK_CHECK_FAIL, "table() with 1000 distances differs between two identical calls");
    expect_table_checks_pass(r);
    free(r);
}

static void nan_at_a_long_distance(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad_nan.so");
    static const char *const failing[] = {"table-finite", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "table-finite", BK_CHECK_FAIL, "is nan at head 0, distance 40000");
    expect_item(r, "table-prefix", BK_CHECK_PASS, NULL);
    expect_item(r, "option:init", BK_CHECK_PASS, NULL);
    expect_item(r, "table-random", BK_CHECK_SKIP, "no parameters");
    free(r);
}

static void bad_declarations(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad_decl.so");
    static const char *const failing[] = {"capabilities", "options", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "capabilities", BK_CHECK_FAIL, "table_backward_cuda() without table_cuda() is suspicious");
    expect_item(r, "capabilities", BK_CHECK_FAIL, "has rotary_frequencies() but does not declare BIASKIT_CAP_ROTARY");
    expect_item(r, "options", BK_CHECK_FAIL, "option 'flavour': default \"zzz\" is not one of its choices");
    expect_item(r, "option:flavour", BK_CHECK_PASS, "accepted (finite outputs): \"plain\", \"fancy\"");
    int cuda = find(r, "cuda-backward");
    assert_true(cuda >= 0 && r->items[cuda].status == BK_CHECK_SKIP);
    free(r);
}

static void hang_is_stopped_by_the_time_limit(void **state)
{
    (void)state;
    report *r = malloc(sizeof *r);
    bk_error err;
    assert_int_equal(run_check("biaskit_checkbad_hang.so", NULL, 0, 3, r, &err), BK_OK); /* 3 s per child */
    static const char *const failing[] = {"option:init", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "option:init", BK_CHECK_FAIL, "-1: did not finish within 3 s in create()");
    /* a child that waits (no CPU) stops at the limit and says it was not computing, and which option raises it */
    expect_item(r, "option:init", BK_CHECK_FAIL, "(blocked or waiting, not computing); raise the limit with --timeout S");
    expect_item(r, "table-gradient", BK_CHECK_PASS, NULL);
    free(r);
}

/* The limit counts CPU time: a child that computes for longer stops there, naming --timeout. */
static void cpu_time_limit_names_the_option(void **state)
{
    (void)state;
    report *r = malloc(sizeof *r);
    bk_error err;
    assert_int_equal(run_check("biaskit_checkbad_spin.so", NULL, 0, 1, r, &err), BK_OK);
    static const char *const failing[] = {"option:init", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "option:init", BK_CHECK_FAIL, "-1: did not finish within 1 s of CPU time in create() (");
    expect_item(r, "option:init", BK_CHECK_FAIL, "the limit counts the child's CPU time, not the machine's load); raise "
                "the limit with --timeout S");
    free(r);
}

/* A table that adds a value read from memory create() allocated and never wrote: finite, deterministic, right
 * gradient, so only the two children with differently filled fresh memory see it. */
static void uninitialised_read_fails_fresh_memory(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad_uninit.so");
#if defined(__SANITIZE_ADDRESS__)
    /* AddressSanitizer's allocator: the fillings cannot reach it, and the item says so */
    static const char *const none[] = {NULL};
    expect_only_failures(r, none);
    expect_item(r, "fresh-memory", BK_CHECK_SKIP, "built with AddressSanitizer");
    free(r);
    return;
#endif
    static const char *const failing[] = {"fresh-memory", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "fresh-memory", BK_CHECK_FAIL, "table() reads memory it never wrote: with the heap's fresh memory "
                "filled with 0x5a it gives ");
    expect_item(r, "fresh-memory", BK_CHECK_FAIL, "valgrind --track-origins=yes");
    expect_item(r, "determinism", BK_CHECK_PASS, NULL);
    expect_item(r, "table-gradient", BK_CHECK_PASS, NULL);
    free(r);
}

static void exit_in_a_plugin_is_reported(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad_exit.so");
    static const char *const failing[] = {"option:init", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "option:init", BK_CHECK_FAIL, "exit status 3 in create()");
    expect_item(r, "option:init", BK_CHECK_FAIL, "must never call exit()");
    free(r);
}

static void load_failure_is_one_fail(void **state)
{
    (void)state;
    report *r = checked("biaskit_futureabi.so");
    assert_int_equal(r->n, 1);
    expect_item(r, "load", BK_CHECK_FAIL, "ABI version mismatch");
    assert_int_equal(r->counts.failed, 1);
    free(r);
    r = checked("nosuch");
    expect_item(r, "load", BK_CHECK_FAIL, "plugin 'nosuch' not found");
    free(r);
}

/* The check and the loader read a descriptor with one validator: a capability bit this engine does
 * not know fails the load, with the loader's message, instead of loading and failing one item. */
static void unknown_capability_bits_fail_the_load(void **state)
{
    (void)state;
    report *r = checked("biaskit_futurecap.so");
    assert_int_equal(r->n, 1);
    expect_item(r, "load", BK_CHECK_FAIL, "biaskit_futurecap.so' (futurecap): declares capability bits 0x100000 that "
                                          "this biaskit does not know");
    free(r);
}

/* create() returning BIASKIT_OK without an instance is a broken create(), not a pass. */
static void create_without_an_instance_fails(void **state)
{
    (void)state;
    report *r = checked("biaskit_nullinst.so");
    expect_item(r, "create", BK_CHECK_FAIL, "plugin 'nullinst' ('");
    expect_item(r, "create", BK_CHECK_FAIL, "create() returned BIASKIT_OK but no instance");
    expect_item(r, "geometry", BK_CHECK_FAIL, "returned BIASKIT_OK but no instance");
    expect_item(r, "remaining", BK_CHECK_SKIP, NULL);
    free(r);
}

static void bad_options_are_usage_errors(void **state)
{
    (void)state;
    report *r = malloc(sizeof *r);
    bk_error err;
    const char *unknown[] = {"slope=2"};
    assert_int_equal(run_check("alibi", unknown, 1, 0, r, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "unknown key 'slope'");
    assert_message_has(err.message, "did you mean 'slopes'?");
    const char *malformed[] = {"slopes"};
    assert_int_equal(run_check("alibi", malformed, 1, 0, r, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "--set 'slopes': expected KEY=VALUE");
    const char *wrong_type[] = {"slope_scale=\"big\""};
    assert_int_equal(run_check("alibi", wrong_type, 1, 0, r, &err), BK_ERR_USAGE);
    assert_message_has(err.message, "option 'slope_scale': expected a number, got string");
    free(r);
}

static void set_options_reach_create(void **state)
{
    (void)state;
    report *r = malloc(sizeof *r);
    bk_error err;
    const char *sets[] = {"fail_create=true"};
    assert_int_equal(run_check("biaskit_testlin.so", sets, 1, 0, r, &err), BK_OK);
    expect_item(r, "create", BK_CHECK_FAIL, "asked to fail, as a test");
    free(r);
}

/* A library that misbehaves while it is loaded: one FAIL item "load" naming the file and the stage, and
 * the checking process goes on (before, it died with the plugin: 134, 139, 135, or hung). */
static void expect_load_fails(const char *file, unsigned timeout, const char *stage, const char *how)
{
    report *r = malloc(sizeof *r);
    bk_error err;
    char path[64], needle[1024];
    snprintf(path, sizeof path, "hostile/%s", file);
    assert_int_equal(run_check(path, NULL, 0, timeout, r, &err), BK_OK);
    if (r->n != 1)
        print_report(r);
    assert_int_equal(r->n, 1);
    snprintf(needle, sizeof needle, "plugin file '%s/hostile/%s', %s: the plugin code %s", BK_TEST_PLUGINS_DIR, file,
             stage, how);
    expect_item(r, "load", BK_CHECK_FAIL, needle);
    assert_int_equal(r->counts.failed, 1);
    assert_int_equal(r->counts.passed, 0);
    free(r);
}

static void a_load_that_crashes_exits_or_hangs_is_one_fail(void **state)
{
    (void)state;
    const char *in_dlopen = "in dlopen() (mapping the library and running its constructors)";
    const char *in_entry = "in its entry point biaskit_plugin_entry()";
    const char *reading = "reading the descriptor its entry point returned";
    expect_load_fails("biaskit_ctor_abort.so", 0, in_dlopen, "crashed with signal 6 (SIGABRT");
    /* exit(0) in a constructor: nothing was checked, so it is a failure, not "no check failed" */
    expect_load_fails("biaskit_ctor_exit.so", 0, in_dlopen, "ended the process (exit status 0) before finishing");
    expect_load_fails("biaskit_ctor_hang.so", 1, in_dlopen, "did not finish within 1 s (killed)");
    expect_load_fails("biaskit_entry_data.so", 0, in_entry, "crashed with signal 11 (SIGSEGV");
    expect_load_fails("biaskit_entry_garbage.so", 0, reading, "crashed with signal 11 (SIGSEGV");
    expect_load_fails("biaskit_entry_abort.so", 0, in_entry, "crashed with signal 6 (SIGABRT");
    expect_load_fails("biaskit_entry_hang.so", 1, in_entry, "did not finish within 1 s (killed)");
    expect_load_fails("biaskit_desc_garbage.so", 0, reading, "crashed with signal 11 (SIGSEGV");
}

/* ---- ABI 2 ------------------------------------------------------------------------------------- */

/* The built-in ABI 2 plugins pass everything, with the items of their capabilities. */
static void fire_passes_with_its_kink(void **state)
{
    (void)state;
    report *r = checked("fire");
    static const char *const none[] = {NULL};
    expect_only_failures(r, none);
    static const char *const ids[] = {"coordinate-points", "grid-finite", "grid-random", "coordinate",
                                      "grid-backward-adds", "grid-gradient", "coordinate-backward-adds",
                                      "coordinate-gradient", "determinism"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        expect_item(r, ids[i], BK_CHECK_PASS, NULL);
    expect_item(r, "coordinate", BK_CHECK_PASS, "at lengths 128 (training), 128, 512, 2048, 8192, 32768, 65536");
    expect_item(r, "determinism", BK_CHECK_PASS, "coordinate_backward");
    /* the threshold |L_multiplier L_init| = 64 sits on row 64 at the initial parameters */
    expect_item(r, "coordinate-gradient", BK_CHECK_PASS, "stepped around");
    expect_item(r, "coordinate-gradient", BK_CHECK_PASS, "L_multiplier[0] (initial parameters");
    assert_int_equal(find(r, "table-finite"), -1); /* a grid, not a distance table */
    assert_int_equal(find(r, "table-prefix"), -1);
    /* far out and at the corners of the parameter region */
    expect_item(r, "long-range-coordinate", BK_CHECK_PASS, "coordinate() at length 1048576 (distances = rows = 1048576, "
                                                           "every entry)");
    expect_item(r, "long-range-coordinate", BK_CHECK_PASS, "13 parameter sets (initial, 3 random, 9 corners");
    expect_item(r, "long-range-coordinate", BK_CHECK_PASS, "the grid table (1025 points) finite");
    /* a randomly initialised MLP: its shape is said, an increasing head is not warned about */
    expect_item(r, "shape", BK_CHECK_PASS, "the bias F_h(u(i, d)) along the last row i = 1048575: heads ");
    expect_item(r, "shape", BK_CHECK_PASS, "param_init draws the parameters at random");
    assert_int_equal(r->counts.warned, 0);
    free(r);
}

static void window_logn_ssmax_rope_pass(void **state)
{
    (void)state;
    static const char *const none[] = {NULL};
    report *r = checked("window");
    expect_only_failures(r, none);
    expect_item(r, "mask", BK_CHECK_PASS, "the same at every length");
    expect_item(r, "mask", BK_CHECK_PASS, "query i sees key j when i - j < 128 (itself and the 127 keys before it)");
    expect_item(r, "determinism", BK_CHECK_PASS, "mask");
    expect_item(r, "long-range-mask", BK_CHECK_PASS, "the same at lengths 128, 512, 2048, 8192, 32768, 131072, 524288, "
                                                     "1048576 (not a function of ctx->length");
    free(r);
    r = checked("logn");
    expect_only_failures(r, none);
    expect_item(r, "scale", BK_CHECK_PASS, "finite at lengths 128 (training), 128, 512");
    expect_item(r, "scale-gradient", BK_CHECK_SKIP, "no parameters");
    expect_item(r, "long-range-scale", BK_CHECK_PASS, "scale() at length 1048576 (rows 0 .. 1048575, every head): finite "
                                                      "(no parameters); |s| <= 10000; s from 0 to 13.86");
    free(r);
    r = checked("ssmax");
    expect_only_failures(r, none);
    expect_item(r, "scale", BK_CHECK_PASS, "s from 0 to"); /* s ln(i + 1) is 0 at i = 0: no sign required */
    expect_item(r, "scale-backward-adds", BK_CHECK_PASS, NULL);
    expect_item(r, "scale-gradient", BK_CHECK_PASS, "initial + 3 random parameter sets x lengths 128, 512");
    /* s = 1e3 at a corner is 1.4e4 at row 2^20: beyond the bound, but corners are checked for finiteness only */
    expect_item(r, "long-range-scale", BK_CHECK_PASS, "finite at 13 parameter sets (initial, 3 random, 9 corners");
    expect_item(r, "long-range-scale", BK_CHECK_PASS, "|s| <= 10000 at the initial and random ones; s from 0 to 5.961");
    free(r);
    r = checked("rope");
    expect_only_failures(r, none);
    expect_item(r, "rotary", BK_CHECK_PASS, NULL);
    expect_item(r, "rotary-ctx", BK_CHECK_PASS, "at lengths 32, 64, 128 (training), 128, 256, 1024, 8192");
    expect_item(r, "rotary-ctx", BK_CHECK_PASS, "the same answer at every length (static)");
    expect_item(r, "determinism", BK_CHECK_PASS, "rotary_ctx");
    expect_item(r, "long-range-rotary", BK_CHECK_PASS, "rotary_ctx() at lengths 128 .. 1048576 (x2 each): d_head/2 = 8 "
                                                       "inverse frequencies finite and > 0");
    expect_item(r, "long-range-rotary", BK_CHECK_PASS, "the same answer at every length");
    expect_item(r, "rotary-views", BK_CHECK_PASS, "rotary_views(): no views (the ordinary rotation) with these options");
    free(r);
}

/* Options reach the ABI 2 items: a window with sinks in words; dynamic YaRN leaves RoPE unscaled up to
 * the training length and scales beyond it. */
static void abi2_options_reach_the_items(void **state)
{
    (void)state;
    static const char *const none[] = {NULL};
    report *r = malloc(sizeof *r);
    bk_error err;
    const char *window[] = {"window=16", "sinks=4", "distance_cap=128"};
    assert_int_equal(run_check("window", window, 3, 0, r, &err), BK_OK);
    expect_only_failures(r, none);
    expect_item(r, "mask", BK_CHECK_PASS, "i - j < 16 (itself and the 15 keys before it) or j < 4 (4 sinks); "
                                          "distance tables read at min(d, 128)");
    const char *yarn[] = {"scaling=\"yarn\"", "factor=0"};
    assert_int_equal(run_check("rope", yarn, 2, 0, r, &err), BK_OK);
    expect_only_failures(r, none);
    expect_item(r, "rotary-ctx", BK_CHECK_PASS, "the answer changes with the length (dynamic)");
    expect_item(r, "rotary-ctx", BK_CHECK_PASS, "at lengths <= 128 the unscaled values of rotary_frequencies()");
    expect_item(r, "long-range-rotary", BK_CHECK_PASS, "the answer changes with the length from 256 on (dynamic "
                                                       "scaling: allowed)");
    free(r);
}

/* A correct coordinate plugin whose initial m puts the kink of max(i, |m| T) exactly on row T: the
 * gradient check steps around it and passes, and says so. */
static void coordinate_kink_at_init_passes(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad2_coordkink.so");
    static const char *const none[] = {NULL};
    expect_only_failures(r, none);
    expect_item(r, "coordinate-gradient", BK_CHECK_PASS, "kinks stepped around");
    expect_item(r, "coordinate-gradient", BK_CHECK_PASS, "the first: m[0] (initial parameters, coordinate() at length "
                                                         "128 (training)): one-sided differences");
    expect_item(r, "coordinate-points", BK_CHECK_PASS, "coordinate_points() = 65");
    expect_item(r, "grid-gradient", BK_CHECK_PASS, "the grid of 65 points");
    expect_item(r, "long-range-coordinate", BK_CHECK_PASS, "13 parameter sets");
    /* F_h(u) = a_h u with a_h > 0 set by the author: every head prefers distant tokens */
    expect_item(r, "shape", BK_CHECK_WARN, "heads 0-11 increase with distance (prefer distant tokens)");
    free(r);
}

static void coordinate_beyond_one_far_away_fails(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad2_coordfar.so");
    static const char *const failing[] = {"coordinate", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "coordinate", BK_CHECK_FAIL, "coordinate() at length 8192, initial parameters: u(i = 4096, d = "
                                                "4096) = phi[4096] * rscale[4096]");
    expect_item(r, "coordinate", BK_CHECK_FAIL, "> 1 + 1e-05");
    expect_item(r, "long-range-coordinate", BK_CHECK_SKIP, "below --distances 65536: the coordinate item reports it");
    free(r);
}

static void wrong_coordinate_gradient_fails_despite_the_kink(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad2_coordgrad.so");
    static const char *const failing[] = {"coordinate-gradient", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "coordinate-gradient", BK_CHECK_FAIL, "analytic");
    expect_item(r, "coordinate-gradient", BK_CHECK_FAIL, "vs central difference");
    expect_item(r, "coordinate-gradient", BK_CHECK_FAIL, "> 0.001");
    expect_item(r, "coordinate-gradient", BK_CHECK_FAIL, "the analytic gradient's mean");
    expect_item(r, "coordinate-backward-adds", BK_CHECK_PASS, NULL);
    free(r);
}

/* CoPE (count capability): the layout, the vectors and their gradient pass; the misbehaving counting plugin
 * (tests/plugins/badcount.c) fails the item its failure belongs to. */
static void count_checks(void **state)
{
    (void)state;
    static const char *const none[] = {NULL}, *const count_fails[] = {"count", "count-gradient", NULL};
    report *r = checked("cope");
    expect_only_failures(r, none);
    expect_item(r, "count", BK_CHECK_PASS, "count() = 129 position vectors of 16 values, pos_scale 0.25");
    expect_item(r, "count-backward-adds", BK_CHECK_PASS, NULL);
    expect_item(r, "count-gradient", BK_CHECK_PASS, "initial + 3 random parameter sets x 129 position vectors");
    free(r);
    report *b = malloc(sizeof *b);
    bk_error err;
    const char *nan[] = {"failure=\"nan\""}, *points[] = {"failure=\"points\""}, *grad[] = {"failure=\"grad\""};
    assert_int_equal(run_check("biaskit_badcount.so", nan, 1, 0, b, &err), BK_OK);
    expect_item(b, "count", BK_CHECK_FAIL, "count_vectors() of 3 position vectors gives nan at vector 1, component 2");
    assert_int_equal(run_check("biaskit_badcount.so", points, 1, 0, b, &err), BK_OK);
    expect_only_failures(b, count_fails);
    expect_item(b, "count", BK_CHECK_FAIL, "count() said 1 position vectors");
    assert_int_equal(run_check("biaskit_badcount.so", grad, 1, 0, b, &err), BK_OK);
    static const char *const grad_fails[] = {"count-gradient", NULL};
    expect_only_failures(b, grad_fails);
    expect_item(b, "count-gradient", BK_CHECK_FAIL, "count_vectors_backward gradient theta[0]: analytic");
    expect_item(b, "count", BK_CHECK_PASS, NULL);
    free(b);
}

/* The content position (FoX): content() and the gradient through the steps into theta and into x pass for
 * fox; the misbehaving content plugin (tests/plugins/badcontent.c) fails the item of each defect. */
static void content_checks(void **state)
{
    (void)state;
    static const char *const none[] = {NULL};
    report *r = checked("fox");
    expect_only_failures(r, none);
    expect_item(r, "content", BK_CHECK_PASS, "content() of 1, 7 and 512 tokens");
    expect_item(r, "content-backward-adds", BK_CHECK_PASS, NULL);
    expect_item(r, "content-gradient", BK_CHECK_PASS, "initial + 3 random parameter sets x 7 and 33 tokens");
    expect_item(r, "content-backward-adds-x", BK_CHECK_PASS, NULL);
    expect_item(r, "content-gradient-x", BK_CHECK_PASS, "192 entries of x");
    expect_item(r, "long-range-content", BK_CHECK_PASS, "x in [-1, 1], [-1e3, 1e3], +-1e4 and 0: every step finite "
                "and >= 0 at 13 parameter sets");
    free(r);
    static const struct {
        const char *set, *item, *text;
    } cases[] = {
        {"failure=\"nan\"", "content", "content() of 7 tokens gives nan at token 5, head 1"},
        {"failure=\"negative\"", "content", "gives the step -0.5 at token 5, head 1"},
        {"failure=\"grad_theta\"", "content-gradient", "content_backward (theta) gradient theta[0]"},
        {"failure=\"grad_x\"", "content-gradient-x", "dL/dx at token"},
        {"failure=\"overwrite\"", "content-backward-adds-x", "dx must be added into, not overwritten"},
        {"failure=\"dx_past\"", "content-gradient-x", "content_backward() wrote past the end of dx (7 tokens x 192 "
                                                      "channels)"},
    };
    report *b = malloc(sizeof *b);
    bk_error err;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *sets[] = {cases[k].set};
        assert_int_equal(run_check("biaskit_badcontent.so", sets, 1, 0, b, &err), BK_OK);
        expect_item(b, cases[k].item, BK_CHECK_FAIL, cases[k].text);
    }
    const char *fine[] = {"failure=\"none\""};
    assert_int_equal(run_check("biaskit_badcontent.so", fine, 1, 0, b, &err), BK_OK);
    expect_only_failures(b, none);
    free(b);
}

/* A bad step beyond the content item's 4L = 512 tokens: only long-range-content sees it and names the
 * token; one within them is the content item's, a SKIP there. */
static void content_far_away_fails(void **state)
{
    (void)state;
    static const char *const failing[] = {"long-range-content", NULL};
    static const struct {
        const char *failure, *text;
    } cases[] = {
        {"failure=\"nan\"", "content() of 10922 tokens, x in [-1, 1], gives the step nan at token 10000, head 1: "
                             "every step must be finite and >= 0, at the initial parameters (theta[0] = 1"},
        {"failure=\"negative\"", "gives the step -0.5 at token 10000, head 1"},
    };
    report *b = malloc(sizeof *b);
    bk_error err;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *sets[] = {cases[k].failure, "token=10000"};
        assert_int_equal(run_check("biaskit_badcontent.so", sets, 2, 0, b, &err), BK_OK);
        expect_only_failures(b, failing);
        expect_item(b, "content", BK_CHECK_PASS, NULL);
        expect_item(b, "long-range-content", BK_CHECK_FAIL, cases[k].text);
    }
    const char *near[] = {"failure=\"nan\""};
    assert_int_equal(run_check("biaskit_badcontent.so", near, 1, 0, b, &err), BK_OK);
    expect_item(b, "long-range-content", BK_CHECK_SKIP, "at token 5, head 1, at the initial parameters, x in [-1, 1], "
                "within the content item's 512 tokens: the content item reports it");
    free(b);
}

static void scale_nan_far_away_fails(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad2_scalenan.so");
    static const char *const failing[] = {"scale", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "scale", BK_CHECK_FAIL, "scale() at length 8192 gives nan at head 0, query 5000 (initial parameters)");
    expect_item(r, "scale-gradient", BK_CHECK_PASS, NULL);
    expect_item(r, "long-range-scale", BK_CHECK_SKIP, "the scale item reports it");
    free(r);
}

static void wrong_scale_gradient_fails(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad2_scalegrad.so");
    static const char *const failing[] = {"scale-gradient", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "scale-gradient", BK_CHECK_FAIL, "scale_backward gradient a[0]: analytic");
    expect_item(r, "scale", BK_CHECK_PASS, NULL);
    free(r);
}

/* window 0 leaves every row empty: the mask item fails, and so do the geometry probes that accept it. */
static void mask_with_window_0_fails(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad2_mask0.so");
    static const char *const failing[] = {"mask", "geometry", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "mask", BK_CHECK_FAIL, "mask() at length 128 (training) gives window 0, sinks 4, distance_cap 0: "
                                          "expected window >= 1");
    expect_item(r, "determinism", BK_CHECK_PASS, "mask");
    expect_item(r, "long-range-mask", BK_CHECK_SKIP, "the mask item reports it");
    free(r);
}

/* window = length / 2: the mask item says how it changes, and long-range-mask fails it (plugin.h: the
 * engine computes a mask once for the longest sequence and reads it for every shorter one). */
static void mask_that_depends_on_the_length_is_explained(void **state)
{
    (void)state;
    report *r = checked("biaskit_checkbad2_masklen.so");
    static const char *const failing[] = {"long-range-mask", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "mask", BK_CHECK_PASS, "it depends on the length: window 64 at 128 (training), 64 at 128, 256 at "
                                          "512");
    expect_item(r, "long-range-mask", BK_CHECK_FAIL, "window 64, sinks 4, distance_cap 0 at length 128 but window "
                                                     "524288, sinks 4, distance_cap 0 at length 1048576");
    expect_item(r, "long-range-mask", BK_CHECK_FAIL, "a mask must not depend on ctx->length");
    free(r);
}

static void rotary_ctx_contract(void **state)
{
    (void)state;
    static const char *const failing[] = {"rotary-ctx", NULL};
    report *r = checked("biaskit_checkbad2_rotamp0.so");
    expect_only_failures(r, failing);
    /* the engine's words (plugin/contract.h: one rule for both) */
    expect_item(r, "rotary-ctx", BK_CHECK_FAIL, "rotary_ctx() at length 1024 gives the amplitude 0, expected a finite "
                                                "number > 0");
    expect_item(r, "rotary", BK_CHECK_PASS, NULL);
    expect_item(r, "long-range-rotary", BK_CHECK_SKIP, "the rotary-ctx item reports a failure at its lengths");
    free(r);
    r = checked("biaskit_checkbad2_rotnan.so");
    expect_only_failures(r, failing);
    expect_item(r, "rotary-ctx", BK_CHECK_FAIL, "rotary_ctx() at length 8192 gives inverse frequency 0 = nan");
    expect_item(r, "long-range-rotary", BK_CHECK_SKIP, "the rotary-ctx item reports a failure at its lengths");
    free(r);
    r = checked("biaskit_checkbad2_rotviews.so"); /* rotary_views(): a gap in the distances beyond L */
    static const char *const views[] = {"rotary-views", NULL};
    expect_only_failures(r, views);
    expect_item(r, "rotary-views", BK_CHECK_FAIL, "rotary_views() at length 256 gave view 1 owns distances [5, 0) (0: "
                                            "unbounded), expected [4, ...)");
    free(r);
    r = checked("biaskit_checkbad2_rotdyn.so"); /* s = length / L without max(1, .) */
    expect_only_failures(r, failing);
    expect_item(r, "rotary-ctx", BK_CHECK_FAIL, "rotary_ctx() at length 32 gives pair 0 = 4");
    expect_item(r, "rotary-ctx", BK_CHECK_FAIL, "must leave RoPE unscaled");
    expect_item(r, "long-range-rotary", BK_CHECK_PASS, "changes with the length"); /* a rule below L, not far out */
    free(r);
}

/* ---- the long-range probe (tests/plugins/checkbad3.c) ---------------------------------------------- */

/* The check of a test plugin file with --distances `distances` (0: the default) and --allow-increasing. */
static report *checked_long(const char *file, int32_t distances, int allow_increasing)
{
    bk_check_options opt;
    bk_check_options_default(&opt);
    if (distances)
        opt.max_distances = distances;
    opt.allow_increasing = allow_increasing;
    return check_report_of(file, &opt);
}

/* -a d / (1 + b d) with b >= -1.7e-4 allowed: finite at every distance the other checks read (the
 * gap this probe closes), a pole at 1/1.7e-4 = 5882.35 at random projected parameters. */
static void pole_far_away_fails(void **state)
{
    (void)state;
    report *r = checked_long("biaskit_checkbad3_pole.so", 0, 0);
    static const char *const failing[] = {"long-range", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "table-finite", BK_CHECK_PASS, NULL);
    expect_item(r, "table-random", BK_CHECK_PASS, NULL);
    expect_item(r, "table-gradient", BK_CHECK_PASS, NULL);
    expect_item(r, "long-range", BK_CHECK_FAIL, "has a pole between distances 5882 and 5883");
    expect_item(r, "long-range", BK_CHECK_FAIL, "at random projected parameter set 1 (a[0] = ");
    expect_item(r, "long-range", BK_CHECK_FAIL, ", ... (24 values)"); /* 8 values printed of 24 */
    expect_item(r, "shape", BK_CHECK_PASS, "heads 0-11 decrease with distance"); /* the initial parameters */
    free(r);
}

/* NaN for d > 4000: with --distances 4000 only the long-range probe sees it; with the default 65536
 * the table-finite item reports it and the probe does not report it twice. */
static void nan_beyond_the_distances_fails(void **state)
{
    (void)state;
    report *r = checked_long("biaskit_checkbad3_nanfar.so", 4000, 0);
    static const char *const failing[] = {"long-range", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "table-finite", BK_CHECK_PASS, "up to 4000 distances");
    expect_item(r, "long-range", BK_CHECK_FAIL, "head 0 is nan at distance 4001, at the initial parameters");
    free(r);
    r = checked_long("biaskit_checkbad3_nanfar.so", 0, 0);
    static const char *const finite[] = {"table-finite", NULL};
    expect_only_failures(r, finite);
    expect_item(r, "long-range", BK_CHECK_SKIP, "the table-finite and table-random items report it");
    free(r);
}

/* +m d: correct, gradients right, every head increasing: a WARN (not a failure), or a PASS that says
 * so with --allow-increasing. */
static void increasing_heads_warn(void **state)
{
    (void)state;
    report *r = checked_long("biaskit_checkbad3_rising.so", 0, 0);
    static const char *const none[] = {NULL};
    expect_only_failures(r, none);
    expect_table_checks_pass(r);
    expect_item(r, "long-range", BK_CHECK_PASS, NULL);
    expect_item(r, "shape", BK_CHECK_WARN, "heads 0-11 increase with distance (prefer distant tokens)");
    expect_item(r, "shape", BK_CHECK_WARN, "--allow-increasing silences this");
    assert_int_equal(r->counts.warned, 1);
    free(r);
    r = checked_long("biaskit_checkbad3_rising.so", 0, 1);
    expect_only_failures(r, none);
    expect_item(r, "shape", BK_CHECK_PASS, "allowed by --allow-increasing");
    assert_int_equal(r->counts.warned, 0);
    free(r);
}

/* The rational bias with b >= 0: every check passes, the corners included. */
static void rational_bias_passes(void **state)
{
    (void)state;
    report *r = checked_long("biaskit_checkbad3_rational.so", 0, 0);
    static const char *const none[] = {NULL};
    expect_only_failures(r, none);
    expect_table_checks_pass(r);
    expect_item(r, "long-range", BK_CHECK_PASS, "13 parameter sets (initial, 3 random, 9 corners");
    expect_item(r, "shape", BK_CHECK_PASS, "heads 0-11 decrease with distance");
    free(r);
}

/* ---- the long-range probes of the ABI 2 capabilities (tests/plugins/checkbad4.c) ---------------------- */

/* phi = inf beyond distance 100000: past every length of the coordinate item (65536), so only the probe at
 * 2^20 sees it, at the initial parameters already; it names the distance and the set. */
static void coordinate_infinite_far_away_fails(void **state)
{
    (void)state;
    report *r = checked_long("biaskit_checkbad4_phiinf.so", 0, 0);
    static const char *const failing[] = {"long-range-coordinate", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "coordinate", BK_CHECK_PASS, "65536");
    expect_item(r, "grid-finite", BK_CHECK_PASS, NULL);
    expect_item(r, "coordinate-gradient", BK_CHECK_PASS, NULL);
    expect_item(r, "long-range-coordinate", BK_CHECK_FAIL, "coordinate() at length 1048576 (distances = rows = 1048576): "
                                                           "phi[100001] = inf (expected finite and >= 0), at the initial "
                                                           "parameters (a[0] = 0.5, ");
    assert_int_equal(find(r, "shape"), -1); /* no shape of a broken coordinate */
    free(r);
}

/* u(i, i) = 1.25 on rows beyond 8192: with --distances 8192 only the probe sees it (naming the row); with
 * the default 65536 the coordinate item reports it and the probe says so (no second FAIL). */
static void coordinate_beyond_one_on_far_rows_fails(void **state)
{
    (void)state;
    report *r = checked_long("biaskit_checkbad4_ufar.so", 8192, 0);
    static const char *const failing[] = {"long-range-coordinate", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "coordinate", BK_CHECK_PASS, "8192 (distances = rows = length)");
    expect_item(r, "long-range-coordinate", BK_CHECK_FAIL, "u(i = 8193, d = 8193) = phi[8193] * rscale[8193]");
    expect_item(r, "long-range-coordinate", BK_CHECK_FAIL, "> 1 + 1e-05");
    expect_item(r, "long-range-coordinate", BK_CHECK_FAIL, "at the initial parameters");
    free(r);
    r = checked_long("biaskit_checkbad4_ufar.so", 0, 0);
    static const char *const near[] = {"coordinate", NULL};
    expect_only_failures(r, near);
    expect_item(r, "long-range-coordinate", BK_CHECK_SKIP, "the coordinate item reports it");
    free(r);
}

/* NaN beyond row 5000 once a_h leaves its initial value: with --distances 4096 the scale item passes and
 * the probe fails, naming head, row and the random set with its values. */
static void scale_nan_far_away_at_random_parameters_fails(void **state)
{
    (void)state;
    report *r = checked_long("biaskit_checkbad4_scalenan.so", 4096, 0);
    static const char *const failing[] = {"long-range-scale", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "scale", BK_CHECK_PASS, "initial and random parameters");
    expect_item(r, "long-range-scale", BK_CHECK_FAIL, "scale() at length 1048576 gives nan at head 0, row 5001, at "
                                                      "random projected parameter set 1 (a[0] = ");
    free(r);
    r = checked_long("biaskit_checkbad4_scalenan.so", 0, 0);
    static const char *const near[] = {"scale", NULL};
    expect_only_failures(r, near);
    expect_item(r, "scale", BK_CHECK_FAIL, "random parameter set 1");
    expect_item(r, "long-range-scale", BK_CHECK_SKIP, "the scale item reports it");
    free(r);
}

/* --params replaces the initial parameters of the probes: a_h off its initial value makes the given set
 * the one that fails (no other item looks at it: no SKIP for "reported elsewhere"). */
static void given_parameters_are_the_first_set(void **state)
{
    (void)state;
    float params[12];
    for (int h = 0; h < 12; h++)
        params[h] = 0.25f;
    bk_check_options opt;
    bk_check_options_default(&opt);
    opt.max_distances = 4096;
    opt.params = params;
    opt.n_params = 12;
    report *r = check_report_of("biaskit_checkbad4_scalenan.so", &opt);
    expect_item(r, "long-range-scale", BK_CHECK_FAIL, "gives nan at head 0, row 5001, at the given parameters "
                                                      "(--params) (a[0] = 0.25, ");
    free(r);
    float ones[13];
    for (int k = 0; k < 13; k++)
        ones[k] = 1.0f;
    opt.params = ones;
    opt.n_params = 13;
    r = check_report_of("biaskit_checkbad4_rising.so", &opt);
    expect_item(r, "shape", BK_CHECK_WARN, "heads 0-11 increase with distance (prefer distant tokens) up to distance "
                                           "1048575 at the given parameters (--params)");
    free(r);
}

/* s = 1000 ln(i + 1) passes the bound up to row 65536 and goes past it at row 22026 (e^10): a FAIL of the
 * probe, at the initial parameters, naming head and row. */
static void scale_too_large_far_away_fails(void **state)
{
    (void)state;
    report *r = malloc(sizeof *r);
    bk_error err;
    const char *big[] = {"s_init=1000"};
    assert_int_equal(run_check("ssmax", big, 1, 0, r, &err), BK_OK);
    static const char *const failing[] = {"long-range-scale", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "scale", BK_CHECK_PASS, NULL);
    expect_item(r, "long-range-scale", BK_CHECK_FAIL, "at head 0, row 22026: |s| beyond 10000");
    expect_item(r, "long-range-scale", BK_CHECK_FAIL, "at the initial parameters (s[0] = 1000, ");
    free(r);
}

/* window 128 up to length 65536, length / 512 beyond: the mask item (up to --distances) sees one window,
 * the probe fails it. */
static void mask_growing_far_away_fails(void **state)
{
    (void)state;
    report *r = checked_long("biaskit_checkbad4_maskgrow.so", 0, 0);
    static const char *const failing[] = {"long-range-mask", NULL};
    expect_only_failures(r, failing);
    expect_item(r, "mask", BK_CHECK_PASS, "the same at every length");
    expect_item(r, "long-range-mask", BK_CHECK_FAIL, "window 128, sinks 4, distance_cap 0 at length 128 but window "
                                                     "2048, sinks 4, distance_cap 0 at length 1048576");
    free(r);
}

/* F_h(u) = +a_h u, a_h >= 0 set by the author: correct, every head prefers distant tokens: a WARN, or a
 * PASS with --allow-increasing. */
static void coordinate_increasing_bias_warns(void **state)
{
    (void)state;
    report *r = checked_long("biaskit_checkbad4_rising.so", 0, 0);
    static const char *const none[] = {NULL};
    expect_only_failures(r, none);
    expect_item(r, "long-range-coordinate", BK_CHECK_PASS, NULL);
    expect_item(r, "shape", BK_CHECK_WARN, "the bias F_h(u(i, d)) along the last row i = 1048575: heads 0-11 increase "
                                           "with distance (prefer distant tokens) up to distance 1048575 at the "
                                           "initial parameters");
    expect_item(r, "shape", BK_CHECK_WARN, "--allow-increasing silences this");
    assert_int_equal(r->counts.warned, 1);
    free(r);
    r = checked_long("biaskit_checkbad4_rising.so", 0, 1);
    expect_only_failures(r, none);
    expect_item(r, "shape", BK_CHECK_PASS, "allowed by --allow-increasing");
    assert_int_equal(r->counts.warned, 0);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(alibi_passes),
        cmocka_unit_test(testlin_passes_but_its_nan_option),
        cmocka_unit_test(same_seed_same_report),
        cmocka_unit_test(wrong_gradient_fails_the_gradient),
        cmocka_unit_test(crash_on_a_bad_value_is_reported_and_the_check_goes_on),
        cmocka_unit_test(crash_in_the_default_create_skips_the_rest),
        cmocka_unit_test(project_not_idempotent),
        cmocka_unit_test(nondeterministic_table),
        cmocka_unit_test(nan_at_a_long_distance),
        cmocka_unit_test(bad_declarations),
        cmocka_unit_test(hang_is_stopped_by_the_time_limit),
        cmocka_unit_test(cpu_time_limit_names_the_option),
        cmocka_unit_test(uninitialised_read_fails_fresh_memory),
        cmocka_unit_test(exit_in_a_plugin_is_reported),
        cmocka_unit_test(load_failure_is_one_fail),
        cmocka_unit_test(unknown_capability_bits_fail_the_load),
        cmocka_unit_test(create_without_an_instance_fails),
        cmocka_unit_test(bad_options_are_usage_errors),
        cmocka_unit_test(set_options_reach_create),
        cmocka_unit_test(count_checks),
        cmocka_unit_test(content_checks),
        cmocka_unit_test(content_far_away_fails),
        cmocka_unit_test(a_load_that_crashes_exits_or_hangs_is_one_fail),
        cmocka_unit_test(fire_passes_with_its_kink),
        cmocka_unit_test(window_logn_ssmax_rope_pass),
        cmocka_unit_test(abi2_options_reach_the_items),
        cmocka_unit_test(coordinate_kink_at_init_passes),
        cmocka_unit_test(coordinate_beyond_one_far_away_fails),
        cmocka_unit_test(wrong_coordinate_gradient_fails_despite_the_kink),
        cmocka_unit_test(scale_nan_far_away_fails),
        cmocka_unit_test(wrong_scale_gradient_fails),
        cmocka_unit_test(mask_with_window_0_fails),
        cmocka_unit_test(mask_that_depends_on_the_length_is_explained),
        cmocka_unit_test(rotary_ctx_contract),
        cmocka_unit_test(pole_far_away_fails),
        cmocka_unit_test(nan_beyond_the_distances_fails),
        cmocka_unit_test(increasing_heads_warn),
        cmocka_unit_test(rational_bias_passes),
        cmocka_unit_test(coordinate_infinite_far_away_fails),
        cmocka_unit_test(coordinate_beyond_one_on_far_rows_fails),
        cmocka_unit_test(scale_nan_far_away_at_random_parameters_fails),
        cmocka_unit_test(given_parameters_are_the_first_set),
        cmocka_unit_test(scale_too_large_far_away_fails),
        cmocka_unit_test(mask_growing_far_away_fails),
        cmocka_unit_test(coordinate_increasing_bias_warns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
