/* optim.c — the in-place update ops optimizers are made of: sgd_update, adamw_update,
 * assign, and clip_coef (the factor of clipping by global norm).
 *
 * An update's outputs alias its inputs (`.inplace`): p' is written over p, the moments over
 * the moments. The reference kernels read element i of every input before writing element
 * i of any output, so they are correct whether or not the host aliases the buffers. The
 * inputs updated in place are whole, contiguous buffers (the planner sees to it); the
 * others (the gradient) may be any view. Learning rate and step count are f32 scalar
 * tensors, not attributes, so a schedule changes them between runs without recompiling.
 *
 * Mixed precision: adamw_update takes an optional seventh input, a bf16 or f16 copy of p,
 * and writes p' rounded to it (round to nearest even) as a fourth output, in place. That
 * is how a bf16 model trains with f32 master weights: the copy is the parameter autodiff
 * differentiates (so g may be bf16 too), the f32 p is an optimizer state.
 *
 * Clipping: adamw_update takes an optional last input, an f32 scalar that multiplies g
 * (clip_coef's factor), so that clipping by global norm costs no pass over the gradients.
 * An f32 seventh input is that scale (a copy is f16 or bf16); with a copy it is the eighth.
 */
#include "refwalk.h"

#include <math.h>
#include <string.h>

/* Fails c unless input k has the shape of input 0, and its dtype too unless any_float
 * (then any float dtype). */
static int shaped_as_first(gd_infer *c, int k, const char *name_k, const char *name_0, int any_float)
{
    const gd_shape *a = &c->in[0], *b = &c->in[k];
    int same = (any_float ? gdp_is_float(b->dtype) : a->dtype == b->dtype) && a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = a->dim[d] == b->dim[d];
    if (same) return 0;
    char sa[96], sb[96];
    return gd_infer_fail(c, "%s %s does not match %s %s%s", name_k, gd_shape_str(b, sb, sizeof sb), name_0,
                         gd_shape_str(a, sa, sizeof sa), any_float ? " (any float dtype)" : "");
}

static int same_as_first(gd_infer *c, int k, const char *name_k, const char *name_0)
{
    return shaped_as_first(c, k, name_k, name_0, 0);
}

/* Fails c unless input k is an f32 tensor of one element. */
static int f32_scalar(gd_infer *c, int k, const char *name)
{
    const gd_shape *s = &c->in[k];
    if (s->dtype == GDP_F32 && gd_shape_numel(s) == 1) return 0;
    char b[96];
    return gd_infer_fail(c, "%s must be an f32 scalar, got %s", name, gd_shape_str(s, b, sizeof b));
}

static int is_float_dtype(int32_t dt)
{
    return dt == GDP_F32 || dt == GDP_F16 || dt == GDP_BF16 || dt == GDP_F64;
}

static int float_param(gd_infer *c)
{
    if (is_float_dtype(c->in[0].dtype)) return 0;
    char b[96];
    return gd_infer_fail(c, "p %s is not floating", gd_shape_str(&c->in[0], b, sizeof b));
}

/* Fails c unless attribute `name` = v is a finite number, at least 0 (above 0 when
 * `positive`), saying which of those it is not: NaN is not "negative". */
static int finite_at_least_0(gd_infer *c, const char *name, double v, int positive)
{
    if (isnan(v)) return gd_infer_fail(c, "%s is not a number", name);
    if (isinf(v)) return gd_infer_fail(c, "%s = %g is not finite", name, v);
    if (v < 0 || (positive && v == 0)) return gd_infer_fail(c, "%s = %g is %s", name, v, positive ? "not positive" : "negative");
    return 0;
}

/* ---- sgd_update(p, g, buf, lr) -> (p', buf') ------------------------------------------ */

static int sgd_infer(gd_infer *c)
{
    if (float_param(c) || same_as_first(c, 1, "g", "p") || same_as_first(c, 2, "buf", "p") || f32_scalar(c, 3, "lr"))
        return -1;
    double m = gdp_attr_float(c->attrs, "momentum", 0.0), wd = gdp_attr_float(c->attrs, "weight_decay", 0.0);
    if (finite_at_least_0(c, "momentum", m, 0) || finite_at_least_0(c, "weight_decay", wd, 0)) return -1;
    if (gdp_attr_int(c->attrs, "nesterov", 0) && m == 0) return gd_infer_fail(c, "nesterov needs momentum > 0");
    c->out[0] = c->in[0];
    c->out[1] = c->in[2];
    c->n_out = 2;
    return 0;
}

/* The walk of an update: every element of p (slot 0) with, alongside, the offset of the
 * same element of each other tensor of p's shape (slots 1..n), whatever its strides. */
static int64_t update_walk(rw_walk *w, int n, const gdp_tensor *const *t)
{
    rw_begin(w, t[0]->ndim, t[0]->shape);
    for (int k = 0; k < n; k++) rw_add(w, t[k]);
    return gdp_numel(t[0]);
}

/* PyTorch SGD: g += wd*p; buf = m*buf + g; update = nesterov ? g + m*buf : buf; p -= lr*update.
 * buf starts at zero, so the first step sets buf = g, as PyTorch does. */
static gdp_status sgd_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *P = node->in[0], *G = node->in[1], *B = node->in[2];
    double lr = gd_ref_load(node->in[3], 0);
    double m = gdp_attr_float(&node->attrs, "momentum", 0.0), wd = gdp_attr_float(&node->attrs, "weight_decay", 0.0);
    int nesterov = gdp_attr_int(&node->attrs, "nesterov", 0) != 0;
    const gdp_tensor *t[5] = {P, G, B, node->out[0], node->out[1]};
    rw_walk w;
    int64_t n = update_walk(&w, 3, t); // the outputs are contiguous: element i is at i
    for (int64_t i = 0; i < n; i++, rw_next(&w)) {
        double p = rw_ld(P, w.off[0]), g = rw_ld(G, w.off[1]), buf = rw_ld(B, w.off[2]);
        g += wd * p;
        buf = m * buf + g;
        double update = nesterov ? g + m * buf : buf;
        rw_st(node->out[0], i, p - lr * update);
        rw_st(node->out[1], i, buf);
    }
    return GDP_OK;
}

/* ---- adamw_update(p, g, m, v, step, lr [, copy] [, gscale]) -> (p', m', v' [, copy']) -- */

/* Which optional inputs a node of n_in inputs has, the seventh of dtype dt6: the copy's
 * index and the gradient scale's, -1 when absent. */
static void adamw_optional(int n_in, int32_t dt6, int *copy, int *gscale)
{
    *copy = n_in > 6 && (n_in > 7 || dt6 != GDP_F32) ? 6 : -1;
    *gscale = n_in > 7 ? 7 : n_in > 6 && dt6 == GDP_F32 ? 6 : -1;
}

static int adamw_infer(gd_infer *c)
{
    if (float_param(c) || shaped_as_first(c, 1, "g", "p", 1) || same_as_first(c, 2, "m", "p") ||
        same_as_first(c, 3, "v", "p") || f32_scalar(c, 4, "step") || f32_scalar(c, 5, "lr"))
        return -1;
    int ic, is;
    adamw_optional(c->n_in, c->n_in > 6 ? c->in[6].dtype : GDP_F32, &ic, &is);
    if (is >= 0 && gd_shape_numel(&c->in[is]) != 1) {
        char b[96];
        return gd_infer_fail(c, "input %d %s is neither a copy of p (bf16 or f16) nor a gradient scale (an f32 scalar)",
                             is, gd_shape_str(&c->in[is], b, sizeof b));
    }
    if (is >= 0 && f32_scalar(c, is, "gscale")) return -1;
    if (ic >= 0) {
        if (shaped_as_first(c, 6, "copy", "p", 1)) return -1;
        if (!gdp_is_half(c->in[6].dtype)) {
            char b[96];
            return gd_infer_fail(c, "copy %s must be bf16 or f16 (the low-precision copy of p)",
                                 gd_shape_str(&c->in[6], b, sizeof b));
        }
    }
    double b1 = gdp_attr_float(c->attrs, "beta1", 0.9), b2 = gdp_attr_float(c->attrs, "beta2", 0.999);
    double eps = gdp_attr_float(c->attrs, "eps", 1e-8), wd = gdp_attr_float(c->attrs, "weight_decay", 0.0);
    if (!(b1 >= 0 && b1 < 1)) return gd_infer_fail(c, "beta1 = %g is not in [0, 1)", b1);
    if (!(b2 >= 0 && b2 < 1)) return gd_infer_fail(c, "beta2 = %g is not in [0, 1)", b2);
    if (finite_at_least_0(c, "eps", eps, 1) || finite_at_least_0(c, "weight_decay", wd, 0)) return -1;
    c->out[0] = c->in[0];
    c->out[1] = c->in[2];
    c->out[2] = c->in[3];
    c->n_out = 3;
    if (ic >= 0) {
        c->out[3] = c->in[6];
        c->n_out = 4;
    }
    return 0;
}

/* PyTorch AdamW with t = step (1-based, already incremented):
 *   p -= lr*wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
 *   p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
 * computed in double, each state rounded once to its dtype; the copy is p' as stored (f32)
 * rounded to nearest even to the copy's dtype. The kernel handles f16/bf16 operands
 * itself (ref_dtypes), so that the copy is rounded from p' exactly once. */
static gdp_status adamw_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *P = node->in[0], *G = node->in[1], *M = node->in[2], *V = node->in[3];
    const gdp_tensor *copy = node->n_out > 3 ? node->out[3] : NULL;
    double t = gd_ref_load(node->in[4], 0), lr = gd_ref_load(node->in[5], 0);
    int ic, is;
    adamw_optional(node->n_in, node->n_in > 6 ? node->in[6]->dtype : GDP_F32, &ic, &is);
    const double gs = is >= 0 ? gd_ref_load(node->in[is], 0) : 1.0;
    double b1 = gdp_attr_float(&node->attrs, "beta1", 0.9), b2 = gdp_attr_float(&node->attrs, "beta2", 0.999);
    double eps = gdp_attr_float(&node->attrs, "eps", 1e-8), wd = gdp_attr_float(&node->attrs, "weight_decay", 0.0);
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    const gdp_tensor *in[4] = {P, G, M, V};
    rw_walk w;
    int64_t n = update_walk(&w, 4, in);
    for (int64_t i = 0; i < n; i++, rw_next(&w)) {
        double p = rw_ld(P, w.off[0]), g = rw_ld(G, w.off[1]) * gs, m = rw_ld(M, w.off[2]), v = rw_ld(V, w.off[3]);
        p -= lr * wd * p;
        m = b1 * m + (1.0 - b1) * g;
        v = b2 * v + (1.0 - b2) * g * g;
        p -= lr * (m / bc1) / (sqrt(v / bc2) + eps);
        rw_st(node->out[0], i, p);
        rw_st(node->out[1], i, m);
        rw_st(node->out[2], i, v);
        if (copy != NULL) {
            float stored = (float)rw_ld(node->out[0], i); // p' as its state holds it
            ((uint16_t *)copy->data)[i] = copy->dtype == GDP_BF16 ? gdp_f32_to_bf16(stored) : gdp_f32_to_f16(stored);
        }
    }
    return GDP_OK;
}

/* ---- assign(dst, src) -> dst' ------------------------------------------------------------ */

static int assign_infer(gd_infer *c)
{
    if (same_as_first(c, 1, "src", "dst")) return -1;
    c->out[0] = c->in[0];
    c->n_out = 1;
    return 0;
}

static gdp_status assign_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    // a copy of elements: exact for every dtype; memmove because out may be src itself
    const gdp_tensor *src = node->in[1];
    size_t es = gdp_dtype_size(src->dtype);
    int64_t n = gdp_numel(src);
    if (gdp_is_contiguous(src)) {
        if (n > 0) memmove(node->out[0]->data, src->data, (size_t)n * es);
        return GDP_OK;
    }
    rw_walk w; // a strided src is a view of another buffer than dst's: no overlap
    rw_begin(&w, src->ndim, src->shape);
    rw_add(&w, src);
    for (int64_t i = 0; i < n; i++, rw_next(&w))
        memcpy((char *)node->out[0]->data + (size_t)i * es, (const char *)src->data + (size_t)w.off[0] * es, es);
    return GDP_OK;
}

gd_tensor *gd_assign(gd_tensor *dst, gd_tensor *src) { return gd_op2(dst, src, "assign", 0, NULL); }

/* ---- clip_coef(norm) -> min(1, max_norm / (norm + 1e-6)) ---------------------------------- */

static int clip_coef_infer(gd_infer *c)
{
    const gd_shape *s = &c->in[0];
    char b[96];
    if (!is_float_dtype(s->dtype) || gd_shape_numel(s) != 1)
        return gd_infer_fail(c, "norm must be a floating scalar, got %s", gd_shape_str(s, b, sizeof b));
    double mx = gdp_attr_float(c->attrs, "max_norm", 1.0);
    if (!(mx > 0)) return gd_infer_fail(c, "max_norm = %g is not positive", mx);
    c->out[0].dtype = s->dtype;
    c->out[0].ndim = 0;
    c->n_out = 1;
    return 0;
}

static gdp_status clip_coef_ref(void *backend, const gdp_node *node, void *stream, gdp_err *err)
{
    double norm = gd_ref_load(node->in[0], 0);
    double coef = gdp_attr_float(&node->attrs, "max_norm", 1.0) / (norm + 1e-6);
    // written so that a NaN norm gives a NaN coefficient: a diverged run should show it
    gd_ref_store(node->out[0], 0, coef > 1.0 ? 1.0 : coef);
    return GDP_OK;
}

/* ---- registration ------------------------------------------------------------------------ */

static const char *const sgd_cases[] = {
    "f[4,8] f[4,8] f[4,8] p[] | momentum=0.9 weight_decay=0.01 nesterov=0",
    "f[17] f[17] f[17] p[] | momentum=0.8 weight_decay=0.0 nesterov=1",
    "f[3,5] f[3,5] f[3,5] p[] | momentum=0.0 weight_decay=0.1 nesterov=0",
    NULL};

static const char *const adamw_cases[] = {
    "f[4,8] f[4,8] f[4,8] p[4,8] p[] p[] | beta1=0.9 beta2=0.999 eps=1e-8 weight_decay=0.01",
    "f[17] f[17] f[17] p[17] p[] p[] | beta1=0.8 beta2=0.99 eps=1e-6 weight_decay=0.0",
    /* a gradient scale (clipping) */
    "f[4,8] f[4,8] f[4,8] p[4,8] p[] p[] p[] | beta1=0.9 beta2=0.999 eps=1e-8 weight_decay=0.01",
    "f[300] f[300] f[300] p[300] p[] p[] f32[]<0.01:0.5 | weight_decay=0.1",
    NULL};

/* f32 master weights with a bf16 or f16 copy, the gradient of the copy's dtype or f32 */
static const char *const adamw_mixed[] = {
    "f32,bf16,f32,f32,f32,f32,bf16->f32,f32,f32,bf16",
    "f32,f32,f32,f32,f32,f32,bf16->f32,f32,f32,bf16",
    "f32,f16,f32,f32,f32,f32,f16->f32,f32,f32,f16",
    "f32,f32,f32,f32,f32,f32,f16->f32,f32,f32,f16",
    /* with the gradient scale */
    "f32,bf16,f32,f32,f32,f32,bf16,f32->f32,f32,f32,bf16",
    "f32,f16,f32,f32,f32,f32,f16,f32->f32,f32,f32,f16",
    /* a half gradient without a copy: f32 parameters used through casts */
    "f32,bf16,f32,f32,f32,f32->f32,f32,f32",
    "f32,f16,f32,f32,f32,f32->f32,f32,f32",
    "f32,bf16,f32,f32,f32,f32,f32->f32,f32,f32",
    "f32,f16,f32,f32,f32,f32,f32->f32,f32,f32",
    NULL};
static const char *const adamw_mixed_cases[] = {
    "f32[4,8] bf16[4,8] f32[4,8] f32[4,8]<0.5:2 f32[]<1:3 f32[]<0.5:2 bf16[4,8] | beta1=0.9 beta2=0.999 eps=1e-8 "
    "weight_decay=0.01",
    "f32[17] f32[17] f32[17] f32[17]<0.5:2 f32[]<1:3 f32[]<0.5:2 bf16[17] | beta1=0.8 beta2=0.99 eps=1e-6",
    "f32[4,8] f16[4,8] f32[4,8] f32[4,8]<0.5:2 f32[]<1:3 f32[]<0.5:2 f16[4,8] | beta1=0.9 beta2=0.999 eps=1e-8 "
    "weight_decay=0.01",
    "f32[3,5] f32[3,5] f32[3,5] f32[3,5]<0.5:2 f32[]<1:3 f32[]<0.5:2 f16[3,5] | weight_decay=0.1",
    "f32[4,8] bf16[4,8] f32[4,8] f32[4,8]<0.5:2 f32[]<1:3 f32[]<0.5:2 bf16[4,8] f32[]<0.1:1 | weight_decay=0.01",
    "f32[3,5] f16[3,5] f32[3,5] f32[3,5]<0.5:2 f32[]<1:3 f32[]<0.5:2 f16[3,5] f32[]<0.1:1",
    "f32[4,8] bf16[4,8] f32[4,8] f32[4,8]<0.5:2 f32[]<1:3 f32[]<0.5:2 | weight_decay=0.01",
    "f32[300] f16[300] f32[300] f32[300]<0.5:2 f32[]<1:3 f32[]<0.5:2 | beta1=0.8 beta2=0.99 eps=1e-6",
    "f32[4,8] bf16[4,8] f32[4,8] f32[4,8]<0.5:2 f32[]<1:3 f32[]<0.5:2 f32[]<0.1:1 | weight_decay=0.1",
    "f32[3,5] f16[3,5] f32[3,5] f32[3,5]<0.5:2 f32[]<1:3 f32[]<0.5:2 f32[]<0.1:1",
    NULL};

static const char *const assign_cases[] = {
    "f[3,4] f[3,4]",
    "f[] f[]",
    "i64[5]<10 i64[5]<10",
    "i32[2,3]<100 i32[2,3]<100",
    NULL};

static const char *const clip_coef_cases[] = {
    "p[] | max_norm=1.0",
    "p[] | max_norm=0.1",
    "p[] | max_norm=5.0",
    NULL};

GD_FAMILY(optim)
{
    gd_register_op(r, &(gd_op_def){
        .name = "sgd_update", .min_in = 4, .max_in = 4, .n_out = 2, .attrs = "momentum:float weight_decay:float nesterov:int",
        .dtypes = GD_M(GDP_F32), .infer = sgd_infer, .ref = sgd_ref, .cases = sgd_cases, .inplace = {0, 2, -1, -1}, .updates = 1,
        .tol = 1e-10, .ref_strided = 1, .doc = "(p, g, buf, lr) -> (p', buf') in place: PyTorch SGD with momentum, weight decay, nesterov"});
    gd_register_op(r, &(gd_op_def){
        .name = "adamw_update", .min_in = 6, .max_in = 8, .n_out = 4,
        .attrs = "beta1:float beta2:float eps:float weight_decay:float", .dtypes = GD_M(GDP_F32), .infer = adamw_infer,
        .ref = adamw_ref, .ref_dtypes = GD_M(GDP_F32) | GD_M(GDP_F64) | GD_M(GDP_F16) | GD_M(GDP_BF16),
        .cases = adamw_cases, .mixed = adamw_mixed, .mixed_cases = adamw_mixed_cases, .inplace = {0, 2, 3, 6},
        .updates = 1, .tol = 1e-10, .ref_strided = 1,
        .doc = "(p, g, m, v, step, lr [, copy] [, gscale]) -> (p', m', v' [, copy']) in place: PyTorch AdamW, step "
               "1-based; copy (bf16/f16, optional) receives p' rounded to nearest even (f32 master weights); gscale (f32 "
               "scalar, optional) multiplies g (clipping)"});
    gd_register_op(r, &(gd_op_def){
        .name = "assign", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "", .dtypes = GD_FLOATS, .infer = assign_infer,
        .ref = assign_ref, .ref_dtypes = 0x1ffu, .cases = assign_cases, .inplace = {0, -1, -1, -1}, .updates = 1, .tol = 0,
        .ref_strided = 1,
        .doc = "(dst, src) -> dst' in place: copies src into dst (same shape and dtype)"});
    gd_register_op(r, &(gd_op_def){
        .name = "clip_coef", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "max_norm:float", .dtypes = GD_FLOATS,
        .infer = clip_coef_infer, .ref = clip_coef_ref, .cases = clip_coef_cases, .inplace = {-1, -1, -1, -1},
        .tol = 1e-10, .ref_strided = 1, .doc = "(norm) -> min(1, max_norm / (norm + 1e-6)), a scalar"});
}
