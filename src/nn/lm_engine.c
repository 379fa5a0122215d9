/* lm_engine.c — the inference engine: a model loaded once, a prompt prefilled in chunks,
 * then one token per decode step, each layer's keys and values kept in a KV cache.
 *
 * One graph holds two forward passes of the model (gd_lm_forward_cached): a prefill pass
 * over `chunk` tokens and a decode pass over one. They share the parameters (by name) and
 * the cache states, and read the same two runtime scalars: pos, the position of their
 * first token (where the cache is written, and RoPE's or GPT-2's position offset), and
 * kv_len = pos + T, how many cached positions attention reads. Both programs are compiled
 * once; a step writes the token and the two scalars, and runs.
 *
 * A prompt is prefilled in whole chunks, and whatever is left (fewer than `chunk` tokens)
 * goes through the decode program a token at a time, so no padding ever reaches the cache
 * or a position table. Positions past the current length may hold an earlier sequence's
 * keys: kv_len keeps attention from reading them, and a new sequence overwrites them. */
#include "gradus_lm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gd_lm_engine {
    gd_ctx *ctx;
    gd_graph *g;
    gd_lm_config cfg;
    int64_t max_len, chunk, len;
    gd_tensor *pos, *kv_len, *ids_p, *ids_d, *logits_p, *logits_d;
    gd_program *prefill, *decode;
    float *logits; /* vocab_size: the latest logits */
};

static gd_status status_or(gd_ctx *ctx, gd_status fallback)
{
    return gd_ctx_status(ctx) != GD_OK ? gd_ctx_status(ctx) : fallback;
}

void gd_lm_engine_free(gd_lm_engine *e)
{
    if (e == NULL) return;
    gd_program_free(e->prefill);
    gd_program_free(e->decode);
    gd_graph_free(e->g);
    free(e->logits);
    free(e);
}

/* The logits of the last position of a (1, T, V) forward pass, as a (1, 1, V) view. */
static gd_tensor *last_position(gd_tensor *logits)
{
    if (logits == NULL) return NULL;
    int64_t T = gd_tensor_dim(logits, 1);
    return gd_slice(logits, 1, T - 1, T);
}

gd_status gd_lm_engine_open(gd_ctx *ctx, const char *model_dir, const gd_lm_engine_config *c, gd_lm_engine **out)
{
    if (ctx == NULL) return GD_ERR_INVALID;
    if (model_dir == NULL || out == NULL) return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_lm_engine_open: NULL argument");
    *out = NULL;
    gd_lm_engine *e = calloc(1, sizeof *e);
    if (e == NULL) return gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
    e->ctx = ctx;
    gd_status st = gd_lm_model_config(ctx, model_dir, &e->cfg);
    if (st != GD_OK) {
        gd_lm_engine_free(e);
        return st;
    }
    int64_t want = c != NULL ? c->max_len : 0, chunk = c != NULL ? c->chunk : 0;
    if (want < 0 || chunk < 0) {
        gd_lm_engine_free(e);
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_lm_engine_open: max_len %lld and chunk %lld must not be negative",
                           (long long)want, (long long)chunk);
    }
    e->max_len = want > 0 && want < e->cfg.max_seq ? want : e->cfg.max_seq;
    e->chunk = chunk > 0 ? chunk : 64;
    if (e->chunk > e->max_len) e->chunk = e->max_len;

    e->g = gd_graph_new(ctx);
    e->logits = malloc(sizeof(float) * (size_t)e->cfg.vocab_size);
    if (e->g == NULL || e->logits == NULL) {
        gd_lm_engine_free(e);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
    }
    e->pos = gd_input(e->g, "pos", GD_I32, 0, NULL);
    e->kv_len = gd_input(e->g, "kv_len", GD_I32, 0, NULL);
    e->ids_p = gd_input(e->g, "ids.prefill", GD_I32, 2, (int64_t[]){1, e->chunk});
    e->ids_d = gd_input(e->g, "ids.decode", GD_I32, 2, (int64_t[]){1, 1});
    e->logits_p = last_position(gd_lm_forward_cached(e->g, &e->cfg, e->ids_p, e->pos, e->kv_len, e->max_len, GD_F32));
    e->logits_d = gd_lm_forward_cached(e->g, &e->cfg, e->ids_d, e->pos, e->kv_len, e->max_len, GD_F32);
    if (e->logits_p == NULL || e->logits_d == NULL) st = status_or(ctx, GD_ERR_INVALID);
    if (st == GD_OK) st = gd_lm_checkpoint_load(ctx, e->g, &e->cfg, model_dir, 0, NULL);
    /* Without GD_COMPILE_UPDATES: each program runs the cache writes its logits need (its
     * own), not the other program's. */
    if (st == GD_OK && (e->prefill = gd_compile(e->g, 1, &e->logits_p, 0)) == NULL)
        st = status_or(ctx, GD_ERR_INVALID);
    if (st == GD_OK && (e->decode = gd_compile(e->g, 1, &e->logits_d, 0)) == NULL)
        st = status_or(ctx, GD_ERR_INVALID);
    if (st != GD_OK) {
        gd_lm_engine_free(e);
        return st;
    }
    *out = e;
    return GD_OK;
}

const gd_lm_config *gd_lm_engine_model(const gd_lm_engine *e) { return e != NULL ? &e->cfg : NULL; }

int64_t gd_lm_engine_length(const gd_lm_engine *e) { return e != NULL ? e->len : 0; }

/* Runs `p` over T tokens from position e->len on, and reads the logits after the last. */
static gd_status run_at(gd_lm_engine *e, gd_program *p, gd_tensor *ids, const int32_t *tok, int64_t T,
                        gd_tensor *logits)
{
    int32_t pos = (int32_t)e->len, len = (int32_t)(e->len + T);
    gd_status st = gd_tensor_write(ids, tok, sizeof *tok * (size_t)T);
    if (st == GD_OK) st = gd_tensor_write(e->pos, &pos, sizeof pos);
    if (st == GD_OK) st = gd_tensor_write(e->kv_len, &len, sizeof len);
    if (st == GD_OK) st = gd_program_run(p);
    if (st == GD_OK) st = gd_tensor_read(logits, e->logits, sizeof(float) * (size_t)e->cfg.vocab_size);
    if (st == GD_OK) e->len += T;
    return st;
}

static gd_status check_ids(gd_lm_engine *e, const int32_t *ids, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->cfg.vocab_size)
            return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "token %lld is id %d, outside the model's vocabulary of %lld",
                               (long long)i, (int)ids[i], (long long)e->cfg.vocab_size);
    if (e->len + n > e->max_len)
        return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "%lld tokens do not fit: the KV cache holds %lld positions and %lld are used",
                           (long long)n, (long long)e->max_len, (long long)e->len);
    return GD_OK;
}

gd_status gd_lm_engine_prefill(gd_lm_engine *e, const int32_t *ids, int64_t n, const float **logits)
{
    if (e == NULL) return GD_ERR_INVALID;
    if (ids == NULL || logits == NULL) return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "gd_lm_engine_prefill: NULL argument");
    if (n < 1) return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "an empty prompt (give at least one token)");
    e->len = 0; /* a new sequence */
    gd_status st = check_ids(e, ids, n);
    int64_t done = 0;
    for (; st == GD_OK && n - done >= e->chunk; done += e->chunk)
        st = run_at(e, e->prefill, e->ids_p, ids + done, e->chunk, e->logits_p);
    for (; st == GD_OK && done < n; done++) st = run_at(e, e->decode, e->ids_d, ids + done, 1, e->logits_d);
    if (st != GD_OK) e->len = 0;
    *logits = st == GD_OK ? e->logits : NULL;
    return st;
}

gd_status gd_lm_engine_step(gd_lm_engine *e, int32_t id, const float **logits)
{
    if (e == NULL) return GD_ERR_INVALID;
    if (logits == NULL) return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "gd_lm_engine_step: NULL argument");
    if (e->len == 0) return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "gd_lm_engine_step: no sequence (prefill first)");
    gd_status st = check_ids(e, &id, 1);
    if (st == GD_OK) st = run_at(e, e->decode, e->ids_d, &id, 1, e->logits_d);
    *logits = st == GD_OK ? e->logits : NULL;
    return st;
}
