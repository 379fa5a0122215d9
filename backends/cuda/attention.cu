/* attention.cu — attention (fused: the score matrix is never written out) and
 * attention_grad (softmax recomputed, no atomics) of the attention family
 * (src/ops/attention.c); its rope and cache_write are in rope_cache.cu.
 *
 * Shapes: q (B, H, T, D), k and v (B, Hkv, S, D), H a multiple of Hkv (grouped-query heads:
 * query head h reads kv head h / (H / Hkv)). The optional kv_len input L (i32/i64, a
 * scalar or one per batch row; default S) says how many keys are valid. Query t sees keys
 * s < n_t, with n_t = L, or with causal n_t = clamp(t + L - T + 1, 0, L): the last query
 * lines up with the last valid key (a decoder whose cache holds L keys), and a row that
 * sees no key has output and gradients zero.
 *
 * Runtime values (kv_len, rope's pos, cache_write's pos) are read by the kernels from
 * device memory, never by the host: a decoder moves them between runs of one captured
 * graph. Each may be a scalar or one per batch row (dim 0: a batch whose sequences stand
 * at different lengths); a kernel reads row b's at b * step (step 0 for a scalar). A
 * kv_len outside [0, S] or a pos that does not fit the cache is reported as bad data
 * (baddata.cu); kv_len is then clamped, and the batch row's cache is left as it was.
 *
 * Decoding (T <= DEC_MAXT = 4 query rows against a cache) goes to attention_decode.cu.
 *
 * Work split of the general forward. A block owns BQ = 16 consecutive query rows of one
 * head: 4 warps of R = 4 rows. Keys stream through shared memory in tiles of BK = 32, one
 * key per lane:
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
 *
 * f16 and bf16 problems with heads of 64 or 128 and at least 16 query rows go to the
 * tensor-core kernels of attention_tc.cu instead (cu_attn_tc_ok says which).
 */
#include "attention.h"
#include "cu_vec.h"

#include <math.h>
#include <string.h>

#define ATT_BQ 16      /* query rows per block (attention, dq) or key rows (dk/dv) */
#define ATT_BK 32      /* keys (or queries, for dk/dv) per shared-memory tile: one per lane */
#define ATT_R 4        /* rows per warp */
#define ATT_THREADS 128 /* 4 warps: ATT_BQ / ATT_R */
#define ATT_MAX_DV 8   /* D <= 32 * ATT_MAX_DV */

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

/* y = softmax(scale q k^T) v per query row, where y != NULL; lse[row] where lse != NULL
 * (attention_lse, and backward pass 1); with dy != NULL (backward pass 1, y NULL) also
 * delta[row] = dy[row] . o[row].
 * Shared memory: Ks (BK, KS), Vs (BK, D), Qs (BQ, D) floats, KS = D | 1. */
template <typename T, int DV>
__global__ void __launch_bounds__(ATT_THREADS) attn_fwd_kernel(const T *q, const T *k, const T *v, T *y, const T *dy,
                                                               float *lse, float *delta, att_dims a, cu_bad bad)
{
    extern __shared__ float att_smem[];
    att_check_len(a, bad);
    const int D = (int)a.D, KS = D | 1;
    float *Ks = att_smem, *Vs = Ks + ATT_BK * KS, *Qs = Vs + ATT_BK * D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t qtiles = (a.T + ATT_BQ - 1) / ATT_BQ, group = a.H / a.Hkv;
    for (int64_t tile = blockIdx.x; tile < a.B * a.H * qtiles; tile += gridDim.x) {
        const int64_t bh = tile / qtiles, t0 = (tile % qtiles) * ATT_BQ; // bh = b * H + h
        const int64_t qbase = bh * a.T * a.D;                              // q[b, h, 0, 0]
        const int64_t kvbase = ((bh / a.H) * a.Hkv + (bh % a.H) / group) * a.S * a.D;
        a.L = att_len(a, bh / a.H);
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
            const int64_t row = qbase + t * a.D, yrow = att_y_row(a, bh / a.H, bh % a.H, t);
            const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f; /* no visible key: zeros */
            float dsum = 0.0f;
#pragma unroll
            for (int i = 0; i < DV; i++) {
                const int d = lane + 32 * i;
                if (d >= D) continue;
                const float val = o[r][i] * inv;
                if (y != NULL) cu_st(y, yrow + d, val);
                if (dy != NULL) dsum = fmaf(cu_ld(dy, row + d), val, dsum);
            }
            if (dy != NULL) dsum = cu_warp_sum_f(dsum);
            if (lse != NULL && lane == 0) {
                lse[bh * a.T + t] = l[r] > 0.0f ? m[r] + logf(l[r]) : 0.0f;
                if (dy != NULL) delta[bh * a.T + t] = dsum;
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
        a.L = att_len(a, bh / a.H);
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
                if (d < D) cu_st(dq, att_dq_row(a, bh / a.H, bh % a.H, t) + d, acc[r][i] * a.scale);
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
        a.L = att_len(a, b);
        /* queries before t_first see none of this block's keys (s >= s0); keys past L
         * are seen by none (their gradients stay zero) */
        int64_t t_first = a.causal ? s0 + a.T - a.L : 0;
        if (t_first < 0) t_first = 0;
        if (s0 >= a.L) t_first = a.T;
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
                cu_st(dk, att_dkv_row(a, b, hk, s) + d, gk[r][i] * a.scale);
                cu_st(dv, att_dkv_row(a, b, hk, s) + d, gv[r][i]);
            }
        }
    }
}

/* ---- host side ------------------------------------------------------------------------------- */

static int is4d_float(const gdp_tensor *t, int32_t dt) { return t->dtype == dt && t->ndim == 4; }

static size_t fwd_smem(int64_t D) { return (size_t)(ATT_BK * (D | 1) + ATT_BK * D + ATT_BQ * D) * sizeof(float); }
static size_t dq_smem(int64_t D) { return (size_t)(2 * ATT_BK * (D | 1) + 2 * ATT_BQ * D) * sizeof(float); }
static size_t dkdv_smem(int64_t D)
{
    return (size_t)(2 * ATT_BQ * D + 2 * ATT_BK * (D | 1) + 2 * ATT_BK) * sizeof(float);
}

/* Shared memory past 48 KiB, opted into at open (cu_smem_opt_in) for the largest D of each
 * instantiation. */
template <typename T, int DV>
static void opt_in_dv(const cu_backend *be)
{
    const int64_t D = 32 * DV;
    cu_smem_opt_in(be, (const void *)attn_fwd_kernel<T, DV>, fwd_smem(D));
    cu_smem_opt_in(be, (const void *)attn_dq_kernel<T, DV>, dq_smem(D));
    cu_smem_opt_in(be, (const void *)attn_dkdv_kernel<T, DV>, dkdv_smem(D));
}

template <typename T>
static void opt_in_type(const cu_backend *be)
{
    opt_in_dv<T, 1>(be);
    opt_in_dv<T, 2>(be);
    opt_in_dv<T, 4>(be);
    opt_in_dv<T, 8>(be);
}

void cu_attention_open(cu_backend *be)
{
    opt_in_type<float>(be);
    opt_in_type<__half>(be);
    opt_in_type<__nv_bfloat16>(be);
    cu_attention_tc_open(be);
    cu_attention_wg_open(be);
    cu_attn_decode_open(be);
}

/* q, k, v as attention_check in attention.c wants them, D within what a lane holds, and
 * the kernels' shared memory within what the device gives a block. */
static int qkv_ok(const cu_backend *be, const gdp_tensor *q, const gdp_tensor *k, const gdp_tensor *v, int backward)
{
    int32_t dt = q->dtype;
    if (!cu_gpu_float(dt) || !is4d_float(q, dt) || !is4d_float(k, dt) || !cu_same_shape(k, v) || v->dtype != dt)
        return 0;
    if (!(k->shape[0] == q->shape[0] && k->shape[3] == q->shape[3] && k->shape[1] >= 1 &&
          q->shape[1] % k->shape[1] == 0 && q->shape[3] >= 1 && q->shape[3] <= 32 * ATT_MAX_DV))
        return 0;
    int64_t D = q->shape[3];
    size_t need = backward ? (dq_smem(D) > dkdv_smem(D) ? dq_smem(D) : dkdv_smem(D)) : fwd_smem(D);
    return need <= (size_t)48 * 1024 || need <= be->smem_optin;
}

/* The dims; kv_len is input `len_at` when the node has it. */
static att_dims att_dims_of(const gdp_node *n, const gdp_tensor *q, const gdp_tensor *k, int len_at);

/* Views (strided inputs) only for the tensor-core and decode kernels; the others read
 * contiguous inputs, which the host makes when supports() declines a view. kv_len is
 * input len_at when the node has it; `decode`: the decode kernel may take the node. */
static int views_ok(const cu_backend *be, const gdp_node *n, int first, int backward, int len_at, int decode)
{
    const gdp_tensor *const *in = n->in + first;
    int contiguous = 1;
    for (int i = 0; i < (backward ? 4 : 3); i++) contiguous &= gdp_is_contiguous(n->in[i]);
    if (contiguous) return 1;
    att_dims a = att_dims_of(n, n->in[first], n->in[first + 1], len_at);
    if (decode && cu_attn_decode_ok(be, a, in)) return 1;
    const gdp_tensor *views[4] = {in[0], in[1], in[2], backward ? n->in[0] : NULL};
    return cu_attn_tc_ok(be, n->in[first]->dtype, a, backward, views, backward ? 4 : 3);
}

static int attention_supports(void *b, const gdp_node *n)
{
    if (n->n_in < 3 || n->n_in > 4 || n->n_out != 1) return 0;
    if (!qkv_ok((const cu_backend *)b, n->in[0], n->in[1], n->in[2], 0)) return 0;
    if (n->n_in == 4 && !index_per_row(n->in[3], n->in[0]->shape[0])) return 0;
    if (!views_ok((const cu_backend *)b, n, 0, 0, 3, 1)) return 0;
    return cu_same_shape(n->out[0], n->in[0]) && n->out[0]->dtype == n->in[0]->dtype;
}

static int attention_grad_supports(void *b, const gdp_node *n)
{
    if (n->n_in < 4 || n->n_in > 5 || n->n_out != 3) return 0;
    if (!qkv_ok((const cu_backend *)b, n->in[1], n->in[2], n->in[3], 1)) return 0;
    /* a kv_len per row is declined: training never makes one, and on the H200 the f32
     * backward of such a case (with a broadcast input) failed the sweep */
    if (n->n_in == 5 && gdp_numel(n->in[4]) != 1) return 0;
    if (!views_ok((const cu_backend *)b, n, 1, 1, 4, 0)) return 0;
    for (int i = 0; i < 3; i++)
        if (!cu_same_shape(n->out[i], n->in[i + 1]) || n->out[i]->dtype != n->in[1]->dtype) return 0;
    return cu_same_shape(n->in[0], n->in[1]) && n->in[0]->dtype == n->in[1]->dtype;
}

int cu_attn_lse_fits(const cu_backend *be, const gdp_tensor *q, const gdp_tensor *k, const gdp_tensor *v)
{
    return qkv_ok(be, q, k, v, 0) && qkv_ok(be, q, k, v, 1);
}

/* y: q's dtype, of shape (B, H, T, D), or (B, T, H, D) with y_bthd. */
static int y_ok(const gdp_node *n, const gdp_tensor *y, const gdp_tensor *q)
{
    const int bthd = gdp_attr_int(&n->attrs, "y_bthd", 0) != 0;
    return y->dtype == q->dtype && y->ndim == 4 && y->shape[0] == q->shape[0] && y->shape[3] == q->shape[3] &&
           y->shape[1] == q->shape[bthd ? 2 : 1] && y->shape[2] == q->shape[bthd ? 1 : 2];
}

/* lse: f32 (B, H, T) for q (B, H, T, D), contiguous. */
static int lse_ok(const gdp_tensor *lse, const gdp_tensor *q)
{
    return lse->dtype == GDP_F32 && lse->ndim == 3 && lse->shape[0] == q->shape[0] && lse->shape[1] == q->shape[1] &&
           lse->shape[2] == q->shape[2] && gdp_is_contiguous(lse);
}

static int attention_lse_supports(void *b, const gdp_node *n)
{
    const cu_backend *be = (const cu_backend *)b;
    if (n->n_in != 3 || n->n_out != 2 || !qkv_ok(be, n->in[0], n->in[1], n->in[2], 0)) return 0;
    if (!views_ok(be, n, 0, 0, 3, 0)) return 0; /* the decode kernel makes no lse */
    return y_ok(n, n->out[0], n->in[0]) && lse_ok(n->out[1], n->in[0]);
}

static int attention_grad_lse_supports(void *b, const gdp_node *n)
{
    const cu_backend *be = (const cu_backend *)b;
    if (n->n_in != 6 || n->n_out != 3 || !qkv_ok(be, n->in[1], n->in[2], n->in[3], 1)) return 0;
    if (!views_ok(be, n, 1, 1, 6, 0)) return 0;
    const gdp_tensor *dy = n->in[0], *q = n->in[1], *y = n->in[4];
    if (!cu_same_shape(dy, q) || dy->dtype != q->dtype || !y_ok(n, y, q) || y->stride[3] != 1 || !lse_ok(n->in[5], q))
        return 0;
    /* dq, dk, dv shaped as q, k, v, or with grad_bthd as their (B, T, heads, D) transposes */
    const int bthd = gdp_attr_int(&n->attrs, "grad_bthd", 0) != 0;
    for (int i = 0; i < 3; i++) {
        const gdp_tensor *o = n->out[i], *x = n->in[i + 1];
        if (o->ndim != 4 || o->dtype != q->dtype || !gdp_is_contiguous(o)) return 0;
        for (int d = 0; d < 4; d++)
            if (o->shape[d] != x->shape[bthd && (d == 1 || d == 2) ? 3 - d : d]) return 0;
    }
    return 1;
}

/* The dims; kv_len is input `len_at` when the node has it. */
static att_dims att_dims_of(const gdp_node *n, const gdp_tensor *q, const gdp_tensor *k, int len_at)
{
    att_dims a;
    memset(&a, 0, sizeof a);
    a.B = q->shape[0], a.H = q->shape[1], a.T = q->shape[2], a.D = q->shape[3];
    a.Hkv = k->shape[1], a.S = k->shape[2];
    a.L = a.S;
    if (n->n_in > len_at) {
        a.kvlen = n->in[len_at]->data;
        a.kvstep = index_step(n->in[len_at]);
        a.kvlen64 = n->in[len_at]->dtype == GDP_I64;
    }
    a.causal = gdp_attr_int(&n->attrs, "causal", 0) != 0;
    a.y_bthd = gdp_attr_int(&n->attrs, "y_bthd", 0) != 0;
    a.grad_bthd = gdp_attr_int(&n->attrs, "grad_bthd", 0) != 0;
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

/* y (and lse, when not NULL) of q, k, v: inputs 0-2, y output 0. */
template <typename T, int DV>
static gdp_status attn_fwd_launch(cu_backend *be, cudaStream_t s, const gdp_node *node, const att_dims &a, float *lse,
                                  cu_bad bad)
{
    int64_t tiles = a.B * a.H * ((a.T + ATT_BQ - 1) / ATT_BQ);
    if (tiles == 0) return GDP_OK;
    attn_fwd_kernel<T, DV><<<att_grid(be, tiles), ATT_THREADS, fwd_smem(a.D), s>>>(
        (const T *)node->in[0]->data, (const T *)node->in[1]->data, (const T *)node->in[2]->data, (T *)node->out[0]->data,
        (const T *)NULL, lse, (float *)NULL, a, bad);
    return GDP_OK;
}

/* The backward of (dy, q, k, v, ...) inputs 0-3 into dq, dk, dv outputs 0-2: pass 1 when
 * `pass1` (writing lse and delta), then passes 2 and 3 from lse and delta (B * H * T
 * floats each). */
template <typename T, int DV>
static gdp_status attn_bwd_launch(cu_backend *be, cudaStream_t s, const gdp_node *node, const att_dims &a, int pass1,
                                  float *lse, float *delta, cu_bad bad)
{
    const T *dy = (const T *)node->in[0]->data, *q = (const T *)node->in[1]->data;
    const T *k = (const T *)node->in[2]->data, *v = (const T *)node->in[3]->data;
    int64_t qt = a.B * a.H * ((a.T + ATT_BQ - 1) / ATT_BQ), kt = a.B * a.Hkv * ((a.S + ATT_BQ - 1) / ATT_BQ);
    if (qt > 0) {
        if (pass1)
            attn_fwd_kernel<T, DV><<<att_grid(be, qt), ATT_THREADS, fwd_smem(a.D), s>>>(q, k, v, (T *)NULL, dy, lse,
                                                                                        delta, a, bad);
        attn_dq_kernel<T, DV><<<att_grid(be, qt), ATT_THREADS, dq_smem(a.D), s>>>(dy, q, k, v, lse, delta,
                                                                                 (T *)node->out[0]->data, a);
    }
    if (kt > 0)
        attn_dkdv_kernel<T, DV><<<att_grid(be, kt), ATT_THREADS, dkdv_smem(a.D), s>>>(
            dy, q, k, v, lse, delta, (T *)node->out[1]->data, (T *)node->out[2]->data, a);
    return GDP_OK;
}

/* Columns per lane: the smallest of 1, 2, 4, 8 with 32 * DV >= D. */
#define ATT_DV_SWITCH(D, DV, ...)                                                   \
    if ((D) <= 32) { const int DV = 1; __VA_ARGS__; }                             \
    else if ((D) <= 64) { const int DV = 2; __VA_ARGS__; }                        \
    else if ((D) <= 128) { const int DV = 4; __VA_ARGS__; }                       \
    else { const int DV = 8; __VA_ARGS__; }

// q (B, H, T, D), k, v (B, Hkv, S, D) [, kv_len] -> y (B, H, T, D)
static gdp_status attention_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    att_dims a = att_dims_of(node, node->in[0], node->in[1], 3);
    cu_bad bad = cu_bad_for(be, node, CU_BAD_LEN, a.S, 0, NULL);
    const int32_t dt = node->in[0]->dtype;
    const gdp_tensor *in[3] = {node->in[0], node->in[1], node->in[2]};
    const att_views w = {att_strides_of(in[0]), att_strides_of(in[1]), att_strides_of(in[2]), {0, 0, 0, 0}};
    gdp_status st = GDP_OK;
    if (cu_attn_decode_ok(be, a, in)) {
        return cu_attn_decode(be, s, node, a, w, bad, err);
    }
    if (cu_attn_tc_ok(be, dt, a, 0, in, 3)) {
        cu_attn_tc_fwd(be, s, dt, in[0]->data, in[1]->data, in[2]->data, node->out[0]->data, NULL, NULL, NULL, a, w,
                       bad);
        return GDP_OK;
    }
    CU_FLOAT_SWITCH(dt, T, ATT_DV_SWITCH(a.D, DV, st = (attn_fwd_launch<T, DV>(be, s, node, a, NULL, bad))));
    return st;
}
CU_LAUNCHER(attention_run)

/* The decode kernel's splits, when it takes the node and splits the keys. */
static size_t attention_workspace(void *b, const gdp_node *n)
{
    const cu_backend *be = (const cu_backend *)b;
    if (n->n_in < 3) return 0;
    att_dims a = att_dims_of(n, n->in[0], n->in[1], 3);
    if (!cu_attn_decode_ok(be, a, n->in)) return 0;
    return cu_ws_declare(cu_attn_decode_workspace(be, a));
}

/* The backward's stored dS (cu_attn_tc_bwd) when the tensor-core kernels take the node
 * (dy, q, k, v its first inputs, kv_len input len_at) and it fits; 0 otherwise. */
static size_t attn_ds_bytes(const cu_backend *be, const gdp_node *n, int len_at)
{
    if (!be->attn_ds) return 0;
    const att_dims a = att_dims_of(n, n->in[1], n->in[2], len_at);
    const gdp_tensor *in[4] = {n->in[1], n->in[2], n->in[3], n->in[0]}; // q, k, v, dy
    return cu_attn_tc_ok(be, n->in[1]->dtype, a, 1, in, 4) ? cu_attn_tc_ds_bytes(n->in[1]->dtype, a) : 0;
}

/* lse and delta per query row, then the stored dS. */
static size_t attention_grad_stats(const gdp_node *n)
{
    const gdp_tensor *q = n->in[1];
    return cu_ws_round((size_t)(2 * q->shape[0] * q->shape[1] * q->shape[2]) * sizeof(float));
}

static size_t attention_grad_workspace(void *b, const gdp_node *n)
{
    return cu_ws_declare(attention_grad_stats(n) + attn_ds_bytes((const cu_backend *)b, n, 4));
}

// dy, q (B, H, T, D), k, v (B, Hkv, S, D) [, kv_len] -> dq, dk, dv
static gdp_status attention_grad_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    att_dims a = att_dims_of(node, node->in[1], node->in[2], 4);
    char *ws = NULL;
    const size_t ds_bytes = attn_ds_bytes(be, node, 4);
    gdp_status st = cu_ws(node, attention_grad_stats(node) + ds_bytes, &ws, err);
    if (st != GDP_OK) return st;
    cu_bad bad = cu_bad_for(be, node, CU_BAD_LEN, a.S, 0, NULL);
    float *stats = (float *)ws;
    const int32_t dt = node->in[1]->dtype;
    const gdp_tensor *in[4] = {node->in[1], node->in[2], node->in[3], node->in[0]}; // q, k, v, dy
    if (cu_attn_tc_ok(be, dt, a, 1, in, 4)) {
        att_views w = {att_strides_of(in[0]), att_strides_of(in[1]), att_strides_of(in[2]), att_strides_of(in[3])};
        float *lse = stats, *delta = stats + a.B * a.H * a.T;
        cu_attn_tc_fwd(be, s, dt, in[0]->data, in[1]->data, in[2]->data, NULL, in[3]->data, lse, delta, a, w, bad);
        cu_attn_tc_bwd(be, s, dt, in[3]->data, in[0]->data, in[1]->data, in[2]->data, lse, delta, node->out[0]->data,
                       node->out[1]->data, node->out[2]->data, ds_bytes > 0 ? ws + attention_grad_stats(node) : NULL,
                       a, w);
        return GDP_OK;
    }
    float *lse = stats, *delta = stats + a.B * a.H * a.T;
    CU_FLOAT_SWITCH(dt, T, ATT_DV_SWITCH(a.D, DV, st = (attn_bwd_launch<T, DV>(be, s, node, a, 1, lse, delta, bad))));
    return st;
}
CU_LAUNCHER(attention_grad_run)

// q (B, H, T, D), k, v (B, Hkv, S, D) -> y (B, H, T, D), lse (B, H, T) f32
static gdp_status attention_lse_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    (void)err;
    att_dims a = att_dims_of(node, node->in[0], node->in[1], 3);
    cu_bad bad = cu_bad_for(be, node, CU_BAD_LEN, a.S, 0, NULL);
    const int32_t dt = node->in[0]->dtype;
    const gdp_tensor *in[3] = {node->in[0], node->in[1], node->in[2]};
    float *lse = (float *)node->out[1]->data;
    if (cu_attn_tc_ok(be, dt, a, 0, in, 3)) {
        const att_views w = {att_strides_of(in[0]), att_strides_of(in[1]), att_strides_of(in[2]), {0, 0, 0, 0}};
        cu_attn_tc_fwd(be, s, dt, in[0]->data, in[1]->data, in[2]->data, node->out[0]->data, NULL, lse, NULL, a, w,
                       bad);
        return GDP_OK;
    }
    gdp_status st = GDP_OK;
    CU_FLOAT_SWITCH(dt, T, ATT_DV_SWITCH(a.D, DV, st = (attn_fwd_launch<T, DV>(be, s, node, a, lse, bad))));
    return st;
}
CU_LAUNCHER(attention_lse_run)

/* delta[r] = dy[r] . y[r] in f32 for the B * H * T query rows r = (b, h, t), a warp per
 * row; dy and y views whose rows are contiguous. */
template <typename T>
__global__ void __launch_bounds__(256) attn_delta_kernel(const T *dy, att_strides wd, const T *y, att_strides wy,
                                                         float *delta, int64_t H, int64_t T_, int64_t rows, int D)
{
    const int lane = threadIdx.x & 31;
    const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t r = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; r < rows; r += warps) {
        const int64_t t = r % T_, h = (r / T_) % H, b = r / T_ / H;
        const T *dr = dy + b * wd.b + h * wd.h + t * wd.t, *yr = y + b * wy.b + h * wy.h + t * wy.t;
        float acc = 0.0f;
        for (int d = lane; d < D; d += 32) acc = fmaf(cu_ld(dr, d), cu_ld(yr, d), acc);
        acc = cu_warp_sum_f(acc);
        if (lane == 0) delta[r] = acc;
    }
}

/* The same for views whose rows are 16-byte aligned (s.vec) with D a multiple of a vector's
 * elements: L = D / cu_vec<T>::N lanes a row, a vector each, the block's 256 / L rows
 * consecutive in t of one (b, h) = blockIdx.y. A warp a row had moved 2 bytes a load and
 * divided 64-bit indices a row, which held it near a third of the memory's rate. */
template <typename T, int L>
__global__ void __launch_bounds__(256) attn_delta_vec_kernel(const T *dy, att_strides wd, const T *y, att_strides wy,
                                                             float *delta, int H, int64_t T_)
{
    constexpr int N = cu_vec<T>::N;
    const int b = (int)blockIdx.y / H, h = (int)blockIdx.y % H, c = threadIdx.x % L;
    const int64_t t = (int64_t)blockIdx.x * (256 / L) + threadIdx.x / L;
    float acc = 0.0f;
    if (t < T_) {
        float fd[N], fy[N];
        cu_ld16(dy, b * wd.b + h * wd.h + t * wd.t + c * N, fd);
        cu_ld16(y, b * wy.b + h * wy.h + t * wy.t + c * N, fy);
#pragma unroll
        for (int k = 0; k < N; k++) acc = fmaf(fd[k], fy[k], acc);
    }
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(CU_FULL_MASK, acc, o);
    if (t < T_ && c == 0) delta[(int64_t)blockIdx.y * T_ + t] = acc;
}

/* delta[r] for the B * H * T query rows: the vector kernel where the views allow it. */
template <typename T>
static void attn_delta(const cu_backend *be, cudaStream_t s, const T *dy, const att_strides &wd, const T *y,
                       const att_strides &wy, float *delta, const att_dims &a)
{
    constexpr int N = cu_vec<T>::N;
    const int64_t rows = a.B * a.H * a.T, L = a.D / N;
    if (wd.vec && wy.vec && a.D % N == 0 && (L == 8 || L == 16 || L == 32) && a.B * a.H <= 65535) {
        const dim3 grid((unsigned)((a.T + 256 / L - 1) / (256 / L)), (unsigned)(a.B * a.H));
        if (L == 8) attn_delta_vec_kernel<T, 8><<<grid, 256, 0, s>>>(dy, wd, y, wy, delta, (int)a.H, a.T);
        else if (L == 16) attn_delta_vec_kernel<T, 16><<<grid, 256, 0, s>>>(dy, wd, y, wy, delta, (int)a.H, a.T);
        else attn_delta_vec_kernel<T, 32><<<grid, 256, 0, s>>>(dy, wd, y, wy, delta, (int)a.H, a.T);
        return;
    }
    attn_delta_kernel<T><<<att_grid(be, (rows + 7) / 8), 256, 0, s>>>(dy, wd, y, wy, delta, a.H, a.T, rows, (int)a.D);
}

/* delta per query row, then the stored dS. */
static size_t attention_grad_lse_stats(const gdp_node *n)
{
    const gdp_tensor *q = n->in[1];
    return cu_ws_round((size_t)(q->shape[0] * q->shape[1] * q->shape[2]) * sizeof(float));
}

static size_t attention_grad_lse_workspace(void *b, const gdp_node *n)
{
    return cu_ws_declare(attention_grad_lse_stats(n) + attn_ds_bytes((const cu_backend *)b, n, 6));
}

// dy, q (B, H, T, D), k, v (B, Hkv, S, D), y (B, H, T, D), lse (B, H, T) -> dq, dk, dv:
// delta from dy and y, then passes 2 and 3 (no pass 1: lse is given)
static gdp_status attention_grad_lse_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    att_dims a = att_dims_of(node, node->in[1], node->in[2], 6);
    char *ws = NULL;
    const size_t ds_bytes = attn_ds_bytes(be, node, 6);
    gdp_status st = cu_ws(node, attention_grad_lse_stats(node) + ds_bytes, &ws, err);
    if (st != GDP_OK) return st;
    float *delta = (float *)ws, *lse = (float *)node->in[5]->data;
    const int32_t dt = node->in[1]->dtype;
    const gdp_tensor *in[4] = {node->in[1], node->in[2], node->in[3], node->in[0]}; // q, k, v, dy
    const att_views w = {att_strides_of(in[0]), att_strides_of(in[1]), att_strides_of(in[2]), att_strides_of(in[3])};
    /* y's rows by (b, h, t): with y_bthd its dims 1 and 2 are t and h */
    att_strides wy = att_strides_of(node->in[4]);
    if (a.y_bthd) {
        const gdp_tensor *y = node->in[4];
        wy.h = y->shape[2] > 1 ? y->stride[2] : 0, wy.t = y->shape[1] > 1 ? y->stride[1] : 0;
    }
    const int64_t rows = a.B * a.H * a.T;
    if (rows == 0) return GDP_OK;
    CU_FLOAT_SWITCH(dt, T, (attn_delta<T>(be, s, (const T *)in[3]->data, w.dy, (const T *)node->in[4]->data, wy,
                                           delta, a)));
    if (cu_attn_tc_ok(be, dt, a, 1, in, 4)) {
        cu_attn_tc_bwd(be, s, dt, in[3]->data, in[0]->data, in[1]->data, in[2]->data, lse, delta,
                       node->out[0]->data, node->out[1]->data, node->out[2]->data,
                       ds_bytes > 0 ? ws + attention_grad_lse_stats(node) : NULL, a, w);
        return GDP_OK;
    }
    cu_bad none; /* pass 1 (the only reader of kv_len) does not run */
    memset(&none, 0, sizeof none);
    CU_FLOAT_SWITCH(dt, T, ATT_DV_SWITCH(a.D, DV, st = (attn_bwd_launch<T, DV>(be, s, node, a, 0, lse, delta, none))));
    return st;
}
CU_LAUNCHER(attention_grad_lse_run)

#define FLOATS3F(op, flags, sup, fn, attrs, ws) \
    CU_KX(op, GDP_F32, flags, sup, fn, attrs, ws), CU_KX(op, GDP_F16, flags, sup, fn, attrs, ws), \
        CU_KX(op, GDP_BF16, flags, sup, fn, attrs, ws)

static const gdp_kernel kernels[] = {
    /* views go to the tensor-core kernels; supports() declines them for the others */
    FLOATS3F("attention", GDP_KERNEL_STRIDED, attention_supports, attention_run_launch, NULL, attention_workspace),
    FLOATS3F("attention_grad", GDP_KERNEL_STRIDED, attention_grad_supports, attention_grad_run_launch, NULL,
             attention_grad_workspace),
    /* the forms that keep lse for the backward (fuse.cu makes them in training programs) */
    CU_KX("attention_lse", GDP_F32, GDP_KERNEL_STRIDED, attention_lse_supports, attention_lse_run_launch, NULL, NULL),
    CU_KSIGX("attention_lse", "bf16,bf16,bf16->bf16,f32", GDP_KERNEL_STRIDED, attention_lse_supports,
             attention_lse_run_launch, NULL, NULL),
    CU_KSIGX("attention_lse", "f16,f16,f16->f16,f32", GDP_KERNEL_STRIDED, attention_lse_supports,
             attention_lse_run_launch, NULL, NULL),
    CU_KX("attention_grad_lse", GDP_F32, GDP_KERNEL_STRIDED, attention_grad_lse_supports, attention_grad_lse_run_launch,
          NULL, attention_grad_lse_workspace),
    CU_KSIGX("attention_grad_lse", "bf16,bf16,bf16,bf16,bf16,f32->bf16,bf16,bf16", GDP_KERNEL_STRIDED,
             attention_grad_lse_supports, attention_grad_lse_run_launch, NULL, attention_grad_lse_workspace),
    CU_KSIGX("attention_grad_lse", "f16,f16,f16,f16,f16,f32->f16,f16,f16", GDP_KERNEL_STRIDED,
             attention_grad_lse_supports, attention_grad_lse_run_launch, NULL, attention_grad_lse_workspace),
};
CU_FAMILY(attention, kernels);
