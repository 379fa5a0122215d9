/* attention_decode.cu — attention for a decode step: a few query rows (T <= DEC_MAXT = 4)
 * of each (b, h) against a long KV cache. The shapes and the visible keys are those of
 * attention.cu (attention.h); attention.cu sends such nodes here.
 *
 * Tiling 16 query rows per block would leave 15/16 of each block idle, and B * H blocks for
 * the whole machine, so the keys are split instead:
 *   - a block (8 warps) per (b, h, split), the S keys cut into splits of `chunk` keys (a
 *     multiple of 32, from 128 to DEC_MAX_CHUNK), as many as give about two blocks per SM;
 *     blocks of splits past kv_len find nothing to do;
 *   - a group of G lanes takes one key at a time: each lane holds 16 bytes of the key's row
 *     (G * 16 bytes cover the head), so a warp scores 32 / G keys at once and every load is
 *     16 bytes wide; the groups take the split's keys in turn, a few in flight each;
 *   - the scores go to shared memory; the block takes each query row's maximum, writes
 *     p = exp(s - max) over them and sums p (fixed orders: a thread's keys ascending, the
 *     butterfly, warps in order); then the groups take the keys in turn again, each lane
 *     adding p times its 16 bytes of the value row into its part of o, and the groups'
 *     parts are summed in group order;
 *   - with one split the block writes y = o / l. With up to 8 splits on sm_90 the splits of
 *     a (b, h) are one thread-block cluster: each block leaves its (m, l, o) per query row
 *     in its shared memory and, after a cluster barrier, combines a share of the output
 *     elements from all of them in split order (distributed shared memory), so the step is
 *     one kernel. Otherwise the (m, l, o) go to the workspace and
 *     attn_decode_combine_kernel combines them the same way.
 * A row that sees no key has output zero. q, k and v may be views whose rows are
 * contiguous (a decode step's q is a transpose). Everything runs in fixed orders, so
 * results are deterministic.
 */
#include "attention.h"
#include "cu_vec.h"

#include <cooperative_groups.h>
#include <math.h>

#define DEC_WARPS 8
#define DEC_THREADS (32 * DEC_WARPS)
#define DEC_UNROLL 4                  /* keys a group has in flight */
#define DEC_MIN_CHUNK 128             /* the fewest keys a split is given */
#define DEC_MAX_CHUNK 1024            /* the most: the scores of a split fit shared memory */
#define DEC_MAX_CLUSTER 8             /* the most splits one cluster combines (portable size) */
#define DEC_MAX_D (32 * 8)            /* the largest head (attention.cu's bound) */

/* Lanes per key for head size up to 32 * DV: enough 16-byte pieces for the head, at most a
 * warp; PPL pieces per lane. */
template <typename T, int DV> struct dec_shape {
    static constexpr int N = 16 / (int)sizeof(T);  /* elements per piece */
    static constexpr int CMAX = 32 * DV / N;       /* pieces of the largest head of this DV */
    static constexpr int G = CMAX < 32 ? (CMAX < 1 ? 1 : CMAX) : 32;
    static constexpr int PPL = (CMAX + G - 1) / G;
    static constexpr int GROUPS = DEC_WARPS * (32 / G);
};

/* Shared memory, in floats: the scores (NT rows of chunk), two reductions' partials, the
 * groups' parts of o, and the block's (o, m, l) per query row for its cluster. */
static size_t dec_smem(int64_t D, int NT, int64_t chunk, int groups)
{
    return (size_t)(NT * chunk + 2 * DEC_WARPS * NT + (int64_t)groups * NT * D + NT * (D + 2)) * sizeof(float);
}

/* Piece c (N elements from c * N) of a row of D elements, widened to float: 16 bytes when
 * `vec` (the row 16-byte aligned, D a multiple of N), else element by element; zeros past D. */
template <typename T, int N>
static __device__ __forceinline__ void dec_piece(const T *row, int c, int D, bool vec, float *f)
{
    if (vec && c * N < D) {
        cu_ld16(row, (int64_t)c * N, f);
        return;
    }
#pragma unroll
    for (int x = 0; x < N; x++) f[x] = c * N + x < D ? cu_ld(row, c * N + x) : 0.0f;
}

/* Asks for the 128-byte line holding p into L2, without waiting for it. */
static __device__ __forceinline__ void dec_prefetch_l2(const void *p)
{
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* Sums (or maxes) v[0..NT) over the block; every thread gets the results, in the same
 * order everywhere (the butterfly, then warps ascending). sh holds DEC_WARPS * NT floats. */
template <int NT, bool MAX>
static __device__ __forceinline__ void dec_block_reduce(float *v, float *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        v[t] = MAX ? cu_warp_max_f(v[t]) : cu_warp_sum_f(v[t]);
        if (lane == 0) sh[warp * NT + t] = v[t];
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float r = MAX ? -INFINITY : 0.0f;
        for (int w = 0; w < DEC_WARPS; w++) r = MAX ? fmaxf(r, sh[w * NT + t]) : r + sh[w * NT + t];
        v[t] = r;
    }
}

/* Two blocks of one query row fit an SM (at most 128 registers a thread, which ptxas meets
 * without spilling): a batch whose heads alone fill the machine runs one split per head, and
 * one 256-thread block per SM left it waiting at every barrier (batch 64 decoded 12-19%
 * slower than with the kernel before this one, which fit two blocks). */
/* Query rows t < T <= NT of one (b, h) against keys [k0, k1) of one split of the cache,
 * k0 = split * chunk. With one split the block writes y; with more, its (m, l, o) per query
 * row go to the workspace (part (bh * nsplit + split) * T + t) for
 * attn_decode_combine_kernel, or (CL: a cluster per (b, h), a block per split) are combined
 * across the cluster. */
template <typename T, int DV, int NT, bool CL>
__global__ void __launch_bounds__(DEC_THREADS, NT == 1 ? 2 : 1)
    attn_decode_kernel(const T *q, const T *k, const T *v, T *y, float *po, float *pm, float *pl, att_dims a,
                       att_views w, int64_t chunk, int nsplit, cu_bad bad)
{
    cu_pdl_wait();
    using S = dec_shape<T, DV>;
    constexpr int N = S::N, G = S::G, PPL = S::PPL, GROUPS = S::GROUPS;
    extern __shared__ __align__(16) float dec_sh[];
    att_check_len(a, bad);
    const int D = (int)a.D;
    float *sc = dec_sh, *red = sc + NT * chunk, *og = red + 2 * DEC_WARPS * NT;
    float *Po = og + GROUPS * NT * D, *Pm = Po + NT * D, *Pl = Pm + NT;
    const int lane = threadIdx.x & 31, gl = lane % G; /* lane within its group */
    const int grp = (int)(threadIdx.x / G);           /* warp-major: groups of a warp adjacent */
    const int wg0 = (int)(threadIdx.x >> 5) * (32 / G); /* the warp's first group */
    const bool qvec = w.q.vec && D % N == 0, kvec = w.k.vec && D % N == 0, vvec = w.v.vec && D % N == 0;
    const int64_t group = a.H / a.Hkv, items = a.B * a.H * nsplit;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const int64_t bh = item / nsplit, sp = item % nsplit, b = bh / a.H, h = bh % a.H;
        a.L = att_len(a, b);
        const int64_t k0 = sp * chunk, k1 = k0 + chunk < a.S ? k0 + chunk : a.S;
        int64_t n_eff[NT], n_hi = k0; /* query t sees keys [k0, n_eff[t]) of this split */
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const int64_t n = t < a.T ? att_visible(a, t) : 0;
            n_eff[t] = n < k1 ? n : k1;
            n_hi = n_eff[t] > n_hi ? n_eff[t] : n_hi;
        }
        const T *qb = q + b * w.q.b + h * w.q.h;
        const T *kb = k + b * w.k.b + (h / group) * w.k.h, *vb = v + b * w.v.b + (h / group) * w.v.h;
        /* the value rows step 3 reads, asked into L2 now: a step's weights pass through L2
         * between two tokens, so the cache comes from memory, and step 3's loads would
         * otherwise wait for it after the softmax's barriers */
        {
            constexpr int LINE = 128 / (int)sizeof(T); /* elements of a 128-byte line */
            const int64_t lines = (D + LINE - 1) / LINE;
            for (int64_t i = threadIdx.x; i < (n_hi - k0) * lines; i += DEC_THREADS)
                dec_prefetch_l2(vb + (k0 + i / lines) * w.v.t + (i % lines) * LINE);
        }
        __syncthreads(); /* the previous item's readers of the shared memory are done */

        /* 1. scores: group grp takes keys k0 + grp, k0 + grp + GROUPS, ... (the loops run
         * alike in a warp's groups, for the shuffles) */
        float qf[NT][PPL][N];
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int i = 0; i < PPL; i++) {
                if (t < a.T) dec_piece<T, N>(qb + t * w.q.t, gl + G * i, D, qvec, qf[t][i]);
                else
#pragma unroll
                    for (int x = 0; x < N; x++) qf[t][i][x] = 0.0f;
            }
        for (int64_t jw = k0 + wg0; jw < n_hi; jw += (int64_t)GROUPS * DEC_UNROLL) {
            const int64_t j0 = jw + (grp - wg0);
            float kf[DEC_UNROLL][PPL][N];
#pragma unroll
            for (int u = 0; u < DEC_UNROLL; u++) {
                const int64_t j = j0 + (int64_t)GROUPS * u;
#pragma unroll
                for (int i = 0; i < PPL; i++) {
                    if (j < n_hi) dec_piece<T, N>(kb + j * w.k.t, gl + G * i, D, kvec, kf[u][i]);
                    else
#pragma unroll
                        for (int x = 0; x < N; x++) kf[u][i][x] = 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < DEC_UNROLL; u++) {
                const int64_t j = j0 + (int64_t)GROUPS * u;
                float acc[NT];
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    acc[t] = 0.0f;
#pragma unroll
                    for (int i = 0; i < PPL; i++)
#pragma unroll
                        for (int x = 0; x < N; x++) acc[t] = fmaf(qf[t][i][x], kf[u][i][x], acc[t]);
#pragma unroll
                    for (int o = G / 2; o > 0; o >>= 1) acc[t] += __shfl_xor_sync(CU_FULL_MASK, acc[t], o);
                }
                if (gl == 0 && j < n_hi)
#pragma unroll
                    for (int t = 0; t < NT; t++) sc[t * chunk + (j - k0)] = j < n_eff[t] ? acc[t] * a.scale : -INFINITY;
            }
        }
        __syncthreads();

        /* 2. each row's maximum, p = exp(s - m) in place of s, and l = sum p */
        float m[NT], l[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) {
            m[t] = -INFINITY;
            for (int64_t j = k0 + threadIdx.x; j < n_eff[t]; j += DEC_THREADS) m[t] = fmaxf(m[t], sc[t * chunk + (j - k0)]);
        }
        dec_block_reduce<NT, true>(m, red);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            l[t] = 0.0f;
            for (int64_t j = k0 + threadIdx.x; j < n_hi; j += DEC_THREADS) {
                /* keys past n_eff[t] (and rows that see none: m = -inf) weigh 0 */
                const float p = j < n_eff[t] ? expf(sc[t * chunk + (j - k0)] - m[t]) : 0.0f;
                sc[t * chunk + (j - k0)] = p;
                l[t] += p;
            }
        }
        dec_block_reduce<NT, false>(l, red + DEC_WARPS * NT); /* its barrier also publishes p */

        /* 3. o = sum p v: group grp's keys as in 1, lane gl's pieces gl + G i of each row */
        float o[NT][PPL][N];
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int i = 0; i < PPL; i++)
#pragma unroll
                for (int x = 0; x < N; x++) o[t][i][x] = 0.0f;
        for (int64_t jw = k0 + wg0; jw < n_hi; jw += (int64_t)GROUPS * DEC_UNROLL) {
            const int64_t j0 = jw + (grp - wg0);
            float vf[DEC_UNROLL][PPL][N];
#pragma unroll
            for (int u = 0; u < DEC_UNROLL; u++) {
                const int64_t j = j0 + (int64_t)GROUPS * u;
#pragma unroll
                for (int i = 0; i < PPL; i++)
                    if (j < n_hi) dec_piece<T, N>(vb + j * w.v.t, gl + G * i, D, vvec, vf[u][i]);
            }
#pragma unroll
            for (int u = 0; u < DEC_UNROLL; u++) {
                const int64_t j = j0 + (int64_t)GROUPS * u;
                if (j >= n_hi) break;
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    const float p = sc[t * chunk + (j - k0)];
#pragma unroll
                    for (int i = 0; i < PPL; i++)
#pragma unroll
                        for (int x = 0; x < N; x++) o[t][i][x] = fmaf(p, vf[u][i][x], o[t][i][x]);
                }
            }
        }
        /* the groups' parts, then their sum in group order */
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int i = 0; i < PPL; i++)
#pragma unroll
                for (int x = 0; x < N; x++) {
                    const int d = (gl + G * i) * N + x;
                    if (d < D) og[(grp * NT + t) * D + d] = o[t][i][x];
                }
        __syncthreads();
        for (int e = threadIdx.x; e < a.T * D; e += DEC_THREADS) {
            const int t = e / D, d = e - t * D;
            float O = 0.0f;
            for (int g = 0; g < GROUPS; g++) O += og[(g * NT + t) * D + d];
            float M = -INFINITY, L = 0.0f;
#pragma unroll
            for (int tt = 0; tt < NT; tt++)
                if (tt == t) M = m[tt], L = l[tt];
            if (CL) {
                Po[t * D + d] = O;
                if (d == 0) Pm[t] = M, Pl[t] = L;
            } else if (po == NULL) {
                cu_st(y, (bh * a.T + t) * a.D + d, L > 0.0f ? O / L : 0.0f); /* no visible key: zeros */
            } else {
                const int64_t part = (bh * nsplit + sp) * a.T + t;
                po[part * a.D + d] = O;
                if (d == 0) pm[part] = M, pl[part] = L;
            }
        }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (CL) {
            /* the splits of (b, h) are the blocks of this cluster, split sp its block sp: each
             * combines every nsplit-th output element from all of them, in split order, as
             * attn_decode_combine_kernel does, reading their (o, m, l) in place */
            namespace cg = cooperative_groups;
            cg::cluster_group cl = cg::this_cluster();
            cl.sync(); /* every block's (o, m, l) is written */
            for (int e = threadIdx.x * nsplit + (int)sp; e < a.T * D; e += DEC_THREADS * nsplit) {
                const int t = e / D, d = e - t * D;
                float M = -INFINITY, L = 0.0f, O = 0.0f;
                for (int r = 0; r < nsplit; r++) M = fmaxf(M, *cl.map_shared_rank(Pm + t, r));
                for (int r = 0; r < nsplit; r++) {
                    const float mr = *cl.map_shared_rank(Pm + t, r);
                    if (mr == -INFINITY) continue; /* a split whose keys the row does not see */
                    const float f = expf(mr - M);
                    L = fmaf(*cl.map_shared_rank(Pl + t, r), f, L);
                    O = fmaf(*cl.map_shared_rank(Po + t * D + d, r), f, O);
                }
                cu_st(y, (bh * a.T + t) * a.D + d, L > 0.0f ? O / L : 0.0f);
            }
            cl.sync(); /* no block leaves while another reads its shared memory */
        }
#else
        /* the host launches clusters only on code compiled for sm_90 (cu_backend.clusters):
         * a cluster launch reaching this code would leave y unwritten, so it fails loudly */
        if (CL) __trap();
#endif
    }
}

/* y[bh, t, :] from the splits' (m, l, o) of that query row, in split order. */
template <typename T>
__global__ void attn_decode_combine_kernel(const float *po, const float *pm, const float *pl, T *y, int64_t rows,
                                           int64_t T_, int64_t D, int nsplit)
{
    cu_pdl_wait();
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < rows * D; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / D, d = e % D, bh = r / T_, t = r % T_; // r = bh * T + t
        float M = -INFINITY, L = 0.0f, O = 0.0f;
        for (int sp = 0; sp < nsplit; sp++) M = fmaxf(M, pm[(bh * nsplit + sp) * T_ + t]);
        for (int sp = 0; sp < nsplit; sp++) {
            const int64_t part = (bh * nsplit + sp) * T_ + t;
            if (pm[part] == -INFINITY) continue; /* a split whose keys the row does not see */
            const float f = expf(pm[part] - M);
            L = fmaf(pl[part], f, L);
            O = fmaf(po[part * D + d], f, O);
        }
        cu_st(y, e, L > 0.0f ? O / L : 0.0f);
    }
}

/* ---- host side ------------------------------------------------------------------------------- */

/* Groups of a block for D and element size es (dec_shape's, at run time). */
static int dec_groups(int64_t D, size_t es)
{
    const int64_t N = 16 / (int64_t)es, DVD = D <= 32 ? 32 : D <= 64 ? 64 : D <= 128 ? 128 : 256;
    int64_t G = DVD / N;
    if (G > 32) G = 32;
    return DEC_WARPS * (int)(32 / G);
}

/* How the keys are split: nsplit splits of *chunk keys (a multiple of 32 from DEC_MIN_CHUNK
 * to DEC_MAX_CHUNK), enough (b, h, split) blocks to give every SM two, or one split when the
 * heads alone do. Only the shapes and the device decide, so reruns are bitwise equal. The
 * key range is split by S, not by kv_len (a runtime value): splits past kv_len find no key
 * and cost a block each. */
static int dec_splits(const cu_backend *be, const att_dims &a, int64_t *chunk)
{
    const int64_t heads = a.B * a.H, target = 2 * (int64_t)(be->sm_count > 0 ? be->sm_count : 80);
    const int64_t want = heads > 0 ? (target + heads - 1) / heads : 1;
    int64_t c = want > 1 ? (a.S + want - 1) / want : a.S;
    c = (c + 31) / 32 * 32;
    if (c < DEC_MIN_CHUNK) c = DEC_MIN_CHUNK;
    if (c > DEC_MAX_CHUNK) c = DEC_MAX_CHUNK;
    *chunk = c;
    const int64_t n = (a.S + c - 1) / c;
    return n > 1 ? (int)n : 1;
}

/* Whether the splits combine within a cluster of nsplit blocks (sm_90) rather than through
 * the workspace and attn_decode_combine_kernel: one kernel instead of two. */
static bool dec_clustered(const cu_backend *be, int nsplit)
{
    return be->clusters && nsplit > 1 && nsplit <= DEC_MAX_CLUSTER;
}

/* The splits' (m, l, o) per query row, when they combine through memory: o (D floats), then
 * m, then l. */
static size_t dec_scratch(const cu_backend *be, const att_dims &a, int nsplit)
{
    if (nsplit <= 1 || dec_clustered(be, nsplit)) return 0;
    return (size_t)(a.B * a.H * nsplit * a.T * (a.D + 2)) * sizeof(float);
}

int cu_attn_decode_ok(const cu_backend *be, const att_dims &a, const gdp_tensor *const *in)
{
    if (a.T < 1 || a.T > DEC_MAXT || a.D < 1 || a.D > DEC_MAX_D) return 0;
    for (int i = 0; i < 3; i++)
        if (in[i]->ndim != 4 || (in[i]->stride[3] != 1 && in[i]->shape[3] != 1)) return 0;
    const size_t need = dec_smem(a.D, DEC_MAXT, DEC_MAX_CHUNK, dec_groups(a.D, gdp_dtype_size(in[0]->dtype)));
    return need <= (size_t)48 * 1024 || need <= be->smem_optin;
}

size_t cu_attn_decode_workspace(const cu_backend *be, const att_dims &a)
{
    int64_t chunk = 0;
    return dec_scratch(be, a, dec_splits(be, a, &chunk));
}

template <typename T, int DV, int NT>
static gdp_status dec_launch(cu_backend *be, cudaStream_t s, const gdp_node *node, const att_dims &a,
                             const att_views &w, cu_bad bad, gdp_err *err)
{
    int64_t chunk = 0;
    const int nsplit = dec_splits(be, a, &chunk);
    const int64_t items = a.B * a.H * nsplit, parts = items * a.T;
    if (items == 0) return GDP_OK;
    const T *q = (const T *)node->in[0]->data, *k = (const T *)node->in[1]->data, *v = (const T *)node->in[2]->data;
    T *y = (T *)node->out[0]->data;
    const size_t smem = dec_smem(a.D, NT, chunk, dec_shape<T, DV>::GROUPS);
    if (dec_clustered(be, nsplit)) {
        /* a block per item, the splits of one (b, h) a cluster */
        cu_launch_clustered(be, (unsigned)nsplit, attn_decode_kernel<T, DV, NT, true>, dim3((unsigned)items),
                            DEC_THREADS, smem, s, q, k, v, y, (float *)NULL, (float *)NULL, (float *)NULL, a, w, chunk,
                            nsplit, bad);
        return GDP_OK;
    }
    float *po = NULL, *pm = NULL, *pl = NULL;
    if (nsplit > 1) {
        char *ws = NULL;
        gdp_status st = cu_ws(node, dec_scratch(be, a, nsplit), &ws, err);
        if (st != GDP_OK) return st;
        po = (float *)ws, pm = po + parts * a.D, pl = pm + parts;
    }
    const int64_t cap = (int64_t)(be->sm_count > 0 ? be->sm_count : 80) * 64;
    cu_launch(be, attn_decode_kernel<T, DV, NT, false>, dim3((unsigned)(items < cap ? items : cap)), DEC_THREADS, smem,
              s, q, k, v, y, po, pm, pl, a, w, chunk, nsplit, bad);
    if (nsplit > 1)
        cu_launch(be, attn_decode_combine_kernel<T>, cu_blocks(be, a.B * a.H * a.T * a.D, 256), 256, 0, s, po, pm, pl,
                  y, a.B * a.H * a.T, a.T, a.D, nsplit);
    return GDP_OK;
}

template <typename T, int DV>
static gdp_status dec_run_dv(cu_backend *be, cudaStream_t s, const gdp_node *node, const att_dims &a,
                             const att_views &w, cu_bad bad, gdp_err *err)
{
    return a.T == 1 ? dec_launch<T, DV, 1>(be, s, node, a, w, bad, err)
                    : dec_launch<T, DV, DEC_MAXT>(be, s, node, a, w, bad, err);
}

template <typename T>
static gdp_status dec_run(cu_backend *be, cudaStream_t s, const gdp_node *node, const att_dims &a, const att_views &w,
                          cu_bad bad, gdp_err *err)
{
    if (a.D <= 32) return dec_run_dv<T, 1>(be, s, node, a, w, bad, err);
    if (a.D <= 64) return dec_run_dv<T, 2>(be, s, node, a, w, bad, err);
    if (a.D <= 128) return dec_run_dv<T, 4>(be, s, node, a, w, bad, err);
    return dec_run_dv<T, 8>(be, s, node, a, w, bad, err);
}

gdp_status cu_attn_decode(cu_backend *be, cudaStream_t s, const gdp_node *node, const att_dims &a, const att_views &w,
                          cu_bad bad, gdp_err *err)
{
    gdp_status st = GDP_OK;
    CU_FLOAT_SWITCH(node->in[0]->dtype, T, st = (dec_run<T>(be, s, node, a, w, bad, err)));
    return st;
}

/* Shared memory past 48 KiB, opted into at open (cu_smem_opt_in) at the most a kernel asks
 * for: the largest D of its DV, DEC_MAX_CHUNK keys. */
template <typename T, int DV, int NT, bool CL>
static void dec_opt_in(const cu_backend *be)
{
    cu_smem_opt_in(be, (const void *)attn_decode_kernel<T, DV, NT, CL>,
                   dec_smem(32 * DV, NT, DEC_MAX_CHUNK, dec_shape<T, DV>::GROUPS));
}

template <typename T, int DV>
static void dec_opt_in_dv(const cu_backend *be)
{
    dec_opt_in<T, DV, 1, false>(be);
    dec_opt_in<T, DV, 1, true>(be);
    dec_opt_in<T, DV, DEC_MAXT, false>(be);
    dec_opt_in<T, DV, DEC_MAXT, true>(be);
}

template <typename T>
static void dec_opt_in_type(const cu_backend *be)
{
    dec_opt_in_dv<T, 1>(be);
    dec_opt_in_dv<T, 2>(be);
    dec_opt_in_dv<T, 4>(be);
    dec_opt_in_dv<T, 8>(be);
}

void cu_attn_decode_open(cu_backend *be)
{
    dec_opt_in_type<float>(be);
    dec_opt_in_type<__half>(be);
    dec_opt_in_type<__nv_bfloat16>(be);
}
