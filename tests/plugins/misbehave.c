/* A test plugin that misbehaves on purpose during training (tests/test_misbehave.sh): a learnable
 * per-head linear bias T_h(d) = -a_h * d, like testlin.c, that from step `at_step` on (for `steps`
 * steps; 0 = for good) does what `failure` says:
 *
 *   nan_table          table() writes a NaN (head 0, distance 1)
 *   inf_table          table() writes -inf (last head, last distance)
 *   table_error        table() returns an error with a message
 *   backward_error     table_backward() returns an error with a message
 *   nan_grad           table_backward() adds a NaN to the gradient of parameter 0
 *   huge_grad          table_backward() adds 1e30 to the gradient of parameter 0 (finite, exploding)
 *   segfault_table     table() writes through a NULL pointer
 *   segfault_backward  table_backward() writes through a NULL pointer
 *
 * The plugin counts steps itself: the engine computes the tables once per step before the step's
 * forward pass (core/train/train.c), so the n-th table() call for the first parameter copy it saw is
 * step n. The engine calls table_backward() once per layer, from the last layer down, so the k-th call
 * of a step is layer n_layers - 1 - k (modulo n_layers with gradient accumulation). `layer` restricts
 * the failure to one layer: its table_backward() calls, and table() of its parameter copy when the
 * term is per_layer (a shared term has one copy, layer 0's). */
#include <biaskit/plugin.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum failure {
    NONE,
    NAN_TABLE,
    INF_TABLE,
    TABLE_ERROR,
    BACKWARD_ERROR,
    NAN_GRAD,
    HUGE_GRAD,
    SEGFAULT_TABLE,
    SEGFAULT_BACKWARD
};
#define FAILURE_CHOICES \
    "none|nan_table|inf_table|table_error|backward_error|nan_grad|huge_grad|segfault_table|segfault_backward"

typedef struct misbehave {
    const biaskit_services *svc;
    int32_t heads, layers;
    int failure;
    int64_t at_step, steps, layer;
    /* mutable state, counted by the calls */
    const float *first_theta; /* the first parameter copy table() was called with (layer 0) */
    int64_t step;             /* table() calls on first_theta so far: the step being computed */
    int64_t backward_calls;   /* table_backward() calls in this step */
} misbehave;

static const biaskit_option options[] = {
    BIASKIT_OPTION_CHOICE("failure", "none", FAILURE_CHOICES, "what goes wrong (see tests/plugins/misbehave.c)"),
    BIASKIT_OPTION_INT("at_step", 3, "the first training step that misbehaves (1-based)"),
    BIASKIT_OPTION_INT("steps", 0, "how many steps misbehave (0 = every step from at_step on)"),
    BIASKIT_OPTION_INT("layer", -1, "only this layer misbehaves (-1 = every layer)"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    const char *failure = NULL;
    int64_t at_step, steps, layer;
    int rc;
    if ((rc = svc->get_string(cfg, "failure", &failure, err)) || (rc = svc->get_int(cfg, "at_step", &at_step, err)) ||
        (rc = svc->get_int(cfg, "steps", &steps, err)) || (rc = svc->get_int(cfg, "layer", &layer, err)))
        return rc;
    if (at_step < 1)
        return svc->config_error(cfg, "at_step", err, "expected a step >= 1, got %lld", (long long)at_step);
    if (steps < 0)
        return svc->config_error(cfg, "steps", err, "expected a count >= 0, got %lld", (long long)steps);
    if (layer < -1 || layer >= geo->n_layers)
        return svc->config_error(cfg, "layer", err, "expected -1 or a layer in [0, %d], got %lld",
                                 (int)geo->n_layers - 1, (long long)layer);
    if (geo->n_heads < 1)
        return svc->error(err, BIASKIT_ERR_CONFIG, "needs at least one head");
    misbehave *m = calloc(1, sizeof *m);
    if (!m)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    m->svc = svc;
    m->heads = geo->n_heads;
    m->layers = geo->n_layers > 0 ? geo->n_layers : 1;
    m->at_step = at_step, m->steps = steps, m->layer = layer;
    const char *names = FAILURE_CHOICES;
    for (int i = 0; *names; i++) { /* the index of `failure` in the choice list */
        size_t len = strcspn(names, "|");
        if (strlen(failure) == len && strncmp(failure, names, len) == 0)
            m->failure = i;
        names += len + (names[len] == '|');
    }
    *out = m;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

static int64_t param_count(const void *inst)
{
    return ((const misbehave *)inst)->heads;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)seed, (void)err;
    const misbehave *m = inst;
    for (int32_t h = 0; h < m->heads; h++)
        theta[h] = 0.25f * (float)(h + 1);
    return BIASKIT_OK;
}

static void param_project(const void *inst, float *theta)
{
    const misbehave *m = inst;
    for (int32_t h = 0; h < m->heads; h++)
        if (theta[h] < 0.0f)
            theta[h] = 0.0f;
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    if (capacity > 0)
        out[0] = (biaskit_tensor_info){"slope", 0, ((const misbehave *)inst)->heads, 1};
    return 1;
}

/* Misbehaving in this step, at this layer (-1: the call is not tied to one layer)? */
static int active(const misbehave *m, int failure, int64_t layer)
{
    return m->failure == failure && m->step >= m->at_step && (m->steps == 0 || m->step < m->at_step + m->steps) &&
           (m->layer < 0 || layer < 0 || layer == m->layer);
}

static void crash(void)
{
    volatile int *volatile nowhere = NULL; /* both volatile, or the compiler drops the store */
    *nowhere = 42;
}

static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    misbehave *m = (misbehave *)inst; /* the call counters change; calls are never concurrent */
    if (distances <= 0)
        return m->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive");
    if (!m->first_theta)
        m->first_theta = theta;
    if (theta == m->first_theta)
        m->step++, m->backward_calls = 0;
    int64_t layer = (theta - m->first_theta) / m->heads; /* the copy's layer; 0 for a shared term */
    for (int32_t h = 0; h < m->heads; h++)
        for (int32_t d = 0; d < distances; d++)
            out[(size_t)h * distances + d] = -theta[h] * (float)d;
    if (active(m, TABLE_ERROR, layer))
        return m->svc->error(err, BIASKIT_ERR_INTERNAL, "misbehaving on purpose: table() fails at step %lld",
                             (long long)m->step);
    if (active(m, NAN_TABLE, layer))
        out[distances > 1 ? 1 : 0] = NAN;
    if (active(m, INF_TABLE, layer))
        out[(size_t)m->heads * distances - 1] = -INFINITY;
    if (active(m, SEGFAULT_TABLE, layer))
        crash();
    return BIASKIT_OK;
}

static int table_backward(const void *inst, const float *theta, int32_t distances, const float *dtable,
                          float *dtheta, biaskit_error *err)
{
    (void)theta;
    misbehave *m = (misbehave *)inst;
    int64_t layer = m->layers - 1 - m->backward_calls++ % m->layers;
    if (active(m, BACKWARD_ERROR, layer))
        return m->svc->error(err, BIASKIT_ERR_INVALID,
                             "misbehaving on purpose: table_backward() fails at step %lld, layer %lld",
                             (long long)m->step, (long long)layer);
    if (active(m, SEGFAULT_BACKWARD, layer))
        crash();
    for (int32_t h = 0; h < m->heads; h++) {
        double acc = 0.0;
        for (int32_t d = 0; d < distances; d++)
            acc += -(double)d * dtable[(size_t)h * distances + d];
        dtheta[h] += (float)acc;
    }
    if (active(m, NAN_GRAD, layer))
        dtheta[0] += NAN;
    if (active(m, HUGE_GRAD, layer))
        dtheta[0] += 1e30f;
    return BIASKIT_OK;
}

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "misbehave",
    .version = "0.0.1",
    .summary = "test plugin: a learnable linear bias that fails on purpose from a given training step",
    .capabilities = BIASKIT_CAP_TABLE,
    .flags = 0,
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
};

BIASKIT_DEFINE_PLUGIN(descriptor)
