/* gradus_plugin.h — the backend ABI.
 *
 * A backend is a shared object that exports one symbol, GDP_INIT_SYMBOL, with the
 * signature gdp_init_fn. The host passes a gdp_host (services it offers) and an empty
 * gdp_plugin the backend fills: a name, a priority and optional modules (device, kernels,
 * profiler, graph pass). Plain C; depends on nothing but the C standard library.
 *
 * Rules that keep old plugins and new hosts (and the reverse) working:
 *  - every struct starts with `size` (sizeof as the writer compiled it); fields are only
 *    ever appended; a reader checks `size` before reading a field (GDP_HAS_FIELD);
 *  - GDP_ABI_MAJOR changes only when a field changes meaning; the host refuses a plugin
 *    of another major version with a message, before calling anything else in it;
 *  - every call returns a gdp_status and, on failure, writes a message into gdp_err;
 *    a plugin never exits or aborts the process;
 *  - a NULL function pointer means "not provided", and each one has a default written
 *    next to it below.
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

#ifdef __cplusplus
extern "C" {
#endif

#define GDP_ABI_MAJOR 1
#define GDP_ABI_MINOR 0
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
    GDP_ERR_INVALID = 1,     /* bad argument or input */
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

/* ---- data types (values are part of the ABI) ---------------------------------------- */

typedef enum gdp_dtype {
    GDP_F32 = 0,
    GDP_F16 = 1,
    GDP_BF16 = 2,
    GDP_I32 = 3,
    GDP_I64 = 4,
    GDP_U8 = 5,
    GDP_I8 = 6,
    GDP_BOOL = 7,
    GDP_F64 = 8,
    GDP_DTYPE_COUNT = 9
} gdp_dtype;

static inline size_t gdp_dtype_size(int32_t dt)
{
    switch (dt) {
    case GDP_F32: case GDP_I32: return 4;
    case GDP_F16: case GDP_BF16: return 2;
    case GDP_I64: case GDP_F64: return 8;
    case GDP_U8: case GDP_I8: case GDP_BOOL: return 1;
    default: return 0;
    }
}

/* ---- the counter-based generator --------------------------------------------------- */

/* Philox4x32-10 (Salmon et al., SC'11). Random ops and dropout draw element i's numbers
 * from counter (i, offset) under key (seed), so every backend produces the same values
 * whatever order it visits elements in. Plugins must use exactly this. */
#if defined(__CUDACC__)
#define GDP_HD __host__ __device__
#else
#define GDP_HD
#endif

typedef struct gdp_philox_out { uint32_t v[4]; } gdp_philox_out;

static inline GDP_HD gdp_philox_out gdp_philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t seed)
{
    uint32_t c0 = (uint32_t)counter_lo, c1 = (uint32_t)(counter_lo >> 32);
    uint32_t c2 = (uint32_t)counter_hi, c3 = (uint32_t)(counter_hi >> 32);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1; c3 = (uint32_t)p0; c0 = n0; c2 = n2;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
    gdp_philox_out o;
    o.v[0] = c0; o.v[1] = c1; o.v[2] = c2; o.v[3] = c3;
    return o;
}

/* A float in (0, 1) from 32 random bits, never 0 or 1 (safe for log). 23 bits, so that
 * the largest value, (2^23 - 0.5) / 2^23, is still exactly representable below 1. */
static inline GDP_HD float gdp_u01(uint32_t bits)
{
    return ((float)(bits >> 9) + 0.5f) * (1.0f / 8388608.0f);
}

/* ---- nodes as kernels see them ------------------------------------------------------ */

/* A dense, row-major (C-contiguous) tensor. `data` is device memory of the backend the
 * kernel belongs to. Every tensor a kernel receives is contiguous. */
typedef struct gdp_tensor {
    void *data;
    int32_t dtype;
    int32_t ndim;
    int64_t shape[GDP_MAX_DIMS];
} gdp_tensor;

static inline int64_t gdp_numel(const gdp_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

typedef enum gdp_attr_kind { GDP_ATTR_INT = 0, GDP_ATTR_FLOAT = 1, GDP_ATTR_INTS = 2 } gdp_attr_kind;

typedef struct gdp_attr {
    const char *name;
    int32_t kind;
    int32_t n;           /* number of ints when kind == GDP_ATTR_INTS */
    int64_t i;           /* GDP_ATTR_INT */
    double f;            /* GDP_ATTR_FLOAT */
    const int64_t *ints; /* GDP_ATTR_INTS */
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
    return x == NULL ? def : x->kind == GDP_ATTR_FLOAT ? (int64_t)x->f : x->i;
}
static inline double gdp_attr_float(const gdp_attrs *a, const char *name, double def)
{
    const gdp_attr *x = gdp_attr_find(a, name);
    return x == NULL ? def : x->kind == GDP_ATTR_INT ? (double)x->i : x->f;
}
/* Copies up to `cap` ints into out and returns how many the attribute has (0 if absent). */
static inline int gdp_attr_ints(const gdp_attrs *a, const char *name, int64_t *out, int cap)
{
    const gdp_attr *x = gdp_attr_find(a, name);
    if (x == NULL || x->kind != GDP_ATTR_INTS) return 0;
    for (int k = 0; k < x->n && k < cap; k++) out[k] = x->ints[k];
    return x->n;
}

/* One node of the graph, as a kernel sees it. Outputs are allocated by the host before
 * launch; an op that updates a tensor in place (optimizer steps) gets an output whose
 * `data` equals an input's. */
typedef struct gdp_node {
    size_t size;
    const char *op;
    int32_t n_in, n_out;
    const gdp_tensor *in;
    const gdp_tensor *out;
    gdp_attrs attrs;
} gdp_node;

/* ---- the kernels module ------------------------------------------------------------- */

/* Answers whether this kernel can run this exact node (dtypes, shapes, attributes).
 * Default when NULL: yes for every node of the kernel's op and dtype. */
typedef int (*gdp_supports_fn)(void *backend, const gdp_node *node);
/* Runs the node on `stream` (NULL for a backend without streams). May return before the
 * work is done; the host orders work through streams and events. */
typedef gdp_status (*gdp_launch_fn)(void *backend, const gdp_node *node, void *stream, gdp_err *err);

typedef struct gdp_kernel {
    size_t size;
    const char *op;     /* op name as registered by gradus, e.g. "matmul" */
    int32_t dtype;      /* dtype of the node's first floating input (or first output) */
    gdp_supports_fn supports;
    gdp_launch_fn launch;
    /* Names of attributes this kernel's supports() looks at, NULL-terminated, or NULL.
     * The sweep rejects a kernel naming an attribute its op does not have. */
    const char *const *constrained_attrs;
} gdp_kernel;

/* ---- the device module -------------------------------------------------------------- */

typedef struct gdp_device {
    size_t size;
    const char *name;      /* e.g. "NVIDIA H200" */
    int32_t host_visible;  /* 1: the host may read and write device pointers directly
                              after synchronize (host memory, managed memory) */
    int32_t _pad;
    /* Required. */
    gdp_status (*alloc)(void *backend, size_t bytes, void **ptr, gdp_err *err);
    gdp_status (*free)(void *backend, void *ptr, gdp_err *err);
    /* Copies, ordered on `stream`. Required: h2d and d2h. copy_h2d returns once `src`
     * may be reused (a plugin wanting asynchrony stages through its own pinned memory);
     * copy_d2h returns once `dst` holds the data (it waits for prior work on `stream`).
     * copy_d2d may be asynchronous. Default for d2d when NULL: staged through host memory. */
    gdp_status (*copy_h2d)(void *backend, void *dst, const void *src, size_t bytes, void *stream, gdp_err *err);
    gdp_status (*copy_d2h)(void *backend, void *dst, const void *src, size_t bytes, void *stream, gdp_err *err);
    gdp_status (*copy_d2d)(void *backend, void *dst, const void *src, size_t bytes, void *stream, gdp_err *err);
    /* Waits until all work on `stream` is done. Default when NULL: nothing to wait for. */
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
} gdp_device;

/* ---- the profiler module ------------------------------------------------------------ */

typedef struct gdp_span {
    size_t size;
    const char *name;   /* op name or plugin-defined label; valid until the next collect */
    uint64_t start_ns;  /* device time, relative to profiler start */
    uint64_t end_ns;
    int32_t stream_id;
} gdp_span;

typedef struct gdp_profiler {
    size_t size;
    gdp_status (*start)(void *backend, gdp_err *err);
    gdp_status (*stop)(void *backend, gdp_err *err);
    /* Writes up to cap spans, sets *n to how many were written. */
    gdp_status (*collect)(void *backend, gdp_span *spans, int32_t cap, int32_t *n, gdp_err *err);
} gdp_profiler;

/* ---- the graph-pass module ---------------------------------------------------------- */

/* A graph pass sees the graph through these host callbacks, so that no graph layout is
 * frozen into the ABI. Node ids are stable for the duration of the pass. */
typedef struct gdp_graph_view {
    size_t size;
    void *graph;
    int32_t (*node_count)(void *graph);
    const char *(*node_op)(void *graph, int32_t node);
    int32_t (*node_n_inputs)(void *graph, int32_t node);
    /* The producer of input k of node: returns its node id (or -1 for a graph input or
     * parameter) and writes the producer's output index into *out_index. */
    int32_t (*node_input)(void *graph, int32_t node, int32_t k, int32_t *out_index);
    /* Shape and dtype of an input/output (data is NULL). */
    gdp_status (*node_input_desc)(void *graph, int32_t node, int32_t k, gdp_tensor *desc);
    gdp_status (*node_output_desc)(void *graph, int32_t node, int32_t k, gdp_tensor *desc);
    const gdp_attrs *(*node_attrs)(void *graph, int32_t node);
    /* How many nodes read output k of node (a fusion may only swallow single-use nodes). */
    int32_t (*node_users)(void *graph, int32_t node, int32_t k);
    /* Replaces the chain ending at `last` with one new node of `op` reading `inputs`
     * (given as (node, output) pairs; node -1 means "input k of node `first`" with the
     * pair's second value naming k) and having the attributes given. Nodes in between
     * that become unused are removed. */
    gdp_status (*replace_chain)(void *graph, int32_t first, int32_t last, const char *op,
                                int32_t n_in, const int32_t *in_nodes, const int32_t *in_outputs,
                                const gdp_attr *attrs, int32_t n_attrs, gdp_err *err);
} gdp_graph_view;

typedef struct gdp_graph_pass {
    size_t size;
    const char *name;
    gdp_status (*run)(void *backend, gdp_graph_view *graph, gdp_err *err);
} gdp_graph_pass;

/* ---- what the host offers the plugin ------------------------------------------------ */

/* The gdp_host given to init stays valid, at the same address, until the plugin's
 * shutdown returns: a plugin may keep the pointer and call log/getenv later. */

typedef struct gdp_host {
    size_t size;
    int32_t abi_major, abi_minor;
    void *host;
    /* Registers one kernel. Fails on a duplicate (op, dtype) for this plugin or an op
     * gradus does not know. Fused ops a graph pass produces (e.g. "linear_act", matmul +
     * bias + activation) are ops gradus declares, with reference kernels: a plugin
     * implements declared semantics, it never invents new ones. */
    gdp_status (*register_kernel)(void *host, const gdp_kernel *kernel, gdp_err *err);
    /* One line to gradus's log (stderr, or the application's log callback). */
    void (*log)(void *host, const char *line);
    /* Value of a setting (environment variable by default); NULL when unset. */
    const char *(*getenv)(void *host, const char *name);
} gdp_host;

/* ---- what the plugin fills ---------------------------------------------------------- */

typedef struct gdp_plugin {
    size_t size;
    int32_t abi_major, abi_minor;  /* the ABI the plugin was built against */
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
    /* Releases everything. Default when NULL: nothing to release. */
    void (*shutdown)(void *backend);
} gdp_plugin;

/* The exported entry point. Returns GDP_OK, GDP_ERR_NODEVICE to decline quietly, or
 * another status with a message. `plugin->size` is set by the host to the size it
 * allocated; the plugin sets abi_major/abi_minor first thing. */
typedef gdp_status (*gdp_init_fn)(const gdp_host *host, gdp_plugin *plugin, gdp_err *err);

#ifdef __cplusplus
}
#endif
#endif /* GRADUS_PLUGIN_H */
