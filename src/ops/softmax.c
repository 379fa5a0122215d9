/* softmax.c — softmax, log_softmax and the losses built on them: cross_entropy and mse.
 *
 * Softmax works along one axis of any tensor. The tensor is read as (outer, n, inner):
 * the softmax axis has n elements that lie `inner` apart, and there are outer * inner
 * independent rows. Every row subtracts its maximum before exponentiating, so that large
 * logits do not overflow; sums are kept in double.
 */
#include "reduce.h"

#include <math.h>
#include <stdlib.h>

static gd_status built(const gd_tensor *t)
{
    return t != NULL ? GD_OK : GD_ERR_INVALID; /* a builder failed; the message is in the context */
}

/* Splits x around the softmax axis; -1 when the axis is out of range. */
static int split_axis(const gdp_tensor *x, const gdp_attrs *attrs, int64_t *outer, int64_t *n, int64_t *inner)
{
    int64_t axis = gdp_attr_int(attrs, "axis", -1);
    if (axis < 0) axis += x->ndim;
    if (axis < 0 || axis >= x->ndim) return -1;
    *outer = 1;
    *inner = 1;
    *n = x->shape[axis];
    for (int d = 0; d < axis; d++) *outer *= x->shape[d];
    for (int d = (int)axis + 1; d < x->ndim; d++) *inner *= x->shape[d];
    return 0;
}

static gdp_status bad_axis(const gdp_node *node, gdp_err *err)
{
    return gdp_fail(err, GDP_ERR_INVALID, "axis %lld is out of range for a tensor of %d dims",
                    (long long)gdp_attr_int(&node->attrs, "axis", -1), (int)node->in[0].ndim);
}

/* ---- softmax, log_softmax ------------------------------------------------------------ */

static int infer_softmax(gd_infer *c)
{
    const gd_shape *x = &c->in[0];
    int s = rd_need_float(c, x, "x");
    if (s != 0) return s;
    if (gd_axis(c, gdp_attr_int(c->attrs, "axis", -1), x->ndim, "axis") < 0) return rd_infer_failed(c);
    c->out[0] = *x;
    return 0;
}

static gdp_status softmax_rows(const gdp_node *node, gdp_err *err, int log_space)
{
    // x (outer, n, inner) -> y (outer, n, inner), normalized along n
    const gdp_tensor *x = &node->in[0], *y = &node->out[0];
    int64_t outer, n, inner;
    if (split_axis(x, &node->attrs, &outer, &n, &inner) != 0) return bad_axis(node, err);
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t j = 0; j < inner; j++) {
            const int64_t base = o * n * inner + j;
            double m = -INFINITY;
            for (int64_t k = 0; k < n; k++) m = fmax(m, rd_load(x, base + k * inner));
            double s = 0.0;
            for (int64_t k = 0; k < n; k++) s += exp(rd_load(x, base + k * inner) - m);
            const double log_s = log(s);
            for (int64_t k = 0; k < n; k++) {
                const int64_t i = base + k * inner;
                double z = rd_load(x, i) - m;
                rd_store(y, i, log_space ? z - log_s : exp(z) / s);
            }
        }
    }
    return GDP_OK;
}

static gdp_status ref_softmax(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    return softmax_rows(node, err, 0);
}

static gdp_status ref_log_softmax(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    return softmax_rows(node, err, 1);
}

/* Both backward ops take (dy, y), where y is the forward output: the gradient needs only
 * that, never x. */
static int infer_softmax_grad(gd_infer *c)
{
    const gd_shape *dy = &c->in[0], *y = &c->in[1];
    char a[240], b[240];
    if (dy->dtype != y->dtype || !rd_same_dims(dy, y))
        return gd_infer_fail(c, "dy %s and y %s must have one shape and dtype", rd_desc(dy, a, sizeof a),
                             rd_desc(y, b, sizeof b));
    if (gd_axis(c, gdp_attr_int(c->attrs, "axis", -1), y->ndim, "axis") < 0) return rd_infer_failed(c);
    c->out[0] = *y;
    return 0;
}

static gdp_status ref_softmax_grad(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // dy, y (outer, n, inner) -> dx = y * (dy - sum_n(dy * y))
    const gdp_tensor *dy = &node->in[0], *y = &node->in[1], *dx = &node->out[0];
    int64_t outer, n, inner;
    if (split_axis(y, &node->attrs, &outer, &n, &inner) != 0) return bad_axis(node, err);
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t j = 0; j < inner; j++) {
            const int64_t base = o * n * inner + j;
            double dot = 0.0;
            for (int64_t k = 0; k < n; k++) dot += rd_load(dy, base + k * inner) * rd_load(y, base + k * inner);
            for (int64_t k = 0; k < n; k++) {
                const int64_t i = base + k * inner;
                rd_store(dx, i, rd_load(y, i) * (rd_load(dy, i) - dot));
            }
        }
    }
    return GDP_OK;
}

static gdp_status ref_log_softmax_grad(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // dy, y = log_softmax(x) (outer, n, inner) -> dx = dy - exp(y) * sum_n(dy)
    const gdp_tensor *dy = &node->in[0], *y = &node->in[1], *dx = &node->out[0];
    int64_t outer, n, inner;
    if (split_axis(y, &node->attrs, &outer, &n, &inner) != 0) return bad_axis(node, err);
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t j = 0; j < inner; j++) {
            const int64_t base = o * n * inner + j;
            double s = 0.0;
            for (int64_t k = 0; k < n; k++) s += rd_load(dy, base + k * inner);
            for (int64_t k = 0; k < n; k++) {
                const int64_t i = base + k * inner;
                rd_store(dx, i, rd_load(dy, i) - exp(rd_load(y, i)) * s);
            }
        }
    }
    return GDP_OK;
}

static gd_status grad_via(gd_grad_ctx *c, const char *op)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_attr a[4];
    int na = rd_attrs_copy(c->attrs, a, 4);
    gd_tensor *in[2] = {c->dout[0], c->out[0]};
    c->din[0] = gd_op(c->g, op, 2, in, na, a);
    return built(c->din[0]);
}

static gd_status grad_softmax(gd_grad_ctx *c) { return grad_via(c, "softmax_grad"); }
static gd_status grad_log_softmax(gd_grad_ctx *c) { return grad_via(c, "log_softmax_grad"); }

/* ---- cross_entropy ---------------------------------------------------------------------- */

/* logits (N, C) and targets (N); more generally logits (..., C) and targets (...). */
static int check_ce(gd_infer *c, const gd_shape *logits, const gd_shape *targets)
{
    char a[240], b[240];
    rd_desc(logits, a, sizeof a);
    rd_desc(targets, b, sizeof b);
    int s = rd_need_float(c, logits, "logits");
    if (s != 0) return s;
    if (targets->dtype != GDP_I32 && targets->dtype != GDP_I64)
        return gd_infer_fail(c, "targets %s must be i32 or i64 (logits %s)", b, a);
    if (logits->ndim < 1 || logits->dim[logits->ndim - 1] < 1)
        return gd_infer_fail(c, "logits %s need a last axis of at least one class", a);
    int ok = targets->ndim == logits->ndim - 1;
    for (int d = 0; ok && d < targets->ndim; d++) ok = targets->dim[d] == logits->dim[d];
    if (!ok) return gd_infer_fail(c, "targets %s must have logits %s's shape without its last axis", b, a);
    return 0;
}

static int infer_cross_entropy(gd_infer *c)
{
    int s = check_ce(c, &c->in[0], &c->in[1]);
    if (s != 0) return s;
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].ndim = 0;
    return 0;
}

static int64_t load_target(const gdp_tensor *t, int64_t i)
{
    return t->dtype == GDP_I32 ? ((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

/* Counts the rows that take part (target != ignore_index) and checks that each of their
 * targets names a class. */
static gdp_status ce_count(const gdp_node *node, const gdp_tensor *targets, int64_t rows, int64_t classes,
                           int64_t *count, gdp_err *err)
{
    const int64_t ignore = gdp_attr_int(&node->attrs, "ignore_index", -100);
    *count = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = load_target(targets, r);
        if (t == ignore) continue;
        if (t < 0 || t >= classes)
            return gdp_fail(err, GDP_ERR_INVALID,
                            "targets[%lld] = %lld is not a class of [0, %lld) nor ignore_index %lld",
                            (long long)r, (long long)t, (long long)classes, (long long)ignore);
        (*count)++;
    }
    return GDP_OK;
}

/* log(sum(exp(row))) of one row of logits, stably. */
static double logsumexp(const gdp_tensor *x, int64_t base, int64_t n)
{
    double m = -INFINITY, s = 0.0;
    for (int64_t k = 0; k < n; k++) m = fmax(m, rd_load(x, base + k));
    for (int64_t k = 0; k < n; k++) s += exp(rd_load(x, base + k) - m);
    return m + log(s);
}

static gdp_status ref_cross_entropy(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // logits (N, C), targets (N) -> loss () = mean over kept rows of logsumexp(row) - row[target]
    const gdp_tensor *x = &node->in[0], *t = &node->in[1];
    const int64_t C = x->shape[x->ndim - 1], N = gdp_numel(t);
    const int64_t ignore = gdp_attr_int(&node->attrs, "ignore_index", -100);
    int64_t count;
    gdp_status s = ce_count(node, t, N, C, &count, err);
    if (s != GDP_OK) return s;
    double total = 0.0;
    for (int64_t r = 0; r < N; r++) {
        int64_t target = load_target(t, r);
        if (target == ignore) continue;
        total += logsumexp(x, r * C, C) - rd_load(x, r * C + target);
    }
    rd_store(&node->out[0], 0, count > 0 ? total / (double)count : 0.0);
    return GDP_OK;
}

static int infer_cross_entropy_grad(gd_infer *c)
{
    // dloss (), logits (N, C), targets (N) -> dlogits (N, C)
    const gd_shape *dl = &c->in[0], *x = &c->in[1];
    int s = check_ce(c, x, &c->in[2]);
    if (s != 0) return s;
    char a[240], b[240];
    if (dl->ndim != 0 || dl->dtype != x->dtype)
        return gd_infer_fail(c, "dloss %s must be a scalar of logits %s's dtype", rd_desc(dl, a, sizeof a),
                             rd_desc(x, b, sizeof b));
    c->out[0] = *x;
    return 0;
}

static gdp_status ref_cross_entropy_grad(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // dloss (), logits (N, C), targets (N) -> dlogits = (softmax(row) - onehot(target)) * dloss / count
    const gdp_tensor *dl = &node->in[0], *x = &node->in[1], *t = &node->in[2], *dx = &node->out[0];
    const int64_t C = x->shape[x->ndim - 1], N = gdp_numel(t);
    const int64_t ignore = gdp_attr_int(&node->attrs, "ignore_index", -100);
    int64_t count;
    gdp_status s = ce_count(node, t, N, C, &count, err);
    if (s != GDP_OK) return s;
    const double scale = count > 0 ? rd_load(dl, 0) / (double)count : 0.0;
    for (int64_t r = 0; r < N; r++) {
        int64_t target = load_target(t, r);
        if (target == ignore) {
            for (int64_t k = 0; k < C; k++) rd_store(dx, r * C + k, 0.0);
            continue;
        }
        const double lse = logsumexp(x, r * C, C);
        for (int64_t k = 0; k < C; k++) {
            double p = exp(rd_load(x, r * C + k) - lse);
            rd_store(dx, r * C + k, (p - (k == target ? 1.0 : 0.0)) * scale);
        }
    }
    return GDP_OK;
}

static gd_status grad_cross_entropy(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_attr a[4];
    int na = rd_attrs_copy(c->attrs, a, 4);
    gd_tensor *in[3] = {c->dout[0], c->in[0], c->in[1]};
    c->din[0] = gd_op(c->g, "cross_entropy_grad", 3, in, na, a);
    return built(c->din[0]); /* targets are indices: no gradient */
}

/* ---- mse ------------------------------------------------------------------------------- */

static int infer_mse(gd_infer *c)
{
    const gd_shape *p = &c->in[0], *t = &c->in[1];
    int s = rd_need_float(c, p, "pred");
    if (s != 0) return s;
    if (p->dtype != t->dtype || !rd_same_dims(p, t)) {
        char a[240], b[240];
        return gd_infer_fail(c, "pred %s and target %s must have one shape and dtype", rd_desc(p, a, sizeof a),
                             rd_desc(t, b, sizeof b));
    }
    c->out[0].dtype = p->dtype;
    c->out[0].ndim = 0;
    return 0;
}

static gdp_status ref_mse(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // pred (...), target (...) -> () = mean((pred - target)^2)
    const gdp_tensor *p = &node->in[0], *t = &node->in[1];
    const int64_t n = gdp_numel(p);
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = rd_load(p, i) - rd_load(t, i);
        s += d * d;
    }
    rd_store(&node->out[0], 0, s / (double)n);
    return GDP_OK;
}

static gd_status grad_mse(gd_grad_ctx *c)
{
    // d/dpred = 2 (pred - target) / n * dloss; d/dtarget is its negative
    if (c->dout[0] == NULL) return GD_OK;
    const double n = (double)gd_tensor_numel(c->in[0]);
    gd_tensor *s = gd_scale(c->dout[0], 2.0 / n, 0.0); // ()
    gd_tensor *dp = gd_mul(gd_sub(c->in[0], c->in[1]), s);
    c->din[0] = dp;
    c->din[1] = gd_neg(dp);
    return c->din[0] != NULL && c->din[1] != NULL ? GD_OK : GD_ERR_INVALID;
}

/* ---- builders -------------------------------------------------------------------------- */

gd_tensor *gd_softmax(gd_tensor *x, int64_t axis)
{
    gd_attr a = gd_attr_i("axis", axis);
    return gd_op1(x, "softmax", 1, &a);
}

gd_tensor *gd_log_softmax(gd_tensor *x, int64_t axis)
{
    gd_attr a = gd_attr_i("axis", axis);
    return gd_op1(x, "log_softmax", 1, &a);
}

gd_tensor *gd_cross_entropy(gd_tensor *logits, gd_tensor *targets, int64_t ignore_index)
{
    gd_attr a = gd_attr_i("ignore_index", ignore_index);
    return gd_op2(logits, targets, "cross_entropy", 1, &a);
}

gd_tensor *gd_mse(gd_tensor *pred, gd_tensor *target)
{
    return gd_op2(pred, target, "mse", 0, NULL);
}

/* ---- registration ---------------------------------------------------------------------- */

static const char *const softmax_cases[] = {
    "f[4,7]",
    "f[3,5] | axis=0",
    "f[2,3,4] | axis=1",
    "f[2,3,4] | axis=-3",
    "f[6]",
    "f[3,1]",
    "n[8,100]",
    "n[2,5,3] | axis=-1",
    NULL,
};

static const char *const softmax_grad_cases[] = {
    "f[4,7] f[4,7]",
    "f[3,5] f[3,5] | axis=0",
    "f[2,3,4] f[2,3,4] | axis=1",
    "f[6] f[6]",
    "n[8,100] n[8,100]",
    NULL,
};

static const char *const cross_entropy_cases[] = {
    "f[4,5] i64[4]<5",
    "f[6,3] i32[6]<3",
    "f[5,4] i64[5]<-1:4 | ignore_index=-1",
    "f[2,3] i64[2]<-1:0 | ignore_index=-1",
    "f[1,1] i64[1]<1",
    "f[2,3,5] i64[2,3]<5",
    "n[16,50] i32[16]<50",
    NULL,
};

static const char *const cross_entropy_grad_cases[] = {
    "f[] f[4,5] i64[4]<5",
    "f[] f[6,3] i32[6]<3",
    "f[] f[5,4] i64[5]<-1:4 | ignore_index=-1",
    "f[] f[2,3] i64[2]<-1:0 | ignore_index=-1",
    "f[] n[16,50] i32[16]<50",
    NULL,
};

static const char *const mse_cases[] = {
    "f[3,4] f[3,4]",
    "f[5] f[5]",
    "f[] f[]",
    "f[2,3,4] f[2,3,4]",
    NULL,
};


GD_FAMILY(softmax)
{
    gd_register_op(r, &(gd_op_def){
        .name = "softmax", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "axis:int", .dtypes = GD_FLOATS,
        .infer = infer_softmax, .grad = grad_softmax, .ref = ref_softmax, .cases = softmax_cases,
        .tol = 1e-8, .doc = "exp(x) / sum(exp(x)) along axis (default -1)"});
    gd_register_op(r, &(gd_op_def){
        .name = "log_softmax", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "axis:int", .dtypes = GD_FLOATS,
        .infer = infer_softmax, .grad = grad_log_softmax, .ref = ref_log_softmax, .cases = softmax_cases,
        .tol = 1e-8, .doc = "x - log(sum(exp(x))) along axis (default -1)"});
    gd_register_op(r, &(gd_op_def){
        .name = "softmax_grad", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "axis:int", .dtypes = GD_FLOATS,
        .infer = infer_softmax_grad, .ref = ref_softmax_grad, .cases = softmax_grad_cases,
        .tol = 1e-8, .doc = "softmax_grad(dy, y): y * (dy - sum(dy * y)) along axis"});
    gd_register_op(r, &(gd_op_def){
        .name = "log_softmax_grad", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "axis:int",
        .dtypes = GD_FLOATS, .infer = infer_softmax_grad, .ref = ref_log_softmax_grad,
        .cases = softmax_grad_cases, .tol = 1e-8,
        .doc = "log_softmax_grad(dy, y): dy - exp(y) * sum(dy) along axis"});
    gd_register_op(r, &(gd_op_def){
        .name = "cross_entropy", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "ignore_index:int",
        .dtypes = GD_FLOATS, .infer = infer_cross_entropy, .grad = grad_cross_entropy,
        .ref = ref_cross_entropy, .cases = cross_entropy_cases, .tol = 1e-8,
        .doc = "cross_entropy(logits (N, C), targets (N) i32/i64): mean over targets != ignore_index "
               "(default -100) of -log_softmax(logits)[target]; 0 when every target is ignored"});
    gd_register_op(r, &(gd_op_def){
        .name = "cross_entropy_grad", .min_in = 3, .max_in = 3, .n_out = 1, .attrs = "ignore_index:int",
        .dtypes = GD_FLOATS, .infer = infer_cross_entropy_grad, .ref = ref_cross_entropy_grad,
        .cases = cross_entropy_grad_cases, .tol = 1e-8,
        .doc = "cross_entropy_grad(dloss, logits, targets): (softmax(logits) - onehot) * dloss / count"});
    gd_register_op(r, &(gd_op_def){
        .name = "mse", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "", .dtypes = GD_FLOATS,
        .infer = infer_mse, .grad = grad_mse, .ref = ref_mse, .cases = mse_cases,
        .tol = 1e-8, .doc = "mean((pred - target)^2) over every element, a scalar"});
}
