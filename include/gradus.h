/* gradus.h — the public API.
 *
 * The shape of a program:
 *
 *     gd_ctx *ctx;  gd_ctx_create(&ctx, NULL);            // finds backends
 *     gd_graph *g = gd_graph_new(ctx);
 *     gd_tensor *x = gd_input(g, "x", GD_F32, 2, (int64_t[]){128, 784});
 *     gd_tensor *w = gd_param(g, "w", GD_F32, 2, (int64_t[]){10, 784});
 *     gd_tensor *loss = gd_cross_entropy(gd_linear(x, w, NULL), labels, -1);
 *     gd_backward(g, loss);                                // appends the backward graph
 *     gd_optimizer_adamw(g, &(gd_adamw_config){.lr = 1e-3}); // appends in-place updates
 *     gd_program *step = gd_compile(g, 1, &loss, GD_COMPILE_UPDATES);
 *     ... gd_tensor_write(x, ...); gd_program_run(step); gd_tensor_read(loss, ...);
 *
 * Errors. Every call that can fail returns a status (GD_OK = 0) or NULL, and leaves a
 * message in the context: gd_ctx_error(ctx). Builders take NULL inputs and return NULL
 * without touching the message, so a chain of builders can be checked once at its end
 * and the message names the first thing that went wrong. Nothing here prints to stdout
 * or ends the process.
 *
 * Shapes are row-major; images are NCHW; the attention layout is (B, heads, T, head_dim).
 *
 * Lifetimes. A program belongs to the graph it was compiled from, and a graph to its
 * context. The frees may come in any order: freeing a context or a graph that still has
 * graphs or programs only lets go of it, and it is released with the last of them. What
 * must not happen is using an object after freeing it (building on a freed graph, running
 * a freed program).
 *
 * Threads. One context may be used by one thread at a time. Two contexts share nothing a
 * caller can see, so two threads may each train in their own context at once.
 */
#ifndef GRADUS_H
#define GRADUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GD_VERSION "0.1.0"
#define GD_MAX_DIMS 8

typedef struct gd_ctx gd_ctx;
typedef struct gd_graph gd_graph;
typedef struct gd_tensor gd_tensor;
typedef struct gd_program gd_program;

typedef int gd_status;
enum {
    GD_OK = 0,
    GD_ERR_INVALID = 1,     /* bad argument */
    GD_ERR_UNSUPPORTED = 2, /* valid request this build or backend cannot do */
    GD_ERR_NOMEM = 3,
    GD_ERR_DEVICE = 4,      /* a backend failed */
    GD_ERR_VERSION = 5,
    GD_ERR_NODEVICE = 6,
    GD_ERR_SHAPE = 7,       /* shapes or dtypes of operands do not fit the op */
    GD_ERR_IO = 8,          /* file could not be read or written */
    GD_ERR_FORMAT = 9,      /* file contents are corrupt or not what was expected */
    GD_ERR_STRICT = 10      /* strict mode: a node had no kernel on the chosen backend */
};

/* Values match gdp_dtype in gradus_plugin.h. */
typedef enum gd_dtype {
    GD_F32 = 0, GD_F16 = 1, GD_BF16 = 2, GD_I32 = 3, GD_I64 = 4,
    GD_U8 = 5, GD_I8 = 6, GD_BOOL = 7, GD_F64 = 8
} gd_dtype;

const char *gd_dtype_name(gd_dtype dt);      /* "f32", ... ; "?" when unknown */
int gd_dtype_parse(const char *name, gd_dtype *out); /* 1 when name is one of those, else 0 */
size_t gd_dtype_size(gd_dtype dt);
const char *gd_status_name(gd_status s);

/* ---- context ------------------------------------------------------------------------ */

typedef struct gd_ctx_options {
    size_t size;              /* sizeof(gd_ctx_options) */
    int no_plugins;           /* 1: only the CPU reference (no plugin files, no built-in backends) */
    int strict;               /* 1: a node with no kernel on the preferred backend is an error */
    const char *plugin_path;  /* extra plugin directory; NULL: GRADUS_PLUGIN_PATH */
    int trace;                /* 1: log where every node ran (also GRADUS_TRACE=1) */
} gd_ctx_options;

/* Creates a context: the op registry, the CPU reference and any backends found.
 * opt may be NULL. On failure *out is NULL and the status says why (NULL out: INVALID). */
gd_status gd_ctx_create(gd_ctx **out, const gd_ctx_options *opt);
void gd_ctx_free(gd_ctx *ctx);
/* The message of the last failure, "" if none, and its status (GD_OK if none). */
const char *gd_ctx_error(const gd_ctx *ctx);
gd_status gd_ctx_status(const gd_ctx *ctx);
void gd_ctx_clear_error(gd_ctx *ctx);
/* Records a failure (printf-style message) and returns s: for code built on gradus
 * (layers, models, loaders) that reports through the same context. */
gd_status gd_ctx_fail(gd_ctx *ctx, gd_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Where log lines go (default: stderr). */
void gd_ctx_set_log(gd_ctx *ctx, void (*fn)(void *user, const char *line), void *user);
/* Threads the CPU backends may use (0: all cores, or GRADUS_THREADS). */
void gd_ctx_set_threads(gd_ctx *ctx, int n);
int gd_ctx_threads(const gd_ctx *ctx);

/* Waits until every backend has finished the work queued so far (for timing). */
gd_status gd_ctx_synchronize(gd_ctx *ctx);

/* Backends. Index 0 is always the CPU reference ("ref"). gd_ctx_backend names the
 * preferred one, where new programs place their nodes first. */
const char *gd_ctx_backend(const gd_ctx *ctx);
int gd_backend_count(const gd_ctx *ctx);
const char *gd_backend_name(const gd_ctx *ctx, int i);
/* Makes backend `name` the preferred one for new programs (default: highest priority).
 * Returns GD_ERR_INVALID if there is no such backend. */
gd_status gd_ctx_use_backend(gd_ctx *ctx, const char *name);

/* ---- graphs and tensors -------------------------------------------------------------- */

gd_graph *gd_graph_new(gd_ctx *ctx);
void gd_graph_free(gd_graph *g);
gd_ctx *gd_graph_ctx(const gd_graph *g);

/* Leaves. An input is written before each run; a parameter is trainable and keeps its
 * value across runs; a state keeps its value across runs and is not trained (optimizer
 * moments, step counters). Parameters and states start at zero. */
gd_tensor *gd_input(gd_graph *g, const char *name, gd_dtype dt, int ndim, const int64_t *shape);
gd_tensor *gd_param(gd_graph *g, const char *name, gd_dtype dt, int ndim, const int64_t *shape);
gd_tensor *gd_state(gd_graph *g, const char *name, gd_dtype dt, int ndim, const int64_t *shape);

gd_graph *gd_tensor_graph(const gd_tensor *t);
int gd_tensor_ndim(const gd_tensor *t);
int64_t gd_tensor_dim(const gd_tensor *t, int axis); /* negative axis counts from the end */
int64_t gd_tensor_numel(const gd_tensor *t);
gd_dtype gd_tensor_dtype(const gd_tensor *t);
const char *gd_tensor_name(const gd_tensor *t);
/* Writes a readable "f32[128, 784]" into buf. */
const char *gd_tensor_describe(const gd_tensor *t, char *buf, size_t cap);

/* Data in and out, always in host memory; bytes must equal numel * dtype size.
 * Inputs, parameters and states can be written; those and any target of the last run of a
 * program can be read. */
gd_status gd_tensor_write(gd_tensor *t, const void *src, size_t bytes);
gd_status gd_tensor_read(gd_tensor *t, void *dst, size_t bytes);
/* Writes values of another floating dtype (f32, f16, bf16), converted to t's on the host
 * (to a narrower one rounding to nearest, ties to even); bytes is numel * the source's
 * element size. The same dtype is a plain gd_tensor_write. */
gd_status gd_tensor_write_as(gd_tensor *t, gd_dtype src_dtype, const void *src, size_t bytes);
/* Parameters in creation order (for checkpoints and optimizers). */
int gd_graph_param_count(const gd_graph *g);
gd_tensor *gd_graph_param(const gd_graph *g, int i);
gd_tensor *gd_graph_find(const gd_graph *g, const char *name);

/* ---- ops: the generic builder --------------------------------------------------------- */

typedef enum gd_attr_kind { GD_ATTR_INT = 0, GD_ATTR_FLOAT = 1, GD_ATTR_INTS = 2, GD_ATTR_STRING = 3 } gd_attr_kind;
typedef struct gd_attr {
    const char *name;
    gd_attr_kind kind;
    int n;                     /* count of ints for GD_ATTR_INTS, 0 to GD_MAX_DIMS */
    int64_t i;
    double f;
    int64_t ints[GD_MAX_DIMS];
    const char *s;             /* GD_ATTR_STRING (copied when the node is made) */
} gd_attr;
gd_attr gd_attr_i(const char *name, int64_t v);
gd_attr gd_attr_f(const char *name, double v);
gd_attr gd_attr_is(const char *name, int n, const int64_t *v); /* n above GD_MAX_DIMS is refused by gd_op */
gd_attr gd_attr_s(const char *name, const char *v);

/* Adds a node of a registered op; returns its (first) output. */
gd_tensor *gd_op(gd_graph *g, const char *op, int n_in, gd_tensor *const *in, int n_attr, const gd_attr *attrs);
/* Same, for ops with several outputs; writes n_out tensors into out. */
gd_status gd_op_multi(gd_graph *g, const char *op, int n_in, gd_tensor *const *in, int n_attr,
                      const gd_attr *attrs, int n_out, gd_tensor **out);

/* Names the node that produces t ("blocks.3.attn.softmax"): traces, profiles and error
 * messages use it. Returns t (NULL stays NULL). */
gd_tensor *gd_label(gd_tensor *t, const char *label);

/* ---- ops: typed builders (each is one registered op; docs/ops.md lists them) ---------- */

/* elementwise, NumPy broadcasting */
gd_tensor *gd_add(gd_tensor *a, gd_tensor *b);
gd_tensor *gd_sub(gd_tensor *a, gd_tensor *b);
gd_tensor *gd_mul(gd_tensor *a, gd_tensor *b);
gd_tensor *gd_div(gd_tensor *a, gd_tensor *b);
gd_tensor *gd_minimum(gd_tensor *a, gd_tensor *b);
gd_tensor *gd_maximum(gd_tensor *a, gd_tensor *b);
gd_tensor *gd_where(gd_tensor *cond, gd_tensor *a, gd_tensor *b); /* cond: bool */
gd_tensor *gd_neg(gd_tensor *x);
gd_tensor *gd_abs(gd_tensor *x);
gd_tensor *gd_exp(gd_tensor *x);
gd_tensor *gd_log(gd_tensor *x);
gd_tensor *gd_sqrt(gd_tensor *x);
gd_tensor *gd_rsqrt(gd_tensor *x);
gd_tensor *gd_pow_scalar(gd_tensor *x, double p);
gd_tensor *gd_clamp(gd_tensor *x, double lo, double hi);
gd_tensor *gd_scale(gd_tensor *x, double s, double bias); /* x*s + bias */
gd_tensor *gd_relu(gd_tensor *x);
gd_tensor *gd_gelu(gd_tensor *x, int tanh_approximation);
gd_tensor *gd_silu(gd_tensor *x);
gd_tensor *gd_swiglu(gd_tensor *g, gd_tensor *u); /* silu(g) * u, one op (its backward keeps no silu(g)) */
gd_tensor *gd_sigmoid(gd_tensor *x);
gd_tensor *gd_tanh(gd_tensor *x);
gd_tensor *gd_cast(gd_tensor *x, gd_dtype to);

/* reductions; axes may be negative; n_axes = 0 reduces over all axes */
gd_tensor *gd_sum(gd_tensor *x, int n_axes, const int64_t *axes, int keepdims);
gd_tensor *gd_mean(gd_tensor *x, int n_axes, const int64_t *axes, int keepdims);
/* the same with the result in dtype `out` (accumulated in double, rounded once): a bf16 or
 * f16 x summed into f32 */
gd_tensor *gd_sum_as(gd_tensor *x, int n_axes, const int64_t *axes, int keepdims, gd_dtype out);
gd_tensor *gd_mean_as(gd_tensor *x, int n_axes, const int64_t *axes, int keepdims, gd_dtype out);
gd_tensor *gd_max(gd_tensor *x, int n_axes, const int64_t *axes, int keepdims);
gd_tensor *gd_argmax(gd_tensor *x, int64_t axis, int keepdims); /* i64 */
/* sqrt(sum of squares of all elements of all n tensors), a scalar */
gd_tensor *gd_global_norm(gd_graph *g, int n, gd_tensor *const *xs);
/* the same over tensors of any float dtypes, the result in `out` (bf16 gradients' norm in
 * f32, without f32 copies of them) */
gd_tensor *gd_global_norm_as(gd_graph *g, int n, gd_tensor *const *xs, gd_dtype out);

/* matrix products: a (..., M, K) @ b (..., K, N), batch dims broadcast; transposes swap the
 * last two dims of an operand before the product. linear: x (..., in) W (out, in) b (out) */
gd_tensor *gd_matmul(gd_tensor *a, gd_tensor *b, int transpose_a, int transpose_b);
/* the product written in dtype `out` (accumulated in double, rounded once): bf16 or f16
 * operands into f32 */
gd_tensor *gd_matmul_as(gd_tensor *a, gd_tensor *b, int transpose_a, int transpose_b, gd_dtype out);
gd_tensor *gd_linear(gd_tensor *x, gd_tensor *w, gd_tensor *bias /* may be NULL */);
/* x W^T + bias over int8 weights wq (out, in) with one f32 scale per row (as
 * gradus_semantics.h quantizes): W = wq * scale. quantize_x 1 quantizes each row of x to
 * int8 as well (W8A8: an exact integer product). For inference: not differentiable. */
gd_tensor *gd_linear_q8(gd_tensor *x, gd_tensor *wq, gd_tensor *scale, gd_tensor *bias, int quantize_x);

/* losses and normalizers; axis may be negative */
gd_tensor *gd_softmax(gd_tensor *x, int64_t axis);
gd_tensor *gd_log_softmax(gd_tensor *x, int64_t axis);
/* logits (N, C), targets (N) i32 or i64; mean over targets != ignore_index; a scalar. A
 * target outside [0, C) other than ignore_index (a negative one included) makes the run
 * fail with GD_ERR_INVALID naming the node, the value and its position. */
gd_tensor *gd_cross_entropy(gd_tensor *logits, gd_tensor *targets, int64_t ignore_index);
gd_tensor *gd_mse(gd_tensor *pred, gd_tensor *target); /* mean of squared differences */
/* over the last axis; weight and bias (last-axis sized) may be NULL */
gd_tensor *gd_layer_norm(gd_tensor *x, gd_tensor *weight, gd_tensor *bias, double eps);
gd_tensor *gd_rms_norm(gd_tensor *x, gd_tensor *weight, double eps);

/* indexing and layout. An id or index outside [0, rows) — negative ones included: they do
 * not count from the end — makes the run fail with GD_ERR_INVALID naming the node, the
 * value and its position. */
gd_tensor *gd_embedding(gd_tensor *table, gd_tensor *ids);          /* table (V, D), ids any shape */
gd_tensor *gd_index_select(gd_tensor *x, int64_t axis, gd_tensor *idx); /* idx 1-D i32/i64 */
gd_tensor *gd_concat(gd_graph *g, int n, gd_tensor *const *xs, int64_t axis);
gd_tensor *gd_slice(gd_tensor *x, int64_t axis, int64_t start, int64_t end); /* [start, end) */
/* Splits along axis into n parts of the given sizes (NULL sizes: equal parts). */
gd_status gd_split(gd_tensor *x, int64_t axis, int n, const int64_t *sizes, gd_tensor **out);
/* Views: reshape, permute, transpose, slice, split, expand, squeeze and unsqueeze make no
 * copy; the planner aliases their outputs (and copies only in front of a kernel that
 * needs its input contiguous). */
gd_tensor *gd_reshape(gd_tensor *x, int ndim, const int64_t *shape); /* one dim may be -1 */
gd_tensor *gd_permute(gd_tensor *x, int ndim, const int64_t *perm);
gd_tensor *gd_transpose(gd_tensor *x, int64_t dim0, int64_t dim1);
/* x broadcast to shape (NumPy rules: x's dims align right, size-1 dims repeat). */
gd_tensor *gd_expand(gd_tensor *x, int ndim, const int64_t *shape);
gd_tensor *gd_squeeze(gd_tensor *x, int64_t axis);   /* removes a dim of size 1 */
gd_tensor *gd_unsqueeze(gd_tensor *x, int64_t axis); /* inserts a dim of size 1 before axis */
gd_tensor *gd_contiguous(gd_tensor *x); /* a contiguous copy */

/* transformer pieces. rope: x (B, T, H, D); interleaved pairs (2i, 2i+1) or half-split
 * (i, i + D/2); positions start at `pos`, an i32/i64 scalar tensor (NULL: 0) read when
 * the program runs, so a decoder advances it without recompiling.
 * attention: q (B, H, T, D), k and v (B, Hkv, S, D) with H a multiple of Hkv
 * (grouped-query); scale <= 0 means 1/sqrt(D). kv_len (NULL: S) is an i32/i64 scalar
 * tensor: keys at index >= kv_len are ignored; with causal, query t sits at position
 * kv_len - T + t and sees keys up to it (a decoder's cache of S slots, kv_len filled).
 * cache_write: writes x (B, H, T, D) into the state cache (B, H, S, D) at time `pos`
 * (i32/i64 scalar tensor), in place; returns the cache's new value. */
gd_tensor *gd_rope(gd_tensor *x, double theta, int interleaved, gd_tensor *pos);
gd_tensor *gd_attention(gd_tensor *q, gd_tensor *k, gd_tensor *v, int causal, double scale, gd_tensor *kv_len);
gd_tensor *gd_cache_write(gd_tensor *cache, gd_tensor *x, gd_tensor *pos);

/* images, NCHW. w: (C_out, C_in/groups, kh, kw); bias may be NULL */
gd_tensor *gd_conv2d(gd_tensor *x, gd_tensor *w, gd_tensor *bias, int64_t stride, int64_t padding,
                     int64_t dilation, int64_t groups);
gd_tensor *gd_max_pool2d(gd_tensor *x, int64_t kernel, int64_t stride, int64_t padding);
gd_tensor *gd_avg_pool2d(gd_tensor *x, int64_t kernel, int64_t stride, int64_t padding);
/* Zeroes elements with probability p and scales the rest by 1/(1-p). The mask comes from a
 * counter-based generator keyed by seed and by the value of `step` (an i64 scalar state the
 * caller advances, or NULL for step 0), so it is identical on every backend. */
gd_tensor *gd_dropout(gd_tensor *x, double p, uint64_t seed, gd_tensor *step);

/* creation */
gd_tensor *gd_fill(gd_graph *g, gd_dtype dt, int ndim, const int64_t *shape, double value);
gd_tensor *gd_zeros(gd_graph *g, gd_dtype dt, int ndim, const int64_t *shape);
gd_tensor *gd_ones(gd_graph *g, gd_dtype dt, int ndim, const int64_t *shape);
gd_tensor *gd_arange(gd_graph *g, gd_dtype dt, int64_t n, double start, double step);
gd_tensor *gd_rand_uniform(gd_graph *g, gd_dtype dt, int ndim, const int64_t *shape, double lo, double hi, uint64_t seed);
gd_tensor *gd_rand_normal(gd_graph *g, gd_dtype dt, int ndim, const int64_t *shape, double mean, double std, uint64_t seed);
/* Kaiming-normal (std = sqrt(2 / fan_in)) and Xavier-uniform (bound sqrt(6/(fan_in+fan_out)))
 * where fan_in/fan_out come from the shape as for a linear (out, in) or conv (out, in, kh, kw). */
gd_tensor *gd_init_kaiming(gd_graph *g, gd_dtype dt, int ndim, const int64_t *shape, uint64_t seed);
gd_tensor *gd_init_xavier(gd_graph *g, gd_dtype dt, int ndim, const int64_t *shape, uint64_t seed);

/* Copies src into the persistent tensor dst (a parameter or state) when the program runs
 * with GD_COMPILE_UPDATES. Returns dst's new value. */
gd_tensor *gd_assign(gd_tensor *dst, gd_tensor *src);

/* ---- autodiff ------------------------------------------------------------------------ */

/* Appends the backward graph of scalar `loss` with respect to every parameter (and every
 * input it is differentiable in). Gradients accumulate where a tensor is used twice. */
gd_status gd_backward(gd_graph *g, gd_tensor *loss);
/* d loss / d t after gd_backward, or NULL when loss does not depend on t. */
gd_tensor *gd_grad(gd_graph *g, gd_tensor *t);
/* The same before its last exact widening: for an f32 t used through a cast to bf16 or f16
 * (mixed precision), the half gradient that gd_grad's is the f32 cast of — the same
 * numbers, so an update or a norm reading it needs no f32 copy. Otherwise gd_grad's. */
gd_tensor *gd_grad_narrow(gd_graph *g, gd_tensor *t);
/* Makes `grad` what gd_grad(g, t) answers from now on — and so what optimizers added
 * later update t with (gradient accumulation, scaling, clipping of one's own). grad must
 * have t's shape and dtype. */
gd_status gd_set_grad(gd_graph *g, gd_tensor *t, gd_tensor *grad);

/* ---- optimizers: append in-place updates of every parameter ------------------------- */

typedef struct gd_sgd_config {
    double lr, momentum, weight_decay;
    int nesterov;
    double clip_norm;     /* > 0: clip gradients by global norm first */
} gd_sgd_config;
typedef struct gd_adamw_config {
    double lr, beta1, beta2, eps, weight_decay; /* zeros take defaults 1e-3, .9, .999, 1e-8, 0 */
    double clip_norm;
    /* Update only these parameters (and keep moments for them alone), NULL: every one with
     * a gradient. Clipping then sees only their gradients. (A rank of a sharded optimizer.) */
    int n_params;
    gd_tensor *const *params;
    /* When not NULL, receives the new value of each parameter updated (the outputs of the
     * update nodes), in parameter order and NULL-terminated: room for
     * gd_graph_param_count(g) + 1 entries. As targets of a program compiled without
     * GD_COMPILE_UPDATES they run the updates (and what they read) and none of the graph's
     * other updates: a trainer's gradient accumulation stays out of its update program. */
    gd_tensor **updated;
    /* The gradients' global norm when the caller has it (an f32 scalar, e.g. for its log):
     * clipping then reads it rather than computing it again. NULL: computed here. */
    gd_tensor *grad_norm;
} gd_adamw_config;
gd_status gd_optimizer_sgd(gd_graph *g, const gd_sgd_config *cfg);
gd_status gd_optimizer_adamw(gd_graph *g, const gd_adamw_config *cfg);
/* The learning rate is a state: change it between runs (schedules) with this. */
gd_status gd_optimizer_set_lr(gd_graph *g, double lr);

/* ---- programs -------------------------------------------------------------------------- */

enum { GD_COMPILE_UPDATES = 1 }; /* also run every in-place update (optimizer steps, assign) */

/* Plans the nodes needed for the targets (and updates, with the flag): graph passes,
 * placement on backends, memory plan. Run it as often as needed: nothing is planned or
 * allocated while it runs. Every program of a graph shares the graph's activation memory
 * (one arena per backend), so a target read after the graph ran another program is
 * refused; read results before running the next program. */
gd_program *gd_compile(gd_graph *g, int n_targets, gd_tensor *const *targets, int flags);
gd_status gd_program_run(gd_program *p);
void gd_program_free(gd_program *p);
/* Calls fn(user, target) during every later gd_program_run of p, once per run, as soon as
 * the value of `target` (one of p's targets) is final: after the last action that writes
 * it, while the rest of the run waits. In the callback the target is readable
 * (gd_tensor_read) as after the run; fn must not run a program of the graph. Callbacks fire
 * in the order of the actions that finish their targets (two on one action: in the order
 * they were added); a target that no action of p writes (a parameter, a state) fires at
 * the end of the run. On a backend that runs
 * many nodes as one segment (an executor such as CUDA graphs), a segment ends at each
 * action a callback waits for, so callbacks fire on time there too. On an asynchronous
 * device "final" is in the device's order: work queued after the callback sees the value,
 * and a read waits for it. A status other than GD_OK from fn fails the run with it (fn
 * sets the message). */
typedef gd_status (*gd_ready_fn)(void *user, gd_tensor *target);
gd_status gd_program_on_ready(gd_program *p, gd_tensor *target, gd_ready_fn fn, void *user);
/* The same for a set of n targets: fn fires once a run, when the last of them is final
 * (and gets that one); all n are readable in it. */
gd_status gd_program_on_ready_all(gd_program *p, int n, gd_tensor *const *targets, gd_ready_fn fn, void *user);
/* Bytes of activation memory this program plans on backend `name` (its peak), and the
 * graph's arena there (the most any of its programs needs). 0 for unknown names. */
size_t gd_program_planned_bytes(const gd_program *p, const char *backend);
size_t gd_graph_arena_bytes(const gd_graph *g, const char *backend);
/* One line per node: op, shapes, backend it runs on, copies inserted. */
gd_status gd_program_describe(const gd_program *p, void (*line)(void *user, const char *s), void *user);

/* ---- profiling ------------------------------------------------------------------------- */

/* Records a trace of everything ctx does — compile phases, program runs, copies between
 * backends, waits for devices, each node's work on its backend (from the backend's
 * profiler module, or timed by the host for host backends), memory in use, and what the
 * application marks below — and writes it to `path` as a Chrome trace-event JSON file
 * (Perfetto, chrome://tracing) when gd_profile_stop or gd_profile_flush is called or the
 * context is freed. GRADUS_PROFILE=FILE starts one when a context is created ("%p" in
 * FILE becomes the process id). docs/profiling.md says what a trace shows.
 *
 * Start fails (GD_ERR_IO naming the file) when the file cannot be created, and INVALID
 * when a profile is already recording. Writing fails with GD_ERR_IO (message names the
 * file and why); nothing else the context does is affected, so a caller reports it and
 * carries on. Stop ends the profile even when the file could not be written. */
gd_status gd_profile_start(gd_ctx *ctx, const char *path);
gd_status gd_profile_stop(gd_ctx *ctx);
/* Writes the trace so far (waiting for devices to finish what was launched) and keeps
 * recording. */
gd_status gd_profile_flush(gd_ctx *ctx);
/* 1 while ctx records a profile; the file it will be written to (NULL when not). */
int gd_profile_active(const gd_ctx *ctx);
const char *gd_profile_path(const gd_ctx *ctx);
/* A span of the application's own ("load batch", "train step"): begin/end pairs nest like
 * parentheses, on the calling thread's track. Free when not profiling. */
void gd_profile_begin(gd_ctx *ctx, const char *name);
void gd_profile_end(gd_ctx *ctx);
/* A sample of counter `name` ("examples/s", "tokens/s") at the current time. */
void gd_profile_counter(gd_ctx *ctx, const char *name, double value);

/* ---- bridges: one op on buffers the caller owns ---------------------------------------- */

/* For a framework bridge (bridges/tensorflow) that keeps tensors in a backend's memory
 * itself. The types are those of gradus_plugin.h, which a bridge includes too. */
struct gdp_device;
struct gdp_tensor;

/* The device module of backend `name` (NULL when its memory is host memory), the instance
 * pointer every function of the module takes, and the stream gradus runs that backend's
 * work on (NULL: its implicit one). Allocation through it never falls back: a bridge
 * allocates, copies and orders its work with these, and nothing else. */
gd_status gd_backend_device(gd_ctx *ctx, const char *name, const struct gdp_device **device, void **instance,
                            void **stream);

/* Runs op once on tensors in backend `name`'s memory: inputs any view, outputs contiguous
 * (an output whose data is an input's is updated in place), on `stream` (NULL: the
 * backend's own). The node is checked as gd_op checks one (attributes, shape rule; the
 * outputs must be what the op makes of the inputs), then runs as the staircase says: the
 * backend's kernel when one takes the node (*on_backend = 1), else the reference on host
 * copies of the operands, copied in and out on `stream` (*on_backend = 0). In strict mode
 * the fallback is GD_ERR_STRICT instead. on_backend may be NULL. Allocates per call. */
gd_status gd_backend_run_op(gd_ctx *ctx, const char *backend, const char *op, int n_in,
                            const struct gdp_tensor *const *in, int n_out, const struct gdp_tensor *const *out,
                            int n_attr, const gd_attr *attrs, void *stream, int *on_backend);

/* How gd_graph_init_params fills a parameter. */
typedef enum gd_init {
    GD_INIT_NONE = 0,   /* left as written (zero until then) */
    GD_INIT_ZEROS = 1,
    GD_INIT_ONES = 2,
    GD_INIT_KAIMING = 3, /* normal, std sqrt(2 / fan_in) */
    GD_INIT_XAVIER = 4,  /* uniform, bound sqrt(6 / (fan_in + fan_out)) */
    GD_INIT_NORMAL = 5   /* normal, mean 0, the std given */
} gd_init;
gd_status gd_param_set_init(gd_tensor *param, gd_init kind, double std);

/* Fills every parameter from its initializer (gd_param_set_init; the gd_nn_* layers set
 * theirs) with a counter-based generator: identical on every backend for one seed. */
gd_status gd_graph_init_params(gd_graph *g, uint64_t seed);

/* ---- nn: layers that create their parameters ------------------------------------------ */

/* name prefixes its parameters: "<name>.weight", "<name>.bias". */
gd_tensor *gd_nn_linear(gd_tensor *x, const char *name, int64_t out_features, int bias);
gd_tensor *gd_nn_conv2d(gd_tensor *x, const char *name, int64_t out_channels, int64_t kernel,
                        int64_t stride, int64_t padding, int bias);

#ifdef __cplusplus
}
#endif
#endif /* GRADUS_H */
