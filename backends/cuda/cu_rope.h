/* cu_rope.h — rope's arithmetic, shared by rope_cache.cu's kernels and gemv.cu's linear_qkv_rope
 * epilogue, so that every kernel rotates a pair with the very expressions of rope_ref (in
 * double) and a fused node stores the bits of the unfused ones. */
#ifndef GRADUS_CU_ROPE_H
#define GRADUS_CU_ROPE_H

#include "cuda_internal.h"

#include <math.h>

/* Pair i's frequency: it depends on no position, so a kernel started early computes it
 * before it waits for the kernel in front (cu_pdl_wait), off the step's critical path. */
static __device__ __forceinline__ double rope_freq(int64_t i, int64_t D, double theta)
{
    return pow(theta, -2.0 * (double)i / (double)D);
}

/* The cosine and sine of the angle of a pair of frequency f at step t of a row whose first
 * position is `offset`. */
static __device__ __forceinline__ double2 rope_cs_f(int64_t t, int64_t offset, double f, double sign)
{
    double s, c;
    sincos((double)(t + offset) * f, &s, &c);
    return make_double2(c, sign * s);
}

/* rope's angle for pair i at step t of a row whose first position is `offset`, and its
 * cosine and sine. */
static __device__ __forceinline__ double2 rope_cs(int64_t t, int64_t offset, int64_t i, int64_t D, double theta,
                                                  double sign)
{
    return rope_cs_f(t, offset, rope_freq(i, D, theta), sign);
}

/* Reports the first cache position pos[b * step] (b < B, or the scalar when step is 0) that
 * leaves no room for T steps in a cache of S: the threads of one block call it. */
static __device__ __forceinline__ void rope_check_pos(const void *pos, int pos64, int64_t step, int64_t B, int64_t S,
                                                      int64_t T, const cu_bad &bad)
{
    for (int64_t b = threadIdx.x; b < (step != 0 ? B : 1); b += blockDim.x) {
        const int64_t p = cu_ld_index(pos, pos64, b * step);
        if (p < 0 || p > S - T) cu_report(bad, p, b);
    }
}

/* The elements of pair i in a row of D: (2i, 2i + 1) interleaved, else (i, i + D / 2). */
static __device__ __forceinline__ int64_t rope_j0(int64_t i, int interleaved) { return interleaved ? 2 * i : i; }
static __device__ __forceinline__ int64_t rope_j1(int64_t i, int64_t D, int interleaved)
{
    return interleaved ? 2 * i + 1 : i + D / 2;
}

/* (x0, x1) rotated by c, into y[i0] and y[i1] rounded to T; no fused multiply-add: the
 * reference rounds each product. */
template <typename T>
static __device__ __forceinline__ void rope_store(double x0, double x1, double2 c, T *y, int64_t i0, int64_t i1)
{
    cu_std(y, i0, __dsub_rn(__dmul_rn(x0, c.x), __dmul_rn(x1, c.y)));
    cu_std(y, i1, __dadd_rn(__dmul_rn(x0, c.y), __dmul_rn(x1, c.x)));
}

#endif
