/* Data-parallel processes (docs/scaling.md): MPI when the engine is built with it (CMake's FindMPI) and
 * started by an MPI launcher (`mpirun -np N biaskit train exp.toml`); one process otherwise, where every
 * call below is a copy or nothing.
 *
 * Every collective here has a fixed reduction order, so that a run repeated with the same number of
 * processes gives the same bits: sums go in rank order (0, 1, ..., N-1) in double precision, whatever
 * algorithm the MPI library would have chosen for MPI_Allreduce. */
#ifndef BK_DIST_H
#define BK_DIST_H

#include "util/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct bk_dist {
    int rank, size;    /* 0 and 1 for one process */
    int local_size;    /* processes of this job on this machine (for the thread count) */
    int initialized;   /* this process called MPI_Init (and calls MPI_Finalize) */
    void *comm;        /* the MPI communicator of the job (an MPI_Comm), NULL for one process */
    float *scratch;    /* bk_dist_mean's buffers */
    size_t scratch_n;
    int *counts;       /* 4 x size ints: bk_dist_mean's counts and displacements */
} bk_dist;

/* This process's share of the machine's cores: the cores over the job's processes on this machine,
 * at least 1 (the thread count when [run] threads is not set). */
int bk_dist_threads(const bk_dist *d);

/* Whether the engine was built with MPI. */
int bk_dist_available(void);
/* One process: rank 0 of 1, no MPI. */
void bk_dist_single(bk_dist *d);
/* The environment variable by which a launcher (Open MPI's mpirun, or a PMI launcher such as srun)
 * announced a job, with its value in *value; NULL when no launcher started this process. */
const char *bk_dist_launcher_var(const char **value);

/* MPI_Init when built with MPI and started by an MPI launcher (Open MPI's mpirun, or a PMI launcher such
 * as srun: the environment says so); else bk_dist_single. An error when the launcher started N > 1
 * processes of an engine built without MPI (each would train alone). */
int bk_dist_init(bk_dist *d, bk_error *err);
/* A barrier (no process leaves before all arrive: report errors before this), then MPI_Finalize when
 * bk_dist_init called MPI_Init; frees the scratch. */
void bk_dist_finalize(bk_dist *d);

/* Every rank's result code -> the same code on every rank: BK_OK when every rank has BK_OK, else the
 * code of the lowest failing rank, whose message every rank gets in err (prefixed "rank R: " on the
 * others). Collective: every rank must call it at the same point. */
int bk_dist_agree(bk_dist *d, int rc, bk_error *err);

/* Every rank's `text` (lines) against rank 0's: a rank whose text differs fails (BK_ERR_CONFIG) with a
 * message naming `what`, the first differing line with the [section] above it, and rank 0's line; then
 * every rank gets that failure (bk_dist_agree), so that no rank goes on to a collective the others never
 * reach. Collective. */
int bk_dist_same(bk_dist *d, const char *what, const char *text, bk_error *err);
/* Its comparison: BK_OK when `mine` is `rank0`, else the failure described above (without the rank). */
int bk_dist_compare_text(const char *what, const char *mine, const char *rank0, bk_error *err);

/* buf (n floats, the same n on every rank) := the mean over ranks: for each element, the values of
 * ranks 0, 1, ..., N-1 added in that order in double, divided by N, rounded once to float. Each rank
 * reduces 1/N of the elements (an all-to-all of chunks, then an all-gather of the reduced chunks), so
 * each rank sends and receives 2 (N-1)/N n floats, as a ring all-reduce does. */
int bk_dist_mean(bk_dist *d, float *buf, size_t n, bk_error *err);

/* all[r * count + i] := mine[i] of rank r, for every rank (the same on every rank). */
int bk_dist_allgather(bk_dist *d, const double *mine, size_t count, double *all, bk_error *err);

#endif
