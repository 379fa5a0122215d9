/* sample.cu — the sample op (src/ops/sample.c) for greedy decoding: each row's token is
 * picked on the device, so a decode step reads back one id per sequence instead of a row
 * of logits, and the step stays one captured graph.
 *
 * Greedy is gd_lm_sample's first highest logit: scanning ids upwards it keeps the first
 * value that is larger than the best so far. So a NaN never wins, except that a NaN at id 0
 * is never replaced (nothing compares larger than it), and a row with nothing larger than
 * -inf picks id 0. In parallel: the smallest id holding the largest non-NaN value, then the
 * id-0 rule. A block per row; each thread scans a stride of ids, then a fixed tree.
 *
 * Sampling with a temperature is declined (the host's reference runs it): its sums must
 * follow the reference's sequential order to pick the same tokens.
 */
#include "cuda_internal.h"

#include <math.h>

#define SAMPLE_THREADS 512

/* (v, i) ahead of (bv, bi): larger, or as large with a smaller id; NaN never ahead. */
static __device__ __forceinline__ bool ahead(float v, int64_t i, float bv, int64_t bi)
{
    return v > bv || (v == bv && i < bi);
}

template <typename T>
__global__ void __launch_bounds__(SAMPLE_THREADS) greedy_kernel(const T *x, int64_t s0, int64_t s1, int64_t V, int32_t *out)
{
    __shared__ float shv[SAMPLE_THREADS / 32];
    __shared__ int64_t shi[SAMPLE_THREADS / 32];
    const T *row = x + (int64_t)blockIdx.x * s0;
    float bv = -INFINITY;
    int64_t bi = V; /* nothing yet: any non-NaN value is ahead, -inf included */
    for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
        float v = cu_ld(row, i * s1);
        if (ahead(v, i, bv, bi)) bv = v, bi = i;
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ahead(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shv[warp] = bv, shi[warp] = bi;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        if (ahead(shv[w], shi[w], bv, bi)) bv = shv[w], bi = shi[w];
    float first = cu_ld(row, 0);
    out[blockIdx.x] = (first != first || bi >= V) ? 0 : (int32_t)bi;
}

static int sample_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 2 || n->n_out != 1 || n->out[0]->dtype != GDP_I32) return 0;
    const gdp_tensor *x = n->in[0];
    if (!cu_gpu_float(x->dtype) || x->ndim != 2 || x->shape[1] < 1 || x->shape[0] > 0x7fffffff ||
        x->shape[1] > 0x7fffffff)
        return 0;
    return !(gdp_attr_float(&n->attrs, "temperature", 0) > 0); /* greedy only */
}

// logits (B, V), draw (B) -> ids (B) i32; the draw number is not needed by greedy rows
static gdp_status sample_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    (void)be;
    const gdp_tensor *x = node->in[0];
    int64_t B = x->shape[0];
    if (B == 0) return GDP_OK;
    CU_FLOAT_SWITCH(x->dtype, T,
                    greedy_kernel<T><<<(unsigned)B, SAMPLE_THREADS, 0, s>>>((const T *)x->data, x->stride[0],
                                                                           x->stride[1], x->shape[1],
                                                                           (int32_t *)node->out[0]->data));
    return GDP_OK;
}
CU_LAUNCHER(sample_run)

static const char *const sample_attrs[] = {"temperature", NULL};

static const gdp_kernel kernels[] = {
    CU_KX("sample", GDP_F32, GDP_KERNEL_STRIDED, sample_supports, sample_run_launch, sample_attrs, NULL),
    CU_KX("sample", GDP_F16, GDP_KERNEL_STRIDED, sample_supports, sample_run_launch, sample_attrs, NULL),
    CU_KX("sample", GDP_BF16, GDP_KERNEL_STRIDED, sample_supports, sample_run_launch, sample_attrs, NULL),
};
CU_FAMILY(sample, kernels);
