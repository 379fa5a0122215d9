/* attention_lse.c — attention that keeps what its backward would otherwise recompute.
 *
 * attention_grad (attention.c) starts from q, k, v and dy alone, so a backend must first
 * run the forward again to learn each query row's softmax statistics: lse, the
 * log-sum-exp of its scaled scores, and delta = dy . y. The pair below splits that work
 * the FlashAttention way: attention_lse writes lse beside y (a float per query row), and
 * attention_grad_lse takes y and lse back, so that the probabilities come from one
 * exponential, P[t,s] = exp(scale q[t] . k[s] - lse[t]), and delta from one dot product
 * per row. Graph passes make them from an attention and its attention_grad in a training
 * program (the CUDA plugin's fuse.cu); nothing builds them directly.
 *
 * No kv_len here: training attends over whole sequences. lse is f32 whatever the dtype of
 * q (its rounding to bf16 would spoil every probability); a row that sees no key has y
 * zero and lse 0.
 *
 * y_bthd = 1 lays y out as (B, T, H, D), the heads of a position side by side: what the
 * output projection reads (a transformer's y.transpose(1, 2).reshape(B, T, H * D)), so that
 * neither a copy into that layout nor a second y for the backward is kept.
 */
#include "attention_ref.h"

#include <math.h>

/* (B, H, T) f32, for q (B, H, T, D). */
static gd_shape lse_shape(const gd_shape *q)
{
    gd_shape s = {.dtype = GDP_F32, .ndim = 3, .dim = {q->dim[0], q->dim[1], q->dim[2]}};
    return s;
}

/* Fails c unless input k has shape `want` (and its dtype). */
static int shaped(gd_infer *c, int k, const char *name, const gd_shape *want, const char *what)
{
    const gd_shape *s = &c->in[k];
    int ok = s->dtype == want->dtype && s->ndim == want->ndim;
    for (int i = 0; ok && i < s->ndim; i++) ok = s->dim[i] == want->dim[i];
    if (ok) return 0;
    char a[200], b[200];
    return gd_infer_fail(c, "%s %s must be %s %s", name, gd_shape_str(s, a, sizeof a), gd_shape_str(want, b, sizeof b),
                         what);
}

/* ---- attention_lse: (q, k, v) -> y, lse -------------------------------------------- */

/* y's shape for q (B, H, T, D): q's, or (B, T, H, D) with y_bthd. */
static gd_shape y_shape(const gd_shape *q, const gdp_attrs *a)
{
    gd_shape y = *q;
    if (gdp_attr_int(a, "y_bthd", 0) != 0) y.dim[1] = q->dim[2], y.dim[2] = q->dim[1];
    return y;
}

/* Offset of y[b, h, t, 0] in a contiguous y of either layout. */
static int64_t y_row(const gd_attn_dims *a, int bthd, int64_t b, int64_t h, int64_t t)
{
    return (bthd ? (b * a->T + t) * a->H + h : (b * a->H + h) * a->T + t) * a->D;
}

static int attention_lse_infer(gd_infer *c)
{
    int rc = gd_attention_check(c, &c->in[0], &c->in[1], &c->in[2]);
    if (rc != 0) return rc;
    c->out[0] = y_shape(&c->in[0], c->attrs);
    c->out[1] = lse_shape(&c->in[0]);
    c->n_out = 2;
    return 0;
}

/* Scratch: q, k, v as contiguous doubles, a row of probabilities, an output row. */
static size_t ws_attention_lse(const gdp_node *node)
{
    const gdp_tensor *q = node->in[0], *k = node->in[1];
    return rw_doubles(gdp_numel(q)) + 2 * rw_doubles(gdp_numel(k)) + rw_doubles(k->shape[2]) + rw_doubles(q->shape[3]);
}

/* attention's y, and per query row the log-sum-exp of the scaled scores it saw. */
static gdp_status attention_lse_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)be, (void)stream;
    const gdp_tensor *y = node->out[0], *lse = node->out[1];
    const int bthd = gdp_attr_int(&node->attrs, "y_bthd", 0) != 0;
    gd_attn_dims a;
    if (gd_attn_dims_of(node, node->in[0], node->in[1], 3, &a, err) != GDP_OK) return GDP_ERR_INVALID;
    const int64_t group = a.H / a.Hkv;
    char *ws = rw_workspace(node, ws_attention_lse(node), err);
    if (ws == NULL) return GDP_ERR_INVALID;
    double *Q = gd_attn_take(&ws, gdp_numel(node->in[0])); // (B, H, T, D)
    double *K = gd_attn_take(&ws, gdp_numel(node->in[1])); // (B, Hkv, S, D)
    double *V = gd_attn_take(&ws, gdp_numel(node->in[2]));
    double *p = gd_attn_take(&ws, a.S), *o = gd_attn_take(&ws, a.D);
    rw_gather(node->in[0], Q);
    rw_gather(node->in[1], K);
    rw_gather(node->in[2], V);
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t h = 0; h < a.H; h++) {
            const int64_t kv = (b * a.Hkv + h / group) * a.S * a.D;
            for (int64_t t = 0; t < a.T; t++) {
                const int64_t r = (b * a.H + h) * a.T + t, row = r * a.D;
                double l = 0;
                const int64_t n = gd_attn_probs(&a, t, Q + row, K + kv, p, &l);
                for (int64_t d = 0; d < a.D; d++) o[d] = 0;
                for (int64_t s = 0; s < n; s++)
                    for (int64_t d = 0; d < a.D; d++) o[d] += p[s] * V[kv + s * a.D + d];
                const int64_t yr = y_row(&a, bthd, b, h, t);
                for (int64_t d = 0; d < a.D; d++) rw_st(y, yr + d, o[d]);
                rw_st(lse, r, l);
            }
        }
    return GDP_OK;
}

static const char *const attention_lse_cases[] = {
    "f[1,2,3,4] f[1,2,3,4] f[1,2,3,4]",
    "f[2,2,4,4] f[2,2,4,4] f[2,2,4,4] | causal=1",
    "f[1,4,3,8] f[1,2,5,8] f[1,2,5,8] | causal=1 scale=0.5",
    "f[1,2,6,4] f[1,1,2,4] f[1,1,2,4] | causal=1", /* the first rows see no key */
    "f[1,2,70,64] f[1,1,90,64] f[1,1,90,64] | causal=1",
    "f[1,2,33,128] f[1,2,33,128] f[1,2,33,128]",
    "f[2,3,5,8] f[2,1,5,8] f[2,1,5,8] | causal=1 y_bthd=1",
    "f[1,2,70,64] f[1,1,90,64] f[1,1,90,64] | causal=1 y_bthd=1",
    NULL};

/* q, k, v of f16 or bf16 with an f32 lse; shapes that backends' tensor-core paths take
 * (heads of 64 and 128, several tiles of 64 rows, grouped heads) and one they do not */
static const char *const attention_lse_mixed[] = {"bf16,bf16,bf16->bf16,f32", "f16,f16,f16->f16,f32", NULL};
static const char *const attention_lse_mixed_cases[] = {
    "bf16[1,2,3,8] bf16[1,2,3,8] bf16[1,2,3,8] | causal=1",
    "bf16[1,4,130,64] bf16[1,2,130,64] bf16[1,2,130,64] | causal=1",
    "bf16[2,2,80,128] bf16[2,1,80,128] bf16[2,1,80,128] | causal=1",
    "f16[1,2,5,8] f16[1,1,5,8] f16[1,1,5,8]",
    "f16[1,2,70,64] f16[1,1,90,64] f16[1,1,90,64] | causal=1",
    "f16[1,2,33,128] f16[1,2,33,128] f16[1,2,33,128]",
    "bf16[2,4,130,64] bf16[2,2,130,64] bf16[2,2,130,64] | causal=1 y_bthd=1",
    "f16[1,3,5,8] f16[1,3,5,8] f16[1,3,5,8] | y_bthd=1",
    NULL};

/* ---- attention_grad_lse: (dy, q, k, v, y, lse) -> dq, dk, dv ----------------------- */

static int attention_grad_lse_infer(gd_infer *c)
{
    int rc = gd_attention_check(c, &c->in[1], &c->in[2], &c->in[3]);
    if (rc != 0) return rc;
    const gd_shape *q = &c->in[1], want_lse = lse_shape(q), want_y = y_shape(q, c->attrs);
    if (shaped(c, 0, "dy", q, "(the shape and dtype of q)") ||
        shaped(c, 4, "y", &want_y, gdp_attr_int(c->attrs, "y_bthd", 0) ? "(q's dtype, laid out (B, T, H, D))"
                                                                        : "(the shape and dtype of q)") ||
        shaped(c, 5, "lse", &want_lse, "(a float per query row)"))
        return 1;
    /* dq, dk, dv: q's, k's and v's shapes, or with grad_bthd their (B, T, heads, D) */
    const int bthd = gdp_attr_int(c->attrs, "grad_bthd", 0) != 0;
    for (int i = 0; i < 3; i++) {
        c->out[i] = c->in[i + 1];
        if (bthd) c->out[i].dim[1] = c->in[i + 1].dim[2], c->out[i].dim[2] = c->in[i + 1].dim[1];
    }
    c->n_out = 3;
    return 0;
}

/* Scratch: dy, q, y, k, v as contiguous doubles, the dk and dv sums, rows of
 * probabilities, of dP and of dq. */
static size_t ws_attention_grad_lse(const gdp_node *node)
{
    const gdp_tensor *q = node->in[1], *k = node->in[2];
    return 3 * rw_doubles(gdp_numel(q)) + 4 * rw_doubles(gdp_numel(k)) + 2 * rw_doubles(k->shape[2]) +
           rw_doubles(q->shape[3]);
}

/* attention_grad's sums (attention.c), with per query row t
 *     P[t,s] = exp(scale q[t] . k[s] - lse[t])   (visible s only)
 *     delta[t] = dy[t] . y[t]
 * in place of the recomputed softmax and of sum_s P[t,s] dP[t,s]. */
static gdp_status attention_grad_lse_ref(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    (void)be, (void)stream;
    const gdp_tensor *dq = node->out[0], *dk = node->out[1], *dv = node->out[2], *lse = node->in[5];
    const int bthd = gdp_attr_int(&node->attrs, "y_bthd", 0) != 0, gbthd = gdp_attr_int(&node->attrs, "grad_bthd", 0) != 0;
    gd_attn_dims a;
    if (gd_attn_dims_of(node, node->in[1], node->in[2], 6, &a, err) != GDP_OK) return GDP_ERR_INVALID;
    const int64_t group = a.H / a.Hkv, nq = gdp_numel(node->in[1]), nkv = gdp_numel(node->in[2]);
    char *ws = rw_workspace(node, ws_attention_grad_lse(node), err);
    if (ws == NULL) return GDP_ERR_INVALID;
    double *dY = gd_attn_take(&ws, nq), *Q = gd_attn_take(&ws, nq), *Y = gd_attn_take(&ws, nq);
    double *K = gd_attn_take(&ws, nkv), *V = gd_attn_take(&ws, nkv);
    double *dK = gd_attn_take(&ws, nkv), *dV = gd_attn_take(&ws, nkv);
    double *p = gd_attn_take(&ws, a.S), *dp = gd_attn_take(&ws, a.S), *g = gd_attn_take(&ws, a.D);
    rw_gather(node->in[0], dY);
    rw_gather(node->in[1], Q);
    rw_gather(node->in[2], K);
    rw_gather(node->in[3], V);
    rw_gather(node->in[4], Y);
    for (int64_t i = 0; i < nkv; i++) dK[i] = dV[i] = 0.0;
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t h = 0; h < a.H; h++) {
            const int64_t kv = (b * a.Hkv + h / group) * a.S * a.D;
            const double *kh = K + kv, *vh = V + kv;
            double *dkh = dK + kv, *dvh = dV + kv;
            for (int64_t t = 0; t < a.T; t++) {
                const int64_t r = (b * a.H + h) * a.T + t, row = r * a.D;
                const double *qt = Q + row, *dyt = dY + row, *yt = Y + y_row(&a, bthd, b, h, t);
                const int64_t at[3] = {b, h, t};
                const double l = rw_ld(lse, rw_at(lse, at));
                const int64_t n = gd_attn_visible(&a, t);
                double delta = 0;
                for (int64_t d = 0; d < a.D; d++) delta += dyt[d] * yt[d];
                for (int64_t s = 0; s < n; s++) {
                    double dot = 0, dps = 0;
                    for (int64_t d = 0; d < a.D; d++) {
                        dot += qt[d] * kh[s * a.D + d];
                        dps += dyt[d] * vh[s * a.D + d];
                    }
                    p[s] = exp(a.scale * dot - l);
                    dp[s] = dps;
                }
                gd_attn_row_grads(&a, n, qt, dyt, kh, p, dp, delta, g, dkh, dvh);
                const int64_t qrow = y_row(&a, gbthd, b, h, t); /* dq's layout is y's, by grad_bthd */
                for (int64_t d = 0; d < a.D; d++) rw_st(dq, qrow + d, g[d]);
            }
        }
    for (int64_t b = 0; b < a.B; b++) /* dk, dv as (B, Hkv, S, D), or (B, S, Hkv, D) */
        for (int64_t hk = 0; hk < a.Hkv; hk++)
            for (int64_t s = 0; s < a.S; s++) {
                const int64_t from = ((b * a.Hkv + hk) * a.S + s) * a.D;
                const int64_t to = gbthd ? ((b * a.S + s) * a.Hkv + hk) * a.D : from;
                for (int64_t d = 0; d < a.D; d++) {
                    rw_st(dk, to + d, dK[from + d]);
                    rw_st(dv, to + d, dV[from + d]);
                }
            }
    return GDP_OK;
}

/* lse in [0.5, 2] (p[..]): the probabilities of scores in about [-2, 2] stay within a
 * few units, as real ones (<= 1) do, whatever the random y */
static const char *const attention_grad_lse_cases[] = {
    "f[1,2,3,4] f[1,2,3,4] f[1,2,3,4] f[1,2,3,4] f[1,2,3,4] p[1,2,3]",
    "f[2,2,4,4] f[2,2,4,4] f[2,2,4,4] f[2,2,4,4] f[2,2,4,4] p[2,2,4] | causal=1",
    "f[1,4,3,8] f[1,4,3,8] f[1,2,5,8] f[1,2,5,8] f[1,4,3,8] p[1,4,3] | causal=1 scale=0.5",
    "f[1,2,6,4] f[1,2,6,4] f[1,1,2,4] f[1,1,2,4] f[1,2,6,4] p[1,2,6] | causal=1",
    "f[1,2,70,64] f[1,2,70,64] f[1,1,90,64] f[1,1,90,64] f[1,2,70,64] p[1,2,70] | causal=1",
    "f[1,2,33,128] f[1,2,33,128] f[1,2,33,128] f[1,2,33,128] f[1,2,33,128] p[1,2,33]",
    "f[2,3,5,8] f[2,3,5,8] f[2,1,5,8] f[2,1,5,8] f[2,5,3,8] p[2,3,5] | causal=1 y_bthd=1",
    "f[1,2,70,64] f[1,2,70,64] f[1,1,90,64] f[1,1,90,64] f[1,70,2,64] p[1,2,70] | causal=1 y_bthd=1",
    /* dq, dk, dv written (B, T, heads, D) */
    "f[2,3,5,8] f[2,3,5,8] f[2,1,7,8] f[2,1,7,8] f[2,5,3,8] p[2,3,5] | causal=1 y_bthd=1 grad_bthd=1",
    "f[1,2,70,64] f[1,2,70,64] f[1,1,90,64] f[1,1,90,64] f[1,2,70,64] p[1,2,70] | causal=1 grad_bthd=1",
    NULL};

static const char *const attention_grad_lse_mixed[] = {"bf16,bf16,bf16,bf16,bf16,f32->bf16,bf16,bf16",
                                                       "f16,f16,f16,f16,f16,f32->f16,f16,f16", NULL};
static const char *const attention_grad_lse_mixed_cases[] = {
    "bf16[1,2,3,8] bf16[1,2,3,8] bf16[1,2,3,8] bf16[1,2,3,8] bf16[1,2,3,8] f32[1,2,3]<0.5:2 | causal=1",
    "bf16[1,4,130,64] bf16[1,4,130,64] bf16[1,2,130,64] bf16[1,2,130,64] bf16[1,4,130,64] f32[1,4,130]<0.5:2 "
    "| causal=1",
    "bf16[2,2,80,128] bf16[2,2,80,128] bf16[2,1,80,128] bf16[2,1,80,128] bf16[2,2,80,128] f32[2,2,80]<0.5:2 "
    "| causal=1",
    /* a kv head a query head at heads of 64: the key tiles see 3, 2 and 1 query tiles */
    "bf16[1,2,130,64] bf16[1,2,130,64] bf16[1,2,130,64] bf16[1,2,130,64] bf16[1,2,130,64] f32[1,2,130]<0.5:2 "
    "| causal=1",
    "f16[1,2,5,8] f16[1,2,5,8] f16[1,1,5,8] f16[1,1,5,8] f16[1,2,5,8] f32[1,2,5]<0.5:2",
    "f16[1,2,70,64] f16[1,2,70,64] f16[1,1,90,64] f16[1,1,90,64] f16[1,2,70,64] f32[1,2,70]<0.5:2 | causal=1",
    "f16[1,2,33,128] f16[1,2,33,128] f16[1,2,33,128] f16[1,2,33,128] f16[1,2,33,128] f32[1,2,33]<0.5:2",
    "bf16[2,4,130,64] bf16[2,4,130,64] bf16[2,2,130,64] bf16[2,2,130,64] bf16[2,130,4,64] f32[2,4,130]<0.5:2 "
    "| causal=1 y_bthd=1",
    "f16[1,3,5,8] f16[1,3,5,8] f16[1,3,5,8] f16[1,3,5,8] f16[1,5,3,8] f32[1,3,5]<0.5:2 | y_bthd=1",
    "bf16[2,4,130,64] bf16[2,4,130,64] bf16[2,2,130,64] bf16[2,2,130,64] bf16[2,130,4,64] f32[2,4,130]<0.5:2 "
    "| causal=1 y_bthd=1 grad_bthd=1",
    "f16[1,2,33,128] f16[1,2,33,128] f16[1,1,40,128] f16[1,1,40,128] f16[1,2,33,128] f32[1,2,33]<0.5:2 | grad_bthd=1",
    "bf16[1,3,6,8] bf16[1,3,6,8] bf16[1,3,6,8] bf16[1,3,6,8] bf16[1,3,6,8] f32[1,3,6]<0.5:2 | causal=1 grad_bthd=1",
    NULL};

GD_FAMILY(attention_lse)
{
    gd_register_op(r, &(gd_op_def){
        .name = "attention_lse", .min_in = 3, .max_in = 3, .n_out = 2, .attrs = "causal:int scale:float y_bthd:int",
        .dtypes = GD_M(GDP_F32), .ref_dtypes = GD_FLOATS64, .infer = attention_lse_infer, .ref = attention_lse_ref,
        .cases = attention_lse_cases, .mixed = attention_lse_mixed, .mixed_cases = attention_lse_mixed_cases,
        .inplace = {-1, -1, -1, -1}, .tol = 1e-7, .ref_workspace = ws_attention_lse, .ref_strided = 1,
        .cost = gd_cost_attention,
        .doc = "attention (q, k, v) -> (y, lse): y as attention's, lse (B, H, T) f32 the log-sum-exp of each query "
               "row's scaled scores (0 where it sees no key); y_bthd=1: y laid out (B, T, H, D); for attention_grad_lse "
               "(fused by graph passes)"});
    gd_register_op(r, &(gd_op_def){
        .name = "attention_grad_lse", .min_in = 6, .max_in = 6, .n_out = 3,
        .attrs = "causal:int scale:float y_bthd:int grad_bthd:int",
        .dtypes = GD_M(GDP_F32), .ref_dtypes = GD_FLOATS64, .infer = attention_grad_lse_infer,
        .ref = attention_grad_lse_ref, .cases = attention_grad_lse_cases, .mixed = attention_grad_lse_mixed,
        .mixed_cases = attention_grad_lse_mixed_cases, .inplace = {-1, -1, -1, -1}, .tol = 1e-7,
        .ref_workspace = ws_attention_grad_lse, .ref_strided = 1, .cost = gd_cost_attention_grad,
        .doc = "backward of attention from its saved statistics: (dy, q, k, v, y, lse) -> (dq, dk, dv) with "
               "P = exp(scale q k^T - lse) and dy . y per row; y_bthd=1: y laid out (B, T, H, D); grad_bthd=1: dq, dk, dv "
               "laid out (B, T, heads, D) (fused by graph passes)"});
}
