/* attention_tc.cu — attention and attention_grad on tensor cores, for f16 and bf16 q, k, v
 * with heads of 64 or 128: the FlashAttention-2 design, written with the m16n8k16 matrix
 * instructions (mma.sync: f16/bf16 operands, f32 accumulation) whose register layouts the
 * PTX ISA fixes, so scores, probabilities and outputs stay in registers.
 *
 * Layouts. A warp owns 16 rows of a product. A thread of lane l (g = l / 4, c = l % 4)
 * holds, of a 16x8 f32 accumulator, rows g and g + 8 at columns 2c and 2c + 1; of a 16x16
 * operand A, the same rows at columns 2c, 2c + 1 and 2c + 8, 2c + 9. So the scores of two
 * adjacent 8-column blocks are, element for element, the A operand of the next product
 * (P V, dS^T Q, ...): the probabilities never leave registers (dS does, for dq: pass 3
 * below). Operands read from shared memory come through ldmatrix (four 8x8 matrices a
 * load), transposed on the way when the product needs a tile's columns as its rows. Tiles
 * in shared memory have rows of D + 8
 * halves, 16-byte aligned and with successive rows in different banks for ldmatrix.
 *
 * Forward. A block owns 64 MT query rows of one head, a warp 16 MT of them (MT = 2: each
 * fragment of K or V loaded from shared memory feeds two products). Keys and values
 * stream through shared memory in tiles of 64 rows, the next tile loading (cp.async)
 * while the current one is used. Per tile: S = Q K^T, masked (causal, kv_len);
 * the running row maximum m and sum l the online-softmax way (exp2 of scores scaled by
 * log2 e); P = exp(S - m) rounded to the input dtype, O rescaled and O += P V. Tiles past
 * the block's last visible key are skipped, and only a tile some of whose keys a warp's
 * rows do not see (the causal diagonal, kv_len) is masked: elsewhere a score costs its
 * share of the maximum (taken of the raw scores), one FFMA that scales it and subtracts
 * the maximum, one exponential (the special-function unit's, ex2) and one conversion per
 * pair.
 *
 * Blocks take tiles heaviest first (tc_order): under a causal mask the last query tiles
 * see the most keys, and with them started first the machine's last wave is of light ones.
 *
 * Backward, as FlashAttention-2, with no atomics:
 *   1. the forward kernel in statistics mode writes lse = m + log l and delta = dy . o per
 *      query row (o unrounded, in f32), or attention_lse kept lse and delta came from y;
 *   2. dk, dv: a block of 64 key rows of one kv head walks the query tiles of every query
 *      head of its group in ascending order, recomputes P^T and dP^T = V dO^T, and
 *      accumulates dV += P^T dO and dK += dS^T Q; it also stores dS^T, rounded as its
 *      products use it, into the node's scratch (B H S rows of T, up to 1 GiB);
 *   3. dq: a block of 128 query rows (8 warps) walks the stored dS^T and K in tiles of
 *      64 keys and accumulates dQ += dS K, one product instead of the three of
 *      recomputing S, dP and dS (Qwen3's step 1.6% faster, GPT-2's the same: the store
 *      and the read of dS cost what the recomputation did there). Problems whose dS
 *      would not fit, or with GRADUS_CUDA_ATTN_DS=0, run dq first the recomputing way: a
 *      block of 64 query rows walks the key tiles, recomputes P = exp(S - lse),
 *      dP = dO V^T, dS = P (dP - delta).
 * Every output element is written once by one lane, after sums in a fixed order, so the
 * results are deterministic. P and dS are rounded to the input dtype before their
 * products, as FlashAttention does; the sweep's half-precision tolerance covers that.
 * With heads of 128 the recomputing dq's key tiles are 32 rows, which keeps its
 * accumulators (64 floats a thread) beside the scores within the registers; the dk/dv
 * pass takes query tiles of 64 at every head size (tc_dims::QT).
 *
 * Inputs may be views (attention's q, k, v are transposes of the projections' outputs):
 * a tile is loaded row by row through the view's strides, so the planner makes no copies.
 * Outputs are contiguous; the backward's dq, dk, dv may be laid out (B, T, heads, D)
 * (grad_bthd), the layout of the projections they go back to.
 *
 * Everything else (f32, other head sizes, a handful of query rows as in decoding) stays
 * with attention.cu's CUDA-core kernels, on contiguous inputs.
 */
#include "attention_tc.h"

#define TC_BQ 64       /* query rows per block (forward, dq) and key rows per block (dk, dv) */
#define TC_BK 64       /* key rows per tile of the forward */
#define TC_THREADS 128 /* 4 warps of 16 rows */
#define TC_DS_KT 64    /* keys per tile of dq from the stored dS */
/* 64-row query groups a block of dq from the stored dS. Two (8 warps) read each K tile once
 * for 128 query rows: the pass is bound by its L2 traffic, dS and K tiles alike. Measured on
 * the H200 (the whole backward, bf16, causal): GPT-2's shape 0.3961 ms with one, 0.3914 with
 * two; Qwen3's 0.3632 and 0.3547. */
#define TC_DQS_MQ 2

/* W (wide): the forward's two 16-row tiles a warp and the dk/dv pass's query tiles of 64
 * for heads of 128 as well, where the device grants the shared memory they need (102 and
 * 103 KiB; some GPUs give a block 99). Heads of 64 are always wide. */
template <int D, bool W = true> struct tc_dims {
    static constexpr bool wide = W || D == 64;
    static constexpr int LD = D + 8;                 /* halves between rows of a shared tile */
    static constexpr int NB = D == 128 ? 32 : 64;    /* dq's key rows per tile (recomputing dS) */
    /* dk, dv: query rows per tile. 64 for heads of 128 too, though its accumulators then
     * spill a few dozen bytes: the Qwen3-shape backward ran 7% faster than at 32 (0.522
     * against 0.563 ms), half the rounds and barriers. */
    static constexpr int QT = wide ? 64 : 32;
    static constexpr size_t rows = (size_t)LD * 2;   /* bytes of one tile row */
    /* forward: a warp's two 16-row tiles share each key and value fragment it reads from
     * shared memory, which halves that traffic; the block's query rows. (With heads of 128
     * the accumulators then spill some 200 bytes, but the Qwen3-shape forward ran 16%
     * faster than at one tile a warp, 0.179 against 0.214 ms.) */
    static constexpr int MT = wide ? 2 : 1, BQ = 64 * MT;
    /* forward: Q, then two buffers of K and V */
    static constexpr size_t fwd_smem = (BQ + 4 * TC_BK) * rows;
    /* dq: Q and dO (64 rows), two buffers of K and V (NB rows) */
    static constexpr size_t dq_smem = 2 * TC_BQ * rows + 4 * NB * rows;
    /* dk, dv: K and V (64 rows), two buffers of Q and dO (QT rows) and of lse, delta */
    static constexpr size_t dkdv_smem = 2 * TC_BQ * rows + 4 * QT * rows + 4 * QT * sizeof(float);
    /* dk, dv: blocks a multiprocessor holds. Heads of 64 fit three in the registers (168 a
     * thread) without spilling, and GPT-2's step ran 0.9% faster than at two (240 a thread);
     * heads of 128 would spill more. */
    static constexpr int dkdv_blocks = D == 64 ? 3 : 1;
};

/* dq from the stored dS, MQ (1 or 2) groups of 64 query rows a block (4 MQ warps): two
 * buffers of a dS^T tile (TC_DS_KT keys of BQ queries, rows LDS halves apart) and of the K
 * tile beside it. */
template <int D, int MQ> struct tc_dqs_dims {
    static constexpr int BQ = 64 * MQ, NT = TC_THREADS * MQ, LDS = BQ + 8;
    static constexpr size_t smem = 2 * TC_DS_KT * ((size_t)LDS * 2 + tc_dims<D>::rows);
};

/* ---- the matrix instructions ---------------------------------------------------------------- */

/* Four 8x8 matrices of 16-bit elements; thread l gives the address of row l % 8 of matrix
 * l / 8 and gets, of matrix j, row l / 4 at columns 2 (l % 4), +1 in r[j] (transposed: the
 * matrix's column l / 4 at rows 2 (l % 4), +1). */
static __device__ __forceinline__ void tc_ldsm(uint32_t *r, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tc_smem_addr(p))
                 : "memory");
}
static __device__ __forceinline__ void tc_ldsm_t(uint32_t *r, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tc_smem_addr(p))
                 : "memory");
}

/* c (16x8) += a (16x16) b (16x8), f32 accumulation. */
static __device__ __forceinline__ void tc_mma(float *c, const uint32_t *a, const uint32_t *b, const __nv_bfloat16 *)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
static __device__ __forceinline__ void tc_mma(float *c, const uint32_t *a, const uint32_t *b, const __half *)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* A operand: rows [r0, r0 + 16) and columns [c0, c0 + 16) of a tile (rows LD apart). */
template <typename T, int LD>
static __device__ __forceinline__ void tc_lda(uint32_t *a, const T *X, int r0, int c0)
{
    const int l = threadIdx.x & 31, m = l >> 3;
    tc_ldsm(a, X + (r0 + (m & 1) * 8 + (l & 7)) * LD + c0 + (m >> 1) * 8);
}
/* The same A operand from a tile holding A transposed (X's rows are A's columns): rows
 * [r0, r0 + 16) of A are columns r0.. of X, A's columns [c0, c0 + 16) X's rows c0... */
template <typename T, int LD>
static __device__ __forceinline__ void tc_lda_t(uint32_t *a, const T *X, int r0, int c0)
{
    const int l = threadIdx.x & 31, m = l >> 3;
    tc_ldsm_t(a, X + (c0 + (m >> 1) * 8 + (l & 7)) * LD + r0 + (m & 1) * 8);
}
/* B operands of two 8-column blocks, from a tile holding B's columns as its rows: columns
 * [n0, n0 + 16) of B are rows n0.. of X, the product's k runs along X's row from c0.
 * b[0..1]: columns n0..n0+7; b[2..3]: n0+8..n0+15. */
template <typename T, int LD>
static __device__ __forceinline__ void tc_ldb_rows(uint32_t *b, const T *X, int n0, int c0)
{
    const int l = threadIdx.x & 31, m = l >> 3;
    tc_ldsm(b, X + (n0 + (m >> 1) * 8 + (l & 7)) * LD + c0 + (m & 1) * 8);
}
/* B operands of two 8-column blocks from a tile holding B as it is: k is X's row (from k0),
 * the columns X's columns [n0, n0 + 16). */
template <typename T, int LD>
static __device__ __forceinline__ void tc_ldb_cols(uint32_t *b, const T *X, int k0, int n0)
{
    const int l = threadIdx.x & 31, m = l >> 3;
    tc_ldsm_t(b, X + (k0 + (m & 1) * 8 + (l & 7)) * LD + n0 + (m >> 1) * 8);
}

/* ---- loads ------------------------------------------------------------------------------------ */

/* Rows [first, first + R) of a (len, D) matrix whose rows start `rs` elements apart into a
 * shared tile (rows LD apart); rows past len are zeros. With `vec` (every row 16-byte
 * aligned: the host checked the view's base and strides) 16 bytes at a time, in flight
 * until the group is waited for; otherwise element by element, done on return. */
template <typename T, int D, int R, int NT = TC_THREADS>
static __device__ __forceinline__ void tc_load(const T *src, int64_t rs, int64_t first, int64_t len, T *sh, bool vec)
{
    constexpr int V = D / 8, LD = tc_dims<D>::LD;
    if (vec) {
        static_assert(R * V % NT == 0 && NT % V == 0, "whole rounds of the block's threads");
        /* thread x moves column chunk x % V of rows x / V, x / V + NT / V, ...: the trip
         * count is known, so the loop unrolls and the addresses step by a constant */
        constexpr int step = NT / V;
        const int r0 = threadIdx.x / V, c = (threadIdx.x % V) * 8;
        const int64_t row0 = first + r0;
        const T *p = src + row0 * rs + c;
        T *d = sh + r0 * LD + c;
#pragma unroll
        for (int k = 0; k < R * V / NT; k++) {
            const bool in = row0 + k * step < len;
            tc_cp16(d + k * step * LD, in ? p + k * step * rs : src, in ? 16 : 0);
        }
        return;
    }
    for (int i = threadIdx.x; i < R * D; i += NT) {
        const int r = i / D, c = i - r * D;
        const int64_t row = first + r;
        cu_st(sh, r * LD + c, row < len ? cu_ld(src, row * rs + c) : 0.0f); /* exact for f16/bf16 */
    }
}

/* ---- work order ------------------------------------------------------------------------------ */

/* ---- forward (and backward pass 1) -------------------------------------------------------- */

template <typename T, int D, bool W>
__global__ void __launch_bounds__(TC_THREADS) tc_fwd_kernel(const T *q, const T *k, const T *v, T *y, const T *dy,
                                                            float *lse, float *delta, att_dims a, att_views w,
                                                            cu_bad bad)
{
    extern __shared__ __align__(128) unsigned char tc_smem[];
    typedef tc_dims<D, W> Dm;
    constexpr int LD = Dm::LD, KT = TC_BK, MT = Dm::MT, BQ = Dm::BQ; /* MT: a warp's 16-row tiles */
    att_check_len(a, bad);
    T *Qs = (T *)tc_smem, *KV = Qs + BQ * LD; /* buffer j: K at KV + 2 j KT LD, V after it */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c2 = (lane & 3) * 2;
    const int64_t qtiles = (a.T + BQ - 1) / BQ, group = a.H / a.Hkv;
    const float sl = a.scale * TC_LOG2E; /* scores in log2 units */
    for (int64_t tile = blockIdx.x; tile < a.B * a.H * qtiles; tile += gridDim.x) {
        int64_t bh, qi;
        tc_order(tile, a.B * a.H, qtiles, true, bh, qi);
        const int64_t t0 = qi * BQ, b = bh / a.H, h = bh % a.H, w0 = t0 + warp * 16 * MT; /* the warp's first row */
        const T *kb = tc_mat(k, w.k, b, h / group), *vb = tc_mat(v, w.v, b, h / group);
        a.L = att_len(a, b);
        const int64_t t_last = (t0 + BQ < a.T ? t0 + BQ : a.T) - 1;
        const int64_t n_max = att_visible(a, t_last), tiles = (n_max + KT - 1) / KT;
        /* the thread's rows: g and g + 8 of each of the warp's m-tiles ([i][0], [i][1]) */
        int64_t row[MT][2], seen[MT][2];
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                row[i][e] = w0 + 16 * i + 8 * e + g;
                seen[i][e] = row[i][e] < a.T ? att_visible(a, row[i][e]) : 0;
            }
        const int64_t full = tc_warp_sees(a, w0);
        __syncthreads(); /* the previous tile's readers are done */
        tc_load<T, D, BQ>(tc_mat(q, w.q, b, h), w.q.t, t0, a.T, Qs, w.q.vec);
        if (tiles > 0) {
            tc_load<T, D, KT>(kb, w.k.t, 0, a.S, KV, w.k.vec);
            tc_load<T, D, KT>(vb, w.v.t, 0, a.S, KV + KT * LD, w.v.vec);
        }
        tc_commit();
        float o[MT][D / 8][4], m[MT][2], l[MT][2];
#pragma unroll
        for (int i = 0; i < MT; i++) {
#pragma unroll
            for (int n = 0; n < D / 8; n++) o[i][n][0] = o[i][n][1] = o[i][n][2] = o[i][n][3] = 0.0f;
            m[i][0] = m[i][1] = -INFINITY, l[i][0] = l[i][1] = 0.0f;
        }
        for (int64_t it = 0; it < tiles; it++) {
            const int64_t kt = it * KT;
            const T *Ks = KV + (it & 1) * 2 * KT * LD, *Vs = Ks + KT * LD;
            __syncthreads(); /* the buffer about to be refilled was read in the last round */
            if (it + 1 < tiles) {
                T *nk = KV + ((it + 1) & 1) * 2 * KT * LD;
                tc_load<T, D, KT>(kb, w.k.t, kt + KT, a.S, nk, w.k.vec);
                tc_load<T, D, KT>(vb, w.v.t, kt + KT, a.S, nk + KT * LD, w.v.vec);
            }
            tc_commit();
            tc_wait_prev();
            __syncthreads();
            float s[MT][KT / 8][4];
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < KT / 8; j++) s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t qa[MT][4];
#pragma unroll
                for (int i = 0; i < MT; i++) tc_lda<T, LD>(qa[i], Qs, warp * 16 * MT + 16 * i, kk * 16);
#pragma unroll
                for (int jp = 0; jp < KT / 16; jp++) {
                    uint32_t kf[4]; /* each key fragment serves the warp's m-tiles */
                    tc_ldb_rows<T, LD>(kf, Ks, jp * 16, kk * 16);
#pragma unroll
                    for (int i = 0; i < MT; i++) {
                        tc_mma(s[i][2 * jp], qa[i], kf, q);
                        tc_mma(s[i][2 * jp + 1], qa[i], kf + 2, q);
                    }
                }
            }
            uint32_t pf[MT][KT / 16][4];
#pragma unroll
            for (int i = 0; i < MT; i++) {
                /* mask where some key of the tile is hidden from some row of the warp; the
                 * rows' maxima of the raw scores over the quad of lanes sharing them. The
                 * scale is applied inside the exponential's FFMA below: sl > 0 (the host
                 * declines other scales) and rounding is monotonic, so max(s) sl rounds to
                 * what the largest s sl does. */
                if (kt + KT > full) {
#pragma unroll
                    for (int j = 0; j < KT / 8; j++) {
                        const int64_t key = kt + j * 8 + c2;
                        if (key >= seen[i][0]) s[i][j][0] = -INFINITY;
                        if (key + 1 >= seen[i][0]) s[i][j][1] = -INFINITY;
                        if (key >= seen[i][1]) s[i][j][2] = -INFINITY;
                        if (key + 1 >= seen[i][1]) s[i][j][3] = -INFINITY;
                    }
                }
                float xa = -INFINITY, xb = -INFINITY;
#pragma unroll
                for (int j = 0; j < KT / 8; j++) {
                    xa = fmaxf(xa, fmaxf(s[i][j][0], s[i][j][1]));
                    xb = fmaxf(xb, fmaxf(s[i][j][2], s[i][j][3]));
                }
                xa = fmaxf(xa, __shfl_xor_sync(CU_FULL_MASK, xa, 1));
                xa = fmaxf(xa, __shfl_xor_sync(CU_FULL_MASK, xa, 2));
                xb = fmaxf(xb, __shfl_xor_sync(CU_FULL_MASK, xb, 1));
                xb = fmaxf(xb, __shfl_xor_sync(CU_FULL_MASK, xb, 2));
                /* in log2 units; -inf while every key a row has met is hidden */
                const float mna = fmaxf(m[i][0], xa * sl), mnb = fmaxf(m[i][1], xb * sl);
                /* a row that has seen no key yet keeps m = -inf, l = 0, O = 0 */
                const float alpha_a = mna == -INFINITY ? 1.0f : tc_exp2(m[i][0] - mna);
                const float alpha_b = mnb == -INFINITY ? 1.0f : tc_exp2(m[i][1] - mnb);
                m[i][0] = mna, m[i][1] = mnb;
                /* P, rounded to T, as the A operand of P V; the sums are of what P V
                 * multiplies. A hidden score times sl is -inf, and so is its difference from a
                 * finite maximum: 2^-inf = 0. A row with no key yet subtracts 0, not its -inf.
                 * (A finite score whose scaled value overflows, possible only with a scale
                 * above ln 2 and a score near FLT_MAX, makes the maximum +inf and the row's
                 * probabilities zeros, where scaling first gave NaN.) */
                const float ra = mna == -INFINITY ? 0.0f : mna, rb = mnb == -INFINITY ? 0.0f : mnb;
                float sa = 0.0f, sb = 0.0f;
#pragma unroll
                for (int j = 0; j < KT / 8; j++) {
                    const uint32_t ua =
                        tc_pack(tc_exp2(fmaf(s[i][j][0], sl, -ra)), tc_exp2(fmaf(s[i][j][1], sl, -ra)), q);
                    const uint32_t ub =
                        tc_pack(tc_exp2(fmaf(s[i][j][2], sl, -rb)), tc_exp2(fmaf(s[i][j][3], sl, -rb)), q);
                    const float2 pa = tc_unpack(ua, q), pb = tc_unpack(ub, q);
                    sa += pa.x + pa.y;
                    sb += pb.x + pb.y;
                    pf[i][j / 2][(j & 1) * 2] = ua;
                    pf[i][j / 2][(j & 1) * 2 + 1] = ub;
                }
                sa += __shfl_xor_sync(CU_FULL_MASK, sa, 1);
                sa += __shfl_xor_sync(CU_FULL_MASK, sa, 2);
                sb += __shfl_xor_sync(CU_FULL_MASK, sb, 1);
                sb += __shfl_xor_sync(CU_FULL_MASK, sb, 2);
                l[i][0] = l[i][0] * alpha_a + sa;
                l[i][1] = l[i][1] * alpha_b + sb;
#pragma unroll
                for (int n = 0; n < D / 8; n++)
                    o[i][n][0] *= alpha_a, o[i][n][1] *= alpha_a, o[i][n][2] *= alpha_b, o[i][n][3] *= alpha_b;
            }
#pragma unroll
            for (int kk = 0; kk < KT / 16; kk++) {
#pragma unroll
                for (int np = 0; np < D / 16; np++) {
                    uint32_t vf[4]; /* each value fragment serves the warp's m-tiles */
                    tc_ldb_cols<T, LD>(vf, Vs, kk * 16, np * 16);
#pragma unroll
                    for (int i = 0; i < MT; i++) {
                        tc_mma(o[i][2 * np], pf[i][kk], vf, q);
                        tc_mma(o[i][2 * np + 1], pf[i][kk], vf + 2, q);
                    }
                }
            }
        }
        tc_wait_all();
#pragma unroll
        for (int i = 0; i < MT; i++) {
            const float inva = l[i][0] > 0.0f ? 1.0f / l[i][0] : 0.0f; /* no key: zeros */
            const float invb = l[i][1] > 0.0f ? 1.0f / l[i][1] : 0.0f;
            const int64_t ta = row[i][0], tb = row[i][1];
            /* natural units: m and l are of scores times log2 e */
            const float lsa = l[i][0] > 0.0f ? (m[i][0] + log2f(l[i][0])) * TC_LN2 : 0.0f;
            const float lsb = l[i][1] > 0.0f ? (m[i][1] + log2f(l[i][1])) * TC_LN2 : 0.0f;
            if (lse != NULL && dy == NULL && (lane & 3) == 0) { /* attention_lse: y and lse */
                if (ta < a.T) lse[bh * a.T + ta] = lsa;
                if (tb < a.T) lse[bh * a.T + tb] = lsb;
            }
            if (y != NULL) {
#pragma unroll
                for (int n = 0; n < D / 8; n++) {
                    o[i][n][0] *= inva, o[i][n][1] *= inva, o[i][n][2] *= invb, o[i][n][3] *= invb;
                }
                tc_store<T, D>(o[i], 1.0f, y + att_y_row(a, b, h, 0), w0 + 16 * i, a.T, a.y_bthd ? a.H * D : D);
            }
            if (dy != NULL) { /* backward pass 1: lse and delta, no y */
                const T *dyb = tc_mat(dy, w.dy, b, h);
                float da = 0.0f, db = 0.0f;
#pragma unroll
                for (int n = 0; n < D / 8; n++) {
                    if (ta < a.T)
                        da += cu_ld(dyb, ta * w.dy.t + n * 8 + c2) * (o[i][n][0] * inva) +
                              cu_ld(dyb, ta * w.dy.t + n * 8 + c2 + 1) * (o[i][n][1] * inva);
                    if (tb < a.T)
                        db += cu_ld(dyb, tb * w.dy.t + n * 8 + c2) * (o[i][n][2] * invb) +
                              cu_ld(dyb, tb * w.dy.t + n * 8 + c2 + 1) * (o[i][n][3] * invb);
                }
                da += __shfl_xor_sync(CU_FULL_MASK, da, 1);
                da += __shfl_xor_sync(CU_FULL_MASK, da, 2);
                db += __shfl_xor_sync(CU_FULL_MASK, db, 1);
                db += __shfl_xor_sync(CU_FULL_MASK, db, 2);
                if ((lane & 3) == 0) {
                    if (ta < a.T) lse[bh * a.T + ta] = lsa, delta[bh * a.T + ta] = da;
                    if (tb < a.T) lse[bh * a.T + tb] = lsb, delta[bh * a.T + tb] = db;
                }
            }
        }
    }
}

/* The backward's two score-like products of a warp's 16 rows (from r0) against a tile of NT
 * rows: s = A1 B1^T and d = A2 B2^T, all four tiles of D columns (dq: S = Q K^T and
 * dP = dO V^T; dk, dv: S^T = K Q^T and dP^T = V dO^T). */
template <typename T, int D, int NT>
static __device__ __forceinline__ void tc_two_abt(float (*s)[4], float (*d)[4], const T *A1, const T *B1, const T *A2,
                                                  const T *B2, int r0)
{
    constexpr int LD = tc_dims<D>::LD;
#pragma unroll
    for (int j = 0; j < NT / 8; j++) {
        s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
        d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        uint32_t a1[4], a2[4];
        tc_lda<T, LD>(a1, A1, r0, kk * 16);
        tc_lda<T, LD>(a2, A2, r0, kk * 16);
#pragma unroll
        for (int jp = 0; jp < NT / 16; jp++) {
            uint32_t b1[4], b2[4];
            tc_ldb_rows<T, LD>(b1, B1, jp * 16, kk * 16);
            tc_ldb_rows<T, LD>(b2, B2, jp * 16, kk * 16);
            tc_mma(s[2 * jp], a1, b1, A1);
            tc_mma(s[2 * jp + 1], a1, b1 + 2, A1);
            tc_mma(d[2 * jp], a2, b2, A1);
            tc_mma(d[2 * jp + 1], a2, b2 + 2, A1);
        }
    }
}

/* ---- backward pass 3, recomputing: dq ------------------------------------------------------ */

template <typename T, int D>
__global__ void __launch_bounds__(TC_THREADS) tc_dq_kernel(const T *dy, const T *q, const T *k, const T *v,
                                                           const float *lse, const float *delta, T *dq, att_dims a,
                                                           att_views w)
{
    extern __shared__ __align__(128) unsigned char tc_smem[];
    typedef tc_dims<D> Dm;
    constexpr int LD = Dm::LD, KT = Dm::NB;
    T *Qs = (T *)tc_smem, *Ys = Qs + TC_BQ * LD, *KV = Ys + TC_BQ * LD;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c2 = (lane & 3) * 2;
    const int64_t qtiles = (a.T + TC_BQ - 1) / TC_BQ, group = a.H / a.Hkv;
    const float sl = a.scale * TC_LOG2E;
    for (int64_t tile = blockIdx.x; tile < a.B * a.H * qtiles; tile += gridDim.x) {
        int64_t bh, qi;
        tc_order(tile, a.B * a.H, qtiles, true, bh, qi);
        const int64_t t0 = qi * TC_BQ, b = bh / a.H, h = bh % a.H;
        const T *kb = tc_mat(k, w.k, b, h / group), *vb = tc_mat(v, w.v, b, h / group);
        a.L = att_len(a, b);
        const int64_t t_last = (t0 + TC_BQ < a.T ? t0 + TC_BQ : a.T) - 1;
        const int64_t n_max = att_visible(a, t_last), tiles = (n_max + KT - 1) / KT;
        const int64_t ta = t0 + warp * 16 + g, tb = ta + 8;
        const int64_t na = ta < a.T ? att_visible(a, ta) : 0, nb = tb < a.T ? att_visible(a, tb) : 0;
        const int64_t full = tc_warp_sees(a, t0 + warp * 16);
        const float lsa = ta < a.T ? lse[bh * a.T + ta] * TC_LOG2E : 0.0f, lsb = tb < a.T ? lse[bh * a.T + tb] * TC_LOG2E : 0.0f;
        const float dla = ta < a.T ? delta[bh * a.T + ta] : 0.0f, dlb = tb < a.T ? delta[bh * a.T + tb] : 0.0f;
        __syncthreads();
        tc_load<T, D, TC_BQ>(tc_mat(q, w.q, b, h), w.q.t, t0, a.T, Qs, w.q.vec);
        tc_load<T, D, TC_BQ>(tc_mat(dy, w.dy, b, h), w.dy.t, t0, a.T, Ys, w.dy.vec);
        if (tiles > 0) {
            tc_load<T, D, KT>(kb, w.k.t, 0, a.S, KV, w.k.vec);
            tc_load<T, D, KT>(vb, w.v.t, 0, a.S, KV + KT * LD, w.v.vec);
        }
        tc_commit();
        float acc[D / 8][4];
#pragma unroll
        for (int n = 0; n < D / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
        for (int64_t it = 0; it < tiles; it++) {
            const int64_t kt = it * KT;
            const T *Ks = KV + (it & 1) * 2 * KT * LD, *Vs = Ks + KT * LD;
            __syncthreads();
            if (it + 1 < tiles) {
                T *nk = KV + ((it + 1) & 1) * 2 * KT * LD;
                tc_load<T, D, KT>(kb, w.k.t, kt + KT, a.S, nk, w.k.vec);
                tc_load<T, D, KT>(vb, w.v.t, kt + KT, a.S, nk + KT * LD, w.v.vec);
            }
            tc_commit();
            tc_wait_prev();
            __syncthreads();
            float s[KT / 8][4], dp[KT / 8][4];
            tc_two_abt<T, D, KT>(s, dp, Qs, Ks, Ys, Vs, warp * 16); /* S = Q K^T, dP = dO V^T */
            uint32_t df[KT / 16][4]; /* dS = P (dP - delta), rounded to T */
#pragma unroll
            for (int j = 0; j < KT / 8; j++) { /* P, in s's place */
                s[j][0] = tc_exp2(fmaf(s[j][0], sl, -lsa)), s[j][1] = tc_exp2(fmaf(s[j][1], sl, -lsa));
                s[j][2] = tc_exp2(fmaf(s[j][2], sl, -lsb)), s[j][3] = tc_exp2(fmaf(s[j][3], sl, -lsb));
            }
            if (kt + KT > full) { /* some key of the tile hidden from some row: P 0 there */
#pragma unroll
                for (int j = 0; j < KT / 8; j++) {
                    const int64_t key = kt + j * 8 + c2;
                    if (key >= na) s[j][0] = 0.0f;
                    if (key + 1 >= na) s[j][1] = 0.0f;
                    if (key >= nb) s[j][2] = 0.0f;
                    if (key + 1 >= nb) s[j][3] = 0.0f;
                }
            }
#pragma unroll
            for (int j = 0; j < KT / 8; j++) {
                df[j / 2][(j & 1) * 2] = tc_pack(s[j][0] * (dp[j][0] - dla), s[j][1] * (dp[j][1] - dla), q);
                df[j / 2][(j & 1) * 2 + 1] = tc_pack(s[j][2] * (dp[j][2] - dlb), s[j][3] * (dp[j][3] - dlb), q);
            }
#pragma unroll
            for (int kk = 0; kk < KT / 16; kk++) {
#pragma unroll
                for (int np = 0; np < D / 16; np++) {
                    uint32_t kf[4];
                    tc_ldb_cols<T, LD>(kf, Ks, kk * 16, np * 16);
                    tc_mma(acc[2 * np], df[kk], kf, q); /* dQ += dS K */
                    tc_mma(acc[2 * np + 1], df[kk], kf + 2, q);
                }
            }
        }
        tc_wait_all();
        /* rows t of (b, h): D apart, or with grad_bthd H D apart in (B, T, H, D) */
        tc_store<T, D>(acc, a.scale, dq + att_dq_row(a, b, h, 0), t0 + warp * 16, a.T, a.grad_bthd ? a.H * D : D);
    }
}

/* ---- backward pass 2: dk and dv ------------------------------------------------------------ */

template <typename T, int D, bool W>
__global__ void __launch_bounds__(TC_THREADS, tc_dims<D>::dkdv_blocks) tc_dkdv_kernel(const T *dy, const T *q, const T *k, const T *v,
                                                             const float *lse, const float *delta, T *dk, T *dv,
                                                             T *ds, int64_t tp, att_dims a, att_views w)
{
    extern __shared__ __align__(128) unsigned char tc_smem[];
    typedef tc_dims<D, W> Dm;
    constexpr int LD = Dm::LD, QT = Dm::QT; /* query rows per tile */
    T *Ks = (T *)tc_smem, *Vs = Ks + TC_BQ * LD, *QY = Vs + TC_BQ * LD; /* buffer j: Q at QY + 2 j QT LD, dO after */
    float *stat = (float *)(QY + 4 * QT * LD);                          /* buffer j: lse at stat + 2 j QT, delta after */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c2 = (lane & 3) * 2;
    const int64_t stiles = (a.S + TC_BQ - 1) / TC_BQ, group = a.H / a.Hkv;
    const float sl = a.scale * TC_LOG2E;
    for (int64_t tile = blockIdx.x; tile < a.B * a.Hkv * stiles; tile += gridDim.x) {
        int64_t bk, si; /* bk = b * Hkv + kv head */
        tc_order(tile, a.B * a.Hkv, stiles, false, bk, si);
        const int64_t s0 = si * TC_BQ, b = bk / a.Hkv, hk = bk % a.Hkv;
        a.L = att_len(a, b);
        const int64_t sa = s0 + warp * 16 + g, sb = sa + 8; /* the thread's two key rows */
        /* keys past kv_len are seen by no query: their gradients stay zero */
        const int64_t t_first = s0 >= a.L ? a.T : a.causal ? (s0 - a.L + a.T > 0 ? s0 - a.L + a.T : 0) : 0;
        const int64_t qt0 = t_first / QT, nq = t_first < a.T ? (a.T + QT - 1) / QT - qt0 : 0, items = group * nq;
        __syncthreads();
        tc_load<T, D, TC_BQ>(tc_mat(k, w.k, b, hk), w.k.t, s0, a.S, Ks, w.k.vec);
        tc_load<T, D, TC_BQ>(tc_mat(v, w.v, b, hk), w.v.t, s0, a.S, Vs, w.v.vec);
        /* the loads of the item of head fh of the group, query tile ft, into buffer j */
        auto fetch = [&](int64_t fh, int64_t ft, int j) {
            const int64_t h = hk * group + fh, t0 = (qt0 + ft) * QT, bh = b * a.H + h;
            T *dst = QY + j * 2 * QT * LD;
            tc_load<T, D, QT>(tc_mat(q, w.q, b, h), w.q.t, t0, a.T, dst, w.q.vec);
            tc_load<T, D, QT>(tc_mat(dy, w.dy, b, h), w.dy.t, t0, a.T, dst + QT * LD, w.dy.vec);
            tc_fetch_stats<QT, TC_THREADS>(stat + j * 2 * QT, lse, delta, bh, t0, a.T);
        };
        if (items > 0) fetch(0, 0, 0);
        /* the item in hand (head ch of the group, query tile ct) and the next one, counted
         * rather than divided out of i */
        int64_t ch = 0, ct = 0, nh = nq == 1 ? 1 : 0, nt = nq == 1 ? 0 : 1;
        tc_commit();
        float dK[D / 8][4], dV[D / 8][4];
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            dK[n][0] = dK[n][1] = dK[n][2] = dK[n][3] = 0.0f;
            dV[n][0] = dV[n][1] = dV[n][2] = dV[n][3] = 0.0f;
        }
        for (int64_t i = 0; i < items; i++) {
            const int64_t t0 = (qt0 + ct) * QT;
            const T *Qs = QY + (i & 1) * 2 * QT * LD, *Ys = Qs + QT * LD;
            const float *ls = stat + (i & 1) * 2 * QT, *dl = ls + QT;
            __syncthreads();
            if (i + 1 < items) fetch(nh, nt, (int)((i + 1) & 1));
            tc_commit();
            tc_wait_prev();
            __syncthreads();
            float s[QT / 8][4], dp[QT / 8][4];
            tc_two_abt<T, D, QT>(s, dp, Ks, Qs, Vs, Ys, warp * 16); /* S^T = K Q^T, dP^T = V dO^T */
            uint32_t pf[QT / 16][4], df[QT / 16][4];
#pragma unroll
            for (int j = 0; j < QT / 8; j++) { /* P^T, in s's place (lse in log2 units) */
                const int r = j * 8 + c2;
                const float l0 = ls[r] * TC_LOG2E, l1 = ls[r + 1] * TC_LOG2E;
                s[j][0] = tc_exp2(fmaf(s[j][0], sl, -l0)), s[j][1] = tc_exp2(fmaf(s[j][1], sl, -l1));
                s[j][2] = tc_exp2(fmaf(s[j][2], sl, -l0)), s[j][3] = tc_exp2(fmaf(s[j][3], sl, -l1));
            }
            /* query t sees key s when s < att_visible(t) (0 for rows past T); a tile whose
             * first query sees all the warp's keys needs no mask */
            if (t0 + QT > a.T || sa - g + 15 >= tc_warp_sees(a, t0)) {
#pragma unroll
                for (int j = 0; j < QT / 8; j++) {
                    const int64_t t = t0 + j * 8 + c2;
                    const int64_t v0 = t < a.T ? att_visible(a, t) : 0, v1 = t + 1 < a.T ? att_visible(a, t + 1) : 0;
                    if (sa >= v0) s[j][0] = 0.0f;
                    if (sa >= v1) s[j][1] = 0.0f;
                    if (sb >= v0) s[j][2] = 0.0f;
                    if (sb >= v1) s[j][3] = 0.0f;
                }
            }
#pragma unroll
            for (int j = 0; j < QT / 8; j++) {
                const int r = j * 8 + c2;
                pf[j / 2][(j & 1) * 2] = tc_pack(s[j][0], s[j][1], q);
                pf[j / 2][(j & 1) * 2 + 1] = tc_pack(s[j][2], s[j][3], q);
                df[j / 2][(j & 1) * 2] = tc_pack(s[j][0] * (dp[j][0] - dl[r]), s[j][1] * (dp[j][1] - dl[r + 1]), q);
                df[j / 2][(j & 1) * 2 + 1] = tc_pack(s[j][2] * (dp[j][2] - dl[r]), s[j][3] * (dp[j][3] - dl[r + 1]), q);
            }
            if (ds != NULL) { /* dS^T as it is, for dq (tc_dq_ds_kernel): rows s of (b, h), tp apart */
                T *dr = ds + (b * a.H + hk * group + ch) * a.S * tp;
                T *dra = dr + sa * tp + t0 + c2, *drb = dr + sb * tp + t0 + c2;
                const int64_t tl = a.T - t0 - c2; /* columns j * 8 of dra and drb are queries t0 + c2 + j * 8 */
#pragma unroll
                for (int j = 0; j < QT / 8; j++) {
                    /* the query t0 + c2 + 8 j is even, and tp a multiple of 8: its pair is below tp */
                    if (j * 8 >= tl) continue;
                    if (sa < a.S) *reinterpret_cast<uint32_t *>(dra + j * 8) = df[j / 2][(j & 1) * 2];
                    if (sb < a.S) *reinterpret_cast<uint32_t *>(drb + j * 8) = df[j / 2][(j & 1) * 2 + 1];
                }
            }
#pragma unroll
            for (int kk = 0; kk < QT / 16; kk++) {
#pragma unroll
                for (int np = 0; np < D / 16; np++) {
                    uint32_t yf[4], qf[4];
                    tc_ldb_cols<T, LD>(yf, Ys, kk * 16, np * 16);
                    tc_ldb_cols<T, LD>(qf, Qs, kk * 16, np * 16);
                    tc_mma(dV[2 * np], pf[kk], yf, q); /* dV += P^T dO */
                    tc_mma(dV[2 * np + 1], pf[kk], yf + 2, q);
                    tc_mma(dK[2 * np], df[kk], qf, q); /* dK += dS^T Q */
                    tc_mma(dK[2 * np + 1], df[kk], qf + 2, q);
                }
            }
            ch = nh, ct = nt;
            if (++nt == nq) nt = 0, nh++;
        }
        tc_wait_all();
        const int64_t ld = a.grad_bthd ? a.Hkv * D : D;
        tc_store<T, D>(dK, a.scale, dk + att_dkv_row(a, b, hk, 0), s0 + warp * 16, a.S, ld);
        tc_store<T, D>(dV, 1.0f, dv + att_dkv_row(a, b, hk, 0), s0 + warp * 16, a.S, ld);
    }
}

/* ---- backward pass 3: dq from the dS that dk, dv stored ------------------------------------ */

/* u with its low half (the lower column) and high half kept or zeroed. */
static __device__ __forceinline__ uint32_t tc_keep(uint32_t u, bool lo, bool hi)
{
    return u & ((lo ? 0xffffu : 0u) | (hi ? 0xffff0000u : 0u));
}

/* dQ = scale dS K for BQ = 64 MQ query rows of a head a block: dS^T tiles (TC_DS_KT keys of
 * the block's queries, from the dk/dv pass's store, rows tp apart) and K tiles stream through
 * shared memory, two buffers each, and each warp multiplies its 16 rows, the keys in
 * ascending order as the recomputing dq kernel sums them. Elements the dk/dv pass never
 * stored are loaded but never count: a key hidden from its query is masked to zero before
 * the product, and a query row past T (up to tp) feeds only its own row of dQ, which is not
 * stored. A warp whose rows see none of a tile's keys skips its products. */
template <typename T, int D, int MQ>
__global__ void __launch_bounds__(TC_THREADS * MQ, 4 / MQ) tc_dq_ds_kernel(const T *ds, int64_t tp, const T *k, T *dq,
                                                                   att_dims a, att_views w)
{
    extern __shared__ __align__(128) unsigned char tc_smem[];
    typedef tc_dqs_dims<D, MQ> Dm;
    constexpr int LD = tc_dims<D>::LD, KT = TC_DS_KT, BQ = Dm::BQ, NT = Dm::NT, LDS = Dm::LDS, V = BQ / 8;
    T *St = (T *)tc_smem, *Kt = St + 2 * KT * LDS; /* buffer j: St + j KT LDS, Kt + j KT LD */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c2 = (lane & 3) * 2;
    const int64_t qtiles = (a.T + BQ - 1) / BQ, group = a.H / a.Hkv;
    for (int64_t tile = blockIdx.x; tile < a.B * a.H * qtiles; tile += gridDim.x) {
        int64_t bh, qi;
        tc_order(tile, a.B * a.H, qtiles, true, bh, qi);
        const int64_t t0 = qi * BQ, b = bh / a.H, h = bh % a.H;
        const T *kb = tc_mat(k, w.k, b, h / group), *db = ds + bh * a.S * tp;
        a.L = att_len(a, b);
        const int64_t t_last = (t0 + BQ < a.T ? t0 + BQ : a.T) - 1;
        const int64_t n_max = att_visible(a, t_last), tiles = (n_max + KT - 1) / KT;
        const int64_t w0 = t0 + warp * 16, ta = w0 + g, tb = ta + 8;
        const int64_t na = ta < a.T ? att_visible(a, ta) : 0, nb = tb < a.T ? att_visible(a, tb) : 0;
        const int64_t full = tc_warp_sees(a, w0);
        /* keys the warp's last row sees: tiles from there on are the warp's zeros */
        const int64_t seen = w0 < a.T ? att_visible(a, w0 + 15 < a.T ? w0 + 15 : a.T - 1) : 0;
        auto fetch = [&](int64_t it, int j) {
            const int64_t kt = it * KT;
            /* as tc_load: thread x moves chunk x % V of rows x / V + k (NT / V) */
            constexpr int step = NT / V;
            static_assert(KT * V % NT == 0 && NT % V == 0, "whole rounds of the block's threads");
            const int r0 = threadIdx.x / V, c = (threadIdx.x % V) * 8;
            const bool cin = t0 + c < tp;
            const T *src = db + (kt + r0) * tp + t0 + c;
            T *sd = St + j * KT * LDS + r0 * LDS + c;
#pragma unroll
            for (int i = 0; i < KT * V / NT; i++) {
                const bool in = cin && kt + r0 + i * step < a.S;
                tc_cp16(sd + i * step * LDS, in ? src + i * step * tp : db, in ? 16 : 0);
            }
            tc_load<T, D, KT, NT>(kb, w.k.t, kt, a.S, Kt + j * KT * LD, w.k.vec);
        };
        __syncthreads();
        if (tiles > 0) fetch(0, 0);
        tc_commit();
        float acc[D / 8][4];
#pragma unroll
        for (int n = 0; n < D / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
        for (int64_t it = 0; it < tiles; it++) {
            const int64_t kt = it * KT;
            const T *Ss = St + (it & 1) * KT * LDS, *Ks = Kt + (it & 1) * KT * LD;
            __syncthreads();
            if (it + 1 < tiles) fetch(it + 1, (int)((it + 1) & 1));
            tc_commit();
            tc_wait_prev();
            __syncthreads();
            if (kt >= seen) continue; /* the barriers above are the whole block's */
#pragma unroll
            for (int kk = 0; kk < KT / 16; kk++) {
                uint32_t af[4];
                tc_lda_t<T, LDS>(af, Ss, warp * 16, kk * 16);
                if (kt + KT > full) { /* keys hidden from some row of the warp: zeros there */
                    const int64_t s0 = kt + kk * 16 + c2, s1 = s0 + 8;
                    af[0] = tc_keep(af[0], s0 < na, s0 + 1 < na), af[1] = tc_keep(af[1], s0 < nb, s0 + 1 < nb);
                    af[2] = tc_keep(af[2], s1 < na, s1 + 1 < na), af[3] = tc_keep(af[3], s1 < nb, s1 + 1 < nb);
                }
#pragma unroll
                for (int np = 0; np < D / 16; np++) {
                    uint32_t kf[4];
                    tc_ldb_cols<T, LD>(kf, Ks, kk * 16, np * 16);
                    tc_mma(acc[2 * np], af, kf, k); /* dQ += dS K */
                    tc_mma(acc[2 * np + 1], af, kf + 2, k);
                }
            }
        }
        tc_wait_all();
        tc_store<T, D>(acc, a.scale, dq + att_dq_row(a, b, h, 0), w0, a.T, a.grad_bthd ? a.H * D : D);
    }
}

/* ---- host side ------------------------------------------------------------------------------ */

/* A block per tile, so that blocks start in tc_order's order as others finish (the kernels
 * loop over tiles only past this). */
static unsigned tc_grid(int64_t tiles)
{
    const int64_t cap = (int64_t)1 << 30;
    return (unsigned)(tiles < cap ? tiles : cap);
}

template <int D, bool W>
static size_t tc_need(int backward)
{
    typedef tc_dims<D, W> Dm;
    size_t n = Dm::fwd_smem;
    if (backward && Dm::dq_smem > n) n = Dm::dq_smem;
    if (backward && Dm::dkdv_smem > n) n = Dm::dkdv_smem;
    if (backward && tc_dqs_dims<D, TC_DQS_MQ>::smem > n) n = tc_dqs_dims<D, TC_DQS_MQ>::smem;
    return n;
}

/* The stored dS of a backward: B H S rows of T queries (rounded up to 16 bytes) of the input
 * dtype, at most CU_ATTN_DS_MAX bytes; 0 beyond (long sequences recompute dS for dq instead). */
size_t cu_attn_tc_ds_bytes(int32_t dtype, const att_dims &a)
{
    const int64_t tp = (a.T + 7) / 8 * 8;
    const double bytes = (double)a.B * (double)a.H * (double)a.S * (double)tp * (double)gdp_dtype_size(dtype);
    return bytes <= (double)CU_ATTN_DS_MAX ? (size_t)bytes : 0;
}

int cu_attn_tc_ok(const cu_backend *be, int32_t dtype, const att_dims &a, int backward, const gdp_tensor *const *in,
                  int n_in)
{
    if (!be->tc_attention || (dtype != GDP_F16 && dtype != GDP_BF16) || (a.D != 64 && a.D != 128) || a.T < 16 ||
        !(a.scale * TC_LOG2E > 0.0f)) /* the forward folds the scale into its exponentials */
        return 0;
    for (int i = 0; i < n_in; i++)
        if (in[i]->ndim != 4 || in[i]->stride[3] != 1) return 0;
    size_t need = a.D == 64 ? tc_need<64, true>(backward)
                  : be->tc_attn_wide ? tc_need<128, true>(backward)
                                     : tc_need<128, false>(backward);
    return need <= be->smem_optin;
}

template <typename T, int D, bool W>
static void tc_fwd(cudaStream_t s, const void *q, const void *k, const void *v, void *y,
                   const void *dy, float *lse, float *delta, const att_dims &a, const att_views &w, cu_bad bad)
{
    typedef tc_dims<D, W> Dm;
    int64_t tiles = a.B * a.H * ((a.T + Dm::BQ - 1) / Dm::BQ);
    if (tiles == 0) return;
    tc_fwd_kernel<T, D, W><<<tc_grid(tiles), TC_THREADS, Dm::fwd_smem, s>>>(
        (const T *)q, (const T *)k, (const T *)v, (T *)y, (const T *)dy, lse, delta, a, w, bad);
}

template <typename T, int D, bool W>
static void tc_bwd(cudaStream_t s, const void *dy, const void *q, const void *k, const void *v,
                   const float *lse, const float *delta, void *dq, void *dk, void *dv, void *ds, const att_dims &a,
                   const att_views &w, int32_t dtype, bool wg)
{
    typedef tc_dims<D, W> Dm;
    int64_t qt = a.B * a.H * ((a.T + TC_BQ - 1) / TC_BQ), kt = a.B * a.Hkv * ((a.S + TC_BQ - 1) / TC_BQ);
    const int64_t tp = (a.T + 7) / 8 * 8;
    if (ds == NULL && qt > 0) /* dq recomputes P and dP */
        tc_dq_kernel<T, D><<<tc_grid(qt), TC_THREADS, Dm::dq_smem, s>>>(
            (const T *)dy, (const T *)q, (const T *)k, (const T *)v, lse, delta, (T *)dq, a, w);
    if (wg) /* the dk/dv pass on wgmma */
        cu_attn_wg_dkdv(s, dtype, dy, q, k, v, lse, delta, dk, dv, ds, tp, a, w);
    else if (kt > 0)
        tc_dkdv_kernel<T, D, W><<<tc_grid(kt), TC_THREADS, Dm::dkdv_smem, s>>>(
            (const T *)dy, (const T *)q, (const T *)k, (const T *)v, lse, delta, (T *)dk, (T *)dv, (T *)ds, tp, a, w);
    if (ds != NULL && qt > 0) { /* dq from the dS the pass above stored */
        typedef tc_dqs_dims<D, TC_DQS_MQ> Q;
        tc_dq_ds_kernel<T, D, TC_DQS_MQ><<<tc_grid(a.B * a.H * ((a.T + Q::BQ - 1) / Q::BQ)), Q::NT, Q::smem, s>>>(
            (const T *)ds, tp, (const T *)k, (T *)dq, a, w);
    }
}

template <typename T>
static void tc_fwd_any(const cu_backend *be, cudaStream_t s, const void *q, const void *k, const void *v, void *y,
                       const void *dy, float *lse, float *delta, const att_dims &a, const att_views &w, cu_bad bad)
{
    if (a.D == 64) tc_fwd<T, 64, true>(s, q, k, v, y, dy, lse, delta, a, w, bad);
    else if (be->tc_attn_wide) tc_fwd<T, 128, true>(s, q, k, v, y, dy, lse, delta, a, w, bad);
    else tc_fwd<T, 128, false>(s, q, k, v, y, dy, lse, delta, a, w, bad);
}

void cu_attn_tc_fwd(const cu_backend *be, cudaStream_t s, int32_t dtype, const void *q, const void *k,
                    const void *v, void *y, const void *dy, float *lse, float *delta, const att_dims &a,
                    const att_views &w, cu_bad bad)
{
    if (y != NULL && dy == NULL && cu_attn_wg_ok(be, a, w, 0)) { /* the forward on wgmma */
        cu_attn_wg_fwd(s, dtype, q, k, v, y, lse, a, w, bad);
        return;
    }
    if (dtype == GDP_F16) tc_fwd_any<__half>(be, s, q, k, v, y, dy, lse, delta, a, w, bad);
    else tc_fwd_any<__nv_bfloat16>(be, s, q, k, v, y, dy, lse, delta, a, w, bad);
}

template <typename T>
static void tc_bwd_any(const cu_backend *be, cudaStream_t s, const void *dy, const void *q, const void *k,
                       const void *v, const float *lse, const float *delta, void *dq, void *dk, void *dv, void *ds,
                       const att_dims &a, const att_views &w, int32_t dtype)
{
    const bool wg = cu_attn_wg_ok(be, a, w, 1) != 0;
    if (a.D == 64) tc_bwd<T, 64, true>(s, dy, q, k, v, lse, delta, dq, dk, dv, ds, a, w, dtype, wg);
    else if (be->tc_attn_wide) tc_bwd<T, 128, true>(s, dy, q, k, v, lse, delta, dq, dk, dv, ds, a, w, dtype, wg);
    else tc_bwd<T, 128, false>(s, dy, q, k, v, lse, delta, dq, dk, dv, ds, a, w, dtype, wg);
}

void cu_attn_tc_bwd(const cu_backend *be, cudaStream_t s, int32_t dtype, const void *dy, const void *q,
                    const void *k, const void *v, const float *lse, const float *delta, void *dq, void *dk,
                    void *dv, void *ds, const att_dims &a, const att_views &w)
{
    if (dtype == GDP_F16) tc_bwd_any<__half>(be, s, dy, q, k, v, lse, delta, dq, dk, dv, ds, a, w, dtype);
    else tc_bwd_any<__nv_bfloat16>(be, s, dy, q, k, v, lse, delta, dq, dk, dv, ds, a, w, dtype);
}

/* cu_attn_tc_ok declines what was not granted */
template <typename T, int D, bool W>
static void tc_open_one(const cu_backend *be)
{
    typedef tc_dims<D, W> Dm;
    cu_smem_opt_in(be, (const void *)tc_fwd_kernel<T, D, W>, Dm::fwd_smem);
    cu_smem_opt_in(be, (const void *)tc_dq_kernel<T, D>, Dm::dq_smem);
    cu_smem_opt_in(be, (const void *)tc_dkdv_kernel<T, D, W>, Dm::dkdv_smem);
    cu_smem_opt_in(be, (const void *)tc_dq_ds_kernel<T, D, TC_DQS_MQ>, tc_dqs_dims<D, TC_DQS_MQ>::smem);
}

void cu_attention_tc_open(cu_backend *be)
{
    /* wide unless GRADUS_CUDA_ATTN_WIDE=0 asked for the narrow tiles or the device cannot grant them */
    be->tc_attn_wide = be->tc_attn_wide && tc_need<128, true>(1) <= be->smem_optin;
    tc_open_one<__half, 64, true>(be);
    tc_open_one<__nv_bfloat16, 64, true>(be);
    if (be->tc_attn_wide) {
        tc_open_one<__half, 128, true>(be);
        tc_open_one<__nv_bfloat16, 128, true>(be);
    } else {
        tc_open_one<__half, 128, false>(be);
        tc_open_one<__nv_bfloat16, 128, false>(be);
    }
}
