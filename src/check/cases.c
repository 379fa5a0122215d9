/* cases.c — the sweep-case mini-language (see opdef.h) and deterministic input data.
 *
 * A spec that parses describes inputs that can be sized and filled without overflow:
 * dims are non-negative with an element and byte count that fit (checked.h), and a value
 * range is finite, not empty, and within what an integer dtype can hold. */
#include "cases.h"
#include "checked.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *skip(const char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    return s;
}

static int parse_ints(const char **ps, int64_t *v, int cap, int *n)
{
    const char *s = *ps;
    if (*s != '[') return -1;
    s++;
    *n = 0;
    s = skip(s);
    if (*s == ']') {
        *ps = s + 1;
        return 0;
    }
    for (;;) {
        char *end;
        long long x = strtoll(s, &end, 10);
        if (end == s || *n >= cap) return -1;
        v[(*n)++] = x;
        s = skip(end);
        if (*s == ',') {
            s = skip(s + 1);
            continue;
        }
        if (*s == ']') {
            *ps = s + 1;
            return 0;
        }
        return -1;
    }
}

/* A range must be finite and not empty; for integers its values must fit the dtype, and
 * stay where a double holds every integer exactly (2^53). */
static int check_range(const gd_case_input *ci, char *msg, size_t cap)
{
    if (!isfinite(ci->lo) || !isfinite(ci->hi) || !(ci->lo < ci->hi)) {
        snprintf(msg, cap, "bad range %g:%g (want finite lo < hi)", ci->lo, ci->hi);
        return -1;
    }
    if (ci->kind != 'i') return 0;
    double lo = -9007199254740992.0, hi = 9007199254740992.0;
    switch (ci->dtype) {
    case GDP_I32: lo = -2147483648.0, hi = 2147483648.0; break;
    case GDP_U8: lo = 0, hi = 256; break;
    case GDP_I8: lo = -128, hi = 128; break;
    default: break;
    }
    if (ci->lo < lo || ci->hi > hi) {
        snprintf(msg, cap, "range %g:%g does not fit %s (values from %g up to %g)", ci->lo, ci->hi,
                 gd_dtype_name(ci->dtype), lo, hi);
        return -1;
    }
    return 0;
}

static int parse_input(const char **ps, int32_t fdt, gd_case_input *ci, char *msg, size_t cap)
{
    const char *s = *ps, *name = s;
    while (isalnum((unsigned char)*s)) s++;
    size_t len = (size_t)(s - name);
    memset(ci, 0, sizeof *ci);
    ci->kind = 'f';
    ci->lo = -1;
    ci->hi = 1;
    if (len == 1 && (*name == 'f' || *name == 'p' || *name == 'n')) {
        ci->dtype = fdt;
        if (*name == 'p') ci->lo = 0.5, ci->hi = 2;
        if (*name == 'n') ci->kind = 'n', ci->lo = 0, ci->hi = 1;
    } else {
        int dt = gd_dtype_from_name(name, len);
        if (dt < 0) {
            snprintf(msg, cap, "unknown input kind '%.*s'", (int)len, name);
            return -1;
        }
        ci->dtype = dt;
        if (dt == GDP_BOOL) ci->kind = 'b';
        else if (dt != GDP_F32 && dt != GDP_F16 && dt != GDP_BF16 && dt != GDP_F64) ci->kind = 'i', ci->lo = 0, ci->hi = 10;
    }
    int n = 0;
    if (parse_ints(&s, ci->shape, GDP_MAX_DIMS, &n) != 0) {
        snprintf(msg, cap, "bad shape after '%.*s'", (int)len, name);
        return -1;
    }
    ci->ndim = n;
    for (int i = 0; i < n; i++)
        if (ci->shape[i] < 0) {
            snprintf(msg, cap, "negative dim %lld in the shape of '%.*s'", (long long)ci->shape[i], (int)len, name);
            return -1;
        }
    size_t bytes;
    if (gd_numel_bytes(n, ci->shape, gdp_dtype_size(ci->dtype), &bytes) != 0) {
        snprintf(msg, cap, "the shape of '%.*s' is too large (its size overflows)", (int)len, name);
        return -1;
    }
    if (*s == '<') {
        /* integer range: <hi or <lo:hi */
        char *end;
        double a = strtod(s + 1, &end);
        if (end == s + 1) {
            snprintf(msg, cap, "bad range");
            return -1;
        }
        if (*end == ':') {
            const char *t = end + 1;
            ci->lo = a;
            ci->hi = strtod(t, &end);
            if (end == t) {
                snprintf(msg, cap, "bad range");
                return -1;
            }
        } else {
            ci->lo = 0;
            ci->hi = a;
        }
        s = end;
        if (check_range(ci, msg, cap) != 0) return -1;
    }
    *ps = s;
    return 0;
}

int gd_case_parse(const char *spec, int32_t fdt, gd_case *c, char *msg, size_t cap)
{
    memset(c, 0, sizeof *c);
    const char *s = skip(spec);
    if (*s == '!') {
        c->nograd = 1;
        s++;
    }
    for (;;) {
        s = skip(s);
        if (*s == '\0' || *s == '|') break;
        if (c->n_in >= GDP_MAX_INPUTS) {
            snprintf(msg, cap, "too many inputs");
            return -1;
        }
        if (parse_input(&s, fdt, &c->in[c->n_in++], msg, cap) != 0) return -1;
    }
    if (*s == '|') s++;
    for (;;) {
        s = skip(s);
        if (*s == '\0') break;
        const char *name = s;
        while (*s && *s != '=' && *s != ' ') s++;
        if (*s != '=' || c->n_attr >= 16) {
            snprintf(msg, cap, "bad attribute near '%s'", name);
            return -1;
        }
        size_t nl = (size_t)(s - name);
        gd_attr *a = &c->attrs[c->n_attr++];
        memset(a, 0, sizeof *a);
        char *nm = c->names[c->n_attr - 1];
        snprintf(nm, 32, "%.*s", (int)nl, name);
        a->name = nm;
        s++;
        if (*s == '[') {
            int n = 0;
            if (parse_ints(&s, a->ints, GD_MAX_DIMS, &n) != 0) {
                snprintf(msg, cap, "bad list for attribute '%s'", nm);
                return -1;
            }
            a->kind = GD_ATTR_INTS;
            a->n = n;
            continue;
        }
        const char *v = s;
        while (*s && *s != ' ') s++;
        size_t vl = (size_t)(s - v);
        int dt = gd_dtype_from_name(v, vl);
        if (dt >= 0) {
            a->kind = GD_ATTR_INT;
            a->i = dt;
            continue;
        }
        char tmp[64];
        snprintf(tmp, sizeof tmp, "%.*s", (int)vl, v);
        char *end;
        if (strpbrk(tmp, ".eE") != NULL && strstr(tmp, "inf") == NULL) {
            a->kind = GD_ATTR_FLOAT;
            a->f = strtod(tmp, &end);
        } else {
            a->kind = GD_ATTR_INT;
            a->i = strtoll(tmp, &end, 10);
        }
        if (*end != '\0') {
            snprintf(msg, cap, "bad value '%s' for attribute '%s'", tmp, nm);
            return -1;
        }
    }
    return 0;
}

int64_t gd_case_numel(const gd_case_input *ci)
{
    int64_t n;
    return gd_numel_checked(ci->ndim, ci->shape, &n) == 0 ? n : -1;
}

void gd_case_fill(const gd_case_input *ci, void *data, uint64_t seed)
{
    gdp_tensor t = {.size = sizeof t, .data = data, .dtype = ci->dtype, .ndim = ci->ndim};
    for (int i = 0; i < ci->ndim; i++) t.shape[i] = ci->shape[i];
    gdp_set_contiguous(&t);
    int64_t n = gd_case_numel(ci);
    for (int64_t i = 0; i < n; i++) {
        gdp_philox_out r = gdp_philox4x32((uint64_t)i, 0x5eedu, seed);
        /* 53-bit uniform in [0, 1) from two words */
        double u = ((double)(r.v[0] >> 5) * 67108864.0 + (double)(r.v[1] >> 6)) / 9007199254740992.0;
        double v;
        switch (ci->kind) {
        case 'n': {
            double u1 = ((double)r.v[2] + 0.5) / 4294967296.0, u2 = ((double)r.v[3] + 0.5) / 4294967296.0;
            v = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
            break;
        }
        case 'i':
            v = floor(ci->lo + u * (ci->hi - ci->lo));
            /* lo + u * (hi - lo) can round up to hi itself, which may not fit the dtype */
            if (v >= ci->hi) v = ceil(ci->hi) - 1;
            break;
        case 'b': v = (r.v[0] & 1u) != 0; break;
        default: v = ci->lo + u * (ci->hi - ci->lo); break;
        }
        gd_ref_store(&t, i, v);
    }
}
