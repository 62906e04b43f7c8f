/* biaskit check, inside: the comparisons of cuda.c (a plugin's CUDA path, on a GPU or emulated on the
 * host, against its host functions) and its search for device-only branches, callable by the tests. */
#ifndef BK_CHECK_CUDA_COMPARE_H
#define BK_CHECK_CUDA_COMPARE_H

#include <stddef.h>
#include <stdint.h>

#define CUDA_TABLE_RTOL 1e-5     /* |cuda - host| <= RTOL |host| + ATOL max|host of the head| */
#define CUDA_TABLE_ATOL 1e-6
#define CUDA_GRAD_TOL 1e-4       /* |cuda - host| <= TOL (|host_i| + max_j |host_j|) */

/* Tables of H heads x D distances: 0 when every entry of `dev` is within the tolerances of `host`, else
 * 1 with why ("head 3, distance 40 of 300: LABEL 1.5 vs host 1.25"). */
int ck_compare_tables(const float *dev, const float *host, int32_t H, int32_t D, const char *label, char *why,
                      size_t size);

/* The first entry of n where |dev - host| > CUDA_GRAD_TOL (|host_i| + max_j |host_j|), or -1. */
int64_t ck_gradient_mismatch(const float *dev, const float *host, size_t n);

/* The lines of the C source `path` where the word __CUDA_ARCH__ appears outside comments, string and
 * character literals, and #include lines: up to `capacity` of them into lines[] (ascending), their number
 * into *count. 0, or 1 with why when the file cannot be read. */
int ck_device_branches(const char *path, int *lines, int capacity, int *count, char *why, size_t size);

#endif
