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
 * (p' as stored, then to the narrow type), as the reference does. An optional last input,
 * an f32 scalar read on the device (7th, or 8th after a copy), multiplies the gradient:
 * clipping by global norm folded into the update.
 */
#include "cuda_internal.h"

#include <math.h>
#include <string.h>

#define THREADS 256

// One element of p (n), g (n), buf (n), lr () -> p', buf' : PyTorch SGD (momentum, weight
// decay, nesterov). The single and the batched kernels share it, so their bits agree.
__device__ __forceinline__ void sgd_elem(const float *p_in, const float *g_in, const float *buf_in, float *p_out,
                                         float *buf_out, int64_t i, double lr, double m, double wd, int nesterov)
{
    double p = p_in[i], g = g_in[i], buf = buf_in[i];
    g += wd * p;
    buf = m * buf + g;
    double update = nesterov ? g + m * buf : buf;
    p_out[i] = (float)(p - lr * update);
    buf_out[i] = (float)buf;
}

__global__ void sgd_kernel(const float *p_in, const float *g_in, const float *buf_in, const float *lr_p, float *p_out,
                           float *buf_out, int64_t n, double m, double wd, int nesterov)
{
    double lr = (double)lr_p[0];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        sgd_elem(p_in, g_in, buf_in, p_out, buf_out, i, lr, m, wd, nesterov);
}

// One element's AdamW, PyTorch's, in double with the bias corrections bc1, bc2 of the step
// (1-based): p, g (already scaled), m, v -> p', m', v' as stored (f32).
__device__ __forceinline__ void adamw_math(double p, double g, double m, double v, float &po, float &mo, float &vo,
                                           double lr, double bc1, double bc2, double b1, double b2, double eps, double wd)
{
    p -= lr * wd * p;
    m = b1 * m + (1.0 - b1) * g;
    v = b2 * v + (1.0 - b2) * g * g;
    p -= lr * (m / bc1) / (sqrt(v / bc2) + eps);
    po = (float)p;
    mo = (float)m;
    vo = (float)v;
}

/* Four elements of a gradient or a copy at i (aligned to four elements): one 16- or
 * 8-byte access. */
template <typename T> static __device__ __forceinline__ void ld4(const T *p, int64_t i, float *f)
{
    if (sizeof(T) == 4) {
        const float4 u = *reinterpret_cast<const float4 *>(p + i);
        f[0] = u.x, f[1] = u.y, f[2] = u.z, f[3] = u.w;
    } else {
        const uint2 u = *reinterpret_cast<const uint2 *>(p + i);
        const T *e = reinterpret_cast<const T *>(&u);
#pragma unroll
        for (int k = 0; k < 4; k++) f[k] = cu_ld(e, k);
    }
}
template <typename T> static __device__ __forceinline__ void st4(T *p, int64_t i, const float *f)
{
    if (sizeof(T) == 4) {
        *reinterpret_cast<float4 *>(p + i) = make_float4(f[0], f[1], f[2], f[3]);
    } else {
        uint2 u;
        T *e = reinterpret_cast<T *>(&u);
#pragma unroll
        for (int k = 0; k < 4; k++) cu_st(e, k, f[k]);
        *reinterpret_cast<uint2 *>(p + i) = u;
    }
}

/* adamw_update's optional inputs: the copy (f16/bf16, 7th) and the gradient scale (f32
 * scalar, last), as src/ops/optim.c tells them apart; -1 when absent. */
static int adamw_copy(const gdp_node *n) { return n->n_in > 6 && n->in[6]->dtype != GDP_F32 ? 6 : -1; }
static int adamw_gscale(const gdp_node *n)
{
    return n->n_in > 6 && n->in[n->n_in - 1]->dtype == GDP_F32 ? n->n_in - 1 : -1;
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
    const int ic = adamw_copy(n), is = adamw_gscale(n);
    if (n->n_in < 6 || n->n_in > 8 || n->n_in != 6 + (ic >= 0) + (is >= 0) || n->n_out != 3 + (ic >= 0) ||
        n->in[0]->dtype != GDP_F32)
        return 0;
    const gdp_tensor *p = n->in[0], *g = n->in[1];
    if (!cu_gpu_float(g->dtype) || !cu_same_shape(g, p)) return 0;
    if (!shaped_like(n->in[2], p) || !shaped_like(n->in[3], p)) return 0;
    for (int k = 0; k < 3; k++)
        if (!shaped_like(n->out[k], p)) return 0;
    if (ic >= 0) {
        const gdp_tensor *c = n->in[ic];
        if (!cu_gpu_float(c->dtype) || !cu_same_shape(c, p) || !shaped_like(n->out[3], c)) return 0;
    }
    if (is >= 0 && !f32_scalar(n->in[is])) return 0;
    return f32_scalar(n->in[4]) && f32_scalar(n->in[5]);
}

#define MT_MAX 32 /* a table stays well inside the 4 KiB of kernel arguments */

/* AdamW's table: its updates' 4-element groups are numbered one after the other (`end`,
 * one past a tensor's last group) and a grid-stride loop walks them, so that blocks go to
 * work, not to the empty tails of small tensors (the biases and norms of a layer beside
 * its matrices). A single update is a table of one. */
typedef struct mt_adamw {
    const float *p, *m, *v;
    const void *g;
    float *po, *mo, *vo;
    void *copy;
    int64_t n, end;
    int vec; /* every buffer aligned to four elements: the groups move as vectors */
} mt_adamw;
typedef struct mt_adamw_table {
    mt_adamw t[MT_MAX];
} mt_adamw_table;

template <typename G, typename C>
__global__ void adamw_table_kernel(const mt_adamw_table tab, int count, const float *step_p, const float *lr_p,
                                   const float *gs_p, double b1, double b2, double eps, double wd)
{
    const double t = (double)step_p[0], lr = (double)lr_p[0], gs = gs_p != NULL ? (double)gs_p[0] : 1.0;
    const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, total = tab.t[count - 1].end;
    int k = 0;
    for (int64_t q = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; q < total; q += stride) {
        while (q >= tab.t[k].end) k++; /* q only grows: a thread walks the table once */
        const mt_adamw &e = tab.t[k];
        const int64_t n = e.n, i = (q - (e.end - (n + 3) / 4)) * 4;
        const G *g = (const G *)e.g;
        C *copy = (C *)e.copy;
        if (e.vec && i + 4 <= n) {
            const float4 p = *reinterpret_cast<const float4 *>(e.p + i), m = *reinterpret_cast<const float4 *>(e.m + i),
                         v = *reinterpret_cast<const float4 *>(e.v + i);
            float gf[4], po[4], mo[4], vo[4];
            ld4(g, i, gf);
            const float pa[4] = {p.x, p.y, p.z, p.w}, ma[4] = {m.x, m.y, m.z, m.w}, va[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int j = 0; j < 4; j++)
                adamw_math(pa[j], (double)gf[j] * gs, ma[j], va[j], po[j], mo[j], vo[j], lr, bc1, bc2, b1, b2, eps, wd);
            st4(e.po, i, po);
            st4(e.mo, i, mo);
            st4(e.vo, i, vo);
            if (copy != NULL) st4(copy, i, po);
        } else {
            for (int64_t j = i; j < n && j < i + 4; j++) {
                float po, mo, vo;
                adamw_math(e.p[j], (double)cu_ld(g, j) * gs, e.m[j], e.v[j], po, mo, vo, lr, bc1, bc2, b1, b2, eps, wd);
                e.po[j] = po, e.mo[j] = mo, e.vo[j] = vo;
                if (copy != NULL) cu_st(copy, j, po);
            }
        }
    }
}

/* Node k's row of an AdamW table whose groups so far end at `end`. */
static mt_adamw adamw_row(const gdp_node *n, int64_t end)
{
    const int64_t ne = gdp_numel(n->in[0]);
    const void *copy = n->n_out > 3 ? n->out[3]->data : NULL;
    const size_t gs = gdp_dtype_size(n->in[1]->dtype), cs = copy != NULL ? gdp_dtype_size(n->out[3]->dtype) : 4;
    const uintptr_t f32s = (uintptr_t)n->in[0]->data | (uintptr_t)n->in[2]->data | (uintptr_t)n->in[3]->data |
                           (uintptr_t)n->out[0]->data | (uintptr_t)n->out[1]->data | (uintptr_t)n->out[2]->data;
    const int vec = (f32s & 15u) == 0 && ((uintptr_t)n->in[1]->data & (4 * gs - 1)) == 0 &&
                    ((uintptr_t)copy & (4 * cs - 1)) == 0;
    return {(const float *)n->in[0]->data, (const float *)n->in[2]->data, (const float *)n->in[3]->data,
            n->in[1]->data, (float *)n->out[0]->data, (float *)n->out[1]->data, (float *)n->out[2]->data,
            (void *)copy, ne, end + (ne + 3) / 4, vec};
}

template <typename G, typename C>
static void adamw_launch(cu_backend *be, cudaStream_t s, const mt_adamw_table &tab, int count, const gdp_node *n)
{
    const int ig = adamw_gscale(n);
    adamw_table_kernel<G, C><<<cu_blocks(be, tab.t[count - 1].end, THREADS), THREADS, 0, s>>>(
        tab, count, (const float *)n->in[4]->data, (const float *)n->in[5]->data,
        ig >= 0 ? (const float *)n->in[ig]->data : (const float *)NULL, gdp_attr_float(&n->attrs, "beta1", 0.9),
        gdp_attr_float(&n->attrs, "beta2", 0.999), gdp_attr_float(&n->attrs, "eps", 1e-8),
        gdp_attr_float(&n->attrs, "weight_decay", 0.0));
}

/* The nodes of a table, alike but for their tensors, in one launch (n: the first). */
static gdp_status adamw_table_run(cu_backend *be, cudaStream_t s, const mt_adamw_table &tab, int count,
                                  const gdp_node *node, gdp_err *err)
{
    int32_t cdt = adamw_copy(node) >= 0 ? node->in[adamw_copy(node)]->dtype : GDP_F32;
    switch (node->in[1]->dtype) {
    case GDP_F32: CU_FLOAT_SWITCH(cdt, C, adamw_launch<float, C>(be, s, tab, count, node)); break;
    case GDP_F16: CU_FLOAT_SWITCH(cdt, C, adamw_launch<__half, C>(be, s, tab, count, node)); break;
    case GDP_BF16: CU_FLOAT_SWITCH(cdt, C, adamw_launch<__nv_bfloat16, C>(be, s, tab, count, node)); break;
    default: return gdp_fail(err, GDP_ERR_UNSUPPORTED, "cuda adamw_update: gradient dtype %d", (int)node->in[1]->dtype);
    }
    return GDP_OK;
}

static gdp_status adamw_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    if (gdp_numel(node->in[0]) == 0) return GDP_OK;
    mt_adamw_table tab;
    memset(&tab, 0, sizeof tab);
    tab.t[0] = adamw_row(node, 0);
    return adamw_table_run(be, s, tab, 1, node, err);
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

/* ---- updates batched into one launch ----------------------------------------------------
 * An optimizer appends one update per parameter, one after the other; for small models
 * (and the biases and norms of any model) each launch costs more than its work. When the
 * executor captures a segment, it hands a run of like updates (same kernel, dtypes,
 * attributes, learning rate and step) to cu_updates_batch, which launches them together:
 * a table of up to MT_MAX tensors goes as the kernel's argument (SGD's: blockIdx.y picks
 * the tensor; AdamW's: the table kernel a single update runs too). Each element goes
 * through the same function as in the single kernels, so the bits are the same
 * (test_cuda_mixed compares a step with CUDA graphs on and off). */

typedef struct mt_sgd {
    const float *p, *g, *b;
    float *po, *bo;
    int64_t n;
} mt_sgd;
typedef struct mt_sgd_table {
    mt_sgd t[MT_MAX];
} mt_sgd_table;

__global__ void sgd_batch_kernel(const mt_sgd_table tab, const float *lr_p, double m, double wd, int nesterov)
{
    const mt_sgd e = tab.t[blockIdx.y];
    double lr = (double)lr_p[0];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < e.n; i += (int64_t)gridDim.x * blockDim.x)
        sgd_elem(e.p, e.g, e.b, e.po, e.bo, i, lr, m, wd, nesterov);
}

static int same_attrs(const gdp_node *a, const gdp_node *b)
{
    if (a->attrs.n != b->attrs.n) return 0;
    for (int32_t k = 0; k < a->attrs.n; k++) {
        const gdp_attr *x = &a->attrs.items[k], *y = gdp_attr_find(&b->attrs, x->name);
        if (y == NULL || gdp_attr_float(&a->attrs, x->name, 0.0) != gdp_attr_float(&b->attrs, x->name, 0.0) ||
            gdp_attr_int(&a->attrs, x->name, 0) != gdp_attr_int(&b->attrs, x->name, 0))
            return 0;
    }
    return 1;
}

/* The inputs of an update that are scalars read by every element: sgd's lr; adamw's step,
 * lr and gradient scale. Nodes launched together share them. */
static int scalar_input(const gdp_node *n, int sgd, int k)
{
    return sgd ? k == 3 : k == 4 || k == 5 || k == adamw_gscale(n);
}

/* Whether nodes a and b may run in one launch: same form, the same scalars, and no other
 * tensor of one overlapping a tensor of the other, since the elements of one launch run
 * in no particular order. */
static int batchable(const gdp_node *a, const gdp_node *b, int sgd)
{
    if (a->n_in != b->n_in || a->n_out != b->n_out || !same_attrs(a, b)) return 0;
    for (int k = 0; k < a->n_in; k++)
        if (a->in[k]->dtype != b->in[k]->dtype || (scalar_input(a, sgd, k) && a->in[k]->data != b->in[k]->data)) return 0;
    for (int i = 0; i < a->n_in + a->n_out; i++) {
        if (i < a->n_in && scalar_input(a, sgd, i)) continue;
        const gdp_tensor *x = i < a->n_in ? a->in[i] : a->out[i - a->n_in];
        for (int j = 0; j < b->n_in + b->n_out; j++) {
            if (j < b->n_in && scalar_input(b, sgd, j)) continue;
            if (cu_overlaps(x, j < b->n_in ? b->in[j] : b->out[j - b->n_in])) return 0;
        }
    }
    return 1;
}

int cu_updates_batch(cu_backend *be, const gdp_segment *seg, int i, cudaStream_t s, gdp_status *st, gdp_err *err)
{
    *st = GDP_OK;
    gdp_launch_fn f = seg->launch[i];
    int sgd = f == sgd_run_launch;
    if (!sgd && f != adamw_run_launch) return 0;
    int count = 1;
    while (i + count < seg->n_nodes && count < MT_MAX && seg->launch[i + count] == f) {
        int ok = 1;
        for (int j = 0; ok && j < count; j++) ok = batchable(seg->nodes[i + j], seg->nodes[i + count], sgd);
        if (!ok) break;
        count++;
    }
    if (count < 2) return 0;
    const gdp_node *n0 = seg->nodes[i];
    if (sgd) {
        unsigned gx = 1;
        for (int j = 0; j < count; j++) {
            unsigned b = cu_blocks(be, gdp_numel(seg->nodes[i + j]->in[0]), THREADS);
            if (b > gx) gx = b;
        }
        dim3 grid(gx, (unsigned)count);
        mt_sgd_table tab;
        memset(&tab, 0, sizeof tab);
        for (int j = 0; j < count; j++) {
            const gdp_node *n = seg->nodes[i + j];
            tab.t[j] = {(const float *)n->in[0]->data, (const float *)n->in[1]->data, (const float *)n->in[2]->data,
                        (float *)n->out[0]->data, (float *)n->out[1]->data, gdp_numel(n->in[0])};
        }
        sgd_batch_kernel<<<grid, THREADS, 0, s>>>(tab, (const float *)n0->in[3]->data,
                                                  gdp_attr_float(&n0->attrs, "momentum", 0.0),
                                                  gdp_attr_float(&n0->attrs, "weight_decay", 0.0),
                                                  gdp_attr_int(&n0->attrs, "nesterov", 0) != 0);
    } else {
        mt_adamw_table tab;
        memset(&tab, 0, sizeof tab);
        for (int j = 0; j < count; j++) tab.t[j] = adamw_row(seg->nodes[i + j], j > 0 ? tab.t[j - 1].end : 0);
        if ((*st = adamw_table_run(be, s, tab, count, n0, err)) != GDP_OK) return count;
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        *st = gdp_fail(err, GDP_ERR_DEVICE, "cuda: %d batched %s launches failed: %s (%s)", count, n0->op,
                       cudaGetErrorName(e), cudaGetErrorString(e));
    return count;
}

static const gdp_kernel kernels[] = {
    CU_K("sgd_update", GDP_F32, sgd_supports, sgd_run_launch, NULL),
    CU_K("adamw_update", GDP_F32, adamw_supports, adamw_run_launch, NULL),
    /* mixed precision: f32 master weights beside a bf16/f16 model (and gradient) */
    CU_KSIG("adamw_update", "f32,bf16,f32,f32,f32,f32,bf16->f32,f32,f32,bf16", adamw_supports, adamw_run_launch, NULL, NULL),
    CU_KSIG("adamw_update", "f32,f32,f32,f32,f32,f32,bf16->f32,f32,f32,bf16", adamw_supports, adamw_run_launch, NULL, NULL),
    CU_KSIG("adamw_update", "f32,f16,f32,f32,f32,f32,f16->f32,f32,f32,f16", adamw_supports, adamw_run_launch, NULL, NULL),
    CU_KSIG("adamw_update", "f32,f32,f32,f32,f32,f32,f16->f32,f32,f32,f16", adamw_supports, adamw_run_launch, NULL, NULL),
    CU_KSIG("adamw_update", "f32,bf16,f32,f32,f32,f32,bf16,f32->f32,f32,f32,bf16", adamw_supports, adamw_run_launch, NULL,
            NULL),
    CU_KSIG("adamw_update", "f32,f16,f32,f32,f32,f32,f16,f32->f32,f32,f32,f16", adamw_supports, adamw_run_launch, NULL,
            NULL),
    /* a half gradient without a copy: f32 parameters used through casts */
    CU_KSIG("adamw_update", "f32,bf16,f32,f32,f32,f32->f32,f32,f32", adamw_supports, adamw_run_launch, NULL, NULL),
    CU_KSIG("adamw_update", "f32,f16,f32,f32,f32,f32->f32,f32,f32", adamw_supports, adamw_run_launch, NULL, NULL),
    CU_KSIG("adamw_update", "f32,bf16,f32,f32,f32,f32,f32->f32,f32,f32", adamw_supports, adamw_run_launch, NULL, NULL),
    CU_KSIG("adamw_update", "f32,f16,f32,f32,f32,f32,f32->f32,f32,f32", adamw_supports, adamw_run_launch, NULL, NULL),
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
