/* gemv.cu — products of a few rows of activations with a weight matrix: a decode step
 * multiplies one token per sequence by every weight matrix of the model, and at that shape
 * the time is the read of the weights, plus the launch, not arithmetic. cuBLASLt's GEMM
 * kernels tile for many rows and leave most of the machine idle there.
 *
 *   linear, linear_act   x (R, K), W (out, K) of x's dtype, R <= GEMV_MAX_ROWS (matmul.cu
 *                        sends them here; more rows, or W as (K, out), go to cuBLASLt)
 *   linear_qkv           three W of one x, their columns side by side in one grid
 *   linear_swiglu        silu(x Wg^T) * (x Wu^T): a warp reads row n of both
 *   linear_q8            int8 W with a scale per output channel, any R
 *   linear_w8a8          int8 W, each row of x quantized first (gw_quantize_kernel: gdp_q8,
 *                        into the node's workspace), then exact integer dot products
 *                        (__dp4a, four int8 products a step)
 *
 * Work split: a warp owns one output column n and a tile of up to RT rows of x; its lanes
 * stride over K reading W's row n in 16-byte pieces (8 halves, 4 floats or 16 int8) and the
 * matching pieces of the x rows (small, they stay in L1), then a butterfly sums the lanes.
 * Blocks of GEMV_WARPS warps, one grid row per tile of rows. Every sum runs in a fixed order
 * (each lane's pieces in K order, then the butterfly), so results are deterministic; the
 * float forms accumulate in f32 like cuBLASLt (the sweep's tolerance), linear_w8a8 in
 * integers and then the f32 steps gdp_q8_dequant fixes, bit for bit the reference's.
 *
 * Epilogues as the reference rounds: linear_act adds the bias in f32, rounds to the output
 * dtype, then applies the activation in double and rounds again (what cuBLASLt's bias
 * epilogue followed by the elementwise activation gives); linear_q8 scales and adds the
 * bias in double, as the reference's double accumulator does.
 *
 * The 16-byte path needs W's and x's rows to start on 16-byte boundaries (K a multiple of
 * the piece size, aligned pointers); otherwise every lane reads element by element.
 */
#include "cu_act.h"
#include "cu_vec.h"

#include <string.h>

#define GEMV_WARPS 4
#define GEMV_THREADS (GEMV_WARPS * 32)
#define GEMV_MAX_ROWS CU_GEMV_MAX_ROWS
#define GEMV_UNROLL 4 /* 16-byte loads of W a lane issues together */
#define GEMV_MAX_TILES 65535 /* grid rows */

enum { GW_FLOAT, GW_Q8, GW_SWIGLU }; /* W holds x's dtype, int8 with per-row scales, or the two
                                         halves of a gated MLP (w and w2) */

#define GW_SEGS 3 /* linear_qkv: three matrices, their outputs side by side in the grid */

typedef struct gw_args {
    const void *x, *bias;
    const void *w[GW_SEGS]; /* segment s: output columns [end[s-1], end[s]) of the grid */
    void *y[GW_SEGS];
    int64_t end[GW_SEGS];
    const void *w2;     /* GW_SWIGLU: the up matrix beside w[0], the gate */
    const float *scale; /* GW_Q8: one per output channel */
    int64_t R, N, K;    /* N: every segment's columns together */
    int act, vec;
} gw_args;

/* f[0..n) = p[0..n) widened to float; n * sizeof(T) a multiple of 16, p 16-byte aligned. */
template <typename T, int n> static __device__ __forceinline__ void gw_ld(const T *p, float *f)
{
    if constexpr (sizeof(T) == 1) {
#pragma unroll
        for (int v = 0; v < n / 16; v++) {
            int4 u = *reinterpret_cast<const int4 *>(p + v * 16);
            const int8_t *e = reinterpret_cast<const int8_t *>(&u);
#pragma unroll
            for (int k = 0; k < 16; k++) f[v * 16 + k] = (float)e[k];
        }
    } else {
        constexpr int per = 16 / (int)sizeof(T);
#pragma unroll
        for (int v = 0; v < n / per; v++) cu_ld16(p, (int64_t)v * per, f + v * per);
    }
}
static __device__ __forceinline__ float gw_ld1(const int8_t *p, int64_t i) { return (float)p[i]; }
template <typename T> static __device__ __forceinline__ float gw_ld1(const T *p, int64_t i) { return cu_ld(p, i); }

/* acc[r] = dot(x row r, w) for the warp's rows, summed over the lanes (every lane gets it). */
template <typename T, typename W, int RT>
static __device__ __forceinline__ void gw_dots(const T *x, const W *w, int64_t K, int vec, int rows, int lane, float *acc)
{
    constexpr int PIECE = 16 / (int)sizeof(W); /* elements of W per 16-byte load */
#pragma unroll
    for (int r = 0; r < RT; r++) acc[r] = 0.0f;
    const int64_t pieces = vec ? K / PIECE : 0;
    /* GEMV_UNROLL pieces of W in flight per lane before any is used: a row of a decode
     * step's matrix is a few pieces per lane, so this is most of a memory latency saved */
    for (int64_t p0 = lane; p0 < pieces; p0 += 32 * GEMV_UNROLL) {
        uint4 wraw[GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++)
            if (p0 + 32 * u < pieces) wraw[u] = *reinterpret_cast<const uint4 *>(w + (p0 + 32 * u) * PIECE);
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            const int64_t p = p0 + 32 * u;
            if (p >= pieces) break;
            float wf[PIECE];
            gw_ld<W, PIECE>(reinterpret_cast<const W *>(&wraw[u]), wf);
#pragma unroll
            for (int r = 0; r < RT; r++) {
                if (r >= rows) break;
                float xf[PIECE];
                gw_ld<T, PIECE>(x + r * K + p * PIECE, xf);
#pragma unroll
                for (int k = 0; k < PIECE; k++) acc[r] = fmaf(xf[k], wf[k], acc[r]);
            }
        }
    }
    for (int64_t k = pieces * PIECE + lane; k < K; k += 32) {
        float wv = gw_ld1(w, k);
#pragma unroll
        for (int r = 0; r < RT; r++)
            if (r < rows) acc[r] = fmaf(cu_ld(x, r * K + k), wv, acc[r]);
    }
#pragma unroll
    for (int r = 0; r < RT; r++) acc[r] = cu_warp_sum_f(acc[r]);
}

/* acc[lane] without dynamic register indexing. */
template <int RT> static __device__ __forceinline__ float gw_pick(const float *acc, int lane)
{
    float v = acc[0];
#pragma unroll
    for (int r = 1; r < RT; r++)
        if (lane == r) v = acc[r];
    return v;
}

/* y[r, n] for the rows r of this block's tile, by warp (n = blockIdx.x * GEMV_WARPS + warp). */
template <typename T, typename W, int MODE, int RT>
__global__ void __launch_bounds__(GEMV_THREADS) gemv_kernel(gw_args a)
{
    cu_pdl_wait();
    const int lane = threadIdx.x & 31;
    const int64_t col = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    const int64_t r0 = (int64_t)blockIdx.y * RT;
    if (col >= a.N) return;
    const int rows = a.R - r0 < RT ? (int)(a.R - r0) : RT;
    /* the segment holding this column: its matrix, output and width */
    int seg = 0;
#pragma unroll
    for (int k = 0; k + 1 < GW_SEGS; k++) seg += col >= a.end[k];
    const int64_t c0 = seg > 0 ? a.end[seg - 1] : 0, n = col - c0, width = a.end[seg] - c0;
    const T *x = (const T *)a.x + r0 * a.K;
    float acc[RT];
    gw_dots<T, W, RT>(x, (const W *)a.w[seg] + n * a.K, a.K, a.vec, rows, lane, acc);
    float up[RT];
    if (MODE == GW_SWIGLU) gw_dots<T, W, RT>(x, (const W *)a.w2 + n * a.K, a.K, a.vec, rows, lane, up);
    if (lane >= rows) return;
    /* lane r writes row r */
    float v = gw_pick<RT>(acc, lane);
    T *y = (T *)a.y[seg] + (r0 + lane) * width + n;
    const T *bias = (const T *)a.bias;
    if (MODE == GW_Q8) {
        double b = bias != NULL ? (double)cu_ld(bias, n) : 0.0;
        cu_st(y, 0, (float)((double)v * (double)a.scale[n] + b));
        return;
    }
    if (MODE == GW_SWIGLU) {
        /* the reference's silu(g) * u in double, rounded once */
        cu_std(y, 0, cu_silu_d((double)v) * (double)gw_pick<RT>(up, lane));
        return;
    }
    if (bias != NULL) v = __fadd_rn(v, cu_ld(bias, n));
    cu_st(y, 0, v);
    if (a.act != GDP_ACT_NONE) cu_std(y, 0, cu_act_d(a.act, (double)cu_ld(y, 0)));
}

/* One segment: W (N, K) into y (R, N). */
static void gw_single(gw_args *a, const void *w, void *y, int64_t N)
{
    for (int k = 0; k < GW_SEGS; k++) a->w[k] = w, a->y[k] = y, a->end[k] = N;
    a->N = N;
}

/* Rows per tile: the smallest of 1, 2, 4, 8 covering R (8 when R is larger). */
static int gw_tile(int64_t R) { return R <= 1 ? 1 : R <= 2 ? 2 : R <= 4 ? 4 : 8; }

template <typename T, typename W, int MODE>
static void gw_launch(const cu_backend *be, cudaStream_t s, const gw_args &a)
{
    int rt = gw_tile(a.R);
    dim3 grid((unsigned)((a.N + GEMV_WARPS - 1) / GEMV_WARPS), (unsigned)((a.R + rt - 1) / rt));
    switch (rt) {
    case 1: cu_launch(be, gemv_kernel<T, W, MODE, 1>, grid, dim3(GEMV_THREADS), 0, s, a); break;
    case 2: cu_launch(be, gemv_kernel<T, W, MODE, 2>, grid, dim3(GEMV_THREADS), 0, s, a); break;
    case 4: cu_launch(be, gemv_kernel<T, W, MODE, 4>, grid, dim3(GEMV_THREADS), 0, s, a); break;
    default: cu_launch(be, gemv_kernel<T, W, MODE, 8>, grid, dim3(GEMV_THREADS), 0, s, a); break;
    }
}

/* The 16-byte path: both matrices' rows start on 16-byte boundaries. */
static int gw_vec(const void *x, const void *w, int64_t K, size_t xsize, size_t wsize)
{
    return cu_aligned16(x) && cu_aligned16(w) && (K * (int64_t)wsize) % 16 == 0 && (K * (int64_t)xsize) % 16 == 0;
}

static int64_t gw_rows(const gdp_tensor *x) { return gdp_numel(x) / x->shape[x->ndim - 1]; }

/* ---- linear and linear_act, from matmul.cu ------------------------------------------------ */

int cu_gemv_takes(const gdp_node *n)
{
    const gdp_tensor *x = n->in[0], *w = n->in[1];
    if (gdp_attr_int(&n->attrs, "weight_in_out", 0) != 0 || x->shape[x->ndim - 1] == 0) return 0;
    if (!gdp_is_contiguous(x) || !gdp_is_contiguous(w) || (n->n_in > 2 && !gdp_is_contiguous(n->in[2]))) return 0;
    int64_t R = gw_rows(x);
    return R >= 1 && R <= GEMV_MAX_ROWS && w->shape[0] <= (int64_t)GEMV_WARPS * 0x7fffffff;
}

gdp_status cu_gemv_linear(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *w = node->in[1], *y = node->out[0];
    gw_args a;
    memset(&a, 0, sizeof a);
    a.x = x->data, a.bias = node->n_in > 2 ? node->in[2]->data : NULL;
    gw_single(&a, w->data, y->data, w->shape[0]);
    a.K = x->shape[x->ndim - 1], a.R = gw_rows(x);
    a.act = (int)gdp_attr_int(&node->attrs, "act", GDP_ACT_NONE);
    size_t es = gdp_dtype_size(x->dtype);
    a.vec = gw_vec(x->data, w->data, a.K, es, es);
    if (a.N == 0) return GDP_OK;
    CU_FLOAT_SWITCH(x->dtype, T, (gw_launch<T, T, GW_FLOAT>(be, s, a)));
    return GDP_OK;
}

/* ---- linear_qkv and linear_swiglu (made by fuse.cu for decode steps) ---------------------- */

/* x (R, K) with R <= GEMV_MAX_ROWS, the weights (out_k, K) of x's dtype, everything
 * contiguous (the host makes it so: these kernels are not strided). More rows never come
 * here: the graph pass fuses only decode-step products. */
static int multi_supports(void *b, const gdp_node *n)
{
    (void)b;
    const int swiglu = n->n_in == 3;
    if ((n->n_in != 3 && n->n_in != 4) || n->n_out != (swiglu ? 1 : 3)) return 0;
    const gdp_tensor *x = n->in[0];
    if (!cu_gpu_float(x->dtype) || x->ndim < 1) return 0;
    const int64_t K = x->shape[x->ndim - 1], R = K > 0 ? gw_rows(x) : 0;
    if (K < 1 || R < 1 || R > GEMV_MAX_ROWS) return 0;
    int64_t N = 0;
    for (int k = 1; k < n->n_in; k++) {
        const gdp_tensor *w = n->in[k];
        if (w->dtype != x->dtype || w->ndim != 2 || w->shape[1] != K) return 0;
        N += swiglu && k == 2 ? 0 : w->shape[0];
    }
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k]->dtype != x->dtype) return 0;
    return N <= (int64_t)GEMV_WARPS * 0x7fffffff;
}

static gdp_status multi_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0];
    const int swiglu = node->n_in == 3;
    gw_args a;
    memset(&a, 0, sizeof a);
    a.x = x->data, a.K = x->shape[x->ndim - 1], a.R = gw_rows(x);
    size_t es = gdp_dtype_size(x->dtype);
    a.vec = 1;
    if (swiglu) {
        gw_single(&a, node->in[1]->data, node->out[0]->data, node->in[1]->shape[0]);
        a.w2 = node->in[2]->data;
        a.vec = gw_vec(x->data, a.w[0], a.K, es, es) && cu_aligned16(a.w2);
    } else {
        int64_t end = 0;
        for (int k = 0; k < GW_SEGS; k++) {
            a.w[k] = node->in[1 + k]->data, a.y[k] = node->out[k]->data;
            a.end[k] = end += node->in[1 + k]->shape[0];
            a.vec = a.vec && gw_vec(x->data, a.w[k], a.K, es, es);
        }
        a.N = end;
    }
    if (a.N == 0) return GDP_OK;
    if (swiglu) {
        CU_FLOAT_SWITCH(x->dtype, T, (gw_launch<T, T, GW_SWIGLU>(be, s, a)));
    } else {
        CU_FLOAT_SWITCH(x->dtype, T, (gw_launch<T, T, GW_FLOAT>(be, s, a)));
    }
    return GDP_OK;
}
CU_LAUNCHER(multi_run)

/* ---- linear_q8 and linear_w8a8 ------------------------------------------------------------- */

static int q8_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in < 3 || n->n_in > 4 || n->n_out != 1) return 0;
    const gdp_tensor *x = n->in[0], *w = n->in[1], *sc = n->in[2], *y = n->out[0];
    if (!cu_gpu_float(x->dtype) || y->dtype != x->dtype || w->dtype != GDP_I8 || w->ndim != 2 || sc->dtype != GDP_F32)
        return 0;
    for (int i = 0; i < n->n_in; i++)
        if (!gdp_is_contiguous(n->in[i])) return 0;
    if (n->n_in == 4 && n->in[3]->dtype != x->dtype) return 0;
    int64_t K = w->shape[1], R = K > 0 ? gw_rows(x) : 0;
    return K >= 1 && (R + GEMV_MAX_ROWS - 1) / GEMV_MAX_ROWS <= GEMV_MAX_TILES &&
           w->shape[0] <= (int64_t)GEMV_WARPS * 0x7fffffff;
}

static gw_args q8_args(const gdp_node *node)
{
    const gdp_tensor *x = node->in[0], *w = node->in[1];
    gw_args a;
    memset(&a, 0, sizeof a);
    a.x = x->data, a.scale = (const float *)node->in[2]->data;
    a.bias = node->n_in > 3 ? node->in[3]->data : NULL;
    gw_single(&a, w->data, node->out[0]->data, w->shape[0]);
    a.K = w->shape[1], a.R = gw_rows(x);
    return a;
}

static gdp_status q8_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    gw_args a = q8_args(node);
    if (a.N == 0 || a.R == 0) return GDP_OK;
    a.vec = gw_vec(a.x, a.w[0], a.K, gdp_dtype_size(node->in[0]->dtype), 1);
    CU_FLOAT_SWITCH(node->in[0]->dtype, T, (gw_launch<T, int8_t, GW_Q8>(be, s, a)));
    return GDP_OK;
}
CU_LAUNCHER(q8_run)

/* linear_w8a8's workspace: the rows of x as int8, each padded to KP bytes (16-byte rows for
 * the vector path), then a scale per row. */
static int64_t w8a8_kp(int64_t K) { return (K + 15) / 16 * 16; }
static size_t w8a8_bytes(const gdp_node *n)
{
    int64_t K = n->in[1]->shape[1], R = gw_rows(n->in[0]);
    return cu_ws_round((size_t)(R * w8a8_kp(K))) + (size_t)R * sizeof(float);
}
static size_t w8a8_workspace(void *b, const gdp_node *n)
{
    (void)b;
    return cu_ws_declare(w8a8_bytes(n));
}

#define GWQ_THREADS 256

/* Row r of x (a block per row): its scale max|x| / 127 (NaNs ignored: gdp_q8_amax), then
 * every element through gdp_q8. A maximum does not depend on the order it is taken in. */
template <typename T>
__global__ void __launch_bounds__(GWQ_THREADS) gw_quantize_kernel(const T *x, int8_t *xq, float *sx, int64_t K, int64_t KP)
{
    cu_pdl_wait();
    __shared__ float sh[32];
    const int64_t r = blockIdx.x;
    const T *row = x + r * K;
    float m = 0.0f;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) m = gdp_q8_amax(m, cu_ld(row, k));
    for (int o = 16; o > 0; o >>= 1) m = gdp_q8_amax(m, __shfl_xor_sync(CU_FULL_MASK, m, o));
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = m;
    __syncthreads();
    m = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) m = gdp_q8_amax(m, sh[w]);
    const float scale = gdp_q8_scale(m);
    for (int64_t k = threadIdx.x; k < KP; k += blockDim.x) xq[r * KP + k] = k < K ? gdp_q8(cu_ld(row, k), scale) : 0;
    if (threadIdx.x == 0) sx[r] = scale;
}

/* y[r, n] = ((dot(xq[r], w[n]) sx[r]) ws[n]) + b[n], the dot exact: each lane sums its
 * products in an int (about K / 32 products of at most 127 * 127: K <= 2^22 keeps that inside
 * an int), the lanes in int64. */
template <typename T, int RT>
__global__ void __launch_bounds__(GEMV_THREADS) w8a8_kernel(gw_args a, const int8_t *xq, const float *sx, int64_t KP)
{
    cu_pdl_wait();
    const int lane = threadIdx.x & 31;
    const int64_t n = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    const int64_t r0 = (int64_t)blockIdx.y * RT;
    if (n >= a.N) return;
    const int rows = a.R - r0 < RT ? (int)(a.R - r0) : RT;
    const int8_t *w = (const int8_t *)a.w[0] + n * a.K, *xr = xq + r0 * KP;
    int acc[RT];
#pragma unroll
    for (int r = 0; r < RT; r++) acc[r] = 0;
    const int64_t pieces = a.vec ? a.K / 16 : 0;
    for (int64_t p0 = lane; p0 < pieces; p0 += 32 * GEMV_UNROLL) {
        int4 wraw[GEMV_UNROLL];
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++)
            if (p0 + 32 * u < pieces) wraw[u] = *reinterpret_cast<const int4 *>(w + (p0 + 32 * u) * 16);
#pragma unroll
        for (int u = 0; u < GEMV_UNROLL; u++) {
            const int64_t p = p0 + 32 * u;
            if (p >= pieces) break;
            const int4 wv = wraw[u];
#pragma unroll
            for (int r = 0; r < RT; r++) {
                if (r >= rows) break;
                int4 xv = *reinterpret_cast<const int4 *>(xr + r * KP + p * 16);
                acc[r] = __dp4a(xv.x, wv.x, acc[r]);
                acc[r] = __dp4a(xv.y, wv.y, acc[r]);
                acc[r] = __dp4a(xv.z, wv.z, acc[r]);
                acc[r] = __dp4a(xv.w, wv.w, acc[r]);
            }
        }
    }
    for (int64_t k = pieces * 16 + lane; k < a.K; k += 32) {
        int wk = w[k];
#pragma unroll
        for (int r = 0; r < RT; r++)
            if (r < rows) acc[r] += (int)xr[r * KP + k] * wk;
    }
    long long dot[RT];
#pragma unroll
    for (int r = 0; r < RT; r++) {
        dot[r] = acc[r];
        for (int o = 16; o > 0; o >>= 1) dot[r] += __shfl_xor_sync(CU_FULL_MASK, dot[r], o);
    }
    if (lane >= rows) return;
    long long d = dot[0];
#pragma unroll
    for (int r = 1; r < RT; r++)
        if (lane == r) d = dot[r];
    /* gdp_q8_dequant's two f32 products, kept apart from the bias (no fused multiply-add) */
    float v = __fmul_rn(__fmul_rn(__ll2float_rn(d), sx[r0 + lane]), a.scale[n]);
    if (a.bias != NULL) v = __fadd_rn(v, cu_ld((const T *)a.bias, n));
    cu_st((T *)a.y[0], (r0 + lane) * a.N + n, v);
}

template <typename T>
static void w8a8_launch(const cu_backend *be, cudaStream_t s, const gw_args &a, int8_t *xq, float *sx, int64_t KP)
{
    cu_launch(be, gw_quantize_kernel<T>, dim3((unsigned)a.R), dim3(GWQ_THREADS), 0, s, (const T *)a.x, xq, sx, a.K, KP);
    int rt = gw_tile(a.R);
    dim3 grid((unsigned)((a.N + GEMV_WARPS - 1) / GEMV_WARPS), (unsigned)((a.R + rt - 1) / rt));
    switch (rt) {
    case 1: cu_launch(be, w8a8_kernel<T, 1>, grid, dim3(GEMV_THREADS), 0, s, a, xq, sx, KP); break;
    case 2: cu_launch(be, w8a8_kernel<T, 2>, grid, dim3(GEMV_THREADS), 0, s, a, xq, sx, KP); break;
    case 4: cu_launch(be, w8a8_kernel<T, 4>, grid, dim3(GEMV_THREADS), 0, s, a, xq, sx, KP); break;
    default: cu_launch(be, w8a8_kernel<T, 8>, grid, dim3(GEMV_THREADS), 0, s, a, xq, sx, KP); break;
    }
}

static int w8a8_supports(void *b, const gdp_node *n)
{
    /* one quantizing block per row: R within a grid's x dimension */
    return q8_supports(b, n) && gw_rows(n->in[0]) <= 0x7fffffff && n->in[1]->shape[1] <= ((int64_t)1 << 22);
}

static gdp_status w8a8_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    gw_args a = q8_args(node);
    if (a.N == 0 || a.R == 0) return GDP_OK;
    char *ws = NULL;
    gdp_status st = cu_ws(node, w8a8_bytes(node), &ws, err);
    if (st != GDP_OK) return st;
    int64_t KP = w8a8_kp(a.K);
    int8_t *xq = (int8_t *)ws;
    float *sx = (float *)(ws + cu_ws_round((size_t)(a.R * KP)));
    a.vec = cu_aligned16(a.w[0]) && a.K % 16 == 0;
    CU_FLOAT_SWITCH(node->in[0]->dtype, T, (w8a8_launch<T>(be, s, a, xq, sx, KP)));
    return GDP_OK;
}
CU_LAUNCHER(w8a8_run)

#define Q8_SIGS(op, sup, fn, ws)                                                                            \
    CU_KX(op, GDP_F32, 0, sup, fn, NULL, ws), CU_KSIG(op, "bf16,i8,f32->bf16", sup, fn, NULL, ws),            \
        CU_KSIG(op, "bf16,i8,f32,bf16->bf16", sup, fn, NULL, ws), CU_KSIG(op, "f16,i8,f32->f16", sup, fn, NULL, ws), \
        CU_KSIG(op, "f16,i8,f32,f16->f16", sup, fn, NULL, ws)

#define MULTI(op) \
    CU_K(op, GDP_F32, multi_supports, multi_run_launch, NULL), CU_K(op, GDP_F16, multi_supports, multi_run_launch, NULL), \
        CU_K(op, GDP_BF16, multi_supports, multi_run_launch, NULL)

static const gdp_kernel kernels[] = {
    Q8_SIGS("linear_q8", q8_supports, q8_run_launch, NULL),
    Q8_SIGS("linear_w8a8", w8a8_supports, w8a8_run_launch, w8a8_workspace),
    MULTI("linear_qkv"),
    MULTI("linear_swiglu"),
};
CU_FAMILY(gemv, kernels);
