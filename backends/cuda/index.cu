/* index.cu — the backward ops of the gathers (src/ops/index.c: embedding_grad,
 * index_select_grad) and the mean squared error loss (src/ops/softmax.c: mse).
 *
 * The gathers' backward ops add rows of dy into rows of the result chosen by integer ids;
 * repeated ids add up. The reference sums every output element in double, in ascending
 * position order, and rounds once at the store. Float atomics would make the sums depend
 * on timing, and letting every warp scan every id for its own rows costs rows x ids (1.2 ms
 * for GPT-2's table and 16384 ids). So the positions are grouped by id first, and then each
 * output row is summed alone:
 *
 *  1. Grouping (sa_count_kernel, sa_scan_kernel, sa_place_kernel): a least-significant-
 *     digit radix sort of the ids, positions carried along, 8 bits a pass, as many passes
 *     as the row count needs (two for a 50257-row table). A pass counts the digits per
 *     tile of SA_TILE positions, turns the (digit, tile) counts into offsets with one
 *     exclusive scan, and puts each position at its digit's offset plus its rank among
 *     the tile's earlier positions with that digit. The ranks come from warp matches taken
 *     in position order, never from atomics, so every pass is stable and does not depend
 *     on timing: the sort leaves each id's positions in ascending order. An id outside the
 *     table sorts as the id n, past every row: the first pass reports it (baddata.cu) and
 *     it adds nothing.
 *  2. Row starts (sa_starts_kernel): start[r] = the first sorted slot whose id is >= r,
 *     a binary search per row, so that row r's positions are the slots
 *     [start[r], start[r + 1]).
 *  3. Sums: a thread per (row, 16-byte column vector; one column when the rows are not
 *     16-byte aligned) walks the row's positions in order, adds the dy elements into
 *     doubles and stores each sum once, rounded as the reference rounds (cu_std). Most
 *     rows have a few positions or none (zeros then): sa_rows_kernel takes those with at
 *     most SA_LIGHT, with few registers so that many are in flight. A frequent id (a comma
 *     in text) makes a long row, whose chain of loads and adds would set the time: those
 *     go to sa_heavy_kernel, which keeps many more dy loads in flight per thread.
 *
 * So every output element is one double sum over its positions in ascending order, rounded
 * once: the reference's arithmetic exactly, so the results match it bit for bit, and every
 * step is integer or of fixed order, so two runs match each other too. The cost is linear:
 * the passes O(ids), the sums O(ids x columns) plus the table; all ids equal is the slow
 * case, one row's columns summing every position one after another, as the exact order
 * demands. The scratch (ids and positions twice, as the passes alternate; the counts; the
 * starts: 16 bytes an id and 4 a row) is the node's workspace, and nothing waits for the
 * host, so the launches can be captured into a CUDA graph.
 */
#include "cu_vec.h"
#include "cuda_internal.h"

#define THREADS 256

/* ---- the scatter-add of embedding_grad and index_select_grad ------------------------------ */

#define SA_WARPS 8                          /* warps of a counting / placing block */
#define SA_ROUNDS 4                         /* rounds of 32 positions per warp and tile */
#define SA_TILE (SA_WARPS * 32 * SA_ROUNDS) /* positions per tile: 1024 */
#define SA_BINS 256                         /* 8-bit digits */
#define SA_SCAN_THREADS 1024
#define SA_ROW_THREADS 256
#define SA_LIGHT 16       /* rows with more positions than this are sa_heavy_kernel's */
#define SA_LIGHT_AHEAD 2  /* dy loads per batch of the sums: in sa_rows_kernel, */
#define SA_HEAVY_AHEAD 16 /* in sa_heavy_kernel (two batches are in flight) */
/* Sorted ids and positions are int32, with headroom for the sums' look-ahead */
#define SA_MAX_IDS ((int64_t)INT32_MAX - 4 * SA_HEAVY_AHEAD)

static __device__ __forceinline__ int64_t load_id(const void *ids, int ids64, int64_t j)
{
    return ids64 ? ((const int64_t *)ids)[j] : (int64_t)((const int32_t *)ids)[j];
}

/* The sort key of position k of the ids: its id, n (past every row) for a bad one. */
static __device__ __forceinline__ int32_t sa_first_key(const void *ids, int ids64, int64_t k, int64_t n)
{
    const int64_t id = load_id(ids, ids64, k);
    return id >= 0 && id < n ? (int32_t)id : (int32_t)n;
}

static __device__ __forceinline__ int sa_digit(int32_t key, int shift)
{
    return (int)(((uint32_t)key >> shift) & (SA_BINS - 1));
}

/* counts[d * tiles + t] = the positions of tile t whose key has digit d at `shift`. The
 * first pass (FIRST) reads the ids and reports the bad ones; the others read the keys the
 * previous pass placed. */
template <int FIRST>
__global__ void __launch_bounds__(SA_WARPS * 32) sa_count_kernel(const void *ids, int ids64, const int32_t *keys,
                                                                  int64_t m, int64_t n, int shift, int32_t *counts,
                                                                  cu_bad bad)
{
    cu_pdl_wait();
    __shared__ int32_t c[SA_BINS];
    for (int d = threadIdx.x; d < SA_BINS; d += blockDim.x) c[d] = 0;
    __syncthreads();
    const int64_t tile0 = (int64_t)blockIdx.x * SA_TILE;
    for (int i = threadIdx.x; i < SA_TILE && tile0 + i < m; i += blockDim.x) {
        const int64_t k = tile0 + i;
        int32_t key;
        if (FIRST) {
            const int64_t id = load_id(ids, ids64, k);
            if (id < 0 || id >= n) cu_report(bad, id, k);
            key = id >= 0 && id < n ? (int32_t)id : (int32_t)n;
        } else {
            key = keys[k];
        }
        atomicAdd(&c[sa_digit(key, shift)], 1); /* a count: the same in any order */
    }
    __syncthreads();
    for (int d = threadIdx.x; d < SA_BINS; d += blockDim.x) counts[(int64_t)d * gridDim.x + blockIdx.x] = c[d];
}

/* a[0..len) = its exclusive prefix sums, in place; one block, len a multiple of 4. Four
 * counts a thread, chunk after chunk with a running carry. */
__global__ void __launch_bounds__(SA_SCAN_THREADS) sa_scan_kernel(int32_t *a, int64_t len)
{
    cu_pdl_wait();
    __shared__ int32_t wsum[SA_SCAN_THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int32_t carry = 0;
    for (int64_t base = 0; base < len; base += 4 * SA_SCAN_THREADS) {
        const int64_t i = base + 4 * (int64_t)threadIdx.x;
        const int4 v = i < len ? *reinterpret_cast<const int4 *>(a + i) : make_int4(0, 0, 0, 0);
        const int32_t mine = v.x + v.y + v.z + v.w;
        int32_t inc = mine; /* inclusive sum over the warp's lanes */
        for (int o = 1; o < 32; o <<= 1) {
            const int32_t y = __shfl_up_sync(CU_FULL_MASK, inc, o);
            if (lane >= o) inc += y;
        }
        if (lane == 31) wsum[warp] = inc;
        __syncthreads();
        if (warp == 0) { /* inclusive sums of the warp totals */
            int32_t w = wsum[lane];
            for (int o = 1; o < 32; o <<= 1) {
                const int32_t y = __shfl_up_sync(CU_FULL_MASK, w, o);
                if (lane >= o) w += y;
            }
            wsum[lane] = w;
        }
        __syncthreads();
        const int32_t at = carry + (warp > 0 ? wsum[warp - 1] : 0) + inc - mine;
        if (i < len) *reinterpret_cast<int4 *>(a + i) = make_int4(at, at + v.x, at + v.x + v.y, at + v.x + v.y + v.z);
        carry += wsum[SA_SCAN_THREADS / 32 - 1];
        __syncthreads(); /* wsum is written again by the next chunk */
    }
}

/* One stable counting-sort pass: each position of tile blockIdx.x goes to
 * offsets[digit * tiles + tile] (the scanned counts) + the number of the tile's earlier
 * positions with its digit. Warp w owns the tile's positions [w * 32 * SA_ROUNDS, ...),
 * a round of 32 at a time, lanes in position order; `seen` counts, per warp and digit, what
 * its earlier rounds had, and a match gives the earlier lanes of this round. */
template <int FIRST>
__global__ void __launch_bounds__(SA_WARPS * 32) sa_place_kernel(const void *ids, int ids64, const int32_t *keys_in,
                                                                  const int32_t *pos_in, int64_t m, int64_t n,
                                                                  int shift, const int32_t *offsets,
                                                                  int32_t *keys_out, int32_t *pos_out)
{
    cu_pdl_wait();
    __shared__ int32_t seen[SA_WARPS][SA_BINS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < SA_WARPS * SA_BINS; i += blockDim.x) (&seen[0][0])[i] = 0;
    __syncthreads();
    const unsigned below = (1u << lane) - 1u;
    const int64_t first = (int64_t)blockIdx.x * SA_TILE + (int64_t)warp * (32 * SA_ROUNDS);
    int32_t key[SA_ROUNDS], pos[SA_ROUNDS], rank[SA_ROUNDS];
    int dig[SA_ROUNDS];
#pragma unroll
    for (int i = 0; i < SA_ROUNDS; i++) {
        const int64_t k = first + i * 32 + lane;
        key[i] = 0, pos[i] = 0, dig[i] = -1; /* past the end: a digit no position has */
        if (k < m) {
            key[i] = FIRST ? sa_first_key(ids, ids64, k, n) : keys_in[k];
            pos[i] = FIRST ? (int32_t)k : pos_in[k];
            dig[i] = sa_digit(key[i], shift);
        }
        const unsigned peers = __match_any_sync(CU_FULL_MASK, dig[i]);
        const int ahead = __popc(peers & below);
        const int32_t had = dig[i] >= 0 ? seen[warp][dig[i]] : 0;
        __syncwarp(); /* every lane has read before the group's lowest lane adds */
        if (dig[i] >= 0 && ahead == 0) seen[warp][dig[i]] = had + __popc(peers);
        __syncwarp();
        rank[i] = had + ahead;
    }
    __syncthreads();
    /* seen[w][d] becomes the slot of warp w's first position with digit d */
    for (int d = threadIdx.x; d < SA_BINS; d += blockDim.x) {
        int32_t at = offsets[(int64_t)d * gridDim.x + blockIdx.x];
        for (int w = 0; w < SA_WARPS; w++) {
            const int32_t c = seen[w][d];
            seen[w][d] = at;
            at += c;
        }
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < SA_ROUNDS; i++)
        if (dig[i] >= 0) {
            const int32_t slot = seen[warp][dig[i]] + rank[i];
            keys_out[slot] = key[i];
            pos_out[slot] = pos[i];
        }
}

/* start[r] for r in [0, n]: the first of the m sorted keys that is >= r. */
__global__ void __launch_bounds__(THREADS) sa_starts_kernel(const int32_t *keys, int64_t m, int64_t n, int32_t *start)
{
    cu_pdl_wait();
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r <= n; r += (int64_t)gridDim.x * blockDim.x) {
        int64_t lo = 0, hi = m;
        while (lo < hi) {
            const int64_t mid = (lo + hi) >> 1;
            if (keys[mid] < r) lo = mid + 1;
            else hi = mid;
        }
        start[r] = (int32_t)lo;
    }
}

/* Element k of a 16-byte vector of T, widened (little endian: element 0 is the low half
 * of x). Taken from the words, not through a pointer, so the vector stays in registers. */
static __device__ __forceinline__ uint32_t sa_word(const uint4 &u, int w)
{
    return w == 0 ? u.x : w == 1 ? u.y : w == 2 ? u.z : u.w;
}
static __device__ __forceinline__ float sa_elem(const uint4 &u, int k, const float *)
{
    return __uint_as_float(sa_word(u, k));
}
static __device__ __forceinline__ float sa_elem(const uint4 &u, int k, const __half *)
{
    const uint32_t w = sa_word(u, k >> 1);
    return __half2float(__ushort_as_half((unsigned short)(k & 1 ? w >> 16 : w & 0xffffu)));
}
static __device__ __forceinline__ float sa_elem(const uint4 &u, int k, const __nv_bfloat16 *)
{
    const uint32_t w = sa_word(u, k >> 1);
    return __bfloat162float(__ushort_as_bfloat16((unsigned short)(k & 1 ? w >> 16 : w & 0xffffu)));
}

/* What a thread of the sums holds of a dy row: VW elements, one 16-byte vector
 * (VW = cu_vec<T>::N) or one element (VW = 1). */
template <typename T, int VW> struct sa_io {
    typedef uint4 raw;
    static __device__ __forceinline__ raw load(const T *p) { return *reinterpret_cast<const uint4 *>(p); }
    static __device__ __forceinline__ void add(double *acc, const raw &u)
    {
#pragma unroll
        for (int k = 0; k < VW; k++) acc[k] += (double)sa_elem(u, k, (const T *)NULL);
    }
    static __device__ __forceinline__ void store(T *p, const double *acc) { cu_std16(p, 0, acc); }
};
template <typename T> struct sa_io<T, 1> {
    typedef T raw;
    static __device__ __forceinline__ raw load(const T *p) { return *p; }
    static __device__ __forceinline__ void add(double *acc, const raw &u) { acc[0] += (double)cu_ld(&u, 0); }
    static __device__ __forceinline__ void store(T *p, const double *acc) { cu_std(p, 0, acc[0]); }
};

/* buf[i] = the columns at `col` of dy row pos[k + i], for the slots k + i before e. */
template <typename T, int VW, int H>
static __device__ __forceinline__ void sa_fetch(typename sa_io<T, VW>::raw *buf, const T *col, const int32_t *pos,
                                                int64_t k, int64_t e, int64_t inner)
{
#pragma unroll
    for (int i = 0; i < H; i++)
        if (k + i < e) buf[i] = sa_io<T, VW>::load(col + (int64_t)pos[k + i] * inner);
}

template <typename T, int VW, int H>
static __device__ __forceinline__ void sa_add(double *acc, const typename sa_io<T, VW>::raw *buf, int64_t k, int64_t e)
{
#pragma unroll
    for (int i = 0; i < H; i++)
        if (k + i < e) sa_io<T, VW>::add(acc, buf[i]);
}

/* dx's VW columns at `out` = the sum of dy's at `col` over the rows pos[b..e), in slot
 * order (ascending positions), in double, rounded once. Loads run in batches of H, two
 * batches in flight: batch A is added while batch B loads, then A loads while B is added. */
template <typename T, int VW, int H>
static __device__ __forceinline__ void sa_sum(const T *col, const int32_t *pos, int64_t b, int64_t e, int64_t inner,
                                              T *out)
{
    typedef typename sa_io<T, VW>::raw raw;
    double acc[VW];
#pragma unroll
    for (int c = 0; c < VW; c++) acc[c] = 0.0;
    if (b < e) {
        raw A[H], B[H];
        sa_fetch<T, VW, H>(A, col, pos, b, e, inner);
        sa_fetch<T, VW, H>(B, col, pos, b + H, e, inner);
        for (int64_t k = b;; k += 2 * H) {
            sa_add<T, VW, H>(acc, A, k, e);
            if (k + H >= e) break;
            sa_fetch<T, VW, H>(A, col, pos, k + 2 * H, e, inner);
            sa_add<T, VW, H>(acc, B, k + H, e);
            if (k + 2 * H >= e) break;
            sa_fetch<T, VW, H>(B, col, pos, k + 3 * H, e, inner);
        }
    }
    sa_io<T, VW>::store(out, acc);
}

/* Every row (of outer x n) with at most SA_LIGHT positions, zeros for most of them: a
 * block takes rpb rows at a time, tpr threads a row, a thread VW columns at a time. Few
 * registers, so that many rows are in flight: the table is mostly empty rows and this
 * kernel is mostly their stores. */
template <typename T, int VW>
__global__ void __launch_bounds__(SA_ROW_THREADS) sa_rows_kernel(const T *__restrict__ dy,
                                                                 const int32_t *__restrict__ start,
                                                                 const int32_t *__restrict__ pos, T *__restrict__ dx,
                                                                 int64_t outer, int64_t n, int64_t m, int64_t inner,
                                                                 int tpr, int rpb)
{
    cu_pdl_wait();
    const int rl = (int)threadIdx.x / tpr, lv = (int)threadIdx.x - rl * tpr;
    if (rl >= rpb) return; /* the block's spare threads (no barrier follows) */
    const int64_t units = outer * n, nv = inner / VW;
    for (int64_t u = (int64_t)blockIdx.x * rpb + rl; u < units; u += (int64_t)gridDim.x * rpb) {
        const int64_t o = outer > 1 ? u / n : 0, r = u - o * n;
        const int64_t b = start[r], e = start[r + 1];
        if (e - b > SA_LIGHT) continue; /* sa_heavy_kernel's */
        for (int64_t v = lv; v < nv; v += tpr)
            sa_sum<T, VW, SA_LIGHT_AHEAD>(dy + o * m * inner + v * VW, pos, b, e, inner, dx + u * inner + v * VW);
    }
}

/* The rows with more than SA_LIGHT positions: their first slots are more than SA_LIGHT
 * apart, so each window of SA_LIGHT + 1 slots holds the first slot of one at most. Block
 * (one warp) x finds that of window x, if any, and sums 32 column vectors of the row at a
 * time (y picks which), with many more loads in flight than sa_rows_kernel: a long row,
 * a frequent id's, is a long chain of adds whose loads must not wait one by one. */
template <typename T, int VW>
__global__ void __launch_bounds__(32, 1) sa_heavy_kernel(const T *__restrict__ dy, const int32_t *__restrict__ keys,
                                                      const int32_t *__restrict__ start,
                                                      const int32_t *__restrict__ pos, T *__restrict__ dx,
                                                      int64_t outer, int64_t n, int64_t m, int64_t inner)
{
    cu_pdl_wait();
    const int lane = (int)threadIdx.x;
    const int64_t s = (int64_t)blockIdx.x * (SA_LIGHT + 1) + lane;
    int32_t key = 0;
    bool first = false; /* slot s is the first of a long row */
    if (lane <= SA_LIGHT && s < m) {
        key = keys[s];
        first = key < n && (s == 0 || keys[s - 1] != key) && start[key + 1] - s > SA_LIGHT;
    }
    const unsigned who = __ballot_sync(CU_FULL_MASK, first);
    if (who == 0) return;
    const int src = __ffs(who) - 1;
    const int64_t r = __shfl_sync(CU_FULL_MASK, key, src), b = (int64_t)blockIdx.x * (SA_LIGHT + 1) + src;
    const int64_t e = start[r + 1], nv = inner / VW;
    for (int64_t v = (int64_t)blockIdx.y * 32 + lane; v < nv; v += (int64_t)gridDim.y * 32)
        for (int64_t o = 0; o < outer; o++)
            sa_sum<T, VW, SA_HEAVY_AHEAD>(dy + o * m * inner + v * VW, pos, b, e, inner,
                                          dx + (o * n + r) * inner + v * VW);
}

/* dy (outer, m, inner), ids (m) -> dx (outer, n, inner): dx[o, r] = sum over j with ids[j] == r of dy[o, j] */
typedef struct sa_dims {
    int64_t outer, n, m, inner;
} sa_dims;

static int64_t sa_tiles(int64_t m) { return (m + SA_TILE - 1) / SA_TILE; }

/* Passes of 8 bits that hold every key, n (a bad id's) included. */
static int sa_passes(int64_t n)
{
    int bits = 0;
    while (bits < 62 && (n >> bits) != 0) bits++;
    return bits > 8 ? (bits + 7) / 8 : 1;
}

/* The workspace's pieces, at multiples of CU_WS_ALIGN: two (keys, positions) buffers the
 * passes alternate between, the (digit, tile) counts, the row starts. */
typedef struct sa_layout {
    size_t keys[2], pos[2], counts, start, total;
} sa_layout;

static sa_layout sa_plan(const sa_dims &d)
{
    sa_layout l;
    const size_t ids = cu_ws_round((size_t)d.m * sizeof(int32_t));
    size_t at = 0;
    for (int i = 0; i < 2; i++) {
        l.keys[i] = at, at += ids;
        l.pos[i] = at, at += ids;
    }
    l.counts = at, at += cu_ws_round((size_t)sa_tiles(d.m) * SA_BINS * sizeof(int32_t));
    l.start = at, at += cu_ws_round((size_t)(d.n + 1) * sizeof(int32_t));
    l.total = at;
    return l;
}

/* The sizes the int32 slots and keys hold. */
static int sa_fits(const sa_dims &d) { return d.m <= SA_MAX_IDS && d.n < (int64_t)INT32_MAX; }

template <typename T, int VW>
static void sa_sums(const cu_backend *be, cudaStream_t s, const T *dy, const int32_t *keys, const int32_t *start,
                    const int32_t *pos, T *dx, const sa_dims &d)
{
    const int64_t nv = d.inner / VW;
    if (d.m > SA_LIGHT) { /* else no row is long */
        const int64_t windows = (d.m + SA_LIGHT) / (SA_LIGHT + 1), chunks = (nv + 31) / 32;
        const dim3 grid((unsigned)windows, (unsigned)(chunks < 65535 ? chunks : 65535));
        cu_launch(be, sa_heavy_kernel<T, VW>, grid, dim3(32), 0, s, dy, keys, start, pos, dx, d.outer, d.n, d.m,
                  d.inner);
    }
    const int tpr = (int)(nv < SA_ROW_THREADS ? nv : SA_ROW_THREADS), rpb = SA_ROW_THREADS / tpr;
    const unsigned block = (unsigned)((tpr * rpb + 31) / 32 * 32);
    const int64_t want = (d.outer * d.n + rpb - 1) / rpb, cap = (int64_t)1 << 30;
    cu_launch(be, sa_rows_kernel<T, VW>, dim3((unsigned)(want < cap ? want : cap)), dim3(block), 0, s, dy, start, pos,
              dx, d.outer, d.n, d.m, d.inner, tpr, rpb);
}

/* 16-byte vectors when the rows allow them, single elements otherwise. */
template <typename T>
static void sa_rows(const cu_backend *be, cudaStream_t s, const T *dy, const int32_t *keys, const int32_t *start,
                    const int32_t *pos, T *dx, const sa_dims &d)
{
    if (d.inner % cu_vec<T>::N == 0 && cu_aligned16(dy) && cu_aligned16(dx))
        sa_sums<T, cu_vec<T>::N>(be, s, dy, keys, start, pos, dx, d);
    else
        sa_sums<T, 1>(be, s, dy, keys, start, pos, dx, d);
}

static gdp_status scatter_add(cu_backend *be, const gdp_node *node, cudaStream_t s, const sa_dims &d, cu_bad bad,
                              gdp_err *err)
{
    const gdp_tensor *ids = node->in[1], *dx = node->out[0];
    const sa_layout l = sa_plan(d);
    char *ws = NULL;
    gdp_status st = cu_ws(node, l.total, &ws, err);
    if (st != GDP_OK) return st;
    int32_t *keys[2] = {(int32_t *)(ws + l.keys[0]), (int32_t *)(ws + l.keys[1])};
    int32_t *pos[2] = {(int32_t *)(ws + l.pos[0]), (int32_t *)(ws + l.pos[1])};
    int32_t *counts = (int32_t *)(ws + l.counts), *start = (int32_t *)(ws + l.start);
    const int ids64 = ids->dtype == GDP_I64, passes = sa_passes(d.n);
    const int64_t tiles = sa_tiles(d.m);
    const dim3 tgrid((unsigned)tiles), tblock(SA_WARPS * 32);
    int last = 0; /* the buffer the last pass filled */
    /* the sort runs even when dx is empty: it is what reports bad ids */
    for (int p = 0; p < passes && d.m > 0; p++) {
        const int shift = 8 * p, to = p & 1;
        const int32_t *kin = p > 0 ? keys[to ^ 1] : (const int32_t *)NULL, *pin = p > 0 ? pos[to ^ 1] : kin;
        if (p == 0)
            cu_launch(be, sa_count_kernel<1>, tgrid, tblock, 0, s, ids->data, ids64, kin, d.m, d.n, shift, counts, bad);
        else
            cu_launch(be, sa_count_kernel<0>, tgrid, tblock, 0, s, ids->data, ids64, kin, d.m, d.n, shift, counts, bad);
        cu_launch(be, sa_scan_kernel, dim3(1), dim3(SA_SCAN_THREADS), 0, s, counts, tiles * SA_BINS);
        if (p == 0)
            cu_launch(be, sa_place_kernel<1>, tgrid, tblock, 0, s, ids->data, ids64, kin, pin, d.m, d.n, shift,
                      (const int32_t *)counts, keys[to], pos[to]);
        else
            cu_launch(be, sa_place_kernel<0>, tgrid, tblock, 0, s, ids->data, ids64, kin, pin, d.m, d.n, shift,
                      (const int32_t *)counts, keys[to], pos[to]);
        last = to;
    }
    if (d.outer * d.n == 0 || d.inner == 0) return GDP_OK;
    cu_launch(be, sa_starts_kernel, dim3(cu_blocks(be, d.n + 1, THREADS)), dim3(THREADS), 0, s,
              (const int32_t *)keys[last], d.m, d.n, start);
    CU_FLOAT_SWITCH(dx->dtype, T,
                    sa_rows<T>(be, s, (const T *)node->in[0]->data, keys[last], start, pos[last], (T *)dx->data, d));
    return GDP_OK;
}

/* ---- embedding_grad: dy (ids.shape, D), ids -> d table (V, D) ------------------------------ */

static sa_dims embedding_grad_dims(const gdp_node *n)
{
    const gdp_tensor *dt = n->out[0];
    sa_dims d = {1, dt->shape[0], gdp_numel(n->in[1]), dt->shape[1]};
    return d;
}

static int embedding_grad_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 2 || n->n_out != 1) return 0;
    const gdp_tensor *dy = n->in[0], *ids = n->in[1], *dt = n->out[0];
    if (!cu_gpu_float(dy->dtype) || !gdp_is_index(ids->dtype) || dt->dtype != dy->dtype || dt->ndim != 2) return 0;
    if (dy->ndim != ids->ndim + 1 || dy->shape[dy->ndim - 1] != dt->shape[1]) return 0;
    for (int i = 0; i < ids->ndim; i++)
        if (dy->shape[i] != ids->shape[i]) return 0;
    return sa_fits(embedding_grad_dims(n));
}

static size_t embedding_grad_workspace(void *b, const gdp_node *n)
{
    (void)b;
    return cu_ws_declare(sa_plan(embedding_grad_dims(n)).total);
}

static gdp_status embedding_grad_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const sa_dims d = embedding_grad_dims(node);
    cu_bad bad = cu_bad_for(be, node, CU_BAD_ROW, d.n, 0, node->in[1]);
    return scatter_add(be, node, s, d, bad, err);
}
CU_LAUNCHER(embedding_grad_run)

/* ---- index_select_grad: dy (x with axis -> m), idx (m) -> dx (input_shape) ----------------- */

static sa_dims index_select_grad_dims(const gdp_node *n)
{
    const gdp_tensor *dx = n->out[0];
    int axis = cu_axis(gdp_attr_int(&n->attrs, "axis", 0), dx->ndim);
    sa_dims d = {cu_prod(dx->shape, 0, axis), dx->shape[axis], n->in[1]->shape[0],
                 cu_prod(dx->shape, axis + 1, dx->ndim)};
    return d;
}

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
    return sa_fits(index_select_grad_dims(n));
}

static size_t index_select_grad_workspace(void *b, const gdp_node *n)
{
    (void)b;
    return cu_ws_declare(sa_plan(index_select_grad_dims(n)).total);
}

static gdp_status index_select_grad_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const sa_dims d = index_select_grad_dims(node);
    int axis = cu_axis(gdp_attr_int(&node->attrs, "axis", 0), node->out[0]->ndim);
    cu_bad bad = cu_bad_for(be, node, CU_BAD_INDEX, d.n, axis, node->in[1]);
    return scatter_add(be, node, s, d, bad, err);
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

#define FLOATS3(op, sup, fn, attrs, ws)                                                                        \
    CU_KX(op, GDP_F32, 0, sup, fn, attrs, ws), CU_KX(op, GDP_F16, 0, sup, fn, attrs, ws),                        \
        CU_KX(op, GDP_BF16, 0, sup, fn, attrs, ws)

static const gdp_kernel kernels[] = {
    FLOATS3("embedding_grad", embedding_grad_supports, embedding_grad_run_launch, NULL, embedding_grad_workspace),
    FLOATS3("index_select_grad", index_select_grad_supports, index_select_grad_run_launch, axis_attrs,
            index_select_grad_workspace),
    FLOATS3("mse", mse_supports, mse_run_launch, NULL, mse_workspace),
};
CU_FAMILY(index, kernels);
