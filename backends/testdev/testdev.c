/* testdev.c — a test "accelerator", and the worked example of docs/plugin-abi.md.
 *
 * It fills every module of the plugin ABI with the least code that still behaves like a
 * device: memory the host cannot touch, events, bad data reported asynchronously; a few
 * f32 kernels that between them use every kind of kernel the ABI knows (strided inputs,
 * a workspace, an index check, an in-place update); an executor that prepares segments once and replays them;
 * a graph pass that fuses linear+relu. Every other op of a model falls back to the CPU
 * across copies.
 *
 * Device pointers are host pointers with bit 62 set: host code that dereferences one
 * instead of copying faults at once (the address is not canonical on x86-64 or arm64),
 * which is how the tests prove the host inserts copies. Kernels clear the bit.
 *
 * The host-visible variant (TESTDEV_HOST_VISIBLE) hands out plain host pointers, which the
 * host may read once the work writing them is done, and it runs prepared segments late:
 * when the host next waits for it (an event, synchronize, a copy). A host kernel reading
 * its memory without waiting for the right event would see stale values.
 *
 * init runs once per gradus context: what an instance changes lives in its own `testdev`,
 * and the one process-wide thing, the "driver", is shared under a lock. */
#include "gradus_plugin.h"
#include "testdev.h"
#include "testdev_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* ---- the driver: process-wide, shared by every instance ------------------------------ */

/* What a real plugin opens once per process (a driver handle, the list of devices). Two
 * gradus contexts make two instances, possibly on two threads, so it is counted and
 * locked. Here it counts instances and the device bytes they hold, for the tests. */
static pthread_mutex_t driver_lock = PTHREAD_MUTEX_INITIALIZER;
static int32_t driver_instances, driver_next_id;
static int64_t driver_bytes;

static int32_t driver_open(void)
{
    pthread_mutex_lock(&driver_lock);
    driver_instances++;
    int32_t id = ++driver_next_id;
    pthread_mutex_unlock(&driver_lock);
    return id;
}
static void driver_close(void)
{
    pthread_mutex_lock(&driver_lock);
    driver_instances--;
    pthread_mutex_unlock(&driver_lock);
}
static void driver_account(int64_t delta)
{
    pthread_mutex_lock(&driver_lock);
    driver_bytes += delta;
    pthread_mutex_unlock(&driver_lock);
}

__attribute__((visibility("default"))) void gradus_testdev_driver(int32_t *instances, int64_t *bytes)
{
    pthread_mutex_lock(&driver_lock);
    if (instances != NULL) *instances = driver_instances;
    if (bytes != NULL) *bytes = driver_bytes;
    pthread_mutex_unlock(&driver_lock);
}

/* ---- an instance ---------------------------------------------------------------------- */

/* A prepared segment (executor handle): the launch list recorded at prepare, and a
 * fingerprint of the descriptors' pointers, which the host promises not to change until
 * it releases the segment. */
typedef struct td_segment {
    int32_t n;
    const gdp_node **nodes;
    gdp_launch_fn *launch;
    uint64_t fingerprint;
} td_segment;

#define TD_QUEUE 32 /* segments the host-visible variant holds back before it must run one */

typedef struct testdev {
    testdev_stats stats; /* first: the tests read it (testdev.h) */
    const gdp_host *host;
    int adds;            /* adds launched (the kernel-failure variant fails the third) */
    /* the host-visible variant's queue of segments run but not yet executed */
    td_segment *queue[TD_QUEUE];
    int q_first, q_len;
    uint64_t queued, done; /* segments queued and executed so far: events are positions */
    /* the first fault found by work that ran (bad data in an input, a failed kernel),
     * reported at the host's next synchronize, event_synchronize or poll_error */
    gdp_status fault;
    char fault_msg[512];
    struct td_prof *prof; /* the profiler's spans, made at its first start */
} testdev;

static void set_fault(testdev *d, gdp_status st, const char *fmt, ...)
{
    if (d->fault != GDP_OK) return; /* the first one is the one to fix */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->fault_msg, sizeof d->fault_msg, fmt, ap);
    va_end(ap);
    d->fault = st;
}

static gdp_status report_fault(testdev *d, gdp_err *err)
{
    if (d->fault == GDP_OK) return GDP_OK;
    gdp_status st = d->fault;
    d->fault = GDP_OK;
    return gdp_fail(err, st, "%s", d->fault_msg);
}

/* Launches a segment's nodes in order; a failure names the node (the host cannot tell
 * which node of a segment failed). */
/* The profiler (below) times each node; the whole-segment variant times a segment as one
 * span instead, as a device that can only time a replayed graph does. */
static uint64_t td_prof_segment_begin(testdev *d);
static void td_prof_segment_end(testdev *d, const td_segment *s, uint64_t t0);

static gdp_status run_segment(testdev *d, const td_segment *s, gdp_err *err)
{
    uint64_t t0 = td_prof_segment_begin(d);
    for (int32_t i = 0; i < s->n; i++) {
        gdp_status st = s->launch[i](d, s->nodes[i], NULL, err);
        if (st != GDP_OK) {
            td_prof_segment_end(d, s, t0);
            char m[sizeof err->msg];
            snprintf(m, sizeof m, "%s", err->msg);
            return gdp_fail(err, st, "node %d '%s': %s", s->nodes[i]->id, s->nodes[i]->label, m);
        }
    }
    td_prof_segment_end(d, s, t0);
    return GDP_OK;
}

/* The host-visible variant executes queued segments here, oldest first. */
static void drain_until(testdev *d, uint64_t position)
{
    while (d->done < position && d->q_len > 0) {
        td_segment *s = d->queue[d->q_first];
        d->q_first = (d->q_first + 1) % TD_QUEUE;
        d->q_len--;
        gdp_err e = {.size = sizeof e};
        gdp_status st = run_segment(d, s, &e);
        if (st != GDP_OK) set_fault(d, st, "%s", e.msg);
        d->done++;
    }
}
static void drain(testdev *d) { drain_until(d, UINT64_MAX); }

/* ---- device module ------------------------------------------------------------------ */

static gdp_status td_alloc(void *be, size_t bytes, void **ptr, gdp_err *err)
{
    testdev *d = be;
    /* a size prefix so that free can account; 64 bytes keeps data aligned */
    char *p = bytes <= SIZE_MAX - 128 ? aligned_alloc(64, 64 + ((bytes + 63) & ~(size_t)63)) : NULL;
    if (p == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "testdev: cannot allocate %zu bytes", bytes);
    memcpy(p, &bytes, sizeof bytes);
    d->stats.allocs++;
    d->stats.bytes += (int64_t)bytes;
    if (d->stats.bytes > d->stats.peak) d->stats.peak = d->stats.bytes;
    driver_account((int64_t)bytes);
    *ptr = host_to_dev(p + 64);
    return GDP_OK;
}

static gdp_status td_free(void *be, void *ptr, gdp_err *err)
{
    testdev *d = be;
    if (ptr == NULL) return GDP_OK;
    drain(d); /* queued work may still use it */
    char *p = (char *)dev_to_host(ptr) - 64;
    size_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    d->stats.frees++;
    d->stats.bytes -= (int64_t)bytes;
    driver_account(-(int64_t)bytes);
    free(p);
    return GDP_OK;
}

/* Copies are ordered after the work queued before them. */
static gdp_status td_h2d(void *be, void *dst, const void *src, size_t n, void *stream, gdp_err *err)
{
    drain(be);
    memcpy(dev_to_host(dst), src, n);
    return GDP_OK;
}
static gdp_status td_d2h(void *be, void *dst, const void *src, size_t n, void *stream, gdp_err *err)
{
    drain(be);
    memcpy(dst, dev_to_host(src), n);
    return GDP_OK;
}
static gdp_status td_d2d(void *be, void *dst, const void *src, size_t n, void *stream, gdp_err *err)
{
    drain(be);
    memmove(dev_to_host(dst), dev_to_host(src), n);
    return GDP_OK;
}
static gdp_status td_memset_zero(void *be, void *ptr, size_t n, void *stream, gdp_err *err)
{
    drain(be);
    memset(dev_to_host(ptr), 0, n);
    return GDP_OK;
}

static gdp_status td_synchronize(void *be, void *stream, gdp_err *err)
{
    testdev *d = be;
    d->stats.syncs++;
    drain(d);
    return report_fault(d, err);
}

static gdp_status td_meminfo(void *be, size_t *fr, size_t *total, gdp_err *err)
{
    testdev *d = be;
    *total = (size_t)1 << 30;
    *fr = *total > (size_t)d->stats.bytes ? *total - (size_t)d->stats.bytes : 0;
    return GDP_OK;
}

/* An event is a position in the stream: the number of segments queued when recorded. */
typedef struct td_event {
    uint64_t position;
} td_event;

static gdp_status td_event_create(void *be, void **event, gdp_err *err)
{
    td_event *e = calloc(1, sizeof *e);
    if (e == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "testdev: no memory for an event");
    *event = e;
    return GDP_OK;
}
static gdp_status td_event_destroy(void *be, void *event, gdp_err *err)
{
    free(event);
    return GDP_OK;
}
static gdp_status td_event_record(void *be, void *event, void *stream, gdp_err *err)
{
    testdev *d = be;
    d->stats.event_records++;
    ((td_event *)event)->position = d->queued;
    return GDP_OK;
}
static gdp_status td_stream_wait_event(void *be, void *stream, void *event, gdp_err *err)
{
    testdev *d = be;
    d->stats.stream_waits++; /* one stream, in order: nothing to do */
    return GDP_OK;
}
static gdp_status td_event_synchronize(void *be, void *event, gdp_err *err)
{
    testdev *d = be;
    d->stats.event_syncs++;
    drain_until(d, ((td_event *)event)->position);
    return report_fault(d, err);
}

/* Without waiting: faults of work that already ran. */
static gdp_status td_poll_error(void *be, gdp_err *err)
{
    testdev *d = be;
    d->stats.polls++;
    return report_fault(d, err);
}

static const gdp_device td_device = {
    .size = sizeof(gdp_device),
#if HOST_VISIBLE
    .name = "testdev (host-visible memory, late segments)",
#else
    .name = "testdev (host memory behind copies)",
#endif
    .host_visible = HOST_VISIBLE,
    .alloc = td_alloc,
    .free = td_free,
    .copy_h2d = td_h2d,
    .copy_d2h = td_d2h,
    .copy_d2d = td_d2d,
    .synchronize = td_synchronize,
    .memory_info = td_meminfo,
    /* no streams: one implicit stream, passed as NULL */
    .event_create = td_event_create,
    .event_destroy = td_event_destroy,
    .event_record = td_event_record,
    .stream_wait_event = td_stream_wait_event,
    .memset_zero = td_memset_zero,
    .event_synchronize = td_event_synchronize,
    .poll_error = td_poll_error,
};

/* ---- kernels ------------------------------------------------------------------------- */

static const float *IN(const gdp_node *n, int k) { return dev_to_host(n->in[k]->data); }
static float *OUT(const gdp_node *n, int k) { return dev_to_host(n->out[k]->data); }

static void count_launch(testdev *d, const gdp_node *n)
{
    d->stats.launches++;
    for (int i = 0; i < n->n_in; i++) {
        if (!gdp_is_contiguous(n->in[i])) {
            d->stats.strided_launches++;
            break;
        }
    }
}

/* matmul: 2-D f32, with or without transposes. A transposed operand is first copied
 * row-major into the workspace, so that one product loop serves all four forms. */
typedef struct mm_dims {
    int64_t M, K, N;
    int ta, tb;
} mm_dims;

static mm_dims mm_dims_of(const gdp_node *n)
{
    mm_dims m;
    m.ta = gdp_attr_int(&n->attrs, "transpose_a", 0) != 0;
    m.tb = gdp_attr_int(&n->attrs, "transpose_b", 0) != 0;
    m.M = n->out[0]->shape[0];
    m.N = n->out[0]->shape[1];
    m.K = m.ta ? n->in[0]->shape[0] : n->in[0]->shape[1];
    return m;
}

static int matmul_supports(void *be, const gdp_node *n) { return n->in[0]->ndim == 2 && n->in[1]->ndim == 2; }

static size_t matmul_workspace(void *be, const gdp_node *n)
{
    mm_dims m = mm_dims_of(n);
    return (size_t)((m.ta ? m.M * m.K : 0) + (m.tb ? m.K * m.N : 0)) * sizeof(float);
}

/* dst (cols, rows) = src (rows, cols) transposed */
static void transpose(const float *src, int64_t rows, int64_t cols, float *dst)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}

static gdp_status matmul_launch(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    testdev *d = be;
    count_launch(d, n);
    mm_dims m = mm_dims_of(n);
    size_t need = matmul_workspace(be, n);
    if (need > 0 && (n->workspace == NULL || n->workspace_bytes < need))
        return gdp_fail(err, GDP_ERR_INVALID, "testdev matmul: declared %zu bytes of workspace, was given %zu", need,
                        n->workspace_bytes);
    const float *a = IN(n, 0), *b = IN(n, 1);
    float *ws = dev_to_host(n->workspace), *c = OUT(n, 0);
    if (m.ta) { // a (K, M) -> (M, K)
        transpose(a, m.K, m.M, ws);
        a = ws;
        ws += m.M * m.K;
    }
    if (m.tb) { // b (N, K) -> (K, N)
        transpose(b, m.N, m.K, ws);
        b = ws;
    }
    if (need > 0) d->stats.workspace_launches++;
    /* (M, K) @ (K, N), accumulated in double over k in order, like the reference; a block
     * of a row of c at a time, so that b is read along its rows */
    enum { JB = 64 };
    double acc[JB];
    for (int64_t i = 0; i < m.M; i++) {
        for (int64_t j0 = 0; j0 < m.N; j0 += JB) {
            int64_t nj = m.N - j0 < JB ? m.N - j0 : JB;
            for (int64_t j = 0; j < nj; j++) acc[j] = 0;
            for (int64_t k = 0; k < m.K; k++) {
                double av = a[i * m.K + k];
                const float *brow = b + k * m.N + j0;
                for (int64_t j = 0; j < nj; j++) acc[j] += av * brow[j];
            }
            for (int64_t j = 0; j < nj; j++) c[i * m.N + j0 + j] = (float)acc[j];
        }
    }
    return GDP_OK;
}

/* Input t as seen from output element i: broadcast to out's shape (dims aligned right, a
 * dim of size 1 repeating through a stride of 0), through t's own strides. */
static void as_output_view(const gdp_tensor *t, const gdp_tensor *out, gdp_tensor *v)
{
    *v = *out;
    v->data = t->data;
    v->dtype = t->dtype;
    int lead = out->ndim - t->ndim;
    for (int dim = 0; dim < out->ndim; dim++) {
        int k = dim - lead;
        v->stride[dim] = k < 0 || t->shape[k] == 1 ? 0 : t->stride[k];
    }
}

/* add: f32, broadcasting, any strides (a transposed, sliced or expanded input is read in
 * place: the kernel registers GDP_KERNEL_STRIDED). */
static gdp_status add_launch(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    testdev *d = be;
    count_launch(d, n);
#ifdef TESTDEV_KERNEL_FAIL
    if (++d->adds == 3) return gdp_fail(err, GDP_ERR_DEVICE, "testdev: simulated failure of the third add");
#endif
    const gdp_tensor *y = n->out[0];
    gdp_tensor a, b;
    as_output_view(n->in[0], y, &a);
    as_output_view(n->in[1], y, &b);
    const float *pa = dev_to_host(a.data), *pb = dev_to_host(b.data);
    float *py = OUT(n, 0);
    int64_t count = gdp_numel(y);
    if (gdp_is_contiguous(&a) && gdp_is_contiguous(&b)) {
        for (int64_t i = 0; i < count; i++) py[i] = pa[i] + pb[i];
    } else {
        for (int64_t i = 0; i < count; i++) py[i] = pa[gdp_offset(&a, i)] + pb[gdp_offset(&b, i)];
    }
    return GDP_OK;
}

/* copy: the op the host inserts to make a strided value contiguous. Registered with
 * GDP_KERNEL_STRIDED, so those copies run here instead of on the CPU. */
static gdp_status copy_launch(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    testdev *d = be;
    count_launch(d, n);
    const gdp_tensor *x = n->in[0];
    const float *px = dev_to_host(x->data);
    float *py = OUT(n, 0);
    int64_t count = gdp_numel(x);
    if (gdp_is_contiguous(x)) memcpy(py, px, (size_t)count * sizeof(float));
    else
        for (int64_t i = 0; i < count; i++) py[i] = px[gdp_offset(x, i)];
    return GDP_OK;
}

/* relu: contiguous inputs only (no GDP_KERNEL_STRIDED): the host copies a view first. */
static gdp_status relu_launch(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    count_launch(be, n);
    int64_t count = gdp_numel(n->out[0]);
    const float *x = IN(n, 0);
    float *y = OUT(n, 0);
    for (int64_t i = 0; i < count; i++) y[i] = x[i] > 0 ? x[i] : 0;
    return GDP_OK;
}

/* assign: an update, written in place into a parameter or state (out aliases in[0]). */
static gdp_status assign_launch(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    count_launch(be, n);
    memmove(OUT(n, 0), IN(n, 1), (size_t)gdp_numel(n->in[1]) * sizeof(float));
    return GDP_OK;
}

/* embedding: rows of an f32 table picked by i32/i64 ids. An id out of range is found the
 * way a device finds it, in the middle of the work: the row is zeroed, the work goes on,
 * and the host hears of it at its next wait or poll, with the node named. */
static gdp_status embedding_launch(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    testdev *d = be;
    count_launch(d, n);
    const gdp_tensor *ids = n->in[1];
    int64_t V = n->in[0]->shape[0], D = n->in[0]->shape[1], count = gdp_numel(ids);
    const float *table = IN(n, 0);
    const void *pid = dev_to_host(ids->data);
    float *y = OUT(n, 0);
    for (int64_t p = 0; p < count; p++) {
        int64_t id = ids->dtype == GDP_I32 ? ((const int32_t *)pid)[p] : ((const int64_t *)pid)[p];
        if (id < 0 || id >= V) {
            set_fault(d, GDP_ERR_INVALID, "node %d '%s': ids element %lld is %lld, out of range for a table of %lld rows",
                      n->id, n->label, (long long)p, (long long)id, (long long)V);
            memset(y + p * D, 0, (size_t)D * sizeof(float));
            continue;
        }
        memcpy(y + p * D, table + id * D, (size_t)D * sizeof(float));
    }
    return GDP_OK;
}

/* linear_act with act = relu (1) or none (0), W (out, in), bias present, x 2-D. */
static int linear_act_supports(void *be, const gdp_node *n)
{
    int64_t act = gdp_attr_int(&n->attrs, "act", 0);
    return n->n_in == 3 && n->in[0]->ndim == 2 && (act == 0 || act == 1) && gdp_attr_int(&n->attrs, "weight_in_out", 0) == 0;
}
static gdp_status linear_act_launch(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    count_launch(be, n);
    int64_t R = n->in[0]->shape[0], I = n->in[0]->shape[1], O = n->in[1]->shape[0];
    int relu = gdp_attr_int(&n->attrs, "act", 0) == 1;
    const float *x = IN(n, 0), *w = IN(n, 1), *b = IN(n, 2);
    float *y = OUT(n, 0);
    for (int64_t r = 0; r < R; r++) {
        for (int64_t o = 0; o < O; o++) {
            double s = 0; // (R, I) . (O, I)^T
            for (int64_t i = 0; i < I; i++) s += (double)x[r * I + i] * w[o * I + i];
            float v = (float)s + b[o]; /* the bias added in f32, as the reference does */
            y[r * O + o] = relu && v < 0 ? 0 : v;
        }
    }
    return GDP_OK;
}

/* ---- profiler: one span per kernel run, on the host's clock -------------------------------- */

/* Kernels run on the host's thread here (in a launch, or when a segment runs), so a span
 * is the host clock around the kernel. Each kernel is registered through a wrapper that
 * takes the two readings while the profiler is on, which also times the nodes of a
 * segment one by one. */
typedef struct td_span_rec {
    int32_t node_id;
    uint64_t t0, t1;
    char name[64];
} td_span_rec;

typedef struct td_prof {
    int on;
    int in_segment;          /* the whole-segment variant is timing a segment */
    td_span_rec *recs;       /* not yet collected, oldest first */
    int32_t n, cap;
    char (*names)[64];       /* names handed out by the last collect */
    int32_t cap_names;
} td_prof;

static void add_span(td_prof *p, int32_t node_id, const char *name, uint64_t t0, uint64_t t1)
{
    if (p->n == p->cap) {
        int32_t cap = p->cap ? p->cap * 2 : 1024;
        td_span_rec *r = cap <= (1 << 24) ? realloc(p->recs, (size_t)cap * sizeof *r) : NULL;
        if (r == NULL) return; /* a span lost, never a kernel */
        p->recs = r;
        p->cap = cap;
    }
    td_span_rec *r = &p->recs[p->n++];
    r->node_id = node_id;
    r->t0 = t0;
    r->t1 = t1;
    snprintf(r->name, sizeof r->name, "%s", name);
}

static gdp_status timed(void *be, const gdp_node *n, void *stream, gdp_err *err, gdp_launch_fn kernel)
{
    testdev *d = be;
    td_prof *p = d->prof;
    if (p == NULL || !p->on || p->in_segment) return kernel(be, n, stream, err);
    uint64_t t0 = d->host->now_ns(d->host->host);
    gdp_status st = kernel(be, n, stream, err);
    add_span(p, n->id, n->label != NULL ? n->label : n->op, t0, d->host->now_ns(d->host->host));
    return st;
}

static uint64_t td_prof_segment_begin(testdev *d)
{
#ifdef TESTDEV_WHOLE_SEGMENT_SPANS
    if (d->prof != NULL && d->prof->on) {
        d->prof->in_segment = 1;
        return d->host->now_ns(d->host->host);
    }
#endif
    (void)d;
    return 0;
}

static void td_prof_segment_end(testdev *d, const td_segment *s, uint64_t t0)
{
    td_prof *p = d->prof;
    if (p == NULL || !p->in_segment) return;
    p->in_segment = 0;
    char name[64];
    snprintf(name, sizeof name, "segment of %d nodes", (int)s->n);
    add_span(p, -1, name, t0, d->host->now_ns(d->host->host)); /* node -1: the host knows which nodes */
}

#define TD_TIMED(kernel)                                                                      \
    static gdp_status kernel##_timed(void *be, const gdp_node *n, void *stream, gdp_err *err) \
    {                                                                                         \
        return timed(be, n, stream, err, kernel);                                             \
    }
TD_TIMED(matmul_launch)
TD_TIMED(add_launch)
TD_TIMED(copy_launch)
TD_TIMED(relu_launch)
TD_TIMED(embedding_launch)
TD_TIMED(assign_launch)
TD_TIMED(linear_act_launch)

static gdp_status td_prof_start(void *be, gdp_err *err)
{
    testdev *d = be;
    if (d->prof == NULL && (d->prof = calloc(1, sizeof *d->prof)) == NULL)
        return gdp_fail(err, GDP_ERR_NOMEM, "testdev: no memory for the profiler");
    drain(d); /* segments queued before the profile are not part of it */
    d->prof->n = 0;
    d->prof->on = 1;
    return GDP_OK;
}

static gdp_status td_prof_stop(void *be, gdp_err *err)
{
    testdev *d = be;
    if (d->prof != NULL) d->prof->on = 0;
    return GDP_OK;
}

static gdp_status td_prof_collect(void *be, gdp_span *spans, int32_t cap, int32_t *n, gdp_err *err)
{
    testdev *d = be;
    td_prof *p = d->prof;
    *n = 0;
    if (p == NULL || spans == NULL || cap <= 0) return GDP_OK;
    int32_t take = p->n < cap ? p->n : cap;
    if (take > p->cap_names) {
        char(*names)[64] = realloc(p->names, (size_t)take * sizeof *names);
        if (names == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "testdev: no memory to collect %d spans", take);
        p->names = names;
        p->cap_names = take;
    }
    for (int32_t i = 0; i < take; i++) {
        const td_span_rec *r = &p->recs[i];
        memcpy(p->names[i], r->name, sizeof r->name);
        spans[i] = (gdp_span){.size = sizeof(gdp_span), .name = p->names[i], .start_ns = r->t0, .end_ns = r->t1,
                              .stream_id = 0, .node_id = r->node_id};
    }
    memmove(p->recs, p->recs + take, (size_t)(p->n - take) * sizeof *p->recs);
    p->n -= take;
    *n = take;
    return GDP_OK;
}

/* Nominal figures for f32, about what a core of a host does (this "device" is a loop on
 * the host), so that hosts exercise peaks; other dtypes unknown. */
static gdp_status td_prof_peak(void *be, int32_t dtype, double *flop_per_s, double *bytes_per_s, gdp_err *err)
{
    *flop_per_s = dtype == GDP_F32 ? 16e9 : 0;
    *bytes_per_s = dtype == GDP_F32 ? 20e9 : 0;
    return GDP_OK;
}

static const gdp_profiler td_profiler = {.size = sizeof(gdp_profiler), .start = td_prof_start, .stop = td_prof_stop,
                                         .collect = td_prof_collect, .peak = td_prof_peak};

static void td_prof_free(testdev *d)
{
    if (d->prof == NULL) return;
    free(d->prof->recs);
    free(d->prof->names);
    free(d->prof);
    d->prof = NULL;
}

static const char *const matmul_attrs[] = {"transpose_a", "transpose_b", NULL};
static const char *const linear_act_attrs[] = {"act", "weight_in_out", NULL};

static gdp_status td_register(void *be, const gdp_host *host, gdp_err *err)
{
    const gdp_kernel ks[] = {
        {.size = sizeof(gdp_kernel), .op = "matmul", .dtype = GDP_F32, .supports = matmul_supports,
         .launch = matmul_launch_timed, .constrained_attrs = matmul_attrs, .workspace = matmul_workspace},
        {.size = sizeof(gdp_kernel), .op = "add", .dtype = GDP_F32, .flags = GDP_KERNEL_STRIDED, .launch = add_launch_timed},
        {.size = sizeof(gdp_kernel), .op = "copy", .dtype = GDP_F32, .flags = GDP_KERNEL_STRIDED, .launch = copy_launch_timed},
        {.size = sizeof(gdp_kernel), .op = "relu", .dtype = GDP_F32, .launch = relu_launch_timed},
        {.size = sizeof(gdp_kernel), .op = "embedding", .dtype = GDP_F32, .launch = embedding_launch_timed},
        {.size = sizeof(gdp_kernel), .op = "assign", .dtype = GDP_F32, .launch = assign_launch_timed},
        {.size = sizeof(gdp_kernel), .op = "linear_act", .dtype = GDP_F32, .supports = linear_act_supports,
         .launch = linear_act_launch_timed, .constrained_attrs = linear_act_attrs},
#ifdef TESTDEV_BAD_REGISTRATIONS
        /* broken on purpose: a duplicate, and a constraint on an attribute relu lacks */
        {.size = sizeof(gdp_kernel), .op = "add", .dtype = GDP_F32, .launch = add_launch_timed},
        {.size = sizeof(gdp_kernel), .op = "relu", .dtype = GDP_F16, .launch = relu_launch_timed,
         .constrained_attrs = matmul_attrs},
#endif
    };
    gdp_status worst = GDP_OK;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        gdp_status s = host->register_kernel(host->host, &ks[i], err);
        if (s != GDP_OK) worst = s; /* keep going: the host records what it refused */
    }
    return worst;
}

/* ---- executor: segments recorded at prepare, replayed at run ---------------------------- */

static uint64_t fingerprint(const td_segment *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the pointers */
#define MIX(v) (h = (h ^ (uint64_t)(v)) * 1099511628211ull)
    for (int32_t i = 0; i < s->n; i++) {
        const gdp_node *n = s->nodes[i];
        for (int k = 0; k < n->n_in; k++) MIX((uintptr_t)n->in[k]->data);
        for (int k = 0; k < n->n_out; k++) MIX((uintptr_t)n->out[k]->data);
        MIX((uintptr_t)n->workspace);
        MIX(n->workspace_bytes);
    }
#undef MIX
    return h;
}

static void segment_free(td_segment *s)
{
    if (s == NULL) return;
    free(s->nodes);
    free(s->launch);
    free(s);
}

static gdp_status td_prepare(void *be, const gdp_segment *seg, void **handle, gdp_err *err)
{
    testdev *d = be;
    td_segment *s = calloc(1, sizeof *s);
    size_t n = seg->n_nodes > 0 ? (size_t)seg->n_nodes : 1;
    if (s != NULL) {
        s->nodes = malloc(n * sizeof *s->nodes);
        s->launch = malloc(n * sizeof *s->launch);
    }
    if (s == NULL || s->nodes == NULL || s->launch == NULL) {
        segment_free(s);
        return gdp_fail(err, GDP_ERR_NOMEM, "testdev: no memory to prepare a segment of %d nodes", seg->n_nodes);
    }
    s->n = seg->n_nodes;
    for (int32_t i = 0; i < s->n; i++) {
        s->nodes[i] = seg->nodes[i];
        s->launch[i] = seg->launch[i];
    }
    s->fingerprint = fingerprint(s);
    d->stats.prepares++;
    d->stats.segment_nodes += s->n;
    *handle = s;
    return GDP_OK;
}

static gdp_status td_run(void *be, void *handle, void *stream, gdp_err *err)
{
    testdev *d = be;
    td_segment *s = handle;
    d->stats.runs++;
    if (fingerprint(s) != s->fingerprint)
        return gdp_fail(err, GDP_ERR_INVALID, "testdev executor: the descriptors of a prepared segment of %d nodes "
                        "changed before it ran (the host must release it and prepare it again)", s->n);
    if (!HOST_VISIBLE) return run_segment(d, s, err);
    if (d->q_len == TD_QUEUE) drain_until(d, d->done + 1); /* the queue is full: wait for the oldest */
    d->queue[(d->q_first + d->q_len) % TD_QUEUE] = s;
    d->q_len++;
    d->queued++;
    return GDP_OK;
}

static void td_release(void *be, void *handle)
{
    testdev *d = be;
    drain(d); /* a segment may still be queued */
    d->stats.releases++;
    segment_free(handle);
}

static const gdp_executor td_executor = {.size = sizeof(gdp_executor), .prepare = td_prepare, .run = td_run,
                                         .release = td_release};


const gdp_host *td_host(void *be) { return ((testdev *)be)->host; }

/* ---- lifetime ------------------------------------------------------------------------ */

static gdp_status td_configure(void *be, const char *key, int64_t value, gdp_err *err)
{
    testdev *d = be;
    if (strcmp(key, "threads") == 0) d->stats.threads = value; /* it runs on the caller's thread anyway */
    return GDP_OK;
}

static void td_shutdown(void *be)
{
    testdev *d = be;
    drain(d);
    driver_close();
    td_prof_free(d);
    free(d);
}

/* ---- collective (ABI 2.2): collective.c --------------------------------------------- */

void td_drain_queue(void *be) { drain(be); }

__attribute__((visibility("default"))) gdp_status gradus_plugin_init(const gdp_host *host, gdp_plugin *plugin, gdp_err *err)
{
#ifdef TESTDEV_EARLY_FAIL
    /* as a plugin that checks its arguments before it says which ABI it speaks */
    return gdp_fail(err, GDP_ERR_INVALID, "testdev: simulated failure before the ABI version is set");
#endif
    plugin->abi_major = GDP_ABI_MAJOR;
    plugin->abi_minor = GDP_ABI_MINOR;
#ifdef TESTDEV_BAD_ABI
    plugin->abi_major = GDP_ABI_MAJOR + 1; /* as if built against a future gradus */
    return GDP_OK;
#endif
#ifdef TESTDEV_ABI1
    plugin->abi_major = 1; /* as if built against gradus 1.x and never ported */
    plugin->abi_minor = 2;
    return GDP_OK;
#endif
    if (host->abi_major != GDP_ABI_MAJOR) return gdp_fail(err, GDP_ERR_VERSION, "testdev: host ABI %d", host->abi_major);
#ifdef TESTDEV_INIT_FAIL
    return gdp_fail(err, GDP_ERR_DEVICE, "testdev: simulated initialization failure");
#endif
#ifdef TESTDEV_NO_DEVICE
    return gdp_fail(err, GDP_ERR_NODEVICE, "testdev: no device present (simulated)");
#endif
    testdev *d = calloc(1, sizeof *d);
    if (d == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "testdev: out of memory");
    d->host = host;
    d->stats.id = driver_open();
    d->stats.host_visible = HOST_VISIBLE;
    plugin->name = "testdev";
    plugin->priority = 50;
    plugin->backend = d;
    plugin->device = &td_device;
    plugin->executor = &td_executor;
    plugin->profiler = &td_profiler;
    plugin->graph_pass = &td_graph_pass;
    plugin->register_kernels = td_register;
    plugin->configure = td_configure;
    plugin->shutdown = td_shutdown;
    if (GDP_HAS_FIELD(plugin, gdp_plugin, collective)) plugin->collective = &td_collective;
    return GDP_OK;
}
