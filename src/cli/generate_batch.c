/* generate_batch.c — `gradus generate --batch B`: B continuations of one prompt decoded
 * together by the engine (each sequence draws from its own stream of the seed, so they
 * differ when sampling), printed one per line once all are done, then the prefill and
 * decode throughput of the batch. The steps are chained on the backend
 * (gd_lm_engine_decode); a sequence that makes a stop token is done, and what it makes
 * while the others go on is left out. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void print_row(const gd_tokenizer *tok, int ids, int64_t b, const char *prompt, const int32_t *t, int64_t n)
{
    printf("[%lld] %s", (long long)b, ids || prompt == NULL ? "" : prompt);
    for (int64_t i = 0; i < n; i++) {
        size_t len = 0;
        const uint8_t *s = tok != NULL && !ids ? gd_tokenizer_token(tok, t[i], &len) : NULL;
        if (s != NULL) fwrite(s, 1, len, stdout);
        else printf("%s%d", i ? "," : "", (int)t[i]);
    }
    printf("\n");
}

/* The tokens made so far: B rows of at most max_new. */
typedef struct rows {
    int64_t B, max_new, live, total;
    int64_t *made;
    int32_t *out;
    char *done;
    const gd_lm_generate_config *gc;
} rows;

/* Takes each live row's token; 1 once every row is done. */
static int take(void *user, const int32_t *cur)
{
    rows *r = user;
    for (int64_t b = 0; b < r->B; b++) {
        if (r->done[b]) continue;
        r->out[b * r->max_new + r->made[b]++] = cur[b];
        r->total++;
        int stop = r->made[b] == r->max_new;
        for (int i = 0; i < r->gc->n_stop; i++) stop |= r->gc->stop_ids[i] == cur[b];
        if (stop) r->done[b] = 1, r->live--;
    }
    return r->live == 0;
}

int cli_generate_batch(gd_ctx *ctx, const char *dir, const gd_tokenizer *tok, const char *prompt, const int32_t *ids,
                       int64_t n, int64_t B, const gd_lm_generate_config *gc, int print_ids)
{
    gd_lm_config cfg;
    if (gd_lm_model_config(ctx, dir, &cfg) != GD_OK) return 0;
    int64_t max_new = gc->max_tokens > 0 ? gc->max_tokens : 64;
    if (n + max_new > cfg.max_seq) max_new = cfg.max_seq - n;
    if (max_new < 1) {
        fprintf(stderr, "gradus generate: a prompt of %lld tokens leaves no room in the model's %lld positions\n",
                (long long)n, (long long)cfg.max_seq);
        return 0;
    }
    gd_lm_engine_config ec = {.max_len = n + max_new, .batch = B, .use_dtype = gc->use_dtype, .dtype = gc->dtype,
                              .quantize = gc->quantize};
    int64_t V = cfg.vocab_size;
    gd_lm_engine *e = NULL;
    const int32_t **prompts = malloc(sizeof *prompts * (size_t)B);
    int64_t *lens = malloc(sizeof *lens * (size_t)B), *made = calloc((size_t)B, sizeof *made);
    int32_t *cur = malloc(sizeof *cur * (size_t)B);
    int32_t *out = malloc(sizeof *out * (size_t)(B * max_new));
    char *done = calloc((size_t)B, 1);
    void *scratch = malloc(gd_lm_sample_scratch(V));
    int ok = prompts != NULL && lens != NULL && made != NULL && cur != NULL && done != NULL && out != NULL &&
             scratch != NULL;
    if (!ok) fprintf(stderr, "gradus generate: out of memory for a batch of %lld\n", (long long)B);
    for (int64_t b = 0; ok && b < B; b++) prompts[b] = ids, lens[b] = n;
    const float *lg = NULL;
    double t0 = now_s(), t1 = t0;
    ok = ok && gd_lm_engine_open(ctx, dir, &ec, &e) == GD_OK;
    if (ok) t0 = now_s();
    ok = ok && gd_lm_engine_prefill_batch(e, prompts, lens, &lg) == GD_OK;
    t1 = now_s();
    rows r = {.B = B, .max_new = max_new, .live = B, .made = made, .out = out, .done = done, .gc = gc};
    for (int64_t b = 0; ok && b < B; b++) /* the first tokens from the prompt's logits */
        cur[b] = gd_lm_sample(lg + b * V, V, &gc->sample, (uint64_t)n + ((uint64_t)b << 40), scratch);
    if (ok && !take(&r, cur)) ok = gd_lm_engine_decode(e, cur, &gc->sample, max_new - 1, take, &r) == GD_OK;
    int64_t total = r.total;
    double t2 = now_s();
    if (ok) {
        for (int64_t b = 0; b < B; b++) print_row(tok, print_ids || tok == NULL, b, prompt, out + b * max_new, made[b]);
        fprintf(stderr, "prefill: %lld x %lld tokens in %.3f s (%.1f tokens/s); decode: %lld tokens in %.3f s "
                        "(%.1f tokens/s over a batch of %lld)\n",
                (long long)B, (long long)n, t1 - t0, t1 > t0 ? (double)(B * n) / (t1 - t0) : 0.0, (long long)total,
                t2 - t1, t2 > t1 ? (double)(total - B) / (t2 - t1) : 0.0, (long long)B);
    } else if (prompts != NULL && out != NULL) {
        fprintf(stderr, "gradus generate: %s\n", gd_ctx_error(ctx));
    }
    gd_lm_engine_free(e);
    free(prompts), free(lens), free(made), free(cur), free(done), free(out), free(scratch);
    return ok;
}
