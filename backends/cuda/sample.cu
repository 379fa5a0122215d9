/* sample.cu — the sample op (src/ops/sample.c) on the device: each row's token is picked
 * here, so a decode step reads back one id per sequence instead of a row of logits, and the
 * step stays one captured graph.
 *
 * Greedy is gd_lm_sample's first highest logit: scanning ids upwards it keeps the first
 * value that is larger than the best so far. So a NaN never wins, except that a NaN at id 0
 * is never replaced (nothing compares larger than it), and a row with nothing larger than
 * -inf picks id 0. In parallel: the smallest id holding the largest non-NaN value, then the
 * id-0 rule. A block per row; each thread scans a stride of ids, then a fixed tree. A wide
 * row (a large vocabulary) is split among blocks whose bests a second small kernel folds:
 * (value, id) is a total order on non-NaN values, so the parts give the same token.
 *
 * With a temperature the token must be the reference's to the bit (src/nn/lm_sample.c), so
 * the kernels follow its steps, and its double sums in runs of GDP_SAMPLE_RUN
 * (gradus_semantics.h): a thread sums a run, one thread adds the runs' sums in turn, and a
 * running sum is the runs' before it plus its run's through it, found by a thread a run.
 *   1. (a block per row) z = logit / temperature in f32, as a 32-bit key that orders like
 *      "larger z first" (-0 as +0, since the reference compares values); with (key, id)
 *      the order is the reference's. top_k: a radix select finds the k-th key, and the
 *      candidates (keys below it, then the lowest ids of those equal to it) are written in
 *      id order by a block scan. Their weights p = gdp_exp(z - max z) (the exp every backend
 *      shares) in parallel, and their total in runs. Without top_p the token is the first
 *      candidate whose running sum exceeds u = gdp_sample_u53(seed, draw) * total.
 *   2. top_p: the candidates (row << (32 + idbits) | key << idbits | id, unique) sorted by
 *      one radix sort over every row (CUB's, many blocks), scratch in the node's workspace.
 *      (A batch whose row index does not fit in that key falls back.)
 *   3. top_p (a block per row): p per sorted candidate in parallel (step 1's, gathered by
 *      id), then p / total; their running sums in runs; the cut is the first whose running
 *      fraction reaches top_p, the mass the running p there, and the token the first whose
 *      running p exceeds u = gdp_sample_u53 * mass.
 * Rows holding NaN logits are the exception: the reference's order is not total there
 * (its quickselect, heap and radix sort do not place NaN alike), so their tokens may
 * differ; they are garbage in any case.
 */
#include "cuda_internal.h"

#include <cub/device/device_radix_sort.cuh>
#include <math.h>

#define SAMPLE_THREADS 512

/* (v, i) ahead of (bv, bi): larger, or as large with a smaller id; NaN never ahead. */
static __device__ __forceinline__ bool ahead(float v, int64_t i, float bv, int64_t bi)
{
    return v > bv || (v == bv && i < bi);
}

/* The block's best (value, id) over ids [lo, hi) of a row, in thread 0 (a fixed tree). */
template <typename T>
static __device__ void greedy_best(const T *row, int64_t s1, int64_t lo, int64_t hi, int64_t V, float *bv_out,
                                   int64_t *bi_out)
{
    __shared__ float shv[SAMPLE_THREADS / 32];
    __shared__ int64_t shi[SAMPLE_THREADS / 32];
    float bv = -INFINITY;
    int64_t bi = V; /* nothing yet: any non-NaN value is ahead, -inf included */
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float v = cu_ld(row, i * s1);
        if (ahead(v, i, bv, bi)) bv = v, bi = i;
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ahead(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shv[warp] = bv, shi[warp] = bi;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        if (ahead(shv[w], shi[w], bv, bi)) bv = shv[w], bi = shi[w];
    *bv_out = bv, *bi_out = bi;
}

/* A row's token from its best (value, id): the id-0 rule of the reference applied. */
template <typename T>
static __device__ __forceinline__ int32_t greedy_pick(const T *row, int64_t bi, int64_t V)
{
    float first = cu_ld(row, 0);
    return (first != first || bi >= V) ? 0 : (int32_t)bi;
}

/* One block per row (a row of up to GREEDY_SPAN ids). */
template <typename T>
__global__ void __launch_bounds__(SAMPLE_THREADS) greedy_kernel(const T *x, int64_t s0, int64_t s1, int64_t V, int32_t *out)
{
    cu_pdl_wait();
    const T *row = x + (int64_t)blockIdx.x * s0;
    float bv;
    int64_t bi;
    greedy_best(row, s1, 0, V, V, &bv, &bi);
    if (threadIdx.x == 0) out[blockIdx.x] = greedy_pick(row, bi, V);
}

/* Wider rows (a large vocabulary): block (p, r) takes ids [p span, (p + 1) span) of row r
 * into the workspace, then greedy_final_kernel folds each row's parts in part order — the
 * same (value, id) order, so the same token as one block would pick. */
#define GREEDY_SPAN ((int64_t)SAMPLE_THREADS * 8)
#define GREEDY_MAX_PARTS 1024

template <typename T>
__global__ void __launch_bounds__(SAMPLE_THREADS) greedy_part_kernel(const T *x, int64_t s0, int64_t s1, int64_t V,
                                                                     float *pv, int64_t *pi)
{
    cu_pdl_wait();
    const int64_t r = blockIdx.y, p = blockIdx.x, lo = p * GREEDY_SPAN;
    const int64_t hi = lo + GREEDY_SPAN < V ? lo + GREEDY_SPAN : V;
    float bv;
    int64_t bi;
    greedy_best(x + r * s0, s1, lo, hi, V, &bv, &bi);
    if (threadIdx.x == 0) pv[r * gridDim.x + p] = bv, pi[r * gridDim.x + p] = bi;
}

template <typename T>
__global__ void greedy_final_kernel(const T *x, int64_t s0, int64_t B, int64_t V, int parts, const float *pv,
                                    const int64_t *pi, int32_t *out)
{
    cu_pdl_wait();
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < B; r += (int64_t)gridDim.x * blockDim.x) {
        float bv = -INFINITY;
        int64_t bi = V;
        for (int p = 0; p < parts; p++) {
            const float v = pv[r * parts + p];
            const int64_t i = pi[r * parts + p];
            if (ahead(v, i, bv, bi)) bv = v, bi = i;
        }
        out[r] = greedy_pick(x + r * s0, bi, V);
    }
}

/* Parts of a row for greedy_part_kernel, or 1 (one block per row: greedy_kernel). */
static int greedy_parts(const gdp_node *n)
{
    const int64_t B = n->in[0]->shape[0], V = n->in[0]->shape[1], parts = (V + GREEDY_SPAN - 1) / GREEDY_SPAN;
    return parts > 1 && parts <= GREEDY_MAX_PARTS && B <= 65535 ? (int)parts : 1;
}
static size_t greedy_bytes(const gdp_node *n, int parts)
{
    const size_t k = (size_t)n->in[0]->shape[0] * (size_t)parts;
    return cu_ws_round(k * sizeof(float)) + k * sizeof(int64_t);
}

/* ---- sampling with a temperature --------------------------------------------------------- */

#define PICK_THREADS 1024

struct pick_args {
    int64_t s0, s1, B, V, n; /* logits strides and shape; n: candidates per row (top_k or V) */
    int idbits;              /* bits of an id in a candidate's sort key */
    float temp;              /* (float)temperature, as the reference divides by */
    int top_p_on;            /* 0 < top_p < 1 */
    double top_p;
    uint64_t seed;
    const void *draw;        /* (B) i32 or i64, stride ds */
    int draw_i64;
    int64_t ds;
    uint64_t *cand;          /* (B, n) key << idbits | id, in id order; top-p: then p in sorted order */
    uint64_t *sorted;        /* (B, n) the candidates in order (top-p only) */
    double *w;               /* (B, n) weights */
    double *runs;            /* (B, 2, nruns) the runs' sums, then the sums of the runs before each */
    int64_t nruns;
    int row_shift;           /* the row's place in a sort key (32 + idbits; top-p only) */
    float *rmax;             /* (B) the largest z of each row (top-p only) */
    double *rtot;            /* (B) the total weight of each row (top-p only) */
    int32_t *out;
};

/* The order key of z: a smaller key is ahead (a larger z). -0 keys as +0. */
static __device__ __forceinline__ uint32_t z_key(float z)
{
    uint32_t u = __float_as_uint(z == 0.0f ? 0.0f : z);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending with z */
    return ~u;
}

static __device__ __forceinline__ float key_z(uint32_t k)
{
    uint32_t u = ~k;
    return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}

template <typename T>
static __device__ __forceinline__ uint32_t logit_key(const T *row, int64_t v, const pick_args &a)
{
    return z_key(__fdiv_rn(cu_ld(row, v * a.s1), a.temp));
}

static __device__ __forceinline__ uint64_t draw_of(const pick_args &a, int64_t b)
{
    int64_t d = a.draw_i64 ? ((const int64_t *)a.draw)[b * a.ds] : (int64_t)((const int32_t *)a.draw)[b * a.ds];
    return (uint64_t)d;
}

/* The block's smallest v; sh holds 32 words. */
static __device__ uint32_t block_min(uint32_t v, uint32_t *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < nw ? sh[lane] : 0xffffffffu;
        for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    v = sh[0];
    __syncthreads();
    return v;
}

/* The block's inclusive prefix sum of v in thread order, and its total; sh holds 32 words. */
static __device__ uint32_t block_scan(uint32_t v, uint32_t *sh, uint32_t *total)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 1; o < 32; o <<= 1) {
        uint32_t t = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += t;
    }
    if (lane == 31) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        uint32_t t = lane < nw ? sh[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            uint32_t u = __shfl_up_sync(0xffffffffu, t, o);
            if (lane >= o) t += u;
        }
        if (lane < nw) sh[lane] = t;
    }
    __syncthreads();
    v += warp > 0 ? sh[warp - 1] : 0;
    *total = sh[nw - 1];
    __syncthreads();
    return v;
}

/* A run's values are read SAMPLE_LOADS at a time before they are added, so that a thread
 * waits for memory once a group, not once an addition (w comes from L2). */
#define SAMPLE_LOADS 8

/* acc + w[j] + ... through w[e - 1], one rounded addition at a time. */
static __device__ __forceinline__ double add_run(double acc, const double *w, int64_t j, int64_t e)
{
    for (; j < e; j += SAMPLE_LOADS) {
        double v[SAMPLE_LOADS];
#pragma unroll
        for (int k = 0; k < SAMPLE_LOADS; k++) v[k] = j + k < e ? w[j + k] : 0.0;
#pragma unroll
        for (int k = 0; k < SAMPLE_LOADS; k++)
            if (j + k < e) acc = __dadd_rn(acc, v[k]);
    }
    return acc;
}

/* sums[c] = run c's sum of w[0..n) (one rounded addition at a time from its first value),
 * a thread a run; with TWO, sums2[c] the same of w2, the two chains side by side. */
template <bool TWO>
static __device__ void run_sums(const double *w, const double *w2, int64_t n, double *sums, double *sums2)
{
    const int64_t nr = (n + GDP_SAMPLE_RUN - 1) / GDP_SAMPLE_RUN;
    for (int64_t c = threadIdx.x; c < nr; c += blockDim.x) {
        const int64_t e = min(n, (c + 1) * GDP_SAMPLE_RUN);
        double acc = 0, acc2 = 0;
        for (int64_t j = c * GDP_SAMPLE_RUN; j < e; j += SAMPLE_LOADS) {
            double v[SAMPLE_LOADS], v2[SAMPLE_LOADS];
#pragma unroll
            for (int k = 0; k < SAMPLE_LOADS; k++) {
                v[k] = j + k < e ? w[j + k] : 0.0;
                if (TWO) v2[k] = j + k < e ? w2[j + k] : 0.0;
            }
#pragma unroll
            for (int k = 0; k < SAMPLE_LOADS; k++)
                if (j + k < e) {
                    acc = __dadd_rn(acc, v[k]);
                    if (TWO) acc2 = __dadd_rn(acc2, v2[k]);
                }
        }
        sums[c] = acc;
        if (TWO) sums2[c] = acc2;
    }
}

/* After run_sums: sums[c] becomes the sum of the runs before c, added in turn from 0 by one
 * thread, from shared memory (the block brings in 1024 runs at a time); every thread gets
 * the total. */
static __device__ double run_befores(double *sums, int64_t n, double *total_sh)
{
    __shared__ double part[1024];
    const int64_t nr = (n + GDP_SAMPLE_RUN - 1) / GDP_SAMPLE_RUN;
    double acc = 0;
    for (int64_t c0 = 0; c0 < nr; c0 += 1024) {
        const int m = nr - c0 < 1024 ? (int)(nr - c0) : 1024;
        __syncthreads();
        for (int i = threadIdx.x; i < m; i += blockDim.x) part[i] = sums[c0 + i];
        __syncthreads();
        if (threadIdx.x == 0)
            for (int i = 0; i < m; i++) {
                const double t = part[i];
                part[i] = acc;
                acc = __dadd_rn(acc, t);
            }
        __syncthreads();
        for (int i = threadIdx.x; i < m; i += blockDim.x) sums[c0 + i] = part[i];
    }
    if (threadIdx.x == 0) *total_sh = acc;
    __syncthreads();
    return *total_sh;
}

/* The first i < n whose running sum of w (befores from run_befores) exceeds t (GE: reaches
 * it), a thread a run; n when none. All threads get it. */
template <bool GE>
static __device__ int64_t run_first(const double *w, int64_t n, const double *befores, double t, uint32_t *sh)
{
    uint32_t first = 0xffffffffu;
    const int64_t nr = (n + GDP_SAMPLE_RUN - 1) / GDP_SAMPLE_RUN;
    for (int64_t c = threadIdx.x; c < nr && first == 0xffffffffu; c += blockDim.x) {
        const int64_t e = min(n, (c + 1) * GDP_SAMPLE_RUN);
        const double before = befores[c];
        double acc = 0;
        for (int64_t j = c * GDP_SAMPLE_RUN; j < e && first == 0xffffffffu; j += SAMPLE_LOADS) {
            double v[SAMPLE_LOADS];
#pragma unroll
            for (int k = 0; k < SAMPLE_LOADS; k++) v[k] = j + k < e ? w[j + k] : 0.0;
#pragma unroll
            for (int k = 0; k < SAMPLE_LOADS; k++)
                if (j + k < e && first == 0xffffffffu) {
                    acc = __dadd_rn(acc, v[k]);
                    const double run = __dadd_rn(before, acc);
                    if (GE ? run >= t : t < run) first = (uint32_t)(j + k);
                }
        }
    }
    first = block_min(first, sh);
    return first == 0xffffffffu ? n : (int64_t)first;
}

/* The running sum of w through i (< n), with the befores of run_befores. */
static __device__ double run_at(const double *w, int64_t i, const double *befores)
{
    const int64_t c = i / GDP_SAMPLE_RUN;
    return __dadd_rn(befores[c], add_run(0.0, w, c * GDP_SAMPLE_RUN, i + 1));
}

/* Step 1 (see the top): the candidates, their weights and total, and without top_p the token. */
template <typename T>
__global__ void __launch_bounds__(PICK_THREADS) pick_candidates_kernel(const T *x, pick_args a)
{
    __shared__ uint32_t sh[32];
    __shared__ uint32_t hist[256];
    __shared__ uint32_t sel[2];
    __shared__ double total_sh;
    const int64_t b = blockIdx.x, V = a.V, n = a.n;
    const T *row = x + b * a.s0;
    uint64_t *cand = a.cand + b * n;
    double *w = a.w + b * n;
    const uint64_t row_key = a.top_p_on ? (uint64_t)b << a.row_shift : 0; /* one sort for every row */

    /* the largest z has the smallest key, and is always a candidate */
    uint32_t kmin = 0xffffffffu;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) kmin = min(kmin, logit_key(row, v, a));
    const float zmax = key_z(block_min(kmin, sh));

    if (n < V) {
        /* the n-th smallest key, a byte at a time from the top: `prefix` its bytes so far,
         * `rank` its rank among the keys that share them */
        uint32_t prefix = 0, mask = 0, rank = (uint32_t)n;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
            __syncthreads();
            for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
                uint32_t k = logit_key(row, v, a);
                if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1u);
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                uint32_t below = 0, d = 0;
                for (; d < 255; d++) {
                    if (below + hist[d] >= rank) break;
                    below += hist[d];
                }
                sel[0] = prefix | d << shift;
                sel[1] = rank - below;
            }
            __syncthreads();
            prefix = sel[0], rank = sel[1], mask |= 255u << shift;
        }
        /* keys below `prefix`, and the first `rank` ids whose key equals it, in id order:
         * a candidate's place is the count of both kinds taken before it */
        uint32_t run_lt = 0, run_eq = 0;
        for (int64_t base = 0; base < V; base += blockDim.x) {
            const int64_t v = base + threadIdx.x;
            const uint32_t k = v < V ? logit_key(row, v, a) : 0xffffffffu;
            const uint32_t lt = v < V && k < prefix, eq = v < V && k == prefix, mine = lt | eq << 16;
            uint32_t tot, ex = block_scan(mine, sh, &tot) - mine;
            const uint32_t eq_before = run_eq + (ex >> 16);
            if (lt || (eq && eq_before < rank))
                cand[run_lt + (ex & 0xffffu) + min(eq_before, rank)] = row_key | (uint64_t)k << a.idbits | (uint64_t)v;
            run_lt += tot & 0xffffu, run_eq += tot >> 16;
        }
    } else {
        for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
            cand[v] = row_key | (uint64_t)logit_key(row, v, a) << a.idbits | (uint64_t)v;
    }
    __syncthreads();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        w[j] = gdp_exp((double)key_z((uint32_t)(cand[j] >> a.idbits)) - (double)zmax);
    __syncthreads();
    double *runs = a.runs + b * 2 * a.nruns;
    run_sums<false>(w, NULL, n, runs, NULL);
    const double total = run_befores(runs, n, &total_sh);
    if (a.top_p_on) {
        if (threadIdx.x == 0) {
            a.rmax[b] = zmax, a.rtot[b] = total;
        }
        return;
    }
    const double u = gdp_sample_u53(a.seed, draw_of(a, b)) * total;
    const int64_t j = min(run_first<false>(w, n, runs, u, sh), n - 1);
    if (threadIdx.x == 0) a.out[b] = (int32_t)(cand[j] & (((uint64_t)1 << a.idbits) - 1));
}

/* Step 3 (see the top): top_p over the sorted candidates, and the token. */
__global__ void __launch_bounds__(PICK_THREADS) pick_top_p_kernel(pick_args a)
{
    __shared__ uint32_t sh[32];
    __shared__ double total_sh;
    const int64_t b = blockIdx.x, n = a.n;
    const uint64_t *sorted = a.sorted + b * n, idmask = ((uint64_t)1 << a.idbits) - 1;
    double *w = a.w + b * n;                 /* step 1's weights in id order, then p / total */
    double *p = (double *)(a.cand + b * n);  /* the weights in sorted order: the unsorted keys are done with */
    double *rruns = a.runs + b * 2 * a.nruns, *pruns = rruns + a.nruns;
    const float zmax = a.rmax[b];
    const double total = a.rtot[b];
    /* every id a candidate: its weight is step 1's, at its id; else (top-k) computed again */
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        p[i] = n == a.V ? w[sorted[i] & idmask]
                        : gdp_exp((double)key_z((uint32_t)(sorted[i] >> a.idbits)) - (double)zmax);
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) w[i] = p[i] / total; /* the fractions, sorted */
    __syncthreads();
    run_sums<true>(w, p, n, rruns, pruns);
    run_befores(rruns, n, &total_sh);
    run_befores(pruns, n, &total_sh);
    /* taken: through the first whose running fraction reaches top_p (all when none does) */
    const int64_t taken = min(run_first<true>(w, n, rruns, a.top_p, sh) + 1, n);
    const double mass = run_at(p, taken - 1, pruns);
    const double u = gdp_sample_u53(a.seed, draw_of(a, b)) * mass;
    const int64_t i = min(run_first<false>(p, taken, pruns, u, sh), taken - 1);
    if (threadIdx.x == 0) a.out[b] = (int32_t)(sorted[i] & idmask);
}

/* The workspace's parts, each at a multiple of CU_WS_ALIGN; `sort_bytes` is CUB's scratch. */
struct pick_layout {
    int64_t n;
    int idbits, top_p_on, row_shift, sort_bits; /* sort_bits: the sort key's */
    int64_t nruns;
    size_t cand, sorted, w, runs, rmax, rtot, sort, sort_bytes, total;
};

/* Bits of an index below n (at least `least`). */
static int bits_for(int64_t n, int least)
{
    int bits = least;
    while (((int64_t)1 << bits) < n) bits++;
    return bits;
}

static gdp_status pick_plan(const gdp_node *node, pick_layout *l, gdp_err *err)
{
    const int64_t B = node->in[0]->shape[0], V = node->in[0]->shape[1];
    const int64_t k = gdp_attr_int(&node->attrs, "top_k", 0);
    const double tp = gdp_attr_float(&node->attrs, "top_p", 0);
    l->n = k > 0 && k < V ? k : V;
    l->top_p_on = tp > 0 && tp < 1;
    l->idbits = bits_for(V, 1);
    l->row_shift = 32 + l->idbits;
    l->sort_bits = l->row_shift + bits_for(B, 0); /* at most 64: sample_supports */
    l->nruns = (l->n + GDP_SAMPLE_RUN - 1) / GDP_SAMPLE_RUN;
    const size_t rows = (size_t)(B * l->n) * sizeof(uint64_t);
    size_t at = 0;
    l->cand = at, at += cu_ws_round(rows);
    l->w = at, at += cu_ws_round(rows);
    l->runs = at, at += cu_ws_round((size_t)(B * 2 * l->nruns) * sizeof(double));
    l->sorted = l->rmax = l->rtot = l->sort = l->sort_bytes = 0;
    if (l->top_p_on) {
        l->sorted = at, at += cu_ws_round(rows);
        l->rmax = at, at += cu_ws_round((size_t)B * sizeof(float));
        l->rtot = at, at += cu_ws_round((size_t)B * sizeof(double));
        cudaError_t e = cub::DeviceRadixSort::SortKeys((void *)NULL, l->sort_bytes, (const uint64_t *)NULL,
                                                       (uint64_t *)NULL, (int)(B * l->n), 0, l->sort_bits);
        if (e != cudaSuccess) return cu_check(e, "cub::DeviceRadixSort::SortKeys (scratch size)", err);
        l->sort = at, at += cu_ws_round(l->sort_bytes);
    }
    l->total = at;
    return GDP_OK;
}

/* Greedy over a wide row its parts' bests; sampling its candidates, weights and (top-p) the
 * sort's. */
static size_t sample_workspace(void *b, const gdp_node *n)
{
    (void)b;
    if (!(gdp_attr_float(&n->attrs, "temperature", 0) > 0)) {
        const int parts = greedy_parts(n);
        return parts > 1 ? cu_ws_declare(greedy_bytes(n, parts)) : 0;
    }
    pick_layout l;
    gdp_err err;
    return pick_plan(n, &l, &err) == GDP_OK ? cu_ws_declare(l.total) : 0;
}

static int sample_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 2 || n->n_out != 1 || n->out[0]->dtype != GDP_I32 || !gdp_is_index(n->in[1]->dtype)) return 0;
    const gdp_tensor *x = n->in[0];
    if (!cu_gpu_float(x->dtype) || x->ndim != 2 || x->shape[1] < 1 || x->shape[0] > 0x7fffffff ||
        x->shape[1] > 0x7fffffff)
        return 0;
    /* sampling's sort counts the keys of all rows in an int, and top-p's key holds
     * (row, z, id) in 64 bits */
    if (!(gdp_attr_float(&n->attrs, "temperature", 0) > 0)) return 1;
    return x->shape[0] * x->shape[1] <= 0x7fffffff && 32 + bits_for(x->shape[1], 1) + bits_for(x->shape[0], 0) <= 64;
}

template <typename T>
static gdp_status pick_run(const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *d = node->in[1];
    pick_layout l;
    gdp_status st = pick_plan(node, &l, err);
    if (st != GDP_OK) return st;
    char *ws;
    st = cu_ws(node, l.total, &ws, err);
    if (st != GDP_OK) return st;
    pick_args a;
    a.s0 = x->stride[0], a.s1 = x->stride[1], a.B = x->shape[0], a.V = x->shape[1], a.n = l.n;
    a.idbits = l.idbits;
    a.temp = (float)gdp_attr_float(&node->attrs, "temperature", 0);
    a.top_p_on = l.top_p_on, a.top_p = gdp_attr_float(&node->attrs, "top_p", 0);
    a.seed = (uint64_t)gdp_attr_int(&node->attrs, "seed", 0);
    a.draw = d->data, a.draw_i64 = d->dtype == GDP_I64, a.ds = d->stride[0];
    a.cand = (uint64_t *)(ws + l.cand), a.w = (double *)(ws + l.w);
    a.runs = (double *)(ws + l.runs), a.nruns = l.nruns, a.row_shift = l.row_shift;
    a.sorted = l.top_p_on ? (uint64_t *)(ws + l.sorted) : NULL;
    a.rmax = l.top_p_on ? (float *)(ws + l.rmax) : NULL;
    a.rtot = l.top_p_on ? (double *)(ws + l.rtot) : NULL;
    a.out = (int32_t *)node->out[0]->data;
    pick_candidates_kernel<T><<<(unsigned)a.B, PICK_THREADS, 0, s>>>((const T *)x->data, a);
    if (!l.top_p_on) return GDP_OK;
    size_t bytes = l.sort_bytes;
    CU_TRY(cub::DeviceRadixSort::SortKeys((void *)(ws + l.sort), bytes, (const uint64_t *)a.cand, a.sorted,
                                          (int)(a.B * a.n), 0, l.sort_bits, s));
    pick_top_p_kernel<<<(unsigned)a.B, PICK_THREADS, 0, s>>>(a);
    return GDP_OK;
}

// logits (B, V), draw (B) -> ids (B) i32
static gdp_status sample_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0];
    int64_t B = x->shape[0];
    if (B == 0) return GDP_OK;
    if (gdp_attr_float(&node->attrs, "temperature", 0) > 0) {
        CU_FLOAT_SWITCH(x->dtype, T, return pick_run<T>(node, s, err));
    }
    const int parts = greedy_parts(node);
    int32_t *out = (int32_t *)node->out[0]->data;
    if (parts == 1) {
        CU_FLOAT_SWITCH(x->dtype, T,
                        cu_launch(be, greedy_kernel<T>, (unsigned)B, SAMPLE_THREADS, 0, s, (const T *)x->data,
                                  x->stride[0], x->stride[1], x->shape[1], out));
        return GDP_OK;
    }
    char *ws = NULL;
    gdp_status st = cu_ws(node, greedy_bytes(node, parts), &ws, err);
    if (st != GDP_OK) return st;
    float *pv = (float *)ws;
    int64_t *pi = (int64_t *)(ws + cu_ws_round((size_t)B * (size_t)parts * sizeof(float)));
    CU_FLOAT_SWITCH(x->dtype, T,
                    cu_launch(be, greedy_part_kernel<T>, dim3((unsigned)parts, (unsigned)B), SAMPLE_THREADS, 0, s,
                              (const T *)x->data, x->stride[0], x->stride[1], x->shape[1], pv, pi);
                    cu_launch(be, greedy_final_kernel<T>, cu_blocks(be, B, 128), 128, 0, s, (const T *)x->data,
                              x->stride[0], B, x->shape[1], parts, (const float *)pv, (const int64_t *)pi, out));
    return GDP_OK;
}
CU_LAUNCHER(sample_run)

/* ---- decode_advance ---------------------------------------------------------------------- */

struct adv_counter {
    const void *in;
    void *out;
    int is64;
    int64_t n;
};

// ids' = tok; pos', kv_len', draw' = each plus one (wrapping), element by element, so the
// outputs may be the inputs themselves (in place)
__global__ void decode_advance_kernel(const void *tok, int tok64, void *ids, int ids64, int64_t B, adv_counter c0,
                                      adv_counter c1, adv_counter c2)
{
    cu_pdl_wait();
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < B) {
        const int64_t v = cu_ld_index(tok, tok64, i);
        if (ids64) ((int64_t *)ids)[i] = v;
        else ((int32_t *)ids)[i] = (int32_t)v;
    }
    const adv_counter cs[3] = {c0, c1, c2};
#pragma unroll
    for (int k = 0; k < 3; k++)
        if (i < cs[k].n) {
            if (cs[k].is64) ((int64_t *)cs[k].out)[i] = (int64_t)((uint64_t)((const int64_t *)cs[k].in)[i] + 1u);
            else ((int32_t *)cs[k].out)[i] = (int32_t)((uint32_t)((const int32_t *)cs[k].in)[i] + 1u);
        }
}

static int decode_advance_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 5 || n->n_out != 4) return 0;
    for (int k = 0; k < 5; k++)
        if (!gdp_is_index(n->in[k]->dtype) || (k > 0 && !gdp_is_contiguous(n->in[k]))) return 0;
    return n->in[0]->ndim == 1 && (gdp_numel(n->in[0]) == 1 || n->in[0]->stride[0] == 1);
}

// (tok, ids, pos, kv_len, draw) -> ids', pos', kv_len', draw'
static gdp_status decode_advance_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    (void)err;
    const int64_t B = node->in[0]->shape[0];
    if (B == 0) return GDP_OK;
    adv_counter c[3];
    for (int k = 0; k < 3; k++) {
        const gdp_tensor *x = node->in[k + 2];
        c[k] = adv_counter{x->data, node->out[k + 1]->data, x->dtype == GDP_I64, gdp_numel(x)};
    }
    const gdp_tensor *tok = node->in[0], *ids = node->out[0];
    cu_launch(be, decode_advance_kernel, cu_blocks(be, B, 128), 128, 0, s, (const void *)tok->data,
              (int)(tok->dtype == GDP_I64), ids->data, (int)(ids->dtype == GDP_I64), B, c[0], c[1], c[2]);
    return GDP_OK;
}
CU_LAUNCHER(decode_advance_run)

static const char *const sample_attrs[] = {"temperature", NULL};

static const gdp_kernel kernels[] = {
    CU_KX("sample", GDP_F32, GDP_KERNEL_STRIDED, sample_supports, sample_run_launch, sample_attrs, sample_workspace),
    CU_KX("sample", GDP_F16, GDP_KERNEL_STRIDED, sample_supports, sample_run_launch, sample_attrs, sample_workspace),
    CU_KX("sample", GDP_BF16, GDP_KERNEL_STRIDED, sample_supports, sample_run_launch, sample_attrs, sample_workspace),
    CU_K("decode_advance", GDP_I32, decode_advance_supports, decode_advance_run_launch, NULL),
    CU_K("decode_advance", GDP_I64, decode_advance_supports, decode_advance_run_launch, NULL),
};
CU_FAMILY(sample, kernels);
