/* norm.c — layer_norm and rms_norm over the last axis, and their backward ops.
 *
 * x is read as (rows, C): every row is normalized on its own, and the optional weight and
 * bias (C) scale and shift each of the C features. The backward ops recompute each row's
 * mean and reciprocal standard deviation from x rather than keeping them from the forward
 * pass: two extra passes over a row are cheaper than a saved tensor the memory plan must
 * keep alive from forward to backward, and they keep the op's signature one tensor in.
 * A row is wherever x's strides put it (x may be a view); the backward ops' per-feature
 * sums live in the node's workspace.
 */
#include "reduce.h"
#include "cost.h"
#include "refwalk.h"

#include <math.h>

/* x (..., C) with optional per-feature tensors in[first..n_in) of shape (C) and x's dtype;
 * names[k] names in[k] in messages. */
static int check_rows(gd_infer *c, int first, const char *const *names)
{
    const gd_shape *x = &c->in[first - 1];
    char a[240], b[240];
    rd_desc(x, a, sizeof a);
    int f = rd_need_float(c, x, "x");
    if (f != 0) return f;
    if (x->ndim < 1) return gd_infer_fail(c, "x %s needs at least one axis to normalize over", a);
    const int64_t C = x->dim[x->ndim - 1];
    for (int k = first; k < c->n_in; k++) {
        const gd_shape *p = &c->in[k];
        if (p->ndim != 1 || p->dim[0] != C || p->dtype != x->dtype)
            return gd_infer_fail(c, "%s %s must be %s[%lld], the last axis of x %s", names[k],
                                 rd_desc(p, b, sizeof b), gd_dtype_name((gd_dtype)x->dtype), (long long)C, a);
    }
    double eps = gdp_attr_float(c->attrs, "eps", 0.0);
    if (!(eps >= 0.0)) return gd_infer_fail(c, "eps %g must be >= 0 (x %s)", eps, a);
    return 0;
}

/* Input k (`name`) of a backward op must be shaped like x (its in[1]): dy, and the
 * residual's gradient of the _add forms. */
static int check_like_x(gd_infer *c, int k, const char *name)
{
    const gd_shape *t = &c->in[k], *x = &c->in[1];
    if (t->dtype != x->dtype || !rd_same_dims(t, x)) {
        char a[240], b[240];
        return gd_infer_fail(c, "%s %s must have x %s's shape and dtype", name, rd_desc(t, a, sizeof a),
                             rd_desc(x, b, sizeof b));
    }
    return 0;
}

/* A row of C elements: x[base + k * step]. */
typedef struct row {
    int64_t base, step;
} row;

static inline double at(const gdp_tensor *t, row r, int64_t k) { return rw_ld(t, r.base + k * r.step); }

/* The rows along the last axis of x and of the node's other row-shaped tensors t[1..n)
 * (t[0] is x): a walk carrying each; returns the row count, C in *C. */
static int64_t rows_of(rw_walk *w, int n, const gdp_tensor *const *t, int64_t *C)
{
    const gdp_tensor *x = t[0];
    *C = x->shape[x->ndim - 1];
    return rw_rows(w, x, x->ndim - 1, n, t);
}

static row row_at(const rw_walk *w, int k, const gdp_tensor *t)
{
    return (row){w->off[k], t->stride[t->ndim - 1]};
}

/* The mean and 1/sqrt(var + eps) of a row (biased variance, two passes). */
static void row_stats(const gdp_tensor *x, row r, int64_t C, double eps, double *mean, double *rstd)
{
    double s = 0.0, ss = 0.0;
    for (int64_t k = 0; k < C; k++) s += at(x, r, k);
    const double m = s / (double)C;
    for (int64_t k = 0; k < C; k++) {
        double d = at(x, r, k) - m;
        ss += d * d;
    }
    *mean = m;
    *rstd = 1.0 / sqrt(ss / (double)C + eps);
}

/* 1/sqrt(mean(x^2) + eps) of a row. */
static double row_rms_inv(const gdp_tensor *x, row r, int64_t C, double eps)
{
    double ss = 0.0;
    for (int64_t k = 0; k < C; k++) {
        double v = at(x, r, k);
        ss += v * v;
    }
    return 1.0 / sqrt(ss / (double)C + eps);
}

/* A per-feature vector (weight, bias), 1-D and possibly strided; NULL reads as `none`. */
static inline double feat(const gdp_tensor *t, int64_t k, double none)
{
    return t != NULL ? rw_ld(t, k * t->stride[0]) : none;
}

/* ---- layer_norm ------------------------------------------------------------------------ */

static const char *const ln_names[] = {"x", "weight", "bias"};
static const char *const ln_grad_names[] = {"dy", "x", "weight"};

static int infer_layer_norm(gd_infer *c)
{
    int s = check_rows(c, 1, ln_names);
    if (s != 0) return s;
    c->out[0] = c->in[0];
    return 0;
}

static gdp_status ref_layer_norm(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // x (rows, C), weight (C), bias (C) -> y (rows, C) = (x - mean) * rstd * weight + bias
    const gdp_tensor *x = node->in[0], *y = node->out[0];
    const gdp_tensor *w = node->n_in > 1 ? node->in[1] : NULL, *b = node->n_in > 2 ? node->in[2] : NULL;
    const double eps = gdp_attr_float(&node->attrs, "eps", 1e-5);
    const gdp_tensor *t[2] = {x, y};
    rw_walk wk;
    int64_t C, rows = rows_of(&wk, 2, t, &C);
    for (int64_t r = 0; r < rows; r++, rw_next(&wk)) {
        row rx = row_at(&wk, 0, x), ry = row_at(&wk, 1, y);
        double mean, rstd;
        row_stats(x, rx, C, eps, &mean, &rstd);
        for (int64_t k = 0; k < C; k++) {
            double v = (at(x, rx, k) - mean) * rstd;
            if (w != NULL) v *= feat(w, k, 1.0);
            if (b != NULL) v += feat(b, k, 0.0);
            rw_st(y, ry.base + k * ry.step, v);
        }
    }
    return GDP_OK;
}

static int infer_layer_norm_grad(gd_infer *c)
{
    // dy (rows, C), x (rows, C), [weight (C)] -> dx (rows, C), dweight (C), dbias (C)
    int s = check_rows(c, 2, ln_grad_names);
    if (s == 0) s = check_like_x(c, 0, "dy");
    if (s != 0) return s;
    const gd_shape *x = &c->in[1];
    c->out[0] = *x;
    for (int k = 1; k < 3; k++) {
        c->out[k].dtype = x->dtype;
        c->out[k].ndim = 1;
        c->out[k].dim[0] = x->dim[x->ndim - 1];
    }
    return 0;
}

/* dx = dx as stored + res (the residual stream's gradient, the next op's second operand),
 * rounded again: what the pair norm_grad, add stores. */
static void add_residual(const gdp_tensor *dx, row rdx, const gdp_tensor *res, row rr, int64_t C)
{
    for (int64_t k = 0; k < C; k++) rw_st(dx, rdx.base + k * rdx.step, at(dx, rdx, k) + at(res, rr, k));
}

static gdp_status layer_norm_grad_rows(const gdp_node *node, const gdp_tensor *w, const gdp_tensor *res, gdp_err *err)
{
    // With xhat = (x - mean) * rstd and g = dy * weight:
    //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dweight = sum_rows dy * xhat,  dbias = sum_rows dy
    const gdp_tensor *dy = node->in[0], *x = node->in[1];
    const gdp_tensor *dx = node->out[0], *dw = node->out[1], *db = node->out[2];
    const double eps = gdp_attr_float(&node->attrs, "eps", 1e-5);
    const gdp_tensor *t[4] = {x, dy, dx, res};
    rw_walk wk;
    int64_t C, rows = rows_of(&wk, res != NULL ? 4 : 3, t, &C);
    double *acc_w = rw_workspace(node, 2 * rw_doubles(C), err); // dweight (C), dbias (C)
    if (acc_w == NULL) return GDP_ERR_INVALID;
    double *acc_b = acc_w + (C > 0 ? C : 1);
    for (int64_t k = 0; k < C; k++) acc_w[k] = acc_b[k] = 0.0;
    for (int64_t r = 0; r < rows; r++, rw_next(&wk)) {
        row rx = row_at(&wk, 0, x), rdy = row_at(&wk, 1, dy), rdx = row_at(&wk, 2, dx);
        double mean, rstd;
        row_stats(x, rx, C, eps, &mean, &rstd);
        double sum_g = 0.0, sum_gx = 0.0;
        for (int64_t k = 0; k < C; k++) {
            const double d = at(dy, rdy, k), xhat = (at(x, rx, k) - mean) * rstd;
            const double g = d * feat(w, k, 1.0);
            sum_g += g;
            sum_gx += g * xhat;
            acc_w[k] += d * xhat;
            acc_b[k] += d;
        }
        const double mean_g = sum_g / (double)C, mean_gx = sum_gx / (double)C;
        for (int64_t k = 0; k < C; k++) {
            const double d = at(dy, rdy, k), xhat = (at(x, rx, k) - mean) * rstd;
            const double g = d * feat(w, k, 1.0);
            rw_st(dx, rdx.base + k * rdx.step, rstd * (g - mean_g - xhat * mean_gx));
        }
        if (res != NULL) add_residual(dx, rdx, res, row_at(&wk, 3, res), C);
    }
    for (int64_t k = 0; k < C; k++) {
        rw_st(dw, k, acc_w[k]);
        rw_st(db, k, acc_b[k]);
    }
    return GDP_OK;
}

/* (dy, x [, weight]) -> (dx, dweight, dbias), and the _add form (dy, x, weight, r) -> (dx + r, ...) */
static gdp_status ref_layer_norm_grad(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)be, (void)stream;
    return layer_norm_grad_rows(node, node->n_in > 2 ? node->in[2] : NULL, node->n_in > 3 ? node->in[3] : NULL, err);
}

/* Scratch of the backward ops: the per-feature sums (C each). */
static size_t ws_layer_norm_grad(const gdp_node *node) { return 2 * rw_doubles(node->in[1]->shape[node->in[1]->ndim - 1]); }
static size_t ws_rms_norm_grad(const gdp_node *node) { return rw_doubles(node->in[1]->shape[node->in[1]->ndim - 1]); }

static gd_status grad_layer_norm(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_attr a[4];
    int na = rd_attrs_copy(c->attrs, a, 4);
    gd_tensor *in[3] = {c->dout[0], c->in[0], c->n_in > 1 ? c->in[1] : NULL};
    gd_tensor *out[3] = {NULL, NULL, NULL};
    gd_status s = gd_op_multi(c->g, "layer_norm_grad", c->n_in > 1 ? 3 : 2, in, na, a, 3, out);
    if (s != GD_OK) return s;
    for (int k = 0; k < c->n_in; k++) c->din[k] = out[k];
    return GD_OK;
}

/* ---- rms_norm -------------------------------------------------------------------------- */

static int infer_rms_norm(gd_infer *c)
{
    int s = check_rows(c, 1, ln_names);
    if (s != 0) return s;
    c->out[0] = c->in[0];
    return 0;
}

static gdp_status ref_rms_norm(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // x (rows, C), weight (C) -> y (rows, C) = x / sqrt(mean(x^2) + eps) * weight
    const gdp_tensor *x = node->in[0], *y = node->out[0], *w = node->n_in > 1 ? node->in[1] : NULL;
    const double eps = gdp_attr_float(&node->attrs, "eps", 1e-6);
    const gdp_tensor *t[2] = {x, y};
    rw_walk wk;
    int64_t C, rows = rows_of(&wk, 2, t, &C);
    for (int64_t r = 0; r < rows; r++, rw_next(&wk)) {
        row rx = row_at(&wk, 0, x), ry = row_at(&wk, 1, y);
        const double inv = row_rms_inv(x, rx, C, eps);
        for (int64_t k = 0; k < C; k++) {
            double v = at(x, rx, k) * inv;
            rw_st(y, ry.base + k * ry.step, w != NULL ? v * feat(w, k, 1.0) : v);
        }
    }
    return GDP_OK;
}

static int infer_rms_norm_grad(gd_infer *c)
{
    // dy (rows, C), x (rows, C), [weight (C)] -> dx (rows, C), dweight (C)
    int s = check_rows(c, 2, ln_grad_names);
    if (s == 0) s = check_like_x(c, 0, "dy");
    if (s != 0) return s;
    const gd_shape *x = &c->in[1];
    c->out[0] = *x;
    c->out[1].dtype = x->dtype;
    c->out[1].ndim = 1;
    c->out[1].dim[0] = x->dim[x->ndim - 1];
    return 0;
}

static gdp_status rms_norm_grad_rows(const gdp_node *node, const gdp_tensor *w, const gdp_tensor *res, gdp_err *err)
{
    // With inv = 1/sqrt(mean(x^2) + eps) and g = dy * weight:
    //   dx = inv * g - inv^3 * x * mean(g * x),  dweight = sum_rows dy * x * inv
    const gdp_tensor *dy = node->in[0], *x = node->in[1];
    const gdp_tensor *dx = node->out[0], *dw = node->out[1];
    const double eps = gdp_attr_float(&node->attrs, "eps", 1e-6);
    const gdp_tensor *t[4] = {x, dy, dx, res};
    rw_walk wk;
    int64_t C, rows = rows_of(&wk, res != NULL ? 4 : 3, t, &C);
    double *acc_w = rw_workspace(node, rw_doubles(C), err);
    if (acc_w == NULL) return GDP_ERR_INVALID;
    for (int64_t k = 0; k < C; k++) acc_w[k] = 0.0;
    for (int64_t r = 0; r < rows; r++, rw_next(&wk)) {
        row rx = row_at(&wk, 0, x), rdy = row_at(&wk, 1, dy), rdx = row_at(&wk, 2, dx);
        const double inv = row_rms_inv(x, rx, C, eps);
        double sum_gx = 0.0;
        for (int64_t k = 0; k < C; k++) {
            const double d = at(dy, rdy, k), v = at(x, rx, k);
            const double g = d * feat(w, k, 1.0);
            sum_gx += g * v;
            acc_w[k] += d * v * inv;
        }
        const double c3 = inv * inv * inv * sum_gx / (double)C;
        for (int64_t k = 0; k < C; k++) {
            const double d = at(dy, rdy, k), v = at(x, rx, k);
            const double g = d * feat(w, k, 1.0);
            rw_st(dx, rdx.base + k * rdx.step, inv * g - c3 * v);
        }
        if (res != NULL) add_residual(dx, rdx, res, row_at(&wk, 3, res), C);
    }
    for (int64_t k = 0; k < C; k++) rw_st(dw, k, acc_w[k]);
    return GDP_OK;
}

/* (dy, x [, weight]) -> (dx, dweight), and the _add form (dy, x, weight, r) -> (dx + r, dweight) */
static gdp_status ref_rms_norm_grad(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)be, (void)stream;
    return rms_norm_grad_rows(node, node->n_in > 2 ? node->in[2] : NULL, node->n_in > 3 ? node->in[3] : NULL, err);
}

/* The backward ops with the residual stream's gradient added (graph passes make them from
 * norm_grad and the add of its dx that follows; models never build them): (dy, x, weight,
 * r), r shaped like x. */
static int infer_grad_add(gd_infer *c, int (*infer)(gd_infer *))
{
    int s = check_like_x(c, 3, "r");
    if (s != 0) return s;
    c->n_in = 3; /* the rest is the plain op's rule over (dy, x, weight) */
    s = infer(c);
    c->n_in = 4;
    return s;
}
static int infer_layer_norm_grad_add(gd_infer *c) { return infer_grad_add(c, infer_layer_norm_grad); }
static int infer_rms_norm_grad_add(gd_infer *c) { return infer_grad_add(c, infer_rms_norm_grad); }

static gd_status grad_rms_norm(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_attr a[4];
    int na = rd_attrs_copy(c->attrs, a, 4);
    gd_tensor *in[3] = {c->dout[0], c->in[0], c->n_in > 1 ? c->in[1] : NULL};
    gd_tensor *out[2] = {NULL, NULL};
    gd_status s = gd_op_multi(c->g, "rms_norm_grad", c->n_in > 1 ? 3 : 2, in, na, a, 2, out);
    if (s != GD_OK) return s;
    for (int k = 0; k < c->n_in; k++) c->din[k] = out[k];
    return GD_OK;
}

/* ---- add_layer_norm, add_rms_norm ------------------------------------------------------ */

/* A transformer's residual stream: s = x + r, then the norm of s. One op for the two so
 * that a backend can read x and r once and write s and y in one pass over the row (graph
 * passes make it from an add whose sum a norm reads; models never build it). The norm
 * reads s as stored, rounded to its dtype, exactly as the two ops did. */

static const char *const add_norm_names[] = {"x", "r", "weight", "bias"};

static int infer_add_norm(gd_infer *c)
{
    const gd_shape *x = &c->in[0], *r = &c->in[1];
    if (r->dtype != x->dtype || !rd_same_dims(r, x)) {
        char a[240], b[240];
        return gd_infer_fail(c, "r %s must have x %s's shape and dtype", rd_desc(r, a, sizeof a), rd_desc(x, b, sizeof b));
    }
    /* check_rows reads in[first - 1] as x and in[first..) as the per-feature vectors */
    int s = check_rows(c, 2, add_norm_names);
    if (s != 0) return s;
    c->out[0] = c->out[1] = *x;
    return 0;
}

/* s = x + r into out[0], then the plain norm op's reference over s. */
static gdp_status ref_add_norm(void *be, const gdp_node *node, void *stream, gdp_err *err, gdp_launch_fn norm)
{
    const gdp_tensor *x = node->in[0], *r = node->in[1], *s = node->out[0];
    const int64_t n = gdp_numel(x);
    for (int64_t i = 0; i < n; i++) gd_ref_store(s, i, gd_ref_load(x, i) + gd_ref_load(r, i));
    const gdp_tensor *in[3] = {s, node->n_in > 2 ? node->in[2] : NULL, node->n_in > 3 ? node->in[3] : NULL};
    gdp_node sub = *node;
    sub.n_in = node->n_in - 1, sub.in = in;
    sub.n_out = 1, sub.out = node->out + 1;
    return norm(be, &sub, stream, err);
}
static gdp_status ref_add_layer_norm(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    return ref_add_norm(be, node, stream, err, ref_layer_norm);
}
static gdp_status ref_add_rms_norm(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    return ref_add_norm(be, node, stream, err, ref_rms_norm);
}

/* ---- builders -------------------------------------------------------------------------- */

gd_tensor *gd_layer_norm(gd_tensor *x, gd_tensor *weight, gd_tensor *bias, double eps)
{
    if (x == NULL) return NULL;
    if (bias != NULL && weight == NULL)
        return gd_fail_null(gd_tensor_graph(x), GD_ERR_INVALID,
                            "layer_norm: a bias without a weight is not supported (pass a weight of ones)");
    gd_tensor *in[3] = {x, weight, bias};
    int n = bias != NULL ? 3 : weight != NULL ? 2 : 1;
    gd_attr a = gd_attr_f("eps", eps);
    return gd_op(gd_tensor_graph(x), "layer_norm", n, in, 1, &a);
}

gd_tensor *gd_rms_norm(gd_tensor *x, gd_tensor *weight, double eps)
{
    if (x == NULL) return NULL;
    gd_tensor *in[2] = {x, weight};
    gd_attr a = gd_attr_f("eps", eps);
    return gd_op(gd_tensor_graph(x), "rms_norm", weight != NULL ? 2 : 1, in, 1, &a);
}

/* ---- registration ---------------------------------------------------------------------- */

static const char *const layer_norm_cases[] = {
    "f[4,8]",
    "f[4,8] f[8]",
    "f[4,8] f[8] f[8]",
    "f[2,3,5] f[5] f[5] | eps=1e-3",
    "f[6]",
    "f[3,1] f[1] f[1]",
    "n[16,64] n[64] n[64]",
    "n[2,2500] n[2500] n[2500]", /* rows longer than a backend keeps in registers */
    /* enough rows for a backend's warp a row: whole and partial vector groups */
    "n[40,768] n[768] n[768]",
    "n[33,1000] n[1000]",
    "n[35,64] n[64] n[64]", /* short rows: 8 or 16 lanes a row, and a warp's last rows empty */
    "n[37,40] n[40]",       /* short rows that leave lanes of their group idle */
    "n[40,384] n[384] n[384]", /* two vectors a lane, the second group partly filled */
    NULL,
};

static const char *const layer_norm_grad_cases[] = {
    "f[4,8] f[4,8]",
    "f[4,8] f[4,8] f[8]",
    "f[2,3,5] f[2,3,5] f[5] | eps=1e-3",
    "f[6] f[6]",
    "n[16,64] n[16,64] n[64]",
    /* rows a backend's warp holds in registers: whole and partial vector groups, no weight */
    "n[40,768] n[40,768] n[768]",
    "n[9,1000] n[9,1000]",
    "n[5,2048] n[5,2048] n[2048]",
    "n[37,128] n[37,128] n[128]", /* 16 lanes a row (f16/bf16), two vectors a lane (f32) */
    "n[37,40] n[37,40]",          /* short rows that leave lanes of their group idle */
    "n[40,384] n[40,384] n[384]", /* two vectors a lane, the second group partly filled */
    /* more rows than a backend's grid has warps (a few blocks an SM): a lane adds up the
     * weight and bias sums of several rows */
    "n[2200,136] n[2200,136] n[136]",
    NULL,
};

static const char *const rms_norm_cases[] = {
    "f[4,8]",
    "f[4,8] f[8]",
    "f[2,3,5] f[5] | eps=1e-5",
    "f[7]",
    "n[16,64] n[64]",
    "n[3,2500] n[2500]", /* rows longer than a backend keeps in registers */
    "n[40,1024] n[1024]", /* enough rows for a backend's warp a row */
    "n[33,2048]",         /* a warp a row for f16/bf16 (eight vectors a lane); f32's is too long */
    "n[37,128] n[128]",   /* short rows (a head's q or k): 16 or 32 lanes a row */
    "n[33,32] n[32]",     /* 8 lanes a row, a warp's last rows empty */
    "n[33,256]",          /* two vectors a lane */
    "n[37,120] n[120]",   /* 8 lanes a row of two vectors, the last lane's second empty */
    NULL,
};

static const char *const rms_norm_grad_cases[] = {
    "f[4,8] f[4,8]",
    "f[4,8] f[4,8] f[8]",
    "f[2,3,5] f[2,3,5] f[5] | eps=1e-5",
    "n[16,64] n[16,64] n[64]",
    "n[40,1024] n[40,1024] n[1024]",
    "n[3,1032] n[3,1032]",
    "f[4,12] f[4,12] f[12]",
    "n[35,64] n[35,64] n[64]", /* short rows: 8 or 16 lanes a row */
    "n[33,32] n[33,32] n[32]",   /* 8 lanes a row, a warp's last rows empty */
    "n[33,256] n[33,256]",       /* two vectors a lane */
    /* more rows than a backend's grid has warps, or groups of 8 lanes: several rows a lane */
    "n[2200,136] n[2200,136] n[136]",
    "n[8500,32] n[8500,32] n[32]",
    "n[2200,120] n[2200,120] n[120]", /* 8 lanes a row of two vectors, the last lane's second empty */
    NULL,
};

/* (dy, x, weight, r): the rows a backend takes a warp a row and the longer ones */
static const char *const norm_grad_add_cases[] = {
    "f[4,8] f[4,8] f[8] f[4,8]",
    "f[2,3,5] f[2,3,5] f[5] f[2,3,5] | eps=1e-3",
    "n[16,64] n[16,64] n[64] n[16,64]",
    "n[40,768] n[40,768] n[768] n[40,768]",
    "n[37,128] n[37,128] n[128] n[37,128]",
    "n[37,40] n[37,40] n[40] n[37,40]",
    "n[5,2048] n[5,2048] n[2048] n[5,2048]",
    "n[3,2500] n[3,2500] n[2500] n[3,2500]",
    "n[2200,136] n[2200,136] n[136] n[2200,136]",
    "n[2200,120] n[2200,120] n[120] n[2200,120]",
    NULL,
};

static const char *const add_layer_norm_cases[] = {
    "f[4,8] f[4,8]",
    "f[4,8] f[4,8] f[8] f[8]",
    "f[2,3,5] f[2,3,5] f[5] | eps=1e-3",
    "n[3,768] n[3,768] n[768] n[768]",
    "n[40,768] n[40,768] n[768] n[768]", /* enough rows for a backend's warp a row */
    "n[37,40] n[37,40] n[40] n[40]",     /* short rows: 8 or 16 lanes a row, lanes idle */
    NULL,
};

static const char *const add_rms_norm_cases[] = {
    "f[4,8] f[4,8]",
    "f[4,8] f[4,8] f[8]",
    "f[2,3,5] f[2,3,5] f[5] | eps=1e-5",
    "f[7] f[7] p[7]",
    "n[1,768] n[1,768] n[768]",
    "n[16,1024] n[16,1024] n[1024]",
    "n[2,2500] n[2,2500] n[2500]", /* rows longer than a backend keeps in registers */
    "n[40,1000] n[40,1000] n[1000]", /* enough rows for a backend's warp a row */
    "n[35,64] n[35,64] n[64]",       /* short rows, a warp's last rows empty */
    "n[37,128] n[37,128]",
    NULL,
};

/* Operations per element of x: layer_norm centres, squares and sums, scales, then applies
 * weight and bias (about 8); rms_norm squares and sums, scales, applies weight (4); each
 * gradient about twice its forward. */
static void cost_norm(const gdp_node *n, double per_element, double *bytes, double *flops)
{
    const gdp_tensor *x = n->n_out == 1 ? n->in[0] : n->in[1]; /* forward: x; gradients: (dy, x, ...) */
    *bytes = gd_cost_io_bytes(n);
    *flops = per_element * (double)gdp_numel(x);
}
static void cost_layer_norm(const gdp_node *n, double *bytes, double *flops) { cost_norm(n, 8, bytes, flops); }
static void cost_layer_norm_grad(const gdp_node *n, double *bytes, double *flops) { cost_norm(n, 16, bytes, flops); }
static void cost_rms_norm(const gdp_node *n, double *bytes, double *flops) { cost_norm(n, 4, bytes, flops); }
static void cost_add_layer_norm(const gdp_node *n, double *bytes, double *flops) { cost_norm(n, 9, bytes, flops); }
static void cost_add_rms_norm(const gdp_node *n, double *bytes, double *flops) { cost_norm(n, 5, bytes, flops); }
static void cost_rms_norm_grad(const gdp_node *n, double *bytes, double *flops) { cost_norm(n, 8, bytes, flops); }

GD_FAMILY(norm)
{
    gd_register_op(r, &(gd_op_def){
        .name = "layer_norm", .min_in = 1, .max_in = 3, .n_out = 1, .attrs = "eps:float", .dtypes = GD_FLOATS,
        .infer = infer_layer_norm, .grad = grad_layer_norm, .ref = ref_layer_norm, .cases = layer_norm_cases,
        .ref_strided = 1, .tol = 1e-8, .cost = cost_layer_norm,
        .doc = "layer_norm(x, [weight], [bias]) over the last axis, eps (default 1e-5)"});
    gd_register_op(r, &(gd_op_def){
        .name = "layer_norm_grad", .min_in = 2, .max_in = 3, .n_out = 3, .attrs = "eps:float",
        .dtypes = GD_FLOATS, .infer = infer_layer_norm_grad, .ref = ref_layer_norm_grad,
        .cases = layer_norm_grad_cases, .ref_workspace = ws_layer_norm_grad, .ref_strided = 1, .tol = 1e-8,
        .cost = cost_layer_norm_grad,
        .doc = "layer_norm_grad(dy, x, [weight]) -> dx, dweight, dbias"});
    gd_register_op(r, &(gd_op_def){
        .name = "layer_norm_grad_add", .min_in = 4, .max_in = 4, .n_out = 3, .attrs = "eps:float",
        .dtypes = GD_FLOATS, .infer = infer_layer_norm_grad_add, .ref = ref_layer_norm_grad,
        .cases = norm_grad_add_cases, .ref_workspace = ws_layer_norm_grad, .ref_strided = 1, .tol = 1e-8,
        .ref_dtypes = GD_FLOATS64, /* in each dtype: dx is rounded to it before r is added */
        .cost = cost_layer_norm_grad,
        .doc = "layer_norm_grad_add(dy, x, weight, r) -> dx + r, dweight, dbias: the backward and the add of the "
               "residual stream's gradient after it, as graph passes fuse them"});
    gd_register_op(r, &(gd_op_def){
        .name = "rms_norm", .min_in = 1, .max_in = 2, .n_out = 1, .attrs = "eps:float", .dtypes = GD_FLOATS,
        .infer = infer_rms_norm, .grad = grad_rms_norm, .ref = ref_rms_norm, .cases = rms_norm_cases,
        .ref_strided = 1, .tol = 1e-8, .cost = cost_rms_norm,
        .doc = "rms_norm(x, [weight]): x / sqrt(mean(x^2) + eps) * weight over the last axis, eps (default 1e-6)"});
    gd_register_op(r, &(gd_op_def){
        .name = "rms_norm_grad", .min_in = 2, .max_in = 3, .n_out = 2, .attrs = "eps:float",
        .dtypes = GD_FLOATS, .infer = infer_rms_norm_grad, .ref = ref_rms_norm_grad,
        .cases = rms_norm_grad_cases, .ref_workspace = ws_rms_norm_grad, .ref_strided = 1, .tol = 1e-8,
        .cost = cost_rms_norm_grad,
        .doc = "rms_norm_grad(dy, x, [weight]) -> dx, dweight"});
    gd_register_op(r, &(gd_op_def){
        .name = "rms_norm_grad_add", .min_in = 4, .max_in = 4, .n_out = 2, .attrs = "eps:float",
        .dtypes = GD_FLOATS, .infer = infer_rms_norm_grad_add, .ref = ref_rms_norm_grad,
        .cases = norm_grad_add_cases, .ref_workspace = ws_rms_norm_grad, .ref_strided = 1, .tol = 1e-8,
        .ref_dtypes = GD_FLOATS64, .cost = cost_rms_norm_grad,
        .doc = "rms_norm_grad_add(dy, x, weight, r) -> dx + r, dweight: the backward and the add of the residual "
               "stream's gradient after it, as graph passes fuse them"});
    gd_register_op(r, &(gd_op_def){
        .name = "add_layer_norm", .min_in = 2, .max_in = 4, .n_out = 2, .attrs = "eps:float", .dtypes = GD_FLOATS,
        .infer = infer_add_norm, .ref = ref_add_layer_norm, .cases = add_layer_norm_cases, .ref_strided = 1, .tol = 1e-8,
        .ref_dtypes = GD_FLOATS64, /* in each dtype: s is rounded to it before the norm reads it */
        .cost = cost_add_layer_norm,
        .doc = "add_layer_norm(x, r, [weight], [bias]) -> s = x + r, layer_norm(s): the residual add and the norm "
               "after it, as graph passes fuse them"});
    gd_register_op(r, &(gd_op_def){
        .name = "add_rms_norm", .min_in = 2, .max_in = 3, .n_out = 2, .attrs = "eps:float", .dtypes = GD_FLOATS,
        .infer = infer_add_norm, .ref = ref_add_rms_norm, .cases = add_rms_norm_cases, .ref_strided = 1, .tol = 1e-8,
        .ref_dtypes = GD_FLOATS64, /* in each dtype: s is rounded to it before the norm reads it */
        .cost = cost_add_rms_norm,
        .doc = "add_rms_norm(x, r, [weight]) -> s = x + r, rms_norm(s): the residual add and the norm after it, as "
               "graph passes fuse them"});
}
