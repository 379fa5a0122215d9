/* ewplan.h — the walk the elementwise kernels share (binary ops, unary math, activations):
 * an output in row-major order and up to three operands read through their strides.
 *
 * Operands are aligned to the right of the output's shape; a broadcast dim (size 1 against
 * a larger output dim) and a missing leading dim step by 0, every other dim by the
 * operand's own stride (a transpose, a slice or an expand the planner passed as a view).
 * Neighbouring dims are merged wherever every operand steps across them as across one dim,
 * leaving an inner run along which each operand has one stride: 1 for contiguous data,
 * 0 for a broadcast, anything for a view. Work items are pieces of rows of that run, so
 * one long row is split as well as many short ones; items never share an output element,
 * so the thread count changes no bit.
 */
#ifndef GCPU_EWPLAN_H
#define GCPU_EWPLAN_H

#include "kernels.h"

#include <string.h>

#define GCPU_EW_MAX_OPS 3     /* operands read per element */
#define GCPU_EW_PIECE 8192    /* elements of a row per work item at most */

typedef struct gcpu_ewplan {
    int ndim;                                  /* merged dims, outer to inner; the last is the run */
    int64_t shape[GDP_MAX_DIMS];
    int64_t st[GCPU_EW_MAX_OPS][GDP_MAX_DIMS]; /* per operand, in elements */
    int64_t rows, len;                         /* rows of the run, and its length */
    int64_t pieces;                            /* work items per row */
} gcpu_ewplan;

/* Plans the walk of y's elements for operands ops[0..nops) (each broadcastable to y). */
static inline void gcpu_ewplan_make(gcpu_ewplan *p, const gdp_tensor *y, int nops, const gdp_tensor *const *ops)
{
    int nd = y->ndim;
    int64_t st[GCPU_EW_MAX_OPS][GDP_MAX_DIMS];
    for (int k = 0; k < nops; k++)
        for (int d = nd - 1, e = ops[k]->ndim - 1; d >= 0; d--, e--)
            st[k][d] = e < 0 || ops[k]->shape[e] == 1 ? 0 : ops[k]->stride[e];
    /* merge from the inside out; size-1 dims drop out. The dims are collected inner first
     * and reversed at the end. */
    int64_t sh[GDP_MAX_DIMS], ms[GCPU_EW_MAX_OPS][GDP_MAX_DIMS];
    int m = 0;
    for (int d = nd - 1; d >= 0; d--) {
        if (y->shape[d] == 1) continue;
        int merge = m > 0;
        for (int k = 0; k < nops && merge; k++) merge = st[k][d] == ms[k][m - 1] * sh[m - 1];
        if (merge) {
            sh[m - 1] *= y->shape[d];
            continue;
        }
        sh[m] = y->shape[d];
        for (int k = 0; k < nops; k++) ms[k][m] = st[k][d];
        m++;
    }
    if (m == 0) { /* a single element */
        sh[0] = 1;
        for (int k = 0; k < nops; k++) ms[k][0] = 0;
        m = 1;
    }
    p->ndim = m;
    for (int i = 0; i < m; i++) {
        p->shape[m - 1 - i] = sh[i];
        for (int k = 0; k < nops; k++) p->st[k][m - 1 - i] = ms[k][i];
    }
    p->len = p->shape[m - 1];
    p->rows = gdp_numel(y) / p->len;
    p->pieces = (p->len + GCPU_EW_PIECE - 1) / GCPU_EW_PIECE;
}

/* Calls row(ctx, y offset, operand offsets, n) for every piece of rows in items
 * [begin, end) (item = row * pieces + piece). Offsets of successive rows are kept like an
 * odometer: one division per dim for the first row of the range only. */
typedef void (*gcpu_ew_row_fn)(const void *ctx, int64_t oy, const int64_t *off, int64_t n);

static inline void gcpu_ewplan_walk(const gcpu_ewplan *p, int nops, int64_t begin, int64_t end, gcpu_ew_row_fn row,
                                    const void *ctx)
{
    int outer = p->ndim - 1;
    int64_t idx[GDP_MAX_DIMS], off[GCPU_EW_MAX_OPS] = {0};
    int64_t r = begin / p->pieces, piece = begin % p->pieces, rem = r;
    for (int d = outer - 1; d >= 0; d--) {
        idx[d] = rem % p->shape[d];
        rem /= p->shape[d];
        for (int k = 0; k < nops; k++) off[k] += idx[d] * p->st[k][d];
    }
    for (int64_t it = begin; it < end;) {
        int64_t s = piece * GCPU_EW_PIECE, n = p->len - s < GCPU_EW_PIECE ? p->len - s : GCPU_EW_PIECE;
        int64_t o[GCPU_EW_MAX_OPS];
        for (int k = 0; k < nops; k++) o[k] = off[k] + s * p->st[k][outer];
        row(ctx, r * p->len + s, o, n);
        it++;
        if (++piece < p->pieces) continue;
        piece = 0;
        r++;
        for (int d = outer - 1; d >= 0; d--) { /* next row */
            for (int k = 0; k < nops; k++) off[k] += p->st[k][d];
            if (++idx[d] < p->shape[d]) break;
            for (int k = 0; k < nops; k++) off[k] -= p->st[k][d] * p->shape[d];
            idx[d] = 0;
        }
    }
}

/* Work items of the walk, and how many of them make a grain worth a thread. */
static inline int64_t gcpu_ewplan_items(const gcpu_ewplan *p) { return p->rows * p->pieces; }
static inline int64_t gcpu_ewplan_grain(const gcpu_ewplan *p, int64_t elems)
{
    int64_t per_item = p->len < GCPU_EW_PIECE ? p->len : GCPU_EW_PIECE;
    return elems / per_item + 1;
}

/* 1 when every input of n is contiguous (the flat loops apply). */
static inline int gcpu_inputs_contiguous(const gdp_node *n)
{
    for (int i = 0; i < n->n_in; i++)
        if (!gdp_is_contiguous(n->in[i])) return 0;
    return 1;
}

/* n elements of es bytes, `stride` elements apart from src, into the contiguous dst. */
static inline void gcpu_gather(void *dst, const void *src, int64_t stride, size_t es, int64_t n)
{
    if (stride == 1) {
        memcpy(dst, src, (size_t)n * es);
    } else if (es == 4) {
        const uint32_t *s = src;
        uint32_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = s[i * stride];
    } else if (es == 8) {
        const uint64_t *s = src;
        uint64_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = s[i * stride];
    } else {
        const char *s = src;
        char *d = dst;
        for (int64_t i = 0; i < n; i++) memcpy(d + (size_t)i * es, s + (size_t)(i * stride) * es, es);
    }
}

#endif
