/* Test helper: one forward and backward of a checkpoint's model on the CPU, for the peer test against HF
 * transformers (tests/hf_peer.py).
 *
 * usage: ckpt_dump CKPT IDS B T OUT.safetensors
 *   IDS holds B rows of T + 1 token ids (int32, little-endian): row b's first T ids are the inputs, its last T
 *   the targets. OUT gets, in float32: "logits" [B, T, V], "loss" [1] (the mean over the B T targets, as
 *   train and eval compute it), "losses" [B, T], and for every trainable tensor under its optimizer name
 *   (train/lm.h: model.<tensor>, term.<label>.theta, mix.<stream>) "param.<name>" (its values as loaded) and
 *   "grad.<name>" (d loss / d values): a model tensor with its shape, the others flat. */
#include "io/safetensors.h"
#include "train/checkpoint.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, const bk_error *err)
{
    fprintf(stderr, "ckpt_dump: %s%s%s\n", what, err ? ": " : "", err ? err->message : "");
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: ckpt_dump CKPT IDS B T OUT.safetensors\n");
        return 2;
    }
    const int B = atoi(argv[3]), T = atoi(argv[4]);
    if (B < 1 || T < 1 || (size_t)B * (size_t)(T + 1) > ((size_t)1 << 28))
        return fail("B and T must be positive", NULL);
    const size_t n_ids = (size_t)B * (size_t)(T + 1);
    int32_t *ids = malloc(n_ids * sizeof *ids), *in = malloc((size_t)B * T * sizeof *in),
            *tg = malloc((size_t)B * T * sizeof *tg);
    FILE *f = fopen(argv[2], "rb");
    if (!ids || !in || !tg || !f || fread(ids, sizeof *ids, n_ids, f) != n_ids)
        return fail("cannot read B (T + 1) int32 ids from IDS", NULL);
    fclose(f);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            in[(size_t)b * T + t] = ids[(size_t)b * (T + 1) + t];
            tg[(size_t)b * T + t] = ids[(size_t)b * (T + 1) + t + 1];
        }
    bk_lm lm;
    bk_adamw opt;
    bk_train_state st;
    bk_error err;
    memset(&opt, 0, sizeof opt);
    if (bk_checkpoint_load(argv[1], NULL, 0, &lm, NULL, &st, &err))
        return fail(argv[1], &err);
    bk_gpt *m = &lm.gpt;
    if (bk_lm_register(&lm, &opt, &err) || bk_bias_forward(&lm.bias, T, &err) || bk_lm_zero_grad(&lm, &err) ||
        bk_gpt_forward(m, in, tg, B, T, 1, &err) || bk_gpt_backward(m, in, tg, 1.0f, &err) ||
        bk_lm_gradients_ready(&lm, &err) || bk_gpt_to_host(m, &err))
        return fail("forward and backward", &err);
    const size_t n_logits = (size_t)B * T * (size_t)m->V;
    float *logits = malloc(n_logits * sizeof *logits);
    if (!logits || bk_gpt_copy_logits(m, logits, &err))
        return fail("logits", logits ? &err : NULL);
    const float loss = m->loss;
    const int n = 3 + 2 * opt.n_groups;
    bk_st_tensor *t = calloc((size_t)n, sizeof *t);
    char(*names)[128] = calloc((size_t)n, sizeof *names);
    if (!t || !names)
        return fail("out of memory", NULL);
    t[0] = (bk_st_tensor){"logits", 3, {B, T, m->V}, logits};
    t[1] = (bk_st_tensor){"loss", 1, {1}, &loss};
    t[2] = (bk_st_tensor){"losses", 2, {B, T}, m->losses};
    for (int i = 0; i < opt.n_groups; i++) {
        const bk_param_group *g = &opt.groups[i];
        bk_st_tensor *p = &t[3 + 2 * i], *d = p + 1;
        snprintf(names[3 + 2 * i], sizeof names[0], "param.%s", g->name);
        snprintf(names[4 + 2 * i], sizeof names[0], "grad.%s", g->name);
        p->name = names[3 + 2 * i], d->name = names[4 + 2 * i];
        p->ndim = d->ndim = 1;
        p->shape[0] = d->shape[0] = (int64_t)g->n;
        for (int k = 0; k < m->n_tensors; k++) /* a model tensor keeps its shape */
            if (!strncmp(g->name, "model.", 6) && !strcmp(g->name + 6, m->tensors[k].name)) {
                p->ndim = d->ndim = m->tensors[k].ndim;
                memcpy(p->shape, m->tensors[k].shape, sizeof m->tensors[k].shape);
                memcpy(d->shape, m->tensors[k].shape, sizeof m->tensors[k].shape);
            }
        /* the host copies: the model's (bk_gpt_to_host above), the terms' and mixing weights' */
        p->data = g->param_host ? g->param_host : g->param;
        d->data = g->be && g->be->on_device ? NULL : g->grad;
        if (!d->data)
            return fail("ckpt_dump runs the model on the CPU backend (--set run.device=cpu)", NULL);
    }
    if (bk_safetensors_write(argv[5], t, n, NULL, 0, &err))
        return fail(argv[5], &err);
    printf("ckpt_dump: %d x %d tokens, loss %.9g, %d tensors\n", B, T, (double)loss, opt.n_groups);
    free(names), free(t), free(logits), free(ids), free(in), free(tg);
    bk_adamw_free(&opt);
    bk_lm_close(&lm);
    return isfinite(loss) ? 0 : 1;
}
