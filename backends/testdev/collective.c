/* collective.c — the test device's collective module (ABI 2.2; broadcast 2.4).
 *
 * The ranks of a job are processes of this machine, each with its test device; they add
 * their buffers in shared memory, in rank order (shm_sum.c). A sum or broadcast is queued
 * and done at finish, which has the timeout: the host must not touch the buffers in
 * between, as with a device that sums beside its kernels. The module also checks the
 * host's side of the contract: rank 0 joins the job its own device made (the id carries the
 * maker), the sums are of this device's memory, and a finish follows them. */
#include "shm_sum.h"
#include "testdev_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TD_JOIN_TIMEOUT_S 60.0
#define TD_MAX_PENDING 100000

typedef struct td_sum {
    void *data;
    int64_t count;  /* elements of dtype; a broadcast's bytes */
    int32_t dtype;
    int32_t root;   /* a broadcast's root; -1 for a sum */
} td_sum;

typedef struct td_comm {
    uint64_t id;
    int rank, size;
    shm_job *job;       /* NULL for a job of one rank */
    td_sum *pending;    /* sums queued since the last finish */
    int64_t n_pending, cap_pending;
} td_comm;

/* A job's id: its number, unique among the jobs of this machine (the clock, the process,
 * the instance), and the instance that made it. */
typedef struct td_job_id {
    uint64_t number;
    uint64_t maker;
} td_job_id;

static gdp_status td_coll_id(void *be, void *id, gdp_err *err)
{
    (void)err;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    td_job_id j = {((uint64_t)ts.tv_sec * 1000000007ull) ^ ((uint64_t)ts.tv_nsec << 20) ^ ((uint64_t)getpid() << 40) ^
                       (uint64_t)(uintptr_t)be,
                   (uint64_t)(uintptr_t)be};
    memcpy(id, &j, sizeof j);
    return GDP_OK;
}

static gdp_status td_coll_open(void *be, const void *id, int32_t rank, int32_t size, void **comm, gdp_err *err)
{
    td_job_id j;
    memcpy(&j, id, sizeof j);
    uint64_t v = j.number;
    if (size < 1 || rank < 0 || rank >= size)
        return gdp_fail(err, GDP_ERR_INVALID, "testdev: rank %d of %d", rank, size);
    if (rank == 0 && j.maker != (uint64_t)(uintptr_t)be)
        return gdp_fail(err, GDP_ERR_INVALID, "testdev: rank 0 joins job %016llx, which another device made",
                        (unsigned long long)v);
    td_comm *c = calloc(1, sizeof *c);
    if (c == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "testdev: out of memory");
    c->id = v;
    c->rank = rank;
    c->size = size;
    char m[256];
    if (size > 1 && shm_job_open(v, rank, size, TD_JOIN_TIMEOUT_S, &c->job, m, sizeof m) != 0) {
        free(c);
        return gdp_fail(err, GDP_ERR_DEVICE, "testdev: rank %d of %d: %s", rank, size, m);
    }
    *comm = c;
    return GDP_OK;
}

/* Queues a sum or broadcast (what: its name for messages, n: its elements or bytes) after
 * the checks both share. */
static gdp_status td_queue(td_comm *c, td_sum x, const char *what, gdp_err *err)
{
    /* the host waits (finish) before the next step: collectives queued without end are a bug */
    if (c->n_pending >= TD_MAX_PENDING)
        return gdp_fail(err, GDP_ERR_INVALID, "testdev: %lld collectives queued and never finished", (long long)c->n_pending);
    if (x.data == NULL || x.count < 0 || (DEV_TAG != 0 && ((uintptr_t)x.data & DEV_TAG) == 0))
        return gdp_fail(err, GDP_ERR_INVALID, "testdev: %s of %lld at %p: not memory of this device", what,
                        (long long)x.count, x.data);
    if (c->n_pending == c->cap_pending) {
        int64_t cap = c->cap_pending ? 2 * c->cap_pending : 64;
        td_sum *p = realloc(c->pending, (size_t)cap * sizeof *p);
        if (p == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "testdev: out of memory");
        c->pending = p;
        c->cap_pending = cap;
    }
    c->pending[c->n_pending++] = x;
    return GDP_OK;
}

static gdp_status td_coll_sum(void *be, void *comm, void *data, int64_t count, int32_t dtype, void *stream, gdp_err *err)
{
    td_comm *c = comm;
    (void)be;
    (void)stream;
    if (!(dtype == GDP_F32 || dtype == GDP_F64 || dtype == GDP_I32 || dtype == GDP_I64))
        return gdp_fail(err, GDP_ERR_UNSUPPORTED, "testdev: no sum of dtype %d", (int)dtype);
    return td_queue(c, (td_sum){data, count, dtype, -1}, "sum", err);
}

static gdp_status td_coll_broadcast(void *be, void *comm, void *data, int64_t bytes, int32_t root, void *stream,
                                    gdp_err *err)
{
    td_comm *c = comm;
    (void)be;
    (void)stream;
    if (root < 0 || root >= c->size) return gdp_fail(err, GDP_ERR_INVALID, "testdev: broadcast from rank %d of %d", root, c->size);
    return td_queue(c, (td_sum){data, bytes, GDP_U8, root}, "broadcast", err);
}

static gdp_status td_coll_finish(void *be, void *comm, void *stream, double timeout_s, gdp_err *err)
{
    td_comm *c = comm;
    (void)stream;
    if (!(timeout_s > 0)) return gdp_fail(err, GDP_ERR_INVALID, "testdev: finish with a timeout of %g s", timeout_s);
    int64_t n = c->n_pending;
    c->n_pending = 0;
    if (c->job == NULL || n == 0) return GDP_OK;
    td_drain_queue(be); /* in stream order: after the kernels that wrote the buffers */
    char m[256];
    for (int64_t i = 0; i < n; i++) {
        const td_sum *x = &c->pending[i];
        int r = x->root >= 0 ? shm_job_broadcast(c->job, dev_to_host(x->data), x->count, x->root, timeout_s, m, sizeof m)
                             : shm_job_sum(c->job, dev_to_host(x->data), x->count, gdp_dtype_size(x->dtype),
                                           x->dtype == GDP_F32 || x->dtype == GDP_F64, timeout_s, m, sizeof m);
        if (r != 0)
            return gdp_fail(err, GDP_ERR_DEVICE, "testdev: %s", m);
    }
    return GDP_OK;
}

static void td_coll_close(void *be, void *comm)
{
    td_comm *c = comm;
    (void)be;
    if (c == NULL) return;
    shm_job_close(c->job);
    free(c->pending);
    free(c);
}

const gdp_collective td_collective = {.size = sizeof(gdp_collective), .id_bytes = sizeof(td_job_id),
                                      .unique_id = td_coll_id, .comm_open = td_coll_open,
                                      .allreduce_sum = td_coll_sum, .finish = td_coll_finish,
                                      .comm_close = td_coll_close, .broadcast = td_coll_broadcast};
