/* cpu/backend_cpu.c as baseline x86-64 only (its AdamW and scale loops), the table under the name
 * base_backend_cpu (see host_clones_base.c). */
#define BK_NO_HOST_CLONES
#define bk_backend_cpu base_backend_cpu
#define bk_backend_cpu_attention base_backend_cpu_attention
#include "../core/cpu/backend_cpu.c"
