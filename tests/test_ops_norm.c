/* test_ops_norm.c — layer_norm and rms_norm through the reference: values against the
 * formulas computed here in double, gradients through gd_backward against central finite
 * differences of an independent double-precision forward written in this file (and the
 * closed forms of dweight and dbias), and the messages of bad operands. */
#include "gradus.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
            failures++;                                 \
        }                                               \
    } while (0)

static gd_ctx *ctx;

enum { R = 3, C = 5 };

/* x (R, C), weight (C), bias (C), c (R, C): the loss the gradients are taken of is
 * sum(norm(x) * c), so that every output element has its own weight in the loss. */
static const float xv[R * C] = {1, 2, 3, 4, 10, -0.5f, 0.25f, 0, 1.5f, -2, 3, 3.5f, 2.5f, 3, 2};
static const float wv[C] = {1.5f, -1, 0.5f, 2, 1};
static const float bv[C] = {0.1f, 0.2f, -0.3f, 0, 1};
static const float cv[R * C] = {1, -2, 0.5f, 3, 0, 1, 1, -1, 2, 0.25f, -3, 2, 1, 0, 0.5f};

static gd_graph *fresh(void)
{
    gd_ctx_clear_error(ctx);
    return gd_graph_new(ctx);
}

static gd_tensor *in_f32(gd_graph *g, const char *name, int nd, const int64_t *shape, const float *v)
{
    gd_tensor *t = gd_input(g, name, GD_F32, nd, shape);
    if (t != NULL && v != NULL) gd_tensor_write(t, v, (size_t)gd_tensor_numel(t) * sizeof(float));
    return t;
}

static gd_program *run(gd_graph *g, int n, gd_tensor **targets)
{
    for (int i = 0; i < n; i++) {
        if (targets[i] == NULL) {
            CHECK(0, "target %d was not built: %s", i, gd_ctx_error(ctx));
            return NULL;
        }
    }
    gd_program *p = gd_compile(g, n, targets, 0);
    CHECK(p != NULL, "compile: %s", gd_ctx_error(ctx));
    if (p == NULL) return NULL;
    gd_status s = gd_program_run(p);
    CHECK(s == GD_OK, "run: %s", gd_ctx_error(ctx));
    if (s != GD_OK) {
        gd_program_free(p);
        return NULL;
    }
    return p;
}

static void expect(const char *what, gd_tensor *t, const double *want, int n, double tol)
{
    float got[64];
    CHECK(gd_tensor_numel(t) == n, "%s: %lld elements, %d expected", what, (long long)gd_tensor_numel(t), n);
    if (gd_tensor_numel(t) != n || n > 64) return;
    gd_status s = gd_tensor_read(t, got, (size_t)n * sizeof(float));
    CHECK(s == GD_OK, "%s: read: %s", what, gd_ctx_error(ctx));
    if (s != GD_OK) return;
    for (int i = 0; i < n; i++)
        CHECK(fabs(got[i] - want[i]) <= tol * (1.0 + fabs(want[i])), "%s[%d] = %.9g, expected %.9g", what, i,
              got[i], want[i]);
}

static void check_error(const char *what, const char *const *parts)
{
    const char *e = gd_ctx_error(ctx);
    for (int i = 0; parts[i] != NULL; i++)
        CHECK(strstr(e, parts[i]) != NULL, "%s: message '%s' lacks '%s'", what, e, parts[i]);
}

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
    gd_program *p = run(g, 4, t);
    if (p != NULL) {
        double xd[R * C], wd[C], bd[C], want[R * C], dx[R * C], dw[C] = {0}, db[C] = {0};
        for (int i = 0; i < R * C; i++) xd[i] = xv[i];
        for (int k = 0; k < C; k++) wd[k] = wv[k], bd[k] = bv[k];
        const double *wp = w != NULL ? wd : NULL, *bp = b != NULL ? bd : NULL;
        norm_rows(kind, xd, wp, bp, eps, want);
        expect(what, y, want, R * C, 1e-6);
        fd_dx(kind, wp, bp, eps, dx);
        snprintf(what + strlen(what), sizeof what - strlen(what), ", dx");
        expect(what, t[1], dx, R * C, 1e-4);
        // dweight = sum over rows of c * normalized x; dbias = sum over rows of c
        double xhat[R * C];
        norm_rows(kind, xd, NULL, NULL, eps, xhat);
        for (int r = 0; r < R; r++)
            for (int k = 0; k < C; k++) {
                dw[k] += cv[r * C + k] * xhat[r * C + k];
                db[k] += cv[r * C + k];
            }
        if (w != NULL) expect("dweight", t[2], dw, C, 1e-5);
        if (b != NULL) expect("dbias", t[3], db, C, 1e-6);
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
    gd_program *p = run(g, 2, t);
    if (p != NULL) {
        const double s = sqrt(1.25), q = sqrt(7.5);
        expect("layer_norm of 1..4", ln, (double[]){-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s}, 4, 1e-6);
        expect("rms_norm of 1..4", rms, (double[]){1 / q, 2 / q, 3 / q, 4 / q}, 4, 1e-6);
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
    if (gd_ctx_create(&ctx, &(gd_ctx_options){.size = sizeof(gd_ctx_options), .no_plugins = 1}) != GD_OK) {
        printf("FAIL: no context\n");
        return 1;
    }
    test_known_values();
    for (int n_aff = 0; n_aff <= 2; n_aff++) check_norm(0, n_aff, 1e-5);
    check_norm(0, 2, 0.5); // a large eps changes every value: checks it is used where it belongs
    for (int n_aff = 0; n_aff <= 1; n_aff++) check_norm(1, n_aff, 1e-6);
    check_norm(1, 1, 0.5);
    test_errors();
    gd_ctx_free(ctx);
    if (failures) printf("%d failure(s)\n", failures);
    else printf("ok\n");
    return failures != 0;
}
