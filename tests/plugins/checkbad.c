/* Plugins that load fine but break one rule each, for `biaskit check` (tests/test_check.c). Compiled
 * once per CHECKBAD_KIND into its own shared object; every other check must still pass on each.
 *
 * The base: a learnable slope per head, T_h(d) = -a_h * d, a_h >= 0 (param_project clamps), with one
 * option `init` (the initial slope, refused with a message when negative). The kinds:
 *   1 grad     table_backward() skips the last distance (an off-by-one): wrong gradient
 *   2 crash    create() crashes (SIGSEGV) on a negative `init` instead of refusing it
 *   3 project  param_project() applies softplus: in range, but not idempotent
 *   4 nondet   table() changes one value by one ulp on every other call: not deterministic
 *   5 nan      no parameters, fixed slopes, and a NaN at distance 40000 (< 65536)
 *   6 decl     no parameters; an option whose default is not among its choices, a CUDA gradient
 *              without a CUDA table, and a rotary function without the rotary capability
 *   7 hang     create() never returns on a negative `init`
 *   8 exit     create() calls exit(3) on a negative `init`
 *   9 uninit   table() adds a tiny per-head offset read from memory create() allocated and never wrote:
 *              finite whatever it holds, so only the fresh-memory check sees it
 *  10 spin     create() computes for ever (a busy loop) on a negative `init` */
#define _POSIX_C_SOURCE 200809L /* pause */
#include <biaskit/plugin.h>

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef CHECKBAD_KIND
#error "compile with -DCHECKBAD_KIND=1..10"
#endif

#define LEARNABLE (CHECKBAD_KIND <= 4 || CHECKBAD_KIND >= 7)
#define NAN_DISTANCE 40000

typedef struct checkbad {
    const biaskit_services *svc;
    int32_t heads;
    double init;
    uint32_t *offset; /* kind 9: allocated, never written */
} checkbad;

static const biaskit_option options[] = {
    BIASKIT_OPTION_DOUBLE("init", 0.25, "initial slope of head h: init * (h + 1), >= 0"),
#if CHECKBAD_KIND == 6
    BIASKIT_OPTION_CHOICE("flavour", "zzz", "plain|fancy", "a choice whose default is not a choice"),
#endif
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    double init;
    int rc = svc->get_double(cfg, "init", &init, err);
    if (rc)
        return rc;
    if (init < 0.0) {
#if CHECKBAD_KIND == 2
        raise(SIGSEGV); /* what a dereference of a bad pointer would do */
#elif CHECKBAD_KIND == 7
        for (;;)
            pause(); /* waits for a signal that never comes */
#elif CHECKBAD_KIND == 8
        exit(3);
#elif CHECKBAD_KIND == 10
        for (volatile unsigned long spin = 0;; spin++) {
        }
#endif
        return svc->config_error(cfg, "init", err, "expected a slope >= 0, got %g", init);
    }
    checkbad *b = malloc(sizeof *b);
    if (!b)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    b->svc = svc;
    b->heads = geo->n_heads;
    b->init = init;
    b->offset = NULL;
#if CHECKBAD_KIND == 9
    if (!(b->offset = malloc((size_t)b->heads * sizeof *b->offset))) {
        free(b);
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    }
#endif
    *out = b;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(((checkbad *)inst)->offset);
    free(inst);
}

static float slope(const checkbad *b, const float *theta, int32_t h)
{
    return LEARNABLE ? theta[h] : (float)(b->init * (h + 1));
}

static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    const checkbad *b = inst;
    if (distances <= 0)
        return b->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", (int)distances);
    for (int32_t h = 0; h < b->heads; h++)
        for (int32_t d = 0; d < distances; d++)
            out[(size_t)h * (size_t)distances + (size_t)d] =
                (CHECKBAD_KIND == 5 && d == NAN_DISTANCE) ? NAN : -slope(b, theta, h) * (float)d;
#if CHECKBAD_KIND == 9
    for (int32_t h = 0; h < b->heads; h++) /* the bug: a value nobody wrote, scaled to stay finite */
        for (int32_t d = 1; d < distances; d++)
            out[(size_t)h * (size_t)distances + (size_t)d] -= 0.001f * (float)((b->offset[h] >> 3) & 1u);
#endif
#if CHECKBAD_KIND == 4
    static unsigned calls;
    if (distances > 1 && b->heads > 0 && (calls++ & 1u))
        out[1] = nextafterf(out[1], -INFINITY);
#endif
    return BIASKIT_OK;
}

#if LEARNABLE
static int64_t param_count(const void *inst)
{
    return ((const checkbad *)inst)->heads;
}

static int param_init(const void *inst, float *theta, uint64_t seed, biaskit_error *err)
{
    (void)seed, (void)err;
    const checkbad *b = inst;
    for (int32_t h = 0; h < b->heads; h++)
        theta[h] = (float)(b->init * (h + 1));
    return BIASKIT_OK;
}

static void param_project(const void *inst, float *theta)
{
    const checkbad *b = inst;
    for (int32_t h = 0; h < b->heads; h++) {
#if CHECKBAD_KIND == 3
        theta[h] = theta[h] > 20.0f ? theta[h] : log1pf(expf(theta[h])); /* positive, but moves every time */
#else
        if (!(theta[h] >= 0.0f))
            theta[h] = 0.0f;
#endif
    }
}

static int32_t param_tensors(const void *inst, biaskit_tensor_info *out, int32_t capacity)
{
    if (capacity > 0)
        out[0] = (biaskit_tensor_info){"slope", 0, ((const checkbad *)inst)->heads, 1};
    return 1;
}

static int table_backward(const void *inst, const float *theta, int32_t distances, const float *dtable,
                          float *dtheta, biaskit_error *err)
{
    (void)theta, (void)err;
    const checkbad *b = inst;
    int32_t last = CHECKBAD_KIND == 1 ? distances - 1 : distances; /* kind 1 forgets d = distances - 1 */
    for (int32_t h = 0; h < b->heads; h++) {
        double acc = 0.0;
        for (int32_t d = 0; d < last; d++)
            acc -= (double)d * (double)dtable[(size_t)h * (size_t)distances + (size_t)d];
        dtheta[h] += (float)acc;
    }
    return BIASKIT_OK;
}
#endif

#if CHECKBAD_KIND == 6
/* Stand-ins with the right signatures; never called by a correct engine (see the capabilities). */
static int table_backward_cuda(const void *inst, const float *theta, int32_t distances, const float *dtable,
                               float *dtheta, void *stream, biaskit_error *err)
{
    (void)inst, (void)theta, (void)distances, (void)dtable, (void)dtheta, (void)stream, (void)err;
    return BIASKIT_OK;
}

static int rotary_frequencies(const void *inst, float *inv_freq, biaskit_error *err)
{
    (void)inst, (void)inv_freq, (void)err;
    return BIASKIT_OK;
}
#endif

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = CHECKBAD_NAME,
    .version = "0.0.1",
    .summary = "test plugin for biaskit check: breaks one rule on purpose",
    .capabilities = BIASKIT_CAP_TABLE,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .table = table,
#if LEARNABLE
    .param_count = param_count,
    .param_init = param_init,
    .param_project = param_project,
    .param_tensors = param_tensors,
    .table_backward = table_backward,
#endif
#if CHECKBAD_KIND == 6
    .table_backward_cuda = table_backward_cuda,
    .rotary_frequencies = rotary_frequencies,
#endif
};

BIASKIT_DEFINE_PLUGIN(descriptor)
