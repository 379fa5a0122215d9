/* lm_engine.c — the inference engine: a model loaded once, a prompt prefilled in chunks,
 * then one token per decode step, each layer's keys and values kept in a KV cache.
 *
 * One graph holds several forward passes of the model (gd_lm_forward_cached): prefill passes
 * over `chunk` tokens and smaller counts, and a decode pass over one. They share the
 * parameters (by name) and the cache states, and read the same two runtime scalars: pos,
 * the position of their first token (where the cache is written, and RoPE's or GPT-2's
 * position offset), and kv_len = pos + T, how many cached positions attention reads. Each
 * program is compiled once; a step writes the token and the two scalars, and runs.
 *
 * A prompt is prefilled in whole chunks, and what is left by smaller passes (a quarter of
 * the chunk, a sixteenth, ..., one token: the decode program), so no padding ever reaches
 * the cache or a position table, and a short prompt does not cost a token per run.
 * Positions past the current length may hold an earlier sequence's keys: kv_len keeps
 * attention from reading them, and a new sequence overwrites them. */
#include "gradus_lm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENGINE_PASSES 8  /* chunk, chunk/4, ..., 1: at most this many sizes */
#define ENGINE_SAMPLERS 4 /* sampling settings kept compiled at once */

struct gd_lm_engine {
    gd_ctx *ctx;
    gd_graph *g;
    gd_lm_config cfg;
    gd_dtype dt; /* weights, activations and cache */
    gd_lm_quant quant;
    int64_t max_len, len;
    gd_tensor *pos, *kv_len;
    /* the forward passes, largest first; the last is over one token (the decode step) */
    int n_pass;
    int64_t size[ENGINE_PASSES];
    gd_tensor *ids[ENGINE_PASSES], *out[ENGINE_PASSES];
    gd_program *prog[ENGINE_PASSES];
    float *logits; /* vocab_size: the latest logits */
    /* decode steps that sample on the backend (gd_lm_engine_next): the decode pass, then a
     * sample node with the settings fixed, reading the draw number at run time */
    gd_tensor *draw;
    int n_samplers, next_sampler;
    struct {
        gd_sample_config c;
        gd_tensor *tok;
        gd_program *prog;
    } samplers[ENGINE_SAMPLERS];
};

static gd_status status_or(gd_ctx *ctx, gd_status fallback)
{
    return gd_ctx_status(ctx) != GD_OK ? gd_ctx_status(ctx) : fallback;
}

void gd_lm_engine_free(gd_lm_engine *e)
{
    if (e == NULL) return;
    for (int k = 0; k < e->n_pass; k++) gd_program_free(e->prog[k]);
    for (int k = 0; k < e->n_samplers; k++) gd_program_free(e->samplers[k].prog);
    gd_graph_free(e->g);
    free(e->logits);
    free(e);
}

/* The logits of the last position of a (1, T, V) forward pass, (1, 1, V) in f32. */
static gd_tensor *last_position(gd_tensor *logits)
{
    if (logits == NULL) return NULL;
    int64_t T = gd_tensor_dim(logits, 1);
    gd_tensor *last = gd_slice(logits, 1, T - 1, T);
    return last != NULL && gd_tensor_dtype(last) != GD_F32 ? gd_cast(last, GD_F32) : last;
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
    if (c != NULL && c->use_dtype) {
        e->dt = c->dtype;
        if (e->dt != GD_F32 && e->dt != GD_BF16 && e->dt != GD_F16) {
            gd_lm_engine_free(e);
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_lm_engine_open: dtype %s; f32, bf16 or f16", gd_dtype_name(e->dt));
        }
    } else if ((st = gd_lm_model_dtype(ctx, model_dir, &e->dt)) != GD_OK) {
        gd_lm_engine_free(e);
        return st;
    }
    e->quant = c != NULL ? c->quantize : GD_LM_FLOAT;
    int64_t want = c != NULL ? c->max_len : 0, chunk = c != NULL ? c->chunk : 0;
    if (want < 0 || chunk < 0) {
        gd_lm_engine_free(e);
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_lm_engine_open: max_len %lld and chunk %lld must not be negative",
                           (long long)want, (long long)chunk);
    }
    e->max_len = want > 0 && want < e->cfg.max_seq ? want : e->cfg.max_seq;
    if (chunk == 0) chunk = 64;
    if (chunk > e->max_len) chunk = e->max_len;
    for (int64_t t = chunk; e->n_pass < ENGINE_PASSES - 1 && t > 1; t /= 4) e->size[e->n_pass++] = t;
    e->size[e->n_pass++] = 1;

    e->g = gd_graph_new(ctx);
    e->logits = malloc(sizeof(float) * (size_t)e->cfg.vocab_size);
    if (e->g == NULL || e->logits == NULL) {
        gd_lm_engine_free(e);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
    }
    e->pos = gd_input(e->g, "pos", GD_I32, 0, NULL);
    e->kv_len = gd_input(e->g, "kv_len", GD_I32, 0, NULL);
    e->draw = gd_input(e->g, "draw", GD_I64, 1, (int64_t[]){1});
    for (int k = 0; k < e->n_pass && st == GD_OK; k++) {
        char name[32];
        snprintf(name, sizeof name, "ids.%lld", (long long)e->size[k]);
        e->ids[k] = gd_input(e->g, name, GD_I32, 2, (int64_t[]){1, e->size[k]});
        e->out[k] =
            last_position(
                gd_lm_forward_quant(e->g, &e->cfg, e->ids[k], e->pos, e->kv_len, e->max_len, e->dt, e->quant));
        if (e->out[k] == NULL) st = status_or(ctx, GD_ERR_INVALID);
    }
    if (st == GD_OK) st = gd_lm_checkpoint_load(ctx, e->g, &e->cfg, model_dir, 0, NULL);
    /* Without GD_COMPILE_UPDATES: each program runs the cache writes its logits need (its
     * own), not the other programs'. */
    for (int k = 0; k < e->n_pass && st == GD_OK; k++)
        if ((e->prog[k] = gd_compile(e->g, 1, &e->out[k], 0)) == NULL) st = status_or(ctx, GD_ERR_INVALID);
    if (st != GD_OK) {
        gd_lm_engine_free(e);
        return st;
    }
    *out = e;
    return GD_OK;
}

const gd_lm_config *gd_lm_engine_model(const gd_lm_engine *e) { return e != NULL ? &e->cfg : NULL; }

int64_t gd_lm_engine_length(const gd_lm_engine *e) { return e != NULL ? e->len : 0; }

/* Runs pass k over its tokens from position e->len on, and reads the logits after the last. */
static gd_status run_pass(gd_lm_engine *e, int k, const int32_t *tok)
{
    gd_program *p = e->prog[k];
    gd_tensor *ids = e->ids[k], *logits = e->out[k];
    int64_t T = e->size[k];
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
    for (int k = 0; k < e->n_pass; k++)
        for (; st == GD_OK && n - done >= e->size[k]; done += e->size[k]) st = run_pass(e, k, ids + done);
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
    if (st == GD_OK) st = run_pass(e, e->n_pass - 1, &id);
    *logits = st == GD_OK ? e->logits : NULL;
    return st;
}

static int same_sampling(const gd_sample_config *a, const gd_sample_config *b)
{
    int greedy = !(a->temperature > 0);
    if (greedy || !(b->temperature > 0)) return greedy == !(b->temperature > 0);
    return a->temperature == b->temperature && a->top_k == b->top_k && a->top_p == b->top_p && a->seed == b->seed;
}

/* The program that runs a decode step and samples its token with settings c: made on first
 * use over the decode pass, kept for the next steps (a few settings at once). */
static gd_status sampler_for(gd_lm_engine *e, const gd_sample_config *c, int *which)
{
    for (int k = 0; k < e->n_samplers; k++)
        if (same_sampling(&e->samplers[k].c, c)) {
            *which = k;
            return GD_OK;
        }
    int k = e->n_samplers < ENGINE_SAMPLERS ? e->n_samplers++ : e->next_sampler++ % ENGINE_SAMPLERS;
    gd_program_free(e->samplers[k].prog);
    e->samplers[k].prog = NULL;
    e->samplers[k].c = *c;
    gd_tensor *row = gd_reshape(e->out[e->n_pass - 1], 2, (int64_t[]){1, e->cfg.vocab_size});
    gd_tensor *tok = gd_sample(row, e->draw, c);
    gd_program *p = tok != NULL ? gd_compile(e->g, 1, &tok, 0) : NULL;
    if (p == NULL) {
        e->samplers[k].c.temperature = -1; /* matches no request: made again next time */
        return status_or(e->ctx, GD_ERR_INVALID);
    }
    e->samplers[k].tok = tok;
    e->samplers[k].prog = p;
    *which = k;
    return GD_OK;
}

gd_status gd_lm_engine_next(gd_lm_engine *e, int32_t id, const gd_sample_config *c, int32_t *next)
{
    if (e == NULL) return GD_ERR_INVALID;
    if (c == NULL || next == NULL) return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "gd_lm_engine_next: NULL argument");
    if (e->len == 0) return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "gd_lm_engine_next: no sequence (prefill first)");
    gd_status st = check_ids(e, &id, 1);
    int k = 0;
    if (st == GD_OK) st = sampler_for(e, c, &k);
    /* the token sampled will sit at position len + 1: its draw number, as gd_lm_generate's */
    int32_t pos = (int32_t)e->len, len = (int32_t)(e->len + 1);
    int64_t draw = e->len + 1;
    if (st == GD_OK) st = gd_tensor_write(e->ids[e->n_pass - 1], &id, sizeof id);
    if (st == GD_OK) st = gd_tensor_write(e->pos, &pos, sizeof pos);
    if (st == GD_OK) st = gd_tensor_write(e->kv_len, &len, sizeof len);
    if (st == GD_OK) st = gd_tensor_write(e->draw, &draw, sizeof draw);
    if (st == GD_OK) st = gd_program_run(e->samplers[k].prog);
    if (st == GD_OK) st = gd_tensor_read(e->samplers[k].tok, next, sizeof *next);
    if (st == GD_OK) e->len += 1;
    return st;
}
