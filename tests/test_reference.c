/* The engine against an independent PyTorch implementation (tests/reference/reference.py).
 *
 * For each case: build a small model from configuration text, run one training forward and backward
 * on a fixed random batch (2 x LENGTH = 12 tokens; long_blocked: 2 x 130, past the attention's 64-row
 * query blocks), and write everything the reference needs to a safetensors file: every
 * optimizer group's parameters under its checkpoint name, "grad.<name>" its gradient, the batch,
 * logits and loss, every term's table ("table.<label>", all layers), the mixed token table and the
 * mixing weights. Then take three AdamW steps (each followed by bk_lm_after_step: projection, weight
 * re-sync, fresh tables) and store each step's loss ("loss_step<k>"), the parameters and gradients
 * it started from ("step<k>.<name>", "step<k>.grad.<name>" for k >= 1), the final parameters
 * ("final.<name>"), their tables, and their loss from a training and an evaluation forward. The
 * metadata "case" (JSON) describes the model, the terms and the optimizer. The reference recomputes
 * all of it in float64 with autograd and exits non-zero on any mismatch, naming the tensor.
 *
 * Needs /usr/bin/python3 with torch (python3-torch), or the python BIASKIT_PYTHON names; without it
 * the whole test exits 77 (skipped).
 * BK_REFERENCE_KEEP=1 keeps the files (their paths are printed); a failing case always keeps its.
 * BK_REFERENCE_ONLY=PATTERN runs only the cases whose function name matches (cmocka's filter: '*' wildcards). */
#define _POSIX_C_SOURCE 200809L /* setenv, mkstemp */
#include "test_util.h"

#include "bias/mix.h"
#include "io/safetensors.h"
#include "train/adamw.h"
#include "train/lm.h"
#include "util/rng.h"

#include <math.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Debian's python3 with python3-torch; BIASKIT_PYTHON names another one (a machine whose torch lives
 * in a virtual environment, as scripts/gpu-test.sh sets it). */
static const char *python(void)
{
    const char *p = getenv("BIASKIT_PYTHON");
    return p && *p ? p : "/usr/bin/python3";
}
#define REFERENCE_SCRIPT BK_TEST_SOURCE_DIR "/tests/reference/reference.py"

#define BATCH 2
#define LENGTH 12 /* the sequence length of run_case: below the attention's 64-row query blocks */
#define STEPS 3
#define LR 1e-2
#define BETA1 0.9
#define BETA2 0.95
#define EPS 1e-8
#define WEIGHT_DECAY 0.1

typedef struct ref_case {
    const char *name;
    const char *config;  /* the experiment text */
    const char *options; /* JSON array, one object per [[term]]: the plugin options the reference needs
                          * and the `weight` when the configuration gives one */
    int large_weights;   /* replace the GPT-2 initialisation by O(1) activations (see below) */
    const char *alphabet;/* the batch's tokens are drawn from these bytes (NULL: the whole vocabulary) */
} ref_case;

/* ---- a growing list of tensors (copies) and a growing JSON text ---- */

typedef struct tensor_list {
    bk_st_tensor *items;
    int n, cap;
} tensor_list;

static void add_tensor(tensor_list *l, const char *name, const float *data, int ndim, const int64_t *shape)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->items = realloc(l->items, (size_t)l->cap * sizeof *l->items);
        assert_non_null(l->items);
    }
    size_t count = 1;
    for (int d = 0; d < ndim; d++)
        count *= (size_t)shape[d];
    float *copy = malloc((count ? count : 1) * sizeof(float));
    char *name_copy = strdup(name);
    assert_non_null(copy);
    assert_non_null(name_copy);
    memcpy(copy, data, count * sizeof(float));
    bk_st_tensor *t = &l->items[l->n++];
    memset(t, 0, sizeof *t);
    t->name = name_copy;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    t->data = copy;
}

static void add_scalar(tensor_list *l, const char *name, float value)
{
    add_tensor(l, name, &value, 0, NULL);
}

static void free_tensors(tensor_list *l)
{
    for (int i = 0; i < l->n; i++) {
        free((char *)l->items[i].name);
        free((float *)l->items[i].data);
    }
    free(l->items);
    memset(l, 0, sizeof *l);
}

typedef struct text {
    char *s;
    size_t len, cap;
} text;

static void appendf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void appendf(text *t, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        assert_true(n >= 0);
        if (t->s && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        t->cap = (t->cap + (size_t)n + 1) * 2;
        t->s = realloc(t->s, t->cap);
        assert_non_null(t->s);
        if (t->len == 0)
            t->s[0] = '\0';
    }
}

/* ---- the parameters as the optimizer sees them ---- */

/* Shape of optimizer group `g` as the reference reads it: model tensors as in bk_gpt, term
 * parameters (copies, n_params), mixing parameters (terms on the stream). */
static int group_shape(const bk_lm *lm, const bk_param_group *g, int64_t *shape)
{
    if (!strncmp(g->name, "model.", 6)) {
        for (int i = 0; i < lm->gpt.n_tensors; i++) {
            const bk_gpt_tensor *t = &lm->gpt.tensors[i];
            if (!strcmp(g->name + 6, t->name)) {
                for (int d = 0; d < t->ndim; d++)
                    shape[d] = t->shape[d];
                return t->ndim;
            }
        }
        fail_msg("optimizer group '%s' is not a model tensor", g->name);
        return 0;
    }
    if (!strncmp(g->name, "term.", 5)) {
        for (int i = 0; i < lm->terms.n; i++) {
            const bk_term *term = &lm->terms.terms[i];
            char name[96];
            snprintf(name, sizeof name, "term.%s.theta", term->label);
            if (!strcmp(g->name, name)) {
                shape[0] = term->n_copies, shape[1] = term->n_params;
                return 2;
            }
        }
        fail_msg("optimizer group '%s' names no term", g->name);
        return 0;
    }
    for (int st = 0; st < BK_STREAM_COUNT; st++) { /* weights per head: (learned terms, heads) */
        const bk_bias *b = &lm->bias;
        int per_head = b->n_mix[st] > 0 && b->mix_params[st] == g->param && b->groups[st] > 1;
        for (int k = 0; per_head && k < b->n_on[st]; k++)
            per_head = b->kind[st][k] != BK_MIX_LEARNED;
        if (per_head) {
            shape[0] = (int64_t)g->n / b->groups[st], shape[1] = b->groups[st];
            return 2;
        }
    }
    shape[0] = (int64_t)g->n;
    return 1;
}

static void add_groups(tensor_list *l, const bk_lm *lm, const bk_adamw *opt, const char *prefix, int grads)
{
    for (int i = 0; i < opt->n_groups; i++) {
        const bk_param_group *g = &opt->groups[i];
        int64_t shape[3];
        int ndim = group_shape(lm, g, shape);
        char name[160];
        snprintf(name, sizeof name, "%s%s", prefix, g->name);
        add_tensor(l, name, grads ? g->grad : g->param, ndim, shape);
    }
}

static void check(int rc, const bk_error *err, const char *what)
{
    if (rc != BK_OK)
        fail_msg("%s failed (%d): %s", what, rc, err->message);
}

/* The case description the reference reads. */
static void describe(text *j, const ref_case *c, int T, const bk_lm *lm, const bk_adamw *opt)
{
    const bk_experiment *e = &lm->exp;
    char mixing[16], stream[16];
    appendf(j, "{\"name\": \"%s\", \"layers\": %d, \"heads\": %d, \"dim\": %d, \"vocab\": %d, \"B\": %d, \"T\": %d, "
               "\"train_length\": %d, ",
            c->name, (int)e->model.layers, (int)e->model.heads, (int)e->model.dim, (int)e->model.vocab, BATCH, T,
            (int)e->train.length);
    const bk_gpt *m = &lm->gpt;
    appendf(j, "\"family\": \"%s\", \"kv_heads\": %d, \"head_dim\": %d, \"ffn_dim\": %d, \"norm_eps\": %.17g, "
               "\"tied\": %s, \"qk_norm\": %s, ",
            m->family == BK_FAMILY_LLAMA ? "llama" : "gpt2", m->KV, m->hd, m->F, (double)m->eps,
            m->tied ? "true" : "false", m->qk_norm ? "true" : "false");
    appendf(j, "\"mixing\": \"%s\", \"learn_weights\": %s, \"terms\": [",
            bk_choice_name(BK_MIXING_CHOICES, lm->terms.mixing, mixing, sizeof mixing),
            e->attention.learn_weights ? "true" : "false");
    for (int i = 0; i < lm->terms.n; i++) {
        const bk_term *t = &lm->terms.terms[i];
        char caps[96], weight[32];
        snprintf(weight, sizeof weight, bk_term_has_table(t) ? "%.17g" : "null", t->weight);
        appendf(j,
                "%s{\"label\": \"%s\", \"plugin\": \"%s\", \"caps\": \"%s\", \"stream\": \"%s\", "
                "\"weight\": %s, \"per_layer\": %s, \"n_copies\": %d, \"n_params\": %lld, "
                "\"learn_weight\": %s, \"weight_per_head\": %s}",
                i ? ", " : "", t->label, t->plugin->desc->name, bk_capabilities_string(t->caps, caps, sizeof caps),
                bk_choice_name(BK_STREAM_CHOICES, t->stream, stream, sizeof stream), weight,
                t->per_layer ? "true" : "false", t->n_copies, (long long)t->n_params,
                t->learn_weight ? "true" : "false", t->weight_per_head ? "true" : "false");
    }
    appendf(j, "], \"options\": %s, ", c->options);
    appendf(j, "\"adamw\": {\"lr\": %.17g, \"beta1\": %.17g, \"beta2\": %.17g, \"eps\": %.17g, \"weight_decay\": %.17g, "
               "\"steps\": %d, \"decay\": {",
            LR, BETA1, BETA2, EPS, WEIGHT_DECAY, STEPS);
    for (int i = 0; i < opt->n_groups; i++)
        appendf(j, "%s\"%s\": %s", i ? ", " : "", opt->groups[i].name, opt->groups[i].decay ? "true" : "false");
    appendf(j, "}}}");
}

/* Tables of every table term and layer, (L, H, T) each, and the mixed table of each stream. */
static void add_tables(tensor_list *l, const bk_lm *lm, int T, const char *prefix)
{
    const int L = lm->gpt.L, H = lm->gpt.H;
    float *buf = malloc((size_t)L * H * T * sizeof(float));
    assert_non_null(buf);
    int64_t shape[3] = {L, H, T};
    char name[160];
    for (int i = 0; i < lm->terms.n; i++) {
        const bk_term *t = &lm->terms.terms[i];
        bk_error err;
        if (!bk_term_has_table(t))
            continue;
        for (int layer = 0; layer < L; layer++)
            check(bk_term_table(t, layer, T, buf + (size_t)layer * H * T, &err), &err, "bk_term_table");
        snprintf(name, sizeof name, "%stable.%s", prefix, t->label);
        add_tensor(l, name, buf, 3, shape);
    }
    for (int s = 0; s < BK_STREAM_COUNT; s++) {
        if (!lm->bias.n_on[s])
            continue;
        for (int layer = 0; layer < L; layer++) {
            const float *m = bk_bias_table(&lm->bias, layer, (bk_stream)s); /* NULL: no term in the layer */
            for (int h = 0; h < H; h++) /* rows are lm->bias.distances long */
                if (m)
                    memcpy(buf + ((size_t)layer * H + h) * T, m + (size_t)h * lm->bias.distances, T * sizeof(float));
                else
                    memset(buf + ((size_t)layer * H + h) * T, 0, T * sizeof(float));
        }
        char stream[16];
        snprintf(name, sizeof name, "%smixed.%s", prefix, bk_choice_name(BK_STREAM_CHOICES, s, stream, sizeof stream));
        add_tensor(l, name, buf, 3, shape);
    }
    free(buf);
}

/* The mixing weights of the table terms, in term order: (terms), or (terms, heads) when a stream's
 * weights are per head. */
static void add_weights(tensor_list *l, const bk_lm *lm, const char *name)
{
    float w[64 * 64];
    int n = 0, per_head = 0;
    const int H = lm->gpt.H;
    assert_true(lm->terms.n <= 64 && H <= 64);
    for (int i = 0; i < lm->terms.n; i++)
        per_head |= lm->terms.terms[i].head_weights != NULL;
    for (int i = 0; i < lm->terms.n; i++)
        if (bk_term_has_table(&lm->terms.terms[i])) {
            for (int h = 0; h < (per_head ? H : 1); h++)
                w[n * (per_head ? H : 1) + h] = (float)bk_term_weight_at(&lm->terms.terms[i], h);
            n++;
        }
    if (!n)
        return;
    int64_t shape[2] = {n, H};
    add_tensor(l, name, w, per_head ? 2 : 1, shape);
}

static int run_reference(const char *path)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s'", python(), REFERENCE_SCRIPT, path);
    fflush(stdout);
    fflush(stderr);
    int status = system(cmd);
    if (status == -1 || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

/* Parameters that make every activation O(1): matrices N(0, (1.5^2 / fan_in)), the embedding N(0, 0.2^2),
 * LayerNorm weights 1 + N(0, 0.2^2), biases N(0, 0.2^2). At GPT-2's initialisation the GELU inputs
 * are ~0.1, where the tanh approximation and the exact GELU agree to 1e-7, and attention is almost
 * uniform; here both are exercised where they differ. */
static void large_weights(bk_gpt *m)
{
    bk_rng rng = {bk_derive_seed(99, 0x6c61726765, 0)};
    for (int i = 0; i < m->n_tensors; i++) {
        const bk_gpt_tensor *t = &m->tensors[i];
        float *x = m->params + t->offset;
        int norm_weight = !strcmp(t->name, "ln1w") || !strcmp(t->name, "ln2w") || !strcmp(t->name, "lnfw") ||
                          !strcmp(t->name, "rms1w") || !strcmp(t->name, "rms2w") || !strcmp(t->name, "rmsfw");
        double std = t->ndim == 3 ? 1.5 / sqrt((double)t->shape[2]) : 0.2;
        for (size_t k = 0; k < t->count; k++)
            x[k] = (float)((norm_weight ? 1.0 : 0.0) + std * bk_rng_normal(&rng));
    }
}

/* The case at sequence length T. */
static void run_case_at(const ref_case *c, int T)
{
    bk_lm lm;
    bk_error err;
    bk_adamw opt;
    memset(&opt, 0, sizeof opt);
    check(bk_lm_open_text(&lm, c->config, c->name, ".", NULL, 0, &err), &err, "bk_lm_open_text");
    check(bk_lm_register(&lm, &opt, &err), &err, "bk_lm_register");
    if (c->large_weights)
        large_weights(&lm.gpt);
    check(bk_bias_forward(&lm.bias, T, &err), &err, "bk_bias_forward");
    const int V = lm.gpt.V;

    /* a fixed random batch: inputs and their next tokens from one random stream */
    int32_t *inputs = malloc(sizeof(int32_t) * BATCH * T), *targets = malloc(sizeof(int32_t) * BATCH * T);
    float *finputs = malloc(sizeof(float) * BATCH * T), *ftargets = malloc(sizeof(float) * BATCH * T);
    int32_t *seq = malloc(sizeof(int32_t) * (T + 1));
    assert_true(inputs && targets && finputs && ftargets && seq);
    bk_rng rng = {bk_derive_seed(20240611, 0x726566, 0)};
    for (int b = 0; b < BATCH; b++) {
        size_t na = c->alphabet ? strlen(c->alphabet) : 0;
        for (int t = 0; t <= T; t++)
            seq[t] = na ? (unsigned char)c->alphabet[bk_rng_u64(&rng) % na] : (int32_t)(bk_rng_u64(&rng) % (uint64_t)V);
        for (int t = 0; t < T; t++) {
            inputs[b * T + t] = seq[t];
            targets[b * T + t] = seq[t + 1];
            finputs[b * T + t] = (float)seq[t];
            ftargets[b * T + t] = (float)seq[t + 1];
        }
    }
    free(seq);

    text j = {0}; /* the description, with the weights as they are before any step */
    describe(&j, c, T, &lm, &opt);
    tensor_list l = {0};
    int64_t bt_shape[2] = {BATCH, T}, logit_shape[3] = {BATCH, T, V};
    add_tensor(&l, "inputs", finputs, 2, bt_shape);
    add_tensor(&l, "targets", ftargets, 2, bt_shape);
    add_groups(&l, &lm, &opt, "", 0);
    add_tables(&l, &lm, T, "");
    add_weights(&l, &lm, "weights");

    check(bk_lm_zero_grad(&lm, &err), &err, "bk_lm_zero_grad");
    check(bk_gpt_forward(&lm.gpt, inputs, targets, BATCH, T, 1, &err), &err, "bk_gpt_forward");
    check(bk_gpt_backward(&lm.gpt, inputs, targets, 1.0f, &err), &err, "bk_gpt_backward");
    add_tensor(&l, "logits", bk_gpt_logits(&lm.gpt), 3, logit_shape);
    add_scalar(&l, "loss", lm.gpt.loss);
    add_groups(&l, &lm, &opt, "grad.", 1);

    /* AdamW steps on the same batch */
    for (int k = 0; k < STEPS; k++) {
        check(bk_lm_zero_grad(&lm, &err), &err, "bk_lm_zero_grad (step)");
        check(bk_gpt_forward(&lm.gpt, inputs, targets, BATCH, T, 1, &err), &err, "bk_gpt_forward (step)");
        check(bk_gpt_backward(&lm.gpt, inputs, targets, 1.0f, &err), &err, "bk_gpt_backward (step)");
        char name[32];
        snprintf(name, sizeof name, "loss_step%d", k);
        add_scalar(&l, name, lm.gpt.loss);
        if (k > 0) { /* where this step starts (step 0: the tensors above) */
            snprintf(name, sizeof name, "step%d.", k);
            add_groups(&l, &lm, &opt, name, 0);
            snprintf(name, sizeof name, "step%d.grad.", k);
            add_groups(&l, &lm, &opt, name, 1);
        }
        check(bk_adamw_step(&opt, LR, BETA1, BETA2, EPS, WEIGHT_DECAY, &err), &err, "bk_adamw_step");
        check(bk_lm_after_step(&lm, T, &err), &err, "bk_lm_after_step");
    }
    /* the loss of the final parameters (the tables were refreshed by bk_lm_after_step) */
    check(bk_gpt_forward(&lm.gpt, inputs, targets, BATCH, T, 1, &err), &err, "bk_gpt_forward (final)");
    add_scalar(&l, "loss_final", lm.gpt.loss);
    check(bk_gpt_forward(&lm.gpt, inputs, targets, BATCH, T, 0, &err), &err, "bk_gpt_forward (eval)");
    add_scalar(&l, "loss_final_eval", lm.gpt.loss);
    add_groups(&l, &lm, &opt, "final.", 0);
    add_tables(&l, &lm, T, "final.");
    add_weights(&l, &lm, "final.weights");

    bk_st_meta meta[1] = {{"case", j.s}};

    const char *tmp = getenv("TMPDIR");
    char path[2048];
    snprintf(path, sizeof path, "%s/bk_reference_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    check(bk_safetensors_write(path, l.items, l.n, meta, 1, &err), &err, "bk_safetensors_write");
    free_tensors(&l);
    free(j.s);
    free(inputs), free(targets), free(finputs), free(ftargets);
    bk_adamw_free(&opt);
    bk_lm_close(&lm);

    int rc = run_reference(path);
    const char *keep = getenv("BK_REFERENCE_KEEP");
    if (keep && *keep && strcmp(keep, "0"))
        printf("case %s: kept %s\n", c->name, path);
    else if (rc == 0)
        unlink(path);
    else
        printf("case %s: the file is kept for inspection: %s\n", c->name, path);
    if (rc != 0)
        fail_msg("case %s: the PyTorch reference disagrees (exit %d), see its output above", c->name, rc);
}

static void run_case(const ref_case *c)
{
    run_case_at(c, LENGTH);
}

/* ---- the cases ---- */

#define MODEL(heads, dim) "[model]\nlayers = 2\nheads = " #heads "\ndim = " #dim "\nvocab = 256\n[train]\nseed = 7\n"

static void alibi_alone(void **state)
{
    (void)state;
    run_case(&(ref_case){"alibi", MODEL(4, 32) "[[term]]\nplugin = \"alibi\"\n", "[{}]", 0, NULL});
}

static void testlin_shared(void **state)
{
    (void)state;
    run_case(&(ref_case){"testlin_shared", MODEL(4, 32) "[[term]]\nplugin = \"testlin\"\ninit = 0.05\n",
                         "[{\"init\": 0.05}]", 0, NULL});
}

/* A small init: the first AdamW step pushes some slopes below 0, where the projection clamps them. */
static void testlin_per_layer(void **state)
{
    (void)state;
    run_case(&(ref_case){"testlin_per_layer",
                         MODEL(4, 32) "[[term]]\nplugin = \"testlin\"\ninit = 0.004\nper_layer = true\n",
                         "[{\"init\": 0.004}]", 0, NULL});
}

static void kernel_learned_weights(void **state)
{
    (void)state;
    run_case(&(ref_case){"kernel_learned",
                         MODEL(4, 32) "[attention]\nmixing = \"kernel\"\nlearn_weights = true\n"
                                      "[[term]]\nplugin = \"alibi\"\nweight = 0.25\n"
                                      "[[term]]\nplugin = \"testlin\"\ninit = 0.1\nweight = 0.75\n",
                         "[{\"weight\": 0.25}, {\"init\": 0.1, \"weight\": 0.75}]", 0, NULL});
}

static void sum_learned_weights(void **state)
{
    (void)state;
    run_case(&(ref_case){"sum_learned",
                         MODEL(4, 32) "[attention]\nmixing = \"sum\"\nlearn_weights = true\n"
                                      "[[term]]\nplugin = \"alibi\"\nslope_scale = 2.0\nweight = 0.5\n"
                                      "[[term]]\nplugin = \"testlin\"\ninit = 0.1\nweight = 1.5\nper_layer = true\n",
                         "[{\"slope_scale\": 2.0, \"weight\": 0.5}, {\"init\": 0.1, \"weight\": 1.5}]", 0, NULL});
}

/* Sum mixing with fixed weights (learn_weights = false): three tables on the token stream, each scaled
 * by its own weight, none of them 1, so that a weight ignored or misapplied changes the mixed table;
 * two of the tables are learnable (KERPLE-log shared, testlin per layer), so their gradients pass
 * through the weights. */
static void sum_fixed_weights(void **state)
{
    (void)state;
    run_case(&(ref_case){"sum_fixed",
                         MODEL(4, 32) "[attention]\nmixing = \"sum\"\nlearn_weights = false\n"
                                      "[[term]]\nplugin = \"kerple\"\nweight = 0.6\n"
                                      "[[term]]\nplugin = \"alibi\"\nslope_scale = 0.5\nweight = 1.5\n"
                                      "[[term]]\nplugin = \"testlin\"\ninit = 0.1\nweight = 2.5\nper_layer = true\n",
                         "[{\"weight\": 0.6}, {\"slope_scale\": 0.5, \"weight\": 1.5}, {\"init\": 0.1, \"weight\": 2.5}]",
                         1, NULL});
}

/* Weights learned per head ([attention] learn_weights = "per_head"): each head's table row mixed with its
 * own weights, ALiBi, a per-layer testlin and KERPLE-log on the token stream; sum (initial weights 0.5,
 * 1.5, 1) and kernel (1:3:4, normalised) mixing, at O(1) activations so that every head's weights get a
 * gradient of their own. */
static void sum_per_head_weights(void **state)
{
    (void)state;
    run_case(&(ref_case){"sum_per_head",
                         MODEL(4, 32) "[attention]\nmixing = \"sum\"\nlearn_weights = \"per_head\"\n"
                                      "[[term]]\nplugin = \"alibi\"\nweight = 0.5\n"
                                      "[[term]]\nplugin = \"testlin\"\ninit = 0.1\nweight = 1.5\nper_layer = true\n"
                                      "[[term]]\nplugin = \"kerple\"\n",
                         "[{\"weight\": 0.5}, {\"init\": 0.1, \"weight\": 1.5}, {}]", 1, NULL});
}

static void kernel_per_head_weights(void **state)
{
    (void)state;
    run_case(&(ref_case){"kernel_per_head",
                         MODEL(4, 32) "[attention]\nmixing = \"kernel\"\nlearn_weights = \"per_head\"\n"
                                      "[[term]]\nplugin = \"alibi\"\nweight = 1.0\n"
                                      "[[term]]\nplugin = \"testlin\"\ninit = 0.1\nweight = 3.0\nper_layer = true\n"
                                      "[[term]]\nplugin = \"kerple\"\nweight = 4.0\n",
                         "[{\"weight\": 1.0}, {\"init\": 0.1, \"weight\": 3.0}, {\"weight\": 4.0}]", 1, NULL});
}

static void nope(void **state)
{
    (void)state;
    run_case(&(ref_case){"nope", MODEL(4, 32), "[]", 0, NULL});
}

/* Six heads (the non-power-of-two slope series), a named second ALiBi term with a uniform slope,
 * kernel mixing with fixed weights 1:3 (normalised to 0.25, 0.75). */
static void alibi_six_heads_kernel_fixed(void **state)
{
    (void)state;
    run_case(&(ref_case){"alibi6_kernel_fixed",
                         MODEL(6, 48) "[attention]\nmixing = \"kernel\"\n"
                                      "[[term]]\nplugin = \"alibi\"\nweight = 1.0\n"
                                      "[[term]]\nplugin = \"alibi\"\nname = \"flat\"\nuniform_slope = 0.05\nweight = 3.0\n",
                         "[{\"weight\": 1.0}, {\"uniform_slope\": 0.05, \"weight\": 3.0}]", 0, NULL});
}

/* Kernel mixing with learned weights and per-layer slopes, at O(1) activations. */
static void kernel_large_weights(void **state)
{
    (void)state;
    run_case(&(ref_case){"kernel_large_weights",
                         MODEL(4, 32) "[attention]\nmixing = \"kernel\"\nlearn_weights = true\n"
                                      "[[term]]\nplugin = \"alibi\"\n"
                                      "[[term]]\nplugin = \"testlin\"\ninit = 0.2\nper_layer = true\n",
                         "[{}, {\"init\": 0.2}]", 1, NULL});
}

/* BiPE-ALiBi: segments at '.' and newline (the batch is drawn from a few letters and both), the
 * learned intra-segment embedding with 5 rows (clamped positions occur), ALiBi x96 on segments, and a
 * token-stream ALiBi beside it (both streams at once). */
#define SEGMENT_TEXT "ab.c\n d."

static void bipe_alibi(void **state)
{
    (void)state;
    run_case(&(ref_case){"bipe_alibi",
                         MODEL(4, 32) "[[term]]\nplugin = \"bipe\"\nmax_position = 5\n"
                                      "[[term]]\nplugin = \"alibi\"\nstream = \"segment\"\nslope_scale = 96.0\n"
                                      "[[term]]\nplugin = \"alibi\"\nname = \"tok\"\nslope_scale = 0.5\n",
                         "[{\"max_position\": 5}, {\"slope_scale\": 96.0}, {\"slope_scale\": 0.5}]", 1, SEGMENT_TEXT});
}

/* BiPE-RoPE with the released code's delimiter rule ('.' closes only after a space). */
static void bipe_rope(void **state)
{
    (void)state;
    run_case(&(ref_case){"bipe_rope",
                         MODEL(4, 32) "[[term]]\nplugin = \"bipe\"\nsemantics = \"code\"\n"
                                      "[[term]]\nplugin = \"rope\"\nstream = \"segment\"\n",
                         "[{\"semantics\": \"code\"}, {}]", 1, SEGMENT_TEXT});
}

static void rope_tokens(void **state)
{
    (void)state;
    run_case(&(ref_case){"rope", MODEL(4, 32) "[[term]]\nplugin = \"rope\"\nbase = 100.0\n", "[{\"base\": 100.0}]", 1,
                         NULL});
}

/* The absolute baselines: a learned table shorter than the sequence (clamped rows), and sinusoidal. */
static void ape_learned(void **state)
{
    (void)state;
    run_case(&(ref_case){"ape_learned",
                         MODEL(4, 32) "[[term]]\nplugin = \"ape\"\nvariant = \"learned\"\nmax_positions = 8\n",
                         "[{\"variant\": \"learned\", \"max_positions\": 8}]", 1, NULL});
}

static void ape_sinusoidal(void **state)
{
    (void)state;
    run_case(&(ref_case){"ape_sinusoidal", MODEL(4, 32) "[[term]]\nplugin = \"ape\"\n", "[{}]", 0, NULL});
}

/* The amplitude set by hand (the default, 1/sqrt(dim), is the case above): the Transformer paper's
 * unit vectors. */
static void ape_sinusoidal_scale(void **state)
{
    (void)state;
    run_case(&(ref_case){"ape_sinusoidal_scale", MODEL(4, 32) "[[term]]\nplugin = \"ape\"\nscale = 1.0\n",
                         "[{\"scale\": 1.0}]", 0, NULL});
}

/* T5 with few buckets, so that the 12-token batch reaches the log-spaced ones; a bidirectional table
 * beside it (keys before the query use its lower half). */
static void t5_buckets(void **state)
{
    (void)state;
    run_case(&(ref_case){"t5",
                         MODEL(4, 32) "[[term]]\nplugin = \"t5\"\nbuckets = 8\nmax_distance = 12\nscale = 2.0\n"
                                      "[[term]]\nplugin = \"t5\"\nname = \"bidir\"\nbuckets = 8\nmax_distance = 10\n"
                                      "bidirectional = true\nper_layer = true\n",
                         "[{\"buckets\": 8, \"max_distance\": 12, \"scale\": 2.0}, "
                         "{\"buckets\": 8, \"max_distance\": 10, \"bidirectional\": true}]",
                         1, NULL});
}

/* KERPLE-log with its random initialisation (shared across layers, as the paper). */
static void kerple_log(void **state)
{
    (void)state;
    run_case(&(ref_case){"kerple_log", MODEL(4, 32) "[[term]]\nplugin = \"kerple\"\n", "[{}]", 1, NULL});
}

/* KERPLE-power per layer, exponents started at 1.99 so that the first steps push some past 2, where
 * the projection clamps them (as the official code does). */
static void kerple_power(void **state)
{
    (void)state;
    run_case(&(ref_case){"kerple_power",
                         MODEL(4, 32) "[[term]]\nplugin = \"kerple\"\nvariant = \"power\"\nr2 = [1.99]\nper_layer = true\n",
                         "[{\"variant\": \"power\"}]", 1, NULL});
}

/* KERPLE 3-para-log per layer, exponents r3 started at 1.99 so that the first steps push some past 2,
 * where the projection clamps them (as for power). */
static void kerple_3para_log(void **state)
{
    (void)state;
    run_case(&(ref_case){"kerple_3para_log",
                         MODEL(4, 32) "[[term]]\nplugin = \"kerple\"\nvariant = \"3para-log\"\nr3 = [1.99]\n"
                                      "per_layer = true\n",
                         "[{\"variant\": \"3para-log\"}]", 1, NULL});
}

/* Qin et al.'s Type 1, as examples/qin_type1.toml uses it (the default form). */
static void qin_type1(void **state)
{
    (void)state;
    run_case(&(ref_case){"qin_type1", MODEL(4, 32) "[[term]]\nplugin = \"qin\"\n", "[{}]", 1, NULL});
}

/* Qin's Type 2 and the two divergent probes (nlogn with a non-default offset), summed with learned
 * weights, so that each table also reaches a gradient (the weights'). */
static void qin_forms(void **state)
{
    (void)state;
    run_case(&(ref_case){"qin_forms",
                         MODEL(4, 32) "[attention]\nmixing = \"sum\"\nlearn_weights = true\n"
                                      "[[term]]\nplugin = \"qin\"\nform = \"type2\"\n"
                                      "[[term]]\nplugin = \"qin\"\nname = \"h\"\nform = \"harmonic\"\nweight = 0.5\n"
                                      "[[term]]\nplugin = \"qin\"\nname = \"n\"\nform = \"nlogn\"\noffset = 3\n"
                                      "weight = 0.5\n",
                         "[{\"form\": \"type2\"}, {\"form\": \"harmonic\", \"weight\": 0.5}, "
                         "{\"form\": \"nlogn\", \"offset\": 3, \"weight\": 0.5}]",
                         1, NULL});
}

static void mep_free(void **state)
{
    (void)state;
    run_case(&(ref_case){"mep_free", MODEL(6, 48) "[[term]]\nplugin = \"mep\"\n", "[{}]", 1, NULL});
}

static void mep_param(void **state)
{
    (void)state;
    run_case(&(ref_case){"mep_param", MODEL(4, 32) "[[term]]\nplugin = \"mep\"\nvariant = \"param\"\n",
                         "[{\"variant\": \"param\"}]", 1, NULL});
}

/* Two plugins mixed in kernel space with learned weights on the token stream (KERPLE-log + ALiBi),
 * and BiPE with a T5 table on the segment stream beside them (its own learned weight). */
static void kernel_mixture_two_plugins(void **state)
{
    (void)state;
    run_case(&(ref_case){"kerple_alibi_kernel",
                         MODEL(4, 32) "[attention]\nmixing = \"kernel\"\nlearn_weights = true\n"
                                      "[[term]]\nplugin = \"kerple\"\nweight = 0.7\n"
                                      "[[term]]\nplugin = \"alibi\"\nweight = 0.3\n"
                                      "[[term]]\nplugin = \"bipe\"\nintra_embedding = false\n"
                                      "[[term]]\nplugin = \"t5\"\nstream = \"segment\"\nbuckets = 8\nmax_distance = 12\n",
                         "[{\"weight\": 0.7}, {\"weight\": 0.3}, {\"intra_embedding\": false}, "
                         "{\"buckets\": 8, \"max_distance\": 12}]",
                         1, SEGMENT_TEXT});
}

/* T = 130, past the attention's 64-row query blocks: three blocks (64, 64, 2) in the training forward
 * (probabilities kept), the evaluation forward (loss_final_eval, one block of scores at a time) and the
 * backward's reduction of score gradients into table gradients, on both streams: KERPLE 3-para-log and
 * ALiBi mixed in kernel space with learned weights on tokens, BiPE's segments with T5 (log-spaced
 * buckets reached) on segment distances. */
static void long_blocked(void **state)
{
    (void)state;
    run_case_at(&(ref_case){"long_blocked",
                            MODEL(4, 32) "[attention]\nmixing = \"kernel\"\nlearn_weights = true\n"
                                         "[[term]]\nplugin = \"kerple\"\nvariant = \"3para-log\"\nweight = 0.7\n"
                                         "[[term]]\nplugin = \"alibi\"\nweight = 0.3\n"
                                         "[[term]]\nplugin = \"bipe\"\nmax_position = 6\n"
                                         "[[term]]\nplugin = \"t5\"\nstream = \"segment\"\n"
                                         "buckets = 8\nmax_distance = 40\n",
                            "[{\"variant\": \"3para-log\", \"weight\": 0.7}, {\"weight\": 0.3}, {\"max_position\": 6}, "
                            "{\"buckets\": 8, \"max_distance\": 40}]",
                            1, SEGMENT_TEXT},
                130);
}

/* ---- ABI 2 terms: FIRE (the reference computes the exact bias; the engine interpolates its grid), the
 * window with sinks and LM-Infinite's distance cap, the logit scales, RoPE with each length scaling ---- */

/* FIRE per layer, width 8, threshold 6 < T = 12: rows 0..6 read the constant normaliser psi(6), rows 7..11
 * psi(i); large weights so that the ReLU kinks are crossed. The reference tabulates the MLP on the default
 * grid (1025 points) and interpolates as the engine does: every value and gradient of the engine's FIRE is
 * checked; how far the grid is from the exact MLP is test_fire's (against exact FIRE in PyTorch). */
static void fire_per_layer(void **state)
{
    (void)state;
    run_case(&(ref_case){"fire", MODEL(4, 32) "[[term]]\nplugin = \"fire\"\nwidth = 8\nthreshold = 6\n",
                         "[{\"width\": 8, \"threshold\": 6}]", 1, NULL});
}

/* A coarse grid (9 points): cells wide enough that most pairs interpolate between kinks. */
static void fire_coarse_grid(void **state)
{
    (void)state;
    run_case(&(ref_case){"fire_coarse", MODEL(4, 32) "[[term]]\nplugin = \"fire\"\nwidth = 8\ngrid = 9\n",
                         "[{\"width\": 8, \"grid\": 9}]", 1, NULL});
}

/* FIRE beside ALiBi, at T = 130 (past the CPU attention's 64-row blocks), the threshold default. */
static void fire_alibi_long(void **state)
{
    (void)state;
    run_case_at(&(ref_case){"fire_alibi_long",
                            MODEL(4, 32) "[[term]]\nplugin = \"alibi\"\n[[term]]\nplugin = \"fire\"\nwidth = 4\n",
                            "[{}, {\"width\": 4}]", 0, NULL},
                130);
}

/* A window of 4 keys with 2 sinks and the tables read at min(d, 5) (LM-Infinite's Lambda-shape), with
 * ALiBi and a learnable table on tokens. */
static void window_sinks_cap(void **state)
{
    (void)state;
    run_case(&(ref_case){"window_sinks_cap",
                         MODEL(4, 32) "[[term]]\nplugin = \"alibi\"\n[[term]]\nplugin = \"testlin\"\ninit = 0.05\n"
                                      "[[term]]\nplugin = \"window\"\nwindow = 4\nsinks = 2\ndistance_cap = 5\n",
                         "[{}, {\"init\": 0.05}, {\"window\": 4, \"sinks\": 2, \"distance_cap\": 5}]", 1, NULL});
}

/* Kernel mixing with learned weights under a mask: the mixture is formed first, then the mask makes its
 * entries -inf exactly (a masked entry stays masked, whatever the mixing). */
static void window_kernel_mix(void **state)
{
    (void)state;
    run_case(&(ref_case){"window_kernel",
                         MODEL(4, 32) "[attention]\nmixing = \"kernel\"\nlearn_weights = true\n"
                                      "[[term]]\nplugin = \"kerple\"\nweight = 0.6\n[[term]]\nplugin = \"alibi\"\nweight = 0.4\n"
                                      "[[term]]\nplugin = \"window\"\nwindow = 5\nsinks = 1\n",
                         "[{\"weight\": 0.6}, {\"weight\": 0.4}, {\"window\": 5, \"sinks\": 1}]", 1, NULL});
}

/* A window of 20 with 3 sinks at T = 130: the CPU attention's blocks skip the keys no row sees. */
static void window_long(void **state)
{
    (void)state;
    run_case_at(&(ref_case){"window_long",
                            MODEL(4, 32) "[[term]]\nplugin = \"kerple\"\n[[term]]\nplugin = \"window\"\nwindow = 20\n"
                                         "sinks = 3\n",
                            "[{}, {\"window\": 20, \"sinks\": 3}]", 1, NULL},
                130);
}

static void ssmax_per_layer(void **state)
{
    (void)state;
    run_case(&(ref_case){"ssmax", MODEL(4, 32) "[[term]]\nplugin = \"ssmax\"\n[[term]]\nplugin = \"alibi\"\n",
                         "[{}, {}]", 1, NULL});
}

static void logn_scale(void **state)
{
    (void)state;
    run_case(&(ref_case){"logn", MODEL(4, 32) "[[term]]\nplugin = \"logn\"\n", "[{}]", 1, NULL});
}

/* ---- the content position: the Forgetting Transformer's forget gate (plugins/fox) ---- */

/* FoX alone (NoPE otherwise), per layer, the paper's initialisation (w ~ N(0, 0.02), b = 0), with O(1)
 * activations so that the gates spread. Every gradient through the steps reaches w, b and the layers below
 * through the first LayerNorm's output. */
static void fox_full(void **state)
{
    (void)state;
    run_case(&(ref_case){"fox", MODEL(4, 32) "[[term]]\nplugin = \"fox\"\n", "[{}]", 1, NULL});
}

/* A large w_std (gates far from 1/2) shared by the layers, beside ALiBi and a window with sinks, at T = 130:
 * past the CPU attention's 64-row blocks, the sinks' and the window's columns each add their part of dL/dP. */
static void fox_window_long(void **state)
{
    (void)state;
    run_case_at(&(ref_case){"fox_window_long",
                            MODEL(4, 32) "[[term]]\nplugin = \"alibi\"\n[[term]]\nplugin = \"fox\"\nper_layer = false\n"
                                         "w_std = 0.5\n[[term]]\nplugin = \"window\"\nwindow = 20\nsinks = 3\n",
                            "[{}, {\"w_std\": 0.5}, {\"window\": 20, \"sinks\": 3}]", 1, NULL},
                130);
}

/* The data-independent gate with the timescale initialisation: ALiBi with learned slopes softplus(-b_h). */
static void fox_bias_only(void **state)
{
    (void)state;
    run_case(&(ref_case){"fox_bias_only",
                         MODEL(4, 32) "[[term]]\nplugin = \"fox\"\ngate = \"bias_only\"\nbias_init = \"timescales\"\n"
                                      "t_max = 20.0\n",
                         "[{\"gate\": \"bias_only\", \"bias_init\": \"timescales\", \"t_max\": 20.0}]", 1, NULL});
}

/* ---- counted positions: CoPE (plugins/cope) ---- */

/* CoPE per layer with 6 position vectors (counts clamp within the 12 tokens), the vectors drawn at std 0.5
 * so that the gates' gradient is not 0 from the first step (the plugin's default is zeros). */
static void cope_clamped(void **state)
{
    (void)state;
    run_case(&(ref_case){"cope", MODEL(4, 32) "[[term]]\nplugin = \"cope\"\npoints = 6\ninit_std = 0.5\n",
                         "[{\"points\": 6, \"init_std\": 0.5}]", 1, NULL});
}

/* CoPE after RoPE's rotation, under Scalable-Softmax's logit scale (the gates read q.k before it), the
 * vectors unscaled (pos_scale = "none") and shared by the layers, with the default points (training
 * length + 1: no clamping). */
static void cope_rope_ssmax(void **state)
{
    (void)state;
    run_case(&(ref_case){"cope_rope_ssmax",
                         MODEL(4, 32) "[[term]]\nplugin = \"rope\"\n[[term]]\nplugin = \"ssmax\"\n"
                                      "[[term]]\nplugin = \"cope\"\nper_layer = false\npos_scale = \"none\"\n"
                                      "init_std = 0.3\n",
                         "[{}, {}, {\"pos_scale\": \"none\", \"init_std\": 0.3}]", 1, NULL});
}

/* CoPE beside KERPLE and a window of 20 with 3 sinks at T = 130: the counts run over the sinks and the
 * window only, across the CPU attention's 64-row blocks; 40 vectors, so long rows clamp. */
static void cope_window_long(void **state)
{
    (void)state;
    run_case_at(&(ref_case){"cope_window_long",
                            MODEL(4, 32) "[[term]]\nplugin = \"kerple\"\n[[term]]\nplugin = \"cope\"\npoints = 40\n"
                                         "init_std = 0.5\n[[term]]\nplugin = \"window\"\nwindow = 20\nsinks = 3\n",
                            "[{}, {\"points\": 40, \"init_std\": 0.5}, {\"window\": 20, \"sinks\": 3}]", 1, NULL},
                130);
}

/* ---- the LLaMA family ([model] family = "llama": RMSNorm, SwiGLU, grouped-query attention, no biases) ---- */

#define LLAMA(heads, kv, head_dim, dim, ffn, extra)                                                                \
    "[model]\nfamily = \"llama\"\nlayers = 2\nheads = " #heads "\nkv_heads = " #kv "\nhead_dim = " #head_dim        \
    "\ndim = " #dim "\nffn_dim = " #ffn "\nvocab = 256\n" extra "[train]\nseed = 7\n"

/* RoPE (base 100: every pair turns within 12 tokens) on 4 query heads sharing 2 key/value heads, tied. */
static void llama_rope_gqa(void **state)
{
    (void)state;
    run_case(&(ref_case){"llama_rope_gqa", LLAMA(4, 2, 8, 32, 48, "") "[[term]]\nplugin = \"rope\"\nbase = 100.0\n",
                         "[{\"base\": 100.0}]", 1, NULL});
}

/* One key/value head for 4 query heads of 12 (attention width 48 beside dim 32), an untied output head and
 * RMSNorm's eps 1e-6; ALiBi and a window of 20 with 3 sinks at T = 130, past the attention's 64-row blocks. */
static void llama_untied_alibi_window_long(void **state)
{
    (void)state;
    run_case_at(&(ref_case){"llama_untied_alibi_window_long",
                            LLAMA(4, 1, 12, 32, 40, "tied = false\nnorm_eps = 1e-6\n")
                            "[[term]]\nplugin = \"alibi\"\n[[term]]\nplugin = \"window\"\nwindow = 20\nsinks = 3\n",
                            "[{}, {\"window\": 20, \"sinks\": 3}]", 1, NULL},
                130);
}

/* QK-norm (each query and key head RMS-normalised with its layer's weights, then rotated) on 4 query heads
 * sharing 2 key/value heads, untied, RoPE with YaRN. */
static void llama_qk_norm_rope(void **state)
{
    (void)state;
    run_case(&(ref_case){"llama_qk_norm_rope",
                         LLAMA(4, 2, 8, 32, 48, "qk_norm = true\ntied = false\n")
                         "[[term]]\nplugin = \"rope\"\nbase = 100.0\nscaling = \"yarn\"\nfactor = 2.0\n",
                         "[{\"base\": 100.0, \"scaling\": \"yarn\", \"factor\": 2.0}]", 1, NULL});
}

/* FIRE's coordinate table under Scalable-Softmax's logit scale, without GQA. */
static void llama_fire_ssmax(void **state)
{
    (void)state;
    run_case(&(ref_case){"llama_fire_ssmax",
                         LLAMA(4, 4, 8, 32, 48, "") "[[term]]\nplugin = \"fire\"\nwidth = 8\nthreshold = 6\n"
                                                    "[[term]]\nplugin = \"ssmax\"\n",
                         "[{\"width\": 8, \"threshold\": 6}, {}]", 1, NULL});
}

/* CoPE after YaRN-scaled RoPE on heads of 12 with 2 key/value heads, and FoX's forget gate reading the
 * RMSNorm output (the content terms). */
static void llama_cope_fox_yarn(void **state)
{
    (void)state;
    run_case(&(ref_case){"llama_cope_fox_yarn",
                         LLAMA(4, 2, 12, 32, 40, "") "[[term]]\nplugin = \"rope\"\nbase = 100.0\nscaling = \"yarn\"\n"
                                                      "factor = 2.0\n[[term]]\nplugin = \"cope\"\npoints = 6\n"
                                                      "init_std = 0.5\n[[term]]\nplugin = \"fox\"\n",
                         "[{\"base\": 100.0, \"scaling\": \"yarn\", \"factor\": 2.0}, {\"points\": 6, \"init_std\": 0.5}, "
                         "{}]",
                         1, NULL});
}

/* ---- terms in some layers only ([[term]] layers) ---- */

/* Four layers: RoPE and a window of 5 with 2 sinks in layers 0 and 2 (a pattern and a list), full NoPE
 * attention with a learned testlin table in layers 1 and 3, ALiBi in all of them; the mixing weights learn,
 * so a weight gets gradients only from the layers its term acts in. The options' "layers" lists are what
 * the reference applies: they restate what each key selects. */
static void layers_hybrid(void **state)
{
    (void)state;
    run_case(&(ref_case){"layers_hybrid",
                         "[model]\nlayers = 4\nheads = 4\ndim = 32\nvocab = 256\n[train]\nseed = 7\n"
                         "[attention]\nmixing = \"sum\"\nlearn_weights = true\n"
                         "[[term]]\nplugin = \"rope\"\nbase = 100.0\nlayers = \"except every 2 from 1\"\n"
                         "[[term]]\nplugin = \"window\"\nwindow = 5\nsinks = 2\nlayers = [0, 2]\n"
                         "[[term]]\nplugin = \"testlin\"\ninit = 0.1\nweight = 1.5\nlayers = \"every 2 from 1\"\n"
                         "[[term]]\nplugin = \"alibi\"\nweight = 0.5\n",
                         "[{\"base\": 100.0, \"layers\": [0, 2]}, {\"window\": 5, \"sinks\": 2, \"layers\": [0, 2]}, "
                         "{\"init\": 0.1, \"weight\": 1.5, \"layers\": [1, 3]}, {\"weight\": 0.5}]",
                         0, NULL});
}

/* Kernel mixing with learned weights, one table term in the first layer only (a layer with one term on the
 * stream and one with two); a per-layer coordinate table (FIRE) in the last layer. */
static void layers_kernel_fire(void **state)
{
    (void)state;
    run_case(&(ref_case){"layers_kernel_fire",
                         "[model]\nlayers = 3\nheads = 4\ndim = 32\nvocab = 256\n[train]\nseed = 7\n"
                         "[attention]\nmixing = \"kernel\"\nlearn_weights = true\n"
                         "[[term]]\nplugin = \"alibi\"\nweight = 0.25\nlayers = \"first 1\"\n"
                         "[[term]]\nplugin = \"testlin\"\ninit = 0.1\nweight = 0.75\n"
                         "[[term]]\nplugin = \"fire\"\nwidth = 8\nthreshold = 6\nlayers = \"last 1\"\n",
                         "[{\"weight\": 0.25, \"layers\": [0]}, {\"init\": 0.1, \"weight\": 0.75}, "
                         "{\"width\": 8, \"threshold\": 6, \"layers\": [2]}]",
                         0, NULL});
}

/* The llama blocks with NoPE every 4th layer (RoPE "except every 4 from 3", as SmolLM3 and Llama 4's iRoPE)
 * and Scalable-Softmax's logit scale in that layer only (iRoPE's query temperature on its NoPE layers); FoX's
 * forget gate in layers 1 and 3. */
static void llama_nope_every_4(void **state)
{
    (void)state;
    run_case(&(ref_case){"llama_nope_every_4",
                         "[model]\nfamily = \"llama\"\nlayers = 4\nheads = 4\nkv_heads = 2\nhead_dim = 8\ndim = 32\n"
                         "ffn_dim = 48\nvocab = 256\n[train]\nseed = 7\n"
                         "[[term]]\nplugin = \"rope\"\nbase = 100.0\nlayers = \"except every 4 from 3\"\n"
                         "[[term]]\nplugin = \"ssmax\"\nlayers = [3]\n"
                         "[[term]]\nplugin = \"fox\"\nlayers = [1, 3]\n",
                         "[{\"base\": 100.0, \"layers\": [0, 1, 2]}, {\"layers\": [3]}, {\"layers\": [1, 3]}]", 1,
                         NULL});
}

/* RoPE scaled as the options say, base 100 so that the ramp of YaRN falls inside the 4 pairs of a head of 8. */
static void rope_scaled(const char *name, const char *options_toml, const char *options_json)
{
    char config[768], json[512];
    snprintf(config, sizeof config, "%s[[term]]\nplugin = \"rope\"\nbase = 100.0\n%s", MODEL(4, 32), options_toml);
    snprintf(json, sizeof json, "[{\"base\": 100.0, %s}]", options_json);
    run_case(&(ref_case){name, config, json, 1, NULL});
}

static void rope_pi(void **state)
{
    (void)state;
    rope_scaled("rope_pi", "scaling = \"pi\"\nfactor = 4.0\n", "\"scaling\": \"pi\", \"factor\": 4.0");
}

static void rope_ntk(void **state)
{
    (void)state;
    rope_scaled("rope_ntk", "scaling = \"ntk\"\nfactor = 4.0\n", "\"scaling\": \"ntk\", \"factor\": 4.0");
}

static void rope_yarn(void **state)
{
    (void)state;
    rope_scaled("rope_yarn", "scaling = \"yarn\"\nfactor = 8.0\noriginal_length = 64\n",
                "\"scaling\": \"yarn\", \"factor\": 8.0, \"original_length\": 64");
}

/* Dynamic YaRN: s = max(1, T / L) = 12 / 4 = 3 at this case's length. */
static void rope_yarn_dynamic(void **state)
{
    (void)state;
    rope_scaled("rope_yarn_dynamic", "scaling = \"yarn\"\nfactor = 0.0\noriginal_length = 4\n",
                "\"scaling\": \"yarn\", \"factor\": 0.0, \"original_length\": 4");
}

/* LongRoPE: T = 12 beyond original_length 6, so the long factors, and the attention factor of s = 4. */
static void rope_longrope_long(void **state)
{
    (void)state;
    rope_scaled("rope_longrope_long",
                "scaling = \"longrope\"\nfactor = 4.0\noriginal_length = 6\nshort_factor = [1.0, 1.5, 2.0, 3.0]\n"
                "long_factor = [1.0, 2.0, 4.0, 8.0]\n",
                "\"scaling\": \"longrope\", \"factor\": 4.0, \"original_length\": 6, \"short_factor\": [1.0, 1.5, 2.0, "
                "3.0], \"long_factor\": [1.0, 2.0, 4.0, 8.0]");
}

/* ... within original_length 64: the short factors, attn_factor 0.9 on top. */
static void rope_longrope_short(void **state)
{
    (void)state;
    rope_scaled("rope_longrope_short",
                "scaling = \"longrope\"\nfactor = 2.0\noriginal_length = 64\nattn_factor = 0.9\n"
                "short_factor = [1.2, 1.5, 2.0, 2.5]\nlong_factor = [5.0, 6.0, 7.0, 8.0]\n",
                "\"scaling\": \"longrope\", \"factor\": 2.0, \"original_length\": 64, \"attn_factor\": 0.9, "
                "\"short_factor\": [1.2, 1.5, 2.0, 2.5], \"long_factor\": [5.0, 6.0, 7.0, 8.0]");
}

/* Resonance YaRN: YaRN's frequencies, then each wavelength rounded to an integer. */
static void rope_resonance_yarn(void **state)
{
    (void)state;
    rope_scaled("rope_resonance_yarn", "scaling = \"yarn\"\nfactor = 2.0\noriginal_length = 6\nresonance = true\n",
                "\"scaling\": \"yarn\", \"factor\": 2.0, \"original_length\": 6, \"resonance\": true");
}

/* xPos: RoPE and the decay zeta_k^((i - j) / scale_base), scale_base 8 so that it is felt within 12 tokens;
 * and in the llama blocks with grouped-query attention. */
static void xpos_alone(void **state)
{
    (void)state;
    run_case(&(ref_case){"xpos", MODEL(4, 32) "[[term]]\nplugin = \"xpos\"\nbase = 100.0\nscale_base = 8.0\n",
                         "[{\"base\": 100.0, \"scale_base\": 8.0}]", 0, NULL});
}

static void llama_xpos(void **state)
{
    (void)state;
    run_case(&(ref_case){"llama_xpos",
                         LLAMA(4, 2, 8, 32, 48, "") "[[term]]\nplugin = \"xpos\"\ngamma = 0.2\nscale_base = 4.0\n",
                         "[{\"gamma\": 0.2, \"scale_base\": 4.0}]", 1, NULL});
}

/* p-RoPE: half of the 4 pairs turn (the two highest frequencies). */
static void rope_partial(void **state)
{
    (void)state;
    rope_scaled("rope_partial", "partial = 0.5\n", "\"partial\": 0.5");
}

/* Training-free extension (rope's extend; two position views merged by their log-sum-exps): Self-Extend
 * (window 4, group 3), ReRoPE (window 5) and leaky ReRoPE (window 3, k = 4), STRING (shift 5, window 2)
 * at T = 12; Self-Extend in the llama blocks with grouped-query attention; and at T = 130 (window 20,
 * group 8, past the 64-row blocks and 256-key tiles of the flash passes). Forward, backward and steps,
 * as every case. */
static void rope_self_extend(void **state)
{
    (void)state;
    rope_scaled("rope_self_extend", "extend = \"self-extend\"\nwindow = 4\ngroup = 3\n",
                "\"extend\": \"self-extend\", \"window\": 4, \"group\": 3");
}

static void rope_rerope(void **state)
{
    (void)state;
    rope_scaled("rope_rerope", "extend = \"rerope\"\nwindow = 5\n", "\"extend\": \"rerope\", \"window\": 5");
}

static void rope_rerope_leaky(void **state)
{
    (void)state;
    rope_scaled("rope_rerope_leaky", "extend = \"rerope\"\nwindow = 3\nleaky = 4.0\n",
                "\"extend\": \"rerope\", \"window\": 3, \"leaky\": 4.0");
}

static void rope_string(void **state)
{
    (void)state;
    rope_scaled("rope_string", "extend = \"string\"\nshift = 5\nwindow = 2\n",
                "\"extend\": \"string\", \"shift\": 5, \"window\": 2");
}

static void llama_self_extend(void **state)
{
    (void)state;
    run_case(&(ref_case){"llama_self_extend",
                         LLAMA(4, 2, 8, 32, 48, "") "[[term]]\nplugin = \"rope\"\nbase = 100.0\n"
                                                   "extend = \"self-extend\"\nwindow = 3\ngroup = 2\n",
                         "[{\"base\": 100.0, \"extend\": \"self-extend\", \"window\": 3, \"group\": 2}]", 1,
                         NULL});
}

static void self_extend_long(void **state)
{
    (void)state;
    run_case_at(&(ref_case){"self_extend_long",
                            MODEL(4, 32) "[[term]]\nplugin = \"rope\"\nbase = 100.0\nextend = \"self-extend\"\n"
                                         "window = 20\ngroup = 8\n",
                            "[{\"base\": 100.0, \"extend\": \"self-extend\", \"window\": 20, \"group\": 8}]",
                            1, NULL},
                130);
}

int main(void)
{
    char probe[600];
    snprintf(probe, sizeof probe, "'%s' -c 'import torch' >/dev/null 2>&1", python());
    if (system(probe) != 0) {
        printf("test_reference: skipped: %s cannot import torch (install python3-torch, or set BIASKIT_PYTHON)\n",
               python());
        return 77;
    }
    setenv("BIASKIT_PLUGIN_PATH", BK_TEST_PLUGIN_DIR ":" BK_TEST_PLUGINS_DIR, 1);
    if (getenv("BK_REFERENCE_ONLY")) /* e.g. BK_REFERENCE_ONLY='fire*': the cases whose function name matches */
        cmocka_set_test_filter(getenv("BK_REFERENCE_ONLY"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(alibi_alone),
        cmocka_unit_test(testlin_shared),
        cmocka_unit_test(testlin_per_layer),
        cmocka_unit_test(kernel_learned_weights),
        cmocka_unit_test(sum_learned_weights),
        cmocka_unit_test(sum_fixed_weights),
        cmocka_unit_test(sum_per_head_weights),
        cmocka_unit_test(kernel_per_head_weights),
        cmocka_unit_test(nope),
        cmocka_unit_test(alibi_six_heads_kernel_fixed),
        cmocka_unit_test(kernel_large_weights),
        cmocka_unit_test(bipe_alibi),
        cmocka_unit_test(bipe_rope),
        cmocka_unit_test(rope_tokens),
        cmocka_unit_test(ape_learned),
        cmocka_unit_test(ape_sinusoidal),
        cmocka_unit_test(ape_sinusoidal_scale),
        cmocka_unit_test(t5_buckets),
        cmocka_unit_test(kerple_log),
        cmocka_unit_test(kerple_power),
        cmocka_unit_test(mep_free),
        cmocka_unit_test(mep_param),
        cmocka_unit_test(kernel_mixture_two_plugins),
        cmocka_unit_test(kerple_3para_log),
        cmocka_unit_test(qin_type1),
        cmocka_unit_test(qin_forms),
        cmocka_unit_test(long_blocked),
        cmocka_unit_test(fox_full),
        cmocka_unit_test(fox_window_long),
        cmocka_unit_test(fox_bias_only),
        cmocka_unit_test(cope_clamped),
        cmocka_unit_test(cope_rope_ssmax),
        cmocka_unit_test(cope_window_long),
        cmocka_unit_test(llama_rope_gqa),
        cmocka_unit_test(llama_qk_norm_rope),
        cmocka_unit_test(rope_longrope_long),
        cmocka_unit_test(rope_longrope_short),
        cmocka_unit_test(rope_resonance_yarn),
        cmocka_unit_test(rope_partial),
        cmocka_unit_test(rope_self_extend),
        cmocka_unit_test(rope_rerope),
        cmocka_unit_test(rope_rerope_leaky),
        cmocka_unit_test(rope_string),
        cmocka_unit_test(llama_self_extend),
        cmocka_unit_test(self_extend_long),
        cmocka_unit_test(xpos_alone),
        cmocka_unit_test(llama_xpos),
        cmocka_unit_test(layers_hybrid),
        cmocka_unit_test(layers_kernel_fire),
        cmocka_unit_test(llama_nope_every_4),
        cmocka_unit_test(llama_untied_alibi_window_long),
        cmocka_unit_test(llama_fire_ssmax),
        cmocka_unit_test(llama_cope_fox_yarn),
        cmocka_unit_test(fire_per_layer),
        cmocka_unit_test(fire_coarse_grid),
        cmocka_unit_test(fire_alibi_long),
        cmocka_unit_test(window_sinks_cap),
        cmocka_unit_test(window_long),
        cmocka_unit_test(window_kernel_mix),
        cmocka_unit_test(ssmax_per_layer),
        cmocka_unit_test(logn_scale),
        cmocka_unit_test(rope_pi),
        cmocka_unit_test(rope_ntk),
        cmocka_unit_test(rope_yarn),
        cmocka_unit_test(rope_yarn_dynamic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
