/* optim.cu — the optimizer family (src/ops/optim.c): sgd_update, adamw_update, assign,
 * clip_coef.
 *
 * Updates run in place on the device stream: each thread reads element i of every input
 * before writing element i of any output, so aliasing (p' over p, the moments over the
 * moments) is safe, and the host never touches a variable while an update is in flight.
 * The learning rate and step are f32 scalars in device memory, read by the kernel, so a
 * schedule changes them without a host synchronization. Arithmetic is in double, as in
 * the reference.
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

// p, g, m, v (n), step (), lr () -> p', m', v' : PyTorch AdamW, step 1-based
__global__ void adamw_kernel(const float *p_in, const float *g_in, const float *m_in, const float *v_in,
                             const float *step_p, const float *lr_p, float *p_out, float *m_out, float *v_out, int64_t n,
                             double b1, double b2, double eps, double wd)
{
    double t = (double)step_p[0], lr = (double)lr_p[0];
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        double p = p_in[i], g = g_in[i], m = m_in[i], v = v_in[i];
        p -= lr * wd * p;
        m = b1 * m + (1.0 - b1) * g;
        v = b2 * v + (1.0 - b2) * g * g;
        p -= lr * (m / bc1) / (sqrt(v / bc2) + eps);
        p_out[i] = (float)p;
        m_out[i] = (float)m;
        v_out[i] = (float)v;
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

static int adamw_supports(void *b, const gdp_node *n)
{
    (void)b;
    if (n->n_in != 6 || n->n_out != 3 || n->in[0]->dtype != GDP_F32) return 0;
    for (int k = 1; k < 4; k++)
        if (!shaped_like(n->in[k], n->in[0])) return 0;
    for (int k = 0; k < 3; k++)
        if (!shaped_like(n->out[k], n->in[0])) return 0;
    return f32_scalar(n->in[4]) && f32_scalar(n->in[5]);
}

static gdp_status adamw_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    (void)err;
    int64_t n = gdp_numel(node->in[0]);
    if (n == 0) return GDP_OK;
    adamw_kernel<<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>(
        (const float *)node->in[0]->data, (const float *)node->in[1]->data, (const float *)node->in[2]->data,
        (const float *)node->in[3]->data, (const float *)node->in[4]->data, (const float *)node->in[5]->data,
        (float *)node->out[0]->data, (float *)node->out[1]->data, (float *)node->out[2]->data, n,
        gdp_attr_float(&node->attrs, "beta1", 0.9), gdp_attr_float(&node->attrs, "beta2", 0.999),
        gdp_attr_float(&node->attrs, "eps", 1e-8), gdp_attr_float(&node->attrs, "weight_decay", 0.0));
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
    return n->n_in == 1 && n->n_out == 1 && cu_is_float(n->in[0]->dtype) && n->out[0]->dtype == n->in[0]->dtype &&
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
