/* Checkpoints (train/checkpoint.h): plugin parameters stored as the plugin's named tensors (per layer
 * too), a checksum per tensor verified on load, every metadata number validated, shapes compared
 * (not only element counts), an older format refused, the experiment's source name kept as it was,
 * and plugin records compared on load: a changed plugin is a warning naming what changed, or with
 * strict an error. Each test edits a real checkpoint the way a bug or a damaged disk would. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

#include "io/safetensors.h"
#include "train/checkpoint.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char dir[256], exp_path[512], ckpt[512];

/* 2 layers, testlin per layer (named tensor "slope"), learnable KERPLE shared ("r1", "r2"), ALiBi
 * (no parameters), learnable mixing weights. */
static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/bk_test_ckpt_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(exp_path, sizeof exp_path, "%s/exp.toml", dir);
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", dir);
    FILE *f = fopen(exp_path, "w");
    if (!f)
        return -1;
    fprintf(f, "[model]\nlayers = 2\nheads = 4\ndim = 32\n"
               "[train]\nlength = 32\n"
               "[attention]\nmixing = \"sum\"\nlearn_weights = true\n"
               "[[term]]\nplugin = \"testlin\"\nper_layer = true\n"
               "[[term]]\nplugin = \"kerple\"\n"
               "[[term]]\nplugin = \"alibi\"\n");
    fclose(f);
    setenv("BIASKIT_PLUGIN_PATH", BK_TEST_PLUGIN_DIR ":" BK_TEST_PLUGINS_DIR, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Every parameter and moment set to a value that tells its group and position apart, then saved at
 * step 3. */
static void write_checkpoint_of(const char *experiment, const char *path)
{
    bk_lm lm;
    bk_adamw opt = {0};
    bk_error err;
    if (bk_lm_open_file(&lm, experiment, NULL, 0, &err) || bk_lm_register(&lm, &opt, &err))
        fail_msg("%s", err.message);
    for (int g = 0; g < opt.n_groups; g++)
        for (size_t i = 0; i < opt.groups[g].n; i++) {
            opt.groups[g].param[i] = 0.25f + (float)g + 0.001f * (float)i;
            opt.groups[g].m[i] = -(float)g - 0.001f * (float)i;
            opt.groups[g].v[i] = 2.0f + (float)g + 0.002f * (float)i;
        }
    opt.t = 3;
    bk_train_state st = {3, 0, 5, 3 * 128, 4.5};
    if (bk_checkpoint_save(path, &lm, &opt, &st, &err))
        fail_msg("%s", err.message);
    bk_adamw_free(&opt);
    bk_lm_close(&lm);
}

static void write_checkpoint(const char *path)
{
    write_checkpoint_of(exp_path, path);
}

/* Rewrites `path` with its tensors (maybe edited by `edit_tensor`) and its metadata JSON edited by
 * `edit_meta`: what a buggy or hostile writer could leave. */
typedef void (*meta_edit)(cJSON *meta);
typedef void (*tensor_edit)(bk_st_tensor *t, int n);
static void rewrite(const char *path, meta_edit edit_meta, tensor_edit edit_tensor)
{
    bk_safetensors *st = NULL;
    bk_error err;
    if (bk_safetensors_open(path, &st, &err))
        fail_msg("%s", err.message);
    int n = bk_safetensors_count(st);
    bk_st_tensor *t = calloc((size_t)n + 1, sizeof *t);
    for (int i = 0; i < n; i++)
        t[i] = *bk_safetensors_at(st, i);
    if (edit_tensor)
        edit_tensor(t, n);
    cJSON *meta = cJSON_Parse(bk_safetensors_meta(st, "biaskit"));
    assert_non_null(meta);
    if (edit_meta)
        edit_meta(meta);
    char *json = cJSON_PrintUnformatted(meta);
    bk_st_meta m[2] = {{"format", "pt"}, {"biaskit", json}};
    if (bk_safetensors_write(path, t, n, m, 2, &err))
        fail_msg("%s", err.message);
    free(json);
    cJSON_Delete(meta);
    free(t);
    bk_safetensors_close(st);
}

static int load(const char *path, bk_lm *lm, bk_adamw *opt, bk_train_state *st, bk_error *err)
{
    return bk_checkpoint_load(path, NULL, 0, lm, opt, st, err);
}

/* Loading must fail with a message naming the checkpoint and containing `needle`. */
static void expect_refused(const char *path, const char *needle)
{
    bk_lm lm;
    bk_adamw opt = {0};
    bk_train_state st;
    bk_error err;
    bk_error_clear(&err);
    int rc = load(path, &lm, &opt, &st, &err);
    bk_adamw_free(&opt);
    if (rc == BK_OK) {
        bk_lm_close(&lm);
        fail_msg("the checkpoint was accepted; expected an error containing \"%s\"", needle);
    }
    assert_message_has(err.message, path);
    assert_message_has(err.message, needle);
}

static cJSON *plugin_record(cJSON *meta, const char *term)
{
    cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(meta, "plugins"))
    {
        cJSON *label = cJSON_GetObjectItemCaseSensitive(r, "term");
        if (cJSON_IsString(label) && strcmp(label->valuestring, term) == 0)
            return r;
    }
    fail_msg("no plugin record for term '%s'", term);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ tests */

static void plugin_parameters_are_named_tensors(void **state)
{
    (void)state;
    write_checkpoint(ckpt);
    bk_safetensors *st = NULL;
    bk_error err;
    if (bk_safetensors_open(ckpt, &st, &err))
        fail_msg("%s", err.message);
    /* testlin per layer: "slope" [layers, heads]; kerple shared: "r1" and "r2" [heads] */
    const char *names[] = {"term.testlin.slope", "adam.m.term.testlin.slope", "adam.v.term.testlin.slope"};
    for (int i = 0; i < 3; i++) {
        const bk_st_tensor *t = bk_safetensors_find(st, names[i]);
        if (!t)
            fail_msg("no tensor '%s' in the checkpoint", names[i]);
        assert_int_equal(t->ndim, 2);
        assert_int_equal(t->shape[0], 2);
        assert_int_equal(t->shape[1], 4);
    }
    const bk_st_tensor *r2 = bk_safetensors_find(st, "term.kerple.r2");
    assert_non_null(r2);
    assert_int_equal(r2->ndim, 1);
    assert_int_equal(r2->shape[0], 4);
    assert_non_null(bk_safetensors_find(st, "adam.v.term.kerple.r1"));
    assert_null(bk_safetensors_find(st, "term.testlin.theta"));
    assert_null(bk_safetensors_find(st, "term.kerple.theta"));
    assert_non_null(bk_safetensors_find(st, "mix.token"));
    /* the values sit where param_tensors() says: r2 starts 4 values after r1 inside theta, and layer
     * 1's slopes (theta's second copy) are 4 values after layer 0's (values grow by 0.001 per index) */
    const bk_st_tensor *r1 = bk_safetensors_find(st, "term.kerple.r1");
    const bk_st_tensor *slope = bk_safetensors_find(st, "term.testlin.slope");
    for (int h = 0; h < 4; h++) {
        assert_float_equal(r2->data[h], r1->data[h] + 0.004f, 1e-6);
        assert_float_equal(slope->data[4 + h], slope->data[h] + 0.004f, 1e-6);
    }
    bk_safetensors_close(st);

    /* and they come back where they were: every parameter and moment, exactly */
    bk_lm saved, lm;
    bk_adamw ref = {0}, opt = {0};
    bk_train_state ts;
    if (bk_lm_open_file(&saved, exp_path, NULL, 0, &err) || bk_lm_register(&saved, &ref, &err))
        fail_msg("%s", err.message);
    if (load(ckpt, &lm, &opt, &ts, &err))
        fail_msg("%s", err.message);
    assert_int_equal(ts.step, 3);
    assert_int_equal(ts.data_index, 5);
    assert_int_equal(opt.t, 3);
    assert_int_equal(opt.n_groups, ref.n_groups);
    for (int g = 0; g < opt.n_groups; g++)
        for (size_t i = 0; i < opt.groups[g].n; i++) {
            float want = 0.25f + (float)g + 0.001f * (float)i;
            if (opt.groups[g].param[i] != want || opt.groups[g].m[i] != -(float)g - 0.001f * (float)i ||
                opt.groups[g].v[i] != 2.0f + (float)g + 0.002f * (float)i)
                fail_msg("group %s [%zu]: %g, expected %g", opt.groups[g].name, i, (double)opt.groups[g].param[i],
                         (double)want);
        }
    bk_adamw_free(&opt), bk_adamw_free(&ref);
    bk_lm_close(&lm), bk_lm_close(&saved);
}

/* A plugin with parameters but no param_tensors: its theta is stored whole, (copies, n_params), with
 * its moments, and comes back exactly. */
static void parameters_without_names_are_stored_as_theta(void **state)
{
    (void)state;
    char exp2[600], ckpt2[600];
    snprintf(exp2, sizeof exp2, "%s/unnamed.toml", dir);
    snprintf(ckpt2, sizeof ckpt2, "%s/unnamed.safetensors", dir);
    FILE *f = fopen(exp2, "w");
    assert_non_null(f);
    fprintf(f, "[model]\nlayers = 2\nheads = 4\ndim = 32\n[train]\nlength = 32\n"
               "[[term]]\nplugin = \"testlin_unnamed\"\nper_layer = true\n");
    fclose(f);
    write_checkpoint_of(exp2, ckpt2);
    bk_safetensors *st = NULL;
    bk_error err;
    if (bk_safetensors_open(ckpt2, &st, &err))
        fail_msg("%s", err.message);
    const char *names[] = {"term.testlin_unnamed.theta", "adam.m.term.testlin_unnamed.theta",
                           "adam.v.term.testlin_unnamed.theta"};
    for (int i = 0; i < 3; i++) {
        const bk_st_tensor *t = bk_safetensors_find(st, names[i]);
        if (!t)
            fail_msg("no tensor '%s' in the checkpoint", names[i]);
        assert_int_equal(t->ndim, 2);
        assert_int_equal(t->shape[0], 2); /* copies: per layer */
        assert_int_equal(t->shape[1], 4); /* one slope per head */
    }
    bk_safetensors_close(st);
    bk_lm lm;
    bk_adamw opt = {0};
    bk_train_state ts;
    if (bk_checkpoint_load(ckpt2, NULL, 0, &lm, &opt, &ts, &err))
        fail_msg("%s", err.message);
    for (int g = 0; g < opt.n_groups; g++)
        for (size_t i = 0; i < opt.groups[g].n; i++)
            if (opt.groups[g].param[i] != 0.25f + (float)g + 0.001f * (float)i ||
                opt.groups[g].v[i] != 2.0f + (float)g + 0.002f * (float)i)
                fail_msg("group %s [%zu] did not come back", opt.groups[g].name, i);
    bk_adamw_free(&opt);
    bk_lm_close(&lm);
}

static void set_step_negative(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(m, "step", cJSON_CreateNumber(-5));
    cJSON_ReplaceItemInObjectCaseSensitive(m, "adam_t", cJSON_CreateNumber(-5));
}
static void set_step_fraction(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(m, "step", cJSON_CreateNumber(2.5));
}
static void set_adam_t_other(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(m, "adam_t", cJSON_CreateNumber(7));
}
static void set_index_huge(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(m, "data_index", cJSON_CreateNumber(1e300));
}
static void set_tokens_string(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(m, "tokens", cJSON_CreateString("384"));
}
static void set_val_loss_negative(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(m, "val_loss", cJSON_CreateNumber(-1));
}
static void set_override_number(cJSON *m)
{
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(m, "overrides"), cJSON_CreateNumber(3));
}

static void metadata_numbers_are_validated(void **state)
{
    (void)state;
    const struct {
        meta_edit edit;
        const char *needle;
    } cases[] = {
        {set_step_negative, "checkpoint metadata 'step' is -5; expected an integer in [0, 9007199254740991]"},
        {set_step_fraction, "'step' is 2.5; expected an integer"},
        {set_adam_t_other, "'adam_t' is 7, expected the step count 3"},
        {set_index_huge, "'data_index' is 1.0000000000000001e+300; expected an integer in [0, "},
        {set_tokens_string, "checkpoint metadata has no number 'tokens'"},
        {set_val_loss_negative, "'val_loss' must be a finite non-negative number"},
        {set_override_number, "'overrides' entry 0 is not a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_checkpoint(ckpt);
        rewrite(ckpt, cases[i].edit, NULL);
        expect_refused(ckpt, cases[i].needle);
    }
}

/* model.wte stored as [dim, vocab] instead of [vocab, dim]: the same element count */
static void transpose_wte(bk_st_tensor *t, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, "model.wte") == 0) {
            int64_t a = t[i].shape[0];
            t[i].shape[0] = t[i].shape[1];
            t[i].shape[1] = a;
        }
}

static void another_shape_is_refused(void **state)
{
    (void)state;
    write_checkpoint(ckpt);
    rewrite(ckpt, NULL, transpose_wte);
    expect_refused(ckpt, "tensor 'model.wte' has shape [32, 256], the model expects [256, 32]");
}

static void flipped_byte_is_detected(void **state)
{
    (void)state;
    write_checkpoint(ckpt);
    /* one bit of the first value of model.wte */
    bk_safetensors *st = NULL;
    bk_error err;
    if (bk_safetensors_open(ckpt, &st, &err))
        fail_msg("%s", err.message);
    FILE *f = fopen(ckpt, "rb");
    assert_non_null(f);
    unsigned char len[8];
    assert_int_equal(fread(len, 1, 8, f), 8);
    fclose(f);
    uint64_t header = 0;
    for (int i = 0; i < 8; i++)
        header |= (uint64_t)len[i] << (8 * i);
    const float *base = bk_safetensors_at(st, 0)->data; /* the data section starts with tensor 0 */
    const bk_st_tensor *wte = bk_safetensors_find(st, "model.wte");
    assert_non_null(wte);
    long at = (long)(8 + header + (uint64_t)((const char *)wte->data - (const char *)base));
    bk_safetensors_close(st);
    f = fopen(ckpt, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, at, SEEK_SET), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, at, SEEK_SET), 0);
    fputc(c ^ 0x10, f);
    fclose(f);
    expect_refused(ckpt, "tensor 'model.wte' is corrupt: its data's xxh64 is ");
}

static void drop_one_checksum(cJSON *m)
{
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "tensors"), "model.wpe_none");
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "tensors"), "mix.token");
}

static void checksums_must_cover_every_tensor(void **state)
{
    (void)state;
    write_checkpoint(ckpt);
    rewrite(ckpt, drop_one_checksum, NULL);
    expect_refused(ckpt, "tensor 'mix.token' has no checksum in the metadata");
}

static void set_format_1(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(m, "format", cJSON_CreateNumber(1));
}

static void older_format_is_refused(void **state)
{
    (void)state;
    write_checkpoint(ckpt);
    rewrite(ckpt, set_format_1, NULL);
    expect_refused(ckpt, "checkpoint format 1; this biaskit reads format 2 only");
}

static const char *meta_string(const char *path, const char *key, char *out, size_t size)
{
    bk_safetensors *st = NULL;
    bk_error err;
    if (bk_safetensors_open(path, &st, &err))
        fail_msg("%s", err.message);
    cJSON *meta = cJSON_Parse(bk_safetensors_meta(st, "biaskit"));
    cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, key);
    assert_true(cJSON_IsString(v));
    snprintf(out, size, "%s", v->valuestring);
    cJSON_Delete(meta);
    bk_safetensors_close(st);
    return out;
}

/* resume, save, resume, save: the stored source name stays the experiment file's */
static void config_source_stays_the_same(void **state)
{
    (void)state;
    write_checkpoint(ckpt);
    char source[1024];
    assert_string_equal(meta_string(ckpt, "config_source", source, sizeof source), exp_path);
    for (int round = 0; round < 2; round++) {
        bk_lm lm;
        bk_adamw opt = {0};
        bk_train_state st;
        bk_error err;
        if (load(ckpt, &lm, &opt, &st, &err) || bk_checkpoint_save(ckpt, &lm, &opt, &st, &err))
            fail_msg("%s", err.message);
        bk_adamw_free(&opt);
        bk_lm_close(&lm);
        assert_string_equal(meta_string(ckpt, "config_source", source, sizeof source), exp_path);
    }
}

/* ------------------------------------------------------------------------- plugin records */

typedef struct warnings {
    int n;
    char last[BK_ERROR_MESSAGE_MAX];
} warnings;

static void collect(void *ctx, const char *message)
{
    warnings *w = ctx;
    w->n++;
    snprintf(w->last, sizeof w->last, "%s", message);
}

/* Loads with a warning collector, then strictly: the warning (if any) contains `needle`, and the
 * strict load fails with it. */
static void expect_plugin_change(const char *needle)
{
    warnings w = {0};
    bk_checkpoint_options o = {NULL, 0, 0, collect, &w};
    bk_lm lm;
    bk_train_state st;
    bk_error err;
    if (bk_checkpoint_load_ex(ckpt, &o, &lm, NULL, &st, &err))
        fail_msg("%s", err.message);
    bk_lm_close(&lm);
    assert_int_equal(w.n, 1);
    assert_message_has(w.last, ckpt);
    assert_message_has(w.last, needle);
    assert_message_has(w.last, "(--strict refuses)");
    o.strict = 1;
    assert_int_equal(bk_checkpoint_load_ex(ckpt, &o, &lm, NULL, &st, &err), BK_ERR_PLUGIN);
    assert_message_has(err.message, needle);
    assert_message_has(err.message, "refused (--strict)");
}

static void old_version(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(plugin_record(m, "testlin"), "version", cJSON_CreateString("0.0.0"));
}
static void other_descriptor(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(plugin_record(m, "kerple"), "descriptor",
                                           cJSON_CreateString("0123456789abcdef"));
}
static void other_file(cJSON *m)
{
    cJSON *r = plugin_record(m, "alibi");
    cJSON_ReplaceItemInObjectCaseSensitive(r, "file_xxh64", cJSON_CreateString("00000000000000ff"));
    cJSON_ReplaceItemInObjectCaseSensitive(r, "file", cJSON_CreateString("/old/biaskit_alibi.so"));
}
static void moved_file(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(plugin_record(m, "alibi"), "file",
                                           cJSON_CreateString("/elsewhere/biaskit_alibi.so"));
}

static void changed_plugins_warn_or_refuse(void **state)
{
    (void)state;
    /* unchanged: no warning */
    write_checkpoint(ckpt);
    warnings w = {0};
    bk_checkpoint_options o = {NULL, 0, 1, collect, &w};
    bk_lm lm;
    bk_train_state st;
    bk_error err;
    if (bk_checkpoint_load_ex(ckpt, &o, &lm, NULL, &st, &err))
        fail_msg("%s", err.message);
    bk_lm_close(&lm);
    assert_int_equal(w.n, 0);

    /* each record says what it was trained with */
    bk_safetensors *sf = NULL;
    if (bk_safetensors_open(ckpt, &sf, &err))
        fail_msg("%s", err.message);
    cJSON *meta = cJSON_Parse(bk_safetensors_meta(sf, "biaskit"));
    cJSON *r = plugin_record(meta, "testlin");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(r, "plugin")->valuestring, "testlin");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(r, "version")->valuestring, "0.0.1");
    assert_non_null(strstr(cJSON_GetObjectItemCaseSensitive(r, "file")->valuestring, "biaskit_testlin.so"));
    assert_int_equal(strlen(cJSON_GetObjectItemCaseSensitive(r, "descriptor")->valuestring), 16);
    assert_int_equal(strlen(cJSON_GetObjectItemCaseSensitive(r, "file_xxh64")->valuestring), 16);
    cJSON_Delete(meta);
    bk_safetensors_close(sf);

    rewrite(ckpt, old_version, NULL);
    expect_plugin_change("term 'testlin' (plugin testlin, ");
    expect_plugin_change("version 0.0.0 at save, 0.0.1 now");

    write_checkpoint(ckpt);
    rewrite(ckpt, other_descriptor, NULL);
    expect_plugin_change("term 'kerple' (plugin kerple, ");
    expect_plugin_change("its declarations (capabilities, flags, options) changed: descriptor checksum "
                         "0123456789abcdef at save, ");

    write_checkpoint(ckpt);
    rewrite(ckpt, other_file, NULL);
    expect_plugin_change("the plugin file's bytes changed: xxh64 00000000000000ff of /old/biaskit_alibi.so at save");

    /* the same bytes at another path: not a change */
    write_checkpoint(ckpt);
    rewrite(ckpt, moved_file, NULL);
    w.n = 0;
    if (bk_checkpoint_load_ex(ckpt, &o, &lm, NULL, &st, &err))
        fail_msg("%s", err.message);
    bk_lm_close(&lm);
    assert_int_equal(w.n, 0);
}

/* How long the checksums take: XXH64 over a 64 MiB buffer (printed; a checkpoint of that size is
 * hashed once on save and once on load). */
static void checksum_cost(void **state)
{
    (void)state;
    size_t n = (size_t)64 << 20;
    unsigned char *buf = malloc(n);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)(i * 2654435761u >> 13);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    volatile uint64_t h = bk_xxh64(buf, n, 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    (void)h;
    double s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    printf("xxh64: 64 MiB in %.1f ms (%.2f GB/s)\n", 1e3 * s, (double)n / s / 1e9);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plugin_parameters_are_named_tensors),
        cmocka_unit_test(parameters_without_names_are_stored_as_theta),
        cmocka_unit_test(metadata_numbers_are_validated),
        cmocka_unit_test(another_shape_is_refused),
        cmocka_unit_test(flipped_byte_is_detected),
        cmocka_unit_test(checksums_must_cover_every_tensor),
        cmocka_unit_test(older_format_is_refused),
        cmocka_unit_test(config_source_stays_the_same),
        cmocka_unit_test(changed_plugins_warn_or_refuse),
        cmocka_unit_test(checksum_cost),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
