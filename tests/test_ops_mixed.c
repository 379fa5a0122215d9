/* test_ops_mixed.c — the mixed-precision forms through the reference, against values
 * computed here: matmul of bf16/f16 operands into f32 (gd_matmul_as), sum and mean of
 * bf16/f16 into f32 (gd_sum_as, gd_mean_as) — accumulated in double and rounded once —
 * their gradients in the operands' dtype, AdamW keeping f32 master weights with a bf16 or
 * f16 copy written in place, and the forms no op declares refused when the node is made. */
#include "gradus.h"
#include "gradus_semantics.h"
#include "testutil.h"

#include <stdlib.h>

/* n values in [-1, 1) as bf16 or f16 bits, and the doubles they stand for. */
static void half_data(gd_dtype dt, int n, unsigned seed, uint16_t *bits, double *vals)
{
    srand(seed);
    for (int i = 0; i < n; i++) {
        float f = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
        bits[i] = dt == GD_BF16 ? gdp_f32_to_bf16(f) : gdp_f32_to_f16(f);
        vals[i] = dt == GD_BF16 ? gdp_bf16_to_f32(bits[i]) : gdp_f16_to_f32(bits[i]);
    }
}

/* f32 results must equal want rounded once from double: bit for bit. */
static void expect_rounded_once(const char *what, const float *got, const double *want, int n)
{
    for (int i = 0; i < n; i++)
        CHECK(got[i] == (float)want[i], "%s[%d] = %.9g, want %.9g", what, i, got[i], (double)(float)want[i]);
}

static void test_matmul_as(gd_dtype dt)
{
    const char *dn = gd_dtype_name(dt);
    enum { M = 3, K = 17, N = 4 };
    gd_graph *g = fresh();
    gd_tensor *a = gd_input(g, "a", dt, 2, (int64_t[]){M, K});
    gd_tensor *bt = gd_input(g, "bt", dt, 2, (int64_t[]){N, K}); // b^T, read with transpose_b
    gd_tensor *c = gd_matmul_as(a, bt, 0, 1, GD_F32);
    CHECK(c != NULL && gd_tensor_dtype(c) == GD_F32, "%s matmul_as: %s", dn, gd_ctx_error(ctx));
    gd_tensor *loss = gd_sum(c, 0, NULL, 0);
    CHECK(loss != NULL && gd_backward(g, loss) == GD_OK, "%s backward: %s", dn, gd_ctx_error(ctx));
    gd_tensor *da = gd_grad(g, a);
    CHECK(da != NULL && gd_tensor_dtype(da) == dt, "%s: the gradient of a is %s", dn,
          da != NULL ? gd_dtype_name(gd_tensor_dtype(da)) : "missing");
    if (c == NULL || da == NULL) {
        gd_graph_free(g);
        return;
    }
    uint16_t ab[M * K], bb[N * K], dab[M * K];
    double av[M * K], bv[N * K], want[M * N];
    half_data(dt, M * K, 1, ab, av);
    half_data(dt, N * K, 2, bb, bv);
    gd_tensor_write(a, ab, sizeof ab);
    gd_tensor_write(bt, bb, sizeof bb);
    float cv[M * N];
    if (run_read(g, 2, (gd_tensor *[]){c, da}, (void *[]){cv, dab})) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int k = 0; k < K; k++) s += av[i * K + k] * bv[j * K + k];
                want[i * N + j] = s;
            }
        expect_rounded_once(dn, cv, want, M * N);
        // d sum(a b) / d a[i, k] = sum_j b[k, j], rounded to the operands' dtype
        for (int k = 0; k < K; k++) {
            double s = 0;
            for (int j = 0; j < N; j++) s += bv[j * K + k];
            uint16_t w = dt == GD_BF16 ? gdp_f32_to_bf16((float)s) : gdp_f32_to_f16((float)s);
            double got = dt == GD_BF16 ? gdp_bf16_to_f32(dab[k]) : gdp_f16_to_f32(dab[k]);
            double near = dt == GD_BF16 ? gdp_bf16_to_f32(w) : gdp_f16_to_f32(w);
            CHECK(fabs(got - near) <= fabs(near) * 2e-2 + 1e-3, "%s da[0][%d] = %g, want about %g", dn, k, got, near);
        }
    }
    gd_graph_free(g);
}

static void test_sum_mean_as(gd_dtype dt)
{
    const char *dn = gd_dtype_name(dt);
    enum { R = 5, C = 33 };
    gd_graph *g = fresh();
    gd_tensor *x = gd_input(g, "x", dt, 2, (int64_t[]){R, C});
    gd_tensor *s = gd_sum_as(x, 1, (int64_t[]){1}, 0, GD_F32);     // (R)
    gd_tensor *m = gd_mean_as(x, 1, (int64_t[]){0}, 1, GD_F32);    // (1, C)
    gd_tensor *all = gd_sum_as(x, 0, NULL, 0, GD_F32);             // ()
    CHECK(s != NULL && m != NULL && all != NULL && gd_tensor_dtype(s) == GD_F32, "%s sum_as/mean_as: %s", dn,
          gd_ctx_error(ctx));
    gd_tensor *loss = gd_add(gd_sum(s, 0, NULL, 0), gd_sum(m, 0, NULL, 0));
    CHECK(loss != NULL && gd_backward(g, loss) == GD_OK, "%s backward: %s", dn, gd_ctx_error(ctx));
    gd_tensor *dx = gd_grad(g, x);
    CHECK(dx != NULL && gd_tensor_dtype(dx) == dt, "%s: the gradient of x is not %s", dn, dn);
    if (s == NULL || m == NULL || all == NULL || dx == NULL) {
        gd_graph_free(g);
        return;
    }
    uint16_t xb[R * C], dxb[R * C];
    double xv[R * C];
    half_data(dt, R * C, 3, xb, xv);
    gd_tensor_write(x, xb, sizeof xb);
    float sv[R], mv[C], av;
    if (run_read(g, 4, (gd_tensor *[]){s, m, all, dx}, (void *[]){sv, mv, &av, dxb})) {
        double ws[R], wm[C], wa = 0;
        for (int r = 0; r < R; r++) {
            ws[r] = 0;
            for (int c = 0; c < C; c++) ws[r] += xv[r * C + c];
            wa += ws[r];
        }
        for (int c = 0; c < C; c++) {
            wm[c] = 0;
            for (int r = 0; r < R; r++) wm[c] += xv[r * C + c];
            wm[c] /= R;
        }
        expect_rounded_once("sum_as", sv, ws, R);
        expect_rounded_once("mean_as", mv, wm, C);
        expect_rounded_once("sum_as all", &av, &wa, 1);
        // d/dx of sum + mean = 1 + 1/R for every element, in x's dtype
        uint16_t w = dt == GD_BF16 ? gdp_f32_to_bf16(1.0f + 1.0f / R) : gdp_f32_to_f16(1.0f + 1.0f / R);
        for (int i = 0; i < R * C; i++) CHECK(dxb[i] == w, "%s dx[%d] bits %04x, want %04x", dn, i, dxb[i], w);
    }
    gd_graph_free(g);
}

/* Forms no op declares are refused when the node is made, with the signature named. */
static void test_undeclared_forms(void)
{
    gd_graph *g = fresh();
    gd_tensor *a = gd_input(g, "a", GD_F32, 2, (int64_t[]){2, 3});
    gd_tensor *b = gd_input(g, "b", GD_F32, 2, (int64_t[]){3, 2});
    gd_tensor *h = gd_input(g, "h", GD_F16, 2, (int64_t[]){2, 3});
    expect_error(gd_matmul_as(a, b, 0, 0, GD_BF16), "matmul f32 -> bf16", 2,
                 (const char *[]){"matmul", "f32,f32->bf16"});
    expect_error(gd_matmul_as(a, b, 0, 0, GD_I32), "matmul -> i32", 2, (const char *[]){"out_dtype", "float"});
    expect_error(gd_sum_as(h, 0, NULL, 0, GD_BF16), "sum f16 -> bf16", 2, (const char *[]){"sum", "f16->bf16"});
    expect_error(gd_mean_as(a, 0, NULL, 0, GD_F64), "mean f32 -> f64", 2, (const char *[]){"mean", "f32->f64"});
    gd_tensor *same = gd_matmul_as(a, b, 0, 0, GD_F32); // the operands' dtype: a plain matmul
    CHECK(same != NULL && gd_tensor_dtype(same) == GD_F32, "matmul_as to its own dtype: %s", gd_ctx_error(ctx));
    gd_graph_free(g);
}

/* adamw_update(p, g, m, v, step, lr, copy): p' as without the copy, and the copy in place
 * is p' rounded to nearest even; the three-output form is unchanged. */
static void test_adamw_copy(gd_dtype copy_dt, gd_dtype grad_dt)
{
    enum { N = 6 };
    char what[64];
    snprintf(what, sizeof what, "adamw copy %s, g %s", gd_dtype_name(copy_dt), gd_dtype_name(grad_dt));
    gd_graph *g = fresh();
    gd_tensor *p = gd_state(g, "p", GD_F32, 1, (int64_t[]){N}), *p2 = gd_state(g, "p2", GD_F32, 1, (int64_t[]){N});
    gd_tensor *m = gd_state(g, "m", GD_F32, 1, (int64_t[]){N}), *m2 = gd_state(g, "m2", GD_F32, 1, (int64_t[]){N});
    gd_tensor *v = gd_state(g, "v", GD_F32, 1, (int64_t[]){N}), *v2 = gd_state(g, "v2", GD_F32, 1, (int64_t[]){N});
    gd_tensor *copy = gd_state(g, "copy", copy_dt, 1, (int64_t[]){N});
    gd_tensor *gr = gd_input(g, "g", grad_dt, 1, (int64_t[]){N}), *gr32 = gd_input(g, "g32", GD_F32, 1, (int64_t[]){N});
    gd_tensor *step = gd_input(g, "step", GD_F32, 0, NULL), *lr = gd_input(g, "lr", GD_F32, 0, NULL);
    gd_attr at[2] = {gd_attr_f("weight_decay", 0.01), gd_attr_f("eps", 1e-8)};
    gd_tensor *out[4] = {NULL}, *ref[4] = {NULL};
    gd_status s1 = gd_op_multi(g, "adamw_update", 7, (gd_tensor *[]){p, gr, m, v, step, lr, copy}, 2, at, 4, out);
    CHECK(s1 == GD_OK && out[3] != NULL && gd_tensor_dtype(out[3]) == copy_dt, "%s: %s", what, gd_ctx_error(ctx));
    gd_status s2 = gd_op_multi(g, "adamw_update", 6, (gd_tensor *[]){p2, gr32, m2, v2, step, lr}, 2, at, 4, ref);
    CHECK(s2 == GD_OK && ref[2] != NULL && ref[3] == NULL, "%s: the six-input form makes three outputs", what);
    if (s1 != GD_OK || s2 != GD_OK) {
        gd_graph_free(g);
        return;
    }
    float pv[N], gv[N], mv[N], vv[N], one = 1.0f, rate = 0.1f;
    uint16_t gb[N];
    double gd[N];
    half_data(grad_dt == GD_F32 ? GD_BF16 : grad_dt, N, 4, gb, gd);
    for (int i = 0; i < N; i++) {
        pv[i] = 0.5f - 0.2f * (float)i;
        gv[i] = (float)gd[i]; // the same gradient values for both updates
        mv[i] = 0.01f * (float)i;
        vv[i] = 0.02f + 0.01f * (float)i;
    }
    gd_tensor_write(p, pv, sizeof pv);
    gd_tensor_write(p2, pv, sizeof pv);
    gd_tensor_write(m, mv, sizeof mv);
    gd_tensor_write(m2, mv, sizeof mv);
    gd_tensor_write(v, vv, sizeof vv);
    gd_tensor_write(v2, vv, sizeof vv);
    if (grad_dt == GD_F32) gd_tensor_write(gr, gv, sizeof gv);
    else gd_tensor_write(gr, gb, sizeof gb);
    gd_tensor_write(gr32, gv, sizeof gv);
    gd_tensor_write(step, &one, sizeof one);
    gd_tensor_write(lr, &rate, sizeof rate);
    gd_program *prog = gd_compile(g, 6, (gd_tensor *[]){out[0], out[1], out[2], out[3], ref[0], ref[2]}, GD_COMPILE_UPDATES);
    CHECK(prog != NULL, "%s: compile: %s", what, gd_ctx_error(ctx));
    if (prog != NULL && gd_program_run(prog) == GD_OK) {
        float a[N], b[N], va[N], vb[N];
        uint16_t cb[N];
        gd_tensor_read(p, a, sizeof a); // updated in place
        gd_tensor_read(p2, b, sizeof b);
        gd_tensor_read(v, va, sizeof va);
        gd_tensor_read(v2, vb, sizeof vb);
        gd_tensor_read(copy, cb, sizeof cb);
        for (int i = 0; i < N; i++) {
            CHECK(a[i] == b[i] && va[i] == vb[i], "%s: p'[%d] = %.9g, v' %.9g; without the copy %.9g, %.9g", what, i,
                  a[i], va[i], b[i], vb[i]);
            CHECK(a[i] != pv[i], "%s: p[%d] was not updated", what, i);
            uint16_t w = copy_dt == GD_BF16 ? gdp_f32_to_bf16(a[i]) : gdp_f32_to_f16(a[i]);
            CHECK(cb[i] == w, "%s: copy[%d] bits %04x, want %04x (p' = %.9g)", what, i, cb[i], w, a[i]);
        }
    } else if (prog != NULL) {
        CHECK(0, "%s: run: %s", what, gd_ctx_error(ctx));
    }
    gd_program_free(prog);
    // a copy must be a low-precision tensor of p's shape
    gd_tensor *c32 = gd_state(g, "c32", GD_F32, 1, (int64_t[]){N});
    gd_ctx_clear_error(ctx);
    CHECK(gd_op_multi(g, "adamw_update", 7, (gd_tensor *[]){p, gr32, m, v, step, lr, c32}, 2, at, 4, out) != GD_OK,
          "%s: an f32 copy should be refused", what);
    check_error("adamw f32 copy", (const char *[]){"copy", "bf16 or f16", NULL});
    gd_ctx_clear_error(ctx);
    gd_graph_free(g);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    test_matmul_as(GD_BF16);
    test_matmul_as(GD_F16);
    test_sum_mean_as(GD_BF16);
    test_sum_mean_as(GD_F16);
    test_undeclared_forms();
    test_adamw_copy(GD_BF16, GD_BF16);
    test_adamw_copy(GD_BF16, GD_F32);
    test_adamw_copy(GD_F16, GD_F16);
    test_adamw_copy(GD_F16, GD_F32);
    return tu_finish("test_ops_mixed");
}
