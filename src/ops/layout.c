/* layout.c — ops that move bytes without doing arithmetic: reshape, permute, copy, concat,
 * slice (and its backward, slice_grad). gd_transpose, gd_split, gd_squeeze and
 * gd_unsqueeze are builders over permute, slice and reshape. The autodiff hooks that sum
 * the gradients of several slices of one tensor (as one concat) are here too.
 *
 * reshape, permute and slice are views: the planner aliases their outputs (their view
 * rules below) and runs no kernel; their reference kernels stay as the sweep's oracle of
 * what the view must read. copy is the op the planner inserts to make a strided value
 * contiguous. Every reference kernel here reads inputs of any strides.
 *
 * Every kernel here copies whole elements, so it works for every dtype as it stands
 * (f16/bf16 included, no conversion through f32) and the sweep compares it bit for bit.
 */
#include "core.h" /* the sum of slice gradients looks at the nodes that made them */
#include "refwalk.h"

#include <stdio.h>
#include <string.h>

/* Layout kernels handle every dtype themselves: they only move elements. */
#define ANY_DTYPE ((1u << GDP_DTYPE_COUNT) - 1u)

/* A list of ints (an attribute) as "[a, b, c]" for messages. */
static const char *ints_str(const int64_t *v, int n, char *buf, size_t cap)
{
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, i ? ", %lld" : "%lld", (long long)v[i]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
    return buf;
}

/* gd_axis has already written the message; keep it, but fail through gd_infer_fail so the
 * return value follows that function's convention. */
static int axis_failed(gd_infer *c)
{
    char m[sizeof c->msg];
    memcpy(m, c->msg, sizeof m);
    m[sizeof m - 1] = '\0';
    return gd_infer_fail(c, "%s", m);
}

/* Python slice bounds: negative start/end count from the end, then both clamp to [0, n];
 * an empty range has length 0. */
static void slice_bounds(int64_t n, int64_t start, int64_t end, int64_t *first, int64_t *len)
{
    if (start < 0) start += n;
    if (end < 0) end += n;
    if (start < 0) start = 0;
    if (start > n) start = n;
    if (end < 0) end = 0;
    if (end > n) end = n;
    *first = start;
    *len = end > start ? end - start : 0;
}

/* ---- reshape ------------------------------------------------------------------------ */

static int reshape_infer(gd_infer *c)
{
    const gd_shape *x = &c->in[0];
    const gdp_attr *a = gdp_attr_find(c->attrs, "shape");
    if (a == NULL || a->kind != GDP_ATTR_INTS) return gd_infer_fail(c, "needs the attribute shape (ints)");
    if (a->n > GDP_MAX_DIMS) return gd_infer_fail(c, "shape has %d dims, more than %d", a->n, GDP_MAX_DIMS);

    char xs[200], ws[200];
    gd_shape_str(x, xs, sizeof xs);
    ints_str(a->ints, a->n, ws, sizeof ws);
    gd_shape out = {.dtype = x->dtype, .ndim = a->n};
    int free_dim = -1;
    int64_t known = 1;
    for (int k = 0; k < a->n; k++) {
        int64_t d = a->ints[k];
        if (d == -1) {
            if (free_dim >= 0) return gd_infer_fail(c, "shape %s has more than one -1", ws);
            free_dim = k;
        } else if (d < 0) {
            return gd_infer_fail(c, "shape %s has a negative dim", ws);
        } else {
            known *= d;
        }
        out.dim[k] = d;
    }
    int64_t n = gd_shape_numel(x);
    if (free_dim >= 0) {
        if (known == 0 || n % known != 0)
            return gd_infer_fail(c, "cannot reshape x %s (%lld elements) into %s", xs, (long long)n, ws);
        out.dim[free_dim] = n / known;
    } else if (known != n) {
        return gd_infer_fail(c, "cannot reshape x %s (%lld elements) into %s (%lld elements)", xs,
                             (long long)n, ws, (long long)known);
    }
    c->out[0] = out;
    return 0;
}

/* reshape and copy: the elements in row-major order, whatever the input's strides. */
static gdp_status copy_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *x = node->in[0];
    size_t es = gdp_dtype_size(x->dtype);
    int64_t n = gdp_numel(x);
    if (gdp_is_contiguous(x)) {
        if (n > 0) memcpy(node->out[0]->data, x->data, (size_t)n * es);
        return GDP_OK;
    }
    char *out = node->out[0]->data;
    const char *in = x->data;
    rw_walk w;
    rw_begin(&w, x->ndim, x->shape);
    rw_add(&w, x);
    for (int64_t o = 0; o < n; o++, rw_next(&w)) rw_copy_elem(out + (size_t)o * es, in + (size_t)w.off[0] * es, es);
    return GDP_OK;
}

/* A reshape is a view when every run of input dims that merges into output dims is itself
 * mergeable (each dim's stride is the next one's stride times its size); size-1 dims take
 * any stride. A transposed input, for one, is not: it is copied first. */
static int reshape_view(const gdp_attrs *attrs, const gd_shape *in, const int64_t *in_stride, int64_t in_offset,
                        const gd_shape *out, int64_t *out_stride, int64_t *out_offset)
{
    (void)attrs;
    *out_offset = in_offset;
    int64_t s = 1;
    for (int d = out->ndim - 1; d >= 0; d--) { /* row-major, kept for size-1 dims */
        out_stride[d] = s;
        s *= out->dim[d];
    }
    if (gd_shape_numel(in) == 0) return 0;
    int64_t ish[GDP_MAX_DIMS], ist[GDP_MAX_DIMS];
    int ni = 0;
    for (int d = 0; d < in->ndim; d++)
        if (in->dim[d] != 1) ish[ni] = in->dim[d], ist[ni++] = in_stride[d];
    int i = 0, o = 0;
    while (o < out->ndim) {
        if (out->dim[o] == 1) {
            o++;
            continue;
        }
        if (i >= ni) return -1;
        int i2 = i, o2 = o;
        int64_t pi = ish[i], po = out->dim[o];
        while (pi != po) {
            if (pi < po) {
                if (++i2 >= ni) return -1;
                pi *= ish[i2];
            } else {
                if (++o2 >= out->ndim) return -1;
                po *= out->dim[o2];
            }
        }
        for (int k = i; k < i2; k++)
            if (ist[k] != ist[k + 1] * ish[k + 1]) return -1;
        int64_t st = ist[i2];
        for (int d = o2; d >= o; d--) {
            out_stride[d] = st;
            st *= out->dim[d];
        }
        i = i2 + 1;
        o = o2 + 1;
    }
    return i == ni ? 0 : -1;
}

static gd_status reshape_grad(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_shape s = gd_tensor_shape(c->in[0]);
    c->din[0] = gd_reshape(c->dout[0], s.ndim, s.dim);
    return c->din[0] != NULL ? GD_OK : GD_ERR_INVALID;
}

gd_tensor *gd_reshape(gd_tensor *x, int ndim, const int64_t *shape)
{
    if (x == NULL) return NULL;
    if (ndim < 0 || ndim > GD_MAX_DIMS || (ndim > 0 && shape == NULL))
        return gd_fail_null(gd_tensor_graph(x), GD_ERR_INVALID, "reshape: %d dims (at most %d)", ndim, GD_MAX_DIMS);
    gd_attr a = gd_attr_is("shape", ndim, shape);
    return gd_op1(x, "reshape", 1, &a);
}

static const char *const reshape_cases[] = {
    "f[2,3,4] | shape=[6,4]",
    "f[2,3,4] | shape=[-1,2]",
    "f[24] | shape=[2,-1,3]",
    "f[3,4] | shape=[4,1,3,1]",
    "f[1,1] | shape=[]",
    "f[] | shape=[1,1,1]",
    NULL};

/* ---- permute ------------------------------------------------------------------------ */

/* perm normalized (negative axes count from the end) and checked to be a permutation. */
static int read_perm(gd_infer *c, int ndim, int64_t *perm)
{
    const gdp_attr *a = gdp_attr_find(c->attrs, "perm");
    if (a == NULL || a->kind != GDP_ATTR_INTS) return gd_infer_fail(c, "needs the attribute perm (ints)");
    char ps[200], xs[200];
    ints_str(a->ints, a->n, ps, sizeof ps);
    gd_shape_str(&c->in[0], xs, sizeof xs);
    if (a->n != ndim) return gd_infer_fail(c, "perm %s has %d entries but x %s has %d dims", ps, a->n, xs, ndim);
    int seen[GDP_MAX_DIMS] = {0};
    for (int i = 0; i < ndim; i++) {
        int64_t p = a->ints[i] < 0 ? a->ints[i] + ndim : a->ints[i];
        if (p < 0 || p >= ndim || seen[p])
            return gd_infer_fail(c, "perm %s is not a permutation of the %d dims of x %s", ps, ndim, xs);
        seen[p] = 1;
        perm[i] = p;
    }
    return 0;
}

static int permute_infer(gd_infer *c)
{
    const gd_shape *x = &c->in[0];
    int64_t perm[GDP_MAX_DIMS];
    int rc = read_perm(c, x->ndim, perm);
    if (rc != 0) return rc;
    c->out[0] = (gd_shape){.dtype = x->dtype, .ndim = x->ndim};
    for (int i = 0; i < x->ndim; i++) c->out[0].dim[i] = x->dim[perm[i]];
    return 0;
}

/* Walks the output in row-major order; the input follows along through its own strides
 * taken in the permuted order, like an odometer. */
static gdp_status permute_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *y = node->out[0];
    int nd = x->ndim;
    int64_t perm[GDP_MAX_DIMS], pst[GDP_MAX_DIMS];
    gdp_attr_ints(&node->attrs, "perm", perm, GDP_MAX_DIMS);
    for (int i = 0; i < nd; i++) pst[i] = x->stride[perm[i] < 0 ? perm[i] + nd : perm[i]];
    size_t es = gdp_dtype_size(x->dtype);
    const char *in = x->data;
    char *out = y->data;
    rw_walk w;
    rw_begin(&w, nd, y->shape);
    rw_add_strides(&w, pst);
    int64_t n = gdp_numel(y);
    for (int64_t o = 0; o < n; o++, rw_next(&w)) rw_copy_elem(out + o * es, in + w.off[0] * es, es);
    return GDP_OK;
}

static int permute_view(const gdp_attrs *attrs, const gd_shape *in, const int64_t *in_stride, int64_t in_offset,
                        const gd_shape *out, int64_t *out_stride, int64_t *out_offset)
{
    int64_t perm[GDP_MAX_DIMS];
    gdp_attr_ints(attrs, "perm", perm, GDP_MAX_DIMS);
    for (int i = 0; i < out->ndim; i++) out_stride[i] = in_stride[perm[i] < 0 ? perm[i] + in->ndim : perm[i]];
    *out_offset = in_offset;
    return 0;
}

static gd_status permute_grad(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    int nd = gd_tensor_ndim(c->in[0]);
    int64_t perm[GDP_MAX_DIMS], inv[GDP_MAX_DIMS];
    gdp_attr_ints(c->attrs, "perm", perm, GDP_MAX_DIMS);
    for (int i = 0; i < nd; i++) inv[perm[i] < 0 ? perm[i] + nd : perm[i]] = i;
    c->din[0] = gd_permute(c->dout[0], nd, inv);
    return c->din[0] != NULL ? GD_OK : GD_ERR_INVALID;
}

gd_tensor *gd_permute(gd_tensor *x, int ndim, const int64_t *perm)
{
    if (x == NULL) return NULL;
    if (ndim < 0 || ndim > GD_MAX_DIMS || (ndim > 0 && perm == NULL))
        return gd_fail_null(gd_tensor_graph(x), GD_ERR_INVALID, "permute: %d dims (at most %d)", ndim, GD_MAX_DIMS);
    gd_attr a = gd_attr_is("perm", ndim, perm);
    return gd_op1(x, "permute", 1, &a);
}

gd_tensor *gd_transpose(gd_tensor *x, int64_t dim0, int64_t dim1)
{
    if (x == NULL) return NULL;
    int nd = gd_tensor_ndim(x);
    int64_t a = dim0 < 0 ? dim0 + nd : dim0, b = dim1 < 0 ? dim1 + nd : dim1;
    if (a < 0 || a >= nd || b < 0 || b >= nd) {
        char xs[200];
        return gd_fail_null(gd_tensor_graph(x), GD_ERR_SHAPE, "transpose: dims (%lld, %lld) out of range for x %s",
                            (long long)dim0, (long long)dim1, gd_tensor_describe(x, xs, sizeof xs));
    }
    int64_t perm[GD_MAX_DIMS];
    for (int i = 0; i < nd; i++) perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    return gd_permute(x, nd, perm);
}

static const char *const permute_cases[] = {
    "f[2,3] | perm=[1,0]",
    "f[2,3,4,5] | perm=[0,2,1,3]",
    "f[2,3,4] | perm=[2,0,1]",
    "f[2,3,4] | perm=[0,1,2]",
    "f[3,1,2] | perm=[-1,0,1]",
    "f[2,1,3,2,2] | perm=[4,3,2,1,0]",
    NULL};

/* ---- copy --------------------------------------------------------------------------- */

static int copy_infer(gd_infer *c)
{
    c->out[0] = c->in[0];
    return 0;
}

static gd_status copy_grad(gd_grad_ctx *c)
{
    c->din[0] = c->dout[0];
    return GD_OK;
}

gd_tensor *gd_contiguous(gd_tensor *x) { return gd_op1(x, "copy", 0, NULL); }

/* integer and bool cases too: a strided index or mask is made contiguous by this op */
static const char *const copy_cases[] = {"f[2,3]", "f[]", "f[3,1,4,2]", "!i32[3,4]", "!i64[2,5]", "!bool[3,2]",
                                         "!u8[4,3]", "!i8[5]", "f64[2,3]", NULL};

/* ---- concat ------------------------------------------------------------------------- */

static int concat_infer(gd_infer *c)
{
    const gd_shape *x0 = &c->in[0];
    int axis = gd_axis(c, gdp_attr_int(c->attrs, "axis", 0), x0->ndim, "axis");
    if (axis < 0) return axis_failed(c);
    gd_shape out = *x0;
    char s0[200], sk[200];
    gd_shape_str(x0, s0, sizeof s0);
    for (int k = 1; k < c->n_in; k++) {
        const gd_shape *xk = &c->in[k];
        gd_shape_str(xk, sk, sizeof sk);
        if (xk->dtype != x0->dtype)
            return gd_infer_fail(c, "x%d is %s but x0 is %s", k, gd_dtype_name((gd_dtype)xk->dtype),
                                 gd_dtype_name((gd_dtype)x0->dtype));
        int ok = xk->ndim == x0->ndim;
        for (int i = 0; ok && i < x0->ndim; i++) ok = i == axis || xk->dim[i] == x0->dim[i];
        if (!ok)
            return gd_infer_fail(c, "x%d %s does not fit x0 %s: all dims but axis %d must match", k, sk, s0, axis);
        out.dim[axis] += xk->dim[axis];
    }
    c->out[0] = out;
    return 0;
}

/* Each input's elements to their place in the output: input k's element (..., i, ...)
 * goes to (..., off_k + i, ...) along the axis, walked through the input's own strides. */
static gdp_status concat_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *y = node->out[0];
    int axis = (int)gdp_attr_int(&node->attrs, "axis", 0);
    if (axis < 0) axis += y->ndim;
    size_t es = gdp_dtype_size(y->dtype);
    int64_t ys[GDP_MAX_DIMS], off = 0;
    rw_contig_strides(y->ndim, y->shape, ys);
    for (int k = 0; k < node->n_in; k++) {
        const gdp_tensor *x = node->in[k];
        int64_t n = gdp_numel(x);
        rw_walk w;
        rw_begin(&w, x->ndim, x->shape);
        rw_add(&w, x);
        rw_add_strides(&w, ys);
        char *dst = (char *)y->data + (size_t)(off * ys[axis]) * es;
        for (int64_t i = 0; i < n; i++, rw_next(&w))
            rw_copy_elem(dst + (size_t)w.off[1] * es, (const char *)x->data + (size_t)w.off[0] * es, es);
        off += x->shape[axis];
    }
    return GDP_OK;
}

static gd_status concat_grad(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    int nd = gd_tensor_ndim(c->in[0]);
    int64_t axis = gdp_attr_int(c->attrs, "axis", 0);
    if (axis < 0) axis += nd;
    int64_t off = 0;
    for (int k = 0; k < c->n_in; k++) {
        int64_t len = gd_tensor_dim(c->in[k], (int)axis);
        c->din[k] = gd_slice(c->dout[0], axis, off, off + len);
        if (c->din[k] == NULL) return GD_ERR_INVALID;
        off += len;
    }
    return GD_OK;
}

gd_tensor *gd_concat(gd_graph *g, int n, gd_tensor *const *xs, int64_t axis)
{
    if (g == NULL) return NULL;
    if (n < 1 || n > GDP_MAX_INPUTS || xs == NULL)
        return gd_fail_null(g, GD_ERR_INVALID, "concat: %d inputs (1 to %d)", n, GDP_MAX_INPUTS);
    for (int k = 0; k < n; k++)
        if (xs[k] == NULL) return NULL;
    gd_attr a = gd_attr_i("axis", axis);
    return gd_op(g, "concat", n, xs, 1, &a);
}

static const char *const concat_cases[] = {
    "f[2,3] f[4,3] | axis=0",
    "f[2,3] f[2,1] f[2,2] | axis=1",
    "f[2,3,4] f[2,3,4] | axis=-1",
    "f[2,1,3] f[2,4,3] f[2,2,3] f[2,1,3] | axis=1",
    "f[5] | axis=0",
    "f[3] f[1] | axis=0",
    NULL};

/* ---- slice and slice_grad ----------------------------------------------------------- */

static int slice_infer(gd_infer *c)
{
    const gd_shape *x = &c->in[0];
    int axis = gd_axis(c, gdp_attr_int(c->attrs, "axis", 0), x->ndim, "axis");
    if (axis < 0) return axis_failed(c);
    int64_t first, len;
    slice_bounds(x->dim[axis], gdp_attr_int(c->attrs, "start", 0), gdp_attr_int(c->attrs, "end", INT64_MAX),
                 &first, &len);
    c->out[0] = *x;
    c->out[0].dim[axis] = len;
    return 0;
}

/* Moves elements between a tensor with `n` entries along the axis (big) and one with `len`
 * of them (small), starting at `first`: to_big = 0 gathers (slice; big is the input, of
 * any strides), 1 scatters into big (slice_grad; small is the input, of any strides, and
 * big the zeroed output). Walks small's shape, carrying both tensors' strides. */
static void slice_copy(const gdp_tensor *big, const gdp_tensor *small, int axis, int64_t first, int to_big)
{
    size_t es = gdp_dtype_size(big->dtype);
    int64_t n = gdp_numel(small);
    rw_walk w;
    rw_begin(&w, small->ndim, small->shape);
    rw_add_strides(&w, big->stride);
    rw_add_strides(&w, small->stride);
    char *b = (char *)big->data + (size_t)(first * big->stride[axis]) * es, *s = small->data;
    for (int64_t i = 0; i < n; i++, rw_next(&w)) {
        if (to_big) rw_copy_elem(b + (size_t)w.off[0] * es, s + (size_t)w.off[1] * es, es);
        else rw_copy_elem(s + (size_t)w.off[1] * es, b + (size_t)w.off[0] * es, es);
    }
}

static int slice_view(const gdp_attrs *attrs, const gd_shape *in, const int64_t *in_stride, int64_t in_offset,
                      const gd_shape *out, int64_t *out_stride, int64_t *out_offset)
{
    int axis = (int)gdp_attr_int(attrs, "axis", 0);
    if (axis < 0) axis += in->ndim;
    int64_t first, len;
    slice_bounds(in->dim[axis], gdp_attr_int(attrs, "start", 0), gdp_attr_int(attrs, "end", INT64_MAX), &first, &len);
    for (int d = 0; d < in->ndim; d++) out_stride[d] = in_stride[d];
    *out_offset = in_offset + (len > 0 ? first * in_stride[axis] : 0);
    (void)out;
    return 0;
}

static gdp_status slice_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *x = node->in[0];
    int axis = (int)gdp_attr_int(&node->attrs, "axis", 0);
    if (axis < 0) axis += x->ndim;
    int64_t first, len;
    slice_bounds(x->shape[axis], gdp_attr_int(&node->attrs, "start", 0),
                 gdp_attr_int(&node->attrs, "end", INT64_MAX), &first, &len);
    slice_copy(x, node->out[0], axis, first, 0);
    return GDP_OK;
}

static gd_status slice_grad(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_shape s = gd_tensor_shape(c->in[0]);
    gd_attr a[4] = {
        gd_attr_i("axis", gdp_attr_int(c->attrs, "axis", 0)),
        gd_attr_i("start", gdp_attr_int(c->attrs, "start", 0)),
        gd_attr_i("end", gdp_attr_int(c->attrs, "end", INT64_MAX)),
        gd_attr_is("input_shape", s.ndim, s.dim),
    };
    c->din[0] = gd_op1(c->dout[0], "slice_grad", 4, a);
    return c->din[0] != NULL ? GD_OK : GD_ERR_INVALID;
}

/* dy has the sliced shape; the output has input_shape, zero outside the slice. */
static int slice_grad_infer(gd_infer *c)
{
    const gd_shape *dy = &c->in[0];
    const gdp_attr *a = gdp_attr_find(c->attrs, "input_shape");
    if (a == NULL || a->kind != GDP_ATTR_INTS || a->n > GDP_MAX_DIMS)
        return gd_infer_fail(c, "needs the attribute input_shape (ints, at most %d)", GDP_MAX_DIMS);
    gd_shape x = {.dtype = dy->dtype, .ndim = a->n};
    for (int i = 0; i < a->n; i++) x.dim[i] = a->ints[i];
    int axis = gd_axis(c, gdp_attr_int(c->attrs, "axis", 0), x.ndim, "axis");
    if (axis < 0) return axis_failed(c);
    int64_t first, len;
    slice_bounds(x.dim[axis], gdp_attr_int(c->attrs, "start", 0), gdp_attr_int(c->attrs, "end", INT64_MAX),
                 &first, &len);
    gd_shape want = x;
    want.dim[axis] = len;
    int ok = dy->ndim == want.ndim;
    for (int i = 0; ok && i < want.ndim; i++) ok = dy->dim[i] == want.dim[i];
    if (!ok) {
        char ds[200], ws[200], xs[200];
        return gd_infer_fail(c, "dy %s should be %s, the slice of input_shape %s", gd_shape_str(dy, ds, sizeof ds),
                             gd_shape_str(&want, ws, sizeof ws), gd_shape_str(&x, xs, sizeof xs));
    }
    c->out[0] = x;
    return 0;
}

static gdp_status slice_grad_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *x = node->out[0];
    int axis = (int)gdp_attr_int(&node->attrs, "axis", 0);
    if (axis < 0) axis += x->ndim;
    int64_t first, len;
    slice_bounds(x->shape[axis], gdp_attr_int(&node->attrs, "start", 0),
                 gdp_attr_int(&node->attrs, "end", INT64_MAX), &first, &len);
    // all-zero bytes are 0 in every dtype
    memset(x->data, 0, (size_t)gdp_numel(x) * gdp_dtype_size(x->dtype));
    slice_copy(x, node->in[0], axis, first, 1);
    return GDP_OK;
}

gd_tensor *gd_slice(gd_tensor *x, int64_t axis, int64_t start, int64_t end)
{
    gd_attr a[3] = {gd_attr_i("axis", axis), gd_attr_i("start", start), gd_attr_i("end", end)};
    return gd_op1(x, "slice", 3, a);
}

gd_tensor *gd_squeeze(gd_tensor *x, int64_t axis)
{
    if (x == NULL) return NULL;
    gd_shape s = gd_tensor_shape(x);
    int64_t a = axis < 0 ? axis + s.ndim : axis;
    char xs[200];
    if (a < 0 || a >= s.ndim || s.dim[a] != 1)
        return gd_fail_null(gd_tensor_graph(x), GD_ERR_SHAPE, "squeeze: axis %lld of x %s is not a dim of size 1",
                            (long long)axis, gd_tensor_describe(x, xs, sizeof xs));
    for (int d = (int)a; d + 1 < s.ndim; d++) s.dim[d] = s.dim[d + 1];
    return gd_reshape(x, s.ndim - 1, s.dim);
}

gd_tensor *gd_unsqueeze(gd_tensor *x, int64_t axis)
{
    if (x == NULL) return NULL;
    gd_shape s = gd_tensor_shape(x);
    int64_t a = axis < 0 ? axis + s.ndim + 1 : axis;
    char xs[200];
    if (a < 0 || a > s.ndim || s.ndim >= GDP_MAX_DIMS)
        return gd_fail_null(gd_tensor_graph(x), GD_ERR_SHAPE, "unsqueeze: axis %lld out of range for x %s",
                            (long long)axis, gd_tensor_describe(x, xs, sizeof xs));
    for (int d = s.ndim; d > a; d--) s.dim[d] = s.dim[d - 1];
    s.dim[a] = 1;
    return gd_reshape(x, s.ndim + 1, s.dim);
}

gd_status gd_split(gd_tensor *x, int64_t axis, int n, const int64_t *sizes, gd_tensor **out)
{
    if (out == NULL) return GD_ERR_INVALID;
    for (int k = 0; k < n; k++) out[k] = NULL;
    if (x == NULL) return GD_ERR_INVALID; // an earlier builder failed; its message stays
    gd_ctx *ctx = gd_graph_ctx(gd_tensor_graph(x));
    char xs[200];
    gd_tensor_describe(x, xs, sizeof xs);
    int nd = gd_tensor_ndim(x);
    int64_t ax = axis < 0 ? axis + nd : axis;
    if (ax < 0 || ax >= nd)
        return gd_fail(ctx, GD_ERR_SHAPE, "split: axis %lld out of range for x %s", (long long)axis, xs);
    if (n < 1) return gd_fail(ctx, GD_ERR_INVALID, "split: %d parts", n);
    int64_t dim = gd_tensor_dim(x, (int)ax), total = 0;
    if (sizes == NULL) {
        if (dim % n != 0)
            return gd_fail(ctx, GD_ERR_SHAPE, "split: axis %lld of x %s (%lld) is not divisible into %d equal parts",
                           (long long)axis, xs, (long long)dim, n);
    } else {
        for (int k = 0; k < n; k++) {
            if (sizes[k] < 0)
                return gd_fail(ctx, GD_ERR_INVALID, "split: size %d is negative (%lld)", k, (long long)sizes[k]);
            total += sizes[k];
        }
        if (total != dim)
            return gd_fail(ctx, GD_ERR_SHAPE, "split: sizes add up to %lld but axis %lld of x %s has %lld",
                           (long long)total, (long long)axis, xs, (long long)dim);
    }
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
        int64_t len = sizes != NULL ? sizes[k] : dim / n;
        out[k] = gd_slice(x, ax, off, off + len);
        if (out[k] == NULL) return GD_ERR_INVALID;
        off += len;
    }
    return GD_OK;
}

static const char *const slice_cases[] = {
    "f[5,4] | axis=0 start=1 end=3",
    "f[5,4] | axis=1 start=-3 end=-1",
    "f[5,4] | axis=-1 start=0 end=100",
    "f[2,6,3] | axis=1 start=-100 end=4",
    "f[2,6,3] | axis=1 start=2 end=3",
    "f[2,6,3] | axis=2 start=1 end=3",
    NULL};

static const char *const slice_grad_cases[] = {
    "f[2,4] | axis=0 start=1 end=3 input_shape=[5,4]",
    "f[5,2] | axis=1 start=-3 end=-1 input_shape=[5,4]",
    "f[2,4,3] | axis=1 start=-100 end=4 input_shape=[2,6,3]",
    "f[2,6,2] | axis=-1 start=1 end=3 input_shape=[2,6,3]",
    NULL};

/* ---- sums of slice gradients ---------------------------------------------------------- */

/* A tensor split into parts (gd_split, or slices of it used apart, like the q, k and v of
 * one projection) gets one slice_grad per part: each a zero-filled tensor of the whole
 * shape with the part's gradient scattered in. Autodiff holds these back (the hook
 * `partial`) and hands over each run of them here: where their ranges along one axis are
 * disjoint, one concat of the parts' gradients, in range order and with zeros for any
 * gaps, is their sum, and their slice_grad nodes are left unused (a program compiles only
 * the nodes its targets need). Overlapping ranges, or ranges along different axes, are
 * added as before, one by one in the order they came.
 *
 * With disjoint ranges each element gets one part's value and zeros from the others, so
 * acc + concat is the same sum, element by element, as adding the parts one by one, with
 * one difference: a -0.0 stays -0.0 where adding a +0.0 made it +0.0. The two compare
 * equal; the concat's is the slice's gradient as it was. */

typedef struct part_range {
    gd_tensor *dy;   /* the part's gradient */
    int axis;
    int64_t first, len;
} part_range;

static int slice_grad_range(const gd_tensor *t, part_range *r)
{
    const gd_node *n = t->node;
    if (n == NULL || strcmp(n->op->name, "slice_grad") != 0) return 0;
    gdp_attrs a = gd_node_attrs(n);
    int axis = (int)gdp_attr_int(&a, "axis", 0);
    if (axis < 0) axis += t->ndim;
    r->dy = n->in[0];
    r->axis = axis;
    slice_bounds(t->shape[axis], gdp_attr_int(&a, "start", 0), gdp_attr_int(&a, "end", INT64_MAX), &r->first,
                 &r->len);
    return 1;
}

static int partial_grad(const gd_tensor *t)
{
    part_range r;
    return t != NULL && slice_grad_range(t, &r);
}

/* The parts as concat inputs, gaps as zeros; 0 when they do not fit one concat (or all
 * are empty: nothing to add). */
static int tile(gd_tensor *const *parts, part_range *r, int n, gd_tensor **pieces)
{
    const gd_tensor *x = parts[0];
    for (int k = 0; k < n; k++) {
        if (!slice_grad_range(parts[k], &r[k]) || r[k].axis != r[0].axis || parts[k]->dtype != x->dtype ||
            parts[k]->ndim != x->ndim || memcmp(parts[k]->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) != 0)
            return 0;
        for (int j = k; j > 0 && r[j].first < r[j - 1].first; j--) { // range order
            part_range t = r[j];
            r[j] = r[j - 1];
            r[j - 1] = t;
        }
    }
    int axis = r[0].axis, m = 0, any = 0;
    for (int k = 0; k < n; k++) any |= r[k].len > 0;
    if (!any) return 0;
    int64_t at = 0, dim = x->shape[axis];
    for (int k = 0; k <= n; k++) {
        int64_t first = k < n ? r[k].first : dim;
        if (k < n && r[k].len == 0) continue;
        if (first < at || m + (first > at) + (k < n) > GDP_MAX_INPUTS) return 0; /* a gap, the part */
        if (first > at) {
            int64_t shape[GDP_MAX_DIMS];
            memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
            shape[axis] = first - at;
            if ((pieces[m++] = gd_zeros(x->g, (gd_dtype)x->dtype, x->ndim, shape)) == NULL) return -1;
        }
        if (k < n) {
            pieces[m++] = r[k].dy;
            at = first + r[k].len;
        }
    }
    return m;
}

static gd_tensor *add_slice_grads(gd_tensor *acc, int n, gd_tensor *const *parts)
{
    if (n < 1 || parts == NULL) return NULL;
    part_range *r = gd_calloc((size_t)n, sizeof *r);
    if (r == NULL) return gd_fail_null(parts[0]->g, GD_ERR_NOMEM, "backward: out of memory");
    gd_tensor *pieces[GDP_MAX_INPUTS];
    int m = tile(parts, r, n, pieces), axis = r[0].axis;
    gd_free(r);
    if (m < 0) return NULL;
    gd_tensor *(*add)(gd_tensor *, gd_tensor *) = parts[0]->g->ctx->reg->hooks.accumulate;
    if (m > 0) {
        // m == 1: one part is all of it, the others empty
        gd_tensor *sum = m == 1 ? pieces[0] : gd_concat(parts[0]->g, m, pieces, axis);
        return acc != NULL && sum != NULL ? add(acc, sum) : sum;
    }
    gd_tensor *sum = acc != NULL ? acc : parts[0];
    for (int k = acc != NULL ? 0 : 1; k < n && sum != NULL; k++) sum = add(sum, parts[k]);
    return sum;
}

/* ---- registration ------------------------------------------------------------------- */

GD_FAMILY(layout)
{
    gd_registry_hooks(r)->contiguous_op = "copy";
    gd_registry_hooks(r)->partial = partial_grad;
    gd_registry_hooks(r)->add_partials = add_slice_grads;
    gd_register_op(r, &(gd_op_def){
        .name = "reshape", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "shape:ints",
        .dtypes = GD_FLOATS, .infer = reshape_infer, .grad = reshape_grad, .ref = copy_ref,
        .ref_dtypes = ANY_DTYPE, .cases = reshape_cases, .inplace = {-1, -1, -1, -1}, .tol = 0,
        .view = reshape_view, .ref_strided = 1,
        .doc = "x with a new shape of the same element count (one dim may be -1); a view where the layout allows"});
    gd_register_op(r, &(gd_op_def){
        .name = "permute", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "perm:ints",
        .dtypes = GD_FLOATS, .infer = permute_infer, .grad = permute_grad, .ref = permute_ref,
        .ref_dtypes = ANY_DTYPE, .cases = permute_cases, .inplace = {-1, -1, -1, -1}, .tol = 0,
        .view = permute_view, .ref_strided = 1,
        .doc = "x with its dims reordered: out dim i is x dim perm[i]; a view"});
    gd_register_op(r, &(gd_op_def){
        .name = "copy", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "",
        .dtypes = GD_FLOATS, .infer = copy_infer, .grad = copy_grad, .ref = copy_ref,
        .ref_dtypes = ANY_DTYPE, .cases = copy_cases, .inplace = {-1, -1, -1, -1}, .tol = 0, .ref_strided = 1,
        .doc = "a contiguous copy of x (of any strides)"});
    gd_register_op(r, &(gd_op_def){
        .name = "concat", .min_in = 1, .max_in = GDP_MAX_INPUTS, .n_out = 1, .attrs = "axis:int",
        .dtypes = GD_FLOATS, .infer = concat_infer, .grad = concat_grad, .ref = concat_ref,
        .ref_dtypes = ANY_DTYPE, .cases = concat_cases, .inplace = {-1, -1, -1, -1}, .tol = 0, .ref_strided = 1,
        .doc = "inputs joined along axis; the other dims must match"});
    gd_register_op(r, &(gd_op_def){
        .name = "slice", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "axis:int start:int end:int",
        .dtypes = GD_FLOATS, .infer = slice_infer, .grad = slice_grad, .ref = slice_ref,
        .ref_dtypes = ANY_DTYPE, .cases = slice_cases, .inplace = {-1, -1, -1, -1}, .tol = 0,
        .view = slice_view, .ref_strided = 1,
        .doc = "x[start:end] along axis; negative bounds count from the end, clamped like Python; a view"});
    gd_register_op(r, &(gd_op_def){
        .name = "slice_grad", .min_in = 1, .max_in = 1, .n_out = 1,
        .attrs = "axis:int start:int end:int input_shape:ints",
        .dtypes = GD_FLOATS, .infer = slice_grad_infer, .grad = NULL, .ref = slice_grad_ref,
        .ref_dtypes = ANY_DTYPE, .cases = slice_grad_cases, .inplace = {-1, -1, -1, -1}, .tol = 0, .ref_strided = 1,
        .doc = "backward of slice: dy placed at [start:end] along axis of zeros of input_shape"});
}
