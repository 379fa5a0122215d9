/* random.cu — tensors made from attributes (src/ops/creation.c: fill, arange, rand_uniform,
 * rand_normal, init_kaiming, init_xavier) and dropout (src/ops/dropout.c).
 *
 * Random values: element i draws gdp_philox4x32(i, offset, seed) from gradus_plugin.h and
 * then does exactly the reference's f32 arithmetic, written with the _rn intrinsics so that
 * nvcc cannot fuse a multiply and an add into one rounding the host compiler does not do.
 * Uniform draws and dropout masks then match the reference bit for bit; normal draws go
 * through logf/cosf, whose CUDA versions may differ from the host's in the last bit (far
 * inside the ops' tolerance).
 */
#include "cuda_internal.h"

#include <math.h>
#include <string.h>

#define THREADS 256

/* ---- storing a double into any dtype, as creation.c's store_any ------------------------- */

/* Truncation toward zero with saturation; NaN stores 0. */
static __device__ __forceinline__ int64_t saturate(double v, double lo, double hi, int64_t ilo, int64_t ihi)
{
    if (v != v) return 0;
    if (v <= lo) return ilo;
    if (v >= hi) return ihi;
    return (int64_t)v;
}

static __device__ __forceinline__ void store_any(void *p, int32_t dt, int64_t i, double v)
{
    switch (dt) {
    case GDP_F32: ((float *)p)[i] = (float)v; break;
    case GDP_F64: ((double *)p)[i] = v; break;
    /* the reference writes f32, which the core then rounds to the narrow type */
    case GDP_F16: ((__half *)p)[i] = __float2half_rn((float)v); break;
    case GDP_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
    case GDP_I32: ((int32_t *)p)[i] = (int32_t)saturate(v, -2147483648.0, 2147483647.0, INT32_MIN, INT32_MAX); break;
    /* 2^63 itself does not fit: anything at or above it saturates */
    case GDP_I64: ((int64_t *)p)[i] = saturate(v, -9223372036854775808.0, 9223372036854775808.0, INT64_MIN, INT64_MAX); break;
    case GDP_U8: ((uint8_t *)p)[i] = (uint8_t)saturate(v, 0.0, 255.0, 0, 255); break;
    case GDP_I8: ((int8_t *)p)[i] = (int8_t)saturate(v, -128.0, 127.0, -128, 127); break;
    default: ((uint8_t *)p)[i] = v != 0; break; /* GDP_BOOL */
    }
}

/* A random op's f32 value into its float output. */
static __device__ __forceinline__ void store_float(void *p, int32_t dt, int64_t i, float v)
{
    switch (dt) {
    case GDP_F64: ((double *)p)[i] = (double)v; break;
    case GDP_F16: ((__half *)p)[i] = __float2half_rn(v); break;
    case GDP_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    default: ((float *)p)[i] = v; break; /* GDP_F32 */
    }
}

/* ---- fill, arange --------------------------------------------------------------------------- */

__global__ void fill_kernel(void *y, int32_t dt, int64_t n, double v)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        store_any(y, dt, i, v);
}

/* y[i] = start + i * step in double, rounded once: the two roundings of the reference,
 * never one fused multiply-add. */
__global__ void arange_kernel(void *y, int32_t dt, int64_t n, double start, double step)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        store_any(y, dt, i, __dadd_rn(start, __dmul_rn((double)i, step)));
}

static int any_dtype(int32_t dt) { return dt >= 0 && dt < GDP_DTYPE_COUNT && gdp_dtype_size(dt) > 0; }

static int fill_supports(void *b, const gdp_node *n)
{
    (void)b;
    return n->n_in == 0 && n->n_out == 1 && any_dtype(n->out[0]->dtype);
}

static gdp_status fill_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *y = node->out[0];
    int64_t n = gdp_numel(y);
    if (n == 0) return GDP_OK;
    double v = gdp_attr_float(&node->attrs, "value", 0.0);
    if (v == 0.0 && !signbit(v)) { /* +0 is all-zero bytes in every dtype: the fastest fill */
        CU_TRY(cudaMemsetAsync(y->data, 0, (size_t)n * gdp_dtype_size(y->dtype), s));
        return GDP_OK;
    }
    fill_kernel<<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>(y->data, y->dtype, n, v);
    return GDP_OK;
}
CU_LAUNCHER(fill_run)

static gdp_status arange_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    (void)err;
    const gdp_tensor *y = node->out[0];
    int64_t n = gdp_numel(y);
    if (n == 0) return GDP_OK;
    arange_kernel<<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>(y->data, y->dtype, n,
                                                               gdp_attr_float(&node->attrs, "start", 0.0),
                                                               gdp_attr_float(&node->attrs, "step", 1.0));
    return GDP_OK;
}
CU_LAUNCHER(arange_run)

/* ---- random draws ------------------------------------------------------------------------------ */

enum { DRAW_UNIFORM, DRAW_NORMAL };

// y[i] = uniform: a + (b - a) * u01(r0); normal: a + b * sqrt(-2 log u1) cos(2 pi u2), all in f32
__global__ void draw_kernel(void *y, int32_t dt, int64_t n, int kind, float a, float b, uint64_t offset, uint64_t seed)
{
    const float two_pi = 6.28318530717958647692f;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        gdp_philox_out r = gdp_philox4x32((uint64_t)i, offset, seed);
        float v;
        if (kind == DRAW_UNIFORM) {
            v = __fadd_rn(a, __fmul_rn(__fsub_rn(b, a), gdp_u01(r.v[0])));
        } else {
            float u1 = gdp_u01(r.v[0]), u2 = gdp_u01(r.v[1]);
            float z = __fmul_rn(sqrtf(__fmul_rn(-2.0f, logf(u1))), cosf(__fmul_rn(two_pi, u2)));
            v = __fadd_rn(a, __fmul_rn(b, z));
        }
        store_float(y, dt, i, v);
    }
}

/* fan_in and fan_out as creation.c computes them: a linear (out, in) or conv (out, in, kh, kw). */
static void fans(const gdp_tensor *t, double *fan_in, double *fan_out)
{
    if (t->ndim == 0) {
        *fan_in = *fan_out = 1;
        return;
    }
    if (t->ndim == 1) {
        *fan_in = *fan_out = (double)t->shape[0];
        return;
    }
    double field = 1;
    for (int k = 2; k < t->ndim; k++) field *= (double)t->shape[k];
    *fan_in = (double)t->shape[1] * field;
    *fan_out = (double)t->shape[0] * field;
}

static int draw_supports(void *b, const gdp_node *n)
{
    (void)b;
    int32_t dt = n->out[0]->dtype;
    return n->n_in == 0 && n->n_out == 1 && (cu_gpu_float(dt) || dt == GDP_F64);
}

static gdp_status draw_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    (void)err;
    const gdp_tensor *y = node->out[0];
    int64_t n = gdp_numel(y);
    if (n == 0) return GDP_OK;
    /* the attributes and their conversions to float exactly as creation.c's kernels */
    int kind;
    double a, b;
    if (strcmp(node->op, "rand_uniform") == 0) {
        kind = DRAW_UNIFORM, a = gdp_attr_float(&node->attrs, "lo", 0.0), b = gdp_attr_float(&node->attrs, "hi", 1.0);
    } else if (strcmp(node->op, "rand_normal") == 0) {
        kind = DRAW_NORMAL, a = gdp_attr_float(&node->attrs, "mean", 0.0), b = gdp_attr_float(&node->attrs, "std", 1.0);
    } else {
        double fan_in, fan_out;
        fans(y, &fan_in, &fan_out);
        if (strcmp(node->op, "init_kaiming") == 0) {
            kind = DRAW_NORMAL, a = 0.0, b = fan_in > 0 ? sqrt(2.0 / fan_in) : 1.0;
        } else { /* init_xavier */
            float bound = fan_in + fan_out > 0 ? (float)sqrt(6.0 / (fan_in + fan_out)) : 1.0f;
            kind = DRAW_UNIFORM, a = -bound, b = bound;
        }
    }
    uint64_t seed = (uint64_t)gdp_attr_int(&node->attrs, "seed", 0);
    uint64_t offset = (uint64_t)gdp_attr_int(&node->attrs, "offset", 0);
    draw_kernel<<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>(y->data, y->dtype, n, kind, (float)a, (float)b, offset,
                                                             seed);
    return GDP_OK;
}
CU_LAUNCHER(draw_run)

/* ---- dropout ------------------------------------------------------------------------------------- */

// x, [step ()] -> y: x[i] * scale, or 0 where u01(philox(i, step, seed)[0]) < p
template <typename T>
__global__ void dropout_kernel(const T *x, T *y, int64_t n, float p, float scale, uint64_t seed, const void *step,
                               int step64)
{
    /* the step lives in device memory, so a training loop advances it without a host sync;
     * read as an integer: a double would lose the low bits of a large step */
    uint64_t st = step == NULL ? 0 : step64 ? (uint64_t)((const int64_t *)step)[0]
                                            : (uint64_t)(int64_t)((const int32_t *)step)[0];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float u = gdp_u01(gdp_philox4x32((uint64_t)i, st, seed).v[0]);
        /* a product of two floats is exact in double: one rounding, as the reference */
        cu_std(y, i, u < p ? 0.0 : (double)cu_ld(x, i) * (double)scale);
    }
}

static int dropout_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in < 1 || n->n_in > 2 || n->n_out != 1) return 0;
    const gdp_tensor *x = n->in[0];
    if (!cu_gpu_float(x->dtype) || n->out[0]->dtype != x->dtype || !cu_same_shape(n->out[0], x)) return 0;
    double p = gdp_attr_float(&n->attrs, "p", 0.5);
    if (!(p >= 0 && p <= 1)) return 0;
    return n->n_in == 1 || (gdp_is_index(n->in[1]->dtype) && gdp_numel(n->in[1]) == 1);
}

static gdp_status dropout_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *y = node->out[0];
    int64_t n = gdp_numel(x);
    if (n == 0) return GDP_OK;
    float p = (float)gdp_attr_float(&node->attrs, "p", 0.5);
    float scale = 1.0f / (1.0f - p); /* inf when p = 1, but then nothing is kept */
    uint64_t seed = (uint64_t)gdp_attr_int(&node->attrs, "seed", 0);
    const void *step = node->n_in > 1 ? node->in[1]->data : NULL;
    int step64 = node->n_in > 1 && node->in[1]->dtype == GDP_I64;
    CU_FLOAT_SWITCH(x->dtype, T,
                    dropout_kernel<T><<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>((const T *)x->data, (T *)y->data, n,
                                                                                     p, scale, seed, step, step64));
    return GDP_OK;
}
CU_LAUNCHER(dropout_run)

static const char *const p_attrs[] = {"p", NULL};

#define DRAWS(op)                                                                                     \
    CU_K(op, GDP_F32, draw_supports, draw_run_launch, NULL), CU_K(op, GDP_F16, draw_supports, draw_run_launch, NULL), \
        CU_K(op, GDP_BF16, draw_supports, draw_run_launch, NULL), CU_K(op, GDP_F64, draw_supports, draw_run_launch, NULL)

static const gdp_kernel kernels[] = {
    /* fill and arange: every dtype (the kernel is looked up by the output's dtype) */
    CU_K("fill", GDP_F32, fill_supports, fill_run_launch, NULL),
    CU_K("fill", GDP_F16, fill_supports, fill_run_launch, NULL),
    CU_K("fill", GDP_BF16, fill_supports, fill_run_launch, NULL),
    CU_K("fill", GDP_F64, fill_supports, fill_run_launch, NULL),
    CU_K("fill", GDP_I32, fill_supports, fill_run_launch, NULL),
    CU_K("fill", GDP_I64, fill_supports, fill_run_launch, NULL),
    CU_K("fill", GDP_U8, fill_supports, fill_run_launch, NULL),
    CU_K("fill", GDP_I8, fill_supports, fill_run_launch, NULL),
    CU_K("fill", GDP_BOOL, fill_supports, fill_run_launch, NULL),
    CU_K("arange", GDP_F32, fill_supports, arange_run_launch, NULL),
    CU_K("arange", GDP_F16, fill_supports, arange_run_launch, NULL),
    CU_K("arange", GDP_BF16, fill_supports, arange_run_launch, NULL),
    CU_K("arange", GDP_F64, fill_supports, arange_run_launch, NULL),
    CU_K("arange", GDP_I32, fill_supports, arange_run_launch, NULL),
    CU_K("arange", GDP_I64, fill_supports, arange_run_launch, NULL),
    CU_K("arange", GDP_U8, fill_supports, arange_run_launch, NULL),
    CU_K("arange", GDP_I8, fill_supports, arange_run_launch, NULL),
    DRAWS("rand_uniform"),
    DRAWS("rand_normal"),
    DRAWS("init_kaiming"),
    DRAWS("init_xavier"),
    CU_K("dropout", GDP_F32, dropout_supports, dropout_run_launch, p_attrs),
    CU_K("dropout", GDP_F16, dropout_supports, dropout_run_launch, p_attrs),
    CU_K("dropout", GDP_BF16, dropout_supports, dropout_run_launch, p_attrs),
};
CU_FAMILY(random, kernels);
