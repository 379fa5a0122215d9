/* lm_eval.c — a model's loss on held-out tokens (perplexity): windows of seq + 1 tokens,
 * inputs the first seq and targets the last seq, batch windows per run of one compiled
 * program, the mean loss of each run weighted by its tokens. */
#include "gradus_lm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

gd_status gd_lm_evaluate(gd_ctx *ctx, const char *where, const int32_t *ids, int64_t n, const gd_lm_eval_config *c,
                         gd_lm_eval_result *out)
{
    if (ctx == NULL) return GD_ERR_INVALID;
    if (where == NULL || out == NULL || (ids == NULL && n > 0))
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "gd_lm_evaluate: NULL argument");
    memset(out, 0, sizeof *out);
    gd_lm_config cfg;
    gd_status st = gd_lm_model_config(ctx, where, &cfg);
    if (st != GD_OK) return st;
    int64_t T = c != NULL && c->seq > 0 ? c->seq : (cfg.max_seq < 256 ? cfg.max_seq : 256);
    int64_t B = c != NULL && c->batch > 0 ? c->batch : 8;
    gd_dtype dt = c != NULL && c->dtype != 0 ? c->dtype : GD_F32;
    if (T > cfg.max_seq)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "evaluation windows of %lld tokens, but the model has %lld positions",
                           (long long)T, (long long)cfg.max_seq);
    int64_t windows = n / (T + 1), limit = c != NULL && c->max_tokens > 0 ? c->max_tokens : INT64_MAX;
    if (windows < 1)
        return gd_ctx_fail(ctx, GD_ERR_INVALID, "%lld tokens are fewer than one window of %lld + 1", (long long)n,
                           (long long)T);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= cfg.vocab_size)
            return gd_ctx_fail(ctx, GD_ERR_INVALID, "token %lld is id %d, outside the model's vocabulary of %lld",
                               (long long)i, (int)ids[i], (long long)cfg.vocab_size);
    if (B > windows) B = windows;
    gd_graph *g = gd_graph_new(ctx);
    gd_tensor *x = gd_input(g, "ids", GD_I32, 2, (int64_t[]){B, T}), *y = gd_input(g, "targets", GD_I32, 2, (int64_t[]){B, T});
    gd_lm_quant q = c != NULL ? c->quantize : GD_LM_FLOAT;
    gd_tensor *loss = gd_lm_forward_loss(g, &cfg, x, y, dt, q);
    gd_program *p = NULL;
    int32_t *bx = malloc(sizeof *bx * (size_t)(B * T)), *by = malloc(sizeof *by * (size_t)(B * T));
    if (loss == NULL) st = gd_ctx_status(ctx) != GD_OK ? gd_ctx_status(ctx) : GD_ERR_INVALID;
    else if (bx == NULL || by == NULL) st = gd_ctx_fail(ctx, GD_ERR_NOMEM, "out of memory");
    if (st == GD_OK) st = gd_lm_checkpoint_load(ctx, g, &cfg, where, 0, NULL);
    if (st == GD_OK && (p = gd_compile(g, 1, &loss, 0)) == NULL) st = gd_ctx_status(ctx);
    double sum = 0;
    int64_t tokens = 0;
    /* whole batches only: the windows past the last whole batch are left out too */
    for (int64_t w = 0; st == GD_OK && w + B <= windows && tokens < limit; w += B) {
        for (int64_t b = 0; b < B; b++) {
            memcpy(bx + b * T, ids + (w + b) * (T + 1), sizeof *bx * (size_t)T);
            memcpy(by + b * T, ids + (w + b) * (T + 1) + 1, sizeof *by * (size_t)T);
        }
        float l = 0;
        if ((st = gd_tensor_write(x, bx, sizeof *bx * (size_t)(B * T))) == GD_OK &&
            (st = gd_tensor_write(y, by, sizeof *by * (size_t)(B * T))) == GD_OK && (st = gd_program_run(p)) == GD_OK)
            st = gd_tensor_read(loss, &l, sizeof l);
        sum += (double)l * (double)(B * T);
        tokens += B * T;
    }
    if (st == GD_OK) {
        out->tokens = tokens;
        out->nll = sum / (double)tokens;
        out->perplexity = exp(out->nll);
    }
    free(bx);
    free(by);
    gd_program_free(p);
    gd_graph_free(g);
    return st;
}
