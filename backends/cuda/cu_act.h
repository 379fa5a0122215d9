/* cu_act.h — the activations in double, as the reference writes them (src/ops/activation.c),
 * shared by the elementwise kernels and the epilogues that apply an activation after a
 * product (gemv.cu). */
#ifndef GRADUS_CUDA_ACT_H
#define GRADUS_CUDA_ACT_H

#include "cuda_internal.h"

#if defined(__CUDACC__)
#include <math.h>

#define CU_SQRT1_2 0.70710678118654752440
#define CU_SQRT_2_OVER_PI 0.79788456080286535588
#define CU_GELU_C 0.044715

/* Same branches as the reference: never exp of a large positive number. */
static __device__ __forceinline__ double cu_sigmoid_d(double x)
{
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}
static __device__ __forceinline__ double cu_gelu_d(double x) { return 0.5 * x * (1.0 + erf(x * CU_SQRT1_2)); }
static __device__ __forceinline__ double cu_gelu_tanh_d(double x)
{
    return 0.5 * x * (1.0 + tanh(CU_SQRT_2_OVER_PI * (x + CU_GELU_C * x * x * x)));
}
static __device__ __forceinline__ double cu_silu_d(double x) { return x * cu_sigmoid_d(x); }

/* linear_act's activation (gdp_activation numbering) of z. */
static __device__ __forceinline__ double cu_act_d(int act, double z)
{
    switch (act) {
    case GDP_ACT_RELU: return z < 0 ? 0.0 : z;
    case GDP_ACT_GELU_TANH: return cu_gelu_tanh_d(z);
    case GDP_ACT_GELU: return cu_gelu_d(z);
    case GDP_ACT_SILU: return cu_silu_d(z);
    default: return z;
    }
}
#endif

#endif
