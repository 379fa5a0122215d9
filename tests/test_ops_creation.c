/* test_ops_creation.c — fill, arange, the random generators and dropout, run through
 * programs on the CPU reference. Expected values come from hand arithmetic, the published
 * Philox known answers, the distributions' moments, or the spec formulas written out
 * independently here. */
#include "gradus.h"
#include "gradus_plugin.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Compiles `t` alone, runs it once and reads it into out. 1 on success. */
static int run1(gd_graph *g, gd_tensor *t, void *out, size_t bytes)
{
    if (t == NULL) {
        CHECK(0, "building failed: %s", gd_ctx_error(ctx));
        return 0;
    }
    gd_program *p = gd_compile(g, 1, &t, 0);
    if (p == NULL) {
        CHECK(0, "compile failed: %s", gd_ctx_error(ctx));
        return 0;
    }
    gd_status s = gd_program_run(p);
    CHECK(s == GD_OK, "run failed: %s", gd_ctx_error(ctx));
    if (s == GD_OK) s = gd_tensor_read(t, out, bytes);
    CHECK(s == GD_OK, "read failed: %s", gd_ctx_error(ctx));
    gd_program_free(p);
    return s == GD_OK;
}

/* Philox4x32-10 against Random123's published known answers (its tests/kat_vectors). */
static void test_philox_known_answers(void)
{
    static const struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
        {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu},
         {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
        {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u},
         {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
    };
    for (int k = 0; k < 3; k++) {
        uint64_t lo = kat[k].ctr[0] | (uint64_t)kat[k].ctr[1] << 32, hi = kat[k].ctr[2] | (uint64_t)kat[k].ctr[3] << 32;
        uint64_t seed = kat[k].key[0] | (uint64_t)kat[k].key[1] << 32;
        gdp_philox_out r = gdp_philox4x32(lo, hi, seed);
        for (int j = 0; j < 4; j++) CHECK(r.v[j] == kat[k].out[j], "philox kat %d word %d: %08x, want %08x", k, j, r.v[j], kat[k].out[j]);
    }
    CHECK(gdp_u01(0) > 0 && gdp_u01(0xffffffffu) < 1, "u01 must stay inside (0, 1)");
}

static void test_fill(void)
{
    gd_graph *g = gd_graph_new(ctx);
    float f[6];
    if (run1(g, gd_fill(g, GD_F32, 2, (int64_t[]){2, 3}, 1.5), f, sizeof f))
        for (int i = 0; i < 6; i++) CHECK(f[i] == 1.5f, "fill f32[%d] = %g", i, f[i]);
    if (run1(g, gd_zeros(g, GD_F32, 1, (int64_t[]){6}), f, sizeof f))
        for (int i = 0; i < 6; i++) CHECK(f[i] == 0.0f, "zeros[%d] = %g", i, f[i]);
    if (run1(g, gd_ones(g, GD_F32, 3, (int64_t[]){1, 2, 3}), f, sizeof f))
        for (int i = 0; i < 6; i++) CHECK(f[i] == 1.0f, "ones[%d] = %g", i, f[i]);
    float s = 0;
    if (run1(g, gd_fill(g, GD_F32, 0, NULL, -4.0), &s, sizeof s)) CHECK(s == -4.0f, "scalar fill = %g", s);
    // 1.5 is 0x3e00 in f16 and 0x3fc0 in bf16; -2.25 is 0xc080 in f16
    uint16_t h[4];
    if (run1(g, gd_fill(g, GD_F16, 1, (int64_t[]){4}, -2.25), h, sizeof h))
        for (int i = 0; i < 4; i++) CHECK(h[i] == 0xc080, "fill f16 -2.25 = %04x", h[i]);
    if (run1(g, gd_fill(g, GD_BF16, 1, (int64_t[]){4}, 1.5), h, sizeof h))
        for (int i = 0; i < 4; i++) CHECK(h[i] == 0x3fc0, "fill bf16 1.5 = %04x", h[i]);
    int32_t n32[5];
    if (run1(g, gd_fill(g, GD_I32, 1, (int64_t[]){5}, -7), n32, sizeof n32))
        for (int i = 0; i < 5; i++) CHECK(n32[i] == -7, "fill i32 = %d", n32[i]);
    int64_t n64[3];
    if (run1(g, gd_fill(g, GD_I64, 1, (int64_t[]){3}, 5e12), n64, sizeof n64))
        for (int i = 0; i < 3; i++) CHECK(n64[i] == 5000000000000LL, "fill i64 = %lld", (long long)n64[i]);

    // errors: a negative dim, a value an i32 cannot hold, a bad dtype
    gd_ctx_clear_error(ctx);
    CHECK(gd_fill(g, GD_F32, 2, (int64_t[]){2, -1}, 0) == NULL, "negative dim accepted");
    CHECK(strlen(gd_ctx_error(ctx)) > 0, "no message for a negative dim");
    CHECK(gd_fill(g, GD_I32, 1, (int64_t[]){2}, 1e10) == NULL, "1e10 accepted as i32");
    CHECK(gd_fill(g, (gd_dtype)42, 1, (int64_t[]){2}, 0) == NULL, "dtype 42 accepted");
    gd_ctx_clear_error(ctx);
    gd_graph_free(g);
}

static void test_arange(void)
{
    gd_graph *g = gd_graph_new(ctx);
    float f[5];
    if (run1(g, gd_arange(g, GD_F32, 5, 1.0, 0.5), f, sizeof f))
        for (int i = 0; i < 5; i++) CHECK(f[i] == 1.0f + 0.5f * (float)i, "arange f32[%d] = %g", i, f[i]);
    int64_t n[4];
    if (run1(g, gd_arange(g, GD_I64, 4, 3, -2), n, sizeof n))
        for (int i = 0; i < 4; i++) CHECK(n[i] == 3 - 2 * i, "arange i64[%d] = %lld", i, (long long)n[i]);
    // 0.1 + 3*0.1 computed in double then rounded: exactly (float)0.4, not 0.1f + 3*0.1f
    float t[4];
    if (run1(g, gd_arange(g, GD_F32, 4, 0.1, 0.1), t, sizeof t)) CHECK(t[3] == (float)(0.1 + 3 * 0.1), "arange 0.1 step");
    gd_graph_free(g);
}

/* The spec formulas, written out here: uniform lo + (hi-lo)*u and Box-Muller's cos branch. */
static float spec_uniform(uint64_t i, uint64_t seed, float lo, float hi)
{
    return lo + (hi - lo) * gdp_u01(gdp_philox4x32(i, 0, seed).v[0]);
}
static float spec_normal(uint64_t i, uint64_t seed, float mean, float std)
{
    gdp_philox_out r = gdp_philox4x32(i, 0, seed);
    float u1 = gdp_u01(r.v[0]), u2 = gdp_u01(r.v[1]);
    return mean + std * (sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2));
}

static void moments(const float *x, int n, double *mean, double *std)
{
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) ss += (x[i] - *mean) * (x[i] - *mean);
    *std = sqrt(ss / n);
}

enum { N = 20000 };

static void test_random(void)
{
    gd_graph *g = gd_graph_new(ctx);
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    double mean, std;

    // uniform on [-2, 3): range, mean 0.5, std 5/sqrt(12), and the exact spec values
    if (run1(g, gd_rand_uniform(g, GD_F32, 2, (int64_t[]){100, N / 100}, -2, 3, 42), a, N * sizeof *a)) {
        int inside = 1, exact = 1;
        for (int i = 0; i < N; i++) {
            inside &= a[i] >= -2.0f && a[i] < 3.0f;
            exact &= fabsf(a[i] - spec_uniform((uint64_t)i, 42, -2, 3)) <= 1e-6f;
        }
        CHECK(inside, "uniform value outside [-2, 3)");
        CHECK(exact, "uniform differs from lo + (hi-lo)*u01(philox(i, 0, seed))");
        moments(a, N, &mean, &std);
        CHECK(fabs(mean - 0.5) < 0.05, "uniform mean %g, want 0.5", mean);
        CHECK(fabs(std - 5 / sqrt(12.0)) < 0.03, "uniform std %g, want %g", std, 5 / sqrt(12.0));
    }
    // same seed: same values; another seed: different values
    if (run1(g, gd_rand_uniform(g, GD_F32, 1, (int64_t[]){N}, -2, 3, 42), b, N * sizeof *b))
        CHECK(memcmp(a, b, N * sizeof *a) == 0, "same seed gave different numbers");
    if (run1(g, gd_rand_uniform(g, GD_F32, 1, (int64_t[]){N}, -2, 3, 43), b, N * sizeof *b)) {
        int same = 0;
        for (int i = 0; i < N; i++) same += a[i] == b[i];
        CHECK(same < N / 100, "seeds 42 and 43 agree on %d of %d values", same, N);
    }

    // normal(1, 2): moments, and the Box-Muller values
    if (run1(g, gd_rand_normal(g, GD_F32, 1, (int64_t[]){N}, 1.0, 2.0, 7), a, N * sizeof *a)) {
        moments(a, N, &mean, &std);
        CHECK(fabs(mean - 1.0) < 0.06, "normal mean %g, want 1", mean);
        CHECK(fabs(std - 2.0) < 0.06, "normal std %g, want 2", std);
        int exact = 1, within = 0;
        for (int i = 0; i < N; i++) {
            exact &= fabsf(a[i] - spec_normal((uint64_t)i, 7, 1, 2)) <= 1e-5f;
            within += fabsf(a[i] - 1.0f) < 2.0f;
        }
        CHECK(exact, "normal differs from Box-Muller on philox(i, 0, seed)");
        CHECK(fabs((double)within / N - 0.6827) < 0.015, "%d of %d within one std", within, N);
    }

    // Kaiming on a conv weight (64, 32, 3, 3): fan_in = 32*9, std sqrt(2/288)
    const int64_t kw[4] = {64, 32, 3, 3};
    int nk = 64 * 32 * 9;
    float *k = malloc((size_t)nk * sizeof *k);
    if (run1(g, gd_init_kaiming(g, GD_F32, 4, kw, 1), k, (size_t)nk * sizeof *k)) {
        moments(k, nk, &mean, &std);
        double want = sqrt(2.0 / 288);
        CHECK(fabs(mean) < 0.05 * want, "kaiming mean %g", mean);
        CHECK(fabs(std / want - 1) < 0.03, "kaiming std %g, want %g", std, want);
    }
    // Xavier on a linear weight (100, 50): bound sqrt(6/150) = 0.2, variance bound^2/3
    if (run1(g, gd_init_xavier(g, GD_F32, 2, (int64_t[]){100, 50}, 2), a, 5000 * sizeof *a)) {
        float mx = 0;
        for (int i = 0; i < 5000; i++) mx = fmaxf(mx, fabsf(a[i]));
        CHECK(mx <= 0.2f && mx > 0.199f, "xavier max |w| %g, want just under 0.2", mx);
        moments(a, 5000, &mean, &std);
        CHECK(fabs(std - 0.2 / sqrt(3.0)) < 0.004, "xavier std %g, want %g", std, 0.2 / sqrt(3.0));
    }
    // 1-D: fan_in = fan_out = 200, so xavier's bound is sqrt(6/400)
    if (run1(g, gd_init_xavier(g, GD_F32, 1, (int64_t[]){200}, 3), a, 200 * sizeof *a)) {
        float mx = 0;
        for (int i = 0; i < 200; i++) mx = fmaxf(mx, fabsf(a[i]));
        CHECK(mx <= (float)sqrt(6.0 / 400) && mx > 0.9f * (float)sqrt(6.0 / 400), "xavier 1-D max %g", mx);
    }
    // bf16 output is the f32 value rounded: compare against the spec value within bf16 precision
    uint16_t hb[64];
    if (run1(g, gd_rand_normal(g, GD_BF16, 1, (int64_t[]){64}, 0, 1, 9), hb, sizeof hb))
        for (int i = 0; i < 64; i++) {
            uint32_t u = (uint32_t)hb[i] << 16;
            float v;
            memcpy(&v, &u, 4);
            float want = spec_normal((uint64_t)i, 9, 0, 1);
            CHECK(fabsf(v - want) <= fabsf(want) * (1.0f / 128) + 1e-6f, "bf16 normal[%d] %g, want %g", i, v, want);
        }
    gd_ctx_clear_error(ctx);
    CHECK(gd_rand_uniform(g, GD_I32, 1, (int64_t[]){4}, 0, 1, 1) == NULL, "integer rand_uniform accepted");
    CHECK(gd_rand_uniform(g, GD_F32, 1, (int64_t[]){4}, 2, 1, 1) == NULL, "lo > hi accepted");
    CHECK(gd_rand_normal(g, GD_F32, 1, (int64_t[]){4}, 0, -1, 1) == NULL, "negative std accepted");
    gd_ctx_clear_error(ctx);
    free(k);
    free(a);
    free(b);
    gd_graph_free(g);
}

static void test_dropout(void)
{
    gd_graph *g = gd_graph_new(ctx);
    enum { M = 10000 };
    const double p = 0.3;
    const uint64_t seed = 77;
    float *x = malloc(M * sizeof *x), *y = malloc(M * sizeof *y), *dx = malloc(M * sizeof *dx);
    for (int i = 0; i < M; i++) x[i] = 1.0f + (float)(i % 7);

    // x is a parameter so that the backward pass gives d sum(dropout(x)) / dx = mask * scale
    gd_tensor *xt = gd_param(g, "x", GD_F32, 1, (int64_t[]){M});
    gd_tensor *step = gd_state(g, "step", GD_I64, 0, NULL);
    gd_tensor *yt = gd_dropout(xt, p, seed, step);
    gd_tensor *loss = gd_sum(yt, 0, NULL, 0);
    CHECK(loss != NULL && gd_backward(g, loss) == GD_OK, "dropout graph: %s", gd_ctx_error(ctx));
    gd_tensor *gx = gd_grad(g, xt);
    CHECK(gx != NULL, "no gradient for x");
    gd_tensor *targets[2] = {yt, gx};
    gd_program *prog = gx != NULL ? gd_compile(g, 2, targets, 0) : NULL;
    CHECK(prog != NULL, "compile: %s", gd_ctx_error(ctx));
    if (prog != NULL) {
        gd_tensor_write(xt, x, M * sizeof *x);
        int64_t st = 5;
        gd_tensor_write(step, &st, sizeof st);
        CHECK(gd_program_run(prog) == GD_OK, "run: %s", gd_ctx_error(ctx));
        gd_tensor_read(yt, y, M * sizeof *y);
        gd_tensor_read(gx, dx, M * sizeof *dx);
        float scale = 1.0f / (1.0f - (float)p);
        int dropped = 0, bad = 0, badgrad = 0;
        for (int i = 0; i < M; i++) {
            int drop = gdp_u01(gdp_philox4x32((uint64_t)i, 5, seed).v[0]) < (float)p;
            dropped += drop;
            bad += drop ? y[i] != 0.0f : y[i] != x[i] * scale;
            badgrad += dx[i] != (drop ? 0.0f : scale);
        }
        CHECK(bad == 0, "%d elements differ from the philox mask at step 5", bad);
        CHECK(badgrad == 0, "%d gradient elements differ from mask * 1/(1-p)", badgrad);
        CHECK(fabs((double)dropped / M - p) < 0.02, "dropped %d of %d, want about %g", dropped, M, p);

        // another step, another mask
        st = 6;
        gd_tensor_write(step, &st, sizeof st);
        CHECK(gd_program_run(prog) == GD_OK, "run: %s", gd_ctx_error(ctx));
        gd_tensor_read(yt, dx, M * sizeof *dx);
        int same_mask = 0;
        for (int i = 0; i < M; i++) same_mask += (y[i] == 0) == (dx[i] == 0);
        CHECK(same_mask < M * 0.7, "steps 5 and 6 share %d of %d mask bits", same_mask, M);
        gd_program_free(prog);
    }
    // p = 0 keeps everything unscaled; without a step the mask is step 0's
    gd_tensor *xi = gd_input(g, "xi", GD_F32, 1, (int64_t[]){8});
    float in8[8] = {1, -2, 3, -4, 5, -6, 7, -8}, out8[8];
    gd_tensor_write(xi, in8, sizeof in8);
    if (run1(g, gd_dropout(xi, 0.0, 1, NULL), out8, sizeof out8))
        CHECK(memcmp(in8, out8, sizeof in8) == 0, "dropout p=0 is not the identity");
    if (run1(g, gd_dropout(xi, 0.5, 3, NULL), out8, sizeof out8))
        for (int i = 0; i < 8; i++) {
            int drop = gdp_u01(gdp_philox4x32((uint64_t)i, 0, 3).v[0]) < 0.5f;
            CHECK(out8[i] == (drop ? 0.0f : 2.0f * in8[i]), "no-step dropout[%d] = %g", i, out8[i]);
        }
    gd_ctx_clear_error(ctx);
    CHECK(gd_dropout(xi, 1.5, 1, NULL) == NULL, "p = 1.5 accepted");
    CHECK(strstr(gd_ctx_error(ctx), "dropout") != NULL, "message does not name dropout: %s", gd_ctx_error(ctx));
    CHECK(gd_dropout(NULL, 0.5, 1, NULL) == NULL, "NULL input not propagated");
    gd_ctx_clear_error(ctx);
    free(x);
    free(y);
    free(dx);
    gd_graph_free(g);
}

int main(void)
{
    if (!tu_open_ctx()) return 1;
    test_philox_known_answers();
    test_fill();
    test_arange();
    test_random();
    test_dropout();
    return tu_finish("test_ops_creation");
}
