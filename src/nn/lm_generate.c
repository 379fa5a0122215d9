/* lm_generate.c — sampling, and generation: through the inference engine (lm_engine.c,
 * a KV cache), or by recomputing the whole window for every token, which is simple and
 * exact (the same logits a training step computes), quadratic in the length, and the
 * check of the cache: both give the same tokens.
 *
 * The recomputed window is one compiled program of (1, T) tokens, T the prompt plus the
 * tokens to make (at most the model's positions): tokens past the current length are
 * padding, which the causal mask keeps from touching the logits read at the last real
 * position. Draw i of the sampler (lm_sample.c) is the one for the token at position i, on
 * both paths. */
#include "gradus_lm.h"
#include "gradus_semantics.h"

#include <math.h>
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

/* Appends `next` to win (the sequence so far, *len tokens) and tells the caller; 1 when it
 * is a stop token. */
static int emit(const gd_lm_generate_config *c, int32_t *win, int64_t *len, int32_t next)
{
    win[(*len)++] = next;
    if (c->on_token != NULL) c->on_token(c->user, next);
    int stop = 0;
    for (int i = 0; i < c->n_stop; i++) stop |= c->stop_ids[i] == next;
    return stop;
}

typedef struct emitting {
    const gd_lm_generate_config *c;
    int32_t *win;
    int64_t *len;
} emitting;

static int emit_step(void *user, const int32_t *next)
{
    emitting *m = user;
    return emit(m->c, m->win, m->len, next[0]);
}

/* Through the engine: prefill, then a decode step per token but the last, chained on the
 * backend (gd_lm_engine_decode). */
static gd_status generate_cached(gd_ctx *ctx, const char *model, const gd_lm_config *cfg, int64_t T, int32_t *win,
                                 int64_t *len, gd_lm_generate_config *c)
{
    gd_lm_engine *e = NULL;
    gd_lm_engine_config ec = {.max_len = T, .use_dtype = 1, .dtype = c->dtype, .quantize = c->quantize};
    void *scratch = malloc(gd_lm_sample_scratch(cfg->vocab_size));
    if (scratch == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
    gd_status st = gd_lm_engine_open(ctx, model, &ec, &e);
    const float *lg = NULL;
    double t0 = now_s();
    if (st == GD_OK) st = gd_lm_engine_prefill(e, win, *len, &lg);
    double t1 = now_s();
    c->prefill_s = t1 - t0;
    /* the first token from the prompt's logits; each next one sampled on the backend as the
     * decode step runs, so a step reads back one id, not the logits */
    int32_t next = st == GD_OK ? gd_lm_sample(lg, cfg->vocab_size, &c->sample, (uint64_t)*len, scratch) : 0;
    if (st == GD_OK && *len < T && !emit(c, win, len, next) && *len < T) {
        emitting m = {c, win, len};
        st = gd_lm_engine_decode(e, &next, &c->sample, T - *len, emit_step, &m);
    }
    c->decode_s = now_s() - t1;
    gd_lm_engine_free(e);
    free(scratch);
    return st;
}

/* By recomputing the window for every token. */
static gd_status generate_recomputed(gd_ctx *ctx, const char *model, const gd_lm_config *cfg, int64_t T, int32_t *win,
                                     int64_t *len, gd_lm_generate_config *c)
{
    int64_t V = cfg->vocab_size;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *ids = gd_input(g, "ids", GD_I32, 2, (int64_t[]){1, T});
    gd_tensor *logits = gd_lm_forward_quant(g, cfg, ids, NULL, NULL, 0, c->dtype, c->quantize);
    if (logits != NULL && c->dtype != GD_F32) logits = gd_cast(logits, GD_F32);
    gd_program *p = NULL;
    float *lg = malloc(sizeof(float) * (size_t)(T * V));
    void *scratch = malloc(gd_lm_sample_scratch(V));
    gd_status st = GD_OK;
    if (logits == NULL) st = gd_ctx_status(ctx) != GD_OK ? gd_ctx_status(ctx) : GD_ERR_INVALID;
    else if (lg == NULL || scratch == NULL) st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
    if (st == GD_OK) st = gd_lm_checkpoint_load(ctx, g, cfg, model, 0, NULL);
    if (st == GD_OK && (p = gd_compile(g, 1, &logits, 0)) == NULL) st = gd_ctx_status(ctx);
    int64_t n_prompt = *len;
    double t0 = now_s();
    while (st == GD_OK && *len < T) {
        st = gd_tensor_write(ids, win, sizeof *win * (size_t)T);
        if (st == GD_OK) st = gd_program_run(p);
        if (st == GD_OK) st = gd_tensor_read(logits, lg, sizeof(float) * (size_t)(T * V));
        if (st != GD_OK) break;
        if (*len == n_prompt) c->prefill_s = now_s() - t0;
        int32_t next = gd_lm_sample(lg + (*len - 1) * V, V, &c->sample, (uint64_t)*len, scratch);
        if (emit(c, win, len, next)) break;
    }
    c->decode_s = now_s() - t0 - c->prefill_s;
    free(lg);
    free(scratch);
    gd_program_free(p);
    gd_graph_free(g);
    return st;
}

gd_status gd_lm_generate(gd_ctx *ctx, const char *model_dir, const int32_t *prompt, int64_t n_prompt,
                         gd_lm_generate_config *c, int32_t **out, int64_t *n_out)
{
    if (ctx == NULL) return GD_ERR_INVALID;
    if (model_dir == NULL || c == NULL || out == NULL || n_out == NULL || (n_prompt > 0 && prompt == NULL))
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "NULL argument");
    *out = NULL;
    *n_out = 0;
    if (n_prompt < 1) return gd_ctx_fail(ctx, GD_ERR_INVALID, "an empty prompt (give at least one token)");
    gd_lm_config cfg;
    gd_status st = gd_lm_model_config(ctx, model_dir, &cfg);
    if (st != GD_OK) return st;
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= cfg.vocab_size)
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "prompt token %lld is id %d, outside the model's vocabulary of %lld",
                               (long long)i, (int)prompt[i], (long long)cfg.vocab_size);
    if (n_prompt >= cfg.max_seq)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "a prompt of %lld tokens leaves no room in the model's %lld positions",
                           (long long)n_prompt, (long long)cfg.max_seq);
    gd_dtype asked = c->dtype;
    if (!c->use_dtype && (st = gd_lm_model_dtype(ctx, model_dir, &c->dtype)) != GD_OK) return st;
    int64_t T = n_prompt + (c->max_tokens > 0 ? c->max_tokens : 64);
    if (T > cfg.max_seq) T = cfg.max_seq;
    c->prefill_s = c->decode_s = 0;
    int32_t *win = calloc((size_t)T, sizeof *win);
    if (win == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
    memcpy(win, prompt, sizeof *win * (size_t)n_prompt);
    int64_t len = n_prompt;
    st = c->recompute ? generate_recomputed(ctx, model_dir, &cfg, T, win, &len, c)
                      : generate_cached(ctx, model_dir, &cfg, T, win, &len, c);
    if (!c->use_dtype) c->dtype = asked; /* the config is the caller's again */
    if (st == GD_OK) {
        *out = win;
        *n_out = len;
    } else {
        free(win);
    }
    return st;
}
