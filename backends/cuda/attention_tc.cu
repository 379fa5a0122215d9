/* attention_tc.cu — attention and attention_grad on tensor cores, for f16 and bf16 q, k, v
 * with heads of 64 or 128: the FlashAttention-2 design, written with the WMMA fragments
 * of 16x16x16 products (f16/bf16 operands, f32 accumulation).
 *
 * Forward. A block owns TC_BQ = 64 query rows of one head, a warp 16 of them. Keys and
 * values stream through shared memory in tiles of TC_BK = 64. Per tile a warp computes
 * its 16x64 scores S = Q K^T on tensor cores into shared memory; its lanes (two per row,
 * 32 columns each) mask them (causal, kv_len), scale them, and update the row's running
 * maximum m and sum l the online-softmax way; the probabilities P = exp(S - m), rounded to
 * the input dtype, go back to shared memory; O is rescaled by exp(m_old - m_new) and
 * gains P V, again on tensor cores. O lives in shared memory in f32 (a WMMA accumulator's
 * element layout is unspecified, so a per-row rescale cannot be done in registers). The
 * score matrix never reaches global memory; tiles past the block's last visible key are
 * skipped.
 *
 * Backward, as FlashAttention-2, with no atomics:
 *   1. the forward kernel in statistics mode writes lse = m + log l and delta = dy . o per
 *      query row (o unrounded, in f32);
 *   2. dq: a block of 64 query rows walks the key tiles, recomputes P = exp(S - lse),
 *      dP = dO V^T, dS = P (dP - delta), and accumulates dQ += dS K in registers;
 *   3. dk, dv: a block of 64 key rows of one kv head walks the query tiles of every query
 *      head of its group in ascending order, recomputes P^T and dP^T = V dO^T, and
 *      accumulates dV += P^T dO and dK += dS^T Q in registers.
 * Every output element is written once by one lane, after sums in a fixed order, so the
 * results are deterministic. P and dS are rounded to the input dtype before their
 * products, as FlashAttention does; the sweep's half-precision tolerance covers that.
 *
 * Inputs may be views (attention's q, k, v are transposes of the projections' outputs):
 * a tile is loaded row by row through the view's strides, so the planner makes no copies.
 * Outputs are contiguous.
 *
 * Everything else (f32, other head sizes, a handful of query rows as in decoding) stays
 * with attention.cu's CUDA-core kernels, on contiguous inputs.
 */
#include "attention.h"
#include "cu_vec.h"

#include <mma.h>

using namespace nvcuda;

#define TC_BQ 64       /* query rows per block */
#define TC_BK 64       /* key rows per tile */
#define TC_THREADS 128 /* 4 warps of 16 rows */
#define TC_SL (TC_BK + 4) /* f32 score rows in shared memory (a multiple of 4, as WMMA wants) */
#define TC_PL (TC_BK + 8) /* half-precision probability rows (a multiple of 8) */

template <int D> struct tc_dims {
    static constexpr int LD = D + 8;  /* half-precision tile rows: 16-byte aligned, banks staggered */
    static constexpr int OL = D + 4;  /* f32 output rows */
    static constexpr size_t tile = (size_t)TC_BK * LD * 2; /* bytes of one 64-row tile */
    /* per warp, in floats: scores, output, a 16x16 scratch, probabilities */
    static constexpr size_t fwd_warp = 16 * TC_SL + 16 * OL + 256 + 16 * TC_PL / 2;
    /* per warp: scores, dP, scratch, dS (dq); plus P for dk/dv */
    static constexpr size_t dq_warp = 2 * 16 * TC_SL + 256 + 16 * TC_PL / 2;
    static constexpr size_t dkdv_warp = 2 * 16 * TC_SL + 256 + 2 * (16 * TC_PL / 2);
    static constexpr size_t fwd_smem = 3 * tile + 4 * fwd_warp * 4;
    static constexpr size_t dq_smem = 4 * tile + 4 * dq_warp * 4;
    static constexpr size_t dkdv_smem = 4 * tile + 2 * TC_BK * 4 + 4 * dkdv_warp * 4;
};

/* Rows [first, first + 64) of a (len, D) matrix whose rows start `rs` elements apart (the
 * elements of a row contiguous) into a shared tile (rows LD apart); rows past len are
 * zeros. With `vec` (every row 16-byte aligned: the host checked the view's base and
 * strides) 16 bytes at a time, all of a thread's loads in flight together; otherwise
 * element by element. */
template <typename T, int D>
static __device__ __forceinline__ void tc_load(const T *src, int64_t rs, int64_t first, int64_t len, T *sh, bool vec)
{
    constexpr int V = D / 8, LD = tc_dims<D>::LD;
    if (vec) {
#pragma unroll
        for (int i = threadIdx.x; i < TC_BK * V; i += TC_THREADS) {
            const int r = i / V, c = (i - r * V) * 8;
            const int64_t row = first + r;
            *(uint4 *)(sh + r * LD + c) = row < len ? *(const uint4 *)(src + row * rs + c) : make_uint4(0u, 0u, 0u, 0u);
        }
        return;
    }
    for (int i = threadIdx.x; i < TC_BK * D; i += TC_THREADS) {
        const int r = i / D, c = i - r * D;
        const int64_t row = first + r;
        cu_st(sh, r * LD + c, row < len ? cu_ld(src, row * rs + c) : 0.0f); /* exact for f16/bf16 */
    }
}

/* Where matrix (b, h) of a (B, H, rows, D) view starts. */
template <typename T>
static __device__ __forceinline__ const T *tc_mat(const T *base, const att_strides &st, int64_t b, int64_t h)
{
    return base + b * st.b + h * st.h;
}

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> tc_acc;
template <typename T> using tc_a = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T> using tc_bt = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
template <typename T> using tc_b = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;

/* out (16 x 64, f32, rows TC_SL apart) = A (16 x D, rows LD apart) B^T, B (64 x D, rows LD
 * apart): the scores of 16 rows against a tile of 64. */
template <typename T, int D>
static __device__ __forceinline__ void tc_abt(const T *A, const T *B, float *out)
{
    constexpr int LD = tc_dims<D>::LD;
#pragma unroll
    for (int j = 0; j < TC_BK / 16; j++) {
        tc_acc acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            tc_a<T> fa;
            tc_bt<T> fb;
            wmma::load_matrix_sync(fa, A + kk * 16, LD);
            wmma::load_matrix_sync(fb, B + j * 16 * LD + kk * 16, LD);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(out + j * 16, acc, TC_SL, wmma::mem_row_major);
    }
}

/* acc[n] += P (16 x 64, rows TC_PL apart) B[:, 16n .. 16n + 16) for B (64 x D, rows LD apart). */
template <typename T, int D>
static __device__ __forceinline__ void tc_pb(const T *P, const T *B, tc_acc *acc)
{
    constexpr int LD = tc_dims<D>::LD;
#pragma unroll
    for (int kk = 0; kk < TC_BK / 16; kk++) {
        tc_a<T> fa;
        wmma::load_matrix_sync(fa, P + kk * 16, TC_PL);
#pragma unroll
        for (int n = 0; n < D / 16; n++) {
            tc_b<T> fb;
            wmma::load_matrix_sync(fb, B + kk * 16 * LD + n * 16, LD);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

/* Writes acc[] * mul (16 x D) to rows [row0, row0 + 16) of out (rows D apart), the rows
 * below `rows` only, through the warp's 16x16 scratch. */
template <typename T, int D>
static __device__ __forceinline__ void tc_store_rows(tc_acc *acc, float mul, float *scratch, T *out, int64_t row0,
                                                     int64_t rows)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int n = 0; n < D / 16; n++) {
#pragma unroll
        for (int i = 0; i < acc[n].num_elements; i++) acc[n].x[i] *= mul;
        wmma::store_matrix_sync(scratch, acc[n], 16, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
            const int64_t row = row0 + (e >> 4);
            if (row < rows) cu_st(out, row * D + n * 16 + (e & 15), scratch[e]);
        }
        __syncwarp();
    }
}

/* ---- forward (and backward pass 1) -------------------------------------------------------- */

template <typename T, int D>
__global__ void __launch_bounds__(TC_THREADS) tc_fwd_kernel(const T *q, const T *k, const T *v, T *y, const T *dy,
                                                            float *lse, float *delta, att_dims a, att_views w,
                                                            cu_bad bad)
{
    extern __shared__ __align__(128) unsigned char tc_smem[];
    typedef tc_dims<D> Dm;
    att_check_len(a, bad);
    T *Qs = (T *)tc_smem, *Ks = (T *)(tc_smem + Dm::tile), *Vs = (T *)(tc_smem + 2 * Dm::tile);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Sw = (float *)(tc_smem + 3 * Dm::tile) + warp * Dm::fwd_warp;
    float *Ow = Sw + 16 * TC_SL, *Xw = Ow + 16 * Dm::OL;
    T *Pw = (T *)(Xw + 256);
    const int r = lane >> 1, c0 = (lane & 1) * (TC_BK / 2), d0 = (lane & 1) * (D / 2);
    const int64_t qtiles = (a.T + TC_BQ - 1) / TC_BQ, group = a.H / a.Hkv;
    for (int64_t tile = blockIdx.x; tile < a.B * a.H * qtiles; tile += gridDim.x) {
        const int64_t bh = tile / qtiles, t0 = (tile % qtiles) * TC_BQ, b = bh / a.H, h = bh % a.H;
        const T *kb = tc_mat(k, w.k, b, h / group), *vb = tc_mat(v, w.v, b, h / group);
        a.L = att_len(a, b);
        const int64_t t_last = (t0 + TC_BQ < a.T ? t0 + TC_BQ : a.T) - 1;
        const int64_t n_max = att_visible(a, t_last);
        const int64_t t = t0 + warp * 16 + r, n_t = t < a.T ? att_visible(a, t) : 0;
        __syncthreads(); /* the previous tile's readers are done */
        tc_load<T, D>(tc_mat(q, w.q, b, h), w.q.t, t0, a.T, Qs, w.q.vec);
        float m = -INFINITY, l = 0.0f;
        for (int d = d0; d < d0 + D / 2; d++) Ow[r * Dm::OL + d] = 0.0f;
        for (int64_t kt = 0; kt < n_max; kt += TC_BK) {
            __syncthreads();
            tc_load<T, D>(kb, w.k.t, kt, a.S, Ks, w.k.vec);
            tc_load<T, D>(vb, w.v.t, kt, a.S, Vs, w.v.vec);
            __syncthreads();
            tc_abt<T, D>(Qs + warp * 16 * Dm::LD, Ks, Sw);
            __syncwarp();
            float *srow = Sw + r * TC_SL;
            float mx = -INFINITY;
            for (int c = c0; c < c0 + TC_BK / 2; c++) {
                const float x = kt + c < n_t ? srow[c] * a.scale : -INFINITY;
                srow[c] = x;
                mx = fmaxf(mx, x);
            }
            mx = fmaxf(mx, __shfl_xor_sync(CU_FULL_MASK, mx, 1));
            const float m_new = fmaxf(m, mx);
            /* a row that has seen no key yet keeps m = -inf, l = 0, O = 0 */
            const float alpha = m_new == -INFINITY ? 1.0f : expf(m - m_new);
            float sum = 0.0f;
            T *prow = Pw + r * TC_PL;
            for (int c = c0; c < c0 + TC_BK / 2; c++) {
                const float x = srow[c];
                cu_st(prow, c, x == -INFINITY ? 0.0f : expf(x - m_new));
                sum += cu_ld(prow, c); /* the sum of what P V multiplies */
            }
            sum += __shfl_xor_sync(CU_FULL_MASK, sum, 1);
            l = l * alpha + sum;
            m = m_new;
            for (int d = d0; d < d0 + D / 2; d++) Ow[r * Dm::OL + d] *= alpha;
            __syncwarp();
#pragma unroll
            for (int n = 0; n < D / 16; n++) {
                tc_acc acc;
                wmma::fill_fragment(acc, 0.0f);
#pragma unroll
                for (int kk = 0; kk < TC_BK / 16; kk++) {
                    tc_a<T> fa;
                    tc_b<T> fb;
                    wmma::load_matrix_sync(fa, Pw + kk * 16, TC_PL);
                    wmma::load_matrix_sync(fb, Vs + kk * 16 * Dm::LD + n * 16, Dm::LD);
                    wmma::mma_sync(acc, fa, fb, acc);
                }
                wmma::store_matrix_sync(Xw, acc, 16, wmma::mem_row_major);
                __syncwarp();
                for (int e = lane; e < 256; e += 32) Ow[(e >> 4) * Dm::OL + n * 16 + (e & 15)] += Xw[e];
                __syncwarp();
            }
        }
        const float inv = l > 0.0f ? 1.0f / l : 0.0f; /* no visible key: zeros */
        const float *orow = Ow + r * Dm::OL;
        float dsum = 0.0f;
        if (t < a.T) {
            const int64_t row = (bh * a.T + t) * D; /* y is contiguous */
            const T *dyrow = y == NULL ? tc_mat(dy, w.dy, b, h) + t * w.dy.t : NULL;
            for (int d = d0; d < d0 + D / 2; d++) {
                const float val = orow[d] * inv;
                if (y != NULL) cu_st(y, row + d, val);
                else dsum = fmaf(cu_ld(dyrow, d), val, dsum);
            }
        }
        dsum += __shfl_xor_sync(CU_FULL_MASK, dsum, 1);
        if (lse != NULL && t < a.T && (lane & 1) == 0) {
            lse[bh * a.T + t] = l > 0.0f ? m + logf(l) : 0.0f;
            delta[bh * a.T + t] = dsum;
        }
    }
}

/* ---- backward pass 2: dq ---------------------------------------------------------------- */

template <typename T, int D>
__global__ void __launch_bounds__(TC_THREADS) tc_dq_kernel(const T *dy, const T *q, const T *k, const T *v,
                                                           const float *lse, const float *delta, T *dq, att_dims a,
                                                           att_views w)
{
    extern __shared__ __align__(128) unsigned char tc_smem[];
    typedef tc_dims<D> Dm;
    T *Qs = (T *)tc_smem, *Ys = (T *)(tc_smem + Dm::tile), *Ks = (T *)(tc_smem + 2 * Dm::tile);
    T *Vs = (T *)(tc_smem + 3 * Dm::tile);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Sw = (float *)(tc_smem + 4 * Dm::tile) + warp * Dm::dq_warp;
    float *Dw = Sw + 16 * TC_SL, *Xw = Dw + 16 * TC_SL;
    T *dSw = (T *)(Xw + 256);
    const int r = lane >> 1, c0 = (lane & 1) * (TC_BK / 2);
    const int64_t qtiles = (a.T + TC_BQ - 1) / TC_BQ, group = a.H / a.Hkv;
    for (int64_t tile = blockIdx.x; tile < a.B * a.H * qtiles; tile += gridDim.x) {
        const int64_t bh = tile / qtiles, t0 = (tile % qtiles) * TC_BQ, b = bh / a.H, h = bh % a.H;
        const T *kb = tc_mat(k, w.k, b, h / group), *vb = tc_mat(v, w.v, b, h / group);
        a.L = att_len(a, b);
        const int64_t t_last = (t0 + TC_BQ < a.T ? t0 + TC_BQ : a.T) - 1;
        const int64_t n_max = att_visible(a, t_last);
        const int64_t t = t0 + warp * 16 + r, n_t = t < a.T ? att_visible(a, t) : 0;
        const float lse_t = t < a.T ? lse[bh * a.T + t] : 0.0f, delta_t = t < a.T ? delta[bh * a.T + t] : 0.0f;
        __syncthreads();
        tc_load<T, D>(tc_mat(q, w.q, b, h), w.q.t, t0, a.T, Qs, w.q.vec);
        tc_load<T, D>(tc_mat(dy, w.dy, b, h), w.dy.t, t0, a.T, Ys, w.dy.vec);
        tc_acc acc[D / 16];
#pragma unroll
        for (int n = 0; n < D / 16; n++) wmma::fill_fragment(acc[n], 0.0f);
        for (int64_t kt = 0; kt < n_max; kt += TC_BK) {
            __syncthreads();
            tc_load<T, D>(kb, w.k.t, kt, a.S, Ks, w.k.vec);
            tc_load<T, D>(vb, w.v.t, kt, a.S, Vs, w.v.vec);
            __syncthreads();
            tc_abt<T, D>(Qs + warp * 16 * Dm::LD, Ks, Sw); /* S = Q K^T */
            tc_abt<T, D>(Ys + warp * 16 * Dm::LD, Vs, Dw); /* dP = dO V^T */
            __syncwarp();
            for (int c = c0; c < c0 + TC_BK / 2; c++) {
                const float p = kt + c < n_t ? expf(Sw[r * TC_SL + c] * a.scale - lse_t) : 0.0f;
                cu_st(dSw, r * TC_PL + c, p * (Dw[r * TC_SL + c] - delta_t));
            }
            __syncwarp();
            tc_pb<T, D>(dSw, Ks, acc); /* dQ += dS K */
        }
        tc_store_rows<T, D>(acc, a.scale, Xw, dq + bh * a.T * D, t0 + warp * 16, a.T);
    }
}

/* ---- backward pass 3: dk and dv ------------------------------------------------------------ */

template <typename T, int D>
__global__ void __launch_bounds__(TC_THREADS) tc_dkdv_kernel(const T *dy, const T *q, const T *k, const T *v,
                                                             const float *lse, const float *delta, T *dk, T *dv,
                                                             att_dims a, att_views w)
{
    extern __shared__ __align__(128) unsigned char tc_smem[];
    typedef tc_dims<D> Dm;
    T *Ks = (T *)tc_smem, *Vs = (T *)(tc_smem + Dm::tile), *Qs = (T *)(tc_smem + 2 * Dm::tile);
    T *Ys = (T *)(tc_smem + 3 * Dm::tile);
    float *lse_s = (float *)(tc_smem + 4 * Dm::tile), *delta_s = lse_s + TC_BK;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Sw = delta_s + TC_BK + warp * Dm::dkdv_warp;
    float *Dw = Sw + 16 * TC_SL, *Xw = Dw + 16 * TC_SL;
    T *Pw = (T *)(Xw + 256), *dSw = Pw + 16 * TC_PL;
    const int r = lane >> 1, c0 = (lane & 1) * (TC_BK / 2);
    const int64_t stiles = (a.S + TC_BK - 1) / TC_BK, group = a.H / a.Hkv;
    for (int64_t tile = blockIdx.x; tile < a.B * a.Hkv * stiles; tile += gridDim.x) {
        const int64_t bk = tile / stiles, s0 = (tile % stiles) * TC_BK; // bk = b * Hkv + kv head
        const int64_t b = bk / a.Hkv, hk = bk % a.Hkv;
        a.L = att_len(a, b);
        const int64_t s = s0 + warp * 16 + r; /* the lane's key row */
        __syncthreads();
        tc_load<T, D>(tc_mat(k, w.k, b, hk), w.k.t, s0, a.S, Ks, w.k.vec);
        tc_load<T, D>(tc_mat(v, w.v, b, hk), w.v.t, s0, a.S, Vs, w.v.vec);
        tc_acc dK[D / 16], dV[D / 16];
#pragma unroll
        for (int n = 0; n < D / 16; n++) wmma::fill_fragment(dK[n], 0.0f), wmma::fill_fragment(dV[n], 0.0f);
        /* keys past kv_len are seen by no query: their gradients stay zero */
        const int64_t t_first = s0 >= a.L ? a.T : a.causal ? (s0 - a.L + a.T > 0 ? s0 - a.L + a.T : 0) : 0;
        for (int64_t hh = 0; hh < group; hh++) {
            const int64_t h = hk * group + hh, bh = b * a.H + h;
            for (int64_t t0 = (t_first / TC_BQ) * TC_BQ; t0 < a.T; t0 += TC_BQ) {
                __syncthreads();
                tc_load<T, D>(tc_mat(q, w.q, b, h), w.q.t, t0, a.T, Qs, w.q.vec);
                tc_load<T, D>(tc_mat(dy, w.dy, b, h), w.dy.t, t0, a.T, Ys, w.dy.vec);
                for (int i = threadIdx.x; i < TC_BQ; i += TC_THREADS) {
                    const int64_t t = t0 + i;
                    lse_s[i] = t < a.T ? lse[bh * a.T + t] : 0.0f;
                    delta_s[i] = t < a.T ? delta[bh * a.T + t] : 0.0f;
                }
                __syncthreads();
                tc_abt<T, D>(Ks + warp * 16 * Dm::LD, Qs, Sw); /* S^T = K Q^T */
                tc_abt<T, D>(Vs + warp * 16 * Dm::LD, Ys, Dw); /* dP^T = V dO^T */
                __syncwarp();
                for (int c = c0; c < c0 + TC_BQ / 2; c++) {
                    const int64_t t = t0 + c;
                    const bool seen = t < a.T && s < att_visible(a, t);
                    const float p = seen ? expf(Sw[r * TC_SL + c] * a.scale - lse_s[c]) : 0.0f;
                    cu_st(Pw, r * TC_PL + c, p);
                    cu_st(dSw, r * TC_PL + c, p * (Dw[r * TC_SL + c] - delta_s[c]));
                }
                __syncwarp();
                tc_pb<T, D>(Pw, Ys, dV);  /* dV += P^T dO */
                tc_pb<T, D>(dSw, Qs, dK); /* dK += dS^T Q */
            }
        }
        tc_store_rows<T, D>(dK, a.scale, Xw, dk + bk * a.S * D, s0 + warp * 16, a.S);
        tc_store_rows<T, D>(dV, 1.0f, Xw, dv + bk * a.S * D, s0 + warp * 16, a.S);
    }
}

/* ---- host side ------------------------------------------------------------------------------ */

static unsigned tc_grid(const cu_backend *be, int64_t tiles)
{
    int64_t cap = (int64_t)(be->sm_count > 0 ? be->sm_count : 80) * 16;
    return (unsigned)(tiles < cap ? tiles : cap);
}

template <int D>
static size_t tc_need(int backward)
{
    typedef tc_dims<D> Dm;
    size_t n = Dm::fwd_smem;
    if (backward && Dm::dq_smem > n) n = Dm::dq_smem;
    if (backward && Dm::dkdv_smem > n) n = Dm::dkdv_smem;
    return n;
}

int cu_attn_tc_ok(const cu_backend *be, int32_t dtype, const att_dims &a, int backward, const gdp_tensor *const *in,
                  int n_in)
{
    if (!be->tc_attention || (dtype != GDP_F16 && dtype != GDP_BF16) || (a.D != 64 && a.D != 128) || a.T < 16) return 0;
    for (int i = 0; i < n_in; i++)
        if (in[i]->ndim != 4 || in[i]->stride[3] != 1) return 0;
    size_t need = a.D == 64 ? tc_need<64>(backward) : tc_need<128>(backward);
    return need <= be->smem_optin;
}

template <typename T, int D>
static void tc_fwd(cu_backend *be, cudaStream_t s, const void *q, const void *k, const void *v, void *y,
                   const void *dy, float *lse, float *delta, const att_dims &a, const att_views &w, cu_bad bad)
{
    int64_t tiles = a.B * a.H * ((a.T + TC_BQ - 1) / TC_BQ);
    if (tiles == 0) return;
    tc_fwd_kernel<T, D><<<tc_grid(be, tiles), TC_THREADS, tc_dims<D>::fwd_smem, s>>>(
        (const T *)q, (const T *)k, (const T *)v, (T *)y, (const T *)dy, lse, delta, a, w, bad);
}

template <typename T, int D>
static void tc_bwd(cu_backend *be, cudaStream_t s, const void *dy, const void *q, const void *k, const void *v,
                   const float *lse, const float *delta, void *dq, void *dk, void *dv, const att_dims &a,
                   const att_views &w)
{
    int64_t qt = a.B * a.H * ((a.T + TC_BQ - 1) / TC_BQ), kt = a.B * a.Hkv * ((a.S + TC_BK - 1) / TC_BK);
    if (qt > 0)
        tc_dq_kernel<T, D><<<tc_grid(be, qt), TC_THREADS, tc_dims<D>::dq_smem, s>>>(
            (const T *)dy, (const T *)q, (const T *)k, (const T *)v, lse, delta, (T *)dq, a, w);
    if (kt > 0)
        tc_dkdv_kernel<T, D><<<tc_grid(be, kt), TC_THREADS, tc_dims<D>::dkdv_smem, s>>>(
            (const T *)dy, (const T *)q, (const T *)k, (const T *)v, lse, delta, (T *)dk, (T *)dv, a, w);
}

void cu_attn_tc_fwd(cu_backend *be, cudaStream_t s, int32_t dtype, const void *q, const void *k, const void *v,
                    void *y, const void *dy, float *lse, float *delta, const att_dims &a, const att_views &w,
                    cu_bad bad)
{
    if (dtype == GDP_F16) {
        if (a.D == 64) tc_fwd<__half, 64>(be, s, q, k, v, y, dy, lse, delta, a, w, bad);
        else tc_fwd<__half, 128>(be, s, q, k, v, y, dy, lse, delta, a, w, bad);
    } else {
        if (a.D == 64) tc_fwd<__nv_bfloat16, 64>(be, s, q, k, v, y, dy, lse, delta, a, w, bad);
        else tc_fwd<__nv_bfloat16, 128>(be, s, q, k, v, y, dy, lse, delta, a, w, bad);
    }
}

void cu_attn_tc_bwd(cu_backend *be, cudaStream_t s, int32_t dtype, const void *dy, const void *q, const void *k,
                    const void *v, const float *lse, const float *delta, void *dq, void *dk, void *dv,
                    const att_dims &a, const att_views &w)
{
    if (dtype == GDP_F16) {
        if (a.D == 64) tc_bwd<__half, 64>(be, s, dy, q, k, v, lse, delta, dq, dk, dv, a, w);
        else tc_bwd<__half, 128>(be, s, dy, q, k, v, lse, delta, dq, dk, dv, a, w);
    } else {
        if (a.D == 64) tc_bwd<__nv_bfloat16, 64>(be, s, dy, q, k, v, lse, delta, dq, dk, dv, a, w);
        else tc_bwd<__nv_bfloat16, 128>(be, s, dy, q, k, v, lse, delta, dq, dk, dv, a, w);
    }
}

/* cu_attn_tc_ok declines what was not granted */
template <typename T, int D>
static void tc_open_one(const cu_backend *be)
{
    cu_smem_opt_in(be, (const void *)tc_fwd_kernel<T, D>, tc_dims<D>::fwd_smem);
    cu_smem_opt_in(be, (const void *)tc_dq_kernel<T, D>, tc_dims<D>::dq_smem);
    cu_smem_opt_in(be, (const void *)tc_dkdv_kernel<T, D>, tc_dims<D>::dkdv_smem);
}

void cu_attention_tc_open(cu_backend *be)
{
    tc_open_one<__half, 64>(be);
    tc_open_one<__half, 128>(be);
    tc_open_one<__nv_bfloat16, 64>(be);
    tc_open_one<__nv_bfloat16, 128>(be);
}
