/* core.h — the core's internal structures: context, graph, values, nodes, backends,
 * programs. Nothing outside src/core/ should need more than opdef.h and gradus.h;
 * src/cli and the tests include this for the sweep and the debug views. */
#ifndef GD_CORE_H
#define GD_CORE_H

#include "opdef.h"

#include <stdarg.h>

/* ---- context ---------------------------------------------------------------------- */

typedef struct gd_backend gd_backend;

#define GD_MAX_BACKENDS 16

struct gd_ctx {
    char err[1024];
    gd_registry *reg;
    gd_backend *backends[GD_MAX_BACKENDS]; /* [0] is the reference */
    int n_backends;
    int preferred;      /* index into backends */
    int strict;
    int trace;
    int threads;
    int guard;          /* sweep: padded, unshared buffers with guard bytes checked after runs */
    void (*log_fn)(void *, const char *);
    void *log_user;
    /* plugins found but not loaded, for `gradus devices` */
    struct gd_plugin_note *notes;
    int n_notes;
};

typedef struct gd_plugin_note {
    char name[64];
    char path[512];
    char state[16];     /* "loaded", "declined", "disabled", "failed" */
    char reason[512];
} gd_plugin_note;

void gd_ctx_log(gd_ctx *ctx, const char *fmt, ...);
gd_status gd_failv(gd_ctx *ctx, gd_status s, const char *fmt, va_list ap);

/* ---- graph ------------------------------------------------------------------------- */

enum gd_value_kind { GD_V_NODE = 0, GD_V_INPUT, GD_V_PARAM, GD_V_STATE };

enum gd_init_kind { GD_INIT_NONE = 0, GD_INIT_ZEROS, GD_INIT_ONES, GD_INIT_KAIMING, GD_INIT_XAVIER,
                    GD_INIT_NORMAL };

typedef struct gd_node gd_node;

struct gd_tensor {
    gd_graph *g;
    int id;
    char *name;
    int32_t dtype;
    int ndim;
    int64_t shape[GDP_MAX_DIMS];
    int kind;            /* gd_value_kind */
    gd_node *node;       /* producer (NULL for leaves) */
    int out_index;
    /* Persistent leaves (inputs, params, states): storage on `home` backend. */
    void *data;
    gd_backend *home;
    int written;         /* an input has been written since creation */
    /* Where the last run of a program left this value (targets only). */
    void *run_ptr;
    gd_backend *run_be;
    /* Parameter initializer. */
    int init_kind;
    double init_std;
    /* Autodiff. */
    gd_tensor *grad;
    /* A target of some compiled program: graph passes must keep it. */
    int exposed;
};

struct gd_node {
    int id;
    const gd_op_def *op;
    int n_in, n_out;
    gd_tensor *in[GDP_MAX_INPUTS];
    gd_tensor *out[GDP_MAX_OUTPUTS];
    int n_attr;
    gdp_attr *attrs;     /* owned, with names and ints owned too */
    int is_update;       /* has an in-place output */
    int dead;            /* removed by a graph pass */
};

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
    int passes_done;     /* bitmask of backends whose graph pass ran */
};

gd_tensor *gd_value_new(gd_graph *g, int kind, const char *name, int32_t dtype, int ndim, const int64_t *shape);
gd_node *gd_node_add(gd_graph *g, const gd_op_def *op, int n_in, gd_tensor *const *in, int n_attr,
                     const gd_attr *attrs, int n_out, gd_tensor **out);
gdp_attrs gd_node_attrs(const gd_node *n);
/* Key dtype used to look up kernels: the first floating input, else the first output. */
int32_t gd_node_key_dtype(const gd_node *n);
gd_shape gd_value_shape(const gd_tensor *t);
gdp_tensor gd_value_desc(const gd_tensor *t, void *data);
size_t gd_value_bytes(const gd_tensor *t);

/* ---- registry ------------------------------------------------------------------------ */

struct gd_registry {
    gd_op_def *ops;
    int n, cap;
    gd_tensor *(*accumulate)(gd_tensor *, gd_tensor *);
};
gd_registry *gd_registry_new_all(void); /* every family registered */
void gd_registry_free(gd_registry *r);

/* ---- backends -------------------------------------------------------------------------- */

typedef struct gd_kernel_entry {
    const gd_op_def *op;
    int32_t dtype;
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
    void *stream;
    gd_kernel_entry *kernels;
    int n_kernels, cap_kernels;
    int sync_every_kernel;     /* GRADUS_SYNC */
    int duplicate_kernels;     /* registrations refused as duplicates (the sweep reports) */
    /* What the plugin was given at init: valid until shutdown, as the ABI promises (a
     * plugin may keep the pointer and call its log/getenv at any time). */
    gdp_host host;
    struct gd_host_ctx { gd_ctx *ctx; gd_backend *b; } host_ctx; /* gdp_host.host */
    char bad_registrations[1024];
};

const gd_kernel_entry *gd_backend_kernel(const gd_backend *b, const gd_op_def *op, int32_t dtype);
gd_status gd_backend_alloc(gd_ctx *ctx, gd_backend *b, size_t bytes, void **ptr);
void gd_backend_free(gd_backend *b, void *ptr);
gd_status gd_backend_h2d(gd_ctx *ctx, gd_backend *b, void *dst, const void *src, size_t bytes);
gd_status gd_backend_d2h(gd_ctx *ctx, gd_backend *b, void *dst, const void *src, size_t bytes);
gd_status gd_backend_sync(gd_ctx *ctx, gd_backend *b);
gd_status gd_backend_zero(gd_ctx *ctx, gd_backend *b, void *ptr, size_t bytes);
/* Runs the reference kernel of node on host memory, converting f16/bf16 through f32 where
 * the reference does not handle them itself. */
gd_status gd_ref_launch(gd_ctx *ctx, const gd_op_def *op, const gdp_node *node);

gd_backend *gd_backend_ref_new(void);
void gd_backend_destroy(gd_backend *b);
/* Loads plugins from the plugin directories (see docs/plugin-abi.md). */
void gd_plugins_load(gd_ctx *ctx, const gd_ctx_options *opt);
/* Loads one plugin file; used by discovery and by tests. */
gd_status gd_plugin_load_file(gd_ctx *ctx, const char *path);

/* ---- programs ---------------------------------------------------------------------------- */

typedef struct gd_step {
    gd_node *node;
    gd_backend *be;
    const gd_kernel_entry *kernel;  /* NULL: reference kernel on host memory */
    int fallback;                   /* ran on the reference though a device was preferred */
} gd_step;

typedef struct gd_buffer gd_buffer;

struct gd_program {
    gd_graph *g;
    gd_step *steps;
    int n_steps;
    gd_tensor **targets;
    int n_targets;
    gd_backend *dev;               /* preferred backend when compiled */
    struct gd_plan *plan;
};

#define GD_GUARD_BYTES 64
#define GD_GUARD_BYTE 0xA5
/* With ctx->guard: checks the guard bytes of every buffer of the last run; GD_OK or a
 * failure naming the node whose output was overrun. */
gd_status gd_program_check_guards(gd_program *p);

#endif
