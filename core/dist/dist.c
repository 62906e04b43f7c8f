#include "dist/dist.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if BK_HAVE_MPI
#include <mpi.h>
#endif

/* The environment variables by which launchers tell a process its place in a job: Open MPI's mpirun,
 * then the PMI of MPICH / Slurm's srun. */
static const char *const launcher_size_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};

const char *bk_dist_launcher_var(const char **value)
{
    for (size_t i = 0; i < sizeof launcher_size_vars / sizeof launcher_size_vars[0]; i++) {
        const char *v = getenv(launcher_size_vars[i]);
        if (v && *v) {
            if (value)
                *value = v;
            return launcher_size_vars[i];
        }
    }
    return NULL;
}

/* The line of `text` that starts at `at`, into out (cut to fit). */
static void line_at(const char *text, size_t at, char *out, size_t size)
{
    const size_t n = strcspn(text + at, "\n");
    snprintf(out, size, "%.*s", (int)(n < size ? n : size - 1), text + at);
}

int bk_dist_compare_text(const char *what, const char *mine, const char *rank0, bk_error *err)
{
    if (strcmp(mine, rank0) == 0)
        return BK_OK;
    size_t start = 0, section = (size_t)-1; /* the line where they first differ, and the [section] above it */
    for (size_t i = 0; mine[i] == rank0[i]; i++)
        if (mine[i] == '\n') {
            start = i + 1;
            if (mine[start] == '[')
                section = start;
        }
    char a[200], b[200], s[120] = "";
    line_at(mine, start, a, sizeof a);
    line_at(rank0, start, b, sizeof b);
    if (section != (size_t)-1 && section != start) {
        line_at(mine, section, s, sizeof s - 4);
        strcat(s, ": ");
    }
    return bk_fail(err, BK_ERR_CONFIG, "the %s differs from rank 0's: %s'%s' (rank 0: '%s'); every process of a job "
                   "must run the same experiment, overrides, plugins and data", what, s, a, b);
}

/* The job size the launcher announced, or 0 when no launcher started this process. */
static int launched_size(void)
{
    const char *v = NULL;
    if (!bk_dist_launcher_var(&v))
        return 0;
    return atoi(v) > 0 ? atoi(v) : 1;
}

int bk_dist_threads(const bk_dist *d)
{
    int share = omp_get_num_procs() / (d->local_size > 0 ? d->local_size : 1);
    return share > 1 ? share : 1;
}

int bk_dist_available(void)
{
    return BK_HAVE_MPI;
}

void bk_dist_single(bk_dist *d)
{
    memset(d, 0, sizeof *d);
    d->size = d->local_size = 1;
}

void bk_dist_finalize(bk_dist *d)
{
#if BK_HAVE_MPI
    if (d->comm) {
        MPI_Comm *comm = d->comm;
        /* everyone gets here before anyone exits: the launcher ends the job at the first non-zero exit,
         * which would cut off rank 0's report of an error */
        MPI_Barrier(*comm);
        MPI_Comm_free(comm);
        free(comm);
    }
    if (d->initialized)
        MPI_Finalize();
#endif
    free(d->scratch);
    free(d->counts);
    bk_dist_single(d);
}

#if BK_HAVE_MPI

/* The largest count one MPI call moves: MPI counts are int. */
#define BK_DIST_CHUNK ((size_t)1 << 28)

static int mpi_failed(bk_error *err, const char *what, int code)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "error %d", code);
    return bk_fail(err, BK_ERR_IO, "MPI: %s failed: %s", what, text);
}

int bk_dist_init(bk_dist *d, bk_error *err)
{
    bk_dist_single(d);
    int announced = launched_size();
    if (announced == 0)
        return BK_OK;
    int code = MPI_Init(NULL, NULL);
    if (code != MPI_SUCCESS)
        return mpi_failed(err, "MPI_Init", code);
    d->initialized = 1;
    MPI_Comm *comm = malloc(sizeof *comm);
    if (!comm) {
        bk_dist_finalize(d);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    }
    /* errors come back as codes (the message names the call) instead of aborting the job */
    MPI_Comm_dup(MPI_COMM_WORLD, comm);
    MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN);
    d->comm = comm;
    MPI_Comm_rank(*comm, &d->rank);
    MPI_Comm_size(*comm, &d->size);
    if (!(d->counts = malloc(4 * (size_t)d->size * sizeof *d->counts))) {
        bk_dist_finalize(d);
        return bk_fail(err, BK_ERR_NOMEM, "out of memory");
    }
    MPI_Comm local;
    if (MPI_Comm_split_type(*comm, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        MPI_Comm_size(local, &d->local_size);
        MPI_Comm_free(&local);
    }
    return BK_OK;
}

int bk_dist_agree(bk_dist *d, int rc, bk_error *err)
{
    if (d->size == 1)
        return rc;
    MPI_Comm comm = *(MPI_Comm *)d->comm;
    /* the lowest failing rank, or size when none failed */
    int mine = rc ? d->rank : d->size, first = d->size;
    int code = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
    if (code != MPI_SUCCESS)
        return mpi_failed(err, "agreeing on the step's result (MPI_Allreduce)", code);
    if (first == d->size)
        return BK_OK;
    int failed_rc = rc;
    char message[sizeof err->message];
    if (d->rank == first)
        snprintf(message, sizeof message, "%s", err->message);
    if ((code = MPI_Bcast(&failed_rc, 1, MPI_INT, first, comm)) != MPI_SUCCESS ||
        (code = MPI_Bcast(message, (int)sizeof message, MPI_CHAR, first, comm)) != MPI_SUCCESS)
        return mpi_failed(err, "sharing a rank's error (MPI_Bcast)", code);
    if (d->rank != first)
        return bk_fail(err, failed_rc, "rank %d: %s", first, message);
    return failed_rc;
}

int bk_dist_mean(bk_dist *d, float *buf, size_t n, bk_error *err)
{
    if (d->size == 1 || n == 0)
        return BK_OK;
    MPI_Comm comm = *(MPI_Comm *)d->comm;
    const int N = d->size;
    for (size_t start = 0; start < n; start += BK_DIST_CHUNK) {
        size_t m = n - start < BK_DIST_CHUNK ? n - start : BK_DIST_CHUNK;
        float *x = buf + start;
        /* rank r reduces elements [lo(r), lo(r+1)) */
        int *counts = d->counts, *displs = counts + N, *rcounts = displs + N, *rdispls = rcounts + N;
        for (int r = 0; r < N; r++) {
            size_t lo = m * (size_t)r / (size_t)N, hi = m * (size_t)(r + 1) / (size_t)N;
            counts[r] = (int)(hi - lo);
            displs[r] = (int)lo;
        }
        int mine = counts[d->rank];
        for (int r = 0; r < N; r++) {
            rcounts[r] = mine;
            rdispls[r] = r * mine;
        }
        size_t need = (size_t)N * (size_t)mine;
        if (need > d->scratch_n) {
            float *s = realloc(d->scratch, need * sizeof *s);
            if (!s)
                return bk_fail(err, BK_ERR_NOMEM, "out of memory for %zu gradient values from %d ranks", need, N);
            d->scratch = s, d->scratch_n = need;
        }
        float *got = d->scratch; /* got[r * mine + i]: element displs[rank] + i of rank r */
        int code = MPI_Alltoallv(x, counts, displs, MPI_FLOAT, got, rcounts, rdispls, MPI_FLOAT, comm);
        if (code != MPI_SUCCESS)
            return mpi_failed(err, "exchanging gradient chunks (MPI_Alltoallv)", code);
        float *own = x + displs[d->rank];
        for (int i = 0; i < mine; i++) {
            double s = 0.0;
            for (int r = 0; r < N; r++)
                s += (double)got[(size_t)r * (size_t)mine + (size_t)i];
            own[i] = (float)(s / (double)N);
        }
        code = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, x, counts, displs, MPI_FLOAT, comm);
        if (code != MPI_SUCCESS)
            return mpi_failed(err, "gathering the averaged gradient (MPI_Allgatherv)", code);
    }
    return BK_OK;
}

int bk_dist_allgather(bk_dist *d, const double *mine, size_t count, double *all, bk_error *err)
{
    if (d->size == 1) {
        memcpy(all, mine, count * sizeof *all);
        return BK_OK;
    }
    if (count > (size_t)BK_DIST_CHUNK)
        return bk_fail(err, BK_ERR_INVALID, "MPI: %zu values per rank to gather; at most %zu", count,
                       (size_t)BK_DIST_CHUNK);
    int code = MPI_Allgather(mine, (int)count, MPI_DOUBLE, all, (int)count, MPI_DOUBLE, *(MPI_Comm *)d->comm);
    if (code != MPI_SUCCESS)
        return mpi_failed(err, "gathering values (MPI_Allgather)", code);
    return BK_OK;
}

int bk_dist_same(bk_dist *d, const char *what, const char *text, bk_error *err)
{
    if (d->size == 1)
        return BK_OK;
    MPI_Comm comm = *(MPI_Comm *)d->comm;
    long long n = d->rank == 0 ? (long long)strlen(text) + 1 : 0;
    int code = MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, comm);
    if (code != MPI_SUCCESS)
        return mpi_failed(err, "sharing rank 0's experiment (MPI_Bcast)", code);
    if (n > 0x7fffffffLL) /* every rank knows n: every rank returns here */
        return bk_fail(err, BK_ERR_INVALID, "rank 0's %s is %lld bytes; at most 2^31 can be compared", what, n);
    char *rank0 = d->rank == 0 ? (char *)text : malloc((size_t)n);
    if (!rank0) { /* a rank that cannot take part in the broadcast: the job cannot go on */
        fprintf(stderr, "biaskit: error: rank %d: out of memory for rank 0's %s (%lld bytes)\n", d->rank, what, n);
        MPI_Abort(comm, 1);
    }
    int rc = BK_OK;
    if ((code = MPI_Bcast(rank0, (int)n, MPI_CHAR, 0, comm)) != MPI_SUCCESS)
        rc = mpi_failed(err, "sharing rank 0's experiment (MPI_Bcast)", code);
    else
        rc = bk_dist_compare_text(what, text, rank0, err); /* bk_dist_agree names the rank */
    if (d->rank != 0)
        free(rank0);
    return bk_dist_agree(d, rc, err);
}

#else /* one process */

int bk_dist_init(bk_dist *d, bk_error *err)
{
    bk_dist_single(d);
    int announced = launched_size();
    if (announced > 1)
        return bk_fail(err, BK_ERR_INVALID,
                       "started as one of %d processes (an MPI launcher), but this biaskit was built without MPI: "
                       "install libopenmpi-dev and rebuild (CMake finds it), or run one process",
                       announced);
    return BK_OK;
}

int bk_dist_agree(bk_dist *d, int rc, bk_error *err)
{
    (void)d, (void)err;
    return rc;
}

int bk_dist_same(bk_dist *d, const char *what, const char *text, bk_error *err)
{
    (void)d, (void)what, (void)text, (void)err;
    return BK_OK;
}

int bk_dist_mean(bk_dist *d, float *buf, size_t n, bk_error *err)
{
    (void)d, (void)buf, (void)n, (void)err;
    return BK_OK;
}

int bk_dist_allgather(bk_dist *d, const double *mine, size_t count, double *all, bk_error *err)
{
    (void)d, (void)err;
    memcpy(all, mine, count * sizeof *all);
    return BK_OK;
}

#endif
