/* bench_ops.c — gradus's side of the op and model benchmarks: the rows of the PyTorch
 * peer benchmarks (torch_peer.py ops/cnn on the GPU machine, bench/torch_cpu_peer.py on
 * CPUs), timed on one backend, one JSON object per line.
 *
 *     bench_ops [--backend NAME] [--only ops|cnn|mlp|attn|rows] [--samples N] [--warmup N] [--max-n N]
 *               [--match TEXT]
 *
 * --match keeps the attention and row-op rows whose name holds TEXT (one shape under a
 * profiler). `rows` times the memory-bound row ops of a transformer step (the loss with its
 * gradient, RoPE) at the presets' shapes, with the bandwidth they reach, and a decode step's
 * sampling (greedy, temperature, top-k, top-p) over the presets' vocabularies.
 *
 * Method: inputs are written once; each program is run a few times to warm up, then
 * timed in samples of R back-to-back runs between two synchronizations (so launch cost
 * counts, host synchronization does not), R chosen so a sample lasts >= 20 ms; the figure
 * is the median over samples, in milliseconds per run. The CNN is the peer's: conv 1->32,
 * conv 32->64 (3x3, pad 1, each + relu + 2x2 max-pool), linear 3136->128, relu, linear
 * 128->10, cross-entropy, SGD lr 0.01, batch 128; the MLP is gd_nn_mlp (784->128->128->10).
 * matmul runs in fp32 (no TF32). */
#define _POSIX_C_SOURCE 200809L
#include "gradus_classifier.h"
#include "gradus_lm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static gd_ctx *ctx;
static int quick, warmups = 3, samples_wanted = 9, max_n = 4096;
static const char *match; /* --match: attention rows whose name holds it */

static void die(const char *what)
{
    fprintf(stderr, "bench_ops: %s: %s\n", what, gd_ctx_error(ctx));
    exit(1);
}

/* Median ms per run of prog. */
static double time_prog(gd_program *p)
{
    int warm = quick ? 1 : warmups, samples = quick ? 3 : samples_wanted < 1 ? 1 : samples_wanted > 64 ? 64 : samples_wanted;
    for (int i = 0; i < warm; i++)
        if (gd_program_run(p) != GD_OK) die("run");
    gd_ctx_synchronize(ctx);
    double t0 = now_ms();
    if (gd_program_run(p) != GD_OK) die("run");
    gd_ctx_synchronize(ctx);
    double one = now_ms() - t0;
    int reps = one > 0 ? (int)ceil(20.0 / one) : 100;
    if (reps < 1) reps = 1;
    if (reps > 1000) reps = 1000;
    if (quick) reps = 1;
    double ts[64];
    for (int s = 0; s < samples; s++) {
        gd_ctx_synchronize(ctx);
        t0 = now_ms();
        for (int r = 0; r < reps; r++)
            if (gd_program_run(p) != GD_OK) die("run");
        gd_ctx_synchronize(ctx);
        ts[s] = (now_ms() - t0) / reps;
    }
    qsort(ts, (size_t)samples, sizeof ts[0], cmp_d);
    return ts[samples / 2];
}

/* The next value in [-1, 1) of a xorshift stream. */
static float next_unit(uint64_t *x)
{
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return (float)((double)(*x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void fill(gd_tensor *t, uint64_t seed)
{
    int64_t n = gd_tensor_numel(t);
    float *v = malloc(sizeof(float) * (size_t)n);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) v[i] = next_unit(&x);
    if (gd_tensor_write(t, v, sizeof(float) * (size_t)n) != GD_OK) die("write");
    free(v);
}

/* As fill, in bf16 (each value's top 16 bits); the stream starts at seed * K, not fill's
 * seed * K + 1, as the attention rows' inputs always did. */
static void fill_bf16(gd_tensor *t, uint64_t seed)
{
    int64_t n = gd_tensor_numel(t);
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull;
    for (int64_t j = 0; j < n; j++) {
        float f = next_unit(&x);
        uint32_t u;
        memcpy(&u, &f, 4);
        h[j] = (uint16_t)(u >> 16);
    }
    if (gd_tensor_write(t, h, sizeof(uint16_t) * (size_t)n) != GD_OK) die("write");
    free(h);
}

static void op_row(const char *name, gd_graph *g, gd_tensor *out, const char *backend)
{
    if (out == NULL) die(name);
    gd_program *p = gd_compile(g, 1, &out, 0);
    if (p == NULL) die(name);
    double ms = time_prog(p);
    printf("{\"kind\": \"op\", \"name\": \"%s\", \"backend\": \"%s\", \"ms\": %.6g, \"threads\": %d}\n", name, backend, ms,
           gd_ctx_threads(ctx));
    fflush(stdout);
    gd_program_free(p);
}

static void ops(const char *backend)
{
    for (int n = 512; n <= 4096; n *= 2) {
        if ((quick && n > 1024) || n > max_n) break;
        gd_graph *g = gd_graph_new(ctx);
        gd_tensor *a = gd_input(g, "a", GD_F32, 2, (int64_t[]){n, n}), *b = gd_input(g, "b", GD_F32, 2, (int64_t[]){n, n});
        fill(a, 1), fill(b, 2);
        char name[64];
        snprintf(name, sizeof name, "MatMul %dx%d", n, n);
        op_row(name, g, gd_matmul(a, b, 0, 0), backend);
        gd_graph_free(g);
    }
    gd_graph *g = gd_graph_new(ctx);
    int64_t B = quick ? 8 : 64;
    gd_tensor *x = gd_input(g, "x", GD_F32, 4, (int64_t[]){B, 32, 64, 64});
    gd_tensor *w = gd_input(g, "w", GD_F32, 4, (int64_t[]){64, 32, 3, 3});
    fill(x, 3), fill(w, 4);
    char name[96];
    snprintf(name, sizeof name, "Conv2D b%lld 64x64x32->64 3x3", (long long)B);
    op_row(name, g, gd_conv2d(x, w, NULL, 1, 1, 1, 1), backend);
    gd_graph_free(g);
    int64_t R = quick ? 1024 : 4096;
    g = gd_graph_new(ctx);
    gd_tensor *r = gd_input(g, "r", GD_F32, 2, (int64_t[]){R, R});
    fill(r, 5);
    snprintf(name, sizeof name, "ReduceSum %lldx%lld", (long long)R, (long long)R);
    op_row(name, g, gd_sum(r, 0, NULL, 0), backend);
    snprintf(name, sizeof name, "Elementwise %lldx%lld (x*2+1).relu()", (long long)R, (long long)R);
    op_row(name, g, gd_relu(gd_scale(r, 2.0, 1.0)), backend);
    snprintf(name, sizeof name, "Softmax %lldx%lld rows", (long long)R, (long long)R);
    op_row(name, g, gd_softmax(r, -1), backend);
    gd_graph_free(g);
}

/* The MLP of gradus train (784 -> 128 -> 128 -> 10, relu), one SGD step at batch 128. */
static void mlp(const char *backend)
{
    gd_graph *g = gd_graph_new(ctx);
    int64_t B = 128;
    gd_tensor *x = gd_input(g, "x", GD_F32, 4, (int64_t[]){B, 1, 28, 28});
    gd_tensor *y = gd_input(g, "y", GD_I32, 1, (int64_t[]){B});
    gd_tensor *logits = gd_nn_mlp(x, 128);
    gd_tensor *loss = gd_cross_entropy(logits, y, -100);
    if (gd_backward(g, loss) != GD_OK) die("backward");
    if (gd_optimizer_sgd(g, &(gd_sgd_config){.lr = 0.01}) != GD_OK) die("sgd");
    if (gd_graph_init_params(g, 1) != GD_OK) die("init");
    fill(x, 7);
    int32_t labels[128];
    for (int i = 0; i < 128; i++) labels[i] = (i * 3) % 10;
    if (gd_tensor_write(y, labels, sizeof labels) != GD_OK) die("write");
    gd_program *step = gd_compile(g, 1, &loss, GD_COMPILE_UPDATES);
    gd_program *fwd = gd_compile(g, 1, &logits, 0);
    if (step == NULL || fwd == NULL) die("compile");
    double ts = time_prog(step), tf = time_prog(fwd);
    printf("{\"kind\": \"mlp\", \"backend\": \"%s\", \"train_step_ms\": %.6g, \"forward_ms\": %.6g, \"threads\": %d}\n",
           backend, ts, tf, gd_ctx_threads(ctx));
    fflush(stdout);
    gd_program_free(step);
    gd_program_free(fwd);
    gd_graph_free(g);
}

/* Causal attention in bf16 at the shapes of the transformer presets (batch x heads x 1024
 * x head size, grouped kv heads for qwen3): the forward, and attention_grad (which
 * recomputes the forward's statistics). FLOP/s count 4 B H T^2 D / 2 for the forward
 * (causal: half the pairs) and 2.5 times that for the backward, the FlashAttention
 * convention (the recomputation is not counted). The _lse figures are attention_lse and
 * attention_grad_lse, the pair that keeps the statistics (what training runs). */
static void attn_row(const char *backend, const char *name, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D)
{
    if (match != NULL && strstr(name, match) == NULL) return;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *q = gd_input(g, "q", GD_BF16, 4, (int64_t[]){B, H, T, D});
    gd_tensor *k = gd_input(g, "k", GD_BF16, 4, (int64_t[]){B, Hkv, T, D});
    gd_tensor *v = gd_input(g, "v", GD_BF16, 4, (int64_t[]){B, Hkv, T, D});
    gd_tensor *dy = gd_input(g, "dy", GD_BF16, 4, (int64_t[]){B, H, T, D});
    gd_tensor *xs[4] = {q, k, v, dy};
    for (int i = 0; i < 4; i++) fill_bf16(xs[i], (uint64_t)(i + 11));
    gd_tensor *y = gd_attention(q, k, v, 1, 0.0, NULL);
    gd_tensor *in[4] = {dy, q, k, v}, *grads[3];
    gd_attr causal = gd_attr_i("causal", 1);
    if (y == NULL || gd_op_multi(g, "attention_grad", 4, in, 1, &causal, 3, grads) != GD_OK) die("attention");
    gd_program *fwd = gd_compile(g, 1, &y, 0), *bwd = gd_compile(g, 3, grads, 0);
    if (fwd == NULL || bwd == NULL) die("compile");
    double tf = time_prog(fwd), tb = time_prog(bwd);
    /* the pair a training program's graph pass makes: the forward keeps lse, the backward
     * reads it and y back (fed here as inputs, from one run of the forward) */
    gd_tensor *ys[2], *yin = gd_input(g, "y", GD_BF16, 4, (int64_t[]){B, H, T, D});
    gd_tensor *lin = gd_input(g, "lse", GD_F32, 3, (int64_t[]){B, H, T});
    if (gd_op_multi(g, "attention_lse", 3, (gd_tensor *[]){q, k, v}, 1, &causal, 2, ys) != GD_OK) die("attention_lse");
    gd_tensor *lgrads[3], *lin6[6] = {dy, q, k, v, yin, lin};
    if (gd_op_multi(g, "attention_grad_lse", 6, lin6, 1, &causal, 3, lgrads) != GD_OK) die("attention_grad_lse");
    gd_program *lfwd = gd_compile(g, 2, ys, 0), *lbwd = gd_compile(g, 3, lgrads, 0);
    if (lfwd == NULL || lbwd == NULL) die("compile");
    if (gd_program_run(lfwd) != GD_OK) die("run");
    size_t ny = sizeof(uint16_t) * (size_t)gd_tensor_numel(yin), nl = sizeof(float) * (size_t)gd_tensor_numel(lin);
    void *hy = malloc(ny), *hl = malloc(nl);
    if (gd_tensor_read(ys[0], hy, ny) != GD_OK || gd_tensor_read(ys[1], hl, nl) != GD_OK ||
        gd_tensor_write(yin, hy, ny) != GD_OK || gd_tensor_write(lin, hl, nl) != GD_OK)
        die("y and lse");
    free(hy), free(hl);
    double tlf = time_prog(lfwd), tlb = time_prog(lbwd);
    double flops = 4.0 * (double)(B * H) * (double)T * (double)T * (double)D * 0.5;
    printf("{\"kind\": \"attention\", \"name\": \"%s\", \"backend\": \"%s\", \"fwd_ms\": %.6g, \"bwd_ms\": %.6g, "
           "\"fwd_tflops\": %.4g, \"bwd_tflops\": %.4g, \"fwd_lse_ms\": %.6g, \"bwd_lse_ms\": %.6g, "
           "\"fwd_lse_tflops\": %.4g, \"bwd_lse_tflops\": %.4g}\n",
           name, backend, tf, tb, flops / tf * 1e-9, 2.5 * flops / tb * 1e-9, tlf, tlb, flops / tlf * 1e-9,
           2.5 * flops / tlb * 1e-9);
    fflush(stdout);
    gd_program_free(fwd);
    gd_program_free(bwd);
    gd_program_free(lfwd);
    gd_program_free(lbwd);
    gd_graph_free(g);
}

/* RoPE over a bf16 (B, T, H, D) tensor in the rotate-half layout, as a Llama layer's q or k:
 * one run is the table of angles and the rotation. GB/s counts one read and one write. */
static void rope_row(const char *backend, const char *name, int64_t B, int64_t T, int64_t H, int64_t D, double theta)
{
    if (match != NULL && strstr(name, match) == NULL) return;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = gd_input(g, "x", GD_BF16, 4, (int64_t[]){B, T, H, D});
    fill_bf16(x, 3);
    gd_tensor *y = gd_rope(x, theta, 0, NULL);
    gd_program *p = y != NULL ? gd_compile(g, 1, &y, 0) : NULL;
    if (p == NULL) die("rope");
    double t = time_prog(p), bytes = 2.0 * 2.0 * (double)gd_tensor_numel(x);
    printf("{\"kind\": \"rope\", \"name\": \"%s\", \"backend\": \"%s\", \"ms\": %.6g, \"gbps\": %.4g}\n", name,
           backend, t, bytes / t * 1e-6);
    fflush(stdout);
    gd_program_free(p);
    gd_graph_free(g);
}

/* A norm over bf16 rows (R, C), as a training step runs it. Forward: rms_norm (x, w), or
 * add_layer_norm and add_rms_norm (x, r, w: the residual add in front, its sum stored too).
 * Backward: rms_norm_grad (dy, x, w), or rms_norm_grad_add and layer_norm_grad_add (dy, x, w,
 * r: the residual stream's gradient added to dx). GB/s counts the rows read and written (the
 * weight's and bias's gradients are C elements). */
static void norm_row(const char *backend, const char *name, const char *op, int64_t R, int64_t C)
{
    if (match != NULL && strstr(name, match) == NULL) return;
    const int grad = strstr(op, "_grad") != NULL, add = strstr(op, "add") != NULL, layer = strstr(op, "layer") != NULL;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *dy = gd_input(g, "dy", GD_BF16, 2, (int64_t[]){R, C});
    gd_tensor *x = gd_input(g, "x", GD_BF16, 2, (int64_t[]){R, C});
    gd_tensor *w = gd_input(g, "w", GD_BF16, 1, (int64_t[]){C});
    gd_tensor *r = gd_input(g, "r", GD_BF16, 2, (int64_t[]){R, C});
    fill_bf16(dy, 21), fill_bf16(x, 22), fill_bf16(w, 23), fill_bf16(r, 24);
    gd_tensor *fwd[3] = {x, add ? r : w, w}, *bwd[4] = {dy, x, w, r}, *outs[3];
    const int n_in = grad ? (add ? 4 : 3) : (add ? 3 : 2), n_out = grad ? (layer ? 3 : 2) : (add ? 2 : 1);
    gd_attr eps = gd_attr_f("eps", 1e-5);
    if (gd_op_multi(g, op, n_in, grad ? bwd : fwd, 1, &eps, n_out, outs) != GD_OK) die(op);
    gd_program *p = gd_compile(g, n_out, outs, 0);
    if (p == NULL) die("compile");
    double t = time_prog(p), bytes = 2.0 * (double)(R * C) * (add ? 4.0 : grad ? 3.0 : 2.0);
    printf("{\"kind\": \"%s\", \"name\": \"%s\", \"backend\": \"%s\", \"ms\": %.6g, \"gbps\": %.4g}\n",
           grad ? "norm_grad" : "norm", name, backend, t, bytes / t * 1e-6);
    fflush(stdout);
    gd_program_free(p);
    gd_graph_free(g);
}

/* A bias's gradient: the column sums of a bf16 (R, C) gradient into bf16 (C), as the
 * backward of a linear with a bias runs them. GB/s counts the read. */
static void bias_sum_row(const char *backend, const char *name, int64_t R, int64_t C)
{
    if (match != NULL && strstr(name, match) == NULL) return;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *dz = gd_input(g, "dz", GD_BF16, 2, (int64_t[]){R, C});
    fill_bf16(dz, 25);
    gd_tensor *db = gd_sum(dz, 1, (int64_t[]){0}, 0);
    gd_program *p = db != NULL ? gd_compile(g, 1, &db, 0) : NULL;
    if (p == NULL) die("sum");
    double t = time_prog(p), bytes = 2.0 * (double)(R * C);
    printf("{\"kind\": \"bias_sum\", \"name\": \"%s\", \"backend\": \"%s\", \"ms\": %.6g, \"gbps\": %.4g}\n", name,
           backend, t, bytes / t * 1e-6);
    fflush(stdout);
    gd_program_free(p);
    gd_graph_free(g);
}

/* The loss over bf16 logits (N, V) and its gradient, as a training step runs them (one node
 * on a backend that fuses the pair). GB/s counts one read and one write of the logits. */
static void ce_row(const char *backend, const char *name, int64_t N, int64_t V)
{
    if (match != NULL && strstr(name, match) == NULL) return;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = gd_input(g, "logits", GD_BF16, 2, (int64_t[]){N, V});
    gd_tensor *t = gd_input(g, "targets", GD_I32, 1, (int64_t[]){N});
    gd_tensor *dl = gd_input(g, "dloss", GD_F32, 0, NULL);
    fill_bf16(x, 5);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)N);
    for (int64_t i = 0; i < N; i++) ids[i] = (int32_t)((i * 7919) % V);
    float one = 1.0f;
    if (gd_tensor_write(t, ids, sizeof(int32_t) * (size_t)N) != GD_OK || gd_tensor_write(dl, &one, sizeof one) != GD_OK)
        die("write");
    free(ids);
    gd_attr a[2] = {gd_attr_i("ignore_index", -1), gd_attr_i("out_dtype", GD_F32)};
    gd_tensor *loss = gd_op(g, "cross_entropy", 2, (gd_tensor *[]){x, t}, 2, a);
    gd_tensor *dx = gd_op(g, "cross_entropy_grad", 3, (gd_tensor *[]){dl, x, t}, 1, a);
    gd_tensor *outs[2] = {loss, dx};
    gd_program *p = loss != NULL && dx != NULL ? gd_compile(g, 2, outs, 0) : NULL;
    if (p == NULL) die("cross_entropy");
    double ms = time_prog(p), bytes = 2.0 * 2.0 * (double)N * (double)V;
    printf("{\"kind\": \"cross_entropy\", \"name\": \"%s\", \"backend\": \"%s\", \"ms\": %.6g, \"gbps\": %.4g}\n",
           name, backend, ms, bytes / ms * 1e-6);
    fflush(stdout);
    gd_program_free(p);
    gd_graph_free(g);
}

/* A decode step's sampling of the next token from bf16 logits (B, V) (values in [-1, 1): a
 * flat distribution, the slowest case for top-p, which then takes most of the vocabulary). */
static void sample_row(const char *backend, const char *name, int64_t B, int64_t V, gd_sample_config c)
{
    if (match != NULL && strstr(name, match) == NULL) return;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = gd_input(g, "logits", GD_BF16, 2, (int64_t[]){B, V});
    gd_tensor *d = gd_input(g, "draw", GD_I64, 1, (int64_t[]){B});
    fill_bf16(x, 9);
    int64_t *draws = malloc(sizeof(int64_t) * (size_t)B);
    for (int64_t b = 0; b < B; b++) draws[b] = 17 + b;
    if (gd_tensor_write(d, draws, sizeof(int64_t) * (size_t)B) != GD_OK) die("write");
    free(draws);
    gd_tensor *y = gd_sample(x, d, &c);
    gd_program *p = y != NULL ? gd_compile(g, 1, &y, 0) : NULL;
    if (p == NULL) die("sample");
    printf("{\"kind\": \"sample\", \"name\": \"%s\", \"backend\": \"%s\", \"ms\": %.6g}\n", name, backend,
           time_prog(p));
    fflush(stdout);
    gd_program_free(p);
    gd_graph_free(g);
}

/* The memory-bound row ops of a transformer's step at the presets' shapes. */
static void rows(const char *backend)
{
    ce_row(backend, "ce gpt2 16384x50304", quick ? 64 : 16384, 50304);
    ce_row(backend, "ce stories110m 16384x32000", quick ? 64 : 16384, 32000);
    ce_row(backend, "ce qwen3 8192x151936", quick ? 16 : 8192, 151936);
    rope_row(backend, "rope stories110m q b16 t1024 h12 d64", quick ? 1 : 16, quick ? 128 : 1024, 12, 64, 1e4);
    rope_row(backend, "rope qwen3 q b8 t1024 h16 d128", quick ? 1 : 8, quick ? 128 : 1024, 16, 128, 1e6);
    rope_row(backend, "rope qwen3 k b8 t1024 h8 d128", quick ? 1 : 8, quick ? 128 : 1024, 8, 128, 1e6);
    norm_row(backend, "norm gpt2 add_layer_norm 16384x768", "add_layer_norm", quick ? 64 : 16384, 768);
    norm_row(backend, "norm qwen3 add_rms_norm 8192x1024", "add_rms_norm", quick ? 64 : 8192, 1024);
    norm_row(backend, "norm qwen3 q rms_norm 131072x128", "rms_norm", quick ? 64 : 131072, 128);
    norm_row(backend, "norm_grad gpt2 layer_norm_grad_add 16384x768", "layer_norm_grad_add", quick ? 64 : 16384, 768);
    norm_row(backend, "norm_grad stories110m rms_norm_grad_add 16384x768", "rms_norm_grad_add", quick ? 64 : 16384, 768);
    norm_row(backend, "norm_grad qwen3 rms_norm_grad_add 8192x1024", "rms_norm_grad_add", quick ? 64 : 8192, 1024);
    norm_row(backend, "norm_grad qwen3 q rms_norm_grad 131072x128", "rms_norm_grad", quick ? 64 : 131072, 128);
    norm_row(backend, "norm_grad qwen3 k rms_norm_grad 65536x128", "rms_norm_grad", quick ? 64 : 65536, 128);
    bias_sum_row(backend, "bias_sum gpt2 16384x768", quick ? 64 : 16384, 768);
    bias_sum_row(backend, "bias_sum gpt2 16384x2304", quick ? 64 : 16384, 2304);
    bias_sum_row(backend, "bias_sum gpt2 16384x3072", quick ? 64 : 16384, 3072);
    const struct {
        const char *name;
        gd_sample_config c;
    } how[4] = {{"greedy", {.temperature = 0}}, {"t0.8", {.temperature = 0.8, .seed = 1}},
                {"t0.8 top-k 50", {.temperature = 0.8, .top_k = 50, .seed = 1}},
                {"t0.8 top-p 0.95", {.temperature = 0.8, .top_p = 0.95, .seed = 1}}};
    const struct {
        const char *name;
        int64_t B, V;
    } shapes[3] = {{"stories110m b1 v32000", 1, 32000}, {"qwen3 b1 v151936", 1, 151936}, {"stories110m b64 v32000", 64, 32000}};
    for (int s = 0; s < 3; s++)
        for (int h = 0; h < 4; h++) {
            char name[96];
            snprintf(name, sizeof name, "sample %s %s", shapes[s].name, how[h].name);
            sample_row(backend, name, quick && shapes[s].B > 1 ? 2 : shapes[s].B, shapes[s].V, how[h].c);
        }
}

static void attn(const char *backend)
{
    attn_row(backend, "gpt2 b16 h12 t1024 d64", quick ? 1 : 16, 12, 12, quick ? 128 : 1024, 64);
    attn_row(backend, "qwen3 b8 h16/8 t1024 d128", quick ? 1 : 8, 16, 8, quick ? 128 : 1024, 128);
}

static void cnn(const char *backend)
{
    gd_graph *g = gd_graph_new(ctx);
    int64_t B = 128;
    gd_tensor *x = gd_input(g, "x", GD_F32, 4, (int64_t[]){B, 1, 28, 28});
    gd_tensor *y = gd_input(g, "y", GD_I32, 1, (int64_t[]){B});
    gd_tensor *h = gd_max_pool2d(gd_relu(gd_nn_conv2d(x, "c1", 32, 3, 1, 1, 1)), 2, 2, 0);
    h = gd_max_pool2d(gd_relu(gd_nn_conv2d(h, "c2", 64, 3, 1, 1, 1)), 2, 2, 0);
    h = gd_reshape(h, 2, (int64_t[]){B, 64 * 7 * 7});
    gd_tensor *logits = gd_nn_linear(gd_relu(gd_nn_linear(h, "f1", 128, 1)), "f2", 10, 1);
    gd_tensor *loss = gd_cross_entropy(logits, y, -100);
    if (gd_backward(g, loss) != GD_OK) die("backward");
    if (gd_optimizer_sgd(g, &(gd_sgd_config){.lr = 0.01}) != GD_OK) die("sgd");
    if (gd_graph_init_params(g, 1) != GD_OK) die("init");
    fill(x, 6);
    int32_t labels[128];
    for (int i = 0; i < 128; i++) labels[i] = (i * 7) % 10;
    if (gd_tensor_write(y, labels, sizeof labels) != GD_OK) die("write");
    gd_program *step = gd_compile(g, 1, &loss, GD_COMPILE_UPDATES);
    gd_program *fwd = gd_compile(g, 1, &logits, 0);
    if (step == NULL || fwd == NULL) die("compile");
    double ts = time_prog(step);
    float l; /* read before the forward program reuses the graph's memory */
    if (gd_tensor_read(loss, &l, sizeof l) != GD_OK || !isfinite(l)) die("loss");
    double tf = time_prog(fwd);
    printf("{\"kind\": \"cnn\", \"backend\": \"%s\", \"train_step_ms\": %.6g, \"forward_ms\": %.6g, \"threads\": %d}\n",
           backend, ts, tf, gd_ctx_threads(ctx));
    fflush(stdout);
    gd_program_free(step);
    gd_program_free(fwd);
    gd_graph_free(g);
}

int main(int argc, char **argv)
{
    const char *backend = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) backend = argv[++i];
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
        else if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (strcmp(argv[i], "--samples") == 0 && i + 1 < argc) samples_wanted = atoi(argv[++i]);
        else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) warmups = atoi(argv[++i]);
        else if (strcmp(argv[i], "--max-n") == 0 && i + 1 < argc) max_n = atoi(argv[++i]);
        else if (strcmp(argv[i], "--match") == 0 && i + 1 < argc) match = argv[++i];
        else {
            fprintf(stderr, "usage: bench_ops [--backend NAME] [--only ops|cnn|mlp|attn|rows] [--samples N] [--warmup N] "
                            "[--max-n N] [--match TEXT] [--quick]\n");
            return 2;
        }
    }
    if (gd_ctx_create(&ctx, NULL) != GD_OK) return 1;
    if (backend != NULL && gd_ctx_use_backend(ctx, backend) != GD_OK) die("backend");
    const char *label = backend != NULL ? backend : "default";
    if (only == NULL || strcmp(only, "ops") == 0) ops(label);
    if (only == NULL || strcmp(only, "mlp") == 0) mlp(label);
    if (only != NULL && strcmp(only, "attn") == 0) attn(label);
    if (only != NULL && strcmp(only, "rows") == 0) rows(label);
    if (only == NULL || strcmp(only, "cnn") == 0) cnn(label);
    gd_ctx_free(ctx);
    return 0;
}
