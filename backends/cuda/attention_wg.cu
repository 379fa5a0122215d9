/* attention_wg.cu — attention's forward and the backward's dk/dv pass on Hopper's warpgroup
 * matrix instructions (wgmma.mma_async), for f16 and bf16 q, k, v with heads of 64 or 128 on
 * a device of compute capability 9.0 with code built for sm_90a. attention_tc.cu's mma.sync
 * kernels stay for everything else: other devices, rows that are not 16-byte aligned, and
 * the backward's dq pass (one product over the stored dS, bound by its L2 traffic: 99 us at
 * GPT-2's shape with 64 query rows a block, by Nsight Compute, at 86% of the L2's throughput).
 *
 * Why. mma.sync gives each warp a 16x8x16 product whose operands every thread first loads
 * from shared memory into registers (ldmatrix), and its register-bound occupancy left the
 * tensor pipe idle most cycles. wgmma gives a warpgroup (4 warps, 128 threads) a 64xNx16
 * product whose B operand (and A, for S = Q K^T) the tensor cores read from shared memory
 * themselves. At Qwen3's shape (8 x 16 heads, 8 kv heads, 1024 x 128, causal, bf16) the
 * forward went from 0.172 to 0.142 ms and the backward from 0.484 to 0.381; at GPT-2's (16 x
 * 12 heads, 1024 x 64) from 0.142 to 0.136 and from 0.471 to 0.427 (wg_nw below).
 *
 * Tried and not kept: the forward software-pipelined as FlashAttention-3 does it (the next
 * tile's S = Q K^T issued with this tile's P V, its softmax run while P V does, three stages
 * of K and V). A first form ran slower (Qwen3's shape: 0.148 against 0.141 ms): ptxas
 * serialized its products (warning C7513) for the row sums of the rounded P, read back from
 * the packed registers while a product read them. A second form summed P before rounding,
 * issued the scores of a tile past the last one rather than branch around them (a product
 * under a branch ptxas cannot prove uniform is serialized too: warning C7520), and at heads
 * of 128 took key tiles of 64 so that two tiles' P fit beside the output: ptxas compiled it
 * unserialized, and it too ran slower (GPT-2's shape 0.144 against 0.136 ms, Qwen3's 0.151
 * against 0.140). Two blocks an SM at heads of 64 already overlap one block's softmax with
 * the other's products; the extra tile of scores, the copies between the two P and the
 * spills at 255 registers cost more than the rest gave. The dk/dv pass takes the same
 * schedule at heads of 64 (below).
 *
 * The design, FlashAttention-2's with wgmma:
 *   - a block of NW warpgroups owns 64 NW query rows of one head (64 a warpgroup, 16 a
 *     warp; NW is 2 at heads of 128, 1 at heads of 64: wg_nw);
 *   - keys and values stream through shared memory in tiles of 128 rows, double-buffered
 *     with cp.async by all the block's threads (no producer warps);
 *   - per tile, S = Q K^T is D/16 wgmmas of m64n128k16 with both operands in shared memory;
 *     the online softmax runs on S in registers (the accumulator's layout is mma.sync's, a
 *     warp's 16 rows per 8-column block), P is rounded to T in registers and O += P V is 8
 *     wgmmas of m64nDk16 with P as the register A operand and V read transposed.
 * The masks, the softmax arithmetic (maximum of the raw scores, the scale inside the
 * exponential's FFMA, sums of the rounded P) and the epilogue are attention_tc.cu's forward,
 * so the results agree with it to the rounding of the products' sums.
 *
 * Shared tiles are in the 128-byte swizzled layout wgmma reads: a tile of R rows of D
 * halves is D/64 column blocks of R rows of 128 bytes, and the 16-byte chunk c of row r lies
 * at chunk c ^ (r % 8) of its row (each block 1024-byte aligned). K, read as B "K-major"
 * (its rows are the product's columns, D contiguous), and Q, A "K-major", are described
 * with rows 128 bytes apart and 8-row groups 1024 apart; a step of 16 along D moves the start
 * by 32 bytes inside the swizzle's 128. V is B "MN-major" (transposed: keys are the
 * reduction, D contiguous): 8-key groups 1024 bytes apart, column blocks R 128 apart.
 */
#include "attention_tc.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_ON 1
#endif

#define WG_BK 128   /* key rows a tile of the forward */

#define WG_STAGES 2 /* buffers of K and V in the forward */

template <int D, int NW> struct wg_dims {
    static constexpr uint32_t qbytes = NW * 64 * D * 2, kbytes = WG_BK * D * 2;
    /* Q, then the stages of K and V; 1 KiB of slack to align the base to the swizzle's 1024 */
    static constexpr size_t smem = qbytes + 2 * WG_STAGES * (size_t)kbytes + 1024;
};

#ifdef WG_ON /* the device code of sm_90a; other targets compile the kernel empty, never launched */
/* Byte offset of 16-byte chunk c (of D / 8) of row r in a swizzled tile of R rows. */
template <int R>
static __device__ __forceinline__ uint32_t wg_off(int r, int c)
{
    return (uint32_t)((c >> 3) * (R * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* The shared-memory matrix descriptor: start address, leading and stride byte offsets (all
 * in 16-byte units), 128-byte swizzle. */
static __device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) |
           ((uint64_t)1 << 62);
}

static __device__ __forceinline__ void wg_cp16(uint32_t dst, const void *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}

/* Rows [first, first + R) of a (len, D) matrix whose rows start `rs` elements apart (each
 * 16-byte aligned) into the swizzled tile at `sh`; rows past len are zeros. */
template <typename T, int D, int R, int NT>
static __device__ __forceinline__ void wg_load(const T *src, int64_t rs, int64_t first, int64_t len, uint32_t sh)
{
    constexpr int V = D / 8, step = NT / V;
    static_assert(R % step == 0, "whole rounds of the block's threads");
    const int r0 = threadIdx.x / V, c = threadIdx.x % V;
    const int64_t row0 = first + r0;
    const T *p = src + row0 * rs + c * 8;
#pragma unroll
    for (int k = 0; k < R / step; k++) {
        const bool in = row0 + k * step < len;
        wg_cp16(sh + wg_off<R>(r0 + k * step, c), in ? p + k * step * rs : src, in ? 16 : 0);
    }
}

/* ---- the warpgroup instructions ----------------------------------------------------------- */

static __device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void wg_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/* Waits for every group of products but the last one committed. */
static __device__ __forceinline__ void wg_wait_one() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
/* The accumulators are the asynchronous products' outputs: these empty statements, after the
 * wait and before the issue, keep the compiler from moving their other reads and writes
 * across. */
template <int N>
static __device__ __forceinline__ void wg_hold(float *d)
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* The register A operands are read while the product runs: held live to its wait, so that
 * the compiler gives their registers to nothing else before. */
template <int N>
static __device__ __forceinline__ void wg_hold_a(uint32_t (*a)[4])
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(a[i][0]), "+r"(a[i][1]), "+r"(a[i][2]), "+r"(a[i][3])::"memory");
}
/* Threads' writes to shared memory (cp.async) made visible to the products' reads, which
 * go through the async proxy. */
static __device__ __forceinline__ void wg_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

#define WG_D8(i)                                                                                                   \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]),   \
        "+f"(d[i + 7])
#define WG_REGS32                                                                                                  \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "   \
    "%23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WG_REGS64                                                                                                  \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "   \
    "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "    \
    "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

/* d (64x128) = (acc ? d : 0) + A B, A and B from shared memory, both K-major. */
#define WG_SS128(TY)                                                                                               \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                      \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " WG_REGS64 ", %64, %65, p, 1, 1, 0, 0;\n}\n" \
                 : WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24), WG_D8(32), WG_D8(40), WG_D8(48), WG_D8(56)            \
                 : "l"(da), "l"(db), "r"(acc))
static __device__ __forceinline__ void wg_ss128(float *d, uint64_t da, uint64_t db, int acc, const __nv_bfloat16 *)
{
    WG_SS128("bf16");
}
static __device__ __forceinline__ void wg_ss128(float *d, uint64_t da, uint64_t db, int acc, const __half *)
{
    WG_SS128("f16");
}

/* d (64x64) = (acc ? d : 0) + A B, A and B from shared memory, both K-major. */
#define WG_SS64(TY)                                                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                      \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " WG_REGS32 ", %32, %33, p, 1, 1, 0, 0;\n}\n" \
                 : WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24)                                                        \
                 : "l"(da), "l"(db), "r"(acc))
static __device__ __forceinline__ void wg_ss64(float *d, uint64_t da, uint64_t db, int acc, const __nv_bfloat16 *)
{
    WG_SS64("bf16");
}
static __device__ __forceinline__ void wg_ss64(float *d, uint64_t da, uint64_t db, int acc, const __half *)
{
    WG_SS64("f16");
}

/* d (64xN) += A B, A (64x16) from registers (mma.sync's A fragment for each warp's 16 rows),
 * B from shared memory, MN-major (transposed). */
#define WG_RS64(TY)                                                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                      \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " " WG_REGS32                             \
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                                     \
                 : WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24)                                                        \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))
#define WG_RS128(TY)                                                                                               \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                      \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " " WG_REGS64                            \
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                                     \
                 : WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24), WG_D8(32), WG_D8(40), WG_D8(48), WG_D8(56)            \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))
template <int N>
static __device__ __forceinline__ void wg_rs(float *d, const uint32_t *a, uint64_t db, const __nv_bfloat16 *)
{
    if constexpr (N == 64) WG_RS64("bf16");
    else WG_RS128("bf16");
}
template <int N>
static __device__ __forceinline__ void wg_rs(float *d, const uint32_t *a, uint64_t db, const __half *)
{
    if constexpr (N == 64) WG_RS64("f16");
    else WG_RS128("f16");
}
#endif

/* ---- the kernel ------------------------------------------------------------------------------ */

template <typename T, int D, int NW>
__global__ void __launch_bounds__(NW * 128, NW == 1 ? 2 : 1)
    wg_fwd_kernel(const T *q, const T *k, const T *v, T *y, float *lse, att_dims a, att_views w, cu_bad bad)
{
#ifdef WG_ON
    extern __shared__ __align__(1024) unsigned char wg_smem[];
    typedef wg_dims<D, NW> Dm;
    constexpr int NT = NW * 128, BQ = NW * 64; /* threads; query rows a block */
    att_check_len(a, bad);
    /* stage j (of WG_STAGES): K at KV + 2 j kbytes, V after it */
    const uint32_t Qs = (tc_smem_addr(wg_smem) + 1023) & ~1023u, KV = Qs + Dm::qbytes;
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2,
              c2 = (lane & 3) * 2;
    const int64_t qtiles = (a.T + BQ - 1) / BQ, group = a.H / a.Hkv;
    const float sl = a.scale * TC_LOG2E; /* scores in log2 units */
    for (int64_t tile = blockIdx.x; tile < a.B * a.H * qtiles; tile += gridDim.x) {
        int64_t bh, qi;
        tc_order(tile, a.B * a.H, qtiles, true, bh, qi);
        const int64_t t0 = qi * BQ, b = bh / a.H, h = bh % a.H, w0 = t0 + wg * 64 + warp * 16;
        const T *kb = tc_mat(k, w.k, b, h / group), *vb = tc_mat(v, w.v, b, h / group);
        a.L = att_len(a, b);
        const int64_t t_last = (t0 + BQ < a.T ? t0 + BQ : a.T) - 1;
        const int64_t n_max = att_visible(a, t_last), tiles = (n_max + WG_BK - 1) / WG_BK;
        const int64_t ra = w0 + g, rb = ra + 8; /* the thread's two rows */
        const int64_t seen_a = ra < a.T ? att_visible(a, ra) : 0, seen_b = rb < a.T ? att_visible(a, rb) : 0;
        const int64_t full = tc_warp_sees(a, w0);
        auto stage = [&](int64_t j) { return KV + (uint32_t)(j % WG_STAGES) * 2 * Dm::kbytes; };
        auto fetch = [&](int64_t j) {
            wg_load<T, D, WG_BK, NT>(kb, w.k.t, j * WG_BK, a.S, stage(j));
            wg_load<T, D, WG_BK, NT>(vb, w.v.t, j * WG_BK, a.S, stage(j) + Dm::kbytes);
        };
        /* S = Q K^T for tile j, issued: the warpgroup's 64 rows of Q, 128 keys, over D in steps of 16 */
        float o[D / 2], s[64], m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
        auto scores = [&](int64_t j) {
            const uint32_t Ks = stage(j);
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                const uint32_t in = (uint32_t)(kk & 3) * 32; /* the step inside the swizzle's 128 bytes */
                const uint64_t da = wg_desc(Qs + (uint32_t)(kk >> 2) * BQ * 128 + (uint32_t)wg * 64 * 128 + in, 16, 1024);
                const uint64_t db = wg_desc(Ks + (uint32_t)(kk >> 2) * WG_BK * 128 + in, 16, 1024);
                wg_ss128(s, da, db, kk > 0, q);
            }
        };
        /* The online softmax of tile j's scores (in s): P, rounded, into p; the factor the
         * output so far is to be scaled by; m and l updated as attention_tc.cu's forward. */
        auto softmax = [&](int64_t j, uint32_t (*p)[4], float &alpha_a, float &alpha_b) {
            const int64_t kt = j * WG_BK;
            /* s[4 i + e]: rows ra (e < 2) and rb, keys kt + 8 i + c2 + (e & 1) */
            if (kt + WG_BK > full) {
#pragma unroll
                for (int i = 0; i < WG_BK / 8; i++) {
                    const int64_t key = kt + i * 8 + c2;
                    if (key >= seen_a) s[4 * i] = -INFINITY;
                    if (key + 1 >= seen_a) s[4 * i + 1] = -INFINITY;
                    if (key >= seen_b) s[4 * i + 2] = -INFINITY;
                    if (key + 1 >= seen_b) s[4 * i + 3] = -INFINITY;
                }
            }
            float xa = -INFINITY, xb = -INFINITY;
#pragma unroll
            for (int i = 0; i < WG_BK / 8; i++) {
                xa = fmaxf(xa, fmaxf(s[4 * i], s[4 * i + 1]));
                xb = fmaxf(xb, fmaxf(s[4 * i + 2], s[4 * i + 3]));
            }
            xa = fmaxf(xa, __shfl_xor_sync(CU_FULL_MASK, xa, 1));
            xa = fmaxf(xa, __shfl_xor_sync(CU_FULL_MASK, xa, 2));
            xb = fmaxf(xb, __shfl_xor_sync(CU_FULL_MASK, xb, 1));
            xb = fmaxf(xb, __shfl_xor_sync(CU_FULL_MASK, xb, 2));
            /* the maximum of the raw scores, scaled (sl > 0) */
            const float mna = fmaxf(m_a, xa * sl), mnb = fmaxf(m_b, xb * sl);
            alpha_a = mna == -INFINITY ? 1.0f : tc_exp2(m_a - mna);
            alpha_b = mnb == -INFINITY ? 1.0f : tc_exp2(m_b - mnb);
            m_a = mna, m_b = mnb;
            const float sub_a = mna == -INFINITY ? 0.0f : mna, sub_b = mnb == -INFINITY ? 0.0f : mnb;
            float sa = 0.0f, sb = 0.0f;
#pragma unroll
            for (int i = 0; i < WG_BK / 8; i++) {
                const uint32_t ua =
                    tc_pack(tc_exp2(fmaf(s[4 * i], sl, -sub_a)), tc_exp2(fmaf(s[4 * i + 1], sl, -sub_a)), q);
                const uint32_t ub =
                    tc_pack(tc_exp2(fmaf(s[4 * i + 2], sl, -sub_b)), tc_exp2(fmaf(s[4 * i + 3], sl, -sub_b)), q);
                const float2 pa = tc_unpack(ua, q), pb = tc_unpack(ub, q);
                sa += pa.x + pa.y;
                sb += pb.x + pb.y;
                p[i / 2][(i & 1) * 2] = ua;
                p[i / 2][(i & 1) * 2 + 1] = ub;
            }
            sa += __shfl_xor_sync(CU_FULL_MASK, sa, 1);
            sa += __shfl_xor_sync(CU_FULL_MASK, sa, 2);
            sb += __shfl_xor_sync(CU_FULL_MASK, sb, 1);
            sb += __shfl_xor_sync(CU_FULL_MASK, sb, 2);
            l_a = l_a * alpha_a + sa;
            l_b = l_b * alpha_b + sb;
        };
        /* O += P V for tile j (its P in pf), issued */
        uint32_t pf[WG_BK / 16][4];
        auto values = [&](int64_t j) {
            const uint32_t Vs = stage(j) + Dm::kbytes;
#pragma unroll
            for (int kk = 0; kk < WG_BK / 16; kk++)
                wg_rs<D>(o, pf[kk], wg_desc(Vs + (uint32_t)kk * 16 * 128, WG_BK * 128, 1024), q);
        };
        __syncthreads(); /* the previous tile's readers are done */
        wg_load<T, D, BQ, NT>(tc_mat(q, w.q, b, h), w.q.t, t0, a.T, Qs);
        if (tiles > 0) fetch(0);
        tc_commit();
#pragma unroll
        for (int i = 0; i < D / 2; i++) o[i] = 0.0f;
#pragma unroll
        for (int i = 0; i < 64; i++) s[i] = 0.0f;
        for (int64_t j = 0; j < tiles; j++) {
            __syncthreads(); /* the stage about to be refilled was read in the last round */
            if (j + 1 < tiles) fetch(j + 1);
            tc_commit();
            tc_wait_prev();
            wg_proxy_fence();
            __syncthreads();
            wg_hold<64>(s);
            wg_fence();
            scores(j);
            wg_commit();
            wg_wait_all();
            wg_hold<64>(s);
            float alpha_a, alpha_b;
            softmax(j, pf, alpha_a, alpha_b);
#pragma unroll
            for (int n = 0; n < D / 8; n++)
                o[4 * n] *= alpha_a, o[4 * n + 1] *= alpha_a, o[4 * n + 2] *= alpha_b, o[4 * n + 3] *= alpha_b;
            wg_hold<D / 2>(o);
            wg_fence();
            values(j);
            wg_commit();
            wg_wait_all();
            wg_hold<D / 2>(o);
            wg_hold_a<WG_BK / 16>(pf);
        }
        tc_wait_all();
        const float inva = l_a > 0.0f ? 1.0f / l_a : 0.0f, invb = l_b > 0.0f ? 1.0f / l_b : 0.0f; /* no key: zeros */
        if (lse != NULL && (lane & 3) == 0) { /* natural units: m and l are of scores times log2 e */
            if (ra < a.T) lse[bh * a.T + ra] = l_a > 0.0f ? (m_a + log2f(l_a)) * TC_LN2 : 0.0f;
            if (rb < a.T) lse[bh * a.T + rb] = l_b > 0.0f ? (m_b + log2f(l_b)) * TC_LN2 : 0.0f;
        }
        T *yb = y + att_y_row(a, b, h, 0);
        const int64_t ld = a.y_bthd ? a.H * D : D;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            if (ra < a.T)
                *reinterpret_cast<uint32_t *>(yb + ra * ld + n * 8 + c2) = tc_pack(o[4 * n] * inva, o[4 * n + 1] * inva, y);
            if (rb < a.T)
                *reinterpret_cast<uint32_t *>(yb + rb * ld + n * 8 + c2) =
                    tc_pack(o[4 * n + 2] * invb, o[4 * n + 3] * invb, y);
        }
    }
#else
    (void)q, (void)k, (void)v, (void)y, (void)lse, (void)a, (void)w, (void)bad;
#endif
}

/* ---- backward: dk and dv ------------------------------------------------------------------- */

#define WG_QT 64 /* query rows a tile of the dk/dv pass */

#define WG_DS_LDW (WG_QT / 2 + 4) /* words between a staged dS^T row's starts: 16 bytes of padding */

template <int D, int NW> struct wg_bwd_dims {
    /* Pipelined at heads of 64 (below); at 128 a thread's dK and dV take 128 registers, and
     * two items' P^T and dS^T do not fit beside them. */
    static constexpr bool pipe = D == 64;
    static constexpr int stages = pipe ? 3 : 2; /* buffers of Q, dO, lse and delta */
    static constexpr uint32_t kbytes = NW * 64 * D * 2, qbytes = WG_QT * D * 2;
    /* each warp's 16 rows of dS^T on their way out */
    static constexpr size_t dsbytes = (size_t)NW * 4 * 16 * WG_DS_LDW * 4;
    /* K and V (64 NW rows), the buffers of Q and dO (64 rows), then of lse and delta, the
     * staged dS^T; 1 KiB of slack for the alignment */
    static constexpr size_t smem =
        2 * (size_t)kbytes + 2 * stages * (size_t)qbytes + 2 * stages * WG_QT * sizeof(float) + dsbytes + 1024;
};

/* attention_tc.cu's tc_dkdv_kernel on wgmma: a block of NW warpgroups owns 64 NW key rows of
 * one kv head (64 a warpgroup) and walks the query tiles of every query head of its group
 * (its items). Per item and warpgroup: S^T = K Q^T and dP^T = V dO^T (m64n64, K and V the A
 * operands, Q and dO the B, all from shared memory), P^T and dS^T in registers as
 * tc_dkdv_kernel makes them (and dS^T stored for dq), then dV += P^T dO and dK += dS^T Q
 * (m64nD, P^T and dS^T the register A operands, dO and Q read transposed). At heads of 64 the
 * items are pipelined: the next item's S^T and dP^T are issued before this item's dV and dK
 * products, and its P^T and dS^T are made while those run, from three buffers of Q and dO;
 * at 128, dK and dV alone take half a thread's registers, and the items go one after another
 * from two. Measured only together with the staged stores of dS^T (store_ds): the backward at
 * GPT-2's shape went from 0.391 to 0.366 ms with both, Qwen3's (heads of 128, the stores alone)
 * from 0.353 to 0.335; what each part gives at heads of 64 is still to be measured (pipe). */
template <typename T, int D, int NW>
__global__ void __launch_bounds__(NW * 128, NW == 1 ? 2 : 1)
    wg_dkdv_kernel(const T *dy, const T *q, const T *k, const T *v, const float *lse, const float *delta, T *dk, T *dv,
                   T *ds, int64_t tp, att_dims a, att_views w)
{
#ifdef WG_ON
    extern __shared__ __align__(1024) unsigned char wg_smem[];
    typedef wg_bwd_dims<D, NW> Dm;
    constexpr int NT = NW * 128, BS = NW * 64; /* threads; key rows a block */
    const uint32_t Ks = (tc_smem_addr(wg_smem) + 1023) & ~1023u, Vs = Ks + Dm::kbytes, QY = Vs + Dm::kbytes;
    /* buffer j: Q at QY + 2 j qbytes, dO after; lse and delta at stat + 2 j WG_QT */
    float *stat = (float *)(wg_smem + (QY + 2 * Dm::stages * Dm::qbytes - tc_smem_addr(wg_smem)));
    /* this warp's staging rows of dS^T */
    uint32_t *dsw = (uint32_t *)(stat + 2 * Dm::stages * WG_QT) + ((threadIdx.x >> 5) * 16 * WG_DS_LDW);
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2,
              c2 = (lane & 3) * 2;
    const int64_t stiles = (a.S + BS - 1) / BS, group = a.H / a.Hkv;
    const float sl = a.scale * TC_LOG2E;
    for (int64_t tile = blockIdx.x; tile < a.B * a.Hkv * stiles; tile += gridDim.x) {
        int64_t bk, si; /* bk = b * Hkv + kv head */
        tc_order(tile, a.B * a.Hkv, stiles, false, bk, si);
        const int64_t s0 = si * BS, b = bk / a.Hkv, hk = bk % a.Hkv;
        a.L = att_len(a, b);
        const int64_t w0 = s0 + wg * 64 + warp * 16, sa = w0 + g, sb = sa + 8; /* the thread's two key rows */
        /* keys past kv_len are seen by no query: their gradients stay zero */
        const int64_t t_first = s0 >= a.L ? a.T : a.causal ? (s0 - a.L + a.T > 0 ? s0 - a.L + a.T : 0) : 0;
        const int64_t qt0 = t_first / WG_QT, nq = t_first < a.T ? (a.T + WG_QT - 1) / WG_QT - qt0 : 0,
                      items = group * nq;
        __syncthreads();
        wg_load<T, D, BS, NT>(tc_mat(k, w.k, b, hk), w.k.t, s0, a.S, Ks);
        wg_load<T, D, BS, NT>(tc_mat(v, w.v, b, hk), w.v.t, s0, a.S, Vs);
        auto fetch = [&](int64_t fh, int64_t ft, int j) {
            const int64_t h = hk * group + fh, t0 = (qt0 + ft) * WG_QT, bh = b * a.H + h;
            const uint32_t dst = QY + (uint32_t)j * 2 * Dm::qbytes;
            wg_load<T, D, WG_QT, NT>(tc_mat(q, w.q, b, h), w.q.t, t0, a.T, dst);
            wg_load<T, D, WG_QT, NT>(tc_mat(dy, w.dy, b, h), w.dy.t, t0, a.T, dst + Dm::qbytes);
            tc_fetch_stats<WG_QT, NT>(stat + j * 2 * WG_QT, lse, delta, bh, t0, a.T);
        };
        float dK[D / 2], dV[D / 2], s[32], dp[32];
#pragma unroll
        for (int n = 0; n < D / 2; n++) dK[n] = dV[n] = 0.0f;
#pragma unroll
        for (int n = 0; n < 32; n++) s[n] = dp[n] = 0.0f;
        /* item i: query tile i % nq of head i / nq of the group, in buffer i % stages */
        auto qbuf = [&](int64_t i) { return QY + (uint32_t)(i % Dm::stages) * 2 * Dm::qbytes; };
        auto fetch_item = [&](int64_t i) { fetch(i / nq, i % nq, (int)(i % Dm::stages)); };
        /* S^T = K Q^T, dP^T = V dO^T of item i, issued: the warpgroup's 64 keys against the
         * tile's 64 queries */
        auto scores = [&](int64_t i) {
            const uint32_t Qs = qbuf(i), Ys = Qs + Dm::qbytes;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                const uint32_t in = (uint32_t)(kk & 3) * 32, ca = (uint32_t)(kk >> 2) * BS * 128 + wg * 64 * 128 + in,
                               cb = (uint32_t)(kk >> 2) * WG_QT * 128 + in;
                wg_ss64(s, wg_desc(Ks + ca, 16, 1024), wg_desc(Qs + cb, 16, 1024), kk > 0, q);
                wg_ss64(dp, wg_desc(Vs + ca, 16, 1024), wg_desc(Ys + cb, 16, 1024), kk > 0, q);
            }
        };
        /* P^T and dS^T of item i from s and dp, rounded into pf and df */
        auto probs = [&](int64_t i, uint32_t (*pf)[4], uint32_t (*df)[4]) {
            const int64_t t0 = (qt0 + i % nq) * WG_QT;
            const float *ls = stat + (i % Dm::stages) * 2 * WG_QT, *dl = ls + WG_QT;
            /* s[4 j + e]: key rows sa (e < 2) and sb, queries t0 + 8 j + c2 + (e & 1) */
#pragma unroll
            for (int j = 0; j < WG_QT / 8; j++) { /* P^T, in s's place (lse in log2 units) */
                const int r = j * 8 + c2;
                const float l0 = ls[r] * TC_LOG2E, l1 = ls[r + 1] * TC_LOG2E;
                s[4 * j] = tc_exp2(fmaf(s[4 * j], sl, -l0)), s[4 * j + 1] = tc_exp2(fmaf(s[4 * j + 1], sl, -l1));
                s[4 * j + 2] = tc_exp2(fmaf(s[4 * j + 2], sl, -l0)), s[4 * j + 3] = tc_exp2(fmaf(s[4 * j + 3], sl, -l1));
            }
            if (t0 + WG_QT > a.T || sa - g + 15 >= tc_warp_sees(a, t0)) {
#pragma unroll
                for (int j = 0; j < WG_QT / 8; j++) {
                    const int64_t t = t0 + j * 8 + c2;
                    const int64_t v0 = t < a.T ? att_visible(a, t) : 0, v1 = t + 1 < a.T ? att_visible(a, t + 1) : 0;
                    if (sa >= v0) s[4 * j] = 0.0f;
                    if (sa >= v1) s[4 * j + 1] = 0.0f;
                    if (sb >= v0) s[4 * j + 2] = 0.0f;
                    if (sb >= v1) s[4 * j + 3] = 0.0f;
                }
            }
#pragma unroll
            for (int j = 0; j < WG_QT / 8; j++) {
                const int r = j * 8 + c2;
                pf[j / 2][(j & 1) * 2] = tc_pack(s[4 * j], s[4 * j + 1], q);
                pf[j / 2][(j & 1) * 2 + 1] = tc_pack(s[4 * j + 2], s[4 * j + 3], q);
                df[j / 2][(j & 1) * 2] = tc_pack(s[4 * j] * (dp[4 * j] - dl[r]), s[4 * j + 1] * (dp[4 * j + 1] - dl[r + 1]), q);
                df[j / 2][(j & 1) * 2 + 1] =
                    tc_pack(s[4 * j + 2] * (dp[4 * j + 2] - dl[r]), s[4 * j + 3] * (dp[4 * j + 3] - dl[r + 1]), q);
            }
        };
        /* dV += P^T dO, dK += dS^T Q over item i's queries in steps of 16, issued */
        auto grads = [&](int64_t i, uint32_t (*pf)[4], uint32_t (*df)[4]) {
            const uint32_t Qs = qbuf(i), Ys = Qs + Dm::qbytes;
#pragma unroll
            for (int kk = 0; kk < WG_QT / 16; kk++) {
                wg_rs<D>(dV, pf[kk], wg_desc(Ys + (uint32_t)kk * 16 * 128, WG_QT * 128, 1024), q);
                wg_rs<D>(dK, df[kk], wg_desc(Qs + (uint32_t)kk * 16 * 128, WG_QT * 128, 1024), q);
            }
        };
        /* dS^T of item i as it is, for dq (tc_dq_ds_kernel): rows s of (b, h), tp apart.
         * Through shared memory, so that each row's 128 bytes leave in whole 16-byte pieces,
         * eight lanes a row: stored straight from the fragments, a lane's 4 bytes a row an
         * instruction made every L2 sector two partial writes. The staging rows are 16 bytes
         * longer than the data: the fragments' writes (8 rows by 4 lanes) then fall in 32
         * different banks. */
        auto store_ds = [&](int64_t i, uint32_t (*df)[4]) {
            const int64_t t0 = (qt0 + i % nq) * WG_QT, h = hk * group + i / nq;
            const int qd = lane & 3;
#pragma unroll
            for (int j = 0; j < WG_QT / 8; j++) {
                dsw[g * WG_DS_LDW + j * 4 + qd] = df[j / 2][(j & 1) * 2];
                dsw[(g + 8) * WG_DS_LDW + j * 4 + qd] = df[j / 2][(j & 1) * 2 + 1];
            }
            __syncwarp();
            /* rows 4 r + lane / 8, 16-byte piece lane % 8 (tp >= t + 8 wherever t < T) */
            const int64_t srow = w0 + (lane >> 3), t = t0 + (lane & 7) * 8;
            T *dp0 = ds + ((b * a.H + h) * a.S + srow) * tp + t;
            const uint32_t *sp = dsw + (lane >> 3) * WG_DS_LDW + (lane & 7) * 4;
#pragma unroll
            for (int r = 0; r < 4; r++)
                if (srow + r * 4 < a.S && t < a.T)
                    *reinterpret_cast<uint4 *>(dp0 + r * 4 * tp) = *reinterpret_cast<const uint4 *>(sp + r * 4 * WG_DS_LDW);
            __syncwarp(); /* the next item's fragments overwrite the rows */
        };
        uint32_t pf[WG_QT / 16][4], df[WG_QT / 16][4];
        if (items > 0) fetch_item(0);
        tc_commit();
        if constexpr (!Dm::pipe) {
            /* one item after another */
            for (int64_t i = 0; i < items; i++) {
                __syncthreads();
                if (i + 1 < items) fetch_item(i + 1);
                tc_commit();
                tc_wait_prev();
                wg_proxy_fence();
                __syncthreads();
                wg_hold<32>(s);
                wg_hold<32>(dp);
                wg_fence();
                scores(i);
                wg_commit();
                wg_wait_all();
                wg_hold<32>(s);
                wg_hold<32>(dp);
                probs(i, pf, df);
                wg_hold<D / 2>(dV);
                wg_hold<D / 2>(dK);
                wg_fence();
                grads(i, pf, df);
                wg_commit();
                if (ds != NULL) store_ds(i, df);
                wg_wait_all();
                wg_hold<D / 2>(dV);
                wg_hold<D / 2>(dK);
                wg_hold_a<WG_QT / 16>(pf);
                wg_hold_a<WG_QT / 16>(df);
            }
        } else {
            /* item i + 1's S^T and dP^T issued before item i's gradient products, and its P^T
             * and dS^T made while the tensor cores do those; buffers refilled two items ahead.
             * The last item issues the scores of an item past the end too (of a buffer that
             * holds an earlier item) and ignores them: products under a branch ptxas cannot
             * prove uniform are serialized (its warning C7520). */
            uint32_t pg[WG_QT / 16][4], dg[WG_QT / 16][4];
            if (items > 1) fetch_item(1);
            tc_commit();
            tc_wait_prev(); /* K, V and item 0 */
            wg_proxy_fence();
            __syncthreads();
            wg_hold<32>(s);
            wg_hold<32>(dp);
            wg_fence();
            scores(0);
            wg_commit();
            wg_wait_all();
            wg_hold<32>(s);
            wg_hold<32>(dp);
            if (items > 0) probs(0, pf, df);
            for (int64_t i = 0; i < items; i++) {
                tc_wait_all(); /* item i + 1, asked for an item ago */
                wg_proxy_fence();
                __syncthreads(); /* ... landed for every thread, and item i - 1's buffer is read */
                if (i + 2 < items) fetch_item(i + 2);
                tc_commit();
                wg_hold<32>(s);
                wg_hold<32>(dp);
                wg_hold<D / 2>(dV);
                wg_hold<D / 2>(dK);
                wg_fence();
                scores(i + 1);
                wg_commit();
                grads(i, pf, df);
                wg_commit();
                if (ds != NULL) store_ds(i, df);
                wg_wait_one(); /* the scores, committed first */
                wg_hold<32>(s);
                wg_hold<32>(dp);
                if (i + 1 < items) probs(i + 1, pg, dg);
                wg_wait_all();
                wg_hold<D / 2>(dV);
                wg_hold<D / 2>(dK);
                wg_hold_a<WG_QT / 16>(pf);
                wg_hold_a<WG_QT / 16>(df);
#pragma unroll
                for (int n = 0; n < WG_QT / 16; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) pf[n][e] = pg[n][e], df[n][e] = dg[n][e];
            }
        }
        tc_wait_all();
        const int64_t ld = a.grad_bthd ? a.Hkv * D : D;
        tc_store<T, D>(reinterpret_cast<const float (*)[4]>(dK), a.scale, dk + att_dkv_row(a, b, hk, 0), w0, a.S, ld);
        tc_store<T, D>(reinterpret_cast<const float (*)[4]>(dV), 1.0f, dv + att_dkv_row(a, b, hk, 0), w0, a.S, ld);
    }
#else
    (void)dy, (void)q, (void)k, (void)v, (void)lse, (void)delta, (void)dk, (void)dv, (void)ds, (void)tp, (void)a,
        (void)w;
#endif
}

/* ---- host side ------------------------------------------------------------------------------ */

/* Warpgroups a block. The forward at heads of 128 takes two (a block of 128 query rows,
 * 200 registers a thread, 161 KiB of shared memory: one block an SM); at heads of 64 one
 * (64 query rows, two blocks an SM). The dk/dv pass takes one (64 key rows, two blocks an
 * SM) at both sizes. Measured at GPT-2's and Qwen3's shapes (bf16, causal, ms):
 *   heads of 64,  forward: 0.150 with two, 0.136 with one (mma.sync: 0.142);
 *   heads of 64,  dk/dv + dq: 0.479 with two, 0.427 with one (mma.sync: 0.471);
 *   heads of 128, forward: 0.142 with two, 0.211 with one (mma.sync: 0.172);
 *   heads of 128, dk/dv + dq: 0.394 with two, 0.381 with one (mma.sync: 0.484). */
template <int D> struct wg_nw {
    static constexpr int fwd = D == 128 ? 2 : 1, dkdv = 1;
};

int cu_attn_wg_ok(const cu_backend *be, const att_dims &a, const att_views &w, int backward)
{
    return be->wgmma && (a.D == 64 || a.D == 128) && w.q.vec && w.k.vec && w.v.vec && (!backward || w.dy.vec) &&
           wg_dims<128, wg_nw<128>::fwd>::smem <= be->smem_optin &&
           wg_bwd_dims<128, wg_nw<128>::dkdv>::smem <= be->smem_optin;
}

template <typename T, int D>
static void wg_fwd(cudaStream_t s, const void *q, const void *k, const void *v, void *y, float *lse,
                   const att_dims &a, const att_views &w, cu_bad bad)
{
    constexpr int NW = wg_nw<D>::fwd;
    const int64_t tiles = a.B * a.H * ((a.T + NW * 64 - 1) / (NW * 64));
    if (tiles == 0) return;
    const unsigned grid = (unsigned)(tiles < ((int64_t)1 << 30) ? tiles : ((int64_t)1 << 30));
    wg_fwd_kernel<T, D, NW><<<grid, NW * 128, wg_dims<D, NW>::smem, s>>>((const T *)q, (const T *)k, (const T *)v,
                                                                          (T *)y, lse, a, w, bad);
}

void cu_attn_wg_fwd(cudaStream_t s, int32_t dtype, const void *q, const void *k, const void *v, void *y, float *lse,
                    const att_dims &a, const att_views &w, cu_bad bad)
{
    if (dtype == GDP_F16) {
        if (a.D == 64) wg_fwd<__half, 64>(s, q, k, v, y, lse, a, w, bad);
        else wg_fwd<__half, 128>(s, q, k, v, y, lse, a, w, bad);
    } else {
        if (a.D == 64) wg_fwd<__nv_bfloat16, 64>(s, q, k, v, y, lse, a, w, bad);
        else wg_fwd<__nv_bfloat16, 128>(s, q, k, v, y, lse, a, w, bad);
    }
}

template <typename T, int D>
static void wg_dkdv(cudaStream_t s, const void *dy, const void *q, const void *k, const void *v, const float *lse,
                    const float *delta, void *dk, void *dv, void *ds, int64_t tp, const att_dims &a, const att_views &w)
{
    constexpr int NW = wg_nw<D>::dkdv;
    const int64_t tiles = a.B * a.Hkv * ((a.S + NW * 64 - 1) / (NW * 64));
    if (tiles == 0) return;
    const unsigned grid = (unsigned)(tiles < ((int64_t)1 << 30) ? tiles : ((int64_t)1 << 30));
    wg_dkdv_kernel<T, D, NW><<<grid, NW * 128, wg_bwd_dims<D, NW>::smem, s>>>(
        (const T *)dy, (const T *)q, (const T *)k, (const T *)v, lse, delta, (T *)dk, (T *)dv, (T *)ds, tp, a, w);
}

void cu_attn_wg_dkdv(cudaStream_t s, int32_t dtype, const void *dy, const void *q, const void *k, const void *v,
                     const float *lse, const float *delta, void *dk, void *dv, void *ds, int64_t tp, const att_dims &a,
                     const att_views &w)
{
    if (dtype == GDP_F16) {
        if (a.D == 64) wg_dkdv<__half, 64>(s, dy, q, k, v, lse, delta, dk, dv, ds, tp, a, w);
        else wg_dkdv<__half, 128>(s, dy, q, k, v, lse, delta, dk, dv, ds, tp, a, w);
    } else {
        if (a.D == 64) wg_dkdv<__nv_bfloat16, 64>(s, dy, q, k, v, lse, delta, dk, dv, ds, tp, a, w);
        else wg_dkdv<__nv_bfloat16, 128>(s, dy, q, k, v, lse, delta, dk, dv, ds, tp, a, w);
    }
}

template <typename T, int D>
static void wg_open_one(const cu_backend *be)
{
    cu_smem_opt_in(be, (const void *)wg_fwd_kernel<T, D, wg_nw<D>::fwd>, wg_dims<D, wg_nw<D>::fwd>::smem);
    cu_smem_opt_in(be, (const void *)wg_dkdv_kernel<T, D, wg_nw<D>::dkdv>, wg_bwd_dims<D, wg_nw<D>::dkdv>::smem);
}

void cu_attention_wg_open(cu_backend *be)
{
    /* cu_attn_wg_ok declines what was not granted */
    if (!be->wgmma || wg_dims<128, wg_nw<128>::fwd>::smem > be->smem_optin ||
        wg_bwd_dims<128, wg_nw<128>::dkdv>::smem > be->smem_optin)
        return;
    wg_open_one<__half, 64>(be);
    wg_open_one<__half, 128>(be);
    wg_open_one<__nv_bfloat16, 64>(be);
    wg_open_one<__nv_bfloat16, 128>(be);
}
