/* The CUDA kernels: the same file under nvcc, where the SDK's macros write kernels instead of the descriptor. */
#include "gaussian.c"
