/* cpu/attention.c and cpu/attention_flash.c as baseline x86-64 only, under base_* names (see host_clones_base.c). */
#define BK_NO_HOST_CLONES
#define bk_attention_forward base_attention_forward
#define bk_attention_backward base_attention_backward
#define bk_attention_check_args base_attention_check_args
#define bk_att_grads_plan base_att_grads_plan
#define bk_att_grads_reduce base_att_grads_reduce
#include "../core/cpu/attention.c"
#define bk_attention_flash_forward base_attention_flash_forward
#define bk_attention_flash_backward base_attention_flash_backward
#include "../core/cpu/attention_flash.c"
