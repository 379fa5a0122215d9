/* engine_logits.c — gradus's half of the inference engine's parity check against
 * transformers (bench/engine_parity.py).
 *
 *   engine_logits MODEL PROMPT_IDS NEW OUT.safetensors [BACKEND [DTYPE]]
 *
 * Loads MODEL into the inference engine and writes, in f32, "logits" (P + NEW, V): row i
 * holds the logits after token i of the sequence the prompt (P ids, comma separated)
 * starts and NEW greedy decode steps continue, and "ids" (P + NEW) i32, that sequence.
 * Rows of the prompt come from prefilling each of its prefixes (so every prefill pass
 * size is exercised), the others from one decode step each. DTYPE (f32, bf16, f16) is the
 * engine's weights and activations; default: as the model's files store them. */
#include "gradus_lm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gd_ctx *ctx;

static int die(const char *what)
{
    fprintf(stderr, "engine_logits: %s: %s\n", what, gd_ctx_error(ctx));
    return 1;
}

/* the greedy pick: gd_lm_sample's first highest logit (no settings, no scratch) */
static int32_t argmax(const float *x, int64_t n) { return gd_lm_sample(x, n, NULL, 0, NULL); }

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: engine_logits MODEL PROMPT_IDS NEW OUT.safetensors [BACKEND [DTYPE]]\n");
        return 2;
    }
    int64_t n_new = atoll(argv[3]), P = 1;
    for (const char *s = argv[2]; *s; s++) P += *s == ',';
    if (gd_ctx_create(&ctx, NULL) != GD_OK) return 1;
    if (argc > 5 && gd_ctx_use_backend(ctx, argv[5]) != GD_OK) return die("backend");
    gd_lm_engine_config ec = {0};
    if (argc > 6 && !(ec.use_dtype = gd_dtype_parse(argv[6], &ec.dtype))) {
        fprintf(stderr, "engine_logits: dtype %s: f32, bf16 or f16\n", argv[6]);
        return 2;
    }
    gd_lm_engine *e = NULL;
    if (gd_lm_engine_open(ctx, argv[1], &ec, &e) != GD_OK) return die(argv[1]);
    int64_t V = gd_lm_engine_model(e)->vocab_size, n = P + n_new;
    int32_t *ids = calloc((size_t)n, sizeof *ids);
    float *rows = calloc((size_t)(n * V), sizeof *rows);
    if (ids == NULL || rows == NULL) return 1;
    const char *s = argv[2];
    for (int64_t i = 0; i < P; i++) {
        ids[i] = (int32_t)strtol(s, (char **)&s, 10);
        if (*s == ',') s++;
    }
    const float *lg = NULL;
    for (int64_t i = 0; i < P; i++) {
        if (gd_lm_engine_prefill(e, ids, i + 1, &lg) != GD_OK) return die("prefill");
        memcpy(rows + i * V, lg, sizeof(float) * (size_t)V);
    }
    for (int64_t i = P; i < n; i++) {
        ids[i] = argmax(rows + (i - 1) * V, V);
        if (gd_lm_engine_step(e, ids[i], &lg) != GD_OK) return die("step");
        memcpy(rows + i * V, lg, sizeof(float) * (size_t)V);
    }
    gd_st_entry out[2] = {{"logits", GD_F32, 2, {n, V}, rows}, {"ids", GD_I32, 1, {n}, ids}};
    if (gd_st_write(ctx, argv[4], out, 2, NULL, NULL, 0) != GD_OK) return die(argv[4]);
    gd_lm_engine_free(e);
    free(ids);
    free(rows);
    gd_ctx_free(ctx);
    return 0;
}
