/* A checkpoint into an HF transformers directory (train/export.h): the inverse of train/import_hf.c. */
#define _POSIX_C_SOURCE 200809L /* mkdir, rmdir, opendir */
#include "train/export.h"

#include "io/safetensors.h"
#include "plugin/services.h"
#include "train/hf_map.h"
#include "train/reopen.h"
#include "util/output.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT_PATH_MAX 4096

static const char what_hf_writes[] =
    "export --hf writes rope (none, pi, yarn) on llama and learned absolute positions on gpt2";

/* What the positional term becomes. */
typedef struct hf_positions {
    int rope;                    /* llama: a rope term; else gpt2: a learned ape table */
    const char *scaling;         /* rope: "none", "pi", "yarn" */
    double base, factor, beta_fast, beta_slow, attn_factor;
    int64_t original_length;     /* rope, resolved: the option, else [train] length */
    int64_t rows;                /* ape: the table's rows */
    const float *table;          /* ape: rows x C */
} hf_positions;


/* A JSON number Python reads back as a float (transformers checks that rope_scaling's values are floats):
 * the shortest text that reads back to the same double, with ".0" on whole numbers. */
static const char *json_float(double v, char *buf, size_t size)
{
    bk_double_text(v, buf, size);
    return buf;
}

/* The plugin options a term may set, by plugin: those the mapping writes, and those that only shape the
 * training (init_std: the initial values). Any other option set is refused by name. */
static int option_mapped(const char *plugin, const char *option)
{
    static const char *const rope[] = {"base", "scaling", "factor", "original_length", "beta_fast", "beta_slow",
                                       "attn_factor"};
    static const char *const ape[] = {"variant", "max_positions", "init_std"};
    const int is_rope = !strcmp(plugin, "rope");
    const char *const *list = is_rope ? rope : ape;
    const size_t n = is_rope ? sizeof rope / sizeof *rope : sizeof ape / sizeof *ape;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i], option))
            return 1;
    return 0;
}

static int read_option(const bk_term *t, const char *source, const char *key, double *d, int64_t *i, const char **s,
                       bk_error *err)
{
    const biaskit_services *svc = bk_services();
    biaskit_error pe;
    memset(&pe, 0, sizeof pe);
    const int rc = d ? svc->get_double(&t->view, key, d, &pe)
                     : i ? svc->get_int(&t->view, key, i, &pe) : svc->get_string(&t->view, key, s, &pe);
    if (rc)
        return bk_fail(err, BK_ERR_INTERNAL, "%s: term '%s' (plugin %s): cannot read option '%s': %s", source,
                       t->label, t->plugin->desc->name, key, pe.message);
    return BK_OK;
}

/* The transformers class of the model: Qwen3's for the llama family with QK-norm (its q_norm and k_norm are
 * the engine's per-head RMSNorm before the rotation). */
static const char *hf_class(const bk_gpt *g)
{
    return g->family != BK_FAMILY_LLAMA ? "GPT2LMHeadModel" : g->qk_norm ? "Qwen3ForCausalLM" : "LlamaForCausalLM";
}

/* The one positional term, checked against what the family's transformers class can express. */
static int read_positions(const bk_lm *lm, const char *source, hf_positions *p, bk_error *err)
{
    memset(p, 0, sizeof *p);
    const int llama = lm->gpt.family == BK_FAMILY_LLAMA;
    const char *arch = hf_class(&lm->gpt);
    const bk_term_set *ts = &lm->terms;
    if (ts->n != 1) {
        char names[512] = "";
        size_t at = 0;
        for (int k = 0; k < ts->n && at < sizeof names; k++)
            at += (size_t)snprintf(names + at, sizeof names - at, "%s'%s' (plugin %s)", k ? ", " : "",
                                   ts->terms[k].label, ts->terms[k].plugin->desc->name);
        if (ts->n == 0)
            return bk_fail(err, BK_ERR_UNSUPPORTED,
                           "%s: no positional term (NoPE): HF's %s always has %s; %s, exactly one term", source,
                           arch, llama ? "rotary positions" : "learned absolute positions", what_hf_writes);
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: %d positional terms (%s): HF's %s has one positional scheme; %s, exactly one term",
                       source, ts->n, names, arch, what_hf_writes);
    }
    if (lm->bias.learn_weights)
        return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: learnable mixing weights: HF's %s has no mixing of terms; %s",
                       source, arch, what_hf_writes);
    const bk_term *t = &ts->terms[0];
    const char *plugin = t->plugin->desc->name;
    if (strcmp(plugin, llama ? "rope" : "ape"))
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: term '%s' (plugin %s): HF's %s has no such positional scheme%s; %s", source, t->label,
                       plugin, arch,
                       !strcmp(plugin, "rope") ? " (GPT-2 reads learned absolute positions)"
                       : !strcmp(plugin, "ape") ? " (LLaMA rotates q and k; it adds no absolute positions)"
                                                : "",
                       what_hf_writes);
    if (t->stream != BK_STREAM_TOKEN)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: term '%s' (plugin %s) reads the segment stream: HF's %s counts positions by token; %s",
                       source, t->label, plugin, arch, what_hf_writes);
    if (t->per_layer || t->n_copies != 1)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: term '%s' (plugin %s) has parameters per layer: HF's %s has one set for the model; %s",
                       source, t->label, plugin, arch, what_hf_writes);
    const biaskit_plugin *d = t->plugin->desc;
    for (uint32_t k = 0; k < d->n_options; k++)
        if (bk_services()->is_set(&t->view, d->options[k].name) && !option_mapped(plugin, d->options[k].name))
            return bk_fail(err, BK_ERR_UNSUPPORTED,
                           "%s: term '%s' (plugin %s) sets option '%s': HF's %s has no field for it; %s", source,
                           t->label, plugin, d->options[k].name, arch, what_hf_writes);
    int rc;
    if (!llama) {
        const char *variant = NULL;
        if ((rc = read_option(t, source, "variant", NULL, NULL, &variant, err)))
            return rc;
        if (strcmp(variant, "learned"))
            return bk_fail(err, BK_ERR_UNSUPPORTED,
                           "%s: term '%s' (plugin ape) of variant \"%s\": HF's GPT2LMHeadModel reads a learned table "
                           "of positions (wpe); %s",
                           source, t->label, variant, what_hf_writes);
        if (t->n_params <= 0 || t->n_params % lm->gpt.C)
            return bk_fail(err, BK_ERR_INTERNAL, "%s: term '%s' (plugin ape) holds %lld values, not rows of %d",
                           source, t->label, (long long)t->n_params, lm->gpt.C);
        p->rows = t->n_params / lm->gpt.C;
        p->table = t->theta;
        return BK_OK;
    }
    p->rope = 1;
    if ((rc = read_option(t, source, "base", &p->base, NULL, NULL, err)) ||
        (rc = read_option(t, source, "scaling", NULL, NULL, &p->scaling, err)) ||
        (rc = read_option(t, source, "factor", &p->factor, NULL, NULL, err)) ||
        (rc = read_option(t, source, "original_length", NULL, &p->original_length, NULL, err)) ||
        (rc = read_option(t, source, "beta_fast", &p->beta_fast, NULL, NULL, err)) ||
        (rc = read_option(t, source, "beta_slow", &p->beta_slow, NULL, NULL, err)) ||
        (rc = read_option(t, source, "attn_factor", &p->attn_factor, NULL, NULL, err)))
        return rc;
    if (!p->original_length)
        p->original_length = lm->exp.train.length;
    if (!strcmp(p->scaling, "ntk"))
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: term '%s' (plugin rope) has scaling = \"ntk\": HF's LlamaForCausalLM has no static "
                       "NTK-aware rope_type (its 'dynamic' recomputes the base at every length as base ((factor "
                       "length / L) - (factor - 1))^(d / (d - 2))); %s",
                       source, t->label, what_hf_writes);
    if (strcmp(p->scaling, "none") && p->factor == 0.0)
        return bk_fail(err, BK_ERR_UNSUPPORTED,
                       "%s: term '%s' (plugin rope) has scaling = \"%s\" with factor = 0 (dynamic: s = max(1, length "
                       "/ original_length)): HF's LlamaForCausalLM has no dynamic %s (its 'dynamic' is NTK's, of "
                       "another base); %s",
                       source, t->label, p->scaling, p->scaling, what_hf_writes);
    if (strcmp(p->scaling, "none") && strcmp(p->scaling, "pi") && strcmp(p->scaling, "yarn"))
        return bk_fail(err, BK_ERR_UNSUPPORTED, "%s: term '%s' (plugin rope) has scaling = \"%s\": %s", source,
                       t->label, p->scaling, what_hf_writes);
    return BK_OK;
}

int bk_export_hf_config(const bk_lm *lm, const char *source, char *text, size_t size, bk_export_summary *s,
                        bk_error *err)
{
    memset(s, 0, sizeof *s);
    hf_positions p;
    int rc = read_positions(lm, source, &p, err);
    if (rc)
        return rc;
    const bk_gpt *g = &lm->gpt;
    const int llama = g->family == BK_FAMILY_LLAMA;
    snprintf(s->architecture, sizeof s->architecture, "%s", hf_class(g));
    s->layers = g->L, s->heads = g->H, s->kv_heads = g->KV, s->head_dim = g->hd, s->dim = g->C;
    s->ffn_dim = g->F, s->vocab = g->V, s->tied = g->tied || !llama;
    size_t at = 0;
    char a[40], b[40], c[40], d[40];
    if (!llama) {
        s->context = (int)p.rows;
        snprintf(s->positions, sizeof s->positions, "learned absolute positions (wpe), n_positions %d", s->context);
        return bk_append(text, size, &at, err, "the exported config.json",
                         "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                         "  \"n_layer\": %d,\n  \"n_embd\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n"
                         "  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"vocab_size\": %d,\n"
                         "  \"layer_norm_epsilon\": 1e-05,\n  \"activation_function\": \"gelu_new\",\n"
                         "  \"scale_attn_weights\": true,\n  \"scale_attn_by_inverse_layer_idx\": false,\n"
                         "  \"reorder_and_upcast_attn\": false,\n  \"add_cross_attention\": false,\n"
                         "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
                         "  \"tie_word_embeddings\": true,\n  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n"
                         "  \"torch_dtype\": \"float32\"\n}\n",
                         g->L, g->C, g->H, s->context, s->context, g->V);
    }
    const int yarn = !strcmp(p.scaling, "yarn");
    s->context = (int)(yarn ? p.original_length : lm->exp.train.length);
    rc = bk_append(text, size, &at, err, "the exported config.json",
                   "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
                   "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
                   "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
                   "  \"rms_norm_eps\": %s,\n  \"vocab_size\": %d,\n  \"tie_word_embeddings\": %s,\n"
                   "  \"max_position_embeddings\": %d,\n  \"rope_theta\": %s,\n",
                   hf_class(g), g->qk_norm ? "qwen3" : "llama", g->C, g->F, g->L, g->H, g->KV, g->hd,
                   json_float(lm->exp.model.norm_eps, a, sizeof a), g->V,
                   g->tied ? "true" : "false", s->context, json_float(p.base, b, sizeof b));
    if (rc)
        return rc;
    if (!strcmp(p.scaling, "none")) {
        rc = bk_append(text, size, &at, err, "the exported config.json", "  \"rope_scaling\": null,\n");
        snprintf(s->positions, sizeof s->positions, "rope_theta %s, no rope_scaling", b);
    } else if (!yarn) {
        rc = bk_append(text, size, &at, err, "the exported config.json",
                       "  \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": %s},\n",
                       json_float(p.factor, c, sizeof c));
        snprintf(s->positions, sizeof s->positions, "rope_theta %s, rope_scaling linear (factor %s)", b, c);
    } else {
        json_float(p.factor, a, sizeof a);
        json_float(p.beta_fast, c, sizeof c);
        json_float(p.beta_slow, d, sizeof d);
        char e[40];
        json_float(p.attn_factor * bk_hf_yarn_mscale(p.factor), e, sizeof e);
        rc = bk_append(text, size, &at, err, "the exported config.json",
                       "  \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": %s, \"beta_fast\": %s, "
                       "\"beta_slow\": %s, \"attention_factor\": %s},\n",
                       a, c, d, e);
        snprintf(s->positions, sizeof s->positions,
                 "rope_theta %s, rope_scaling yarn (factor %s, beta_fast %s, beta_slow %s, attention_factor %s; "
                 "original context %d)",
                 b, a, c, d, e, s->context);
    }
    if (!rc && g->qk_norm) /* Qwen3: full attention in every layer */
        rc = bk_append(text, size, &at, err, "the exported config.json",
                       "  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n");
    if (!rc)
        rc = bk_append(text, size, &at, err, "the exported config.json",
                       "  \"hidden_act\": \"silu\",\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
                       "  \"attention_dropout\": 0.0,\n  \"pretraining_tp\": 1,\n  \"bos_token_id\": null,\n"
                       "  \"eos_token_id\": null,\n  \"torch_dtype\": \"float32\"\n}\n");
    return rc;
}

/* ---- the tensors ---- */

typedef struct tensor_list {
    bk_st_tensor *t;
    char (*names)[128];
    int n, cap;
} tensor_list;

static void add(tensor_list *l, const char *name, const float *data, int64_t rows, int64_t cols)
{
    bk_st_tensor *t = &l->t[l->n];
    snprintf(l->names[l->n], sizeof l->names[l->n], "%s", name);
    t->name = l->names[l->n];
    t->ndim = rows ? 2 : 1;
    t->shape[0] = rows ? rows : cols;
    t->shape[1] = rows ? cols : 0;
    t->data = data;
    l->n++;
}

/* dst (in, out) = src (out, in) transposed: GPT-2's Conv1D layout. */
static float *transpose(float *dst, const float *src, int64_t out, int64_t in)
{
    for (int64_t o = 0; o < out; o++)
        for (int64_t j = 0; j < in; j++)
            dst[j * out + o] = src[o * in + j];
    return dst;
}

/* Every tensor of the model under transformers' name; GPT-2's transposed weights go into *scratch. */
static int list_tensors(const bk_gpt *g, const hf_positions *p, tensor_list *l, float **scratch, bk_error *err)
{
    const int llama = g->family == BK_FAMILY_LLAMA;
    l->cap = 4 + g->L * 12; /* gpt2: wte, wpe, ln_f weight and bias, 12 per layer (llama: at most 11) */
    l->n = 0;
    l->t = calloc((size_t)l->cap, sizeof *l->t);
    l->names = calloc((size_t)l->cap, sizeof *l->names);
    const int64_t C = g->C, V = g->V, L = g->L;
    *scratch = llama ? NULL : malloc((size_t)(12 * L * C * C) * sizeof **scratch);
    if (!l->t || !l->names || (!llama && !*scratch))
        return bk_fail(err, BK_ERR_NOMEM, "out of memory for the exported tensors");
    char nm[128];
    if (llama) {
        const bk_llama_params *w = &g->lp;
        const int64_t A = g->A, F = g->F, KVd = (int64_t)g->KV * g->hd, R = A + 2 * KVd;
        add(l, "model.embed_tokens.weight", w->wte, V, C);
        for (int64_t k = 0; k < L; k++) {
#define LAYER(part, data, rows, cols)                                                                                  \
    (snprintf(nm, sizeof nm, "model.layers.%lld." part, (long long)k), add(l, nm, data, rows, cols))
            LAYER("input_layernorm.weight", w->rms1w + k * C, 0, C);
            LAYER("self_attn.q_proj.weight", w->qkvw + k * R * C, A, C);
            LAYER("self_attn.k_proj.weight", w->qkvw + k * R * C + A * C, KVd, C);
            LAYER("self_attn.v_proj.weight", w->qkvw + k * R * C + (A + KVd) * C, KVd, C);
            LAYER("self_attn.o_proj.weight", w->attprojw + k * C * A, C, A);
            if (g->qk_norm) {
                LAYER("self_attn.q_norm.weight", w->qnormw + k * g->hd, 0, g->hd);
                LAYER("self_attn.k_norm.weight", w->knormw + k * g->hd, 0, g->hd);
            }
            LAYER("post_attention_layernorm.weight", w->rms2w + k * C, 0, C);
            LAYER("mlp.gate_proj.weight", w->fcw + k * 2 * F * C, F, C);
            LAYER("mlp.up_proj.weight", w->fcw + k * 2 * F * C + F * C, F, C);
            LAYER("mlp.down_proj.weight", w->fcprojw + k * C * F, C, F);
#undef LAYER
        }
        add(l, "model.norm.weight", w->rmsfw, 0, C);
        if (!g->tied)
            add(l, "lm_head.weight", w->lmhead, V, C);
        return BK_OK;
    }
    const bk_gpt_params *w = &g->p;
    float *s = *scratch;
    add(l, "transformer.wte.weight", w->wte, V, C);
    add(l, "transformer.wpe.weight", p->table, p->rows, C);
    for (int64_t k = 0; k < L; k++) {
#define LAYER(part, data, rows, cols)                                                                                  \
    (snprintf(nm, sizeof nm, "transformer.h.%lld." part, (long long)k), add(l, nm, data, rows, cols))
        LAYER("ln_1.weight", w->ln1w + k * C, 0, C);
        LAYER("ln_1.bias", w->ln1b + k * C, 0, C);
        LAYER("attn.c_attn.weight", transpose(s, w->qkvw + k * 3 * C * C, 3 * C, C), C, 3 * C);
        s += 3 * C * C;
        LAYER("attn.c_attn.bias", w->qkvb + k * 3 * C, 0, 3 * C);
        LAYER("attn.c_proj.weight", transpose(s, w->attprojw + k * C * C, C, C), C, C);
        s += C * C;
        LAYER("attn.c_proj.bias", w->attprojb + k * C, 0, C);
        LAYER("ln_2.weight", w->ln2w + k * C, 0, C);
        LAYER("ln_2.bias", w->ln2b + k * C, 0, C);
        LAYER("mlp.c_fc.weight", transpose(s, w->fcw + k * 4 * C * C, 4 * C, C), C, 4 * C);
        s += 4 * C * C;
        LAYER("mlp.c_fc.bias", w->fcb + k * 4 * C, 0, 4 * C);
        LAYER("mlp.c_proj.weight", transpose(s, w->fcprojw + k * 4 * C * C, C, 4 * C), 4 * C, C);
        s += 4 * C * C;
        LAYER("mlp.c_proj.bias", w->fcprojb + k * C, 0, C);
#undef LAYER
    }
    add(l, "transformer.ln_f.weight", w->lnfw, 0, C);
    add(l, "transformer.ln_f.bias", w->lnfb, 0, C);
    return BK_OK;
}

/* ---- the directory ---- */

/* DIR as it is: absent (*exists 0), or a directory that is empty or may be written into (force). */
static int check_dir(const char *dir, int force, int *exists, bk_error *err)
{
    struct stat sb;
    *exists = 0;
    if (!dir[0])
        return bk_fail(err, BK_ERR_USAGE, "--hf: expected a directory, got an empty path");
    if (stat(dir, &sb) != 0) {
        if (errno == ENOENT)
            return BK_OK;
        return bk_fail(err, BK_ERR_IO, "--hf '%s': %s", dir, strerror(errno));
    }
    if (!S_ISDIR(sb.st_mode))
        return bk_fail(err, BK_ERR_USAGE,
                       "--hf '%s' exists and is not a directory: expected a directory to write config.json and "
                       "model.safetensors into (absent, or empty, or given with --force)",
                       dir);
    *exists = 1;
    DIR *d = opendir(dir);
    if (!d)
        return bk_fail(err, BK_ERR_IO, "--hf '%s': cannot list the directory: %s", dir, strerror(errno));
    char first[256] = "";
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && n++ == 0)
            snprintf(first, sizeof first, "%s", e->d_name);
    closedir(d);
    if (n && !force)
        return bk_fail(err, BK_ERR_USAGE,
                       "--hf '%s' is not empty (%d entr%s, '%s'%s): give --force to replace its config.json, "
                       "model.safetensors and, with a tokenizer, tokenizer.json and tokenizer_config.json (its "
                       "other files are left as they are)",
                       dir, n, n == 1 ? "y" : "ies", first, n > 1 ? ", ..." : "");
    return BK_OK;
}

static int join(char *out, const char *dir, const char *name, bk_error *err)
{
    if (snprintf(out, EXPORT_PATH_MAX, "%s/%s", dir, name) >= EXPORT_PATH_MAX)
        return bk_fail(err, BK_ERR_IO, "%s/%s: the path is longer than %d bytes", dir, name, EXPORT_PATH_MAX - 1);
    return BK_OK;
}

/* tokenizer.json as it is: no BOS or EOS added by the tokenizer class (the engine adds none either) */
static const char hf_tokenizer_config[] = "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n"
                                          "  \"add_bos_token\": false,\n  \"add_eos_token\": false\n}\n";

/* DIR/name holding text, through the output rule (atomic, never onto the input). */
static int write_text(const char *dir, const char *name, const char *text, const bk_output_input *input,
                      bk_error *err)
{
    char path[EXPORT_PATH_MAX];
    int rc = join(path, dir, name, err);
    bk_output out;
    memset(&out, 0, sizeof out);
    if (rc || (rc = bk_output_open(&out, "--hf", path, input, 1, err)))
        return rc;
    bk_output_printf(&out, "%s", text); /* a failed write is reported by the close */
    return bk_output_close(&out, err);
}

int bk_export_hf(const char *ckpt, const char *dir, const bk_export_options *o, bk_export_summary *s,
                 bk_error *err)
{
    const bk_export_options none = {0, 0};
    if (!o)
        o = &none;
    int exists = 0;
    int rc = check_dir(dir, o->force, &exists, err);
    if (rc)
        return rc;
    bk_reopen_request r = {BK_REOPEN_INSPECT, NULL, 0, 0, o->no_verify};
    bk_lm lm;
    if ((rc = bk_reopen(ckpt, &r, &lm, NULL, NULL, err)))
        return rc;
    char config[8192];
    hf_positions p;
    tensor_list l = {0};
    float *scratch = NULL;
    char cfg_path[EXPORT_PATH_MAX], st_path[EXPORT_PATH_MAX];
    int made = 0;
    if (!(rc = bk_export_hf_config(&lm, ckpt, config, sizeof config, s, err)) &&
        !(rc = read_positions(&lm, ckpt, &p, err)) && !(rc = list_tensors(&lm.gpt, &p, &l, &scratch, err)) &&
        !(rc = join(cfg_path, dir, "config.json", err)) && !(rc = join(st_path, dir, "model.safetensors", err))) {
        if (!exists) {
            if (mkdir(dir, 0777) != 0)
                rc = bk_fail(err, BK_ERR_IO, "--hf '%s': cannot create the directory: %s", dir, strerror(errno));
            else
                made = 1;
        }
        const bk_output_input input = {"checkpoint", ckpt, NULL, 0};
        bk_output out;
        memset(&out, 0, sizeof out);
        if (!rc && !(rc = bk_output_check("--hf", st_path, &input, 1, err)) &&
            !(rc = bk_output_open(&out, "--hf", cfg_path, &input, 1, err))) {
            const bk_st_meta meta[] = {{"format", "pt"}};
            if ((rc = bk_safetensors_write(st_path, l.t, l.n, meta, 1, err)))
                bk_output_discard(&out);
            else {
                bk_output_printf(&out, "%s", config); /* a failed write is reported by the close */
                rc = bk_output_close(&out, err);
            }
        }
        if (!rc && lm.tokenizer_json) {
            rc = write_text(dir, "tokenizer.json", lm.tokenizer_json, &input, err);
            if (!rc)
                rc = write_text(dir, "tokenizer_config.json", hf_tokenizer_config, &input, err);
            s->tokenizer = !rc;
        }
        if (rc && made)
            rmdir(dir); /* only when nothing is left in it */
        s->tensors = (size_t)l.n;
        for (int k = 0; k < l.n; k++)
            s->parameters += (size_t)(l.t[k].ndim == 2 ? l.t[k].shape[0] * l.t[k].shape[1] : l.t[k].shape[0]);
    }
    free(scratch);
    free(l.t);
    free(l.names);
    bk_lm_close(&lm);
    return rc;
}
