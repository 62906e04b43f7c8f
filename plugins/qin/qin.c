/* The fixed biases of Qin et al., "Exploring Transformer Extrapolation", as a biaskit plugin: one
 * parameter-free table, the same for every head (qin_math.h has the formulas), written with
 * <biaskit/table_plugin.h> (qin.cu compiles this same file as the CUDA kernel).
 *
 * Options:
 *   form    type1 (-2 ln(t+1), default) | type2 (-ln(t+1)^2) | harmonic (-ln(t+1)) | nlogn (-ln(n ln n))
 *   offset  nlogn only: n = t + offset, an integer >= 2 (default 2) */
#include "qin_math.h"

#include <biaskit/table_plugin.h>

/* The choice list is in bk_qin_form's order: c.form is a bk_qin_form. */
#define QIN_CONSTANTS(C)                                                                                   \
    C(form, BIASKIT_TP_CHOICE("type1", "type1|type2|harmonic|nlogn"),                                      \
      "type1 -2ln(t+1), type2 -ln(t+1)^2; divergent probes: harmonic -ln(t+1), nlogn -ln(n ln n)")         \
    C(offset, BIASKIT_TP_INT(2, 2, INT32_MAX), "nlogn only: n = t + offset (>= 2, since ln 1 = 0)")

BIASKIT_TP_TYPES(qin, BIASKIT_TP_NO_PARAMS, QIN_CONSTANTS)

BIASKIT_TP_TABLE(qin) { return bk_qin_bias(c.form, c.offset, d); }
BIASKIT_TP_NO_GRADIENT(qin)

/* An offset set for a form that ignores it is worth a warning. */
static int qin_setup(biaskit_tp_instance *s, const biaskit_config *cfg, biaskit_error *err)
{
    (void)err;
    if (BIASKIT_TP_CONSTANT(s, form) != BK_QIN_NLOGN && s->svc->is_set(cfg, "offset"))
        s->svc->log(BIASKIT_LOG_WARN, "qin", "option 'offset' is used only by form = \"nlogn\"; form %s ignores it",
                    BIASKIT_TP_CONSTANT(s, form) == BK_QIN_TYPE1   ? "\"type1\""
                    : BIASKIT_TP_CONSTANT(s, form) == BK_QIN_TYPE2 ? "\"type2\""
                                                                   : "\"harmonic\"");
    return BIASKIT_OK;
}

/* The same row in every head: the host computes one. */
static const biaskit_tp_settings qin_settings = {1, qin_setup};

BIASKIT_TABLE_PLUGIN_WITH(qin, BIASKIT_TP_NO_PARAMS, QIN_CONSTANTS, &qin_settings, .name = "qin", .version = "1.1.0",
                          .summary = "Qin et al. fixed biases: type1 -2ln(t+1), type2 -ln(t+1)^2, probes -ln(t+1), -ln(n ln n)",
                          .reference = "Qin, Zhong & Deng, Exploring Transformer Extrapolation, AAAI 2024 (arXiv 2307.10156)")
