/* attention.c — the transformer pieces: rotary position embedding (rope) and scaled
 * dot-product attention with grouped-query heads, a causal mask and a KV-cache offset,
 * with its backward op attention_grad.
 *
 * Small language models train through these reference kernels in CI, so attention works
 * on double copies of its operands with contiguous inner loops over the head dim; still
 * naive (one query row at a time, no tiling, no threads).
 */
#include "opdef.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int is_float_dtype(int32_t dt) { return dt == GDP_F32 || dt == GDP_F16 || dt == GDP_BF16 || dt == GDP_F64; }

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

/* The tensor as doubles: f64 data is used in place, anything else is converted into a
 * buffer the caller frees (*owned). NULL when out of memory. */
static const double *as_f64(const gdp_tensor *t, double **owned)
{
    *owned = NULL;
    if (t->dtype == GDP_F64) return t->data;
    int64_t n = gdp_numel(t);
    double *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    if (d == NULL) return NULL;
    if (t->dtype == GDP_F32) {
        const float *f = t->data;
        for (int64_t i = 0; i < n; i++) d[i] = f[i];
    } else {
        for (int64_t i = 0; i < n; i++) d[i] = gd_ref_load(t, i);
    }
    *owned = d;
    return d;
}

/* ---- rope --------------------------------------------------------------------------- */

static int rope_infer(gd_infer *c)
{
    const gd_shape *x = &c->in[0];
    char xs[200];
    gd_shape_str(x, xs, sizeof xs);
    if (!is_float_dtype(x->dtype))
        return gd_infer_fail(c, "x %s must be a float tensor", xs);
    if (x->ndim != 4) return gd_infer_fail(c, "x %s must be 4-D (B, T, H, D)", xs);
    if (x->dim[3] % 2 != 0)
        return gd_infer_fail(c, "x %s: the head dim D = %lld must be even", xs, (long long)x->dim[3]);
    double theta = gdp_attr_float(c->attrs, "theta", 10000.0);
    if (!(theta > 0)) return gd_infer_fail(c, "theta %g must be positive", theta);
    c->out[0] = *x;
    return 0;
}

/* Rotates each pair (x0, x1) of each head by the angle (t + pos_offset) * theta^(-2i/D):
 *     y0 = x0 cos - x1 sin,   y1 = x0 sin + x1 cos.
 * The pair i is (2i, 2i+1) when interleaved (llama2.c, Meta) and (i, i + D/2) otherwise
 * (Hugging Face). inverse = 1 rotates by minus the angle: the transpose, hence the
 * gradient. */
static gdp_status rope_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *x = &node->in[0], *y = &node->out[0];
    int64_t B = x->shape[0], T = x->shape[1], H = x->shape[2], D = x->shape[3], half = D / 2;
    double theta = gdp_attr_float(&node->attrs, "theta", 10000.0);
    int interleaved = gdp_attr_int(&node->attrs, "interleaved", 1) != 0;
    int64_t pos_offset = gdp_attr_int(&node->attrs, "pos_offset", 0);
    double sign = gdp_attr_int(&node->attrs, "inverse", 0) ? -1.0 : 1.0;

    double *cs = malloc((size_t)(half > 0 ? 2 * half : 1) * sizeof *cs); // cos, sin per pair
    if (cs == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "no memory for %lld angles", (long long)half);
    for (int64_t t = 0; t < T; t++) {
        double pos = (double)(t + pos_offset);
        for (int64_t i = 0; i < half; i++) {
            double angle = pos * pow(theta, -2.0 * (double)i / (double)D);
            cs[2 * i] = cos(angle);
            cs[2 * i + 1] = sign * sin(angle);
        }
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++) {
                int64_t base = ((b * T + t) * H + h) * D; // x[b, t, h, :]
                for (int64_t i = 0; i < half; i++) {
                    int64_t i0 = interleaved ? base + 2 * i : base + i;
                    int64_t i1 = interleaved ? i0 + 1 : i0 + half;
                    double x0 = load(x, i0), x1 = load(x, i1), c = cs[2 * i], s = cs[2 * i + 1];
                    store(y, i0, x0 * c - x1 * s);
                    store(y, i1, x0 * s + x1 * c);
                }
            }
    }
    free(cs);
    return GDP_OK;
}

static gd_status rope_grad(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_attr a[4] = {
        gd_attr_f("theta", gdp_attr_float(c->attrs, "theta", 10000.0)),
        gd_attr_i("interleaved", gdp_attr_int(c->attrs, "interleaved", 1)),
        gd_attr_i("pos_offset", gdp_attr_int(c->attrs, "pos_offset", 0)),
        gd_attr_i("inverse", !gdp_attr_int(c->attrs, "inverse", 0)),
    };
    c->din[0] = gd_op1(c->dout[0], "rope", 4, a);
    return c->din[0] != NULL ? GD_OK : GD_ERR_INVALID;
}

gd_tensor *gd_rope(gd_tensor *x, double theta, int interleaved, int64_t pos_offset)
{
    gd_attr a[3] = {gd_attr_f("theta", theta), gd_attr_i("interleaved", interleaved != 0),
                    gd_attr_i("pos_offset", pos_offset)};
    return gd_op1(x, "rope", 3, a);
}

static const char *const rope_cases[] = {
    "f[1,3,2,4]",
    "f[2,4,3,8] | interleaved=0",
    "f[1,2,1,6] | interleaved=1 pos_offset=5 theta=500",
    "f[2,3,2,4] | interleaved=0 pos_offset=3 inverse=1",
    "f[1,5,2,2] | interleaved=1 inverse=1",
    NULL};

/* ---- attention ---------------------------------------------------------------------- */

/* Checks q (B, H, T, D), k and v (B, Hkv, S, D) with H a multiple of Hkv, all of one
 * float dtype. */
static int attention_check(gd_infer *c, const gd_shape *q, const gd_shape *k, const gd_shape *v)
{
    char qs[200], ks[200], vs[200];
    gd_shape_str(q, qs, sizeof qs);
    gd_shape_str(k, ks, sizeof ks);
    gd_shape_str(v, vs, sizeof vs);
    if (!is_float_dtype(q->dtype))
        return gd_infer_fail(c, "q %s must be a float tensor", qs);
    if (k->dtype != q->dtype || v->dtype != q->dtype)
        return gd_infer_fail(c, "q, k and v must have one dtype: q is %s, k is %s, v is %s",
                             gd_dtype_name((gd_dtype)q->dtype), gd_dtype_name((gd_dtype)k->dtype),
                             gd_dtype_name((gd_dtype)v->dtype));
    if (q->ndim != 4) return gd_infer_fail(c, "q %s must be 4-D (B, H, T, D)", qs);
    if (k->ndim != 4) return gd_infer_fail(c, "k %s must be 4-D (B, Hkv, S, D)", ks);
    int same_kv = v->ndim == 4;
    for (int i = 0; same_kv && i < 4; i++) same_kv = v->dim[i] == k->dim[i];
    if (!same_kv) return gd_infer_fail(c, "v %s must have the shape of k %s", vs, ks);
    if (k->dim[0] != q->dim[0]) return gd_infer_fail(c, "k %s and q %s differ in batch size", ks, qs);
    if (k->dim[3] != q->dim[3]) return gd_infer_fail(c, "k %s and q %s differ in head dim", ks, qs);
    if (k->dim[1] < 1 || q->dim[1] % k->dim[1] != 0)
        return gd_infer_fail(c, "the heads of q %s (%lld) must be a multiple of the heads of k %s (%lld)", qs,
                             (long long)q->dim[1], ks, (long long)k->dim[1]);
    return 0;
}

static int attention_infer(gd_infer *c)
{
    int rc = attention_check(c, &c->in[0], &c->in[1], &c->in[2]);
    if (rc != 0) return rc;
    c->out[0] = c->in[0];
    return 0;
}

typedef struct attn_dims {
    int64_t B, H, T, D, Hkv, S;
    int causal;
    double scale;
} attn_dims;

static attn_dims attn_dims_of(const gdp_node *node, const gdp_tensor *q, const gdp_tensor *k)
{
    attn_dims a = {q->shape[0], q->shape[1], q->shape[2], q->shape[3], k->shape[1], k->shape[2], 0, 0};
    a.causal = gdp_attr_int(&node->attrs, "causal", 0) != 0;
    a.scale = gdp_attr_float(&node->attrs, "scale", 0.0);
    if (!(a.scale > 0)) a.scale = 1.0 / sqrt((double)a.D);
    return a;
}

/* Softmax of the scaled scores of query row qt against keys kh (S, D) into p; returns how
 * many keys the query sees (a prefix: causal query t sees s <= t + S - T, so the last
 * query row lines up with the last key when a KV cache makes S > T). Zero visible keys
 * (causal with S < T) leave the row out: its output and gradients are zero. */
static int64_t attn_probs(const attn_dims *a, int64_t t, const double *qt, const double *kh, double *p)
{
    int64_t n = a->S;
    if (a->causal) {
        int64_t last = t + a->S - a->T;
        n = last + 1 < 0 ? 0 : last + 1 > a->S ? a->S : last + 1;
    }
    double m = -INFINITY;
    for (int64_t s = 0; s < n; s++) {
        const double *ks = kh + s * a->D;
        double dot = 0;
        for (int64_t d = 0; d < a->D; d++) dot += qt[d] * ks[d];
        p[s] = a->scale * dot;
        if (p[s] > m) m = p[s];
    }
    double sum = 0;
    for (int64_t s = 0; s < n; s++) {
        p[s] = exp(p[s] - m);
        sum += p[s];
    }
    for (int64_t s = 0; s < n; s++) p[s] /= sum;
    return n;
}

/* out[b, h, t] = sum_s softmax_s(scale q[b, h, t] . k[b, h/G, s]) v[b, h/G, s], G = H/Hkv. */
static gdp_status attention_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *y = &node->out[0];
    attn_dims a = attn_dims_of(node, &node->in[0], &node->in[1]);
    int64_t group = a.H / a.Hkv;
    double *own[3];
    const double *Q = as_f64(&node->in[0], &own[0]); // (B, H, T, D)
    const double *K = as_f64(&node->in[1], &own[1]); // (B, Hkv, S, D)
    const double *V = as_f64(&node->in[2], &own[2]); // (B, Hkv, S, D)
    double *p = malloc((size_t)(a.S + a.D + 1) * sizeof *p), *o = p + a.S;
    gdp_status st = GDP_OK;
    if (Q == NULL || K == NULL || V == NULL || p == NULL) {
        st = gdp_fail(err, GDP_ERR_NOMEM, "no memory for double copies of q, k, v");
        goto done;
    }
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t h = 0; h < a.H; h++) {
            const double *kh = K + (b * a.Hkv + h / group) * a.S * a.D; // (S, D)
            const double *vh = V + (b * a.Hkv + h / group) * a.S * a.D; // (S, D)
            for (int64_t t = 0; t < a.T; t++) {
                int64_t row = ((b * a.H + h) * a.T + t) * a.D;
                int64_t n = attn_probs(&a, t, Q + row, kh, p);
                for (int64_t d = 0; d < a.D; d++) o[d] = 0;
                for (int64_t s = 0; s < n; s++)
                    for (int64_t d = 0; d < a.D; d++) o[d] += p[s] * vh[s * a.D + d];
                for (int64_t d = 0; d < a.D; d++) store(y, row + d, o[d]);
            }
        }
done:
    for (int i = 0; i < 3; i++) free(own[i]);
    free(p);
    return st;
}

static gd_status attention_grad(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_tensor *in[4] = {c->dout[0], c->in[0], c->in[1], c->in[2]};
    gd_attr a[2] = {gd_attr_i("causal", gdp_attr_int(c->attrs, "causal", 0)),
                    gd_attr_f("scale", gdp_attr_float(c->attrs, "scale", 0.0))};
    gd_tensor *out[3] = {NULL, NULL, NULL};
    gd_status st = gd_op_multi(c->g, "attention_grad", 4, in, 2, a, 3, out);
    if (st != GD_OK) return st;
    for (int i = 0; i < 3; i++) c->din[i] = out[i];
    return GD_OK;
}

gd_tensor *gd_attention(gd_tensor *q, gd_tensor *k, gd_tensor *v, int causal, double scale)
{
    if (q == NULL || k == NULL || v == NULL) return NULL;
    gd_tensor *in[3] = {q, k, v};
    gd_attr a[2] = {gd_attr_i("causal", causal != 0), gd_attr_f("scale", scale)};
    return gd_op(gd_tensor_graph(q), "attention", 3, in, 2, a);
}

static const char *const attention_cases[] = {
    "f[1,2,3,4] f[1,2,3,4] f[1,2,3,4]",
    "f[2,2,4,4] f[2,2,4,4] f[2,2,4,4] | causal=1",
    "f[1,4,3,8] f[1,2,5,8] f[1,2,5,8] | causal=1",
    "f[1,2,2,4] f[1,1,6,4] f[1,1,6,4] | causal=0 scale=0.5",
    "f[2,1,1,4] f[2,1,7,4] f[2,1,7,4] | causal=1",
    "n[1,1,5,2] n[1,1,5,2] n[1,1,5,2] | causal=1 scale=2",
    NULL};

/* ---- attention_grad: (dy, q, k, v) -> dq, dk, dv ------------------------------------- */

static int attention_grad_infer(gd_infer *c)
{
    int rc = attention_check(c, &c->in[1], &c->in[2], &c->in[3]);
    if (rc != 0) return rc;
    const gd_shape *dy = &c->in[0], *q = &c->in[1];
    int ok = dy->dtype == q->dtype && dy->ndim == q->ndim;
    for (int i = 0; ok && i < q->ndim; i++) ok = dy->dim[i] == q->dim[i];
    if (!ok) {
        char ds[200], qs[200];
        gd_shape_str(dy, ds, sizeof ds);
        gd_shape_str(q, qs, sizeof qs);
        return gd_infer_fail(c, "dy %s must have the shape and dtype of q %s", ds, qs);
    }
    c->out[0] = c->in[1];
    c->out[1] = c->in[2];
    c->out[2] = c->in[3];
    return 0;
}

/* With P the softmax rows, O = P V and dO = dy, per query row t:
 *     dv[s] += P[t,s] dy[t]
 *     dP[t,s] = dy[t] . v[s]
 *     dS[t,s] = P[t,s] (dP[t,s] - sum_s' P[t,s'] dP[t,s'])
 *     dq[t]   = scale sum_s dS[t,s] k[s]
 *     dk[s]  += scale dS[t,s] q[t]
 * The softmax is recomputed from q and k. dk and dv sum over the query heads of a group
 * and over t in one fixed order (b, h, t ascending): deterministic. */
static gdp_status attention_grad_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *dq = &node->out[0], *dk = &node->out[1], *dv = &node->out[2];
    attn_dims a = attn_dims_of(node, &node->in[1], &node->in[2]);
    int64_t group = a.H / a.Hkv, nkv = a.B * a.Hkv * a.S * a.D;
    double *own[4];
    const double *dY = as_f64(&node->in[0], &own[0]); // (B, H, T, D)
    const double *Q = as_f64(&node->in[1], &own[1]);  // (B, H, T, D)
    const double *K = as_f64(&node->in[2], &own[2]);  // (B, Hkv, S, D)
    const double *V = as_f64(&node->in[3], &own[3]);  // (B, Hkv, S, D)
    double *dK = calloc((size_t)(2 * nkv + 1), sizeof *dK), *dV = dK + nkv;
    double *p = malloc((size_t)(2 * a.S + a.D + 1) * sizeof *p), *dp = p + a.S, *g = dp + a.S;
    gdp_status st = GDP_OK;
    if (dY == NULL || Q == NULL || K == NULL || V == NULL || dK == NULL || p == NULL) {
        st = gdp_fail(err, GDP_ERR_NOMEM, "no memory for double copies of dy, q, k, v");
        goto done;
    }
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t h = 0; h < a.H; h++) {
            int64_t kv = (b * a.Hkv + h / group) * a.S * a.D;
            const double *kh = K + kv, *vh = V + kv; // (S, D)
            double *dkh = dK + kv, *dvh = dV + kv;   // (S, D)
            for (int64_t t = 0; t < a.T; t++) {
                int64_t row = ((b * a.H + h) * a.T + t) * a.D;
                const double *qt = Q + row, *dyt = dY + row;
                int64_t n = attn_probs(&a, t, qt, kh, p);
                double pdp = 0;
                for (int64_t s = 0; s < n; s++) {
                    double dot = 0;
                    for (int64_t d = 0; d < a.D; d++) dot += dyt[d] * vh[s * a.D + d];
                    dp[s] = dot;
                    pdp += p[s] * dot;
                }
                for (int64_t d = 0; d < a.D; d++) g[d] = 0; // dq[t]
                for (int64_t s = 0; s < n; s++) {
                    double ds = a.scale * p[s] * (dp[s] - pdp);
                    for (int64_t d = 0; d < a.D; d++) {
                        g[d] += ds * kh[s * a.D + d];
                        dkh[s * a.D + d] += ds * qt[d];
                        dvh[s * a.D + d] += p[s] * dyt[d];
                    }
                }
                for (int64_t d = 0; d < a.D; d++) store(dq, row + d, g[d]);
            }
        }
    for (int64_t i = 0; i < nkv; i++) {
        store(dk, i, dK[i]);
        store(dv, i, dV[i]);
    }
done:
    for (int i = 0; i < 4; i++) free(own[i]);
    free(dK);
    free(p);
    return st;
}

static const char *const attention_grad_cases[] = {
    "f[1,2,3,4] f[1,2,3,4] f[1,2,3,4] f[1,2,3,4]",
    "f[2,2,4,4] f[2,2,4,4] f[2,2,4,4] f[2,2,4,4] | causal=1",
    "f[1,4,3,8] f[1,4,3,8] f[1,2,5,8] f[1,2,5,8] | causal=1",
    "f[1,2,2,4] f[1,2,2,4] f[1,1,6,4] f[1,1,6,4] | scale=0.5",
    "f[2,1,1,4] f[2,1,1,4] f[2,1,7,4] f[2,1,7,4] | causal=1",
    NULL};

/* ---- registration ------------------------------------------------------------------- */

GD_FAMILY(attention)
{
    gd_register_op(r, &(gd_op_def){
        .name = "rope", .min_in = 1, .max_in = 1, .n_out = 1,
        .attrs = "theta:float interleaved:int pos_offset:int inverse:int",
        .dtypes = GD_FLOATS, .infer = rope_infer, .grad = rope_grad, .ref = rope_ref,
        .cases = rope_cases, .inplace = {-1, -1, -1, -1},
        // a backend computing the angle (t + pos_offset) * freq in f32 is off by ~1e-7 of it
        .tol = 1e-8,
        .doc = "rotary position embedding of x (B, T, H, D): pairs (2i, 2i+1) or (i, i + D/2) rotated "
               "by (t + pos_offset) * theta^(-2i/D); inverse=1 rotates back"});
    gd_register_op(r, &(gd_op_def){
        .name = "attention", .min_in = 3, .max_in = 3, .n_out = 1, .attrs = "causal:int scale:float",
        .dtypes = GD_FLOATS, .infer = attention_infer, .grad = attention_grad, .ref = attention_ref,
        .cases = attention_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .doc = "softmax(scale q k^T [causal mask]) v; q (B, H, T, D), k, v (B, Hkv, S, D), H % Hkv == 0; "
               "causal: query t sees keys s <= t + S - T; scale <= 0: 1/sqrt(D)"});
    gd_register_op(r, &(gd_op_def){
        .name = "attention_grad", .min_in = 4, .max_in = 4, .n_out = 3, .attrs = "causal:int scale:float",
        .dtypes = GD_FLOATS, .infer = attention_grad_infer, .grad = NULL, .ref = attention_grad_ref,
        .cases = attention_grad_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .doc = "backward of attention: (dy, q, k, v) -> (dq, dk, dv), softmax recomputed"});
}
