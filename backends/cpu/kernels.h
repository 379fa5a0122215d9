/* kernels.h — what the kernel families of the fast CPU backend share.
 *
 * The backend is a plugin like any other: it sees nodes only through gradus_plugin.h (and
 * gradus_semantics.h: dtypes, half conversions) and registers one kernel per (op, dtype),
 * or per mixed-precision signature, through the host. Each family file (k_*.c) exports
 * gcpu_register_<family>, called by plugin.c. Kernels run on host memory (the backend has
 * no device module), are threaded over the pool with static chunking, and keep every
 * result independent of the thread count: work is split by output element, and sums
 * across chunks use partitions fixed by the shape, combined in a fixed order.
 *
 * Memory: scratch whose size follows from the node (partial sums, sort arrays, f32 copies
 * of half operands, packed weights) is the node's workspace, declared with the kernel and
 * planned by the host; per-thread buffers whose use depends on the thread count (GEMM
 * packing, im2col columns) are the instance's scratch (threadpool.h), grown once. Nothing
 * is allocated by a warm launch.
 */
#ifndef GCPU_KERNELS_H
#define GCPU_KERNELS_H

#include "gradus_plugin.h"
#include "threadpool.h"

#include <stdint.h>

/* What register_kernels hands each family: the host, and the instance the kernels are
 * registered for (plugin.c runs every launch of that instance under the pool's lock). */
typedef struct gcpu_regctx gcpu_regctx;

/* One kernel: supports and workspace may be NULL (every node of the key; no workspace),
 * attrs is the NULL-terminated list of attributes supports() looks at, or NULL; signature
 * NULL keys the kernel on dtype, else on that mixed-precision form. */
typedef struct gcpu_kdef {
    const char *op;
    int32_t dtype;
    uint32_t flags; /* GDP_KERNEL_* */
    gdp_launch_fn launch;
    gdp_supports_fn supports;
    gdp_workspace_fn workspace;
    const char *const *attrs;
    const char *signature;
} gcpu_kdef;

gdp_status gcpu_register(gcpu_regctx *r, const gcpu_kdef *k, gdp_err *err);
/* Short forms: no flags, or GDP_KERNEL_* flags (a kernel that reads strided inputs). */
gdp_status gcpu_reg(gcpu_regctx *r, const char *op, int32_t dtype, gdp_launch_fn launch, gdp_supports_fn supports,
                    const char *const *attrs, gdp_err *err);
gdp_status gcpu_reg_flags(gcpu_regctx *r, const char *op, int32_t dtype, uint32_t flags, gdp_launch_fn launch,
                          gdp_supports_fn supports, const char *const *attrs, gdp_err *err);

gdp_status gcpu_register_matmul(gcpu_regctx *r, gdp_err *err);
gdp_status gcpu_register_conv(gcpu_regctx *r, gdp_err *err);
gdp_status gcpu_register_pool(gcpu_regctx *r, gdp_err *err);
gdp_status gcpu_register_elementwise(gcpu_regctx *r, gdp_err *err);
gdp_status gcpu_register_reduce(gcpu_regctx *r, gdp_err *err);
gdp_status gcpu_register_softmax(gcpu_regctx *r, gdp_err *err);
gdp_status gcpu_register_optim(gcpu_regctx *r, gdp_err *err);
gdp_status gcpu_register_layout(gcpu_regctx *r, gdp_err *err);
gdp_status gcpu_register_norm(gcpu_regctx *r, gdp_err *err);
gdp_status gcpu_register_attention(gcpu_regctx *r, gdp_err *err);
gdp_status gcpu_register_index(gcpu_regctx *r, gdp_err *err);
gdp_status gcpu_register_random(gcpu_regctx *r, gdp_err *err);
gdp_status gcpu_register_unary(gcpu_regctx *r, gdp_err *err);
gdp_status gcpu_register_activation(gcpu_regctx *r, gdp_err *err);
gdp_status gcpu_register_quant(gcpu_regctx *r, gdp_err *err);
/* A mixed-precision form of op, keyed by its signature ("bf16,bf16->f32"): registered
 * only when the registration asks for mixed forms (else GDP_OK, nothing done). */
gdp_status gcpu_reg_mixed(gcpu_regctx *r, const char *op, const char *signature, uint32_t flags, gdp_launch_fn launch,
                          gdp_supports_fn supports, gdp_workspace_fn workspace, gdp_err *err);

/* Every kernel of the backend for instance `backend` (from gradus_cpu_plugin_init), the
 * mixed-precision forms too when `mixed`: what the plugin's register_kernels does, open to
 * tests that register into a host of their own. */
gdp_status gcpu_register_kernels(void *backend, const gdp_host *host, int mixed, gdp_err *err);

/* f16 and bf16 through f32 (k_half.c), as the reference does them: the node's f16/bf16
 * operands are widened into f32 copies in the node's workspace (strided inputs too: the
 * copies are contiguous), the f32 kernel runs on an f32 copy of the node, and its f16/bf16
 * outputs are rounded back to nearest even (an output updated in place lives in its
 * input's f32 copy meanwhile). Other operands (indices, f32) pass as they are, strides
 * included. The f32 kernel gets the rest of the workspace, laid out by its own workspace
 * function for the f32 node. supports: the f32 kernel's answer for the f32 node (1 when
 * NULL). */
gdp_status gcpu_half_launch(gdp_launch_fn f32, void *be, const gdp_node *n, void *stream, gdp_err *err);
int gcpu_half_supports(gdp_supports_fn f32, void *be, const gdp_node *n);
size_t gcpu_half_workspace(gdp_workspace_fn f32, void *be, const gdp_node *n);

/* Defines launch##_half, launch##_half_ok and launch##_half_ws: the f16/bf16 kernel made
 * of an f32 one with its supports and workspace functions (either may be NULL). */
#define GCPU_HALF_OF(launch, supports, workspace)                                               \
    static gdp_status launch##_half(void *be_, const gdp_node *n_, void *stream_, gdp_err *err_) \
    {                                                                                           \
        return gcpu_half_launch(launch, be_, n_, stream_, err_);                                \
    }                                                                                           \
    static int launch##_half_ok(void *be_, const gdp_node *n_)                                  \
    {                                                                                           \
        return gcpu_half_supports(supports, be_, n_);                                           \
    }                                                                                           \
    static size_t launch##_half_ws(void *be_, const gdp_node *n_)                               \
    {                                                                                           \
        return gcpu_half_workspace(workspace, be_, n_);                                         \
    }

/* An f32 kernel and the half kernel made of it, as one registration unit. */
typedef struct gcpu_floats {
    gdp_launch_fn f32, half;
    gdp_supports_fn f32_ok, half_ok;
    gdp_workspace_fn f32_ws, half_ws;
} gcpu_floats;
/* For a kernel with a GCPU_HALF_OF above it: an initializer (for tables), and a value. */
#define GCPU_FLOATS_INIT(launch, supports, workspace) \
    {launch, launch##_half, supports, launch##_half_ok, workspace, launch##_half_ws}
#define GCPU_FLOATS(launch, supports, workspace) ((gcpu_floats)GCPU_FLOATS_INIT(launch, supports, workspace))

/* Registers the f32 kernel and, for f16 and bf16, the half kernel, with the same flags. */
gdp_status gcpu_reg_floats(gcpu_regctx *r, const char *op, gcpu_floats k, uint32_t flags, const char *const *attrs,
                           gdp_err *err);

/* The value of an integer scalar input (a position, a length): i32 or i64, element 0. */
static inline int64_t gcpu_index_scalar(const gdp_tensor *t)
{
    return t->dtype == GDP_I32 ? (int64_t)((const int32_t *)t->data)[0] : ((const int64_t *)t->data)[0];
}
/* 1 when t may be such a scalar. */
static inline int gcpu_is_index_scalar(const gdp_tensor *t)
{
    return gdp_is_index(t->dtype) && gdp_numel(t) == 1;
}
/* 1 when t is such a scalar or a vector of n of them (one per batch row: a decoder's batch
 * whose sequences stand at different positions). */
static inline int gcpu_is_index_per_row(const gdp_tensor *t, int64_t n)
{
    return gdp_is_index(t->dtype) && (gdp_numel(t) == 1 || (t->ndim == 1 && t->shape[0] == n));
}
/* Row b's value of such an input. */
static inline int64_t gcpu_index_at(const gdp_tensor *t, int64_t b)
{
    int64_t i = gdp_numel(t) == 1 ? 0 : b * t->stride[0];
    return t->dtype == GDP_I32 ? (int64_t)((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

/* Bytes of a workspace piece of n elements of `size` bytes, rounded up to a cache line
 * (pieces of one workspace are laid out one after the other). */
static inline size_t gcpu_ws_piece(int64_t n, size_t size)
{
    return ((size_t)(n > 0 ? n : 0) * size + 63) & ~(size_t)63;
}

/* 1 when every input and output is f32. */
static inline int gcpu_all_f32(const gdp_node *n)
{
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i]->dtype != GDP_F32) return 0;
    for (int i = 0; i < n->n_out; i++)
        if (n->out[i]->dtype != GDP_F32) return 0;
    return 1;
}

/* Items per chunk below which a parallel_for would lose to its own cost, for cheap
 * per-element work (a few ns an element against a few us to wake a worker). */
#define GCPU_GRAIN_ELEMS 16384

/* n elements of a float tensor of dtype dt (f32, f16 or bf16) from element `at` into f32,
 * and back (f32 rows are copied). */
static inline void gcpu_load_f32(int32_t dt, const void *src, int64_t at, float *dst, int64_t n)
{
    if (dt == GDP_F32) {
        memcpy(dst, (const float *)src + at, sizeof(float) * (size_t)n);
    } else if (dt == GDP_F16) {
        const uint16_t *s = (const uint16_t *)src + at;
        for (int64_t i = 0; i < n; i++) dst[i] = gdp_f16_to_f32(s[i]);
    } else {
        const uint16_t *s = (const uint16_t *)src + at;
        for (int64_t i = 0; i < n; i++) dst[i] = gdp_bf16_to_f32(s[i]);
    }
}
static inline void gcpu_store_f32(int32_t dt, void *dst, int64_t at, const float *src, int64_t n)
{
    if (dt == GDP_F32) {
        memcpy((float *)dst + at, src, sizeof(float) * (size_t)n);
    } else if (dt == GDP_F16) {
        uint16_t *d = (uint16_t *)dst + at;
        for (int64_t i = 0; i < n; i++) d[i] = gdp_f32_to_f16(src[i]);
    } else {
        uint16_t *d = (uint16_t *)dst + at;
        for (int64_t i = 0; i < n; i++) d[i] = gdp_f32_to_bf16(src[i]);
    }
}

#endif
