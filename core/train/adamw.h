/* AdamW (Loshchilov & Hutter, decoupled weight decay) over named parameter groups, the learning-rate
 * schedule (linear warm-up, then cosine to a floor) and global-norm gradient clipping.
 *
 * A group lives either on the host (bk_adamw_add: plugin parameters, mixing parameters; be = NULL) or
 * in a backend's memory (bk_adamw_add_on: the transformer's tensors, model/backend.h). The arithmetic is
 * the same for both: host groups run the CPU backend's loops (bk_backend_cpu()), backend groups their
 * backend's sumsq / scale / adamw, all of them the formula of train/adamw_math.h in fp32 with the bias
 * corrections computed once per step on the host in double, and the gradient norm summed in the same
 * fixed order (BK_NORM_CHUNK chunks, then the chunk sums, then the groups in order). Equal gradients
 * therefore give bit-identical norms on every backend, and bit-identical steps wherever the backend
 * evaluates adamw_math.h as the host does (the CPU and the emulated backend; nvcc may contract into
 * FMAs on a GPU).
 *
 * Moments of a backend group are in the backend's memory, with host mirrors (m_host, v_host) that only
 * bk_adamw_to_host / bk_adamw_to_device synchronise: checkpoints read and write the mirrors. */
#ifndef BK_ADAMW_H
#define BK_ADAMW_H

#include "model/backend.h"
#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

/* A run of a group's values with its own learning-rate scale and weight decay (a plugin tensor's
 * parameter group, bias/terms.h): values [offset, offset + count) step with lr x lr_scale and, when
 * weight_decay >= 0, that decay coefficient; weight_decay < 0 (BIASKIT_WEIGHT_DECAY_DEFAULT) keeps the
 * group's rule (the step's weight_decay where `decay`, else none). */
typedef struct bk_adamw_segment {
    size_t offset, count;
    double lr_scale;
    double weight_decay;
} bk_adamw_segment;

typedef struct bk_param_group {
    char name[96];       /* checkpoint name, e.g. "model.wte", "term.kerple.r1" */
    bk_backend *be;      /* NULL: host memory */
    float *param;        /* in be's memory (host memory when be is NULL) */
    float *grad;         /* in be's memory */
    size_t n;
    int decay;           /* weight decay applies */
    int frozen;          /* does not train ([train] trainable): left out of the gradient norm, the scaling
                          * and the step, so its values and moments stay as they are */
    bk_adamw_segment *segments; /* n_segments runs tiling [0, n) in order, owned; none (the usual case):
                                 * every value at lr, decayed by the `decay` rule */
    int n_segments;
    float *m, *v;        /* moments in be's memory, owned by the optimizer */
    /* Host mirrors (checkpoints): the same pointers as param, m, v when the memory is host memory
     * (be NULL or the CPU backend); else param_host is the caller's mirror (the model's host copy) or
     * one the optimizer owns, and m_host, v_host are owned. Current only after bk_adamw_to_host. */
    float *param_host, *m_host, *v_host;
    int owns_param_host;
} bk_param_group;

typedef struct bk_adamw {
    bk_param_group *groups;
    int n_groups, capacity;
    int64_t t;      /* steps taken (bias correction) */
} bk_adamw;

/* A host group: param and grad are host memory. */
int bk_adamw_add(bk_adamw *opt, const char *name, float *param, float *grad, size_t n, int decay, bk_error *err);
/* A group in backend be's memory (be NULL: as bk_adamw_add). param_host is param's host mirror (e.g.
 * the model's host copy of the tensor), or NULL for one the optimizer allocates; it is ignored where
 * be's memory is host memory (param is its own mirror). */
int bk_adamw_add_on(bk_adamw *opt, bk_backend *be, const char *name, float *param, float *grad, float *param_host,
                    size_t n, int decay, bk_error *err);
void bk_adamw_free(bk_adamw *opt);
/* Give group `group` (a host group) its segments: `n` runs that tile [0, group n) in order, each lr_scale
 * finite >= 0 and weight_decay finite (>= 0, or < 0 for the group's rule). Adjacent runs that agree are
 * merged, and a single run of lr_scale 1 and the group's rule leaves the group without segments (the step
 * is then exactly the plain one). Errors name the group and the run. */
int bk_adamw_set_segments(bk_adamw *opt, int group, const bk_adamw_segment *segments, int n, bk_error *err);

/* Global L2 norm of every gradient but the frozen groups' into *norm (double accumulation, fixed order;
 * see above). */
int bk_adamw_grad_norm(const bk_adamw *opt, double *norm, bk_error *err);
/* grad *= s for every group that is not frozen. */
int bk_adamw_scale_grads(bk_adamw *opt, float s, bk_error *err);
/* One step:  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
 *            p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p)   (wd only where decay)
 * with m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t), t counting this step. In a group's segments lr is
 * (float)(lr x lr_scale) and wd the segment's coefficient when it has one. A frozen group does not move. */
int bk_adamw_step(bk_adamw *opt, double lr, double beta1, double beta2, double eps, double weight_decay,
                  bk_error *err);

/* Parameters and moments of every backend group into their host mirrors (before a checkpoint is
 * written); nothing to do for host memory. */
int bk_adamw_to_host(bk_adamw *opt, bk_error *err);
/* The host mirrors (parameters and moments) into backend memory (after a checkpoint was read). */
int bk_adamw_to_device(bk_adamw *opt, bk_error *err);
/* Group i's gradient into dst_host (n floats): a copy from backend memory, for the rare paths that
 * read gradients on the host (the report of a non-finite step). */
int bk_adamw_grad_to_host(const bk_adamw *opt, int i, float *dst_host, bk_error *err);

/* Learning rate of step s (0-based) of `steps`: lr (s+1)/warmup during warm-up, then cosine from lr
 * down to lr * final_fraction at the last step. */
double bk_lr_schedule(int64_t s, int64_t steps, int64_t warmup, double lr, double final_fraction);

#endif
