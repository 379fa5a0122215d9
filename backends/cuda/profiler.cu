/* profiler.cu — puts device work on gradus's timeline.
 *
 * While the profiler is on, cu_run records a timing event on the kernel's stream before
 * and after each launch. Nothing waits at launch time: collect() waits for the events of
 * the spans it returns and converts them to nanoseconds since start(), which recorded a
 * base event on the compute stream. Events of collected spans are reused, so a long
 * profile creates events only until its steady state.
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

void cu_prof_end(cu_backend *be, cudaStream_t s, const char *name, cudaEvent_t start)
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

static gdp_status prof_start(void *backend, gdp_err *err)
{
    cu_backend *be = (cu_backend *)backend;
    cu_prof *p = &be->prof;
    CU_TRY(cudaSetDevice(be->device));
    pthread_mutex_lock(&be->mu);
    drop_spans(p); /* a new profile starts empty */
    gdp_status s = GDP_OK;
    if (p->base == NULL) s = cu_check(cudaEventCreate(&p->base), "cudaEventCreate", err);
    if (s == GDP_OK) s = cu_check(cudaEventRecord(p->base, be->compute), "cudaEventRecord", err);
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

static uint64_t to_ns(float ms) { return ms <= 0.0f ? 0 : (uint64_t)((double)ms * 1e6 + 0.5); }

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
        char(*nn)[32] = (char(*)[32])realloc(p->names, (size_t)take * sizeof *nn);
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
        o->start_ns = to_ns(t0);
        o->end_ns = to_ns(t1);
        o->stream_id = r->stream_id;
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

const gdp_profiler cu_profiler_module = {sizeof(gdp_profiler), prof_start, prof_stop, prof_collect};
