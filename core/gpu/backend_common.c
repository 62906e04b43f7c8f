/* What every backend shares (model/backend.h): destruction, and the host-side bucketing of a batch's
 * token ids that the device encoder backward sums by. */
#include "model/backend.h"

#include <string.h>

void bk_backend_destroy(bk_backend *be)
{
    if (be && be->destroy)
        be->destroy(be);
}

/* tokens = 0 .. n-1 sorted by inputs[token], stably (equal ids keep ascending token order): a
 * bottom-up merge sort that uses `start` (n + 1 entries) as its merge buffer, so no memory is
 * allocated; then one pass cuts the sorted tokens into buckets of equal id. O(n log n). */
int32_t bk_batch_buckets(const int32_t *inputs, int64_t n, int32_t *ids, int32_t *start, int32_t *tokens)
{
    if (n <= 0) {
        start[0] = 0;
        return 0;
    }
    for (int64_t k = 0; k < n; k++)
        tokens[k] = (int32_t)k;
    int32_t *src = tokens, *dst = start;
    for (int64_t width = 1; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            const int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) /* the right run only on a strictly smaller id: stable */
                dst[k++] = inputs[src[j]] < inputs[src[i]] ? src[j++] : src[i++];
            while (i < mid)
                dst[k++] = src[i++];
            while (j < hi)
                dst[k++] = src[j++];
        }
        int32_t *swap = src;
        src = dst, dst = swap;
    }
    if (src != tokens)
        memcpy(tokens, src, (size_t)n * sizeof *tokens);
    int32_t u = 0;
    for (int64_t k = 0; k < n; k++)
        if (k == 0 || inputs[tokens[k]] != inputs[tokens[k - 1]]) {
            ids[u] = inputs[tokens[k]];
            start[u] = (int32_t)k;
            u++;
        }
    start[u] = (int32_t)n;
    return u;
}
