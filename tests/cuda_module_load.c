/* test_limits.sh's helper in a CUDA build: creates a cuda backend through the engine's loader
 * (cuda/loader.c), so that the module's loading is exercised where no GPU answers (the engine itself
 * loads it only when one does). Prints "created: <description>" (exit 0) or "error: <message>" (exit 1). */
#include "model/backend.h"

#include <stdio.h>

int main(void)
{
    bk_backend *be = NULL;
    bk_error err;
    if (bk_backend_cuda_create(&be, BK_MATMUL_FP32, &err) != BK_OK) {
        printf("error: %s\n", err.message);
        return 1;
    }
    printf("created: %s\n", be->description);
    bk_backend_destroy(be);
    return 0;
}
