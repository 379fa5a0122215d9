/* device.cu — the device module: memory, streams, events and copies.
 *
 * Memory. Allocation happens when the host compiles a program or creates a tensor, never
 * while a program runs (kernels get their scratch as planned workspaces). Device memory
 * comes from our own stream-ordered pool (cudaMallocAsync) whose release threshold is
 * "never": freed blocks stay cached in the pool and later requests reuse them, so a
 * program compiled again (another batch size, another graph) rarely reaches the driver.
 * Allocation and freeing are ordered on the compute stream; streams the host created are
 * fenced with events so that a block freed while one of them still reads it is not handed
 * out again before that work is done. GRADUS_CUDA_MANAGED=1 switches to managed memory,
 * which the host may read in place.
 *
 * Copies. h2d stages through pinned slots so that it can return before the DMA is done
 * (the caller may reuse src at once); d2h DMAs into pinned slots and copies out once each
 * slot's event fired, so it returns with dst filled.
 *
 * Waiting (synchronize, event_synchronize, copy_d2h) and poll_error report bad data that
 * kernels found on the device (baddata.cu).
 */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

gdp_status cu_check(cudaError_t e, const char *call, gdp_err *err)
{
    if (e == cudaSuccess) return GDP_OK;
    (void)cudaGetLastError(); /* clears non-sticky errors; sticky ones persist anyway */
    return gdp_fail(err, e == cudaErrorMemoryAllocation ? GDP_ERR_NOMEM : GDP_ERR_DEVICE,
                    "cuda: %s failed: %s (%s)", call, cudaGetErrorName(e), cudaGetErrorString(e));
}

static cu_backend *BE(void *b) { return (cu_backend *)b; }

static double mib(size_t b) { return (double)b / (1024.0 * 1024.0); }

/* ---- setup ------------------------------------------------------------------------------ */

gdp_status cu_device_open(cu_backend *be, gdp_err *err)
{
    CU_TRY(cudaStreamCreateWithFlags(&be->compute, cudaStreamNonBlocking));
    CU_TRY(cudaEventCreateWithFlags(&be->fence, cudaEventDisableTiming));
    if (!be->managed) {
        cudaMemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = cudaMemAllocationTypePinned;
        props.handleTypes = cudaMemHandleTypeNone;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = be->device;
        CU_TRY(cudaMemPoolCreate(&be->pool, &props));
        /* Keep everything freed cached: memory goes back to the driver only on trim. */
        uint64_t keep = UINT64_MAX;
        CU_TRY(cudaMemPoolSetAttribute(be->pool, cudaMemPoolAttrReleaseThreshold, &keep));
    }
    for (int i = 0; i < CU_NSTAGE; i++) {
        /* Pinned buffers are taken on first use, so a program that never copies pays
         * nothing; their events exist from the start. */
        CU_TRY(cudaEventCreateWithFlags(&be->stage[i].done, cudaEventDisableTiming));
    }
    return cu_bad_open(be, err);
}

void cu_device_close(cu_backend *be)
{
    /* Best effort: errors here have nowhere to go, and a sticky device error must not
     * stop us from releasing host resources. */
    if (be->compute != NULL) (void)cudaStreamSynchronize(be->compute);
    for (int i = 0; i < CU_NSTAGE; i++) {
        if (be->stage[i].done != NULL) {
            (void)cudaEventSynchronize(be->stage[i].done);
            (void)cudaEventDestroy(be->stage[i].done);
        }
        if (be->stage[i].buf != NULL) (void)cudaFreeHost(be->stage[i].buf);
    }
    for (int i = 0; i < be->n_user; i++) {
        (void)cudaEventDestroy(be->user_ev[i]);
        (void)cudaStreamDestroy(be->user[i]);
    }
    be->n_user = 0;
    cu_bad_close(be);
    if (be->pool != NULL) (void)cudaMemPoolDestroy(be->pool);
    if (be->fence != NULL) (void)cudaEventDestroy(be->fence);
    if (be->compute != NULL) (void)cudaStreamDestroy(be->compute);
    (void)cudaGetLastError();
}

/* ---- memory ----------------------------------------------------------------------------- */

static gdp_status oom(cu_backend *be, size_t bytes, gdp_err *err)
{
    size_t fr = 0, tot = 0;
    (void)cudaMemGetInfo(&fr, &tot);
    uint64_t reserved = 0, used = 0;
    if (be->pool != NULL) {
        (void)cudaMemPoolGetAttribute(be->pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
        (void)cudaMemPoolGetAttribute(be->pool, cudaMemPoolAttrUsedMemCurrent, &used);
    }
    (void)cudaGetLastError();
    return gdp_fail(err, GDP_ERR_NOMEM,
                    "cuda: out of memory allocating %zu bytes (%.1f MiB) on %s: %.1f MiB free of "
                    "%.1f MiB on the device, %.1f MiB in use by gradus, %.1f MiB cached",
                    bytes, mib(bytes), be->name, mib(fr), mib(tot), mib((size_t)used),
                    mib((size_t)(reserved - used)));
}

/* Orders every host-created stream after the compute stream's work so far (a new block
 * may be used on any of them). Caller holds be->mu. */
static gdp_status fence_users_after_compute(cu_backend *be, gdp_err *err)
{
    if (be->n_user == 0) return GDP_OK;
    CU_TRY(cudaEventRecord(be->fence, be->compute));
    for (int i = 0; i < be->n_user; i++) CU_TRY(cudaStreamWaitEvent(be->user[i], be->fence, 0));
    return GDP_OK;
}

/* Orders the compute stream after every host-created stream's work so far (a freed block
 * may still be read there). Caller holds be->mu. */
static gdp_status fence_compute_after_users(cu_backend *be, gdp_err *err)
{
    for (int i = 0; i < be->n_user; i++) {
        CU_TRY(cudaEventRecord(be->user_ev[i], be->user[i]));
        CU_TRY(cudaStreamWaitEvent(be->compute, be->user_ev[i], 0));
    }
    return GDP_OK;
}

static gdp_status alloc_locked(cu_backend *be, size_t bytes, void **ptr, gdp_err *err)
{
    *ptr = NULL;
    if (bytes == 0) bytes = 1; /* distinct non-NULL pointers for empty tensors */
    if (be->managed) {
        /* Never ask for more managed memory than is free: oversubscribing can stall the
         * whole GPU rather than fail the call. */
        size_t fr = 0, tot = 0;
        CU_TRY(cudaMemGetInfo(&fr, &tot));
        if (bytes > fr) return oom(be, bytes, err);
        cudaError_t e = cudaMallocManaged(ptr, bytes, cudaMemAttachGlobal);
        if (e == cudaErrorMemoryAllocation) return oom(be, bytes, err);
        CU_TRY(e);
        be->live_bytes += bytes;
        return GDP_OK;
    }
    cudaError_t e = cudaMallocAsync(ptr, bytes, be->pool, be->compute);
    if (e == cudaErrorMemoryAllocation) {
        /* The pool may hold cached blocks of other sizes: wait for pending frees, give
         * the cache back to the driver and try once more before reporting. */
        (void)cudaGetLastError();
        CU_TRY(cudaStreamSynchronize(be->compute));
        CU_TRY(cudaMemPoolTrimTo(be->pool, 0));
        e = cudaMallocAsync(ptr, bytes, be->pool, be->compute);
        if (e == cudaErrorMemoryAllocation) {
            *ptr = NULL;
            return oom(be, bytes, err);
        }
    }
    CU_TRY(e);
    return fence_users_after_compute(be, err);
}

static gdp_status dev_alloc(void *b, size_t bytes, void **ptr, gdp_err *err)
{
    cu_backend *be = BE(b);
    if (ptr == NULL) return gdp_fail(err, GDP_ERR_INVALID, "cuda alloc: ptr is NULL");
    CU_TRY(cudaSetDevice(be->device));
    pthread_mutex_lock(&be->mu);
    gdp_status s = alloc_locked(be, bytes, ptr, err);
    pthread_mutex_unlock(&be->mu);
    return s;
}

static gdp_status free_locked(cu_backend *be, void *ptr, gdp_err *err)
{
    if (be->managed) {
        /* cudaFree waits for the device, so no work can still be using the block. */
        CU_TRY(cudaFree(ptr));
        return GDP_OK;
    }
    gdp_status s = fence_compute_after_users(be, err);
    if (s != GDP_OK) return s;
    CU_TRY(cudaFreeAsync(ptr, be->compute));
    return GDP_OK;
}

static gdp_status dev_free(void *b, void *ptr, gdp_err *err)
{
    cu_backend *be = BE(b);
    if (ptr == NULL) return GDP_OK;
    CU_TRY(cudaSetDevice(be->device));
    pthread_mutex_lock(&be->mu);
    gdp_status s = free_locked(be, ptr, err);
    pthread_mutex_unlock(&be->mu);
    return s;
}

static gdp_status dev_memory_info(void *b, size_t *free_bytes, size_t *total_bytes, gdp_err *err)
{
    cu_backend *be = BE(b);
    size_t fr = 0, tot = 0;
    CU_TRY(cudaSetDevice(be->device));
    CU_TRY(cudaMemGetInfo(&fr, &tot));
    if (be->pool != NULL) {
        /* Memory cached in our pool is free for gradus's purposes. */
        uint64_t reserved = 0, used = 0;
        CU_TRY(cudaMemPoolGetAttribute(be->pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
        CU_TRY(cudaMemPoolGetAttribute(be->pool, cudaMemPoolAttrUsedMemCurrent, &used));
        if (reserved > used) fr += (size_t)(reserved - used);
    }
    if (free_bytes != NULL) *free_bytes = fr;
    if (total_bytes != NULL) *total_bytes = tot;
    return GDP_OK;
}

/* ---- copies ------------------------------------------------------------------------------ */

/* The next staging slot, once the DMA that last used it is done. Caller holds be->mu. */
static gdp_status stage_take(cu_backend *be, cu_stage **out, gdp_err *err)
{
    cu_stage *st = &be->stage[be->next_stage];
    be->next_stage = (be->next_stage + 1) % CU_NSTAGE;
    if (st->buf == NULL) CU_TRY(cudaHostAlloc(&st->buf, CU_STAGE_BYTES, cudaHostAllocDefault));
    if (st->used) CU_TRY(cudaEventSynchronize(st->done));
    *out = st;
    return GDP_OK;
}

static gdp_status h2d_locked(cu_backend *be, char *dst, const char *src, size_t bytes, cudaStream_t s,
                             gdp_err *err)
{
    for (size_t off = 0; off < bytes; off += CU_STAGE_BYTES) {
        size_t n = bytes - off < CU_STAGE_BYTES ? bytes - off : CU_STAGE_BYTES;
        cu_stage *st;
        gdp_status r = stage_take(be, &st, err);
        if (r != GDP_OK) return r;
        memcpy(st->buf, src + off, n);
        CU_TRY(cudaMemcpyAsync(dst + off, st->buf, n, cudaMemcpyHostToDevice, s));
        CU_TRY(cudaEventRecord(st->done, s));
        st->used = 1;
    }
    return GDP_OK;
}

static gdp_status dev_h2d(void *b, void *dst, const void *src, size_t bytes, void *stream, gdp_err *err)
{
    cu_backend *be = BE(b);
    if (bytes == 0) return GDP_OK;
    if (dst == NULL || src == NULL) return gdp_fail(err, GDP_ERR_INVALID, "cuda copy_h2d: NULL pointer");
    CU_TRY(cudaSetDevice(be->device));
    pthread_mutex_lock(&be->mu);
    gdp_status s = h2d_locked(be, (char *)dst, (const char *)src, bytes, cu_stream(be, stream), err);
    pthread_mutex_unlock(&be->mu);
    return s;
}

/* d2h keeps all slots busy: chunk k+NSTAGE is queued as soon as chunk k was copied out,
 * so the host memcpy overlaps the following DMAs. */
static gdp_status d2h_locked(cu_backend *be, char *dst, const char *src, size_t bytes, cudaStream_t s,
                             gdp_err *err)
{
    size_t n_chunks = (bytes + CU_STAGE_BYTES - 1) / CU_STAGE_BYTES;
    size_t queued = 0;
    for (int i = 0; i < CU_NSTAGE; i++) {
        /* Slots still busy with an h2d must be finished before we reuse them. */
        cu_stage *st = &be->stage[i];
        if (st->buf == NULL) CU_TRY(cudaHostAlloc(&st->buf, CU_STAGE_BYTES, cudaHostAllocDefault));
        if (st->used) CU_TRY(cudaEventSynchronize(st->done));
    }
    for (size_t k = 0; k < n_chunks; k++) {
        while (queued < n_chunks && queued < k + CU_NSTAGE) {
            cu_stage *st = &be->stage[queued % CU_NSTAGE];
            size_t off = queued * CU_STAGE_BYTES;
            size_t n = bytes - off < CU_STAGE_BYTES ? bytes - off : CU_STAGE_BYTES;
            CU_TRY(cudaMemcpyAsync(st->buf, src + off, n, cudaMemcpyDeviceToHost, s));
            CU_TRY(cudaEventRecord(st->done, s));
            st->used = 1;
            queued++;
        }
        cu_stage *st = &be->stage[k % CU_NSTAGE];
        size_t off = k * CU_STAGE_BYTES;
        size_t n = bytes - off < CU_STAGE_BYTES ? bytes - off : CU_STAGE_BYTES;
        CU_TRY(cudaEventSynchronize(st->done));
        memcpy(dst + off, st->buf, n);
    }
    return GDP_OK;
}

/* Returns once dst holds the data, which means the work before it on the stream is done:
 * bad data that work found is reported here too, since the data read may be wrong. */
static gdp_status dev_d2h(void *b, void *dst, const void *src, size_t bytes, void *stream, gdp_err *err)
{
    cu_backend *be = BE(b);
    if (bytes == 0) return GDP_OK;
    if (dst == NULL || src == NULL) return gdp_fail(err, GDP_ERR_INVALID, "cuda copy_d2h: NULL pointer");
    CU_TRY(cudaSetDevice(be->device));
    pthread_mutex_lock(&be->mu);
    gdp_status s = d2h_locked(be, (char *)dst, (const char *)src, bytes, cu_stream(be, stream), err);
    pthread_mutex_unlock(&be->mu);
    if (s != GDP_OK) return s;
    return cu_bad_take(be, err);
}

static gdp_status dev_d2d(void *b, void *dst, const void *src, size_t bytes, void *stream, gdp_err *err)
{
    cu_backend *be = BE(b);
    if (bytes == 0 || dst == src) return GDP_OK;
    CU_TRY(cudaSetDevice(be->device));
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cu_stream(be, stream)));
    return GDP_OK;
}

static gdp_status dev_memset_zero(void *b, void *ptr, size_t bytes, void *stream, gdp_err *err)
{
    cu_backend *be = BE(b);
    if (bytes == 0) return GDP_OK;
    CU_TRY(cudaSetDevice(be->device));
    CU_TRY(cudaMemsetAsync(ptr, 0, bytes, cu_stream(be, stream)));
    return GDP_OK;
}

static gdp_status dev_synchronize(void *b, void *stream, gdp_err *err)
{
    cu_backend *be = BE(b);
    CU_TRY(cudaSetDevice(be->device));
    CU_TRY(cudaStreamSynchronize(cu_stream(be, stream)));
    return cu_bad_take(be, err);
}

/* Bad data that kernels already finished have found; reads the mapped record only. */
static gdp_status dev_poll_error(void *b, gdp_err *err) { return cu_bad_take(BE(b), err); }

/* ---- streams and events ------------------------------------------------------------------- */

static gdp_status dev_stream_create(void *b, void **stream, gdp_err *err)
{
    cu_backend *be = BE(b);
    *stream = NULL;
    CU_TRY(cudaSetDevice(be->device));
    pthread_mutex_lock(&be->mu);
    gdp_status s = GDP_OK;
    if (be->n_user == CU_MAX_STREAMS) {
        s = gdp_fail(err, GDP_ERR_NOMEM, "cuda: more than %d streams created", CU_MAX_STREAMS);
    } else {
        cudaStream_t st = NULL;
        cudaEvent_t ev = NULL;
        s = cu_check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", err);
        if (s == GDP_OK)
            s = cu_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags", err);
        if (s == GDP_OK) {
            be->user[be->n_user] = st;
            be->user_ev[be->n_user] = ev;
            be->n_user++;
            *stream = st;
        } else if (st != NULL) {
            (void)cudaStreamDestroy(st);
        }
    }
    pthread_mutex_unlock(&be->mu);
    return s;
}

static gdp_status dev_stream_destroy(void *b, void *stream, gdp_err *err)
{
    cu_backend *be = BE(b);
    if (stream == NULL) return GDP_OK;
    pthread_mutex_lock(&be->mu);
    int found = -1;
    for (int i = 0; i < be->n_user; i++)
        if (be->user[i] == (cudaStream_t)stream) found = i;
    gdp_status s = GDP_OK;
    if (found < 0) {
        s = gdp_fail(err, GDP_ERR_INVALID, "cuda stream_destroy: %p is not a stream of this plugin", stream);
    } else {
        cudaEvent_t ev = be->user_ev[found];
        be->user[found] = be->user[be->n_user - 1];
        be->user_ev[found] = be->user_ev[be->n_user - 1];
        be->n_user--;
        /* Later frees on the compute stream must still wait for this stream's work. */
        s = cu_check(cudaEventRecord(ev, (cudaStream_t)stream), "cudaEventRecord", err);
        if (s == GDP_OK) s = cu_check(cudaStreamWaitEvent(be->compute, ev, 0), "cudaStreamWaitEvent", err);
        (void)cudaEventDestroy(ev);
        gdp_status s2 = cu_check(cudaStreamDestroy((cudaStream_t)stream), "cudaStreamDestroy", err);
        if (s == GDP_OK) s = s2;
    }
    pthread_mutex_unlock(&be->mu);
    return s;
}

static gdp_status dev_event_create(void *b, void **event, gdp_err *err)
{
    cu_backend *be = BE(b);
    cudaEvent_t ev = NULL;
    *event = NULL;
    CU_TRY(cudaSetDevice(be->device));
    CU_TRY(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    *event = ev;
    return GDP_OK;
}

static gdp_status dev_event_destroy(void *b, void *event, gdp_err *err)
{
    (void)b;
    if (event == NULL) return GDP_OK;
    CU_TRY(cudaEventDestroy((cudaEvent_t)event));
    return GDP_OK;
}

static gdp_status dev_event_record(void *b, void *event, void *stream, gdp_err *err)
{
    cu_backend *be = BE(b);
    if (event == NULL) return gdp_fail(err, GDP_ERR_INVALID, "cuda event_record: NULL event");
    CU_TRY(cudaEventRecord((cudaEvent_t)event, cu_stream(be, stream)));
    return GDP_OK;
}

static gdp_status dev_stream_wait_event(void *b, void *stream, void *event, gdp_err *err)
{
    cu_backend *be = BE(b);
    if (event == NULL) return gdp_fail(err, GDP_ERR_INVALID, "cuda stream_wait_event: NULL event");
    CU_TRY(cudaStreamWaitEvent(cu_stream(be, stream), (cudaEvent_t)event, 0));
    return GDP_OK;
}

static gdp_status dev_event_synchronize(void *b, void *event, gdp_err *err)
{
    if (event == NULL) return gdp_fail(err, GDP_ERR_INVALID, "cuda event_synchronize: NULL event");
    CU_TRY(cudaEventSynchronize((cudaEvent_t)event));
    return cu_bad_take(BE(b), err);
}

const gdp_device cu_device_module = {
    sizeof(gdp_device),
    "cuda",  /* replaced by the device's own name in plugin.cu */
    0,
    0,
    dev_alloc,
    dev_free,
    dev_h2d,
    dev_d2h,
    dev_d2d,
    dev_synchronize,
    dev_memory_info,
    dev_stream_create,
    dev_stream_destroy,
    dev_event_create,
    dev_event_destroy,
    dev_event_record,
    dev_stream_wait_event,
    dev_memset_zero,
    dev_event_synchronize,
    dev_poll_error,
};
