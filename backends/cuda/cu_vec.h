/* cu_vec.h — 16-byte vector access to float tensors and fixed-order warp and block
 * reductions, shared by the memory-bound kernels.
 *
 * Why 16 bytes: an H200 needs a few MiB of loads in flight to reach its bandwidth; one
 * 4-byte load per thread leaves it at about half. A vector holds 4 f32 or 8 f16/bf16, is
 * read as one uint4 and widened to float element by element, so every dtype has the same
 * code path. Callers check alignment (cu_aligned16) and keep vector starts at multiples of
 * cu_vec<T>::N elements.
 *
 * Reductions combine in a fixed order (a shuffle tree, then warp results in warp order),
 * so a result depends only on the launch shape, never on timing: two runs are bitwise equal.
 */
#ifndef GRADUS_CUDA_VEC_H
#define GRADUS_CUDA_VEC_H

#include "cuda_internal.h"

#include <math.h>
#include <stdint.h>

#define CU_FULL_MASK 0xffffffffu

static inline int cu_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

#if defined(__CUDACC__)
template <typename T> struct cu_vec {
    static constexpr int N = 16 / (int)sizeof(T);
};

/* f[0..N) = p[i..i+N), widened to float; p + i must be 16-byte aligned. */
template <typename T> static __device__ __forceinline__ void cu_ld16(const T *p, int64_t i, float *f)
{
    uint4 u = *reinterpret_cast<const uint4 *>(p + i);
    const T *e = reinterpret_cast<const T *>(&u);
#pragma unroll
    for (int k = 0; k < cu_vec<T>::N; k++) f[k] = cu_ld(e, k);
}

/* p[i..i+N) = v[0..N), each rounded as the reference rounds a double (cu_std). */
template <typename T> static __device__ __forceinline__ void cu_std16(T *p, int64_t i, const double *v)
{
    uint4 u;
    T *e = reinterpret_cast<T *>(&u);
#pragma unroll
    for (int k = 0; k < cu_vec<T>::N; k++) cu_std(e, k, v[k]);
    *reinterpret_cast<uint4 *>(p + i) = u;
}

/* p[i..i+N) = f[0..N), rounded to nearest even for f16/bf16. */
template <typename T> static __device__ __forceinline__ void cu_st16(T *p, int64_t i, const float *f)
{
    uint4 u;
    T *e = reinterpret_cast<T *>(&u);
#pragma unroll
    for (int k = 0; k < cu_vec<T>::N; k++) cu_st(e, k, f[k]);
    *reinterpret_cast<uint4 *>(p + i) = u;
}

/* Every lane gets the same value: a butterfly, and a + b == b + a bit for bit. */
static __device__ __forceinline__ double cu_warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(CU_FULL_MASK, v, o);
    return v;
}
static __device__ __forceinline__ float cu_warp_sum_f(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(CU_FULL_MASK, v, o);
    return v;
}
/* fmaxf ignores a NaN operand, as the reference's fmax does. */
static __device__ __forceinline__ float cu_warp_max_f(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(CU_FULL_MASK, v, o));
    return v;
}

/* Block-wide sum; every thread gets it. blockDim.x a multiple of 32, at most 1024; `sh`
 * holds 32 doubles. Safe to call again right away (the trailing barrier). */
static __device__ __forceinline__ double cu_block_sum_d(double v, double *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_sum_d(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    double r = 0.0;
    for (int w = 0; w < nw; w++) r += sh[w]; /* warp order, the same in every thread */
    __syncthreads();
    return r;
}
static __device__ __forceinline__ float cu_block_max_f(float v, float *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_max_f(v);
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float r = -INFINITY;
    for (int w = 0; w < nw; w++) r = fmaxf(r, sh[w]);
    __syncthreads();
    return r;
}
#endif

#endif
