/* KERPLE as a biaskit plugin: a learnable kernelized relative bias per head, shared across layers.
 *
 *   variant = "log"        T_h(d) = -r1_h ln(1 + r2_h d)          theta = r1 (H), r2 (H)
 *   variant = "power"      T_h(d) = -r1_h d^r2_h  (0 < r2 <= 2)    theta = r1 (H), r2 (H)
 *   variant = "3para-log"  T_h(d) = -r1_h ln(1 + r2_h d^r3_h)     theta = r1 (H), r2 (H), r3 (H)
 *
 * Initialisation and clamps follow the official code (README.md, Parameters): amplitudes and exponents
 * ~ U(0,2) (power amplitude ~ U(0,1)), log scales ~ U(0,1); every parameter >= 0.01 and exponents <= 2,
 * enforced by param_project() after every optimizer step.
 *
 * Options:
 *   variant     log | power | 3para-log
 *   learnable   false: no parameters, the values of r1, r2 (r3) are fixed (they must be given)
 *   r1, r2, r3  one value for every head or one per head: fixed values (learnable = false) or
 *               initial values (learnable = true, instead of the random init) */
#include "kerple_math.h"
#ifdef BIASKIT_WITH_CUDA
#include "kerple_cuda.h"
#endif

#include <biaskit/random.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const tensor_names[BK_KERPLE_MAX_TENSORS] = {"r1", "r2", "r3"};

typedef struct kerple {
    const biaskit_services *svc;
    int32_t heads;
    int variant;                       /* BK_KERPLE_* */
    int n_tensors;                     /* 2, or 3 for 3para-log */
    int learnable;
    int given[BK_KERPLE_MAX_TENSORS];  /* r1 / r2 / r3 set in the experiment file */
    float *values;                     /* n_tensors * heads, laid out as theta: the given values */
    float *device_values;              /* lazily made device copy of `values` (fixed, CUDA builds) */
} kerple;

static const biaskit_option options[] = {
    BIASKIT_OPTION_CHOICE("variant", "log", "log|power|3para-log",
                          "log: -r1 ln(1+r2 d); power: -r1 d^r2 (r2 <= 2); 3para-log: -r1 ln(1+r2 d^r3) (r3 <= 2)"),
    BIASKIT_OPTION_BOOL("learnable", 1, "train r1, r2 (r3); false: fixed at the given values, no parameters"),
    BIASKIT_OPTION_DOUBLE_ARRAY("r1", "amplitude r1 > 0: 1 value (every head) or one per head; default random init"),
    BIASKIT_OPTION_DOUBLE_ARRAY("r2", "log: scale r2 > 0; power: exponent 0 < r2 <= 2; 1 value or one per head"),
    BIASKIT_OPTION_DOUBLE_ARRAY("r3", "3para-log only: exponent 0 < r3 <= 2; 1 value or one per head"),
};

/* Upper end of the uniform initialisation of parameter k (official code: torch.rand * 2 or * 1). */
static double init_high(int variant, int k)
{
    if (variant == BK_KERPLE_POWER)
        return k == 0 ? 1.0 : 2.0; /* amplitude ~ U(0,1), exponent ~ U(0,2) */
    return k == 1 ? 1.0 : 2.0;     /* log / 3para-log: r1 ~ U(0,2), r2 ~ U(0,1), r3 ~ U(0,2) */
}

static const char *role(int variant, int k)
{
    if (k == 0)
        return "amplitude";
    return bk_kerple_is_exponent(variant, k) ? "exponent" : "scale";
}

static void destroy(void *inst)
{
    kerple *k = inst;
    if (!k)
        return;
#ifdef BIASKIT_WITH_CUDA
    bk_kerple_cuda_release(k->device_values);
#endif
    free(k->values);
    free(k);
}

/* Read option `key` (parameter index t) into dst[0 .. heads-1]: 1 value for every head or one per head,
 * each finite and > 0 (an exponent also <= 2). */
static int read_values(const biaskit_services *svc, const biaskit_config *cfg, int variant, int t, int32_t heads,
                       float *dst, biaskit_error *err)
{
    const char *key = tensor_names[t];
    double *buf = malloc(sizeof *buf * (size_t)heads);
    if (!buf)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory reading option '%s'", key);
    int32_t count = 0;
    int rc = svc->get_double_array(cfg, key, buf, heads, &count, err);
    if ((rc == BIASKIT_ERR_CONFIG && count > heads) || (!rc && count != 1 && count != heads))
        rc = svc->config_error(cfg, key, err, "expected 1 value (every head) or %d values (one per head), got %d",
                               (int)heads, (int)count);
    for (int32_t i = 0; !rc && i < count; i++) {
        double v = buf[i];
        int exponent = bk_kerple_is_exponent(variant, t);
        if (!isfinite(v) || v <= 0.0 || v > FLT_MAX || (exponent && v > BK_KERPLE_MAX_EXPONENT))
            rc = exponent ? svc->config_error(cfg, key, err, "value %d: expected an exponent in (0, %g], got %g",
                                              (int)i, (double)BK_KERPLE_MAX_EXPONENT, v)
                          : svc->config_error(cfg, key, err, "value %d: expected a finite %s > 0, got %g", (int)i,
                                              role(variant, t), v);
    }
    for (int32_t h = 0; !rc && h < heads; h++)
        dst[h] = (float)buf[count == 1 ? 0 : h];
    free(buf);
    return rc;
}

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    if (geo->n_heads < 1)
        return svc->error(err, BIASKIT_ERR_INVALID, "expected at least one head, got %d", (int)geo->n_heads);
    const char *variant_name = NULL;
    int learnable = 1, rc;
    if ((rc = svc->get_string(cfg, "variant", &variant_name, err)) || (rc = svc->get_bool(cfg, "learnable", &learnable, err)))
        return rc;
    int variant;
    if (strcmp(variant_name, "log") == 0)
        variant = BK_KERPLE_LOG;
    else if (strcmp(variant_name, "power") == 0)
        variant = BK_KERPLE_POWER;
    else if (strcmp(variant_name, "3para-log") == 0)
        variant = BK_KERPLE_3PARA_LOG;
    else
        return svc->config_error(cfg, "variant", err, "expected one of log, power, 3para-log, got '%s'", variant_name);

    kerple *k = calloc(1, sizeof *k);
    if (!k)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    k->svc = svc;
    k->heads = geo->n_heads;
    k->variant = variant;
    k->n_tensors = bk_kerple_tensor_count(variant);
    k->learnable = learnable;
    k->values = calloc((size_t)k->n_tensors * (size_t)k->heads, sizeof *k->values);
    if (!k->values) {
        int count = k->n_tensors * (int)k->heads;
        destroy(k);
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory for %d parameters", count);
    }
    for (int t = 0; t < BK_KERPLE_MAX_TENSORS && !rc; t++) {
        const char *key = tensor_names[t];
        if (t >= k->n_tensors) {
            if (svc->is_set(cfg, key))
                rc = svc->config_error(cfg, key, err, "only variant \"3para-log\" has r3; variant \"%s\" takes r1 and r2",
                                       variant_name);
            continue;
        }
        if (svc->is_set(cfg, key)) {
            rc = read_values(svc, cfg, variant, t, k->heads, k->values + (size_t)t * (size_t)k->heads, err);
            k->given[t] = 1;
        } else if (!learnable) {
            rc = svc->config_error(cfg, key, err,
                                   "learnable = false needs fixed values: expected %s = [value] (every head) or %d "
                                   "values (one per head), the %s",
                                   key, (int)k->heads, role(variant, t));
        }
    }
    if (rc) {
        destroy(k);
        return rc;
    }
    if (learnable)
        for (int t = 0; t < k->n_tensors; t++)
            for (int32_t h = 0; k->given[t] && h < k->heads; h++)
                if (k->values[(size_t)t * (size_t)k->heads + (size_t)h] < BK_KERPLE_MIN) {
                    svc->log(BIASKIT_LOG_WARN, "kerple", "initial %s = %g (head %d) is below the clamp %g: trained from %g",
                             tensor_names[t], (double)k->values[(size_t)t * (size_t)k->heads + (size_t)h], (int)h,
                             (double)BK_KERPLE_MIN, (double)BK_KERPLE_MIN);
                    break;
                }
    *out = k;
    return BIASKIT_OK;
}

static int64_t param_count(const void *inst)
{
    const kerple *k = inst;
    return k->learnable ? (int64_t)k->n_tensors * k->heads : 0;
}

static void param_project(const void *inst, float *theta)
{
    const kerple *k = inst;
    if (!k->learnable)
        return;
    for (int t = 0; t < k->n_tensors; t++) {
        int exponent = bk_kerple_is_exponent(k->variant, t);
        for (int32_t h = 0; h < k->heads; h++) {
            float *v = &theta[(size_t)t * (size_t)k->heads + (size_t)h];
            *v = bk_kerple_project(*v, exponent);
        }
    }
}

/* Given values where the file sets them, else uniform draws as the official code; then projected.
 * Every draw is made whether used or not, so giving r1 does not change the random r2. */
static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)err;
    const kerple *k = inst;
    if (!k->learnable)
        return BIASKIT_OK;
    biaskit_rng rng = biaskit_rng_seeded(seed);
    for (int t = 0; t < k->n_tensors; t++) {
        double high = init_high(k->variant, t);
        for (int32_t h = 0; h < k->heads; h++) {
            size_t i = (size_t)t * (size_t)k->heads + (size_t)h;
            double u = biaskit_rng_uniform(&rng);
            theta[i] = k->given[t] ? k->values[i] : (float)(high * u);
        }
    }
    param_project(inst, theta);
    return BIASKIT_OK;
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    const kerple *k = inst;
    if (!k->learnable)
        return 0;
    for (int t = 0; t < k->n_tensors && t < capacity; t++)
        out[t] = (biaskit_tensor_info){tensor_names[t], (int64_t)t * k->heads, k->heads, 1};
    return k->n_tensors;
}

/* The parameters the table uses: theta when learnable, else the fixed values (same layout). */
static const float *params_of(const kerple *k, const float *theta, biaskit_error *err, int *rc)
{
    *rc = BIASKIT_OK;
    if (!k->learnable)
        return k->values;
    if (!theta)
        *rc = k->svc->error(err, BIASKIT_ERR_INVALID, "expected %d parameters (theta), got NULL",
                            k->n_tensors * (int)k->heads);
    return theta;
}

static int check_distances(const kerple *k, int32_t distances, biaskit_error *err)
{
    if (distances <= 0)
        return k->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", (int)distances);
    return BIASKIT_OK;
}

static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    const kerple *k = inst;
    int rc = check_distances(k, distances, err);
    const float *p = rc ? NULL : params_of(k, theta, err, &rc);
    if (rc)
        return rc;
    size_t H = (size_t)k->heads;
    for (size_t h = 0; h < H; h++) {
        float r1 = p[h], r2 = p[H + h], r3 = k->n_tensors > 2 ? p[2 * H + h] : 0.0f;
        float *row = out + h * (size_t)distances;
        for (int32_t d = 0; d < distances; d++)
            row[d] = bk_kerple_bias(k->variant, r1, r2, r3, d);
    }
    return BIASKIT_OK;
}

/* dtheta[t][h] += sum_d dtable[h][d] * dT_h(d)/dr_t, in double, d ascending. */
static int table_backward(const void *inst, const float *theta, int32_t distances, const float *dtable, float *dtheta,
                          biaskit_error *err)
{
    const kerple *k = inst;
    int rc = check_distances(k, distances, err);
    if (rc || !k->learnable)
        return rc;
    const float *p = params_of(k, theta, err, &rc);
    if (rc)
        return rc;
    size_t H = (size_t)k->heads;
    for (size_t h = 0; h < H; h++) {
        float r1 = p[h], r2 = p[H + h], r3 = k->n_tensors > 2 ? p[2 * H + h] : 0.0f;
        const float *g = dtable + h * (size_t)distances;
        double acc[BK_KERPLE_MAX_TENSORS] = {0.0, 0.0, 0.0};
        for (int32_t d = 0; d < distances; d++) {
            float dr[BK_KERPLE_MAX_TENSORS] = {0.0f, 0.0f, 0.0f};
            bk_kerple_grad(k->variant, r1, r2, r3, d, dr);
            for (int t = 0; t < k->n_tensors; t++)
                acc[t] += (double)g[d] * (double)dr[t];
        }
        for (int t = 0; t < k->n_tensors; t++)
            dtheta[(size_t)t * H + h] += (float)acc[t];
    }
    return BIASKIT_OK;
}

#ifdef BIASKIT_WITH_CUDA
/* Device parameters: theta when learnable, else the cached device copy of the fixed values. */
static const float *device_params(kerple *k, const float *theta, void *stream, biaskit_error *err, int *rc)
{
    *rc = BIASKIT_OK;
    if (k->learnable) {
        if (!theta)
            *rc = k->svc->error(err, BIASKIT_ERR_INVALID, "expected %d parameters (theta), got NULL",
                                k->n_tensors * (int)k->heads);
        return theta;
    }
    *rc = bk_kerple_upload(k->svc, k->values, (size_t)k->n_tensors * (size_t)k->heads, &k->device_values, stream, err);
    return k->device_values;
}

static int table_cuda(const void *inst, const float *theta, int32_t distances, float *out, void *stream,
                      biaskit_error *err)
{
    kerple *k = (kerple *)inst; /* the device copy of fixed values is a cache */
    int rc = check_distances(k, distances, err);
    const float *p = rc ? NULL : device_params(k, theta, stream, err, &rc);
    if (rc)
        return rc;
    return bk_kerple_table_cuda(k->svc, k->variant, k->heads, p, distances, out, stream, err);
}

static int table_backward_cuda(const void *inst, const float *theta, int32_t distances, const float *dtable,
                               float *dtheta, void *stream, biaskit_error *err)
{
    kerple *k = (kerple *)inst;
    int rc = check_distances(k, distances, err);
    if (rc || !k->learnable)
        return rc;
    const float *p = device_params(k, theta, stream, err, &rc);
    if (rc)
        return rc;
    return bk_kerple_table_backward_cuda(k->svc, k->variant, k->heads, p, distances, dtable, dtheta, stream, err);
}
#endif

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "kerple",
    .version = "1.0.0",
    .summary = "KERPLE: learnable kernelized bias per head, -r1 ln(1+r2 d) (log), -r1 d^r2 (power) or 3para-log",
    .reference = "Chi, Fan, Ramadge & Rudnicky, KERPLE: Kernelized Relative Positional Embedding for Length "
                 "Extrapolation, NeurIPS 2022 (code: chijames/KERPLE)",
    .capabilities = BIASKIT_CAP_TABLE,
    .flags = 0, /* shared across layers, as in the paper */
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
