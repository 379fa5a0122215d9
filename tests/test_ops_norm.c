/* test_ops_norm.c — layer_norm and rms_norm through the reference: values against the
 * formulas computed here in double, gradients through gd_backward against central finite
 * differences of an independent double-precision forward written in this file (and the
 * closed forms of dweight and dbias), and the messages of bad operands. */
#include "gradus.h"
#include "testutil.h"

#include <math.h>
#include <string.h>

enum { R = 3, C = 5 };

/* x (R, C), weight (C), bias (C), c (R, C): the loss the gradients are taken of is
 * sum(norm(x) * c), so that every output element has its own weight in the loss. */
static const float xv[R * C] = {1, 2, 3, 4, 10, -0.5f, 0.25f, 0, 1.5f, -2, 3, 3.5f, 2.5f, 3, 2};
static const float wv[C] = {1.5f, -1, 0.5f, 2, 1};
static const float bv[C] = {0.1f, 0.2f, -0.3f, 0, 1};
static const float cv[R * C] = {1, -2, 0.5f, 3, 0, 1, 1, -1, 2, 0.25f, -3, 2, 1, 0, 0.5f};

/* ---- the forward in double, written from the definitions ----------------------------- */

/* kind 0: layer norm, 1: rms norm. w, b may be NULL. */
static void norm_rows(int kind, const double *x, const double *w, const double *b, double eps, double *y)
{
    for (int r = 0; r < R; r++) {
        const double *row = x + r * C;
        double mean = 0, var = 0;
        for (int k = 0; k < C; k++) mean += row[k] / C;
        for (int k = 0; k < C; k++)
            var += kind == 0 ? (row[k] - mean) * (row[k] - mean) / C : row[k] * row[k] / C;
        for (int k = 0; k < C; k++) {
            double v = (kind == 0 ? row[k] - mean : row[k]) / sqrt(var + eps);
            y[r * C + k] = v * (w != NULL ? w[k] : 1) + (b != NULL ? b[k] : 0);
        }
    }
}

static double loss_of(int kind, const double *x, const double *w, const double *b, double eps)
{
    double y[R * C], l = 0;
    norm_rows(kind, x, w, b, eps, y);
    for (int i = 0; i < R * C; i++) l += y[i] * cv[i];
    return l;
}

/* d loss / d x by central differences, in double. */
static void fd_dx(int kind, const double *w, const double *b, double eps, double *dx)
{
    double x[R * C];
    for (int i = 0; i < R * C; i++) x[i] = xv[i];
    for (int i = 0; i < R * C; i++) {
        const double h = 1e-6, keep = x[i];
        x[i] = keep + h;
        double lp = loss_of(kind, x, w, b, eps);
        x[i] = keep - h;
        double lm = loss_of(kind, x, w, b, eps);
        x[i] = keep;
        dx[i] = (lp - lm) / (2 * h);
    }
}

/* ---- the tests -------------------------------------------------------------------------- */

/* kind 0: layer_norm with n_aff = 0, 1 or 2 affine tensors; kind 1: rms_norm with 0 or 1. */
static void check_norm(int kind, int n_aff, double eps)
{
    char what[64];
    snprintf(what, sizeof what, "%s with %d affine", kind == 0 ? "layer_norm" : "rms_norm", n_aff);
    gd_graph *g = fresh();
    gd_tensor *x = in_f32(g, "x", 2, (int64_t[]){R, C}, xv);
    gd_tensor *w = n_aff >= 1 ? in_f32(g, "w", 1, (int64_t[]){C}, wv) : NULL;
    gd_tensor *b = n_aff >= 2 ? in_f32(g, "b", 1, (int64_t[]){C}, bv) : NULL;
    gd_tensor *c = in_f32(g, "c", 2, (int64_t[]){R, C}, cv);
    gd_tensor *y = kind == 0 ? gd_layer_norm(x, w, b, eps) : gd_rms_norm(x, w, eps);
    gd_tensor *loss = gd_sum(gd_mul(y, c), 0, NULL, 0);
    CHECK(loss != NULL && gd_backward(g, loss) == GD_OK, "%s: backward: %s", what, gd_ctx_error(ctx));
    gd_tensor *t[4] = {y, gd_grad(g, x), w != NULL ? gd_grad(g, w) : y, b != NULL ? gd_grad(g, b) : y};
    gd_program *p = compile_run(g, 4, t);
    if (p != NULL) {
        double xd[R * C], wd[C], bd[C], want[R * C], dx[R * C], dw[C] = {0}, db[C] = {0};
        for (int i = 0; i < R * C; i++) xd[i] = xv[i];
        for (int k = 0; k < C; k++) wd[k] = wv[k], bd[k] = bv[k];
        const double *wp = w != NULL ? wd : NULL, *bp = b != NULL ? bd : NULL;
        norm_rows(kind, xd, wp, bp, eps, want);
        expect_tensor(what, y, want, R * C, 1e-6);
        fd_dx(kind, wp, bp, eps, dx);
        snprintf(what + strlen(what), sizeof what - strlen(what), ", dx");
        expect_tensor(what, t[1], dx, R * C, 1e-4);
        // dweight = sum over rows of c * normalized x; dbias = sum over rows of c
        double xhat[R * C];
        norm_rows(kind, xd, NULL, NULL, eps, xhat);
        for (int r = 0; r < R; r++)
            for (int k = 0; k < C; k++) {
                dw[k] += cv[r * C + k] * xhat[r * C + k];
                db[k] += cv[r * C + k];
            }
        if (w != NULL) expect_tensor("dweight", t[2], dw, C, 1e-5);
        if (b != NULL) expect_tensor("dbias", t[3], db, C, 1e-6);
        gd_program_free(p);
    }
    gd_graph_free(g);
}

static void test_known_values(void)
{
    // a row 1, 2, 3, 4 by hand: mean 2.5, variance 1.25; mean of squares 7.5
    gd_graph *g = fresh();
    gd_tensor *x = in_f32(g, "x", 1, (int64_t[]){4}, (float[]){1, 2, 3, 4});
    gd_tensor *ln = gd_layer_norm(x, NULL, NULL, 0.0);
    gd_tensor *rms = gd_rms_norm(x, NULL, 0.0);
    gd_tensor *t[] = {ln, rms};
    gd_program *p = compile_run(g, 2, t);
    if (p != NULL) {
        const double s = sqrt(1.25), q = sqrt(7.5);
        expect_tensor("layer_norm of 1..4", ln, (double[]){-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s}, 4, 1e-6);
        expect_tensor("rms_norm of 1..4", rms, (double[]){1 / q, 2 / q, 3 / q, 4 / q}, 4, 1e-6);
        gd_program_free(p);
    }
    gd_graph_free(g);
}

static void test_errors(void)
{
    gd_graph *g = fresh();
    gd_tensor *x = in_f32(g, "x", 2, (int64_t[]){2, 4}, NULL);
    gd_tensor *w5 = in_f32(g, "w5", 1, (int64_t[]){5}, NULL);
    gd_tensor *w4 = in_f32(g, "w4", 1, (int64_t[]){4}, NULL);
    gd_tensor *h4 = gd_input(g, "h4", GD_F16, 1, (int64_t[]){4});
    CHECK(gd_layer_norm(x, w5, NULL, 1e-5) == NULL, "layer_norm weight [5] for x [2, 4] should fail");
    check_error("layer_norm weight", (const char *[]){"layer_norm", "weight", "[5]", "[2, 4]", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_layer_norm(x, w4, w5, 1e-5) == NULL, "layer_norm bias [5] for x [2, 4] should fail");
    check_error("layer_norm bias", (const char *[]){"layer_norm", "bias", "[5]", "[2, 4]", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_layer_norm(x, NULL, w4, 1e-5) == NULL, "layer_norm with a bias and no weight should fail");
    check_error("layer_norm bias only", (const char *[]){"layer_norm", "bias", "weight", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_rms_norm(x, h4, 1e-6) == NULL, "rms_norm of f32 x with an f16 weight should fail");
    check_error("rms_norm dtype", (const char *[]){"rms_norm", "weight", "f16[4]", "f32[2, 4]", NULL});
    gd_ctx_clear_error(ctx);
    gd_tensor *s = in_f32(g, "s", 0, NULL, NULL);
    CHECK(gd_rms_norm(s, NULL, 1e-6) == NULL, "rms_norm of a scalar should fail");
    check_error("rms_norm scalar", (const char *[]){"rms_norm", "f32[]", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_layer_norm(x, NULL, NULL, -1.0) == NULL, "a negative eps should fail");
    check_error("layer_norm eps", (const char *[]){"layer_norm", "eps", NULL});
    CHECK(gd_layer_norm(NULL, w4, NULL, 1e-5) == NULL, "NULL in, NULL out");
    gd_graph_free(g);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    test_known_values();
    for (int n_aff = 0; n_aff <= 2; n_aff++) check_norm(0, n_aff, 1e-5);
    check_norm(0, 2, 0.5); // a large eps changes every value: checks it is used where it belongs
    for (int n_aff = 0; n_aff <= 1; n_aff++) check_norm(1, n_aff, 1e-6);
    check_norm(1, 1, 0.5);
    test_errors();
    return tu_finish("test_ops_norm");
}
