/* test_ops_attention.c — rope and attention through the reference: values worked out by
 * hand, a naive attention written here (scores masked with -inf, as in the textbook),
 * gradients against central finite differences of that naive attention in float64, and
 * the messages of bad shapes. */
#include "gradus.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>

/* Smooth, repeatable values in [-1, 1]. */
static void fill(double *v, int n, int salt)
{
    for (int i = 0; i < n; i++) v[i] = sin(1.7 * i + 0.37 * salt + 0.1);
}

/* ---- rope ------------------------------------------------------------------------- */

static void test_rope_values(void)
{
    gd_graph *g = fresh();
    // x (B=1, T=2, H=2, D=4): at t = 0 nothing turns; at t = 1 pair i turns by theta^(-2i/4)
    gd_tensor *x = gd_input(g, "x", GD_F32, 4, (int64_t[]){1, 2, 2, 4});
    gd_tensor *x1 = gd_input(g, "x1", GD_F32, 4, (int64_t[]){1, 1, 2, 4}); // the t = 1 row alone
    gd_tensor *pos = gd_input(g, "pos", GD_I64, 0, NULL);
    gd_tensor *inter = gd_rope(x, 10000, 1, NULL);
    gd_tensor *halves = gd_rope(x, 10000, 0, NULL);
    gd_tensor *offset = gd_rope(x1, 10000, 1, pos);  // position 0 + 1: the same as t = 1 above
    gd_tensor *theta100 = gd_rope(x, 100, 1, NULL);
    gd_tensor *t[4] = {inter, halves, offset, theta100};
    if (inter == NULL || halves == NULL || offset == NULL || theta100 == NULL) {
        CHECK(0, "rope builders: %s", gd_ctx_error(ctx));
        return;
    }
    float xv[16] = {1, 2, 3, 4, 5, 6, 7, 8, /* t = 1: */ 1, 0, 0, 0, 0, 0, 1, 0};
    gd_tensor_write(x, xv, sizeof xv);
    gd_tensor_write(x1, xv + 8, 8 * sizeof(float));
    int64_t one = 1;
    gd_tensor_write(pos, &one, sizeof one);
    gd_program *p = compile_run(g, 4, t);
    if (p == NULL) return;
    float iv[16], hv[16], ov[8], tv[16];
    gd_tensor_read(inter, iv, sizeof iv);
    gd_tensor_read(halves, hv, sizeof hv);
    gd_tensor_read(offset, ov, sizeof ov);
    gd_tensor_read(theta100, tv, sizeof tv);
    double c1 = cos(1.0), s1 = sin(1.0), c01 = cos(0.01), s01 = sin(0.01), c1_10 = cos(0.1), s1_10 = sin(0.1);
    // interleaved: pairs (0, 1) turn by 1 rad, (2, 3) by 10000^(-1/2) = 0.01 rad
    const double wi[8] = {c1, s1, 0, 0, 0, 0, c01, s01};
    // halves: pairs (0, 2) turn by 1 rad, (1, 3) by 0.01 rad; head 1 has x2 = 1, the second of pair 0
    const double wh[8] = {c1, 0, s1, 0, -s1, 0, c1, 0};
    // theta 100: pair (2, 3) turns by 100^(-1/2) = 0.1 rad
    const double wt[8] = {c1, s1, 0, 0, 0, 0, c1_10, s1_10};
    for (int i = 0; i < 8; i++) {
        CHECK(iv[i] == xv[i] && hv[i] == xv[i] && tv[i] == xv[i], "rope at t = 0 must not turn element %d", i);
        CHECK(fabs(iv[8 + i] - wi[i]) < 1e-6, "interleaved t=1 [%d] = %g, want %g", i, iv[8 + i], wi[i]);
        CHECK(fabs(hv[8 + i] - wh[i]) < 1e-6, "halves t=1 [%d] = %g, want %g", i, hv[8 + i], wh[i]);
        CHECK(ov[i] == iv[8 + i], "pos_offset 1 at t = 0 [%d] = %g, want the t = 1 value %g", i, ov[i], iv[8 + i]);
        CHECK(fabs(tv[8 + i] - wt[i]) < 1e-6, "theta 100 t=1 [%d] = %g, want %g", i, tv[8 + i], wt[i]);
    }
    gd_program_free(p);

    CHECK(gd_rope(gd_input(g, "x3", GD_F32, 3, (int64_t[]){2, 3, 4}), 10000, 1, NULL) == NULL, "3-D rope should fail");
    check_error("rope 3-D", (const char *[]){"rope", "[2, 3, 4]", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_rope(gd_input(g, "xo", GD_F32, 4, (int64_t[]){1, 2, 1, 5}), 10000, 1, NULL) == NULL, "odd D should fail");
    check_error("rope odd", (const char *[]){"rope", "[1, 2, 1, 5]", "even", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_rope(x, 10000, 1, gd_input(g, "fpos", GD_F32, 0, NULL)) == NULL, "a float position should fail");
    check_error("rope float pos", (const char *[]){"rope", "pos", "i32 or i64", NULL});
    gd_graph_free(g);
}

/* loss = sum(rope(x) * w): dx is w turned back, dx0 = w0 c + w1 s, dx1 = -w0 s + w1 c. Also
 * the inverse rotation undoes the forward one. */
static void test_rope_grad(void)
{
    const int B = 2, T = 3, H = 2, D = 6, n = B * T * H * D, offset = 4;
    gd_graph *g = fresh();
    gd_tensor *x = gd_param(g, "x", GD_F64, 4, (int64_t[]){B, T, H, D});
    gd_tensor *w = gd_input(g, "w", GD_F64, 4, (int64_t[]){B, T, H, D});
    gd_tensor *pos = gd_state(g, "pos", GD_I32, 0, NULL);
    int32_t posv = offset;
    gd_tensor_write(pos, &posv, sizeof posv);
    for (int il = 0; il < 2; il++) {
        gd_tensor *y = gd_rope(x, 500, il, pos);
        gd_attr inv[3] = {gd_attr_f("theta", 500), gd_attr_i("interleaved", il), gd_attr_i("inverse", 1)};
        gd_tensor *back = gd_op(g, "rope", 2, (gd_tensor *[]){y, pos}, 3, inv);
        gd_graph *g2 = fresh();
        gd_tensor *x2 = gd_param(g2, "x", GD_F64, 4, (int64_t[]){B, T, H, D});
        gd_tensor *w2 = gd_input(g2, "w", GD_F64, 4, (int64_t[]){B, T, H, D});
        gd_tensor *pos2 = gd_state(g2, "pos", GD_I32, 0, NULL);
        gd_tensor_write(pos2, &posv, sizeof posv);
        gd_tensor *loss = gd_sum(gd_mul(gd_rope(x2, 500, il, pos2), w2), 0, NULL, 0);
        CHECK(loss != NULL && gd_backward(g2, loss) == GD_OK, "backward: %s", gd_ctx_error(ctx));
        gd_tensor *dx = gd_grad(g2, x2);
        if (back == NULL || dx == NULL) {
            CHECK(0, "rope grad builders: %s", gd_ctx_error(ctx));
            gd_graph_free(g2);
            continue;
        }
        double *xv = malloc(sizeof(double) * n * 4), *wv = xv + n, *bv = wv + n, *dv = bv + n;
        fill(xv, n, 1);
        fill(wv, n, 2);
        gd_tensor_write(x, xv, sizeof(double) * n);
        gd_tensor_write(w, wv, sizeof(double) * n);
        gd_tensor_write(x2, xv, sizeof(double) * n);
        gd_tensor_write(w2, wv, sizeof(double) * n);
        gd_program *p = compile_run(g, 1, &back), *p2 = compile_run(g2, 1, &dx);
        if (p != NULL && p2 != NULL) {
            gd_tensor_read(back, bv, sizeof(double) * n);
            gd_tensor_read(dx, dv, sizeof(double) * n);
            for (int i = 0; i < n; i++) CHECK(fabs(bv[i] - xv[i]) < 1e-12, "inverse(rope(x))[%d] != x", i);
            for (int b = 0; b < B; b++)
                for (int t = 0; t < T; t++)
                    for (int h = 0; h < H; h++)
                        for (int i = 0; i < D / 2; i++) {
                            double a = (t + offset) * pow(500.0, -2.0 * i / D), c = cos(a), s = sin(a);
                            int base = ((b * T + t) * H + h) * D;
                            int i0 = il ? base + 2 * i : base + i, i1 = il ? i0 + 1 : i0 + D / 2;
                            double g0 = wv[i0] * c + wv[i1] * s, g1 = -wv[i0] * s + wv[i1] * c;
                            CHECK(fabs(dv[i0] - g0) < 1e-12 && fabs(dv[i1] - g1) < 1e-12,
                                  "rope grad (interleaved=%d) b%d t%d h%d pair %d: (%g, %g), want (%g, %g)", il, b, t,
                                  h, i, dv[i0], dv[i1], g0, g1);
                        }
        }
        gd_program_free(p);
        gd_program_free(p2);
        free(xv);
        gd_graph_free(g2);
    }
    gd_graph_free(g);
}

/* ---- attention -------------------------------------------------------------------- */

typedef struct attn_case {
    int B, H, Hkv, T, S, D, causal;
    double scale;
} attn_case;

/* softmax(scale q k^T + mask) v with masked scores at -inf, one (b, h, t) at a time. */
static void naive_attention(const attn_case *c, const double *q, const double *k, const double *v, double *out)
{
    double scale = c->scale > 0 ? c->scale : 1 / sqrt((double)c->D);
    double *sc = malloc(sizeof(double) * c->S);
    for (int b = 0; b < c->B; b++)
        for (int h = 0; h < c->H; h++) {
            int kh = h / (c->H / c->Hkv);
            for (int t = 0; t < c->T; t++) {
                const double *qt = q + ((b * c->H + h) * c->T + t) * c->D;
                double m = -INFINITY, z = 0;
                for (int s = 0; s < c->S; s++) {
                    const double *ks = k + ((b * c->Hkv + kh) * c->S + s) * c->D;
                    double dot = 0;
                    for (int d = 0; d < c->D; d++) dot += qt[d] * ks[d];
                    sc[s] = c->causal && s > t + c->S - c->T ? -INFINITY : scale * dot;
                    if (sc[s] > m) m = sc[s];
                }
                for (int s = 0; s < c->S; s++) z += exp(sc[s] - m);
                double *o = out + ((b * c->H + h) * c->T + t) * c->D;
                for (int d = 0; d < c->D; d++) {
                    o[d] = 0;
                    for (int s = 0; s < c->S; s++)
                        o[d] += exp(sc[s] - m) / z * v[((b * c->Hkv + kh) * c->S + s) * c->D + d];
                }
            }
        }
    free(sc);
}

/* Small cases worked out by hand. */
static void test_attention_hand(void)
{
    gd_graph *g = fresh();
    // one query, two keys: scores (0, ln 2) -> weights (1/3, 2/3) -> 3/3 + 2 * 6/3 = 5
    gd_tensor *q = gd_input(g, "q", GD_F32, 4, (int64_t[]){1, 1, 1, 1});
    gd_tensor *k = gd_input(g, "k", GD_F32, 4, (int64_t[]){1, 1, 2, 1});
    gd_tensor *k2 = gd_input(g, "k2", GD_F32, 4, (int64_t[]){1, 1, 2, 1});
    gd_tensor *v = gd_input(g, "v", GD_F32, 4, (int64_t[]){1, 1, 2, 1});
    gd_tensor *plain = gd_attention(q, k, v, 0, 0, NULL);
    gd_tensor *cache = gd_attention(q, k, v, 1, 0, NULL);      // the one query is the last: sees both keys
    gd_tensor *scaled = gd_attention(q, k2, v, 0, 2.0, NULL);  // keys (0, ln 2 / 2) at scale 2: also 5
    // two queries of zeros, causal: row 0 sees v0, row 1 averages v0 and v1
    gd_tensor *q0 = gd_input(g, "q0", GD_F32, 4, (int64_t[]){1, 1, 2, 1});
    gd_tensor *causal = gd_attention(q0, k, v, 1, 0, NULL);
    gd_tensor *t[4] = {plain, cache, scaled, causal};
    if (plain == NULL || cache == NULL || scaled == NULL || causal == NULL) {
        CHECK(0, "attention builders: %s", gd_ctx_error(ctx));
        return;
    }
    float one = 1, kv[2] = {0, (float)log(2.0)}, k2v[2] = {0, (float)(log(2.0) / 2)}, vv[2] = {3, 6}, zeros[2] = {0, 0};
    gd_tensor_write(q, &one, sizeof one);
    gd_tensor_write(k, kv, sizeof kv);
    gd_tensor_write(k2, k2v, sizeof k2v);
    gd_tensor_write(v, vv, sizeof vv);
    gd_tensor_write(q0, zeros, sizeof zeros);
    gd_program *p = compile_run(g, 4, t);
    if (p == NULL) return;
    float a, b, c, d[2];
    gd_tensor_read(plain, &a, sizeof a);
    gd_tensor_read(cache, &b, sizeof b);
    gd_tensor_read(scaled, &c, sizeof c);
    gd_tensor_read(causal, d, sizeof d);
    CHECK(fabs(a - 5) < 1e-5, "weights (1/3, 2/3) of (3, 6): %g, want 5", a);
    CHECK(fabs(b - 5) < 1e-5, "causal with S > T: the last query sees every key: %g, want 5", b);
    CHECK(fabs(c - 5) < 1e-5, "scale 2: %g, want 5", c);
    CHECK(fabs(d[0] - 3) < 1e-6 && fabs(d[1] - 4.5) < 1e-6, "causal rows: (%g, %g), want (3, 4.5)", d[0], d[1]);
    gd_program_free(p);
    gd_graph_free(g);
}

/* Output and gradients (float64) against the naive attention and its finite differences. */
static void check_case(const attn_case *c)
{
    int nq = c->B * c->H * c->T * c->D, nk = c->B * c->Hkv * c->S * c->D;
    char what[128];
    snprintf(what, sizeof what, "B%d H%d Hkv%d T%d S%d D%d causal%d scale%g", c->B, c->H, c->Hkv, c->T, c->S, c->D,
             c->causal, c->scale);
    gd_graph *g = fresh();
    gd_tensor *q = gd_param(g, "q", GD_F64, 4, (int64_t[]){c->B, c->H, c->T, c->D});
    gd_tensor *k = gd_param(g, "k", GD_F64, 4, (int64_t[]){c->B, c->Hkv, c->S, c->D});
    gd_tensor *v = gd_param(g, "v", GD_F64, 4, (int64_t[]){c->B, c->Hkv, c->S, c->D});
    gd_tensor *w = gd_input(g, "w", GD_F64, 4, (int64_t[]){c->B, c->H, c->T, c->D});
    gd_tensor *y = gd_attention(q, k, v, c->causal, c->scale, NULL);
    gd_tensor *loss = gd_sum(gd_mul(y, w), 0, NULL, 0);
    CHECK(loss != NULL && gd_backward(g, loss) == GD_OK, "%s: backward: %s", what, gd_ctx_error(ctx));
    gd_tensor *t[4] = {y, gd_grad(g, q), gd_grad(g, k), gd_grad(g, v)};
    if (t[1] == NULL || t[2] == NULL || t[3] == NULL) {
        CHECK(0, "%s: missing gradients: %s", what, gd_ctx_error(ctx));
        gd_graph_free(g);
        return;
    }
    double *buf = malloc(sizeof(double) * (4 * nq + 4 * nk));
    double *qv = buf, *wv = qv + nq, *yv = wv + nq, *dq = yv + nq; // (B, H, T, D) each
    double *kv = dq + nq, *vv = kv + nk, *dk = vv + nk, *dv = dk + nk; // (B, Hkv, S, D) each
    double *ref = malloc(sizeof(double) * nq);
    fill(qv, nq, 3);
    fill(kv, nk, 4);
    fill(vv, nk, 5);
    fill(wv, nq, 6);
    gd_tensor_write(q, qv, sizeof(double) * nq);
    gd_tensor_write(k, kv, sizeof(double) * nk);
    gd_tensor_write(v, vv, sizeof(double) * nk);
    gd_tensor_write(w, wv, sizeof(double) * nq);
    gd_program *p = compile_run(g, 4, t);
    if (p != NULL) {
        gd_tensor_read(y, yv, sizeof(double) * nq);
        gd_tensor_read(t[1], dq, sizeof(double) * nq);
        gd_tensor_read(t[2], dk, sizeof(double) * nk);
        gd_tensor_read(t[3], dv, sizeof(double) * nk);
        naive_attention(c, qv, kv, vv, ref);
        for (int i = 0; i < nq; i++)
            CHECK(fabs(yv[i] - ref[i]) < 1e-12, "%s: out[%d] = %.15g, naive %.15g", what, i, yv[i], ref[i]);
        // central differences of L = sum(attention * w) in each input element
        double *ins[3] = {qv, kv, vv}, *grads[3] = {dq, dk, dv};
        int ns[3] = {nq, nk, nk};
        const char *names[3] = {"dq", "dk", "dv"};
        for (int a = 0; a < 3; a++)
            for (int i = 0; i < ns[a]; i++) {
                double keep = ins[a][i], h = 1e-5, lp = 0, lm = 0;
                ins[a][i] = keep + h;
                naive_attention(c, qv, kv, vv, ref);
                for (int j = 0; j < nq; j++) lp += ref[j] * wv[j];
                ins[a][i] = keep - h;
                naive_attention(c, qv, kv, vv, ref);
                for (int j = 0; j < nq; j++) lm += ref[j] * wv[j];
                ins[a][i] = keep;
                double fd = (lp - lm) / (2 * h);
                CHECK(fabs(grads[a][i] - fd) < 1e-8, "%s: %s[%d] = %.12g, finite differences %.12g", what, names[a], i,
                      grads[a][i], fd);
            }
    }
    gd_program_free(p);
    free(buf);
    free(ref);
    gd_graph_free(g);
}

static void test_attention_against_naive(void)
{
    const attn_case cases[] = {
        {1, 2, 2, 3, 3, 4, 0, 0},   // plain multi-head
        {2, 2, 2, 4, 4, 3, 1, 0},   // causal, square
        {2, 4, 2, 3, 5, 4, 1, 0},   // grouped-query, KV cache (S > T), causal
        {1, 3, 1, 2, 6, 2, 0, 0.7}, // multi-query, explicit scale
        {1, 2, 1, 1, 7, 4, 1, 0},   // one decode step over a cache
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
}

/* f32 goes through the same reference: close to the float64 result. */
static void test_attention_f32(void)
{
    const attn_case c = {1, 4, 2, 5, 5, 8, 1, 0};
    int nq = c.B * c.H * c.T * c.D, nk = c.B * c.Hkv * c.S * c.D;
    gd_graph *g = fresh();
    gd_tensor *q = gd_input(g, "q", GD_F32, 4, (int64_t[]){c.B, c.H, c.T, c.D});
    gd_tensor *k = gd_input(g, "k", GD_F32, 4, (int64_t[]){c.B, c.Hkv, c.S, c.D});
    gd_tensor *v = gd_input(g, "v", GD_F32, 4, (int64_t[]){c.B, c.Hkv, c.S, c.D});
    gd_tensor *y = gd_attention(q, k, v, c.causal, c.scale, NULL);
    if (y == NULL) {
        CHECK(0, "attention f32: %s", gd_ctx_error(ctx));
        return;
    }
    double qd[160], kd[80], vd[80], ref[160];
    float qf[160], kf[80], vf[80], yf[160];
    fill(qd, nq, 7);
    fill(kd, nk, 8);
    fill(vd, nk, 9);
    for (int i = 0; i < nq; i++) qd[i] = qf[i] = (float)qd[i];
    for (int i = 0; i < nk; i++) {
        kd[i] = kf[i] = (float)kd[i];
        vd[i] = vf[i] = (float)vd[i];
    }
    gd_tensor_write(q, qf, sizeof(float) * nq);
    gd_tensor_write(k, kf, sizeof(float) * nk);
    gd_tensor_write(v, vf, sizeof(float) * nk);
    gd_program *p = compile_run(g, 1, &y);
    if (p != NULL) {
        gd_tensor_read(y, yf, sizeof(float) * nq);
        naive_attention(&c, qd, kd, vd, ref);
        for (int i = 0; i < nq; i++) CHECK(fabs(yf[i] - ref[i]) < 1e-6, "f32 out[%d] = %g, naive %g", i, yf[i], ref[i]);
    }
    gd_program_free(p);
    gd_graph_free(g);
}

static void test_attention_errors(void)
{
    gd_graph *g = fresh();
    gd_tensor *q = gd_input(g, "q", GD_F32, 4, (int64_t[]){1, 3, 2, 4});
    gd_tensor *k = gd_input(g, "k", GD_F32, 4, (int64_t[]){1, 2, 2, 4});
    gd_tensor *v = gd_input(g, "v", GD_F32, 4, (int64_t[]){1, 2, 2, 4});
    gd_tensor *v5 = gd_input(g, "v5", GD_F32, 4, (int64_t[]){1, 2, 5, 4});
    gd_tensor *q8 = gd_input(g, "q8", GD_F32, 4, (int64_t[]){1, 2, 2, 8});
    gd_tensor *k64 = gd_input(g, "k64", GD_F64, 4, (int64_t[]){1, 2, 2, 4});
    gd_tensor *q3 = gd_input(g, "q3", GD_F32, 3, (int64_t[]){3, 2, 4});
    CHECK(gd_attention(q, k, v, 1, 0, NULL) == NULL, "3 query heads over 2 kv heads should fail");
    check_error("heads", (const char *[]){"attention", "[1, 3, 2, 4]", "[1, 2, 2, 4]", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_attention(k, k, v5, 0, 0, NULL) == NULL, "v of another length than k should fail");
    check_error("v shape", (const char *[]){"attention", "v", "[1, 2, 5, 4]", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_attention(q8, k, v, 0, 0, NULL) == NULL, "head dim 8 against 4 should fail");
    check_error("head dim", (const char *[]){"attention", "[1, 2, 2, 8]", "[1, 2, 2, 4]", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_attention(k, k64, v, 0, 0, NULL) == NULL, "f32 q with f64 k should fail");
    check_error("dtype", (const char *[]){"attention", "f64", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_attention(q3, k, v, 0, 0, NULL) == NULL, "3-D q should fail");
    check_error("3-D q", (const char *[]){"attention", "q", "[3, 2, 4]", NULL});
    gd_ctx_clear_error(ctx);
    CHECK(gd_attention(NULL, k, v, 0, 0, NULL) == NULL && gd_ctx_error(ctx)[0] == '\0',
          "attention(NULL, ...) must return NULL silently");
    gd_graph_free(g);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    test_rope_values();
    test_rope_grad();
    test_attention_hand();
    test_attention_against_naive();
    test_attention_f32();
    test_attention_errors();
    return tu_finish("test_ops_attention");
}
