/* A built-in plugin called directly, as the engine calls it, without building terms: dlopen() its shared
 * object from the build directory, read its descriptor, bind its options from experiment text ("exp.toml"
 * in messages, with file:line:column as the engine reports them) and create() it. For the tests of the
 * ABI 2 plugins (fire, window, logn, ssmax), whose hooks the tests call one by one; the geometry comes
 * from the experiment's [model] and [train] tables. Functions are static inline so each test uses what
 * it needs. */
#ifndef BK_PLUGIN_DIRECT_H
#define BK_PLUGIN_DIRECT_H

#include "test_util.h"

#include "config/experiment.h"
#include "plugin/services.h"

#include <biaskit/plugin.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef struct direct_plugin {
    void *handle;
    const biaskit_plugin *desc;
    bk_experiment exp;
    int have_exp;
    biaskit_config view;
    biaskit_geometry geo;
    void *inst;
} direct_plugin;

/* Loads biaskit_<name>.so and creates an instance from the first [[term]] of `text`. Returns the
 * plugin's (or the host's) code; the message is in pe. On failure nothing needs closing but the
 * fixture (direct_close). */
static inline int direct_open(direct_plugin *p, const char *name, const char *text, biaskit_error *pe)
{
    memset(p, 0, sizeof *p);
    memset(pe, 0, sizeof *pe);
    char path[1024];
    snprintf(path, sizeof path, "%s/biaskit_%s.so", BK_TEST_PLUGIN_DIR, name);
    p->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!p->handle)
        fail_msg("dlopen(%s): %s", path, dlerror());
    biaskit_entry_fn entry = (biaskit_entry_fn)(uintptr_t)dlsym(p->handle, BIASKIT_ENTRY_SYMBOL);
    if (!entry)
        fail_msg("%s: no %s", path, BIASKIT_ENTRY_SYMBOL);
    p->desc = entry(BIASKIT_ABI_VERSION);
    assert_non_null(p->desc);
    assert_int_equal(p->desc->abi_version, BIASKIT_ABI_VERSION);
    assert_int_equal(p->desc->struct_size, sizeof(biaskit_plugin));
    assert_string_equal(p->desc->name, name);
    bk_error err;
    int rc = bk_experiment_parse(text, "exp.toml", NULL, 0, &p->exp, &err);
    if (rc)
        fail_msg("experiment: %s\n%s", err.message, text);
    p->have_exp = 1;
    assert_true(p->exp.n_terms >= 1);
    const bk_term_config *t = &p->exp.terms[0];
    char label[96];
    snprintf(label, sizeof label, "[[term]] #1 (%s)", name);
    if ((rc = bk_config_view_init(&p->view, p->desc, t->table, t->pos, label, &err))) {
        size_t len = strlen(err.message);
        len = len < sizeof pe->message - 1 ? len : sizeof pe->message - 1;
        memcpy(pe->message, err.message, len);
        pe->message[len] = '\0';
        pe->code = rc;
        return rc;
    }
    p->geo = (biaskit_geometry){sizeof(biaskit_geometry),
                                (int32_t)p->exp.model.layers,
                                (int32_t)p->exp.model.heads,
                                (int32_t)p->exp.model.dim,
                                (int32_t)(p->exp.model.dim / p->exp.model.heads),
                                (int32_t)p->exp.model.vocab,
                                (int32_t)p->exp.train.length};
    rc = p->desc->create(bk_services(), &p->view, &p->geo, &p->inst, pe);
    if (rc == BIASKIT_OK)
        assert_non_null(p->inst);
    else
        p->inst = NULL;
    return rc;
}

/* direct_open that must succeed */
static inline void direct_open_ok(direct_plugin *p, const char *name, const char *text)
{
    biaskit_error pe;
    if (direct_open(p, name, text, &pe) != BIASKIT_OK)
        fail_msg("%s: %s\n  experiment:\n%s", name, pe.message, text);
}

static inline void direct_close(direct_plugin *p)
{
    if (p->inst)
        p->desc->destroy(p->inst);
    if (p->have_exp)
        bk_experiment_free(&p->exp);
    if (p->handle)
        dlclose(p->handle);
    memset(p, 0, sizeof *p);
}

/* create() fails with a message that contains needle1 (and needle2 unless NULL) */
static inline void direct_expect_error(const char *name, const char *text, const char *needle1, const char *needle2)
{
    direct_plugin p;
    biaskit_error pe;
    int rc = direct_open(&p, name, text, &pe);
    direct_close(&p);
    if (rc == BIASKIT_OK)
        fail_msg("%s: expected an error containing \"%s\" for:\n%s", name, needle1, text);
    assert_message_has(pe.message, needle1);
    if (needle2)
        assert_message_has(pe.message, needle2);
}

/* The context the engine hands to the ABI 2 hooks. */
static inline biaskit_context direct_context(const direct_plugin *p, int32_t length, int training)
{
    return (biaskit_context){sizeof(biaskit_context), -1, p->geo.n_layers, p->geo.n_heads, length,
                             p->geo.train_length, training};
}

#endif
