/* k_index.c — gathers and scatters: embedding, index_select and their gradients; concat
 * and slice_grad (slice itself is a view: the planner aliases it, no kernel runs).
 *
 * Definitions are in src/ops/index.c and layout.c. The forward ops move whole elements, so
 * one kernel serves every float dtype and matches the reference bit for bit.
 *
 * The scatter-adds (embedding_grad, index_select_grad) are turned into gathers: the ids
 * are sorted by target row with a counting sort (stable, so each row keeps its positions
 * in ascending order), then every output row is owned by one thread, which adds its
 * contributions in that order in double and rounds once — exactly the reference's sums,
 * whatever the thread count.
 */
#include "kernels.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static int64_t prod(const int64_t *d, int from, int to)
{
    int64_t n = 1;
    for (int i = from; i < to; i++) n *= d[i];
    return n;
}

static inline int64_t load_index(const gdp_tensor *t, int64_t i)
{
    return t->dtype == GDP_I32 ? (int64_t)((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

/* "ids[1, 2]" for the element at flat position i, as index.c writes it. */
static const char *position_str(const char *name, const gdp_tensor *t, int64_t i, char *buf, size_t cap)
{
    int64_t idx[GDP_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = t->shape[d] > 0 ? i % t->shape[d] : 0;
        i = t->shape[d] > 0 ? i / t->shape[d] : 0;
    }
    size_t n = (size_t)snprintf(buf, cap, "%s[", name);
    for (int d = 0; d < t->ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)idx[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

/* The first id outside [0, V), or -1. */
static int64_t first_bad_id(const gdp_tensor *ids, int64_t V)
{
    int64_t n = gdp_numel(ids);
    if (ids->dtype == GDP_I32) {
        const int32_t *p = ids->data;
        for (int64_t i = 0; i < n; i++)
            if (p[i] < 0 || p[i] >= V) return i;
    } else {
        const int64_t *p = ids->data;
        for (int64_t i = 0; i < n; i++)
            if (p[i] < 0 || p[i] >= V) return i;
    }
    return -1;
}

static gdp_status embedding_bad_id(const gdp_tensor *ids, int64_t p, int64_t V, gdp_err *err)
{
    char pos[200];
    return gdp_fail(err, GDP_ERR_INVALID, "%s = %lld is out of range for a table of %lld rows",
                    position_str("ids", ids, p, pos, sizeof pos), (long long)load_index(ids, p), (long long)V);
}

static gdp_status select_bad_idx(const gdp_tensor *idx, int64_t j, int axis, int64_t n, gdp_err *err)
{
    return gdp_fail(err, GDP_ERR_INVALID, "idx[%lld] = %lld is out of range for axis %d of size %lld", (long long)j,
                    (long long)load_index(idx, j), axis, (long long)n);
}

/* count elements of es bytes; short rows are copied element-wise (memcpy's call costs more
 * than a few elements) */
static inline void copy_elems(char *dst, const char *src, int64_t count, size_t es)
{
    if (count >= 16 || (es != 4 && es != 2)) {
        memcpy(dst, src, (size_t)count * es);
    } else if (es == 4) {
        for (int64_t i = 0; i < count; i++) ((uint32_t *)(void *)dst)[i] = ((const uint32_t *)(const void *)src)[i];
    } else {
        for (int64_t i = 0; i < count; i++) ((uint16_t *)(void *)dst)[i] = ((const uint16_t *)(const void *)src)[i];
    }
}

/* ---- gathers: embedding, index_select --------------------------------------------------------- */

/* y (outer, m, inner) = x (outer, n, inner) at rows sel[j] along the middle axis; an
 * embedding is outer = 1, n = V, m = number of ids, inner = D. */
typedef struct gather_job {
    const char *x;
    char *y;
    const gdp_tensor *sel;
    int64_t n, m, inner;
    size_t es;
} gather_job;

static void gather_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const gather_job *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        int64_t o = r / j->m, k = r % j->m;
        int64_t src = (o * j->n + load_index(j->sel, k)) * j->inner;
        copy_elems(j->y + (size_t)(r * j->inner) * j->es, j->x + (size_t)src * j->es, j->inner, j->es);
    }
}

static void gather(gather_job *j, int64_t outer)
{
    if (j->inner == 0 || j->es == 0) return;
    int64_t rows = outer * j->m;
    gcpu_parallel_for_grain(rows, 4 * GCPU_GRAIN_ELEMS / j->inner + 1, gather_task, j);
}

// table (V, D), ids (...) -> y (..., D)
static gdp_status k_embedding(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    const gdp_tensor *table = n->in[0], *ids = n->in[1];
    int64_t V = table->shape[0];
    int64_t bad = first_bad_id(ids, V);
    if (bad >= 0) return embedding_bad_id(ids, bad, V, err);
    gather_job j = {.x = table->data, .y = n->out[0]->data, .sel = ids, .n = V, .m = gdp_numel(ids),
                    .inner = table->shape[1], .es = gdp_dtype_size(table->dtype)};
    gather(&j, 1);
    return GDP_OK;
}

// x (outer, n, inner), idx (m) -> y (outer, m, inner)
static gdp_status k_index_select(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    const gdp_tensor *x = n->in[0], *idx = n->in[1];
    int axis = (int)gdp_attr_int(&n->attrs, "axis", 0);
    if (axis < 0) axis += x->ndim;
    int64_t len = x->shape[axis];
    int64_t bad = first_bad_id(idx, len);
    if (bad >= 0) return select_bad_idx(idx, bad, axis, len, err);
    gather_job j = {.x = x->data, .y = n->out[0]->data, .sel = idx, .n = len, .m = idx->shape[0],
                    .inner = prod(x->shape, axis + 1, x->ndim), .es = gdp_dtype_size(x->dtype)};
    gather(&j, prod(x->shape, 0, axis));
    return GDP_OK;
}

/* ---- scatter-adds: embedding_grad, index_select_grad ------------------------------------------ */

/* dx (outer, n, inner) = sum over j with sel[j] == i of dy (outer, m, inner)[o, j]; the
 * positions of each target i are order[start[i] .. start[i+1]), ascending. */
typedef struct scatter_job {
    const gdp_tensor *dy, *dx;
    const int64_t *start, *order;
    int64_t n, m, inner;
    atomic_int oom;
} scatter_job;

static void scatter_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    scatter_job *j = ctx;
    int64_t inner = j->inner;
    /* one slot for both buffers: thread 0's other slot holds the sort */
    double *acc = gcpu_scratch(tid, GCPU_SLOT_KERNEL, (sizeof(double) + sizeof(float)) * (size_t)inner);
    if (acc == NULL) {
        atomic_store(&j->oom, 1);
        return;
    }
    float *row = (float *)(acc + inner);
    int32_t dt = j->dy->dtype;
    size_t es = gdp_dtype_size(dt);
    for (int64_t r = begin; r < end; r++) {
        int64_t o = r / j->n, i = r % j->n;
        int64_t q0 = j->start[i], q1 = j->start[i + 1];
        /* rows nobody picked are most of a large vocabulary's: zero bits are 0 in every dtype */
        if (q0 == q1) {
            memset((char *)j->dx->data + (size_t)(r * inner) * es, 0, (size_t)inner * es);
            continue;
        }
        for (int64_t c = 0; c < inner; c++) acc[c] = 0.0;
        for (int64_t q = q0; q < q1; q++) {
            int64_t src = (o * j->m + j->order[q]) * inner;
            if (dt == GDP_F32) {
                const float *s = (const float *)j->dy->data + src;
                for (int64_t c = 0; c < inner; c++) acc[c] += s[c];
            } else {
                gcpu_load_f32(dt, j->dy->data, src, row, inner);
                for (int64_t c = 0; c < inner; c++) acc[c] += row[c];
            }
        }
        for (int64_t c = 0; c < inner; c++) row[c] = (float)acc[c];
        gcpu_store_f32(dt, j->dx->data, r * inner, row, inner);
    }
}

/* Counting sort of the m entries of sel (each in [0, n), checked) into start (n + 1 used) and
 * order (m), both in `start` (n + 2 + m long, the node's workspace). Stable: a target's
 * positions come out ascending, the order in which the reference adds them. */
static void sort_by_target(const gdp_tensor *sel, int64_t m, int64_t n, int64_t *start, int64_t **order)
{
    *order = start + n + 2;
    /* counts at start[i + 2], so that after the prefix sum start[i + 1] is where target i
     * begins; filling advances it to where target i ends, leaving start[i] .. start[i+1] */
    memset(start, 0, sizeof(int64_t) * (size_t)(n + 2));
    for (int64_t j = 0; j < m; j++) start[load_index(sel, j) + 2]++;
    for (int64_t i = 2; i < n + 2; i++) start[i] += start[i - 1];
    for (int64_t j = 0; j < m; j++) (*order)[start[load_index(sel, j) + 1]++] = j;
}

/* The sort's arrays: n + 2 + m indices, n the rows of the gradient's axis (the table's
 * rows for embedding_grad), m the ids. */
static size_t ws_scatter(void *be, const gdp_node *n)
{
    (void)be;
    const gdp_tensor *dx = n->out[0];
    int64_t rows;
    if (strcmp(n->op, "embedding_grad") == 0) {
        rows = dx->shape[0];
    } else {
        int64_t axis = gdp_attr_int(&n->attrs, "axis", 0);
        if (axis < 0) axis += dx->ndim;
        rows = axis >= 0 && axis < dx->ndim ? dx->shape[axis] : 0;
    }
    return gcpu_ws_piece(rows + 2 + gdp_numel(n->in[1]), sizeof(int64_t));
}

static gdp_status scatter(const gdp_node *n, scatter_job *j, int64_t outer, gdp_err *err)
{
    if (outer * j->n == 0 || j->inner == 0) return GDP_OK;
    int64_t *order, *start = n->workspace;
    if (start == NULL || n->workspace_bytes < sizeof(int64_t) * (size_t)(j->n + 2 + j->m))
        return gdp_fail(err, GDP_ERR_INVALID, "%s: workspace of %zu bytes is too small to sort %lld ids", n->op,
                        n->workspace_bytes, (long long)j->m);
    sort_by_target(n->in[1], j->m, j->n, start, &order);
    j->start = start;
    j->order = order;
    atomic_init(&j->oom, 0);
    /* a row costs its inner length to write plus that much per contribution */
    int64_t per_row = j->inner * (2 + j->m / j->n);
    gcpu_parallel_for_grain(outer * j->n, GCPU_GRAIN_ELEMS / per_row + 1, scatter_task, j);
    if (atomic_load(&j->oom)) return gdp_fail(err, GDP_ERR_NOMEM, "%s: no memory for %lld accumulators", n->op, (long long)j->inner);
    return GDP_OK;
}

// dy (..., D), ids (...) -> dtable (num_embeddings, D)
static gdp_status k_embedding_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    const gdp_tensor *dy = n->in[0], *ids = n->in[1], *dt = n->out[0];
    int64_t V = dt->shape[0];
    int64_t bad = first_bad_id(ids, V);
    if (bad >= 0) return embedding_bad_id(ids, bad, V, err);
    scatter_job j = {.dy = dy, .dx = dt, .n = V, .m = gdp_numel(ids), .inner = dt->shape[1]};
    return scatter(n, &j, 1, err);
}

// dy (outer, m, inner), idx (m) -> dx (outer, n, inner) of input_shape
static gdp_status k_index_select_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream;
    const gdp_tensor *dy = n->in[0], *idx = n->in[1], *dx = n->out[0];
    int axis = (int)gdp_attr_int(&n->attrs, "axis", 0);
    if (axis < 0) axis += dx->ndim;
    int64_t len = dx->shape[axis];
    int64_t bad = first_bad_id(idx, len);
    if (bad >= 0) return select_bad_idx(idx, bad, axis, len, err);
    scatter_job j = {.dy = dy, .dx = dx, .n = len, .m = idx->shape[0], .inner = prod(dx->shape, axis + 1, dx->ndim)};
    return scatter(n, &j, prod(dx->shape, 0, axis), err);
}

/* ---- concat, slice_grad: byte movers over pieces of the output --------------------------------- */

/* Each of these writes rows of `row` bytes; a row is made of segments copied from an input
 * (or zeroed). The output is cut into pieces of PIECE bytes, whatever the row length, so
 * long rows and many short ones both spread over the threads. */
#define PIECE ((int64_t)1 << 15)

typedef struct move_job {
    char *dst;
    int64_t total, row;          /* bytes of the output and of one of its rows */
    int kind;                    /* 0 concat, 1 slice_grad */
    int n_src;
    const char *src[GDP_MAX_INPUTS];
    int64_t seg[GDP_MAX_INPUTS + 1]; /* concat: input k fills row bytes [seg[k], seg[k+1]) */
    int64_t src_row;             /* slice_grad: bytes of a row of dy */
    int64_t first;               /* slice_grad: byte offset in dx's row where dy's row goes */
} move_job;

static void move_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const move_job *j = ctx;
    int64_t pos = begin * PIECE, stop = end * PIECE < j->total ? end * PIECE : j->total;
    while (pos < stop) {
        int64_t o = pos / j->row, r = pos % j->row, len;
        char *d = j->dst + pos;
        if (j->kind == 0) {
            int k = 0;
            while (r >= j->seg[k + 1]) k++;
            len = j->seg[k + 1] - r;
            if (len > stop - pos) len = stop - pos;
            memcpy(d, j->src[k] + o * (j->seg[k + 1] - j->seg[k]) + (r - j->seg[k]), (size_t)len);
        } else {
            /* the big row: zeros, then the slice's row of dy, then zeros */
            int64_t a = j->first, b = j->first + j->src_row;
            len = r < a ? a - r : r < b ? b - r : j->row - r;
            if (len > stop - pos) len = stop - pos;
            if (r >= a && r < b) memcpy(d, j->src[0] + o * j->src_row + (r - a), (size_t)len);
            else memset(d, 0, (size_t)len);
        }
        pos += len;
    }
}

static void move_run(move_job *j)
{
    if (j->total == 0 || j->row == 0) return;
    gcpu_parallel_for_grain((j->total + PIECE - 1) / PIECE, 8, move_task, j);
}

/* Python slice bounds, as layout.c: negative start/end count from the end, then both
 * clamp to [0, n]; an empty range has length 0. */
static void slice_bounds(int64_t n, int64_t start, int64_t end, int64_t *first, int64_t *len)
{
    if (start < 0) start += n;
    if (end < 0) end += n;
    if (start < 0) start = 0;
    if (start > n) start = n;
    if (end < 0) end = 0;
    if (end > n) end = n;
    *first = start;
    *len = end > start ? end - start : 0;
}

// x0 (outer, n0, inner), x1 (outer, n1, inner), ... -> y (outer, n0 + n1 + ..., inner)
static gdp_status k_concat(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    const gdp_tensor *y = n->out[0];
    int axis = (int)gdp_attr_int(&n->attrs, "axis", 0);
    if (axis < 0) axis += y->ndim;
    int64_t es = (int64_t)gdp_dtype_size(y->dtype), inner = prod(y->shape, axis + 1, y->ndim);
    move_job j = {.dst = y->data, .total = gdp_numel(y) * es, .kind = 0, .n_src = n->n_in};
    j.seg[0] = 0;
    for (int k = 0; k < n->n_in; k++) {
        j.src[k] = n->in[k]->data;
        j.seg[k + 1] = j.seg[k] + n->in[k]->shape[axis] * inner * es;
    }
    j.row = j.seg[n->n_in];
    move_run(&j);
    return GDP_OK;
}

// dy (outer, len, inner) -> dx (outer, n, inner): dy at [first, first+len), zeros elsewhere
static gdp_status k_slice_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    const gdp_tensor *dx = n->out[0];
    int axis = (int)gdp_attr_int(&n->attrs, "axis", 0);
    if (axis < 0) axis += dx->ndim;
    int64_t first, len;
    slice_bounds(dx->shape[axis], gdp_attr_int(&n->attrs, "start", 0), gdp_attr_int(&n->attrs, "end", INT64_MAX),
                 &first, &len);
    int64_t es = (int64_t)gdp_dtype_size(dx->dtype), inner = prod(dx->shape, axis + 1, dx->ndim);
    move_job j = {.dst = dx->data, .total = gdp_numel(dx) * es, .kind = 1, .n_src = 1};
    j.src[0] = n->in[0]->data;
    j.row = dx->shape[axis] * inner * es;
    j.src_row = len * inner * es;
    j.first = first * inner * es;
    move_run(&j);
    return GDP_OK;
}

/* ---- registration ---------------------------------------------------------------------------- */

gdp_status gcpu_register_index(gcpu_regctx *r, gdp_err *err)
{
    /* every kernel here moves elements or adds them in double: one for each float dtype */
    static const int32_t dts[] = {GDP_F32, GDP_F16, GDP_BF16};
    static const struct { const char *op; gdp_launch_fn fn; gdp_workspace_fn ws; } ks[] = {
        {"embedding", k_embedding, NULL},         {"embedding_grad", k_embedding_grad, ws_scatter},
        {"index_select", k_index_select, NULL},   {"index_select_grad", k_index_select_grad, ws_scatter},
        {"concat", k_concat, NULL},               {"slice_grad", k_slice_grad, NULL},
    };
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            gcpu_kdef k = {.op = ks[i].op, .dtype = dts[d], .launch = ks[i].fn, .workspace = ks[i].ws};
            gdp_status s = gcpu_register(r, &k, err);
            if (s != GDP_OK) return s;
        }
    return GDP_OK;
}
