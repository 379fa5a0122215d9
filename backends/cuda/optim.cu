/* optim.cu — the optimizer family (src/ops/optim.c): sgd_update, adamw_update, assign,
 * clip_coef.
 *
 * Updates run in place on the device stream: each thread reads element i of every input
 * before writing element i of any output, so aliasing (p' over p, the moments over the
 * moments) is safe, and the host never touches a variable while an update is in flight.
 * The learning rate and step are f32 scalars in device memory, read by the kernel, so a
 * schedule changes them without a host synchronization. Arithmetic is in double, as in
 * the reference.
 *
 * adamw_update's mixed forms keep f32 master weights and moments beside a low-precision
 * model: the gradient may come in bf16/f16, and an optional 7th input `copy` (bf16/f16)
 * gets p' rounded to its dtype as a 4th output, in place. The rounding goes through f32
 * (p' as stored, then to the narrow type), as the reference does.
 */
#include "cuda_internal.h"

#include <math.h>
#include <string.h>

#define THREADS 256

// p (n), g (n), buf (n), lr () -> p', buf' : PyTorch SGD (momentum, weight decay, nesterov)
__global__ void sgd_kernel(const float *p_in, const float *g_in, const float *buf_in, const float *lr_p, float *p_out,
                           float *buf_out, int64_t n, double m, double wd, int nesterov)
{
    double lr = (double)lr_p[0];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double p = p_in[i], g = g_in[i], buf = buf_in[i];
        g += wd * p;
        buf = m * buf + g;
        double update = nesterov ? g + m * buf : buf;
        p_out[i] = (float)(p - lr * update);
        buf_out[i] = (float)buf;
    }
}

// p, g, m, v (n), step (), lr () -> p', m', v' [, copy' = p' rounded to C] : PyTorch AdamW, step 1-based
template <typename G, typename C>
__global__ void adamw_kernel(const float *p_in, const G *g_in, const float *m_in, const float *v_in,
                             const float *step_p, const float *lr_p, float *p_out, float *m_out, float *v_out, C *copy,
                             int64_t n, double b1, double b2, double eps, double wd)
{
    double t = (double)step_p[0], lr = (double)lr_p[0];
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double p = p_in[i], g = (double)cu_ld(g_in, i), m = m_in[i], v = v_in[i];
        p -= lr * wd * p;
        m = b1 * m + (1.0 - b1) * g;
        v = b2 * v + (1.0 - b2) * g * g;
        p -= lr * (m / bc1) / (sqrt(v / bc2) + eps);
        const float p32 = (float)p;
        p_out[i] = p32;
        m_out[i] = (float)m;
        v_out[i] = (float)v;
        if (copy != NULL) cu_st(copy, i, p32);
    }
}

static int shaped_like(const gdp_tensor *a, const gdp_tensor *b)
{
    return a->dtype == b->dtype && cu_same_shape(a, b);
}

static int f32_scalar(const gdp_tensor *t) { return t->dtype == GDP_F32 && gdp_numel(t) == 1; }

static int sgd_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 4 || n->n_out != 2 || n->in[0]->dtype != GDP_F32) return 0;
    return shaped_like(n->in[1], n->in[0]) && shaped_like(n->in[2], n->in[0]) && f32_scalar(n->in[3]) &&
           shaped_like(n->out[0], n->in[0]) && shaped_like(n->out[1], n->in[0]);
}

static gdp_status sgd_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    (void)err;
    int64_t n = gdp_numel(node->in[0]);
    if (n == 0) return GDP_OK;
    sgd_kernel<<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>(
        (const float *)node->in[0]->data, (const float *)node->in[1]->data, (const float *)node->in[2]->data,
        (const float *)node->in[3]->data, (float *)node->out[0]->data, (float *)node->out[1]->data, n,
        gdp_attr_float(&node->attrs, "momentum", 0.0), gdp_attr_float(&node->attrs, "weight_decay", 0.0),
        gdp_attr_int(&node->attrs, "nesterov", 0) != 0);
    return GDP_OK;
}
CU_LAUNCHER(sgd_run)

/* p, m, v f32; g f32 or half; step and lr f32 scalars; an optional copy (f32 or half). */
static int adamw_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in < 6 || n->n_in > 7 || n->n_out != n->n_in - 3 || n->in[0]->dtype != GDP_F32) return 0;
    const gdp_tensor *p = n->in[0], *g = n->in[1];
    if (!cu_gpu_float(g->dtype) || !cu_same_shape(g, p)) return 0;
    if (!shaped_like(n->in[2], p) || !shaped_like(n->in[3], p)) return 0;
    for (int k = 0; k < 3; k++)
        if (!shaped_like(n->out[k], p)) return 0;
    if (n->n_in == 7) {
        const gdp_tensor *c = n->in[6];
        if (!cu_gpu_float(c->dtype) || !cu_same_shape(c, p) || !shaped_like(n->out[3], c)) return 0;
    }
    return f32_scalar(n->in[4]) && f32_scalar(n->in[5]);
}

template <typename G, typename C>
static void adamw_launch(cu_backend *be, cudaStream_t s, const gdp_node *node, int64_t n)
{
    adamw_kernel<G, C><<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>(
        (const float *)node->in[0]->data, (const G *)node->in[1]->data, (const float *)node->in[2]->data,
        (const float *)node->in[3]->data, (const float *)node->in[4]->data, (const float *)node->in[5]->data,
        (float *)node->out[0]->data, (float *)node->out[1]->data, (float *)node->out[2]->data,
        node->n_out > 3 ? (C *)node->out[3]->data : (C *)NULL, n, gdp_attr_float(&node->attrs, "beta1", 0.9),
        gdp_attr_float(&node->attrs, "beta2", 0.999), gdp_attr_float(&node->attrs, "eps", 1e-8),
        gdp_attr_float(&node->attrs, "weight_decay", 0.0));
}

static gdp_status adamw_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    int64_t n = gdp_numel(node->in[0]);
    if (n == 0) return GDP_OK;
    int32_t cdt = node->n_in > 6 ? node->in[6]->dtype : GDP_F32;
    switch (node->in[1]->dtype) {
    case GDP_F32: CU_FLOAT_SWITCH(cdt, C, adamw_launch<float, C>(be, s, node, n)); break;
    case GDP_F16: CU_FLOAT_SWITCH(cdt, C, adamw_launch<__half, C>(be, s, node, n)); break;
    case GDP_BF16: CU_FLOAT_SWITCH(cdt, C, adamw_launch<__nv_bfloat16, C>(be, s, node, n)); break;
    default: return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda adamw_update: gradient dtype %d", (int)node->in[1]->dtype);
    }
    return GDP_OK;
}
CU_LAUNCHER(adamw_run)

static int assign_supports(void *b, const gdp_node *n)
{
    (void)b;
    return n->n_in == 2 && n->n_out == 1 && shaped_like(n->in[1], n->in[0]) && shaped_like(n->out[0], n->in[0]) &&
           gdp_dtype_size(n->in[0]->dtype) > 0;
}

// (dst, src) -> dst' = src, a byte copy
static gdp_status assign_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    (void)be;
    size_t bytes = (size_t)gdp_numel(node->in[1]) * gdp_dtype_size(node->in[1]->dtype);
    if (bytes == 0 || node->out[0]->data == node->in[1]->data) return GDP_OK;
    CU_TRY(cudaMemcpyAsync(node->out[0]->data, node->in[1]->data, bytes, cudaMemcpyDeviceToDevice, s));
    return GDP_OK;
}
CU_LAUNCHER(assign_run)

// (norm) -> min(1, max_norm / (norm + 1e-6)); NaN stays NaN
template <typename T>
__global__ void clip_coef_kernel(const T *norm, T *out, double max_norm)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        double coef = max_norm / ((double)cu_ld(norm, 0) + 1e-6);
        cu_std(out, 0, coef > 1.0 ? 1.0 : coef);
    }
}

static int clip_coef_supports(void *b, const gdp_node *n)
{
    (void)b;
    return n->n_in == 1 && n->n_out == 1 && cu_gpu_float(n->in[0]->dtype) && n->out[0]->dtype == n->in[0]->dtype &&
           gdp_numel(n->in[0]) == 1 && gdp_numel(n->out[0]) == 1;
}

static gdp_status clip_coef_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    (void)be;
    double mx = gdp_attr_float(&node->attrs, "max_norm", 1.0);
    CU_FLOAT_SWITCH(node->in[0]->dtype, T,
                    clip_coef_kernel<T><<<1, 1, 0, s>>>((const T *)node->in[0]->data, (T *)node->out[0]->data, mx));
    return GDP_OK;
}
CU_LAUNCHER(clip_coef_run)

static const gdp_kernel kernels[] = {
    CU_K("sgd_update", GDP_F32, sgd_supports, sgd_run_launch, NULL),
    CU_K("adamw_update", GDP_F32, adamw_supports, adamw_run_launch, NULL),
    /* mixed precision: f32 master weights beside a bf16/f16 model (and gradient) */
    CU_KSIG("adamw_update", "f32,bf16,f32,f32,f32,f32,bf16->f32,f32,f32,bf16", adamw_supports, adamw_run_launch, NULL, NULL),
    CU_KSIG("adamw_update", "f32,f32,f32,f32,f32,f32,bf16->f32,f32,f32,bf16", adamw_supports, adamw_run_launch, NULL, NULL),
    CU_KSIG("adamw_update", "f32,f16,f32,f32,f32,f32,f16->f32,f32,f32,f16", adamw_supports, adamw_run_launch, NULL, NULL),
    CU_KSIG("adamw_update", "f32,f32,f32,f32,f32,f32,f16->f32,f32,f32,f16", adamw_supports, adamw_run_launch, NULL, NULL),
    CU_K("assign", GDP_F32, assign_supports, assign_run_launch, NULL),
    CU_K("assign", GDP_F16, assign_supports, assign_run_launch, NULL),
    CU_K("assign", GDP_BF16, assign_supports, assign_run_launch, NULL),
    CU_K("assign", GDP_I32, assign_supports, assign_run_launch, NULL),
    CU_K("assign", GDP_I64, assign_supports, assign_run_launch, NULL),
    CU_K("clip_coef", GDP_F32, clip_coef_supports, clip_coef_run_launch, NULL),
    CU_K("clip_coef", GDP_F16, clip_coef_supports, clip_coef_run_launch, NULL),
    CU_K("clip_coef", GDP_BF16, clip_coef_supports, clip_coef_run_launch, NULL),
};
CU_FAMILY(optim, kernels);
