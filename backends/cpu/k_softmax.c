/* k_softmax.c — softmax, log_softmax and their backward ops along any axis; the losses
 * cross_entropy (+ grad, i32/i64 targets) and mse (f32; f16 and bf16 through k_half.c).
 *
 * Definitions are in src/ops/softmax.c. A tensor is read as (outer, n, inner), n along
 * the axis. Rows along a last axis (inner == 1) are one thread's each; otherwise a thread
 * takes blocks of up to 64 neighbouring columns of one outer index and walks down n with
 * the whole block, so that every load is contiguous.
 *
 * Numbers: the maximum is subtracted as in the reference; exponentials are the f32 ones of
 * vmath.h (within 1 ulp), which turn the row loops into SIMD code, and sums are kept in
 * 16 interleaved partial sums fixed by the row length (f32 within pieces of 1024 for the
 * softmax denominators, else double), so a result depends on neither the thread count
 * nor where a row starts. Everything else (log of a row sum, the
 * final subtractions and the backward formulas) is the reference's double expression.
 * Results agree with the reference to a few ulp, far inside the ops' 1e-8 normalized MSE.
 * The cross-entropy loss adds its rows' terms in row order after the threads are done.
 */
#include "kernels.h"
#include "vmath.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#define COLS 64   /* columns per work item when the axis is not the last */
#define BLOCK 8192 /* elements per partial sum of mse */

/* (outer, n, inner) around the axis attribute; -1 when it is out of range */
static int split_axis(const gdp_tensor *x, const gdp_attrs *attrs, int64_t *outer, int64_t *n, int64_t *inner)
{
    int64_t axis = gdp_attr_int(attrs, "axis", -1);
    if (axis < 0) axis += x->ndim;
    if (axis < 0 || axis >= x->ndim) return -1;
    *outer = 1, *inner = 1, *n = x->shape[axis];
    for (int d = 0; d < axis; d++) *outer *= x->shape[d];
    for (int d = (int)axis + 1; d < x->ndim; d++) *inner *= x->shape[d];
    return 0;
}

/* ---- rows -------------------------------------------------------------------------------- */

/* The maximum to subtract. The reference's skips NaN (fmax); this one may return a NaN of
 * the row instead, which changes nothing: a NaN in a row makes its sum, and so every
 * output of the row, NaN either way. */
static float row_max(const float *x, int64_t n) { return gcpu_max_row(x, n); }

/* 16 partial sums combined in a fixed order */
static double lanes_sum(const double *a)
{
    double s[8];
    for (int l = 0; l < 8; l++) s[l] = a[l] + a[l + 8];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

/* sum of exp(x - m) over x[0..n), in double; the exponentials are stored in e when
 * e != NULL. Pieces of 1024 are summed in 16 f32 lanes (64 terms of at most 1 each:
 * rounding stays near 1e-6 relative, where the tolerance, 1e-8 normalized MSE, allows
 * about 1e-4), then added in double. The order depends on n only. */
static double exp_sum(const float *x, int64_t n, float m, float *e)
{
    float buf[1024];
    double s = 0.0;
    for (int64_t k = 0; k < n; k += 1024) {
        int64_t w = n - k < 1024 ? n - k : 1024, i = 0;
        float *o = e != NULL ? e + k : buf;
        const float *xk = x + k;
        float a[16] = {0};
        for (; i + 16 <= w; i += 16)
            for (int l = 0; l < 16; l++) {
                float v = gcpu_expf(xk[i + l] - m);
                o[i + l] = v;
                a[l] += v;
            }
        for (int l = 0; i < w; i++, l++) {
            float v = gcpu_expf(xk[i] - m);
            o[i] = v;
            a[l] += v;
        }
        double t[8];
        for (int l = 0; l < 8; l++) t[l] = (double)a[l] + (double)a[l + 8];
        s += ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
    }
    return s;
}

/* sum of a[k] * b[k] (b NULL: of a[k]) in double */
static double dot_row(const float *a, const float *b, int64_t n)
{
    double s[16] = {0};
    int64_t i = 0;
    if (b != NULL) {
        for (; i + 16 <= n; i += 16)
            for (int l = 0; l < 16; l++) s[l] += (double)a[i + l] * b[i + l];
        for (int l = 0; i < n; i++, l++) s[l] += (double)a[i] * b[i];
    } else {
        for (; i + 16 <= n; i += 16)
            for (int l = 0; l < 16; l++) s[l] += a[i + l];
        for (int l = 0; i < n; i++, l++) s[l] += a[i];
    }
    return lanes_sum(s);
}

/* ---- softmax, log_softmax ------------------------------------------------------------------------ */

enum { SM_SOFTMAX, SM_LOG_SOFTMAX, SM_GRAD, SM_LOG_GRAD };

typedef struct sm_job {
    int op;
    const float *x, *dy; /* backward: x holds y, the forward output */
    float *y;
    int64_t n, inner;
} sm_job;

static void row_forward(const sm_job *j, const float *x, float *y)
{
    int64_t n = j->n;
    float m = row_max(x, n);
    if (j->op == SM_SOFTMAX) {
        double s = exp_sum(x, n, m, y);
        float inv = (float)(1.0 / s);
        for (int64_t k = 0; k < n; k++) y[k] *= inv;
    } else {
        double c = (double)m + log(exp_sum(x, n, m, NULL)); /* y = x - (m + log s) */
        for (int64_t k = 0; k < n; k++) y[k] = (float)((double)x[k] - c);
    }
}

static void row_backward(const sm_job *j, const float *yv, const float *dy, float *dx)
{
    int64_t n = j->n;
    if (j->op == SM_GRAD) { /* y (dy - sum(dy y)) */
        double dot = dot_row(dy, yv, n);
        for (int64_t k = 0; k < n; k++) dx[k] = (float)((double)yv[k] * ((double)dy[k] - dot));
    } else { /* dy - exp(y) sum(dy) */
        double s = dot_row(dy, NULL, n);
        for (int64_t k = 0; k < n; k++) dx[k] = (float)((double)dy[k] - (double)gcpu_expf(yv[k]) * s);
    }
}

/* A block of w <= COLS columns, element (k, c) at k * inner + c. */
static void cols_forward(const sm_job *j, const float *x, float *y, int64_t w)
{
    int64_t n = j->n, in = j->inner;
    float m[COLS];
    double s[COLS];
    for (int64_t c = 0; c < w; c++) m[c] = -INFINITY, s[c] = 0.0;
    for (int64_t k = 0; k < n; k++)
        for (int64_t c = 0; c < w; c++) m[c] = x[k * in + c] > m[c] ? x[k * in + c] : m[c];
    if (j->op == SM_SOFTMAX) {
        for (int64_t k = 0; k < n; k++)
            for (int64_t c = 0; c < w; c++) {
                float e = gcpu_expf(x[k * in + c] - m[c]);
                y[k * in + c] = e;
                s[c] += e;
            }
        float inv[COLS];
        for (int64_t c = 0; c < w; c++) inv[c] = (float)(1.0 / s[c]);
        for (int64_t k = 0; k < n; k++)
            for (int64_t c = 0; c < w; c++) y[k * in + c] *= inv[c];
    } else {
        for (int64_t k = 0; k < n; k++)
            for (int64_t c = 0; c < w; c++) s[c] += gcpu_expf(x[k * in + c] - m[c]);
        double off[COLS];
        for (int64_t c = 0; c < w; c++) off[c] = (double)m[c] + log(s[c]);
        for (int64_t k = 0; k < n; k++)
            for (int64_t c = 0; c < w; c++) y[k * in + c] = (float)((double)x[k * in + c] - off[c]);
    }
}

static void cols_backward(const sm_job *j, const float *yv, const float *dy, float *dx, int64_t w)
{
    int64_t n = j->n, in = j->inner;
    double s[COLS];
    for (int64_t c = 0; c < w; c++) s[c] = 0.0;
    if (j->op == SM_GRAD) {
        for (int64_t k = 0; k < n; k++)
            for (int64_t c = 0; c < w; c++) s[c] += (double)dy[k * in + c] * yv[k * in + c];
        for (int64_t k = 0; k < n; k++)
            for (int64_t c = 0; c < w; c++)
                dx[k * in + c] = (float)((double)yv[k * in + c] * ((double)dy[k * in + c] - s[c]));
    } else {
        for (int64_t k = 0; k < n; k++)
            for (int64_t c = 0; c < w; c++) s[c] += dy[k * in + c];
        for (int64_t k = 0; k < n; k++)
            for (int64_t c = 0; c < w; c++)
                dx[k * in + c] = (float)((double)dy[k * in + c] - (double)gcpu_expf(yv[k * in + c]) * s[c]);
    }
}

static void sm_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const sm_job *j = ctx;
    int fwd = j->op == SM_SOFTMAX || j->op == SM_LOG_SOFTMAX;
    if (j->inner == 1) {
        for (int64_t r = begin; r < end; r++) {
            if (fwd) row_forward(j, j->x + r * j->n, j->y + r * j->n);
            else row_backward(j, j->x + r * j->n, j->dy + r * j->n, j->y + r * j->n);
        }
        return;
    }
    int64_t nb = (j->inner + COLS - 1) / COLS;
    for (int64_t it = begin; it < end; it++) {
        int64_t o = it / nb, c0 = (it % nb) * COLS, w = j->inner - c0 < COLS ? j->inner - c0 : COLS;
        int64_t at = o * j->n * j->inner + c0;
        if (fwd) cols_forward(j, j->x + at, j->y + at, w);
        else cols_backward(j, j->x + at, j->dy + at, j->y + at, w);
    }
}

static gdp_status softmax_family(const gdp_node *n, int op, gdp_err *err)
{
    int bwd = op == SM_GRAD || op == SM_LOG_GRAD;
    const gdp_tensor *x = n->in[bwd ? 1 : 0];
    int64_t outer;
    sm_job j = {.op = op, .x = x->data, .dy = bwd ? n->in[0]->data : NULL, .y = n->out[0]->data};
    if (split_axis(x, &n->attrs, &outer, &j.n, &j.inner) != 0)
        return gdp_fail(err, GDP_ERR_INVALID, "%s: axis out of range", n->op);
    if (outer * j.n * j.inner == 0) return GDP_OK;
    if (j.inner == 1) {
        gcpu_parallel_for_grain(outer, GCPU_GRAIN_ELEMS / (4 * j.n) + 1, sm_task, &j);
    } else {
        int64_t items = outer * ((j.inner + COLS - 1) / COLS);
        gcpu_parallel_for_grain(items, GCPU_GRAIN_ELEMS / (4 * j.n * COLS) + 1, sm_task, &j);
    }
    return GDP_OK;
}

#define SM_KERNEL(name, OP)                                                              \
    static gdp_status k_##name(void *be, const gdp_node *n, void *stream, gdp_err *err) \
    {                                                                                    \
        (void)be; (void)stream;                                                          \
        return softmax_family(n, OP, err);                                               \
    }
SM_KERNEL(softmax, SM_SOFTMAX)
SM_KERNEL(log_softmax, SM_LOG_SOFTMAX)
SM_KERNEL(softmax_grad, SM_GRAD)
SM_KERNEL(log_softmax_grad, SM_LOG_GRAD)

/* ---- cross_entropy, cross_entropy_grad ----------------------------------------------------------- */

static int64_t target_at(const gdp_tensor *t, int64_t i)
{
    return t->dtype == GDP_I32 ? ((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

/* Counts rows whose target is not ignore_index; fails on a target outside [0, C) (C the
 * node's classes, which may be fewer than the logits' columns). */
static gdp_status ce_count(const gdp_node *n, const gdp_tensor *t, int64_t rows, int64_t C, int64_t ignore,
                           int64_t *count, gdp_err *err)
{
    *count = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t v = target_at(t, r);
        if (v == ignore) continue;
        if (v < 0 || v >= C)
            return gdp_fail(err, GDP_ERR_INVALID, "%s: targets[%lld] = %lld is not a class of [0, %lld) nor ignore_index %lld",
                            n->op, (long long)r, (long long)v, (long long)C, (long long)ignore);
        (*count)++;
    }
    return GDP_OK;
}

/* log(sum(exp(row))), stably */
static double logsumexp(const float *x, int64_t n)
{
    float m = row_max(x, n);
    return (double)m + log(exp_sum(x, n, m, NULL));
}

typedef struct ce_job {
    const float *x;
    const uint16_t *xh;   /* or f16/bf16 logits (the mixed forms), dtype half_dt */
    const gdp_tensor *t;
    int64_t C, K, ignore; /* columns of a row, classes among them (the first K) */
    double *loss;   /* per row (forward) */
    float *dx;      /* (backward; with xh, a row at a time in scratch, then dxh) */
    uint16_t *dxh;
    double scale;
    int32_t half_dt;
    atomic_int status; /* a failure inside the pool (no scratch) */
} ce_job;

/* Row r of the logits as floats: in place, or (half logits) widened into the thread's
 * scratch, which has room for a second row after it (the gradient's). NULL: no memory. */
static const float *ce_row(ce_job *j, int64_t r, int tid)
{
    if (j->xh == NULL) return j->x + r * j->C;
    float *f = gcpu_scratch(tid, GCPU_SLOT_KERNEL, sizeof(float) * (size_t)(2 * j->C));
    if (f == NULL) {
        atomic_store(&j->status, GDP_ERR_NOMEM);
        return NULL;
    }
    const uint16_t *h = j->xh + r * j->C;
    if (j->half_dt == GDP_BF16)
        for (int64_t k = 0; k < j->C; k++) f[k] = gdp_bf16_to_f32(h[k]);
    else
        for (int64_t k = 0; k < j->C; k++) f[k] = gdp_f16_to_f32(h[k]);
    return f;
}

static void ce_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
    ce_job *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        int64_t v = target_at(j->t, r);
        if (v == j->ignore) {
            j->loss[r] = 0.0;
            continue;
        }
        const float *x = ce_row(j, r, tid);
        if (x == NULL) return;
        j->loss[r] = logsumexp(x, j->K) - (double)x[v];
    }
}

static void ce_grad_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
    ce_job *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        int64_t v = target_at(j->t, r);
        if (v == j->ignore) {
            if (j->dxh != NULL) memset(j->dxh + r * j->C, 0, sizeof(uint16_t) * (size_t)j->C); /* +0.0 in both */
            else
                for (int64_t k = 0; k < j->C; k++) j->dx[r * j->C + k] = 0.0f;
            continue;
        }
        const float *x = ce_row(j, r, tid);
        if (x == NULL) return;
        /* f32 dx may be x itself (the op's `reuse`): x[v] is read before the row is written,
         * and exp_sum reads each x[k] before it stores exp(x[k] - m) in its place. The
         * softmax is those exponentials over their sum: one exponential an element, not two. */
        float *dx = j->dxh != NULL ? (float *)x + j->C : j->dx + r * j->C;
        const float xv = x[v], m = row_max(x, j->K);
        const double sum = exp_sum(x, j->K, m, dx), sc = j->scale;
        const float f = (float)(sc / sum);
        for (int64_t k = 0; k < j->K; k++) dx[k] *= f;
        for (int64_t k = j->K; k < j->C; k++) dx[k] = 0.0f; /* not classes */
        dx[v] = (float)(((double)gcpu_expf(xv - m) / sum - 1.0) * sc);
        if (j->dxh != NULL) { /* rounded to nearest even, as the half kernels round */
            uint16_t *h = j->dxh + r * j->C;
            if (j->half_dt == GDP_BF16)
                for (int64_t k = 0; k < j->C; k++) h[k] = gdp_f32_to_bf16(dx[k]);
            else
                for (int64_t k = 0; k < j->C; k++) h[k] = gdp_f32_to_f16(dx[k]);
        }
    }
}

/* The logits of a node: f32, or f16/bf16 (the mixed forms: f32 loss and dloss), read a row
 * at a time into the thread's scratch. */
static void ce_logits(ce_job *j, const gdp_tensor *x)
{
    atomic_init(&j->status, GDP_OK);
    if (x->dtype == GDP_F32) {
        j->x = x->data;
        return;
    }
    j->xh = x->data;
    j->half_dt = x->dtype;
}

/* Each row's loss, added in row order once the threads are done. */
static size_t ws_cross_entropy(void *be, const gdp_node *n)
{
    (void)be;
    return gcpu_ws_piece(gdp_numel(n->in[1]), sizeof(double));
}

// logits (N, C), targets (N) -> loss () = mean over kept rows of logsumexp(row) - row[target]
static gdp_status k_cross_entropy(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    const gdp_tensor *x = n->in[0], *t = n->in[1];
    ce_job j = {.t = t, .C = x->shape[x->ndim - 1], .ignore = gdp_attr_int(&n->attrs, "ignore_index", -100)};
    ce_logits(&j, x);
    j.K = gdp_attr_int(&n->attrs, "classes", j.C);
    int64_t rows = gdp_numel(t), count;
    gdp_status s = ce_count(n, t, rows, j.K, j.ignore, &count, err);
    if (s != GDP_OK) return s;
    j.loss = n->workspace;
    if (rows > 0 && (j.loss == NULL || n->workspace_bytes < sizeof(double) * (size_t)rows))
        return gdp_fail(err, GDP_ERR_INVALID, "%s: workspace of %zu bytes is too small", n->op, n->workspace_bytes);
    gcpu_parallel_for_grain(rows, GCPU_GRAIN_ELEMS / (4 * j.C + 1) + 1, ce_rows, &j);
    if (atomic_load(&j.status) != GDP_OK) return gdp_fail(err, GDP_ERR_NOMEM, "%s: out of memory for a row", n->op);
    double total = 0.0;
    for (int64_t r = 0; r < rows; r++) total += j.loss[r]; /* in row order, as the reference */
    ((float *)n->out[0]->data)[0] = (float)(count > 0 ? total / (double)count : 0.0);
    return GDP_OK;
}

// dloss (), logits (N, C), targets (N) -> dlogits = (softmax(row) - onehot(target)) * dloss / count
static gdp_status k_cross_entropy_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    const gdp_tensor *dl = n->in[0], *x = n->in[1], *t = n->in[2];
    ce_job j = {.t = t, .C = x->shape[x->ndim - 1], .ignore = gdp_attr_int(&n->attrs, "ignore_index", -100)};
    ce_logits(&j, x);
    if (j.xh != NULL) j.dxh = n->out[0]->data;
    else j.dx = n->out[0]->data;
    j.K = gdp_attr_int(&n->attrs, "classes", j.C);
    int64_t rows = gdp_numel(t), count;
    gdp_status s = ce_count(n, t, rows, j.K, j.ignore, &count, err);
    if (s != GDP_OK) return s;
    j.scale = count > 0 ? (double)((const float *)dl->data)[0] / (double)count : 0.0;
    gcpu_parallel_for_grain(rows, GCPU_GRAIN_ELEMS / (4 * j.C + 1) + 1, ce_grad_rows, &j);
    if (atomic_load(&j.status) != GDP_OK) return gdp_fail(err, GDP_ERR_NOMEM, "%s: out of memory for a row", n->op);
    return GDP_OK;
}

/* ---- mse ---------------------------------------------------------------------------------------- */

typedef struct mse_job {
    const float *p, *t;
    int64_t n;
    double *part;
} mse_job;

static void mse_blocks(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const mse_job *j = ctx;
    for (int64_t b = begin; b < end; b++) {
        int64_t s = b * BLOCK, e = s + BLOCK < j->n ? s + BLOCK : j->n;
        double a[16] = {0};
        int64_t i = s;
        for (; i + 16 <= e; i += 16)
            for (int l = 0; l < 16; l++) {
                double d = (double)j->p[i + l] - j->t[i + l];
                a[l] += d * d;
            }
        for (int l = 0; i < e; i++, l++) {
            double d = (double)j->p[i] - j->t[i];
            a[l] += d * d;
        }
        j->part[b] = lanes_sum(a);
    }
}

/* A partial sum per block. */
static size_t ws_mse(void *be, const gdp_node *n)
{
    (void)be;
    return gcpu_ws_piece((gdp_numel(n->in[0]) + BLOCK - 1) / BLOCK, sizeof(double));
}

// pred (...), target (...) -> () = mean((pred - target)^2): fixed blocks, summed in order
static gdp_status k_mse(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    mse_job j = {.p = n->in[0]->data, .t = n->in[1]->data, .n = gdp_numel(n->in[0])};
    int64_t blocks = (j.n + BLOCK - 1) / BLOCK;
    j.part = n->workspace;
    if (blocks > 0 && (j.part == NULL || n->workspace_bytes < sizeof(double) * (size_t)blocks))
        return gdp_fail(err, GDP_ERR_INVALID, "%s: workspace of %zu bytes is too small", n->op, n->workspace_bytes);
    gcpu_parallel_for_grain(blocks, 2, mse_blocks, &j);
    double s = 0.0;
    for (int64_t b = 0; b < blocks; b++) s += j.part[b];
    ((float *)n->out[0]->data)[0] = (float)(s / (double)j.n); /* 0/0 = NaN for an empty pred, as the reference */
    return GDP_OK;
}

/* ---- registration ---------------------------------------------------------------------------------- */

static int s_f32(void *backend, const gdp_node *n)
{
    (void)backend;
    return gcpu_all_f32(n);
}

/* float operands f32, targets i32 or i64 */
static int s_ce(void *backend, const gdp_node *n)
{
    (void)backend;
    const gdp_tensor *t = n->in[n->n_in - 1];
    for (int i = 0; i < n->n_in - 1; i++)
        if (n->in[i]->dtype != GDP_F32) return 0;
    return n->out[0]->dtype == GDP_F32 && gdp_is_index(t->dtype);
}

/* the mixed forms: f16/bf16 logits, the loss (or dloss) f32, read natively */
static int s_ce_mixed(void *backend, const gdp_node *n)
{
    (void)backend;
    const int grad = n->n_in == 3;
    const gdp_tensor *x = n->in[grad ? 1 : 0], *loss = grad ? n->in[0] : n->out[0], *t = n->in[n->n_in - 1];
    return (x->dtype == GDP_BF16 || x->dtype == GDP_F16) && loss->dtype == GDP_F32 && gdp_is_index(t->dtype) &&
           (!grad || n->out[0]->dtype == x->dtype);
}

GCPU_HALF_OF(k_softmax, s_f32, NULL)
GCPU_HALF_OF(k_log_softmax, s_f32, NULL)
GCPU_HALF_OF(k_softmax_grad, s_f32, NULL)
GCPU_HALF_OF(k_log_softmax_grad, s_f32, NULL)
GCPU_HALF_OF(k_cross_entropy, s_ce, ws_cross_entropy)
GCPU_HALF_OF(k_cross_entropy_grad, s_ce, NULL)
GCPU_HALF_OF(k_mse, s_f32, ws_mse)

gdp_status gcpu_register_softmax(gcpu_regctx *r, gdp_err *err)
{
    static const struct {
        const char *op;
        gcpu_floats k;
    } ks[] = {
        {"softmax", GCPU_FLOATS_INIT(k_softmax, s_f32, NULL)},
        {"log_softmax", GCPU_FLOATS_INIT(k_log_softmax, s_f32, NULL)},
        {"softmax_grad", GCPU_FLOATS_INIT(k_softmax_grad, s_f32, NULL)},
        {"log_softmax_grad", GCPU_FLOATS_INIT(k_log_softmax_grad, s_f32, NULL)},
        {"cross_entropy", GCPU_FLOATS_INIT(k_cross_entropy, s_ce, ws_cross_entropy)},
        {"cross_entropy_grad", GCPU_FLOATS_INIT(k_cross_entropy_grad, s_ce, NULL)},
        {"mse", GCPU_FLOATS_INIT(k_mse, s_f32, ws_mse)},
    };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        gdp_status s = gcpu_reg_floats(r, ks[i].op, ks[i].k, 0, NULL, err);
        if (s != GDP_OK) return s;
    }
    /* f16/bf16 logits with an f32 loss (and its f32 dloss): the kernels read the half rows
     * one at a time into a thread's scratch (no f32 copy of the logits) */
    static const char *const ce_mixed[] = {"bf16,i32->f32", "bf16,i64->f32", "f16,i32->f32", "f16,i64->f32"};
    static const char *const grad_mixed[] = {"f32,bf16,i32->bf16", "f32,bf16,i64->bf16", "f32,f16,i32->f16",
                                             "f32,f16,i64->f16"};
    for (int i = 0; i < 4; i++) {
        gdp_status s = gcpu_reg_mixed(r, "cross_entropy", ce_mixed[i], 0, k_cross_entropy, s_ce_mixed,
                                      ws_cross_entropy, err);
        if (s == GDP_OK)
            s = gcpu_reg_mixed(r, "cross_entropy_grad", grad_mixed[i], 0, k_cross_entropy_grad, s_ce_mixed, NULL, err);
        if (s != GDP_OK) return s;
    }
    return GDP_OK;
}
