/* pool.c — 2-D max and average pooling (NCHW) and their backward ops.
 *
 *   max_pool2d(x)               x (N, C, H, W) -> (N, C, Ho, Wo); padding is -inf
 *   max_pool2d_grad(dy, x)      -> dx: each dy goes to the first max of its window
 *                               (row-major scan of the window), summed where windows overlap
 *   avg_pool2d(x)               padding counts in the divisor: always kernel^2
 *   avg_pool2d_grad(dy)         -> dx; attr input_shape = [N, C, H, W]
 *
 * Attributes: kernel (required, >= 1), stride (absent or 0: = kernel), padding (0 to
 * kernel/2, so that every window holds at least one real element).
 *   Ho = (H + 2 padding - kernel) / stride + 1      (floor)
 */
#include "opdef.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct pool_geom {
    int64_t N, C, H, W;
    int64_t k, s, p;
    int64_t Ho, Wo;
} pool_geom;

static void pool_attrs(const gdp_attrs *a, pool_geom *g)
{
    g->k = gdp_attr_int(a, "kernel", 0);
    g->s = gdp_attr_int(a, "stride", 0);
    if (g->s == 0) g->s = g->k;
    g->p = gdp_attr_int(a, "padding", 0);
}

static void pool_dims(pool_geom *g, const int64_t *xs)
{
    g->N = xs[0], g->C = xs[1], g->H = xs[2], g->W = xs[3];
    g->Ho = (g->H + 2 * g->p - g->k) / g->s + 1;
    g->Wo = (g->W + 2 * g->p - g->k) / g->s + 1;
}

/* Validates the attributes against input shape xs (4 dims, `xd` for messages). */
static int pool_check(gd_infer *c, const int64_t *xs, const char *xd, pool_geom *g)
{
    pool_attrs(c->attrs, g);
    if (g->k < 1 || g->s < 1 || g->p < 0 || 2 * g->p > g->k)
        return gd_infer_fail(c, "kernel=%lld stride=%lld padding=%lld: need kernel >= 1, stride >= 1 and "
                             "0 <= padding <= kernel/2", (long long)g->k, (long long)g->s, (long long)g->p);
    for (int i = 0; i < 4; i++)
        if (xs[i] < 1) return gd_infer_fail(c, "x %s must have no empty dims", xd);
    if (xs[2] + 2 * g->p < g->k || xs[3] + 2 * g->p < g->k)
        return gd_infer_fail(c, "kernel=%lld does not fit in x %s padded by %lld", (long long)g->k, xd, (long long)g->p);
    pool_dims(g, xs);
    return 0;
}

static int pool_infer(gd_infer *c)
{
    const gd_shape *x = &c->in[0];
    char sx[160];
    gd_shape_str(x, sx, sizeof sx);
    if (x->ndim != 4) return gd_infer_fail(c, "x %s must be (N, C, H, W)", sx);
    pool_geom g = {0};
    if (pool_check(c, x->dim, sx, &g) != 0) return 1;
    c->out[0] = (gd_shape){.dtype = x->dtype, .ndim = 4, .dim = {g.N, g.C, g.Ho, g.Wo}};
    return 0;
}

static int check_dy(gd_infer *c, const gd_shape *dy, const pool_geom *g)
{
    char sd[160];
    gd_shape_str(dy, sd, sizeof sd);
    if (dy->ndim != 4 || dy->dim[0] != g->N || dy->dim[1] != g->C || dy->dim[2] != g->Ho || dy->dim[3] != g->Wo)
        return gd_infer_fail(c, "dy %s must be [%lld, %lld, %lld, %lld]", sd, (long long)g->N, (long long)g->C,
                             (long long)g->Ho, (long long)g->Wo);
    return 0;
}

static int max_pool2d_grad_infer(gd_infer *c)
{
    const gd_shape *dy = &c->in[0], *x = &c->in[1];
    char sd[160], sx[160];
    gd_shape_str(dy, sd, sizeof sd);
    gd_shape_str(x, sx, sizeof sx);
    if (x->ndim != 4) return gd_infer_fail(c, "x %s must be (N, C, H, W)", sx);
    if (dy->dtype != x->dtype) return gd_infer_fail(c, "dy %s and x %s differ in dtype", sd, sx);
    pool_geom g = {0};
    if (pool_check(c, x->dim, sx, &g) != 0 || check_dy(c, dy, &g) != 0) return 1;
    c->out[0] = *x;
    return 0;
}

static int avg_pool2d_grad_infer(gd_infer *c)
{
    const gd_shape *dy = &c->in[0];
    int64_t xs[GDP_MAX_DIMS];
    char sx[160];
    int n = gdp_attr_ints(c->attrs, "input_shape", xs, GDP_MAX_DIMS);
    if (n != 4) return gd_infer_fail(c, "attribute input_shape must be [N, C, H, W] (got %d ints)", n);
    snprintf(sx, sizeof sx, "[%lld, %lld, %lld, %lld]", (long long)xs[0], (long long)xs[1], (long long)xs[2],
             (long long)xs[3]);
    pool_geom g = {0};
    if (pool_check(c, xs, sx, &g) != 0 || check_dy(c, dy, &g) != 0) return 1;
    c->out[0] = (gd_shape){.dtype = dy->dtype, .ndim = 4, .dim = {xs[0], xs[1], xs[2], xs[3]}};
    return 0;
}

/* ---- reference kernels ---------------------------------------------------------------------- */

/* Index (within the plane starting at `base`) of the first maximum of window (oh, ow),
 * scanning rows then columns; a NaN wins so that it propagates. Padding never wins:
 * pool_check guarantees a real element in every window. */
static int64_t window_argmax(const gdp_tensor *x, int64_t base, const pool_geom *g, int64_t oh, int64_t ow)
{
    int64_t best_i = -1;
    double best = 0;
    for (int64_t i = 0; i < g->k; i++) {
        int64_t ih = oh * g->s - g->p + i;
        if (ih < 0 || ih >= g->H) continue;
        for (int64_t j = 0; j < g->k; j++) {
            int64_t iw = ow * g->s - g->p + j;
            if (iw < 0 || iw >= g->W) continue;
            double v = gd_ref_load(x, base + ih * g->W + iw);
            if (best_i < 0 || v > best || (isnan(v) && !isnan(best))) {
                best = v;
                best_i = ih * g->W + iw;
            }
        }
    }
    return best_i;
}

// y (N, C, Ho, Wo) = max over each window of x (N, C, H, W)
static gdp_status max_pool2d_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    (void)err;
    const gdp_tensor *x = &node->in[0], *y = &node->out[0];
    pool_geom g = {0};
    pool_attrs(&node->attrs, &g);
    pool_dims(&g, x->shape);
    for (int64_t pl = 0; pl < g.N * g.C; pl++) {
        int64_t base = pl * g.H * g.W;
        for (int64_t oh = 0; oh < g.Ho; oh++)
            for (int64_t ow = 0; ow < g.Wo; ow++) {
                int64_t i = window_argmax(x, base, &g, oh, ow);
                gd_ref_store(y, (pl * g.Ho + oh) * g.Wo + ow, gd_ref_load(x, base + i));
            }
    }
    return GDP_OK;
}

// dx (N, C, H, W): each dy (N, C, Ho, Wo) added at its window's first max
static gdp_status max_pool2d_grad_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    const gdp_tensor *dy = &node->in[0], *x = &node->in[1], *dx = &node->out[0];
    pool_geom g = {0};
    pool_attrs(&node->attrs, &g);
    pool_dims(&g, x->shape);
    double *plane = malloc(sizeof(double) * (size_t)(g.H * g.W));
    if (plane == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "out of memory");
    for (int64_t pl = 0; pl < g.N * g.C; pl++) {
        int64_t base = pl * g.H * g.W;
        for (int64_t i = 0; i < g.H * g.W; i++) plane[i] = 0;
        for (int64_t oh = 0; oh < g.Ho; oh++)
            for (int64_t ow = 0; ow < g.Wo; ow++)
                plane[window_argmax(x, base, &g, oh, ow)] += gd_ref_load(dy, (pl * g.Ho + oh) * g.Wo + ow);
        for (int64_t i = 0; i < g.H * g.W; i++) gd_ref_store(dx, base + i, plane[i]);
    }
    free(plane);
    return GDP_OK;
}

// y (N, C, Ho, Wo) = sum over each window of x / kernel^2 (padding counts as zeros)
static gdp_status avg_pool2d_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    (void)err;
    const gdp_tensor *x = &node->in[0], *y = &node->out[0];
    pool_geom g = {0};
    pool_attrs(&node->attrs, &g);
    pool_dims(&g, x->shape);
    double area = (double)(g.k * g.k);
    for (int64_t pl = 0; pl < g.N * g.C; pl++) {
        int64_t base = pl * g.H * g.W;
        for (int64_t oh = 0; oh < g.Ho; oh++)
            for (int64_t ow = 0; ow < g.Wo; ow++) {
                double sum = 0;
                for (int64_t i = 0; i < g.k; i++) {
                    int64_t ih = oh * g.s - g.p + i;
                    if (ih < 0 || ih >= g.H) continue;
                    for (int64_t j = 0; j < g.k; j++) {
                        int64_t iw = ow * g.s - g.p + j;
                        if (iw >= 0 && iw < g.W) sum += gd_ref_load(x, base + ih * g.W + iw);
                    }
                }
                gd_ref_store(y, (pl * g.Ho + oh) * g.Wo + ow, sum / area);
            }
    }
    return GDP_OK;
}

// dx (N, C, H, W): each dy / kernel^2 spread over the real elements of its window
static gdp_status avg_pool2d_grad_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    const gdp_tensor *dy = &node->in[0], *dx = &node->out[0];
    pool_geom g = {0};
    pool_attrs(&node->attrs, &g);
    pool_dims(&g, dx->shape);
    double area = (double)(g.k * g.k);
    double *plane = malloc(sizeof(double) * (size_t)(g.H * g.W));
    if (plane == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "out of memory");
    for (int64_t pl = 0; pl < g.N * g.C; pl++) {
        for (int64_t i = 0; i < g.H * g.W; i++) plane[i] = 0;
        for (int64_t oh = 0; oh < g.Ho; oh++)
            for (int64_t ow = 0; ow < g.Wo; ow++) {
                double d = gd_ref_load(dy, (pl * g.Ho + oh) * g.Wo + ow) / area;
                for (int64_t i = 0; i < g.k; i++) {
                    int64_t ih = oh * g.s - g.p + i;
                    if (ih < 0 || ih >= g.H) continue;
                    for (int64_t j = 0; j < g.k; j++) {
                        int64_t iw = ow * g.s - g.p + j;
                        if (iw >= 0 && iw < g.W) plane[ih * g.W + iw] += d;
                    }
                }
            }
        for (int64_t i = 0; i < g.H * g.W; i++) gd_ref_store(dx, pl * g.H * g.W + i, plane[i]);
    }
    free(plane);
    return GDP_OK;
}

/* ---- gradient rules and builders ----------------------------------------------------------- */

static int pool_attr_list(const gdp_attrs *a, gd_attr *out)
{
    pool_geom g = {0};
    pool_attrs(a, &g);
    out[0] = gd_attr_i("kernel", g.k);
    out[1] = gd_attr_i("stride", g.s);
    out[2] = gd_attr_i("padding", g.p);
    return 3;
}

static gd_status max_pool2d_backward(gd_grad_ctx *c)
{
    gd_attr at[3];
    int na = pool_attr_list(c->attrs, at);
    c->din[0] = gd_op(c->g, "max_pool2d_grad", 2, (gd_tensor *[]){c->dout[0], c->in[0]}, na, at);
    return c->din[0] != NULL ? GD_OK : GD_ERR_SHAPE;
}

static gd_status avg_pool2d_backward(gd_grad_ctx *c)
{
    gd_attr at[4];
    int na = pool_attr_list(c->attrs, at);
    int64_t shape[4];
    for (int d = 0; d < 4; d++) shape[d] = gd_tensor_dim(c->in[0], d);
    at[na++] = gd_attr_is("input_shape", 4, shape);
    c->din[0] = gd_op1(c->dout[0], "avg_pool2d_grad", na, at);
    return c->din[0] != NULL ? GD_OK : GD_ERR_SHAPE;
}

static gd_tensor *pool_build(gd_tensor *x, const char *op, int64_t kernel, int64_t stride, int64_t padding)
{
    gd_attr at[3] = {gd_attr_i("kernel", kernel), gd_attr_i("stride", stride == 0 ? kernel : stride),
                     gd_attr_i("padding", padding)};
    return gd_op1(x, op, 3, at);
}

gd_tensor *gd_max_pool2d(gd_tensor *x, int64_t kernel, int64_t stride, int64_t padding)
{
    return pool_build(x, "max_pool2d", kernel, stride, padding);
}

gd_tensor *gd_avg_pool2d(gd_tensor *x, int64_t kernel, int64_t stride, int64_t padding)
{
    return pool_build(x, "avg_pool2d", kernel, stride, padding);
}

/* Overlapping windows, gaps between windows (stride > kernel), padding, leftover rows,
 * kernel 1, and a window as large as the input. */
static const char *const pool_cases[] = {
    "f[2,3,4,4] | kernel=2",
    "f[1,2,5,5] | kernel=3 stride=2 padding=1",
    "f[1,1,5,6] | kernel=3 stride=1",
    "f[1,1,3,3] | kernel=3",
    "f[1,2,7,7] | kernel=2 stride=3",
    "f[2,1,6,5] | kernel=2 padding=1",
    "f[1,2,4,4] | kernel=1",
    NULL,
};

static const char *const max_pool2d_grad_cases[] = {
    "f[2,3,2,2] f[2,3,4,4] | kernel=2",
    "f[1,2,3,3] f[1,2,5,5] | kernel=3 stride=2 padding=1",
    "f[1,1,3,4] f[1,1,5,6] | kernel=3 stride=1",
    "f[1,2,2,2] f[1,2,7,7] | kernel=2 stride=3",
    "f[2,1,4,3] f[2,1,6,5] | kernel=2 padding=1",
    NULL,
};

static const char *const avg_pool2d_grad_cases[] = {
    "f[2,3,2,2] | kernel=2 input_shape=[2,3,4,4]",
    "f[1,2,3,3] | kernel=3 stride=2 padding=1 input_shape=[1,2,5,5]",
    "f[1,1,3,4] | kernel=3 stride=1 input_shape=[1,1,5,6]",
    "f[1,2,2,2] | kernel=2 stride=3 input_shape=[1,2,7,7]",
    "f[2,1,4,3] | kernel=2 padding=1 input_shape=[2,1,6,5]",
    NULL,
};

GD_FAMILY(pool)
{
    static const gd_op_def max_pool2d = {
        .name = "max_pool2d", .min_in = 1, .max_in = 1, .n_out = 1,
        .attrs = "kernel:int stride:int padding:int",
        .dtypes = GD_FLOATS,
        .infer = pool_infer, .grad = max_pool2d_backward, .ref = max_pool2d_ref,
        .cases = pool_cases, .inplace = {-1, -1, -1, -1}, .tol = 0,
        .doc = "max over kernel x kernel windows of x (N, C, H, W); stride 0 = kernel; padding -inf, <= kernel/2",
    };
    static const gd_op_def max_pool2d_grad = {
        .name = "max_pool2d_grad", .min_in = 2, .max_in = 2, .n_out = 1,
        .attrs = "kernel:int stride:int padding:int",
        .dtypes = GD_FLOATS,
        .infer = max_pool2d_grad_infer, .grad = NULL, .ref = max_pool2d_grad_ref,
        .cases = max_pool2d_grad_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-10,
        .doc = "(dy, x) -> dx of max_pool2d: dy routed to the first max of each window, summed over overlaps",
    };
    static const gd_op_def avg_pool2d = {
        .name = "avg_pool2d", .min_in = 1, .max_in = 1, .n_out = 1,
        .attrs = "kernel:int stride:int padding:int",
        .dtypes = GD_FLOATS,
        .infer = pool_infer, .grad = avg_pool2d_backward, .ref = avg_pool2d_ref,
        .cases = pool_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-10,
        .doc = "mean over kernel x kernel windows of x (N, C, H, W); zero padding counted in the divisor",
    };
    static const gd_op_def avg_pool2d_grad = {
        .name = "avg_pool2d_grad", .min_in = 1, .max_in = 1, .n_out = 1,
        .attrs = "kernel:int stride:int padding:int input_shape:ints",
        .dtypes = GD_FLOATS,
        .infer = avg_pool2d_grad_infer, .grad = NULL, .ref = avg_pool2d_grad_ref,
        .cases = avg_pool2d_grad_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-10,
        .doc = "(dy) -> dx of avg_pool2d, dx's shape from input_shape [N, C, H, W]",
    };
    gd_register_op(r, &max_pool2d);
    gd_register_op(r, &max_pool2d_grad);
    gd_register_op(r, &avg_pool2d);
    gd_register_op(r, &avg_pool2d_grad);
}
