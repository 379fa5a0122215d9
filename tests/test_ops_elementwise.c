/* test_ops_elementwise.c — the elementwise, activation and cast families run through
 * programs on the CPU reference. Expected values are worked out by hand in the comments,
 * come from the closed forms written out here independently of the kernels (or from
 * libm), or are the IEEE bit patterns of the f16/bf16 results. Bad operands must fail
 * with a message naming the op and the shapes. */
#include "gradus.h"
#include "gradus_plugin.h"
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- running graphs ---------------------------------------------------------------------- */

typedef struct feed {
    gd_tensor *t;
    const void *data;
} feed;

static size_t bytes_of(gd_tensor *t) { return (size_t)gd_tensor_numel(t) * gd_dtype_size(gd_tensor_dtype(t)); }

/* Compiles the targets, writes the feeds, runs once, reads each target into outs[k].
 * 1 on success. */
static int run(gd_graph *g, int n_feed, const feed *feeds, int n_out, gd_tensor **targets, void **outs)
{
    for (int k = 0; k < n_out; k++) {
        if (targets[k] == NULL) {
            CHECK(0, "building failed: %s", gd_ctx_error(ctx));
            return 0;
        }
    }
    gd_program *p = gd_compile(g, n_out, targets, 0);
    if (p == NULL) {
        CHECK(0, "compile failed: %s", gd_ctx_error(ctx));
        return 0;
    }
    gd_status s = GD_OK;
    for (int k = 0; k < n_feed && s == GD_OK; k++) s = gd_tensor_write(feeds[k].t, feeds[k].data, bytes_of(feeds[k].t));
    CHECK(s == GD_OK, "write failed: %s", gd_ctx_error(ctx));
    if (s == GD_OK) s = gd_program_run(p);
    CHECK(s == GD_OK, "run failed: %s", gd_ctx_error(ctx));
    for (int k = 0; k < n_out && s == GD_OK; k++) s = gd_tensor_read(targets[k], outs[k], bytes_of(targets[k]));
    CHECK(s == GD_OK, "read failed: %s", gd_ctx_error(ctx));
    gd_program_free(p);
    return s == GD_OK;
}

static int run1(gd_graph *g, int n_feed, const feed *feeds, gd_tensor *y, void *out)
{
    return run(g, n_feed, feeds, 1, &y, &out);
}

/* f32 results against values computed in double: one f32 rounding of slack. */
static int close_f(float got, double want)
{
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == (float)want;
    return fabs((double)got - want) <= 1e-6 * fmax(1.0, fabs(want));
}

static void check_f32(const char *what, const float *got, const double *want, int n)
{
    for (int i = 0; i < n; i++) CHECK(close_f(got[i], want[i]), "%s[%d] = %.9g, want %.9g", what, i, got[i], want[i]);
}

/* ---- binary ops ------------------------------------------------------------------------------ */

static void test_binary_broadcast(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *a = in_f32(g, "a", 2, (int64_t[]){2, 3}, NULL), *b = in_f32(g, "b", 1, (int64_t[]){3}, NULL);
    gd_tensor *c = in_f32(g, "c", 2, (int64_t[]){2, 1}, NULL), *s = in_f32(g, "s", 0, NULL, NULL);
    const float va[6] = {1, 2, 3, 4, 5, 6}, vb[3] = {10, 20, 30}, vc[2] = {1, 2}, vs[1] = {2.5f};
    feed f[4] = {{a, va}, {b, vb}, {c, vc}, {s, vs}};
    float y[6];

    gd_tensor *add = gd_add(a, b); // rows of a plus b
    CHECK(add && gd_tensor_ndim(add) == 2 && gd_tensor_dim(add, 0) == 2 && gd_tensor_dim(add, 1) == 3, "add shape");
    if (run1(g, 4, f, add, y)) check_f32("add", y, (double[]){11, 22, 33, 14, 25, 36}, 6);
    // (2, 1) - (3): both operands are broadcast
    if (run1(g, 4, f, gd_sub(c, b), y)) check_f32("sub", y, (double[]){-9, -19, -29, -8, -18, -28}, 6);
    if (run1(g, 4, f, gd_sub(b, c), y)) check_f32("sub swapped", y, (double[]){9, 19, 29, 8, 18, 28}, 6);
    // a scalar on the left
    if (run1(g, 4, f, gd_mul(s, a), y)) check_f32("mul", y, (double[]){2.5, 5, 7.5, 10, 12.5, 15}, 6);
    if (run1(g, 4, f, gd_div(a, c), y)) check_f32("div", y, (double[]){1, 2, 3, 2, 2.5, 3}, 6);
    if (run1(g, 4, f, gd_div(s, b), y)) check_f32("div scalar", y, (double[]){0.25, 0.125, 2.5 / 30}, 3);
    gd_graph_free(g);
}

/* A 3-d broadcast of (2, 1, 4) and (3, 1) into (2, 3, 4), against explicit index math. */
static void test_broadcast_3d(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *a = in_f32(g, "a", 3, (int64_t[]){2, 1, 4}, NULL), *b = in_f32(g, "b", 2, (int64_t[]){3, 1}, NULL);
    float va[8], vb[3], y[24];
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++) va[i * 4 + k] = (float)(10 * i + k);
    for (int j = 0; j < 3; j++) vb[j] = (float)(100 * j);
    feed f[2] = {{a, va}, {b, vb}};
    gd_tensor *t = gd_add(a, b);
    CHECK(t && gd_tensor_ndim(t) == 3 && gd_tensor_dim(t, 1) == 3 && gd_tensor_dim(t, 2) == 4, "3-d broadcast shape");
    if (run1(g, 2, f, t, y))
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                for (int k = 0; k < 4; k++) {
                    float want = (float)(10 * i + k + 100 * j), got = y[(i * 3 + j) * 4 + k];
                    CHECK(got == want, "add (%d,%d,%d) = %g, want %g", i, j, k, got, want);
                }
    gd_graph_free(g);
}

static void test_division_special(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *a = in_f32(g, "a", 1, (int64_t[]){4}, NULL), *b = in_f32(g, "b", 1, (int64_t[]){4}, NULL);
    const float va[4] = {1, -3, 0, 5}, vb[4] = {0, 0, 0, -8};
    feed f[2] = {{a, va}, {b, vb}};
    float y[4];
    if (run1(g, 2, f, gd_div(a, b), y)) check_f32("div by zero", y, (double[]){INFINITY, -INFINITY, NAN, -0.625}, 4);
    gd_graph_free(g);
}

static void test_min_max(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *a = in_f32(g, "a", 1, (int64_t[]){5}, NULL), *b = in_f32(g, "b", 1, (int64_t[]){5}, NULL);
    const float va[5] = {1, 5, NAN, 2, -1}, vb[5] = {3, 2, 1, NAN, -1};
    feed f[2] = {{a, va}, {b, vb}};
    float y[5];
    // NaN in either operand propagates
    if (run1(g, 2, f, gd_minimum(a, b), y)) check_f32("minimum", y, (double[]){1, 2, NAN, NAN, -1}, 5);
    if (run1(g, 2, f, gd_maximum(a, b), y)) check_f32("maximum", y, (double[]){3, 5, NAN, NAN, -1}, 5);
    // broadcast against a scalar: relu-like and cap-like
    gd_tensor *z = in_f32(g, "z", 0, NULL, NULL);
    const float vz[1] = {0};
    feed f2[3] = {{a, va}, {b, vb}, {z, vz}};
    if (run1(g, 3, f2, gd_maximum(b, z), y)) check_f32("maximum scalar", y, (double[]){3, 2, 1, NAN, 0}, 5);
    gd_graph_free(g);
}

static void test_where(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *c = gd_input(g, "c", GD_BOOL, 1, (int64_t[]){3});
    gd_tensor *a = in_f32(g, "a", 2, (int64_t[]){2, 1}, NULL), *b = in_f32(g, "b", 0, NULL, NULL);
    const uint8_t vc[3] = {1, 0, 1};
    const float va[2] = {10, 20}, vb[1] = {-1};
    feed f[3] = {{c, vc}, {a, va}, {b, vb}};
    float y[6];
    gd_tensor *w = gd_where(c, a, b); // (3) (2, 1) () -> (2, 3)
    CHECK(w && gd_tensor_ndim(w) == 2 && gd_tensor_dim(w, 0) == 2 && gd_tensor_dim(w, 1) == 3, "where shape");
    CHECK(w && gd_tensor_dtype(w) == GD_F32, "where dtype");
    if (run1(g, 3, f, w, y)) check_f32("where", y, (double[]){10, -1, 10, 20, -1, 20}, 6);

    // integer payloads are copied exactly
    gd_tensor *ia = gd_input(g, "ia", GD_I64, 1, (int64_t[]){3}), *ib = gd_input(g, "ib", GD_I64, 1, (int64_t[]){3});
    const int64_t via[3] = {INT64_MAX, 1, -5}, vib[3] = {7, INT64_MIN, 9};
    feed fi[3] = {{c, vc}, {ia, via}, {ib, vib}};
    int64_t yi[3];
    if (run1(g, 3, fi, gd_where(c, ia, ib), yi))
        CHECK(yi[0] == INT64_MAX && yi[1] == INT64_MIN && yi[2] == -5, "where i64: %lld %lld %lld", (long long)yi[0],
              (long long)yi[1], (long long)yi[2]);
    gd_graph_free(g);
}

static void test_integers(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *a = gd_input(g, "a", GD_I32, 1, (int64_t[]){4}), *b = gd_input(g, "b", GD_I32, 0, NULL);
    const int32_t va[4] = {1, -7, INT32_MAX, INT32_MIN}, vb[1] = {1};
    feed f[2] = {{a, va}, {b, vb}};
    int32_t y[4];
    // add wraps like two's complement: INT32_MAX + 1 = INT32_MIN
    if (run1(g, 2, f, gd_add(a, b), y))
        CHECK(y[0] == 2 && y[1] == -6 && y[2] == INT32_MIN && y[3] == INT32_MIN + 1, "add i32: %d %d %d %d", y[0], y[1],
              y[2], y[3]);
    if (run1(g, 2, f, gd_sub(a, b), y))
        CHECK(y[0] == 0 && y[1] == -8 && y[2] == INT32_MAX - 1 && y[3] == INT32_MAX, "sub i32: %d %d %d %d", y[0], y[1],
              y[2], y[3]);
    if (run1(g, 2, f, gd_neg(a), y)) CHECK(y[0] == -1 && y[1] == 7 && y[2] == -INT32_MAX && y[3] == INT32_MIN, "neg i32");
    if (run1(g, 2, f, gd_abs(a), y)) CHECK(y[0] == 1 && y[1] == 7 && y[2] == INT32_MAX && y[3] == INT32_MIN, "abs i32");
    if (run1(g, 2, f, gd_minimum(a, b), y)) CHECK(y[0] == 1 && y[1] == -7 && y[2] == 1 && y[3] == INT32_MIN, "min i32");
    if (run1(g, 2, f, gd_maximum(a, b), y)) CHECK(y[0] == 1 && y[1] == 1 && y[2] == INT32_MAX && y[3] == 1, "max i32");

    // i64 beyond 2^53 stays exact (a double would round 2^53 + 1 away)
    gd_tensor *c = gd_input(g, "c", GD_I64, 1, (int64_t[]){2}), *d = gd_input(g, "d", GD_I64, 1, (int64_t[]){2});
    const int64_t big = (int64_t)1 << 53;
    const int64_t vc[2] = {big + 1, 3000000000}, vd[2] = {2, 3};
    feed fl[2] = {{c, vc}, {d, vd}};
    int64_t yl[2];
    if (run1(g, 2, fl, gd_add(c, d), yl)) CHECK(yl[0] == big + 3 && yl[1] == 3000000003, "add i64: %lld", (long long)yl[0]);
    if (run1(g, 2, fl, gd_mul(c, d), yl))
        CHECK(yl[0] == 2 * big + 2 && yl[1] == 9000000000, "mul i64: %lld %lld", (long long)yl[0], (long long)yl[1]);
    gd_graph_free(g);
}

/* f16 operands go through the core's f32 conversion around the reference kernel. */
static void test_half(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *a = gd_input(g, "a", GD_F16, 1, (int64_t[]){3}), *b = gd_input(g, "b", GD_F16, 1, (int64_t[]){3});
    const uint16_t va[3] = {0x3c00, 0x4000, 0xc200}, vb[3] = {0x3800, 0x3400, 0x3c00}; // {1, 2, -3} and {.5, .25, 1}
    feed f[2] = {{a, va}, {b, vb}};
    uint16_t y[3];
    // 1.5 = 0x3e00, 2.25 = 0x4080, -2 = 0xc000
    if (run1(g, 2, f, gd_add(a, b), y))
        CHECK(y[0] == 0x3e00 && y[1] == 0x4080 && y[2] == 0xc000, "add f16: %04x %04x %04x", y[0], y[1], y[2]);
    gd_graph_free(g);
}

/* ---- unary ops --------------------------------------------------------------------------------- */

static void test_unary(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = in_f32(g, "x", 1, (int64_t[]){5}, NULL);
    const float vx[5] = {-2, -0.5f, 0.25f, 1, 4};
    feed f[1] = {{x, vx}};
    float y[5];
    if (run1(g, 1, f, gd_neg(x), y)) check_f32("neg", y, (double[]){2, 0.5, -0.25, -1, -4}, 5);
    if (run1(g, 1, f, gd_abs(x), y)) check_f32("abs", y, (double[]){2, 0.5, 0.25, 1, 4}, 5);
    if (run1(g, 1, f, gd_exp(x), y)) check_f32("exp", y, (double[]){exp(-2), exp(-0.5), exp(0.25), M_E, exp(4)}, 5);
    if (run1(g, 1, f, gd_log(x), y)) check_f32("log", y, (double[]){NAN, NAN, -2 * M_LN2, 0, 2 * M_LN2}, 5);
    if (run1(g, 1, f, gd_sqrt(x), y)) check_f32("sqrt", y, (double[]){NAN, NAN, 0.5, 1, 2}, 5);
    if (run1(g, 1, f, gd_rsqrt(x), y)) check_f32("rsqrt", y, (double[]){NAN, NAN, 2, 1, 0.5}, 5);
    if (run1(g, 1, f, gd_pow_scalar(x, 2), y)) check_f32("pow 2", y, (double[]){4, 0.25, 0.0625, 1, 16}, 5);
    if (run1(g, 1, f, gd_pow_scalar(x, 3), y)) check_f32("pow 3", y, (double[]){-8, -0.125, 1.0 / 64, 1, 64}, 5);
    // a negative base with a fractional power has no real value
    if (run1(g, 1, f, gd_pow_scalar(x, 0.5), y)) check_f32("pow 0.5", y, (double[]){NAN, NAN, 0.5, 1, 2}, 5);
    if (run1(g, 1, f, gd_pow_scalar(x, -1), y)) check_f32("pow -1", y, (double[]){-0.5, -2, 4, 1, 0.25}, 5);
    if (run1(g, 1, f, gd_clamp(x, -0.5, 1), y)) check_f32("clamp", y, (double[]){-0.5, -0.5, 0.25, 1, 1}, 5);
    // lo > hi: max then min, so everything becomes hi (as PyTorch)
    if (run1(g, 1, f, gd_clamp(x, 1, -1), y)) check_f32("clamp lo>hi", y, (double[]){-1, -1, -1, -1, -1}, 5);
    if (run1(g, 1, f, gd_scale(x, 2, 1), y)) check_f32("scale", y, (double[]){-3, 0, 1.5, 3, 9}, 5);
    if (run1(g, 1, f, gd_scale(x, -0.5, 0), y)) check_f32("scale neg", y, (double[]){1, 0.25, -0.125, -0.5, -2}, 5);
    gd_graph_free(g);
}

/* ---- activations ----------------------------------------------------------------------------------- */

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static double gelu_tanh_d(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void test_activations(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = in_f32(g, "x", 1, (int64_t[]){5}, NULL);
    const float vx[5] = {-1, 0, 1, 2, -0.5f};
    feed f[1] = {{x, vx}};
    float y[5];
    if (run1(g, 1, f, gd_relu(x), y)) check_f32("relu", y, (double[]){0, 0, 1, 2, 0}, 5);
    // x Phi(x) with Phi(1) = 0.8413447460685429 (normal CDF tables), Phi(-1) = 1 - Phi(1)
    if (run1(g, 1, f, gd_gelu(x, 0), y)) {
        double want[5];
        for (int i = 0; i < 5; i++) want[i] = 0.5 * vx[i] * (1 + erf(vx[i] / sqrt(2.0)));
        CHECK(close_f(y[2], 0.8413447460685429) && close_f(y[0], -0.15865525393145707), "gelu(+-1) = %.9g %.9g", y[2], y[0]);
        check_f32("gelu", y, want, 5);
    }
    if (run1(g, 1, f, gd_gelu(x, 1), y)) {
        double want[5];
        for (int i = 0; i < 5; i++) want[i] = gelu_tanh_d(vx[i]);
        CHECK(close_f(y[2], 0.8411919906082768), "gelu tanh(1) = %.9g", y[2]);
        check_f32("gelu tanh", y, want, 5);
    }
    if (run1(g, 1, f, gd_silu(x), y)) {
        double want[5];
        for (int i = 0; i < 5; i++) want[i] = vx[i] * sigmoid_d(vx[i]);
        CHECK(close_f(y[2], 0.7310585786300049), "silu(1) = %.9g", y[2]);
        check_f32("silu", y, want, 5);
    }
    if (run1(g, 1, f, gd_sigmoid(x), y)) {
        double want[5];
        for (int i = 0; i < 5; i++) want[i] = sigmoid_d(vx[i]);
        CHECK(y[1] == 0.5f, "sigmoid(0) = %.9g", y[1]);
        check_f32("sigmoid", y, want, 5);
    }
    if (run1(g, 1, f, gd_tanh(x), y)) {
        double want[5];
        for (int i = 0; i < 5; i++) want[i] = (exp(2.0 * vx[i]) - 1) / (exp(2.0 * vx[i]) + 1);
        check_f32("tanh", y, want, 5);
    }
    // the tails: no NaN from inf/inf, saturation to exactly 0 and 1
    gd_tensor *t = in_f32(g, "t", 1, (int64_t[]){4}, NULL);
    const float vt[4] = {-1000, -100, 100, 1000};
    feed ft[1] = {{t, vt}};
    float yt[4];
    if (run1(g, 1, ft, gd_sigmoid(t), yt))
        CHECK(yt[0] == 0 && yt[1] >= 0 && yt[1] < 1e-40f && yt[2] == 1 && yt[3] == 1, "sigmoid tails %g %g %g %g",
              yt[0], yt[1], yt[2], yt[3]);
    if (run1(g, 1, ft, gd_silu(t), yt))
        CHECK(yt[0] == 0 && fabsf(yt[1]) < 1e-38f && yt[2] == 100 && yt[3] == 1000, "silu tails %g %g %g %g", yt[0], yt[1],
              yt[2], yt[3]);
    if (run1(g, 1, ft, gd_tanh(t), yt)) CHECK(yt[0] == -1 && yt[3] == 1, "tanh tails %g %g", yt[0], yt[3]);
    gd_graph_free(g);
}

/* The backward ops, called directly: dy * f'(x), with f' checked against closed forms or
 * a central difference of the forward formula written out here. */
static void test_activation_grads(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *dy = in_f32(g, "dy", 1, (int64_t[]){5}, NULL), *x = in_f32(g, "x", 1, (int64_t[]){5}, NULL);
    const float vdy[5] = {1, 2, 3, -1, 0.5f}, vx[5] = {-1, 0, 2, 1, -0.5f};
    feed f[2] = {{dy, vdy}, {x, vx}};
    gd_tensor *in[2] = {dy, x};
    float y[5];
    double want[5];

    // relu'(0) = 0
    if (run1(g, 2, f, gd_op(g, "relu_grad", 2, in, 0, NULL), y)) check_f32("relu_grad", y, (double[]){0, 0, 3, -1, 0}, 5);
    gd_attr exact = gd_attr_i("approximate", 0), approx = gd_attr_i("approximate", 1);
    // gelu'(x) = Phi(x) + x phi(x); at 1: 0.8413447460685429 + 0.24197072451914337
    if (run1(g, 2, f, gd_op(g, "gelu_grad", 2, in, 1, &exact), y)) {
        for (int i = 0; i < 5; i++)
            want[i] = vdy[i] * (0.5 * (1 + erf(vx[i] / sqrt(2.0))) + vx[i] * exp(-0.5 * vx[i] * vx[i]) / sqrt(2 * M_PI));
        CHECK(close_f(y[3], -1.0833154705876864), "gelu_grad(1) = %.9g", y[3]);
        check_f32("gelu_grad", y, want, 5);
    }
    if (run1(g, 2, f, gd_op(g, "gelu_grad", 2, in, 1, &approx), y)) {
        const double h = 1e-5;
        for (int i = 0; i < 5; i++) {
            double d = (gelu_tanh_d(vx[i] + h) - gelu_tanh_d(vx[i] - h)) / (2 * h);
            CHECK(fabs(y[i] - vdy[i] * d) < 1e-5, "gelu_grad tanh[%d] = %.9g, want %.9g", i, y[i], vdy[i] * d);
        }
    }
    // silu'(x) = s (1 + x (1 - s)); at 1: 0.9276705118714869
    if (run1(g, 2, f, gd_op(g, "silu_grad", 2, in, 0, NULL), y)) {
        for (int i = 0; i < 5; i++) {
            double s = sigmoid_d(vx[i]);
            want[i] = vdy[i] * s * (1 + vx[i] * (1 - s));
        }
        CHECK(close_f(y[3], -0.9276705118714869), "silu_grad(1) = %.9g", y[3]);
        check_f32("silu_grad", y, want, 5);
    }
    // in terms of the output y: sigmoid' = y (1 - y), tanh' = 1 - y^2
    gd_tensor *yy = in_f32(g, "y", 1, (int64_t[]){5}, NULL);
    const float vy[5] = {0.25f, 0.5f, 0.75f, 0, -0.5f};
    feed fy[2] = {{dy, vdy}, {yy, vy}};
    gd_tensor *iny[2] = {dy, yy};
    if (run1(g, 2, fy, gd_op(g, "sigmoid_grad", 2, iny, 0, NULL), y))
        check_f32("sigmoid_grad", y, (double[]){0.1875, 0.5, 0.5625, 0, -0.375}, 5);
    if (run1(g, 2, fy, gd_op(g, "tanh_grad", 2, iny, 0, NULL), y))
        check_f32("tanh_grad", y, (double[]){0.9375, 1.5, 1.3125, -1, 0.375}, 5);

    // the elementwise family's backward ops
    if (run1(g, 2, f, gd_op(g, "abs_grad", 2, in, 0, NULL), y)) check_f32("abs_grad", y, (double[]){-1, 0, 3, -1, -0.5}, 5);
    gd_attr lohi[2] = {gd_attr_f("lo", -0.5), gd_attr_f("hi", 1)}; // bounds included
    if (run1(g, 2, f, gd_op(g, "clamp_grad", 2, in, 2, lohi), y))
        check_f32("clamp_grad", y, (double[]){0, 2, 0, -1, 0.5}, 5);
    gd_graph_free(g);
}

static void test_minmax_grad_ops(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *dy = in_f32(g, "dy", 1, (int64_t[]){3}, NULL), *a = in_f32(g, "a", 1, (int64_t[]){3}, NULL);
    gd_tensor *b = in_f32(g, "b", 1, (int64_t[]){3}, NULL);
    const float vdy[3] = {1, 2, 3}, va[3] = {1, 2, 3}, vb[3] = {1, 5, 0};
    feed f[3] = {{dy, vdy}, {a, va}, {b, vb}};
    gd_tensor *in[3] = {dy, a, b}, *out[2];
    float da[3], db[3];
    // minimum picks a where a <= b (the tie at 0 goes to a): {a, a, b}
    if (gd_op_multi(g, "minimum_grad", 3, in, 0, NULL, 2, out) == GD_OK && run(g, 3, f, 2, out, (void *[]){da, db})) {
        check_f32("minimum_grad da", da, (double[]){1, 2, 0}, 3);
        check_f32("minimum_grad db", db, (double[]){0, 0, 3}, 3);
    } else CHECK(0, "minimum_grad: %s", gd_ctx_error(ctx));
    // maximum picks a where a >= b: {a, b, a}
    if (gd_op_multi(g, "maximum_grad", 3, in, 0, NULL, 2, out) == GD_OK && run(g, 3, f, 2, out, (void *[]){da, db})) {
        check_f32("maximum_grad da", da, (double[]){1, 0, 3}, 3);
        check_f32("maximum_grad db", db, (double[]){0, 2, 0}, 3);
    } else CHECK(0, "maximum_grad: %s", gd_ctx_error(ctx));
    gd_graph_free(g);
}

/* ---- autodiff through the gradient rules --------------------------------------------------------------- */

/* loss = sum(rule(a, b)); returns the gradients of the parameters a (2, 3) and b (3). */
static int grads_of(gd_tensor *(*rule)(gd_tensor *, gd_tensor *), const float *va, const float *vb, float *ga, float *gb)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *a = gd_param(g, "a", GD_F32, 2, (int64_t[]){2, 3}), *b = gd_param(g, "b", GD_F32, 1, (int64_t[]){3});
    gd_tensor *loss = gd_sum(rule(a, b), 0, NULL, 0);
    int ok = loss != NULL && gd_backward(g, loss) == GD_OK;
    CHECK(ok, "backward: %s", gd_ctx_error(ctx));
    if (ok) {
        gd_tensor *t[2] = {gd_grad(g, a), gd_grad(g, b)};
        CHECK(t[0] && t[1] && gd_tensor_ndim(t[0]) == 2 && gd_tensor_ndim(t[1]) == 1, "gradient shapes");
        feed f[2] = {{a, va}, {b, vb}};
        ok = t[0] && t[1] && run(g, 2, f, 2, t, (void *[]){ga, gb});
    }
    gd_graph_free(g);
    return ok;
}

static gd_tensor *rule_where(gd_tensor *a, gd_tensor *b)
{
    gd_graph *g = gd_tensor_graph(a);
    gd_tensor *c = gd_input(g, "cond", GD_BOOL, 2, (int64_t[]){2, 1});
    static const uint8_t vc[2] = {1, 0};
    gd_tensor_write(c, vc, sizeof vc); // read in the graph's only run
    return gd_where(c, a, b);
}

static void test_autodiff(void)
{
    const float va[6] = {1, 2, 3, 4, 5, 6}, vb[3] = {2, 5, -1};
    float ga[6], gb[3];
    // d/da sum(a + b) = 1; d/db = number of rows b was broadcast over = 2
    if (grads_of(gd_add, va, vb, ga, gb)) {
        check_f32("add da", ga, (double[]){1, 1, 1, 1, 1, 1}, 6);
        check_f32("add db", gb, (double[]){2, 2, 2}, 3);
    }
    if (grads_of(gd_sub, va, vb, ga, gb)) check_f32("sub db", gb, (double[]){-2, -2, -2}, 3);
    // d/da sum(a * b) = b in every row; d/db = column sums of a
    if (grads_of(gd_mul, va, vb, ga, gb)) {
        check_f32("mul da", ga, (double[]){2, 5, -1, 2, 5, -1}, 6);
        check_f32("mul db", gb, (double[]){5, 7, 9}, 3);
    }
    // d/da sum(a / b) = 1 / b; d/db = -sum_rows(a) / b^2
    if (grads_of(gd_div, va, vb, ga, gb)) {
        check_f32("div da", ga, (double[]){0.5, 0.2, -1, 0.5, 0.2, -1}, 6);
        check_f32("div db", gb, (double[]){-5.0 / 4, -7.0 / 25, -9.0}, 3);
    }
    // a = (1 2 3; 4 5 6) against b = (2 5 -1): minimum picks a at (0,0), (0,1) and the tie
    // (1,1); maximum picks b at (0,0), (0,1), and a elsewhere, the tie included
    if (grads_of(gd_minimum, va, vb, ga, gb)) {
        check_f32("minimum da", ga, (double[]){1, 1, 0, 0, 1, 0}, 6);
        check_f32("minimum db", gb, (double[]){1, 0, 2}, 3);
    }
    if (grads_of(gd_maximum, va, vb, ga, gb)) {
        check_f32("maximum da", ga, (double[]){0, 0, 1, 1, 1, 1}, 6);
        check_f32("maximum db", gb, (double[]){1, 1, 0}, 3);
    }
    // where with cond (1; 0): row 0 from a, row 1 from b
    if (grads_of(rule_where, va, vb, ga, gb)) {
        check_f32("where da", ga, (double[]){1, 1, 1, 0, 0, 0}, 6);
        check_f32("where db", gb, (double[]){1, 1, 1}, 3);
    }
}

/* Unary gradient rules, d/dx sum(f(x)), against the derivatives by hand. */
static void test_autodiff_unary(void)
{
    const float vx[4] = {0.25f, 1, 2, 4};
    struct { const char *name; double want[4]; } cases[] = {
        {"exp", {0, 0, 0, 0}},     // e^x, filled below
        {"log", {4, 1, 0.5, 0.25}},
        {"sqrt", {1, 0.5, 0.5 / M_SQRT2, 0.25}},
        {"rsqrt", {-4, -0.5, -0.5 / (2 * M_SQRT2), -1.0 / 16}},
        {"pow3", {3.0 / 16, 3, 12, 48}},
        {"pow0", {0, 0, 0, 0}},
        {"clamp", {0, 1, 1, 0}},   // clamp to [0.5, 2]: 1 is inside, 2 on the bound
        {"scale", {-3, -3, -3, -3}},
        {"abs", {1, 1, 1, 1}},
        {"neg", {-1, -1, -1, -1}},
        {"tanh", {0, 0, 0, 0}},    // 1 - tanh^2, filled below
        {"sigmoid", {0, 0, 0, 0}}, // s (1 - s), filled below
        {"cast", {1, 1, 1, 1}},    // through f64 and back
    };
    for (int i = 0; i < 4; i++) {
        cases[0].want[i] = exp(vx[i]);
        cases[10].want[i] = 1 - tanh(vx[i]) * tanh(vx[i]);
        cases[11].want[i] = sigmoid_d(vx[i]) * (1 - sigmoid_d(vx[i]));
    }
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        gd_graph *g = gd_graph_new(ctx);
        gd_tensor *x = gd_param(g, "x", GD_F32, 1, (int64_t[]){4}), *y = NULL;
        const char *n = cases[k].name;
        if (!strcmp(n, "exp")) y = gd_exp(x);
        else if (!strcmp(n, "log")) y = gd_log(x);
        else if (!strcmp(n, "sqrt")) y = gd_sqrt(x);
        else if (!strcmp(n, "rsqrt")) y = gd_rsqrt(x);
        else if (!strcmp(n, "pow3")) y = gd_pow_scalar(x, 3);
        else if (!strcmp(n, "pow0")) y = gd_pow_scalar(x, 0);
        else if (!strcmp(n, "clamp")) y = gd_clamp(x, 0.5, 2);
        else if (!strcmp(n, "scale")) y = gd_scale(x, -3, 7);
        else if (!strcmp(n, "abs")) y = gd_abs(x);
        else if (!strcmp(n, "neg")) y = gd_neg(x);
        else if (!strcmp(n, "tanh")) y = gd_tanh(x);
        else if (!strcmp(n, "sigmoid")) y = gd_sigmoid(x);
        else y = gd_cast(gd_cast(x, GD_F64), GD_F32);
        gd_tensor *loss = gd_sum(y, 0, NULL, 0);
        if (loss == NULL || gd_backward(g, loss) != GD_OK) {
            CHECK(0, "%s backward: %s", n, gd_ctx_error(ctx));
        } else {
            gd_tensor *gx = gd_grad(g, x);
            feed f[1] = {{x, vx}};
            float got[4];
            CHECK(gx && gd_tensor_dtype(gx) == GD_F32, "%s: gradient missing or not f32", n);
            if (gx && run1(g, 1, f, gx, got)) check_f32(n, got, cases[k].want, 4);
        }
        gd_graph_free(g);
    }
}

/* ---- cast ------------------------------------------------------------------------------------------------ */

static void test_cast(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = in_f32(g, "x", 1, (int64_t[]){8}, NULL);
    const float vx[8] = {-1.7f, -0.5f, 0, 0.5f, 2.9f, 1e10f, -1e10f, NAN};
    feed f[1] = {{x, vx}};
    // truncation toward zero, saturation at the range, NaN -> 0
    int32_t i32[8];
    if (run1(g, 1, f, gd_cast(x, GD_I32), i32)) {
        const int32_t want[8] = {-1, 0, 0, 0, 2, INT32_MAX, INT32_MIN, 0};
        for (int i = 0; i < 8; i++) CHECK(i32[i] == want[i], "f32->i32[%d] = %d, want %d", i, i32[i], want[i]);
    }
    uint8_t u8[8];
    if (run1(g, 1, f, gd_cast(x, GD_U8), u8)) {
        const uint8_t want[8] = {0, 0, 0, 0, 2, 255, 0, 0};
        for (int i = 0; i < 8; i++) CHECK(u8[i] == want[i], "f32->u8[%d] = %d, want %d", i, u8[i], want[i]);
    }
    int8_t i8[8];
    if (run1(g, 1, f, gd_cast(x, GD_I8), i8)) {
        const int8_t want[8] = {-1, 0, 0, 0, 2, 127, -128, 0};
        for (int i = 0; i < 8; i++) CHECK(i8[i] == want[i], "f32->i8[%d] = %d, want %d", i, i8[i], want[i]);
    }
    int64_t i64[8];
    if (run1(g, 1, f, gd_cast(x, GD_I64), i64))
        CHECK(i64[0] == -1 && i64[4] == 2 && i64[5] == 10000000000 && i64[6] == -10000000000 && i64[7] == 0,
              "f32->i64 %lld %lld", (long long)i64[5], (long long)i64[6]);
    // x != 0, NaN included
    uint8_t bl[8];
    if (run1(g, 1, f, gd_cast(x, GD_BOOL), bl)) {
        const uint8_t want[8] = {1, 1, 0, 1, 1, 1, 1, 1};
        for (int i = 0; i < 8; i++) CHECK(bl[i] == want[i], "f32->bool[%d] = %d", i, bl[i]);
    }
    double f64[8];
    if (run1(g, 1, f, gd_cast(x, GD_F64), f64))
        for (int i = 0; i < 7; i++) CHECK(f64[i] == (double)vx[i], "f32->f64[%d] = %.17g", i, f64[i]);

    // f16 bit patterns: 1 = 0x3c00, -2 = 0xc000, 65504 = 0x7bff (largest), 1e5 overflows to
    // inf 0x7c00, 1/3 = 0x3555 (0x3555.55.. rounds down), 2^-24 = 0x0001 (smallest subnormal),
    // 1 + 2^-11 is a tie between 0x3c00 and 0x3c01 and goes to the even 0x3c00, and
    // 1 + 3 * 2^-11 is a tie going up to the even 0x3c02
    gd_tensor *h = in_f32(g, "h", 1, (int64_t[]){8}, NULL);
    const float vh[8] = {1, -2, 65504, 1e5f, 1.0f / 3, 0x1p-24f, 1 + 0x1p-11f, 1 + 3 * 0x1p-11f};
    feed fh[1] = {{h, vh}};
    uint16_t b16[8];
    if (run1(g, 1, fh, gd_cast(h, GD_F16), b16)) {
        const uint16_t want[8] = {0x3c00, 0xc000, 0x7bff, 0x7c00, 0x3555, 0x0001, 0x3c00, 0x3c02};
        for (int i = 0; i < 8; i++) CHECK(b16[i] == want[i], "f32->f16[%d] = %04x, want %04x", i, b16[i], want[i]);
    }
    // bf16 keeps the top 16 bits of f32, rounded: 1 = 0x3f80, -2 = 0xc000, 65504 rounds to
    // 65536 = 0x4780, 1e5 = 0x47c3 (0x47c35000 rounds down), 1/3 = 0x3eab (0x3eaaaaab rounds
    // up), 2^-24 = 0x3380, and 1 + 2^-11 is far below bf16's half step (2^-8): 0x3f80
    if (run1(g, 1, fh, gd_cast(h, GD_BF16), b16)) {
        const uint16_t want[8] = {0x3f80, 0xc000, 0x4780, 0x47c3, 0x3eab, 0x3380, 0x3f80, 0x3f80};
        for (int i = 0; i < 8; i++) CHECK(b16[i] == want[i], "f32->bf16[%d] = %04x, want %04x", i, b16[i], want[i]);
    }

    // f16 in: 0xc0e0 = -2.4375 -> -2; 0x3c00 -> bf16 0x3f80; 0x7c00 (inf) -> f32 inf
    gd_tensor *hx = gd_input(g, "hx", GD_F16, 1, (int64_t[]){3});
    const uint16_t vhx[3] = {0xc0e0, 0x3c00, 0x7c00};
    feed fhx[1] = {{hx, vhx}};
    int32_t hi[3];
    if (run1(g, 1, fhx, gd_cast(hx, GD_I32), hi)) CHECK(hi[0] == -2 && hi[1] == 1 && hi[2] == INT32_MAX, "f16->i32");
    if (run1(g, 1, fhx, gd_cast(hx, GD_BF16), b16)) CHECK(b16[0] == 0xc01c && b16[1] == 0x3f80 && b16[2] == 0x7f80, "f16->bf16 %04x", b16[0]);
    float hf[3];
    if (run1(g, 1, fhx, gd_cast(hx, GD_F32), hf)) CHECK(hf[0] == -2.4375f && hf[1] == 1 && isinf(hf[2]), "f16->f32");

    // integers: i32 -> i8 wraps modulo 256 (300 -> 44, -129 -> 127, 128 -> -128)
    gd_tensor *ix = gd_input(g, "ix", GD_I32, 1, (int64_t[]){4});
    const int32_t vix[4] = {300, -129, 128, -1};
    feed fix[1] = {{ix, vix}};
    if (run1(g, 1, fix, gd_cast(ix, GD_I8), i8))
        CHECK(i8[0] == 44 && i8[1] == 127 && i8[2] == -128 && i8[3] == -1, "i32->i8 %d %d %d %d", i8[0], i8[1], i8[2], i8[3]);
    if (run1(g, 1, fix, gd_cast(ix, GD_U8), u8))
        CHECK(u8[0] == 44 && u8[1] == 127 && u8[2] == 128 && u8[3] == 255, "i32->u8 %d %d %d %d", u8[0], u8[1], u8[2], u8[3]);
    // i64 -> i32 keeps the low 32 bits; i64 -> f64 rounds 2^53 + 1 to 2^53 (ties to even);
    // i64 -> f32 rounds 2^24 + 1 to 2^24
    gd_tensor *lx = gd_input(g, "lx", GD_I64, 1, (int64_t[]){3});
    const int64_t vlx[3] = {((int64_t)1 << 32) + 5, ((int64_t)1 << 53) + 1, (1 << 24) + 1};
    feed flx[1] = {{lx, vlx}};
    if (run1(g, 1, flx, gd_cast(lx, GD_I32), i32)) CHECK(i32[0] == 5 && i32[2] == (1 << 24) + 1, "i64->i32 %d", i32[0]);
    if (run1(g, 1, flx, gd_cast(lx, GD_F64), f64)) CHECK(f64[1] == 0x1p53 && f64[2] == 16777217.0, "i64->f64 %.17g", f64[1]);
    float fl[3];
    if (run1(g, 1, flx, gd_cast(lx, GD_F32), fl)) CHECK(fl[2] == 16777216.0f && fl[0] == 4294967296.0f, "i64->f32 %.9g", fl[2]);

    // bool: any non-zero byte is true, and true becomes 1
    gd_tensor *bx = gd_input(g, "bx", GD_BOOL, 1, (int64_t[]){3});
    const uint8_t vbx[3] = {0, 1, 2};
    feed fbx[1] = {{bx, vbx}};
    if (run1(g, 1, fbx, gd_cast(bx, GD_F32), fl)) CHECK(fl[0] == 0 && fl[1] == 1 && fl[2] == 1, "bool->f32");
    if (run1(g, 1, fbx, gd_cast(bx, GD_I64), i64)) CHECK(i64[0] == 0 && i64[1] == 1 && i64[2] == 1, "bool->i64");
    if (run1(g, 1, fbx, gd_cast(bx, GD_BF16), b16)) CHECK(b16[0] == 0 && b16[1] == 0x3f80 && b16[2] == 0x3f80, "bool->bf16");

    // shape and dtype of the result
    gd_tensor *c = gd_cast(gd_input(g, "m", GD_F32, 3, (int64_t[]){2, 3, 4}), GD_BF16);
    CHECK(c && gd_tensor_dtype(c) == GD_BF16 && gd_tensor_ndim(c) == 3 && gd_tensor_dim(c, 2) == 4, "cast shape");
    gd_graph_free(g);
}

/* ---- errors ------------------------------------------------------------------------------------------------- */

/* The builder must return NULL and leave a message containing every one of the words. */
static void expect_error_words(gd_tensor *t, const char *what, const char *w1, const char *w2, const char *w3)
{
    const char *m = gd_ctx_error(ctx);
    CHECK(t == NULL, "%s: should have failed", what);
    const char *words[3] = {w1, w2, w3};
    for (int i = 0; i < 3; i++)
        if (words[i] != NULL) CHECK(strstr(m, words[i]) != NULL, "%s: message \"%s\" lacks \"%s\"", what, m, words[i]);
    gd_ctx_clear_error(ctx);
}

static void test_errors(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *a = in_f32(g, "a", 2, (int64_t[]){2, 3}, NULL), *b = in_f32(g, "b", 1, (int64_t[]){4}, NULL);
    gd_tensor *h = gd_input(g, "h", GD_F16, 2, (int64_t[]){2, 3}), *i = gd_input(g, "i", GD_I32, 1, (int64_t[]){3});
    gd_tensor *u = gd_input(g, "u", GD_U8, 1, (int64_t[]){3});
    gd_ctx_clear_error(ctx);

    expect_error_words(gd_add(a, b), "add shapes", "add", "[2, 3]", "[4]");
    expect_error_words(gd_maximum(b, a), "maximum shapes", "maximum", "[4]", "[2, 3]");
    expect_error_words(gd_mul(a, h), "mul dtypes", "mul", "f32[2, 3]", "f16[2, 3]");
    expect_error_words(gd_div(i, i), "div on integers", "div", "i32[3]", NULL);
    expect_error_words(gd_add(u, u), "add on u8", "add", "u8[3]", NULL);
    expect_error_words(gd_exp(i), "exp on integers", "exp", "i32[3]", NULL);
    expect_error_words(gd_relu(i), "relu on integers", "relu", "i32[3]", NULL);
    expect_error_words(gd_where(a, a, a), "where cond dtype", "where", "cond", "bool");
    gd_tensor *c = gd_input(g, "c", GD_BOOL, 1, (int64_t[]){3});
    expect_error_words(gd_where(c, a, h), "where a/b dtypes", "where", "f32[2, 3]", "f16[2, 3]");
    expect_error_words(gd_where(c, a, b), "where shapes", "where", "[2, 3]", "[4]");
    expect_error_words(gd_where(gd_input(g, "c2", GD_BOOL, 1, (int64_t[]){2}), a, a), "where cond shape", "where", "[2]",
                 "[2, 3]");
    expect_error_words(gd_gelu(a, 2), "gelu form", "gelu", "approximate", "2");
    expect_error_words(gd_cast(a, (gd_dtype)42), "cast dtype", "cast", "42", NULL);
    expect_error_words(gd_op(g, "cast", 1, &a, 0, NULL), "cast without dtype", "cast", "dtype", NULL);
    gd_tensor *in[2] = {a, gd_input(g, "x3", GD_F32, 1, (int64_t[]){3})};
    expect_error_words(gd_op(g, "relu_grad", 2, in, 0, NULL), "relu_grad shapes", "relu_grad", "[2, 3]", "[3]");
    gd_tensor *in3[3] = {gd_input(g, "dy", GD_F32, 1, (int64_t[]){3}), a, a};
    gd_tensor *out[2];
    gd_status s = gd_op_multi(g, "minimum_grad", 3, in3, 0, NULL, 2, out);
    CHECK(s != GD_OK && strstr(gd_ctx_error(ctx), "minimum_grad") && strstr(gd_ctx_error(ctx), "[2, 3]"),
          "minimum_grad dy shape: %s", gd_ctx_error(ctx));
    gd_ctx_clear_error(ctx);
    gd_attr bad = gd_attr_f("q", 1);
    expect_error_words(gd_op(g, "pow", 1, &a, 1, &bad), "pow unknown attr", "pow", "q", NULL);

    // NULL in, NULL out, message untouched
    CHECK(gd_add(NULL, a) == NULL && gd_mul(a, NULL) == NULL && gd_where(NULL, a, a) == NULL && gd_relu(NULL) == NULL &&
              gd_cast(NULL, GD_F16) == NULL && gd_clamp(NULL, 0, 1) == NULL && gd_gelu(NULL, 1) == NULL,
          "NULL inputs must give NULL");
    CHECK(gd_ctx_error(ctx)[0] == '\0', "NULL inputs must not set a message: %s", gd_ctx_error(ctx));
    gd_graph_free(g);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    test_binary_broadcast();
    test_broadcast_3d();
    test_division_special();
    test_min_max();
    test_where();
    test_integers();
    test_half();
    test_unary();
    test_activations();
    test_activation_grads();
    test_minmax_grad_ops();
    test_autodiff();
    test_autodiff_unary();
    test_cast();
    test_errors();
    return tu_finish("test_ops_elementwise");
}
