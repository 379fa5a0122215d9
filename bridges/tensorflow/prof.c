/* prof.c — gradus's work on TensorFlow's profiler timeline, through the pluggable profiler C
 * API (`TF_InitProfiler`). While TensorFlow profiles, every gradus op a kernel runs is a
 * span: timed on the host's clock around the op, with the device synchronized after it so
 * that the span ends when the work does (so profiling slows an asynchronous device down,
 * and says so by being exact). TensorFlow collects the spans as an XSpace protobuf: one
 * plane "/device:GRADUS:0", one line per backend stream, one event per op, named
 * "TfOp:gradus_op". The writer is this file's own (tsl/profiler/protobuf/xplane.proto:
 * XSpace.planes = 1; XPlane id = 1, name = 2, lines = 3, event_metadata = 4 (map entries:
 * key = 1, value = 2); XLine id = 1, name = 2, timestamp_ns = 3, events = 4;
 * XEvent metadata_id = 1, offset_ps = 2, duration_ps = 3; XEventMetadata id = 1, name = 2). */
#include "gtf.h"

#include "tensorflow/c/experimental/pluggable_profiler/pluggable_profiler.h"
#include "tensorflow/c/tf_status.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct span {
    const char *tf_op, *gd_op; /* static strings: the kernel table's and gradus's op names */
    uint64_t start_ns, end_ns;
} span;

static struct {
    atomic_int on;
    pthread_mutex_t lock;
    span *spans;
    size_t n, cap;
    int dropped;               /* spans not kept for want of memory */
} prof = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* TensorFlow's timeline is in wall-clock nanoseconds. */
uint64_t gtf_prof_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int gtf_prof_on(void) { return atomic_load(&prof.on); }

void gtf_prof_span(const char *tf_op, const char *gd_op, uint64_t start_ns, uint64_t end_ns)
{
    pthread_mutex_lock(&prof.lock);
    if (!atomic_load(&prof.on)) { /* stopped meanwhile: the collection may be under way */
        pthread_mutex_unlock(&prof.lock);
        return;
    }
    if (prof.n == prof.cap) {
        size_t cap = prof.cap ? 2 * prof.cap : 1024;
        span *s = realloc(prof.spans, cap * sizeof *s);
        if (s == NULL) {
            prof.dropped++;
            pthread_mutex_unlock(&prof.lock);
            return;
        }
        prof.spans = s;
        prof.cap = cap;
    }
    prof.spans[prof.n++] = (span){tf_op, gd_op, start_ns, end_ns};
    pthread_mutex_unlock(&prof.lock);
}

/* ---- a protobuf writer that only counts when buf is NULL ------------------------------ */

typedef struct pw { uint8_t *buf; size_t n; } pw;

static void pw_byte(pw *w, uint8_t b)
{
    if (w->buf != NULL) w->buf[w->n] = b;
    w->n++;
}
static void pw_varint(pw *w, uint64_t v)
{
    do {
        pw_byte(w, (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
        v >>= 7;
    } while (v);
}
static void pw_key(pw *w, uint32_t field, int wt) { pw_varint(w, (uint64_t)field << 3 | (unsigned)wt); }
static void pw_int(pw *w, uint32_t field, uint64_t v)
{
    pw_key(w, field, 0);
    pw_varint(w, v);
}
static void pw_bytes(pw *w, uint32_t field, const void *p, size_t n)
{
    pw_key(w, field, 2);
    pw_varint(w, n);
    for (size_t i = 0; i < n; i++) pw_byte(w, ((const uint8_t *)p)[i]);
}
/* A nested message: its body is written by fn twice, once to measure it. */
static void pw_msg(pw *w, uint32_t field, void (*fn)(pw *, const void *), const void *arg)
{
    pw m = {NULL, 0};
    fn(&m, arg);
    pw_key(w, field, 2);
    pw_varint(w, m.n);
    if (w->buf == NULL) {
        w->n += m.n;
        return;
    }
    m.buf = w->buf + w->n;
    m.n = 0;
    fn(&m, arg);
    w->n += m.n;
}

/* ---- the XSpace ------------------------------------------------------------------------ */

typedef struct meta { const char *tf_op, *gd_op; } meta;

typedef struct plane_data {
    const span *spans;
    size_t n;
    meta *metas;     /* distinct names; metadata id = index + 1 */
    size_t n_metas;
    const size_t *meta_of; /* per span */
    uint64_t t0;
} plane_data;

static void write_event(pw *w, const void *arg)
{
    const uint64_t *e = arg; /* metadata id, offset ps, duration ps */
    pw_int(w, 1, e[0]);
    pw_int(w, 2, e[1]);
    pw_int(w, 3, e[2]);
}

static void write_line(pw *w, const void *arg)
{
    const plane_data *d = arg;
    char name[96];
    snprintf(name, sizeof name, "gradus %s", gtf.backend);
    pw_int(w, 1, 0);
    pw_bytes(w, 2, name, strlen(name));
    pw_int(w, 3, d->t0);
    for (size_t i = 0; i < d->n; i++) {
        uint64_t e[3] = {d->meta_of[i] + 1, (d->spans[i].start_ns - d->t0) * 1000u,
                         (d->spans[i].end_ns - d->spans[i].start_ns) * 1000u};
        pw_msg(w, 4, write_event, e);
    }
}

typedef struct meta_arg { uint64_t id; const meta *m; } meta_arg;

static void write_meta_value(pw *w, const void *arg)
{
    const meta_arg *a = arg;
    char name[160];
    snprintf(name, sizeof name, "%s:%s", a->m->tf_op, a->m->gd_op);
    pw_int(w, 1, a->id);
    pw_bytes(w, 2, name, strlen(name));
}
static void write_meta_entry(pw *w, const void *arg)
{
    const meta_arg *a = arg;
    pw_int(w, 1, a->id);
    pw_msg(w, 2, write_meta_value, a);
}

static void write_plane(pw *w, const void *arg)
{
    const plane_data *d = arg;
    static const char name[] = "/device:GRADUS:0";
    pw_int(w, 1, 0);
    pw_bytes(w, 2, name, sizeof name - 1);
    if (d->n > 0) pw_msg(w, 3, write_line, d);
    for (size_t k = 0; k < d->n_metas; k++) {
        meta_arg a = {k + 1, &d->metas[k]};
        pw_msg(w, 4, write_meta_entry, &a);
    }
}

static void write_space(pw *w, const void *arg) { pw_msg(w, 1, write_plane, arg); }

/* ---- the profiler module --------------------------------------------------------------- */

static void p_start(const TP_Profiler *p, TF_Status *st)
{
    (void)p;
    pthread_mutex_lock(&prof.lock);
    prof.n = 0;
    prof.dropped = 0;
    pthread_mutex_unlock(&prof.lock);
    atomic_store(&prof.on, 1);
    TF_SetStatus(st, TF_OK, "");
}

static void p_stop(const TP_Profiler *p, TF_Status *st)
{
    (void)p;
    atomic_store(&prof.on, 0);
    TF_SetStatus(st, TF_OK, "");
}

/* Called twice: with buffer NULL for the size, then to fill the buffer. The spans are
 * kept until the second call, so both see the same. */
static void p_collect(const TP_Profiler *p, uint8_t *buffer, size_t *size, TF_Status *st)
{
    (void)p;
    pthread_mutex_lock(&prof.lock);
    plane_data d = {.spans = prof.spans, .n = prof.n};
    meta *metas = calloc(prof.n + 1, sizeof *metas);
    size_t *meta_of = calloc(prof.n + 1, sizeof *meta_of);
    if (metas == NULL || meta_of == NULL) {
        pthread_mutex_unlock(&prof.lock);
        free(metas), free(meta_of);
        TF_SetStatus(st, TF_RESOURCE_EXHAUSTED, "gradus profiler: out of memory");
        return;
    }
    d.t0 = prof.n > 0 ? prof.spans[0].start_ns : 0;
    for (size_t i = 0; i < prof.n; i++) {
        if (prof.spans[i].start_ns < d.t0) d.t0 = prof.spans[i].start_ns;
        size_t k = 0; /* the names are few (ops of a model), so a linear search will do */
        while (k < d.n_metas && !(metas[k].tf_op == prof.spans[i].tf_op && metas[k].gd_op == prof.spans[i].gd_op)) k++;
        if (k == d.n_metas) metas[d.n_metas++] = (meta){prof.spans[i].tf_op, prof.spans[i].gd_op};
        meta_of[i] = k;
    }
    d.metas = metas;
    d.meta_of = meta_of;
    pw w = {NULL, 0};
    write_space(&w, &d);
    if (buffer != NULL) {
        if (*size < w.n) {
            TF_SetStatus(st, TF_INVALID_ARGUMENT, "gradus profiler: the buffer is smaller than the XSpace");
        } else {
            w.buf = buffer;
            w.n = 0;
            write_space(&w, &d);
            TF_SetStatus(st, TF_OK, "");
        }
        prof.n = 0; /* delivered */
    } else {
        TF_SetStatus(st, TF_OK, "");
    }
    *size = w.n;
    pthread_mutex_unlock(&prof.lock);
    free(metas), free(meta_of);
}

static void destroy_profiler(TP_Profiler *p) { (void)p; }
static void destroy_profiler_fns(TP_ProfilerFns *f) { (void)f; }

__attribute__((visibility("default"))) void TF_InitProfiler(TF_ProfilerRegistrationParams *params, TF_Status *st)
{
    params->major_version = TP_MAJOR;
    params->minor_version = TP_MINOR;
    params->patch_version = TP_PATCH;
    params->profiler->struct_size = TP_PROFILER_STRUCT_SIZE;
    params->profiler->device_type = "GRADUS";
    params->profiler_fns->struct_size = TP_PROFILER_FNS_STRUCT_SIZE;
    params->profiler_fns->start = p_start;
    params->profiler_fns->stop = p_stop;
    params->profiler_fns->collect_data_xspace = p_collect;
    params->destroy_profiler = destroy_profiler;
    params->destroy_profiler_fns = destroy_profiler_fns;
    TF_SetStatus(st, TF_OK, "");
}
