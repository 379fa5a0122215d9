/* shape.c — Cast, Transpose, ConcatV2 and GatherV2 on the GRADUS device. A transpose is a
 * copy from a permuted view; a gather of any index shape is gradus's index_select of the
 * indices flattened, whose output has the same bytes as TensorFlow's. */
#define GTF_UNIT gtf_shape_input_range_size
#include "kern.h"

#include <stdio.h>
#include <string.h>

int kt_gd_dtype(TF_DataType t);

void kt_cast(const kstate *k, TF_OpKernelContext *ctx)
{
    TF_Tensor *x = kt_input(ctx, 0);
    if (x == NULL) return;
    gdp_tensor xv = kt_view(x);
    TF_DataType to = TF_ExpectedOutputDataType(ctx, 0);
    TF_Tensor *y = kt_alloc(ctx, 0, to, xv.ndim, xv.shape);
    if (y != NULL) {
        if (gdp_numel(&xv) > 0) {
            gdp_tensor yv = kt_view(y);
            const gdp_tensor *in[1] = {&xv}, *out[1] = {&yv};
            gd_attr a = gd_attr_i("dtype", kt_gd_dtype(to));
            kt_run(ctx, k, "cast", 1, in, 1, out, 1, &a);
        }
        TF_DeleteTensor(y);
    }
    TF_DeleteTensor(x);
}

/* AddN: N - 1 adds, alternating between the output and one temporary so that the last
 * lands in the output and no add reads the buffer it writes. (TensorFlow's own graph
 * passes make AddN of chains of adds, and of gradients that meet.) */
void kt_add_n(const kstate *k, TF_OpKernelContext *ctx)
{
    int n = TF_NumInputs(ctx);
    TF_Tensor *xs[GDP_MAX_INPUTS] = {0}, *y = NULL, *tmp = NULL;
    if (n < 1 || n > GDP_MAX_INPUTS) {
        kt_fail(ctx, TF_UNIMPLEMENTED, "%s on GRADUS: %s", k->def->tf_op, "1 to 16 inputs");
        return;
    }
    for (int i = 0; i < n; i++)
        if ((xs[i] = kt_input(ctx, i)) == NULL) goto done;
    gdp_tensor v0 = kt_view(xs[0]);
    for (int i = 1; i < n; i++) {
        gdp_tensor v = kt_view(xs[i]);
        int same = v.ndim == v0.ndim;
        for (int d = 0; same && d < v.ndim; d++) same = v.shape[d] == v0.shape[d];
        if (!same) {
            kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: %s", k->def->tf_op, "inputs of different shapes");
            goto done;
        }
    }
    y = kt_alloc(ctx, 0, TF_TensorType(xs[0]), v0.ndim, v0.shape);
    if (y == NULL || gdp_numel(&v0) == 0) goto done;
    gdp_tensor yv = kt_view(y), tv;
    if (n == 1) {
        kt_copy(ctx, k, &v0, &yv);
        goto done;
    }
    if (n > 2) {
        if ((tmp = kt_alloc(ctx, -1, TF_TensorType(xs[0]), v0.ndim, v0.shape)) == NULL) goto done;
        tv = kt_view(tmp);
    }
    gdp_tensor acc = v0;
    for (int i = 1; i < n; i++) {
        gdp_tensor vi = kt_view(xs[i]);
        gdp_tensor *dst = (n - 1 - i) % 2 == 0 ? &yv : &tv;
        const gdp_tensor *in[2] = {&acc, &vi}, *out[1] = {dst};
        if (kt_run(ctx, k, "add", 2, in, 1, out, 0, NULL) != 0) goto done;
        acc = *dst;
    }
done:
    for (int i = 0; i < n; i++)
        if (xs[i] != NULL) TF_DeleteTensor(xs[i]);
    if (y != NULL) TF_DeleteTensor(y);
    if (tmp != NULL) TF_DeleteTensor(tmp);
}

void kt_transpose(const kstate *k, TF_OpKernelContext *ctx)
{
    TF_Tensor *x = kt_input(ctx, 0), *p = x != NULL ? kt_input(ctx, 1) : NULL;
    if (p == NULL) goto done;
    gdp_tensor xv = kt_view(x);
    int64_t perm[GDP_MAX_DIMS];
    int seen[GDP_MAX_DIMS] = {0};
    if (kt_host_ints(p, perm, GDP_MAX_DIMS) != xv.ndim) {
        kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: %s", k->def->tf_op, "perm must have one entry per dim");
        goto done;
    }
    gdp_tensor src = xv;
    for (int d = 0; d < xv.ndim; d++) {
        if (perm[d] < 0 || perm[d] >= xv.ndim || seen[perm[d]]++) {
            kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: %s", k->def->tf_op, "perm is not a permutation");
            goto done;
        }
        src.shape[d] = xv.shape[perm[d]];
        src.stride[d] = xv.stride[perm[d]];
    }
    TF_Tensor *y = kt_alloc(ctx, 0, TF_TensorType(x), src.ndim, src.shape);
    if (y != NULL) {
        gdp_tensor yv = kt_view(y);
        if (gdp_numel(&yv) > 0) kt_copy(ctx, k, &src, &yv);
        TF_DeleteTensor(y);
    }
done:
    if (x != NULL) TF_DeleteTensor(x);
    if (p != NULL) TF_DeleteTensor(p);
}

void kt_concat(const kstate *k, TF_OpKernelContext *ctx)
{
    int n = TF_NumInputs(ctx) - 1;
    TF_Tensor *xs[GDP_MAX_INPUTS] = {0}, *ax = NULL;
    gdp_tensor v[GDP_MAX_INPUTS];
    const gdp_tensor *in[GDP_MAX_INPUTS];
    if (n < 1 || n > GDP_MAX_INPUTS) {
        kt_fail(ctx, TF_UNIMPLEMENTED, "%s on GRADUS: %s", k->def->tf_op, "1 to 16 values");
        return;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        xs[i] = kt_input(ctx, i);
        if (xs[i] == NULL) goto done;
    }
    ax = kt_input(ctx, n);
    int64_t axis;
    if (ax == NULL) goto done;
    if (kt_host_ints(ax, &axis, 1) != 1) {
        kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: %s", k->def->tf_op, "axis must be a scalar");
        goto done;
    }
    gdp_tensor first = kt_view(xs[0]);
    if (axis < 0) axis += first.ndim;
    if (axis < 0 || axis >= first.ndim) {
        kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: %s", k->def->tf_op, "axis out of range");
        goto done;
    }
    int64_t shape[GDP_MAX_DIMS];
    memcpy(shape, first.shape, sizeof shape);
    shape[axis] = 0;
    for (int i = 0; i < n; i++) {
        gdp_tensor t = kt_view(xs[i]);
        shape[axis] += t.ndim == first.ndim ? t.shape[axis] : 0;
        if (gdp_numel(&t) > 0) v[m] = t, in[m] = &v[m], m++; /* empty values add nothing */
    }
    TF_Tensor *y = kt_alloc(ctx, 0, TF_TensorType(xs[0]), first.ndim, shape);
    if (y != NULL) {
        gdp_tensor yv = kt_view(y);
        const gdp_tensor *out[1] = {&yv};
        gd_attr a = gd_attr_i("axis", axis);
        if (m > 0) kt_run(ctx, k, m > 1 ? "concat" : "copy", m, in, 1, out, m > 1, &a);
        TF_DeleteTensor(y);
    }
done:
    for (int i = 0; i < n; i++)
        if (xs[i] != NULL) TF_DeleteTensor(xs[i]);
    if (ax != NULL) TF_DeleteTensor(ax);
}

void kt_gather(const kstate *k, TF_OpKernelContext *ctx)
{
    TF_Tensor *x = kt_input(ctx, 0), *idx = x != NULL ? kt_input(ctx, 1) : NULL, *ax = idx != NULL ? kt_input(ctx, 2) : NULL;
    if (ax == NULL) goto done;
    if (k->batch_dims != 0) {
        kt_fail(ctx, TF_UNIMPLEMENTED, "%s on GRADUS: %s", k->def->tf_op, "batch_dims other than 0");
        goto done;
    }
    gdp_tensor xv = kt_view(x), iv = kt_view(idx);
    int64_t axis;
    if (kt_host_ints(ax, &axis, 1) != 1) {
        kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: %s", k->def->tf_op, "axis must be a scalar");
        goto done;
    }
    if (axis < 0) axis += xv.ndim;
    if (axis < 0 || axis >= xv.ndim || xv.ndim - 1 + iv.ndim > GDP_MAX_DIMS) {
        kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: %s", k->def->tf_op, "axis out of range");
        goto done;
    }
    int64_t shape[GDP_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < axis; d++) shape[nd++] = xv.shape[d];
    for (int d = 0; d < iv.ndim; d++) shape[nd++] = iv.shape[d];
    for (int d = (int)axis + 1; d < xv.ndim; d++) shape[nd++] = xv.shape[d];
    TF_Tensor *y = kt_alloc(ctx, 0, TF_TensorType(x), nd, shape);
    if (y != NULL) {
        gdp_tensor yv = kt_view(y), flat = iv;
        flat.ndim = 1;
        flat.shape[0] = gdp_numel(&iv);
        gdp_set_contiguous(&flat);
        /* the output as index_select makes it: the indices' dims as one */
        yv.ndim = xv.ndim;
        for (int d = 0; d < xv.ndim; d++) yv.shape[d] = d == axis ? flat.shape[0] : xv.shape[d];
        gdp_set_contiguous(&yv);
        const gdp_tensor *in[2] = {&xv, &flat}, *out[1] = {&yv};
        gd_attr a = gd_attr_i("axis", axis);
        if (gdp_numel(&yv) > 0) kt_run(ctx, k, "index_select", 2, in, 1, out, 1, &a);
        TF_DeleteTensor(y);
    }
done:
    if (x != NULL) TF_DeleteTensor(x);
    if (idx != NULL) TF_DeleteTensor(idx);
    if (ax != NULL) TF_DeleteTensor(ax);
}
