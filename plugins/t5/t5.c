/* T5's learned relative-position buckets as a biaskit plugin (as GPT-NeoX / KERPLE train it):
 *
 *     T_h(d) = scale * w[h][bucket(d)]
 *
 * with bucket() the HF T5 bucketing (t5_math.h) and w a learnable (heads x buckets) table, shared by
 * all layers unless the term says per_layer = true.
 *
 * Options:
 *   buckets        number of buckets (default 32)
 *   max_distance   distance where the log-spaced buckets end (default 128)
 *   bidirectional  HF's encoder bucketing: half the buckets for keys before the query (default false)
 *   scale          multiplies the table (default 1; GPT-NeoX/KERPLE use sqrt(d_head))
 *   init_std       std of the normal init of w (default 0: xavier-normal sqrt(2 / (buckets + heads))) */
#include "t5_math.h"
#ifdef BIASKIT_WITH_CUDA
#include "t5_cuda.h"
#endif

#include <biaskit/random.h>

#include <math.h>
#include <stdlib.h>

/* Upper bound on `buckets`: far above any paper (32), low enough that heads * buckets and the bucket
 * arithmetic stay small. */
#define T5_MAX_BUCKETS 65536

typedef struct t5 {
    const biaskit_services *svc;
    bk_t5_shape shape;
    double init_std; /* resolved: the xavier value when the option is 0 */
} t5;

static const biaskit_option options[] = {
    BIASKIT_OPTION_INT("buckets", 32, "number of buckets per head (T5, KERPLE: 32)"),
    BIASKIT_OPTION_INT("max_distance", 128, "distance where the log-spaced buckets end; beyond it one bucket"),
    BIASKIT_OPTION_BOOL("bidirectional", 0, "HF encoder bucketing: keys before the query get the lower half"),
    BIASKIT_OPTION_DOUBLE("scale", 1.0, "the table is scale * w (GPT-NeoX/KERPLE: sqrt(d_head))"),
    BIASKIT_OPTION_DOUBLE("init_std", 0.0, "std of the normal init of w; 0 = xavier-normal sqrt(2/(buckets+heads))"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    if (geo->n_heads < 1)
        return svc->error(err, BIASKIT_ERR_INVALID, "expected at least one head, got %d", (int)geo->n_heads);
    int64_t buckets = 0, max_distance = 0;
    int bidirectional = 0;
    double scale = 0.0, init_std = 0.0;
    int rc;
    if ((rc = svc->get_int(cfg, "buckets", &buckets, err)) ||
        (rc = svc->get_int(cfg, "max_distance", &max_distance, err)) ||
        (rc = svc->get_bool(cfg, "bidirectional", &bidirectional, err)) ||
        (rc = svc->get_double(cfg, "scale", &scale, err)) || (rc = svc->get_double(cfg, "init_std", &init_std, err)))
        return rc;

    if (!bidirectional && (buckets < 2 || buckets > T5_MAX_BUCKETS))
        return svc->config_error(cfg, "buckets", err, "expected an integer in 2 .. %d, got %lld", T5_MAX_BUCKETS,
                                 (long long)buckets);
    if (bidirectional && (buckets < 4 || buckets > T5_MAX_BUCKETS || buckets % 2 != 0))
        return svc->config_error(cfg, "buckets", err,
                                 "with bidirectional = true, expected an even integer in 4 .. %d (half the buckets "
                                 "for each direction, at least 2 each), got %lld",
                                 T5_MAX_BUCKETS, (long long)buckets);
    int64_t max_exact = (bidirectional ? buckets / 2 : buckets) / 2;
    if (max_distance <= max_exact || max_distance > INT32_MAX)
        return svc->config_error(cfg, "max_distance", err,
                                 "expected an integer greater than the %lld exact buckets (%s) and at most %d, "
                                 "got %lld",
                                 (long long)max_exact, bidirectional ? "buckets/4 when bidirectional" : "buckets/2",
                                 INT32_MAX, (long long)max_distance);
    if (!isfinite(scale))
        return svc->config_error(cfg, "scale", err, "expected a finite number, got %g", scale);
    if (!isfinite(init_std) || init_std < 0.0)
        return svc->config_error(cfg, "init_std", err,
                                 "expected a finite std >= 0 (0 = xavier-normal sqrt(2/(buckets+heads))), got %g",
                                 init_std);

    t5 *t = calloc(1, sizeof *t);
    if (!t)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    t->svc = svc;
    t->shape = (bk_t5_shape){geo->n_heads, (int32_t)buckets, (int32_t)max_distance, bidirectional, scale};
    /* xavier_normal_ on NeoX's (buckets, heads) weight: fan_in = heads, fan_out = buckets */
    t->init_std = init_std > 0.0 ? init_std : sqrt(2.0 / ((double)buckets + (double)geo->n_heads));
    *out = t;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

static int64_t param_count(const void *inst)
{
    const t5 *t = inst;
    return (int64_t)t->shape.heads * t->shape.buckets;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)err;
    const t5 *t = inst;
    biaskit_rng r = biaskit_rng_seeded(seed);
    int64_t n = param_count(inst);
    for (int64_t i = 0; i < n; i++)
        theta[i] = (float)(t->init_std * biaskit_rng_normal(&r));
    return BIASKIT_OK;
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    const t5 *t = inst;
    if (capacity > 0)
        out[0] = (biaskit_tensor_info){"buckets", 0, t->shape.heads, t->shape.buckets};
    return 1;
}

static int check_distances(const t5 *t, int32_t distances, biaskit_error *err)
{
    if (distances <= 0)
        return t->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", (int)distances);
    return BIASKIT_OK;
}

static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    const t5 *t = inst;
    int rc = check_distances(t, distances, err);
    if (rc)
        return rc;
    const bk_t5_shape *s = &t->shape;
    float scale = (float)s->scale;
    for (int32_t d = 0; d < distances; d++) { /* one bucket computation per distance, for all heads */
        int32_t b = bk_t5_bucket(s, d);
        for (int32_t h = 0; h < s->heads; h++)
            out[(size_t)h * (size_t)distances + (size_t)d] = scale * theta[(size_t)h * (size_t)s->buckets + (size_t)b];
    }
    return BIASKIT_OK;
}

/* dtheta[h][bucket(d)] += scale * dtable[h][d]: each (head, bucket) sums its distances in ascending
 * order in double, then adds scale times the sum once. */
static int table_backward(const void *inst, const float *theta, int32_t distances, const float *dtable,
                          float *dtheta, biaskit_error *err)
{
    (void)theta;
    const t5 *t = inst;
    int rc = check_distances(t, distances, err);
    if (rc)
        return rc;
    const bk_t5_shape *s = &t->shape;
    size_t n = (size_t)s->heads * (size_t)s->buckets;
    double *acc = calloc(n, sizeof *acc);
    if (!acc)
        return t->svc->error(err, BIASKIT_ERR_NOMEM, "out of memory for the gradient of %zu bucket values", n);
    for (int32_t d = 0; d < distances; d++) {
        int32_t b = bk_t5_bucket(s, d);
        for (int32_t h = 0; h < s->heads; h++)
            acc[(size_t)h * (size_t)s->buckets + (size_t)b] +=
                (double)dtable[(size_t)h * (size_t)distances + (size_t)d];
    }
    for (size_t i = 0; i < n; i++)
        dtheta[i] += (float)(s->scale * acc[i]);
    free(acc);
    return BIASKIT_OK;
}

#ifdef BIASKIT_WITH_CUDA
static int table_cuda(const void *inst, const float *theta, int32_t distances, float *out, void *stream,
                      biaskit_error *err)
{
    const t5 *t = inst;
    int rc = check_distances(t, distances, err);
    return rc ? rc : bk_t5_table_cuda(t->svc, t->shape, theta, distances, out, stream, err);
}

static int table_backward_cuda(const void *inst, const float *theta, int32_t distances, const float *dtable,
                               float *dtheta, void *stream, biaskit_error *err)
{
    (void)theta;
    const t5 *t = inst;
    int rc = check_distances(t, distances, err);
    return rc ? rc : bk_t5_table_backward_cuda(t->svc, t->shape, distances, dtable, dtheta, stream, err);
}
#endif

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "t5",
    .version = "1.0.0",
    .summary = "T5 relative buckets: learned scale * w[h][bucket(d)], 32 log-spaced buckets to 128, shared by layers",
    .reference = "Raffel et al., Exploring the Limits of Transfer Learning with a Unified Text-to-Text Transformer, "
                 "JMLR 2020 (bucketing: HF transformers T5Attention._relative_position_bucket)",
    .capabilities = BIASKIT_CAP_TABLE,
    .flags = 0,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .param_count = param_count,
    .param_init = param_init,
    .param_tensors = param_tensors,
    .table = table,
    .table_backward = table_backward,
#ifdef BIASKIT_WITH_CUDA
    .table_cuda = table_cuda,
    .table_backward_cuda = table_backward_cuda,
#endif
};

BIASKIT_DEFINE_PLUGIN(descriptor)
