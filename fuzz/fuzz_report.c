/* Fuzz target: the report's readers (core/report/report.c) on bytes, through bk_report_read_bytes:
 * sweep.json (the runs, their directories, lengths, grid points), a run's eval.json and
 * eval-sliding.json (`biaskit eval --json`: lengths, losses, position-wise losses, the step), and
 * metrics.jsonl's learned mixing weights (one JSON object a line; steps logged again after a resume).
 * The first input byte picks the reader (mod 4); the rest is the file. Nothing touches the disk.
 * Oracle: every failure has a message, and no reader breaks its own promise (BK_ERR_INTERNAL: the
 * mixing weights' steps drawn strictly increase). */
#include "fuzz.h"

#include "report/report.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bk_report_file kind = (bk_report_file)(data[0] % 4);
    bk_error err;
    int rc = bk_report_read_bytes(kind, (const char *)data + 1, size - 1, &err);
    if (rc == BK_ERR_INTERNAL || (rc != BK_OK && err.message[0] == '\0'))
        abort();
    return 0;
}
