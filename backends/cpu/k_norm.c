/* k_norm.c — layer_norm, rms_norm and their backward ops over the last axis (f32, f16,
 * bf16), threaded over rows.
 *
 * Definitions are in src/ops/norm.c. x is read as (rows, C). A row's statistics and the
 * per-element arithmetic are done in double, as the reference does, in eight lanes so
 * that the sums vectorize: the results differ from the reference only by the order of
 * the additions within a row. Half rows are widened to f32 in per-thread scratch and
 * rounded back once.
 *
 * The backward ops also sum dy * xhat (and dy) over rows into dweight (and dbias). Rows
 * are cut into blocks whose size is fixed by the shape, each block sums its rows into its
 * own partial in double, and the partials are added in block order afterwards: the bits
 * do not depend on the thread count.
 */
#include "kernels.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#define LANES 8

static inline double lanes_total(const double *a)
{
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* The mean and 1/sqrt(var + eps) of a row (biased variance, two passes), as row_stats. */
static void row_stats(const float *x, int64_t C, double eps, double *mean, double *rstd)
{
    double a[LANES] = {0};
    int64_t k = 0;
    for (; k + LANES <= C; k += LANES)
        for (int l = 0; l < LANES; l++) a[l] += x[k + l];
    for (int l = 0; k < C; k++, l++) a[l] += x[k];
    const double m = lanes_total(a) / (double)C;
    double v[LANES] = {0};
    for (k = 0; k + LANES <= C; k += LANES)
        for (int l = 0; l < LANES; l++) {
            double d = x[k + l] - m;
            v[l] += d * d;
        }
    for (int l = 0; k < C; k++, l++) {
        double d = x[k] - m;
        v[l] += d * d;
    }
    *mean = m;
    *rstd = 1.0 / sqrt(lanes_total(v) / (double)C + eps);
}

/* 1/sqrt(mean(x^2) + eps) of a row. */
static double row_rms_inv(const float *x, int64_t C, double eps)
{
    double a[LANES] = {0};
    int64_t k = 0;
    for (; k + LANES <= C; k += LANES)
        for (int l = 0; l < LANES; l++) a[l] += (double)x[k + l] * x[k + l];
    for (int l = 0; k < C; k++, l++) a[l] += (double)x[k] * x[k];
    return 1.0 / sqrt(lanes_total(a) / (double)C + eps);
}

typedef struct norm_job {
    int32_t dt;                 /* dtype of every operand */
    int64_t rows, C;
    double eps;
    const void *x, *dy, *w, *b; /* w, b: NULL when absent */
    void *y;                    /* y, or dx */
    void *dw, *db;              /* backward: NULL when not wanted */
    int64_t rows_per_block, blocks;
    double *part;               /* backward: per block, dweight (C) then dbias (C) */
    atomic_int oom;
} norm_job;

/* Per-thread f32 views of a chunk's operands: for f32 the tensors themselves, for the
 * half types rows widened into scratch (`nrows` row buffers, then weight and bias). */
typedef struct views {
    float *row[3];
    const float *w, *b;
} views;

static int views_make(norm_job *j, int tid, int nrows, views *v)
{
    memset(v, 0, sizeof *v);
    if (j->dt == GDP_F32) {
        v->w = j->w;
        v->b = j->b;
        return 1;
    }
    float *s = gcpu_scratch(tid, GCPU_SLOT_KERNEL, sizeof(float) * (size_t)(j->C * (nrows + 2)));
    if (s == NULL) {
        atomic_store(&j->oom, 1);
        return 0;
    }
    for (int i = 0; i < nrows; i++) v->row[i] = s + i * j->C;
    float *w = s + nrows * j->C, *b = w + j->C;
    if (j->w != NULL) {
        gcpu_load_f32(j->dt, j->w, 0, w, j->C);
        v->w = w;
    }
    if (j->b != NULL) {
        gcpu_load_f32(j->dt, j->b, 0, b, j->C);
        v->b = b;
    }
    return 1;
}

/* Row r of tensor t as f32: in place for f32, else widened into buf. */
static inline const float *row_in(const norm_job *j, const void *t, int64_t r, float *buf)
{
    if (j->dt == GDP_F32) return (const float *)t + r * j->C;
    gcpu_load_f32(j->dt, t, r * j->C, buf, j->C);
    return buf;
}

/* Where to write output row r: in place for f32, else buf (then row_out). */
static inline float *row_dst(const norm_job *j, void *t, int64_t r, float *buf)
{
    return j->dt == GDP_F32 ? (float *)t + r * j->C : buf;
}

static inline void row_out(const norm_job *j, void *t, int64_t r, const float *buf)
{
    if (j->dt != GDP_F32) gcpu_store_f32(j->dt, t, r * j->C, buf, j->C);
}

/* ---- forward -------------------------------------------------------------------------------- */

// y (rows, C) = (x - mean) * rstd * weight + bias
static void ln_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
    norm_job *j = ctx;
    views v;
    if (!views_make(j, tid, 2, &v)) return;
    const int64_t C = j->C;
    const float *w = v.w, *b = v.b;
    for (int64_t r = begin; r < end; r++) {
        const float *x = row_in(j, j->x, r, v.row[0]);
        float *y = row_dst(j, j->y, r, v.row[1]);
        double mean, rstd;
        row_stats(x, C, j->eps, &mean, &rstd);
        if (w != NULL && b != NULL)
            for (int64_t k = 0; k < C; k++) y[k] = (float)((x[k] - mean) * rstd * w[k] + b[k]);
        else if (w != NULL)
            for (int64_t k = 0; k < C; k++) y[k] = (float)((x[k] - mean) * rstd * w[k]);
        else
            for (int64_t k = 0; k < C; k++) y[k] = (float)((x[k] - mean) * rstd);
        row_out(j, j->y, r, y);
    }
}

// y (rows, C) = x / sqrt(mean(x^2) + eps) * weight
static void rms_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
    norm_job *j = ctx;
    views v;
    if (!views_make(j, tid, 2, &v)) return;
    const int64_t C = j->C;
    const float *w = v.w;
    for (int64_t r = begin; r < end; r++) {
        const float *x = row_in(j, j->x, r, v.row[0]);
        float *y = row_dst(j, j->y, r, v.row[1]);
        const double inv = row_rms_inv(x, C, j->eps);
        if (w != NULL)
            for (int64_t k = 0; k < C; k++) y[k] = (float)(x[k] * inv * w[k]);
        else
            for (int64_t k = 0; k < C; k++) y[k] = (float)(x[k] * inv);
        row_out(j, j->y, r, y);
    }
}

static void job_rows(const gdp_tensor *x, norm_job *j)
{
    j->dt = x->dtype;
    j->C = x->shape[x->ndim - 1];
    j->rows = j->C > 0 ? gdp_numel(x) / j->C : 0;
    atomic_init(&j->oom, 0);
}

static gdp_status forward(const gdp_node *n, gcpu_range_fn fn, double eps_default, gdp_err *err)
{
    norm_job j = {.x = n->in[0]->data, .y = n->out[0]->data, .w = n->n_in > 1 ? n->in[1]->data : NULL,
                  .b = n->n_in > 2 ? n->in[2]->data : NULL};
    job_rows(n->in[0], &j);
    j.eps = gdp_attr_float(&n->attrs, "eps", eps_default);
    if (j.rows == 0) return GDP_OK;
    gcpu_parallel_for_grain(j.rows, GCPU_GRAIN_ELEMS / (4 * j.C) + 1, fn, &j);
    if (atomic_load(&j.oom)) return gdp_fail(err, GDP_ERR_NOMEM, "%s: no memory for rows of %lld", n->op, (long long)j.C);
    return GDP_OK;
}

static gdp_status k_layer_norm(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    return forward(n, ln_rows, 1e-5, err);
}

static gdp_status k_rms_norm(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    return forward(n, rms_rows, 1e-6, err);
}

/* ---- backward ------------------------------------------------------------------------------- */

/* Items are blocks of rows; block `blk` adds its rows' dweight and dbias terms into its own
 * partial (zeroed here), so every partial is the same whatever thread computes it. */

// With xhat = (x - mean) * rstd and g = dy * weight:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dweight += dy * xhat,  dbias += dy
static void ln_grad_blocks(void *ctx, int64_t begin, int64_t end, int tid)
{
    norm_job *j = ctx;
    views v;
    if (!views_make(j, tid, 3, &v)) return;
    const int64_t C = j->C;
    const float *w = v.w;
    for (int64_t blk = begin; blk < end; blk++) {
        double *pw = j->part + blk * 2 * C, *pb = pw + C;
        memset(pw, 0, sizeof(double) * (size_t)(2 * C));
        int64_t r1 = (blk + 1) * j->rows_per_block < j->rows ? (blk + 1) * j->rows_per_block : j->rows;
        for (int64_t r = blk * j->rows_per_block; r < r1; r++) {
            const float *x = row_in(j, j->x, r, v.row[0]);
            const float *dy = row_in(j, j->dy, r, v.row[1]);
            float *dx = row_dst(j, j->y, r, v.row[2]);
            double mean, rstd;
            row_stats(x, C, j->eps, &mean, &rstd);
            double sg[LANES] = {0}, sgx[LANES] = {0};
            int64_t k = 0;
            for (; k + LANES <= C; k += LANES)
                for (int l = 0; l < LANES; l++) {
                    double d = dy[k + l], xh = (x[k + l] - mean) * rstd, g = w != NULL ? d * w[k + l] : d;
                    sg[l] += g;
                    sgx[l] += g * xh;
                }
            for (int l = 0; k < C; k++, l++) {
                double d = dy[k], xh = (x[k] - mean) * rstd, g = w != NULL ? d * w[k] : d;
                sg[l] += g;
                sgx[l] += g * xh;
            }
            const double mean_g = lanes_total(sg) / (double)C, mean_gx = lanes_total(sgx) / (double)C;
            for (k = 0; k < C; k++) {
                double d = dy[k], xh = (x[k] - mean) * rstd, g = w != NULL ? d * w[k] : d;
                dx[k] = (float)(rstd * (g - mean_g - xh * mean_gx));
                pw[k] += d * xh;
                pb[k] += d;
            }
            row_out(j, j->y, r, dx);
        }
    }
}

// With inv = 1/sqrt(mean(x^2) + eps) and g = dy * weight:
//   dx = inv * g - inv^3 * x * mean(g * x),  dweight += dy * x * inv
static void rms_grad_blocks(void *ctx, int64_t begin, int64_t end, int tid)
{
    norm_job *j = ctx;
    views v;
    if (!views_make(j, tid, 3, &v)) return;
    const int64_t C = j->C;
    const float *w = v.w;
    for (int64_t blk = begin; blk < end; blk++) {
        double *pw = j->part + blk * 2 * C;
        memset(pw, 0, sizeof(double) * (size_t)C);
        int64_t r1 = (blk + 1) * j->rows_per_block < j->rows ? (blk + 1) * j->rows_per_block : j->rows;
        for (int64_t r = blk * j->rows_per_block; r < r1; r++) {
            const float *x = row_in(j, j->x, r, v.row[0]);
            const float *dy = row_in(j, j->dy, r, v.row[1]);
            float *dx = row_dst(j, j->y, r, v.row[2]);
            const double inv = row_rms_inv(x, C, j->eps);
            double sgx[LANES] = {0};
            int64_t k = 0;
            for (; k + LANES <= C; k += LANES)
                for (int l = 0; l < LANES; l++) {
                    double d = dy[k + l], g = w != NULL ? d * w[k + l] : d;
                    sgx[l] += g * x[k + l];
                }
            for (int l = 0; k < C; k++, l++) {
                double d = dy[k], g = w != NULL ? d * w[k] : d;
                sgx[l] += g * x[k];
            }
            const double c3 = inv * inv * inv * lanes_total(sgx) / (double)C;
            for (k = 0; k < C; k++) {
                double d = dy[k], g = w != NULL ? d * w[k] : d;
                dx[k] = (float)(inv * g - c3 * x[k]);
                pw[k] += d * x[k] * inv;
            }
            row_out(j, j->y, r, dx);
        }
    }
}

/* dweight[k] (and dbias[k]) = the block partials added in block order. Items are columns;
 * a chunk walks the blocks in order, each adding a contiguous run of columns. */
#define COLS 256
static void sum_partials(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    norm_job *j = ctx;
    const int64_t C = j->C;
    double acc[COLS];
    float buf[COLS];
    for (int which = 0; which < 2; which++) {
        void *out = which == 0 ? j->dw : j->db;
        if (out == NULL) continue;
        for (int64_t c0 = begin; c0 < end; c0 += COLS) {
            int64_t cn = end - c0 < COLS ? end - c0 : COLS;
            for (int64_t c = 0; c < cn; c++) acc[c] = 0.0;
            for (int64_t blk = 0; blk < j->blocks; blk++) {
                const double *p = j->part + blk * 2 * C + which * C + c0;
                for (int64_t c = 0; c < cn; c++) acc[c] += p[c];
            }
            for (int64_t c = 0; c < cn; c++) buf[c] = (float)acc[c];
            gcpu_store_f32(j->dt, out, c0, buf, cn);
        }
    }
}

/* Most blocks the row sums are split into: enough for every thread of a large machine,
 * few enough that the partials stay small next to x. */
#define MAX_BLOCKS 128

/* Blocks of about GRAIN elements, at most MAX_BLOCKS of them: a function of the shape. */
static int64_t row_blocks(int64_t rows, int64_t C, int64_t *rows_per_block)
{
    int64_t rpb = GCPU_GRAIN_ELEMS / (C > 0 ? C : 1) + 1;
    if ((rows + rpb - 1) / rpb > MAX_BLOCKS) rpb = (rows + MAX_BLOCKS - 1) / MAX_BLOCKS;
    *rows_per_block = rpb;
    return (rows + rpb - 1) / rpb;
}

/* The backward ops' partial sums: per block, dweight (C) then dbias (C), in double. */
static size_t ws_backward(void *be, const gdp_node *n)
{
    (void)be;
    const gdp_tensor *x = n->in[1];
    int64_t C = x->ndim > 0 ? x->shape[x->ndim - 1] : 1, rows = C > 0 ? gdp_numel(x) / C : 0, rpb;
    return gcpu_ws_piece(row_blocks(rows, C, &rpb) * 2 * C, sizeof(double));
}

static gdp_status backward(const gdp_node *n, gcpu_range_fn fn, double eps_default, int has_db, gdp_err *err)
{
    norm_job j = {.dy = n->in[0]->data, .x = n->in[1]->data, .w = n->n_in > 2 ? n->in[2]->data : NULL,
                  .y = n->out[0]->data, .dw = n->out[1]->data, .db = has_db ? n->out[2]->data : NULL};
    job_rows(n->in[1], &j);
    j.eps = gdp_attr_float(&n->attrs, "eps", eps_default);
    if (j.C == 0) return GDP_OK;
    if (j.rows == 0) {
        /* no rows: dweight and dbias are sums of nothing */
        float zero[1] = {0.0f};
        for (int64_t c = 0; c < j.C; c++) {
            gcpu_store_f32(j.dt, j.dw, c, zero, 1);
            if (j.db != NULL) gcpu_store_f32(j.dt, j.db, c, zero, 1);
        }
        return GDP_OK;
    }
    j.blocks = row_blocks(j.rows, j.C, &j.rows_per_block);
    /* the partials live in the node's workspace */
    j.part = n->workspace;
    if (j.part == NULL || n->workspace_bytes < sizeof(double) * (size_t)(j.blocks * 2 * j.C))
        return gdp_fail(err, GDP_ERR_INVALID, "%s: workspace of %zu bytes is too small for %lld partial sums", n->op,
                        n->workspace_bytes, (long long)(j.blocks * 2 * j.C));
    gcpu_parallel_for(j.blocks, fn, &j);
    if (atomic_load(&j.oom)) return gdp_fail(err, GDP_ERR_NOMEM, "%s: no memory for rows of %lld", n->op, (long long)j.C);
    /* chunks of whole COLS runs, so that a chunk's inner loops stay long */
    gcpu_parallel_for_grain(j.C, COLS * (GCPU_GRAIN_ELEMS / (COLS * j.blocks) + 1), sum_partials, &j);
    return GDP_OK;
}

// dy (rows, C), x (rows, C), [weight (C)] -> dx (rows, C), dweight (C), dbias (C)
static gdp_status k_layer_norm_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    return backward(n, ln_grad_blocks, 1e-5, 1, err);
}

// dy (rows, C), x (rows, C), [weight (C)] -> dx (rows, C), dweight (C)
static gdp_status k_rms_norm_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    return backward(n, rms_grad_blocks, 1e-6, 0, err);
}

/* One dtype for every operand (the shape rule already demands it). */
static int s_norm(void *be, const gdp_node *n)
{
    (void)be;
    int32_t dt = n->in[0]->dtype;
    if (dt != GDP_F32 && dt != GDP_F16 && dt != GDP_BF16) return 0;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i]->dtype != dt) return 0;
    for (int i = 0; i < n->n_out; i++)
        if (n->out[i]->dtype != dt) return 0;
    return n->in[0]->ndim >= 1;
}

gdp_status gcpu_register_norm(gcpu_regctx *r, gdp_err *err)
{
    static const int32_t dts[] = {GDP_F32, GDP_F16, GDP_BF16};
    static const struct {
        const char *op;
        gdp_launch_fn fn;
        gdp_workspace_fn ws;
    } ks[] = {
        {"layer_norm", k_layer_norm, NULL}, {"layer_norm_grad", k_layer_norm_grad, ws_backward},
        {"rms_norm", k_rms_norm, NULL}, {"rms_norm_grad", k_rms_norm_grad, ws_backward},
    };
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            gcpu_kdef k = {.op = ks[i].op, .dtype = dts[d], .launch = ks[i].fn, .supports = s_norm, .workspace = ks[i].ws};
            gdp_status s = gcpu_register(r, &k, err);
            if (s != GDP_OK) return s;
        }
    return GDP_OK;
}
