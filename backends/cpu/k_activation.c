/* k_activation.c — relu, gelu (erf and tanh forms), silu, sigmoid, tanh and their
 * backward ops, and swiglu and its backward (f32; f16 and bf16 through k_half.c).
 *
 * Definitions are in src/ops/activation.c, which computes in double and rounds once.
 * relu and the backward ops expressed through y (relu_grad, sigmoid_grad, tanh_grad) are
 * products and selections, computed here in the reference's double expression, so they
 * match it to the bit. The others use the vectorizable f32 functions of vmath.h, within a
 * few ulp of the reference (the ops' tolerance is 1e-10 normalized MSE, about 10 ulp);
 * each loop compiles to SIMD code. Work is split by element over the pool. Strided inputs
 * (GDP_KERNEL_STRIDED) are walked row by row (ewplan.h) and gathered into small buffers
 * for the same loops, so a view gives the bits its contiguous copy would.
 */
#include "ewplan.h"
#include "vmath.h"

#define SQRT1_2 0.70710678118654752440f        /* 1/sqrt(2) */
#define INV_SQRT_2PI 0.39894228040143267794f   /* 1/sqrt(2 pi) */
#define SQRT_2_OVER_PI 0.79788456080286535588f /* sqrt(2/pi) */
#define GELU_C 0.044715f                       /* the cubic term of the tanh form */

enum { A_RELU, A_RELU_GRAD, A_GELU, A_GELU_GRAD, A_SILU, A_SILU_GRAD, A_SIGMOID, A_SIGMOID_GRAD, A_TANH, A_TANH_GRAD };

typedef struct act_job {
    int op, approx;
    const float *x, *dy; /* backward ops: dy, and x holds their second operand (x or y) */
    float *y;
} act_job;

// y[0..n) = op(x[0..n)) (backward ops: of dy and x)
static void act_run(const act_job *j, const float *x, const float *dy, float *y, int64_t n)
{
    switch (j->op) {
    case A_RELU:
        for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i]; /* NaN passes */
        break;
    case A_RELU_GRAD: /* dy * (y > 0 ? 1 : 0): a zero keeps dy's sign, NaN dy stays NaN */
        for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? dy[i] : 0.0f * dy[i];
        break;
    case A_GELU:
        if (j->approx) {
            for (int64_t i = 0; i < n; i++) {
                float v = x[i], u = SQRT_2_OVER_PI * (v + GELU_C * v * v * v);
                y[i] = 0.5f * v * (1.0f + gcpu_tanhf(u));
            }
        } else {
            for (int64_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + gcpu_erff(x[i] * SQRT1_2));
        }
        break;
    case A_GELU_GRAD:
        /* erf form: Phi(x) + x phi(x); tanh form with t = tanh(u):
         * 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 c x^2) */
        if (j->approx) {
            for (int64_t i = 0; i < n; i++) {
                float v = x[i], t = gcpu_tanhf(SQRT_2_OVER_PI * (v + GELU_C * v * v * v));
                float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * SQRT_2_OVER_PI * (1.0f + 3.0f * GELU_C * v * v);
                y[i] = dy[i] * d;
            }
        } else {
            for (int64_t i = 0; i < n; i++) {
                float v = x[i];
                float d = 0.5f * (1.0f + gcpu_erff(v * SQRT1_2)) + v * INV_SQRT_2PI * gcpu_expf(-0.5f * v * v);
                y[i] = dy[i] * d;
            }
        }
        break;
    case A_SILU:
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * gcpu_sigmoidf(x[i]);
        break;
    case A_SILU_GRAD: /* s (1 + x (1 - s)) */
        for (int64_t i = 0; i < n; i++) {
            float s = gcpu_sigmoidf(x[i]);
            y[i] = dy[i] * (s * (1.0f + x[i] * (1.0f - s)));
        }
        break;
    case A_SIGMOID:
        for (int64_t i = 0; i < n; i++) y[i] = gcpu_sigmoidf(x[i]);
        break;
    case A_SIGMOID_GRAD: /* dy * y (1 - y), y the forward output */
        for (int64_t i = 0; i < n; i++) {
            double v = x[i];
            y[i] = (float)((double)dy[i] * (v * (1.0 - v)));
        }
        break;
    case A_TANH:
        for (int64_t i = 0; i < n; i++) y[i] = gcpu_tanhf(x[i]);
        break;
    default: /* A_TANH_GRAD: dy * (1 - y^2) */
        for (int64_t i = 0; i < n; i++) {
            double v = x[i];
            y[i] = (float)((double)dy[i] * (1.0 - v * v));
        }
    }
}

static void act_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const act_job *j = ctx;
    act_run(j, j->x + begin, j->dy != NULL ? j->dy + begin : NULL, j->y + begin, end - begin);
}

/* ---- strided inputs ------------------------------------------------------------------------ */

#define GATHER 512 /* elements gathered at a time */

typedef struct act_strided {
    const act_job *j;
    gcpu_ewplan p; /* operands: x, then dy for the backward ops */
} act_strided;

static void act_row(const void *ctx, int64_t oy, const int64_t *off, int64_t n)
{
    const act_strided *u = ctx;
    const act_job *j = u->j;
    int in = u->p.ndim - 1;
    int64_t sx = u->p.st[0][in], sd = j->dy != NULL ? u->p.st[1][in] : 1;
    const float *x = j->x + off[0], *dy = j->dy != NULL ? j->dy + off[1] : NULL;
    float *y = j->y + oy;
    if (sx == 1 && sd == 1) {
        act_run(j, x, dy, y, n);
        return;
    }
    float xb[GATHER], db[GATHER];
    for (int64_t i = 0; i < n; i += GATHER) {
        int64_t m = n - i < GATHER ? n - i : GATHER;
        gcpu_gather(xb, x + i * sx, sx, sizeof(float), m);
        if (dy != NULL) gcpu_gather(db, dy + i * sd, sd, sizeof(float), m);
        act_run(j, xb, dy != NULL ? db : NULL, y + i, m);
    }
}

static void act_strided_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const act_strided *u = ctx;
    gcpu_ewplan_walk(&u->p, u->j->dy != NULL ? 2 : 1, begin, end, act_row, u);
}

static gdp_status activation(const gdp_node *n, int op)
{
    int grad = n->n_in == 2;
    act_job j = {.op = op, .approx = (int)gdp_attr_int(&n->attrs, "approximate", 0), .x = n->in[grad ? 1 : 0]->data,
                 .dy = grad ? n->in[0]->data : NULL, .y = n->out[0]->data};
    /* the transcendental ones cost ~10x a relu an element: threads pay off sooner */
    int cheap = op == A_RELU || op == A_RELU_GRAD || op == A_SIGMOID_GRAD || op == A_TANH_GRAD;
    int64_t grain = cheap ? GCPU_GRAIN_ELEMS : GCPU_GRAIN_ELEMS / 8;
    if (gdp_numel(n->out[0]) == 0) return GDP_OK;
    if (gcpu_inputs_contiguous(n)) {
        gcpu_parallel_for_grain(gdp_numel(n->out[0]), grain, act_task, &j);
        return GDP_OK;
    }
    act_strided u = {.j = &j};
    const gdp_tensor *ops[2] = {n->in[grad ? 1 : 0], n->in[0]};
    gcpu_ewplan_make(&u.p, n->out[0], grad ? 2 : 1, ops);
    gcpu_parallel_for_grain(gcpu_ewplan_items(&u.p), gcpu_ewplan_grain(&u.p, grain), act_strided_task, &u);
    return GDP_OK;
}

static int s_f32(void *backend, const gdp_node *n)
{
    (void)backend;
    return gcpu_all_f32(n);
}

#define ACT_KERNEL(name, OP)                                                             \
    static gdp_status k_##name(void *be, const gdp_node *n, void *stream, gdp_err *err) \
    {                                                                                    \
        (void)be; (void)stream; (void)err;                                               \
        return activation(n, OP);                                                        \
    }                                                                                    \
    GCPU_HALF_OF(k_##name, s_f32, NULL)
ACT_KERNEL(relu, A_RELU)
ACT_KERNEL(relu_grad, A_RELU_GRAD)
ACT_KERNEL(gelu, A_GELU)
ACT_KERNEL(gelu_grad, A_GELU_GRAD)
ACT_KERNEL(silu, A_SILU)
ACT_KERNEL(silu_grad, A_SILU_GRAD)
ACT_KERNEL(sigmoid, A_SIGMOID)
ACT_KERNEL(sigmoid_grad, A_SIGMOID_GRAD)
ACT_KERNEL(tanh, A_TANH)
ACT_KERNEL(tanh_grad, A_TANH_GRAD)

/* ---- swiglu: silu(g) * u, and (dy, g, u) -> (dg, du); contiguous operands ------------------- */

typedef struct swiglu_job {
    const float *dy, *g, *u;
    float *y, *du; /* y: the forward's output, or dg */
} swiglu_job;

static void swiglu_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const swiglu_job *j = ctx;
    const float *g = j->g, *u = j->u, *dy = j->dy;
    float *y = j->y, *du = j->du;
    if (dy == NULL) {
        for (int64_t i = begin; i < end; i++) y[i] = g[i] * gcpu_sigmoidf(g[i]) * u[i];
        return;
    }
    for (int64_t i = begin; i < end; i++) {
        float x = g[i], sg = gcpu_sigmoidf(x);
        du[i] = dy[i] * (x * sg);
        y[i] = dy[i] * u[i] * (sg * (1.0f + x * (1.0f - sg)));
    }
}

static gdp_status k_swiglu(void *be, const gdp_node *n, void *stream, gdp_err *err)
{
    (void)be; (void)stream; (void)err;
    const int grad = n->n_in == 3;
    swiglu_job j = {.dy = grad ? n->in[0]->data : NULL, .g = n->in[grad]->data, .u = n->in[grad + 1]->data,
                    .y = n->out[0]->data, .du = grad ? n->out[1]->data : NULL};
    gcpu_parallel_for_grain(gdp_numel(n->out[0]), GCPU_GRAIN_ELEMS / 8, swiglu_task, &j);
    return GDP_OK;
}
GCPU_HALF_OF(k_swiglu, s_f32, NULL)

gdp_status gcpu_register_activation(gcpu_regctx *r, gdp_err *err)
{
#define K(name) {#name, GCPU_FLOATS_INIT(k_##name, s_f32, NULL)}
    static const struct {
        const char *op;
        gcpu_floats k;
    } ks[] = {
        K(relu), K(relu_grad), K(gelu), K(gelu_grad), K(silu), K(silu_grad),
        K(sigmoid), K(sigmoid_grad), K(tanh), K(tanh_grad),
    };
#undef K
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        gdp_status s = gcpu_reg_floats(r, ks[i].op, ks[i].k, GDP_KERNEL_STRIDED, NULL, err);
        if (s != GDP_OK) return s;
    }
    /* strided operands reach them as the planner's contiguous copies */
    gdp_status s = gcpu_reg_floats(r, "swiglu", GCPU_FLOATS(k_swiglu, s_f32, NULL), 0, NULL, err);
    if (s == GDP_OK) s = gcpu_reg_floats(r, "swiglu_grad", GCPU_FLOATS(k_swiglu, s_f32, NULL), 0, NULL, err);
    return s;
}
