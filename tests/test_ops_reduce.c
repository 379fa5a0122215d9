/* test_ops_reduce.c — sum, mean, max, argmax, expand, global_norm, softmax, log_softmax,
 * cross_entropy and mse through the reference: values against closed forms and formulas
 * computed here in double, gradients through gd_backward against their textbook
 * expressions, and the messages of bad shapes and bad targets. */
#include "gradus.h"
#include "testutil.h"
#include "ops/reduce.h" /* gd_expand, internal to the ops layer */

#include <math.h>
#include <string.h>

static void expect_shape_named(const char *what, gd_tensor *t, int nd, const int64_t *dims)
{
    CHECK(t != NULL, "%s: not built: %s", what, gd_ctx_error(ctx));
    if (t == NULL) return;
    int ok = gd_tensor_ndim(t) == nd;
    for (int d = 0; ok && d < nd; d++) ok = gd_tensor_dim(t, d) == dims[d];
    char b[128];
    CHECK(ok, "%s: shape %s", what, gd_tensor_describe(t, b, sizeof b));
}

/* ---- sum, mean ------------------------------------------------------------------------ */

static void test_sum_mean(void)
{
    // x[i, j, k] = 100 i + 10 j + k, (2, 3, 4): every partial sum has a closed form
    gd_graph *g = fresh();
    float xv[24];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) xv[(i * 3 + j) * 4 + k] = (float)(100 * i + 10 * j + k);
    gd_tensor *x = in_f32(g, "x", 3, (int64_t[]){2, 3, 4}, xv);
    gd_tensor *s1 = gd_sum(x, 1, (int64_t[]){1}, 0);
    gd_tensor *s_all = gd_sum(x, 0, NULL, 0);
    gd_tensor *s3 = gd_sum(x, 2, (int64_t[]){0, -1}, 1);
    gd_tensor *m1 = gd_mean(x, 2, (int64_t[]){2, 0}, 0);
    gd_tensor *m_all = gd_mean(x, 0, NULL, 1);
    expect_shape_named("sum axes [1]", s1, 2, (int64_t[]){2, 4});
    expect_shape_named("sum of all", s_all, 0, NULL);
    expect_shape_named("sum axes [0, -1] keepdims", s3, 3, (int64_t[]){1, 3, 1});
    expect_shape_named("mean axes [2, 0]", m1, 1, (int64_t[]){3});
    expect_shape_named("mean of all keepdims", m_all, 3, (int64_t[]){1, 1, 1});
    gd_tensor *t[] = {s1, s_all, s3, m1, m_all};
    gd_program *p = compile_run(g, 5, t);
    if (p == NULL) return;
    double w1[8], w3[3], wm[3];
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++) w1[i * 4 + k] = 3.0 * (100 * i + k) + 10 * (0 + 1 + 2);
    for (int j = 0; j < 3; j++) {
        w3[j] = 100.0 * 1 * 4 + 10.0 * j * 8 + (0 + 1 + 2 + 3) * 2; // over i and k
        wm[j] = 50.0 + 10.0 * j + 1.5;
    }
    const double total = 100.0 * 12 + 10.0 * (0 + 1 + 2) * 8 + (0 + 1 + 2 + 3) * 6.0;
    expect_tensor("sum axes [1]", s1, w1, 8, 1e-6);
    expect_tensor("sum of all", s_all, &total, 1, 1e-6);
    expect_tensor("sum axes [0, -1]", s3, w3, 3, 1e-6);
    expect_tensor("mean axes [2, 0]", m1, wm, 3, 1e-6);
    expect_tensor("mean of all", m_all, (double[]){total / 24}, 1, 1e-6);
    gd_program_free(p);
    gd_graph_free(g);
}

static void test_sum_mean_grad(void)
{
    // loss = sum(mean(x, [1]) * c) + sum(sum(x, [0, 2], keepdims) * e): dx[i,j,k] = c[i,k] / 3 + e[j]
    gd_graph *g = fresh();
    float xv[24], cv[8] = {1, -2, 3, 0.5f, 4, 0, -1, 2}, ev[3] = {0.25f, -3, 7};
    for (int i = 0; i < 24; i++) xv[i] = (float)i * 0.1f;
    gd_tensor *x = in_f32(g, "x", 3, (int64_t[]){2, 3, 4}, xv);
    gd_tensor *c = in_f32(g, "c", 2, (int64_t[]){2, 4}, cv);
    gd_tensor *e = in_f32(g, "e", 3, (int64_t[]){1, 3, 1}, ev);
    gd_tensor *a = gd_sum(gd_mul(gd_mean(x, 1, (int64_t[]){1}, 0), c), 0, NULL, 0);
    gd_tensor *b = gd_sum(gd_mul(gd_sum(x, 2, (int64_t[]){0, 2}, 1), e), 0, NULL, 0);
    gd_tensor *loss = gd_add(a, b);
    CHECK(loss != NULL && gd_backward(g, loss) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    gd_tensor *dx = gd_grad(g, x);
    gd_program *p = compile_run(g, 1, &dx);
    if (p == NULL) return;
    double want[24];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) want[(i * 3 + j) * 4 + k] = cv[i * 4 + k] / 3.0 + ev[j];
    expect_tensor("d sum/mean", dx, want, 24, 1e-6);
    gd_program_free(p);
    gd_graph_free(g);
}

/* ---- max, argmax ------------------------------------------------------------------------ */

static void test_max_argmax(void)
{
    gd_graph *g = fresh();
    // (2, 3) with a tie in row 0: the first 5 is the maximum that counts
    gd_tensor *x = in_f32(g, "x", 2, (int64_t[]){2, 3}, (float[]){1, 5, 5, -2, -1, -3});
    gd_tensor *flat = in_f32(g, "flat", 1, (int64_t[]){3}, (float[]){2, 2, 2});
    gd_tensor *m1 = gd_max(x, 1, (int64_t[]){1}, 0);
    gd_tensor *m0 = gd_max(x, 1, (int64_t[]){0}, 1);
    gd_tensor *a1 = gd_argmax(x, 1, 0);
    gd_tensor *a0 = gd_argmax(x, 0, 1);
    gd_tensor *af = gd_argmax(flat, -1, 0);
    expect_shape_named("max axes [0] keepdims", m0, 2, (int64_t[]){1, 3});
    expect_shape_named("argmax axis 0 keepdims", a0, 2, (int64_t[]){1, 3});
    expect_shape_named("argmax of a vector", af, 0, NULL);
    CHECK(a1 != NULL && gd_tensor_dtype(a1) == GD_I64, "argmax should give i64");
    // the gradient of max over all goes to the first maximal element only
    gd_tensor *loss = gd_add(gd_sum(m1, 0, NULL, 0), gd_max(x, 0, NULL, 0));
    CHECK(loss != NULL && gd_backward(g, loss) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    gd_tensor *dx = gd_grad(g, x);
    gd_tensor *dy = in_f32(g, "dy", 1, (int64_t[]){2}, (float[]){7, 9});
    gd_attr at[2] = {gd_attr_is("axes", 1, (int64_t[]){-1}), gd_attr_i("keepdims", 0)};
    gd_tensor *mg = gd_op(g, "max_grad", 2, (gd_tensor *[]){dy, x}, 2, at);
    gd_tensor *t[] = {m1, m0, a1, a0, af, dx, mg};
    gd_program *p = compile_run(g, 7, t);
    if (p == NULL) return;
    expect_tensor("max axes [1]", m1, (double[]){5, -1}, 2, 0);
    expect_tensor("max axes [0]", m0, (double[]){1, 5, 5}, 3, 0);
    // sum(max over rows) gives [0 1 0; 0 1 0]; max over all adds 1 at (0, 1)
    expect_tensor("d max", dx, (double[]){0, 2, 0, 0, 1, 0}, 6, 0);
    expect_tensor("max_grad", mg, (double[]){0, 7, 0, 0, 9, 0}, 6, 0);
    int64_t i1[2] = {-1, -1}, i0[3] = {-1, -1, -1}, ifl = -1;
    gd_tensor_read(a1, i1, sizeof i1);
    gd_tensor_read(a0, i0, sizeof i0);
    gd_tensor_read(af, &ifl, sizeof ifl);
    CHECK(i1[0] == 1 && i1[1] == 1, "argmax axis 1 = [%lld, %lld], expected [1, 1]", (long long)i1[0],
          (long long)i1[1]);
    CHECK(i0[0] == 0 && i0[1] == 0 && i0[2] == 0, "argmax axis 0 = [%lld, %lld, %lld], expected [0, 0, 0]",
          (long long)i0[0], (long long)i0[1], (long long)i0[2]);
    CHECK(ifl == 0, "argmax of [2, 2, 2] = %lld, expected the first, 0", (long long)ifl);
    gd_program_free(p);
    gd_graph_free(g);
}

/* ---- expand ------------------------------------------------------------------------------ */

static void test_expand(void)
{
    gd_graph *g = fresh();
    gd_tensor *x = in_f32(g, "x", 2, (int64_t[]){3, 1}, (float[]){1, 2, 3});
    gd_tensor *y = gd_expand(x, 3, (int64_t[]){2, 3, 4});
    expect_shape_named("expand [3, 1] to [2, 3, 4]", y, 3, (int64_t[]){2, 3, 4});
    float wv[24];
    for (int i = 0; i < 24; i++) wv[i] = (float)(i % 5) - 1.5f;
    gd_tensor *w = in_f32(g, "w", 3, (int64_t[]){2, 3, 4}, wv);
    gd_tensor *loss = gd_sum(gd_mul(y, w), 0, NULL, 0);
    CHECK(loss != NULL && gd_backward(g, loss) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    gd_tensor *dx = gd_grad(g, x);
    gd_tensor *t[] = {y, dx};
    gd_program *p = compile_run(g, 2, t);
    if (p == NULL) return;
    double want[24], dwant[3] = {0, 0, 0};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 4; c++) {
                want[(a * 3 + b) * 4 + c] = b + 1;
                dwant[b] += wv[(a * 3 + b) * 4 + c];
            }
    expect_tensor("expand", y, want, 24, 0);
    expect_tensor("d expand", dx, dwant, 3, 1e-6);
    gd_program_free(p);

    gd_tensor *bad = gd_expand(in_f32(g, "z", 2, (int64_t[]){3, 2}, NULL), 2, (int64_t[]){4, 3});
    CHECK(bad == NULL, "expand [3, 2] to [4, 3] should fail");
    check_error("expand", (const char *[]){"expand", "[3, 2]", "[4, 3]", NULL});
    gd_graph_free(g);
}

/* ---- global_norm ---------------------------------------------------------------------------- */

static void test_global_norm(void)
{
    gd_graph *g = fresh();
    gd_tensor *a = in_f32(g, "a", 1, (int64_t[]){2}, (float[]){3, 4});
    gd_tensor *b = in_f32(g, "b", 2, (int64_t[]){1, 1}, (float[]){12});
    gd_tensor *n = gd_global_norm(g, 2, (gd_tensor *[]){a, b});
    expect_shape_named("global_norm", n, 0, NULL);
    CHECK(n != NULL && gd_backward(g, n) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    gd_tensor *da = gd_grad(g, a), *db = gd_grad(g, b);
    // 20 scalars, more than one node takes: grouped, the norm of the groups' norms
    gd_tensor *xs[20];
    double ss = 0;
    for (int k = 0; k < 20; k++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", k);
        xs[k] = in_f32(g, name, 0, NULL, (float[]){(float)(k + 1)});
        ss += (k + 1.0) * (k + 1.0);
    }
    gd_tensor *n20 = gd_global_norm(g, 20, xs);
    gd_tensor *t[] = {n, da, db, n20};
    gd_program *p = compile_run(g, 4, t);
    if (p == NULL) return;
    expect_tensor("global_norm", n, (double[]){13}, 1, 1e-6);
    expect_tensor("d global_norm / da", da, (double[]){3.0 / 13, 4.0 / 13}, 2, 1e-6);
    expect_tensor("d global_norm / db", db, (double[]){12.0 / 13}, 1, 1e-6);
    expect_tensor("global_norm of 20", n20, (double[]){sqrt(ss)}, 1, 1e-6);
    gd_program_free(p);

    gd_tensor *h = gd_input(g, "h", GD_F16, 1, (int64_t[]){2});
    CHECK(gd_global_norm(g, 2, (gd_tensor *[]){a, h}) == NULL, "global_norm of f32 and f16 should fail");
    check_error("global_norm dtypes", (const char *[]){"global_norm", "f16[2]", "f32[2]", NULL});
    gd_graph_free(g);
}

/* ---- softmax, log_softmax ---------------------------------------------------------------- */

static void test_softmax(void)
{
    gd_graph *g = fresh();
    // row 1 is row 0 shifted by 1000: the same softmax, and no overflow
    const float xv[6] = {1, 2, 3, 1000, 1001, 1002}, cv[6] = {1, -2, 0.5f, 3, 0, 1};
    gd_tensor *x = in_f32(g, "x", 2, (int64_t[]){2, 3}, xv);
    gd_tensor *c = in_f32(g, "c", 2, (int64_t[]){2, 3}, cv);
    gd_tensor *z = in_f32(g, "z", 2, (int64_t[]){2, 2}, (float[]){0, 0, (float)log(3.0), 1});
    gd_tensor *y = gd_softmax(x, -1), *ly = gd_log_softmax(x, 1), *yz = gd_softmax(z, 0);
    gd_tensor *loss = gd_add(gd_sum(gd_mul(y, c), 0, NULL, 0), gd_sum(gd_mul(ly, c), 0, NULL, 0));
    CHECK(loss != NULL && gd_backward(g, loss) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    gd_tensor *dx = gd_grad(g, x);
    gd_tensor *t[] = {y, ly, yz, dx};
    gd_program *p = compile_run(g, 4, t);
    if (p == NULL) return;
    const double e = exp(1.0), den = 1 + e + e * e;
    const double sm[3] = {1 / den, e / den, e * e / den};
    double wy[6], wly[6], wdx[6];
    for (int r = 0; r < 2; r++) {
        double dot = 0, csum = 0;
        for (int k = 0; k < 3; k++) {
            dot += sm[k] * cv[r * 3 + k];
            csum += cv[r * 3 + k];
        }
        for (int k = 0; k < 3; k++) {
            wy[r * 3 + k] = sm[k];
            wly[r * 3 + k] = k - log(den);
            // softmax: y (c - y.c); log_softmax: c - y sum(c)
            wdx[r * 3 + k] = sm[k] * (cv[r * 3 + k] - dot) + cv[r * 3 + k] - sm[k] * csum;
        }
    }
    const double l3 = (float)log(3.0), e3 = exp(l3);
    expect_tensor("softmax", y, wy, 6, 1e-6);
    expect_tensor("log_softmax", ly, wly, 6, 1e-6);
    expect_tensor("softmax axis 0", yz, (double[]){1 / (1 + e3), 1 / (1 + e), e3 / (1 + e3), e / (1 + e)}, 4, 1e-6);
    expect_tensor("d softmax + d log_softmax", dx, wdx, 6, 1e-5);
    gd_program_free(p);

    CHECK(gd_softmax(x, 2) == NULL, "softmax axis 2 of a matrix should fail");
    check_error("softmax axis", (const char *[]){"softmax", "axis 2", NULL});
    gd_ctx_clear_error(ctx);
    gd_tensor *ix = gd_input(g, "ix", GD_I32, 1, (int64_t[]){3});
    CHECK(gd_log_softmax(ix, -1) == NULL, "log_softmax of i32 should fail");
    check_error("log_softmax of i32", (const char *[]){"log_softmax", "i32[3]", "float", NULL});
    gd_graph_free(g);
}

/* ---- cross_entropy ------------------------------------------------------------------------- */

static double lse(const float *row, int n)
{
    double m = row[0], s = 0;
    for (int k = 1; k < n; k++) m = row[k] > m ? row[k] : m;
    for (int k = 0; k < n; k++) s += exp(row[k] - m);
    return m + log(s);
}

static void test_cross_entropy(void)
{
    gd_graph *g = fresh();
    const float lv[12] = {1, 2, 3, 4, 0, 0, 0, 0, -1, 0.5f, 2, 0};
    const int64_t tv[3] = {2, -100, 0}; // row 1 ignored (the default ignore_index)
    gd_tensor *x = in_f32(g, "logits", 2, (int64_t[]){3, 4}, lv);
    gd_tensor *tg = gd_input(g, "targets", GD_I64, 1, (int64_t[]){3});
    gd_tensor_write(tg, tv, sizeof tv);
    gd_tensor *t32 = gd_input(g, "t32", GD_I32, 1, (int64_t[]){3});
    gd_tensor_write(t32, (int32_t[]){1, 3, 1}, 3 * sizeof(int32_t));
    gd_tensor *all = gd_input(g, "all", GD_I32, 1, (int64_t[]){3});
    gd_tensor_write(all, (int32_t[]){-1, -1, -1}, 3 * sizeof(int32_t));
    gd_tensor *loss = gd_cross_entropy(x, tg, -100);
    gd_tensor *l32 = gd_cross_entropy(x, t32, 1); // only row 1 (target 3) counts
    gd_tensor *none = gd_cross_entropy(x, all, -1);
    expect_shape_named("cross_entropy", loss, 0, NULL);
    CHECK(loss != NULL && gd_backward(g, gd_add(loss, none)) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    gd_tensor *dx = gd_grad(g, x);
    gd_tensor *t[] = {loss, l32, none, dx};
    gd_program *p = compile_run(g, 4, t);
    if (p == NULL) return;
    double want = ((lse(lv, 4) - 3) + (lse(lv + 8, 4) - (-1))) / 2;
    expect_tensor("cross_entropy", loss, &want, 1, 1e-6);
    expect_tensor("cross_entropy i32, ignore_index 1", l32, (double[]){log(4.0)}, 1, 1e-6);
    expect_tensor("cross_entropy all ignored", none, (double[]){0}, 1, 0);
    double wdx[12];
    for (int r = 0; r < 3; r++) {
        double l = lse(lv + r * 4, 4);
        for (int k = 0; k < 4; k++)
            wdx[r * 4 + k] = tv[r] == -100 ? 0 : (exp(lv[r * 4 + k] - l) - (k == tv[r])) / 2;
    }
    expect_tensor("d cross_entropy", dx, wdx, 12, 1e-6);
    gd_program_free(p);

    // a target outside [0, C) is the kernel's error, naming the row and the value
    gd_tensor_write(tg, (int64_t[]){2, 7, 0}, 3 * sizeof(int64_t));
    gd_program *bad = gd_compile(g, 1, &loss, 0);
    CHECK(bad != NULL, "compile: %s", gd_ctx_error(ctx));
    if (bad != NULL) {
        gd_ctx_clear_error(ctx);
        CHECK(gd_program_run(bad) != GD_OK, "a target of 7 with 4 classes should fail");
        check_error("target 7", (const char *[]){"cross_entropy", "targets[1] = 7", NULL});
        gd_tensor_write(tg, (int64_t[]){2, -1, 0}, 3 * sizeof(int64_t));
        gd_ctx_clear_error(ctx);
        CHECK(gd_program_run(bad) != GD_OK, "a target of -1 (not ignore_index) should fail");
        check_error("target -1", (const char *[]){"cross_entropy", "targets[1] = -1", NULL});
        gd_program_free(bad);
    }

    gd_tensor *t2 = gd_input(g, "t2", GD_I64, 1, (int64_t[]){2});
    CHECK(gd_cross_entropy(x, t2, -100) == NULL, "targets [2] for logits [3, 4] should fail");
    check_error("cross_entropy shapes", (const char *[]){"cross_entropy", "[2]", "[3, 4]", NULL});
    gd_tensor *tf = in_f32(g, "tf", 1, (int64_t[]){3}, NULL);
    CHECK(gd_cross_entropy(x, tf, -100) == NULL, "float targets should fail");
    check_error("cross_entropy dtype", (const char *[]){"cross_entropy", "i32 or i64", NULL});
    gd_graph_free(g);
}

/* cross_entropy with classes=K over logits of C > K columns: the loss and the gradient of
 * slicing the first K columns off first, zeros in the gradient's other columns, targets
 * past K bad data. (The CPU backend's kernels: test_cpu_ops and the sweep.) */
static void test_cross_entropy_classes(const char *be)
{
    enum { R = 3, C = 6, K = 4 };
    CHECK(gd_ctx_use_backend(ctx, be) == GD_OK, "backend %s: %s", be, gd_ctx_error(ctx));
    gd_graph *g = fresh();
    /* the padding columns are large, so that a kernel that read them would be far off */
    const float lv[R * C] = {1, 2, 3, 4, 9, 8, 0, 0, 0, 0, 7, 7, -1, 0.5f, 2, 0, 30, -30};
    gd_tensor *x = in_f32(g, "x", 2, (int64_t[]){R, C}, lv), *xs = in_f32(g, "xs", 2, (int64_t[]){R, C}, lv);
    gd_tensor *tg = gd_input(g, "targets", GD_I64, 1, (int64_t[]){R});
    gd_tensor_write(tg, (int64_t[]){3, -1, 0}, R * sizeof(int64_t)); /* the last class; ignored; the first */
    gd_attr a[2] = {gd_attr_i("ignore_index", -1), gd_attr_i("classes", K)};
    gd_tensor *ce_in[2] = {x, tg};
    gd_tensor *lk = gd_op(g, "cross_entropy", 2, ce_in, 2, a);
    gd_tensor *ls = gd_cross_entropy(gd_slice(xs, -1, 0, K), tg, -1);
    CHECK(lk != NULL && ls != NULL && gd_backward(g, gd_add(lk, ls)) == GD_OK, "%s: classes: %s", be,
          gd_ctx_error(ctx));
    gd_tensor *t[] = {lk, ls, gd_grad(g, x), gd_grad(g, xs)};
    gd_program *p = compile_run(g, 4, t);
    if (p == NULL) {
        gd_graph_free(g);
        return;
    }
    float l[2], dk[R * C], ds[R * C];
    gd_tensor_read(lk, &l[0], sizeof(float));
    gd_tensor_read(ls, &l[1], sizeof(float));
    gd_tensor_read(t[2], dk, sizeof dk);
    gd_tensor_read(t[3], ds, sizeof ds);
    double want = ((lse(lv, K) - 4) + (lse(lv + 2 * C, K) - (-1))) / 2;
    CHECK(fabs(l[0] - want) <= 1e-6 * want && l[0] == l[1], "%s: classes=%d loss %.9g, sliced first %.9g, want %.9g",
          be, K, l[0], l[1], want);
    int same = 1, zero = 1;
    for (int k = 0; k < R * C; k++) {
        same &= dk[k] == ds[k];
        if (k % C >= K) zero &= dk[k] == 0.0f;
    }
    CHECK(same && zero, "%s: classes gradient (same as slicing first %d, zero past the classes %d)", be, same, zero);
    double want_dx = (exp(lv[1] - lse(lv, K))) / 2; /* row 0, class 1 */
    CHECK(fabs(dk[1] - want_dx) <= 1e-6 * want_dx, "%s: d logits[0, 1] = %g, want %g", be, dk[1], want_dx);
    gd_program_free(p);

    /* a target among the padding columns is no class */
    gd_tensor_write(tg, (int64_t[]){3, 4, 0}, R * sizeof(int64_t));
    gd_program *bad = gd_compile(g, 1, &lk, 0);
    CHECK(bad != NULL, "compile: %s", gd_ctx_error(ctx));
    if (bad != NULL) {
        gd_ctx_clear_error(ctx);
        CHECK(gd_program_run(bad) != GD_OK, "%s: a target of 4 with classes=4 should fail", be);
        check_error("target 4 of classes 4", (const char *[]){"cross_entropy", "targets[1] = 4", "[0, 4)", NULL});
        gd_program_free(bad);
    }
    gd_ctx_clear_error(ctx);
    for (int k = 0; k < 2; k++) {
        gd_attr b[1] = {gd_attr_i("classes", k == 0 ? 0 : C + 1)};
        CHECK(gd_op(g, "cross_entropy", 2, ce_in, 1, b) == NULL, "%s: classes=%d of %d columns should fail", be,
              k == 0 ? 0 : C + 1, C);
        check_error("classes out of range", (const char *[]){"cross_entropy", "classes", "[1, 6]", NULL});
    }
    gd_graph_free(g);
}

/* ---- mse ------------------------------------------------------------------------------------ */

static void test_mse(void)
{
    gd_graph *g = fresh();
    gd_tensor *pr = in_f32(g, "pred", 2, (int64_t[]){2, 2}, (float[]){1, 2, 3, 4});
    gd_tensor *tg = in_f32(g, "target", 2, (int64_t[]){2, 2}, (float[]){0, 2, 5, 4.5f});
    gd_tensor *l = gd_mse(pr, tg);
    expect_shape_named("mse", l, 0, NULL);
    CHECK(l != NULL && gd_backward(g, l) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    gd_tensor *dp = gd_grad(g, pr), *dt = gd_grad(g, tg);
    gd_tensor *t[] = {l, dp, dt};
    gd_program *p = compile_run(g, 3, t);
    if (p == NULL) return;
    // differences 1, 0, -2, -0.5: squares sum to 5.25; d/dpred = 2 d / 4
    expect_tensor("mse", l, (double[]){5.25 / 4}, 1, 1e-7);
    expect_tensor("d mse / dpred", dp, (double[]){0.5, 0, -1, -0.25}, 4, 1e-7);
    expect_tensor("d mse / dtarget", dt, (double[]){-0.5, 0, 1, 0.25}, 4, 1e-7);
    gd_program_free(p);

    gd_tensor *a = in_f32(g, "a", 2, (int64_t[]){2, 3}, NULL), *b = in_f32(g, "b", 2, (int64_t[]){3, 2}, NULL);
    CHECK(gd_mse(a, b) == NULL, "mse of [2, 3] and [3, 2] should fail");
    check_error("mse shapes", (const char *[]){"mse", "[2, 3]", "[3, 2]", NULL});
    gd_graph_free(g);
}

/* ---- bad axes -------------------------------------------------------------------------------- */

static void test_bad_axes(void)
{
    gd_graph *g = fresh();
    gd_tensor *x = in_f32(g, "x", 2, (int64_t[]){2, 3}, NULL);
    CHECK(gd_sum(x, 1, (int64_t[]){2}, 0) == NULL, "sum over axis 2 of a matrix should fail");
    check_error("sum axis 2", (const char *[]){"sum", "axis 2", "[2, 3]", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_mean(x, 2, (int64_t[]){1, -1}, 0) == NULL, "mean over axes [1, -1] should fail");
    check_error("mean axes [1, -1]", (const char *[]){"mean", "[1, -1]", "twice", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_argmax(x, -3, 0) == NULL, "argmax axis -3 of a matrix should fail");
    check_error("argmax axis -3", (const char *[]){"argmax", "-3", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_max(x, 9, (int64_t[]){0, 1, 0, 1, 0, 1, 0, 1, 0}, 0) == NULL, "9 axes should fail");
    CHECK(gd_sum(NULL, 0, NULL, 0) == NULL, "NULL in, NULL out");
    gd_graph_free(g);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    test_sum_mean();
    test_sum_mean_grad();
    test_max_argmax();
    test_expand();
    test_global_norm();
    test_softmax();
    test_cross_entropy();
    test_mse();
    test_bad_axes();
    test_cross_entropy_classes("ref");
    return tu_finish("test_ops_reduce");
}
