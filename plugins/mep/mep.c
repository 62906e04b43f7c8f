/* MEP as a biaskit plugin: a weighted average of positional kernels in kernel (post-softmax) space,
 * B_h(d) = log sum_k alpha_k K_k,h(d), computed as a max-subtracted log-sum-exp (mep_math.h).
 *
 *   variant = "free"   exp(-s d), exp(-0.5 s d), exp(-s d^2), weights 1/3 each; no parameters
 *   variant = "param"  (1 + r2 d)^(-r1) (KERPLE-log, learnable r1, r2 per head) and exp(-s d^2),
 *                      weights 1/2 each; parameters shared across layers
 *
 * s = s_h is the head's ALiBi slope (get_slopes, also for head counts that are not a power of two).
 * KERPLE-log's init and clamps are KERPLE's: r1 ~ U(0,2), r2 ~ U(0,1), both >= 0.01.
 *
 * Options:
 *   variant       free | param: the defaults of the three options below, and whether a kerple-log
 *                 kernel is allowed (free: none; param: exactly one)
 *   kernels       the kernels, each "exp", "gauss" or "kerple-log"
 *   slope_scales  one per kernel: multiplies the ALiBi slope of an exp / gauss kernel (ignored for
 *                 kerple-log); default [1, 0.5, 1] (free), [1, 1] (param), all 1 for custom kernels
 *   weights       one per kernel, >= 0, rescaled to sum 1; default equal */
#include "mep_math.h"
#ifdef BIASKIT_WITH_CUDA
#include "mep_cuda.h"
#endif

#include <biaskit/random.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEP_FREE 0
#define MEP_PARAM 1

static const char *const kernel_names[] = {"exp", "gauss", "kerple-log"};

typedef struct mep {
    const biaskit_services *svc;
    int32_t heads;
    int variant;         /* MEP_FREE / MEP_PARAM */
    int learnable;       /* a kerple-log kernel is configured: theta = r1 (heads), r2 (heads) */
    bk_mep_spec spec;    /* the kernels of positive weight */
    float *slopes;       /* heads ALiBi slopes */
    float *device_slopes; /* lazily made device copy (CUDA builds) */
} mep;

static const biaskit_option options[] = {
    BIASKIT_OPTION_CHOICE("variant", "free", "free|param",
                          "free: exp(-s d), exp(-s d/2), exp(-s d^2), 1/3 each; param: KERPLE-log + exp(-s d^2), 1/2 each"),
    BIASKIT_OPTION_STRING_ARRAY("kernels", "kernels to mix, each exp | gauss | kerple-log (default by variant)"),
    BIASKIT_OPTION_DOUBLE_ARRAY("slope_scales",
                                "one per kernel: multiplies the ALiBi slope of exp/gauss (default [1,0.5,1] / [1,1])"),
    BIASKIT_OPTION_DOUBLE_ARRAY("weights", "one per kernel, >= 0, rescaled to sum 1 (default equal)"),
};

static void destroy(void *inst)
{
    mep *m = inst;
    if (!m)
        return;
#ifdef BIASKIT_WITH_CUDA
    bk_mep_cuda_release(m->device_slopes);
#endif
    free(m->slopes);
    free(m);
}

/* "[exp, exp, gauss]" for messages. */
static const char *kernel_list(const int32_t *type, int32_t n, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int32_t k = 0; k < n && used < size; k++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", k ? ", " : "", kernel_names[type[k]]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

/* Read the `kernels` option (or the variant's default) into type[], *n. */
static int read_kernels(const biaskit_services *svc, const biaskit_config *cfg, int variant, int32_t *type,
                        int32_t *n, biaskit_error *err)
{
    if (!svc->is_set(cfg, "kernels")) {
        static const int32_t free_kernels[] = {BK_MEP_EXP, BK_MEP_EXP, BK_MEP_GAUSS};
        static const int32_t param_kernels[] = {BK_MEP_KERPLE_LOG, BK_MEP_GAUSS};
        *n = variant == MEP_FREE ? 3 : 2;
        memcpy(type, variant == MEP_FREE ? free_kernels : param_kernels, sizeof *type * (size_t)*n);
        return BIASKIT_OK;
    }
    const char *names[BK_MEP_MAX_KERNELS];
    int32_t count = 0;
    int rc = svc->get_string_array(cfg, "kernels", names, BK_MEP_MAX_KERNELS, &count, err);
    if ((rc == BIASKIT_ERR_CONFIG && count > BK_MEP_MAX_KERNELS) || (!rc && count < 1))
        return svc->config_error(cfg, "kernels", err, "expected 1 to %d kernels, got %d", BK_MEP_MAX_KERNELS,
                                 (int)count);
    if (rc)
        return rc;
    int klog = 0;
    for (int32_t k = 0; k < count; k++) {
        type[k] = -1;
        for (int32_t t = 0; t < 3; t++)
            if (strcmp(names[k], kernel_names[t]) == 0)
                type[k] = t;
        if (type[k] < 0)
            return svc->config_error(cfg, "kernels", err, "kernel %d: expected one of exp, gauss, kerple-log, got '%s'",
                                     (int)k, names[k]);
        klog += type[k] == BK_MEP_KERPLE_LOG;
    }
    if (klog > 1)
        return svc->config_error(cfg, "kernels", err,
                                 "expected at most one kerple-log kernel (its r1, r2 are the term's parameters), got %d",
                                 klog);
    if (variant == MEP_FREE && klog)
        return svc->config_error(cfg, "kernels", err,
                                 "variant \"free\" is parameter-free: expected exp and gauss kernels only "
                                 "(a kerple-log kernel needs variant = \"param\")");
    if (variant == MEP_PARAM && !klog)
        return svc->config_error(cfg, "kernels", err,
                                 "variant \"param\" expects one kerple-log kernel (its learnable part); "
                                 "without it use variant = \"free\"");
    *n = count;
    return BIASKIT_OK;
}

/* Read a per-kernel double array option `key` into out[0 .. n-1]; 0 when unset (defaults apply). */
static int read_per_kernel(const biaskit_services *svc, const biaskit_config *cfg, const char *key, const int32_t *type,
                           int32_t n, double *out, int *set, biaskit_error *err)
{
    *set = svc->is_set(cfg, key);
    if (!*set)
        return BIASKIT_OK;
    int32_t count = 0;
    int rc = svc->get_double_array(cfg, key, out, BK_MEP_MAX_KERNELS, &count, err);
    if ((rc == BIASKIT_ERR_CONFIG && count > BK_MEP_MAX_KERNELS) || (!rc && count != n)) {
        char list[128];
        return svc->config_error(cfg, key, err, "expected %d values (one per kernel of %s), got %d", (int)n,
                                 kernel_list(type, n, list, sizeof list), (int)count);
    }
    return rc;
}

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    if (geo->n_heads < 1)
        return svc->error(err, BIASKIT_ERR_INVALID, "expected at least one head, got %d", (int)geo->n_heads);
    const char *variant_name = NULL;
    int rc = svc->get_string(cfg, "variant", &variant_name, err);
    if (rc)
        return rc;
    int variant;
    if (strcmp(variant_name, "free") == 0)
        variant = MEP_FREE;
    else if (strcmp(variant_name, "param") == 0)
        variant = MEP_PARAM;
    else
        return svc->config_error(cfg, "variant", err, "expected one of free, param, got '%s'", variant_name);

    int32_t type[BK_MEP_MAX_KERNELS], n = 0;
    if ((rc = read_kernels(svc, cfg, variant, type, &n, err)))
        return rc;

    double scale[BK_MEP_MAX_KERNELS], weight[BK_MEP_MAX_KERNELS];
    int scales_set = 0, weights_set = 0;
    if ((rc = read_per_kernel(svc, cfg, "slope_scales", type, n, scale, &scales_set, err)) ||
        (rc = read_per_kernel(svc, cfg, "weights", type, n, weight, &weights_set, err)))
        return rc;
    if (scales_set) {
        for (int32_t k = 0; k < n; k++)
            if (!isfinite(scale[k]) || scale[k] > FLT_MAX || (type[k] != BK_MEP_KERPLE_LOG && scale[k] < 0.0))
                return svc->config_error(cfg, "slope_scales", err, "value %d (%s kernel): expected a finite scale >= 0, got %g",
                                         (int)k, kernel_names[type[k]], scale[k]);
    } else {
        /* the paper's parameter-free mixture uses the slopes s, s/2 and s (Gaussian) */
        int paper_free = variant == MEP_FREE && !svc->is_set(cfg, "kernels");
        for (int32_t k = 0; k < n; k++)
            scale[k] = paper_free && k == 1 ? 0.5 : 1.0;
    }
    double total = 0.0;
    if (weights_set) {
        for (int32_t k = 0; k < n; k++) {
            if (!isfinite(weight[k]) || weight[k] < 0.0 || weight[k] > FLT_MAX)
                return svc->config_error(cfg, "weights", err, "value %d (%s kernel): expected a finite weight >= 0, got %g",
                                         (int)k, kernel_names[type[k]], weight[k]);
            total += weight[k];
        }
        if (!(total > 0.0))
            return svc->config_error(cfg, "weights", err, "expected at least one weight > 0 (they are rescaled to sum 1)");
    } else {
        for (int32_t k = 0; k < n; k++)
            weight[k] = 1.0;
        total = (double)n;
    }

    mep *m = calloc(1, sizeof *m);
    if (m)
        m->slopes = malloc(sizeof *m->slopes * (size_t)geo->n_heads);
    double *slope = malloc(sizeof *slope * (size_t)geo->n_heads);
    if (!m || !m->slopes || !slope) {
        free(slope);
        destroy(m);
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory for %d slopes", (int)geo->n_heads);
    }
    m->svc = svc;
    m->heads = geo->n_heads;
    m->variant = variant;
    bk_alibi_slopes(m->heads, slope);
    for (int32_t h = 0; h < m->heads; h++)
        m->slopes[h] = (float)slope[h];
    free(slope);
    for (int32_t k = 0; k < n; k++) {
        m->learnable |= type[k] == BK_MEP_KERPLE_LOG;
        if (!(weight[k] > 0.0))
            continue; /* weight 0: the kernel contributes nothing */
        int32_t i = m->spec.n++;
        m->spec.type[i] = type[k];
        m->spec.scale[i] = (float)scale[k];
        m->spec.log_weight[i] = (float)log(weight[k] / total);
    }
    *out = m;
    return BIASKIT_OK;
}

static int64_t param_count(const void *inst)
{
    const mep *m = inst;
    return m->learnable ? 2 * (int64_t)m->heads : 0;
}

/* KERPLE's clamp: r1, r2 >= 0.01 (no upper bound for the log kernel). */
static void param_project(const void *inst, float *theta)
{
    const mep *m = inst;
    for (int64_t i = 0; m->learnable && i < 2 * (int64_t)m->heads; i++)
        theta[i] = bk_kerple_project(theta[i], 0);
}

/* KERPLE-log's init (official code): r1 ~ U(0,2), r2 ~ U(0,1), then projected. */
static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)err;
    const mep *m = inst;
    if (!m->learnable)
        return BIASKIT_OK;
    biaskit_rng rng = biaskit_rng_seeded(seed);
    for (int32_t h = 0; h < m->heads; h++)
        theta[h] = (float)(2.0 * biaskit_rng_uniform(&rng));
    for (int32_t h = 0; h < m->heads; h++)
        theta[m->heads + h] = (float)biaskit_rng_uniform(&rng);
    param_project(inst, theta);
    return BIASKIT_OK;
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    const mep *m = inst;
    if (!m->learnable)
        return 0;
    if (capacity > 0)
        out[0] = (biaskit_tensor_info){"r1", 0, m->heads, 1};
    if (capacity > 1)
        out[1] = (biaskit_tensor_info){"r2", m->heads, m->heads, 1};
    return 2;
}

static int check_call(const mep *m, const float *theta, int32_t distances, biaskit_error *err)
{
    if (distances <= 0)
        return m->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", (int)distances);
    if (m->learnable && !theta)
        return m->svc->error(err, BIASKIT_ERR_INVALID, "expected %d parameters (theta), got NULL", 2 * (int)m->heads);
    return BIASKIT_OK;
}

static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    const mep *m = inst;
    int rc = check_call(m, theta, distances, err);
    if (rc)
        return rc;
    size_t H = (size_t)m->heads;
    for (size_t h = 0; h < H; h++) {
        float r1 = m->learnable ? theta[h] : 0.0f, r2 = m->learnable ? theta[H + h] : 0.0f;
        float *row = out + h * (size_t)distances;
        for (int32_t d = 0; d < distances; d++)
            row[d] = bk_mep_bias(&m->spec, m->slopes[h], r1, r2, d);
    }
    return BIASKIT_OK;
}

/* dtheta[h] += sum_d dtable[h][d] dB/dr1, dtheta[H + h] += sum_d dtable[h][d] dB/dr2: double, d ascending. */
static int table_backward(const void *inst, const float *theta, int32_t distances, const float *dtable, float *dtheta,
                          biaskit_error *err)
{
    const mep *m = inst;
    int rc = check_call(m, theta, distances, err);
    if (rc || !m->learnable)
        return rc;
    size_t H = (size_t)m->heads;
    for (size_t h = 0; h < H; h++) {
        float r1 = theta[h], r2 = theta[H + h];
        const float *g = dtable + h * (size_t)distances;
        double acc1 = 0.0, acc2 = 0.0;
        for (int32_t d = 0; d < distances; d++) {
            float dr1 = 0.0f, dr2 = 0.0f;
            bk_mep_bias_grad(&m->spec, m->slopes[h], r1, r2, d, &dr1, &dr2);
            acc1 += (double)g[d] * (double)dr1;
            acc2 += (double)g[d] * (double)dr2;
        }
        dtheta[h] += (float)acc1;
        dtheta[H + h] += (float)acc2;
    }
    return BIASKIT_OK;
}

#ifdef BIASKIT_WITH_CUDA
static int table_cuda(const void *inst, const float *theta, int32_t distances, float *out, void *stream,
                      biaskit_error *err)
{
    mep *m = (mep *)inst; /* the device copy of the slopes is a cache */
    int rc = check_call(m, theta, distances, err);
    if (!rc)
        rc = bk_mep_upload(m->svc, m->slopes, (size_t)m->heads, &m->device_slopes, stream, err);
    if (rc)
        return rc;
    return bk_mep_table_cuda(m->svc, &m->spec, m->heads, m->device_slopes, m->learnable ? theta : NULL, distances,
                             out, stream, err);
}

static int table_backward_cuda(const void *inst, const float *theta, int32_t distances, const float *dtable,
                               float *dtheta, void *stream, biaskit_error *err)
{
    mep *m = (mep *)inst;
    int rc = check_call(m, theta, distances, err);
    if (rc || !m->learnable)
        return rc;
    if ((rc = bk_mep_upload(m->svc, m->slopes, (size_t)m->heads, &m->device_slopes, stream, err)))
        return rc;
    return bk_mep_table_backward_cuda(m->svc, &m->spec, m->heads, m->device_slopes, theta, distances, dtable, dtheta,
                                      stream, err);
}
#endif

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "mep",
    .version = "1.0.0",
    .summary = "MEP: log of a weighted mix of kernels exp(-s d), exp(-s d^2), (1+r2 d)^-r1 (kernel space)",
    .reference = "Gao, MEP: Multiple Kernel Learning Enhancing Relative Positional Encoding Length Extrapolation, "
                 "arXiv 2403.17698 (2024)",
    .capabilities = BIASKIT_CAP_TABLE,
    .flags = 0, /* KERPLE-log parameters shared across layers */
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .param_count = param_count,
    .param_init = param_init,
    .param_project = param_project,
    .param_tensors = param_tensors,
    .table = table,
    .table_backward = table_backward,
#ifdef BIASKIT_WITH_CUDA
    .table_cuda = table_cuda,
    .table_backward_cuda = table_backward_cuda,
#endif
};

BIASKIT_DEFINE_PLUGIN(descriptor)
