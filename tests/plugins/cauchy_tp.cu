/* The CUDA kernels of cauchy_tp: the same file under nvcc (the EXPR rules stay host code). */
#include "cauchy_tp.c"
