/* reduce.c — reductions: sum, mean, max (and max_grad), argmax; expand, the broadcast
 * that takes a reduction's gradient back to the input's shape; global_norm, the one
 * number gradient clipping needs.
 *
 * Every reduction here is the same walk: visit x in row-major order (through its own
 * strides) and keep, alongside, the offset of the output element the visited one folds
 * into. Reduced axes step that offset by 0. Expand is the same walk read the other way
 * round (the output is the big tensor, the input the one with stride 0 along broadcast
 * axes). Sums live in the node's workspace; sum and mean may write a wider dtype than x's
 * (attribute dtype: bf16 or f16 into f32).
 */
#include "alloc.h"
#include "reduce.h"
#include "refwalk.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static gd_shape shape_of(const gdp_tensor *t)
{
    gd_shape s = {0};
    s.dtype = t->dtype;
    s.ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) s.dim[d] = t->shape[d];
    return s;
}

/* Marks in red[] the axes of x named by the "axes" attribute (every axis when it is absent
 * or empty). Returns 0, or -1 with the reason in msg. */
static int axes_parse(const gdp_attrs *attrs, const gd_shape *x, int *red, char *msg, size_t cap)
{
    int64_t ax[GDP_MAX_DIMS + 1];
    int n = gdp_attr_ints(attrs, "axes", ax, GDP_MAX_DIMS + 1);
    char xd[240], ad[240];
    rd_desc(x, xd, sizeof xd);
    if (n > GDP_MAX_DIMS) {
        snprintf(msg, cap, "%d axes given for x %s; at most %d", n, xd, GDP_MAX_DIMS);
        return -1;
    }
    for (int d = 0; d < GDP_MAX_DIMS; d++) red[d] = n == 0;
    for (int k = 0; k < n; k++) {
        int64_t a = ax[k] < 0 ? ax[k] + x->ndim : ax[k];
        if (a < 0 || a >= x->ndim) {
            snprintf(msg, cap, "axes %s: axis %lld is out of range for x %s", rd_ints(ax, n, ad, sizeof ad),
                     (long long)ax[k], xd);
            return -1;
        }
        if (red[a]) {
            snprintf(msg, cap, "axes %s name axis %lld twice (x %s)", rd_ints(ax, n, ad, sizeof ad), (long long)a,
                     xd);
            return -1;
        }
        red[a] = 1;
    }
    return 0;
}

/* ---- the walk ------------------------------------------------------------------------ */

/* The walk of a reduction: x's elements in row-major order, carrying x's offset (slot 0,
 * through its own strides) and the offset of the output element it folds into (slot 1:
 * the output's strides along kept axes, 0 along reduced ones). Also gives the output's
 * element count and how many elements fold into each. */
static int reduce_walk(rw_walk *w, const gdp_tensor *x, const gdp_attrs *attrs, int64_t *n_out, int64_t *n_red,
                       char *msg, size_t cap)
{
    gd_shape xs = shape_of(x);
    int red[GDP_MAX_DIMS];
    if (axes_parse(attrs, &xs, red, msg, cap) != 0) return -1;
    int64_t step[GDP_MAX_DIMS], s = 1, r = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        if (red[d]) {
            step[d] = 0;
            r *= x->shape[d];
        } else {
            step[d] = s;
            s *= x->shape[d];
        }
    }
    rw_begin(w, x->ndim, x->shape);
    rw_add(w, x);
    rw_add_strides(w, step);
    *n_out = s;
    *n_red = r;
    return 0;
}

/* ---- sum, mean ------------------------------------------------------------------------- */

/* The shape of a reduction of x under attrs; max also refuses to reduce an empty axis
 * (there is no value to return). 0, or -1 with the reason in msg. */
static int reduced_shape(const gdp_attrs *attrs, const gd_shape *x, int is_max, gd_shape *y, char *msg, size_t cap)
{
    int red[GDP_MAX_DIMS];
    if (axes_parse(attrs, x, red, msg, cap) != 0) return -1;
    int keep = gdp_attr_int(attrs, "keepdims", 0) != 0;
    y->dtype = x->dtype;
    y->ndim = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (!red[d]) y->dim[y->ndim++] = x->dim[d];
        else if (keep) y->dim[y->ndim++] = 1;
    }
    if (is_max && gd_shape_numel(x) == 0 && gd_shape_numel(y) > 0) {
        char xd[240];
        snprintf(msg, cap, "max over an empty axis of x %s has no value", rd_desc(x, xd, sizeof xd));
        return -1;
    }
    return 0;
}

/* sum and mean: the attribute dtype, when given, is the output's (a float dtype); the
 * forms that differ from the input's are the op's declared mixed forms. */
static int infer_reduce(gd_infer *c)
{
    char msg[300];
    if (reduced_shape(c->attrs, &c->in[0], 0, &c->out[0], msg, sizeof msg) != 0) return gd_infer_fail(c, "%s", msg);
    if (gdp_attr_find(c->attrs, "dtype") != NULL) {
        int64_t dt = gdp_attr_int(c->attrs, "dtype", -1);
        if (dt < 0 || dt >= GDP_DTYPE_COUNT || !gdp_is_float((int32_t)dt))
            return gd_infer_fail(c, "dtype %lld is not a float dtype", (long long)dt);
        c->out[0].dtype = (int32_t)dt;
    }
    return 0;
}

static int infer_mean(gd_infer *c)
{
    int s = rd_need_float(c, &c->in[0], "x");
    return s != 0 ? s : infer_reduce(c);
}

static gdp_status sum_or_mean(const gdp_node *node, gdp_err *err, int mean)
{
    // x (...) -> y (x's shape without the reduced axes, or with them as 1), in y's dtype
    const gdp_tensor *x = node->in[0], *y = node->out[0];
    rw_walk w;
    int64_t n_out, n_red;
    char msg[300];
    if (reduce_walk(&w, x, &node->attrs, &n_out, &n_red, msg, sizeof msg) != 0)
        return gdp_fail(err, GDP_ERR_INVALID, "%s", msg);
    double *acc = rw_workspace(node, rw_doubles(n_out), err);
    if (acc == NULL) return GDP_ERR_INVALID;
    for (int64_t o = 0; o < n_out; o++) acc[o] = 0.0;
    int64_t n = gdp_numel(x);
    for (int64_t i = 0; i < n; i++, rw_next(&w)) acc[w.off[1]] += rw_ld(x, w.off[0]);
    for (int64_t o = 0; o < n_out; o++) rw_st(y, o, mean ? acc[o] / (double)n_red : acc[o]);
    return GDP_OK;
}

/* Scratch: one double per output element. */
static size_t ws_sum(const gdp_node *node) { return rw_doubles(gdp_numel(node->out[0])); }

static gdp_status ref_sum(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    return sum_or_mean(node, err, 0);
}

static gdp_status ref_mean(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    return sum_or_mean(node, err, 1);
}

/* dy has the reduced shape; gives it x's rank (1 along reduced axes), then broadcasts it
 * over x's shape. *n_red: how many elements of x each element of dy stands for. */
static gd_tensor *expand_back(gd_grad_ctx *c, gd_tensor *dy, int64_t *n_red)
{
    if (dy == NULL) return NULL;
    gd_shape xs = gd_tensor_shape(c->in[0]);
    int red[GDP_MAX_DIMS];
    char msg[300];
    if (axes_parse(c->attrs, &xs, red, msg, sizeof msg) != 0)
        return gd_fail_null(c->g, GD_ERR_SHAPE, "gradient of a reduction: %s", msg);
    gd_shape kept = xs;
    *n_red = 1;
    for (int d = 0; d < xs.ndim; d++) {
        if (red[d]) {
            kept.dim[d] = 1;
            *n_red *= xs.dim[d];
        }
    }
    gd_shape ys = gd_tensor_shape(dy);
    if (!rd_same_dims(&ys, &kept)) dy = gd_reshape(dy, kept.ndim, kept.dim);
    if (rd_same_dims(&kept, &xs)) return dy;
    return gd_expand(dy, xs.ndim, xs.dim);
}

/* A gradient rule's result: a NULL where a gradient was due means a builder failed, and
 * its message is already in the context. */
static gd_status built(const gd_tensor *t)
{
    return t != NULL ? GD_OK : GD_ERR_INVALID;
}

/* The gradient in the input's dtype: a sum or mean made in a wider dtype (attribute
 * dtype) hands its gradient back rounded to the input's. */
static gd_tensor *in_dtype(gd_grad_ctx *c, gd_tensor *dy)
{
    gd_dtype want = gd_tensor_dtype(c->in[0]);
    return dy != NULL && gd_tensor_dtype(dy) != want ? gd_cast(dy, want) : dy;
}

static gd_status grad_sum(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    int64_t n_red;
    c->din[0] = expand_back(c, in_dtype(c, c->dout[0]), &n_red);
    return built(c->din[0]);
}

static gd_status grad_mean(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    int64_t n_red;
    gd_tensor *dx = expand_back(c, in_dtype(c, c->dout[0]), &n_red);
    c->din[0] = n_red > 1 ? gd_scale(dx, 1.0 / (double)n_red, 0.0) : dx;
    return built(c->din[0]);
}

/* ---- max, max_grad --------------------------------------------------------------------- */

static int infer_max(gd_infer *c)
{
    char msg[300];
    if (reduced_shape(c->attrs, &c->in[0], 1, &c->out[0], msg, sizeof msg) != 0) return gd_infer_fail(c, "%s", msg);
    return 0;
}

/* For each output element, the row-major index into x of its first maximal element and
 * that element (NaN counts as larger than anything, so that it propagates), in the
 * kernel's workspace: pos (n_out int64), then best (n_out doubles). */
static gdp_status max_positions(const gdp_node *node, const gdp_tensor *x, int64_t **pos_out, double **best_out,
                                int64_t *n_out, gdp_err *err)
{
    rw_walk w;
    int64_t n_red;
    char msg[300];
    if (reduce_walk(&w, x, &node->attrs, n_out, &n_red, msg, sizeof msg) != 0)
        return gdp_fail(err, GDP_ERR_INVALID, "%s", msg);
    char *ws = rw_workspace(node, 2 * rw_doubles(*n_out), err);
    if (ws == NULL) return GDP_ERR_INVALID;
    int64_t *pos = (int64_t *)ws;
    double *best = (double *)(ws + rw_doubles(*n_out));
    for (int64_t o = 0; o < *n_out; o++) pos[o] = -1;
    int64_t n = gdp_numel(x);
    for (int64_t i = 0; i < n; i++, rw_next(&w)) {
        int64_t o = w.off[1];
        double v = rw_ld(x, w.off[0]);
        if (pos[o] < 0 || v > best[o] || (isnan(v) && !isnan(best[o]))) {
            best[o] = v;
            pos[o] = i;
        }
    }
    *pos_out = pos;
    *best_out = best;
    return GDP_OK;
}

/* Scratch of max and max_grad: a position and a value per output element (of max; of dy
 * for max_grad, which has the same count). */
static size_t ws_max(const gdp_node *node)
{
    return 2 * rw_doubles(node->n_in > 1 ? gdp_numel(node->in[0]) : gdp_numel(node->out[0]));
}

static gdp_status ref_max(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // x (...) -> y (reduced)
    const gdp_tensor *y = node->out[0];
    int64_t *pos, n_out;
    double *best;
    gdp_status s = max_positions(node, node->in[0], &pos, &best, &n_out, err);
    if (s != GDP_OK) return s;
    for (int64_t o = 0; o < n_out; o++) rw_st(y, o, best[o]);
    return GDP_OK;
}

static int infer_max_grad(gd_infer *c)
{
    // dy (reduced), x (...) -> dx (like x)
    const gd_shape *dy = &c->in[0], *x = &c->in[1];
    gd_shape y;
    char msg[300], a[240], b[240], e[240];
    if (reduced_shape(c->attrs, x, 1, &y, msg, sizeof msg) != 0) return gd_infer_fail(c, "%s", msg);
    if (dy->dtype != x->dtype || !rd_same_dims(dy, &y))
        return gd_infer_fail(c, "dy %s does not match the max of x %s, which is %s", rd_desc(dy, a, sizeof a),
                             rd_desc(x, b, sizeof b), rd_desc(&y, e, sizeof e));
    c->out[0] = *x;
    return 0;
}

static gdp_status ref_max_grad(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // dy (reduced), x (...) -> dx (like x): dy lands on each slice's first maximal element
    const gdp_tensor *dy = node->in[0], *x = node->in[1], *dx = node->out[0];
    int64_t *pos, n_out;
    double *best;
    gdp_status s = max_positions(node, x, &pos, &best, &n_out, err);
    if (s != GDP_OK) return s;
    int64_t n = gdp_numel(x);
    for (int64_t i = 0; i < n; i++) rw_st(dx, i, 0.0);
    rw_walk w; // dy in row-major order, whatever its strides
    rw_begin(&w, dy->ndim, dy->shape);
    rw_add(&w, dy);
    for (int64_t o = 0; o < n_out; o++, rw_next(&w)) rw_st(dx, pos[o], rw_ld(dy, w.off[0]));
    return GDP_OK;
}

static gd_status grad_max(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_attr a[4];
    int na = rd_attrs_copy(c->attrs, a, 4);
    gd_tensor *in[2] = {c->dout[0], c->in[0]};
    c->din[0] = gd_op(c->g, "max_grad", 2, in, na, a);
    return built(c->din[0]);
}

/* ---- argmax ---------------------------------------------------------------------------- */

static int infer_argmax(gd_infer *c)
{
    const gd_shape *x = &c->in[0];
    int axis = gd_axis(c, gdp_attr_int(c->attrs, "axis", -1), x->ndim, "axis");
    if (axis < 0) return rd_infer_failed(c);
    char xd[240];
    if (x->dim[axis] == 0)
        return gd_infer_fail(c, "argmax over empty axis %d of x %s has no value", axis, rd_desc(x, xd, sizeof xd));
    int keep = gdp_attr_int(c->attrs, "keepdims", 0) != 0;
    gd_shape *y = &c->out[0];
    y->dtype = GDP_I64;
    y->ndim = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (d != axis) y->dim[y->ndim++] = x->dim[d];
        else if (keep) y->dim[y->ndim++] = 1;
    }
    return 0;
}

static gdp_status ref_argmax(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // x (..., n, ...) -> y (x's shape without the axis) i64, the first index of the maximum
    const gdp_tensor *x = node->in[0], *y = node->out[0];
    int64_t axis = gdp_attr_int(&node->attrs, "axis", -1);
    if (axis < 0) axis += x->ndim;
    if (axis < 0 || axis >= x->ndim || y->dtype != GDP_I64)
        return gdp_fail(err, GDP_ERR_INVALID, "axis %lld of a %d-D x, output dtype %d",
                        (long long)gdp_attr_int(&node->attrs, "axis", -1), (int)x->ndim, (int)y->dtype);
    const int64_t n = x->shape[axis], step = x->stride[axis];
    // one row per index of the other dims, in the output's row-major order
    int64_t rows_shape[GDP_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) rows_shape[d] = d == axis ? 1 : x->shape[d];
    rw_walk w;
    rw_begin(&w, x->ndim, rows_shape);
    rw_add_strides(&w, x->stride);
    int64_t *out = y->data, rows = gdp_numel(y);
    for (int64_t r = 0; r < rows; r++, rw_next(&w)) {
        const int64_t base = w.off[0];
        int64_t best_k = 0;
        double best = rw_ld(x, base);
        for (int64_t k = 1; k < n; k++) {
            double v = rw_ld(x, base + k * step);
            if (v > best || (isnan(v) && !isnan(best))) {
                best = v;
                best_k = k;
            }
        }
        out[r] = best_k;
    }
    return GDP_OK;
}

/* ---- expand ----------------------------------------------------------------------------- */

static int infer_expand(gd_infer *c)
{
    const gd_shape *x = &c->in[0];
    int64_t to[GDP_MAX_DIMS + 1];
    int n = gdp_attr_ints(c->attrs, "shape", to, GDP_MAX_DIMS + 1);
    char xd[240], td[240];
    rd_desc(x, xd, sizeof xd);
    if (n > GDP_MAX_DIMS) return gd_infer_fail(c, "target shape of %d dims for x %s; at most %d", n, xd, GDP_MAX_DIMS);
    rd_ints(to, n, td, sizeof td);
    if (n < x->ndim) return gd_infer_fail(c, "x %s has more dims than the target shape %s", xd, td);
    const int off = n - x->ndim;
    for (int d = 0; d < n; d++) {
        if (to[d] < 0) return gd_infer_fail(c, "target shape %s has a negative dim (x %s)", td, xd);
        if (d >= off && x->dim[d - off] != 1 && x->dim[d - off] != to[d])
            return gd_infer_fail(c, "cannot broadcast x %s to %s: axis %d of x has %lld, not 1 or %lld", xd, td,
                                 d - off, (long long)x->dim[d - off], (long long)to[d]);
    }
    gd_shape *y = &c->out[0];
    y->dtype = x->dtype;
    y->ndim = n;
    for (int d = 0; d < n; d++) y->dim[d] = to[d];
    return 0;
}

static gdp_status ref_expand(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // x (aligned to the right of y's shape, 1 along broadcast axes) -> y; a copy of elements
    const gdp_tensor *x = node->in[0], *y = node->out[0];
    if (x->ndim > y->ndim || x->dtype != y->dtype)
        return gdp_fail(err, GDP_ERR_INVALID, "x of %d dims into an output of %d", (int)x->ndim, (int)y->ndim);
    rw_walk w;
    rw_begin(&w, y->ndim, y->shape);
    rw_add(&w, x);
    const size_t es = gdp_dtype_size(y->dtype);
    const char *src = x->data;
    char *dst = y->data;
    int64_t n = gdp_numel(y);
    for (int64_t o = 0; o < n; o++, rw_next(&w)) memcpy(dst + (size_t)o * es, src + (size_t)w.off[0] * es, es);
    return GDP_OK;
}

/* A view: dims x broadcasts along get stride 0. */
static int view_expand(const gdp_attrs *attrs, const gd_shape *in, const int64_t *in_stride, int64_t in_offset,
                       const gd_shape *out, int64_t *out_stride, int64_t *out_offset)
{
    (void)attrs;
    const int off = out->ndim - in->ndim;
    for (int d = 0; d < out->ndim; d++) {
        int e = d - off;
        out_stride[d] = e < 0 || (in->dim[e] == 1 && out->dim[d] != 1) ? 0 : in_stride[e];
    }
    *out_offset = in_offset;
    return 0;
}

static gd_status grad_expand(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    c->din[0] = gd_sum_to(c->dout[0], c->in[0]);
    return built(c->din[0]);
}

/* ---- global_norm ------------------------------------------------------------------------ */

static int infer_global_norm(gd_infer *c)
{
    int s = rd_need_float(c, &c->in[0], "xs[0]");
    if (s != 0) return s;
    for (int k = 1; k < c->n_in; k++) {
        if (c->in[k].dtype != c->in[0].dtype) {
            char a[240], b[240];
            return gd_infer_fail(c, "xs[%d] %s has another dtype than xs[0] %s", k, rd_desc(&c->in[k], a, sizeof a),
                                 rd_desc(&c->in[0], b, sizeof b));
        }
    }
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].ndim = 0;
    /* the attribute dtype, when given, is the result's: bf16 gradients' norm in f32 */
    if (gdp_attr_find(c->attrs, "dtype") != NULL) {
        int64_t dt = gdp_attr_int(c->attrs, "dtype", -1);
        if (dt < 0 || dt >= GDP_DTYPE_COUNT || !gdp_is_float((int32_t)dt))
            return gd_infer_fail(c, "dtype %lld is not a float dtype", (long long)dt);
        c->out[0].dtype = (int32_t)dt;
    }
    return 0;
}

static gdp_status ref_global_norm(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // xs[0..n) (any shapes and strides) -> y () = sqrt(sum of squares)
    double ss = 0.0;
    for (int k = 0; k < node->n_in; k++) {
        const gdp_tensor *x = node->in[k];
        int64_t n = gdp_numel(x);
        rw_walk w;
        rw_begin(&w, x->ndim, x->shape);
        rw_add(&w, x);
        for (int64_t i = 0; i < n; i++, rw_next(&w)) {
            double v = rw_ld(x, w.off[0]);
            ss += v * v;
        }
    }
    rw_st(node->out[0], 0, sqrt(ss));
    return GDP_OK;
}

static gd_status grad_global_norm(gd_grad_ctx *c)
{
    // d norm / d x = x / norm
    if (c->dout[0] == NULL) return GD_OK;
    gd_tensor *s = gd_div(c->dout[0], c->out[0]); // ()
    if (s != NULL && gd_tensor_dtype(s) != gd_tensor_dtype(c->in[0])) s = gd_cast(s, gd_tensor_dtype(c->in[0]));
    for (int k = 0; k < c->n_in; k++) {
        c->din[k] = gd_mul(c->in[k], s);
        if (c->din[k] == NULL) return GD_ERR_INVALID;
    }
    return GD_OK;
}

/* ---- builders ---------------------------------------------------------------------------- */

/* out < 0: the output keeps x's dtype (no dtype attribute). */
static gd_tensor *reduce_build(gd_tensor *x, const char *op, int n_axes, const int64_t *axes, int keepdims, int out)
{
    if (x == NULL) return NULL;
    if (n_axes < 0 || n_axes > GD_MAX_DIMS || (n_axes > 0 && axes == NULL))
        return gd_fail_null(gd_tensor_graph(x), GD_ERR_INVALID, "%s: %d axes%s; 0 to %d expected", op, n_axes,
                            n_axes > 0 && axes == NULL ? " but no array" : "", GD_MAX_DIMS);
    gd_attr a[3];
    int n = 0;
    if (n_axes > 0) a[n++] = gd_attr_is("axes", n_axes, axes);
    a[n++] = gd_attr_i("keepdims", keepdims != 0);
    if (out >= 0) a[n++] = gd_attr_i("dtype", out);
    return gd_op1(x, op, n, a);
}

gd_tensor *gd_sum(gd_tensor *x, int n_axes, const int64_t *axes, int keepdims)
{
    return reduce_build(x, "sum", n_axes, axes, keepdims, -1);
}

gd_tensor *gd_mean(gd_tensor *x, int n_axes, const int64_t *axes, int keepdims)
{
    return reduce_build(x, "mean", n_axes, axes, keepdims, -1);
}

gd_tensor *gd_sum_as(gd_tensor *x, int n_axes, const int64_t *axes, int keepdims, gd_dtype out)
{
    return reduce_build(x, "sum", n_axes, axes, keepdims, (int)out);
}

gd_tensor *gd_mean_as(gd_tensor *x, int n_axes, const int64_t *axes, int keepdims, gd_dtype out)
{
    return reduce_build(x, "mean", n_axes, axes, keepdims, (int)out);
}

gd_tensor *gd_max(gd_tensor *x, int n_axes, const int64_t *axes, int keepdims)
{
    return reduce_build(x, "max", n_axes, axes, keepdims, -1);
}

gd_tensor *gd_argmax(gd_tensor *x, int64_t axis, int keepdims)
{
    gd_attr a[2] = {gd_attr_i("axis", axis), gd_attr_i("keepdims", keepdims != 0)};
    return gd_op1(x, "argmax", 2, a);
}

gd_tensor *gd_expand(gd_tensor *x, int ndim, const int64_t *shape)
{
    if (x == NULL) return NULL;
    if (ndim < 0 || ndim > GD_MAX_DIMS || (ndim > 0 && shape == NULL))
        return gd_fail_null(gd_tensor_graph(x), GD_ERR_INVALID, "expand: a target shape of %d dims; 0 to %d expected",
                            ndim, GD_MAX_DIMS);
    gd_attr a = gd_attr_is("shape", ndim, shape);
    return gd_op1(x, "expand", 1, &a);
}

/* The norm of n tensors of one dtype, the result in `out` (< 0: theirs). More than
 * GDP_MAX_INPUTS tensors (every parameter of a model) are taken in groups: the norm of the
 * groups' norms is the norm of everything. */
static gd_tensor *norm_of_group(gd_graph *g, int n, gd_tensor *const *xs, int out)
{
    gd_attr a = gd_attr_i("dtype", out);
    if (n <= GDP_MAX_INPUTS) return gd_op(g, "global_norm", n, xs, out >= 0 ? 1 : 0, &a);
    int n_parts = (n + GDP_MAX_INPUTS - 1) / GDP_MAX_INPUTS;
    gd_tensor **parts = gd_malloc((size_t)n_parts * sizeof *parts);
    if (parts == NULL) return gd_fail_null(g, GD_ERR_NOMEM, "global_norm: no memory for %d groups", n_parts);
    gd_tensor *y = NULL;
    int k;
    for (k = 0; k < n_parts; k++) {
        int m = n - k * GDP_MAX_INPUTS < GDP_MAX_INPUTS ? n - k * GDP_MAX_INPUTS : GDP_MAX_INPUTS;
        parts[k] = norm_of_group(g, m, xs + k * GDP_MAX_INPUTS, out);
        if (parts[k] == NULL) break;
    }
    if (k == n_parts) y = norm_of_group(g, n_parts, parts, -1);
    gd_free(parts);
    return y;
}

static int check_norm_inputs(gd_graph *g, int n, gd_tensor *const *xs)
{
    if (n < 1 || xs == NULL) {
        gd_fail(gd_graph_ctx(g), GD_ERR_INVALID, "global_norm: %d tensors; at least 1 expected", n);
        return -1;
    }
    for (int k = 0; k < n; k++)
        if (xs[k] == NULL) return -1;
    return 0;
}

gd_tensor *gd_global_norm(gd_graph *g, int n, gd_tensor *const *xs)
{
    if (g == NULL || check_norm_inputs(g, n, xs) != 0) return NULL;
    return norm_of_group(g, n, xs, -1);
}

/* Tensors of several dtypes: each dtype's norm (in `out`), then the norm of those. With
 * one dtype the nodes are gd_global_norm's, with the result in `out`: bf16 gradients read
 * as they are add the same squares as their f32 copies would, in the order the backend's
 * kernel takes for bf16 (which may move the last bits of the sum). */
gd_tensor *gd_global_norm_as(gd_graph *g, int n, gd_tensor *const *xs, gd_dtype out)
{
    if (g == NULL || check_norm_inputs(g, n, xs) != 0) return NULL;
    if (!gdp_is_float((int32_t)out))
        return gd_fail_null(g, GD_ERR_INVALID, "global_norm: result dtype %s is not a float dtype", gd_dtype_name(out));
    gd_tensor **same = gd_malloc((size_t)n * sizeof *same), *norms[GDP_DTYPE_COUNT];
    if (same == NULL) return gd_fail_null(g, GD_ERR_NOMEM, "global_norm: no memory for %d tensors", n);
    int n_norms = 0, ok = 1;
    for (int32_t dt = 0; dt < GDP_DTYPE_COUNT && ok; dt++) {
        int m = 0;
        for (int k = 0; k < n; k++)
            if (gd_tensor_dtype(xs[k]) == (gd_dtype)dt) same[m++] = xs[k];
        if (m == 0) continue;
        norms[n_norms] = norm_of_group(g, m, same, (int)out);
        ok = norms[n_norms++] != NULL;
    }
    gd_free(same);
    if (!ok) return NULL;
    return n_norms == 1 ? norms[0] : norm_of_group(g, n_norms, norms, -1);
}

/* ---- registration ------------------------------------------------------------------------ */

static const char *const reduce_cases[] = {
    "f[3,4]",
    "f[2,3,4] | axes=[1]",
    "f[2,3,4] | axes=[0,2] keepdims=1",
    "f[2,3,4] | axes=[-1]",
    "f[2,3,4] | axes=[2,0]",
    "f[3,4] | keepdims=1",
    "f[1,4,1] | axes=[0,2]",
    "f[2,1,3] | axes=[1] keepdims=1",
    "f[5]",
    "f[]",
    "n[33,65] | axes=[0]",
    "n[33,65] | axes=[1]",
    "n[3,40,37] | axes=[1]",
    /* columns of planes past the short-plane kernel, in slabs of 16-byte groups the last
     * of which is partly used, over chunks of rows */
    "n[2,1100,264] | axes=[1]",
    "n[100,4] | axes=[0]", /* fewer columns than a 16-byte vector of halves holds */
    NULL,
};

/* sum and mean of half-precision x into f32 (attribute dtype), over all, some or no axes */
static const char *const reduce_mixed[] = {"bf16->f32", "f16->f32", NULL};
static const char *const reduce_mixed_cases[] = {
    "bf16[3,4] | dtype=f32",
    "bf16[2,3,4] | axes=[1] dtype=f32",
    "bf16[33,65] | axes=[0] keepdims=1 dtype=f32",
    "f16[3,4] | dtype=f32",
    "f16[2,3,4] | axes=[0,2] dtype=f32",
    "f16[33,65] | axes=[1] dtype=f32",
    "bf16[2000,64] | axes=[0] dtype=f32", /* a bias gradient's column sums, past short planes */
    "bf16[1500,40] | axes=[0] dtype=f32",
    NULL,
};

static const char *const max_grad_cases[] = {
    "f[3] f[3,4] | axes=[1]",
    "f[2,1,4] f[2,3,4] | axes=[1] keepdims=1",
    "f[3] f[2,3,4] | axes=[0,-1]",
    "f[] f[2,3]",
    "f[1,1] f[2,3] | keepdims=1",
    NULL,
};

static const char *const argmax_cases[] = {
    "f[3,5] | axis=1",
    "f[4,3] | axis=0 keepdims=1",
    "f[2,3,4] | axis=-2",
    "f[7] | axis=0",
    "f[4,1] | axis=1",
    "n[16,100] | axis=-1",
    NULL,
};

static const char *const expand_cases[] = {
    "f[3,1] | shape=[2,3,4]",
    "f[4] | shape=[3,4]",
    "f[] | shape=[2,2]",
    "f[2,3] | shape=[2,3]",
    "f[1,3,1] | shape=[2,3,5]",
    NULL,
};

static const char *const global_norm_cases[] = {
    "f[3,4] f[5]",
    "f[7]",
    "f[2,2] f[] f[3,1,2]",
    "n[40,30] n[30] n[30,10] n[10]",
    /* tensors of several chunks of a backend's multi-tensor kernel, one not a whole vector */
    "n[300,250] n[70001] n[16] n[3] n[5,7]",
    /* the result in f32 (bf16 or f16 gradients read as they are); "!": it rounds, so the
     * gradient check in float64 leaves them out */
    "!f[3,4] f[5] | dtype=f32",
    "!n[300,250] n[70001] n[3] | dtype=f32",
    NULL,
};


GD_FAMILY(reduce)
{
    gd_register_op(r, &(gd_op_def){
        .name = "sum", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "axes:ints keepdims:int dtype:int",
        .dtypes = GD_FLOATS, .infer = infer_reduce, .grad = grad_sum, .ref = ref_sum, .cases = reduce_cases,
        .mixed = reduce_mixed, .mixed_cases = reduce_mixed_cases, .ref_workspace = ws_sum, .ref_strided = 1,
        .tol = 1e-8, .doc = "sum over axes (all when none given), accumulated in double; dtype: the output's "
                            "(default x's; bf16/f16 -> f32 are the mixed forms)"});
    gd_register_op(r, &(gd_op_def){
        .name = "mean", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "axes:ints keepdims:int dtype:int",
        .dtypes = GD_FLOATS, .infer = infer_mean, .grad = grad_mean, .ref = ref_mean, .cases = reduce_cases,
        .mixed = reduce_mixed, .mixed_cases = reduce_mixed_cases, .ref_workspace = ws_sum, .ref_strided = 1,
        .tol = 1e-8, .doc = "mean over axes (all when none given), accumulated in double; dtype: the output's "
                            "(default x's; bf16/f16 -> f32 are the mixed forms)"});
    gd_register_op(r, &(gd_op_def){
        .name = "max", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "axes:ints keepdims:int",
        .dtypes = GD_FLOATS, .infer = infer_max, .grad = grad_max, .ref = ref_max, .cases = reduce_cases,
        .ref_workspace = ws_max, .ref_strided = 1, .tol = 0,
        .doc = "maximum over axes; the gradient goes to the first maximal element"});
    gd_register_op(r, &(gd_op_def){
        .name = "max_grad", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "axes:ints keepdims:int",
        .dtypes = GD_FLOATS, .infer = infer_max_grad, .ref = ref_max_grad, .cases = max_grad_cases,
        .ref_workspace = ws_max, .ref_strided = 1, .tol = 0,
        .doc = "max_grad(dy, x): dy placed at the first maximal element of each slice of x, 0 elsewhere"});
    gd_register_op(r, &(gd_op_def){
        .name = "argmax", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "axis:int keepdims:int",
        .dtypes = GD_FLOATS, .infer = infer_argmax, .ref = ref_argmax, .cases = argmax_cases,
        .ref_strided = 1, .tol = 0, .doc = "index (i64) of the first maximum along axis (default -1)"});
    gd_register_op(r, &(gd_op_def){
        .name = "expand", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "shape:ints",
        .dtypes = GD_FLOATS, .infer = infer_expand, .grad = grad_expand, .ref = ref_expand,
        .cases = expand_cases, .tol = 0, .view = view_expand, .ref_strided = 1,
        .doc = "NumPy broadcast of x to shape; a view (stride 0 along broadcast dims)"});
    gd_register_op(r, &(gd_op_def){
        .name = "global_norm", .min_in = 1, .max_in = GDP_MAX_INPUTS, .n_out = 1, .attrs = "dtype:int",
        .dtypes = GD_FLOATS, .any_out_dtype = 1, .infer = infer_global_norm, .grad = grad_global_norm,
        .ref = ref_global_norm, .cases = global_norm_cases, .ref_strided = 1, .tol = 1e-8,
        .doc = "sqrt of the sum of squares of every element of every input (one dtype), a scalar; dtype: the "
               "result's (default the inputs')"});
}
