/* index.cu — the backward ops of the gathers (src/ops/index.c: embedding_grad,
 * index_select_grad) and the mean squared error loss (src/ops/softmax.c: mse).
 *
 * The gathers' backward ops add rows of dy into rows of the result chosen by integer ids;
 * repeated ids add up. Float atomics would make the sums depend on timing, and sorting
 * the ids costs a radix sort; instead each warp owns a tile of output rows and 32
 * columns, scans all ids in order (a ballot per 32 ids tells which ones fall in its rows)
 * and adds the matching dy rows into double accumulators in shared memory. Every output
 * element is summed by one lane, in ascending position order, in double: exactly the
 * reference's order and precision, so the results match it bit for bit. An id outside the
 * table is reported (baddata.cu) by the warps of the first tile, and adds nothing.
 */
#include "cu_vec.h"
#include "cuda_internal.h"

#include <math.h>
#include <string.h>

#define THREADS 256
#define SC_ROWS 32  /* output rows a warp owns */
#define SC_WARPS 4  /* warps per block */

static __device__ __forceinline__ int64_t load_id(const void *ids, int ids64, int64_t j)
{
    return ids64 ? ((const int64_t *)ids)[j] : (int64_t)((const int32_t *)ids)[j];
}

// dy (outer, m, inner), ids (m) -> dx (outer, n, inner): dx[o, r] = sum over j with ids[j] == r of dy[o, j]
// An id outside [0, n) matches no row: it is reported and its dy row is dropped.
template <typename T>
__global__ void __launch_bounds__(SC_WARPS * 32) scatter_add_kernel(const T *dy, const void *ids, int ids64, T *dx,
                                                                     int64_t outer, int64_t n, int64_t m, int64_t inner,
                                                                     cu_bad bad)
{
    __shared__ double acc[SC_WARPS][SC_ROWS][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double *a = &acc[warp][0][0]; /* this lane only ever touches column `lane` of it */
    const int64_t rtiles = (n + SC_ROWS - 1) / SC_ROWS, ctiles = (inner + 31) / 32;
    const int64_t units = outer * rtiles * ctiles;
    /* warps are independent: no block barrier, so each walks its own units */
    for (int64_t u = (int64_t)blockIdx.x * SC_WARPS + warp; u < units; u += (int64_t)gridDim.x * SC_WARPS) {
        const int64_t c = u % ctiles, rt = (u / ctiles) % rtiles, o = u / (ctiles * rtiles);
        const int64_t r0 = rt * SC_ROWS, col = c * 32 + lane;
        for (int r = 0; r < SC_ROWS; r++) a[r * 32 + lane] = 0.0;
        for (int64_t j0 = 0; j0 < m; j0 += 32) {
            const int64_t j = j0 + lane;
            const int64_t id = j < m ? load_id(ids, ids64, j) : -1;
            if (u == 0 && j < m && (id < 0 || id >= n)) cu_report(bad, id, j); /* one unit scans every id */
            unsigned mine = __ballot_sync(CU_FULL_MASK, id >= r0 && id < r0 + SC_ROWS && id < n);
            while (mine != 0) { /* lowest position first: the reference's order */
                const int src = __ffs(mine) - 1;
                mine &= mine - 1;
                const int64_t row = __shfl_sync(CU_FULL_MASK, id, src) - r0;
                if (col < inner) a[row * 32 + lane] += (double)cu_ld(dy, (o * m + j0 + src) * inner + col);
            }
        }
        if (col < inner)
            for (int r = 0; r < SC_ROWS && r0 + r < n; r++) cu_std(dx, (o * n + r0 + r) * inner + col, a[r * 32 + lane]);
    }
}

static gdp_status scatter_add(cu_backend *be, cudaStream_t s, const gdp_tensor *dy, const gdp_tensor *ids,
                              const gdp_tensor *dx, int64_t outer, int64_t n, int64_t m, int64_t inner, cu_bad bad,
                              gdp_err *err)
{
    int64_t units = outer * ((n + SC_ROWS - 1) / SC_ROWS) * ((inner + 31) / 32);
    if (units == 0) return GDP_OK;
    int64_t want = (units + SC_WARPS - 1) / SC_WARPS, cap = (int64_t)(be->sm_count > 0 ? be->sm_count : 80) * 32;
    unsigned g = (unsigned)(want < cap ? want : cap);
    int ids64 = ids->dtype == GDP_I64;
    switch (dx->dtype) {
    case GDP_F32: scatter_add_kernel<float><<<g, SC_WARPS * 32, 0, s>>>((const float *)dy->data, ids->data, ids64, (float *)dx->data, outer, n, m, inner, bad); break;
    case GDP_F16: scatter_add_kernel<__half><<<g, SC_WARPS * 32, 0, s>>>((const __half *)dy->data, ids->data, ids64, (__half *)dx->data, outer, n, m, inner, bad); break;
    case GDP_BF16: scatter_add_kernel<__nv_bfloat16><<<g, SC_WARPS * 32, 0, s>>>((const __nv_bfloat16 *)dy->data, ids->data, ids64, (__nv_bfloat16 *)dx->data, outer, n, m, inner, bad); break;
    default: return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda scatter-add: dtype %d", (int)dx->dtype);
    }
    return GDP_OK;
}

/* ---- embedding_grad: dy (ids.shape, D), ids -> d table (V, D) ------------------------------ */

static int embedding_grad_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 2 || n->n_out != 1) return 0;
    const gdp_tensor *dy = n->in[0], *ids = n->in[1], *dt = n->out[0];
    if (!cu_gpu_float(dy->dtype) || !gdp_is_index(ids->dtype) || dt->dtype != dy->dtype || dt->ndim != 2) return 0;
    if (dy->ndim != ids->ndim + 1 || dy->shape[dy->ndim - 1] != dt->shape[1]) return 0;
    for (int i = 0; i < ids->ndim; i++)
        if (dy->shape[i] != ids->shape[i]) return 0;
    return 1;
}

static gdp_status embedding_grad_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *dt = node->out[0];
    cu_bad bad = cu_bad_for(be, node, CU_BAD_ROW, dt->shape[0], 0, node->in[1]);
    return scatter_add(be, s, node->in[0], node->in[1], dt, 1, dt->shape[0], gdp_numel(node->in[1]), dt->shape[1],
                       bad, err);
}
CU_LAUNCHER(embedding_grad_run)

/* ---- index_select_grad: dy (x with axis -> m), idx (m) -> dx (input_shape) ----------------- */

static int index_select_grad_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 2 || n->n_out != 1) return 0;
    const gdp_tensor *dy = n->in[0], *idx = n->in[1], *dx = n->out[0];
    if (!cu_gpu_float(dy->dtype) || !gdp_is_index(idx->dtype) || idx->ndim != 1 || dx->dtype != dy->dtype) return 0;
    int axis = cu_axis(gdp_attr_int(&n->attrs, "axis", 0), dx->ndim);
    if (axis < 0 || dy->ndim != dx->ndim) return 0;
    for (int d = 0; d < dx->ndim; d++)
        if (dy->shape[d] != (d == axis ? idx->shape[0] : dx->shape[d])) return 0;
    return 1;
}

static gdp_status index_select_grad_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *dx = node->out[0];
    int axis = cu_axis(gdp_attr_int(&node->attrs, "axis", 0), dx->ndim);
    cu_bad bad = cu_bad_for(be, node, CU_BAD_INDEX, dx->shape[axis], axis, node->in[1]);
    return scatter_add(be, s, node->in[0], node->in[1], dx, cu_prod(dx->shape, 0, axis), dx->shape[axis],
                       node->in[1]->shape[0], cu_prod(dx->shape, axis + 1, dx->ndim), bad, err);
}
CU_LAUNCHER(index_select_grad_run)

/* ---- mse: pred, target (same shape) -> () ----------------------------------------------------- */

#define MSE_CHUNK 8192 /* elements per block in the first pass */

/* part[b] = sum over chunk b of (pred - target)^2, in double, fixed order. */
template <typename T>
__global__ void __launch_bounds__(THREADS) mse_part_kernel(const T *p, const T *t, int64_t n, int64_t clen, double *part)
{
    __shared__ double sh[32];
    const int64_t lo = blockIdx.x * clen, hi = lo + clen < n ? lo + clen : n;
    double acc = 0.0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        double d = (double)cu_ld(p, i) - (double)cu_ld(t, i);
        acc += d * d;
    }
    acc = cu_block_sum_d(acc, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

/* y = sum of part[0..k) / n, one block. n = 0 gives 0 / 0 = NaN, as the reference. */
template <typename T>
__global__ void __launch_bounds__(THREADS) mse_final_kernel(const double *part, int64_t k, int64_t n, T *y)
{
    __shared__ double sh[32];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) acc += part[i];
    acc = cu_block_sum_d(acc, sh);
    if (threadIdx.x == 0) cu_std(y, 0, acc / (double)n);
}

static int mse_supports(void *b, const gdp_node *n)
{
    (void)b;
    return n->n_in == 2 && n->n_out == 1 && cu_gpu_float(n->in[0]->dtype) && n->in[1]->dtype == n->in[0]->dtype &&
           cu_same_shape(n->in[0], n->in[1]) && n->out[0]->dtype == n->in[0]->dtype && gdp_numel(n->out[0]) == 1;
}

/* One partial sum per chunk of MSE_CHUNK elements (at least one). */
static int64_t mse_chunks(const gdp_node *n)
{
    int64_t k = (gdp_numel(n->in[0]) + MSE_CHUNK - 1) / MSE_CHUNK;
    return k < 1 ? 1 : k; /* n = 0: one empty chunk, so the final pass still writes y */
}

static size_t mse_workspace(void *b, const gdp_node *n)
{
    (void)b;
    return cu_ws_declare((size_t)mse_chunks(n) * sizeof(double));
}

static gdp_status mse_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    (void)be;
    int64_t n = gdp_numel(node->in[0]), k = mse_chunks(node);
    char *ws = NULL;
    gdp_status st = cu_ws(node, (size_t)k * sizeof(double), &ws, err);
    if (st != GDP_OK) return st;
    double *part = (double *)ws;
    switch (node->in[0]->dtype) {
    case GDP_F32:
        mse_part_kernel<float><<<(unsigned)k, THREADS, 0, s>>>((const float *)node->in[0]->data, (const float *)node->in[1]->data, n, MSE_CHUNK, part);
        mse_final_kernel<float><<<1, THREADS, 0, s>>>(part, k, n, (float *)node->out[0]->data);
        break;
    case GDP_F16:
        mse_part_kernel<__half><<<(unsigned)k, THREADS, 0, s>>>((const __half *)node->in[0]->data, (const __half *)node->in[1]->data, n, MSE_CHUNK, part);
        mse_final_kernel<__half><<<1, THREADS, 0, s>>>(part, k, n, (__half *)node->out[0]->data);
        break;
    case GDP_BF16:
        mse_part_kernel<__nv_bfloat16><<<(unsigned)k, THREADS, 0, s>>>((const __nv_bfloat16 *)node->in[0]->data, (const __nv_bfloat16 *)node->in[1]->data, n, MSE_CHUNK, part);
        mse_final_kernel<__nv_bfloat16><<<1, THREADS, 0, s>>>(part, k, n, (__nv_bfloat16 *)node->out[0]->data);
        break;
    default: st = gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda mse: dtype %d", (int)node->in[0]->dtype);
    }
    return st;
}
CU_LAUNCHER(mse_run)

static const char *const axis_attrs[] = {"axis", NULL};

#define FLOATS3(op, sup, fn, attrs) \
    CU_K(op, GDP_F32, sup, fn, attrs), CU_K(op, GDP_F16, sup, fn, attrs), CU_K(op, GDP_BF16, sup, fn, attrs)

static const gdp_kernel kernels[] = {
    FLOATS3("embedding_grad", embedding_grad_supports, embedding_grad_run_launch, NULL),
    FLOATS3("index_select_grad", index_select_grad_supports, index_select_grad_run_launch, axis_attrs),
    CU_KX("mse", GDP_F32, 0, mse_supports, mse_run_launch, NULL, mse_workspace),
    CU_KX("mse", GDP_F16, 0, mse_supports, mse_run_launch, NULL, mse_workspace),
    CU_KX("mse", GDP_BF16, 0, mse_supports, mse_run_launch, NULL, mse_workspace),
};
CU_FAMILY(index, kernels);
