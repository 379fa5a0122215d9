/* k_unary.c — the unary elementwise ops of src/ops/elementwise.c: neg, abs, exp, log,
 * sqrt, rsqrt, pow, clamp, scale, and the backward ops abs_grad, clamp_grad (f32; neg and
 * abs also i32 and i64; f16 and bf16 through k_half.c).
 *
 * The reference computes in double and rounds once. Where that is cheap to copy exactly
 * (sqrt, rsqrt, the comparisons of clamp against its double bounds, scale, the small
 * integer powers) these kernels compute the same double expression, vectorized, and match
 * it to the bit. exp and log use the f32 functions of vmath.h (within 1 ulp; the ops'
 * tolerance is 1e-10 normalized MSE, about 10 ulp). pow with any other exponent calls
 * libm's pow in double, as the reference does.
 *
 * Operands have one shape: work is split by element over the pool.
 */
#include "kernels.h"
#include "vmath.h"

#include <math.h>

enum { U_NEG, U_ABS, U_EXP, U_LOG, U_SQRT, U_RSQRT, U_POW, U_CLAMP, U_SCALE, U_ABS_GRAD, U_CLAMP_GRAD };

typedef struct un_job {
    int op;
    int32_t dt;          /* f32, or i32/i64 for neg and abs */
    const void *x, *dy;  /* dy: the backward ops' first operand (x is then their second) */
    void *y;
    double k0, k1;       /* p; lo, hi; s, bias */
} un_job;

/* pow(x, p) in double, for the exponents with an exact shortcut (the reference's pow
 * returns the correctly rounded value, which these are too), else libm. The
 * half-integer ones mind pow's special values: pow(-0, 0.5) = +0, pow(-inf, 0.5) = inf. */
static void pow_run(const float *x, float *y, int64_t n, double p)
{
    if (p == 0.0) {
        for (int64_t i = 0; i < n; i++) y[i] = 1.0f; /* also for NaN, as pow says */
    } else if (p == 1.0) {
        for (int64_t i = 0; i < n; i++) y[i] = x[i];
    } else if (p == 2.0) {
        for (int64_t i = 0; i < n; i++) y[i] = (float)((double)x[i] * x[i]);
    } else if (p == 3.0) {
        for (int64_t i = 0; i < n; i++) y[i] = (float)((double)x[i] * x[i] * x[i]);
    } else if (p == -1.0) {
        for (int64_t i = 0; i < n; i++) y[i] = (float)(1.0 / (double)x[i]);
    } else if (p == 0.5) {
        for (int64_t i = 0; i < n; i++) {
            double v = x[i], r = sqrt(v);
            r = v == 0.0 ? 0.0 : r;
            y[i] = (float)(v == -INFINITY ? INFINITY : r);
        }
    } else if (p == -0.5) {
        for (int64_t i = 0; i < n; i++) {
            double v = x[i], r = 1.0 / sqrt(v);
            r = v == 0.0 ? INFINITY : r;
            y[i] = (float)(v == -INFINITY ? 0.0 : r);
        }
    } else {
        for (int64_t i = 0; i < n; i++) y[i] = (float)pow((double)x[i], p);
    }
}

static void un_f32(const un_job *j, int64_t b, int64_t e)
{
    const float *x = (const float *)j->x + b, *dy = (const float *)j->dy + b;
    float *y = (float *)j->y + b;
    int64_t n = e - b;
    switch (j->op) {
    case U_NEG:
        for (int64_t i = 0; i < n; i++) y[i] = -x[i];
        break;
    case U_ABS: /* clears the sign bit, of a NaN too, as fabs */
        for (int64_t i = 0; i < n; i++) y[i] = gcpu_vm_f(gcpu_vm_u(x[i]) & 0x7fffffffu);
        break;
    case U_EXP:
        for (int64_t i = 0; i < n; i++) y[i] = gcpu_expf(x[i]);
        break;
    case U_LOG:
        for (int64_t i = 0; i < n; i++) y[i] = gcpu_logf(x[i]);
        break;
    case U_SQRT:
        for (int64_t i = 0; i < n; i++) y[i] = sqrtf(x[i]); /* correctly rounded, as the double one rounded */
        break;
    case U_RSQRT:
        for (int64_t i = 0; i < n; i++) y[i] = (float)(1.0 / sqrt((double)x[i]));
        break;
    case U_POW:
        pow_run(x, y, n, j->k0);
        break;
    case U_CLAMP: { /* max then min, compared in double against the double bounds */
        double lo = j->k0, hi = j->k1;
        for (int64_t i = 0; i < n; i++) {
            double v = x[i];
            v = v < lo ? lo : v;
            y[i] = (float)(v > hi ? hi : v);
        }
        break;
    }
    case U_SCALE: {
        double s = j->k0, bias = j->k1;
        for (int64_t i = 0; i < n; i++) y[i] = (float)((double)x[i] * s + bias);
        break;
    }
    case U_ABS_GRAD: /* dy * sign(x), sign(0) = sign(NaN) = 0 */
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? dy[i] : x[i] < 0.0f ? -dy[i] : 0.0f;
        break;
    default: { /* U_CLAMP_GRAD: dy where lo <= x <= hi, bounds included */
        double lo = j->k0, hi = j->k1;
        for (int64_t i = 0; i < n; i++) {
            double v = x[i];
            y[i] = ((v >= lo) & (v <= hi)) ? dy[i] : 0.0f;
        }
    }
    }
}

/* neg and abs of integers wrap (-INT_MIN is INT_MIN), through unsigned arithmetic */
#define UN_INT(name, T, U)                                                                \
    static void name(const un_job *j, int64_t b, int64_t e)                               \
    {                                                                                     \
        const T *x = (const T *)j->x;                                                     \
        T *y = (T *)j->y;                                                                 \
        if (j->op == U_NEG)                                                               \
            for (int64_t i = b; i < e; i++) y[i] = (T)(0u - (U)x[i]);                     \
        else                                                                              \
            for (int64_t i = b; i < e; i++) y[i] = x[i] < 0 ? (T)(0u - (U)x[i]) : x[i];   \
    }
UN_INT(un_i32, int32_t, uint32_t)
UN_INT(un_i64, int64_t, uint64_t)

static void un_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const un_job *j = ctx;
    if (j->dt == GDP_I32) un_i32(j, begin, end);
    else if (j->dt == GDP_I64) un_i64(j, begin, end);
    else un_f32(j, begin, end);
}

static gdp_status unary(const gdp_node *n, int op)
{
    int grad = op == U_ABS_GRAD || op == U_CLAMP_GRAD;
    un_job j = {.op = op, .dt = n->out[0].dtype, .x = n->in[grad ? 1 : 0].data, .dy = grad ? n->in[0].data : NULL,
                .y = n->out[0].data};
    if (op == U_POW) {
        j.k0 = gdp_attr_float(&n->attrs, "p", 1.0);
    } else if (op == U_CLAMP || op == U_CLAMP_GRAD) {
        j.k0 = gdp_attr_float(&n->attrs, "lo", -INFINITY);
        j.k1 = gdp_attr_float(&n->attrs, "hi", INFINITY);
    } else if (op == U_SCALE) {
        j.k0 = gdp_attr_float(&n->attrs, "s", 1.0);
        j.k1 = gdp_attr_float(&n->attrs, "bias", 0.0);
    }
    /* libm's pow costs tens of ns an element: worth threads much sooner */
    int64_t grain = op == U_POW ? GCPU_GRAIN_ELEMS / 16 : GCPU_GRAIN_ELEMS;
    gcpu_parallel_for_grain(gdp_numel(&n->out[0]), grain, un_task, &j);
    return GDP_OK;
}

static int s_f32(void *backend, const gdp_node *n)
{
    (void)backend;
    return gcpu_all_f32(n);
}

#define UNARY_KERNEL(name, OP)                                                           \
    static gdp_status k_##name(void *be, const gdp_node *n, void *stream, gdp_err *err) \
    {                                                                                    \
        (void)be; (void)stream; (void)err;                                               \
        return unary(n, OP);                                                             \
    }                                                                                    \
    GCPU_HALF_OF(k_##name, s_f32)
UNARY_KERNEL(neg, U_NEG)
UNARY_KERNEL(abs, U_ABS)
UNARY_KERNEL(exp, U_EXP)
UNARY_KERNEL(log, U_LOG)
UNARY_KERNEL(sqrt, U_SQRT)
UNARY_KERNEL(rsqrt, U_RSQRT)
UNARY_KERNEL(pow, U_POW)
UNARY_KERNEL(clamp, U_CLAMP)
UNARY_KERNEL(scale, U_SCALE)
UNARY_KERNEL(abs_grad, U_ABS_GRAD)
UNARY_KERNEL(clamp_grad, U_CLAMP_GRAD)

static int s_i32(void *backend, const gdp_node *n)
{
    (void)backend;
    return n->in[0].dtype == GDP_I32 && n->out[0].dtype == GDP_I32;
}
static int s_i64(void *backend, const gdp_node *n)
{
    (void)backend;
    return n->in[0].dtype == GDP_I64 && n->out[0].dtype == GDP_I64;
}

gdp_status gcpu_register_unary(const gdp_host *host, gdp_err *err)
{
#define K(op, name) {op, k_##name, k_##name##_half, k_##name##_half_ok}
    static const struct {
        const char *op;
        gdp_launch_fn f32, half;
        gdp_supports_fn half_ok;
    } ks[] = {
        K("neg", neg), K("abs", abs), K("exp", exp), K("log", log), K("sqrt", sqrt), K("rsqrt", rsqrt),
        K("pow", pow), K("clamp", clamp), K("scale", scale), K("abs_grad", abs_grad), K("clamp_grad", clamp_grad),
    };
#undef K
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        gdp_status s = gcpu_reg_floats(host, ks[i].op, ks[i].f32, s_f32, ks[i].half, ks[i].half_ok, NULL, err);
        if (s != GDP_OK) return s;
    }
    static const char *const ints[] = {"neg", "abs"};
    static const gdp_launch_fn int_fns[] = {k_neg, k_abs};
    for (size_t i = 0; i < 2; i++) {
        gdp_status s = gcpu_reg(host, ints[i], GDP_I32, int_fns[i], s_i32, NULL, err);
        if (s == GDP_OK) s = gcpu_reg(host, ints[i], GDP_I64, int_fns[i], s_i64, NULL, err);
        if (s != GDP_OK) return s;
    }
    return GDP_OK;
}
