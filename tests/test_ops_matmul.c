/* test_ops_matmul.c — matmul, linear and linear_act on the CPU reference: products worked
 * out by hand, batched products against a naive triple loop written here, the four
 * transpose combinations, gradients of sum(output) (whose closed forms are row and column
 * sums of the other operand), and the messages of bad shapes. */
#include "gradus.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// A (2, 3), B (3, 2), and A B by hand
static const float A[6] = {1, 2, 3, 4, 5, 6};
static const float B[6] = {7, 8, 9, 10, 11, 12};
static const double AB[4] = {58, 64, 139, 154};
static const float At[6] = {1, 4, 2, 5, 3, 6};   // A^T stored (3, 2)
static const float Bt[6] = {7, 9, 11, 8, 10, 12}; // B^T stored (2, 3)

static void test_matmul_by_hand(void)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gd_graph *g = gd_graph_new(ctx);
            gd_tensor *a = ta ? in_f32(g, "a", 2, (int64_t[]){3, 2}, At) : in_f32(g, "a", 2, (int64_t[]){2, 3}, A);
            gd_tensor *b = tb ? in_f32(g, "b", 2, (int64_t[]){2, 3}, Bt) : in_f32(g, "b", 2, (int64_t[]){3, 2}, B);
            gd_tensor *c = gd_matmul(a, b, ta, tb);
            expect_shape(c, 2, (int64_t[]){2, 2});
            float out[4];
            char what[64];
            snprintf(what, sizeof what, "matmul ta=%d tb=%d", ta, tb);
            if (run1_read(g, c, out)) expect_close(what, out, AB, 4, 0);
            gd_graph_free(g);
        }
}

/* Naive C (M, N) = A (M, K) @ B (K, N) in double. */
static void naive(int M, int K, int N, const float *a, const float *b, double *c)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)a[i * K + k] * b[k * N + j];
            c[i * N + j] = s;
        }
}

static void test_matmul_batched(void)
{
    // a (2, 1, 3, 4) @ b (3, 4, 5) -> (2, 3, 3, 5): batch (i, j) multiplies a[i, 0] by b[j]
    float a[2 * 3 * 4], b[3 * 4 * 5], c[2 * 3 * 3 * 5];
    double want[2 * 3 * 3 * 5];
    for (int i = 0; i < 24; i++) a[i] = (float)((i * 7) % 11) - 5;
    for (int i = 0; i < 60; i++) b[i] = (float)((i * 5) % 13) * 0.5f - 3;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) naive(3, 4, 5, a + i * 12, b + j * 20, want + (i * 3 + j) * 15);
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *ta = in_f32(g, "a", 4, (int64_t[]){2, 1, 3, 4}, a), *tb = in_f32(g, "b", 3, (int64_t[]){3, 4, 5}, b);
    gd_tensor *tc = gd_matmul(ta, tb, 0, 0);
    expect_shape(tc, 4, (int64_t[]){2, 3, 3, 5});
    if (run1_read(g, tc, c)) expect_close("matmul broadcast batch", c, want, 90, 1e-6);
    gd_graph_free(g);

    // a 2-D (2, 3) against b batched (2, 3, 2) whose second batch is -B: A B and -A B
    float bb[12];
    for (int i = 0; i < 6; i++) bb[i] = B[i], bb[6 + i] = -B[i];
    double want2[8];
    for (int i = 0; i < 4; i++) want2[i] = AB[i], want2[4 + i] = -AB[i];
    g = gd_graph_new(ctx);
    tc = gd_matmul(in_f32(g, "a", 2, (int64_t[]){2, 3}, A), in_f32(g, "b", 3, (int64_t[]){2, 3, 2}, bb), 0, 0);
    expect_shape(tc, 3, (int64_t[]){2, 2, 2});
    if (run1_read(g, tc, c)) expect_close("matmul 2-D @ batched", c, want2, 8, 0);
    gd_graph_free(g);
}

static void test_linear(void)
{
    // x (2, 3), W (2, 3), b (2): y = x W^T + b by hand
    static const float x[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 0, -1, 2, 1, 0}, b[2] = {0.5f, -1};
    static const double z[4] = {-1.5, 3, -1.5, 12}, znob[4] = {-2, 4, -2, 13};
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *tx = in_f32(g, "x", 2, (int64_t[]){2, 3}, x), *tw = in_f32(g, "w", 2, (int64_t[]){2, 3}, w);
    gd_tensor *tb = in_f32(g, "b", 1, (int64_t[]){2}, b);
    float out[4];
    if (run1_read(g, gd_linear(tx, tw, tb), out)) expect_close("linear", out, z, 4, 0);
    if (run1_read(g, gd_linear(tx, tw, NULL), out)) expect_close("linear without bias", out, znob, 4, 0);
    // x 1-D (3): the first row alone
    gd_tensor *x1 = in_f32(g, "x1", 1, (int64_t[]){3}, x);
    gd_tensor *y1 = gd_linear(x1, tw, tb);
    expect_shape(y1, 1, (int64_t[]){2});
    if (run1_read(g, y1, out)) expect_close("linear 1-D", out, z, 2, 0);
    // x (2, 1, 3): leading dims kept
    gd_tensor *x3 = in_f32(g, "x3", 3, (int64_t[]){2, 1, 3}, x);
    gd_tensor *y3 = gd_linear(x3, tw, tb);
    expect_shape(y3, 3, (int64_t[]){2, 1, 2});
    if (run1_read(g, y3, out)) expect_close("linear 3-D", out, z, 4, 0);

    // linear_act: each activation of the same z, by its formula
    gd_tensor *in3[3] = {tx, tw, tb};
    for (int act = 0; act <= 4; act++) {
        double want[4];
        for (int i = 0; i < 4; i++) {
            double v = z[i];
            want[i] = act == 0 ? v
                      : act == 1 ? (v > 0 ? v : 0)
                      : act == 2 ? 0.5 * v * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (v + 0.044715 * v * v * v)))
                      : act == 3 ? 0.5 * v * (1 + erf(v / sqrt(2)))
                                 : v / (1 + exp(-v));
        }
        gd_attr at = gd_attr_i("act", act);
        char what[32];
        snprintf(what, sizeof what, "linear_act act=%d", act);
        if (run1_read(g, gd_op(g, "linear_act", 3, in3, 1, &at), out)) expect_close(what, out, want, 4, 1e-6);
    }
    // weight_in_out=1 takes W^T (3, 2), the layout of a matmul's right operand
    static const float wt[6] = {1, 2, 0, 1, -1, 0};
    gd_tensor *twt = in_f32(g, "wt", 2, (int64_t[]){3, 2}, wt);
    gd_attr at2[2] = {gd_attr_i("act", 1), gd_attr_i("weight_in_out", 1)};
    static const double zr[4] = {0, 3, 0, 12};
    if (run1_read(g, gd_op(g, "linear_act", 3, (gd_tensor *[]){tx, twt, tb}, 2, at2), out))
        expect_close("linear_act weight_in_out", out, zr, 4, 0);
    gd_graph_free(g);
}

/* d sum(A B) / dA [i, k] = sum_j B[k, j];  d sum(A B) / dB [k, j] = sum_i A[i, k]. */
static void test_gradients(void)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gd_graph *g = gd_graph_new(ctx);
            gd_tensor *a = gd_param(g, "a", GD_F32, 2, ta ? (int64_t[]){3, 2} : (int64_t[]){2, 3});
            gd_tensor *b = gd_param(g, "b", GD_F32, 2, tb ? (int64_t[]){2, 3} : (int64_t[]){3, 2});
            gd_tensor_write(a, ta ? At : A, sizeof A);
            gd_tensor_write(b, tb ? Bt : B, sizeof B);
            gd_tensor *loss = gd_sum(gd_matmul(a, b, ta, tb), 0, NULL, 0);
            CHECK(gd_backward(g, loss) == GD_OK, "backward: %s", gd_ctx_error(ctx));
            gd_tensor *t[2] = {gd_grad(g, a), gd_grad(g, b)};
            float da[6], db[6];
            double wa[6], wb[6];
            for (int i = 0; i < 2; i++)
                for (int k = 0; k < 3; k++) {
                    double s = B[k * 2] + B[k * 2 + 1];      // row k of B
                    wa[ta ? k * 2 + i : i * 3 + k] = s;
                }
            for (int k = 0; k < 3; k++)
                for (int j = 0; j < 2; j++) {
                    double s = A[k] + A[3 + k];              // column k of A
                    wb[tb ? j * 3 + k : k * 2 + j] = s;
                }
            char what[64];
            if (run_read(g, 2, t, (void *[]){da, db})) {
                snprintf(what, sizeof what, "dA (ta=%d tb=%d)", ta, tb);
                expect_close(what, da, wa, 6, 0);
                snprintf(what, sizeof what, "dB (ta=%d tb=%d)", ta, tb);
                expect_close(what, db, wb, 6, 0);
            }
            gd_graph_free(g);
        }

    // a batched (2, 2, 3) = [A, 2A] @ b 2-D (3, 2): b's gradient sums over the batch
    gd_graph *g = gd_graph_new(ctx);
    float a2[12];
    for (int i = 0; i < 6; i++) a2[i] = A[i], a2[6 + i] = 2 * A[i];
    gd_tensor *a = gd_param(g, "a", GD_F32, 3, (int64_t[]){2, 2, 3}), *b = gd_param(g, "b", GD_F32, 2, (int64_t[]){3, 2});
    gd_tensor_write(a, a2, sizeof a2);
    gd_tensor_write(b, B, sizeof B);
    CHECK(gd_backward(g, gd_sum(gd_matmul(a, b, 0, 0), 0, NULL, 0)) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    gd_tensor *t[2] = {gd_grad(g, a), gd_grad(g, b)};
    expect_shape(t[1], 2, (int64_t[]){3, 2});
    float da[12], db[6];
    double wa[12], wb[6];
    for (int bi = 0; bi < 2; bi++)
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 3; k++) wa[bi * 6 + i * 3 + k] = B[k * 2] + B[k * 2 + 1];
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 2; j++) wb[k * 2 + j] = 3 * (A[k] + A[3 + k]);
    if (run_read(g, 2, t, (void *[]){da, db})) {
        expect_close("batched dA", da, wa, 12, 0);
        expect_close("broadcast dB", db, wb, 6, 0);
    }
    gd_graph_free(g);

    // linear: d sum(x W^T + b): dx[r, i] = sum_o W[o, i], dW[o, i] = sum_r x[r, i], db = rows
    static const float x[6] = {1, 2, 3, 4, 5, 6}, w[6] = {1, 0, -1, 2, 1, 0}, bias[2] = {0.5f, -1};
    g = gd_graph_new(ctx);
    gd_tensor *tx = gd_param(g, "x", GD_F32, 3, (int64_t[]){2, 1, 3}), *tw = gd_param(g, "w", GD_F32, 2, (int64_t[]){2, 3});
    gd_tensor *tb = gd_param(g, "b", GD_F32, 1, (int64_t[]){2});
    gd_tensor_write(tx, x, sizeof x);
    gd_tensor_write(tw, w, sizeof w);
    gd_tensor_write(tb, bias, sizeof bias);
    CHECK(gd_backward(g, gd_sum(gd_linear(tx, tw, tb), 0, NULL, 0)) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    gd_tensor *lt[3] = {gd_grad(g, tx), gd_grad(g, tw), gd_grad(g, tb)};
    expect_shape(lt[0], 3, (int64_t[]){2, 1, 3});
    float dx[6], dw[6], dbias[2];
    static const double wdx[6] = {3, 1, -1, 3, 1, -1}, wdw[6] = {5, 7, 9, 5, 7, 9}, wdb[2] = {2, 2};
    if (run_read(g, 3, lt, (void *[]){dx, dw, dbias})) {
        expect_close("linear dx", dx, wdx, 6, 0);
        expect_close("linear dW", dw, wdw, 6, 0);
        expect_close("linear db", dbias, wdb, 2, 0);
    }
    gd_graph_free(g);
}

static void test_errors(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *a = in_f32(g, "a", 2, (int64_t[]){2, 3}, NULL), *b = in_f32(g, "b", 2, (int64_t[]){4, 5}, NULL);
    expect_error(gd_matmul(a, b, 0, 0), "inner mismatch", 3, (const char *[]){"matmul", "[2, 3]", "[4, 5]"});
    gd_tensor *b3 = in_f32(g, "b3", 3, (int64_t[]){3, 3, 5}, NULL), *a3 = in_f32(g, "a3", 3, (int64_t[]){2, 2, 3}, NULL);
    expect_error(gd_matmul(a3, b3, 0, 0), "batch mismatch", 3, (const char *[]){"matmul", "[2, 2, 3]", "[3, 3, 5]"});
    gd_tensor *v = in_f32(g, "v", 1, (int64_t[]){3}, NULL);
    expect_error(gd_matmul(v, b, 0, 0), "1-D operand", 2, (const char *[]){"matmul", "[3]"});
    gd_tensor *d = gd_input(g, "d", GD_F64, 2, (int64_t[]){3, 2});
    expect_error(gd_matmul(a, d, 0, 0), "dtype mismatch", 3, (const char *[]){"matmul", "f32[2, 3]", "f64[3, 2]"});
    // the transposed operand's stored shape is in the message
    expect_error(gd_matmul(a, a, 0, 0), "no transpose", 2, (const char *[]){"matmul", "[2, 3]"});
    CHECK(gd_matmul(a, a, 0, 1) != NULL, "a @ a^T should build: %s", gd_ctx_error(ctx));

    gd_tensor *w = in_f32(g, "w", 2, (int64_t[]){4, 5}, NULL), *bias = in_f32(g, "bias", 1, (int64_t[]){3}, NULL);
    expect_error(gd_linear(a, w, NULL), "linear features", 3, (const char *[]){"linear", "[2, 3]", "[4, 5]"});
    gd_tensor *w2 = in_f32(g, "w2", 2, (int64_t[]){4, 3}, NULL);
    expect_error(gd_linear(a, w2, bias), "linear bias", 3, (const char *[]){"linear", "[3]", "[4, 3]"});
    gd_attr bad = gd_attr_i("act", 9);
    expect_error(gd_op(g, "linear_act", 2, (gd_tensor *[]){a, w2}, 1, &bad), "bad act", 2,
                 (const char *[]){"linear_act", "act=9"});

    // NULL inputs propagate without a message
    CHECK(gd_matmul(NULL, b, 0, 0) == NULL && gd_linear(a, NULL, NULL) == NULL, "NULL should propagate");
    CHECK(gd_ctx_error(ctx)[0] == '\0', "NULL propagation left a message: %s", gd_ctx_error(ctx));
    gd_graph_free(g);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    test_matmul_by_hand();
    test_matmul_batched();
    test_linear();
    test_gradients();
    test_errors();
    return tu_finish("test_ops_matmul");
}
