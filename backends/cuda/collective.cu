/* collective.cu — the collective module (gradus_plugin.h, ABI 2.2) through NCCL: sums of
 * gradient buffers across processes, one GPU each, in device memory.
 *
 * NCCL is opened with dlopen when the plugin loads, not linked: a machine without it (or
 * with GRADUS_NCCL=0) keeps a working CUDA plugin without the module, and the host sums
 * through its own channel instead. Where to look: GRADUS_NCCL_LIBRARY, then the loader's
 * path (libnccl.so.2), then the library CMake found beside the toolkit at build time.
 *
 * NCCL's sums are reproducible run to run for a fixed rank count and topology (its ring
 * and tree orders are fixed by them); they are not in gradus's rank order.
 *
 * The sums run on a stream of the communicator's own: each waits (an event) for what the
 * host queued on the compute stream before it, and then runs beside the kernels queued
 * after it — the rest of the backward pass, which does not touch the summed buffers (the
 * ABI's contract). finish makes the compute stream wait for them and then waits for both. */
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_internal.h"

typedef struct nccl_api {
    void *dl;
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*comm_abort)(ncclComm_t);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    const char *(*error_string)(ncclResult_t);
    char where[512];
} nccl_api;

/* Loaded once per process and never changed after: shared by every instance. */
static nccl_api nccl;
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static const char *nccl_env_path;

static void load_nccl(void)
{
    const char *tries[3] = {nccl_env_path, "libnccl.so.2",
#ifdef GRADUS_NCCL_PATH
                            GRADUS_NCCL_PATH
#else
                            NULL
#endif
    };
    for (int i = 0; i < 3 && nccl.dl == NULL; i++) {
        if (tries[i] == NULL) continue;
        nccl.dl = dlopen(tries[i], RTLD_NOW | RTLD_LOCAL);
        if (nccl.dl != NULL) snprintf(nccl.where, sizeof nccl.where, "%s", tries[i]);
    }
    if (nccl.dl == NULL) return;
    *(void **)&nccl.get_unique_id = dlsym(nccl.dl, "ncclGetUniqueId");
    *(void **)&nccl.comm_init_rank = dlsym(nccl.dl, "ncclCommInitRank");
    *(void **)&nccl.all_reduce = dlsym(nccl.dl, "ncclAllReduce");
    *(void **)&nccl.broadcast = dlsym(nccl.dl, "ncclBroadcast");
    *(void **)&nccl.comm_get_async_error = dlsym(nccl.dl, "ncclCommGetAsyncError");
    *(void **)&nccl.comm_abort = dlsym(nccl.dl, "ncclCommAbort");
    *(void **)&nccl.comm_destroy = dlsym(nccl.dl, "ncclCommDestroy");
    *(void **)&nccl.error_string = dlsym(nccl.dl, "ncclGetErrorString");
    if (!nccl.get_unique_id || !nccl.comm_init_rank || !nccl.all_reduce || !nccl.broadcast || !nccl.comm_get_async_error ||
        !nccl.comm_abort || !nccl.comm_destroy || !nccl.error_string) {
        dlclose(nccl.dl);
        nccl.dl = NULL;
    }
}

extern "C" int cu_nccl_available(const gdp_host *host)
{
    const char *off = host->getenv != NULL ? host->getenv(host->host, "GRADUS_NCCL") : NULL;
    if (off != NULL && strcmp(off, "0") == 0) return 0;
    nccl_env_path = host->getenv != NULL ? host->getenv(host->host, "GRADUS_NCCL_LIBRARY") : NULL;
    pthread_once(&nccl_once, load_nccl);
    return nccl.dl != NULL;
}

static gdp_status nccl_fail(gdp_err *err, const char *call, ncclResult_t r)
{
    return gdp_fail(err, GDP_ERR_DEVICE, "cuda: %s: %s (NCCL %s)", call, nccl.error_string(r), nccl.where);
}

typedef struct cu_comm {
    ncclComm_t comm;
    int rank, size;
    cudaStream_t stream;      /* the sums' own */
    cudaEvent_t queued, done; /* compute -> sums, sums -> compute */
} cu_comm;

static void comm_free(cu_comm *c)
{
    if (c->queued != NULL) cudaEventDestroy(c->queued);
    if (c->done != NULL) cudaEventDestroy(c->done);
    if (c->stream != NULL) cudaStreamDestroy(c->stream);
    free(c);
}

static gdp_status coll_unique_id(void *, void *id, gdp_err *err)
{
    ncclUniqueId u;
    ncclResult_t r = nccl.get_unique_id(&u);
    if (r != ncclSuccess) return nccl_fail(err, "ncclGetUniqueId", r);
    memcpy(id, &u, sizeof u);
    return GDP_OK;
}

static gdp_status coll_open(void *b, const void *id, int32_t rank, int32_t size, void **comm, gdp_err *err)
{
    cu_backend *be = (cu_backend *)b;
    *comm = NULL;
    CU_TRY(cudaSetDevice(be->device));
    cu_comm *c = (cu_comm *)calloc(1, sizeof *c);
    if (c == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "cuda: out of memory");
    cudaError_t ce = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&c->queued, cudaEventDisableTiming);
    if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming);
    if (ce != cudaSuccess) {
        comm_free(c);
        return cu_check(ce, "the NCCL sums' stream", err);
    }
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclResult_t r = nccl.comm_init_rank(&c->comm, size, u, rank);
    if (r != ncclSuccess) {
        comm_free(c);
        return nccl_fail(err, "ncclCommInitRank", r);
    }
    c->rank = rank;
    c->size = size;
    *comm = c;
    return GDP_OK;
}

static gdp_status coll_allreduce(void *, void *comm, void *data, int64_t count, int32_t dtype, void *stream,
                                 gdp_err *err)
{
    cu_comm *c = (cu_comm *)comm;
    if (c->comm == NULL) return gdp_fail(err, GDP_ERR_DEVICE, "cuda: the NCCL communicator was aborted");
    ncclDataType_t t;
    switch (dtype) {
    case GDP_F32: t = ncclFloat32; break;
    case GDP_F16: t = ncclFloat16; break;
    case GDP_BF16: t = ncclBfloat16; break;
    case GDP_F64: t = ncclFloat64; break;
    case GDP_I32: t = ncclInt32; break;
    case GDP_I64: t = ncclInt64; break;
    default: return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda: no NCCL sum of dtype %d", (int)dtype);
    }
    /* after what the compute stream has queued so far (the buffer's last writer) */
    CU_TRY(cudaEventRecord(c->queued, (cudaStream_t)stream));
    CU_TRY(cudaStreamWaitEvent(c->stream, c->queued, 0));
    ncclResult_t r = nccl.all_reduce(data, data, (size_t)count, t, ncclSum, c->comm, c->stream);
    return r == ncclSuccess ? GDP_OK : nccl_fail(err, "ncclAllReduce", r);
}

static gdp_status coll_broadcast(void *, void *comm, void *data, int64_t bytes, int32_t root, void *stream,
                                 gdp_err *err)
{
    cu_comm *c = (cu_comm *)comm;
    if (c->comm == NULL) return gdp_fail(err, GDP_ERR_DEVICE, "cuda: the NCCL communicator was aborted");
    if (root < 0 || root >= c->size) return gdp_fail(err, GDP_ERR_INVALID, "cuda: broadcast from rank %d of %d", root, c->size);
    CU_TRY(cudaEventRecord(c->queued, (cudaStream_t)stream));
    CU_TRY(cudaStreamWaitEvent(c->stream, c->queued, 0));
    ncclResult_t r = nccl.broadcast(data, data, (size_t)bytes, ncclUint8, root, c->comm, c->stream);
    return r == ncclSuccess ? GDP_OK : nccl_fail(err, "ncclBroadcast", r);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Polls the stream and the communicator: NCCL waits forever for a peer that is gone, so
 * the wait is ours, and past the timeout the communicator is aborted. */
static gdp_status coll_finish(void *, void *comm, void *stream, double timeout_s, gdp_err *err)
{
    cu_comm *c = (cu_comm *)comm;
    if (c->comm == NULL) return gdp_fail(err, GDP_ERR_DEVICE, "cuda: the NCCL communicator was aborted");
    /* what the compute stream runs next reads the sums */
    CU_TRY(cudaEventRecord(c->done, c->stream));
    CU_TRY(cudaStreamWaitEvent((cudaStream_t)stream, c->done, 0));
    double deadline = now_s() + timeout_s;
    long sleep_ns = 2000;
    for (;;) {
        cudaError_t q = cudaStreamQuery((cudaStream_t)stream);
        if (q == cudaSuccess) return GDP_OK;
        if (q != cudaErrorNotReady) return cu_check(q, "cudaStreamQuery (after the NCCL sums)", err);
        ncclResult_t ar = ncclSuccess;
        ncclResult_t r = nccl.comm_get_async_error(c->comm, &ar);
        if (r != ncclSuccess || (ar != ncclSuccess && ar != ncclInProgress)) {
            nccl.comm_abort(c->comm);
            c->comm = NULL;
            return nccl_fail(err, "a peer of the NCCL communicator", r != ncclSuccess ? r : ar);
        }
        if (now_s() > deadline) {
            nccl.comm_abort(c->comm);
            c->comm = NULL;
            return gdp_fail(err, GDP_ERR_DEVICE,
                            "cuda: rank %d of %d: the NCCL sums did not finish within %g s: a rank died, hangs or "
                            "stopped early (communicator aborted)",
                            c->rank, c->size, timeout_s);
        }
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000) sleep_ns *= 2;
    }
}

static void coll_close(void *, void *comm)
{
    cu_comm *c = (cu_comm *)comm;
    if (c == NULL) return;
    if (c->comm != NULL) nccl.comm_destroy(c->comm);
    comm_free(c);
}

extern "C" const gdp_collective cu_collective_module = {
    sizeof(gdp_collective), sizeof(ncclUniqueId), coll_unique_id, coll_open, coll_allreduce, coll_finish, coll_close,
    coll_broadcast,
};
