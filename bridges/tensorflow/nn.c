/* nn.c — the NHWC image ops and the cross-entropy ops of the GRADUS device.
 *
 * TensorFlow's images are NHWC with HWIO filters; gradus's are NCHW with OIHW filters. The
 * inputs need no copy: an NHWC tensor is an NCHW view with other strides, and gradus takes
 * views (a backend kernel that refuses strides gets a contiguous copy made on the device).
 * Outputs are contiguous in gradus, so each op writes a device temporary in gradus's layout
 * and copies it into TensorFlow's output through a view. gradus pads symmetrically: a SAME
 * padding that needs one more row at the end than at the start is refused with a message. */
#define GTF_UNIT gtf_nn_input_range_size
#include "kern.h"

#include <stdio.h>
#include <string.h>

/* (N, H, W, C) as an (N, C, H, W) view. */
static gdp_tensor nchw(const gdp_tensor *t)
{
    gdp_tensor v = *t;
    int64_t sh[4] = {t->shape[0], t->shape[3], t->shape[1], t->shape[2]};
    int64_t st[4] = {t->stride[0], t->stride[3], t->stride[1], t->stride[2]};
    memcpy(v.shape, sh, sizeof sh);
    memcpy(v.stride, st, sizeof st);
    return v;
}

/* A contiguous (N, C, H, W) tensor as an (N, H, W, C) view. */
static gdp_tensor nhwc(const gdp_tensor *t)
{
    gdp_tensor v = *t;
    int64_t sh[4] = {t->shape[0], t->shape[2], t->shape[3], t->shape[1]};
    int64_t st[4] = {t->stride[0], t->stride[2], t->stride[3], t->stride[1]};
    memcpy(v.shape, sh, sizeof sh);
    memcpy(v.stride, st, sizeof st);
    return v;
}

/* An (H, W, I, O) filter as an (O, I, H, W) view, and back. */
static gdp_tensor oihw(const gdp_tensor *f)
{
    gdp_tensor v = *f;
    int64_t sh[4] = {f->shape[3], f->shape[2], f->shape[0], f->shape[1]};
    int64_t st[4] = {f->stride[3], f->stride[2], f->stride[0], f->stride[1]};
    memcpy(v.shape, sh, sizeof sh);
    memcpy(v.stride, st, sizeof st);
    return v;
}
static gdp_tensor hwio(const gdp_tensor *w)
{
    gdp_tensor v = *w;
    int64_t sh[4] = {w->shape[2], w->shape[3], w->shape[1], w->shape[0]};
    int64_t st[4] = {w->stride[2], w->stride[3], w->stride[1], w->stride[0]};
    memcpy(v.shape, sh, sizeof sh);
    memcpy(v.stride, st, sizeof st);
    return v;
}

/* The square window gradus takes: stride, kernel, dilation and one symmetric padding,
 * from the node's attributes and the input's H, W. -1 (and the kernel failed) when gradus
 * cannot express it. */
typedef struct win { int64_t stride, kernel, dil, pad; } win;

static int window(TF_OpKernelContext *ctx, const kstate *k, int64_t H, int64_t W, int64_t kh, int64_t kw, win *w)
{
    const char *op = k->def->tf_op;
    if (k->stride[0] != k->stride[1] || k->dilation[0] != k->dilation[1] || kh != kw || H <= 0 || W <= 0) {
        kt_fail(ctx, TF_UNIMPLEMENTED, "%s on GRADUS: %s", op, "gradus takes square windows, strides and dilations");
        return -1;
    }
    w->stride = k->stride[0] > 0 ? k->stride[0] : 1;
    w->dil = k->dilation[0] > 0 ? k->dilation[0] : 1;
    w->kernel = kh;
    int64_t pads[2] = {0, 0}, in[2] = {H, W};
    if (strncmp(k->padding, "SAME", 4) == 0) {
        for (int d = 0; d < 2; d++) {
            int64_t out = (in[d] + w->stride - 1) / w->stride, eff = (kh - 1) * w->dil + 1;
            int64_t total = (out - 1) * w->stride + eff - in[d];
            if (total < 0) total = 0;
            if (total % 2 != 0) {
                kt_fail(ctx, TF_UNIMPLEMENTED, "%s on GRADUS: %s", op,
                        "SAME padding here needs one more row or column at the end than at the start; gradus pads symmetrically");
                return -1;
            }
            pads[d] = total / 2;
        }
    } else if (strncmp(k->padding, "VALID", 5) != 0) {
        kt_fail(ctx, TF_UNIMPLEMENTED, "%s on GRADUS: padding %s", op, k->padding);
        return -1;
    }
    if (pads[0] != pads[1]) {
        kt_fail(ctx, TF_UNIMPLEMENTED, "%s on GRADUS: %s", op, "different paddings along H and W");
        return -1;
    }
    w->pad = pads[0];
    return 0;
}

static int win_attrs(const win *w, gd_attr *a, int conv)
{
    int n = 0;
    a[n++] = gd_attr_i("stride", w->stride);
    a[n++] = gd_attr_i("padding", w->pad);
    if (conv) {
        a[n++] = gd_attr_i("dilation", w->dil);
        a[n++] = gd_attr_i("groups", 1);
    } else {
        a[n++] = gd_attr_i("kernel", w->kernel);
    }
    return n;
}

/* Runs op (inputs given) into a temporary of shape `tmp_shape` in gradus's layout, then
 * copies it into output 0 (TensorFlow's layout, `out_shape`) through `back`. */
static void run_into(TF_OpKernelContext *ctx, const kstate *k, const char *op, int n_in, const gdp_tensor *const *in,
                     int n_attr, const gd_attr *attrs, TF_DataType dt, const int64_t *tmp_shape, const int64_t *out_shape,
                     gdp_tensor (*back)(const gdp_tensor *), const char *back_op)
{
    TF_Tensor *out = kt_alloc(ctx, 0, dt, 4, out_shape);
    if (out == NULL) return;
    TF_Tensor *tmp = TF_TensorElementCount(out) > 0 ? kt_alloc(ctx, -1, dt, 4, tmp_shape) : NULL;
    if (tmp != NULL) {
        gdp_tensor t = kt_view(tmp), o = kt_view(out);
        const gdp_tensor *to[1] = {&t};
        if (kt_run(ctx, k, op, n_in, in, 1, to, n_attr, attrs) == 0) {
            gdp_tensor src = back(&t);
            const gdp_tensor *bi[1] = {&src}, *bo[1] = {&o};
            kt_run(ctx, k, back_op, 1, bi, 1, bo, 0, NULL); /* a copy, or the fused activation */
        }
        TF_DeleteTensor(tmp);
    }
    TF_DeleteTensor(out);
}

/* Conv2D, and _FusedConv2D (bias as conv2d's third input, Relu on the way out). */
static void conv_forward(const kstate *k, TF_OpKernelContext *ctx, int fused)
{
    TF_Tensor *x = kt_input(ctx, 0), *f = x != NULL ? kt_input(ctx, 1) : NULL, *bias = NULL;
    if (f == NULL) goto done;
    if (fused && k->fused_bad) {
        kt_fail(ctx, TF_UNIMPLEMENTED, "%s on GRADUS: %s", k->def->tf_op, "fused_ops other than BiasAdd[, Relu]");
        goto done;
    }
    if (fused && (bias = kt_input(ctx, 2)) == NULL) goto done;
    gdp_tensor xv = kt_view(x), fv = kt_view(f);
    if (xv.ndim != 4 || fv.ndim != 4 || fv.shape[2] != xv.shape[3]) {
        kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: %s", k->def->tf_op, "input (N, H, W, C) and filter (kh, kw, C, Co) needed");
        goto done;
    }
    win w;
    if (window(ctx, k, xv.shape[1], xv.shape[2], fv.shape[0], fv.shape[1], &w) != 0) goto done;
    int64_t eff = (w.kernel - 1) * w.dil + 1;
    int64_t Ho = (xv.shape[1] + 2 * w.pad - eff) / w.stride + 1, Wo = (xv.shape[2] + 2 * w.pad - eff) / w.stride + 1;
    int64_t tmp[4] = {xv.shape[0], fv.shape[3], Ho, Wo}, outs[4] = {xv.shape[0], Ho, Wo, fv.shape[3]};
    gdp_tensor xn = nchw(&xv), fo = oihw(&fv), bv;
    const gdp_tensor *in[3] = {&xn, &fo, &bv};
    if (bias != NULL) bv = kt_view(bias);
    gd_attr a[6];
    int na = win_attrs(&w, a, 1);
    run_into(ctx, k, "conv2d", bias != NULL ? 3 : 2, in, na, a, TF_TensorType(x), tmp, outs, nhwc,
             fused && k->act ? "relu" : "copy");
done:
    if (x != NULL) TF_DeleteTensor(x);
    if (f != NULL) TF_DeleteTensor(f);
    if (bias != NULL) TF_DeleteTensor(bias);
}

void kt_conv2d(const kstate *k, TF_OpKernelContext *ctx) { conv_forward(k, ctx, 0); }
void kt_fused_conv2d(const kstate *k, TF_OpKernelContext *ctx) { conv_forward(k, ctx, 1); }

/* _FusedMatMul: gradus's linear_act, x (M, K) with W as (K, N), or (N, K) when transposed. */
void kt_fused_matmul(const kstate *k, TF_OpKernelContext *ctx)
{
    TF_Tensor *a = kt_input(ctx, 0), *b = a != NULL ? kt_input(ctx, 1) : NULL, *bias = b != NULL ? kt_input(ctx, 2) : NULL;
    if (bias == NULL) goto done;
    if (k->fused_bad) {
        kt_fail(ctx, TF_UNIMPLEMENTED, "%s on GRADUS: %s", k->def->tf_op, "fused_ops other than BiasAdd[, Relu]");
        goto done;
    }
    gdp_tensor av = kt_view(a), bv = kt_view(b), cv = kt_view(bias);
    if (av.ndim != 2 || bv.ndim != 2 || cv.ndim != 1) {
        kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: %s", k->def->tf_op, "a and b of two dims and a bias of one needed");
        goto done;
    }
    if (k->ta) { /* x as the transposed view of a */
        int64_t t = av.shape[0];
        av.shape[0] = av.shape[1], av.shape[1] = t;
        t = av.stride[0];
        av.stride[0] = av.stride[1], av.stride[1] = t;
    }
    int64_t shape[2] = {av.shape[0], k->tb ? bv.shape[0] : bv.shape[1]};
    TF_Tensor *y = kt_alloc(ctx, 0, TF_TensorType(a), 2, shape);
    if (y != NULL) {
        gdp_tensor yv = kt_view(y);
        const gdp_tensor *in[3] = {&av, &bv, &cv}, *out[1] = {&yv};
        gd_attr at[2] = {gd_attr_i("act", k->act ? GDP_ACT_RELU : GDP_ACT_NONE), gd_attr_i("weight_in_out", !k->tb)};
        if (gdp_numel(&yv) > 0) kt_run(ctx, k, "linear_act", 3, in, 1, out, 2, at);
        TF_DeleteTensor(y);
    }
done:
    if (a != NULL) TF_DeleteTensor(a);
    if (b != NULL) TF_DeleteTensor(b);
    if (bias != NULL) TF_DeleteTensor(bias);
}

void kt_conv2d_grad_input(const kstate *k, TF_OpKernelContext *ctx)
{
    TF_Tensor *sz = kt_input(ctx, 0), *f = sz != NULL ? kt_input(ctx, 1) : NULL, *dy = f != NULL ? kt_input(ctx, 2) : NULL;
    if (dy == NULL) goto done;
    int64_t is[4];
    gdp_tensor fv = kt_view(f), dv = kt_view(dy);
    if (kt_host_ints(sz, is, 4) != 4 || fv.ndim != 4 || dv.ndim != 4) {
        kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: %s", k->def->tf_op, "input_sizes of 4 and 4-D filter and gradient needed");
        goto done;
    }
    win w;
    if (window(ctx, k, is[1], is[2], fv.shape[0], fv.shape[1], &w) != 0) goto done;
    int64_t tmp[4] = {is[0], is[3], is[1], is[2]};
    gdp_tensor dn = nchw(&dv), fo = oihw(&fv);
    const gdp_tensor *in[2] = {&dn, &fo};
    gd_attr a[6];
    int na = win_attrs(&w, a, 1);
    a[na++] = gd_attr_is("input_shape", 4, tmp);
    run_into(ctx, k, "conv2d_grad_input", 2, in, na, a, TF_TensorType(dy), tmp, is, nhwc, "copy");
done:
    if (sz != NULL) TF_DeleteTensor(sz);
    if (f != NULL) TF_DeleteTensor(f);
    if (dy != NULL) TF_DeleteTensor(dy);
}

void kt_conv2d_grad_filter(const kstate *k, TF_OpKernelContext *ctx)
{
    TF_Tensor *x = kt_input(ctx, 0), *sz = x != NULL ? kt_input(ctx, 1) : NULL, *dy = sz != NULL ? kt_input(ctx, 2) : NULL;
    if (dy == NULL) goto done;
    int64_t fs[4];
    gdp_tensor xv = kt_view(x), dv = kt_view(dy);
    if (kt_host_ints(sz, fs, 4) != 4 || xv.ndim != 4 || dv.ndim != 4) {
        kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: %s", k->def->tf_op, "filter_sizes of 4 and 4-D input and gradient needed");
        goto done;
    }
    win w;
    if (window(ctx, k, xv.shape[1], xv.shape[2], fs[0], fs[1], &w) != 0) goto done;
    int64_t tmp[4] = {fs[3], fs[2], fs[0], fs[1]};
    gdp_tensor dn = nchw(&dv), xn = nchw(&xv);
    const gdp_tensor *in[2] = {&dn, &xn};
    gd_attr a[6];
    int na = win_attrs(&w, a, 1);
    a[na++] = gd_attr_is("weight_shape", 4, tmp);
    run_into(ctx, k, "conv2d_grad_weight", 2, in, na, a, TF_TensorType(dy), tmp, fs, hwio, "copy");
done:
    if (x != NULL) TF_DeleteTensor(x);
    if (sz != NULL) TF_DeleteTensor(sz);
    if (dy != NULL) TF_DeleteTensor(dy);
}

/* Pooling: max pads with -inf as TensorFlow does; average counts padding in gradus and not
 * in TensorFlow, so it takes no padding. */
static int pool_window(TF_OpKernelContext *ctx, const kstate *k, const gdp_tensor *x, int avg, win *w)
{
    if (x->ndim != 4) {
        kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: %s", k->def->tf_op, "a 4-D input needed");
        return -1;
    }
    if (window(ctx, k, x->shape[1], x->shape[2], k->ksize[0], k->ksize[1], w) != 0) return -1;
    if ((avg && w->pad > 0) || w->pad > w->kernel / 2) {
        kt_fail(ctx, TF_UNIMPLEMENTED, "%s on GRADUS: %s", k->def->tf_op,
                avg ? "padding (TensorFlow leaves it out of the mean, gradus counts it)" : "padding past half the window");
        return -1;
    }
    return 0;
}

static void pool(const kstate *k, TF_OpKernelContext *ctx, int avg)
{
    TF_Tensor *x = kt_input(ctx, 0);
    if (x == NULL) return;
    gdp_tensor xv = kt_view(x);
    win w;
    if (pool_window(ctx, k, &xv, avg, &w) == 0) {
        int64_t Ho = (xv.shape[1] + 2 * w.pad - w.kernel) / w.stride + 1, Wo = (xv.shape[2] + 2 * w.pad - w.kernel) / w.stride + 1;
        int64_t tmp[4] = {xv.shape[0], xv.shape[3], Ho, Wo}, outs[4] = {xv.shape[0], Ho, Wo, xv.shape[3]};
        gdp_tensor xn = nchw(&xv);
        const gdp_tensor *in[1] = {&xn};
        gd_attr a[4];
        int na = win_attrs(&w, a, 0);
        run_into(ctx, k, avg ? "avg_pool2d" : "max_pool2d", 1, in, na, a, TF_TensorType(x), tmp, outs, nhwc, "copy");
    }
    TF_DeleteTensor(x);
}

void kt_max_pool(const kstate *k, TF_OpKernelContext *ctx) { pool(k, ctx, 0); }
void kt_avg_pool(const kstate *k, TF_OpKernelContext *ctx) { pool(k, ctx, 1); }

void kt_max_pool_grad(const kstate *k, TF_OpKernelContext *ctx)
{
    TF_Tensor *x = kt_input(ctx, 0), *y = x != NULL ? kt_input(ctx, 1) : NULL, *dy = y != NULL ? kt_input(ctx, 2) : NULL;
    if (dy == NULL) goto done;
    gdp_tensor xv = kt_view(x), dv = kt_view(dy);
    win w;
    if (pool_window(ctx, k, &xv, 0, &w) != 0) goto done;
    int64_t tmp[4] = {xv.shape[0], xv.shape[3], xv.shape[1], xv.shape[2]};
    gdp_tensor dn = nchw(&dv), xn = nchw(&xv);
    const gdp_tensor *in[2] = {&dn, &xn};
    gd_attr a[4];
    int na = win_attrs(&w, a, 0);
    run_into(ctx, k, "max_pool2d_grad", 2, in, na, a, TF_TensorType(dy), tmp, xv.shape, nhwc, "copy");
done:
    if (x != NULL) TF_DeleteTensor(x);
    if (y != NULL) TF_DeleteTensor(y);
    if (dy != NULL) TF_DeleteTensor(dy);
}

void kt_avg_pool_grad(const kstate *k, TF_OpKernelContext *ctx)
{
    TF_Tensor *sz = kt_input(ctx, 0), *dy = sz != NULL ? kt_input(ctx, 1) : NULL;
    if (dy == NULL) goto done;
    int64_t is[4];
    if (kt_host_ints(sz, is, 4) != 4) {
        kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: %s", k->def->tf_op, "orig_input_shape of 4 needed");
        goto done;
    }
    gdp_tensor shape_only = {.ndim = 4};
    memcpy(shape_only.shape, is, sizeof is);
    win w;
    if (pool_window(ctx, k, &shape_only, 1, &w) != 0) goto done;
    int64_t tmp[4] = {is[0], is[3], is[1], is[2]};
    gdp_tensor dv = kt_view(dy), dn = nchw(&dv);
    const gdp_tensor *in[1] = {&dn};
    gd_attr a[5];
    int na = win_attrs(&w, a, 0);
    a[na++] = gd_attr_is("input_shape", 4, tmp);
    run_into(ctx, k, "avg_pool2d_grad", 1, in, na, a, TF_TensorType(dy), tmp, is, nhwc, "copy");
done:
    if (sz != NULL) TF_DeleteTensor(sz);
    if (dy != NULL) TF_DeleteTensor(dy);
}

/* ---- cross entropy ------------------------------------------------------------------- */

/* loss (N) = -sum(p * log_softmax(x)) and backprop (N, C) = softmax(x) - p, for the
 * target distribution p (N, C) on the device. */
static void xent_from(const kstate *k, TF_OpKernelContext *ctx, const gdp_tensor *x, const gdp_tensor *p, TF_DataType dt)
{
    int64_t N = x->shape[0], C = x->shape[1];
    TF_Tensor *loss = kt_alloc(ctx, 0, dt, 1, &N), *bp = loss != NULL ? kt_alloc(ctx, 1, dt, 2, x->shape) : NULL;
    TF_Tensor *t_ls = bp != NULL ? kt_alloc(ctx, -1, dt, 2, x->shape) : NULL;
    TF_Tensor *t_sm = t_ls != NULL ? kt_alloc(ctx, -1, dt, 2, x->shape) : NULL;
    TF_Tensor *t_row = t_sm != NULL ? kt_alloc(ctx, -1, dt, 1, &N) : NULL;
    if (t_row != NULL && N * C > 0) {
        gdp_tensor lv = kt_view(loss), bv = kt_view(bp), ls = kt_view(t_ls), sm = kt_view(t_sm), row = kt_view(t_row);
        gd_attr ax = gd_attr_i("axis", -1);
        int64_t one = 1;
        gd_attr red[2] = {gd_attr_is("axes", 1, &one), gd_attr_i("keepdims", 0)};
        const gdp_tensor *xin[1] = {x}, *o_ls[1] = {&ls}, *o_sm[1] = {&sm};
        const gdp_tensor *sub_in[2] = {&sm, p}, *o_bp[1] = {&bv};
        const gdp_tensor *mul_in[2] = {p, &ls}, *o_prod[1] = {&sm}; /* sm's buffer is free again */
        const gdp_tensor *sum_in[1] = {&sm}, *o_row[1] = {&row}, *neg_in[1] = {&row}, *o_loss[1] = {&lv};
        (void)(kt_run(ctx, k, "log_softmax", 1, xin, 1, o_ls, 1, &ax) == 0 &&
               kt_run(ctx, k, "softmax", 1, xin, 1, o_sm, 1, &ax) == 0 &&
               kt_run(ctx, k, "sub", 2, sub_in, 1, o_bp, 0, NULL) == 0 &&
               kt_run(ctx, k, "mul", 2, mul_in, 1, o_prod, 0, NULL) == 0 &&
               kt_run(ctx, k, "sum", 1, sum_in, 1, o_row, 2, red) == 0 &&
               kt_run(ctx, k, "neg", 1, neg_in, 1, o_loss, 0, NULL) == 0);
    }
    TF_Tensor *all[5] = {loss, bp, t_ls, t_sm, t_row};
    for (int i = 0; i < 5; i++)
        if (all[i] != NULL) TF_DeleteTensor(all[i]);
}

void kt_sparse_xent(const kstate *k, TF_OpKernelContext *ctx)
{
    TF_Tensor *x = kt_input(ctx, 0), *lab = x != NULL ? kt_input(ctx, 1) : NULL, *eye = NULL, *oh = NULL;
    unsigned char *h = NULL;
    if (lab == NULL) goto done;
    gdp_tensor xv = kt_view(x), lv = kt_view(lab);
    if (xv.ndim != 2 || lv.ndim != 1 || lv.shape[0] != xv.shape[0]) {
        kt_fail(ctx, TF_INVALID_ARGUMENT, "%s: %s", k->def->tf_op, "logits (N, C) and labels (N) needed");
        goto done;
    }
    /* the one-hot targets: rows of the identity, gathered by label on the device (a label
     * out of range is bad data, reported as gradus reports it) */
    int64_t C = xv.shape[1], cc[2] = {C, C};
    TF_DataType dt = TF_TensorType(x);
    eye = kt_alloc(ctx, -1, dt, 2, cc);
    oh = eye != NULL ? kt_alloc(ctx, -1, dt, 2, xv.shape) : NULL;
    if (oh == NULL || C == 0 || xv.shape[0] == 0) goto done;
    size_t es = TF_DataTypeSize(dt), bytes = (size_t)(C * C) * es;
    h = calloc(1, bytes);
    if (h == NULL) {
        kt_fail(ctx, TF_RESOURCE_EXHAUSTED, "%s: %s", k->def->tf_op, "no host memory for the identity");
        goto done;
    }
    uint32_t one32 = 0x3f800000u;
    uint16_t one16 = dt == TF_HALF ? 0x3c00u : 0x3f80u;
    for (int64_t i = 0; i < C; i++) memcpy(h + (size_t)(i * C + i) * es, es == 4 ? (const void *)&one32 : (const void *)&one16, es);
    gdp_tensor ev = kt_view(eye), ov = kt_view(oh);
    const gdp_tensor *emb_in[2] = {&ev, &lv}, *o_oh[1] = {&ov};
    if (kt_upload(ctx, k, ev.data, h, bytes) == 0 && kt_run(ctx, k, "embedding", 2, emb_in, 1, o_oh, 0, NULL) == 0)
        xent_from(k, ctx, &xv, &ov, dt);
done:
    free(h);
    TF_Tensor *all[4] = {x, lab, eye, oh};
    for (int i = 0; i < 4; i++)
        if (all[i] != NULL) TF_DeleteTensor(all[i]);
}

void kt_xent(const kstate *k, TF_OpKernelContext *ctx)
{
    TF_Tensor *x = kt_input(ctx, 0), *lab = x != NULL ? kt_input(ctx, 1) : NULL;
    if (lab == NULL) goto done;
    gdp_tensor xv = kt_view(x), lv = kt_view(lab);
    if (xv.ndim != 2 || lv.ndim != 2 || lv.shape[0] != xv.shape[0] || lv.shape[1] != xv.shape[1]) {
        kt_fail(ctx, TF_UNIMPLEMENTED, "%s on GRADUS: %s", k->def->tf_op, "logits and labels of one (N, C) shape (no broadcast)");
        goto done;
    }
    xent_from(k, ctx, &xv, &lv, TF_TensorType(x));
done:
    if (x != NULL) TF_DeleteTensor(x);
    if (lab != NULL) TF_DeleteTensor(lab);
}
