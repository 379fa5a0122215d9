/* k_pool.c — max_pool2d, avg_pool2d and their backward ops (f32, NCHW; f16 and bf16
 * through k_half.c), threaded over (n, c) planes.
 *
 * Definitions are in src/ops/pool.c: padding never wins a max window, the first maximum
 * in row-major window order wins, a NaN wins so that it propagates; the gradient adds each
 * dy at its window's winner. An average divides by kernel^2, padding counted as zeros.
 * Sums are in double in the reference's order, so results match it to the bit. Each plane
 * is one thread's, so overlapping windows add up in the same order whatever the thread
 * count.
 */
#include "kernels.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

typedef struct pgeom {
    int64_t planes, H, W, k, s, p, Ho, Wo;
} pgeom;

static void pgeom_make(pgeom *g, const gdp_attrs *a, const int64_t *xs)
{
    g->k = gdp_attr_int(a, "kernel", 0);
    g->s = gdp_attr_int(a, "stride", 0);
    if (g->s == 0) g->s = g->k;
    g->p = gdp_attr_int(a, "padding", 0);
    g->planes = xs[0] * xs[1];
    g->H = xs[2];
    g->W = xs[3];
    g->Ho = (g->H + 2 * g->p - g->k) / g->s + 1;
    g->Wo = (g->W + 2 * g->p - g->k) / g->s + 1;
}

/* Index in the plane of the winner of window (oh, ow). */
static inline int64_t window_argmax(const float *x, const pgeom *g, int64_t oh, int64_t ow)
{
    int64_t best_i = -1;
    float best = 0.0f;
    int64_t i0 = oh * g->s - g->p, j0 = ow * g->s - g->p;
    int64_t ia = i0 < 0 ? 0 : i0, ib = i0 + g->k > g->H ? g->H : i0 + g->k;
    int64_t ja = j0 < 0 ? 0 : j0, jb = j0 + g->k > g->W ? g->W : j0 + g->k;
    for (int64_t ih = ia; ih < ib; ih++)
        for (int64_t iw = ja; iw < jb; iw++) {
            float v = x[ih * g->W + iw];
            if (best_i < 0 || v > best || (isnan(v) && !isnan(best))) {
                best = v;
                best_i = ih * g->W + iw;
            }
        }
    return best_i;
}

typedef struct pool_job {
    const gdp_node *n;
    pgeom g;
    atomic_int failed;
} pool_job;

static void maxpool_planes(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const pool_job *j = ctx;
    const pgeom *g = &j->g;
    const float *x = j->n->in[0].data;
    float *y = j->n->out[0].data;
    for (int64_t pl = begin; pl < end; pl++) {
        const float *xp = x + pl * g->H * g->W;
        float *yp = y + pl * g->Ho * g->Wo;
        if (g->k == 2 && g->s == 2 && g->p == 0) {
            /* the common case, without the general window walk (same winner rule) */
            for (int64_t oh = 0; oh < g->Ho; oh++) {
                const float *r0 = xp + 2 * oh * g->W, *r1 = r0 + g->W;
                for (int64_t ow = 0; ow < g->Wo; ow++) {
                    float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
                    float m = a;
                    if (b > m || (isnan(b) && !isnan(m))) m = b;
                    if (c > m || (isnan(c) && !isnan(m))) m = c;
                    if (d > m || (isnan(d) && !isnan(m))) m = d;
                    yp[oh * g->Wo + ow] = m;
                }
            }
            continue;
        }
        for (int64_t oh = 0; oh < g->Ho; oh++)
            for (int64_t ow = 0; ow < g->Wo; ow++) yp[oh * g->Wo + ow] = xp[window_argmax(xp, g, oh, ow)];
    }
}

// y (N, C, Ho, Wo) = max over each window of x (N, C, H, W)
static gdp_status k_max_pool2d(void *backend, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)backend; (void)stream; (void)err;
    pool_job j = {.n = n};
    atomic_init(&j.failed, 0);
    pgeom_make(&j.g, &n->attrs, n->in[0].shape);
    int64_t grain = GCPU_GRAIN_ELEMS / (j.g.H * j.g.W + 1) + 1;
    gcpu_parallel_for_grain(j.g.planes, grain, maxpool_planes, &j);
    return GDP_OK;
}

/* Overlapping windows add several dy into one dx: the sums are kept in double and rounded
 * once, in the reference's order, so that the result is the reference's to the bit. */
static void maxpool_grad_planes(void *ctx, int64_t begin, int64_t end, int tid)
{
    const pool_job *j = ctx;
    const pgeom *g = &j->g;
    const float *dy = j->n->in[0].data, *x = j->n->in[1].data;
    float *dx = j->n->out[0].data;
    int overlap = g->s < g->k;
    double *acc = overlap ? gcpu_scratch(tid, GCPU_SLOT_KERNEL, sizeof(double) * (size_t)(g->H * g->W)) : NULL;
    if (overlap && acc == NULL) {
        atomic_store(&((pool_job *)ctx)->failed, 1);
        return;
    }
    for (int64_t pl = begin; pl < end; pl++) {
        const float *xp = x + pl * g->H * g->W, *dyp = dy + pl * g->Ho * g->Wo;
        float *dxp = dx + pl * g->H * g->W;
        if (g->k == 2 && g->s == 2 && g->p == 0) { /* the common case, as in the forward */
            memset(dxp, 0, sizeof(float) * (size_t)(g->H * g->W));
            for (int64_t oh = 0; oh < g->Ho; oh++) {
                const float *r0 = xp + 2 * oh * g->W, *r1 = r0 + g->W;
                for (int64_t ow = 0; ow < g->Wo; ow++) {
                    int64_t i0 = 2 * oh * g->W + 2 * ow, at = i0;
                    float m = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
                    if (b > m || (isnan(b) && !isnan(m))) m = b, at = i0 + 1;
                    if (c > m || (isnan(c) && !isnan(m))) m = c, at = i0 + g->W;
                    if (d > m || (isnan(d) && !isnan(m))) m = d, at = i0 + g->W + 1;
                    dxp[at] = 0.0f + dyp[oh * g->Wo + ow];
                }
            }
            continue;
        }
        if (!overlap) { /* each dx receives at most one dy: exact in float */
            memset(dxp, 0, sizeof(float) * (size_t)(g->H * g->W));
            for (int64_t oh = 0; oh < g->Ho; oh++)
                for (int64_t ow = 0; ow < g->Wo; ow++) dxp[window_argmax(xp, g, oh, ow)] = 0.0f + dyp[oh * g->Wo + ow]; /* +0 for -0, as 0.0 + dy */
            continue;
        }
        for (int64_t i = 0; i < g->H * g->W; i++) acc[i] = 0.0;
        for (int64_t oh = 0; oh < g->Ho; oh++)
            for (int64_t ow = 0; ow < g->Wo; ow++) acc[window_argmax(xp, g, oh, ow)] += dyp[oh * g->Wo + ow];
        for (int64_t i = 0; i < g->H * g->W; i++) dxp[i] = (float)acc[i];
    }
}

// dx (N, C, H, W): each dy (N, C, Ho, Wo) added at its window's winner
static gdp_status k_max_pool2d_grad(void *backend, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)backend; (void)stream;
    pool_job j = {.n = n};
    atomic_init(&j.failed, 0);
    pgeom_make(&j.g, &n->attrs, n->in[1].shape);
    int64_t grain = GCPU_GRAIN_ELEMS / (j.g.H * j.g.W + 1) + 1;
    gcpu_parallel_for_grain(j.g.planes, grain, maxpool_grad_planes, &j);
    if (atomic_load(&j.failed)) return gdp_fail(err, GDP_ERR_NOMEM, "%s: out of memory", n->op);
    return GDP_OK;
}

/* ---- avg_pool2d, avg_pool2d_grad -------------------------------------------------------- */

static void avgpool_planes(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const pool_job *j = ctx;
    const pgeom *g = &j->g;
    const float *x = j->n->in[0].data;
    float *y = j->n->out[0].data;
    double area = (double)(g->k * g->k);
    for (int64_t pl = begin; pl < end; pl++) {
        const float *xp = x + pl * g->H * g->W;
        float *yp = y + pl * g->Ho * g->Wo;
        for (int64_t oh = 0; oh < g->Ho; oh++) {
            int64_t i0 = oh * g->s - g->p, ia = i0 < 0 ? 0 : i0, ib = i0 + g->k > g->H ? g->H : i0 + g->k;
            for (int64_t ow = 0; ow < g->Wo; ow++) {
                int64_t j0 = ow * g->s - g->p, ja = j0 < 0 ? 0 : j0, jb = j0 + g->k > g->W ? g->W : j0 + g->k;
                double sum = 0;
                for (int64_t ih = ia; ih < ib; ih++)
                    for (int64_t iw = ja; iw < jb; iw++) sum += xp[ih * g->W + iw];
                yp[oh * g->Wo + ow] = (float)(sum / area);
            }
        }
    }
}

// y (N, C, Ho, Wo) = sum over each window of x / kernel^2
static gdp_status k_avg_pool2d(void *backend, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)backend; (void)stream; (void)err;
    pool_job j = {.n = n};
    atomic_init(&j.failed, 0);
    pgeom_make(&j.g, &n->attrs, n->in[0].shape);
    int64_t grain = GCPU_GRAIN_ELEMS / (j.g.H * j.g.W + 1) + 1;
    gcpu_parallel_for_grain(j.g.planes, grain, avgpool_planes, &j);
    return GDP_OK;
}

/* Each dy / kernel^2 is added to the real elements of its window in a double plane, in
 * the reference's order, and the plane rounded once. */
static void avgpool_grad_planes(void *ctx, int64_t begin, int64_t end, int tid)
{
    const pool_job *j = ctx;
    const pgeom *g = &j->g;
    const float *dy = j->n->in[0].data;
    float *dx = j->n->out[0].data;
    double area = (double)(g->k * g->k);
    double *acc = gcpu_scratch(tid, GCPU_SLOT_KERNEL, sizeof(double) * (size_t)(g->H * g->W));
    if (acc == NULL) {
        atomic_store(&((pool_job *)ctx)->failed, 1);
        return;
    }
    for (int64_t pl = begin; pl < end; pl++) {
        const float *dyp = dy + pl * g->Ho * g->Wo;
        for (int64_t i = 0; i < g->H * g->W; i++) acc[i] = 0.0;
        for (int64_t oh = 0; oh < g->Ho; oh++) {
            int64_t i0 = oh * g->s - g->p, ia = i0 < 0 ? 0 : i0, ib = i0 + g->k > g->H ? g->H : i0 + g->k;
            for (int64_t ow = 0; ow < g->Wo; ow++) {
                int64_t j0 = ow * g->s - g->p, ja = j0 < 0 ? 0 : j0, jb = j0 + g->k > g->W ? g->W : j0 + g->k;
                double d = dyp[oh * g->Wo + ow] / area;
                for (int64_t ih = ia; ih < ib; ih++)
                    for (int64_t iw = ja; iw < jb; iw++) acc[ih * g->W + iw] += d;
            }
        }
        float *dxp = dx + pl * g->H * g->W;
        for (int64_t i = 0; i < g->H * g->W; i++) dxp[i] = (float)acc[i];
    }
}

// dx (N, C, H, W) from dy (N, C, Ho, Wo); dx's shape is the output's (attr input_shape)
static gdp_status k_avg_pool2d_grad(void *backend, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)backend; (void)stream;
    if (n->out[0].ndim != 4) return gdp_fail(err, GDP_ERR_INVALID, "%s: dx must be (N, C, H, W)", n->op);
    pool_job j = {.n = n};
    atomic_init(&j.failed, 0);
    pgeom_make(&j.g, &n->attrs, n->out[0].shape);
    int64_t grain = GCPU_GRAIN_ELEMS / (j.g.H * j.g.W + 1) + 1;
    gcpu_parallel_for_grain(j.g.planes, grain, avgpool_grad_planes, &j);
    if (atomic_load(&j.failed)) return gdp_fail(err, GDP_ERR_NOMEM, "%s: out of memory", n->op);
    return GDP_OK;
}

static int s_pool(void *backend, const gdp_node *n)
{
    (void)backend;
    return gcpu_all_f32(n);
}

GCPU_HALF_OF(k_max_pool2d, s_pool)
GCPU_HALF_OF(k_max_pool2d_grad, s_pool)
GCPU_HALF_OF(k_avg_pool2d, s_pool)
GCPU_HALF_OF(k_avg_pool2d_grad, s_pool)

gdp_status gcpu_register_pool(const gdp_host *host, gdp_err *err)
{
    gdp_status s = GCPU_REG_FLOATS(host, "max_pool2d", k_max_pool2d, s_pool, NULL, err);
    if (s == GDP_OK) s = GCPU_REG_FLOATS(host, "max_pool2d_grad", k_max_pool2d_grad, s_pool, NULL, err);
    if (s == GDP_OK) s = GCPU_REG_FLOATS(host, "avg_pool2d", k_avg_pool2d, s_pool, NULL, err);
    if (s == GDP_OK) s = GCPU_REG_FLOATS(host, "avg_pool2d_grad", k_avg_pool2d_grad, s_pool, NULL, err);
    return s;
}
