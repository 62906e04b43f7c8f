#include "tp_scalar.c"
