/* k_conv.c — conv2d and its two gradients (f32, NCHW) through im2col and the GEMM.
 *
 * Definitions are in src/ops/conv.c. Per sample and group, the patches each output
 * position sees become the columns of col (Cg kh kw, Ho Wo), so that
 *   forward       y_g (Cog, P)  = w_g (Cog, K) @ col (K, P)            + bias
 *   grad_input    dcol (K, P)   = w_g^T @ dy_g (Cog, P), scattered back by col2im
 *   grad_weight   dw_g (Cog, K) = sum over samples of dy_g @ col^T
 * A 1x1 convolution with stride 1 and no padding needs no im2col: col is x itself.
 *
 * Threads: with at least as many samples as threads, each thread takes whole samples (its
 * GEMMs then run inline, each thread's columns in its scratch); otherwise samples go one
 * by one with threaded GEMMs and one column buffer in the node's workspace. The weight
 * gradient sums over samples in chunks fixed by the shape (never by the thread count) and
 * adds the chunks' partial sums in order, so its bits do not depend on the threads either.
 *
 * Stride-1 convolutions (but 1x1 without padding, which is a plain GEMM here) go to
 * conv_direct.c first when the build has AVX-512: no im2col, col2im or copies of dy, the
 * taps read from a padded copy of each sample (2-2.5x faster on the CNN's layers). The
 * im2col path below takes the shapes it declines, and everything on other machines.
 */
#include "conv_direct.h"
#include "gemm.h"
#include "kernels.h"

#include <stdatomic.h>
#include <string.h>

typedef struct geom {
    int64_t N, C, H, W;
    int64_t Co, Cg, kh, kw;
    int64_t Ho, Wo;
    int64_t stride, pad, dil, groups;
    int64_t K, P, Cog;
    int direct; /* 1x1, stride 1, no padding: col == x */
} geom;

static void geom_make(geom *g, const gdp_attrs *a, const int64_t *xs, const int64_t *ws)
{
    g->stride = gdp_attr_int(a, "stride", 1);
    g->pad = gdp_attr_int(a, "padding", 0);
    g->dil = gdp_attr_int(a, "dilation", 1);
    g->groups = gdp_attr_int(a, "groups", 1);
    g->N = xs[0], g->C = xs[1], g->H = xs[2], g->W = xs[3];
    g->Co = ws[0], g->Cg = ws[1], g->kh = ws[2], g->kw = ws[3];
    g->Ho = (g->H + 2 * g->pad - g->dil * (g->kh - 1) - 1) / g->stride + 1;
    g->Wo = (g->W + 2 * g->pad - g->dil * (g->kw - 1) - 1) / g->stride + 1;
    g->K = g->Cg * g->kh * g->kw;
    g->P = g->Ho * g->Wo;
    g->Cog = g->Co / g->groups;
    g->direct = g->kh == 1 && g->kw == 1 && g->stride == 1 && g->pad == 0;
}

static gcpu_conv_shape shape_of(const geom *g)
{
    gcpu_conv_shape s = {.N = g->N, .C = g->C, .H = g->H, .W = g->W, .Co = g->Co, .Cg = g->Cg, .kh = g->kh,
                         .kw = g->kw, .Ho = g->Ho, .Wo = g->Wo, .stride = g->stride, .pad = g->pad,
                         .dil = g->dil, .groups = g->groups};
    return s;
}

/* The status of a conv_direct.c entry as this kernel's: GDP_ERR_UNSUPPORTED means "use
 * the im2col path". */
static gdp_status direct_status(const gdp_node *n, int st, gdp_err *err)
{
    if (st == GDP_OK || st == GDP_ERR_UNSUPPORTED) return (gdp_status)st;
    return gdp_fail(err, st, "%s: workspace of %zu bytes is too small", n->op, n->workspace_bytes);
}

/* The geometry of each conv op's node: x's shape and w's. */
static void geom_of(geom *g, const gdp_node *n)
{
    if (strcmp(n->op, "conv2d") == 0) geom_make(g, &n->attrs, n->in[0]->shape, n->in[1]->shape);
    else if (strcmp(n->op, "conv2d_grad_input") == 0) geom_make(g, &n->attrs, n->out[0]->shape, n->in[1]->shape);
    else geom_make(g, &n->attrs, n->in[1]->shape, n->out[0]->shape);
}

/* Samples per chunk of the weight gradient, and chunks: at most 8 chunks (enough for the
 * threads of a small machine, few partial sums to add), each holding at most 16M floats of
 * columns. Both depend on the shape only. */
static int64_t dw_chunks(const geom *g, int64_t *chunk)
{
    int64_t chunks = g->N < 8 ? g->N : 8;
    int64_t c = chunks > 0 ? (g->N + chunks - 1) / chunks : 1;
    int64_t per_sample = (g->K + g->Cog) * g->P;
    int64_t cap = per_sample > 0 ? (int64_t)16 * 1024 * 1024 / per_sample : g->N;
    if (cap < 1) cap = 1;
    if (c > cap) c = cap;
    if (c < 1) c = 1;
    *chunk = c;
    return (g->N + c - 1) / c;
}

/* The workspace: the direct path's buffers, or the im2col path's (a column buffer shared
 * by one-sample-at-a-time runs; the weight gradient's partial sums), whichever is larger:
 * one call takes one path. */
static size_t ws_conv(void *be, const gdp_node *n)
{
    (void)be;
    geom g;
    geom_of(&g, n);
    gcpu_conv_shape cs = shape_of(&g);
    size_t direct, other;
    if (strcmp(n->op, "conv2d_grad_weight") == 0) {
        int64_t chunk, chunks = dw_chunks(&g, &chunk);
        direct = gcpu_dconv_workspace(GCPU_DCONV_GRAD_WEIGHT, &cs);
        other = gcpu_ws_piece(chunks * g.Co * g.K, sizeof(float));
    } else {
        direct = gcpu_dconv_workspace(strcmp(n->op, "conv2d") == 0 ? GCPU_DCONV_FORWARD : GCPU_DCONV_GRAD_INPUT, &cs);
        other = g.direct ? 0 : gcpu_ws_piece(g.K * g.P, sizeof(float));
    }
    return direct > other ? direct : other;
}

/* Output columns [lo, hi) of a kernel tap at offset `off` (= tap*dil - pad) land inside
 * [0, W): iw = ow*stride + off. */
static void tap_range(int64_t off, int64_t stride, int64_t W, int64_t Wo, int64_t *lo, int64_t *hi)
{
    int64_t l = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int64_t h = W - off <= 0 ? 0 : (W - off + stride - 1) / stride;
    if (l > Wo) l = Wo;
    if (h > Wo) h = Wo;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

// col (K, P) with row stride ld, from x (Cg, H, W): row (c, i, j) = tap (i, j) of channel c
static void im2col(const geom *g, const float *x, float *col, int64_t ld)
{
    for (int64_t c = 0; c < g->Cg; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                float *dst = col + ((c * g->kh + i) * g->kw + j) * ld;
                int64_t lo, hi, off = j * g->dil - g->pad;
                tap_range(off, g->stride, g->W, g->Wo, &lo, &hi);
                for (int64_t oh = 0; oh < g->Ho; oh++) {
                    int64_t ih = oh * g->stride - g->pad + i * g->dil;
                    float *d = dst + oh * g->Wo;
                    if (ih < 0 || ih >= g->H) {
                        memset(d, 0, sizeof(float) * (size_t)g->Wo);
                        continue;
                    }
                    const float *row = x + (c * g->H + ih) * g->W; /* iw = ow*stride + off */
                    for (int64_t ow = 0; ow < lo; ow++) d[ow] = 0.0f;
                    if (g->stride == 1 && hi > lo) memcpy(d + lo, row + lo + off, sizeof(float) * (size_t)(hi - lo));
                    else
                        for (int64_t ow = lo; ow < hi; ow++) d[ow] = row[ow * g->stride + off];
                    for (int64_t ow = hi; ow < g->Wo; ow++) d[ow] = 0.0f;
                }
            }
}

// dx (Cg, H, W) += adjoint of im2col applied to dcol (K, P)
static void col2im(const geom *g, const float *dcol, float *dx)
{
    for (int64_t c = 0; c < g->Cg; c++)
        for (int64_t i = 0; i < g->kh; i++)
            for (int64_t j = 0; j < g->kw; j++) {
                const float *src = dcol + ((c * g->kh + i) * g->kw + j) * g->P;
                int64_t lo, hi, off = j * g->dil - g->pad;
                tap_range(off, g->stride, g->W, g->Wo, &lo, &hi);
                for (int64_t oh = 0; oh < g->Ho; oh++) {
                    int64_t ih = oh * g->stride - g->pad + i * g->dil;
                    if (ih < 0 || ih >= g->H) continue;
                    float *row = dx + (c * g->H + ih) * g->W;
                    const float *s = src + oh * g->Wo;
                    for (int64_t ow = lo; ow < hi; ow++) row[ow * g->stride + off] += s[ow];
                }
            }
}

typedef struct conv_job {
    const gdp_node *n;
    geom g;
    float *col;          /* for the one-sample-at-a-time path; NULL: per-thread scratch */
    atomic_int status;
    /* grad_weight */
    int64_t chunk;       /* samples per chunk */
    float *partial;      /* (chunks, Co, K) */
} conv_job;

static void job_fail(conv_job *j, int st)
{
    atomic_store(&j->status, st);
}

static float *col_buffer(conv_job *j, int tid, size_t floats)
{
    if (j->col != NULL) return j->col;
    float *p = gcpu_scratch(tid, GCPU_SLOT_KERNEL, sizeof(float) * floats);
    if (p == NULL) job_fail(j, GDP_ERR_NOMEM);
    return p;
}

/* Runs fn over samples: whole samples per thread when there are enough of them, else one
 * at a time with a shared column buffer (the node's workspace) and threaded GEMMs. */
static gdp_status over_samples(conv_job *j, gcpu_range_fn fn, size_t col_floats, gdp_err *err)
{
    atomic_init(&j->status, GDP_OK);
    if (j->g.N >= gcpu_pool_threads()) {
        gcpu_parallel_for(j->g.N, fn, j);
    } else if (j->g.direct) {
        for (int64_t s = 0; s < j->g.N; s++) fn(j, s, s + 1, 0);
    } else {
        if (j->n->workspace == NULL || j->n->workspace_bytes < sizeof(float) * col_floats)
            return gdp_fail(err, GDP_ERR_INVALID, "%s: workspace of %zu bytes is too small for im2col", j->n->op,
                            j->n->workspace_bytes);
        j->col = j->n->workspace;
        for (int64_t s = 0; s < j->g.N; s++) fn(j, s, s + 1, 0);
        j->col = NULL;
    }
    int st = atomic_load(&j->status);
    if (st != GDP_OK) return gdp_fail(err, st, "%s: %s", j->n->op, st == GDP_ERR_NOMEM ? "out of memory" : "GEMM failed");
    return GDP_OK;
}

/* ---- conv2d ---------------------------------------------------------------------------------- */

static void conv_fwd_samples(void *ctx, int64_t begin, int64_t end, int tid)
{
    conv_job *j = ctx;
    const geom *g = &j->g;
    const gdp_tensor *x = j->n->in[0], *w = j->n->in[1], *b = j->n->n_in > 2 ? j->n->in[2] : NULL;
    float *col = g->direct ? NULL : col_buffer(j, tid, (size_t)(g->K * g->P));
    if (!g->direct && col == NULL) return;
    for (int64_t s = begin; s < end; s++)
        for (int64_t gr = 0; gr < g->groups; gr++) {
            const float *xs = (const float *)x->data + (s * g->C + gr * g->Cg) * g->H * g->W;
            float *y = (float *)j->n->out[0]->data + (s * g->Co + gr * g->Cog) * g->P;
            if (!g->direct) im2col(g, xs, col, g->P);
            int st = gcpu_sgemm(0, 0, g->Cog, g->P, g->K, 1.0f, (const float *)w->data + gr * g->Cog * g->K, g->K,
                                g->direct ? xs : col, g->P, 0.0f, y, g->P);
            if (st != GDP_OK) job_fail(j, st);
            if (b != NULL)
                for (int64_t o = 0; o < g->Cog; o++) {
                    float bv = ((const float *)b->data)[gr * g->Cog + o];
                    for (int64_t p = 0; p < g->P; p++) y[o * g->P + p] += bv;
                }
        }
}

// y (N, Co, Ho, Wo) = conv(x (N, C, H, W), w (Co, Cg, kh, kw)) + b (Co)
static gdp_status k_conv2d(void *backend, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)backend; (void)stream;
    conv_job j = {.n = n};
    geom_make(&j.g, &n->attrs, n->in[0]->shape, n->in[1]->shape);
    gcpu_conv_shape s = shape_of(&j.g);
    gdp_status st = direct_status(n, gcpu_dconv_forward(&s, n->in[0]->data, n->in[1]->data,
                                                        n->n_in > 2 ? n->in[2]->data : NULL, n->out[0]->data,
                                                        n->workspace, n->workspace_bytes), err);
    if (st != GDP_ERR_UNSUPPORTED) return st;
    return over_samples(&j, conv_fwd_samples, (size_t)(j.g.K * j.g.P), err);
}

/* ---- conv2d_grad_input ------------------------------------------------------------------------ */

static void conv_dx_samples(void *ctx, int64_t begin, int64_t end, int tid)
{
    conv_job *j = ctx;
    const geom *g = &j->g;
    const gdp_tensor *dy = j->n->in[0], *w = j->n->in[1];
    float *dcol = g->direct ? NULL : col_buffer(j, tid, (size_t)(g->K * g->P));
    if (!g->direct && dcol == NULL) return;
    for (int64_t s = begin; s < end; s++) {
        float *dx = (float *)j->n->out[0]->data + s * g->C * g->H * g->W;
        if (!g->direct) memset(dx, 0, sizeof(float) * (size_t)(g->C * g->H * g->W));
        for (int64_t gr = 0; gr < g->groups; gr++) {
            const float *dys = (const float *)dy->data + (s * g->Co + gr * g->Cog) * g->P;
            float *dxg = dx + gr * g->Cg * g->H * g->W;
            int st = gcpu_sgemm(1, 0, g->K, g->P, g->Cog, 1.0f, (const float *)w->data + gr * g->Cog * g->K, g->K,
                                dys, g->P, 0.0f, g->direct ? dxg : dcol, g->P);
            if (st != GDP_OK) job_fail(j, st);
            if (!g->direct) col2im(g, dcol, dxg);
        }
    }
}

// dx (N, C, H, W) = col2im(w_g^T @ dy_g), per sample and group
static gdp_status k_conv2d_grad_input(void *backend, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)backend; (void)stream;
    conv_job j = {.n = n};
    geom_make(&j.g, &n->attrs, n->out[0]->shape, n->in[1]->shape);
    gcpu_conv_shape s = shape_of(&j.g);
    gdp_status st = direct_status(n, gcpu_dconv_grad_input(&s, n->in[0]->data, n->in[1]->data, n->out[0]->data,
                                                           n->workspace, n->workspace_bytes), err);
    if (st != GDP_ERR_UNSUPPORTED) return st;
    return over_samples(&j, conv_dx_samples, (size_t)(j.g.K * j.g.P), err);
}

/* ---- conv2d_grad_weight ----------------------------------------------------------------------- */

/* Chunk c covers samples [c*chunk, (c+1)*chunk): their columns side by side form one
 * contraction of length S*P, so each chunk is one GEMM per group into its partial sum. */
static void conv_dw_chunks(void *ctx, int64_t begin, int64_t end, int tid)
{
    conv_job *j = ctx;
    const geom *g = &j->g;
    const gdp_tensor *dy = j->n->in[0], *x = j->n->in[1];
    int64_t S = j->chunk, L = S * g->P;
    float *buf = gcpu_scratch(tid, GCPU_SLOT_KERNEL, sizeof(float) * (size_t)((g->K + g->Cog) * L));
    if (buf == NULL) {
        job_fail(j, GDP_ERR_NOMEM);
        return;
    }
    float *colc = buf, *dyc = buf + g->K * L; /* (K, L) and (Cog, L) */
    for (int64_t c = begin; c < end; c++) {
        int64_t s0 = c * S, s1 = s0 + S < g->N ? s0 + S : g->N, Lc = (s1 - s0) * g->P;
        for (int64_t gr = 0; gr < g->groups; gr++) {
            for (int64_t s = s0; s < s1; s++) {
                const float *xs = (const float *)x->data + (s * g->C + gr * g->Cg) * g->H * g->W;
                const float *dys = (const float *)dy->data + (s * g->Co + gr * g->Cog) * g->P;
                if (g->direct)
                    for (int64_t k = 0; k < g->K; k++)
                        memcpy(colc + k * Lc + (s - s0) * g->P, xs + k * g->P, sizeof(float) * (size_t)g->P);
                else
                    im2col(g, xs, colc + (s - s0) * g->P, Lc);
                for (int64_t o = 0; o < g->Cog; o++)
                    memcpy(dyc + o * Lc + (s - s0) * g->P, dys + o * g->P, sizeof(float) * (size_t)g->P);
            }
            float *part = j->partial + (c * g->Co + gr * g->Cog) * g->K;
            int st = gcpu_sgemm(0, 1, g->Cog, g->K, Lc, 1.0f, dyc, Lc, colc, Lc, 0.0f, part, g->K);
            if (st != GDP_OK) job_fail(j, st);
        }
    }
}

typedef struct sum_job {
    const float *partial;
    float *out;
    int64_t n, chunks;
} sum_job;

// out[i] = sum over chunks c, in order, of partial[c][i]
static void sum_partials(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const sum_job *s = ctx;
    for (int64_t i = begin; i < end; i++) {
        float acc = s->partial[i];
        for (int64_t c = 1; c < s->chunks; c++) acc += s->partial[c * s->n + i];
        s->out[i] = acc;
    }
}

// dw (Co, Cg, kh, kw) = sum over samples of dy_g (Cog, P) @ col^T (P, K)
static gdp_status k_conv2d_grad_weight(void *backend, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)backend; (void)stream;
    conv_job j = {.n = n};
    geom *g = &j.g;
    geom_make(g, &n->attrs, n->in[1]->shape, n->out[0]->shape);
    gcpu_conv_shape cs = shape_of(g);
    gdp_status dst = direct_status(n, gcpu_dconv_grad_weight(&cs, n->in[0]->data, n->in[1]->data, n->out[0]->data,
                                                             n->workspace, n->workspace_bytes), err);
    if (dst != GDP_ERR_UNSUPPORTED) return dst;
    atomic_init(&j.status, GDP_OK);
    int64_t chunks = dw_chunks(g, &j.chunk), nw = g->Co * g->K;
    if (chunks * nw > 0 && (n->workspace == NULL || n->workspace_bytes < sizeof(float) * (size_t)(chunks * nw)))
        return gdp_fail(err, GDP_ERR_INVALID, "%s: workspace of %zu bytes is too small for partial sums", n->op,
                        n->workspace_bytes);
    j.partial = n->workspace;
    gcpu_parallel_for(chunks, conv_dw_chunks, &j);
    int st = atomic_load(&j.status);
    if (st == GDP_OK) {
        sum_job s = {.partial = j.partial, .out = n->out[0]->data, .n = nw, .chunks = chunks};
        gcpu_parallel_for_grain(nw, GCPU_GRAIN_ELEMS, sum_partials, &s);
    }
    if (st != GDP_OK) return gdp_fail(err, st, "%s: %s", n->op, st == GDP_ERR_NOMEM ? "out of memory" : "GEMM failed");
    return GDP_OK;
}

static int s_conv(void *backend, const gdp_node *n)
{
    (void)backend;
    return gcpu_all_f32(n);
}

/* f16 and bf16: widened to f32 around the f32 kernels, as the reference does (k_half.c) */
GCPU_HALF_OF(k_conv2d, s_conv, ws_conv)
GCPU_HALF_OF(k_conv2d_grad_input, s_conv, ws_conv)
GCPU_HALF_OF(k_conv2d_grad_weight, s_conv, ws_conv)

gdp_status gcpu_register_conv(gcpu_regctx *r, gdp_err *err)
{
    static const struct {
        const char *op;
        gcpu_floats k;
    } ks[] = {
        {"conv2d", GCPU_FLOATS_INIT(k_conv2d, s_conv, ws_conv)},
        {"conv2d_grad_input", GCPU_FLOATS_INIT(k_conv2d_grad_input, s_conv, ws_conv)},
        {"conv2d_grad_weight", GCPU_FLOATS_INIT(k_conv2d_grad_weight, s_conv, ws_conv)},
    };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        gdp_status s = gcpu_reg_floats(r, ks[i].op, ks[i].k, 0, NULL, err);
        if (s != GDP_OK) return s;
    }
    return GDP_OK;
}
