/* index.c — gathering rows by integer ids: embedding (a table lookup) and index_select
 * (along any axis), with their backward ops, which scatter-add the gradient rows back.
 *
 * The forward kernels move whole elements (every dtype, exact). The backward kernels add:
 * they accumulate in double, visiting positions in order, so repeated ids sum the same way
 * every run.
 */
#include "refwalk.h"

#include <string.h>

#define ANY_DTYPE ((1u << GDP_DTYPE_COUNT) - 1u)

static int is_index_dtype(int32_t dt) { return dt == GDP_I32 || dt == GDP_I64; }
static int is_float_dtype(int32_t dt) { return dt == GDP_F32 || dt == GDP_F16 || dt == GDP_BF16 || dt == GDP_F64; }

/* Message for an index outside [0, n): its position in the index tensor, its value, and
 * what it should have been. Negative values are not counted from the end: they are bad
 * data like any other. */
static gdp_status bad_index(gdp_err *err, const char *name, const gdp_tensor *t, int64_t i, int64_t v,
                            const char *range)
{
    char pos[200];
    return gdp_fail(err, GDP_ERR_INVALID, "%s = %lld is out of range for %s%s", rw_position(name, t, i, pos, sizeof pos),
                    (long long)v, range, v < 0 ? " (indices do not count from the end)" : "");
}

static int fail_index_dtype(gd_infer *c, const char *name, const gd_shape *s)
{
    char ss[200];
    gd_shape_str(s, ss, sizeof ss);
    return gd_infer_fail(c, "%s %s must be i32 or i64", name, ss);
}

static int axis_failed(gd_infer *c)
{
    char m[sizeof c->msg];
    memcpy(m, c->msg, sizeof m);
    m[sizeof m - 1] = '\0';
    return gd_infer_fail(c, "%s", m);
}

/* ---- embedding ---------------------------------------------------------------------- */

static int embedding_infer(gd_infer *c)
{
    const gd_shape *table = &c->in[0], *ids = &c->in[1];
    char ts[200], is[200];
    gd_shape_str(table, ts, sizeof ts);
    gd_shape_str(ids, is, sizeof is);
    if (table->ndim != 2) return gd_infer_fail(c, "table %s must be 2-D (num_embeddings, dim)", ts);
    if (!is_index_dtype(ids->dtype)) return fail_index_dtype(c, "ids", ids);
    if (ids->ndim + 1 > GDP_MAX_DIMS)
        return gd_infer_fail(c, "ids %s has %d dims; the output would have more than %d", is, ids->ndim, GDP_MAX_DIMS);
    gd_shape out = {.dtype = table->dtype, .ndim = ids->ndim + 1};
    for (int i = 0; i < ids->ndim; i++) out.dim[i] = ids->dim[i];
    out.dim[ids->ndim] = table->dim[1];
    c->out[0] = out;
    return 0;
}

/* Checks every id of ids (any strides) lies in [0, V). */
static gdp_status check_ids(const gdp_tensor *ids, int64_t V, const char *range, gdp_err *err)
{
    rw_walk w;
    rw_begin(&w, ids->ndim, ids->shape);
    rw_add(&w, ids);
    int64_t n = gdp_numel(ids);
    for (int64_t p = 0; p < n; p++, rw_next(&w)) {
        int64_t id = rw_ld_index(ids, w.off[0]);
        if (id < 0 || id >= V) return bad_index(err, "ids", ids, p, id, range);
    }
    return GDP_OK;
}

static gdp_status embedding_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // table (V, D), ids (...) -> y (..., D): whole elements moved, exact for every dtype
    const gdp_tensor *table = node->in[0], *ids = node->in[1], *y = node->out[0];
    int64_t V = table->shape[0], D = table->shape[1];
    char range[96];
    snprintf(range, sizeof range, "a table of %lld rows", (long long)V);
    gdp_status st = check_ids(ids, V, range, err);
    if (st != GDP_OK) return st;
    size_t es = gdp_dtype_size(table->dtype);
    const int64_t sr = table->stride[0], sc = table->stride[1];
    rw_walk w;
    rw_begin(&w, ids->ndim, ids->shape);
    rw_add(&w, ids);
    int64_t n = gdp_numel(ids);
    for (int64_t p = 0; p < n; p++, rw_next(&w)) {
        const char *src = (const char *)table->data + (size_t)(rw_ld_index(ids, w.off[0]) * sr) * es;
        char *dst = (char *)y->data + (size_t)(p * D) * es;
        if (sc == 1) {
            if (D > 0) memcpy(dst, src, (size_t)D * es);
        } else {
            for (int64_t d = 0; d < D; d++) rw_copy_elem(dst + (size_t)d * es, src + (size_t)(d * sc) * es, es);
        }
    }
    return GDP_OK;
}

static gd_status embedding_grad(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_attr a = gd_attr_i("num_embeddings", gd_tensor_dim(c->in[0], 0));
    c->din[0] = gd_op2(c->dout[0], c->in[1], "embedding_grad", 1, &a);
    return c->din[0] != NULL ? GD_OK : GD_ERR_INVALID;
}

gd_tensor *gd_embedding(gd_tensor *table, gd_tensor *ids) { return gd_op2(table, ids, "embedding", 0, NULL); }

static const char *const embedding_cases[] = {
    "f[10,4] i32[2,3]<10",
    "f[5,3] i64[7]<5",
    "f[3,8] i32[4,2,2]<3",
    "f[6,2] i64[]<6",
    "f[1,5] i64[3]<1",
    NULL};

/* ---- embedding_grad: (dy (ids.shape, D), ids) -> d table (V, D) ----------------------- */

static int embedding_grad_infer(gd_infer *c)
{
    const gd_shape *dy = &c->in[0], *ids = &c->in[1];
    char ds[200], is[200];
    gd_shape_str(dy, ds, sizeof ds);
    gd_shape_str(ids, is, sizeof is);
    if (!is_float_dtype(dy->dtype))
        return gd_infer_fail(c, "dy %s must be a float tensor", ds);
    if (!is_index_dtype(ids->dtype)) return fail_index_dtype(c, "ids", ids);
    int ok = dy->ndim == ids->ndim + 1;
    for (int i = 0; ok && i < ids->ndim; i++) ok = dy->dim[i] == ids->dim[i];
    if (!ok) return gd_infer_fail(c, "dy %s must be ids %s with one more dim (the embedding dim)", ds, is);
    int64_t V = gdp_attr_int(c->attrs, "num_embeddings", -1);
    if (V < 1) return gd_infer_fail(c, "num_embeddings %lld must be at least 1", (long long)V);
    c->out[0] = (gd_shape){.dtype = dy->dtype, .ndim = 2, .dim = {V, dy->dim[dy->ndim - 1]}};
    return 0;
}

/* Scratch of the scatter-adds: the whole gradient as doubles. */
static size_t ws_scatter(const gdp_node *node) { return rw_doubles(gdp_numel(node->out[0])); }

static gdp_status embedding_grad_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // dy (ids.shape, D), ids -> dtable (V, D): rows of dy added at their ids, in order
    const gdp_tensor *dy = node->in[0], *ids = node->in[1], *dt = node->out[0];
    int64_t V = dt->shape[0], D = dt->shape[1], n = gdp_numel(ids);
    char range[96];
    snprintf(range, sizeof range, "a table of %lld rows", (long long)V);
    gdp_status st = check_ids(ids, V, range, err);
    if (st != GDP_OK) return st;
    double *acc = rw_workspace(node, ws_scatter(node), err);
    if (acc == NULL) return GDP_ERR_INVALID;
    for (int64_t i = 0; i < V * D; i++) acc[i] = 0.0;
    const int64_t sd = dy->stride[dy->ndim - 1];
    rw_walk w; // ids (slot 0) and the rows of dy (slot 1, its leading dims)
    rw_begin(&w, ids->ndim, ids->shape);
    rw_add(&w, ids);
    rw_add_strides(&w, dy->stride);
    for (int64_t p = 0; p < n; p++, rw_next(&w)) {
        double *dst = acc + rw_ld_index(ids, w.off[0]) * D;
        for (int64_t d = 0; d < D; d++) dst[d] += rw_ld(dy, w.off[1] + d * sd);
    }
    for (int64_t i = 0; i < V * D; i++) rw_st(dt, i, acc[i]);
    return GDP_OK;
}

static const char *const embedding_grad_cases[] = {
    "f[2,3,4] i32[2,3]<10 | num_embeddings=10",
    "f[7,3] i64[7]<5 | num_embeddings=5",
    "f[4,2,2,8] i32[4,2,2]<3 | num_embeddings=3",
    "f[2] i64[]<6 | num_embeddings=6",
    NULL};

/* ---- index_select ------------------------------------------------------------------- */

/* Shape shared by index_select's output and index_select_grad's dy: x with the axis dim
 * replaced by the number of indices. */
static int selected_shape(gd_infer *c, const gd_shape *x, const gd_shape *idx, int *axis, gd_shape *out)
{
    char xs[200], is[200];
    gd_shape_str(x, xs, sizeof xs);
    gd_shape_str(idx, is, sizeof is);
    if (!is_index_dtype(idx->dtype)) return fail_index_dtype(c, "idx", idx);
    if (idx->ndim != 1) return gd_infer_fail(c, "idx %s must be 1-D", is);
    if (x->ndim < 1) return gd_infer_fail(c, "x %s must have at least one dim", xs);
    *axis = gd_axis(c, gdp_attr_int(c->attrs, "axis", 0), x->ndim, "axis");
    if (*axis < 0) return axis_failed(c);
    *out = *x;
    out->dim[*axis] = idx->dim[0];
    return 0;
}

static int index_select_infer(gd_infer *c)
{
    int axis;
    return selected_shape(c, &c->in[0], &c->in[1], &axis, &c->out[0]);
}

/* Checks every entry of the 1-D idx lies in [0, n) (axis `axis` of size n). */
static gdp_status check_idx(const gdp_tensor *idx, int axis, int64_t n, gdp_err *err)
{
    char range[96];
    snprintf(range, sizeof range, "axis %d of size %lld", axis, (long long)n);
    for (int64_t j = 0; j < idx->shape[0]; j++) {
        int64_t id = rw_ld_index(idx, j * idx->stride[0]);
        if (id < 0 || id >= n) return bad_index(err, "idx", idx, j, id, range);
    }
    return GDP_OK;
}

/* y[..., j, ...] = x[..., idx[j], ...] along the axis: for every index of the other dims
 * (a walk over y's shape with the axis as 1, carrying x and y), the m picked elements. */
static gdp_status index_select_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *idx = node->in[1], *y = node->out[0];
    int axis = (int)gdp_attr_int(&node->attrs, "axis", 0);
    if (axis < 0) axis += x->ndim;
    int64_t m = idx->shape[0];
    gdp_status st = check_idx(idx, axis, x->shape[axis], err);
    if (st != GDP_OK) return st;
    size_t es = gdp_dtype_size(x->dtype);
    const gdp_tensor *t[2] = {x, y};
    rw_walk w;
    int64_t rows = rw_rows(&w, y, axis, 2, t);
    const int64_t sx = x->stride[axis], sy = y->stride[axis], si = idx->stride[0];
    for (int64_t r = 0; r < rows; r++, rw_next(&w))
        for (int64_t j = 0; j < m; j++)
            rw_copy_elem((char *)y->data + (size_t)(w.off[1] + j * sy) * es,
                      (const char *)x->data + (size_t)(w.off[0] + rw_ld_index(idx, j * si) * sx) * es, es);
    return GDP_OK;
}

static gd_status index_select_grad(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_shape s = gd_tensor_shape(c->in[0]);
    gd_attr a[2] = {gd_attr_i("axis", gdp_attr_int(c->attrs, "axis", 0)), gd_attr_is("input_shape", s.ndim, s.dim)};
    c->din[0] = gd_op2(c->dout[0], c->in[1], "index_select_grad", 2, a);
    return c->din[0] != NULL ? GD_OK : GD_ERR_INVALID;
}

gd_tensor *gd_index_select(gd_tensor *x, int64_t axis, gd_tensor *idx)
{
    gd_attr a = gd_attr_i("axis", axis);
    return gd_op2(x, idx, "index_select", 1, &a);
}

static const char *const index_select_cases[] = {
    "f[5,3] i64[4]<5 | axis=0",
    "f[2,5,3] i32[6]<5 | axis=1",
    "f[2,3,4] i64[2]<4 | axis=-1",
    "f[4] i32[1]<4 | axis=0",
    "f[3,2] i64[7]<3 | axis=0",
    NULL};

/* ---- index_select_grad: (dy, idx) -> dx of input_shape -------------------------------- */

static int index_select_grad_infer(gd_infer *c)
{
    const gd_shape *dy = &c->in[0], *idx = &c->in[1];
    const gdp_attr *a = gdp_attr_find(c->attrs, "input_shape");
    if (a == NULL || a->kind != GDP_ATTR_INTS || a->n > GDP_MAX_DIMS)
        return gd_infer_fail(c, "needs the attribute input_shape (ints, at most %d)", GDP_MAX_DIMS);
    char ds[200], ws[200], xs[200];
    gd_shape_str(dy, ds, sizeof ds);
    if (!is_float_dtype(dy->dtype))
        return gd_infer_fail(c, "dy %s must be a float tensor", ds);
    gd_shape x = {.dtype = dy->dtype, .ndim = a->n}, want;
    for (int i = 0; i < a->n; i++) x.dim[i] = a->ints[i];
    int axis, rc = selected_shape(c, &x, idx, &axis, &want);
    if (rc != 0) return rc;
    int ok = dy->ndim == want.ndim;
    for (int i = 0; ok && i < want.ndim; i++) ok = dy->dim[i] == want.dim[i];
    if (!ok)
        return gd_infer_fail(c, "dy %s should be %s, input_shape %s with axis %d of the length of idx", ds,
                             gd_shape_str(&want, ws, sizeof ws), gd_shape_str(&x, xs, sizeof xs), axis);
    c->out[0] = x;
    return 0;
}

/* dx = zeros of input_shape with dy[..., j, ...] added at [..., idx[j], ...]; for a fixed
 * element of dx, the additions come in order of j, every run. */
static gdp_status index_select_grad_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *dy = node->in[0], *idx = node->in[1], *dx = node->out[0];
    int axis = (int)gdp_attr_int(&node->attrs, "axis", 0);
    if (axis < 0) axis += dx->ndim;
    int64_t m = idx->shape[0], total = gdp_numel(dx);
    gdp_status st = check_idx(idx, axis, dx->shape[axis], err);
    if (st != GDP_OK) return st;
    double *acc = rw_workspace(node, ws_scatter(node), err);
    if (acc == NULL) return GDP_ERR_INVALID;
    for (int64_t i = 0; i < total; i++) acc[i] = 0.0;
    const gdp_tensor *t[2] = {dy, dx}; // dx's strides are row-major: offsets into acc
    rw_walk w;
    int64_t rows = rw_rows(&w, dy, axis, 2, t);
    const int64_t sdy = dy->stride[axis], sdx = dx->stride[axis], si = idx->stride[0];
    for (int64_t r = 0; r < rows; r++, rw_next(&w))
        for (int64_t j = 0; j < m; j++) acc[w.off[1] + rw_ld_index(idx, j * si) * sdx] += rw_ld(dy, w.off[0] + j * sdy);
    for (int64_t i = 0; i < total; i++) rw_st(dx, i, acc[i]);
    return GDP_OK;
}

static const char *const index_select_grad_cases[] = {
    "f[4,3] i64[4]<5 | axis=0 input_shape=[5,3]",
    "f[2,6,3] i32[6]<5 | axis=1 input_shape=[2,5,3]",
    "f[2,3,2] i64[2]<4 | axis=-1 input_shape=[2,3,4]",
    "f[7,2] i64[7]<3 | axis=0 input_shape=[3,2]",
    NULL};

/* ---- registration ------------------------------------------------------------------- */

GD_FAMILY(index)
{
    gd_register_op(r, &(gd_op_def){
        .name = "embedding", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "",
        .dtypes = GD_FLOATS, .infer = embedding_infer, .grad = embedding_grad, .ref = embedding_ref,
        .ref_dtypes = ANY_DTYPE, .cases = embedding_cases, .inplace = {-1, -1, -1, -1}, .tol = 0, .ref_strided = 1,
        .doc = "rows of table (V, D) picked by integer ids (any shape): ids.shape + (D); an id outside [0, V), "
               "negative ones included, is bad data (GD_ERR_INVALID)"});
    gd_register_op(r, &(gd_op_def){
        .name = "embedding_grad", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "num_embeddings:int",
        .dtypes = GD_FLOATS, .infer = embedding_grad_infer, .grad = NULL, .ref = embedding_grad_ref,
        .cases = embedding_grad_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-10,
        .ref_workspace = ws_scatter, .ref_strided = 1,
        .doc = "backward of embedding: rows of dy added into a (num_embeddings, D) table at ids; bad ids as "
               "embedding"});
    gd_register_op(r, &(gd_op_def){
        .name = "index_select", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "axis:int",
        .dtypes = GD_FLOATS, .infer = index_select_infer, .grad = index_select_grad, .ref = index_select_ref,
        .ref_dtypes = ANY_DTYPE, .cases = index_select_cases, .inplace = {-1, -1, -1, -1}, .tol = 0,
        .ref_strided = 1,
        .doc = "entries of x along axis picked by a 1-D i32/i64 idx; an index outside [0, size of the axis), "
               "negative ones included, is bad data (GD_ERR_INVALID)"});
    gd_register_op(r, &(gd_op_def){
        .name = "index_select_grad", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "axis:int input_shape:ints",
        .dtypes = GD_FLOATS, .infer = index_select_grad_infer, .grad = NULL, .ref = index_select_grad_ref,
        .cases = index_select_grad_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-10,
        .ref_workspace = ws_scatter, .ref_strided = 1,
        .doc = "backward of index_select: dy added into zeros of input_shape at idx along axis; bad indices as "
               "index_select"});
}
