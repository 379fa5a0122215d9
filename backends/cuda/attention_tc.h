/* attention_tc.h — what the tensor-core attention kernels share (attention_tc.cu on
 * mma.sync, attention_wg.cu on Hopper's warpgroup instructions): the rounding of
 * probabilities, the exponential, cp.async, where a view's matrix starts and the order in
 * which blocks take their tiles. Device code only; included by those two files. */
#ifndef GD_CUDA_ATTENTION_TC_H
#define GD_CUDA_ATTENTION_TC_H

#include "attention.h"
#include "cu_vec.h"

#include <stdint.h>

#define TC_LOG2E 1.4426950408889634f
#define TC_LN2 0.6931471805599453f

static __device__ __forceinline__ uint32_t tc_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Two floats rounded to T, the first in the low half (the lower column). */
static __device__ __forceinline__ uint32_t tc_pack(float lo, float hi, const __nv_bfloat16 *)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
static __device__ __forceinline__ uint32_t tc_pack(float lo, float hi, const __half *)
{
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
/* The two floats of a tc_pack, widened back (exact): the probabilities' sums are of the
 * rounded values P V multiplies, at one conversion a pair rather than three. */
static __device__ __forceinline__ float2 tc_unpack(uint32_t u, const __nv_bfloat16 *)
{
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}
static __device__ __forceinline__ float2 tc_unpack(uint32_t u, const __half *)
{
    return __half22float2(*reinterpret_cast<__half2 *>(&u));
}

/* 2^x by the special-function unit alone, subnormal results flushed to zero (exp2f adds a
 * rescaling around it for them): 2^-inf = 0, which the masked scores rely on. The
 * probabilities are rounded to 16 bits next, so the flushed values are below anything
 * their products could tell apart. */
static __device__ __forceinline__ float tc_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

static __device__ __forceinline__ void tc_cp16(void *dst, const void *src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(tc_smem_addr(dst)), "l"(src), "r"(bytes)
                 : "memory");
}
/* One float, zero-filled when bytes is 0. */
static __device__ __forceinline__ void tc_cp4(float *dst, const float *src, int bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(tc_smem_addr(dst)), "l"(src), "r"(bytes)
                 : "memory");
}
/* The backward's row statistics of query rows [t0, t0 + R) of head bh (lse and delta, each
 * (B H, T)) into stat[0, R) and stat[R, 2R), NT threads in flight with the tiles: a plain
 * load would hold the warp until it lands, in the middle of the round it is meant to
 * overlap. Rows past T are zeros. */
template <int R, int NT>
static __device__ __forceinline__ void tc_fetch_stats(float *stat, const float *lse, const float *delta, int64_t bh,
                                                      int64_t t0, int64_t T)
{
    for (int r = threadIdx.x; r < R; r += NT) {
        const int64_t t = t0 + r;
        tc_cp4(stat + r, t < T ? lse + bh * T + t : lse, t < T ? 4 : 0);
        tc_cp4(stat + R + r, t < T ? delta + bh * T + t : delta, t < T ? 4 : 0);
    }
}
static __device__ __forceinline__ void tc_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* Waits for every group but the last one committed. */
static __device__ __forceinline__ void tc_wait_prev() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }
/* Waits for all: before a block's next tile reuses the buffers (a tile with nothing to
 * visit never waited for its first loads). */
static __device__ __forceinline__ void tc_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

/* Where matrix (b, h) of a (B, H, rows, D) view starts. */
template <typename T>
static __device__ __forceinline__ const T *tc_mat(const T *base, const att_strides &st, int64_t b, int64_t h)
{
    return base + b * st.b + h * st.h;
}

#define TC_GROUP 32 /* matrices whose tiles are handed out together */

/* Work item `item` of `mats` matrices of `tiles` row tiles each: matrix m, tile i. With a
 * causal mask a query tile's work grows with its position and a key tile's shrinks, so
 * the items go out heaviest first (`reverse`: the last tile is the heaviest) and the blocks
 * that finish last hold the lightest. Not over all matrices at once: TC_GROUP matrices at a
 * time, so that the keys and values the running blocks read stay few enough for L2. */
static __device__ __forceinline__ void tc_order(int64_t item, int64_t mats, int64_t tiles, bool reverse, int64_t &m,
                                                int64_t &i)
{
    const int64_t per = TC_GROUP * tiles, first = item / per * TC_GROUP, r = item % per;
    const int64_t in = mats - first < TC_GROUP ? mats - first : TC_GROUP;
    m = first + r % in;
    i = r / in;
    if (reverse) i = tiles - 1 - i;
}

/* Keys seen by every row of a warp's rows from row t on (its 16 or 32): t's own count, the
 * fewest, since att_visible never decreases with the row; rows past T see none. A tile of
 * keys below it needs no mask. The warp's rows past T then go unmasked too: their q and dy
 * are zeros and nothing of theirs is stored. */
static __device__ __forceinline__ int64_t tc_warp_sees(const att_dims &a, int64_t t)
{
    return t < a.T ? att_visible(a, t) : 0;
}

/* Rows g and g + 8 of a warp's 16 of out (rows ld elements apart; rows `rows` and past are
 * not written) from accumulators acc[D / 8][4] times mul. */
template <typename T, int D>
static __device__ __forceinline__ void tc_store(const float (*acc)[4], float mul, T *out, int64_t row0, int64_t rows,
                                                int64_t ld = D)
{
    const int l = threadIdx.x & 31, g = l >> 2, c = (l & 3) * 2;
    const int64_t ra = row0 + g, rb = ra + 8;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
        if (ra < rows) *reinterpret_cast<uint32_t *>(out + ra * ld + n * 8 + c) = tc_pack(acc[n][0] * mul, acc[n][1] * mul, out);
        if (rb < rows) *reinterpret_cast<uint32_t *>(out + rb * ld + n * 8 + c) = tc_pack(acc[n][2] * mul, acc[n][3] * mul, out);
    }
}

#endif
