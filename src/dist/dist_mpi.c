/* dist_mpi.c — gd_dist over MPI (built when CMake finds MPI for C).
 *
 * A sum is a reduce-scatter and an all-gather written out by hand rather than
 * MPI_Allreduce, whose order of additions MPI leaves to the implementation: the bucket is
 * cut into N chunks, rank c receives every rank's chunk c (all-to-all), adds them in rank
 * order, and the sums are gathered back to everyone. Each rank moves about 2 buckets, as
 * a ring all-reduce does, and the bits do not depend on the MPI library.
 *
 * Every collective is nonblocking, polled until done or until the timeout: a rank that
 * died or hangs makes the others fail with a message instead of waiting forever. */
#include "alloc.h"
#include "dist_impl.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct mpi_state {
    MPI_Comm comm;
    int initialized_here;  /* MPI_Init was ours, so MPI_Finalize is too */
    void *scratch;         /* N chunks of a bucket */
    size_t scratch_bytes;
    int *counts, *displs, *rcounts, *rdispls;
} mpi_state;

static gd_status mpi_error(gd_dist *d, const char *what, const char *call, int code)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", code);
    return gd_dist_fail(d, GD_ERR_DEVICE, what, "%s: %s", call, msg);
}

/* Polls req until it completes or the timeout passes. */
static gd_status wait_for(gd_dist *d, MPI_Request *req, const char *what, const char *call)
{
    double deadline = gd_dist_now() + d->timeout_s;
    long sleep_ns = 1000;
    for (;;) {
        int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_error(d, what, call, rc);
        if (done) return GD_OK;
        if (gd_dist_now() > deadline)
            /* the request is left pending: the job is broken and MPI is not finalized */
            return gd_dist_fail(d, GD_ERR_DEVICE, what,
                                "no answer from the other ranks within %g s (%s): a rank died, hangs or stopped early",
                                d->timeout_s, call);
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000) sleep_ns *= 2;
    }
}

static gd_status mpi_allreduce(gd_dist *d, void *buf, size_t n, gd_dist_elem e, const char *what)
{
    mpi_state *m = d->impl;
    int N = d->size;
    size_t es = gd_dist_elem_size(e);
    for (int c = 0; c < N; c++) {
        size_t lo = n * (size_t)c / (size_t)N, hi = n * (size_t)(c + 1) / (size_t)N;
        m->counts[c] = (int)((hi - lo) * es); /* bytes: a bucket is far below INT_MAX */
        m->displs[c] = (int)(lo * es);
    }
    int mine = m->counts[d->rank];
    for (int r = 0; r < N; r++) {
        m->rcounts[r] = mine;
        m->rdispls[r] = r * mine;
    }
    size_t need = (size_t)mine * (size_t)N;
    if (need > m->scratch_bytes) {
        void *s = gd_realloc(m->scratch, need);
        if (s == NULL) return gd_dist_fail(d, GD_ERR_NOMEM, what, "out of memory for %zu bytes of scratch", need);
        m->scratch = s;
        m->scratch_bytes = need;
    }
    MPI_Request req;
    int rc = MPI_Ialltoallv(buf, m->counts, m->displs, MPI_BYTE, m->scratch, m->rcounts, m->rdispls, MPI_BYTE, m->comm,
                            &req);
    if (rc != MPI_SUCCESS) return mpi_error(d, what, "MPI_Ialltoallv", rc);
    gd_status st = wait_for(d, &req, what, "the reduce-scatter");
    if (st != GD_OK) return st;
    /* this rank's chunk, summed in rank order, written where it belongs in buf */
    gd_dist_sum_in_order((char *)buf + m->displs[d->rank], m->scratch, N, (size_t)mine / es, e);
    rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, buf, m->counts, m->displs, MPI_BYTE, m->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_error(d, what, "MPI_Iallgatherv", rc);
    return wait_for(d, &req, what, "the all-gather");
}

static gd_status mpi_broadcast(gd_dist *d, void *buf, size_t bytes, int root, const char *what)
{
    mpi_state *m = d->impl;
    MPI_Request req;
    int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, m->comm, &req);
    if (rc != MPI_SUCCESS) return mpi_error(d, what, "MPI_Ibcast", rc);
    return wait_for(d, &req, what, "a broadcast");
}

static void mpi_close(gd_dist *d, int broken)
{
    mpi_state *m = d->impl;
    if (m == NULL) return;
    /* a broken job never finalizes: MPI_Finalize would wait for the rank that is gone, and
     * a process leaving without it is what tells mpirun to end the others */
    if (!broken) {
        MPI_Comm_free(&m->comm);
        if (m->initialized_here) MPI_Finalize();
    }
    gd_free(m->scratch);
    gd_free(m->counts);
    gd_free(m);
    d->impl = NULL;
}

static const gd_dist_ops mpi_ops = {"mpi", mpi_allreduce, mpi_broadcast, mpi_close};

gd_status gd_dist_mpi_open(gd_dist *d)
{
    int inited = 0, provided = MPI_THREAD_SINGLE;
    MPI_Initialized(&inited);
    /* the data-parallel trainer sums gradients on a thread of its own, one call at a time */
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return gd_ctx_fail(d->ctx, GD_ERR_DEVICE, "MPI_Init_thread failed");
    if (inited) MPI_Query_thread(&provided);
    d->serialized_threads = provided >= MPI_THREAD_SERIALIZED;
    mpi_state *m = gd_calloc(1, sizeof *m);
    if (m == NULL) return gd_ctx_fail(d->ctx, GD_ERR_NOMEM, "gd_dist_open: out of memory");
    m->initialized_here = !inited;
    /* errors come back as codes, so they become messages instead of MPI ending the process */
    MPI_Comm_dup(MPI_COMM_WORLD, &m->comm);
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &d->rank);
    MPI_Comm_size(m->comm, &d->size);
    MPI_Comm local;
    d->local_rank = 0;
    if (MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        MPI_Comm_rank(local, &d->local_rank);
        MPI_Comm_free(&local);
    }
    m->counts = gd_malloc(sizeof(int) * 4 * (size_t)d->size);
    if (m->counts == NULL) {
        MPI_Comm_free(&m->comm);
        if (m->initialized_here) MPI_Finalize();
        gd_free(m);
        return gd_ctx_fail(d->ctx, GD_ERR_NOMEM, "gd_dist_open: out of memory");
    }
    m->displs = m->counts + d->size;
    m->rcounts = m->displs + d->size;
    m->rdispls = m->rcounts + d->size;
    d->impl = m;
    d->ops = &mpi_ops;
    return GD_OK;
}
