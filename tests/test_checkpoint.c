/* Checkpoints (train/checkpoint.h): plugin parameters stored as the plugin's named tensors (per layer
 * too), a checksum per tensor verified on load (skipped by no_verify), the metadata sealed by its own
 * checksum (any edit refused, no_verify or not), every metadata number validated and the step and data
 * cursor checked against the experiment, shapes compared (not only element counts), format 2 read with
 * a warning (strict refuses it) and format 1 refused, --set on a checkpoint judged by the role of each
 * key it changes, the experiment's source name kept as it was, and plugin records compared on load
 * (by term position): a changed plugin is a warning naming what changed, or with strict an error. Each
 * test edits a real checkpoint the way a bug, a damaged disk, a hand or a forger would. */
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
 * step 3: 3 x 8 windows of 32 tokens read (the default batch), so epoch 0, index 24, 768 tokens. */
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
    bk_train_state st = {3, 0, 24, 3 * 8 * 32, 4.5};
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
 * `edit_meta`. `seal`: 1 recomputes the metadata's checksum (what a buggy writer or a forger leaves),
 * 0 keeps the old one (an edit by hand or a damaged header), -1 drops it (format 2 had none). */
typedef void (*meta_edit)(cJSON *meta);
typedef void (*tensor_edit)(bk_st_tensor *t, int n);
static void rewrite_sealed(const char *path, meta_edit edit_meta, tensor_edit edit_tensor, int seal)
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
    char old_seal[64] = "", new_seal[17];
    const char *stored = bk_safetensors_meta(st, "biaskit_xxh64");
    if (stored)
        snprintf(old_seal, sizeof old_seal, "%s", stored);
    bk_checkpoint_seal(json, new_seal);
    bk_st_meta m[3] = {{"format", "pt"}, {"biaskit", json}, {"biaskit_xxh64", seal > 0 ? new_seal : old_seal}};
    if (bk_safetensors_write(path, t, n, m, seal < 0 ? 2 : 3, &err))
        fail_msg("%s", err.message);
    free(json);
    cJSON_Delete(meta);
    free(t);
    bk_safetensors_close(st);
}

static void rewrite(const char *path, meta_edit edit_meta, tensor_edit edit_tensor)
{
    rewrite_sealed(path, edit_meta, edit_tensor, 1);
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
    assert_int_equal(ts.data_index, 24);
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
static void set_format_4(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(m, "format", cJSON_CreateNumber(4));
}
static void set_format_2(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(m, "format", cJSON_CreateNumber(2));
}

static void older_format_is_refused(void **state)
{
    (void)state;
    write_checkpoint(ckpt);
    rewrite(ckpt, set_format_1, NULL);
    expect_refused(ckpt, "checkpoint format 1; this biaskit reads formats 2 and 3");
    write_checkpoint(ckpt);
    rewrite(ckpt, set_format_4, NULL);
    expect_refused(ckpt, "checkpoint format 4; this biaskit reads formats 2 and 3");
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
    bk_checkpoint_options o = {NULL, 0, 0, collect, &w, 0};
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
    bk_checkpoint_options o = {NULL, 0, 1, collect, &w, 0};
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

/* ------------------------------------------------------------------------- the metadata's seal */

static void edit_config(cJSON *m)
{
    cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "config");
    char *text = malloc(strlen(c->valuestring) + 16);
    assert_non_null(text);
    strcpy(text, c->valuestring);
    char *heads = strstr(text, "heads = 4");
    assert_non_null(heads);
    heads[8] = '2'; /* heads = 2: the same tensors, another model */
    cJSON_ReplaceItemInObjectCaseSensitive(m, "config", cJSON_CreateString(text));
    free(text);
}
static void add_override(cJSON *m)
{
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(m, "overrides"), cJSON_CreateString("model.heads=2"));
}
static void set_step_2(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(m, "step", cJSON_CreateNumber(2));
    cJSON_ReplaceItemInObjectCaseSensitive(m, "adam_t", cJSON_CreateNumber(2));
}
static void set_epoch_1(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(m, "data_epoch", cJSON_CreateNumber(1));
}
static void set_record_version(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(plugin_record(m, "alibi"), "version", cJSON_CreateString("9.9.9"));
}
static void set_tensor_sum(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "tensors"), "model.wte",
                                           cJSON_CreateString("0000000000000000"));
}
static void set_dir(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(m, "config_dir", cJSON_CreateString("/elsewhere"));
}
static void set_val_loss(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(m, "val_loss", cJSON_CreateNumber(0.5));
}

/* Loads with options `o` (opt: resume) and expects BK_OK; returns the state. */
static bk_train_state expect_loads(const char *path, const bk_checkpoint_options *o, int resume)
{
    bk_lm lm;
    bk_adamw opt = {0};
    bk_train_state st;
    bk_error err;
    if (bk_checkpoint_load_ex(path, o, &lm, resume ? &opt : NULL, &st, &err))
        fail_msg("%s", err.message);
    bk_adamw_free(&opt);
    bk_lm_close(&lm);
    return st;
}

/* Loading with `o` must fail with `code` and a message containing both needles. */
static void expect_refused_with(const char *path, const bk_checkpoint_options *o, int resume, int code,
                                const char *needle1, const char *needle2)
{
    bk_lm lm;
    bk_adamw opt = {0};
    bk_train_state st;
    bk_error err;
    bk_error_clear(&err);
    int rc = bk_checkpoint_load_ex(path, o, &lm, resume ? &opt : NULL, &st, &err);
    bk_adamw_free(&opt);
    if (rc == BK_OK) {
        bk_lm_close(&lm);
        fail_msg("the checkpoint was accepted; expected an error containing \"%s\"", needle1);
    }
    assert_int_equal(rc, code);
    assert_message_has(err.message, needle1);
    if (needle2)
        assert_message_has(err.message, needle2);
}

/* Every field of the metadata edited by hand (the seal left as it was) is refused, strict or not,
 * no_verify or not, naming the file and what the checksum covers. */
static void edited_metadata_is_refused(void **state)
{
    (void)state;
    const meta_edit edits[] = {edit_config, add_override, set_step_2, set_epoch_1, set_record_version,
                               set_tensor_sum, set_dir, set_val_loss};
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        write_checkpoint(ckpt);
        rewrite_sealed(ckpt, edits[i], NULL, 0);
        for (int mode = 0; mode < 3; mode++) {
            bk_checkpoint_options o = {NULL, 0, mode == 1, NULL, NULL, mode == 2};
            expect_refused_with(ckpt, &o, i % 2, BK_ERR_PARSE, "the checkpoint's metadata does not match its checksum",
                                "(experiment text, overrides, step, data cursor, plugin records and tensor checksums)");
            expect_refused_with(ckpt, &o, i % 2, BK_ERR_PARSE, ckpt, NULL);
        }
    }
    /* the same edits with the seal recomputed pass the seal (what follows checks the values) */
    write_checkpoint(ckpt);
    rewrite(ckpt, set_val_loss, NULL);
    assert_true(expect_loads(ckpt, NULL, 1).val_loss == 0.5);
    /* a format 3 checkpoint without its seal */
    write_checkpoint(ckpt);
    rewrite_sealed(ckpt, NULL, NULL, -1);
    expect_refused(ckpt, "checkpoint format 3 without its metadata checksum 'biaskit_xxh64'");
}

/* The seal is the XXH64 of the metadata text as stored: the text a save wrote hashes to its seal. */
static void seal_is_the_text_checksum(void **state)
{
    (void)state;
    write_checkpoint(ckpt);
    bk_safetensors *st = NULL;
    bk_error err;
    if (bk_safetensors_open(ckpt, &st, &err))
        fail_msg("%s", err.message);
    const char *json = bk_safetensors_meta(st, "biaskit"), *seal = bk_safetensors_meta(st, "biaskit_xxh64");
    assert_non_null(json);
    assert_non_null(seal);
    char want[17];
    snprintf(want, sizeof want, "%016llx", (unsigned long long)bk_xxh64(json, strlen(json), 0));
    assert_string_equal(seal, want);
    char again[17];
    bk_checkpoint_seal(json, again);
    assert_string_equal(again, want);
    cJSON *meta = cJSON_Parse(json);
    assert_int_equal((int)cJSON_GetObjectItemCaseSensitive(meta, "format")->valuedouble, BK_CHECKPOINT_FORMAT);
    cJSON_Delete(meta);
    bk_safetensors_close(st);
}

/* no_verify skips hashing the tensors' data, nothing else: a flipped data bit then loads, but a
 * checksum missing from the metadata (or an edited metadata, above) is still refused. */
static void flip_first_value(bk_st_tensor *t, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, "model.wte") == 0) {
            static float copy[256 * 32];
            size_t count = (size_t)(t[i].shape[0] * t[i].shape[1]);
            assert_true(count <= sizeof copy / sizeof copy[0]);
            memcpy(copy, t[i].data, count * sizeof(float));
            copy[0] = -copy[0];
            t[i].data = copy;
        }
}
static void no_verify_skips_only_the_tensor_hashes(void **state)
{
    (void)state;
    write_checkpoint(ckpt);
    /* the data changed, the recorded checksums kept (the metadata sealed as written) */
    rewrite_sealed(ckpt, NULL, flip_first_value, 0);
    bk_checkpoint_options verify = {NULL, 0, 0, NULL, NULL, 0}, quick = {NULL, 0, 0, NULL, NULL, 1};
    expect_refused_with(ckpt, &verify, 0, BK_ERR_PARSE, "tensor 'model.wte' is corrupt", NULL);
    expect_refused_with(ckpt, &verify, 1, BK_ERR_PARSE, "tensor 'model.wte' is corrupt", NULL);
    assert_int_equal(expect_loads(ckpt, &quick, 0).step, 3);
    assert_int_equal(expect_loads(ckpt, &quick, 1).step, 3);
    write_checkpoint(ckpt);
    rewrite(ckpt, drop_one_checksum, NULL);
    expect_refused_with(ckpt, &quick, 0, BK_ERR_PARSE, "tensor 'mix.token' has no checksum in the metadata", NULL);
}

/* ------------------------------------------------------------------- step and data cursor */

static int64_t cursor_epoch, cursor_index, cursor_step = 3, cursor_tokens = 768;
static cJSON *exact(int64_t v) /* cJSON would print 9007199254740991 as ...990 */
{
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)v);
    return cJSON_CreateRaw(text);
}
static void set_cursor(cJSON *m)
{
    cJSON_ReplaceItemInObjectCaseSensitive(m, "data_epoch", exact(cursor_epoch));
    cJSON_ReplaceItemInObjectCaseSensitive(m, "data_index", exact(cursor_index));
    cJSON_ReplaceItemInObjectCaseSensitive(m, "step", exact(cursor_step));
    cJSON_ReplaceItemInObjectCaseSensitive(m, "adam_t", exact(cursor_step));
    cJSON_ReplaceItemInObjectCaseSensitive(m, "tokens", exact(cursor_tokens));
}

/* Sealed (a forger's, or a writer's bug): the step past [train] steps, tokens the steps do not make,
 * a data cursor that batch x accumulate windows per step cannot reach are refused; every cursor the
 * loader can reach loads. */
static void step_and_cursor_are_checked(void **state)
{
    (void)state;
    const struct {
        int64_t step, tokens, epoch, index;
        const char *needle; /* NULL: loads */
    } cases[] = {
        {3, 768, 0, 24, NULL},
        {3, 768, 1, 12, NULL},  /* 12 windows an epoch: 12 + 12 */
        {3, 768, 2, 8, NULL},   /* 8 an epoch */
        {3, 768, 5, 4, NULL},   /* 4 an epoch */
        {3, 768, 23, 1, NULL},  /* 1 an epoch */
        {0, 0, 0, 0, NULL},
        {1000, 1000 * 8 * 32, 0, 8000, NULL},
        {1001, 1001 * 8 * 32, 0, 8008, "checkpoint metadata 'step' is 1001, but its experiment trains [train] steps = 1000"},
        {9007199254740991, 9007199254740991, 0, 1,
         "checkpoint metadata 'step' is 9007199254740991, but its experiment trains [train] steps = 1000"},
        {3, 767, 0, 24, "checkpoint metadata 'tokens' is 767; 3 steps of 8 x 32 tokens x 1 accumulated make 768"},
        {3, 768, 0, 23, "checkpoint metadata 'data_epoch' 0, 'data_index' 23: not where 3 steps of 8 x 1 windows leave the data"},
        {3, 768, 1, 13, "'data_epoch' 1, 'data_index' 13: not where"},
        {3, 768, 3, 4, "'data_epoch' 3, 'data_index' 4: not where"},
        {3, 768, 24, 0, "'data_epoch' 24, 'data_index' 0: not where"},
        {3, 768, 0, 25, "'data_epoch' 0, 'data_index' 25: not where"},
        {0, 0, 1, 0, "'data_epoch' 1, 'data_index' 0: not where 0 steps"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cursor_step = cases[i].step, cursor_tokens = cases[i].tokens;
        cursor_epoch = cases[i].epoch, cursor_index = cases[i].index;
        write_checkpoint(ckpt);
        rewrite(ckpt, set_cursor, NULL);
        if (cases[i].needle)
            expect_refused(ckpt, cases[i].needle);
        else
            assert_int_equal(expect_loads(ckpt, NULL, 1).data_index, cases[i].index);
    }
}

/* ------------------------------------------------------------------------------- format 2 */

static void set_counts_checked_number(cJSON *m)
{
    cJSON_AddNumberToObject(m, "counts_checked", 0);
}

/* Format 2 (before the seal): loads with a warning (the cursor unchecked: a run then could change its
 * batch on a resume), strict refuses it naming both formats; its step is still checked. Resumed, its
 * counts go on as they are, marked unchecked when this experiment's steps do not make them. */
static void format_2_loads_with_a_warning(void **state)
{
    (void)state;
    cursor_step = 3, cursor_tokens = 5, cursor_epoch = 0, cursor_index = 5;
    write_checkpoint(ckpt);
    rewrite(ckpt, set_cursor, NULL);
    rewrite_sealed(ckpt, set_format_2, NULL, -1);
    warnings w = {0};
    bk_checkpoint_options o = {NULL, 0, 0, collect, &w, 0};
    assert_int_equal(expect_loads(ckpt, &o, 1).tokens, 5);
    assert_int_equal(w.n, 1);
    assert_message_has(w.last, ckpt);
    assert_message_has(w.last, "is format 2, written before checkpoints carried a checksum of their metadata (this "
                               "biaskit writes format 3)");
    assert_message_has(w.last, "(--strict refuses it; a resumed run writes format 3)");
    o.strict = 1;
    expect_refused_with(ckpt, &o, 0, BK_ERR_PARSE, "is format 2", "refused (--strict)");
    /* resumed and saved: format 3, sealed, loads without a warning */
    bk_lm lm;
    bk_adamw opt = {0};
    bk_train_state st;
    bk_error err;
    w.n = 0;
    o.strict = 0;
    if (bk_checkpoint_load_ex(ckpt, &o, &lm, &opt, &st, &err))
        fail_msg("%s", err.message);
    /* its counts are not what this experiment's steps make (its batch changed on a resume, say): kept,
     * and marked unchecked, so that the run goes on */
    char ckpt3[600];
    snprintf(ckpt3, sizeof ckpt3, "%s/inherited.safetensors", dir);
    if (bk_checkpoint_save(ckpt3, &lm, &opt, &st, &err))
        fail_msg("%s", err.message);
    st.tokens = 768, st.data_index = 24; /* as a run of this experiment leaves them */
    if (bk_checkpoint_save(ckpt, &lm, &opt, &st, &err))
        fail_msg("%s", err.message);
    bk_adamw_free(&opt);
    bk_lm_close(&lm);
    w.n = 0;
    o.strict = 1;
    assert_int_equal(expect_loads(ckpt3, &o, 1).tokens, 5);
    expect_loads(ckpt, &o, 0);
    assert_int_equal(w.n, 0);
    bk_safetensors *sf = NULL;
    if (bk_safetensors_open(ckpt3, &sf, &err))
        fail_msg("%s", err.message);
    cJSON *meta = cJSON_Parse(bk_safetensors_meta(sf, "biaskit"));
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(meta, "counts_checked")));
    cJSON_Delete(meta);
    bk_safetensors_close(sf);
    if (bk_safetensors_open(ckpt, &sf, &err))
        fail_msg("%s", err.message);
    meta = cJSON_Parse(bk_safetensors_meta(sf, "biaskit"));
    assert_null(cJSON_GetObjectItemCaseSensitive(meta, "counts_checked")); /* a run's own counts: checked */
    cJSON_Delete(meta);
    bk_safetensors_close(sf);
    write_checkpoint(ckpt);
    rewrite(ckpt, set_counts_checked_number, NULL);
    expect_refused(ckpt, "checkpoint metadata 'counts_checked' must be true or false");
    /* the step is checked in format 2 too */
    cursor_step = 1001, cursor_tokens = 0, cursor_index = 0;
    write_checkpoint(ckpt);
    rewrite(ckpt, set_cursor, NULL);
    rewrite_sealed(ckpt, set_format_2, NULL, -1);
    o.strict = 0;
    expect_refused_with(ckpt, &o, 0, BK_ERR_PARSE, "'step' is 1001, but its experiment trains [train] steps = 1000",
                        NULL);
}

/* ------------------------------------------------------------------- --set on a checkpoint */

/* Each --set is judged by what it changes: shape and function never, the facts of the training never,
 * the rest of a training on resume only, [run] and [data] always; a plugin's option is a warning (strict:
 * an error); a key set to its own value is no change. */
static void set_on_a_checkpoint(void **state)
{
    (void)state;
    write_checkpoint(ckpt);
    const struct {
        const char *set;
        int resume;
        const char *needle; /* NULL: loads */
    } cases[] = {
        {"model.heads=8", 0, "--set model.heads=8: [model] heads is 4 in checkpoint '"},
        {"model.heads=8", 1, "would change the model's shape or function"},
        {"model.layers=3", 1, "--set model.layers=3: [model] layers is 2"},
        {"model.vocab=300", 0, "--set model.vocab=300: [model] vocab is 256"},
        {"attention.learn_weights=false", 0, "--set attention.learn_weights=false: [attention] learn_weights is true"},
        {"term.2.plugin=kerple", 0, "--set term.2.plugin=kerple: [[term]] #3 plugin is \"alibi\""},
        {"term.0.per_layer=false", 1, "--set term.0.per_layer=false: [[term]] #1 per_layer is true"},
        {"term.1.weight=2", 0, "--set term.1.weight=2: [[term]] #2 weight is not set"},
        {"term.2.stream=\"segment\"", 0, "[[term]] #3 stream is not set"},
        {"term.0.name=\"x\"", 0, "[[term]] #1 name is not set"},
        {"train.length=64", 0, "--set train.length=64: [train] length is 32 in checkpoint '"},
        {"train.length=64", 1, "a fact of how its model was trained"},
        {"train.batch=4", 1, "--set train.batch=4: [train] batch is 8"},
        {"train.accumulate=2", 1, "--set train.accumulate=2: [train] accumulate is 1"},
        {"train.seed=7", 1, "--set train.seed=7: [train] seed is 1234"},
        {"train.steps=2000", 0, "--set train.steps=2000: [train] steps is 1000 in checkpoint '"},
        {"train.lr=0.01", 0, "eval, bias and erf do not train"},
        {"train.steps=2", 1, "is at step 3; [train] steps must be at least that to continue it"},
        {"train.steps=2000", 1, NULL},
        {"train.steps=3", 1, NULL},
        {"train.lr=0.01", 1, NULL},
        {"train.eval_every=5", 1, NULL},
        {"run.threads=1", 0, NULL},
        {"run.device=cpu", 1, NULL},
        {"data.val_fraction=0.5", 0, NULL},
        {"model.heads=4", 0, NULL},      /* its own value */
        {"train.length=32", 0, NULL},    /* its own value */
        {"term.2.plugin=\"alibi\"", 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *sets[1] = {cases[i].set};
        bk_checkpoint_options o = {sets, 1, 0, NULL, NULL, 0};
        if (cases[i].needle) {
            expect_refused_with(ckpt, &o, cases[i].resume, BK_ERR_CONFIG, cases[i].needle, NULL);
            expect_refused_with(ckpt, &o, cases[i].resume, BK_ERR_CONFIG, ckpt, NULL);
        } else {
            expect_loads(ckpt, &o, cases[i].resume);
        }
    }
    /* a --set that changes more keys than are judged one by one is refused, not half judged */
    char many[2048];
    size_t used = (size_t)snprintf(many, sizeof many, "term.2={plugin=\"alibi\"");
    for (int k = 0; k < 70; k++)
        used += (size_t)snprintf(many + used, sizeof many - used, ", o%d=%d", k, k);
    snprintf(many + used, sizeof many - used, "}");
    const char *all_at_once[1] = {many};
    bk_checkpoint_options om = {all_at_once, 1, 0, NULL, NULL, 0};
    expect_refused_with(ckpt, &om, 1, BK_ERR_CONFIG, "it changes 70 keys of checkpoint '", "give them as separate --set");

    /* the later of two --set is judged against the earlier */
    const char *two[2] = {"train.steps=2000", "train.steps=2"};
    bk_checkpoint_options o2 = {two, 2, 0, NULL, NULL, 0};
    expect_refused_with(ckpt, &o2, 1, BK_ERR_CONFIG, "--set train.steps=2: checkpoint '", NULL);

    /* a plugin's option: a warning naming it, or refused when strict; at eval and on resume */
    const char *opt_set[1] = {"term.2.slope_scale=0.5"};
    for (int resume = 0; resume < 2; resume++) {
        warnings w = {0};
        bk_checkpoint_options o = {opt_set, 1, 0, collect, &w, 0};
        expect_loads(ckpt, &o, resume);
        assert_int_equal(w.n, 1);
        assert_message_has(w.last, ckpt);
        assert_message_has(w.last, "--set term.2.slope_scale=0.5 changes [[term]] #3 (alibi) option 'slope_scale' "
                                   "(not set in the checkpoint, now 0.5)");
        assert_message_has(w.last, "(--strict refuses)");
        o.strict = 1;
        expect_refused_with(ckpt, &o, resume, BK_ERR_CONFIG, "option 'slope_scale'", "refused (--strict)");
    }
}

/* A plugin record is the record of the term at its position: a term whose plugin is another one (a
 * path that now holds another plugin) names both, never "no record". */
static void set_record_other_plugin(cJSON *m)
{
    cJSON *r = plugin_record(m, "alibi");
    cJSON_ReplaceItemInObjectCaseSensitive(r, "plugin", cJSON_CreateString("rope"));
    cJSON_ReplaceItemInObjectCaseSensitive(r, "term", cJSON_CreateString("rope"));
}
static void drop_last_record(cJSON *m)
{
    cJSON_DeleteItemFromArray(cJSON_GetObjectItemCaseSensitive(m, "plugins"), 2);
}
static void records_are_matched_by_position(void **state)
{
    (void)state;
    write_checkpoint(ckpt);
    rewrite(ckpt, set_record_other_plugin, NULL);
    expect_plugin_change("term 'alibi' (plugin alibi, ");
    expect_plugin_change("[[term]] #3 was trained with plugin 'rope' (term 'rope'), now plugin 'alibi'");
    write_checkpoint(ckpt);
    rewrite(ckpt, drop_last_record, NULL);
    expect_plugin_change("the checkpoint has no record of the plugin this term was trained with (it records 2 terms)");
}

/* A FIFO is refused by name without blocking (util/file.h); so is a directory. */
static void not_a_regular_file(void **state)
{
    (void)state;
    char fifo[600];
    snprintf(fifo, sizeof fifo, "%s/fifo.safetensors", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(20); /* a read that blocks fails the test instead of hanging it */
    expect_refused(fifo, "is a FIFO");
    assert_int_equal(bk_checkpoint_is_file(fifo), 1); /* by its name: the load then refuses it */
    char bare[600];
    snprintf(bare, sizeof bare, "%s/fifo", dir);
    assert_int_equal(mkfifo(bare, 0600), 0);
    assert_int_equal(bk_checkpoint_is_file(bare), 0); /* never opened for reading */
    expect_refused(dir, "is a directory");
    alarm(0);
    unlink(fifo), unlink(bare);
}

/* How long the checksums take: XXH64 over a 64 MiB buffer (printed; a checkpoint of that size is
 * hashed once on save and once on load). */
/* ------------------------------------------------- weights per head and parameter groups */

/* Kernel mixing with weights learned per head (KERPLE, testgroups) beside a fixed weight (ALiBi), and
 * testgroups' parameter groups (its declaration for a: lr x 0.5, decay 0; b set per tensor here). */
static const char groups_experiment[] =
    "[model]\nlayers = 2\nheads = 4\ndim = 32\n"
    "[train]\nlength = 16\nbatch = 2\nsteps = 10\nwarmup = 1\nlr = 0.01\n"
    "[attention]\nmixing = \"kernel\"\nlearn_weights = \"per_head\"\n"
    "[[term]]\nplugin = \"kerple\"\n"
    "[[term]]\nplugin = \"testgroups\"\nper_layer = true\nlr_scale.b = 2\nweight_decay.b = 0.05\n"
    "[[term]]\nplugin = \"alibi\"\nlearn_weight = false\n";

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Saved and loaded: every tensor and moment as written (mix.token as (2 terms, 4 heads)), the terms'
 * head weights recomputed from the loaded parameters, the groups recorded in the metadata. */
static void per_head_weights_and_groups_round_trip(void **state)
{
    (void)state;
    char path[600], file[600];
    snprintf(path, sizeof path, "%s/groups.toml", dir);
    snprintf(file, sizeof file, "%s/groups.safetensors", dir);
    write_text(path, groups_experiment);
    write_checkpoint_of(path, file);
    bk_lm lm;
    bk_adamw opt = {0};
    bk_train_state st;
    bk_error err;
    if (load(file, &lm, &opt, &st, &err))
        fail_msg("%s", err.message);
    for (int g = 0; g < opt.n_groups; g++)
        for (size_t i = 0; i < opt.groups[g].n; i++)
            if (opt.groups[g].param[i] != 0.25f + (float)g + 0.001f * (float)i ||
                opt.groups[g].m[i] != -(float)g - 0.001f * (float)i ||
                opt.groups[g].v[i] != 2.0f + (float)g + 0.002f * (float)i)
                fail_msg("group %s value %zu not restored", opt.groups[g].name, i);
    /* the weights follow the loaded parameters: mix.token = [kerple h0..h3, testgroups h0..h3] */
    const bk_bias *b = &lm.bias;
    assert_int_equal(b->n_mix[BK_STREAM_TOKEN], 8);
    for (int h = 0; h < 4; h++) {
        const double ak = b->mix_params[BK_STREAM_TOKEN][h], at = b->mix_params[BK_STREAM_TOKEN][4 + h];
        const double r = lm.terms.terms[1].head_weights[h] / lm.terms.terms[0].head_weights[h];
        assert_float_equal(r, exp(at - ak), 1e-9 * exp(at - ak));
    }
    assert_int_equal(lm.terms.terms[1].n_groups, 2);
    bk_adamw_free(&opt);
    bk_lm_close(&lm);

    bk_safetensors *sf = NULL;
    if (bk_safetensors_open(file, &sf, &err))
        fail_msg("%s", err.message);
    const bk_st_tensor *mix = bk_safetensors_find(sf, "mix.token");
    assert_non_null(mix);
    assert_int_equal(mix->ndim, 2);
    assert_int_equal(mix->shape[0], 2);
    assert_int_equal(mix->shape[1], 4);
    cJSON *meta = cJSON_Parse(bk_safetensors_meta(sf, "biaskit"));
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(meta, "param_groups");
    assert_int_equal(cJSON_GetArraySize(groups), 2); /* a and b; kerple's trains at lr x 1, the default */
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(groups, "term.testgroups.a");
    const cJSON *bb = cJSON_GetObjectItemCaseSensitive(groups, "term.testgroups.b");
    assert_true(cJSON_GetObjectItemCaseSensitive(a, "lr_scale")->valuedouble == 0.5);
    assert_true(cJSON_GetObjectItemCaseSensitive(a, "weight_decay")->valuedouble == 0.0);
    assert_true(cJSON_GetObjectItemCaseSensitive(bb, "lr_scale")->valuedouble == 2.0);
    assert_true(cJSON_GetObjectItemCaseSensitive(bb, "weight_decay")->valuedouble == 0.05);
    cJSON_Delete(meta);
    bk_safetensors_close(sf);
}

/* A fixed batch of B x T tokens from a seed. */
static void fixed_batch(int32_t *in, int32_t *tg, int n)
{
    for (int i = 0; i < n; i++) {
        in[i] = (int32_t)((i * 37 + 11) % 97);
        tg[i] = (int32_t)((i * 53 + 5) % 97);
    }
}

static void steps(bk_lm *lm, bk_adamw *opt, int from, int to)
{
    enum { B = 2, T = 16 };
    int32_t in[B * T], tg[B * T];
    fixed_batch(in, tg, B * T);
    bk_error err;
    if (bk_bias_forward(&lm->bias, T, &err))
        fail_msg("%s", err.message);
    for (int s = from; s < to; s++) {
        double lr = bk_lr_schedule(s, 10, 1, 0.01, 0.1);
        if (bk_lm_zero_grad(lm, &err) || bk_gpt_forward(&lm->gpt, in, tg, B, T, 1, &err) ||
            bk_gpt_backward(&lm->gpt, in, tg, 1.0f, &err) || bk_lm_gradients_ready(lm, &err) ||
            bk_adamw_step(opt, lr, 0.9, 0.95, 1e-8, 0.1, &err) || bk_lm_after_step(lm, T, &err))
            fail_msg("step %d: %s", s, err.message);
    }
}

/* Four steps straight, and two steps, a checkpoint, a resume and two more, end on the same bits: the
 * weights per head, their AdamW moments and the parameter groups' rates come back exactly. */
static void resume_with_groups_is_exact(void **state)
{
    (void)state;
    char path[600], file[600];
    snprintf(path, sizeof path, "%s/groups.toml", dir);
    snprintf(file, sizeof file, "%s/groups_resume.safetensors", dir);
    write_text(path, groups_experiment);
    bk_lm a, b;
    bk_adamw oa = {0}, ob = {0};
    bk_error err;
    if (bk_lm_open_file(&a, path, NULL, 0, &err) || bk_lm_register(&a, &oa, &err))
        fail_msg("%s", err.message);
    steps(&a, &oa, 0, 4);
    if (bk_lm_open_file(&b, path, NULL, 0, &err) || bk_lm_register(&b, &ob, &err))
        fail_msg("%s", err.message);
    steps(&b, &ob, 0, 2);
    bk_train_state st = {2, 0, 4, 2 * 2 * 16, NAN};
    if (bk_checkpoint_save(file, &b, &ob, &st, &err))
        fail_msg("%s", err.message);
    bk_adamw_free(&ob);
    bk_lm_close(&b);
    if (load(file, &b, &ob, &st, &err))
        fail_msg("%s", err.message);
    steps(&b, &ob, 2, 4);
    assert_int_equal(oa.n_groups, ob.n_groups);
    for (int g = 0; g < oa.n_groups; g++) {
        assert_string_equal(oa.groups[g].name, ob.groups[g].name);
        if (memcmp(oa.groups[g].param, ob.groups[g].param, oa.groups[g].n * sizeof(float)) ||
            memcmp(oa.groups[g].m, ob.groups[g].m, oa.groups[g].n * sizeof(float)))
            fail_msg("group %s differs after the resume", oa.groups[g].name);
    }
    for (int h = 0; h < 4; h++)
        assert_true(a.terms.terms[1].head_weights[h] == b.terms.terms[1].head_weights[h]);
    bk_adamw_free(&oa), bk_adamw_free(&ob);
    bk_lm_close(&a), bk_lm_close(&b);
}

static void drop_param_groups(cJSON *m)
{
    cJSON_DeleteItemFromObjectCaseSensitive(m, "param_groups");
}

static void bad_param_group(cJSON *m)
{
    cJSON *g = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "param_groups"),
                                                "term.testgroups.a");
    cJSON_ReplaceItemInObjectCaseSensitive(g, "lr_scale", cJSON_CreateString("fast"));
}

/* On resume, a tensor whose rate or decay differs from the record is a warning naming both, or with
 * strict an error; eval does not compare (it does not train). A checkpoint without records trained
 * everything at lr x 1 with the engine's rule. */
static void changed_groups_warn_or_refuse(void **state)
{
    (void)state;
    char path[600], file[600];
    snprintf(path, sizeof path, "%s/groups.toml", dir);
    snprintf(file, sizeof file, "%s/groups_changed.safetensors", dir);
    write_text(path, groups_experiment);
    write_checkpoint_of(path, file);
    warnings w = {0};
    const char *set[] = {"term.1.lr_scale.b=1"};
    bk_checkpoint_options o = {set, 1, 0, collect, &w, 0};
    expect_loads(file, &o, 1);
    assert_int_equal(w.n, 1);
    assert_message_has(w.last, "tensor 'term.testgroups.b' trained with lr_scale 2 and weight_decay 0.05, now "
                               "lr_scale 1 and weight_decay 0.05 ([[term]] #2 lr_scale / weight_decay, or plugin "
                               "testgroups's param_group() declaration, changed)");
    assert_message_has(w.last, "(--strict refuses)");
    expect_refused_with(file, &o, 0, BK_ERR_CONFIG, "eval, bias and erf do not train", "a term's lr_scale");
    o.strict = 1;
    expect_refused_with(file, &o, 1, BK_ERR_CONFIG, "tensor 'term.testgroups.b' trained with lr_scale 2",
                        "refused (--strict)");
    /* eval with the stored settings: no warning */
    bk_checkpoint_options plain = {NULL, 0, 1, collect, &w, 0};
    w.n = 0;
    expect_loads(file, &plain, 0);
    expect_loads(file, &plain, 1);
    assert_int_equal(w.n, 0);
    /* no records: everything trained at lr x 1 with the engine's rule, which a and b now differ from */
    rewrite(file, drop_param_groups, NULL);
    plain.strict = 0;
    expect_loads(file, &plain, 1);
    assert_int_equal(w.n, 2);
    assert_message_has(w.last, "tensor 'term.testgroups.a' trained with lr_scale 1 and weight_decay the engine's rule, "
                               "now lr_scale 0.5 and weight_decay 0"); /* b warned first: offset order */
    write_checkpoint_of(path, file);
    rewrite(file, bad_param_group, NULL);
    expect_refused_with(file, &plain, 1, BK_ERR_PARSE, "checkpoint metadata 'param_groups' entry 'term.testgroups.a'",
                        NULL);
}

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
        cmocka_unit_test(edited_metadata_is_refused),
        cmocka_unit_test(seal_is_the_text_checksum),
        cmocka_unit_test(no_verify_skips_only_the_tensor_hashes),
        cmocka_unit_test(step_and_cursor_are_checked),
        cmocka_unit_test(format_2_loads_with_a_warning),
        cmocka_unit_test(set_on_a_checkpoint),
        cmocka_unit_test(records_are_matched_by_position),
        cmocka_unit_test(not_a_regular_file),
        cmocka_unit_test(per_head_weights_and_groups_round_trip),
        cmocka_unit_test(resume_with_groups_is_exact),
        cmocka_unit_test(changed_groups_warn_or_refuse),
        cmocka_unit_test(checksum_cost),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
