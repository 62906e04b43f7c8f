/* cpu/backend_cpu.c built for AVX2 alone (its AdamW and scale loops), the table under the name
 * avx2_backend_cpu (see host_clones_avx2.c). */
#define BK_NO_HOST_CLONES
#define bk_backend_cpu avx2_backend_cpu
#define bk_backend_cpu_attention avx2_backend_cpu_attention
#include "../core/cpu/backend_cpu.c"
