/* gemv.cu — products of a few rows of activations with a weight matrix: a decode step
 * multiplies one token per sequence by every weight matrix of the model, and at that shape
 * the time is the read of the weights, plus the launch, not arithmetic. cuBLASLt's GEMM
 * kernels tile for many rows and leave most of the machine idle there.
 *
 *   linear, linear_act   x (R, K), W (out, K) of x's dtype, R <= GEMV_MAX_ROWS (matmul.cu
 *                        sends them here; more rows, or W as (K, out), go to cuBLASLt)
 *   linear_add           linear's product, then + r (R, out) in the epilogue: the residual
 *   linear_qkv           three W of one x, their columns side by side in one grid
 *   linear_swiglu        silu(x Wg^T) * (x Wu^T): a warp reads row n of both
 *                        (these two also with the RMS norm of x in front: below)
 *   linear_qkv_rope      linear_qkv of a decode step with rope_cache_write in the epilogue:
 *                        a warp takes a rotated pair of q or k (two rows of W, the pair rope
 *                        turns together) or one column of v; q's pairs go to its output,
 *                        k's and v's straight into the caches at the step's position
 *   linear_q8            int8 W with a scale per output channel, any R
 *   linear_w8a8          int8 W, each row of x quantized first (gw_quantize_kernel: gdp_q8,
 *                        into the node's workspace), then exact integer dot products
 *                        (__dp4a, four int8 products a step)
 *
 * Work split: a warp owns one output column n and a tile of up to RT rows of x; its lanes
 * stride over K reading W's row n in 16-byte pieces (8 halves, 4 floats or 16 int8) and the
 * matching pieces of the x rows (small, they stay in L1), then a butterfly sums the lanes.
 * Blocks of GEMV_WARPS warps, one grid row per tile of rows. Rows of W of 4 KiB or more
 * (the down and output projections) are split among GW_SPLIT warps of a column instead,
 * each summing a slice of K, the slices added in slice order. Every sum runs in a fixed order
 * (each lane's pieces in K order, then the butterfly), so results are deterministic; the
 * float forms accumulate in f32 like cuBLASLt (the sweep's tolerance), linear_w8a8 in
 * integers and then the f32 steps gdp_q8_dequant fixes, bit for bit the reference's.
 *
 * Epilogues as the reference rounds: linear_act adds the bias in f32, rounds to the output
 * dtype, then applies the activation in double and rounds again (what cuBLASLt's bias
 * epilogue followed by the elementwise activation gives); linear_add rounds the product to
 * the output dtype, as linear stores it, then adds r in f32 and rounds again, as add does —
 * bit for bit the two nodes it replaces; linear_q8 scales and adds the bias in double, as
 * the reference's double accumulator does.
 *
 * Prologue, the norm in front (linear_qkv and linear_swiglu with a norm weight g): blocks
 * of GW_NORM_THREADS first compute each of their rows' RMS and write the normalized rows,
 * rounded to x's dtype, into shared memory, which the warps' products then read instead of
 * x. The sums are norm.cu's, in its order, so the normalized x is bit for bit the one the
 * rms_norm node would have stored, and the products the ones of the unfused pair. A block
 * covers GW_NORM_THREADS / 32 columns, all the rows (at most GEMV_MAX_ROWS): the norm is
 * recomputed by every block, about R K / 256 elements a thread, from x in L2. Rows of more
 * than 48 KiB of shared memory need the opt-in made at open (cu_gemv_open); nodes past it
 * are declined (cu_gemv_norm_fits, which the graph pass asks before it fuses).
 *
 * The 16-byte path needs W's and x's rows to start on 16-byte boundaries (K a multiple of
 * the piece size, aligned pointers); otherwise every lane reads element by element.
 */
#include "cu_act.h"
#include "cu_rope.h"
#include "cu_vec.h"

#include <string.h>

#define GEMV_WARPS 4
#define GEMV_THREADS (GEMV_WARPS * 32)
#define GEMV_MAX_ROWS CU_GEMV_MAX_ROWS
#define GEMV_UNROLL 4 /* 16-byte loads of W a lane issues together */
#define GEMV_MAX_TILES 65535 /* grid rows */

enum { GW_FLOAT, GW_Q8, GW_SWIGLU, GW_ROPE }; /* W holds x's dtype, int8 with per-row scales, the
                                                  two halves of a gated MLP (w and w2), or q, k, v
                                                  with rope and the cache writes after them */

#define GW_SEGS 3 /* linear_qkv: three matrices, their outputs side by side in the grid */

/* The blocks of the kernels with the norm in front: norm.cu's THREADS, for its sums in its
 * order — a shuffle tree for rows of up to GW_NORM_REG_ROW (its norm_row_kernel), a tree in
 * shared memory beyond (its norm_fwd_kernel). */
#define GW_NORM_THREADS 256
#define GW_NORM_WARPS (GW_NORM_THREADS / 32)
#define GW_NORM_REG_ROW (GW_NORM_THREADS * 8)

/* Warps a column of the plain products takes when a row of W is long: a warp's loads then
 * cover too little of it at once (measured at a decode step's shapes: rows of 4 KiB and
 * more read about 1.4 times as fast split four ways, shorter rows no faster). */
#define GW_SPLIT 4
#define GW_SPLIT_BYTES 4096
#define GW_SPLIT_THREADS 256
#define GW_MIN_COLS (GW_SPLIT_THREADS / 32 / GW_SPLIT) /* the fewest columns a block takes */

/* Elements of the normalized rows in the norm kernels' shared memory, rounded up so that g
 * after them starts on a 16-byte boundary. */
static __host__ __device__ __forceinline__ int64_t gw_norm_xn_elems(int64_t R, int64_t K, size_t es)
{
    const int64_t per = 16 / (int64_t)es;
    return (R * K + per - 1) / per * per;
}

static constexpr int gw_threads(int norm, int split)
{
    return norm ? GW_NORM_THREADS : split > 1 ? GW_SPLIT_THREADS : GEMV_THREADS;
}

typedef struct gw_args {
    const void *x, *bias;
    const void *w[GW_SEGS]; /* segment s: output columns [end[s-1], end[s]) of the grid */
    void *y[GW_SEGS];
    int64_t end[GW_SEGS];
    const void *w2;     /* GW_SWIGLU: the up matrix beside w[0], the gate */
    const float *scale; /* GW_Q8: one per output channel */
    const void *res;    /* linear_add: r (R, N), added to the product as stored */
    const void *norm;   /* the kernels with the norm in front: its weight g (K), and eps */
    double eps;
    int64_t R, N, K;    /* N: every segment's columns together */
    int act, vec;
    int vec_g; /* the norm kernels: g in 16-byte pieces (aligned, K a multiple of them) */
    /* GW_ROPE: segments 0 and 1 count q's and k's rotated pairs (D / 2 a head), segment 2
     * v's columns; rows are (b, t) of T steps, at positions pos[b * pos_step] + t of the
     * caches (B, Hkv, S, D) */
    void *kc, *vc;
    const void *pos;
    int64_t pos_step, S, T, D, Hkv;
    int pos64, interleaved;
    double theta;
    cu_bad bad;
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

/* The first GEMV_UNROLL 16-byte pieces of W's row a lane reads (lane, lane + 32, ...), for
 * gw_dots: loaded before a kernel's prologue (the norm, the angle), so that their memory
 * latency passes while it runs. */
template <typename W>
static __device__ __forceinline__ void gw_first(const W *w, int64_t K, int vec, int lane, uint4 *first)
{
    constexpr int PIECE = 16 / (int)sizeof(W);
    const int64_t pieces = vec ? K / PIECE : 0;
#pragma unroll
    for (int u = 0; u < GEMV_UNROLL; u++)
        if (lane + 32 * u < pieces) first[u] = *reinterpret_cast<const uint4 *>(w + (lane + 32 * u) * PIECE);
}

/* acc[r] = dot(x row r, w) over K elements for the warp's rows (rows of x ldx apart),
 * summed over the lanes (every lane gets it); the first round of W's pieces from `first`
 * (gw_first) when it is not NULL. */
template <typename T, typename W, int RT>
static __device__ __forceinline__ void gw_dots(const T *x, int64_t ldx, const W *w, int64_t K, int vec, int rows,
                                               int lane, float *acc, const uint4 *first = nullptr)
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
            if (p0 + 32 * u < pieces)
                wraw[u] = first != nullptr && p0 == lane ? first[u]
                                                         : *reinterpret_cast<const uint4 *>(w + (p0 + 32 * u) * PIECE);
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
                gw_ld<T, PIECE>(x + r * ldx + p * PIECE, xf);
#pragma unroll
                for (int k = 0; k < PIECE; k++) acc[r] = fmaf(xf[k], wf[k], acc[r]);
            }
        }
    }
    for (int64_t k = pieces * PIECE + lane; k < K; k += 32) {
        float wv = gw_ld1(w, k);
#pragma unroll
        for (int r = 0; r < RT; r++)
            if (r < rows) acc[r] = fmaf(cu_ld(x, r * ldx + k), wv, acc[r]);
    }
#pragma unroll
    for (int r = 0; r < RT; r++) acc[r] = cu_warp_sum_f(acc[r]);
}

/* The norm weight g (K elements) into shared memory gs, asked for before x is read: at a
 * decode step it comes from memory (the step's other weights have passed through L2 since
 * the last token), and read after the sums, as it was, its latency followed theirs.
 * Asynchronous copies (cp.async) when g and K allow 16-byte pieces, so that no thread waits
 * here; gw_norm_rows waits for them before its first barrier. */
template <typename T> static __device__ __forceinline__ void gw_norm_weight(const T *g, int64_t K, int vec, T *gs)
{
    if (vec) {
        constexpr int PIECE = 16 / (int)sizeof(T);
        for (int64_t p = threadIdx.x; p < K / PIECE; p += GW_NORM_THREADS) {
            const uint32_t dst = (uint32_t)__cvta_generic_to_shared(gs + p * PIECE);
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(g + p * PIECE) : "memory");
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        return;
    }
    for (int64_t k = threadIdx.x; k < K; k += GW_NORM_THREADS) gs[k] = g[k];
}

/* The norm in front: the block's `rows` rows of x, each rms-normalized with g (gs, from
 * gw_norm_weight) and rounded to T, into xn (shared memory, rows of K). Each thread sums its
 * elements' squares in index order in double, then the block adds the threads' sums as
 * norm.cu does for a row that long, so that rstd, and each normalized value (x rstd g,
 * rounded as cu_std rounds), is the one the rms_norm node computes. A thread's elements of a
 * row are asked for together (the loop unrolled), not one memory latency after another.
 * sh: GW_NORM_THREADS doubles. Every thread calls it. */
template <typename T>
static __device__ void gw_norm_rows(const T *x, const T *gs, int64_t K, double eps, int rows, double *sh, T *xn)
{
    for (int r = 0; r < rows; r++) {
        const T *row = x + r * K;
        double ss = 0.0;
#pragma unroll 4
        for (int64_t k = threadIdx.x; k < K; k += GW_NORM_THREADS) {
            const double d = (double)cu_ld(row, k);
            ss += d * d;
        }
        /* this thread's pieces of g, waited for once x's are in: the barrier below shares
         * them (after the first row, nothing is left to wait for) */
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        if (K <= GW_NORM_REG_ROW) {
            ss = cu_warp_sum_d(ss);
            if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = ss;
            __syncthreads();
            ss = 0.0;
            for (int w = 0; w < GW_NORM_WARPS; w++) ss += sh[w];
        } else {
            sh[threadIdx.x] = ss;
            __syncthreads();
            for (int w = GW_NORM_THREADS / 2; w > 0; w /= 2) {
                if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
                __syncthreads();
            }
            ss = sh[0];
        }
        __syncthreads(); /* every thread has read sh before the next row writes it */
        const double rstd = 1.0 / sqrt(ss / (double)K + eps);
#pragma unroll 4
        for (int64_t k = threadIdx.x; k < K; k += GW_NORM_THREADS)
            cu_std(xn, r * K + k, (double)cu_ld(row, k) * rstd * (double)cu_ld(gs, k));
    }
    __syncthreads();
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

/* v rounded to T, as a product is stored, and read back. */
template <typename T> static __device__ __forceinline__ double gw_stored(float v)
{
    T s;
    cu_st(&s, 0, v);
    return (double)cu_ld(&s, 0);
}

/* GW_ROPE: the epilogue of unit n of segment seg (a pair of q or k, or a column of v): acc
 * and acc1 the products of the pair's rows j0 and j1 of head `head` (acc alone for v), c
 * the angle's cosine and sine for lane r's row r, its position `offset`. Each product is
 * rounded to T as linear_qkv stores it, then rotated as rope_cache_write rotates what it
 * reads, so the stores are the unfused pair's bits. */
template <typename T, int RT>
static __device__ __forceinline__ void gw_rope_store(const gw_args &a, int seg, int64_t n, int64_t head, int64_t j0,
                                                     int64_t j1, const float *acc, const float *acc1, double2 c,
                                                     int64_t offset, int64_t r0, int lane)
{
    const int64_t D = a.D, row = r0 + lane, b = row / a.T, t = row % a.T;
    const double x0 = gw_stored<T>(gw_pick<RT>(acc, lane));
    if (seg == 0) {
        const int64_t H = 2 * a.end[0] / D;
        rope_store(x0, gw_stored<T>(gw_pick<RT>(acc1, lane)), c, (T *)a.y[0] + (row * H + head) * D, j0, j1);
        return;
    }
    if (offset < 0 || offset > a.S - a.T) return; /* reported by the first block */
    const int64_t dst = ((b * a.Hkv + head) * a.S + offset + t) * D;
    if (seg == 1)
        rope_store(x0, gw_stored<T>(gw_pick<RT>(acc1, lane)), c, (T *)a.kc + dst, j0, j1);
    else
        cu_std((T *)a.vc + dst, n % D, x0);
}

/* y[r, n] for the rows r of this block's tile, by warp (n = blockIdx.x * warps + warp); with
 * NORM, blocks of GW_NORM_THREADS that normalize x into shared memory first. With SPLIT > 1
 * (plain products with long rows, gw_split), SPLIT warps share a column, each summing one
 * slice of K, and the slices' sums are added in slice order through shared memory: more
 * of W's row in flight at once than one warp's loads hold, and still one fixed order.
 *
 * A kernel's time at a decode step is mostly latencies in a row, so what depends on nothing
 * else goes first: before the wait for the kernel in front, rope's frequency and a prefetch of
 * the warp's rows of W into L2 (cu_prefetch_l2); after it, W's first
 * pieces (GW_ROPE's angle, from the position, while they load) before the norm, which reads
 * x and waits at its barriers meanwhile. */
template <typename T, typename W, int MODE, int RT, int NORM, int SPLIT = 1>
__global__ void __launch_bounds__(gw_threads(NORM, SPLIT)) gemv_kernel(gw_args a)
{
    constexpr int WARPS = gw_threads(NORM, SPLIT) / 32;
    static_assert(SPLIT == 1 || (NORM == 0 && (MODE == GW_FLOAT || MODE == GW_Q8)), "split: plain products only");
    const int lane = threadIdx.x & 31, slice = (threadIdx.x >> 5) % SPLIT;
    const int64_t col = (int64_t)blockIdx.x * (WARPS / SPLIT) + (threadIdx.x >> 5) / SPLIT;
    const int64_t r0 = (int64_t)blockIdx.y * RT;
    const int rows = a.R - r0 < RT ? (int)(a.R - r0) : RT;
    const bool live = col < a.N; /* the warp has a column (the norm needs every warp) */
    /* the segment holding this column: its matrix, output and width */
    int seg = 0;
#pragma unroll
    for (int k = 0; k + 1 < GW_SEGS; k++) seg += col >= a.end[k];
    const int64_t c0 = seg > 0 ? a.end[seg - 1] : 0, n = col - c0, width = a.end[seg] - c0;
    /* the W rows the warp reads: row ra of w[seg], and row rb of w2 (SwiGLU's up) or of
     * w[seg] (the other half of a rotated pair) */
    int64_t ra = n, rb = n, head = 0, j0 = 0, j1 = 0;
    double freq = 0.0;
    if constexpr (MODE == GW_ROPE) {
        const int64_t half = a.D / 2, i = n % half;
        head = seg < 2 ? n / half : n / a.D;
        j0 = rope_j0(i, a.interleaved), j1 = rope_j1(i, a.D, a.interleaved);
        ra = seg < 2 ? head * a.D + j0 : n, rb = head * a.D + j1;
        if (live && seg < 2) freq = rope_freq(i, a.D, a.theta);
    }
    /* with NORM, shared memory holds the sums' scratch, the normalized rows and g */
    extern __shared__ uint4 gw_smem[];
    double *sh = reinterpret_cast<double *>(gw_smem);
    T *xn = reinterpret_cast<T *>(sh + GW_NORM_THREADS), *gs = xn + gw_norm_xn_elems(a.R, a.K, sizeof(T));
    const W *wa = (const W *)a.w[seg] + ra * a.K;
    const W *wb = MODE == GW_SWIGLU ? (const W *)a.w2 + n * a.K : (const W *)a.w[seg] + rb * a.K;
    constexpr bool TWO = MODE == GW_SWIGLU || MODE == GW_ROPE; /* GW_ROPE: for q's and k's pairs */
    const bool two = TWO && (MODE != GW_ROPE || seg < 2);
    /* the warp's rows of W (a split column's warps taking the lines in turn), and g, into
     * L2 while the kernel in front runs: reads from memory at a decode step, they would
     * otherwise start after it */
    if (live) {
        const int64_t rowb = a.K * (int64_t)sizeof(W);
        cu_prefetch_l2(wa, rowb, lane, slice, SPLIT);
        if (two) cu_prefetch_l2(wb, rowb, lane, slice, SPLIT);
    }
    if (NORM != 0 && threadIdx.x < 32) cu_prefetch_l2(a.norm, a.K * (int64_t)sizeof(T), lane, 0, 1);
    cu_pdl_wait();
    /* Asked for as the wait ends, used later, so that their latencies pass together with
     * x's and the weights': the norm weight (into shared memory, asynchronously), the
     * float epilogue's bias and residual (lane r's column n). Not before the wait: a
     * weight may be the output of a kernel still running (a cast, an optimizer's update). */
    if constexpr (NORM != 0) gw_norm_weight((const T *)a.norm, a.K, a.vec_g, gs);
    float bv = 0.0f, rv = 0.0f;
    const bool epi = live && lane < rows && slice == 0; /* this lane stores a y */
    if (MODE == GW_FLOAT && a.bias != NULL && epi) bv = cu_ld((const T *)a.bias, n);
    if (MODE == GW_FLOAT && a.res != NULL && epi) rv = cu_ld((const T *)a.res, (r0 + lane) * width + n);
    if (MODE == GW_ROPE && blockIdx.x == 0 && blockIdx.y == 0) /* positions the caches cannot take */
        rope_check_pos(a.pos, a.pos64, a.pos_step, a.R / a.T, a.S, a.T, a.bad);
    uint4 fa[GEMV_UNROLL], fb[GEMV_UNROLL];
    if (NORM && live) {
        gw_first(wa, a.K, a.vec, lane, fa);
        if (two) gw_first(wb, a.K, a.vec, lane, fb);
    }
    double2 cs = make_double2(1.0, 0.0);
    int64_t offset = 0;
    if (MODE == GW_ROPE && live && lane < rows) {
        offset = cu_ld_index(a.pos, a.pos64, ((r0 + lane) / a.T) * a.pos_step);
        if (seg < 2) cs = rope_cs_f((r0 + lane) % a.T, offset, freq, 1.0);
    }
    const T *x = (const T *)a.x + r0 * a.K;
    if constexpr (NORM != 0) {
        /* the whole block, before any warp leaves: its columns may end inside it */
        gw_norm_rows<T>(x, gs, a.K, a.eps, rows, sh, xn);
        x = xn;
    }
    float acc[RT], up[RT];
    if constexpr (SPLIT > 1) {
        /* slice `slice` of K: whole 16-byte pieces on the vector path */
        constexpr int PIECE = 16 / (int)sizeof(W);
        const int64_t unit = a.vec ? PIECE : 1, per = ((a.K + unit - 1) / unit + SPLIT - 1) / SPLIT * unit;
        const int64_t k0 = per * slice < a.K ? per * slice : a.K, k1 = k0 + per < a.K ? k0 + per : a.K;
        __shared__ float part[WARPS][RT];
        if (live) gw_dots<T, W, RT>(x + k0, a.K, wa + k0, k1 - k0, a.vec, rows, lane, acc);
        if (live && lane == 0)
#pragma unroll
            for (int r = 0; r < RT; r++) part[threadIdx.x >> 5][r] = acc[r];
        __syncthreads();
        if (!live || slice != 0) return;
#pragma unroll
        for (int r = 0; r < RT; r++) {
            acc[r] = part[threadIdx.x >> 5][r];
            for (int k = 1; k < SPLIT; k++) acc[r] += part[(threadIdx.x >> 5) + k][r];
        }
    } else {
        if (!live) return;
        gw_dots<T, W, RT>(x, a.K, wa, a.K, a.vec, rows, lane, acc, NORM ? fa : nullptr);
        if (two) gw_dots<T, W, RT>(x, a.K, wb, a.K, a.vec, rows, lane, up, NORM ? fb : nullptr);
    }
    if (lane >= rows) return;
    if constexpr (MODE == GW_ROPE) {
        gw_rope_store<T, RT>(a, seg, n, head, j0, j1, acc, up, cs, offset, r0, lane);
        return;
    }
    /* lane r writes row r */
    float v = gw_pick<RT>(acc, lane);
    T *y = (T *)a.y[seg] + (r0 + lane) * width + n;
    if (MODE == GW_Q8) {
        /* the int8 forms read their scale and bias here: held across the dot loop, as the
         * float forms hold theirs, they took registers the tiles of several rows spill for */
        const double sv = (double)a.scale[n], bq = a.bias != NULL ? (double)cu_ld((const T *)a.bias, n) : 0.0;
        cu_st(y, 0, (float)((double)v * sv + bq));
        return;
    }
    if (MODE == GW_SWIGLU) {
        /* the reference's silu(g) * u in double, rounded once */
        cu_std(y, 0, cu_silu_d((double)v) * (double)gw_pick<RT>(up, lane));
        return;
    }
    if (a.bias != NULL) v = __fadd_rn(v, bv);
    if (a.act == GDP_ACT_NONE && a.res == NULL) {
        cu_st(y, 0, v);
        return;
    }
    /* each step rounded as its node would store it, in a register (not a store and a load
     * of y: a round trip to L2 at the end of the kernel's path) */
    T t;
    cu_st(&t, 0, v);
    if (a.act != GDP_ACT_NONE) cu_std(&t, 0, cu_act_d(a.act, (double)cu_ld(&t, 0)));
    /* the residual, added to the product as stored (segments are one: y is (R, N) like r) */
    if (a.res != NULL) cu_st(&t, 0, __fadd_rn(cu_ld(&t, 0), rv));
    *y = t;
}

/* One segment: W (N, K) into y (R, N). */
static void gw_single(gw_args *a, const void *w, void *y, int64_t N)
{
    for (int k = 0; k < GW_SEGS; k++) a->w[k] = w, a->y[k] = y, a->end[k] = N;
    a->N = N;
}

/* Rows per tile: the smallest of 1, 2, 4, 8 covering R (8 when R is larger). */
static int gw_tile(int64_t R) { return R <= 1 ? 1 : R <= 2 ? 2 : R <= 4 ? 4 : 8; }

/* Shared memory of a kernel with the norm in front: the sums' scratch, then the R rows of
 * the normalized x (R <= GEMV_MAX_ROWS: one tile), then g, from a 16-byte boundary. */
static size_t gw_norm_smem(int64_t R, int64_t K, size_t es)
{
    return (size_t)GW_NORM_THREADS * sizeof(double) + (size_t)gw_norm_xn_elems(R, K, es) * es + (size_t)K * es;
}

template <typename T, typename W, int MODE, int NORM, int SPLIT>
static void gw_launch_split(const cu_backend *be, cudaStream_t s, const gw_args &a)
{
    constexpr int cols = gw_threads(NORM, SPLIT) / 32 / SPLIT; /* columns a block */
    const int rt = gw_tile(a.R);
    const size_t smem = NORM ? gw_norm_smem(a.R, a.K, sizeof(T)) : 0;
    const dim3 grid((unsigned)((a.N + cols - 1) / cols), (unsigned)((a.R + rt - 1) / rt));
    const dim3 block(gw_threads(NORM, SPLIT));
    switch (rt) {
    case 1: cu_launch(be, gemv_kernel<T, W, MODE, 1, NORM, SPLIT>, grid, block, smem, s, a); break;
    case 2: cu_launch(be, gemv_kernel<T, W, MODE, 2, NORM, SPLIT>, grid, block, smem, s, a); break;
    case 4: cu_launch(be, gemv_kernel<T, W, MODE, 4, NORM, SPLIT>, grid, block, smem, s, a); break;
    default: cu_launch(be, gemv_kernel<T, W, MODE, 8, NORM, SPLIT>, grid, block, smem, s, a); break;
    }
}

/* Whether a plain product whose rows of W are K elements of wsize bytes splits (GW_SPLIT).
 * The choice depends on the shape alone, so a product's bits do not change between runs, and
 * a fused product (linear_add) splits as the product it replaces does. */
static int gw_split(int64_t K, size_t wsize) { return K * (int64_t)wsize >= GW_SPLIT_BYTES; }

/* The same for the graph pass, by dtype. The kernels with a norm in front, SwiGLU's pair and
 * the rotated q, k, v do not split: the pass fuses into them only products that do not split
 * either (a fused node sums in its pair's order). */
int cu_gemv_splits(int64_t K, int32_t dt) { return gw_split(K, gdp_dtype_size(dt)); }

template <typename T, typename W, int MODE, int NORM>
static void gw_launch(const cu_backend *be, cudaStream_t s, const gw_args &a)
{
    if constexpr (NORM == 0 && (MODE == GW_FLOAT || MODE == GW_Q8)) {
        if (gw_split(a.K, sizeof(W))) {
            gw_launch_split<T, W, MODE, NORM, GW_SPLIT>(be, s, a);
            return;
        }
    }
    gw_launch_split<T, W, MODE, NORM, 1>(be, s, a);
}

/* The most shared memory a block of the norm kernels may have: what cu_gemv_open opted
 * them into. */
static size_t gw_smem_cap(const cu_backend *be)
{
    const size_t dflt = (size_t)48 * 1024;
    return be != NULL && be->smem_optin > dflt ? be->smem_optin : dflt;
}

/* Whether the kernels take the norm of R rows of K elements of dtype dt in front of their
 * products; the graph pass asks before it fuses a norm into linear_qkv or linear_swiglu. */
int cu_gemv_norm_fits(const cu_backend *be, int64_t R, int64_t K, int32_t dt)
{
    if (!cu_gpu_float(dt) || R < 1 || R > GEMV_MAX_ROWS || K < 1 || (be != NULL && !be->norm_fuse)) return 0;
    return K <= (int64_t)(gw_smem_cap(be) / gdp_dtype_size(dt)) &&
           gw_norm_smem(R, K, gdp_dtype_size(dt)) <= gw_smem_cap(be);
}

template <typename T, int MODE> static void gw_opt_in_mode(const cu_backend *be)
{
    const size_t cap = gw_smem_cap(be);
    cu_smem_opt_in(be, (const void *)gemv_kernel<T, T, MODE, 1, 1>, cap);
    cu_smem_opt_in(be, (const void *)gemv_kernel<T, T, MODE, 2, 1>, cap);
    cu_smem_opt_in(be, (const void *)gemv_kernel<T, T, MODE, 4, 1>, cap);
    cu_smem_opt_in(be, (const void *)gemv_kernel<T, T, MODE, 8, 1>, cap);
}
template <typename T> static void gw_opt_in(const cu_backend *be)
{
    gw_opt_in_mode<T, GW_FLOAT>(be);
    gw_opt_in_mode<T, GW_SWIGLU>(be);
    gw_opt_in_mode<T, GW_ROPE>(be);
}

/* At open: the norm kernels' shared memory past 48 KiB (cu_smem_opt_in), once. */
void cu_gemv_open(cu_backend *be)
{
    gw_opt_in<float>(be);
    gw_opt_in<__half>(be);
    gw_opt_in<__nv_bfloat16>(be);
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
    return R >= 1 && R <= GEMV_MAX_ROWS && w->shape[0] <= (int64_t)GW_MIN_COLS * 0x7fffffff;
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
    CU_FLOAT_SWITCH(x->dtype, T, (gw_launch<T, T, GW_FLOAT, 0>(be, s, a)));
    return GDP_OK;
}

/* ---- linear_add (made by fuse.cu for decode steps) ----------------------------------------- */

/* x (R, K) with R <= GEMV_MAX_ROWS, W (N, K), [b (N)] and r (R, N), all of x's dtype and
 * contiguous (not a strided kernel: the host makes them so). */
static int add_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in < 3 || n->n_in > 4 || n->n_out != 1) return 0;
    const gdp_tensor *x = n->in[0], *w = n->in[1], *r = n->in[n->n_in - 1], *y = n->out[0];
    if (!cu_gpu_float(x->dtype) || x->ndim < 1 || w->ndim != 2 || w->dtype != x->dtype) return 0;
    const int64_t K = x->shape[x->ndim - 1], R = K > 0 ? gw_rows(x) : 0;
    if (K < 1 || w->shape[1] != K || R < 1 || R > GEMV_MAX_ROWS || w->shape[0] > (int64_t)GW_MIN_COLS * 0x7fffffff)
        return 0;
    if (y->dtype != x->dtype || r->dtype != x->dtype || !cu_same_shape(r, y) || gw_rows(y) != R) return 0;
    if (n->n_in == 4) {
        const gdp_tensor *bias = n->in[2];
        if (bias->dtype != x->dtype || bias->ndim != 1 || bias->shape[0] != w->shape[0]) return 0;
    }
    return 1;
}

static gdp_status add_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *w = node->in[1], *y = node->out[0];
    gw_args a;
    memset(&a, 0, sizeof a);
    a.x = x->data, a.bias = node->n_in > 3 ? node->in[2]->data : NULL;
    a.res = node->in[node->n_in - 1]->data;
    gw_single(&a, w->data, y->data, w->shape[0]);
    a.K = x->shape[x->ndim - 1], a.R = gw_rows(x);
    const size_t es = gdp_dtype_size(x->dtype);
    a.vec = gw_vec(x->data, w->data, a.K, es, es);
    if (a.N == 0) return GDP_OK;
    CU_FLOAT_SWITCH(x->dtype, T, (gw_launch<T, T, GW_FLOAT, 0>(be, s, a)));
    return GDP_OK;
}
CU_LAUNCHER(add_run)

/* ---- linear_qkv and linear_swiglu (made by fuse.cu for decode steps) ---------------------- */

/* x (R, K) with R <= GEMV_MAX_ROWS, the weights (out_k, K) of x's dtype and maybe a norm
 * weight (K) after them, everything contiguous (the host makes it so: these kernels are
 * not strided). More rows never come here: the graph pass fuses only decode-step products.
 * linear_swiglu has one output and two matrices, linear_qkv three of each. */
static int multi_supports(void *b, const gdp_node *n)
{
    const int swiglu = n->n_out == 1, nw = swiglu ? 2 : 3;
    if ((n->n_out != 1 && n->n_out != 3) || (n->n_in != 1 + nw && n->n_in != 2 + nw)) return 0;
    const gdp_tensor *x = n->in[0];
    if (!cu_gpu_float(x->dtype) || x->ndim < 1) return 0;
    const int64_t K = x->shape[x->ndim - 1], R = K > 0 ? gw_rows(x) : 0;
    if (K < 1 || R < 1 || R > GEMV_MAX_ROWS) return 0;
    int64_t N = 0;
    for (int k = 1; k <= nw; k++) {
        const gdp_tensor *w = n->in[k];
        if (w->dtype != x->dtype || w->ndim != 2 || w->shape[1] != K) return 0;
        N += swiglu && k == 2 ? 0 : w->shape[0];
    }
    for (int k = 0; k < n->n_out; k++)
        if (n->out[k]->dtype != x->dtype) return 0;
    if (n->n_in == 2 + nw) {
        const gdp_tensor *g = n->in[1 + nw];
        if (g->dtype != x->dtype || g->ndim != 1 || g->shape[0] != K) return 0;
        if (!cu_gemv_norm_fits((const cu_backend *)b, R, K, x->dtype)) return 0;
    }
    return N <= (int64_t)GW_MIN_COLS * 0x7fffffff;
}

static gdp_status multi_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0];
    const int swiglu = node->n_out == 1, nw = swiglu ? 2 : 3, norm = node->n_in > 1 + nw;
    gw_args a;
    memset(&a, 0, sizeof a);
    a.x = x->data, a.K = x->shape[x->ndim - 1], a.R = gw_rows(x);
    if (norm) {
        a.norm = node->in[1 + nw]->data;
        a.eps = gdp_attr_float(&node->attrs, "eps", 1e-6);
        a.vec_g = cu_aligned16(a.norm) && a.K * (int64_t)gdp_dtype_size(x->dtype) % 16 == 0;
    }
    const size_t es = gdp_dtype_size(x->dtype);
    /* with the norm, the products read x from shared memory, where its rows start on
     * 16-byte boundaries whenever they are whole 16-byte pieces */
    a.vec = (a.K * (int64_t)es) % 16 == 0 && (norm || cu_aligned16(x->data));
    if (swiglu) {
        gw_single(&a, node->in[1]->data, node->out[0]->data, node->in[1]->shape[0]);
        a.w2 = node->in[2]->data;
        a.vec = a.vec && cu_aligned16(a.w[0]) && cu_aligned16(a.w2);
    } else {
        int64_t end = 0;
        for (int k = 0; k < GW_SEGS; k++) {
            a.w[k] = node->in[1 + k]->data, a.y[k] = node->out[k]->data;
            a.end[k] = end += node->in[1 + k]->shape[0];
            a.vec = a.vec && cu_aligned16(a.w[k]);
        }
        a.N = end;
    }
    if (a.N == 0) return GDP_OK;
    if (swiglu && norm) {
        CU_FLOAT_SWITCH(x->dtype, T, (gw_launch<T, T, GW_SWIGLU, 1>(be, s, a)));
    } else if (swiglu) {
        CU_FLOAT_SWITCH(x->dtype, T, (gw_launch<T, T, GW_SWIGLU, 0>(be, s, a)));
    } else if (norm) {
        CU_FLOAT_SWITCH(x->dtype, T, (gw_launch<T, T, GW_FLOAT, 1>(be, s, a)));
    } else {
        CU_FLOAT_SWITCH(x->dtype, T, (gw_launch<T, T, GW_FLOAT, 0>(be, s, a)));
    }
    return GDP_OK;
}
CU_LAUNCHER(multi_run)

/* ---- linear_qkv_rope (made by fuse.cu for decode steps) ------------------------------------ */

/* x (B, T, K) with B T <= GEMV_MAX_ROWS and T <= 4 (each pair's angle computed where it is
 * used), Wq (H D, K), Wk, Wv (Hkv D, K), the caches (B, Hkv, S, D), pos, maybe the norm
 * weight g (K); one float dtype, contiguous (the host makes it so). */
static int qkv_rope_supports(void *b, const gdp_node *n)
{
    if ((n->n_in != 7 && n->n_in != 8) || n->n_out != 3) return 0;
    const gdp_tensor *x = n->in[0], *kc = n->in[4], *vc = n->in[5];
    if (!cu_gpu_float(x->dtype) || x->ndim != 3 || kc->ndim != 4) return 0;
    const int64_t B = x->shape[0], T = x->shape[1], K = x->shape[2], D = kc->shape[3], Hkv = kc->shape[1];
    if (K < 1 || B * T < 1 || B * T > GEMV_MAX_ROWS || T > 4 || D < 2 || D % 2 != 0 || Hkv < 1) return 0;
    if (kc->shape[0] != B || kc->shape[2] < T || !cu_same_shape(vc, kc) || kc->dtype != x->dtype || vc->dtype != x->dtype)
        return 0;
    for (int k = 1; k <= 3; k++) {
        const gdp_tensor *w = n->in[k];
        if (w->dtype != x->dtype || w->ndim != 2 || w->shape[1] != K || w->shape[0] % D != 0 ||
            (k > 1 && w->shape[0] != Hkv * D))
            return 0;
    }
    const int64_t H = n->in[1]->shape[0] / D;
    if (H < 1 || H % Hkv != 0 || !index_per_row(n->in[6], B) || !(gdp_attr_float(&n->attrs, "theta", 10000.0) > 0))
        return 0;
    for (int k = 0; k < 3; k++)
        if (n->out[k]->dtype != x->dtype) return 0;
    if (!cu_same_shape(n->out[1], kc) || !cu_same_shape(n->out[2], vc) || gdp_numel(n->out[0]) != B * T * H * D)
        return 0;
    if (n->n_in == 8) {
        const gdp_tensor *g = n->in[7];
        if (g->dtype != x->dtype || g->ndim != 1 || g->shape[0] != K) return 0;
        if (!cu_gemv_norm_fits((const cu_backend *)b, B * T, K, x->dtype)) return 0;
    }
    return (H + 3 * Hkv) * D <= (int64_t)GW_MIN_COLS * 0x7fffffff;
}

static gdp_status qkv_rope_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *kc = node->in[4], *pos = node->in[6];
    const int norm = node->n_in == 8;
    /* the caches are updated in place; out of place (a sweep's run), they are copied first */
    for (int j = 0; j < 2; j++) {
        const gdp_tensor *c = node->in[4 + j], *y = node->out[1 + j];
        if (y->data != c->data)
            CU_TRY(cudaMemcpyAsync(y->data, c->data, (size_t)gdp_numel(c) * gdp_dtype_size(c->dtype),
                                   cudaMemcpyDeviceToDevice, s));
    }
    gw_args a;
    memset(&a, 0, sizeof a);
    a.x = x->data, a.K = x->shape[2], a.R = x->shape[0] * x->shape[1];
    a.T = x->shape[1], a.D = kc->shape[3], a.Hkv = kc->shape[1], a.S = kc->shape[2];
    if (norm) {
        a.norm = node->in[7]->data;
        a.eps = gdp_attr_float(&node->attrs, "eps", 1e-6);
        a.vec_g = cu_aligned16(a.norm) && a.K * (int64_t)gdp_dtype_size(x->dtype) % 16 == 0;
    }
    const size_t es = gdp_dtype_size(x->dtype);
    a.vec = (a.K * (int64_t)es) % 16 == 0 && (norm || cu_aligned16(x->data));
    const int64_t half = a.D / 2, units[GW_SEGS] = {node->in[1]->shape[0] / 2, a.Hkv * half, a.Hkv * a.D};
    int64_t end = 0;
    for (int k = 0; k < GW_SEGS; k++) {
        a.w[k] = node->in[1 + k]->data;
        a.end[k] = end += units[k];
        a.vec = a.vec && cu_aligned16(a.w[k]);
    }
    a.N = end;
    a.y[0] = node->out[0]->data, a.kc = node->out[1]->data, a.vc = node->out[2]->data;
    a.pos = pos->data, a.pos64 = pos->dtype == GDP_I64, a.pos_step = index_step(pos);
    a.interleaved = gdp_attr_int(&node->attrs, "interleaved", 1) != 0;
    a.theta = gdp_attr_float(&node->attrs, "theta", 10000.0);
    a.bad = cu_bad_for(be, node, CU_BAD_POS, a.S, a.T, NULL);
    if (a.N == 0 || a.R == 0) return GDP_OK;
    if (norm) {
        CU_FLOAT_SWITCH(x->dtype, T, (gw_launch<T, T, GW_ROPE, 1>(be, s, a)));
    } else {
        CU_FLOAT_SWITCH(x->dtype, T, (gw_launch<T, T, GW_ROPE, 0>(be, s, a)));
    }
    return GDP_OK;
}
CU_LAUNCHER(qkv_rope_run)

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
           w->shape[0] <= (int64_t)GW_MIN_COLS * 0x7fffffff;
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
    CU_FLOAT_SWITCH(node->in[0]->dtype, T, (gw_launch<T, int8_t, GW_Q8, 0>(be, s, a)));
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
    const int lane = threadIdx.x & 31;
    const int64_t n = (int64_t)blockIdx.x * GEMV_WARPS + (threadIdx.x >> 5);
    const int64_t r0 = (int64_t)blockIdx.y * RT;
    if (n < a.N) cu_prefetch_l2((const int8_t *)a.w[0] + n * a.K, a.K, lane, 0, 1); /* as gemv_kernel */
    cu_pdl_wait();
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

static const char *const qkv_rope_attrs[] = {"theta", NULL};

#define MULTI(op) \
    CU_K(op, GDP_F32, multi_supports, multi_run_launch, NULL), CU_K(op, GDP_F16, multi_supports, multi_run_launch, NULL), \
        CU_K(op, GDP_BF16, multi_supports, multi_run_launch, NULL)

static const gdp_kernel kernels[] = {
    Q8_SIGS("linear_q8", q8_supports, q8_run_launch, NULL),
    Q8_SIGS("linear_w8a8", w8a8_supports, w8a8_run_launch, w8a8_workspace),
    MULTI("linear_qkv"),
    MULTI("linear_swiglu"),
    CU_K("linear_qkv_rope", GDP_F32, qkv_rope_supports, qkv_rope_run_launch, qkv_rope_attrs),
    CU_K("linear_qkv_rope", GDP_F16, qkv_rope_supports, qkv_rope_run_launch, qkv_rope_attrs),
    CU_K("linear_qkv_rope", GDP_BF16, qkv_rope_supports, qkv_rope_run_launch, qkv_rope_attrs),
    CU_K("linear_add", GDP_F32, add_supports, add_run_launch, NULL),
    CU_K("linear_add", GDP_F16, add_supports, add_run_launch, NULL),
    CU_K("linear_add", GDP_BF16, add_supports, add_run_launch, NULL),
};
CU_FAMILY(gemv, kernels);
