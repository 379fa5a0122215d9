/* matmul_multi.c — products of one x with several weight matrices: linear_qkv and
 * linear_swiglu, optionally with the RMS norm of x in front. Graph passes make them for a
 * decode step; the row helpers are matmul.c's (matmul_ref.h). */
#include "cost.h"
#include "matmul_ref.h"

#include <string.h>

/* ---- linear_qkv and linear_swiglu ----------------------------------------------------- */

/* Products of one x with several weight matrices, which graph passes make for a decode
 * step, where each product is a read of its weights and a launch: attention's q, k and v
 * projections as one op, and a gated MLP's two products with SwiGLU between them. Both may
 * take the RMS norm in front of them as well (a transformer's input_layernorm before q, k,
 * v and post_attention_layernorm before the MLP): a norm weight g (in) after the matrices,
 * and eps. x is then normalized first, exactly as rms_norm(x, g; eps) computes and stores
 * it (rounded to x's dtype), and the products read that. */

/* The weight matrices of such a node: linear_swiglu (one output) has two, linear_qkv three. */
static int multi_weights(const gdp_node *node) { return node->n_out == 1 ? 2 : 3; }
static int multi_has_norm(const gdp_node *node) { return node->n_in > 1 + multi_weights(node); }

/* x (..., in), then `nw` matrices W_1 .. W_n (out_k, in) of x's dtype and optionally a norm
 * weight g (in); nw outputs shaped like x with out_k features, or one (the SwiGLU product)
 * when `joint` (the Ws then share out). */
static int multi_infer(gd_infer *c, int joint)
{
    const gd_shape *x = &c->in[0];
    const int nw = joint ? 2 : 3;
    char sx[160], sw[160];
    gd_shape_str(x, sx, sizeof sx);
    if (x->ndim < 1) return gd_infer_fail(c, "x %s must have at least 1 dim", sx);
    const int64_t K = x->dim[x->ndim - 1];
    for (int k = 1; k <= nw; k++) {
        const gd_shape *w = &c->in[k];
        gd_shape_str(w, sw, sizeof sw);
        if (w->dtype != x->dtype) return gd_infer_fail(c, "W%d %s and x %s differ in dtype", k, sw, sx);
        if (w->ndim != 2 || w->dim[1] != K)
            return gd_infer_fail(c, "W%d %s must be (out, %lld) for x %s", k, sw, (long long)K, sx);
        if (joint && w->dim[0] != c->in[1].dim[0])
            return gd_infer_fail(c, "W%d %s and W1 must have the same number of outputs", k, sw);
        gd_shape *o = &c->out[joint ? 0 : k - 1];
        *o = *x;
        o->dim[o->ndim - 1] = w->dim[0];
    }
    if (c->n_in > 1 + nw) {
        const gd_shape *g = &c->in[1 + nw];
        gd_shape_str(g, sw, sizeof sw);
        if (g->ndim != 1 || g->dim[0] != K || g->dtype != x->dtype)
            return gd_infer_fail(c, "norm weight %s must be %s[%lld], the last axis of x %s", sw,
                                 gd_dtype_name((gd_dtype)x->dtype), (long long)K, sx);
        double eps = gdp_attr_float(c->attrs, "eps", 1e-6);
        if (!(eps >= 0.0)) return gd_infer_fail(c, "eps %g must be >= 0 (x %s)", eps, sx);
    }
    return 0;
}
static int qkv_infer(gd_infer *c) { return multi_infer(c, 0); }
static int swiglu_infer(gd_infer *c) { return multi_infer(c, 1); }

/* xn (contiguous, x's shape and dtype) = rms_norm(x, g; eps) as that op computes and stores
 * it (norm.c): the row's sum of squares in double in index order, then x * inv * g, rounded
 * to the dtype. */
static void rms_rows(const gdp_tensor *x, const gdp_tensor *g, double eps, const gdp_tensor *xn)
{
    const int64_t K = x->shape[x->ndim - 1], xc = x->stride[x->ndim - 1], gc = g->stride[0];
    rw_walk rows;
    int64_t R = rw_rows(&rows, x, x->ndim - 1, 1, &x);
    for (int64_t r = 0; r < R; r++, rw_next(&rows)) {
        double ss = 0.0;
        for (int64_t k = 0; k < K; k++) {
            double v = rw_ld(x, rows.off[0] + k * xc);
            ss += v * v;
        }
        const double inv = 1.0 / sqrt(ss / (double)K + eps);
        for (int64_t k = 0; k < K; k++) {
            double v = rw_ld(x, rows.off[0] + k * xc) * inv;
            rw_st(xn, r * K + k, v * rw_ld(g, k * gc));
        }
    }
}

/* Workspace ahead of the products' own: the normalized x (doubles hold any float dtype). */
static size_t ws_norm_x(const gdp_node *node) { return multi_has_norm(node) ? rw_doubles(gdp_numel(node->in[0])) : 0; }

/* *sub = the node as its products alone, its workspace `own` bytes: with a norm weight, x
 * replaced by xn, its norm written into the head of the node's workspace. NULL in sub's
 * workspace (and a message) when the node's is too small. */
static void multi_products(const gdp_node *node, size_t own, gdp_node *sub, const gdp_tensor **in, gdp_tensor *xn,
                           gdp_err *err)
{
    const int nw = multi_weights(node);
    const size_t head = ws_norm_x(node);
    *sub = *node;
    for (int k = 0; k <= nw; k++) in[k] = node->in[k];
    sub->in = in, sub->n_in = 1 + nw;
    char *ws = rw_workspace(node, head + own, err);
    sub->workspace = ws != NULL ? ws + head : NULL;
    sub->workspace_bytes = ws != NULL ? node->workspace_bytes - head : 0;
    if (ws == NULL || head == 0) return;
    *xn = *node->in[0];
    xn->data = ws;
    gdp_set_contiguous(xn);
    rms_rows(node->in[0], node->in[1 + nw], gdp_attr_float(&node->attrs, "eps", 1e-6), xn);
    in[0] = xn;
}

/* linear's arithmetic for x and W_k into y, in the node's workspace. */
static void linear_part(const gdp_node *node, int k, const gdp_tensor *y)
{
    linear_rows(node->in[0], node->in[k], NULL, NULL, y, ACT_NONE, 0, node->workspace);
}

/* The largest of the three linears' scratch (ws_linear reads x and the output). */
static size_t ws_qkv_own(const gdp_node *node)
{
    size_t m = 0;
    for (int k = 0; k < 3; k++) {
        gdp_node sub = *node;
        sub.out = node->out + k;
        size_t b = ws_linear(&sub);
        if (b > m) m = b;
    }
    return m;
}
static size_t ws_qkv(const gdp_node *node) { return ws_norm_x(node) + ws_qkv_own(node); }

// q, k, v = x Wq^T, x Wk^T, x Wv^T, each in double rounded once (x normalized first with g)
static gdp_status qkv_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    gdp_node sub;
    const gdp_tensor *in[GDP_MAX_INPUTS];
    gdp_tensor xn;
    multi_products(node, ws_qkv_own(node), &sub, in, &xn, err);
    if (sub.workspace == NULL) return GDP_ERR_INVALID;
    for (int k = 0; k < 3; k++) linear_part(&sub, k + 1, node->out[k]);
    return GDP_OK;
}

gdp_status gd_linear_qkv_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    return qkv_ref(backend, node, stream, err);
}
size_t gd_linear_qkv_ws(const gdp_node *node) { return ws_qkv(node); }
void gd_rms_rows(const gdp_tensor *x, const gdp_tensor *g, double eps, const gdp_tensor *xn) { rms_rows(x, g, eps, xn); }

/* Scratch of linear_swiglu's products: Wg^T and Wu^T (in, out), a row of x, two output rows. */
static size_t ws_swiglu_own(const gdp_node *node)
{
    int64_t in = node->in[0]->shape[node->in[0]->ndim - 1], out = node->out[0]->shape[node->out[0]->ndim - 1];
    return 2 * rw_doubles(in * out) + rw_doubles(in) + 2 * rw_doubles(out);
}
static size_t ws_swiglu(const gdp_node *node) { return ws_norm_x(node) + ws_swiglu_own(node); }

// y (R, out) = silu(x Wg^T) * (x Wu^T), both products in double, rounded once (x normalized
// first with g)
static gdp_status swiglu_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    gdp_node sub;
    const gdp_tensor *in[GDP_MAX_INPUTS];
    gdp_tensor xn;
    multi_products(node, ws_swiglu_own(node), &sub, in, &xn, err);
    char *ws = sub.workspace;
    if (ws == NULL) return GDP_ERR_INVALID;
    const gdp_tensor *x = sub.in[0], *wg = sub.in[1], *wu = sub.in[2], *y = node->out[0];
    int64_t in_f = x->shape[x->ndim - 1], out = y->shape[y->ndim - 1];
    double *gt = (double *)ws, *ut = (double *)(ws + rw_doubles(in_f * out));
    double *xr = (double *)(ws + 2 * rw_doubles(in_f * out));
    double *ag = (double *)((char *)xr + rw_doubles(in_f)), *au = (double *)((char *)ag + rw_doubles(out));
    pack(wg, 0, wg->stride[0], wg->stride[1], 1, in_f, out, gt);
    pack(wu, 0, wu->stride[0], wu->stride[1], 1, in_f, out, ut);
    rw_walk rows;
    int64_t R = rw_rows(&rows, x, x->ndim - 1, 1, &x);
    const int64_t xc = x->stride[x->ndim - 1];
    for (int64_t r = 0; r < R; r++, rw_next(&rows)) {
        pack(x, rows.off[0], 0, xc, 0, 1, in_f, xr);
        for (int64_t j = 0; j < out; j++) ag[j] = au[j] = 0;
        gemm_row(in_f, out, xr, gt, ag);
        gemm_row(in_f, out, xr, ut, au);
        for (int64_t j = 0; j < out; j++) ag[j] = act_apply(ACT_SILU, ag[j]) * au[j];
        store_row(y, r * out, out, ag);
    }
    return GDP_OK;
}

/* Decode-step shapes (a few rows) and small odd ones; K in 16-byte pieces or not; with the
 * norm in front, rows both shorter and longer than 2048 (a backend may sum the two apart). */
static const char *const linear_qkv_cases[] = {
    "f[4,5] f[3,5] f[2,5] f[2,5]",
    "f[1,64] f[64,64] f[16,64] f[16,64]",
    "f[2,1,96] f[48,96] f[24,96] f[24,96]",
    "f[8,37] f[9,37] f[5,37] f[7,37]",
    "f[4,5] f[3,5] f[2,5] f[2,5] p[5]",
    "n[1,64] f[64,64] f[16,64] f[16,64] p[64] | eps=1e-5",
    "n[2,1,96] f[48,96] f[24,96] f[24,96] p[96]",
    "n[8,37] f[9,37] f[5,37] f[7,37] p[37] | eps=0.001",
    "n[3,2304] f[16,2304] f[8,2304] f[8,2304] p[2304] | eps=1e-6",
    NULL,
};

static const char *const linear_swiglu_cases[] = {
    "n[4,5] f[3,5] f[3,5]",
    "n[1,64] f[80,64] f[80,64]",
    "n[3,128] f[40,128] f[40,128]",
    "n[8,37] f[11,37] f[11,37]",
    "n[2,1,96] f[33,96] f[33,96]",
    "n[4,5] f[3,5] f[3,5] p[5]",
    "n[1,64] f[80,64] f[80,64] p[64] | eps=1e-5",
    "n[5,37] f[11,37] f[11,37] p[37]",
    "n[2,1,96] f[33,96] f[33,96] p[96] | eps=0.001",
    "n[2,2100] f[12,2100] f[12,2100] p[2100]",
    NULL,
};

/* One multiply-add per weight element per row, SwiGLU's few operations per output, and the
 * norm's (as rms_norm counts them: 4 per element of x). */
static void cost_linear_multi(const gdp_node *n, double *bytes, double *flops)
{
    const gdp_tensor *x = n->in[0];
    double rows = (double)(gdp_numel(x) / (x->shape[x->ndim - 1] > 0 ? x->shape[x->ndim - 1] : 1)), f = 0;
    for (int k = 1; k <= multi_weights(n); k++) f += 2.0 * rows * (double)gdp_numel(n->in[k]);
    if (multi_has_norm(n)) f += 4.0 * (double)gdp_numel(x);
    *bytes = gd_cost_io_bytes(n);
    *flops = f + (n->n_out == 1 ? 4.0 * (double)gdp_numel(n->out[0]) : 0);
}

/* ---- registration --------------------------------------------------------------------- */

GD_FAMILY(matmul_multi)
{
    static const gd_op_def linear_qkv = {
        .name = "linear_qkv", .min_in = 4, .max_in = 5, .n_out = 3,
        .attrs = "eps:float",
        .dtypes = GD_FLOATS,
        .infer = qkv_infer, .ref = qkv_ref,
        .ref_dtypes = GD_FLOATS64,
        .cases = linear_qkv_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .ref_workspace = ws_qkv, .ref_strided = 1, .cost = cost_linear_multi,
        .doc = "x (..., in), Wq, Wk, Wv (out_k, in), [g (in)] -> h Wq^T, h Wk^T, h Wv^T with h = x, or with g "
               "rms_norm(x, g; eps) as that op stores it: attention's three projections (fused by graph passes)",
    };
    static const gd_op_def linear_swiglu = {
        .name = "linear_swiglu", .min_in = 3, .max_in = 4, .n_out = 1,
        .attrs = "eps:float",
        .dtypes = GD_FLOATS,
        .infer = swiglu_infer, .ref = swiglu_ref,
        .ref_dtypes = GD_FLOATS64,
        .cases = linear_swiglu_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .ref_workspace = ws_swiglu, .ref_strided = 1, .cost = cost_linear_multi,
        .doc = "x (..., in), Wg, Wu (out, in), [g (in)] -> silu(h Wg^T) * (h Wu^T) with h = x, or with g "
               "rms_norm(x, g; eps) as that op stores it: a gated MLP's first half (fused by graph passes)",
    };
    gd_register_op(r, &linear_qkv);
    gd_register_op(r, &linear_swiglu);
}
