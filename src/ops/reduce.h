/* reduce.h — what the reduce family offers other families, and small helpers shared by
 * the reduce, softmax and norm families (src/ops/reduce.c, softmax.c, norm.c).
 */
#ifndef GD_OPS_REDUCE_H
#define GD_OPS_REDUCE_H

#include "opdef.h"

/* NumPy broadcast of x to `shape` (op "expand"). x's dims, aligned to the right, must each
 * equal the target's or be 1. The gradient of a reduction is its output expanded back. */
gd_tensor *gd_expand(gd_tensor *x, int ndim, const int64_t *shape);

/* Copies a node's attributes into builder form, so that a gradient rule can hand the
 * forward op's attributes on to its backward op unchanged. Returns how many. */
static inline int rd_attrs_copy(const gdp_attrs *a, gd_attr *out, int cap)
{
    int n = 0;
    for (int k = 0; a != NULL && k < a->n && n < cap; k++) {
        const gdp_attr *s = &a->items[k];
        if (s->kind == GDP_ATTR_INT) out[n++] = gd_attr_i(s->name, s->i);
        else if (s->kind == GDP_ATTR_FLOAT) out[n++] = gd_attr_f(s->name, s->f);
        else out[n++] = gd_attr_is(s->name, s->n, s->ints);
    }
    return n;
}

/* An infer rule whose helper (gd_axis, gd_broadcast) already wrote the message: fail
 * through gd_infer_fail so the return value follows its convention. */
static inline int rd_infer_failed(gd_infer *c)
{
    char m[sizeof c->msg];
    memcpy(m, c->msg, sizeof m);
    m[sizeof m - 1] = '\0';
    return gd_infer_fail(c, "%s", m);
}

/* Same dims (dtype not compared). */
static inline int rd_same_dims(const gd_shape *a, const gd_shape *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->dim[d] != b->dim[d]) return 0;
    return 1;
}

/* "[2, 3]" for messages. */
static inline const char *rd_ints(const int64_t *v, int n, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n && k < cap; i++) k += (size_t)snprintf(buf + k, cap - k, i ? ", %lld" : "%lld", (long long)v[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

/* "f32[2, 3]" for messages. */
static inline const char *rd_desc(const gd_shape *s, char *buf, size_t cap)
{
    char dims[200];
    snprintf(buf, cap, "%s%s", gd_dtype_name((gd_dtype)s->dtype), rd_ints(s->dim, s->ndim, dims, sizeof dims));
    return buf;
}

/* Ops defined on real numbers refuse integer and bool operands (no implicit casts). */
static inline int rd_need_float(gd_infer *c, const gd_shape *s, const char *name)
{
    if (s->dtype == GDP_F32 || s->dtype == GDP_F16 || s->dtype == GDP_BF16 || s->dtype == GDP_F64) return 0;
    char d[240];
    return gd_infer_fail(c, "%s %s must be a float tensor", name, rd_desc(s, d, sizeof d));
}

#endif
