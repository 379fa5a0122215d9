/* matmul_ref.h — what the reference products share (matmul.c, matmul_multi.c): operands
 * packed into double rows, a row's product in double, rounding as a dtype stores it, the
 * activations of the fused forms, and linear's rows. */
#ifndef GRADUS_MATMUL_REF_H
#define GRADUS_MATMUL_REF_H

#include "refwalk.h"

#include <math.h>

/* dst (R, C) = the matrix of t at element offset `off` whose rows are `sr` apart and whose
 * columns are `sc` apart — or, when trans, the transpose of the (C, R) matrix stored so.
 * Any strides: an operand may be a transposed, sliced or broadcast view. */
static inline void pack(const gdp_tensor *t, int64_t off, int64_t sr, int64_t sc, int trans, int64_t R, int64_t C,
                        double *dst)
{
    if (!trans && sc == 1 && t->dtype == GDP_F32) { // rows of contiguous floats: the usual case
        for (int64_t i = 0; i < R; i++) {
            const float *p = (const float *)t->data + off + i * sr;
            for (int64_t j = 0; j < C; j++) dst[i * C + j] = p[j];
        }
        return;
    }
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++)
            dst[i * C + j] = rw_ld(t, off + (trans ? j * sr + i * sc : i * sr + j * sc));
}

/* v as a tensor of dtype dt stores it: f16 and bf16 through f32, as gd_ref_store rounds
 * (and as the core's f32 run of a reference kernel rounds back). */
static inline double stored_as(int32_t dt, double v)
{
    switch (dt) {
    case GDP_F64: return v;
    case GDP_F16: return gdp_f16_to_f32(gdp_f32_to_f16((float)v));
    case GDP_BF16: return gdp_bf16_to_f32(gdp_f32_to_bf16((float)v));
    default: return (float)v;
    }
}

static inline void store_row(const gdp_tensor *t, int64_t off, int64_t n, const double *src)
{
    if (t->dtype == GDP_F32) {
        float *p = (float *)t->data + off;
        for (int64_t j = 0; j < n; j++) p[j] = (float)src[j];
    } else {
        for (int64_t j = 0; j < n; j++) rw_st(t, off + j, src[j]);
    }
}

/* acc (N) += a (K) @ B (K, N): one output row; B and acc stream through cache. */
static inline void gemm_row(int64_t K, int64_t N, const double *a, const double *B, double *acc)
{
    for (int64_t k = 0; k < K; k++) {
        double av = a[k];
        const double *b = B + k * N;
        for (int64_t j = 0; j < N; j++) acc[j] += av * b[j];
    }
}

/* Activations of linear_act; the numbering is part of the op's definition. */
enum { ACT_NONE = 0, ACT_RELU = 1, ACT_GELU_TANH = 2, ACT_GELU = 3, ACT_SILU = 4 };

/* The same formulas as the standalone activations (activation.c), so that a fused node
 * and the unfused pair it replaces agree. */
static inline double act_apply(int act, double z)
{
    switch (act) {
    case ACT_RELU: return z < 0 ? 0 : z; // NaN passes through
    case ACT_GELU_TANH: return 0.5 * z * (1 + tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)));
    case ACT_GELU: return 0.5 * z * (1 + erf(z * 0.7071067811865476));
    case ACT_SILU: {
        // z * sigmoid(z) without forming exp of a large positive number
        double e = exp(-fabs(z));
        return z >= 0 ? z / (1 + e) : z * e / (1 + e);
    }
    default: return z;
    }
}

/* The derivative of the gelu forms, as activation.c's gelu_grad computes it. */
static inline double act_deriv(int act, double z)
{
    if (act == ACT_GELU_TANH) {
        double t = tanh(0.7978845608028654 * (z + 0.044715 * z * z * z));
        return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * z * z);
    }
    return 0.5 * (1 + erf(z * 0.7071067811865476)) + z * 0.3989422804014327 * exp(-0.5 * z * z);
}

/* Scratch of linear: W^T (in, out), the bias, one row of x, one output row. */
static inline size_t ws_linear(const gdp_node *node)
{
    int64_t in = node->in[0]->shape[node->in[0]->ndim - 1], out = node->out[0]->shape[node->out[0]->ndim - 1];
    return rw_doubles(in * out) + rw_doubles(out) + rw_doubles(in) + rw_doubles(out);
}

/* y (R, out) = act(x (R, in) @ W^T + b) [+ r] into the scratch ws (ws_linear), accumulated
 * in double and rounded once to y's dtype — except with a residual r (y's shape): then the
 * product is rounded first, as linear stores it, and r added to that and rounded again, as
 * add does. Any float dtype: every value is read and stored with its dtype's rounding
 * (rw_ld, rw_st), which is also what the core's f32 run of f16/bf16 operands gives. */
static inline void linear_rows(const gdp_tensor *x, const gdp_tensor *w, const gdp_tensor *b, const gdp_tensor *r,
                        const gdp_tensor *y, int act, int wio, char *ws)
{
    int64_t in = x->shape[x->ndim - 1], out = y->shape[y->ndim - 1];
    double *wt = (double *)ws;                                   // (in, out)
    double *bias = (double *)(ws + rw_doubles(in * out));
    double *xr = (double *)(ws + rw_doubles(in * out) + rw_doubles(out));
    double *acc = (double *)(ws + rw_doubles(in * out) + rw_doubles(out) + rw_doubles(in));
    pack(w, 0, w->stride[0], w->stride[1], !wio, in, out, wt);
    if (b != NULL) pack(b, 0, 0, b->stride[0], 0, 1, out, bias);
    else
        for (int64_t j = 0; j < out; j++) bias[j] = 0;
    // the rows of x (and of r) along the last axis, whatever their strides
    rw_walk rows;
    const gdp_tensor *walked[2] = {x, r};
    int64_t R = rw_rows(&rows, x, x->ndim - 1, r != NULL ? 2 : 1, walked);
    const int64_t xc = x->stride[x->ndim - 1], rc = r != NULL ? r->stride[r->ndim - 1] : 0;
    for (int64_t i = 0; i < R; i++, rw_next(&rows)) {
        pack(x, rows.off[0], 0, xc, 0, 1, in, xr);
        for (int64_t j = 0; j < out; j++) acc[j] = bias[j];
        gemm_row(in, out, xr, wt, acc);
        if (act != ACT_NONE)
            for (int64_t j = 0; j < out; j++) acc[j] = act_apply(act, acc[j]);
        if (r != NULL)
            for (int64_t j = 0; j < out; j++) acc[j] = stored_as(y->dtype, acc[j]) + rw_ld(r, rows.off[1] + j * rc);
        store_row(y, i * out, out, acc);
    }
}

#endif
