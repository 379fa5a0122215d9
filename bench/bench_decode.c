/* bench_decode.c — the inference engine's speed: prefill and greedy decoding.
 *
 *   bench_decode MODEL [--backend NAME] [--dtype T] [--quantize int8|w8a8] [--batch B] [--prompt N]
 *                [--new N] [--reps N] [--chain 0|1]
 *
 * Loads MODEL into the engine (a cache of prompt + new positions), then, after one
 * untimed round, times `reps` rounds of: prefill B copies of a prompt of N ids (fixed
 * pseudo-random ids), then `new` decode steps, each token the greedy pick made inside the
 * decode program: chained on the backend and read back a few steps at a time
 * (gd_lm_engine_decode, as `gradus generate` does), or with --chain 0 one step per call,
 * one id per sequence read back each step (gd_lm_engine_next_batch). Prints one JSON line with the median prefill tokens/s and the
 * median decode tokens/s (B x steps per second of the decode phase) over the rounds, and
 * the weight bytes read per decode step, for the bandwidth bound. */
#include "gradus_lm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static gd_ctx *ctx;

static int die(const char *what)
{
    fprintf(stderr, "bench_decode: %s: %s\n", what, gd_ctx_error(ctx));
    return 1;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the chained steps' callback: each step's tokens become the next step's */
typedef struct keeper {
    int32_t *cur;
    int64_t B;
} keeper;

static int keep(void *user, const int32_t *next)
{
    keeper *k = user;
    memcpy(k->cur, next, sizeof *next * (size_t)k->B);
    return 0;
}

/* the greedy pick: gd_lm_sample's first highest logit (no settings, no scratch) */
static int32_t argmax(const float *x, int64_t n) { return gd_lm_sample(x, n, NULL, 0, NULL); }

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_decode MODEL [--backend NAME] [--dtype T] [--prompt N] [--new N] [--reps N] "
                        "[--batch B] [--quantize int8|w8a8] [--temperature X] [--top-k K] [--top-p P] [--seed S] "
                        "[--chain 0|1]\n");
        return 2;
    }
    const char *backend = NULL, *dtype = NULL, *quant = "none";
    int64_t P = 16, N = 128, reps = 5, B = 1, chain = 1;
    gd_sample_config sc = {0}; /* greedy unless a temperature is given */
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--backend") == 0) backend = argv[i + 1];
        else if (strcmp(argv[i], "--dtype") == 0) dtype = argv[i + 1];
        else if (strcmp(argv[i], "--quantize") == 0) quant = argv[i + 1];
        else if (strcmp(argv[i], "--prompt") == 0) P = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--new") == 0) N = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--reps") == 0) reps = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--batch") == 0) B = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--temperature") == 0) sc.temperature = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--top-k") == 0) sc.top_k = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--top-p") == 0) sc.top_p = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--seed") == 0) sc.seed = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--chain") == 0) chain = atoll(argv[i + 1]);
        else {
            fprintf(stderr, "bench_decode: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (P < 1 || N < 0 || reps < 1 || reps > 100 || B < 1 || B > 65536) return 2;
    if (gd_ctx_create(&ctx, NULL) != GD_OK) return 1;
    if (backend != NULL && gd_ctx_use_backend(ctx, backend) != GD_OK) return die("backend");
    gd_lm_engine_config ec = {.max_len = P + N + 1, .batch = B};
    if (dtype != NULL && !(ec.use_dtype = gd_dtype_parse(dtype, &ec.dtype))) return 2;
    ec.quantize = strcmp(quant, "int8") == 0 ? GD_LM_INT8 : strcmp(quant, "w8a8") == 0 ? GD_LM_W8A8 : GD_LM_FLOAT;
    double t_open = now_s();
    gd_lm_engine *e = NULL;
    if (gd_lm_engine_open(ctx, argv[1], &ec, &e) != GD_OK) return die(argv[1]);
    t_open = now_s() - t_open;
    const gd_lm_config *cfg = gd_lm_engine_model(e);
    int64_t V = cfg->vocab_size;
    int32_t *prompt = malloc(sizeof *prompt * (size_t)P);
    double *pre = malloc(sizeof(double) * (size_t)reps), *dec = malloc(sizeof(double) * (size_t)reps);
    if (prompt == NULL || pre == NULL || dec == NULL) return 1;
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < P; i++) { /* xorshift: fixed ids spread over the vocabulary */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        prompt[i] = (int32_t)(x % (uint64_t)V);
    }
    const int32_t **prompts = malloc(sizeof *prompts * (size_t)B);
    int64_t *lens = malloc(sizeof *lens * (size_t)B);
    int32_t *cur = malloc(sizeof *cur * (size_t)B), *next = malloc(sizeof *next * (size_t)B);
    if (prompts == NULL || lens == NULL || cur == NULL || next == NULL) return 1;
    for (int64_t b = 0; b < B; b++) prompts[b] = prompt, lens[b] = P;
    int32_t last = 0;
    for (int64_t r = -1; r < reps; r++) {
        const float *lg = NULL;
        double t0 = now_s();
        if (gd_lm_engine_prefill_batch(e, prompts, lens, &lg) != GD_OK) return die("prefill");
        double t1 = now_s();
        for (int64_t b = 0; b < B; b++) cur[b] = argmax(lg + b * V, V);
        keeper k = {cur, B};
        if (chain) {
            if (gd_lm_engine_decode(e, cur, &sc, N, keep, &k) != GD_OK) return die("decode");
        } else {
            for (int64_t i = 0; i < N; i++) {
                if (gd_lm_engine_next_batch(e, cur, &sc, next) != GD_OK) return die("step");
                keep(&k, next);
            }
        }
        last = cur[0];
        double t2 = now_s();
        if (r >= 0) pre[r] = (double)(B * P) / (t1 - t0), dec[r] = (double)(B * N) / (t2 - t1);
    }
    qsort(pre, (size_t)reps, sizeof *pre, cmp_double);
    qsort(dec, (size_t)reps, sizeof *dec, cmp_double);
    /* the bytes one decode step must read at least: every weight once (the tied
     * embedding's rows are gathered, but the head reads all of it) */
    int64_t D = cfg->dim, F = cfg->hidden_dim, H = cfg->n_heads, K = cfg->n_kv_heads, hd = cfg->head_dim;
    int64_t per_layer = cfg->arch == GD_LM_GPT2 ? 4 * D * D + 2 * D * F : D * (H + 2 * K) * hd + H * hd * D + 3 * D * F;
    int64_t weights = cfg->n_layers * per_layer + V * D * (cfg->tied_embeddings ? 1 : 2);
    gd_dtype dt = ec.use_dtype ? ec.dtype : GD_F32;
    if (!ec.use_dtype) gd_lm_model_dtype(ctx, argv[1], &dt);
    int64_t es = (int64_t)gd_dtype_size(dt), layers = cfg->n_layers * per_layer;
    /* quantized (llama), the projections' and the head's weights are a byte each (their scales
     * are negligible) and the embedding is read a row at a time */
    int64_t bytes = ec.quantize != GD_LM_FLOAT && cfg->arch == GD_LM_LLAMA ? layers + V * D : weights * es;
    printf("{\"kind\":\"decode\",\"engine\":\"gradus\",\"model\":\"%s\",\"backend\":\"%s\",\"dtype\":\"%s\",\"quantize\":\"%s\",\"batch\":%lld,"
           "\"prompt\":%lld,\"new_tokens\":%lld,\"reps\":%lld,\"prefill_tok_s\":%.1f,\"decode_tok_s\":%.1f,"
           "\"weight_bytes\":%lld,\"open_s\":%.2f,\"last\":%d,\"temperature\":%g,\"top_k\":%lld,\"top_p\":%g,\"chained\":%d}\n",
           argv[1], backend != NULL ? backend : "default", gd_dtype_name(dt), quant, (long long)B, (long long)P, (long long)N,
           (long long)reps, pre[reps / 2], dec[reps / 2], (long long)bytes, t_open,
           (int)last, sc.temperature, (long long)sc.top_k, sc.top_p, (int)(chain != 0));
    gd_lm_engine_free(e);
    free(prompts), free(lens), free(cur), free(next);
    free(prompt);
    free(pre);
    free(dec);
    gd_ctx_free(ctx);
    return 0;
}
