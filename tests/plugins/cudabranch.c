/* A formula-first test plugin with a planted device-only branch, for tests/test_check_cuda_emul.c: its
 * formula returns another value when compiled for the GPU (__CUDA_ARCH__), so the host and the CUDA
 * kernels disagree, and the CUDA kernels emulated on the host (which take the host side) cannot see it.
 * `biaskit check` must WARN naming the line of the branch.
 *
 *   T_h(d) = -w_h d on the host; -2 w_h d on the GPU (the planted bug) */
#include <biaskit/table_plugin.h>

#define CUDABRANCH_PARAMS(X) X(w, PER_HEAD, BIASKIT_TP_CONST(0.5), 0.0, INFINITY, "slope w in -w d")

BIASKIT_TP_TYPES(cudabranch, CUDABRANCH_PARAMS, BIASKIT_TP_NO_CONSTANTS)

/* "__CUDA_ARCH__" in a comment or a string is not a branch: only the #ifdef below is reported. */
BIASKIT_TP_TABLE(cudabranch)
{
#ifdef __CUDA_ARCH__
    return -2.0f * p.w * (float)d;
#else
    return -p.w * (float)d;
#endif
}
BIASKIT_TP_GRADIENT(cudabranch) { g->w = -(float)d; }

BIASKIT_TABLE_PLUGIN(cudabranch, CUDABRANCH_PARAMS, BIASKIT_TP_NO_CONSTANTS, .name = "cudabranch",
                     .version = "1.0.0", .summary = "test: -w_h d with a planted device-only branch (__CUDA_ARCH__)")
