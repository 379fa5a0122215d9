/* quant.c — linear layers over int8 weights, for inference.
 *
 *   linear_q8(x, wq, ws [, b])    weight-only: y = (x . wq[n]) ws[n] + b[n]
 *   linear_w8a8(x, wq, ws [, b])  each row of x quantized too (per token), the dot product
 *                                 in integers: y = (dot(q(x), wq[n]) sx) ws[n] + b[n]
 *
 * wq (out, in) i8 holds a weight matrix quantized per output channel with scales ws
 * (out) f32, as gdp_q8 in gradus_semantics.h defines (the loader quantizes weights that
 * way); x, b and y are f32, bf16 or f16. The weight-only product is accumulated in double
 * here (backends in f32, hence a tolerance); the W8A8 one is exact integers, then the f32
 * steps gdp_q8_dequant fixes, so backends agree to the bit up to a fused multiply-add in
 * the bias. Neither is differentiable: they serve inference only.
 */
#include "cost.h"
#include "refwalk.h"

static int q8_infer(gd_infer *c)
{
    const gd_shape *x = &c->in[0], *w = &c->in[1], *s = &c->in[2], *b = c->n_in > 3 ? &c->in[3] : NULL;
    char sx[160], sw[160], ss[160];
    gd_shape_str(x, sx, sizeof sx);
    gd_shape_str(w, sw, sizeof sw);
    gd_shape_str(s, ss, sizeof ss);
    if (x->dtype != GDP_F32 && x->dtype != GDP_BF16 && x->dtype != GDP_F16)
        return gd_infer_fail(c, "x %s must be f32, bf16 or f16", sx);
    if (x->ndim < 1) return gd_infer_fail(c, "x %s must have at least 1 dim", sx);
    if (w->dtype != GDP_I8 || w->ndim != 2) return gd_infer_fail(c, "the weights %s must be i8 (out, in)", sw);
    if (s->dtype != GDP_F32 || s->ndim != 1 || s->dim[0] != w->dim[0])
        return gd_infer_fail(c, "the scales %s must be f32 [%lld], one per row of the weights %s", ss,
                             (long long)w->dim[0], sw);
    if (x->dim[x->ndim - 1] != w->dim[1])
        return gd_infer_fail(c, "x %s has %lld features but the weights %s take %lld", sx,
                             (long long)x->dim[x->ndim - 1], sw, (long long)w->dim[1]);
    if (b != NULL) {
        char sb[160];
        gd_shape_str(b, sb, sizeof sb);
        if (b->dtype != x->dtype || b->ndim != 1 || b->dim[0] != w->dim[0])
            return gd_infer_fail(c, "the bias %s must be [%lld] of x's dtype", sb, (long long)w->dim[0]);
    }
    gd_shape *o = &c->out[0];
    *o = *x;
    o->dim[o->ndim - 1] = w->dim[0];
    return 0;
}

/* x, b and y are f32 here (the core widens halves); any operand may be a strided view. */
static gdp_status q8_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)backend;
    (void)stream;
    const gdp_tensor *x = node->in[0], *w = node->in[1], *s = node->in[2], *b = node->n_in > 3 ? node->in[3] : NULL;
    if (x->dtype != GDP_F32 || node->out[0]->dtype != GDP_F32)
        return gdp_fail(err, GDP_ERR_UNSUPPORTED, "the reference takes f32 (halves widened)");
    int a8 = strcmp(node->op, "linear_w8a8") == 0;
    int64_t in = w->shape[1], out = w->shape[0];
    const int8_t *wq = w->data;
    float *y = node->out[0]->data;
    char *ws = rw_workspace(node, sizeof(float) * (size_t)(in + 1) + (size_t)in + 1, err);
    if (ws == NULL) return GDP_ERR_INVALID;
    float *xr = (float *)ws;
    int8_t *xq = (int8_t *)(xr + in + 1);
    rw_walk rows;
    int64_t R = rw_rows(&rows, x, x->ndim - 1, 1, &x);
    const int64_t xc = x->stride[x->ndim - 1];
    for (int64_t r = 0; r < R; r++, rw_next(&rows)) {
        for (int64_t k = 0; k < in; k++) xr[k] = (float)rw_ld(x, rows.off[0] + k * xc);
        float sx = 0;
        if (a8) {
            float amax = 0;
            for (int64_t k = 0; k < in; k++) amax = gdp_q8_amax(amax, xr[k]);
            sx = gdp_q8_scale(amax);
            for (int64_t k = 0; k < in; k++) xq[k] = gdp_q8(xr[k], sx);
        }
        for (int64_t n = 0; n < out; n++) {
            const int8_t *wr = wq + n * w->stride[0];
            const int64_t wc = w->stride[1];
            float sw = (float)rw_ld(s, n * s->stride[0]), v;
            double bias = b != NULL ? rw_ld(b, n * b->stride[0]) : 0.0;
            if (a8) {
                int64_t dot = 0;
                for (int64_t k = 0; k < in; k++) dot += (int64_t)xq[k] * wr[k * wc];
                v = gdp_q8_dequant(dot, sx, sw);
                if (b != NULL) v += (float)bias;
            } else {
                double acc = 0;
                for (int64_t k = 0; k < in; k++) acc += (double)xr[k] * wr[k * wc];
                v = (float)(acc * sw + bias);
            }
            y[r * out + n] = v;
        }
    }
    return GDP_OK;
}

static size_t q8_workspace(const gdp_node *node)
{
    int64_t in = node->in[1]->shape[1];
    return sizeof(float) * (size_t)(in + 1) + (size_t)in + 1;
}

/* 2 in per output element; the bias one more. */
static void q8_cost(const gdp_node *n, double *bytes, double *flops)
{
    double out = (double)gdp_numel(n->out[0]), in = (double)n->in[1]->shape[1];
    *bytes = gd_cost_io_bytes(n);
    *flops = 2.0 * out * in + (n->n_in > 3 ? out : 0);
}

static const char *const q8_cases[] = {
    "f[4,5] i8[3,5]<-127:128 f32[3]<0.001:0.02 f[3]",
    "f[4,5] i8[3,5]<-127:128 f32[3]<0.001:0.02",
    "f[2,3,7] i8[4,7]<-127:128 f32[4]<0.001:0.02 f[4]",
    "f[5] i8[3,5]<-127:128 f32[3]<0.001:0.02",
    "f[2,37] i8[29,37]<-127:128 f32[29]<0.001:0.02 f[29]", /* a few rows, K past a vector width: matrix-vector paths */
    "n[1,300] i8[40,300]<-127:128 f32[40]<0.001:0.02",     /* a decode step */
    "f[3,4] i8[2,4]<-127:128 f32[2]",     /* negative scales are still a product */
    "n[1,256] i8[40,256]<-127:128 f32[40]<0.001:0.02 f[40]", /* K in whole 16-byte pieces */
    "n[9,64] i8[24,64]<-127:128 f32[24]<0.001:0.02",        /* more rows than a tile */
    "n[2,4096] i8[12,4096]<-127:128 f32[12]<0.001:0.02",    /* rows of 4 KiB: split sums */
    NULL,
};

static const char *const w8a8_cases[] = {
    "f[4,5] i8[3,5]<-127:128 f32[3]<0.001:0.02 f[3]",
    "f[4,5] i8[3,5]<-127:128 f32[3]<0.001:0.02",
    "f[2,3,7] i8[4,7]<-127:128 f32[4]<0.001:0.02 f[4]",
    "f[5] i8[3,5]<-127:128 f32[3]<0.001:0.02",
    "f[2,37] i8[29,37]<-127:128 f32[29]<0.001:0.02 f[29]",
    "n[1,300] i8[40,300]<-127:128 f32[40]<0.001:0.02",
    "n[3,1000] i8[5,1000]<-127:128 f32[5]<0.001:0.02", /* dot products past 2^24: the conversion to f32 rounds */
    "n[1,256] i8[40,256]<-127:128 f32[40]<0.001:0.02 f[40]",
    "n[9,64] i8[24,64]<-127:128 f32[24]<0.001:0.02",
    "n[2,2048] i8[8,2048]<-127:128 f32[8]<0.001:0.02",
    NULL,
};

/* x, b and y in a half dtype beside the i8 weights and f32 scales */
static const char *const q8_mixed[] = {"bf16,i8,f32->bf16", "bf16,i8,f32,bf16->bf16", "f16,i8,f32->f16",
                                       "f16,i8,f32,f16->f16", NULL};
static const char *const q8_mixed_cases[] = {
    "bf16[4,5] i8[3,5]<-127:128 f32[3]<0.001:0.02 bf16[3]",
    "bf16[1,300] i8[40,300]<-127:128 f32[40]<0.001:0.02",
    "f16[4,5] i8[3,5]<-127:128 f32[3]<0.001:0.02 f16[3]",
    "f16[2,3,7] i8[4,7]<-127:128 f32[4]<0.001:0.02",
    "bf16[3,128] i8[24,128]<-127:128 f32[24]<0.001:0.02 bf16[24]",
    "f16[1,256] i8[40,256]<-127:128 f32[40]<0.001:0.02",
    NULL,
};

gd_tensor *gd_linear_q8(gd_tensor *x, gd_tensor *wq, gd_tensor *scale, gd_tensor *bias, int quantize_x)
{
    if (x == NULL || wq == NULL || scale == NULL) return NULL;
    gd_tensor *in[4] = {x, wq, scale, bias};
    return gd_op(gd_tensor_graph(x), quantize_x ? "linear_w8a8" : "linear_q8", bias != NULL ? 4 : 3, in, 0, NULL);
}

GD_FAMILY(quant)
{
    gd_register_op(r, &(gd_op_def){
        .name = "linear_q8", .min_in = 3, .max_in = 4, .n_out = 1, .attrs = "",
        .dtypes = GD_FLOATS, .infer = q8_infer, .ref = q8_ref, .ref_dtypes = GD_M(GDP_F32) | GD_M(GDP_I8),
        .cases = q8_cases, .mixed = q8_mixed, .mixed_cases = q8_mixed_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7, .cost = q8_cost,
        .ref_workspace = q8_workspace, .ref_strided = 1,
        .doc = "x (..., in), wq (out, in) i8, ws (out) f32 [b (out)] -> (x wq^T) ws + b: int8 weights, "
               "one scale per output channel"});
    gd_register_op(r, &(gd_op_def){
        .name = "linear_w8a8", .min_in = 3, .max_in = 4, .n_out = 1, .attrs = "",
        .dtypes = GD_FLOATS, .infer = q8_infer, .ref = q8_ref, .ref_dtypes = GD_M(GDP_F32) | GD_M(GDP_I8),
        .cases = w8a8_cases, .mixed = q8_mixed, .mixed_cases = q8_mixed_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-12, .cost = q8_cost,
        .ref_workspace = q8_workspace, .ref_strided = 1,
        .doc = "as linear_q8 with each row of x quantized to int8 too (scale max|x|/127, gradus_semantics.h): "
               "an exact integer dot product, then f32 (dot sx) ws + b"});
}
