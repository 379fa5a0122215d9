/* opdef.h — what an op family (src/ops/<family>.c) defines and registers.
 *
 * One op = a name, its inputs/outputs/attributes, a shape rule, an optional gradient rule,
 * a naive reference kernel (the oracle every backend is checked against) and sweep cases.
 * A family file defines a function `void gd_family_<name>(gd_registry *r)` that registers
 * its ops; the build finds those functions by their GD_FAMILY marker line (see
 * CMakeLists.txt), so adding a family is adding a file.
 */
#ifndef GD_OPDEF_H
#define GD_OPDEF_H

#include "gradus.h"
#include "gradus_plugin.h"

#define GD_FAMILY(name) void gd_family_##name(gd_registry *r)

typedef struct gd_registry gd_registry;

typedef struct gd_shape {
    int32_t dtype;
    int32_t ndim;
    int64_t dim[GDP_MAX_DIMS];
} gd_shape;

/* Shape rule: reads in[], attrs; writes out[] (n_out of them). On a mismatch it returns
 * gd_infer_fail(...) with a message naming the operand and the shapes; the core prefixes
 * the op name. */
typedef struct gd_infer {
    const char *op;
    int n_in;
    const gd_shape *in;
    const gdp_attrs *attrs;
    int n_out;
    gd_shape out[GDP_MAX_OUTPUTS];
    char msg[400];
} gd_infer;
typedef int (*gd_infer_fn)(gd_infer *c);
int gd_infer_fail(gd_infer *c, const char *fmt, ...);
/* "f32[2, 3, 4]" into buf. */
const char *gd_shape_str(const gd_shape *s, char *buf, size_t cap);
int64_t gd_shape_numel(const gd_shape *s);
/* NumPy broadcast of a and b into out; 0 on success, else fails c with a message. */
int gd_broadcast(gd_infer *c, const gd_shape *a, const char *a_name, const gd_shape *b, const char *b_name,
                 gd_shape *out);
/* Normalizes a possibly negative axis; -1 (and a message in c) when out of range. */
int gd_axis(gd_infer *c, int64_t axis, int ndim, const char *what);

/* Gradient rule: given the forward node's inputs and outputs and the gradients of its
 * outputs (NULL where an output is unused), builds nodes computing the gradient of each
 * input into din[] (leave NULL for inputs that are not differentiable). Returns GD_OK or
 * a status (the message is already in the context). */
typedef struct gd_grad {
    gd_graph *g;
    int n_in, n_out;
    gd_tensor *const *in;
    gd_tensor *const *out;
    const gdp_attrs *attrs;
    gd_tensor *const *dout;
    gd_tensor **din;
} gd_grad_ctx;
typedef gd_status (*gd_grad_fn)(gd_grad_ctx *c);

/* View rule of an op whose output is a view of its input 0 (reshape, permute, slice,
 * expand): no kernel, no copy; the planner aliases the output. Given the input's strides
 * and offset (elements) and the output's shape, writes the output's strides and offset,
 * or returns -1 when the output cannot be a view of an input laid out like this (a
 * reshape of a transposed tensor): then the planner makes the input contiguous first. */
typedef int (*gd_view_fn)(const gdp_attrs *attrs, const gd_shape *in, const int64_t *in_stride, int64_t in_offset,
                          const gd_shape *out, int64_t *out_stride, int64_t *out_offset);

/* dtype masks */
#define GD_M(dt) (1u << (dt))
#define GD_FLOATS (GD_M(GDP_F32) | GD_M(GDP_F16) | GD_M(GDP_BF16))
#define GD_FLOATS64 (GD_FLOATS | GD_M(GDP_F64))

typedef struct gd_op_def {
    const char *name;
    int min_in, max_in;        /* max_in up to GDP_MAX_INPUTS */
    int n_out;
    /* Allowed attributes, space separated "name:int name:float name:ints"; the builder
     * rejects others, and the sweep rejects kernels constraining attributes not listed. */
    const char *attrs;
    /* Float dtypes the op is defined for (the dtype of its floating operands); the sweep
     * runs every case at each. 0 for ops whose dtypes come from attributes only. */
    unsigned dtypes;
    gd_infer_fn infer;
    gd_grad_fn grad;           /* NULL: not differentiable */
    /* Reference kernel, single-threaded, host memory. Its error messages leave out the op
     * name: the core puts "op: " in front (gd_ref_launch). */
    gdp_launch_fn ref;
    /* Dtypes `ref` handles itself; others (f16/bf16) are converted through f32 by the core
     * with round-to-nearest-even. 0 means f32|f64|all integer types. */
    unsigned ref_dtypes;
    /* Sweep cases, NULL-terminated. Format: "<inputs> [| <attrs>]".
     *   inputs: f[2,3] floats of the case dtype in [-1, 1]; p[..] in [0.5, 2]; n[..] normal;
     *           f32[..], f16[..], bf16[..], f64[..] a fixed float dtype; i32[4]<10, i64[4]<10
     *           integers in [0, 10); i64[4]<-1:5 in [-1, 5); bool[..]; u8[..]; i8[..]
     *   attrs:  axis=1 eps=1e-5 axes=[0,2] dtype=f16 (dtype names become ints)
     * A case starting with "!" is excluded from the float64 gradient check (non-smooth). */
    const char *const *cases;
    /* When `updates` is set: output k updates input inplace[k] in place (optimizer
     * steps, assign); -1: a new buffer. Ops with an in-place output are updates: they run only in programs compiled
     * with GD_COMPILE_UPDATES, in graph order after every reader of the old value. */
    int inplace[GDP_MAX_OUTPUTS];
    /* Non-zero for ops with in-place outputs (read together with `inplace`, so that a
     * zero-initialized `inplace` in an ordinary op means nothing). */
    int updates;
    /* 1 + the input whose storage output 0 may take when nothing reads that input after
     * the node and the two have the same size (the logits' gradient over the logits): the
     * planner then gives both one slot. 0: none. Every kernel of the op, on every backend,
     * must then be right with the output at that input's address (an element read before it
     * is written); the sweep runs such ops that way too (GD_VAR_SHARED). */
    int reuse;
    /* Sweep tolerance: normalized MSE allowed for f32; 0 means exact (bitwise) compare.
     * f16/bf16 and the backward pass scale it (see src/core/sweep.c). */
    double tol;
    const char *doc;           /* one line for docs/ops.md */
    /* Non-NULL for view ops (see gd_view_fn); `ref` then exists only as the sweep's
     * oracle of what the view must read. */
    gd_view_fn view;
    /* The reference kernel reads strided inputs itself; otherwise the planner makes its
     * inputs contiguous first (docs/ops.md shows which). */
    int ref_strided;
    /* The output dtype is an attribute (cast): outputs do not count in the uniform key. */
    int any_out_dtype;
    /* Over a parameter, the node is that parameter in another form (cast: a master weight
     * in the compute dtype). A training program runs all such nodes first, one after the
     * other (compile.c), where a backend may batch them. */
    int param_copy;
    /* Mixed-precision forms, NULL-terminated signatures "bf16,bf16->f32" (every operand,
     * inputs then outputs), each a kernel key and a sweep row of its own, with its cases
     * (explicit dtypes) in mixed_cases. */
    const char *const *mixed;
    const char *const *mixed_cases;
    /* Scratch the reference kernel needs for a node (bytes), so that it allocates nothing
     * while a program runs: the kernel finds it at node->workspace (NULL: none needed). */
    size_t (*ref_workspace)(const gdp_node *node);
    /* What a node of the op costs, from its shapes: bytes it must move to and from memory
     * and floating-point operations (a multiply-add counts two). Profile summaries turn
     * them into achieved GB/s and FLOP/s (src/ops/cost.h has the conventions). NULL: not
     * declared. */
    void (*cost)(const gdp_node *node, double *bytes, double *flops);
} gd_op_def;

/* What the core needs from the ops without naming any: installed by the op families. */
typedef struct gd_core_hooks {
    /* autodiff: sums two gradient contributions; makes the ones that seed the backward */
    gd_tensor *(*accumulate)(gd_tensor *a, gd_tensor *b);
    gd_tensor *(*ones_like)(gd_tensor *x);
    /* autodiff, optional: whether a contribution is partial (zero outside a region of its
     * tensor, like a slice's gradient), and acc (NULL: nothing yet) plus n >= 2 partial
     * contributions that came one after another, in that order. Autodiff holds back each
     * run of partial contributions and adds it at once, so that parts tiling a tensor can
     * become one concatenation instead of zero-filled scatters and adds. The result must
     * equal folding the parts onto acc with accumulate, up to the sign of zeros. */
    int (*partial)(const gd_tensor *t);
    gd_tensor *(*add_partials)(gd_tensor *acc, int n, gd_tensor *const *parts);
    /* initializers: a tensor holding a parameter's first value (enum gd_init_kind) */
    gd_tensor *(*initializer)(gd_graph *g, int kind, double std, gd_dtype dt, int ndim, const int64_t *shape,
                              uint64_t seed);
    /* the op the planner inserts to make a strided value contiguous */
    const char *contiguous_op;
    /* optional: the narrower value t is an exact widening of (f32 cast from bf16 or f16),
     * or NULL (gd_grad_narrow) */
    gd_tensor *(*widened_from)(const gd_tensor *t);
} gd_core_hooks;
gd_core_hooks *gd_registry_hooks(gd_registry *r);

/* Registers a definition (copied). Fails on a duplicate name. */
gd_status gd_register_op(gd_registry *r, const gd_op_def *def);
const gd_op_def *gd_registry_find(const gd_registry *r, const char *name);
int gd_registry_count(const gd_registry *r);
const gd_op_def *gd_registry_get(const gd_registry *r, int i);

/* Helpers for builders and gradient rules. */
gd_tensor *gd_op1(gd_tensor *x, const char *op, int n_attr, const gd_attr *attrs);
gd_tensor *gd_op2(gd_tensor *a, gd_tensor *b, const char *op, int n_attr, const gd_attr *attrs);
/* Records a failure message in the graph's context and returns NULL (for builders). */
gd_tensor *gd_fail_null(gd_graph *g, gd_status s, const char *fmt, ...);
gd_status gd_fail(gd_ctx *ctx, gd_status s, const char *fmt, ...);
/* The shape of a tensor as a gd_shape. */
gd_shape gd_tensor_shape(const gd_tensor *t);
/* Sum of grad over the axes along which `like` was broadcast, reshaped to like's shape. */
gd_tensor *gd_sum_to(gd_tensor *grad, const gd_tensor *like);

/* Reference-kernel helpers: element i (in row-major order of the shape, whatever the
 * strides) of a tensor as double, and storing a double with the rounding of the tensor's
 * dtype. Slow, generic, stride-correct; fine for an oracle. */
double gd_ref_load(const gdp_tensor *t, int64_t i);
void gd_ref_store(const gdp_tensor *t, int64_t i, double v);
/* The same at an offset in elements (for kernels that walk strides themselves). */
double gd_ref_load_at(const gdp_tensor *t, int64_t off);
void gd_ref_store_at(const gdp_tensor *t, int64_t off, double v);
/* Row-major strides of a shape, in elements. */
void gd_strides(int ndim, const int64_t *shape, int64_t *strides);


#endif
