/* norm.cu — the norm family (src/ops/norm.c): layer_norm, rms_norm, their backward ops and
 * the residual add fused in front (add_layer_norm, add_rms_norm), all over the last axis:
 * x is read as (rows, C).
 *
 * Rows of up to 32 x 8 16-byte vectors (1024 f32 or 2048 f16/bf16 elements: a transformer's
 * hidden size) go to a warp each, forward (norm_warp_kernel, 32 rows or more: a training
 * batch) and backward (norm_bwd_warp_kernel): held in registers, read once, the sums warp
 * shuffles in double — a block per row spent its time in the barriers of its block-wide
 * sums. Rows of at most 16 vectors share a warp, 8 lanes each. Otherwise a block per
 * row: the statistics are block reductions in double (two passes for the variance, as the
 * reference); rows of up to 2048 are held in registers (norm_row_kernel, also a decode
 * step's few rows), longer ones read again for each pass (norm_fwd_kernel,
 * norm_bwd_rows_kernel). The weight and bias gradients are sums over rows, per column: the
 * warp backward adds them up as it goes (each lane its columns, over its warp's rows, then
 * the block's warps in order) into a partial sum per block; the block-per-row backward
 * writes each row's statistics for a column kernel that reads x and dy again, in chunks of
 * rows. Either way the partial sums are folded in a fixed order, a warp per column:
 * deterministic, with no atomics.
 *
 * layer_norm_grad_add and rms_norm_grad_add (the backward and the residual stream's
 * gradient added to its dx, which the graph pass makes of the pair) run the same kernels
 * with one more row read: dx is rounded to its dtype, the residual added in float and the
 * sum rounded again, the bits the pair stores. (A residual that is not 16-byte aligned, a
 * view at an odd offset, sends the node to the row kernels, whose arithmetic is in double:
 * then within the ops' tolerance of the pair rather than equal to it.)
 */
#include "cu_vec.h"

#include <math.h>
#include <string.h>
#include <type_traits>

#define THREADS 256
#define ROWS_PER_CHUNK 64 /* rows a thread of the column pass sums: enough threads to fill the GPU */

static __device__ double block_sum(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

/* mean (0 for rms) and rstd of row r: layer norm subtracts the mean, rms norm does not. */
template <typename T>
static __device__ void row_stats(const T *x, int64_t r, int64_t C, double eps, int rms, double *sh, double *mean,
                                 double *rstd)
{
    double m = 0.0;
    if (!rms) {
        double s = 0.0;
        for (int64_t k = threadIdx.x; k < C; k += blockDim.x) s += (double)cu_ld(x, r * C + k);
        m = block_sum(s, sh) / (double)C;
    }
    double ss = 0.0;
    for (int64_t k = threadIdx.x; k < C; k += blockDim.x) {
        double d = (double)cu_ld(x, r * C + k) - m;
        ss += d * d;
    }
    *mean = m;
    *rstd = 1.0 / sqrt(block_sum(ss, sh) / (double)C + eps);
}

// x (rows, C), [w (C)], [b (C)] -> y (rows, C); with res (the add_*_norm ops): first
// sum = x + res, rounded to T as the add op stores it, and the norm of sum. Each thread
// reads back only the elements it wrote itself, so the row needs no barrier between.
template <typename T>
__global__ void norm_fwd_kernel(const T *in, const T *res, T *sum, const T *w, const T *b, T *y, int64_t rows, int64_t C,
                                double eps, int rms)
{
    cu_pdl_wait();
    __shared__ double sh[THREADS];
    const T *x = res != NULL ? sum : in;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        if (res != NULL)
            for (int64_t k = threadIdx.x; k < C; k += blockDim.x) {
                const int64_t i = r * C + k;
                cu_st(sum, i, __fadd_rn(cu_ld(in, i), cu_ld(res, i)));
            }
        double mean, rstd;
        row_stats(x, r, C, eps, rms, sh, &mean, &rstd);
        for (int64_t k = threadIdx.x; k < C; k += blockDim.x) {
            double v = ((double)cu_ld(x, r * C + k) - mean) * rstd;
            if (w != NULL) v *= (double)cu_ld(w, k);
            if (b != NULL) v += (double)cu_ld(b, k);
            cu_std(y, r * C + k, v);
        }
    }
}

/* Rows of up to THREADS * NORM_REG elements: the row is read once into registers, the sums
 * are warp shuffles and one exchange through shared memory, and y is written: one trip to
 * memory each way where the kernel above makes three (a decode step is a chain of such
 * latencies). The sums are in double, as above, in another fixed order. */
#define NORM_REG 8

/* The sum over the block of every thread's v, the same in every thread (fixed order). */
static __device__ double block_sum_shfl(double v, double *sh)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    double t = 0.0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) t += sh[w];
    __syncthreads();
    return t;
}

/* f rounded to T and back: the value an op storing f as T would hand the next. */
template <typename T> static __device__ __forceinline__ float as_stored(float f)
{
    T t;
    cu_st(&t, 0, f);
    return cu_ld(&t, 0);
}

template <typename T>
__global__ void __launch_bounds__(THREADS) norm_row_kernel(const T *in, const T *res, T *sum, const T *w, const T *b,
                                                           T *y, int64_t rows, int C, double eps, int rms)
{
    cu_pdl_wait();
    __shared__ double sh[THREADS / 32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float v[NORM_REG];
        double s1 = 0.0;
#pragma unroll
        for (int j = 0; j < NORM_REG; j++) {
            const int k = threadIdx.x + j * THREADS;
            v[j] = 0.0f;
            if (k >= C) continue;
            const int64_t i = r * C + k;
            if (res != NULL) {
                const float t = __fadd_rn(cu_ld(in, i), cu_ld(res, i));
                cu_st(sum, i, t);
                v[j] = as_stored<T>(t);
            } else {
                v[j] = cu_ld(in, i);
            }
            s1 += (double)v[j];
        }
        const double mean = rms ? 0.0 : block_sum_shfl(s1, sh) / (double)C;
        double ss = 0.0;
#pragma unroll
        for (int j = 0; j < NORM_REG; j++)
            if (threadIdx.x + j * THREADS < C) {
                const double d = (double)v[j] - mean;
                ss += d * d;
            }
        const double rstd = 1.0 / sqrt(block_sum_shfl(ss, sh) / (double)C + eps);
#pragma unroll
        for (int j = 0; j < NORM_REG; j++) {
            const int k = threadIdx.x + j * THREADS;
            if (k >= C) continue;
            double o = ((double)v[j] - mean) * rstd;
            if (w != NULL) o *= (double)cu_ld(w, k);
            if (b != NULL) o += (double)cu_ld(b, k);
            cu_std(y, r * C + k, o);
        }
    }
}

/* As norm_row_kernel, a warp per row, for many rows (a training batch): lane l holds vectors
 * l, l + L, ... (NV of them, cu_vec<T>::N elements each) of the row, read and written 16
 * bytes at a time; the sums are the lane's elements in order, then the butterfly, in double.
 * A block per row spent its time in the barriers of its two block-wide sums and moved 2
 * bytes a load. Short rows (a head's q or k under Qwen3's norm) take L = 8 lanes of one or
 * two vectors each, 4 rows a warp, rather than leave most of a warp idle. C a multiple
 * of the vector, every row aligned. Few rows (a decode step's) keep norm_row_kernel: its
 * block spreads a row over 256 threads, and the products that take the RMS norm in front
 * (gemv.cu) sum in its order. */
#define NORM_WARP_MIN_ROWS 32

/* The sum of v over the L lanes of this lane's row (aligned groups of L), in every one of
 * them: the butterfly. All 32 lanes must call it. */
template <int L> static __device__ __forceinline__ double seg_sum(double v)
{
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T, int NV, int L>
__global__ void __launch_bounds__(THREADS) norm_warp_kernel(const T *in, const T *res, T *sum, const T *w, const T *b,
                                                            T *y, int64_t rows, int C, double eps, int rms)
{
    cu_pdl_wait();
    constexpr int N = cu_vec<T>::N;
    const int lane = threadIdx.x & 31, l = lane % L;
    const int64_t per = 32 / L, step = (int64_t)gridDim.x * (THREADS / 32) * per;
    for (int64_t r0 = (blockIdx.x * (int64_t)(THREADS / 32) + (threadIdx.x >> 5)) * per; r0 < rows; r0 += step) {
        const int64_t r = r0 + lane / L;
        const bool live = r < rows; /* a lane past the last row still takes part in the shuffles */
        float v[NV][N];
        double s1 = 0.0;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const int k0 = (l + L * j) * N;
            if (!live || k0 >= C) {
#pragma unroll
                for (int e = 0; e < N; e++) v[j][e] = 0.0f;
                continue;
            }
            cu_ld16(in, r * C + k0, v[j]);
            if (res != NULL) {
                float rv[N];
                cu_ld16(res, r * C + k0, rv);
#pragma unroll
                for (int e = 0; e < N; e++) v[j][e] = __fadd_rn(v[j][e], rv[e]);
                cu_st16(sum, r * C + k0, v[j]);
#pragma unroll
                for (int e = 0; e < N; e++) v[j][e] = as_stored<T>(v[j][e]); /* as the add op hands it on */
            }
#pragma unroll
            for (int e = 0; e < N; e++) s1 += (double)v[j][e];
        }
        const double mean = rms ? 0.0 : seg_sum<L>(s1) / (double)C;
        double ss = 0.0;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            if (!live || (l + L * j) * N >= C) continue;
#pragma unroll
            for (int e = 0; e < N; e++) {
                const double d = (double)v[j][e] - mean;
                ss += d * d;
            }
        }
        const double rstd = 1.0 / sqrt(seg_sum<L>(ss) / (double)C + eps);
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const int k0 = (l + L * j) * N;
            if (!live || k0 >= C) continue;
            float wv[N], bv[N];
            if (w != NULL) cu_ld16(w, k0, wv);
            if (b != NULL) cu_ld16(b, k0, bv);
            double o[N];
#pragma unroll
            for (int e = 0; e < N; e++) {
                o[e] = ((double)v[j][e] - mean) * rstd;
                if (w != NULL) o[e] *= (double)wv[e];
                if (b != NULL) o[e] += (double)bv[e];
            }
            cu_std16(y, r * C + k0, o);
        }
    }
}

/* Lanes a row of C elements gets: a warp, or for rows of 16 vectors or fewer, 8 lanes of
 * one or two vectors each. (16 lanes of one vector kept half the bytes in flight a warp:
 * rows of 128 halves, a head's q or k under Qwen3's norm, waited on memory.) */
static int row_lanes(int64_t C, int N) { return C <= 16 * N ? 8 : 32; }

template <typename T>
static void norm_warp_launch(const cu_backend *be, cudaStream_t s, const T *in, const T *res, T *sum, const T *w,
                             const T *b, T *y, int64_t rows, int C, double eps, int rms)
{
    constexpr int N = cu_vec<T>::N;
    const int nv = (C + 32 * N - 1) / (32 * N), L = row_lanes(C, N);
    const unsigned g = cu_blocks(be, (rows * L + 31) / 32 * 32, THREADS);
    if (L == 8 && C <= 8 * N)
        cu_launch(be, norm_warp_kernel<T, 1, 8>, g, THREADS, 0, s, in, res, sum, w, b, y, rows, C, eps, rms);
    else if (L == 8)
        cu_launch(be, norm_warp_kernel<T, 2, 8>, g, THREADS, 0, s, in, res, sum, w, b, y, rows, C, eps, rms);
    else if (nv <= 2)
        cu_launch(be, norm_warp_kernel<T, 2, 32>, g, THREADS, 0, s, in, res, sum, w, b, y, rows, C, eps, rms);
    else if (nv <= 4)
        cu_launch(be, norm_warp_kernel<T, 4, 32>, g, THREADS, 0, s, in, res, sum, w, b, y, rows, C, eps, rms);
    else
        cu_launch(be, norm_warp_kernel<T, 8, 32>, g, THREADS, 0, s, in, res, sum, w, b, y, rows, C, eps, rms);
}

/* dx per row; stats[2r], stats[2r+1] = mean, rstd for the column pass.
 *   layer: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
 *   rms:   dx = rstd * g - rstd^3 * x * mean(g * x)          (g = dy * w) */
template <typename T>
__global__ void norm_bwd_rows_kernel(const T *dy, const T *x, const T *w, const T *res, T *dx, double *stats, int64_t rows,
                                     int64_t C, double eps, int rms)
{
    __shared__ double sh[THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        double mean, rstd;
        row_stats(x, r, C, eps, rms, sh, &mean, &rstd);
        double sg = 0.0, sgx = 0.0;
        for (int64_t k = threadIdx.x; k < C; k += blockDim.x) {
            double d = (double)cu_ld(dy, r * C + k), v = (double)cu_ld(x, r * C + k);
            double g = w != NULL ? d * (double)cu_ld(w, k) : d;
            sg += g;
            sgx += rms ? g * v : g * (v - mean) * rstd;
        }
        sg = block_sum(sg, sh);
        sgx = block_sum(sgx, sh);
        double mg = sg / (double)C, mgx = sgx / (double)C;
        for (int64_t k = threadIdx.x; k < C; k += blockDim.x) {
            double d = (double)cu_ld(dy, r * C + k), v = (double)cu_ld(x, r * C + k);
            double g = w != NULL ? d * (double)cu_ld(w, k) : d;
            double out = rms ? rstd * g - rstd * rstd * rstd * mgx * v : rstd * (g - mg - (v - mean) * rstd * mgx);
            if (res != NULL) /* dx as stored, plus the residual stream's gradient: the pair's bits */
                cu_st(dx, r * C + k, as_stored<T>((float)out) + cu_ld(res, r * C + k));
            else
                cu_std(dx, r * C + k, out);
        }
        if (threadIdx.x == 0) stats[2 * r] = mean, stats[2 * r + 1] = rstd;
    }
}

/* As norm_bwd_rows_kernel, a warp per row (or L lanes, as norm_warp_kernel): lane l holds
 * vectors l, l + L, ... (NV of them, cu_vec<T>::N elements each) of x and dy; C a multiple
 * of the vector, every row aligned. The weight and bias gradients are summed on the way:
 * each lane adds dy * xhat and dy of its columns over the rows its warp takes (in float),
 * the rows of a warp's L-lane groups are added in group order, then the block's warps in
 * warp order, into part[block][0, C) and part[block][C, 2C) for norm_bwd_fold_kernel. The
 * grid is as many blocks as an SM holds, up to NORM_BWD_BLOCKS_PER_SM, so that a warp takes
 * many rows and part stays small: x and dy are read once, where a column pass read them
 * again. (Four blocks an SM left rows of 128 elements, a row a lane group in flight, waiting
 * on memory: 16 warps an SM did not hold the bytes in flight that the bandwidth asks for.) */
#define BWD_THREADS 128 /* 4 warps a block; as many blocks an SM as its registers allow */
#define BWD_WARPS (BWD_THREADS / 32)
#define NORM_BWD_BLOCKS_PER_SM 8
#define NORM_BWD_MAX_C 2048 /* 8 vectors of 8 halves a lane */
#define NORM_BWD_SLOTS 32   /* a lane's columns whose sums live in shared memory (NV * N): more stay in registers */
/* Element e of a 16-byte vector of T, widened to float. */
template <typename T> static __device__ __forceinline__ float vec_el(const uint4 &u, int e)
{
    return cu_ld(reinterpret_cast<const T *>(&u), e);
}

template <typename T, int NV, int L>
__global__ void __launch_bounds__(BWD_THREADS) norm_bwd_warp_kernel(const T *dy, const T *x, const T *w, const T *res,
                                                                    T *dx, float *part, int64_t rows, int C, double eps,
                                                                    int rms)
{
    constexpr int N = cu_vec<T>::N;
    /* Where a lane keeps its column sums: registers cost 2 NV N of them a thread, which
     * halved the warps an SM holds; shared memory costs a read and a write of each a row,
     * laid out [sum][j][e][lane] so that a warp's accesses hit 32 banks. */
    constexpr bool SLOTS = NV * N <= NORM_BWD_SLOTS;
    __shared__ float slot[SLOTS ? BWD_WARPS * 2 * NV * N * 32 : 1];
    float *const my = slot + (SLOTS ? (threadIdx.x >> 5) * 2 * NV * N * 32 + (threadIdx.x & 31) : 0);
    /* per-element arithmetic: double for f32 rows, as the reference; float for f16/bf16,
     * whose rounding is 2^8 to 2^11 times coarser (the row sums are double either way) */
    using A = typename std::conditional<sizeof(T) == 2, float, double>::type;
    __shared__ float acc[2 * NV * N * L]; /* the block's column sums: C <= NV N L */
    const int lane = threadIdx.x & 31, l = lane % L;
    float pw[SLOTS ? 1 : NV][N], pb[SLOTS ? 1 : NV][N]; /* this lane's column sums, in registers */
    /* w's vectors of those columns, kept for every row when there is room (16 bytes: f16 and
     * bf16 stay packed); the longest rows re-read them (L1) rather than spill */
    constexpr bool WREG = NV <= 4;
    uint4 wr[WREG ? NV : 1];
#pragma unroll
    for (int j = 0; j < NV; j++) {
        const int k0 = (l + L * j) * N;
        if (WREG && w != NULL && k0 < C) wr[WREG ? j : 0] = *reinterpret_cast<const uint4 *>(w + k0);
#pragma unroll
        for (int e = 0; e < N; e++) {
            if (SLOTS) my[(j * N + e) * 32] = my[((NV + j) * N + e) * 32] = 0.0f;
            else pw[SLOTS ? 0 : j][e] = pb[SLOTS ? 0 : j][e] = 0.0f;
        }
    }
    const int64_t per = 32 / L, step = (int64_t)gridDim.x * BWD_WARPS * per;
    for (int64_t r0 = (blockIdx.x * (int64_t)BWD_WARPS + (threadIdx.x >> 5)) * per; r0 < rows; r0 += step) {
        const int64_t r = r0 + lane / L;
        const bool live = r < rows; /* a lane past the last row still takes part in the shuffles */
        /* the row's vectors as read; g = dy * w is taken where used. The residual's are asked
         * for with them (read after the sums, they were a second memory latency a row), but
         * for the longest rows, whose registers would spill. */
        constexpr bool REARLY = NV <= 4;
        uint4 xr[NV], dr[NV], rr[REARLY ? NV : 1];
        A s1 = 0;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const int k0 = (l + L * j) * N;
            if (!live || k0 >= C) continue;
            xr[j] = *reinterpret_cast<const uint4 *>(x + r * C + k0);
            dr[j] = *reinterpret_cast<const uint4 *>(dy + r * C + k0);
            if (REARLY && res != NULL) rr[REARLY ? j : 0] = *reinterpret_cast<const uint4 *>(res + r * C + k0);
        }
#pragma unroll
        for (int j = 0; j < NV; j++) {
            if (!live || (l + L * j) * N >= C) continue;
#pragma unroll
            for (int e = 0; e < N; e++) s1 += (A)vec_el<T>(xr[j], e);
        }
        const A mean = rms ? (A)0 : (A)(seg_sum<L>((double)s1) / (double)C);
        A ss = 0, sg = 0, sgx = 0;
#pragma unroll
        for (int j = 0; j < NV; j++) {
            if (!live || (l + L * j) * N >= C) continue;
#pragma unroll
            for (int e = 0; e < N; e++) {
                const A d = (A)vec_el<T>(xr[j], e) - mean;
                ss += d * d;
            }
        }
        const A rstd = (A)(1.0 / sqrt(seg_sum<L>((double)ss) / (double)C + eps));
#pragma unroll
        for (int j = 0; j < NV; j++) {
            if (!live || (l + L * j) * N >= C) continue;
            const uint4 wj = w == NULL ? make_uint4(0, 0, 0, 0)
                             : WREG ? wr[WREG ? j : 0] : *reinterpret_cast<const uint4 *>(w + (l + L * j) * N);
#pragma unroll
            for (int e = 0; e < N; e++) {
                const A wv = w != NULL ? (A)vec_el<T>(wj, e) : (A)1;
                const A g = (A)vec_el<T>(dr[j], e) * wv, v = (A)vec_el<T>(xr[j], e);
                sg += g;
                sgx += rms ? g * v : g * (v - mean) * rstd;
            }
        }
        const A mg = (A)(seg_sum<L>((double)sg) / (double)C), mgx = (A)(seg_sum<L>((double)sgx) / (double)C);
#pragma unroll
        for (int j = 0; j < NV; j++) {
            const int k0 = (l + L * j) * N;
            if (!live || k0 >= C) continue;
            A out[N];
            const uint4 wj = w == NULL ? make_uint4(0, 0, 0, 0) : WREG ? wr[WREG ? j : 0] : *reinterpret_cast<const uint4 *>(w + k0);
#pragma unroll
            for (int e = 0; e < N; e++) {
                const A wv = w != NULL ? (A)vec_el<T>(wj, e) : (A)1;
                const float d = vec_el<T>(dr[j], e);
                const A g = (A)d * wv, v = (A)vec_el<T>(xr[j], e), xhat = (v - mean) * rstd;
                out[e] = rms ? rstd * g - rstd * rstd * rstd * mgx * v : rstd * (g - mg - xhat * mgx);
                if (SLOTS) {
                    my[(j * N + e) * 32] += (float)((A)d * xhat);
                    my[((NV + j) * N + e) * 32] += d;
                } else {
                    pw[SLOTS ? 0 : j][e] += (float)((A)d * xhat);
                    pb[SLOTS ? 0 : j][e] += d;
                }
            }
            if (res != NULL) { /* dx as stored, plus the residual stream's gradient: the pair's bits */
                const uint4 rv = REARLY ? rr[REARLY ? j : 0] : *reinterpret_cast<const uint4 *>(res + r * C + k0);
                float f[N];
#pragma unroll
                for (int e = 0; e < N; e++) f[e] = as_stored<T>((float)out[e]) + vec_el<T>(rv, e);
                cu_st16(dx, r * C + k0, f);
            } else if constexpr (sizeof(A) == sizeof(double)) {
                cu_std16(dx, r * C + k0, out);
            } else {
                cu_st16(dx, r * C + k0, out);
            }
        }
    }
    /* the warp's row groups (lanes l, l + L, ... hold the same columns), in group order */
    __syncwarp();
    float sw[SLOTS ? NV : 1][N], sb[SLOTS ? NV : 1][N];
#pragma unroll
    for (int j = 0; j < NV; j++)
#pragma unroll
        for (int e = 0; e < N; e++) {
            const float aw = SLOTS ? my[(j * N + e) * 32] : pw[SLOTS ? 0 : j][e];
            const float ab = SLOTS ? my[((NV + j) * N + e) * 32] : pb[SLOTS ? 0 : j][e];
            float a = aw, b = ab;
            for (int q = 1; q < (int)per; q++) {
                a += __shfl_sync(0xffffffffu, aw, l + q * L);
                b += __shfl_sync(0xffffffffu, ab, l + q * L);
            }
            if (SLOTS) sw[SLOTS ? j : 0][e] = a, sb[SLOTS ? j : 0][e] = b;
            else pw[SLOTS ? 0 : j][e] = a, pb[SLOTS ? 0 : j][e] = b;
        }
    /* the block's warps, in order */
    const int warp = threadIdx.x >> 5;
    for (int wi = 0; wi < BWD_WARPS; wi++) {
        if (warp == wi && lane < L)
#pragma unroll
            for (int j = 0; j < NV; j++) {
                const int k0 = (l + L * j) * N;
                if (k0 >= C) continue;
#pragma unroll
                for (int e = 0; e < N; e++) {
                    const float a = SLOTS ? sw[SLOTS ? j : 0][e] : pw[SLOTS ? 0 : j][e];
                    const float b = SLOTS ? sb[SLOTS ? j : 0][e] : pb[SLOTS ? 0 : j][e];
                    acc[k0 + e] = wi == 0 ? a : acc[k0 + e] + a;
                    acc[C + k0 + e] = wi == 0 ? b : acc[C + k0 + e] + b;
                }
            }
        __syncthreads();
    }
    for (int k = threadIdx.x; k < 2 * C; k += BWD_THREADS) part[blockIdx.x * (int64_t)(2 * C) + k] = acc[k];
}

/* part[c][k] = sum over chunk c's rows of dy * xhat; part[c][C + k] = sum of dy. */
template <typename T>
__global__ void norm_bwd_cols_kernel(const T *dy, const T *x, const double *stats, double *part, int64_t rows, int64_t C,
                                     int64_t chunks)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < chunks * C; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i / C, k = i % C;
        int64_t lo = c * ROWS_PER_CHUNK, hi = lo + ROWS_PER_CHUNK < rows ? lo + ROWS_PER_CHUNK : rows;
        double aw = 0.0, ab = 0.0;
#pragma unroll 8
        for (int64_t r = lo; r < hi; r++) {
            double d = (double)cu_ld(dy, r * C + k);
            aw += d * ((double)cu_ld(x, r * C + k) - stats[2 * r]) * stats[2 * r + 1];
            ab += d;
        }
        part[c * 2 * C + k] = aw;
        part[c * 2 * C + C + k] = ab;
    }
}

/* dw[k], db[k] = the chunks' partial sums of column k, a warp per column: lane l adds
 * chunks l, l + 32, ... in order, then the lanes' sums are added in a fixed butterfly. (A
 * thread per column walking all the chunks was a chain of dependent loads on a few
 * hundred threads: most of a norm backward's time.) */
template <typename T, typename P>
__global__ void __launch_bounds__(THREADS) norm_bwd_fold_kernel(const P *part, T *dw, T *db, int64_t C, int64_t chunks)
{
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (THREADS / 32);
    for (int64_t k = blockIdx.x * (int64_t)(THREADS / 32) + (threadIdx.x >> 5); k < C; k += warps) {
        double aw = 0.0, ab = 0.0;
        for (int64_t c = lane; c < chunks; c += 32) aw += (double)part[c * 2 * C + k], ab += (double)part[c * 2 * C + C + k];
        aw = cu_warp_sum_d(aw);
        ab = cu_warp_sum_d(ab);
        if (lane == 0 && dw != NULL) cu_std(dw, k, aw);
        if (lane == 0 && db != NULL) cu_std(db, k, ab);
    }
}

/* ---- host side --------------------------------------------------------------------------- */

static int is_rms(const gdp_node *n) { return strncmp(n->op, "rms_norm", 8) == 0; }
static int is_rms_add(const gdp_node *n) { return strcmp(n->op, "add_rms_norm") == 0; }
static int is_grad(const gdp_node *n) { return strstr(n->op, "_grad") != NULL; }

static int vec_of(const gdp_tensor *t, int32_t dt, int64_t C) { return t->dtype == dt && t->ndim == 1 && t->shape[0] == C; }

static int norm_supports(void *b, const gdp_node *n)
{
    (void)b;
    int rms = is_rms(n), grad = is_grad(n);
    /* the backward with the residual's gradient added: (dy, x, w, r) */
    const int res = grad && n->n_in == 4 && strstr(n->op, "_grad_add") != NULL;
    int first_vec = grad ? 2 : 1, max_in = grad ? 3 + res : (rms ? 2 : 3), last_vec = n->n_in - res;
    if (n->n_in < first_vec || n->n_in > max_in || n->n_out != (grad ? (rms ? 2 : 3) : 1)) return 0;
    const gdp_tensor *x = n->in[grad ? 1 : 0];
    if (!cu_gpu_float(x->dtype) || x->ndim < 1 || x->shape[x->ndim - 1] < 1) return 0;
    int64_t C = x->shape[x->ndim - 1];
    if (!cu_same_shape(n->out[0], x) || n->out[0]->dtype != x->dtype) return 0;
    if (grad && (!cu_same_shape(n->in[0], x) || n->in[0]->dtype != x->dtype)) return 0;
    if (res && (!cu_same_shape(n->in[3], x) || n->in[3]->dtype != x->dtype)) return 0;
    for (int k = first_vec; k < last_vec; k++)
        if (!vec_of(n->in[k], x->dtype, C)) return 0;
    for (int k = 1; k < n->n_out; k++)
        if (!vec_of(n->out[k], x->dtype, C)) return 0;
    return 1;
}

/* add_layer_norm / add_rms_norm: x, r (x's shape and dtype), [w], [b] -> s, y. */
static int add_norm_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in < 2 || n->n_in > (is_rms_add(n) ? 3 : 4) || n->n_out != 2) return 0;
    const gdp_tensor *x = n->in[0];
    if (!cu_gpu_float(x->dtype) || x->ndim < 1 || x->shape[x->ndim - 1] < 1) return 0;
    const int64_t C = x->shape[x->ndim - 1];
    for (int k = 0; k < 2; k++)
        if (!cu_same_shape(n->out[k], x) || n->out[k]->dtype != x->dtype) return 0;
    if (!cu_same_shape(n->in[1], x) || n->in[1]->dtype != x->dtype) return 0;
    for (int k = 2; k < n->n_in; k++)
        if (!vec_of(n->in[k], x->dtype, C)) return 0;
    return 1;
}

static gdp_status norm_fwd_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    /* the add_ forms carry the residual as input 1 and the sum as output 0 */
    const int add = strncmp(node->op, "add_", 4) == 0, rms = is_rms(node) || is_rms_add(node);
    const gdp_tensor *x = node->in[0], *y = node->out[add];
    double eps = gdp_attr_float(&node->attrs, "eps", rms ? 1e-6 : 1e-5);
    int64_t C = x->shape[x->ndim - 1], rows = gdp_numel(x) / C;
    if (rows == 0) return GDP_OK;
    const void *res = add ? node->in[1]->data : NULL;
    void *sum = add ? node->out[0]->data : NULL;
    const void *w = node->n_in > 1 + add ? node->in[1 + add]->data : NULL;
    const void *b = node->n_in > 2 + add ? node->in[2 + add]->data : NULL;
    unsigned g = cu_blocks(be, rows * THREADS, THREADS);
    const int64_t nvec = 16 / (int64_t)gdp_dtype_size(x->dtype);
    if (rows >= NORM_WARP_MIN_ROWS && C % nvec == 0 && C <= 32 * 8 * nvec && cu_aligned16(x->data) &&
        cu_aligned16(y->data) && (res == NULL || (cu_aligned16(res) && cu_aligned16(sum))) &&
        (w == NULL || cu_aligned16(w)) && (b == NULL || cu_aligned16(b))) {
        CU_FLOAT_SWITCH(x->dtype, T,
                        norm_warp_launch<T>(be, s, (const T *)x->data, (const T *)res, (T *)sum, (const T *)w,
                                            (const T *)b, (T *)y->data, rows, (int)C, eps, rms));
        return GDP_OK;
    }
    if (C <= THREADS * NORM_REG) {
        CU_FLOAT_SWITCH(x->dtype, T,
                        cu_launch(be, norm_row_kernel<T>, g, THREADS, 0, s, (const T *)x->data, (const T *)res, (T *)sum,
                                  (const T *)w, (const T *)b, (T *)y->data, rows, (int)C, eps, rms));
        return GDP_OK;
    }
    CU_FLOAT_SWITCH(x->dtype, T,
                    cu_launch(be, norm_fwd_kernel<T>, g, THREADS, 0, s, (const T *)x->data, (const T *)res, (T *)sum,
                              (const T *)w, (const T *)b, (T *)y->data, rows, C, eps, rms));
    return GDP_OK;
}
CU_LAUNCHER(norm_fwd_run)

/* The warp backward's form for rows of C elements (NV vectors a lane, L lanes a row). */
template <typename T, typename F> static void norm_bwd_form(int64_t C, F &&f)
{
    constexpr int N = cu_vec<T>::N;
    const int nv = (int)((C + 32 * N - 1) / (32 * N)), L = row_lanes(C, N);
    if (L == 8 && C <= 8 * N) f(norm_bwd_warp_kernel<T, 1, 8>);
    else if (L == 8) f(norm_bwd_warp_kernel<T, 2, 8>);
    else if (nv <= 2) f(norm_bwd_warp_kernel<T, 2, 32>);
    else if (nv <= 4) f(norm_bwd_warp_kernel<T, 4, 32>);
    else f(norm_bwd_warp_kernel<T, 8, 32>);
}

/* Blocks of the warp backward: as many as the SMs hold of the form's kernel (its registers
 * and shared memory), at most NORM_BWD_BLOCKS_PER_SM an SM, fewer when the rows do not fill
 * them. A function of the device, the dtype and the shape only: the scratch is declared
 * with it before the launch. */
static int64_t norm_bwd_warp_blocks(const cu_backend *be, int32_t dt, int64_t rows, int64_t C)
{
    const int N = 16 / (int)gdp_dtype_size(dt), L = row_lanes(C, N);
    int per_sm = 0;
    auto occ = [&](auto kern) {
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, BWD_THREADS, 0) != cudaSuccess) {
            per_sm = 0;
            (void)cudaGetLastError(); /* the failed query's error only: the floor below stands */
        }
    };
    switch (dt) {
    case GDP_F32: norm_bwd_form<float>(C, occ); break;
    case GDP_F16: norm_bwd_form<__half>(C, occ); break;
    default: norm_bwd_form<__nv_bfloat16>(C, occ); break;
    }
    if (per_sm < 1) per_sm = 1;
    if (per_sm > NORM_BWD_BLOCKS_PER_SM) per_sm = NORM_BWD_BLOCKS_PER_SM;
    const int64_t want = (rows * L + BWD_THREADS - 1) / BWD_THREADS;
    const int64_t cap = (int64_t)(be->sm_count > 0 ? be->sm_count : 80) * per_sm;
    return want < 1 ? 1 : want < cap ? want : cap;
}

/* Whether dy, x, dx and w (every row) are in whole 16-byte vectors: the warp kernels. */
static int norm_bwd_vec(const gdp_node *node, int64_t C)
{
    const int64_t N = 16 / (int64_t)gdp_dtype_size(node->in[1]->dtype);
    return C % N == 0 && C <= NORM_BWD_MAX_C && C <= 32 * N * 8 && cu_aligned16(node->in[0]->data) &&
           cu_aligned16(node->in[1]->data) && cu_aligned16(node->out[0]->data) &&
           (node->n_in < 3 || cu_aligned16(node->in[2]->data)) && (node->n_in < 4 || cu_aligned16(node->in[3]->data));
}

template <typename T>
static void norm_bwd_launch(cu_backend *be, cudaStream_t s, const gdp_node *node, char *ws, int64_t rows, int64_t C,
                            double eps, int rms)
{
    const T *dy = (const T *)node->in[0]->data, *x = (const T *)node->in[1]->data;
    const T *w = node->n_in > 2 ? (const T *)node->in[2]->data : NULL;
    const T *res = node->n_in > 3 ? (const T *)node->in[3]->data : NULL;
    T *dx = (T *)node->out[0]->data, *dw = (T *)node->out[1]->data, *db = node->n_out > 2 ? (T *)node->out[2]->data : NULL;
    const unsigned gf = cu_blocks(be, C * 32, THREADS);
    if (norm_bwd_vec(node, C)) {
        const int64_t gw = norm_bwd_warp_blocks(be, node->in[1]->dtype, rows, C);
        float *part = (float *)ws;
        norm_bwd_form<T>(C, [&](auto kern) {
            kern<<<(unsigned)gw, BWD_THREADS, 0, s>>>(dy, x, w, res, dx, part, rows, (int)C, eps, rms);
        });
        norm_bwd_fold_kernel<T, float><<<gf, THREADS, 0, s>>>(part, dw, db, C, gw);
        return;
    }
    const int64_t chunks = (rows + ROWS_PER_CHUNK - 1) / ROWS_PER_CHUNK;
    double *stats = (double *)ws, *part = stats + 2 * rows;
    norm_bwd_rows_kernel<T><<<cu_blocks(be, rows * THREADS, THREADS), THREADS, 0, s>>>(dy, x, w, res, dx, stats, rows, C,
                                                                                      eps, rms);
    norm_bwd_cols_kernel<T><<<cu_blocks(be, chunks * C, THREADS), THREADS, 0, s>>>(dy, x, stats, part, rows, C, chunks);
    norm_bwd_fold_kernel<T, double><<<gf, THREADS, 0, s>>>(part, dw, db, C, chunks);
}

/* The warp kernels' per-block partial sums; or, for the row and column kernels, the row
 * statistics (mean, rstd per row) and then the column pass's partial sums. Declared before
 * the data pointers are known: room for either. */
static size_t norm_bwd_scratch(const cu_backend *be, const gdp_node *n)
{
    const gdp_tensor *x = n->in[1];
    const int64_t C = x->shape[x->ndim - 1], rows = C > 0 ? gdp_numel(x) / C : 0;
    if (rows == 0) return 0;
    const int64_t chunks = (rows + ROWS_PER_CHUNK - 1) / ROWS_PER_CHUNK, N = 16 / (int64_t)gdp_dtype_size(x->dtype);
    const size_t cols = (size_t)(2 * rows + 2 * C * chunks) * sizeof(double);
    const size_t warp = (size_t)(norm_bwd_warp_blocks(be, x->dtype, rows, C) * 2 * C) * sizeof(float);
    return cols > warp ? cols : warp;
}

static size_t norm_bwd_workspace(void *b, const gdp_node *n) { return cu_ws_declare(norm_bwd_scratch((const cu_backend *)b, n)); }

// dy (rows, C), x (rows, C), [w (C)] -> dx (rows, C), dw (C) [, db (C) for layer_norm]
static gdp_status norm_bwd_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[1];
    int rms = is_rms(node);
    double eps = gdp_attr_float(&node->attrs, "eps", rms ? 1e-6 : 1e-5);
    int64_t C = x->shape[x->ndim - 1], rows = gdp_numel(x) / C;
    if (rows == 0) {
        /* no rows: the weight and bias gradients are sums of nothing */
        for (int k = 1; k < node->n_out; k++)
            CU_TRY(cudaMemsetAsync(node->out[k]->data, 0, (size_t)C * gdp_dtype_size(x->dtype), s));
        return GDP_OK;
    }
    char *ws = NULL;
    gdp_status st = cu_ws(node, norm_bwd_scratch(be, node), &ws, err);
    if (st != GDP_OK) return st;
    switch (x->dtype) {
    case GDP_F32: norm_bwd_launch<float>(be, s, node, ws, rows, C, eps, rms); break;
    case GDP_F16: norm_bwd_launch<__half>(be, s, node, ws, rows, C, eps, rms); break;
    default: norm_bwd_launch<__nv_bfloat16>(be, s, node, ws, rows, C, eps, rms); break;
    }
    return GDP_OK;
}
CU_LAUNCHER(norm_bwd_run)

#define FLOATS3(op, sup, fn, attrs) \
    CU_K(op, GDP_F32, sup, fn, attrs), CU_K(op, GDP_F16, sup, fn, attrs), CU_K(op, GDP_BF16, sup, fn, attrs)
#define BWD(op, dt) CU_KX(op, dt, 0, norm_supports, norm_bwd_run_launch, NULL, norm_bwd_workspace)

static const gdp_kernel kernels[] = {
    FLOATS3("layer_norm", norm_supports, norm_fwd_run_launch, NULL),
    FLOATS3("rms_norm", norm_supports, norm_fwd_run_launch, NULL),
    FLOATS3("add_layer_norm", add_norm_supports, norm_fwd_run_launch, NULL),
    FLOATS3("add_rms_norm", add_norm_supports, norm_fwd_run_launch, NULL),
    BWD("layer_norm_grad", GDP_F32), BWD("layer_norm_grad", GDP_F16), BWD("layer_norm_grad", GDP_BF16),
    BWD("rms_norm_grad", GDP_F32), BWD("rms_norm_grad", GDP_F16), BWD("rms_norm_grad", GDP_BF16),
    BWD("layer_norm_grad_add", GDP_F32), BWD("layer_norm_grad_add", GDP_F16), BWD("layer_norm_grad_add", GDP_BF16),
    BWD("rms_norm_grad_add", GDP_F32), BWD("rms_norm_grad_add", GDP_F16), BWD("rms_norm_grad_add", GDP_BF16),
};
CU_FAMILY(norm, kernels);
