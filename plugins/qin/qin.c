/* The fixed biases of Qin et al., "Exploring Transformer Extrapolation", as a biaskit plugin: one
 * parameter-free table, the same for every head (qin_math.h has the formulas).
 *
 * Options:
 *   form    type1 (-2 ln(t+1), default) | type2 (-ln(t+1)^2) | harmonic (-ln(t+1)) | nlogn (-ln(n ln n))
 *   offset  nlogn only: n = t + offset, an integer >= 2 (default 2) */
#include "qin_math.h"
#ifdef BIASKIT_WITH_CUDA
#include "qin_cuda.h"
#endif

#include <stdlib.h>
#include <string.h>

typedef struct qin {
    const biaskit_services *svc;
    int32_t heads;
    int form; /* bk_qin_form */
    int32_t offset;
} qin;

static const biaskit_option options[] = {
    BIASKIT_OPTION_CHOICE("form", "type1", "type1|type2|harmonic|nlogn",
                          "type1 -2ln(t+1), type2 -ln(t+1)^2; divergent probes: harmonic -ln(t+1), nlogn -ln(n ln n)"),
    BIASKIT_OPTION_INT("offset", 2, "nlogn only: n = t + offset (>= 2, since ln 1 = 0)"),
};

static int create(const biaskit_services *svc, const biaskit_config *cfg, const biaskit_geometry *geo, void **out,
                  biaskit_error *err)
{
    if (geo->n_heads < 1)
        return svc->error(err, BIASKIT_ERR_INVALID, "expected at least one head, got %d", (int)geo->n_heads);
    const char *form_name = NULL;
    int64_t offset = 0;
    int rc;
    if ((rc = svc->get_string(cfg, "form", &form_name, err)) || (rc = svc->get_int(cfg, "offset", &offset, err)))
        return rc;
    static const char *const names[] = {"type1", "type2", "harmonic", "nlogn"};
    int form = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(form_name, names[i]) == 0)
            form = i;
    if (form < 0) /* the host checks the choice list first; this guards a list edited without the code */
        return svc->config_error(cfg, "form", err, "expected one of type1, type2, harmonic, nlogn, got '%s'",
                                 form_name);
    if (offset < 2 || offset > INT32_MAX)
        return svc->config_error(cfg, "offset", err,
                                 "expected an integer >= 2 (n = t + offset and ln 1 = 0 makes n ln n = 0), got %lld",
                                 (long long)offset);
    if (form != BK_QIN_NLOGN && svc->is_set(cfg, "offset"))
        svc->log(BIASKIT_LOG_WARN, "qin", "option 'offset' is used only by form = \"nlogn\"; form \"%s\" ignores it",
                 form_name);
    qin *q = calloc(1, sizeof *q);
    if (!q)
        return svc->error(err, BIASKIT_ERR_NOMEM, "out of memory");
    *q = (qin){svc, geo->n_heads, form, (int32_t)offset};
    *out = q;
    return BIASKIT_OK;
}

static void destroy(void *inst)
{
    free(inst);
}

static int table(const void *inst, const float *theta, int32_t distances, float *out, biaskit_error *err)
{
    (void)theta;
    const qin *q = inst;
    if (distances <= 0)
        return q->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", (int)distances);
    for (int32_t d = 0; d < distances; d++)
        out[d] = bk_qin_bias(q->form, q->offset, d);
    for (int32_t h = 1; h < q->heads; h++) /* the same bias in every head */
        memcpy(out + (size_t)h * (size_t)distances, out, sizeof *out * (size_t)distances);
    return BIASKIT_OK;
}

#ifdef BIASKIT_WITH_CUDA
static int table_cuda(const void *inst, const float *theta, int32_t distances, float *out, void *stream,
                      biaskit_error *err)
{
    (void)theta;
    const qin *q = inst;
    if (distances <= 0)
        return q->svc->error(err, BIASKIT_ERR_INVALID, "distances must be positive, got %d", (int)distances);
    return bk_qin_table_cuda(q->svc, q->form, q->offset, q->heads, distances, out, stream, err);
}
#endif

static const biaskit_plugin descriptor = {
    .struct_size = sizeof(biaskit_plugin),
    .abi_version = BIASKIT_ABI_VERSION,
    .name = "qin",
    .version = "1.0.0",
    .summary = "Qin et al. fixed biases: type1 -2ln(t+1), type2 -ln(t+1)^2, probes -ln(t+1), -ln(n ln n)",
    .reference = "Qin, Zhong & Deng, Exploring Transformer Extrapolation, AAAI 2024 (arXiv 2307.10156)",
    .capabilities = BIASKIT_CAP_TABLE,
    .flags = 0,
    .options = options,
    .n_options = sizeof options / sizeof options[0],
    .create = create,
    .destroy = destroy,
    .table = table,
#ifdef BIASKIT_WITH_CUDA
    .table_cuda = table_cuda,
#endif
};

BIASKIT_DEFINE_PLUGIN(descriptor)
