/* layout.cu — data movement: the strided copy the planner inserts to make a view
 * contiguous (the "copy" op), slice_grad and concat (src/ops/layout.c), cast
 * (src/ops/cast.c), and the gathers (src/ops/index.c: embedding, index_select).
 *
 * reshape, permute, slice and expand are views: the host aliases their outputs and runs
 * no kernel. When a view reaches a kernel that wants contiguous inputs, the host inserts
 * a "copy", which this file runs for every float dtype, whatever the strides (0 included).
 *
 * Everything but cast moves elements as raw bits, so one strided-copy kernel per element
 * size serves it all: it walks a shape and reads and writes through two sets of strides.
 */
#include "cuda_internal.h"
#include "cu_vec.h"

#include <math.h>
#include <string.h>

#define THREADS 256

typedef struct walk {
    int ndim;
    int64_t shape[GDP_MAX_DIMS];
    int64_t src[GDP_MAX_DIMS], dst[GDP_MAX_DIMS]; /* element strides */
    int64_t src_base, dst_base;
} walk;

template <typename E>
__global__ void strided_copy_kernel(const E *x, E *y, int64_t n, walk w)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rest = i, so = w.src_base, d_o = w.dst_base;
        for (int d = w.ndim - 1; d >= 0; d--) {
            int64_t c = rest % w.shape[d];
            rest /= w.shape[d];
            so += c * w.src[d];
            d_o += c * w.dst[d];
        }
        y[d_o] = x[so];
    }
}

/* The same for the copy op, whose destination is contiguous and whose index fits 31 bits
 * (the common case): 32-bit division is several times cheaper than 64-bit on the GPU. */
template <typename E>
__global__ void gather_copy_kernel(const E *x, E *y, uint32_t n, walk w)
{
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        uint32_t rest = i;
        int64_t so = 0;
        for (int d = w.ndim - 1; d >= 0; d--) {
            uint32_t len = (uint32_t)w.shape[d], c = rest % len;
            rest /= len;
            so += (int64_t)c * w.src[d];
        }
        y[i] = x[so];
    }
}

static void contiguous(int ndim, const int64_t *shape, int64_t *st)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) st[d] = s, s *= shape[d];
}

/* Moves two elements as one, while the innermost dim runs contiguous on both sides and
 * every offset stays a whole number of the wider element, up to 16 bytes: a transpose that
 * keeps rows whole (attention's heads to and from (B, T, H, D)) then moves 16-byte pieces
 * instead of 2-byte elements, with an eighth of the index arithmetic. `dst_contig`: the
 * destination is y[i] (gather_copy_kernel), its strides unused. Returns the element size. */
static size_t widen(walk *w, size_t es, const void *x, const void *y, int dst_contig)
{
    const int last = w->ndim - 1;
    while (es < 16 && last >= 0 && w->src[last] == 1 && (dst_contig || w->dst[last] == 1) && w->shape[last] % 2 == 0 &&
           (uintptr_t)x % (2 * es) == 0 && (uintptr_t)y % (2 * es) == 0 && w->src_base % 2 == 0 &&
           w->dst_base % 2 == 0) {
        int ok = 1;
        for (int d = 0; d < last; d++) ok &= w->src[d] % 2 == 0 && (dst_contig || w->dst[d] % 2 == 0);
        if (!ok) break;
        for (int d = 0; d < last; d++) {
            w->src[d] /= 2;
            if (!dst_contig) w->dst[d] /= 2;
        }
        w->shape[last] /= 2;
        w->src_base /= 2;
        w->dst_base /= 2;
        es *= 2;
    }
    return es;
}

static gdp_status run_walk(cu_backend *be, cudaStream_t s, size_t es, const void *x, void *y, const walk *w0,
                           gdp_err *err)
{
    walk wide = *w0;
    const walk *w = &wide;
    es = widen(&wide, es, x, y, 0);
    int64_t n = cu_prod(w->shape, 0, w->ndim);
    if (n == 0) return GDP_OK;
    unsigned g = cu_blocks(be, n, THREADS);
    switch (es) {
    case 16: strided_copy_kernel<uint4><<<g, THREADS, 0, s>>>((const uint4 *)x, (uint4 *)y, n, *w); break;
    case 1: strided_copy_kernel<uint8_t><<<g, THREADS, 0, s>>>((const uint8_t *)x, (uint8_t *)y, n, *w); break;
    case 2: strided_copy_kernel<uint16_t><<<g, THREADS, 0, s>>>((const uint16_t *)x, (uint16_t *)y, n, *w); break;
    case 4: strided_copy_kernel<uint32_t><<<g, THREADS, 0, s>>>((const uint32_t *)x, (uint32_t *)y, n, *w); break;
    case 8: strided_copy_kernel<uint64_t><<<g, THREADS, 0, s>>>((const uint64_t *)x, (uint64_t *)y, n, *w); break;
    default: return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda layout: element size %zu", es);
    }
    return GDP_OK;
}

static int same_dtype_1_1(const gdp_node *n)
{
    return n->n_in == 1 && n->n_out == 1 && n->in[0]->dtype == n->out[0]->dtype && gdp_dtype_size(n->out[0]->dtype) > 0;
}

/* ---- copy: any view of x into a contiguous y ---------------------------------------------- */

static int copy_supports(void *b, const gdp_node *n)
{
    (void)b;
    return same_dtype_1_1(n) && cu_same_shape(n->in[0], n->out[0]) && n->in[0]->ndim <= GDP_MAX_DIMS;
}

/* x's layout with dims of size 1 dropped and neighbours that step evenly merged: a
 * transpose stays 2-D, a contiguous slice becomes 1-D (a plain memcpy). */
static int simplify(const gdp_tensor *x, int64_t *shape, int64_t *stride)
{
    int nd = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (x->shape[d] == 1) continue;
        if (nd > 0 && stride[nd - 1] == x->stride[d] * x->shape[d]) {
            shape[nd - 1] *= x->shape[d];
            stride[nd - 1] = x->stride[d];
            continue;
        }
        shape[nd] = x->shape[d];
        stride[nd] = x->stride[d];
        nd++;
    }
    return nd;
}

static gdp_status copy_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *y = node->out[0];
    size_t es = gdp_dtype_size(y->dtype);
    int64_t n = gdp_numel(y);
    if (n == 0 || x->data == y->data) return GDP_OK;
    walk w;
    memset(&w, 0, sizeof w);
    w.ndim = simplify(x, w.shape, w.src);
    if (w.ndim == 0 || (w.ndim == 1 && w.src[0] == 1)) {
        CU_TRY(cudaMemcpyAsync(y->data, x->data, (size_t)n * es, cudaMemcpyDeviceToDevice, s));
        return GDP_OK;
    }
    if (n > (int64_t)INT32_MAX) { /* the 32-bit loop below must not wrap */
        contiguous(w.ndim, w.shape, w.dst);
        return run_walk(be, s, es, x->data, y->data, &w, err);
    }
    es = widen(&w, es, x->data, y->data, 1);
    n = cu_prod(w.shape, 0, w.ndim);
    unsigned g = cu_blocks(be, n, THREADS);
    switch (es) {
    case 16: gather_copy_kernel<uint4><<<g, THREADS, 0, s>>>((const uint4 *)x->data, (uint4 *)y->data, (uint32_t)n, w); break;
    case 1: gather_copy_kernel<uint8_t><<<g, THREADS, 0, s>>>((const uint8_t *)x->data, (uint8_t *)y->data, (uint32_t)n, w); break;
    case 2: gather_copy_kernel<uint16_t><<<g, THREADS, 0, s>>>((const uint16_t *)x->data, (uint16_t *)y->data, (uint32_t)n, w); break;
    case 4: gather_copy_kernel<uint32_t><<<g, THREADS, 0, s>>>((const uint32_t *)x->data, (uint32_t *)y->data, (uint32_t)n, w); break;
    case 8: gather_copy_kernel<uint64_t><<<g, THREADS, 0, s>>>((const uint64_t *)x->data, (uint64_t *)y->data, (uint32_t)n, w); break;
    default: return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda copy: element size %zu", es);
    }
    return GDP_OK;
}
CU_LAUNCHER(copy_run)

/* ---- slice_grad: dy placed into zeros --------------------------------------------------------------- */

/* The reference's clamping of start/end into [0, n]. */
static void slice_bounds(int64_t n, int64_t start, int64_t end, int64_t *first, int64_t *len)
{
    if (start < 0) start += n;
    if (end < 0) end += n;
    start = start < 0 ? 0 : start > n ? n : start;
    end = end < 0 ? 0 : end > n ? n : end;
    *first = start;
    *len = end > start ? end - start : 0;
}

/* The sliced tensor (dy) is `small`, the whole one (dx) `big`; both have the same rank. */
static int slice_grad_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (!same_dtype_1_1(n) || n->in[0]->ndim != n->out[0]->ndim) return 0;
    const gdp_tensor *big = n->out[0], *small = n->in[0];
    int axis = cu_axis(gdp_attr_int(&n->attrs, "axis", 0), big->ndim);
    if (axis < 0) return 0;
    int64_t first, len;
    slice_bounds(big->shape[axis], gdp_attr_int(&n->attrs, "start", 0), gdp_attr_int(&n->attrs, "end", INT64_MAX),
                 &first, &len);
    for (int d = 0; d < big->ndim; d++)
        if (small->shape[d] != (d == axis ? len : big->shape[d])) return 0;
    return 1;
}

static gdp_status slice_grad_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *big = node->out[0], *small = node->in[0];
    int axis = cu_axis(gdp_attr_int(&node->attrs, "axis", 0), big->ndim);
    int64_t first, len, bst[GDP_MAX_DIMS], sst[GDP_MAX_DIMS];
    slice_bounds(big->shape[axis], gdp_attr_int(&node->attrs, "start", 0),
                 gdp_attr_int(&node->attrs, "end", INT64_MAX), &first, &len);
    size_t es = gdp_dtype_size(big->dtype);
    /* zero outside the slice; all-zero bytes are 0 in every dtype */
    CU_TRY(cudaMemsetAsync(big->data, 0, (size_t)gdp_numel(big) * es, s));
    contiguous(big->ndim, big->shape, bst);
    contiguous(small->ndim, small->shape, sst);
    walk w;
    memset(&w, 0, sizeof w);
    w.ndim = small->ndim;
    for (int d = 0; d < small->ndim; d++) w.shape[d] = small->shape[d];
    memcpy(w.src, sst, sizeof sst);
    memcpy(w.dst, bst, sizeof bst);
    w.dst_base = first * bst[axis];
    return run_walk(be, s, es, small->data, big->data, &w, err);
}
CU_LAUNCHER(slice_grad_run)

/* ---- concat ------------------------------------------------------------------------------------------- */

static int concat_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in < 1 || n->n_out != 1) return 0;
    const gdp_tensor *y = n->out[0];
    int axis = cu_axis(gdp_attr_int(&n->attrs, "axis", 0), y->ndim);
    if (axis < 0 || gdp_dtype_size(y->dtype) == 0) return 0;
    int64_t total = 0;
    for (int k = 0; k < n->n_in; k++) {
        const gdp_tensor *x = n->in[k];
        if (x->dtype != y->dtype || x->ndim != y->ndim) return 0;
        for (int d = 0; d < y->ndim; d++)
            if (d != axis && x->shape[d] != y->shape[d]) return 0;
        total += x->shape[axis];
    }
    return total == y->shape[axis];
}

static gdp_status concat_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *y = node->out[0];
    int axis = cu_axis(gdp_attr_int(&node->attrs, "axis", 0), y->ndim);
    int64_t yst[GDP_MAX_DIMS], at = 0;
    contiguous(y->ndim, y->shape, yst);
    for (int k = 0; k < node->n_in; k++) {
        const gdp_tensor *x = node->in[k];
        walk w;
        memset(&w, 0, sizeof w);
        w.ndim = x->ndim;
        for (int d = 0; d < x->ndim; d++) w.shape[d] = x->shape[d];
        contiguous(x->ndim, x->shape, w.src);
        memcpy(w.dst, yst, sizeof yst);
        w.dst_base = at * yst[axis];
        gdp_status st = run_walk(be, s, gdp_dtype_size(y->dtype), x->data, y->data, &w, err);
        if (st != GDP_OK) return st;
        at += x->shape[axis];
    }
    return GDP_OK;
}
CU_LAUNCHER(concat_run)

/* ---- embedding, index_select ---------------------------------------------------------------------------- */

/* y (outer, m, block) = x (outer, n, block) at rows idx (m). An index out of range is
 * reported (once per position: by the thread of its first element) and its rows are
 * written as zeros. */
template <typename E>
__global__ void gather_kernel(const E *x, const void *idx, int idx64, E *y, int64_t outer, int64_t n, int64_t m,
                              int64_t block, cu_bad bad)
{
    int64_t total = outer * m * block;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t e = i % block, j = (i / block) % m, o = i / (block * m);
        int64_t id = cu_ld_index(idx, idx64, j);
        int ok = id >= 0 && id < n;
        if (!ok && e == 0 && o == 0) cu_report(bad, id, j);
        y[i] = ok ? x[(o * n + id) * block + e] : (E)0;
    }
}

static int gather_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 2 || n->n_out != 1 || !gdp_is_index(n->in[1]->dtype)) return 0;
    const gdp_tensor *x = n->in[0], *idx = n->in[1], *y = n->out[0];
    size_t es = gdp_dtype_size(x->dtype);
    if (y->dtype != x->dtype || (es != 2 && es != 4 && es != 8)) return 0;
    if (strcmp(n->op, "embedding") == 0)
        return x->ndim == 2 && gdp_numel(y) == gdp_numel(idx) * x->shape[1];
    int axis = cu_axis(gdp_attr_int(&n->attrs, "axis", 0), x->ndim);
    return axis >= 0 && idx->ndim == 1 && gdp_numel(y) == gdp_numel(x) / (x->shape[axis] > 0 ? x->shape[axis] : 1) *
                                                               idx->shape[0] && x->shape[axis] > 0;
}

static gdp_status gather_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *idx = node->in[1], *y = node->out[0];
    int64_t outer = 1, n, m = gdp_numel(idx), block;
    cu_bad bad;
    if (strcmp(node->op, "embedding") == 0) {
        n = x->shape[0], block = x->shape[1]; // table (V, D), ids (...) -> y (..., D)
        bad = cu_bad_for(be, node, CU_BAD_ROW, n, 0, idx);
    } else {
        int axis = cu_axis(gdp_attr_int(&node->attrs, "axis", 0), x->ndim);
        outer = cu_prod(x->shape, 0, axis), n = x->shape[axis], block = cu_prod(x->shape, axis + 1, x->ndim);
        bad = cu_bad_for(be, node, CU_BAD_INDEX, n, axis, idx);
    }
    int64_t total = outer * m * block;
    if (total == 0) return GDP_OK;
    unsigned g = cu_blocks(be, total, THREADS);
    int i64 = idx->dtype == GDP_I64;
    switch (gdp_dtype_size(x->dtype)) {
    case 2: gather_kernel<uint16_t><<<g, THREADS, 0, s>>>((const uint16_t *)x->data, idx->data, i64, (uint16_t *)y->data, outer, n, m, block, bad); break;
    case 4: gather_kernel<uint32_t><<<g, THREADS, 0, s>>>((const uint32_t *)x->data, idx->data, i64, (uint32_t *)y->data, outer, n, m, block, bad); break;
    case 8: gather_kernel<uint64_t><<<g, THREADS, 0, s>>>((const uint64_t *)x->data, idx->data, i64, (uint64_t *)y->data, outer, n, m, block, bad); break;
    default: return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda %s: dtype %d", node->op, (int)x->dtype);
    }
    return GDP_OK;
}
CU_LAUNCHER(gather_run)

/* ---- cast ------------------------------------------------------------------------------------------------ */

static __device__ double load_f(const void *p, int dt, int64_t i)
{
    if (dt == GDP_F32) return ((const float *)p)[i];
    if (dt == GDP_F64) return ((const double *)p)[i];
    if (dt == GDP_F16) return __half2float(((const __half *)p)[i]);
    return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

static __device__ int64_t load_i(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case GDP_I32: return ((const int32_t *)p)[i];
    case GDP_I64: return ((const int64_t *)p)[i];
    case GDP_U8: return ((const uint8_t *)p)[i];
    case GDP_I8: return ((const int8_t *)p)[i];
    default: return ((const uint8_t *)p)[i] != 0; /* bool: any non-zero byte is true */
    }
}

/* Truncation toward zero into [lo, hi], NaN -> 0: cast.c's rule, compared in double. */
static __device__ int64_t trunc_sat(double d, int64_t lo, int64_t hi)
{
    if (d != d) return 0;
    if (d <= (double)lo) return lo;
    if (d >= (double)hi) return hi;
    return (int64_t)d;
}

/* A float value into a float dtype: f64 keeps the double, the others round through f32
 * (f64 -> f16/bf16 goes through f32, as cast.c says PyTorch does). */
static __device__ void store_float(void *p, int dt, int64_t i, double d)
{
    if (dt == GDP_F64) ((double *)p)[i] = d;
    else if (dt == GDP_F32) ((float *)p)[i] = (float)d;
    else if (dt == GDP_F16) ((__half *)p)[i] = __float2half_rn((float)d);
    else ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)d);
}

static __device__ void store_int(void *p, int dt, int64_t i, int64_t v)
{
    uint64_t u = (uint64_t)v; /* narrowing wraps: two's complement */
    switch (dt) {
    case GDP_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)u; break;
    case GDP_I64: ((int64_t *)p)[i] = v; break;
    case GDP_U8: ((uint8_t *)p)[i] = (uint8_t)u; break;
    case GDP_I8: ((int8_t *)p)[i] = (int8_t)(uint8_t)u; break;
    default: ((uint8_t *)p)[i] = v != 0; break;
    }
}

__global__ void cast_kernel(const void *x, int xdt, void *y, int ydt, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (gdp_is_float(xdt)) {
            double d = load_f(x, xdt, i);
            if (gdp_is_float(ydt)) store_float(y, ydt, i, d);
            else if (ydt == GDP_BOOL) ((uint8_t *)y)[i] = d != 0;
            else if (ydt == GDP_I32) ((int32_t *)y)[i] = (int32_t)trunc_sat(d, INT32_MIN, INT32_MAX);
            else if (ydt == GDP_I64) ((int64_t *)y)[i] = trunc_sat(d, INT64_MIN, INT64_MAX);
            else if (ydt == GDP_U8) ((uint8_t *)y)[i] = (uint8_t)trunc_sat(d, 0, UINT8_MAX);
            else ((int8_t *)y)[i] = (int8_t)trunc_sat(d, INT8_MIN, INT8_MAX);
        } else {
            int64_t v = load_i(x, xdt, i);
            /* i64 -> f32 rounds once, straight from the integer; f64 holds every i32 and
             * rounds an i64 once too */
            if (ydt == GDP_F64) ((double *)y)[i] = (double)v;
            else if (gdp_is_float(ydt)) store_float(y, ydt, i, (double)(float)v);
            else store_int(y, ydt, i, v);
        }
    }
}

/* Between f32, f16 and bf16 (the weights of mixed precision going to the compute dtype,
 * every step): 8 elements a thread, moved 16 bytes a load and a store. Each element is
 * rounded as cast_kernel rounds it (a float through f32 to the narrow type). */
template <typename T> static __device__ __forceinline__ void cast_ld8(const T *p, int64_t i, float *f)
{
#pragma unroll
    for (int k = 0; k < 8; k += cu_vec<T>::N) cu_ld16(p, i + k, f + k);
}

template <typename X, typename Y>
__global__ void cast_vec_kernel(const X *x, Y *y, int64_t n)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (int64_t v = first; v < n / 8; v += stride) {
        float f[8];
        cast_ld8(x, v * 8, f);
#pragma unroll
        for (int k = 0; k < 8; k += cu_vec<Y>::N) cu_st16(y, v * 8 + k, f + k);
    }
    for (int64_t i = n / 8 * 8 + first; i < n; i += stride) cu_st(y, i, cu_ld(x, i));
}

template <typename X>
static gdp_status cast_vec_to(cu_backend *be, cudaStream_t s, const gdp_node *node, int64_t n, gdp_err *err)
{
    const unsigned blocks = cu_blocks(be, (n + 7) / 8, THREADS);
    const X *x = (const X *)node->in[0]->data;
    CU_FLOAT_SWITCH(node->out[0]->dtype, Y, cast_vec_kernel<X, Y><<<blocks, THREADS, 0, s>>>(x, (Y *)node->out[0]->data, n));
    return GDP_OK;
}

static int cast_dtype_ok(int32_t dt) { return dt >= 0 && dt < GDP_DTYPE_COUNT && gdp_dtype_size(dt) > 0; }

static int cast_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 1 || n->n_out != 1) return 0;
    int32_t to = n->out[0]->dtype;
    return cast_dtype_ok(n->in[0]->dtype) && cast_dtype_ok(to) && gdp_attr_int(&n->attrs, "dtype", to) == to &&
           gdp_numel(n->in[0]) == gdp_numel(n->out[0]);
}

static gdp_status cast_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    (void)err;
    int64_t n = gdp_numel(node->out[0]);
    if (n == 0) return GDP_OK;
    const int32_t xdt = node->in[0]->dtype, ydt = node->out[0]->dtype;
    if (cu_gpu_float(xdt) && cu_gpu_float(ydt) && cu_aligned16(node->in[0]->data) && cu_aligned16(node->out[0]->data)) {
        CU_FLOAT_SWITCH(xdt, X, return cast_vec_to<X>(be, s, node, n, err));
    }
    cast_kernel<<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>(node->in[0]->data, node->in[0]->dtype, node->out[0]->data,
                                                              node->out[0]->dtype, n);
    return GDP_OK;
}
CU_LAUNCHER(cast_run)

/* ---- a training step's casts, batched into one launch ---------------------------------------------------
 * A training step casts each f32 master weight to the compute dtype; the program puts
 * those casts first (compile.c), one node per parameter, many of them biases and norm
 * weights whose launch costs more than their work. When the executor captures a segment,
 * a run of float-to-float casts of one dtype pair goes to cu_casts_batch: the tensors'
 * 8-element vectors are numbered one after the other and a grid-stride loop walks them,
 * so blocks are spent on work, not on small tensors' empty tails. Each element is rounded
 * by cu_st16 / cu_st as in cast_vec_kernel, so the bits are those of the single launches. */

#define CAST_MAX 128 /* a table of 3 KiB stays inside the 4 KiB of kernel arguments */

typedef struct cast_part {
    const void *x;
    void *y;
    int64_t n;     /* elements */
    int64_t end;   /* one past this tensor's last vector, counted over the table */
} cast_part;
typedef struct cast_table {
    cast_part t[CAST_MAX];
} cast_table;

template <typename X, typename Y>
__global__ void cast_batch_kernel(const cast_table tab, int count)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, total = tab.t[count - 1].end;
    int k = 0;
    for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < total; v += stride) {
        while (v >= tab.t[k].end) k++; /* v only grows: a thread walks the table once */
        const X *x = (const X *)tab.t[k].x;
        Y *y = (Y *)tab.t[k].y;
        const int64_t n = tab.t[k].n, i = (v - (tab.t[k].end - (n + 7) / 8)) * 8;
        if (i + 8 <= n) {
            float f[8];
            cast_ld8(x, i, f);
#pragma unroll
            for (int j = 0; j < 8; j += cu_vec<Y>::N) cu_st16(y, i + j, f + j);
        } else {
            for (int64_t j = i; j < n; j++) cu_st(y, j, cu_ld(x, j));
        }
    }
}

template <typename X>
static void cast_batch_launch(int32_t ydt, unsigned blocks, cudaStream_t s, const cast_table &tab, int count)
{
    switch (ydt) {
    case GDP_F32: cast_batch_kernel<X, float><<<blocks, THREADS, 0, s>>>(tab, count); break;
    case GDP_F16: cast_batch_kernel<X, __half><<<blocks, THREADS, 0, s>>>(tab, count); break;
    default: cast_batch_kernel<X, __nv_bfloat16><<<blocks, THREADS, 0, s>>>(tab, count); break;
    }
}

/* A cast the batch takes: between float dtypes, non-empty, both buffers 16-byte aligned. */
static int batch_cast(const gdp_node *n)
{
    return cu_gpu_float(n->in[0]->dtype) && cu_gpu_float(n->out[0]->dtype) && gdp_numel(n->out[0]) > 0 &&
           cu_aligned16(n->in[0]->data) && cu_aligned16(n->out[0]->data);
}

int cu_casts_batch(cu_backend *be, const gdp_segment *seg, int i, cudaStream_t s, gdp_status *st, gdp_err *err)
{
    *st = GDP_OK;
    if (seg->launch[i] != cast_run_launch || !batch_cast(seg->nodes[i])) return 0;
    const gdp_node *n0 = seg->nodes[i];
    const int32_t xdt = n0->in[0]->dtype, ydt = n0->out[0]->dtype;
    int count = 1;
    while (i + count < seg->n_nodes && count < CAST_MAX && seg->launch[i + count] == cast_run_launch) {
        const gdp_node *n = seg->nodes[i + count];
        int ok = batch_cast(n) && n->in[0]->dtype == xdt && n->out[0]->dtype == ydt;
        /* the elements of one launch run in no particular order: no cast may read or
         * write what another one writes */
        for (int j = 0; ok && j < count; j++) {
            const gdp_node *m = seg->nodes[i + j];
            ok = !cu_overlaps(n->out[0], m->in[0]) && !cu_overlaps(n->out[0], m->out[0]) &&
                 !cu_overlaps(n->in[0], m->out[0]);
        }
        if (!ok) break;
        count++;
    }
    if (count < 2) return 0;
    cast_table tab;
    memset(&tab, 0, sizeof tab);
    int64_t total = 0;
    for (int j = 0; j < count; j++) {
        const gdp_node *n = seg->nodes[i + j];
        const int64_t ne = gdp_numel(n->out[0]);
        total += (ne + 7) / 8;
        tab.t[j] = {n->in[0]->data, n->out[0]->data, ne, total};
    }
    const unsigned blocks = cu_blocks(be, total, THREADS);
    switch (xdt) {
    case GDP_F32: cast_batch_launch<float>(ydt, blocks, s, tab, count); break;
    case GDP_F16: cast_batch_launch<__half>(ydt, blocks, s, tab, count); break;
    default: cast_batch_launch<__nv_bfloat16>(ydt, blocks, s, tab, count); break;
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        *st = gdp_fail(err, GDP_ERR_DEVICE, "cuda: %d batched casts failed: %s (%s)", count, cudaGetErrorName(e),
                       cudaGetErrorString(e));
    return count;
}

static const char *const slice_attrs[] = {"axis", "start", "end", NULL};
static const char *const axis_attrs[] = {"axis", NULL};
static const char *const dtype_attrs[] = {"dtype", NULL};

#define FLOATS3(op, sup, fn, attrs) \
    CU_K(op, GDP_F32, sup, fn, attrs), CU_K(op, GDP_F16, sup, fn, attrs), CU_K(op, GDP_BF16, sup, fn, attrs)

static const gdp_kernel kernels[] = {
    /* the copy that makes a view contiguous: any strides, 0 included */
    CU_KX("copy", GDP_F32, GDP_KERNEL_STRIDED, copy_supports, copy_run_launch, NULL, NULL),
    CU_KX("copy", GDP_F16, GDP_KERNEL_STRIDED, copy_supports, copy_run_launch, NULL, NULL),
    CU_KX("copy", GDP_BF16, GDP_KERNEL_STRIDED, copy_supports, copy_run_launch, NULL, NULL),
    /* strided ids, targets and masks too: copies move bits, whatever they mean */
    CU_KX("copy", GDP_I32, GDP_KERNEL_STRIDED, copy_supports, copy_run_launch, NULL, NULL),
    CU_KX("copy", GDP_I64, GDP_KERNEL_STRIDED, copy_supports, copy_run_launch, NULL, NULL),
    CU_KX("copy", GDP_U8, GDP_KERNEL_STRIDED, copy_supports, copy_run_launch, NULL, NULL),
    CU_KX("copy", GDP_I8, GDP_KERNEL_STRIDED, copy_supports, copy_run_launch, NULL, NULL),
    CU_KX("copy", GDP_BOOL, GDP_KERNEL_STRIDED, copy_supports, copy_run_launch, NULL, NULL),
    CU_KX("copy", GDP_F64, GDP_KERNEL_STRIDED, copy_supports, copy_run_launch, NULL, NULL),
    FLOATS3("slice_grad", slice_grad_supports, slice_grad_run_launch, slice_attrs),
    FLOATS3("concat", concat_supports, concat_run_launch, axis_attrs),
    FLOATS3("embedding", gather_supports, gather_run_launch, NULL),
    FLOATS3("index_select", gather_supports, gather_run_launch, axis_attrs),
    FLOATS3("cast", cast_supports, cast_run_launch, dtype_attrs),
    /* A cast from an integer (or f64) tensor is keyed by its first float operand or else its
     * output: cast.c's cases reach every dtype. */
    CU_K("cast", GDP_F64, cast_supports, cast_run_launch, dtype_attrs),
    CU_K("cast", GDP_I32, cast_supports, cast_run_launch, dtype_attrs),
    CU_K("cast", GDP_I64, cast_supports, cast_run_launch, dtype_attrs),
    CU_K("cast", GDP_U8, cast_supports, cast_run_launch, dtype_attrs),
    CU_K("cast", GDP_I8, cast_supports, cast_run_launch, dtype_attrs),
    CU_K("cast", GDP_BOOL, cast_supports, cast_run_launch, dtype_attrs),
};
CU_FAMILY(layout, kernels);
