/* ALiBi's table on the device: the kernels <biaskit/table_plugin.h> writes from alibi.c's formula. */
#include "alibi.c"
