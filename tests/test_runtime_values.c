/* Values that change between runs are tensors read when the program runs, never
 * attributes: changing AdamW's learning rate and step, rope's position, attention's
 * kv_len or cache_write's position between runs changes the results (checked against the
 * formulas) without compiling anything again (ctx->compiles stays put) and without the
 * executor preparing its segments again. On the fast CPU backend and on the test device
 * (where these ops fall back, next to an add that runs in a segment). Out-of-range values
 * are bad data: an INVALID run naming the node and the value. */
#include "testdev_util.h"

#include <stdlib.h>

typedef struct watch {
    uint64_t compiles;
    int64_t prepares;
} watch;

static watch watch_start(void) { return (watch){ctx->compiles, td_stats(ctx)->prepares}; }

static void watch_check(watch w, const char *what)
{
    CHECK(ctx->compiles == w.compiles, "%s: %llu compiles between runs", what,
          (unsigned long long)(ctx->compiles - w.compiles));
    CHECK(td_stats(ctx)->prepares == w.prepares, "%s: segments prepared again between runs (%lld)", what,
          (long long)(td_stats(ctx)->prepares - w.prepares));
}

static void write_i64(gd_tensor *t, int64_t v) { CHECK(gd_tensor_write(t, &v, sizeof v) == GD_OK, "write: %s", gd_ctx_error(ctx)); }
static void write_f32(gd_tensor *t, float v) { CHECK(gd_tensor_write(t, &v, sizeof v) == GD_OK, "write: %s", gd_ctx_error(ctx)); }

static int run_ok(gd_program *p, const char *what)
{
    gd_status s = gd_program_run(p);
    CHECK(s == GD_OK, "%s: run: %s", what, gd_ctx_error(ctx));
    return s == GD_OK;
}

/* ---- AdamW: learning rate and step ---------------------------------------------------- */

static void test_adamw(void)
{
    gd_graph *g = fresh();
    const float w0[4] = {0.5f, -0.25f, 1.0f, 2.0f}, xs[4] = {1.0f, -2.0f, 0.5f, 3.0f};
    gd_tensor *w = gd_param(g, "w", GD_F32, 1, (int64_t[]){4});
    gd_tensor *x = in_f32(g, "x", 1, (int64_t[]){4}, xs);
    gd_tensor_write(w, w0, sizeof w0);
    gd_tensor *loss = gd_sum(gd_add(gd_mul(w, x), x), 0, NULL, 0); // d loss / d w = x
    CHECK(gd_backward(g, loss) == GD_OK && gd_optimizer_adamw(g, &(gd_adamw_config){.lr = 0.1}) == GD_OK, "optimizer: %s",
          gd_ctx_error(ctx));
    gd_program *p = gd_compile(g, 1, &loss, GD_COMPILE_UPDATES);
    CHECK(p != NULL, "compile: %s", gd_ctx_error(ctx));
    if (p == NULL) return;
    watch wt = watch_start();
    double m[4] = {0}, v[4] = {0}, want[4];
    for (int i = 0; i < 4; i++) want[i] = w0[i];
    /* run 1: lr 0.1, t 1; run 2: lr 0.01 and t 10 (the step written as 9: the program
     * increments it before the update reads it); run 3: lr 0.05, t 11 */
    const double lrs[3] = {0.1, 0.01, 0.05};
    const int ts[3] = {1, 10, 11};
    for (int r = 0; r < 3; r++) {
        if (r == 1) write_f32(gd_graph_find(g, "optim.step"), 9.0f);
        if (r > 0) CHECK(gd_optimizer_set_lr(g, lrs[r]) == GD_OK, "set_lr: %s", gd_ctx_error(ctx));
        if (!run_ok(p, "adamw")) break;
        double bc1 = 1 - pow(0.9, ts[r]), bc2 = 1 - pow(0.999, ts[r]);
        for (int i = 0; i < 4; i++) {
            m[i] = 0.9 * m[i] + 0.1 * xs[i];
            v[i] = 0.999 * v[i] + 0.001 * (double)xs[i] * xs[i];
            want[i] -= lrs[r] * (m[i] / bc1) / (sqrt(v[i] / bc2) + 1e-8);
        }
        char what[64];
        snprintf(what, sizeof what, "w after run %d (lr %g, t %d)", r + 1, lrs[r], ts[r]);
        expect_tensor(what, w, want, 4, 1e-5);
    }
    float step = 0;
    CHECK(gd_tensor_read(gd_graph_find(g, "optim.step"), &step, sizeof step) == GD_OK && step == 11.0f,
          "the step after three runs is %g, want 11", step);
    watch_check(wt, "adamw");
    gd_program_free(p);
    gd_graph_free(g);
}

/* ---- rope: the position ------------------------------------------------------------------ */

static void test_rope(void)
{
    gd_graph *g = fresh();
    float xs[12]; // (B 1, T 3, H 1, D 4)
    for (int i = 0; i < 12; i++) xs[i] = 0.25f * (float)(i + 1) * (i % 2 ? -1.0f : 1.0f);
    gd_tensor *x = in_f32(g, "x", 4, (int64_t[]){1, 3, 1, 4}, xs);
    gd_tensor *pos = gd_input(g, "pos", GD_I64, 0, NULL);
    gd_tensor *y = gd_add(gd_rope(x, 100.0, 1, pos), x);
    gd_program *p = gd_compile(g, 1, &y, 0);
    CHECK(p != NULL, "compile: %s", gd_ctx_error(ctx));
    if (p == NULL) return;
    watch wt = watch_start();
    const int64_t positions[3] = {0, 7, 3};
    for (int r = 0; r < 3; r++) {
        write_i64(pos, positions[r]);
        if (!run_ok(p, "rope")) break;
        double want[12];
        for (int t = 0; t < 3; t++)
            for (int i = 0; i < 2; i++) { // interleaved pairs (2i, 2i+1)
                double angle = (double)(t + positions[r]) * pow(100.0, -2.0 * i / 4.0);
                double x0 = xs[t * 4 + 2 * i], x1 = xs[t * 4 + 2 * i + 1];
                want[t * 4 + 2 * i] = x0 * cos(angle) - x1 * sin(angle) + x0;
                want[t * 4 + 2 * i + 1] = x0 * sin(angle) + x1 * cos(angle) + x1;
            }
        char what[32];
        snprintf(what, sizeof what, "rope at pos %lld", (long long)positions[r]);
        expect_tensor(what, y, want, 12, 1e-5);
    }
    watch_check(wt, "rope");
    gd_program_free(p);
    gd_graph_free(g);
}

/* ---- attention: the number of valid keys ---------------------------------------------------- */

static void test_attention(void)
{
    gd_graph *g = fresh();
    float qs[4], ks[8], vs[8]; // q (1, 1, T 2, D 2); k, v (1, 1, S 4, D 2)
    for (int i = 0; i < 4; i++) qs[i] = 0.3f * (float)(i + 1);
    for (int i = 0; i < 8; i++) ks[i] = 0.2f * (float)(i % 5) - 0.3f, vs[i] = (float)(i * i % 7) - 2.0f;
    gd_tensor *q = in_f32(g, "q", 4, (int64_t[]){1, 1, 2, 2}, qs);
    gd_tensor *k = in_f32(g, "k", 4, (int64_t[]){1, 1, 4, 2}, ks);
    gd_tensor *v = in_f32(g, "v", 4, (int64_t[]){1, 1, 4, 2}, vs);
    gd_tensor *len = gd_input(g, "kv_len", GD_I64, 0, NULL);
    gd_tensor *y = gd_add(gd_label(gd_attention(q, k, v, 1, 0.0, len), "attn"), q);
    gd_program *p = gd_compile(g, 1, &y, 0);
    CHECK(p != NULL, "compile: %s", gd_ctx_error(ctx));
    if (p == NULL) return;
    watch wt = watch_start();
    const int64_t lens[3] = {4, 2, 3};
    for (int r = 0; r < 3; r++) {
        write_i64(len, lens[r]);
        if (!run_ok(p, "attention")) break;
        double want[4];
        for (int t = 0; t < 2; t++) { // causal: query t sees keys s <= t + L - T
            int64_t n = t + lens[r] - 2 + 1;
            double sc[4], mx = -1e300, sum = 0;
            for (int64_t s = 0; s < n; s++) {
                sc[s] = (qs[t * 2] * (double)ks[s * 2] + qs[t * 2 + 1] * (double)ks[s * 2 + 1]) / sqrt(2.0);
                mx = sc[s] > mx ? sc[s] : mx;
            }
            for (int64_t s = 0; s < n; s++) sum += sc[s] = exp(sc[s] - mx);
            for (int d = 0; d < 2; d++) {
                double o = 0;
                for (int64_t s = 0; s < n; s++) o += sc[s] / sum * vs[s * 2 + d];
                want[t * 2 + d] = o + qs[t * 2 + d];
            }
        }
        char what[32];
        snprintf(what, sizeof what, "attention, kv_len %lld", (long long)lens[r]);
        expect_tensor(what, y, want, 4, 1e-5);
    }
    write_i64(len, 5);
    CHECK(gd_program_run(p) == GD_ERR_INVALID, "kv_len 5 of 4 keys: not refused as bad data");
    check_error("kv_len 5", (const char *[]){"kv_len = 5", "attn", NULL});
    write_i64(len, 4);
    CHECK(gd_program_run(p) == GD_OK, "a good run after a bad one: %s", gd_ctx_error(ctx));
    watch_check(wt, "attention");
    gd_program_free(p);
    gd_graph_free(g);
}

/* ---- cache_write: the position written ---------------------------------------------------- */

static void test_cache_write(void)
{
    gd_graph *g = fresh();
    gd_tensor *cache = gd_state(g, "cache", GD_F32, 4, (int64_t[]){1, 1, 4, 2}); // (B, H, S 4, D 2), zeros
    gd_tensor *x = gd_input(g, "x", GD_F32, 4, (int64_t[]){1, 1, 1, 2});
    gd_tensor *pos = gd_input(g, "pos", GD_I64, 0, NULL);
    CHECK(gd_label(gd_cache_write(cache, x, pos), "kv_cache") != NULL, "cache_write: %s", gd_ctx_error(ctx));
    gd_tensor *y = gd_add(x, x);
    gd_program *p = gd_compile(g, 1, &y, GD_COMPILE_UPDATES);
    CHECK(p != NULL, "compile: %s", gd_ctx_error(ctx));
    if (p == NULL) return;
    watch wt = watch_start();
    const int64_t at[3] = {0, 2, 3};
    double want[8] = {0};
    for (int r = 0; r < 3; r++) {
        float row[2] = {(float)(2 * r + 1), (float)(2 * r + 2)};
        gd_tensor_write(x, row, sizeof row);
        write_i64(pos, at[r]);
        if (!run_ok(p, "cache_write")) break;
        want[at[r] * 2] = row[0];
        want[at[r] * 2 + 1] = row[1];
        expect_tensor("cache", cache, want, 8, 0);
    }
    write_i64(pos, 4);
    CHECK(gd_program_run(p) == GD_ERR_INVALID, "pos 4 of a cache of 4: not refused as bad data");
    check_error("pos 4", (const char *[]){"pos = 4", "kv_cache", NULL});
    expect_tensor("cache after a refused write", cache, want, 8, 0);
    watch_check(wt, "cache_write");
    gd_program_free(p);
    gd_graph_free(g);
}

int main(void)
{
    unsetenv("GRADUS_EXECUTOR");
    unsetenv("GRADUS_SYNC");
    ctx = td_new_ctx("testdev", 1);
    if (ctx == NULL) return 1;
    const char *backends[2] = {"cpu", "testdev"};
    for (int b = 0; b < 2; b++) {
        if (gd_ctx_use_backend(ctx, backends[b]) != GD_OK) {
            printf("runtime values: no %s backend in this build, skipped\n", backends[b]);
            continue;
        }
        test_adamw();
        test_rope();
        test_attention();
        test_cache_write();
    }
    return tu_finish("runtime values");
}
