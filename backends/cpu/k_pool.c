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

/* The 2x2, stride 2 windows of one pair of rows (r0, r1), without branches: b replaces the
 * running max m when b > m, or when b is NaN and m is not, which is the winner rule of
 * window_argmax (first maximum in row-major order, first NaN). max2x2_row writes the
 * maxima; max2x2_grad_row writes dx rows d0, d1 (W wide): dy at each window's winner (+0
 * for -0, as the reference's 0.0 + dy), zero elsewhere, including a last column no window
 * covers. On random data the old branchy loops mispredicted about once a window, which
 * made the two pooling ops a quarter of the CNN's training step. */
#if defined(__AVX512F__) && !defined(GCPU_FORCE_GENERIC)
/* With AVX-512 a row of up to 16 windows is one vector step, with masked loads and stores
 * at the end of the row (rows here are short, 7 or 14 windows, so that the compiler's
 * vector loop would leave most of them to its scalar, branchy epilogue). Pairs of inputs
 * are split into even and odd columns with a two-source permute. */
#include <immintrin.h>

static inline __mmask16 beats16(__m512 b, __m512 m)
{
    return _mm512_cmp_ps_mask(b, m, _CMP_GT_OQ) |
           (_mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q) & _mm512_cmp_ps_mask(m, m, _CMP_ORD_Q));
}

static inline __mmask16 mask16(int64_t n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

/* Even and odd columns of 2n (n <= 16) floats at p. */
static inline void load_pairs(const float *p, int64_t n, __m512 *even, __m512 *odd)
{
    const __m512i ie = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i io = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    __m512 lo = _mm512_maskz_loadu_ps(mask16(2 * n), p);
    __m512 hi = _mm512_maskz_loadu_ps(mask16(2 * n - 16 > 0 ? 2 * n - 16 : 0), p + 16);
    *even = _mm512_permutex2var_ps(lo, ie, hi);
    *odd = _mm512_permutex2var_ps(lo, io, hi);
}

/* Interleaves even and odd into 2n floats at p. */
static inline void store_pairs(float *p, int64_t n, __m512 even, __m512 odd)
{
    const __m512i il = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i ih = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    _mm512_mask_storeu_ps(p, mask16(2 * n), _mm512_permutex2var_ps(even, il, odd));
    if (n > 8) _mm512_mask_storeu_ps(p + 16, mask16(2 * n - 16), _mm512_permutex2var_ps(even, ih, odd));
}

static void max2x2_row(const float *restrict r0, const float *restrict r1, float *restrict y, int64_t Wo)
{
    for (int64_t o = 0; o < Wo; o += 16) {
        int64_t n = Wo - o < 16 ? Wo - o : 16;
        __m512 a, b, c, d;
        load_pairs(r0 + 2 * o, n, &a, &b);
        load_pairs(r1 + 2 * o, n, &c, &d);
        __m512 m = a;
        m = _mm512_mask_mov_ps(m, beats16(b, m), b);
        m = _mm512_mask_mov_ps(m, beats16(c, m), c);
        m = _mm512_mask_mov_ps(m, beats16(d, m), d);
        _mm512_mask_storeu_ps(y + o, mask16(n), m);
    }
}

static void max2x2_grad_row(const float *restrict r0, const float *restrict r1, const float *restrict dy,
                            float *restrict d0, float *restrict d1, int64_t Wo, int64_t W)
{
    for (int64_t o = 0; o < Wo; o += 16) {
        int64_t n = Wo - o < 16 ? Wo - o : 16;
        __m512 a, b, c, d;
        load_pairs(r0 + 2 * o, n, &a, &b);
        load_pairs(r1 + 2 * o, n, &c, &d);
        __m512 m = a;
        __mmask16 kb = beats16(b, m);
        m = _mm512_mask_mov_ps(m, kb, b);
        __mmask16 kc = beats16(c, m);
        m = _mm512_mask_mov_ps(m, kc, c);
        __mmask16 kd = beats16(d, m);
        /* one-hot winner masks: the last test that passed */
        __mmask16 wd = kd, wc = kc & ~kd, wb = kb & ~kc & ~kd, wa = ~(kb | kc | kd);
        __m512 v = _mm512_add_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(mask16(n), dy + o));
        store_pairs(d0 + 2 * o, n, _mm512_maskz_mov_ps(wa, v), _mm512_maskz_mov_ps(wb, v));
        store_pairs(d1 + 2 * o, n, _mm512_maskz_mov_ps(wc, v), _mm512_maskz_mov_ps(wd, v));
    }
    for (int64_t iw = 2 * Wo; iw < W; iw++) d0[iw] = d1[iw] = 0.0f;
}
#else
/* Plain loops that gcc vectorizes: the conditions are written with || and && on float
 * comparisons and the winner's position is kept as a float, the form gcc 12 if-converts
 * (it gives up on int masks combined with &). */
#define BEATS(b, m) ((b) > (m) || ((b) != (b) && (m) == (m)))

static void max2x2_row(const float *restrict r0, const float *restrict r1, float *restrict y, int64_t Wo)
{
    for (int64_t ow = 0; ow < Wo; ow++) {
        float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
        float m = a;
        m = BEATS(b, m) ? b : m;
        m = BEATS(c, m) ? c : m;
        m = BEATS(d, m) ? d : m;
        y[ow] = m;
    }
}

static void max2x2_grad_row(const float *restrict r0, const float *restrict r1, const float *restrict dy,
                            float *restrict d0, float *restrict d1, int64_t Wo, int64_t W)
{
    for (int64_t ow = 0; ow < Wo; ow++) {
        float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
        float m = a, w = 0.0f;
        int tb = BEATS(b, m);
        m = tb ? b : m;
        w = tb ? 1.0f : w;
        int tc = BEATS(c, m);
        m = tc ? c : m;
        w = tc ? 2.0f : w;
        w = BEATS(d, m) ? 3.0f : w;
        float v = 0.0f + dy[ow];
        d0[2 * ow] = w == 0.0f ? v : 0.0f;
        d0[2 * ow + 1] = w == 1.0f ? v : 0.0f;
        d1[2 * ow] = w == 2.0f ? v : 0.0f;
        d1[2 * ow + 1] = w == 3.0f ? v : 0.0f;
    }
    for (int64_t iw = 2 * Wo; iw < W; iw++) d0[iw] = d1[iw] = 0.0f;
}
#undef BEATS
#endif

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
    const float *x = j->n->in[0]->data;
    float *y = j->n->out[0]->data;
    for (int64_t pl = begin; pl < end; pl++) {
        const float *xp = x + pl * g->H * g->W;
        float *yp = y + pl * g->Ho * g->Wo;
        if (g->k == 2 && g->s == 2 && g->p == 0) {
            /* the common case, without the general window walk (same winner rule) */
            for (int64_t oh = 0; oh < g->Ho; oh++)
                max2x2_row(xp + 2 * oh * g->W, xp + (2 * oh + 1) * g->W, yp + oh * g->Wo, g->Wo);
            continue;
        }
        for (int64_t oh = 0; oh < g->Ho; oh++)
            for (int64_t ow = 0; ow < g->Wo; ow++) yp[oh * g->Wo + ow] = xp[window_argmax(xp, g, oh, ow)];
    }
}

/* Runs fn over the N*C planes of a pooling node whose image shape (N, C, H, W) is xs: the
 * plane is the unit of work, so every output is computed by one thread in a fixed order. */
static gdp_status run_planes(const gdp_node *n, const int64_t *xs, gcpu_range_fn fn, gdp_err *err)
{
    pool_job j = {.n = n};
    atomic_init(&j.failed, 0);
    pgeom_make(&j.g, &n->attrs, xs);
    int64_t grain = GCPU_GRAIN_ELEMS / (j.g.H * j.g.W + 1) + 1;
    gcpu_parallel_for_grain(j.g.planes, grain, fn, &j);
    if (atomic_load(&j.failed)) return gdp_fail(err, GDP_ERR_NOMEM, "%s: out of memory", n->op);
    return GDP_OK;
}

// y (N, C, Ho, Wo) = max over each window of x (N, C, H, W)
static gdp_status k_max_pool2d(void *backend, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)backend; (void)stream;
    return run_planes(n, n->in[0]->shape, maxpool_planes, err);
}

/* Overlapping windows add several dy into one dx: the sums are kept in double and rounded
 * once, in the reference's order, so that the result is the reference's to the bit. */
static void maxpool_grad_planes(void *ctx, int64_t begin, int64_t end, int tid)
{
    const pool_job *j = ctx;
    const pgeom *g = &j->g;
    const float *dy = j->n->in[0]->data, *x = j->n->in[1]->data;
    float *dx = j->n->out[0]->data;
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
            for (int64_t oh = 0; oh < g->Ho; oh++)
                max2x2_grad_row(xp + 2 * oh * g->W, xp + (2 * oh + 1) * g->W, dyp + oh * g->Wo, dxp + 2 * oh * g->W,
                                dxp + (2 * oh + 1) * g->W, g->Wo, g->W);
            if (g->H > 2 * g->Ho) /* rows no window covers */
                memset(dxp + 2 * g->Ho * g->W, 0, sizeof(float) * (size_t)((g->H - 2 * g->Ho) * g->W));
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
    return run_planes(n, n->in[1]->shape, maxpool_grad_planes, err);
}

/* ---- avg_pool2d, avg_pool2d_grad -------------------------------------------------------- */

static void avgpool_planes(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const pool_job *j = ctx;
    const pgeom *g = &j->g;
    const float *x = j->n->in[0]->data;
    float *y = j->n->out[0]->data;
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
    (void)backend; (void)stream;
    return run_planes(n, n->in[0]->shape, avgpool_planes, err);
}

/* Each dy / kernel^2 is added to the real elements of its window in a double plane, in
 * the reference's order, and the plane rounded once. */
static void avgpool_grad_planes(void *ctx, int64_t begin, int64_t end, int tid)
{
    const pool_job *j = ctx;
    const pgeom *g = &j->g;
    const float *dy = j->n->in[0]->data;
    float *dx = j->n->out[0]->data;
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
    if (n->out[0]->ndim != 4) return gdp_fail(err, GDP_ERR_INVALID, "%s: dx must be (N, C, H, W)", n->op);
    return run_planes(n, n->out[0]->shape, avgpool_grad_planes, err);
}

static int s_pool(void *backend, const gdp_node *n)
{
    (void)backend;
    return gcpu_all_f32(n);
}

GCPU_HALF_OF(k_max_pool2d, s_pool, NULL)
GCPU_HALF_OF(k_max_pool2d_grad, s_pool, NULL)
GCPU_HALF_OF(k_avg_pool2d, s_pool, NULL)
GCPU_HALF_OF(k_avg_pool2d_grad, s_pool, NULL)

gdp_status gcpu_register_pool(gcpu_regctx *r, gdp_err *err)
{
    gdp_status s = gcpu_reg_floats(r, "max_pool2d", GCPU_FLOATS(k_max_pool2d, s_pool, NULL), 0, NULL, err);
    if (s == GDP_OK) s = gcpu_reg_floats(r, "max_pool2d_grad", GCPU_FLOATS(k_max_pool2d_grad, s_pool, NULL), 0, NULL, err);
    if (s == GDP_OK) s = gcpu_reg_floats(r, "avg_pool2d", GCPU_FLOATS(k_avg_pool2d, s_pool, NULL), 0, NULL, err);
    if (s == GDP_OK) s = gcpu_reg_floats(r, "avg_pool2d_grad", GCPU_FLOATS(k_avg_pool2d_grad, s_pool, NULL), 0, NULL, err);
    return s;
}
