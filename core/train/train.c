#define _POSIX_C_SOURCE 200809L
#include "train/train.h"

#include "data/data.h"
#include "train/checkpoint.h"
#include "train/lm.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* mkdir -p */
static int make_dirs(const char *path, bk_error *err)
{
    char buf[4096];
    bk_copy_text(buf, sizeof buf, path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return bk_fail(err, BK_ERR_IO, "cannot create directory '%s': %s", buf, strerror(errno));
            *p = c;
            if (!c)
                break;
        }
    }
    return BK_OK;
}

/* Load [data], with relative paths read from the experiment file's directory. */
static int load_data(const bk_lm *lm, bk_tokens *train, bk_tokens *val, bk_error *err)
{
    const bk_experiment *e = &lm->exp;
    if (e->data.paths.n == 0)
        return bk_fail(err, BK_ERR_CONFIG, "%s: [data] paths: no training data; set e.g. paths = [\"corpus/\"] "
                       "or --set data.paths=DIR", e->path);
    int nt = e->data.paths.n, nv = e->data.val_paths.n;
    char(*buf)[4096] = malloc((size_t)(nt + nv) * sizeof *buf);
    const char **ptr = malloc((size_t)(nt + nv) * sizeof *ptr);
    if (!buf || !ptr) {
        free(buf), free(ptr);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < nt + nv; i++) {
        bk_lm_data_path(lm, i < nt ? e->data.paths.items[i] : e->data.val_paths.items[i - nt], buf[i], sizeof buf[i]);
        ptr[i] = buf[i];
    }
    bk_data_config dc = {
        .format = (bk_data_format)e->data.format,
        .paths = ptr,
        .n_paths = nt,
        .val_paths = ptr + nt,
        .n_val_paths = nv,
        .val_fraction = e->data.val_fraction,
        .extensions = e->data.extensions.items,
        .n_extensions = e->data.extensions.n,
        .max_bytes = e->data.max_bytes,
    };
    int rc = bk_data_load(&dc, (int32_t)e->model.vocab, e->train.length + 1, train, val, err);
    free(buf), free(ptr);
    return rc;
}

/* Mean loss over the first `batches` batches of the validation stream (always the same tokens). */
static int validate(bk_lm *lm, const bk_tokens *val, int B, int T, int64_t batches, int32_t *in, int32_t *tg,
                    double *out, bk_error *err)
{
    bk_loader ld;
    int rc = bk_loader_init(&ld, val, B, T, 0, 0, err);
    if (rc)
        return rc;
    int64_t n = batches < (ld.n_windows + B - 1) / B ? batches : (ld.n_windows + B - 1) / B;
    double total = 0.0;
    for (int64_t i = 0; i < n && !rc; i++) {
        bk_loader_next(&ld, in, tg);
        if (!(rc = bk_gpt_forward(&lm->gpt, in, tg, B, T, 0, err)))
            total += lm->gpt.loss;
    }
    bk_loader_free(&ld);
    *out = total / (double)(n ? n : 1);
    return rc;
}

static void format_duration(double s, char *buf, size_t size)
{
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, size, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(buf, size, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, size, "%lds", t);
}

int bk_train(const bk_train_options *o, bk_train_summary *sum, bk_error *err)
{
    memset(sum, 0, sizeof *sum);
    sum->val_loss = NAN;
    FILE *out = o->out ? o->out : stderr;
    bk_lm lm;
    bk_adamw opt = {0};
    bk_train_state st = {0, 0, 0, 0, NAN};
    bk_tokens train = {0}, val = {0};
    bk_loader ld = {0};
    int32_t *in = NULL, *tg = NULL;
    FILE *metrics = NULL;
    int rc;

    if (o->resume)
        rc = bk_checkpoint_load(o->resume, o->overrides, o->n_overrides, &lm, &opt, &st, err);
    else if (!(rc = bk_lm_open_file(&lm, o->config, o->overrides, o->n_overrides, err)) &&
             (rc = bk_lm_register(&lm, &opt, err)))
        bk_lm_close(&lm);
    if (rc) {
        bk_adamw_free(&opt);
        return rc;
    }
    const bk_experiment *e = &lm.exp;
    if (e->run.threads > 0)
        omp_set_num_threads((int)e->run.threads);
    const int B = (int)e->train.batch, T = (int)e->train.length;
    const int64_t steps = e->train.steps;

    char dir[4096];
    if (o->out_dir)
        bk_copy_text(dir, sizeof dir, o->out_dir);
    else if (o->resume) { /* a resumed run continues in its checkpoint's directory */
        bk_copy_text(dir, sizeof dir, o->resume);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            bk_copy_text(dir, sizeof dir, ".");
    } else if (e->run.out_dir[0])
        bk_lm_data_path(&lm, e->run.out_dir, dir, sizeof dir);
    else {
        const char *base = strrchr(e->path, '/') ? strrchr(e->path, '/') + 1 : e->path;
        int len = (int)strcspn(base, " ");
        if (len > 5 && strncmp(base + len - 5, ".toml", 5) == 0)
            len -= 5;
        snprintf(dir, sizeof dir, "runs/%.*s", len, base);
    }
    if (snprintf(sum->checkpoint, sizeof sum->checkpoint, "%s/checkpoint.safetensors", dir) >=
        (int)sizeof sum->checkpoint) {
        rc = bk_fail(err, BK_ERR_INVALID, "output directory name too long: '%s'", dir);
        goto done;
    }
    if ((rc = load_data(&lm, &train, &val, err)) || (rc = make_dirs(dir, err)) ||
        (rc = bk_loader_init(&ld, &train, B, T, (uint64_t)e->train.seed, 1, err)))
        goto done;
    if (o->resume && (rc = bk_loader_seek(&ld, st.data_epoch, st.data_index, err)))
        goto done;
    char metrics_path[4200];
    snprintf(metrics_path, sizeof metrics_path, "%s/metrics.jsonl", dir);
    if (!(metrics = fopen(metrics_path, o->resume ? "a" : "w"))) {
        rc = bk_fail(err, BK_ERR_IO, "cannot write '%s': %s", metrics_path, strerror(errno));
        goto done;
    }
    in = malloc((size_t)B * T * sizeof *in);
    tg = malloc((size_t)B * T * sizeof *tg);
    if (!in || !tg) {
        rc = bk_fail(err, BK_ERR_NOMEM, "out of memory for batches");
        goto done;
    }
    if ((rc = bk_bias_forward(&lm.bias, T, err)))
        goto done;

    fprintf(out, "train: %s; %d layers, %d heads, dim %d, vocab %d; %zu model parameters, %d term%s\n", e->path,
            lm.gpt.L, lm.gpt.H, lm.gpt.C, lm.gpt.V, lm.gpt.n_params, lm.terms.n, lm.terms.n == 1 ? "" : "s");
    fprintf(out, "data: %s (%lld tokens) / validation %s (%lld tokens); batch %d x %d x %lld accumulated\n",
            train.name, (long long)train.count, val.name, (long long)val.count, B, T, (long long)e->train.accumulate);
    if (o->resume)
        fprintf(out, "resuming from %s at step %lld\n", o->resume, (long long)st.step);
    fprintf(out, "writing %s\n", dir);

    interrupted = 0;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigaction(SIGINT, &sa, &old);

    const double start = now_seconds();
    double window_start = start;
    int64_t window_tokens = 0, first_step = st.step;
    while (st.step < steps && !rc) {
        bk_lm_zero_grad(&lm);
        double loss = 0.0;
        for (int64_t micro = 0; micro < e->train.accumulate && !rc; micro++) {
            bk_loader_next(&ld, in, tg);
            if (!(rc = bk_gpt_forward(&lm.gpt, in, tg, B, T, 1, err)))
                rc = bk_gpt_backward(&lm.gpt, in, tg, 1.0f / (float)e->train.accumulate, err);
            loss += lm.gpt.loss / (double)e->train.accumulate;
        }
        if (rc)
            break;
        double norm = bk_adamw_grad_norm(&opt);
        if (!isfinite(norm) || !isfinite(loss)) {
            rc = bk_fail(err, BK_ERR_INTERNAL, "step %lld: the loss or the gradient is not finite (loss %g, "
                         "gradient norm %g); lower [train] lr", (long long)st.step + 1, loss, norm);
            break;
        }
        if (e->train.grad_clip > 0 && norm > e->train.grad_clip)
            bk_adamw_scale_grads(&opt, (float)(e->train.grad_clip / norm));
        double lr = bk_lr_schedule(st.step, steps, e->train.warmup, e->train.lr, e->train.final_lr);
        bk_adamw_step(&opt, lr, e->train.beta1, e->train.beta2, e->train.eps, e->train.weight_decay);
        if ((rc = bk_lm_after_step(&lm, T, err)))
            break;
        st.step++;
        st.tokens += (int64_t)B * T * e->train.accumulate;
        window_tokens += (int64_t)B * T * e->train.accumulate;
        st.data_epoch = ld.epoch, st.data_index = ld.index;
        sum->train_loss = loss;

        double t = now_seconds();
        double rate = window_tokens / (t - window_start > 1e-9 ? t - window_start : 1e-9);
        fprintf(metrics, "{\"step\": %lld, \"loss\": %.6f, \"lr\": %.6g, \"grad_norm\": %.6g, \"tokens\": %lld, "
                "\"tokens_per_s\": %.1f}\n", (long long)st.step, loss, lr, norm, (long long)st.tokens, rate);
        int last = st.step == steps;
        if (o->progress || st.step % e->train.log_every == 0 || last || st.step == first_step + 1) {
            char eta[32];
            double per_step = (t - start) / (double)(st.step - first_step);
            format_duration(per_step * (double)(steps - st.step), eta, sizeof eta);
            fprintf(out, "%sstep %lld/%lld | loss %.4f | lr %.3g | %.0f tok/s | ETA %s%s", o->progress ? "\r" : "",
                    (long long)st.step, (long long)steps, loss, lr, rate, eta, o->progress ? "   " : "\n");
            fflush(out);
            if (st.step % e->train.log_every == 0)
                window_start = t, window_tokens = 0;
        }
        if ((e->train.eval_every > 0 && st.step % e->train.eval_every == 0) || last) {
            if ((rc = validate(&lm, &val, B, T, e->train.eval_batches, in, tg, &st.val_loss, err)))
                break;
            sum->val_loss = st.val_loss;
            fprintf(metrics, "{\"step\": %lld, \"val_loss\": %.6f, \"val_ppl\": %.4f}\n", (long long)st.step,
                    st.val_loss, exp(st.val_loss));
            fprintf(out, "%sstep %lld: validation loss %.4f (perplexity %.3f)\n", o->progress ? "\n" : "",
                    (long long)st.step, st.val_loss, exp(st.val_loss));
        }
        fflush(metrics);
        int stop = interrupted || (o->stop_after > 0 && st.step - first_step >= o->stop_after);
        if (last || stop || (e->train.checkpoint_every > 0 && st.step % e->train.checkpoint_every == 0)) {
            if ((rc = bk_checkpoint_save(sum->checkpoint, &lm, &opt, &st, err)))
                break;
        }
        if (stop && !last) {
            sum->interrupted = 1;
            sum->signalled = interrupted;
            fprintf(out, "%sstopped at step %lld; checkpoint %s (continue with --resume)\n", o->progress ? "\n" : "",
                    (long long)st.step, sum->checkpoint);
            break;
        }
    }
    sigaction(SIGINT, &old, NULL);
    sum->steps = st.step;
    sum->seconds = now_seconds() - start;
    sum->tokens_per_second = (double)(st.step - first_step) * B * T * e->train.accumulate /
                             (sum->seconds > 1e-9 ? sum->seconds : 1e-9);
    if (!rc && !sum->interrupted)
        fprintf(out, "%sdone: %lld steps in %.1f s (%.0f tokens/s); checkpoint %s\n", o->progress ? "\n" : "",
                (long long)st.step, sum->seconds, sum->tokens_per_second, sum->checkpoint);
done:
    if (metrics)
        fclose(metrics);
    free(in), free(tg);
    bk_loader_free(&ld);
    bk_tokens_free(&train);
    bk_tokens_free(&val);
    bk_adamw_free(&opt);
    bk_lm_close(&lm);
    return rc;
}
