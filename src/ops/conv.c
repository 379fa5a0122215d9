/* conv.c — 2-D convolution (NCHW) and its two backward ops.
 *
 *   conv2d(x, w, [b])            x (N, C, H, W), w (Co, C/groups, kh, kw), b (Co)
 *                                -> y (N, Co, Ho, Wo)
 *   conv2d_grad_input(dy, w)     -> dx (N, C, H, W); attr input_shape = [N, C, H, W]
 *   conv2d_grad_weight(dy, x)    -> dw (Co, C/groups, kh, kw); attr weight_shape = w's shape
 *
 * stride, padding and dilation are square (one int each); padding is zeros.
 *   Ho = (H + 2 padding - dilation (kh - 1) - 1) / stride + 1      (floor)
 *
 * The reference works one sample and one group at a time through im2col: the patch each
 * output position sees becomes a column of col (Cg kh kw, Ho Wo), so the convolution is
 * the GEMM w_g (Cog, Cg kh kw) @ col, its input gradient is w_g^T @ dy scattered back by
 * col2im, and its weight gradient is dy @ col^T. Everything is computed in double, on
 * copies gathered from the operands' strides into the node's workspace.
 */
#include "cost.h"
#include "refwalk.h"

#include <stdio.h>

typedef struct conv_geom {
    int64_t N, C, H, W;        // input
    int64_t Co, Cg, kh, kw;    // weight (Co, C/groups, kh, kw)
    int64_t Ho, Wo;            // output
    int64_t stride, pad, dil, groups;
} conv_geom;

static void conv_attrs(const gdp_attrs *a, conv_geom *g)
{
    g->stride = gdp_attr_int(a, "stride", 1);
    g->pad = gdp_attr_int(a, "padding", 0);
    g->dil = gdp_attr_int(a, "dilation", 1);
    g->groups = gdp_attr_int(a, "groups", 1);
}

static void conv_dims(conv_geom *g, const int64_t *xs, const int64_t *ws)
{
    g->N = xs[0], g->C = xs[1], g->H = xs[2], g->W = xs[3];
    g->Co = ws[0], g->Cg = ws[1], g->kh = ws[2], g->kw = ws[3];
    g->Ho = (g->H + 2 * g->pad - g->dil * (g->kh - 1) - 1) / g->stride + 1;
    g->Wo = (g->W + 2 * g->pad - g->dil * (g->kw - 1) - 1) / g->stride + 1;
}

static const char *ints_str(const int64_t *v, int n, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && k < cap; i++) k += (size_t)snprintf(buf + k, cap - k, i ? ", %lld" : "%lld", (long long)v[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

/* Validates attributes and the input/weight shapes (xs, ws: 4 dims each, described by
 * xd, wd for messages) and fills g. Shared by the three shape rules. */
static int conv_check(gd_infer *c, const int64_t *xs, const char *xd, const int64_t *ws, const char *wd, conv_geom *g)
{
    conv_attrs(c->attrs, g);
    if (g->stride < 1 || g->pad < 0 || g->dil < 1 || g->groups < 1)
        return gd_infer_fail(c, "stride=%lld padding=%lld dilation=%lld groups=%lld: need stride, dilation, groups >= 1 "
                             "and padding >= 0", (long long)g->stride, (long long)g->pad, (long long)g->dil,
                             (long long)g->groups);
    for (int i = 0; i < 4; i++)
        if (xs[i] < 1 || ws[i] < 1) return gd_infer_fail(c, "x %s and w %s must have no empty dims", xd, wd);
    if (xs[1] % g->groups != 0 || ws[0] % g->groups != 0)
        return gd_infer_fail(c, "x %s channels and w %s output channels must be multiples of groups=%lld", xd, wd,
                             (long long)g->groups);
    if (ws[1] * g->groups != xs[1])
        return gd_infer_fail(c, "w %s expects %lld input channels per group but x %s has %lld / groups=%lld", wd,
                             (long long)ws[1], xd, (long long)xs[1], (long long)g->groups);
    conv_dims(g, xs, ws);
    if (g->H + 2 * g->pad < g->dil * (g->kh - 1) + 1 || g->W + 2 * g->pad < g->dil * (g->kw - 1) + 1)
        return gd_infer_fail(c, "w %s (dilation=%lld) does not fit in x %s padded by %lld", wd, (long long)g->dil, xd,
                             (long long)g->pad);
    return 0;
}

static int conv2d_infer(gd_infer *c)
{
    const gd_shape *x = &c->in[0], *w = &c->in[1];
    char sx[160], sw[160], sb[160];
    gd_shape_str(x, sx, sizeof sx);
    gd_shape_str(w, sw, sizeof sw);
    if (x->ndim != 4 || w->ndim != 4)
        return gd_infer_fail(c, "x %s must be (N, C, H, W) and w %s (Co, C/groups, kh, kw)", sx, sw);
    if (x->dtype != w->dtype) return gd_infer_fail(c, "x %s and w %s differ in dtype", sx, sw);
    conv_geom g = {0};
    if (conv_check(c, x->dim, sx, w->dim, sw, &g) != 0) return 1;
    if (c->n_in > 2) {
        const gd_shape *b = &c->in[2];
        gd_shape_str(b, sb, sizeof sb);
        if (b->dtype != x->dtype) return gd_infer_fail(c, "bias %s and x %s differ in dtype", sb, sx);
        if (b->ndim != 1 || b->dim[0] != g.Co)
            return gd_infer_fail(c, "bias %s must be [%lld] to match w %s", sb, (long long)g.Co, sw);
    }
    c->out[0] = (gd_shape){.dtype = x->dtype, .ndim = 4, .dim = {g.N, g.Co, g.Ho, g.Wo}};
    return 0;
}

/* dy must be exactly what conv2d of the given geometry produces. */
static int check_dy(gd_infer *c, const gd_shape *dy, const conv_geom *g)
{
    char sd[160];
    gd_shape_str(dy, sd, sizeof sd);
    if (dy->ndim != 4 || dy->dim[0] != g->N || dy->dim[1] != g->Co || dy->dim[2] != g->Ho || dy->dim[3] != g->Wo)
        return gd_infer_fail(c, "dy %s must be [%lld, %lld, %lld, %lld]", sd, (long long)g->N, (long long)g->Co,
                             (long long)g->Ho, (long long)g->Wo);
    return 0;
}

static int conv2d_grad_input_infer(gd_infer *c)
{
    const gd_shape *dy = &c->in[0], *w = &c->in[1];
    int64_t xs[GDP_MAX_DIMS];
    char sd[160], sw[160], sx[160];
    gd_shape_str(dy, sd, sizeof sd);
    gd_shape_str(w, sw, sizeof sw);
    int n = gdp_attr_ints(c->attrs, "input_shape", xs, GDP_MAX_DIMS);
    if (n != 4) return gd_infer_fail(c, "attribute input_shape must be [N, C, H, W] (got %d ints)", n);
    ints_str(xs, 4, sx, sizeof sx);
    if (w->ndim != 4) return gd_infer_fail(c, "w %s must be (Co, C/groups, kh, kw)", sw);
    if (dy->dtype != w->dtype) return gd_infer_fail(c, "dy %s and w %s differ in dtype", sd, sw);
    conv_geom g = {0};
    if (conv_check(c, xs, sx, w->dim, sw, &g) != 0 || check_dy(c, dy, &g) != 0) return 1;
    c->out[0] = (gd_shape){.dtype = dy->dtype, .ndim = 4, .dim = {xs[0], xs[1], xs[2], xs[3]}};
    return 0;
}

static int conv2d_grad_weight_infer(gd_infer *c)
{
    const gd_shape *dy = &c->in[0], *x = &c->in[1];
    int64_t ws[GDP_MAX_DIMS];
    char sd[160], sw[160], sx[160];
    gd_shape_str(dy, sd, sizeof sd);
    gd_shape_str(x, sx, sizeof sx);
    int n = gdp_attr_ints(c->attrs, "weight_shape", ws, GDP_MAX_DIMS);
    if (n != 4) return gd_infer_fail(c, "attribute weight_shape must be [Co, C/groups, kh, kw] (got %d ints)", n);
    ints_str(ws, 4, sw, sizeof sw);
    if (x->ndim != 4) return gd_infer_fail(c, "x %s must be (N, C, H, W)", sx);
    if (dy->dtype != x->dtype) return gd_infer_fail(c, "dy %s and x %s differ in dtype", sd, sx);
    conv_geom g = {0};
    if (conv_check(c, x->dim, sx, ws, sw, &g) != 0 || check_dy(c, dy, &g) != 0) return 1;
    c->out[0] = (gd_shape){.dtype = dy->dtype, .ndim = 4, .dim = {ws[0], ws[1], ws[2], ws[3]}};
    return 0;
}

/* ---- reference kernels -------------------------------------------------------------------- */

/* Sample n of a 4-D operand (x or dy, any strides) into dst as contiguous doubles. */
static void load_sample(const gdp_tensor *t, int64_t n, double *dst) { rw_gather_from(t, 1, n * t->stride[0], dst); }

static void store(const gdp_tensor *t, int64_t off, int64_t n, const double *src)
{
    if (t->dtype == GDP_F32) {
        float *p = (float *)t->data + off;
        for (int64_t i = 0; i < n; i++) p[i] = (float)src[i];
    } else {
        for (int64_t i = 0; i < n; i++) rw_st(t, off + i, src[i]);
    }
}

// col (Cg kh kw, Ho Wo) from x (Cg, H, W): row (c, i, j) holds what kernel tap (i, j) of
// channel c sees at every output position; zero where the tap lands in the padding.
static void im2col(const conv_geom *g, const double *x, double *col)
{
    int64_t P = g->Ho * g->Wo;
    for (int64_t c = 0; c < g->Cg; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                double *dst = col + ((c * g->kh + i) * g->kw + j) * P;
                for (int64_t oh = 0; oh < g->Ho; oh++) {
                    int64_t ih = oh * g->stride - g->pad + i * g->dil;
                    double *d = dst + oh * g->Wo;
                    if (ih < 0 || ih >= g->H) {
                        for (int64_t ow = 0; ow < g->Wo; ow++) d[ow] = 0;
                        continue;
                    }
                    const double *src = x + (c * g->H + ih) * g->W;
                    for (int64_t ow = 0; ow < g->Wo; ow++) {
                        int64_t iw = ow * g->stride - g->pad + j * g->dil;
                        d[ow] = iw >= 0 && iw < g->W ? src[iw] : 0;
                    }
                }
            }
}

// dx (Cg, H, W) += the adjoint of im2col applied to dcol (Cg kh kw, Ho Wo)
static void col2im(const conv_geom *g, const double *dcol, double *dx)
{
    int64_t P = g->Ho * g->Wo;
    for (int64_t c = 0; c < g->Cg; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                const double *src = dcol + ((c * g->kh + i) * g->kw + j) * P;
                for (int64_t oh = 0; oh < g->Ho; oh++) {
                    int64_t ih = oh * g->stride - g->pad + i * g->dil;
                    if (ih < 0 || ih >= g->H) continue;
                    double *d = dx + (c * g->H + ih) * g->W;
                    for (int64_t ow = 0; ow < g->Wo; ow++) {
                        int64_t iw = ow * g->stride - g->pad + j * g->dil;
                        if (iw >= 0 && iw < g->W) d[iw] += src[oh * g->Wo + ow];
                    }
                }
            }
}

/* Scratch of a kernel: up to five double buffers laid out one after the other in the
 * node's workspace, their sizes (in doubles) given by scratch_sizes. */
typedef struct scratch {
    double *p[5];
} scratch;

enum { CONV_FWD, CONV_GRAD_INPUT, CONV_GRAD_WEIGHT };

static int scratch_sizes(int kind, const conv_geom *g, int64_t *sizes)
{
    int64_t P = g->Ho * g->Wo, K = g->Cg * g->kh * g->kw, X = g->C * g->H * g->W;
    switch (kind) {
    case CONV_FWD: // x sample, w, col, one output row, bias
        sizes[0] = X, sizes[1] = g->Co * K, sizes[2] = K * P, sizes[3] = P, sizes[4] = g->Co;
        return 5;
    case CONV_GRAD_INPUT: // dy sample, w, dcol, dx sample
        sizes[0] = g->Co * P, sizes[1] = g->Co * K, sizes[2] = K * P, sizes[3] = X;
        return 4;
    default: // dy sample, x sample, col, col^T, dw
        sizes[0] = g->Co * P, sizes[1] = X, sizes[2] = K * P, sizes[3] = P * K, sizes[4] = g->Co * K;
        return 5;
    }
}

static size_t scratch_bytes(int kind, const conv_geom *g)
{
    int64_t sizes[5];
    size_t total = 0;
    for (int i = 0, n = scratch_sizes(kind, g, sizes); i < n; i++) total += rw_doubles(sizes[i]);
    return total;
}

/* The buffers in node->workspace; 0 with a message in err when it is short. */
static int scratch_get(const gdp_node *node, int kind, const conv_geom *g, scratch *s, gdp_err *err)
{
    int64_t sizes[5];
    int n = scratch_sizes(kind, g, sizes);
    char *ws = rw_workspace(node, scratch_bytes(kind, g), err);
    if (ws == NULL) return 0;
    for (int i = 0; i < 5; i++) s->p[i] = NULL;
    for (int i = 0; i < n; i++) {
        s->p[i] = (double *)ws;
        ws += rw_doubles(sizes[i]);
    }
    return 1;
}

/* The geometry of a node of each kind: x's shape is in[0] (conv2d), out[0]
 * (conv2d_grad_input) or in[1] (conv2d_grad_weight); w's is in[1] or out[0]. */
static conv_geom node_geom(const gdp_node *node, int kind)
{
    conv_geom g = {0};
    conv_attrs(&node->attrs, &g);
    const gdp_tensor *x = kind == CONV_FWD ? node->in[0] : kind == CONV_GRAD_INPUT ? node->out[0] : node->in[1];
    const gdp_tensor *w = kind == CONV_GRAD_WEIGHT ? node->out[0] : node->in[1];
    conv_dims(&g, x->shape, w->shape);
    return g;
}

static size_t ws_conv2d(const gdp_node *node)
{
    conv_geom g = node_geom(node, CONV_FWD);
    return scratch_bytes(CONV_FWD, &g);
}
static size_t ws_conv2d_grad_input(const gdp_node *node)
{
    conv_geom g = node_geom(node, CONV_GRAD_INPUT);
    return scratch_bytes(CONV_GRAD_INPUT, &g);
}
static size_t ws_conv2d_grad_weight(const gdp_node *node)
{
    conv_geom g = node_geom(node, CONV_GRAD_WEIGHT);
    return scratch_bytes(CONV_GRAD_WEIGHT, &g);
}

static int ref_dtype_ok(const gdp_tensor *t) { return t->dtype == GDP_F32 || t->dtype == GDP_F64; }

// y (N, Co, Ho, Wo) = conv(x (N, C, H, W), w (Co, Cg, kh, kw)) + b (Co)
static gdp_status conv2d_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    const gdp_tensor *x = node->in[0], *w = node->in[1], *b = node->n_in > 2 ? node->in[2] : NULL;
    const gdp_tensor *y = node->out[0];
    if (!ref_dtype_ok(x)) return gdp_fail(err, GDP_ERR_UNSUPPORTED, "the reference takes f32/f64");
    conv_geom g = node_geom(node, CONV_FWD);
    int64_t P = g.Ho * g.Wo, K = g.Cg * g.kh * g.kw, Cog = g.Co / g.groups;
    scratch s;
    if (!scratch_get(node, CONV_FWD, &g, &s, err)) return GDP_ERR_INVALID;
    double *xd = s.p[0], *wd = s.p[1], *col = s.p[2], *acc = s.p[3], *bias = s.p[4];
    rw_gather(w, wd);
    if (b != NULL) rw_gather(b, bias);
    else
        for (int64_t o = 0; o < g.Co; o++) bias[o] = 0;
    for (int64_t n = 0; n < g.N; n++) {
        load_sample(x, n, xd);
        for (int64_t gr = 0; gr < g.groups; gr++) {
            im2col(&g, xd + gr * g.Cg * g.H * g.W, col);
            for (int64_t oo = 0; oo < Cog; oo++) {
                int64_t o = gr * Cog + oo;
                for (int64_t p = 0; p < P; p++) acc[p] = bias[o];
                // acc (P) += w[o] (K) @ col (K, P), i-k-j order
                for (int64_t k = 0; k < K; k++) {
                    double wv = wd[o * K + k];
                    const double *cr = col + k * P;
                    for (int64_t p = 0; p < P; p++) acc[p] += wv * cr[p];
                }
                store(y, (n * g.Co + o) * P, P, acc);
            }
        }
    }
    return GDP_OK;
}

// dx (N, C, H, W) = col2im(w_g^T @ dy_g) for each sample and group
static gdp_status conv2d_grad_input_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    const gdp_tensor *dy = node->in[0], *w = node->in[1], *dx = node->out[0];
    if (!ref_dtype_ok(dy)) return gdp_fail(err, GDP_ERR_UNSUPPORTED, "the reference takes f32/f64");
    conv_geom g = node_geom(node, CONV_GRAD_INPUT);
    int64_t P = g.Ho * g.Wo, K = g.Cg * g.kh * g.kw, Cog = g.Co / g.groups;
    scratch s;
    if (!scratch_get(node, CONV_GRAD_INPUT, &g, &s, err)) return GDP_ERR_INVALID;
    double *dyd = s.p[0], *wd = s.p[1], *dcol = s.p[2], *dxd = s.p[3];
    rw_gather(w, wd);
    for (int64_t n = 0; n < g.N; n++) {
        load_sample(dy, n, dyd);
        for (int64_t i = 0; i < g.C * g.H * g.W; i++) dxd[i] = 0;
        for (int64_t gr = 0; gr < g.groups; gr++) {
            // dcol (K, P) = w_g^T (K, Cog) @ dy_g (Cog, P), row by row
            for (int64_t k = 0; k < K; k++) {
                double *d = dcol + k * P;
                for (int64_t p = 0; p < P; p++) d[p] = 0;
                for (int64_t oo = 0; oo < Cog; oo++) {
                    int64_t o = gr * Cog + oo;
                    double wv = wd[o * K + k];
                    const double *dr = dyd + o * P;
                    for (int64_t p = 0; p < P; p++) d[p] += wv * dr[p];
                }
            }
            col2im(&g, dcol, dxd + gr * g.Cg * g.H * g.W);
        }
        store(dx, n * g.C * g.H * g.W, g.C * g.H * g.W, dxd);
    }
    return GDP_OK;
}

// dw (Co, Cg, kh, kw) = sum over samples of dy_g (Cog, P) @ col^T (P, K). col is
// transposed first so that the product runs i-k-j, streaming rows of dw and col^T,
// rather than as dot products whose serial sums do not vectorize.
static gdp_status conv2d_grad_weight_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    const gdp_tensor *dy = node->in[0], *x = node->in[1], *dw = node->out[0];
    if (!ref_dtype_ok(dy)) return gdp_fail(err, GDP_ERR_UNSUPPORTED, "the reference takes f32/f64");
    conv_geom g = node_geom(node, CONV_GRAD_WEIGHT);
    int64_t P = g.Ho * g.Wo, K = g.Cg * g.kh * g.kw, Cog = g.Co / g.groups;
    scratch s;
    if (!scratch_get(node, CONV_GRAD_WEIGHT, &g, &s, err)) return GDP_ERR_INVALID;
    double *dyd = s.p[0], *xd = s.p[1], *col = s.p[2], *colt = s.p[3], *dwd = s.p[4];
    for (int64_t i = 0; i < g.Co * K; i++) dwd[i] = 0;
    for (int64_t n = 0; n < g.N; n++) {
        load_sample(dy, n, dyd);
        load_sample(x, n, xd);
        for (int64_t gr = 0; gr < g.groups; gr++) {
            im2col(&g, xd + gr * g.Cg * g.H * g.W, col);
            for (int64_t k = 0; k < K; k++)
                for (int64_t p = 0; p < P; p++) colt[p * K + k] = col[k * P + p];
            for (int64_t oo = 0; oo < Cog; oo++) {
                int64_t o = gr * Cog + oo;
                double *d = dwd + o * K;
                for (int64_t p = 0; p < P; p++) {
                    double dv = dyd[o * P + p];
                    const double *cr = colt + p * K;
                    for (int64_t k = 0; k < K; k++) d[k] += dv * cr[k];
                }
            }
        }
    }
    store(dw, 0, g.Co * K, dwd);
    return GDP_OK;
}

/* ---- gradient rule and builder --------------------------------------------------------- */

static int conv_attr_list(const gdp_attrs *a, gd_attr *out)
{
    conv_geom g = {0};
    conv_attrs(a, &g);
    out[0] = gd_attr_i("stride", g.stride);
    out[1] = gd_attr_i("padding", g.pad);
    out[2] = gd_attr_i("dilation", g.dil);
    out[3] = gd_attr_i("groups", g.groups);
    return 4;
}

static gd_status conv2d_grad(gd_grad_ctx *c)
{
    gd_tensor *x = c->in[0], *w = c->in[1], *dy = c->dout[0];
    gd_attr at[5];
    int na = conv_attr_list(c->attrs, at);
    int64_t shape[4];

    for (int d = 0; d < 4; d++) shape[d] = gd_tensor_dim(x, d);
    at[na] = gd_attr_is("input_shape", 4, shape);
    c->din[0] = gd_op(c->g, "conv2d_grad_input", 2, (gd_tensor *[]){dy, w}, na + 1, at);

    for (int d = 0; d < 4; d++) shape[d] = gd_tensor_dim(w, d);
    at[na] = gd_attr_is("weight_shape", 4, shape);
    c->din[1] = gd_op(c->g, "conv2d_grad_weight", 2, (gd_tensor *[]){dy, x}, na + 1, at);

    int ok = c->din[0] != NULL && c->din[1] != NULL;
    if (c->n_in > 2) {
        c->din[2] = gd_sum(dy, 3, (int64_t[]){0, 2, 3}, 0); // (Co)
        ok = ok && c->din[2] != NULL;
    }
    return ok ? GD_OK : GD_ERR_SHAPE;
}

gd_tensor *gd_conv2d(gd_tensor *x, gd_tensor *w, gd_tensor *bias, int64_t stride, int64_t padding,
                     int64_t dilation, int64_t groups)
{
    if (x == NULL || w == NULL) return NULL;
    gd_attr at[4] = {gd_attr_i("stride", stride), gd_attr_i("padding", padding), gd_attr_i("dilation", dilation),
                     gd_attr_i("groups", groups)};
    gd_tensor *in[3] = {x, w, bias};
    return gd_op(gd_tensor_graph(x), "conv2d", bias != NULL ? 3 : 2, in, 4, at);
}

/* Cases cover bias/no bias, non-square kernels, stride with leftover rows, padding,
 * dilation, groups (and depthwise), 1x1 kernels and a kernel as large as the input. */
static const char *const conv2d_cases[] = {
    "f[2,3,5,5] f[4,3,3,3] f[4]",
    "f[1,2,6,7] f[3,2,3,2] | stride=2 padding=1",
    "f[1,2,6,6] f[2,2,3,3] f[2] | stride=2",
    "f[2,4,7,7] f[6,2,3,3] f[6] | groups=2 padding=1",
    "f[1,2,9,9] f[2,2,3,3] | dilation=2 padding=2",
    "f[1,4,5,5] f[4,1,3,3] f[4] | groups=4 padding=1 stride=2",
    "f[2,3,4,4] f[2,3,1,1]",
    "f[1,1,3,3] f[1,1,3,3] f[1]",
    NULL,
};

static const char *const conv2d_grad_input_cases[] = {
    "f[2,4,3,3] f[4,3,3,3] | input_shape=[2,3,5,5]",
    "f[1,3,3,4] f[3,2,3,2] | stride=2 padding=1 input_shape=[1,2,6,7]",
    "f[1,2,2,2] f[2,2,3,3] | stride=2 input_shape=[1,2,6,6]",
    "f[2,6,7,7] f[6,2,3,3] | groups=2 padding=1 input_shape=[2,4,7,7]",
    "f[1,2,9,9] f[2,2,3,3] | dilation=2 padding=2 input_shape=[1,2,9,9]",
    "f[1,4,3,3] f[4,1,3,3] | groups=4 padding=1 stride=2 input_shape=[1,4,5,5]",
    NULL,
};

static const char *const conv2d_grad_weight_cases[] = {
    "f[2,4,3,3] f[2,3,5,5] | weight_shape=[4,3,3,3]",
    "f[1,3,3,4] f[1,2,6,7] | stride=2 padding=1 weight_shape=[3,2,3,2]",
    "f[1,2,2,2] f[1,2,6,6] | stride=2 weight_shape=[2,2,3,3]",
    "f[2,6,7,7] f[2,4,7,7] | groups=2 padding=1 weight_shape=[6,2,3,3]",
    "f[1,2,9,9] f[1,2,9,9] | dilation=2 padding=2 weight_shape=[2,2,3,3]",
    "f[1,4,3,3] f[1,4,5,5] | groups=4 padding=1 stride=2 weight_shape=[4,1,3,3]",
    NULL,
};

/* conv2d and both gradients: 2 (C/groups) kh kw operations per element of the output-
 * shaped tensor (y, or dy), whatever is computed from it. */
static void cost_conv(const gdp_node *n, const gdp_tensor *y, const gdp_tensor *w, double *bytes, double *flops)
{
    double taps = w->ndim == 4 ? (double)(w->shape[1] * w->shape[2] * w->shape[3]) : 1;
    *bytes = gd_cost_io_bytes(n);
    *flops = 2.0 * (double)gdp_numel(y) * taps;
}
static void cost_conv2d(const gdp_node *n, double *bytes, double *flops)
{
    cost_conv(n, n->out[0], n->in[1], bytes, flops);
    if (n->n_in > 2) *flops += (double)gdp_numel(n->out[0]); /* the bias */
}
static void cost_conv2d_grad_input(const gdp_node *n, double *bytes, double *flops)
{
    cost_conv(n, n->in[0], n->in[1], bytes, flops); /* (dy, w) -> dx */
}
static void cost_conv2d_grad_weight(const gdp_node *n, double *bytes, double *flops)
{
    cost_conv(n, n->in[0], n->out[0], bytes, flops); /* (dy, x) -> dw */
}

GD_FAMILY(conv)
{
    static const gd_op_def conv2d = {
        .name = "conv2d", .min_in = 2, .max_in = 3, .n_out = 1,
        .attrs = "stride:int padding:int dilation:int groups:int",
        .dtypes = GD_FLOATS,
        .infer = conv2d_infer, .grad = conv2d_grad, .ref = conv2d_ref,
        .ref_dtypes = GD_M(GDP_F32) | GD_M(GDP_F64),
        .cases = conv2d_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .ref_workspace = ws_conv2d, .ref_strided = 1, .cost = cost_conv2d,
        .doc = "x (N, C, H, W) * w (Co, C/groups, kh, kw) [+ b (Co)], zero padding; defaults stride 1 padding 0 "
               "dilation 1 groups 1",
    };
    static const gd_op_def grad_input = {
        .name = "conv2d_grad_input", .min_in = 2, .max_in = 2, .n_out = 1,
        .attrs = "stride:int padding:int dilation:int groups:int input_shape:ints",
        .dtypes = GD_FLOATS,
        .infer = conv2d_grad_input_infer, .grad = NULL, .ref = conv2d_grad_input_ref,
        .ref_dtypes = GD_M(GDP_F32) | GD_M(GDP_F64),
        .cases = conv2d_grad_input_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .ref_workspace = ws_conv2d_grad_input, .ref_strided = 1, .cost = cost_conv2d_grad_input,
        .doc = "(dy, w) -> dx of conv2d, dx's shape from input_shape [N, C, H, W]",
    };
    static const gd_op_def grad_weight = {
        .name = "conv2d_grad_weight", .min_in = 2, .max_in = 2, .n_out = 1,
        .attrs = "stride:int padding:int dilation:int groups:int weight_shape:ints",
        .dtypes = GD_FLOATS,
        .infer = conv2d_grad_weight_infer, .grad = NULL, .ref = conv2d_grad_weight_ref,
        .ref_dtypes = GD_M(GDP_F32) | GD_M(GDP_F64),
        .cases = conv2d_grad_weight_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .ref_workspace = ws_conv2d_grad_weight, .ref_strided = 1, .cost = cost_conv2d_grad_weight,
        .doc = "(dy, x) -> dw of conv2d, dw's shape from weight_shape [Co, C/groups, kh, kw]",
    };
    gd_register_op(r, &conv2d);
    gd_register_op(r, &grad_input);
    gd_register_op(r, &grad_weight);
}
