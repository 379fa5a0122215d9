/* kernels.c — TensorFlow kernels of the GRADUS device, through the kernel C API. Each one
 * forwards to a gradus op (gd_backend_run_op) on the tensors TensorFlow allocated on the
 * device: the backend's kernel when it has one, the reference across copies otherwise.
 *
 * The table below is the list of what the bridge registers; `gradus_tf_kernels` hands it
 * to the sweep (bridges/tensorflow/sweep.py), so that the sweep tests exactly this. */
#define GTF_UNIT gtf_kernels_input_range_size
#include "kern.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind {
    K_UNARY,     /* y = op(x), same shape */
    K_GRAD_YD,   /* TF (y, dy) -> gradus op(dy, y) */
    K_GRAD_DX,   /* TF (dy, x) -> gradus op(dy, x) */
    K_BINARY,    /* NumPy broadcasting */
    K_BIAS_ADD,  /* x (..., C) + b (C), NHWC */
    K_BIAS_GRAD, /* sum over every axis but the last, NHWC */
    K_MATMUL,    /* MatMul: transpose_a, transpose_b */
    K_BATCH_MATMUL, /* BatchMatMulV2/V3: adj_x, adj_y, batch dims broadcast */
    K_SOFTMAX,   /* along the last axis */
    K_REDUCE,    /* Sum, Mean, Max over host-memory axes, keep_dims */
    K_SQUARE,    /* pow 2 */
};

static const kdef defs[] = {
    {"Relu", "relu", K_UNARY, NULL, NULL, NULL, 0},
    {"Sigmoid", "sigmoid", K_UNARY, NULL, NULL, NULL, 0},
    {"Tanh", "tanh", K_UNARY, NULL, NULL, NULL, 0},
    {"Exp", "exp", K_UNARY, NULL, NULL, NULL, 0},
    {"Log", "log", K_UNARY, NULL, NULL, NULL, 0},
    {"Neg", "neg", K_UNARY, NULL, NULL, NULL, 0},
    {"Abs", "abs", K_UNARY, NULL, NULL, NULL, 0},
    {"Sqrt", "sqrt", K_UNARY, NULL, NULL, NULL, 0},
    {"Rsqrt", "rsqrt", K_UNARY, NULL, NULL, NULL, 0},
    {"Square", "pow", K_SQUARE, NULL, NULL, NULL, 0},
    {"ReluGrad", "relu_grad", K_GRAD_DX, NULL, NULL, NULL, 0},
    {"SigmoidGrad", "sigmoid_grad", K_GRAD_YD, NULL, NULL, NULL, 0},
    {"TanhGrad", "tanh_grad", K_GRAD_YD, NULL, NULL, NULL, 0},
    {"AddV2", "add", K_BINARY, NULL, NULL, NULL, 0},
    {"Sub", "sub", K_BINARY, NULL, NULL, NULL, 0},
    {"Mul", "mul", K_BINARY, NULL, NULL, NULL, 0},
    {"RealDiv", "div", K_BINARY, NULL, NULL, NULL, 0},
    {"Maximum", "maximum", K_BINARY, NULL, NULL, NULL, 0},
    {"Minimum", "minimum", K_BINARY, NULL, NULL, NULL, 0},
    {"BiasAdd", "add", K_BIAS_ADD, NULL, NULL, NULL, 0},
    {"BiasAddGrad", "sum", K_BIAS_GRAD, NULL, NULL, NULL, 0},
    {"MatMul", "matmul", K_MATMUL, NULL, NULL, NULL, 0},
    {"BatchMatMulV2", "matmul", K_BATCH_MATMUL, NULL, NULL, NULL, 0},
    {"BatchMatMulV3", "matmul", K_BATCH_MATMUL, NULL, "Ta Tb Tout", NULL, 0},
    {"Softmax", "softmax", K_SOFTMAX, NULL, NULL, NULL, 0},
    {"LogSoftmax", "log_softmax", K_SOFTMAX, NULL, NULL, NULL, 0},
    {"Sum", "sum", K_REDUCE, "reduction_indices", NULL, NULL, 0},
    {"Mean", "mean", K_REDUCE, "reduction_indices", NULL, NULL, 0},
    {"Max", "max", K_REDUCE, "reduction_indices", NULL, NULL, 0},
    {"Conv2D", "conv2d", 0, NULL, NULL, kt_conv2d, 0},
    {"Conv2DBackpropInput", "conv2d_grad_input", 0, "input_sizes", NULL, kt_conv2d_grad_input, 0},
    {"Conv2DBackpropFilter", "conv2d_grad_weight", 0, "filter_sizes", NULL, kt_conv2d_grad_filter, 0},
    {"MaxPool", "max_pool2d", 0, NULL, NULL, kt_max_pool, 0},
    {"MaxPoolGrad", "max_pool2d_grad", 0, NULL, NULL, kt_max_pool_grad, 0},
    {"AvgPool", "avg_pool2d", 0, NULL, NULL, kt_avg_pool, 0},
    {"AvgPoolGrad", "avg_pool2d_grad", 0, "orig_input_shape", NULL, kt_avg_pool_grad, 0},
    {"SparseSoftmaxCrossEntropyWithLogits", "log_softmax", 0, NULL, NULL, kt_sparse_xent, 0},
    {"SoftmaxCrossEntropyWithLogits", "log_softmax", 0, NULL, NULL, kt_xent, 0},
    {"Cast", "cast", 0, NULL, "SrcT", kt_cast, 0},
    {"Transpose", "copy", 0, "perm", NULL, kt_transpose, 0},
    {"ConcatV2", "concat", 0, "axis", NULL, kt_concat, 0},
    {"GatherV2", "index_select", 0, "axis", "Tparams", kt_gather, 0},
    {"AddN", "add", 0, NULL, NULL, kt_add_n, 0},
    {"_FusedMatMul", "linear_act", 0, NULL, NULL, kt_fused_matmul, 0},
    {"_FusedConv2D", "conv2d", 0, NULL, NULL, kt_fused_conv2d, 1},
};
#define N_DEFS ((int)(sizeof defs / sizeof defs[0]))

/* The dtypes every kernel is registered for: the float types gradus defines its ops at. */
static const TF_DataType dtypes[] = {TF_FLOAT, TF_HALF, TF_BFLOAT16};
#define N_DTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

/* ---- what the sweep reads --------------------------------------------------------------- */

static const char *tf_dtype_name(TF_DataType t)
{
    return t == TF_FLOAT ? "float32" : t == TF_HALF ? "float16" : t == TF_BFLOAT16 ? "bfloat16" : "?";
}

/* Ops each kernel has run, and how many of them on the backend's own kernel (the rest
 * ran on gradus's reference across copies): tests read them through gradus_tf_counts. */
static _Atomic long long runs[64], on_backend_runs[64];

/* Whether every gradus op of the kernel running on this thread ran on the backend. */
static _Thread_local int tl_all_on_backend, tl_failed;

static char list_buf[16384];
static pthread_once_t list_once = PTHREAD_ONCE_INIT;

static void fill_list(void)
{
    size_t used = 0;
    for (int i = 0; i < N_DEFS; i++)
        for (int j = 0; j < N_DTYPES; j++)
            for (int m = 0; m < (defs[i].compute == kt_cast ? N_DTYPES : 1) && used < sizeof list_buf; m++)
                if (!(defs[i].no_bf16 && dtypes[j] == TF_BFLOAT16))
                used += (size_t)snprintf(list_buf + used, sizeof list_buf - used, "%s %s%s%s %s %s\n", defs[i].tf_op,
                                         tf_dtype_name(dtypes[j]), defs[i].compute == kt_cast ? ">" : "",
                                         defs[i].compute == kt_cast ? tf_dtype_name(dtypes[m]) : "", defs[i].gd_op,
                                         defs[i].host_input != NULL ? defs[i].host_input : "-");
}

/* One line per registration: "TfOp dtype gradus_op host_input|-" (dtype as TensorFlow
 * names it), so the sweep checks exactly what is registered. */
__attribute__((visibility("default"))) const char *gradus_tf_kernels(void)
{
    pthread_once(&list_once, fill_list);
    return list_buf;
}

/* "TfOp runs on_backend" for every kernel that ran, one line each. */
__attribute__((visibility("default"))) const char *gradus_tf_counts(void)
{
    static _Thread_local char buf[4096];
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_DEFS && used < sizeof buf; i++)
        if (runs[i] > 0)
            used += (size_t)snprintf(buf + used, sizeof buf - used, "%s %lld %lld\n", defs[i].tf_op, (long long)runs[i],
                                     (long long)on_backend_runs[i]);
    return buf;
}

/* ---- tensors -------------------------------------------------------------------------- */

int kt_gd_dtype(TF_DataType t);
int kt_gd_dtype(TF_DataType t)
{
    switch (t) {
    case TF_FLOAT: return GDP_F32;
    case TF_HALF: return GDP_F16;
    case TF_BFLOAT16: return GDP_BF16;
    case TF_DOUBLE: return GDP_F64;
    case TF_INT32: return GDP_I32;
    case TF_INT64: return GDP_I64;
    case TF_UINT8: return GDP_U8;
    case TF_INT8: return GDP_I8;
    case TF_BOOL: return GDP_BOOL;
    default: return -1;
    }
}

gdp_tensor kt_view(const TF_Tensor *t)
{
    gdp_tensor v = {.size = sizeof v, .data = TF_TensorData(t), .dtype = kt_gd_dtype(TF_TensorType(t)),
                    .ndim = TF_NumDims(t)};
    for (int d = 0; d < v.ndim && d < GDP_MAX_DIMS; d++) v.shape[d] = TF_Dim(t, d);
    gdp_set_contiguous(&v);
    return v;
}

/* ---- one kernel instance -------------------------------------------------------------- */

static void *kcreate(TF_OpKernelConstruction *c, int idx)
{
    if (idx < 0 || idx >= N_DEFS) return NULL; /* trampolines past the table are never registered */
    kstate *k = calloc(1, sizeof *k);
    if (k == NULL) return NULL;
    k->def = &defs[idx];
    TF_Status *st = TF_NewStatus();
    TF_Bool b = 0;
    if (k->def->compute == kt_fused_matmul) {
        TF_OpKernelConstruction_GetAttrBool(c, "transpose_a", &b, st);
        k->ta = b;
        TF_OpKernelConstruction_GetAttrBool(c, "transpose_b", &b, st);
        k->tb = b;
    }
    switch (k->def->kind) {
    case K_MATMUL:
        TF_OpKernelConstruction_GetAttrBool(c, "transpose_a", &b, st);
        k->ta = b;
        TF_OpKernelConstruction_GetAttrBool(c, "transpose_b", &b, st);
        k->tb = b;
        break;
    case K_BATCH_MATMUL:
        TF_OpKernelConstruction_GetAttrBool(c, "adj_x", &b, st);
        k->ta = b;
        TF_OpKernelConstruction_GetAttrBool(c, "adj_y", &b, st);
        k->tb = b;
        break;
    case K_REDUCE:
        TF_OpKernelConstruction_GetAttrBool(c, "keep_dims", &b, st);
        k->keep_dims = b;
        break;
    case K_BIAS_ADD:
    case K_BIAS_GRAD: {
        char fmt[16] = "NHWC";
        if (TF_OpKernelConstruction_HasAttr(c, "data_format", st)) {
            TF_OpKernelConstruction_GetAttrString(c, "data_format", fmt, sizeof fmt - 1, st);
        }
        if (strncmp(fmt, "NHWC", 4) != 0) {
            TF_SetStatus(st, TF_UNIMPLEMENTED, "gradus: BiasAdd on GRADUS takes data_format NHWC only");
            TF_OpKernelConstruction_Failure(c, st);
        }
        break;
    }
    default: break;
    }
    /* the NHWC ops: strides, window, dilations, padding (the data format is checked) */
    int32_t v[4];
    if (TF_OpKernelConstruction_HasAttr(c, "strides", st)) {
        TF_OpKernelConstruction_GetAttrInt32List(c, "strides", v, 4, st);
        k->stride[0] = v[1], k->stride[1] = v[2];
    }
    k->ksize[0] = k->ksize[1] = k->dilation[0] = k->dilation[1] = 1;
    if (TF_OpKernelConstruction_HasAttr(c, "ksize", st)) {
        TF_OpKernelConstruction_GetAttrInt32List(c, "ksize", v, 4, st);
        k->ksize[0] = v[1], k->ksize[1] = v[2];
    }
    if (TF_OpKernelConstruction_HasAttr(c, "dilations", st)) {
        TF_OpKernelConstruction_GetAttrInt32List(c, "dilations", v, 4, st);
        k->dilation[0] = v[1], k->dilation[1] = v[2];
    }
    if (TF_OpKernelConstruction_HasAttr(c, "padding", st))
        TF_OpKernelConstruction_GetAttrString(c, "padding", k->padding, sizeof k->padding - 1, st);
    if (TF_OpKernelConstruction_HasAttr(c, "batch_dims", st)) {
        int32_t bd = 0;
        TF_OpKernelConstruction_GetAttrInt32(c, "batch_dims", &bd, st);
        k->batch_dims = bd;
    }
    if (TF_OpKernelConstruction_HasAttr(c, "fused_ops", st)) {
        /* what the graph pass writes: BiasAdd, or BiasAdd then Relu */
        int32_t n = 0, total = 0;
        TF_OpKernelConstruction_GetAttrSize(c, "fused_ops", &n, &total, st);
        char *vals[4], storage[256];
        size_t lens[4];
        k->fused_bad = 1;
        if (TF_GetCode(st) == TF_OK && n >= 1 && n <= 2 && total <= (int32_t)sizeof storage) {
            TF_OpKernelConstruction_GetAttrStringList(c, "fused_ops", vals, lens, n, storage, sizeof storage, st);
            int ok = TF_GetCode(st) == TF_OK && lens[0] == 7 && memcmp(vals[0], "BiasAdd", 7) == 0;
            if (ok && n == 2) ok = lens[1] == 4 && memcmp(vals[1], "Relu", 4) == 0;
            k->fused_bad = !ok;
            k->act = n == 2;
        }
        TF_SetStatus(st, TF_OK, "");
    }
    if (k->def->compute != NULL && TF_OpKernelConstruction_HasAttr(c, "data_format", st)) {
        char fmt[16] = "";
        TF_OpKernelConstruction_GetAttrString(c, "data_format", fmt, sizeof fmt - 1, st);
        if (strncmp(fmt, "NHWC", 4) != 0) {
            TF_SetStatus(st, TF_UNIMPLEMENTED, "gradus: GRADUS takes data_format NHWC only");
            TF_OpKernelConstruction_Failure(c, st);
        }
    }
    TF_DeleteStatus(st);
    return k;
}

static void kdelete(void *k) { free(k); }

void kt_fail(TF_OpKernelContext *ctx, TF_Code code, const char *fmt, const char *a, const char *b)
{
    char m[1200];
    snprintf(m, sizeof m, fmt, a, b);
    TF_Status *st = TF_NewStatus();
    TF_SetStatus(st, code, m);
    tl_failed = 1;
    TF_OpKernelContext_Failure(ctx, st);
    TF_DeleteStatus(st);
}

/* Runs one gradus op under the lock, on the kernel's stream. 0 on success. */
int kt_run(TF_OpKernelContext *ctx, const kstate *k, const char *op, int n_in, const gdp_tensor *const *in, int n_out,
           const gdp_tensor *const *out, int n_attr, const gd_attr *attrs)
{
    TF_Status *st = TF_NewStatus();
    SP_Stream s = TF_GetStream(ctx, st);
    void *gs = TF_GetCode(st) == TF_OK && s != NULL ? ((gtf_stream *)(void *)s)->gs : gtf.stream;
    TF_DeleteStatus(st);
    pthread_mutex_lock(&gtf.lock);
    int on = 0, profiling = gtf_prof_on();
    uint64_t t0 = profiling ? gtf_prof_now() : 0;
    gd_status r = gd_backend_run_op(gtf.ctx, gtf.backend, op, n_in, in, n_out, out, n_attr, attrs, gs, &on);
    if (r == GD_OK && !on) tl_all_on_backend = 0;
    if (r == GD_OK && (gtf.sync || profiling)) { /* a span ends when the device is done */
        gdp_err e = {.size = sizeof e};
        if (gtf_sync_locked(gs, &e) != GDP_OK) {
            r = gd_ctx_fail(gtf.ctx, GD_ERR_DEVICE, "%s", e.msg);
        }
    }
    if (r == GD_OK && profiling) gtf_prof_span(k->def->tf_op, op, t0, gtf_prof_now());
    char msg[1024];
    if (r != GD_OK) snprintf(msg, sizeof msg, "%s", gd_ctx_error(gtf.ctx));
    pthread_mutex_unlock(&gtf.lock);
    if (r != GD_OK) {
        kt_fail(ctx, r == GD_ERR_NOMEM ? TF_RESOURCE_EXHAUSTED : r == GD_ERR_INVALID || r == GD_ERR_SHAPE ? TF_INVALID_ARGUMENT : TF_INTERNAL,
             "%s on GRADUS: %s", k->def->tf_op, msg);
        return -1;
    }
    return 0;
}

TF_Tensor *kt_alloc(TF_OpKernelContext *ctx, int i, TF_DataType dt, int ndim, const int64_t *shape)
{
    size_t n = TF_DataTypeSize(dt);
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    TF_Status *st = TF_NewStatus();
    TF_Tensor *t;
    if (i >= 0) {
        t = TF_AllocateOutput(ctx, i, dt, shape, ndim, n, st);
    } else {
        TF_AllocatorAttributes aa = {.struct_size = TF_ALLOCATOR_ATTRIBUTES_STRUCT_SIZE, .on_host = 0};
        t = TF_AllocateTemp(ctx, dt, shape, ndim, &aa, st);
    }
    if (TF_GetCode(st) != TF_OK) {
        tl_failed = 1;
        TF_OpKernelContext_Failure(ctx, st);
        if (t != NULL) TF_DeleteTensor(t);
        t = NULL;
    }
    TF_DeleteStatus(st);
    return t;
}

TF_Tensor *kt_input(TF_OpKernelContext *ctx, int i)
{
    TF_Tensor *t = NULL;
    TF_Status *st = TF_NewStatus();
    TF_GetInput(ctx, i, &t, st);
    if (TF_GetCode(st) != TF_OK) {
        tl_failed = 1;
        TF_OpKernelContext_Failure(ctx, st);
        if (t != NULL) TF_DeleteTensor(t);
        t = NULL;
    }
    TF_DeleteStatus(st);
    return t;
}

int kt_host_ints(const TF_Tensor *t, int64_t *out, int cap)
{
    int64_t n = TF_TensorElementCount(t);
    if (n > cap) return -1;
    for (int64_t i = 0; i < n; i++)
        out[i] = TF_TensorType(t) == TF_INT64 ? ((const int64_t *)TF_TensorData(t))[i] : ((const int32_t *)TF_TensorData(t))[i];
    return (int)n;
}

int kt_upload(TF_OpKernelContext *ctx, const kstate *k, void *dst, const void *src, size_t bytes)
{
    TF_Status *st = TF_NewStatus();
    SP_Stream s = TF_GetStream(ctx, st);
    void *gs = TF_GetCode(st) == TF_OK && s != NULL ? ((gtf_stream *)(void *)s)->gs : gtf.stream;
    TF_DeleteStatus(st);
    gdp_err e = {.size = sizeof e};
    gdp_status r = GDP_OK;
    pthread_mutex_lock(&gtf.lock);
    if (gtf.dev == NULL) memcpy(dst, src, bytes);
    else r = gtf.dev->copy_h2d(gtf.inst, dst, src, bytes, gs, &e);
    pthread_mutex_unlock(&gtf.lock);
    if (r != GDP_OK) {
        kt_fail(ctx, TF_INTERNAL, "%s: host-to-device copy: %s", k->def->tf_op, e.msg);
        return -1;
    }
    return 0;
}

int kt_copy(TF_OpKernelContext *ctx, const kstate *k, const gdp_tensor *src, const gdp_tensor *dst)
{
    const gdp_tensor *i1[1] = {src}, *o1[1] = {dst};
    return kt_run(ctx, k, "copy", 1, i1, 1, o1, 0, NULL);
}

static int64_t numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

/* NumPy broadcast of two shapes; -1 when they do not broadcast. */
static int broadcast(const gdp_tensor *a, const gdp_tensor *b, int64_t *out)
{
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int d = 0; d < n; d++) {
        int da = d - (n - a->ndim), db = d - (n - b->ndim);
        int64_t x = da >= 0 ? a->shape[da] : 1, y = db >= 0 ? b->shape[db] : 1;
        if (x != y && x != 1 && y != 1) return -1;
        out[d] = x == 1 ? y : x;
    }
    return n;
}

static void kcompute_body(const kstate *k, TF_OpKernelContext *ctx);

static void kcompute(void *p, TF_OpKernelContext *ctx)
{
    const kstate *k = p;
    if (gtf_init() != 0) {
        kt_fail(ctx, TF_FAILED_PRECONDITION, "%s: %s", k->def->tf_op, gtf.error);
        return;
    }
    tl_all_on_backend = 1;
    tl_failed = 0;
    kcompute_body(k, ctx);
    int idx = (int)(k->def - defs);
    if (!tl_failed) {
        runs[idx]++;
        on_backend_runs[idx] += tl_all_on_backend;
    }
}

static void kcompute_body(const kstate *k, TF_OpKernelContext *ctx)
{
    if (k->def->compute != NULL) {
        k->def->compute(k, ctx);
        return;
    }
    int n_in = TF_NumInputs(ctx);
    TF_Tensor *tin[4] = {0};
    gdp_tensor in[4];
    TF_Status *st = TF_NewStatus();
    for (int i = 0; i < n_in && i < 4; i++) {
        TF_GetInput(ctx, i, &tin[i], st);
        if (TF_GetCode(st) != TF_OK) {
            tl_failed = 1;
            TF_OpKernelContext_Failure(ctx, st);
            goto done;
        }
        in[i] = kt_view(tin[i]);
    }
    TF_DataType dt = TF_TensorType(tin[0]);
    int64_t shape[GDP_MAX_DIMS];
    int ndim = in[0].ndim;
    memcpy(shape, in[0].shape, sizeof shape);
    gd_attr attrs[4];
    int n_attr = 0, gin = 1;
    const char *op = k->def->gd_op;
    const gdp_tensor *gi[4] = {&in[0], &in[1], NULL, NULL};
    switch (k->def->kind) {
    case K_UNARY: break;
    case K_SQUARE: attrs[n_attr++] = gd_attr_f("p", 2.0); break;
    case K_GRAD_YD: gi[0] = &in[1], gi[1] = &in[0], gin = 2; break;
    case K_GRAD_DX: gin = 2; break;
    case K_BINARY:
    case K_BIAS_ADD:
        gin = 2;
        ndim = broadcast(&in[0], &in[1], shape);
        if (ndim < 0) {
            kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: operands do not broadcast%s", k->def->tf_op, "");
            goto done;
        }
        break;
    case K_BIAS_GRAD: {
        int64_t axes[GDP_MAX_DIMS];
        for (int d = 0; d + 1 < in[0].ndim; d++) axes[d] = d;
        attrs[n_attr++] = gd_attr_is("axes", in[0].ndim - 1, axes);
        ndim = 1;
        shape[0] = in[0].shape[in[0].ndim - 1];
        break;
    }
    case K_MATMUL:
    case K_BATCH_MATMUL: {
        gin = 2;
        attrs[n_attr++] = gd_attr_i("transpose_a", k->ta);
        attrs[n_attr++] = gd_attr_i("transpose_b", k->tb);
        const gdp_tensor *a = &in[0], *b = &in[1];
        if (a->ndim < 2 || b->ndim < 2) {
            kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: operands need two dims%s", k->def->tf_op, "");
            goto done;
        }
        gdp_tensor ab = *a, bb = *b; /* batch dims only, for their broadcast */
        ab.ndim -= 2, bb.ndim -= 2;
        ndim = broadcast(&ab, &bb, shape);
        if (ndim < 0) {
            kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: batch dims do not broadcast%s", k->def->tf_op, "");
            goto done;
        }
        shape[ndim++] = k->ta ? a->shape[a->ndim - 1] : a->shape[a->ndim - 2];
        shape[ndim++] = k->tb ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
        break;
    }
    case K_SOFTMAX: attrs[n_attr++] = gd_attr_i("axis", -1); break;
    case K_REDUCE: {
        /* axes are in host memory (the kernel registered them so) */
        const gdp_tensor *ax = &in[1];
        int64_t n = numel(ax->ndim, ax->shape), axes[GDP_MAX_DIMS];
        int used[GDP_MAX_DIMS] = {0};
        if (n > in[0].ndim) {
            kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: more axes than dims%s", k->def->tf_op, "");
            goto done;
        }
        for (int64_t i = 0; i < n; i++) {
            int64_t a = ax->dtype == GDP_I64 ? ((const int64_t *)ax->data)[i] : ((const int32_t *)ax->data)[i];
            if (a < 0) a += in[0].ndim;
            if (a < 0 || a >= in[0].ndim) {
                kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: axis out of range%s", k->def->tf_op, "");
                goto done;
            }
            axes[i] = a;
            used[a] = 1;
        }
        ndim = 0;
        for (int d = 0; d < in[0].ndim; d++) {
            if (!used[d]) shape[ndim++] = in[0].shape[d];
            else if (k->keep_dims) shape[ndim++] = 1;
        }
        if (n == 0) { /* TensorFlow reduces nothing over no axes, gradus everything: a copy */
            op = "copy";
            break;
        }
        attrs[n_attr++] = gd_attr_is("axes", (int)n, axes);
        attrs[n_attr++] = gd_attr_i("keepdims", k->keep_dims);
        break;
    }
    }
    TF_Tensor *tout = kt_alloc(ctx, 0, dt, ndim, shape);
    if (tout == NULL) goto done;
    if (numel(ndim, shape) > 0) {
        gdp_tensor out = kt_view(tout);
        const gdp_tensor *go[1] = {&out};
        kt_run(ctx, k, op, gin, gi, 1, go, n_attr, attrs);
    }
    TF_DeleteTensor(tout);
done:
    for (int i = 0; i < 4; i++)
        if (tin[i] != NULL) TF_DeleteTensor(tin[i]);
    TF_DeleteStatus(st);
}

/* TensorFlow's create functions take no user data: one trampoline per table entry. */
#define T(i) static void *create_##i(TF_OpKernelConstruction *c) { return kcreate(c, i); }
T(0) T(1) T(2) T(3) T(4) T(5) T(6) T(7) T(8) T(9) T(10) T(11) T(12) T(13) T(14) T(15) T(16) T(17) T(18) T(19)
T(20) T(21) T(22) T(23) T(24) T(25) T(26) T(27) T(28) T(29) T(30) T(31) T(32) T(33) T(34) T(35) T(36) T(37) T(38) T(39)
T(40) T(41) T(42) T(43) T(44) T(45) T(46) T(47) T(48) T(49) T(50) T(51) T(52) T(53) T(54) T(55) T(56) T(57) T(58) T(59)
#undef T
static void *(*const creates[])(TF_OpKernelConstruction *) = {
    create_0, create_1, create_2, create_3, create_4, create_5, create_6, create_7, create_8, create_9,
    create_10, create_11, create_12, create_13, create_14, create_15, create_16, create_17, create_18, create_19,
    create_20, create_21, create_22, create_23, create_24, create_25, create_26, create_27, create_28, create_29,
    create_30, create_31, create_32, create_33, create_34, create_35, create_36, create_37, create_38, create_39,
    create_40, create_41, create_42, create_43, create_44, create_45, create_46, create_47, create_48, create_49,
    create_50, create_51, create_52, create_53, create_54, create_55, create_56, create_57, create_58, create_59};
_Static_assert(sizeof creates / sizeof creates[0] >= sizeof defs / sizeof defs[0], "one create function per kernel");
_Static_assert(sizeof runs / sizeof runs[0] >= sizeof defs / sizeof defs[0], "one counter per kernel");

/* Registers one kernel: the op at dtype `dt` (and, for Cast, destination `dst`). */
static void register_one(int i, TF_DataType dt, TF_DataType dst, TF_Status *st)
{
    TF_KernelBuilder *b = TF_NewKernelBuilder(defs[i].tf_op, "GRADUS", creates[i], kcompute, kdelete);
    /* the dtype constraint on every attribute named (they all take the kernel's dtype) */
    char attrs[64];
    snprintf(attrs, sizeof attrs, "%s", defs[i].type_attr != NULL ? defs[i].type_attr : "T");
    TF_SetStatus(st, TF_OK, "");
    for (char *save = NULL, *a = strtok_r(attrs, " ", &save); a != NULL && TF_GetCode(st) == TF_OK; a = strtok_r(NULL, " ", &save))
        TF_KernelBuilder_TypeConstraint(b, a, dt, st);
    if (defs[i].compute == kt_cast && TF_GetCode(st) == TF_OK) TF_KernelBuilder_TypeConstraint(b, "DstT", dst, st);
    if (TF_GetCode(st) != TF_OK) {
        TF_DeleteKernelBuilder(b);
        return;
    }
    if (defs[i].host_input != NULL) TF_KernelBuilder_HostMemory(b, defs[i].host_input);
    char name[96];
    snprintf(name, sizeof name, "Gradus%s", defs[i].tf_op);
    TF_RegisterKernelBuilder(name, b, st); /* takes the builder */
}

/* Variables on a device whose memory the host cannot touch would be updated by TensorFlow's
 * device-independent AssignAdd/AssignSub kernels, which run host code on the variable's
 * buffer (a crash, or worse, on a real accelerator), and the kernel C API of this
 * TensorFlow cannot reach a variable for the bridge to update it. So on such a backend
 * creating a variable on GRADUS is refused with what to do instead. */
static void *varhandle_create(TF_OpKernelConstruction *c)
{
    (void)c;
    return NULL;
}
static void varhandle_refuse(void *k, TF_OpKernelContext *ctx)
{
    (void)k;
    TF_Status *st = TF_NewStatus();
    char m[600];
    snprintf(m, sizeof m,
             "VarHandleOp on GRADUS (gradus backend %s): variables cannot live on a device whose memory the host "
             "cannot touch, since TensorFlow updates them with host code and its kernel C API cannot reach them; "
             "create variables under tf.device('/CPU:0') and run the model on GRADUS",
             gtf.backend);
    TF_SetStatus(st, TF_UNIMPLEMENTED, m);
    TF_OpKernelContext_Failure(ctx, st);
    TF_DeleteStatus(st);
}

__attribute__((visibility("default"))) void TF_InitKernel(void)
{
    if (gtf_init() != 0) return; /* disabled, or no backend: no device to register for */
    TF_Status *st = TF_NewStatus();
    if (gtf.dev != NULL && !gtf.dev->host_visible) {
        TF_KernelBuilder *b = TF_NewKernelBuilder("VarHandleOp", "GRADUS", varhandle_create, varhandle_refuse, NULL);
        TF_RegisterKernelBuilder("GradusVarHandleOpRefused", b, st);
    }
    for (int i = 0; i < N_DEFS; i++)
        for (int j = 0; j < N_DTYPES; j++)
            for (int m = 0; m < (defs[i].compute == kt_cast ? N_DTYPES : 1); m++)
                if (!(defs[i].no_bf16 && dtypes[j] == TF_BFLOAT16)) register_one(i, dtypes[j], dtypes[m], st);
    const char *bad = getenv("GRADUS_TF_TEST_BAD_REGISTRATIONS");
    if (bad != NULL && strcmp(bad, "1") == 0) {
        /* broken on purpose, for the test that the sweep reports them: a second Relu
         * float32 kernel, and a Neg kernel constrained on an attribute Neg does not have */
        register_one(0, TF_FLOAT, TF_FLOAT, st);
        TF_KernelBuilder *b = TF_NewKernelBuilder("Neg", "GRADUS", creates[5], kcompute, kdelete);
        TF_KernelBuilder_TypeConstraint(b, "Tidx", TF_INT32, st);
        TF_RegisterKernelBuilder("GradusNegBroken", b, st);
    }
    TF_DeleteStatus(st);
}
