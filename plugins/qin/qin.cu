/* The Qin et al. table on the device: the kernel <biaskit/table_plugin.h> writes from qin.c's formula. */
#include "qin.c"
