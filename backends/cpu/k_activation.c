/* k_activation.c — relu, gelu (erf and tanh forms), silu, sigmoid, tanh and their
 * backward ops (f32; f16 and bf16 through k_half.c).
 *
 * Definitions are in src/ops/activation.c, which computes in double and rounds once.
 * relu and the backward ops expressed through y (relu_grad, sigmoid_grad, tanh_grad) are
 * products and selections, computed here in the reference's double expression, so they
 * match it to the bit. The others use the vectorizable f32 functions of vmath.h, within a
 * few ulp of the reference (the ops' tolerance is 1e-10 normalized MSE, about 10 ulp);
 * each loop compiles to SIMD code. Work is split by element over the pool.
 */
#include "kernels.h"
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

static void act_task(void *ctx, int64_t begin, int64_t end, int tid)
{
    (void)tid;
    const act_job *j = ctx;
    const float *x = j->x + begin, *dy = j->dy + begin;
    float *y = j->y + begin;
    int64_t n = end - begin;
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

static gdp_status activation(const gdp_node *n, int op)
{
    int grad = n->n_in == 2;
    act_job j = {.op = op, .approx = (int)gdp_attr_int(&n->attrs, "approximate", 0), .x = n->in[grad ? 1 : 0]->data,
                 .dy = grad ? n->in[0]->data : NULL, .y = n->out[0]->data};
    /* the transcendental ones cost ~10x a relu an element: threads pay off sooner */
    int cheap = op == A_RELU || op == A_RELU_GRAD || op == A_SIGMOID_GRAD || op == A_TANH_GRAD;
    gcpu_parallel_for_grain(gdp_numel(n->out[0]), cheap ? GCPU_GRAIN_ELEMS : GCPU_GRAIN_ELEMS / 8, act_task, &j);
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
    GCPU_HALF_OF(k_##name, s_f32)
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

gdp_status gcpu_register_activation(const gdp_host *host, gdp_err *err)
{
#define K(name) {#name, k_##name, k_##name##_half, k_##name##_half_ok}
    static const struct {
        const char *op;
        gdp_launch_fn f32, half;
        gdp_supports_fn half_ok;
    } ks[] = {
        K(relu), K(relu_grad), K(gelu), K(gelu_grad), K(silu), K(silu_grad),
        K(sigmoid), K(sigmoid_grad), K(tanh), K(tanh_grad),
    };
#undef K
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        gdp_status s = gcpu_reg_floats(host, ks[i].op, ks[i].f32, s_f32, ks[i].half, ks[i].half_ok, NULL, err);
        if (s != GDP_OK) return s;
    }
    return GDP_OK;
}
