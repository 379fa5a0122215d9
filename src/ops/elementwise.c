/* elementwise.c — arithmetic on tensors element by element: the binary ops with NumPy
 * broadcasting (add, sub, mul, div, minimum, maximum, where), the unary ones (neg, abs,
 * exp, log, sqrt, rsqrt, pow, clamp, scale) and the backward ops their gradients need.
 *
 * Reference kernels compute in double and round once to the output dtype. For f32 that is
 * exactly what f32 arithmetic gives for + - * / sqrt (double has more than twice the
 * precision), so a backend computing in f32 matches the oracle bit for bit on those.
 * Integer tensors (i32, i64) go through int64 arithmetic instead: doubles would lose the
 * low bits of large i64 values. Overflow wraps, as in NumPy and PyTorch. Inputs may be any
 * view: every kernel walks the output in order with each input's own strides alongside.
 */
#include "cost.h"
#include "refwalk.h"

#include <math.h>
#include <string.h>

/* ---- dtypes ---------------------------------------------------------------------------- */

static int is_float(int32_t dt) { return dt == GDP_F32 || dt == GDP_F16 || dt == GDP_BF16 || dt == GDP_F64; }
static int is_int(int32_t dt) { return dt == GDP_I32 || dt == GDP_I64; }

static inline int64_t load_i(const gdp_tensor *t, int64_t off)
{
    return t->dtype == GDP_I64 ? ((const int64_t *)t->data)[off] : ((const int32_t *)t->data)[off];
}

/* Wraps to the width of the dtype (two's complement, as gcc and clang define it). */
static inline void store_i(const gdp_tensor *t, int64_t i, uint64_t v)
{
    if (t->dtype == GDP_I64) ((int64_t *)t->data)[i] = (int64_t)v;
    else ((int32_t *)t->data)[i] = (int32_t)(uint32_t)v;
}

/* The walk of an elementwise op: the output (contiguous, element i at offset i) in
 * row-major order, each input carried along with its own strides, aligned to the right
 * and broadcast along dims of size 1 (rw_add). */
static void ew_walk(rw_walk *w, const gdp_tensor *y, int n, const gdp_tensor *const *in)
{
    rw_begin(w, y->ndim, y->shape);
    for (int k = 0; k < n; k++) rw_add(w, in[k]);
}

/* ---- kernels: binary --------------------------------------------------------------------- */

typedef double (*bin_fn)(double a, double b);
typedef uint64_t (*bin_ifn)(int64_t a, int64_t b);

static gdp_status binary_ref(const gdp_node *n, gdp_err *err, bin_fn f, bin_ifn fi)
{
    const gdp_tensor *a = n->in[0], *b = n->in[1], *y = n->out[0];
    int64_t count = gdp_numel(y);
    rw_walk it;
    ew_walk(&it, y, 2, n->in);
    if (y->dtype == GDP_F32) { // the training path of models run through the reference
        const float *pa = a->data, *pb = b->data;
        float *py = y->data;
        for (int64_t i = 0; i < count; i++, rw_next(&it)) py[i] = (float)f(pa[it.off[0]], pb[it.off[1]]);
    } else if (is_float(y->dtype)) {
        for (int64_t i = 0; i < count; i++, rw_next(&it))
            rw_st(y, i, f(rw_ld(a, it.off[0]), rw_ld(b, it.off[1])));
    } else if (fi != NULL && is_int(y->dtype)) {
        for (int64_t i = 0; i < count; i++, rw_next(&it)) store_i(y, i, fi(load_i(a, it.off[0]), load_i(b, it.off[1])));
    } else {
        return gdp_fail(err, GDP_ERR_UNSUPPORTED, "dtype %d is not supported", (int)y->dtype);
    }
    return GDP_OK;
}

static double f_add(double a, double b) { return a + b; }
static double f_sub(double a, double b) { return a - b; }
static double f_mul(double a, double b) { return a * b; }
static double f_div(double a, double b) { return a / b; }
/* NaN in either operand gives NaN (NumPy's minimum, not C's fmin); a tie picks a, which is
 * the operand the gradient goes to. */
static int pick_a_min(double a, double b) { return a <= b || a != a; }
static int pick_a_max(double a, double b) { return a >= b || a != a; }
static double f_min(double a, double b) { return pick_a_min(a, b) ? a : b; }
static double f_max(double a, double b) { return pick_a_max(a, b) ? a : b; }

/* Unsigned arithmetic, so that overflow wraps instead of being undefined. */
static uint64_t i_add(int64_t a, int64_t b) { return (uint64_t)a + (uint64_t)b; }
static uint64_t i_sub(int64_t a, int64_t b) { return (uint64_t)a - (uint64_t)b; }
static uint64_t i_mul(int64_t a, int64_t b) { return (uint64_t)a * (uint64_t)b; }
static uint64_t i_min(int64_t a, int64_t b) { return (uint64_t)(a <= b ? a : b); }
static uint64_t i_max(int64_t a, int64_t b) { return (uint64_t)(a >= b ? a : b); }

#define BINARY_REF(name, f, fi)                                                       \
    static gdp_status ref_##name(void *be, const gdp_node *n, void *stream, gdp_err *err) \
    {                                                                                     \
        return binary_ref(n, err, f, fi);                                                 \
    }
BINARY_REF(add, f_add, i_add)
BINARY_REF(sub, f_sub, i_sub)
BINARY_REF(mul, f_mul, i_mul)
BINARY_REF(div, f_div, NULL)
BINARY_REF(minimum, f_min, i_min)
BINARY_REF(maximum, f_max, i_max)

/* where(cond, a, b): a selection, so it copies bytes and is exact for every dtype. */
static gdp_status ref_where(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    const gdp_tensor *y = n->out[0];
    size_t es = gdp_dtype_size(y->dtype);
    const uint8_t *pc = n->in[0]->data;
    const char *pa = n->in[1]->data, *pb = n->in[2]->data;
    char *py = y->data;
    int64_t count = gdp_numel(y);
    rw_walk it;
    ew_walk(&it, y, 3, n->in);
    for (int64_t i = 0; i < count; i++, rw_next(&it)) {
        const char *src = pc[it.off[0]] ? pa + (size_t)it.off[1] * es : pb + (size_t)it.off[2] * es;
        memcpy(py + (size_t)i * es, src, es);
    }
    return GDP_OK;
}

/* minimum_grad / maximum_grad (dy, a, b) -> (da, db), both of dy's (the broadcast) shape:
 * dy goes to the operand the forward op picked, zero to the other. */
static gdp_status minmax_grad_ref(const gdp_node *n, gdp_err *err, int (*pick_a)(double, double))
{
    const gdp_tensor *dy = n->in[0], *a = n->in[1], *b = n->in[2];
    const gdp_tensor *da = n->out[0], *db = n->out[1];
    int64_t count = gdp_numel(da);
    rw_walk it;
    ew_walk(&it, da, 3, n->in);
    for (int64_t i = 0; i < count; i++, rw_next(&it)) {
        double g = rw_ld(dy, it.off[0]);
        int to_a = pick_a(rw_ld(a, it.off[1]), rw_ld(b, it.off[2]));
        rw_st(da, i, to_a ? g : 0.0);
        rw_st(db, i, to_a ? 0.0 : g);
    }
    return GDP_OK;
}
static gdp_status ref_minimum_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    return minmax_grad_ref(n, err, pick_a_min);
}
static gdp_status ref_maximum_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    return minmax_grad_ref(n, err, pick_a_max);
}

/* ---- kernels: unary ------------------------------------------------------------------------ */

/* k holds the op's float attributes (p; lo, hi; s, bias). */
typedef double (*un_fn)(double x, const double *k);
typedef uint64_t (*un_ifn)(int64_t x);

static gdp_status unary_ref(const gdp_node *n, gdp_err *err, un_fn f, un_ifn fi, const double *k)
{
    const gdp_tensor *x = n->in[0], *y = n->out[0];
    int64_t count = gdp_numel(y);
    rw_walk it;
    ew_walk(&it, y, 1, n->in);
    if (y->dtype == GDP_F32 && gdp_is_contiguous(x)) {
        const float *px = x->data;
        float *py = y->data;
        for (int64_t i = 0; i < count; i++) py[i] = (float)f(px[i], k);
    } else if (is_float(y->dtype)) {
        for (int64_t i = 0; i < count; i++, rw_next(&it)) rw_st(y, i, f(rw_ld(x, it.off[0]), k));
    } else if (fi != NULL && is_int(y->dtype)) {
        for (int64_t i = 0; i < count; i++, rw_next(&it)) store_i(y, i, fi(load_i(x, it.off[0])));
    } else {
        return gdp_fail(err, GDP_ERR_UNSUPPORTED, "dtype %d is not supported", (int)y->dtype);
    }
    return GDP_OK;
}

static double f_neg(double x, const double *k) { return -x; }
static double f_abs(double x, const double *k) { return fabs(x); }
static double f_exp(double x, const double *k) { return exp(x); }
static double f_log(double x, const double *k) { return log(x); }
static double f_sqrt(double x, const double *k) { return sqrt(x); }
static double f_rsqrt(double x, const double *k) { return 1.0 / sqrt(x); }
static double f_pow(double x, const double *k) { return pow(x, k[0]); }
/* max then min, as PyTorch: with lo > hi every element becomes hi; NaN stays NaN. */
static double f_clamp(double x, const double *k)
{
    double v = x < k[0] ? k[0] : x;
    return v > k[1] ? k[1] : v;
}
static double f_scale(double x, const double *k) { return x * k[0] + k[1]; }

static uint64_t i_neg(int64_t x) { return 0u - (uint64_t)x; }
static uint64_t i_abs(int64_t x) { return x < 0 ? 0u - (uint64_t)x : (uint64_t)x; }

#define UNARY_REF(name, f, fi)                                                        \
    static gdp_status ref_##name(void *be, const gdp_node *n, void *stream, gdp_err *err) \
    {                                                                                     \
        return unary_ref(n, err, f, fi, NULL);                                            \
    }
UNARY_REF(neg, f_neg, i_neg)
UNARY_REF(abs, f_abs, i_abs)
UNARY_REF(exp, f_exp, NULL)
UNARY_REF(log, f_log, NULL)
UNARY_REF(sqrt, f_sqrt, NULL)
UNARY_REF(rsqrt, f_rsqrt, NULL)

static gdp_status ref_pow(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    double k[1] = {gdp_attr_float(&n->attrs, "p", 1.0)};
    return unary_ref(n, err, f_pow, NULL, k);
}
static gdp_status ref_clamp(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    double k[2] = {gdp_attr_float(&n->attrs, "lo", -INFINITY), gdp_attr_float(&n->attrs, "hi", INFINITY)};
    return unary_ref(n, err, f_clamp, NULL, k);
}
static gdp_status ref_scale(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    double k[2] = {gdp_attr_float(&n->attrs, "s", 1.0), gdp_attr_float(&n->attrs, "bias", 0.0)};
    return unary_ref(n, err, f_scale, NULL, k);
}

/* abs_grad(dy, x) = dy * sign(x), with sign(0) = 0 as in PyTorch. */
static gdp_status ref_abs_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    const gdp_tensor *dy = n->in[0], *x = n->in[1], *dx = n->out[0];
    int64_t count = gdp_numel(dx);
    rw_walk it;
    ew_walk(&it, dx, 2, n->in);
    for (int64_t i = 0; i < count; i++, rw_next(&it)) {
        double v = rw_ld(x, it.off[1]), g = rw_ld(dy, it.off[0]);
        rw_st(dx, i, v > 0 ? g : v < 0 ? -g : 0.0);
    }
    return GDP_OK;
}

/* clamp_grad(dy, x) = dy where lo <= x <= hi (bounds included, as PyTorch), else 0. */
static gdp_status ref_clamp_grad(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    const gdp_tensor *dy = n->in[0], *x = n->in[1], *dx = n->out[0];
    double lo = gdp_attr_float(&n->attrs, "lo", -INFINITY), hi = gdp_attr_float(&n->attrs, "hi", INFINITY);
    int64_t count = gdp_numel(dx);
    rw_walk it;
    ew_walk(&it, dx, 2, n->in);
    for (int64_t i = 0; i < count; i++, rw_next(&it)) {
        double v = rw_ld(x, it.off[1]);
        rw_st(dx, i, v >= lo && v <= hi ? rw_ld(dy, it.off[0]) : 0.0);
    }
    return GDP_OK;
}

/* ---- shape rules ------------------------------------------------------------------------------ */

static int check_dtype(gd_infer *c, const gd_shape *s, const char *name, int ints_ok)
{
    if (is_float(s->dtype) || (ints_ok && is_int(s->dtype))) return 0;
    char b[128];
    return gd_infer_fail(c, "%s %s: dtype must be %s", name, gd_shape_str(s, b, sizeof b),
                         ints_ok ? "f32, f16, bf16, f64, i32 or i64" : "f32, f16, bf16 or f64");
}

static int same_dtype(gd_infer *c, const gd_shape *a, const char *a_name, const gd_shape *b, const char *b_name)
{
    if (a->dtype == b->dtype) return 0;
    char sa[128], sb[128];
    return gd_infer_fail(c, "%s %s and %s %s have different dtypes", a_name, gd_shape_str(a, sa, sizeof sa), b_name,
                         gd_shape_str(b, sb, sizeof sb));
}

static int same_shape(gd_infer *c, const gd_shape *a, const char *a_name, const gd_shape *b, const char *b_name)
{
    int same = a->ndim == b->ndim && a->dtype == b->dtype;
    for (int d = 0; same && d < a->ndim; d++) same = a->dim[d] == b->dim[d];
    if (same) return 0;
    char sa[128], sb[128];
    return gd_infer_fail(c, "%s %s and %s %s must have the same shape and dtype", a_name,
                         gd_shape_str(a, sa, sizeof sa), b_name, gd_shape_str(b, sb, sizeof sb));
}

static int binary_infer(gd_infer *c, int ints_ok)
{
    if (check_dtype(c, &c->in[0], "a", ints_ok) || same_dtype(c, &c->in[0], "a", &c->in[1], "b")) return 1;
    return gd_broadcast(c, &c->in[0], "a", &c->in[1], "b", &c->out[0]);
}
static int infer_arith(gd_infer *c) { return binary_infer(c, 1); }
static int infer_div(gd_infer *c) { return binary_infer(c, 0); }

static int infer_where(gd_infer *c)
{
    const gd_shape *cond = &c->in[0], *a = &c->in[1], *b = &c->in[2];
    if (cond->dtype != GDP_BOOL) {
        char s[128];
        return gd_infer_fail(c, "cond %s: dtype must be bool", gd_shape_str(cond, s, sizeof s));
    }
    if (same_dtype(c, a, "a", b, "b")) return 1;
    gd_shape ab;
    if (gd_broadcast(c, a, "a", b, "b", &ab) || gd_broadcast(c, cond, "cond", &ab, "a and b", &c->out[0])) return 1;
    c->out[0].dtype = a->dtype;
    return 0;
}

/* (dy, a, b): dy has the broadcast shape of a and b. */
static int infer_minmax_grad(gd_infer *c)
{
    const gd_shape *dy = &c->in[0];
    gd_shape ab;
    if (check_dtype(c, dy, "dy", 0) || same_dtype(c, dy, "dy", &c->in[1], "a") ||
        same_dtype(c, dy, "dy", &c->in[2], "b") || gd_broadcast(c, &c->in[1], "a", &c->in[2], "b", &ab) ||
        same_shape(c, dy, "dy", &ab, "the broadcast of a and b"))
        return 1;
    c->out[0] = c->out[1] = *dy;
    return 0;
}

static int unary_infer(gd_infer *c, int ints_ok)
{
    if (check_dtype(c, &c->in[0], "x", ints_ok)) return 1;
    c->out[0] = c->in[0];
    return 0;
}
static int infer_unary_int(gd_infer *c) { return unary_infer(c, 1); }
static int infer_unary(gd_infer *c) { return unary_infer(c, 0); }

/* (dy, x) of one shape. */
static int infer_dy_x(gd_infer *c)
{
    if (check_dtype(c, &c->in[0], "dy", 0) || same_shape(c, &c->in[0], "dy", &c->in[1], "x")) return 1;
    c->out[0] = c->in[0];
    return 0;
}

/* ---- gradient rules ---------------------------------------------------------------------------- */

/* Builders return NULL on failure with the message already in the context. */
static gd_status done(gd_grad_ctx *c)
{
    for (int k = 0; k < c->n_in; k++)
        if (c->din[k] != NULL) return GD_OK;
    return GD_ERR_INVALID;
}

/* Integer arithmetic has no gradient; dy NULL means the output is unused. */
static int no_grad(gd_grad_ctx *c) { return c->dout[0] == NULL || !is_float(gd_tensor_dtype(c->out[0])); }

static gd_status grad_add(gd_grad_ctx *c)
{
    if (no_grad(c)) return GD_OK;
    c->din[0] = gd_sum_to(c->dout[0], c->in[0]);
    c->din[1] = gd_sum_to(c->dout[0], c->in[1]);
    return c->din[0] && c->din[1] ? GD_OK : GD_ERR_INVALID;
}

static gd_status grad_sub(gd_grad_ctx *c)
{
    if (no_grad(c)) return GD_OK;
    c->din[0] = gd_sum_to(c->dout[0], c->in[0]);
    c->din[1] = gd_sum_to(gd_neg(c->dout[0]), c->in[1]);
    return c->din[0] && c->din[1] ? GD_OK : GD_ERR_INVALID;
}

static gd_status grad_mul(gd_grad_ctx *c)
{
    if (no_grad(c)) return GD_OK;
    gd_tensor *dy = c->dout[0], *a = c->in[0], *b = c->in[1];
    c->din[0] = gd_sum_to(gd_mul(dy, b), a);
    c->din[1] = gd_sum_to(gd_mul(dy, a), b);
    return c->din[0] && c->din[1] ? GD_OK : GD_ERR_INVALID;
}

/* y = a / b: da = dy / b, db = -dy * y / b (reuses y instead of squaring b). */
static gd_status grad_div(gd_grad_ctx *c)
{
    if (no_grad(c)) return GD_OK;
    gd_tensor *dy = c->dout[0], *a = c->in[0], *b = c->in[1], *y = c->out[0];
    c->din[0] = gd_sum_to(gd_div(dy, b), a);
    c->din[1] = gd_sum_to(gd_neg(gd_div(gd_mul(dy, y), b)), b);
    return c->din[0] && c->din[1] ? GD_OK : GD_ERR_INVALID;
}

static gd_status minmax_grad(gd_grad_ctx *c, const char *op)
{
    if (no_grad(c)) return GD_OK;
    gd_tensor *in[3] = {c->dout[0], c->in[0], c->in[1]}, *d[2];
    gd_status s = gd_op_multi(c->g, op, 3, in, 0, NULL, 2, d);
    if (s != GD_OK) return s;
    c->din[0] = gd_sum_to(d[0], c->in[0]);
    c->din[1] = gd_sum_to(d[1], c->in[1]);
    return c->din[0] && c->din[1] ? GD_OK : GD_ERR_INVALID;
}
static gd_status grad_minimum(gd_grad_ctx *c) { return minmax_grad(c, "minimum_grad"); }
static gd_status grad_maximum(gd_grad_ctx *c) { return minmax_grad(c, "maximum_grad"); }

static gd_status grad_where(gd_grad_ctx *c)
{
    if (no_grad(c)) return GD_OK;
    gd_tensor *cond = c->in[0], *dy = c->dout[0];
    int64_t unused = 1;
    gd_tensor *zero = gd_zeros(c->g, gd_tensor_dtype(dy), 0, &unused);
    c->din[1] = gd_sum_to(gd_where(cond, dy, zero), c->in[1]);
    c->din[2] = gd_sum_to(gd_where(cond, zero, dy), c->in[2]);
    return c->din[1] && c->din[2] ? GD_OK : GD_ERR_INVALID;
}

static gd_status grad_neg(gd_grad_ctx *c)
{
    if (no_grad(c)) return GD_OK;
    c->din[0] = gd_neg(c->dout[0]);
    return done(c);
}

static gd_status grad_abs(gd_grad_ctx *c)
{
    if (no_grad(c)) return GD_OK;
    c->din[0] = gd_op2(c->dout[0], c->in[0], "abs_grad", 0, NULL);
    return done(c);
}

static gd_status grad_exp(gd_grad_ctx *c)
{
    if (no_grad(c)) return GD_OK;
    c->din[0] = gd_mul(c->dout[0], c->out[0]);
    return done(c);
}

static gd_status grad_log(gd_grad_ctx *c)
{
    if (no_grad(c)) return GD_OK;
    c->din[0] = gd_div(c->dout[0], c->in[0]);
    return done(c);
}

/* y = sqrt(x): dx = dy / (2 y) */
static gd_status grad_sqrt(gd_grad_ctx *c)
{
    if (no_grad(c)) return GD_OK;
    c->din[0] = gd_div(gd_scale(c->dout[0], 0.5, 0.0), c->out[0]);
    return done(c);
}

/* y = x^(-1/2): dx = -dy * x^(-3/2) / 2 = -dy * y / (2 x) */
static gd_status grad_rsqrt(gd_grad_ctx *c)
{
    if (no_grad(c)) return GD_OK;
    c->din[0] = gd_div(gd_mul(gd_scale(c->dout[0], -0.5, 0.0), c->out[0]), c->in[0]);
    return done(c);
}

/* y = x^p: dx = dy * p * x^(p-1). p = 0 and p = 1 get their exact forms, so that x = 0
 * does not produce 0 * inf. */
static gd_status grad_pow(gd_grad_ctx *c)
{
    if (no_grad(c)) return GD_OK;
    double p = gdp_attr_float(c->attrs, "p", 1.0);
    gd_tensor *dy = c->dout[0], *x = c->in[0];
    if (p == 0.0) {
        gd_shape sx = gd_tensor_shape(x);
        c->din[0] = gd_zeros(c->g, (gd_dtype)sx.dtype, sx.ndim, sx.dim);
    } else if (p == 1.0) {
        c->din[0] = dy;
    } else if (p == 2.0) {
        c->din[0] = gd_mul(dy, gd_scale(x, 2.0, 0.0));
    } else {
        c->din[0] = gd_mul(dy, gd_scale(gd_pow_scalar(x, p - 1.0), p, 0.0));
    }
    return done(c);
}

static gd_status grad_clamp(gd_grad_ctx *c)
{
    if (no_grad(c)) return GD_OK;
    gd_attr a[2] = {gd_attr_f("lo", gdp_attr_float(c->attrs, "lo", -INFINITY)),
                    gd_attr_f("hi", gdp_attr_float(c->attrs, "hi", INFINITY))};
    c->din[0] = gd_op2(c->dout[0], c->in[0], "clamp_grad", 2, a);
    return done(c);
}

static gd_status grad_scale(gd_grad_ctx *c)
{
    if (no_grad(c)) return GD_OK;
    c->din[0] = gd_scale(c->dout[0], gdp_attr_float(c->attrs, "s", 1.0), 0.0);
    return done(c);
}

/* ---- builders ------------------------------------------------------------------------------------- */

gd_tensor *gd_add(gd_tensor *a, gd_tensor *b) { return gd_op2(a, b, "add", 0, NULL); }
gd_tensor *gd_sub(gd_tensor *a, gd_tensor *b) { return gd_op2(a, b, "sub", 0, NULL); }
gd_tensor *gd_mul(gd_tensor *a, gd_tensor *b) { return gd_op2(a, b, "mul", 0, NULL); }
gd_tensor *gd_div(gd_tensor *a, gd_tensor *b) { return gd_op2(a, b, "div", 0, NULL); }
gd_tensor *gd_minimum(gd_tensor *a, gd_tensor *b) { return gd_op2(a, b, "minimum", 0, NULL); }
gd_tensor *gd_maximum(gd_tensor *a, gd_tensor *b) { return gd_op2(a, b, "maximum", 0, NULL); }

gd_tensor *gd_where(gd_tensor *cond, gd_tensor *a, gd_tensor *b)
{
    if (cond == NULL || a == NULL || b == NULL) return NULL;
    gd_tensor *in[3] = {cond, a, b};
    return gd_op(gd_tensor_graph(cond), "where", 3, in, 0, NULL);
}

gd_tensor *gd_neg(gd_tensor *x) { return gd_op1(x, "neg", 0, NULL); }
gd_tensor *gd_abs(gd_tensor *x) { return gd_op1(x, "abs", 0, NULL); }
gd_tensor *gd_exp(gd_tensor *x) { return gd_op1(x, "exp", 0, NULL); }
gd_tensor *gd_log(gd_tensor *x) { return gd_op1(x, "log", 0, NULL); }
gd_tensor *gd_sqrt(gd_tensor *x) { return gd_op1(x, "sqrt", 0, NULL); }
gd_tensor *gd_rsqrt(gd_tensor *x) { return gd_op1(x, "rsqrt", 0, NULL); }

gd_tensor *gd_pow_scalar(gd_tensor *x, double p)
{
    gd_attr a = gd_attr_f("p", p);
    return gd_op1(x, "pow", 1, &a);
}

gd_tensor *gd_clamp(gd_tensor *x, double lo, double hi)
{
    gd_attr a[2] = {gd_attr_f("lo", lo), gd_attr_f("hi", hi)};
    return gd_op1(x, "clamp", 2, a);
}

gd_tensor *gd_scale(gd_tensor *x, double s, double bias)
{
    gd_attr a[2] = {gd_attr_f("s", s), gd_attr_f("bias", bias)};
    return gd_op1(x, "scale", 2, a);
}

/* ---- registration ---------------------------------------------------------------------------------- */

/* Broadcasting both ways, a scalar on either side, a 0-d result, and (excluded from the
 * gradient check, as integers have no gradient) integer cases, of i32 and of i64 where the
 * op takes integers: a backend's integer kernel is keyed by its dtype, and the sweep
 * checks it only through a case of that dtype. */
#define BINARY_CASES \
    "f[2,3] f[2,3]", "f[4,1,3] f[5,1]", "f[] f[3,4]", "f[2,3] f[]", "f[] f[]", "f[1,6] f[3,1]"

static const char *const add_cases[] = {BINARY_CASES, "!i32[2,3]<-50:50 i32[3]<-50:50", "!i64[5]<10 i64[5]<10", NULL};
static const char *const sub_cases[] = {BINARY_CASES, "!i32[2,3]<-50:50 i32[2,1]<-50:50", "!i64[4,1]<-50:50 i64[3]<-50:50",
                                        NULL};
static const char *const mul_cases[] = {BINARY_CASES, "!i64[3,2]<-9:9 i64[2]<-9:9", "!i32[2,3]<-9:9 i32[]<-9:9", NULL};
/* the denominator stays in [0.5, 2], away from the pole */
static const char *const div_cases[] = {"f[2,3] p[2,3]", "f[4,1,3] p[5,1]", "p[] p[3,4]", "f[2,3] p[]",
                                        "n[1,6] p[3,1]", NULL};
static const char *const minmax_cases[] = {BINARY_CASES, "!i32[2,3]<-5:5 i32[3]<-5:5", "!i64[3,1]<-5:5 i64[4]<-5:5", NULL};
static const char *const minmax_grad_cases[] = {"f[2,3] f[2,3] f[2,3]", "f[4,2,3] f[4,1,3] f[2,1]", "f[] f[] f[]",
                                                "f[3,4] f[] f[3,4]", "f[3,4] f[3,1] f[4]", NULL};
static const char *const where_cases[] = {"bool[2,3] f[2,3] f[2,3]", "bool[3] f[2,1] f[1,3]", "bool[] f[4] f[]",
                                          "bool[2,1,4] f[3,1] f[4]", "bool[2,3] f[] f[]",
                                          "!bool[5] i32[5]<10 i32[]<10", NULL};
static const char *const unary_int_cases[] = {"f[2,3]", "n[4,5,6]", "f[]", "!i32[7]<-5:5", "!i64[2,3]<-5:5", NULL};
static const char *const unary_cases[] = {"f[2,3]", "n[4,5,6]", "f[]", NULL};
/* log, sqrt, rsqrt: positive inputs only */
static const char *const positive_cases[] = {"p[2,3]", "p[4,5,6]", "p[]", NULL};
static const char *const pow_cases[] = {"f[3,4] | p=2", "f[3,4] | p=3", "p[3,4] | p=0.5", "p[3,4] | p=-1.5",
                                        "p[5] | p=1", "p[5] | p=0", "p[] | p=2.5", NULL};
static const char *const clamp_cases[] = {"f[3,4] | lo=-0.5 hi=0.5", "n[5,6] | lo=0 hi=1", "n[] | lo=-1 hi=1",
                                          "!f[6] | lo=0.5 hi=-0.5", NULL};
static const char *const scale_cases[] = {"f[3,4] | s=2.5 bias=-1", "n[7] | s=-0.5 bias=0", "f[] | s=0 bias=3", NULL};
static const char *const dy_x_cases[] = {"f[3,4] f[3,4]", "n[2,3,4] n[2,3,4]", "f[] f[]", NULL};
static const char *const clamp_grad_cases[] = {"f[3,4] f[3,4] | lo=-0.5 hi=0.5", "n[5,6] n[5,6] | lo=0 hi=1",
                                               "f[] f[] | lo=-1 hi=1", NULL};

#define TOL 1e-10

GD_FAMILY(elementwise)
{
    static const gd_op_def defs[] = {
        {.name = "add", .min_in = 2, .max_in = 2, .n_out = 1, .dtypes = GD_FLOATS, .infer = infer_arith,
         .grad = grad_add, .ref = ref_add, .cases = add_cases, .tol = TOL, .ref_strided = 1, .doc = "a + b, broadcasting"},
        {.name = "sub", .min_in = 2, .max_in = 2, .n_out = 1, .dtypes = GD_FLOATS, .infer = infer_arith,
         .grad = grad_sub, .ref = ref_sub, .cases = sub_cases, .tol = TOL, .ref_strided = 1, .doc = "a - b, broadcasting"},
        {.name = "mul", .min_in = 2, .max_in = 2, .n_out = 1, .dtypes = GD_FLOATS, .infer = infer_arith,
         .grad = grad_mul, .ref = ref_mul, .cases = mul_cases, .tol = TOL, .ref_strided = 1, .doc = "a * b, broadcasting"},
        {.name = "div", .min_in = 2, .max_in = 2, .n_out = 1, .dtypes = GD_FLOATS, .infer = infer_div,
         .grad = grad_div, .ref = ref_div, .cases = div_cases, .tol = TOL, .ref_strided = 1, .doc = "a / b, broadcasting (floats only)"},
        {.name = "minimum", .min_in = 2, .max_in = 2, .n_out = 1, .dtypes = GD_FLOATS, .infer = infer_arith,
         .grad = grad_minimum, .ref = ref_minimum, .cases = minmax_cases, .tol = TOL, .ref_strided = 1,
         .doc = "elementwise min, broadcasting; NaN propagates; the gradient goes to a on ties"},
        {.name = "maximum", .min_in = 2, .max_in = 2, .n_out = 1, .dtypes = GD_FLOATS, .infer = infer_arith,
         .grad = grad_maximum, .ref = ref_maximum, .cases = minmax_cases, .tol = TOL, .ref_strided = 1,
         .doc = "elementwise max, broadcasting; NaN propagates; the gradient goes to a on ties"},
        {.name = "minimum_grad", .min_in = 3, .max_in = 3, .n_out = 2, .dtypes = GD_FLOATS,
         .infer = infer_minmax_grad, .ref = ref_minimum_grad, .cases = minmax_grad_cases, .tol = 0, .ref_strided = 1,
         .doc = "(dy, a, b) -> (da, db) of minimum, before undoing the broadcast"},
        {.name = "maximum_grad", .min_in = 3, .max_in = 3, .n_out = 2, .dtypes = GD_FLOATS,
         .infer = infer_minmax_grad, .ref = ref_maximum_grad, .cases = minmax_grad_cases, .tol = 0, .ref_strided = 1,
         .doc = "(dy, a, b) -> (da, db) of maximum, before undoing the broadcast"},
        {.name = "where", .min_in = 3, .max_in = 3, .n_out = 1, .dtypes = GD_FLOATS, .infer = infer_where,
         .grad = grad_where, .ref = ref_where, .ref_dtypes = GD_M(GDP_DTYPE_COUNT) - 1u, .cases = where_cases, .tol = 0, .ref_strided = 1,
         .doc = "cond ? a : b elementwise, cond bool, all three broadcasting"},
        {.name = "neg", .min_in = 1, .max_in = 1, .n_out = 1, .dtypes = GD_FLOATS, .infer = infer_unary_int,
         .grad = grad_neg, .ref = ref_neg, .cases = unary_int_cases, .tol = 0, .ref_strided = 1, .doc = "-x"},
        {.name = "abs", .min_in = 1, .max_in = 1, .n_out = 1, .dtypes = GD_FLOATS, .infer = infer_unary_int,
         .grad = grad_abs, .ref = ref_abs, .cases = unary_int_cases, .tol = 0, .ref_strided = 1, .doc = "|x|"},
        {.name = "abs_grad", .min_in = 2, .max_in = 2, .n_out = 1, .dtypes = GD_FLOATS, .infer = infer_dy_x,
         .ref = ref_abs_grad, .cases = dy_x_cases, .tol = 0, .ref_strided = 1, .doc = "(dy, x) -> dy * sign(x), sign(0) = 0"},
        {.name = "exp", .min_in = 1, .max_in = 1, .n_out = 1, .dtypes = GD_FLOATS, .infer = infer_unary,
         .grad = grad_exp, .ref = ref_exp, .cases = unary_cases, .tol = TOL, .ref_strided = 1, .doc = "e^x"},
        {.name = "log", .min_in = 1, .max_in = 1, .n_out = 1, .dtypes = GD_FLOATS, .infer = infer_unary,
         .grad = grad_log, .ref = ref_log, .cases = positive_cases, .tol = TOL, .ref_strided = 1, .doc = "natural logarithm"},
        {.name = "sqrt", .min_in = 1, .max_in = 1, .n_out = 1, .dtypes = GD_FLOATS, .infer = infer_unary,
         .grad = grad_sqrt, .ref = ref_sqrt, .cases = positive_cases, .tol = TOL, .ref_strided = 1, .doc = "square root"},
        {.name = "rsqrt", .min_in = 1, .max_in = 1, .n_out = 1, .dtypes = GD_FLOATS, .infer = infer_unary,
         .grad = grad_rsqrt, .ref = ref_rsqrt, .cases = positive_cases, .tol = TOL, .ref_strided = 1, .doc = "1 / sqrt(x)"},
        {.name = "pow", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "p:float", .dtypes = GD_FLOATS,
         .infer = infer_unary, .grad = grad_pow, .ref = ref_pow, .cases = pow_cases, .tol = TOL, .ref_strided = 1,
         .doc = "x^p for a scalar p (NaN for x < 0 and non-integer p)"},
        {.name = "clamp", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "lo:float hi:float", .dtypes = GD_FLOATS,
         .infer = infer_unary, .grad = grad_clamp, .ref = ref_clamp, .cases = clamp_cases, .tol = 0, .ref_strided = 1,
         .doc = "min(max(x, lo), hi); gradient 1 for lo <= x <= hi, else 0"},
        {.name = "clamp_grad", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "lo:float hi:float",
         .dtypes = GD_FLOATS, .infer = infer_dy_x, .ref = ref_clamp_grad, .cases = clamp_grad_cases, .tol = 0, .ref_strided = 1,
         .doc = "(dy, x) -> dy where lo <= x <= hi, else 0"},
        {.name = "scale", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "s:float bias:float", .dtypes = GD_FLOATS,
         .infer = infer_unary, .grad = grad_scale, .ref = ref_scale, .cases = scale_cases, .tol = TOL, .ref_strided = 1,
         .doc = "x * s + bias for scalars s and bias"},
    };
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        gd_op_def d = defs[i];
        d.cost = gd_cost_elementwise; /* every op here: one operation per output element */
        gd_register_op(r, &d);
    }
    gd_registry_hooks(r)->accumulate = gd_add;
}
