/* elementwise.cu — the elementwise family (src/ops/elementwise.c) and the activations
 * (src/ops/activation.c): unary ops, binary ops with NumPy broadcasting, where, and the
 * backward ops of both; swiglu and its backward (contiguous operands only).
 *
 * Like the reference, every kernel computes in double and rounds once to the output
 * dtype (through f32 for f16/bf16, as the core runs the reference), so results match the
 * oracle bit for bit almost everywhere. These kernels are bound by memory bandwidth, so
 * double arithmetic costs little; a runtime op code (uniform across a launch) keeps the
 * template instantiations to one per dtype and arity.
 *
 * Contiguous operands (unary ops, backward ops, binary ops without broadcasting) go through
 * 16-byte vector loads and stores when every pointer is aligned: memory-bound kernels need
 * that to reach the H200's bandwidth. i32/i64 add, sub, mul, minimum, maximum, neg and abs
 * compute in 64-bit integers and wrap, as the reference does.
 *
 * Every kernel here registers GDP_KERNEL_STRIDED: an input may be any view (a transpose,
 * a slice, an expand with stride 0). Each input is read through its own strides, the way
 * broadcasting already was, so a view costs an index computation instead of a copy.
 */
#include "cu_act.h"
#include "cu_vec.h"
#include "cuda_internal.h"

#include <math.h>
#include <string.h>

/* ---- op codes ------------------------------------------------------------------------------ */

enum {
    U_NEG, U_ABS, U_EXP, U_LOG, U_SQRT, U_RSQRT, U_POW, U_CLAMP, U_SCALE,
    U_RELU, U_GELU, U_GELU_TANH, U_SILU, U_SIGMOID, U_TANH
};
/* (dy, v) -> dx */
enum { G_ABS, G_CLAMP, G_RELU, G_GELU, G_GELU_TANH, G_SILU, G_SIGMOID, G_TANH };
enum { B_ADD, B_SUB, B_MUL, B_DIV, B_MIN, B_MAX };

#define INV_SQRT_2PI 0.39894228040143267794

static __device__ __forceinline__ double unary_f(int op, double x, double k0, double k1)
{
    switch (op) {
    case U_NEG: return -x;
    case U_ABS: return fabs(x);
    case U_EXP: return exp(x);
    case U_LOG: return log(x);
    case U_SQRT: return sqrt(x);
    case U_RSQRT: return 1.0 / sqrt(x);
    case U_POW: return pow(x, k0);
    case U_CLAMP: { double v = x < k0 ? k0 : x; return v > k1 ? k1 : v; }
    case U_SCALE: return x * k0 + k1;
    case U_RELU: return x < 0 ? 0.0 : x;
    case U_GELU: return cu_gelu_d(x);
    case U_GELU_TANH: return cu_gelu_tanh_d(x);
    case U_SILU: return cu_silu_d(x);
    case U_SIGMOID: return cu_sigmoid_d(x);
    case U_TANH: return tanh(x);
    default: return x;
    }
}

/* dx = dy * f'(v); abs and clamp as the reference writes them (sign(0) = 0; bounds in). */
static __device__ __forceinline__ double grad_f(int op, double g, double v, double k0, double k1)
{
    switch (op) {
    case G_ABS: return v > 0 ? g : v < 0 ? -g : 0.0;
    case G_CLAMP: return v >= k0 && v <= k1 ? g : 0.0;
    case G_RELU: return g * (v > 0 ? 1.0 : 0.0);
    case G_GELU: return g * (0.5 * (1.0 + erf(v * CU_SQRT1_2)) + v * INV_SQRT_2PI * exp(-0.5 * v * v));
    case G_GELU_TANH: {
        double t = tanh(CU_SQRT_2_OVER_PI * (v + CU_GELU_C * v * v * v));
        return g * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * CU_SQRT_2_OVER_PI * (1.0 + 3.0 * CU_GELU_C * v * v));
    }
    case G_SILU: { double s = cu_sigmoid_d(v); return g * (s * (1.0 + v * (1.0 - s))); }
    case G_SIGMOID: return g * (v * (1.0 - v));
    case G_TANH: return g * (1.0 - v * v);
    default: return g;
    }
}

/* The transcendental activations for f16/bf16 results, in float: their error (a few float
 * ulps) is some 2^-13 of an f16 ulp, so a result rounds as the double one does except within
 * that distance of a rounding boundary; the double forms cost more than the memory traffic
 * of a training step's activations (erf, tanh and exp in FP64 are long polynomials). */
static __device__ __forceinline__ bool in_float(int op, bool grad)
{
    return grad ? op == G_GELU || op == G_GELU_TANH || op == G_SILU
                : op == U_GELU || op == U_GELU_TANH || op == U_SILU || op == U_SIGMOID || op == U_TANH || op == U_EXP;
}
static __device__ __forceinline__ float unary_ff(int op, float x)
{
    switch (op) {
    case U_EXP: return expf(x);
    case U_GELU: return 0.5f * x * (1.0f + erff(x * (float)CU_SQRT1_2));
    case U_GELU_TANH: return 0.5f * x * (1.0f + tanhf((float)CU_SQRT_2_OVER_PI * (x + (float)CU_GELU_C * x * x * x)));
    case U_SILU: return x / (1.0f + expf(-x));
    case U_SIGMOID: return 1.0f / (1.0f + expf(-x));
    default: return tanhf(x); /* U_TANH */
    }
}
static __device__ __forceinline__ float grad_ff(int op, float g, float v)
{
    switch (op) {
    case G_GELU: return g * (0.5f * (1.0f + erff(v * (float)CU_SQRT1_2)) + v * (float)INV_SQRT_2PI * expf(-0.5f * v * v));
    case G_GELU_TANH: {
        const float k = (float)CU_SQRT_2_OVER_PI, c = (float)CU_GELU_C, t = tanhf(k * (v + c * v * v * v));
        return g * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * k * (1.0f + 3.0f * c * v * v));
    }
    default: { /* G_SILU */
        const float sg = 1.0f / (1.0f + expf(-v));
        return g * (sg * (1.0f + v * (1.0f - sg)));
    }
    }
}

/* NaN in either operand gives NaN; ties pick a (the reference's pick_a_min/max). */
static __device__ __forceinline__ int pick_a(int op, double a, double b)
{
    return op == B_MIN ? (a <= b || a != a) : (a >= b || a != a);
}

static __device__ __forceinline__ double binary_f(int op, double a, double b)
{
    switch (op) {
    case B_ADD: return a + b;
    case B_SUB: return a - b;
    case B_MUL: return a * b;
    case B_DIV: return a / b;
    default: return pick_a(op, a, b) ? a : b;
    }
}

/* ---- broadcasting -------------------------------------------------------------------------- */

/* Up to 3 inputs right-aligned to the output, each read through its own element strides
 * (0 along broadcast dims). `full[k]` marks an input laid out like the output (same element
 * count, contiguous): its offset is the output index. */
typedef struct bcast {
    int ndim, n;
    int full[3];
    int64_t shape[GDP_MAX_DIMS];
    int64_t stride[3][GDP_MAX_DIMS];
} bcast;

static void bcast_init(bcast *b, const gdp_tensor *out, int n, const gdp_tensor *const *in)
{
    memset(b, 0, sizeof *b);
    b->ndim = out->ndim;
    b->n = n;
    for (int d = 0; d < out->ndim; d++) b->shape[d] = out->shape[d];
    for (int k = 0; k < n; k++) {
        for (int d = out->ndim - 1, e = in[k]->ndim - 1; d >= 0; d--, e--) {
            int64_t dim = e >= 0 ? in[k]->shape[e] : 1;
            b->stride[k][d] = dim == 1 ? 0 : in[k]->stride[e];
        }
        b->full[k] = gdp_numel(in[k]) == gdp_numel(out) && gdp_is_contiguous(in[k]);
    }
}

static __device__ __forceinline__ void bcast_offsets(const bcast &b, int64_t i, int64_t *off)
{
    for (int k = 0; k < b.n; k++) off[k] = b.full[k] ? i : 0;
    int need = 0;
    for (int k = 0; k < b.n; k++) need |= !b.full[k];
    if (!need) return;
    int64_t rest = i;
    for (int d = b.ndim - 1; d >= 0; d--) {
        int64_t c = rest % b.shape[d];
        rest /= b.shape[d];
        for (int k = 0; k < b.n; k++)
            if (!b.full[k]) off[k] += c * b.stride[k][d];
    }
}

/* ---- kernels ---------------------------------------------------------------------------------- */

template <typename T>
__global__ void unary_kernel(const T *x, T *y, int64_t n, int op, double k0, double k1)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        cu_std(y, i, unary_f(op, (double)cu_ld(x, i), k0, k1));
}

template <typename T>
__global__ void grad_kernel(const T *dy, const T *v, T *dx, int64_t n, int op, double k0, double k1)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        cu_std(dx, i, grad_f(op, (double)cu_ld(dy, i), (double)cu_ld(v, i), k0, k1));
}

/* The same through strides: any input that is not laid out like the output. */
template <typename T>
__global__ void unary_strided_kernel(const T *x, T *y, int64_t n, int op, double k0, double k1, bcast bc)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        bcast_offsets(bc, i, off);
        cu_std(y, i, unary_f(op, (double)cu_ld(x, off[0]), k0, k1));
    }
}

template <typename T>
__global__ void grad_strided_kernel(const T *dy, const T *v, T *dx, int64_t n, int op, double k0, double k1, bcast bc)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        bcast_offsets(bc, i, off);
        cu_std(dx, i, grad_f(op, (double)cu_ld(dy, off[0]), (double)cu_ld(v, off[1]), k0, k1));
    }
}

template <typename T>
__global__ void binary_kernel(const T *a, const T *b, T *y, int64_t n, int op, bcast bc)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        bcast_offsets(bc, i, off);
        cu_std(y, i, binary_f(op, (double)cu_ld(a, off[0]), (double)cu_ld(b, off[1])));
    }
}

// (dy, a, b) -> (da, db), all of dy's shape; a and b broadcast to it
template <typename T>
__global__ void minmax_grad_kernel(const T *dy, const T *a, const T *b, T *da, T *db, int64_t n, int op, bcast bc)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        bcast_offsets(bc, i, off);
        double g = (double)cu_ld(dy, off[0]);
        int to_a = pick_a(op, (double)cu_ld(a, off[1]), (double)cu_ld(b, off[2]));
        cu_std(da, i, to_a ? g : 0.0);
        cu_std(db, i, to_a ? 0.0 : g);
    }
}

/* The same three on 16-byte vectors: element i of every operand at the same offset, all
 * pointers 16-byte aligned; the n % N tail elements are done one by one. */
template <typename T>
__global__ void unary_vec_kernel(const T *x, T *y, int64_t n, int op, double k0, double k1)
{
    constexpr int N = cu_vec<T>::N;
    const int64_t nv = n / N, stride = (int64_t)gridDim.x * blockDim.x;
    const bool fl = sizeof(T) == 2 && in_float(op, false);
    for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < nv; v += stride) {
        float a[N];
        cu_ld16(x, v * N, a);
        if (fl) {
#pragma unroll
            for (int k = 0; k < N; k++) a[k] = unary_ff(op, a[k]);
            cu_st16(y, v * N, a);
            continue;
        }
        double r[N];
#pragma unroll
        for (int k = 0; k < N; k++) r[k] = unary_f(op, (double)a[k], k0, k1);
        cu_std16(y, v * N, r);
    }
    for (int64_t i = nv * N + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride)
        cu_std(y, i, unary_f(op, (double)cu_ld(x, i), k0, k1));
}

template <typename T>
__global__ void grad_vec_kernel(const T *dy, const T *v_in, T *dx, int64_t n, int op, double k0, double k1)
{
    constexpr int N = cu_vec<T>::N;
    const int64_t nv = n / N, stride = (int64_t)gridDim.x * blockDim.x;
    const bool fl = sizeof(T) == 2 && in_float(op, true);
    for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < nv; v += stride) {
        float g[N], a[N];
        cu_ld16(dy, v * N, g);
        cu_ld16(v_in, v * N, a);
        if (fl) {
#pragma unroll
            for (int k = 0; k < N; k++) g[k] = grad_ff(op, g[k], a[k]);
            cu_st16(dx, v * N, g);
            continue;
        }
        double r[N];
#pragma unroll
        for (int k = 0; k < N; k++) r[k] = grad_f(op, (double)g[k], (double)a[k], k0, k1);
        cu_std16(dx, v * N, r);
    }
    for (int64_t i = nv * N + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride)
        cu_std(dx, i, grad_f(op, (double)cu_ld(dy, i), (double)cu_ld(v_in, i), k0, k1));
}

template <typename T>
__global__ void binary_vec_kernel(const T *a, const T *b, T *y, int64_t n, int op)
{
    constexpr int N = cu_vec<T>::N;
    const int64_t nv = n / N, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < nv; v += stride) {
        float fa[N], fb[N];
        double r[N];
        cu_ld16(a, v * N, fa);
        cu_ld16(b, v * N, fb);
#pragma unroll
        for (int k = 0; k < N; k++) r[k] = binary_f(op, (double)fa[k], (double)fb[k]);
        cu_std16(y, v * N, r);
    }
    for (int64_t i = nv * N + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride)
        cu_std(y, i, binary_f(op, (double)cu_ld(a, i), (double)cu_ld(b, i)));
}

/* One operand a single element (a scalar, or any shape of one element broadcast: the
 * clipping factor every gradient is multiplied by), the other laid out like y: vectors. */
template <typename T>
__global__ void binary_scalar_vec_kernel(const T *x, const T *sc, T *y, int64_t n, int op, int scalar_first)
{
    constexpr int N = cu_vec<T>::N;
    const double c = (double)cu_ld(sc, 0);
    const int64_t nv = n / N, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < nv; v += stride) {
        float f[N];
        double r[N];
        cu_ld16(x, v * N, f);
#pragma unroll
        for (int k = 0; k < N; k++) r[k] = scalar_first ? binary_f(op, c, (double)f[k]) : binary_f(op, (double)f[k], c);
        cu_std16(y, v * N, r);
    }
    for (int64_t i = nv * N + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
        const double f = (double)cu_ld(x, i);
        cu_std(y, i, scalar_first ? binary_f(op, c, f) : binary_f(op, f, c));
    }
}

/* ---- integers ------------------------------------------------------------------------------ */

/* The reference's int64 arithmetic, through unsigned so that overflow wraps; the result is
 * truncated to the element width (two's complement), as store_i in elementwise.c. */
static __device__ __forceinline__ uint64_t int_binary_f(int op, int64_t a, int64_t b)
{
    switch (op) {
    case B_ADD: return (uint64_t)a + (uint64_t)b;
    case B_SUB: return (uint64_t)a - (uint64_t)b;
    case B_MUL: return (uint64_t)a * (uint64_t)b;
    case B_MIN: return (uint64_t)(a <= b ? a : b);
    default: return (uint64_t)(a >= b ? a : b); /* B_MAX */
    }
}
static __device__ __forceinline__ void int_store(int32_t *p, int64_t i, uint64_t v) { p[i] = (int32_t)(uint32_t)v; }
static __device__ __forceinline__ void int_store(int64_t *p, int64_t i, uint64_t v) { p[i] = (int64_t)v; }

template <typename I>
__global__ void int_binary_kernel(const I *a, const I *b, I *y, int64_t n, int op, bcast bc)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        bcast_offsets(bc, i, off);
        int_store(y, i, int_binary_f(op, (int64_t)a[off[0]], (int64_t)b[off[1]]));
    }
}

/* neg and abs: 0 - x, wrapping (so the most negative value maps to itself). */
template <typename I>
__global__ void int_unary_kernel(const I *x, I *y, int64_t n, int op, bcast bc)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        bcast_offsets(bc, i, off);
        int64_t v = (int64_t)x[off[0]];
        int_store(y, i, op == U_NEG || v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
    }
}

/* where: a selection, so it moves elements as raw bits (exact for every dtype). */
template <typename E>
__global__ void where_kernel(const uint8_t *cond, const E *a, const E *b, E *y, int64_t n, bcast bc)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        bcast_offsets(bc, i, off);
        y[i] = cond[off[0]] ? a[off[1]] : b[off[2]];
    }
}

/* ---- launchers ---------------------------------------------------------------------------------- */

#define THREADS 256

static int unary_code(const gdp_node *n)
{
    static const char *const names[] = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "pow", "clamp", "scale",
                                        "relu", "gelu", "gelu", "silu", "sigmoid", "tanh"};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (strcmp(n->op, names[i]) == 0) {
            if (i == U_GELU && gdp_attr_int(&n->attrs, "approximate", 0) != 0) return U_GELU_TANH;
            return i;
        }
    return -1;
}

static int grad_code(const gdp_node *n)
{
    static const char *const names[] = {"abs_grad", "clamp_grad", "relu_grad", "gelu_grad", "gelu_grad",
                                        "silu_grad", "sigmoid_grad", "tanh_grad"};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (strcmp(n->op, names[i]) == 0) {
            if (i == G_GELU && gdp_attr_int(&n->attrs, "approximate", 0) != 0) return G_GELU_TANH;
            return i;
        }
    return -1;
}

static int binary_code(const gdp_node *n)
{
    static const char *const names[] = {"add", "sub", "mul", "div", "minimum", "maximum"};
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (strcmp(n->op, names[i]) == 0) return i;
    return -1;
}

/* Float attributes of the unary ops: pow p; clamp lo, hi; scale s, bias. */
static void unary_consts(const gdp_node *n, int op, double *k0, double *k1)
{
    *k0 = 0, *k1 = 0;
    if (op == U_POW) *k0 = gdp_attr_float(&n->attrs, "p", 1.0);
    if (op == U_CLAMP) {
        *k0 = gdp_attr_float(&n->attrs, "lo", -INFINITY);
        *k1 = gdp_attr_float(&n->attrs, "hi", INFINITY);
    }
    if (op == U_SCALE) {
        *k0 = gdp_attr_float(&n->attrs, "s", 1.0);
        *k1 = gdp_attr_float(&n->attrs, "bias", 0.0);
    }
}

static int all_dtype(const gdp_node *n, int32_t dt)
{
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i]->dtype != dt) return 0;
    for (int i = 0; i < n->n_out; i++)
        if (n->out[i]->dtype != dt) return 0;
    return 1;
}

static int unary_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 1 || n->n_out != 1 || !all_dtype(n, n->out[0]->dtype) || !cu_same_shape(n->in[0], n->out[0]))
        return 0;
    int op = unary_code(n);
    if (gdp_is_index(n->out[0]->dtype)) return op == U_NEG || op == U_ABS; /* the reference's integer ops */
    return cu_gpu_float(n->out[0]->dtype) && op >= 0;
}

/* y = f(x) elementwise, through 16-byte vectors when both pointers allow it. */
template <typename T>
static void unary_launch(cu_backend *be, cudaStream_t s, const void *x, void *y, int64_t n, int op, double k0, double k1)
{
    if (cu_aligned16(x) && cu_aligned16(y))
        unary_vec_kernel<T><<<cu_blocks(be, (n + cu_vec<T>::N - 1) / cu_vec<T>::N, THREADS), THREADS, 0, s>>>(
            (const T *)x, (T *)y, n, op, k0, k1);
    else
        unary_kernel<T><<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>((const T *)x, (T *)y, n, op, k0, k1);
}

static gdp_status unary_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *y = node->out[0];
    int op = unary_code(node);
    double k0, k1;
    unary_consts(node, op, &k0, &k1);
    int64_t n = gdp_numel(y);
    if (n == 0) return GDP_OK;
    bcast bc;
    bcast_init(&bc, y, 1, node->in);
    unsigned g = cu_blocks(be, n, THREADS);
    if (y->dtype == GDP_I32) {
        int_unary_kernel<int32_t><<<g, THREADS, 0, s>>>((const int32_t *)x->data, (int32_t *)y->data, n, op, bc);
        return GDP_OK;
    }
    if (y->dtype == GDP_I64) {
        int_unary_kernel<int64_t><<<g, THREADS, 0, s>>>((const int64_t *)x->data, (int64_t *)y->data, n, op, bc);
        return GDP_OK;
    }
    if (bc.full[0]) {
        CU_FLOAT_SWITCH(y->dtype, T, unary_launch<T>(be, s, x->data, y->data, n, op, k0, k1));
    } else {
        CU_FLOAT_SWITCH(y->dtype, T,
                        unary_strided_kernel<T><<<g, THREADS, 0, s>>>((const T *)x->data, (T *)y->data, n, op, k0, k1, bc));
    }
    return GDP_OK;
}
CU_LAUNCHER(unary_run)

gdp_status cu_act_inplace(cu_backend *be, cudaStream_t s, int32_t dtype, void *y, int64_t n, int act, gdp_err *err)
{
    /* linear_act's numbering: 2 gelu tanh, 3 gelu erf, 4 silu (relu is a cuBLASLt epilogue). */
    int op = act == 2 ? U_GELU_TANH : act == 3 ? U_GELU : act == 4 ? U_SILU : -1;
    if (op < 0) return gdp_fail(err, GDP_ERR_INVALID, "cuda linear_act: act=%d", act);
    if (n == 0) return GDP_OK;
    switch (dtype) {
    case GDP_F32: unary_launch<float>(be, s, y, y, n, op, 0, 0); break;
    case GDP_F16: unary_launch<__half>(be, s, y, y, n, op, 0, 0); break;
    case GDP_BF16: unary_launch<__nv_bfloat16>(be, s, y, y, n, op, 0, 0); break;
    default: return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda linear_act: dtype %d", (int)dtype);
    }
    return GDP_OK;
}

static int grad_supports(void *b, const gdp_node *n)
{
    (void)b;
    return n->n_in == 2 && n->n_out == 1 && cu_gpu_float(n->out[0]->dtype) && all_dtype(n, n->out[0]->dtype) &&
           cu_same_shape(n->in[0], n->out[0]) && cu_same_shape(n->in[1], n->out[0]) && grad_code(n) >= 0;
}

static gdp_status grad_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *dy = node->in[0], *v = node->in[1], *dx = node->out[0];
    int op = grad_code(node);
    double k0 = 0, k1 = 0;
    if (op == G_CLAMP) {
        k0 = gdp_attr_float(&node->attrs, "lo", -INFINITY);
        k1 = gdp_attr_float(&node->attrs, "hi", INFINITY);
    }
    int64_t n = gdp_numel(dx);
    if (n == 0) return GDP_OK;
    bcast bc;
    bcast_init(&bc, dx, 2, node->in);
    int plain = bc.full[0] && bc.full[1];
    int vec = plain && cu_aligned16(dy->data) && cu_aligned16(v->data) && cu_aligned16(dx->data);
    CU_FLOAT_SWITCH(dx->dtype, T,
                    if (vec) grad_vec_kernel<T><<<cu_blocks(be, (n + cu_vec<T>::N - 1) / cu_vec<T>::N, THREADS), THREADS, 0, s>>>(
                        (const T *)dy->data, (const T *)v->data, (T *)dx->data, n, op, k0, k1);
                    else if (plain) grad_kernel<T><<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>(
                        (const T *)dy->data, (const T *)v->data, (T *)dx->data, n, op, k0, k1);
                    else grad_strided_kernel<T><<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>(
                        (const T *)dy->data, (const T *)v->data, (T *)dx->data, n, op, k0, k1, bc));
    return GDP_OK;
}
CU_LAUNCHER(grad_run)

/* Every input's dims, right-aligned, equal the output's or are 1. */
static int broadcasts_to(const gdp_tensor *t, const gdp_tensor *out)
{
    if (t->ndim > out->ndim) return 0;
    for (int d = 0; d < t->ndim; d++) {
        int64_t td = t->shape[t->ndim - 1 - d], od = out->shape[out->ndim - 1 - d];
        if (td != od && td != 1) return 0;
    }
    return 1;
}

static int binary_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 2 || n->n_out != 1 || !all_dtype(n, n->out[0]->dtype) || !broadcasts_to(n->in[0], n->out[0]) ||
        !broadcasts_to(n->in[1], n->out[0]))
        return 0;
    int op = binary_code(n);
    if (gdp_is_index(n->out[0]->dtype)) return op >= 0 && op != B_DIV; /* div is floats only */
    return cu_gpu_float(n->out[0]->dtype) && op >= 0;
}

static gdp_status binary_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *a = node->in[0], *b = node->in[1], *y = node->out[0];
    const gdp_tensor *ins[2] = {a, b};
    bcast bc;
    bcast_init(&bc, y, 2, ins);
    int op = binary_code(node);
    int64_t n = gdp_numel(y);
    if (n == 0) return GDP_OK;
    unsigned g = cu_blocks(be, n, THREADS);
    if (y->dtype == GDP_I32) {
        int_binary_kernel<int32_t><<<g, THREADS, 0, s>>>((const int32_t *)a->data, (const int32_t *)b->data, (int32_t *)y->data, n, op, bc);
        return GDP_OK;
    }
    if (y->dtype == GDP_I64) {
        int_binary_kernel<int64_t><<<g, THREADS, 0, s>>>((const int64_t *)a->data, (const int64_t *)b->data, (int64_t *)y->data, n, op, bc);
        return GDP_OK;
    }
    /* no broadcasting: the operands are read at the output's offsets, so vectors work */
    int vec = bc.full[0] && bc.full[1] && cu_aligned16(a->data) && cu_aligned16(b->data) && cu_aligned16(y->data);
    /* or one operand of a single element against one laid out like y */
    const int sa = gdp_numel(a) == 1 && n > 1, sb = gdp_numel(b) == 1 && n > 1;
    if (!vec && (sa != sb) && bc.full[sa ? 1 : 0] && cu_aligned16(sa ? b->data : a->data) && cu_aligned16(y->data)) {
        const void *x = sa ? b->data : a->data, *c = sa ? a->data : b->data;
        CU_FLOAT_SWITCH(y->dtype, T,
                        binary_scalar_vec_kernel<T><<<cu_blocks(be, (n + cu_vec<T>::N - 1) / cu_vec<T>::N, THREADS), THREADS, 0, s>>>(
                            (const T *)x, (const T *)c, (T *)y->data, n, op, sa));
        return GDP_OK;
    }
    CU_FLOAT_SWITCH(y->dtype, T,
                    if (vec) binary_vec_kernel<T><<<cu_blocks(be, (n + cu_vec<T>::N - 1) / cu_vec<T>::N, THREADS), THREADS, 0, s>>>(
                        (const T *)a->data, (const T *)b->data, (T *)y->data, n, op);
                    else binary_kernel<T><<<g, THREADS, 0, s>>>(
                        (const T *)a->data, (const T *)b->data, (T *)y->data, n, op, bc));
    return GDP_OK;
}
CU_LAUNCHER(binary_run)

static int minmax_grad_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 3 || n->n_out != 2 || !cu_gpu_float(n->in[0]->dtype) || !all_dtype(n, n->in[0]->dtype)) return 0;
    const gdp_tensor *dy = n->in[0];
    return broadcasts_to(n->in[1], dy) && broadcasts_to(n->in[2], dy) && cu_same_shape(n->out[0], dy) &&
           cu_same_shape(n->out[1], dy);
}

static gdp_status minmax_grad_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *dy = node->in[0], *a = node->in[1], *b = node->in[2];
    const gdp_tensor *ins[3] = {dy, a, b};
    bcast bc;
    bcast_init(&bc, node->out[0], 3, ins); /* the outputs have dy's shape, contiguous */
    int op = strcmp(node->op, "minimum_grad") == 0 ? B_MIN : B_MAX;
    int64_t n = gdp_numel(dy);
    if (n == 0) return GDP_OK;
    CU_FLOAT_SWITCH(dy->dtype, T,
                    minmax_grad_kernel<T><<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>(
                        (const T *)dy->data, (const T *)a->data, (const T *)b->data, (T *)node->out[0]->data,
                        (T *)node->out[1]->data, n, op, bc));
    return GDP_OK;
}
CU_LAUNCHER(minmax_grad_run)

static int where_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 3 || n->n_out != 1 || n->in[0]->dtype != GDP_BOOL) return 0;
    int32_t dt = n->out[0]->dtype;
    size_t es = gdp_dtype_size(dt);
    return n->in[1]->dtype == dt && n->in[2]->dtype == dt && (es == 2 || es == 4 || es == 8) &&
           broadcasts_to(n->in[0], n->out[0]) && broadcasts_to(n->in[1], n->out[0]) &&
           broadcasts_to(n->in[2], n->out[0]);
}

static gdp_status where_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *c = node->in[0], *a = node->in[1], *b = node->in[2], *y = node->out[0];
    const gdp_tensor *ins[3] = {c, a, b};
    bcast bc;
    bcast_init(&bc, y, 3, ins);
    int64_t n = gdp_numel(y);
    if (n == 0) return GDP_OK;
    unsigned g = cu_blocks(be, n, THREADS);
    const uint8_t *pc = (const uint8_t *)c->data;
    switch (gdp_dtype_size(y->dtype)) {
    case 2: where_kernel<uint16_t><<<g, THREADS, 0, s>>>(pc, (const uint16_t *)a->data, (const uint16_t *)b->data, (uint16_t *)y->data, n, bc); break;
    case 4: where_kernel<uint32_t><<<g, THREADS, 0, s>>>(pc, (const uint32_t *)a->data, (const uint32_t *)b->data, (uint32_t *)y->data, n, bc); break;
    case 8: where_kernel<uint64_t><<<g, THREADS, 0, s>>>(pc, (const uint64_t *)a->data, (const uint64_t *)b->data, (uint64_t *)y->data, n, bc); break;
    default: return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda where: dtype %d", (int)y->dtype);
    }
    return GDP_OK;
}
CU_LAUNCHER(where_run)

/* ---- swiglu: y = silu(g) * u; backward (dy, g, u) -> (dg, du) ---------------------------------- */

/* One element: y (dy == NULL) or dg into *a and du into *b. f32 in double, as the family
 * computes; f16/bf16 in float, as their activations' gradients here do (in_float). */
template <typename T>
static __device__ __forceinline__ void swiglu_one(const float *dy, float g, float u, double *a, double *b)
{
    if constexpr (sizeof(T) == 2) {
        const float sg = 1.0f / (1.0f + expf(-g));
        if (dy == NULL) {
            *a = (double)(g * sg * u);
            return;
        }
        *a = (double)(*dy * u * (sg * (1.0f + g * (1.0f - sg))));
        *b = (double)(*dy * (g * sg));
    } else {
        const double x = g, sg = cu_sigmoid_d(x);
        if (dy == NULL) {
            *a = x * sg * (double)u;
            return;
        }
        *a = (double)*dy * (double)u * (sg * (1.0 + x * (1.0 - sg)));
        *b = (double)*dy * (x * sg);
    }
}

/* A thread takes 16 bytes of each operand at a time (vec: every pointer aligned), then
 * the tail element by element. dy == NULL: the forward, into y; else dg into y and du. */
template <typename T>
__global__ void swiglu_kernel(const T *dy, const T *g, const T *u, T *y, T *du, int64_t n, int vec)
{
    constexpr int N = cu_vec<T>::N;
    const int64_t nv = vec ? n / N : 0, stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t t0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (int64_t v = t0; v < nv; v += stride) {
        float gf[N], uf[N], df[N];
        double a[N], b[N];
        cu_ld16(g, v * N, gf);
        cu_ld16(u, v * N, uf);
        if (dy != NULL) cu_ld16(dy, v * N, df);
#pragma unroll
        for (int k = 0; k < N; k++) swiglu_one<T>(dy != NULL ? &df[k] : NULL, gf[k], uf[k], &a[k], &b[k]);
        cu_std16(y, v * N, a);
        if (dy != NULL) cu_std16(du, v * N, b);
    }
    for (int64_t i = nv * N + t0; i < n; i += stride) {
        const float d = dy != NULL ? cu_ld(dy, i) : 0.0f;
        double a, b;
        swiglu_one<T>(dy != NULL ? &d : NULL, cu_ld(g, i), cu_ld(u, i), &a, &b);
        cu_std(y, i, a);
        if (dy != NULL) cu_std(du, i, b);
    }
}

static int swiglu_supports(void *b, const gdp_node *n)
{
    (void)b;
    const int grad = n->n_in == 3;
    if (n->n_in != 2 + grad || n->n_out != 1 + grad || !cu_gpu_float(n->out[0]->dtype) || !all_dtype(n, n->out[0]->dtype))
        return 0;
    for (int k = 0; k < n->n_in; k++)
        if (!cu_same_shape(n->in[k], n->out[0])) return 0;
    return !grad || cu_same_shape(n->out[1], n->out[0]);
}

static gdp_status swiglu_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const int grad = node->n_in == 3;
    const gdp_tensor *g = node->in[grad], *u = node->in[grad + 1], *y = node->out[0];
    const void *dy = grad ? node->in[0]->data : NULL;
    void *du = grad ? node->out[1]->data : NULL;
    const int64_t n = gdp_numel(y);
    if (n == 0) return GDP_OK;
    const int vec = cu_aligned16(g->data) && cu_aligned16(u->data) && cu_aligned16(y->data) &&
                    (!grad || (cu_aligned16(dy) && cu_aligned16(du)));
    CU_FLOAT_SWITCH(y->dtype, T,
                    swiglu_kernel<T><<<cu_blocks(be, vec ? (n + cu_vec<T>::N - 1) / cu_vec<T>::N : n, THREADS), THREADS, 0, s>>>(
                        (const T *)dy, (const T *)g->data, (const T *)u->data, (T *)y->data, (T *)du, n, vec));
    return GDP_OK;
}
CU_LAUNCHER(swiglu_run)

/* Every kernel of this family but swiglu's takes strided inputs. */
#define EK(op, dt, sup, fn) CU_KX(op, dt, GDP_KERNEL_STRIDED, sup, fn, NULL, NULL)
#define FLOATS3(op, sup, fn, attrs) EK(op, GDP_F32, sup, fn), EK(op, GDP_F16, sup, fn), EK(op, GDP_BF16, sup, fn)

static const gdp_kernel kernels[] = {
    FLOATS3("add", binary_supports, binary_run_launch, NULL),
    FLOATS3("sub", binary_supports, binary_run_launch, NULL),
    FLOATS3("mul", binary_supports, binary_run_launch, NULL),
    FLOATS3("div", binary_supports, binary_run_launch, NULL),
    FLOATS3("minimum", binary_supports, binary_run_launch, NULL),
    FLOATS3("maximum", binary_supports, binary_run_launch, NULL),
    /* Integer kernels for the integer dtypes the ops' sweep cases use (a node with no float
     * operand is keyed by its output's dtype). */
    EK("add", GDP_I32, binary_supports, binary_run_launch),
    EK("add", GDP_I64, binary_supports, binary_run_launch),
    EK("sub", GDP_I32, binary_supports, binary_run_launch),
    EK("sub", GDP_I64, binary_supports, binary_run_launch),
    EK("mul", GDP_I32, binary_supports, binary_run_launch),
    EK("mul", GDP_I64, binary_supports, binary_run_launch),
    EK("minimum", GDP_I32, binary_supports, binary_run_launch),
    EK("minimum", GDP_I64, binary_supports, binary_run_launch),
    EK("maximum", GDP_I32, binary_supports, binary_run_launch),
    EK("maximum", GDP_I64, binary_supports, binary_run_launch),
    EK("neg", GDP_I32, unary_supports, unary_run_launch),
    EK("neg", GDP_I64, unary_supports, unary_run_launch),
    EK("abs", GDP_I32, unary_supports, unary_run_launch),
    EK("abs", GDP_I64, unary_supports, unary_run_launch),
    FLOATS3("minimum_grad", minmax_grad_supports, minmax_grad_run_launch, NULL),
    FLOATS3("maximum_grad", minmax_grad_supports, minmax_grad_run_launch, NULL),
    FLOATS3("where", where_supports, where_run_launch, NULL),
    /* i32 only: the dtype where's cases reach (the sweep flags a kernel no case reaches);
     * where_run moves any 2-, 4- or 8-byte element, so an i64 case needs just its line */
    EK("where", GDP_I32, where_supports, where_run_launch),
    FLOATS3("neg", unary_supports, unary_run_launch, NULL),
    FLOATS3("abs", unary_supports, unary_run_launch, NULL),
    FLOATS3("exp", unary_supports, unary_run_launch, NULL),
    FLOATS3("log", unary_supports, unary_run_launch, NULL),
    FLOATS3("sqrt", unary_supports, unary_run_launch, NULL),
    FLOATS3("rsqrt", unary_supports, unary_run_launch, NULL),
    FLOATS3("pow", unary_supports, unary_run_launch, NULL),
    FLOATS3("clamp", unary_supports, unary_run_launch, NULL),
    FLOATS3("scale", unary_supports, unary_run_launch, NULL),
    FLOATS3("abs_grad", grad_supports, grad_run_launch, NULL),
    FLOATS3("clamp_grad", grad_supports, grad_run_launch, NULL),
    FLOATS3("relu", unary_supports, unary_run_launch, NULL),
    FLOATS3("gelu", unary_supports, unary_run_launch, NULL),
    FLOATS3("silu", unary_supports, unary_run_launch, NULL),
    FLOATS3("sigmoid", unary_supports, unary_run_launch, NULL),
    FLOATS3("tanh", unary_supports, unary_run_launch, NULL),
    FLOATS3("relu_grad", grad_supports, grad_run_launch, NULL),
    FLOATS3("gelu_grad", grad_supports, grad_run_launch, NULL),
    FLOATS3("silu_grad", grad_supports, grad_run_launch, NULL),
    FLOATS3("sigmoid_grad", grad_supports, grad_run_launch, NULL),
    FLOATS3("tanh_grad", grad_supports, grad_run_launch, NULL),
#define SWIGLU(op, dt) CU_KX(op, dt, 0, swiglu_supports, swiglu_run_launch, NULL, NULL)
    SWIGLU("swiglu", GDP_F32), SWIGLU("swiglu", GDP_F16), SWIGLU("swiglu", GDP_BF16),
    SWIGLU("swiglu_grad", GDP_F32), SWIGLU("swiglu_grad", GDP_F16), SWIGLU("swiglu_grad", GDP_BF16),
#undef SWIGLU
};
CU_FAMILY(elementwise, kernels);
