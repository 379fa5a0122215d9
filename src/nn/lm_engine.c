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
 * attention from reading them, and a new sequence overwrites them.
 *
 * A batch (config.batch > 1) decodes several sequences at once, each at its own length:
 * pos and kv_len are then vectors, one per sequence, and every pass runs all of them.
 * Prompts of different lengths share the chunk passes over their common length, then go
 * on one token per decode pass; a sequence with nothing to add is fed a placeholder token
 * at its next free position, which it does not count, and which its next real token
 * overwrites. */
#include "gradus_lm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENGINE_PASSES 8  /* chunk, chunk/4, ..., 1: at most this many sizes */
#define ENGINE_SAMPLERS 4 /* sampling settings kept compiled at once */
#define ENGINE_AHEAD 16   /* decode steps queued before their tokens are read back */

struct gd_lm_engine {
    gd_ctx *ctx;
    gd_graph *g;
    gd_lm_config cfg;
    gd_dtype dt; /* weights, activations and cache */
    gd_lm_quant quant;
    int64_t max_len, len; /* len: the first sequence's (the only one without a batch) */
    int64_t B, *lens;     /* sequences, and each one's length */
    int32_t *posv, *lenv, *tokv; /* staging for a pass: positions, lengths, tokens (B x chunk) */
    int64_t *drawv;
    gd_tensor *pos, *kv_len;
    /* the forward passes, largest first; the last is over one token (the decode step) */
    int n_pass;
    int64_t size[ENGINE_PASSES];
    gd_tensor *ids[ENGINE_PASSES], *out[ENGINE_PASSES];
    gd_program *prog[ENGINE_PASSES];
    float *logits; /* B x vocab_size: the latest logits of each sequence */
    float *pass_logits; /* B x vocab_size: those a pass just made */
    /* decode steps that sample on the backend (gd_lm_engine_next): the decode pass, then a
     * sample node with the settings fixed, reading the draw number at run time */
    gd_tensor *draw;
    /* gd_lm_engine_decode: each sequence's sampled tokens (B, max_len, 1), the one sampled
     * at position p (for p + 1) at index p; read back a few steps at a time */
    gd_tensor *hist;
    int32_t *histv;
    int n_samplers, next_sampler;
    struct {
        gd_sample_config c;
        gd_tensor *tok;
        gd_program *prog;
        gd_program *chain; /* the same, then the tokens recorded and fed to the next step */
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
    for (int k = 0; k < e->n_samplers; k++) gd_program_free(e->samplers[k].prog), gd_program_free(e->samplers[k].chain);
    gd_graph_free(e->g);
    free(e->logits);
    free(e->pass_logits);
    free(e->lens), free(e->posv), free(e->lenv), free(e->tokv), free(e->drawv), free(e->histv);
    free(e);
}

/* The logits of the last position of a (B, T, V) forward pass, (B, 1, V) in f32. */
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

    e->B = c != NULL && c->batch > 0 ? c->batch : 1;
    if (e->B > 65536) {
        gd_lm_engine_free(e);
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_lm_engine_open: a batch of %lld sequences; at most 65536",
                           (long long)(c != NULL ? c->batch : 0));
    }
    size_t B = (size_t)e->B, V = (size_t)e->cfg.vocab_size;
    e->g = gd_graph_new(ctx);
    e->logits = malloc(sizeof(float) * B * V);
    e->pass_logits = malloc(sizeof(float) * B * V);
    e->lens = calloc(B, sizeof *e->lens);
    e->posv = calloc(B, sizeof *e->posv), e->lenv = calloc(B, sizeof *e->lenv), e->drawv = calloc(B, sizeof *e->drawv);
    e->tokv = calloc(B * (size_t)e->size[0], sizeof *e->tokv);
    if (e->g == NULL || e->logits == NULL || e->pass_logits == NULL || e->lens == NULL || e->posv == NULL ||
        e->lenv == NULL || e->drawv == NULL || e->tokv == NULL) {
        gd_lm_engine_free(e);
        return gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
    }
    /* one sequence: scalars (what every backend's fast kernels take); a batch: vectors */
    int vec = e->B > 1;
    e->pos = gd_input(e->g, "pos", GD_I32, vec, (int64_t[]){e->B});
    e->kv_len = gd_input(e->g, "kv_len", GD_I32, vec, (int64_t[]){e->B});
    e->draw = gd_input(e->g, "draw", GD_I64, 1, (int64_t[]){e->B});
    e->hist = gd_state(e->g, "decode.tokens", GD_I32, 3, (int64_t[]){e->B, e->max_len, 1});
    e->histv = malloc(sizeof *e->histv * B * (size_t)e->max_len);
    if (e->histv == NULL) st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
    for (int k = 0; k < e->n_pass && st == GD_OK; k++) {
        char name[32];
        snprintf(name, sizeof name, "ids.%lld", (long long)e->size[k]);
        e->ids[k] = gd_input(e->g, name, GD_I32, 2, (int64_t[]){e->B, e->size[k]});
        e->out[k] =
            last_position(
                gd_lm_forward_quant(e->g, &e->cfg, e->ids[k], e->pos, e->kv_len, e->max_len, e->dt, e->quant));
        if (e->out[k] == NULL) st = status_or(ctx, GD_ERR_INVALID);
    }
    if (st == GD_OK) st = gd_lm_checkpoint_load(ctx, e->g, &e->cfg, model_dir, 0, NULL);
    /* written once here, then only by steps that sample with a temperature */
    if (st == GD_OK) st = gd_tensor_write(e->draw, e->drawv, sizeof *e->drawv * B);
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

/* Runs pass k: row b's T tokens (tokv) from position posv[b] on, attention over lenv[b]
 * cached positions; reads the logits after each row's last token into pass_logits. */
static gd_status run_pass(gd_lm_engine *e, int k)
{
    size_t B = (size_t)e->B;
    gd_status st = gd_tensor_write(e->ids[k], e->tokv, sizeof *e->tokv * B * (size_t)e->size[k]);
    if (st == GD_OK) st = gd_tensor_write(e->pos, e->posv, sizeof *e->posv * B);
    if (st == GD_OK) st = gd_tensor_write(e->kv_len, e->lenv, sizeof *e->lenv * B);
    if (st == GD_OK) st = gd_program_run(e->prog[k]);
    if (st == GD_OK)
        st = gd_tensor_read(e->out[k], e->pass_logits, sizeof(float) * B * (size_t)e->cfg.vocab_size);
    return st;
}

static gd_status check_ids(gd_lm_engine *e, const int32_t *ids, int64_t n, int64_t used)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->cfg.vocab_size)
            return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "token %lld is id %d, outside the model's vocabulary of %lld",
                               (long long)i, (int)ids[i], (long long)e->cfg.vocab_size);
    if (used + n > e->max_len)
        return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "%lld tokens do not fit: the KV cache holds %lld positions and %lld are used",
                           (long long)n, (long long)e->max_len, (long long)used);
    return GD_OK;
}

/* Stages a pass of T tokens per row: row b adds tok[b][0..T) when tok[b] is not NULL, or a
 * placeholder at its next free position (uncounted) otherwise. */
static void stage(gd_lm_engine *e, int64_t T, const int32_t *const *tok, int64_t at)
{
    for (int64_t b = 0; b < e->B; b++) {
        int64_t L = e->lens[b];
        if (tok[b] == NULL && L + T > e->max_len) L = e->max_len - T; /* a full row's placeholder */
        e->posv[b] = (int32_t)L;
        e->lenv[b] = (int32_t)(L + T);
        for (int64_t t = 0; t < T; t++) e->tokv[b * T + t] = tok[b] != NULL ? tok[b][at + t] : 0;
    }
}

/* After a pass: rows that added tokens count them and keep their logits. */
static void commit(gd_lm_engine *e, int64_t T, const int32_t *const *tok)
{
    size_t V = (size_t)e->cfg.vocab_size;
    for (int64_t b = 0; b < e->B; b++)
        if (tok[b] != NULL) {
            e->lens[b] += T;
            memcpy(e->logits + (size_t)b * V, e->pass_logits + (size_t)b * V, sizeof(float) * V);
        }
    e->len = e->lens[0];
}

gd_status gd_lm_engine_prefill_batch(gd_lm_engine *e, const int32_t *const *prompts, const int64_t *n,
                                     const float **logits)
{
    if (e == NULL) return GD_ERR_INVALID;
    if (prompts == NULL || n == NULL || logits == NULL)
        return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "gd_lm_engine_prefill: NULL argument");
    *logits = NULL;
    int64_t common = INT64_MAX, longest = 0;
    gd_status st = GD_OK;
    for (int64_t b = 0; b < e->B && st == GD_OK; b++) {
        if (prompts[b] == NULL || n[b] < 1)
            return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "prompt %lld is empty (give at least one token)", (long long)b);
        st = check_ids(e, prompts[b], n[b], 0);
        if (n[b] < common) common = n[b];
        if (n[b] > longest) longest = n[b];
    }
    for (int64_t b = 0; b < e->B; b++) e->lens[b] = 0; /* new sequences */
    e->len = 0;
    /* the common length in whole chunks and the smaller passes, every row alike ... */
    int64_t done = 0;
    for (int k = 0; k < e->n_pass && st == GD_OK; k++)
        for (; st == GD_OK && common - done >= e->size[k]; done += e->size[k]) {
            stage(e, e->size[k], prompts, done);
            if ((st = run_pass(e, k)) == GD_OK) commit(e, e->size[k], prompts);
        }
    /* ... then a token per decode pass for the rows with more */
    const int32_t **rows = malloc(sizeof *rows * (size_t)e->B);
    if (rows == NULL && st == GD_OK) st = gd_ctx_fail(e->ctx, GD_ERR_NOMEM, "out of memory");
    for (int64_t j = common; j < longest && st == GD_OK; j++) {
        for (int64_t b = 0; b < e->B; b++) rows[b] = j < n[b] ? prompts[b] : NULL;
        stage(e, 1, rows, j);
        if ((st = run_pass(e, e->n_pass - 1)) == GD_OK) commit(e, 1, rows);
    }
    free(rows);
    if (st != GD_OK) {
        for (int64_t b = 0; b < e->B; b++) e->lens[b] = 0;
        e->len = 0;
        return st;
    }
    *logits = e->logits;
    return GD_OK;
}

gd_status gd_lm_engine_prefill(gd_lm_engine *e, const int32_t *ids, int64_t n, const float **logits)
{
    if (e == NULL) return GD_ERR_INVALID;
    if (e->B != 1)
        return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "gd_lm_engine_prefill: the engine decodes a batch of %lld; use "
                                                   "gd_lm_engine_prefill_batch", (long long)e->B);
    if (ids == NULL || logits == NULL) return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "gd_lm_engine_prefill: NULL argument");
    if (n < 1) return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "an empty prompt (give at least one token)");
    return gd_lm_engine_prefill_batch(e, &ids, &n, logits);
}

/* Stages one decode step: row b adds ids[b], or idles when it is negative. */
/* Whether sequence b may take decode token ids[b]: it has a prompt, and the id is valid. */
static gd_status check_step(gd_lm_engine *e, const int32_t *ids, int64_t b)
{
    if (e->lens[b] == 0)
        return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "sequence %lld: no prompt yet (prefill first)", (long long)b);
    return check_ids(e, ids + b, 1, e->lens[b]);
}

static gd_status stage_step(gd_lm_engine *e, const int32_t *ids, const int32_t **rows)
{
    for (int64_t b = 0; b < e->B; b++) {
        rows[b] = NULL;
        if (ids[b] < 0) continue;
        gd_status st = check_step(e, ids, b);
        if (st != GD_OK) return st;
        rows[b] = ids + b;
    }
    stage(e, 1, rows, 0);
    return GD_OK;
}

gd_status gd_lm_engine_step_batch(gd_lm_engine *e, const int32_t *ids, const float **logits)
{
    if (e == NULL) return GD_ERR_INVALID;
    if (ids == NULL || logits == NULL) return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "gd_lm_engine_step: NULL argument");
    *logits = NULL;
    const int32_t *rows[1];
    const int32_t **r = e->B == 1 ? rows : malloc(sizeof *r * (size_t)e->B);
    if (r == NULL) return gd_ctx_fail(e->ctx, GD_ERR_NOMEM, "out of memory");
    gd_status st = stage_step(e, ids, r);
    if (st == GD_OK && (st = run_pass(e, e->n_pass - 1)) == GD_OK) commit(e, 1, r);
    if (r != rows) free(r);
    if (st == GD_OK) *logits = e->logits;
    return st;
}

gd_status gd_lm_engine_step(gd_lm_engine *e, int32_t id, const float **logits)
{
    if (e == NULL) return GD_ERR_INVALID;
    if (logits == NULL) return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "gd_lm_engine_step: NULL argument");
    if (e->B != 1)
        return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "gd_lm_engine_step: the engine decodes a batch of %lld; use "
                                                   "gd_lm_engine_step_batch", (long long)e->B);
    if (id < 0) return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "token id %d is negative", (int)id);
    return gd_lm_engine_step_batch(e, &id, logits);
}

int64_t gd_lm_engine_length_of(const gd_lm_engine *e, int64_t b)
{
    return e != NULL && b >= 0 && b < e->B ? e->lens[b] : 0;
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
    gd_program_free(e->samplers[k].chain);
    e->samplers[k].prog = e->samplers[k].chain = NULL;
    e->samplers[k].c = *c;
    gd_tensor *row = gd_reshape(e->out[e->n_pass - 1], 2, (int64_t[]){e->B, e->cfg.vocab_size});
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

/* The draw numbers of a staged step: the token sampled will sit at position posv + 1, whose
 * draw number it takes, as gd_lm_generate's; sequence b draws from its own stream, b * 2^40
 * further on (sequence 0's is a single sequence's), so that a batch of one prompt gives
 * different continuations. */
static void stage_draws(gd_lm_engine *e)
{
    for (int64_t b = 0; b < e->B; b++) e->drawv[b] = e->posv[b] + 1 + (b << 40);
}

/* A staged decode step's inputs onto the backend: ids, positions, lengths, and the draw
 * numbers when the step samples (a greedy pick reads none: a copy less each step). */
static gd_status write_step(gd_lm_engine *e, int draws)
{
    const size_t B = (size_t)e->B;
    gd_status st = gd_tensor_write(e->ids[e->n_pass - 1], e->tokv, sizeof *e->tokv * B);
    if (st == GD_OK) st = gd_tensor_write(e->pos, e->posv, sizeof *e->posv * B);
    if (st == GD_OK) st = gd_tensor_write(e->kv_len, e->lenv, sizeof *e->lenv * B);
    if (st == GD_OK && draws) st = gd_tensor_write(e->draw, e->drawv, sizeof *e->drawv * B);
    return st;
}

gd_status gd_lm_engine_next_batch(gd_lm_engine *e, const int32_t *ids, const gd_sample_config *c, int32_t *next)
{
    if (e == NULL) return GD_ERR_INVALID;
    if (ids == NULL || c == NULL || next == NULL)
        return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "gd_lm_engine_next: NULL argument");
    const int32_t *rows[1];
    const int32_t **r = e->B == 1 ? rows : malloc(sizeof *r * (size_t)e->B);
    if (r == NULL) return gd_ctx_fail(e->ctx, GD_ERR_NOMEM, "out of memory");
    int k = 0;
    gd_status st = stage_step(e, ids, r);
    if (st == GD_OK) st = sampler_for(e, c, &k);
    stage_draws(e);
    size_t B = (size_t)e->B;
    if (st == GD_OK) st = write_step(e, c->temperature > 0);
    if (st == GD_OK) st = gd_program_run(e->samplers[k].prog);
    if (st == GD_OK) st = gd_tensor_read(e->samplers[k].tok, next, sizeof *next * B);
    if (st == GD_OK) {
        for (int64_t b = 0; b < e->B; b++) e->lens[b] += r[b] != NULL;
        e->len = e->lens[0];
    }
    if (r != rows) free(r);
    return st;
}

gd_status gd_lm_engine_next(gd_lm_engine *e, int32_t id, const gd_sample_config *c, int32_t *next)
{
    if (e == NULL) return GD_ERR_INVALID;
    if (e->B != 1)
        return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "gd_lm_engine_next: the engine decodes a batch of %lld; use "
                                                   "gd_lm_engine_next_batch", (long long)e->B);
    if (id < 0) return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "token id %d is negative", (int)id);
    return gd_lm_engine_next_batch(e, &id, c, next);
}

/* Sampler k's step with its feedback: the sampled tokens recorded at each sequence's
 * position (before the advance, which must come after every reader of the old position),
 * then fed to the decode pass's ids, with pos, kv_len and draw one further on. Made on
 * first use. */
static gd_status chain_for(gd_lm_engine *e, int k)
{
    if (e->samplers[k].chain != NULL) return GD_OK;
    gd_tensor *tok = e->samplers[k].tok, *t[5];
    t[4] = gd_cache_write(e->hist, gd_reshape(tok, 3, (int64_t[]){e->B, 1, 1}), e->pos);
    if (t[4] == NULL) return status_or(e->ctx, GD_ERR_INVALID);
    gd_status st = gd_decode_advance(tok, e->ids[e->n_pass - 1], e->pos, e->kv_len, e->draw, t);
    if (st != GD_OK) return status_or(e->ctx, st);
    if ((e->samplers[k].chain = gd_compile(e->g, 5, t, 0)) == NULL) return status_or(e->ctx, GD_ERR_INVALID);
    return GD_OK;
}

gd_status gd_lm_engine_decode(gd_lm_engine *e, const int32_t *ids, const gd_sample_config *c, int64_t n,
                              gd_lm_step_fn on_step, void *user)
{
    if (e == NULL) return GD_ERR_INVALID;
    if (ids == NULL || c == NULL || on_step == NULL)
        return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "gd_lm_engine_decode: NULL argument");
    if (n < 0) return gd_ctx_fail(e->ctx, GD_ERR_INVALID, "gd_lm_engine_decode: %lld steps", (long long)n);
    for (int64_t b = 0; b < e->B; b++) {
        gd_status st = check_step(e, ids, b);
        if (st == GD_OK && e->lens[b] + n > e->max_len)
            st = gd_ctx_fail(e->ctx, GD_ERR_INVALID, "sequence %lld: %lld steps do not fit: the KV cache holds %lld "
                             "positions and %lld are used", (long long)b, (long long)n, (long long)e->max_len,
                             (long long)e->lens[b]);
        if (st != GD_OK) return st;
    }
    if (n == 0) return GD_OK;
    int k = 0;
    gd_status st = sampler_for(e, c, &k);
    if (st == GD_OK) st = chain_for(e, k);
    size_t B = (size_t)e->B;
    for (int64_t b = 0; b < e->B; b++) {
        e->posv[b] = (int32_t)e->lens[b];
        e->lenv[b] = (int32_t)(e->lens[b] + 1);
        e->tokv[b] = ids[b];
    }
    stage_draws(e);
    if (st == GD_OK) st = write_step(e, 1); /* the chain advances the draw numbers even when greedy */
    /* The steps queued ahead run while the host hands the previous ones' tokens on; a
     * stop leaves the steps past it uncounted (what they cached lies past the lengths).
     * The first bursts are short, so the first tokens come out soon. */
    int32_t *next = e->tokv; /* free now: the step's ids are on the device */
    int stop = 0;
    for (int64_t done = 0, ahead = 4; st == GD_OK && !stop && done < n; done += ahead, ahead *= 2) {
        if (ahead > ENGINE_AHEAD) ahead = ENGINE_AHEAD;
        if (ahead > n - done) ahead = n - done;
        for (int64_t j = 0; j < ahead && st == GD_OK; j++) st = gd_program_run(e->samplers[k].chain);
        if (st == GD_OK) st = gd_tensor_read(e->hist, e->histv, sizeof *e->histv * B * (size_t)e->max_len);
        for (int64_t j = 0; j < ahead && st == GD_OK && !stop; j++) {
            for (int64_t b = 0; b < e->B; b++) next[b] = e->histv[b * e->max_len + e->lens[b]++];
            e->len = e->lens[0];
            stop = on_step(user, next);
        }
    }
    return st;
}
