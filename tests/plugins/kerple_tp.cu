/* kerple_tp's CUDA kernels: the same source under nvcc (see <biaskit/table_plugin.h>). */
#include "kerple_tp.c"
