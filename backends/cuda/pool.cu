/* pool.cu — the pool family (src/ops/pool.c): max_pool2d, avg_pool2d and their backward
 * ops, NCHW, square windows.
 *
 * Forward kernels run one thread per output and scan its window in the reference's order.
 * Backward kernels run one thread per input element and gather from the windows that
 * cover it, in the reference's (oh, ow) row-major order, summing in double: overlapping
 * windows need no atomics, every element of dx is written (no memset), and the sums are
 * the reference's sums term for term, so results match it bit for bit and reruns too.
 *
 * max_pool2d_grad recomputes each covering window's argmax instead of storing an index
 * per output: for the usual kernel 2 or 3 with stride >= kernel / 2 that is at most a few
 * dozen reads from L1, cheaper than a second kernel and a scratch buffer.
 */
#include "cuda_internal.h"

#include <string.h>

#define THREADS 256

typedef struct pool_geom {
    int64_t N, C, H, W;
    int64_t k, s, p;
    int64_t Ho, Wo;
} pool_geom;

/* Attributes as the reference reads them: stride absent or 0 means the kernel size. */
static void pool_attrs(const gdp_attrs *a, pool_geom *g)
{
    g->k = gdp_attr_int(a, "kernel", 0);
    g->s = gdp_attr_int(a, "stride", 0);
    if (g->s == 0) g->s = g->k;
    g->p = gdp_attr_int(a, "padding", 0);
}

/* Fills g from the attributes and the input shape xs; 0 when the node is not one the
 * shape rule would have accepted (so that no kernel below ever meets a window made only
 * of padding, or an index that overflows). */
static int pool_geom_of(const gdp_node *n, const int64_t *xs, pool_geom *g)
{
    pool_attrs(&n->attrs, g);
    /* Bounds first, so that the arithmetic below cannot overflow. */
    const int64_t lim = (int64_t)1 << 31;
    if (g->k < 1 || g->s < 1 || g->p < 0 || g->k > lim || g->s > lim || g->p > lim || 2 * g->p > g->k) return 0;
    for (int i = 0; i < 4; i++)
        if (xs[i] < 1) return 0;
    g->N = xs[0], g->C = xs[1], g->H = xs[2], g->W = xs[3];
    if (g->H + 2 * g->p < g->k || g->W + 2 * g->p < g->k) return 0;
    g->Ho = (g->H + 2 * g->p - g->k) / g->s + 1;
    g->Wo = (g->W + 2 * g->p - g->k) / g->s + 1;
    return 1;
}

static int is_shape(const gdp_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    return t->ndim == 4 && t->shape[0] == a && t->shape[1] == b && t->shape[2] == c && t->shape[3] == d;
}

static int same_float_dtype(const gdp_node *n)
{
    int32_t dt = n->out[0]->dtype;
    if (!cu_gpu_float(dt)) return 0;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i]->dtype != dt) return 0;
    return 1;
}

/* ---- device helpers --------------------------------------------------------------------- */

/* First row-major index range of output windows covering input position `h` along one
 * axis: windows o with o*s - p <= h <= o*s - p + k - 1, clipped to [0, n_out). */
static __device__ __forceinline__ void covering(int64_t h, int64_t k, int64_t s, int64_t p, int64_t n_out,
                                                int64_t *lo, int64_t *hi)
{
    int64_t a = h + p - k + 1; /* o*s >= a */
    *lo = a <= 0 ? 0 : (a + s - 1) / s;
    int64_t b = (h + p) / s; /* o*s <= h + p; h + p >= 0 */
    *hi = b < n_out - 1 ? b : n_out - 1;
}

/* Index within its plane of the first maximum of window (oh, ow), scanning rows then
 * columns; the first NaN wins so that it propagates (the reference's rule). -1 only for a
 * window made of padding, which pool_geom_of rules out. */
template <typename T>
static __device__ int64_t window_argmax(const T *plane, const pool_geom &g, int64_t oh, int64_t ow)
{
    int64_t best_i = -1;
    float best = 0.0f;
    for (int64_t i = 0; i < g.k; i++) {
        int64_t ih = oh * g.s - g.p + i;
        if (ih < 0 || ih >= g.H) continue;
        for (int64_t j = 0; j < g.k; j++) {
            int64_t iw = ow * g.s - g.p + j;
            if (iw < 0 || iw >= g.W) continue;
            float v = cu_ld(plane, ih * g.W + iw);
            if (best_i < 0 || v > best || (v != v && best == best)) {
                best = v;
                best_i = ih * g.W + iw;
            }
        }
    }
    return best_i;
}

/* ---- kernels ------------------------------------------------------------------------------- */

// y (N, C, Ho, Wo) = max over each window of x (N, C, H, W)
template <typename T>
__global__ void max_pool_kernel(const T *x, T *y, pool_geom g)
{
    int64_t n = g.N * g.C * g.Ho * g.Wo;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t ow = o % g.Wo, t = o / g.Wo, oh = t % g.Ho, pl = t / g.Ho;
        const T *plane = x + pl * g.H * g.W;
        int64_t i = window_argmax(plane, g, oh, ow);
        /* a copy of the element itself: exact for every dtype, NaN payload included */
        if (i >= 0) y[o] = plane[i];
        else cu_st(y, o, 0.0f);
    }
}

// dx (N, C, H, W): the sum, over windows whose first max is this element, of their dy
template <typename T>
__global__ void max_pool_grad_kernel(const T *dy, const T *x, T *dx, pool_geom g)
{
    int64_t n = g.N * g.C * g.H * g.W;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t w = e % g.W, t = e / g.W, h = t % g.H, pl = t / g.H;
        const T *plane = x + pl * g.H * g.W;
        const T *dyp = dy + pl * g.Ho * g.Wo;
        int64_t oh0, oh1, ow0, ow1;
        covering(h, g.k, g.s, g.p, g.Ho, &oh0, &oh1);
        covering(w, g.k, g.s, g.p, g.Wo, &ow0, &ow1);
        double acc = 0.0;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++)
                if (window_argmax(plane, g, oh, ow) == h * g.W + w) acc += (double)cu_ld(dyp, oh * g.Wo + ow);
        cu_std(dx, e, acc);
    }
}

// y (N, C, Ho, Wo) = sum over each window of x / kernel^2 (padding counts as zeros)
template <typename T>
__global__ void avg_pool_kernel(const T *x, T *y, pool_geom g)
{
    int64_t n = g.N * g.C * g.Ho * g.Wo;
    double area = (double)(g.k * g.k);
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n; o += (int64_t)gridDim.x * blockDim.x) {
        int64_t ow = o % g.Wo, t = o / g.Wo, oh = t % g.Ho, pl = t / g.Ho;
        const T *plane = x + pl * g.H * g.W;
        double sum = 0.0;
        for (int64_t i = 0; i < g.k; i++) {
            int64_t ih = oh * g.s - g.p + i;
            if (ih < 0 || ih >= g.H) continue;
            for (int64_t j = 0; j < g.k; j++) {
                int64_t iw = ow * g.s - g.p + j;
                if (iw >= 0 && iw < g.W) sum += (double)cu_ld(plane, ih * g.W + iw);
            }
        }
        cu_std(y, o, sum / area);
    }
}

// dx (N, C, H, W): the sum of dy / kernel^2 over the windows covering each element
template <typename T>
__global__ void avg_pool_grad_kernel(const T *dy, T *dx, pool_geom g)
{
    int64_t n = g.N * g.C * g.H * g.W;
    double area = (double)(g.k * g.k);
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t w = e % g.W, t = e / g.W, h = t % g.H, pl = t / g.H;
        const T *dyp = dy + pl * g.Ho * g.Wo;
        int64_t oh0, oh1, ow0, ow1;
        covering(h, g.k, g.s, g.p, g.Ho, &oh0, &oh1);
        covering(w, g.k, g.s, g.p, g.Wo, &ow0, &ow1);
        double acc = 0.0;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++) acc += (double)cu_ld(dyp, oh * g.Wo + ow) / area;
        cu_std(dx, e, acc);
    }
}

/* ---- supports and launchers ------------------------------------------------------------------ */

static const char *const pool_attr_names[] = {"kernel", "stride", "padding", NULL};

// x (N, C, H, W) -> y (N, C, Ho, Wo)
static int pool_supports(void *b, const gdp_node *n)
{
    (void)b;
    pool_geom g;
    if (n->n_in != 1 || n->n_out != 1 || !same_float_dtype(n) || n->in[0]->ndim != 4) return 0;
    if (!pool_geom_of(n, n->in[0]->shape, &g)) return 0;
    return is_shape(n->out[0], g.N, g.C, g.Ho, g.Wo);
}

// (dy (N, C, Ho, Wo), x (N, C, H, W)) -> dx (N, C, H, W)
static int max_pool_grad_supports(void *b, const gdp_node *n)
{
    (void)b;
    pool_geom g;
    if (n->n_in != 2 || n->n_out != 1 || !same_float_dtype(n) || n->in[1]->ndim != 4) return 0;
    if (!pool_geom_of(n, n->in[1]->shape, &g)) return 0;
    return is_shape(n->in[0], g.N, g.C, g.Ho, g.Wo) && is_shape(n->out[0], g.N, g.C, g.H, g.W);
}

// dy (N, C, Ho, Wo) -> dx (N, C, H, W), the shape input_shape names (the output's)
static int avg_pool_grad_supports(void *b, const gdp_node *n)
{
    (void)b;
    pool_geom g;
    if (n->n_in != 1 || n->n_out != 1 || !same_float_dtype(n) || n->out[0]->ndim != 4) return 0;
    if (!pool_geom_of(n, n->out[0]->shape, &g)) return 0;
    return is_shape(n->in[0], g.N, g.C, g.Ho, g.Wo);
}

static gdp_status max_pool_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    pool_geom g;
    if (!pool_geom_of(node, node->in[0]->shape, &g)) return gdp_fail(err, GDP_ERR_INVALID, "cuda max_pool2d: bad geometry");
    int64_t n = gdp_numel(node->out[0]);
    CU_FLOAT_SWITCH(node->out[0]->dtype, T,
                    max_pool_kernel<T><<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>(
                        (const T *)node->in[0]->data, (T *)node->out[0]->data, g));
    return GDP_OK;
}
CU_LAUNCHER(max_pool_run)

static gdp_status max_pool_grad_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    pool_geom g;
    if (!pool_geom_of(node, node->in[1]->shape, &g))
        return gdp_fail(err, GDP_ERR_INVALID, "cuda max_pool2d_grad: bad geometry");
    int64_t n = gdp_numel(node->out[0]);
    CU_FLOAT_SWITCH(node->out[0]->dtype, T,
                    max_pool_grad_kernel<T><<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>(
                        (const T *)node->in[0]->data, (const T *)node->in[1]->data, (T *)node->out[0]->data, g));
    return GDP_OK;
}
CU_LAUNCHER(max_pool_grad_run)

static gdp_status avg_pool_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    pool_geom g;
    if (!pool_geom_of(node, node->in[0]->shape, &g)) return gdp_fail(err, GDP_ERR_INVALID, "cuda avg_pool2d: bad geometry");
    int64_t n = gdp_numel(node->out[0]);
    CU_FLOAT_SWITCH(node->out[0]->dtype, T,
                    avg_pool_kernel<T><<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>(
                        (const T *)node->in[0]->data, (T *)node->out[0]->data, g));
    return GDP_OK;
}
CU_LAUNCHER(avg_pool_run)

static gdp_status avg_pool_grad_run(cu_backend *be, const gdp_node *node, cudaStream_t s, gdp_err *err)
{
    pool_geom g;
    if (!pool_geom_of(node, node->out[0]->shape, &g))
        return gdp_fail(err, GDP_ERR_INVALID, "cuda avg_pool2d_grad: bad geometry");
    int64_t n = gdp_numel(node->out[0]);
    CU_FLOAT_SWITCH(node->out[0]->dtype, T,
                    avg_pool_grad_kernel<T><<<cu_blocks(be, n, THREADS), THREADS, 0, s>>>(
                        (const T *)node->in[0]->data, (T *)node->out[0]->data, g));
    return GDP_OK;
}
CU_LAUNCHER(avg_pool_grad_run)

#define FLOATS3(op, sup, fn, attrs) \
    CU_K(op, GDP_F32, sup, fn, attrs), CU_K(op, GDP_F16, sup, fn, attrs), CU_K(op, GDP_BF16, sup, fn, attrs)

static const gdp_kernel kernels[] = {
    FLOATS3("max_pool2d", pool_supports, max_pool_run_launch, pool_attr_names),
    FLOATS3("max_pool2d_grad", max_pool_grad_supports, max_pool_grad_run_launch, pool_attr_names),
    FLOATS3("avg_pool2d", pool_supports, avg_pool_run_launch, pool_attr_names),
    FLOATS3("avg_pool2d_grad", avg_pool_grad_supports, avg_pool_grad_run_launch, pool_attr_names),
};
CU_FAMILY(pool, kernels);
