/* k_reduce.c — sum, mean, max, max_grad over any set of axes; argmax along one axis;
 * global_norm (f32; f16 and bf16 through k_half.c).
 *
 * Definitions are in src/ops/reduce.c. After dropping size-1 dims and merging neighbours
 * that are both reduced or both kept, x is a row-major sequence of groups, alternately
 * kept and reduced. Two walks cover every layout:
 *   - the innermost group is reduced: each output element folds contiguous runs of that
 *     group, one per index of the outer reduced groups, in row-major order;
 *   - the innermost group is kept: outputs are taken in blocks of up to 64 neighbouring
 *     columns, and rows of the block are folded in, one per reduced index, in order.
 * Each output element belongs to one thread. Sums are in double like the reference's
 * (a run is added in 8 interleaved partial sums, fixed by its length); a full reduction
 * adds fixed blocks and then the block sums in order. Either way the bits do not depend
 * on the thread count. max keeps the reference's rule exactly: the first maximal element
 * in row-major order wins, and a NaN beats any number (so it propagates).
 */
#include "kernels.h"
#include "vmath.h"

#include <math.h>
#include <string.h>

#define BLOCK 8192 /* elements per partial sum of a full reduction */
#define COLS 64    /* columns per work item when the innermost group is kept */

/* ---- the plan ----------------------------------------------------------------------------- */

typedef struct rplan {
    int inner_red;                      /* the innermost group is reduced */
    int64_t L;                          /* its size (stride 1 in x) */
    int nk, nr;                         /* kept and reduced groups outside the innermost */
    int64_t kd[GDP_MAX_DIMS], ks[GDP_MAX_DIMS]; /* their sizes and strides in x */
    int64_t rd[GDP_MAX_DIMS], rs[GDP_MAX_DIMS];
    int64_t n_out, n_red;               /* output elements; elements folded into each */
    int64_t n_rows;                     /* inner kept: outputs / L; inner reduced: n_out */
} rplan;

/* Fills p from x's shape and the axes (every axis when absent); 0, or -1 for bad axes. */
static int plan(const gdp_tensor *x, const gdp_attrs *attrs, rplan *p)
{
    int red[GDP_MAX_DIMS];
    int64_t ax[GDP_MAX_DIMS + 1];
    int na = gdp_attr_ints(attrs, "axes", ax, GDP_MAX_DIMS + 1);
    if (na > GDP_MAX_DIMS) return -1;
    for (int d = 0; d < x->ndim; d++) red[d] = na == 0;
    for (int k = 0; k < na; k++) {
        int64_t a = ax[k] < 0 ? ax[k] + x->ndim : ax[k];
        if (a < 0 || a >= x->ndim) return -1;
        red[a] = 1;
    }
    /* groups (flag, size, stride), outer to inner */
    int gf[GDP_MAX_DIMS], ng = 0;
    int64_t gs[GDP_MAX_DIMS], gst[GDP_MAX_DIMS];
    int64_t stride[GDP_MAX_DIMS], s = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= x->shape[d];
    }
    for (int d = 0; d < x->ndim; d++) {
        if (x->shape[d] == 1) continue;
        if (ng > 0 && gf[ng - 1] == red[d]) {
            gs[ng - 1] *= x->shape[d];
            gst[ng - 1] = stride[d];
        } else {
            gf[ng] = red[d], gs[ng] = x->shape[d], gst[ng] = stride[d], ng++;
        }
    }
    memset(p, 0, sizeof *p);
    p->n_out = 1;
    p->n_red = 1;
    for (int g = 0; g < ng; g++) {
        if (gf[g]) p->n_red *= gs[g];
        else p->n_out *= gs[g];
    }
    if (ng == 0) { /* one element: a reduction of a run of 1 */
        p->inner_red = 1;
        p->L = 1;
        p->n_rows = 1;
        return 0;
    }
    p->inner_red = gf[ng - 1];
    p->L = gs[ng - 1];
    for (int g = 0; g < ng - 1; g++) {
        if (gf[g]) p->rd[p->nr] = gs[g], p->rs[p->nr++] = gst[g];
        else p->kd[p->nk] = gs[g], p->ks[p->nk++] = gst[g];
    }
    p->n_rows = p->inner_red ? p->n_out : (p->L > 0 ? p->n_out / p->L : 0);
    return 0;
}

/* Offset in x of the first element of output row r (a row: an output element when the
 * innermost group is reduced, a run of L outputs when it is kept). */
static int64_t row_base(const rplan *p, int64_t r)
{
    int64_t off = 0;
    for (int d = p->nk - 1; d >= 0; d--) {
        off += (r % p->kd[d]) * p->ks[d];
        r /= p->kd[d];
    }
    return off;
}

/* Steps the index of the outer reduced groups in row-major order, keeping its offset. */
static inline void red_next(const rplan *p, int64_t *idx, int64_t *off)
{
    for (int d = p->nr - 1; d >= 0; d--) {
        *off += p->rs[d];
        if (++idx[d] < p->rd[d]) return;
        *off -= p->rs[d] * p->rd[d];
        idx[d] = 0;
    }
}

/* Outer reduced combinations: how many runs (inner reduced) or rows (inner kept) fold in. */
static int64_t red_count(const rplan *p)
{
    int64_t c = 1;
    for (int d = 0; d < p->nr; d++) c *= p->rd[d];
    return c;
}

/* ---- runs --------------------------------------------------------------------------------- */

/* Sum of x[0..n) in double: 8 interleaved partial sums (a vector of them), then combined
 * in a fixed order: depends on n only. */
static double sum_run(const float *x, int64_t n)
{
    double a[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) a[l] += x[i + l];
    for (int l = 0; i < n; i++, l++) a[l] += x[i];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* Index of the first maximal element of x[0..n), n >= 1, NaN beating everything (the
 * first NaN, if any). Vector passes find whether a NaN occurs and the maximum; a last
 * pass, on average half a row, finds where it first is. */
static int64_t argmax_run(const float *x, int64_t n)
{
    int any_nan = 0;
    for (int64_t i = 0; i < n; i++) any_nan |= x[i] != x[i];
    if (any_nan) {
        for (int64_t i = 0; i < n; i++)
            if (x[i] != x[i]) return i;
    }
    float best = gcpu_max_row(x, n); /* no NaN here: the largest number */
    for (int64_t i = 0; i < n; i++)
        if (x[i] == best) return i;
    return 0;
}

/* v beats the best so far (the reference's test; bitwise, so that loops over it vectorize) */
static inline int beats(float v, float best) { return (v > best) | ((v != v) & (best == best)); }

/* ---- sum, mean -------------------------------------------------------------------------- */

typedef struct rjob {
    const float *x;
    float *y;
    const float *dy; /* max_grad */
    float *dx;
    int64_t *pos;    /* argmax of each output (max_grad, argmax) */
    rplan p;
    double div;      /* 1 for sum, the reduced count for mean */
    double *part;    /* block sums of a full reduction */
} rjob;

static void full_blocks(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    rjob *j = ctx;
    for (int64_t b = begin; b < end; b++) {
        int64_t s = b * BLOCK, e = s + BLOCK < j->p.L ? s + BLOCK : j->p.L;
        j->part[b] = sum_run(j->x + s, e - s);
    }
}

/* inner reduced: output r = sum over the outer reduced index of runs of L */
static void sum_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    rjob *j = ctx;
    const rplan *p = &j->p;
    int64_t nc = red_count(p);
    for (int64_t r = begin; r < end; r++) {
        int64_t base = row_base(p, r), idx[GDP_MAX_DIMS] = {0}, off = 0;
        double s = 0;
        for (int64_t c = 0; c < nc; c++, red_next(p, idx, &off)) s += sum_run(j->x + base + off, p->L);
        j->y[r] = (float)(s / j->div);
    }
}

/* inner kept: items are (row, block of COLS columns) */
static void sum_cols(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    rjob *j = ctx;
    const rplan *p = &j->p;
    int64_t nb = (p->L + COLS - 1) / COLS, nc = red_count(p);
    for (int64_t it = begin; it < end; it++) {
        int64_t r = it / nb, c0 = (it % nb) * COLS, w = p->L - c0 < COLS ? p->L - c0 : COLS;
        const float *x = j->x + row_base(p, r) + c0;
        double acc[COLS] = {0};
        int64_t idx[GDP_MAX_DIMS] = {0}, off = 0;
        for (int64_t c = 0; c < nc; c++, red_next(p, idx, &off))
            for (int64_t k = 0; k < w; k++) acc[k] += x[off + k];
        float *y = j->y + r * p->L + c0;
        for (int64_t k = 0; k < w; k++) y[k] = (float)(acc[k] / j->div);
    }
}

/* work items and grain of a walk: each item folds n_red elements per output */
static void walk_items(const rplan *p, int64_t *items, int64_t *grain)
{
    if (p->inner_red) {
        *items = p->n_rows;
        *grain = GCPU_GRAIN_ELEMS / (p->n_red + 1) + 1;
    } else {
        *items = p->n_rows * ((p->L + COLS - 1) / COLS);
        *grain = GCPU_GRAIN_ELEMS / (p->n_red * COLS + 1) + 1;
    }
}

static gdp_status reduce(const gdp_node *n, int mean, gdp_err *err)
{
    rjob j = {.x = n->in[0]->data, .y = n->out[0]->data};
    if (plan(n->in[0], &n->attrs, &j.p) != 0) return gdp_fail(err, GDP_ERR_INVALID, "%s: bad axes", n->op);
    j.div = mean ? (double)j.p.n_red : 1.0;
    if (j.p.n_out == 0) return GDP_OK;
    if (j.p.inner_red && j.p.nk == 0 && j.p.nr == 0 && j.p.L > BLOCK) {
        /* everything into one number: fixed blocks in parallel, then in order */
        int64_t blocks = (j.p.L + BLOCK - 1) / BLOCK;
        j.part = n->workspace;
        if (j.part == NULL || n->workspace_bytes < sizeof(double) * (size_t)blocks)
            return gdp_fail(err, GDP_ERR_INVALID, "%s: workspace of %zu bytes is too small", n->op, n->workspace_bytes);
        gcpu_parallel_for_grain(blocks, 2, full_blocks, &j);
        double s = 0;
        for (int64_t b = 0; b < blocks; b++) s += j.part[b];
        j.y[0] = (float)(s / j.div);
        return GDP_OK;
    }
    int64_t items, grain;
    walk_items(&j.p, &items, &grain);
    gcpu_parallel_for_grain(items, grain, j.p.inner_red ? sum_rows : sum_cols, &j);
    return GDP_OK;
}

/* The partial sums of a full reduction: a block's each (more than needed otherwise). */
static size_t ws_sum(void *be, const gdp_node *n)
{
    (void)be;
    return gcpu_ws_piece((gdp_numel(n->in[0]) + BLOCK - 1) / BLOCK, sizeof(double));
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

/* ---- max, max_grad -------------------------------------------------------------------------- */

/* inner reduced: the winner of each run, then the runs in order */
static void max_rows(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    rjob *j = ctx;
    const rplan *p = &j->p;
    int64_t nc = red_count(p);
    for (int64_t r = begin; r < end; r++) {
        int64_t base = row_base(p, r), idx[GDP_MAX_DIMS] = {0}, off = 0, at = -1;
        float best = 0.0f;
        for (int64_t c = 0; c < nc; c++, red_next(p, idx, &off)) {
            const float *run = j->x + base + off;
            int64_t k = argmax_run(run, p->L);
            if (at < 0 || beats(run[k], best)) best = run[k], at = base + off + k;
        }
        j->pos[r] = at;
    }
}

/* inner kept: a block of columns races down the reduced rows */
static void max_cols(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    rjob *j = ctx;
    const rplan *p = &j->p;
    int64_t nb = (p->L + COLS - 1) / COLS, nc = red_count(p);
    for (int64_t it = begin; it < end; it++) {
        int64_t r = it / nb, c0 = (it % nb) * COLS, w = p->L - c0 < COLS ? p->L - c0 : COLS;
        int64_t base = row_base(p, r) + c0;
        float best[COLS];
        int64_t at[COLS];
        int64_t idx[GDP_MAX_DIMS] = {0}, off = 0;
        for (int64_t k = 0; k < w; k++) best[k] = j->x[base + k], at[k] = 0;
        red_next(p, idx, &off);
        for (int64_t c = 1; c < nc; c++, red_next(p, idx, &off)) {
            const float *x = j->x + base + off;
            for (int64_t k = 0; k < w; k++) {
                int b = beats(x[k], best[k]);
                best[k] = b ? x[k] : best[k];
                at[k] = b ? off : at[k];
            }
        }
        for (int64_t k = 0; k < w; k++) j->pos[r * p->L + c0 + k] = base + k + at[k];
    }
}

/* j->pos[o] = flat index in x of output o's winner. n_red >= 1 (the op refuses an empty
 * max). pos is the node's workspace, n_out long. */
static gdp_status max_positions(rjob *j, const gdp_node *n, const gdp_tensor *x, gdp_err *err)
{
    if (plan(x, &n->attrs, &j->p) != 0) return gdp_fail(err, GDP_ERR_INVALID, "%s: bad axes", n->op);
    if (j->p.n_out == 0) return GDP_OK;
    if (j->p.n_red == 0) return gdp_fail(err, GDP_ERR_INVALID, "%s: max over an empty axis", n->op);
    j->pos = n->workspace;
    if (j->pos == NULL || n->workspace_bytes < sizeof(int64_t) * (size_t)j->p.n_out)
        return gdp_fail(err, GDP_ERR_INVALID, "%s: workspace of %zu bytes is too small", n->op, n->workspace_bytes);
    int64_t items, grain;
    walk_items(&j->p, &items, &grain);
    gcpu_parallel_for_grain(items, grain, j->p.inner_red ? max_rows : max_cols, j);
    return GDP_OK;
}

static void gather_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    rjob *j = ctx;
    for (int64_t o = begin; o < end; o++) j->y[o] = j->x[j->pos[o]];
}

/* The winners' positions: an index per output (of max; of max_grad, whose dy has the
 * output's shape). */
static size_t ws_max(void *be, const gdp_node *n)
{
    (void)be;
    return gcpu_ws_piece(gdp_numel(n->n_in > 1 ? n->in[0] : n->out[0]), sizeof(int64_t));
}

// x (...) -> y (reduced): the first maximal element of each slice
static gdp_status k_max(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    rjob j = {.x = n->in[0]->data, .y = n->out[0]->data};
    gdp_status s = max_positions(&j, n, n->in[0], err);
    if (s != GDP_OK || j.p.n_out == 0) return s;
    gcpu_parallel_for_grain(j.p.n_out, GCPU_GRAIN_ELEMS, gather_task, &j);
    return GDP_OK;
}

static void zero_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    rjob *j = ctx;
    memset(j->dx + begin, 0, sizeof(float) * (size_t)(end - begin));
}

static void scatter_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    rjob *j = ctx;
    for (int64_t o = begin; o < end; o++) j->dx[j->pos[o]] = j->dy[o];
}

// dy (reduced), x (...) -> dx (like x): dy at each slice's first maximal element, 0 elsewhere
static gdp_status k_max_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    rjob j = {.x = n->in[1]->data, .dy = n->in[0]->data, .dx = n->out[0]->data};
    gdp_status s = max_positions(&j, n, n->in[1], err);
    if (s != GDP_OK) return s;
    gcpu_parallel_for_grain(gdp_numel(n->in[1]), GCPU_GRAIN_ELEMS, zero_task, &j);
    gcpu_parallel_for_grain(j.p.n_out, GCPU_GRAIN_ELEMS, scatter_task, &j); /* winners are distinct */
    return GDP_OK;
}

/* ---- argmax -------------------------------------------------------------------------------- */

typedef struct am_job {
    const float *x;
    int64_t *y;
    int64_t n, inner;
} am_job;

/* items: rows (inner == 1) or (outer, block of COLS columns) */
static void argmax_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const am_job *j = ctx;
    if (j->inner == 1) {
        for (int64_t o = begin; o < end; o++) j->y[o] = argmax_run(j->x + o * j->n, j->n);
        return;
    }
    int64_t nb = (j->inner + COLS - 1) / COLS;
    for (int64_t it = begin; it < end; it++) {
        int64_t o = it / nb, c0 = (it % nb) * COLS, w = j->inner - c0 < COLS ? j->inner - c0 : COLS;
        const float *x = j->x + o * j->n * j->inner + c0;
        float best[COLS];
        int64_t at[COLS];
        for (int64_t c = 0; c < w; c++) best[c] = x[c], at[c] = 0;
        for (int64_t k = 1; k < j->n; k++)
            for (int64_t c = 0; c < w; c++) {
                float v = x[k * j->inner + c];
                int b = beats(v, best[c]);
                best[c] = b ? v : best[c];
                at[c] = b ? k : at[c];
            }
        for (int64_t c = 0; c < w; c++) j->y[o * j->inner + c0 + c] = at[c];
    }
}

// x (outer, n, inner) -> y (outer, inner) i64: the first index of the maximum along n
static gdp_status k_argmax(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    const gdp_tensor *x = n->in[0];
    int64_t axis = gdp_attr_int(&n->attrs, "axis", -1);
    if (axis < 0) axis += x->ndim;
    if (axis < 0 || axis >= x->ndim || n->out[0]->dtype != GDP_I64)
        return gdp_fail(err, GDP_ERR_INVALID, "argmax: axis %lld of a %d-D x", (long long)axis, (int)x->ndim);
    am_job j = {.x = x->data, .y = n->out[0]->data, .n = x->shape[axis], .inner = 1};
    int64_t outer = 1;
    for (int d = 0; d < axis; d++) outer *= x->shape[d];
    for (int d = (int)axis + 1; d < x->ndim; d++) j.inner *= x->shape[d];
    if (outer * j.inner == 0) return GDP_OK;
    if (j.n == 0) return gdp_fail(err, GDP_ERR_INVALID, "argmax: empty axis");
    if (j.inner == 1) {
        gcpu_parallel_for_grain(outer, GCPU_GRAIN_ELEMS / (j.n + 1) + 1, argmax_task, &j);
    } else {
        int64_t items = outer * ((j.inner + COLS - 1) / COLS);
        gcpu_parallel_for_grain(items, GCPU_GRAIN_ELEMS / (j.n * COLS + 1) + 1, argmax_task, &j);
    }
    return GDP_OK;
}

/* ---- global_norm ---------------------------------------------------------------------------- */

typedef struct gn_job {
    const gdp_node *n;
    int64_t first[GDP_MAX_INPUTS + 1]; /* first block of each input; blocks of BLOCK elements */
    double *part;
} gn_job;

static double squares_run(const float *x, int64_t n)
{
    double a[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) a[l] += (double)x[i + l] * x[i + l];
    for (int l = 0; i < n; i++, l++) a[l] += (double)x[i] * x[i];
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

static void gn_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    gn_job *j = ctx;
    int k = 0;
    for (int64_t b = begin; b < end; b++) {
        while (b >= j->first[k + 1]) k++;
        const gdp_tensor *x = j->n->in[k];
        int64_t s = (b - j->first[k]) * BLOCK, len = gdp_numel(x) - s < BLOCK ? gdp_numel(x) - s : BLOCK;
        j->part[b] = squares_run((const float *)x->data + s, len);
    }
}

/* A partial sum per block of each input. */
static size_t ws_global_norm(void *be, const gdp_node *n)
{
    (void)be;
    int64_t blocks = 0;
    for (int k = 0; k < n->n_in; k++) blocks += (gdp_numel(n->in[k]) + BLOCK - 1) / BLOCK;
    return gcpu_ws_piece(blocks + 1, sizeof(double));
}

// xs[0..n) (any shapes) -> y () = sqrt(sum of squares): blocks per input, summed in order
static gdp_status k_global_norm(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    gn_job j = {.n = n};
    if (n->n_in > GDP_MAX_INPUTS) return gdp_fail(err, GDP_ERR_INVALID, "global_norm: %d inputs", n->n_in);
    for (int k = 0; k < n->n_in; k++) j.first[k + 1] = j.first[k] + (gdp_numel(n->in[k]) + BLOCK - 1) / BLOCK;
    int64_t blocks = j.first[n->n_in];
    j.part = n->workspace;
    if (j.part == NULL || n->workspace_bytes < sizeof(double) * (size_t)blocks)
        return gdp_fail(err, GDP_ERR_INVALID, "global_norm: workspace of %zu bytes is too small", n->workspace_bytes);
    gcpu_parallel_for_grain(blocks, 2, gn_task, &j);
    double ss = 0;
    for (int64_t b = 0; b < blocks; b++) ss += j.part[b];
    ((float *)n->out[0]->data)[0] = (float)sqrt(ss);
    return GDP_OK;
}

/* ---- registration ---------------------------------------------------------------------------- */

static int s_f32(void *backend, const gdp_node *n)
{
    (void)backend;
    return gcpu_all_f32(n);
}

/* f32 in, i64 out */
static int s_argmax(void *backend, const gdp_node *n)
{
    (void)backend;
    return n->in[0]->dtype == GDP_F32 && n->out[0]->dtype == GDP_I64;
}

GCPU_HALF_OF(k_sum, s_f32, ws_sum)
GCPU_HALF_OF(k_mean, s_f32, ws_sum)
GCPU_HALF_OF(k_max, s_f32, ws_max)
GCPU_HALF_OF(k_max_grad, s_f32, ws_max)
GCPU_HALF_OF(k_argmax, s_argmax, NULL)
GCPU_HALF_OF(k_global_norm, s_f32, ws_global_norm)

gdp_status gcpu_register_reduce(gcpu_regctx *r, gdp_err *err)
{
    gdp_status s = gcpu_reg_floats(r, "sum", GCPU_FLOATS(k_sum, s_f32, ws_sum), 0, NULL, err);
    if (s == GDP_OK) s = gcpu_reg_floats(r, "mean", GCPU_FLOATS(k_mean, s_f32, ws_sum), 0, NULL, err);
    if (s == GDP_OK) s = gcpu_reg_floats(r, "max", GCPU_FLOATS(k_max, s_f32, ws_max), 0, NULL, err);
    if (s == GDP_OK) s = gcpu_reg_floats(r, "max_grad", GCPU_FLOATS(k_max_grad, s_f32, ws_max), 0, NULL, err);
    if (s == GDP_OK) s = gcpu_reg_floats(r, "argmax", GCPU_FLOATS(k_argmax, s_argmax, NULL), 0, NULL, err);
    if (s == GDP_OK) s = gcpu_reg_floats(r, "global_norm", GCPU_FLOATS(k_global_norm, s_f32, ws_global_norm), 0, NULL, err);
    /* a half input summed into an f32 output (dtype=f32): widened, summed in double as
     * the f32 kernel does, rounded once to f32 */
    static const char *const mixed[] = {"bf16->f32", "f16->f32"};
    for (int i = 0; i < 2 && s == GDP_OK; i++) {
        s = gcpu_reg_mixed(r, "sum", mixed[i], 0, k_sum_half, k_sum_half_ok, k_sum_half_ws, err);
        if (s == GDP_OK) s = gcpu_reg_mixed(r, "mean", mixed[i], 0, k_mean_half, k_mean_half_ok, k_mean_half_ws, err);
    }
    return s;
}
