/* k_elementwise.c — f32 elementwise ops: add, sub, mul, div with NumPy broadcasting;
 * relu, relu_grad, neg, scale.
 *
 * Definitions are in src/ops/elementwise.c and activation.c. The reference computes in
 * double and rounds once; for +, -, *, / of two floats that is the same as the float
 * operation (double has more than twice float's precision), so these kernels match the
 * reference bit for bit. scale (x*s + bias with double attributes) is computed in double
 * for the same reason.
 *
 * Broadcasting: the output's dims are coalesced where every operand is contiguous across
 * them, leaving an inner run along which each operand steps by 1 or 0 (broadcast); rows
 * of that run are split over threads, or the run itself when it is the whole tensor.
 */
#include "kernels.h"

#include <string.h>

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV };

typedef struct bin_job {
    int op;
    const float *a, *b;
    float *y;
    int ndim;                       /* coalesced dims; the last is the inner run */
    int64_t shape[GDP_MAX_DIMS];
    int64_t sa[GDP_MAX_DIMS], sb[GDP_MAX_DIMS];
} bin_job;

/* y[0..n) = a[i*sa] op b[i*sb], sa and sb in {0, 1} */
static void bin_run(int op, const float *a, int64_t sa, const float *b, int64_t sb, float *y, int64_t n)
{
#define LOOPS(EXPR)                                                                  \
    if (sa == 1 && sb == 1) for (int64_t i = 0; i < n; i++) { float x = a[i], z = b[i]; y[i] = EXPR; } \
    else if (sa == 1) { float z = b[0]; for (int64_t i = 0; i < n; i++) { float x = a[i]; y[i] = EXPR; } } \
    else if (sb == 1) { float x = a[0]; for (int64_t i = 0; i < n; i++) { float z = b[i]; y[i] = EXPR; } } \
    else { float x = a[0], z = b[0]; for (int64_t i = 0; i < n; i++) y[i] = EXPR; }
    switch (op) {
    case OP_ADD: LOOPS(x + z); break;
    case OP_SUB: LOOPS(x - z); break;
    case OP_MUL: LOOPS(x * z); break;
    default: LOOPS(x / z); break;
    }
#undef LOOPS
}

/* Items are rows of the inner run (ndim > 1) or elements (ndim == 1). */
static void bin_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const bin_job *j = ctx;
    int last = j->ndim - 1;
    int64_t L = j->shape[last];
    if (j->ndim == 1) {
        bin_run(j->op, j->a + begin * j->sa[0], j->sa[0], j->b + begin * j->sb[0], j->sb[0], j->y + begin, end - begin);
        return;
    }
    for (int64_t r = begin; r < end; r++) {
        int64_t oa = 0, ob = 0, rem = r;
        for (int d = last - 1; d >= 0; d--) {
            int64_t c = rem % j->shape[d];
            rem /= j->shape[d];
            oa += c * j->sa[d];
            ob += c * j->sb[d];
        }
        bin_run(j->op, j->a + oa, j->sa[last], j->b + ob, j->sb[last], j->y + r * L, L);
    }
}

static gdp_status binary(const gdp_node *n, int op)
{
    const gdp_tensor *a = &n->in[0], *b = &n->in[1], *y = &n->out[0];
    int64_t count = gdp_numel(y);
    if (count == 0) return GDP_OK;
    /* strides of each operand along the output's dims: right-aligned, 0 where broadcast */
    int nd = y->ndim;
    int64_t shape[GDP_MAX_DIMS], sa[GDP_MAX_DIMS], sb[GDP_MAX_DIMS];
    const gdp_tensor *ops[2] = {a, b};
    int64_t *st[2] = {sa, sb};
    for (int k = 0; k < 2; k++) {
        int64_t s = 1;
        for (int d = nd - 1, e = ops[k]->ndim - 1; d >= 0; d--, e--) {
            int64_t dim = e >= 0 ? ops[k]->shape[e] : 1;
            st[k][d] = dim == 1 ? 0 : s;
            s *= dim;
        }
    }
    for (int d = 0; d < nd; d++) shape[d] = y->shape[d];
    /* coalesce from the inside out: dim d joins the run after it when both operands step
     * across the boundary as if it were one dim (size-1 dims always can) */
    bin_job j = {.op = op, .a = a->data, .b = b->data, .y = y->data, .ndim = 0};
    int64_t cs = 1, ca = 0, cb = 0;
    int have = 0;
    int64_t rs[GDP_MAX_DIMS], ra[GDP_MAX_DIMS], rb[GDP_MAX_DIMS];
    int nr = 0;
    for (int d = nd - 1; d >= 0; d--) {
        if (shape[d] == 1) continue;
        if (!have) {
            cs = shape[d], ca = sa[d], cb = sb[d];
            have = 1;
        } else if (sa[d] == ca * cs && sb[d] == cb * cs && (ca != 0 || sa[d] == 0) && (cb != 0 || sb[d] == 0) &&
                   ca <= 1 && cb <= 1) {
            cs *= shape[d]; /* still contiguous (or still broadcast) for both */
        } else {
            rs[nr] = cs, ra[nr] = ca, rb[nr] = cb, nr++;
            cs = shape[d], ca = sa[d], cb = sb[d];
        }
    }
    if (!have) cs = 1, ca = 0, cb = 0;
    rs[nr] = cs, ra[nr] = ca, rb[nr] = cb, nr++;
    /* rs[0] is the innermost run; put dims back in outer-to-inner order */
    j.ndim = nr;
    for (int i = 0; i < nr; i++) {
        j.shape[nr - 1 - i] = rs[i];
        j.sa[nr - 1 - i] = ra[i];
        j.sb[nr - 1 - i] = rb[i];
    }
    /* the inner run must step by 0 or 1; else fall back to runs of length 1 */
    if (j.sa[nr - 1] > 1 || j.sb[nr - 1] > 1) {
        if (nr == GDP_MAX_DIMS) return GDP_ERR_UNSUPPORTED;
        j.shape[nr] = 1, j.sa[nr] = 0, j.sb[nr] = 0;
        j.ndim = ++nr;
    }
    if (j.ndim == 1) {
        gcpu_parallel_for_grain(count, GCPU_GRAIN_ELEMS, bin_task, &j);
    } else {
        int64_t L = j.shape[j.ndim - 1];
        gcpu_parallel_for_grain(count / L, GCPU_GRAIN_ELEMS / L + 1, bin_task, &j);
    }
    return GDP_OK;
}

#define BINARY_KERNEL(name, OP)                                                            \
    static gdp_status k_##name(void *be, const gdp_node *n, void *stream, gdp_err *err)   \
    {                                                                                      \
        (void)be; (void)stream;                                                            \
        gdp_status s = binary(n, OP);                                                      \
        return s == GDP_OK ? s : gdp_fail(err, s, "%s: operand layout not handled", n->op); \
    }
BINARY_KERNEL(add, OP_ADD)
BINARY_KERNEL(sub, OP_SUB)
BINARY_KERNEL(mul, OP_MUL)
BINARY_KERNEL(div, OP_DIV)

/* ---- unary --------------------------------------------------------------------------------- */

enum { U_RELU, U_RELU_GRAD, U_NEG, U_SCALE };

typedef struct un_job {
    int op;
    const float *x, *v; /* v: relu_grad's second operand */
    float *y;
    double s, bias;
} un_job;

static void un_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const un_job *j = ctx;
    const float *x = j->x;
    float *y = j->y;
    switch (j->op) {
    case U_RELU:
        for (int64_t i = begin; i < end; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i]; /* NaN passes */
        break;
    case U_RELU_GRAD: /* dy where v > 0, else 0 (and 0 for a NaN v, as the reference) */
        for (int64_t i = begin; i < end; i++) y[i] = j->v[i] > 0.0f ? x[i] : 0.0f * x[i];
        break;
    case U_NEG:
        for (int64_t i = begin; i < end; i++) y[i] = -x[i];
        break;
    default: {
        double s = j->s, b = j->bias;
        for (int64_t i = begin; i < end; i++) y[i] = (float)((double)x[i] * s + b);
    }
    }
}

static gdp_status unary(const gdp_node *n, int op)
{
    un_job j = {.op = op, .x = n->in[0].data, .v = n->n_in > 1 ? n->in[1].data : NULL, .y = n->out[0].data};
    if (op == U_SCALE) {
        j.s = gdp_attr_float(&n->attrs, "s", 1.0);
        j.bias = gdp_attr_float(&n->attrs, "bias", 0.0);
    }
    gcpu_parallel_for_grain(gdp_numel(&n->out[0]), GCPU_GRAIN_ELEMS, un_task, &j);
    return GDP_OK;
}

#define UNARY_KERNEL(name, OP)                                                           \
    static gdp_status k_##name(void *be, const gdp_node *n, void *stream, gdp_err *err) \
    {                                                                                    \
        (void)be; (void)stream; (void)err;                                               \
        return unary(n, OP);                                                             \
    }
UNARY_KERNEL(relu, U_RELU)
UNARY_KERNEL(relu_grad, U_RELU_GRAD)
UNARY_KERNEL(neg, U_NEG)
UNARY_KERNEL(scale, U_SCALE)

static int s_f32(void *backend, const gdp_node *n)
{
    (void)backend;
    return gcpu_all_f32(n);
}

gdp_status gcpu_register_elementwise(const gdp_host *host, gdp_err *err)
{
    static const struct { const char *op; gdp_launch_fn fn; } ks[] = {
        {"add", k_add}, {"sub", k_sub}, {"mul", k_mul}, {"div", k_div},
        {"relu", k_relu}, {"relu_grad", k_relu_grad}, {"neg", k_neg}, {"scale", k_scale},
    };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        gdp_status s = gcpu_reg(host, ks[i].op, GDP_F32, ks[i].fn, s_f32, NULL, err);
        if (s != GDP_OK) return s;
    }
    return GDP_OK;
}
