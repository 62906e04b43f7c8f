/* cpu/attention.c and cpu/attention_flash.c built for AVX2 alone (no clones; compiled with -mavx2,
 * tests/CMakeLists.txt) under avx2_* names: test_host_clones (the blocked kernel) and
 * test_attention_flash compare them with the copy the CPU picks and the baseline build, so that the
 * AVX2 copy of BK_HOST_CLONES is checked on a machine that picks the AVX-512 one. */
#define BK_NO_HOST_CLONES
#define bk_attention_forward avx2_attention_forward
#define bk_attention_backward avx2_attention_backward
#define bk_attention_check_args avx2_attention_check_args
#define bk_att_grads_plan avx2_att_grads_plan
#define bk_att_grads_reduce avx2_att_grads_reduce
#include "../core/cpu/attention.c"
#define bk_attention_flash_forward avx2_attention_flash_forward
#define bk_attention_flash_backward avx2_attention_flash_backward
#include "../core/cpu/attention_flash.c"
