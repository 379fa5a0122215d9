/* attention.c — the transformer pieces: rotary position embedding (rope), scaled
 * dot-product attention with grouped-query heads, a causal mask and a valid key length
 * (a KV cache), its backward op attention_grad, and cache_write, which updates a KV
 * cache in place at a position.
 *
 * Positions and lengths are scalar tensors (i32 or i64) read when the program runs, not
 * attributes: a decoder moves them on every step without recompiling.
 *
 * Small language models train through these reference kernels in CI, so attention works
 * on double copies of its operands (gathered from any strides into the node's workspace)
 * with contiguous inner loops over the head dim; still naive (one query row at a time, no
 * tiling, no threads).
 */
#include "attention_ref.h"
#include "cost.h"

#include <math.h>
#include <string.h>

static int is_float_dtype(int32_t dt) { return dt == GDP_F32 || dt == GDP_F16 || dt == GDP_BF16 || dt == GDP_F64; }


/* Fails c unless input k is an integer scalar or a vector of one per batch row (B of
 * them): a decoder's batch whose sequences stand at different positions. */
int gd_index_per_row(gd_infer *c, int k, const char *name, int64_t B)
{
    const gd_shape *s = &c->in[k];
    if (gdp_is_index(s->dtype) && (gd_shape_numel(s) == 1 || (s->ndim == 1 && s->dim[0] == B))) return 0;
    char b[96];
    return gd_infer_fail(c, "%s must be an i32 or i64 scalar or [%lld] (one per batch row), got %s", name, (long long)B,
                         gd_shape_str(s, b, sizeof b));
}

/* Input k's value for batch row b: the scalar, or element b. */
int64_t gd_row_value(const gdp_node *node, int k, int64_t b)
{
    const gdp_tensor *t = node->in[k];
    return (int64_t)gd_ref_load(t, gdp_numel(t) == 1 ? 0 : b);
}

/* ---- rope --------------------------------------------------------------------------- */

static int rope_infer(gd_infer *c)
{
    const gd_shape *x = &c->in[0];
    if (c->n_in > 1 && gd_index_per_row(c, 1, "pos", x->ndim > 0 ? x->dim[0] : 1)) return 1;
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

/* Rotates each pair (x0, x1) of each head by the angle (t + pos) * theta^(-2i/D):
 *     y0 = x0 cos - x1 sin,   y1 = x0 sin + x1 cos.
 * The pair i is (2i, 2i+1) when interleaved (llama2.c, Meta) and (i, i + D/2) otherwise
 * (Hugging Face). inverse = 1 rotates by minus the angle: the transpose, hence the
 * gradient. */
static gdp_status rope_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *x = node->in[0], *y = node->out[0];
    int64_t B = x->shape[0], T = x->shape[1], H = x->shape[2], D = x->shape[3], half = D / 2;
    double theta = gdp_attr_float(&node->attrs, "theta", 10000.0);
    int interleaved = gdp_attr_int(&node->attrs, "interleaved", 1) != 0;
    double sign = gdp_attr_int(&node->attrs, "inverse", 0) ? -1.0 : 1.0;
    double *cs = rw_workspace(node, rw_doubles(2 * half), err); // cos, sin per pair
    if (cs == NULL) return GDP_ERR_INVALID;
    const int64_t sb = x->stride[0], st = x->stride[1], sh = x->stride[2], sd = x->stride[3];
    for (int64_t b = 0; b < B; b++) {
        int64_t pos_offset = node->n_in > 1 ? gd_row_value(node, 1, b) : 0; /* a position per row, or one for all */
        for (int64_t t = 0; t < T; t++) {
            double pos = (double)(t + pos_offset);
            for (int64_t i = 0; i < half; i++) {
                double angle = pos * pow(theta, -2.0 * (double)i / (double)D);
                cs[2 * i] = cos(angle);
                cs[2 * i + 1] = sign * sin(angle);
            }
            for (int64_t h = 0; h < H; h++) {
                int64_t out = ((b * T + t) * H + h) * D, in = b * sb + t * st + h * sh; // [b, t, h, :]
                for (int64_t i = 0; i < half; i++) {
                    int64_t j0 = interleaved ? 2 * i : i, j1 = interleaved ? j0 + 1 : j0 + half;
                    double x0 = rw_ld(x, in + j0 * sd), x1 = rw_ld(x, in + j1 * sd), c = cs[2 * i], s = cs[2 * i + 1];
                    rw_st(y, out + j0, x0 * c - x1 * s);
                    rw_st(y, out + j1, x0 * s + x1 * c);
                }
            }
        }
    }
    return GDP_OK;
}

/* Scratch: the cosine and sine of each pair's angle at one step. */
static size_t ws_rope(const gdp_node *node) { return rw_doubles(node->in[0]->shape[3]); }

static gd_status rope_grad(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_attr a[3] = {
        gd_attr_f("theta", gdp_attr_float(c->attrs, "theta", 10000.0)),
        gd_attr_i("interleaved", gdp_attr_int(c->attrs, "interleaved", 1)),
        gd_attr_i("inverse", !gdp_attr_int(c->attrs, "inverse", 0)),
    };
    gd_tensor *in[2] = {c->dout[0], c->n_in > 1 ? c->in[1] : NULL};
    c->din[0] = gd_op(c->g, "rope", c->n_in, in, 3, a);
    return c->din[0] != NULL ? GD_OK : GD_ERR_INVALID;
}

gd_tensor *gd_rope(gd_tensor *x, double theta, int interleaved, gd_tensor *pos)
{
    if (x == NULL) return NULL;
    gd_attr a[2] = {gd_attr_f("theta", theta), gd_attr_i("interleaved", interleaved != 0)};
    gd_tensor *in[2] = {x, pos};
    return gd_op(gd_tensor_graph(x), "rope", pos != NULL ? 2 : 1, in, 2, a);
}

static const char *const rope_cases[] = {
    "f[1,3,2,4]",
    "f[2,4,3,8] | interleaved=0",
    "f[1,2,1,6] i64[]<5:6 | interleaved=1 theta=500",
    "f[2,3,2,4] i32[]<3:4 | interleaved=0 inverse=1",
    "f[1,5,2,2] | interleaved=1 inverse=1",
    "f[3,2,2,4] i32[3]<0:9 | interleaved=0", /* a decoder's batch: a position per sequence */
    /* decode steps: one row per sequence, llama-sized heads, far-off positions */
    "f[3,1,4,64] i32[3]<0:200",
    "f[2,1,6,64] i64[]<100:300 | interleaved=0 inverse=1",
    /* longer runs (a backend may share each position's angles across heads) */
    "f[2,6,3,8] i32[2]<0:50 | interleaved=0", /* a batch prefilled from its own positions */
    "f[1,9,2,64] i64[]<0:100",
    "f[2,20,4,64] | interleaved=0",
    "f[2,7,8,32] i32[2]<0:50", /* interleaved, heads by fours, a position per sequence */
    "n[2,20,4,64] i32[2]<0:50 | interleaved=0", /* half-precision rows of 16-byte pieces */
    "n[1,9,2,64] | interleaved=1 inverse=1",
    "n[2,6,3,8] | interleaved=0", /* f16/bf16 half-rows of 8 bytes: no whole pieces */
    NULL};

/* ---- attention ---------------------------------------------------------------------- */

/* Checks q (B, H, T, D), k and v (B, Hkv, S, D) with H a multiple of Hkv, all of one
 * float dtype. */
int gd_attention_check(gd_infer *c, const gd_shape *q, const gd_shape *k, const gd_shape *v)
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
    int rc = gd_attention_check(c, &c->in[0], &c->in[1], &c->in[2]);
    if (rc != 0) return rc;
    if (c->n_in > 3 && gd_index_per_row(c, 3, "kv_len", c->in[0].dim[0])) return 1;
    c->out[0] = c->in[0];
    return 0;
}

/* a->L for batch row b: kv_len (input len_at, a scalar or one per row) when the node has
 * it, which must lie in [0, S]; else S. */
gdp_status gd_attn_len_of(const gdp_node *node, int len_at, int64_t b, gd_attn_dims *a, gdp_err *err)
{
    if (node->n_in <= len_at) return GDP_OK;
    a->L = gd_row_value(node, len_at, b);
    if (a->L < 0 || a->L > a->S)
        return gdp_fail(err, GDP_ERR_INVALID, "kv_len = %lld (batch row %lld) is outside [0, %lld], the keys k has",
                        (long long)a->L, (long long)b, (long long)a->S);
    return GDP_OK;
}

/* kv_len is input `len_at` when the node has it; it must lie in [0, S]. */
gdp_status gd_attn_dims_of(const gdp_node *node, const gdp_tensor *q, const gdp_tensor *k, int len_at,
                           gd_attn_dims *a, gdp_err *err)
{
    *a = (gd_attn_dims){q->shape[0], q->shape[1], q->shape[2], q->shape[3], k->shape[1], k->shape[2], k->shape[2], 0, 0};
    a->causal = gdp_attr_int(&node->attrs, "causal", 0) != 0;
    a->scale = gdp_attr_float(&node->attrs, "scale", 0.0);
    if (!(a->scale > 0)) a->scale = 1.0 / sqrt((double)a->D);
    return gd_attn_len_of(node, len_at, 0, a, err); /* row 0's; the kernels set each row's */
}

/* Softmax of the scaled scores of query row qt against keys kh (S, D) into p; returns how
 * many keys the query sees: a prefix of the L valid ones, and with causal, query t sees
 * s <= t + L - T (the last query row lines up with the last valid key, as in a decoder
 * whose cache holds L keys). Zero visible keys leave the row out: its output and
 * gradients are zero. */
int64_t gd_attn_visible(const gd_attn_dims *a, int64_t t)
{
    if (!a->causal) return a->L;
    int64_t last = t + a->L - a->T;
    return last + 1 < 0 ? 0 : last + 1 > a->L ? a->L : last + 1;
}

int64_t gd_attn_probs(const gd_attn_dims *a, int64_t t, const double *qt, const double *kh, double *p, double *lse)
{
    const int64_t n = gd_attn_visible(a, t);
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
    if (lse != NULL) *lse = n > 0 ? m + log(sum) : 0.0;
    return n;
}

/* Scratch of attention: q, k, v as contiguous doubles, a row of probabilities, an
 * output row. */
static size_t ws_attention(const gdp_node *node)
{
    const gdp_tensor *q = node->in[0], *k = node->in[1];
    return rw_doubles(gdp_numel(q)) + 2 * rw_doubles(gdp_numel(k)) + rw_doubles(k->shape[2]) + rw_doubles(q->shape[3]);
}

/* out[b, h, t] = sum_s softmax_s(scale q[b, h, t] . k[b, h/G, s]) v[b, h/G, s], G = H/Hkv. */
static gdp_status attention_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *y = node->out[0];
    gd_attn_dims a;
    if (gd_attn_dims_of(node, node->in[0], node->in[1], 3, &a, err) != GDP_OK) return GDP_ERR_INVALID;
    int64_t group = a.H / a.Hkv;
    char *ws = rw_workspace(node, ws_attention(node), err);
    if (ws == NULL) return GDP_ERR_INVALID;
    double *Q = gd_attn_take(&ws, gdp_numel(node->in[0])); // (B, H, T, D)
    double *K = gd_attn_take(&ws, gdp_numel(node->in[1])); // (B, Hkv, S, D)
    double *V = gd_attn_take(&ws, gdp_numel(node->in[2])); // (B, Hkv, S, D)
    double *p = gd_attn_take(&ws, a.S), *o = gd_attn_take(&ws, a.D);
    rw_gather(node->in[0], Q);
    rw_gather(node->in[1], K);
    rw_gather(node->in[2], V);
    for (int64_t b = 0; b < a.B; b++) {
        if (gd_attn_len_of(node, 3, b, &a, err) != GDP_OK) return GDP_ERR_INVALID;
        for (int64_t h = 0; h < a.H; h++) {
            const double *kh = K + (b * a.Hkv + h / group) * a.S * a.D; // (S, D)
            const double *vh = V + (b * a.Hkv + h / group) * a.S * a.D; // (S, D)
            for (int64_t t = 0; t < a.T; t++) {
                int64_t row = ((b * a.H + h) * a.T + t) * a.D;
                int64_t n = gd_attn_probs(&a, t, Q + row, kh, p, NULL);
                for (int64_t d = 0; d < a.D; d++) o[d] = 0;
                for (int64_t s = 0; s < n; s++)
                    for (int64_t d = 0; d < a.D; d++) o[d] += p[s] * vh[s * a.D + d];
                for (int64_t d = 0; d < a.D; d++) rw_st(y, row + d, o[d]);
            }
        }
    }
    return GDP_OK;
}

static gd_status attention_grad(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_tensor *in[5] = {c->dout[0], c->in[0], c->in[1], c->in[2], c->n_in > 3 ? c->in[3] : NULL};
    gd_attr a[2] = {gd_attr_i("causal", gdp_attr_int(c->attrs, "causal", 0)),
                    gd_attr_f("scale", gdp_attr_float(c->attrs, "scale", 0.0))};
    gd_tensor *out[3] = {NULL, NULL, NULL};
    gd_status st = gd_op_multi(c->g, "attention_grad", c->n_in + 1, in, 2, a, 3, out);
    if (st != GD_OK) return st;
    for (int i = 0; i < 3; i++) c->din[i] = out[i];
    return GD_OK;
}

gd_tensor *gd_attention(gd_tensor *q, gd_tensor *k, gd_tensor *v, int causal, double scale, gd_tensor *kv_len)
{
    if (q == NULL || k == NULL || v == NULL) return NULL;
    gd_tensor *in[4] = {q, k, v, kv_len};
    gd_attr a[2] = {gd_attr_i("causal", causal != 0), gd_attr_f("scale", scale)};
    return gd_op(gd_tensor_graph(q), "attention", kv_len != NULL ? 4 : 3, in, 2, a);
}

static const char *const attention_cases[] = {
    "f[1,2,3,4] f[1,2,3,4] f[1,2,3,4]",
    "f[2,2,4,4] f[2,2,4,4] f[2,2,4,4] | causal=1",
    "f[1,4,3,8] f[1,2,5,8] f[1,2,5,8] | causal=1",
    "f[1,2,2,4] f[1,1,6,4] f[1,1,6,4] | causal=0 scale=0.5",
    "f[2,1,1,4] f[2,1,7,4] f[2,1,7,4] | causal=1",
    "n[1,1,5,2] n[1,1,5,2] n[1,1,5,2] | causal=1 scale=2",
    "f[1,2,1,4] f[1,1,6,4] f[1,1,6,4] i32[]<4:5 | causal=1",
    "f[1,2,2,4] f[1,2,5,4] f[1,2,5,4] i64[]<3:4 | causal=0",
    /* a decoder's batch: a cache length per sequence */
    "f[3,2,1,4] f[3,1,6,4] f[3,1,6,4] i32[3]<1:7 | causal=1",
    "f[2,2,2,4] f[2,2,7,4] f[2,2,7,4] i64[2]<2:8 | causal=1",
    /* heads of 64 and 128 over several tiles of 64 rows (backends' tensor-core paths) */
    "f[1,2,70,64] f[1,1,90,64] f[1,1,90,64] | causal=1",
    "f[1,2,33,128] f[1,2,33,128] f[1,2,33,128]",
    "f[1,2,40,64] f[1,1,80,64] f[1,1,80,64] i32[]<50:61 | causal=1",
    "f[2,2,20,64] f[2,1,40,64] f[2,1,40,64] i32[2]<12:41 | causal=1", /* and a length per sequence */
    /* decode steps against a long cache (backends' decode paths: few query rows, the keys
     * split among warps and blocks): a length per sequence or one for all, grouped heads,
     * heads of 64, 128 and 20 (not a whole number of 16-byte chunks in f16/bf16), up to 4
     * query rows (speculative or chunked decoding), many heads (no split across blocks),
     * a long cache for few heads (more splits than one cluster of blocks combines) */
    "f[2,4,1,64] f[2,2,300,64] f[2,2,300,64] i32[2]<1:301 | causal=1",
    "f[1,8,1,128] f[1,2,200,128] f[1,2,200,128] i32[]<150:201 | causal=1",
    "f[2,2,3,64] f[2,1,150,64] f[2,1,150,64] i32[2]<0:151 | causal=1",
    "f[2,6,4,20] f[2,3,260,20] f[2,3,260,20] i64[2]<100:261 | causal=0",
    "f[2,160,1,8] f[2,16,300,8] f[2,16,300,8] i32[2]<200:301 | causal=1",
    "f[1,2,1,64] f[1,1,1100,64] f[1,1,1100,64] i32[]<900:1101 | causal=1",
    NULL};

/* ---- attention_grad: (dy, q, k, v) -> dq, dk, dv ------------------------------------- */

static int attention_grad_infer(gd_infer *c)
{
    int rc = gd_attention_check(c, &c->in[1], &c->in[2], &c->in[3]);
    if (rc != 0) return rc;
    if (c->n_in > 4 && gd_index_per_row(c, 4, "kv_len", c->in[1].dim[0])) return 1;
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
/* Scratch of attention_grad: dy, q, k, v as contiguous doubles, the dk and dv sums, and
 * rows of probabilities, their gradients and dq. */
static size_t ws_attention_grad(const gdp_node *node)
{
    const gdp_tensor *q = node->in[1], *k = node->in[2];
    return 2 * rw_doubles(gdp_numel(q)) + 4 * rw_doubles(gdp_numel(k)) + 2 * rw_doubles(k->shape[2]) +
           rw_doubles(q->shape[3]);
}

static gdp_status attention_grad_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *dq = node->out[0], *dk = node->out[1], *dv = node->out[2];
    gd_attn_dims a;
    if (gd_attn_dims_of(node, node->in[1], node->in[2], 4, &a, err) != GDP_OK) return GDP_ERR_INVALID;
    int64_t group = a.H / a.Hkv, nq = gdp_numel(node->in[1]), nkv = gdp_numel(node->in[2]);
    char *ws = rw_workspace(node, ws_attention_grad(node), err);
    if (ws == NULL) return GDP_ERR_INVALID;
    double *dY = gd_attn_take(&ws, nq), *Q = gd_attn_take(&ws, nq);           // (B, H, T, D)
    double *K = gd_attn_take(&ws, nkv), *V = gd_attn_take(&ws, nkv);          // (B, Hkv, S, D)
    double *dK = gd_attn_take(&ws, nkv), *dV = gd_attn_take(&ws, nkv);        // (B, Hkv, S, D)
    double *p = gd_attn_take(&ws, a.S), *dp = gd_attn_take(&ws, a.S), *g = gd_attn_take(&ws, a.D);
    rw_gather(node->in[0], dY);
    rw_gather(node->in[1], Q);
    rw_gather(node->in[2], K);
    rw_gather(node->in[3], V);
    for (int64_t i = 0; i < nkv; i++) dK[i] = dV[i] = 0.0;
    for (int64_t b = 0; b < a.B; b++) {
        if (gd_attn_len_of(node, 4, b, &a, err) != GDP_OK) return GDP_ERR_INVALID;
        for (int64_t h = 0; h < a.H; h++) {
            int64_t kv = (b * a.Hkv + h / group) * a.S * a.D;
            const double *kh = K + kv, *vh = V + kv; // (S, D)
            double *dkh = dK + kv, *dvh = dV + kv;   // (S, D)
            for (int64_t t = 0; t < a.T; t++) {
                int64_t row = ((b * a.H + h) * a.T + t) * a.D;
                const double *qt = Q + row, *dyt = dY + row;
                int64_t n = gd_attn_probs(&a, t, qt, kh, p, NULL);
                double pdp = 0;
                for (int64_t s = 0; s < n; s++) {
                    double dot = 0;
                    for (int64_t d = 0; d < a.D; d++) dot += dyt[d] * vh[s * a.D + d];
                    dp[s] = dot;
                    pdp += p[s] * dot;
                }
                gd_attn_row_grads(&a, n, qt, dyt, kh, p, dp, pdp, g, dkh, dvh);
                for (int64_t d = 0; d < a.D; d++) rw_st(dq, row + d, g[d]);
            }
        }
    }
    for (int64_t i = 0; i < nkv; i++) {
        rw_st(dk, i, dK[i]);
        rw_st(dv, i, dV[i]);
    }
    return GDP_OK;
}

void gd_attn_row_grads(const gd_attn_dims *a, int64_t n, const double *qt, const double *dyt, const double *kh,
                       const double *p, const double *dp, double delta, double *g, double *dkh, double *dvh)
{
    for (int64_t d = 0; d < a->D; d++) g[d] = 0;
    for (int64_t s = 0; s < n; s++) {
        const double ds = a->scale * p[s] * (dp[s] - delta);
        for (int64_t d = 0; d < a->D; d++) {
            g[d] += ds * kh[s * a->D + d];
            dkh[s * a->D + d] += ds * qt[d];
            dvh[s * a->D + d] += p[s] * dyt[d];
        }
    }
}

static const char *const attention_grad_cases[] = {
    "f[1,2,3,4] f[1,2,3,4] f[1,2,3,4] f[1,2,3,4]",
    "f[2,2,4,4] f[2,2,4,4] f[2,2,4,4] f[2,2,4,4] | causal=1",
    "f[1,4,3,8] f[1,4,3,8] f[1,2,5,8] f[1,2,5,8] | causal=1",
    "f[1,2,2,4] f[1,2,2,4] f[1,1,6,4] f[1,1,6,4] | scale=0.5",
    "f[2,1,1,4] f[2,1,1,4] f[2,1,7,4] f[2,1,7,4] | causal=1",
    "f[1,2,2,4] f[1,2,2,4] f[1,1,6,4] f[1,1,6,4] i32[]<4:5 | causal=1",
    "f[1,2,70,64] f[1,2,70,64] f[1,1,90,64] f[1,1,90,64] | causal=1",
    "f[1,2,33,128] f[1,2,33,128] f[1,2,33,128] f[1,2,33,128]",
    "f[1,2,40,64] f[1,2,40,64] f[1,1,80,64] f[1,1,80,64] i32[]<50:61 | causal=1",
    /* heads of 128 over several of the backward's 32-row inner tiles, grouped, causal */
    "f[1,4,100,128] f[1,4,100,128] f[1,2,100,128] f[1,2,100,128] | causal=1",
    NULL};

/* ---- cache_write: (cache, x, pos) -> cache' ------------------------------------------ */

/* cache (..., S, D) and x (..., T, D) agree on every dim but the time axis (-2). */
static int cache_write_infer(gd_infer *c)
{
    const gd_shape *cache = &c->in[0], *x = &c->in[1];
    char cs[200], xs[200];
    gd_shape_str(cache, cs, sizeof cs);
    gd_shape_str(x, xs, sizeof xs);
    if (cache->ndim < 2 || x->ndim != cache->ndim || x->dtype != cache->dtype)
        return gd_infer_fail(c, "x %s must have the dims and dtype of cache %s", xs, cs);
    for (int d = 0; d < cache->ndim; d++)
        if (d != cache->ndim - 2 && x->dim[d] != cache->dim[d])
            return gd_infer_fail(c, "x %s and cache %s differ in dim %d (only the time axis -2 may)", xs, cs, d);
    if (x->dim[x->ndim - 2] > cache->dim[cache->ndim - 2])
        return gd_infer_fail(c, "x %s has more steps than cache %s holds", xs, cs);
    if (gd_index_per_row(c, 2, "pos", cache->dim[0])) return 1;
    c->out[0] = *cache;
    return 0;
}

/* Rows [pos, pos + T) of the time axis of every (..., :, :) slice of the cache take x's;
 * with a pos per batch row (dim 0), each row's own. The output is the cache itself (in
 * place, so whole and contiguous); x may be strided. */
static gdp_status cache_write_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *x = node->in[1], *y = node->out[0];
    int nd = y->ndim;
    int64_t S = y->shape[nd - 2], T = x->shape[nd - 2];
    for (int64_t b = 0; b < y->shape[0]; b++) {
        int64_t pos = gd_row_value(node, 2, b);
        if (pos < 0 || pos + T > S)
            return gdp_fail(err, GDP_ERR_INVALID, "pos = %lld (batch row %lld): steps [%lld, %lld) do not fit the cache's %lld",
                            (long long)pos, (long long)b, (long long)pos, (long long)(pos + T), (long long)S);
    }
    size_t es = gdp_dtype_size(y->dtype);
    if (y->data != node->in[0]->data) memcpy(y->data, node->in[0]->data, (size_t)gdp_numel(y) * es);
    // every element of x, in row-major order, to the cache element (b, ..., pos_b + t, d)
    int64_t ys[GDP_MAX_DIMS];
    rw_contig_strides(nd, y->shape, ys);
    rw_walk w;
    rw_begin(&w, nd, x->shape);
    rw_add(&w, x);
    rw_add_strides(&w, ys);
    int64_t n = gdp_numel(x);
    for (int64_t i = 0; i < n; i++, rw_next(&w)) {
        int64_t base = gd_row_value(node, 2, w.idx[0]) * ys[nd - 2];
        memcpy((char *)y->data + (size_t)(base + w.off[1]) * es, (const char *)x->data + (size_t)w.off[0] * es, es);
    }
    return GDP_OK;
}

gd_tensor *gd_cache_write(gd_tensor *cache, gd_tensor *x, gd_tensor *pos)
{
    if (cache == NULL || x == NULL || pos == NULL) return NULL;
    gd_tensor *in[3] = {cache, x, pos};
    return gd_op(gd_tensor_graph(cache), "cache_write", 3, in, 0, NULL);
}

static const char *const cache_write_cases[] = {
    "f[1,2,6,4] f[1,2,1,4] i32[]<3:4",
    "f[3,2,6,4] f[3,2,1,4] i32[3]<0:6", /* a decoder's batch: a position per sequence */
    "f[2,1,7,3] f[2,1,2,3] i64[2]<0:6",
    "f[2,1,5,3] f[2,1,2,3] i64[]<0:1",
    "f[1,3,4,2] f[1,3,4,2] i64[]<0:1",
    "f[4,2,50,64] f[4,2,1,64] i32[4]<0:50", /* a decode step of a batch */
    "f[2,3,2,10,4] f[2,3,2,1,4] i32[2]<0:10",
    "i32[3,9,1]<1000 i32[3,1,1]<1000 i32[3]<0:9", /* a decoder's record of the tokens it sampled */
    NULL};

/* ---- rope_cache_write: a decode step's RoPE and cache writes in one op ---------------- */

/* q (B, T, H, D), k and v (B, T, Hkv, D), the caches (B, Hkv, S, D), pos: rope(q), and the
 * caches with steps [pos, pos + T) replaced by rope(k) and v — what rope, rope and two
 * cache_writes of k and v transposed to (B, Hkv, T, D) compute. A graph pass makes it for
 * a decode step, where those four launches are most of the attention block's time. With
 * two more inputs, weights qn and kn (D), q and k are first rms-normalized per head (eps),
 * as rms_norm stores them: Qwen3's QK-norm, two launches more folded in. */
static int rope_cache_infer(gd_infer *c)
{
    const gd_shape *q = &c->in[0], *k = &c->in[1], *v = &c->in[2], *kc = &c->in[3], *vc = &c->in[4];
    char qs[160], ks[160], vs[160], cs[160];
    gd_shape_str(q, qs, sizeof qs);
    gd_shape_str(k, ks, sizeof ks);
    gd_shape_str(v, vs, sizeof vs);
    gd_shape_str(kc, cs, sizeof cs);
    if (!is_float_dtype(q->dtype) || q->ndim != 4 || q->dim[3] % 2 != 0)
        return gd_infer_fail(c, "q %s must be a float (B, T, H, D) with D even", qs);
    if (k->ndim != 4 || k->dtype != q->dtype || k->dim[0] != q->dim[0] || k->dim[1] != q->dim[1] ||
        k->dim[3] != q->dim[3] || v->ndim != 4 || v->dtype != k->dtype || v->dim[0] != k->dim[0] ||
        v->dim[1] != k->dim[1] || v->dim[2] != k->dim[2] || v->dim[3] != k->dim[3])
        return gd_infer_fail(c, "k %s and v %s must be (B, T, Hkv, D) of q %s's B, T, D and dtype", ks, vs, qs);
    for (int j = 3; j <= 4; j++) {
        const gd_shape *m = &c->in[j];
        if (m->ndim != 4 || m->dtype != q->dtype || m->dim[0] != k->dim[0] || m->dim[1] != k->dim[2] ||
            m->dim[3] != k->dim[3] || m->dim[2] < k->dim[1]) {
            gd_shape_str(m, cs, sizeof cs);
            return gd_infer_fail(c, "%s cache %s must be (B, Hkv, S >= T, D) for k %s", j == 3 ? "the key" : "the value",
                                 cs, ks);
        }
    }
    if (gd_index_per_row(c, 5, "pos", q->dim[0])) return 1;
    if (c->n_in == 7) return gd_infer_fail(c, "the q and k norm weights come together (q %s): got one", qs);
    for (int j = 6; j < c->n_in; j++) {
        const gd_shape *g = &c->in[j];
        gd_shape_str(g, cs, sizeof cs);
        if (g->ndim != 1 || g->dim[0] != q->dim[3] || g->dtype != q->dtype)
            return gd_infer_fail(c, "the %s norm weight %s must be %s[%lld], the head of q %s", j == 6 ? "q" : "k", cs,
                                 gd_dtype_name((gd_dtype)q->dtype), (long long)q->dim[3], qs);
    }
    if (c->n_in == 8 && !(gdp_attr_float(c->attrs, "eps", 1e-6) >= 0.0))
        return gd_infer_fail(c, "eps must be >= 0 (q %s)", qs);
    double theta = gdp_attr_float(c->attrs, "theta", 10000.0);
    if (!(theta > 0)) return gd_infer_fail(c, "theta %g must be positive", theta);
    c->out[0] = *q, c->out[1] = *kc, c->out[2] = *vc;
    return 0;
}

/* Bytes of a contiguous copy of t, in whole doubles. */
static size_t copy_bytes(const gdp_tensor *t) { return rw_doubles(((int64_t)gdp_numel(t) * (int64_t)gdp_dtype_size(t->dtype) + 7) / 8); }

/* rope's scratch, then rope(k) in k's dtype; with the norms, the normalized q and k ahead. */
static size_t ws_rope_cache(const gdp_node *node)
{
    const gdp_tensor *k = node->in[1];
    const size_t norms = node->n_in == 8 ? copy_bytes(node->in[0]) + copy_bytes(k) : 0;
    return norms + rw_doubles(k->shape[3]) + (size_t)gdp_numel(k) * gdp_dtype_size(k->dtype);
}

/* x (B, T, Hkv, D) seen as (B, Hkv, T, D): the transpose cache_write takes. */
static gdp_tensor transposed(const gdp_tensor *x)
{
    gdp_tensor t = *x;
    t.shape[1] = x->shape[2], t.shape[2] = x->shape[1];
    t.stride[1] = x->stride[2], t.stride[2] = x->stride[1];
    return t;
}

static gdp_status rope_cache_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *q = node->in[0], *k = node->in[1];
    char *ws = rw_workspace(node, ws_rope_cache(node), err);
    if (ws == NULL) return GDP_ERR_INVALID;
    /* with the norms, q and k normalized first, into the head of the workspace */
    gdp_tensor qn, kn;
    if (node->n_in == 8) {
        const double eps = gdp_attr_float(&node->attrs, "eps", 1e-6);
        qn = *q, kn = *k;
        qn.data = ws, kn.data = ws + copy_bytes(q);
        gdp_set_contiguous(&qn);
        gdp_set_contiguous(&kn);
        gd_rms_rows(q, node->in[6], eps, &qn);
        gd_rms_rows(k, node->in[7], eps, &kn);
        ws += copy_bytes(q) + copy_bytes(k);
        q = &qn, k = &kn;
    }
    /* rope(q) into output 0, rope(k) into the scratch tensor kr */
    gdp_tensor kr = *k;
    kr.data = ws + rw_doubles(k->shape[3]);
    gd_strides(4, k->shape, kr.stride);
    const gdp_tensor *rin[2][2] = {{q, node->in[5]}, {k, node->in[5]}};
    const gdp_tensor *rout[2] = {node->out[0], &kr};
    for (int j = 0; j < 2; j++) {
        gdp_node sub = *node;
        sub.n_in = 2, sub.in = rin[j], sub.n_out = 1, sub.out = &rout[j];
        sub.workspace = ws, sub.workspace_bytes = rw_doubles(k->shape[3]);
        gdp_status st = rope_ref(be, &sub, stream, err);
        if (st != GDP_OK) return st;
    }
    /* then the two cache writes, of rope(k) and of v, each (B, Hkv, T, D) */
    const gdp_tensor kt = transposed(&kr), vt = transposed(node->in[2]);
    const gdp_tensor *xs[2] = {&kt, &vt};
    for (int j = 0; j < 2; j++) {
        const gdp_tensor *in[3] = {node->in[3 + j], xs[j], node->in[5]};
        gdp_node sub = *node;
        sub.n_in = 3, sub.in = in, sub.n_out = 1, sub.out = node->out + 1 + j;
        gdp_status st = cache_write_ref(be, &sub, stream, err);
        if (st != GDP_OK) return st;
    }
    return GDP_OK;
}

static const char *const rope_cache_cases[] = {
    "f[1,1,4,8] f[1,1,2,8] f[1,1,2,8] f[1,2,6,8] f[1,2,6,8] i32[]<0:6",
    "f[3,1,4,64] f[3,1,2,64] f[3,1,2,64] f[3,2,20,64] f[3,2,20,64] i32[3]<0:20 | theta=500",
    "f[2,2,6,16] f[2,2,6,16] f[2,2,6,16] f[2,6,9,16] f[2,6,9,16] i64[]<0:8 | interleaved=1",
    "f[1,4,2,4] f[1,4,1,4] f[1,4,1,4] f[1,1,4,4] f[1,1,4,4] i64[]<0:1",
    "f[1,1,4,8] f[1,1,2,8] f[1,1,2,8] f[1,2,6,8] f[1,2,6,8] i32[]<0:6 p[8] p[8] | eps=1e-5",
    "n[2,1,4,128] n[2,1,2,128] n[2,1,2,128] f[2,2,9,128] f[2,2,9,128] i32[2]<0:9 p[128] p[128] | interleaved=0 "
    "theta=1000000.0",
    "f[1,2,3,10] f[1,2,3,10] f[1,2,3,10] f[1,3,5,10] f[1,3,5,10] i64[]<0:4 p[10] p[10] | eps=0.01",
    NULL};

/* ---- linear_qkv_rope: a decode step's projections, RoPE and cache writes in one op ---- */

/* x (B, T, in), Wq (H D, in), Wk and Wv (Hkv D, in), the caches (B, Hkv, S, D), pos, and
 * optionally a norm weight g (in) -> rope(q) (B, T, H, D) and the caches with steps
 * [pos, pos + T) replaced by rope(k) and v, in place: what linear_qkv (x, Wq, Wk, Wv [, g];
 * eps) and rope_cache_write (theta, interleaved) compute in turn, each product rounded to
 * the dtype before it is rotated. A graph pass makes it for a decode step: one launch where
 * the pair took two, and q, k, v never stored apart. */
enum { QR_X, QR_WQ, QR_WK, QR_WV, QR_KC, QR_VC, QR_POS, QR_G };

static int qkv_rope_infer(gd_infer *c)
{
    const gd_shape *x = &c->in[QR_X], *kc = &c->in[QR_KC], *vc = &c->in[QR_VC];
    char xs[160], ws[160], cs[160];
    gd_shape_str(x, xs, sizeof xs);
    gd_shape_str(kc, cs, sizeof cs);
    if (!is_float_dtype(x->dtype) || x->ndim != 3) return gd_infer_fail(c, "x %s must be a float (B, T, in)", xs);
    if (kc->ndim != 4 || kc->dtype != x->dtype || kc->dim[0] != x->dim[0] || kc->dim[2] < x->dim[1] ||
        kc->dim[3] % 2 != 0 || kc->dim[3] < 2)
        return gd_infer_fail(c, "the key cache %s must be (B, Hkv, S >= T, D) with D even, of x %s's B, T and dtype",
                             cs, xs);
    if (vc->ndim != 4 || vc->dtype != kc->dtype || memcmp(vc->dim, kc->dim, 4 * sizeof(int64_t)) != 0) {
        char vs[160];
        return gd_infer_fail(c, "the value cache %s must be the key cache %s's shape and dtype",
                             gd_shape_str(vc, vs, sizeof vs), cs);
    }
    const int64_t K = x->dim[2], Hkv = kc->dim[1], D = kc->dim[3];
    for (int j = QR_WQ; j <= QR_WV; j++) {
        const gd_shape *w = &c->in[j];
        gd_shape_str(w, ws, sizeof ws);
        const int64_t out = j == QR_WQ ? (w->ndim == 2 ? w->dim[0] : -1) : Hkv * D;
        if (w->dtype != x->dtype || w->ndim != 2 || w->dim[1] != K || w->dim[0] != out || out < D || out % D != 0)
            return gd_infer_fail(c, "W%c %s must be (%s, %lld) of x %s's dtype for the caches %s", "qkv"[j - QR_WQ], ws,
                                 j == QR_WQ ? "H * D" : "Hkv * D", (long long)K, xs, cs);
    }
    const int64_t H = c->in[QR_WQ].dim[0] / D;
    if (H % Hkv != 0) {
        gd_shape_str(&c->in[QR_WQ], ws, sizeof ws);
        return gd_infer_fail(c, "Wq %s gives %lld heads, not a multiple of the caches %s's %lld", ws, (long long)H, cs,
                             (long long)Hkv);
    }
    if (gd_index_per_row(c, QR_POS, "pos", x->dim[0])) return 1;
    if (c->n_in > QR_G) {
        const gd_shape *g = &c->in[QR_G];
        gd_shape_str(g, ws, sizeof ws);
        if (g->ndim != 1 || g->dim[0] != K || g->dtype != x->dtype)
            return gd_infer_fail(c, "norm weight %s must be %s[%lld], the last axis of x %s", ws,
                                 gd_dtype_name((gd_dtype)x->dtype), (long long)K, xs);
        if (!(gdp_attr_float(c->attrs, "eps", 1e-6) >= 0.0)) return gd_infer_fail(c, "eps must be >= 0 (x %s)", xs);
    }
    if (!(gdp_attr_float(c->attrs, "theta", 10000.0) > 0)) return gd_infer_fail(c, "theta must be positive (x %s)", xs);
    c->out[0] = *x;
    c->out[0].ndim = 4, c->out[0].dim[2] = H, c->out[0].dim[3] = D;
    c->out[1] = *kc, c->out[2] = *vc;
    return 0;
}

/* The node as its two ops: `lin` linear_qkv into the three products (contiguous, in the
 * workspace from `at`), then `rc` rope_cache_write of those products seen as heads. */
typedef struct qr_parts {
    gdp_node lin, rc;
    const gdp_tensor *lin_in[5], *lin_out[3], *rc_in[6];
    gdp_tensor prod[3], heads[3];
    size_t prod_bytes;
} qr_parts;

static void qkv_rope_parts(const gdp_node *node, char *at, qr_parts *p)
{
    const gdp_tensor *x = node->in[QR_X];
    const int64_t D = node->in[QR_KC]->shape[3];
    p->prod_bytes = 0;
    for (int j = 0; j < 3; j++) {
        gdp_tensor *t = &p->prod[j], *h = &p->heads[j];
        *t = *x;
        t->shape[2] = node->in[QR_WQ + j]->shape[0];
        gdp_set_contiguous(t);
        t->data = at != NULL ? at + p->prod_bytes : NULL;
        p->prod_bytes += rw_doubles((gdp_numel(t) * (int64_t)gdp_dtype_size(t->dtype) + 7) / 8);
        *h = *t;
        h->ndim = 4, h->shape[2] = t->shape[2] / D, h->shape[3] = D;
        gdp_set_contiguous(h);
        p->lin_out[j] = t, p->rc_in[j] = h;
    }
    p->lin = *node;
    for (int j = 0; j < 4; j++) p->lin_in[j] = node->in[QR_X + j];
    p->lin_in[4] = node->n_in > QR_G ? node->in[QR_G] : NULL;
    p->lin.in = p->lin_in, p->lin.n_in = node->n_in > QR_G ? 5 : 4;
    p->lin.out = p->lin_out, p->lin.n_out = 3;
    p->rc = *node;
    p->rc_in[3] = node->in[QR_KC], p->rc_in[4] = node->in[QR_VC], p->rc_in[5] = node->in[QR_POS];
    p->rc.in = p->rc_in, p->rc.n_in = 6;
}

static size_t ws_qkv_rope(const gdp_node *node)
{
    qr_parts p;
    qkv_rope_parts(node, NULL, &p);
    const size_t a = gd_linear_qkv_ws(&p.lin), b = ws_rope_cache(&p.rc);
    return p.prod_bytes + (a > b ? a : b);
}

static gdp_status qkv_rope_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    char *ws = rw_workspace(node, ws_qkv_rope(node), err);
    if (ws == NULL) return GDP_ERR_INVALID;
    qr_parts p;
    qkv_rope_parts(node, ws, &p);
    p.lin.workspace = p.rc.workspace = ws + p.prod_bytes;
    p.lin.workspace_bytes = p.rc.workspace_bytes = node->workspace_bytes - p.prod_bytes;
    gdp_status s = gd_linear_qkv_ref(be, &p.lin, stream, err);
    return s == GDP_OK ? rope_cache_ref(be, &p.rc, stream, err) : s;
}

/* Decode shapes: one step and two, GQA, a position per batch row, both pair layouts, with
 * the norm and without, K in 16-byte pieces or not. */
static const char *const qkv_rope_cases[] = {
    "f[1,1,16] f[8,16] f[8,16] f[8,16] f[1,2,6,4] f[1,2,6,4] i32[]<0:6",
    "n[1,1,64] f[64,64] f[32,64] f[32,64] f[1,2,10,16] f[1,2,10,16] i32[]<0:10 p[64] | eps=1e-5 theta=500",
    "n[3,1,96] f[64,96] f[16,96] f[16,96] f[3,1,20,16] f[3,1,20,16] i32[3]<0:20 p[96] | interleaved=0",
    "f[2,2,37] f[48,37] f[24,37] f[24,37] f[2,3,9,8] f[2,3,9,8] i64[]<0:8 | interleaved=1",
    "n[1,1,256] f[256,256] f[128,256] f[128,256] f[1,1,12,128] f[1,1,12,128] i64[]<0:12 p[256] | interleaved=0",
    NULL};

/* ---- cost ------------------------------------------------------------------------------ */

/* q k^T and p v: 2 D operations each per (query, key) pair of each head, over every key
 * (kv_len is a runtime value); a causal mask leaves about half the pairs. The backward
 * pass recomputes p and makes dv, dp, dq and dk: five such products. */
static double attention_flops(const gdp_node *n, const gdp_tensor *q, const gdp_tensor *k, double products)
{
    if (q->ndim != 4 || k->ndim != 4) return 0;
    double pairs = (double)(q->shape[0] * q->shape[1] * q->shape[2]) * (double)k->shape[2];
    if (gdp_attr_int(&n->attrs, "causal", 0) != 0) pairs *= 0.5;
    return products * 2.0 * pairs * (double)q->shape[3];
}
void gd_cost_attention(const gdp_node *n, double *bytes, double *flops)
{
    *bytes = gd_cost_io_bytes(n);
    *flops = attention_flops(n, n->in[0], n->in[1], 2);
}
void gd_cost_attention_grad(const gdp_node *n, double *bytes, double *flops)
{
    *bytes = gd_cost_io_bytes(n);
    *flops = attention_flops(n, n->in[1], n->in[2], 5); /* (dy, q, k, v, ...) */
}

/* ---- registration ------------------------------------------------------------------- */

GD_FAMILY(attention)
{
    gd_register_op(r, &(gd_op_def){
        .name = "rope", .min_in = 1, .max_in = 2, .n_out = 1,
        .attrs = "theta:float interleaved:int inverse:int",
        .dtypes = GD_FLOATS, .infer = rope_infer, .grad = rope_grad, .ref = rope_ref,
        .cases = rope_cases, .inplace = {-1, -1, -1, -1}, .ref_workspace = ws_rope, .ref_strided = 1,
        // a backend computing the angle (t + pos) * freq in f32 is off by ~1e-7 of it
        .tol = 1e-8,
        .doc = "rotary position embedding of x (B, T, H, D) [, pos]: pairs (2i, 2i+1) or (i, i + D/2) rotated "
               "by (t + pos) * theta^(-2i/D), pos an integer scalar or one per batch row (0 when absent); "
               "inverse=1 rotates back"});
    gd_register_op(r, &(gd_op_def){
        .name = "attention", .min_in = 3, .max_in = 4, .n_out = 1, .attrs = "causal:int scale:float",
        .dtypes = GD_FLOATS, .infer = attention_infer, .grad = attention_grad, .ref = attention_ref,
        .cases = attention_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .ref_workspace = ws_attention, .ref_strided = 1, .cost = gd_cost_attention,
        .doc = "softmax(scale q k^T [causal mask]) v; q (B, H, T, D), k, v (B, Hkv, S, D), H % Hkv == 0 "
               "[, kv_len]: keys past kv_len (default S; a scalar or one per batch row) are ignored; causal: query t sees keys "
               "s <= t + kv_len - T; scale <= 0: 1/sqrt(D)"});
    gd_register_op(r, &(gd_op_def){
        .name = "attention_grad", .min_in = 4, .max_in = 5, .n_out = 3, .attrs = "causal:int scale:float",
        .dtypes = GD_FLOATS, .infer = attention_grad_infer, .grad = NULL, .ref = attention_grad_ref,
        .cases = attention_grad_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .ref_workspace = ws_attention_grad, .ref_strided = 1, .cost = gd_cost_attention_grad,
        .doc = "backward of attention: (dy, q, k, v [, kv_len]) -> (dq, dk, dv), softmax recomputed"});
    gd_register_op(r, &(gd_op_def){
        .name = "rope_cache_write", .min_in = 6, .max_in = 8, .n_out = 3,
        .attrs = "theta:float interleaved:int eps:float",
        .dtypes = GD_FLOATS, .infer = rope_cache_infer, .grad = NULL, .ref = rope_cache_ref,
        .ref_dtypes = GD_FLOATS64, .cases = rope_cache_cases, .inplace = {-1, 3, 4, -1}, .updates = 1, .tol = 1e-8,
        .ref_workspace = ws_rope_cache, .ref_strided = 1,
        .doc = "(q, k, v, k_cache, v_cache, pos [, qn, kn]) -> rope(q), the caches with steps [pos, pos + T) replaced "
               "by rope(k) and v, in place: q (B, T, H, D), k, v (B, T, Hkv, D), caches (B, Hkv, S, D); with qn, kn (D), "
               "q and k rms-normalized per head first (eps); rope and cache_write as one op (fused by graph passes)"});
    gd_register_op(r, &(gd_op_def){
        .name = "linear_qkv_rope", .min_in = 7, .max_in = 8, .n_out = 3, .attrs = "eps:float theta:float interleaved:int",
        .dtypes = GD_FLOATS, .infer = qkv_rope_infer, .grad = NULL, .ref = qkv_rope_ref, .ref_dtypes = GD_FLOATS64,
        .cases = qkv_rope_cases, .inplace = {-1, QR_KC, QR_VC, -1}, .updates = 1, .tol = 1e-7,
        .ref_workspace = ws_qkv_rope, .ref_strided = 1,
        .doc = "(x, Wq, Wk, Wv, k_cache, v_cache, pos [, g]) -> rope(h Wq^T) (B, T, H, D), the caches with steps "
               "[pos, pos + T) replaced by rope(h Wk^T) and h Wv^T, in place; h = x (B, T, in), or rms_norm(x, g; eps); "
               "linear_qkv then rope_cache_write as one op (fused by graph passes)"});
    gd_register_op(r, &(gd_op_def){
        .name = "cache_write", .min_in = 3, .max_in = 3, .n_out = 1, .attrs = "",
        .dtypes = GD_FLOATS, .infer = cache_write_infer, .grad = NULL, .ref = cache_write_ref,
        .ref_dtypes = (1u << GDP_DTYPE_COUNT) - 1u, .cases = cache_write_cases, .inplace = {0, -1, -1, -1},
        .updates = 1, .tol = 0, .ref_strided = 1,
        .doc = "cache (..., S, D) with steps [pos, pos + T) of its time axis (-2) replaced by x (..., T, D), in "
               "place; pos an integer scalar or one per batch row (dim 0)"});
}
