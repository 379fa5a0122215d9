/* generate.c — text generation from C with the inference engine: load a model directory
 * (a gradus checkpoint: config.json, model.safetensors, tokenizer.json), prefill a prompt,
 * then sample one token per decode step from the KV cache, the steps chained on the backend
 * and each token printed as it comes back.
 *
 *     generate MODEL_DIR "Once upon a time" [TOKENS]
 */
#include "gradus_lm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(gd_ctx *ctx, const char *what)
{
    fprintf(stderr, "generate: %s: %s\n", what, gd_ctx_error(ctx));
    return 1;
}

/* Prints a token; nonzero (stop) at the end of text. */
static int print_token(void *tok, const int32_t *next)
{
    size_t len = 0;
    const uint8_t *text = gd_tokenizer_token(tok, next[0], &len);
    if (text != NULL) fwrite(text, 1, len, stdout);
    fflush(stdout);
    return next[0] == gd_tokenizer_eos(tok);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: generate MODEL_DIR PROMPT [TOKENS]\n");
        return 2;
    }
    int64_t n_new = argc > 3 ? atoll(argv[3]) : 32;
    gd_ctx *ctx = NULL;
    if (gd_ctx_create(&ctx, NULL) != GD_OK) return 1;

    char dir[1024], path[1100];
    gd_tokenizer *tok = NULL;
    gd_lm_engine *engine = NULL;
    if (gd_lm_checkpoint_resolve(ctx, argv[1], dir, sizeof dir) != GD_OK) return fail(ctx, "model");
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (gd_tokenizer_load(ctx, path, &tok) != GD_OK) return fail(ctx, "tokenizer");
    if (gd_lm_engine_open(ctx, dir, NULL, &engine) != GD_OK) return fail(ctx, "engine");

    int32_t *ids = NULL;
    size_t n = 0;
    if (gd_tokenizer_encode(ctx, tok, (const uint8_t *)argv[2], strlen(argv[2]), &ids, &n) != GD_OK)
        return fail(ctx, "encode");
    const int64_t V = gd_lm_engine_model(engine)->vocab_size;
    gd_sample_config sc = {.temperature = 0.8, .top_p = 0.95, .seed = 1};
    void *scratch = malloc(gd_lm_sample_scratch(V));
    const float *logits = NULL;
    if (scratch == NULL || gd_lm_engine_prefill(engine, ids, (int64_t)n, &logits) != GD_OK) return fail(ctx, "prefill");

    fputs(argv[2], stdout);
    /* the first token from the prompt's logits, the next ones sampled as each step runs */
    int32_t next = gd_lm_sample(logits, V, &sc, (uint64_t)gd_lm_engine_length(engine), scratch);
    int64_t room = gd_lm_engine_model(engine)->max_seq - gd_lm_engine_length(engine);
    if (n_new > room) n_new = room;
    if (n_new > 0 && !print_token(tok, &next) &&
        gd_lm_engine_decode(engine, &next, &sc, n_new - 1, print_token, tok) != GD_OK)
        return fail(ctx, "decode");
    putchar('\n');
    free(scratch);
    gd_free_mem(ids);
    gd_lm_engine_free(engine);
    gd_tokenizer_free(tok);
    gd_ctx_free(ctx);
    return 0;
}
