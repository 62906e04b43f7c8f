#include "bias/terms.h"

#include "bias/mix.h"
#include "cuda/device.h"
#include "plugin/descriptor.h"
#include "util/rng.h"
#include "util/sigsafe.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The plugin call in progress (bk_plugin_call_enter), read by a fatal-signal handler: plain stores
 * of pointers to strings that live as long as the plugin is loaded, `active` written last. */
static struct {
    const char *volatile plugin, *volatile term, *volatile hook;
    volatile int layer;
    volatile int64_t step;
    volatile sig_atomic_t active;
} current_call;

void bk_plugin_call_enter(const bk_term *term, const char *hook, int layer, int64_t step)
{
    current_call.plugin = term->plugin->desc->name;
    current_call.term = term->label;
    current_call.hook = hook;
    current_call.layer = layer;
    current_call.step = step;
    current_call.active = 1;
    if (bk_plugin_stage_active()) { /* in a child of bk_plugin_isolate: the parent names the call if it dies */
        char where[96];
        bk_plugin_stage("plugin '%s' ('%s'), term '%s', in %s%s", term->plugin->desc->name, term->plugin->path,
                        term->label, hook, bk_term_where(layer, step, where, sizeof where));
    }
}

void bk_plugin_call_leave(void)
{
    current_call.active = 0;
    bk_plugin_stage(NULL);
}

size_t bk_plugin_call_describe(char *buf, size_t size)
{
    if (!size)
        return 0;
    buf[0] = '\0';
    if (!current_call.active)
        return 0;
    size_t at = bk_sigsafe_put(buf, size, 0, "plugin ");
    at = bk_sigsafe_put(buf, size, at, current_call.plugin);
    at = bk_sigsafe_put(buf, size, at, " (term '");
    at = bk_sigsafe_put(buf, size, at, current_call.term);
    at = bk_sigsafe_put(buf, size, at, "', ");
    at = bk_sigsafe_put(buf, size, at, current_call.hook);
    if (current_call.layer >= 0) {
        at = bk_sigsafe_put(buf, size, at, ", layer ");
        at = bk_sigsafe_put_int(buf, size, at, current_call.layer);
    }
    if (current_call.step > 0) {
        at = bk_sigsafe_put(buf, size, at, ", step ");
        at = bk_sigsafe_put_int(buf, size, at, current_call.step);
    }
    return bk_sigsafe_put(buf, size, at, ")");
}

const char *bk_term_where(int layer, int64_t step, char *buf, size_t size)
{
    if (layer >= 0 && step > 0)
        snprintf(buf, size, " at layer %d, step %lld", layer, (long long)step);
    else if (layer >= 0)
        snprintf(buf, size, " at layer %d", layer);
    else if (step > 0)
        snprintf(buf, size, " at step %lld", (long long)step);
    else if (size)
        buf[0] = '\0';
    return buf;
}

int bk_term_plugin_failed(bk_error *err, const bk_term *t, const char *hook, int layer, int64_t step,
                          const biaskit_error *pe)
{
    char where[64];
    return bk_fail(err, pe->code ? pe->code : BK_ERR_PLUGIN, "term '%s' (plugin %s, %s)%s: %s failed: %s", t->label,
                   t->plugin->desc->name, t->plugin->path, bk_term_where(layer, step, where, sizeof where), hook,
                   pe->message[0] ? pe->message : "no message given");
}

static int term_fail(bk_error *err, const bk_term *t, const biaskit_error *pe, const char *what)
{
    return bk_term_plugin_failed(err, t, what, -1, 0, pe);
}

biaskit_context bk_term_context_of(const biaskit_geometry *geo, int layer, int32_t length, int training)
{
    return (biaskit_context){
        .struct_size = sizeof(biaskit_context),
        .layer = layer,
        .n_layers = geo->n_layers,
        .n_heads = geo->n_heads,
        .length = length,
        .train_length = geo->train_length,
        .training = training,
    };
}

biaskit_context bk_term_context(const bk_term_set *set, int layer, int32_t length, int training)
{
    return bk_term_context_of(&set->geometry, layer, length, training);
}

/* The position of [[term]] key `key` (its value), else of the table. */
static bk_toml_pos key_position(const bk_term_config *cfg, const char *key)
{
    const bk_toml_node *v = bk_toml_get(cfg->table, key);
    return v ? bk_toml_position(v) : cfg->pos;
}

/* learn_weight and weight_per_head: the term's keys, else [attention] learn_weights; table terms only,
 * and one weight per head only for a weight that trains. */
static int resolve_weight_flags(bk_term *t, const bk_term_config *cfg, const bk_experiment *exp, const char *where,
                                bk_error *err)
{
    const biaskit_plugin *d = t->plugin->desc;
    static const char *const keys[] = {"learn_weight", "weight_per_head"};
    const int given[] = {cfg->learn_weight, cfg->weight_per_head};
    for (int k = 0; k < 2; k++)
        if (!(d->capabilities & BIASKIT_CAP_TABLE) && given[k] >= 0)
            return bk_fail_at(err, BK_ERR_CONFIG, key_position(cfg, keys[k]),
                              "%s: '%s' is about the weight that mixes a distance table; plugin '%s' has no table, "
                              "remove the key", where, keys[k], d->name);
    if (!(d->capabilities & BIASKIT_CAP_TABLE))
        return BK_OK;
    const int learn = (int)exp->attention.learn_weights;
    t->learn_weight = cfg->learn_weight >= 0 ? cfg->learn_weight : learn != BK_LEARN_NONE;
    t->weight_per_head = cfg->weight_per_head >= 0 ? cfg->weight_per_head
                                                   : t->learn_weight && learn == BK_LEARN_PER_HEAD;
    if (t->weight_per_head && !t->learn_weight)
        return bk_fail_at(err, BK_ERR_CONFIG, key_position(cfg, "weight_per_head"),
                          "%s: weight_per_head = true needs a weight that trains: with learn_weight = false every "
                          "head keeps the weight the file gives; set learn_weight = true or remove the key",
                          where);
    return BK_OK;
}

/* A group value of the plugin's param_group(): in [0, max], or (weight_decay) the default marker. */
static int check_declared(const bk_term *t, const char *tensor, const char *field, double v, double max,
                          int may_default, bk_error *err)
{
    if (isfinite(v) && ((v >= 0.0 && v <= max) || (may_default && v == BIASKIT_WEIGHT_DECAY_DEFAULT)))
        return BK_OK;
    return bk_fail(err, BK_ERR_PLUGIN,
                   "term '%s' (plugin %s, %s): param_group() gives tensor '%s' %s = %g; expected a number in "
                   "[0, %g]%s", t->label, t->plugin->desc->name, t->plugin->path, tensor, field, v, max,
                   may_default ? " or BIASKIT_WEIGHT_DECAY_DEFAULT (-1)" : "");
}

/* [[term]] `key` (lr_scale or weight_decay; read_term checked its values) applied to the groups: a
 * number to every tensor, a table to the tensors it names (each must exist). */
static int apply_group_key(bk_term *t, const char *key, const bk_toml_node *v, const char *where, bk_error *err)
{
    if (!v)
        return BK_OK;
    const int lr = strcmp(key, "lr_scale") == 0;
    if (bk_toml_type_of(v) != BK_TOML_TABLE) {
        for (int g = 0; g < t->n_groups; g++)
            *(lr ? &t->groups[g].lr_scale : &t->groups[g].weight_decay) = bk_toml_float(v);
        return BK_OK;
    }
    bk_toml_entry e;
    for (size_t i = 0; bk_toml_entry_at(v, i, &e) == 0; i++) {
        int g = 0;
        while (g < t->n_groups && strcmp(t->groups[g].name, e.key) != 0)
            g++;
        if (g == t->n_groups) {
            char names[512];
            size_t used = 0;
            names[0] = '\0';
            for (int k = 0; k < t->n_groups && used < sizeof names; k++)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", k ? ", " : "", t->groups[k].name);
            return bk_fail_at(err, BK_ERR_CONFIG, e.key_pos,
                              "%s: %s.%s: plugin '%s' has no tensor '%s'; its parameters are: %s%s", where, key, e.key,
                              t->plugin->desc->name, e.key, names,
                              t->n_groups == 1 && strcmp(t->groups[0].name, "theta") == 0
                                  ? " (one vector: the plugin names no tensors)" : "");
        }
        *(lr ? &t->groups[g].lr_scale : &t->groups[g].weight_decay) = bk_toml_float(e.value);
    }
    return BK_OK;
}

/* The parameter groups of a term (bk_term_group): one per named tensor (or one "theta"), each from the
 * plugin's param_group() when it has one, then the [[term]] keys lr_scale and weight_decay; kept in
 * offset order, as the tensors lie in theta (the optimizer's segments follow it). */
static int resolve_groups(bk_term *t, const bk_term_config *cfg, const char *where, bk_error *err)
{
    const biaskit_plugin *d = t->plugin->desc;
    if (t->n_params == 0) {
        static const char *const keys[] = {"lr_scale", "weight_decay"};
        const bk_toml_node *given[] = {cfg->lr_scale, cfg->weight_decay};
        for (int k = 0; k < 2; k++)
            if (given[k])
                return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(given[k]),
                                  "%s: '%s' sets how the optimizer trains the term's parameters; plugin '%s' has none "
                                  "here (param_count() is 0), remove the key", where, keys[k], d->name);
        return BK_OK;
    }
    biaskit_tensor_info *info = calloc(BK_TERM_MAX_TENSORS, sizeof *info);
    if (!info)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the tensors of term '%s'", t->label);
    const int32_t n = bk_term_tensors(t, info);
    t->n_groups = n > 0 ? n : 1;
    if (!(t->groups = calloc((size_t)t->n_groups, sizeof *t->groups))) {
        free(info);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the tensors of term '%s'", t->label);
    }
    int (*declare)(const void *, int32_t, biaskit_param_group *, biaskit_error *) = BK_DESCRIPTOR_FN(d, param_group);
    int rc = BK_OK;
    for (int g = 0; g < t->n_groups && !rc; g++) { /* g: the index param_tensors() gives (-1: the whole theta) */
        bk_term_group *grp = &t->groups[g];
        snprintf(grp->name, sizeof grp->name, "%s", n > 0 ? info[g].name : "theta");
        grp->offset = n > 0 ? info[g].offset : 0;
        grp->count = n > 0 ? (int64_t)info[g].rows * info[g].cols : t->n_params;
        biaskit_param_group pg = {sizeof pg, 1.0, BIASKIT_WEIGHT_DECAY_DEFAULT};
        if (declare) {
            biaskit_error pe = {0, ""};
            bk_plugin_call_enter(t, "param_group()", -1, 0);
            int prc = declare(t->instance, n > 0 ? g : -1, &pg, &pe);
            bk_plugin_call_leave();
            rc = prc != BIASKIT_OK ? term_fail(err, t, &pe, "param_group()") : BK_OK;
            if (!rc)
                rc = check_declared(t, grp->name, "lr_scale", pg.lr_scale, BK_LR_SCALE_MAX, 0, err);
            if (!rc)
                rc = check_declared(t, grp->name, "weight_decay", pg.weight_decay, BK_WEIGHT_DECAY_MAX, 1, err);
        }
        grp->lr_scale = pg.lr_scale;
        grp->weight_decay = pg.weight_decay;
    }
    free(info);
    if (rc)
        return rc;
    for (int g = 1; g < t->n_groups; g++)
        for (int k = g; k > 0 && t->groups[k - 1].offset > t->groups[k].offset; k--) {
            bk_term_group tmp = t->groups[k];
            t->groups[k] = t->groups[k - 1];
            t->groups[k - 1] = tmp;
        }
    if ((rc = apply_group_key(t, "lr_scale", cfg->lr_scale, where, err)))
        return rc;
    return apply_group_key(t, "weight_decay", cfg->weight_decay, where, err);
}

static int create_term(bk_term *t, const bk_term_config *cfg, const bk_experiment *exp, bk_registry *reg,
                       const biaskit_geometry *geo, bk_error *err)
{
    int rc = bk_registry_load(reg, cfg->plugin, &t->plugin, err);
    if (rc)
        return bk_error_prefix(err, "%s:%u:%u: [[term]] #%d: ", cfg->pos.source, cfg->pos.line, cfg->pos.column,
                               cfg->index);
    const biaskit_plugin *d = t->plugin->desc;
    t->index = cfg->index;
    t->n_heads = geo->n_heads;
    t->stream = cfg->stream;
    t->caps = d->capabilities;
    if (!cfg->stream_set && (d->capabilities & BIASKIT_CAP_SEGMENT))
        t->stream = BK_STREAM_SEGMENT; /* the segmenter's own embedding reads in-segment positions */
    t->weight = cfg->weight;
    snprintf(t->label, sizeof t->label, "%s", cfg->name ? cfg->name : d->name);

    char where[128];
    snprintf(where, sizeof where, "[[term]] #%d (%s)", cfg->index, d->name);
    if (!d->capabilities) /* the loader refused any bit it does not know (core/plugin/descriptor.c) */
        return bk_fail_at(err, BK_ERR_CONFIG, cfg->pos,
                          "%s: plugin '%s' has none of the capabilities this engine uses (table, segment, embed, "
                          "rotary)", where, d->name);
    if (!bk_term_in_attention(t) && cfg->per_layer == 1)
        return bk_fail_at(err, BK_ERR_CONFIG, cfg->pos,
                          "%s: per_layer = true needs a term that acts inside each layer's attention (a distance "
                          "table, a coordinate table, a logit scale, a content position or counted positions); plugin "
                          "'%s' acts once (at the input, on q and "
                          "k, or as a mask), so its parameters are shared",
                          where, d->name);
    if (cfg->layers && (d->capabilities & (BIASKIT_CAP_SEGMENT | BIASKIT_CAP_EMBED)))
        return bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(cfg->layers),
                          "%s: 'layers' chooses the layers a term acts in; plugin '%s' %s once, at the model's input, "
                          "for every layer (expected no 'layers' key)",
                          where, d->name, d->capabilities & BIASKIT_CAP_SEGMENT ? "segments the tokens" : "embeds");
    if (cfg->layers) {
        if (!(t->layers_on = malloc((size_t)exp->model.layers)))
            return bk_fail(err, BK_ERR_NOMEM, "out of memory for the layers of term '%s'", t->label);
        if ((rc = bk_term_layers(cfg, exp->model.layers, t->layers_on, err)))
            return rc;
    }
    if (!(d->capabilities & BIASKIT_CAP_TABLE) && !isnan(cfg->weight))
        return bk_fail_at(err, BK_ERR_CONFIG, cfg->pos,
                          "%s: 'weight' mixes distance tables; plugin '%s' has no table, remove the key", where,
                          d->name);
    if ((rc = resolve_weight_flags(t, cfg, exp, where, err)))
        return rc;
    const uint32_t query_caps =
        BIASKIT_CAP_COORDINATE | BIASKIT_CAP_MASK | BIASKIT_CAP_SCALE | BIASKIT_CAP_CONTENT | BIASKIT_CAP_COUNT;
    if ((d->capabilities & query_caps) && t->stream != BK_STREAM_TOKEN)
        return bk_fail_at(err, BK_ERR_CONFIG, cfg->pos,
                          "%s: plugin '%s' works on the token index (query i, key j, d = i - j); stream = \"segment\" "
                          "is for distance tables, remove the key",
                          where, d->name);
    if ((rc = bk_config_view_init(&t->view, d, cfg->table, cfg->pos, where, err)))
        return rc;

    biaskit_error pe = {0};
    bk_plugin_call_enter(t, "create()", -1, 0);
    rc = d->create(bk_services(), &t->view, geo, &t->instance, &pe);
    bk_plugin_call_leave();
    if (rc != BIASKIT_OK) {
        t->instance = NULL;
        return term_fail(err, t, &pe, "create()");
    }
    if ((rc = bk_plugin_check_created(t->plugin, t->instance, err)))
        return bk_error_prefix(err, "term '%s': ", t->label);
    t->per_layer = cfg->per_layer >= 0 ? cfg->per_layer : (d->flags & BIASKIT_FLAG_PER_LAYER) != 0;
    if (!bk_term_in_attention(t))
        t->per_layer = 0;
    t->n_copies = t->per_layer ? (int)exp->model.layers : 1;
    bk_plugin_call_enter(t, "param_count()", -1, 0);
    t->n_params = d->param_count ? d->param_count(t->instance) : 0;
    bk_plugin_call_leave();
    if (t->n_params < 0)
        return bk_fail(err, BK_ERR_PLUGIN, "term '%s' (plugin %s): param_count() returned %lld", t->label, d->name,
                       (long long)t->n_params);
    if (t->n_params > 0) {
        t->theta = calloc((size_t)t->n_params * (size_t)t->n_copies, sizeof *t->theta);
        if (!t->theta)
            return bk_fail(err, BK_ERR_NOMEM, "out of memory for the parameters of term '%s'", t->label);
        for (int l = 0; l < t->n_copies; l++) {
            float *theta = bk_term_theta(t, l);
            uint64_t seed = bk_derive_seed((uint64_t)exp->train.seed, (uint64_t)t->index, (uint64_t)l);
            const int with_ctx = BIASKIT_HAS_FIELD(d, biaskit_plugin, param_init_ctx) && d->param_init_ctx;
            const char *hook = with_ctx ? "param_init_ctx()" : "param_init()";
            bk_plugin_call_enter(t, hook, t->per_layer ? l : -1, 0);
            if (with_ctx) {
                biaskit_context ctx = bk_term_context_of(geo, t->per_layer ? l : -1, geo->train_length, 1);
                rc = d->param_init_ctx(t->instance, theta, seed, &ctx, &pe);
            } else {
                rc = d->param_init(t->instance, theta, seed, &pe);
            }
            bk_plugin_call_leave();
            if (rc != BIASKIT_OK)
                return term_fail(err, t, &pe, hook);
            if (d->param_project) {
                bk_plugin_call_enter(t, "param_project()", t->per_layer ? l : -1, 0);
                d->param_project(t->instance, theta);
                bk_plugin_call_leave();
            }
        }
    }
    return resolve_groups(t, cfg, where, err);
}

/* At most one segmenter and one rotary term; the segment stream needs the segmenter. */
static int check_roles(bk_term_set *set, const bk_experiment *exp, bk_error *err)
{
    for (int i = 0; i < set->n; i++) {
        const bk_term *t = &set->terms[i];
        const bk_term_config *cfg = &exp->terms[i];
        if (t->caps & BIASKIT_CAP_SEGMENT) {
            if (set->segmenter >= 0)
                return bk_fail_at(err, BK_ERR_CONFIG, cfg->pos,
                                  "[[term]] #%d (%s): a second segmenting term; term '%s' already defines the segments",
                                  t->index, t->plugin->desc->name, set->terms[set->segmenter].label);
            set->segmenter = i;
        }
        static const struct {
            uint32_t cap;
            const char *what;
        } single[] = {{BIASKIT_CAP_COORDINATE, "coordinate-table"}, {BIASKIT_CAP_MASK, "masking"},
                      {BIASKIT_CAP_SCALE, "logit-scale"}, {BIASKIT_CAP_CONTENT, "content-position"},
                      {BIASKIT_CAP_COUNT, "counting"}};
        int *slot[] = {&set->coordinate, &set->mask, &set->scale, &set->content, &set->count};
        for (int k = 0; k < 5; k++) {
            if (!(t->caps & single[k].cap))
                continue;
            if (*slot[k] >= 0)
                return bk_fail_at(err, BK_ERR_CONFIG, cfg->pos,
                                  "[[term]] #%d (%s): a second %s term; term '%s' already is one (one per model)",
                                  t->index, t->plugin->desc->name, single[k].what, set->terms[*slot[k]].label);
            *slot[k] = i;
        }
        if (t->caps & BIASKIT_CAP_ROTARY) {
            if (set->rotary >= 0)
                return bk_fail_at(err, BK_ERR_CONFIG, cfg->pos,
                                  "[[term]] #%d (%s): a second rotary term; term '%s' already rotates q and k (one "
                                  "rotary term per model)",
                                  t->index, t->plugin->desc->name, set->terms[set->rotary].label);
            if (set->geometry.d_head % 2)
                return bk_fail_at(err, BK_ERR_CONFIG, cfg->pos,
                                  "[[term]] #%d (%s): rotary needs an even head width, got dim / heads = %d",
                                  t->index, t->plugin->desc->name, (int)set->geometry.d_head);
            set->rotary = i;
        }
    }
    if (set->segmenter < 0)
        for (int i = 0; i < set->n; i++)
            if (set->terms[i].stream == BK_STREAM_SEGMENT)
                return bk_fail_at(err, BK_ERR_CONFIG, exp->terms[i].pos,
                                  "[[term]] #%d (%s): stream = \"segment\" needs a segmenting term (a plugin with the "
                                  "segment capability, e.g. plugin = \"bipe\") in the same experiment",
                                  set->terms[i].index, set->terms[i].plugin->desc->name);
    return BK_OK;
}

int bk_terms_refuse_idle_cap(const bk_term_set *set, int32_t cap, const bk_toml_pos *pos, bk_error *err)
{
    for (int k = 0; k < set->n; k++)
        if (bk_term_has_table(&set->terms[k]))
            return BK_OK;
    if (cap <= 0)
        return BK_OK;
    const bk_term *t = &set->terms[set->mask];
    char msg[512];
    snprintf(msg, sizeof msg,
             "term '%s' (plugin %s): mask() gives distance_cap %d, but no term of the experiment has a distance "
             "table for it to cap (the cap reads the distance tables at min(d, cap); rotary and coordinate terms "
             "are not capped): set the cap to 0 or add a table term",
             t->label, t->plugin->desc->name, (int)cap);
    return pos ? bk_fail_at(err, BK_ERR_CONFIG, *pos, "%s", msg) : bk_fail(err, BK_ERR_CONFIG, "%s", msg);
}

/* A masking term's distance cap with nothing to cap, refused when the terms are made (at the training
 * length, where the file sets the cap: its distance_cap key, else the [[term]] table). */
static int check_cap_use(const bk_term_set *set, const bk_experiment *exp, bk_error *err)
{
    if (set->mask < 0)
        return BK_OK;
    const bk_term *t = &set->terms[set->mask];
    biaskit_context ctx = bk_term_context(set, -1, set->geometry.train_length, 0);
    biaskit_mask m = {.struct_size = sizeof m};
    biaskit_error pe = {0, ""};
    bk_plugin_call_enter(t, "mask()", -1, 0);
    int rc = BK_DESCRIPTOR_FN(t->plugin->desc, mask)(t->instance, &ctx, &m, &pe);
    bk_plugin_call_leave();
    if (rc != BIASKIT_OK)
        return bk_term_plugin_failed(err, t, "mask()", -1, 0, &pe);
    const bk_toml_node *key = bk_toml_get(exp->terms[set->mask].table, "distance_cap");
    bk_toml_pos pos = key ? bk_toml_position(key) : exp->terms[set->mask].pos;
    return bk_terms_refuse_idle_cap(set, m.distance_cap, &pos, err);
}

/* Where the file sets a term's mixing weight: the value of its `weight` key, else its [[term]] table. */
static bk_toml_pos weight_position(const bk_term_config *cfg)
{
    const bk_toml_node *v = bk_toml_get(cfg->table, "weight");
    return v ? bk_toml_position(v) : cfg->pos;
}

/* Kernel mixing takes weights on the simplex: every weight >= 0 and a positive total on each stream.
 * Checked before bk_mix_weights() completes and rescales them, so that the message names the position
 * of the weight in the file. idx[0..n) are the table terms on `stream`; a weight not given is 1/n. */
static int check_kernel_weights(const bk_term_set *set, const bk_experiment *exp, int stream, const int *idx, int n,
                                bk_error *err)
{
    double total = 0.0;
    for (int k = 0; k < n; k++) {
        const bk_term *t = &set->terms[idx[k]];
        double w = isnan(t->weight) ? 1.0 / n : t->weight;
        if (w < 0.0)
            return bk_fail_at(err, BK_ERR_CONFIG, weight_position(&exp->terms[idx[k]]),
                              "[[term]] #%d (%s) weight: %g is negative; kernel mixing needs weights >= 0 (a mixture "
                              "of kernels)",
                              t->index, t->plugin->desc->name, w);
        total += w;
    }
    if (n > 0 && !(total > 0.0)) {
        const bk_term *t = &set->terms[idx[0]];
        return bk_fail_at(err, BK_ERR_CONFIG, weight_position(&exp->terms[idx[0]]),
                          "[[term]] #%d (%s) weight: kernel mixing needs a positive total weight on the %s stream, its "
                          "terms' weights sum to %g",
                          t->index, t->plugin->desc->name, stream == BK_STREAM_SEGMENT ? "segment" : "token", total);
    }
    return BK_OK;
}

int bk_terms_create(bk_term_set *set, const bk_experiment *exp, bk_registry *reg, bk_error *err)
{
    memset(set, 0, sizeof *set);
    set->segmenter = set->rotary = set->coordinate = set->mask = set->scale = set->content = set->count = -1;
    set->mixing = (bk_mixing)exp->attention.mixing;
    set->geometry = (biaskit_geometry){
        .struct_size = sizeof(biaskit_geometry),
        .n_layers = (int32_t)exp->model.layers,
        .n_heads = (int32_t)exp->model.heads,
        .d_model = (int32_t)exp->model.dim,
        .d_head = (int32_t)bk_experiment_head_dim(exp),
        .vocab_size = (int32_t)exp->model.vocab,
        .train_length = (int32_t)exp->train.length,
    };
    if (exp->n_terms == 0)
        return BK_OK;
    set->terms = calloc((size_t)exp->n_terms, sizeof *set->terms);
    if (!set->terms)
        return bk_fail(err, BK_ERR_NOMEM, "out of memory creating terms");
    int rc = BK_OK;
    for (int i = 0; i < exp->n_terms && !rc; i++) {
        rc = create_term(&set->terms[i], &exp->terms[i], exp, reg, &set->geometry, err);
        set->n = i + 1;
    }
    for (int i = 0; i < set->n && !rc; i++)
        for (int j = 0; j < i && !rc; j++) {
            if (strcmp(set->terms[i].label, set->terms[j].label) != 0)
                continue;
            /* two unnamed terms of one plugin: the later one is PLUGIN#k; a name that is another term's default
             * name would make the tensors and rows of the two ambiguous */
            const int named = exp->terms[i].name ? i : exp->terms[j].name ? j : -1;
            if (named >= 0) {
                const int other = named == i ? j : i;
                rc = bk_fail_at(err, BK_ERR_CONFIG, bk_toml_position(bk_toml_get(exp->terms[named].table, "name")),
                                "[[term]] #%d: name '%s' is the default name of [[term]] #%d (plugin %s, not named): "
                                "name that term too, or choose another name",
                                exp->terms[named].index, set->terms[named].label, exp->terms[other].index,
                                set->terms[other].plugin->desc->name);
                break;
            }
            snprintf(set->terms[i].label, sizeof set->terms[i].label, "%s#%d", set->terms[i].plugin->desc->name,
                     set->terms[i].index);
        }
    if (!rc)
        rc = check_roles(set, exp, err);
    if (!rc)
        rc = check_cap_use(set, exp, err);
    for (int s = 0; s < BK_STREAM_COUNT && !rc; s++) {
        double weights[256];
        const char *labels[256];
        int idx[256], n = 0;
        for (int i = 0; i < set->n && n < 256; i++)
            if ((int)set->terms[i].stream == s && bk_term_has_table(&set->terms[i])) {
                idx[n] = i;
                weights[n] = set->terms[i].weight;
                labels[n++] = set->terms[i].label;
            }
        if (set->mixing == BK_MIX_KERNEL && (rc = check_kernel_weights(set, exp, s, idx, n, err)))
            break;
        rc = bk_mix_weights(set->mixing, weights, labels, n, err);
        for (int k = 0; k < n && !rc; k++)
            set->terms[idx[k]].weight = weights[k];
        /* one weight per head on the stream when one of its terms learns that: every term's starts at its
         * weight (the bias keeps them current while they train) */
        int per_head = 0;
        for (int k = 0; k < n; k++)
            per_head |= set->terms[idx[k]].weight_per_head;
        for (int k = 0; k < n && per_head && !rc; k++) {
            bk_term *t = &set->terms[idx[k]];
            if (!(t->head_weights = malloc((size_t)t->n_heads * sizeof *t->head_weights)))
                rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the weights of term '%s'", t->label);
            for (int32_t h = 0; !rc && h < t->n_heads; h++)
                t->head_weights[h] = t->weight;
        }
    }
    if (rc)
        bk_terms_free(set);
    return rc;
}

void bk_terms_free(bk_term_set *set)
{
    if (!set)
        return;
    for (int i = 0; i < set->n; i++) {
        bk_term *t = &set->terms[i];
        if (t->instance) {
            bk_plugin_call_enter(t, "destroy()", -1, 0);
            t->plugin->desc->destroy(t->instance);
            bk_plugin_call_leave();
        }
        free(t->theta);
        free(t->head_weights);
        free(t->groups);
        free(t->layers_on);
    }
    free(set->terms);
    memset(set, 0, sizeof *set);
}

int32_t bk_term_tensors(const bk_term *term, biaskit_tensor_info *info)
{
    const biaskit_plugin *d = term->plugin->desc;
    if (!d->param_tensors || term->n_params <= 0)
        return 0;
    int32_t n = d->param_tensors(term->instance, info, BK_TERM_MAX_TENSORS);
    if (n <= 0 || n > BK_TERM_MAX_TENSORS)
        return 0;
    int64_t covered = 0;
    for (int32_t k = 0; k < n; k++) {
        const biaskit_tensor_info *t = &info[k];
        if (!t->name || !*t->name || strlen(t->name) > 64 || strchr(t->name, '"') || strcmp(t->name, "theta") == 0 ||
            t->rows < 1 || t->cols < 1 || t->offset < 0 || t->offset + (int64_t)t->rows * t->cols > term->n_params)
            return 0;
        for (int32_t j = 0; j < k; j++) {
            int64_t len_j = (int64_t)info[j].rows * info[j].cols, len_k = (int64_t)t->rows * t->cols;
            if (strcmp(info[j].name, t->name) == 0 ||
                (t->offset < info[j].offset + len_j && info[j].offset < t->offset + len_k))
                return 0;
        }
        covered += (int64_t)t->rows * t->cols;
    }
    return covered == term->n_params ? n : 0;
}

float *bk_term_theta(const bk_term *term, int layer)
{
    if (!term->theta)
        return NULL;
    int copy = term->n_copies > 1 ? layer : 0;
    return term->theta + (size_t)copy * (size_t)term->n_params;
}

/* `device` is "host" or "CUDA"; `where` is " at layer 1, step 3" or "". The scan is one branch-free
 * pass (a NaN or an inf makes x - x a NaN, and NaN != NaN) over heads x distances floats; only when it
 * finds something is the first bad value looked up for the message. */
static int check_finite(const bk_term *term, const float *table, int32_t heads, int32_t distances, const char *device,
                        const char *where, bk_error *err)
{
    const size_t n = (size_t)heads * (size_t)distances;
    float acc = 0.0f;
    for (size_t i = 0; i < n; i++)
        acc += table[i] - table[i];
    if (acc == acc)
        return BK_OK;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(table[i]))
            return bk_fail(err, BK_ERR_PLUGIN,
                           "term '%s' (plugin %s, %s)%s: %s table has a non-finite value %g at head %d, distance %d",
                           term->label, term->plugin->desc->name, term->plugin->path, where, device,
                           (double)table[i], (int)(i / (size_t)distances), (int)(i % (size_t)distances));
    return BK_OK;
}

int bk_term_table_at(const bk_term *term, int layer, int64_t step, int check, int32_t distances, float *table,
                     bk_error *err)
{
    if (distances <= 0)
        return bk_fail(err, BK_ERR_INVALID, "table length must be positive, got %d", distances);
    biaskit_error pe = {0};
    bk_plugin_call_enter(term, "table()", layer, step);
    int rc = term->plugin->desc->table(term->instance, bk_term_theta(term, layer < 0 ? 0 : layer), distances, table,
                                       &pe);
    bk_plugin_call_leave();
    if (rc != BIASKIT_OK)
        return bk_term_plugin_failed(err, term, "table()", layer, step, &pe);
    char where[64];
    bk_term_where(layer, step, where, sizeof where);
    return check ? check_finite(term, table, term->n_heads, distances, "host", where, err) : BK_OK;
}

int bk_term_table(const bk_term *term, int layer, int32_t distances, float *table, bk_error *err)
{
    return bk_term_table_at(term, layer, 0, 1, distances, table, err);
}

int bk_terms_mixed_table(const bk_term_set *set, int layer, bk_stream stream, int32_t distances, float *out,
                         int *n_terms, bk_error *err)
{
    size_t n = (size_t)set->geometry.n_heads * (size_t)distances;
    int count = 0;
    for (int i = 0; i < set->n; i++)
        count += set->terms[i].stream == stream && bk_term_has_table(&set->terms[i]);
    *n_terms = count;
    if (count == 0) {
        memset(out, 0, n * sizeof *out);
        return BK_OK;
    }
    int groups = 1; /* per head when a term of the stream has head weights (then they all do) */
    for (int i = 0; i < set->n; i++)
        if (set->terms[i].stream == stream && bk_term_has_table(&set->terms[i]) && set->terms[i].head_weights)
            groups = set->geometry.n_heads;
    float **tables = calloc((size_t)count, sizeof *tables);
    double *weights = calloc((size_t)count * (size_t)groups, sizeof *weights);
    int rc = tables && weights ? BK_OK : bk_fail(err, BK_ERR_NOMEM, "out of memory mixing tables");
    for (int i = 0, k = 0; i < set->n && !rc; i++) {
        const bk_term *t = &set->terms[i];
        if (t->stream != stream || !bk_term_has_table(t))
            continue;
        for (int g = 0; g < groups; g++)
            weights[(size_t)g * (size_t)count + (size_t)k] = groups > 1 ? bk_term_weight_at(t, g) : t->weight;
        if (!(tables[k] = malloc(n * sizeof **tables)))
            rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for the table of term '%s'", t->label);
        else
            rc = bk_term_table(t, layer, distances, tables[k], err);
        k++;
    }
    if (!rc)
        bk_mix_tables_grouped(set->mixing, (const float *const *)tables, weights, groups, count, n, out);
    for (int k = 0; tables && k < count; k++)
        free(tables[k]);
    free(tables);
    free(weights);
    return rc;
}

int bk_term_table_cuda(const bk_term *term, int layer, int32_t distances, float *table, bk_error *err)
{
    if (distances <= 0)
        return bk_fail(err, BK_ERR_INVALID, "table length must be positive, got %d", distances);
    const biaskit_plugin *d = term->plugin->desc;
    if (!d->table_cuda) /* the engine's fallback: the host table is what the device would use */
        return bk_term_table(term, layer, distances, table, err);
    size_t n = (size_t)term->n_heads * (size_t)distances;
    size_t n_theta = term->theta ? (size_t)term->n_params : 0;
    void *dev_table = NULL, *dev_theta = NULL;
    int rc = bk_device_alloc(&dev_table, n * sizeof(float), err);
    if (!rc && n_theta)
        rc = bk_device_alloc(&dev_theta, n_theta * sizeof(float), err);
    if (!rc && n_theta)
        rc = bk_device_upload(dev_theta, bk_term_theta(term, layer), n_theta * sizeof(float), err);
    if (!rc) {
        biaskit_error pe = {0};
        bk_plugin_call_enter(term, "table_cuda()", layer, 0);
        int prc = d->table_cuda(term->instance, dev_theta, distances, dev_table, NULL, &pe);
        bk_plugin_call_leave();
        if (prc != BIASKIT_OK)
            rc = term_fail(err, term, &pe, "table_cuda()");
    }
    if (!rc)
        rc = bk_device_download(table, dev_table, n * sizeof(float), err);
    bk_device_free(dev_table);
    bk_device_free(dev_theta);
    return rc ? rc : check_finite(term, table, term->n_heads, distances, "CUDA", "", err);
}
