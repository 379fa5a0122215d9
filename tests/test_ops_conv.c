/* test_ops_conv.c — conv2d, its backward ops, and max/avg pooling on the CPU reference.
 * Small cases are worked out by hand; general geometries (stride, padding, dilation,
 * groups, bias) are compared with the convolution written straight from its definition
 * here; the backward ops are checked by the adjoint identities
 *     <conv(x, w), dy> = <x, grad_input(dy, w)> = <w, grad_weight(dy, x)>
 * in float64; pooling backward by the counts of windows each element wins. */
#include "gradus.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static gd_tensor *input(gd_graph *g, const char *name, gd_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    gd_tensor *t = gd_input(g, name, dt, ndim, shape);
    if (t != NULL && data != NULL) gd_tensor_write(t, data, gd_dtype_size(dt) * (size_t)gd_tensor_numel(t));
    return t;
}

/* A deterministic spread of values in [-1, 1). */
static double val(int i, int salt) { return (double)((i * 37 + salt * 101) % 97) / 48.5 - 1.0; }

/* ---- conv2d ---------------------------------------------------------------------------- */

typedef struct geom {
    int N, C, H, W, Co, kh, kw, s, p, d, g;
} geom;

static int out_h(const geom *q) { return (q->H + 2 * q->p - q->d * (q->kh - 1) - 1) / q->s + 1; }
static int out_w(const geom *q) { return (q->W + 2 * q->p - q->d * (q->kw - 1) - 1) / q->s + 1; }

/* The definition: y[n, o, i, j] = b[o] + sum over c in o's group, taps (u, v) of
 * x[n, c, i s - p + u d, j s - p + v d] w[o, c - group start, u, v]. */
static void direct_conv(const geom *q, const double *x, const double *w, const double *b, double *y)
{
    int Ho = out_h(q), Wo = out_w(q), Cg = q->C / q->g, Cog = q->Co / q->g;
    for (int n = 0; n < q->N; n++)
        for (int o = 0; o < q->Co; o++)
            for (int i = 0; i < Ho; i++)
                for (int j = 0; j < Wo; j++) {
                    double s = b != NULL ? b[o] : 0;
                    for (int c = 0; c < Cg; c++)
                        for (int u = 0; u < q->kh; u++)
                            for (int v = 0; v < q->kw; v++) {
                                int h = i * q->s - q->p + u * q->d, ww = j * q->s - q->p + v * q->d;
                                if (h < 0 || h >= q->H || ww < 0 || ww >= q->W) continue;
                                int ci = (o / Cog) * Cg + c;
                                s += x[((n * q->C + ci) * q->H + h) * q->W + ww] * w[((o * Cg + c) * q->kh + u) * q->kw + v];
                            }
                    y[((n * q->Co + o) * Ho + i) * Wo + j] = s;
                }
}

static void test_conv_by_hand(void)
{
    // x = 1..9 (1, 1, 3, 3), w = [[1, 2], [3, 4]]: y[0,0] = 1 + 4 + 12 + 20 = 37 and so on
    static const float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[4] = {1, 2, 3, 4}, b[1] = {1};
    static const double y[4] = {38, 48, 68, 78};
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *tx = input(g, "x", GD_F32, 4, (int64_t[]){1, 1, 3, 3}, x);
    gd_tensor *tw = input(g, "w", GD_F32, 4, (int64_t[]){1, 1, 2, 2}, w);
    gd_tensor *tb = input(g, "b", GD_F32, 1, (int64_t[]){1}, b);
    float out[9];
    gd_tensor *ty = gd_conv2d(tx, tw, tb, 1, 0, 1, 1);
    expect_shape(ty, 4, (int64_t[]){1, 1, 2, 2});
    if (run1_read(g, ty, out)) expect_close("conv2d 2x2", out, y, 4, 0);

    // all-ones 3x3 kernel, padding 1: the sum of each pixel's neighbourhood
    static const float ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    static const double nb[9] = {12, 21, 16, 27, 45, 33, 24, 39, 28}, nb2[4] = {12, 16, 24, 28};
    gd_tensor *t1 = input(g, "ones", GD_F32, 4, (int64_t[]){1, 1, 3, 3}, ones);
    if (run1_read(g, gd_conv2d(tx, t1, NULL, 1, 1, 1, 1), out)) expect_close("conv2d padding 1", out, nb, 9, 0);
    // stride 2 keeps the corners of that
    if (run1_read(g, gd_conv2d(tx, t1, NULL, 2, 1, 1, 1), out)) expect_close("conv2d stride 2", out, nb2, 4, 0);
    // dilation 2, padding 2: y[i, j] sums x[i - 2 + 2u, j - 2 + 2v], which lands on rows
    // {0, 2} for i = 0 or 2 and on row 1 alone for i = 1 (the same for columns)
    gd_tensor *yd = gd_conv2d(tx, t1, NULL, 1, 2, 2, 1);
    expect_shape(yd, 4, (int64_t[]){1, 1, 3, 3});
    static const double want[9] = {1 + 3 + 7 + 9, 2 + 8, 1 + 3 + 7 + 9, 4 + 6, 5, 4 + 6, 1 + 3 + 7 + 9, 2 + 8, 1 + 3 + 7 + 9};
    if (run1_read(g, yd, out)) expect_close("conv2d dilation 2", out, want, 9, 0);
    gd_graph_free(g);
}

static void test_conv_general(void)
{
    static const geom cases[] = {
        {2, 3, 5, 5, 4, 3, 3, 1, 0, 1, 1},
        {2, 4, 7, 6, 6, 3, 2, 2, 1, 2, 2},  // groups, stride, padding, dilation, non-square kernel
        {1, 4, 6, 6, 4, 3, 3, 2, 1, 1, 4},  // depthwise
        {3, 2, 4, 5, 3, 1, 1, 1, 0, 1, 1},  // 1x1
        {1, 2, 6, 6, 2, 3, 3, 2, 0, 1, 1},  // stride leaves the last row unused
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const geom *q = &cases[k];
        int Cg = q->C / q->g, Ho = out_h(q), Wo = out_w(q);
        int nx = q->N * q->C * q->H * q->W, nw = q->Co * Cg * q->kh * q->kw, ny = q->N * q->Co * Ho * Wo;
        double *x = malloc(sizeof(double) * nx), *w = malloc(sizeof(double) * nw), *b = malloc(sizeof(double) * q->Co);
        double *y = malloc(sizeof(double) * ny);
        float *xf = malloc(sizeof(float) * nx), *wf = malloc(sizeof(float) * nw), *bf = malloc(sizeof(float) * q->Co);
        float *yf = malloc(sizeof(float) * ny);
        for (int i = 0; i < nx; i++) xf[i] = (float)val(i, 1), x[i] = xf[i];
        for (int i = 0; i < nw; i++) wf[i] = (float)val(i, 2), w[i] = wf[i];
        for (int i = 0; i < q->Co; i++) bf[i] = (float)val(i, 3), b[i] = bf[i];
        direct_conv(q, x, w, b, y);
        gd_graph *g = gd_graph_new(ctx);
        gd_tensor *tx = input(g, "x", GD_F32, 4, (int64_t[]){q->N, q->C, q->H, q->W}, xf);
        gd_tensor *tw = input(g, "w", GD_F32, 4, (int64_t[]){q->Co, Cg, q->kh, q->kw}, wf);
        gd_tensor *tb = input(g, "b", GD_F32, 1, (int64_t[]){q->Co}, bf);
        gd_tensor *ty = gd_conv2d(tx, tw, tb, q->s, q->p, q->d, q->g);
        expect_shape(ty, 4, (int64_t[]){q->N, q->Co, Ho, Wo});
        char what[48];
        snprintf(what, sizeof what, "conv2d case %zu", k);
        if (run1_read(g, ty, yf)) expect_close(what, yf, y, ny, 1e-5);
        gd_graph_free(g);
        free(x), free(w), free(b), free(y), free(xf), free(wf), free(bf), free(yf);
    }
}

static double dot(const double *a, const double *b, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* The backward ops are the adjoints of the convolution in x and in w. */
static void test_conv_adjoints(void)
{
    static const geom cases[] = {
        {2, 3, 5, 5, 4, 3, 3, 1, 0, 1, 1},
        {2, 4, 7, 6, 6, 3, 2, 2, 1, 2, 2},
        {1, 4, 6, 6, 4, 3, 3, 2, 1, 1, 4},
        {1, 2, 6, 6, 2, 3, 3, 2, 0, 1, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const geom *q = &cases[k];
        int Cg = q->C / q->g, Ho = out_h(q), Wo = out_w(q);
        int nx = q->N * q->C * q->H * q->W, nw = q->Co * Cg * q->kh * q->kw, ny = q->N * q->Co * Ho * Wo;
        double *x = malloc(sizeof(double) * nx), *w = malloc(sizeof(double) * nw), *y = malloc(sizeof(double) * ny);
        double *dy = malloc(sizeof(double) * ny), *dx = malloc(sizeof(double) * nx), *dw = malloc(sizeof(double) * nw);
        for (int i = 0; i < nx; i++) x[i] = val(i, 4);
        for (int i = 0; i < nw; i++) w[i] = val(i, 5);
        for (int i = 0; i < ny; i++) dy[i] = val(i, 6);
        direct_conv(q, x, w, NULL, y);
        int64_t xs[4] = {q->N, q->C, q->H, q->W}, ws[4] = {q->Co, Cg, q->kh, q->kw};
        gd_graph *g = gd_graph_new(ctx);
        gd_tensor *tx = input(g, "x", GD_F64, 4, xs, x), *tw = input(g, "w", GD_F64, 4, ws, w);
        gd_tensor *tdy = input(g, "dy", GD_F64, 4, (int64_t[]){q->N, q->Co, Ho, Wo}, dy);
        gd_attr at[5] = {gd_attr_i("stride", q->s), gd_attr_i("padding", q->p), gd_attr_i("dilation", q->d),
                         gd_attr_i("groups", q->g), gd_attr_is("input_shape", 4, xs)};
        gd_tensor *gi = gd_op(g, "conv2d_grad_input", 2, (gd_tensor *[]){tdy, tw}, 5, at);
        at[4] = gd_attr_is("weight_shape", 4, ws);
        gd_tensor *gw = gd_op(g, "conv2d_grad_weight", 2, (gd_tensor *[]){tdy, tx}, 5, at);
        expect_shape(gi, 4, xs);
        expect_shape(gw, 4, ws);
        if (run_read(g, 2, (gd_tensor *[]){gi, gw}, (void *[]){dx, dw})) {
            double lhs = dot(y, dy, ny), rx = dot(x, dx, nx), rw = dot(w, dw, nw);
            CHECK(fabs(lhs - rx) <= 1e-10 * (1 + fabs(lhs)), "case %zu: <conv(x,w), dy> = %.15g but <x, grad_input> = %.15g",
                  k, lhs, rx);
            CHECK(fabs(lhs - rw) <= 1e-10 * (1 + fabs(lhs)), "case %zu: <conv(x,w), dy> = %.15g but <w, grad_weight> = %.15g",
                  k, lhs, rw);
        }
        gd_graph_free(g);
        free(x), free(w), free(y), free(dy), free(dx), free(dw);
    }
}

/* d sum(conv2d(x, w, b)): db[o] = N Ho Wo; dw[o, c, u, v] = sum of the inputs tap (u, v)
 * sees; dx[c, h, w] = sum of the weights of every tap that sees (h, w). */
static void test_conv_backward(void)
{
    static const float x[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[4] = {1, 2, 3, 4}, b[1] = {0};
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *tx = gd_param(g, "x", GD_F32, 4, (int64_t[]){1, 1, 3, 3});
    gd_tensor *tw = gd_param(g, "w", GD_F32, 4, (int64_t[]){1, 1, 2, 2});
    gd_tensor *tb = gd_param(g, "b", GD_F32, 1, (int64_t[]){1});
    gd_tensor_write(tx, x, sizeof x);
    gd_tensor_write(tw, w, sizeof w);
    gd_tensor_write(tb, b, sizeof b);
    CHECK(gd_backward(g, gd_sum(gd_conv2d(tx, tw, tb, 1, 0, 1, 1), 0, NULL, 0)) == GD_OK, "backward: %s",
          gd_ctx_error(ctx));
    gd_tensor *t[3] = {gd_grad(g, tx), gd_grad(g, tw), gd_grad(g, tb)};
    float dx[9], dw[4], db[1];
    // each tap sees a 2x2 block of x: (0,0) 1+2+4+5, (0,1) 2+3+5+6, (1,0) 4+5+7+8, (1,1) 5+6+8+9
    static const double wdw[4] = {12, 16, 24, 28}, wdb[1] = {4};
    // the corner pixel is seen by one tap, edges by two, the centre by all four
    static const double wdx[9] = {1, 3, 2, 4, 10, 6, 3, 7, 4};
    if (run_read(g, 3, t, (void *[]){dx, dw, db})) {
        expect_close("conv2d dx", dx, wdx, 9, 0);
        expect_close("conv2d dw", dw, wdw, 4, 0);
        expect_close("conv2d db", db, wdb, 1, 0);
    }
    gd_graph_free(g);
}

/* ---- pooling ------------------------------------------------------------------------------- */

static void test_pool_forward(void)
{
    static const float x[16] = {1, 2, 5, 3, 4, 0, 1, 1, 7, 8, 2, 2, 6, 9, 3, 4};
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *tx = input(g, "x", GD_F32, 4, (int64_t[]){1, 1, 4, 4}, x);
    float out[16];
    static const double m2[4] = {4, 5, 9, 4}, m3[4] = {4, 5, 9, 9};
    if (run1_read(g, gd_max_pool2d(tx, 2, 0, 0), out)) expect_close("max_pool2d k2", out, m2, 4, 0);
    gd_tensor *y3 = gd_max_pool2d(tx, 3, 2, 1);
    expect_shape(y3, 4, (int64_t[]){1, 1, 2, 2});
    if (run1_read(g, y3, out)) expect_close("max_pool2d k3 s2 p1", out, m3, 4, 0);

    // all negative: the padding is -inf, not 0, so a window of one real element returns it
    static const float neg[9] = {-1, -2, -3, -4, -5, -6, -7, -8, -9};
    gd_tensor *tn = input(g, "neg", GD_F32, 4, (int64_t[]){1, 1, 3, 3}, neg);
    gd_tensor *yn = gd_max_pool2d(tn, 2, 1, 1);
    expect_shape(yn, 4, (int64_t[]){1, 1, 4, 4});
    static const double mn[16] = {-1, -1, -2, -3, -1, -1, -2, -3, -4, -4, -5, -6, -7, -7, -8, -9};
    if (run1_read(g, yn, out)) expect_close("max_pool2d negative padded", out, mn, 16, 0);

    // avg: 1..16 in 2x2 blocks; then 1..9 with padding counted in the divisor
    float seq[16];
    for (int i = 0; i < 16; i++) seq[i] = (float)(i + 1);
    gd_tensor *ts = input(g, "seq", GD_F32, 4, (int64_t[]){1, 1, 4, 4}, seq);
    static const double a2[4] = {3.5, 5.5, 11.5, 13.5};
    if (run1_read(g, gd_avg_pool2d(ts, 2, 2, 0), out)) expect_close("avg_pool2d k2", out, a2, 4, 1e-7);
    gd_tensor *t9 = input(g, "nine", GD_F32, 4, (int64_t[]){1, 1, 3, 3}, seq);
    static const double a3[4] = {12 / 9.0, 16 / 9.0, 24 / 9.0, 28 / 9.0};
    if (run1_read(g, gd_avg_pool2d(t9, 3, 2, 1), out)) expect_close("avg_pool2d count_include_pad", out, a3, 4, 1e-7);

    // two channels and two images pool independently: channel k holds seq + 100 k
    float four[4 * 16];
    for (int i = 0; i < 64; i++) four[i] = (float)(i % 16 + 1 + 100 * (i / 16));
    gd_tensor *t4 = input(g, "four", GD_F32, 4, (int64_t[]){2, 2, 4, 4}, four);
    double m4[16];
    for (int pl = 0; pl < 4; pl++) {
        static const double base[4] = {6, 8, 14, 16};
        for (int i = 0; i < 4; i++) m4[pl * 4 + i] = base[i] + 100 * pl;
    }
    if (run1_read(g, gd_max_pool2d(t4, 2, 2, 0), out)) expect_close("max_pool2d planes", out, m4, 16, 0);
    gd_graph_free(g);
}

static void test_pool_backward(void)
{
    // ties go to the first element of the window
    gd_graph *g = gd_graph_new(ctx);
    static const float ones[4] = {1, 1, 1, 1}, dy1[1] = {5};
    gd_tensor *tx = input(g, "x", GD_F32, 4, (int64_t[]){1, 1, 2, 2}, ones);
    gd_tensor *tdy = input(g, "dy", GD_F32, 4, (int64_t[]){1, 1, 1, 1}, dy1);
    gd_attr at[3] = {gd_attr_i("kernel", 2), gd_attr_i("stride", 2), gd_attr_i("padding", 0)};
    float out[16];
    static const double tie[4] = {5, 0, 0, 0};
    if (run1_read(g, gd_op(g, "max_pool2d_grad", 2, (gd_tensor *[]){tdy, tx}, 3, at), out)) expect_close("max_pool2d_grad tie", out, tie, 4, 0);

    // overlapping windows that share their max add up
    static const float x2[6] = {0, 3, 0, 0, 0, 0}, dy2[2] = {1.5f, 2};
    gd_tensor *tx2 = input(g, "x2", GD_F32, 4, (int64_t[]){1, 1, 2, 3}, x2);
    gd_tensor *tdy2 = input(g, "dy2", GD_F32, 4, (int64_t[]){1, 1, 1, 2}, dy2);
    at[1] = gd_attr_i("stride", 1);
    static const double ov[6] = {0, 3.5, 0, 0, 0, 0};
    if (run1_read(g, gd_op(g, "max_pool2d_grad", 2, (gd_tensor *[]){tdy2, tx2}, 3, at), out))
        expect_close("max_pool2d_grad overlap", out, ov, 6, 0);
    gd_graph_free(g);

    // through autodiff: d sum(max_pool2d(x)) counts the windows each element wins; and
    // d sum(avg_pool2d(x)) = (windows covering the element) / kernel^2
    static const float x[16] = {1, 2, 5, 3, 4, 0, 1, 1, 7, 8, 2, 2, 6, 9, 3, 4};
    g = gd_graph_new(ctx);
    gd_tensor *p = gd_param(g, "p", GD_F32, 4, (int64_t[]){1, 1, 4, 4});
    gd_tensor *q = gd_param(g, "q", GD_F32, 4, (int64_t[]){1, 1, 3, 3});
    gd_tensor_write(p, x, sizeof x);
    float nine[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    gd_tensor_write(q, nine, sizeof nine);
    gd_tensor *loss = gd_add(gd_sum(gd_max_pool2d(p, 3, 2, 1), 0, NULL, 0), gd_sum(gd_avg_pool2d(q, 3, 2, 1), 0, NULL, 0));
    CHECK(gd_backward(g, loss) == GD_OK, "backward: %s", gd_ctx_error(ctx));
    gd_tensor *t[2] = {gd_grad(g, p), gd_grad(g, q)};
    float dp[16], dq[9];
    // windows (from test_pool_forward): 4 at (1,0) wins (0,0); 5 at (0,2) wins (0,1);
    // 9 at (3,1) wins both (1,0) and (1,1)
    double wp[16] = {0};
    wp[4] = 1, wp[2] = 1, wp[13] = 2;
    double wq[9];
    static const double cover[3] = {1, 2, 1};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) wq[i * 3 + j] = cover[i] * cover[j] / 9;
    if (run_read(g, 2, t, (void *[]){dp, dq})) {
        expect_close("max_pool2d dx", dp, wp, 16, 0);
        expect_close("avg_pool2d dx", dq, wq, 9, 1e-7);
    }
    gd_graph_free(g);
}

static void test_errors(void)
{
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = input(g, "x", GD_F32, 4, (int64_t[]){1, 3, 5, 5}, NULL);
    gd_tensor *w = input(g, "w", GD_F32, 4, (int64_t[]){4, 2, 3, 3}, NULL);
    expect_error(gd_conv2d(x, w, NULL, 1, 0, 1, 1), "channels", 3, (const char *[]){"conv2d", "[1, 3, 5, 5]", "[4, 2, 3, 3]"});
    gd_tensor *big = input(g, "big", GD_F32, 4, (int64_t[]){4, 3, 7, 7}, NULL);
    expect_error(gd_conv2d(x, big, NULL, 1, 0, 1, 1), "kernel too big", 3,
                 (const char *[]){"conv2d", "[1, 3, 5, 5]", "[4, 3, 7, 7]"});
    CHECK(gd_conv2d(x, big, NULL, 1, 1, 1, 1) != NULL, "7x7 kernel fits 5x5 padded by 1: %s", gd_ctx_error(ctx));
    gd_tensor *w3 = input(g, "w3", GD_F32, 4, (int64_t[]){4, 3, 3, 3}, NULL), *b5 = input(g, "b5", GD_F32, 1, (int64_t[]){5}, NULL);
    expect_error(gd_conv2d(x, w3, b5, 1, 0, 1, 1), "bias", 3, (const char *[]){"conv2d", "[5]", "[4, 3, 3, 3]"});
    expect_error(gd_conv2d(x, w3, NULL, 1, 0, 1, 2), "groups", 2, (const char *[]){"conv2d", "groups=2"});
    expect_error(gd_conv2d(x, w3, NULL, 0, 0, 1, 1), "stride 0", 2, (const char *[]){"conv2d", "stride=0"});
    gd_tensor *x3 = input(g, "x3", GD_F32, 3, (int64_t[]){3, 5, 5}, NULL);
    expect_error(gd_conv2d(x3, w3, NULL, 1, 0, 1, 1), "3-D input", 2, (const char *[]){"conv2d", "[3, 5, 5]"});
    gd_tensor *wd = gd_input(g, "wd", GD_F64, 4, (int64_t[]){4, 3, 3, 3});
    expect_error(gd_conv2d(x, wd, NULL, 1, 0, 1, 1), "dtype", 3, (const char *[]){"conv2d", "f32[1, 3, 5, 5]", "f64[4, 3, 3, 3]"});
    // a dy that does not match the geometry
    gd_tensor *dy = input(g, "dy", GD_F32, 4, (int64_t[]){1, 4, 2, 2}, NULL);
    gd_attr at[5] = {gd_attr_i("stride", 1), gd_attr_i("padding", 0), gd_attr_i("dilation", 1), gd_attr_i("groups", 1),
                     gd_attr_is("input_shape", 4, (int64_t[]){1, 3, 5, 5})};
    expect_error(gd_op(g, "conv2d_grad_input", 2, (gd_tensor *[]){dy, w3}, 5, at), "dy shape", 3,
                 (const char *[]){"conv2d_grad_input", "[1, 4, 2, 2]", "[1, 4, 3, 3]"});

    expect_error(gd_max_pool2d(x, 2, 2, 2), "pool padding", 2, (const char *[]){"max_pool2d", "padding=2"});
    expect_error(gd_avg_pool2d(x3, 2, 2, 0), "pool 3-D", 2, (const char *[]){"avg_pool2d", "[3, 5, 5]"});
    expect_error(gd_max_pool2d(x, 6, 1, 0), "pool kernel too big", 3, (const char *[]){"max_pool2d", "kernel=6", "[1, 3, 5, 5]"});
    expect_error(gd_max_pool2d(x, 0, 1, 0), "pool kernel 0", 2, (const char *[]){"max_pool2d", "kernel=0"});

    CHECK(gd_conv2d(NULL, w, NULL, 1, 0, 1, 1) == NULL && gd_max_pool2d(NULL, 2, 2, 0) == NULL, "NULL should propagate");
    CHECK(gd_ctx_error(ctx)[0] == '\0', "NULL propagation left a message: %s", gd_ctx_error(ctx));
    gd_graph_free(g);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    test_conv_by_hand();
    test_conv_general();
    test_conv_adjoints();
    test_conv_backward();
    test_pool_forward();
    test_pool_backward();
    test_errors();
    return tu_finish("test_ops_conv");
}
