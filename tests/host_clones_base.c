/* The host layers compiled once more, as baseline x86-64 only (BK_NO_HOST_CLONES) and under base_*
 * names, for test_host_clones to compare with the library's copies (model/host_simd.h). Built with
 * the same options as the library's files (core/CMakeLists.txt: BIASKIT_HOST_VECTOR_FLAGS). */
#define BK_NO_HOST_CLONES
#define bk_layernorm_forward base_layernorm_forward
#define bk_layernorm_backward base_layernorm_backward
#define bk_matmul_forward base_matmul_forward
#define bk_matmul_backward base_matmul_backward
#define bk_gelu_forward base_gelu_forward
#define bk_gelu_backward base_gelu_backward
#define bk_residual_forward base_residual_forward
#define bk_residual_backward base_residual_backward
#define bk_crossentropy_forward base_crossentropy_forward
#define bk_crossentropy_backward base_crossentropy_backward
#define bk_encoder_forward base_encoder_forward
#define bk_encoder_backward base_encoder_backward
#define bk_rmsnorm_forward base_rmsnorm_forward
#define bk_rmsnorm_backward base_rmsnorm_backward
#define bk_headnorm_forward base_headnorm_forward
#define bk_headnorm_backward base_headnorm_backward
#define bk_swiglu_forward base_swiglu_forward
#define bk_swiglu_backward base_swiglu_backward
#define bk_gqa_expand base_gqa_expand
#define bk_gqa_reduce base_gqa_reduce
#define bk_copy_rows base_copy_rows
#define bk_attention_merge base_attention_merge
#include "../core/model/layers.c"
