/* reduce.cu — the reduce family (src/ops/reduce.c): sum, mean, max, max_grad, argmax,
 * global_norm (expand is a view: no kernel), and the mixed forms of sum and mean that read
 * f16/bf16 and write f32 ("bf16->f32", "f16->f32": the sum is kept in double either way,
 * the output is only rounded once, to f32).
 *
 * One walk serves every reduction: output element o and reduced position r (row-major
 * over the reduced axes) name the element of x at offset(o) + offset(r). A block reduces
 * one output over one chunk of r; when there are few outputs, several chunks per output
 * keep the GPU busy and a second pass folds the chunk results in chunk order. Sums are
 * kept in double and both passes combine in a fixed order: results are deterministic (no
 * atomics) and within rounding of the reference's sequential double sum. max/argmax keep
 * the reference's choice: the first maximal element, NaN counting as the largest.
 *
 * sum and mean have faster paths for the common layouts, where the reduced axes form one
 * contiguous run: x is then (A, R, C) with R reduced. C == 1 (whole tensors, rows) gives
 * each warp a contiguous segment read with 16-byte vectors; C > 1 (columns) gives each
 * thread a column segment, neighbouring threads reading neighbouring columns. Both split
 * R into chunks when the outputs alone would not fill the GPU, and fold the chunks in a
 * second pass in a fixed order: deterministic, and at memory bandwidth.
 *
 * Partial results live in the node's workspace: each kernel's plan (how many chunks) is
 * made from shapes alone, once when the host asks for the workspace size and again at
 * launch, so the two agree.
 */
#include "cu_vec.h"
#include "cuda_internal.h"

#include <string.h>

#define THREADS 256

enum { R_SUM, R_SUMSQ, R_MAX };

typedef struct rdesc {
    int n_keep, n_red;
    int64_t keep_shape[GDP_MAX_DIMS], keep_stride[GDP_MAX_DIMS];
    int64_t red_shape[GDP_MAX_DIMS], red_stride[GDP_MAX_DIMS];
    int64_t n_out, len; /* outputs, reduced elements per output */
} rdesc;

/* Splits x's axes into kept and reduced ones (red[d] != 0). */
static void rdesc_init(rdesc *r, const gdp_tensor *x, const int *red)
{
    memset(r, 0, sizeof *r);
    int64_t stride[GDP_MAX_DIMS], s = 1;
    for (int d = x->ndim - 1; d >= 0; d--) stride[d] = s, s *= x->shape[d];
    r->n_out = 1, r->len = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (red[d]) {
            r->red_shape[r->n_red] = x->shape[d], r->red_stride[r->n_red++] = stride[d];
            r->len *= x->shape[d];
        } else {
            r->keep_shape[r->n_keep] = x->shape[d], r->keep_stride[r->n_keep++] = stride[d];
            r->n_out *= x->shape[d];
        }
    }
}

static __device__ __forceinline__ int64_t unravel(int64_t i, int n, const int64_t *shape, const int64_t *stride)
{
    int64_t off = 0;
    for (int d = n - 1; d >= 0; d--) {
        off += (i % shape[d]) * stride[d];
        i /= shape[d];
    }
    return off;
}

/* The reference's order: a later element replaces the best only if strictly larger, or
 * NaN over a number; so among equals (and among NaNs) the smaller position wins. */
static __device__ __forceinline__ int better(double v, int64_t i, double bv, int64_t bi)
{
    if (bi < 0) return i >= 0;
    if (i < 0) return 0;
    int vn = v != v, bn = bv != bv;
    if (vn != bn) return vn;
    if (!vn && v != bv) return v > bv;
    return i < bi;
}

/* Block b reduces output o = b / chunks over chunk c = b % chunks of its positions into
 * part_v[b] (and part_i[b] for R_MAX). */
template <typename T>
__global__ void reduce_kernel(const T *x, rdesc r, int mode, int64_t chunks, double *part_v, int64_t *part_i)
{
    __shared__ double sv[THREADS];
    __shared__ int64_t si[THREADS];
    int64_t clen = (r.len + chunks - 1) / chunks;
    for (int64_t b = blockIdx.x; b < r.n_out * chunks; b += gridDim.x) {
        int64_t o = b / chunks, c = b % chunks;
        int64_t base = unravel(o, r.n_keep, r.keep_shape, r.keep_stride);
        int64_t lo = c * clen, hi = lo + clen < r.len ? lo + clen : r.len;
        double acc = 0.0;
        int64_t best = -1;
        for (int64_t p = lo + threadIdx.x; p < hi; p += blockDim.x) {
            double v = (double)cu_ld(x, base + unravel(p, r.n_red, r.red_shape, r.red_stride));
            if (mode == R_SUM) acc += v;
            else if (mode == R_SUMSQ) acc += v * v;
            else if (better(v, p, acc, best)) acc = v, best = p;
        }
        sv[threadIdx.x] = acc;
        si[threadIdx.x] = best;
        __syncthreads();
        for (int w = blockDim.x / 2; w > 0; w /= 2) {
            if (threadIdx.x < w) {
                int j = threadIdx.x + w;
                if (mode != R_MAX) sv[threadIdx.x] += sv[j];
                else if (better(sv[j], si[j], sv[threadIdx.x], si[threadIdx.x]))
                    sv[threadIdx.x] = sv[j], si[threadIdx.x] = si[j];
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            part_v[b] = sv[0];
            if (part_i != NULL) part_i[b] = si[0];
        }
        __syncthreads(); /* sv is reused by this block's next output */
    }
}

/* Folds each output's chunks in chunk order: sums (divided by div: mean divides as the
 * reference does), or the best position. */
__global__ void fold_kernel(const double *part_v, const int64_t *part_i, int64_t n_out, int64_t chunks, int mode,
                            double div, double *out_v, int64_t *out_i)
{
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n_out; o += (int64_t)gridDim.x * blockDim.x) {
        double acc = part_v[o * chunks];
        int64_t best = part_i != NULL ? part_i[o * chunks] : -1;
        for (int64_t c = 1; c < chunks; c++) {
            double v = part_v[o * chunks + c];
            if (mode != R_MAX) acc += v;
            else if (better(v, part_i[o * chunks + c], acc, best)) acc = v, best = part_i[o * chunks + c];
        }
        out_v[o] = acc / div;
        if (out_i != NULL) out_i[o] = best;
    }
}

template <typename T>
__global__ void store_kernel(const double *v, T *y, int64_t n, int sqrt_it)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        cu_std(y, i, sqrt_it ? sqrt(v[i]) : v[i]);
}

/* y[o] = x[offset of o's best position]: a bit copy, as the reference's max. */
template <typename T>
__global__ void gather_max_kernel(const T *x, rdesc r, const int64_t *best, T *y)
{
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < r.n_out; o += (int64_t)gridDim.x * blockDim.x)
        y[o] = x[unravel(o, r.n_keep, r.keep_shape, r.keep_stride) +
                 unravel(best[o], r.n_red, r.red_shape, r.red_stride)];
}

/* dx (zeroed before) gets dy[o] at o's best position. */
template <typename T>
__global__ void scatter_max_kernel(const T *dy, rdesc r, const int64_t *best, T *dx)
{
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < r.n_out; o += (int64_t)gridDim.x * blockDim.x)
        dx[unravel(o, r.n_keep, r.keep_shape, r.keep_stride) + unravel(best[o], r.n_red, r.red_shape, r.red_stride)] =
            dy[o];
}

/* ---- host side --------------------------------------------------------------------------------- */

/* Chunks per output: enough blocks for the machine, each chunk a few thousand elements. */
static int64_t chunks_for(const cu_backend *be, const rdesc *r)
{
    int64_t want = (int64_t)(be->sm_count > 0 ? be->sm_count : 80) * 4;
    if (r->n_out >= want || r->len <= 4096) return 1;
    int64_t c = (want + r->n_out - 1) / r->n_out, by_len = (r->len + 4095) / 4096;
    return c < by_len ? c : by_len;
}

/* Scratch reduce_into needs for r: the chunks' partial values and positions. */
static size_t reduce_scratch(const cu_backend *be, const rdesc *r)
{
    int64_t chunks = chunks_for(be, r);
    return chunks > 1 ? (size_t)(r->n_out * chunks) * (sizeof(double) + sizeof(int64_t)) : 0;
}

/* Runs the reduction of x into out_v (doubles, n_out of them) and, for R_MAX, out_i
 * (positions); scratch holds reduce_scratch(be, r) bytes. */
static gdp_status reduce_into(cu_backend *be, cudaStream_t s, const gdp_tensor *x, const rdesc *r, int mode,
                              double div, double *out_v, int64_t *out_i, char *scratch, gdp_err *err)
{
    int64_t chunks = chunks_for(be, r);
    double *pv = out_v;
    int64_t *pi = out_i;
    if (chunks > 1) {
        size_t nb = (size_t)(r->n_out * chunks);
        pv = (double *)scratch;
        pi = (int64_t *)(pv + nb);
    }
    unsigned grid = cu_blocks(be, r->n_out * chunks * THREADS, THREADS);
    switch (x->dtype) {
    case GDP_F32: reduce_kernel<float><<<grid, THREADS, 0, s>>>((const float *)x->data, *r, mode, chunks, pv, mode == R_MAX ? pi : NULL); break;
    case GDP_F16: reduce_kernel<__half><<<grid, THREADS, 0, s>>>((const __half *)x->data, *r, mode, chunks, pv, mode == R_MAX ? pi : NULL); break;
    case GDP_BF16: reduce_kernel<__nv_bfloat16><<<grid, THREADS, 0, s>>>((const __nv_bfloat16 *)x->data, *r, mode, chunks, pv, mode == R_MAX ? pi : NULL); break;
    default: return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda reduce: dtype %d", (int)x->dtype);
    }
    if (chunks > 1 || div != 1.0)
        fold_kernel<<<cu_blocks(be, r->n_out, THREADS), THREADS, 0, s>>>(pv, mode == R_MAX ? pi : NULL, r->n_out, chunks,
                                                                         mode, div, out_v, mode == R_MAX ? out_i : NULL);
    return GDP_OK;
}

/* The "axes" attribute as reduce.c reads it: none or empty means every axis. */
static int parse_axes(const gdp_node *n, const gdp_tensor *x, int *red)
{
    int64_t ax[GDP_MAX_DIMS + 1];
    int k = gdp_attr_ints(&n->attrs, "axes", ax, GDP_MAX_DIMS + 1);
    if (k > GDP_MAX_DIMS) return 0;
    for (int d = 0; d < GDP_MAX_DIMS; d++) red[d] = k == 0;
    for (int i = 0; i < k; i++) {
        int a = cu_axis(ax[i], x->ndim);
        if (a < 0 || red[a]) return 0;
        red[a] = 1;
    }
    return 1;
}

static int all_float(const gdp_node *n, int32_t dt)
{
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i]->dtype != dt) return 0;
    for (int i = 0; i < n->n_out; i++)
        if (n->out[i]->dtype != dt) return 0;
    return cu_gpu_float(dt);
}

static int is_sum(const gdp_node *n) { return strcmp(n->op, "sum") == 0 || strcmp(n->op, "mean") == 0; }

/* Uniform nodes, and sum/mean of f16/bf16 into f32 (the mixed forms). */
static int reduce_dtypes_ok(const gdp_node *n)
{
    int32_t dt = n->in[0]->dtype;
    if (all_float(n, dt)) return 1;
    return is_sum(n) && n->n_in == 1 && n->n_out == 1 && gdp_is_half(dt) && n->out[0]->dtype == GDP_F32;
}

/* y[i] = v[i] (or its square root), rounded as the reference rounds a double. */
static gdp_status store_doubles(cu_backend *be, cudaStream_t s, const double *v, const gdp_tensor *y, int64_t n,
                                int sqrt_it, gdp_err *err)
{
    unsigned g = cu_blocks(be, n, THREADS);
    switch (y->dtype) {
    case GDP_F32: store_kernel<float><<<g, THREADS, 0, s>>>(v, (float *)y->data, n, sqrt_it); break;
    case GDP_F16: store_kernel<__half><<<g, THREADS, 0, s>>>(v, (__half *)y->data, n, sqrt_it); break;
    case GDP_BF16: store_kernel<__nv_bfloat16><<<g, THREADS, 0, s>>>(v, (__nv_bfloat16 *)y->data, n, sqrt_it); break;
    default: return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda reduce: output dtype %d", (int)y->dtype);
    }
    return GDP_OK;
}

/* ---- sum and mean over a contiguous run of axes -------------------------------------------- */

/* x as (A, R, C) with the R part reduced, when the reduced axes are one contiguous run once
 * axes of size 1 (which do not move anything) are ignored. 0 when they are not. */
static int as_arc(const gdp_tensor *x, const int *red, int64_t *A, int64_t *R, int64_t *C)
{
    int phase = 0; /* 0: leading kept axes, 1: reduced axes, 2: trailing kept axes */
    *A = *R = *C = 1;
    for (int d = 0; d < x->ndim; d++) {
        int64_t n = x->shape[d];
        if (n == 1) continue;
        if (red[d]) {
            if (phase == 2) return 0;
            phase = 1, *R *= n;
        } else if (phase == 0) {
            *A *= n;
        } else {
            phase = 2, *C *= n;
        }
    }
    return 1;
}

#define RED_THREADS 256

// x (A, R): unit u = a * chunks + c, one warp, sums x[a, c*clen .. min((c+1)*clen, R)) into
// part[u], or into y[a] (divided by div) when there is one chunk (part == NULL)
template <typename T, typename U>
__global__ void __launch_bounds__(RED_THREADS) rows_sum_kernel(const T *x, int64_t A, int64_t R, int64_t chunks,
                                                               int64_t clen, int vec, double *part, U *y, double div)
{
    constexpr int N = cu_vec<T>::N;
    const int lane = threadIdx.x & 31;
    const int64_t wpb = blockDim.x >> 5, warps = (int64_t)gridDim.x * wpb;
    for (int64_t u = blockIdx.x * wpb + (threadIdx.x >> 5); u < A * chunks; u += warps) {
        const int64_t a = u / chunks, c = u % chunks;
        const int64_t lo = a * R + c * clen, hi = a * R + ((c + 1) * clen < R ? (c + 1) * clen : R);
        double acc[N];
#pragma unroll
        for (int k = 0; k < N; k++) acc[k] = 0.0;
        if (vec) { /* lo, hi multiples of N (R and clen are), x 16-byte aligned */
            const int64_t nv = (hi - lo) / N;
#pragma unroll 4
            for (int64_t v = lane; v < nv; v += 32) {
                float f[N];
                cu_ld16(x, lo + v * N, f);
#pragma unroll
                for (int k = 0; k < N; k++) acc[k] += (double)f[k];
            }
        } else {
#pragma unroll 4
            for (int64_t i = lo + lane; i < hi; i += 32) acc[0] += (double)cu_ld(x, i);
        }
        double t = 0.0;
#pragma unroll
        for (int k = 0; k < N; k++) t += acc[k];
        t = cu_warp_sum_d(t);
        if (lane == 0) {
            if (part != NULL) part[u] = t;
            else cu_std(y, a, t / div);
        }
    }
}

/* y[o] = sum of part[o * chunks .. (o + 1) * chunks) / div: one block per output. */
template <typename U>
__global__ void __launch_bounds__(RED_THREADS) fold_rows_kernel(const double *part, int64_t n_out, int64_t chunks, U *y,
                                                                double div)
{
    __shared__ double sh[32];
    for (int64_t o = blockIdx.x; o < n_out; o += gridDim.x) {
        double acc = 0.0;
        for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) acc += part[o * chunks + c];
        acc = cu_block_sum_d(acc, sh);
        if (threadIdx.x == 0) cu_std(y, o, acc / div);
    }
}

// x (A, R, C): item i = k * (A*C) + a*C + c sums x[a, r, c] over r in chunk k into part[i],
// or into y[a*C + c] (divided by div) when there is one chunk (part == NULL)
template <typename T, typename U>
__global__ void cols_sum_kernel(const T *x, int64_t A, int64_t R, int64_t C, int64_t chunks, int64_t clen, double *part,
                                U *y, double div)
{
    const int64_t AC = A * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < chunks * AC; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = i / AC, ac = i % AC, a = ac / C, c = ac % C;
        const int64_t r0 = k * clen, r1 = r0 + clen < R ? r0 + clen : R;
        const T *p = x + (a * R + r0) * C + c;
        double acc = 0.0;
#pragma unroll 4
        for (int64_t r = r0; r < r1; r++, p += C) acc += (double)cu_ld(p, 0);
        if (part != NULL) part[i] = acc;
        else cu_std(y, ac, acc / div);
    }
}

/* The same sums read in 16-byte vectors along C (C a multiple of N = cu_vec<T>::N, x 16-byte
 * aligned), for bias gradients: 16384 rows of 768 to 3072 bf16 columns. A block of
 * 32 x COLS_TILE_Y threads takes a slab of 32 column groups (N columns each) of one plane
 * over one chunk of rows: lane x reads group x, the block's rows go out to its y rows in
 * turn (row r0 + y, r0 + y + COLS_TILE_Y, ...), so each warp reads 512 contiguous bytes a
 * row and a block keeps 8 rows' loads in flight. The y partial sums are added in y order
 * through shared memory, and the block writes one partial a column: part[k * A*C + o] (a
 * warp's writes contiguous, folded by fold_cols_tile_kernel), or y when there is one chunk.
 * Everything in double, in a fixed order. */
#define COLS_TILE_Y 8
template <typename T, typename U>
__global__ void __launch_bounds__(32 * COLS_TILE_Y)
    cols_sum_tile_kernel(const T *x, int64_t A, int64_t R, int64_t C, int64_t slabs, int64_t chunks, int64_t clen,
                         double *part, U *y, double div)
{
    constexpr int N = cu_vec<T>::N;
    __shared__ double sh[COLS_TILE_Y - 1][N][32];
    const int64_t G = C / N, blocks = A * slabs * chunks;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int64_t blk = blockIdx.x; blk < blocks; blk += gridDim.x) {
        const int64_t k = blk % chunks, as = blk / chunks, a = as / slabs, g = (as % slabs) * 32 + tx;
        const int64_t r0 = k * clen, r1 = r0 + clen < R ? r0 + clen : R;
        double acc[N];
#pragma unroll
        for (int j = 0; j < N; j++) acc[j] = 0.0;
        if (g < G) {
            const T *p = x + (a * R + r0 + ty) * C + g * N;
#pragma unroll 8
            for (int64_t r = r0 + ty; r < r1; r += COLS_TILE_Y, p += COLS_TILE_Y * C) {
                float f[N];
                cu_ld16(p, 0, f);
#pragma unroll
                for (int j = 0; j < N; j++) acc[j] += (double)f[j];
            }
        }
        if (ty > 0) {
#pragma unroll
            for (int j = 0; j < N; j++) sh[ty - 1][j][tx] = acc[j];
        }
        __syncthreads();
        if (ty == 0 && g < G) {
            for (int yy = 0; yy < COLS_TILE_Y - 1; yy++) {
#pragma unroll
                for (int j = 0; j < N; j++) acc[j] += sh[yy][j][tx];
            }
            const int64_t o = a * C + g * N;
#pragma unroll
            for (int j = 0; j < N; j++) {
                if (part != NULL) part[k * A * C + o + j] = acc[j];
                else cu_std(y, o + j, acc[j] / div);
            }
        }
        __syncthreads(); /* sh is refilled by the block's next tile */
    }
}

/* y[o] = sum over k of part[k * n_out + o] / div, for cols_sum_tile_kernel's partials: a
 * block of 32 x COLS_TILE_Y threads takes 32 outputs, its y rows the chunks y, y + 8, ...,
 * added in y order at the end, so the result depends on the shapes alone. */
template <typename U>
__global__ void __launch_bounds__(32 * COLS_TILE_Y)
    fold_cols_tile_kernel(const double *part, int64_t n_out, int64_t chunks, U *y, double div)
{
    __shared__ double sh[COLS_TILE_Y - 1][32];
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int64_t o0 = blockIdx.x * (int64_t)32; o0 < n_out; o0 += (int64_t)gridDim.x * 32) {
        const int64_t o = o0 + tx;
        double acc = 0.0;
        if (o < n_out) {
#pragma unroll 4
            for (int64_t k = ty; k < chunks; k += COLS_TILE_Y) acc += part[k * n_out + o];
        }
        if (ty > 0) sh[ty - 1][tx] = acc;
        __syncthreads();
        if (ty == 0 && o < n_out) {
            for (int yy = 0; yy < COLS_TILE_Y - 1; yy++) acc += sh[yy][tx];
            cu_std(y, o, acc / div);
        }
        __syncthreads();
    }
}

/* y[o] = sum over k of part[k * n_out + o] / div: a thread per output, chunks in order. */
template <typename U>
__global__ void fold_cols_kernel(const double *part, int64_t n_out, int64_t chunks, U *y, double div)
{
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n_out; o += (int64_t)gridDim.x * blockDim.x) {
        double acc = 0.0;
        for (int64_t k = 0; k < chunks; k++) acc += part[k * n_out + o];
        cu_std(y, o, acc / div);
    }
}

/* Column sums of short planes (R up to COLS_SMALL_R rows) in one kernel, where the chunked
 * pair above would spend a second launch on the fold: a block takes 32 columns of one
 * plane, its COLS_GROUPS warps a run of rows each, and the first warp adds the runs' sums
 * in order, so the result does not depend on timing. */
#define COLS_GROUPS 8
#define COLS_SMALL_R 1024
template <typename T, typename U>
__global__ void cols_sum_small_kernel(const T *x, int64_t A, int64_t R, int64_t C, U *y, double div)
{
    __shared__ double sh[COLS_GROUPS][32];
    const int64_t col_blocks = (C + 31) / 32;
    const int64_t a = blockIdx.x / col_blocks, c = (blockIdx.x % col_blocks) * 32 + threadIdx.x;
    const int64_t run = (R + COLS_GROUPS - 1) / COLS_GROUPS, r0 = threadIdx.y * run;
    const int64_t r1 = r0 + run < R ? r0 + run : R;
    double acc = 0.0;
    if (c < C) {
        const T *p = x + (a * R + r0) * C + c;
#pragma unroll 4
        for (int64_t r = r0; r < r1; r++, p += C) acc += (double)cu_ld(p, 0);
    }
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        double t = 0.0;
        for (int k = 0; k < COLS_GROUPS; k++) t += sh[k][threadIdx.x];
        cu_std(y, a * C + c, t / div);
    }
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Chunks of R so that about `want` work items exist, each at least `min_len` long; the
 * chunk length a multiple of `align`. R = 0 gives one empty chunk. */
static void split_r(int64_t R, int64_t items, int64_t want, int64_t min_len, int64_t align, int64_t *chunks,
                    int64_t *clen)
{
    *chunks = 1, *clen = R;
    if (R <= min_len || items >= want) return;
    int64_t c = ceil_div(want, items), by_len = ceil_div(R, min_len);
    if (c > by_len) c = by_len;
    int64_t len = ceil_div(ceil_div(R, c), align) * align;
    *clen = len;
    *chunks = ceil_div(R, len);
}

/* The fast path's split of R. `align` is the vector width when x is read in vectors:
 * the workspace is sized with align 1, which gives the most chunks. */
static void sum_fast_split(const cu_backend *be, int64_t A, int64_t R, int64_t C, int64_t align, int64_t *chunks,
                           int64_t *clen)
{
    const int64_t sms = be->sm_count > 0 ? be->sm_count : 80;
    if (C == 1) {
        /* a warp per unit. With 8 rows per SM or more, whole rows keep enough loads in
         * flight; fewer rows are split so that there are about 32 warps per SM. */
        if (A >= sms * 8) *chunks = 1, *clen = R;
        else split_r(R, A, sms * 32, 2048, align, chunks, clen);
    } else {
        /* a thread per (column, chunk); a full GPU holds 2048 threads per SM */
        split_r(R, A * C, sms * 2048, 16, 1, chunks, clen);
    }
}

/* The split of cols_sum_tile_kernel: slabs of 32 groups of n columns, and chunks of R so
 * that about four blocks of 256 threads run an SM, each chunk at least 64 rows. Measured on
 * the H200 over 16384 bf16 rows (bias gradients), ms with two / four / eight blocks an SM:
 * 2304 columns 0.0287 / 0.0246 / 0.0276, 3072 columns 0.0362 / 0.0309 / 0.0345, 768 columns
 * 0.0094 / 0.0101 / 0.0110 (there the partials' fold costs more than the reads gain). */
static void cols_tile_split(const cu_backend *be, int64_t A, int64_t R, int64_t C, int64_t n, int64_t *slabs,
                            int64_t *chunks, int64_t *clen)
{
    const int64_t sms = be->sm_count > 0 ? be->sm_count : 80;
    *slabs = ceil_div(C / n, 32); /* C is a multiple of n (n <= C) */
    split_r(R, A * *slabs, sms * 4, 64, 1, chunks, clen);
}

template <typename T, typename U>
static gdp_status sum_fast(cu_backend *be, cudaStream_t s, const gdp_tensor *x, const gdp_tensor *y, int64_t A,
                           int64_t R, int64_t C, double div, double *part)
{
    const T *px = (const T *)x->data;
    U *py = (U *)y->data;
    const int64_t n_out = A * C, sms = be->sm_count > 0 ? be->sm_count : 80;
    if (n_out == 0) return GDP_OK;
    int64_t chunks, clen;
    if (C == 1) {
        const int N = cu_vec<T>::N;
        int vec = cu_aligned16(px) && R % N == 0;
        sum_fast_split(be, A, R, C, vec ? N : 1, &chunks, &clen);
        rows_sum_kernel<T, U><<<cu_blocks(be, A * chunks * 32, RED_THREADS), RED_THREADS, 0, s>>>(
            px, A, R, chunks, clen, vec, chunks > 1 ? part : (double *)NULL, chunks > 1 ? (U *)NULL : py, div);
        if (chunks > 1) {
            unsigned g = (unsigned)(A < sms * 8 ? A : sms * 8);
            fold_rows_kernel<U><<<g, RED_THREADS, 0, s>>>(part, A, chunks, py, div);
        }
    } else {
        sum_fast_split(be, A, R, C, 1, &chunks, &clen);
        if (chunks > 1 && R <= COLS_SMALL_R && A * ((C + 31) / 32) <= INT32_MAX) {
            cols_sum_small_kernel<T, U><<<(unsigned)(A * ((C + 31) / 32)), dim3(32, COLS_GROUPS), 0, s>>>(px, A, R, C, py,
                                                                                                         div);
            return GDP_OK;
        }
        const int N = cu_vec<T>::N;
        if (C % N == 0 && cu_aligned16(px)) {
            int64_t slabs;
            cols_tile_split(be, A, R, C, N, &slabs, &chunks, &clen);
            const int64_t blocks = A * slabs * chunks;
            cols_sum_tile_kernel<T, U><<<(unsigned)(blocks < sms * 32 ? blocks : sms * 32), dim3(32, COLS_TILE_Y), 0, s>>>(
                px, A, R, C, slabs, chunks, clen, chunks > 1 ? part : (double *)NULL, chunks > 1 ? (U *)NULL : py, div);
            if (chunks > 1) {
                const int64_t fb = ceil_div(n_out, 32);
                fold_cols_tile_kernel<U><<<(unsigned)(fb < sms * 32 ? fb : sms * 32), dim3(32, COLS_TILE_Y), 0, s>>>(
                    part, n_out, chunks, py, div);
            }
            return GDP_OK;
        }
        cols_sum_kernel<T, U><<<cu_blocks(be, n_out * chunks, RED_THREADS), RED_THREADS, 0, s>>>(
            px, A, R, C, chunks, clen, chunks > 1 ? part : (double *)NULL, chunks > 1 ? (U *)NULL : py, div);
        if (chunks > 1)
            fold_cols_kernel<U><<<cu_blocks(be, n_out, RED_THREADS), RED_THREADS, 0, s>>>(part, n_out, chunks, py, div);
    }
    return GDP_OK;
}

/* sum, mean, max, max_grad: float x, the axes attribute valid, and nothing empty (an
 * empty reduction is 0, NaN or an error in the reference: rare enough to leave to it). */
static int reduce_supports(void *b, const gdp_node *n)
{
    (void)b;
    int red[GDP_MAX_DIMS];
    int is_grad = strcmp(n->op, "max_grad") == 0;
    if (n->n_out != 1 || n->n_in != (is_grad ? 2 : 1) || !reduce_dtypes_ok(n)) return 0;
    const gdp_tensor *x = n->in[is_grad ? 1 : 0];
    if (!parse_axes(n, x, red)) return 0;
    rdesc r;
    rdesc_init(&r, x, red);
    /* sum and mean of nothing (0, and 0/0 for mean, as the reference) only on the fast path */
    int64_t A, R, C;
    if (gdp_numel(x) == 0 && !(is_sum(n) && as_arc(x, red, &A, &R, &C))) return 0;
    /* The output has the kept dims' element count (keepdims only inserts 1s). */
    return gdp_numel(n->out[0]) == (is_grad ? gdp_numel(x) : r.n_out) && (!is_grad || gdp_numel(n->in[0]) == r.n_out);
}

/* Bytes of scratch sum/mean use: the fast path's partial sums, or the general path's
 * doubles and reduce_into's chunks. */
static size_t sum_scratch(const cu_backend *be, const gdp_node *n)
{
    const gdp_tensor *x = n->in[0];
    int red[GDP_MAX_DIMS];
    if (!parse_axes(n, x, red)) return 0;
    int64_t A, R, C, chunks, clen;
    if (as_arc(x, red, &A, &R, &C)) {
        sum_fast_split(be, A, R, C, 1, &chunks, &clen);
        const int64_t vn = 16 / (int64_t)gdp_dtype_size(x->dtype);
        if (C > 1 && C % vn == 0) { /* the vector path's chunks, when x turns out to be aligned */
            int64_t slabs, tchunks, tclen;
            cols_tile_split(be, A, R, C, vn, &slabs, &tchunks, &tclen);
            if (tchunks > chunks) chunks = tchunks;
        }
        return chunks > 1 ? (size_t)(A * C * chunks) * sizeof(double) : 0;
    }
    rdesc r;
    rdesc_init(&r, x, red);
    return cu_ws_round((size_t)r.n_out * sizeof(double)) + reduce_scratch(be, &r);
}

static size_t sum_workspace(void *b, const gdp_node *n) { return cu_ws_declare(sum_scratch((const cu_backend *)b, n)); }

static gdp_status sum_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *y = node->out[0];
    char *ws = NULL;
    gdp_status st = cu_ws(node, sum_scratch(be, node), &ws, err);
    if (st != GDP_OK) return st;
    int red[GDP_MAX_DIMS];
    parse_axes(node, x, red);
    rdesc r;
    rdesc_init(&r, x, red);
    double div = strcmp(node->op, "mean") == 0 ? (double)r.len : 1.0;
    int64_t A, R, C;
    if (as_arc(x, red, &A, &R, &C)) {
        int mixed = y->dtype != x->dtype;
        CU_FLOAT_SWITCH(x->dtype, T,
                        st = mixed ? sum_fast<T, float>(be, s, x, y, A, R, C, div, (double *)ws)
                                   : sum_fast<T, T>(be, s, x, y, A, R, C, div, (double *)ws));
        return st;
    }
    double *acc = (double *)ws;
    st = reduce_into(be, s, x, &r, R_SUM, div, acc, NULL, ws + cu_ws_round((size_t)r.n_out * sizeof(double)), err);
    if (st == GDP_OK) st = store_doubles(be, s, acc, y, r.n_out, 0, err);
    return st;
}
CU_LAUNCHER(sum_run)

/* max and max_grad find, per output, the position of the first maximal element: values
 * and positions, then reduce_into's chunks. */
static size_t max_scratch(const cu_backend *be, const gdp_node *n, rdesc *r)
{
    int is_grad = strcmp(n->op, "max_grad") == 0;
    const gdp_tensor *x = n->in[is_grad ? 1 : 0];
    int red[GDP_MAX_DIMS];
    memset(r, 0, sizeof *r);
    if (!parse_axes(n, x, red)) return 0;
    rdesc_init(r, x, red);
    return cu_ws_round((size_t)r->n_out * (sizeof(double) + sizeof(int64_t))) + reduce_scratch(be, r);
}

static size_t max_workspace(void *b, const gdp_node *n)
{
    rdesc r;
    return cu_ws_declare(max_scratch((const cu_backend *)b, n, &r));
}

static gdp_status max_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    int is_grad = strcmp(node->op, "max_grad") == 0;
    const gdp_tensor *x = node->in[is_grad ? 1 : 0], *y = node->out[0];
    rdesc r;
    char *ws = NULL;
    gdp_status st = cu_ws(node, max_scratch(be, node, &r), &ws, err);
    if (st != GDP_OK) return st;
    size_t n = (size_t)r.n_out;
    double *v = (double *)ws;
    int64_t *best = (int64_t *)(v + n);
    st = reduce_into(be, s, x, &r, R_MAX, 1.0, v, best, ws + cu_ws_round(n * (sizeof(double) + sizeof(int64_t))), err);
    if (st == GDP_OK && is_grad)
        st = cu_check(cudaMemsetAsync(y->data, 0, (size_t)gdp_numel(y) * gdp_dtype_size(y->dtype), s), "cudaMemsetAsync",
                      err);
    if (st == GDP_OK) {
        unsigned g = cu_blocks(be, r.n_out, THREADS);
        const void *src = is_grad ? node->in[0]->data : x->data;
        /* Bit copies, so one instantiation per element size. */
        if (gdp_dtype_size(y->dtype) == 4) {
            if (is_grad) scatter_max_kernel<uint32_t><<<g, THREADS, 0, s>>>((const uint32_t *)src, r, best, (uint32_t *)y->data);
            else gather_max_kernel<uint32_t><<<g, THREADS, 0, s>>>((const uint32_t *)src, r, best, (uint32_t *)y->data);
        } else {
            if (is_grad) scatter_max_kernel<uint16_t><<<g, THREADS, 0, s>>>((const uint16_t *)src, r, best, (uint16_t *)y->data);
            else gather_max_kernel<uint16_t><<<g, THREADS, 0, s>>>((const uint16_t *)src, r, best, (uint16_t *)y->data);
        }
    }
    return st;
}
CU_LAUNCHER(max_run)

static int argmax_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 1 || n->n_out != 1 || !cu_gpu_float(n->in[0]->dtype) || n->out[0]->dtype != GDP_I64) return 0;
    const gdp_tensor *x = n->in[0];
    int a = cu_axis(gdp_attr_int(&n->attrs, "axis", -1), x->ndim);
    return a >= 0 && x->shape[a] > 0 && gdp_numel(n->out[0]) == gdp_numel(x) / x->shape[a];
}

/* argmax reduces one axis: its values, then reduce_into's chunks. */
static size_t argmax_scratch(const cu_backend *be, const gdp_node *n, rdesc *r)
{
    const gdp_tensor *x = n->in[0];
    int red[GDP_MAX_DIMS] = {0};
    memset(r, 0, sizeof *r);
    int a = cu_axis(gdp_attr_int(&n->attrs, "axis", -1), x->ndim);
    if (a < 0) return 0;
    red[a] = 1;
    rdesc_init(r, x, red);
    return cu_ws_round((size_t)r->n_out * sizeof(double)) + reduce_scratch(be, r);
}

static size_t argmax_workspace(void *b, const gdp_node *n)
{
    rdesc r;
    return cu_ws_declare(argmax_scratch((const cu_backend *)b, n, &r));
}

// x (outer, n, inner) -> y (outer, inner) i64: the index along axis of the first maximum
static gdp_status argmax_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    rdesc r;
    char *ws = NULL;
    gdp_status st = cu_ws(node, argmax_scratch(be, node, &r), &ws, err);
    if (st != GDP_OK || r.n_out == 0) return st;
    /* With one reduced axis the position is the index along it: written straight out. */
    return reduce_into(be, s, node->in[0], &r, R_MAX, 1.0, (double *)ws, (int64_t *)node->out[0]->data,
                       ws + cu_ws_round((size_t)r.n_out * sizeof(double)), err);
}
CU_LAUNCHER(argmax_run)

/* inputs of one dtype; the result in any float dtype (attribute dtype: bf16 gradients'
 * norm in f32) */
static int global_norm_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in < 1 || n->n_out != 1 || !cu_gpu_float(n->out[0]->dtype) || gdp_numel(n->out[0]) != 1) return 0;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i]->dtype != n->in[0]->dtype) return 0;
    return cu_gpu_float(n->in[0]->dtype);
}

/* global_norm over a node's tensors (a model's gradients, up to GDP_MAX_INPUTS a node)
 * in two launches, not a reduction or two per tensor: the tensors are cut into chunks of
 * GN_CHUNK elements, a block takes a chunk (the list of tensors rides in the kernel's
 * parameters) and writes its sum of squares in double to the chunk's slot; one block then
 * adds the slots in chunk order and takes the root. Deterministic: each slot's sum is in a
 * fixed order, and so is the fold. */
#define GN_CHUNK 32768
#define GN_LIST GDP_MAX_INPUTS

typedef struct gn_list {
    const void *p[GN_LIST];
    int64_t n[GN_LIST];
    int64_t first[GN_LIST + 1]; /* chunk index (within the launch) of each tensor's first chunk */
    int count, vec;             /* vec: every tensor 16-byte aligned */
} gn_list;

template <typename T>
__global__ void __launch_bounds__(THREADS) gn_chunks_kernel(gn_list l, double *slot)
{
    __shared__ double sh[32];
    for (int64_t c = blockIdx.x; c < l.first[l.count]; c += gridDim.x) {
        int lo = 0, hi = l.count - 1; /* the tensor whose chunks hold c */
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (l.first[mid] <= c) lo = mid;
            else hi = mid - 1;
        }
        const T *x = (const T *)l.p[lo];
        const int64_t b = (c - l.first[lo]) * GN_CHUNK, e = b + GN_CHUNK < l.n[lo] ? b + GN_CHUNK : l.n[lo];
        double acc = 0.0;
        constexpr int N = cu_vec<T>::N;
        /* whole vectors (a chunk starts on one: GN_CHUNK is a multiple of N), then the rest */
        const int64_t v_end = l.vec ? b + (e - b) / N * N : b;
#pragma unroll 4
        for (int64_t i = b + (int64_t)threadIdx.x * N; i < v_end; i += (int64_t)THREADS * N) {
            float f[N];
            cu_ld16(x, i, f);
#pragma unroll
            for (int k = 0; k < N; k++) acc += (double)f[k] * (double)f[k];
        }
        for (int64_t j = v_end + threadIdx.x; j < e; j += THREADS) {
            const double f = (double)cu_ld(x, j);
            acc += f * f;
        }
        acc = cu_block_sum_d(acc, sh);
        if (threadIdx.x == 0) slot[c] = acc;
    }
}

/* y = sqrt(sum of slot[0..n)), in a fixed order. */
template <typename T>
__global__ void __launch_bounds__(THREADS) gn_fold_kernel(const double *slot, int64_t n, T *y)
{
    __shared__ double sh[32];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += THREADS) acc += slot[i];
    acc = cu_block_sum_d(acc, sh);
    if (threadIdx.x == 0) cu_std(y, 0, sqrt(acc));
}

static int64_t gn_chunks(const gdp_tensor *t) { return (gdp_numel(t) + GN_CHUNK - 1) / GN_CHUNK; }

/* One slot per chunk of every input. */
static size_t global_norm_scratch(const gdp_node *n)
{
    int64_t c = 0;
    for (int k = 0; k < n->n_in; k++) c += gn_chunks(n->in[k]);
    return (size_t)(c > 0 ? c : 1) * sizeof(double);
}

static size_t global_norm_workspace(void *b, const gdp_node *n)
{
    (void)b;
    return cu_ws_declare(global_norm_scratch(n));
}

// xs[0..n) (any shapes) -> y () = sqrt(sum of squares of every element)
static gdp_status global_norm_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    char *ws = NULL;
    gdp_status st = cu_ws(node, global_norm_scratch(node), &ws, err);
    if (st != GDP_OK) return st;
    double *slot = (double *)ws;
    gn_list l;
    memset(&l, 0, sizeof l);
    l.vec = 1;
    int64_t chunks = 0;
    for (int k = 0; k < node->n_in && k < GN_LIST; k++) {
        const gdp_tensor *x = node->in[k];
        if (gdp_numel(x) == 0) continue;
        l.p[l.count] = x->data;
        l.n[l.count] = gdp_numel(x);
        l.first[l.count] = chunks;
        l.vec &= cu_aligned16(x->data);
        chunks += gn_chunks(x);
        l.count++;
    }
    l.first[l.count] = chunks;
    if (chunks > 0) {
        const int64_t cap = (int64_t)(be->sm_count > 0 ? be->sm_count : 80) * 8;
        const unsigned g = (unsigned)(chunks < cap ? chunks : cap);
        CU_FLOAT_SWITCH(node->in[0]->dtype, T, gn_chunks_kernel<T><<<g, THREADS, 0, s>>>(l, slot));
    }
    CU_FLOAT_SWITCH(node->out[0]->dtype, T, gn_fold_kernel<T><<<1, THREADS, 0, s>>>(slot, chunks, (T *)node->out[0]->data));
    return GDP_OK;
}
CU_LAUNCHER(global_norm_run)

static const char *const axes_attrs[] = {"axes", NULL};
static const char *const axis_attrs[] = {"axis", NULL};
static const char *const dtype_attrs[] = {"dtype", NULL};

#define RK(op, dt, sup, fn, attrs, ws) CU_KX(op, dt, 0, sup, fn, attrs, ws)
#define FLOATS3(op, sup, fn, attrs, ws) \
    RK(op, GDP_F32, sup, fn, attrs, ws), RK(op, GDP_F16, sup, fn, attrs, ws), RK(op, GDP_BF16, sup, fn, attrs, ws)

static const gdp_kernel kernels[] = {
    FLOATS3("sum", reduce_supports, sum_run_launch, axes_attrs, sum_workspace),
    FLOATS3("mean", reduce_supports, sum_run_launch, axes_attrs, sum_workspace),
    CU_KSIG("sum", "bf16->f32", reduce_supports, sum_run_launch, axes_attrs, sum_workspace),
    CU_KSIG("sum", "f16->f32", reduce_supports, sum_run_launch, axes_attrs, sum_workspace),
    CU_KSIG("mean", "bf16->f32", reduce_supports, sum_run_launch, axes_attrs, sum_workspace),
    CU_KSIG("mean", "f16->f32", reduce_supports, sum_run_launch, axes_attrs, sum_workspace),
    FLOATS3("max", reduce_supports, max_run_launch, axes_attrs, max_workspace),
    FLOATS3("max_grad", reduce_supports, max_run_launch, axes_attrs, max_workspace),
    FLOATS3("argmax", argmax_supports, argmax_run_launch, axis_attrs, argmax_workspace),
    FLOATS3("global_norm", global_norm_supports, global_norm_run_launch, dtype_attrs, global_norm_workspace),
};
CU_FAMILY(reduce, kernels);
