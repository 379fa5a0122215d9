/* shape.c — helpers for shape rules: messages, broadcasting, axes. */
#include "core.h"

#include <stdio.h>
#include <string.h>

int gd_infer_fail(gd_infer *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    return 1;
}

const char *gd_shape_str(const gd_shape *s, char *buf, size_t cap)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "%s[", gd_dtype_name((gd_dtype)s->dtype));
    for (int i = 0; i < s->ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)s->dim[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

int64_t gd_shape_numel(const gd_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->dim[i];
    return n;
}

int gd_broadcast(gd_infer *c, const gd_shape *a, const char *a_name, const gd_shape *b, const char *b_name,
                 gd_shape *out)
{
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    gd_shape r = {.dtype = a->dtype, .ndim = nd};
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t da = ia >= 0 ? a->dim[ia] : 1, db = ib >= 0 ? b->dim[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char sa[128], sb[128];
            return gd_infer_fail(c, "%s %s and %s %s do not broadcast (axis %d: %lld vs %lld)", a_name,
                                 gd_shape_str(a, sa, sizeof sa), b_name, gd_shape_str(b, sb, sizeof sb), i,
                                 (long long)da, (long long)db);
        }
        r.dim[i] = da == 1 ? db : da;
    }
    *out = r;
    return 0;
}

int gd_axis(gd_infer *c, int64_t axis, int ndim, const char *what)
{
    int64_t a = axis < 0 ? axis + ndim : axis;
    if (a < 0 || a >= ndim) {
        gd_infer_fail(c, "%s %lld is out of range for a tensor of %d dims", what, (long long)axis, ndim);
        return -1;
    }
    return (int)a;
}
