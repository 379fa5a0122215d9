/* activation.c — relu, gelu (erf and tanh forms), silu, sigmoid, tanh, and one backward op
 * for each, so that a backend can run the backward pass of an activation as one kernel.
 * And swiglu, a gated MLP's silu(g) * u, as one op: its backward reads g and u, so silu(g)
 * is neither kept for the backward pass nor written at all.
 *
 * Reference kernels compute in double and round once. The backward ops take what makes
 * the derivative cheap: relu, gelu and silu need x; sigmoid and tanh are expressed through
 * their output y, which the forward pass has already computed.
 */
#include "cost.h"
#include "refwalk.h"

#include <math.h>
#include <string.h>

#define SQRT1_2 0.70710678118654752440       // 1/sqrt(2)
#define INV_SQRT_2PI 0.39894228040143267794  // 1/sqrt(2 pi)
#define SQRT_2_OVER_PI 0.79788456080286535588 // sqrt(2/pi)
#define GELU_C 0.044715                      // the cubic term of the tanh approximation

static int is_float(int32_t dt) { return dt == GDP_F32 || dt == GDP_F16 || dt == GDP_BF16 || dt == GDP_F64; }

/* ---- the functions ---------------------------------------------------------------------- */

/* Never forms exp of a large positive number: for x < -709, e^-x overflows and
 * 1/(1+e^-x) flushes to 0, while e^x/(1+e^x) keeps the tiny values. */
static double sigmoid(double x)
{
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

static double relu(double x, int approx) { return x < 0 ? 0.0 : x; } // NaN passes through
static double relu_d(double x, int approx) { return x > 0 ? 1.0 : 0.0; } // 0 at x = 0, as PyTorch

/* gelu(x) = x * Phi(x), Phi the standard normal CDF; or the tanh approximation
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static double gelu(double x, int approx)
{
    if (approx) return 0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + GELU_C * x * x * x)));
    return 0.5 * x * (1.0 + erf(x * SQRT1_2));
}

/* d/dx x Phi(x) = Phi(x) + x phi(x); for the tanh form with u = sqrt(2/pi)(x + c x^3),
 * t = tanh(u): 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 c x^2). */
static double gelu_d(double x, int approx)
{
    if (approx) {
        double t = tanh(SQRT_2_OVER_PI * (x + GELU_C * x * x * x));
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * x * x);
    }
    return 0.5 * (1.0 + erf(x * SQRT1_2)) + x * INV_SQRT_2PI * exp(-0.5 * x * x);
}

static double silu(double x, int approx) { return x * sigmoid(x); }
/* d/dx x s(x) = s + x s (1 - s) */
static double silu_d(double x, int approx)
{
    double s = sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
}

static double sigmoid_f(double x, int approx) { return sigmoid(x); }
static double sigmoid_dy(double y, int approx) { return y * (1.0 - y); } // in terms of y
static double tanh_f(double x, int approx) { return tanh(x); }
static double tanh_dy(double y, int approx) { return 1.0 - y * y; }        // in terms of y

/* ---- kernels ------------------------------------------------------------------------------ */

typedef double (*act_fn)(double x, int approx);

/* y = f(x); x may be strided */
static gdp_status forward_ref(const gdp_node *n, gdp_err *err, act_fn f)
{
    const gdp_tensor *x = n->in[0], *y = n->out[0];
    int approx = (int)gdp_attr_int(&n->attrs, "approximate", 0);
    int64_t count = gdp_numel(y);
    if (!is_float(y->dtype)) return gdp_fail(err, GDP_ERR_UNSUPPORTED, "dtype %d is not supported", (int)y->dtype);
    if (y->dtype == GDP_F32 && gdp_is_contiguous(x)) { // the training path of models run through the reference
        const float *px = x->data;
        float *py = y->data;
        for (int64_t i = 0; i < count; i++) py[i] = (float)f(px[i], approx);
        return GDP_OK;
    }
    rw_walk it;
    rw_begin(&it, y->ndim, y->shape);
    rw_add(&it, x);
    for (int64_t i = 0; i < count; i++, rw_next(&it)) rw_st(y, i, f(rw_ld(x, it.off[0]), approx));
    return GDP_OK;
}

/* dx = dy * f'(v), v being x or y as the op defines; dy and v have one shape and may be
 * strided. */
static gdp_status backward_ref(const gdp_node *n, gdp_err *err, act_fn fd)
{
    const gdp_tensor *dy = n->in[0], *v = n->in[1], *dx = n->out[0];
    int approx = (int)gdp_attr_int(&n->attrs, "approximate", 0);
    int64_t count = gdp_numel(dx);
    if (!is_float(dx->dtype)) return gdp_fail(err, GDP_ERR_UNSUPPORTED, "dtype %d is not supported", (int)dx->dtype);
    if (dx->dtype == GDP_F32 && gdp_is_contiguous(dy) && gdp_is_contiguous(v)) {
        const float *pdy = dy->data, *pv = v->data;
        float *pdx = dx->data;
        for (int64_t i = 0; i < count; i++) pdx[i] = (float)(pdy[i] * fd(pv[i], approx));
        return GDP_OK;
    }
    rw_walk it;
    rw_begin(&it, dx->ndim, dx->shape);
    rw_add(&it, dy);
    rw_add(&it, v);
    for (int64_t i = 0; i < count; i++, rw_next(&it)) rw_st(dx, i, rw_ld(dy, it.off[0]) * fd(rw_ld(v, it.off[1]), approx));
    return GDP_OK;
}

#define ACT_REFS(name, f, fd)                                                                  \
    static gdp_status ref_##name(void *be, const gdp_node *n, void *stream, gdp_err *err)      \
    {                                                                                          \
        return forward_ref(n, err, f);                                                         \
    }                                                                                          \
    static gdp_status ref_##name##_grad(void *be, const gdp_node *n, void *stream, gdp_err *err) \
    {                                                                                          \
        return backward_ref(n, err, fd);                                                       \
    }
ACT_REFS(relu, relu, relu_d)
ACT_REFS(gelu, gelu, gelu_d)
ACT_REFS(silu, silu, silu_d)
ACT_REFS(sigmoid, sigmoid_f, sigmoid_dy)
ACT_REFS(tanh, tanh_f, tanh_dy)

/* swiglu (g, u) -> y = silu(g) * u, and swiglu_grad (dy, g, u) -> dg = dy u silu'(g),
 * du = dy silu(g); operands may be strided */
static gdp_status ref_swiglu(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be, (void)stream;
    const int grad = n->n_in == 3;
    const gdp_tensor *g = n->in[grad], *u = n->in[grad + 1], *y = n->out[0];
    if (!is_float(y->dtype)) return gdp_fail(err, GDP_ERR_UNSUPPORTED, "dtype %d is not supported", (int)y->dtype);
    int64_t count = gdp_numel(y);
    rw_walk it;
    rw_begin(&it, y->ndim, y->shape);
    rw_add(&it, g);
    rw_add(&it, u);
    if (grad) rw_add(&it, n->in[0]);
    for (int64_t i = 0; i < count; i++, rw_next(&it)) {
        const double x = rw_ld(g, it.off[0]), v = rw_ld(u, it.off[1]);
        if (!grad) {
            rw_st(y, i, silu(x, 0) * v);
            continue;
        }
        const double d = rw_ld(n->in[0], it.off[2]);
        rw_st(y, i, d * v * silu_d(x, 0));
        rw_st(n->out[1], i, d * silu(x, 0));
    }
    return GDP_OK;
}

/* ---- shape rules --------------------------------------------------------------------------- */

static int check_approximate(gd_infer *c)
{
    int64_t a = gdp_attr_int(c->attrs, "approximate", 0);
    if (a == 0 || a == 1) return 0;
    return gd_infer_fail(c, "approximate must be 0 (erf form) or 1 (tanh form), got %lld", (long long)a);
}

static int infer_act(gd_infer *c)
{
    const gd_shape *x = &c->in[0];
    if (!is_float(x->dtype)) {
        char s[128];
        return gd_infer_fail(c, "x %s: dtype must be f32, f16, bf16 or f64", gd_shape_str(x, s, sizeof s));
    }
    if (check_approximate(c)) return 1;
    c->out[0] = *x;
    return 0;
}

/* (dy, v): one shape, one float dtype; v is x or y depending on the op. */
static int infer_act_grad(gd_infer *c)
{
    const gd_shape *dy = &c->in[0], *v = &c->in[1];
    const char *v_name = c->op != NULL && (strcmp(c->op, "sigmoid_grad") == 0 || strcmp(c->op, "tanh_grad") == 0)
                             ? "y" : "x";
    int same = dy->ndim == v->ndim && dy->dtype == v->dtype;
    for (int d = 0; same && d < dy->ndim; d++) same = dy->dim[d] == v->dim[d];
    char s1[128], s2[128];
    if (!is_float(dy->dtype))
        return gd_infer_fail(c, "dy %s: dtype must be f32, f16, bf16 or f64", gd_shape_str(dy, s1, sizeof s1));
    if (!same)
        return gd_infer_fail(c, "dy %s and %s %s must have the same shape and dtype", gd_shape_str(dy, s1, sizeof s1),
                             v_name, gd_shape_str(v, s2, sizeof s2));
    if (check_approximate(c)) return 1;
    c->out[0] = *dy;
    return 0;
}

/* swiglu (g, u) and swiglu_grad (dy, g, u): one shape, one float dtype. */
static int infer_swiglu(gd_infer *c)
{
    static const char *const names[] = {"dy", "g", "u"};
    const int grad = c->n_in == 3, first = grad ? 0 : 1;
    const gd_shape *a = &c->in[0];
    char s1[128], s2[128];
    if (!is_float(a->dtype))
        return gd_infer_fail(c, "%s %s: dtype must be f32, f16, bf16 or f64", names[first], gd_shape_str(a, s1, sizeof s1));
    for (int k = 1; k < c->n_in; k++) {
        const gd_shape *b = &c->in[k];
        int same = a->ndim == b->ndim && a->dtype == b->dtype;
        for (int d = 0; same && d < a->ndim; d++) same = a->dim[d] == b->dim[d];
        if (!same)
            return gd_infer_fail(c, "%s %s and %s %s must have the same shape and dtype", names[first],
                                 gd_shape_str(a, s1, sizeof s1), names[first + k], gd_shape_str(b, s2, sizeof s2));
    }
    c->out[0] = *a;
    if (grad) c->out[1] = *a;
    return 0;
}

/* ---- gradient rules -------------------------------------------------------------------------- */

/* The backward op reads (dy, x) or (dy, y); gelu hands its form on. */
static gd_status act_grad(gd_grad_ctx *c, const char *op, gd_tensor *v)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_attr a = gd_attr_i("approximate", gdp_attr_int(c->attrs, "approximate", 0));
    int is_gelu = strcmp(op, "gelu_grad") == 0;
    c->din[0] = gd_op2(c->dout[0], v, op, is_gelu ? 1 : 0, is_gelu ? &a : NULL);
    return c->din[0] != NULL ? GD_OK : GD_ERR_INVALID;
}
/* relu_grad reads the output, not the input: y > 0 exactly where x > 0, and keeping x out
 * of the backward graph leaves the producer of x with a single user, so a backend's graph
 * pass may fuse it with the relu (linear + relu -> linear_act) in training graphs too. */
static gd_status grad_relu(gd_grad_ctx *c) { return act_grad(c, "relu_grad", c->out[0]); }
static gd_status grad_gelu(gd_grad_ctx *c) { return act_grad(c, "gelu_grad", c->in[0]); }
static gd_status grad_silu(gd_grad_ctx *c) { return act_grad(c, "silu_grad", c->in[0]); }
static gd_status grad_sigmoid(gd_grad_ctx *c) { return act_grad(c, "sigmoid_grad", c->out[0]); }
static gd_status grad_tanh(gd_grad_ctx *c) { return act_grad(c, "tanh_grad", c->out[0]); }

static gd_status grad_swiglu(gd_grad_ctx *c)
{
    if (c->dout[0] == NULL) return GD_OK;
    gd_tensor *in[3] = {c->dout[0], c->in[0], c->in[1]}, *out[2] = {NULL, NULL};
    gd_status s = gd_op_multi(c->g, "swiglu_grad", 3, in, 0, NULL, 2, out);
    if (s != GD_OK) return s;
    c->din[0] = out[0];
    c->din[1] = out[1];
    return GD_OK;
}

/* ---- builders ---------------------------------------------------------------------------------- */

gd_tensor *gd_swiglu(gd_tensor *g, gd_tensor *u) { return gd_op2(g, u, "swiglu", 0, NULL); }

gd_tensor *gd_relu(gd_tensor *x) { return gd_op1(x, "relu", 0, NULL); }
gd_tensor *gd_silu(gd_tensor *x) { return gd_op1(x, "silu", 0, NULL); }
gd_tensor *gd_sigmoid(gd_tensor *x) { return gd_op1(x, "sigmoid", 0, NULL); }
gd_tensor *gd_tanh(gd_tensor *x) { return gd_op1(x, "tanh", 0, NULL); }

gd_tensor *gd_gelu(gd_tensor *x, int tanh_approximation)
{
    gd_attr a = gd_attr_i("approximate", tanh_approximation);
    return gd_op1(x, "gelu", 1, &a);
}

/* ---- registration -------------------------------------------------------------------------------- */

/* n[..] reaches the tails (|x| ~ 3) where the curves bend; relu's kink at 0 is hit with
 * probability ~0 by random inputs, so its cases stay in the gradient check. */
static const char *const act_cases[] = {"f[3,4]", "n[2,3,5]", "f[]", "n[64]", NULL};
static const char *const gelu_cases[] = {"n[3,4] | approximate=0", "n[3,4] | approximate=1", "f[2,5] | approximate=0",
                                         "f[] | approximate=1", "n[64] | approximate=0", NULL};
static const char *const act_grad_cases[] = {"f[3,4] f[3,4]", "n[2,3,5] n[2,3,5]", "f[] f[]", NULL};
static const char *const gelu_grad_cases[] = {"f[3,4] n[3,4] | approximate=0", "f[3,4] n[3,4] | approximate=1",
                                              "f[] f[] | approximate=0", NULL};
static const char *const swiglu_cases[] = {"n[3,4] n[3,4]", "n[2,3,40] f[2,3,40]", "f[] f[]", "n[5,136] n[5,136]", NULL};
static const char *const swiglu_grad_cases[] = {"f[3,4] n[3,4] n[3,4]", "f[2,3,40] n[2,3,40] f[2,3,40]", "f[] f[] f[]",
                                                "f[5,136] n[5,136] n[5,136]", NULL};
/* y of a sigmoid lies in (0, 1) */
static const char *const sigmoid_grad_cases[] = {"f[3,4] p[3,4]", "n[2,3,5] f[2,3,5]", "f[] f[]", NULL};

#define TOL 1e-10

#define ACT_DEF(op, attrs_, cases_, doc_)                                                                  \
    {.name = #op, .min_in = 1, .max_in = 1, .n_out = 1, .attrs = attrs_, .dtypes = GD_FLOATS, .infer = infer_act, \
     .grad = grad_##op, .ref = ref_##op, .cases = cases_, .tol = TOL, .ref_strided = 1, .doc = doc_}
#define ACT_GRAD_DEF(op, attrs_, cases_, doc_)                                                               \
    {.name = #op "_grad", .min_in = 2, .max_in = 2, .n_out = 1, .attrs = attrs_, .dtypes = GD_FLOATS,          \
     .infer = infer_act_grad, .ref = ref_##op##_grad, .cases = cases_, .tol = TOL, .ref_strided = 1, .doc = doc_}

GD_FAMILY(activation)
{
    static const gd_op_def defs[] = {
        ACT_DEF(relu, NULL, act_cases, "max(x, 0)"),
        ACT_GRAD_DEF(relu, NULL, act_grad_cases, "(dy, x) -> dy where x > 0, else 0"),
        ACT_DEF(gelu, "approximate:int", gelu_cases,
                "x * Phi(x) (approximate=0), or 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (approximate=1)"),
        ACT_GRAD_DEF(gelu, "approximate:int", gelu_grad_cases, "(dy, x) -> dy * gelu'(x), in the same form"),
        ACT_DEF(silu, NULL, act_cases, "x * sigmoid(x)"),
        ACT_GRAD_DEF(silu, NULL, act_grad_cases, "(dy, x) -> dy * s (1 + x (1 - s)), s = sigmoid(x)"),
        ACT_DEF(sigmoid, NULL, act_cases, "1 / (1 + e^-x)"),
        ACT_GRAD_DEF(sigmoid, NULL, sigmoid_grad_cases, "(dy, y) -> dy * y (1 - y), y = sigmoid(x)"),
        ACT_DEF(tanh, NULL, act_cases, "hyperbolic tangent"),
        ACT_GRAD_DEF(tanh, NULL, act_grad_cases, "(dy, y) -> dy * (1 - y^2), y = tanh(x)"),
        {.name = "swiglu", .min_in = 2, .max_in = 2, .n_out = 1, .dtypes = GD_FLOATS, .infer = infer_swiglu,
         .grad = grad_swiglu, .ref = ref_swiglu, .cases = swiglu_cases, .tol = TOL, .ref_strided = 1,
         .doc = "(g, u) -> silu(g) * u, a gated MLP's activation (SwiGLU); its gradient reads g and u"},
        {.name = "swiglu_grad", .min_in = 3, .max_in = 3, .n_out = 2, .dtypes = GD_FLOATS, .infer = infer_swiglu,
         .ref = ref_swiglu, .cases = swiglu_grad_cases, .tol = TOL, .ref_strided = 1,
         .doc = "(dy, g, u) -> (dy u silu'(g), dy silu(g))"},
    };
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++) {
        gd_op_def d = defs[i];
        d.cost = gd_cost_elementwise; /* every op here: one operation per output element */
        gd_register_op(r, &d);
    }
}
