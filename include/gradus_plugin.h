/* gradus_plugin.h — the backend ABI, version 2.
 *
 * A backend is a shared object that exports one symbol, GDP_INIT_SYMBOL, with the
 * signature gdp_init_fn. The host passes a gdp_host (services it offers) and an empty
 * gdp_plugin the backend fills: a name, a priority and optional modules (device, kernels,
 * executor, profiler, graph pass, collective). Plain C; depends on nothing but the C standard library
 * and gradus_semantics.h (dtypes, half conversions, attribute numbering, Philox).
 *
 * Rules that keep old plugins and new hosts (and the reverse) working:
 *  - every struct starts with `size` (sizeof as the writer compiled it); fields are only
 *    ever appended; a reader checks `size` before reading a field (GDP_HAS_FIELD);
 *  - GDP_ABI_MAJOR changes only when a field changes meaning; the host refuses a plugin
 *    of another major version with a message, before calling anything else in it. The
 *    first three fields of gdp_host and gdp_plugin (size, abi_major, abi_minor) never
 *    move, so that check works across every major version;
 *  - every call returns a gdp_status and, on failure, writes a message into gdp_err;
 *    a plugin never exits or aborts the process and never prints to stdout;
 *  - a NULL function pointer means "not provided", and each one has a default written
 *    next to it below; a new capability is opt-in, and a kernel that does not opt in
 *    keeps working through that default.
 *
 * Lifetime: init runs once per gradus context, so two contexts have two instances of a
 * backend, each with its own state (`plugin->backend`). What must be process-wide (a
 * thread pool, a driver handle) is the plugin's to share, reference-count and lock.
 * Calls into one instance come from one thread at a time; calls into two instances may
 * come from two threads at once.
 *
 * The reference CPU kernels inside gradus use exactly the launch signature below, so a
 * kernel written for a plugin and the reference it is checked against see the same
 * description of the node.
 */
#ifndef GRADUS_PLUGIN_H
#define GRADUS_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gradus_semantics.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GDP_ABI_MAJOR 2
#define GDP_ABI_MINOR 5
#define GDP_INIT_SYMBOL "gradus_plugin_init"

#define GDP_MAX_DIMS 8
#define GDP_MAX_INPUTS 16
#define GDP_MAX_OUTPUTS 4

/* True when a struct written with size `s->size` contains `field`. */
#define GDP_HAS_FIELD(s, type, field) \
    ((s) != NULL && (s)->size >= offsetof(type, field) + sizeof(((type *)0)->field))

/* ---- status ------------------------------------------------------------------------ */

typedef int gdp_status;
enum {
    GDP_OK = 0,
    GDP_ERR_INVALID = 1,     /* bad argument, or bad data in an input (an index out of range) */
    GDP_ERR_UNSUPPORTED = 2, /* a combination the callee does not handle */
    GDP_ERR_NOMEM = 3,       /* allocation failed */
    GDP_ERR_DEVICE = 4,      /* the device or its driver reported an error */
    GDP_ERR_VERSION = 5,     /* ABI version mismatch */
    GDP_ERR_NODEVICE = 6     /* plugin found no device: it declines, nothing is wrong */
};

typedef struct gdp_err {
    size_t size;
    char msg[512];
} gdp_err;

/* Writes a message into err (if any) and returns code; handy as `return gdp_fail(...)`. */
static inline gdp_status gdp_fail(gdp_err *err, gdp_status code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* ---- tensors: strided views ----------------------------------------------------------- */

/* A tensor as a kernel sees it: `data` is the address of element (0, ..., 0) in the
 * memory of the backend the kernel belongs to, and element (i0, i1, ...) lives at
 * data + (i0*stride[0] + i1*stride[1] + ...) * element size. Strides are in elements and
 * never negative; a stride of 0 repeats one element along that dim (broadcast).
 *
 * Outputs are always contiguous (row-major). Inputs are contiguous too unless the kernel
 * registered with GDP_KERNEL_STRIDED; then they may be any view (a transpose, a slice,
 * an expand), and supports() sees the strides before the node is placed. */
typedef struct gdp_tensor {
    size_t size;
    void *data;
    int32_t dtype;
    int32_t ndim;
    int64_t shape[GDP_MAX_DIMS];
    int64_t stride[GDP_MAX_DIMS];
} gdp_tensor;

static inline int64_t gdp_numel(const gdp_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}
/* Row-major strides of t's shape into t->stride. */
static inline void gdp_set_contiguous(gdp_tensor *t)
{
    /* unsigned: a tensor with a zero dim may have others whose product overflows, and its
     * strides are never used to address anything */
    uint64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->stride[i] = (int64_t)s;
        s *= (uint64_t)t->shape[i];
    }
}
/* 1 when t is row-major contiguous (dims of size 1 may have any stride). */
static inline int gdp_is_contiguous(const gdp_tensor *t)
{
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return 0;
        s *= t->shape[i];
    }
    return 1;
}
/* Offset in elements of the element whose row-major index is i (for strided loops that
 * walk an output in order; a kernel wanting speed keeps its own odometer). */
static inline int64_t gdp_offset(const gdp_tensor *t, int64_t i)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        int64_t n = t->shape[d];
        off += (i % n) * t->stride[d];
        i /= n;
    }
    return off;
}

/* ---- attributes ---------------------------------------------------------------------- */

typedef enum gdp_attr_kind { GDP_ATTR_INT = 0, GDP_ATTR_FLOAT = 1, GDP_ATTR_INTS = 2, GDP_ATTR_STRING = 3 } gdp_attr_kind;

typedef struct gdp_attr {
    const char *name;
    int32_t kind;
    int32_t n;           /* number of ints when kind == GDP_ATTR_INTS */
    int64_t i;           /* GDP_ATTR_INT */
    double f;            /* GDP_ATTR_FLOAT */
    const int64_t *ints; /* GDP_ATTR_INTS */
    const char *s;       /* GDP_ATTR_STRING, NUL-terminated */
} gdp_attr;

typedef struct gdp_attrs {
    int32_t n;
    const gdp_attr *items;
} gdp_attrs;

static inline const gdp_attr *gdp_attr_find(const gdp_attrs *a, const char *name)
{
    for (int32_t k = 0; a != NULL && k < a->n; k++)
        if (strcmp(a->items[k].name, name) == 0) return &a->items[k];
    return NULL;
}
static inline int64_t gdp_attr_int(const gdp_attrs *a, const char *name, int64_t def)
{
    const gdp_attr *x = gdp_attr_find(a, name);
    if (x == NULL) return def;
    return x->kind == GDP_ATTR_FLOAT ? (int64_t)x->f : x->kind == GDP_ATTR_INT ? x->i : def;
}
static inline double gdp_attr_float(const gdp_attrs *a, const char *name, double def)
{
    const gdp_attr *x = gdp_attr_find(a, name);
    if (x == NULL) return def;
    return x->kind == GDP_ATTR_INT ? (double)x->i : x->kind == GDP_ATTR_FLOAT ? x->f : def;
}
/* Copies up to `cap` ints into out and returns how many the attribute has (0 if absent). */
static inline int gdp_attr_ints(const gdp_attrs *a, const char *name, int64_t *out, int cap)
{
    const gdp_attr *x = gdp_attr_find(a, name);
    if (x == NULL || x->kind != GDP_ATTR_INTS) return 0;
    for (int k = 0; k < x->n && k < cap; k++) out[k] = x->ints[k];
    return x->n;
}
static inline const char *gdp_attr_str(const gdp_attrs *a, const char *name, const char *def)
{
    const gdp_attr *x = gdp_attr_find(a, name);
    return x != NULL && x->kind == GDP_ATTR_STRING && x->s != NULL ? x->s : def;
}

/* ---- nodes as kernels see them ------------------------------------------------------ */

/* One node of a program, as a kernel sees it. Inputs and outputs are held by pointer, so
 * that gdp_tensor can grow. Outputs are placed by the host before launch; an op that
 * updates a tensor in place (optimizer steps, cache_write) gets an output whose `data`
 * equals an input's.
 *
 * Descriptors are built once, when a program is compiled, and stay at the same address
 * with the same data pointers run after run (until the host re-plans, which it tells an
 * executor by releasing the segments it prepared). Values that change between runs
 * (learning rate, step, positions, lengths) are input tensors, never attributes. */
typedef struct gdp_node {
    size_t size;
    const char *op;
    int32_t n_in, n_out;
    const gdp_tensor *const *in;
    const gdp_tensor *const *out;
    gdp_attrs attrs;
    int32_t id;            /* unique within the program; errors and spans name it */
    int32_t _pad;
    const char *label;     /* what the user called it ("blocks.3.attn.softmax"), or "<op>#<id>" */
    void *workspace;       /* the scratch the kernel declared for this node, NULL if none */
    size_t workspace_bytes;
} gdp_node;

/* ---- the kernels module ------------------------------------------------------------- */

/* Answers whether this kernel can run this exact node (dtypes, shapes, strides,
 * attributes). Default when NULL: yes for every node matching the kernel's key. */
typedef int (*gdp_supports_fn)(void *backend, const gdp_node *node);
/* Runs the node on `stream` (NULL for a backend without streams). May return before the
 * work is done; the host orders work through streams and events. Bad data found in an
 * input (an index out of range) is GDP_ERR_INVALID with a message saying which value. */
typedef gdp_status (*gdp_launch_fn)(void *backend, const gdp_node *node, void *stream, gdp_err *err);
/* Bytes of scratch the kernel needs for this node (0: none). The host plans it like any
 * other buffer of the program and passes it as node->workspace, so that nothing is
 * allocated while a program runs. Called at compile time only. */
typedef size_t (*gdp_workspace_fn)(void *backend, const gdp_node *node);

enum {
    /* launch accepts strided inputs; without it the host makes every input contiguous
     * (a copy it plans) before supports() and launch see the node */
    GDP_KERNEL_STRIDED = 1u << 0
};

typedef struct gdp_kernel {
    size_t size;
    const char *op;     /* op name as registered by gradus, e.g. "matmul" */
    /* The key. With `signature` NULL, the kernel takes the nodes whose floating operands
     * all have this dtype (integer operands — indices, steps, masks — may be any; an op
     * whose output dtype is an attribute, like cast, keys on its input). With `signature`
     * set, the kernel takes exactly the nodes whose operands have those dtypes, e.g.
     * "bf16,bf16->f32" for a bf16 matmul writing f32: the mixed-precision forms each op
     * declares (docs/ops.md lists them). */
    int32_t dtype;
    uint32_t flags;     /* GDP_KERNEL_* */
    gdp_supports_fn supports;
    gdp_launch_fn launch;
    /* Names of attributes this kernel's supports() looks at, NULL-terminated, or NULL.
     * The sweep rejects a kernel naming an attribute its op does not have. */
    const char *const *constrained_attrs;
    const char *signature;
    gdp_workspace_fn workspace; /* NULL: no workspace */
} gdp_kernel;

/* ---- the device module -------------------------------------------------------------- */

typedef struct gdp_device {
    size_t size;
    const char *name;      /* e.g. "NVIDIA H200" */
    int32_t host_visible;  /* 1: the host may read and write device pointers directly
                              after synchronize (host memory, managed memory) */
    int32_t _pad;
    /* Required. Called when a program is compiled or a tensor created, never while a
     * program runs. */
    gdp_status (*alloc)(void *backend, size_t bytes, void **ptr, gdp_err *err);
    gdp_status (*free)(void *backend, void *ptr, gdp_err *err);
    /* Copies, ordered on `stream`. Required: h2d and d2h. copy_h2d returns once `src`
     * may be reused (a plugin wanting asynchrony stages through its own pinned memory);
     * copy_d2h returns once `dst` holds the data (it waits for prior work on `stream`).
     * copy_d2d may be asynchronous. Default for d2d when NULL: staged through host memory
     * the host planned. */
    gdp_status (*copy_h2d)(void *backend, void *dst, const void *src, size_t bytes, void *stream, gdp_err *err);
    gdp_status (*copy_d2h)(void *backend, void *dst, const void *src, size_t bytes, void *stream, gdp_err *err);
    gdp_status (*copy_d2d)(void *backend, void *dst, const void *src, size_t bytes, void *stream, gdp_err *err);
    /* Waits until all work on `stream` is done, and reports bad data a kernel found on
     * the device since the last call (GDP_ERR_INVALID naming the node). Default when NULL:
     * nothing to wait for. */
    gdp_status (*synchronize)(void *backend, void *stream, gdp_err *err);
    /* Default when NULL: free = total = 0 ("unknown"). */
    gdp_status (*memory_info)(void *backend, size_t *free_bytes, size_t *total_bytes, gdp_err *err);
    /* Streams. Default when NULL: one implicit stream, passed to kernels as NULL. */
    gdp_status (*stream_create)(void *backend, void **stream, gdp_err *err);
    gdp_status (*stream_destroy)(void *backend, void *stream, gdp_err *err);
    /* Events. Default when NULL: ordering falls back to synchronize(). */
    gdp_status (*event_create)(void *backend, void **event, gdp_err *err);
    gdp_status (*event_destroy)(void *backend, void *event, gdp_err *err);
    gdp_status (*event_record)(void *backend, void *event, void *stream, gdp_err *err);
    gdp_status (*stream_wait_event)(void *backend, void *stream, void *event, gdp_err *err);
    /* Fills `bytes` of device memory with zero. Default when NULL: a zeroed host buffer is
     * copied with copy_h2d. */
    gdp_status (*memset_zero)(void *backend, void *ptr, size_t bytes, void *stream, gdp_err *err);
    /* The host waits until the work recorded before `event` is done (and learns of bad
     * data found up to there, as synchronize does). Default when NULL: synchronize(). */
    gdp_status (*event_synchronize)(void *backend, void *event, gdp_err *err);
    /* Reports, without waiting, bad data that kernels already finished have found
     * (GDP_ERR_INVALID naming the node); GDP_OK otherwise. Called at the end of every
     * program run. Default when NULL: such errors surface at the next synchronize. */
    gdp_status (*poll_error)(void *backend, gdp_err *err);
} gdp_device;

/* ---- the executor module ------------------------------------------------------------ */

/* A segment is a run of consecutive nodes of a program placed on one backend, with
 * nothing of another backend's between them. */
typedef struct gdp_segment {
    size_t size;
    int32_t n_nodes;
    int32_t _pad;
    const gdp_node *const *nodes;
    const gdp_launch_fn *launch;    /* the kernel of each node */
    void *stream;                   /* the stream the segment runs on */
} gdp_segment;

/* Prepare once, run many times: e.g. capture the segment's launches into a CUDA graph
 * and replay it. Between prepare and release, the nodes' descriptors, their data
 * pointers and workspaces do not change; the data behind them does. When NULL (or when
 * prepare answers GDP_ERR_UNSUPPORTED for a segment), the host launches each node in
 * order, every run. */
typedef struct gdp_executor {
    size_t size;
    gdp_status (*prepare)(void *backend, const gdp_segment *segment, void **handle, gdp_err *err);
    gdp_status (*run)(void *backend, void *handle, void *stream, gdp_err *err);
    void (*release)(void *backend, void *handle);
} gdp_executor;

/* ---- the profiler module ------------------------------------------------------------ */

typedef struct gdp_span {
    size_t size;
    const char *name;   /* the node's label, or a plugin-defined name; valid until the next collect */
    /* Times on the host's clock (gdp_host.now_ns), so that device spans sit on the same
     * timeline as the host's: a plugin measuring on the device maps its clock onto it. */
    uint64_t start_ns;
    uint64_t end_ns;
    int32_t stream_id;
    int32_t node_id;    /* the gdp_node id, or -1 for work that is not a node */
} gdp_span;

/* While profiling is on (between start and stop), the plugin records a span for the work
 * of each node it runs, or one for a prepared segment when it can only time the segment
 * as a whole (node_id -1): the host knows which nodes the segment holds. The host calls
 * collect when it wants the spans (rarely: when many are pending, and before it writes a
 * trace, after synchronize), oldest first, so the plugin keeps them until then. */
typedef struct gdp_profiler {
    size_t size;
    gdp_status (*start)(void *backend, gdp_err *err);
    gdp_status (*stop)(void *backend, gdp_err *err);
    /* Writes up to cap spans of finished work, sets *n to how many were written. */
    gdp_status (*collect)(void *backend, gdp_span *spans, int32_t cap, int32_t *n, gdp_err *err);
    /* ABI 2.1. The machine's peak for work whose operands are of `dtype`: floating-point
     * operations per second of the units kernels of that dtype use (a multiply-add counts
     * two), and memory bandwidth in bytes per second; 0 for either when unknown. Profile
     * summaries show what a node achieved beside them. Default when NULL: no peak known. */
    gdp_status (*peak)(void *backend, int32_t dtype, double *flop_per_s, double *bytes_per_s, gdp_err *err);
} gdp_profiler;

/* ---- the graph-pass module ---------------------------------------------------------- */

/* A graph pass sees a program's node list, before placement, through these host
 * callbacks, so that no graph layout is frozen into the ABI. It rewrites the program,
 * never the user's graph: another program of the same graph starts from the graph again.
 * Node ids are stable for the duration of the pass. */
typedef struct gdp_graph_view {
    size_t size;
    void *graph;
    int32_t (*node_count)(void *graph);
    const char *(*node_op)(void *graph, int32_t node);  /* NULL for a removed node */
    int32_t (*node_n_inputs)(void *graph, int32_t node);
    int32_t (*node_n_outputs)(void *graph, int32_t node);
    /* The producer of input k of node: returns its node id (or -1 for a graph input,
     * parameter or state) and writes the producer's output index into *out_index. */
    int32_t (*node_input)(void *graph, int32_t node, int32_t k, int32_t *out_index);
    /* Shape and dtype of an input/output (data NULL, strides row-major). */
    gdp_status (*node_input_desc)(void *graph, int32_t node, int32_t k, gdp_tensor *desc);
    gdp_status (*node_output_desc)(void *graph, int32_t node, int32_t k, gdp_tensor *desc);
    const gdp_attrs *(*node_attrs)(void *graph, int32_t node); /* valid until the next call */
    /* How many nodes read output k of node, plus one when the program exposes it (a
     * target, an update): a fusion may only swallow values nobody else needs. */
    int32_t (*node_users)(void *graph, int32_t node, int32_t k);
    /* Replaces the chain of nodes [first, last] (in program order; nodes in that range
     * that are not part of the chain stay) with one new node of `op`:
     *  - its inputs are (node, output) pairs; node -1 means "input k of node `first`",
     *    with the pair's second value naming k, and node -2 - j "input k of node j"
     *    (so a pass can name a parameter or graph input another chain node reads);
     *  - its outputs: with n_out 0, one output that takes the place of output 0 of
     *    `last`; otherwise output j takes the place of output out_outputs[j] of node
     *    out_nodes[j] (a chain node), so a fused op may have several outputs; with
     *    out_nodes[j] = -1 (ABI 2.5, when `new_outputs` says so) output j is a new value
     *    of the program, of the shape and dtype the op's shape rule gives it, which a
     *    later replace_chain may name as an input (a forward op that keeps a statistic
     *    for its backward);
     *  - chain nodes whose outputs are no longer read are removed.
     * The new node takes the place of `last` in program order. */
    gdp_status (*replace_chain)(void *graph, int32_t first, int32_t last, const char *op,
                                int32_t n_in, const int32_t *in_nodes, const int32_t *in_outputs,
                                const gdp_attr *attrs, int32_t n_attrs,
                                int32_t n_out, const int32_t *out_nodes, const int32_t *out_outputs,
                                gdp_err *err);
    /* ABI 2.3. Whether input ka of node a and input kb of node b are the same value —
     * graph inputs, parameters and states included, which node_input reports only as -1.
     * An older host leaves it out (GDP_HAS_FIELD). */
    int32_t (*same_input)(void *graph, int32_t a, int32_t ka, int32_t b, int32_t kb);
    /* ABI 2.5. Nonzero when replace_chain makes new outputs (out_nodes[j] = -1). An older
     * host leaves it out (GDP_HAS_FIELD) and refuses them. */
    int32_t new_outputs;
} gdp_graph_view;

typedef struct gdp_graph_pass {
    size_t size;
    const char *name;
    gdp_status (*run)(void *backend, gdp_graph_view *graph, gdp_err *err);
} gdp_graph_pass;

/* ---- the collective module (ABI 2.2) ------------------------------------------------- */

/* Sums across processes on the device itself, for data-parallel training: one process
 * (a rank) per device, the host's gradient buffers summed in place in device memory (the
 * CUDA plugin fills it with NCCL). The host shares the id that rank 0 makes with every
 * rank through its own channel (MPI, a TCP rendezvous), then each rank opens the
 * communicator. Without the module (NULL), the host sums through host memory.
 *
 * Results must be bitwise identical run to run for the same inputs and rank count; the
 * order of additions is the plugin's. */
typedef struct gdp_collective {
    size_t size;
    size_t id_bytes;       /* the size of the job's id: what unique_id writes */
    /* On rank 0: makes the id of a new job. */
    gdp_status (*unique_id)(void *backend, void *id, gdp_err *err);
    /* This device joins job `id` as rank `rank` of `size`; *comm is passed back below. */
    gdp_status (*comm_open)(void *backend, const void *id, int32_t rank, int32_t size, void **comm, gdp_err *err);
    /* Replaces `count` elements of `dtype` at `data` (this backend's memory) by their sum
     * over the ranks, after the work queued on `stream` before the call; may return before
     * the work is done. It may run beside work queued on `stream` later (the host queues
     * none that touches `data` before finish): a device overlaps the sums with the rest of
     * a backward pass that way. Every rank calls it in the same order. */
    gdp_status (*allreduce_sum)(void *backend, void *comm, void *data, int64_t count, int32_t dtype, void *stream,
                                gdp_err *err);
    /* Waits until the collectives queued since the last finish are done, at most timeout_s
     * seconds; work queued on `stream` afterwards sees their results.
     * Past it, or when a peer failed, the communicator is aborted (nothing of it waits any
     * more) and the call fails saying why; the host then closes it. */
    gdp_status (*finish)(void *backend, void *comm, void *stream, double timeout_s, gdp_err *err);
    void (*comm_close)(void *backend, void *comm);
    /* (2.4, optional) Replaces `bytes` bytes at `data` on every rank by rank `root`'s, on
     * the same terms as allreduce_sum (queued after the work on `stream`; finish waits).
     * A sharded optimizer sends each parameter from the rank that updated it this way. */
    gdp_status (*broadcast)(void *backend, void *comm, void *data, int64_t bytes, int32_t root, void *stream,
                            gdp_err *err);
} gdp_collective;

/* ---- what the host offers the plugin ------------------------------------------------ */

/* The gdp_host given to init stays valid, at the same address, until the plugin's
 * shutdown returns: a plugin may keep the pointer and call its functions later. */
typedef struct gdp_host {
    size_t size;
    int32_t abi_major, abi_minor;
    void *host;
    /* Registers one kernel. Fails on a duplicate key (op, dtype or signature) for this
     * plugin, an op gradus does not know, or a signature the op does not declare. Fused
     * ops a graph pass produces (e.g. "linear_act") are ops gradus declares, with
     * reference kernels: a plugin implements declared semantics, it never invents them. */
    gdp_status (*register_kernel)(void *host, const gdp_kernel *kernel, gdp_err *err);
    /* One line to gradus's log (stderr, or the application's log callback). */
    void (*log)(void *host, const char *line);
    /* Value of a setting (environment variable by default); NULL when unset. */
    const char *(*getenv)(void *host, const char *name);
    /* The host's clock, nanoseconds (CLOCK_MONOTONIC): the timeline of profiler spans. */
    uint64_t (*now_ns)(void *host);
} gdp_host;

/* ---- what the plugin fills ---------------------------------------------------------- */

typedef struct gdp_plugin {
    size_t size;
    int32_t abi_major, abi_minor;  /* the ABI the plugin was built against: set these first */
    const char *name;              /* short, lowercase: "cuda", "testdev" */
    int32_t priority;              /* higher wins placement; the CPU reference is 0 */
    int32_t _pad;
    void *backend;                 /* passed back as the first argument of every call */
    const gdp_device *device;      /* NULL: kernels run on host memory (no device module) */
    const gdp_profiler *profiler;  /* optional */
    const gdp_graph_pass *graph_pass; /* optional */
    /* Called after init succeeded, once, to register kernels through host->register_kernel.
     * Default when NULL: the plugin has no kernels (every node falls back). */
    gdp_status (*register_kernels)(void *backend, const gdp_host *host, gdp_err *err);
    /* Releases everything of this instance. Default when NULL: nothing to release. */
    void (*shutdown)(void *backend);
    const gdp_executor *executor;  /* optional */
    /* A setting from the application (key "threads": how many host threads the backend
     * may use, 0 for its default). Default when NULL, or for an unknown key: ignored. */
    gdp_status (*configure)(void *backend, const char *key, int64_t value, gdp_err *err);
    /* ABI 2.2, optional: sums across processes on the device (data parallelism). */
    const gdp_collective *collective;
} gdp_plugin;

/* The exported entry point. Returns GDP_OK, GDP_ERR_NODEVICE to decline quietly, or
 * another status with a message. `plugin->size` is set by the host to the size it
 * allocated; the plugin sets abi_major/abi_minor first thing. */
typedef gdp_status (*gdp_init_fn)(const gdp_host *host, gdp_plugin *plugin, gdp_err *err);

#ifdef __cplusplus
}
#endif
#endif /* GRADUS_PLUGIN_H */
