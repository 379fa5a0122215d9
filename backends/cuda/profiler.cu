/* profiler.cu — puts device work on gradus's timeline.
 *
 * While the profiler is on, cu_run records a timing event on the kernel's stream before
 * and after each launch, and the executor does the same around each replay of a captured
 * segment (one span for the whole graph: events cannot time nodes inside a replay one by
 * one, and the graph is what ran). Nothing waits at launch time: collect() waits for the
 * events of the spans it returns. Spans are on the host's clock (gdp_host.now_ns): start()
 * records a base event on the idle compute stream, waits for it, and takes the host time
 * halfway between recording and completion as the base event's; a span's times are that
 * plus the elapsed device time since the base. Events of collected spans are reused, so a
 * long profile creates events only until its steady state.
 */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

#define CU_PROF_MAX_SPANS (1 << 20) /* beyond this, spans are dropped (uncollected profile) */

/* An event from the spare list or a new one; NULL on failure (the span is then skipped:
 * profiling never makes a kernel fail). Caller holds be->mu. */
static cudaEvent_t take_event(cu_prof *p)
{
    if (p->n_spare > 0) return p->spare[--p->n_spare];
    cudaEvent_t ev = NULL;
    if (cudaEventCreate(&ev) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return ev;
}

static void give_event(cu_prof *p, cudaEvent_t ev)
{
    if (ev == NULL) return;
    if (p->n_spare == p->cap_spare) {
        int cap = p->cap_spare ? p->cap_spare * 2 : 256;
        cudaEvent_t *n = (cudaEvent_t *)realloc(p->spare, (size_t)cap * sizeof *n);
        if (n == NULL) {
            (void)cudaEventDestroy(ev);
            return;
        }
        p->spare = n;
        p->cap_spare = cap;
    }
    p->spare[p->n_spare++] = ev;
}

static int32_t stream_id(const cu_backend *be, cudaStream_t s)
{
    for (int i = 0; i < be->n_user; i++)
        if (be->user[i] == s) return i + 1;
    return 0; /* the compute stream */
}

void cu_prof_begin(cu_backend *be, cudaStream_t s, cudaEvent_t *start)
{
    *start = NULL;
    pthread_mutex_lock(&be->mu);
    cudaEvent_t ev = take_event(&be->prof);
    if (ev != NULL && cudaEventRecord(ev, s) != cudaSuccess) {
        (void)cudaGetLastError();
        give_event(&be->prof, ev);
        ev = NULL;
    }
    *start = ev;
    pthread_mutex_unlock(&be->mu);
}

void cu_prof_end(cu_backend *be, cudaStream_t s, const char *name, int32_t node_id, cudaEvent_t start)
{
    cu_prof *p = &be->prof;
    pthread_mutex_lock(&be->mu);
    cudaEvent_t end = take_event(p);
    int ok = end != NULL && cudaEventRecord(end, s) == cudaSuccess;
    if (ok && p->n == p->cap && p->cap < CU_PROF_MAX_SPANS) {
        int cap = p->cap ? p->cap * 2 : 1024;
        cu_span_rec *n = (cu_span_rec *)realloc(p->recs, (size_t)cap * sizeof *n);
        if (n != NULL) {
            p->recs = n;
            p->cap = cap;
        }
    }
    if (ok && p->n < p->cap) {
        cu_span_rec *r = &p->recs[p->n++];
        snprintf(r->name, sizeof r->name, "%s", name != NULL ? name : "?");
        r->start = start;
        r->end = end;
        r->stream_id = stream_id(be, s);
        r->node_id = node_id;
    } else {
        (void)cudaGetLastError();
        give_event(p, start);
        give_event(p, end);
    }
    pthread_mutex_unlock(&be->mu);
}

static void drop_spans(cu_prof *p)
{
    for (int i = 0; i < p->n; i++) {
        give_event(p, p->recs[i].start);
        give_event(p, p->recs[i].end);
    }
    p->n = 0;
}

void cu_prof_close(cu_backend *be)
{
    cu_prof *p = &be->prof;
    p->on = 0;
    drop_spans(p);
    for (int i = 0; i < p->n_spare; i++) (void)cudaEventDestroy(p->spare[i]);
    if (p->base != NULL) (void)cudaEventDestroy(p->base);
    free(p->spare);
    free(p->recs);
    free(p->names);
    memset(p, 0, sizeof *p);
    (void)cudaGetLastError();
}

static uint64_t host_now(const cu_backend *be)
{
    const gdp_host *h = be->host;
    return GDP_HAS_FIELD(h, gdp_host, now_ns) && h->now_ns != NULL ? h->now_ns(h->host) : 0;
}

static gdp_status prof_start(void *backend, gdp_err *err)
{
    cu_backend *be = (cu_backend *)backend;
    cu_prof *p = &be->prof;
    CU_TRY(cudaSetDevice(be->device));
    pthread_mutex_lock(&be->mu);
    drop_spans(p); /* a new profile starts empty */
    gdp_status s = GDP_OK;
    if (p->base == NULL) s = cu_check(cudaEventCreate(&p->base), "cudaEventCreate", err);
    uint64_t t0 = host_now(be);
    if (s == GDP_OK) s = cu_check(cudaEventRecord(p->base, be->compute), "cudaEventRecord", err);
    if (s == GDP_OK) s = cu_check(cudaEventSynchronize(p->base), "cudaEventSynchronize", err);
    uint64_t t1 = host_now(be);
    p->base_ns = t0 + (t1 - t0) / 2;
    if (s == GDP_OK) p->on = 1;
    pthread_mutex_unlock(&be->mu);
    return s;
}

static gdp_status prof_stop(void *backend, gdp_err *err)
{
    (void)err;
    cu_backend *be = (cu_backend *)backend;
    pthread_mutex_lock(&be->mu);
    be->prof.on = 0;
    pthread_mutex_unlock(&be->mu);
    return GDP_OK;
}

/* Host time of a device time `ms` after the base event (never before the base). */
static uint64_t to_ns(const cu_prof *p, float ms)
{
    return p->base_ns + (ms <= 0.0f ? 0 : (uint64_t)((double)ms * 1e6 + 0.5));
}

/* Returns the oldest spans (up to cap) and forgets them; their names stay valid until the
 * next collect. */
static gdp_status prof_collect(void *backend, gdp_span *spans, int32_t cap, int32_t *n, gdp_err *err)
{
    cu_backend *be = (cu_backend *)backend;
    cu_prof *p = &be->prof;
    if (n == NULL) return gdp_fail(err, GDP_ERR_INVALID, "cuda profiler collect: n is NULL");
    *n = 0;
    if (spans == NULL || cap <= 0) return GDP_OK;
    CU_TRY(cudaSetDevice(be->device));
    pthread_mutex_lock(&be->mu);
    gdp_status s = GDP_OK;
    int take = p->n < cap ? p->n : cap;
    if (take > p->cap_names) {
        char(*nn)[CU_NAME] = (char(*)[CU_NAME])realloc(p->names, (size_t)take * sizeof *nn);
        if (nn == NULL) s = gdp_fail(err, GDP_ERR_NOMEM, "cuda profiler: out of host memory");
        else {
            p->names = nn;
            p->cap_names = take;
        }
    }
    int done = 0;
    for (; s == GDP_OK && done < take; done++) {
        cu_span_rec *r = &p->recs[done];
        float t0 = 0, t1 = 0;
        s = cu_check(cudaEventSynchronize(r->end), "cudaEventSynchronize", err);
        if (s == GDP_OK) s = cu_check(cudaEventElapsedTime(&t0, p->base, r->start), "cudaEventElapsedTime", err);
        if (s == GDP_OK) s = cu_check(cudaEventElapsedTime(&t1, p->base, r->end), "cudaEventElapsedTime", err);
        if (s != GDP_OK) break;
        memcpy(p->names[done], r->name, sizeof r->name);
        gdp_span *o = &spans[done];
        memset(o, 0, sizeof *o);
        o->size = sizeof *o;
        o->name = p->names[done];
        o->start_ns = to_ns(p, t0);
        o->end_ns = to_ns(p, t1);
        o->stream_id = r->stream_id;
        o->node_id = r->node_id;
        give_event(p, r->start);
        give_event(p, r->end);
    }
    /* Keep the spans not handed out, oldest first. */
    memmove(p->recs, p->recs + done, (size_t)(p->n - done) * sizeof *p->recs);
    p->n -= done;
    *n = done;
    pthread_mutex_unlock(&be->mu);
    return s;
}

/* Nominal peaks from the device's attributes, at its boost clock: memory bandwidth is two
 * transfers per memory clock over the bus; f32 (TF32 is off) runs on the FP32 lanes of
 * each SM; f16 and bf16 matrix products on the tensor cores (dense, f32 accumulate), known
 * here for the data-centre parts only (sm_80, sm_90), else 0 (unknown); f64 likewise. */
static gdp_status prof_peak(void *backend, int32_t dtype, double *flop_per_s, double *bytes_per_s, gdp_err *err)
{
    cu_backend *be = (cu_backend *)backend;
    *flop_per_s = *bytes_per_s = 0;
    int major = 0, minor = 0, clock_khz = 0, mem_khz = 0, bus_bits = 0;
    CU_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, be->device));
    CU_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, be->device));
    CU_TRY(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, be->device));
    CU_TRY(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, be->device));
    CU_TRY(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, be->device));
    *bytes_per_s = 2.0 * (double)mem_khz * 1e3 * (double)bus_bits / 8.0;
    int cc = major * 10 + minor;
    double per_sm_clock = 0; /* floating-point operations per SM per clock */
    if (dtype == GDP_F32) per_sm_clock = 2.0 * (cc >= 86 ? 128 : 64); /* FP32 lanes: 128 from sm_86 on */
    else if (dtype == GDP_F16 || dtype == GDP_BF16) per_sm_clock = cc == 80 ? 2048 : cc == 90 ? 4096 : 0;
    else if (dtype == GDP_F64) per_sm_clock = cc == 80 || cc == 90 ? 128 : 0;
    *flop_per_s = (double)be->sm_count * (double)clock_khz * 1e3 * per_sm_clock;
    return GDP_OK;
}

const gdp_profiler cu_profiler_module = {sizeof(gdp_profiler), prof_start, prof_stop, prof_collect, prof_peak};
