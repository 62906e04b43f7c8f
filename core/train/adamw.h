/* AdamW (Loshchilov & Hutter, decoupled weight decay) over named parameter groups, the learning-rate
 * schedule (linear warm-up, then cosine to a floor) and global-norm gradient clipping. */
#ifndef BK_ADAMW_H
#define BK_ADAMW_H

#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bk_param_group {
    char name[96];  /* checkpoint name, e.g. "model.wte", "term.kerple.r1" */
    float *param;
    float *grad;
    size_t n;
    int decay;      /* weight decay applies */
    float *m, *v;   /* moments, owned by the optimizer */
} bk_param_group;

typedef struct bk_adamw {
    bk_param_group *groups;
    int n_groups, capacity;
    int64_t t;      /* steps taken (bias correction) */
} bk_adamw;

int bk_adamw_add(bk_adamw *opt, const char *name, float *param, float *grad, size_t n, int decay, bk_error *err);
void bk_adamw_free(bk_adamw *opt);

/* Global L2 norm of every gradient (double accumulation, fixed order). */
double bk_adamw_grad_norm(const bk_adamw *opt);
/* grad *= s for every group. */
void bk_adamw_scale_grads(bk_adamw *opt, float s);
/* One step:  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *            p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p)   (wd only where decay) */
void bk_adamw_step(bk_adamw *opt, double lr, double beta1, double beta2, double eps, double weight_decay);

/* Learning rate of step s (0-based) of `steps`: lr (s+1)/warmup during warm-up, then cosine from lr
 * down to lr * final_fraction at the last step. */
double bk_lr_schedule(int64_t s, int64_t steps, int64_t warmup, double lr, double final_fraction);

#endif
