/* attention.cu — the attention family (src/ops/attention.c): rope, attention (fused: the
 * score matrix is never written out) and attention_grad (softmax recomputed, no atomics).
 *
 * Shapes: q (B, H, T, D), k and v (B, Hkv, S, D), H a multiple of Hkv (grouped-query heads:
 * query head h reads kv head h / (H / Hkv)). Causal query t sees keys s < n_t, with
 * n_t = clamp(t + S - T + 1, 0, S): the last query lines up with the last key when a KV
 * cache makes S > T, and a row that sees no key (S < T) has output and gradients zero.
 *
 * Work split. A block owns BQ = 16 consecutive query rows of one head: 4 warps of R = 4
 * rows. Keys stream through shared memory in tiles of BK = 32, one key per lane:
 *   - lane j computes the score of key j for the warp's row (a dot product over D read
 *     from shared memory: the key rows are stored with an odd stride, so the 32 lanes hit
 *     32 different banks);
 *   - the running maximum m, the running sum l and the output o are updated the
 *     "online softmax" way: o and l are rescaled by exp(m_old - m_new) when the maximum
 *     grows, so a row is read once whatever S is;
 *   - o is held as D / 32 floats per lane (lane owns columns lane, lane + 32, ...), which
 *     bounds D at 32 * ATT_MAX_DV = 256 (llama and GPT heads are 64 or 128).
 * Everything combines in a fixed order (keys ascending, fixed shuffle trees), so the
 * results are deterministic, and within float rounding of the reference's double sums.
 *
 * Backward, in three passes, none of them atomic:
 *   1. the forward kernel again, writing per query row lse = m + log(l) and
 *      delta = dy . o (= sum_s P[t,s] dP[t,s]), instead of o;
 *   2. dq, per query row: dq[t] = scale sum_s P[t,s] (dy[t].v[s] - delta[t]) k[s];
 *   3. dk and dv, per key row s of a kv head, looping over the query heads of its group
 *      and their query rows in ascending order:
 *        dv[s] = sum_t P[t,s] dy[t],  dk[s] = scale sum_t P[t,s] (dy[t].v[s] - delta[t]) q[t].
 * Each output element is written by exactly one lane, summed in one fixed order.
 */
#include "cu_vec.h"
#include "cuda_internal.h"

#include <math.h>
#include <string.h>

#define ATT_BQ 16      /* query rows per block (attention, dq) or key rows (dk/dv) */
#define ATT_BK 32      /* keys (or queries, for dk/dv) per shared-memory tile: one per lane */
#define ATT_R 4        /* rows per warp */
#define ATT_THREADS 128 /* 4 warps: ATT_BQ / ATT_R */
#define ATT_MAX_DV 8   /* D <= 32 * ATT_MAX_DV */

typedef struct att_dims {
    int64_t B, H, T, D, Hkv, S;
    int causal;
    float scale;
} att_dims;

/* How many keys query t sees (a prefix of the S keys). */
static __device__ __forceinline__ int64_t att_visible(const att_dims &a, int64_t t)
{
    if (!a.causal) return a.S;
    int64_t n = t + a.S - a.T + 1;
    return n < 0 ? 0 : n > a.S ? a.S : n;
}

/* Loads rows [first, first + nrows) of a (len, D) matrix at base into sh (row stride ld),
 * zeros past len: padding rows then contribute nothing (0 * 0), even if never masked. */
template <typename T>
static __device__ __forceinline__ void att_load_rows(const T *src, int64_t base, int64_t first, int64_t len, int D,
                                                     int nrows, float *sh, int ld)
{
    for (int i = threadIdx.x; i < nrows * D; i += blockDim.x) {
        int r = i / D, d = i - r * D;
        int64_t row = first + r;
        sh[r * ld + d] = row < len ? cu_ld(src, base + row * (int64_t)D + d) : 0.0f;
    }
}

static __device__ __forceinline__ float att_dot(const float *a, const float *b, int D)
{
    float acc = 0.0f;
    for (int d = 0; d < D; d++) acc = fmaf(a[d], b[d], acc);
    return acc;
}

/* ---- forward (and backward pass 1) ------------------------------------------------------ */

/* y = softmax(scale q k^T) v per query row. With lse != NULL (backward pass 1) it writes
 * lse[row] and delta[row] = dy[row] . o[row] instead, and y may be NULL.
 * Shared memory: Ks (BK, KS), Vs (BK, D), Qs (BQ, D) floats, KS = D | 1. */
template <typename T, int DV>
__global__ void __launch_bounds__(ATT_THREADS) attn_fwd_kernel(const T *q, const T *k, const T *v, T *y, const T *dy,
                                                               float *lse, float *delta, att_dims a)
{
    extern __shared__ float att_smem[];
    const int D = (int)a.D, KS = D | 1;
    float *Ks = att_smem, *Vs = Ks + ATT_BK * KS, *Qs = Vs + ATT_BK * D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t qtiles = (a.T + ATT_BQ - 1) / ATT_BQ, group = a.H / a.Hkv;
    for (int64_t tile = blockIdx.x; tile < a.B * a.H * qtiles; tile += gridDim.x) {
        const int64_t bh = tile / qtiles, t0 = (tile % qtiles) * ATT_BQ; // bh = b * H + h
        const int64_t qbase = bh * a.T * a.D;                              // q[b, h, 0, 0]
        const int64_t kvbase = ((bh / a.H) * a.Hkv + (bh % a.H) / group) * a.S * a.D;
        const int64_t t_last = (t0 + ATT_BQ < a.T ? t0 + ATT_BQ : a.T) - 1;
        const int64_t n_max = att_visible(a, t_last); /* n_t grows with t */
        __syncthreads(); /* the previous tile's readers are done with Qs */
        att_load_rows(q, qbase, t0, a.T, D, ATT_BQ, Qs, D);
        float m[ATT_R], l[ATT_R], o[ATT_R][DV];
#pragma unroll
        for (int r = 0; r < ATT_R; r++) {
            m[r] = -INFINITY, l[r] = 0.0f;
#pragma unroll
            for (int i = 0; i < DV; i++) o[r][i] = 0.0f;
        }
        for (int64_t kt = 0; kt < n_max; kt += ATT_BK) {
            __syncthreads(); /* every warp is done with the previous K/V tile */
            att_load_rows(k, kvbase, kt, a.S, D, ATT_BK, Ks, KS);
            att_load_rows(v, kvbase, kt, a.S, D, ATT_BK, Vs, D);
            __syncthreads();
#pragma unroll
            for (int r = 0; r < ATT_R; r++) {
                const int rr = warp * ATT_R + r;
                const int64_t t = t0 + rr, n_t = att_visible(a, t);
                if (t >= a.T || kt >= n_t) continue; /* uniform across the warp */
                const bool valid = kt + lane < n_t;
                const float sc = valid ? att_dot(Qs + rr * D, Ks + lane * KS, D) * a.scale : -INFINITY;
                /* lane 0's key is visible (kt < n_t), so m_new is finite */
                const float m_new = fmaxf(m[r], cu_warp_max_f(sc));
                const float alpha = expf(m[r] - m_new); /* 0 on the first tile: m = -inf */
                const float p = valid ? expf(sc - m_new) : 0.0f;
                l[r] = l[r] * alpha + cu_warp_sum_f(p);
                m[r] = m_new;
                const int jmax = n_t - kt < ATT_BK ? (int)(n_t - kt) : ATT_BK;
#pragma unroll
                for (int i = 0; i < DV; i++) o[r][i] *= alpha;
                for (int j = 0; j < jmax; j++) {
                    const float pj = __shfl_sync(CU_FULL_MASK, p, j);
#pragma unroll
                    for (int i = 0; i < DV; i++) {
                        const int d = lane + 32 * i;
                        if (d < D) o[r][i] = fmaf(pj, Vs[j * D + d], o[r][i]);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < ATT_R; r++) {
            const int64_t t = t0 + warp * ATT_R + r;
            if (t >= a.T) continue;
            const int64_t row = qbase + t * a.D;
            const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f; /* no visible key: zeros */
            float dsum = 0.0f;
#pragma unroll
            for (int i = 0; i < DV; i++) {
                const int d = lane + 32 * i;
                if (d >= D) continue;
                const float val = o[r][i] * inv;
                if (y != NULL) cu_st(y, row + d, val);
                if (lse != NULL) dsum = fmaf(cu_ld(dy, row + d), val, dsum);
            }
            if (lse != NULL) {
                dsum = cu_warp_sum_f(dsum);
                if (lane == 0) {
                    lse[bh * a.T + t] = l[r] > 0.0f ? m[r] + logf(l[r]) : 0.0f;
                    delta[bh * a.T + t] = dsum;
                }
            }
        }
    }
}

/* ---- backward pass 2: dq ------------------------------------------------------------------ */

/* Shared memory: Ks (BK, KS), Vs (BK, KS), Qs (BQ, D), Ys (BQ, D). */
template <typename T, int DV>
__global__ void __launch_bounds__(ATT_THREADS) attn_dq_kernel(const T *dy, const T *q, const T *k, const T *v,
                                                              const float *lse, const float *delta, T *dq, att_dims a)
{
    extern __shared__ float att_smem[];
    const int D = (int)a.D, KS = D | 1;
    float *Ks = att_smem, *Vs = Ks + ATT_BK * KS, *Qs = Vs + ATT_BK * KS, *Ys = Qs + ATT_BQ * D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t qtiles = (a.T + ATT_BQ - 1) / ATT_BQ, group = a.H / a.Hkv;
    for (int64_t tile = blockIdx.x; tile < a.B * a.H * qtiles; tile += gridDim.x) {
        const int64_t bh = tile / qtiles, t0 = (tile % qtiles) * ATT_BQ;
        const int64_t qbase = bh * a.T * a.D;
        const int64_t kvbase = ((bh / a.H) * a.Hkv + (bh % a.H) / group) * a.S * a.D;
        const int64_t t_last = (t0 + ATT_BQ < a.T ? t0 + ATT_BQ : a.T) - 1;
        const int64_t n_max = att_visible(a, t_last);
        __syncthreads();
        att_load_rows(q, qbase, t0, a.T, D, ATT_BQ, Qs, D);
        att_load_rows(dy, qbase, t0, a.T, D, ATT_BQ, Ys, D);
        float acc[ATT_R][DV];
#pragma unroll
        for (int r = 0; r < ATT_R; r++)
#pragma unroll
            for (int i = 0; i < DV; i++) acc[r][i] = 0.0f;
        for (int64_t kt = 0; kt < n_max; kt += ATT_BK) {
            __syncthreads();
            att_load_rows(k, kvbase, kt, a.S, D, ATT_BK, Ks, KS);
            att_load_rows(v, kvbase, kt, a.S, D, ATT_BK, Vs, KS);
            __syncthreads();
#pragma unroll
            for (int r = 0; r < ATT_R; r++) {
                const int rr = warp * ATT_R + r;
                const int64_t t = t0 + rr, n_t = att_visible(a, t);
                if (t >= a.T || kt >= n_t) continue;
                float ds = 0.0f;
                if (kt + lane < n_t) {
                    const float sc = att_dot(Qs + rr * D, Ks + lane * KS, D) * a.scale;
                    const float p = expf(sc - lse[bh * a.T + t]);
                    const float dp = att_dot(Ys + rr * D, Vs + lane * KS, D);
                    ds = p * (dp - delta[bh * a.T + t]);
                }
                const int jmax = n_t - kt < ATT_BK ? (int)(n_t - kt) : ATT_BK;
                for (int j = 0; j < jmax; j++) {
                    const float dsj = __shfl_sync(CU_FULL_MASK, ds, j);
#pragma unroll
                    for (int i = 0; i < DV; i++) {
                        const int d = lane + 32 * i;
                        if (d < D) acc[r][i] = fmaf(dsj, Ks[j * KS + d], acc[r][i]);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < ATT_R; r++) {
            const int64_t t = t0 + warp * ATT_R + r;
            if (t >= a.T) continue;
#pragma unroll
            for (int i = 0; i < DV; i++) {
                const int d = lane + 32 * i;
                if (d < D) cu_st(dq, qbase + t * a.D + d, acc[r][i] * a.scale);
            }
        }
    }
}

/* ---- backward pass 3: dk, dv ---------------------------------------------------------------- */

/* A block owns BQ key rows of one kv head; query rows stream through in tiles of BK, one
 * per lane. Shared memory: Kr (BQ, D), Vr (BQ, D), Qs (BK, KS), Ys (BK, KS), Ls (BK),
 * Ds (BK). */
template <typename T, int DV>
__global__ void __launch_bounds__(ATT_THREADS) attn_dkdv_kernel(const T *dy, const T *q, const T *k, const T *v,
                                                                const float *lse, const float *delta, T *dk, T *dv,
                                                                att_dims a)
{
    extern __shared__ float att_smem[];
    const int D = (int)a.D, KS = D | 1;
    float *Kr = att_smem, *Vr = Kr + ATT_BQ * D, *Qs = Vr + ATT_BQ * D, *Ys = Qs + ATT_BK * KS;
    float *Ls = Ys + ATT_BK * KS, *Ds = Ls + ATT_BK;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t stiles = (a.S + ATT_BQ - 1) / ATT_BQ, group = a.H / a.Hkv;
    for (int64_t tile = blockIdx.x; tile < a.B * a.Hkv * stiles; tile += gridDim.x) {
        const int64_t bk = tile / stiles, s0 = (tile % stiles) * ATT_BQ; // bk = b * Hkv + hk
        const int64_t kvbase = bk * a.S * a.D, b = bk / a.Hkv, hk = bk % a.Hkv;
        /* queries before t_first see none of this block's keys (s >= s0) */
        int64_t t_first = a.causal ? s0 + a.T - a.S : 0;
        if (t_first < 0) t_first = 0;
        __syncthreads();
        att_load_rows(k, kvbase, s0, a.S, D, ATT_BQ, Kr, D);
        att_load_rows(v, kvbase, s0, a.S, D, ATT_BQ, Vr, D);
        float gk[ATT_R][DV], gv[ATT_R][DV];
#pragma unroll
        for (int r = 0; r < ATT_R; r++)
#pragma unroll
            for (int i = 0; i < DV; i++) gk[r][i] = 0.0f, gv[r][i] = 0.0f;
        for (int64_t h = hk * group; h < (hk + 1) * group; h++) {
            const int64_t bh = b * a.H + h, qbase = bh * a.T * a.D;
            for (int64_t tq = t_first; tq < a.T; tq += ATT_BK) {
                __syncthreads();
                att_load_rows(q, qbase, tq, a.T, D, ATT_BK, Qs, KS);
                att_load_rows(dy, qbase, tq, a.T, D, ATT_BK, Ys, KS);
                if (threadIdx.x < ATT_BK) {
                    const int64_t t = tq + threadIdx.x;
                    Ls[threadIdx.x] = t < a.T ? lse[bh * a.T + t] : 0.0f;
                    Ds[threadIdx.x] = t < a.T ? delta[bh * a.T + t] : 0.0f;
                }
                __syncthreads();
                const int jmax = a.T - tq < ATT_BK ? (int)(a.T - tq) : ATT_BK;
                const int64_t t = tq + lane;
#pragma unroll
                for (int r = 0; r < ATT_R; r++) {
                    const int rr = warp * ATT_R + r;
                    const int64_t s = s0 + rr;
                    if (s >= a.S) continue; /* uniform across the warp */
                    float p = 0.0f, ds = 0.0f;
                    if (t < a.T && s < att_visible(a, t)) {
                        const float sc = att_dot(Qs + lane * KS, Kr + rr * D, D) * a.scale;
                        p = expf(sc - Ls[lane]);
                        const float dp = att_dot(Ys + lane * KS, Vr + rr * D, D);
                        ds = p * (dp - Ds[lane]);
                    }
                    for (int j = 0; j < jmax; j++) {
                        const float pj = __shfl_sync(CU_FULL_MASK, p, j);
                        const float dsj = __shfl_sync(CU_FULL_MASK, ds, j);
#pragma unroll
                        for (int i = 0; i < DV; i++) {
                            const int d = lane + 32 * i;
                            if (d < D) {
                                gv[r][i] = fmaf(pj, Ys[j * KS + d], gv[r][i]);
                                gk[r][i] = fmaf(dsj, Qs[j * KS + d], gk[r][i]);
                            }
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < ATT_R; r++) {
            const int64_t s = s0 + warp * ATT_R + r;
            if (s >= a.S) continue;
#pragma unroll
            for (int i = 0; i < DV; i++) {
                const int d = lane + 32 * i;
                if (d >= D) continue;
                cu_st(dk, kvbase + s * a.D + d, gk[r][i] * a.scale);
                cu_st(dv, kvbase + s * a.D + d, gv[r][i]);
            }
        }
    }
}

/* ---- host side ------------------------------------------------------------------------------- */

static int is4d_float(const gdp_tensor *t, int32_t dt) { return t->dtype == dt && t->ndim == 4; }

/* q, k, v as attention_check in attention.c wants them, and D within what a lane holds. */
static int qkv_ok(const gdp_tensor *q, const gdp_tensor *k, const gdp_tensor *v)
{
    int32_t dt = q->dtype;
    if (!cu_is_float(dt) || !is4d_float(q, dt) || !is4d_float(k, dt) || !cu_same_shape(k, v) || v->dtype != dt)
        return 0;
    return k->shape[0] == q->shape[0] && k->shape[3] == q->shape[3] && k->shape[1] >= 1 &&
           q->shape[1] % k->shape[1] == 0 && q->shape[3] >= 1 && q->shape[3] <= 32 * ATT_MAX_DV;
}

static int attention_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 3 || n->n_out != 1 || !qkv_ok(n->in[0], n->in[1], n->in[2])) return 0;
    return cu_same_shape(n->out[0], n->in[0]) && n->out[0]->dtype == n->in[0]->dtype;
}

static int attention_grad_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 4 || n->n_out != 3 || !qkv_ok(n->in[1], n->in[2], n->in[3])) return 0;
    for (int i = 0; i < 3; i++)
        if (!cu_same_shape(n->out[i], n->in[i + 1]) || n->out[i]->dtype != n->in[1]->dtype) return 0;
    return cu_same_shape(n->in[0], n->in[1]) && n->in[0]->dtype == n->in[1]->dtype;
}

static att_dims att_dims_of(const gdp_node *n, const gdp_tensor *q, const gdp_tensor *k)
{
    att_dims a;
    a.B = q->shape[0], a.H = q->shape[1], a.T = q->shape[2], a.D = q->shape[3];
    a.Hkv = k->shape[1], a.S = k->shape[2];
    a.causal = gdp_attr_int(&n->attrs, "causal", 0) != 0;
    double scale = gdp_attr_float(&n->attrs, "scale", 0.0);
    if (!(scale > 0)) scale = 1.0 / sqrt((double)a.D); /* attention.c's default */
    a.scale = (float)scale;
    return a;
}

/* A grid-stride loop covers any number of tiles; this many blocks fill the machine. */
static unsigned att_grid(const cu_backend *be, int64_t tiles)
{
    int64_t cap = (int64_t)(be->sm_count > 0 ? be->sm_count : 80) * 64;
    return (unsigned)(tiles < cap ? tiles : cap);
}

/* Opts a kernel into more than the default 48 KiB of dynamic shared memory when needed. */
static gdp_status att_smem_opt_in(const void *kernel, size_t bytes, gdp_err *err)
{
    if (bytes > (size_t)48 * 1024)
        CU_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return GDP_OK;
}

static size_t fwd_smem(int64_t D) { return (size_t)(ATT_BK * (D | 1) + ATT_BK * D + ATT_BQ * D) * sizeof(float); }
static size_t dq_smem(int64_t D) { return (size_t)(2 * ATT_BK * (D | 1) + 2 * ATT_BQ * D) * sizeof(float); }
static size_t dkdv_smem(int64_t D)
{
    return (size_t)(2 * ATT_BQ * D + 2 * ATT_BK * (D | 1) + 2 * ATT_BK) * sizeof(float);
}

template <typename T, int DV>
static gdp_status attn_fwd_launch(cu_backend *be, cudaStream_t s, const gdp_node *node, const att_dims &a, gdp_err *err)
{
    int64_t tiles = a.B * a.H * ((a.T + ATT_BQ - 1) / ATT_BQ);
    if (tiles == 0) return GDP_OK;
    size_t sm = fwd_smem(a.D);
    gdp_status st = att_smem_opt_in((const void *)attn_fwd_kernel<T, DV>, sm, err);
    if (st != GDP_OK) return st;
    attn_fwd_kernel<T, DV><<<att_grid(be, tiles), ATT_THREADS, sm, s>>>(
        (const T *)node->in[0]->data, (const T *)node->in[1]->data, (const T *)node->in[2]->data, (T *)node->out[0]->data,
        (const T *)NULL, (float *)NULL, (float *)NULL, a);
    return GDP_OK;
}

/* Passes 1, 2 and 3 of the backward; stats holds lse then delta, B * H * T floats each. */
template <typename T, int DV>
static gdp_status attn_bwd_launch(cu_backend *be, cudaStream_t s, const gdp_node *node, const att_dims &a, float *stats,
                                  gdp_err *err)
{
    const T *dy = (const T *)node->in[0]->data, *q = (const T *)node->in[1]->data;
    const T *k = (const T *)node->in[2]->data, *v = (const T *)node->in[3]->data;
    float *lse = stats, *delta = stats + a.B * a.H * a.T;
    int64_t qt = a.B * a.H * ((a.T + ATT_BQ - 1) / ATT_BQ), kt = a.B * a.Hkv * ((a.S + ATT_BQ - 1) / ATT_BQ);
    gdp_status st = GDP_OK;
    if (qt > 0) {
        size_t sm1 = fwd_smem(a.D), sm2 = dq_smem(a.D);
        st = att_smem_opt_in((const void *)attn_fwd_kernel<T, DV>, sm1, err);
        if (st == GDP_OK) st = att_smem_opt_in((const void *)attn_dq_kernel<T, DV>, sm2, err);
        if (st != GDP_OK) return st;
        attn_fwd_kernel<T, DV><<<att_grid(be, qt), ATT_THREADS, sm1, s>>>(q, k, v, (T *)NULL, dy, lse, delta, a);
        attn_dq_kernel<T, DV><<<att_grid(be, qt), ATT_THREADS, sm2, s>>>(dy, q, k, v, lse, delta,
                                                                          (T *)node->out[0]->data, a);
    }
    if (kt > 0) {
        size_t sm3 = dkdv_smem(a.D);
        st = att_smem_opt_in((const void *)attn_dkdv_kernel<T, DV>, sm3, err);
        if (st != GDP_OK) return st;
        attn_dkdv_kernel<T, DV><<<att_grid(be, kt), ATT_THREADS, sm3, s>>>(
            dy, q, k, v, lse, delta, (T *)node->out[1]->data, (T *)node->out[2]->data, a);
    }
    return GDP_OK;
}

/* Columns per lane: the smallest of 1, 2, 4, 8 with 32 * DV >= D. */
#define ATT_DV_SWITCH(D, DV, ...)                                                   \
    if ((D) <= 32) { const int DV = 1; __VA_ARGS__; }                             \
    else if ((D) <= 64) { const int DV = 2; __VA_ARGS__; }                        \
    else if ((D) <= 128) { const int DV = 4; __VA_ARGS__; }                       \
    else { const int DV = 8; __VA_ARGS__; }

// q (B, H, T, D), k, v (B, Hkv, S, D) -> y (B, H, T, D)
static gdp_status attention_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    att_dims a = att_dims_of(node, node->in[0], node->in[1]);
    gdp_status st = GDP_OK;
    CU_FLOAT_SWITCH(node->in[0]->dtype, T, ATT_DV_SWITCH(a.D, DV, st = (attn_fwd_launch<T, DV>(be, s, node, a, err))));
    return st;
}
CU_LAUNCHER(attention_run)

// dy, q (B, H, T, D), k, v (B, Hkv, S, D) -> dq, dk, dv
static gdp_status attention_grad_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    att_dims a = att_dims_of(node, node->in[1], node->in[2]);
    int64_t rows = a.B * a.H * a.T;
    void *stats = NULL;
    gdp_status st = cu_scratch_alloc(be, (size_t)(2 * rows) * sizeof(float), &stats, err);
    if (st != GDP_OK) return st;
    switch (node->in[1]->dtype) {
    case GDP_F32: { typedef float T; ATT_DV_SWITCH(a.D, DV, st = (attn_bwd_launch<T, DV>(be, s, node, a, (float *)stats, err))); } break;
    case GDP_F16: { typedef __half T; ATT_DV_SWITCH(a.D, DV, st = (attn_bwd_launch<T, DV>(be, s, node, a, (float *)stats, err))); } break;
    case GDP_BF16: { typedef __nv_bfloat16 T; ATT_DV_SWITCH(a.D, DV, st = (attn_bwd_launch<T, DV>(be, s, node, a, (float *)stats, err))); } break;
    default: st = gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda attention_grad: dtype %d", (int)node->in[1]->dtype);
    }
    cu_scratch_free(be, stats); /* stream-ordered: freed after the kernels that use it */
    return st;
}
CU_LAUNCHER(attention_grad_run)

/* ---- rope ------------------------------------------------------------------------------------- */

/* cs[t * half + i] = (cos a, sign * sin a), a = (t + pos_offset) * theta^(-2i/D): computed
 * once per (t, i) in double, exactly as rope_ref writes it, then shared by every (b, h). */
__global__ void rope_table_kernel(double2 *cs, int64_t T, int64_t half, int64_t D, int64_t pos_offset, double theta,
                                  double sign)
{
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < T * half; k += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = k / half, i = k % half;
        double angle = (double)(t + pos_offset) * pow(theta, -2.0 * (double)i / (double)D);
        cs[k] = make_double2(cos(angle), sign * sin(angle));
    }
}

// x (B, T, H, D) -> y: pair (i0, i1) of each head rotated, one thread per pair
template <typename T>
__global__ void rope_kernel(const T *x, T *y, const double2 *cs, int64_t pairs, int64_t T_, int64_t H, int64_t D,
                            int interleaved)
{
    const int64_t half = D / 2;
    for (int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; p < pairs; p += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = p % half, row = p / half; /* row = (b * T + t) * H + h */
        int64_t t = (row / H) % T_, base = row * D;
        int64_t i0 = interleaved ? base + 2 * i : base + i, i1 = interleaved ? i0 + 1 : i0 + half;
        double2 c = cs[t * half + i];
        double x0 = (double)cu_ld(x, i0), x1 = (double)cu_ld(x, i1);
        /* no fused multiply-add: the reference rounds each product */
        double y0 = __dsub_rn(__dmul_rn(x0, c.x), __dmul_rn(x1, c.y));
        double y1 = __dadd_rn(__dmul_rn(x0, c.y), __dmul_rn(x1, c.x));
        cu_std(y, i0, y0);
        cu_std(y, i1, y1);
    }
}

static int rope_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 1 || n->n_out != 1) return 0;
    const gdp_tensor *x = n->in[0];
    return cu_is_float(x->dtype) && x->ndim == 4 && x->shape[3] % 2 == 0 && n->out[0]->dtype == x->dtype &&
           cu_same_shape(n->out[0], x) && gdp_attr_float(&n->attrs, "theta", 10000.0) > 0;
}

static gdp_status rope_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *y = node->out[0];
    int64_t T = x->shape[1], H = x->shape[2], D = x->shape[3], half = D / 2;
    int64_t pairs = gdp_numel(x) / 2;
    if (pairs == 0) return GDP_OK;
    double theta = gdp_attr_float(&node->attrs, "theta", 10000.0);
    int interleaved = gdp_attr_int(&node->attrs, "interleaved", 1) != 0;
    int64_t pos_offset = gdp_attr_int(&node->attrs, "pos_offset", 0);
    double sign = gdp_attr_int(&node->attrs, "inverse", 0) ? -1.0 : 1.0;
    void *cs = NULL;
    gdp_status st = cu_scratch_alloc(be, (size_t)(T * half) * sizeof(double2), &cs, err);
    if (st != GDP_OK) return st;
    rope_table_kernel<<<cu_blocks(be, T * half, 256), 256, 0, s>>>((double2 *)cs, T, half, D, pos_offset, theta, sign);
    switch (x->dtype) {
    case GDP_F32: rope_kernel<float><<<cu_blocks(be, pairs, 256), 256, 0, s>>>((const float *)x->data, (float *)y->data, (const double2 *)cs, pairs, T, H, D, interleaved); break;
    case GDP_F16: rope_kernel<__half><<<cu_blocks(be, pairs, 256), 256, 0, s>>>((const __half *)x->data, (__half *)y->data, (const double2 *)cs, pairs, T, H, D, interleaved); break;
    case GDP_BF16: rope_kernel<__nv_bfloat16><<<cu_blocks(be, pairs, 256), 256, 0, s>>>((const __nv_bfloat16 *)x->data, (__nv_bfloat16 *)y->data, (const double2 *)cs, pairs, T, H, D, interleaved); break;
    default: st = gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda rope: dtype %d", (int)x->dtype);
    }
    cu_scratch_free(be, cs);
    return st;
}
CU_LAUNCHER(rope_run)

static const char *const rope_attrs[] = {"theta", NULL};

#define FLOATS3(op, sup, fn, attrs) \
    CU_K(op, GDP_F32, sup, fn, attrs), CU_K(op, GDP_F16, sup, fn, attrs), CU_K(op, GDP_BF16, sup, fn, attrs)

static const gdp_kernel kernels[] = {
    FLOATS3("rope", rope_supports, rope_run_launch, rope_attrs),
    FLOATS3("attention", attention_supports, attention_run_launch, NULL),
    FLOATS3("attention_grad", attention_grad_supports, attention_grad_run_launch, NULL),
};
CU_FAMILY(attention, kernels);
