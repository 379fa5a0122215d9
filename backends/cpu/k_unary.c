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
 * Operands have one shape: work is split by element over the pool. The kernels read
 * strided inputs (GDP_KERNEL_STRIDED): contiguous ones are run in flat ranges; views are
 * walked row by row (ewplan.h), gathered into small contiguous buffers, and run through
 * the same loops, so a view gives the bits its contiguous copy would.
 */
#include "ewplan.h"
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

// y[0..n) = op(x[0..n)) (backward ops: of dy and x)
static void un_f32(const un_job *j, const float *x, const float *dy, float *y, int64_t n)
{
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
    static void name(int op, const T *x, T *y, int64_t n)                                 \
    {                                                                                     \
        if (op == U_NEG)                                                                  \
            for (int64_t i = 0; i < n; i++) y[i] = (T)(0u - (U)x[i]);                     \
        else                                                                              \
            for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0 ? (T)(0u - (U)x[i]) : x[i];   \
    }
UN_INT(un_i32, int32_t, uint32_t)
UN_INT(un_i64, int64_t, uint64_t)

/* Elements [0, n) from x, dy (of the job's dtype) into y. */
static void un_run(const un_job *j, const void *x, const void *dy, void *y, int64_t n)
{
    if (j->dt == GDP_I32) un_i32(j->op, x, y, n);
    else if (j->dt == GDP_I64) un_i64(j->op, x, y, n);
    else un_f32(j, x, dy, y, n);
}

static void un_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const un_job *j = ctx;
    size_t es = gdp_dtype_size(j->dt);
    un_run(j, (const char *)j->x + (size_t)begin * es, j->dy != NULL ? (const char *)j->dy + (size_t)begin * es : NULL,
           (char *)j->y + (size_t)begin * es, end - begin);
}

/* ---- strided inputs ------------------------------------------------------------------------ */

#define GATHER 512 /* elements gathered at a time */

typedef struct un_strided {
    const un_job *j;
    gcpu_ewplan p; /* operands: x, then dy for the backward ops */
} un_strided;

static void un_row(const void *ctx, int64_t oy, const int64_t *off, int64_t n)
{
    const un_strided *u = ctx;
    const un_job *j = u->j;
    size_t es = gdp_dtype_size(j->dt);
    int in = u->p.ndim - 1;
    int64_t sx = u->p.st[0][in], sd = j->dy != NULL ? u->p.st[1][in] : 1;
    const char *x = (const char *)j->x + (size_t)off[0] * es;
    const char *dy = j->dy != NULL ? (const char *)j->dy + (size_t)off[1] * es : NULL;
    char *y = (char *)j->y + (size_t)oy * es;
    if (sx == 1 && sd == 1) {
        un_run(j, x, dy, y, n);
        return;
    }
    uint64_t xb[GATHER], db[GATHER]; /* room for GATHER elements of up to 8 bytes */
    for (int64_t i = 0; i < n; i += GATHER) {
        int64_t m = n - i < GATHER ? n - i : GATHER;
        gcpu_gather(xb, x + (size_t)(i * sx) * es, sx, es, m);
        if (dy != NULL) gcpu_gather(db, dy + (size_t)(i * sd) * es, sd, es, m);
        un_run(j, xb, dy != NULL ? db : NULL, y + (size_t)i * es, m);
    }
}

static void un_strided_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const un_strided *u = ctx;
    gcpu_ewplan_walk(&u->p, u->j->dy != NULL ? 2 : 1, begin, end, un_row, u);
}

static gdp_status unary(const gdp_node *n, int op)
{
    int grad = op == U_ABS_GRAD || op == U_CLAMP_GRAD;
    un_job j = {.op = op, .dt = n->out[0]->dtype, .x = n->in[grad ? 1 : 0]->data, .dy = grad ? n->in[0]->data : NULL,
                .y = n->out[0]->data};
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
    if (gdp_numel(n->out[0]) == 0) return GDP_OK;
    if (gcpu_inputs_contiguous(n)) {
        gcpu_parallel_for_grain(gdp_numel(n->out[0]), grain, un_task, &j);
        return GDP_OK;
    }
    un_strided u = {.j = &j};
    const gdp_tensor *ops[2] = {n->in[grad ? 1 : 0], n->in[0]};
    gcpu_ewplan_make(&u.p, n->out[0], grad ? 2 : 1, ops);
    gcpu_parallel_for_grain(gcpu_ewplan_items(&u.p), gcpu_ewplan_grain(&u.p, grain), un_strided_task, &u);
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
    GCPU_HALF_OF(k_##name, s_f32, NULL)
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
    return n->in[0]->dtype == GDP_I32 && n->out[0]->dtype == GDP_I32;
}
static int s_i64(void *backend, const gdp_node *n)
{
    (void)backend;
    return n->in[0]->dtype == GDP_I64 && n->out[0]->dtype == GDP_I64;
}

gdp_status gcpu_register_unary(gcpu_regctx *r, gdp_err *err)
{
#define K(op, name) {op, GCPU_FLOATS_INIT(k_##name, s_f32, NULL)}
    static const struct {
        const char *op;
        gcpu_floats k;
    } ks[] = {
        K("neg", neg), K("abs", abs), K("exp", exp), K("log", log), K("sqrt", sqrt), K("rsqrt", rsqrt),
        K("pow", pow), K("clamp", clamp), K("scale", scale), K("abs_grad", abs_grad), K("clamp_grad", clamp_grad),
    };
#undef K
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        gdp_status s = gcpu_reg_floats(r, ks[i].op, ks[i].k, GDP_KERNEL_STRIDED, NULL, err);
        if (s != GDP_OK) return s;
    }
    static const char *const ints[] = {"neg", "abs"};
    static const gdp_launch_fn int_fns[] = {k_neg, k_abs};
    for (size_t i = 0; i < 2; i++) {
        gdp_status s = gcpu_reg_flags(r, ints[i], GDP_I32, GDP_KERNEL_STRIDED, int_fns[i], s_i32, NULL, err);
        if (s == GDP_OK) s = gcpu_reg_flags(r, ints[i], GDP_I64, GDP_KERNEL_STRIDED, int_fns[i], s_i64, NULL, err);
        if (s != GDP_OK) return s;
    }
    return GDP_OK;
}
