/* What the HF transformers importer (train/import_hf.c) and exporter (train/export_hf.c) share: the one
 * conversion between transformers' YaRN attention_factor and the rope plugin's attn_factor.
 *
 * transformers (4.46, modeling_rope_utils.py) multiplies cos and sin, so q and k, by attention_factor, whose
 * default is 0.1 ln factor + 1; the rope plugin multiplies them by mscale(factor) x attn_factor, mscale being
 * that same 0.1 ln s + 1 (1 when s <= 1; plugins/rope/rope_math.h). So
 *   attn_factor = attention_factor / bk_hf_yarn_mscale(factor)     (import)
 *   attention_factor = attn_factor x bk_hf_yarn_mscale(factor)     (export)
 * and transformers' original context for YaRN is max_position_embeddings (4.46 reads no
 * original_max_position_embeddings for it). Its beta_fast and beta_slow default to 32 and 1, as the plugin's. */
#ifndef BK_TRAIN_HF_MAP_H
#define BK_TRAIN_HF_MAP_H

#include <math.h>

#define BK_HF_YARN_BETA_FAST 32.0
#define BK_HF_YARN_BETA_SLOW 1.0

static inline double bk_hf_yarn_mscale(double factor)
{
    return factor > 1.0 ? 0.1 * log(factor) + 1.0 : 1.0;
}

#endif
