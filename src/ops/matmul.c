/* matmul.c — matrix products: matmul, linear, and the fused forms a backend's graph pass
 * produces: linear_act (linear + bias + activation), linear_add (linear + the residual add
 * after it), and training's epilogue forms (linear_act_keep, matmul_act_grad, matmul_acc).
 * The products of one x with several matrices (linear_qkv, linear_swiglu) are in
 * matmul_multi.c; what the two files share, in matmul_ref.h.
 *
 * The reference kernels also train small models in CI, so they are naive but not slow:
 * each operand matrix is packed once into a double buffer in the node's workspace (which
 * also undoes any transpose, and reads any strides), then the product runs in i-k-j order
 * into a double accumulator row, so the inner loop streams through contiguous memory and
 * vectorizes. The product is accumulated in double and rounded once to the output's dtype,
 * which may be wider than the operands' (out_dtype: bf16 or f16 into f32).
 */
#include "cost.h"
#include "matmul_ref.h"

#include <math.h>
#include <string.h>

/* ---- shared helpers --------------------------------------------------------------------- */

static int is_f32_or_f64(int32_t dt) { return dt == GDP_F32 || dt == GDP_F64; }

/* ---- matmul ------------------------------------------------------------------------------ */

static int matmul_infer(gd_infer *c)
{
    const gd_shape *a = &c->in[0], *b = &c->in[1];
    int64_t ta = gdp_attr_int(c->attrs, "transpose_a", 0), tb = gdp_attr_int(c->attrs, "transpose_b", 0);
    char sa[160], sb[160];
    gd_shape_str(a, sa, sizeof sa);
    gd_shape_str(b, sb, sizeof sb);
    if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
        return gd_infer_fail(c, "transpose_a=%lld and transpose_b=%lld must each be 0 or 1", (long long)ta,
                             (long long)tb);
    if (a->dtype != b->dtype) return gd_infer_fail(c, "a %s and b %s differ in dtype", sa, sb);
    int64_t out_dt = gdp_attr_int(c->attrs, "out_dtype", a->dtype);
    if (out_dt < 0 || out_dt >= GDP_DTYPE_COUNT || !gdp_is_float((int32_t)out_dt))
        return gd_infer_fail(c, "out_dtype %lld is not a float dtype (a %s, b %s)", (long long)out_dt, sa, sb);
    if (a->ndim < 2 || b->ndim < 2)
        return gd_infer_fail(c, "a %s and b %s must both have at least 2 dims", sa, sb);
    int na = a->ndim, nb = b->ndim;
    int64_t M = ta ? a->dim[na - 1] : a->dim[na - 2];
    int64_t Ka = ta ? a->dim[na - 2] : a->dim[na - 1];
    int64_t Kb = tb ? b->dim[nb - 1] : b->dim[nb - 2];
    int64_t N = tb ? b->dim[nb - 2] : b->dim[nb - 1];
    if (Ka != Kb)
        return gd_infer_fail(c, "a %s (transpose_a=%lld) and b %s (transpose_b=%lld): contracted dims differ, %lld vs %lld",
                             sa, (long long)ta, sb, (long long)tb, (long long)Ka, (long long)Kb);
    // batch dims: NumPy broadcast of a[:-2] and b[:-2], right-aligned
    int nbat = (na > nb ? na : nb) - 2;
    gd_shape *o = &c->out[0];
    o->dtype = (int32_t)out_dt;
    o->ndim = nbat + 2;
    for (int i = 0; i < nbat; i++) {
        int ia = i - (nbat - (na - 2)), ib = i - (nbat - (nb - 2));
        int64_t da = ia >= 0 ? a->dim[ia] : 1, db = ib >= 0 ? b->dim[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return gd_infer_fail(c, "batch dims of a %s and b %s do not broadcast (%lld vs %lld)", sa, sb,
                                 (long long)da, (long long)db);
        o->dim[i] = da == 1 ? db : da;
    }
    o->dim[nbat] = M;
    o->dim[nbat + 1] = N;
    return 0;
}

/* Offset (in elements) of the matrix of operand t that output batch `bi` reads, where the
 * output has batch dims out_shape[0..nbat) and t's batch dims are right-aligned to them
 * (size-1 dims broadcast); through t's strides. */
static int64_t batch_offset(const gdp_tensor *t, const int64_t *out_shape, int nbat, int64_t bi)
{
    int tb = t->ndim - 2;
    int64_t off = 0;
    for (int d = nbat - 1; d >= 0; d--) {
        int64_t coord = bi % out_shape[d];
        bi /= out_shape[d];
        int td = d - (nbat - tb);
        if (td >= 0 && t->shape[td] != 1) off += coord * t->stride[td];
    }
    return off;
}

typedef struct mm_dims {
    int ta, tb, nbat;
    int64_t M, N, K, batches;
} mm_dims;

static mm_dims mm_dims_of(const gdp_node *node)
{
    const gdp_tensor *a = node->in[0], *c = node->out[0];
    mm_dims d = {.ta = gdp_attr_int(&node->attrs, "transpose_a", 0) != 0,
                 .tb = gdp_attr_int(&node->attrs, "transpose_b", 0) != 0, .nbat = c->ndim - 2, .batches = 1};
    d.M = c->shape[d.nbat];
    d.N = c->shape[d.nbat + 1];
    d.K = d.ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    for (int i = 0; i < d.nbat; i++) d.batches *= c->shape[i];
    return d;
}

/* Scratch: op(A) and op(B) of one batch packed as doubles, and one output row. */
static size_t ws_matmul(const gdp_node *node)
{
    mm_dims d = mm_dims_of(node);
    return rw_doubles(d.M * d.K) + rw_doubles(d.K * d.N) + rw_doubles(d.N);
}

// C (..., M, N) = op(A) (..., M, K) @ op(B) (..., K, N), accumulated in double and
// rounded once to C's dtype (f32 for the mixed bf16/f16 -> f32 forms)
static gdp_status matmul_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    const gdp_tensor *a = node->in[0], *b = node->in[1], *c = node->out[0];
    if (!is_f32_or_f64(a->dtype)) return gdp_fail(err, GDP_ERR_UNSUPPORTED, "the reference takes f32/f64");
    mm_dims d = mm_dims_of(node);
    char *ws = rw_workspace(node, ws_matmul(node), err);
    if (ws == NULL) return GDP_ERR_INVALID;
    double *pa = (double *)ws, *pb = (double *)(ws + rw_doubles(d.M * d.K));
    double *acc = (double *)(ws + rw_doubles(d.M * d.K) + rw_doubles(d.K * d.N));
    const int64_t ar = a->stride[a->ndim - 2], ac = a->stride[a->ndim - 1];
    const int64_t br = b->stride[b->ndim - 2], bc = b->stride[b->ndim - 1];
    // a 2-D operand shared by every batch is packed once
    int64_t last_a = -1, last_b = -1;
    for (int64_t bi = 0; bi < d.batches; bi++) {
        int64_t oa = batch_offset(a, c->shape, d.nbat, bi), ob = batch_offset(b, c->shape, d.nbat, bi);
        if (oa != last_a) pack(a, oa, ar, ac, d.ta, d.M, d.K, pa);
        if (ob != last_b) pack(b, ob, br, bc, d.tb, d.K, d.N, pb);
        last_a = oa;
        last_b = ob;
        for (int64_t i = 0; i < d.M; i++) {
            for (int64_t j = 0; j < d.N; j++) acc[j] = 0;
            gemm_row(d.K, d.N, pa + i * d.K, pb, acc);
            store_row(c, (bi * d.M + i) * d.N, d.N, acc);
        }
    }
    return GDP_OK;
}

/* C = op(A) @ op(B): dA = dC @ op(B)^T and dB = op(A)^T @ dC, written back through the
 * transposes of the stored layouts, then summed over the batch dims each operand was
 * broadcast along. */
static gd_status matmul_grad(gd_grad_ctx *c)
{
    gd_tensor *a = c->in[0], *b = c->in[1], *dc = c->dout[0];
    // a product written in a wider dtype (out_dtype) hands its gradient back in the operands'
    if (dc != NULL && gd_tensor_dtype(dc) != gd_tensor_dtype(a)) dc = gd_cast(dc, gd_tensor_dtype(a));
    if (dc == NULL) return GD_ERR_SHAPE;
    int ta = gdp_attr_int(c->attrs, "transpose_a", 0) != 0;
    int tb = gdp_attr_int(c->attrs, "transpose_b", 0) != 0;
    gd_tensor *da, *db;
    if (!ta && !tb) {        // C = A B
        da = gd_matmul(dc, b, 0, 1);
        db = gd_matmul(a, dc, 1, 0);
    } else if (!ta && tb) {  // C = A B^T, B (N, K)
        da = gd_matmul(dc, b, 0, 0);
        db = gd_matmul(dc, a, 1, 0);
    } else if (ta && !tb) {  // C = A^T B, A (K, M)
        da = gd_matmul(b, dc, 0, 1);
        db = gd_matmul(a, dc, 0, 0);
    } else {                 // C = A^T B^T
        da = gd_matmul(b, dc, 1, 1);
        db = gd_matmul(dc, a, 1, 1);
    }
    c->din[0] = gd_sum_to(da, a);
    c->din[1] = gd_sum_to(db, b);
    return c->din[0] != NULL && c->din[1] != NULL ? GD_OK : GD_ERR_SHAPE;
}

static const char *const matmul_cases[] = {
    "f[3,4] f[4,5]",
    "f[1,1] f[1,1]",
    "f[3,40] f[40,300]",
    "f[17,33] f[33,9]",
    "f[4,3] f[4,5] | transpose_a=1",
    "f[3,4] f[5,4] | transpose_b=1",
    "f[4,3] f[5,4] | transpose_a=1 transpose_b=1",
    "f[2,3,4] f[2,4,5]",
    "f[2,1,3,4] f[5,4,6]",
    "f[3,4] f[2,4,5]",
    "f[2,3,4] f[4,5]",
    "f[2,1,4,3] f[3,5,4] | transpose_a=1 transpose_b=1",
    "f[2,3,5,4] f[2,1,6,4] | transpose_b=1",
    NULL,
};

gd_tensor *gd_matmul(gd_tensor *a, gd_tensor *b, int transpose_a, int transpose_b)
{
    gd_attr at[2] = {gd_attr_i("transpose_a", transpose_a != 0), gd_attr_i("transpose_b", transpose_b != 0)};
    return gd_op2(a, b, "matmul", 2, at);
}

gd_tensor *gd_matmul_as(gd_tensor *a, gd_tensor *b, int transpose_a, int transpose_b, gd_dtype out)
{
    gd_attr at[3] = {gd_attr_i("transpose_a", transpose_a != 0), gd_attr_i("transpose_b", transpose_b != 0),
                     gd_attr_i("out_dtype", (int64_t)out)};
    return gd_op2(a, b, "matmul", 3, at);
}

/* bf16 and f16 operands into an f32 product: plain, transposed, batched, broadcast */
static const char *const matmul_mixed[] = {"bf16,bf16->f32", "f16,f16->f32", NULL};
static const char *const matmul_mixed_cases[] = {
    "bf16[3,4] bf16[4,5] | out_dtype=f32",
    "bf16[17,33] bf16[33,9] | out_dtype=f32",
    "bf16[4,3] bf16[5,4] | transpose_a=1 transpose_b=1 out_dtype=f32",
    "bf16[2,3,4] bf16[4,5] | out_dtype=f32",
    "f16[3,4] f16[4,5] | out_dtype=f32",
    "f16[17,33] f16[33,9] | out_dtype=f32",
    "f16[3,4] f16[5,4] | transpose_b=1 out_dtype=f32",
    "f16[2,1,3,4] f16[5,4,6] | out_dtype=f32",
    NULL,
};

/* ---- linear and linear_act ------------------------------------------------------------- */

/* x (..., in), W (out, in) — or (in, out) with weight_in_out=1, the layout of the b of a
 * plain matmul, so a graph pass can fuse matmul + bias + activation too — b (out) or NULL. */
static int linear_shapes(gd_infer *c, const gd_shape *b)
{
    const gd_shape *x = &c->in[0], *w = &c->in[1];
    int64_t act = gdp_attr_int(c->attrs, "act", 0), wio = gdp_attr_int(c->attrs, "weight_in_out", 0);
    char sx[160], sw[160], sb[160];
    gd_shape_str(x, sx, sizeof sx);
    gd_shape_str(w, sw, sizeof sw);
    if (act < ACT_NONE || act > ACT_SILU)
        return gd_infer_fail(c, "act=%lld is not one of 0 none, 1 relu, 2 gelu tanh, 3 gelu, 4 silu", (long long)act);
    if (wio != 0 && wio != 1) return gd_infer_fail(c, "weight_in_out=%lld must be 0 or 1", (long long)wio);
    if (x->dtype != w->dtype) return gd_infer_fail(c, "x %s and W %s differ in dtype", sx, sw);
    if (x->ndim < 1) return gd_infer_fail(c, "x %s must have at least 1 dim", sx);
    if (w->ndim != 2) return gd_infer_fail(c, "W %s must be 2-D (%s)", sw, wio ? "in, out" : "out, in");
    int64_t in = wio ? w->dim[0] : w->dim[1], out = wio ? w->dim[1] : w->dim[0];
    if (x->dim[x->ndim - 1] != in)
        return gd_infer_fail(c, "x %s has %lld features but W %s takes %lld", sx, (long long)x->dim[x->ndim - 1], sw,
                             (long long)in);
    if (b != NULL) {
        gd_shape_str(b, sb, sizeof sb);
        if (b->dtype != x->dtype) return gd_infer_fail(c, "bias %s and x %s differ in dtype", sb, sx);
        if (b->ndim != 1 || b->dim[0] != out)
            return gd_infer_fail(c, "bias %s must be [%lld] to match W %s", sb, (long long)out, sw);
    }
    gd_shape *o = &c->out[0];
    *o = *x;
    o->dim[o->ndim - 1] = out;
    return 0;
}

static int linear_infer(gd_infer *c) { return linear_shapes(c, c->n_in > 2 ? &c->in[2] : NULL); }

/* linear_add: x, W, [b], then r, shaped and typed like the product it is added to. */
static int linear_add_infer(gd_infer *c)
{
    const gd_shape *r = &c->in[c->n_in - 1];
    int s = linear_shapes(c, c->n_in > 3 ? &c->in[2] : NULL);
    if (s != 0) return s;
    const gd_shape *o = &c->out[0];
    int same = r->dtype == o->dtype && r->ndim == o->ndim;
    for (int d = 0; same && d < o->ndim; d++) same = r->dim[d] == o->dim[d];
    if (!same) {
        char sr[160], so[160];
        return gd_infer_fail(c, "residual r %s must be %s, the product's shape and dtype", gd_shape_str(r, sr, sizeof sr),
                             gd_shape_str(o, so, sizeof so));
    }
    return 0;
}

// y (R, out) = act(x (R, in) @ W^T + b); serves linear (no act attr) and linear_act
static gdp_status linear_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    const gdp_tensor *x = node->in[0];
    if (!is_f32_or_f64(x->dtype)) return gdp_fail(err, GDP_ERR_UNSUPPORTED, "the reference takes f32/f64");
    char *ws = rw_workspace(node, ws_linear(node), err);
    if (ws == NULL) return GDP_ERR_INVALID;
    linear_rows(x, node->in[1], node->n_in > 2 ? node->in[2] : NULL, NULL, node->out[0],
                (int)gdp_attr_int(&node->attrs, "act", 0), gdp_attr_int(&node->attrs, "weight_in_out", 0) != 0, ws);
    return GDP_OK;
}

/* x W^T + b rounded to y's dtype, then + r: the product and the residual add after it (f16
 * and bf16 handled here, since the product's rounding is to their width). */
static gdp_status linear_add_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    char *ws = rw_workspace(node, ws_linear(node), err);
    if (ws == NULL) return GDP_ERR_INVALID;
    linear_rows(node->in[0], node->in[1], node->n_in > 3 ? node->in[2] : NULL, node->in[node->n_in - 1], node->out[0],
                ACT_NONE, 0, ws);
    return GDP_OK;
}

/* Gradients of z = x W^T + b given dz (..., out). Rows are flattened to 2-D so that dW is
 * one matmul over every row (the batch sum is the contraction) and x may be 1-D. */
static gd_status linear_grad_from(gd_grad_ctx *c, gd_tensor *dz, int wio)
{
    gd_tensor *x = c->in[0], *w = c->in[1];
    int64_t in = gd_tensor_dim(x, -1), out = gd_tensor_dim(dz, -1);
    gd_tensor *x2 = x, *dz2 = dz;
    if (gd_tensor_ndim(x) != 2) {
        x2 = gd_reshape(x, 2, (int64_t[]){-1, in});
        dz2 = gd_reshape(dz, 2, (int64_t[]){-1, out});
    }
    gd_tensor *dx2 = wio ? gd_matmul(dz2, w, 0, 1) : gd_matmul(dz2, w, 0, 0); // (R, in)
    gd_tensor *dx = dx2;
    if (gd_tensor_ndim(x) != 2 && dx2 != NULL) {
        int64_t shape[GD_MAX_DIMS];
        for (int d = 0; d < gd_tensor_ndim(x); d++) shape[d] = gd_tensor_dim(x, d);
        dx = gd_reshape(dx2, gd_tensor_ndim(x), shape);
    }
    c->din[0] = dx;
    c->din[1] = wio ? gd_matmul(x2, dz2, 1, 0) : gd_matmul(dz2, x2, 1, 0); // (in, out) or (out, in)
    int ok = c->din[0] != NULL && c->din[1] != NULL;
    if (c->n_in > 2) {
        c->din[2] = gd_sum(dz2, 1, (int64_t[]){0}, 0); // (out)
        ok = ok && c->din[2] != NULL;
    }
    return ok ? GD_OK : GD_ERR_SHAPE;
}

static gd_status linear_grad(gd_grad_ctx *c) { return linear_grad_from(c, c->dout[0], 0); }

/* y = act(z), z = linear(x, W, b). relu's derivative reads from y (y > 0 exactly where
 * z > 0); the others need z, which is recomputed rather than kept: a fused node exists
 * because nothing else wanted z, and this rule mostly serves the gradient check. */
static gd_status linear_act_grad(gd_grad_ctx *c)
{
    int act = (int)gdp_attr_int(c->attrs, "act", 0);
    int wio = gdp_attr_int(c->attrs, "weight_in_out", 0) != 0;
    gd_tensor *dy = c->dout[0], *dz = dy;
    if (act == ACT_RELU) {
        dz = gd_op(c->g, "relu_grad", 2, (gd_tensor *[]){dy, c->out[0]}, 0, NULL);
        if (dz == NULL) return GD_ERR_SHAPE;
    } else if (act != ACT_NONE) {
        gd_attr la[2] = {gd_attr_i("act", ACT_NONE), gd_attr_i("weight_in_out", wio)};
        gd_tensor *z = gd_op(c->g, "linear_act", c->n_in, c->in, 2, la);
        gd_tensor *in[2] = {dy, z};
        if (act == ACT_SILU) {
            dz = gd_op(c->g, "silu_grad", 2, in, 0, NULL);
        } else {
            gd_attr ap = gd_attr_i("approximate", act == ACT_GELU_TANH);
            dz = gd_op(c->g, "gelu_grad", 2, in, 1, &ap);
        }
        if (dz == NULL) return GD_ERR_SHAPE;
    }
    return linear_grad_from(c, dz, wio);
}

/* ---- the GELU epilogues of training: linear_act_keep and matmul_act_grad --------------------
 * A training graph keeps a gelu's input z for gelu_grad, so linear_act cannot swallow the
 * gelu there (z would be lost). linear_act_keep writes both: y = act(z) and z. In the
 * backward, gelu_grad(matmul(a, b), z) becomes matmul_act_grad(a, b, z), the product
 * multiplied by act'(z) as it is written. Graph passes make both (a backend's GEMM
 * epilogues: cuBLASLt's GELU_AUX and DGELU); each stores what the unfused pair stores. */

/* x, W, [b] -> y, z: z = x W^T + b in the dtype (linear_act's act=0), y = act(z) of that. */
static int linear_keep_infer(gd_infer *c)
{
    int s = linear_infer(c);
    if (s != 0) return s;
    c->out[1] = c->out[0];
    return 0;
}

static gdp_status linear_keep_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    char *ws = rw_workspace(node, ws_linear(node), err);
    if (ws == NULL) return GDP_ERR_INVALID;
    const gdp_tensor *y = node->out[0], *z = node->out[1];
    int act = (int)gdp_attr_int(&node->attrs, "act", 0);
    linear_rows(node->in[0], node->in[1], node->n_in > 2 ? node->in[2] : NULL, NULL, z, ACT_NONE,
                gdp_attr_int(&node->attrs, "weight_in_out", 0) != 0, ws);
    for (int64_t i = 0, n = gdp_numel(z); i < n; i++) rw_st(y, i, act_apply(act, rw_ld(z, i)));
    return GDP_OK;
}

/* a (M, K) or, transposed, (K, M); b (K, N) or (N, K); z of M*N elements whose last dim is
 * N -> dz shaped like z. act: a gelu form. */
/* a (M, K) and b (K, N), 2-D, each maybe transposed, and input 2 (named `z`) of one float
 * dtype holding the (M, N) product along its last dim: the output is shaped like input 2. */
static int product_shaped_infer(gd_infer *c, const char *z_name)
{
    const gd_shape *a = &c->in[0], *b = &c->in[1], *z = &c->in[2];
    int ta = gdp_attr_int(c->attrs, "transpose_a", 0) != 0, tb = gdp_attr_int(c->attrs, "transpose_b", 0) != 0;
    char sa[160], sb[160], sz[160];
    gd_shape_str(a, sa, sizeof sa);
    gd_shape_str(b, sb, sizeof sb);
    gd_shape_str(z, sz, sizeof sz);
    if (!gdp_is_float(a->dtype) || b->dtype != a->dtype || z->dtype != a->dtype)
        return gd_infer_fail(c, "a %s, b %s and %s %s must share one float dtype", sa, sb, z_name, sz);
    if (a->ndim != 2 || b->ndim != 2) return gd_infer_fail(c, "a %s and b %s must be 2-D", sa, sb);
    int64_t M = ta ? a->dim[1] : a->dim[0], K = ta ? a->dim[0] : a->dim[1];
    int64_t Kb = tb ? b->dim[1] : b->dim[0], N = tb ? b->dim[0] : b->dim[1], nz = 1;
    for (int d = 0; d < z->ndim; d++) nz *= z->dim[d];
    if (K != Kb) return gd_infer_fail(c, "a %s and b %s: inner dims %lld and %lld differ", sa, sb, (long long)K, (long long)Kb);
    if (z->ndim < 1 || z->dim[z->ndim - 1] != N || nz != M * N)
        return gd_infer_fail(c, "%s %s must hold the (%lld, %lld) product, its last dim %lld", z_name, sz, (long long)M,
                             (long long)N, (long long)N);
    c->out[0] = *z;
    return 0;
}

static int matmul_grad_infer(gd_infer *c)
{
    int64_t act = gdp_attr_int(c->attrs, "act", 0);
    if (act != ACT_GELU_TANH && act != ACT_GELU) return gd_infer_fail(c, "act=%lld: 2 (gelu tanh) or 3 (gelu)", (long long)act);
    return product_shaped_infer(c, "z");
}

/* Scratch: op(b) (K, N), one row of op(a), one output row. */
static size_t ws_matmul_grad(const gdp_node *node)
{
    int ta = gdp_attr_int(&node->attrs, "transpose_a", 0) != 0, tb = gdp_attr_int(&node->attrs, "transpose_b", 0) != 0;
    int64_t K = ta ? node->in[0]->shape[0] : node->in[0]->shape[1], N = tb ? node->in[1]->shape[0] : node->in[1]->shape[1];
    return rw_doubles(K * N) + rw_doubles(K) + rw_doubles(N);
}

/* For each row i of the node's (M, N) product op(a) op(b) (2-D inputs 0 and 1, its
 * transpose attributes): the row in double, each element rounded to the output's dtype as
 * matmul stores it, then f(node, that, the element of input 2 at the same place) stored.
 * Input 2 holds the product's rows along its last dim, whatever its strides; its row i is
 * read before output row i is written. */
static gdp_status product_rows(const gdp_node *node, double (*f)(const gdp_node *, double, double), gdp_err *err)
{
    const gdp_tensor *a = node->in[0], *b = node->in[1], *z = node->in[2], *y = node->out[0];
    int ta = gdp_attr_int(&node->attrs, "transpose_a", 0) != 0, tb = gdp_attr_int(&node->attrs, "transpose_b", 0) != 0;
    int64_t M = ta ? a->shape[1] : a->shape[0], K = ta ? a->shape[0] : a->shape[1], N = tb ? b->shape[0] : b->shape[1];
    char *ws = rw_workspace(node, ws_matmul_grad(node), err);
    if (ws == NULL) return GDP_ERR_INVALID;
    double *bt = (double *)ws, *ar = (double *)(ws + rw_doubles(K * N)), *acc = ar + (rw_doubles(K) / sizeof(double));
    pack(b, 0, b->stride[0], b->stride[1], tb, K, N, bt);
    rw_walk zr;
    const gdp_tensor *zt[1] = {z};
    rw_rows(&zr, z, z->ndim - 1, 1, zt);
    const int64_t zc = z->stride[z->ndim - 1];
    for (int64_t i = 0; i < M; i++, rw_next(&zr)) {
        pack(a, i * a->stride[ta ? 1 : 0], 0, a->stride[ta ? 0 : 1], 0, 1, K, ar);
        for (int64_t j = 0; j < N; j++) acc[j] = 0;
        gemm_row(K, N, ar, bt, acc);
        for (int64_t j = 0; j < N; j++) acc[j] = f(node, stored_as(y->dtype, acc[j]), rw_ld(z, zr.off[0] + j * zc));
        store_row(y, i * N, N, acc);
    }
    return GDP_OK;
}

static double times_act_deriv(const gdp_node *node, double p, double z)
{
    return p * act_deriv((int)gdp_attr_int(&node->attrs, "act", 0), z);
}

/* The product rounded to the dtype, as matmul stores it, times act'(z), rounded again. */
static gdp_status matmul_grad_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    return product_rows(node, times_act_deriv, err);
}

/* ---- matmul_acc: a product added to what is there (a backward's sums of gradients) ----------
 * A value used by several products gets the sum of their gradients: in a Llama layer's
 * backward, dx = dy_q Wq + dy_k Wk + dy_v Wv and the gate's and up's two. A graph pass puts
 * each add(matmul(a, b), r) into one node that a backend runs as one GEMM with r as its
 * addend (cuBLASLt's beta = 1), in place over r where nothing reads r after. The product
 * is rounded to the dtype before the add, as the pair stores it. */
static int matmul_acc_infer(gd_infer *c) { return product_shaped_infer(c, "r"); }

static double plus(const gdp_node *node, double p, double r)
{
    (void)node;
    return p + r;
}

/* The product rounded to the dtype, as matmul stores it, plus r, rounded again. Row i of r
 * is read before row i of the output is written, so the output may be r itself. */
static gdp_status matmul_acc_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    return product_rows(node, plus, err);
}

static const char *const matmul_acc_cases[] = {
    "f[6,8] f[8,8] f[6,8]",
    "f[6,16] f[8,16] f[2,3,8] | transpose_b=1",
    "f[8,16] f[8,16] f[16,16] | transpose_a=1",
    "f[6,5] f[5,8] f[6,8]",
    "f[4,7] f[7,3] f[4,3]", /* rows of 3: not in whole 16-byte pieces */
    "f[40,64] f[64,24] n[5,8,24]",
    NULL,
};

static const char *const linear_keep_cases[] = {
    "n[4,8] f[16,8] f[16] | act=2",
    "n[2,3,8] f[8,16] f[16] | act=2 weight_in_out=1",
    "n[6,16] f[24,16] | act=2",
    "n[4,5] f[3,5] f[3] | act=3",
    NULL,
};

static const char *const matmul_grad_cases[] = {
    "f[6,8] f[8,8] n[6,8] | act=2",
    "f[6,16] f[8,16] n[2,3,8] | act=2 transpose_b=1",
    "f[8,16] f[8,16] n[16,16] | act=2 transpose_a=1",
    "f[6,5] f[5,8] n[6,8] | act=2", /* K of 5: not in whole 16-byte rows */
    "f[4,7] f[7,8] n[4,8] | act=3",
    NULL,
};

static const char *const linear_cases[] = {
    "f[4,5] f[3,5] f[3]",
    "f[4,5] f[3,5]",
    "f[2,3,5] f[4,5] f[4]",
    "f[5] f[3,5] f[3]",
    "f[1,1] f[1,1] f[1]",
    "f[2,2,3,7] f[6,7]",
    "f[2,37] f[29,37] f[29]", /* a few rows, K past a backend's vector width: matrix-vector paths */
    /* decode-step shapes: a few rows, K in whole 16-byte pieces (the vector paths) */
    "f[1,64] f[48,64] f[48]",
    "f[3,128] f[40,128]",
    "f[8,96] f[33,96] f[33]",
    "f[5,64] f[20,64]",
    "f[2,1,256] f[9,256] f[9]",
    /* rows of W of 4 KiB and more, which a backend's matrix-vector path may split among
     * several sums: even and uneven slices, the vector path and (K odd) the scalar one */
    "n[1,2048] f[24,2048] f[24]",
    "n[3,2056] f[10,2056]",
    "n[2,1100] f[9,1100] f[9]",
    "n[2,1031] f[7,1031]",
    NULL,
};

static const char *const linear_act_cases[] = {
    "f[4,5] f[3,5] f[3] | act=0",
    "f[4,5] f[3,5] f[3] | act=1",
    "n[4,5] f[3,5] f[3] | act=2",
    "n[4,5] f[3,5] f[3] | act=3",
    "n[4,5] f[3,5] f[3] | act=4",
    "f[2,3,5] f[5,4] f[4] | act=2 weight_in_out=1",
    "f[6,5] f[3,5] | act=4",
    "f[5] f[5,3] | act=1 weight_in_out=1",
    "n[1,64] f[40,64] f[40] | act=4",
    "n[3,128] f[24,128] | act=2",
    "n[2,64] f[40,64] f[40] | act=3",
    "n[6,64] f[17,64] f[17] | act=1",
    NULL,
};

/* linear_add: decode-step shapes (x W^T read with the gemv paths of a backend), a bias or
 * none, K in 16-byte pieces or not. */
static const char *const linear_add_cases[] = {
    "f[4,5] f[3,5] f[4,3]",
    "f[4,5] f[3,5] f[3] f[4,3]",
    "n[1,64] f[48,64] n[1,48]",
    "n[2,1,96] f[33,96] f[33] n[2,1,33]",
    "n[8,37] f[20,37] n[8,20]",
    "n[5,128] f[40,128] n[5,40]",
    "f[7] f[6,7] f[6]",
    "n[1,2048] f[16,2048] n[1,16]", /* long rows (see linear's cases) */
    "n[4,1030] f[9,1030] f[9] n[4,9]",
    NULL,
};

gd_tensor *gd_linear(gd_tensor *x, gd_tensor *w, gd_tensor *bias)
{
    if (x == NULL || w == NULL) return NULL;
    gd_tensor *in[3] = {x, w, bias};
    return gd_op(gd_tensor_graph(x), "linear", bias != NULL ? 3 : 2, in, 0, NULL);
}

/* ---- cost ------------------------------------------------------------------------------ */

/* 2 K per output element, K the contracted dim of a. */
static void cost_matmul(const gdp_node *n, double *bytes, double *flops)
{
    const gdp_tensor *a = n->in[0];
    int ta = gdp_attr_int(&n->attrs, "transpose_a", 0) != 0;
    int64_t K = a->ndim >= 2 ? a->shape[a->ndim - (ta ? 2 : 1)] : 1;
    *bytes = gd_cost_io_bytes(n);
    *flops = 2.0 * (double)gdp_numel(n->out[0]) * (double)K;
}

/* x (..., in) W^T: 2 in per output element, then the bias and the activation (one each). */
static void cost_linear(const gdp_node *n, double *bytes, double *flops)
{
    const gdp_tensor *x = n->in[0];
    double out = (double)gdp_numel(n->out[0]), in = x->ndim > 0 ? (double)x->shape[x->ndim - 1] : 1;
    int act = gdp_attr_int(&n->attrs, "act", 0) != 0;
    *bytes = gd_cost_io_bytes(n);
    *flops = 2.0 * out * in + (n->n_in > 2 ? out : 0) + (act ? out : 0);
}

/* linear's, and the residual's add (one per output element). */
static void cost_linear_add(const gdp_node *n, double *bytes, double *flops)
{
    const gdp_tensor *x = n->in[0];
    double out = (double)gdp_numel(n->out[0]), in = x->ndim > 0 ? (double)x->shape[x->ndim - 1] : 1;
    *bytes = gd_cost_io_bytes(n);
    *flops = 2.0 * out * in + (n->n_in > 3 ? out : 0) + out;
}

/* ---- registration --------------------------------------------------------------------- */

GD_FAMILY(matmul)
{
    static const gd_op_def matmul = {
        .name = "matmul", .min_in = 2, .max_in = 2, .n_out = 1,
        .attrs = "transpose_a:int transpose_b:int out_dtype:int",
        .dtypes = GD_FLOATS,
        .infer = matmul_infer, .grad = matmul_grad, .ref = matmul_ref,
        .ref_dtypes = GD_M(GDP_F32) | GD_M(GDP_F64),
        .cases = matmul_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .mixed = matmul_mixed, .mixed_cases = matmul_mixed_cases, .ref_workspace = ws_matmul, .ref_strided = 1,
        .cost = cost_matmul,
        .doc = "a (..., M, K) @ b (..., K, N) after optional swaps of each operand's last two dims; "
               "batch dims broadcast; accumulated in double, rounded once to out_dtype (default the operands'; "
               "bf16/f16 -> f32 are the mixed forms)",
    };
    static const gd_op_def linear = {
        .name = "linear", .min_in = 2, .max_in = 3, .n_out = 1,
        .attrs = "",
        .dtypes = GD_FLOATS,
        .infer = linear_infer, .grad = linear_grad, .ref = linear_ref,
        .ref_dtypes = GD_M(GDP_F32) | GD_M(GDP_F64),
        .cases = linear_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .ref_workspace = ws_linear, .ref_strided = 1, .cost = cost_linear,
        .doc = "x (..., in) W (out, in) [b (out)] -> x W^T + b (..., out)",
    };
    static const gd_op_def linear_act = {
        .name = "linear_act", .min_in = 2, .max_in = 3, .n_out = 1,
        .attrs = "act:int weight_in_out:int",
        .dtypes = GD_FLOATS,
        .infer = linear_infer, .grad = linear_act_grad, .ref = linear_ref,
        .ref_dtypes = GD_M(GDP_F32) | GD_M(GDP_F64),
        .cases = linear_act_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .ref_workspace = ws_linear, .ref_strided = 1, .cost = cost_linear,
        .doc = "act(x W^T + b), act 0 none 1 relu 2 gelu-tanh 3 gelu 4 silu; weight_in_out=1: W is (in, out) "
               "(fused by graph passes)",
    };
    /* The fused forms that round an intermediate to the operands' dtype (the normalized x,
     * the product before the residual) take f16 and bf16 themselves: the core's f32 run of
     * a reference would not know which width to round it to. */
    static const gd_op_def linear_add = {
        .name = "linear_add", .min_in = 3, .max_in = 4, .n_out = 1,
        .attrs = "",
        .dtypes = GD_FLOATS,
        .infer = linear_add_infer, .ref = linear_add_ref,
        .ref_dtypes = GD_FLOATS64,
        .cases = linear_add_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .ref_workspace = ws_linear, .ref_strided = 1, .cost = cost_linear_add,
        .doc = "x (..., in), W (out, in), [b (out)], r (..., out) -> (x W^T + b) + r, the product rounded to the "
               "dtype before the add: a projection and the residual add after it (fused by graph passes)",
    };
    static const gd_op_def linear_act_keep = {
        .name = "linear_act_keep", .min_in = 2, .max_in = 3, .n_out = 2,
        .attrs = "act:int weight_in_out:int",
        .dtypes = GD_FLOATS,
        .infer = linear_keep_infer, .ref = linear_keep_ref,
        .ref_dtypes = GD_FLOATS64,
        .cases = linear_keep_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .ref_workspace = ws_linear, .ref_strided = 1, .cost = cost_linear,
        .doc = "x (..., in), W (out, in) [b (out)] -> act(z), z with z = x W^T + b stored in the dtype; "
               "weight_in_out=1: W is (in, out). linear_act that keeps act's input for the backward (fused by "
               "graph passes)",
    };
    static const gd_op_def matmul_act_grad = {
        .name = "matmul_act_grad", .min_in = 3, .max_in = 3, .n_out = 1,
        .attrs = "transpose_a:int transpose_b:int act:int",
        .dtypes = GD_FLOATS,
        .infer = matmul_grad_infer, .ref = matmul_grad_ref,
        .ref_dtypes = GD_FLOATS64,
        .cases = matmul_grad_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .ref_workspace = ws_matmul_grad, .ref_strided = 1, .cost = cost_matmul,
        .doc = "a (M, K), b (K, N) (each may be transposed), z (..., N) of M*N elements -> (a b) act'(z) shaped "
               "like z, the product stored in the dtype first: gelu_grad of a product (act 2 gelu tanh, 3 gelu; "
               "fused by graph passes)",
    };
    static const gd_op_def matmul_acc = {
        .name = "matmul_acc", .min_in = 3, .max_in = 3, .n_out = 1,
        .attrs = "transpose_a:int transpose_b:int",
        .dtypes = GD_FLOATS,
        .infer = matmul_acc_infer, .ref = matmul_acc_ref,
        .ref_dtypes = GD_FLOATS64,
        .cases = matmul_acc_cases, .inplace = {-1, -1, -1, -1}, .reuse = 3, .tol = 1e-7,
        .ref_workspace = ws_matmul_grad, .ref_strided = 1, .cost = cost_matmul,
        .doc = "a (M, K), b (K, N) (each may be transposed), r (..., N) of M*N elements -> a b + r shaped like r, the "
               "product stored in the dtype first: a sum of gradients (fused by graph passes; may write over r)",
    };
    gd_register_op(r, &matmul);
    gd_register_op(r, &linear_act_keep);
    gd_register_op(r, &matmul_act_grad);
    gd_register_op(r, &matmul_acc);
    gd_register_op(r, &linear);
    gd_register_op(r, &linear_act);
    gd_register_op(r, &linear_add);
}
