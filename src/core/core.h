/* core.h — the core's internal structures: context, graph, values, nodes, backends.
 * Programs have their own header (program.h). Nothing outside src/core/ should need more
 * than opdef.h and gradus.h; src/check, src/cli and the tests include this for the sweep
 * and the debug views. */
#ifndef GD_CORE_H
#define GD_CORE_H

#include "alloc.h"
#include "checked.h"
#include "opdef.h"

#include <stdarg.h>

/* ---- context ---------------------------------------------------------------------- */

typedef struct gd_backend gd_backend;

#define GD_MAX_BACKENDS 16

typedef struct gd_plugin_note {
    char name[64];
    char path[512];
    char state[16];     /* "loaded", "declined", "disabled", "refused", "failed" */
    char reason[512];
} gd_plugin_note;

struct gd_ctx {
    char err[1024];
    gd_status status;   /* of the failure whose message is in err */
    gd_registry *reg;
    gd_backend *backends[GD_MAX_BACKENDS]; /* [0] is the reference */
    int n_backends;
    int preferred;      /* index into backends */
    int strict;
    int trace;
    int threads;
    int guard;          /* sweep: unshared buffers with guard bytes checked after runs */
    int no_views;       /* the sweep's oracle: view ops run their reference kernels */
    void (*log_fn)(void *, const char *);
    void *log_user;
    /* plugins found, loaded or not, for `gradus devices` */
    gd_plugin_note *notes;
    int n_notes;
    /* Lifetime: graphs hold a reference; gd_ctx_free drops the creator's and the context
     * goes when the last reference does, so frees are safe in any order. */
    int refs;
    uint64_t compiles;  /* programs compiled, for tests that show a run never recompiles */
    /* The trace being recorded (src/prof), NULL when not profiling: every hook of the
     * core tests this one pointer. */
    struct gd_prof *prof;
    uint64_t prof_sessions;
};

void gd_ctx_log(gd_ctx *ctx, const char *fmt, ...);
gd_status gd_failv(gd_ctx *ctx, gd_status s, const char *fmt, va_list ap);
void gd_ctx_unref(gd_ctx *ctx);

/* ---- graph ------------------------------------------------------------------------- */

enum gd_value_kind { GD_V_NODE = 0, GD_V_INPUT, GD_V_PARAM, GD_V_STATE };

typedef struct gd_node gd_node;

struct gd_tensor {
    gd_graph *g;
    int id;
    char *name;
    int32_t dtype;
    int ndim;
    int64_t shape[GDP_MAX_DIMS];
    int kind;            /* gd_value_kind */
    gd_node *node;       /* producer in the graph (NULL for leaves) */
    int out_index;
    /* Persistent leaves (inputs, params, states): storage on `home` backend. */
    void *data;
    gd_backend *home;
    int written;         /* an input has been written since creation */
    /* Where the last run of a program left this value (targets only), and which run of
     * the graph that was: programs of a graph share activation memory, so the value is
     * good until the graph runs anything else. */
    void *run_ptr;
    gd_backend *run_be;
    uint64_t run_seq;
    /* Parameter initializer. */
    int init_kind;
    double init_std;
    /* Autodiff. */
    gd_tensor *grad;
};

struct gd_node {
    int id;              /* unique in the graph (nodes made by passes get ids past the graph's) */
    const gd_op_def *op;
    int n_in, n_out;
    gd_tensor *in[GDP_MAX_INPUTS];
    gd_tensor *out[GDP_MAX_OUTPUTS];
    int n_attr;
    gdp_attr *attrs;     /* owned, with names, ints and strings owned too */
    char *label;         /* owned; NULL: "<op>#<id>" */
    int is_update;       /* has an in-place output */
};

/* Activation memory of a graph on one backend, shared by every program compiled from the
 * graph: programs hold offsets into it. It grows (at compile time only) when a program
 * needs more; `gen` counts moves, so programs know to re-resolve their pointers. */
typedef struct gd_arena {
    void *ptr;
    size_t bytes;
    uint64_t gen;
} gd_arena;

struct gd_graph {
    gd_ctx *ctx;
    gd_node **nodes;
    int n_nodes, cap_nodes;
    gd_tensor **values;
    int n_values, cap_values;
    gd_tensor **params;
    int n_params, cap_params;
    int backward_done;
    gd_tensor *lr;       /* optimizer learning-rate state, if any */
    int next_node_id;
    gd_arena arena[GD_MAX_BACKENDS];
    uint64_t runs;       /* programs of this graph run so far, and arena moves: a target read checks it */
    int refs;            /* 1 (the user's) + live programs */
};

void gd_graph_unref(gd_graph *g);
/* Storage for a leaf (zeroed), made when it is first written or compiled into a program. */
gd_status gd_leaf_storage(gd_tensor *t);
/* Checks that the leaves still without storage (plus `extra` bytes per backend, may be
 * NULL) fit in what each backend has left; a clear NOMEM naming `what` otherwise. */
gd_status gd_leaves_reserve(gd_graph *g, const char *what, const size_t *extra);
gd_tensor *gd_value_new(gd_graph *g, int kind, const char *name, int32_t dtype, int ndim, const int64_t *shape);
gd_node *gd_node_add(gd_graph *g, const gd_op_def *op, int n_in, gd_tensor *const *in, int n_attr,
                     const gd_attr *attrs, int n_out, gd_tensor **out);
/* A node with the same op and attributes as `like` on other operands, not added to the
 * graph (passes and the planner make these for one program). Outputs are given. */
gd_node *gd_node_make(gd_graph *g, const gd_op_def *op, int n_in, gd_tensor *const *in, int n_attr,
                      const gd_attr *attrs, int n_out, gd_tensor *const *out);
void gd_node_free(gd_node *n);
gdp_attrs gd_node_attrs(const gd_node *n);
const char *gd_node_label(const gd_node *n, char *buf, size_t cap);
/* The dtype a kernel is keyed by: the first floating input, else the first output. */
int32_t gd_node_key_dtype(const gd_node *n);
/* The node's operand dtypes as "in,in->out": its signature. */
const char *gd_node_signature(const gd_node *n, char *buf, size_t cap);
/* 1 when every floating operand has the key dtype (outputs of ops whose output dtype is
 * an attribute excepted): a node any kernel of that dtype takes. */
int gd_node_uniform(const gd_node *n);
gd_shape gd_value_shape(const gd_tensor *t);
/* A contiguous descriptor of t over data. */
gdp_tensor gd_value_desc(const gd_tensor *t, void *data);
size_t gd_value_bytes(const gd_tensor *t);

/* ---- registry ------------------------------------------------------------------------ */

struct gd_registry {
    gd_op_def *ops;
    int n, cap;
    int failed;          /* a registration was refused (out of memory, duplicate name) */
    gd_core_hooks hooks;
};
gd_registry *gd_registry_new_all(void); /* every family registered; NULL when out of memory */
void gd_registry_free(gd_registry *r);

/* ---- backends -------------------------------------------------------------------------- */

typedef struct gd_kernel_entry {
    const gd_op_def *op;
    int32_t dtype;
    char *signature;           /* owned; NULL: uniform nodes of `dtype` */
    gdp_kernel k;
} gd_kernel_entry;

struct gd_backend {
    char name[64];
    int index;
    int priority;
    int is_ref;                /* the CPU reference: kernels are the op defs' refs */
    int host_visible;          /* kernels of the reference may run on its memory in place */
    void *dl;                  /* dlopen handle, NULL for built-ins */
    gdp_plugin plugin;         /* as filled by the plugin (size-checked copy) */
    gdp_device dev;            /* zero-extended copy of the plugin's device module */
    int has_dev;
    gdp_executor exec;         /* zero-extended copy of the executor module */
    int has_exec;
    void *stream;
    gd_kernel_entry *kernels;
    int n_kernels, cap_kernels;
    int sync_every_kernel;     /* GRADUS_SYNC */
    int duplicate_kernels;     /* registrations refused as duplicates (the sweep reports) */
    size_t host_bytes;         /* host memory allocated for this backend (no device module) */
    size_t dev_bytes;          /* device memory allocated through the device module */
    gdp_profiler prof_mod;     /* zero-extended copy of the profiler module */
    int has_prof;
    gdp_collective coll;       /* zero-extended copy of the collective module (ABI 2.2) */
    int has_coll;
    /* What the plugin was given at init: valid until shutdown, as the ABI promises. */
    gdp_host host;
    struct gd_host_ctx { gd_ctx *ctx; gd_backend *b; } host_ctx; /* gdp_host.host */
    char bad_registrations[1024];
};

/* The kernel of b for node n (by its key), or NULL. */
const gd_kernel_entry *gd_backend_kernel(const gd_backend *b, const gd_node *n);
gd_status gd_backend_alloc(gd_ctx *ctx, gd_backend *b, size_t bytes, void **ptr);
void gd_backend_free(gd_backend *b, void *ptr, size_t bytes);
gd_status gd_backend_h2d(gd_ctx *ctx, gd_backend *b, void *dst, const void *src, size_t bytes);
gd_status gd_backend_d2h(gd_ctx *ctx, gd_backend *b, void *dst, const void *src, size_t bytes);
gd_status gd_backend_sync(gd_ctx *ctx, gd_backend *b);
gd_status gd_backend_zero(gd_ctx *ctx, gd_backend *b, void *ptr, size_t bytes);
/* Memory the backend can still give: its report, or for host memory what the machine has
 * left; 0 when unknown. */
size_t gd_backend_free_bytes(gd_backend *b);
/* A kernel status as a gradus status: bad data is the user's INVALID, never DEVICE. */
gd_status gd_status_from_plugin(gdp_status s);

/* Workspace the reference needs to run node (f32 copies of f16/bf16 operands). */
size_t gd_ref_workspace(const gd_op_def *op, const gdp_node *node);
/* Runs the reference kernel of node on host memory, converting f16/bf16 through f32 (in
 * node->workspace) where the reference does not handle them itself. */
gd_status gd_ref_launch(gd_ctx *ctx, const gd_op_def *op, const gdp_node *node);

gd_backend *gd_backend_ref_new(void);
void gd_backend_destroy(gd_backend *b);
/* Loads the built-in backends and plugins from the plugin directories. */
void gd_plugins_load(gd_ctx *ctx, const gd_ctx_options *opt);
/* Loads one plugin file; used by discovery and by tests. */
gd_status gd_plugin_load_file(gd_ctx *ctx, const char *path);

#define GD_GUARD_BYTES 64
#define GD_GUARD_BYTE 0xA5

#endif
