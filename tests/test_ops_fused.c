/* test_ops_fused.c — the ops graph passes fuse (add_layer_norm, add_rms_norm, linear_add,
 * linear_qkv and linear_swiglu with and without the norm in front, rope_cache_write,
 * rope_cache_write with the q and k norms, linear_qkv_rope, attention_lse and
 * attention_grad_lse) on the
 * CPU reference against the ops they stand for, built in the same graph from the same
 * inputs: the fused and the unfused forms must agree, exactly where both round the same
 * values the same way (in bf16 too, where the fused ops round an intermediate to the
 * dtype), and their messages must name the operand. */
#include "gradus.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAXN 4096

/* Values in [-1, 1) from a small linear congruential generator (the test's own, fixed). */
static void fill(float *v, int n, unsigned seed)
{
    unsigned s = seed * 2654435761u + 1;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        v[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

static gd_tensor *rand_in(gd_graph *g, const char *name, int nd, const int64_t *shape, unsigned seed)
{
    static float buf[MAXN];
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    fill(buf, (int)n, seed);
    return in_f32(g, name, nd, shape, buf);
}

/* a and b read back, equal within tol relative (0: bitwise). */
static void expect_same(const char *what, gd_tensor *a, gd_tensor *b, int64_t n, double tol)
{
    static float va[MAXN], vb[MAXN];
    CHECK(a != NULL && b != NULL, "%s: not built: %s", what, gd_ctx_error(ctx));
    if (a == NULL || b == NULL || n > MAXN) return;
    if (!run_read(gd_tensor_graph(a), 2, (gd_tensor *[]){a, b}, (void *[]){va, vb})) return;
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; i++) {
        int ok = tol == 0 ? memcmp(&va[i], &vb[i], sizeof(float)) == 0 : fabs(va[i] - vb[i]) <= tol * (1 + fabs(vb[i]));
        if (!ok) bad++;
        CHECK(ok, "%s[%lld] = %.9g, unfused %.9g", what, (long long)i, va[i], vb[i]);
    }
}

static void test_add_norms(void)
{
    const int64_t shape[3] = {2, 3, 40}, C = 40, n = 2 * 3 * 40;
    for (int rms = 0; rms < 2; rms++) {
        gd_graph *g = fresh();
        gd_tensor *x = rand_in(g, "x", 3, shape, 1), *r = rand_in(g, "r", 3, shape, 2);
        gd_tensor *w = rand_in(g, "w", 1, &C, 3), *b = rand_in(g, "b", 1, &C, 4);
        gd_attr eps = gd_attr_f("eps", 1e-5);
        gd_tensor *out[2] = {NULL, NULL};
        gd_tensor *in[4] = {x, r, w, b};
        gd_status s = gd_op_multi(g, rms ? "add_rms_norm" : "add_layer_norm", rms ? 3 : 4, in, 1, &eps, 2, out);
        CHECK(s == GD_OK, "add norm: %s", gd_ctx_error(ctx));
        gd_tensor *sum = gd_add(x, r);
        gd_tensor *y = rms ? gd_rms_norm(sum, w, 1e-5) : gd_layer_norm(sum, w, b, 1e-5);
        /* the same double arithmetic on the same stored sum: bit for bit */
        expect_same(rms ? "add_rms_norm s" : "add_layer_norm s", out[0], sum, n, 0);
        expect_same(rms ? "add_rms_norm y" : "add_layer_norm y", out[1], y, n, 0);
        /* in bf16 the norm reads the sum as stored, rounded to bf16, as the two ops do (a
         * reference that normalized the unrounded sum differed in a fifth of the elements) */
        gd_tensor *xh = gd_cast(x, GD_BF16), *rh = gd_cast(r, GD_BF16), *wh = gd_cast(w, GD_BF16), *bh = gd_cast(b, GD_BF16);
        gd_tensor *outh[2] = {NULL, NULL};
        s = gd_op_multi(g, rms ? "add_rms_norm" : "add_layer_norm", rms ? 3 : 4, (gd_tensor *[]){xh, rh, wh, bh}, 1,
                        &eps, 2, outh);
        CHECK(s == GD_OK, "bf16 add norm: %s", gd_ctx_error(ctx));
        gd_tensor *sumh = gd_add(xh, rh);
        gd_tensor *yh = rms ? gd_rms_norm(sumh, wh, 1e-5) : gd_layer_norm(sumh, wh, bh, 1e-5);
        expect_same(rms ? "bf16 add_rms_norm s" : "bf16 add_layer_norm s", gd_cast(outh[0], GD_F32),
                    gd_cast(sumh, GD_F32), n, 0);
        expect_same(rms ? "bf16 add_rms_norm y" : "bf16 add_layer_norm y", gd_cast(outh[1], GD_F32),
                    gd_cast(yh, GD_F32), n, 0);
        gd_graph_free(g);
    }
    /* a residual of another shape is refused, naming both */
    gd_graph *g = fresh();
    gd_tensor *x = rand_in(g, "x", 3, shape, 1), *r = rand_in(g, "r", 2, (int64_t[]){3, 40}, 2);
    gd_tensor *out[2] = {NULL, NULL};
    gd_status s = gd_op_multi(g, "add_rms_norm", 2, (gd_tensor *[]){x, r}, 0, NULL, 2, out);
    CHECK(s != GD_OK, "a broadcast residual should be refused");
    check_error("add_rms_norm shapes", (const char *[]){"add_rms_norm", "[3, 40]", "[2, 3, 40]", NULL});
    gd_graph_free(g);
}

static void test_linear_qkv(void)
{
    /* K = 37: no 16-byte pieces; 64: whole pieces */
    const int64_t Ks[2] = {37, 64};
    for (int t = 0; t < 2; t++) {
        const int64_t K = Ks[t];
        gd_graph *g = fresh();
        gd_tensor *x = rand_in(g, "x", 3, (int64_t[]){2, 3, K}, 5);
        gd_tensor *wq = rand_in(g, "wq", 2, (int64_t[]){24, K}, 6), *wk = rand_in(g, "wk", 2, (int64_t[]){8, K}, 7);
        gd_tensor *wv = rand_in(g, "wv", 2, (int64_t[]){8, K}, 8);
        gd_tensor *out[3] = {NULL, NULL, NULL};
        gd_status s = gd_op_multi(g, "linear_qkv", 4, (gd_tensor *[]){x, wq, wk, wv}, 0, NULL, 3, out);
        CHECK(s == GD_OK, "linear_qkv: %s", gd_ctx_error(ctx));
        if (s == GD_OK) {
            expect_shape(out[0], 3, (int64_t[]){2, 3, 24});
            expect_shape(out[2], 3, (int64_t[]){2, 3, 8});
        }
        expect_same("linear_qkv q", out[0], gd_linear(x, wq, NULL), 2 * 3 * 24, 0);
        expect_same("linear_qkv k", out[1], gd_linear(x, wk, NULL), 2 * 3 * 8, 0);
        expect_same("linear_qkv v", out[2], gd_linear(x, wv, NULL), 2 * 3 * 8, 0);
        gd_graph_free(g);
    }
    gd_graph *g = fresh();
    gd_tensor *x = rand_in(g, "x", 2, (int64_t[]){2, 16}, 5), *w = rand_in(g, "w", 2, (int64_t[]){4, 16}, 6);
    gd_tensor *bad = rand_in(g, "bad", 2, (int64_t[]){4, 15}, 7);
    gd_tensor *out[3] = {NULL, NULL, NULL};
    CHECK(gd_op_multi(g, "linear_qkv", 4, (gd_tensor *[]){x, w, bad, w}, 0, NULL, 3, out) != GD_OK,
          "a W of the wrong width should be refused");
    check_error("linear_qkv width", (const char *[]){"linear_qkv", "W2", "[4, 15]", "[2, 16]", NULL});
    gd_graph_free(g);
}

static void test_linear_swiglu(void)
{
    gd_graph *g = fresh();
    const int64_t K = 48, F = 40;
    gd_tensor *x = rand_in(g, "x", 2, (int64_t[]){3, K}, 9);
    gd_tensor *wg = rand_in(g, "wg", 2, (int64_t[]){F, K}, 10), *wu = rand_in(g, "wu", 2, (int64_t[]){F, K}, 11);
    gd_tensor *y = gd_op(g, "linear_swiglu", 3, (gd_tensor *[]){x, wg, wu}, 0, NULL);
    expect_shape(y, 2, (int64_t[]){3, F});
    /* the unfused form rounds the two products and silu's output to f32; the fused op
     * rounds once: a few f32 ulps apart */
    gd_tensor *ref = gd_mul(gd_silu(gd_linear(x, wg, NULL)), gd_linear(x, wu, NULL));
    expect_same("linear_swiglu", y, ref, 3 * F, 1e-6);
    gd_tensor *wshort = rand_in(g, "ws", 2, (int64_t[]){F - 1, K}, 12);
    expect_error(gd_op(g, "linear_swiglu", 3, (gd_tensor *[]){x, wg, wshort}, 0, NULL), "swiglu outputs", 2,
                 (const char *[]){"linear_swiglu", "[39, 48]"});
    gd_graph_free(g);
}

/* t in dtype dt (a cast unless it is f32 already), and back to f32 for reading. */
static gd_tensor *as_dt(gd_tensor *t, gd_dtype dt) { return dt == GD_F32 ? t : gd_cast(t, dt); }
static gd_tensor *to_f32(gd_tensor *t) { return t != NULL && gd_tensor_dtype(t) != GD_F32 ? gd_cast(t, GD_F32) : t; }

/* linear_qkv and linear_swiglu with a norm weight against rms_norm and then the products,
 * bit for bit: the normalized x is rounded to the dtype as rms_norm stores it (in bf16 that
 * rounding is what a fused op could easily skip). x is also read through a transposed view. */
static void test_norm_products(void)
{
    const int64_t Ks[2] = {37, 64};
    const gd_dtype dts[2] = {GD_F32, GD_BF16};
    for (int t = 0; t < 4; t++) {
        const int64_t K = Ks[t & 1];
        const gd_dtype dt = dts[t >> 1];
        const double eps = 1e-5;
        gd_graph *g = fresh();
        gd_tensor *x0 = rand_in(g, "x", 3, (int64_t[]){2, 3, K}, 30);
        gd_tensor *xt0 = rand_in(g, "xt", 2, (int64_t[]){K, 5}, 31);
        gd_tensor *w[5], *gw0 = rand_in(g, "g", 1, &K, 32);
        const int64_t outs[5] = {24, 8, 8, 20, 20};
        for (int k = 0; k < 5; k++) {
            char name[8];
            snprintf(name, sizeof name, "w%d", k);
            w[k] = as_dt(rand_in(g, name, 2, (int64_t[]){outs[k], K}, 33 + (unsigned)k), dt);
        }
        gd_tensor *x = as_dt(x0, dt), *gw = as_dt(gd_scale(gw0, 0.5, 1.0), dt); /* a weight in [0.5, 1.5) */
        gd_tensor *xt = gd_transpose(as_dt(xt0, dt), 0, 1);                       /* (5, K), strided */
        gd_tensor *h = gd_rms_norm(x, gw, eps), *ht = gd_rms_norm(xt, gw, eps);
        gd_attr at = gd_attr_f("eps", eps);
        gd_tensor *out[3] = {NULL, NULL, NULL};
        gd_status s = gd_op_multi(g, "linear_qkv", 5, (gd_tensor *[]){x, w[0], w[1], w[2], gw}, 1, &at, 3, out);
        CHECK(s == GD_OK, "linear_qkv with a norm: %s", gd_ctx_error(ctx));
        char what[96];
        for (int k = 0; k < 3; k++) {
            snprintf(what, sizeof what, "%s K %lld linear_qkv(norm) output %d", gd_dtype_name(dt), (long long)K, k);
            expect_same(what, to_f32(out[k]), to_f32(gd_linear(h, w[k], NULL)), 2 * 3 * outs[k], 0);
        }
        gd_tensor *y = gd_op(g, "linear_swiglu", 4, (gd_tensor *[]){x, w[3], w[4], gw}, 1, &at);
        snprintf(what, sizeof what, "%s K %lld linear_swiglu(norm)", gd_dtype_name(dt), (long long)K);
        expect_same(what, to_f32(y), to_f32(gd_op(g, "linear_swiglu", 3, (gd_tensor *[]){h, w[3], w[4]}, 0, NULL)),
                    2 * 3 * 20, 0);
        gd_tensor *yt = gd_op(g, "linear_swiglu", 4, (gd_tensor *[]){xt, w[3], w[4], gw}, 1, &at);
        snprintf(what, sizeof what, "%s K %lld linear_swiglu(norm) of a transposed x", gd_dtype_name(dt), (long long)K);
        expect_same(what, to_f32(yt), to_f32(gd_op(g, "linear_swiglu", 3, (gd_tensor *[]){ht, w[3], w[4]}, 0, NULL)),
                    5 * 20, 0);
        if (dt == GD_F32) {
            /* against the unfused chain of plain ops: silu's output and the two products are
             * rounded to f32 there, once here */
            gd_tensor *ref = gd_mul(gd_silu(gd_linear(h, w[3], NULL)), gd_linear(h, w[4], NULL));
            expect_same("linear_swiglu(norm) vs rms_norm, silu, mul", y, ref, 2 * 3 * 20, 1e-6);
        }
        gd_graph_free(g);
    }
    /* a norm weight that is not x's last axis is refused, naming it */
    gd_graph *g = fresh();
    gd_tensor *x = rand_in(g, "x", 2, (int64_t[]){2, 16}, 5), *w = rand_in(g, "w", 2, (int64_t[]){4, 16}, 6);
    gd_tensor *bad = rand_in(g, "bad", 1, (int64_t[]){15}, 7);
    expect_error(gd_op(g, "linear_swiglu", 4, (gd_tensor *[]){x, w, w, bad}, 0, NULL), "norm weight", 3,
                 (const char *[]){"linear_swiglu", "norm weight", "f32[15]"});
    gd_tensor *out[3] = {NULL, NULL, NULL};
    CHECK(gd_op_multi(g, "linear_qkv", 5, (gd_tensor *[]){x, w, w, w, bad}, 0, NULL, 3, out) != GD_OK,
          "a norm weight of the wrong length should be refused");
    check_error("linear_qkv norm weight", (const char *[]){"linear_qkv", "norm weight", "f32[15]", "[2, 16]", NULL});
    gd_graph_free(g);
}

/* linear_add against add(linear(x, W, b), r), either operand order, bit for bit: in bf16
 * the product is rounded to bf16 before the add, as the two ops round. */
static void test_linear_add(void)
{
    const gd_dtype dts[2] = {GD_F32, GD_BF16};
    for (int t = 0; t < 4; t++) {
        const gd_dtype dt = dts[t >> 1];
        const int bias = t & 1;
        const int64_t K = 40, N = 24;
        gd_graph *g = fresh();
        gd_tensor *x = as_dt(rand_in(g, "x", 3, (int64_t[]){2, 3, K}, 40), dt);
        gd_tensor *w = as_dt(rand_in(g, "w", 2, (int64_t[]){N, K}, 41), dt);
        gd_tensor *b = bias ? as_dt(rand_in(g, "b", 1, &N, 42), dt) : NULL;
        gd_tensor *r = as_dt(rand_in(g, "r", 3, (int64_t[]){2, 3, N}, 43), dt);
        gd_tensor *in[4] = {x, w, bias ? b : r, r};
        gd_tensor *y = gd_op(g, "linear_add", 3 + bias, in, 0, NULL);
        expect_shape(y, 3, (int64_t[]){2, 3, N});
        gd_tensor *p = gd_linear(x, w, b);
        char what[80];
        snprintf(what, sizeof what, "%s linear_add%s", gd_dtype_name(dt), bias ? " with a bias" : "");
        expect_same(what, to_f32(y), to_f32(gd_add(p, r)), 2 * 3 * N, 0);
        expect_same(what, to_f32(y), to_f32(gd_add(r, p)), 2 * 3 * N, 0);
        gd_graph_free(g);
    }
    /* a residual that would broadcast is refused, naming both shapes */
    gd_graph *g = fresh();
    gd_tensor *x = rand_in(g, "x", 2, (int64_t[]){3, 16}, 5), *w = rand_in(g, "w", 2, (int64_t[]){4, 16}, 6);
    gd_tensor *r = rand_in(g, "r", 1, (int64_t[]){4}, 7);
    expect_error(gd_op(g, "linear_add", 3, (gd_tensor *[]){x, w, r}, 0, NULL), "linear_add residual", 4,
                 (const char *[]){"linear_add", "residual r", "f32[4]", "f32[3, 4]"});
    gd_graph_free(g);
}

/* rope_cache_write against rope, rope and two cache_writes of the transposed k and v, on
 * two pairs of caches that start equal; a decode step (T 1) and a prefill (T 3), the latter
 * with the q and k norms in front (against rms_norm before each rope). */
static void test_rope_cache_write(void)
{
    for (int64_t T = 1; T <= 3; T += 2) {
        const int64_t B = 2, H = 4, Hkv = 2, D = 8, S = 6;
        gd_graph *g = fresh();
        gd_tensor *q = rand_in(g, "q", 4, (int64_t[]){B, T, H, D}, 20);
        gd_tensor *k = rand_in(g, "k", 4, (int64_t[]){B, T, Hkv, D}, 21), *v = rand_in(g, "v", 4, (int64_t[]){B, T, Hkv, D}, 22);
        gd_tensor *pos = gd_input(g, "pos", GD_I32, 1, (int64_t[]){B});
        const int32_t at[2] = {2, 5 - (int32_t)T}; /* a position per sequence */
        gd_tensor_write(pos, at, sizeof at);
        static float init[2 * 2 * 6 * 8];
        fill(init, (int)(B * Hkv * S * D), 23);
        gd_tensor *c[4];
        const char *names[4] = {"kc", "vc", "kc2", "vc2"};
        for (int j = 0; j < 4; j++) {
            c[j] = gd_state(g, names[j], GD_F32, 4, (int64_t[]){B, Hkv, S, D});
            gd_tensor_write(c[j], init, sizeof(float) * (size_t)(B * Hkv * S * D));
        }
        gd_attr at2[3] = {gd_attr_f("theta", 500.0), gd_attr_i("interleaved", 0), gd_attr_f("eps", 1e-5)};
        gd_tensor *out[3] = {NULL, NULL, NULL};
        /* T 3: with the q and k norms in front (QK-norm) */
        const int norms = T == 3;
        gd_tensor *qn = rand_in(g, "qn", 1, (int64_t[]){D}, 24), *kn = rand_in(g, "kn", 1, (int64_t[]){D}, 25);
        gd_status s = gd_op_multi(g, "rope_cache_write", norms ? 8 : 6, (gd_tensor *[]){q, k, v, c[0], c[1], pos, qn, kn},
                                  norms ? 3 : 2, at2, 3, out);
        CHECK(s == GD_OK, "rope_cache_write: %s", gd_ctx_error(ctx));
        if (norms) q = gd_rms_norm(q, qn, 1e-5), k = gd_rms_norm(k, kn, 1e-5);
        gd_tensor *rq = gd_rope(q, 500.0, 0, pos);
        gd_tensor *kw = gd_cache_write(c[2], gd_transpose(gd_rope(k, 500.0, 0, pos), 1, 2), pos);
        gd_tensor *vw = gd_cache_write(c[3], gd_transpose(v, 1, 2), pos);
        CHECK(kw != NULL && vw != NULL && rq != NULL, "unfused: %s", gd_ctx_error(ctx));
        if (s != GD_OK || kw == NULL || vw == NULL || rq == NULL) {
            gd_graph_free(g);
            continue;
        }
        gd_tensor *targets[2] = {out[0], rq};
        gd_program *p = gd_compile(g, 2, targets, GD_COMPILE_UPDATES);
        CHECK(p != NULL && gd_program_run(p) == GD_OK, "run: %s", gd_ctx_error(ctx));
        static float a[2 * 2 * 6 * 8], b[2 * 2 * 6 * 8];
        const int64_t nq = B * T * H * D, nc = B * Hkv * S * D;
        if (p != NULL) {
            gd_tensor_read(out[0], a, sizeof(float) * (size_t)nq);
            gd_tensor_read(rq, b, sizeof(float) * (size_t)nq);
            CHECK(memcmp(a, b, sizeof(float) * (size_t)nq) == 0, "T %lld: rope(q) differs from rope's", (long long)T);
            for (int j = 0; j < 2; j++) {
                gd_tensor_read(c[j], a, sizeof(float) * (size_t)nc);
                gd_tensor_read(c[j + 2], b, sizeof(float) * (size_t)nc);
                CHECK(memcmp(a, b, sizeof(float) * (size_t)nc) == 0, "T %lld: the %s cache differs from cache_write's",
                      (long long)T, j ? "value" : "key");
                CHECK(memcmp(a, init, sizeof(float) * (size_t)nc) != 0, "T %lld: the %s cache was not written",
                      (long long)T, j ? "value" : "key");
            }
            gd_program_free(p);
        }
        gd_graph_free(g);
    }
}

/* linear_qkv_rope against linear_qkv, the products reshaped to heads, then rope_cache_write
 * on a second pair of caches that start equal, bit for bit; with the norm in front and
 * without, a decode step (T 1) and two (T 2), grouped-query heads. Then a bad operand. */
static void test_linear_qkv_rope(void)
{
    for (int t = 0; t < 4; t++) {
        const int64_t B = 2, T = 1 + (t & 1), H = 4, Hkv = 2, D = 8, S = 6, K = 37;
        const int norm = t >> 1;
        gd_graph *g = fresh();
        gd_tensor *x = rand_in(g, "x", 3, (int64_t[]){B, T, K}, 40), *gw = rand_in(g, "g", 1, &K, 41);
        gd_tensor *wq = rand_in(g, "wq", 2, (int64_t[]){H * D, K}, 42);
        gd_tensor *wk = rand_in(g, "wk", 2, (int64_t[]){Hkv * D, K}, 43);
        gd_tensor *wv = rand_in(g, "wv", 2, (int64_t[]){Hkv * D, K}, 44);
        gd_tensor *pos = gd_input(g, "pos", GD_I32, 1, (int64_t[]){B});
        const int32_t at[2] = {3, 4 - (int32_t)T};
        gd_tensor_write(pos, at, sizeof at);
        static float init[2 * 2 * 6 * 8];
        const int64_t nc = B * Hkv * S * D, nq = B * T * H * D;
        fill(init, (int)nc, 45);
        gd_tensor *c[4];
        const char *names[4] = {"kc", "vc", "kc2", "vc2"};
        for (int j = 0; j < 4; j++) {
            c[j] = gd_state(g, names[j], GD_F32, 4, (int64_t[]){B, Hkv, S, D});
            gd_tensor_write(c[j], init, sizeof(float) * (size_t)nc);
        }
        gd_attr attrs[3] = {gd_attr_f("theta", 500.0), gd_attr_i("interleaved", 0), gd_attr_f("eps", 1e-5)};
        gd_tensor *out[3] = {NULL, NULL, NULL}, *prod[3] = {NULL, NULL, NULL}, *un[3] = {NULL, NULL, NULL};
        gd_status s = gd_op_multi(g, "linear_qkv_rope", 7 + norm,
                                  (gd_tensor *[]){x, wq, wk, wv, c[0], c[1], pos, gw}, 3, attrs, 3, out);
        CHECK(s == GD_OK, "linear_qkv_rope: %s", gd_ctx_error(ctx));
        gd_status s2 = gd_op_multi(g, "linear_qkv", 4 + norm, (gd_tensor *[]){x, wq, wk, wv, gw}, 1, attrs + 2, 3, prod);
        if (s2 == GD_OK) {
            gd_tensor *hq = gd_reshape(prod[0], 4, (int64_t[]){B, T, H, D});
            gd_tensor *hk = gd_reshape(prod[1], 4, (int64_t[]){B, T, Hkv, D});
            gd_tensor *hv = gd_reshape(prod[2], 4, (int64_t[]){B, T, Hkv, D});
            s2 = gd_op_multi(g, "rope_cache_write", 6, (gd_tensor *[]){hq, hk, hv, c[2], c[3], pos}, 2, attrs, 3, un);
        }
        CHECK(s2 == GD_OK, "unfused: %s", gd_ctx_error(ctx));
        if (s != GD_OK || s2 != GD_OK) {
            gd_graph_free(g);
            continue;
        }
        gd_tensor *targets[2] = {out[0], un[0]};
        gd_program *p = gd_compile(g, 2, targets, GD_COMPILE_UPDATES);
        CHECK(p != NULL && gd_program_run(p) == GD_OK, "run: %s", gd_ctx_error(ctx));
        static float a[2 * 2 * 6 * 8], b[2 * 2 * 6 * 8];
        if (p != NULL) {
            gd_tensor_read(out[0], a, sizeof(float) * (size_t)nq);
            gd_tensor_read(un[0], b, sizeof(float) * (size_t)nq);
            CHECK(memcmp(a, b, sizeof(float) * (size_t)nq) == 0, "T %lld norm %d: rope(q) differs from the pair's",
                  (long long)T, norm);
            for (int j = 0; j < 2; j++) {
                gd_tensor_read(c[j], a, sizeof(float) * (size_t)nc);
                gd_tensor_read(c[j + 2], b, sizeof(float) * (size_t)nc);
                CHECK(memcmp(a, b, sizeof(float) * (size_t)nc) == 0, "T %lld norm %d: the %s cache differs from the pair's",
                      (long long)T, norm, j ? "value" : "key");
                CHECK(memcmp(a, init, sizeof(float) * (size_t)nc) != 0, "T %lld norm %d: the %s cache was not written",
                      (long long)T, norm, j ? "value" : "key");
            }
            gd_program_free(p);
        }
        gd_graph_free(g);
    }
    /* a key matrix that does not match the caches' heads is refused, naming both */
    gd_graph *g = fresh();
    gd_tensor *x = rand_in(g, "x", 3, (int64_t[]){1, 1, 16}, 5), *w = rand_in(g, "w", 2, (int64_t[]){8, 16}, 6);
    gd_tensor *bad = rand_in(g, "bad", 2, (int64_t[]){12, 16}, 7);
    gd_tensor *kc = gd_state(g, "kc", GD_F32, 4, (int64_t[]){1, 2, 5, 4});
    gd_tensor *pos = gd_input(g, "pos", GD_I32, 0, NULL);
    gd_tensor *out[3] = {NULL, NULL, NULL};
    CHECK(gd_op_multi(g, "linear_qkv_rope", 7, (gd_tensor *[]){x, w, bad, w, kc, kc, pos}, 0, NULL, 3, out) != GD_OK,
          "a key matrix of the wrong height should be refused");
    check_error("linear_qkv_rope Wk", (const char *[]){"linear_qkv_rope", "Wk", "[12, 16]", "[1, 2, 5, 4]", NULL});
    gd_graph_free(g);
}

/* attention_lse and attention_grad_lse against attention and attention_grad: y bit for
 * bit (the same double sums), lse against the log-sum-exp computed here, the gradients
 * within f32 rounding (the pair reads lse and y as stored in f32, attention_grad its own
 * doubles). Causal with fewer keys than queries: the first rows see none. */
static void test_attention_lse(void)
{
    const int64_t shapes[2][2] = {{9, 11}, {6, 2}}; /* (T, S) */
    for (int c = 0; c < 2; c++) {
        const int64_t B = 1, H = 4, Hkv = 2, D = 8, T = shapes[c][0], S = shapes[c][1];
        gd_graph *g = fresh();
        const int64_t qs[4] = {B, H, T, D}, ks[4] = {B, Hkv, S, D};
        gd_tensor *q = rand_in(g, "q", 4, qs, 20), *k = rand_in(g, "k", 4, ks, 21), *v = rand_in(g, "v", 4, ks, 22);
        gd_tensor *dy = rand_in(g, "dy", 4, qs, 23);
        gd_attr at[2] = {gd_attr_i("causal", 1), gd_attr_f("scale", 0.0)};
        gd_tensor *fw[2] = {NULL, NULL}, *gl[3] = {NULL, NULL, NULL}, *gr[3] = {NULL, NULL, NULL};
        gd_status s = gd_op_multi(g, "attention_lse", 3, (gd_tensor *[]){q, k, v}, 2, at, 2, fw);
        CHECK(s == GD_OK, "attention_lse: %s", gd_ctx_error(ctx));
        if (s != GD_OK) {
            gd_graph_free(g);
            continue;
        }
        expect_shape(fw[1], 3, (int64_t[]){B, H, T});
        expect_same("attention_lse y", fw[0], gd_attention(q, k, v, 1, 0.0, NULL), B * H * T * D, 0);
        s = gd_op_multi(g, "attention_grad_lse", 6, (gd_tensor *[]){dy, q, k, v, fw[0], fw[1]}, 2, at, 3, gl);
        CHECK(s == GD_OK, "attention_grad_lse: %s", gd_ctx_error(ctx));
        s = gd_op_multi(g, "attention_grad", 4, (gd_tensor *[]){dy, q, k, v}, 2, at, 3, gr);
        CHECK(s == GD_OK, "attention_grad: %s", gd_ctx_error(ctx));
        expect_same("attention_grad_lse dq", gl[0], gr[0], B * H * T * D, 2e-5);
        expect_same("attention_grad_lse dk", gl[1], gr[1], B * Hkv * S * D, 2e-5);
        expect_same("attention_grad_lse dv", gl[2], gr[2], B * Hkv * S * D, 2e-5);
        /* y laid out (B, T, H, D): the transpose of the same values, and the same gradients */
        gd_attr atb[3] = {at[0], at[1], gd_attr_i("y_bthd", 1)};
        gd_tensor *fb[2] = {NULL, NULL}, *gb[3] = {NULL, NULL, NULL};
        s = gd_op_multi(g, "attention_lse", 3, (gd_tensor *[]){q, k, v}, 3, atb, 2, fb);
        CHECK(s == GD_OK, "attention_lse y_bthd: %s", gd_ctx_error(ctx));
        if (s == GD_OK) {
            expect_shape(fb[0], 4, (int64_t[]){B, T, H, D});
            expect_same("attention_lse y_bthd", gd_contiguous(gd_transpose(fb[0], 1, 2)), fw[0], B * H * T * D, 0);
            s = gd_op_multi(g, "attention_grad_lse", 6, (gd_tensor *[]){dy, q, k, v, fb[0], fb[1]}, 3, atb, 3, gb);
            CHECK(s == GD_OK, "attention_grad_lse y_bthd: %s", gd_ctx_error(ctx));
            for (int j = 0; s == GD_OK && j < 3; j++)
                expect_same("attention_grad_lse y_bthd", gb[j], gl[j], j == 0 ? B * H * T * D : B * Hkv * S * D, 0);
            /* dq, dk, dv laid out (B, T, heads, D): the transposes of the same values */
            gd_attr atg[4] = {at[0], at[1], gd_attr_i("y_bthd", 1), gd_attr_i("grad_bthd", 1)};
            gd_tensor *gt[3] = {NULL, NULL, NULL};
            s = gd_op_multi(g, "attention_grad_lse", 6, (gd_tensor *[]){dy, q, k, v, fb[0], fb[1]}, 4, atg, 3, gt);
            CHECK(s == GD_OK, "attention_grad_lse grad_bthd: %s", gd_ctx_error(ctx));
            if (s == GD_OK) {
                expect_shape(gt[0], 4, (int64_t[]){B, T, H, D});
                expect_shape(gt[1], 4, (int64_t[]){B, S, Hkv, D});
                for (int j = 0; j < 3; j++)
                    expect_same("attention_grad_lse grad_bthd", gd_contiguous(gd_transpose(gt[j], 1, 2)), gl[j],
                                j == 0 ? B * H * T * D : B * Hkv * S * D, 0);
            }
        }
        /* lse: log sum_s exp(q . k_s / sqrt(D)) over the keys s <= t + S - T; 0 for none */
        static float qv[MAXN], kv[MAXN], lse[MAXN];
        fill(qv, (int)(B * H * T * D), 20);
        fill(kv, (int)(B * Hkv * S * D), 21);
        if (run_read(g, 1, &fw[1], (void *[]){lse})) {
            for (int64_t h = 0; h < H; h++)
                for (int64_t t = 0; t < T; t++) {
                    const int64_t n = t + S - T + 1 < 0 ? 0 : t + S - T + 1;
                    double m = -INFINITY, sum = 0, sc[64];
                    for (int64_t j = 0; j < n; j++) {
                        double dot = 0;
                        for (int64_t d = 0; d < D; d++)
                            dot += (double)qv[(h * T + t) * D + d] * kv[((h / 2) * S + j) * D + d];
                        sc[j] = dot / sqrt((double)D);
                        m = sc[j] > m ? sc[j] : m;
                    }
                    for (int64_t j = 0; j < n; j++) sum += exp(sc[j] - m);
                    const double want = n > 0 ? m + log(sum) : 0.0, got = lse[h * T + t];
                    CHECK(fabs(got - want) <= 1e-6 * (1 + fabs(want)), "lse[%lld, %lld] = %.9g, want %.9g", (long long)h,
                          (long long)t, got, want);
                }
        }
        gd_graph_free(g);
    }
    /* an lse that is not one float per query row is refused, naming it */
    gd_graph *g = fresh();
    const int64_t qs[4] = {1, 2, 4, 8};
    gd_tensor *q = rand_in(g, "q", 4, qs, 1), *lse = rand_in(g, "lse", 2, (int64_t[]){2, 4}, 2);
    gd_tensor *out[3] = {NULL, NULL, NULL};
    CHECK(gd_op_multi(g, "attention_grad_lse", 6, (gd_tensor *[]){q, q, q, q, q, lse}, 0, NULL, 3, out) != GD_OK,
          "an lse of the wrong rank should be refused");
    check_error("attention_grad_lse lse", (const char *[]){"attention_grad_lse", "lse", "[2, 4]", "[1, 2, 4]", NULL});
    gd_graph_free(g);
}

/* linear_act_keep against linear_act(act 0) and the gelu after it, and matmul_act_grad
 * against gelu_grad of the matmul reshaped to z's shape: the same bits, f32 and bf16, both
 * gelu forms, W (out, in) and (in, out). A z that cannot hold the product is refused. */
static void test_gelu_epilogues(void)
{
    const gd_dtype dts[2] = {GD_F32, GD_BF16};
    for (int t = 0; t < 8; t++) {
        const gd_dtype dt = dts[t & 1];
        const int tanh_form = (t >> 1) & 1, wio = (t >> 2) & 1;
        const int64_t K = 24, N = 16;
        gd_graph *g = fresh();
        gd_tensor *x = as_dt(rand_in(g, "x", 3, (int64_t[]){2, 3, K}, 60), dt);
        gd_tensor *w = as_dt(rand_in(g, "w", 2, wio ? (int64_t[]){K, N} : (int64_t[]){N, K}, 61), dt);
        gd_tensor *b = as_dt(rand_in(g, "b", 1, &N, 62), dt);
        gd_attr ka[2] = {gd_attr_i("act", tanh_form ? 2 : 3), gd_attr_i("weight_in_out", wio)};
        gd_tensor *keep[2] = {NULL, NULL};
        gd_status s = gd_op_multi(g, "linear_act_keep", 3, (gd_tensor *[]){x, w, b}, 2, ka, 2, keep);
        CHECK(s == GD_OK, "linear_act_keep: %s", gd_ctx_error(ctx));
        gd_attr za[2] = {gd_attr_i("act", 0), gd_attr_i("weight_in_out", wio)};
        gd_tensor *z = gd_op(g, "linear_act", 3, (gd_tensor *[]){x, w, b}, 2, za);
        char what[80];
        snprintf(what, sizeof what, "%s linear_act_keep act %d wio %d", gd_dtype_name(dt), tanh_form ? 2 : 3, wio);
        expect_same(what, to_f32(keep[1]), to_f32(z), 2 * 3 * N, 0);
        expect_same(what, to_f32(keep[0]), to_f32(gd_gelu(z, tanh_form)), 2 * 3 * N, 0);
        /* dz for z (2, 3, N) from dy (6, 8) @ V: V (8, N), or stored (N, 8) with transpose_b */
        gd_tensor *dy = as_dt(rand_in(g, "dy", 2, (int64_t[]){6, 8}, 63), dt);
        gd_tensor *v = as_dt(rand_in(g, "v", 2, wio ? (int64_t[]){N, 8} : (int64_t[]){8, N}, 64), dt);
        gd_attr ga[3] = {gd_attr_i("transpose_a", 0), gd_attr_i("transpose_b", wio), gd_attr_i("act", tanh_form ? 2 : 3)};
        gd_tensor *dz = gd_op(g, "matmul_act_grad", 3, (gd_tensor *[]){dy, v, keep[1]}, 3, ga);
        gd_tensor *prod = gd_reshape(gd_matmul(dy, v, 0, wio), 3, (int64_t[]){2, 3, N});
        gd_attr ap = gd_attr_i("approximate", tanh_form);
        snprintf(what, sizeof what, "%s matmul_act_grad act %d tb %d", gd_dtype_name(dt), tanh_form ? 2 : 3, wio);
        expect_shape(dz, 3, (int64_t[]){2, 3, N});
        expect_same(what, to_f32(dz), to_f32(gd_op(g, "gelu_grad", 2, (gd_tensor *[]){prod, keep[1]}, 1, &ap)), 2 * 3 * N, 0);
        gd_graph_free(g);
    }
    gd_graph *g = fresh();
    gd_tensor *a = rand_in(g, "a", 2, (int64_t[]){6, 8}, 1), *b = rand_in(g, "b", 2, (int64_t[]){8, 16}, 2);
    gd_tensor *z = rand_in(g, "z", 2, (int64_t[]){16, 6}, 3);
    gd_attr ga = gd_attr_i("act", 2);
    expect_error(gd_op(g, "matmul_act_grad", 3, (gd_tensor *[]){a, b, z}, 1, &ga), "matmul_act_grad z", 3,
                 (const char *[]){"matmul_act_grad", "z f32[16, 6]", "(6, 16)"});
    gd_graph_free(g);
}

/* layer_norm_grad_add and rms_norm_grad_add against the backward op and the add of its dx
 * that they stand for: bit for bit in f32 and in bf16 (dx rounded to the dtype before r is
 * added, as the pair stores it), dweight and dbias too; a residual of another shape is
 * refused, naming it. */
static void test_norm_grad_add(void)
{
    const int64_t shape[2] = {5, 48}, C = 48, n = 5 * 48;
    for (int t = 0; t < 4; t++) {
        const int rms = t & 1;
        const gd_dtype dt = t < 2 ? GD_F32 : GD_BF16;
        const char *op = rms ? "rms_norm_grad_add" : "layer_norm_grad_add";
        gd_graph *g = fresh();
        gd_tensor *dy = as_dt(rand_in(g, "dy", 2, shape, 70), dt), *x = as_dt(rand_in(g, "x", 2, shape, 71), dt);
        gd_tensor *w = as_dt(rand_in(g, "w", 1, &C, 72), dt), *r = as_dt(rand_in(g, "r", 2, shape, 73), dt);
        gd_attr eps = gd_attr_f("eps", 1e-5);
        gd_tensor *fused[3] = {NULL, NULL, NULL}, *plain[3] = {NULL, NULL, NULL};
        gd_status s = gd_op_multi(g, op, 4, (gd_tensor *[]){dy, x, w, r}, 1, &eps, rms ? 2 : 3, fused);
        CHECK(s == GD_OK, "%s: %s", op, gd_ctx_error(ctx));
        s = gd_op_multi(g, rms ? "rms_norm_grad" : "layer_norm_grad", 3, (gd_tensor *[]){dy, x, w}, 1, &eps,
                        rms ? 2 : 3, plain);
        CHECK(s == GD_OK, "the plain backward: %s", gd_ctx_error(ctx));
        char what[80];
        snprintf(what, sizeof what, "%s %s dx + r", gd_dtype_name(dt), op);
        expect_same(what, to_f32(fused[0]), to_f32(gd_add(plain[0], r)), n, 0);
        snprintf(what, sizeof what, "%s %s dweight", gd_dtype_name(dt), op);
        expect_same(what, to_f32(fused[1]), to_f32(plain[1]), C, 0);
        if (!rms) expect_same("layer_norm_grad_add dbias", to_f32(fused[2]), to_f32(plain[2]), C, 0);
        gd_graph_free(g);
    }
    gd_graph *g = fresh();
    gd_tensor *dy = rand_in(g, "dy", 2, shape, 1), *x = rand_in(g, "x", 2, shape, 2), *w = rand_in(g, "w", 1, &C, 3);
    gd_tensor *r = rand_in(g, "r", 2, (int64_t[]){5, 24}, 4), *out[2] = {NULL, NULL};
    gd_status s = gd_op_multi(g, "rms_norm_grad_add", 4, (gd_tensor *[]){dy, x, w, r}, 0, NULL, 2, out);
    CHECK(s != GD_OK, "a residual of another shape should be refused");
    check_error("rms_norm_grad_add shapes", (const char *[]){"rms_norm_grad_add", "r f32[5, 24]", "[5, 48]", NULL});
    gd_graph_free(g);
}

/* cross_entropy_with_grad against cross_entropy and cross_entropy_grad: bit for bit, f32
 * logits and bf16 ones with an f32 loss, with an ignored target and classes past K. */
static void test_cross_entropy_with_grad(void)
{
    for (int half = 0; half < 2; half++) {
        const gd_dtype dt = half ? GD_BF16 : GD_F32;
        gd_graph *g = fresh();
        gd_tensor *x = as_dt(rand_in(g, "logits", 2, (int64_t[]){6, 11}, 80), dt);
        const int64_t tv[6] = {3, -1, 0, 9, 5, 2};
        gd_tensor *t = gd_input(g, "targets", GD_I64, 1, (int64_t[]){6});
        CHECK(gd_tensor_write(t, tv, sizeof tv) == GD_OK, "targets: %s", gd_ctx_error(ctx));
        gd_tensor *dl = gd_input(g, "dloss", GD_F32, 0, NULL);
        const float dlv = 0.75f;
        CHECK(gd_tensor_write(dl, &dlv, sizeof dlv) == GD_OK, "dloss: %s", gd_ctx_error(ctx));
        gd_attr a[3] = {gd_attr_i("ignore_index", -1), gd_attr_i("classes", 10), gd_attr_i("out_dtype", GD_F32)};
        gd_tensor *both[2] = {NULL, NULL};
        gd_status s = gd_op_multi(g, "cross_entropy_with_grad", 3, (gd_tensor *[]){dl, x, t}, 2, a, 2, both);
        CHECK(s == GD_OK, "cross_entropy_with_grad: %s", gd_ctx_error(ctx));
        gd_tensor *loss = gd_op(g, "cross_entropy", 2, (gd_tensor *[]){x, t}, half ? 3 : 2, a);
        gd_tensor *grad = gd_op(g, "cross_entropy_grad", 3, (gd_tensor *[]){dl, x, t}, 2, a);
        expect_same(half ? "bf16 cross_entropy_with_grad loss" : "cross_entropy_with_grad loss", both[1], loss, 1, 0);
        expect_same(half ? "bf16 cross_entropy_with_grad dlogits" : "cross_entropy_with_grad dlogits", to_f32(both[0]),
                    to_f32(grad), 6 * 11, 0);
        gd_graph_free(g);
    }
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    test_add_norms();
    test_linear_qkv();
    test_linear_swiglu();
    test_norm_products();
    test_linear_add();
    test_rope_cache_write();
    test_linear_qkv_rope();
    test_attention_lse();
    test_gelu_epilogues();
    test_norm_grad_add();
    test_cross_entropy_with_grad();
    return tu_finish("test_ops_fused");
}
