/* KERPLE on the device: the kernels <biaskit/table_plugin.h> writes from kerple.c's formulas (a
 * deterministic, atomic-free gradient reduction). */
#include "kerple.c"
