/* device.c — the GRADUS device of TensorFlow, through the StreamExecutor C API.
 *
 * One device, backed by the gradus backend GRADUS_TF_BACKEND names (the preferred one by
 * default). Memory, copies, streams and events are the backend's device module's; a
 * backend without one (the CPU backends) has host memory, which the bridge allocates
 * itself. Allocation never falls back: when the device says no, TensorFlow is told it is
 * out of memory. Ordering: a TensorFlow stream is a stream of the device module (or the
 * backend's one implicit stream), an event an event of the module; where the module has
 * no events, waiting for one is waiting for the device. */
#include "gtf.h"

#include "tensorflow/c/experimental/stream_executor/stream_executor.h"
#include "tensorflow/c/tf_status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

gtf_state gtf = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t gtf_once = PTHREAD_ONCE_INIT;

static int env_on(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

static void init_once(void)
{
    if (env_on("GRADUS_TF_DISABLE")) {
        gtf.disabled = 1;
        return;
    }
    gtf.sync = env_on("GRADUS_SYNC");
    gd_status s = gd_ctx_create(&gtf.ctx, NULL);
    if (s != GD_OK) {
        snprintf(gtf.error, sizeof gtf.error, "gradus: cannot create a context (%s)", gd_status_name(s));
        return;
    }
    const char *want = getenv("GRADUS_TF_BACKEND");
    if (want == NULL || want[0] == '\0') want = gd_ctx_backend(gtf.ctx);
    snprintf(gtf.backend, sizeof gtf.backend, "%s", want);
    if (gd_backend_device(gtf.ctx, gtf.backend, &gtf.dev, &gtf.inst, &gtf.stream) != GD_OK) {
        snprintf(gtf.error, sizeof gtf.error, "GRADUS_TF_BACKEND=%s: %s", gtf.backend, gd_ctx_error(gtf.ctx));
        return;
    }
    snprintf(gtf.hw_name, sizeof gtf.hw_name, "gradus %s%s%s", gtf.backend, gtf.dev != NULL ? ": " : "",
             gtf.dev != NULL && gtf.dev->name != NULL ? gtf.dev->name : "");
    gtf.ready = 1;
}

int gtf_init(void)
{
    pthread_once(&gtf_once, init_once);
    return gtf.ready ? 0 : -1;
}

gdp_status gtf_sync_locked(void *gs, gdp_err *err)
{
    if (gtf.dev == NULL || gtf.dev->synchronize == NULL) return GDP_OK;
    return gtf.dev->synchronize(gtf.inst, gs, err);
}

static void set_status(TF_Status *st, gdp_status s, const char *what, const gdp_err *e)
{
    if (s == GDP_OK) {
        TF_SetStatus(st, TF_OK, "");
        return;
    }
    char m[700];
    snprintf(m, sizeof m, "gradus %s: %s: %s", gtf.backend, what, e->msg);
    TF_SetStatus(st, s == GDP_ERR_NOMEM ? TF_RESOURCE_EXHAUSTED : s == GDP_ERR_INVALID ? TF_INVALID_ARGUMENT : TF_INTERNAL, m);
}

static void *gs_of(SP_Stream s) { return s != NULL ? ((gtf_stream *)(void *)s)->gs : gtf.stream; }

/* ---- memory ------------------------------------------------------------------------- */

static void se_allocate(const SP_Device *d, uint64_t size, int64_t space, SP_DeviceMemoryBase *mem)
{
    (void)d, (void)space;
    mem->struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
    mem->opaque = NULL;
    mem->size = 0;
    void *p = NULL;
    size_t n = size ? (size_t)size : 1;
    pthread_mutex_lock(&gtf.lock);
    if (gtf.dev != NULL) {
        gdp_err e = {.size = sizeof e};
        if (gtf.dev->alloc(gtf.inst, n, &p, &e) != GDP_OK) p = NULL; /* TensorFlow reports it as out of memory */
    } else {
        p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    }
    pthread_mutex_unlock(&gtf.lock);
    if (p == NULL) return;
    mem->opaque = p;
    mem->size = size;
}

static void se_deallocate(const SP_Device *d, SP_DeviceMemoryBase *mem)
{
    (void)d;
    if (mem == NULL || mem->opaque == NULL) return;
    pthread_mutex_lock(&gtf.lock);
    if (gtf.dev != NULL) {
        gdp_err e = {.size = sizeof e};
        gtf.dev->free(gtf.inst, mem->opaque, &e);
    } else {
        free(mem->opaque);
    }
    pthread_mutex_unlock(&gtf.lock);
    mem->opaque = NULL;
    mem->size = 0;
}

static void *se_host_alloc(const SP_Device *d, uint64_t size)
{
    (void)d;
    return aligned_alloc(64, ((size ? (size_t)size : 1) + 63) & ~(size_t)63);
}

static void se_host_free(const SP_Device *d, void *mem)
{
    (void)d;
    free(mem);
}

static TF_Bool se_allocator_stats(const SP_Device *d, SP_AllocatorStats *stats)
{
    (void)d;
    stats->struct_size = SP_ALLOCATORSTATS_STRUCT_SIZE;
    return 0; /* not kept: the backend's allocator is its own */
}

static TF_Bool se_memory_usage(const SP_Device *d, int64_t *free_b, int64_t *total_b)
{
    (void)d;
    size_t f = 0, t = 0;
    pthread_mutex_lock(&gtf.lock);
    gdp_err e = {.size = sizeof e};
    int ok = gtf.dev != NULL && gtf.dev->memory_info != NULL && gtf.dev->memory_info(gtf.inst, &f, &t, &e) == GDP_OK;
    pthread_mutex_unlock(&gtf.lock);
    if (!ok || t == 0) {
        /* host memory (a CPU backend), or a device that does not say: TensorFlow needs a
         * figure to size its allocator, and the machine's memory is the honest bound */
        long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages <= 0 || page <= 0) return 0;
        t = (size_t)pages * (size_t)page;
        f = avail > 0 ? (size_t)avail * (size_t)page : t;
    }
    *free_b = (int64_t)f;
    *total_b = (int64_t)t;
    return 1;
}

/* ---- streams and events ------------------------------------------------------------- */

static void se_create_stream(const SP_Device *d, SP_Stream *stream, TF_Status *st)
{
    (void)d;
    gtf_stream *s = calloc(1, sizeof *s);
    if (s == NULL) {
        TF_SetStatus(st, TF_RESOURCE_EXHAUSTED, "gradus: out of host memory for a stream");
        return;
    }
    s->gs = gtf.stream;
    gdp_status r = GDP_OK;
    gdp_err e = {.size = sizeof e};
    pthread_mutex_lock(&gtf.lock);
    if (gtf.dev != NULL && gtf.dev->stream_create != NULL) {
        r = gtf.dev->stream_create(gtf.inst, &s->gs, &e);
        s->owned = r == GDP_OK;
    }
    pthread_mutex_unlock(&gtf.lock);
    if (r != GDP_OK) {
        free(s);
        set_status(st, r, "stream_create", &e);
        return;
    }
    *stream = (SP_Stream)(void *)s;
    TF_SetStatus(st, TF_OK, "");
}

static void se_destroy_stream(const SP_Device *d, SP_Stream stream)
{
    (void)d;
    gtf_stream *s = (gtf_stream *)(void *)stream;
    if (s == NULL) return;
    pthread_mutex_lock(&gtf.lock);
    if (s->owned) {
        gdp_err e = {.size = sizeof e};
        gtf_sync_locked(s->gs, &e);
        gtf.dev->stream_destroy(gtf.inst, s->gs, &e);
    }
    pthread_mutex_unlock(&gtf.lock);
    free(s);
}

typedef struct gtf_event {
    void *ev;        /* an event of the device module, or NULL */
    void *gs;        /* the stream it was last recorded on */
} gtf_event;

static int has_events(void)
{
    return gtf.dev != NULL && gtf.dev->event_create != NULL && gtf.dev->event_record != NULL &&
           gtf.dev->stream_wait_event != NULL;
}

/* The dependent stream waits for what is queued on the other so far. */
static void se_stream_dependency(const SP_Device *d, SP_Stream dependent, SP_Stream other, TF_Status *st)
{
    (void)d;
    void *a = gs_of(dependent), *b = gs_of(other);
    gdp_status r = GDP_OK;
    gdp_err e = {.size = sizeof e};
    pthread_mutex_lock(&gtf.lock);
    if (a != b) {
        void *ev = NULL;
        if (has_events() && gtf.dev->event_create(gtf.inst, &ev, &e) == GDP_OK) {
            r = gtf.dev->event_record(gtf.inst, ev, b, &e);
            if (r == GDP_OK) r = gtf.dev->stream_wait_event(gtf.inst, a, ev, &e);
            /* an event may be destroyed once waited on: the wait is already queued */
            if (gtf.dev->event_destroy != NULL) gtf.dev->event_destroy(gtf.inst, ev, &e);
        } else {
            r = gtf_sync_locked(b, &e);
        }
    }
    pthread_mutex_unlock(&gtf.lock);
    set_status(st, r, "stream dependency", &e);
}

static void se_stream_status(const SP_Device *d, SP_Stream stream, TF_Status *st)
{
    (void)d, (void)stream;
    TF_SetStatus(st, TF_OK, "");
}

static void se_create_event(const SP_Device *d, SP_Event *event, TF_Status *st)
{
    (void)d;
    gtf_event *ev = calloc(1, sizeof *ev);
    if (ev == NULL) {
        TF_SetStatus(st, TF_RESOURCE_EXHAUSTED, "gradus: out of host memory for an event");
        return;
    }
    gdp_status r = GDP_OK;
    gdp_err e = {.size = sizeof e};
    pthread_mutex_lock(&gtf.lock);
    if (has_events()) r = gtf.dev->event_create(gtf.inst, &ev->ev, &e);
    pthread_mutex_unlock(&gtf.lock);
    if (r != GDP_OK) {
        free(ev);
        set_status(st, r, "event_create", &e);
        return;
    }
    *event = (SP_Event)(void *)ev;
    TF_SetStatus(st, TF_OK, "");
}

static void se_destroy_event(const SP_Device *d, SP_Event event)
{
    (void)d;
    gtf_event *ev = (gtf_event *)(void *)event;
    if (ev == NULL) return;
    pthread_mutex_lock(&gtf.lock);
    if (ev->ev != NULL && gtf.dev->event_destroy != NULL) {
        gdp_err e = {.size = sizeof e};
        gtf.dev->event_destroy(gtf.inst, ev->ev, &e);
    }
    pthread_mutex_unlock(&gtf.lock);
    free(ev);
}

/* Waits for the work recorded before the event (the whole stream when the module has no
 * events, or no event_synchronize). Caller holds the lock. */
static gdp_status event_wait_locked(gtf_event *ev, gdp_err *e)
{
    if (ev->ev != NULL && gtf.dev->event_synchronize != NULL) return gtf.dev->event_synchronize(gtf.inst, ev->ev, e);
    return gtf_sync_locked(ev->gs, e);
}

/* The ABI has no query that does not wait, so the status is known by waiting: an event
 * is complete once its work is done, which TensorFlow's polling then sees. */
static SE_EventStatus se_event_status(const SP_Device *d, SP_Event event)
{
    (void)d;
    gdp_err e = {.size = sizeof e};
    pthread_mutex_lock(&gtf.lock);
    gdp_status r = event_wait_locked((gtf_event *)(void *)event, &e);
    pthread_mutex_unlock(&gtf.lock);
    return r == GDP_OK ? SE_EVENT_COMPLETE : SE_EVENT_ERROR;
}

static void se_record_event(const SP_Device *d, SP_Stream stream, SP_Event event, TF_Status *st)
{
    (void)d;
    gtf_event *ev = (gtf_event *)(void *)event;
    gdp_status r = GDP_OK;
    gdp_err e = {.size = sizeof e};
    pthread_mutex_lock(&gtf.lock);
    ev->gs = gs_of(stream);
    if (ev->ev != NULL) r = gtf.dev->event_record(gtf.inst, ev->ev, ev->gs, &e);
    pthread_mutex_unlock(&gtf.lock);
    set_status(st, r, "event_record", &e);
}

static void se_wait_for_event(const SP_Device *const d, SP_Stream stream, SP_Event event, TF_Status *const st)
{
    (void)d;
    gtf_event *ev = (gtf_event *)(void *)event;
    void *gs = gs_of(stream);
    gdp_status r = GDP_OK;
    gdp_err e = {.size = sizeof e};
    pthread_mutex_lock(&gtf.lock);
    if (ev->gs != gs) {
        if (ev->ev != NULL) r = gtf.dev->stream_wait_event(gtf.inst, gs, ev->ev, &e);
        else r = gtf_sync_locked(ev->gs, &e);
    }
    pthread_mutex_unlock(&gtf.lock);
    set_status(st, r, "stream_wait_event", &e);
}

static void se_block_for_event(const SP_Device *d, SP_Event event, TF_Status *st)
{
    (void)d;
    gdp_err e = {.size = sizeof e};
    pthread_mutex_lock(&gtf.lock);
    gdp_status r = event_wait_locked((gtf_event *)(void *)event, &e);
    pthread_mutex_unlock(&gtf.lock);
    set_status(st, r, "event_synchronize", &e);
}

static void se_block_until_done(const SP_Device *d, SP_Stream stream, TF_Status *st)
{
    (void)d;
    gdp_err e = {.size = sizeof e};
    pthread_mutex_lock(&gtf.lock);
    gdp_status r = gtf_sync_locked(gs_of(stream), &e);
    pthread_mutex_unlock(&gtf.lock);
    set_status(st, r, "synchronize", &e);
}

static void se_sync_all(const SP_Device *d, TF_Status *st)
{
    (void)d;
    gdp_err e = {.size = sizeof e};
    pthread_mutex_lock(&gtf.lock);
    gdp_status r = gtf_sync_locked(gtf.stream, &e);
    pthread_mutex_unlock(&gtf.lock);
    set_status(st, r, "synchronize", &e);
}

/* ---- copies ------------------------------------------------------------------------- */

/* One copy on a stream; device pointers never touched by the host. `dir`: 0 host to
 * device, 1 device to host, 2 device to device. */
static void copy(void *gs, int dir, void *dst, const void *src, uint64_t size, TF_Status *st)
{
    if (size == 0) {
        TF_SetStatus(st, TF_OK, "");
        return;
    }
    gdp_status r = GDP_OK;
    gdp_err e = {.size = sizeof e};
    pthread_mutex_lock(&gtf.lock);
    if (gtf.dev == NULL) {
        memcpy(dst, src, (size_t)size);
    } else if (dir == 0) {
        r = gtf.dev->copy_h2d(gtf.inst, dst, src, (size_t)size, gs, &e);
    } else if (dir == 1) {
        r = gtf.dev->copy_d2h(gtf.inst, dst, src, (size_t)size, gs, &e);
    } else if (gtf.dev->copy_d2d != NULL) {
        r = gtf.dev->copy_d2d(gtf.inst, dst, src, (size_t)size, gs, &e);
    } else {
        /* the ABI's default for a module without copy_d2d: through host memory */
        void *h = malloc((size_t)size);
        if (h == NULL) r = gdp_fail(&e, GDP_ERR_NOMEM, "no host memory to stage %llu bytes", (unsigned long long)size);
        if (r == GDP_OK) r = gtf.dev->copy_d2h(gtf.inst, h, src, (size_t)size, gs, &e);
        if (r == GDP_OK) r = gtf.dev->copy_h2d(gtf.inst, dst, h, (size_t)size, gs, &e);
        free(h);
    }
    if (r == GDP_OK && gtf.sync) r = gtf_sync_locked(gs, &e);
    pthread_mutex_unlock(&gtf.lock);
    set_status(st, r, dir == 0 ? "host-to-device copy" : dir == 1 ? "device-to-host copy" : "device-to-device copy", &e);
}

static void se_dtoh(const SP_Device *d, SP_Stream s, void *dst, const SP_DeviceMemoryBase *src, uint64_t size, TF_Status *st)
{
    (void)d;
    copy(gs_of(s), 1, dst, src->opaque, size, st);
}
static void se_htod(const SP_Device *d, SP_Stream s, SP_DeviceMemoryBase *dst, const void *src, uint64_t size, TF_Status *st)
{
    (void)d;
    copy(gs_of(s), 0, dst->opaque, src, size, st);
}
static void se_dtod(const SP_Device *d, SP_Stream s, SP_DeviceMemoryBase *dst, const SP_DeviceMemoryBase *src, uint64_t size,
                    TF_Status *st)
{
    (void)d;
    copy(gs_of(s), 2, dst->opaque, src->opaque, size, st);
}
static void se_sync_dtoh(const SP_Device *d, void *dst, const SP_DeviceMemoryBase *src, uint64_t size, TF_Status *st)
{
    (void)d;
    copy(gtf.stream, 1, dst, src->opaque, size, st);
}
static void se_sync_htod(const SP_Device *d, SP_DeviceMemoryBase *dst, const void *src, uint64_t size, TF_Status *st)
{
    se_htod(d, NULL, dst, src, size, st);
    if (TF_GetCode(st) == TF_OK) se_sync_all(d, st);
}
static void se_sync_dtod(const SP_Device *d, SP_DeviceMemoryBase *dst, const SP_DeviceMemoryBase *src, uint64_t size,
                         TF_Status *st)
{
    se_dtod(d, NULL, dst, src, size, st);
    if (TF_GetCode(st) == TF_OK) se_sync_all(d, st);
}

/* Fills with a byte pattern: zero through the module's memset_zero where it has one,
 * anything else through a host buffer copied in. */
static void fill(void *gs, void *dst, const void *unit, size_t unit_bytes, uint64_t size, TF_Status *st)
{
    int zero = 1;
    for (size_t i = 0; i < unit_bytes; i++) zero &= ((const unsigned char *)unit)[i] == 0;
    if (zero && gtf.dev != NULL && gtf.dev->memset_zero != NULL) {
        gdp_err e = {.size = sizeof e};
        pthread_mutex_lock(&gtf.lock);
        gdp_status r = gtf.dev->memset_zero(gtf.inst, dst, (size_t)size, gs, &e);
        pthread_mutex_unlock(&gtf.lock);
        set_status(st, r, "memset", &e);
        return;
    }
    unsigned char *h = malloc(size ? (size_t)size : 1);
    if (h == NULL) {
        TF_SetStatus(st, TF_RESOURCE_EXHAUSTED, "gradus: no host memory for a memset");
        return;
    }
    for (uint64_t i = 0; i < size; i++) h[i] = ((const unsigned char *)unit)[i % unit_bytes];
    copy(gs, 0, dst, h, size, st);
    free(h);
}

static void se_mem_zero(const SP_Device *d, SP_Stream s, SP_DeviceMemoryBase *loc, uint64_t size, TF_Status *st)
{
    (void)d;
    uint8_t z = 0;
    fill(gs_of(s), loc->opaque, &z, 1, size, st);
}
static void se_memset(const SP_Device *d, SP_Stream s, SP_DeviceMemoryBase *loc, uint8_t pattern, uint64_t size,
                      TF_Status *st)
{
    (void)d;
    fill(gs_of(s), loc->opaque, &pattern, 1, size, st);
}
static void se_memset32(const SP_Device *d, SP_Stream s, SP_DeviceMemoryBase *loc, uint32_t pattern, uint64_t size,
                        TF_Status *st)
{
    (void)d;
    fill(gs_of(s), loc->opaque, &pattern, 4, size, st);
}

/* Runs the callback once the work queued on the stream so far is done. */
static TF_Bool se_host_callback(const SP_Device *d, SP_Stream s, SE_StatusCallbackFn fn, void *arg)
{
    (void)d;
    TF_Status *st = TF_NewStatus();
    se_block_until_done(d, s, st);
    fn(arg, st);
    TF_DeleteStatus(st);
    return 1;
}

/* ---- timers (host clock around the stream's work) ------------------------------------ */

typedef struct gtf_timer { uint64_t start, stop; } gtf_timer;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
static void se_create_timer(const SP_Device *d, SP_Timer *timer, TF_Status *st)
{
    (void)d;
    *timer = (SP_Timer)calloc(1, sizeof(gtf_timer));
    TF_SetStatus(st, *timer != NULL ? TF_OK : TF_RESOURCE_EXHAUSTED, *timer != NULL ? "" : "gradus: no memory for a timer");
}
static void se_destroy_timer(const SP_Device *d, SP_Timer timer)
{
    (void)d;
    free(timer);
}
static void se_start_timer(const SP_Device *d, SP_Stream s, SP_Timer timer, TF_Status *st)
{
    se_block_until_done(d, s, st);
    ((gtf_timer *)(void *)timer)->start = now_ns();
}
static void se_stop_timer(const SP_Device *d, SP_Stream s, SP_Timer timer, TF_Status *st)
{
    se_block_until_done(d, s, st);
    ((gtf_timer *)(void *)timer)->stop = now_ns();
}
static uint64_t se_timer_ns(SP_Timer timer)
{
    gtf_timer *t = (gtf_timer *)(void *)timer;
    return t->stop > t->start ? t->stop - t->start : 0;
}

/* ---- platform ----------------------------------------------------------------------- */

static void se_device_count(const SP_Platform *p, int *count, TF_Status *st)
{
    (void)p;
    *count = gtf_init() == 0 ? 1 : 0;
    TF_SetStatus(st, TF_OK, "");
}

static void se_create_device(const SP_Platform *p, SE_CreateDeviceParams *params, TF_Status *st)
{
    (void)p;
    if (gtf_init() != 0 || params->ordinal != 0) {
        TF_SetStatus(st, TF_FAILED_PRECONDITION, gtf.error[0] ? gtf.error : "gradus: no such device");
        return;
    }
    SP_Device *dv = params->device;
    dv->struct_size = SP_DEVICE_STRUCT_SIZE;
    dv->ordinal = 0;
    dv->device_handle = NULL;
    dv->hardware_name = gtf.hw_name;
    dv->device_vendor = "gradus";
    dv->pci_bus_id = NULL;
    TF_SetStatus(st, TF_OK, "");
}

static void se_destroy_device(const SP_Platform *p, SP_Device *d) { (void)p, (void)d; }

static int32_t se_numa_node(const SP_Device *d) { (void)d; return -1; }
static int64_t se_bandwidth(const SP_Device *d) { (void)d; return 0; }
static double se_gflops(const SP_Device *d) { (void)d; return 0; }

static void se_create_device_fns(const SP_Platform *p, SE_CreateDeviceFnsParams *params, TF_Status *st)
{
    (void)p;
    SP_DeviceFns *f = params->device_fns;
    f->struct_size = SP_DEVICE_FNS_STRUCT_SIZE;
    f->get_numa_node = se_numa_node;
    f->get_memory_bandwidth = se_bandwidth;
    f->get_gflops = se_gflops;
    TF_SetStatus(st, TF_OK, "");
}
static void se_destroy_device_fns(const SP_Platform *p, SP_DeviceFns *f) { (void)p, (void)f; }

static void se_create_executor(const SP_Platform *p, SE_CreateStreamExecutorParams *params, TF_Status *st)
{
    (void)p;
    SP_StreamExecutor *x = params->stream_executor;
    x->struct_size = SP_STREAMEXECUTOR_STRUCT_SIZE;
    x->allocate = se_allocate;
    x->deallocate = se_deallocate;
    x->host_memory_allocate = se_host_alloc;
    x->host_memory_deallocate = se_host_free;
    x->get_allocator_stats = se_allocator_stats;
    x->device_memory_usage = se_memory_usage;
    x->create_stream = se_create_stream;
    x->destroy_stream = se_destroy_stream;
    x->create_stream_dependency = se_stream_dependency;
    x->get_stream_status = se_stream_status;
    x->create_event = se_create_event;
    x->destroy_event = se_destroy_event;
    x->get_event_status = se_event_status;
    x->record_event = se_record_event;
    x->wait_for_event = se_wait_for_event;
    x->create_timer = se_create_timer;
    x->destroy_timer = se_destroy_timer;
    x->start_timer = se_start_timer;
    x->stop_timer = se_stop_timer;
    x->memcpy_dtoh = se_dtoh;
    x->memcpy_htod = se_htod;
    x->memcpy_dtod = se_dtod;
    x->sync_memcpy_dtoh = se_sync_dtoh;
    x->sync_memcpy_htod = se_sync_htod;
    x->sync_memcpy_dtod = se_sync_dtod;
    x->block_host_for_event = se_block_for_event;
    x->block_host_until_done = se_block_until_done;
    x->synchronize_all_activity = se_sync_all;
    x->mem_zero = se_mem_zero;
    x->memset = se_memset;
    x->memset32 = se_memset32;
    x->host_callback = se_host_callback;
    TF_SetStatus(st, TF_OK, "");
}
static void se_destroy_executor(const SP_Platform *p, SP_StreamExecutor *x) { (void)p, (void)x; }

static void se_create_timer_fns(const SP_Platform *p, SP_TimerFns *t, TF_Status *st)
{
    (void)p;
    t->struct_size = SP_TIMER_FNS_STRUCT_SIZE;
    t->nanoseconds = se_timer_ns;
    TF_SetStatus(st, TF_OK, "");
}
static void se_destroy_timer_fns(const SP_Platform *p, SP_TimerFns *t) { (void)p, (void)t; }
static void se_destroy_platform(SP_Platform *p) { (void)p; }
static void se_destroy_platform_fns(SP_PlatformFns *f) { (void)f; }

__attribute__((visibility("default"))) void SE_InitPlugin(SE_PlatformRegistrationParams *params, TF_Status *st)
{
    params->major_version = SE_MAJOR;
    params->minor_version = SE_MINOR;
    params->patch_version = SE_PATCH;
    SP_Platform *p = params->platform;
    p->struct_size = SP_PLATFORM_STRUCT_SIZE;
    p->name = "GRADUS";
    p->type = "GRADUS";
    p->supports_unified_memory = 0;
    p->use_bfc_allocator = 0;   /* every allocation goes to the backend: nothing hidden from it */
    p->force_memory_growth = 0;
    SP_PlatformFns *f = params->platform_fns;
    f->struct_size = SP_PLATFORM_FNS_STRUCT_SIZE;
    f->get_device_count = se_device_count;
    f->create_device = se_create_device;
    f->destroy_device = se_destroy_device;
    f->create_device_fns = se_create_device_fns;
    f->destroy_device_fns = se_destroy_device_fns;
    f->create_stream_executor = se_create_executor;
    f->destroy_stream_executor = se_destroy_executor;
    f->create_timer_fns = se_create_timer_fns;
    f->destroy_timer_fns = se_destroy_timer_fns;
    params->destroy_platform = se_destroy_platform;
    params->destroy_platform_fns = se_destroy_platform_fns;
    if (gtf_init() != 0 && !gtf.disabled) {
        TF_SetStatus(st, TF_FAILED_PRECONDITION, gtf.error);
        return;
    }
    TF_SetStatus(st, TF_OK, "");
}
