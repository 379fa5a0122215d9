/* k_reduce.c — sum and mean (f32 in, double accumulation, f32 out).
 *
 * Definitions are in src/ops/reduce.c. After dropping size-1 dims and merging neighbours
 * that are both reduced or both kept, the shapes handled here are
 *     (R)          everything reduced
 *     (K, R)       rows reduced: the bias gradient of a transposed layout, row sums
 *     (K1, R, K2)  a middle run reduced, K1 may be 1: bias gradients (N, out) -> (out)
 *     (R1, K, R2)  per-channel sums, the bias gradient of a convolution (N, C, HW) -> (C)
 * Other layouts fall back to the reference (supports says no).
 * Sums are in double. A full reduction adds fixed blocks of elements (block size fixed,
 * not thread-dependent) and then the block sums in order; the others give each output
 * element to one thread. Either way the bits do not depend on the thread count.
 */
#include "kernels.h"

#include <stdlib.h>

#define BLOCK 8192

typedef struct rplan {
    int kind; /* 0: unsupported, 1: (R), 2: (K, R), 3: (K1, R, K2), 4: (R1, K, R2) */
    int64_t K1, R, K2;
    int64_t R2; /* kind 4: (R, K2, R2) */
} rplan;

static void plan(const gdp_node *n, rplan *p)
{
    const gdp_tensor *x = &n->in[0];
    int red[GDP_MAX_DIMS];
    int64_t ax[GDP_MAX_DIMS + 1];
    int na = gdp_attr_ints(&n->attrs, "axes", ax, GDP_MAX_DIMS + 1);
    p->kind = 0;
    if (na > GDP_MAX_DIMS) return;
    for (int d = 0; d < x->ndim; d++) red[d] = na == 0;
    for (int k = 0; k < na; k++) {
        int64_t a = ax[k] < 0 ? ax[k] + x->ndim : ax[k];
        if (a < 0 || a >= x->ndim) return;
        red[a] = 1;
    }
    /* groups of (flag, size), outer to inner, size-1 dims dropped */
    int gf[GDP_MAX_DIMS];
    int64_t gs[GDP_MAX_DIMS];
    int ng = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (x->shape[d] == 1) continue;
        if (ng > 0 && gf[ng - 1] == red[d]) gs[ng - 1] *= x->shape[d];
        else gf[ng] = red[d], gs[ng] = x->shape[d], ng++;
    }
    p->K1 = 1, p->R = 1, p->K2 = 1;
    if (ng == 0) { p->kind = 1; return; }                   /* a single element */
    if (ng == 1) {
        if (gf[0]) p->kind = 1, p->R = gs[0];
        else p->kind = 3, p->K2 = gs[0];                        /* nothing reduced: a copy */
        return;
    }
    if (ng == 2 && !gf[0]) { p->kind = 2, p->K1 = gs[0], p->R = gs[1]; return; }
    if (ng == 2 && gf[0]) { p->kind = 3, p->R = gs[0], p->K2 = gs[1]; return; }
    if (ng == 3 && !gf[0]) { p->kind = 3, p->K1 = gs[0], p->R = gs[1], p->K2 = gs[2]; return; }
    if (ng == 3 && gf[0]) { p->kind = 4, p->R = gs[0], p->K2 = gs[1], p->R2 = gs[2]; return; }
}

typedef struct rjob {
    const float *x;
    float *y;
    rplan p;
    double div;   /* 1 for sum, the reduced count for mean */
    double *part; /* block sums of a full reduction */
} rjob;

static double sum_run(const float *x, int64_t n)
{
    /* four accumulators in a fixed pattern: vectorizes, and depends on n only */
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a0 += x[i];
        a1 += x[i + 1];
        a2 += x[i + 2];
        a3 += x[i + 3];
    }
    for (; i < n; i++) a0 += x[i];
    return (a0 + a1) + (a2 + a3);
}

static void full_blocks(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    rjob *j = ctx;
    for (int64_t b = begin; b < end; b++) {
        int64_t s = b * BLOCK, e = s + BLOCK < j->p.R ? s + BLOCK : j->p.R;
        j->part[b] = sum_run(j->x + s, e - s);
    }
}

static void row_sums(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    rjob *j = ctx;
    for (int64_t r = begin; r < end; r++) j->y[r] = (float)(sum_run(j->x + r * j->p.R, j->p.R) / j->div);
}

/* items: (k1, column block of 64) pairs */
#define COLS 64
static void col_sums(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    rjob *j = ctx;
    int64_t nb = (j->p.K2 + COLS - 1) / COLS;
    for (int64_t it = begin; it < end; it++) {
        int64_t k1 = it / nb, c0 = (it % nb) * COLS;
        int64_t w = j->p.K2 - c0 < COLS ? j->p.K2 - c0 : COLS;
        double acc[COLS] = {0};
        const float *x = j->x + k1 * j->p.R * j->p.K2 + c0;
        for (int64_t r = 0; r < j->p.R; r++)
            for (int64_t c = 0; c < w; c++) acc[c] += x[r * j->p.K2 + c];
        float *y = j->y + k1 * j->p.K2 + c0;
        for (int64_t c = 0; c < w; c++) y[c] = (float)(acc[c] / j->div);
    }
}

static void channel_sums(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    rjob *j = ctx;
    int64_t R = j->p.R, C = j->p.K2, R2 = j->p.R2;
    for (int64_t c = begin; c < end; c++) {
        double s = 0;
        for (int64_t r = 0; r < R; r++) s += sum_run(j->x + (r * C + c) * R2, R2);
        j->y[c] = (float)(s / j->div);
    }
}

static gdp_status reduce(const gdp_node *n, int mean, gdp_err *err)
{
    rjob j = {.x = n->in[0].data, .y = n->out[0].data};
    plan(n, &j.p);
    if (j.p.kind == 0) return gdp_fail(err, GDP_ERR_UNSUPPORTED, "%s: axes layout not handled", n->op);
    j.div = mean ? (double)j.p.R * (j.p.kind == 4 ? (double)j.p.R2 : 1.0) : 1.0;
    if (gdp_numel(&n->out[0]) == 0) return GDP_OK;
    if (j.p.kind == 1) {
        int64_t blocks = (j.p.R + BLOCK - 1) / BLOCK;
        if (blocks <= 1) {
            j.y[0] = (float)(sum_run(j.x, j.p.R) / j.div);
            return GDP_OK;
        }
        j.part = malloc(sizeof(double) * (size_t)blocks);
        if (j.part == NULL) return gdp_fail(err, GDP_ERR_NOMEM, "%s: out of memory", n->op);
        gcpu_parallel_for_grain(blocks, 2, full_blocks, &j);
        double s = 0;
        for (int64_t b = 0; b < blocks; b++) s += j.part[b];
        free(j.part);
        j.y[0] = (float)(s / j.div);
    } else if (j.p.kind == 2) {
        gcpu_parallel_for_grain(j.p.K1, GCPU_GRAIN_ELEMS / (j.p.R + 1) + 1, row_sums, &j);
    } else if (j.p.kind == 4) {
        gcpu_parallel_for_grain(j.p.K2, GCPU_GRAIN_ELEMS / (j.p.R * j.p.R2 + 1) + 1, channel_sums, &j);
    } else {
        int64_t items = j.p.K1 * ((j.p.K2 + COLS - 1) / COLS);
        gcpu_parallel_for_grain(items, GCPU_GRAIN_ELEMS / (j.p.R * COLS + 1) + 1, col_sums, &j);
    }
    return GDP_OK;
}

static gdp_status k_sum(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    return reduce(n, 0, err);
}

static gdp_status k_mean(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    return reduce(n, 1, err);
}

static int s_reduce(void *backend, const gdp_node *n)
{
    (void)backend;
    rplan p;
    if (!gcpu_all_f32(n)) return 0;
    plan(n, &p);
    return p.kind != 0;
}

static const char *const reduce_attrs[] = {"axes", NULL};

gdp_status gcpu_register_reduce(const gdp_host *host, gdp_err *err)
{
    gdp_status s = gcpu_reg(host, "sum", GDP_F32, k_sum, s_reduce, reduce_attrs, err);
    if (s == GDP_OK) s = gcpu_reg(host, "mean", GDP_F32, k_mean, s_reduce, reduce_attrs, err);
    return s;
}
