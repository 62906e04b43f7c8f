/* The host layers (model/layers.c) built for AVX2 alone (no clones; compiled with -mavx2,
 * tests/CMakeLists.txt) under avx2_* names: test_host_clones compares them with the baseline build
 * (host_clones_base.c), so that the AVX2 copy of BK_HOST_CLONES is checked on a machine whose loader
 * picks the AVX-512 one. */
#define BK_NO_HOST_CLONES
#define bk_layernorm_forward avx2_layernorm_forward
#define bk_layernorm_backward avx2_layernorm_backward
#define bk_matmul_forward avx2_matmul_forward
#define bk_matmul_backward avx2_matmul_backward
#define bk_gelu_forward avx2_gelu_forward
#define bk_gelu_backward avx2_gelu_backward
#define bk_residual_forward avx2_residual_forward
#define bk_residual_backward avx2_residual_backward
#define bk_crossentropy_forward avx2_crossentropy_forward
#define bk_crossentropy_backward avx2_crossentropy_backward
#define bk_encoder_forward avx2_encoder_forward
#define bk_encoder_backward avx2_encoder_backward
#define bk_rmsnorm_forward avx2_rmsnorm_forward
#define bk_rmsnorm_backward avx2_rmsnorm_backward
#define bk_headnorm_forward avx2_headnorm_forward
#define bk_headnorm_backward avx2_headnorm_backward
#define bk_swiglu_forward avx2_swiglu_forward
#define bk_swiglu_backward avx2_swiglu_backward
#define bk_gqa_expand avx2_gqa_expand
#define bk_gqa_reduce avx2_gqa_reduce
#define bk_copy_rows avx2_copy_rows
#define bk_attention_merge avx2_attention_merge
#include "../core/model/layers.c"
