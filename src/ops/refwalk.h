/* refwalk.h — how the reference kernels read strided inputs and find their scratch.
 *
 * A reference kernel may be given inputs that are views — transposed, sliced, broadcast
 * (strides in elements, 0 along a broadcast dim, data at element (0, ..., 0)) — while its
 * outputs are always contiguous. So the kernels never index an input's data by its
 * row-major position: they walk with an odometer (rw_walk) that keeps, for a few tensors
 * at once, the offset of the element at the current index, or compute offsets from
 * strides (rw_at), or gather what they need into contiguous doubles in their workspace
 * (rw_gather). Scratch comes from node->workspace, sized by the op's ref_workspace:
 * nothing is allocated while a program runs.
 */
#ifndef GD_OPS_REFWALK_H
#define GD_OPS_REFWALK_H

#include "opdef.h"

#include <stdio.h>
#include <string.h>

#define RW_MAX 4 /* tensors one walk carries */

typedef struct rw_walk {
    int ndim, n;
    int64_t shape[GDP_MAX_DIMS];
    int64_t idx[GDP_MAX_DIMS];
    int64_t stride[RW_MAX][GDP_MAX_DIMS];
    int64_t off[RW_MAX];
} rw_walk;

/* A walk over `shape` in row-major order, carrying no tensor yet. */
static inline void rw_begin(rw_walk *w, int ndim, const int64_t *shape)
{
    w->ndim = ndim;
    w->n = 0;
    for (int d = 0; d < ndim; d++) {
        w->shape[d] = shape[d];
        w->idx[d] = 0;
    }
}

/* Carries explicit strides (one per dim of the walk); returns the tensor's slot. */
static inline int rw_add_strides(rw_walk *w, const int64_t *stride)
{
    int k = w->n++;
    for (int d = 0; d < w->ndim; d++) w->stride[k][d] = stride[d];
    w->off[k] = 0;
    return k;
}

/* Carries t, its dims aligned to the right of the walk's; dims t lacks or has as 1 step
 * by 0 (NumPy broadcasting). */
static inline int rw_add(rw_walk *w, const gdp_tensor *t)
{
    int k = w->n++;
    for (int d = w->ndim - 1, e = t->ndim - 1; d >= 0; d--, e--)
        w->stride[k][d] = e >= 0 && t->shape[e] != 1 ? t->stride[e] : 0;
    w->off[k] = 0;
    return k;
}

/* Carries a contiguous tensor of the walk's own shape (an output). */
static inline int rw_add_contig(rw_walk *w)
{
    int k = w->n++;
    int64_t s = 1;
    for (int d = w->ndim - 1; d >= 0; d--) {
        w->stride[k][d] = s;
        s *= w->shape[d];
    }
    w->off[k] = 0;
    return k;
}

/* To the next index in row-major order. */
static inline void rw_next(rw_walk *w)
{
    for (int d = w->ndim - 1; d >= 0; d--) {
        for (int k = 0; k < w->n; k++) w->off[k] += w->stride[k][d];
        if (++w->idx[d] < w->shape[d]) return;
        for (int k = 0; k < w->n; k++) w->off[k] -= w->stride[k][d] * w->shape[d];
        w->idx[d] = 0;
    }
}

/* The rows of tensors of one shape (like's) along `axis`: a walk over every index of the
 * other dims, carrying t[0..n) by their strides (outputs' strides are row-major). Element
 * j of a row lies at off[k] + j * t[k]->stride[axis]. Returns the number of rows. */
static inline int64_t rw_rows(rw_walk *w, const gdp_tensor *like, int axis, int n, const gdp_tensor *const *t)
{
    int64_t shape[GDP_MAX_DIMS], rows = 1;
    for (int d = 0; d < like->ndim; d++) {
        shape[d] = d == axis ? 1 : like->shape[d];
        rows *= shape[d];
    }
    rw_begin(w, like->ndim, shape);
    for (int k = 0; k < n; k++) rw_add_strides(w, t[k]->stride);
    return rows;
}

/* "ids[1, 2]": the index of element i (row-major) of t, for messages about bad data. */
static inline const char *rw_position(const char *name, const gdp_tensor *t, int64_t i, char *buf, size_t cap)
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

/* Copies one element of es bytes (the layout and indexing kernels move whole elements of
 * any dtype). */
static inline void rw_copy_elem(char *dst, const char *src, size_t es)
{
    switch (es) {
    case 1: *dst = *src; break;
    case 2: memcpy(dst, src, 2); break;
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    default: memcpy(dst, src, es);
    }
}

/* Row-major strides of a shape. */
static inline void rw_contig_strides(int ndim, const int64_t *shape, int64_t *stride)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= shape[d];
    }
}

/* Element at offset `off` (elements, from data) as double, and a double stored there with
 * the rounding of the tensor's dtype. f32 and f64 are inlined: the reference also trains
 * small models. */
static inline double rw_ld(const gdp_tensor *t, int64_t off)
{
    if (t->dtype == GDP_F32) return ((const float *)t->data)[off];
    if (t->dtype == GDP_F64) return ((const double *)t->data)[off];
    return gd_ref_load_at(t, off);
}

static inline void rw_st(const gdp_tensor *t, int64_t off, double v)
{
    if (t->dtype == GDP_F32) ((float *)t->data)[off] = (float)v;
    else if (t->dtype == GDP_F64) ((double *)t->data)[off] = v;
    else gd_ref_store_at(t, off, v);
}

/* An integer element (an index) at offset `off`, read as an integer so that large i64
 * values keep their low bits. */
static inline int64_t rw_ld_index(const gdp_tensor *t, int64_t off)
{
    if (t->dtype == GDP_I32) return ((const int32_t *)t->data)[off];
    if (t->dtype == GDP_I64) return ((const int64_t *)t->data)[off];
    return (int64_t)gd_ref_load_at(t, off);
}

/* Dims [from, ndim) of t, starting at element offset `base`, into dst as doubles in
 * row-major order: a slice t[i0, ..., i(from-1)] with base its offset, or all of t with
 * from = 0 and base = 0. */
static inline void rw_gather_from(const gdp_tensor *t, int from, int64_t base, double *dst)
{
    int nd = t->ndim - from;
    int64_t n = 1;
    for (int d = from; d < t->ndim; d++) n *= t->shape[d];
    int contiguous = 1;
    for (int64_t d = t->ndim - 1, s = 1; d >= from; d--) {
        if (t->shape[d] != 1 && t->stride[d] != s) contiguous = 0;
        s *= t->shape[d];
    }
    if (contiguous && t->dtype == GDP_F32) {
        const float *p = (const float *)t->data + base;
        for (int64_t i = 0; i < n; i++) dst[i] = p[i];
        return;
    }
    if (contiguous && t->dtype == GDP_F64) {
        memcpy(dst, (const double *)t->data + base, (size_t)n * sizeof *dst);
        return;
    }
    rw_walk w;
    rw_begin(&w, nd, t->shape + from);
    rw_add_strides(&w, t->stride + from);
    for (int64_t i = 0; i < n; i++, rw_next(&w)) dst[i] = rw_ld(t, base + w.off[0]);
}

static inline void rw_gather(const gdp_tensor *t, double *dst) { rw_gather_from(t, 0, 0, dst); }

/* Offset of index (i0, i1, ...) in t; idx has t->ndim entries. */
static inline int64_t rw_at(const gdp_tensor *t, const int64_t *idx)
{
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++) off += idx[d] * t->stride[d];
    return off;
}

/* Fused ops whose references compose other files' references (matmul.c's linear_qkv, for
 * attention.c's linear_qkv_rope): the reference kernel and its workspace. */
gdp_status gd_linear_qkv_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err);
size_t gd_linear_qkv_ws(const gdp_node *node);
/* xn (contiguous, x's shape and dtype) = rms_norm(x, g; eps) over x's last axis, as that op
 * computes and stores it (matmul.c; rope_cache_write's q and k norms use it too). */
void gd_rms_rows(const gdp_tensor *x, const gdp_tensor *g, double eps, const gdp_tensor *xn);

/* Workspace sizing: `n` doubles, never 0 (a kernel may still form a pointer to it). */
static inline size_t rw_doubles(int64_t n) { return (size_t)(n > 0 ? n : 1) * sizeof(double); }

/* The kernel's scratch, checked against what it needs: NULL (with a message in err) when
 * the host gave less than the op's ref_workspace asked for. */
static inline void *rw_workspace(const gdp_node *node, size_t bytes, gdp_err *err)
{
    if (node->workspace == NULL || node->workspace_bytes < bytes) {
        gdp_fail(err, GDP_ERR_INVALID, "the reference kernel needs %zu bytes of workspace, it got %zu", bytes,
                 node->workspace == NULL ? (size_t)0 : node->workspace_bytes);
        return NULL;
    }
    return node->workspace;
}

#endif
