/* index.c — gathering rows by integer ids: embedding (a table lookup) and index_select
 * (along any axis), with their backward ops, which scatter-add the gradient rows back.
 *
 * The forward kernels move whole elements (every dtype, exact). The backward kernels add:
 * they accumulate in double, visiting positions in order, so repeated ids sum the same way
 * every run.
 */
#include "opdef.h"

#include <stdlib.h>
#include <string.h>

#define ANY_DTYPE ((1u << GDP_DTYPE_COUNT) - 1u)

static int64_t prod(const int64_t *d, int from, int to)
{
    int64_t n = 1;
    for (int i = from; i < to; i++) n *= d[i];
    return n;
}

static int is_index_dtype(int32_t dt) { return dt == GDP_I32 || dt == GDP_I64; }
static int is_float_dtype(int32_t dt) { return dt == GDP_F32 || dt == GDP_F16 || dt == GDP_BF16 || dt == GDP_F64; }

static int64_t load_index(const gdp_tensor *t, int64_t i)
{
    return t->dtype == GDP_I32 ? (int64_t)((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

/* Reference kernels see f32 and f64 (the core converts f16/bf16); those two are inlined
 * because embeddings sit on the training path of models run through the reference. */
static inline double load(const gdp_tensor *t, int64_t i)
{
    if (t->dtype == GDP_F32) return ((const float *)t->data)[i];
    if (t->dtype == GDP_F64) return ((const double *)t->data)[i];
    return gd_ref_load(t, i);
}

static inline void store(const gdp_tensor *t, int64_t i, double v)
{
    if (t->dtype == GDP_F32) ((float *)t->data)[i] = (float)v;
    else if (t->dtype == GDP_F64) ((double *)t->data)[i] = v;
    else gd_ref_store(t, i, v);
}

/* "ids[1, 2]" for the element at flat position i, for messages. */
static const char *position_str(const char *name, const gdp_tensor *t, int64_t i, char *buf, size_t cap)
{
    int64_t idx[GDP_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = t->shape[d] > 0 ? i % t->shape[d] : 0;
        i = t->shape[d] > 0 ? i / t->shape[d] : 0;
    }
    size_t n = (size_t)snprintf(buf, cap, "%s[", name);
    for (int d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)idx[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
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

static gdp_status embedding_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *table = node->in[0], *ids = node->in[1], *y = node->out[0];
    int64_t V = table->shape[0];
    size_t row = (size_t)table->shape[1] * gdp_dtype_size(table->dtype);
    int64_t n = gdp_numel(ids);
    for (int64_t p = 0; p < n; p++) {
        int64_t id = load_index(ids, p);
        if (id < 0 || id >= V) {
            char pos[200];
            return gdp_fail(err, GDP_ERR_INVALID, "%s = %lld is out of range for a table of %lld rows",
                            position_str("ids", ids, p, pos, sizeof pos), (long long)id, (long long)V);
        }
        if (row > 0) memcpy((char *)y->data + (size_t)p * row, (const char *)table->data + (size_t)id * row, row);
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

static gdp_status embedding_grad_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *dy = node->in[0], *ids = node->in[1], *dt = node->out[0];
    int64_t V = dt->shape[0], D = dt->shape[1], n = gdp_numel(ids);
    double *acc = calloc((size_t)(V * D > 0 ? V * D : 1), sizeof *acc);
    if (acc == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "no memory for a (%lld, %lld) accumulator",
                                     (long long)V, (long long)D);
    for (int64_t p = 0; p < n; p++) {
        int64_t id = load_index(ids, p);
        if (id < 0 || id >= V) {
            char pos[200];
            free(acc);
            return gdp_fail(err, GDP_ERR_INVALID, "%s = %lld is out of range for a table of %lld rows",
                            position_str("ids", ids, p, pos, sizeof pos), (long long)id, (long long)V);
        }
        for (int64_t d = 0; d < D; d++) acc[id * D + d] += load(dy, p * D + d);
    }
    for (int64_t i = 0; i < V * D; i++) store(dt, i, acc[i]);
    free(acc);
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

/* Copies or adds the block after the axis for each (outer, j): x[o, idx[j], :] <-> y[o, j, :]. */
static gdp_status index_select_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *idx = node->in[1], *y = node->out[0];
    int axis = (int)gdp_attr_int(&node->attrs, "axis", 0);
    if (axis < 0) axis += x->ndim;
    int64_t outer = prod(x->shape, 0, axis), n = x->shape[axis], m = idx->shape[0];
    size_t block = (size_t)prod(x->shape, axis + 1, x->ndim) * gdp_dtype_size(x->dtype);
    for (int64_t j = 0; j < m; j++) {
        int64_t id = load_index(idx, j);
        if (id < 0 || id >= n)
            return gdp_fail(err, GDP_ERR_INVALID, "idx[%lld] = %lld is out of range for axis %d of size %lld",
                            (long long)j, (long long)id, axis, (long long)n);
    }
    if (block == 0) return GDP_OK;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < m; j++)
            memcpy((char *)y->data + (size_t)(o * m + j) * block,
                   (const char *)x->data + (size_t)(o * n + load_index(idx, j)) * block, block);
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

static gdp_status index_select_grad_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *dy = node->in[0], *idx = node->in[1], *dx = node->out[0];
    int axis = (int)gdp_attr_int(&node->attrs, "axis", 0);
    if (axis < 0) axis += dx->ndim;
    int64_t outer = prod(dx->shape, 0, axis), n = dx->shape[axis], m = idx->shape[0];
    int64_t inner = prod(dx->shape, axis + 1, dx->ndim), total = gdp_numel(dx);
    for (int64_t j = 0; j < m; j++) {
        int64_t id = load_index(idx, j);
        if (id < 0 || id >= n)
            return gdp_fail(err, GDP_ERR_INVALID,
                            "idx[%lld] = %lld is out of range for axis %d of size %lld",
                            (long long)j, (long long)id, axis, (long long)n);
    }
    double *acc = calloc((size_t)(total > 0 ? total : 1), sizeof *acc);
    if (acc == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "no memory for %lld elements", (long long)total);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < m; j++) {
            double *dst = acc + (o * n + load_index(idx, j)) * inner;
            int64_t src = (o * m + j) * inner;
            for (int64_t i = 0; i < inner; i++) dst[i] += load(dy, src + i);
        }
    for (int64_t i = 0; i < total; i++) store(dx, i, acc[i]);
    free(acc);
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
        .ref_dtypes = ANY_DTYPE, .cases = embedding_cases, .inplace = {-1, -1, -1, -1}, .tol = 0,
        .doc = "rows of table (V, D) picked by integer ids (any shape): ids.shape + (D)"});
    gd_register_op(r, &(gd_op_def){
        .name = "embedding_grad", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "num_embeddings:int",
        .dtypes = GD_FLOATS, .infer = embedding_grad_infer, .grad = NULL, .ref = embedding_grad_ref,
        .cases = embedding_grad_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-10,
        .doc = "backward of embedding: rows of dy added into a (num_embeddings, D) table at ids"});
    gd_register_op(r, &(gd_op_def){
        .name = "index_select", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "axis:int",
        .dtypes = GD_FLOATS, .infer = index_select_infer, .grad = index_select_grad, .ref = index_select_ref,
        .ref_dtypes = ANY_DTYPE, .cases = index_select_cases, .inplace = {-1, -1, -1, -1}, .tol = 0,
        .doc = "entries of x along axis picked by a 1-D i32/i64 idx"});
    gd_register_op(r, &(gd_op_def){
        .name = "index_select_grad", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "axis:int input_shape:ints",
        .dtypes = GD_FLOATS, .infer = index_select_grad_infer, .grad = NULL, .ref = index_select_grad_ref,
        .cases = index_select_grad_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-10,
        .doc = "backward of index_select: dy added into zeros of input_shape at idx along axis"});
}
