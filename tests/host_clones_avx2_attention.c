/* cpu/attention_flash.c built for AVX2 alone (no clones; compiled with -mavx2, tests/CMakeLists.txt) under
 * avx2_* names: test_attention_flash compares it with the copy the CPU picks and the baseline build, so
 * that the AVX2 copy of BK_HOST_CLONES_WIDE is checked on a machine that picks the AVX-512 one. */
#define BK_NO_HOST_CLONES
#define bk_attention_flash_forward avx2_attention_flash_forward
#define bk_attention_flash_backward avx2_attention_flash_backward
#include "../core/cpu/attention_flash.c"
