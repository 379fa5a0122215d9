/* softmax.c — softmax, log_softmax and the losses built on them: cross_entropy and mse.
 *
 * Softmax works along one axis of any tensor: one independent row for every index of the
 * other dims, its n elements a stride apart (the tensor's own stride along the axis, so
 * inputs may be views). Every row subtracts its maximum before exponentiating, so that
 * large logits do not overflow; sums are kept in double. A target outside the classes is
 * bad data, reported with its position and value.
 *
 * cross_entropy's `classes` attribute (default: the whole last axis) counts the columns
 * that are classes: the ones past it take no part in the loss and get a zero gradient.
 * A language model whose output head is padded to a friendlier width reads its loss off
 * the padded logits that way, with no slice copied forward nor scattered back.
 */
#include "reduce.h"
#include "refwalk.h"

#include <math.h>

static gd_status built(const gd_tensor *t)
{
    return t != NULL ? GD_OK : GD_ERR_INVALID; /* a builder failed; the message is in the context */
}

/* The softmax axis of x, normalized; -1 when out of range. */
static int softmax_axis(const gdp_tensor *x, const gdp_attrs *attrs)
{
    int64_t axis = gdp_attr_int(attrs, "axis", -1);
    if (axis < 0) axis += x->ndim;
    return axis < 0 || axis >= x->ndim ? -1 : (int)axis;
}

static gdp_status bad_axis(const gdp_node *node, gdp_err *err)
{
    return gdp_fail(err, GDP_ERR_INVALID, "axis %lld is out of range for a tensor of %d dims",
                    (long long)gdp_attr_int(&node->attrs, "axis", -1), (int)node->in[0]->ndim);
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
    // x (..., n, ...) -> y, normalized along the axis; x may be strided
    const gdp_tensor *x = node->in[0], *y = node->out[0];
    int axis = softmax_axis(x, &node->attrs);
    if (axis < 0) return bad_axis(node, err);
    const gdp_tensor *t[2] = {x, y};
    rw_walk w;
    int64_t rows = rw_rows(&w, x, axis, 2, t), n = x->shape[axis];
    const int64_t sx = x->stride[axis], sy = y->stride[axis];
    for (int64_t r = 0; r < rows; r++, rw_next(&w)) {
        const int64_t bx = w.off[0], by = w.off[1];
        double m = -INFINITY;
        for (int64_t k = 0; k < n; k++) m = fmax(m, rw_ld(x, bx + k * sx));
        double s = 0.0;
        for (int64_t k = 0; k < n; k++) s += exp(rw_ld(x, bx + k * sx) - m);
        const double log_s = log(s);
        for (int64_t k = 0; k < n; k++) {
            double z = rw_ld(x, bx + k * sx) - m;
            rw_st(y, by + k * sy, log_space ? z - log_s : exp(z) / s);
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

/* The rows of (dy, y, dx) along the softmax axis: f gets each row's offsets. */
static gdp_status grad_rows(const gdp_node *node, gdp_err *err,
                            void (*f)(const gdp_node *node, int64_t n, const int64_t *base, const int64_t *step))
{
    const gdp_tensor *t[3] = {node->in[0], node->in[1], node->out[0]};
    int axis = softmax_axis(t[1], &node->attrs);
    if (axis < 0) return bad_axis(node, err);
    rw_walk w;
    int64_t rows = rw_rows(&w, t[1], axis, 3, t);
    const int64_t step[3] = {t[0]->stride[axis], t[1]->stride[axis], t[2]->stride[axis]};
    for (int64_t r = 0; r < rows; r++, rw_next(&w)) f(node, t[1]->shape[axis], w.off, step);
    return GDP_OK;
}

// dx = y * (dy - sum_n(dy * y)) along the row
static void softmax_grad_row(const gdp_node *node, int64_t n, const int64_t *base, const int64_t *step)
{
    const gdp_tensor *dy = node->in[0], *y = node->in[1], *dx = node->out[0];
    double dot = 0.0;
    for (int64_t k = 0; k < n; k++) dot += rw_ld(dy, base[0] + k * step[0]) * rw_ld(y, base[1] + k * step[1]);
    for (int64_t k = 0; k < n; k++)
        rw_st(dx, base[2] + k * step[2], rw_ld(y, base[1] + k * step[1]) * (rw_ld(dy, base[0] + k * step[0]) - dot));
}

// y = log_softmax(x): dx = dy - exp(y) * sum_n(dy) along the row
static void log_softmax_grad_row(const gdp_node *node, int64_t n, const int64_t *base, const int64_t *step)
{
    const gdp_tensor *dy = node->in[0], *y = node->in[1], *dx = node->out[0];
    double s = 0.0;
    for (int64_t k = 0; k < n; k++) s += rw_ld(dy, base[0] + k * step[0]);
    for (int64_t k = 0; k < n; k++)
        rw_st(dx, base[2] + k * step[2], rw_ld(dy, base[0] + k * step[0]) - exp(rw_ld(y, base[1] + k * step[1])) * s);
}

static gdp_status ref_softmax_grad(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    return grad_rows(node, err, softmax_grad_row);
}

static gdp_status ref_log_softmax_grad(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    return grad_rows(node, err, log_softmax_grad_row);
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

/* The classes of a cross-entropy node whose logits have C columns: the first `classes`. */
static int64_t ce_classes(const gdp_attrs *attrs, int64_t C)
{
    return gdp_attr_int(attrs, "classes", C);
}

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
    const int64_t C = logits->dim[logits->ndim - 1], k = ce_classes(c->attrs, C);
    if (k < 1 || k > C)
        return gd_infer_fail(c, "classes = %lld must be in [1, %lld] for logits %s", (long long)k, (long long)C, a);
    return 0;
}

/* The loss's dtype: the logits' own, or (out_dtype) f32 for f16/bf16 logits — a
 * mixed-precision model's loss without an f32 copy of its logits. */
static int ce_loss_dtype(gd_infer *c, int32_t logits_dt, int32_t *out)
{
    const int64_t dt = gdp_attr_int(c->attrs, "out_dtype", logits_dt);
    if (dt != logits_dt && !(dt == GDP_F32 && (logits_dt == GDP_BF16 || logits_dt == GDP_F16)))
        return gd_infer_fail(c, "out_dtype %s: the loss of %s logits is %s%s", gd_dtype_name((gd_dtype)dt),
                             gd_dtype_name((gd_dtype)logits_dt), gd_dtype_name((gd_dtype)logits_dt),
                             logits_dt == GDP_BF16 || logits_dt == GDP_F16 ? " or f32" : "");
    *out = (int32_t)dt;
    return 0;
}

static int infer_cross_entropy(gd_infer *c)
{
    int s = check_ce(c, &c->in[0], &c->in[1]);
    if (s != 0) return s;
    int32_t dt = c->in[0].dtype;
    if ((s = ce_loss_dtype(c, c->in[0].dtype, &dt)) != 0) return s;
    c->out[0].dtype = dt;
    c->out[0].ndim = 0;
    return 0;
}

/* The rows of a cross-entropy node: one per target, carrying the targets (slot 0) and
 * the logits' row (slot 1; class k at off[1] + k * logits->stride[last]). */
static int64_t ce_rows(rw_walk *w, const gdp_tensor *logits, const gdp_tensor *targets)
{
    rw_begin(w, targets->ndim, targets->shape);
    rw_add_strides(w, targets->stride);
    rw_add_strides(w, logits->stride);
    return gdp_numel(targets);
}

/* Counts the rows that take part (target != ignore_index) and checks that each of their
 * targets names a class: anything else, a negative target included, is bad data. */
static gdp_status ce_count(const gdp_node *node, const gdp_tensor *logits, const gdp_tensor *targets,
                           int64_t *count, gdp_err *err)
{
    const int64_t ignore = gdp_attr_int(&node->attrs, "ignore_index", -100);
    const int64_t classes = ce_classes(&node->attrs, logits->shape[logits->ndim - 1]);
    rw_walk w;
    int64_t rows = ce_rows(&w, logits, targets);
    *count = 0;
    for (int64_t r = 0; r < rows; r++, rw_next(&w)) {
        int64_t t = rw_ld_index(targets, w.off[0]);
        if (t == ignore) continue;
        if (t < 0 || t >= classes) {
            char pos[200];
            return gdp_fail(err, GDP_ERR_INVALID, "%s = %lld is not a class of [0, %lld) nor ignore_index %lld",
                            rw_position("targets", targets, r, pos, sizeof pos), (long long)t,
                            (long long)classes, (long long)ignore);
        }
        (*count)++;
    }
    return GDP_OK;
}

/* log(sum(exp(row))) of one row of logits (n classes `step` apart), stably. */
static double logsumexp(const gdp_tensor *x, int64_t base, int64_t n, int64_t step)
{
    double m = -INFINITY, s = 0.0;
    for (int64_t k = 0; k < n; k++) m = fmax(m, rw_ld(x, base + k * step));
    for (int64_t k = 0; k < n; k++) s += exp(rw_ld(x, base + k * step) - m);
    return m + log(s);
}

static gdp_status ref_cross_entropy(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // logits (N, C), targets (N) -> loss () = mean over kept rows of logsumexp(row[:K]) - row[target]
    const gdp_tensor *x = node->in[0], *t = node->in[1];
    const int64_t K = ce_classes(&node->attrs, x->shape[x->ndim - 1]), sc = x->stride[x->ndim - 1];
    const int64_t ignore = gdp_attr_int(&node->attrs, "ignore_index", -100);
    int64_t count;
    gdp_status s = ce_count(node, x, t, &count, err);
    if (s != GDP_OK) return s;
    double total = 0.0;
    rw_walk w;
    int64_t rows = ce_rows(&w, x, t);
    for (int64_t r = 0; r < rows; r++, rw_next(&w)) {
        int64_t target = rw_ld_index(t, w.off[0]);
        if (target == ignore) continue;
        total += logsumexp(x, w.off[1], K, sc) - rw_ld(x, w.off[1] + target * sc);
    }
    rw_st(node->out[0], 0, count > 0 ? total / (double)count : 0.0);
    return GDP_OK;
}

static int infer_cross_entropy_grad(gd_infer *c)
{
    // dloss (), logits (N, C), targets (N) -> dlogits (N, C)
    const gd_shape *dl = &c->in[0], *x = &c->in[1];
    int s = check_ce(c, x, &c->in[2]);
    if (s != 0) return s;
    char a[240], b[240];
    const int half = x->dtype == GDP_BF16 || x->dtype == GDP_F16;
    if (dl->ndim != 0 || (dl->dtype != x->dtype && !(half && dl->dtype == GDP_F32)))
        return gd_infer_fail(c, "dloss %s must be a scalar of logits %s's dtype%s", rd_desc(dl, a, sizeof a),
                             rd_desc(x, b, sizeof b), half ? " or f32" : "");
    c->out[0] = *x;
    return 0;
}

static gdp_status ref_cross_entropy_grad(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    // dloss (), logits (N, C), targets (N) -> dlogits = (softmax(row[:K]) - onehot(target)) * dloss / count,
    // 0 in the columns past K
    const gdp_tensor *dl = node->in[0], *x = node->in[1], *t = node->in[2], *dx = node->out[0];
    const int64_t C = x->shape[x->ndim - 1], K = ce_classes(&node->attrs, C), sc = x->stride[x->ndim - 1];
    const int64_t ignore = gdp_attr_int(&node->attrs, "ignore_index", -100);
    int64_t count;
    gdp_status s = ce_count(node, x, t, &count, err);
    if (s != GDP_OK) return s;
    const double scale = count > 0 ? rw_ld(dl, 0) / (double)count : 0.0;
    rw_walk w;
    int64_t rows = ce_rows(&w, x, t);
    for (int64_t r = 0; r < rows; r++, rw_next(&w)) {
        int64_t target = rw_ld_index(t, w.off[0]);
        if (target == ignore) {
            for (int64_t k = 0; k < C; k++) rw_st(dx, r * C + k, 0.0);
            continue;
        }
        const double lse = logsumexp(x, w.off[1], K, sc);
        for (int64_t k = 0; k < K; k++) {
            double p = exp(rw_ld(x, w.off[1] + k * sc) - lse);
            rw_st(dx, r * C + k, (p - (k == target ? 1.0 : 0.0)) * scale);
        }
        for (int64_t k = K; k < C; k++) rw_st(dx, r * C + k, 0.0);
    }
    return GDP_OK;
}

/* ---- cross_entropy_with_grad: the loss and its gradient from one kernel ----------------- */

/* (dloss, logits, targets) -> (dlogits, loss): what cross_entropy_grad and cross_entropy
 * make, the loss in dloss's dtype (graph passes make it of the pair, whose backward reads
 * each row of logits anyway; models never build it). */
static int infer_cross_entropy_with_grad(gd_infer *c)
{
    int s = infer_cross_entropy_grad(c);
    if (s != 0) return s;
    c->out[1].dtype = c->in[0].dtype;
    c->out[1].ndim = 0;
    c->n_out = 2;
    return 0;
}

/* The forward's reference, then the backward's: each reads the logits as they are, so the
 * loss is read before the gradient may take the logits' storage (reuse). */
static gdp_status ref_cross_entropy_with_grad(void *be, const gdp_node *node, void *stream, gdp_err *err)
{
    const gdp_tensor *fin[2] = {node->in[1], node->in[2]}, *fout[1] = {node->out[1]}, *gout[1] = {node->out[0]};
    gdp_node f = *node, b = *node;
    f.n_in = 2, f.in = fin, f.n_out = 1, f.out = fout;
    b.n_out = 1, b.out = gout;
    gdp_status s = ref_cross_entropy(be, &f, stream, err);
    return s != GDP_OK ? s : ref_cross_entropy_grad(be, &b, stream, err);
}

static gd_status grad_cross_entropy(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_attr a[4];
    int na = 0;
    /* the loss's dtype is dloss's: the gradient op has no out_dtype */
    for (int k = 0; c->attrs != NULL && k < c->attrs->n && na < 4; k++) {
        const gdp_attrs one = {1, &c->attrs->items[k]};
        if (strcmp(c->attrs->items[k].name, "out_dtype") != 0) na += rd_attrs_copy(&one, a + na, 1);
    }
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
    const gdp_tensor *p = node->in[0], *t = node->in[1];
    const int64_t n = gdp_numel(p);
    rw_walk w;
    rw_begin(&w, p->ndim, p->shape);
    rw_add(&w, p);
    rw_add(&w, t);
    double s = 0.0;
    for (int64_t i = 0; i < n; i++, rw_next(&w)) {
        double d = rw_ld(p, w.off[0]) - rw_ld(t, w.off[1]);
        s += d * d;
    }
    rw_st(node->out[0], 0, s / (double)n);
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
    "f[4,7] i64[4]<5 | classes=5",
    "f[5,6] i32[5]<-1:4 | ignore_index=-1 classes=4",
    "f[2,3,8] i64[2,3]<1 | classes=1",
    "f[3,4] i64[3]<4 | classes=4",
    "n[16,64] i32[16]<50 | classes=50",
    "n[4,16448] i32[4]<16400 | classes=16400", /* rows long enough for a backend's unrolled loops */
    NULL,
};

/* f16/bf16 logits with an f32 loss, and the gradient of one (dloss f32) */
static const char *const cross_entropy_mixed[] = {"bf16,i32->f32", "bf16,i64->f32", "f16,i32->f32", "f16,i64->f32",
                                                  NULL};
static const char *const cross_entropy_mixed_cases[] = {
    "bf16[4,5] i64[4]<5 | out_dtype=f32",
    "bf16[5,6] i32[5]<-1:4 | ignore_index=-1 classes=4 out_dtype=f32",
    "bf16[2,3,8] i64[2,3]<8 | out_dtype=f32",
    "bf16[4,16448] i32[4]<16400 | classes=16400 out_dtype=f32",
    "f16[6,3] i32[6]<3 | out_dtype=f32",
    "f16[5,4] i64[5]<-1:4 | ignore_index=-1 out_dtype=f32",
    "f16[4,16448] i64[4]<16400 | classes=16400 out_dtype=f32",
    NULL,
};
static const char *const cross_entropy_grad_mixed[] = {"f32,bf16,i32->bf16", "f32,bf16,i64->bf16", "f32,f16,i32->f16",
                                                       "f32,f16,i64->f16", NULL};
static const char *const cross_entropy_grad_mixed_cases[] = {
    "f32[] bf16[4,5] i64[4]<5",
    "f32[] bf16[5,6] i32[5]<-1:4 | ignore_index=-1 classes=4",
    "f32[] bf16[4,16448] i64[4]<-1:16400 | ignore_index=-1 classes=16400",
    "f32[] f16[6,3] i32[6]<3",
    "f32[] f16[5,4] i64[5]<-1:4 | ignore_index=-1",
    "f32[] f16[4,16448] i32[4]<16400 | classes=16400",
    "f32[] bf16[4100,8] i64[4100]<8", /* more rows than a block counts itself (CUDA) */
    NULL,
};

static const char *const cross_entropy_grad_cases[] = {
    "f[] f[4,5] i64[4]<5",
    "f[] f[4100,3] i32[4100]<-1:3 | ignore_index=-1", /* more rows than a block counts itself (CUDA) */
    "f[] f[6,3] i32[6]<3",
    "f[] f[5,4] i64[5]<-1:4 | ignore_index=-1",
    "f[] f[2,3] i64[2]<-1:0 | ignore_index=-1",
    "f[] n[16,50] i32[16]<50",
    "f[] f[4,7] i64[4]<5 | classes=5",
    "f[] f[5,6] i32[5]<-1:4 | ignore_index=-1 classes=4",
    "f[] n[16,64] i32[16]<50 | classes=50",
    "f[] n[4,16448] i64[4]<-1:16400 | ignore_index=-1 classes=16400",
    NULL,
};

/* dloss, logits, targets as cross_entropy_grad's; the loss comes out in dloss's dtype */
static const char *const cross_entropy_with_grad_cases[] = {
    "f[] f[4,5] i64[4]<5",
    "f[] f[4100,3] i32[4100]<-1:3 | ignore_index=-1",
    "f[] f[5,4] i64[5]<-1:4 | ignore_index=-1",
    "f[] f[2,3] i64[2]<-1:0 | ignore_index=-1",
    "f[] n[16,50] i32[16]<50",
    "f[] f[5,6] i32[5]<-1:4 | ignore_index=-1 classes=4",
    "f[] n[4,16448] i64[4]<-1:16400 | ignore_index=-1 classes=16400",
    NULL,
};
static const char *const cross_entropy_with_grad_mixed[] = {"f32,bf16,i32->bf16,f32", "f32,bf16,i64->bf16,f32",
                                                            "f32,f16,i32->f16,f32", "f32,f16,i64->f16,f32", NULL};
static const char *const cross_entropy_with_grad_mixed_cases[] = {
    "f32[] bf16[4,5] i64[4]<5",
    "f32[] bf16[5,6] i32[5]<-1:4 | ignore_index=-1 classes=4",
    "f32[] bf16[4,16448] i64[4]<-1:16400 | ignore_index=-1 classes=16400",
    "f32[] f16[6,3] i32[6]<3",
    "f32[] f16[4,16448] i32[4]<16400 | classes=16400",
    "f32[] f16[5,4] i64[5]<-1:4 | ignore_index=-1",
    "f32[] bf16[4100,8] i64[4100]<8",
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
        .ref_strided = 1, .tol = 1e-8, .doc = "exp(x) / sum(exp(x)) along axis (default -1)"});
    gd_register_op(r, &(gd_op_def){
        .name = "log_softmax", .min_in = 1, .max_in = 1, .n_out = 1, .attrs = "axis:int", .dtypes = GD_FLOATS,
        .infer = infer_softmax, .grad = grad_log_softmax, .ref = ref_log_softmax, .cases = softmax_cases,
        .ref_strided = 1, .tol = 1e-8, .doc = "x - log(sum(exp(x))) along axis (default -1)"});
    gd_register_op(r, &(gd_op_def){
        .name = "softmax_grad", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "axis:int", .dtypes = GD_FLOATS,
        .infer = infer_softmax_grad, .ref = ref_softmax_grad, .cases = softmax_grad_cases,
        .ref_strided = 1, .tol = 1e-8, .doc = "softmax_grad(dy, y): y * (dy - sum(dy * y)) along axis"});
    gd_register_op(r, &(gd_op_def){
        .name = "log_softmax_grad", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "axis:int",
        .dtypes = GD_FLOATS, .infer = infer_softmax_grad, .ref = ref_log_softmax_grad,
        .cases = softmax_grad_cases, .ref_strided = 1, .tol = 1e-8,
        .doc = "log_softmax_grad(dy, y): dy - exp(y) * sum(dy) along axis"});
    gd_register_op(r, &(gd_op_def){
        .name = "cross_entropy", .min_in = 2, .max_in = 2, .n_out = 1,
        .attrs = "ignore_index:int classes:int out_dtype:int", .dtypes = GD_FLOATS, .infer = infer_cross_entropy,
        .grad = grad_cross_entropy, .ref = ref_cross_entropy, .cases = cross_entropy_cases,
        .mixed = cross_entropy_mixed, .mixed_cases = cross_entropy_mixed_cases, .ref_strided = 1, .tol = 1e-8,
        .doc = "cross_entropy(logits (N, C), targets (N) i32/i64): mean over targets != ignore_index "
               "(default -100) of -log_softmax(logits)[target]; 0 when every target is ignored; any other target "
               "outside [0, C), negative ones included, is bad data (GD_ERR_INVALID); classes=K (default C) makes only the "
               "first K columns classes: the rest take no part (targets must be in [0, K)) and get a zero gradient; "
               "out_dtype=f32 gives f16/bf16 logits an f32 loss (the mixed forms)"});
    gd_register_op(r, &(gd_op_def){
        .name = "cross_entropy_grad", .min_in = 3, .max_in = 3, .n_out = 1, .attrs = "ignore_index:int classes:int",
        .dtypes = GD_FLOATS, .infer = infer_cross_entropy_grad, .ref = ref_cross_entropy_grad,
        .cases = cross_entropy_grad_cases, .mixed = cross_entropy_grad_mixed,
        .mixed_cases = cross_entropy_grad_mixed_cases, .ref_strided = 1, .tol = 1e-8, .reuse = 2,
        .doc = "cross_entropy_grad(dloss, logits, targets): (softmax(logits) - onehot) * dloss / count; bad "
               "targets as cross_entropy; dloss f32 for f16/bf16 logits (the mixed forms)"});
    gd_register_op(r, &(gd_op_def){
        .name = "cross_entropy_with_grad", .min_in = 3, .max_in = 3, .n_out = 2, .attrs = "ignore_index:int classes:int",
        .dtypes = GD_FLOATS, .infer = infer_cross_entropy_with_grad, .ref = ref_cross_entropy_with_grad,
        .cases = cross_entropy_with_grad_cases, .mixed = cross_entropy_with_grad_mixed,
        .mixed_cases = cross_entropy_with_grad_mixed_cases, .ref_strided = 1, .tol = 1e-8, .reuse = 2,
        .doc = "cross_entropy_with_grad(dloss, logits, targets) -> (dlogits, loss): cross_entropy_grad's output and "
               "cross_entropy's loss (in dloss's dtype) in one pass over the logits, as graph passes fuse the pair"});
    gd_register_op(r, &(gd_op_def){
        .name = "mse", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = "", .dtypes = GD_FLOATS,
        .infer = infer_mse, .grad = grad_mse, .ref = ref_mse, .cases = mse_cases,
        .ref_strided = 1, .tol = 1e-8, .doc = "mean((pred - target)^2) over every element, a scalar"});
}
